//! HStore against the executable specification (proptest over operation sequences on tables
//! small enough for chains and fingerprint collisions), under the schedule explorer (the default
//! protocol clean, each protection removed and found), and the digest's gaps V1–V3 shown in the
//! paper's protocol with crash and reuse scenarios.

use dmkit_indexes::IndexKind;
use dmkit_indexes::hstore::{HStore, HStoreOptions};
use dmkit_indexes::spec::{Op, Outcome};
use dmkit_verify::harness::run_sequence_checked;
use proptest::prelude::*;

fn key(k: u16) -> Vec<u8> {
    // Distinct keys of several lengths, so blocks and verification READs vary.
    let mut key = k.to_be_bytes().to_vec();
    key.extend(std::iter::repeat_n(k as u8 ^ 0x5a, (k % 7) as usize));
    key
}

fn ops(keys: u16) -> impl Strategy<Value = Vec<Op>> {
    let k = (0..keys).prop_map(key);
    let value = prop::collection::vec(any::<u8>(), 0..90);
    let bound = prop_oneof![
        Just(std::ops::Bound::Unbounded),
        k.clone().prop_map(std::ops::Bound::Included),
        k.clone().prop_map(std::ops::Bound::Excluded),
    ];
    let op = prop_oneof![
        2 => k.clone().prop_map(|key| Op::Search { key }),
        5 => (k.clone(), value.clone()).prop_map(|(key, value)| Op::Insert { key, value }),
        1 => (k.clone(), value).prop_map(|(key, value)| Op::Update { key, value }),
        2 => k.prop_map(|key| Op::Delete { key }),
        1 => (bound.clone(), bound, 0..40usize).prop_map(|(start, end, limit)| Op::Scan { start, end, limit }),
    ];
    prop::collection::vec(op, 1..120)
}

/// Tiny tables: chains and fingerprint collisions on every few keys.
fn small(config: &str, slots: u8, fp_bits: u8) -> HStoreOptions {
    let mut o = HStoreOptions {
        buckets: 4,
        slots,
        fp_bits,
        hts_workers: 2,
        sls_partitions: 3,
        rpc_threads: 2,
        pool_buckets: 64,
        max_key_bytes: 16,
        max_value_bytes: 128,
        chunk_bytes: 1 << 20,
        ..HStoreOptions::default()
    };
    o.configure(config).unwrap();
    o
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 48 } else { 256 }, ..ProptestConfig::default() })]

    /// Sequences over every configuration, 1- to 7-slot buckets and 1- to 8-bit fingerprints.
    #[test]
    fn hstore_sequences_match_the_specification(
        config in prop_oneof![Just("hstore"), Just("hstore-sync"), Just("faithful"), Just("faithful-sync")],
        slots in prop_oneof![Just(1u8), Just(2), Just(7)],
        fp_bits in prop_oneof![Just(1u8), Just(3), Just(8)],
        ops in ops(60),
    ) {
        let o = small(config, slots, fp_bits);
        let (got, want, walk) = run_sequence_checked::<HStore>(&o, &ops);
        prop_assert_eq!(got, want);
        walk.map_err(|e| TestCaseError::fail(format!("invariants: {e}")))?;
    }
}

#[test]
fn bad_input_is_an_error() {
    use dmkit_indexes::IndexError::*;
    let o = small("hstore", 2, 2);
    let ops = vec![
        Op::Insert { key: vec![], value: vec![1] },
        Op::Insert { key: vec![1; 17], value: vec![1] },
        Op::Insert { key: vec![1; 8], value: vec![1; 129] },
        Op::Search { key: vec![1; 17] },
        Op::Insert { key: vec![1; 8], value: vec![1; 128] },
        Op::Search { key: vec![1; 8] },
    ];
    let (got, _, walk) = run_sequence_checked::<HStore>(&o, &ops);
    assert_eq!(got[0], Outcome::Failed(KeyTooShort { len: 0, min: 1 }));
    assert_eq!(got[1], Outcome::Failed(KeyTooLong { len: 17, max: 16 }));
    assert_eq!(got[2], Outcome::Failed(ValueTooLong { len: 129, max: 128 }));
    assert_eq!(got[3], Outcome::Failed(KeyTooLong { len: 17, max: 16 }));
    assert_eq!(got[4], Outcome::Existed(false));
    assert_eq!(got[5], Outcome::Found(Some(vec![1; 128])));
    walk.unwrap();
    let bad = HStoreOptions { max_key_bytes: 300, ..HStoreOptions::default() };
    assert!(HStore::validate(&bad).unwrap_err().contains("keys of 1 to 255"));
    let bad = HStoreOptions { slots: 8, ..HStoreOptions::default() };
    assert!(HStore::validate(&bad).unwrap_err().contains("slots"));
    let bad = HStoreOptions { max_message_bytes: 80, max_key_bytes: 64, ..HStoreOptions::default() };
    assert!(HStore::validate(&bad).unwrap_err().contains("max_message_bytes"));
    assert!(HStoreOptions::named("nope").unwrap_err().contains("configurations: hstore, hstore-sync"));
}

mod explored {
    use dmkit_indexes::hstore::HStore;
    use dmkit_indexes::spec::Op;
    use dmkit_verify::explore::Mode;
    use dmkit_verify::harness::{IndexScenario, check_index};
    use std::time::Duration;

    fn budget() -> Duration {
        Duration::from_secs(if std::env::var("CI").is_ok() { 4 } else { 15 })
    }

    fn scenario(preset: &str, config: Option<&str>, plant: Option<&str>) -> IndexScenario<HStore> {
        IndexScenario::from_preset(Some(preset), config, plant, 1).unwrap()
    }

    #[test]
    fn the_default_protocol_is_clean_and_not_vacuous() {
        for (preset, mode) in [
            ("default", Mode::Random),
            ("default", Mode::Pct { depth: 3 }),
            ("writes", Mode::Random),
            ("crash-hts", Mode::Random),
            ("crash-sls", Mode::Random),
            ("pair", Mode::Dfs { preemptions: 2 }),
            // A spent pool: `dmkit check --preset full` failed at its ninth random schedule when
            // the HTS counted a bucket's slots before reserving it (see the module doc).
            ("full", Mode::Random),
            ("read-failure", Mode::Random),
        ] {
            check_index(&scenario(preset, None, None), mode, 3, budget(), u64::MAX).assert_clean(
                &format!("{preset} {mode:?}"),
                0,
                mode == Mode::Random,
            );
        }
    }

    use dmkit_verify::harness::find_replayable as found;

    /// A recovery the index abandons is a violation, although every operation after it fails
    /// with an error of unknown effect (which the linearizability check accepts): both servers
    /// crashed at once, a case HStore does not recover from (module doc), so the restarted HTS
    /// gives up its recovery.
    #[test]
    fn an_abandoned_recovery_is_a_violation() {
        use dmkit_indexes::checking::FaultPlan;
        let mut s = scenario("crash-hts", None, None);
        s.faults = dmkit_verify::harness::simulated(&FaultPlan {
            crashes: vec![s.options.hts_node(), s.options.sls_node()],
            ..FaultPlan::default()
        });
        let message = found("both servers crashed", &s, Mode::Random, 2_000);
        assert!(message.contains("abandoned work"), "{message}");
    }

    fn clean(name: &str, s: &IndexScenario<HStore>, mode: Mode) {
        check_index(s, mode, 1, budget(), u64::MAX).assert_clean(name, 101, false);
    }

    /// Each protection of the default protocol, removed, is found on the default preset.
    #[test]
    fn each_protection_is_needed() {
        for (bug, expect) in [
            ("no-commit-wait", "not linearizable"),
            ("no-grace", "not linearizable"),
            ("pipelined-sync", ""),
            ("fp-only", "not linearizable"),
        ] {
            let message = found(bug, &scenario("default", None, Some(bug)), Mode::Random, 20_000);
            assert!(message.contains(expect), "{bug}: {message}");
        }
        // A logged entry whose apply met a timed-out READ, answered with the failure: the
        // skiplist keeps a write the table lacks.
        let bug = "no-apply-retry";
        let message = found(bug, &scenario("read-failure", None, Some(bug)), Mode::Random, 20_000);
        assert!(message.contains("not linearizable") || message.contains("invariant"), "{bug}: {message}");
    }

    /// A GET's two READs (ready word, bucket) may sample in either order: a compute node that
    /// trusts a table incarnation it has not seen complete can read a bucket of the table a
    /// restarted HTS is still rebuilding and miss a present key. Confirming a new incarnation
    /// with a fenced batch closes it (the crash-hts preset runs clean in the test above).
    ///
    /// Ignored, and open: this was found (random, within 50 000 schedules) only through a READ
    /// posted before the crash that executed on the restarted HTS's half-built table, which the
    /// simulator no longer allows (3dca65a: a verb posted to one incarnation never reaches the
    /// next, as on hardware). What remains is a GET posted during the rebuild whose two READs
    /// straddle the ready word's write; 50 000 PCT schedules with frequent probes and each QP
    /// its own actor (below) do not reach it. Until a scenario does, this protection has no
    /// test that shows the checker catching its removal. Its race handler,
    /// `incarnation_reconfirmed`, is reached by the crash-hts presets, but it counts the fenced
    /// re-read of a rebuilt table, which runs whether or not the two READs straddled the word.
    #[test]
    #[ignore = "the plant is no longer reached: see the doc comment"]
    fn a_new_table_is_confirmed_with_a_fence() {
        // Clients probe the restarted HTS often, so that GETs are posted while it rebuilds its
        // table (a verb posted before the crash fails since 3dca65a, so only these can see the
        // half-built table), and each queue pair is its own actor.
        let plant = |p| {
            let mut s = scenario("crash-hts", None, p);
            s.options.down_probe_ns = 2_000;
            s.qp_actors = true;
            s
        };
        let message = found("no-ready-fence", &plant(Some("no-ready-fence")), Mode::Pct { depth: 3 }, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
    }

    /// S3: the HTS applies a batch before the SLS logged it. A GET then sees a write a scan that
    /// starts after the GET returned does not.
    #[test]
    fn the_table_changes_only_after_the_log_sync() {
        let script = |plant| {
            // Each queue pair its own actor: the log sync (a call) can lag behind the worker's
            // verification READ, so the worker reaches its early apply with the sync in flight.
            let mut s = scenario("default", None, plant);
            s.qp_actors = true;
            let (k, other) = ((s.preset.key_of)(0), (s.preset.key_of)(1));
            let scan =
                Op::Scan { start: std::ops::Bound::Included(k.clone()), end: std::ops::Bound::Unbounded, limit: 1 };
            s.scripted(vec![
                vec![Op::Update { key: k.clone(), value: vec![9; 8] }],
                vec![
                    Op::Search { key: other },
                    Op::Search { key: k.clone() },
                    scan.clone(),
                    Op::Search { key: k },
                    scan,
                ],
            ])
        };
        let message = found("apply-before-sync", &script(Some("apply-before-sync")), Mode::Pct { depth: 3 }, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
        clean("apply-before-sync, unplanted", &script(None), Mode::Pct { depth: 3 });
    }

    /// A retried write applied again (no record of its first application) reports the key as
    /// present: PCT finds it while the HTS crashes and restarts.
    #[test]
    fn retries_need_the_record_of_their_first_application() {
        let message = found("no-dedup", &scenario("crash-hts", None, Some("no-dedup")), Mode::Pct { depth: 3 }, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
    }

    /// A3: a client that calls the HTS before its block WRITE completed. Each queue pair is its
    /// own actor, so the WRITE can lag while the call, the log sync and the table's change go
    /// on: a search that starts after the insert returned reads a slot whose block is not there.
    #[test]
    fn data_goes_before_the_index() {
        let script = |plant| {
            let mut s = scenario("default", None, plant);
            s.qp_actors = true;
            let k = (s.preset.key_of)(5);
            s.scripted(vec![
                vec![Op::Insert { key: k.clone(), value: vec![7; 8] }],
                vec![Op::Search { key: k.clone() }, Op::Search { key: k.clone() }, Op::Search { key: k }],
            ])
        };
        let message = found("no-write-wait", &script(Some("no-write-wait")), Mode::Pct { depth: 3 }, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
        clean("no-write-wait, unplanted", &script(None), Mode::Pct { depth: 3 });
    }

    /// V1 in the paper's protocol: the SLS acks a log sync and a scan applies it before the HTS
    /// changed its table, so a scan returns the new value and a GET that starts after the scan
    /// returned still reads the old one. The default protocol's scans wait for the commit.
    #[test]
    fn v1_a_scan_sees_a_write_before_a_get_does() {
        let script = |config| {
            let s = scenario("default", Some(config), None);
            let (k, other) = ((s.preset.key_of)(0), (s.preset.key_of)(1));
            let scan =
                Op::Scan { start: std::ops::Bound::Included(k.clone()), end: std::ops::Bound::Unbounded, limit: 1 };
            // The reader first searches another key, so that its scans meet the write in flight.
            s.scripted(vec![
                vec![Op::Update { key: k.clone(), value: vec![9; 8] }],
                vec![
                    Op::Search { key: other.clone() },
                    Op::Search { key: other },
                    scan.clone(),
                    Op::Search { key: k.clone() },
                    scan,
                    Op::Search { key: k },
                ],
            ])
        };
        let message = found("V1", &script("faithful"), Mode::Random, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
        clean("V1, default", &script("hstore"), Mode::Random);
    }

    /// V3 in the paper's protocol: a GET takes key 0's block address from the table; an update
    /// of key 0 frees that block, and the writer's next block (key 1's new value) reuses it at
    /// once; the GET then reads key 1's block, skips it as not its key, and reports key 0
    /// absent although it was present throughout. The default protocol's lease defers reuse.
    #[test]
    fn v3_a_freed_block_reused_under_a_reader() {
        let script = |config| {
            let s = scenario("default", Some(config), None);
            let (k0, k1) = ((s.preset.key_of)(0), (s.preset.key_of)(1));
            s.scripted(vec![
                vec![Op::Search { key: k0.clone() }, Op::Search { key: k0.clone() }],
                vec![
                    Op::Update { key: k0.clone(), value: vec![1; 8] },
                    Op::Update { key: k1.clone(), value: vec![2; 8] },
                    Op::Update { key: k0, value: vec![3; 8] },
                    Op::Update { key: k1, value: vec![4; 8] },
                ],
            ])
        };
        let message = found("V3", &script("faithful"), Mode::Random, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
        clean("V3, default", &script("hstore"), Mode::Random);
    }

    /// The paper's protocol (every gap open) fails on the default preset.
    #[test]
    fn the_paper_protocol_is_found_wrong() {
        found("faithful", &scenario("default", Some("faithful"), None), Mode::Random, 20_000);
    }
}

/// Timed runs with a crash of one server at a chosen instant: the client's outcome, what a
/// search finds after the recovery, and the invariant walk.
mod crashes {
    use dmkit_indexes::hstore::{HStore, HStoreOptions};
    use dmkit_indexes::{Index, IndexError, IndexKind};
    use dmkit_sim::{NodeCrash, Sim, SimConfig};
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    const KEY: &[u8] = b"key-v2";
    const VALUE: &[u8] = b"value";

    fn options(config: &str, plant: Option<&str>) -> HStoreOptions {
        let mut o = HStoreOptions { buckets: 64, chunk_bytes: 1 << 20, ..HStoreOptions::default() };
        o.configure(config).unwrap();
        if let Some(p) = plant {
            HStore::plant(&mut o, p).unwrap();
        }
        o
    }

    fn config(o: &HStoreOptions) -> SimConfig {
        let mut cfg = SimConfig::default();
        cfg.topology.server_nodes = 2;
        cfg.topology.server_threads = o.rpc_threads;
        cfg
    }

    /// What one run saw: the insert's result, its start and end, the search after recovery.
    #[derive(Debug)]
    struct Seen {
        insert: Result<bool, IndexError>,
        started_ns: u64,
        ended_ns: u64,
        after: Result<Option<Vec<u8>>, IndexError>,
    }

    /// Creates the index, inserts KEY, and searches it 5 ms later; the HTS (`server` 0) or the
    /// SLS (1) crashes at `crash_at_ns` (if any) and restarts 20 µs later.
    fn run(o: &HStoreOptions, server: u16, crash_at_ns: Option<u64>) -> Seen {
        let mut cfg = config(o);
        if let Some(at) = crash_at_ns {
            cfg.faults.node_crashes =
                vec![NodeCrash { node: o.memory_nodes + server, at_ns: at, restart_at_ns: Some(at + 20_000) }];
        }
        let mut sim = Sim::new(cfg).unwrap();
        HStore::install(o, &mut sim).unwrap();
        let client = sim.add_client(0).unwrap();
        let node = Arc::new(HStore::node_state(o, sim.caps()));
        let mut h = HStore::open(o, node, client.clone());
        let out = Rc::new(RefCell::new(None));
        let (c, o2, out2) = (client.clone(), o.clone(), out.clone());
        sim.spawn(&client, async move {
            HStore::create(&o2, &c).await.unwrap();
            // Start at a fixed time, whatever creating took.
            c.sleep(50_000 - c.now_ns()).await;
            let started_ns = c.now_ns();
            let insert = h.insert(KEY, VALUE).await;
            let ended_ns = c.now_ns();
            c.sleep(5_000_000).await;
            let after = h.search(KEY).await;
            *out2.borrow_mut() = Some(Seen { insert, started_ns, ended_ns, after });
        });
        sim.run().unwrap();
        HStore::check_invariants(o, &sim).unwrap_or_else(|e| panic!("crash at {crash_at_ns:?}: {e}"));
        out.borrow_mut().take().expect("the client finished")
    }

    /// Crash instants every 100 ns over the insert's unperturbed span.
    fn instants(o: &HStoreOptions) -> Vec<u64> {
        let base = run(o, 0, None);
        assert_eq!(base.insert, Ok(false));
        (base.started_ns..=base.ended_ns).step_by(100).collect()
    }

    /// V2 in the paper's protocol: crashing the HTS between the SLS's ack and the table's
    /// change makes the client's write fail, yet the rebuilt table holds it. The default
    /// protocol's client retries and is answered from the write's first application: exactly
    /// once, `existed` right, at every crash instant.
    #[test]
    fn v2_a_failed_write_becomes_visible_after_an_hts_crash() {
        let faithful = options("faithful", None);
        let mut gap = 0;
        for at in instants(&faithful) {
            let seen = run(&faithful, 0, Some(at));
            if seen.insert.is_err() && seen.after == Ok(Some(VALUE.to_vec())) {
                gap += 1;
            }
        }
        assert!(gap > 0, "no crash instant made a failed write visible");
        let fixed = options("hstore", None);
        let mut retried = 0;
        for at in instants(&fixed) {
            let seen = run(&fixed, 0, Some(at));
            assert_eq!(seen.insert, Ok(false), "crash at {at}: {seen:?}");
            assert_eq!(seen.after, Ok(Some(VALUE.to_vec())), "crash at {at}");
            retried += (seen.ended_ns - seen.started_ns > 20_000) as u32;
        }
        assert!(retried > 0, "no crash instant hit the write");
        // Without the record of the first application, a retry of a logged write finds its
        // own first application and reports the key present.
        let no_dedup = options("hstore", Some("no-dedup"));
        let wrong =
            instants(&no_dedup).into_iter().filter(|&at| run(&no_dedup, 0, Some(at)).insert == Ok(true)).count();
        assert!(wrong > 0, "no crash instant showed a retry applied twice");
    }

    /// An SLS crash during a write blocks it until the SLS rebuilt itself from the table; the
    /// write then goes through once.
    #[test]
    fn an_sls_crash_blocks_writes_until_it_is_rebuilt() {
        let o = options("hstore", None);
        for at in instants(&o) {
            let seen = run(&o, 1, Some(at));
            assert_eq!(seen.insert, Ok(false), "crash at {at}: {seen:?}");
            assert_eq!(seen.after, Ok(Some(VALUE.to_vec())), "crash at {at}");
        }
    }
}

/// A memory node that runs out of room: writes that need a block fail with
/// `RemoteMemoryExhausted`, nothing stored is lost, deletes still work, and the servers agree.
#[test]
fn remote_memory_exhausted_is_an_error_and_loses_nothing() {
    use dmkit_indexes::{Index, IndexError};
    use dmkit_rdma::VerbsError;
    use dmkit_sim::{Sim, SimConfig};
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;
    let o = HStoreOptions { chunk_bytes: 1 << 16, buckets: 1 << 12, pool_buckets: 1 << 10, ..small("hstore", 7, 8) };
    let mut cfg = SimConfig::default();
    cfg.topology.server_nodes = 2;
    // The reserved megabyte and 64 KiB more: a thousand one-unit blocks.
    cfg.profile.host_memory_bytes = (1 << 20) + (1 << 16);
    let mut sim = Sim::new(cfg).unwrap();
    HStore::install(&o, &mut sim).unwrap();
    let client = sim.add_client(0).unwrap();
    let node = Arc::new(HStore::node_state(&o, sim.caps()));
    let mut h = HStore::open(&o, node, client.clone());
    let stored = Rc::new(RefCell::new(Vec::new()));
    let failure = Rc::new(RefCell::new(None));
    let (s, f, c, o2) = (stored.clone(), failure.clone(), client.clone(), o.clone());
    sim.spawn(&client, async move {
        HStore::create(&o2, &c).await.unwrap();
        for i in 0..u16::MAX {
            match h.insert(&key(i), &[i as u8; 30]).await {
                Ok(false) => s.borrow_mut().push(i),
                other => {
                    *f.borrow_mut() = Some(other);
                    break;
                }
            }
        }
        let keys = s.borrow().clone();
        for &i in &keys {
            assert_eq!(h.search(&key(i)).await.unwrap(), Some(vec![i as u8; 30]), "key {i}");
        }
        // Deletes need no block.
        assert!(h.delete(&key(keys[0])).await.unwrap());
        assert_eq!(h.search(&key(keys[0])).await.unwrap(), None);
        s.borrow_mut().remove(0);
    });
    sim.run().unwrap();
    let failure = failure.borrow_mut().take().expect("the memory node filled up");
    assert!(matches!(failure, Err(IndexError::Verbs(VerbsError::RemoteMemoryExhausted { .. }))), "{failure:?}");
    assert!(stored.borrow().len() > 500, "{} keys before the limit", stored.borrow().len());
    let report = HStore::check_invariants(&o, &sim).unwrap();
    assert_eq!(report.items, stored.borrow().len() as u64);
    assert_eq!(report.structures["sls_compared"], 1);
}

/// A table whose overflow pool is spent answers `Full` before the write is shipped, so the SLS
/// never holds a key the table lacks; what was stored stays.
#[test]
fn a_full_table_is_an_error_and_the_servers_still_agree() {
    let o = HStoreOptions { buckets: 1, slots: 1, pool_buckets: 1, hts_workers: 1, ..small("hstore", 1, 8) };
    let ops: Vec<Op> = (0..4u16)
        .map(|k| Op::Insert { key: key(k), value: vec![k as u8] })
        .chain((0..4u16).map(|k| Op::Search { key: key(k) }))
        .chain([
            Op::Insert { key: key(0), value: vec![8] },
            Op::Update { key: key(0), value: vec![9] },
            Op::Delete { key: key(1) },
            Op::Insert { key: key(3), value: vec![3] },
        ])
        .collect();
    let (got, _, walk) = run_sequence_checked::<HStore>(&o, &ops);
    use dmkit_indexes::IndexError::Full;
    assert_eq!(
        &got[..4],
        &[Outcome::Existed(false), Outcome::Existed(false), Outcome::Failed(Full), Outcome::Failed(Full)]
    );
    assert_eq!(
        &got[4..8],
        &[Outcome::Found(Some(vec![0])), Outcome::Found(Some(vec![1])), Outcome::Found(None), Outcome::Found(None)]
    );
    // An upsert or update of a present key needs no slot (the HTS READs its key before it
    // answers `Full`); a delete frees one, which the next insert takes.
    assert_eq!(
        &got[8..],
        &[Outcome::Existed(true), Outcome::Existed(true), Outcome::Existed(true), Outcome::Existed(false)]
    );
    let report = walk.unwrap();
    assert_eq!(report.items, 2);
    assert_eq!(report.structures["sls_compared"], 1);
}

/// Clover, HStore's other baseline: sequences against the specification, the default preset
/// clean, and each of its protections removed and found.
mod clover {
    use super::{key, ops};
    use dmkit_indexes::clover::{Clover, CloverOptions};
    use dmkit_verify::explore::Mode;
    use dmkit_verify::harness::{IndexScenario, check_index, find_replayable, run_sequence_checked};
    use proptest::prelude::*;
    use std::time::Duration;

    fn options() -> CloverOptions {
        CloverOptions { max_key_bytes: 16, max_value_bytes: 128, chunk_bytes: 1 << 20, ..CloverOptions::default() }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 32 } else { 128 }, ..ProptestConfig::default() })]

        #[test]
        fn clover_sequences_match_the_specification(ops in ops(40)) {
            let (got, want, walk) = run_sequence_checked::<Clover>(&options(), &ops);
            prop_assert_eq!(got, want);
            walk.map_err(|e| TestCaseError::fail(format!("invariants: {e}")))?;
        }
    }

    /// With shortcut words for three keys, a fourth new key is refused as `Full` (an error
    /// the checker can judge: it had no effect), and the three are intact.
    #[test]
    fn clover_with_every_shortcut_taken_is_full_and_loses_nothing() {
        use dmkit_indexes::IndexError;
        use dmkit_indexes::spec::{Op, Outcome};
        let o = CloverOptions { max_keys: 3, ..options() };
        let mut ops: Vec<Op> = (0..4u16).map(|k| Op::Insert { key: key(k), value: vec![k as u8 + 1; 8] }).collect();
        ops.extend((0..4u16).map(|k| Op::Search { key: key(k) }));
        let (got, _, walk) = run_sequence_checked::<Clover>(&o, &ops);
        walk.unwrap();
        assert!(got[..3].iter().all(|r| *r == Outcome::Existed(false)), "{got:?}");
        assert!(matches!(got[3], Outcome::Failed(IndexError::Full)), "{got:?}");
        for k in 0..3 {
            assert_eq!(got[4 + k], Outcome::Found(Some(vec![k as u8 + 1; 8])), "{got:?}");
        }
        assert_eq!(got[7], Outcome::Found(None));
    }

    #[test]
    fn clover_is_clean_and_each_protection_is_needed() {
        let budget = Duration::from_secs(if std::env::var("CI").is_ok() { 3 } else { 10 });
        let scenario = |plant| IndexScenario::<Clover>::from_preset(None, None, plant, 1).unwrap();
        check_index(&scenario(None), Mode::Random, 3, budget, u64::MAX).assert_clean("clover", 0, true);
        let sizes = IndexScenario::<Clover>::from_preset(Some("sizes"), None, None, 1).unwrap();
        check_index(&sizes, Mode::Random, 3, budget, u64::MAX).assert_clean("clover sizes", 0, true);
        for bug in ["write-next", "trust-shortcut"] {
            let message = find_replayable(bug, &scenario(Some(bug)), Mode::Random, 20_000);
            // Trusting a stale shortcut also makes writers chase a version that is no longer
            // the tail until their bound: under a fair schedule that give-up is found first.
            let livelock = bug == "trust-shortcut" && message.contains("gave up under a fair");
            assert!(message.contains("not linearizable") || livelock, "{bug}: {message}");
        }
        let _ = key(0);
    }
}

/// The invariant walk's S9 both ways: a key the skiplists hold and the table lacks (its bucket
/// cleared), and a key the table holds and the skiplists lack (a deleted key's bucket put back
/// as it was).
#[test]
fn the_invariant_walk_finds_a_table_and_skiplists_that_disagree() {
    use dmkit_indexes::Index;
    use dmkit_rdma::RemoteAddr;
    use dmkit_sim::{Sim, SimConfig};
    use std::sync::Arc;
    let o = small("hstore", 7, 8);
    let mut cfg = SimConfig::default();
    cfg.topology.server_nodes = 2;
    let mut sim = Sim::new(cfg).unwrap();
    HStore::install(&o, &mut sim).unwrap();
    let client = sim.add_client(0).unwrap();
    let node = Arc::new(HStore::node_state(&o, sim.caps()));
    let mut h = HStore::open(&o, node, client.clone());
    let (c, o2) = (client.clone(), o.clone());
    sim.spawn(&client, async move {
        HStore::create(&o2, &c).await.unwrap();
        for i in 0..200 {
            h.insert(&key(i), &[i as u8; 20]).await.unwrap();
        }
    });
    sim.run().unwrap();
    let report = HStore::check_invariants(&o, &sim).unwrap();
    assert_eq!((report.items, report.structures["sls_compared"]), (200, 1));
    let g = o.geometry();
    let bucket = RemoteAddr::host(o.hts_node(), g.bucket_offset(g.place(&key(7)).bucket));
    let saved = sim.read_memory(bucket, 64).unwrap();

    // The table forgets key 7's bucket (its other keys with it): the skiplists still map them.
    sim.write_memory(bucket, &[0; 64]).unwrap();
    let e = HStore::check_invariants(&o, &sim).unwrap_err();
    assert!(e.contains("in the skiplists but not in the table (S9)"), "{e}");
    sim.write_memory(bucket, &saved).unwrap();
    HStore::check_invariants(&o, &sim).unwrap();

    // Key 7 deleted through the index, then its bucket put back: the table maps it again (its
    // block is still intact), the skiplists do not.
    let other = sim.add_client(0).unwrap();
    let mut h = HStore::open(&o, Arc::new(HStore::node_state(&o, sim.caps())), other.clone());
    sim.spawn(&other, async move {
        assert!(h.delete(&key(7)).await.unwrap());
    });
    sim.run().unwrap();
    HStore::check_invariants(&o, &sim).unwrap();
    sim.write_memory(bucket, &saved).unwrap();
    let e = HStore::check_invariants(&o, &sim).unwrap_err();
    assert!(e.contains("is in the table but not in the skiplists (S9)"), "{e}");
}

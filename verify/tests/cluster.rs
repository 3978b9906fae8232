//! DrTM cluster hashing (the RACE paper's baseline) against the executable specification
//! (proptest over operation sequences with tables small enough that chains grow overflow
//! buckets, deletes move tail items forward and inserts run out of overflow buckets), its
//! invariant walk after each sequence, bad input, and the schedule explorer on the checking
//! presets: clean as written, and every planted bug found.

use dmkit_indexes::cluster::{Cluster, ClusterOptions};
use dmkit_indexes::spec::{self, Op, Outcome, SpecMap};
use dmkit_indexes::{Counters, Index, IndexError, IndexKind};
use dmkit_rdma::MaskedAtomics;
use dmkit_sim::{Faults, Sim, SimConfig, Tearing, Topology};
use dmkit_verify::harness::{run_sequence, run_sequence_checked};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::ops::Bound;
use std::rc::Rc;
use std::sync::Arc;

fn key(k: u16) -> Vec<u8> {
    (k as u64).to_be_bytes().to_vec()
}

/// Compares what the index answered with the model, op by op. `Full` is allowed for an insert
/// of an absent key (the model then leaves the key absent) and nowhere else. Returns the
/// model's final size.
fn agree(ops: &[Op], got: &[Outcome]) -> Result<usize, String> {
    if ops.len() != got.len() {
        return Err(format!("{} answers to {} operations", got.len(), ops.len()));
    }
    let mut model = SpecMap::new();
    for (i, (op, out)) in ops.iter().zip(got).enumerate() {
        if *out == Outcome::Failed(IndexError::Full) {
            match op {
                Op::Insert { key, .. } if model.search(key).is_none() => continue,
                _ => return Err(format!("op {i} {op:?}: Full, but it needs no new slot")),
            }
        }
        let want = model.apply(op, Cluster::SUPPORTS_SCAN);
        if want != *out {
            return Err(format!("op {i} {op:?}: got {out:?}, the specification says {want:?}"));
        }
    }
    Ok(model.len())
}

fn ops(keys: u16, max_value: usize) -> impl Strategy<Value = Vec<Op>> {
    let k = (0..keys).prop_map(key);
    let value = (any::<u8>(), 0..=max_value).prop_map(|(b, n)| vec![b; n]);
    let op = prop_oneof![
        3 => k.clone().prop_map(|key| Op::Search { key }),
        4 => (k.clone(), value.clone()).prop_map(|(key, value)| Op::Insert { key, value }),
        1 => (k.clone(), value).prop_map(|(key, value)| Op::Update { key, value }),
        2 => k.clone().prop_map(|key| Op::Delete { key }),
        1 => (k.clone(), 1usize..5).prop_map(|(key, limit)| Op::Scan { start: Bound::Included(key), end: Bound::Unbounded, limit }),
    ];
    prop::collection::vec(op, 1..200)
}

/// Tiny tables: 1-3 main buckets of 1, 2, 3 or 8 slots, 0-4 overflow buckets per main bucket
/// (`run_sequence_checked` simulates one memory node; the explorer's `spread` preset has two).
fn configs() -> impl Strategy<Value = ClusterOptions> {
    (
        1u64..4,
        prop_oneof![Just(1u32), Just(2), Just(3), Just(8)],
        prop_oneof![Just(0u32), Just(100), Just(300), Just(400)],
    )
        .prop_map(|(main_buckets, slots, overflow)| ClusterOptions {
            main_buckets,
            slots_per_bucket: slots,
            overflow_percent: overflow,
            key_bytes: 8,
            value_bytes: 80,
            chunk_bytes: 1 << 16,
            ..ClusterOptions::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 64 } else { 256 }, ..ProptestConfig::default() })]

    #[test]
    fn cluster_sequences_match_the_specification(options in configs(), ops in ops(40, 80)) {
        let (got, _, walk) = run_sequence_checked::<Cluster>(&options, &ops);
        let items = agree(&ops, &got).map_err(TestCaseError::fail)?;
        let report = walk.map_err(|e| TestCaseError::fail(format!("invariants: {e}")))?;
        prop_assert_eq!(report.items, items as u64);
    }
}

/// One main bucket of 2 slots and one overflow bucket: four keys fit, the fifth and sixth are
/// `Full`; an upsert of a present key still works; a delete makes room again (the main bucket's
/// hole is filled by the overflow bucket's tail item); nothing is lost.
#[test]
fn a_full_chain_and_pool_say_full_and_lose_nothing() {
    let o = ClusterOptions {
        main_buckets: 1,
        slots_per_bucket: 2,
        overflow_percent: 100,
        key_bytes: 8,
        value_bytes: 16,
        chunk_bytes: 1 << 16,
        ..ClusterOptions::default()
    };
    let v = |k: u16| vec![k as u8; 16];
    let mut ops: Vec<Op> = (0..6).map(|k| Op::Insert { key: key(k), value: v(k) }).collect();
    ops.push(Op::Insert { key: key(1), value: v(9) });
    ops.push(Op::Delete { key: key(0) });
    ops.push(Op::Insert { key: key(5), value: v(5) });
    ops.extend((0..6).map(|k| Op::Search { key: key(k) }));
    let (got, _, walk) = run_sequence_checked::<Cluster>(&o, &ops);
    let items = agree(&ops, &got).unwrap();
    assert!(got[..4].iter().all(|r| *r == Outcome::Existed(false)), "{got:?}");
    assert_eq!(&got[4..6], &[Outcome::Failed(IndexError::Full), Outcome::Failed(IndexError::Full)]);
    assert_eq!(got[6], Outcome::Existed(true));
    assert_eq!(got[8], Outcome::Existed(false), "the deleted key's slot takes a new key");
    let searched = &got[9..];
    assert_eq!(searched[0], Outcome::Found(None));
    assert_eq!(searched[1], Outcome::Found(Some(v(9))));
    assert_eq!(searched[4], Outcome::Found(None));
    assert_eq!(searched[5], Outcome::Found(Some(v(5))));
    let report = walk.unwrap();
    assert_eq!(report.items, items as u64);
    assert_eq!(report.items, 4);
    assert_eq!(report.capacity_items, Some(4));
    assert_eq!(report.structures["overflow_buckets"], 1);
}

/// The paper's geometry (8 slots, overflow ratio 3) filled with unique keys until the first
/// insert failure: the load factor (items over all slots, main and overflow) comes out high, as
/// the paper's Fig. 12 reports for DrTM (about 90%; 0.900 here, with 64 main buckets); then
/// every key is found, a third are deleted (compaction moves tail items forward) and the rest
/// updated, and the walk agrees.
#[test]
fn the_papers_geometry_fills_to_a_high_load_factor() {
    let o = ClusterOptions {
        main_buckets: 64,
        key_bytes: 16,
        value_bytes: 32,
        chunk_bytes: 1 << 20,
        ..ClusterOptions::default()
    };
    let capacity = 64 * 4 * 8;
    let k = |i: u32| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes().to_vec();
    let v = |i: u32| vec![i as u8; 1 + i as usize % 32];
    let mut ops: Vec<Op> = (0..capacity as u32 + 1).map(|i| Op::Insert { key: k(i), value: v(i) }).collect();
    let (got, _, walk) = run_sequence_checked::<Cluster>(&o, &ops);
    agree(&ops, &got).unwrap();
    let first_full = got.iter().position(|r| *r == Outcome::Failed(IndexError::Full)).expect("the table fills up");
    let load_factor = first_full as f64 / capacity as f64;
    eprintln!("cluster: first insert failure at load factor {load_factor:.3} ({first_full} of {capacity} slots)");
    assert!(load_factor > 0.8, "load factor {load_factor:.3} at the first failure");
    let report = walk.unwrap();
    assert!(report.structures["longest_chain"] >= 3, "{:?}", report.structures);
    // Again, stopping at the first failure, then searches, deletes, updates, searches.
    let n = first_full as u32;
    ops.truncate(n as usize);
    ops.extend((0..n).map(|i| Op::Search { key: k(i) }));
    ops.extend((0..n).step_by(3).map(|i| Op::Delete { key: k(i) }));
    ops.extend((0..n).step_by(2).map(|i| Op::Update { key: k(i), value: v(i + 7) }));
    ops.extend((0..n).map(|i| Op::Search { key: k(i) }));
    ops.extend((0..n).step_by(3).map(|i| Op::Insert { key: k(i), value: v(i) }));
    let (got, _, walk) = run_sequence_checked::<Cluster>(&o, &ops);
    let items = agree(&ops, &got).unwrap();
    assert_eq!(items, n as usize);
    assert!(!got.contains(&Outcome::Failed(IndexError::Full)), "deleted keys' slots are reused");
    assert_eq!(walk.unwrap().items, n as u64);
}

#[test]
fn bad_keys_values_and_options_are_errors() {
    let o = ClusterOptions { key_bytes: 8, value_bytes: 16, main_buckets: 4, ..ClusterOptions::default() };
    let ops = vec![
        Op::Insert { key: vec![], value: vec![0; 4] },
        Op::Insert { key: vec![1; 9], value: vec![0; 4] },
        Op::Insert { key: vec![1; 8], value: vec![0; 17] },
        Op::Search { key: vec![1; 9] },
        Op::Update { key: vec![], value: vec![] },
        Op::Delete { key: vec![1; 9] },
        Op::Scan { start: Bound::Unbounded, end: Bound::Unbounded, limit: 10 },
        Op::Insert { key: vec![1], value: vec![] },
        Op::Search { key: vec![1] },
    ];
    let (got, _) = run_sequence::<Cluster>(&o, &ops);
    assert!(matches!(got[0], Outcome::Failed(IndexError::KeyTooShort { .. })), "{got:?}");
    assert!(matches!(got[1], Outcome::Failed(IndexError::KeyTooLong { len: 9, max: 8 })), "{got:?}");
    assert!(matches!(got[2], Outcome::Failed(IndexError::ValueTooLong { len: 17, max: 16 })), "{got:?}");
    assert!(matches!(got[3], Outcome::Failed(IndexError::KeyTooLong { .. })), "{got:?}");
    assert!(matches!(got[4], Outcome::Failed(IndexError::KeyTooShort { .. })), "{got:?}");
    assert!(matches!(got[5], Outcome::Failed(IndexError::KeyTooLong { .. })), "{got:?}");
    assert_eq!(got[6], Outcome::Failed(IndexError::Unsupported("scan")));
    assert_eq!(got[7], Outcome::Existed(false));
    assert_eq!(got[8], Outcome::Found(Some(vec![])), "empty values are values");

    let d = ClusterOptions::default();
    assert_eq!(Cluster::validate(&d), Ok(()));
    assert_eq!((d.slots_per_bucket, d.overflow_percent), (8, 300), "the paper's setting");
    for (bad, why) in [
        (ClusterOptions { main_buckets: 0, ..d.clone() }, "main bucket"),
        (ClusterOptions { main_buckets: 1, memory_nodes: 2, ..d.clone() }, "main bucket"),
        (ClusterOptions { slots_per_bucket: 0, ..d.clone() }, "slots_per_bucket"),
        (ClusterOptions { slots_per_bucket: 15, ..d.clone() }, "slots_per_bucket"),
        (ClusterOptions { memory_nodes: 0, ..d.clone() }, "memory nodes"),
        (ClusterOptions { max_retries: 0, ..d.clone() }, "max_retries"),
        (ClusterOptions { key_bytes: 0, ..d.clone() }, "key_bytes"),
        (ClusterOptions { key_bytes: 8000, value_bytes: 9000, ..d.clone() }, "units"),
        (ClusterOptions { main_buckets: 1 << 40, ..d.clone() }, "fit"),
        (ClusterOptions { chunk_bytes: 100, ..d.clone() }, "chunk"),
        (ClusterOptions { plants: ["no-such-bug"].into(), ..d.clone() }, "no-such-bug"),
    ] {
        let e = Cluster::validate(&bad).expect_err(why);
        assert!(e.contains(why), "{e}");
    }
    let mut p = d.clone();
    assert!(Cluster::plant(&mut p, "no-such-bug").unwrap_err().contains("no-lock"));
    for bug in Cluster::planted_bugs() {
        Cluster::plant(&mut p, bug.name).unwrap();
    }
    assert_eq!(Cluster::validate(&p), Ok(()));
}

/// 32 clients on 4 compute nodes in a timed simulation with maximal tearing, each with its own
/// keys over four shared chains on two memory nodes: chains grow overflow buckets, and every
/// delete of a non-tail key moves another client's key forward under its searches. Each
/// client's outcomes must match its own model (its keys are its own, so the model is exact),
/// and the walk must hold. Returns the counters summed over clients.
fn concurrent_clients(options: &ClusterOptions, masked: MaskedAtomics, seed: u64) -> Result<Counters, String> {
    const CLIENTS: usize = 32;
    let cfg = SimConfig {
        topology: Topology { compute_nodes: 4, memory_nodes: 2, ..Topology::default() },
        faults: Faults { tearing: Some(Tearing { window_ns: 400 }), ..Faults::default() },
        masked_atomics: masked,
        seed,
        ..SimConfig::default()
    };
    let mut s = Sim::new(cfg).unwrap();
    let creator = s.add_client(0).unwrap();
    let (c, o) = (creator.clone(), options.clone());
    s.spawn(&creator, async move { Cluster::create(&o, &c).await.expect("create") });
    s.run().unwrap();
    let caps = s.caps().clone();
    let nodes: Vec<_> = (0..4).map(|_| Arc::new(Cluster::node_state(options, &caps))).collect();
    let failures = Rc::new(RefCell::new(Vec::new()));
    let counters = Rc::new(RefCell::new(Counters::default()));
    for i in 0..CLIENTS {
        let cn = (i % 4) as u16;
        let client = s.add_client(cn).unwrap();
        let mut h = Cluster::open(options, nodes[cn as usize].clone(), client.clone());
        let (failures, counters, c) = (failures.clone(), counters.clone(), client.clone());
        s.spawn(&client, async move {
            let mut model = SpecMap::new();
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 1000 + i as u64);
            for step in 0..60u32 {
                let key = vec![b'c', i as u8, rng.random_range(0..3u8)];
                let value = vec![i as u8; 8 + (step as usize * 7) % 60];
                let op = match rng.random_range(0..10) {
                    0..4 => Op::Search { key },
                    4..7 => Op::Insert { key, value },
                    7 => Op::Update { key, value },
                    _ => Op::Delete { key },
                };
                let (got, want) = (spec::apply(&mut h, &op).await, model.apply(&op, false));
                if got != want {
                    failures
                        .borrow_mut()
                        .push(format!("client {i} step {step}: {op:?} gave {got:?}, the model {want:?}"));
                    return;
                }
                c.sleep(rng.random_range(0..300)).await;
            }
            counters.borrow_mut().merge(h.counters());
        });
    }
    s.run().map_err(|e| e.to_string())?;
    if let Some(f) = failures.borrow().first() {
        return Err(format!("seed {seed}: {f}"));
    }
    let report = Cluster::check_invariants(options, &s).map_err(|e| format!("seed {seed}: invariant: {e}"))?;
    if report.structures["overflow_buckets"] == 0 {
        return Err(format!("seed {seed}: no chain grew an overflow bucket"));
    }
    let counters = counters.borrow().clone();
    Ok(counters)
}

fn concurrent_options() -> ClusterOptions {
    ClusterOptions {
        main_buckets: 4,
        slots_per_bucket: 2,
        overflow_percent: 2000,
        key_bytes: 8,
        value_bytes: 80,
        memory_nodes: 2,
        chunk_bytes: 1 << 16,
        ..ClusterOptions::default()
    }
}

#[test]
fn concurrent_clients_match_their_specifications() {
    for masked in [MaskedAtomics::Native, MaskedAtomics::Emulated] {
        let mut total = Counters::default();
        for seed in 0..3 {
            total.merge(&concurrent_clients(&concurrent_options(), masked, seed).unwrap());
        }
        for (name, n) in [
            ("lock_failures", total.lock_failures),
            ("delete_moved", total.events.get("delete_moved").copied().unwrap_or(0)),
            ("overflow_linked", total.events.get("overflow_linked").copied().unwrap_or(0)),
        ] {
            assert!(n > 0, "{masked:?}: {name} stayed zero: the test exercised nothing ({total:?})");
        }
    }
}

/// The timed runs catch the plants whose windows are as wide as a round trip. The unlock posted
/// ahead of its slot WRITEs in the same batch (`unlock-before-write`) leaves a window of one
/// verb at the responder, which a timed run does not open, and an update rewriting a block in
/// place (`in-place-value`) tears only a READ of that key by another client, which this test's
/// private keys never do; the explorer finds both (`explored::each_planted_bug_is_found_and_replays`).
#[test]
fn planted_bugs_break_the_concurrent_test() {
    for bug in ["no-lock", "no-version-check"] {
        let mut options = concurrent_options();
        Cluster::plant(&mut options, bug).unwrap();
        let caught = (0..8).find_map(|seed| concurrent_clients(&options, MaskedAtomics::Native, seed).err());
        assert!(caught.is_some(), "planted bug {bug} went unnoticed over 8 seeds");
    }
}

// --- The schedule explorer on the checking presets -------------------------------------------

mod explored {
    use dmkit_indexes::IndexKind;
    use dmkit_indexes::cluster::Cluster;
    use dmkit_verify::explore::{self, Mode};
    use dmkit_verify::harness::{IndexScenario, check_index};
    use std::time::{Duration, Instant};

    fn ci() -> bool {
        std::env::var("CI").is_ok()
    }

    fn scenario(preset: &str, plant: Option<&str>, seed: u64) -> IndexScenario<Cluster> {
        IndexScenario::from_preset(Some(preset), None, plant, seed).unwrap()
    }

    #[test]
    fn cluster_is_clean_and_not_vacuous() {
        let budget = Duration::from_secs(if ci() { 4 } else { 20 });
        for (preset, mode) in [
            ("default", Mode::Random),
            ("default", Mode::Pct { depth: 3 }),
            ("spread", Mode::Random),
            ("pair", Mode::Dfs { preemptions: 2 }),
            ("read-failure", Mode::Random),
        ] {
            let check = check_index(&scenario(preset, None, 5), mode, 5, budget, u64::MAX);
            check.assert_clean(&format!("{preset} {mode:?}"), 5, mode == Mode::Random);
            eprintln!(
                "cluster {preset} {mode:?}: clean, {} schedules in {:.1} s, counters {:?}",
                check.exploration.schedules,
                check.exploration.elapsed.as_secs_f64(),
                check.counters
            );
        }
    }

    /// Each removed protection is found by the random explorer on the default preset (the
    /// release of a lock after a failed READ on `read-failure`, the preset with failing READs),
    /// and the failing schedule replays.
    #[test]
    fn each_planted_bug_is_found_and_replays() {
        let budget = Duration::from_secs(if ci() { 30 } else { 60 });
        for bug in Cluster::planted_bugs().iter().map(|p| p.name) {
            let preset = if bug == "failed-read-keeps-lock" { "read-failure" } else { "default" };
            let started = Instant::now();
            let check = check_index(&scenario(preset, Some(bug), 1), Mode::Random, 1, budget, u64::MAX);
            let f = check
                .exploration
                .failure
                .unwrap_or_else(|| panic!("{bug} not found in {} schedules", check.exploration.schedules));
            eprintln!(
                "cluster plant {bug}: found in schedule {} after {:.2} s: {}",
                f.schedule,
                started.elapsed().as_secs_f64(),
                f.message.lines().next().unwrap_or("")
            );
            let again = scenario(preset, Some(bug), 1);
            assert_eq!(explore::replay(&again, f.variant, &f.choices), Err(f.message.clone()), "{bug}");
        }
        assert_eq!(Cluster::planted_bugs().len(), 5);
    }
}

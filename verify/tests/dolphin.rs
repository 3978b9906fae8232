//! Dolphin against the executable specification (proptest over operation sequences, leaves
//! small enough to split and compact) and under the schedule explorer: the hardened protocol
//! clean, each of its protections removed and found, the paper's protocol's hazards found, and
//! the digest's front/rear variant shown to need `read_units_ascending`.

use dmkit_indexes::IndexKind;
use dmkit_indexes::dolphin::layout::{Split, VALUE_MASK};
use dmkit_indexes::dolphin::{Dolphin, DolphinOptions};
use dmkit_indexes::spec::{Op, Outcome};
use dmkit_verify::harness::run_sequence_checked;
use proptest::prelude::*;

/// Keys in a few 7-byte prefixes (dense within each, so leaves fill and split) and far apart
/// (prefix splits and new children at several depths).
fn key(k: u16) -> Vec<u8> {
    let prefixes: [u64; 5] = [0, 0x100, 0x0000_0100_0000_0000, 0x0000_0100_0000_0200, 0x7f00_0000_0000_0000];
    let word = prefixes[(k % 5) as usize] + 1 + (k / 5) as u64 * 7 % 251;
    word.to_be_bytes().to_vec()
}

fn ops(keys: u16) -> impl Strategy<Value = Vec<Op>> {
    let k = (0..keys).prop_map(key);
    let value =
        any::<u64>().prop_filter("not the reserved word", |v| *v != VALUE_MASK).prop_map(|v| v.to_be_bytes().to_vec());
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
    prop::collection::vec(op, 1..160)
}

fn options(slots: u32, split: Split, config: &str) -> DolphinOptions {
    let mut o =
        DolphinOptions { leaf_slots: slots, cache_bytes: 1 << 20, chunk_bytes: 1 << 20, ..DolphinOptions::default() };
    o.configure(config).unwrap();
    o.split = split;
    o
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 48 } else { 256 }, ..ProptestConfig::default() })]

    /// Sequences over leaves of 4, 7 and 65 slots, both split points and all three protocols
    /// (the paper's is sequentially correct: its hazards need concurrency).
    #[test]
    fn dolphin_sequences_match_the_specification(
        slots in prop_oneof![Just(4u32), Just(7), Just(65)],
        split in prop_oneof![Just(Split::ThreeQuarters), Just(Split::Even)],
        config in prop_oneof![Just("hardened"), Just("faithful"), Just("digest")],
        ops in ops(120),
    ) {
        let o = options(slots, split, config);
        let (got, want, walk) = run_sequence_checked::<Dolphin>(&o, &ops);
        prop_assert_eq!(got, want);
        walk.map_err(|e| TestCaseError::fail(format!("invariants: {e}")))?;
    }
}

#[test]
fn bad_input_is_an_error() {
    use dmkit_indexes::IndexError::*;
    let o = options(4, Split::ThreeQuarters, "hardened");
    let reserved = VALUE_MASK.to_be_bytes().to_vec();
    let ops = vec![
        Op::Insert { key: vec![1; 7], value: vec![1; 8] },
        Op::Insert { key: vec![1; 9], value: vec![1; 8] },
        Op::Insert { key: vec![1; 8], value: vec![1; 9] },
        Op::Insert { key: vec![1; 8], value: vec![1; 7] },
        Op::Insert { key: vec![0x5a; 8], value: vec![1; 8] },
        Op::Insert { key: vec![0xa5; 8], value: vec![1; 8] },
        Op::Insert { key: vec![1; 8], value: reserved },
        Op::Search { key: vec![1; 8] },
    ];
    let (got, _, walk) = run_sequence_checked::<Dolphin>(&o, &ops);
    walk.unwrap();
    assert!(matches!(got[0], Outcome::Failed(KeyTooShort { .. })), "{got:?}");
    assert!(matches!(got[1], Outcome::Failed(KeyTooLong { .. })), "{got:?}");
    assert!(matches!(got[2], Outcome::Failed(ValueTooLong { .. })), "{got:?}");
    assert!(matches!(got[3], Outcome::Failed(ValueTooShort { .. })), "{got:?}");
    assert!(matches!(got[4], Outcome::Failed(ReservedKey(_))), "{got:?}");
    assert!(matches!(got[5], Outcome::Failed(ReservedKey(_))), "{got:?}");
    assert!(matches!(got[6], Outcome::Failed(ReservedValue(_))), "{got:?}");
    assert_eq!(got[7], Outcome::Found(None), "nothing was stored");
    // Keys 0 and 2^64-1 are ordinary keys.
    let edges = vec![
        Op::Insert { key: vec![0; 8], value: vec![1; 8] },
        Op::Insert { key: vec![0xff; 8], value: vec![2; 8] },
        Op::Scan { start: std::ops::Bound::Unbounded, end: std::ops::Bound::Unbounded, limit: 5 },
    ];
    let (got, want, walk) = run_sequence_checked::<Dolphin>(&o, &edges);
    walk.unwrap();
    assert_eq!(got, want);
    assert!(Dolphin::validate(&DolphinOptions { leaf_slots: 3, ..o.clone() }).is_err());
    assert!(Dolphin::validate(&DolphinOptions { memory_nodes: 17, ..o.clone() }).is_err());
    assert!(Dolphin::validate(&DolphinOptions { max_retries: 0, ..o.clone() }).is_err());
    let mut bad = o;
    assert!(bad.configure("fast").is_err());
    bad.configure("faithful-even").unwrap();
    assert_eq!(bad.split, Split::Even);
}

/// 255 keys of one 7-byte prefix, in order, in 65-slot leaves with the 3/4 split: four leaves
/// of 48 and one of 63 (every leaf's range holds at least 17 keys, so the special node never
/// needs more than its 16 entries).
#[test]
fn a_dense_prefix_fits_its_special_node() {
    let o = options(65, Split::ThreeQuarters, "hardened");
    assert_eq!(o.special_type(), 3, "N16");
    let ops: Vec<Op> = (1..=255u64)
        .map(|k| Op::Insert { key: (0x4200 + k).to_be_bytes().to_vec(), value: k.to_be_bytes().to_vec() })
        .collect();
    let (got, want, walk) = run_sequence_checked::<Dolphin>(&o, &ops);
    assert_eq!(got, want);
    let report = walk.unwrap();
    assert_eq!(report.items, 255);
    assert_eq!(report.structures["special"], 1);
    assert_eq!(report.structures["leaf"], 5, "{report:?}");
}

/// A scan over many sparse leaves of one special node reads them in several batches; only
/// re-reads count against `max_retries`, so with a bound of 1 and no other client it returns
/// every key. Counting every batch, it gave up after the first (found reading the mutation
/// run's survivor that halved the batch size: the size was a matter of safety with a small bound).
#[test]
fn a_scan_over_many_leaves_counts_only_rereads_as_retries() {
    let o = DolphinOptions { max_retries: 1, ..options(4, Split::ThreeQuarters, "hardened") };
    let key = |k: u64| (0x4200 + k).to_be_bytes().to_vec();
    let mut ops: Vec<Op> = (1..=90u64).map(|k| Op::Insert { key: key(k), value: k.to_be_bytes().to_vec() }).collect();
    ops.extend((1..=90u64).filter(|k| k % 3 != 0).map(|k| Op::Delete { key: key(k) }));
    ops.push(Op::Scan { start: std::ops::Bound::Unbounded, end: std::ops::Bound::Unbounded, limit: 30 });
    let (got, want, walk) = run_sequence_checked::<Dolphin>(&o, &ops);
    walk.unwrap();
    assert!(matches!(want.last(), Some(Outcome::Scanned(p)) if p.len() == 30), "{:?}", want.last());
    assert_eq!(got, want);
}

mod explored {
    use dmkit_indexes::dolphin::Dolphin;
    use dmkit_indexes::spec::Op;
    use dmkit_verify::explore::Mode;
    use dmkit_verify::harness::{IndexScenario, check_index};
    use std::time::Duration;

    fn budget() -> Duration {
        Duration::from_secs(if std::env::var("CI").is_ok() { 5 } else { 20 })
    }

    fn scenario(preset: &str, config: Option<&str>, plant: Option<&str>) -> IndexScenario<Dolphin> {
        IndexScenario::from_preset(Some(preset), config, plant, 1).unwrap()
    }

    #[test]
    fn the_hardened_protocol_is_clean_and_not_vacuous() {
        for (preset, mode) in [
            ("default", Mode::Random),
            ("default", Mode::Pct { depth: 3 }),
            ("leaf", Mode::Random),
            ("local", Mode::Random),
            ("pair", Mode::Dfs { preemptions: 2 }),
        ] {
            check_index(&scenario(preset, None, None), mode, 3, budget(), u64::MAX).assert_clean(
                &format!("{preset} {mode:?}"),
                0,
                mode == Mode::Random,
            );
        }
    }

    use dmkit_verify::harness::find_replayable as found;

    /// Each protection of the hardened protocol, removed, is found on the default preset.
    #[test]
    fn each_protection_is_needed() {
        for (bug, expect) in [
            ("no-line-versions", "not linearizable"),
            ("delete-clears", ""),
            ("pending-visible", "not linearizable"),
            ("probe-any", ""),
            ("no-spear", ""),
            ("no-range-check", "not linearizable"),
        ] {
            let message = found(bug, &scenario("default", None, Some(bug)), Mode::Random, 20_000);
            assert!(message.contains(expect), "{bug}: {message}");
        }
    }

    /// With three READs failing: a share whose READ failed is given back, a split whose publish
    /// READ failed tries again instead of putting the old leaf back, and an interposition
    /// whose header READ failed still trims the header. Each, removed, is found; the preset is
    /// clean with all three.
    #[test]
    fn failed_reads_leave_nothing_held_or_half_done() {
        for (bug, mode, expect) in [
            ("failed-read-keeps-share", Mode::Random, "with no operation in flight"),
            ("failed-read-undoes-split", Mode::Pct { depth: 3 }, "not linearizable"),
            ("failed-read-skips-trim", Mode::Pct { depth: 3 }, "header covers positions"),
        ] {
            let message = found(bug, &scenario("read-failure", None, Some(bug)), mode, 20_000);
            assert!(message.contains(expect), "{bug}: {message}");
        }
        check_index(&scenario("read-failure", None, None), Mode::Pct { depth: 3 }, 3, budget(), u64::MAX).assert_clean(
            "read-failure",
            0,
            true,
        );
    }

    /// With READs failing under write combining: a leader whose descent READ fails before it
    /// closes its window gives up without its followers' changes, and each follower applies its
    /// own (`rdwc_write_fallback`, reached by no other preset). Without the fallback a follower
    /// answers without writing.
    #[test]
    fn a_follower_whose_leader_gave_up_runs_its_own_write() {
        let bug = "rdwc-no-fallback";
        let message = found(bug, &scenario("local-read-failure", None, Some(bug)), Mode::Random, 20_000);
        assert!(message.contains("not linearizable"), "{message}");
        check_index(&scenario("local-read-failure", None, None), Mode::Random, 3, budget(), u64::MAX).assert_clean(
            "local-read-failure",
            0,
            true,
        );
    }

    /// A delegating search that marks its window after its leaf READ returns hands followers a
    /// value older than their start.
    #[test]
    fn a_late_mark_is_found() {
        let message = found("rdwc-late-mark", &scenario("local", None, Some("rdwc-late-mark")), Mode::Random, 20_000);
        assert!(message.contains("not linearizable"), "{message}");
    }

    /// A combining write that closes its window after its leaf READ folds a follower that joined
    /// after a delete from the other compute node over the state before that delete: the
    /// follower reports the key present and its value lands in a dead slot.
    #[test]
    fn a_combined_write_must_take_effect_after_its_close() {
        // Clients 0 and 2 share compute node 0; client 1 deletes from compute node 1.
        let script = |plant| {
            let s = scenario("leaf", None, plant);
            let (k, other) = ((s.preset.key_of)(0), (s.preset.key_of)(5));
            let v = |b: u8| vec![b; 8];
            s.scripted(vec![
                vec![Op::Update { key: k.clone(), value: v(1) }],
                vec![Op::Delete { key: k.clone() }],
                vec![
                    Op::Search { key: other.clone() },
                    Op::Search { key: other },
                    Op::Update { key: k.clone(), value: v(2) },
                    Op::Search { key: k },
                ],
            ])
        };
        let message = found("rdwc-late-close", &script(Some("rdwc-late-close")), Mode::Pct { depth: 3 }, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
        let clean = check_index(&script(None), Mode::Pct { depth: 3 }, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 100);
    }

    /// H7: the preloaded leaf {7, 9, 11} splits when client 0 inserts 5 and 11 moves to the new
    /// leaf; client 1 updates 11 there; client 2 searched 11 before (its compute node caches the
    /// special node) and searches again after. A split that publishes the new leaf before it
    /// rewrites the old one lets that second search read 11's old value from the old leaf.
    fn h7(config: &str, plant: Option<&str>) -> IndexScenario<Dolphin> {
        let s = scenario("default", Some(config), plant);
        let k = s.preset.key_of;
        let (eleven, five) = (k(0), k(3));
        let v = |b: u8| vec![b; 8];
        s.scripted(vec![
            vec![Op::Insert { key: five, value: v(5) }],
            vec![Op::Update { key: eleven.clone(), value: v(1) }, Op::Update { key: eleven.clone(), value: v(2) }],
            vec![Op::Search { key: eleven.clone() }, Op::Search { key: eleven.clone() }, Op::Search { key: eleven }],
        ])
    }

    #[test]
    fn publishing_before_the_rewrite_serves_a_stale_value() {
        let message = found(
            "publish-before-shrink",
            &h7("hardened", Some("publish-before-shrink")),
            Mode::Pct { depth: 3 },
            50_000,
        );
        assert!(message.contains("not linearizable"), "{message}");
        let clean = check_index(&h7("hardened", None), Mode::Random, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 100);
    }

    /// The paper's protocol fails on the default preset.
    #[test]
    fn the_paper_protocol_is_found_wrong() {
        found("faithful", &scenario("default", Some("faithful"), None), Mode::Random, 5_000);
    }

    /// The digest's front/rear versions (tail first, head last) protect a search only if a READ
    /// samples its lines in ascending address order: under the default model a READ that
    /// straddles a whole split (rear and front sampled before it, slots after) passes the check;
    /// with `read_units_ascending` the default preset and the H7 script are clean.
    #[test]
    fn the_digests_versions_need_ascending_reads() {
        let message = found("digest", &scenario("default", Some("digest"), None), Mode::Random, 50_000);
        assert!(message.contains("not linearizable"), "{message}");
        let mut ascending = scenario("default", Some("digest"), None);
        ascending.memory_model.read_units_ascending = true;
        let clean = check_index(&ascending, Mode::Random, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 100);
        let mut ascending = h7("digest", None);
        ascending.memory_model.read_units_ascending = true;
        let clean = check_index(&ascending, Mode::Random, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 100);
    }
}

/// A memory node that runs out of room: inserts that need a new leaf or path fail with
/// `RemoteMemoryExhausted`, nothing stored is lost, no leaf is left locked, and the tree still
/// passes its walk.
#[test]
fn remote_memory_exhausted_is_an_error_and_loses_nothing() {
    use dmkit_indexes::{Index, IndexError};
    use dmkit_rdma::VerbsError;
    use dmkit_sim::{Sim, SimConfig};
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;
    let o = DolphinOptions { chunk_bytes: 1 << 16, ..options(4, Split::ThreeQuarters, "hardened") };
    let mut cfg = SimConfig::default();
    // The reserved megabyte and 64 KiB more: a few dozen leaves and paths.
    cfg.profile.host_memory_bytes = (1 << 20) + (1 << 16);
    let mut sim = Sim::new(cfg).unwrap();
    let client = sim.add_client(0).unwrap();
    let node = Arc::new(Dolphin::node_state(&o, sim.caps()));
    let mut h = Dolphin::open(&o, node, client.clone());
    let stored = Rc::new(RefCell::new(Vec::new()));
    let failure = Rc::new(RefCell::new(None));
    let (s, f, c, o2) = (stored.clone(), failure.clone(), client.clone(), o.clone());
    sim.spawn(&client, async move {
        Dolphin::create(&o2, &c).await.unwrap();
        // Keys 1 KiB apart: a new prefix (special node and leaf) every 4 keys, splits between.
        for i in 1..10_000u64 {
            let key = (i * 64).to_be_bytes();
            match h.insert(&key, &i.to_be_bytes()).await {
                Ok(false) => s.borrow_mut().push(i),
                other => {
                    *f.borrow_mut() = Some(other);
                    break;
                }
            }
        }
        let keys = s.borrow().clone();
        for i in keys {
            assert_eq!(h.search(&(i * 64).to_be_bytes()).await.unwrap(), Some(i.to_be_bytes().to_vec()), "key {i}");
            // Updates need no memory: still served.
            assert!(h.update(&(i * 64).to_be_bytes(), &(i + 1).to_be_bytes()).await.unwrap());
        }
    });
    sim.run().unwrap();
    let failure = failure.borrow_mut().take().expect("the memory node filled up");
    assert!(matches!(failure, Err(IndexError::Verbs(VerbsError::RemoteMemoryExhausted { .. }))), "{failure:?}");
    assert!(stored.borrow().len() > 20, "{} keys before the limit", stored.borrow().len());
    let report = Dolphin::check_invariants(&o, &sim).unwrap();
    assert_eq!(report.items, stored.borrow().len() as u64);
}

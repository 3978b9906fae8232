//! RACE against the executable specification (proptest over operation sequences on tables
//! small enough that combined buckets fill and keys share them) and the schedule explorer.

use dmkit_indexes::race::{Paper, Race, RaceOptions};
use dmkit_indexes::spec::{Op, Outcome};
use dmkit_verify::harness::run_sequence_checked;
use proptest::prelude::*;

fn key(k: u16) -> Vec<u8> {
    (k as u64).to_be_bytes().to_vec()
}

fn ops(keys: u16) -> impl Strategy<Value = Vec<Op>> {
    let k = (0..keys).prop_map(key);
    let value = (any::<u8>(), 1..=32usize).prop_map(|(b, n)| vec![b; n]);
    let op = prop_oneof![
        2 => k.clone().prop_map(|key| Op::Search { key }),
        4 => (k.clone(), value.clone()).prop_map(|(key, value)| Op::Insert { key, value }),
        1 => (k.clone(), value).prop_map(|(key, value)| Op::Update { key, value }),
        1 => k.prop_map(|key| Op::Delete { key }),
    ];
    prop::collection::vec(op, 1..120)
}

fn options(slots: u32, groups: u32, depth: u8) -> RaceOptions {
    RaceOptions {
        key_bytes: 8,
        value_bytes: 32,
        slots,
        groups,
        initial_depth: depth,
        // Up to 256 subtables: five of 40 keys sharing eight suffix bits (what keeps a pair
        // of 1-slot combined buckets full) is vanishingly rare.
        max_depth: 8,
        ..RaceOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 48 } else { 256 }, ..ProptestConfig::default() })]

    /// Sequences over tables that split as they fill (1- and 2-slot buckets in 2 groups start
/// with one or two subtables), and over tables that never need to.
    #[test]
    fn race_sequences_match_the_specification(
        (slots, groups, depth) in prop_oneof![Just((7u32, 4u32, 0u8)), Just((4, 8, 1)), Just((1, 2, 0)), Just((2, 2, 1))],
        ops in ops(40),
        // The paper's split and block reuse differ from safe mode only under concurrency.
        config in prop_oneof![Just("safe"), Just("paper-split"), Just("paper-reuse")],
    ) {
        let o = RaceOptions { paper: Paper::named(config).unwrap(), ..options(slots, groups, depth) };
        let (got, want, walk) = run_sequence_checked::<Race>(&o, &ops);
        prop_assert_eq!(got, want);
        walk.map_err(|e| TestCaseError::fail(format!("invariants: {e}")))?;
    }
}

#[test]
fn a_full_pair_of_combined_buckets_is_full_and_loses_nothing() {
    // One subtable of 2 groups of 1-slot buckets, 6 slots in all, that may not split.
    let o = RaceOptions { max_depth: 0, ..options(1, 2, 0) };
    let ops: Vec<Op> = (0..12u16).map(|k| Op::Insert { key: key(k), value: vec![k as u8 + 1; 4] }).collect();
    let mut all = ops.clone();
    all.extend((0..12u16).map(|k| Op::Search { key: key(k) }));
    let (got, _, walk) = run_sequence_checked::<Race>(&o, &all);
    walk.unwrap();
    let mut stored = 0;
    for k in 0..12usize {
        match &got[k] {
            Outcome::Existed(false) => {
                stored += 1;
                assert_eq!(got[12 + k], Outcome::Found(Some(vec![k as u8 + 1; 4])), "key {k}");
            }
            Outcome::Failed(dmkit_indexes::IndexError::Full) => assert_eq!(got[12 + k], Outcome::Found(None)),
            other => panic!("key {k}: {other:?}"),
        }
    }
    assert!((1..=6).contains(&stored), "{got:?}");
}

#[test]
fn bad_input_is_an_error() {
    let o = options(7, 4, 0);
    let ops = vec![
        Op::Insert { key: vec![], value: vec![1] },
        Op::Insert { key: vec![1; 9], value: vec![1] },
        Op::Insert { key: vec![1; 8], value: vec![1; 33] },
        Op::Scan { start: std::ops::Bound::Unbounded, end: std::ops::Bound::Unbounded, limit: 3 },
    ];
    let (got, _, _) = run_sequence_checked::<Race>(&o, &ops);
    assert!(matches!(got[0], Outcome::Failed(dmkit_indexes::IndexError::KeyTooShort { .. })), "{got:?}");
    assert!(matches!(got[1], Outcome::Failed(dmkit_indexes::IndexError::KeyTooLong { .. })), "{got:?}");
    assert!(matches!(got[2], Outcome::Failed(dmkit_indexes::IndexError::ValueTooLong { .. })), "{got:?}");
    assert!(matches!(got[3], Outcome::Failed(dmkit_indexes::IndexError::Unsupported(_))), "{got:?}");
    use dmkit_indexes::IndexKind;
    assert!(Race::validate(&RaceOptions { groups: 1, ..o.clone() }).is_err());
    assert!(Race::validate(&RaceOptions { max_depth: 17, ..o.clone() }).is_err());
    assert!(Race::validate(&RaceOptions { initial_depth: 9, ..o }).is_err());
}

mod explored {
    use dmkit_indexes::race::Race;
    use dmkit_indexes::spec::Op;
    use dmkit_verify::explore::{self, Mode};
    use dmkit_verify::harness::{IndexScenario, check_index};
    use std::time::Duration;

    fn budget() -> Duration {
        Duration::from_secs(if std::env::var("CI").is_ok() { 5 } else { 30 })
    }

    fn scenario(preset: &str, config: Option<&str>, plant: Option<&str>) -> IndexScenario<Race> {
        IndexScenario::from_preset(Some(preset), config, plant, 3).unwrap()
    }

    #[test]
    fn safe_mode_is_clean_and_not_vacuous() {
        for (preset, mode) in [
            ("default", Mode::Random),
            ("default", Mode::Pct { depth: 3 }),
            ("default-2slot", Mode::Pct { depth: 3 }),
            ("deep", Mode::Random),
            ("basic", Mode::Random),
            ("same-key", Mode::Random),
            ("pair", Mode::Dfs { preemptions: 2 }),
            ("read-failure", Mode::Pct { depth: 3 }),
        ] {
            check_index(&scenario(preset, None, None), mode, 3, budget(), u64::MAX).assert_clean(
                &format!("{preset} {mode:?}"),
                0,
                mode == Mode::Random,
            );
        }
    }

    /// Without the insert lock, two inserts of one absent key both publish a copy: found and
    /// replayed.
    #[test]
    fn the_insert_lock_is_needed() {
        let check =
            check_index(&scenario("same-key", None, Some("no-insert-lock")), Mode::Random, 3, budget(), u64::MAX);
        let f = check.exploration.failure.expect("duplicate inserts are found without the lock");
        assert_eq!(
            explore::replay(&scenario("same-key", None, Some("no-insert-lock")), f.variant, &f.choices),
            Err(f.message.clone())
        );
    }

    /// The split's two protections, each removed and found (a fixed seed and schedule bound,
    /// so the test does not depend on the machine's speed), and the failure replayed.
    /// `no-target-lock` needs a stale-cache insert of a moving key whose bucket's header CAS
    /// falls between its READ and its slot CAS: schedule 37,302 of seed 3.
    #[test]
    fn each_split_protection_is_needed() {
        for (bug, seed, schedules) in [("no-freeze", 1, 5_000), ("no-target-lock", 3, 40_000)] {
            let check = check_index(
                &scenario("default", None, Some(bug)),
                Mode::Random,
                seed,
                Duration::from_secs(600),
                schedules,
            );
            let f = check
                .exploration
                .failure
                .unwrap_or_else(|| panic!("{bug} not found in {} schedules", check.exploration.schedules));
            assert_eq!(
                explore::replay(&scenario("default", None, Some(bug)), f.variant, &f.choices),
                Err(f.message.clone()),
                "{bug}"
            );
        }
    }

    /// With three READs failing, the releases and retries that keep a failed READ from leaving
    /// a lock held or a split half done, each removed and found (bounded schedules, so the
    /// test does not depend on the machine's speed), and replayed.
    #[test]
    fn failed_reads_leave_no_lock_held() {
        for (bug, mode) in [
            ("failed-read-keeps-insert-lock", Mode::Random),
            ("failed-read-keeps-dir-lock", Mode::Pct { depth: 3 }),
            ("failed-read-abandons-split", Mode::Random),
        ] {
            let scenario = || IndexScenario::<Race>::from_preset(Some("read-failure"), None, Some(bug), 1).unwrap();
            let check = check_index(&scenario(), mode, 1, Duration::from_secs(600), 20_000);
            let f = check
                .exploration
                .failure
                .unwrap_or_else(|| panic!("{bug} not found in {} schedules", check.exploration.schedules));
            assert!(f.message.contains("held with no operation in flight"), "{bug}: {}", f.message);
            assert_eq!(explore::replay(&scenario(), f.variant, &f.choices), Err(f.message.clone()), "{bug}");
        }
    }

    /// 2-slot buckets (24 bytes) put some headers and slots in different cache lines. Without
    /// the fenced header re-read, a search that reads a bucket's header before the split's CAS
    /// and its slot after the move misses a preloaded key: PCT finds it at schedule 13,511 of
    /// seed 1 (bounded, so the test does not depend on the machine's speed), and it replays.
    #[test]
    fn the_header_recheck_is_needed() {
        let planted = scenario("default-2slot", None, Some("no-header-recheck"));
        let check = check_index(&planted, Mode::Pct { depth: 3 }, 1, Duration::from_secs(600), 20_000);
        let f = check
            .exploration
            .failure
            .unwrap_or_else(|| panic!("not found in {} schedules", check.exploration.schedules));
        assert!(f.message.contains("not linearizable"), "{}", f.message);
        assert_eq!(explore::replay(&planted, f.variant, &f.choices), Err(f.message.clone()));
        // The same schedule with the re-read runs clean.
        assert_eq!(explore::replay(&scenario("default-2slot", None, None), f.variant, &f.choices), Ok(()));
    }

    /// Digest K1: the paper zeroes and reuses a block as soon as its pointer leaves the slot,
    /// and its search skips a block that no longer holds the key. A search that read the slot
    /// before an update, and the block after it, misses a key that was there all along. Safe
    /// mode (blocks never reused, invalid blocks re-read) runs the same script clean.
    #[test]
    fn immediate_reuse_makes_a_search_miss_a_present_key() {
        let script = |faithful: bool| {
            let mut s = scenario("basic", Some(if faithful { "paper-reuse" } else { "safe" }), None);
            s.preset.preload = 1;
            let k = (s.preset.key_of)(0);
            let v = |b: u8| vec![b; 32];
            s.scripted(vec![
                vec![Op::Search { key: k.clone() }, Op::Search { key: k.clone() }],
                vec![Op::Update { key: k.clone(), value: v(1) }, Op::Update { key: k.clone(), value: v(2) }],
            ])
        };
        let check = check_index(&script(true), Mode::Random, 3, budget(), u64::MAX);
        let f = check.exploration.failure.expect("the missed key is found");
        assert!(f.message.contains("not linearizable"), "{}", f.message);
        assert_eq!(explore::replay(&script(true), f.variant, &f.choices), Err(f.message.clone()));
        let safe = script(false);
        let clean = check_index(&safe, Mode::Random, 3, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 100);
    }

    /// A preset's scenario for a script, with `config`.
    fn script(preset: &str, config: &str, ops: Vec<Vec<Op>>) -> IndexScenario<Race> {
        scenario(preset, Some(config), None).scripted(ops)
    }

    /// Explores `hole` (a scripted scenario under a paper configuration) with a fixed seed and
    /// schedule bound; the failure must be a linearizability violation that replays. Then
    /// the same script in safe mode must be clean over `budget()`, and not trivially so.
    fn hole_found_and_fixed(name: &str, hole: &IndexScenario<Race>, safe: &IndexScenario<Race>, schedules: u64) {
        let check = check_index(hole, Mode::Random, 1, Duration::from_secs(600), schedules);
        let f = check.exploration.failure.unwrap_or_else(|| {
            panic!("{name}: not found in {} schedules; counters {:?}", check.exploration.schedules, check.counters)
        });
        eprintln!("{name}: found at schedule {}: {}", check.exploration.schedules, f.message);
        assert!(f.message.contains("not linearizable"), "{name}: {}", f.message);
        assert_eq!(explore::replay(hole, f.variant, &f.choices), Err(f.message.clone()), "{name}");
        let clean = check_index(safe, Mode::Random, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{name} in safe mode: {}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 50, "{name}: {} schedules", clean.exploration.schedules);
    }

    /// The default preset (one subtable of six 1-slot buckets, keys 0..3 preloaded): a
    /// preloaded key that the first split moves, and fresh keys whose inserts split the table.
    fn moving_key_and_splitters() -> (Vec<u8>, Vec<Op>) {
        let s = scenario("default", None, None);
        let g = s.options.geometry();
        let key_of = s.preset.key_of;
        let moving = (0..s.preset.preload)
            .map(key_of)
            .find(|k| g.hash(k).dir & 1 == 1)
            .expect("a preloaded key moves at the first split");
        let splitters = (s.preset.preload..s.preset.preload + 6)
            .map(|k| Op::Insert { key: key_of(k), value: vec![0x5a; 32] })
            .collect();
        (moving, splitters)
    }

    /// `ops` with `n` searches of an absent key before each: spreads a client's operations over
    /// the split, which the other client's inserts start only after a few round trips.
    fn spread(n: usize, ops: Vec<Op>) -> Vec<Op> {
        spread_with(staying_absent_key(), n, ops)
    }

    /// [`spread`] with searches of `pad`.
    fn spread_with(pad: Vec<u8>, n: usize, ops: Vec<Op>) -> Vec<Op> {
        let pad = Op::Search { key: pad };
        ops.into_iter().flat_map(|op| std::iter::repeat_n(pad.clone(), n).chain([op])).collect()
    }

    /// A key no script writes whose directory bit 0 is clear: its searches never see a moved
    /// bucket, so they never refresh a stale directory cache.
    fn staying_absent_key() -> Vec<u8> {
        let g = scenario("default", None, None).options.geometry();
        (0xee00u64..).map(|n| n.to_be_bytes().to_vec()).find(|k| g.hash(k).dir & 1 == 0).expect("a key")
    }

    /// Digest K4 (`paper-split`): writes act on the new subtable while the split fills it. A
    /// search probes new, old, new; if the copy reaches the new subtable after its first read
    /// and is updated there, its second read finds the old copy, not yet cleared, and returns
    /// the old value after the update returned. Safe mode (writes wait for the fill) is clean.
    #[test]
    fn k4_an_update_in_the_filling_subtable_is_read_stale() {
        let (x, splitters) = moving_key_and_splitters();
        let ops = |c: &str| {
            script(
                "default",
                c,
                vec![
                    splitters.clone(),
                    spread(3, (1..=6).map(|v| Op::Update { key: x.clone(), value: vec![v; 32] }).collect()),
                    vec![Op::Search { key: x.clone() }; 30],
                ],
            )
        };
        hole_found_and_fixed("K4", &ops("paper-split"), &ops("safe"), 20_000);
    }

    /// Digest K5 (`paper-split`): a delete whose CAS lands between the mover's copy and its
    /// clear returns, and the copy stays findable in the new subtable until the mover sees its
    /// clear fail and takes the copy back (transient resurrection).
    #[test]
    fn k5_a_deleted_key_comes_back_during_a_split() {
        let (x, splitters) = moving_key_and_splitters();
        let ops = |c: &str| {
            script(
                "default",
                c,
                vec![
                    splitters.clone(),
                    // With this padding seed 1 finds it at schedule 6,907; with the staying
                    // key's, only at 144,673.
                    spread_with(vec![0xee; 8], 12, vec![Op::Delete { key: x.clone() }]),
                    vec![Op::Search { key: x.clone() }; 30],
                ],
            )
        };
        hole_found_and_fixed("K5", &ops("paper-split"), &ops("safe"), 20_000);
    }

    /// Digest K6 (`paper-split`): an insert (an upsert, D11) of a present key that has not
    /// moved yet looks only in the filling subtable, publishes a second copy there and reports
    /// the key absent.
    #[test]
    fn k6_an_insert_into_the_filling_subtable_duplicates_an_unmoved_key() {
        let (x, splitters) = moving_key_and_splitters();
        let ops = |c: &str| {
            script(
                "default",
                c,
                vec![
                    splitters.clone(),
                    spread(3, (1..=6).map(|v| Op::Insert { key: x.clone(), value: vec![v; 32] }).collect()),
                ],
            )
        };
        hole_found_and_fixed("K6", &ops("paper-split"), &ops("safe"), 20_000);
    }

    /// Digest K2 (`paper-reuse`): an update reads X's slot; X is deleted, its block zeroed and
    /// reused at once for a new key Y with X's fingerprint and buckets, published into the same
    /// slot with the same word; the update's CAS then succeeds on Y's slot: Y is lost and X is
    /// back. Safe mode (blocks never reused) is clean.
    #[test]
    fn k2_a_reused_block_lets_a_stale_cas_succeed() {
        let s = scenario("same-key", None, None);
        let g = s.options.geometry();
        let key_of = s.preset.key_of;
        let x = key_of(0);
        let hx = g.hash(&x);
        let same = |k: &[u8]| {
            let h = g.hash(k);
            let sorted = |mut i: [usize; 2]| {
                i.sort();
                i
            };
            h.fp == hx.fp && h.dir & 1 == hx.dir & 1 && sorted(h.idx) == sorted(hx.idx)
        };
        let y = (1u64..5_000_000).map(|n| (n << 32).to_be_bytes().to_vec()).find(|k| same(k)).expect("a twin key");
        let ops = |c: &str| {
            script(
                "same-key",
                c,
                vec![
                    // Client 0 shares compute node 0 (and its allocator) with the preloader.
                    vec![
                        Op::Delete { key: x.clone() },
                        Op::Insert { key: y.clone(), value: vec![7; 32] },
                        Op::Search { key: y.clone() },
                    ],
                    vec![Op::Update { key: x.clone(), value: vec![1; 32] }],
                ],
            )
        };
        hole_found_and_fixed("K2", &ops("paper-reuse"), &ops("safe"), 20_000);
    }

    /// Digest K7 (`paper-printed`): the printed Algorithms 2 and 3 restart on a stale bucket
    /// without re-reading the directory. A client alone on its compute node, whose cache
    /// predates a split, retries forever on the moved key. Safe mode re-reads and is clean.
    #[test]
    fn k7_a_restart_without_synchronize_livelocks() {
        let (x, splitters) = moving_key_and_splitters();
        let ops = |c: &str| {
            let mut s = script(
                "default",
                c,
                vec![
                    splitters.clone(),
                    spread(3, (1..=6).map(|v| Op::Update { key: x.clone(), value: vec![v; 32] }).collect()),
                ],
            );
            // Unbounded retries, so that a livelock shows as a run that never ends.
            s.options.max_retries = u32::MAX;
            s.preset.step_limit = 20_000;
            s
        };
        let hole = ops("paper-printed");
        let check = check_index(&hole, Mode::Random, 1, Duration::from_secs(600), 200_000);
        let f = check.exploration.failure.expect("the livelock is found");
        eprintln!("K7: found at schedule {}: {}", check.exploration.schedules, f.message);
        assert!(f.message.contains("no progress"), "{}", f.message);
        assert_eq!(explore::replay(&hole, f.variant, &f.choices), Err(f.message.clone()));
        let clean = check_index(&ops("safe"), Mode::Random, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 50, "{} schedules", clean.exploration.schedules);
    }

    /// Algorithm 1's check after its CAS (`paper-insert`): an insert whose bucket a split's
    /// step 1 changed between its READ and its CAS takes its slot back and inserts again. Without
    /// it (`no-resize-check`) the item stays behind in the old subtable. Inserts of distinct
    /// fresh keys only, so the paper's duplicate race cannot occur; 2-slot buckets, so a bucket
    /// the split has not reached yet can have room. PCT reaches the window (random exploration
    /// does not: the splitting inserts keep the two clients apart); seed 1 finds it at
    /// schedule 4, as a key in the wrong subtable.
    #[test]
    fn the_paper_inserts_resize_check_is_needed() {
        let script = |plant: Option<&str>| {
            let s = IndexScenario::<Race>::from_preset(Some("basic"), Some("paper-insert"), plant, 3).unwrap();
            let (g, key_of) = (s.options.geometry(), s.preset.key_of);
            let splitters: Vec<Op> = (3..20).map(|k| Op::Insert { key: key_of(k), value: vec![0x5a; 32] }).collect();
            // Keys that a split of the two initial subtables (depth 1 to 2) moves.
            let movers: Vec<Op> = (100..)
                .map(key_of)
                .filter(|k| g.hash(k).dir & 2 == 2)
                .take(8)
                .map(|k| Op::Insert { key: k, value: vec![7; 32] })
                .collect();
            s.scripted(vec![splitters, movers])
        };
        let pct = Mode::Pct { depth: 3 };
        let hole = script(Some("no-resize-check"));
        let check = check_index(&hole, pct, 1, Duration::from_secs(600), 3_000);
        let f = check.exploration.failure.expect("the stranded insert is found");
        assert!(f.message.contains("invariant violated") || f.message.contains("not linearizable"), "{}", f.message);
        assert_eq!(explore::replay(&hole, f.variant, &f.choices), Err(f.message.clone()));
        let clean = check_index(&script(None), pct, 1, budget(), u64::MAX);
        assert!(clean.exploration.failure.is_none(), "{}", clean.exploration.failure.unwrap());
        assert!(clean.exploration.schedules > 50, "{} schedules", clean.exploration.schedules);
    }

    /// The paper's lock-free insert with duplicate agreement (`paper-insert`): two concurrent
    /// inserts of one absent key can both report that it did not exist (the paper's insert
    /// reports nothing; dmkit's does). Safe mode's insert lock serialises them.
    #[test]
    fn paper_inserts_of_one_absent_key_both_report_it_absent() {
        let k = scenario("same-key", None, None).preset.key_of;
        let ops = |c: &str| {
            script(
                "same-key",
                c,
                vec![
                    vec![Op::Insert { key: k(2), value: vec![1; 32] }],
                    vec![Op::Insert { key: k(2), value: vec![2; 32] }],
                ],
            )
        };
        hole_found_and_fixed("insert race", &ops("paper-insert"), &ops("safe"), 20_000);
    }
}

/// K7's other half (`paper-printed`): the printed update and delete return SUCCESS for an
/// absent key. Safe mode returns `false` (D12).
#[test]
fn printed_mode_succeeds_on_an_absent_key() {
    let ops =
        vec![Op::Update { key: key(3), value: vec![1; 8] }, Op::Delete { key: key(4) }, Op::Search { key: key(3) }];
    let printed = RaceOptions { paper: Paper::named("paper-printed").unwrap(), ..options(2, 2, 0) };
    let (got, _, walk) = run_sequence_checked::<Race>(&printed, &ops);
    assert_eq!(got, vec![Outcome::Existed(true), Outcome::Existed(true), Outcome::Found(None)]);
    walk.unwrap();
    let (got, want, _) = run_sequence_checked::<Race>(&options(2, 2, 0), &ops);
    assert_eq!(got, want);
    assert_eq!(got[..2], [Outcome::Existed(false), Outcome::Existed(false)]);
}

/// The paper's run-until-insert-failure (Fig. 5/12a): one subtable of 7-slot buckets (no
/// splits) filled with unique keys until the first insert fails; the load factor (items over
/// all slots, main and overflow) is about 90% in the paper. Then every stored key is found.
#[test]
fn seven_slots_fill_to_about_ninety_percent() {
    let o = RaceOptions {
        key_bytes: 16,
        value_bytes: 32,
        slots: 7,
        groups: 256,
        initial_depth: 0,
        max_depth: 0,
        ..RaceOptions::default()
    };
    let capacity = 3 * 256 * 7;
    let k = |i: u32| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes().to_vec();
    let mut ops: Vec<Op> =
        (0..capacity as u32 + 1).map(|i| Op::Insert { key: k(i), value: vec![i as u8; 32] }).collect();
    let (got, _, walk) = run_sequence_checked::<Race>(&o, &ops);
    let first_full =
        got.iter().position(|r| *r == Outcome::Failed(dmkit_indexes::IndexError::Full)).expect("the table fills");
    let load_factor = first_full as f64 / capacity as f64;
    eprintln!("race: first insert failure at load factor {load_factor:.3} ({first_full} of {capacity} slots)");
    assert!((0.8..0.97).contains(&load_factor), "load factor {load_factor:.3}");
    assert!(got[..first_full].iter().all(|r| *r == Outcome::Existed(false)));
    walk.unwrap();
    ops.truncate(first_full);
    ops.extend((0..first_full as u32).map(|i| Op::Search { key: k(i) }));
    let (got, want, _) = run_sequence_checked::<Race>(&o, &ops);
    assert_eq!(got, want);
}

/// Digest K3: the paper's insert does not look for its key, so re-inserting a present key
/// publishes a second copy and duplicate removal keeps the lower one: for some keys the new
/// value is lost (faithful mode). Safe mode updates the present copy.
#[test]
fn faithful_mode_loses_upserts_and_safe_mode_does_not() {
    let mut lost = 0;
    for k in 0..40u16 {
        let ops = vec![
            Op::Insert { key: key(100), value: vec![9; 8] },
            Op::Insert { key: key(k), value: vec![1; 8] },
            Op::Insert { key: key(k), value: vec![2; 8] },
            Op::Search { key: key(k) },
        ];
        let faithful = RaceOptions { paper: Paper::named("faithful").unwrap(), ..options(2, 2, 0) };
        let (got, want, _) = run_sequence_checked::<Race>(&faithful, &ops);
        if got[3] != want[3] {
            assert_eq!(got[3], Outcome::Found(Some(vec![1; 8])), "key {k}: the old value survives");
            lost += 1;
        }
        let (got, want, walk) = run_sequence_checked::<Race>(&options(2, 2, 0), &ops);
        assert_eq!(got, want, "key {k}");
        walk.unwrap();
    }
    assert!(lost > 0, "no upsert was lost in faithful mode");
    eprintln!("faithful mode lost {lost} of 40 upserts");
}

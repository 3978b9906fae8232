//! The example index against its executable specification, in the simulator: sequences from
//! proptest for one client, 64 concurrent clients with their own keys over shared buckets, and
//! readers racing writers on shared keys under maximal tearing. Each planted bug makes one of
//! these fail.

use dmkit_indexes::example::{Example, ExampleOptions};
use dmkit_indexes::spec::{self, Op, Outcome, SpecMap};
use dmkit_indexes::{Index, IndexError, IndexKind};
use dmkit_rdma::Caps;
use dmkit_sim::{Faults, Sim, SimClient, SimConfig, Tearing, Topology};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::ops::Bound;
use std::rc::Rc;
use std::sync::Arc;

fn sim(seed: u64, compute_nodes: u16, memory_nodes: u16, tearing: bool) -> Sim {
    let cfg = SimConfig {
        topology: Topology { compute_nodes, memory_nodes, ..Topology::default() },
        faults: Faults { tearing: tearing.then_some(Tearing { window_ns: 400 }), ..Faults::default() },
        seed,
        ..SimConfig::default()
    };
    Sim::new(cfg).unwrap()
}

/// Creates the index with one client and runs until it is built.
fn create(sim: &mut Sim, options: &ExampleOptions) {
    let c = sim.add_client(0).unwrap();
    let (c2, o) = (c.clone(), options.clone());
    sim.spawn(&c, async move { Example::create(&o, &c2).await.expect("create") });
    sim.run().unwrap();
}

/// One handle per client, sharing a node state per compute node.
fn handles(
    sim: &mut Sim,
    options: &ExampleOptions,
    clients: usize,
    compute_nodes: u16,
) -> Vec<(SimClient, <Example as IndexKind>::Handle<SimClient>)> {
    let caps = sim.caps().clone();
    let nodes: Vec<_> = (0..compute_nodes).map(|_| Arc::new(Example::node_state(options, &caps))).collect();
    (0..clients)
        .map(|i| {
            let cn = (i % compute_nodes as usize) as u16;
            let c = sim.add_client(cn).unwrap();
            let h = Example::open(options, nodes[cn as usize].clone(), c.clone());
            (c, h)
        })
        .collect()
}

fn op_strategy(keys: u8) -> impl Strategy<Value = Op> {
    let key = (0..keys).prop_map(|k| vec![b'k', k]);
    let value = prop::collection::vec(any::<u8>(), 0..12);
    prop_oneof![
        key.clone().prop_map(|key| Op::Search { key }),
        (key.clone(), value.clone()).prop_map(|(key, value)| Op::Insert { key, value }),
        (key.clone(), value).prop_map(|(key, value)| Op::Update { key, value }),
        key.clone().prop_map(|key| Op::Delete { key }),
        key.prop_map(|k| Op::Scan { start: Bound::Included(k), end: Bound::Unbounded, limit: 3 }),
    ]
}

fn run_sequence(options: &ExampleOptions, ops: Vec<Op>) -> (Vec<Outcome>, Vec<Outcome>) {
    let mut s = sim(1, 1, 1, false);
    create(&mut s, options);
    let (c, mut h) = handles(&mut s, options, 1, 1).pop().unwrap();
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    let todo = ops.clone();
    s.spawn(&c, async move {
        for op in &todo {
            let out = spec::apply(&mut h, op).await;
            g.borrow_mut().push(out);
        }
    });
    s.run().unwrap();
    let mut model = SpecMap::new();
    let want = ops.iter().map(|op| model.apply(op, false)).collect();
    let got = got.borrow().clone();
    (got, want)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 48 } else { 256 }, ..ProptestConfig::default() })]

    /// One client: every outcome equals the model's, through inserts, upserts, updates of absent
    /// keys, deletes and (unsupported) scans, with buckets small enough to collide.
    #[test]
    fn sequences_match_the_specification(ops in prop::collection::vec(op_strategy(24), 1..80)) {
        let options = ExampleOptions { buckets: 8, slots_per_bucket: 8, ..ExampleOptions::default() };
        let (got, want) = run_sequence(&options, ops);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn limits_and_full_buckets_are_errors() {
    let options = ExampleOptions {
        buckets: 1,
        slots_per_bucket: 2,
        max_key_bytes: 8,
        max_value_bytes: 4,
        ..ExampleOptions::default()
    };
    let ops = vec![
        Op::Insert { key: vec![], value: vec![1] },
        Op::Insert { key: vec![1; 9], value: vec![1] },
        Op::Insert { key: vec![1], value: vec![1; 5] },
        Op::Insert { key: vec![1], value: vec![1; 4] },
        Op::Insert { key: vec![2], value: vec![2] },
        Op::Insert { key: vec![3], value: vec![3] },
        Op::Insert { key: vec![2], value: vec![9] },
        Op::Search { key: vec![2] },
    ];
    let (got, _) = run_sequence(&options, ops);
    assert_eq!(got[0], Outcome::Failed(IndexError::KeyTooShort { len: 0, min: 1 }));
    assert_eq!(got[1], Outcome::Failed(IndexError::KeyTooLong { len: 9, max: 8 }));
    assert_eq!(got[2], Outcome::Failed(IndexError::ValueTooLong { len: 5, max: 4 }));
    assert_eq!(got[3..6], [Outcome::Existed(false), Outcome::Existed(false), Outcome::Failed(IndexError::Full)]);
    assert_eq!(got[6], Outcome::Existed(true), "an upsert into a full bucket still finds its key");
    assert_eq!(got[7], Outcome::Found(Some(vec![9])));
}

/// 64 clients on 4 compute nodes, each with its own keys, over few shared buckets on two
/// memory nodes: each client's outcomes must match its own model, the remote structure must
/// satisfy its invariants, and the run must have had lock contention (or it proves nothing).
fn concurrent_clients(options: &ExampleOptions, seed: u64) -> Result<u64, String> {
    const CLIENTS: usize = 64;
    let mut s = sim(seed, 4, 2, true);
    create(&mut s, options);
    let failures = Rc::new(RefCell::new(Vec::new()));
    let contention = Rc::new(RefCell::new(0u64));
    for (i, (c, mut h)) in handles(&mut s, options, CLIENTS, 4).into_iter().enumerate() {
        let (failures, contention) = (failures.clone(), contention.clone());
        let c2 = c.clone();
        s.spawn(&c, async move {
            let mut model = SpecMap::new();
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 1000 + i as u64);
            for step in 0..40 {
                let key = vec![b'c', i as u8, rng.random_range(0..3u8)];
                let value = vec![i as u8, step as u8];
                let op = match rng.random_range(0..4) {
                    0 => Op::Search { key },
                    1 => Op::Insert { key, value },
                    2 => Op::Update { key, value },
                    _ => Op::Delete { key },
                };
                let (got, want) = (spec::apply(&mut h, &op).await, model.apply(&op, false));
                if got != want {
                    failures
                        .borrow_mut()
                        .push(format!("client {i} step {step}: {op:?} gave {got:?}, the model {want:?}"));
                    return;
                }
                c2.sleep(rng.random_range(0..200)).await;
            }
            *contention.borrow_mut() += h.counters().lock_failures;
        });
    }
    s.run().map_err(|e| e.to_string())?;
    if let Some(f) = failures.borrow().first() {
        return Err(format!("seed {seed}: {f}"));
    }
    Example::check_invariants(options, &s).map_err(|e| format!("seed {seed}: invariant: {e}"))?;
    let contention = *contention.borrow();
    Ok(contention)
}

fn concurrent_options() -> ExampleOptions {
    ExampleOptions { buckets: 16, slots_per_bucket: 16, memory_nodes: 2, ..ExampleOptions::default() }
}

#[test]
fn concurrent_clients_match_their_specifications() {
    let mut contention = 0;
    for seed in 0..4 {
        contention += concurrent_clients(&concurrent_options(), seed).unwrap();
    }
    assert!(contention > 0, "no lock was ever contended: the test exercised nothing");
}

#[test]
fn planted_lock_bugs_break_the_concurrent_test() {
    for bug in ["no-lock", "unlock-before-write"] {
        let mut options = concurrent_options();
        Example::plant(&mut options, bug).unwrap();
        let caught = (0..8).find_map(|seed| concurrent_clients(&options, seed).err());
        assert!(caught.is_some(), "planted bug {bug} went unnoticed over 8 seeds");
    }
    assert!(Example::plant(&mut concurrent_options(), "no-such-bug").unwrap_err().contains("no-lock"));
}

/// Writers update shared keys with uniform values ([w; 32]); readers must only ever see a value
/// someone wrote. Under maximal tearing a slot is often read across a WRITE: the checksum makes
/// search read again, and without it (`no-checksum`) mixed values come out.
fn readers_see_written_values(options: &ExampleOptions, seed: u64) -> Result<u64, String> {
    let mut s = sim(seed, 2, 1, true);
    create(&mut s, options);
    let bad = Rc::new(RefCell::new(None));
    let reads = Rc::new(RefCell::new(0u64));
    let mut all = handles(&mut s, options, 8, 2);
    for (i, (c, mut h)) in all.drain(..).enumerate() {
        let (bad, reads) = (bad.clone(), reads.clone());
        s.spawn(&c, async move {
            for step in 0..60u8 {
                let key = vec![b's', step % 2];
                if i < 4 {
                    let w = (i as u8) * 60 + step;
                    h.insert(&key, &[w; 32]).await.unwrap();
                } else if let Some(v) = h.search(&key).await.unwrap() {
                    *reads.borrow_mut() += 1;
                    if v.len() != 32 || v.iter().any(|&b| b != v[0]) {
                        bad.borrow_mut().get_or_insert(format!("seed {seed}: reader {i} saw {v:02x?}"));
                    }
                }
            }
        });
    }
    s.run().map_err(|e| e.to_string())?;
    let reads = *reads.borrow();
    match bad.borrow().clone() {
        Some(b) => Err(b),
        None => Ok(reads),
    }
}

#[test]
fn readers_never_see_torn_values_and_no_checksum_does() {
    let options = ExampleOptions { buckets: 1, slots_per_bucket: 4, ..ExampleOptions::default() };
    let reads: u64 = (0..3).map(|seed| readers_see_written_values(&options, seed).unwrap()).sum();
    assert!(reads > 50, "readers found values {reads} times");
    let mut planted = options.clone();
    Example::plant(&mut planted, "no-checksum").unwrap();
    assert!((0..6).any(|seed| readers_see_written_values(&planted, seed).is_err()), "no-checksum went unnoticed");
}

#[test]
fn invariant_walk_catches_corruption() {
    let options = ExampleOptions { buckets: 4, slots_per_bucket: 2, ..ExampleOptions::default() };
    let mut s = sim(3, 1, 1, false);
    create(&mut s, &options);
    let (c, mut h) = handles(&mut s, &options, 1, 1).pop().unwrap();
    s.spawn(&c, async move {
        for k in 0..6u8 {
            h.insert(&[k], &[k]).await.unwrap();
        }
    });
    s.run().unwrap();
    let report = Example::check_invariants(&options, &s).unwrap();
    assert_eq!(report.items, 6);
    assert_eq!(report.structures["buckets"], 4);
    // A held lock and a flipped byte are both reported.
    let raw = s.read_memory(dmkit_indexes::example::layout::superblock_addr(), 56).unwrap();
    let sb = dmkit_indexes::example::layout::Superblock::decode(&raw).unwrap();
    s.write_memory(sb.bucket_addr(2), &7u64.to_le_bytes()).unwrap();
    assert!(Example::check_invariants(&options, &s).unwrap_err().contains("lock word"));
    s.write_memory(sb.bucket_addr(2), &0u64.to_le_bytes()).unwrap();
    for b in 0..4 {
        let at = sb.bucket_addr(b).add(sb.slot_offset(0) as u64 + 20);
        let byte = s.read_memory(at, 1).unwrap()[0];
        s.write_memory(at, &[byte ^ 0xff]).unwrap();
    }
    assert!(Example::check_invariants(&options, &s).unwrap_err().contains("checksum"));
}

#[test]
fn bulk_load_builds_the_table_without_simulated_time() {
    let options = ExampleOptions { buckets: 1024, slots_per_bucket: 16, ..ExampleOptions::default() };
    let mut s = sim(4, 1, 1, false);
    s.set_instant(true);
    create(&mut s, &options);
    let (c, mut h) = handles(&mut s, &options, 1, 1).pop().unwrap();
    let items: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32).map(|k| (k.to_be_bytes().to_vec(), vec![k as u8; 8])).collect();
    let loaded = Rc::new(RefCell::new(0));
    let l = loaded.clone();
    s.spawn(&c, async move {
        *l.borrow_mut() = dmkit_indexes::bulk::load(&mut h, items).await.unwrap();
        // Measured phase: the same handle, normal timing.
    });
    s.run().unwrap();
    assert_eq!(*loaded.borrow(), 2000);
    assert_eq!(s.now_ns(), 0, "bulk load takes no simulated time");
    assert_eq!(Example::check_invariants(&options, &s).unwrap().items, 2000);
    s.set_instant(false);
    let (c, mut h) = handles(&mut s, &options, 1, 1).pop().unwrap();
    let found = Rc::new(RefCell::new(None));
    let f = found.clone();
    s.spawn(&c, async move {
        *f.borrow_mut() = Some(h.search(&1234u32.to_be_bytes()).await.unwrap());
    });
    s.run().unwrap();
    assert_eq!(found.borrow().clone(), Some(Some(vec![1234u32 as u8; 8])));
    assert!(s.now_ns() > 1000, "after bulk load, operations take time again");
    let _ = Caps::clone(s.caps());
}

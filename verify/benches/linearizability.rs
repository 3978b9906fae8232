//! The cost of checking 10 000-operation histories of 64 concurrent clients.
//!
//! Histories come from a simulated random interleaving (seeded ChaCha8): each client has at most
//! one operation in flight; at every global step one client, chosen at random, advances its
//! operation by one phase — invoke, take effect on the model (the linearization point), respond
//! — and the step counter is the logical time, so intervals overlap as in a real run.
//!
//! - `1000_keys`: 10 000 operations over 1 000 keys;
//! - `10_keys`: the same over 10 hot keys (many overlapping operations per key);
//! - `1000_keys_5pct_scans`: 1 000 keys with 5% scans of limit 10.
//!
//! Run: `cargo bench -p dmkit-verify --bench linearizability -- --quick`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dmkit_indexes::spec::{Op, Outcome, SpecMap};
use dmkit_verify::history::{History, Record};
use dmkit_verify::linearizability::check;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::ops::Bound;

const OPERATIONS: usize = 10_000;
const CLIENTS: usize = 64;

struct InFlight {
    op: Op,
    invoke: u64,
    outcome: Option<Outcome>,
}

/// A history of `OPERATIONS` operations over `keys` keys; `scan_percent` of them scans of limit 10.
fn generate(seed: u64, keys: u64, scan_percent: u32) -> History {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = SpecMap::new();
    let mut in_flight: Vec<Option<InFlight>> = (0..CLIENTS).map(|_| None).collect();
    let (mut issued, mut step, mut next_value) = (0usize, 0u64, 0u64);
    let mut records = Vec::with_capacity(OPERATIONS);
    while records.len() < OPERATIONS {
        step += 1;
        let client = rng.random_range(0..CLIENTS);
        match &mut in_flight[client] {
            slot @ None if issued < OPERATIONS => {
                issued += 1;
                let key = rng.random_range(0..keys).to_be_bytes().to_vec();
                next_value += 1;
                let value = next_value.to_be_bytes().to_vec();
                let roll = rng.random_range(0..100);
                let op = if roll < scan_percent {
                    Op::Scan { start: Bound::Included(key), end: Bound::Unbounded, limit: 10 }
                } else {
                    match rng.random_range(0..100) {
                        0..50 => Op::Search { key },
                        50..75 => Op::Insert { key, value },
                        75..88 => Op::Update { key, value },
                        _ => Op::Delete { key },
                    }
                };
                *slot = Some(InFlight { op, invoke: step, outcome: None });
            }
            None => {}
            Some(f) if f.outcome.is_none() => f.outcome = Some(model.apply(&f.op, true)),
            Some(_) => {
                let f = in_flight[client].take().expect("in flight");
                records.push(Record {
                    client: client as u32,
                    op: f.op,
                    outcome: f.outcome.expect("took effect"),
                    invoke: f.invoke,
                    respond: Some(step),
                });
            }
        }
    }
    History { records }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("linearizability_check");
    group.throughput(Throughput::Elements(OPERATIONS as u64));
    for (name, keys, scans) in [("1000_keys", 1000, 0), ("10_keys", 10, 0), ("1000_keys_5pct_scans", 1000, 5)] {
        let history = generate(42, keys, scans);
        let report = check(&history, true).expect("a history of a sequential model is linearizable");
        eprintln!("{name}: {report:?}");
        group.bench_with_input(BenchmarkId::from_parameter(name), &history, |b, h| {
            b.iter(|| check(black_box(h), true).expect("linearizable"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

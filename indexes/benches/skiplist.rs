//! HStore's skiplist (the SLS's partitions) as a load fills it: 1 M random 8-byte keys into
//! four partitions of 250 k, then a lookup of each. A search is about 31 node visits, each a
//! dependent access to a random node, so this measures the node layout against the host's
//! memory (HStore's load spent a fifth of its time here until it stopped searching: below).
//! The nodes visited are printed: a layout change must leave them unchanged (the SLS charges
//! simulated CPU per visit).
//!
//! 2026-11-30: about 2.4 s for the upserts and 3.3 s for the lookups (3.3 us, about 100 ns a
//! visit: nearly every visit misses the host's caches). Packing nodes by height, so that the
//! upper levels' moves stay within a few MB, measured no different (alternating runs: 3.29,
//! 3.64, 3.35 s against 3.29, 3.46, 3.42 s) and was not kept.
//!
//! A load's upserts are not priced (the simulator's instant mode), so the SLS makes them with
//! `upsert_unpriced` and links the list once, at its first other use (`settle`); "upsert
//! unpriced and settle" measures that path, which leaves the same list. 2026-11-30, evening:
//! 1.61 s for the upserts, 0.21 s unpriced with the settle, 2.11 s for the lookups.
//!
//! Run: `cargo bench -p dmkit-indexes --bench skiplist`.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dmkit_indexes::hstore::skiplist::{SkipList, Value};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;

const KEYS: usize = 1_000_000;
const PARTITIONS: usize = 4;

fn keys() -> Vec<[u8; 8]> {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    (0..KEYS).map(|_| rng.random::<u64>().to_be_bytes()).collect()
}

fn fill(keys: &[[u8; 8]]) -> (Vec<SkipList>, u64) {
    let mut lists: Vec<SkipList> =
        (0..PARTITIONS).map(|i| SkipList::with_capacity(i as u64, KEYS / PARTITIONS)).collect();
    let mut visits = 0;
    for (i, k) in keys.iter().enumerate() {
        visits += lists[i % PARTITIONS].upsert(k, Value { addr: i as u64, units: 1 }).1.total();
    }
    (lists, visits)
}

fn fill_unpriced(keys: &[[u8; 8]]) -> Vec<SkipList> {
    let mut lists: Vec<SkipList> =
        (0..PARTITIONS).map(|i| SkipList::with_capacity(i as u64, KEYS / PARTITIONS)).collect();
    for (i, k) in keys.iter().enumerate() {
        lists[i % PARTITIONS].upsert_unpriced(k, Value { addr: i as u64, units: 1 });
    }
    for list in &mut lists {
        list.settle();
    }
    lists
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let (mut lists, visits) = fill(&keys);
    println!("skiplist: {KEYS} keys in {PARTITIONS} partitions, {visits} nodes visited by the upserts");
    let mut g = c.benchmark_group("skiplist");
    g.sample_size(10);
    g.bench_function("upsert 1 M keys", |b| b.iter(|| black_box(fill(&keys).1)));
    g.bench_function("upsert unpriced and settle 1 M keys", |b| b.iter(|| black_box(fill_unpriced(&keys).len())));
    g.bench_function("get 1 M keys", |b| {
        b.iter_batched(
            || (),
            |()| {
                let mut found = 0u64;
                for (i, k) in keys.iter().enumerate() {
                    found += lists[i % PARTITIONS].get(k).0.is_some() as u64;
                }
                black_box(found)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

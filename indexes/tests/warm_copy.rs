//! Warming one compute node and copying its state to the others (`IndexKind::warm_like`, what
//! the runner does) leaves every node exactly as warming each one would: the same entries, with
//! the same insertion order and identities, and the same counters.

use dmkit_indexes::art::{self, Art};
use dmkit_indexes::smart::{Smart, SmartOptions};
use dmkit_indexes::{Index, IndexKind};
use dmkit_sim::{Sim, SimConfig};
use std::sync::Arc;

/// Loads `keys` keys into `K` (spread over the key space, so the tree has several levels).
fn loaded<K: IndexKind>(o: &K::Options, keys: u64) -> Sim {
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    let node = Arc::new(K::node_state(o, sim.caps()));
    let creator = sim.add_client(0).unwrap();
    let (c, opts) = (creator.clone(), o.clone());
    sim.spawn(&creator, async move {
        K::create(&opts, &c).await.unwrap();
        let mut h = K::open(&opts, node, c.clone());
        for k in 0..keys {
            let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
            h.insert(&key, &k.to_le_bytes()).await.unwrap();
        }
    });
    sim.run().unwrap();
    sim
}

/// (warmed twice from memory alike, the copy is the warmed state, entries cached)
fn compare<K: IndexKind<NodeState = dmkit_indexes::smart::SmartNode>>(o: &K::Options) -> (bool, bool, u64) {
    let sim = loaded::<K>(o, 3000);
    let [a, b, c] = [0; 3].map(|_| K::node_state(o, sim.caps()));
    K::warm(o, &a, &sim).unwrap();
    K::warm(o, &b, &sim).unwrap();
    K::warm_like(o, &c, &a, &sim).unwrap();
    (a.cache.same_state(&b.cache), b.cache.same_state(&c.cache), c.cache.stats().entries)
}

#[test]
fn a_copied_warm_cache_is_the_cache_warming_leaves() {
    // A budget that holds everything, and one that stops warming part-way.
    for budget in [64 << 20, 6000] {
        let o = SmartOptions { cache_bytes: budget, ..SmartOptions::default() };
        let (alike, copied, entries) = compare::<Smart>(&o);
        assert!(alike && copied, "budget {budget}");
        assert!(entries > 0, "the test caches something");
        let mut o = art::options(8, 8);
        o.cache_bytes = budget;
        let (alike, copied, entries) = compare::<Art>(&o);
        assert!(alike && copied && entries > 0, "ART, budget {budget}");
    }
}

#[test]
fn the_comparison_sees_a_different_cache() {
    let o = SmartOptions::default();
    let sim = loaded::<Smart>(&o, 3000);
    let [a, b] = [0; 2].map(|_| Smart::node_state(&o, sim.caps()));
    Smart::warm(&o, &a, &sim).unwrap();
    let small = SmartOptions { cache_bytes: 6000, ..SmartOptions::default() };
    let c = Smart::node_state(&small, sim.caps());
    Smart::warm(&small, &c, &sim).unwrap();
    assert!(!a.cache.same_state(&b.cache), "an empty cache is not a warm one");
    assert!(!a.cache.same_state(&c.cache), "a part-warm cache is not a full one");
}

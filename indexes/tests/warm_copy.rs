//! Warming one compute node and copying its state to the others (`IndexKind::warm_like`, what
//! the runner does) leaves every node exactly as warming each one would: the same entries, with
//! the same insertion order and identities, and the same counters. Warming by keys
//! (`IndexKind::warm_keys`, `--warm load-share`) caches the paths of the keys given: with every
//! loaded key, the whole tree; with one loader's share, its keys' paths and less.

use dmkit_indexes::art::{self, Art};
use dmkit_indexes::chime::{Chime, ChimeOptions};
use dmkit_indexes::dolphin::{Dolphin, DolphinOptions};
use dmkit_indexes::sherman::{Sherman, ShermanOptions};
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

/// The keys `loaded` inserts, sorted bytewise, and one loader's share of them (every `shares`-th
/// in load order from `share`), sorted too.
fn keys_of(keys: u64, share: u64, shares: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let key = |k: u64| k.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes().to_vec();
    let mut all: Vec<Vec<u8>> = (0..keys).map(key).collect();
    let mut mine: Vec<Vec<u8>> = (share..keys).step_by(shares as usize).map(key).collect();
    all.sort();
    mine.sort();
    (all, mine)
}

#[test]
fn warming_by_every_loaded_key_is_warming_whole() {
    let (all, _) = keys_of(3000, 0, 1);
    for budget in [64 << 20, 6000] {
        let o = SmartOptions { cache_bytes: budget, ..SmartOptions::default() };
        let sim = loaded::<Smart>(&o, 3000);
        let [whole, by_keys] = [0; 2].map(|_| Smart::node_state(&o, sim.caps()));
        Smart::warm(&o, &whole, &sim).unwrap();
        assert!(Smart::warm_keys(&o, &by_keys, &sim, &all).unwrap(), "SMART warms by keys");
        assert!(whole.cache.same_state(&by_keys.cache), "budget {budget}");
    }
    let o = ShermanOptions { cache_bytes: 64 << 20, ..ShermanOptions::default() };
    let sim = loaded::<Sherman>(&o, 20_000);
    let (all, _) = keys_of(20_000, 0, 1);
    let [whole, by_keys] = [0; 2].map(|_| Sherman::node_state(&o, sim.caps()));
    Sherman::warm(&o, &whole, &sim).unwrap();
    assert!(Sherman::warm_keys(&o, &by_keys, &sim, &all).unwrap());
    assert!(whole.cache.stats().entries > 1, "the tree has internal levels to cache");
    assert_eq!(whole.cache.stats(), by_keys.cache.stats());
    let o = ChimeOptions { cache_bytes: 64 << 20, ..ChimeOptions::default() };
    let sim = loaded::<Chime>(&o, 20_000);
    let [whole, by_keys] = [0; 2].map(|_| Chime::node_state(&o, sim.caps()));
    Chime::warm(&o, &whole, &sim).unwrap();
    assert!(Chime::warm_keys(&o, &by_keys, &sim, &all).unwrap());
    assert!(whole.cache.stats().entries > 1, "the tree has internal levels to cache");
    assert_eq!(whole.cache.stats(), by_keys.cache.stats());
    let o = DolphinOptions { cache_bytes: 64 << 20, ..DolphinOptions::default() };
    let sim = loaded::<Dolphin>(&o, 20_000);
    let [whole, by_keys, share] = [0; 3].map(|_| Dolphin::node_state(&o, sim.caps()));
    Dolphin::warm(&o, &whole, &sim).unwrap();
    assert!(Dolphin::warm_keys(&o, &by_keys, &sim, &all).unwrap());
    assert!(whole.cache.stats().entries > 1, "the tree has internal levels to cache");
    assert_eq!(whole.cache.stats(), by_keys.cache.stats());
    // A tenth of the keys misses some of the nodes (a node of the last level holds a few dozen).
    Dolphin::warm_keys(&o, &share, &sim, &keys_of(20_000, 7, 10).1).unwrap();
    assert!(share.cache.stats().entries < whole.cache.stats().entries, "{:?}", share.cache.stats());
}

#[test]
fn a_load_share_caches_its_own_keys_paths_and_not_the_whole_tree() {
    // 3000 keys under a 256-way root leave about a dozen keys under each second-level node, so
    // a tenth of the keys misses some of them (0.9^12: about 28%).
    let o = SmartOptions { cache_bytes: 64 << 20, ..SmartOptions::default() };
    let sim = loaded::<Smart>(&o, 3000);
    let (all, mine) = keys_of(3000, 3, 10);
    let [whole, share] = [0; 2].map(|_| Smart::node_state(&o, sim.caps()));
    Smart::warm(&o, &whole, &sim).unwrap();
    assert!(Smart::warm_keys(&o, &share, &sim, &mine).unwrap());
    let depth = |n: &dmkit_indexes::smart::SmartNode, key: &[u8]| n.cache.lookup(key).0.map_or(0, |(e, _)| e.depth());
    // Every key of the share finds as deep a cached node as with the whole tree cached ...
    for key in &mine {
        assert_eq!(depth(&share, key), depth(&whole, key), "{key:?}");
    }
    // ... and some other keys do not.
    let shallower = all.iter().filter(|k| depth(&share, k) < depth(&whole, k)).count();
    assert!(shallower > 100, "{shallower} keys of 3000 find a shallower node");
    let (s, w) = (share.cache.stats(), whole.cache.stats());
    assert!(s.entries < w.entries && s.bytes < w.bytes, "{s:?} against {w:?}");
}

#[test]
fn replaying_a_load_caches_what_its_searches_read_with_the_caches_own_charge() {
    let key = |k: u64| k.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes().to_vec();
    let in_load_order: Vec<Vec<u8>> = (0..3000).map(key).collect();
    // A budget that holds the tree: the searches of every key cache every internal node.
    let o = SmartOptions { cache_bytes: 64 << 20, ..SmartOptions::default() };
    let sim = loaded::<Smart>(&o, 3000);
    let [whole, replayed] = [0; 2].map(|_| Smart::node_state(&o, sim.caps()));
    Smart::warm(&o, &whole, &sim).unwrap();
    assert!(Smart::replay_keys(&o, &replayed, &sim, &in_load_order).unwrap(), "SMART replays");
    let (w, r) = (whole.cache.stats(), replayed.cache.stats());
    assert_eq!((w.entries, w.bytes, r.evictions), (r.entries, r.bytes, 0));
    // A budget of about a tenth of the second level: the replay churns through it, and charged
    // as the artifact charges (kept slots) the cache ends holding fewer entries.
    let tight = |keep_slots| SmartOptions { cache_bytes: 6_000, keep_slots, ..SmartOptions::default() };
    let (freed, kept) = (tight(false), tight(true));
    let [f, k] = [&freed, &kept].map(|o| Smart::node_state(o, sim.caps()));
    Smart::replay_keys(&freed, &f, &sim, &in_load_order).unwrap();
    Smart::replay_keys(&kept, &k, &sim, &in_load_order).unwrap();
    let (fs, ks) = (f.cache.stats(), k.cache.stats());
    assert!(fs.evictions > 1000 && fs.bytes <= 6_000, "{fs:?}");
    assert!(ks.entries < fs.entries && ks.bytes <= 6_000, "{ks:?} against {fs:?}");
}

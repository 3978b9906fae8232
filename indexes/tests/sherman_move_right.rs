//! Move-right (sibling) reads during a Sherman bulk load: one client in the simulator's instant
//! mode inserting keys in a hashed order (as `sherman_shape.rs` and `dmkit run --load bulk`),
//! printing, per window of keys, the `move_right*` events per insert and the index cache's
//! state. A measurement for the module doc's "Stale cached upper levels", not a pass/fail check: ignored.
//!
//! `cargo test --release -p dmkit-indexes --test sherman_move_right -- --ignored --nocapture`;
//! `DMKIT_MR_KEYS` (default 1000000), `DMKIT_MR_STEP` (100000), `DMKIT_MR_CONFIG` (sherman-fixed).

use dmkit_indexes::hash::hash64;
use dmkit_indexes::sherman::{
    CACHE_HIT, CACHE_STALE, CACHE_STALE_INTERNAL, INTERNAL_SPLIT, LEAF_SPLIT, MOVE_RIGHT, MOVE_RIGHT_FROM_CACHE,
    MOVE_RIGHT_INTERNAL, MOVE_RIGHT_LEAF, MOVE_RIGHT_PARENT, Sherman, ShermanOptions,
};
use dmkit_indexes::{Counters, Index, IndexKind};
use dmkit_sim::{Sim, SimConfig, Topology};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn key(i: u64) -> Vec<u8> {
    (hash64(&i.to_le_bytes(), 17) & !0xFFFF_FFFF | i).to_be_bytes().to_vec()
}

#[test]
#[ignore]
fn move_rights_per_insert_during_bulk_load() {
    let (n, step) = (env("DMKIT_MR_KEYS", 1_000_000), env("DMKIT_MR_STEP", 100_000));
    let config = std::env::var("DMKIT_MR_CONFIG").unwrap_or_else(|_| "sherman-fixed".into());
    let o = ShermanOptions::named(&config, 8, 8).unwrap();
    let sc = SimConfig { topology: Topology { compute_nodes: 1, ..Topology::default() }, ..SimConfig::default() };
    let mut sim = Sim::new(sc).unwrap();
    let node = Arc::new(Sherman::node_state(&o, sim.caps()));
    let creator = sim.add_client(0).unwrap();
    let (c, opts) = (creator.clone(), o.clone());
    sim.spawn(&creator, async move { Sherman::create(&opts, &c).await.unwrap() });
    sim.run().unwrap();
    sim.set_instant(true);
    let client = sim.add_client(0).unwrap();
    let mut h = Sherman::open(&o, node.clone(), client.clone());
    let snaps: Rc<RefCell<Vec<(u64, Counters)>>> = Rc::default();
    let out = snaps.clone();
    sim.spawn(&client, async move {
        for i in 0..n {
            h.insert(&key(i), &i.to_le_bytes()).await.unwrap();
            if (i + 1) % step == 0 || i + 1 == n {
                out.borrow_mut().push((i + 1, h.counters().clone()));
            }
        }
    });
    sim.run().unwrap();
    let get = |c: &Counters, k: &str| c.events.get(k).copied().unwrap_or(0);
    let names = [
        MOVE_RIGHT,
        MOVE_RIGHT_INTERNAL,
        MOVE_RIGHT_FROM_CACHE,
        MOVE_RIGHT_LEAF,
        MOVE_RIGHT_PARENT,
        CACHE_HIT,
        CACHE_STALE,
        CACHE_STALE_INTERNAL,
        // Not an event Sherman counts (SMART's name): printed as 0.
        "stale_route",
        LEAF_SPLIT,
        INTERNAL_SPLIT,
    ];
    eprintln!("{config}: per insert, cumulative and in the last window of {step} keys");
    let mut prev = (0u64, Counters::default());
    for (at, c) in snaps.borrow().iter() {
        let window = (at - prev.0) as f64;
        let cols: Vec<String> = names
            .iter()
            .map(|k| {
                let (all, last) = (get(c, k), get(c, k) - get(&prev.1, k));
                format!("{k} {:.3}/{:.3}", all as f64 / *at as f64, last as f64 / window)
            })
            .collect();
        eprintln!("{at:>8} keys: {}", cols.join("  "));
        prev = (*at, c.clone());
    }
    let s = node.cache.stats();
    eprintln!(
        "cache: {} entries, {} bytes, {} hits, {} misses, {} invalidations, {} evictions",
        s.entries, s.bytes, s.hits, s.misses, s.invalidations, s.evictions
    );
}

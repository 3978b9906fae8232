//! ART's hand-over of same-key out-of-place updates (`SmartOptions::update_handover`, SMART's
//! artifact's `TREE_TEST_HOCL_HANDOVER`): updates of one key on one compute node are serialised
//! and combined, so among them no slot CAS is ever lost. Without it, clients of one compute node
//! race each other's CAS on a hot key, and under a skewed write-heavy load (YCSB A) the losers'
//! immediate retries pile up on the hottest keys: ART's throughput fell from 7 to 1.3 Mops/s
//! within 5 ms and stayed there (1 M keys, 16 CNs x 8 clients, README "The main job").

use dmkit_indexes::art::{self, Art};
use dmkit_indexes::common::change::RDWC_COMBINED;
use dmkit_indexes::smart::SmartOptions;
use dmkit_indexes::smart::{RCU_LOST, RCU_UPDATE};
use dmkit_indexes::{Index, IndexKind};
use dmkit_sim::{Sim, SimConfig, Topology};
use std::sync::{Arc, Mutex};

const CLIENTS: u64 = 8;
const UPDATES: u64 = 25;

/// Runs `CLIENTS` clients of one compute node, each updating one preloaded key `UPDATES`
/// times; returns the summed counters and the value read at the end.
fn hammer(o: &SmartOptions) -> (u64, u64, u64, Vec<u8>) {
    let config = SimConfig { topology: Topology { compute_nodes: 1, ..Topology::default() }, ..SimConfig::default() };
    let mut sim = Sim::new(config).unwrap();
    let node = Arc::new(Art::node_state(o, sim.caps()));
    let creator = sim.add_client(0).unwrap();
    let (c, opts, n) = (creator.clone(), o.clone(), node.clone());
    sim.spawn(&creator, async move {
        Art::create(&opts, &c).await.unwrap();
        let mut h = Art::open(&opts, n, c.clone());
        for k in 0u64..64 {
            h.insert(&k.to_be_bytes(), &[0; 8]).await.unwrap();
        }
    });
    sim.run().unwrap();
    let counts = Arc::new(Mutex::new((0u64, 0u64, 0u64)));
    for me in 0..CLIENTS {
        let client = sim.add_client(0).unwrap();
        let mut h = Art::open(o, node.clone(), client.clone());
        let counts = counts.clone();
        sim.spawn(&client, async move {
            for i in 0..UPDATES {
                let value = (me * 1000 + i).to_le_bytes();
                assert!(h.update(&7u64.to_be_bytes(), &value).await.unwrap(), "the key is there");
            }
            let e = &h.counters().events;
            let mut c = counts.lock().unwrap();
            c.0 += e.get(RCU_LOST).copied().unwrap_or(0);
            c.1 += e.get(RCU_UPDATE).copied().unwrap_or(0);
            c.2 += e.get(RDWC_COMBINED).copied().unwrap_or(0);
        });
    }
    sim.run().unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    let reader = sim.add_client(0).unwrap();
    let mut h = Art::open(o, node.clone(), reader.clone());
    let o2 = out.clone();
    sim.spawn(&reader, async move {
        *o2.lock().unwrap() = h.search(&7u64.to_be_bytes()).await.unwrap().expect("present");
    });
    sim.run().unwrap();
    let report = Art::check_invariants(o, &sim).unwrap();
    assert_eq!(report.items, 64);
    let (lost, updates, combined) = *counts.lock().unwrap();
    let value = out.lock().unwrap().clone();
    (lost, updates, combined, value)
}

#[test]
fn same_key_updates_of_one_compute_node_never_lose_a_cas_with_the_handover() {
    let o = art::options(8, 8);
    assert!(o.update_handover, "ART's configuration has the artifact's hand-over");
    let (lost, updates, combined, value) = hammer(&o);
    assert_eq!(lost, 0, "serialised updates cannot lose their CAS to each other");
    assert!(combined > 0, "clients that queued behind a window are combined into the next one");
    assert_eq!(updates + combined, CLIENTS * UPDATES, "every update was applied once, alone or combined");
    // The last value is some client's last update.
    let last = u64::from_le_bytes(value.try_into().unwrap());
    assert_eq!(last % 1000, UPDATES - 1, "the final value {last} is a client's last update");

    // The same clients without the hand-over race each other's CAS: the test can fail.
    let mut without = art::options(8, 8);
    without.update_handover = false;
    without.validate().unwrap();
    let (lost, updates, combined, _) = hammer(&without);
    assert!(lost > 0, "without the hand-over same-node updates lose CASes");
    assert_eq!((updates, combined), (CLIENTS * UPDATES, 0));
}

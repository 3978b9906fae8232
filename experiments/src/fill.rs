//! `dmkit fill`: a hash table's load factor at its first insertion failure (RACE Figs. 5 and
//! 12: insert unique keys until one fails; load factor = items stored over all slots, main and
//! overflow). Tables that could grow are pinned to their first size (RACE: no splits).

use dmkit_indexes::cluster::{Cluster, ClusterOptions};
use dmkit_indexes::race::{Race, RaceOptions};
use dmkit_indexes::{Index, IndexError, IndexKind};
use dmkit_sim::{Sim, SimConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

/// What to fill.
#[derive(Clone, Debug)]
pub struct FillRequest {
    pub index: String,
    /// Slots per bucket (RACE's K; DrTM's 8 unless given).
    pub slots: Option<u32>,
    /// RACE: bucket groups of the one subtable. DrTM: main buckets.
    pub size: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub seed: u64,
}

/// Where the first insertion failed.
#[derive(Clone, Debug, PartialEq)]
pub struct FillResult {
    pub index: String,
    pub stored: u64,
    pub capacity: u64,
    pub load_factor: f64,
}

pub fn fill(req: &FillRequest) -> Result<FillResult, String> {
    if req.key_bytes < 8 || req.value_bytes == 0 {
        return Err("--key-bytes must be at least 8 and --value-bytes at least 1".into());
    }
    match req.index.as_str() {
        "race" => {
            let o = RaceOptions {
                key_bytes: req.key_bytes as u32,
                value_bytes: req.value_bytes as u32,
                slots: req.slots.unwrap_or(7),
                groups: u32::try_from(req.size).map_err(|_| "--size is too large for RACE's groups")?,
                initial_depth: 0,
                max_depth: 0,
                ..RaceOptions::default()
            };
            Race::validate(&o)?;
            fill_index::<Race>(&o, req)
        }
        "cluster" => {
            let o = ClusterOptions {
                main_buckets: req.size,
                slots_per_bucket: req.slots.unwrap_or(8),
                key_bytes: req.key_bytes as u32,
                value_bytes: req.value_bytes as u32,
                ..ClusterOptions::default()
            };
            Cluster::validate(&o)?;
            fill_index::<Cluster>(&o, req)
        }
        other => Err(format!("dmkit fill knows the hash tables race and cluster, not '{other}'")),
    }
}

fn fill_index<K: IndexKind>(o: &K::Options, req: &FillRequest) -> Result<FillResult, String> {
    let mut sim = Sim::new(SimConfig::default()).map_err(|e| e.to_string())?;
    let client = sim.add_client(0).map_err(|e| e.to_string())?;
    let mut handle = K::open(o, Arc::new(K::node_state(o, sim.caps())), client.clone());
    let stored = Rc::new(Cell::new(0u64));
    let failure: Rc<std::cell::RefCell<Option<IndexError>>> = Rc::default();
    let (c, n, f, opts) = (client.clone(), stored.clone(), failure.clone(), o.clone());
    let (key_bytes, value_bytes, seed) = (req.key_bytes, req.value_bytes, req.seed);
    sim.spawn(&client, async move {
        if let Err(e) = K::create(&opts, &c).await {
            *f.borrow_mut() = Some(e);
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        loop {
            let mut key = rng.random::<u64>().to_be_bytes().to_vec();
            key.resize(key_bytes, 0);
            match handle.insert(&key, &vec![0x5A; value_bytes]).await {
                Ok(false) => n.set(n.get() + 1),
                Ok(true) => {}
                Err(e) => {
                    *f.borrow_mut() = Some(e);
                    return;
                }
            }
        }
    });
    sim.run().map_err(|e| e.to_string())?;
    match failure.borrow().clone() {
        Some(IndexError::Full) => {}
        Some(other) => return Err(format!("the fill stopped on {other:?}, not on a full table")),
        None => return Err("the fill ended without a failure".into()),
    }
    let report = K::check_invariants(o, &sim)?;
    let capacity = report.capacity_items.ok_or("the index does not report its capacity")?;
    if report.items != stored.get() {
        return Err(format!("{} inserts succeeded but the walk counts {} items", stored.get(), report.items));
    }
    Ok(FillResult {
        index: K::NAME.to_string(),
        stored: stored.get(),
        capacity,
        load_factor: stored.get() as f64 / capacity as f64,
    })
}

//! `dmkit fill`: a hash table's load factor at its first insertion failure (RACE Figs. 5 and
//! 12: insert unique keys until one fails; load factor = items stored over all slots, main and
//! overflow). Tables that could grow are pinned to their first size (RACE: no splits).

use dmkit_indexes::registry::{self, TableShape, Visitor};
use dmkit_indexes::{Index, IndexError, IndexKind};
use dmkit_verify::deploy;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
    let table = TableShape { slots: req.slots, size: req.size, key_bytes: req.key_bytes, value_bytes: req.value_bytes };
    struct Fill<'a>(&'a FillRequest, TableShape);
    impl Visitor for Fill<'_> {
        type Out = Result<FillResult, String>;
        fn visit<K: IndexKind>(self) -> Self::Out {
            match K::fixed_table(&self.1) {
                Some(options) => fill_index::<K>(&options?, self.0),
                None => {
                    Err(format!("dmkit fill fills fixed-size hash tables ({}), not {}", fillable().join(", "), K::NAME))
                }
            }
        }
    }
    registry::visit(&req.index, "default", Fill(req, table))?
}

/// The registered indexes `dmkit fill` can fill.
pub fn fillable() -> Vec<&'static str> {
    struct Fixed;
    impl Visitor for Fixed {
        type Out = bool;
        fn visit<K: IndexKind>(self) -> bool {
            K::fixed_table(&TableShape { slots: None, size: 1, key_bytes: 8, value_bytes: 8 }).is_some()
        }
    }
    registry::index_names().into_iter().filter(|name| registry::visit(name, "default", Fixed) == Ok(true)).collect()
}

fn fill_index<K: IndexKind>(o: &K::Options, req: &FillRequest) -> Result<FillResult, String> {
    let mut sim = deploy::default_sim::<K>(o)?;
    let deployed = deploy::deploy::<K>(&mut sim, o, 1)?;
    let (key_bytes, value_bytes, seed) = (req.key_bytes, req.value_bytes, req.seed);
    // Inserts until one fails: how many succeeded, and the failure.
    let filled = deployed.create_then(&mut sim, o, move |mut handle| async move {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut stored = 0u64;
        loop {
            let mut key = rng.random::<u64>().to_be_bytes().to_vec();
            key.resize(key_bytes, 0);
            match handle.insert(&key, &vec![0x5A; value_bytes]).await {
                Ok(false) => stored += 1,
                Ok(true) => {}
                Err(e) => return (stored, e),
            }
        }
    });
    sim.run().map_err(|e| e.to_string())?;
    let stored = match filled.try_take() {
        Some(Ok((stored, IndexError::Full))) => stored,
        Some(Ok((_, other)) | Err(other)) => return Err(format!("the fill stopped on {other:?}, not on a full table")),
        None => return Err("the fill's client is blocked: the simulation ended before a failure".into()),
    };
    crate::runner::stray_verbs(&sim.stats(), "the fill")?;
    let report = K::check_invariants(o, &sim)?;
    let capacity = report.capacity_items.ok_or("the index does not report its capacity")?;
    if report.items != stored {
        return Err(format!("{} inserts succeeded but the walk counts {} items", stored, report.items));
    }
    Ok(FillResult { index: K::NAME.to_string(), stored, capacity, load_factor: stored as f64 / capacity as f64 })
}

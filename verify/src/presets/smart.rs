//! Checking presets of SMART and of ART, its baseline configuration (`dmkit_indexes::smart`, `dmkit_indexes::art`).

use crate::harness::{Checked, Mix, Preset, read_failures};
use dmkit_indexes::art::{Art, ArtOptions};
use dmkit_indexes::smart::{Smart, SmartOptions};
use dmkit_sim::Faults;

/// SMART's checking keys: two groups of six sharing seven bytes and differing in the last
/// (so a node fills past NODE_4 and switches type), split at byte 5, and two keys diverging at
/// byte 2 (inside the compressed header of the first chain: a header split). The first two
/// inserts make a leaf split into a two-node chain (seven common bytes).
pub fn smart_key(k: u64) -> Vec<u8> {
    if k < 12 {
        vec![0, 0, 0, 0, 0, (k / 6) as u8, 0, (k % 6) as u8]
    } else {
        vec![0, 0, 1, 0, 0, 0, 0, (k - 12) as u8]
    }
}

/// Values of 64 bytes: a leaf spans two cache lines, so an update can tear a READ.
const SMART_VALUE: u32 = 64;

fn smart_options(config: &str, memory_nodes: u16) -> SmartOptions {
    let o = SmartOptions::named(config, 8, SMART_VALUE).expect("a known configuration");
    SmartOptions { memory_nodes, max_retries: 2_000, cache_bytes: 1 << 20, ..o }
}

fn smart_presets(config: &str) -> Vec<(Preset, SmartOptions)> {
    let base = Preset {
        name: "default",
        compute_nodes: 2,
        memory_nodes: 2,
        clients: 3,
        ops_per_client: 6,
        keys: 14,
        key_of: smart_key,
        value_bytes: SMART_VALUE as usize,
        preload: 4,
        mix: Mix { search: 35, insert: 35, update: 10, delete: 10, scan: 10 },
        scan_limit: 6,
        required_counters: &["leaf_split", "header_split", "type_switch", "cache_hit", "cache_invalidated"],
        step_limit: 400_000,
    };
    vec![
        (base.clone(), smart_options(config, 2)),
        // One compute node, hot keys: delegation, combining, lock contention.
        (
            Preset {
                name: "local",
                compute_nodes: 1,
                memory_nodes: 1,
                clients: 4,
                keys: 4,
                preload: 1,
                mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                required_counters: &["rdwc_combined", "rdwc_delegated", "leaf_split", "lock_failures"],
                ..base.clone()
            },
            smart_options(config, 1),
        ),
        // "local" with three READs failing (a transient transport error; the explorer places
        // each): a combining or delegating leader that fails gives up, and its followers must
        // apply their changes or search themselves instead of answering with nothing.
        (
            Preset {
                name: "read-failure",
                compute_nodes: 1,
                memory_nodes: 1,
                clients: 4,
                keys: 4,
                preload: 1,
                mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                required_counters: &["rdwc_write_fallback", "rdwc_read_fallback"],
                ..base.clone()
            },
            smart_options(config, 1),
        ),
        // Small enough for DFS: two clients, a split and an update race.
        (
            Preset {
                name: "pair",
                compute_nodes: 2,
                memory_nodes: 1,
                clients: 2,
                ops_per_client: 3,
                keys: 4,
                preload: 1,
                mix: Mix { search: 40, insert: 40, update: 20, delete: 0, scan: 0 },
                required_counters: &["leaf_split"],
                step_limit: 200_000,
                ..base
            },
            smart_options(config, 1),
        ),
    ]
}

/// Faults of SMART's and ART's presets: three READ failures in "read-failure".
fn smart_faults(preset: &str) -> Faults {
    match preset {
        "read-failure" => read_failures(0, 3),
        _ => Faults::default(),
    }
}

impl Checked for Smart {
    fn presets() -> Vec<(Preset, SmartOptions)> {
        smart_presets("smart")
    }

    fn faults(preset: &str, _: &SmartOptions) -> Faults {
        smart_faults(preset)
    }

    fn configure(options: &mut SmartOptions, config: &str) -> Result<(), String> {
        let named = SmartOptions::named(config, options.key_bytes, options.value_bytes)?;
        *options = SmartOptions {
            plants: options.plants.clone(),
            memory_nodes: options.memory_nodes,
            max_retries: options.max_retries,
            cache_bytes: options.cache_bytes,
            ..named
        };
        Ok(())
    }
}

impl Checked for Art {
    fn presets() -> Vec<(Preset, ArtOptions)> {
        smart_presets("art")
            .into_iter()
            .map(|(mut p, o)| {
                match p.name {
                    "local" => p.required_counters = &["lock_handed_over", "rcu_update", "leaf_split"],
                    // No combining in ART: the failed READs meet its locks and splits instead.
                    "read-failure" => p.required_counters = &["lock_handed_over", "leaf_split"],
                    _ => {}
                }
                (p, ArtOptions(o))
            })
            .collect()
    }

    fn faults(preset: &str, _: &ArtOptions) -> Faults {
        smart_faults(preset)
    }
}

//! Checking presets of Sherman (`dmkit_indexes::sherman`).

use crate::harness::{Checked, Mix, Preset, be_key};
use dmkit_indexes::sherman::{Sherman, ShermanOptions};

/// Sherman's checking nodes: 3 slots per leaf and 3 records per internal node, so a handful of
/// inserts split leaves, internal nodes and the root.
const SHERMAN_SPANS: (u32, u32) = (3, 3);
/// Values of 24 bytes: long enough that a torn slot shows as a value nobody wrote.
const SHERMAN_VALUE: u32 = 24;

fn sherman_options(config: &str, memory_nodes: u16) -> ShermanOptions {
    let o = ShermanOptions::named(config, 8, SHERMAN_VALUE).expect("a known configuration");
    ShermanOptions { memory_nodes, max_retries: 2_000, ..o.with_spans(SHERMAN_SPANS.0, SHERMAN_SPANS.1) }
}

impl Checked for Sherman {
    fn presets() -> Vec<(Preset, ShermanOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 2,
            clients: 3,
            ops_per_client: 6,
            keys: 12,
            value_bytes: SHERMAN_VALUE as usize,
            preload: 5,
            mix: Mix { search: 30, insert: 40, update: 10, delete: 10, scan: 10 },
            scan_limit: 6,
            required_counters: &["leaf_split", "internal_split", "root_split", "move_right", "scan_next_leaf"],
            step_limit: 400_000,
            key_of: be_key,
        };
        vec![
            (base.clone(), sherman_options("sherman-fixed", 2)),
            // One compute node, hot keys: local lock hand-over and write combining.
            (
                Preset {
                    name: "local",
                    compute_nodes: 1,
                    memory_nodes: 1,
                    clients: 4,
                    keys: 4,
                    preload: 2,
                    mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                    required_counters: &["lock_handed_over", "rdwc_combined", "rdwc_delegated", "leaf_split"],
                    ..base.clone()
                },
                ShermanOptions { rdwc: true, max_handover: 8, ..sherman_options("sherman-fixed", 1) },
            ),
            // Small enough for DFS: two clients, a few inserts around one split.
            (
                Preset {
                    name: "pair",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 2,
                    ops_per_client: 3,
                    keys: 6,
                    preload: 2,
                    mix: Mix { search: 40, insert: 60, update: 0, delete: 0, scan: 0 },
                    required_counters: &["leaf_split"],
                    step_limit: 200_000,
                    ..base
                },
                sherman_options("sherman-fixed", 1),
            ),
        ]
    }

    fn configure(options: &mut ShermanOptions, config: &str) -> Result<(), String> {
        ShermanOptions::named(config, options.key_bytes, options.value_bytes)?;
        *options = ShermanOptions {
            rdwc: options.rdwc || ShermanOptions::named(config, 8, 8)?.rdwc,
            plants: options.plants.clone(),
            ..sherman_options(config, options.memory_nodes)
        };
        Ok(())
    }
}

//! Checking presets of Dolphin (`dmkit_indexes::dolphin`).

use crate::harness::{Checked, Mix, Preset};
use dmkit_indexes::dolphin::{Dolphin, DolphinOptions};

/// Dolphin's checking keys: six in one 7-byte prefix (one special node, leaves of 4 slots that
/// split), one in a sibling prefix (a new child of the first node) and two that leave the first
/// node's compressed prefix early (prefix splits above it). The first six descend (11, 9, ...,
/// 1), so the preloaded keys are the largest and a split moves one of them to the new leaf.
pub fn dolphin_key(k: u64) -> Vec<u8> {
    let word: u64 = match k {
        0..=5 => 11 - 2 * k,
        6 => 0x1_05,
        7 => 0x0000_0001_0000_0003,
        _ => 0x0100_0000_0000_0000 + k,
    };
    word.to_be_bytes().to_vec()
}

/// Dolphin's checking options: 4-slot leaves (a split every few inserts) on two memory nodes.
pub fn dolphin_options(memory_nodes: u16) -> DolphinOptions {
    DolphinOptions {
        leaf_slots: 4,
        memory_nodes,
        chunk_bytes: 1 << 20,
        cache_bytes: 1 << 20,
        max_retries: 2_000,
        ..DolphinOptions::default()
    }
}

impl Checked for Dolphin {
    fn presets() -> Vec<(Preset, DolphinOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 2,
            clients: 3,
            ops_per_client: 6,
            keys: 9,
            key_of: dolphin_key,
            value_bytes: 8,
            preload: 3,
            mix: Mix { search: 30, insert: 35, update: 15, delete: 10, scan: 10 },
            scan_limit: 4,
            required_counters: &[
                "leaf_split",
                "backtrack",
                "prefix_split",
                "new_prefix",
                "cas_failures",
                "scan_from_cache",
                "scan_reread",
            ],
            step_limit: 1_000_000,
        };
        vec![
            (base.clone(), dolphin_options(2)),
            // One prefix, hot: updates and deletes meet splits and compactions.
            (
                Preset {
                    name: "leaf",
                    keys: 6,
                    preload: 3,
                    mix: Mix { search: 30, insert: 30, update: 20, delete: 15, scan: 5 },
                    required_counters: &["leaf_split", "compaction", "smo_wait"],
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            // One compute node, three hot keys: read delegation and write combining.
            (
                Preset {
                    name: "local",
                    compute_nodes: 1,
                    memory_nodes: 1,
                    clients: 4,
                    keys: 3,
                    preload: 2,
                    mix: Mix { search: 45, insert: 20, update: 25, delete: 10, scan: 0 },
                    required_counters: &["rdwc_delegated", "rdwc_combined"],
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 4,
                    preload: 3,
                    required_counters: &[],
                    step_limit: 200_000,
                    ..base
                },
                dolphin_options(1),
            ),
        ]
    }

    fn configure(options: &mut DolphinOptions, config: &str) -> Result<(), String> {
        options.configure(config)
    }
}

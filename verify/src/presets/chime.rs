//! Checking presets of CHIME (`dmkit_indexes::chime`).

use crate::harness::{Checked, Mix, Preset};
use dmkit_indexes::chime::{Chime, ChimeOptions};

/// CHIME's checking keys: `k + 1` big-endian (the all-zero key marks empty entries).
pub fn chime_key(k: u64) -> Vec<u8> {
    (k + 1).to_be_bytes().to_vec()
}

/// CHIME-Indirect's checking keys (with `prefix=2`): three keys of 2, 3 and 5 bytes per 2-byte
/// prefix, `[p]`, `[p, 0]`, `[p, 9, 9, 9]` for `p = k / 3 + 1`, so every lookup resolves a
/// prefix collision through the blocks, and the keys sort as their numbers do.
pub fn chime_var_key(k: u64) -> Vec<u8> {
    let mut key = ((k / 3 + 1) as u16).to_be_bytes().to_vec();
    key.extend_from_slice(match k % 3 {
        0 => &[][..],
        1 => &[0][..],
        _ => &[9, 9, 9][..],
    });
    key
}

/// Values of 32 bytes: a 43-byte entry often spans two lines, so an update can tear a READ.
const CHIME_VALUE: u32 = 32;

/// Leaves of 8 entries with neighbourhoods of 4 and internal nodes of 3: a handful of inserts
/// displace keys, split leaves, internal nodes and the root.
fn chime_options(config: &str, memory_nodes: u16) -> ChimeOptions {
    let o = ChimeOptions::named(config, 8, CHIME_VALUE).expect("a known configuration");
    ChimeOptions {
        memory_nodes,
        max_retries: 2_000,
        cache_bytes: 1 << 20,
        hotspot_bytes: 1 << 16,
        ..o.with_spans(8, 4, 2)
    }
}

fn chime_presets(config: &str) -> Vec<(Preset, ChimeOptions)> {
    let base = Preset {
        name: "default",
        compute_nodes: 2,
        memory_nodes: 2,
        clients: 3,
        ops_per_client: 6,
        keys: 24,
        key_of: chime_key,
        value_bytes: CHIME_VALUE as usize,
        preload: 8,
        mix: Mix { search: 35, insert: 35, update: 10, delete: 10, scan: 10 },
        scan_limit: 8,
        required_counters: &["leaf_split", "internal_split", "hop", "cache_hit", "half_split_right", "scan_next_leaf"],
        step_limit: 400_000,
    };
    vec![
        (base.clone(), chime_options(config, 2)),
        // One compute node, hot keys: delegation, combining, speculation, lock contention.
        (
            Preset {
                name: "local",
                compute_nodes: 1,
                memory_nodes: 1,
                clients: 4,
                keys: 6,
                preload: 3,
                mix: Mix { search: 40, insert: 20, update: 30, delete: 10, scan: 0 },
                required_counters: &["rdwc_combined", "rdwc_delegated", "speculation_hit", "lock_failures"],
                ..base.clone()
            },
            chime_options(config, 1),
        ),
        // Neighbourhoods of 12 in leaves of 16: 2-byte bitmaps that straddle lines (digest G1).
        (
            Preset { name: "wide", keys: 40, preload: 14, required_counters: &["leaf_split", "hop"], ..base.clone() },
            ChimeOptions { ..chime_options(config, 2).with_spans(16, 12, 2) },
        ),
        // CHIME-Indirect: variable-length keys in blocks, entries holding 2-byte prefixes that
        // three keys share (whatever `--config` says: the keys need indirect mode).
        (
            Preset {
                name: "indirect",
                keys: 36,
                preload: 12,
                key_of: chime_var_key,
                required_counters: &["leaf_split", "hop", "prefix_collision", "half_split_right"],
                ..base.clone()
            },
            ChimeOptions { prefix: 2, ..chime_options("chime-indirect", 2) },
        ),
        // Small enough for DFS: two clients around one split.
        (
            Preset {
                name: "pair",
                compute_nodes: 2,
                memory_nodes: 1,
                clients: 2,
                ops_per_client: 3,
                keys: 10,
                preload: 6,
                mix: Mix { search: 40, insert: 60, update: 0, delete: 0, scan: 0 },
                required_counters: &["leaf_split"],
                step_limit: 200_000,
                ..base.clone()
            },
            chime_options(config, 1),
        ),
        // The tree grows under concurrent inserts: a leaf splits while the root leaf's split
        // has not installed the new root (`root_help`), and two new roots race (`root_cas_lost`).
        (
            Preset {
                name: "grow",
                compute_nodes: 2,
                memory_nodes: 1,
                clients: 3,
                ops_per_client: 6,
                keys: 20,
                preload: 6,
                mix: Mix { search: 20, insert: 80, update: 0, delete: 0, scan: 0 },
                required_counters: &["leaf_split", "root_split"],
                ..base
            },
            chime_options(config, 1),
        ),
    ]
}

impl Checked for Chime {
    fn presets() -> Vec<(Preset, ChimeOptions)> {
        chime_presets("chime")
    }

    fn configure(options: &mut ChimeOptions, config: &str) -> Result<(), String> {
        let named = ChimeOptions::named(config, options.key_bytes, options.value_bytes)?;
        *options = ChimeOptions {
            plants: options.plants.clone(),
            memory_nodes: options.memory_nodes,
            max_retries: options.max_retries,
            cache_bytes: options.cache_bytes,
            hotspot_bytes: options.hotspot_bytes,
            ..named.with_spans(options.span, options.hood, options.internal_span)
        };
        Ok(())
    }
}

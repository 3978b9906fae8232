//! Checking presets of CHIME (`dmkit_indexes::chime`).

use crate::Counters;
use crate::IndexKind;
use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, point, preset_named, scan_shapes_preset, wide_key};
use crate::chime::{
    CACHE_HIT, Chime, ChimeOptions, HALF_SPLIT_RIGHT, HOP, INTERNAL_SPLIT, LEAF_ROUTE_STALE, LEAF_SPLIT, MOVE_RIGHT,
    MOVE_RIGHT_PARENT, PREFIX_COLLISION, ROOT_SPLIT, SCAN_NEXT_LEAF, SPECULATION_HIT, SPECULATION_MISS, TORN_INTERNAL,
};
use crate::common::change::{RDWC_COMBINED, RDWC_DELEGATED};

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
        scan_bounds: ScanBounds::From,
        required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, HOP, CACHE_HIT, HALF_SPLIT_RIGHT, SCAN_NEXT_LEAF],
        step_limit: 400_000,
        low_client_ids: false,
    };
    // Leaves of 4, many inserts from 4 clients on 2 compute nodes (`long-splits`, below).
    let long_splits = Preset {
        name: "long-splits",
        memory_nodes: 1,
        clients: 4,
        ops_per_client: 12,
        keys: 60,
        mix: Mix { search: 15, insert: 85, update: 0, delete: 0, scan: 0 },
        required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, MOVE_RIGHT_PARENT],
        step_limit: 2_000_000,
        ..base.clone()
    };
    vec![
        (base.clone(), chime_options(config, 2)),
        // Scans of every shape (`ScanBounds::Shapes`) while inserts split leaves.
        // Keys of one length: a bound of another is refused (`KeyTooShort`/`KeyTooLong`).
        (scan_shapes_preset(&base, false, &[LEAF_SPLIT, SCAN_NEXT_LEAF]), chime_options(config, 2)),
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
                required_counters: &[RDWC_COMBINED, RDWC_DELEGATED, SPECULATION_HIT, Counters::LOCK_FAILURES],
                ..base.clone()
            },
            chime_options(config, 1),
        ),
        // Neighbourhoods of 12 in leaves of 16: 2-byte bitmaps that straddle lines (digest G1).
        (
            Preset { name: "wide", keys: 40, preload: 14, required_counters: &[LEAF_SPLIT, HOP], ..base.clone() },
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
                required_counters: &[LEAF_SPLIT, HOP, PREFIX_COLLISION, HALF_SPLIT_RIGHT],
                ..base.clone()
            },
            ChimeOptions { prefix: 2, ..chime_options("chime-indirect", 2) },
        ),
        // CHIME-Indirect with blocks of three lines (150-byte values): every other preset's
        // blocks fit one line, so a block allocated one line's worth short was never met (a
        // mutation survivor: the allocation `lines * 64` made `lines + 64`).
        (
            Preset {
                name: "indirect-long",
                keys: 36,
                preload: 12,
                key_of: chime_var_key,
                value_bytes: 150,
                required_counters: &[LEAF_SPLIT, PREFIX_COLLISION],
                ..base.clone()
            },
            ChimeOptions { prefix: 2, value_bytes: 150, ..chime_options("chime-indirect", 2) },
        ),
        // Found by the sweep (`sweep-prefix-1`, failed before the fix): a one-byte prefix
        // gives every key the prefix 0, the key field of an empty entry, and a search took an
        // empty entry its hop bit was read for (its insert not landed yet) as a match, and
        // followed its null block pointer (`IndexError::Corrupt`). At most H = 4 such keys fit.
        (
            Preset {
                name: "zero-prefix",
                keys: 12,
                preload: 3,
                key_of: chime_var_key,
                required_counters: &[PREFIX_COLLISION, Counters::LOCK_FAILURES],
                ..base.clone()
            },
            ChimeOptions { prefix: 1, ..chime_options("chime-indirect", 2) },
        ),
        // The default on one memory node with three READs failing (a transient transport error;
        // the explorer places each): a writer whose READ under a leaf or internal-node lock
        // fails must unlock before it gives up.
        (
            Preset {
                name: "read-failure",
                memory_nodes: 1,
                ops_per_client: 8,
                mix: Mix { search: 20, insert: 55, update: 15, delete: 10, scan: 0 },
                required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT],
                ..base.clone()
            },
            chime_options(config, 1),
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
                required_counters: &[LEAF_SPLIT],
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
                required_counters: &[LEAF_SPLIT, ROOT_SPLIT],
                ..base.clone()
            },
            chime_options(config, 1),
        ),
        // Splits meeting splits: leaves of 4, many inserts from 4 clients on 2 compute nodes,
        // so a pivot insert often finds the parent on its path split by another client
        // (`move_right_parent`: thousands of times in 20 s, where other presets reach it
        // rarely) and unlocks it to move right.
        (long_splits.clone(), chime_options(config, 1).with_spans(4, 2, 2)),
        // `long-splits` with keys whose high bytes differ (`wide_key`) and more searches:
        // a READ of an internal node torn between two writes of it mixes the bytes of two
        // entries' keys, so only the internal nodes' versions keep a search from following a
        // made-up separator to the wrong leaf. Added for the mutation run: with `chime_key`
        // the internal nodes' version check could be removed whole without any preset noticing.
        (
            Preset {
                name: "wide-keys",
                key_of: wide_key,
                mix: Mix { search: 35, insert: 65, update: 0, delete: 0, scan: 0 },
                required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, TORN_INTERNAL],
                ..long_splits
            },
            chime_options(config, 1).with_spans(4, 2, 2),
        ),
        // Found by the sweep (`sweep-long-local`, failed before the fix): a split dropped the
        // deleted maximum of a leaf with a sibling from the right half, whose argmax then fell
        // below where its range ends; an insert moving right from a parent older than two
        // splits went one leaf too far (plant `split-drops-max-tombstone`). 4 clients x 20
        // operations on one compute node.
        (
            Preset {
                name: "long-local",
                compute_nodes: 1,
                memory_nodes: 1,
                clients: 4,
                ops_per_client: 20,
                keys: 12,
                preload: 3,
                mix: Mix { search: 40, insert: 20, update: 30, delete: 10, scan: 0 },
                required_counters: &[RDWC_COMBINED, SPECULATION_HIT, LEAF_SPLIT, HALF_SPLIT_RIGHT],
                step_limit: 2_000_000,
                ..base
            },
            chime_options(config, 1),
        ),
    ]
}

impl Checked for Chime {
    fn presets() -> Vec<(Preset, ChimeOptions)> {
        chime_presets(Chime::NAME)
    }

    fn faults(preset: &str, _: &ChimeOptions) -> FaultPlan {
        FaultPlan::read_failure_preset(preset, 1)
    }

    fn sweep() -> Vec<(Preset, ChimeOptions)> {
        let presets = Self::presets();
        let (base, chime) = presets[0].clone();
        let (local, local_options) = preset_named(&presets, "local");
        let (zero_prefix, zero_prefix_options) = preset_named(&presets, "zero-prefix");
        let (wide_keys, wide_keys_options) = preset_named(&presets, "wide-keys");
        // A configuration of the ladder with the presets' small nodes and budgets.
        let ladder = |config: &str| {
            let mut o = chime.clone();
            Chime::configure(&mut o, config).expect("a known configuration");
            o
        };
        vec![
            // Neighbourhoods of one entry: a key lives in its home slot or not at all, so no
            // hop is possible and a taken home splits the leaf.
            point(
                "sweep-hood-1",
                Preset { required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, ROOT_SPLIT], ..base.clone() },
                chime.clone().with_spans(4, 1, 2),
            ),
            // The largest neighbourhood (14) in a leaf of 14: every neighbourhood wraps around
            // the whole leaf, and the bitmap's flag bits sit next to its used bits. (No hop: with
            // H = S every entry is in every key's neighbourhood; and 40 keys in leaves of 14 split
            // leaves but no internal node within 18 operations.)
            point(
                "sweep-hood-max",
                Preset { keys: 40, preload: 14, required_counters: &[LEAF_SPLIT], ..base.clone() },
                chime.clone().with_spans(14, 14, 2),
            ),
            // The smallest leaves (2 entries, neighbourhoods of 2): splits reach the root within
            // a few inserts.
            point(
                "sweep-span-min",
                Preset { required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, ROOT_SPLIT, MOVE_RIGHT], ..base.clone() },
                chime.clone().with_spans(2, 2, 2),
            ),
            // `chime-no-sbv`, no preset's: fence keys in every metadata replica instead of
            // sibling-based validation, no speculative read.
            point(
                "sweep-config-no-sbv",
                Preset { required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, HOP], ..base.clone() },
                ladder("chime-no-sbv"),
            ),
            // `chime-hopscotch`: one header read with the neighbourhood, fences, and no vacancy
            // bitmap, so an insert reads the whole leaf to find a free entry.
            point(
                "sweep-config-hopscotch",
                Preset { required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, HOP], ..base.clone() },
                ladder("chime-hopscotch"),
            ),
            // A cache of about one internal node and a hotspot buffer of one set (16 entries)
            // for 24 keys: copies are evicted and stale ones invalidated, remembered slots are
            // replaced and speculative READs miss.
            point(
                "sweep-tiny-caches",
                Preset {
                    required_counters: &[LEAF_SPLIT, CACHE_HIT, LEAF_ROUTE_STALE, SPECULATION_HIT, SPECULATION_MISS],
                    ..base.clone()
                },
                ChimeOptions { cache_bytes: 256, hotspot_bytes: 1, ..chime.clone() },
            ),
            // One RDWC slot: every key's leaders share it.
            point("sweep-rdwc-slots-1", local.clone(), ChimeOptions { rdwc_slots: 1, ..local_options.clone() }),
            // RDWC off on one compute node: every client of the hot keys goes to memory itself.
            point(
                "sweep-rdwc-off",
                Preset {
                    keys: 12,
                    required_counters: &[SPECULATION_HIT, Counters::LOCK_FAILURES, LEAF_SPLIT],
                    ..local.clone()
                },
                ChimeOptions { rdwc: false, ..local_options.clone() },
            ),
            // CHIME-Indirect with a one-byte prefix: all keys share the prefix 0, so every lookup
            // resolves a collision and at most H = 4 keys fit (later inserts answer Full). Found
            // the empty-entry match, now the preset `zero-prefix`; this point runs it longer.
            point(
                "sweep-prefix-1",
                Preset { ops_per_client: 15, step_limit: 1_000_000, ..zero_prefix.clone() },
                zero_prefix_options.clone(),
            ),
            // Four memory nodes: leaves, internal nodes and blocks spread over all of them.
            point(
                "sweep-memory-nodes-4",
                Preset { memory_nodes: 4, ..base.clone() },
                ChimeOptions { memory_nodes: 4, ..chime.clone() },
            ),
            // Internal nodes wider than the presets' two entries (the paper's are 64), with
            // `wide-keys`' keys: an internal node takes several writes between splits, so a READ
            // can be torn across two of them, with entries of different counts on either side
            // of a line. Added for the mutation run: CHIME's internal version bump `& 0x0F`
            // made `^` alternates between two values, which only a READ torn across an even
            // number of writes passes, and two entries a node never tore that way.
            point("sweep-internal-4", wide_keys.clone(), wide_keys_options.clone().with_spans(4, 2, 4)),
            point("sweep-internal-8", wide_keys.clone(), wide_keys_options.clone().with_spans(4, 2, 8)),
            // `sweep-internal-4` with no internal-node cache, so that every search READs the
            // root and the internal nodes below it: a new root of one entry that takes two more
            // is where a READ torn across two writes could mix an empty entry's leading key
            // bytes (zero) with a new entry's tail, a made-up separator below every other.
            point(
                "sweep-internal-4-uncached",
                wide_keys,
                ChimeOptions { cache_bytes: 0, ..wide_keys_options.with_spans(4, 2, 4) },
            ),
            // A small retry bound: operations give up mid-way (a split whose pivot never reaches
            // the parent) and later ones must cope.
            point(
                "sweep-retries-3",
                Preset { required_counters: &[LEAF_SPLIT, Counters::RETRIES], ..base.clone() },
                ChimeOptions { max_retries: 3, ..chime.clone() },
            ),
            // Long runs: 4 clients x 20 operations on 40 keys: splits, hops and late inserts
            // and scans around moved keys.
            point(
                "sweep-long-splits",
                Preset {
                    clients: 4,
                    ops_per_client: 20,
                    keys: 40,
                    step_limit: 2_000_000,
                    required_counters: &[LEAF_SPLIT, INTERNAL_SPLIT, HOP, HALF_SPLIT_RIGHT, SCAN_NEXT_LEAF],
                    ..base
                },
                chime,
            ),
            // Long runs on one compute node: delegation, combining and speculation with splits.
            point(
                "sweep-long-local",
                Preset {
                    ops_per_client: 20,
                    keys: 12,
                    step_limit: 2_000_000,
                    required_counters: &[RDWC_COMBINED, SPECULATION_HIT, SPECULATION_MISS, LEAF_SPLIT],
                    ..local
                },
                local_options,
            ),
        ]
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

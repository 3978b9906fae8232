//! Checking presets of Dolphin (`dmkit_indexes::dolphin`).

use crate::Counters;
use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, point};
use crate::common::change::{RDWC_COMBINED, RDWC_DELEGATED, RDWC_WRITE_FALLBACK};
use crate::dolphin::layout::Split;
use crate::dolphin::{
    BACKTRACK, COMPACTION, Dolphin, DolphinOptions, LEAF_SPLIT, NEW_PREFIX, PREFIX_SPLIT, PUBLISH_RACED, ROOT_RACED,
    SCAN_FROM_CACHE, SCAN_REREAD, SHARE_BACK_AFTER_FAILED_READ, SMO_CONFLICT, SMO_DRAIN_WAIT, SMO_WAIT, TORN_READ,
    TYPE_SWITCH,
};

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

/// Keys whose scans have edges (the `scan-shapes` preset): the hot 7-byte prefix (11, 9, 7, 5,
/// then 3, 1 and 0xFF, its largest last byte), a prefix whose first key ends in 0x00 (0x100
/// beside 0x105), and a special node whose compressed path bytes are not zero (0x01AB_CDEF_0123_45
/// ..): scan arithmetic that shifts or masks a compressed byte, or steps past a 0xFF last byte,
/// shows on them. Key 11 leaves the first node's compressed prefix (a prefix split).
pub fn dolphin_shape_key(k: u64) -> Vec<u8> {
    let word: u64 = match k {
        0..=3 => 11 - 2 * k,
        4 => 0x01AB_CDEF_0123_4508,
        5 => 0x1_00,
        6 => 0x1_05,
        7 => 0xFF,
        8 => 3,
        9 => 1,
        10 => 0x01AB_CDEF_0123_4510,
        _ => 0x0000_0001_0000_0003,
    };
    word.to_be_bytes().to_vec()
}

/// Keys that grow one node: key `k < 18` ends in bytes `k + 1, 1` (its own 7-byte prefix, so
/// each is a new child of the node that branches on byte 6, an N16 that switches type at the
/// 17th); key 18 leaves that node's compressed prefix at byte 0 (a prefix split above it).
pub fn dolphin_wide_key(k: u64) -> Vec<u8> {
    let word = if k < 18 { (k + 1) << 8 | 1 } else { 0x0100_0000_0000_0001 + k };
    word.to_be_bytes().to_vec()
}

/// Keys in one 7-byte prefix (one special node): the first nine, preloaded in order, fill three
/// leaves of 4 slots; key `9 + i` falls inside leaf `i`, so inserts of them split neighbouring
/// leaves.
pub fn dolphin_prefix_key(k: u64) -> Vec<u8> {
    let last = if k < 9 { 10 * k } else { 30 * (k - 9) + 5 };
    (0x0200 + last).to_be_bytes().to_vec()
}

/// Keys in one 7-byte prefix for leaves of the artifact's 65 slots: the first 64 (every fourth
/// last byte, preloaded) leave one leaf one slot short of full, and keys `64..70` fall between
/// them, so the first of them to be inserted splits that leaf.
pub fn dolphin_dense_key(k: u64) -> Vec<u8> {
    let last = if k < 64 { 4 * k } else { 40 * (k - 64) + 1 };
    (0x0300 + last).to_be_bytes().to_vec()
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
            scan_bounds: ScanBounds::From,
            required_counters: &[
                LEAF_SPLIT,
                BACKTRACK,
                PREFIX_SPLIT,
                NEW_PREFIX,
                Counters::CAS_FAILURES,
                SCAN_FROM_CACHE,
                SCAN_REREAD,
            ],
            step_limit: 1_000_000,
            low_client_ids: false,
        };
        // One compute node, three hot keys: read delegation and write combining.
        let local = Preset {
            name: "local",
            compute_nodes: 1,
            memory_nodes: 1,
            clients: 4,
            keys: 3,
            preload: 2,
            mix: Mix { search: 45, insert: 20, update: 25, delete: 10, scan: 0 },
            required_counters: &[RDWC_DELEGATED, RDWC_COMBINED],
            ..base.clone()
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
                    required_counters: &[LEAF_SPLIT, COMPACTION, SMO_WAIT],
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            (local.clone(), dolphin_options(1)),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 4,
                    preload: 3,
                    required_counters: &[],
                    step_limit: 200_000,
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            // An empty tree: the first inserts race for the root word, the next ones for the
            // free entries of the node they all hang under.
            (
                Preset {
                    name: "empty",
                    clients: 3,
                    ops_per_client: 3,
                    keys: 4,
                    key_of: dolphin_wide_key,
                    preload: 0,
                    mix: Mix { search: 20, insert: 80, update: 0, delete: 0, scan: 0 },
                    required_counters: &[ROOT_RACED],
                    step_limit: 200_000,
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            // A node one child short of full: new children race for its last free entry and its
            // type switch, and a key leaving its prefix interposes above it meanwhile.
            (
                Preset {
                    name: "wide",
                    keys: 19,
                    key_of: dolphin_wide_key,
                    preload: 15,
                    mix: Mix { search: 30, insert: 70, update: 0, delete: 0, scan: 0 },
                    required_counters: &[TYPE_SWITCH],
                    ..base.clone()
                },
                dolphin_options(2),
            ),
            // One prefix, three full leaves: splits of neighbouring leaves race for a free entry
            // of their special node.
            (
                Preset {
                    name: "splits",
                    keys: 12,
                    key_of: dolphin_prefix_key,
                    preload: 9,
                    mix: Mix { search: 20, insert: 80, update: 0, delete: 0, scan: 0 },
                    required_counters: &[LEAF_SPLIT],
                    ..base.clone()
                },
                dolphin_options(2),
            ),
            // One attempt per operation: any lost race or wait gives up, and must leave no mark
            // on a leaf (a leaked share stalls its splits). Found by the option sweep: it failed
            // before the fix, as a descent counted each node it stepped down as an attempt (the
            // preload gave up at once).
            (
                Preset {
                    name: "retries-1",
                    clients: 4,
                    ops_per_client: 20,
                    keys: 6,
                    preload: 3,
                    mix: Mix { search: 30, insert: 30, update: 20, delete: 15, scan: 5 },
                    required_counters: &[LEAF_SPLIT, SMO_WAIT],
                    step_limit: 6_000_000,
                    ..base.clone()
                },
                DolphinOptions { max_retries: 1, ..dolphin_options(1) },
            ),
            // Scans of every shape (both ends included, excluded or open, bounds between and
            // beside keys, limits from 0) over keys at the edges of scan arithmetic, while
            // inserts split the hot leaf and interpose a prefix. Made for the mutants of
            // Dolphin's scan bounds that no preset reached (docs/checking.md, mutation scores).
            (
                Preset {
                    name: "scan-shapes",
                    keys: 12,
                    key_of: dolphin_shape_key,
                    preload: 7,
                    mix: Mix { search: 15, insert: 35, update: 10, delete: 10, scan: 30 },
                    scan_bounds: ScanBounds::Shapes { other_lengths: true },
                    required_counters: &[LEAF_SPLIT, PREFIX_SPLIT],
                    ..base.clone()
                },
                dolphin_options(2),
            ),
            // `local` with three READs failing: a combining window's leader whose READ fails
            // before it closes the window gives up without its followers' changes, and each
            // follower applies its own (`rdwc_write_fallback`, which no other preset reaches).
            (
                Preset {
                    name: "local-read-failure",
                    compute_nodes: 2,
                    mix: Mix { search: 30, insert: 25, update: 35, delete: 10, scan: 0 },
                    required_counters: &[RDWC_COMBINED, RDWC_WRITE_FALLBACK],
                    ..local.clone()
                },
                dolphin_options(1),
            ),
            // Three READs failing (a transient transport error; the explorer places each) on a
            // leaf that splits: an operation whose share's READ failed must give the share back,
            // or the split waits for it until it gives up, and every later one too.
            (
                Preset {
                    name: "read-failure",
                    memory_nodes: 1,
                    clients: 3,
                    ops_per_client: 8,
                    keys: 8,
                    preload: 3,
                    mix: Mix { search: 20, insert: 50, update: 20, delete: 10, scan: 0 },
                    required_counters: &[LEAF_SPLIT, SHARE_BACK_AFTER_FAILED_READ],
                    ..base
                },
                dolphin_options(1),
            ),
        ]
    }

    fn faults(preset: &str, _: &DolphinOptions) -> FaultPlan {
        match preset {
            "local-read-failure" => FaultPlan::read_failures(1, 3),
            _ => FaultPlan::read_failure_preset(preset, 1),
        }
    }

    fn sweep() -> Vec<(Preset, DolphinOptions)> {
        let mut presets = Self::presets().into_iter().map(|(p, o)| (p.name, (p, o))).collect::<Vec<_>>();
        let mut take = |name: &str| {
            let i = presets.iter().position(|(n, _)| *n == name).expect("a preset of that name");
            presets.swap_remove(i).1
        };
        let (base, o) = take("default");
        let (leaf, lo) = take("leaf");
        let (local, lco) = take("local");
        let (splits, so) = take("splits");
        let long = |p: &Preset| Preset { clients: 4, ops_per_client: 20, step_limit: 6_000_000, ..p.clone() };
        vec![
            // The paper's even split (the larger half to the new leaf) on 4-slot leaves: two
            // keys stay, so a leaf refills after two inserts and neighbours split again.
            point(
                "sweep-split-even",
                Preset { required_counters: &[LEAF_SPLIT, BACKTRACK, SMO_CONFLICT, TORN_READ], ..splits.clone() },
                DolphinOptions { split: Split::Even, ..so.clone() },
            ),
            // One attempt per operation while neighbouring leaves split: a publish whose CAS
            // loses gives up, and its split is undone (the put-back) after the shrunk left leaf
            // was visible.
            point(
                "sweep-splits-retries-1",
                Preset { clients: 4, required_counters: &[LEAF_SPLIT, PUBLISH_RACED], ..splits.clone() },
                DolphinOptions { max_retries: 1, ..so.clone() },
            ),
            // The artifact's 65-slot leaf (17 lines, one version each), one slot short of full:
            // the first insert of a new key splits it while others update and delete in it.
            point(
                "sweep-leaf-65",
                Preset {
                    keys: 70,
                    key_of: dolphin_dense_key,
                    preload: 64,
                    mix: Mix { search: 20, insert: 50, update: 15, delete: 10, scan: 5 },
                    required_counters: &[LEAF_SPLIT, SMO_DRAIN_WAIT, TORN_READ],
                    step_limit: 4_000_000,
                    ..leaf.clone()
                },
                DolphinOptions { leaf_slots: 65, ..lo.clone() },
            ),
            // No cache: every operation descends from the root entry (no backtracking from a
            // stale special node, no scan from a cached one).
            point(
                "sweep-cache-0",
                Preset {
                    required_counters: &[LEAF_SPLIT, PREFIX_SPLIT, NEW_PREFIX, Counters::CAS_FAILURES],
                    ..base.clone()
                },
                DolphinOptions { cache_bytes: 0, ..o.clone() },
            ),
            // A cache of 2,100 bytes: one special node (an N256 for 4-slot leaves, 2,090 bytes),
            // so caching any other node evicts it, and scans and searches fall back to the root.
            point(
                "sweep-cache-tiny",
                Preset { required_counters: &[LEAF_SPLIT, BACKTRACK, SCAN_FROM_CACHE], ..base.clone() },
                DolphinOptions { cache_bytes: 2_100, ..o.clone() },
            ),
            // One RDWC slot per compute node: all keys share it.
            point("sweep-rdwc-1", Preset { keys: 6, ..local.clone() }, DolphinOptions { rdwc_slots: 1, ..lco.clone() }),
            // Read delegation alone, and write combining alone.
            point(
                "sweep-rd-only",
                Preset { required_counters: &[RDWC_DELEGATED], ..local.clone() },
                DolphinOptions { write_combining: false, ..lco.clone() },
            ),
            point(
                "sweep-wc-only",
                Preset { required_counters: &[RDWC_COMBINED], ..local.clone() },
                DolphinOptions { read_delegation: false, ..lco.clone() },
            ),
            // No RDWC and no table (rdwc_slots 0, which validate allows only with both off):
            // every search and write goes to memory on its own.
            point(
                "sweep-rdwc-off",
                Preset { required_counters: &[LEAF_SPLIT, COMPACTION, SMO_WAIT], ..leaf.clone() },
                DolphinOptions { read_delegation: false, write_combining: false, rdwc_slots: 0, ..lo.clone() },
            ),
            // The most memory nodes entries can name (16): paths, special nodes and leaves
            // spread over them.
            point(
                "sweep-nodes-16",
                Preset { memory_nodes: 16, ..base.clone() },
                DolphinOptions { memory_nodes: 16, ..o.clone() },
            ),
            // The smallest chunk the allocator accepts (32 bytes): every node and leaf is
            // larger, so each allocation bypasses the chunks.
            point("sweep-chunk-min", base.clone(), DolphinOptions { chunk_bytes: 32, ..o.clone() }),
            // Long runs: one hot prefix (splits, compactions, updates and deletes of moved keys),
            // and three full leaves whose splits race, with deletes and late inserts.
            point("sweep-long-leaf", long(&leaf), lo),
            point(
                "sweep-long-splits",
                Preset {
                    mix: Mix { search: 20, insert: 45, update: 15, delete: 15, scan: 5 },
                    required_counters: &[LEAF_SPLIT, BACKTRACK, PUBLISH_RACED],
                    ..long(&splits)
                },
                so,
            ),
        ]
    }

    fn configure(options: &mut DolphinOptions, config: &str) -> Result<(), String> {
        options.configure(config)
    }
}

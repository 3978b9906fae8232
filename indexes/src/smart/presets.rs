//! Checking presets of SMART (`dmkit check --index smart`); ART's, its baseline configuration, are in `art/presets.rs`.

use crate::Counters;
use crate::IndexKind;
use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, be_key, point, preset_named, scan_shapes_preset};
use crate::common::change::{RDWC_COMBINED, RDWC_DELEGATED, RDWC_READ_FALLBACK, RDWC_WRITE_FALLBACK};
use crate::smart::layout::NodeTypes;
use crate::smart::{
    CACHE_HIT, CACHE_INVALIDATED, HEADER_SPLIT, LEAF_SPLIT, PUBLISH_LOST, RCU_UPDATE, Smart, SmartOptions, TORN_LEAF,
    TYPE_STALE_READ, TYPE_SWITCH, TYPE_SWITCH_FOLLOWED, UPDATE_IN_PLACE,
};

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

/// Keys for a type switch racing a header split of the same node: keys 0–4 differ at byte 6
/// only (one node of six compressed partials, bytes 0–5, whose fifth child switches it past
/// NODE_4), and key 5 diverges inside those partials at byte 3 (a header split of that node,
/// which publishes new nodes on the very slot the switch CASes).
pub fn switch_split_key(k: u64) -> Vec<u8> {
    if k < 5 { vec![0, 0, 0, 0, 0, 0, k as u8, 0] } else { vec![0, 0, 0, (k - 4) as u8, 0, 0, 0, 0] }
}

/// [`smart_key`] behind `P` zero bytes (`8 + P`-byte keys): the first leaf split builds a chain
/// of nodes of up to 6 compressed partials each over the long common prefix, and keys 14 and 15
/// (keys 12 and 13 with byte 10 set) leave it at byte 10, inside the chain's second header.
pub fn smart_long_key<const P: usize>(k: u64) -> Vec<u8> {
    let mut key = vec![0u8; P];
    key.extend(smart_key(if k < 14 { k } else { k - 2 }));
    if k >= 14 {
        key[10] = 1;
    }
    key
}

/// Values of 64 bytes: a leaf spans two cache lines, so an update can tear a READ.
const SMART_VALUE: u32 = 64;

fn smart_options(config: &str, memory_nodes: u16) -> SmartOptions {
    let o = SmartOptions::named(config, 8, SMART_VALUE).expect("a known configuration");
    SmartOptions { memory_nodes, max_retries: 2_000, cache_bytes: 1 << 20, ..o }
}

pub(crate) fn smart_presets(config: &str) -> Vec<(Preset, SmartOptions)> {
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
        scan_bounds: ScanBounds::From,
        required_counters: &[LEAF_SPLIT, HEADER_SPLIT, TYPE_SWITCH, CACHE_HIT, CACHE_INVALIDATED],
        step_limit: 400_000,
        low_client_ids: false,
    };
    let switch_under_split = Preset {
        name: "switch-under-split",
        keys: 6,
        key_of: switch_split_key,
        preload: 4,
        clients: 3,
        ops_per_client: 4,
        mix: Mix { search: 30, insert: 70, update: 0, delete: 0, scan: 0 },
        required_counters: &[TYPE_SWITCH, HEADER_SPLIT, TYPE_SWITCH_FOLLOWED],
        ..base.clone()
    };
    vec![
        (base.clone(), smart_options(config, 2)),
        // Scans of every shape (`ScanBounds::Shapes`) while inserts split leaves and headers.
        (scan_shapes_preset(&base, true, &[LEAF_SPLIT]), smart_options(config, 2)),
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
                required_counters: &[RDWC_COMBINED, RDWC_DELEGATED, LEAF_SPLIT, Counters::LOCK_FAILURES],
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
                required_counters: &[RDWC_WRITE_FALLBACK, RDWC_READ_FALLBACK],
                ..base.clone()
            },
            smart_options(config, 1),
        ),
        // A type switch and a header split of one node at once (`switch_split_key`): four
        // children preloaded, so the fifth insert switches the node while an insert of key 5
        // splits its header; whichever CAS on the parent slot lands second must cope. The
        // first preset to reach `type_switch_followed` and `type_switch_retry` (2026-11-29;
        // `wide` and the sweep's switch-heavy points split other nodes than they switch).
        (switch_under_split.clone(), smart_options(config, 2)),
        // `switch-under-split` with the checking clients numbered 0..3, as a hardware run
        // numbers its workload clients, each on a compute node of its own (no local lock table
        // in between): ART's node-lock word is `client + 1`, and only here do clients 0 and 1
        // lock. Found by mutation: `client - 1` and `client * 1` make client 1's or client 0's
        // word the unlocked 0 (the simulator gives those ids to the creator and the first
        // service worker); `default` with low ids stayed clean with the first over 20 000
        // schedules of each mode, its clients sharing a compute node's local lock.
        (
            Preset { name: "low-ids", compute_nodes: 3, low_client_ids: true, ..switch_under_split },
            smart_options(config, 2),
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
                required_counters: &[LEAF_SPLIT],
                step_limit: 200_000,
                ..base
            },
            smart_options(config, 1),
        ),
    ]
}

/// A node filled one key at a time: keys `0..20` as [`be_key`] differ only in their last byte,
/// so they are children of one node; 15 are preloaded and the inserts race for the next type
/// switches.
pub(crate) fn wide(base: &Preset) -> Preset {
    Preset {
        keys: 20,
        key_of: be_key,
        preload: 15,
        mix: Mix { search: 30, insert: 50, update: 10, delete: 10, scan: 0 },
        required_counters: &[TYPE_SWITCH],
        ..base.clone()
    }
}

/// Four clients of 20 operations each: a split, a type switch, then updates, deletes and late
/// inserts of the moved keys meet in one run.
pub(crate) fn long(base: &Preset) -> Preset {
    Preset { clients: 4, ops_per_client: 20, step_limit: 2_000_000, ..base.clone() }
}

impl Checked for Smart {
    fn presets() -> Vec<(Preset, SmartOptions)> {
        let mut presets = smart_presets(Smart::NAME);
        let (base, o) = presets[0].clone();
        presets.push((
            // One attempt per operation: a writer that loses any race gives up (an
            // indeterminate result), which must leave no lock held and no half-made change.
            // Found by the option sweep; it failed before two fixes: descent steps counted as
            // attempts (the preload gave up at once), and a delete whose unlink CAS lost to a
            // split above its leaf gave up, leaving its dead leaf reachable.
            Preset { name: "retries-1", required_counters: &[LEAF_SPLIT, PUBLISH_LOST], ..long(&base) },
            SmartOptions { max_retries: 1, ..o },
        ));
        presets
    }

    fn sweep() -> Vec<(Preset, SmartOptions)> {
        let presets = smart_presets(Smart::NAME);
        let (base, o) = preset_named(&presets, "default");
        let (local, lo) = preset_named(&presets, "local");
        let splits = &[LEAF_SPLIT, HEADER_SPLIT, CACHE_HIT][..];
        vec![
            // NODE_256 only (Fig. 22(d)'s one type): no node ever switches type, every READ of
            // a node fetches 256 slots.
            point(
                "sweep-node256-only",
                Preset { required_counters: splits, ..base.clone() },
                SmartOptions { node_types: NodeTypes::geometric(1).expect("valid"), ..o.clone() },
            ),
            // Two types, 4 and 256: the first switch jumps from 4 slots straight to 256.
            // (Three children preloaded: the fifth insert makes the switch.)
            point(
                "sweep-types-2",
                Preset { keys: 8, preload: 3, required_counters: &[TYPE_SWITCH, TYPE_STALE_READ], ..wide(&base) },
                SmartOptions { node_types: NodeTypes::geometric(2).expect("valid"), ..o.clone() },
            ),
            // 31 types (4, 5, 5, 6, ... deduplicated): a switch every one or two inserts, so
            // concurrent inserts race for consecutive switches of one node.
            point(
                "sweep-types-31",
                wide(&base),
                SmartOptions { node_types: NodeTypes::geometric(31).expect("valid"), ..o.clone() },
            ),
            // No radix cache: every operation starts from the root slot (no reverse check of
            // a cached route, no invalidation).
            point(
                "sweep-cache-0",
                Preset { required_counters: &[LEAF_SPLIT, HEADER_SPLIT, TYPE_SWITCH], ..base.clone() },
                SmartOptions { cache_bytes: 0, ..o.clone() },
            ),
            // A cache of 100 bytes: one NODE_4 entry (65 bytes with its 7-byte prefix), so each
            // add evicts the last and larger nodes are never cached.
            point(
                "sweep-cache-tiny",
                Preset { required_counters: &[LEAF_SPLIT, HEADER_SPLIT, CACHE_HIT, CACHE_INVALIDATED], ..base.clone() },
                SmartOptions { cache_bytes: 100, ..o.clone() },
            ),
            // One RDWC slot per compute node: every key shares it, so a window of one key meets
            // searches and writes of the others.
            point(
                "sweep-rdwc-1",
                Preset { required_counters: &[RDWC_COMBINED, RDWC_DELEGATED, LEAF_SPLIT], ..local.clone() },
                SmartOptions { rdwc_slots: 1, ..lo.clone() },
            ),
            // 32-byte keys with 24 shared zero bytes: chains of full headers, header splits
            // inside the chain (keys 14, 15), and cache entries under long prefixes.
            point(
                "sweep-keys-32",
                Preset { keys: 16, key_of: smart_long_key::<24>, step_limit: 1_000_000, ..base.clone() },
                SmartOptions { key_bytes: 32, ..o.clone() },
            ),
            // The longest keys (256 bytes, 248 shared): a leaf split writes a chain of 36 nodes
            // in one batch (over one 64 KiB chunk: the allocator takes a second), and headers
            // reach depth 256.
            point(
                "sweep-keys-256",
                Preset {
                    keys: 16,
                    ops_per_client: 4,
                    key_of: smart_long_key::<248>,
                    step_limit: 4_000_000,
                    required_counters: splits,
                    ..base.clone()
                },
                SmartOptions { key_bytes: 256, chunk_bytes: 64 << 10, ..o.clone() },
            ),
            // The largest value (4 KiB): a leaf spans 66 cache lines and its slot cannot record
            // its length (units over 127 are stored as 0), so torn reads of long leaves.
            point(
                "sweep-value-4096",
                Preset {
                    value_bytes: 4096,
                    step_limit: 4_000_000,
                    required_counters: &[LEAF_SPLIT, TORN_LEAF],
                    ..local.clone()
                },
                SmartOptions { value_bytes: 4096, ..lo.clone() },
            ),
            // The factor analysis's in-place step without the rear lock (smart-inplace): an
            // update's data WRITE and its unlock are two WRITEs; no preset runs it.
            point(
                "sweep-inplace",
                Preset {
                    required_counters: &[UPDATE_IN_PLACE, LEAF_SPLIT, Counters::LOCK_FAILURES, TORN_LEAF],
                    ..local.clone()
                },
                configured(&lo, "smart-inplace"),
            ),
            // Lock-free nodes with out-of-place updates (smart-lockfree): ART's RCU leaves
            // without its node locks; no preset runs it.
            point(
                "sweep-lockfree",
                Preset { required_counters: &[RCU_UPDATE, LEAF_SPLIT, HEADER_SPLIT, TYPE_SWITCH], ..base.clone() },
                configured(&o, "smart-lockfree"),
            ),
            // Read delegation without write combining (smart-rd): no preset runs it.
            point(
                "sweep-rd",
                Preset { required_counters: &[RDWC_DELEGATED, LEAF_SPLIT, Counters::LOCK_FAILURES], ..local.clone() },
                configured(&lo, "smart-rd"),
            ),
            // Sixteen memory nodes: a split's nodes and the leaves it moves live on different
            // nodes, and the 8-bit node ids of slots go past 1.
            point(
                "sweep-nodes-16",
                Preset { memory_nodes: 16, ..base.clone() },
                SmartOptions { memory_nodes: 16, ..o.clone() },
            ),
            // Long runs on the default shape.
            point("sweep-long", long(&base), o.clone()),
            // Long runs on one node filled to its type switches.
            point("sweep-long-wide", long(&wide(&base)), o),
        ]
    }

    fn faults(preset: &str, _: &SmartOptions) -> FaultPlan {
        FaultPlan::read_failure_preset(preset, 1)
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

/// `o` in the named configuration `config`, keeping what the presets set.
fn configured(o: &SmartOptions, config: &str) -> SmartOptions {
    let mut o = o.clone();
    Smart::configure(&mut o, config).expect("a known configuration");
    o
}

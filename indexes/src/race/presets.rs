//! Checking presets of RACE hashing (`dmkit_indexes::race`).

use crate::Counters;
use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, be_key, point};
use crate::race::{
    DIRECTORY_DOUBLING, INSERT_UNLOCKED_AFTER_FAILED_READ, ITEM_MOVED, Race, RaceOptions, SEARCH_ON_RESIZE,
    SHALLOW_SPLIT, SPLIT, SPLIT_READ_RETRIED, SPLIT_RELEASED_AFTER_FAILED_READ, SPLIT_WAIT, SYNC_DEPTH_GREW,
};

/// RACE's checking tables: 2 groups of 3 buckets of 2 slots in one subtable, so few keys fill
/// combined buckets, share them and collide on fingerprints' buckets.
fn race_options(memory_nodes: u16) -> RaceOptions {
    RaceOptions {
        key_bytes: 8,
        value_bytes: 32,
        slots: 2,
        groups: 2,
        initial_depth: 1,
        max_depth: 4,
        memory_nodes,
        max_retries: 2_000,
        ..RaceOptions::default()
    }
}

impl Checked for Race {
    fn presets() -> Vec<(Preset, RaceOptions)> {
        let basic = Preset {
            name: "basic",
            compute_nodes: 2,
            memory_nodes: 2,
            clients: 3,
            ops_per_client: 6,
            keys: 6,
            key_of: be_key,
            value_bytes: 32,
            preload: 2,
            mix: Mix { search: 35, insert: 35, update: 15, delete: 15, scan: 0 },
            scan_limit: 4,
            scan_bounds: ScanBounds::From,
            required_counters: &[Counters::CAS_FAILURES, Counters::LOCK_FAILURES],
            step_limit: 400_000,
            low_client_ids: false,
        };
        // One subtable of six 1-slot buckets: inserts split it and double the directory while
        // searches and writes meet items in flight.
        let default = Preset {
            name: "default",
            keys: 8,
            preload: 3,
            mix: Mix { search: 35, insert: 40, update: 15, delete: 10, scan: 0 },
            required_counters: &[SPLIT, ITEM_MOVED, DIRECTORY_DOUBLING, SEARCH_ON_RESIZE, SPLIT_WAIT],
            step_limit: 1_000_000,
            ..basic.clone()
        };
        // Two subtables of 1-slot buckets and more keys: splits of a subtable shallower than
        // the directory (several entries re-pointed, no doubling) as well as doublings.
        let deep = Preset {
            name: "deep",
            keys: 16,
            preload: 10,
            mix: Mix { search: 35, insert: 40, update: 15, delete: 10, scan: 0 },
            required_counters: &[SHALLOW_SPLIT, DIRECTORY_DOUBLING, ITEM_MOVED, SEARCH_ON_RESIZE],
            step_limit: 1_000_000,
            ..basic.clone()
        };
        vec![
            (default.clone(), RaceOptions { slots: 1, initial_depth: 0, ..race_options(2) }),
            // "default" with 2-slot buckets (24 bytes): some buckets' headers and slots sit in
            // different cache lines, so a READ of one bucket can see its header and its slots at
            // different times while a split moves the bucket. Twice the keys, more preloaded:
            // with 8 keys a key's two combined buckets (8 slots) never fill, so nothing splits.
            (
                Preset { name: "default-2slot", keys: 16, preload: 9, ..default.clone() },
                RaceOptions { slots: 2, initial_depth: 0, ..race_options(2) },
            ),
            (deep.clone(), RaceOptions { slots: 1, initial_depth: 1, ..race_options(2) }),
            // Two subtables of 2-slot buckets, no splits: the plain protocol.
            (basic.clone(), race_options(2)),
            // "basic" with 150-byte values: every item's block spans three 64-byte units, which a
            // slot's unit count must say (with 32-byte values every block is one unit, and a
            // slot decoded as one unit long read the whole block: the first mutation sample
            // left that alive).
            (
                Preset { name: "sizes", value_bytes: 150, ..basic.clone() },
                RaceOptions { value_bytes: 150, ..race_options(2) },
            ),
            // Three keys in 1-slot buckets, three inserting clients: concurrent inserts of one
            // absent key land in different slots.
            (
                Preset {
                    name: "same-key",
                    keys: 3,
                    preload: 1,
                    mix: Mix { search: 30, insert: 50, update: 0, delete: 20, scan: 0 },
                    ..basic.clone()
                },
                RaceOptions { slots: 1, ..race_options(1) },
            ),
            // "default" with one attempt per operation: every wait for a split, lost CAS or
            // busy lock gives up (an error of unknown effect). Failed before the fix as the sweep
            // point `sweep-retries-1` ("the directory lock is held with no operation in
            // flight"): a split's directory READ under the lock, sized by a stale cached depth,
            // gave up after one attempt and returned with the directory lock held. A split that
            // holds the lock now finishes whatever max_retries says (see `Race`'s `resize`).
            (
                Preset { name: "retries-1", ..default.clone() },
                RaceOptions { slots: 1, initial_depth: 0, max_retries: 1, ..race_options(2) },
            ),
            // "default" with three READs failing (a transient transport error; the explorer
            // places each): an insert whose lock CAS won and whose READ failed releases its
            // lock; a split whose READ failed releases the directory lock before its publish
            // and reads again after it (a published split cannot be undone).
            (
                Preset {
                    name: "read-failure",
                    required_counters: &[
                        SPLIT,
                        INSERT_UNLOCKED_AFTER_FAILED_READ,
                        SPLIT_RELEASED_AFTER_FAILED_READ,
                        SPLIT_READ_RETRIED,
                    ],
                    ..default.clone()
                },
                RaceOptions { slots: 1, initial_depth: 0, ..race_options(2) },
            ),
            // "default" with four clients of ten operations on twice the keys, half of them
            // searches: one subtable splits twice in a row while a search that re-read the
            // directory after the first split reads the buckets the second one is moving
            // (`search_resync`: the only preset that reaches it, about once in 3000 PCT
            // schedules and not in random ones, so it is not a required counter: the mutation
            // oracle's 2000 schedules a mode would call the preset vacuous).
            (
                Preset {
                    name: "resync",
                    clients: 4,
                    ops_per_client: 10,
                    keys: 16,
                    mix: Mix { search: 50, insert: 50, update: 0, delete: 0, scan: 0 },
                    required_counters: &[SPLIT, SEARCH_ON_RESIZE],
                    step_limit: 2_000_000,
                    ..default.clone()
                },
                RaceOptions { slots: 1, initial_depth: 0, ..race_options(2) },
            ),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    preload: 1,
                    required_counters: &[],
                    step_limit: 100_000,
                    ..basic
                },
                race_options(1),
            ),
        ]
    }

    fn faults(preset: &str, _: &RaceOptions) -> FaultPlan {
        FaultPlan::read_failure_preset(preset, 2)
    }

    fn sweep() -> Vec<(Preset, RaceOptions)> {
        let presets = Self::presets();
        let find = |name: &str| presets.iter().find(|(p, _)| p.name == name).expect("a preset").clone();
        let (default, one_slot) = find("default");
        // Inserts first: the growth a sweep point needs comes from new keys. (Splits during the
        // preload count for nothing: the preload runs before the explored part, and its
        // counters are not kept. So each point preloads up to just before a split, as measured
        // by inserting keys 0, 1, ... one after another.)
        let growing = Mix { search: 25, insert: 50, update: 15, delete: 10, scan: 0 };
        vec![
            // The paper's K = 7: a bucket is one 64-byte line (no header re-check), a combined
            // bucket 14 slots. The presets use K = 1 and 2 only. With 2 groups the combined
            // buckets overlap so much that the subtable splits only when all 42 slots are full:
            // 42 keys preloaded, and the first insert of one of the 6 others splits.
            point(
                "sweep-slots-7",
                Preset {
                    ops_per_client: 10,
                    keys: 48,
                    preload: 42,
                    mix: growing,
                    required_counters: &[SPLIT, ITEM_MOVED, DIRECTORY_DOUBLING, SPLIT_WAIT],
                    step_limit: 2_000_000,
                    ..default.clone()
                },
                RaceOptions { slots: 7, ..one_slot.clone() },
            ),
            // The most slots the options accept (K = 64): a bucket is 520 bytes, every bucket's
            // header and most of its slots in different lines, a combined-bucket READ 17 lines.
            // The subtable (384 slots) holds keys 0..384; the 385th key splits it.
            point(
                "sweep-slots-64",
                Preset {
                    ops_per_client: 10,
                    keys: 392,
                    preload: 384,
                    mix: growing,
                    required_counters: &[SPLIT, ITEM_MOVED],
                    step_limit: 20_000_000,
                    ..default.clone()
                },
                RaceOptions { slots: 64, ..one_slot.clone() },
            ),
            // The directory reservation at its smallest useful size (M = 1): the one split from
            // depth 0 to 1 (at the 7th key) doubles the directory, then from the 11th key
            // inserts answer Full (an error with no effect) while writes and searches go on.
            point(
                "sweep-depth-cap",
                Preset {
                    ops_per_client: 10,
                    keys: 16,
                    preload: 6,
                    mix: growing,
                    required_counters: &[SPLIT, DIRECTORY_DOUBLING],
                    ..default.clone()
                },
                RaceOptions { max_depth: 1, ..one_slot.clone() },
            ),
            // A deep directory from the start (2^4 entries, 136 bytes: the root and the entries
            // in three lines) growing to 2^5 (264 bytes): directory READs that span lines while
            // a doubling appends the new half and other clients' caches are one depth behind.
            // 16 subtables hold 46 keys; the 47th splits.
            point(
                "sweep-deep-directory",
                Preset {
                    ops_per_client: 10,
                    keys: 60,
                    preload: 46,
                    mix: growing,
                    required_counters: &[SPLIT, DIRECTORY_DOUBLING, SYNC_DEPTH_GREW, SEARCH_ON_RESIZE],
                    step_limit: 2_000_000,
                    ..default.clone()
                },
                RaceOptions { initial_depth: 4, max_depth: 6, ..one_slot.clone() },
            ),
            // Subtables and KV blocks over four memory nodes (the directory on node 0): a split's
            // new subtable on another node than the old one, a key's block on a third.
            point(
                "sweep-nodes-4",
                Preset { memory_nodes: 4, ..default.clone() },
                RaceOptions { memory_nodes: 4, ..one_slot.clone() },
            ),
            // The most memory nodes the options accept (256: a slot's and an entry's node field
            // at 255). Blocks go round-robin over the nodes, so only a compute node's 256th
            // allocation reaches node 255: 256 keys preloaded (by compute node 0) into 2-slot
            // buckets, so that the table has grown to dozens of subtables and new keys split
            // them while the clients write.
            point(
                "sweep-nodes-256",
                Preset {
                    memory_nodes: 256,
                    ops_per_client: 10,
                    keys: 280,
                    preload: 256,
                    mix: growing,
                    required_counters: &[SPLIT, ITEM_MOVED, SHALLOW_SPLIT],
                    step_limit: 8_000_000,
                    ..default.clone()
                },
                RaceOptions { slots: 2, max_depth: 8, memory_nodes: 256, ..one_slot.clone() },
            ),
            // The smallest chunk the allocator accepts (32 bytes): every KV block (64 bytes) is
            // fetched whole from its memory node instead of carved from a chunk.
            point("sweep-chunk-min", default.clone(), RaceOptions { chunk_bytes: 32, ..one_slot.clone() }),
            // The largest KV block a slot can name (256 units: its length field at 255): 8-byte
            // keys and 16,360-byte values. A block READ is 256 lines.
            point(
                "sweep-block-max",
                Preset { value_bytes: 16_360, step_limit: 20_000_000, ..default.clone() },
                RaceOptions { value_bytes: 16_360, ..one_slot.clone() },
            ),
            // Long runs: 4 clients x 20 operations on 16 keys, 1-slot buckets: several splits
            // per run, with writes and searches of moved keys between them.
            point(
                "sweep-long",
                Preset {
                    clients: 4,
                    ops_per_client: 20,
                    keys: 16,
                    preload: 4,
                    step_limit: 4_000_000,
                    required_counters: &[SPLIT, ITEM_MOVED, SHALLOW_SPLIT, SEARCH_ON_RESIZE, SPLIT_WAIT],
                    ..default.clone()
                },
                one_slot.clone(),
            ),
            // Long runs with 2-slot buckets (headers and slots in different lines): 3 clients x
            // 25 operations on 24 keys.
            point(
                "sweep-long-2slot",
                Preset {
                    ops_per_client: 25,
                    keys: 24,
                    preload: 9,
                    step_limit: 4_000_000,
                    required_counters: &[SPLIT, ITEM_MOVED, SEARCH_ON_RESIZE, SPLIT_WAIT],
                    ..default
                },
                RaceOptions { slots: 2, ..one_slot },
            ),
        ]
    }

    fn configure(options: &mut RaceOptions, config: &str) -> Result<(), String> {
        options.paper = crate::race::Paper::named(config)?;
        Ok(())
    }
}

//! Checking presets of RACE hashing (`dmkit_indexes::race`).

use crate::harness::{Checked, Mix, Preset, be_key};
use dmkit_indexes::race::{Race, RaceOptions};

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
            required_counters: &["cas_failures", "lock_failures"],
            step_limit: 400_000,
        };
        // One subtable of six 1-slot buckets: inserts split it and double the directory while
        // searches and writes meet items in flight.
        let default = Preset {
            name: "default",
            keys: 8,
            preload: 3,
            mix: Mix { search: 35, insert: 40, update: 15, delete: 10, scan: 0 },
            required_counters: &["split", "item_moved", "directory_doubling", "search_on_resize", "split_wait"],
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
            required_counters: &["shallow_split", "directory_doubling", "item_moved", "search_on_resize"],
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

    fn configure(options: &mut RaceOptions, config: &str) -> Result<(), String> {
        options.paper = dmkit_indexes::race::Paper::named(config)?;
        Ok(())
    }
}

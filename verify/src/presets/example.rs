//! Checking presets of the example index (`dmkit_indexes::example`).

use crate::harness::{Checked, Mix, Preset, be_key};
use dmkit_indexes::example::{Example, ExampleOptions};

impl Checked for Example {
    fn presets() -> Vec<(Preset, ExampleOptions)> {
        let tiny = ExampleOptions { buckets: 2, slots_per_bucket: 4, max_retries: 200, ..ExampleOptions::default() };
        vec![
            (
                Preset {
                    name: "default",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 3,
                    ops_per_client: 5,
                    keys: 4,
                    value_bytes: 48,
                    preload: 2,
                    mix: Mix { search: 35, insert: 25, update: 20, delete: 20, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures"],
                    step_limit: 200_000,
                    key_of: be_key,
                },
                tiny.clone(),
            ),
            (
                Preset {
                    name: "hot",
                    compute_nodes: 2,
                    memory_nodes: 2,
                    clients: 4,
                    ops_per_client: 6,
                    keys: 2,
                    value_bytes: 48,
                    preload: 1,
                    mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures", "retries"],
                    step_limit: 400_000,
                    key_of: be_key,
                },
                ExampleOptions { memory_nodes: 2, ..tiny.clone() },
            ),
            (
                // Small enough for DFS: two writers, short runs, every key in one bucket.
                Preset {
                    name: "pair",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    value_bytes: 48,
                    preload: 1,
                    mix: Mix { search: 30, insert: 40, update: 20, delete: 10, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures"],
                    step_limit: 100_000,
                    key_of: be_key,
                },
                ExampleOptions { buckets: 1, ..tiny.clone() },
            ),
            (
                // Found by the mutation run (README): keys and values exactly as long as the
                // options allow (the slot's length check at its bound), and one bucket of two
                // slots for three keys, so inserts meet a full bucket and must answer Full.
                Preset {
                    name: "full",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 3,
                    ops_per_client: 5,
                    keys: 3,
                    value_bytes: 48,
                    preload: 1,
                    mix: Mix { search: 40, insert: 40, update: 0, delete: 20, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures"],
                    step_limit: 200_000,
                    key_of: be_key,
                },
                ExampleOptions { buckets: 1, slots_per_bucket: 2, max_key_bytes: 8, max_value_bytes: 48, ..tiny },
            ),
        ]
    }
}

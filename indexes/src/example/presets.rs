//! Checking presets of the example index (`dmkit_indexes::example`).

use crate::Counters;
use crate::checking::{Checked, Mix, Preset, ScanBounds, be_key, point};
use crate::example::{Example, ExampleOptions};

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
                    scan_bounds: ScanBounds::From,
                    required_counters: &[Counters::LOCK_FAILURES],
                    step_limit: 200_000,
                    low_client_ids: false,
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
                    scan_bounds: ScanBounds::From,
                    required_counters: &[Counters::LOCK_FAILURES, Counters::RETRIES],
                    step_limit: 400_000,
                    low_client_ids: false,
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
                    scan_bounds: ScanBounds::From,
                    required_counters: &[Counters::LOCK_FAILURES],
                    step_limit: 100_000,
                    low_client_ids: false,
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
                    scan_bounds: ScanBounds::From,
                    required_counters: &[Counters::LOCK_FAILURES],
                    step_limit: 200_000,
                    low_client_ids: false,
                    key_of: be_key,
                },
                ExampleOptions { buckets: 1, slots_per_bucket: 2, max_key_bytes: 8, max_value_bytes: 48, ..tiny },
            ),
        ]
    }

    fn sweep() -> Vec<(Preset, ExampleOptions)> {
        let (base, tiny) = Self::presets().swap_remove(0);
        vec![
            // One slot per bucket: every insert of a second key into a bucket answers Full.
            point("sweep-slots-1", base.clone(), ExampleOptions { slots_per_bucket: 1, ..tiny.clone() }),
            // The largest slot the options accept (1 KiB keys, 4 KiB values): a slot spans 80
            // cache lines, so a reader can see any mix of two writes' lines.
            point(
                "sweep-slot-max",
                // A READ or WRITE of a slot is 80 line steps, and a reader waiting out a writer
                // re-reads it up to max_retries times: a hundred times the default's steps.
                Preset { value_bytes: 4096, step_limit: 20_000_000, ..base.clone() },
                ExampleOptions { max_key_bytes: 1024, max_value_bytes: 4096, ..tiny.clone() },
            ),
            // One retry: a reader that meets a held lock or a torn slot gives up at once.
            point("sweep-retries-1", base.clone(), ExampleOptions { max_retries: 1, ..tiny.clone() }),
            // Four memory nodes for two buckets (nodes with no bucket at all).
            point(
                "sweep-nodes-4",
                Preset { memory_nodes: 4, ..base.clone() },
                ExampleOptions { memory_nodes: 4, ..tiny.clone() },
            ),
            // Long runs: 4 clients x 20 operations on 3 keys in one bucket.
            point(
                "sweep-long",
                Preset { clients: 4, ops_per_client: 20, keys: 3, step_limit: 1_000_000, ..base },
                ExampleOptions { buckets: 1, ..tiny },
            ),
        ]
    }
}

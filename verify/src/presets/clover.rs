//! Checking presets of Clover (`dmkit_indexes::clover`).

use crate::harness::{Checked, Mix, Preset, be_key};
use dmkit_indexes::clover::{Clover, CloverOptions};

/// Clover (HStore's other baseline): four keys, so that writers of one key race on its tail's
/// CAS, registrations race at the metadata server, and readers follow stale shortcuts.
impl Checked for Clover {
    fn presets() -> Vec<(Preset, CloverOptions)> {
        let options = CloverOptions {
            max_key_bytes: 8,
            max_value_bytes: 64,
            rpc_threads: 2,
            max_keys: 64,
            max_retries: 2_000,
            chunk_bytes: 1 << 16,
            ..Default::default()
        };
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 1,
            clients: 3,
            ops_per_client: 6,
            keys: 4,
            key_of: be_key,
            value_bytes: 8,
            preload: 2,
            mix: Mix { search: 35, insert: 30, update: 20, delete: 15, scan: 0 },
            scan_limit: 4,
            required_counters: &["cas_failures", "stale_hint", "registered", "ms_lookup"],
            step_limit: 1_000_000,
        };
        vec![
            (base.clone(), options.clone()),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    required_counters: &[],
                    step_limit: 300_000,
                    ..base
                },
                options,
            ),
        ]
    }
}

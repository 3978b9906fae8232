//! Checking presets of DrTM cluster hashing (`dmkit_indexes::cluster`).
//!
//! Tiny chains: one or two main buckets of 2 slots, so that a handful of keys fills the main
//! bucket, links overflow buckets and makes every delete of a non-tail item move the tail item
//! forward (the compaction a lock-free search has to survive). Values of 48 bytes make a KV
//! block of two 64-byte units.

use crate::harness::{Checked, Mix, Preset, be_key};
use dmkit_indexes::cluster::{Cluster, ClusterOptions};

/// The options every preset starts from: 2 slots per bucket, 4 overflow buckets per main
/// bucket (so the pool never runs out with the presets' key counts), small chunks.
pub fn cluster_checking_options(main_buckets: u64, memory_nodes: u16) -> ClusterOptions {
    ClusterOptions {
        main_buckets,
        slots_per_bucket: 2,
        overflow_percent: 400,
        key_bytes: 8,
        value_bytes: 48,
        memory_nodes,
        max_retries: 2_000,
        chunk_bytes: 1 << 16,
        ..ClusterOptions::default()
    }
}

impl Checked for Cluster {
    fn presets() -> Vec<(Preset, ClusterOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 1,
            clients: 3,
            ops_per_client: 6,
            keys: 8,
            value_bytes: 48,
            preload: 5,
            mix: Mix { search: 40, insert: 25, update: 10, delete: 25, scan: 0 },
            scan_limit: 4,
            required_counters: &["overflow_linked", "delete_moved", "lock_failures", "search_revalidated"],
            step_limit: 400_000,
            key_of: be_key,
        };
        vec![
            // One chain of up to five buckets on one memory node.
            (base.clone(), cluster_checking_options(1, 1)),
            // Two chains on two memory nodes, more keys.
            (
                Preset {
                    name: "spread",
                    memory_nodes: 2,
                    keys: 14,
                    preload: 8,
                    required_counters: &["overflow_linked", "delete_moved", "lock_failures"],
                    ..base.clone()
                },
                cluster_checking_options(2, 2),
            ),
            // Small enough for DFS: two clients, one chain.
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 4,
                    preload: 3,
                    mix: Mix { search: 40, insert: 20, update: 10, delete: 30, scan: 0 },
                    required_counters: &["delete_moved"],
                    step_limit: 200_000,
                    ..base.clone()
                },
                cluster_checking_options(1, 1),
            ),
            // The paper's 8-slot buckets: a main bucket is 80 bytes, its header and its last
            // slot and version copy in different 64-byte units, which a READ samples at
            // different times. Only here can a search see the header and the copy on either side
            // of a delete's version WRITEs (with fewer than 7 slots the copy shares the
            // header's unit). Nine keys for eight slots: the chain links an overflow bucket.
            (
                Preset {
                    name: "wide",
                    keys: 9,
                    preload: 7,
                    required_counters: &["delete_moved", "search_torn_version"],
                    ..base
                },
                ClusterOptions { slots_per_bucket: 8, ..cluster_checking_options(1, 1) },
            ),
        ]
    }
}

//! Checking presets of DrTM cluster hashing (`dmkit_indexes::cluster`).
//!
//! Tiny chains: one or two main buckets of 2 slots, so that a handful of keys fills the main
//! bucket, links overflow buckets and makes every delete of a non-tail item move the tail item
//! forward (the compaction a lock-free search has to survive). Values of 48 bytes make a KV
//! block of two 64-byte units.

use crate::Counters;
use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, be_key, point};
use crate::cluster::layout;
use crate::cluster::{
    Cluster, ClusterOptions, DELETE_MOVED, FP_COLLISION, FULL, OVERFLOW_LINKED, SEARCH_REVALIDATED,
    SEARCH_TORN_VERSION, UNLOCK_AFTER_FAILED_READ,
};

/// The options every preset starts from: 2 slots per bucket, 4 overflow buckets per main
/// bucket (so the pool never runs out with the presets' key counts), small chunks.
/// The `k`-th 8-byte big-endian key whose fingerprint is 0 or 1 (about one integer in 128):
/// keys of two fingerprints only.
pub fn colliding_key(k: u64) -> Vec<u8> {
    (0u64..)
        .map(|n| n.to_be_bytes().to_vec())
        .filter(|key| layout::fingerprint(key) < 2)
        .nth(k as usize)
        .expect("the integers hold enough such keys")
}

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
            scan_bounds: ScanBounds::From,
            required_counters: &[OVERFLOW_LINKED, DELETE_MOVED, Counters::LOCK_FAILURES, SEARCH_REVALIDATED],
            step_limit: 400_000,
            low_client_ids: false,
            key_of: be_key,
        };
        vec![
            // One chain of up to five buckets on one memory node.
            (base.clone(), cluster_checking_options(1, 1)),
            // Three chains on two memory nodes, more keys. Three, not two: node 0 holds two
            // main buckets and node 1 one, so a main bucket placed or sized by the even split
            // (a mutant of `main_on` that survived two) addresses past its node's table.
            (
                Preset {
                    name: "spread",
                    memory_nodes: 2,
                    keys: 14,
                    preload: 8,
                    required_counters: &[OVERFLOW_LINKED, DELETE_MOVED, Counters::LOCK_FAILURES],
                    ..base.clone()
                },
                cluster_checking_options(3, 2),
            ),
            // Every key shares its 8-bit fingerprint with three others, in one chain: a search
            // or write meets blocks of other keys behind its fingerprint and must compare the
            // key (with `be_key`'s keys no two fingerprints met, and a search that took any
            // fingerprint match for its key survived the second mutation sample).
            (
                Preset {
                    name: "fp-collisions",
                    key_of: colliding_key,
                    required_counters: &[FP_COLLISION, OVERFLOW_LINKED],
                    ..base.clone()
                },
                cluster_checking_options(1, 1),
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
                    required_counters: &[DELETE_MOVED],
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
                    required_counters: &[DELETE_MOVED, SEARCH_TORN_VERSION],
                    ..base.clone()
                },
                ClusterOptions { slots_per_bucket: 8, ..cluster_checking_options(1, 1) },
            ),
            // "default" with three READs failing (a transient transport error; the explorer
            // places each): a writer whose lock CAS won and whose READ failed must release the
            // chain, or every later writer of it backs off until it gives up.
            (
                Preset {
                    name: "read-failure",
                    mix: Mix { search: 20, insert: 40, update: 20, delete: 20, scan: 0 },
                    required_counters: &[UNLOCK_AFTER_FAILED_READ],
                    ..base
                },
                cluster_checking_options(1, 1),
            ),
        ]
    }

    fn faults(preset: &str, _: &ClusterOptions) -> FaultPlan {
        FaultPlan::read_failure_preset(preset, 1)
    }

    fn sweep() -> Vec<(Preset, ClusterOptions)> {
        let (base, one) = Self::presets().swap_remove(0);
        let linked = &[OVERFLOW_LINKED, DELETE_MOVED, Counters::LOCK_FAILURES, SEARCH_REVALIDATED];
        vec![
            // One slot per bucket: every item past the first links an overflow bucket, a chain
            // is up to 9 buckets long, and a delete moves the tail item across several buckets
            // past a search one READ per bucket.
            point(
                "sweep-slots-1",
                Preset { required_counters: linked, ..base.clone() },
                ClusterOptions { slots_per_bucket: 1, overflow_percent: 1000, ..one.clone() },
            ),
            // The most slots a bucket takes (14: header, slots and version copy fill two 64-byte
            // units to the byte). 14 keys preloaded fill the main bucket: the next new key links.
            point(
                "sweep-slots-14",
                Preset {
                    keys: 18,
                    preload: 14,
                    required_counters: &[OVERFLOW_LINKED, DELETE_MOVED, SEARCH_TORN_VERSION],
                    ..base.clone()
                },
                ClusterOptions { slots_per_bucket: 14, ..one.clone() },
            ),
            // No overflow pool: a new key in a full main bucket takes a pool index past the end
            // (the FAA still counts) and answers Full, while deletes compact the bucket.
            point(
                "sweep-overflow-0",
                Preset {
                    keys: 5,
                    preload: 2,
                    mix: Mix { search: 30, insert: 40, update: 5, delete: 25, scan: 0 },
                    required_counters: &[FULL, DELETE_MOVED, Counters::LOCK_FAILURES],
                    ..base.clone()
                },
                ClusterOptions { overflow_percent: 0, ..one.clone() },
            ),
            // The smallest pool (1 percent rounds up to one bucket): one link (by the third key;
            // two preloaded), then Full from the fifth; the emptied overflow bucket stays linked
            // and takes the chain's next inserts.
            point(
                "sweep-overflow-1",
                Preset {
                    keys: 6,
                    preload: 2,
                    mix: Mix { search: 30, insert: 40, update: 5, delete: 25, scan: 0 },
                    required_counters: &[OVERFLOW_LINKED, FULL, DELETE_MOVED],
                    ..base.clone()
                },
                ClusterOptions { overflow_percent: 1, ..one.clone() },
            ),
            // Main buckets not a multiple of the memory nodes (4 over 3: node 0 holds two chains
            // and four overflow buckets, the others one chain and two). The first link comes
            // with the 4th key, the first Full with the 24th: 6 keys preloaded, 16 in all.
            point(
                "sweep-nodes-3-uneven",
                Preset {
                    memory_nodes: 3,
                    keys: 16,
                    preload: 6,
                    required_counters: &[OVERFLOW_LINKED, DELETE_MOVED, Counters::LOCK_FAILURES],
                    ..base.clone()
                },
                ClusterOptions { overflow_percent: 200, ..cluster_checking_options(4, 3) },
            ),
            // The most memory nodes (64: the superblock's region list at its 1 KiB bound), one
            // chain of 1-slot buckets and one overflow bucket per node. Keys 0, 1, ... link a
            // first overflow bucket with the 6th and meet a node's empty pool with the 26th:
            // 24 preloaded, 48 in all, so the clients' inserts link and answer Full.
            point(
                "sweep-nodes-64",
                Preset {
                    memory_nodes: 64,
                    keys: 48,
                    preload: 24,
                    ops_per_client: 10,
                    mix: Mix { search: 30, insert: 40, update: 5, delete: 25, scan: 0 },
                    required_counters: &[OVERFLOW_LINKED, FULL, DELETE_MOVED],
                    step_limit: 2_000_000,
                    ..base.clone()
                },
                ClusterOptions { slots_per_bucket: 1, overflow_percent: 100, ..cluster_checking_options(64, 64) },
            ),
            // The largest KV block a slot names (255 units: 8-byte keys, 16,296-byte values),
            // in chunks of 64 KiB, the smallest validate accepts for it (four blocks).
            point(
                "sweep-block-max",
                Preset { value_bytes: 16_296, step_limit: 20_000_000, ..base.clone() },
                ClusterOptions { value_bytes: 16_296, chunk_bytes: 1 << 16, ..one.clone() },
            ),
            // The smallest chunk validate accepts for 2-unit blocks (512 bytes, four blocks): a
            // compute node fetches a new chunk every few writes, before it locks the chain.
            point("sweep-chunk-min", base.clone(), ClusterOptions { chunk_bytes: 512, ..one.clone() }),
            // One attempt per operation: a writer that finds the chain locked, or a search that
            // sees a move under way or a changed version, gives up (an error of unknown effect).
            point(
                "sweep-retries-1",
                Preset { required_counters: &[DELETE_MOVED, Counters::LOCK_FAILURES], ..base.clone() },
                ClusterOptions { max_retries: 1, ..one.clone() },
            ),
            // Long runs on one chain: 4 clients x 20 operations on 8 keys.
            point(
                "sweep-long",
                Preset { clients: 4, ops_per_client: 20, step_limit: 2_000_000, ..base.clone() },
                one.clone(),
            ),
            // Long runs with the paper's 8-slot buckets (header and version copy in different
            // units): 3 clients x 25 operations on 12 keys, 7 preloaded.
            point(
                "sweep-long-wide",
                Preset {
                    ops_per_client: 25,
                    keys: 12,
                    preload: 7,
                    required_counters: &[OVERFLOW_LINKED, DELETE_MOVED, SEARCH_TORN_VERSION],
                    step_limit: 2_000_000,
                    ..base
                },
                ClusterOptions { slots_per_bucket: 8, ..one },
            ),
        ]
    }
}

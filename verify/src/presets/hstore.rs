//! Checking presets of HStore (`dmkit_indexes::hstore`).
//!
//! A two-bucket table with two slots a bucket and one-bit fingerprints, so that a handful of
//! keys makes chains, overflow buckets and fingerprint collisions the HTS must resolve by
//! READing keys; two HTS workers and two SLS partitions, so that log syncs from both workers
//! interleave and a scan's shares are merged; a lease of a few microseconds, so that freed
//! blocks are reused within a schedule (and a read that outlives its lease restarts). One
//! compute node: blocks another node carved are never reused (see the module doc).

use crate::harness::{Checked, Mix, Preset, be_key};
use dmkit_indexes::hstore::{HStore, HStoreOptions};
use dmkit_sim::{Faults, NodeCrash};

/// The options every preset starts from.
pub fn hstore_checking_options() -> HStoreOptions {
    HStoreOptions {
        buckets: 2,
        slots: 2,
        fp_bits: 1,
        hts_workers: 2,
        sls_partitions: 2,
        rpc_threads: 2,
        pool_buckets: 16,
        max_key_bytes: 8,
        max_value_bytes: 64,
        lease_ns: Some(12_000),
        max_retries: 500,
        backoff_ns: 1_000,
        // An explored run lasts a few milliseconds of simulated time: clients must try a
        // restarted HTS's table again within it, or the crash-hts preset never reaches the
        // rebuilt table (the hardware default, 5 ms, outlasts the run).
        down_probe_ns: 200_000,
        chunk_bytes: 1 << 16,
        ..HStoreOptions::default()
    }
}

impl Checked for HStore {
    fn presets() -> Vec<(Preset, HStoreOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 1,
            memory_nodes: 1,
            clients: 3,
            ops_per_client: 6,
            keys: 6,
            key_of: be_key,
            value_bytes: 8,
            preload: 3,
            mix: Mix { search: 30, insert: 25, update: 15, delete: 10, scan: 20 },
            scan_limit: 4,
            required_counters: &[
                "batch_shared",
                "scan_drained",
                "scan_commit_wait",
                "chain_hop",
                "fp_false_positive",
                "hts_verify_reads",
                "hts_overflow_buckets",
                "blocks_reused",
            ],
            step_limit: 1_000_000,
        };
        vec![
            (base.clone(), hstore_checking_options()),
            // Writes only, to one chain: batches, verification and overflow under contention.
            (
                Preset {
                    name: "writes",
                    clients: 4,
                    keys: 5,
                    preload: 2,
                    mix: Mix { search: 20, insert: 40, update: 20, delete: 20, scan: 0 },
                    required_counters: &["batch_shared", "hts_verify_reads", "hts_overflow_buckets", "blocks_reused"],
                    ..base.clone()
                },
                hstore_checking_options(),
            ),
            // The HTS crashes and restarts while clients run: writes are retried and answered
            // exactly once, GETs go to the SLS meanwhile, the table is rebuilt from it.
            (
                Preset {
                    name: "crash-hts",
                    mix: Mix { search: 30, insert: 30, update: 15, delete: 10, scan: 15 },
                    required_counters: &["hts_recoveries", "write_retry", "degraded_get"],
                    step_limit: 2_000_000,
                    ..base.clone()
                },
                hstore_checking_options(),
            ),
            // crash-hts with a read lease longer than a recovery (2 ms against the 5 µs outage):
            // a GET that spans the crash is not restarted by its lease, so it must not mix
            // what it read of the old incarnation with what it reads of the new one. Failed
            // before verbs carried the incarnation they were posted to (a fenced bucket READ
            // posted before the crash executed on the empty restarted table).
            (
                Preset {
                    name: "crash-hts-long-lease",
                    mix: Mix { search: 30, insert: 30, update: 15, delete: 10, scan: 15 },
                    required_counters: &["hts_recoveries", "write_retry", "degraded_get"],
                    step_limit: 2_000_000,
                    ..base.clone()
                },
                HStoreOptions { lease_ns: Some(2_000_000), ..hstore_checking_options() },
            ),
            // The SLS crashes and restarts: it rebuilds from the table and the blocks' keys
            // while writes and scans are blocked.
            (
                Preset {
                    name: "crash-sls",
                    mix: Mix { search: 30, insert: 30, update: 15, delete: 10, scan: 15 },
                    required_counters: &["sls_recoveries", "write_blocked"],
                    step_limit: 2_000_000,
                    ..base.clone()
                },
                hstore_checking_options(),
            ),
            // One chain (a head bucket and the pool's one overflow bucket, two slots each) for
            // six keys under a write-heavy mix with deletes: the chain fills and empties, and a
            // batch may carry an upsert answered `Full` ahead of another that takes a slot.
            // Failed before the HTS counted a new bucket's slots only once it was reserved: the
            // upsert after one refused a bucket went out with no slot to take, and the SLS
            // inserted what the HTS could not (found with `dmkit run --workload delete-heavy`).
            (
                Preset {
                    name: "full",
                    keys: 6,
                    preload: 3,
                    mix: Mix { search: 15, insert: 45, update: 10, delete: 30, scan: 0 },
                    required_counters: &["hts_full", "batch_shared", "hts_overflow_buckets"],
                    ..base.clone()
                },
                HStoreOptions { buckets: 1, hts_workers: 1, pool_buckets: 1, ..hstore_checking_options() },
            ),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 4,
                    preload: 2,
                    required_counters: &[],
                    step_limit: 300_000,
                    ..base
                },
                hstore_checking_options(),
            ),
        ]
    }

    fn faults(preset: &str, o: &HStoreOptions) -> Faults {
        // The crash's time does not matter in a checking run (the explorer picks when it
        // happens); the restart follows it by a few microseconds of virtual time.
        let crash = |node: dmkit_rdma::NodeId| Faults {
            node_crashes: vec![NodeCrash { node: node.0, at_ns: 1_000_000, restart_at_ns: Some(1_005_000) }],
            ..Faults::default()
        };
        match preset {
            "crash-hts" | "crash-hts-long-lease" => crash(o.hts_node()),
            "crash-sls" => crash(o.sls_node()),
            _ => Faults::default(),
        }
    }

    fn configure(options: &mut HStoreOptions, config: &str) -> Result<(), String> {
        options.configure(config)
    }
}

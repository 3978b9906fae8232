//! Checking presets of HStore (`dmkit_indexes::hstore`).
//!
//! A two-bucket table with two slots a bucket and one-bit fingerprints, so that a handful of
//! keys makes chains, overflow buckets and fingerprint collisions the HTS must resolve by
//! READing keys; two HTS workers and two SLS partitions, so that log syncs from both workers
//! interleave and a scan's shares are merged; a lease of a few microseconds, so that freed
//! blocks are reused within a schedule (and a read that outlives its lease restarts). One
//! compute node: blocks another node carved are never reused (see the module doc).

use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, be_key, point, preset_named, scan_shapes_preset};
use crate::hstore::{
    BATCH_SHARED, BLOCKS_RETIRED, BLOCKS_REUSED, CHAIN_HOP, DEGRADED_GET, FOREIGN_BLOCK_LEAKED, FP_FALSE_POSITIVE,
    HStore, HStoreOptions, HTS_APPLY_RETRIED, HTS_FULL, HTS_LATE_VERIFY, HTS_OVERFLOW_BUCKETS, HTS_RECOVERIES,
    HTS_RECOVERY_FAILED, HTS_RETRY_ANSWERED, HTS_VERIFY_READS, INCARNATION_RECONFIRMED, LEASE_RESTART,
    MESSAGE_OVERSIZED, SCAN_COMMIT_WAIT, SCAN_DRAINED, SCAN_PAGE, SLS_RECOVERIES, SLS_RECOVERY_FAILED,
    TABLE_REBUILDING, WRITE_BLOCKED, WRITE_RETRY, layout, wire,
};

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

/// Key `k` at the longest a block allows (255 bytes): a shared 247-byte prefix, then `k`.
fn long_key(k: u64) -> Vec<u8> {
    let mut key = vec![0x4b; layout::MAX_KEY_BYTES - 8];
    key.extend_from_slice(&k.to_be_bytes());
    key
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
            scan_bounds: ScanBounds::From,
            required_counters: &[
                BATCH_SHARED,
                SCAN_DRAINED,
                SCAN_COMMIT_WAIT,
                CHAIN_HOP,
                FP_FALSE_POSITIVE,
                HTS_VERIFY_READS,
                HTS_OVERFLOW_BUCKETS,
                BLOCKS_REUSED,
            ],
            step_limit: 1_000_000,
            low_client_ids: false,
        };
        vec![
            (base.clone(), hstore_checking_options()),
            // Scans of every shape (`ScanBounds::Shapes`) beside the writes they must order.
            (scan_shapes_preset(&base, true, &[SCAN_DRAINED]), hstore_checking_options()),
            // The default with three READs failing (a transient transport error on a memory
            // node that keeps its memory; the explorer places each): the HTS applies a logged
            // entry again and reads a slot's key at apply time when its verification READ
            // failed. Found the table and the skiplist disagreeing before the HTS re-applied.
            (
                Preset {
                    name: "read-failure",
                    required_counters: &[HTS_APPLY_RETRIED, HTS_LATE_VERIFY, BATCH_SHARED],
                    ..base.clone()
                },
                hstore_checking_options(),
            ),
            // Writes only, to one chain: batches, verification and overflow under contention.
            (
                Preset {
                    name: "writes",
                    clients: 4,
                    keys: 5,
                    preload: 2,
                    mix: Mix { search: 20, insert: 40, update: 20, delete: 20, scan: 0 },
                    required_counters: &[BATCH_SHARED, HTS_VERIFY_READS, HTS_OVERFLOW_BUCKETS, BLOCKS_REUSED],
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
                    required_counters: &[HTS_RECOVERIES, WRITE_RETRY, DEGRADED_GET],
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
                    required_counters: &[HTS_RECOVERIES, WRITE_RETRY, DEGRADED_GET],
                    step_limit: 2_000_000,
                    ..base.clone()
                },
                HStoreOptions { lease_ns: Some(2_000_000), ..hstore_checking_options() },
            ),
            // The longest lease and probe interval the options accept (u64::MAX ns), and an HTS
            // crash: freed blocks are never reused, reads never restart, and a client that found
            // the HTS down sends its GETs to the SLS for the rest of the run. Failed (found by
            // the option sweep) before the client's release time saturated: `now + lease + 1`
            // wrapped to `now`, a freed block was reused at once, and a scan within its
            // (endless) lease READ another write's block.
            (
                Preset {
                    name: "crash-hts-lease-max",
                    mix: Mix { search: 30, insert: 30, update: 15, delete: 10, scan: 15 },
                    required_counters: &[HTS_RECOVERIES, WRITE_RETRY, DEGRADED_GET, BLOCKS_RETIRED],
                    step_limit: 2_000_000,
                    ..base.clone()
                },
                HStoreOptions { lease_ns: Some(u64::MAX), down_probe_ns: u64::MAX, ..hstore_checking_options() },
            ),
            // The SLS crashes and restarts: it rebuilds from the table and the blocks' keys
            // while writes and scans are blocked.
            (
                Preset {
                    name: "crash-sls",
                    mix: Mix { search: 30, insert: 30, update: 15, delete: 10, scan: 15 },
                    required_counters: &[SLS_RECOVERIES, WRITE_BLOCKED],
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
                    required_counters: &[HTS_FULL, BATCH_SHARED, HTS_OVERFLOW_BUCKETS],
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

    fn sweep() -> Vec<(Preset, HStoreOptions)> {
        let (base, o) = Self::presets().swap_remove(0);
        let (writes_preset, writes_options) = preset_named(&Self::presets(), "writes");
        let writes = Mix { search: 25, insert: 40, update: 15, delete: 20, scan: 0 };
        let crashing = Preset { step_limit: 3_000_000, ..base.clone() };
        // The smallest message the options accept for 8-byte keys: one log entry, one item.
        let min_message = (wire::FIXED_BYTES + wire::entry_bytes(8).max(wire::item_bytes(8))) as u32;
        vec![
            // One bucket of one slot: every key after the first goes to an overflow bucket, so
            // GETs and the HTS walk chains as long as the key count, and one-bit fingerprints
            // make every hop's slot a candidate to verify. A 100 µs lease: a walk of the whole
            // chain outlasts the presets' 12 µs, and GETs of its last keys then restarted until
            // their retries ran out (an unknown effect, which checks nothing).
            point(
                "sweep-slots-1-chain",
                Preset {
                    mix: writes,
                    required_counters: &[CHAIN_HOP, HTS_OVERFLOW_BUCKETS, FP_FALSE_POSITIVE, HTS_VERIFY_READS],
                    ..base.clone()
                },
                HStoreOptions { buckets: 1, slots: 1, lease_ns: Some(100_000), ..o.clone() },
            ),
            // Log syncs that the message limit cuts at two entries (the batch limit allows
            // more), under the write-only mix of four clients: the HTS must size its batches by
            // the bytes a message may carry, which the servers now check (a request above the
            // limit is refused, as eRPC cannot send one). Added for the mutation run: the
            // limit bound no preset's batch, and `take_more` sizing against `max + FIXED` went
            // unnoticed.
            point(
                "sweep-message-two-entries",
                Preset { required_counters: &[BATCH_SHARED], ..writes_preset },
                HStoreOptions {
                    max_message_bytes: (wire::FIXED_BYTES + 2 * wire::entry_bytes(8)) as u32,
                    ..writes_options
                },
            ),
            // The hardware bucket (7 slots, 8-bit fingerprints) and one bucket: every key fits
            // the head bucket, a fingerprint names one key, and updates verify their own key.
            point(
                "sweep-slots-7-fp-8",
                Preset { required_counters: &[HTS_VERIFY_READS, BATCH_SHARED, SCAN_DRAINED], ..base.clone() },
                HStoreOptions { buckets: 1, slots: 7, fp_bits: 8, ..o.clone() },
            ),
            // One overflow bucket per worker's pool for one-slot buckets, and an HTS crash: the
            // pools run out (writes answered Full), and the restarted HTS rebuilds the chains
            // into pools that were full before the crash.
            point(
                "sweep-pool-1-crash-hts",
                Preset { mix: writes, required_counters: &[HTS_FULL, HTS_RECOVERIES, WRITE_RETRY], ..crashing.clone() },
                HStoreOptions { slots: 1, pool_buckets: 1, ..o.clone() },
            ),
            // The smallest message the options accept, and an HTS crash: every log sync carries
            // one entry, every scan reply one item (scans page), and the recovering HTS reads
            // the skiplists and the clients' records one item a page.
            point(
                "sweep-message-min-crash-hts",
                Preset { required_counters: &[SCAN_PAGE, HTS_RECOVERIES, WRITE_RETRY], ..crashing.clone() },
                HStoreOptions { max_message_bytes: min_message, ..o.clone() },
            ),
            // Keys of the most bytes a block allows (255, sharing a 247-byte prefix) in the
            // smallest message that carries one, and an SLS crash: the recovering SLS READs each
            // block's key at its longest, scans page one item at a time.
            point(
                "sweep-key-max-crash-sls",
                Preset { key_of: long_key, required_counters: &[SCAN_PAGE, SLS_RECOVERIES], ..crashing.clone() },
                HStoreOptions {
                    max_key_bytes: layout::MAX_KEY_BYTES as u32,
                    max_message_bytes: (wire::FIXED_BYTES + wire::entry_bytes(layout::MAX_KEY_BYTES)) as u32,
                    ..o.clone()
                },
            ),
            // Batches of one entry and an SLS crash under a write-heavy mix: every write is its
            // own log sync, so the crash meets syncs in flight that are refused or fail.
            point(
                "sweep-batch-1-crash-sls",
                Preset {
                    clients: 4,
                    mix: writes,
                    required_counters: &[SLS_RECOVERIES, WRITE_BLOCKED, HTS_OVERFLOW_BUCKETS],
                    ..crashing.clone()
                },
                HStoreOptions { batch_entries: 1, ..o.clone() },
            ),
            // A lease of a few round trips (5 µs) and the smallest chunk the allocator accepts
            // (every block fetched whole): reads outlive their lease and restart, blocks freed
            // 5 µs after their swap are reused under readers that took their address earlier.
            // Not required: `skipped_bad_block` (a reused block READ past the lease is nearly
            // always another key's complete block, counted as `fp_false_positive`; a torn one
            // needs the READ to overlap the reuse's WRITE, which 15 s did not reach).
            point(
                "sweep-lease-short",
                Preset {
                    clients: 4,
                    required_counters: &[LEASE_RESTART, BLOCKS_REUSED, FP_FALSE_POSITIVE],
                    ..base.clone()
                },
                HStoreOptions { lease_ns: Some(5_000), chunk_bytes: 32, ..o.clone() },
            ),
            // Retry at once: a 1 ns back-off and probe interval, and an HTS crash: clients come
            // back to the dead and the rebuilding HTS as often as they can, so GETs meet the
            // ready word at 0 and a rebuilt table's new incarnation.
            point(
                "sweep-retry-at-once-crash-hts",
                Preset {
                    required_counters: &[HTS_RECOVERIES, WRITE_RETRY, TABLE_REBUILDING, INCARNATION_RECONFIRMED],
                    ..crashing.clone()
                },
                HStoreOptions { backoff_ns: 1, down_probe_ns: 1, ..o.clone() },
            ),
            // HStore (sync), the configuration no preset uses, with one RPC thread per server and
            // an SLS crash: log syncs are acked only once applied, so the crash meets deferred
            // acks, and one thread serves every call.
            point(
                "sweep-sync-rpc-1-crash-sls",
                Preset { required_counters: &[SLS_RECOVERIES, WRITE_BLOCKED, BATCH_SHARED], ..crashing.clone() },
                {
                    let mut sync = HStoreOptions { rpc_threads: 1, ..o.clone() };
                    sync.configure("hstore-sync").expect("a named configuration");
                    sync
                },
            ),
            // One of each server thread, each on its own core, and an HTS crash: one worker owns
            // every chain, one partition every key, one RPC thread every call.
            point(
                "sweep-threads-1-crash-hts",
                Preset { required_counters: &[HTS_RECOVERIES, WRITE_RETRY, DEGRADED_GET], ..crashing.clone() },
                HStoreOptions { hts_workers: 1, sls_partitions: 1, rpc_threads: 1, hyperthreads: false, ..o.clone() },
            ),
            // Wide: four HTS workers for two buckets (idle workers), eight SLS partitions for six
            // keys (empty shares merged), four memory nodes and two compute nodes (blocks freed
            // by another node's client are leaked, each node confirms the rebuilt table), and
            // an HTS crash.
            point(
                "sweep-wide-crash-hts",
                Preset {
                    compute_nodes: 2,
                    memory_nodes: 4,
                    required_counters: &[HTS_RECOVERIES, FOREIGN_BLOCK_LEAKED, INCARNATION_RECONFIRMED, SCAN_DRAINED],
                    ..crashing.clone()
                },
                HStoreOptions { hts_workers: 4, sls_partitions: 8, memory_nodes: 4, ..o.clone() },
            ),
            // Long runs: 4 clients x 20 operations, so that rare combinations are reached, on
            // chains of two one-slot buckets (six keys fill them: some upserts answer Full).
            point(
                "sweep-long",
                Preset {
                    clients: 4,
                    ops_per_client: 20,
                    required_counters: &[BATCH_SHARED, CHAIN_HOP, BLOCKS_REUSED, SCAN_DRAINED, HTS_FULL],
                    step_limit: 8_000_000,
                    ..base.clone()
                },
                HStoreOptions { slots: 1, pool_buckets: 1, ..o.clone() },
            ),
            // Long runs with an HTS crash: 4 clients x 15 operations around one crash.
            point(
                "sweep-long-crash-hts",
                Preset {
                    clients: 4,
                    ops_per_client: 15,
                    required_counters: &[HTS_RECOVERIES, WRITE_RETRY, HTS_RETRY_ANSWERED, DEGRADED_GET],
                    step_limit: 8_000_000,
                    ..base
                },
                o,
            ),
        ]
    }

    /// A server gives a recovery up only when its peer is down too; the checking presets crash
    /// one server at a time. A refused oversized request is a sender's bug: the HTS would
    /// answer its batch `Blocked` and the clients would retry until a smaller batch went
    /// through, so only this count shows it.
    fn abandoned() -> &'static [&'static str] {
        &[HTS_RECOVERY_FAILED, SLS_RECOVERY_FAILED, MESSAGE_OVERSIZED]
    }

    fn gives_up_by_design(preset: &str, _: &HStoreOptions) -> bool {
        // A GET restarts whenever its read lease ran out before it finished (V3's fix). With
        // the checking presets' 12 us lease, one HTS worker and one bucket (`full`), or a 5 us
        // lease (`sweep-lease-short`), a GET that keeps meeting queued writes can restart until
        // its bound: measured in random mode, 500 restarts (`lease_restart` ~1e5 in 5 s). A
        // liveness limit of a lease shorter than a contended GET, not a safety property.
        matches!(preset, "full" | "sweep-lease-short")
    }

    fn faults(preset: &str, o: &HStoreOptions) -> FaultPlan {
        // The crash's time does not matter in a checking run (the explorer picks when it
        // happens); the restart follows it by a few microseconds of virtual time.
        // By name: the presets `crash-hts*` and `crash-sls`, and sweep points `sweep-*-crash-hts*`
        // and `sweep-*-crash-sls*`.
        if preset.contains("crash-hts") {
            FaultPlan::crash(o.hts_node())
        } else if preset.contains("crash-sls") {
            FaultPlan::crash(o.sls_node())
        } else if preset == "read-failure" {
            FaultPlan::read_failures(1, 3)
        } else {
            FaultPlan::default()
        }
    }

    fn configure(options: &mut HStoreOptions, config: &str) -> Result<(), String> {
        options.configure(config)
    }
}

//! # HStore (SYSTOR '23): a hash table and a skiplist on two index servers, values in DM
//!
//! Digest: `shared/digests/hstore.md`. The paper's code was never published; this follows the
//! paper and the digest's recommendations (\[R\]), and names every deviation below.
//!
//! ## The pieces
//!
//! - **Hash-table server (HTS)**, a service on server node 0 ([`hts`]): a chained hash table of
//!   64-byte buckets (7 slots `[fp | units | addr]` and `next`) in its registered memory, read
//!   one-sided by clients and changed only by its CPU, with local CAS. Its RPC threads append
//!   writes to one log per worker (chosen by `bucket mod workers`, so every chain has one
//!   writer); each worker ships a batch of its log to the SLS, waits for the ack, applies the
//!   batch to the table and replies to the clients (deferred replies: the RPC threads never
//!   wait). It tells an update from an insert with only a fingerprint by READing the candidate
//!   blocks' keys from the memory pool, overlapped with the log sync (digest decision 2).
//! - **Skiplist server (SLS)**, a service on server node 1 ([`sls`]): the skiplist split into
//!   partitions by key hash, one worker each. Its RPC threads append shipped entries to the
//!   partitions' logs and ack at once (asynchronous skiplist maintenance); the workers apply
//!   them in the background and, before any scan or lookup, drain their log up to the tail the
//!   task arrived at (digest decision 23). HStore (sync), the paper's own baseline, acks a log
//!   sync only when its entries are applied (`--config hstore-sync`).
//! - **Clients** ([`client`]): GET reads the bucket and then the block, one-sided (2 round trips);
//!   PUT, UPDATE and DELETE write the block to the memory pool first (data before index), then
//!   call the HTS, which returns the old block for the client to free; SCAN calls the SLS, which
//!   merges its partitions' answers, then READs the values one after another (the paper's
//!   1 + n round trips).
//!
//! ## The digest's consistency gaps: closed by default, open in `faithful`
//!
//! | gap | the paper's behaviour (`faithful`) | default (`hstore`) | plant | scenario (`verify/tests/hstore.rs`) |
//! |---|---|---|---|---|
//! | V1: a scan sees a write before a GET does | SLS scans and lookups see every applied log entry | they wait until every entry they drained is committed (applied to the hash table) | `no-commit-wait` | `v1_a_scan_sees_a_write_before_a_get_does` |
//! | V2: a failed write becomes visible after an HTS crash | a write whose call fails is reported failed, yet the rebuilt table holds it | clients retry with the same request id until acknowledged, and the HTS answers a retry from the write's recorded effect (exactly once) | `no-retry`, `no-dedup` | `v2_a_failed_write_becomes_visible_after_an_hts_crash` |
//! | V3: an old block freed while a reader holds its address | a freed block is reused at once | a lease: a read whose block READs end later than `lease_ns` after it started restarts, and a freed block is reused only `lease_ns` after the HTS swapped it out | `no-grace` | `v3_a_freed_block_reused_under_a_reader` |
//!
//! **Commits (V1).** An SLS entry is committed once the HTS applied it. The HTS carries each
//! worker's commit point on its next log sync, or sends it (`Commit`, fire and forget) when its
//! log runs empty. A scan or lookup that drained an entry past the commit point it knows asks
//! the HTS (`CommitQuery`), which answers when its commit point passes the entry — or at once
//! that the asking incarnation is gone; a failed call means the HTS crashed. Entries of a dead
//! incarnation count as committed: the table that replaces it is rebuilt from the skiplists,
//! entries included, and no GET can read the dead table. No timer is involved, so the waits
//! behave the same under the schedule explorer (a first version used a timeout and a probe;
//! PCT starved the HTS and the probe loop jumped virtual time past every read's lease).
//!
//! **The lease (V3).** A read takes a block's address no earlier than its start `t0` and READs
//! the block no later than its end; a block's address can only be freed after the HTS swapped
//! it out of the table, which a read that saw it began before. So a read that ends by
//! `t0 + lease_ns` finished before any reuse of a block freed `lease_ns` after the swap. A read
//! that ends later starts again (`lease_restart`); a scan keeps the pairs it already checked and
//! goes on from its last key. On hardware the clients' clocks must agree to within a margin
//! the lease absorbs; the simulator has one clock.
//!
//! **What is not a protection here.** The digest's A2 (write an overflow bucket before `next`
//! links it) is kept, but removing it is harmless in this design: overflow buckets come from
//! never-used, zeroed pool memory and are never unlinked, so a GET that follows `next` too early
//! sees an empty bucket, which linearizes before the insert that is linking it (an earlier
//! version had the plant; the checker ran clean on it for 20 s and it was dropped).
//!
//! **A spent pool (found by `dmkit run --workload delete-heavy`).** A batch's upserts are
//! planned before its overflow buckets are reserved, and the plan counted a new bucket's slots
//! as soon as an upsert needed one: with the pool spent, that upsert was answered `Full`, and
//! the chain's next upsert in the batch went out counting on a slot that did not exist, so the
//! SLS inserted it and the HTS could not (S9; its client saw corruption). Slots are now counted
//! as entries are kept, a new bucket's only once it is reserved; the `full` checker preset
//! (one chain, a one-bucket pool) found the old rule at its ninth schedule.
//!
//! ## Recovery
//!
//! A server that restarts (the simulator's crash-stop) comes back empty. It asks its peer's
//! state, and if the peer was serving before it started, rebuilds from it:
//! - **HTS**: the SLS drains its logs (entries of the dead incarnation count as committed: the
//!   rebuilt table holds them) and streams every partition's (key, block) pairs and its record
//!   of each client's last write; the HTS fills a fresh table and publishes its ready word.
//!   Meanwhile writes are answered `Blocked` and GETs go to the SLS (degraded mode).
//! - **SLS**: it asks the HTS to stop applying writes (`PeerRecovering`: writes are blocked
//!   until the SLS is back), READs the whole table one-sided, READs each block's key from the
//!   memory pool, and fills fresh skiplists. GETs are unaffected.
//! - Both at once (the memory-pool sweep of the digest's decision 16) is **not built**: both
//!   servers wait for an `Init` that never comes, and writes give up after their retries. A
//!   recovery that fails (its peer crashes too) is counted (`hts_recovery_failed`,
//!   `sls_recovery_failed`) and not retried.
//! - A server tells a restart from its first start by time: its peer was serving before it
//!   started. That holds in the simulator, whose clock is global; on hardware each process has
//!   its own clock, and a server process restarted by hand would wait for an `Init` (server
//!   crash-restart is not built on hardware).
//!
//! Clients learn that the HTS is down when a READ fails (`NodeDown`) or its ready word is 0
//! (a restarted, empty HTS), and then send GETs to the SLS for `down_probe_ns` before trying
//! the table again.
//!
//! ## Deviations (each a decision the paper leaves open, or a simulator matter)
//!
//! - Every bucket READ is a doorbell batch with an 8-byte READ of the ready word: a restarted
//!   HTS reuses its node id, and an empty table must not answer "absent". On hardware the
//!   reconnection to a new incarnation would do this job; the extra verb costs no round trip.
//!   The two READs may sample in either order, so a compute node confirms each new incarnation
//!   once with the bucket READ fenced behind the word (one more round trip per compute node
//!   and incarnation; plant `no-ready-fence`, found on the `crash-hts` preset).
//! - The block check is the low 32 bits of SMART's CRC-64 (the digest suggests CRC-32C).
//! - A block freed by a client of another compute node cannot be returned to that node's
//!   allocator; it is leaked and counted (`foreign_block_leaked`). The paper runs every client
//!   on one machine.
//! - The paper runs one RPC thread and one worker on each of 4 hyper-threaded cores; with
//!   `hyperthreads` (the default) a worker and an RPC thread share one simulated CPU and never
//!   compute at once — a hyper-threaded core does somewhat better than that.
//! - The HTS's block-key verification READs are posted right after its log sync and awaited
//!   with it; each client records only its last write's effect (clients run one operation at a
//!   time, so a retry is always of the last one).
//! - The skiplist is a real skiplist (p = 1/4, 32 levels) in the SLS's process memory; its CPU
//!   cost is a dependent DRAM access (`cache_lookup_level_ns`) per node visited in a level of
//!   more than 2^16 nodes, and a cached comparison (`node_search_ns_per_entry`) in the sparse
//!   upper levels ([`skiplist::CACHED_NODES`], an assumed cache share). Charging every visit
//!   as a miss made the SLS 2.7x slower at degraded GETs (1.47 against 3.95 Mops/s at 32
//!   clients, 1 M keys).

pub mod client;
pub mod config;
pub mod hts;
pub mod invariants;
pub mod layout;
pub mod presets;
pub mod skiplist;
pub mod sls;
pub mod wire;

use crate::common::chunk::LocalChunkAllocator;
use crate::common::primitive::{Mutex, lock};
use crate::registry::{self, RunShape};
use crate::{IndexError, IndexKind, InvariantReport, Limits, PlantedBug, RaceHandler, Servers};
use client::HStoreHandle;
pub use config::{CONFIGS, HStoreOptions};
use dmkit_rdma::service::ServiceHost;
use dmkit_rdma::{Caps, Client, MemoryView, RemoteAddr};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub const NO_COMMIT_WAIT: PlantedBug = PlantedBug {
    name: "no-commit-wait",
    description: "SLS scans and lookups return entries the HTS has not applied yet (V1): a scan sees a write, a later GET does not",
};
pub const NO_GRACE: PlantedBug = PlantedBug {
    name: "no-grace",
    description: "freed blocks are reused at once and reads have no lease (V3): a GET reads another write's block through a stale address",
};
pub const NO_RETRY: PlantedBug = PlantedBug {
    name: "no-retry",
    description: "a write whose call fails is reported failed (V2), though the SLS logged it and the rebuilt table holds it",
};
pub const NO_DEDUP: PlantedBug = PlantedBug {
    name: "no-dedup",
    description: "a retried write is applied again, not answered from its first application: its `existed` is wrong",
};
pub const APPLY_BEFORE_SYNC: PlantedBug = PlantedBug {
    name: "apply-before-sync",
    description: "the HTS applies a batch before the SLS acknowledged it (S3): a GET sees a write a later scan misses",
};
pub const PIPELINED_SYNC: PlantedBug = PlantedBug {
    name: "pipelined-sync",
    description: "an HTS worker ships its next batch before the last one was acknowledged (A5): the SLS may log them out of order",
};
pub const NO_WRITE_WAIT: PlantedBug = PlantedBug {
    name: "no-write-wait",
    description: "the client calls the HTS before its block WRITE completed (A3): the table points at a block not yet written",
};
pub const NO_READY_FENCE: PlantedBug = PlantedBug {
    name: "no-ready-fence",
    description: "a GET trusts a table incarnation it has not seen complete on an unfenced batch: its bucket READ may sample a rebuilding table before the ready word",
};
pub const FP_ONLY: PlantedBug = PlantedBug {
    name: "fp-only",
    description: "the HTS takes a fingerprint match for the key without reading the block's key: an insert overwrites another key",
};
pub const NO_APPLY_RETRY: PlantedBug = PlantedBug {
    name: "no-apply-retry",
    description: "a logged entry whose apply met a READ that timed out is answered with the failure instead of applied again: the skiplist keeps a write the table lacks",
};
/// Every protection of the default protocol, each removable.
pub const PLANTS: [PlantedBug; 10] = [
    NO_COMMIT_WAIT,
    NO_GRACE,
    NO_RETRY,
    NO_DEDUP,
    APPLY_BEFORE_SYNC,
    PIPELINED_SYNC,
    NO_WRITE_WAIT,
    NO_READY_FENCE,
    FP_ONLY,
    NO_APPLY_RETRY,
];

// The events HStore's clients count besides its race handlers', and its node and server
// counters (the servers' read from their state by [`server_counters`]).
/// A GET followed a bucket chain to its next bucket.
pub const CHAIN_HOP: &str = "chain_hop";
/// A GET's fingerprint match whose block holds another key.
pub const FP_FALSE_POSITIVE: &str = "fp_false_positive";
/// A retired block another compute node carved, leaked instead of freed.
pub const FOREIGN_BLOCK_LEAKED: &str = "foreign_block_leaked";
/// A block the table no longer points to, given back (after the lease, or at once).
pub const BLOCKS_RETIRED: &str = "blocks_retired";
/// Quarantined blocks released for reuse once their lease ran out (counted by blocks).
pub const BLOCKS_REUSED: &str = "blocks_reused";
/// A write applied in a batch with other writes.
pub const BATCH_SHARED: &str = "batch_shared";
/// A write answered from the record of its first application (a retried request).
pub const RETRY_ANSWERED: &str = "retry_answered";
/// A scan call the SLS answered with items.
pub const SCAN_RPC: &str = "scan_rpc";
/// A scan call whose SLS partitions waited for the HTS to commit what they drained.
pub const SCAN_COMMIT_WAIT: &str = "scan_commit_wait";
/// A scan that went on to its next page of items.
pub const SCAN_PAGE: &str = "scan_page";
/// Timing: GETs (the operations the `get_*_ns` counters sum over).
pub const GET_OPS: &str = "get_ops";
/// Timing: nanoseconds of virtual time GETs took, summed.
pub const GET_LATENCY_NS: &str = "get_latency_ns";
/// Timing: nanoseconds GETs spent in the index (bucket READs, a degraded GET's call), summed.
pub const GET_INDEX_NS: &str = "get_index_ns";
/// Timing: nanoseconds GETs spent reading KV blocks, summed.
pub const GET_KV_NS: &str = "get_kv_ns";
/// Timing: PUTs and UPDATEs applied in a batch (the operations the `put_*_ns` counters sum over).
pub const PUT_OPS: &str = "put_ops";
/// Timing: nanoseconds of virtual time those writes took, summed.
pub const PUT_LATENCY_NS: &str = "put_latency_ns";
/// Timing: nanoseconds those writes spent writing their KV blocks, summed.
pub const PUT_KV_NS: &str = "put_kv_ns";
/// Timing: nanoseconds those writes' calls spent outside the server (network), summed.
pub const PUT_RPC_NS: &str = "put_rpc_ns";
/// Timing: nanoseconds those writes waited in the HTS's queue, summed.
pub const PUT_QUEUE_NS: &str = "put_queue_ns";
/// Timing: nanoseconds those writes' batches spent on the log sync, summed.
pub const PUT_SYNC_NS: &str = "put_sync_ns";
/// Timing: nanoseconds the HTS spent applying those writes to the table, summed.
pub const PUT_INDEX_NS: &str = "put_index_ns";
/// Timing: scans (the operations the `scan_*_ns` counters sum over).
pub const SCAN_OPS: &str = "scan_ops";
/// Timing: nanoseconds of virtual time scans took, summed.
pub const SCAN_LATENCY_NS: &str = "scan_latency_ns";
/// Timing: nanoseconds scans spent in SLS calls, summed.
pub const SCAN_INDEX_NS: &str = "scan_index_ns";
/// Timing: nanoseconds scans spent reading KV blocks, summed.
pub const SCAN_KV_NS: &str = "scan_kv_ns";
/// Node counter: blocks waiting out their lease before reuse.
pub const QUARANTINED_BLOCKS: &str = "quarantined_blocks";
/// Server counter: recoveries a restarted HTS finished.
pub const HTS_RECOVERIES: &str = "hts_recoveries";
/// Server counter: items a restarted HTS's recoveries put back in its table.
pub const HTS_RECOVERED_ITEMS: &str = "hts_recovered_items";
/// Server counter: nanoseconds the HTS's recoveries took, summed.
pub const HTS_RECOVERY_NS: &str = "hts_recovery_ns";
/// Server counter: overflow buckets the HTS linked to full chains.
pub const HTS_OVERFLOW_BUCKETS: &str = "hts_overflow_buckets";
/// Server counter: writes the HTS answered `Full`.
pub const HTS_FULL: &str = "hts_full";
/// Server counter: log syncs (batches) the HTS shipped to the SLS.
pub const HTS_LOG_SYNCS: &str = "hts_log_syncs";
/// Server counter: log entries the HTS shipped to the SLS.
pub const HTS_ENTRIES_SHIPPED: &str = "hts_entries_shipped";
/// Server counter: the largest batch the HTS shipped (a maximum, not a sum).
pub const HTS_BATCH_MAX: &str = "hts_batch_max";
/// Server counter: block key READs the HTS made to verify fingerprint matches.
pub const HTS_VERIFY_READS: &str = "hts_verify_reads";
/// Server counter: entries whose apply failed with an error.
pub const HTS_APPLY_ERRORS: &str = "hts_apply_errors";
/// Server counter: commit messages the HTS sent the SLS.
pub const HTS_COMMIT_MESSAGES: &str = "hts_commit_messages";
/// Server counter: fingerprint matches whose block holds another key (HTS).
pub const HTS_FP_FALSE_POSITIVE: &str = "hts_fp_false_positive";
/// Server counter: HTS incarnations the SLS learnt were dead.
pub const SLS_INCARNATIONS_DEAD: &str = "sls_incarnations_dead";
/// Server counter: log syncs the SLS accepted.
pub const SLS_LOG_SYNCS: &str = "sls_log_syncs";
/// Server counter: new log entries the SLS accepted.
pub const SLS_ENTRIES_LOGGED: &str = "sls_entries_logged";
/// Server counter: scans the SLS served.
pub const SLS_SCANS: &str = "sls_scans";
/// Server counter: GETs the SLS served (degraded mode).
pub const SLS_GETS: &str = "sls_gets";
/// Server counter: log entries the SLS applied to its skiplists.
pub const SLS_ENTRIES_APPLIED: &str = "sls_entries_applied";
/// Server counter: commit queries to the HTS that failed.
pub const SLS_COMMIT_QUERY_ERRORS: &str = "sls_commit_query_errors";
/// Server counter: SLS scan pages that first applied log entries that arrived before them.
pub const SLS_SCANS_DRAINED: &str = "sls_scans_drained";
/// Server counter: SLS GETs that waited for the HTS to commit.
pub const SLS_GETS_WAITED: &str = "sls_gets_waited";
/// Server counter: pages of a partition dump the SLS sent a recovering HTS.
pub const SLS_DUMP_PAGES: &str = "sls_dump_pages";
/// Server counter: recoveries a restarted SLS finished.
pub const SLS_RECOVERIES: &str = "sls_recoveries";
/// Server counter: items a restarted SLS's recoveries put back.
pub const SLS_RECOVERED_ITEMS: &str = "sls_recovered_items";
/// Server counter: nanoseconds the SLS's recoveries took, summed.
pub const SLS_RECOVERY_NS: &str = "sls_recovery_ns";

// Race handlers: the branches that exist because of a concurrent client, a server's crash or
// the servers' asynchrony, each by the event that counts it (client events, and the servers'
// read from their state by [`server_counters`]).

/// A read outlived its lease (V3): a block it took the address of may have been reused.
pub const LEASE_RESTART: &str = "lease_restart";
/// A block READ after the lease ran out found no complete block of its key (reused or torn).
pub const SKIPPED_BAD_BLOCK: &str = "skipped_bad_block";
/// A compute node confirms a table incarnation it has not seen complete with a fenced READ
/// (every node does at its first GET: not a race handler by itself, see the next).
pub const INCARNATION_CONFIRMED: &str = "incarnation_confirmed";
/// The confirmation of a newer incarnation than one the node already trusted: a rebuilt table.
pub const INCARNATION_RECONFIRMED: &str = "incarnation_reconfirmed";
/// A GET following a chain saw the ready word change between two buckets: it starts again.
pub const INCARNATION_RESTART: &str = "incarnation_restart";
/// A GET read a ready word of 0 (a restarted HTS rebuilding its table).
pub const TABLE_REBUILDING: &str = "table_rebuilding";
/// A GET went to the SLS because the HTS was down or rebuilding (degraded mode).
pub const DEGRADED_GET: &str = "degraded_get";
/// A write's call failed (the HTS crashed): retried with the same request id (V2).
pub const WRITE_RETRY: &str = "write_retry";
/// A write was answered `Blocked` (a server recovering): it backs off and tries again.
pub const WRITE_BLOCKED: &str = "write_blocked";
/// A scan's call failed (the SLS crashed): it backs off and tries again.
pub const SCAN_RETRY: &str = "scan_retry";
/// A scan was answered `Blocked` (the SLS recovering): it backs off and tries again.
pub const SCAN_BLOCKED: &str = "scan_blocked";
/// A scan's partitions first applied log entries that arrived before it (decision 23).
pub const SCAN_DRAINED: &str = "scan_drained";
/// A retried write answered from the record of its first application (HTS).
pub const HTS_RETRY_ANSWERED: &str = "hts_retry_answered";
/// A batch whose log sync failed or was refused, answered `Blocked` and applied nowhere (HTS).
pub const HTS_BATCHES_BLOCKED: &str = "hts_batches_blocked";
/// A worker took an entry after the HTS stopped serving (the SLS began recovering) (HTS).
pub const HTS_ENTRY_BLOCKED: &str = "hts_entry_blocked";
/// A recovering SLS's stop request waited for the HTS's batches in flight (HTS).
pub const HTS_PEER_RECOVERY_WAITED: &str = "hts_peer_recovery_waited";
/// A slot whose block key was not READ when the batch was planned, READ at apply (HTS).
pub const HTS_LATE_VERIFY: &str = "hts_late_verify";
/// A logged entry's apply hit a verb that timed out and was applied again (HTS).
pub const HTS_APPLY_RETRIED: &str = "hts_apply_retried";
/// An SLS read waited for the HTS to commit what it drained (V1) (SLS).
pub const SLS_COMMIT_QUERIES: &str = "sls_commit_queries";
/// An SLS commit wait found the HTS incarnation it waited on dead (SLS).
pub const SLS_COMMIT_DEAD: &str = "sls_commit_dead";
/// A log sync from an HTS incarnation already known dead, refused (SLS).
pub const SLS_DEAD_LOG_SYNC: &str = "sls_dead_log_sync";
/// A client's write applied after a later write of the same client (another partition): the
/// client's record keeps the later one (SLS).
pub const SLS_DEDUP_OUT_OF_ORDER: &str = "sls_dedup_out_of_order";

const RACE_HANDLERS: [RaceHandler; 21] = [
    RaceHandler {
        event: LEASE_RESTART,
        race: "a read took a block's address and READ it more than lease_ns later: the block may have been freed and reused since, so it starts again (V3)",
    },
    RaceHandler {
        event: SKIPPED_BAD_BLOCK,
        race: "a block READ past the lease found another key's or a torn block (reused under the reader): skipped, and the read restarts",
    },
    RaceHandler {
        event: INCARNATION_RECONFIRMED,
        race: "a node meets a rebuilt table (a newer incarnation than it trusted): the batch's bucket READ may have sampled before the ready word, so it reads again fenced (else a GET may read a half-rebuilt table); a count shows the fence ran, not that the READs straddled the word (plant no-ready-fence: found by no preset)",
    },
    RaceHandler {
        event: INCARNATION_RESTART,
        race: "the HTS restarted while a GET followed a chain: buckets of two incarnations must not be mixed, so it starts again",
    },
    RaceHandler {
        event: TABLE_REBUILDING,
        race: "a GET read a ready word of 0 (a restarted HTS still rebuilding): an empty table must not answer absent, so it goes to the SLS",
    },
    RaceHandler {
        event: DEGRADED_GET,
        race: "the HTS is down or rebuilding: GETs go to the SLS until it is probed again",
    },
    RaceHandler {
        event: WRITE_RETRY,
        race: "a write's call to the HTS failed (crash): the SLS may hold it, so it is retried with the same request id until acknowledged (V2)",
    },
    RaceHandler {
        event: WRITE_BLOCKED,
        race: "a write reached a server that is recovering (or its batch's log sync failed): it backs off and tries again",
    },
    RaceHandler {
        event: SCAN_RETRY,
        race: "a scan's call to the SLS failed (crash): it backs off and asks the restarted SLS",
    },
    RaceHandler {
        event: SCAN_BLOCKED,
        race: "a scan reached an SLS that is rebuilding its skiplists: it backs off and tries again",
    },
    RaceHandler {
        event: SCAN_DRAINED,
        race: "log entries acked before a scan arrived were not yet applied to the skiplists: each partition applies them first (decision 23), else a scan misses an acknowledged write",
    },
    RaceHandler {
        event: HTS_RETRY_ANSWERED,
        race: "a write retried after its call failed had already been applied: answered from its recorded effect, not applied again (exactly once)",
    },
    RaceHandler {
        event: HTS_BATCHES_BLOCKED,
        race: "a batch's log sync failed (the SLS crashed) or was refused (it is recovering): the batch is applied nowhere and its clients answered Blocked, so the servers never disagree",
    },
    RaceHandler {
        event: HTS_ENTRY_BLOCKED,
        race: "the SLS began recovering between a write's arrival and its batch: the worker answers it Blocked instead of changing the table the SLS is reading",
    },
    RaceHandler {
        event: HTS_PEER_RECOVERY_WAITED,
        race: "a recovering SLS asked the HTS to stop while a batch was in flight: the answer waits until it is applied, so the SLS reads a table no batch changes",
    },
    RaceHandler {
        event: HTS_LATE_VERIFY,
        race: "a fingerprint-matching slot's key was not READ with the batch (its verification READ failed, a memory-pool fault no preset injects; or a pipelined batch, plant pipelined-sync): it is READ at apply time, else a fingerprint match would pass for the key",
    },
    RaceHandler {
        event: HTS_APPLY_RETRIED,
        race: "a logged entry's apply met a READ that timed out (a transient transport failure): it applies again, else the skiplist holds a write the table lacks and a scan sees what a GET does not",
    },
    RaceHandler {
        event: SLS_COMMIT_QUERIES,
        race: "an SLS scan or lookup drained entries the HTS has not applied yet: it waits for their commit, else a scan sees a write a later GET does not (V1)",
    },
    RaceHandler {
        event: SLS_COMMIT_DEAD,
        race: "the HTS incarnation an SLS read waits on crashed: its entries count as committed (the rebuilt table holds them), else the wait never ends",
    },
    RaceHandler {
        event: SLS_DEAD_LOG_SYNC,
        race: "a log sync of an HTS incarnation that crashed arrived after its successor spoke: refused, so a dead table's batch is not logged after the rebuild read the skiplists",
    },
    RaceHandler {
        event: SLS_DEDUP_OUT_OF_ORDER,
        race: "a client's two writes to keys of different partitions are applied out of order: its record keeps the later one, else a rebuilt HTS answers a retry with the wrong effect",
    },
];

/// Blocks freed by this compute node, each usable again once its release time passed (V3).
#[derive(Debug, Default)]
pub struct Quarantine {
    blocks: VecDeque<(u64, RemoteAddr, u64)>,
}

/// One compute node's state: the block allocator, freed blocks in quarantine, and whether the
/// HTS was last seen down.
#[derive(Debug)]
pub struct HStoreNode {
    pub(crate) chunks: LocalChunkAllocator,
    pub(crate) quarantine: Mutex<Quarantine>,
    /// Until when GETs go to the SLS (the HTS was found down).
    pub(crate) hts_down_until_ns: AtomicU64,
    /// The table incarnation this node has seen complete (see `client::get_table`).
    pub(crate) table_incarnation: AtomicU64,
}

impl HStoreNode {
    /// Puts a freed block in quarantine until `release_ns`.
    pub(crate) fn quarantine(&self, release_ns: u64, block: RemoteAddr, bytes: u64) {
        lock(&self.quarantine).blocks.push_back((release_ns, block, bytes));
    }

    /// Returns the blocks whose quarantine ended to the allocator; how many.
    pub(crate) fn release(&self, now_ns: u64) -> Result<u64, IndexError> {
        let mut released = Vec::new();
        {
            let mut q = lock(&self.quarantine);
            while q.blocks.front().is_some_and(|b| b.0 <= now_ns) {
                released.push(q.blocks.pop_front().expect("non-empty"));
            }
        }
        // Every block goes back even if one is refused (the first refusal is reported).
        let mut refused = None;
        for &(_, block, bytes) in &released {
            if let Err(e) = self.chunks.free(block, bytes) {
                refused.get_or_insert(e);
            }
        }
        match refused {
            Some(e) => Err(e),
            None => Ok(released.len() as u64),
        }
    }
}

/// HStore, for `dmkit run --index hstore` and `dmkit check --index hstore`.
#[derive(Debug)]
pub struct HStore;

impl IndexKind for HStore {
    const NAME: &'static str = "hstore";
    /// A run's peak over its items (`dmkit run --index hstore --workload c --keys 10000000`,
    /// 8 compute nodes, 2026-11-30: 4,272 MB; 5,137 MB while the invariant walk copied every
    /// skiplist entry into a map): the image with the servers' states, the copy of them each
    /// run starts from (the SLS's skiplists), the walk's map of the table. The load alone peaks
    /// at 2,250 MB (`bench-load`), which is what this said before, and under a run's need.
    const HOST_BYTES_PER_ITEM: u64 = 428;
    type Options = HStoreOptions;
    type NodeState = HStoreNode;
    type Handle<C: Client + Clone + 'static> = HStoreHandle<C>;

    fn limits(o: &HStoreOptions) -> Limits {
        Limits {
            min_key_bytes: 1,
            max_key_bytes: o.max_key_bytes as usize,
            min_value_bytes: 0,
            max_value_bytes: o.max_value_bytes as usize,
        }
    }

    fn validate(o: &HStoreOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(HStoreOptions, String), String> {
        if shape.cache_bytes.is_some() {
            return Err(registry::no_cache_budget(Self::NAME, "has no compute-node cache"));
        }
        let config = if config == "default" { Self::NAME } else { config };
        // The table is sized for the run's items at about 3 a bucket (no resizing: the paper
        // over-provisions), with overflow pools for the chains and the run's inserts.
        let mut options = HStoreOptions::named(config)?.sized_for(shape.items);
        options.memory_nodes = shape.memory_nodes;
        options.max_key_bytes = shape.key_bytes.max(1) as u32;
        options.max_value_bytes = shape.value_bytes as u32;
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn servers(o: &HStoreOptions) -> Servers {
        Servers { nodes: 2, rpc_threads: o.rpc_threads, workers_share_cores: o.hyperthreads }
    }

    fn install<H: ServiceHost>(o: &HStoreOptions, host: &mut H) -> Result<(), String> {
        o.validate()?;
        let (a, b) = (o.clone(), o.clone());
        host.add_service(o.hts_node(), wire::HTS_SERVICE, move || hts::Hts::new(a.clone()))?;
        host.add_service(o.sls_node(), wire::SLS_SERVICE, move || sls::Sls::new(b.clone()))
    }

    async fn create<C: Client>(o: &HStoreOptions, ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)?;
        for (node, service) in [(o.hts_node(), wire::HTS_SERVICE), (o.sls_node(), wire::SLS_SERVICE)] {
            match wire::Reply::decode(&ctx.call(node, service, wire::Request::Init.encode()).await?)? {
                wire::Reply::Ok => {}
                other => return Err(IndexError::Corrupt(format!("{node} refused to initialise: {other:?}"))),
            }
        }
        Ok(())
    }

    fn node_state(o: &HStoreOptions, _caps: &Caps) -> HStoreNode {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        HStoreNode {
            chunks,
            quarantine: Mutex::new(Quarantine::default()),
            hts_down_until_ns: AtomicU64::new(0),
            table_incarnation: AtomicU64::new(0),
        }
    }

    fn inherit(node: &HStoreNode, loader: &HStoreNode) {
        node.chunks.inherit(&loader.chunks);
    }

    fn node_state_bytes(n: &HStoreNode) -> u64 {
        n.chunks.bytes() + lock(&n.quarantine).blocks.len() as u64 * 24
    }

    fn open<C: Client + Clone + 'static>(o: &HStoreOptions, node: Arc<HStoreNode>, ctx: C) -> HStoreHandle<C> {
        HStoreHandle::new(o.clone(), node, ctx)
    }

    fn check_invariants(o: &HStoreOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    fn server_counters(o: &HStoreOptions, memory: &dyn MemoryView) -> BTreeMap<&'static str, u64> {
        server_counters(o, memory)
    }

    fn node_counters(node: &HStoreNode) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([(QUARANTINED_BLOCKS, lock(&node.quarantine).blocks.len() as u64)])
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut HStoreOptions, bug: &str) -> Result<(), String> {
        let name = PlantedBug::named(&PLANTS, "hstore", bug)?;
        o.plants.insert(name);
        if name == NO_COMMIT_WAIT.name {
            o.commit_wait = false;
        } else if name == NO_GRACE.name {
            o.lease_ns = None;
        } else if name == NO_RETRY.name {
            o.retry_writes = false;
        } else if name == NO_DEDUP.name {
            o.dedup = false;
        }
        Ok(())
    }
}

/// A restarted HTS gave its recovery up (its SLS peer was down too): counted, not retried.
pub const HTS_RECOVERY_FAILED: &str = "hts_recovery_failed";
/// A restarted SLS gave its recovery up (its HTS peer was down too): counted, not retried.
pub const SLS_RECOVERY_FAILED: &str = "sls_recovery_failed";
/// A server refused a request longer than `max_message_bytes` (`wire::refuse_oversized`): a sender
/// sized a message past the limit, which no run gives it cause to do.
pub const MESSAGE_OVERSIZED: &str = "message_oversized";

/// The server nodes' counters (batches, drains, recoveries), read from the services' state.
pub fn server_counters(o: &HStoreOptions, memory: &dyn MemoryView) -> BTreeMap<&'static str, u64> {
    let mut out = BTreeMap::new();
    if let Some(h) = memory.service_state(o.hts_node(), wire::HTS_SERVICE).and_then(|s| s.downcast::<hts::Hts>().ok()) {
        out.extend(h.counters());
    }
    if let Some(s) = memory.service_state(o.sls_node(), wire::SLS_SERVICE).and_then(|s| s.downcast::<sls::Sls>().ok()) {
        out.extend(s.counters());
    }
    out
}

/// Server-side counters are kept per service behind a lock, as a client's are
/// ([`crate::Events`]: names found by address, by bytes only if no address matched; a map
/// keyed by the names compared strings on every count, a percent of a bulk load).
#[derive(Debug, Default)]
pub(crate) struct ServerCounters(Mutex<crate::Events>);

impl ServerCounters {
    fn with(&self, name: &'static str, f: impl FnOnce(&mut u64)) {
        f(lock(&self.0).count_mut(name));
    }

    pub(crate) fn add(&self, name: &'static str, n: u64) {
        self.with(name, |c| *c += n);
    }

    pub(crate) fn set_max(&self, name: &'static str, n: u64) {
        self.with(name, |c| *c = (*c).max(n));
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.0).iter().collect()
    }
}

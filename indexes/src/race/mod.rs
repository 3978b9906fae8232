//! # RACE hashing (ATC '21 / TOS '22): one-sided extendible hashing
//!
//! Built: the byte-exact directory, subtables, combined buckets, slots and checksummed KV
//! blocks ([`layout`]); the compute node's directory cache with the stale-bucket check
//! (Algorithm 5); search (Algorithms 4 and 6), insert, update and delete with 8-byte CAS on
//! slots (lock-free, except that safe mode serialises inserts of one absent key, below);
//! subtable splits with directory doubling, concurrent with every operation; and the paper's
//! own behaviours, each behind a switch ([`Paper`]), with the holes the digest predicts
//! (§4.5) found as replayable schedules in `verify/tests/race.rs`. The DrTM cluster-hashing
//! baseline is [`crate::cluster`].
//!
//! ## Safe mode and the paper's behaviours
//!
//! | config | the paper's behaviour | hole | scenario (`verify/tests/race.rs`) |
//! |---|---|---|---|
//! | `paper-reuse` | a block is zeroed and reused as soon as its slot lets go of it; searches skip invalid blocks | K1 | `immediate_reuse_makes_a_search_miss_a_present_key` |
//! | `paper-reuse` | (same) | K2 | `k2_a_reused_block_lets_a_stale_cas_succeed` |
//! | `paper-insert` | Algorithm 1: publish without looking, then RemoveDuplicate | K3 | `faithful_mode_loses_upserts_and_safe_mode_does_not`, `paper_inserts_of_one_absent_key_both_report_it_absent` |
//! | `paper-split` | writes act in a subtable being filled; the mover copies without a freeze and takes a copy back when its clear fails | K4, K5, K6 | `k4_…`, `k5_…`, `k6_…` |
//! | `paper-printed` | Algorithms 2 and 3 restart without Synchronize and succeed on an absent key | K7 | `k7_a_restart_without_synchronize_livelocks`, `printed_mode_succeeds_on_an_absent_key` |
//! | `faithful` | all of the above | | |
//!
//! Each scenario also runs clean in safe mode (the default), which takes the digest's fixes:
//! blocks are never reused, so a block a slot names is always valid (K1, K2); an insert looks
//! for its key first (upsert, D11) and serialises inserts of one absent key on a bucket-header
//! lock (K3, below); writes to a key whose subtable is being filled wait, and the mover freezes
//! what it copies (D15's safe column: K4, K5, K6); every restart re-reads the directory and an
//! absent key's update or delete returns `false` (D12, D13: K7).
//!
//! Not modelled as paper behaviours: K8 (the paper does not say how two doublings coordinate;
//! both modes take the directory lock, so splits run one at a time, a deviation: the paper
//! splits different subtables at once), and K9 (every mode reads candidates in agreement
//! order; duplicates exist only while inserts of one key race, which `paper-insert` already
//! makes non-linearizable, so a K9 scenario would not isolate it). On a restart Algorithms 1
//! and 3 allocate a new block and leak the old one (K7's leak); every mode keeps the block.
//!
//! ## Splits (§3.6, safe mode)
//!
//! An insert that finds both combined buckets full splits their subtable S (depth d, suffix
//! i0) under the directory lock (bit 63 of the root word; one split at a time):
//! 1. allocate T and write its headers (depth d + 1, suffix i0 | 2^d);
//! 2. if d equals the global depth, append a copy of the used directory and bump it;
//! 3. point the entries of S's keys with bit d set at T, locked ("filling"), the others at S,
//!    all with depth d + 1;
//! 4. for each bucket b of S: CAS its header to depth d + 1 with the bucket read in the same
//!    batch; for each item whose key has bit d set, freeze its slot (a flag bit), copy the word
//!    into bucket b of T, clear the slot;
//! 5. unlock T's entries, then the directory.
//!
//! Searches stay lock-free: a key whose entry is filling, or whose buckets moved under a stale
//! cache, is looked for in T, then S, then T (Algorithm 6). Writes to such a key wait for the
//! split to move on (D15's safe mode); a write's CAS on an item frozen since its READ fails, and
//! a write never reads a frozen item (see [`settled`]). A new key's insert locks the header of
//! the bucket it writes, so step 4's header CAS cannot fall between its READ and its slot CAS.
//!
//! Under `paper-split` (the paper's table in §3.6) writes do not wait: an update or delete acts
//! wherever Algorithm 4's search finds the key, old subtable or new; an insert uses a subtable
//! being filled (Algorithm 1 restarts only on a depth mismatch). The mover does not freeze: it
//! copies the word into the new subtable (bucket `b`, or any free slot of the key's combined
//! buckets there if inserts took bucket `b`'s, D16), clears the old slot, and if that clear
//! fails takes the copy back and moves whatever the slot holds now.
//!
//! ## Buckets that span cache lines
//!
//! The paper's bucket (K = 7, 64 bytes, 64-byte aligned) is one cache line, so one READ sees
//! its header and slots at one instant. Other K accepted by the options (K = 2: 24-byte
//! buckets) leave some buckets with the header in one line and slots in the next, and a READ
//! samples its lines in any order. A search whose cached entry predates the split's step 3 could then see a bucket's header before
//! the split's CAS of step 4 (old depth: the stale-bucket check passes) and its slot after the
//! move cleared it (the copy already in T, which the search does not read): a present key
//! missed (found by PCT in the `default-2slot` preset, schedule 13,511 of seed 1; a write's
//! `find` and an insert's look-up read views the same way). Fix: the READ of the two combined
//! buckets is followed, in the same batch, by a fenced 8-byte READ of the header of each bucket
//! that spans lines, and the view takes that header. Fenced, it samples after every slot of
//! the bucket READs, so a header that still admits the key proves no slot of its bucket had
//! moved when it was read. No extra round trip; nothing is added when buckets do not span
//! lines (K = 1, 3, 7). Plant `no-header-recheck` removes it.
//!
//! ## Operations (digest §3; K = 7, a 64-B KV block, cache hit)
//!
//! - **search**: `READ cb1 ‖ READ cb2` (one batch), then the KV blocks of every
//!   fingerprint-matching slot in one batch, checked in agreement order (physical bucket, slot:
//!   K9's fix). 2 round trips.
//! - **insert** (upsert, D11): `WRITE block ‖ READ cb1 ‖ READ cb2`; if the key is present, CAS
//!   its slot to the new block (an update); else CAS an empty slot of the less-loaded combined
//!   bucket, then re-read both combined buckets for duplicates (see below). 3 round trips.
//! - **update / delete**: search, then CAS the valid copy's slot. 3 round trips. An absent key
//!   returns `false` (D12).
//!
//! ## Concurrent inserts of one key
//!
//! **Safe mode (default).** An insert that finds its key absent takes the insert lock of the
//! key's lower main bucket (bit 63 of that bucket's header word) in the same batch as a re-read
//! of both combined buckets, then posts `[CAS slot, WRITE unlock]`. Inserts of one key serialise,
//! so a key is never published twice and every insert's "existed" is exact. Searches, updates,
//! deletes and inserts of present keys never take the lock. A new key's insert still costs the
//! paper's three round trips, `[WRITE block ‖ READ cb1 ‖ READ cb2]`, `[CAS lock, READ cb1,
//! READ cb2]`, `[CAS slot, WRITE unlock]`: the duplicate re-read moves before the slot CAS.
//!
//! **`paper-insert`**: the paper's Algorithm 1. No look for the key first (K3: an
//! insert of a present key publishes a second copy), and after the slot CAS a re-read that
//! clears every copy but the lowest (physical bucket, slot) one. An upsert can be lost (K3),
//! and two concurrent inserts of one absent key can both report that it was absent;
//! `verify/tests/race.rs` shows both. After its re-read, an insert whose bucket's header
//! changed so that it no longer admits the key takes its slot back and inserts again (a split's
//! step 1 came between its READ and its CAS, so the mover did not see it); if the take-back
//! fails, the mover did move it. Plant `no-resize-check` removes the check; PCT finds the
//! stranded item (`the_paper_inserts_resize_check_is_needed`).
//!
//! ## Blocks
//!
//! Blocks are written before the CAS that publishes them and never change. A block whose
//! pointer leaves its slot is retired and never reused (deferred reclamation taken to the
//! limit, the digest's fix for K1 and K2; the paper's immediate reuse is `paper-reuse`'s, where
//! a block another compute node carved is zeroed but not reused).
//!
//! ## Failed READs (a transport error, `--read-failures`)
//!
//! A failure must leave no lock held: an insert whose `[CAS insert locks, READ buckets]` batch
//! failed at a READ releases the locks its CASes won ([`dmkit_rdma::Verbs::post_keeping`] says
//! which: the lock word is the header with the lock bit, and names no owner); a split releases
//! the directory lock on a READ failure before its publish, and past the publish, where it
//! cannot be undone, reads again on a `Timeout` (at most `max(max_retries, 8)` times per bucket
//! or phase; a node that is down still ends it, half done). Plants
//! `failed-read-keeps-insert-lock`, `failed-read-keeps-dir-lock`, `failed-read-abandons-split`;
//! preset `read-failure`.
//!
//! ## Dynamics: a table that grows stalls while it splits
//!
//! Found on the throughput series of a LOAD into tables sized for the loaded keys only (`dmkit
//! run --index race --workload load --keys 1000000 --key-bytes 16 --value-bytes 32 --profile
//! cx5-100g --compute-nodes 4 --threads-per-cn 8 --duration-us 120000 --timeseries-us 5000`
//! before `--inserts`): 3.45 Mops/s for 60 ms, then no operation completes. Not a deadlock:
//! keys hash uniformly, so the 16 subtables fill together; the first insert to find its
//! subtable full takes the directory lock and splits it, and every other client soon finds its
//! own subtable full too and waits for the lock (`split_lock_busy`, `split_wait` in millions).
//! The split is one client moving about 32,000 items of a 768 KiB subtable, four dependent round
//! trips each (READ the block, CAS freeze, CAS into the new subtable, CAS clear): over 300 ms of
//! simulated time per split, one split at a time. So a table that must grow during a measured
//! phase measures its splits. The papers do not: RACE's Fig. 14 loads 100 M items into tables
//! sized for the experiment (the digest's D4), and `dmkit run --inserts N` sizes the tables for
//! the loaded keys plus N and stops the LOAD after them. Left as they are: splits of different
//! subtables at once (the paper's) and a move batched per bucket (the four round trips of every
//! moving item of a bucket in one batch each), which would shorten the stall about threefold.
//!
//! ## Dynamics: a hot key's updates retry each other
//!
//! Found while measuring the tutorial's index beside RACE (`docs/new-index.md`): under YCSB A
//! (Zipfian 0.99, 100 k keys, 4 CNs, 2 MNs, cx6-100g) RACE is steady at 16 clients (2.92 ± 0.01
//! Mops/s) but not at 64: it starts near 10 Mops/s and within 10 ms falls to about 3, where it
//! stays for the 400 ms cap (3.11 ± 0.09, update p99 0.86 ms, 1.5 failed update CASes per
//! update); at 256 clients it gives 0.45 ± 0.02 Mops/s, 9.4 failed CASes per update, update p99
//! 36 ms. With uniform keys (`--theta 0`) the same 256 clients are steady at 22.1 Mops/s. The
//! mechanism is the paper's rule that an update whose slot CAS failed re-searches and redoes
//! (digest §3.5, "restart"): every failed CAS costs another search and CAS on the hottest slots,
//! so failures feed on themselves, and the simulated NIC serialises same-address atomics at its
//! calibrated rate. Behaviour of the protocol as published, not a bug: the paper measures
//! uniform keys (Fig. 14, 20), so it has no number to compare, and how deep the collapse goes on
//! hardware depends on the NIC's same-address atomic rate. Left as the paper has it. The probing
//! table avoids it by returning an update that lost to other writes of a live key as
//! overwritten, which RACE cannot do as simply: its slots change keys (a delete empties one for
//! any key) and a split's mover CASes them too.

pub mod config;
mod invariants;
pub mod layout;
pub mod presets;

use crate::common::batch::{post_per_node, post_per_node_keeping};
use crate::common::chunk::LocalChunkAllocator;
use crate::common::primitive::{Mutex, lock};
use crate::registry::{self, RunShape, TableShape};
use crate::{Change, Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug, RaceHandler};
pub use config::{Paper, RaceOptions};
use dmkit_rdma::{Buf, Caps, Client, CpuWork, Fixed, MemoryView, NodeId, RemoteAddr, Request, VerbsError};
use layout::{Entry, Geometry, Header, KeyHash, Slot};
use std::ops::Bound;
use std::sync::Arc;

/// The root word and directory on memory node 0: `[root u64][entry u64; 2^max_depth]`.
/// Room for the root word and the directory at the deepest `max_depth` the options accept.
const DIRECTORY: Fixed = Fixed::new(8192, 8 + (8 << MAX_DEPTH));
pub const DIRECTORY_OFFSET: u64 = DIRECTORY.offset();
/// The deepest global depth (the directory's size is fixed by it, in the reserved bytes).
const MAX_DEPTH: u8 = 16;

fn root_addr() -> RemoteAddr {
    DIRECTORY.on(NodeId(0))
}

fn entry_addr(i: usize) -> RemoteAddr {
    root_addr().add(8 + 8 * i as u64)
}

/// A client synchronized its compute node's copy of the directory (READs of it).
pub const DIRECTORY_SYNC: &str = "directory_sync";
/// A wait for a split to move on (whichever race made the client wait).
pub const SPLIT_WAIT: &str = "split_wait";
/// An insert whose bucket a split moved before it read its slot published again.
pub const INSERT_REDONE: &str = "insert_redone";
/// A split that doubled the directory.
pub const DIRECTORY_DOUBLING: &str = "directory_doubling";
/// A split that moved half of a subtable's directory entries without doubling.
pub const SHALLOW_SPLIT: &str = "shallow_split";
/// A subtable split that finished.
pub const SPLIT: &str = "split";
/// A split moved an item to the new subtable.
pub const ITEM_MOVED: &str = "item_moved";
/// A split's CAS that empties a moved item's old slot lost: it moves the item again.
pub const MOVE_REDONE: &str = "move_redone";
/// A freed KV block returned to this compute node's allocator for reuse.
pub const BLOCK_REUSED: &str = "block_reused";
/// A freed KV block another compute node carved, zeroed but not reused.
pub const FOREIGN_BLOCK_ZEROED: &str = "foreign_block_zeroed";
/// A copy of a key published twice removed (the agreement rule).
pub const DUPLICATE_REMOVED: &str = "duplicate_removed";
/// A directory READ found a deeper directory than the depth it was sized by: read again.
pub const SYNC_DEPTH_GREW: &str = "sync_depth_grew";
/// A directory READ finished after another client of the node cached a deeper directory.
pub const SYNC_KEPT_DEEPER: &str = "sync_kept_deeper";
/// A write found its key's directory entry locked by a split filling the new subtable.
pub const WRITE_WAITS_FILLING: &str = "write_waits_filling";
/// A write's (update's, delete's) view did not admit the key under its cached entry.
pub const STALE_BUCKET: &str = "stale_bucket";
/// A search's entry was filling or its view stale: Algorithm 6's look in both subtables.
pub const SEARCH_ON_RESIZE: &str = "search_on_resize";
/// A search's look after re-reading the directory found the entry's buckets moved again.
pub const SEARCH_RESYNC: &str = "search_resync";
/// An insert's entry was filling or its view stale.
pub const INSERT_STALE_BUCKET: &str = "insert_stale_bucket";
/// An insert's CAS of its present key's slot failed: the slot changed since the READ.
pub const UPSERT_CAS_FAILED: &str = "upsert_cas_failed";
/// An insert's CAS of a bucket header's insert lock failed (another insert holds it, or a
/// split changed the header).
pub const INSERT_LOCK_BUSY: &str = "insert_lock_busy";
/// Under the insert lock, the re-read found the key present.
pub const INSERT_KEY_APPEARED: &str = "insert_key_appeared";
/// Under the insert lock, the re-read found the chosen free slot taken.
pub const INSERT_SLOT_TAKEN: &str = "insert_slot_taken";
/// Under the insert lock, the re-read found the buckets no longer admit the key.
pub const INSERT_BUCKET_MOVED: &str = "insert_bucket_moved";
/// An update's slot CAS failed: the slot changed since the READ.
pub const UPDATE_CAS_FAILED: &str = "update_cas_failed";
/// A delete's CAS failed on every copy: they changed since the READ.
pub const DELETE_CAS_FAILED: &str = "delete_cas_failed";
/// An insert that found its buckets full found the directory lock held by another split.
pub const SPLIT_LOCK_BUSY: &str = "split_lock_busy";
/// A split, once it held the directory lock, found the key's buckets no longer full or moved.
pub const SPLIT_UNNEEDED: &str = "split_unneeded";
/// A split's header CAS on a bucket failed: an insert holds the bucket's insert lock.
pub const SPLIT_WAITS_INSERT_LOCK: &str = "split_waits_insert_lock";
/// A split's freeze CAS failed: the item changed since the mover read its bucket.
pub const FREEZE_RETRY: &str = "freeze_retry";
/// A split's READ failed before its publish: it releases the directory lock and gives up.
pub const SPLIT_RELEASED_AFTER_FAILED_READ: &str = "split_released_after_failed_read";
/// A split's READ failed past its publish: it reads again (the split cannot be undone).
pub const SPLIT_READ_RETRIED: &str = "split_read_retried";
/// The READ batched with an insert's lock CASes failed: the locks it took are released.
pub const INSERT_UNLOCKED_AFTER_FAILED_READ: &str = "insert_unlocked_after_failed_read";

/// The branches of safe mode (the default configuration) that exist only because of another
/// client. Branches that exist only for one of the paper's behaviours ([`Paper`]) are not
/// listed: those configurations have holes, so no checking preset runs them clean; their
/// scenarios in `verify/tests/race.rs` drive them (`move_redone` and `place`'s retry under
/// `paper-split`, `duplicate_removed` and `insert_redone` under `paper-insert`, the mover's
/// re-read of a reclaimed block under `paper-reuse`, the restart without Synchronize under
/// `paper-printed`).
const RACE_HANDLERS: [RaceHandler; 18] = [
    RaceHandler {
        event: SYNC_DEPTH_GREW,
        race: "the directory doubled after the cached depth sized the READ: the READ missed the new half; read again",
    },
    RaceHandler {
        event: SYNC_KEPT_DEEPER,
        race: "another client of the node cached a deeper directory while this READ was in flight: installing it would take the cache back a doubling",
    },
    RaceHandler {
        event: WRITE_WAITS_FILLING,
        race: "an update or delete of a key whose entry a split is filling: acting in either subtable races the mover (K4-K6); wait",
    },
    RaceHandler {
        event: STALE_BUCKET,
        race: "an update or delete under a cached entry whose buckets a split moved: the key may be in the other subtable; wait and re-read the directory",
    },
    RaceHandler {
        event: SEARCH_ON_RESIZE,
        race: "a search whose entry is filling or whose buckets moved: the key may be in either subtable; look in new, old, new (Algorithm 6)",
    },
    RaceHandler {
        event: SEARCH_RESYNC,
        race: "a search's look after re-reading the directory found the buckets moved again by a later split: look again",
    },
    RaceHandler {
        event: INSERT_STALE_BUCKET,
        race: "an insert under a filling entry or a cached entry whose buckets a split moved: publishing there strands the item; wait",
    },
    RaceHandler {
        event: UPSERT_CAS_FAILED,
        race: "an insert's CAS of its present key's slot lost to a concurrent write or move: start again",
    },
    RaceHandler {
        event: INSERT_LOCK_BUSY,
        race: "a new key's insert lock held by another insert (or the header changed by a split): two inserts of one key would publish it twice; retry",
    },
    RaceHandler {
        event: INSERT_KEY_APPEARED,
        race: "another insert published the key between this insert's READ and its lock: publishing again duplicates it (K3); start again as an update",
    },
    RaceHandler {
        event: INSERT_SLOT_TAKEN,
        race: "another insert took the chosen free slot between this insert's READ and its lock: start again",
    },
    RaceHandler {
        event: INSERT_BUCKET_MOVED,
        race: "a split moved the buckets between this insert's READ and its lock: publishing there strands the item; start again",
    },
    RaceHandler {
        event: UPDATE_CAS_FAILED,
        race: "an update's slot CAS lost to a concurrent write or move: start again",
    },
    RaceHandler {
        event: DELETE_CAS_FAILED,
        race: "a delete's CAS lost on every copy to a concurrent write or move: start again",
    },
    RaceHandler {
        event: SPLIT_LOCK_BUSY,
        race: "another split holds the directory lock: splits run one at a time; wait, then insert again",
    },
    RaceHandler {
        event: SPLIT_UNNEEDED,
        race: "between the insert's READ and the directory lock, a split or a delete made room: splitting again would split a subtable that is not full; insert again",
    },
    RaceHandler {
        event: SPLIT_WAITS_INSERT_LOCK,
        race: "a split's header CAS found an insert's lock on the bucket: moving now would miss the slot the insert is about to take; wait",
    },
    RaceHandler {
        event: FREEZE_RETRY,
        race: "a split's freeze CAS found the item updated, deleted or replaced since its bucket READ: decide again on what the slot holds",
    },
];

pub const FAILED_READ_KEEPS_INSERT_LOCK: PlantedBug = PlantedBug {
    name: "failed-read-keeps-insert-lock",
    description: "an insert whose [CAS lock, READ buckets] batch failed at a READ keeps the insert lock its CAS took: the bucket's inserts and splits wait for good",
};
pub const FAILED_READ_KEEPS_DIR_LOCK: PlantedBug = PlantedBug {
    name: "failed-read-keeps-dir-lock",
    description: "a split whose READ failed before its publish returns holding the directory lock: no split runs again",
};
pub const FAILED_READ_ABANDONS_SPLIT: PlantedBug = PlantedBug {
    name: "failed-read-abandons-split",
    description: "a split whose READ failed past its publish gives up: the moving entries stay locked and the directory lock held",
};
pub const NO_FREEZE: PlantedBug = PlantedBug {
    name: "no-freeze",
    description: "a split copies an item to the new subtable without freezing its slot: a write that lands between the copy and the clear is lost, or leaves a stale copy in the new subtable",
};
pub const NO_TARGET_LOCK: PlantedBug = PlantedBug {
    name: "no-target-lock",
    description: "a new key's insert locks only its key's lock bucket: a split's header CAS on the bucket it writes can fall between its READ and its slot CAS, and the split leaves the item behind",
};
pub const NO_INSERT_LOCK: PlantedBug = PlantedBug {
    name: "no-insert-lock",
    description: "safe mode: an insert of an absent key skips the bucket-header lock: concurrent inserts of one key publish two copies",
};
pub const NO_DUPLICATE_CHECK: PlantedBug = PlantedBug {
    name: "no-duplicate-check",
    description: "faithful mode: an insert does not re-read its buckets after its CAS: concurrent inserts of one key leave two live copies (digest §3.4)",
};
pub const NO_RESIZE_CHECK: PlantedBug = PlantedBug {
    name: "no-resize-check",
    description: "paper-insert: an insert skips Algorithm 1's header check after its CAS: a split's step 1 between its READ and its CAS leaves the item behind in the old subtable",
};
pub const NO_HEADER_RECHECK: PlantedBug = PlantedBug {
    name: "no-header-recheck",
    description: "a bucket READ takes the header of a bucket that spans cache lines from the same READ as its slots: it can see the header before a split's CAS and the slots after the move, and a search misses a present key",
};
const PLANTS: [PlantedBug; 9] = [
    FAILED_READ_KEEPS_INSERT_LOCK,
    FAILED_READ_KEEPS_DIR_LOCK,
    FAILED_READ_ABANDONS_SPLIT,
    NO_FREEZE,
    NO_TARGET_LOCK,
    NO_INSERT_LOCK,
    NO_DUPLICATE_CHECK,
    NO_RESIZE_CHECK,
    NO_HEADER_RECHECK,
];

/// RACE's [`IndexKind`].
#[derive(Debug)]
pub struct Race;

/// A compute node's state: the directory cache and the block allocator.
#[derive(Debug)]
pub struct RaceNode {
    dir: Mutex<Directory>,
    chunks: LocalChunkAllocator,
}

/// The cached used area of the directory.
#[derive(Debug, Default, Clone)]
struct Directory {
    gd: u8,
    entries: Vec<u64>,
}

/// One client's handle.
#[derive(Debug)]
pub struct RaceHandle<C> {
    o: RaceOptions,
    g: Geometry,
    node: Arc<RaceNode>,
    ctx: C,
    counters: Counters,
}

impl IndexKind for Race {
    const NAME: &'static str = "race";
    /// `dmkit bench-load --keys 10000000`, 2026-11-27 (README, Benchmarks).
    const HOST_BYTES_PER_ITEM: u64 = 88;
    const SUPPORTS_SCAN: bool = false;
    type Options = RaceOptions;
    type NodeState = RaceNode;
    type Handle<C: Client + Clone + 'static> = RaceHandle<C>;

    fn limits(o: &RaceOptions) -> Limits {
        Limits {
            min_key_bytes: 1,
            max_key_bytes: o.key_bytes as usize,
            min_value_bytes: 1,
            max_value_bytes: o.value_bytes as usize,
        }
    }

    fn validate(o: &RaceOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(RaceOptions, String), String> {
        if shape.cache_bytes.is_some() {
            return Err(registry::no_cache_budget(Self::NAME, "caches only its directory"));
        }
        let paper = Paper::named(config)?;
        // Subtables of 4,096 groups, as many (a power of two) as hold the run's items at about
        // 75% of their slots: the digest's D4, no split in a run that stays within them.
        // Inserts beyond split a subtable, one client moving its items (see the module doc: a
        // growing table stalls while it splits).
        let groups = 4096u64;
        let per_subtable = (3 * groups * 7) as f64 * 0.75;
        let depth =
            ((shape.items.max(1) as f64 / per_subtable).ceil() as u64).next_power_of_two().trailing_zeros() as u8;
        let options = RaceOptions {
            key_bytes: shape.key_bytes.max(8) as u32,
            value_bytes: shape.value_bytes.max(1) as u32,
            groups: groups as u32,
            initial_depth: depth.min(16),
            memory_nodes: shape.memory_nodes,
            paper,
            ..RaceOptions::default()
        };
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn fixed_table(t: &TableShape) -> Option<Result<RaceOptions, String>> {
        let Ok(groups) = u32::try_from(t.size) else {
            return Some(Err("--size is too large for RACE's groups".into()));
        };
        // One subtable that never splits.
        let options = RaceOptions {
            key_bytes: t.key_bytes as u32,
            value_bytes: t.value_bytes as u32,
            slots: t.slots.unwrap_or(7),
            groups,
            initial_depth: 0,
            max_depth: 0,
            ..RaceOptions::default()
        };
        Some(options.validate().map(|()| options))
    }

    async fn create<C: Client>(o: &RaceOptions, ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)?;
        let g = o.geometry();
        let n = 1usize << o.initial_depth;
        let mut entries = Vec::with_capacity(n * 8);
        for i in 0..n {
            let node = NodeId((i % o.memory_nodes as usize) as u16);
            let at = dmkit_rdma::alloc::alloc(ctx, node, g.subtable_bytes() as u64, 64).await?;
            ctx.write(at, Buf::from(empty_subtable(&g, Header { ld: o.initial_depth, suffix: i as u32 }))).await?;
            entries.extend_from_slice(&Entry { lock: false, ld: o.initial_depth, subtable: at }.encode().to_le_bytes());
        }
        ctx.write(entry_addr(0), Buf::from(entries)).await?;
        ctx.write(root_addr(), Buf::from(layout::root_word(o.initial_depth, false).to_le_bytes().to_vec())).await?;
        Ok(())
    }

    fn node_state(o: &RaceOptions, _caps: &Caps) -> RaceNode {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        RaceNode { dir: Mutex::new(Directory::default()), chunks }
    }

    fn inherit(node: &RaceNode, loader: &RaceNode) {
        node.chunks.inherit(&loader.chunks);
    }

    fn node_state_bytes(n: &RaceNode) -> u64 {
        let d = lock(&n.dir);
        (8 + 8 * d.entries.len()) as u64 + n.chunks.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &RaceOptions, node: Arc<RaceNode>, ctx: C) -> RaceHandle<C> {
        RaceHandle { o: o.clone(), g: o.geometry(), node, ctx, counters: Counters::default() }
    }

    fn check_invariants(o: &RaceOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn plant(o: &mut RaceOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "race", bug)?);
        Ok(())
    }
}

/// A subtable's bytes: every bucket's header, empty slots.
fn empty_subtable(g: &Geometry, h: Header) -> Vec<u8> {
    let mut b = vec![0u8; g.subtable_bytes()];
    for i in 0..g.buckets() {
        let at = g.bucket_at(i);
        b[at..at + 8].copy_from_slice(&h.encode().to_le_bytes());
    }
    b
}

/// Whether bucket `b` of the subtable at `st` has its header and some of its slots in different
/// 64-byte cache lines (a READ of the bucket may then sample them at different times).
fn straddles(g: &Geometry, st: RemoteAddr, b: usize) -> bool {
    const LINE: u64 = 64;
    let at = st.offset() + g.bucket_at(b) as u64;
    at / LINE != (at + g.bucket_bytes() as u64 - 1) / LINE
}

/// The two combined buckets of a key as read: four physical buckets. Each bucket's header was
/// sampled no earlier than any of its slots (see [`RaceHandle::read_view_after`]).
struct View {
    subtable: RemoteAddr,
    /// (physical bucket, header, slot words), in physical order per combined bucket.
    buckets: Vec<(usize, Header, Vec<u64>)>,
}

/// A published copy of a key.
#[derive(Clone, Debug)]
struct Copy {
    /// (physical bucket, slot): the agreement order.
    pos: (usize, usize),
    word: u64,
    value: Vec<u8>,
}

impl View {
    fn slot_addr(&self, g: &Geometry, (b, s): (usize, usize)) -> RemoteAddr {
        assert!(
            b < g.buckets() && s < g.slots,
            "slot ({b}, {s}) outside the subtable's {} buckets of {}",
            g.buckets(),
            g.slots
        );
        self.subtable.add((g.bucket_at(b) + 8 + 8 * s) as u64)
    }

    /// Non-empty slots with fingerprint `fp`, in agreement order (K9's fix).
    fn matches(&self, fp: u8) -> Vec<((usize, usize), u64)> {
        let mut out: Vec<((usize, usize), u64)> = Vec::new();
        for (b, _, slots) in &self.buckets {
            for (s, &w) in slots.iter().enumerate() {
                if Slot::decode(w).is_some_and(|x| x.fp == fp) && !out.iter().any(|(p, _)| *p == (*b, s)) {
                    out.push(((*b, s), w));
                }
            }
        }
        out.sort_by_key(|(p, _)| *p);
        out
    }
}

impl<C: Client + Clone + 'static> RaceHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    fn retries_exhausted(&self, op: &'static str) -> IndexError {
        IndexError::RetriesExhausted { op, retries: self.o.max_retries }
    }

    /// READs the root and the used area of the directory into the cache.
    async fn synchronize(&mut self) -> Result<(), IndexError> {
        self.synchronize_within(self.o.max_retries).await
    }

    /// [`Self::synchronize`] with at most `attempts` READs.
    async fn synchronize_within(&mut self, attempts: u32) -> Result<(), IndexError> {
        self.counters.event(DIRECTORY_SYNC);
        let (mut gd, cached) = {
            let d = lock(&self.node.dir);
            (d.gd, !d.entries.is_empty())
        };
        for _ in 0..attempts {
            let raw = self.ctx.read(root_addr(), Buf::zeroed(8 + 8 * (1usize << gd))).await?;
            assert_eq!(raw.len(), 8 + 8 * (1usize << gd), "a READ returns the bytes asked");
            let now = layout::root_gd(raw.u64_at(0));
            if now > gd {
                // An empty cache's first READ is sized for depth 0: no race there.
                if cached {
                    self.counters.event(SYNC_DEPTH_GREW);
                }
                gd = now;
                continue;
            }
            assert!(now <= gd, "the READ covers the directory at depth {now}");
            let entries = (0..1usize << now).map(|i| raw.u64_at(8 + 8 * i)).collect();
            let mut d = lock(&self.node.dir);
            if now >= d.gd {
                *d = Directory { gd: now, entries };
            } else {
                drop(d);
                self.counters.event(SYNC_KEPT_DEEPER);
            }
            return Ok(());
        }
        Err(self.retries_exhausted("synchronize"))
    }

    /// The cached directory entry for `kh` (synchronizing first if the cache is empty).
    async fn entry(&mut self, kh: &KeyHash) -> Result<Entry, IndexError> {
        if lock(&self.node.dir).entries.is_empty() {
            self.synchronize().await?;
        }
        let d = lock(&self.node.dir);
        Ok(Entry::decode(d.entries[layout::suffix(kh.dir, d.gd) as usize]))
    }

    /// `READ cb1 ‖ READ cb2` of `kh` in subtable `st`, with `extra` requests in the same
    /// round trip (a block WRITE); returns the view.
    async fn read_view(&mut self, st: RemoteAddr, kh: &KeyHash, extra: Vec<Request>) -> Result<View, IndexError> {
        Ok(self.read_view_after(st, kh, Vec::new(), extra).await.map_err(|(e, _)| e)?.0)
    }

    /// [`Self::read_view`] after `pre` (requests to the subtable's node, posted before the
    /// READs in the same batch: an RMW there is seen by the READs); returns the view and the
    /// responses of `pre`.
    async fn read_view_after(
        &mut self,
        st: RemoteAddr,
        kh: &KeyHash,
        pre: Vec<Request>,
        extra: Vec<Request>,
    ) -> Result<(View, Vec<dmkit_rdma::Response>), (IndexError, Vec<Option<dmkit_rdma::Response>>)> {
        let g = self.g;
        let firsts = kh.idx.map(|a| g.combined_first(a));
        // A combined bucket is a main bucket and its group's overflow bucket, both in the table.
        assert!(
            firsts.iter().all(|&b| b + 1 < g.buckets()),
            "combined buckets {firsts:?} outside the subtable's {}",
            g.buckets()
        );
        // Buckets whose header shares no cache line with some of its slots: their headers are
        // read again after the slots (below).
        let torn: Vec<usize> = if self.planted(NO_HEADER_RECHECK) {
            Vec::new()
        } else {
            let mut t: Vec<usize> = firsts.iter().flat_map(|&b| [b, b + 1]).filter(|&b| straddles(&g, st, b)).collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        let n_pre = pre.len();
        let mut reqs = pre;
        reqs.extend(firsts.iter().map(|&b| Request::read_len(st.add(g.bucket_at(b) as u64), 2 * g.bucket_bytes())));
        // Fenced: sampled after both bucket READs have completed, so after every slot they saw.
        reqs.extend(torn.iter().map(|&b| Request::read_len(st.add(g.bucket_at(b) as u64), 8).fenced()));
        reqs.extend(extra);
        // A failed batch hands back what `pre` did (its caller may hold locks by it).
        let (done, error) = post_per_node_keeping(&self.ctx, reqs).await;
        if let Some(e) = error {
            let mut pre_done = done;
            pre_done.truncate(n_pre);
            return Err((e.into(), pre_done));
        }
        let mut resp: Vec<dmkit_rdma::Response> =
            done.into_iter().map(|r| r.expect("every request answered")).collect();
        let reads: Vec<dmkit_rdma::Response> = resp.drain(n_pre..n_pre + 2 + torn.len()).collect();
        resp.truncate(n_pre);
        let mut reads = reads.into_iter();
        let mut buckets = Vec::with_capacity(4);
        for (first, r) in firsts.iter().zip(reads.by_ref().take(2)) {
            let buf = r.into_buf().map_err(|e| (e.into(), Vec::new()))?;
            assert_eq!(buf.len(), 2 * g.bucket_bytes(), "a READ returns the bytes asked");
            for half in 0..2 {
                let at = half * g.bucket_bytes();
                let header = Header::decode(buf.u64_at(at));
                let slots = (0..g.slots).map(|s| buf.u64_at(at + 8 + 8 * s)).collect();
                buckets.push((first + half, header, slots));
            }
        }
        for (b, r) in torn.iter().zip(reads) {
            let header = Header::decode(r.into_buf().map_err(|e| (e.into(), Vec::new()))?.u64_at(0));
            for x in buckets.iter_mut().filter(|x| x.0 == *b) {
                x.1 = header;
            }
        }
        assert_eq!(buckets.len(), 4, "a view is two combined buckets");
        assert_eq!(resp.len(), n_pre, "the responses of `pre` only");
        Ok((View { subtable: st, buckets }, resp))
    }

    /// The valid copies of `key` among the view's fingerprint matches (their blocks read in one
    /// batch per memory node), in the order searched.
    async fn copies(&mut self, view: &View, kh: &KeyHash, key: &[u8]) -> Result<Vec<Copy>, IndexError> {
        let cands = view.matches(kh.fp);
        if cands.is_empty() {
            return Ok(Vec::new());
        }
        let reqs = cands
            .iter()
            .map(|(_, w)| {
                let s = Slot::decode(*w).expect("non-empty");
                Request::read_len(s.block, s.bytes())
            })
            .collect();
        let blocks = post_per_node(&self.ctx, reqs).await?;
        let mut out = Vec::new();
        for ((pos, word), r) in cands.into_iter().zip(blocks) {
            let buf = r.into_buf()?;
            assert_eq!(buf.len(), Slot::decode(word).expect("a match").bytes(), "a READ returns the bytes asked");
            self.ctx.charge_cpu(CpuWork::ChecksumByte, buf.len() as u64).await;
            match layout::decode_block(buf.as_slice()) {
                Some((k, v)) if k == key => out.push(Copy { pos, word, value: v.to_vec() }),
                Some(_) => {}
                // The paper reclaims a block as soon as its slot lets go of it, and its search
                // skips a block that no longer holds a key (K1).
                None if self.o.paper.reuse => {}
                // Otherwise an invalid block is a broken protocol, not a race: a block is
                // written, and that WRITE has completed, before the CAS that publishes it; it is
                // never written again; and a block whose pointer left its slot is never reused
                // (an unpublished update block is, but no slot ever named it). So a READ of a
                // block named by a slot word always returns it whole (K1's fix: the digest's
                // "read again" cannot be needed, so it is reported instead).
                None => {
                    return Err(IndexError::Corrupt(format!(
                        "a slot names an invalid block at {}",
                        Slot::decode(word).expect("a match").block
                    )));
                }
            }
        }
        Ok(out)
    }

    /// Whether every bucket of the view may hold the key for a client whose entry has `ld`.
    fn view_correct(&self, view: &View, ld: u8, kh: &KeyHash) -> bool {
        view.buckets.iter().all(|(_, h, _)| layout::bucket_correct(ld, *h, kh.dir))
    }

    /// Waits (yielding, then re-reading the directory) for a split to move on; `why` is the
    /// race handler's event.
    async fn wait_for_split(&mut self, why: &'static str) -> Result<(), IndexError> {
        self.counters.event(why);
        self.counters.event(SPLIT_WAIT);
        self.ctx.yield_now().await;
        self.synchronize().await
    }

    /// The valid copies of `key` for a write, and the view they were found in (`None`: absent).
    /// Safe mode (D15): a key whose entry is being filled by a split, or whose buckets moved
    /// under a stale cache, waits until the split has moved on; so writes act on settled copies
    /// only. `paper.split`: the write acts wherever Algorithm 4's
    /// search finds the key, in the new subtable or the old one (Algorithm 3's `Search'`).
    /// `write`, if any, rides in the first READ's round trip (an update's new block).
    async fn find(
        &mut self,
        key: &[u8],
        kh: &KeyHash,
        write: &mut Option<Request>,
    ) -> Result<Option<(View, Vec<Copy>)>, IndexError> {
        if self.o.paper.split {
            return self.locate(key, kh, write).await;
        }
        for _ in 0..self.o.max_retries {
            let e = self.entry(kh).await?;
            if e.lock {
                self.wait_for_split(WRITE_WAITS_FILLING).await?;
                continue;
            }
            let view = self.read_view(e.subtable, kh, write.take().into_iter().collect()).await?;
            if !self.view_correct(&view, e.ld, kh) {
                if self.o.paper.printed {
                    // Algorithms 2 and 3 restart without Synchronize (K7): a stale cache
                    // stays stale unless another client of this node refreshes it.
                    self.counters.event(STALE_BUCKET);
                    self.counters.retries += 1;
                    self.ctx.yield_now().await;
                } else {
                    self.wait_for_split(STALE_BUCKET).await?;
                }
                continue;
            }
            let copies = self.copies(&view, kh, key).await?;
            settled(&copies)?;
            return Ok((!copies.is_empty()).then_some((view, copies)));
        }
        Err(self.retries_exhausted("write"))
    }

    /// Algorithms 4 and 6: the valid copies of `key` and the view they were found in, lock-free
    /// during splits. A key whose entry is being filled, or whose buckets moved under a stale
    /// cache, is looked for in the new subtable, then the old one, then the new one again (an
    /// item is copied into the new subtable before it leaves the old one). `None`: absent.
    async fn locate(
        &mut self,
        key: &[u8],
        kh: &KeyHash,
        write: &mut Option<Request>,
    ) -> Result<Option<(View, Vec<Copy>)>, IndexError> {
        for _ in 0..self.o.max_retries {
            let e = self.entry(kh).await?;
            if !e.lock {
                let view = self.read_view(e.subtable, kh, write.take().into_iter().collect()).await?;
                if self.view_correct(&view, e.ld, kh) {
                    let copies = self.copies(&view, kh, key).await?;
                    return Ok((!copies.is_empty()).then_some((view, copies)));
                }
            }
            self.counters.event(SEARCH_ON_RESIZE);
            self.synchronize().await?;
            let (e, old) = {
                let d = lock(&self.node.dir);
                let e = Entry::decode(d.entries[layout::suffix(kh.dir, d.gd) as usize]);
                let sfx = layout::suffix(kh.dir, e.ld);
                let old = (e.lock && e.ld > 0 && (sfx >> (e.ld - 1)) & 1 == 1)
                    .then(|| Entry::decode(d.entries[(sfx & !(1 << (e.ld - 1))) as usize]));
                (e, old)
            };
            let mut tables = vec![e.subtable];
            if let Some(o) = old {
                tables.extend([o.subtable, e.subtable]);
            }
            let mut settled = true;
            for (n, st) in tables.into_iter().enumerate() {
                let view = self.read_view(st, kh, write.take().into_iter().collect()).await?;
                if n == 0 && !self.view_correct(&view, e.ld, kh) {
                    self.counters.event(SEARCH_RESYNC);
                    settled = false;
                    break;
                }
                let copies = self.copies(&view, kh, key).await?;
                if !copies.is_empty() {
                    return Ok(Some((view, copies)));
                }
            }
            if settled {
                return Ok(None);
            }
        }
        Err(self.retries_exhausted("search"))
    }

    /// Allocates and writes a block for `key` and `value` (not yet published).
    async fn new_block(&mut self, key: &[u8], value: &[u8], fp: u8) -> Result<(Slot, Request), IndexError> {
        let bytes = layout::encode_block(key, value);
        let units = bytes.len() / layout::UNIT;
        // The options bound a block to MAX_UNITS (validate); the entry points checked the sizes.
        assert!(
            (1..=layout::MAX_UNITS).contains(&units) && bytes.len() == units * layout::UNIT,
            "a block of {} bytes is not 1 to {} units",
            bytes.len(),
            layout::MAX_UNITS
        );
        debug_assert_eq!(layout::decode_block(&bytes), Some((key, value)), "a block decodes to what was encoded");
        let node = self.node.clone();
        let at = node.chunks.alloc(&self.ctx, bytes.len() as u64, layout::UNIT as u64).await?;
        assert_eq!(at.offset() % layout::UNIT as u64, 0, "a block allocated unit-aligned");
        self.ctx.charge_cpu(CpuWork::ChecksumByte, bytes.len() as u64).await;
        let slot = Slot { fp, units, block: at };
        assert_eq!(Slot::decode(slot.encode()), Some(slot), "a slot word decodes to what was encoded");
        Ok((slot, Request::write(at, bytes)))
    }

    async fn cas(&mut self, at: RemoteAddr, old: u64, new: u64) -> Result<bool, IndexError> {
        let seen = self.ctx.cas(at, old, new).await?;
        if seen != old {
            self.counters.cas_failures += 1;
        }
        Ok(seen == old)
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        Race::limits(&self.o).check_key(key)?;
        let kh = self.g.hash(key);
        let found = self.locate(key, &kh, &mut None).await?;
        Ok(found.and_then(|(_, c)| c.into_iter().next()).map(|c| c.value))
    }

    async fn do_insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, IndexError> {
        let limits = Race::limits(&self.o);
        limits.check_key(key)?;
        limits.check_value(value)?;
        let g = self.g;
        let kh = g.hash(key);
        let (slot, write) = self.new_block(key, value, kh.fp).await?;
        let mine = slot.encode();
        let mut write = Some(write);
        for _ in 0..self.o.max_retries {
            let e = self.entry(&kh).await?;
            // The block's WRITE rides in the first round trip; it has completed (and is
            // visible) before any CAS publishes it.
            let extra = write.take().into_iter().collect();
            let view = self.read_view(e.subtable, &kh, extra).await?;
            let stale = if self.o.paper.split {
                // Algorithm 1: any LD mismatch restarts; a subtable being filled is used.
                view.buckets.iter().any(|(_, h, _)| h.ld != e.ld)
            } else {
                e.lock || !self.view_correct(&view, e.ld, &kh)
            };
            if stale {
                self.wait_for_split(INSERT_STALE_BUCKET).await?;
                continue;
            }
            let copies = self.copies(&view, &kh, key).await?;
            settled(&copies)?;
            if let Some(c) = copies.first().filter(|_| !self.o.paper.insert) {
                // D11: the key is here; update its valid copy (the paper's Algorithm 1 does not
                // look, digest K3).
                if self.cas(view.slot_addr(&g, c.pos), c.word, mine).await? {
                    self.retire(c.word).await?;
                    return Ok(true);
                }
                self.counters.event(UPSERT_CAS_FAILED);
                continue;
            }
            let Some(pos) = free_slot(&g, &view, &kh) else {
                // Insertion failure: split the subtable (§3.6), then try again.
                self.resize(&kh).await?;
                continue;
            };
            if !self.o.paper.insert && !self.planted(NO_INSERT_LOCK) {
                match self.insert_locked(&kh, key, e, &view, pos, mine).await? {
                    Some(existed) => return Ok(existed),
                    None => continue,
                }
            }
            if !self.cas(view.slot_addr(&g, pos), 0, mine).await? {
                continue;
            }
            if !self.o.paper.insert || self.planted(NO_DUPLICATE_CHECK) {
                return Ok(false);
            }
            let seen = view.buckets.iter().find(|(b, _, _)| *b == pos.0).map(|(_, h, _)| *h).expect("read");
            if self.remove_duplicates(&kh, key, e, pos, seen, mine).await? {
                return Ok(false);
            }
            // A split moved our bucket's range away before reading our slot: taken back,
            // published again in the new subtable (the block is kept, D13).
            self.counters.event(INSERT_REDONE);
            self.synchronize().await?;
        }
        Err(self.retries_exhausted("insert"))
    }

    /// Splits the subtable that holds `kh`'s key (§3.6 and the digest's reconstruction), or
    /// returns at once if another split holds the directory lock (the caller retries).
    ///
    /// One split at a time: the directory lock (bit 63 of the root word) is held from the
    /// publish to the end of the move. The paper lets different subtables split at once; this
    /// keeps directory doubling and multi-entry updates simple (K8) at the price of serial
    /// splits, which matter only while a table grows.
    async fn resize(&mut self, kh: &KeyHash) -> Result<(), IndexError> {
        let g = self.g;
        let w = self.ctx.read(root_addr(), Buf::zeroed(8)).await?.u64_at(0);
        if w & layout::LOCK_BIT != 0 || !self.cas(root_addr(), w, w | layout::LOCK_BIT).await? {
            self.wait_for_split(SPLIT_LOCK_BUSY).await?;
            return Ok(());
        }
        let release = |gd: u8| Request::write(root_addr(), layout::root_word(gd, false).to_le_bytes().to_vec());
        // From here on the split must not give up on a bound of max_retries: a split abandoned
        // while it holds the directory lock leaves it held (and, once published, entries
        // filling and items frozen) for good. Under the lock the depth changes only by this
        // client, so a READ sized by a stale cached depth and one sized by the depth it saw are
        // enough; the move's waits are bounded by other clients' progress (see `move_bucket`).
        // Found by the sweep point `retries-1` (max_retries = 1: the first READ came back with
        // a deeper directory and the split returned with the lock held).
        // Before the publish nothing has changed but the lock: a READ that fails (a transport
        // error) releases it (at the depth read above: only the lock's holder changes it).
        let unlock = release(layout::root_gd(w));
        if let Err(e) = self.synchronize_within(self.o.max_retries.max(2)).await {
            self.release_after_failed_read(unlock).await;
            return Err(e);
        }
        let (mut gd, e, used) = {
            let d = lock(&self.node.dir);
            let e = Entry::decode(d.entries[layout::suffix(kh.dir, d.gd) as usize]);
            let used: Vec<u8> = d.entries.iter().flat_map(|w| w.to_le_bytes()).collect();
            (d.gd, e, used)
        };
        let (s, d) = (e.subtable, e.ld);
        let i0 = layout::suffix(kh.dir, d) as usize;
        // Still full? Someone may have split or deleted meanwhile.
        let view = match self.read_view(s, kh, Vec::new()).await {
            Ok(view) => view,
            Err(e) => {
                self.release_after_failed_read(unlock).await;
                return Err(e);
            }
        };
        if free_slot(&g, &view, kh).is_some() || !self.view_correct(&view, d, kh) {
            self.counters.event(SPLIT_UNNEEDED);
            self.ctx.post(vec![release(gd)]).await?;
            return Ok(());
        }
        if d >= self.o.max_depth {
            self.ctx.post(vec![release(gd)]).await?;
            return Err(IndexError::Full);
        }
        let sibling = i0 | 1 << d;
        let node = NodeId((sibling % self.o.memory_nodes as usize) as u16);
        let t = match dmkit_rdma::alloc::alloc(&self.ctx, node, g.subtable_bytes() as u64, 64).await {
            Ok(t) => t,
            Err(err) => {
                self.ctx.post(vec![release(gd)]).await?;
                return Err(err.into());
            }
        };
        self.ctx.write(t, Buf::from(empty_subtable(&g, Header { ld: d + 1, suffix: sibling as u32 }))).await?;
        if d == gd {
            // Directory doubling: the used area is appended to itself (entries never move).
            self.ctx.write(entry_addr(1 << gd), Buf::from(used)).await?;
            gd += 1;
            self.ctx.write(root_addr(), Buf::from(layout::root_word(gd, true).to_le_bytes().to_vec())).await?;
            self.counters.event(DIRECTORY_DOUBLING);
        } else {
            // Several entries point at S: half of them move to T, no doubling.
            self.counters.event(SHALLOW_SPLIT);
        }
        let publish = |filling: bool| -> Vec<Request> {
            (i0..1usize << gd)
                .step_by(1 << d)
                .map(|j| {
                    let moving = (j >> d) & 1 == 1;
                    let ent = Entry { lock: moving && filling, ld: d + 1, subtable: if moving { t } else { s } };
                    Request::write(entry_addr(j), ent.encode().to_le_bytes().to_vec())
                })
                .collect()
        };
        self.ctx.post(publish(true)).await?;
        // Past the publish the split cannot be undone: READs that fail are tried again.
        let mut failed = 0;
        while let Err(e) = self.synchronize_within(self.o.max_retries.max(2)).await {
            self.split_read_failed(e, &mut failed)?;
        }
        for b in 0..g.buckets() {
            self.move_bucket(s, t, b, d, i0 as u32).await?;
        }
        self.ctx.post(publish(false)).await?;
        self.ctx.post(vec![release(gd)]).await?;
        self.counters.event(SPLIT);
        self.synchronize().await
    }

    /// Releases the directory lock a split took and could not go on with (a READ failed before
    /// the publish): `unlock` writes the root word as it was.
    async fn release_after_failed_read(&mut self, unlock: Request) {
        if self.planted(FAILED_READ_KEEPS_DIR_LOCK) {
            return;
        }
        self.counters.event(SPLIT_RELEASED_AFTER_FAILED_READ);
        let _ = self.ctx.post(vec![unlock]).await;
    }

    /// A READ of a split past its publish failed: a transport failure (`Timeout`) is tried again,
    /// at most `max(max_retries, 8)` times per bucket or phase; anything else (a node down) is
    /// passed up, and the split stays half done.
    fn split_read_failed(&mut self, e: IndexError, failed: &mut u32) -> Result<(), IndexError> {
        *failed += 1;
        let transient = matches!(e, IndexError::Verbs(VerbsError::Timeout(_)));
        if !transient || *failed > self.o.max_retries.max(8) || self.planted(FAILED_READ_ABANDONS_SPLIT) {
            return Err(e);
        }
        self.counters.event(SPLIT_READ_RETRIED);
        Ok(())
    }

    /// READs `len` bytes at `at` for a split past its publish, trying failed READs again.
    async fn read_in_split(&mut self, at: RemoteAddr, len: usize, failed: &mut u32) -> Result<Buf, IndexError> {
        loop {
            match self.ctx.read(at, Buf::zeroed(len)).await {
                Ok(buf) => return Ok(buf),
                Err(e) => self.split_read_failed(e.into(), failed)?,
            }
        }
    }

    /// Moves bucket `b` of subtable `s` (local depth `d`, suffix `i0`): (1) CAS its header to
    /// depth `d + 1` with the bucket read in the same batch (the READ sees the CAS), (2) for
    /// every item whose key has bit `d` set, freeze its slot, copy the word into the same
    /// bucket of `t`, and (3) clear the slot. A frozen slot's CAS from the plain word fails, so
    /// no write lands on an item in flight; searches read frozen items as usual.
    ///
    /// Its waits are not bounded by `max_retries` (the split holds the directory lock and
    /// cannot be undone, see [`Self::resize`]): the header CAS waits for an insert lock, which
    /// its holder keeps for one round trip and never waits under; a freeze CAS fails only
    /// because a write to the item succeeded since the READ.
    async fn move_bucket(&mut self, s: RemoteAddr, t: RemoteAddr, b: usize, d: u8, i0: u32) -> Result<(), IndexError> {
        let g = self.g;
        let at = s.add(g.bucket_at(b) as u64);
        let (old, new) = (Header { ld: d, suffix: i0 }.encode(), Header { ld: d + 1, suffix: i0 }.encode());
        let mut failed = 0;
        let slots = loop {
            let done =
                self.ctx.post_keeping(vec![Request::cas(at, old, new), Request::read_len(at, g.bucket_bytes())]).await;
            let mut r = done.completed.into_iter();
            let seen = match r.next() {
                Some(cas) => cas.atomic()?,
                // Nothing completed: the CAS did not happen; try again.
                None => {
                    self.split_read_failed(done.error.expect("a failed batch").into(), &mut failed)?;
                    continue;
                }
            };
            if seen == old {
                let buf = match (r.next(), done.error) {
                    (Some(read), _) => read.into_buf()?,
                    // The CAS moved the header and the READ failed: read the bucket alone.
                    (None, Some(e)) => {
                        self.split_read_failed(e.into(), &mut failed)?;
                        self.read_in_split(at, g.bucket_bytes(), &mut failed).await?
                    }
                    (None, None) => unreachable!("a batch that did not fail completes every verb"),
                };
                break (0..g.slots).map(|i| buf.u64_at(8 + 8 * i)).collect::<Vec<u64>>();
            }
            if let Some(e) = done.error {
                // The CAS found the header taken and the READ failed: as a lost CAS, try again.
                self.split_read_failed(e.into(), &mut failed)?;
            }
            // An insert holds this bucket's lock bit.
            self.counters.event(SPLIT_WAITS_INSERT_LOCK);
            self.counters.lock_failures += 1;
            self.ctx.yield_now().await;
        };
        let t_at = t.add(g.bucket_at(b) as u64);
        let mut next_free = 0;
        for (i, mut w) in slots.into_iter().enumerate() {
            let slot_at = at.add(8 + 8 * i as u64);
            while let Some(slot) = Slot::decode(w) {
                let block = self.read_in_split(slot.block, slot.bytes(), &mut failed).await?;
                let Some((key, _)) = layout::decode_block(block.as_slice()) else {
                    if self.o.paper.reuse {
                        // Replaced and reclaimed since the READ: look at the slot again.
                        w = self.read_in_split(slot_at, 8, &mut failed).await?.u64_at(0);
                        continue;
                    }
                    return Err(IndexError::Corrupt(format!("split: an invalid block at {}", slot.block)));
                };
                let kh = g.hash(key);
                if (kh.dir >> d) & 1 == 0 {
                    break;
                }
                if self.o.paper.split {
                    // The paper's steps 2 and 3 without a freeze. If the clear fails, the item
                    // was updated or deleted since the copy: take the copy back and decide
                    // again on what the slot holds now (digest §3.5). Meanwhile the copy was
                    // visible in the new subtable (K5), and writes there raced this one (K4).
                    let placed = self.place(t, b, &kh, w).await?;
                    let seen = self.ctx.cas(slot_at, w, 0).await?;
                    if seen == w {
                        self.counters.event(ITEM_MOVED);
                        break;
                    }
                    self.counters.event(MOVE_REDONE);
                    self.ctx.cas(placed, w, 0).await?;
                    w = seen;
                    continue;
                }
                let freeze = !self.planted(NO_FREEZE);
                if freeze {
                    let seen = self.ctx.cas(slot_at, w, w | layout::FROZEN).await?;
                    if seen != w {
                        // Updated, deleted, or replaced since the READ: decide again.
                        self.counters.event(FREEZE_RETRY);
                        w = seen;
                        continue;
                    }
                }
                if !self.cas(t_at.add(8 + 8 * next_free as u64), 0, w).await? {
                    return Err(IndexError::Corrupt(
                        "split: a slot of the new subtable was taken while filling".into(),
                    ));
                }
                next_free += 1;
                let moving = if freeze { w | layout::FROZEN } else { w };
                if !self.cas(slot_at, moving, 0).await? && freeze {
                    return Err(IndexError::Corrupt("split: a frozen slot changed".into()));
                }
                self.counters.event(ITEM_MOVED);
                break;
            }
        }
        Ok(())
    }

    /// `paper.split`: puts `word` (an item of bucket `b` moving to `t`) into a free slot of
    /// bucket `b` of `t`, or, when inserts into the filling subtable took them all, of the
    /// key's combined buckets there (D16). Returns the slot's address.
    async fn place(&mut self, t: RemoteAddr, b: usize, kh: &KeyHash, word: u64) -> Result<RemoteAddr, IndexError> {
        let g = self.g;
        assert!(b < g.buckets(), "bucket {b} outside the subtable's {}", g.buckets());
        let at = t.add(g.bucket_at(b) as u64);
        for _ in 0..self.o.max_retries {
            let raw = self.ctx.read(at, Buf::zeroed(g.bucket_bytes())).await?;
            assert_eq!(raw.len(), g.bucket_bytes(), "a READ returns the bytes asked");
            let target = match (0..g.slots).find(|&i| raw.u64_at(8 + 8 * i) == 0) {
                Some(i) => at.add(8 + 8 * i as u64),
                None => {
                    let view = self.read_view(t, kh, Vec::new()).await?;
                    let pos = free_slot(&g, &view, kh).ok_or_else(|| {
                        IndexError::Corrupt(
                            "split: inserts filled the new subtable while it was being filled (paper mode)".into(),
                        )
                    })?;
                    view.slot_addr(&g, pos)
                }
            };
            if self.cas(target, 0, word).await? {
                return Ok(target);
            }
        }
        Err(self.retries_exhausted("split"))
    }

    /// Safe mode's insert of a key found absent: take the insert lock of its lower main bucket
    /// (a bit in that bucket's header) with the combined buckets read in the same batch (an RMW
    /// is seen by later READs of its QP), then `[CAS slot, WRITE unlock]`. Inserts of one key
    /// serialise on the lock, so no duplicate is ever published; searches, updates and deletes
    /// never take it. `target` is the free slot `seen` offers. `None`: retry from the start.
    async fn insert_locked(
        &mut self,
        kh: &KeyHash,
        key: &[u8],
        e: Entry,
        seen: &View,
        target: (usize, usize),
        mine: u64,
    ) -> Result<Option<bool>, IndexError> {
        let g = self.g;
        // The key's lock bucket, and the bucket its slot will be in: a split's header CAS on
        // that bucket (step 1) then cannot fall between this insert's READ and its slot CAS.
        let lock_bucket = g.main_of(kh.idx[0].min(kh.idx[1]));
        let mut locked: Vec<usize> = vec![lock_bucket];
        if !self.planted(NO_TARGET_LOCK) {
            locked.push(target.0);
        }
        locked.dedup();
        let header_of =
            |b: usize| seen.buckets.iter().find(|(x, _, _)| *x == b).map(|(_, h, _)| h.encode()).expect("read");
        // The WRITE that releases bucket `b`'s insert lock: its header as read, unlocked.
        let unlock_of =
            |b: usize| Request::write(e.subtable.add(g.bucket_at(b) as u64), header_of(b).to_le_bytes().to_vec());
        let cas: Vec<Request> = locked
            .iter()
            .map(|&b| {
                Request::cas(e.subtable.add(g.bucket_at(b) as u64), header_of(b), header_of(b) | layout::LOCK_BIT)
            })
            .collect();
        let (view, pre) = match self.read_view_after(e.subtable, kh, cas, Vec::new()).await {
            Ok(x) => x,
            Err((err, pre)) => {
                // A READ of the batch failed: release the insert locks its CASes took (a lock
                // word is the header with the lock bit, so only the CAS's answer says it is ours).
                let release: Vec<Request> = locked
                    .iter()
                    .zip(pre)
                    .filter(|(b, r)| r.as_ref().and_then(|r| r.atomic().ok()) == Some(header_of(**b)))
                    .map(|(&b, _)| unlock_of(b))
                    .collect();
                if !release.is_empty() && !self.planted(FAILED_READ_KEEPS_INSERT_LOCK) {
                    self.counters.event(INSERT_UNLOCKED_AFTER_FAILED_READ);
                    let _ = self.ctx.post(release).await;
                }
                return Err(err);
            }
        };
        let mut unlock = Vec::new();
        let mut all = true;
        for (&b, r) in locked.iter().zip(pre) {
            if r.atomic()? == header_of(b) {
                unlock.push(unlock_of(b));
            } else {
                all = false;
            }
        }
        if !all {
            self.counters.event(INSERT_LOCK_BUSY);
            self.counters.lock_failures += 1;
            if !unlock.is_empty() {
                self.ctx.post(unlock).await?;
            }
            self.ctx.yield_now().await;
            return Ok(None);
        }
        let copies = match self.copies(&view, kh, key).await {
            Ok(c) => c,
            Err(err) => {
                self.ctx.post(unlock).await?;
                return Err(err);
            }
        };
        let free = view.buckets.iter().find(|(b, _, _)| *b == target.0).is_some_and(|(_, _, s)| s[target.1] == 0);
        let changed = if !self.view_correct(&view, e.ld, kh) {
            Some(INSERT_BUCKET_MOVED)
        } else if !copies.is_empty() {
            Some(INSERT_KEY_APPEARED)
        } else if !free {
            Some(INSERT_SLOT_TAKEN)
        } else {
            None
        };
        if let Some(why) = changed {
            self.counters.event(why);
            self.ctx.post(unlock).await?;
            return Ok(None);
        }
        let mut batch = vec![Request::cas(view.slot_addr(&g, target), 0, mine)];
        batch.extend(unlock);
        let done = self.ctx.post(batch).await?;
        let published = done.into_iter().next().expect("the CAS").atomic()? == 0;
        if !published {
            // Only a client that locked this bucket writes a word into one of its empty slots:
            // other inserts hold its lock first, updates and the mover's freeze CAS from a
            // published word, deletes write 0, and a safe-mode mover fills only a new subtable,
            // which no write uses before it is unlocked. So the CAS cannot lose unless a
            // protection was removed. Under `paper-split` the mover places items in a subtable
            // writes are using (D16), and the CAS can lose: insert again.
            if !self.o.paper.split {
                return Err(IndexError::Corrupt("insert: a locked bucket's free slot was taken".into()));
            }
            self.counters.cas_failures += 1;
        }
        Ok(published.then_some(false))
    }

    /// A block whose pointer left its slot. Safe mode never reuses it (deferred reclamation
    /// taken to the limit: no reader can still be on its way to it). The faithful mode does what
    /// the paper does: zero it and give it back to this compute node's allocator, which hands
    /// it to the next block of its size at once (digest K1, K2).
    async fn retire(&mut self, word: u64) -> Result<(), IndexError> {
        if !self.o.paper.reuse {
            return Ok(());
        }
        let slot = Slot::decode(word).expect("a published word");
        self.ctx.write(slot.block, Buf::from(vec![0u8; slot.bytes()])).await?;
        if self.node.chunks.owns(slot.block) {
            self.node.chunks.free(slot.block, slot.bytes() as u64)?;
            self.counters.event(BLOCK_REUSED);
        } else {
            // Carved by another compute node's allocator: zeroed as the paper does, not reused.
            self.counters.event(FOREIGN_BLOCK_ZEROED);
        }
        Ok(())
    }

    /// Round trip 3 of Algorithm 1 (`paper.insert`): re-read both combined buckets; clear every
    /// copy of `key` but the lowest (physical bucket, slot) (RemoveDuplicate); then the resize
    /// check: if the header of our bucket changed from `seen` and no longer admits the key, a
    /// split's step 1 came between our READ and our CAS and its mover did not see our slot, so
    /// take it back (RemoveKey). `false`: taken back, insert again; if the take-back fails, the
    /// mover did move it (D13) and the insert is done.
    async fn remove_duplicates(
        &mut self,
        kh: &KeyHash,
        key: &[u8],
        e: Entry,
        mine: (usize, usize),
        seen: Header,
        word: u64,
    ) -> Result<bool, IndexError> {
        let g = self.g;
        let view = self.read_view(e.subtable, kh, Vec::new()).await?;
        let now = view.buckets.iter().find(|(b, _, _)| *b == mine.0).map(|(_, h, _)| *h).expect("read");
        if now.ld != seen.ld && !layout::bucket_correct(e.ld, now, kh.dir) && !self.planted(NO_RESIZE_CHECK) {
            return Ok(!self.cas(view.slot_addr(&g, mine), word, 0).await?);
        }
        if view.matches(kh.fp).iter().all(|(p, _)| *p == mine) {
            // No other fingerprint match: no block to read (3 round trips in all).
            return Ok(true);
        }
        for c in self.copies(&view, kh, key).await?.iter().skip(1) {
            if self.cas(view.slot_addr(&g, c.pos), c.word, 0).await? {
                self.counters.event(DUPLICATE_REMOVED);
            }
        }
        Ok(true)
    }

    /// Update (`Some`) or delete (`None`) of an existing key; `false` if absent.
    async fn do_modify(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<bool, IndexError> {
        let limits = Race::limits(&self.o);
        limits.check_key(key)?;
        if let Some(v) = value {
            limits.check_value(v)?;
        }
        let g = self.g;
        let kh = g.hash(key);
        // An update's block is written in the first round trip, with the bucket READs.
        let (block, mut write) = match value {
            Some(v) => {
                let (slot, write) = self.new_block(key, v, kh.fp).await?;
                (Some(slot), Some(write))
            }
            None => (None, None),
        };
        for _ in 0..self.o.max_retries {
            let Some((view, copies)) = self.find(key, &kh, &mut write).await? else {
                if self.o.paper.printed {
                    // The printed Algorithms 2 and 3 return SUCCESS for an absent key, and the
                    // update's block is never freed (K7).
                    return Ok(true);
                }
                if let Some(b) = block {
                    // D12: never published, so nobody can reach it: reuse it at once.
                    self.node.chunks.free(b.block, b.bytes() as u64)?;
                }
                return Ok(false);
            };
            let first = &copies[0];
            match block {
                Some(b) => {
                    let new = b.encode();
                    if self.cas(view.slot_addr(&g, first.pos), first.word, new).await? {
                        self.retire(first.word).await?;
                        return Ok(true);
                    }
                    self.counters.event(UPDATE_CAS_FAILED);
                }
                None => {
                    // Delete every copy (an insert in flight may have published one).
                    let mut any = false;
                    for c in &copies {
                        if self.cas(view.slot_addr(&g, c.pos), c.word, 0).await? {
                            self.retire(c.word).await?;
                            any = true;
                        }
                    }
                    if any {
                        return Ok(true);
                    }
                    self.counters.event(DELETE_CAS_FAILED);
                }
            }
        }
        Err(self.retries_exhausted(if value.is_some() { "update" } else { "delete" }))
    }
}

/// Checks that no copy a write is about to act on is frozen by a split. A write never waits for
/// a frozen copy, because its view cannot show one: a split freezes only items whose key has
/// bit `d` set (they move to the new subtable), and only after its CAS set their bucket's
/// header to depth `d + 1` and suffix `i0` (bit `d` clear). A view takes each header no earlier
/// than the bucket's slots (one cache line, or the fenced re-read), so a frozen copy comes with
/// that header, which admits the key for no entry a client can hold: `d + 1` is not the depth
/// of the entry before the publish (`d`), and after it the key's entry points at the new
/// subtable. So a frozen copy in a view is a broken protocol (plant `no-header-recheck`).
fn settled(copies: &[Copy]) -> Result<(), IndexError> {
    match copies.iter().find(|c| c.word & layout::FROZEN != 0) {
        Some(c) => Err(IndexError::Corrupt(format!(
            "a write's view admits its key and shows its copy at {:?} frozen by a split",
            c.pos
        ))),
        None => Ok(()),
    }
}

/// A free slot for a new key (D7): the less-loaded combined bucket (ties: the lower one), main
/// bucket first, then the overflow bucket.
fn free_slot(g: &Geometry, view: &View, kh: &KeyHash) -> Option<(usize, usize)> {
    let load = |i: usize| {
        view.buckets[2 * i..2 * i + 2].iter().map(|(_, _, s)| s.iter().filter(|&&w| w != 0).count()).sum::<usize>()
    };
    let mut order = [0usize, 1];
    if load(1) < load(0) || (load(1) == load(0) && g.combined_first(kh.idx[1]) < g.combined_first(kh.idx[0])) {
        order = [1, 0];
    }
    for i in order {
        let main = g.main_of(kh.idx[i]);
        let mut pair: Vec<&(usize, Header, Vec<u64>)> = view.buckets[2 * i..2 * i + 2].iter().collect();
        pair.sort_by_key(|(b, _, _)| *b != main);
        for (b, _, slots) in pair {
            if let Some(s) = slots.iter().position(|&w| w == 0) {
                return Some((*b, s));
            }
        }
    }
    None
}

impl<C: Client + Clone + 'static> Index for RaceHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.do_search(key).await
    }

    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        match &change {
            Change::Upsert(value) => self.do_insert(key, value).await,
            Change::Update(value) => self.do_modify(key, Some(value)).await,
            Change::Delete => self.do_modify(key, None).await,
        }
    }

    async fn scan(&mut self, _: Bound<&[u8]>, _: Bound<&[u8]>, _: usize) -> Result<Pairs, IndexError> {
        Err(IndexError::Unsupported("RACE is a hash table: no range scans"))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

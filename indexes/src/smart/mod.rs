//! # SMART: the adaptive radix tree for disaggregated memory (OSDI '23, TOS '24)
//!
//! Digest: `shared/digests/smart.md`. A radix tree over one-sided verbs with 8-bit partial keys
//! and pessimistic path compression (up to 6 partials per 8-byte header):
//!
//! - **Internal nodes are lock-free.** Every node is allocated at full capacity (256 slots) and
//!   only its type's prefix is read; a slot is an 8-byte word holding its partial, so one CAS
//!   publishes a child together with its key byte. A full node switches type in place: the new
//!   slot is CASed behind the old capacity, then the type is raised in the parent's slot (CAS)
//!   and in the header (masked CAS on the type bits), monotonically. Leaf and header splits
//!   write new NODE_4s (and the new leaf) first, then swing the parent slot with one CAS.
//! - **Leaves are locked and updated in place.** One key per leaf; the lock is the leaf's last
//!   word, so one WRITE of `checksum‖key‖value‖lock=0` writes and unlocks (the RNIC places a
//!   WRITE's bytes in address order). Readers never lock: they check the CRC-64.
//! - **Reverse check.** Every node and leaf holds the address of the slot that points to it; a
//!   client that reached it through a cached slot trusts it only if the two agree.
//! - **RDWC** ([`crate::common::rdwc`]): same-key searches of one compute node share one remote
//!   search; same-key writes are combined into one WRITE.
//! - **Radix cache** ([`cache`]): snapshots of internal nodes keyed by their byte path.
//!
//! ## Operations (digest §3; verbs and sizes in its §3.10 table)
//!
//! - **search**: from the deepest cached slot (or the 8-byte root slot), READ node by node
//!   (`16 + 8·capacity` bytes) to the leaf (`leaf_bytes`): one READ with a warm cache.
//! - **insert**: as search, then one of: WRITE leaf + CAS into an empty slot (or onto a
//!   tombstone of the same partial, or onto a dead leaf); a leaf split or header split
//!   (batched WRITEs of the new nodes and leaf, the parent CAS, the moved child's
//!   reverse-pointer CAS, and for a header split the header trim); a type switch.
//! - **update** of an existing key: lock CAS on the rear word, one WRITE. Upserts do the same.
//! - **delete**: lock, WRITE the rear word with the dead bit (the linearization point), clear
//!   the valid byte, CAS the slot to a tombstone that keeps the partial (digest H5, H9).
//! - **scan**: depth-first from the root slot (not from cached slots, as the artifact does),
//!   children in partial order, leaf READs of a node batched per memory node; per-key correct,
//!   not atomic (as the paper).
//!
//! ## Protections, on by default (each one's removal is a planted bug the tests find)
//!
//! - H1, stronger than the digest's fix: a split moves the child's reverse pointer to its new
//!   parent slot *before* the publishing CAS (and back if the CAS fails; a concurrent split of the
//!   same child waits). Awaiting it after the publish, as the digest recommends, is not enough:
//!   another client's insert through the new node can return first, and a stale cached copy of
//!   the old slot then still passes the reverse check. Plants `rev-cas-unsignaled` (the
//!   artifact) and `rev-cas-after-publish` (the digest's fix).
//! - H2: readers never "repair" reverse pointers.
//! - H3: an in-place update writes from the checksum on, never the reverse pointer or valid
//!   byte it read before locking. Plant `full-leaf-write`.
//! - H4, H9: the lock has its own word, with a dead bit that deletes set under the lock.
//! - H5: deletes leave tombstones; inserts reuse only a tombstone of their own partial. Plant
//!   `delete-to-null`.
//! - H6, stronger than the digest's fix: a delegating leader marks before every READ, slot
//!   reads included, and unmarks when its last READ did not decide the result alone (a leaf or
//!   node whose reverse pointer is not the slot it was reached from). Plants `rdwc-late-mark`
//!   (the paper's window) and `rdwc-no-unmark` (the digest's fix). H7 is fixed in `common::rdwc`.
//!   The configuration `smart-paper` runs the paper's window on purpose (both plants' behaviour,
//!   `SmartOptions::paper_read_window`), so that figures can show the paper's protocol beside
//!   the safe one: it delegates 4.7% of YCSB C's searches at Fig. 14's 512 clients, the safe
//!   window 0.1%.
//! - Out-of-place updates (ART) retire the old leaf before the slot CAS; a retired leaf whose
//!   slot still points to it is current. Plant `retire-after-publish` (index `art`).
//! - A writer that finds its partial in a slot behind a node's capacity finishes that type
//!   switch before acting on it (else it could update a key searches cannot see yet).
//! - H10: a failed header trim retries with the fresh header.
//! - H12: merges are not done (digest v1): empty nodes stay.
//! - Also plants `no-reverse-check` and `no-checksum`.
//!
//! ## Deviations
//!
//! - Pointers are 64-byte aligned (digest §8.8), and nodes and leaves are allocated at 64-byte
//!   alignment, not the artifact's 256 (a leaf of 8-byte keys and values takes 64 bytes, not
//!   256): `alloc_align=256` allocates as the artifact does, for footprints (Dolphin's Table II
//!   runs both); nothing read or written changes. The leaf is up to 7 bytes longer than the
//!   paper's (the lock word, H4).
//! - A split's new nodes and leaf go to one memory node, so their WRITEs are one doorbell batch.
//! - A combined write's "no change needed" shortcut (equal value) is not taken: a follower that
//!   joined after the leader's READ could otherwise be linearized before it started.
//! - Variable-size leaves (§2.9) are not built: keys and values have the configured sizes.

pub mod cache;
pub mod config;
pub mod invariants;
pub mod layout;
pub mod presets;

use crate::art::{LATE_HANDOVER, NO_NODE_LOCKS, RETIRE_AFTER_PUBLISH};
use crate::common::bounds::{above_start, below_end, in_bounds};
use crate::common::change::{Change, Reply, fold};
use crate::common::change::{
    Combined, RDWC_READ_FALLBACK_HANDLER, RDWC_WRITE_FALLBACK_HANDLER, RDWC_WRITE_QUEUED_HANDLER, replies, search_via,
    write_via,
};
use crate::common::chunk::LocalChunkAllocator;
use crate::common::hocl::{HOCL_HANDED_OVER, HOCL_LOCK_FAILED, HoclHeld, LocalLockTable, acquire_global};
use crate::common::rdwc::{Rdwc, ReadLeader, WriteLeader};
use crate::common::warm::{byte_run, matching_run};
use crate::hash::hash64;
use crate::registry::RunShape;
use crate::{Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug, RaceHandler};
use cache::{CacheEntry, RadixCache};
pub use config::SmartOptions;
use dmkit_rdma::{Buf, Caps, Client, CpuWork, Fixed, MemoryView, NodeId, RemoteAddr, Request};
use layout::{CHECKSUM_AT, DEAD_BIT, Header, LOCK_BIT, Leaf, LeafGeometry, NodeTypes, Slot, TYPE_MASK};
use layout::{VALID_AT, kb, node_slots};
use std::ops::Bound;
use std::sync::Arc;

/// The root slot and superblock on memory node 0: `[root slot u64][magic u64][key u32][value u32]`.
const SUPERBLOCK: Fixed = Fixed::new(8192, 24);
pub const SUPERBLOCK_OFFSET: u64 = SUPERBLOCK.offset();
const MAGIC: u64 = u64::from_le_bytes(*b"DMKSMRT1");
/// ART's node-lock table when the NIC has no device memory (the reserved region, as Sherman).
const HOST_LOCK_TABLE: Fixed = Fixed::new(512 << 10, 256 << 10);
const HOST_LOCK_TABLE_AT: u64 = HOST_LOCK_TABLE.offset();
const HOST_LOCK_TABLE_MAX: u64 = HOST_LOCK_TABLE.bytes();
const _: () = assert!(SUPERBLOCK.disjoint(HOST_LOCK_TABLE), "the host lock table is clear of the superblock");
const LOCK_HASH_SEED: u64 = 0x0a47_10c4;

pub fn root_slot_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

// The events SMART and ART count (`Counters::event`), the race handlers' first.
/// A node or leaf reached through a slot did not fit it (a stale route): the slot is read again.
pub const STALE_ROUTE: &str = "stale_route";
/// A node's header type was larger than its slot's: the rest of the node was read.
pub const TYPE_STALE_READ: &str = "type_stale_read";
/// A leaf READ overlapped an in-place update (checksum mismatch): the leaf is read again.
pub const TORN_LEAF: &str = "torn_leaf";
/// A leaf read dead or retired had its slot changed meanwhile: the new slot is followed.
pub const LEAF_MOVED: &str = "leaf_moved";
/// An insert published over the slot of a dead leaf its delete had not unlinked yet.
pub const DEAD_LEAF_REPLACED: &str = "dead_leaf_replaced";
/// An insert's CAS into an empty node slot lost to another insert: it tries the next slot.
pub const SLOT_TAKEN: &str = "slot_taken";
/// An insert's slot CAS lost: it starts again from the new slot value.
pub const PUBLISH_LOST: &str = "publish_lost";
/// A write with nothing to insert found the empty slot taken on re-reading it: it starts again.
pub const ABSENCE_CHANGED: &str = "absence_changed";
/// A write with nothing to insert, on a split's path, found the slot changed: it starts again.
pub const SPLIT_ABSENCE_CHANGED: &str = "split_absence_changed";
/// A write finished a node's type switch before acting on its partial.
pub const TYPE_SWITCH_HELPED: &str = "type_switch_helped";
/// (ART) A write without the node's lock found its partial behind the node's capacity: it
/// waits for the inserter, which holds the lock, to switch the type.
pub const TYPE_SWITCH_AWAITED: &str = "type_switch_awaited";
/// A split's publishing CAS on the parent slot lost: it undoes its work and starts again.
pub const SPLIT_LOST: &str = "split_lost";
/// A split could not move the child's reverse pointer and the parent slot changed: it starts again.
pub const SPLIT_SLOT_CHANGED: &str = "split_slot_changed";
/// A split found the child's reverse pointer moved by another unpublished split: it waits.
pub const REV_CAS_WAIT: &str = "rev_cas_wait";
/// A header split's trim CAS lost to another change of the header: it trims again.
pub const TRIM_RETRY: &str = "trim_retry";
/// A type switch followed a split above its node down to the node's new slot.
pub const TYPE_SWITCH_FOLLOWED: &str = "type_switch_followed";
/// A type switch's CAS on the parent slot or the header lost: it tries again.
pub const TYPE_SWITCH_RETRY: &str = "type_switch_retry";
/// A scan reached a node that did not fit its slot: it reads the slot again.
pub const SCAN_REREAD: &str = "scan_reread";
/// An in-place update's leaf lock CAS found the leaf locked by another writer.
pub const LEAF_LOCK_BUSY: &str = "leaf_lock_busy";
/// An in-place update's lock CAS found the leaf deleted since it was read.
pub const LOCK_FOUND_DEAD: &str = "lock_found_dead";
/// A delete's tombstone CAS lost to a split that moved the dead leaf: it follows the leaf.
pub const UNLINK_FOLLOWED: &str = "unlink_followed";
/// An out-of-place update's slot CAS lost to another update or delete of the key.
pub const RCU_LOST: &str = "rcu_lost";
/// A traversal started from a slot found in the radix cache.
pub const CACHE_HIT: &str = Counters::CACHE_HIT;
/// A traversal found nothing for its key in the radix cache and started from the root.
pub const CACHE_MISS: &str = Counters::CACHE_MISS;
/// Radix-cache entries held at the end of a run, summed over compute nodes (a node counter).
pub const CACHE_ENTRIES: &str = "cache_entries";
/// Entries evicted by the budget (a node counter).
pub const CACHE_EVICTIONS: &str = "cache_evictions";
/// Times a cache with kept slots was dropped whole (a node counter; `keep_slots`).
pub const CACHE_REBUILDS: &str = "cache_rebuilds";
/// A cache entry found stale (a stale route, a node type changed) was dropped.
pub const CACHE_INVALIDATED: &str = "cache_invalidated";
/// A write found a tombstone where its key belongs and publishes over it.
pub const TOMBSTONE_REUSED: &str = "tombstone_reused";
/// An insert's slot CAS published its new leaf.
pub const INSERT_PUBLISHED: &str = "insert_published";
/// An out-of-place update (or delete) swung its key's slot to a new leaf (or a tombstone).
pub const RCU_UPDATE: &str = "rcu_update";
/// An update written into its leaf under the leaf lock.
pub const UPDATE_IN_PLACE: &str = "update_in_place";
/// A delete that marked its leaf dead under the leaf lock and unlinked it.
pub const DELETE: &str = "delete";
/// A split that published a new node above a node's header (a prefix split).
pub const HEADER_SPLIT: &str = "header_split";
/// A split of a leaf's slot into a new node holding the old leaf and the new key.
pub const LEAF_SPLIT: &str = "leaf_split";
/// A node switched to a larger type (its header and parent slot CASed).
pub const TYPE_SWITCH: &str = "type_switch";
/// An ART node unlock handed the held lock to a local waiter instead of releasing it.
pub const LOCK_HAND_OVER: &str = "lock_hand_over";

// The branches that exist because another client got there first, by the event each counts.
const STALE_ROUTE_HANDLER: RaceHandler = RaceHandler {
    event: STALE_ROUTE,
    race: "a node or leaf reached through a cached or just-read slot does not fit it (reverse pointer, depth, deleted node): the slot is read again",
};
const TYPE_STALE_READ_HANDLER: RaceHandler = RaceHandler {
    event: TYPE_STALE_READ,
    race: "a node's header type is larger than its slot's (a type switch raised the header first): the rest of the node is read",
};
const TORN_LEAF_HANDLER: RaceHandler = RaceHandler {
    event: TORN_LEAF,
    race: "a leaf READ overlapped an in-place update (checksum mismatch): the leaf is read again",
};
const LEAF_MOVED_HANDLER: RaceHandler = RaceHandler {
    event: LEAF_MOVED,
    race: "a leaf read dead or retired had its slot changed meanwhile (a delete's unlink, an update's swing): the new slot is followed",
};
const DEAD_LEAF_REPLACED_HANDLER: RaceHandler = RaceHandler {
    event: DEAD_LEAF_REPLACED,
    race: "an insert met a dead leaf whose delete has not unlinked it yet: it publishes over the dead leaf's slot",
};
const SLOT_TAKEN_HANDLER: RaceHandler = RaceHandler {
    event: SLOT_TAKEN,
    race: "an insert's CAS into an empty node slot lost to another partial's insert: it tries the next slot",
};
const PUBLISH_LOST_HANDLER: RaceHandler = RaceHandler {
    event: PUBLISH_LOST,
    race: "an insert's slot CAS lost (another insert, split or delete changed the slot): it starts again from the new slot value",
};
const ABSENCE_CHANGED_HANDLER: RaceHandler = RaceHandler {
    event: ABSENCE_CHANGED,
    race: "a write with nothing to insert re-read the empty slot after its window closed and found it taken: it starts again from the new value",
};
const SPLIT_ABSENCE_CHANGED_HANDLER: RaceHandler = RaceHandler {
    event: SPLIT_ABSENCE_CHANGED,
    race: "a write with nothing to insert, on a split's path, re-read the slot after its window closed and found it changed: it starts again",
};
const TYPE_SWITCH_HELPED_HANDLER: RaceHandler = RaceHandler {
    event: TYPE_SWITCH_HELPED,
    race: "a write found its partial behind a node's capacity before the inserter switched the type: it finishes the switch first (else it acts on a key searches miss)",
};
const TYPE_SWITCH_AWAITED_HANDLER: RaceHandler = RaceHandler {
    event: TYPE_SWITCH_AWAITED,
    race: "(node locks) a write that does not hold the node's lock found its partial behind the node's capacity before the inserter, which holds it, switched the type: it waits and reads the slot again, rather than switch without the lock (a second switcher would meet the inserter's CAS)",
};
const SPLIT_LOST_HANDLER: RaceHandler = RaceHandler {
    event: SPLIT_LOST,
    race: "a split's publishing CAS on the parent slot lost: it moves the child's reverse pointer back, frees its nodes and starts again",
};
const SPLIT_SLOT_CHANGED_HANDLER: RaceHandler = RaceHandler {
    event: SPLIT_SLOT_CHANGED,
    race: "a split could not move the child's reverse pointer and the parent slot changed meanwhile: it frees its nodes and starts again",
};
const REV_CAS_WAIT_HANDLER: RaceHandler = RaceHandler {
    event: REV_CAS_WAIT,
    race: "a split found the child's reverse pointer moved by another split of the same child that has not published: it waits",
};
const TRIM_RETRY_HANDLER: RaceHandler = RaceHandler {
    event: TRIM_RETRY,
    race: "a header split's trim CAS lost to another change of the header: it trims again from the fresh header (digest H10)",
};
const TYPE_SWITCH_FOLLOWED_HANDLER: RaceHandler = RaceHandler {
    event: TYPE_SWITCH_FOLLOWED,
    race: "a type switch found the node's parent slot moved by a split above it: it follows the new nodes' slot 0 down to the node",
};
const TYPE_SWITCH_RETRY_HANDLER: RaceHandler = RaceHandler {
    event: TYPE_SWITCH_RETRY,
    race: "a type switch's CAS on the parent slot or the header lost to another change: it tries again with the value it read",
};
const SCAN_REREAD_HANDLER: RaceHandler = RaceHandler {
    event: SCAN_REREAD,
    race: "a scan reached a node that does not fit its slot (deleted, or a split moved it): it reads the slot again",
};
const LEAF_LOCK_BUSY_HANDLER: RaceHandler = RaceHandler {
    event: LEAF_LOCK_BUSY,
    race: "an in-place update's leaf lock CAS found the leaf locked by another writer: it CASes again",
};
const LOCK_FOUND_DEAD_HANDLER: RaceHandler = RaceHandler {
    event: LOCK_FOUND_DEAD,
    race: "an in-place update's lock CAS found the leaf deleted since it was read: it reads the slot again",
};
const UNLINK_FOLLOWED_HANDLER: RaceHandler = RaceHandler {
    event: UNLINK_FOLLOWED,
    race: "a delete's tombstone CAS lost because a split moved the dead leaf down: it follows the leaf to its new slot",
};
const RCU_LOST_HANDLER: RaceHandler = RaceHandler {
    event: RCU_LOST,
    race: "an out-of-place update's slot CAS lost to another update or delete of the key: it starts again from the new slot value",
};

/// SMART's race handlers (configuration `smart`: lock-free nodes, in-place updates, RDWC).
pub const RACE_HANDLERS: [RaceHandler; 22] = [
    STALE_ROUTE_HANDLER,
    TYPE_STALE_READ_HANDLER,
    TORN_LEAF_HANDLER,
    LEAF_MOVED_HANDLER,
    DEAD_LEAF_REPLACED_HANDLER,
    SLOT_TAKEN_HANDLER,
    PUBLISH_LOST_HANDLER,
    ABSENCE_CHANGED_HANDLER,
    SPLIT_ABSENCE_CHANGED_HANDLER,
    TYPE_SWITCH_HELPED_HANDLER,
    SPLIT_LOST_HANDLER,
    SPLIT_SLOT_CHANGED_HANDLER,
    REV_CAS_WAIT_HANDLER,
    TRIM_RETRY_HANDLER,
    TYPE_SWITCH_FOLLOWED_HANDLER,
    TYPE_SWITCH_RETRY_HANDLER,
    SCAN_REREAD_HANDLER,
    LEAF_LOCK_BUSY_HANDLER,
    LOCK_FOUND_DEAD_HANDLER,
    UNLINK_FOLLOWED_HANDLER,
    RDWC_READ_FALLBACK_HANDLER,
    RDWC_WRITE_FALLBACK_HANDLER,
];

/// ART's (configuration `art`): no in-place updates (so no torn leaf, and no dead leaf: a
/// delete swings the slot to a tombstone) and no RDWC, but out-of-place updates with the
/// artifact's same-key hand-over (a window of RDWC's write table whose late writers queue), and
/// the hierarchical node locks.
pub const ART_RACE_HANDLERS: [RaceHandler; 17] = [
    STALE_ROUTE_HANDLER,
    TYPE_STALE_READ_HANDLER,
    LEAF_MOVED_HANDLER,
    SLOT_TAKEN_HANDLER,
    PUBLISH_LOST_HANDLER,
    ABSENCE_CHANGED_HANDLER,
    SPLIT_ABSENCE_CHANGED_HANDLER,
    // Not `type_switch_helped`: under node locks a write that finds a switch unfinished waits
    // for the lock holder instead of helping.
    TYPE_SWITCH_AWAITED_HANDLER,
    SPLIT_LOST_HANDLER,
    SPLIT_SLOT_CHANGED_HANDLER,
    REV_CAS_WAIT_HANDLER,
    // No `trim_retry`, `type_switch_followed` or `type_switch_retry`: unreachable under node
    // locks, and reported as corruption (see `trim` and `switch_type`).
    SCAN_REREAD_HANDLER,
    RCU_LOST_HANDLER,
    HOCL_LOCK_FAILED,
    HOCL_HANDED_OVER,
    RDWC_WRITE_QUEUED_HANDLER,
    RDWC_WRITE_FALLBACK_HANDLER,
];

pub const REV_CAS_UNSIGNALED: PlantedBug = PlantedBug {
    name: "rev-cas-unsignaled",
    description: "a split returns before the moved child's reverse-pointer CAS lands (H1): a stale cached slot still passes the reverse check and misses the new key",
};
pub const REV_CAS_AFTER_PUBLISH: PlantedBug = PlantedBug {
    name: "rev-cas-after-publish",
    description: "the digest's H1 fix: the reverse-pointer CAS after the publish, awaited: another client's insert through the new node returns before it lands",
};
pub const FULL_LEAF_WRITE: PlantedBug = PlantedBug {
    name: "full-leaf-write",
    description: "an in-place update WRITEs the whole leaf, reverse pointer included, from its pre-lock READ (H3): it can undo a split's reverse-pointer move",
};
pub const DELETE_TO_NULL: PlantedBug = PlantedBug {
    name: "delete-to-null",
    description: "a delete resets the slot to NULL instead of a tombstone (H5): two slots of a node can end up with one partial, shadowing a key",
};
pub const RDWC_LATE_MARK: PlantedBug = PlantedBug {
    name: "rdwc-late-mark",
    description: "a delegated search shares a leaf READ posted before its followers joined (H6): a follower returns a value older than its start",
};
pub use crate::common::change::RDWC_NO_FALLBACK;
pub const RDWC_NO_UNMARK: PlantedBug = PlantedBug {
    name: "rdwc-no-unmark",
    description: "a delegated search shares a result whose last READ (a leaf READ after the mark) depended on a slot READ before it: a follower returns a value older than its start",
};
pub const NO_REVERSE_CHECK: PlantedBug = PlantedBug {
    name: "no-reverse-check",
    description: "a node or leaf reached through a cached slot is trusted without comparing its reverse pointer: stale caches route into moved subtrees",
};
pub const NO_CHECKSUM: PlantedBug = PlantedBug {
    name: "no-checksum",
    description: "leaf READs are used without checking the CRC: a READ overlapping an update returns a torn value",
};
const PLANTS: [PlantedBug; 9] = [
    REV_CAS_UNSIGNALED,
    REV_CAS_AFTER_PUBLISH,
    FULL_LEAF_WRITE,
    DELETE_TO_NULL,
    RDWC_LATE_MARK,
    RDWC_NO_FALLBACK,
    RDWC_NO_UNMARK,
    NO_REVERSE_CHECK,
    NO_CHECKSUM,
];

/// ART's internal-node locks, resolved against the NIC (on-chip words, else a host table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLocks {
    pub on_chip: bool,
    pub count: u32,
}

impl NodeLocks {
    fn resolve(o: &SmartOptions, caps: &Caps) -> Option<NodeLocks> {
        if !o.internal_locks {
            return None;
        }
        Some(if caps.device_memory_bytes >= 8 {
            NodeLocks { on_chip: true, count: (o.lock_table_bytes.min(caps.device_memory_bytes) / 8) as u32 }
        } else {
            NodeLocks { on_chip: false, count: (o.lock_table_bytes.min(HOST_LOCK_TABLE_MAX) / 8) as u32 }
        })
    }

    fn of(self, node: RemoteAddr) -> (RemoteAddr, u16, u32) {
        let mn = node.node();
        let idx = (hash64(&node.raw().to_le_bytes(), LOCK_HASH_SEED) % u64::from(self.count)) as u32;
        let at = if self.on_chip {
            RemoteAddr::device(mn, u64::from(idx) * 8)
        } else {
            RemoteAddr::host(mn, HOST_LOCK_TABLE_AT + u64::from(idx) * 8)
        };
        (at, mn.0, idx)
    }
}

/// The state one compute node's clients share.
#[derive(Debug)]
pub struct SmartNode {
    types: NodeTypes,
    leaf: LeafGeometry,
    pub cache: RadixCache,
    pub rdwc: Rdwc<Change, Reply>,
    pub chunks: LocalChunkAllocator,
    locks: Option<NodeLocks>,
    pub local_locks: Option<LocalLockTable>,
}

/// SMART's [`IndexKind`].
#[derive(Debug)]
pub struct Smart;

/// One client's handle.
#[derive(Debug)]
pub struct SmartHandle<C> {
    o: SmartOptions,
    node: Arc<SmartNode>,
    ctx: C,
    /// The word this client writes into ART's node locks (client id + 1, never 0).
    me: u64,
    counters: Counters,
}

/// Builds a compute node's state (SMART and ART share it).
pub fn node_state(o: &SmartOptions, caps: &Caps) -> SmartNode {
    let locks = NodeLocks::resolve(o, caps);
    let local_locks = locks.map(|l| {
        LocalLockTable::new(o.memory_nodes, l.count, o.max_handover)
            .unwrap_or_else(|e| panic!("options were validated: {e}"))
    });
    let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
    SmartNode {
        types: o.node_types.clone(),
        leaf: leaf_geometry(o),
        cache: RadixCache::with_kept_slots(o.cache_bytes, o.keep_slots),
        rdwc: {
            let rdwc =
                Rdwc::new(o.rdwc_slots.max(1) as usize, o.read_delegation || o.write_combining || o.update_handover);
            if o.update_handover { rdwc.queue_late_writers() } else { rdwc }
        },
        chunks,
        locks,
        local_locks,
    }
}

pub fn leaf_geometry(o: &SmartOptions) -> LeafGeometry {
    LeafGeometry { key_bytes: o.key_bytes as usize, value_bytes: o.value_bytes as usize }
}

pub fn limits(o: &SmartOptions) -> Limits {
    Limits {
        min_key_bytes: o.key_bytes as usize,
        max_key_bytes: o.key_bytes as usize,
        min_value_bytes: o.value_bytes as usize,
        max_value_bytes: o.value_bytes as usize,
    }
}

/// Writes the empty tree: a NULL root slot and the superblock.
pub async fn create<C: Client>(o: &SmartOptions, ctx: &C) -> Result<(), IndexError> {
    o.validate().map_err(IndexError::Corrupt)?;
    let mut sb = Vec::with_capacity(24);
    sb.extend_from_slice(&0u64.to_le_bytes());
    sb.extend_from_slice(&MAGIC.to_le_bytes());
    sb.extend_from_slice(&o.key_bytes.to_le_bytes());
    sb.extend_from_slice(&o.value_bytes.to_le_bytes());
    ctx.write(root_slot_addr(), Buf::from(sb)).await?;
    Ok(())
}

pub fn open<C: Client + Clone + 'static>(o: &SmartOptions, node: Arc<SmartNode>, ctx: C) -> SmartHandle<C> {
    let me = ctx.identity().client as u64 + 1;
    SmartHandle { o: o.clone(), node, ctx, me, counters: Counters::default() }
}

/// [`IndexKind::cache_host_bytes`] for SMART and ART.
/// Every internal node cached costs 17.6 B an item at 2 M items (`dmkit reproduce chime fig14`);
/// 20 with a margin.
pub fn cache_host_bytes(o: &SmartOptions, compute_nodes: u16, items: u64) -> u64 {
    let full = o.cache_bytes.min(items.saturating_mul(20));
    full / 2 * compute_nodes as u64 + full * 3 / 2
}

pub fn node_state_bytes(n: &SmartNode) -> u64 {
    n.cache.stats().bytes + n.rdwc.bytes() + n.chunks.bytes() + n.local_locks.as_ref().map_or(0, |t| t.bytes())
}

/// Caches internal nodes top-down, breadth first, outside time, until the budget is full.
pub fn warm(o: &SmartOptions, node: &SmartNode, memory: &dyn MemoryView) -> Result<(), String> {
    warm_paths(o, node, memory, None)
}

/// [`IndexKind::warm_keys`]: [`warm`] restricted to the internal nodes on the paths of `keys`
/// (sorted bytewise), in the same order.
pub fn warm_keys(o: &SmartOptions, node: &SmartNode, memory: &dyn MemoryView, keys: &[Vec<u8>]) -> Result<(), String> {
    debug_assert!(keys.is_sorted(), "warm_keys takes sorted keys");
    warm_paths(o, node, memory, Some(keys))
}

/// [`IndexKind::replay_keys`]: each key's search, in order, from the deepest cached slot (or the
/// root) down to its leaf, every internal node below read from memory and cached as a search
/// caches it (`remember`), with the cache's FIFO eviction and charge.
pub fn replay_keys(
    o: &SmartOptions,
    node: &SmartNode,
    memory: &dyn MemoryView,
    keys: &[Vec<u8>],
) -> Result<(), String> {
    if o.cache_bytes == 0 {
        return Ok(());
    }
    let read = |at: RemoteAddr, len: usize| memory.read_memory(at, len).map_err(|e| e.to_string());
    let root = Slot(u64::from_le_bytes(read(root_slot_addr(), 8)?.try_into().expect("8 bytes")));
    for key in keys {
        let (mut s, mut d) = match node.cache.lookup(key).0 {
            Some((e, i)) => (e.slot(i), e.depth() + 1),
            None => (root, 1),
        };
        while s.is_internal() {
            let image = read(s.ptr(), node.types.read_bytes(s.node_type()))?;
            let h = Header(u64::from_le_bytes(image[8..16].try_into().expect("8 bytes")));
            if (0..h.len()).any(|j| kb(key, h.depth() + j) != h.partial(j)) {
                break;
            }
            let cap = node.types.capacity(h.node_type());
            let slots = node_slots(&image, cap);
            let pk = kb(key, h.slot_depth());
            let next = slots.iter().copied().find(|c| !c.is_null() && c.partial() == pk);
            if h.depth() == d {
                node.cache.add(key, h.slot_depth(), s.ptr(), h.node_type(), slots);
            }
            let Some(c) = next else { break };
            (s, d) = (c, h.slot_depth() + 1);
        }
    }
    Ok(())
}

/// Caches internal nodes breadth first: every one, or (with `keys`, sorted) those a search for
/// one of the keys passes, each at the depth its header names, as a search's `remember` does.
fn warm_paths(
    o: &SmartOptions,
    node: &SmartNode,
    memory: &dyn MemoryView,
    keys: Option<&[Vec<u8>]>,
) -> Result<(), String> {
    let read = |at: RemoteAddr, len: usize| memory.read_memory(at, len).map_err(|e| e.to_string());
    let root = Slot(u64::from_le_bytes(read(root_slot_addr(), 8)?.try_into().expect("8 bytes")));
    // (slot, depth of the child, byte path so far, the keys below it: a range of `keys`)
    let all = keys.map_or(0, <[_]>::len);
    let mut level = vec![(root, 1usize, Vec::<u8>::new(), 0..all)];
    let k = o.key_bytes as usize;
    while !level.is_empty() {
        let mut next = Vec::new();
        for (s, d, path, below) in level {
            if !s.is_internal() {
                continue;
            }
            let image = read(s.ptr(), node.types.read_bytes(node.types.largest()))?;
            let h = Header(u64::from_le_bytes(image[8..16].try_into().expect("8 bytes")));
            let cap = node.types.capacity(h.node_type());
            let slots = node_slots(&image, cap);
            // The keys a search takes through this node: those matching its header's partial
            // bytes (sorted keys sharing the path so far, so a contiguous run of them).
            let matches = |key: &[u8]| (0..h.len()).all(|j| kb(key, h.depth() + j) == h.partial(j));
            let Some(below) = matching_run(keys, below, matches) else { continue };
            let mut p = path.clone();
            for j in 0..h.len() {
                if h.depth() + j >= d {
                    p.push(h.partial(j));
                }
            }
            if h.depth() == d && h.slot_depth() > 1 {
                let bytes = RadixCache::entry_bytes(h.slot_depth() - 1, cap);
                if node.cache.stats().bytes + bytes > o.cache_bytes {
                    return Ok(());
                }
                let mut key = p.clone();
                key.resize(k, 0);
                node.cache.add(&key, h.slot_depth(), s.ptr(), h.node_type(), slots.clone());
            }
            for c in slots.into_iter().filter(|c| c.is_internal()) {
                // The keys whose next byte is the child's (a contiguous run, as above).
                let Some(below) = byte_run(keys, below.clone(), |key| kb(key, h.slot_depth()), c.partial()) else {
                    continue;
                };
                let mut cp = p.clone();
                cp.push(c.partial());
                next.push((c, h.slot_depth() + 1, cp, below));
            }
        }
        level = next;
    }
    Ok(())
}

/// Gives `node` the cache of `warmed`, a compute node [`warm`]ed on the same memory: the state
/// warming `node` would leave ([`IndexKind::warm_like`]).
pub fn warm_like(node: &SmartNode, warmed: &SmartNode) -> Result<(), String> {
    node.cache.copy_from(&warmed.cache);
    Ok(())
}

/// Plants `bug`, one of `plants` (SMART's, or ART's), for index `index`.
pub fn plant(o: &mut SmartOptions, bug: &str, index: &str, plants: &'static [PlantedBug]) -> Result<(), String> {
    let known = PlantedBug::named(plants, index, bug)?;
    o.plants.insert(known);
    Ok(())
}

impl IndexKind for Smart {
    const NAME: &'static str = "smart";
    /// 147 B at 10 M keys (`dmkit bench-load`, 2026-11-27) but about 230 at 60 M (`dmkit run
    /// --index smart --workload a --keys 60000000 --compute-nodes 16 --memory-nodes 2`: 14 GB
    /// loaded, 2026-11-28): from 10 M keys on, the third level's nodes fill in, each a 256-slot
    /// allocation with a few lines written. The larger, as the estimate's basis.
    const HOST_BYTES_PER_ITEM: u64 = 240;
    type Options = SmartOptions;
    type NodeState = SmartNode;
    type Handle<C: Client + Clone + 'static> = SmartHandle<C>;

    fn limits(o: &SmartOptions) -> Limits {
        limits(o)
    }

    fn validate(o: &SmartOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(SmartOptions, String), String> {
        let config = if config == "default" { Self::NAME } else { config };
        let mut options = SmartOptions::named(config, shape.key_bytes as u32, shape.value_bytes.max(1) as u32)?;
        options.memory_nodes = shape.memory_nodes;
        if let Some(bytes) = shape.cache_bytes {
            options.cache_bytes = bytes;
        }
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    async fn create<C: Client>(o: &SmartOptions, ctx: &C) -> Result<(), IndexError> {
        create(o, ctx).await
    }

    fn node_state(o: &SmartOptions, caps: &Caps) -> SmartNode {
        node_state(o, caps)
    }

    fn inherit(node: &SmartNode, loader: &SmartNode) {
        node.chunks.inherit(&loader.chunks);
    }

    /// Snapshots are shared between compute nodes (`cache::intern`): each further node costs
    /// its map and queue, about half its budget (0.48 measured: `dmkit run --index smart
    /// --workload c --keys 1000000 --memory-nodes 2 --duration-us 20000` with 1 and 16 compute
    /// nodes), and the shared snapshots at most 1.5 budgets.
    fn cache_host_bytes(o: &SmartOptions, compute_nodes: u16, items: u64) -> u64 {
        cache_host_bytes(o, compute_nodes, items)
    }

    fn node_state_bytes(n: &SmartNode) -> u64 {
        node_state_bytes(n)
    }

    fn open<C: Client + Clone + 'static>(o: &SmartOptions, node: Arc<SmartNode>, ctx: C) -> SmartHandle<C> {
        open(o, node, ctx)
    }

    fn check_invariants(o: &SmartOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    fn warm(o: &SmartOptions, node: &SmartNode, memory: &dyn MemoryView) -> Result<(), String> {
        warm(o, node, memory)
    }

    fn warm_like(_: &SmartOptions, node: &SmartNode, warmed: &SmartNode, _: &dyn MemoryView) -> Result<(), String> {
        warm_like(node, warmed)
    }

    fn warm_keys(
        o: &SmartOptions,
        node: &SmartNode,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        warm_keys(o, node, memory, keys).map(|()| true)
    }

    fn replay_keys(
        o: &SmartOptions,
        node: &SmartNode,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        replay_keys(o, node, memory, keys).map(|()| true)
    }

    fn node_counters(n: &SmartNode) -> std::collections::BTreeMap<&'static str, u64> {
        let mut counters = n.rdwc.stats().counters();
        let s = n.cache.stats();
        counters.extend([(CACHE_ENTRIES, s.entries), (CACHE_EVICTIONS, s.evictions), (CACHE_REBUILDS, s.rebuilds)]);
        counters
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut SmartOptions, bug: &str) -> Result<(), String> {
        plant(o, bug, "smart", &PLANTS)
    }
}

/// Where a traversal stands: a slot's value, where it lives, the key position of the child's
/// first byte, and the cache entry it came from (if any).
#[derive(Clone, Debug)]
struct At {
    s: Slot,
    sa: RemoteAddr,
    d: usize,
    cached: Option<CacheEntry>,
}

/// The attempts of one descent (a write's or a search's): a step to a deeper slot is part of
/// the attempt, any other step (a slot read again, a lost CAS, a moved leaf) starts another.
/// So `max_retries` bounds the attempts as documented, however deep the key's leaf is.
struct Attempts {
    left: u32,
    deepest: usize,
}

impl Attempts {
    fn new(max_retries: u32) -> Attempts {
        Attempts { left: max_retries, deepest: 0 }
    }

    /// Whether a step at key position `d` may be taken.
    fn next(&mut self, d: usize) -> bool {
        if d > self.deepest {
            self.deepest = d;
            return true;
        }
        self.left = self.left.saturating_sub(1);
        self.left > 0
    }
}

enum LeafView {
    /// The key's current leaf (possibly retired by an out-of-place update whose publish has
    /// not landed: its slot still points to it).
    Live(Leaf),
    /// Deleted (dead bit) while its slot still points to it: the key is absent.
    Dead,
    /// Retired or deleted, and its slot (read again) now holds this: follow it.
    Moved(Slot),
    /// The cached route is stale: invalidate and re-read the slot.
    Invalid,
}

/// An internal node as read: header and the slots of its (header) type.
struct NodeImage {
    rev: u64,
    h: Header,
    slots: Vec<Slot>,
}

/// The outcome of an attempt to publish at a slot.
enum Publish {
    Done(Vec<bool>),
    /// Nothing to publish (an update or delete of an absent key), and the slot still held what
    /// was expected: the absence is confirmed.
    Absent(Vec<bool>),
    /// The slot held `Slot` instead of the expected value: look again from there.
    Lost(Slot),
}

/// What a visit of an internal node decided.
enum Step {
    Done(Vec<bool>),
    Continue,
}

/// A write in progress: its changes (closed lazily for an RDWC leader) and the leaf it wrote.
struct Pending<'l, 'a> {
    leader: Option<&'l mut WriteLeader<'a, Change, Reply>>,
    changes: Option<Vec<Change>>,
    /// A new leaf written by this operation: (address, reverse pointer written, value).
    leaf: Option<(RemoteAddr, RemoteAddr, Vec<u8>)>,
    inserting: bool,
}

impl Pending<'_, '_> {
    fn changes(&mut self) -> &[Change] {
        if self.changes.is_none() {
            let l = self.leader.as_mut().expect("a pending write has changes or a leader");
            self.changes = Some(l.close());
        }
        self.changes.as_deref().expect("closed")
    }

    fn closed(&self) -> usize {
        self.changes.as_ref().map_or(0, Vec::len)
    }
}

impl<C: Client + Clone + 'static> SmartHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    fn retries_exhausted(&self, op: &'static str) -> IndexError {
        IndexError::RetriesExhausted { op, retries: self.o.max_retries }
    }

    fn check_key(&self, key: &[u8]) -> Result<(), IndexError> {
        limits(&self.o).check_key(key)
    }

    async fn read_slot(&mut self, sa: RemoteAddr) -> Result<Slot, IndexError> {
        let b = self.ctx.read(sa, Buf::zeroed(8)).await?;
        Ok(Slot(b.u64_at(0)))
    }

    /// The deepest cached slot for `key`, or the root slot.
    async fn start(&mut self, key: &[u8]) -> Result<At, IndexError> {
        if self.o.cache_bytes > 0 {
            let (hit, probes) = self.node.cache.lookup(key);
            self.ctx.charge_cpu(CpuWork::CacheLookupLevel, u64::from(probes)).await;
            if let Some((e, i)) = hit {
                self.counters.event(CACHE_HIT);
                return Ok(At { s: e.slot(i), sa: e.slot_addr(i), d: e.depth() + 1, cached: Some(e) });
            }
            self.counters.event(CACHE_MISS);
        }
        let s = self.read_slot(root_slot_addr()).await?;
        Ok(At { s, sa: root_slot_addr(), d: 1, cached: None })
    }

    /// A stale route: drop the cache entry and read the slot itself (digest OnInvalid).
    async fn reread(&mut self, at: &mut At) -> Result<(), IndexError> {
        if let Some(e) = at.cached.take() {
            self.node.cache.invalidate(&e);
            self.counters.event(CACHE_INVALIDATED);
        }
        self.counters.retries += 1;
        self.counters.event(STALE_ROUTE);
        at.s = self.read_slot(at.sa).await?;
        Ok(())
    }

    /// READs the internal node `at.s` points to; `None` if the route is invalid.
    async fn read_node(&mut self, at: &At) -> Result<Option<NodeImage>, IndexError> {
        let types = &self.node.types;
        let t = at.s.node_type();
        let n = types.capacity(t);
        if n == 0 {
            return Err(IndexError::Corrupt(format!("slot {:#x} at {} has node type {t}", at.s.0, at.sa)));
        }
        let ptr = at.s.ptr();
        let mut buf = self.ctx.read(ptr, Buf::zeroed(types.read_bytes(t))).await?.into_vec();
        let rev = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let h = Header(u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")));
        let ht = h.node_type();
        if ht == layout::DELETED {
            return Ok(None);
        }
        let cap = self.node.types.capacity(ht);
        if cap == 0 {
            return Err(IndexError::Corrupt(format!("node at {ptr} has header type {ht}")));
        }
        if cap > n {
            // The node grew since the slot recorded its type: fetch the rest (a second READ).
            self.counters.event(TYPE_STALE_READ);
            let rest = self.ctx.read(ptr.add(16 + 8 * n as u64), Buf::zeroed(8 * (cap - n))).await?;
            buf.extend_from_slice(rest.as_slice());
        }
        if let Some(e) = &at.cached
            && ht != t
        {
            self.node.cache.invalidate(e);
            self.counters.event(CACHE_INVALIDATED);
        }
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, cap as u64).await;
        let rev_ok = at.cached.is_none() || rev == at.sa.raw() || self.planted(NO_REVERSE_CHECK);
        if h.depth() > at.d || !rev_ok {
            return Ok(None);
        }
        Ok(Some(NodeImage { rev, h, slots: node_slots(buf.as_slice(), cap) }))
    }

    /// Whether a delegating leader marks after its leaf READ returns, not before posting it: the
    /// paper's window (`smart-paper`), or the plant `rdwc-late-mark` (H6).
    fn marks_late(&self) -> bool {
        self.o.paper_read_window || self.planted(RDWC_LATE_MARK)
    }

    /// Whether a leader withdraws its mark when its last READ did not decide the result alone
    /// (the digest's H6 fix is not enough without it); not in the paper's window, nor under the
    /// plant `rdwc-no-unmark`.
    fn unmarks(&self) -> bool {
        !self.o.paper_read_window && !self.planted(RDWC_NO_UNMARK)
    }

    /// READs the leaf `at.s` points to, again while torn.
    async fn read_leaf(
        &mut self,
        at: &At,
        mut leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<LeafView, IndexError> {
        let g = self.node.leaf;
        for _ in 0..self.o.max_retries {
            let late = self.marks_late();
            if let Some(l) = leader.as_deref_mut()
                && !late
            {
                l.mark();
            }
            let buf = self.ctx.read(at.s.ptr(), Buf::zeroed(g.bytes())).await?;
            if let Some(l) = leader.as_deref_mut()
                && late
            {
                l.mark();
            }
            self.ctx.charge_cpu(CpuWork::ChecksumByte, (g.key_bytes + g.value_bytes) as u64).await;
            let leaf = g.decode(buf.as_slice());
            if at.cached.is_some() && leaf.rev != at.sa.raw() && !self.planted(NO_REVERSE_CHECK) {
                return Ok(LeafView::Invalid);
            }
            if !leaf.valid || leaf.dead() {
                if at.cached.is_some() {
                    return Ok(LeafView::Invalid);
                }
                // Deleted, or retired by an out-of-place update: the slot tells.
                let now = self.read_slot(at.sa).await?;
                if now != at.s {
                    self.counters.event(LEAF_MOVED);
                    return Ok(LeafView::Moved(now));
                }
                if leaf.dead() {
                    return Ok(LeafView::Dead);
                }
            }
            if !leaf.intact() && !self.planted(NO_CHECKSUM) {
                self.counters.event(TORN_LEAF);
                self.counters.retries += 1;
                self.ctx.yield_now().await;
                continue;
            }
            return Ok(LeafView::Live(leaf));
        }
        Err(self.retries_exhausted("read leaf"))
    }

    /// Caches a node reached at its header's depth (the key matched its header).
    fn remember(&self, key: &[u8], at: &At, img: &NodeImage) {
        if at.d == img.h.depth() && self.o.cache_bytes > 0 {
            self.node.cache.add(key, img.h.slot_depth(), at.s.ptr(), img.h.node_type(), img.slots.clone());
        }
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.check_key(key)?;
        if !self.o.read_delegation {
            return self.search_remote(key, None).await;
        }
        let node = self.node.clone();
        search_via(self, &node.rdwc, key).await
    }

    async fn do_write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.check_key(key)?;
        if let Change::Upsert(v) | Change::Update(v) = &change {
            limits(&self.o).check_value(v)?;
        }
        let handed_over = self.o.update_handover && matches!(change, Change::Update(_));
        if !self.o.write_combining && !handed_over {
            return self.modify_remote(key, vec![change], None).await.0;
        }
        let node = self.node.clone();
        write_via(self, &node.rdwc, key, change).await
    }

    async fn modify_inner(&mut self, key: &[u8], p: &mut Pending<'_, '_>) -> Result<Vec<bool>, IndexError> {
        let mut at = self.start(key).await?;
        let mut attempts = Attempts::new(self.o.max_retries);
        while attempts.next(at.d) {
            if at.s.is_empty() {
                let pk = if at.s.is_tombstone() { at.s.partial() } else { kb(key, at.d - 1) };
                if at.s.is_tombstone() {
                    self.counters.event(TOMBSTONE_REUSED);
                }
                match self.publish_leaf(key, p, at.sa, at.s, pk).await? {
                    Publish::Done(r) | Publish::Absent(r) => return Ok(r),
                    Publish::Lost(old) => {
                        (at.s, at.cached) = (old, None);
                        continue;
                    }
                }
            }
            if at.s.is_leaf() {
                let outcome = match self.read_leaf(&at, None).await? {
                    LeafView::Invalid => {
                        self.reread(&mut at).await?;
                        continue;
                    }
                    LeafView::Moved(now) => {
                        at.s = now;
                        continue;
                    }
                    LeafView::Dead => {
                        // A deleted leaf is an empty slot for whoever comes next.
                        self.counters.event(DEAD_LEAF_REPLACED);
                        self.publish_leaf(key, p, at.sa, at.s, at.s.partial()).await?
                    }
                    LeafView::Live(l) if l.key == key => self.change_existing(key, p, &at, l).await?,
                    LeafView::Live(l) => {
                        let rest = (key.len() + 1).saturating_sub(at.d);
                        let lcp = (0..rest).take_while(|&i| kb(key, at.d + i) == kb(&l.key, at.d + i)).count();
                        if lcp == rest {
                            return Err(IndexError::Corrupt(format!(
                                "leaf at {} ({:02x?}) is on the path of {key:02x?} at depth {} but differs before it",
                                at.s.ptr(),
                                l.key,
                                at.d
                            )));
                        }
                        let diff = kb(&l.key, at.d + lcp);
                        self.split(key, p, &at, lcp, diff, None).await?
                    }
                };
                match outcome {
                    Publish::Done(r) | Publish::Absent(r) => return Ok(r),
                    Publish::Lost(old) => {
                        (at.s, at.cached) = (old, None);
                        continue;
                    }
                }
            }
            let held =
                if p.inserting && self.node_locks_in_force() { Some(self.node_lock(at.s.ptr()).await?) } else { None };
            let step = self.visit_node(key, p, &mut at).await;
            if let Some(h) = held {
                self.node_unlock(h);
            }
            match step? {
                Step::Done(r) => return Ok(r),
                Step::Continue => {}
            }
        }
        Err(self.retries_exhausted("write"))
    }

    /// One internal node of a write's traversal: descend, split its header, or insert into it.
    async fn visit_node(&mut self, key: &[u8], p: &mut Pending<'_, '_>, at: &mut At) -> Result<Step, IndexError> {
        let Some(img) = self.read_node(at).await? else {
            self.reread(at).await?;
            return Ok(Step::Continue);
        };
        let h = img.h;
        if let Some(i) = (0..h.len()).find(|&i| kb(key, h.depth() + i) != h.partial(i)) {
            if h.depth() + i < at.d {
                return Err(IndexError::Corrupt(format!("node at {} disagrees with its path", at.s.ptr())));
            }
            let lcp = h.depth() + i - at.d;
            return Ok(match self.split(key, p, at, lcp, h.partial(i), Some((h, i))).await? {
                Publish::Done(r) | Publish::Absent(r) => {
                    if let Some(e) = at.cached.take() {
                        self.node.cache.invalidate(&e);
                    }
                    Step::Done(r)
                }
                Publish::Lost(old) => {
                    (at.s, at.cached) = (old, None);
                    Step::Continue
                }
            });
        }
        self.remember(key, at, &img);
        let node = at.s.ptr();
        let d2 = h.slot_depth();
        let pk = kb(key, d2);
        let child = |i: usize, s: Slot| At { s, sa: node.add(16 + 8 * i as u64), d: d2 + 1, cached: None };
        if let Some(i) = img.slots.iter().position(|s| !s.is_null() && s.partial() == pk) {
            *at = child(i, img.slots[i]);
            return Ok(Step::Continue);
        }
        let cap = img.slots.len();
        let all = self.node.types.capacity(self.node.types.largest());
        for i in (0..cap).filter(|&i| img.slots[i].is_null()).chain(cap..all) {
            match self.publish_leaf(key, p, node.add(16 + 8 * i as u64), Slot::null(), pk).await? {
                // An absent key's update or delete published nothing, so there is no type to
                // switch, even at a slot behind the capacity (a full node). It used to switch
                // there: a node grown for nothing, and, under ART's node locks, a switch by a
                // client without the lock, whose CAS met the lock holder's (sweep point
                // `sweep-keys-32`, reported as corruption by the argument at `switch_type`).
                Publish::Absent(r) => return Ok(Step::Done(r)),
                Publish::Done(r) => {
                    if i >= cap {
                        let t = self.node.types.for_slot_index(i);
                        self.switch_type(at.sa, at.s, node, h, t).await?;
                        if let Some(e) = at.cached.take() {
                            self.node.cache.invalidate(&e);
                        }
                    }
                    return Ok(Step::Done(r));
                }
                Publish::Lost(old) if old.partial() == pk && !old.is_null() => {
                    if i >= cap {
                        // Another insert put our partial behind the capacity and has not
                        // switched the type yet: readers cannot see that slot, so the switch
                        // must finish before we act on it (else we would update a key that
                        // searches still miss).
                        if !p.inserting && self.node_locks_in_force() {
                            // Under node locks that insert holds the node's lock until it has
                            // switched, and only a lock holder may switch (the argument at
                            // `switch_type`): a write without the lock waits and reads the slot
                            // again. Found by the sweep point `sweep-keys-32`, where such a
                            // write helped and its CAS met the holder's, which the argument had
                            // reported as corruption.
                            self.counters.event(TYPE_SWITCH_AWAITED);
                            self.ctx.yield_now().await;
                            self.reread(at).await?;
                            return Ok(Step::Continue);
                        }
                        let t = self.node.types.for_slot_index(i);
                        self.switch_type(at.sa, at.s, node, h, t).await?;
                        self.counters.event(TYPE_SWITCH_HELPED);
                    }
                    *at = child(i, old);
                    return Ok(Step::Continue);
                }
                // Another partial took this slot: try the next.
                Publish::Lost(_) => self.counters.event(SLOT_TAKEN),
            }
        }
        Err(IndexError::Corrupt(format!("node at {node} has 256 slots and none for partial {pk}")))
    }

    /// Writes (once) the leaf of `key`'s new value with reverse pointer `target`, and
    /// publishes it by CAS at `target` over `expected`.
    async fn publish_leaf(
        &mut self,
        key: &[u8],
        p: &mut Pending<'_, '_>,
        target: RemoteAddr,
        expected: Slot,
        pk: u8,
    ) -> Result<Publish, IndexError> {
        let (state, results) = fold(None, p.changes());
        let Some(value) = state else {
            // Nothing to insert (an update of an absent key): confirm the absence after the
            // window closed, so every combined change linearizes inside its interval.
            let now = self.read_slot(target).await?;
            if now != expected {
                self.counters.event(ABSENCE_CHANGED);
                return Ok(Publish::Lost(now));
            }
            return Ok(Publish::Absent(results));
        };
        let leaf = self.ensure_leaf(key, p, &value, target).await?;
        let new = Slot::leaf(pk, self.node.leaf.bytes(), leaf);
        let old = Slot(self.ctx.cas(target, expected.0, new.0).await?);
        if old == expected {
            p.leaf = None;
            self.counters.event(INSERT_PUBLISHED);
            return Ok(Publish::Done(results));
        }
        // The written leaf stays in `p` for the next attempt.
        self.counters.cas_failures += 1;
        self.counters.event(PUBLISH_LOST);
        Ok(Publish::Lost(old))
    }

    /// The leaf holding `value` with reverse pointer `rev`: the one this operation already
    /// wrote (its reverse pointer rewritten if it moved), or a new one.
    async fn ensure_leaf(
        &mut self,
        key: &[u8],
        p: &mut Pending<'_, '_>,
        value: &[u8],
        rev: RemoteAddr,
    ) -> Result<RemoteAddr, IndexError> {
        if let Some((addr, written_rev, v)) = &mut p.leaf {
            if v.as_slice() == value {
                if *written_rev != rev {
                    self.ctx.write(*addr, Buf::from(rev.raw().to_le_bytes().to_vec())).await?;
                    *written_rev = rev;
                }
                return Ok(*addr);
            }
            let _ = self.node.chunks.free(*addr, self.node.leaf.alloc_bytes(self.o.alloc_align));
            p.leaf = None;
        }
        let g = self.node.leaf;
        let node = self.node.clone();
        let addr = node.chunks.alloc(&self.ctx, g.alloc_bytes(self.o.alloc_align), self.o.alloc_align).await?;
        self.ctx.charge_cpu(CpuWork::ChecksumByte, (g.key_bytes + g.value_bytes) as u64).await;
        self.ctx.write(addr, Buf::from(g.encode(rev.raw(), key, value))).await?;
        p.leaf = Some((addr, rev, value.to_vec()));
        Ok(addr)
    }

    /// Changes the leaf of `key` (read as `l`, through `at`): in place under its rear lock, or
    /// out of place (RCU) by swinging its slot.
    async fn change_existing(
        &mut self,
        key: &[u8],
        p: &mut Pending<'_, '_>,
        at: &At,
        l: Leaf,
    ) -> Result<Publish, IndexError> {
        let g = self.node.leaf;
        let leaf_addr = at.s.ptr();
        if self.o.out_of_place_update {
            let (state, results) = fold(Some(l.value), p.changes());
            let new = match state {
                Some(v) => Slot::leaf(at.s.partial(), g.bytes(), self.ensure_leaf(key, p, &v, at.sa).await?),
                None if self.planted(DELETE_TO_NULL) => Slot::null(),
                None => Slot::tombstone(at.s.partial()),
            };
            // Retire the old leaf *before* the publish: whoever reaches it through a cached
            // slot from then on reads the slot again. (After the publish, as the artifact does,
            // an operation could replace our leaf and return while a stale cached slot still
            // leads to the old one, valid and older.) A retired leaf whose slot still points to
            // it is still current: readers check the slot (`read_leaf`).
            let retire = Request::write(leaf_addr.add(VALID_AT as u64), vec![0u8]);
            let late = self.planted(RETIRE_AFTER_PUBLISH);
            if !late {
                self.ctx.post(vec![retire.clone()]).await?;
            }
            let old = Slot(self.ctx.cas(at.sa, at.s.0, new.0).await?);
            if old != at.s {
                self.counters.cas_failures += 1;
                self.counters.event(RCU_LOST);
                return Ok(Publish::Lost(old));
            }
            if new.is_leaf() {
                p.leaf = None;
            }
            if late {
                self.ctx.post_unsignaled(vec![retire])?;
            }
            self.counters.event(RCU_UPDATE);
            return Ok(Publish::Done(results));
        }
        let lock_at = leaf_addr.add(g.lock_at() as u64);
        let mut locked = false;
        for _ in 0..self.o.max_retries {
            let old = self.ctx.cas(lock_at, 0, LOCK_BIT).await?;
            if old == 0 {
                locked = true;
                break;
            }
            if old & DEAD_BIT != 0 {
                // Deleted since we read it: look at the slot again.
                self.counters.event(LOCK_FOUND_DEAD);
                let now = self.read_slot(at.sa).await?;
                return Ok(Publish::Lost(now));
            }
            self.counters.lock_failures += 1;
            self.counters.event(LEAF_LOCK_BUSY);
            self.ctx.yield_now().await;
        }
        if !locked {
            return Err(self.retries_exhausted("leaf lock"));
        }
        // The combining window closes once the lock is held (digest §3.6).
        let (state, results) = fold(Some(l.value.clone()), p.changes());
        match state {
            Some(v) => {
                self.ctx.charge_cpu(CpuWork::ChecksumByte, (g.key_bytes + g.value_bytes) as u64).await;
                let (at_off, bytes) = if self.planted(FULL_LEAF_WRITE) {
                    let mut b = g.encode(l.rev, key, &v);
                    if !l.valid {
                        b[VALID_AT] = 0;
                    }
                    (0, b)
                } else {
                    (CHECKSUM_AT, g.encode(0, key, &v)[CHECKSUM_AT..].to_vec())
                };
                if self.o.rear_lock {
                    self.ctx.write(leaf_addr.add(at_off as u64), Buf::from(bytes)).await?;
                } else {
                    let data = bytes[..bytes.len() - 8].to_vec();
                    self.ctx.write(leaf_addr.add(at_off as u64), Buf::from(data)).await?;
                    self.ctx.write(lock_at, Buf::from(0u64.to_le_bytes().to_vec())).await?;
                }
                self.counters.event(UPDATE_IN_PLACE);
            }
            None => {
                // The delete's linearization point: dead, and unlocked, in one WRITE.
                self.ctx.write(lock_at, Buf::from(DEAD_BIT.to_le_bytes().to_vec())).await?;
                self.ctx.write(leaf_addr.add(VALID_AT as u64), Buf::from(vec![0u8])).await?;
                self.unlink(key, at, leaf_addr).await?;
                self.counters.event(DELETE);
            }
        }
        Ok(Publish::Done(results))
    }

    /// Replaces the slot pointing to the dead leaf at `leaf` with a tombstone, following it
    /// down if a split moved it meanwhile. Done when the slot no longer points to it.
    async fn unlink(&mut self, key: &[u8], at: &At, leaf: RemoteAddr) -> Result<(), IndexError> {
        let (mut sa, mut expected) = (at.sa, at.s);
        // The delete took effect (the dead bit); this unlinks the leaf. A lost CAS with the leaf
        // found again means a split moved it one node deeper: a step of the one attempt, as in
        // a descent (bounded by the key's length), not a retry. Giving up on it would leave a
        // dead leaf reachable.
        let (mut attempts, mut depth) = (Attempts::new(self.o.max_retries), 1);
        while attempts.next(depth) {
            let tomb = if self.planted(DELETE_TO_NULL) { Slot::null() } else { Slot::tombstone(expected.partial()) };
            let mut cur = Slot(self.ctx.cas(sa, expected.0, tomb.0).await?);
            if cur == expected {
                return Ok(());
            }
            self.counters.cas_failures += 1;
            let mut found = false;
            for _ in 0..key.len() + 1 {
                if !cur.is_internal() {
                    break;
                }
                let at = At { s: cur, sa, d: usize::MAX, cached: None };
                let Some(img) = self.read_node(&at).await? else { break };
                let pk = kb(key, img.h.slot_depth());
                let Some(i) = img.slots.iter().position(|s| !s.is_null() && s.partial() == pk) else { break };
                (sa, cur) = (cur.ptr().add(16 + 8 * i as u64), img.slots[i]);
                if cur.is_leaf() && cur.ptr() == leaf {
                    found = true;
                    break;
                }
            }
            if !found {
                // Replaced (by an insert that found it dead), or already unlinked.
                return Ok(());
            }
            self.counters.event(UNLINK_FOLLOWED);
            (expected, depth) = (cur, depth + 1);
        }
        Err(self.retries_exhausted("unlink"))
    }

    /// A leaf split (`header` = None: the slot at `at` holds a leaf of another key sharing
    /// `lcp` bytes from `at.d`) or a header split (`header` = the node's header and the
    /// mismatching partial): new NODE_4s holding the common bytes, the old child under
    /// partial `diff`, and the new leaf, published by one CAS on the parent slot.
    async fn split(
        &mut self,
        key: &[u8],
        p: &mut Pending<'_, '_>,
        at: &At,
        lcp: usize,
        diff: u8,
        header: Option<(Header, usize)>,
    ) -> Result<Publish, IndexError> {
        let (state, results) = fold(None, p.changes());
        let Some(value) = state else {
            let now = self.read_slot(at.sa).await?;
            if now != at.s {
                self.counters.event(SPLIT_ABSENCE_CHANGED);
                return Ok(Publish::Lost(now));
            }
            return Ok(Publish::Done(results));
        };
        let node = self.node.clone();
        let (types, g) = (&node.types, node.leaf);
        let align = self.o.alloc_align;
        let m = lcp / 7 + 1;
        let mn = p.leaf.as_ref().map_or_else(|| node.chunks.next_node(), |l| l.0.node());
        let mut nodes = Vec::with_capacity(m);
        for _ in 0..m {
            match node.chunks.alloc_on(&self.ctx, mn, types.node_alloc_bytes(align), align).await {
                Ok(a) => nodes.push(a),
                Err(e) => {
                    for a in nodes {
                        let _ = node.chunks.free(a, types.node_alloc_bytes(align));
                    }
                    return Err(e);
                }
            }
        }
        let last = m - 1;
        let leaf_rev = nodes[last].add(16 + 8);
        let mut batch = Vec::with_capacity(m + 1);
        let leaf_addr = match &mut p.leaf {
            Some((a, rev, v)) if *v == value => {
                if *rev != leaf_rev {
                    batch.push(Request::write(*a, leaf_rev.raw().to_le_bytes().to_vec()));
                    *rev = leaf_rev;
                }
                *a
            }
            other => {
                if let Some((a, _, _)) = other.take() {
                    let _ = node.chunks.free(a, g.alloc_bytes(align));
                }
                let a = node.chunks.alloc_on(&self.ctx, mn, g.alloc_bytes(align), align).await?;
                self.ctx.charge_cpu(CpuWork::ChecksumByte, (g.key_bytes + g.value_bytes) as u64).await;
                batch.push(Request::write(a, g.encode(leaf_rev.raw(), key, &value)));
                *other = Some((a, leaf_rev, value.clone()));
                a
            }
        };
        let t = types.smallest();
        for i in 0..m {
            let rev = if i == 0 { at.sa } else { nodes[i - 1].add(16) };
            let di = at.d + 7 * i;
            let mut img = vec![0u8; types.read_bytes(t)];
            img[..8].copy_from_slice(&rev.raw().to_le_bytes());
            let (h, s0, s1) = if i < last {
                let partials: Vec<u8> = (0..6).map(|j| kb(key, di + j)).collect();
                (Header::new(di, t, &partials), Slot::internal(kb(key, di + 6), t, nodes[i + 1]), Slot::null())
            } else {
                let rem = lcp - 7 * last;
                let partials: Vec<u8> = (0..rem).map(|j| kb(key, di + j)).collect();
                (
                    Header::new(di, t, &partials),
                    at.s.with_partial(diff),
                    Slot::leaf(kb(key, di + rem), g.bytes(), leaf_addr),
                )
            };
            img[8..16].copy_from_slice(&h.0.to_le_bytes());
            img[16..24].copy_from_slice(&s0.0.to_le_bytes());
            img[24..32].copy_from_slice(&s1.0.to_le_bytes());
            batch.push(Request::write(nodes[i], img));
        }
        self.ctx.post(batch).await?;
        // The moved child's reverse pointer goes from the old slot to slot 0 of the last new
        // node *before* the publish, so that no operation can use the new nodes while a stale
        // cached copy of the old slot still passes the reverse check (see the module doc).
        let moved = at.s.ptr();
        let new_parent = nodes[last].add(16);
        let early = !self.planted(REV_CAS_UNSIGNALED) && !self.planted(REV_CAS_AFTER_PUBLISH);
        if early && let Some(now) = self.move_reverse(at, moved, new_parent).await? {
            self.counters.event(SPLIT_SLOT_CHANGED);
            for a in nodes {
                let _ = node.chunks.free(a, types.node_alloc_bytes(align));
            }
            return Ok(Publish::Lost(now));
        }
        let top = Slot::internal(at.s.partial(), t, nodes[0]);
        let old = Slot(self.ctx.cas(at.sa, at.s.0, top.0).await?);
        if old != at.s {
            if early {
                // Put it back: the old slot still points to the child.
                self.ctx.cas(moved, new_parent.raw(), at.sa.raw()).await?;
            }
            for a in nodes {
                let _ = node.chunks.free(a, types.node_alloc_bytes(align));
            }
            self.counters.cas_failures += 1;
            self.counters.event(SPLIT_LOST);
            return Ok(Publish::Lost(old));
        }
        p.leaf = None;
        self.counters.event(if header.is_some() { HEADER_SPLIT } else { LEAF_SPLIT });
        if self.planted(REV_CAS_UNSIGNALED) {
            // The artifact: an unsignaled CAS after the publish, never awaited (H1).
            self.ctx.post_unsignaled(vec![Request::cas(moved, at.sa.raw(), new_parent.raw())])?;
        } else if !early {
            // The digest's fix for H1: after the publish, awaited before returning. Not enough:
            // another client's operation through the new nodes can return first.
            for _ in 0..self.o.max_retries {
                if self.ctx.cas(moved, at.sa.raw(), new_parent.raw()).await? == at.sa.raw() {
                    break;
                }
                self.ctx.yield_now().await;
            }
        }
        if let Some((h, i)) = header {
            self.trim(moved, h, h.depth() + i + 1).await?;
        }
        Ok(Publish::Done(results))
    }

    /// Moves `child`'s reverse pointer from `at.sa` to `to`. While another split of the same
    /// child holds it moved (between its own move and publish), waits; returns the slot's new
    /// value if the slot changed meanwhile (the split must start over).
    async fn move_reverse(&mut self, at: &At, child: RemoteAddr, to: RemoteAddr) -> Result<Option<Slot>, IndexError> {
        for _ in 0..self.o.max_retries {
            let old = self.ctx.cas(child, at.sa.raw(), to.raw()).await?;
            if old == at.sa.raw() {
                return Ok(None);
            }
            let now = self.read_slot(at.sa).await?;
            if now != at.s {
                return Ok(Some(now));
            }
            self.counters.event(REV_CAS_WAIT);
            self.ctx.yield_now().await;
        }
        Err(self.retries_exhausted("reverse pointer"))
    }

    /// Drops the partials a header split moved up: masked CAS on all but the type bits, again
    /// with the fresh header while it is short of `target` (digest H10).
    ///
    /// With node locks (ART) the CAS cannot lose, argued: only a header split of `node` writes
    /// its header's non-type bits (a type switch masks them out, and the new nodes of a split
    /// are written before anyone can reach them); every split runs for a write that inserts,
    /// such a write holds the lock of the node it visits until its visit (the split, its
    /// publish and this trim) returns, and the lock word excludes every other client, on any
    /// compute node. A lost CAS there is corruption (plant `no-node-locks` shows it found).
    async fn trim(&mut self, node: RemoteAddr, mut h: Header, target: usize) -> Result<(), IndexError> {
        let mask = !TYPE_MASK;
        for _ in 0..self.o.max_retries {
            if h.depth() >= target {
                return Ok(());
            }
            let new = h.trimmed(target - h.depth() - 1);
            let old = self.ctx.masked_cas(node.add(8), h.0, mask, new.0, mask).await?;
            if old & mask == h.0 & mask {
                return Ok(());
            }
            self.race_under_lock("header", node, old, "a header split's trim")?;
            self.counters.event(TRIM_RETRY);
            h = Header(old);
        }
        Err(self.retries_exhausted("header trim"))
    }

    /// Raises the node's type to `t` in its parent slot (CAS) and its header (masked CAS on
    /// the type bits); done on each side once it holds `t` or more (digest §3.3).
    ///
    /// With node locks (ART) neither CAS can meet another's change, argued: the switch runs in
    /// an inserting visit that holds the node's lock from before its READ of the node (whose
    /// reverse check confirmed that the parent slot then pointed to it) until the switch
    /// returns; the parent slot changes only by a header split of this node (new nodes above
    /// it) or a type switch of it, and the header's type bits only by a type switch of it, each
    /// in a visit holding the same lock. A CAS that finds the slot or the type bits changed by
    /// someone else is corruption there; one that finds only older type bits in its own
    /// expectation (a cached parent image) sees the slot as it is and is not a race.
    /// `verify/tests/smart.rs`: the preset `switch-under-split` reaches both handlers in SMART.
    async fn switch_type(
        &mut self,
        psa: RemoteAddr,
        ps: Slot,
        node: RemoteAddr,
        h: Header,
        t: u8,
    ) -> Result<(), IndexError> {
        let header_at = node.add(8);
        let tbits = u64::from(t) << 8;
        let parent_req = Request::cas(psa, ps.0, ps.with_type(t).0);
        let header_req = Request::masked_cas(header_at, h.0, TYPE_MASK, tbits, TYPE_MASK);
        let (r1, mut r2) = if psa.node() == header_at.node() {
            let rs = self.ctx.post(vec![parent_req, header_req]).await?;
            (rs[0].atomic()?, rs[1].atomic()?)
        } else {
            let r1 = self.ctx.post(vec![parent_req]).await?.remove(0).atomic()?;
            (r1, self.ctx.post(vec![header_req]).await?.remove(0).atomic()?)
        };
        let mut done1 = r1 == ps.0;
        let mut done2 = r2 & TYPE_MASK == h.0 & TYPE_MASK || Header(r2).node_type() >= t;
        let (mut psa, mut p) = (psa, Slot(r1));
        for _ in 0..self.o.max_retries {
            if !done1 {
                for _ in 0..64 {
                    if !p.is_internal() || p.ptr() == node {
                        break;
                    }
                    // A split put node(s) above this one: it is under their slot 0.
                    self.race_under_lock("parent slot", node, p.0, "a type switch")?;
                    self.counters.event(TYPE_SWITCH_FOLLOWED);
                    psa = p.ptr().add(16);
                    p = self.read_slot(psa).await?;
                }
                if !p.is_internal() || p.ptr() != node || p.node_type() >= t {
                    done1 = true;
                } else {
                    let old = self.ctx.cas(psa, p.0, p.with_type(t).0).await?;
                    if old == p.0 {
                        done1 = true;
                    } else {
                        self.race_under_lock("parent slot", node, old, "a type switch")?;
                        self.counters.event(TYPE_SWITCH_RETRY);
                        p = Slot(old);
                    }
                }
            }
            if !done2 {
                let cur = Header(r2);
                if cur.node_type() >= t {
                    done2 = true;
                } else {
                    r2 = self.ctx.masked_cas(header_at, cur.0, TYPE_MASK, tbits, TYPE_MASK).await?;
                    done2 = r2 & TYPE_MASK == cur.0 & TYPE_MASK;
                    if !done2 {
                        self.race_under_lock("header", node, r2, "a type switch")?;
                        self.counters.event(TYPE_SWITCH_RETRY);
                    }
                }
            }
            if done1 && done2 {
                self.counters.event(TYPE_SWITCH);
                return Ok(());
            }
        }
        Err(self.retries_exhausted("type switch"))
    }

    /// A CAS of `during` found `node`'s `what` changed by another client (now `now`). Lock-free
    /// SMART handles that race; under ART's node locks it cannot happen (argued at `trim` and
    /// `switch_type`), so there it is corruption.
    fn race_under_lock(&self, what: &str, node: RemoteAddr, now: u64, during: &str) -> Result<(), IndexError> {
        match self.node.locks {
            Some(_) => Err(IndexError::Corrupt(format!(
                "the {what} of {node} changed under its node lock during {during} (now {now:#x})"
            ))),
            None => Ok(()),
        }
    }

    /// Whether inserting visits take ART's node locks (ART, unless the plant removes them).
    fn node_locks_in_force(&self) -> bool {
        self.node.locks.is_some() && !self.planted(NO_NODE_LOCKS)
    }

    /// Takes ART's lock on an internal node: the local table first, then the lock word.
    async fn node_lock(&mut self, node: RemoteAddr) -> Result<HoclHeld, IndexError> {
        let slot = self.node.locks.expect("node locks are configured").of(node);
        let table = self.node.clone();
        let (me, retries) = (self.me, self.o.max_retries);
        acquire_global(&self.ctx, table.local_locks.as_ref(), slot, me, retries, &mut self.counters, "node lock").await
    }

    /// Releases an ART node lock: hands it to a local waiter, or an unsignaled WRITE of 0.
    fn node_unlock(&mut self, held: HoclHeld) {
        let table = self.node.clone();
        let hand_over = match (&table.local_locks, &held.hold) {
            (Some(t), Some(h)) => t.plan_release(h),
            _ => false,
        };
        if !hand_over {
            // A failed post leaves the word locked; the next CAS on it reports the error.
            let _ = self.ctx.post_unsignaled(vec![Request::write(held.word, 0u64.to_le_bytes().to_vec())]);
        } else {
            self.counters.event(LOCK_HAND_OVER);
        }
        if let (Some(t), Some(h)) = (&table.local_locks, held.hold) {
            t.finish_release(h, hand_over);
        }
    }

    async fn do_scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        enum Item {
            Visit(Slot, RemoteAddr, usize, Vec<u8>),
            Emit(Vec<u8>, Vec<u8>),
        }
        let mut out = Pairs::new();
        if limit == 0 {
            return Ok(out);
        }
        let k = self.o.key_bytes as usize;
        let root = self.read_slot(root_slot_addr()).await?;
        let mut stack = vec![Item::Visit(root, root_slot_addr(), 1, Vec::new())];
        // The walk itself is bounded by the tree; what repeats (a slot read again, a moved
        // leaf followed) counts against max_retries, as a descent's retries do.
        let mut attempts = Attempts::new(self.o.max_retries);
        attempts.next(1);
        while let Some(item) = stack.pop() {
            let (s, sa, d, path) = match item {
                Item::Emit(key, value) => {
                    out.push((key, value));
                    if out.len() >= limit {
                        return Ok(out);
                    }
                    continue;
                }
                Item::Visit(s, sa, d, path) => (s, sa, d, path),
            };
            if s.is_empty() {
                continue;
            }
            if s.is_leaf() {
                let at = At { s, sa, d, cached: None };
                match self.read_leaf(&at, None).await? {
                    LeafView::Live(l) if in_bounds(&l.key, start, end) => stack.push(Item::Emit(l.key, l.value)),
                    LeafView::Moved(now) => {
                        if !attempts.next(0) {
                            return Err(self.retries_exhausted("scan"));
                        }
                        stack.push(Item::Visit(now, sa, d, path));
                    }
                    LeafView::Live(_) | LeafView::Dead | LeafView::Invalid => {}
                }
                continue;
            }
            let at = At { s, sa, d, cached: None };
            let Some(img) = self.read_node(&at).await? else {
                if !attempts.next(0) {
                    return Err(self.retries_exhausted("scan"));
                }
                self.counters.retries += 1;
                self.counters.event(SCAN_REREAD);
                let s = self.read_slot(sa).await?;
                stack.push(Item::Visit(s, sa, d, path));
                continue;
            };
            let h = img.h;
            let mut p = path;
            for j in 0..h.len() {
                if h.depth() + j >= d {
                    p.push(h.partial(j));
                }
            }
            let mut children: Vec<(usize, Slot)> = img
                .slots
                .iter()
                .copied()
                .enumerate()
                .filter(|(_, c)| !c.is_empty())
                .filter(|(_, c)| {
                    let mut cp = p.clone();
                    cp.push(c.partial());
                    overlaps(&cp, k, start, end)
                })
                .collect();
            children.sort_by_key(|(_, c)| c.partial());
            // Read this node's leaf children first, one doorbell batch per memory node.
            let leaves: Vec<(usize, Slot)> = children.iter().copied().filter(|(_, c)| c.is_leaf()).collect();
            let images = self.read_leaves(&leaves).await?;
            let mut items = Vec::with_capacity(children.len());
            for (i, c) in children {
                let csa = s.ptr().add(16 + 8 * i as u64);
                let mut cp = p.clone();
                cp.push(c.partial());
                if c.is_leaf() {
                    match images.iter().find(|(j, _)| *j == i).map(|(_, l)| l.clone()) {
                        Some(Some(l)) if in_bounds(&l.key, start, end) => items.push(Item::Emit(l.key, l.value)),
                        Some(Some(_)) => {}
                        // Torn, deleted or retired: look at it on its own, with its key prefix,
                        // since the slot may hold a node by then (an insert expanded the leaf
                        // into a node of two leaves), whose children are filtered by that
                        // prefix. An empty prefix here made them look out of bounds: a scan
                        // missed keys present throughout it (found by ART's `scan-shapes`).
                        _ => items.push(Item::Visit(c, csa, h.slot_depth() + 1, cp)),
                    }
                } else {
                    items.push(Item::Visit(c, csa, h.slot_depth() + 1, cp));
                }
            }
            stack.extend(items.into_iter().rev());
        }
        Ok(out)
    }

    /// READs leaves in one batch per memory node: `Some(leaf)` if live and intact, `None` to
    /// look at it again alone (torn, deleted or retired).
    async fn read_leaves(&mut self, leaves: &[(usize, Slot)]) -> Result<Vec<(usize, Option<Leaf>)>, IndexError> {
        let g = self.node.leaf;
        let mut by_mn: Vec<(NodeId, Vec<(usize, Slot)>)> = Vec::new();
        for &(i, s) in leaves {
            match by_mn.iter_mut().find(|(n, _)| *n == s.ptr().node()) {
                Some((_, v)) => v.push((i, s)),
                None => by_mn.push((s.ptr().node(), vec![(i, s)])),
            }
        }
        let mut out = Vec::with_capacity(leaves.len());
        for (_, group) in by_mn {
            let reqs = group.iter().map(|(_, s)| Request::read_len(s.ptr(), g.bytes())).collect();
            let resps = self.ctx.post(reqs).await?;
            self.ctx.charge_cpu(CpuWork::ChecksumByte, ((g.key_bytes + g.value_bytes) * group.len()) as u64).await;
            for ((i, _), r) in group.into_iter().zip(resps) {
                let l = g.decode(r.into_buf()?.as_slice());
                let usable = l.valid && !l.dead() && (l.intact() || self.planted(NO_CHECKSUM));
                out.push((i, usable.then_some(l)));
            }
        }
        Ok(out)
    }
}

/// Whether some `k`-byte key starting with `prefix` can be within the bounds.
fn overlaps(prefix: &[u8], k: usize, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let mut lo = prefix.to_vec();
    lo.resize(k, 0);
    let mut hi = prefix.to_vec();
    hi.resize(k, 0xFF);
    above_start(&hi, start) && below_end(&lo, end)
}

impl<C: Client + Clone + 'static> Combined for SmartHandle<C> {
    async fn search_remote(
        &mut self,
        key: &[u8],
        mut leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        // A delegating leader marks before every READ; followers that joined before the last
        // mark take the result. So the last READ must decide the result by itself: an empty
        // slot, a node without the key's partial, or a node or leaf still linked at the slot
        // it was reached from (its reverse pointer says so). Otherwise it unmarks (H6, and the
        // slot-then-leaf case the digest's fix misses).
        if let Some(l) = leader.as_deref_mut() {
            l.mark();
        }
        let mut at = self.start(key).await?;
        let mut attempts = Attempts::new(self.o.max_retries);
        while attempts.next(at.d) {
            if at.s.is_empty() {
                return Ok(None);
            }
            if at.s.is_leaf() {
                match self.read_leaf(&at, leader.as_deref_mut()).await? {
                    LeafView::Live(l) => {
                        if let Some(leader) = leader.as_deref_mut()
                            && l.rev != at.sa.raw()
                            && self.unmarks()
                        {
                            leader.unmark();
                        }
                        return Ok((l.key == key).then_some(l.value));
                    }
                    LeafView::Dead => return Ok(None),
                    LeafView::Moved(now) => {
                        at.s = now;
                        continue;
                    }
                    LeafView::Invalid => {
                        if let Some(l) = leader.as_deref_mut() {
                            l.mark();
                        }
                        self.reread(&mut at).await?;
                        continue;
                    }
                }
            }
            if let Some(l) = leader.as_deref_mut() {
                l.mark();
            }
            let Some(img) = self.read_node(&at).await? else {
                if let Some(l) = leader.as_deref_mut() {
                    l.mark();
                }
                self.reread(&mut at).await?;
                continue;
            };
            let h = img.h;
            if (0..h.len()).any(|i| kb(key, h.depth() + i) != h.partial(i)) {
                if let Some(leader) = leader.as_deref_mut()
                    && img.rev != at.sa.raw()
                    && self.unmarks()
                {
                    leader.unmark();
                }
                return Ok(None);
            }
            self.remember(key, &at, &img);
            let pk = kb(key, h.slot_depth());
            let Some(i) = img.slots.iter().position(|s| !s.is_null() && s.partial() == pk) else {
                return Ok(None);
            };
            at = At { s: img.slots[i], sa: at.s.ptr().add(16 + 8 * i as u64), d: h.slot_depth() + 1, cached: None };
        }
        Err(self.retries_exhausted("search"))
    }

    /// Applies `changes` (or, as an RDWC leader, every change its window admitted) to `key`.
    /// Returns the first change's result and, once the window closed, one result per change.
    async fn modify_remote(
        &mut self,
        key: &[u8],
        changes: Vec<Change>,
        leader: Option<&mut WriteLeader<'_, Change, Reply>>,
    ) -> (Result<bool, IndexError>, Option<Vec<Result<bool, IndexError>>>) {
        let inserting = changes.iter().any(|c| matches!(c, Change::Upsert(_)));
        let mut p = Pending { changes: leader.is_none().then_some(changes), leader, leaf: None, inserting };
        let outcome = self.modify_inner(key, &mut p).await;
        if let Some((addr, _, _)) = p.leaf.take()
            && outcome.as_ref().is_err()
        {
            // Never published: give it back.
            let _ = self.node.chunks.free(addr, self.node.leaf.alloc_bytes(self.o.alloc_align));
        }
        replies(outcome, p.closed())
    }

    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    fn no_fallback(&self) -> bool {
        self.planted(RDWC_NO_FALLBACK)
    }

    fn late_handover(&self) -> bool {
        self.planted(LATE_HANDOVER)
    }
}

impl<C: Client + Clone + 'static> Index for SmartHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.do_search(key).await
    }

    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.do_write(key, change).await
    }

    async fn scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        self.do_scan(start, end, limit).await
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

//! # Dolphin: ART internal nodes over B+tree leaves, with MS-RNIC write synchronization
//!
//! Digest: `shared/digests/dolphin.md` (An et al., MSST '24). Internal nodes are SMART-style ART
//! nodes (8-byte entries carrying their key byte, path compression of up to 6 bytes per header,
//! types N4–N256 in full-size allocations). The byte that ends a key's 7-byte prefix leads to a
//! *special* node, which branches on the last key byte by **floor** search over B+tree leaves of
//! dozens of items sharing that prefix: one cached entry maps to one leaf (the paper's 1→N).
//!
//! **Dense keys.** A leaf holds only keys sharing its 7-byte prefix (the paper's range rule), so
//! the 1→N mapping needs dense keys, as the paper's and the artifact's are. On sparse keys (YCSB's
//! hashed 8-byte keys) nearly every key gets a leaf of its own: 1 M such keys allocate 1,661
//! bytes of remote memory per key, against 26.8 on dense keys (README, Dolphin).
//!
//! ## Operations (verbs per the digest's §3.0 table, with a warm cache)
//!
//! - **search**: one leaf READ. A leaf whose range ends below the key (it split since the cache
//!   was filled) sends the client back to its special node: READ it, take the floor entry, READ
//!   that leaf (the paper's *backtracking*, 2 more round trips, never a restart from the root).
//! - **update**: `[FAA lock +1, READ leaf]` (the Spear shared mark, which cannot fail, pipelined
//!   with the READ), then `[WRITE value 8 B, FAA lock −1]`: 2 round trips, no lock CAS. Concurrent
//!   updates are ordered by the memory node's NIC (an 8-byte WRITE is atomic).
//! - **insert**: the same first round trip, then CAS an empty key slot, then `[WRITE value, FAA
//!   −1]`: 3 round trips. The insert that would take a leaf's last empty slot changes the
//!   structure instead (below).
//! - **delete**: the same first round trip, then `[CAS key → tombstone, FAA −1]`.
//! - **scan**: from the start key's special node if the cache has it (READ it, then its leaves),
//!   else and beyond it depth first from the root, children in key order and never a subtree
//!   outside the range; a special node's leaves are read in doorbell batches per memory node,
//!   sized by how many items are still wanted. Each leaf image is checked (versions, reverse
//!   pointer, and that it starts where the last one ended: a gap means a split since the special
//!   node was read, which is read again). Per key, not atomic, as the paper.
//! - **structure change** (SMO), by an insert that holds a share: `FAA lock −1,000,000` (the
//!   exclusive mark), wait until the lock word shows only its own share, READ the leaf, then
//!   compact it in place (if dropping tombstones makes room) or split it (the artifact's 3/4 :
//!   1/4, or evenly): write the new right leaf and the shrunk old leaf and publish the new one
//!   by CAS into a free entry of the special node (the order is the protocol's, below), then
//!   release. A failed publish puts the old leaf back; every error path releases the mark.
//! - A key whose 7-byte prefix has no leaf gets a new path: the chain of nodes it needs, a
//!   special node and a leaf, written first and published by one CAS into a free entry (behind
//!   the node's capacity, then raising its type, when it is full). A key that diverges inside a
//!   node's compressed prefix interposes a new node above it (the child's reverse pointer moves
//!   first, then the parent entry swings, then the child's header is trimmed).
//!
//! ## Two protocols (`--config`)
//!
//! - `hardened` (default): the digest's §4.4 protocol on a leaf with a version word in every
//!   64-byte line (`layout::LeafFormat::Versioned`). Correct under the default memory model,
//!   where a READ samples its lines in any order. Key slots go EMPTY → key → TOMBSTONE and back
//!   to EMPTY only inside a structure change; a key whose value is not written yet is absent;
//!   inserts probe empty slots lowest first and turn into updates when a CAS returns their key;
//!   a structure change rewrites the old leaf with every line's version raised *before* it
//!   publishes the new leaf, so a search accepts an image only if all lines agree, and a moved
//!   key is never read from the old leaf after its new home is reachable.
//! - `faithful`: the paper's protocol on its 1088-byte leaf: delete zeroes the slot, a search
//!   returns whatever value a matching slot holds, an insert that loses a CAS moves to the next
//!   empty slot without looking at what won, and a split publishes the new leaf before it
//!   rewrites the old one, whose front and rear versions nothing raises. The digest's hazards
//!   H2, H3, H4, H5 and H7 are reachable; each has a planted bug on `hardened` that restores it
//!   alone (see [`PLANTS`]). H1 needs values over 64 bytes (ours are 8) and H6 lists the
//!   artifact's coding slips, which are not reproduced.
//! - `digest`: the hardened slot protocol on the paper's leaf, with the digest's tail-first,
//!   head-last version bump. It is correct only if a READ samples its lines in ascending address
//!   order (memory-model switch `read_units_ascending`, the digest's A3); under the default
//!   model a search can accept a stale image (the tests show both).
//!
//! ## Decisions (digest §8), and where we differ
//!
//! - Keys are 8 bytes, big-endian. Slots hold them XORed with `layout::KEY_MASK`, so the EMPTY
//!   (0) and TOMBSTONE (2^64−1) slot words reserve two rare keys, not key 0 (the artifact
//!   reserves 0 and maps it to 1). Values are 8 bytes, stored XORed with `layout::VALUE_MASK` so
//!   the NULL word is one rare value (rejected as reserved) rather than the all-zero value.
//! - **Every leaf hangs under a special node.** A new prefix gets a special node at once (144 B
//!   for 65-slot leaves), so a leaf's parent entry never changes and the paper's split case 1
//!   (a special node interposed above a leaf) does not arise. It costs one small node per prefix
//!   that has a single leaf.
//! - Special nodes are sized so they never fill: a split leaves at least `min_piece` keys on
//!   each side, so a 256-key prefix has at most `256 / min_piece` leaves (16 for 65 slots and the
//!   3/4 split, the artifact's N16). Leaves are never merged and nothing published is freed.
//! - Bounds are an inclusive `min` and exclusive `max` (0 standing for 2^64), digest §8.6.
//! - IDUs READ the whole leaf (the artifact), not the paper's 552 bytes without values: an insert
//!   that meets its own key still pending must see the value word.
//! - An operation completes when its last data verb does; an IDU's release FAA rides in the
//!   same doorbell batch (no extra round trip). A split's release is its own verb, awaited.
//! - An operation whose future is dropped after it took a share keeps the share (posted verbs
//!   still execute); the runners never drop one, and a leaked share would stall splits of that
//!   leaf (they fail with `RetriesExhausted`). Clients are assumed not to crash (digest A8).
//! - Read delegation and write combining per compute node (the artifact's SMART heritage,
//!   digest §2.8 and §8.14), on by default, through [`crate::common::rdwc`]: a write folds its
//!   window's changes over the key's state in the leaf it entered and makes one remote change,
//!   the window closing right before the leaf READ it folds over (plant `rdwc-late-close` closes
//!   it after); a delegating search marks before each leaf READ (plant `rdwc-late-mark` marks
//!   after it). With no per-key lock to hold a window open, writes combine less than SMART's.
//! - A failed READ (a transport error, `--read-failures`) leaves no share and no half-done
//!   change: the share of a failed `[FAA, READ]` batch is given back when the FAA completed
//!   ([`dmkit_rdma::Verbs::post_keeping`]), a split's drain gives back its mark, and the steps a
//!   visible change cannot undo (a split's publish READ after the shrunk left leaf is written, an
//!   interposition's header READ before its trim) read again. Plants `failed-read-keeps-share`,
//!   `failed-read-undoes-split`, `failed-read-skips-trim`; preset `read-failure`.

pub mod cache;
pub mod config;
pub mod invariants;
pub mod layout;
pub mod presets;

pub use crate::common::change::RDWC_NO_FALLBACK;
use crate::common::change::{
    Change, Combined, RDWC_READ_FALLBACK_HANDLER, RDWC_WRITE_FALLBACK_HANDLER, Reply, fold, replies, search_via,
    write_via,
};
use crate::common::chunk::LocalChunkAllocator;
use crate::common::rdwc::{Rdwc, ReadLeader, WriteLeader};
use crate::registry::RunShape;
use crate::{Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug, RaceHandler};
use cache::NodeCache;
pub use config::{CONFIGS, DolphinOptions, Protocol};
use dmkit_rdma::{Buf, Caps, Client, CpuWork, Fixed, MemoryView, NodeId, RemoteAddr, Request, Response, VerbsError};
use layout::*;
use rand::Rng;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// The root entry and superblock on memory node 0: `[root entry u64][magic u64]`.
const SUPERBLOCK: Fixed = Fixed::new(8192, 16);
pub const SUPERBLOCK_OFFSET: u64 = SUPERBLOCK.offset();
const MAGIC: u64 = u64::from_le_bytes(*b"DMKDLPN1");

pub fn root_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

pub const FAILED_READ_UNDOES_SPLIT: PlantedBug = PlantedBug {
    name: "failed-read-undoes-split",
    description: "a split whose READ of the special node failed after the shrunk left leaf was written puts the old leaf back: a key readers saw in the left leaf vanishes",
};
pub const FAILED_READ_SKIPS_TRIM: PlantedBug = PlantedBug {
    name: "failed-read-skips-trim",
    description: "an interposition whose READ of the old node's header failed after the swing returns without trimming it: the node's header no longer fits its path",
};
pub const FAILED_READ_KEEPS_SHARE: PlantedBug = PlantedBug {
    name: "failed-read-keeps-share",
    description: "an operation whose [FAA share, READ leaf] batch failed at the READ keeps the share, and a split whose drain READ failed keeps its mark: the leaf's structure changes wait for good",
};
pub const NO_LINE_VERSIONS: PlantedBug = PlantedBug {
    name: "no-line-versions",
    description: "searches accept a leaf image without checking its versions (H5): a READ overlapping a split's rewrite of the old leaf misses a present key",
};
pub const PUBLISH_BEFORE_SHRINK: PlantedBug = PlantedBug {
    name: "publish-before-shrink",
    description: "a split publishes the new leaf before it rewrites the old one (the paper's order, H7): a search reads a moved key's old value from the old leaf after an update of it returned",
};
pub const DELETE_CLEARS: PlantedBug = PlantedBug {
    name: "delete-clears",
    description: "a delete zeroes the key and value slots (the paper's, H2): an insert reuses the slot and a late update of the deleted key lands in the new key's value",
};
pub const PENDING_VISIBLE: PlantedBug = PlantedBug {
    name: "pending-visible",
    description: "a search returns a slot whose value is not written yet (the paper's, H3): it returns a value nobody wrote",
};
pub const PROBE_ANY: PlantedBug = PlantedBug {
    name: "probe-any",
    description: "an insert that loses a slot CAS moves on without looking at the winner (the paper's, H4): two inserts of one key fill two slots",
};
pub const NO_SPEAR: PlantedBug = PlantedBug {
    name: "no-spear",
    description: "inserts, updates and deletes skip the Spear shared mark and splits do not wait for them: an update lands in the old leaf after the split copied it",
};
pub const NO_RANGE_CHECK: PlantedBug = PlantedBug {
    name: "no-range-check",
    description: "a leaf is trusted without checking that its range holds the key (no backtracking): a stale cached special node hides keys that moved right",
};
pub const RDWC_LATE_MARK: PlantedBug = PlantedBug {
    name: "rdwc-late-mark",
    description: "a delegating search marks its window after its leaf READ returns, not before it is posted: a follower that joined meanwhile takes a value older than its start",
};
pub const RDWC_LATE_CLOSE: PlantedBug = PlantedBug {
    name: "rdwc-late-close",
    description: "a combining write closes its window after its leaf READ, not before posting it: a follower that joined after a delete elsewhere reports the key present, and its value lands in a dead slot",
};
/// Every protection of the hardened protocol, removable by name. Five of them restore one of
/// the paper's behaviours each (the hazard in brackets).
pub const PLANTS: [PlantedBug; 13] = [
    FAILED_READ_UNDOES_SPLIT,
    FAILED_READ_SKIPS_TRIM,
    FAILED_READ_KEEPS_SHARE,
    NO_LINE_VERSIONS,
    PUBLISH_BEFORE_SHRINK,
    DELETE_CLEARS,
    PENDING_VISIBLE,
    PROBE_ANY,
    NO_SPEAR,
    NO_RANGE_CHECK,
    RDWC_LATE_MARK,
    RDWC_LATE_CLOSE,
    RDWC_NO_FALLBACK,
];

// The events Dolphin counts besides its race handlers', and its node counters.
/// A write that found its leaf full of tombstones rewrote it in place instead of splitting.
pub const COMPACTION: &str = "compaction";
/// A leaf split.
pub const LEAF_SPLIT: &str = "leaf_split";
/// A new path (node chain down to a leaf) published for a key prefix no node had.
pub const NEW_PREFIX: &str = "new_prefix";
/// A node's type raised so it covers a new entry (header by CAS, and the parent's entry).
pub const TYPE_SWITCH: &str = "type_switch";
/// A prefix split: a node interposed above a node whose prefix the key diverges from.
pub const PREFIX_SPLIT: &str = "prefix_split";
/// A scan that started from its start's special node in the node cache.
pub const SCAN_FROM_CACHE: &str = "scan_from_cache";
/// Node counter: nodes the compute node's node cache holds.
pub const CACHE_ENTRIES: &str = "cache_entries";
/// Node counter: special nodes (last key byte, over the leaves) the node cache holds.
pub const CACHE_SPECIAL_NODES: &str = "cache_special_nodes";
/// Node counter: other nodes the node cache holds.
pub const CACHE_REGULAR_NODES: &str = "cache_regular_nodes";
/// Node counter: nodes the node cache evicted.
pub const CACHE_EVICTIONS: &str = "cache_evictions";
/// Node counter: nodes the node cache dropped as stale.
pub const CACHE_INVALIDATIONS: &str = "cache_invalidations";

// The events of the branches that exist because another client got there first (see
// [`RACE_HANDLERS`]).
/// A node's header type was larger than its entry's (a type switch): the rest of it was read.
pub const NODE_GREW: &str = "node_grew";
/// A descent reached a node that does not fit its entry (stale cache, prefix split): re-read.
pub const STALE_NODE: &str = "stale_node";
/// A search's leaf READ overlapped a structure change's rewrite: the leaf is read again.
pub const TORN_READ: &str = "torn_read";
/// The leaf split and the key moved right: the special node is read again.
pub const BACKTRACK: &str = "backtrack";
/// An operation's shared mark met a structure change holding the leaf: it waits it out.
pub const SMO_WAIT: &str = "smo_wait";
/// A write found its key's slot claimed by an insert whose value is not written yet.
pub const PENDING_WAIT: &str = "pending_wait";
/// An insert's slot CAS lost to an insert of the same key: it waits and starts again.
pub const SAME_KEY_INSERT: &str = "same_key_insert";
/// An insert's slot CAS lost to an insert of another key: it tries the next empty slot.
pub const SLOT_TAKEN: &str = "slot_taken";
/// A delete's tombstone CAS found the key already gone: it folds again over an absent key.
pub const DELETE_LOST: &str = "delete_lost";
/// A combined write found no leaf in a descent begun before its window closed: it descends again.
pub const REFOLD: &str = "refold";
/// A structure change's exclusive mark met another one on the leaf: it starts again.
pub const SMO_CONFLICT: &str = "smo_conflict";
/// A structure change waited for the shares of operations in the leaf to drain.
pub const SMO_DRAIN_WAIT: &str = "smo_drain_wait";
/// A structure change found a key arrived in the leaf it holds (the paper's protocol only).
pub const SMO_KEY_ARRIVED: &str = "smo_key_arrived";
/// A split's CAS of its new leaf into a free special-node entry lost to another split.
pub const PUBLISH_RACED: &str = "publish_raced";
/// The first insert's root CAS lost to another first insert: it starts again below the winner's.
pub const ROOT_RACED: &str = "root_raced";
/// A new path's CAS into a free node entry lost to another key's child: it tries the next.
pub const CHILD_SLOT_TAKEN: &str = "child_slot_taken";
/// A new path's CAS lost to a child for the same key byte: it starts again through the winner's.
pub const CHILD_RACED: &str = "child_raced";
/// A type switch's header CAS lost to another change of the header: it reads the header again.
pub const TYPE_RACED: &str = "type_raced";
/// A prefix split's CAS of the child's reverse pointer lost to another interposition.
pub const INTERPOSE_RACED: &str = "interpose_raced";
/// A prefix split lost the parent entry's CAS after moving the child's reverse pointer: undone.
pub const INTERPOSE_UNDONE: &str = "interpose_undone";
/// A scan reached a node that does not fit its entry (a prefix split above it): re-read.
pub const SCAN_STALE_NODE: &str = "scan_stale_node";
/// A scan's leaf image was torn or the leaf split: it reads the special node again.
pub const SCAN_REREAD: &str = "scan_reread";
/// The READ of the special node a split publishes into failed: it is read again.
pub const PUBLISH_READ_RETRIED: &str = "publish_read_retried";
/// The READ of an interposed node's header failed before its trim: it is read again.
pub const TRIM_READ_RETRIED: &str = "trim_read_retried";
/// The READ batched with a share's FAA failed: the share is given back.
pub const SHARE_BACK_AFTER_FAILED_READ: &str = "share_back_after_failed_read";

/// Every branch of the hardened protocol that handles a race, by the event it counts.
/// `smo_key_arrived` is not among them: only the paper's protocol (or a plant restoring one of
/// its behaviours) reaches it, see [`DolphinHandle::smo_held`].
pub const RACE_HANDLERS: [RaceHandler; 24] = [
    RaceHandler {
        event: SHARE_BACK_AFTER_FAILED_READ,
        race: "(fault) the READ batched with an operation's Spear share failed: the share is given back before the failure is reported, else the leaf's splits wait for it for good",
    },
    RaceHandler {
        event: NODE_GREW,
        race: "a node's entry names a smaller type than its header (a type switch raised it after the entry was read): the rest of the node is read",
    },
    RaceHandler {
        event: STALE_NODE,
        race: "a descent reached a node whose reverse pointer or prefix does not fit the entry (stale cache, or a prefix split above it): it reads the entry again",
    },
    RaceHandler {
        event: TORN_READ,
        race: "a search's leaf READ overlapped a structure change's rewrite (line versions disagree): it reads the leaf again",
    },
    RaceHandler {
        event: BACKTRACK,
        race: "the leaf split since its entry was read and the key moved right: the special node is read again and its floor entry followed",
    },
    RaceHandler {
        event: SMO_WAIT,
        race: "an operation's shared mark met a structure change holding the leaf: it gives the share back and waits the change out",
    },
    RaceHandler {
        event: PENDING_WAIT,
        race: "a write found its key's slot claimed by an insert whose value is not written yet: it waits for that value and goes after it",
    },
    RaceHandler {
        event: SAME_KEY_INSERT,
        race: "an insert lost a slot CAS to an insert of the same key: it waits for the winner's value and starts again (else the key fills two slots)",
    },
    RaceHandler {
        event: SLOT_TAKEN,
        race: "an insert lost a slot CAS to an insert of another key: it tries the next empty slot",
    },
    RaceHandler {
        event: DELETE_LOST,
        race: "a delete's tombstone CAS found the key already gone (a concurrent delete won): it folds again over an absent key",
    },
    RaceHandler {
        event: REFOLD,
        race: "a combined write found no leaf in a descent that began before its window closed: it descends again, so its followers see a state after they joined",
    },
    RaceHandler {
        event: SMO_CONFLICT,
        race: "a structure change's exclusive mark met another one on the leaf: it gives both marks back, waits, and starts again",
    },
    RaceHandler {
        event: SMO_DRAIN_WAIT,
        race: "a structure change waits for the shares of operations already in the leaf to drain before it reads and rewrites it",
    },
    RaceHandler {
        event: PUBLISH_RACED,
        race: "a split's CAS of its new leaf into a free special-node entry lost to another split: it reads the special node again and takes another entry",
    },
    RaceHandler {
        event: ROOT_RACED,
        race: "the first insert's root CAS lost to another first insert: its path is freed and it starts again below the winner's",
    },
    RaceHandler {
        event: CHILD_SLOT_TAKEN,
        race: "a new path's CAS into a free node entry lost to another key's child: it tries the next free entry",
    },
    RaceHandler {
        event: CHILD_RACED,
        race: "a new path's CAS lost to a child for the same key byte: its path is freed and it starts again through the winner's",
    },
    RaceHandler {
        event: TYPE_RACED,
        race: "a type switch's header CAS lost to another change of the header: it reads the header again",
    },
    RaceHandler {
        event: INTERPOSE_RACED,
        race: "a prefix split's CAS of the child's reverse pointer lost to another interposition: it frees its nodes and starts again",
    },
    RaceHandler {
        event: INTERPOSE_UNDONE,
        race: "a prefix split moved the child's reverse pointer but lost the parent entry's CAS: it moves the pointer back and starts again",
    },
    RaceHandler {
        event: SCAN_STALE_NODE,
        race: "a scan reached a node whose reverse pointer or prefix does not fit the entry (a prefix split above it): it reads the entry again",
    },
    RaceHandler {
        event: SCAN_REREAD,
        race: "a scan's leaf image was torn or the leaf split since the special node was read: it reads the special node again",
    },
    RDWC_READ_FALLBACK_HANDLER,
    RDWC_WRITE_FALLBACK_HANDLER,
];

/// The state one compute node's clients share.
#[derive(Debug)]
pub struct DolphinNode {
    pub cache: NodeCache,
    pub chunks: LocalChunkAllocator,
    pub rdwc: Rdwc<Change, Reply>,
}

/// Dolphin's [`IndexKind`].
#[derive(Debug)]
pub struct Dolphin;

/// One client's handle.
#[derive(Debug)]
pub struct DolphinHandle<C> {
    o: DolphinOptions,
    layout: LeafLayout,
    special_type: u8,
    node: Arc<DolphinNode>,
    ctx: C,
    counters: Counters,
}

impl IndexKind for Dolphin {
    const NAME: &'static str = "dolphin";
    const DENSE_KEYS: Option<&'static str> = Some(
        "a leaf holds one 7-byte prefix, so nearly every key takes a leaf of its own, about 60 times the remote \
         memory of dense keys; its paper runs it on dense keys, the dense- workloads (README, Dolphin)",
    );
    /// `dmkit bench-load --keys 10000000`, 2026-11-27 (README, Benchmarks).
    const HOST_BYTES_PER_ITEM: u64 = 274;
    type Options = DolphinOptions;
    type NodeState = DolphinNode;
    type Handle<C: Client + Clone + 'static> = DolphinHandle<C>;

    fn limits(_: &DolphinOptions) -> Limits {
        Limits { min_key_bytes: KEY_BYTES, max_key_bytes: KEY_BYTES, min_value_bytes: 8, max_value_bytes: 8 }
    }

    fn validate(o: &DolphinOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(DolphinOptions, String), String> {
        if shape.key_bytes != 8 || shape.value_bytes != 8 {
            return Err(format!(
                "index dolphin stores 8-byte keys and values; workload {} has {}-byte keys and {}-byte values",
                shape.workload, shape.key_bytes, shape.value_bytes
            ));
        }
        let config = if config == "default" { "hardened" } else { config };
        let mut options = DolphinOptions { memory_nodes: shape.memory_nodes, ..DolphinOptions::default() };
        options.configure(config)?;
        if let Some(bytes) = shape.cache_bytes {
            options.cache_bytes = bytes;
        }
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    async fn create<C: Client>(o: &DolphinOptions, ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)?;
        let mut sb = Vec::with_capacity(16);
        sb.extend_from_slice(&NULL.to_le_bytes());
        sb.extend_from_slice(&MAGIC.to_le_bytes());
        ctx.write(root_addr(), Buf::from(sb)).await?;
        Ok(())
    }

    fn node_state(o: &DolphinOptions, _: &Caps) -> DolphinNode {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        DolphinNode {
            cache: NodeCache::new(o.cache_bytes),
            chunks,
            rdwc: Rdwc::new(o.rdwc_slots.max(1) as usize, o.read_delegation || o.write_combining),
        }
    }

    fn inherit(node: &DolphinNode, loader: &DolphinNode) {
        node.chunks.inherit(&loader.chunks);
    }

    /// Twice the bytes cached per compute node, as Sherman's (not measured for Dolphin). A cache
    /// holds at most every internal node: 0.7 B an item (`dmkit reproduce dolphin table2`'s
    /// fit, 357 MB at 512 M items), 1 with a margin — so a figure that sets a budget far above
    /// the index (Table II's "every internal node cached") is not refused for the budget.
    fn cache_host_bytes(o: &DolphinOptions, compute_nodes: u16, items: u64) -> u64 {
        o.cache_bytes.min(items) * 2 * compute_nodes as u64
    }

    fn node_state_bytes(n: &DolphinNode) -> u64 {
        n.cache.stats().bytes + n.chunks.bytes() + n.rdwc.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &DolphinOptions, node: Arc<DolphinNode>, ctx: C) -> DolphinHandle<C> {
        DolphinHandle {
            o: o.clone(),
            layout: o.layout(),
            special_type: o.special_type(),
            node,
            ctx,
            counters: Counters::default(),
        }
    }

    fn check_invariants(o: &DolphinOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    fn warm(o: &DolphinOptions, node: &DolphinNode, memory: &dyn MemoryView) -> Result<(), String> {
        invariants::warm(o, node, memory)
    }

    fn warm_keys(
        o: &DolphinOptions,
        node: &DolphinNode,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        invariants::warm_keys(o, node, memory, keys).map(|()| true)
    }

    fn node_counters(n: &DolphinNode) -> BTreeMap<&'static str, u64> {
        let s = n.cache.stats();
        let (special, regular) = n.cache.census();
        let mut counters = n.rdwc.stats().counters();
        counters.extend([
            // Under the names every cache's look-ups go by, so runs report the hit ratio.
            (Counters::CACHE_HIT, s.hits),
            (Counters::CACHE_MISS, s.misses),
            (CACHE_ENTRIES, s.entries),
            (CACHE_SPECIAL_NODES, special),
            (CACHE_REGULAR_NODES, regular),
            (CACHE_EVICTIONS, s.evictions),
            (CACHE_INVALIDATIONS, s.invalidations),
        ]);
        counters
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut DolphinOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "dolphin", bug)?);
        Ok(())
    }
}

/// The way from a parent entry towards `key`.
#[derive(Clone, Copy, Debug)]
struct Path {
    /// The entry slot followed (the root word for the root).
    p_ptr: RemoteAddr,
    /// Its value as read.
    p: Entry,
    /// The node holding `p_ptr` and the position it branches on (`None`: the root word).
    parent: Option<(RemoteAddr, usize)>,
    from_cache: bool,
    /// The key position the child's prefix starts at.
    pos: usize,
}

/// Why a key has no leaf.
#[derive(Clone, Copy, Debug)]
enum Missing {
    /// The tree is empty.
    EmptyRoot,
    /// The node has no entry for the key's byte at its branch position.
    NoChild,
    /// The key differs from the node's compressed prefix at this position.
    Mismatch(usize),
}

enum Descent {
    /// `path.p` is the key's leaf entry (as far as this walk can tell); its parent is special.
    Leaf(Path),
    /// No leaf for the key's prefix: `node` is where it would hang (`None` for an empty tree).
    Missing { path: Path, node: Option<(RemoteAddr, NodeImage)>, why: Missing },
}

/// A write in progress: its changes, closed lazily for an RDWC leader.
///
/// SMART closes a window once the key's lock is held and its state read (H7 of the SMART
/// digest). Dolphin has no per-key lock: the state a write folds over is a leaf READ that other
/// compute nodes' writes may follow at once, so every operation of the batch must have started
/// before that READ was posted. The window therefore closes right before the leaf's
/// `[FAA, READ]`; a batch that finds no leaf (it folds over node READs of the descent) is folded
/// again after a descent that started closed, if it has followers.
struct Pending<'l, 'a> {
    leader: Option<&'l mut WriteLeader<'a, Change, Reply>>,
    changes: Option<Vec<Change>>,
    /// The batch was closed before this attempt's descent.
    settled: bool,
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

    /// Whether a fold over the nodes this attempt's descent read may stand: the batch was closed
    /// before it, or is one operation alone (which started before it).
    fn state_is_fresh(&self) -> bool {
        self.settled || self.closed() <= 1
    }
}

/// A new path: its top entry, its top node, and every node and leaf to write.
type Built = (Entry, RemoteAddr, Vec<(RemoteAddr, Vec<u8>)>);

fn key_word(key: &[u8]) -> Result<u64, IndexError> {
    let k = u64::from_be_bytes(key.try_into().expect("limits checked"));
    if k == EMPTY || k == TOMBSTONE {
        return Err(IndexError::ReservedKey(
            "Dolphin reserves the keys whose slot words mark EMPTY and TOMBSTONE (0x5a5a..5a, 0xa5a5..a5)",
        ));
    }
    Ok(k)
}

/// The first 8 bytes of `b` as a big-endian key, zero-padded.
fn pad(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    u64::from_be_bytes(w)
}

/// The smallest key not before `start` (`None`: there is none).
fn start_key(start: Bound<&[u8]>) -> Option<u64> {
    match start {
        Bound::Unbounded => Some(0),
        Bound::Included(b) if b.len() <= 8 => Some(pad(b)),
        Bound::Excluded(b) if b.len() < 8 => Some(pad(b)),
        Bound::Included(b) | Bound::Excluded(b) => pad(b).checked_add(1),
    }
}

/// The largest key not past `end` (`None`: there is none).
fn end_key(end: Bound<&[u8]>) -> Option<u64> {
    match end {
        Bound::Unbounded => Some(u64::MAX),
        Bound::Included(b) if b.len() >= 8 => Some(pad(b)),
        Bound::Excluded(b) if b.len() > 8 => Some(pad(b)),
        Bound::Included(b) | Bound::Excluded(b) => pad(b).checked_sub(1),
    }
}

impl<C: Client + Clone + 'static> DolphinHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    fn hardened(&self) -> bool {
        self.o.protocol == Protocol::Hardened
    }

    fn exhausted(&self, op: &'static str) -> IndexError {
        IndexError::RetriesExhausted { op, retries: self.o.max_retries }
    }

    async fn read_word(&self, at: RemoteAddr) -> Result<u64, IndexError> {
        Ok(self.ctx.read(at, Buf::zeroed(8)).await?.u64_at(0))
    }

    /// READs a node as its entry's type says, and the rest if the header's type is larger.
    async fn read_node(&mut self, p: Entry) -> Result<NodeImage, IndexError> {
        let addr = p.addr();
        let t = p.node_type().max(1);
        let bytes = self.ctx.read(addr, Buf::zeroed(node_read_bytes(t))).await?;
        assert_eq!(bytes.len(), node_read_bytes(t), "a READ returns the bytes asked");
        let mut img = NodeImage::decode(&bytes);
        let ht = img.header.node_type();
        if ht > t {
            self.counters.event(NODE_GREW);
            let from = node_read_bytes(t);
            let more = self.ctx.read(addr.add(from as u64), Buf::zeroed(node_read_bytes(ht) - from)).await?;
            assert_eq!(more.len(), node_read_bytes(ht) - from, "a READ returns the bytes asked");
            img.entries.extend(NodeImage::decode(&[&[0u8; 16][..], more.as_slice()].concat()).entries);
        }
        assert_eq!(img.entries.len(), layout::capacity(t.max(ht)), "an image holds every entry of its type");
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, img.live().len() as u64).await;
        Ok(img)
    }

    /// READs a special node (its type is fixed by the leaf geometry, so no entry is needed).
    async fn read_special(&mut self, at: RemoteAddr) -> Result<NodeImage, IndexError> {
        self.read_node(Entry::internal(0, self.special_type, at)).await
    }

    /// Walks from the deepest cached node (or the root) to `key`'s leaf entry.
    async fn descend(&mut self, key: u64) -> Result<Descent, IndexError> {
        self.ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
        let mut path = match self.node.cache.lookup(key) {
            Some(hit) => Path {
                p_ptr: entry_addr(hit.node.addr, hit.index),
                p: hit.node.entries[hit.index],
                parent: Some((hit.node.addr, hit.node.branch)),
                from_cache: true,
                pos: hit.node.branch + 1,
            },
            None => {
                let p = Entry(self.read_word(root_addr()).await?);
                Path { p_ptr: root_addr(), p, parent: None, from_cache: false, pos: 0 }
            }
        };
        // A step to a deeper node is part of the attempt; an entry read again starts another.
        // So max_retries bounds the attempts, however deep the leaf is.
        let (mut left, mut deepest) = (self.o.max_retries, None);
        loop {
            if deepest.is_some_and(|d| path.pos <= d) {
                left -= 1;
                if left == 0 {
                    break;
                }
            }
            deepest = Some(path.pos);
            if path.p.is_null() {
                if path.parent.is_none() {
                    return Ok(Descent::Missing { path, node: None, why: Missing::EmptyRoot });
                }
                return Err(IndexError::Corrupt(format!("entry {} is NULL after pointing to a child", path.p_ptr)));
            }
            if path.p.is_leaf() {
                return match path.parent {
                    Some((_, SPECIAL_POS)) => Ok(Descent::Leaf(path)),
                    _ => Err(IndexError::Corrupt(format!("leaf entry {} outside a special node", path.p_ptr))),
                };
            }
            let addr = path.p.addr();
            let img = self.read_node(path.p).await?;
            let h = img.header;
            if img.rev != path.p_ptr.raw()
                || h.node_type() == 0
                || h.branch_pos() < path.pos
                || h.first_pos() > path.pos
            {
                // A stale cached entry, or a prefix split in progress above this node: read the
                // entry again (it swings once the split publishes, or the split backs out).
                self.counters.event(STALE_NODE);
                self.forget(key, &path);
                path.p = Entry(self.read_word(path.p_ptr).await?);
                path.from_cache = false;
                self.ctx.yield_now().await;
                continue;
            }
            let from = h.first_pos().max(path.pos);
            if let Some(q) = (from..h.branch_pos()).find(|&q| h.byte_at(q) != kbyte(key, q)) {
                return Ok(Descent::Missing { path, node: Some((addr, img)), why: Missing::Mismatch(q) });
            }
            self.node.cache.insert(key, addr, &img);
            let b = h.branch_pos();
            let found = if h.is_special() { img.floor(kbyte(key, b)) } else { img.exact(kbyte(key, b)) };
            let Some(i) = found else {
                if h.is_special() {
                    return Err(IndexError::Corrupt(format!("special node {addr} has no floor entry")));
                }
                return Ok(Descent::Missing { path, node: Some((addr, img)), why: Missing::NoChild });
            };
            path = Path {
                p_ptr: entry_addr(addr, i),
                p: img.entries[i],
                parent: Some((addr, b)),
                from_cache: false,
                pos: b + 1,
            };
        }
        Err(self.exhausted("descend"))
    }

    /// Drops the cached node `path` came from, if it came from the cache.
    fn forget(&self, key: u64, path: &Path) {
        if let (true, Some((node, branch))) = (path.from_cache, path.parent) {
            self.node.cache.invalidate(key, branch, node);
        }
    }

    /// Whether a leaf image reached from `path` holds `key` (false: its range ends at or below
    /// the key, which moved right in a split since the special node was read).
    ///
    /// The leaf is always the one its entry published, and starts at or below the key: a special
    /// node's entry goes NULL → leaf once (a CAS) and never changes again, leaves are never
    /// freed or merged, and a leaf's reverse pointer and minimum are written before its entry is
    /// published and kept by every rewrite. The minimum's last byte is the entry's partial, and
    /// any image of the special node (cached or fresh) has entries only of leaves published by
    /// then, so its floor entry for the key names a leaf starting at or below it. A reverse
    /// pointer or a minimum that does not fit is therefore corruption, not a stale route.
    fn leaf_holds(&self, key: u64, path: &Path, img: &LeafImage) -> Result<bool, IndexError> {
        if img.rev != path.p_ptr.raw() || key < img.min {
            return Err(IndexError::Corrupt(format!(
                "leaf {} (reverse pointer {:#x}, min {:#x}) reached from entry {} for key {key:#x}",
                path.p.addr(),
                img.rev,
                img.min,
                path.p_ptr
            )));
        }
        Ok(img.covers(key) || self.planted(NO_RANGE_CHECK))
    }

    /// The paper's backtracking: READ the special node again and take the floor entry.
    async fn backtrack(&mut self, key: u64, path: &mut Path) -> Result<(), IndexError> {
        self.counters.event(BACKTRACK);
        let (special, branch) = path.parent.expect("a leaf's parent is a special node");
        self.node.cache.invalidate(key, branch, special);
        let img = self.read_special(special).await?;
        self.node.cache.insert(key, special, &img);
        let i = img
            .floor(kbyte(key, SPECIAL_POS))
            .ok_or_else(|| IndexError::Corrupt(format!("special node {special} has no floor entry")))?;
        *path =
            Path { p_ptr: entry_addr(special, i), p: img.entries[i], parent: path.parent, from_cache: false, pos: 8 };
        self.ctx.yield_now().await;
        Ok(())
    }

    async fn read_leaf(&mut self, leaf: RemoteAddr) -> Result<LeafImage, IndexError> {
        let bytes = self.ctx.read(leaf, Buf::zeroed(self.layout.bytes())).await?;
        assert_eq!(bytes.len(), self.layout.bytes(), "a READ returns the bytes asked");
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, self.layout.slots as u64).await;
        let img = LeafImage::decode(&self.layout, &bytes);
        assert!(
            img.keys.len() == self.layout.slots && img.values.len() == self.layout.slots,
            "a leaf image has the layout's {} slots",
            self.layout.slots
        );
        Ok(img)
    }

    /// The remote search. An RDWC leader marks right before each leaf READ (the READ that decides
    /// the result by itself: a consistent image whose range holds the key) and unmarks before a
    /// descent, so followers take a result only from a READ posted after they joined.
    async fn search_remote_inner(
        &mut self,
        key: &[u8],
        mut leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        let k = key_word(key)?;
        let late = self.planted(RDWC_LATE_MARK);
        if let Some(l) = leader.as_deref_mut() {
            l.unmark();
        }
        let mut path = match self.descend(k).await? {
            Descent::Leaf(path) => path,
            Descent::Missing { .. } => return Ok(None),
        };
        for _ in 0..self.o.max_retries {
            if let Some(l) = leader.as_deref_mut().filter(|_| !late) {
                l.mark();
            }
            let img = self.read_leaf(path.p.addr()).await?;
            if let Some(l) = leader.as_deref_mut().filter(|_| late) {
                l.mark();
            }
            if !self.planted(NO_LINE_VERSIONS) && !img.consistent(&self.layout) {
                self.counters.event(TORN_READ);
                self.ctx.yield_now().await;
            } else if self.leaf_holds(k, &path, &img)? {
                return Ok(self.value_in(k, &img));
            } else {
                self.backtrack(k, &mut path).await?;
            }
        }
        Err(self.exhausted("search"))
    }

    /// `key`'s value in a leaf image, as a search sees it.
    fn value_in(&self, key: u64, img: &LeafImage) -> Option<Vec<u8>> {
        let i = img.keys.iter().position(|&k| k == key)?;
        let v = img.values[i];
        if v == VALUE_NULL && self.hardened() && !self.planted(PENDING_VISIBLE) {
            return None;
        }
        Some(load_value(v))
    }

    fn limits_of() -> Limits {
        Dolphin::limits(&DolphinOptions::default())
    }

    /// Takes a Spear share and READs the leaf in one round trip; `None` if a structure change
    /// holds the leaf (the share is given back and the change waited out).
    async fn enter(&mut self, leaf: RemoteAddr) -> Result<Option<LeafImage>, IndexError> {
        if self.planted(NO_SPEAR) {
            return Ok(Some(self.read_leaf(leaf).await?));
        }
        let lock = leaf.add(self.layout.lock_off());
        let done =
            self.ctx.post_keeping(vec![Request::faa(lock, 1), Request::read_len(leaf, self.layout.bytes())]).await;
        if let Some(e) = done.error {
            // The READ failed (a transport error) after the FAA took a share: give it back, or
            // the leaf's structure changes wait for it for good.
            if !done.completed.is_empty() {
                self.give_back_after_failed_read(lock, 1).await;
            }
            return Err(e.into());
        }
        let mut r = done.completed;
        let bytes = r.pop().expect("a READ response").into_buf()?;
        assert_eq!(bytes.len(), self.layout.bytes(), "a READ returns the bytes asked");
        let old = r.pop().expect("an FAA response").atomic()? as i64;
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, self.layout.slots as u64).await;
        if old < SPEAR_LIMIT {
            self.counters.lock_failures += 1;
            self.counters.event(SMO_WAIT);
            self.ctx.faa(lock, (-1i64) as u64).await?;
            self.wait_unlocked(leaf).await?;
            return Ok(None);
        }
        Ok(Some(LeafImage::decode(&self.layout, &bytes)))
    }

    /// Takes `amount` (a share, or a split's mark and share) off the lock word at `lock` after a
    /// READ failed under it. Best effort: the operation reports its failure anyway.
    async fn give_back_after_failed_read(&mut self, lock: RemoteAddr, amount: i64) {
        if self.planted(FAILED_READ_KEEPS_SHARE) {
            return;
        }
        self.counters.event(SHARE_BACK_AFTER_FAILED_READ);
        let _ = self.ctx.faa(lock, amount.wrapping_neg() as u64).await;
    }

    /// Polls the lock word until no structure change holds the leaf, backing off between polls
    /// (a split takes several round trips; polling at full speed only loads the NIC).
    async fn wait_unlocked(&mut self, leaf: RemoteAddr) -> Result<(), IndexError> {
        let lock = leaf.add(self.layout.lock_off());
        for attempt in 0..self.o.max_retries {
            if self.read_word(lock).await? as i64 >= SPEAR_LIMIT {
                return Ok(());
            }
            self.back_off(attempt).await;
        }
        Err(self.exhausted("spear wait"))
    }

    /// Yields, then waits a random, growing time (bounded exponential backoff, up to 6.4 µs).
    async fn back_off(&mut self, attempt: u32) {
        self.ctx.yield_now().await;
        let cap = 100u64 << attempt.min(6);
        let ns = self.ctx.with_rng(|r| r.random_range(0..=cap));
        self.ctx.sleep(ns).await;
    }

    /// Posts the operation's last data verbs with the share's release behind them on the QP;
    /// returns the data verbs' responses.
    async fn finish(&mut self, leaf: RemoteAddr, mut batch: Vec<Request>) -> Result<Vec<Response>, IndexError> {
        let n = batch.len();
        if !self.planted(NO_SPEAR) {
            batch.push(Request::faa(leaf.add(self.layout.lock_off()), (-1i64) as u64));
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let posted = batch.len();
        let mut r = self.ctx.post(batch).await?;
        assert_eq!(r.len(), posted, "a batch answers every request");
        r.truncate(n);
        Ok(r)
    }

    /// Waits until slot `x`'s value is written (an insert of the same key won the slot).
    async fn wait_value(&mut self, leaf: RemoteAddr, x: usize) -> Result<(), IndexError> {
        assert!(x < self.layout.slots, "slot {x} outside the leaf's {}", self.layout.slots);
        let at = leaf.add(self.layout.value_off(x));
        for _ in 0..self.o.max_retries {
            if self.read_word(at).await? != VALUE_NULL {
                return Ok(());
            }
            self.ctx.yield_now().await;
        }
        Err(self.exhausted("pending value"))
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        Self::limits_of().check_key(key)?;
        key_word(key)?;
        if !self.o.read_delegation {
            return self.search_remote(key, None).await;
        }
        let node = self.node.clone();
        search_via(self, &node.rdwc, key).await
    }

    async fn do_write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        let limits = Self::limits_of();
        limits.check_key(key)?;
        key_word(key)?;
        if let Change::Upsert(v) | Change::Update(v) = &change {
            limits.check_value(v)?;
            if store_value(v) == VALUE_NULL {
                return Err(IndexError::ReservedValue("Dolphin stores this 8-byte value as its NULL word"));
            }
        }
        if !self.o.write_combining {
            return self.modify_remote(key, vec![change], None).await.0;
        }
        let node = self.node.clone();
        write_via(self, &node.rdwc, key, change).await
    }

    /// Applies a batch of changes to `k` (one operation's, or an RDWC window's): walks to the
    /// leaf, folds the batch over the key's state there and makes one remote change. Any race
    /// that changes the key's state under it (a same-key insert elsewhere, a structure change)
    /// starts it again, folding the same batch over the new state.
    async fn modify(&mut self, k: u64, p: &mut Pending<'_, '_>) -> Result<Vec<bool>, IndexError> {
        for attempt in 0..self.o.max_retries {
            p.settled = p.changes.is_some();
            match self.descend(k).await? {
                Descent::Leaf(mut path) => {
                    if let Some(results) = self.at_leaf(k, &mut path, p).await? {
                        return Ok(results);
                    }
                    self.counters.retries += 1;
                }
                Descent::Missing { path, node, why } => {
                    let (state, results) = fold(None, p.changes());
                    let Some(v) = state else {
                        if p.state_is_fresh() || self.planted(RDWC_LATE_CLOSE) {
                            return Ok(results);
                        }
                        self.counters.event(REFOLD);
                        continue;
                    };
                    if self.new_path(k, store_value(&v), path, node, why).await? {
                        return Ok(results);
                    }
                    self.counters.retries += 1;
                    self.node.cache.invalidate_path(k);
                    if attempt > 2 {
                        self.ctx.yield_now().await;
                    }
                }
            }
        }
        Err(self.exhausted("write"))
    }

    /// A write at its leaf: enter, check, act. `None`: start again from the cache.
    async fn at_leaf(
        &mut self,
        k: u64,
        path: &mut Path,
        p: &mut Pending<'_, '_>,
    ) -> Result<Option<Vec<bool>>, IndexError> {
        for _ in 0..self.o.max_retries {
            let leaf = path.p.addr();
            if !self.planted(RDWC_LATE_CLOSE) {
                p.changes();
            }
            let Some(img) = self.enter(leaf).await? else { return Ok(None) };
            match self.leaf_holds(k, path, &img) {
                Ok(true) => return self.act(k, path, leaf, img, p).await,
                Ok(false) => {
                    self.finish(leaf, Vec::new()).await?;
                    self.backtrack(k, path).await?;
                }
                Err(e) => {
                    self.finish(leaf, Vec::new()).await?;
                    return Err(e);
                }
            }
        }
        Err(self.exhausted("leaf"))
    }

    /// Folds the batch over the key's state in the leaf image (the share is held) and makes the
    /// one change the final state needs.
    async fn act(
        &mut self,
        k: u64,
        path: &Path,
        leaf: RemoteAddr,
        img: LeafImage,
        p: &mut Pending<'_, '_>,
    ) -> Result<Option<Vec<bool>>, IndexError> {
        let l = self.layout;
        assert_eq!(img.keys.len(), l.slots, "a leaf image has the layout's slots");
        let found = img.keys.iter().position(|&x| x == k);
        if let Some(x) = found
            && self.hardened()
            && img.values[x] == VALUE_NULL
        {
            // An insert of this key holds the slot and has not written its value: it takes
            // effect at that WRITE, so this batch waits and goes after it.
            self.counters.event(PENDING_WAIT);
            if let Err(e) = self.wait_value(leaf, x).await {
                self.finish(leaf, Vec::new()).await?;
                return Err(e);
            }
        }
        let state = found.map(|x| load_value(img.values[x]));
        let (state, results) = fold(state, p.changes());
        if let Some(v) = &state {
            assert_eq!(&load_value(store_value(v)), v, "a value word decodes to what was encoded");
        }
        match (state, found) {
            (Some(v), Some(x)) => {
                let w = Request::write(leaf.add(l.value_off(x)), store_value(&v).to_le_bytes().to_vec());
                self.finish(leaf, vec![w]).await?;
                Ok(Some(results))
            }
            (None, Some(x)) if !self.hardened() || self.planted(DELETE_CLEARS) => {
                self.finish(
                    leaf,
                    vec![
                        Request::write(leaf.add(l.key_off(x)), slot_word(EMPTY).to_le_bytes().to_vec()),
                        Request::write(leaf.add(l.value_off(x)), VALUE_NULL.to_le_bytes().to_vec()),
                    ],
                )
                .await?;
                Ok(Some(results))
            }
            (None, Some(x)) => {
                let cas = Request::cas(leaf.add(l.key_off(x)), slot_word(k), slot_word(TOMBSTONE));
                let old = self.finish(leaf, vec![cas]).await?[0].atomic()?;
                if slot_word(old) != k {
                    // Another delete got there first: fold again over "absent".
                    self.counters.event(DELETE_LOST);
                    return Ok(None);
                }
                Ok(Some(results))
            }
            (None, None) => {
                self.finish(leaf, Vec::new()).await?;
                Ok(Some(results))
            }
            (Some(v), None) => Ok(self.insert_in_leaf(k, store_value(&v), path, leaf, &img).await?.then_some(results)),
        }
    }

    /// Claims an empty slot by CAS, lowest first; the last empty slot is never taken (the
    /// insert that would fill the leaf changes the structure instead). False: the key turned
    /// out present (start again).
    async fn insert_in_leaf(
        &mut self,
        k: u64,
        v: u64,
        path: &Path,
        leaf: RemoteAddr,
        img: &LeafImage,
    ) -> Result<bool, IndexError> {
        let l = self.layout;
        let empties: Vec<usize> = (0..l.slots).filter(|&i| img.keys[i] == EMPTY).collect();
        let inspect = self.hardened() && !self.planted(PROBE_ANY);
        for &x in empties.iter().take(empties.len().saturating_sub(1)) {
            let old = slot_word(self.ctx.cas(leaf.add(l.key_off(x)), slot_word(EMPTY), slot_word(k)).await?);
            if old == EMPTY {
                self.finish(leaf, vec![Request::write(leaf.add(l.value_off(x)), v.to_le_bytes().to_vec())]).await?;
                return Ok(true);
            }
            self.counters.cas_failures += 1;
            if old == k && inspect {
                // Another insert of this key won the slot: wait for its value, then start
                // again (this batch then goes after it).
                self.counters.event(SAME_KEY_INSERT);
                let waited = self.wait_value(leaf, x).await;
                self.finish(leaf, Vec::new()).await?;
                return waited.map(|()| false);
            }
            self.counters.event(SLOT_TAKEN);
        }
        self.smo(k, v, path, leaf).await
    }

    /// A structure change of `leaf` by an insert of `k` that holds a share of it.
    /// False: another change held the leaf, or the key arrived meanwhile (start again).
    async fn smo(&mut self, k: u64, v: u64, path: &Path, leaf: RemoteAddr) -> Result<bool, IndexError> {
        let l = self.layout;
        let lock = leaf.add(l.lock_off());
        let spear = !self.planted(NO_SPEAR);
        if spear {
            let old = self.ctx.faa(lock, SPEAR_SMO as u64).await? as i64;
            if old < SPEAR_LIMIT {
                // Another change holds it: give back the mark and the share, wait, start again.
                self.counters.lock_failures += 1;
                self.counters.event(SMO_CONFLICT);
                self.ctx.faa(lock, (-SPEAR_SMO - 1) as u64).await?;
                self.wait_unlocked(leaf).await?;
                return Ok(false);
            }
            let mut drained = false;
            for _ in 0..self.o.max_retries {
                let word = match self.read_word(lock).await {
                    Ok(w) => w,
                    Err(e) => {
                        // The mark and the share go back together, as when the drain gives up.
                        self.give_back_after_failed_read(lock, SPEAR_SMO + 1).await;
                        return Err(e);
                    }
                };
                if word as i64 == SPEAR_SMO + 1 {
                    drained = true;
                    break;
                }
                self.counters.event(SMO_DRAIN_WAIT);
                self.ctx.yield_now().await;
            }
            if !drained {
                self.ctx.faa(lock, (-SPEAR_SMO - 1) as u64).await?;
                return Err(self.exhausted("split drain"));
            }
        }
        // Whatever happens now, the exclusive mark and this insert's own share go together.
        let done = self.smo_held(k, v, path, leaf).await;
        if spear {
            let released = self.ctx.faa(lock, (-SPEAR_SMO - 1) as u64).await;
            done.as_ref().map_err(Clone::clone)?;
            released?;
        }
        done
    }

    /// The structure change proper, with the leaf held exclusively. False: the key arrived
    /// while this insert waited (start again with it present; the paper's protocol only).
    ///
    /// The hardened protocol cannot get here with `k` in the leaf. Between two structure changes
    /// a key slot only goes EMPTY → key → TOMBSTONE, so the highest slot `m` that was empty after
    /// the last change stays empty (every slot above it is taken, and an insert never takes the
    /// highest empty slot of its image, which is `m`). An insert B of `k` that took slot `s` in
    /// this leaf held a share, so its CAS came before this change's drain ended, and `s < m`. This
    /// insert's image (taken after the last change, by its share) either shows `k` in `s`, and it
    /// would have updated, or shows `s` empty: then it CASed `s` before settling for a structure
    /// change (it tries every empty slot but `m`, lowest first) and either won `s` (B lost it) or
    /// read `k` back and waited instead (`same_key_insert`). A key in the leaf now is therefore a
    /// broken invariant, reported as corruption. The paper's delete (which empties slots) and its
    /// probe (which passes over a same-key winner), and inserts without the Spear marks, void the
    /// argument; then the key is taken as arrived and the insert starts again.
    async fn smo_held(&mut self, k: u64, v: u64, path: &Path, leaf: RemoteAddr) -> Result<bool, IndexError> {
        let l = self.layout;
        let img = self.read_leaf(leaf).await?;
        if img.keys.contains(&k) {
            let arguable = [PROBE_ANY, DELETE_CLEARS, NO_SPEAR].into_iter().all(|b| !self.planted(b));
            if self.hardened() && arguable {
                return Err(IndexError::Corrupt(format!(
                    "key {k:#x} appeared in leaf {leaf} while a structure change for its insert drained"
                )));
            }
            self.counters.event(SMO_KEY_ARRIVED);
            return Ok(false);
        }
        let mut items = img.items();
        items.push((k, v));
        items.sort_unstable();
        if items.len() < l.slots {
            // Tombstones make room: rewrite the leaf in place. A split happens only with every
            // slot live, so each side gets at least `Split::min_piece` keys (special nodes never
            // fill, see `LeafLayout::special_type`).
            self.counters.event(COMPACTION);
            let mut e = img.clone();
            fill(&mut e, &items);
            self.rewrite(leaf, &img, e, None).await?;
            return Ok(true);
        }
        self.counters.event(LEAF_SPLIT);
        let keep = self.o.split.keep(items.len());
        let split_key = items[keep].0;
        let (special, _) = path.parent.expect("leaves hang under special nodes");
        let new_leaf = self.node.chunks.alloc(&self.ctx, l.bytes() as u64, LEAF_ALIGN).await?;
        let mut right = LeafImage::empty(&l, RemoteAddr::NULL, split_key, img.max);
        fill(&mut right, &items[keep..]);
        let mut left = img.clone();
        left.max = split_key;
        fill(&mut left, &items[..keep]);
        let split = Some((special, right, new_leaf, kbyte(split_key, SPECIAL_POS)));
        if let Err(e) = self.rewrite(leaf, &img, left, split).await {
            let _ = self.node.chunks.free(new_leaf, l.bytes() as u64);
            return Err(e);
        }
        self.node.cache.invalidate(k, SPECIAL_POS, special);
        Ok(true)
    }

    /// Rewrites the old leaf (and publishes a new right leaf, for a split) in the order the
    /// protocol needs. The caller holds the leaf exclusively.
    async fn rewrite(
        &mut self,
        leaf: RemoteAddr,
        old: &LeafImage,
        mut left: LeafImage,
        split: Option<(RemoteAddr, LeafImage, RemoteAddr, u8)>,
    ) -> Result<(), IndexError> {
        let l = self.layout;
        let ver = old.version();
        let lock_off = l.lock_off() as usize;
        // Everything before the lock word, in one WRITE: the lock is changed by FAA only, and
        // (versioned format) every data line goes with its version.
        let body = |img: &LeafImage| -> Vec<Request> {
            let mut bytes = img.encode(&l);
            bytes.truncate(lock_off);
            vec![Request::write(leaf, bytes)]
        };
        match (self.o.protocol, l.format) {
            (Protocol::Hardened, LeafFormat::Versioned) => {
                left.set_version(ver + 1);
                if self.planted(PUBLISH_BEFORE_SHRINK) {
                    if let Some(s) = split {
                        self.publish(s).await?;
                    }
                    self.ctx.post(body(&left)).await?;
                } else {
                    // Old leaf first: a moved key is in no reachable leaf until the publish (its
                    // searches wait), never in a stale one after it.
                    self.ctx.post(body(&left)).await?;
                    if let Some(s) = split
                        && let Err(e) = self.publish(s).await
                    {
                        // Put the old leaf back, one version on, so no moved key is lost.
                        let mut back = old.clone();
                        back.set_version(ver + 2);
                        self.ctx.post(body(&back)).await?;
                        return Err(e);
                    }
                }
            }
            (Protocol::Hardened, LeafFormat::FrontRear) => {
                // The digest's §4.4 item 6: rear first, front last.
                let rear = leaf.add(l.rear_off());
                let front = leaf.add(l.front_off());
                self.ctx.post(vec![Request::write(rear, vec![(ver as u8).wrapping_add(1)])]).await?;
                if let Some(s) = split
                    && let Err(e) = self.publish(s).await
                {
                    // Nothing moved: make the versions agree again.
                    self.ctx.post(vec![Request::write(front, vec![(ver as u8).wrapping_add(1)])]).await?;
                    return Err(e);
                }
                left.front = ver as u8;
                left.versions[0] = u64::from((ver as u8).wrapping_add(1));
                let mut w = body(&left);
                w.push(Request::write(front, vec![(ver as u8).wrapping_add(1)]));
                self.ctx.post(w).await?;
            }
            (Protocol::Paper, _) => {
                // The paper's order: publish, then shrink; no version moves.
                if let Some(s) = split {
                    self.publish(s).await?;
                }
                self.ctx.post(body(&left)).await?;
            }
        }
        Ok(())
    }

    /// Writes a new right leaf and CASes it into a free entry of its special node.
    async fn publish(&mut self, split: (RemoteAddr, LeafImage, RemoteAddr, u8)) -> Result<(), IndexError> {
        let (special, mut right, at, partial) = split;
        // The shrunk left leaf is already visible, so giving up (the caller then puts the old
        // leaf back) would hide what its readers have seen: the inserting key, if it sorts
        // below the split key. A lost CAS is therefore not an attempt: another publisher took
        // that entry, which stays taken, so losses are bounded by the special node's entries
        // (it never fills). Only failed READs count against the retry bound. (Counting lost
        // CASes too lost a key seen by a search: the sweep point `sweep-splits-retries-1`.)
        let mut attempts = 0;
        loop {
            if attempts >= self.o.max_retries {
                return Err(self.exhausted("publish leaf"));
            }
            let img = match self.read_special(special).await {
                Ok(img) => img,
                Err(IndexError::Verbs(VerbsError::Timeout(_))) if !self.planted(FAILED_READ_UNDOES_SPLIT) => {
                    attempts += 1;
                    self.counters.event(PUBLISH_READ_RETRIED);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Some(j) = img.live().iter().position(|e| e.is_null()) else {
                return Err(IndexError::Corrupt(format!("special node {special} is full")));
            };
            right.rev = entry_addr(special, j).raw();
            self.ctx.write(at, Buf::from(right.encode(&self.layout))).await?;
            let old = self.ctx.cas(entry_addr(special, j), NULL, Entry::leaf(partial, at).0).await?;
            if old == NULL {
                return Ok(());
            }
            self.counters.cas_failures += 1;
            self.counters.event(PUBLISH_RACED);
        }
    }

    /// Builds the nodes a key with no leaf needs below key position `from`: regular nodes while
    /// more than 6 bytes remain before the special byte, then a special node and a leaf. Returns
    /// the top entry (with `partial`), the top node and everything to write.
    async fn build(&mut self, k: u64, v: u64, from: usize, rev: RemoteAddr, partial: u8) -> Result<Built, IndexError> {
        let mut nodes: Vec<(RemoteAddr, NodeImage, usize)> = Vec::new();
        let mut pos = from;
        let mut slot = rev;
        let mut allocated: Vec<(RemoteAddr, u64)> = Vec::new();
        let result = async {
            while SPECIAL_POS - pos > MAX_PARTIALS {
                let at = self.node.chunks.alloc(&self.ctx, REGULAR_BYTES, REGULAR_ALIGN).await?;
                allocated.push((at, REGULAR_BYTES));
                let partials: Vec<u8> = (pos..pos + MAX_PARTIALS).map(|q| kbyte(k, q)).collect();
                let header = Header::new(pos + 1, NEW_NODE_TYPE, &partials);
                nodes.push((
                    at,
                    NodeImage { rev: slot.raw(), header, entries: vec![Entry::null(); 16] },
                    REGULAR_BYTES as usize,
                ));
                slot = entry_addr(at, 0);
                pos += MAX_PARTIALS + 1;
            }
            let st = self.special_type;
            let sbytes = node_read_bytes(st);
            let at = self.node.chunks.alloc(&self.ctx, sbytes as u64, SPECIAL_ALIGN).await?;
            allocated.push((at, sbytes as u64));
            let partials: Vec<u8> = (pos..SPECIAL_POS).map(|q| kbyte(k, q)).collect();
            let header = Header::new(pos + 1, st, &partials);
            nodes.push((at, NodeImage { rev: slot.raw(), header, entries: vec![Entry::null(); capacity(st)] }, sbytes));
            let leaf_at = self.node.chunks.alloc(&self.ctx, self.layout.bytes() as u64, LEAF_ALIGN).await?;
            allocated.push((leaf_at, self.layout.bytes() as u64));
            let mut leaf = LeafImage::empty(&self.layout, entry_addr(at, 0), k & !0xFF, prefix_end(k));
            leaf.keys[0] = k;
            leaf.values[0] = v;
            Ok::<_, IndexError>((leaf_at, leaf))
        }
        .await;
        let (leaf_at, leaf) = match result {
            Ok(x) => x,
            Err(e) => {
                for (a, b) in allocated {
                    let _ = self.node.chunks.free(a, b);
                }
                return Err(e);
            }
        };
        // Link each node to the next, the special node to the leaf.
        let n = nodes.len();
        nodes[n - 1].1.entries[0] = Entry::leaf(0, leaf_at);
        for i in (0..n - 1).rev() {
            let (child, ref img, _) = nodes[i + 1];
            let b = nodes[i].1.header.branch_pos();
            let e = Entry::internal(kbyte(k, b), img.header.node_type(), child);
            nodes[i].1.entries[0] = e;
        }
        let top = Entry::internal(partial, nodes[0].1.header.node_type(), nodes[0].0);
        let top_at = nodes[0].0;
        let mut writes: Vec<(RemoteAddr, Vec<u8>)> =
            nodes.iter().map(|(at, img, bytes)| (*at, img.encode(*bytes))).collect();
        writes.push((leaf_at, leaf.encode(&self.layout)));
        Ok((top, top_at, writes))
    }

    async fn write_all(&mut self, writes: &[(RemoteAddr, Vec<u8>)]) -> Result<(), IndexError> {
        let batch = writes.iter().map(|(at, b)| Request::write(*at, b.clone())).collect();
        crate::common::batch::post_per_node(&self.ctx, batch).await?;
        Ok(())
    }

    /// Gives back never-published nodes and leaves (each was written whole: its buffer's
    /// length is its allocation).
    fn free_all(&self, writes: &[(RemoteAddr, Vec<u8>)]) {
        for (at, b) in writes {
            let _ = self.node.chunks.free(*at, b.len() as u64);
        }
    }

    /// Gives `k`'s prefix a path; false if a concurrent change got there first.
    async fn new_path(
        &mut self,
        k: u64,
        v: u64,
        path: Path,
        node: Option<(RemoteAddr, NodeImage)>,
        why: Missing,
    ) -> Result<bool, IndexError> {
        match (why, node) {
            (Missing::EmptyRoot, _) => {
                let (top, _, writes) = self.build(k, v, 0, root_addr(), 0).await?;
                self.write_all(&writes).await?;
                if self.ctx.cas(root_addr(), NULL, top.0).await? == NULL {
                    self.counters.event(NEW_PREFIX);
                    return Ok(true);
                }
                self.counters.cas_failures += 1;
                self.counters.event(ROOT_RACED);
                self.free_all(&writes);
                Ok(false)
            }
            (Missing::NoChild, Some((n, img))) => self.add_child(k, v, &path, n, &img).await,
            (Missing::Mismatch(q), Some((n, img))) => self.interpose(k, v, &path, n, &img, q).await,
            (_, None) => Err(IndexError::Corrupt("a missing child without its node".into())),
        }
    }

    /// Hangs a new path for `k` in a free entry of node `n` (behind its capacity if it is full,
    /// then raising its type).
    async fn add_child(
        &mut self,
        k: u64,
        v: u64,
        path: &Path,
        n: RemoteAddr,
        img: &NodeImage,
    ) -> Result<bool, IndexError> {
        let b = img.header.branch_pos();
        let kb = kbyte(k, b);
        let cap = img.live().len();
        // Free entries in order, then the ones behind the capacity (taken lazily: the first
        // usually wins, and collecting up to 256 of them cost a load 5% of its time).
        let mut candidates = img.live().iter().enumerate().filter(|(_, e)| e.is_null()).map(|(i, _)| i).chain(cap..256);
        let Some(first) = candidates.next() else {
            return Err(IndexError::Corrupt(format!("node {n} is full but has no entry for byte {kb}")));
        };
        // The path is built and written once, for the first candidate; a later candidate only
        // rewrites its top node's reverse pointer.
        let (top, top_at, writes) = self.build(k, v, b + 1, entry_addr(n, first), kb).await?;
        self.write_all(&writes).await?;
        for (tries, j) in std::iter::once(first).chain(candidates).enumerate() {
            let slot = entry_addr(n, j);
            if tries > 0 {
                self.ctx.write(top_at, Buf::from(slot.raw().to_le_bytes().to_vec())).await?;
            }
            let old = Entry(self.ctx.cas(slot, NULL, top.0).await?);
            if old.is_null() {
                self.counters.event(NEW_PREFIX);
                self.node.cache.invalidate(k, b, n);
                if j >= cap {
                    self.raise_type(k, n, path, j).await?;
                }
                return Ok(true);
            }
            self.counters.cas_failures += 1;
            if old.partial() == kb {
                // Someone else hung this byte's child: finish its type switch, then use it.
                self.counters.event(CHILD_RACED);
                if j >= cap {
                    self.raise_type(k, n, path, j).await?;
                }
                break;
            }
            self.counters.event(CHILD_SLOT_TAKEN);
        }
        self.free_all(&writes);
        Ok(false)
    }

    /// Raises node `n`'s type until it covers entry `j` (header by CAS, the parent's entry too).
    async fn raise_type(&mut self, k: u64, n: RemoteAddr, path: &Path, j: usize) -> Result<(), IndexError> {
        self.counters.event(TYPE_SWITCH);
        let t = type_for(j + 1);
        let at = n.add(8);
        for _ in 0..self.o.max_retries {
            let h = Header(self.read_word(at).await?);
            if h.node_type() >= t {
                break;
            }
            if self.ctx.cas(at, h.0, h.with_type(t).0).await? == h.0 {
                break;
            }
            self.counters.cas_failures += 1;
            self.counters.event(TYPE_RACED);
        }
        // The parent's copy of the type only sizes READs: one try is enough.
        if path.p.node_type() < t {
            let _ = self.ctx.cas(path.p_ptr, path.p.0, path.p.with_type(t).0).await?;
        }
        self.node.cache.invalidate_path(k);
        Ok(())
    }

    /// Interposes a new node above `n`, where `k` leaves `n`'s compressed prefix at position
    /// `q`: move `n`'s reverse pointer first, swing the parent entry, then trim `n`'s header.
    async fn interpose(
        &mut self,
        k: u64,
        v: u64,
        path: &Path,
        n: RemoteAddr,
        img: &NodeImage,
        q: usize,
    ) -> Result<bool, IndexError> {
        let e = path.pos;
        let m = self.node.chunks.alloc(&self.ctx, REGULAR_BYTES, REGULAR_ALIGN).await?;
        let built = self.build(k, v, q + 1, entry_addr(m, 1), kbyte(k, q)).await;
        let (top, _, mut writes) = match built {
            Ok(x) => x,
            Err(err) => {
                let _ = self.node.chunks.free(m, REGULAR_BYTES);
                return Err(err);
            }
        };
        let partials: Vec<u8> = (e..q).map(|x| kbyte(k, x)).collect();
        let mut entries = vec![Entry::null(); 16];
        entries[0] = Entry::internal(img.header.byte_at(q), img.header.node_type(), n);
        entries[1] = top;
        let mimg = NodeImage { rev: path.p_ptr.raw(), header: Header::new(e + 1, NEW_NODE_TYPE, &partials), entries };
        writes.push((m, mimg.encode(REGULAR_BYTES as usize)));
        self.write_all(&writes).await?;
        let undo = |me: &Self, writes: &[(RemoteAddr, Vec<u8>)]| me.free_all(writes);
        if self.ctx.cas(n, path.p_ptr.raw(), entry_addr(m, 0).raw()).await? != path.p_ptr.raw() {
            self.counters.cas_failures += 1;
            self.counters.event(INTERPOSE_RACED);
            undo(self, &writes);
            return Ok(false);
        }
        let swung = Entry::internal(path.p.partial(), NEW_NODE_TYPE, m);
        if self.ctx.cas(path.p_ptr, path.p.0, swung.0).await? != path.p.0 {
            self.counters.cas_failures += 1;
            self.counters.event(INTERPOSE_UNDONE);
            self.ctx.cas(n, entry_addr(m, 0).raw(), path.p_ptr.raw()).await?;
            undo(self, &writes);
            return Ok(false);
        }
        self.counters.event(PREFIX_SPLIT);
        // Past the swing the trim must happen (readers reaching `n` through `m` re-read it until
        // its header starts at `q + 1`): a failed READ of the header is tried again, not passed
        // up (found with --read-failures: an untrimmed header after the insert reported failure).
        for _ in 0..self.o.max_retries {
            let word = match self.read_word(n.add(8)).await {
                Ok(word) => word,
                Err(e) if self.planted(FAILED_READ_SKIPS_TRIM) => return Err(e),
                Err(_) => {
                    self.counters.event(TRIM_READ_RETRIED);
                    continue;
                }
            };
            let h = Header(word);
            if h.first_pos() > q {
                break;
            }
            if self.ctx.cas(n.add(8), h.0, h.trimmed_to(q + 1).0).await? == h.0 {
                break;
            }
        }
        self.node.cache.invalidate_path(k);
        Ok(true)
    }

    async fn do_scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        let (Some(lo), Some(hi)) = (start_key(start), end_key(end)) else { return Ok(Vec::new()) };
        let mut out: Vec<(u64, u64)> = Vec::new();
        if limit == 0 || lo > hi {
            return Ok(Vec::new());
        }
        let pairs =
            |out: Vec<(u64, u64)>| out.into_iter().map(|(k, v)| (k.to_be_bytes().to_vec(), load_value(v))).collect();
        // The start's special node from the cache (a special node keeps its prefix for good, and
        // its entries are read fresh): most scans end within it, in two round trips.
        let mut lo = lo;
        if let Some(hit) = self.node.cache.lookup(lo).filter(|h| h.node.branch == SPECIAL_POS) {
            self.counters.event(SCAN_FROM_CACHE);
            let special = hit.node.addr;
            let img = self.read_special(special).await?;
            let first = prefix_of(lo, SPECIAL_POS);
            self.scan_special(special, img, first, lo, hi, limit, &mut out).await?;
            let end = first | 0xFF;
            if out.len() >= limit || end >= hi {
                out.truncate(limit);
                return Ok(pairs(out));
            }
            lo = end + 1;
        }
        // (entry slot, entry, key position its child starts at, key bytes known before it)
        let mut stack: Vec<(RemoteAddr, Entry, usize, u64)> = Vec::new();
        let root = Entry(self.read_word(root_addr()).await?);
        if !root.is_null() {
            stack.push((root_addr(), root, 0, 0));
        }
        let mut rereads = 0u32;
        while let Some((p_ptr, p, pos, known)) = stack.pop() {
            let addr = p.addr();
            let img = self.read_node(p).await?;
            let h = img.header;
            if img.rev != p_ptr.raw() || h.branch_pos() < pos || h.first_pos() > pos {
                rereads += 1;
                if rereads > self.o.max_retries {
                    return Err(self.exhausted("scan"));
                }
                self.counters.event(SCAN_STALE_NODE);
                let fresh = Entry(self.read_word(p_ptr).await?);
                stack.push((p_ptr, fresh, pos, known));
                self.ctx.yield_now().await;
                continue;
            }
            let b = h.branch_pos();
            let mut prefix = known;
            for x in pos.max(h.first_pos())..b {
                prefix |= u64::from(h.byte_at(x)) << (56 - 8 * x);
            }
            let first = prefix_of(prefix, b);
            let last = first | (u64::MAX >> (8 * b));
            if last < lo {
                continue;
            }
            if first > hi {
                break;
            }
            if h.is_special() {
                self.scan_special(addr, img, first, lo, hi, limit, &mut out).await?;
                if out.len() >= limit || last >= hi {
                    break;
                }
                continue;
            }
            let mut kids: Vec<(usize, Entry)> =
                img.live().iter().copied().enumerate().filter(|(_, e)| !e.is_null()).collect();
            kids.sort_by_key(|(_, e)| std::cmp::Reverse(e.partial()));
            for (i, e) in kids {
                // Children whose key range misses [lo, hi] are never read.
                let kp = first | u64::from(e.partial()) << (56 - 8 * b);
                let kp_last = kp | (u64::MAX >> (8 * (b + 1)));
                if kp_last >= lo && kp <= hi {
                    stack.push((entry_addr(addr, i), e, b + 1, kp));
                }
            }
        }
        out.truncate(limit);
        Ok(pairs(out))
    }

    /// Collects the items of special node `s` (prefix `first`) within `[lo, hi]`, leaf by leaf
    /// in key order, until `limit` items are out.
    #[allow(clippy::too_many_arguments)]
    async fn scan_special(
        &mut self,
        s: RemoteAddr,
        mut img: NodeImage,
        first: u64,
        lo: u64,
        hi: u64,
        limit: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), IndexError> {
        let end = hi.min(first | 0xFF);
        let mut cur = lo.max(first);
        let per_leaf = (self.layout.slots / 2).max(1);
        // Only re-reads count against `max_retries`: every pass that reads its leaves whole
        // moves `cur` past at least one leaf, so passes without a re-read are bounded by the
        // special node's entries. (Counting them too made a scan over many leaves give up
        // with a small bound and no race at all, and the batch size a matter of safety.)
        let mut rereads = 0;
        loop {
            if cur > end || out.len() >= limit {
                return Ok(());
            }
            let mut leaves: Vec<(usize, Entry)> =
                img.live().iter().copied().enumerate().filter(|(_, e)| !e.is_null()).collect();
            leaves.sort_by_key(|(_, e)| e.partial());
            let from = leaves.iter().rposition(|(_, e)| e.partial() <= kbyte(cur, SPECIAL_POS)).unwrap_or(0);
            let want = (limit - out.len()) / per_leaf + 1;
            let chosen: Vec<(usize, Entry)> = leaves[from..].iter().copied().take(want).collect();
            // No leaf at all: read the special node again (as a torn leaf would).
            let mut restart = chosen.is_empty();
            let reads = chosen.iter().map(|(_, e)| Request::read_len(e.addr(), self.layout.bytes())).collect();
            let images = crate::common::batch::post_per_node(&self.ctx, reads).await?;
            for ((i, _), r) in chosen.iter().zip(images) {
                let leaf = LeafImage::decode(&self.layout, &r.into_buf()?);
                self.ctx.charge_cpu(CpuWork::NodeSearchEntry, self.layout.slots as u64).await;
                let ok = (leaf.consistent(&self.layout) || self.planted(NO_LINE_VERSIONS))
                    && leaf.rev == entry_addr(s, *i).raw()
                    && leaf.covers(cur);
                if !ok {
                    // Torn, or a split since the special node was read: read it again.
                    self.counters.event(SCAN_REREAD);
                    restart = true;
                    break;
                }
                let top = if leaf.max == 0 { end } else { end.min(leaf.max - 1) };
                let mut items: Vec<(u64, u64)> =
                    leaf.items().into_iter().filter(|&(k, _)| k >= cur && k <= top).collect();
                items.sort_unstable();
                out.extend(items);
                if leaf.max == 0 || leaf.max > end || out.len() >= limit {
                    return Ok(());
                }
                cur = leaf.max;
            }
            if restart {
                rereads += 1;
                if rereads >= self.o.max_retries {
                    return Err(self.exhausted("scan leaves"));
                }
                self.ctx.yield_now().await;
                img = self.read_special(s).await?;
            }
        }
    }
}

/// Packs `items` into the first slots of `img`, clearing the rest.
fn fill(img: &mut LeafImage, items: &[(u64, u64)]) {
    for i in 0..img.keys.len() {
        (img.keys[i], img.values[i]) = items.get(i).copied().unwrap_or((EMPTY, VALUE_NULL));
    }
}

impl<C: Client + Clone + 'static> Combined for DolphinHandle<C> {
    async fn search_remote(
        &mut self,
        key: &[u8],
        leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        self.search_remote_inner(key, leader).await
    }

    async fn modify_remote(
        &mut self,
        key: &[u8],
        changes: Vec<Change>,
        leader: Option<&mut WriteLeader<'_, Change, Reply>>,
    ) -> (Result<bool, IndexError>, Option<Vec<Result<bool, IndexError>>>) {
        let mut p = Pending { changes: leader.is_none().then_some(changes), leader, settled: false };
        let outcome = match key_word(key) {
            Ok(k) => self.modify(k, &mut p).await,
            Err(e) => Err(e),
        };
        replies(outcome, p.closed())
    }

    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    fn no_fallback(&self) -> bool {
        self.planted(RDWC_NO_FALLBACK)
    }
}

impl<C: Client + Clone + 'static> Index for DolphinHandle<C> {
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

//! # Sherman: the write-optimised B+tree on disaggregated memory (SIGMOD '22)
//!
//! Digest: `shared/digests/sherman.md`. A B-link tree over one-sided verbs: every node carries
//! fence keys and a right-sibling pointer, so a reader that lands on a node that split meanwhile
//! moves right; leaves are unsorted and a change writes back one slot; writers lock a node with a
//! lock word, taken through the hierarchical on-chip lock (HOCL, [`crate::common::hocl`]), and
//! release it with the write-back in one doorbell batch, relying on one QP's WRITE → WRITE order.
//!
//! - [`layout`]: byte-exact nodes, in the artifact's bookend versioning or CHIME's per-line fix.
//! - [`config`]: options and the named configurations the papers ran (`sherman-artifact`,
//!   `-smart`, `-chime`, `-hstore`, `-dolphin`, and the corrected `sherman-fixed`, the default).
//! - [`cache`]: the compute-node index cache with a byte budget.
//!
//! ## Operations (digest §3; every verb and its size in the digest's §3.13 table)
//!
//! - **search**: from the cache (the deepest cached internal node covering the key) or the
//!   root, READ node by node (`node_bytes` each), moving right on `key ≥ highest`, to the leaf;
//!   one READ with a warm cache. With RDWC, same-key searches of one compute node share one.
//! - **insert / update / delete**: find the leaf without reading it, lock it (local table,
//!   then CAS on the lock word unless the lock was handed over), READ it, apply the change, then
//!   `[WRITE slot, WRITE unlock]` in one batch: 3 round trips. A full leaf splits: the new
//!   sibling is written first (awaited), then the old node with the unlock, then the separator
//!   goes into the parent the same way, up to a new root CASed into the superblock. With RDWC,
//!   same-key writes of one compute node are combined into the leader's write-back.
//! - **scan**: find the leaf of the start key, then follow sibling pointers, reading and
//!   validating every leaf: per-key correct (DESIGN §3). This is the digest's fixed scan (D9);
//!   the artifact's scan over cached level-1 nodes only (B5) is not reproduced.
//!
//! ## Deviations from the artifact, and why
//!
//! - The root is cached per compute node and refreshed lazily: a traversal that moves right at
//!   the root's level, or a failed root CAS, re-reads the superblock word, which holds
//!   `(address | level)` (CHIME's format, D6). The artifact broadcasts NEW_ROOT messages (D8);
//!   B-link traversal makes a stale root correct, only slower, until the refresh.
//! - Every retry loop is bounded (`max_retries`, B13); a torn node under the lock is reported as
//!   [`IndexError::Corrupt`], never asserted.
//! - Keys and values have the configured fixed sizes; the all-0xFF key is reserved (+infinity,
//!   D10). Insert reports whether the key existed, derived under the lock (D10), and update of an
//!   absent key changes nothing.
//! - Delete clears the slot and leaves empty leaves in place (no merge, as the artifact, B15).
//!
//! ## Stale cached upper levels: dropped when they route into a split
//!
//! With every internal level cached (`sherman-fixed`), a cached copy is never re-read while it
//! routes correctly, and a B-link traversal moving right makes every route correct eventually.
//! Until 2026-11-28 a copy that routed to a node which had split since stayed in the cache, and
//! during a load the level-2 copies, cached early, sent every later key of their ranges along
//! ever longer chains of level-1 siblings: move-right READs per insert grew with the tree, 0.13
//! at 100 k keys, 0.35 at 300 k, 1.13 at 1 M (about 130 siblings per such traversal at 1 M), and
//! loading 10 M keys took 122 s. The artifact invalidates a stale cached entry (digest §3.3,
//! §3.5, §3.11), and so does CHIME for a cached internal node (chime digest §3.1). Now `find`
//! drops a copy whose route led to a node that no longer covers the key (`cache_stale_internal`,
//! a host-side tally), keeps moving right, and the next traversal of the range re-reads the node
//! from the level above: 0.014 move-right READs per insert at 1 M, flat from 100 k, and a 10 M
//! load in 37 s, with the same loaded image (`Image::memory_digest` unchanged at 100 k, 1 M and
//! 10 M keys): `cargo test --release -p dmkit-indexes --test sherman_move_right -- --ignored
//! --nocapture` (`DMKIT_MR_KEYS`, `DMKIT_MR_STEP`, `DMKIT_MR_CONFIG`). Simulated runs that
//! insert with `sherman-fixed` (LOAD, YCSB D and E, `--load insert`) issue fewer READs than
//! before; `sherman-smart` (level 1 only) and `sherman-chime` (`stale_restart`) had at most
//! 0.001 per insert and barely change.
//!
//! ## Why no route lands left of its key (no restart for it)
//!
//! A node's level and lowest fence never change: a split keeps the lower half in place and gives
//! the new right sibling `lowest = separator`, and nodes are never freed or merged. A separator
//! goes into a parent only with the child whose lowest it is (a helper installing a new root
//! takes the old root's `highest` and `sibling` from one validated image, the same pair), and a
//! root word packs its node's level. So a child routed to for `key` by any copy of its parent,
//! however stale, has `lowest ≤ key` and the level below the parent's, a stale root word names a
//! node of the level it says, and a sibling pointer names a node whose lowest is the highest fence
//! read with it. A traversal, a leaf check or a scan that finds `key < lowest`, or a node of
//! another level, reports [`IndexError::Corrupt`] instead of restarting: the restart would hide a
//! broken tree, and no race reaches it. A leaf that no longer covers its key is always one that
//! split since (`key ≥ highest`): move right, or restart for a stale cached route (`cache_stale`).
//!
//! ## Planted bugs
//!
//! - `no-sibling-chase`: a reader or writer whose key is at or above a node's highest fence does
//!   not move right: a search misses a key that moved to the new sibling, an insert lands in a
//!   leaf that does not cover it.
//! - `no-version-check`: node images are used without checking any version: a READ that
//!   overlaps a split returns a torn node.
//! - `unlock-before-write`: the unlock precedes the write-back in the batch, so the next writer
//!   reads the node before this change lands and overwrites it.
//! - `split-write-unsignaled`: the split node's WRITE is posted unsignaled and not awaited before
//!   the parent changes (the artifact's behaviour, B7), in a configuration that awaits it.

pub mod cache;
pub mod config;
pub mod layout;
pub mod presets;

use crate::common::bounds::{below_end, in_bounds};
pub use crate::common::change::{Change, Reply};
use crate::common::change::{Combined, RDWC_READ_FALLBACK_HANDLER, RDWC_WRITE_FALLBACK_HANDLER, search_via, write_via};
use crate::common::chunk::LocalChunkAllocator;
use crate::common::hocl::{HOCL_HANDED_OVER, HOCL_LOCK_FAILED, HoclHeld, LocalLockTable, acquire_global};
use crate::common::rdwc::{Rdwc, ReadLeader, WriteLeader};
use crate::common::root::{self, CachedRoot};
use crate::common::warm::children_below;
use crate::hash::hash64;
use crate::registry::RunShape;
use crate::{Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug, RaceHandler};
use cache::{CachedNode, IndexCache};
pub use config::{LockPlacement, ShermanOptions};
use dmkit_rdma::{Buf, Caps, Client, CpuWork, Fixed, MemoryView, NodeId, RemoteAddr, Request};
use layout::{Geometry, LeafImage, Node, Reject, Slot};
use std::ops::Bound;
use std::sync::Arc;

/// The superblock on memory node 0: `[root word u64][magic u64][placement u8, pad 3][locks u32]`.
const SUPERBLOCK: Fixed = Fixed::new(8192, SUPERBLOCK_BYTES as u64);
pub const SUPERBLOCK_OFFSET: u64 = SUPERBLOCK.offset();
const SUPERBLOCK_BYTES: usize = 24;
const MAGIC: u64 = u64::from_le_bytes(*b"DMKSHRM1");
/// Host lock tables live in each memory node's reserved region (DESIGN: below the allocator).
const HOST_LOCK_TABLE: Fixed = Fixed::new(512 << 10, 256 << 10);
pub const HOST_LOCK_TABLE_AT: u64 = HOST_LOCK_TABLE.offset();
pub const HOST_LOCK_TABLE_MAX: u64 = HOST_LOCK_TABLE.bytes();
// Both in the reserved bytes (checked by `Fixed::new`), and apart: a lock word over the root
// word would alias it (found by mutation: a table moved to offset 0 went unnoticed by every
// preset, as only three of its 32 768 words would alias it).
const _: () = assert!(SUPERBLOCK.disjoint(HOST_LOCK_TABLE), "the host lock table is clear of the superblock");
/// Nodes are 64-byte aligned, so the root word packs the root's level into the low 6 bits.
const NODE_ALIGN: u64 = root::ROOT_ALIGN;
const LOCK_HASH_SEED: u64 = 0x5e1f_10c4;

fn superblock_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

/// A traversal found an internal node for its key in the node cache.
pub const CACHE_HIT: &str = Counters::CACHE_HIT;
/// A traversal looked in the node cache and found no internal node for its key.
pub const CACHE_MISS: &str = Counters::CACHE_MISS;
/// A traversal, write or separator insert followed a node's sibling pointer (any cause).
pub const MOVE_RIGHT: &str = "move_right";
/// A move right from a node a cached internal node routed to.
pub const MOVE_RIGHT_FROM_CACHE: &str = "move_right_from_cache";
/// A cached internal node routed to an internal node that split since: it is dropped.
pub const CACHE_STALE_INTERNAL: &str = "cache_stale_internal";
/// An unlock handed the held global lock to a local waiter instead of releasing it.
pub const LOCK_HAND_OVER: &str = "lock_hand_over";
/// A leaf split.
pub const LEAF_SPLIT: &str = "leaf_split";
/// A root split whose new root's CAS into the superblock won.
pub const ROOT_SPLIT: &str = "root_split";
/// An internal node split.
pub const INTERNAL_SPLIT: &str = "internal_split";
/// A scan went on to the next leaf.
pub const SCAN_NEXT_LEAF: &str = "scan_next_leaf";
/// A node READ overlapped a write-back or split (its versions disagree): read it again.
pub const TORN_READ: &str = "torn_read";
/// A search found its key in a slot whose versions disagree (bookend mode): read the leaf again.
pub const TORN_SLOT: &str = "torn_slot";
/// A scan read a leaf with a torn slot: read it again.
pub const SCAN_TORN_SLOT: &str = "scan_torn_slot";
/// A traversal read an internal node whose highest fence is at or below the key: move right.
pub const MOVE_RIGHT_INTERNAL: &str = "move_right_internal";
/// A search or write reached a leaf whose highest fence is at or below the key: move right.
pub const MOVE_RIGHT_LEAF: &str = "move_right_leaf";
/// A separator insert locked a parent that split meanwhile: move right.
pub const MOVE_RIGHT_PARENT: &str = "move_right_parent";
/// A scan's next leaf split after the previous leaf was read: move right.
pub const SCAN_MOVE_RIGHT: &str = "scan_move_right";
/// A cached internal node routed to a leaf that no longer covers the key: invalidate it.
pub const CACHE_STALE: &str = "cache_stale";
/// Another splitter split the root and has not installed the new root: help it.
pub const ROOT_HELP: &str = "root_help";
/// The CAS of a new root lost to another client's: insert into the level that now exists.
pub const ROOT_CAS_LOST: &str = "root_cas_lost";

const RACE_HANDLERS: [RaceHandler; 14] = [
    RaceHandler {
        event: TORN_READ,
        race: "a node READ overlapped a concurrent write-back or split (versions disagree): it is read again, else a torn node is used",
    },
    RaceHandler {
        event: TORN_SLOT,
        race: "(bookend, torn_slot_reread) a search read its key's slot while a write-back landed: the leaf is read again, else the key looks absent",
    },
    RaceHandler {
        event: SCAN_TORN_SLOT,
        race: "(bookend) a scan read a leaf while a write-back landed in a slot: the leaf is read again, else a torn pair is returned",
    },
    RaceHandler {
        event: MOVE_RIGHT_INTERNAL,
        race: "an internal node split after its parent (or cached copy) routed here: the traversal follows the sibling, else it descends a wrong subtree",
    },
    RaceHandler {
        event: MOVE_RIGHT_LEAF,
        race: "a leaf split after the traversal routed to it: the search or write follows the sibling, else it misses the key or writes the wrong leaf",
    },
    RaceHandler {
        event: MOVE_RIGHT_PARENT,
        race: "the parent a separator goes into split meanwhile: the insert follows its sibling, else the separator lands outside the parent's range",
    },
    RaceHandler {
        event: SCAN_MOVE_RIGHT,
        race: "a scan's next leaf split before it was read, or the start leaf split after the traversal: the scan follows the sibling",
    },
    RaceHandler {
        event: CACHE_STALE,
        race: "a cached internal node routed to a leaf that split since it was cached: the copy is invalidated (and, with stale_restart, the operation restarts from the root)",
    },
    RaceHandler {
        event: ROOT_HELP,
        race: "another client split the root and has not installed the new root: this splitter installs it with the old root's sibling, instead of waiting",
    },
    RaceHandler {
        event: ROOT_CAS_LOST,
        race: "two clients CASed a new root; this one lost: it takes the winner's root and inserts its separator into the new level",
    },
    HOCL_LOCK_FAILED,
    HOCL_HANDED_OVER,
    RDWC_READ_FALLBACK_HANDLER,
    RDWC_WRITE_FALLBACK_HANDLER,
];

pub const NO_SIBLING_CHASE: PlantedBug = PlantedBug {
    name: "no-sibling-chase",
    description: "a key at or above a node's highest fence does not move right: searches miss moved keys, inserts land in the wrong leaf",
};
pub const NO_VERSION_CHECK: PlantedBug = PlantedBug {
    name: "no-version-check",
    description: "node images are used without checking versions: a READ overlapping a split returns a torn node",
};
pub const UNLOCK_BEFORE_WRITE: PlantedBug = PlantedBug {
    name: "unlock-before-write",
    description: "the unlock precedes the write-back in the batch: the next writer reads the node before the change lands",
};
pub const SPLIT_SKIPS_PARENT: PlantedBug = PlantedBug {
    name: "split-skips-parent",
    description: "a leaf split never inserts its separator into the parent: the new leaf is reachable only through its left sibling, though the operation finished",
};
pub const SPLIT_WRITE_UNSIGNALED: PlantedBug = PlantedBug {
    name: "split-write-unsignaled",
    description: "the split node's WRITE is not awaited before the parent changes (artifact bug B7)",
};
const PLANTS: [PlantedBug; 6] = [
    NO_SIBLING_CHASE,
    NO_VERSION_CHECK,
    UNLOCK_BEFORE_WRITE,
    SPLIT_SKIPS_PARENT,
    SPLIT_WRITE_UNSIGNALED,
    root::ROOT_COPY_REGRESSES,
];

/// Where this tree's locks are, resolved against the NIC's capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locks {
    pub placement: LockPlacement,
    /// Lock words per memory node (tables only).
    pub count: u32,
}

impl Locks {
    /// `OnChip` falls back to a host table where the NIC has no device memory, and is clamped
    /// to the device memory it has (digest D2).
    pub fn resolve(o: &ShermanOptions, caps: &Caps) -> Locks {
        match o.lock_placement {
            LockPlacement::Embedded => Locks { placement: LockPlacement::Embedded, count: 0 },
            LockPlacement::OnChip if caps.device_memory_bytes >= 8 => Locks {
                placement: LockPlacement::OnChip,
                count: (o.lock_table_bytes.min(caps.device_memory_bytes) / 8) as u32,
            },
            LockPlacement::OnChip | LockPlacement::HostTable => {
                Locks { placement: LockPlacement::HostTable, count: (o.lock_table_bytes / 8) as u32 }
            }
        }
    }

    fn code(self) -> u8 {
        match self.placement {
            LockPlacement::OnChip => 1,
            LockPlacement::HostTable => 2,
            LockPlacement::Embedded => 3,
        }
    }

    fn from_code(code: u8, count: u32) -> Result<Locks, String> {
        let placement = match code {
            1 => LockPlacement::OnChip,
            2 => LockPlacement::HostTable,
            3 => LockPlacement::Embedded,
            other => return Err(format!("superblock: unknown lock placement {other}")),
        };
        Ok(Locks { placement, count })
    }

    /// The lock word of the node at `node`, and its (memory node, index) in the table.
    fn of(self, g: &Geometry, node: RemoteAddr) -> (RemoteAddr, u16, u32) {
        let mn = node.node();
        match self.placement {
            LockPlacement::Embedded => (node.add(g.embedded_lock_at() as u64), mn.0, 0),
            LockPlacement::OnChip | LockPlacement::HostTable => {
                let idx = (hash64(&node.raw().to_le_bytes(), LOCK_HASH_SEED) % self.count as u64) as u32;
                let at = if self.placement == LockPlacement::OnChip {
                    RemoteAddr::device(mn, idx as u64 * 8)
                } else {
                    RemoteAddr::host(mn, HOST_LOCK_TABLE_AT + idx as u64 * 8)
                };
                (at, mn.0, idx)
            }
        }
    }
}

/// The state one compute node's clients share.
#[derive(Debug)]
pub struct ShermanNode {
    geometry: Geometry,
    locks: Locks,
    pub cache: IndexCache,
    pub local_locks: Option<LocalLockTable>,
    pub rdwc: Rdwc<Change, Reply>,
    pub chunks: LocalChunkAllocator,
    /// The root word as this node last saw it (0: not read yet).
    root: CachedRoot,
}

/// Sherman's [`IndexKind`].
#[derive(Debug)]
pub struct Sherman;

/// One client's handle.
#[derive(Debug)]
pub struct ShermanHandle<C> {
    o: ShermanOptions,
    g: Geometry,
    node: Arc<ShermanNode>,
    ctx: C,
    /// The lock word this client writes (client id + 1, never 0).
    me: u64,
    counters: Counters,
    /// A READ buffer of `node_bytes` to use again (every READ overwrites all of it).
    spare: Option<Buf>,
    /// The buffer of the last [`LeafImage`], to use again.
    leaf_buf: Vec<u8>,
}

/// [`IndexKind::warm`] (every internal node) or, with `keys` (sorted), [`IndexKind::warm_keys`]
/// (the internal nodes on their paths), level by level from the root.
fn warm_tree(
    o: &ShermanOptions,
    node: &ShermanNode,
    memory: &dyn MemoryView,
    keys: Option<&[Vec<u8>]>,
) -> Result<(), String> {
    let g = node.geometry;
    let word = memory.read_memory(superblock_addr(), 8).map_err(|e| e.to_string())?;
    let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
    let (root, root_level) = root::unpack(word);
    node.root.set(word);
    let all = keys.map_or(0, <[_]>::len);
    let mut level_nodes = vec![(root, 0..all)];
    for level in (1..=root_level).rev() {
        let mut children = Vec::new();
        for (at, below) in level_nodes {
            let image = memory.read_memory(at, g.node_bytes).map_err(|e| e.to_string())?;
            let n = g.decode(&image).map_err(|e| format!("node at {at}: {e:?}"))?;
            if node.cache.caches_level(level) {
                if node.cache.stats().bytes + cache::max_charge(o.cache_charge, &g) * 2 > o.cache_bytes {
                    return Ok(());
                }
                node.cache.insert(at, &n, cache::charge(o.cache_charge, &g, &n));
            }
            children.extend(children_below(keys, below, n.leftmost, n.records.iter().map(|(k, c)| (k.as_slice(), *c))));
        }
        level_nodes = children;
    }
    Ok(())
}

impl IndexKind for Sherman {
    const NAME: &'static str = "sherman";
    /// `dmkit bench-load --keys 10000000`, 2026-11-27 (README, Benchmarks).
    const HOST_BYTES_PER_ITEM: u64 = 36;
    type Options = ShermanOptions;
    type NodeState = ShermanNode;
    type Handle<C: Client + Clone + 'static> = ShermanHandle<C>;

    fn limits(o: &ShermanOptions) -> Limits {
        Limits {
            min_key_bytes: o.key_bytes as usize,
            max_key_bytes: o.key_bytes as usize,
            min_value_bytes: o.value_bytes as usize,
            max_value_bytes: o.value_bytes as usize,
        }
    }

    fn validate(o: &ShermanOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(ShermanOptions, String), String> {
        let config = if config == "default" { "sherman-fixed" } else { config };
        let mut options = ShermanOptions::named(config, shape.key_bytes as u32, shape.value_bytes.max(1) as u32)?;
        options.memory_nodes = shape.memory_nodes;
        if let Some(bytes) = shape.cache_bytes {
            options.cache_bytes = bytes;
        }
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    /// Configurations with values out of line are the registry's `Indirect<Sherman>`.
    fn serves(config: &str) -> bool {
        !config.ends_with(crate::indirect::OUT_OF_LINE)
    }

    async fn create<C: Client>(o: &ShermanOptions, ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)?;
        let g = o.geometry().map_err(IndexError::Corrupt)?;
        let locks = Locks::resolve(o, ctx.caps());
        let leaf = g.empty_leaf(vec![0; g.key_bytes], g.infinity());
        let at = dmkit_rdma::alloc::alloc(ctx, NodeId(0), g.alloc_bytes() as u64, NODE_ALIGN).await?;
        ctx.write(at, Buf::from(g.encode(&leaf))).await?;
        let mut sb = Vec::with_capacity(SUPERBLOCK_BYTES);
        sb.extend_from_slice(&root::pack(at, 0).to_le_bytes());
        sb.extend_from_slice(&MAGIC.to_le_bytes());
        sb.extend_from_slice(&[locks.code(), 0, 0, 0]);
        sb.extend_from_slice(&locks.count.to_le_bytes());
        ctx.write(superblock_addr(), Buf::from(sb)).await?;
        Ok(())
    }

    fn node_state(o: &ShermanOptions, caps: &Caps) -> ShermanNode {
        let geometry = o.geometry().unwrap_or_else(|e| panic!("options were validated: {e}"));
        let locks = Locks::resolve(o, caps);
        let local_locks = (o.hocl_local_table && locks.placement != LockPlacement::Embedded).then(|| {
            LocalLockTable::new(o.memory_nodes, locks.count, o.max_handover)
                .unwrap_or_else(|e| panic!("options were validated: {e}"))
        });
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        ShermanNode {
            geometry,
            locks,
            cache: IndexCache::new(o.cache_bytes, o.cache_levels),
            local_locks,
            rdwc: Rdwc::new(o.rdwc_slots.max(1) as usize, o.rdwc),
            chunks,
            root: CachedRoot::new(superblock_addr()),
        }
    }

    fn inherit(node: &ShermanNode, loader: &ShermanNode) {
        node.chunks.inherit(&loader.chunks);
    }

    /// 1.9 host bytes per cached byte per compute node (`dmkit run --index sherman --workload c
    /// --keys 1000000 --duration-us 10000` with 1 and 10 compute nodes); 2 with a margin.
    /// Every internal node costs 0.65 B an item (`dmkit reproduce chime fig14`; 1 with a margin).
    fn cache_host_bytes(o: &ShermanOptions, compute_nodes: u16, items: u64) -> u64 {
        o.cache_bytes.min(items) * 2 * compute_nodes as u64
    }

    fn node_state_bytes(n: &ShermanNode) -> u64 {
        n.cache.stats().bytes + n.local_locks.as_ref().map_or(0, |t| t.bytes()) + n.rdwc.bytes() + n.chunks.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &ShermanOptions, node: Arc<ShermanNode>, ctx: C) -> ShermanHandle<C> {
        let me = ctx.identity().client as u64 + 1;
        ShermanHandle {
            o: o.clone(),
            g: node.geometry,
            node,
            ctx,
            me,
            counters: Counters::default(),
            spare: None,
            leaf_buf: Vec::new(),
        }
    }

    fn check_invariants(o: &ShermanOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    /// Reads the root word and caches internal nodes top-down, level by level, until the
    /// budget is full (nothing is evicted to make room).
    fn warm(o: &ShermanOptions, node: &ShermanNode, memory: &dyn MemoryView) -> Result<(), String> {
        warm_tree(o, node, memory, None)
    }

    fn warm_keys(
        o: &ShermanOptions,
        node: &ShermanNode,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        warm_tree(o, node, memory, Some(keys)).map(|()| true)
    }

    fn node_counters(n: &ShermanNode) -> std::collections::BTreeMap<&'static str, u64> {
        n.rdwc.stats().counters()
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut ShermanOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "sherman", bug)?);
        Ok(())
    }
}

/// A held lock: the lock word, and the local hold if HOCL's local table is on.
type Held = HoclHeld;

/// The leaf a traversal found (not yet read), and the cached copy that routed to it.
struct Found {
    addr: RemoteAddr,
    from_cache: Option<Arc<CachedNode>>,
    /// The node read at each level on the way (index = level).
    path: Vec<Option<RemoteAddr>>,
}

impl<C: Client + Clone + 'static> ShermanHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    /// Whether node images are checked for torn reads (not with the `no-version-check` plant).
    fn checks_versions(&self) -> bool {
        !self.planted(NO_VERSION_CHECK)
    }

    fn check_key(&self, key: &[u8]) -> Result<(), IndexError> {
        Sherman::limits(&self.o).check_key(key)?;
        if key.iter().all(|&b| b == 0xFF) {
            return Err(IndexError::ReservedKey("the all-0xFF key is Sherman's +infinity fence"));
        }
        Ok(())
    }

    fn retries_exhausted(&self, op: &'static str) -> IndexError {
        IndexError::RetriesExhausted { op, retries: self.o.max_retries }
    }

    /// The root (address, level), from this node's copy or the superblock.
    async fn root(&mut self) -> Result<(RemoteAddr, u8), IndexError> {
        self.node.root.get(&self.ctx, &mut self.counters).await
    }

    /// READs and decodes a node, reading again while it is torn.
    async fn read_node(&mut self, addr: RemoteAddr) -> Result<Node, IndexError> {
        let buf = self.read_image(addr).await?;
        let n = self.g.view_accepted(&buf, self.checks_versions()).node();
        self.spare = Some(buf);
        Ok(n)
    }

    /// READs a node, reading again while it is torn; returns the image, checked as
    /// [`Self::decode`] checks it (so [`Geometry::view_with`] accepts it).
    async fn read_image(&mut self, addr: RemoteAddr) -> Result<Buf, IndexError> {
        let mut buf = self.spare.take().unwrap_or_else(|| Buf::zeroed(self.g.node_bytes));
        for _ in 0..self.o.max_retries {
            buf = self.ctx.read(addr, buf).await?;
            match self.check(&buf).await {
                Ok(()) => return Ok(buf),
                Err(Reject::Torn) => {
                    self.counters.event(TORN_READ);
                    self.counters.retries += 1;
                }
                Err(Reject::Garbage(why)) => return Err(IndexError::Corrupt(format!("node at {addr}: {why}"))),
            }
        }
        Err(self.retries_exhausted("read node"))
    }

    /// Checks an image as [`Self::decode`] does, and charges the same CPU.
    async fn check(&self, image: &[u8]) -> Result<(), Reject> {
        let viewed = self.g.view_with(image, self.checks_versions());
        let entries = match &viewed {
            Ok(v) => v.entries(),
            Err(_) => 1,
        };
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, entries as u64).await;
        viewed.map(drop)
    }

    async fn decode(&self, image: &[u8]) -> Result<Node, Reject> {
        let decoded = if self.planted(NO_VERSION_CHECK) {
            // Trust whatever was read: decode as if every version matched.
            self.g.decode_with(image, false)
        } else {
            self.g.decode(image)
        };
        let entries = match &decoded {
            Ok(n) if n.is_leaf() => n.slots.len(),
            Ok(n) => n.records.len(),
            Err(_) => 1,
        };
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, entries as u64).await;
        decoded
    }

    /// Finds the node at `target` level covering `key` without reading it: from the deepest
    /// cached node (if `use_cache`), or from the root, reading every node above `target`.
    async fn find(&mut self, key: &[u8], target: u8, use_cache: bool) -> Result<Found, IndexError> {
        let (root, root_level) = self.root().await?;
        let mut path = vec![None; root_level as usize + 2];
        if root_level <= target {
            return Ok(Found { addr: root, from_cache: None, path });
        }
        let (mut p, mut from_cache) = (root, None);
        let mut at_root = true;
        if use_cache && root_level >= self.o.cache_min_root_level && self.o.cache_bytes > 0 {
            self.ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
            if let Some(e) = self.node.cache.lookup(key).filter(|e| e.node.level > target) {
                self.counters.event(CACHE_HIT);
                path[e.node.level as usize] = Some(e.addr);
                let child = e.node.route(key);
                if e.node.level == target + 1 {
                    return Ok(Found { addr: child, from_cache: Some(e), path });
                }
                (p, from_cache, at_root) = (child, Some(e), false);
            } else {
                self.counters.event(CACHE_MISS);
            }
        }
        for step in 0..self.o.max_retries {
            // The first node read after a cache hit is the one the cached copy routed to.
            let below_copy = step == 0 && from_cache.is_some();
            let image = self.read_image(p).await?;
            let v = self.g.view_accepted(&image, self.checks_versions());
            // Most nodes read here are left for their sibling: compare the fences in place,
            // and decode only the node this traversal goes down from.
            let (level, below) = (v.level(), v.with_lowest(|lowest| key < lowest));
            let right = v.with_highest(|highest| key >= highest);
            let sibling = v.sibling();
            if level <= target || below {
                // No race leads here (module doc: no route lands left of its key).
                self.spare = Some(image);
                return Err(IndexError::Corrupt(format!(
                    "node at {p} (level {level}) was routed to for a key below its lowest fence or from the wrong level"
                )));
            }
            if right && !self.planted(NO_SIBLING_CHASE) {
                self.spare = Some(image);
                self.counters.event(MOVE_RIGHT);
                // Host-side tallies only (no CPU charged, no verb): which traversal read
                // the sibling, to tell stale cached routes from concurrent splits.
                self.counters.event(MOVE_RIGHT_INTERNAL);
                if let Some(e) = from_cache.as_ref() {
                    self.counters.event(MOVE_RIGHT_FROM_CACHE);
                    // The copy routed to a node that split since: drop it, so the next
                    // traversal of its range re-reads it from the level above (the artifact
                    // invalidates a stale entry too). Kept, it would send every later key of
                    // the range along the same ever longer chain of siblings.
                    if below_copy {
                        self.node.cache.invalidate(e);
                        self.counters.event(CACHE_STALE_INTERNAL);
                    }
                }
                if at_root {
                    // The root split: learn the new root next time.
                    self.node.root.forget();
                }
                p = sibling;
                continue;
            }
            let n = v.node();
            self.spare = Some(image);
            at_root = false;
            if let Some(slot) = path.get_mut(n.level as usize) {
                *slot = Some(p);
            }
            let (level, child) = (n.level, n.route(key));
            let charged = cache::charge(self.o.cache_charge, &self.g, &n);
            self.node.cache.insert_owned(p, n, charged);
            if level == target + 1 {
                return Ok(Found { addr: child, from_cache, path });
            }
            p = child;
        }
        Err(self.retries_exhausted("traverse"))
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.check_key(key)?;
        let node = self.node.clone();
        search_via(self, &node.rdwc, key).await
    }

    /// Where a search or write goes from the leaf at `addr` that does not cover `key`: `None`
    /// to restart from the root without the cache (a stale cached route with `stale_restart`, as
    /// the artifact does), else the right sibling. A cached route that led here is invalidated.
    /// A key below the leaf is corruption (module doc: no route lands left of its key).
    fn leave_uncovered(
        &mut self,
        (addr, lowest, sibling): (RemoteAddr, &[u8], RemoteAddr),
        key: &[u8],
        from_cache: &mut Option<Arc<CachedNode>>,
    ) -> Result<Option<RemoteAddr>, IndexError> {
        if key < lowest {
            return Err(IndexError::Corrupt(format!("leaf at {addr} was routed to for a key below its lowest fence")));
        }
        let cached = from_cache.take();
        if let Some(e) = &cached {
            self.node.cache.invalidate(e);
            self.counters.event(CACHE_STALE);
        }
        if cached.is_some() && self.o.stale_restart {
            return Ok(None);
        }
        self.counters.event(MOVE_RIGHT);
        self.counters.event(MOVE_RIGHT_LEAF);
        Ok(Some(sibling))
    }

    /// Takes the lock of the node at `node` (local table first, then the lock word).
    async fn lock(&mut self, node: RemoteAddr) -> Result<Held, IndexError> {
        let slot = self.node.locks.of(&self.g, node);
        let table = self.node.clone();
        let (me, retries) = (self.me, self.o.max_retries);
        acquire_global(&self.ctx, table.local_locks.as_ref(), slot, me, retries, &mut self.counters, "lock").await
    }

    /// Writes `writeback` back and releases the lock: one batch `[WRITE, WRITE unlock]` (or the
    /// write alone when handing the lock over to a local waiter). Unsignaled if `!signaled`.
    async fn unlock(
        &mut self,
        held: Held,
        writeback: Option<(RemoteAddr, Vec<u8>)>,
        signaled: bool,
    ) -> Result<(), IndexError> {
        let table = self.node.clone();
        let hand_over = match (&table.local_locks, &held.hold) {
            (Some(t), Some(h)) => t.plan_release(h),
            _ => false,
        };
        let mut batch = Vec::with_capacity(2);
        if let Some((at, bytes)) = writeback {
            batch.push(Request::write(at, bytes));
        }
        if hand_over {
            self.counters.event(LOCK_HAND_OVER);
        } else {
            let unlock = Request::write(held.word, 0u64.to_le_bytes().to_vec());
            if self.planted(UNLOCK_BEFORE_WRITE) {
                batch.insert(0, unlock);
            } else {
                batch.push(unlock);
            }
        }
        let result = if batch.is_empty() {
            // Handed over with nothing to write back.
            Ok(())
        } else if !self.o.combine_writeback_unlock && batch.len() == 2 {
            // Two dependent round trips: the write-back completes before the unlock is posted.
            let unlock = batch.pop().expect("two requests");
            match self.ctx.post(batch).await {
                Ok(_) if signaled => self.ctx.post(vec![unlock]).await.map(drop),
                Ok(_) => self.ctx.post_unsignaled(vec![unlock]),
                Err(e) => Err(e),
            }
        } else if signaled || hand_over {
            self.ctx.post(batch).await.map(drop)
        } else {
            self.ctx.post_unsignaled(batch)
        };
        if let (Some(t), Some(h)) = (&table.local_locks, held.hold) {
            t.finish_release(h, hand_over);
        }
        result.map_err(IndexError::from)
    }

    /// Allocates a node.
    async fn alloc_node(&mut self) -> Result<RemoteAddr, IndexError> {
        let node = self.node.clone();
        let at = node.chunks.alloc(&self.ctx, self.g.alloc_bytes() as u64, NODE_ALIGN).await?;
        Ok(at)
    }

    /// Allocates a node while holding `held`; on failure releases the lock before reporting.
    async fn alloc_locked(&mut self, held: Held) -> Result<(RemoteAddr, Held), IndexError> {
        match self.alloc_node().await {
            Ok(at) => Ok((at, held)),
            Err(e) => {
                self.unlock(held, None, true).await?;
                Err(e)
            }
        }
    }

    /// Locks the leaf covering `key` and reads it; moves right (or restarts) while it does not
    /// cover the key. Returns the leaf's address, the lock, the leaf and the parent path.
    async fn lock_leaf(
        &mut self,
        key: &[u8],
    ) -> Result<(RemoteAddr, Held, LeafImage, Vec<Option<RemoteAddr>>), IndexError> {
        let mut use_cache = true;
        for _ in 0..self.o.max_retries {
            let Found { mut addr, mut from_cache, path } = self.find(key, 0, use_cache).await?;
            for _ in 0..self.o.max_retries {
                let held = self.lock(addr).await?;
                let n = match self.read_locked_leaf(addr).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = self.unlock(held, None, true).await;
                        return Err(e);
                    }
                };
                let Some(n) = n else {
                    // `find` returns a node of level 0 (module doc: levels never change).
                    self.unlock(held, None, false).await?;
                    return Err(IndexError::Corrupt(format!("node at {addr} was routed to as a leaf and is not one")));
                };
                if !n.covers(key) && !self.planted(NO_SIBLING_CHASE) {
                    self.unlock(held, None, false).await?;
                    let left = self.leave_uncovered((addr, n.lowest(), n.sibling()), key, &mut from_cache);
                    self.leaf_buf = n.into_buf();
                    let left = left?;
                    match left {
                        Some(right) => {
                            addr = right;
                            continue;
                        }
                        None => {
                            use_cache = false;
                            break;
                        }
                    }
                }
                return Ok((addr, held, n, path));
            }
        }
        Err(self.retries_exhausted("lock leaf"))
    }

    /// [`Self::read_locked`] for a leaf, kept as its image (`None`: the node is not a leaf).
    async fn read_locked_leaf(&mut self, addr: RemoteAddr) -> Result<Option<LeafImage>, IndexError> {
        let buf = self.spare.take().unwrap_or_else(|| Buf::zeroed(self.g.node_bytes));
        let buf = self.ctx.read(addr, buf).await?;
        let out = match self.check(&buf).await {
            Ok(()) => {
                let v = self.g.view_accepted(&buf, self.checks_versions());
                if v.is_leaf() {
                    let leaf = LeafImage::new(&v, std::mem::take(&mut self.leaf_buf));
                    if leaf.any_torn() {
                        Err(IndexError::Corrupt(format!("leaf at {addr} has a torn slot under its lock")))
                    } else {
                        Ok(Some(leaf))
                    }
                } else {
                    Ok(None)
                }
            }
            Err(Reject::Torn) => Err(IndexError::Corrupt(format!("node at {addr} read torn under its lock"))),
            Err(Reject::Garbage(why)) => Err(IndexError::Corrupt(format!("node at {addr}: {why}"))),
        };
        self.spare = Some(buf);
        out
    }

    /// READs a node under its lock: no writer can be changing it, so a torn image is a bug.
    async fn read_locked(&mut self, addr: RemoteAddr) -> Result<Node, IndexError> {
        let buf = self.spare.take().unwrap_or_else(|| Buf::zeroed(self.g.node_bytes));
        let buf = self.ctx.read(addr, buf).await?;
        let decoded = self.decode(&buf).await;
        self.spare = Some(buf);
        match decoded {
            Ok(n) if n.slots.iter().any(|s| s.torn) => {
                Err(IndexError::Corrupt(format!("leaf at {addr} has a torn slot under its lock")))
            }
            Ok(n) => Ok(n),
            Err(Reject::Torn) => Err(IndexError::Corrupt(format!("node at {addr} read torn under its lock"))),
            Err(Reject::Garbage(why)) => Err(IndexError::Corrupt(format!("node at {addr}: {why}"))),
        }
    }

    async fn do_write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.check_key(key)?;
        if let Change::Upsert(v) | Change::Update(v) = &change {
            Sherman::limits(&self.o).check_value(v)?;
        }
        let node = self.node.clone();
        write_via(self, &node.rdwc, key, change).await
    }

    /// Writes the change from `before` to `after` into the locked leaf `n` and unlocks it,
    /// splitting it if an insert filled it.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &mut self,
        addr: RemoteAddr,
        held: Held,
        n: &mut LeafImage,
        key: &[u8],
        found: Option<usize>,
        before: Option<Vec<u8>>,
        after: Option<Vec<u8>>,
        path: &[Option<RemoteAddr>],
    ) -> Result<(), IndexError> {
        let slot = match (found, &after) {
            _ if before == after => return self.unlock(held, None, true).await,
            // The slot found holds `key`: rewriting it with `key` changes the value only.
            (Some(i), Some(v)) => {
                n.set(i, Some((key, v)));
                i
            }
            (Some(i), None) => {
                n.set(i, None);
                i
            }
            (None, Some(v)) => {
                let Some(i) = n.free() else {
                    self.unlock(held, None, true).await?;
                    return Err(IndexError::Corrupt(format!("leaf at {addr} is full between operations")));
                };
                n.set(i, Some((key, v)));
                i
            }
            (None, None) => unreachable!("before != after"),
        };
        if n.live() < self.g.leaf_span {
            let (at, bytes) = n.slot_write(slot);
            return self.unlock(held, Some((addr.add(at as u64), bytes)), true).await;
        }
        self.split_leaf(addr, held, &mut n.node(), path).await
    }

    async fn split_leaf(
        &mut self,
        addr: RemoteAddr,
        held: Held,
        n: &mut Node,
        path: &[Option<RemoteAddr>],
    ) -> Result<(), IndexError> {
        self.counters.event(LEAF_SPLIT);
        let mut live: Vec<Slot> = n.slots.iter().filter(|s| s.occupied).cloned().collect();
        live.sort_by(|a, b| a.key.cmp(&b.key));
        let keep = live.len() / 2;
        let moved: Vec<Slot> = live.split_off(keep);
        let sep = moved[0].key.to_vec();
        let (sibling_at, held) = self.alloc_locked(held).await?;
        let mut sibling = self.g.empty_leaf(sep.clone(), n.highest.clone());
        sibling.sibling = n.sibling;
        for (i, mut s) in moved.into_iter().enumerate() {
            s.version = 0;
            sibling.slots[i] = s;
        }
        // The kept half, sorted, in the first slots; the rest emptied (their versions kept).
        for (i, slot) in n.slots.iter_mut().enumerate() {
            match live.get(i) {
                Some(s) => *slot = Slot { version: slot.version, ..s.clone() },
                None => *slot = Slot { version: slot.version, ..Slot::default() },
            }
        }
        n.highest = sep.clone();
        n.sibling = sibling_at;
        n.bump(self.g.versioning);
        self.write_split(addr, held, n, sibling_at, &sibling).await?;
        if self.planted(SPLIT_SKIPS_PARENT) {
            return Ok(());
        }
        self.insert_parent(addr, 0, sep, sibling_at, path).await
    }

    /// Writes a split's new sibling (awaited: it must be visible before anything points to it),
    /// then the split node with its unlock.
    async fn write_split(
        &mut self,
        addr: RemoteAddr,
        held: Held,
        n: &Node,
        sibling_at: RemoteAddr,
        sibling: &Node,
    ) -> Result<(), IndexError> {
        if let Err(e) = self.ctx.write(sibling_at, Buf::from(self.g.encode(sibling))).await {
            self.unlock(held, None, true).await?;
            return Err(e.into());
        }
        let signaled = self.o.split_write_signaled && !self.planted(SPLIT_WRITE_UNSIGNALED);
        self.unlock(held, Some((addr, self.g.encode(n))), signaled).await
    }

    /// Inserts separator `sep` → `child` into the parent level of `left` (at `level`), which
    /// split; splits upwards and makes a new root as needed.
    async fn insert_parent(
        &mut self,
        mut left: RemoteAddr,
        mut level: u8,
        mut sep: Vec<u8>,
        mut child: RemoteAddr,
        path: &[Option<RemoteAddr>],
    ) -> Result<(), IndexError> {
        for _ in 0..self.o.max_retries {
            let (root, root_level) = self.root().await?;
            if root_level < level {
                // This node's copy of the root never moves back (`CachedRoot`), and this client
                // reached `left` from it or from the node's cache, which traversals from it fill.
                return Err(root::copy_below_split(root_level, level));
            }
            if root_level == level {
                // No level above the one that split: grow the tree. If the node that split is
                // the root, the new root points to it and its new sibling. Otherwise another
                // client split the root and has not installed the new root yet: rather than
                // wait for it (a wait an unfair schedule can make endless), help, with the
                // root's current image, exactly as its splitter would. Every splitter then
                // inserts its own separator into the new level (a separator already there
                // is overwritten with the same child, or found as the lowest fence of the
                // node it went up to when its parent split: see `internal_store`).
                let (first_sep, first_child) = if root == left {
                    (sep.clone(), child)
                } else {
                    self.counters.event(ROOT_HELP);
                    let r = self.read_node(root).await?;
                    // `left`, at the root's level and not the root, exists only because the
                    // root split: nodes of a level come from splits of its first node (a lost
                    // root CAS leaks its node unreachable), the root is that first node, and a
                    // sibling pointer is never cleared. A root word packs its node's level.
                    if r.level != level || r.sibling.is_null() {
                        return Err(root::root_not_split(root, level, left));
                    }
                    (r.highest, r.sibling)
                };
                let at = self.alloc_node().await?;
                let mut r = self.g.empty_internal(level + 1, vec![0; self.g.key_bytes], self.g.infinity());
                r.leftmost = root;
                r.records = vec![(first_sep.into(), first_child)];
                self.ctx.write(at, Buf::from(self.g.encode(&r))).await?;
                let old = root::pack(root, level);
                let new = root::pack(at, level + 1);
                let seen = self.ctx.cas(superblock_addr(), old, new).await?;
                if seen == old {
                    self.counters.event(ROOT_SPLIT);
                    self.node.root.set(new);
                    if root == left {
                        return Ok(());
                    }
                } else {
                    // Someone else grew the tree: insert into the level that now exists (D6).
                    // The node written for nothing is leaked, as in the artifact.
                    self.counters.event(ROOT_CAS_LOST);
                    self.counters.cas_failures += 1;
                    self.node.root.set(seen);
                }
                continue;
            }
            // The parent the traversal read (internal_store moves right if it split since),
            // or, after a cache hit that skipped it, the one a traversal from the root finds.
            let parent = match path.get(level as usize + 1).copied().flatten() {
                Some(p) => p,
                None => self.find(&sep, level + 1, false).await?.addr,
            };
            match self.internal_store(parent, level + 1, &sep, child).await? {
                None => return Ok(()),
                Some((up, right)) => {
                    // The parent split in turn: its separator goes one level up.
                    if self.planted(root::ROOT_COPY_REGRESSES) {
                        self.node.root.regress();
                    }
                    (left, level, sep, child) = (parent, level + 1, up, right);
                }
            }
        }
        Err(self.retries_exhausted("insert into parent"))
    }

    /// Inserts `sep` → `child` into the internal node at `addr` (level `level`), moving right as
    /// needed. Returns the separator and new node if it split.
    async fn internal_store(
        &mut self,
        mut addr: RemoteAddr,
        level: u8,
        sep: &[u8],
        child: RemoteAddr,
    ) -> Result<Option<(Vec<u8>, RemoteAddr)>, IndexError> {
        for _ in 0..self.o.max_retries {
            let held = self.lock(addr).await?;
            let mut n = match self.read_locked(addr).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = self.unlock(held, None, true).await;
                    return Err(e);
                }
            };
            if n.level != level {
                self.unlock(held, None, true).await?;
                return Err(IndexError::Corrupt(format!(
                    "node at {addr} has level {} where {level} was expected",
                    n.level
                )));
            }
            if sep >= n.highest.as_slice() {
                self.unlock(held, None, false).await?;
                self.counters.event(MOVE_RIGHT);
                self.counters.event(MOVE_RIGHT_PARENT);
                addr = n.sibling;
                continue;
            }
            if sep == n.lowest.as_slice() {
                // The separator is already in this level, as this node's lowest fence: it went
                // up when a parent split after another client had inserted it (a root helper,
                // or the winner of a root CAS, inserts the same separator as the splitter).
                // Its child is this node's leftmost, as a lowest fence names one node per level.
                self.unlock(held, None, true).await?;
                if n.leftmost != child {
                    return Err(IndexError::Corrupt(format!(
                        "node at {addr} starts at separator {sep:02x?} with child {}, not {child}",
                        n.leftmost
                    )));
                }
                return Ok(None);
            }
            match n.records.binary_search_by(|(k, _)| k.as_slice().cmp(sep)) {
                Ok(i) => n.records[i].1 = child,
                Err(i) => n.records.insert(i, (sep.into(), child)),
            }
            if n.records.len() < self.g.internal_span {
                n.bump(self.g.versioning);
                let image = self.g.encode(&n);
                self.unlock(held, Some((addr, image)), true).await?;
                return Ok(None);
            }
            self.counters.event(INTERNAL_SPLIT);
            let mid = n.records.len() / 2;
            let right = n.records.split_off(mid + 1);
            let (up, up_child) = n.records.pop().expect("mid record");
            let up = up.to_vec();
            let (sibling_at, held) = self.alloc_locked(held).await?;
            let mut sibling = self.g.empty_internal(level, up.clone(), n.highest.clone());
            sibling.leftmost = up_child;
            sibling.records = right;
            sibling.sibling = n.sibling;
            n.highest = up.clone();
            n.sibling = sibling_at;
            n.bump(self.g.versioning);
            self.write_split(addr, held, &n, sibling_at, &sibling).await?;
            // The next level's insert starts from the root's path, not this traversal's.
            return Ok(Some((up, sibling_at)));
        }
        Err(self.retries_exhausted("insert into internal node"))
    }

    async fn do_scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        for b in [start, end] {
            if let Bound::Included(k) | Bound::Excluded(k) = b {
                Sherman::limits(&self.o).check_key(k)?;
            }
        }
        let mut out = Pairs::new();
        if limit == 0 {
            return Ok(out);
        }
        let first = match start {
            Bound::Included(k) | Bound::Excluded(k) => k.to_vec(),
            Bound::Unbounded => vec![0; self.g.key_bytes],
        };
        let mut addr = self.find(&first, 0, true).await?.addr;
        // Keys below `cursor` were taken from earlier leaves.
        let mut cursor = first.clone();
        for _ in 0..self.o.max_retries {
            let n = self.read_node(addr).await?;
            if n.level != 0 || cursor.as_slice() < n.lowest.as_slice() {
                // No race leads here (module doc: no route lands left of its key; a sibling's
                // lowest is the highest fence read with the pointer, which became the cursor).
                return Err(IndexError::Corrupt(format!(
                    "scan reached node at {addr} (level {}) for a cursor below its lowest fence, or not a leaf",
                    n.level
                )));
            }
            if n.slots.iter().any(|s| s.torn) {
                self.counters.event(SCAN_TORN_SLOT);
                self.counters.retries += 1;
                continue;
            }
            if cursor.as_slice() >= n.highest.as_slice() {
                self.counters.event(SCAN_MOVE_RIGHT);
                addr = n.sibling;
                continue;
            }
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = n
                .slots
                .iter()
                .filter(|s| s.occupied && *s.key >= *cursor && in_bounds(&s.key, start, end))
                .map(|s| (s.key.to_vec(), s.value.to_vec()))
                .collect();
            pairs.sort();
            for p in pairs {
                if out.len() == limit {
                    return Ok(out);
                }
                out.push(p);
            }
            if n.sibling.is_null() || !below_end(&n.highest, end) || n.highest.iter().all(|&b| b == 0xFF) {
                return Ok(out);
            }
            self.counters.event(SCAN_NEXT_LEAF);
            cursor = n.highest.clone();
            addr = n.sibling;
        }
        Err(self.retries_exhausted("scan"))
    }
}

impl<C: Client + Clone + 'static> Combined for ShermanHandle<C> {
    async fn search_remote(
        &mut self,
        key: &[u8],
        mut leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        let mut use_cache = true;
        for _ in 0..self.o.max_retries {
            let found = self.find(key, 0, use_cache).await?;
            let mut addr = found.addr;
            let mut from_cache = found.from_cache;
            let mut torn_slot = false;
            for _ in 0..self.o.max_retries {
                if let Some(l) = leader.as_deref_mut() {
                    l.mark();
                }
                let n = self.read_node(addr).await?;
                if n.level != 0 {
                    // `find` returns a node of level 0 (module doc: levels never change).
                    return Err(IndexError::Corrupt(format!("node at {addr} was routed to as a leaf and is not one")));
                }
                if !n.covers(key) && !self.planted(NO_SIBLING_CHASE) {
                    match self.leave_uncovered((addr, &n.lowest, n.sibling), key, &mut from_cache)? {
                        Some(right) => {
                            addr = right;
                            continue;
                        }
                        None => {
                            use_cache = false;
                            break;
                        }
                    }
                }
                let mut hit = None;
                for s in &n.slots {
                    if s.occupied && s.key == key {
                        if s.torn {
                            torn_slot = true;
                            continue;
                        }
                        hit = Some(s.value.to_vec());
                    }
                }
                if torn_slot && self.o.torn_slot_reread {
                    self.counters.event(TORN_SLOT);
                    self.counters.retries += 1;
                    torn_slot = false;
                    continue;
                }
                return Ok(hit);
            }
        }
        Err(self.retries_exhausted("search"))
    }

    /// Applies `changes` in order (or, as an RDWC leader, every change its window combined) to
    /// `key`. Returns the first change's result and, once the leader closed its window, one
    /// result per combined change.
    async fn modify_remote(
        &mut self,
        key: &[u8],
        changes: Vec<Change>,
        leader: Option<&mut WriteLeader<'_, Change, Reply>>,
    ) -> (Result<bool, IndexError>, Option<Vec<Result<bool, IndexError>>>) {
        let (addr, held, mut n, path) = match self.lock_leaf(key).await {
            Ok(x) => x,
            Err(e) => return (Err(e), None),
        };
        let changes = match leader {
            Some(l) => l.close(),
            None => changes,
        };
        let found = n.find(key);
        let before = found.map(|i| n.value(i).to_vec());
        let (state, results) = crate::common::change::fold(before.clone(), &changes);
        let outcome = self.apply(addr, held, &mut n, key, found, before, state, &path).await;
        self.leaf_buf = n.into_buf();
        let replies: Vec<Result<bool, IndexError>> = match &outcome {
            Ok(()) => results.iter().map(|&r| Ok(r)).collect(),
            Err(e) => results.iter().map(|_| Err(e.clone())).collect(),
        };
        (replies[0].clone(), Some(replies))
    }

    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }
}

impl<C: Client + Clone + 'static> Index for ShermanHandle<C> {
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

mod invariants;

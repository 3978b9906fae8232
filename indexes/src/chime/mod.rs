//! CHIME (SOSP '24): a B+tree on disaggregated memory whose leaves are hopscotch hash tables.
//!
//! Digest: `shared/digests/chime.md`. Remote formats are in [`layout`]; the configurations of the
//! factor analysis in [`config`]; the hotspot buffer of the speculative read in [`hotspot`].
//!
//! ## Operations (digest §3), with the defaults' verbs
//!
//! - **Traverse**: the deepest cached internal node covering the key (0 RTT), else the root
//!   word, then whole internal-node READs (1148 B), each checked (C1, C2), moving right past a
//!   split (B-link) and cached. The route to a leaf carries the *expected sibling*: the next
//!   child of the parent, or the parent's `sibling_leftmost` for its last child.
//! - **Search**: a speculative READ of one entry (19–30 B) when the hotspot buffer knows a slot
//!   of the key's neighbourhood with its fingerprint; else (or if that entry holds another key)
//!   a neighbourhood READ (about 165 B; two READs in one batch when it wraps). The neighbourhood
//!   is checked for line versions (C1), one NV (C2), and that the keys homed at `h` are exactly
//!   those the home's bitmap lists (C3). Then sibling-based validation (C4): a leaf reached
//!   from a cached parent whose sibling is not the expected one makes the cached parent stale
//!   (invalidate, traverse again); from a parent just read, a key not found while the sibling
//!   differs may have moved right: read the sibling (same expected sibling).
//! - **Insert**: masked CAS on the lock word (it returns the vacancy bitmap), READ of the hop
//!   range (from the home to the first bucket the bitmap marks vacant, extended to hold a
//!   replica and to the home's farthest hop offset), hopscotch insert on the local copy,
//!   one batch `[WRITE changed range, WRITE lock word]`. A leaf with no room reads the rest and
//!   retries on the whole table, then splits: the new leaf keeps every moved entry at its slot
//!   index, is written first (awaited), then the old leaf and its unlock in one WRITE; the
//!   parent gets `max(left) + 1` as pivot (sibling-based validation has no fences).
//! - **Update / delete**: lock, speculative entry READ or neighbourhood READ, one batch
//!   `[WRITE entry, WRITE lock word]`. Deletes write a tombstone (bit 15 of the entry's bitmap;
//!   digest §8.6): the key keeps its place until the next split drops it, so neither the hop
//!   bitmaps nor the left node's maximum (the pivot rule) change.
//! - **Scan**: whole-leaf READs along the sibling chain from the start key's leaf, each checked
//!   (C1, C2 and every bitmap against every key's home). Not atomic across leaves (as Sherman).
//!
//! Same-key searches and writes on a compute node go through read delegation and write
//! combining ([`crate::common::rdwc`]), on for every system in CHIME's evaluation.
//!
//! ## The digest's gaps in the artifact (§4.4), fixed; each has a planted bug that restores it
//!
//! - G1: a hop bumps EV on every entry whose bytes change, homes whose bitmap changed included
//!   (plant `ev-hop-entries-only`; it matters when a 2-byte bitmap straddles a line, H > 8).
//! - G2: a search returns as soon as it finds the key among the home's keys, before C3 (sound:
//!   an entry that passed C1 holding the key is a real version of it). Kept; the checker's clean
//!   runs are its regression scenario.
//! - G3: an insert reads up to the home's farthest hop offset before deciding the key is absent
//!   (plant `upsert-first-vacancy`: only up to the first vacancy, which can duplicate a key).
//! - G4: an insert moving right keeps the expected sibling (plant `right-null-sibling`), and a
//!   leaf that reaches it is the last of the range the insert's parent copy gave it. The move
//!   is decided by the leaf's argmax, which is exact for every leaf with a sibling (I9) only
//!   because a split keeps the old leaf's maximum, deleted or not, in the right half that
//!   inherits the sibling (plant `split-drops-max-tombstone`). That is the protection: an
//!   insert whose parent copy predates two splits of a leaf with no sibling then carries NULL,
//!   and only the argmax can stop it (found by the sweep, now the preset `long-local`). With
//!   the boundary kept, G4 is redundant and saves the argmax READ; `verify/tests/chime.rs`
//!   scripts both.
//! - G5: deletes are tombstones (plant `delete-clears`: clearing the entry, which can lose the
//!   left node's maximum and with it the pivot rule).
//!
//! ## Deviations
//!
//! - H is at most 14 (bits 15 and 14 of the bitmap flag a tombstone and an occupied entry); the
//!   artifact allows 16 and reserves the all-zero key for empty entries.
//! - Keys are fixed-size per tree (`key_bytes`); the all-0xFF key (+infinity fence) is
//!   reserved. Values are fixed-size inline.
//! - Indirect mode (CHIME-Indirect): keys of 1..=`key_bytes` bytes and values of any length up
//!   to the tree's maximum live in blocks `[key length u32][value length u32][key][value]`,
//!   written out of place and never freed (AS8). An entry holds the key's zero-padded
//!   `prefix`; keys that share it share a home and a leaf, and a lookup reads the blocks of
//!   every entry with its prefix in one doorbell batch. The artifact's block keeps only the
//!   key's remainder; this one keeps the whole key (one comparison, a few bytes more).
//! - The masked CAS changes only the lock bit (digest §8.1 \[R\]); the unlock is an 8-byte WRITE.
//! - The hop-range scan of the vacancy bitmap wraps (§8.2 \[R\]); a range that unexpectedly
//!   holds no room is read whole and retried before a split.
//! - The root word is `address | level` (nodes are 64-byte aligned), as Sherman's.
//! - Scans read whole leaves (§8.15 \[R\]); the artifact's per-integer-key neighbourhood scan is
//!   not built.
//! - Without replication, the leaf header is read in the same doorbell batch as the
//!   neighbourhood (one more READ, no more round trips).

pub mod config;
pub mod hotspot;
mod invariants;
pub mod layout;
pub mod presets;

use crate::common::bounds::{above_start, below_end};
pub use crate::common::change::{Change, Reply};
use crate::common::change::{Combined, RDWC_READ_FALLBACK_HANDLER, RDWC_WRITE_FALLBACK_HANDLER, search_via, write_via};
use crate::common::chunk::LocalChunkAllocator;
use crate::common::range_cache::{CacheLevels, CachedNode, IndexCache};
use crate::common::rdwc::{Rdwc, ReadLeader, WriteLeader};
use crate::common::root::{self, CachedRoot};
use crate::common::warm::children_below;
use crate::registry::RunShape;
use crate::{Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug, RaceHandler};
pub use config::ChimeOptions;
use dmkit_rdma::{Buf, Caps, Client, CpuWork, Fixed, MemoryView, NodeId, RemoteAddr, Request};
use hotspot::HotspotBuffer;
use layout::{
    Internal, InternalLayout, LOCK_BIT, LeafLayout, LockWord, Torn, fingerprint, hop_insert, hop_plan, raw_of,
};
use std::ops::Bound;
use std::sync::Arc;

/// The superblock on memory node 0: `[root word u64][magic u64]`.
const SUPERBLOCK: Fixed = Fixed::new(8192, 16);
pub const SUPERBLOCK_OFFSET: u64 = SUPERBLOCK.offset();
const MAGIC: u64 = u64::from_le_bytes(*b"DMKCHIM1");
const NODE_ALIGN: u64 = root::ROOT_ALIGN;
/// The most key and value bytes an indirect block holds (63 lines less its two length words).
pub const MAX_BLOCK_PAYLOAD: usize = 63 * 64 - 8;

fn superblock_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

/// The leaf geometry of `o`.
pub fn leaf_layout(o: &ChimeOptions) -> LeafLayout {
    LeafLayout {
        span: o.span as usize,
        hood: o.hood as usize,
        key_bytes: o.slot_key_bytes() as usize,
        value_bytes: o.value_field() as usize,
        replicated: o.replication,
        fences: !o.sibling_validation,
    }
}

/// The internal-node geometry of `o`.
pub fn internal_layout(o: &ChimeOptions) -> InternalLayout {
    InternalLayout { span: o.internal_span as usize, key_bytes: o.slot_key_bytes() as usize }
}

fn lock_word_layout(o: &ChimeOptions) -> LockWord {
    let l = leaf_layout(o);
    LockWord { vb: l.vacancy_bits(o.internal_span as usize), span: l.span }
}

/// An indirect value's pointer: offset (48 bits), memory node (10 bits), block lines (6 bits).
fn block_pointer(at: RemoteAddr, lines: usize) -> u64 {
    at.offset() | (at.node().0 as u64) << 48 | (lines as u64) << 58
}

fn split_block_pointer(p: u64) -> (RemoteAddr, usize) {
    let node = NodeId(((p >> 48) & 0x3FF) as u16);
    (RemoteAddr::host(node, p & ((1 << 48) - 1)), (p >> 58) as usize)
}

/// An indirect block's key and value.
fn parse_block(block: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let klen = u32::from_le_bytes(block[0..4].try_into().expect("4")) as usize;
    let vlen = u32::from_le_bytes(block[4..8].try_into().expect("4")) as usize;
    if klen == 0 || vlen == 0 || 8 + klen + vlen > block.len() {
        return Err(format!("a block of {} bytes with key length {klen}, value length {vlen}", block.len()));
    }
    Ok((block[8..8 + klen].to_vec(), block[8 + klen..8 + klen + vlen].to_vec()))
}

/// A traversal found an internal node for its key in the node cache.
pub const CACHE_HIT: &str = Counters::CACHE_HIT;
/// A traversal looked in the node cache and found no internal node for its key.
pub const CACHE_MISS: &str = Counters::CACHE_MISS;
/// A cached internal node that routed to a stale leaf was dropped.
pub const CACHE_INVALIDATED: &str = "cache_invalidated";
/// A traversal or separator insert followed a node's sibling pointer (any cause).
pub const MOVE_RIGHT: &str = "move_right";
/// An indirect leaf's search found several slots matching the key's prefix.
pub const PREFIX_COLLISION: &str = "prefix_collision";
/// A search or write found its key in the slot the hotspot buffer predicted.
pub const SPECULATION_HIT: &str = "speculation_hit";
/// An insert read the home entry's neighbourhood beyond the first vacancy (G3).
pub const UPSERT_EXTEND: &str = "upsert_extend";
/// An insert needed the home's entries beyond the first vacancy (G3) and its hop-range READ,
/// extended to hold a replica, had already covered them: no second READ.
pub const UPSERT_EXTEND_READ: &str = "upsert_extend_read";
/// An insert whose vacancy bitmap hinted at room the range lacked read the whole leaf.
pub const HOP_READ_ALL: &str = "hop_read_all";
/// An insert moved entries (hopscotch) to make room in its key's neighbourhood.
pub const HOP: &str = "hop";
/// A leaf split.
pub const LEAF_SPLIT: &str = "leaf_split";
/// A root split whose new root's CAS into the superblock won.
pub const ROOT_SPLIT: &str = "root_split";
/// An internal node split.
pub const INTERNAL_SPLIT: &str = "internal_split";
/// A scan went on to the next leaf.
pub const SCAN_NEXT_LEAF: &str = "scan_next_leaf";
/// Node counter: entries the compute node's hotspot buffer holds.
pub const HOTSPOT_ENTRIES: &str = "hotspot_entries";
/// Node counter: bytes of the compute node's hotspot buffer.
pub const HOTSPOT_BYTES: &str = "hotspot_bytes";
/// An internal node READ overlapped a write (C1/C2 failed): read it again.
pub const TORN_INTERNAL: &str = "torn_internal";
/// A leaf range READ overlapped a write (C1/C2 failed): read it again.
pub const TORN_READ: &str = "torn_read";
/// A scan's whole-leaf READ has a bitmap that disagrees with the keys' homes: read it again.
pub const SCAN_INCONSISTENT: &str = "scan_inconsistent";
/// A traversal read an internal node that split after it was routed to: move right.
pub const MOVE_RIGHT_INTERNAL: &str = "move_right_internal";
/// A pivot insert locked a parent that split meanwhile: move right.
pub const MOVE_RIGHT_PARENT: &str = "move_right_parent";
/// A leaf reached from a cached parent fails sibling-based validation: invalidate, traverse again.
pub const LEAF_ROUTE_STALE: &str = "leaf_route_stale";
/// A hotspot-remembered entry no longer holds the key: read the neighbourhood.
pub const SPECULATION_MISS: &str = "speculation_miss";
/// A neighbourhood whose keys disagree with the home's bitmap (C3): read it again.
pub const BITMAP_MISMATCH: &str = "bitmap_mismatch";
/// A search's key may have moved right in a half-done split: read the sibling.
pub const HALF_SPLIT_RIGHT: &str = "half_split_right";
/// A writer's key may have moved right in a split: unlock, go to the sibling.
pub const HALF_SPLIT_RIGHT_LOCKED: &str = "half_split_right_locked";
/// Another splitter split the root and has not grown the tree: help it.
pub const ROOT_HELP: &str = "root_help";
/// The CAS of a new root lost to another client's: insert into the level that now exists.
pub const ROOT_CAS_LOST: &str = "root_cas_lost";

const RACE_HANDLERS: [RaceHandler; 15] = [
    RaceHandler {
        event: TORN_INTERNAL,
        race: "an internal node READ overlapped a concurrent write or split (line versions disagree): it is read again, else a torn node routes the traversal",
    },
    RaceHandler {
        event: TORN_READ,
        race: "a leaf entry READ overlapped a concurrent write or hop (entry or node versions disagree): it is read again, else a torn entry is returned",
    },
    RaceHandler {
        event: SCAN_INCONSISTENT,
        race: "a scan's whole-leaf READ saw a hop half done (a key outside its home's bitmap): the leaf is read again, else a key is missed or doubled",
    },
    RaceHandler {
        event: MOVE_RIGHT_INTERNAL,
        race: "an internal node split after its parent (or cached copy) routed here: the traversal follows the sibling, else it descends a wrong subtree",
    },
    RaceHandler {
        event: MOVE_RIGHT_PARENT,
        race: "the parent a pivot goes into split meanwhile: the insert follows its sibling, else the pivot lands outside the parent's range",
    },
    RaceHandler {
        event: LEAF_ROUTE_STALE,
        race: "a leaf reached through a cached parent fails sibling-based validation (the leaf split since): the copy is invalidated and the traversal redone",
    },
    RaceHandler {
        event: SPECULATION_MISS,
        race: "the entry the hotspot buffer remembers for the key was moved by a hop, split or another key: the neighbourhood is read instead",
    },
    RaceHandler {
        event: BITMAP_MISMATCH,
        race: "a search missed its key in a neighbourhood whose bitmap disagrees with the keys' homes (a hop half seen): it reads again, else reports a present key absent",
    },
    RaceHandler {
        event: HALF_SPLIT_RIGHT,
        race: "a search missed its key in a leaf whose sibling is not the expected one (a split moved keys right): it reads the sibling",
    },
    RaceHandler {
        event: HALF_SPLIT_RIGHT_LOCKED,
        race: "a writer locked a leaf that split after the traversal and the key belongs right: it unlocks and goes to the sibling, else it writes the wrong leaf",
    },
    RaceHandler {
        event: ROOT_HELP,
        race: "another client split the root and has not grown the tree: this splitter installs the new root with the old root's sibling, instead of waiting",
    },
    RaceHandler {
        event: ROOT_CAS_LOST,
        race: "two clients CASed a new root; this one lost: it takes the winner's root and inserts its pivot into the new level",
    },
    RaceHandler {
        event: Counters::LOCK_FAILURES,
        race: "a writer's masked CAS found the leaf or internal node locked by another writer: it yields and CASes again",
    },
    RDWC_READ_FALLBACK_HANDLER,
    RDWC_WRITE_FALLBACK_HANDLER,
];

pub const NO_ENTRY_VERSION: PlantedBug = PlantedBug {
    name: "no-entry-version",
    description: "entry writes do not bump the entry version (EV): a READ torn across a multi-line entry's update is accepted",
};
pub const NO_INTERNAL_VERSION: PlantedBug = PlantedBug {
    name: "no-internal-version",
    description: "an internal node's READ is not checked for tearing (its line and entry versions): an entry made of two writes' bytes routes a search to a null or wrong child",
};
pub const INTERNAL_VERSION_ALTERNATES: PlantedBug = PlantedBug {
    name: "internal-version-alternates",
    description: "an internal node's 4-bit version alternates between two values ((nv + 1) ^ 0xF), so a READ torn across two writes of the node passes the version check (found by mutation)",
};
pub const NO_BITMAP_CHECK: PlantedBug = PlantedBug {
    name: "no-bitmap-check",
    description: "a neighbourhood READ is not checked against the home's hop bitmap (C3): a READ that caught half a hop misses the key",
};
pub const NO_SIBLING_VALIDATION: PlantedBug = PlantedBug {
    name: "no-sibling-validation",
    description: "a leaf's sibling is not compared with the expected one: stale cached parents and half-split leaves go unnoticed",
};
pub const EV_HOP_ENTRIES_ONLY: PlantedBug = PlantedBug {
    name: "ev-hop-entries-only",
    description: "a hop bumps EV only on hop entries, not on homes whose bitmap changed (digest G1)",
};
pub const UPSERT_FIRST_VACANCY: PlantedBug = PlantedBug {
    name: "upsert-first-vacancy",
    description: "an insert looks for its key only up to the first vacancy, not to the home's farthest hop (digest G3)",
};
pub const RIGHT_NULL_SIBLING: PlantedBug = PlantedBug {
    name: "right-null-sibling",
    description: "an insert moving right forgets the expected sibling and reads the argmax instead (digest G4; redundant while splits keep the boundary)",
};
pub const SPLIT_DROPS_MAX_TOMBSTONE: PlantedBug = PlantedBug {
    name: "split-drops-max-tombstone",
    description: "a split drops the deleted maximum of a leaf with a sibling from the right half, so the right half's argmax falls below where its range ends",
};
pub const SPLIT_SKIPS_PARENT: PlantedBug = PlantedBug {
    name: "split-skips-parent",
    description: "a leaf split never inserts its pivot into the parent: the right half stays reachable only from its left sibling after every operation finished (the walk accepts a half split only after an operation that did not finish)",
};
pub const DELETE_CLEARS: PlantedBug = PlantedBug {
    name: "delete-clears",
    description: "a delete clears the entry instead of writing a tombstone, losing the left node's maximum (digest G5)",
};
const PLANTS: [PlantedBug; 12] = [
    NO_ENTRY_VERSION,
    NO_INTERNAL_VERSION,
    INTERNAL_VERSION_ALTERNATES,
    NO_BITMAP_CHECK,
    NO_SIBLING_VALIDATION,
    EV_HOP_ENTRIES_ONLY,
    UPSERT_FIRST_VACANCY,
    RIGHT_NULL_SIBLING,
    SPLIT_DROPS_MAX_TOMBSTONE,
    SPLIT_SKIPS_PARENT,
    DELETE_CLEARS,
    root::ROOT_COPY_REGRESSES,
];

/// The state one compute node's clients share.
#[derive(Debug)]
pub struct ChimeNode {
    pub cache: IndexCache<Internal>,
    pub hotspot: HotspotBuffer,
    pub rdwc: Rdwc<Change, Reply>,
    pub chunks: LocalChunkAllocator,
    /// The root word as this node last saw it (0: not read yet).
    root: CachedRoot,
}

/// CHIME's [`IndexKind`].
#[derive(Debug)]
pub struct Chime;

/// One client's handle.
#[derive(Debug)]
pub struct ChimeHandle<C> {
    o: ChimeOptions,
    l: LeafLayout,
    il: InternalLayout,
    lw: LockWord,
    node: Arc<ChimeNode>,
    ctx: C,
    counters: Counters,
    /// Internal nodes the last traversal read, by level.
    path: Vec<Option<RemoteAddr>>,
}

/// [`IndexKind::warm`] (every internal node) or, with `keys` (sorted), [`IndexKind::warm_keys`]
/// (the internal nodes on their paths), level by level from the root.
fn warm_tree(
    o: &ChimeOptions,
    node: &ChimeNode,
    memory: &dyn MemoryView,
    keys: Option<&[Vec<u8>]>,
) -> Result<(), String> {
    let il = internal_layout(o);
    let word = memory.read_memory(superblock_addr(), 8).map_err(|e| e.to_string())?;
    let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
    let (root, root_level) = root::unpack(word);
    node.root.set(word);
    let all = keys.map_or(0, <[_]>::len);
    let mut level_nodes = vec![(root, 0..all)];
    for _ in (1..=root_level).rev() {
        let mut children = Vec::new();
        for (at, below) in level_nodes {
            let raw = memory.read_memory(at, il.encoded_bytes()).map_err(|e| e.to_string())?;
            let n = il.decode(&raw, true).map_err(|_| format!("internal node at {at} is torn"))?;
            let charge = il.cache_charge(&n);
            if node.cache.stats().bytes + charge > o.cache_bytes {
                return Ok(());
            }
            node.cache.insert(at, &n, charge);
            children.extend(children_below(keys, below, n.leftmost, n.entries.iter().map(|(k, c)| (k.as_slice(), *c))));
        }
        level_nodes = children;
    }
    Ok(())
}

impl IndexKind for Chime {
    const NAME: &'static str = "chime";
    /// `dmkit bench-load --keys 10000000`, 2026-11-27 (README, Benchmarks).
    const HOST_BYTES_PER_ITEM: u64 = 44;
    type Options = ChimeOptions;
    type NodeState = ChimeNode;
    type Handle<C: Client + Clone + 'static> = ChimeHandle<C>;

    fn limits(o: &ChimeOptions) -> Limits {
        Limits {
            min_key_bytes: if o.indirect { 1 } else { o.key_bytes as usize },
            max_key_bytes: o.key_bytes as usize,
            min_value_bytes: if o.indirect { 1 } else { o.value_bytes as usize },
            max_value_bytes: o.value_bytes as usize,
        }
    }

    fn validate(o: &ChimeOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(ChimeOptions, String), String> {
        let config = if config == "default" { Self::NAME } else { config };
        let mut options = ChimeOptions::named(config, shape.key_bytes as u32, shape.value_bytes.max(1) as u32)?;
        options.memory_nodes = shape.memory_nodes;
        if let Some(bytes) = shape.cache_bytes {
            options.cache_bytes = bytes;
        }
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    async fn create<C: Client>(o: &ChimeOptions, ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)?;
        let l = leaf_layout(o);
        let k = l.key_bytes;
        let img = l.empty(RemoteAddr::NULL, &vec![0; k], &vec![0xFF; k]);
        let at = dmkit_rdma::alloc::alloc(ctx, NodeId(0), l.alloc_bytes() as u64, NODE_ALIGN).await?;
        ctx.write(at, Buf::from(l.encode_all(&img))).await?;
        let mut sb = root::pack(at, 0).to_le_bytes().to_vec();
        sb.extend_from_slice(&MAGIC.to_le_bytes());
        ctx.write(superblock_addr(), Buf::from(sb)).await?;
        Ok(())
    }

    fn node_state(o: &ChimeOptions, _caps: &Caps) -> ChimeNode {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        ChimeNode {
            cache: IndexCache::new(o.cache_bytes, CacheLevels::AllInternal),
            hotspot: HotspotBuffer::new(if o.speculative_read { o.hotspot_bytes } else { 0 }),
            rdwc: Rdwc::new(o.rdwc_slots.max(1) as usize, o.rdwc),
            chunks,
            root: CachedRoot::new(superblock_addr()),
        }
    }

    fn inherit(node: &ChimeNode, loader: &ChimeNode) {
        node.chunks.inherit(&loader.chunks);
    }

    /// A full cache (tree cache and hotspot buffer) cost the host 1.06 times its budget per
    /// compute node (`dmkit run --index chime --workload c --keys 1000000 --duration-us 10000`
    /// with 1 and 10 compute nodes); 1.3 with a margin.
    /// Every internal node costs 0.48 B an item (`dmkit reproduce chime fig14`; 1 with a
    /// margin), beside the hotspot buffer.
    fn cache_host_bytes(o: &ChimeOptions, compute_nodes: u16, items: u64) -> u64 {
        let full = o.cache_bytes.min(items + o.hotspot_bytes);
        full * 13 / 10 * compute_nodes as u64
    }

    fn node_state_bytes(n: &ChimeNode) -> u64 {
        n.cache.stats().bytes + n.hotspot.bytes() + n.rdwc.bytes() + n.chunks.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &ChimeOptions, node: Arc<ChimeNode>, ctx: C) -> ChimeHandle<C> {
        ChimeHandle {
            o: o.clone(),
            l: leaf_layout(o),
            il: internal_layout(o),
            lw: lock_word_layout(o),
            node,
            ctx,
            counters: Counters::default(),
            path: Vec::new(),
        }
    }

    fn check_invariants(o: &ChimeOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    /// Caches internal nodes top-down until the budget is full.
    fn warm(o: &ChimeOptions, node: &ChimeNode, memory: &dyn MemoryView) -> Result<(), String> {
        warm_tree(o, node, memory, None)
    }

    fn warm_keys(
        o: &ChimeOptions,
        node: &ChimeNode,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        warm_tree(o, node, memory, Some(keys)).map(|()| true)
    }

    fn node_counters(n: &ChimeNode) -> std::collections::BTreeMap<&'static str, u64> {
        let mut c = n.rdwc.stats().counters();
        let h = n.hotspot.stats();
        c.insert(HOTSPOT_ENTRIES, h.entries);
        c.insert(HOTSPOT_BYTES, h.bytes);
        c
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut ChimeOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "chime", bug)?);
        Ok(())
    }
}

/// Where a traversal led: a leaf, its expected sibling, and the cached parent copy used.
struct Route {
    leaf: RemoteAddr,
    expected: RemoteAddr,
    cached: Option<Arc<CachedNode<Internal>>>,
}

/// A write's changes: the caller's, or an RDWC window that stays open (admitting same-key
/// writes) until the leaf is locked.
struct Pending<'a, 'b> {
    leader: Option<&'a mut WriteLeader<'b, Change, Reply>>,
    changes: Vec<Change>,
}

impl Pending<'_, '_> {
    /// Closes the window (once) and returns the admitted changes.
    fn close(&mut self) -> &[Change] {
        if let Some(l) = self.leader.take() {
            self.changes = l.close();
        }
        &self.changes
    }
}

/// A locked leaf's state during a write.
struct Locked {
    addr: RemoteAddr,
    /// The lock word as the masked CAS returned it (lock bit clear).
    word: u64,
    img: Vec<u8>,
    /// Forward distance from the home covered by the local image (`span`: all of it).
    have: usize,
}

impl<C: Client + Clone + 'static> ChimeHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    fn check_key(&self, key: &[u8]) -> Result<(), IndexError> {
        Chime::limits(&self.o).check_key(key)?;
        if self.slot_key(key).iter().all(|&b| b == 0xFF) {
            return Err(IndexError::ReservedKey("an all-0xFF key (or key prefix) is CHIME's +infinity fence"));
        }
        Ok(())
    }

    /// What a leaf entry and the internal nodes hold of `key`: the key itself, or in indirect
    /// mode its first `prefix` bytes, zero-padded (monotone: a <= b implies slot(a) <= slot(b)).
    fn slot_key<'k>(&self, key: &'k [u8]) -> std::borrow::Cow<'k, [u8]> {
        let w = self.l.key_bytes;
        if key.len() == w {
            std::borrow::Cow::Borrowed(key)
        } else {
            let mut slot = key[..key.len().min(w)].to_vec();
            slot.resize(w, 0);
            std::borrow::Cow::Owned(slot)
        }
    }

    fn retries_exhausted(&self, op: &'static str) -> IndexError {
        IndexError::RetriesExhausted { op, retries: self.o.max_retries }
    }

    /// A split that cannot make room: in indirect mode, more than H keys share a prefix (they
    /// share a home); with fixed-size keys, a bug.
    fn crowded(&self, at: RemoteAddr) -> IndexError {
        if self.o.indirect { IndexError::Full } else { self.corrupt(at, "a split left no room for the key") }
    }

    fn corrupt(&self, at: RemoteAddr, what: &str) -> IndexError {
        IndexError::Corrupt(format!("node at {at}: {what}"))
    }

    async fn root(&mut self) -> Result<(RemoteAddr, u8), IndexError> {
        self.node.root.get(&self.ctx, &mut self.counters).await
    }

    async fn home(&self, key: &[u8]) -> usize {
        self.ctx.charge_cpu(CpuWork::HashByte, key.len() as u64).await;
        self.l.home(key)
    }

    // ----- internal nodes -----

    async fn read_internal(&mut self, addr: RemoteAddr) -> Result<Internal, IndexError> {
        let check = !self.planted(NO_ENTRY_VERSION) && !self.planted(NO_INTERNAL_VERSION);
        for _ in 0..self.o.max_retries {
            let raw = self.ctx.read(addr, Buf::zeroed(self.il.encoded_bytes())).await?;
            match self.il.decode(raw.as_slice(), check) {
                Ok(n) => {
                    self.ctx.charge_cpu(CpuWork::NodeSearchEntry, n.entries.len() as u64 + 1).await;
                    if n.level == 0 {
                        return Err(self.corrupt(addr, "an internal node with level 0"));
                    }
                    return Ok(n);
                }
                Err(Torn) => {
                    self.counters.event(TORN_INTERNAL);
                    self.counters.retries += 1;
                }
            }
        }
        Err(self.retries_exhausted("read internal node"))
    }

    /// The node at `target` level covering `key` (target 0: the leaf, with its expected
    /// sibling). Uses the cache when `use_cache`.
    async fn traverse(&mut self, key: &[u8], target: u8, use_cache: bool) -> Result<Route, IndexError> {
        let (root, root_level) = self.root().await?;
        self.path = vec![None; root_level as usize + 2];
        if root_level <= target {
            return Ok(Route { leaf: root, expected: RemoteAddr::NULL, cached: None });
        }
        let (mut p, mut level) = (root, root_level);
        let mut at_root = true;
        if use_cache && self.o.cache_bytes > 0 {
            self.ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
            match self.node.cache.lookup(key).filter(|e| e.node.level > target) {
                Some(e) => {
                    self.counters.event(CACHE_HIT);
                    let (child, expected) = e.node.route(key);
                    if e.node.level == target + 1 {
                        return Ok(Route { leaf: child, expected, cached: Some(e) });
                    }
                    (p, level, at_root) = (child, e.node.level - 1, false);
                }
                None => self.counters.event(CACHE_MISS),
            }
        }
        for _ in 0..self.o.max_retries {
            let n = self.read_internal(p).await?;
            if n.level != level || key < n.lowest.as_slice() || !n.valid {
                // No race leads here. An internal node's level and lowest fence never change
                // (a split gives the new right node `lowest = pivot` and inserts that pivot
                // with it; a helper installing a root takes `highest` and `sibling` from one
                // checked image), nodes are never freed or invalidated, and a root word packs
                // its node's level: so any copy of a parent, however stale, routes `key` to a
                // child of the level below with `lowest ≤ key`, and a stale root word names a
                // node of the level it says.
                return Err(
                    self.corrupt(p, "routed to for a key below its lowest fence, from the wrong level, or invalid")
                );
            }
            if key >= n.highest.as_slice() {
                self.counters.event(MOVE_RIGHT);
                self.counters.event(MOVE_RIGHT_INTERNAL);
                if at_root {
                    self.node.root.forget();
                }
                if n.sibling.is_null() {
                    return Err(self.corrupt(p, "a key above the highest fence and no sibling"));
                }
                p = n.sibling;
                continue;
            }
            at_root = false;
            self.node.cache.insert(p, &n, self.il.cache_charge(&n));
            if let Some(s) = self.path.get_mut(level as usize) {
                *s = Some(p);
            }
            let (child, expected) = n.route(key);
            if level == target + 1 {
                return Ok(Route { leaf: child, expected, cached: None });
            }
            (p, level) = (child, level - 1);
        }
        Err(self.retries_exhausted("traverse"))
    }

    // ----- leaves -----

    /// READs entries `[a, a + n)` (wrapping: two READs in one batch) of leaf `addr` into `img`,
    /// plus the header when the layout has one and the range lacks it. Checks C1 and C2 unless
    /// planted otherwise. Returns the offset of a replica inside what was read.
    async fn read_entries(
        &mut self,
        addr: RemoteAddr,
        img: &mut [u8],
        a: usize,
        n: usize,
    ) -> Result<Result<usize, Torn>, IndexError> {
        let read = self.read_range(addr, img, a, n, true).await?;
        Ok(read.map(|replica| replica.expect("every read holds a replica or the header")))
    }

    /// The speculative READ of entry `s` alone (digest §3.2: one READ of 19–30 B): no header
    /// besides, as a key match is sufficient (§4.4 T10). Reading the header too made every
    /// speculative read two verbs where a neighbourhood read is one, so on a memory node bound
    /// by its NIC's operation rate CHIME lost throughput as its hotspot buffer filled (YCSB C at
    /// 10 M keys, 10 × 64 clients: 34.5 → 29.9 Mops/s over 220 ms, where without speculation it
    /// is a steady 39.0). C1 on the entry still holds, and a replica the entry's lines happen
    /// to hold must be `valid` (§8 item 14). `Ok(false)`: torn or invalid.
    async fn read_entry(&mut self, addr: RemoteAddr, img: &mut [u8], s: usize) -> Result<bool, IndexError> {
        Ok(match self.read_range(addr, img, s, 1, false).await? {
            Ok(replica) => replica.is_none_or(|r| self.l.valid(img, r)),
            Err(Torn) => false,
        })
    }

    /// [`Self::read_entries`], with the header only if `header`; the replica read, if any.
    ///
    /// A range that must hold a replica and lies inside one group, past its replica, is
    /// extended to the next group's replica and one entry beyond it (the artifact's rule, digest
    /// §8 item 13), or in the last group back to its own replica: still one READ. Reading the
    /// header as a second READ instead, as this did until 2026-11-30, cost inserts (whose
    /// hop-range READs are short) 0.7 verbs each on a memory node bound by its operation rate:
    /// CHIME's LOAD took 5.49 verbs per insert where the paper's takes 4.
    async fn read_range(
        &mut self,
        addr: RemoteAddr,
        img: &mut [u8],
        a: usize,
        n: usize,
        header: bool,
    ) -> Result<Result<Option<usize>, Torn>, IndexError> {
        let l = self.l;
        let n = n.min(l.span);
        let mut ranges = Vec::with_capacity(3);
        if let Some((from, to)) = Self::entries_read(&l, a, n, header) {
            ranges.push(l.seg_range(from, to));
        } else {
            ranges.push(l.seg_range(a, l.span));
            ranges.push(l.seg_range(0, a + n - l.span));
        }
        if header && !ranges.iter().any(|r| l.replicas_in(r.0, r.1).next().is_some()) {
            ranges.push((0, l.replica_bytes()));
        }
        let batch = ranges
            .iter()
            .map(|&(d0, d1)| Request::read_len(addr.add(raw_of(d0) as u64), raw_of(d1) - raw_of(d0)))
            .collect();
        let responses = self.ctx.post(batch).await?;
        let check = !self.planted(NO_ENTRY_VERSION);
        let mut node_version = None;
        let mut replica = None;
        for (&(d0, d1), r) in ranges.iter().zip(responses) {
            let buf = r.into_buf()?;
            if layout::decode(buf.as_slice(), d0, d1, img, &|d| l.object_start(d), check).is_err() {
                return Ok(Err(Torn));
            }
            for v in l.versions_in(img, d0, d1) {
                if *node_version.get_or_insert(layout::nv(v)) != layout::nv(v) && check {
                    return Ok(Err(Torn));
                }
            }
            replica = replica.or(l.replicas_in(d0, d1).next());
        }
        self.ctx.charge_cpu(CpuWork::CopyByte, ranges.iter().map(|r| (r.1 - r.0) as u64).sum()).await;
        Ok(Ok(replica))
    }

    /// The entries `[from, to)` that [`Self::read_range`] READs in one piece for `n` entries
    /// from `a` (`n` at most the span): the range itself, or the range extended to hold a
    /// replica (its doc); `None` when the range wraps past the leaf's end (two READs).
    fn entries_read(l: &LeafLayout, a: usize, n: usize, header: bool) -> Option<(usize, usize)> {
        if a + n > l.span {
            return None;
        }
        let (mut from, mut to) = (a, a + n);
        let group = a / l.hood;
        if header && l.replicated && a % l.hood != 0 && (to - 1) / l.hood == group {
            let next = (group + 1) * l.hood;
            if next < l.span {
                to = next + 1;
            } else {
                from = group * l.hood;
            }
        }
        Some((from, to))
    }

    /// Like [`Self::read_entries`], re-reading while torn.
    async fn read_entries_retry(
        &mut self,
        addr: RemoteAddr,
        img: &mut [u8],
        a: usize,
        n: usize,
    ) -> Result<usize, IndexError> {
        for _ in 0..self.o.max_retries {
            match self.read_entries(addr, img, a, n).await? {
                Ok(r) => return Ok(r),
                Err(Torn) => {
                    self.counters.event(TORN_READ);
                    self.counters.retries += 1;
                }
            }
        }
        Err(self.retries_exhausted("read leaf"))
    }

    /// C3: the keys homed at `h` among entries `[h, h + H)` are the ones `bitmap[h]` lists.
    async fn bitmap_consistent(&self, img: &[u8], h: usize) -> bool {
        let l = &self.l;
        let mut status = 0u16;
        for d in 0..l.hood {
            let s = l.at(h, d);
            if !l.is_empty(img, s) && self.home(l.key(img, s)).await == h {
                status |= l.hop_bit(d);
            }
        }
        status == l.hops(img, h)
    }

    /// The entries homed at `h` (the home's hop offsets, within `have`) whose key field is `slot`.
    fn hood_matches(&self, img: &[u8], h: usize, slot: &[u8], have: usize) -> Vec<usize> {
        let l = &self.l;
        // An empty entry's key field is all zeros, as a key (or indirect prefix) of zeros is:
        // a hop bit read before its entry's write landed must not match it.
        l.hop_offsets(img, h)
            .filter(|&d| d < have)
            .map(|d| l.at(h, d))
            .filter(|&s| !l.is_empty(img, s) && l.key(img, s) == slot)
            .collect()
    }

    /// Among `slots` (entries whose key field matches `key`'s), the one holding `key`, with its
    /// value: with fixed-size keys the first; in indirect mode the one whose block holds `key`
    /// (all the blocks in one doorbell batch).
    async fn resolve(
        &mut self,
        img: &[u8],
        slots: &[usize],
        key: &[u8],
    ) -> Result<Option<(usize, Vec<u8>)>, IndexError> {
        if !self.o.indirect || slots.is_empty() {
            return Ok(slots.first().map(|&s| (s, self.l.value(img, s).to_vec())));
        }
        if slots.len() > 1 {
            self.counters.event(PREFIX_COLLISION);
        }
        let blocks = self.read_blocks(img, slots).await?;
        Ok(slots.iter().zip(blocks).find(|(_, (k, _))| k == key).map(|(&s, (_, v))| (s, v)))
    }

    /// Whether a leaf whose metadata is at `replica` may hold `key` given the route: `Ok(true)`
    /// to use it, `Ok(false)` for "the key may have moved right" (half split); `Err(())` for a
    /// stale cached route.
    fn validate_route(&self, img: &[u8], replica: usize, route: &Route, key: &[u8]) -> Result<bool, ()> {
        let l = &self.l;
        if !l.valid(img, replica) {
            return Err(());
        }
        if self.planted(NO_SIBLING_VALIDATION) {
            return Ok(true);
        }
        if l.fences {
            let (lo, hi) = l.fences(img, replica);
            if key < lo {
                return Err(());
            }
            if key >= hi {
                return if route.cached.is_some() { Err(()) } else { Ok(false) };
            }
            return Ok(true);
        }
        let sibling = l.sibling(img, replica);
        if sibling == route.expected {
            Ok(true)
        } else if route.cached.is_some() {
            Err(())
        } else {
            Ok(false)
        }
    }

    fn invalidate(&mut self, route: &mut Route) {
        if let Some(e) = route.cached.take() {
            self.node.cache.invalidate(&e);
            self.counters.event(CACHE_INVALIDATED);
        }
    }

    /// The value of the entry at `slot` (reads the block in indirect mode).
    async fn entry_value(&mut self, img: &[u8], slot: usize) -> Result<Vec<u8>, IndexError> {
        if !self.o.indirect {
            return Ok(self.l.value(img, slot).to_vec());
        }
        Ok(self.read_blocks(img, &[slot]).await?.pop().expect("one block").1)
    }

    /// The `(key, value)` of the blocks entries `slots` point to (indirect mode), read in one
    /// doorbell batch.
    async fn read_blocks(&mut self, img: &[u8], slots: &[usize]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, IndexError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let l = self.l;
        let mut batch = Vec::with_capacity(slots.len());
        for &s in slots {
            let (at, lines) = split_block_pointer(u64::from_le_bytes(l.value(img, s).try_into().expect("8 bytes")));
            if lines == 0 {
                return Err(IndexError::Corrupt(format!("a null block pointer in leaf entry {s}")));
            }
            batch.push(Request::read_len(at, lines * 64));
        }
        let responses = crate::common::batch::post_per_node(&self.ctx, batch).await?;
        let mut out = Vec::with_capacity(slots.len());
        for r in responses {
            let block = r.into_buf()?;
            out.push(parse_block(block.as_slice()).map_err(IndexError::Corrupt)?);
        }
        self.ctx.charge_cpu(CpuWork::CopyByte, out.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()).await;
        Ok(out)
    }

    /// The bytes an entry's value field gets for `value` (in indirect mode, writes a block
    /// holding `key` and `value`).
    async fn value_field(&mut self, key: &[u8], value: &[u8]) -> Result<Vec<u8>, IndexError> {
        if !self.o.indirect {
            return Ok(value.to_vec());
        }
        let lines = (key.len() + value.len() + 8).div_ceil(64);
        let node = self.node.clone();
        let at = node.chunks.alloc(&self.ctx, lines as u64 * 64, 64).await?;
        let mut block = (key.len() as u32).to_le_bytes().to_vec();
        block.extend_from_slice(&(value.len() as u32).to_le_bytes());
        block.extend_from_slice(key);
        block.extend_from_slice(value);
        block.resize(lines * 64, 0);
        self.ctx.write(at, Buf::from(block)).await?;
        Ok(block_pointer(at, lines).to_le_bytes().to_vec())
    }

    async fn search_leaf(
        &mut self,
        key: &[u8],
        mut leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        let l = self.l;
        let full = key;
        let slot = self.slot_key(full);
        let key: &[u8] = &slot;
        let h = self.home(key).await;
        let fp = fingerprint(full);
        let mut use_cache = true;
        let mut img = vec![0u8; l.decoded_bytes()];
        'route: for _ in 0..self.o.max_retries {
            let mut route = self.traverse(key, 0, use_cache).await?;
            // Speculative single-entry READ.
            if self.o.speculative_read {
                let hood = (0..l.hood).map(|d| l.at(h, d) as u16);
                if let Some(s) = self.node.hotspot.candidates(route.leaf.raw(), hood, fp) {
                    let s = s as usize;
                    if let Some(ld) = leader.as_deref_mut() {
                        ld.mark();
                    }
                    // An empty entry's key field is all zeros: it matches a key (or indirect
                    // prefix) of zeros, so the entry must be occupied too.
                    let hit = if self.read_entry(route.leaf, &mut img, s).await?
                        && !l.is_empty(&img, s)
                        && l.key(&img, s) == key
                    {
                        self.resolve(&img, &[s], full).await?
                    } else {
                        None
                    };
                    if let Some((s, value)) = hit {
                        self.counters.event(SPECULATION_HIT);
                        self.node.hotspot.touch(route.leaf.raw(), s as u16, fp);
                        return Ok((!l.is_tombstone(&img, s)).then_some(value));
                    }
                    self.counters.event(SPECULATION_MISS);
                    self.node.hotspot.forget(route.leaf.raw(), s as u16);
                }
            }
            for _ in 0..self.o.max_retries {
                if let Some(ld) = leader.as_deref_mut() {
                    ld.mark();
                }
                let replica = match self.read_entries(route.leaf, &mut img, h, l.hood).await? {
                    Ok(r) => r,
                    Err(Torn) => {
                        self.counters.event(TORN_READ);
                        self.counters.retries += 1;
                        continue;
                    }
                };
                let verdict = self.validate_route(&img, replica, &route, key);
                if verdict.is_err() {
                    self.counters.event(LEAF_ROUTE_STALE);
                    self.invalidate(&mut route);
                    use_cache = !route.leaf.is_null();
                    continue 'route;
                }
                // G2: a key found among the home's keys is a real version of its entry.
                let matches = self.hood_matches(&img, h, key, l.hood);
                if let Some((s, value)) = self.resolve(&img, &matches, full).await? {
                    self.node.hotspot.touch(route.leaf.raw(), s as u16, fp);
                    return Ok((!l.is_tombstone(&img, s)).then_some(value));
                }
                if !self.planted(NO_BITMAP_CHECK) && !self.bitmap_consistent(&img, h).await {
                    self.counters.event(BITMAP_MISMATCH);
                    self.counters.retries += 1;
                    continue;
                }
                if verdict == Ok(false) {
                    self.counters.event(HALF_SPLIT_RIGHT);
                    if let Some(ld) = leader.as_deref_mut() {
                        // The next READ decides together with this one.
                        ld.unmark();
                    }
                    route.leaf = l.sibling(&img, replica);
                    if route.leaf.is_null() {
                        return Err(self.corrupt(route.leaf, "a half split toward a null sibling"));
                    }
                    continue;
                }
                return Ok(None);
            }
            return Err(self.retries_exhausted("search"));
        }
        Err(self.retries_exhausted("search"))
    }

    // ----- locks and writes -----

    async fn lock(&mut self, lock_at: RemoteAddr) -> Result<u64, IndexError> {
        for _ in 0..self.o.max_retries {
            let old = self.ctx.masked_cas(lock_at, 0, LOCK_BIT, LOCK_BIT, LOCK_BIT).await?;
            if old & LOCK_BIT == 0 {
                return Ok(old);
            }
            self.counters.lock_failures += 1;
            self.ctx.yield_now().await;
        }
        Err(self.retries_exhausted("lock"))
    }

    async fn unlock(&mut self, addr: RemoteAddr, word: u64, writes: Vec<(usize, Vec<u8>)>) -> Result<(), IndexError> {
        let mut batch: Vec<Request> =
            writes.into_iter().map(|(at, b)| Request::write(addr.add(at as u64), b)).collect();
        batch.push(Request::write(addr.add(self.l.lock_at() as u64), (word & !LOCK_BIT).to_le_bytes().to_vec()));
        self.ctx.post(batch).await?;
        Ok(())
    }

    /// WRITE requests for entries at forward distances `[0, reach]` from `h` (two when wrapping).
    fn entry_writes(&self, img: &[u8], h: usize, reach: usize) -> Vec<(usize, Vec<u8>)> {
        let l = &self.l;
        let end = h + reach + 1;
        if end <= l.span {
            vec![l.encode_seg(img, h, end)]
        } else {
            vec![l.encode_seg(img, h, l.span), l.encode_seg(img, 0, end - l.span)]
        }
    }

    /// Locks the leaf for `key` and reads what the write needs: the hop range (inserts) or the
    /// neighbourhood (a speculative entry first, if known). Moves right or re-traverses as
    /// sibling-based validation says. Returns the locked leaf and where the key is.
    async fn lock_leaf(
        &mut self,
        key: &[u8],
        h: usize,
        pending: &mut Pending<'_, '_>,
    ) -> Result<(Locked, Option<usize>), IndexError> {
        let l = self.l;
        let full = key;
        let slot = self.slot_key(full);
        let key: &[u8] = &slot;
        let fp = fingerprint(full);
        let mut use_cache = true;
        'route: for _ in 0..self.o.max_retries {
            let mut route = self.traverse(key, 0, use_cache).await?;
            for _ in 0..self.o.max_retries {
                let lock_at = route.leaf.add(l.lock_at() as u64);
                let word = self.lock(lock_at).await?;
                let insert = pending.close().iter().any(|c| matches!(c, Change::Upsert(_)));
                let mut lk = Locked { addr: route.leaf, word, img: vec![0u8; l.decoded_bytes()], have: 0 };
                if !insert && self.o.speculative_read && !self.planted(DELETE_CLEARS) {
                    let hood = (0..l.hood).map(|d| l.at(h, d) as u16);
                    if let Some(s) = self.node.hotspot.candidates(route.leaf.raw(), hood, fp) {
                        let s = s as usize;
                        // `Ok(true)`: the entry holds the key.
                        let read = match self.read_entry(route.leaf, &mut lk.img, s).await {
                            Ok(true) if !l.is_empty(&lk.img, s) && l.key(&lk.img, s) == key => {
                                self.resolve(&lk.img, &[s], full).await.map(|hit| hit.is_some())
                            }
                            Ok(_) => Ok(false),
                            Err(e) => Err(e),
                        };
                        match read {
                            Ok(true) => {
                                self.counters.event(SPECULATION_HIT);
                                return Ok((lk, Some(s)));
                            }
                            Ok(_) => {
                                self.counters.event(SPECULATION_MISS);
                                self.node.hotspot.forget(route.leaf.raw(), s as u16);
                            }
                            Err(e) => {
                                self.unlock(route.leaf, word, vec![]).await?;
                                return Err(e);
                            }
                        }
                    }
                }
                let mut n = if !insert {
                    l.hood
                } else if self.o.vacancy_bitmap {
                    self.lw.hop_read_len(word, h)
                } else {
                    l.span
                };
                let replica = match self.read_entries(route.leaf, &mut lk.img, h, n).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(Torn)) => {
                        self.unlock(route.leaf, word, vec![]).await?;
                        return Err(self.corrupt(route.leaf, "a leaf read torn under its lock"));
                    }
                    Err(e) => {
                        self.unlock(route.leaf, word, vec![]).await?;
                        return Err(e);
                    }
                };
                // G3: the home's keys may lie beyond the first vacancy. The READ above may have
                // covered them already (a range extended to a replica): those entries are the
                // ones a second READ would return, as the leaf is locked.
                let far = l.hop_offsets(&lk.img, h).max().map_or(0, |d| d + 1);
                if insert && far > n && !self.planted(UPSERT_FIRST_VACANCY) {
                    let covered = Self::entries_read(&l, h, n, true).map_or(n, |(_, to)| to - h);
                    if far > covered {
                        self.counters.event(UPSERT_EXTEND);
                        if let Err(e) = self.read_entries_retry(route.leaf, &mut lk.img, l.at(h, n), far - n).await {
                            self.unlock(route.leaf, word, vec![]).await?;
                            return Err(e);
                        }
                    } else {
                        self.counters.event(UPSERT_EXTEND_READ);
                    }
                    n = far;
                }
                lk.have = n;
                let matches: Vec<usize> = if self.planted(UPSERT_FIRST_VACANCY) {
                    (0..n)
                        .map(|d| l.at(h, d))
                        .filter(|&s| !l.is_empty(&lk.img, s) && l.key(&lk.img, s) == key)
                        .collect()
                } else {
                    self.hood_matches(&lk.img, h, key, n)
                };
                let found = match self.resolve(&lk.img, &matches, full).await {
                    Ok(hit) => hit.map(|(s, _)| s),
                    Err(e) => {
                        self.unlock(route.leaf, word, vec![]).await?;
                        return Err(e);
                    }
                };
                let verdict = self.validate_route(&lk.img, replica, &route, key);
                if verdict.is_err() {
                    self.counters.event(LEAF_ROUTE_STALE);
                    self.unlock(route.leaf, word, vec![]).await?;
                    self.invalidate(&mut route);
                    use_cache = true;
                    continue 'route;
                }
                if found.is_some() || verdict == Ok(true) {
                    return Ok((lk, found));
                }
                // Half split: the key is here unless it is above this leaf's (new) maximum.
                let sibling = l.sibling(&lk.img, replica);
                let go_right = if !insert || l.fences {
                    true
                } else if (0..n).any(|d| {
                    let s = l.at(h, d);
                    !l.is_empty(&lk.img, s) && l.key(&lk.img, s) >= key
                }) {
                    false
                } else {
                    let a = self.lw.argmax(word);
                    if l.dist(h, a) >= n
                        && let Err(e) = self.read_entries_retry(route.leaf, &mut lk.img, a, 1).await
                    {
                        self.unlock(route.leaf, word, vec![]).await?;
                        return Err(e);
                    }
                    if l.is_empty(&lk.img, a) {
                        false
                    } else {
                        match layout::successor(l.key(&lk.img, a)) {
                            Some(split) => key >= split.as_slice(),
                            None => false,
                        }
                    }
                };
                if !go_right {
                    return Ok((lk, None));
                }
                self.unlock(route.leaf, word, vec![]).await?;
                self.counters.event(HALF_SPLIT_RIGHT);
                self.counters.event(HALF_SPLIT_RIGHT_LOCKED);
                if sibling.is_null() {
                    return Err(self.corrupt(route.leaf, "a half split toward a null sibling"));
                }
                route.leaf = sibling;
                if self.planted(RIGHT_NULL_SIBLING) {
                    route.expected = RemoteAddr::NULL;
                }
            }
            return Err(self.retries_exhausted("lock leaf"));
        }
        Err(self.retries_exhausted("lock leaf"))
    }

    /// Applies the pending changes to `key` under the leaf lock; returns one result per change.
    async fn write_leaf(&mut self, key: &[u8], pending: &mut Pending<'_, '_>) -> Result<Vec<bool>, IndexError> {
        let l = self.l;
        let slot = self.slot_key(key).into_owned();
        let h = self.home(&slot).await;
        let fp = fingerprint(key);
        let (mut lk, found) = self.lock_leaf(key, h, pending).await?;
        let changes = pending.close();
        let live = found.filter(|&s| !l.is_tombstone(&lk.img, s));
        // `Some(empty)` stands for the present value: values are at least one byte.
        let (state, results) = crate::common::change::fold(live.map(|_| Vec::new()), changes);
        let outcome = match (found, state) {
            (_, Some(v)) if v.is_empty() => {
                // Updates of an existing key that left it... unchanged? Impossible: fold only
                // keeps the placeholder when no change wrote a value.
                self.unlock(lk.addr, lk.word, vec![]).await
            }
            (Some(s), Some(v)) => self.write_entry(&mut lk, h, s, key, Some(&v)).await.map(|_| {
                self.node.hotspot.touch(lk.addr.raw(), s as u16, fp);
            }),
            (Some(s), None) if live.is_some() => self.write_entry(&mut lk, h, s, key, None).await,
            (None, Some(v)) => self.insert_new(lk, h, key, &v).await,
            (_, None) => self.unlock(lk.addr, lk.word, vec![]).await,
        };
        outcome.map(|()| results)
    }

    /// Writes entry `s` (a new value, or a delete) and unlocks.
    async fn write_entry(
        &mut self,
        lk: &mut Locked,
        h: usize,
        s: usize,
        full: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), IndexError> {
        let l = self.l;
        let key = l.key(&lk.img, s).to_vec();
        let mut touched = vec![s];
        match value {
            Some(v) => {
                let field = match self.value_field(full, v).await {
                    Ok(f) => f,
                    Err(e) => {
                        self.unlock(lk.addr, lk.word, vec![]).await?;
                        return Err(e);
                    }
                };
                l.set_item(&mut lk.img, s, &key, &field, false);
            }
            None if self.planted(DELETE_CLEARS) => {
                l.clear_item(&mut lk.img, s);
                let d = l.dist(h, s);
                let b = l.bitmap(&lk.img, h) & !l.hop_bit(d);
                l.set_bitmap(&mut lk.img, h, b);
                touched.push(h);
            }
            None => {
                let field = l.value(&lk.img, s).to_vec();
                l.set_item(&mut lk.img, s, &key, &field, true);
            }
        }
        if !self.planted(NO_ENTRY_VERSION) {
            for &t in &touched {
                l.bump_entry(&mut lk.img, t);
            }
        }
        let writes = if touched.len() == 1 {
            vec![l.encode_seg(&lk.img, s, s + 1)]
        } else {
            self.entry_writes(&lk.img, h, l.dist(h, s))
        };
        self.unlock(lk.addr, lk.word, writes).await
    }

    /// Inserts a new key into the locked leaf (hopscotch), splitting it if there is no room.
    async fn insert_new(&mut self, mut lk: Locked, h: usize, key: &[u8], value: &[u8]) -> Result<(), IndexError> {
        let l = self.l;
        let field = match self.value_field(key, value).await {
            Ok(f) => f,
            Err(e) => {
                self.unlock(lk.addr, lk.word, vec![]).await?;
                return Err(e);
            }
        };
        let slot = self.slot_key(key).into_owned();
        let key = slot.as_slice();
        // A hop that fails leaves the image as it was.
        let mut hopped = hop_insert(&l, &mut lk.img, h, key, &field, lk.have);
        if hopped.is_none() && lk.have < l.span {
            // The bitmap hinted at room the range does not have: read all of the leaf.
            self.counters.event(HOP_READ_ALL);
            let rest = l.span - lk.have;
            if let Err(e) = self.read_entries_retry(lk.addr, &mut lk.img, l.at(h, lk.have), rest).await {
                self.unlock(lk.addr, lk.word, vec![]).await?;
                return Err(e);
            }
            lk.have = l.span;
            hopped = hop_insert(&l, &mut lk.img, h, key, &field, l.span);
        }
        let Some(hop) = hopped else {
            return self.split_leaf(lk, h, key, &field).await;
        };
        if !hop.moves.is_empty() {
            self.counters.event(HOP);
        }
        for &s in &hop.changed {
            let hop_entry = s == hop.slot || hop.moves.iter().any(|&(from, to)| s == from || s == to);
            if (hop_entry || !self.planted(EV_HOP_ENTRIES_ONLY)) && !self.planted(NO_ENTRY_VERSION) {
                l.bump_entry(&mut lk.img, s);
            }
        }
        let mut word = lk.word;
        if let Some(&(_, to)) = hop.moves.iter().find(|&&(from, _)| from == self.lw.argmax(word)) {
            word = self.lw.with_argmax(word, to);
        }
        word = self.vacancy_after(word, &lk.img, h, lk.have);
        let writes = self.entry_writes(&lk.img, h, hop.reach);
        self.unlock(lk.addr, word, writes).await
    }

    /// The vacancy bits of the buckets in the local range `[h, h + have)`: a bucket is marked
    /// full when none of its entries there is empty (so a bit errs only toward "full").
    fn vacancy_after(&self, mut word: u64, img: &[u8], h: usize, have: usize) -> u64 {
        if !self.o.vacancy_bitmap {
            return word;
        }
        let l = &self.l;
        let mut buckets: Vec<(usize, bool)> = Vec::new();
        for d in 0..have {
            let s = l.at(h, d);
            let b = self.lw.bucket(s);
            let empty = l.is_empty(img, s);
            match buckets.iter_mut().find(|(x, _)| *x == b) {
                Some((_, any)) => *any |= empty,
                None => buckets.push((b, empty)),
            }
        }
        for (b, any_empty) in buckets {
            word = self.lw.set_full(word, b, !any_empty);
        }
        word
    }

    /// The exact lock word of a whole leaf image (unlocked).
    fn exact_word(&self, img: &[u8]) -> u64 {
        let l = &self.l;
        let mut word = self.vacancy_after(0, img, 0, l.span);
        let max = (0..l.span).filter(|&s| !l.is_empty(img, s)).max_by(|&a, &b| l.key(img, a).cmp(l.key(img, b)));
        if let Some(m) = max {
            word = self.lw.with_argmax(word, m);
        }
        word
    }

    /// The keys whose removal alone would let `key` (home `h`) hop into its neighbourhood.
    fn critical_keys(&self, img: &[u8], h: usize) -> Vec<Vec<u8>> {
        let l = &self.l;
        // Each key's home, hashed once: the plans below ask again and again.
        let homes: Vec<usize> =
            (0..l.span).map(|s| if l.is_empty(img, s) { 0 } else { l.home(l.key(img, s)) }).collect();
        (0..l.span)
            .filter(|&s| !l.is_empty(img, s))
            .filter(|&s| hop_plan(l, h, l.span, |t| t == s || l.is_empty(img, t), |t| homes[t]).is_some())
            .map(|s| l.key(img, s).to_vec())
            .collect()
    }

    /// Splits the locked, wholly read leaf and inserts `key` into the half it belongs to.
    async fn split_leaf(&mut self, lk: Locked, h: usize, key: &[u8], field: &[u8]) -> Result<(), IndexError> {
        let l = self.l;
        self.counters.event(LEAF_SPLIT);
        let img = lk.img;
        let occupied: Vec<usize> = (0..l.span).filter(|&s| !l.is_empty(&img, s)).collect();
        let mut candidates = self.critical_keys(&img, h);
        candidates.push(key.to_vec());
        candidates.sort();
        // Indirect keys that share a prefix share a key field and move together: split between
        // distinct fields, or a group can land whole beside the key and leave it no room.
        candidates.dedup();
        let mut split_key = candidates[candidates.len() / 2].clone();
        let below = |sk: &[u8]| occupied.iter().filter(|&&s| l.key(&img, s) < sk).count();
        if below(&split_key) == 0 && key >= split_key.as_slice()
            || below(&split_key) == occupied.len() && key < split_key.as_slice()
        {
            let mut all: Vec<Vec<u8>> = occupied.iter().map(|&s| l.key(&img, s).to_vec()).collect();
            all.push(key.to_vec());
            all.sort();
            split_key = all[all.len() / 2].clone();
        }
        if below(&split_key) == 0 && key >= split_key.as_slice() {
            // Every key here shares one key field (indirect keys with one prefix): no pivot
            // can part them.
            self.unlock(lk.addr, lk.word, vec![]).await?;
            return Err(self.crowded(lk.addr));
        }
        // Left keeps live keys below the split key, and its largest key even if deleted.
        let left_max = occupied
            .iter()
            .copied()
            .filter(|&s| l.key(&img, s) < split_key.as_slice())
            .max_by(|&a, &b| l.key(&img, a).cmp(l.key(&img, b)));
        let (lo, hi) = if l.fences {
            let r = l.replicas()[0];
            let (a, b) = l.fences(&img, r);
            (a.to_vec(), b.to_vec())
        } else {
            (Vec::new(), Vec::new())
        };
        let old_sibling = l.sibling(&img, l.replicas()[0]);
        // The old leaf's largest key, even if deleted, marks where its range ends (I9: its
        // sibling's range starts at its successor). It goes right with the other large keys,
        // and the right half, which inherits the sibling, keeps it as its own boundary:
        // dropped, an insert that reaches the right half through a parent older than both
        // splits reads a lower argmax there and moves on one leaf too far.
        let boundary = if old_sibling.is_null() || self.planted(SPLIT_DROPS_MAX_TOMBSTONE) {
            None
        } else {
            occupied.iter().copied().max_by(|&a, &b| l.key(&img, a).cmp(l.key(&img, b)))
        };
        let mut left = img.clone();
        let mut right = l.empty(old_sibling, &lo, &hi);
        for i in 0..l.span {
            let b = l.bitmap(&left, i) & (layout::TOMBSTONE | layout::OCCUPIED);
            l.set_bitmap(&mut left, i, b);
        }
        for &s in &occupied {
            let k = l.key(&img, s).to_vec();
            let tomb = l.is_tombstone(&img, s);
            if k.as_slice() >= split_key.as_slice() {
                l.clear_item(&mut left, s);
                if !tomb || Some(s) == boundary {
                    l.set_item(&mut right, s, &k, l.value(&img, s), tomb);
                }
            } else if tomb && Some(s) != left_max {
                l.clear_item(&mut left, s);
            }
        }
        for half in [&mut left, &mut right] {
            for s in 0..l.span {
                if !l.is_empty(half, s) {
                    let q = l.home(l.key(half, s));
                    let b = l.bitmap(half, q) | l.hop_bit(l.dist(q, s));
                    l.set_bitmap(half, q, b);
                }
            }
        }
        let target = if key < split_key.as_slice() { &mut left } else { &mut right };
        if hop_insert(&l, target, h, key, field, l.span).is_none() {
            let word = lk.word;
            self.unlock(lk.addr, word, vec![]).await?;
            return Err(self.crowded(lk.addr));
        }
        let max_left = (0..l.span)
            .filter(|&s| !l.is_empty(&left, s))
            .map(|s| l.key(&left, s).to_vec())
            .max()
            .expect("the left half keeps a key");
        let pivot = layout::successor(&max_left).expect("keys below +infinity");
        let right_at = match self.alloc_node(l.alloc_bytes()).await {
            Ok(a) => a,
            Err(e) => {
                self.unlock(lk.addr, lk.word, vec![]).await?;
                return Err(e);
            }
        };
        if l.fences {
            l.set_meta(&mut right, old_sibling, Some((&pivot, &hi)));
            l.set_meta(&mut left, right_at, Some((&lo, &pivot)));
        } else {
            l.set_meta(&mut left, right_at, None);
        }
        l.bump_node(&mut left);
        let right_word = self.exact_word(&right);
        let left_word = self.exact_word(&left);
        let whole = |img: &[u8], word: u64| {
            let mut bytes = l.encode_all(img);
            bytes.resize(l.lock_at(), 0);
            bytes.extend_from_slice(&word.to_le_bytes());
            bytes
        };
        // The new leaf first (awaited: nothing may point to it before it is complete), then
        // the old one with its unlock in one WRITE (the lock word is its last line).
        if let Err(e) = self.ctx.write(right_at, Buf::from(whole(&right, right_word))).await {
            self.unlock(lk.addr, lk.word, vec![]).await?;
            return Err(e.into());
        }
        self.ctx.write(lk.addr, Buf::from(whole(&left, left_word))).await?;
        if self.planted(SPLIT_SKIPS_PARENT) {
            return Ok(());
        }
        self.insert_parent(lk.addr, 0, pivot, right_at).await
    }

    async fn alloc_node(&mut self, bytes: usize) -> Result<RemoteAddr, IndexError> {
        let node = self.node.clone();
        node.chunks.alloc(&self.ctx, bytes as u64, NODE_ALIGN).await
    }

    /// Inserts pivot `sep` → `child` into the level above `left` (at `level`), which split;
    /// splits upward and grows the root as needed (Sherman's propagation, digest §3.4).
    async fn insert_parent(
        &mut self,
        mut left: RemoteAddr,
        mut level: u8,
        mut sep: Vec<u8>,
        mut child: RemoteAddr,
    ) -> Result<(), IndexError> {
        let path = std::mem::take(&mut self.path);
        let mut use_path = true;
        for _ in 0..self.o.max_retries {
            let (root, root_level) = self.root().await?;
            if root_level < level {
                // This node's copy of the root never moves back (`CachedRoot`), and this client
                // reached `left` from it or from the node's cache, which traversals from it fill.
                return Err(root::copy_below_split(root_level, level));
            }
            if root_level == level {
                let (first_sep, first_child) = if root == left {
                    (sep.clone(), child)
                } else {
                    // Another client split the root and has not grown the tree yet: help.
                    self.counters.event(ROOT_HELP);
                    // `left`, at the root's level and not the root, exists only because the
                    // root split: nodes of a level come from splits of its first node, the root
                    // is that first node, and a sibling pointer is never cleared (a leaf keeps
                    // its largest key, I9, so its pivot is known). A root word packs its level.
                    match self.root_split_of(root, level).await? {
                        Some(x) => x,
                        None => return Err(root::root_not_split(root, level, left)),
                    }
                };
                let k = self.l.key_bytes;
                let r = Internal {
                    nv: 0,
                    level: level + 1,
                    valid: true,
                    sibling: RemoteAddr::NULL,
                    leftmost: root,
                    sibling_leftmost: RemoteAddr::NULL,
                    lowest: vec![0; k],
                    highest: vec![0xFF; k],
                    entries: vec![(first_sep, first_child)],
                };
                let at = self.alloc_node(self.il.alloc_bytes()).await?;
                self.ctx.write(at, Buf::from(self.il.encode(&r, &[]))).await?;
                let (old, new) = (root::pack(root, level), root::pack(at, level + 1));
                let seen = self.ctx.cas(superblock_addr(), old, new).await?;
                if seen == old {
                    self.counters.event(ROOT_SPLIT);
                    self.node.root.set(new);
                    if root == left {
                        return Ok(());
                    }
                } else {
                    self.counters.event(ROOT_CAS_LOST);
                    self.counters.cas_failures += 1;
                    self.node.root.set(seen);
                }
                continue;
            }
            let parent = match path.get(level as usize + 1).copied().flatten().filter(|_| use_path) {
                Some(p) => p,
                None => self.traverse(&sep, level + 1, false).await?.leaf,
            };
            use_path = false;
            match self.internal_store(parent, level + 1, &sep, child).await? {
                None => return Ok(()),
                Some((up, right)) => {
                    if self.planted(root::ROOT_COPY_REGRESSES) {
                        self.node.root.regress();
                    }
                    (left, level, sep, child) = (parent, level + 1, up, right)
                }
            }
        }
        Err(self.retries_exhausted("insert into parent"))
    }

    /// The pivot and new sibling of a root at `level` that split, if it did.
    async fn root_split_of(
        &mut self,
        root: RemoteAddr,
        level: u8,
    ) -> Result<Option<(Vec<u8>, RemoteAddr)>, IndexError> {
        if level > 0 {
            let r = self.read_internal(root).await?;
            return Ok((r.level == level && !r.sibling.is_null()).then_some((r.highest, r.sibling)));
        }
        let l = self.l;
        let mut img = vec![0u8; l.decoded_bytes()];
        let replica = self.read_entries_retry(root, &mut img, 0, l.span).await?;
        let sibling = l.sibling(&img, replica);
        if sibling.is_null() {
            return Ok(None);
        }
        let max = (0..l.span).filter(|&s| !l.is_empty(&img, s)).map(|s| l.key(&img, s).to_vec()).max();
        Ok(max.and_then(|m| layout::successor(&m)).map(|p| (p, sibling)))
    }

    /// Inserts `sep` → `child` into the internal node at `addr` (level `level`), moving right as
    /// needed. Returns the pivot and new node if it split.
    async fn internal_store(
        &mut self,
        mut addr: RemoteAddr,
        level: u8,
        sep: &[u8],
        child: RemoteAddr,
    ) -> Result<Option<(Vec<u8>, RemoteAddr)>, IndexError> {
        let il = self.il;
        for _ in 0..self.o.max_retries {
            let lock_at = addr.add(il.lock_at() as u64);
            let word = self.lock(lock_at).await?;
            let unlock_bytes = (word & !LOCK_BIT).to_le_bytes().to_vec();
            let raw = match self.ctx.read(addr, Buf::zeroed(il.encoded_bytes())).await {
                Ok(r) => r,
                Err(e) => {
                    self.ctx.write(lock_at, Buf::from(unlock_bytes)).await?;
                    return Err(e.into());
                }
            };
            let mut n = match il.decode(raw.as_slice(), true) {
                Ok(n) if n.level == level => n,
                _ => {
                    self.ctx.write(lock_at, Buf::from(unlock_bytes)).await?;
                    return Err(self.corrupt(addr, "an internal node torn under its lock, or of another level"));
                }
            };
            if sep >= n.highest.as_slice() {
                self.ctx.write(lock_at, Buf::from(unlock_bytes)).await?;
                self.counters.event(MOVE_RIGHT);
                self.counters.event(MOVE_RIGHT_PARENT);
                addr = n.sibling;
                continue;
            }
            match n.entries.binary_search_by(|(k, _)| k.as_slice().cmp(sep)) {
                Ok(i) => n.entries[i].1 = child,
                Err(i) => n.entries.insert(i, (sep.to_vec(), child)),
            }
            let whole = |n: &Internal| {
                let mut bytes = il.encode(n, &[]);
                bytes.resize(il.lock_at(), 0);
                bytes.extend_from_slice(&(word & !LOCK_BIT).to_le_bytes());
                bytes
            };
            n.nv = if self.planted(INTERNAL_VERSION_ALTERNATES) { (n.nv + 1) ^ 0x0F } else { (n.nv + 1) & 0x0F };
            if n.entries.len() <= il.span {
                self.ctx.write(addr, Buf::from(whole(&n))).await?;
                return Ok(None);
            }
            self.counters.event(INTERNAL_SPLIT);
            let m = n.entries.len() / 2;
            let right_entries = n.entries.split_off(m + 1);
            let (up, up_child) = n.entries.pop().expect("the middle entry");
            let right_at = match self.alloc_node(il.alloc_bytes()).await {
                Ok(a) => a,
                Err(e) => {
                    self.ctx.write(lock_at, Buf::from(unlock_bytes)).await?;
                    return Err(e);
                }
            };
            let right = Internal {
                nv: 0,
                level,
                valid: true,
                sibling: n.sibling,
                leftmost: up_child,
                sibling_leftmost: n.sibling_leftmost,
                lowest: up.clone(),
                highest: n.highest.clone(),
                entries: right_entries,
            };
            n.highest = up.clone();
            n.sibling = right_at;
            n.sibling_leftmost = up_child;
            let mut right_bytes = il.encode(&right, &[]);
            right_bytes.resize(il.lock_at() + 8, 0);
            if let Err(e) = self.ctx.write(right_at, Buf::from(right_bytes)).await {
                self.ctx.write(lock_at, Buf::from(unlock_bytes)).await?;
                return Err(e.into());
            }
            self.ctx.write(addr, Buf::from(whole(&n))).await?;
            return Ok(Some((up, right_at)));
        }
        Err(self.retries_exhausted("insert into internal node"))
    }

    // ----- scans -----

    /// A whole-leaf image is consistent: every key is in its home's neighbourhood with its bit
    /// set, and every set bit names a key of that home.
    async fn leaf_consistent(&self, img: &[u8]) -> bool {
        let l = &self.l;
        let mut bits = vec![0u16; l.span];
        for s in 0..l.span {
            if !l.is_empty(img, s) {
                let q = self.home(l.key(img, s)).await;
                let d = l.dist(q, s);
                if d >= l.hood || bits[q] & l.hop_bit(d) != 0 {
                    return false;
                }
                bits[q] |= l.hop_bit(d);
            }
        }
        (0..l.span).all(|q| bits[q] == l.hops(img, q))
    }

    async fn do_scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        for b in [start, end] {
            if let Bound::Included(k) | Bound::Excluded(k) = b {
                Chime::limits(&self.o).check_key(k)?;
            }
        }
        let mut out = Pairs::new();
        if limit == 0 {
            return Ok(out);
        }
        let l = self.l;
        let first = match start {
            Bound::Included(k) | Bound::Excluded(k) => self.slot_key(k).into_owned(),
            Bound::Unbounded => vec![0; l.key_bytes],
        };
        // In indirect mode, the key fields that can hold keys in range (slots are monotone).
        let slot_end = match end {
            Bound::Included(k) | Bound::Excluded(k) => Bound::Included(self.slot_key(k).into_owned()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut addr = self.traverse(&first, 0, true).await?.leaf;
        let mut img = vec![0u8; l.decoded_bytes()];
        let mut last: Option<Vec<u8>> = None;
        for _ in 0..self.o.max_retries {
            let replica = self.read_entries_retry(addr, &mut img, 0, l.span).await?;
            if !self.leaf_consistent(&img).await {
                self.counters.event(SCAN_INCONSISTENT);
                self.counters.retries += 1;
                continue;
            }
            let occupied = (0..l.span).filter(|&s| !l.is_empty(&img, s));
            // A key field above the end's holds a key above the end.
            let mut stop = self.o.indirect
                && occupied.clone().any(|s| !below_end(l.key(&img, s), slot_end.as_ref().map(|k| k.as_slice())));
            // (key, entry, value if read already), in key order.
            let mut items: Vec<(Vec<u8>, usize, Option<Vec<u8>>)> = if self.o.indirect {
                let slot_end = slot_end.as_ref().map(|k| k.as_slice());
                let want: Vec<usize> = occupied
                    .filter(|&s| {
                        let k = l.key(&img, s);
                        !l.is_tombstone(&img, s) && k >= first.as_slice() && below_end(k, slot_end)
                    })
                    .collect();
                let blocks = self.read_blocks(&img, &want).await?;
                want.into_iter().zip(blocks).map(|(s, (k, v))| (k, s, Some(v))).collect()
            } else {
                occupied.map(|s| (l.key(&img, s).to_vec(), s, None)).collect()
            };
            items.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, s, value) in items {
                if !below_end(&k, end) {
                    stop = true;
                    break;
                }
                if !above_start(&k, start) || last.as_ref().is_some_and(|p| k <= *p) || l.is_tombstone(&img, s) {
                    continue;
                }
                let v = match value {
                    Some(v) => v,
                    None => self.entry_value(&img, s).await?,
                };
                last = Some(k.clone());
                out.push((k, v));
                if out.len() == limit {
                    return Ok(out);
                }
            }
            let sibling = l.sibling(&img, replica);
            if stop || sibling.is_null() {
                return Ok(out);
            }
            if l.fences && !below_end(l.fences(&img, replica).1, end) {
                return Ok(out);
            }
            self.counters.event(SCAN_NEXT_LEAF);
            addr = sibling;
        }
        Err(self.retries_exhausted("scan"))
    }

    async fn do_write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.check_key(key)?;
        if let Change::Upsert(v) | Change::Update(v) = &change {
            Chime::limits(&self.o).check_value(v)?;
        }
        let node = self.node.clone();
        write_via(self, &node.rdwc, key, change).await
    }
}

impl<C: Client + Clone + 'static> Combined for ChimeHandle<C> {
    async fn search_remote(
        &mut self,
        key: &[u8],
        leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        self.search_leaf(key, leader).await
    }

    async fn modify_remote(
        &mut self,
        key: &[u8],
        changes: Vec<Change>,
        leader: Option<&mut WriteLeader<'_, Change, Reply>>,
    ) -> (Result<bool, IndexError>, Option<Vec<Result<bool, IndexError>>>) {
        // The window stays open through the traversal and the lock, then closes: the admitted
        // set decides whether the write is an insert.
        let mut pending = Pending { leader, changes };
        let outcome = self.write_leaf(key, &mut pending).await;
        let n = pending.close().len();
        let replies: Vec<Result<bool, IndexError>> = match outcome {
            Ok(results) => results.into_iter().map(Ok).collect(),
            Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
        };
        (replies[0].clone(), Some(replies))
    }

    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }
}

impl<C: Client + Clone + 'static> Index for ChimeHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.check_key(key)?;
        let node = self.node.clone();
        search_via(self, &node.rdwc, key).await
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

//! # DrTM cluster hashing, one-sided (the RACE paper's baseline)
//!
//! The RACE paper (digest `shared/digests/race.md` §5, "Baselines") compares RACE with DrTM's
//! cluster hashing re-implemented with **one-sided verbs only** (READ, WRITE, CAS; the memory
//! pool runs no index code): 8 slots per main and per overflow bucket, overflow-to-main bucket
//! ratio 3, keys and values out of the table in KV blocks. "Traverse the chain with one READ per
//! bucket; if full, lock the list (CAS), allocate and link an overflow bucket, write the item,
//! unlock. Delete compacts by moving tail items forward and recycles tail buckets." This module
//! is that baseline, written from the digest's description; the paper gives no byte layout, so
//! the layout is ours ([`layout`]).
//!
//! ## Remote layout ([`layout`])
//!
//! A superblock on memory node 0 names one region per memory node. A region holds a pool header
//! (the node's overflow counter), the node's main buckets (bucket `b` lives on node `b % m`) and
//! its pool of overflow buckets (`overflow_percent` per 100 main buckets, 300 by default: the
//! paper's ratio 3). A bucket is a header word `[lock | version | next]`, `slots` slot words
//! `[fingerprint: 8 | units: 8 | offset: 48]` (RACE's slot format) and, in main buckets, a copy
//! of the version. A chain — its main bucket, its overflow buckets and its items' KV blocks —
//! lives on one memory node, so every verb of an operation goes to one QP.
//!
//! **Items are packed.** A chain's items occupy its positions `0..n` (slot order, bucket by
//! bucket) with no hole: inserts append at position `n`, and a delete moves the tail item into
//! the hole it leaves (DrTM's compaction). A reader can therefore stop at the first empty slot.
//!
//! ## Operations
//!
//! - **search** — lock-free. READ the main bucket; for each bucket, one doorbell batch READs the
//!   KV blocks of the slots whose fingerprint matches together with the next bucket (same node),
//!   until a full key matches (return its value), or an empty slot or the chain's end. A found
//!   value is linearizable at the READ of its slot word: a slot word naming a block of key `k`
//!   always names `k`'s current value (blocks are written before they are published and never
//!   rewritten; the tail copy a move leaves for an instant names the same block). A miss needs
//!   more, because a delete moves the tail item forward, past a reader that already read the
//!   earlier bucket: the reader requires the main bucket's version to be even (no move under way)
//!   and equal in both 64-byte units of its READ, and, after the last bucket, READs the header
//!   again (riding the batch of the last KV-block READs when there is one) and retries if the
//!   version moved. Between the two samples no item moved, and then a present key stays in one
//!   slot that the traversal reads. 1 RTT per bucket (+1 for a fingerprint match in the last
//!   bucket, or for a miss).
//! - **insert (upsert) / update / delete** — lock the chain: one doorbell batch
//!   `[masked CAS of the main header's lock bit, READ main bucket]` (on one QP the READ sees the
//!   CAS; with emulated masked atomics the CAS goes alone, then the READ). Read the rest of the
//!   chain up to the first empty slot, one READ per bucket, with the fingerprint matches' KV
//!   blocks in the same batches, then act and unlock in one final batch whose WRITEs a QP places
//!   in order (block before slot before unlock):
//!   - the key exists (upsert, update): WRITE a new KV block, WRITE the slot word, unlock. The
//!     new block is carved from the compute node's chunk of the chain's memory node before
//!     locking; updates are out of place.
//!   - a new key: WRITE the block and the slot word at position `n`. If the chain is full, FAA the
//!     node's overflow counter (index ≥ the pool's size: [`IndexError::Full`]), WRITE the item
//!     into the new bucket and link it from the tail's header (the main bucket's link rides the
//!     unlock word).
//!   - delete of the tail item: WRITE its slot to 0. Of another item: WRITE the header with an
//!     odd version and its copy, WRITE the tail's word over the deleted slot, clear the tail
//!     slot, WRITE the copy and the header with the next even version, unlocked.
//!   - absent key (update, delete): unlock.
//! - **scan** — unsupported (a hash table has no order).
//!
//! ## Deviations from the baseline as the paper describes it
//!
//! - **Tail buckets are recycled within their chain, not across chains.** An overflow bucket
//!   that compaction empties stays linked and takes the chain's next inserts; DrTM returns it to
//!   a free list. A shared one-sided free list needs an ABA-safe stack and a grace period for
//!   readers still walking the unlinked bucket; the RACE paper does not say how its
//!   re-implementation did it. Consequence: a node's pool, once handed out, is never returned,
//!   so the insert-until-first-failure load factor (Fig. 12) is unaffected (no deletes there),
//!   but a delete-heavy run keeps its longest chains.
//! - **Old KV blocks are not reclaimed.** Updates and deletes leave the old block in remote
//!   memory (RACE reclaims through a quarantine after a grace period, digest D18). Without reuse
//!   no reader can see a block rewritten under it; the block checksum is kept, and a block that
//!   fails it is reported as [`IndexError::Corrupt`].
//! - **The version word** (and its copy in the main bucket's second 64-byte unit) is ours: the
//!   paper's searches are lock-free, and without it a search racing a compaction misses a present
//!   key (planted bug `no-version-check`). It relies on the default 64-byte atomicity unit;
//!   under `atomicity_bytes = 8` a miss is not validated.
//! - Slots are RACE's 8-byte words (fingerprint, length, pointer), not DrTM's 16-byte slots
//!   with the full key; buckets are 80 bytes on a 128-byte stride.
//!
//! ## Invariants ([`Cluster::check_invariants`])
//!
//! With no operation in flight: every main header unlocked with an even version equal to its
//! copy; overflow headers carry only a link; chains are acyclic, link only handed-out overflow
//! buckets of their own node, and every handed-out bucket is in exactly one chain; items are
//! packed; every slot names a valid KV block of its length whose key has the slot's fingerprint
//! and hashes to the chain; no key appears twice.
//!
//! ## Planted bugs
//!
//! - `no-lock`: writers skip the chain lock: two inserts take one position, or one key twice.
//! - `unlock-before-write`: the unlock WRITE is posted before the slot WRITEs, so the next writer
//!   reads the chain before they land and overwrites them.
//! - `no-version-check`: searches do not validate a miss against the chain version: a search
//!   that read a bucket before a delete moved the tail item into it returns a present key as
//!   absent.
//! - `in-place-value`: an upsert or update of a present key whose new block has as many units
//!   as the old one rewrites the published block in place instead of out of place. A search
//!   that READs the block across the WRITE gets units of both values; the block checksum fails
//!   and the search reports [`IndexError::Corrupt`] (a torn block is a broken invariant here).
//! - `failed-read-keeps-lock`: a writer whose `[CAS lock, READ bucket]` batch took the lock and
//!   failed at the READ (a transport error) returns with the chain locked. The fix asks
//!   [`dmkit_rdma::Verbs::post_keeping`] whether the CAS completed and won (the lock bit names no
//!   owner) and clears the bit; the preset `read-failure` finds the plant.

pub mod config;
mod invariants;
pub mod layout;
pub mod presets;

use crate::common::chunk::LocalChunkAllocator;
use crate::common::primitive::{Mutex, lock};
use crate::registry::{self, RunShape, TableShape};
use crate::{Change, Counters, Index, IndexError, IndexKind, InvariantReport, Limits, PlantedBug, RaceHandler};
pub use config::ClusterOptions;
use dmkit_rdma::{Buf, Caps, Client, CpuWork, MaskedAtomics, MemoryView, NodeId, RemoteAddr, Request};
use layout::{Block, Bucket, Header, LOCK_BIT, SlotWord, Superblock};
use rand::Rng;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

pub const FAILED_READ_KEEPS_LOCK: PlantedBug = PlantedBug {
    name: "failed-read-keeps-lock",
    description: "a writer whose [CAS lock, READ bucket] batch took the lock and then failed its READ returns with the chain locked: no writer can lock it again",
};
pub const NO_LOCK: PlantedBug = PlantedBug {
    name: "no-lock",
    description: "writers skip the chain lock: concurrent inserts take one slot or store one key twice, and links are lost",
};
pub const UNLOCK_BEFORE_WRITE: PlantedBug = PlantedBug {
    name: "unlock-before-write",
    description: "the unlock is posted before the slot WRITEs: the next writer reads the chain before they land and overwrites them",
};
pub const NO_VERSION_CHECK: PlantedBug = PlantedBug {
    name: "no-version-check",
    description: "a search's miss is not validated against the chain version: a delete that moves the tail item forward hides a present key",
};
pub const IN_PLACE_VALUE: PlantedBug = PlantedBug {
    name: "in-place-value",
    description: "an update rewrites the key's published KV block in place: a search reads it torn (its checksum fails and the search reports corruption)",
};
const PLANTS: [PlantedBug; 5] =
    [FAILED_READ_KEEPS_LOCK, NO_LOCK, UNLOCK_BEFORE_WRITE, NO_VERSION_CHECK, IN_PLACE_VALUE];

/// A fingerprint match whose KV block holds another key.
pub const FP_COLLISION: &str = "fp_collision";
/// An insert that found its chain full and no overflow bucket left on its node (`Full`).
pub const FULL: &str = "full";
/// An insert that linked a fresh overflow bucket to its full chain.
pub const OVERFLOW_LINKED: &str = "overflow_linked";
/// A delete of its chain's last item (cleared in place).
pub const DELETE_TAIL: &str = "delete_tail";
/// A delete that moved its chain's last item into the hole it left.
pub const DELETE_MOVED: &str = "delete_moved";
/// Node counter: chunks the compute node's allocator installed.
pub const CHUNKS: &str = "chunks";
/// A search's READ of the main bucket saw an odd version: a delete is moving an item.
pub const SEARCH_SAW_MOVE: &str = "search_saw_move";
/// A search's READ of the main bucket saw an even version whose copy differs.
pub const SEARCH_TORN_VERSION: &str = "search_torn_version";
/// A search's miss found the version changed since the traversal began.
pub const SEARCH_REVALIDATED: &str = "search_revalidated";
/// A writer's lock CAS won and the READ batched with it failed: it releases the lock.
pub const UNLOCK_AFTER_FAILED_READ: &str = "unlock_after_failed_read";

const RACE_HANDLERS: [RaceHandler; 5] = [
    RaceHandler {
        event: Counters::LOCK_FAILURES,
        race: "a writer's lock CAS found the chain locked by another writer: it backs off and retries",
    },
    RaceHandler {
        event: SEARCH_SAW_MOVE,
        race: "a search read the main bucket while a delete moved the tail item forward (odd version): it backs off and reads again",
    },
    RaceHandler {
        event: SEARCH_TORN_VERSION,
        race: "a search's READ sampled the header and its copy on either side of a delete's version WRITEs: a move may have passed its traversal unseen; it reads again",
    },
    RaceHandler {
        event: SEARCH_REVALIDATED,
        race: "a search's miss: a delete moved the tail item past the traversal (the version changed between the two samples), so the key may be present; it reads again",
    },
    RaceHandler {
        event: UNLOCK_AFTER_FAILED_READ,
        race: "(fault) a writer's lock CAS won and the READ batched with it failed: it releases the lock before reporting the failure, else the chain stays locked",
    },
];

/// The state one compute node's clients share: the superblock and the KV-block chunks.
#[derive(Debug)]
pub struct ClusterNode {
    superblock: Mutex<Option<Arc<Superblock>>>,
    chunks: LocalChunkAllocator,
}

impl ClusterNode {
    fn cached(&self) -> Option<Arc<Superblock>> {
        lock(&self.superblock).clone()
    }

    fn fill(&self, sb: Superblock) -> Arc<Superblock> {
        lock(&self.superblock).get_or_insert_with(|| Arc::new(sb)).clone()
    }

    fn bytes(&self) -> u64 {
        self.cached().map_or(0, |sb| sb.encode().len() as u64) + self.chunks.bytes()
    }
}

/// DrTM cluster hashing's [`IndexKind`].
#[derive(Debug)]
pub struct Cluster;

/// One client's handle.
#[derive(Debug)]
pub struct ClusterHandle<C> {
    o: ClusterOptions,
    node: Arc<ClusterNode>,
    ctx: C,
    counters: Counters,
}

impl IndexKind for Cluster {
    const NAME: &'static str = "cluster";
    /// `dmkit bench-load --keys 10000000`, 2026-11-27 (README, Benchmarks).
    const HOST_BYTES_PER_ITEM: u64 = 85;
    const SUPPORTS_SCAN: bool = false;
    type Options = ClusterOptions;
    type NodeState = ClusterNode;
    type Handle<C: Client + Clone + 'static> = ClusterHandle<C>;

    fn limits(o: &ClusterOptions) -> Limits {
        Limits {
            min_key_bytes: 1,
            max_key_bytes: o.key_bytes as usize,
            min_value_bytes: 0,
            max_value_bytes: o.value_bytes as usize,
        }
    }

    fn validate(o: &ClusterOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(ClusterOptions, String), String> {
        if shape.cache_bytes.is_some() {
            return Err(registry::no_cache_budget(Self::NAME, "has no compute-node cache"));
        }
        if config != "default" {
            return Err(registry::no_configuration(Self::NAME, config, &["default"]));
        }
        // The paper's geometry (8 slots, overflow ratio 3), sized like the RACE paper's tables
        // for the run's items: 75% of all slots (main and overflow) full when they are all in.
        let options = ClusterOptions {
            main_buckets: (shape.items as f64 / (8.0 * 4.0 * 0.75)).ceil().max(1.0) as u64,
            key_bytes: shape.key_bytes.max(8) as u32,
            value_bytes: shape.value_bytes.max(1) as u32,
            memory_nodes: shape.memory_nodes,
            ..ClusterOptions::default()
        };
        options.validate().map_err(|e| format!("index {}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn fixed_table(t: &TableShape) -> Option<Result<ClusterOptions, String>> {
        let options = ClusterOptions {
            main_buckets: t.size,
            slots_per_bucket: t.slots.unwrap_or(8),
            key_bytes: t.key_bytes as u32,
            value_bytes: t.value_bytes as u32,
            ..ClusterOptions::default()
        };
        Some(options.validate().map(|()| options))
    }

    async fn create<C: Client>(o: &ClusterOptions, ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)?;
        let mut sb = Superblock {
            main_buckets: o.main_buckets,
            slots: o.slots_per_bucket,
            overflow_percent: o.overflow_percent,
            key_bytes: o.key_bytes,
            value_bytes: o.value_bytes,
            regions: vec![RemoteAddr::NULL; o.memory_nodes as usize],
        };
        for i in 0..o.memory_nodes as usize {
            let bytes = layout::region_bytes(sb.slots, sb.main_on(i), sb.overflow_on(i));
            // Fresh memory is zero: empty buckets, versions 0, the overflow counter 0.
            sb.regions[i] = dmkit_rdma::alloc::alloc(ctx, NodeId(i as u16), bytes, 4096).await?;
        }
        ctx.write(layout::superblock_addr(), Buf::from(sb.encode())).await?;
        Ok(())
    }

    fn node_state(o: &ClusterOptions, _: &Caps) -> ClusterNode {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        ClusterNode { superblock: Mutex::new(None), chunks }
    }

    fn inherit(node: &ClusterNode, loader: &ClusterNode) {
        node.chunks.inherit(&loader.chunks);
    }

    fn node_state_bytes(node: &ClusterNode) -> u64 {
        node.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &ClusterOptions, node: Arc<ClusterNode>, ctx: C) -> ClusterHandle<C> {
        ClusterHandle { o: o.clone(), node, ctx, counters: Counters::default() }
    }

    fn check_invariants(o: &ClusterOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::walk(o, memory)
    }

    fn node_counters(node: &ClusterNode) -> BTreeMap<&'static str, u64> {
        let a = node.chunks.account();
        BTreeMap::from([(CHUNKS, a.chunks)])
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn plant(o: &mut ClusterOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "the cluster index", bug)?);
        Ok(())
    }
}

/// A chain as a writer (or a reader) read it: bucket addresses and images, the items in
/// position order, the first empty position.
struct Chain {
    buckets: Vec<(RemoteAddr, Bucket)>,
    /// (bucket, slot, word) of every item, in position order.
    items: Vec<(usize, usize, u64)>,
    first_empty: Option<(usize, usize)>,
}

impl<C: Client + Clone + 'static> ClusterHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    fn limits(&self) -> Limits {
        Cluster::limits(&self.o)
    }

    /// The superblock, from the node's cache or (once per node) from remote memory.
    async fn superblock(&self) -> Result<Arc<Superblock>, IndexError> {
        self.ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
        if let Some(sb) = self.node.cached() {
            return Ok(sb);
        }
        let len = layout::superblock_bytes(self.o.memory_nodes as usize);
        let raw = self.ctx.read(layout::superblock_addr(), Buf::zeroed(len)).await?;
        let sb = Superblock::decode(&raw).map_err(IndexError::Corrupt)?;
        Ok(self.node.fill(sb))
    }

    /// Waits a random, growing time (bounded exponential backoff).
    async fn back_off(&mut self, attempt: u32) {
        self.counters.retries += 1;
        let cap = 100u64 << attempt.min(6);
        let ns = self.ctx.with_rng(|r| r.random_range(0..=cap));
        self.ctx.sleep(ns).await;
    }

    /// The key's chain: main bucket number, its node index, fingerprint.
    async fn locate(&self, sb: &Superblock, key: &[u8]) -> (u64, usize, u8) {
        self.ctx.charge_cpu(CpuWork::HashByte, 2 * key.len() as u64).await;
        let b = sb.bucket_of(key);
        let node = sb.node_of(b);
        assert!(b < sb.main_buckets, "main bucket {b} outside the table's {}", sb.main_buckets);
        assert!(node < sb.regions.len(), "node {node} outside the superblock's {} regions", sb.regions.len());
        (b, node, layout::fingerprint(key))
    }

    /// Decodes the KV block of a fingerprint match; `Ok(Some(value))` if it holds `key`.
    async fn match_block(&mut self, bytes: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.ctx.charge_cpu(CpuWork::ChecksumByte, bytes.len() as u64).await;
        match layout::decode_block(bytes) {
            Block::Item { key: k, value } if k == key => Ok(Some(value)),
            Block::Item { .. } => {
                self.counters.event(FP_COLLISION);
                Ok(None)
            }
            // Blocks are written before they are published and never rewritten or freed.
            Block::Invalid => Err(IndexError::Corrupt("a slot names an invalid KV block".into())),
        }
    }

    /// Items of `bucket` (up to its first empty slot) appended to `chain`; the fingerprint
    /// matches among them, as (slot, block address, block bytes).
    async fn scan_bucket(
        &self,
        sb: &Superblock,
        node: usize,
        fp: u8,
        chain: &mut Chain,
    ) -> Result<Vec<(RemoteAddr, usize)>, IndexError> {
        let at = chain.buckets.len() - 1;
        assert_eq!(chain.buckets[at].1.slots.len(), sb.slots as usize, "a bucket image has the table's slots");
        let mut matches = Vec::new();
        self.ctx.charge_cpu(CpuWork::NodeSearchEntry, sb.slots as u64).await;
        for (s, &word) in chain.buckets[at].1.slots.iter().enumerate() {
            if chain.first_empty.is_some() {
                break;
            }
            match SlotWord::decode(word) {
                None => chain.first_empty = Some((at, s)),
                Some(slot) => {
                    chain.items.push((at, s, word));
                    if slot.fp == fp {
                        let addr = sb.block_addr(node, slot).ok_or_else(|| {
                            IndexError::Corrupt(format!("slot word {word:#x} names a block out of range"))
                        })?;
                        matches.push((addr, slot.block_bytes()));
                    }
                }
            }
        }
        Ok(matches)
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.limits().check_key(key)?;
        let sb = self.superblock().await?;
        let (b, node, fp) = self.locate(&sb, key).await;
        let main = sb.main_addr(b);
        let validate = !self.planted(NO_VERSION_CHECK);
        let max_hops = sb.overflow_on(node) + 1;
        'attempt: for attempt in 0..self.o.max_retries {
            let image = self.ctx.read(main, Buf::zeroed(sb.bucket_bytes())).await?;
            assert_eq!(image.len(), sb.bucket_bytes(), "a READ returns the bytes asked");
            let first = Bucket::decode(&sb, &image);
            let version = first.header.version;
            if validate && (version % 2 != 0 || first.copy != version) {
                // A delete is moving an item in this chain, or the READ saw both sides of one.
                self.counters.event(if version % 2 != 0 { SEARCH_SAW_MOVE } else { SEARCH_TORN_VERSION });
                self.back_off(attempt.min(3)).await;
                continue;
            }
            let mut chain = Chain { buckets: vec![(main, first)], items: Vec::new(), first_empty: None };
            loop {
                let matches = self.scan_bucket(&sb, node, fp, &mut chain).await?;
                let next = chain.buckets.last().expect("a bucket").1.header.next;
                let ended = chain.first_empty.is_some() || next == 0;
                let mut batch: Vec<Request> = matches.iter().map(|&(a, len)| Request::read_len(a, len)).collect();
                if !ended {
                    let at = sb.overflow_addr(node, next as u64 - 1);
                    batch.push(Request::read_len(at, sb.bucket_bytes()));
                } else if validate {
                    // The header again, after every slot was sampled (the previous batch
                    // completed): a miss holds only if no item moved meanwhile.
                    batch.push(Request::read_len(main, 8));
                }
                let mut responses = if batch.is_empty() { Vec::new() } else { self.ctx.post(batch).await? };
                let tail = (responses.len() > matches.len()).then(|| responses.pop().expect("a response"));
                for r in responses {
                    let bytes = r.into_buf()?;
                    if let Some(value) = self.match_block(&bytes, key).await? {
                        return Ok(Some(value));
                    }
                }
                if ended {
                    if let Some(r) = tail {
                        let now = Header::decode(r.into_buf()?.u64_at(0));
                        if now.version != version {
                            self.counters.event(SEARCH_REVALIDATED);
                            self.back_off(attempt.min(3)).await;
                            continue 'attempt;
                        }
                    }
                    return Ok(None);
                }
                if chain.buckets.len() as u64 > max_hops {
                    // Not a race: a link is written once, to a bucket the FAA handed out to this
                    // chain alone, and never changes (emptied buckets stay linked), so every
                    // chain is acyclic at every instant and a traversal follows a prefix of it.
                    return Err(IndexError::Corrupt(format!("chain {b} has a cycle")));
                }
                let image = tail.expect("the next bucket").into_buf()?;
                let at = sb.overflow_addr(node, next as u64 - 1);
                chain.buckets.push((at, Bucket::decode(&sb, &image)));
            }
        }
        Err(IndexError::RetriesExhausted { op: "search", retries: self.o.max_retries })
    }

    /// Takes the chain's lock and reads its main bucket; `None` if the lock was held.
    async fn lock_and_read(&mut self, main: RemoteAddr, len: usize) -> Result<Option<Buf>, IndexError> {
        if self.planted(NO_LOCK) {
            return Ok(Some(self.ctx.read(main, Buf::zeroed(len)).await?));
        }
        let old = if self.ctx.caps().masked_atomics == MaskedAtomics::Native {
            // On one QP the READ sees the CAS: if it won, the image is the locked one.
            let done = self
                .ctx
                .post_keeping(vec![
                    Request::masked_cas(main, 0, LOCK_BIT, LOCK_BIT, LOCK_BIT),
                    Request::read_len(main, len),
                ])
                .await;
            if let Some(e) = done.error {
                // The READ failed (a transport error): if the CAS before it took the lock,
                // release it, or the chain stays locked for good. The bit names no owner, so
                // only the CAS's own answer says whether the lock is ours.
                let won = done.completed.first().and_then(|r| r.atomic().ok()).is_some_and(|old| old & LOCK_BIT == 0);
                if won {
                    self.release_lock(main).await;
                }
                return Err(e.into());
            }
            let mut r = done.completed;
            let image = r.pop().expect("a READ response").into_buf()?;
            let old = r.pop().expect("a CAS response").atomic()?;
            if old & LOCK_BIT == 0 {
                return Ok(Some(image));
            }
            old
        } else {
            let old = self.ctx.masked_cas(main, 0, LOCK_BIT, LOCK_BIT, LOCK_BIT).await?;
            if old & LOCK_BIT == 0 {
                return match self.ctx.read(main, Buf::zeroed(len)).await {
                    Ok(image) => Ok(Some(image)),
                    Err(e) => {
                        self.release_lock(main).await;
                        Err(e.into())
                    }
                };
            }
            old
        };
        debug_assert!(old & LOCK_BIT != 0);
        self.counters.lock_failures += 1;
        self.counters.cas_failures += 1;
        Ok(None)
    }

    /// Clears the lock bit of a chain this client locked and then could not read, leaving the
    /// version and link as they are. Best effort: the operation reports its failure anyway.
    async fn release_lock(&mut self, main: RemoteAddr) {
        if self.planted(FAILED_READ_KEEPS_LOCK) {
            return;
        }
        self.counters.event(UNLOCK_AFTER_FAILED_READ);
        let _ = self.ctx.masked_cas(main, LOCK_BIT, LOCK_BIT, 0, LOCK_BIT).await;
    }

    /// Gives an unpublished KV block back to the compute node's chunks.
    fn give_back(&self, block: &Option<(RemoteAddr, Vec<u8>, u64)>) {
        if let Some((at, bytes, _)) = block {
            let _ = self.node.chunks.free(*at, bytes.len() as u64);
        }
    }

    /// The header word a writer leaves (unlocked).
    fn unlock_word(header: Header) -> Vec<u8> {
        Header { locked: false, ..header }.encode().to_le_bytes().to_vec()
    }

    /// Posts the final batch: `writes` in order, then the unlock (first, with the planted bug).
    async fn finish(&mut self, main: RemoteAddr, header: Header, writes: Vec<Request>) -> Result<(), IndexError> {
        let unlock = Request::write(main, Self::unlock_word(header));
        let batch = if self.planted(UNLOCK_BEFORE_WRITE) {
            // The plant moves the unlock first (and drops the odd-version header WRITE, which
            // would lock the chain again).
            let mut b = vec![unlock];
            b.extend(writes.into_iter().filter(|r| r.addr != main));
            b
        } else {
            let mut b = writes;
            b.push(unlock);
            b
        };
        self.ctx.post(batch).await?;
        Ok(())
    }

    /// Locks the key's chain, reads it, applies `change`, writes and unlocks. Returns whether the
    /// key existed.
    async fn apply(&mut self, key: &[u8], change: &Change) -> Result<bool, IndexError> {
        self.limits().check_key(key)?;
        if let Change::Upsert(v) | Change::Update(v) = change {
            self.limits().check_value(v)?;
        }
        let sb = self.superblock().await?;
        let (b, node, fp) = self.locate(&sb, key).await;
        let main = sb.main_addr(b);
        let node_id = sb.regions[node].node();
        // The new KV block, carved before locking (out of place: never published until the slot
        // WRITE, so it can be given back if the operation does not use it).
        let block = match change {
            Change::Upsert(v) | Change::Update(v) => {
                let bytes = layout::encode_block(key, v);
                self.ctx.charge_cpu(CpuWork::ChecksumByte, bytes.len() as u64).await;
                let at = self.node.chunks.alloc_on(&self.ctx, node_id, bytes.len() as u64, 64).await?;
                assert!(at.node() == node_id && at.offset() % 64 == 0, "a block allocated where asked: {at}");
                let units = (bytes.len() / layout::BLOCK_UNIT) as u8;
                // encode_block pads to whole units, at most MAX_BLOCK_UNITS (255: fits the byte).
                assert_eq!(bytes.len(), units as usize * layout::BLOCK_UNIT, "a block of whole units");
                let slot = SlotWord { fp, units, offset: at.offset() };
                let word = slot.encode();
                assert_eq!(SlotWord::decode(word), Some(slot), "a slot word decodes to what was encoded");
                Some((at, bytes, word))
            }
            Change::Delete => None,
        };
        let locking = !self.planted(NO_LOCK);
        let max_hops = sb.overflow_on(node) + 1;
        for attempt in 0..self.o.max_retries {
            let Some(image) = self.lock_and_read(main, sb.bucket_bytes()).await? else {
                self.back_off(attempt).await;
                continue;
            };
            assert_eq!(image.len(), sb.bucket_bytes(), "a READ returns the bytes asked");
            let mut header = Bucket::decode(&sb, &image).header;
            // The image was read after this client's CAS set the bit (same QP), and only the
            // holder clears it: the header a writer releases is locked, by this client.
            assert!(!locking || header.locked, "a chain this client locked reads unlocked");
            if !locking {
                header.locked = false;
            }
            let mut chain =
                Chain { buckets: vec![(main, Bucket::decode(&sb, &image))], items: Vec::new(), first_empty: None };
            let mut found: Option<usize> = None;
            // Read the chain up to its first empty slot (a delete needs the tail; others stop
            // once the key is found).
            let outcome: Result<(), IndexError> = async {
                loop {
                    let before = chain.items.len();
                    let matches = self.scan_bucket(&sb, node, fp, &mut chain).await?;
                    let next = chain.buckets.last().expect("a bucket").1.header.next;
                    let more = chain.first_empty.is_none() && next != 0;
                    let positions: Vec<usize> = (before..chain.items.len())
                        .filter(|&p| SlotWord::decode(chain.items[p].2).is_some_and(|s| s.fp == fp))
                        .collect();
                    let mut batch: Vec<Request> = matches.iter().map(|&(a, len)| Request::read_len(a, len)).collect();
                    let follow = more && (found.is_none() || matches!(change, Change::Delete));
                    if follow {
                        if chain.buckets.len() as u64 > max_hops {
                            return Err(IndexError::Corrupt(format!("chain {b} has a cycle")));
                        }
                        batch.push(Request::read_len(sb.overflow_addr(node, next as u64 - 1), sb.bucket_bytes()));
                    }
                    let mut responses = if batch.is_empty() { Vec::new() } else { self.ctx.post(batch).await? };
                    let next_image = follow.then(|| responses.pop().expect("the next bucket"));
                    for (r, p) in responses.into_iter().zip(positions) {
                        let bytes = r.into_buf()?;
                        if found.is_none() && self.match_block(&bytes, key).await?.is_some() {
                            found = Some(p);
                        }
                    }
                    match next_image {
                        Some(r) => {
                            let img = r.into_buf()?;
                            chain.buckets.push((sb.overflow_addr(node, next as u64 - 1), Bucket::decode(&sb, &img)));
                        }
                        None => return Ok(()),
                    }
                }
            }
            .await;
            if let Err(e) = outcome {
                self.give_back(&block);
                if locking {
                    self.ctx.post(vec![Request::write(main, Self::unlock_word(header))]).await?;
                }
                return Err(e);
            }
            let slot_addr = |chain: &Chain, (bucket, slot): (usize, usize)| {
                assert!(slot < sb.slots as usize, "slot {slot} outside the bucket's {}", sb.slots);
                chain.buckets[bucket].0.add(sb.slot_offset(slot) as u64)
            };
            let word_bytes = |w: u64| w.to_le_bytes().to_vec();
            match (change, found) {
                (Change::Upsert(_) | Change::Update(_), Some(p)) => {
                    let (at, bytes, word) = block.clone().expect("a block for a write");
                    let (bi, si, old) = chain.items[p];
                    let old = SlotWord::decode(old).expect("an item");
                    if self.planted(IN_PLACE_VALUE) && old.units as u64 * 64 == bytes.len() as u64 {
                        // The plant: rewrite the published block where it is.
                        self.give_back(&block);
                        let old_at = sb.block_addr(node, old).expect("checked when it was read");
                        self.finish(main, header, vec![Request::write(old_at, bytes)]).await?;
                        return Ok(true);
                    }
                    let writes =
                        vec![Request::write(at, bytes), Request::write(slot_addr(&chain, (bi, si)), word_bytes(word))];
                    self.finish(main, header, writes).await?;
                    return Ok(true);
                }
                (Change::Update(_), None) => {
                    self.give_back(&block);
                    self.finish(main, header, Vec::new()).await?;
                    return Ok(false);
                }
                (Change::Delete, None) => {
                    self.finish(main, header, Vec::new()).await?;
                    return Ok(false);
                }
                (Change::Upsert(_), None) => {
                    let (at, bytes, word) = block.clone().expect("a block for a write");
                    if let Some(pos) = chain.first_empty {
                        let writes =
                            vec![Request::write(at, bytes), Request::write(slot_addr(&chain, pos), word_bytes(word))];
                        self.finish(main, header, writes).await?;
                        return Ok(false);
                    }
                    // The chain is full: hand out an overflow bucket and link it.
                    let index = self.ctx.faa(sb.pool_counter_addr(node), 1).await?;
                    if index >= sb.overflow_on(node) {
                        self.counters.event(FULL);
                        self.give_back(&block);
                        self.finish(main, header, Vec::new()).await?;
                        return Err(IndexError::Full);
                    }
                    self.counters.event(OVERFLOW_LINKED);
                    let fresh = sb.overflow_addr(node, index);
                    let link = index as u32 + 1;
                    let mut writes = vec![
                        Request::write(at, bytes),
                        Request::write(fresh.add(sb.slot_offset(0) as u64), word_bytes(word)),
                    ];
                    let (tail_addr, tail) = chain.buckets.last().expect("a bucket");
                    if chain.buckets.len() == 1 {
                        header.next = link;
                    } else {
                        let h = Header { next: link, ..tail.header };
                        writes.push(Request::write(*tail_addr, word_bytes(h.encode())));
                    }
                    self.finish(main, header, writes).await?;
                    return Ok(false);
                }
                (Change::Delete, Some(p)) => {
                    let last = chain.items.len() - 1;
                    let (bi, si, _) = chain.items[p];
                    let hole = slot_addr(&chain, (bi, si));
                    if p == last {
                        self.counters.event(DELETE_TAIL);
                        self.finish(main, header, vec![Request::write(hole, word_bytes(0))]).await?;
                        return Ok(true);
                    }
                    // Move the tail item into the hole between an odd and the next even version.
                    self.counters.event(DELETE_MOVED);
                    let (tb, ts, tail_word) = chain.items[last];
                    let odd = Header { version: Header::version_plus(header.version, 1), ..header };
                    let even = Header { version: Header::version_plus(header.version, 2), ..header };
                    let copy = main.add(sb.copy_offset() as u64);
                    let writes = vec![
                        Request::write(main, word_bytes(odd.encode())),
                        Request::write(copy, word_bytes(odd.version as u64)),
                        Request::write(hole, word_bytes(tail_word)),
                        Request::write(slot_addr(&chain, (tb, ts)), word_bytes(0)),
                        Request::write(copy, word_bytes(even.version as u64)),
                    ];
                    self.finish(main, even, writes).await?;
                    return Ok(true);
                }
            }
        }
        self.give_back(&block);
        Err(IndexError::RetriesExhausted { op: change.op(), retries: self.o.max_retries })
    }
}

impl<C: Client + Clone + 'static> Index for ClusterHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.do_search(key).await
    }

    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.apply(key, &change).await
    }

    async fn scan(&mut self, _: Bound<&[u8]>, _: Bound<&[u8]>, _: usize) -> Result<crate::Pairs, IndexError> {
        Err(IndexError::Unsupported("scan"))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

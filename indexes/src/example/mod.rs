//! # The example index: a one-sided hash table with per-bucket locks
//!
//! Read this module to learn how a dmkit index is written. It is deliberately small, but it
//! is complete and correct under the default (weakest) memory model, and every protection it
//! relies on can be removed by name to watch the checkers catch the bug.
//!
//! ## Remote layout ([`layout`])
//!
//! A superblock at a fixed address on memory node 0 describes an array of buckets spread
//! round-robin over the memory nodes. A bucket is a lock word followed by `slots` fixed-size
//! slots; a slot holds one key and its value, their lengths, and a checksum.
//!
//! ## Compute-node state ([`cache`])
//!
//! Each compute node caches the superblock (one READ per node, not per operation). Its clients
//! share it; its bytes are accounted.
//!
//! ## Operations (each checks the key and value against [`Limits`] first)
//!
//! - **search** — READ the whole bucket, lock-free. Each slot is decoded and its checksum
//!   verified: a slot whose units were read across a concurrent WRITE fails the checksum and the
//!   bucket is read again. A key lives in at most one slot of its bucket and a slot is read
//!   whole, so search is linearizable per key. 1 round trip.
//! - **insert / update / delete** — one method, [`Index::write`], told which by a [`Change`]
//!   (the trait supplies `insert`, `update` and `delete` from it). One doorbell batch
//!   `[CAS lock 0 → me, READ bucket]`: on one QP a READ after an RMW sees it, so the bucket is
//!   read after the lock is taken. If the CAS failed, back off and retry. Otherwise find the key
//!   (or a free slot), then one batch `[WRITE slot, WRITE lock = 0]`: on one QP a WRITE is
//!   placed after the earlier WRITE, so no one can take the lock before the slot is written.
//!   2 round trips.
//! - **scan** — unsupported (a hash table has no order).
//!
//! ## Invariants ([`Example::check_invariants`])
//!
//! With no operation in flight: every lock word is 0; every non-empty slot has valid lengths and
//! checksum and holds a key that hashes to its bucket; no key appears twice in a bucket.
//!
//! ## Planted bugs
//!
//! - `no-lock`: writers skip the bucket lock. Two writers can pick the same free slot, or both
//!   insert one key into two slots: an acknowledged insert is lost, or a deleted key reappears.
//! - `unlock-before-write`: the unlock WRITE goes before the slot WRITE in the batch, so the next
//!   writer can read the bucket before this write lands and overwrite it.
//! - `no-checksum`: search trusts what it read, so a torn slot returns a value no one wrote.

pub mod cache;
pub mod config;
mod invariants;
pub mod layout;
pub mod presets;

use crate::registry::{self, RunShape};
use crate::{Change, Counters, Index, IndexError, IndexKind, InvariantReport, Limits, PlantedBug, RaceHandler};
use cache::NodeCache;
pub use config::ExampleOptions;
use dmkit_rdma::{Buf, Caps, Client, CpuWork, MemoryView, Request};
use layout::{Slot, Superblock};
use rand::Rng;
use std::ops::Bound;
use std::sync::Arc;

/// A search read a slot torn by a concurrent WRITE (its checksum failed) and reads again.
pub const TORN_SEARCH: &str = "torn_search";

const RACE_HANDLERS: [RaceHandler; 2] = [
    RaceHandler {
        event: Counters::LOCK_FAILURES,
        race: "a writer's lock CAS found the bucket locked by another writer: it backs off and retries",
    },
    RaceHandler {
        event: TORN_SEARCH,
        race: "a search read a slot while a writer's WRITE was landing (checksum mismatch): it reads the bucket again",
    },
];

pub const NO_LOCK: PlantedBug = PlantedBug {
    name: "no-lock",
    description: "writers skip the bucket lock: concurrent writers overwrite each other's slots or duplicate a key",
};
pub const UNLOCK_BEFORE_WRITE: PlantedBug = PlantedBug {
    name: "unlock-before-write",
    description: "the unlock is posted before the slot WRITE: the next writer reads the bucket before the write lands",
};
pub const NO_CHECKSUM: PlantedBug = PlantedBug {
    name: "no-checksum",
    description: "search does not verify slot checksums: a torn slot returns a value nobody wrote",
};
const PLANTS: [PlantedBug; 3] = [NO_LOCK, UNLOCK_BEFORE_WRITE, NO_CHECKSUM];

/// The example hash table's [`IndexKind`].
#[derive(Debug)]
pub struct Example;

/// One client's handle.
#[derive(Debug)]
pub struct ExampleHandle<C> {
    options: ExampleOptions,
    node: Arc<NodeCache>,
    ctx: C,
    /// The lock word this client writes: its client id + 1 (never 0).
    me: u64,
    counters: Counters,
}

impl IndexKind for Example {
    const NAME: &'static str = "example";
    /// `dmkit bench-load --keys 10000000`, 2026-11-27 (README, Benchmarks).
    const HOST_BYTES_PER_ITEM: u64 = 84;
    const SUPPORTS_SCAN: bool = false;
    type Options = ExampleOptions;
    type NodeState = NodeCache;
    type Handle<C: Client + Clone + 'static> = ExampleHandle<C>;

    fn limits(o: &ExampleOptions) -> Limits {
        Limits {
            min_key_bytes: 1,
            max_key_bytes: o.max_key_bytes as usize,
            min_value_bytes: 0,
            max_value_bytes: o.max_value_bytes as usize,
        }
    }

    fn validate(o: &ExampleOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(ExampleOptions, String), String> {
        if shape.cache_bytes.is_some() {
            // Its only compute-node state is the superblock: a budget would change nothing.
            return Err(registry::no_cache_budget(Self::NAME, "has no compute-node cache"));
        }
        if config != "default" {
            return Err(registry::no_configuration(Self::NAME, config, &["default"]));
        }
        // The example table has no overflow buckets: 16 slots with 2 keys per bucket on
        // average after loading leaves room for the run's inserts (a full bucket would need
        // more than 16 of Poisson(2) keys).
        let options = ExampleOptions {
            buckets: shape.items.div_ceil(2).max(1),
            slots_per_bucket: 16,
            max_key_bytes: shape.key_bytes.max(8) as u32,
            max_value_bytes: shape.value_bytes.max(8) as u32,
            memory_nodes: shape.memory_nodes,
            ..ExampleOptions::default()
        };
        Self::validate(&options).map_err(|e| format!("index {}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    async fn create<C: Client>(o: &ExampleOptions, ctx: &C) -> Result<(), IndexError> {
        Self::validate(o).map_err(IndexError::Corrupt)?;
        let mut sb = Superblock {
            buckets: o.buckets,
            slots: o.slots_per_bucket,
            max_key_bytes: o.max_key_bytes,
            max_value_bytes: o.max_value_bytes,
            bases: Vec::new(),
        };
        let nodes = o.memory_nodes as usize;
        sb.bases = vec![dmkit_rdma::RemoteAddr::NULL; nodes];
        for i in 0..nodes {
            let bytes = sb.buckets_on(i).max(1) * sb.bucket_stride();
            sb.bases[i] = dmkit_rdma::alloc::alloc(ctx, dmkit_rdma::NodeId(i as u16), bytes, 64).await?;
        }
        ctx.write(layout::superblock_addr(), Buf::from(sb.encode())).await?;
        Ok(())
    }

    fn node_state(_: &ExampleOptions, _: &Caps) -> NodeCache {
        NodeCache::default()
    }

    fn node_state_bytes(node: &NodeCache) -> u64 {
        node.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &ExampleOptions, node: Arc<NodeCache>, ctx: C) -> ExampleHandle<C> {
        let me = ctx.identity().client as u64 + 1;
        ExampleHandle { options: o.clone(), node, ctx, me, counters: Counters::default() }
    }

    fn check_invariants(o: &ExampleOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut ExampleOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "the example index", bug)?);
        Ok(())
    }
}

impl<C: Client + Clone + 'static> ExampleHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.options.plants.contains(bug.name)
    }

    fn limits(&self) -> Limits {
        Example::limits(&self.options)
    }

    /// The superblock, from the node's cache or (once per node) from remote memory.
    async fn superblock(&self) -> Result<Arc<Superblock>, IndexError> {
        self.ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
        if let Some(sb) = self.node.get() {
            return Ok(sb);
        }
        let len = layout::superblock_bytes(self.options.memory_nodes as usize);
        let raw = self.ctx.read(layout::superblock_addr(), Buf::zeroed(len)).await?;
        let sb = Superblock::decode(&raw).map_err(IndexError::Corrupt)?;
        Ok(self.node.fill(sb))
    }

    async fn bucket_of(&self, sb: &Superblock, key: &[u8]) -> u64 {
        self.ctx.charge_cpu(CpuWork::HashByte, key.len() as u64).await;
        let b = sb.bucket_of(key);
        assert!(b < sb.buckets, "bucket {b} outside the table's {}", sb.buckets);
        b
    }

    /// Waits a random, growing time after a failed lock attempt (bounded exponential backoff).
    async fn back_off(&mut self, attempt: u32) {
        self.counters.retries += 1;
        let cap = 100u64 << attempt.min(6);
        let ns = self.ctx.with_rng(|r| r.random_range(0..=cap));
        self.ctx.sleep(ns).await;
    }

    /// Slots of a bucket image, decoded; `None` if any slot was torn.
    async fn decode_bucket(&self, sb: &Superblock, bytes: &[u8], verify: bool) -> Option<Vec<Slot>> {
        assert_eq!(bytes.len(), sb.bucket_bytes(), "a bucket image is one bucket");
        self.ctx.charge_cpu(CpuWork::ChecksumByte, if verify { bytes.len() as u64 } else { 0 }).await;
        let slots: Vec<Slot> = (0..sb.slots as usize)
            .map(|i| layout::decode_slot(sb, &bytes[sb.slot_offset(i)..sb.slot_offset(i) + sb.slot_bytes()], verify))
            .collect();
        (!slots.contains(&Slot::Torn)).then_some(slots)
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.limits().check_key(key)?;
        let sb = self.superblock().await?;
        let b = self.bucket_of(&sb, key).await;
        let verify = !self.planted(NO_CHECKSUM);
        let mut buf = Buf::zeroed(sb.bucket_bytes());
        for attempt in 0..self.options.max_retries {
            buf = self.ctx.read(sb.bucket_addr(b), buf).await?;
            match self.decode_bucket(&sb, &buf, verify).await {
                Some(slots) => {
                    return Ok(slots.into_iter().find_map(|s| match s {
                        Slot::Item { key: k, value } if k == key => Some(value),
                        _ => None,
                    }));
                }
                // A slot was read across a concurrent WRITE: read the bucket again.
                None => {
                    self.counters.event(TORN_SEARCH);
                    self.back_off(attempt.min(2)).await
                }
            }
        }
        Err(IndexError::RetriesExhausted { op: "search", retries: self.options.max_retries })
    }

    /// [`Index::write`]: locks the key's bucket, applies `change`, writes the slot and unlocks.
    /// Returns whether the key existed.
    async fn apply(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.limits().check_key(key)?;
        if let Change::Upsert(v) | Change::Update(v) = &change {
            self.limits().check_value(v)?;
        }
        let sb = self.superblock().await?;
        let b = self.bucket_of(&sb, key).await;
        // The lock word opens the bucket.
        let bucket = sb.bucket_addr(b);
        let lock = bucket;
        let locking = !self.planted(NO_LOCK);
        for attempt in 0..self.options.max_retries {
            // [CAS lock, READ bucket]: the READ runs after the CAS on this QP, so if the CAS won,
            // the image is the one no other writer can change until we unlock.
            let mut batch = Vec::with_capacity(2);
            if locking {
                batch.push(Request::cas(lock, 0, self.me));
            }
            batch.push(Request::read_len(bucket, sb.bucket_bytes()));
            let mut responses = match self.ctx.post(batch).await {
                Ok(r) => r,
                Err(e) => {
                    // A verb of the batch failed (a transport error): the CAS may have taken
                    // the lock without our learning it. Release it if it is ours (a CAS from
                    // our id back to 0 changes nothing otherwise), so one failed READ does not
                    // lock the bucket for good, then report the failure.
                    if locking {
                        let _ = self.ctx.cas(lock, self.me, 0).await;
                    }
                    return Err(e.into());
                }
            };
            let image = responses.pop().expect("a READ response").into_buf()?;
            assert_eq!(image.len(), sb.bucket_bytes(), "a READ returns the bytes asked");
            if locking {
                let old = responses.pop().expect("a CAS response").atomic()?;
                // The CAS swapped 0 for `me`, never 0 (client ids count from 1): old 0 means ours.
                assert_ne!(self.me, 0, "a lock word must name its holder");
                if old != 0 {
                    self.counters.lock_failures += 1;
                    self.counters.cas_failures += 1;
                    self.back_off(attempt).await;
                    continue;
                }
            }
            let Some(slots) = self.decode_bucket(&sb, &image, true).await else {
                if locking {
                    // Under the lock no WRITE can be in flight to this bucket: a torn image means
                    // the protocol is broken. Release the lock and report it.
                    self.ctx.post(vec![Request::write(lock, 0u64.to_le_bytes().to_vec())]).await?;
                    return Err(IndexError::Corrupt(format!("bucket {b} read torn while locked")));
                }
                // Without the lock (a planted bug) writers race: read again.
                self.back_off(attempt).await;
                continue;
            };
            let found = slots.iter().position(|s| matches!(s, Slot::Item { key: k, .. } if k == key));
            let free = slots.iter().position(|s| *s == Slot::Empty);
            let (target, bytes) = match (&change, found, free) {
                (Change::Upsert(v) | Change::Update(v), Some(i), _) => (Some(i), layout::encode_slot(&sb, key, v)),
                (Change::Upsert(v), None, Some(i)) => (Some(i), layout::encode_slot(&sb, key, v)),
                (Change::Delete, Some(i), _) => (Some(i), vec![0; sb.slot_bytes()]),
                _ => (None, Vec::new()),
            };
            if let Some(i) = target {
                assert!(i < sb.slots as usize, "slot {i} outside the bucket's {}", sb.slots);
                assert_eq!(bytes.len(), sb.slot_bytes(), "a slot write is one slot");
                if let Change::Upsert(v) | Change::Update(v) = &change {
                    debug_assert_eq!(
                        layout::decode_slot(&sb, &bytes, true),
                        Slot::Item { key: key.to_vec(), value: v.clone() },
                        "a slot decodes to what was encoded"
                    );
                }
            }
            let unlock = Request::write(lock, 0u64.to_le_bytes().to_vec());
            let mut batch = Vec::with_capacity(2);
            match target {
                Some(i) => {
                    let write = Request::write(bucket.add(sb.slot_offset(i) as u64), bytes);
                    if self.planted(UNLOCK_BEFORE_WRITE) {
                        batch.extend([unlock, write]);
                    } else {
                        // On one QP the unlock is placed after the slot WRITE.
                        batch.extend([write, unlock]);
                    }
                }
                None if locking => batch.push(unlock),
                None => {}
            }
            if !locking {
                batch.retain(|r| r.addr != lock);
            }
            if !batch.is_empty() {
                self.ctx.post(batch).await?;
            }
            return match (&change, found, target) {
                (Change::Upsert(_), None, None) => Err(IndexError::Full),
                _ => Ok(found.is_some()),
            };
        }
        Err(IndexError::RetriesExhausted { op: change.op(), retries: self.options.max_retries })
    }
}

impl<C: Client + Clone + 'static> Index for ExampleHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.do_search(key).await
    }

    /// Insert, update and delete are this one method, told which by `change` ([`Index`]'s
    /// `insert`, `update` and `delete` call it).
    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.apply(key, change).await
    }

    async fn scan(
        &mut self,
        _: Bound<&[u8]>,
        _: Bound<&[u8]>,
        _: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, IndexError> {
        Err(IndexError::Unsupported("scan"))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

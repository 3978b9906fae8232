//! # Clover (pDPM, ATC '20): HStore's other baseline, a hash index with version chains
//!
//! Built from what HStore's paper and digest say of it (§5.2: "a metadata server for
//! allocation/GC and out-of-place writes, linking per-key version chains with RDMA CAS; readers
//! may chase chains") and Clover's own design (ATC '20): the data lives in the memory pool as
//! out-of-place versions, each a block whose first word links the next version; a metadata
//! server (MS, a service on a server node — the "index server" HStore's evaluation gave each
//! baseline) maps each key to a *shortcut*, an 8-byte word in the MS's registered memory that
//! points to a recent version. Clients keep a *query cache* per key, as Clover's clients do
//! (pDPM's `mitsume_tool_query` and its local hash table): the shortcut's address and the
//! last version the client saw, the tail when it saw it.
//!
//! - **GET**: with the key cached, READ the cached version and the shortcut together, in one
//!   round trip (pDPM's `mitsume_tool_pointer_chasing` posts both before polling either): if
//!   the version's `next` is 0 it is the tail, its value the answer (absent if a tombstone).
//!   Else follow from the shortcut (when it points elsewhere) or from `next` until a version
//!   whose `next` is 0. Without the key cached: an MS call, answered with the shortcut's
//!   address and the version the shortcut names (pDPM's MS answers with the version its GC
//!   last recorded), then as if cached. So 1 round trip warm and current, an MS call and 1
//!   cold, one more per version behind.
//! - **PUT / UPDATE / DELETE**: WRITE the new version (a tombstone for a delete), then CAS the
//!   `next` of the tail the cache holds from 0 to the new version (pDPM's `mitsume_tool_write`
//!   CASes the cached entry without reading it first); on failure, follow the chain from the
//!   word the CAS returned and CAS again. Then WRITE the shortcut (unsignaled: a hint that may
//!   lag or even go back, never wrong, since every chain is append-only). 2 round trips warm.
//!   With a tail the MS named (not known to hold a value, which an update must know and an
//!   insert must report), the WRITE goes with the READs that find the
//!   tail as a GET finds it. A key the MS does not know is registered by an MS call that creates
//!   its shortcut pointing at the first version. An update or delete of a key cached as
//!   deleted reads the chain first (it must not append to an absent key).
//! - Options: `query_cache = false` (configuration `nocache`, pDPM's
//!   `MITSUME_DISABLE_LOCAL_QUERY_CACHE`) asks the MS on every operation and caches nothing.
//!
//! **Against HStore's paper** (README, HStore and Clover; `dmkit reproduce hstore fig7-clover`
//! and `fig10-clover`): built as the artifact issues its verbs, a warm Clover is about twice
//! HStore's throughput (GET p50 2.2 µs against 4.0, PUT 3.7 against 7.9 at 16 clients), where
//! the paper has HStore ahead by 14-40%. Until 2026-12-02 this module read the shortcut before
//! every version and READ the tail before every CAS (GET 2 round trips, PUT 4), which put the
//! ratios near 1. With the cache off (`nocache`) its GET ratios are met (fig7 1.04, 1.10; YCSB
//! B-D 1.03-1.05) and its write ratios are not (PUT 0.82, 0.78 against 1.4; YCSB A, F 0.96,
//! 0.99): the paper's Clover paid more on writes than this one, cache warm or off. Its writers'
//! garbage-collection traffic to the MS is not built: a writer queues each replaced version for
//! a GC thread of its compute node and waits for none of it; what it does wait for is a call to
//! the MS for 16 free blocks whenever its free list (per thread and size class) runs dry, about
//! 0.13 µs a write at this model's call price (dmkit's compute nodes carve blocks from chunks of
//! their own). The two together (the MS's filing of replaced versions, which queues its
//! lookups, and the block requests) are computed to move HStore / Clover PUT with the cache off
//! from 0.78 to about 0.88 (README, HStore and Clover), not to the paper's 1.4. The artifact's
//! shortcut WRITE comes from that GC thread too, after its batch, not from the writer at its
//! CAS as here, so its hints lag the chain longer (not run). Which cache the paper ran Clover
//! with is not stated.
//!
//! The linearization point of a write is its successful CAS (or registration); of a read, the
//! sample of `next == 0` at the tail. Versions are never reused or collected (Clover's MS
//! garbage-collects old versions; not built): chains only grow, so a stale hint is only slow.
//!
//! Block format: `[next u64][key_len u8][flags u8][val_len u16][check u32][key][value]`, padded
//! to 64 bytes; `next` is `[units:8 | addr:48]` (0: the tail); flag bit 1 marks a tombstone.

pub mod config;
mod invariants;
mod layout;
pub mod presets;

use crate::common::batch::post_per_node;
use crate::common::block::{decode_block_word, encode_block_word};
use crate::common::bytes::SmallBytes;
use crate::common::chunk::LocalChunkAllocator;
use crate::common::hash::FixedHashMap;
use crate::common::primitive::{Mutex, lock};
use crate::registry::{self, RunShape};
use crate::{
    Change, Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug, RaceHandler, Servers,
};
pub use config::CloverOptions;
use dmkit_rdma::service::{ServerCtx, Service, ServiceHost};
use dmkit_rdma::{Buf, Caps, Client, CpuWork, MemoryView, RemoteAddr, Request, VerbsError};
use layout::{SHORTCUTS_OFFSET, UNIT, Version, decode, encode};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The metadata server's service id.
pub const MS_SERVICE: u16 = 0x434c;

pub const WRITE_NEXT: PlantedBug = PlantedBug {
    name: "write-next",
    description: "a writer links its version with a WRITE instead of a CAS on the tail's next: two writers each think they appended, one version is lost",
};
pub const TRUST_SHORTCUT: PlantedBug = PlantedBug {
    name: "trust-shortcut",
    description: "a reader takes the first version it reads (the cached tail's, or the shortcut's) as the latest without following next: a stale cache or shortcut returns an old value",
};
/// Every protection, removable.
pub const PLANTS: [PlantedBug; 2] = [WRITE_NEXT, TRUST_SHORTCUT];

/// A client asked the MS for a key's shortcut slot it had not cached.
pub const MS_LOOKUP: &str = "ms_lookup";
/// A reader followed a version's `next` beyond the first version it read.
pub const CHAIN_HOP: &str = "chain_hop";
/// An insert of a key the MS did not know registered it (its version is the chain's first).
pub const REGISTERED: &str = "registered";
/// An append whose shortcut hint could not be posted (the shortcut stays stale).
pub const HINT_NOT_POSTED: &str = "hint_not_posted";
/// A shortcut pointed at a version that is no longer the tail (a writer appended after it and
/// its hint had not landed, or hints landed out of order): the reader follows `next`.
pub const STALE_HINT: &str = "stale_hint";
/// A client's cached tail, or the one the MS named, was no longer the tail (another writer
/// appended after it): a reader follows on, a writer's CAS on it fails and it follows the word
/// the CAS returned.
pub const STALE_CACHE: &str = "stale_cache";
/// A client registering a key the MS did not know found it registered by another client in
/// the meantime: it appends its version to that key's chain instead.
pub const REGISTER_LOST: &str = "register_lost";
/// Two registrations of one key interleaved inside the MS (server-side): the second publishes
/// nothing and answers like a lookup.
pub const MS_REGISTER_RACED: &str = "ms_register_raced";
/// An insert of a new key the MS refused for want of a shortcut word: its version, written but
/// never linked, goes back to the compute node's allocator and the insert answers `Full`.
pub const MS_FULL: &str = "ms_full";

const RACE_HANDLERS: [RaceHandler; 5] = [
    RaceHandler {
        event: Counters::CAS_FAILURES,
        race: "a writer's CAS on the tail's next lost to another writer's append: it follows the chain to the new tail and CASes again (without it one version is lost)",
    },
    RaceHandler {
        event: STALE_CACHE,
        race: "another writer appended after the tail a client cached: the reader follows on from the shortcut or next, the writer from the word its failed CAS returned (without it a GET returns an old value)",
    },
    RaceHandler {
        event: STALE_HINT,
        race: "the shortcut lags the chain (a writer's hint not landed yet, or hints landed out of order): the reader follows next to the tail (without it a GET returns an old value)",
    },
    RaceHandler {
        event: REGISTER_LOST,
        race: "two clients inserted a key the MS did not know: the one whose registration lost appends to the winner's chain (without it its version is never reachable)",
    },
    RaceHandler {
        event: MS_REGISTER_RACED,
        race: "two registrations of one key passed the MS's first lookup together: the second re-checks under the lock and answers with the first's shortcut (without it the key has two chains)",
    },
];

// ------------------------------------------------------------------ the metadata server

/// The MS: each key's shortcut slot, and a bump pointer over the slots.
#[derive(Debug)]
pub struct MetadataServer {
    o: CloverOptions,
    /// Keys inline (`SmallBytes`): a lookup or a rehash of millions of keys then does not chase
    /// a pointer per key.
    keys: Mutex<FixedHashMap<SmallBytes, u64>>,
    /// Shortcut slots: the next never handed out, and those a raced registration gave back.
    slots: Mutex<(u64, Vec<u64>)>,
    /// Registrations that found the key registered by a concurrent one (`MS_REGISTER_RACED`).
    register_raced: AtomicU64,
}

/// MS requests: `[0][key]` looks a key up; `[1][first version u64][key]` registers it. Replies:
/// `[0]` unknown, `[1][shortcut offset u64][the version the shortcut names u64]` known,
/// `[2][shortcut offset u64]` registered now,
/// `[3][message]` refused, `[4]` no shortcut left (`max_keys` keys registered).
impl<C: ServerCtx> Service<C> for MetadataServer {
    /// Always: a copy is never refused, so none need be made to say so.
    fn forks(&self) -> bool {
        true
    }

    /// A copy for another run from a loaded image: the key directory and the bump pointer.
    fn fork(&self) -> Option<MetadataServer> {
        Some(MetadataServer {
            o: self.o.clone(),
            keys: Mutex::new(lock(&self.keys).clone()),
            slots: Mutex::new(lock(&self.slots).clone()),
            register_raced: AtomicU64::new(0),
        })
    }

    async fn handle(self: Arc<Self>, ctx: C, request: Vec<u8>) -> Vec<u8> {
        let bad = |m: &str| [&[3u8][..], m.as_bytes()].concat();
        let Some((&tag, rest)) = request.split_first() else { return bad("empty request") };
        let (first, key) = match (tag, rest.len()) {
            (0, _) => (None, rest),
            (1, n) if n >= 8 => (Some(u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"))), &rest[8..]),
            _ => return bad("unknown request"),
        };
        if key.is_empty() || key.len() > self.o.max_key_bytes as usize {
            return bad("bad key");
        }
        ctx.charge_cpu(CpuWork::HashByte, key.len() as u64).await;
        ctx.charge_cpu(CpuWork::CacheLookupLevel, 2).await;
        let known = lock(&self.keys).get(key).copied();
        match (known, first) {
            (Some(slot), _) => return Self::known(&ctx, slot).await,
            (None, None) => return vec![0],
            (None, Some(_)) => {}
        }
        // A registration: the key is looked up again under the lock below, after the
        // shortcut is written, so a registration racing this one is found there.
        let slot = {
            let mut slots = lock(&self.slots);
            let (next, free) = &mut *slots;
            match free.pop() {
                Some(slot) => slot,
                None if *next >= self.o.max_keys => return vec![4],
                None => {
                    *next += 1;
                    SHORTCUTS_OFFSET + 8 * (*next - 1)
                }
            }
        };
        assert!(
            slot >= SHORTCUTS_OFFSET
                && (slot - SHORTCUTS_OFFSET) % 8 == 0
                && (slot - SHORTCUTS_OFFSET) / 8 < self.o.max_keys,
            "shortcut slot {slot:#x} outside the MS's {} slots",
            self.o.max_keys
        );
        // The shortcut is written before the key is published: a lookup never finds an empty
        // one. Two registrations of one key may race here; the second publishes nothing, gives
        // its slot back (unpublished, nobody reads it) and answers like a lookup.
        let first = first.expect("a registration");
        if let Err(e) = ctx.local_write(slot, Buf::from(first.to_le_bytes().to_vec())).await {
            return bad(&e.to_string());
        }
        let (slot, fresh) = {
            let mut keys = lock(&self.keys);
            match keys.get(key) {
                Some(&existing) => {
                    self.register_raced.fetch_add(1, Ordering::Relaxed);
                    lock(&self.slots).1.push(slot);
                    (existing, false)
                }
                None => {
                    keys.insert(SmallBytes::from(key), slot);
                    (slot, true)
                }
            }
        };
        if fresh { [&[2u8][..], &slot.to_le_bytes()].concat() } else { Self::known(&ctx, slot).await }
    }
}

impl MetadataServer {
    /// The answer for a key the MS knows: its shortcut's offset and the version the shortcut
    /// names now, read from the MS's own memory (pDPM's MS answers with the version its
    /// garbage collector last recorded for the key: a pointer that may lag as this one may).
    async fn known<C: ServerCtx>(ctx: &C, slot: u64) -> Vec<u8> {
        match ctx.local_read(slot, 8).await {
            Ok(b) => [&[1u8][..], &slot.to_le_bytes(), &b.u64_at(0).to_le_bytes()].concat(),
            Err(e) => [&[3u8][..], e.to_string().as_bytes()].concat(),
        }
    }
}

// ------------------------------------------------------------------ clients

/// A compute node's state: the block allocator and the query cache.
#[derive(Debug)]
pub struct CloverNode {
    chunks: LocalChunkAllocator,
    cache: Mutex<FixedHashMap<SmallBytes, Cached>>,
}

/// What a compute node's query cache holds of a key: the shortcut word's offset in the MS's
/// memory, whose two low bits (an offset is 8-aligned) say whether the cached tail is a
/// tombstone (bit 0) and whether that is known (bit 1 set: not known, a tail the MS named),
/// and the block word of the last version this node saw (or the MS named) as the tail. 16 bytes: a
/// 10 M-key cache on each of 8 compute nodes is a host-memory matter (`cache_host_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cached {
    slot_tomb: u64,
    tail: u64,
}

impl Cached {
    /// `tomb`: whether the tail is a tombstone, if known.
    fn new(slot: u64, tail: u64, tomb: Option<bool>) -> Cached {
        assert_eq!(slot % 8, 0, "a shortcut word is 8-aligned");
        assert_ne!(tail, 0, "a cache entry names a version");
        let bits = match tomb {
            Some(t) => t as u64,
            None => 2,
        };
        Cached { slot_tomb: slot | bits, tail }
    }

    fn slot(self) -> u64 {
        self.slot_tomb & !7
    }

    fn tomb(self) -> Option<bool> {
        (self.slot_tomb & 2 == 0).then_some(self.slot_tomb & 1 == 1)
    }
}

#[derive(Debug)]
pub struct CloverHandle<C> {
    o: CloverOptions,
    node: Arc<CloverNode>,
    ctx: C,
    counters: Counters,
}

/// What the MS said of a key.
enum Ms {
    Unknown,
    /// The shortcut's offset, and the version it named when the MS answered.
    Known(u64, u64),
    Registered(u64),
    /// No shortcut left for a new key.
    Full,
}

impl<C: Client + Clone + 'static> CloverHandle<C> {
    fn planted(&self, bug: PlantedBug) -> bool {
        self.o.plants.contains(bug.name)
    }

    async fn ms(&self, tag: u8, first: Option<u64>, key: &[u8]) -> Result<Ms, IndexError> {
        let mut req = vec![tag];
        if let Some(f) = first {
            req.extend_from_slice(&f.to_le_bytes());
        }
        req.extend_from_slice(key);
        let r = self.ctx.call(self.o.ms_node(), MS_SERVICE, req).await?;
        let word = |at: usize| r.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let slot = || word(1).filter(|s| s % 8 == 0);
        Ok(match (r.first(), slot(), word(9)) {
            (Some(0), _, _) => Ms::Unknown,
            (Some(1), Some(s), Some(0)) => {
                return Err(IndexError::Corrupt(format!("shortcut {s:#x} of a registered key is empty")));
            }
            (Some(1), Some(s), Some(named)) => Ms::Known(s, named),
            (Some(2), Some(s), _) => Ms::Registered(s),
            (Some(4), _, _) => Ms::Full,
            _ => return Err(VerbsError::Protocol(format!("clover MS: {}", String::from_utf8_lossy(&r))).into()),
        })
    }

    /// What the query cache holds of `key`.
    fn cached(&self, key: &[u8]) -> Option<Cached> {
        if !self.o.query_cache {
            return None;
        }
        lock(&self.node.cache).get(key).copied()
    }

    /// Records what this client learnt of `key` (nothing with the query cache off).
    fn remember(&self, key: &[u8], c: Cached) {
        if self.o.query_cache {
            lock(&self.node.cache).insert(SmallBytes::from(key), c);
        }
    }

    /// The key's cache entry: cached, or asked of the MS, whose answer names the tail the
    /// shortcut does, not known to hold a value (`None`: the key was never inserted).
    async fn lookup(&mut self, key: &[u8]) -> Result<Option<Cached>, IndexError> {
        assert!(
            !key.is_empty() && key.len() <= self.o.max_key_bytes as usize,
            "a {}-byte key past the entry point's check",
            key.len()
        );
        if let Some(c) = self.cached(key) {
            return Ok(Some(c));
        }
        self.counters.event(MS_LOOKUP);
        match self.ms(0, None, key).await? {
            Ms::Unknown | Ms::Full => Ok(None),
            Ms::Known(slot, named) => {
                let c = Cached::new(slot, named, None);
                self.remember(key, c);
                Ok(Some(c))
            }
            Ms::Registered(_) => {
                Err(VerbsError::Protocol("clover MS: a lookup answered as a registration".into()).into())
            }
        }
    }

    fn version_of(b: &[u8], at: RemoteAddr, key: &[u8]) -> Result<Version, IndexError> {
        match decode(b) {
            Some(v) if v.key == key => Ok(v),
            _ => Err(IndexError::Corrupt(format!("the version at {at} is not a complete version of its key"))),
        }
    }

    async fn read_version(&self, w: u64, key: &[u8]) -> Result<Version, IndexError> {
        let (at, units) = decode_block_word(w);
        let b = self.ctx.read(at, Buf::zeroed((units * UNIT) as usize)).await?;
        assert_eq!(b.len() as u64, units * UNIT, "a READ returns the bytes asked");
        Self::version_of(&b, at, key)
    }

    /// The key's tail, its word and its version, from the cache entry `c`: the tail it names
    /// and the shortcut READ together, then on along the chain if that is no longer the tail.
    /// Remembers the tail found.
    async fn tail(&mut self, c: Cached, key: &[u8]) -> Result<(u64, Version), IndexError> {
        let shortcut = RemoteAddr::host(self.o.ms_node(), c.slot());
        let (at, units) = decode_block_word(c.tail);
        let mut r = post_per_node(
            &self.ctx,
            vec![Request::read(at, Buf::zeroed((units * UNIT) as usize)), Request::read(shortcut, Buf::zeroed(8))],
        )
        .await?
        .into_iter();
        let (b, hint) = match (r.next(), r.next()) {
            (Some(b), Some(h)) => (b.into_buf()?, h.into_buf()?.u64_at(0)),
            _ => return Err(VerbsError::Protocol("clover: a batch of two READs answered short".into()).into()),
        };
        let v = Self::version_of(&b, at, key)?;
        let (w, v) = if v.next == 0 || self.planted(TRUST_SHORTCUT) {
            (c.tail, v)
        } else {
            self.counters.event(STALE_CACHE);
            // The shortcut, when it points elsewhere, is likely nearer the tail than `next`
            // (hints lag by the writes in flight); either way the chain leads to the tail.
            if hint != 0 && hint != c.tail && hint != v.next {
                let (w, v) = self.follow(hint, key).await?;
                if w != hint {
                    self.counters.event(STALE_HINT);
                }
                (w, v)
            } else {
                self.follow(v.next, key).await?
            }
        };
        self.remember(key, Cached::new(c.slot(), w, Some(v.value.is_none())));
        Ok((w, v))
    }

    async fn follow(&mut self, mut w: u64, key: &[u8]) -> Result<(u64, Version), IndexError> {
        for hop in 0..self.o.max_retries {
            let v = self.read_version(w, key).await?;
            if v.next == 0 || self.planted(TRUST_SHORTCUT) {
                assert!(v.key == key, "read_version returns only a version of its key");
                return Ok((w, v));
            }
            if hop > 0 {
                self.counters.event(CHAIN_HOP);
            }
            w = v.next;
        }
        Err(IndexError::RetriesExhausted { op: "follow", retries: self.o.max_retries })
    }

    /// Insert (`upsert`), update or (no `value`) delete: returns whether the key existed.
    async fn apply(&mut self, key: &[u8], value: Option<&[u8]>, upsert: bool) -> Result<bool, IndexError> {
        let limits = Clover::limits(&self.o);
        limits.check_key(key)?;
        if let Some(v) = value {
            limits.check_value(v)?;
        }
        let cached = self.lookup(key).await?;
        if cached.is_none() && !upsert {
            return Ok(false);
        }
        let bytes = encode(key, value.unwrap_or(&[]), value.is_none());
        let units = bytes.len() as u64 / UNIT;
        // The options bound a version to 255 units (validate); encode pads to whole units.
        assert!(
            bytes.len() as u64 == units * UNIT && (1..=255).contains(&units),
            "a version of {} bytes is not 1 to 255 units",
            bytes.len()
        );
        debug_assert!(
            decode(&bytes).is_some_and(|v| v.key == key && v.next == 0 && v.value.as_deref() == value),
            "a version decodes to what was encoded"
        );
        let at = self.node.chunks.alloc(&self.ctx, units * UNIT, UNIT).await?;
        assert_eq!(at.offset() % UNIT, 0, "a block allocated {UNIT}-aligned");
        let new = encode_block_word(at, units);
        assert_eq!(decode_block_word(new), (at, units), "a block word decodes to its block and units");
        // The tail to CAS after, and whether it holds a value: guessed from the cache (a
        // cached tombstone is read first when the operation must not append to an absent
        // key), else read as a GET reads it.
        let (slot, mut tail, mut existed, mut guessed) = match cached {
            None => {
                self.ctx.write(at, Buf::from(bytes)).await?;
                let c = match self.ms(1, Some(new), key).await? {
                    Ms::Registered(slot) => {
                        self.remember(key, Cached::new(slot, new, Some(false)));
                        self.counters.event(REGISTERED);
                        return Ok(false);
                    }
                    Ms::Known(slot, named) => {
                        self.counters.event(REGISTER_LOST);
                        Cached::new(slot, named, None)
                    }
                    Ms::Full => {
                        self.counters.event(MS_FULL);
                        self.node.chunks.free(at, units * UNIT)?;
                        return Err(IndexError::Full);
                    }
                    Ms::Unknown => return Err(IndexError::Corrupt("the MS refused a registration".into())),
                };
                let (w, v) = self.tail(c, key).await?;
                (c.slot(), w, v.value.is_some(), false)
            }
            Some(c) if c.tomb() == Some(false) || upsert && c.tomb().is_some() => {
                self.ctx.write(at, Buf::from(bytes)).await?;
                (c.slot(), c.tail, c.tomb() == Some(false), true)
            }
            Some(c) => {
                // A tail the MS named (whether it holds a value is not known), or a tombstone an
                // update must confirm: the version's WRITE goes with the reads that find the tail.
                let ctx = self.ctx.clone();
                let write = ctx.post(vec![Request::write(at, bytes)]);
                let found = self.tail(c, key).await;
                write.await?;
                let (w, v) = found?;
                (c.slot(), w, v.value.is_some(), false)
            }
        };
        for _ in 0..self.o.max_retries {
            if !existed && !upsert && !guessed {
                // An update or delete of an absent (deleted) key: nothing to append.
                self.node.chunks.free(at, units * UNIT)?;
                return Ok(false);
            }
            let next_at = decode_block_word(tail).0;
            let old = if self.planted(WRITE_NEXT) {
                self.ctx.write(next_at, Buf::from(new.to_le_bytes().to_vec())).await?;
                0
            } else {
                self.ctx.cas(next_at, 0, new).await?
            };
            if old == 0 {
                self.remember(key, Cached::new(slot, new, Some(value.is_none())));
                // The shortcut is a hint: posted, not awaited.
                let hint =
                    dmkit_rdma::Request::write(RemoteAddr::host(self.o.ms_node(), slot), new.to_le_bytes().to_vec());
                // A hint that cannot be posted is only a stale hint: the write succeeded.
                if self.ctx.post_unsignaled(vec![hint]).is_err() {
                    self.counters.event(HINT_NOT_POSTED);
                }
                return Ok(existed);
            }
            if guessed {
                self.counters.event(STALE_CACHE);
            } else {
                self.counters.cas_failures += 1;
            }
            guessed = false;
            let v;
            (tail, v) = self.follow(old, key).await?;
            existed = v.value.is_some();
        }
        Err(IndexError::RetriesExhausted { op: "write", retries: self.o.max_retries })
    }
}

impl<C: Client + Clone + 'static> Index for CloverHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        Clover::limits(&self.o).check_key(key)?;
        let Some(c) = self.lookup(key).await? else { return Ok(None) };
        Ok(self.tail(c, key).await?.1.value)
    }

    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        match &change {
            Change::Upsert(value) => self.apply(key, Some(value), true).await,
            Change::Update(value) => self.apply(key, Some(value), false).await,
            Change::Delete => self.apply(key, None, false).await,
        }
    }

    async fn scan(&mut self, _: Bound<&[u8]>, _: Bound<&[u8]>, _: usize) -> Result<Pairs, IndexError> {
        Err(IndexError::Unsupported("scan"))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// Clover, for `dmkit run --index clover` and `dmkit check --index clover`.
#[derive(Debug)]
pub struct Clover;

impl IndexKind for Clover {
    const NAME: &'static str = "clover";
    /// A run's peak over its items, its compute nodes' caches aside (`dmkit run --index clover
    /// --workload c --keys 10000000 --compute-nodes 1`, 2026-11-30: 3,435 MB, of which the one
    /// node's warmed shortcuts 676 MB): the image, the copy of the metadata server each run
    /// starts from, the invariant walk. The load alone peaks lower (`bench-load`: 2,630 MB).
    const HOST_BYTES_PER_ITEM: u64 = 276;
    const SUPPORTS_SCAN: bool = false;

    /// Each compute node warms a cache entry for every loaded key (`warm`): 83 host bytes a key
    /// (`dmkit run --index clover --workload c --keys 10000000 --compute-nodes 2 --duration-us
    /// 300`, 2026-12-01: 4,373 MB peak, 2,760 MB with `--config nocache`; an entry is the key,
    /// the shortcut's offset and the tail's word, in a table of 2^24 buckets). It was 68 when an
    /// entry held the shortcut's offset alone (8,168 MB with 8 compute nodes, 2026-11-30); before
    /// this was counted, the estimate said 4.3 GB for that 8.2 GB run, and would have let one at
    /// 60 M keys (about 49 GB) start.
    fn cache_host_bytes(o: &CloverOptions, compute_nodes: u16, items: u64) -> u64 {
        if !o.query_cache {
            return 0;
        }
        items.saturating_mul(83).saturating_mul(compute_nodes as u64)
    }
    type Options = CloverOptions;
    type NodeState = CloverNode;
    type Handle<C: Client + Clone + 'static> = CloverHandle<C>;

    fn limits(o: &CloverOptions) -> Limits {
        Limits {
            min_key_bytes: 1,
            max_key_bytes: o.max_key_bytes as usize,
            min_value_bytes: 0,
            max_value_bytes: o.max_value_bytes as usize,
        }
    }

    fn validate(o: &CloverOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(CloverOptions, String), String> {
        if shape.cache_bytes.is_some() {
            return Err(registry::no_cache_budget(Self::NAME, "has no cache budget"));
        }
        if config != "default" && config != "nocache" {
            return Err(registry::no_configuration(Self::NAME, config, &["default", "nocache"]));
        }
        let options = CloverOptions {
            memory_nodes: shape.memory_nodes,
            max_key_bytes: shape.key_bytes.max(1) as u32,
            max_value_bytes: shape.value_bytes as u32,
            // A shortcut per loaded key, and room for the run's inserts.
            max_keys: shape.items.saturating_mul(2).max(1 << 16),
            query_cache: config != "nocache",
            ..CloverOptions::default()
        };
        options.validate().map_err(|e| format!("index {}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn servers(o: &CloverOptions) -> Servers {
        Servers { nodes: 1, rpc_threads: o.rpc_threads, workers_share_cores: false }
    }

    fn install<H: ServiceHost>(o: &CloverOptions, host: &mut H) -> Result<(), String> {
        o.validate()?;
        let o2 = o.clone();
        host.add_service(o.ms_node(), MS_SERVICE, move || MetadataServer {
            o: o2.clone(),
            keys: Mutex::new(FixedHashMap::default()),
            slots: Mutex::new((0, Vec::new())),
            register_raced: AtomicU64::new(0),
        })
    }

    async fn create<C: Client>(o: &CloverOptions, _ctx: &C) -> Result<(), IndexError> {
        o.validate().map_err(IndexError::Corrupt)
    }

    fn node_state(o: &CloverOptions, _caps: &Caps) -> CloverNode {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        CloverNode { chunks, cache: Mutex::new(FixedHashMap::default()) }
    }

    fn inherit(node: &CloverNode, loader: &CloverNode) {
        node.chunks.inherit(&loader.chunks);
    }

    fn node_state_bytes(n: &CloverNode) -> u64 {
        n.chunks.bytes() + lock(&n.cache).keys().map(|k| k.len() as u64 + 16).sum::<u64>()
    }

    fn open<C: Client + Clone + 'static>(o: &CloverOptions, node: Arc<CloverNode>, ctx: C) -> CloverHandle<C> {
        CloverHandle { o: o.clone(), node, ctx, counters: Counters::default() }
    }

    fn check_invariants(o: &CloverOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::check(o, memory)
    }

    fn server_counters(o: &CloverOptions, memory: &dyn MemoryView) -> BTreeMap<&'static str, u64> {
        memory
            .service_state(o.ms_node(), MS_SERVICE)
            .and_then(|s| s.downcast::<MetadataServer>().ok())
            .map(|ms| BTreeMap::from([(MS_REGISTER_RACED, ms.register_raced.load(Ordering::Relaxed))]))
            .unwrap_or_default()
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    /// A long warm-up leaves every key in the query cache: its shortcut's address and its
    /// tail (what the shortcut points to once no write is in flight). Nothing with the cache off.
    fn warm(o: &CloverOptions, node: &CloverNode, memory: &dyn MemoryView) -> Result<(), String> {
        if !o.query_cache {
            return Ok(());
        }
        if let Some(ms) =
            memory.service_state(o.ms_node(), MS_SERVICE).and_then(|s| s.downcast::<MetadataServer>().ok())
        {
            // Straight from the MS's directory: a clone of it first held every key twice.
            let keys = lock(&ms.keys);
            let mut cache = lock(&node.cache);
            cache.reserve(keys.len());
            for (k, &slot) in keys.iter() {
                // Hints land out of order: the shortcut may lag its chain, so walk it.
                let (tail, v) = invariants::chain(o, memory, k, slot, |_| ())?;
                cache.insert(k.clone(), Cached::new(slot, tail, Some(v.value.is_none())));
            }
        }
        Ok(())
    }

    /// [`IndexKind::warm`] for the keys given only: what a compute node that loaded them holds.
    fn warm_keys(
        o: &CloverOptions,
        node: &CloverNode,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        if !o.query_cache {
            return Ok(true);
        }
        if let Some(ms) =
            memory.service_state(o.ms_node(), MS_SERVICE).and_then(|s| s.downcast::<MetadataServer>().ok())
        {
            let directory = lock(&ms.keys);
            let mut cache = lock(&node.cache);
            cache.reserve(keys.len());
            for k in keys {
                let k = SmallBytes::from(k.as_slice());
                let Some(&slot) = directory.get(&k) else { continue };
                let (tail, v) = invariants::chain(o, memory, &k, slot, |_| ())?;
                cache.insert(k, Cached::new(slot, tail, Some(v.value.is_none())));
            }
        }
        Ok(true)
    }

    /// Every node warms to the same cache: a copy of the first's.
    fn warm_like(o: &CloverOptions, node: &CloverNode, warmed: &CloverNode, _: &dyn MemoryView) -> Result<(), String> {
        if o.query_cache {
            *lock(&node.cache) = lock(&warmed.cache).clone();
        }
        Ok(())
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut CloverOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "clover", bug)?);
        Ok(())
    }
}

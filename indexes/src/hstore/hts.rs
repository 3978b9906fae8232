//! The hash-table server (digest §2.2, §2.8, §3.2–§3.4, §3.6).
//!
//! RPC threads decode a write, check its client's last recorded write (a retry is answered
//! from it), and append it to the log of the worker that owns its bucket's chain, deferring the
//! reply. Worker `w` takes whatever its log holds (up to `batch_entries` and the message limit)
//! and:
//! 1. walks each entry's chain in local memory and READs, from the memory pool, the key of every
//!    block a fingerprint-matching slot points to; reserves overflow buckets for entries that
//!    may need one (an entry that cannot get one is answered `Full` before it is shipped, so the
//!    two servers never disagree about it);
//! 2. ships the batch to the SLS (`LogSync`, carrying the worker's commit point) while those
//!    READs are in flight, and waits for the ack — one batch in flight per worker (A5);
//! 3. applies the entries in log order with local CAS on the slots (an overflow bucket is
//!    written before `next` links it, A2), records each client's write and its effect, and
//!    replies to each client with the effect and where its time went;
//! 4. if its log is empty, tells the SLS its new commit point (else the next log sync carries it).
//!
//! A batch whose log sync fails (the SLS crashed, or is recovering) is applied nowhere and its
//! clients are answered `Blocked`.

use super::layout::{self, Geometry, Slot};
use super::wire::{Dedup, Effect, Entry, Reply, Request, SLS_SERVICE, ServerState, Timing, WriteOp, encode_log_sync};
use super::{
    APPLY_BEFORE_SYNC, FP_ONLY, HStoreOptions, HTS_APPLY_ERRORS, HTS_APPLY_RETRIED, HTS_BATCH_MAX, HTS_BATCHES_BLOCKED,
    HTS_COMMIT_MESSAGES, HTS_ENTRIES_SHIPPED, HTS_ENTRY_BLOCKED, HTS_FP_FALSE_POSITIVE, HTS_FULL, HTS_LATE_VERIFY,
    HTS_LOG_SYNCS, HTS_OVERFLOW_BUCKETS, HTS_PEER_RECOVERY_WAITED, HTS_RECOVERED_ITEMS, HTS_RECOVERIES,
    HTS_RECOVERY_NS, HTS_RETRY_ANSWERED, HTS_VERIFY_READS, NO_APPLY_RETRY, PIPELINED_SYNC, ServerCounters,
};
use crate::common::batch::post_per_node;
use crate::common::primitive::{Mutex, lock};
use dmkit_rdma::service::{Responder, ServerCtx, Service};
use dmkit_rdma::sync::{Notify, Queue};
use dmkit_rdma::{Buf, CpuWork, Request as Verb, VerbsError};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A write waiting in a worker's log.
#[derive(Debug)]
struct Pending {
    entry: Entry,
    to: Responder,
    enqueued_ns: u64,
}

#[derive(Clone, Debug)]
struct Shared {
    state: ServerState,
    incarnation: u64,
    /// When the table became complete (init or the end of a recovery).
    init_ns: u64,
    /// Each client's last applied write.
    dedup: BTreeMap<u32, (u64, Effect)>,
    /// Next free bucket of each worker's pool, and buckets reserved for batches in flight.
    pool_next: Vec<u64>,
    pool_reserved: Vec<u64>,
    /// Workers with a batch between taking it and replying.
    in_batch: Vec<bool>,
    /// Next log sequence number of each worker, and the last one applied.
    next_seq: Vec<u64>,
    committed: Vec<u64>,
    /// SLS commit queries waiting for a worker's commit point, by the sequence they wait for.
    commit_waiters: Vec<BTreeMap<u64, Vec<Responder>>>,
}

/// The hash-table server's state (one per incarnation).
#[derive(Debug)]
pub struct Hts {
    o: HStoreOptions,
    g: Geometry,
    shared: Mutex<Shared>,
    logs: Vec<Queue<Pending>>,
    /// Wakes a worker waiting for the table to be served.
    serving: Vec<Notify>,
    /// A worker finished a batch (the SLS's recovery waits for all to be idle).
    idle: Notify,
    counters: ServerCounters,
}

/// A log sync in flight.
type SyncCall<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, VerbsError>> + 'a>>;

/// A batch shipped and not yet applied.
struct Shipped<'a> {
    batch: Vec<Pending>,
    first_seq: u64,
    taken_ns: u64,
    planned_ns: u64,
    sync: Option<SyncCall<'a>>,
    /// Keys of the blocks READ for verification, by slot address.
    known: BTreeMap<u64, Vec<u8>>,
    /// Overflow buckets reserved for this batch.
    reserved: u64,
}

fn corrupt(what: String) -> VerbsError {
    VerbsError::Protocol(format!("hstore HTS: {what}"))
}

impl Hts {
    /// No batch in flight, no write logged and unshipped, no commit query waiting: what a copy
    /// for another run needs.
    fn quiet(&self, shared: &Shared) -> bool {
        !shared.in_batch.iter().any(|&b| b)
            && shared.commit_waiters.iter().all(BTreeMap::is_empty)
            && self.logs.iter().all(Queue::is_empty)
    }

    pub fn new(o: HStoreOptions) -> Hts {
        let w = o.hts_workers as usize;
        Hts {
            g: o.geometry(),
            shared: Mutex::new(Shared {
                state: ServerState::Fresh,
                incarnation: 0,
                init_ns: 0,
                dedup: BTreeMap::new(),
                pool_next: vec![0; w],
                pool_reserved: vec![0; w],
                in_batch: vec![false; w],
                next_seq: vec![1; w],
                committed: vec![0; w],
                commit_waiters: vec![BTreeMap::new(); w],
            }),
            logs: (0..w).map(|_| Queue::new()).collect(),
            serving: (0..w).map(|_| Notify::new()).collect(),
            idle: Notify::new(),
            counters: ServerCounters::default(),
            o,
        }
    }

    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        self.counters.snapshot()
    }

    /// The state and incarnation (for invariant walks and tests).
    pub fn state(&self) -> (ServerState, u64) {
        let s = lock(&self.shared);
        (s.state, s.incarnation)
    }

    fn become_serving(&self, incarnation: u64, now_ns: u64) {
        {
            let mut s = lock(&self.shared);
            s.state = ServerState::Serving;
            s.incarnation = incarnation;
            s.init_ns = now_ns;
        }
        for n in &self.serving {
            n.notify_one();
        }
    }

    /// Waits until the table is served (a fresh or recovering server's workers wait here).
    async fn wait_serving(&self, w: usize) {
        loop {
            if matches!(lock(&self.shared).state, ServerState::Serving | ServerState::PeerRecovering) {
                return;
            }
            self.serving[w].notified().await;
        }
    }

    async fn on_write<C: ServerCtx>(&self, ctx: &C, e: Entry, to: Responder) -> Option<Reply> {
        ctx.charge_cpu(CpuWork::HashByte, e.key.len() as u64).await;
        if e.key.is_empty() || e.key.len() > self.o.max_key_bytes as usize {
            return Some(Reply::Error(format!("key of {} bytes", e.key.len())));
        }
        if (e.op == WriteOp::Delete) != (e.addr == 0) || (e.op == WriteOp::Delete) != (e.units == 0) {
            return Some(Reply::Error(format!("a {:?} with block {:#x} of {} units", e.op, e.addr, e.units)));
        }
        let s = lock(&self.shared);
        if s.state != ServerState::Serving {
            return Some(Reply::Blocked);
        }
        if self.o.dedup {
            if let Some(&(req_id, effect)) = s.dedup.get(&e.client) {
                if req_id == e.req_id {
                    drop(s);
                    self.counters.add(HTS_RETRY_ANSWERED, 1);
                    return Some(Reply::Done { effect, timing: Timing::default() });
                }
                if req_id > e.req_id {
                    return Some(Reply::Error(format!(
                        "client {} sent request {} after {req_id}: requests must rise",
                        e.client, e.req_id
                    )));
                }
            }
        }
        drop(s);
        let w = self.g.place(&e.key).worker as usize;
        self.logs[w].push(Pending { entry: e, to, enqueued_ns: ctx.now_ns() });
        None
    }

    /// Initialises a fresh server (the index's `create`): an empty table, served.
    async fn on_init<C: ServerCtx>(&self, ctx: &C) -> Reply {
        if lock(&self.shared).state != ServerState::Fresh {
            return Reply::Error("the HTS is already initialised".into());
        }
        let incarnation = ctx.now_ns() + 1;
        if let Err(e) = ctx.local_write(layout::READY_OFFSET, Buf::from(incarnation.to_le_bytes().to_vec())).await {
            return Reply::Error(e.to_string());
        }
        self.become_serving(incarnation, ctx.now_ns());
        Reply::Ok
    }

    /// The SLS is rebuilding from the table: block writes, and answer once no batch is in flight.
    async fn on_peer_recovering(&self) -> Reply {
        {
            let mut s = lock(&self.shared);
            if !matches!(s.state, ServerState::Serving | ServerState::PeerRecovering) {
                return Reply::Blocked;
            }
            s.state = ServerState::PeerRecovering;
        }
        let mut waited = false;
        loop {
            if !lock(&self.shared).in_batch.iter().any(|&b| b) {
                if waited {
                    self.counters.add(HTS_PEER_RECOVERY_WAITED, 1);
                }
                // Pass the wake-up on: another recovering SLS incarnation may wait here too
                // (an earlier one that crashed while waiting took the last batch's notice).
                self.idle.notify_one();
                return Reply::Ok;
            }
            waited = true;
            self.idle.notified().await;
        }
    }

    /// The SLS asks whether worker `w`'s entry `seq` of `incarnation` is applied.
    fn on_commit_query(&self, incarnation: u64, w: u16, seq: u64, to: Responder) -> Option<Reply> {
        let mut s = lock(&self.shared);
        if incarnation != s.incarnation || s.state == ServerState::Fresh {
            return Some(Reply::Stale);
        }
        let Some(&committed) = s.committed.get(w as usize) else {
            return Some(Reply::Error(format!("no worker {w}")));
        };
        if committed >= seq {
            return Some(Reply::Ok);
        }
        s.commit_waiters[w as usize].entry(seq).or_default().push(to);
        None
    }

    /// Answers the commit queries worker `w`'s commit point now covers.
    fn answer_commit_queries<C: ServerCtx>(&self, ctx: &C, w: usize) {
        let ready: Vec<Responder> = {
            let mut s = lock(&self.shared);
            let committed = s.committed[w];
            let later = s.commit_waiters[w].split_off(&(committed + 1));
            std::mem::replace(&mut s.commit_waiters[w], later).into_values().flatten().collect()
        };
        for to in ready {
            let _ = ctx.reply(to, Reply::Ok.encode());
        }
    }

    fn on_peer_ready(&self) -> Reply {
        let mut s = lock(&self.shared);
        if s.state == ServerState::PeerRecovering {
            s.state = ServerState::Serving;
        }
        Reply::Ok
    }

    /// At start: if the SLS was serving before this server started, this is a restart after a
    /// crash: rebuild from it. Otherwise wait for `create`'s `Init`.
    async fn start<C: ServerCtx>(&self, ctx: &C) {
        let started_ns = ctx.now_ns();
        for attempt in 0..16 {
            match ctx.call(self.o.sls_node(), SLS_SERVICE, Request::Status.encode()).await.map(|b| Reply::decode(&b)) {
                Ok(Ok(Reply::Status { state: ServerState::Serving, init_ns, .. })) if init_ns < started_ns => {
                    self.recover(ctx).await;
                    return;
                }
                Ok(Ok(Reply::Status { .. })) => return,
                _ => ctx.sleep(self.o.retry_wait_ns(attempt)).await,
            }
        }
    }

    /// Rebuilds the table from the SLS (digest §3.6, HTS failure).
    async fn recover<C: ServerCtx>(&self, ctx: &C) {
        let t0 = ctx.now_ns();
        let incarnation = t0 + 1;
        {
            let mut s = lock(&self.shared);
            if s.state != ServerState::Fresh {
                return;
            }
            s.state = ServerState::Recovering;
            s.incarnation = incarnation;
        }
        let mut items = 0u64;
        for p in 0..self.o.sls_partitions {
            let mut after = None;
            let mut attempts = 0;
            loop {
                let req = Request::Dump { incarnation, partition: p, after: after.clone() };
                match ctx.call(self.o.sls_node(), SLS_SERVICE, req.encode()).await.map(|b| Reply::decode(&b)) {
                    Ok(Ok(Reply::Page { items: page, dedup, done })) => {
                        for d in dedup {
                            self.merge_dedup(d);
                        }
                        for item in &page {
                            if let Err(e) = self.rebuild_insert(ctx, item).await {
                                self.counters.add(super::HTS_RECOVERY_FAILED, 1);
                                let _ = e;
                                return;
                            }
                        }
                        items += page.len() as u64;
                        if done {
                            break;
                        }
                        after = page.last().map(|i| i.key.clone());
                    }
                    _ => {
                        attempts += 1;
                        if attempts > 64 {
                            self.counters.add(super::HTS_RECOVERY_FAILED, 1);
                            return;
                        }
                        ctx.sleep(self.o.retry_wait_ns(attempts - 1)).await;
                    }
                }
            }
        }
        // Each client's last write, recorded by the SLS as it applied them.
        let mut after = None;
        let mut attempts = 0;
        loop {
            match ctx
                .call(self.o.sls_node(), SLS_SERVICE, Request::DumpDedup { after }.encode())
                .await
                .map(|b| Reply::decode(&b))
            {
                Ok(Ok(Reply::Page { dedup, done, .. })) => {
                    after = dedup.last().map(|d| d.client);
                    for d in dedup {
                        self.merge_dedup(d);
                    }
                    if done {
                        break;
                    }
                }
                _ => {
                    attempts += 1;
                    if attempts > 64 {
                        self.counters.add(super::HTS_RECOVERY_FAILED, 1);
                        return;
                    }
                    ctx.sleep(self.o.backoff_ns.saturating_mul(8)).await;
                }
            }
        }
        if ctx.local_write(layout::READY_OFFSET, Buf::from(incarnation.to_le_bytes().to_vec())).await.is_err() {
            return;
        }
        self.counters.add(HTS_RECOVERIES, 1);
        self.counters.add(HTS_RECOVERED_ITEMS, items);
        self.counters.add(HTS_RECOVERY_NS, ctx.now_ns() - t0);
        self.become_serving(incarnation, ctx.now_ns());
    }

    fn merge_dedup(&self, d: Dedup) {
        let mut s = lock(&self.shared);
        let e = s.dedup.entry(d.client).or_insert((0, Effect::default()));
        if d.req_id >= e.0 {
            *e = (d.req_id, d.effect);
        }
    }

    /// Puts one recovered item in the table (the chain's first empty slot, else a new bucket).
    async fn rebuild_insert<C: ServerCtx>(&self, ctx: &C, item: &super::wire::Item) -> Result<(), VerbsError> {
        ctx.charge_cpu(CpuWork::HashByte, item.key.len() as u64).await;
        let p = self.g.place(&item.key);
        let word = Slot { fp: p.fp, units: item.units, block: layout::decode_addr(item.addr) }.encode();
        let chain = self.walk(ctx, p.bucket).await?;
        if let Some(at) = chain.iter().find_map(|(off, words)| first_empty(&self.g, *off, words)) {
            ctx.local_write(at, Buf::from(word.to_le_bytes().to_vec())).await?;
            return Ok(());
        }
        let bucket =
            self.take_pool_bucket(p.worker as usize).ok_or_else(|| corrupt("pool exhausted in recovery".into()))?;
        self.link_bucket(ctx, chain.last().expect("a chain has its head").0, bucket, word).await
    }

    /// Takes one bucket of pool `w` outside any reservation (recovery).
    fn take_pool_bucket(&self, w: usize) -> Option<u64> {
        let mut s = lock(&self.shared);
        if s.pool_next[w] + s.pool_reserved[w] >= self.g.pool_buckets {
            return None;
        }
        s.pool_next[w] += 1;
        let bucket = self.g.pool_offset(w as u16) + (s.pool_next[w] - 1) * layout::BUCKET_BYTES;
        assert!(
            self.g.is_pool_bucket(bucket) && self.g.pool_of(bucket) == w as u16,
            "bucket {bucket:#x} outside pool {w}"
        );
        Some(bucket)
    }

    /// Reads bucket `b`'s chain from local memory: each bucket's offset and words.
    async fn walk<C: ServerCtx>(&self, ctx: &C, b: u64) -> Result<Vec<(u64, [u64; 8])>, VerbsError> {
        assert!(b < self.g.buckets, "bucket {b} outside the table's {}", self.g.buckets);
        let mut chain = Vec::new();
        let mut off = self.g.bucket_offset(b);
        loop {
            ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
            let words = layout::bucket_words(&ctx.local_read(off, layout::BUCKET_BYTES as usize).await?);
            chain.push((off, words));
            let next = words[7];
            if next == 0 {
                return Ok(chain);
            }
            if !self.g.is_pool_bucket(next) || chain.len() as u64 > self.g.pool_buckets * self.g.workers as u64 {
                return Err(corrupt(format!("bucket {b}'s chain links {next:#x}")));
            }
            off = next;
        }
    }

    /// Writes a new overflow bucket holding `word` and links it after `last`: the bucket first,
    /// then `next` (A2).
    async fn link_bucket<C: ServerCtx>(&self, ctx: &C, last: u64, bucket: u64, word: u64) -> Result<(), VerbsError> {
        assert!(self.g.is_pool_bucket(bucket), "linking {bucket:#x}, not a pool bucket");
        assert!(
            last >= layout::TABLE_OFFSET
                && last < self.g.end_offset()
                && (last - layout::TABLE_OFFSET) % layout::BUCKET_BYTES == 0,
            "linking after {last:#x}, not a bucket"
        );
        let mut words = [0u64; 8];
        words[0] = word;
        ctx.local_write(bucket, Buf::from(layout::bucket_bytes(&words))).await?;
        ctx.local_write(last + layout::NEXT_AT, Buf::from(bucket.to_le_bytes().to_vec())).await?;
        self.counters.add(HTS_OVERFLOW_BUCKETS, 1);
        Ok(())
    }

    /// Step 1 and 2 of a batch: plan, reserve, ship, post the verification READs.
    async fn ship<'a, C: ServerCtx>(&self, ctx: &'a C, w: usize, mut batch: Vec<Pending>) -> Option<Shipped<'a>> {
        let taken_ns = ctx.now_ns();
        let mut verify: BTreeMap<u64, usize> = BTreeMap::new();
        // Each entry's chain and its empty slots, before the batch.
        let mut chains = Vec::with_capacity(batch.len());
        // Blocks each entry's fingerprint matches, before the batch.
        let mut candidates: Vec<Vec<u64>> = Vec::with_capacity(batch.len());
        let pipelined = self.o.planted(PIPELINED_SYNC);
        for p in &batch {
            let pl = self.g.place(&p.entry.key);
            let chain = match self.walk(ctx, pl.bucket).await {
                Ok(c) => c,
                Err(e) => {
                    self.fail_all(ctx, batch, error_reply(&e));
                    return None;
                }
            };
            let mut empty = 0;
            let mut mine = Vec::new();
            for (_, words) in &chain {
                for &word in &words[..self.g.slots] {
                    match Slot::decode(word) {
                        None => empty += 1,
                        Some(s) if s.fp == pl.fp => {
                            let len = (s.units as usize * layout::UNIT as usize)
                                .min(layout::HEADER_BYTES + p.entry.key.len());
                            let addr = layout::encode_addr(s.block);
                            let at = verify.entry(addr).or_insert(0);
                            *at = (*at).max(len);
                            mine.push(addr);
                        }
                        Some(_) => {}
                    }
                }
            }
            candidates.push(mine);
            chains.push((pl.bucket, empty));
        }
        let verifying = !self.o.planted(FP_ONLY);
        // Reserve overflow buckets. An upsert that cannot have one is full before shipping,
        // unless it replaces a present key: with the pool spent, its candidates' keys are READ
        // first (the rare case pays the READs before the log sync instead of beside it).
        let mut known = BTreeMap::new();
        let reserved = {
            let mut reserved = 0;
            let mut kept: Vec<Pending> = Vec::with_capacity(batch.len());
            let mut full = Vec::new();
            // Empty slots per chain as the kept upserts use them up (each taken to be an
            // insert). A new bucket's slots count only once it is reserved: an upsert answered
            // `Full` adds none, or the chain's next upserts would go out with no slot to take
            // (the SLS would insert them, the HTS fail to: S9). A kept upsert of a present key
            // takes no slot; if an entry before it in the batch deletes the key, that delete
            // frees one.
            let mut empties: BTreeMap<u64, usize> = BTreeMap::new();
            for ((p, (bucket, empty)), mine) in batch.drain(..).zip(chains).zip(candidates) {
                // Pipelined (the plant), an earlier batch may still fill this chain: every
                // upsert reserves a bucket, so the plant shows its ordering bug, not a
                // reservation one.
                let left = empties.entry(bucket).or_insert(if pipelined { 0 } else { empty });
                if p.entry.op == WriteOp::Upsert && *left > 0 {
                    *left -= 1;
                } else if p.entry.op == WriteOp::Upsert {
                    let room = {
                        let mut s = lock(&self.shared);
                        let room = s.pool_next[w] + s.pool_reserved[w] < self.g.pool_buckets;
                        if room {
                            s.pool_reserved[w] += 1;
                        }
                        room
                    };
                    if room {
                        reserved += 1;
                        if !pipelined {
                            *left = self.g.slots - 1;
                        }
                    } else {
                        if verifying && known.is_empty() && !verify.is_empty() {
                            known = self.read_keys(ctx, &verify).await;
                        }
                        let present = kept.iter().any(|k| k.entry.op == WriteOp::Upsert && k.entry.key == p.entry.key)
                            || mine.iter().any(|a| known.get(a).is_some_and(|k| *k == p.entry.key));
                        if !present {
                            full.push(p);
                            continue;
                        }
                    }
                }
                kept.push(p);
            }
            for p in full {
                self.counters.add(HTS_FULL, 1);
                let _ = ctx.reply(p.to, Reply::Full.encode());
            }
            batch = kept;
            reserved
        };
        if batch.is_empty() {
            self.release(w, reserved);
            return None;
        }
        let (incarnation, first_seq, committed) = {
            let mut s = lock(&self.shared);
            let first = s.next_seq[w];
            s.next_seq[w] += batch.len() as u64;
            (s.incarnation, first, s.committed[w])
        };
        let sync = encode_log_sync(incarnation, w as u16, first_seq, committed, batch.iter().map(|p| &p.entry));
        let sync: SyncCall<'a> = Box::pin(ctx.call(self.o.sls_node(), SLS_SERVICE, sync));
        self.counters.add(HTS_LOG_SYNCS, 1);
        self.counters.add(HTS_ENTRIES_SHIPPED, batch.len() as u64);
        self.counters.set_max(HTS_BATCH_MAX, batch.len() as u64);
        let planned_ns = ctx.now_ns();
        // The verification READs, in flight with the log sync (digest decision 2).
        if verifying {
            verify.retain(|addr, _| !known.contains_key(addr));
            known.extend(self.read_keys(ctx, &verify).await);
        }
        Some(Shipped { batch, first_seq, taken_ns, planned_ns, sync: Some(sync), known, reserved })
    }

    /// READs the keys of the blocks in `verify` (address and length to read), several at a
    /// time; a block whose key is longer than what was read is no entry's key (empty), a failed
    /// READ is left out (`apply` reads it again).
    async fn read_keys<C: ServerCtx>(&self, ctx: &C, verify: &BTreeMap<u64, usize>) -> BTreeMap<u64, Vec<u8>> {
        let mut known = BTreeMap::new();
        if verify.is_empty() {
            return known;
        }
        self.counters.add(HTS_VERIFY_READS, verify.len() as u64);
        let reqs: Vec<Verb> =
            verify.iter().map(|(&addr, &len)| Verb::read_len(layout::decode_addr(addr), len)).collect();
        if let Ok(responses) = post_per_node(ctx, reqs).await {
            for (&addr, r) in verify.keys().zip(responses) {
                if let Ok(b) = r.into_buf() {
                    known.insert(addr, layout::header_key(&b).map(<[u8]>::to_vec).unwrap_or_default());
                }
            }
        }
        known
    }

    fn release(&self, w: usize, reserved: u64) {
        let mut s = lock(&self.shared);
        s.pool_reserved[w] -= reserved;
    }

    fn fail_all<C: ServerCtx>(&self, ctx: &C, batch: Vec<Pending>, reply: Reply) {
        let bytes = reply.encode();
        for p in batch {
            let _ = ctx.reply(p.to, bytes.clone());
        }
    }

    /// Steps 3 and 4: wait for the ack, apply in log order, reply, publish the commit point.
    async fn finish<C: ServerCtx>(&self, ctx: &C, w: usize, mut shipped: Shipped<'_>) {
        let early = self.o.planted(APPLY_BEFORE_SYNC);
        let mut synced_ns = ctx.now_ns();
        if !early {
            let ack = shipped.sync.take().expect("shipped batches carry their sync").await;
            synced_ns = ctx.now_ns();
            if !matches!(ack.map(|b| Reply::decode(&b)), Ok(Ok(Reply::Ok))) {
                // The SLS did not log it: nothing is applied; the clients try again later.
                self.counters.add(HTS_BATCHES_BLOCKED, 1);
                self.release(w, shipped.reserved);
                self.fail_all(ctx, shipped.batch, Reply::Blocked);
                return;
            }
        }
        let n = shipped.batch.len() as u32;
        let mut reserved = shipped.reserved;
        let mut last_seq = shipped.first_seq;
        for (i, p) in shipped.batch.into_iter().enumerate() {
            let seq = shipped.first_seq + i as u64;
            last_seq = seq;
            // The entry is logged: the skiplist has it, so the table must get it too. A verb
            // that timed out (a transient transport failure; the node kept its memory) is
            // retried: apply READs the chain before it writes, so a failed READ left nothing
            // half-done. Answering the client with the failure instead would leave the table
            // and the skiplist disagreeing for good.
            let mut result = self.apply(ctx, w, &p.entry, &mut shipped.known, &mut reserved).await;
            let mut retries = 0;
            while matches!(result, Err(VerbsError::Timeout(_)))
                && retries < self.o.max_retries
                && !self.o.planted(NO_APPLY_RETRY)
            {
                retries += 1;
                self.counters.add(HTS_APPLY_RETRIED, 1);
                result = self.apply(ctx, w, &p.entry, &mut shipped.known, &mut reserved).await;
            }
            // The entry is done here either way: the commit point passes it (a failed apply is
            // a transport failure the client reports as an error of unknown effect, or a
            // broken invariant it reports as corruption; not a write to wait for).
            lock(&self.shared).committed[w] = seq;
            let reply = match result {
                Ok(effect) => {
                    lock(&self.shared).dedup.insert(p.entry.client, (p.entry.req_id, effect));
                    let now = ctx.now_ns();
                    Reply::Done {
                        effect,
                        timing: Timing {
                            queue_ns: shipped.taken_ns.saturating_sub(p.enqueued_ns),
                            sync_ns: synced_ns - shipped.planned_ns,
                            index_ns: (shipped.planned_ns - shipped.taken_ns) + (now - synced_ns),
                            batch: n,
                        },
                    }
                }
                Err(e) => {
                    self.counters.add(HTS_APPLY_ERRORS, 1);
                    error_reply(&e)
                }
            };
            let _ = ctx.reply(p.to, reply.encode());
        }
        self.release(w, reserved);
        self.answer_commit_queries(ctx, w);
        if early {
            let _ = shipped.sync.take().expect("shipped batches carry their sync").await;
        }
        // The commit point rides on the next log sync; with nothing queued, send it now.
        if self.logs[w].is_empty() && self.o.commit_wait {
            let incarnation = lock(&self.shared).incarnation;
            let commit = Request::Commit { incarnation, worker: w as u16, seq: last_seq };
            // Fire and forget: the call is posted now; its ack is not needed.
            drop(ctx.call(self.o.sls_node(), SLS_SERVICE, commit.encode()));
            self.counters.add(HTS_COMMIT_MESSAGES, 1);
        }
    }

    /// Applies one entry to its chain; returns its effect.
    async fn apply<C: ServerCtx>(
        &self,
        ctx: &C,
        w: usize,
        e: &Entry,
        known: &mut BTreeMap<u64, Vec<u8>>,
        reserved: &mut u64,
    ) -> Result<Effect, VerbsError> {
        let p = self.g.place(&e.key);
        // on_write logs each entry with its chain's worker: every chain has one writer.
        assert_eq!(p.worker as usize, w, "worker {w} applying a write to worker {}'s chain", p.worker);
        let chain = self.walk(ctx, p.bucket).await?;
        // Find the key: a fingerprint match whose block holds it.
        let mut found = None;
        'search: for (off, words) in &chain {
            for (i, &word) in words[..self.g.slots].iter().enumerate() {
                let Some(s) = Slot::decode(word) else { continue };
                if s.fp != p.fp {
                    continue;
                }
                ctx.charge_cpu(CpuWork::NodeSearchEntry, 1).await;
                let addr = layout::encode_addr(s.block);
                if !self.o.planted(FP_ONLY) && !known.contains_key(&addr) {
                    // A slot this worker filled after the batch was planned (a pipelined
                    // batch): read its key now.
                    self.counters.add(HTS_LATE_VERIFY, 1);
                    let len = (s.units as usize * layout::UNIT as usize).min(layout::HEADER_BYTES + e.key.len());
                    let b = ctx.read(s.block, Buf::zeroed(len)).await?;
                    assert_eq!(b.len(), len, "a READ returns the bytes asked");
                    known.insert(addr, layout::header_key(&b).map(<[u8]>::to_vec).unwrap_or_default());
                }
                if self.o.planted(FP_ONLY) || known.get(&addr).is_some_and(|k| *k == e.key) {
                    found = Some((off + 8 * i as u64, word, s));
                    break 'search;
                }
                self.counters.add(HTS_FP_FALSE_POSITIVE, 1);
            }
        }
        let new_slot =
            (e.op != WriteOp::Delete).then(|| Slot { fp: p.fp, units: e.units, block: layout::decode_addr(e.addr) });
        let new_word = new_slot.map(Slot::encode);
        // on_write refused a write without a block: units > 0, the word is not empty.
        assert_eq!(new_word.and_then(Slot::decode), new_slot, "a slot word decodes to what was encoded");
        if new_word.is_some() {
            known.insert(e.addr, e.key.clone());
        }
        match found {
            Some((at, old, s)) => {
                let new = match e.op {
                    WriteOp::Delete => 0,
                    _ => new_word.expect("a write of a block"),
                };
                let seen = ctx.local_cas(at, old, new).await?;
                if seen != old {
                    return Err(corrupt(format!("slot {at:#x} changed under its only writer ({old:#x} -> {seen:#x})")));
                }
                Ok(Effect { existed: true, old_addr: layout::encode_addr(s.block), old_units: s.units })
            }
            None => {
                if e.op != WriteOp::Upsert {
                    return Ok(Effect::default());
                }
                let word = new_word.expect("an upsert writes a block");
                if let Some(at) = chain.iter().find_map(|(off, words)| first_empty(&self.g, *off, words)) {
                    let seen = ctx.local_cas(at, 0, word).await?;
                    if seen != 0 {
                        return Err(corrupt(format!("empty slot {at:#x} filled under its only writer")));
                    }
                    return Ok(Effect::default());
                }
                if *reserved == 0 {
                    return Err(corrupt("an insert into a full chain found no reserved bucket".into()));
                }
                *reserved -= 1;
                let bucket = {
                    let mut s = lock(&self.shared);
                    s.pool_reserved[w] -= 1;
                    s.pool_next[w] += 1;
                    self.g.pool_offset(w as u16) + (s.pool_next[w] - 1) * layout::BUCKET_BYTES
                };
                // ship reserved it: pool_next + pool_reserved never passes pool_buckets.
                assert!(
                    self.g.is_pool_bucket(bucket) && self.g.pool_of(bucket) == w as u16,
                    "bucket {bucket:#x} outside pool {w}"
                );
                self.link_bucket(ctx, chain.last().expect("a chain has its head").0, bucket, word).await?;
                Ok(Effect::default())
            }
        }
    }

    /// Takes the next batch from log `w`: the oldest entry and whatever else is queued, up to
    /// the entry and message limits.
    fn take_more(&self, w: usize, first: Pending) -> Vec<Pending> {
        let limit = self.o.max_message_bytes as usize - super::wire::FIXED_BYTES;
        let mut bytes = super::wire::entry_bytes(first.entry.key.len());
        let mut batch = vec![first];
        while batch.len() < self.o.batch_entries as usize {
            let fits = |p: &Pending| bytes + super::wire::entry_bytes(p.entry.key.len()) <= limit;
            let Some(next) = self.logs[w].pop_if(fits) else { break };
            bytes += super::wire::entry_bytes(next.entry.key.len());
            batch.push(next);
        }
        batch
    }

    async fn worker<C: ServerCtx>(&self, ctx: C, w: usize) {
        if w == 0 {
            self.start(&ctx).await;
        }
        let pipelined = self.o.planted(PIPELINED_SYNC);
        let mut in_flight = None;
        loop {
            self.wait_serving(w).await;
            let first = match (&in_flight, pipelined) {
                (Some(_), _) => match self.logs[w].try_pop() {
                    Some(p) => p,
                    None => {
                        let s = in_flight.take().expect("checked");
                        self.finish(&ctx, w, s).await;
                        self.end_batch(w);
                        continue;
                    }
                },
                (None, _) => self.logs[w].pop().await,
            };
            let go = {
                let mut s = lock(&self.shared);
                let go = s.state == ServerState::Serving;
                if go {
                    s.in_batch[w] = true;
                }
                go
            };
            if !go {
                self.counters.add(HTS_ENTRY_BLOCKED, 1);
                let _ = ctx.reply(first.to, Reply::Blocked.encode());
                continue;
            }
            let batch = self.take_more(w, first);
            let Some(shipped) = self.ship(&ctx, w, batch).await else {
                if in_flight.is_none() {
                    self.end_batch(w);
                }
                continue;
            };
            if pipelined {
                // The plant: ship this batch before the last one's ack (two in flight).
                if let Some(previous) = in_flight.replace(shipped) {
                    self.finish(&ctx, w, previous).await;
                }
            } else {
                self.finish(&ctx, w, shipped).await;
                self.end_batch(w);
            }
        }
    }

    fn end_batch(&self, w: usize) {
        lock(&self.shared).in_batch[w] = false;
        self.idle.notify_one();
    }
}

/// The HTS offset of the first empty slot of a bucket, if any.
fn first_empty(g: &Geometry, off: u64, words: &[u64; 8]) -> Option<u64> {
    words[..g.slots].iter().position(|&w| w == 0).map(|i| off + 8 * i as u64)
}

impl<C: ServerCtx> Service<C> for Hts {
    /// A copy for another run from a loaded image: the table lives in the node's memory (in the
    /// image); this is the server's bookkeeping. Refused unless quiescent (no batch in flight,
    /// no write logged and unshipped, no commit query waiting). Counters start at zero.
    fn fork(&self) -> Option<Hts> {
        let shared = lock(&self.shared).clone();
        self.quiet(&shared).then(|| Hts {
            o: self.o.clone(),
            g: self.g,
            shared: Mutex::new(shared),
            logs: self.logs.iter().map(|_| Queue::new()).collect(),
            serving: self.serving.iter().map(|_| Notify::new()).collect(),
            idle: Notify::new(),
            counters: ServerCounters::default(),
        })
    }

    /// Whether [`Service::fork`] would copy, without the copy.
    fn forks(&self) -> bool {
        self.quiet(&lock(&self.shared))
    }

    async fn handle(self: Arc<Self>, ctx: C, request: Vec<u8>) -> Vec<u8> {
        let reply = match Request::decode(&request) {
            Ok(Request::Status) => {
                let s = lock(&self.shared);
                Reply::Status { state: s.state, incarnation: s.incarnation, init_ns: s.init_ns }
            }
            Ok(Request::Init) => self.on_init(&ctx).await,
            Ok(Request::PeerRecovering) => self.on_peer_recovering().await,
            Ok(Request::PeerReady) => self.on_peer_ready(),
            Ok(other) => Reply::Error(format!("the HTS does not serve {other:?}")),
            Err(e) => Reply::Error(e.to_string()),
        };
        reply.encode()
    }

    async fn dispatch(self: Arc<Self>, ctx: C, request: Vec<u8>, responder: Responder) -> Option<Vec<u8>> {
        if let Some(refused) = super::wire::refuse_oversized(&request, self.o.max_message_bytes, &self.counters) {
            return Some(refused);
        }
        match Request::decode(&request) {
            Ok(Request::Write(e)) => self.on_write(&ctx, e, responder).await.map(|r| r.encode()),
            Ok(Request::CommitQuery { incarnation, worker, seq }) => {
                self.on_commit_query(incarnation, worker, seq, responder).map(|r| r.encode())
            }
            _ => Some(self.handle(ctx, request).await),
        }
    }

    fn workers(&self) -> u32 {
        self.o.hts_workers as u32
    }

    async fn run_worker(self: Arc<Self>, ctx: C, index: u32) {
        self.worker(ctx, index as usize).await;
    }
}

/// The reply to a request whose serving failed with `e`: a transport failure of the server's
/// own verbs (a timeout, a node down) is `Failed`, anything else a refusal.
fn error_reply(e: &VerbsError) -> Reply {
    match e {
        VerbsError::Timeout(_) | VerbsError::NodeDown(_) => Reply::Failed(e.to_string()),
        _ => Reply::Error(e.to_string()),
    }
}

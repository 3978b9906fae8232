//! A client of HStore (digest §3.1–§3.5, §2.6).
//!
//! - **GET**: `[READ ready word, READ bucket]` to the HTS (one doorbell batch), then the block
//!   of each fingerprint-matching slot from the memory pool until the key matches; chains
//!   cost one more batch per bucket. If the HTS is down or rebuilding (a failed READ, a ready
//!   word of 0), GETs go to the SLS for a while (degraded mode): a `Get` call, then the block.
//! - **PUT / UPDATE**: allocate a block, WRITE it and wait for the completion (data before
//!   index, A3), then call the HTS; the reply names the block the key pointed to before, which
//!   is freed after the lease (V3). An update of an absent key frees its unpublished block at
//!   once. **DELETE** is the call alone.
//! - **SCAN**: a `Scan` call to the SLS, then one READ per item, one after another (the
//!   paper's 1 + n round trips); long answers come in pages under the message limit.
//!
//! A read whose block READs end more than `lease_ns` after it started starts again: a block
//! freed by a write that swapped it out after the read took its address may have been reused
//! since, but never sooner than `lease_ns` after the swap (V3's fix).

use super::layout::{self, Block, Geometry};
use super::wire::{Effect, Entry, HTS_SERVICE, Reply, Request, SLS_SERVICE, WriteOp};
use super::{
    BATCH_SHARED, BLOCKS_RETIRED, BLOCKS_REUSED, CHAIN_HOP, DEGRADED_GET, FOREIGN_BLOCK_LEAKED, FP_FALSE_POSITIVE,
    GET_INDEX_NS, GET_KV_NS, GET_LATENCY_NS, GET_OPS, HStore, HStoreNode, HStoreOptions, INCARNATION_CONFIRMED,
    INCARNATION_RECONFIRMED, INCARNATION_RESTART, LEASE_RESTART, NO_READY_FENCE, NO_WRITE_WAIT, PUT_INDEX_NS,
    PUT_KV_NS, PUT_LATENCY_NS, PUT_OPS, PUT_QUEUE_NS, PUT_RPC_NS, PUT_SYNC_NS, RETRY_ANSWERED, SCAN_BLOCKED,
    SCAN_COMMIT_WAIT, SCAN_DRAINED, SCAN_INDEX_NS, SCAN_KV_NS, SCAN_LATENCY_NS, SCAN_OPS, SCAN_PAGE, SCAN_RETRY,
    SCAN_RPC, SKIPPED_BAD_BLOCK, TABLE_REBUILDING, WRITE_BLOCKED, WRITE_RETRY,
};
use crate::{Change, Counters, Index, IndexError, IndexKind, Pairs};
use dmkit_rdma::{Buf, Client, NodeId, RemoteAddr, Request as Verb, VerbsError};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One client's handle.
#[derive(Debug)]
pub struct HStoreHandle<C> {
    o: HStoreOptions,
    g: Geometry,
    node: Arc<HStoreNode>,
    ctx: C,
    /// This client's last write request id (retries reuse it).
    req_id: u64,
    /// Sequence of this client's blocks (their `ts`).
    blocks: u64,
    counters: Counters,
    /// Time in this operation's index accesses (bucket READs, SLS calls) and block READs.
    get_index_ns: u64,
    kv_ns: u64,
}

/// How a lookup through the table ended.
enum Lookup {
    Done(Option<Vec<u8>>),
    /// The lease ran out: start again.
    Restart,
    /// The table changed incarnation between two buckets: start again.
    NewIncarnation,
    /// The HTS is down or rebuilding: ask the SLS.
    Degraded,
    /// A server is recovering: wait and try again.
    Blocked,
}

/// Bound on buckets one GET follows (a chain longer than every pool together is corrupt).
const MAX_HOPS: u32 = 1 << 20;

impl<C: Client + Clone + 'static> HStoreHandle<C> {
    pub(crate) fn new(o: HStoreOptions, node: Arc<HStoreNode>, ctx: C) -> HStoreHandle<C> {
        HStoreHandle {
            g: o.geometry(),
            o,
            node,
            ctx,
            req_id: 0,
            blocks: 0,
            counters: Counters::default(),
            get_index_ns: 0,
            kv_ns: 0,
        }
    }

    fn hts(&self) -> NodeId {
        self.o.hts_node()
    }

    fn within_lease(&self, t0: u64) -> bool {
        self.o.lease_ns.is_none_or(|l| self.ctx.now_ns() - t0 <= l)
    }

    fn mark_hts_down(&self) {
        // Saturating: the longest interval the options accept means "never probe again", not
        // a sum that wraps to the past (and probes at once).
        let until = self.ctx.now_ns().saturating_add(self.o.down_probe_ns);
        self.node.hts_down_until_ns.fetch_max(until, Ordering::Relaxed);
    }

    /// Waits before trying again: a sleep, then a yield (the client waits for someone else —
    /// a recovering server — and says so to the schedule explorer's PCT).
    async fn backoff(&mut self, attempt: u32) {
        self.counters.retries += 1;
        self.ctx.sleep(self.o.retry_wait_ns(attempt)).await;
        self.ctx.yield_now().await;
    }

    /// A block READ found something that is not the complete block a table or SLS entry
    /// promised. Within the lease that is corruption in the default protocol; the paper's
    /// reader skips it (a reused or torn block).
    fn bad_block(&mut self, at: RemoteAddr, t0: u64) -> Result<(), IndexError> {
        if self.o.lease_ns.is_some() && self.within_lease(t0) && !self.o.planted(NO_WRITE_WAIT) {
            return Err(IndexError::Corrupt(format!("the block at {at} is not a complete block of its key")));
        }
        self.counters.event(SKIPPED_BAD_BLOCK);
        Ok(())
    }

    async fn read_block(&mut self, addr: u64, units: u8) -> Result<(RemoteAddr, Block), IndexError> {
        let at = layout::decode_addr(addr);
        let t0 = self.ctx.now_ns();
        let bytes = self.ctx.read(at, Buf::zeroed(units as usize * layout::UNIT as usize)).await?;
        assert_eq!(bytes.len(), units as usize * layout::UNIT as usize, "a READ returns the bytes asked");
        self.kv_ns += self.ctx.now_ns() - t0;
        Ok((at, layout::decode_block(&bytes)))
    }

    /// GET through the table.
    async fn get_table(&mut self, key: &[u8], t0: u64) -> Result<Lookup, IndexError> {
        let p = self.g.place(key);
        assert!(p.bucket < self.g.buckets, "bucket {} outside the table's {}", p.bucket, self.g.buckets);
        let hts = self.hts();
        let mut off = self.g.bucket_offset(p.bucket);
        let mut incarnation = None;
        // The two READs of a batch may sample in either order (memory model rule 3): a bucket
        // sampled before a rebuilding table's ready word was set would pass for a complete
        // one. The ready word can only go from 0 to an incarnation once per incarnation, so a
        // compute node that has seen incarnation I complete trusts an unfenced batch that reads
        // I; a new incarnation is confirmed once with the bucket READ fenced behind the word.
        let known = self.node.table_incarnation.load(Ordering::Relaxed);
        let mut fence = false;
        let mut hop = 0;
        while hop < MAX_HOPS {
            let bucket_read = Verb::read_len(RemoteAddr::host(hts, off), layout::BUCKET_BYTES as usize);
            let batch = vec![
                Verb::read_len(RemoteAddr::host(hts, layout::READY_OFFSET), 8),
                if fence { bucket_read.fenced() } else { bucket_read },
            ];
            let t_bucket = self.ctx.now_ns();
            let posted = self.ctx.post(batch).await;
            self.get_index_ns += self.ctx.now_ns() - t_bucket;
            let responses = match posted {
                Ok(r) => r,
                Err(VerbsError::NodeDown(_)) => {
                    self.mark_hts_down();
                    return Ok(Lookup::Degraded);
                }
                Err(e) => return Err(e.into()),
            };
            let mut responses = responses.into_iter();
            let ready = responses.next().expect("two responses").into_buf()?.u64_at(0);
            let bucket = responses.next().expect("two responses").into_buf()?;
            assert_eq!(bucket.len() as u64, layout::BUCKET_BYTES, "a READ returns the bytes asked");
            if ready == 0 {
                // A restarted HTS rebuilding its table.
                self.counters.event(TABLE_REBUILDING);
                self.mark_hts_down();
                return Ok(Lookup::Degraded);
            }
            if incarnation.is_some_and(|i| i != ready) {
                return Ok(Lookup::NewIncarnation);
            }
            if ready != known && !fence && !self.o.planted(NO_READY_FENCE) {
                // A table this compute node has not seen complete: read again, fenced. The race
                // it closes (this batch's bucket READ sampled a table still being rebuilt, its
                // ready-word READ the word written after) is not observable here; no preset has
                // reached it since verbs stopped crossing incarnations (the `no-ready-fence`
                // test is ignored), so `incarnation_reconfirmed` only shows the fence ran.
                self.counters.event(INCARNATION_CONFIRMED);
                if known != 0 {
                    self.counters.event(INCARNATION_RECONFIRMED);
                }
                fence = true;
                continue;
            }
            if fence && ready != known {
                self.node.table_incarnation.store(ready, Ordering::Relaxed);
            }
            incarnation = Some(ready);
            if hop > 0 {
                self.counters.event(CHAIN_HOP);
            }
            hop += 1;
            let words = layout::bucket_words(&bucket);
            for &word in &words[..self.g.slots] {
                let Some(s) = layout::Slot::decode(word) else { continue };
                if s.fp != p.fp {
                    continue;
                }
                let (at, block) = self.read_block(layout::encode_addr(s.block), s.units).await?;
                match block {
                    Block::Valid { key: k, value, .. } if k == key => {
                        return Ok(if self.within_lease(t0) { Lookup::Done(Some(value)) } else { Lookup::Restart });
                    }
                    Block::Valid { .. } => self.counters.event(FP_FALSE_POSITIVE),
                    Block::Invalid => self.bad_block(at, t0)?,
                }
            }
            let next = words[7];
            if next == 0 {
                return Ok(if self.within_lease(t0) { Lookup::Done(None) } else { Lookup::Restart });
            }
            if !self.g.is_pool_bucket(next) {
                return Err(IndexError::Corrupt(format!("bucket {off:#x} links {next:#x}, not an overflow bucket")));
            }
            off = next;
        }
        Err(IndexError::Corrupt(format!("bucket {}'s chain is longer than {MAX_HOPS}", p.bucket)))
    }

    /// GET through the SLS (degraded mode).
    async fn get_sls(&mut self, key: &[u8], t0: u64) -> Result<Lookup, IndexError> {
        self.counters.event(DEGRADED_GET);
        let t0_call = self.ctx.now_ns();
        let called = self.ctx.call(self.o.sls_node(), SLS_SERVICE, Request::Get { key: key.to_vec() }.encode()).await;
        self.get_index_ns += self.ctx.now_ns() - t0_call;
        let reply = match called {
            Ok(b) => Reply::decode(&b)?,
            Err(VerbsError::NodeDown(_)) => return Ok(Lookup::Blocked),
            Err(e) => return Err(e.into()),
        };
        match reply {
            Reply::Found { addr, units } => {
                let (at, block) = self.read_block(addr, units).await?;
                match block {
                    Block::Valid { key: k, value, .. } if k == key => {
                        Ok(if self.within_lease(t0) { Lookup::Done(Some(value)) } else { Lookup::Restart })
                    }
                    _ => {
                        self.bad_block(at, t0)?;
                        Ok(Lookup::Restart)
                    }
                }
            }
            Reply::Absent => Ok(Lookup::Done(None)),
            Reply::Blocked => Ok(Lookup::Blocked),
            other => Err(IndexError::Corrupt(format!("the SLS answered a Get with {other:?}"))),
        }
    }

    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        HStore::limits(&self.o).check_key(key)?;
        let t_start = self.ctx.now_ns();
        (self.get_index_ns, self.kv_ns) = (0, 0);
        let found = self.get_attempts(key).await;
        let e = &mut self.counters.events;
        e.add(GET_OPS, 1);
        e.add(GET_LATENCY_NS, self.ctx.now_ns() - t_start);
        e.add(GET_INDEX_NS, self.get_index_ns);
        e.add(GET_KV_NS, self.kv_ns);
        found
    }

    async fn get_attempts(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        for attempt in 0..self.o.max_retries {
            let t0 = self.ctx.now_ns();
            let down = self.node.hts_down_until_ns.load(Ordering::Relaxed) > t0;
            let mut lookup = if down { Lookup::Degraded } else { self.get_table(key, t0).await? };
            if matches!(lookup, Lookup::Degraded) {
                lookup = self.get_sls(key, t0).await?;
            }
            match lookup {
                Lookup::Done(v) => return Ok(v),
                Lookup::Restart => self.counters.event(LEASE_RESTART),
                Lookup::NewIncarnation => self.counters.event(INCARNATION_RESTART),
                Lookup::Blocked => self.backoff(attempt).await,
                Lookup::Degraded => unreachable!("resolved above"),
            }
        }
        Err(IndexError::RetriesExhausted { op: "search", retries: self.o.max_retries })
    }

    /// Gives back a block the table no longer points to: after the lease (V3's fix), or at
    /// once. Blocks another compute node carved are leaked (see the module doc).
    fn retire(&mut self, addr: u64, units: u8) -> Result<(), IndexError> {
        let block = layout::decode_addr(addr);
        let bytes = units as u64 * layout::UNIT;
        if !self.node.chunks.owns(block) {
            self.counters.event(FOREIGN_BLOCK_LEAKED);
            return Ok(());
        }
        match self.o.lease_ns {
            // Saturating: a lease near u64::MAX keeps the block forever; a wrapping sum made
            // it reusable at once, under readers whose lease had not run out (found by the
            // checker's `crash-hts-lease-max` preset).
            Some(lease) => {
                self.node.quarantine(self.ctx.now_ns().saturating_add(lease).saturating_add(1), block, bytes)
            }
            None => self.node.chunks.free(block, bytes)?,
        }
        self.counters.event(BLOCKS_RETIRED);
        Ok(())
    }

    /// PUT, UPDATE and DELETE: returns whether the key existed.
    async fn write_op(&mut self, op: WriteOp, key: &[u8], value: &[u8]) -> Result<bool, IndexError> {
        let limits = HStore::limits(&self.o);
        limits.check_key(key)?;
        let t_start = self.ctx.now_ns();
        let mut block = None;
        let mut kv_ns = 0;
        if op != WriteOp::Delete {
            limits.check_value(value)?;
            let units = layout::units_for(key.len(), value.len());
            let released = self.node.release(t_start)?;
            if released > 0 {
                self.counters.events.add(BLOCKS_REUSED, released);
            }
            // The options bound a value to what fits MAX_UNITS beside the longest key (validate).
            assert!((1..=layout::MAX_UNITS).contains(&units), "a block of {units} units");
            let at = self.node.chunks.alloc(&self.ctx, units * layout::UNIT, layout::UNIT).await?;
            assert_eq!(layout::decode_addr(layout::encode_addr(at)), at, "a block address survives its 48 bits");
            self.blocks += 1;
            let ts = layout::timestamp(self.ctx.identity().client, self.blocks);
            let data = Buf::from(layout::encode_block(key, value, ts));
            assert_eq!(data.len() as u64, units * layout::UNIT, "a block has the units allocated");
            if self.o.planted(NO_WRITE_WAIT) {
                // The plant: the WRITE is posted (it will land) but not waited for.
                drop(self.ctx.write(at, data));
            } else {
                self.ctx.write(at, data).await?;
            }
            kv_ns = self.ctx.now_ns() - t_start;
            block = Some((at, units as u8));
        }
        self.req_id += 1;
        let entry = Entry {
            op,
            units: block.map_or(0, |b| b.1),
            addr: block.map_or(0, |b| layout::encode_addr(b.0)),
            client: self.ctx.identity().client,
            req_id: self.req_id,
            key: key.to_vec(),
        };
        let request = Request::Write(entry).encode();
        for attempt in 0..self.o.max_retries {
            let t_call = self.ctx.now_ns();
            let reply = match self.ctx.call(self.hts(), HTS_SERVICE, request.clone()).await {
                Ok(b) => Reply::decode(&b)?,
                Err(VerbsError::NodeDown(node)) => {
                    self.mark_hts_down();
                    if !self.o.retry_writes {
                        // The paper's client: the write failed (yet the SLS may hold it, V2).
                        return Err(VerbsError::NodeDown(node).into());
                    }
                    self.counters.event(WRITE_RETRY);
                    self.backoff(attempt).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match reply {
                Reply::Done { effect, timing } => {
                    let now = self.ctx.now_ns();
                    if timing.batch > 0 && op != WriteOp::Delete {
                        let server = timing.queue_ns + timing.sync_ns + timing.index_ns;
                        let e = &mut self.counters.events;
                        e.add(PUT_OPS, 1);
                        e.add(PUT_LATENCY_NS, now - t_start);
                        e.add(PUT_KV_NS, kv_ns);
                        e.add(PUT_RPC_NS, (now - t_call).saturating_sub(server));
                        e.add(PUT_QUEUE_NS, timing.queue_ns);
                        e.add(PUT_SYNC_NS, timing.sync_ns);
                        e.add(PUT_INDEX_NS, timing.index_ns);
                    }
                    if timing.batch > 1 {
                        self.counters.event(BATCH_SHARED);
                    }
                    if timing.batch == 0 {
                        self.counters.event(RETRY_ANSWERED);
                    }
                    self.finish(op, block, effect)?;
                    return Ok(effect.existed);
                }
                Reply::Blocked => {
                    self.counters.event(WRITE_BLOCKED);
                    self.backoff(attempt).await;
                }
                Reply::Full => {
                    if let Some((at, units)) = block {
                        self.node.chunks.free(at, units as u64 * layout::UNIT)?;
                    }
                    return Err(IndexError::Full);
                }
                Reply::Error(m) => return Err(IndexError::Corrupt(format!("the HTS refused a write: {m}"))),
                Reply::Failed(m) => {
                    return Err(IndexError::Verbs(VerbsError::Protocol(format!(
                        "the HTS failed to serve a write: {m}"
                    ))));
                }
                other => return Err(IndexError::Corrupt(format!("the HTS answered a write with {other:?}"))),
            }
        }
        Err(IndexError::RetriesExhausted { op: "write", retries: self.o.max_retries })
    }

    /// After a write's effect: free what no one can reach any more.
    fn finish(&mut self, op: WriteOp, block: Option<(RemoteAddr, u8)>, effect: Effect) -> Result<(), IndexError> {
        let mine = block.map(|(at, _)| layout::encode_addr(at));
        if op == WriteOp::Update && !effect.existed {
            // Never published: neither server took it.
            if let Some((at, units)) = block {
                self.node.chunks.free(at, units as u64 * layout::UNIT)?;
            }
        }
        if effect.old_addr != 0 && Some(effect.old_addr) != mine {
            self.retire(effect.old_addr, effect.old_units)?;
        }
        Ok(())
    }

    async fn scan_pairs(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        let limits = HStore::limits(&self.o);
        for b in [start, end] {
            if let Bound::Included(k) | Bound::Excluded(k) = b {
                if k.len() > limits.max_key_bytes {
                    return Err(IndexError::KeyTooLong { len: k.len(), max: limits.max_key_bytes });
                }
            }
        }
        let mut out: Pairs = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let end = end.map(<[u8]>::to_vec);
        let mut from = start.map(<[u8]>::to_vec);
        let mut t0 = self.ctx.now_ns();
        let t_start = t0;
        self.kv_ns = 0;
        let mut index_ns = 0;
        for attempt in 0..self.o.max_retries {
            let want = (limit - out.len()).min(u32::MAX as usize) as u32;
            let request = Request::Scan { start: from.clone(), end: end.clone(), limit: want };
            let t_call = self.ctx.now_ns();
            let called = self.ctx.call(self.o.sls_node(), SLS_SERVICE, request.encode()).await;
            index_ns += self.ctx.now_ns() - t_call;
            let reply = match called {
                Ok(b) => Reply::decode(&b)?,
                Err(VerbsError::NodeDown(_)) => {
                    self.counters.event(SCAN_RETRY);
                    self.backoff(attempt).await;
                    t0 = self.ctx.now_ns();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let (items, more) = match reply {
                Reply::Items { items, more, drained, waited } => {
                    self.counters.event(SCAN_RPC);
                    if drained > 0 {
                        self.counters.event(SCAN_DRAINED);
                    }
                    if waited {
                        self.counters.event(SCAN_COMMIT_WAIT);
                    }
                    (items, more)
                }
                Reply::Blocked => {
                    self.counters.event(SCAN_BLOCKED);
                    self.backoff(attempt).await;
                    t0 = self.ctx.now_ns();
                    continue;
                }
                other => return Err(IndexError::Corrupt(format!("the SLS answered a scan with {other:?}"))),
            };
            let mut restart = false;
            for item in items {
                let (at, block) = self.read_block(item.addr, item.units).await?;
                if !self.within_lease(t0) {
                    restart = true;
                    break;
                }
                match block {
                    Block::Valid { key, value, .. } if key == item.key => {
                        from = Bound::Excluded(key.clone());
                        out.push((key, value));
                    }
                    _ => self.bad_block(at, t0)?,
                }
            }
            if restart {
                self.counters.event(LEASE_RESTART);
                t0 = self.ctx.now_ns();
                continue;
            }
            if out.len() >= limit || !more {
                let e = &mut self.counters.events;
                e.add(SCAN_OPS, 1);
                e.add(SCAN_LATENCY_NS, self.ctx.now_ns() - t_start);
                e.add(SCAN_INDEX_NS, index_ns);
                e.add(SCAN_KV_NS, self.kv_ns);
                return Ok(out);
            }
            self.counters.event(SCAN_PAGE);
        }
        Err(IndexError::RetriesExhausted { op: "scan", retries: self.o.max_retries })
    }
}

impl<C: Client + Clone + 'static> Index for HStoreHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.get(key).await
    }

    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        match &change {
            Change::Upsert(value) => self.write_op(WriteOp::Upsert, key, value).await,
            Change::Update(value) => self.write_op(WriteOp::Update, key, value).await,
            Change::Delete => self.write_op(WriteOp::Delete, key, &[]).await,
        }
    }

    async fn scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        self.scan_pairs(start, end, limit).await
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

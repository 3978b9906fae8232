//! The skiplist server (digest §2.3, §2.4, §2.8, §3.2 "SLS", §3.5, §3.6).
//!
//! RPC threads append a log sync's entries to the logs of the partitions their keys hash to and
//! ack at once (HStore), or once the partitions' workers applied them (HStore (sync)). Partition
//! worker `p` owns skiplist `p`: it applies its log in order, and serves the tasks queued for it
//! — a share of a scan, a lookup for a degraded GET, a page of a dump for a recovering HTS —
//! each after draining its log up to the point the task arrived at (decision 23, so a task
//! waits for a bounded drain, L3). With `commit_wait` (V1's fix) a scan or lookup also waits
//! until every entry it drained is committed, i.e. applied to the hash table: an entry is
//! committed once the HTS's commit point for its worker passes it, or once its HTS incarnation
//! is known to be dead (the rebuilt table will hold it).
//!
//! A scan's shares are merged by the worker that finishes last, which sends the deferred reply:
//! at most `limit` items and at most `max_message_bytes`, `more` set if the bytes cut it short.

use super::layout::{self, Geometry};
use super::skiplist::{SkipList, Value, Visits};
use super::wire::{Dedup, Effect, Entry, HTS_SERVICE, Item, Reply, Request, ServerState, WriteOp};
use super::{
    HStoreOptions, SLS_COMMIT_DEAD, SLS_COMMIT_QUERIES, SLS_COMMIT_QUERY_ERRORS, SLS_DEAD_LOG_SYNC,
    SLS_DEDUP_OUT_OF_ORDER, SLS_DUMP_PAGES, SLS_ENTRIES_APPLIED, SLS_ENTRIES_LOGGED, SLS_GETS, SLS_GETS_WAITED,
    SLS_INCARNATIONS_DEAD, SLS_LOG_SYNCS, SLS_RECOVERED_ITEMS, SLS_RECOVERIES, SLS_RECOVERY_NS, SLS_SCANS,
    SLS_SCANS_DRAINED, ServerCounters,
};
use crate::common::batch::post_per_node;
use crate::common::primitive::{Mutex, lock};
use crate::spec;
use dmkit_rdma::service::{Responder, ServerCtx, Service};
use dmkit_rdma::sync::Notify;
use dmkit_rdma::{CpuWork, RemoteAddr, Request as Verb, VerbsError};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// A shipped entry in a partition's log.
#[derive(Debug)]
struct Logged {
    incarnation: u64,
    worker: u16,
    seq: u64,
    entry: Entry,
    /// HStore (sync): the batch whose ack waits for this entry.
    ack: Option<Arc<BatchAck>>,
}

#[derive(Debug)]
struct BatchAck {
    left: Mutex<usize>,
    to: Responder,
}

#[derive(Debug)]
struct ScanJob {
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    limit: usize,
    to: Responder,
    /// Shares still to come, the shares so far, entries drained, whether any share waited.
    acc: Mutex<(usize, Vec<Vec<Item>>, u32, bool)>,
}

#[derive(Debug)]
enum Task {
    Scan(Arc<ScanJob>),
    Get { key: Vec<u8>, to: Responder },
    Dump { after: Option<Vec<u8>>, to: Responder },
}

/// A task and the log position it waits for.
#[derive(Debug)]
struct Queued {
    task: Task,
    /// Entries appended to the log when the task arrived (drain up to here).
    tail: u64,
    /// Entries applied when it arrived (to count what it drained).
    applied_then: u64,
}

#[derive(Debug)]
struct Part {
    log: VecDeque<Logged>,
    appended: u64,
    applied: u64,
    tasks: VecDeque<Queued>,
    list: SkipList,
    /// The highest sequence number applied here, per (HTS incarnation, HTS worker).
    applied_max: BTreeMap<(u64, u16), u64>,
}

impl Part {
    /// Every logged entry applied and no task queued: what a copy for another run needs.
    fn quiet(&self) -> bool {
        self.log.is_empty() && self.tasks.is_empty()
    }
}

#[derive(Debug)]
struct Partition {
    part: Mutex<Part>,
    /// Work arrived (an entry or a task).
    work: Notify,
}

#[derive(Clone, Debug)]
struct Shared {
    state: ServerState,
    init_ns: u64,
    /// The last sequence number seen from each (incarnation, worker): a re-sent batch's
    /// entries are not logged twice.
    seen: BTreeMap<(u64, u16), u64>,
    /// Commit points per (incarnation, worker).
    committed: BTreeMap<(u64, u16), u64>,
    /// Every HTS incarnation below this is dead; the newest seen.
    dead_below: u64,
    newest: u64,
    /// Each client's last applied write and its effect (the HTS rebuilds its record from it).
    dedup: BTreeMap<u32, (u64, Effect)>,
}

/// The skiplist server's state (one per incarnation).
#[derive(Debug)]
pub struct Sls {
    o: HStoreOptions,
    g: Geometry,
    shared: Mutex<Shared>,
    parts: Vec<Partition>,
    /// Held while a log sync's entries are appended and while a task takes its log position:
    /// a task never falls between two entries of one batch, so a scan or lookup waiting on
    /// batch B's commit has applied all of B here. Without it, RPC threads on OS threads (the
    /// hardware host) could queue a scan between a batch's entries, and in sync mode the
    /// scan's commit wait and the batch's ack would wait on each other.
    appending: Mutex<()>,
    counters: ServerCounters,
}

/// What a worker takes next.
enum Work {
    Apply(Logged),
    Serve(Queued),
}

impl Sls {
    pub fn new(o: HStoreOptions) -> Sls {
        let parts = (0..o.sls_partitions)
            .map(|p| Partition {
                part: Mutex::new(Part {
                    log: VecDeque::new(),
                    appended: 0,
                    applied: 0,
                    tasks: VecDeque::new(),
                    // The table is sized for about 3 keys a bucket (`sized_for`).
                    list: SkipList::with_capacity(
                        0x534c_0000 ^ o.hash_seed ^ p as u64,
                        (o.buckets * 3 / u64::from(o.sls_partitions.max(1))) as usize,
                    ),
                    applied_max: BTreeMap::new(),
                }),
                work: Notify::new(),
            })
            .collect();
        Sls {
            g: o.geometry(),
            shared: Mutex::new(Shared {
                state: ServerState::Fresh,
                init_ns: 0,
                seen: BTreeMap::new(),
                committed: BTreeMap::new(),
                dead_below: 0,
                newest: 0,
                dedup: BTreeMap::new(),
            }),
            parts,
            appending: Mutex::new(()),
            counters: ServerCounters::default(),
            o,
        }
    }

    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        self.counters.snapshot()
    }

    pub fn state(&self) -> ServerState {
        lock(&self.shared).state
    }

    /// Every entry of every partition with its unapplied log entries applied (what the
    /// skiplists will hold once the workers catch up), passed to `f` one at a time; returns how
    /// many. For the invariant walk's comparison with the table, without a copy of every key: a
    /// partition is copied only if its log has entries to apply to it.
    pub fn for_each_settled(&self, mut f: impl FnMut(&[u8], Value) -> Result<(), String>) -> Result<u64, String> {
        let mut n = 0;
        for (p, partition) in self.parts.iter().enumerate() {
            let mut part = lock(&partition.part);
            part.list.settle();
            part.list.check().map_err(|e| format!("skiplist {p}: {e}"))?;
            let applied;
            let list = if part.log.is_empty() {
                &part.list
            } else {
                let mut list = part.list.clone();
                for l in &part.log {
                    apply_entry(&mut list, &l.entry, true);
                }
                applied = list;
                &applied
            };
            for (key, value) in list.iter() {
                if self.g.place(key).partition as usize != p {
                    return Err(format!("key {key:02x?} is in skiplist {p}, its hash says otherwise"));
                }
                f(key, value)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Incarnations below `incarnation` are dead (a newer HTS spoke).
    fn newer_incarnation(&self, s: &mut Shared, incarnation: u64) {
        if incarnation > s.newest {
            s.newest = incarnation;
        }
        if incarnation > s.dead_below {
            if s.dead_below > 0 {
                self.counters.add(SLS_INCARNATIONS_DEAD, 1);
            }
            s.dead_below = incarnation;
        }
    }

    fn on_log_sync(
        &self,
        incarnation: u64,
        worker: u16,
        first_seq: u64,
        committed: u64,
        entries: Vec<Entry>,
        to: Responder,
    ) -> Option<Reply> {
        let mut s = lock(&self.shared);
        if s.state != ServerState::Serving {
            return Some(Reply::Blocked);
        }
        if incarnation < s.dead_below {
            self.counters.add(SLS_DEAD_LOG_SYNC, 1);
            return Some(Reply::Error(format!("log sync from dead HTS incarnation {incarnation}")));
        }
        self.newer_incarnation(&mut s, incarnation);
        let c = s.committed.entry((incarnation, worker)).or_insert(0);
        *c = (*c).max(committed);
        let seen = s.seen.entry((incarnation, worker)).or_insert(0);
        let fresh: Vec<(u64, Entry)> = entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| (first_seq.saturating_add(i as u64), e))
            .filter(|(seq, _)| *seq > *seen)
            .collect();
        if let Some((last, _)) = fresh.last() {
            *seen = *last;
        }
        drop(s);
        self.counters.add(SLS_LOG_SYNCS, 1);
        self.counters.add(SLS_ENTRIES_LOGGED, fresh.len() as u64);
        let ack = (self.o.sync_skiplist && !fresh.is_empty())
            .then(|| Arc::new(BatchAck { left: Mutex::new(fresh.len()), to }));
        let mut touched = vec![false; self.parts.len()];
        let appending = lock(&self.appending);
        for (seq, entry) in fresh {
            let p = self.g.place(&entry.key).partition as usize;
            assert!(p < self.parts.len(), "partition {p} outside the SLS's {}", self.parts.len());
            let mut part = lock(&self.parts[p].part);
            part.log.push_back(Logged { incarnation, worker, seq, entry, ack: ack.clone() });
            part.appended += 1;
            touched[p] = true;
        }
        drop(appending);
        for (p, t) in touched.into_iter().enumerate() {
            if t {
                self.parts[p].work.notify_one();
            }
        }
        match ack {
            Some(_) => None,
            None => Some(Reply::Ok),
        }
    }

    fn on_commit(&self, incarnation: u64, worker: u16, seq: u64) -> Reply {
        let mut s = lock(&self.shared);
        self.newer_incarnation(&mut s, incarnation);
        let c = s.committed.entry((incarnation, worker)).or_insert(0);
        *c = (*c).max(seq);
        Reply::Ok
    }

    /// Queues a task on partition `p` behind its log's current tail.
    fn queue(&self, p: usize, task: Task) {
        let _appending = lock(&self.appending);
        let mut part = lock(&self.parts[p].part);
        let (tail, applied_then) = (part.appended, part.applied);
        part.tasks.push_back(Queued { task, tail, applied_then });
        drop(part);
        self.parts[p].work.notify_one();
    }

    fn on_scan(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>, limit: u32, to: Responder) -> Option<Reply> {
        if lock(&self.shared).state != ServerState::Serving {
            return Some(Reply::Blocked);
        }
        if limit == 0 {
            return Some(Reply::Items { items: Vec::new(), more: false, drained: 0, waited: false });
        }
        self.counters.add(SLS_SCANS, 1);
        let job = Arc::new(ScanJob {
            start,
            end,
            limit: limit as usize,
            to,
            acc: Mutex::new((self.parts.len(), Vec::new(), 0, false)),
        });
        for p in 0..self.parts.len() {
            self.queue(p, Task::Scan(job.clone()));
        }
        None
    }

    fn on_get(&self, key: Vec<u8>, to: Responder) -> Option<Reply> {
        if lock(&self.shared).state != ServerState::Serving {
            return Some(Reply::Blocked);
        }
        self.counters.add(SLS_GETS, 1);
        self.queue(self.g.place(&key).partition as usize, Task::Get { key, to });
        None
    }

    fn on_dump(&self, incarnation: u64, partition: u16, after: Option<Vec<u8>>, to: Responder) -> Option<Reply> {
        let mut s = lock(&self.shared);
        if s.state != ServerState::Serving {
            return Some(Reply::Blocked);
        }
        if partition >= self.o.sls_partitions {
            return Some(Reply::Error(format!("no partition {partition}")));
        }
        // A recovering HTS: every earlier incarnation is dead, its entries committed.
        self.newer_incarnation(&mut s, incarnation);
        drop(s);
        self.queue(partition as usize, Task::Dump { after, to });
        None
    }

    /// The HTS's record of each client's last write, after every partition's dump.
    fn dedup_page(&self, after: Option<u32>) -> Reply {
        let s = lock(&self.shared);
        let room = self.o.max_message_bytes as usize - super::wire::FIXED_BYTES;
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut dedup = Vec::new();
        let mut done = true;
        for (&client, &(req_id, effect)) in s.dedup.range((start, Bound::Unbounded)) {
            if (dedup.len() + 1) * 22 > room {
                done = false;
                break;
            }
            dedup.push(Dedup { client, req_id, effect });
        }
        Reply::Page { items: Vec::new(), dedup, done }
    }

    fn on_init<C: ServerCtx>(&self, ctx: &C) -> Reply {
        let mut s = lock(&self.shared);
        if s.state != ServerState::Fresh {
            return Reply::Error("the SLS is already initialised".into());
        }
        s.state = ServerState::Serving;
        s.init_ns = ctx.now_ns();
        Reply::Ok
    }

    /// The next thing partition `p`'s worker does: a task whose drain is complete, else the
    /// oldest log entry, else nothing.
    fn next_work(&self, p: usize) -> Option<Work> {
        let mut part = lock(&self.parts[p].part);
        if part.tasks.front().is_some_and(|t| part.applied >= t.tail) {
            return part.tasks.pop_front().map(Work::Serve);
        }
        part.log.pop_front().map(Work::Apply)
    }

    async fn apply<C: ServerCtx>(&self, ctx: &C, p: usize, l: Logged) {
        let (effect, visited) = {
            let mut part = lock(&self.parts[p].part);
            let (old, visited) = apply_entry(&mut part.list, &l.entry, !ctx.cpu_is_free());
            part.applied += 1;
            assert!(part.applied <= part.appended, "partition {p} applied more entries than its log took");
            let m = part.applied_max.entry((l.incarnation, l.worker)).or_insert(0);
            *m = (*m).max(l.seq);
            let effect = Effect {
                existed: old.is_some(),
                old_addr: old.map_or(0, |v| v.addr),
                old_units: old.map_or(0, |v| v.units),
            };
            (effect, visited)
        };
        {
            let mut s = lock(&self.shared);
            let d = s.dedup.entry(l.entry.client).or_insert((0, Effect::default()));
            if l.entry.req_id >= d.0 {
                *d = (l.entry.req_id, effect);
            } else {
                self.counters.add(SLS_DEDUP_OUT_OF_ORDER, 1);
            }
        }
        self.counters.add(SLS_ENTRIES_APPLIED, 1);
        charge(ctx, visited).await;
        if let Some(ack) = l.ack {
            let last = {
                let mut left = lock(&ack.left);
                *left -= 1;
                *left == 0
            };
            if last {
                let _ = ctx.reply(ack.to, Reply::Ok.encode());
            }
        }
    }

    /// V1's fix: waits until every entry applied in partition `p` is committed. Returns
    /// whether it had to wait. For each (incarnation, worker) with applied entries past its
    /// known commit point it asks the HTS, which answers once its commit point passes them, or
    /// says the incarnation is gone (as does a failed call: the HTS crashed, and the table that
    /// replaces it is rebuilt from these skiplists, entries included).
    async fn wait_committed<C: ServerCtx>(&self, ctx: &C, p: usize) -> bool {
        if !self.o.commit_wait {
            return false;
        }
        let mut waited = false;
        loop {
            let pending: Option<(u64, u16, u64)> = {
                let part = lock(&self.parts[p].part);
                let s = lock(&self.shared);
                part.applied_max
                    .iter()
                    .find(|&(&(inc, w), &seq)| {
                        inc >= s.dead_below && s.committed.get(&(inc, w)).copied().unwrap_or(0) < seq
                    })
                    .map(|(&(inc, w), &seq)| (inc, w, seq))
            };
            let Some((incarnation, worker, seq)) = pending else { return waited };
            waited = true;
            self.counters.add(SLS_COMMIT_QUERIES, 1);
            let query = Request::CommitQuery { incarnation, worker, seq };
            let reply = ctx.call(self.o.hts_node(), HTS_SERVICE, query.encode()).await;
            let mut s = lock(&self.shared);
            match reply.map(|b| Reply::decode(&b)) {
                Ok(Ok(Reply::Ok)) => {
                    let c = s.committed.entry((incarnation, worker)).or_insert(0);
                    *c = (*c).max(seq);
                }
                Ok(Ok(Reply::Stale)) | Err(VerbsError::NodeDown(_)) => {
                    // That incarnation is gone: its entries count as committed.
                    self.counters.add(SLS_COMMIT_DEAD, 1);
                    let dead = incarnation + 1;
                    self.newer_incarnation(&mut s, dead);
                }
                other => {
                    drop(s);
                    self.counters.add(SLS_COMMIT_QUERY_ERRORS, 1);
                    let _ = other;
                    ctx.yield_now().await;
                }
            }
        }
    }

    async fn serve<C: ServerCtx>(&self, ctx: &C, p: usize, q: Queued) {
        let drained = {
            let part = lock(&self.parts[p].part);
            (part.applied - q.applied_then) as u32
        };
        match q.task {
            Task::Scan(job) => {
                let waited = self.wait_committed(ctx, p).await;
                // A share needs no more items than a reply can carry.
                let room = self.o.max_message_bytes as usize - super::wire::FIXED_BYTES;
                let most = job.limit.min(room / super::wire::item_bytes(1) + 1);
                let (items, visited) = {
                    let mut part = lock(&self.parts[p].part);
                    part.list.range(spec::as_ref(&job.start), spec::as_ref(&job.end), most)
                };
                charge(ctx, visited).await;
                let items: Vec<Item> =
                    items.into_iter().map(|(key, v)| Item { key, addr: v.addr, units: v.units }).collect();
                let done = {
                    let mut acc = lock(&job.acc);
                    acc.0 -= 1;
                    acc.1.push(items);
                    acc.2 += drained;
                    acc.3 |= waited;
                    (acc.0 == 0).then(|| (std::mem::take(&mut acc.1), acc.2, acc.3))
                };
                if let Some((shares, drained, waited)) = done {
                    let total: usize = shares.iter().map(Vec::len).sum();
                    let mut all: Vec<Item> = shares.into_iter().flatten().collect();
                    ctx.charge_cpu(CpuWork::NodeSearchEntry, total as u64 * 2).await;
                    all.sort_by(|a, b| a.key.cmp(&b.key));
                    all.truncate(job.limit);
                    let room = self.o.max_message_bytes as usize - super::wire::FIXED_BYTES;
                    let mut bytes = 0;
                    let fit = all
                        .iter()
                        .position(|i| {
                            bytes += super::wire::item_bytes(i.key.len());
                            bytes > room
                        })
                        .unwrap_or(all.len());
                    let more = fit < all.len();
                    all.truncate(fit);
                    if drained > 0 {
                        self.counters.add(SLS_SCANS_DRAINED, 1);
                    }
                    let reply = Reply::Items { items: all, more, drained, waited };
                    let _ = ctx.reply(job.to, reply.encode());
                }
            }
            Task::Get { key, to } => {
                let waited = self.wait_committed(ctx, p).await;
                let (found, visited) = lock(&self.parts[p].part).list.get(&key);
                charge(ctx, visited).await;
                if waited {
                    self.counters.add(SLS_GETS_WAITED, 1);
                }
                let reply = match found {
                    Some(v) => Reply::Found { addr: v.addr, units: v.units },
                    None => Reply::Absent,
                };
                let _ = ctx.reply(to, reply.encode());
            }
            Task::Dump { after, to } => {
                let room = self.o.max_message_bytes as usize - super::wire::FIXED_BYTES;
                let start = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                let (items, visited) = {
                    let mut part = lock(&self.parts[p].part);
                    // Enough keys to fill a page of the shortest possible items.
                    part.list.range(start, Bound::Unbounded, room / super::wire::item_bytes(1) + 1)
                };
                charge(ctx, visited).await;
                let mut page = Vec::new();
                let mut bytes = 0;
                let mut done = true;
                for (key, v) in items {
                    bytes += super::wire::item_bytes(key.len());
                    if bytes > room {
                        done = false;
                        break;
                    }
                    page.push(Item { key, addr: v.addr, units: v.units });
                }
                self.counters.add(SLS_DUMP_PAGES, 1);
                let _ = ctx.reply(to, Reply::Page { items: page, dedup: Vec::new(), done }.encode());
            }
        }
    }

    /// At start: if the HTS was serving before this server started, this is a restart after a
    /// crash: rebuild from it. Otherwise wait for `create`'s `Init`.
    async fn start<C: ServerCtx>(&self, ctx: &C) {
        let started_ns = ctx.now_ns();
        for attempt in 0..16 {
            match ctx.call(self.o.hts_node(), HTS_SERVICE, Request::Status.encode()).await.map(|b| Reply::decode(&b)) {
                Ok(Ok(Reply::Status {
                    state: ServerState::Serving | ServerState::PeerRecovering, init_ns, ..
                })) if init_ns < started_ns => {
                    if self.recover(ctx).await.is_err() {
                        self.counters.add(super::SLS_RECOVERY_FAILED, 1);
                    }
                    return;
                }
                Ok(Ok(Reply::Status { .. })) => return,
                _ => ctx.sleep(self.o.retry_wait_ns(attempt)).await,
            }
        }
    }

    /// Rebuilds the skiplists from the hash table and the blocks' keys (digest §3.6, SLS
    /// failure), with the HTS's writes blocked meanwhile.
    async fn recover<C: ServerCtx>(&self, ctx: &C) -> Result<(), VerbsError> {
        let t0 = ctx.now_ns();
        {
            let mut s = lock(&self.shared);
            if s.state != ServerState::Fresh {
                return Ok(());
            }
            s.state = ServerState::Recovering;
        }
        let hts = self.o.hts_node();
        match Reply::decode(&ctx.call(hts, HTS_SERVICE, Request::PeerRecovering.encode()).await?)? {
            Reply::Ok => {}
            other => return Err(VerbsError::Protocol(format!("the HTS did not stop for the recovery: {other:?}"))),
        }
        // Every slot of the table: its buckets in 16-KiB READs, then the overflow chains.
        let mut words = Vec::new();
        let per_read = 256u64;
        let mut chains = Vec::new();
        let mut b = 0;
        while b < self.g.buckets {
            let n = per_read.min(self.g.buckets - b);
            let mut reqs = Vec::new();
            let mut at = b;
            while at < self.g.buckets && reqs.len() < 8 {
                let len = per_read.min(self.g.buckets - at);
                reqs.push(Verb::read_len(RemoteAddr::host(hts, self.g.bucket_offset(at)), (len * 64) as usize));
                at += len;
            }
            let _ = n;
            for r in ctx.post(reqs).await? {
                for bucket in r.into_buf()?.chunks_exact(64) {
                    let w = layout::bucket_words(bucket);
                    words.extend(w[..self.g.slots].iter().copied().filter(|&x| x != 0));
                    if w[7] != 0 {
                        chains.push(w[7]);
                    }
                }
            }
            b = at;
        }
        while !chains.is_empty() {
            let reqs: Vec<Verb> = chains.drain(..).map(|off| Verb::read_len(RemoteAddr::host(hts, off), 64)).collect();
            for r in ctx.post(reqs).await? {
                let w = layout::bucket_words(&r.into_buf()?);
                words.extend(w[..self.g.slots].iter().copied().filter(|&x| x != 0));
                if w[7] != 0 {
                    chains.push(w[7]);
                }
            }
        }
        // Each block's key, from the memory pool, many READs at a time.
        let mut items = 0u64;
        for group in words.chunks(32) {
            let slots: Vec<layout::Slot> = group.iter().filter_map(|&w| layout::Slot::decode(w)).collect();
            let reqs: Vec<Verb> = slots
                .iter()
                .map(|s| {
                    let len =
                        (s.units as u64 * layout::UNIT).min((layout::HEADER_BYTES + layout::MAX_KEY_BYTES) as u64);
                    Verb::read_len(s.block, len as usize)
                })
                .collect();
            for (s, r) in slots.iter().zip(post_per_node(ctx, reqs).await?) {
                let bytes = r.into_buf()?;
                let key = layout::header_key(&bytes)
                    .ok_or_else(|| VerbsError::Protocol(format!("slot points at {} which holds no block", s.block)))?;
                ctx.charge_cpu(CpuWork::HashByte, key.len() as u64).await;
                let p = self.g.place(key).partition as usize;
                let visited = lock(&self.parts[p].part)
                    .list
                    .upsert(key, Value { addr: layout::encode_addr(s.block), units: s.units })
                    .1;
                charge(ctx, visited).await;
                items += 1;
            }
        }
        match Reply::decode(&ctx.call(hts, HTS_SERVICE, Request::PeerReady.encode()).await?)? {
            Reply::Ok => {}
            other => return Err(VerbsError::Protocol(format!("the HTS did not resume: {other:?}"))),
        }
        {
            let mut s = lock(&self.shared);
            s.state = ServerState::Serving;
            s.init_ns = ctx.now_ns();
        }
        self.counters.add(SLS_RECOVERIES, 1);
        self.counters.add(SLS_RECOVERED_ITEMS, items);
        self.counters.add(SLS_RECOVERY_NS, ctx.now_ns() - t0);
        Ok(())
    }

    async fn worker<C: ServerCtx>(&self, ctx: C, p: usize) {
        if p == 0 {
            self.start(&ctx).await;
        }
        loop {
            match self.next_work(p) {
                Some(Work::Apply(l)) => self.apply(&ctx, p, l).await,
                Some(Work::Serve(q)) => self.serve(&ctx, p, q).await,
                None => self.parts[p].work.notified().await,
            }
        }
    }
}

/// Charges the CPU for a skiplist operation's visits (see [`super::skiplist`]).
async fn charge<C: ServerCtx>(ctx: &C, visits: Visits) {
    ctx.charge_cpu(CpuWork::CacheLookupLevel, visits.misses).await;
    ctx.charge_cpu(CpuWork::NodeSearchEntry, visits.hits).await;
}

/// Applies a write to a skiplist by the rule both servers share; returns the old value and the
/// nodes visited (none counted for an upsert nobody prices: `priced` false, a load in the
/// simulator's instant mode, where the list links its new nodes at its next other use).
fn apply_entry(list: &mut SkipList, e: &Entry, priced: bool) -> (Option<Value>, Visits) {
    let v = Value { addr: e.addr, units: e.units };
    match e.op {
        WriteOp::Upsert if !priced => (list.upsert_unpriced(&e.key, v), Visits::default()),
        WriteOp::Upsert => list.upsert(&e.key, v),
        WriteOp::Update => list.update(&e.key, v),
        WriteOp::Delete => list.remove(&e.key),
    }
}

impl<C: ServerCtx> Service<C> for Sls {
    /// Whether [`Service::fork`] would copy: every partition quiescent, without the copy. A
    /// loaded image's state is asked this first, so its skiplists are linked here
    /// ([`SkipList::settle`]: the image holds them linked, and the load's time includes it).
    fn forks(&self) -> bool {
        let _appending = lock(&self.appending);
        self.parts.iter().all(|partition| {
            let mut part = lock(&partition.part);
            part.list.settle();
            part.quiet()
        })
    }

    /// A copy for another run from a loaded image: the skiplists and the bookkeeping. Refused
    /// unless quiescent (every partition's log applied, no task queued). Counters start at
    /// zero.
    fn fork(&self) -> Option<Sls> {
        let _appending = lock(&self.appending);
        let mut parts = Vec::with_capacity(self.parts.len());
        for partition in &self.parts {
            let mut p = lock(&partition.part);
            if !p.quiet() {
                return None;
            }
            // Link a loaded list once, here, rather than in every copy.
            p.list.settle();
            parts.push(Partition {
                part: Mutex::new(Part {
                    log: VecDeque::new(),
                    appended: p.appended,
                    applied: p.applied,
                    tasks: VecDeque::new(),
                    list: p.list.clone(),
                    applied_max: p.applied_max.clone(),
                }),
                work: Notify::new(),
            });
        }
        Some(Sls {
            o: self.o.clone(),
            g: self.g,
            shared: Mutex::new(lock(&self.shared).clone()),
            parts,
            appending: Mutex::new(()),
            counters: ServerCounters::default(),
        })
    }

    async fn handle(self: Arc<Self>, ctx: C, request: Vec<u8>) -> Vec<u8> {
        let reply = match Request::decode(&request) {
            Ok(Request::Status) => {
                let s = lock(&self.shared);
                Reply::Status { state: s.state, incarnation: s.newest, init_ns: s.init_ns }
            }
            Ok(Request::Init) => self.on_init(&ctx),
            Ok(Request::Commit { incarnation, worker, seq }) => self.on_commit(incarnation, worker, seq),
            Ok(Request::DumpDedup { after }) => self.dedup_page(after),
            Ok(other) => Reply::Error(format!("the SLS does not serve {other:?}")),
            Err(e) => Reply::Error(e.to_string()),
        };
        reply.encode()
    }

    async fn dispatch(self: Arc<Self>, ctx: C, request: Vec<u8>, to: Responder) -> Option<Vec<u8>> {
        if let Some(refused) = super::wire::refuse_oversized(&request, self.o.max_message_bytes, &self.counters) {
            return Some(refused);
        }
        let reply = match Request::decode(&request) {
            Ok(Request::LogSync { incarnation, worker, first_seq, committed, entries }) => {
                let bytes: usize = entries.iter().map(|e| super::wire::entry_bytes(e.key.len())).sum();
                ctx.charge_cpu(CpuWork::CopyByte, bytes as u64).await;
                self.on_log_sync(incarnation, worker, first_seq, committed, entries, to)
            }
            Ok(Request::Scan { start, end, limit }) => self.on_scan(start, end, limit, to),
            Ok(Request::Get { key }) => self.on_get(key, to),
            // A commit notice comes with every batch when the HTS's log runs dry (every key of
            // a load): answered here, not decoded a second time by `handle`.
            Ok(Request::Commit { incarnation, worker, seq }) => Some(self.on_commit(incarnation, worker, seq)),
            Ok(Request::Dump { incarnation, partition, after }) => self.on_dump(incarnation, partition, after, to),
            _ => return Some(self.handle(ctx, request).await),
        };
        reply.map(|r| r.encode())
    }

    fn workers(&self) -> u32 {
        self.o.sls_partitions as u32
    }

    async fn run_worker(self: Arc<Self>, ctx: C, index: u32) {
        self.worker(ctx, index as usize).await;
    }
}

//! # Read delegation and write combining (RDWC)
//!
//! Clients of one compute node often work on the same hot key at the same time (skewed YCSB
//! workloads). SMART (§4.2; SMART digest §2.8 and §3.6) lets them share the remote work instead
//! of repeating it:
//!
//! - **read delegation**: concurrent searches of one key on a compute node elect a *leader* (the
//!   first), which runs the remote search; the others *follow*: they wait and take its result,
//!   costing no verb at all (a "delayed cache hit");
//! - **write combining**: concurrent writes (insert, update, delete) of one key elect a leader,
//!   the others deposit their operations in the leader's buffer and wait; the leader takes the
//!   key's remote lock, reads the current state, applies every deposited operation in order and
//!   writes the final state back in **one** remote write.
//!
//! [`Rdwc`] is the compute-node half of both: a table of slots shared by a node's client tasks
//! (any executor; in the simulator, each client is a task). It is generic over the index: it
//! knows keys as byte slices and carries opaque operations `O` and results `R`; the remote part
//! stays in the index.
//!
//! ## Shape
//!
//! A key maps to slot `hash64(key) mod slots` (deterministic, no random hasher). A slot has a
//! **read window** and a **write window**, independent of each other, each either closed or open
//! with its own **unique key** (the key of its leader, as `Vec<u8>`) and its waiting followers.
//! One mutex per slot protects both; it is never held across an `.await`, and waiting followers
//! are woken after it is released.
//!
//! [`Rdwc::begin_read`] and [`Rdwc::begin_write`] give a role, under the slot's mutex:
//!
//! - no open window: the caller becomes its **leader** ([`ReadRole::Leader`],
//!   [`WriteRole::Leader`]) and records its key as the unique key;
//! - an open window of the same key: the caller **follows** ([`ReadRole::Follower`],
//!   [`WriteRole::Follower`]): a future that resolves to its result, or to `None` when it must
//!   run its operation itself;
//! - an open window of another key (a hash conflict), a write window already closed, or a
//!   disabled table: the caller **bypasses** ([`ReadRole::Bypass`], [`WriteRole::Bypass`], which
//!   gives the operation back): it runs its operation independently and never waits.
//!
//! The leader ends its window with `finish` (or by being dropped), which hands every follower
//! its outcome.
//!
//! ## Delegated reads, and the H6 stamp
//!
//! SMART hands the leader's result to every same-key reader that joins while the leader runs.
//! A reader that joins *after* the leader posted the READ whose result it gets would receive a
//! value observed before it started: if a write (on any compute node) completed in between, the
//! read is stale (the SMART digest's hazard H6). So every follower is stamped with the slot's
//! **join sequence number** when it joins, and the leader calls [`ReadLeader::mark`] right before
//! posting each remote READ that may produce its final result; a retrying leader marks again, and
//! the last mark before [`ReadLeader::finish`] counts. At `finish`, followers stamped below that
//! mark get the result; later joiners (and everyone, if the leader never marked) get `None`:
//! they call `begin_read` again, so the first of them leads the next window and the others follow
//! it (no stampede of independent searches). The caller's search must linearize at a READ
//! posted after its last mark; a leader that marks before *every* READ of its search ensures it.
//! A mark costs one uncontended local lock.
//!
//! **Linearizability.** The leader's search linearizes at its last READ, posted after its last
//! mark. A served follower joined before that mark, so before the READ was posted, and returns
//! only after `finish`, so after the READ completed: the READ's linearization point lies within
//! the follower's own interval, and the follower linearizes there too (reads commute with each
//! other, so any number of them may share one point).
//!
//! **Same-CN causality** (SMART digest §4.3(g)). SMART guarantees that a read beginning after a
//! same-CN write completed is not delegated to a read that began before it, with an *execution
//! window* that cuts the read window when a write window on the same lock ends (the winner of a
//! local race snapshots both waiter sets). The stamp subsumes it: a read that begins after any
//! write completed — on this compute node or another — can only be served by a READ posted after
//! it joined, hence after that write completed, and an RDMA READ posted after a WRITE completed
//! observes it. Read and write windows therefore need no coordination at all.
//!
//! ## Combined writes, and the H7 close
//!
//! The first writer of a key leads. Later same-key writers deposit their operation in the
//! window's buffer and wait. Once the leader holds the key's remote lock and has read its current
//! state, it calls [`WriteLeader::close`], which **atomically** — under the slot's mutex, the one
//! every deposit takes — freezes the set of admitted writers and returns all their operations in
//! deposit order, the leader's own first. In SMART's artifact the buffer was sampled and the
//! window closed in two steps, so a writer could deposit after the sample and still be treated as
//! combined, its value never written (hazard H7). Here a writer either deposited before `close`
//! (its operation is in the returned vector) or finds the window closed and bypasses; the remote
//! lock, which the leader holds, then serialises it after the combined write.
//!
//! The leader applies the operations in order to the state it read, writes the final state in one
//! remote write, releases the remote lock, and calls [`WriteLeader::finish`] with one result per
//! operation, in the order `close` returned them; each follower wakes with its own.
//!
//! **Linearizability.** Every admitted writer is in flight when the leader's remote write takes
//! effect: it joined before `close`, which precedes the write, and returns only after `finish`,
//! which follows it. The admitted operations linearize at that write, one after another in
//! deposit order, the last deposit winning; each result is what its operation's sequential
//! application to the state read under the remote lock produced. No intermediate state is ever
//! visible, which is allowed since all of them linearize at one instant.
//!
//! ## Queued late writers (the baselines' hand-over)
//!
//! SMART's artifact builds its baselines (the ART port and the factor analysis's steps before write
//! combining) with a *hand-over* of same-key leaf updates instead: a per-key ticket lock on each
//! compute node serialises them, and writers queued behind the winner take its result. A table
//! built with [`Rdwc::queue_late_writers`] models it: a same-key writer that finds the window
//! closed does not bypass but is [`WriteRole::Queued`]: it waits until the leader ends its window
//! and then calls `begin_write` again, so the first of the queue leads the next window and the
//! others are combined into it. At most one remote write per key and compute node is then in
//! flight. (The artifact hands the winner's result to every writer queued before the winner's
//! *release*, up to 8 in a row; one that queued after the winner's CAS took effect then returns
//! without its value ever being written, which is not linearizable. Here a writer is combined only
//! if it deposited before `close`, as above.)
//!
//! ## Failures and cancellation
//!
//! - A read leader dropped without `finish`: its followers get `None` and search again.
//! - A write leader that fails **before** `close` (an error, or dropped): its followers get
//!   `None` and run their operations themselves; none of them was taken, so none was applied.
//! - A write leader that fails **after** `close` must still call `finish`, with whatever results
//!   its caller's `R` uses for failures, **whenever its remote write may have been posted**: the
//!   operations may then have been applied, and a follower told `None` would apply its operation
//!   a second time. Dropping a leader after `close` without `finish` also gives its followers
//!   `None`; that loses nothing and applies nothing twice only if the remote write was certainly
//!   not posted (the followers then run their operations themselves).
//! - A follower future dropped before it is served leaves its window. A write follower dropped
//!   **before** `close` has its operation removed from the buffer (never applied); dropped after
//!   `close`, its operation is (or will be) applied and its result is discarded — indeterminate,
//!   like any cancelled write.
//! - An operation handed to [`Rdwc::begin_write`] belongs to the table once deposited: a follower
//!   told `None` runs its operation again from its own arguments.
//!
//! ## Deviations from SMART's artifact
//!
//! - Lists of wakers (with join stamps) in the slot, instead of 8-bit ticket locks with handover
//!   flags; followers suspend as tasks, so there is no spinning and no ticket wrap-around.
//! - The H6 stamp and the H7 atomic close (above), and no execution-window flag (decision 15 of
//!   the digest), which the stamp makes unnecessary.
//! - [`DEFAULT_SLOTS`] is 1,024 slots per compute node (digest decision 14: a power of two above
//!   the 128 knee of SMART's Fig. 22(e)); the artifact's 4 Mi remain available ([`MAX_SLOTS`]).
//! - The artifact's writer copies its value into a write-combining buffer where later writers
//!   overwrite it; here each deposit is an opaque operation with a result of its own, so deletes,
//!   updates of absent keys and upserts combine too, each writer learning what its own operation
//!   did.
//!
//! ## Costs
//!
//! No verb and no simulated CPU: one uncontended slot mutex per `begin_*`, `mark`, `close` and
//! `finish`, and `O(followers)` work at `finish`. Host bytes ([`Rdwc::bytes`]): 128 bytes per
//! idle slot (128 KiB by default; open windows are boxed to keep it so), plus the open windows'
//! keys and buffers, of which a node has at most one per client at a time. A disabled table has
//! no slots at all.

use super::primitive::{Mutex, lock};
use crate::hash::hash64;
use std::fmt;
use std::future::Future;
use std::mem::size_of;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
use std::task::{Context, Poll, Waker};

/// Slots per compute node by default (SMART digest decision 14).
pub const DEFAULT_SLOTS: usize = 1024;

/// The most slots a table takes (SMART's artifact's `kLocalLockNum`, kept for faithfulness:
/// 512 MiB of idle slots per compute node); more are clamped.
pub const MAX_SLOTS: usize = 4 << 20;

/// Seed of the slot hash ("RDWC").
const SEED: u64 = 0x5244_5743;

/// Node counter: searches that led a read window.
pub const RDWC_READS_LED: &str = "rdwc_reads_led";
/// Node counter: read followers served their leader's result.
pub const RDWC_READS_DELEGATED: &str = "rdwc_reads_delegated";
/// Node counter: searches that bypassed the table (a hash conflict, or the table is disabled).
pub const RDWC_READS_BYPASSED: &str = "rdwc_reads_bypassed";
/// Node counter: read followers cut off by the H6 stamp and told to search again.
pub const RDWC_READS_CUT_OFF: &str = "rdwc_reads_cut_off";
/// Node counter: read followers whose leader was dropped without a result.
pub const RDWC_READS_ORPHANED: &str = "rdwc_reads_orphaned";
/// Node counter: writes that led a write window.
pub const RDWC_WRITES_LED: &str = "rdwc_writes_led";
/// Node counter: write followers whose operation a leader applied and reported.
pub const RDWC_WRITES_COMBINED: &str = "rdwc_writes_combined";
/// Node counter: writes that bypassed the table (a conflict, a closed window, or disabled).
pub const RDWC_WRITES_BYPASSED: &str = "rdwc_writes_bypassed";
/// Node counter: write followers told to run their operation themselves.
pub const RDWC_WRITES_ORPHANED: &str = "rdwc_writes_orphaned";

/// What a table did. Counts are cumulative, one per `begin_*` call or per
/// follower served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdwcStats {
    /// Searches that led a read window.
    pub reads_led: u64,
    /// Followers served the leader's result (searches with no remote work).
    pub reads_delegated: u64,
    /// Searches that bypassed: a hash conflict, or the table is disabled.
    pub reads_bypassed: u64,
    /// Followers cut off by the H6 stamp (they joined after the leader's last mark, or it never
    /// marked): told to search again.
    pub reads_cut_off: u64,
    /// Followers whose leader was dropped without `finish`: told to search again.
    pub reads_orphaned: u64,
    /// Writes that led a write window.
    pub writes_led: u64,
    /// Followers whose operation the leader applied and reported (combined writes).
    pub writes_combined: u64,
    /// Writes that bypassed: a hash conflict, a window already closed, or the table is disabled.
    pub writes_bypassed: u64,
    /// Followers told to run their operation themselves: the leader failed before `close`, or was
    /// dropped without `finish`, or `finish` had no result for them.
    pub writes_orphaned: u64,
}

impl RdwcStats {
    /// The stats as named counters (for [`crate::IndexKind::node_counters`]).
    pub fn counters(&self) -> std::collections::BTreeMap<&'static str, u64> {
        [
            (RDWC_READS_LED, self.reads_led),
            (RDWC_READS_DELEGATED, self.reads_delegated),
            (RDWC_READS_BYPASSED, self.reads_bypassed),
            (RDWC_READS_CUT_OFF, self.reads_cut_off),
            (RDWC_READS_ORPHANED, self.reads_orphaned),
            (RDWC_WRITES_LED, self.writes_led),
            (RDWC_WRITES_COMBINED, self.writes_combined),
            (RDWC_WRITES_BYPASSED, self.writes_bypassed),
            (RDWC_WRITES_ORPHANED, self.writes_orphaned),
        ]
        .into_iter()
        .collect()
    }

    /// Adds another table's stats (another compute node's).
    pub fn add(&mut self, other: &RdwcStats) {
        self.reads_led += other.reads_led;
        self.reads_delegated += other.reads_delegated;
        self.reads_bypassed += other.reads_bypassed;
        self.reads_cut_off += other.reads_cut_off;
        self.reads_orphaned += other.reads_orphaned;
        self.writes_led += other.writes_led;
        self.writes_combined += other.writes_combined;
        self.writes_bypassed += other.writes_bypassed;
        self.writes_orphaned += other.writes_orphaned;
    }
}

/// A waiting read follower: its join stamp (also its id) and its task's waker, once polled.
struct ReadFollower {
    id: u64,
    waker: Option<Waker>,
}

/// An open read window.
struct ReadWindow {
    key: Vec<u8>,
    leader: u64,
    /// The slot's join sequence number at the leader's last mark: followers stamped below it
    /// joined before the READ the leader's result comes from.
    mark: Option<u64>,
    followers: Vec<ReadFollower>,
}

/// A write follower: its operation until `close` takes it, and its waker once polled.
struct WriteFollower<O> {
    id: u64,
    op: Option<O>,
    waker: Option<Waker>,
    /// Dropped after `close`: its operation was taken; its result is discarded.
    gone: bool,
}

/// An open write window.
struct WriteWindow<O> {
    key: Vec<u8>,
    leader: u64,
    /// `close` froze the admitted set: the followers here are exactly the admitted ones, in
    /// deposit order, and later writers bypass (or queue, see [`Rdwc::queue_late_writers`]).
    closed: bool,
    followers: Vec<WriteFollower<O>>,
    /// Same-key writers that came after `close` and wait for the window to end: their ids and
    /// wakers, once polled.
    queued: Vec<(u64, Option<Waker>)>,
}

/// One slot, behind its mutex.
struct Slot<O, R> {
    /// The next join stamp; ids of leaders and followers of both kinds, unique in the slot.
    next_id: u64,
    /// Boxed, so that an idle slot stays small (see [`MAX_SLOTS`]).
    read: Option<Box<ReadWindow>>,
    write: Option<Box<WriteWindow<O>>>,
    /// Outcomes of followers whose window ended, until their future takes them (or is dropped).
    delivered: Vec<(u64, Option<R>)>,
}

impl<O, R> Slot<O, R> {
    fn new() -> Slot<O, R> {
        Slot { next_id: 0, read: None, write: None, delivered: Vec::new() }
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Bytes of the open windows and undelivered outcomes (the slot itself is counted apart).
    fn bytes(&self) -> usize {
        let read = self
            .read
            .as_ref()
            .map_or(0, |w| size_of::<ReadWindow>() + w.key.len() + w.followers.len() * size_of::<ReadFollower>());
        let write = self.write.as_ref().map_or(0, |w| {
            size_of::<WriteWindow<O>>()
                + w.key.len()
                + w.followers.len() * size_of::<WriteFollower<O>>()
                + w.queued.len() * size_of::<(u64, Option<Waker>)>()
        });
        read + write + self.delivered.len() * size_of::<(u64, Option<R>)>()
    }

    /// Takes a follower's outcome if its window ended.
    fn take_delivered(&mut self, id: u64) -> Option<Option<R>> {
        let pos = self.delivered.iter().position(|(i, _)| *i == id)?;
        Some(self.delivered.swap_remove(pos).1)
    }
}

/// Registers `cx`'s waker in `slot`, unless it is already the one there.
/// The poll of a read or write follower: its delivered outcome, or else its waker registered
/// in its window's record (`waker_of` finds it in the slot).
fn poll_follower<O, R>(
    table: &Rdwc<O, R>,
    slot: usize,
    id: u64,
    done: &mut bool,
    cx: &Context<'_>,
    kind: &str,
    waker_of: impl FnOnce(&mut Slot<O, R>) -> Option<&mut Option<Waker>>,
) -> Poll<Option<R>> {
    assert!(!*done, "a {kind} follower polled after it completed");
    let mut guard = lock(&table.slots[slot]);
    if let Some(out) = guard.take_delivered(id) {
        *done = true;
        return Poll::Ready(out);
    }
    let waker =
        waker_of(&mut guard).unwrap_or_else(|| panic!("a waiting {kind} follower is in its window or has an outcome"));
    register(waker, cx);
    Poll::Pending
}

fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

fn wake_all(wakers: Vec<Waker>) {
    for w in wakers {
        w.wake();
    }
}

/// `slots` rounded up to a power of two, within `1..=MAX_SLOTS`.
fn slot_count(slots: usize) -> usize {
    slots.clamp(1, MAX_SLOTS).next_power_of_two()
}

/// A compute node's read-delegation and write-combining table (see the module doc). Shared by
/// the node's clients; every method takes `&self`.
pub struct Rdwc<O, R> {
    enabled: bool,
    /// Same-key writers finding the window closed wait for it to end instead of bypassing.
    queue_late: bool,
    /// A power of two of them; none when disabled.
    slots: Vec<Mutex<Slot<O, R>>>,
    /// The counters of [`RdwcStats`], one per [`Count`]: the table's, not its slots', so that
    /// reading them (every tick of a run, for every compute node) takes no slot's lock. Plain
    /// `std` atomics, not the loom-swappable ones: statistics, which order nothing.
    counts: [StdAtomicU64; COUNTS],
}

/// One of [`RdwcStats`]'s counters, as an index into [`Rdwc`]'s counts.
#[derive(Clone, Copy, Debug)]
enum Count {
    ReadsLed,
    ReadsDelegated,
    ReadsBypassed,
    ReadsCutOff,
    ReadsOrphaned,
    WritesLed,
    WritesCombined,
    WritesBypassed,
    WritesOrphaned,
}

const COUNTS: usize = Count::WritesOrphaned as usize + 1;

impl<O, R> fmt::Debug for Rdwc<O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rdwc").field("enabled", &self.enabled).field("slots", &self.slots.len()).finish_non_exhaustive()
    }
}

impl<O, R> Rdwc<O, R> {
    /// A table of `slots` slots, rounded up to a power of two and clamped to `1..=MAX_SLOTS`.
    /// A disabled table allocates none and makes every caller bypass.
    pub fn new(slots: usize, enabled: bool) -> Rdwc<O, R> {
        let n = if enabled { slot_count(slots) } else { 0 };
        Rdwc {
            enabled,
            queue_late: false,
            slots: (0..n).map(|_| Mutex::new(Slot::new())).collect(),
            counts: Default::default(),
        }
    }

    fn count(&self, c: Count) {
        self.counts[c as usize].fetch_add(1, StdOrdering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The table, with same-key writers that find the write window closed queued behind it
    /// ([`WriteRole::Queued`]) instead of bypassing: the hand-over of SMART's baselines (see the
    /// module doc). Hash-conflicting keys still bypass.
    pub fn queue_late_writers(mut self) -> Rdwc<O, R> {
        self.queue_late = true;
        self
    }

    /// The number of slots (0 when disabled).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Host bytes of the table: the slot array, plus what open windows and undelivered outcomes
    /// hold now (payloads only; an operation's or result's own heap data is not seen).
    pub fn bytes(&self) -> u64 {
        let dynamic: usize = self.slots.iter().map(|s| lock(s).bytes()).sum();
        (size_of::<Self>() + self.slots.len() * size_of::<Mutex<Slot<O, R>>>() + dynamic) as u64
    }

    /// The counters.
    pub fn stats(&self) -> RdwcStats {
        let n = |c: Count| self.counts[c as usize].load(StdOrdering::Relaxed);
        RdwcStats {
            reads_led: n(Count::ReadsLed),
            reads_delegated: n(Count::ReadsDelegated),
            reads_bypassed: n(Count::ReadsBypassed),
            reads_cut_off: n(Count::ReadsCutOff),
            reads_orphaned: n(Count::ReadsOrphaned),
            writes_led: n(Count::WritesLed),
            writes_combined: n(Count::WritesCombined),
            writes_bypassed: n(Count::WritesBypassed),
            writes_orphaned: n(Count::WritesOrphaned),
        }
    }

    fn slot_of(&self, key: &[u8]) -> usize {
        (hash64(key, SEED) as usize) & (self.slots.len() - 1)
    }

    /// Starts a search of `key`: lead it, follow the same-key search in progress, or bypass.
    pub fn begin_read(&self, key: &[u8]) -> ReadRole<'_, O, R> {
        if !self.enabled {
            self.count(Count::ReadsBypassed);
            return ReadRole::Bypass;
        }
        let slot = self.slot_of(key);
        let mut guard = lock(&self.slots[slot]);
        let s = &mut *guard;
        match &mut s.read {
            None => {
                let id = s.take_id();
                s.read =
                    Some(Box::new(ReadWindow { key: key.to_vec(), leader: id, mark: None, followers: Vec::new() }));
                self.count(Count::ReadsLed);
                ReadRole::Leader(ReadLeader { table: self, slot, id, done: false })
            }
            Some(w) if w.key == key => {
                let id = s.next_id;
                s.next_id += 1;
                w.followers.push(ReadFollower { id, waker: None });
                ReadRole::Follower(ReadWait { table: self, slot, id, done: false })
            }
            Some(_) => {
                self.count(Count::ReadsBypassed);
                ReadRole::Bypass
            }
        }
    }

    /// Starts a write of `key` doing `op`: lead it, deposit `op` in the same-key write window
    /// still open, or bypass (and get `op` back).
    pub fn begin_write(&self, key: &[u8], op: O) -> WriteRole<'_, O, R> {
        if !self.enabled {
            self.count(Count::WritesBypassed);
            return WriteRole::Bypass(op);
        }
        let slot = self.slot_of(key);
        let mut guard = lock(&self.slots[slot]);
        let s = &mut *guard;
        match &mut s.write {
            None => {
                let id = s.take_id();
                s.write = Some(Box::new(WriteWindow {
                    key: key.to_vec(),
                    leader: id,
                    closed: false,
                    followers: Vec::new(),
                    queued: Vec::new(),
                }));
                self.count(Count::WritesLed);
                WriteRole::Leader(WriteLeader { table: self, slot, id, op: Some(op), closed: false, done: false })
            }
            Some(w) if !w.closed && w.key == key => {
                let id = s.next_id;
                s.next_id += 1;
                w.followers.push(WriteFollower { id, op: Some(op), waker: None, gone: false });
                WriteRole::Follower(WriteWait { table: self, slot, id, done: false })
            }
            Some(w) if self.queue_late && w.key == key => {
                let id = s.next_id;
                s.next_id += 1;
                let behind = w.leader;
                w.queued.push((id, None));
                WriteRole::Queued(op, TurnWait { table: self, slot, id, behind })
            }
            Some(_) => {
                self.count(Count::WritesBypassed);
                WriteRole::Bypass(op)
            }
        }
    }
}

/// What a search does, from [`Rdwc::begin_read`].
pub enum ReadRole<'a, O, R> {
    /// Run the remote search, calling [`ReadLeader::mark`] before each READ that may produce the
    /// result, then [`ReadLeader::finish`].
    Leader(ReadLeader<'a, O, R>),
    /// Await the leader's result; `None`: call `begin_read` again.
    Follower(ReadWait<'a, O, R>),
    /// Search independently.
    Bypass,
}

impl<O, R> fmt::Debug for ReadRole<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadRole::Leader(l) => f.debug_tuple("Leader").field(l).finish(),
            ReadRole::Follower(w) => f.debug_tuple("Follower").field(w).finish(),
            ReadRole::Bypass => f.write_str("Bypass"),
        }
    }
}

/// The leader of a read window. Dropped without [`ReadLeader::finish`], its followers get `None`.
#[must_use = "dropping a read leader releases its followers with `None`"]
pub struct ReadLeader<'a, O, R> {
    table: &'a Rdwc<O, R>,
    slot: usize,
    id: u64,
    done: bool,
}

impl<O, R> fmt::Debug for ReadLeader<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadLeader").field("slot", &self.slot).field("id", &self.id).finish()
    }
}

impl<O, R> ReadLeader<'_, O, R> {
    /// Call right before posting each remote READ that may produce the final result: followers
    /// that joined before the last mark take the result, later ones search again (H6).
    pub fn mark(&mut self) {
        let mut guard = lock(&self.table.slots[self.slot]);
        let s = &mut *guard;
        let window = s.read.as_mut().expect("a read leader's window is open until it ends it");
        debug_assert_eq!(window.leader, self.id);
        window.mark = Some(s.next_id);
    }

    /// Call when the READ after the last mark turned out not to decide the result by itself
    /// (it depends on an earlier READ, say a slot read before the mark): no follower takes
    /// this window's result; they search again.
    pub fn unmark(&mut self) {
        let mut guard = lock(&self.table.slots[self.slot]);
        let window = guard.read.as_mut().expect("a read leader's window is open until it ends it");
        debug_assert_eq!(window.leader, self.id);
        window.mark = None;
    }

    /// Closes the window, giving each follower `outcome(its stamp, the last mark)` and counting
    /// what that was.
    fn end(&mut self, mut outcome: impl FnMut(u64, Option<u64>) -> (Count, Option<R>)) {
        self.done = true;
        let mut guard = lock(&self.table.slots[self.slot]);
        let s = &mut *guard;
        let window = s.read.take().expect("a read leader's window is open until it ends it");
        debug_assert_eq!(window.leader, self.id);
        let mut wakers = Vec::new();
        for f in window.followers {
            let (count, out) = outcome(f.id, window.mark);
            self.table.count(count);
            s.delivered.push((f.id, out));
            wakers.extend(f.waker);
        }
        drop(guard);
        wake_all(wakers);
    }

    /// Ends the window with the search's result (which the leader keeps too).
    pub fn finish(mut self, result: R)
    where
        R: Clone,
    {
        self.end(|stamp, mark| {
            if mark.is_some_and(|m| stamp < m) {
                (Count::ReadsDelegated, Some(result.clone()))
            } else {
                (Count::ReadsCutOff, None)
            }
        });
    }
}

impl<O, R> Drop for ReadLeader<'_, O, R> {
    fn drop(&mut self) {
        if !self.done {
            self.end(|_, _| (Count::ReadsOrphaned, None));
        }
    }
}

/// A read follower: resolves to the leader's result, or to `None` when the caller must call
/// [`Rdwc::begin_read`] again (it joined after the leader's last mark, or the leader failed).
/// Dropped before that, it leaves the window.
#[must_use = "futures do nothing unless polled"]
pub struct ReadWait<'a, O, R> {
    table: &'a Rdwc<O, R>,
    slot: usize,
    id: u64,
    done: bool,
}

impl<O, R> fmt::Debug for ReadWait<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWait").field("slot", &self.slot).field("id", &self.id).field("done", &self.done).finish()
    }
}

impl<O, R> Future for ReadWait<'_, O, R> {
    type Output = Option<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<R>> {
        let this = self.get_mut();
        let id = this.id;
        poll_follower(this.table, this.slot, id, &mut this.done, cx, "read", |slot| {
            slot.read.as_mut()?.followers.iter_mut().find(|f| f.id == id).map(|f| &mut f.waker)
        })
    }
}

impl<O, R> Drop for ReadWait<'_, O, R> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut guard = lock(&self.table.slots[self.slot]);
        if guard.take_delivered(self.id).is_some() {
            return;
        }
        if let Some(w) = guard.read.as_mut() {
            w.followers.retain(|f| f.id != self.id);
        }
    }
}

/// What a write does, from [`Rdwc::begin_write`].
pub enum WriteRole<'a, O, R> {
    /// Take the remote lock, read the state, [`WriteLeader::close`], apply, write, then
    /// [`WriteLeader::finish`].
    Leader(WriteLeader<'a, O, R>),
    /// Await this writer's own result; `None`: run the operation independently (it was not
    /// applied).
    Follower(WriteWait<'a, O, R>),
    /// Run the operation (given back) independently.
    Bypass(O),
    /// The same key's window is closed and the table queues late writers: await the end of
    /// the window, then call `begin_write` again with the operation (given back).
    Queued(O, TurnWait<'a, O, R>),
}

impl<O, R> fmt::Debug for WriteRole<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteRole::Leader(l) => f.debug_tuple("Leader").field(l).finish(),
            WriteRole::Follower(w) => f.debug_tuple("Follower").field(w).finish(),
            WriteRole::Bypass(_) => f.write_str("Bypass(..)"),
            WriteRole::Queued(_, w) => f.debug_tuple("Queued").field(w).finish(),
        }
    }
}

/// The leader of a write window. Dropped without [`WriteLeader::finish`], its followers get
/// `None` (see the module doc for when that is allowed after `close`).
#[must_use = "dropping a write leader releases its followers with `None`"]
pub struct WriteLeader<'a, O, R> {
    table: &'a Rdwc<O, R>,
    slot: usize,
    id: u64,
    /// The leader's own operation, until `close`.
    op: Option<O>,
    closed: bool,
    done: bool,
}

impl<O, R> fmt::Debug for WriteLeader<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteLeader")
            .field("slot", &self.slot)
            .field("id", &self.id)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<O, R> WriteLeader<'_, O, R> {
    /// Atomically freezes the admitted writers and returns all their operations in deposit
    /// order, the leader's own first (H7). Call it once the key's remote lock is held and its
    /// state read; writers arriving later bypass. A second call returns nothing.
    pub fn close(&mut self) -> Vec<O> {
        let mut ops: Vec<O> = self.op.take().into_iter().collect();
        if self.closed {
            return ops;
        }
        self.closed = true;
        let mut guard = lock(&self.table.slots[self.slot]);
        let window = guard.write.as_mut().expect("a write leader's window is open until it ends it");
        debug_assert_eq!(window.leader, self.id);
        window.closed = true;
        ops.extend(window.followers.iter_mut().filter_map(|f| f.op.take()));
        ops
    }

    /// Closes the window; followers get the next of `results` (admitted ones, if it was closed)
    /// or `None`.
    fn end(&mut self, results: Option<Vec<R>>) {
        self.done = true;
        let mut guard = lock(&self.table.slots[self.slot]);
        let s = &mut *guard;
        let window = s.write.take().expect("a write leader's window is open until it ends it");
        debug_assert_eq!(window.leader, self.id);
        if let Some(r) = &results {
            debug_assert!(!window.closed || r.len() == 1 + window.followers.len(), "one result per closed operation");
        }
        // Not closed: no operation was taken, so every follower runs its own.
        let mut results = results.filter(|_| window.closed).map(|r| r.into_iter().skip(1));
        let mut wakers: Vec<Waker> = window.queued.into_iter().filter_map(|(_, w)| w).collect();
        for f in window.followers {
            let out = results.as_mut().and_then(Iterator::next);
            if f.gone {
                continue;
            }
            self.table.count(if out.is_some() { Count::WritesCombined } else { Count::WritesOrphaned });
            s.delivered.push((f.id, out));
            wakers.extend(f.waker);
        }
        drop(guard);
        wake_all(wakers);
    }

    /// Ends the window after the combined remote write: `results` holds one result per operation
    /// `close` returned, in that order (the leader's own first, which stays with the caller).
    /// Called without `close`, it releases the followers with `None`, like a drop.
    pub fn finish(mut self, results: Vec<R>) {
        self.end(Some(results));
    }
}

impl<O, R> Drop for WriteLeader<'_, O, R> {
    fn drop(&mut self) {
        if !self.done {
            self.end(None);
        }
    }
}

/// A write follower: resolves to its own operation's result, or to `None` when the caller must
/// run its operation itself (it was not applied). Dropped before that, it leaves the window (see
/// the module doc).
#[must_use = "futures do nothing unless polled"]
pub struct WriteWait<'a, O, R> {
    table: &'a Rdwc<O, R>,
    slot: usize,
    id: u64,
    done: bool,
}

impl<O, R> fmt::Debug for WriteWait<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteWait").field("slot", &self.slot).field("id", &self.id).field("done", &self.done).finish()
    }
}

impl<O, R> Future for WriteWait<'_, O, R> {
    type Output = Option<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<R>> {
        let this = self.get_mut();
        let id = this.id;
        poll_follower(this.table, this.slot, id, &mut this.done, cx, "write", |slot| {
            slot.write.as_mut()?.followers.iter_mut().find(|f| f.id == id).map(|f| &mut f.waker)
        })
    }
}

impl<O, R> Drop for WriteWait<'_, O, R> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut guard = lock(&self.table.slots[self.slot]);
        if guard.take_delivered(self.id).is_some() {
            return;
        }
        let Some(w) = guard.write.as_mut() else { return };
        if w.closed {
            // Admitted: its operation was taken and is (or will be) applied; drop its result.
            if let Some(f) = w.followers.iter_mut().find(|f| f.id == self.id) {
                f.gone = true;
                f.waker = None;
            }
        } else {
            // Not admitted yet: withdraw the operation.
            w.followers.retain(|f| f.id != self.id);
        }
    }
}

/// A writer queued behind a closed window ([`WriteRole::Queued`]): resolves when that window
/// has ended. Dropped before, it leaves the queue.
#[must_use = "futures do nothing unless polled"]
pub struct TurnWait<'a, O, R> {
    table: &'a Rdwc<O, R>,
    slot: usize,
    id: u64,
    /// The leader of the window waited for.
    behind: u64,
}

impl<O, R> fmt::Debug for TurnWait<'_, O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnWait")
            .field("slot", &self.slot)
            .field("id", &self.id)
            .field("behind", &self.behind)
            .finish()
    }
}

impl<O, R> Future for TurnWait<'_, O, R> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut guard = lock(&this.table.slots[this.slot]);
        match guard.write.as_mut() {
            Some(w) if w.leader == this.behind => {
                let id = this.id;
                let (_, waker) = w
                    .queued
                    .iter_mut()
                    .find(|(i, _)| *i == id)
                    .expect("a queued writer stays queued until its window ends");
                register(waker, cx);
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

impl<O, R> Drop for TurnWait<'_, O, R> {
    fn drop(&mut self) {
        let mut guard = lock(&self.table.slots[self.slot]);
        if let Some(w) = guard.write.as_mut().filter(|w| w.leader == self.behind) {
            w.queued.retain(|(i, _)| *i != self.id);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A waker that counts its wake-ups: the tests poll by hand.
    struct Flag(AtomicUsize);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn flag() -> Arc<Flag> {
        Arc::new(Flag(AtomicUsize::new(0)))
    }

    fn wakes(flag: &Arc<Flag>) -> usize {
        flag.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn poll<F: Future + Unpin>(f: &mut F, flag: &Arc<Flag>) -> Poll<F::Output> {
        let waker = Waker::from(flag.clone());
        Pin::new(f).poll(&mut Context::from_waker(&waker))
    }

    type Table = Rdwc<u32, u64>;

    fn read_leader<'a>(t: &'a Table, key: &[u8]) -> ReadLeader<'a, u32, u64> {
        match t.begin_read(key) {
            ReadRole::Leader(l) => l,
            other => panic!("expected to lead, got {other:?}"),
        }
    }

    fn read_follower<'a>(t: &'a Table, key: &[u8]) -> ReadWait<'a, u32, u64> {
        match t.begin_read(key) {
            ReadRole::Follower(w) => w,
            other => panic!("expected to follow, got {other:?}"),
        }
    }

    fn write_leader<'a>(t: &'a Table, key: &[u8], op: u32) -> WriteLeader<'a, u32, u64> {
        match t.begin_write(key, op) {
            WriteRole::Leader(l) => l,
            other => panic!("expected to lead, got {other:?}"),
        }
    }

    fn write_follower<'a>(t: &'a Table, key: &[u8], op: u32) -> WriteWait<'a, u32, u64> {
        match t.begin_write(key, op) {
            WriteRole::Follower(w) => w,
            other => panic!("expected to follow, got {other:?}"),
        }
    }

    /// Two keys that share a slot of `t`.
    fn conflicting_keys(t: &Table) -> (Vec<u8>, Vec<u8>) {
        let a = b"key-0".to_vec();
        let b = (1u32..)
            .map(|i| format!("key-{i}").into_bytes())
            .find(|b| t.slot_of(b) == t.slot_of(&a))
            .expect("some key shares the slot");
        (a, b)
    }

    fn assert_static<T: Send + Sync + 'static>() {}

    #[test]
    fn table_is_send_sync_and_sized_to_a_power_of_two() {
        assert_static::<Rdwc<Vec<u8>, Result<Option<Vec<u8>>, crate::IndexError>>>();
        assert_eq!(Table::new(0, true).slots(), 1);
        assert_eq!(Table::new(1000, true).slots(), 1024);
        assert_eq!(Table::new(DEFAULT_SLOTS, true).slots(), DEFAULT_SLOTS);
        assert_eq!((slot_count(MAX_SLOTS - 1), slot_count(usize::MAX)), (MAX_SLOTS, MAX_SLOTS));
        // An idle slot is small, so that SMART's 4 Mi slots stay affordable.
        let slot = size_of::<Mutex<Slot<Vec<u8>, Result<Option<Vec<u8>>, crate::IndexError>>>>();
        assert!(slot <= 128);
        let t = Table::new(1024, true);
        assert!(t.enabled());
        let idle = t.bytes();
        assert!(idle >= 1024 * size_of::<Mutex<Slot<u32, u64>>>() as u64);
        let l = read_leader(&t, b"hot");
        let mut w = read_follower(&t, b"hot");
        assert!(t.bytes() > idle, "an open window's key and followers are counted");
        l.finish(1);
        assert_eq!(poll(&mut w, &flag()), Poll::Ready(None));
        assert_eq!(t.bytes(), idle, "nothing is left once every follower took its outcome");
        assert!(format!("{t:?}").contains("slots: 1024"));
    }

    #[test]
    fn followers_that_joined_before_the_mark_take_the_leaders_result() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = read_leader(&t, b"hot");
        let mut a = read_follower(&t, b"hot");
        let mut b = read_follower(&t, b"hot");
        assert!(poll(&mut a, &f).is_pending());
        assert!(poll(&mut b, &f).is_pending());
        assert!(poll(&mut a, &f).is_pending(), "polling again re-registers, no duplicate");
        l.mark();
        l.finish(42);
        assert_eq!(wakes(&f), 2, "each waiting follower is woken once");
        assert_eq!(poll(&mut a, &f), Poll::Ready(Some(42)));
        assert_eq!(poll(&mut b, &f), Poll::Ready(Some(42)));
        // The window is closed: the next search leads a new one.
        drop(read_leader(&t, b"hot"));
        let s = t.stats();
        assert_eq!((s.reads_led, s.reads_delegated, s.reads_cut_off, s.reads_bypassed), (2, 2, 0, 0));
    }

    #[test]
    fn unmark_sends_every_follower_back_to_search() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = read_leader(&t, b"hot");
        let mut a = read_follower(&t, b"hot");
        assert!(poll(&mut a, &f).is_pending());
        l.mark();
        // The READ after the mark did not decide alone: nobody may take the result.
        l.unmark();
        l.finish(42);
        assert_eq!(poll(&mut a, &f), Poll::Ready(None));
        assert_eq!(t.stats().reads_cut_off, 1);
    }

    #[test]
    fn a_follower_polled_only_after_finish_still_gets_its_result() {
        let t = Table::new(16, true);
        let mut l = read_leader(&t, b"hot");
        let mut a = read_follower(&t, b"hot");
        l.mark();
        l.finish(7);
        assert_eq!(poll(&mut a, &flag()), Poll::Ready(Some(7)));
    }

    /// H6: a follower that joins after the leader posted its READ is not served that READ's
    /// result; it searches again and leads the next window, which the other late joiners follow.
    #[test]
    fn a_follower_joining_after_the_mark_searches_again() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = read_leader(&t, b"hot");
        let mut early = read_follower(&t, b"hot");
        l.mark();
        let mut late = read_follower(&t, b"hot");
        let mut later = read_follower(&t, b"hot");
        assert!(poll(&mut late, &f).is_pending());
        l.finish(1);
        assert_eq!(poll(&mut early, &f), Poll::Ready(Some(1)));
        assert_eq!(poll(&mut late, &f), Poll::Ready(None));
        assert_eq!(poll(&mut later, &f), Poll::Ready(None));
        // Both search again: the first leads, the second follows it (no stampede).
        let mut l2 = read_leader(&t, b"hot");
        let mut again = read_follower(&t, b"hot");
        l2.mark();
        l2.finish(2);
        assert_eq!(poll(&mut again, &f), Poll::Ready(Some(2)));
        let s = t.stats();
        assert_eq!((s.reads_led, s.reads_delegated, s.reads_cut_off), (2, 2, 2));
    }

    #[test]
    fn the_last_mark_counts_and_no_mark_serves_nobody() {
        let t = Table::new(16, true);
        let f = flag();
        // A retrying leader marks again: a follower that joined between the marks is served.
        let mut l = read_leader(&t, b"hot");
        l.mark();
        let mut a = read_follower(&t, b"hot");
        l.mark();
        l.finish(3);
        assert_eq!(poll(&mut a, &f), Poll::Ready(Some(3)));
        // A leader that never marked cannot vouch for its result's freshness.
        let l = read_leader(&t, b"hot");
        let mut b = read_follower(&t, b"hot");
        l.finish(4);
        assert_eq!(poll(&mut b, &f), Poll::Ready(None));
        assert_eq!(t.stats().reads_cut_off, 1);
    }

    #[test]
    fn a_dropped_read_leader_releases_its_followers_with_none() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = read_leader(&t, b"hot");
        let mut a = read_follower(&t, b"hot");
        assert!(poll(&mut a, &f).is_pending());
        l.mark();
        drop(l);
        assert_eq!(wakes(&f), 1);
        assert_eq!(poll(&mut a, &f), Poll::Ready(None));
        assert_eq!(t.stats().reads_orphaned, 1);
        drop(read_leader(&t, b"hot"));
    }

    #[test]
    fn a_dropped_read_follower_leaves_the_window() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = read_leader(&t, b"hot");
        let mut a = read_follower(&t, b"hot");
        assert!(poll(&mut a, &f).is_pending());
        let b = read_follower(&t, b"hot");
        drop(a);
        l.mark();
        l.finish(5);
        assert_eq!(wakes(&f), 0, "the dropped follower's waker is gone");
        assert_eq!(t.stats().reads_delegated, 1);
        // Served but dropped before taking its outcome: the outcome goes too.
        drop(b);
        let idle = Table::new(16, true).bytes();
        assert_eq!(t.bytes(), idle);
    }

    #[test]
    fn hash_conflicts_bypass_and_never_wait() {
        let t = Table::new(2, true);
        let (a, b) = conflicting_keys(&t);
        let l = read_leader(&t, &a);
        assert!(matches!(t.begin_read(&b), ReadRole::Bypass));
        let w = write_leader(&t, &a, 1);
        assert!(matches!(t.begin_write(&b, 2), WriteRole::Bypass(2)), "the conflicting op is given back");
        drop((l, w));
        let s = t.stats();
        assert_eq!((s.reads_bypassed, s.writes_bypassed), (1, 1));
        // Once the windows closed, the other key leads.
        drop(read_leader(&t, &b));
        drop(write_leader(&t, &b, 3));
    }

    #[test]
    fn read_and_write_windows_of_a_key_are_independent() {
        let t = Table::new(16, true);
        let f = flag();
        let mut r = read_leader(&t, b"hot");
        let mut w = write_leader(&t, b"hot", 1);
        let mut rf = read_follower(&t, b"hot");
        let mut wf = write_follower(&t, b"hot", 2);
        assert_eq!(w.close(), [1, 2]);
        w.finish(vec![10, 20]);
        assert_eq!(poll(&mut wf, &f), Poll::Ready(Some(20)));
        assert!(poll(&mut rf, &f).is_pending(), "the read window is still open");
        r.mark();
        r.finish(9);
        assert_eq!(poll(&mut rf, &f), Poll::Ready(Some(9)));
    }

    #[test]
    fn a_disabled_table_always_bypasses() {
        let t = Table::new(1024, false);
        assert!(!t.enabled());
        assert_eq!(t.slots(), 0);
        assert_eq!(t.bytes(), size_of::<Table>() as u64);
        for _ in 0..2 {
            assert!(matches!(t.begin_read(b"hot"), ReadRole::Bypass));
            assert!(matches!(t.begin_write(b"hot", 7), WriteRole::Bypass(7)));
        }
        let s = t.stats();
        assert_eq!(s, RdwcStats { reads_bypassed: 2, writes_bypassed: 2, ..RdwcStats::default() });
    }

    #[test]
    fn combined_writes_close_in_deposit_order_and_get_their_own_results() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = write_leader(&t, b"hot", 1);
        let mut a = write_follower(&t, b"hot", 2);
        let mut b = write_follower(&t, b"hot", 3);
        assert!(poll(&mut a, &f).is_pending());
        assert!(poll(&mut b, &f).is_pending());
        assert_eq!(l.close(), [1, 2, 3], "the leader's own op first, then deposit order");
        assert!(l.close().is_empty(), "a second close takes nothing");
        // H7: a writer arriving after close is not admitted; it gets its op back.
        assert!(matches!(t.begin_write(b"hot", 4), WriteRole::Bypass(4)));
        l.finish(vec![100, 200, 300]);
        assert_eq!(wakes(&f), 2);
        assert_eq!(poll(&mut b, &f), Poll::Ready(Some(300)));
        assert_eq!(poll(&mut a, &f), Poll::Ready(Some(200)));
        let s = t.stats();
        assert_eq!((s.writes_led, s.writes_combined, s.writes_bypassed, s.writes_orphaned), (1, 2, 1, 0));
        // The window is gone: the next writer leads.
        drop(write_leader(&t, b"hot", 5));
    }

    #[test]
    fn a_write_leader_failing_before_close_releases_followers_with_none() {
        let t = Table::new(16, true);
        let f = flag();
        let l = write_leader(&t, b"hot", 1);
        let mut a = write_follower(&t, b"hot", 2);
        assert!(poll(&mut a, &f).is_pending());
        drop(l);
        assert_eq!(wakes(&f), 1);
        assert_eq!(poll(&mut a, &f), Poll::Ready(None));
        // finish without close is the same: nothing was taken, so nothing was applied.
        let l = write_leader(&t, b"hot", 3);
        let mut b = write_follower(&t, b"hot", 4);
        l.finish(vec![30]);
        assert_eq!(poll(&mut b, &f), Poll::Ready(None));
        assert_eq!(t.stats().writes_orphaned, 2);
    }

    #[test]
    fn a_write_leader_dropped_after_close_releases_followers_with_none() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = write_leader(&t, b"hot", 1);
        let mut a = write_follower(&t, b"hot", 2);
        assert_eq!(l.close(), [1, 2]);
        drop(l);
        assert_eq!(poll(&mut a, &f), Poll::Ready(None));
        assert_eq!(t.stats().writes_orphaned, 1);
    }

    #[test]
    fn a_write_follower_dropped_before_close_withdraws_its_op() {
        let t = Table::new(16, true);
        let f = flag();
        let mut l = write_leader(&t, b"hot", 1);
        let a = write_follower(&t, b"hot", 2);
        let mut b = write_follower(&t, b"hot", 3);
        drop(a);
        assert_eq!(l.close(), [1, 3], "the dropped follower's op is not applied");
        l.finish(vec![10, 30]);
        assert_eq!(poll(&mut b, &f), Poll::Ready(Some(30)));
        assert_eq!(t.stats().writes_combined, 1);
    }

    #[test]
    fn a_write_follower_dropped_after_close_loses_only_its_result() {
        let t = Table::new(16, true);
        let f = flag();
        let idle = Table::new(16, true).bytes();
        let mut l = write_leader(&t, b"hot", 1);
        let mut a = write_follower(&t, b"hot", 2);
        let mut b = write_follower(&t, b"hot", 3);
        assert!(poll(&mut a, &f).is_pending());
        assert_eq!(l.close(), [1, 2, 3]);
        drop(a);
        l.finish(vec![10, 20, 30]);
        assert_eq!(wakes(&f), 0, "the dropped follower is not woken");
        assert_eq!(poll(&mut b, &f), Poll::Ready(Some(30)), "results still match their ops");
        assert_eq!(t.stats().writes_combined, 1);
        assert_eq!(t.bytes(), idle);
    }

    #[test]
    fn stats_of_several_tables_add_up() {
        let t = Table::new(4, true);
        let mut l = read_leader(&t, b"a");
        let mut a = read_follower(&t, b"a");
        l.mark();
        l.finish(1);
        assert_eq!(poll(&mut a, &flag()), Poll::Ready(Some(1)));
        let mut w = write_leader(&t, b"b", 1);
        let mut wa = write_follower(&t, b"b", 2);
        assert_eq!(w.close().len(), 2);
        w.finish(vec![1, 2]);
        assert_eq!(poll(&mut wa, &flag()), Poll::Ready(Some(2)));
        let one = t.stats();
        let mut sum = one;
        sum.add(&one);
        assert_eq!((sum.reads_led, sum.reads_delegated, sum.writes_led, sum.writes_combined), (2, 2, 2, 2));
    }

    #[test]
    fn queued_late_writers_wait_for_the_window_then_lead_or_follow_the_next() {
        let t = Table::new(16, true).queue_late_writers();
        let f = flag();
        let mut l = write_leader(&t, b"hot", 1);
        assert_eq!(l.close(), [1]);
        // Two same-key writers after `close` queue; another key still bypasses.
        let WriteRole::Queued(2, mut a) = t.begin_write(b"hot", 2) else { panic!("expected to queue") };
        let WriteRole::Queued(3, mut b) = t.begin_write(b"hot", 3) else { panic!("expected to queue") };
        assert!(poll(&mut a, &f).is_pending() && poll(&mut b, &f).is_pending());
        let conflict = (0..10_000u32).map(u32::to_le_bytes).find(|k| t.slot_of(k) == t.slot_of(b"hot"));
        let conflict = conflict.expect("16 slots: some key shares the slot");
        assert!(matches!(t.begin_write(&conflict, 9), WriteRole::Bypass(9)), "a hash conflict bypasses");
        // A queued writer that gives up leaves the queue.
        let WriteRole::Queued(4, c) = t.begin_write(b"hot", 4) else { panic!("expected to queue") };
        drop(c);
        l.finish(vec![10]);
        assert_eq!(wakes(&f), 2, "both queued writers are woken when the window ends");
        assert_eq!(poll(&mut a, &f), Poll::Ready(()));
        assert_eq!(poll(&mut b, &f), Poll::Ready(()));
        // Again: the first leads the next window, the second is combined into it.
        let mut next = write_leader(&t, b"hot", 2);
        let mut w = write_follower(&t, b"hot", 3);
        assert_eq!(next.close(), [2, 3]);
        next.finish(vec![20, 30]);
        assert_eq!(poll(&mut w, &f), Poll::Ready(Some(30)));
        let s = t.stats();
        assert_eq!((s.writes_led, s.writes_combined, s.writes_bypassed), (2, 1, 1));
        assert_eq!(t.bytes(), Table::new(16, true).bytes(), "nothing is left in the slot");
    }

    #[test]
    fn without_queueing_late_writers_bypass() {
        let t = Table::new(16, true);
        let mut l = write_leader(&t, b"hot", 1);
        l.close();
        assert!(matches!(t.begin_write(b"hot", 2), WriteRole::Bypass(2)));
        l.finish(vec![10]);
    }
}

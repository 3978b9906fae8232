//! # The local lock table of the hierarchical on-chip lock (HOCL)
//!
//! Sherman guards each tree node with a **global lock**: a word in a table on a memory node
//! (Sherman digest §2.7: `locks_per_node` words per memory node, the node's lock chosen by hashing
//! its address), taken with a remote CAS and released with a remote WRITE of 0. Clients of one
//! compute node that want the same global lock would all spin on that CAS over the network, so
//! HOCL puts a **local lock** in front of each global one (Sherman digest §1.3, §2.8): a compute
//! node keeps one local lock per global lock slot, its clients queue FIFO on it, and only the
//! local holder works the remote CAS. [`LocalLockTable`] is that compute-node half; the global
//! half (the CAS, the write-back, the remote unlock) is the index's, because it is verbs.
//!
//! ## Hand-over, and its bound
//!
//! When a holder releases while clients of its own node wait for the same slot, it may **hand
//! the still-held global lock over** to the oldest of them (Sherman digest §1.3, §3.4): the giver
//! issues no remote unlock (its write-back is a plain WRITE), and the receiver issues no CAS. For
//! fairness towards other compute nodes, at most `max_holders` consecutive local holders share
//! one global acquisition: a holder that took the global lock itself starts a streak at 1, each
//! one that inherits it adds 1, and a holder whose streak has reached `max_holders` releases the
//! global lock even if clients wait. Sherman's artifact allows 8 holders, 7 hand-overs
//! ([`SHERMAN_MAX_HOLDERS`]); 0 or 1 disables hand-over (Deft's default, digest §8 D14).
//!
//! ## How a caller uses it
//!
//! ```text
//! hold = table.acquire(node, index).await          // FIFO behind this node's other clients
//! if !hold.inherited() { CAS the global lock 0 → tag until it succeeds }
//! ... critical section: read, modify ...
//! h = table.plan_release(&hold)                    // true: hand the global lock over
//! post the write-back, and (iff !h) the remote unlock of the global lock; await them
//! table.finish_release(hold, h)                    // admits (and wakes) the next local waiter
//! ```
//!
//! The local lock stays held from `acquire` to `finish_release`, across the caller's verbs, so
//! the next local holder starts only after the write-back (and unlock) completed — as in the
//! artifact, where the ticket is advanced after the synchronous WRITE. `plan_release` and
//! `finish_release` are split so that the decision is known before the verbs are posted.
//! `finish_release` must be given what `plan_release` returned; passing `false` after a planned
//! hand-over is allowed and means "I released the global lock after all" (an error path): the
//! next holder then CASes. Passing `true` without a planned hand-over is a bug and panics, because
//! it would keep the global lock past the bound.
//!
//! ## Invariants
//!
//! 1. **At most one local holder per slot**, and holders follow in the order they queued: an
//!    `acquire` takes a free slot at once (its future is ready on the first poll); otherwise it
//!    joins the slot's FIFO queue, and a release grants the slot to the oldest waiter. Nobody
//!    barges past the queue: a slot granted to a waiter that has not yet run is not free.
//! 2. **A held global lock is never lost.** `finish_release(hold, true)` marks the global lock as
//!    held by this node for the next local holder. If the waiter it was meant for went away (its
//!    `acquire` future was dropped) the mark stays, and the next holder of the slot inherits it
//!    — a later waiter, or a later `acquire` that finds the slot free. No other compute node can
//!    take the global lock meanwhile, so until a client of this node wants that slot again the
//!    lock stays held, as it would if the client had crashed; cancelling a queued client is as
//!    rare as that. The streak goes on counting, so the bound holds across such a leftover.
//! 3. **A grant is never lost.** A dropped `acquire` future that was granted the slot but never
//!    observed it passes the grant (and any inheritance) on to the next waiter, or frees the slot;
//!    a dropped queued one just leaves the queue (the `Drop` of `dmkit_rdma::sync::Notified`).
//! 4. **Different slots are independent**: each `(node, index)` has its own lock and queue.
//!
//! ## Deviations from the artifact
//!
//! - The artifact's entry is a 64-bit ticket word (next ticket, now serving) that waiters poll,
//!   yielding their coroutine in between, plus `hand_over` and an 8-bit `hand_time`. Here each
//!   slot has a short mutex-protected state and a queue of wakers: a waiter sleeps until its
//!   grant and is woken exactly once, which any executor (the simulator's, or one per OS thread)
//!   can schedule, and which lets a waiter be cancelled cleanly. The order (FIFO), the hand-over
//!   rule (`waiters > 0 && streak < max_holders`) and the bound are the artifact's.
//! - A slot is about 24 bytes, the queue allocated only while the slot is contended, against the
//!   artifact's 16 (Sherman digest §2.8); [`LocalLockTable::bytes`] counts both.
//! - A [`LocalHold`] dropped without `finish_release` (a task cancelled inside its critical
//!   section) keeps the local lock forever, as its global lock stays held: that is a crash of
//!   the holder, and nothing here can tell whether its verbs ran.
//!
//! ## Slots out of range
//!
//! `acquire` panics on a `node` or `index` outside the table. Folding them in (modulo) would be
//! unsafe with hand-over: two global locks would share one local slot, and a holder of one could
//! hand "its" global lock to a waiter for the other, which would then skip its CAS. Callers
//! compute `index` modulo [`LocalLockTable::locks_per_node`] themselves, as they do for the
//! global table.
//!
//! ## Costs
//!
//! Every call takes the slot's lock once, briefly, and never across an `.await`; wakers are woken
//! after it is released. No verb is issued here.

use super::primitive::{AtomicU64, Mutex, Ordering, lock};
use crate::{Counters, IndexError, RaceHandler};
use dmkit_rdma::{Client, RemoteAddr};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::mem::size_of;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Sherman's bound on local holders per global acquisition (`kMaxHandOverTime`, digest §3.4).
pub const SHERMAN_MAX_HOLDERS: u32 = 8;

/// Sherman's global (and so local) locks per memory node: 256 KiB of 8-B words (digest §2.7).
pub const SHERMAN_LOCKS_PER_NODE: u32 = 32_768;

/// The largest table [`LocalLockTable::new`] builds, in slots (a sanity limit: 2^28 slots are
/// about 6 GiB of compute-node memory).
pub const MAX_SLOTS: u64 = 1 << 28;

/// What a [`LocalLockTable`] did, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoclStats {
    /// Local locks taken (futures of `acquire` that completed).
    pub acquisitions: u64,
    /// Of those, how many inherited the global lock (hand-overs received; issued no CAS).
    pub inherited: u64,
    /// `acquire`s that found the slot taken and had to queue.
    pub waits: u64,
    /// `finish_release(.., true)`: hand-overs given (the giver issued no remote unlock).
    pub handed_over: u64,
    /// Queued or granted `acquire` futures dropped before they took the lock.
    pub cancelled: u64,
}

impl HoclStats {
    /// Adds another table's counts (another compute node's).
    pub fn add(&mut self, other: &HoclStats) {
        self.acquisitions += other.acquisitions;
        self.inherited += other.inherited;
        self.waits += other.waits;
        self.handed_over += other.handed_over;
        self.cancelled += other.cancelled;
    }
}

/// A queued `acquire`: its ticket (unique within the slot's queue) and the waker to wake when it
/// is granted the slot.
type Waiter = (u64, Option<Waker>);

/// The waiting side of a contended slot, allocated while the slot is held and someone queued.
#[derive(Debug, Default)]
struct Queue {
    next_ticket: u64,
    /// The ticket the slot was granted to, until that waiter observes it.
    granted: Option<u64>,
    /// Oldest first.
    waiters: VecDeque<Waiter>,
}

/// One local lock.
#[derive(Debug, Default)]
struct Slot {
    /// The local lock is taken: by a holder, or granted to a waiter that has not yet observed it.
    locked: bool,
    /// The global lock is held by this node for the next local holder (a hand-over not yet
    /// received).
    inherit: bool,
    /// The current holder's last `plan_release` chose a hand-over.
    planned: bool,
    /// Local holders since the last global acquisition, the current one included.
    streak: u32,
    /// `None` while nobody ever queued since the slot was last free.
    queue: Option<Box<Queue>>,
}

impl Slot {
    /// Makes the caller the holder of a slot it was granted or found free; returns whether it
    /// inherits the global lock.
    fn take(&mut self) -> bool {
        self.locked = true;
        self.planned = false;
        let inherited = std::mem::take(&mut self.inherit);
        self.streak = if inherited { self.streak.saturating_add(1) } else { 1 };
        inherited
    }

    fn has_waiters(&self) -> bool {
        self.queue.as_ref().is_some_and(|q| !q.waiters.is_empty())
    }

    /// Grants the slot to the oldest waiter (returning its waker, to be woken once the slot's
    /// lock is released), or frees it. `inherit` is left as it is: the next holder takes it.
    fn pass_on(&mut self) -> Option<Waker> {
        if let Some(q) = self.queue.as_mut() {
            if let Some((ticket, waker)) = q.waiters.pop_front() {
                q.granted = Some(ticket);
                self.locked = true;
                return waker;
            }
        }
        self.locked = false;
        self.planned = false;
        self.queue = None;
        None
    }

    fn queue_bytes(&self) -> u64 {
        self.queue.as_ref().map_or(0, |q| (size_of::<Queue>() + q.waiters.capacity() * size_of::<Waiter>()) as u64)
    }
}

/// The local lock table of one compute node (see the module doc): one local lock per global lock
/// slot `(node, index)`, `node < memory_nodes`, `index < locks_per_node`. Shared by the node's
/// clients; every method takes `&self`.
pub struct LocalLockTable {
    memory_nodes: u16,
    locks_per_node: u32,
    max_holders: u32,
    /// Indexed by `node * locks_per_node + index`.
    slots: Vec<Mutex<Slot>>,
    acquisitions: AtomicU64,
    inherited: AtomicU64,
    waits: AtomicU64,
    handed_over: AtomicU64,
    cancelled: AtomicU64,
}

impl fmt::Debug for LocalLockTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalLockTable")
            .field("memory_nodes", &self.memory_nodes)
            .field("locks_per_node", &self.locks_per_node)
            .field("max_holders", &self.max_holders)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl LocalLockTable {
    /// A table of `locks_per_node` local locks for each of `memory_nodes` memory nodes, allowing
    /// `max_holders` local holders per global acquisition (0 or 1: no hand-over).
    pub fn new(memory_nodes: u16, locks_per_node: u32, max_holders: u32) -> Result<LocalLockTable, String> {
        if memory_nodes == 0 || locks_per_node == 0 {
            return Err(format!(
                "a local lock table needs at least one memory node and one lock per node \
                 (got {memory_nodes} × {locks_per_node})"
            ));
        }
        let slots = u64::from(memory_nodes) * u64::from(locks_per_node);
        if slots > MAX_SLOTS {
            return Err(format!("a local lock table of {memory_nodes} × {locks_per_node} locks exceeds {MAX_SLOTS}"));
        }
        Ok(LocalLockTable {
            memory_nodes,
            locks_per_node,
            max_holders,
            slots: (0..slots).map(|_| Mutex::new(Slot::default())).collect(),
            acquisitions: AtomicU64::new(0),
            inherited: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            handed_over: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
        })
    }

    pub fn memory_nodes(&self) -> u16 {
        self.memory_nodes
    }

    pub fn locks_per_node(&self) -> u32 {
        self.locks_per_node
    }

    pub fn max_holders(&self) -> u32 {
        self.max_holders
    }

    fn slot(&self, node: u16, index: u32) -> &Mutex<Slot> {
        assert!(
            node < self.memory_nodes && index < self.locks_per_node,
            "local lock ({node}, {index}) is outside the table of {} memory nodes × {} locks",
            self.memory_nodes,
            self.locks_per_node
        );
        &self.slots[node as usize * self.locks_per_node as usize + index as usize]
    }

    /// Takes the local lock of global lock `index` on memory node `node`: at once if it is free
    /// (the future is ready on its first poll), else after every client queued before. The hold
    /// says whether the global lock came with it. Panics if the slot is outside the table.
    pub fn acquire(&self, node: u16, index: u32) -> Acquire<'_> {
        let _ = self.slot(node, index);
        Acquire { table: self, node, index, state: AcquireState::Start }
    }

    /// Decides how `hold` will be released: `true` means hand the global lock over to the next
    /// local holder — the caller must NOT release the global lock, only write its data back.
    /// Hand over iff a client of this node waits for the slot now and fewer than `max_holders`
    /// holders (this one included) have shared the current global acquisition.
    pub fn plan_release(&self, hold: &LocalHold) -> bool {
        let mut slot = lock(self.slot(hold.node, hold.index));
        assert!(
            slot.locked && slot.queue.as_ref().is_none_or(|q| q.granted.is_none()),
            "plan_release of local lock ({}, {}), which is not held (a hold from another table?)",
            hold.node,
            hold.index
        );
        slot.planned = slot.has_waiters() && slot.streak < self.max_holders;
        slot.planned
    }

    /// Releases `hold` once the caller's verbs (write-back, and the remote unlock unless
    /// `handed_over`) completed: the local lock goes to the oldest waiter, who is woken, and who
    /// inherits the global lock iff `handed_over`. With nobody waiting any more, the slot is
    /// freed, and a handed-over global lock stays marked as held for the next acquirer (module
    /// doc, invariant 2). `handed_over` must be what [`LocalLockTable::plan_release`] returned, or
    /// `false` if the caller released the global lock anyway; `true` without a planned hand-over
    /// panics.
    pub fn finish_release(&self, hold: LocalHold, handed_over: bool) {
        let waker = {
            let mut slot = lock(self.slot(hold.node, hold.index));
            assert!(
                slot.locked && slot.queue.as_ref().is_none_or(|q| q.granted.is_none()),
                "finish_release of local lock ({}, {}), which is not held (a hold from another table?)",
                hold.node,
                hold.index
            );
            assert!(
                !handed_over || slot.planned,
                "finish_release of local lock ({}, {}) hands the global lock over, but plan_release did not plan it",
                hold.node,
                hold.index
            );
            slot.planned = false;
            slot.inherit = handed_over;
            slot.pass_on()
        };
        if handed_over {
            self.handed_over.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// What the table did so far.
    pub fn stats(&self) -> HoclStats {
        HoclStats {
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
            inherited: self.inherited.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            handed_over: self.handed_over.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }

    /// Local bytes the table occupies (compute-node memory is a metric): its slots, and the
    /// queues of contended slots (payloads, not the heap's overhead). Visits every slot, so it is
    /// for reports, not for every operation.
    pub fn bytes(&self) -> u64 {
        let dense = size_of::<LocalLockTable>() + self.slots.len() * size_of::<Mutex<Slot>>();
        dense as u64 + self.slots.iter().map(|s| lock(s).queue_bytes()).sum::<u64>()
    }

    /// Records that a client took the lock, inheriting or not.
    fn count_acquisition(&self, inherited: bool) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        if inherited {
            self.inherited.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The local lock of one global lock slot, held; give it back with
/// [`LocalLockTable::finish_release`]. Dropping it instead keeps the slot locked for good (a
/// crashed holder: module doc).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a local lock must be released with LocalLockTable::finish_release"]
pub struct LocalHold {
    node: u16,
    index: u32,
    inherited: bool,
}

impl LocalHold {
    /// The global lock was handed over with the local one: the holder must not CAS it (this
    /// node already holds it).
    pub fn inherited(&self) -> bool {
        self.inherited
    }

    /// The memory node of the global lock.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// The global lock's index on its memory node.
    pub fn index(&self) -> u32 {
        self.index
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AcquireState {
    /// Not polled yet.
    Start,
    /// In the slot's queue with this ticket (or granted it, not yet observed).
    Queued(u64),
    /// Returned its hold.
    Done,
}

/// The future of [`LocalLockTable::acquire`]. Dropping it while queued leaves the queue; dropping
/// it after it was granted the lock but before it returned the hold passes the lock on.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    table: &'a LocalLockTable,
    node: u16,
    index: u32,
    state: AcquireState,
}

impl Acquire<'_> {
    fn hold(&mut self, inherited: bool) -> Poll<LocalHold> {
        self.state = AcquireState::Done;
        self.table.count_acquisition(inherited);
        Poll::Ready(LocalHold { node: self.node, index: self.index, inherited })
    }
}

impl Future for Acquire<'_> {
    type Output = LocalHold;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LocalHold> {
        let mut slot = lock(self.table.slot(self.node, self.index));
        match self.state {
            AcquireState::Start => {
                if !slot.locked {
                    let inherited = slot.take();
                    drop(slot);
                    return self.hold(inherited);
                }
                let q = slot.queue.get_or_insert_with(Box::default);
                let ticket = q.next_ticket;
                q.next_ticket += 1;
                q.waiters.push_back((ticket, Some(cx.waker().clone())));
                drop(slot);
                self.state = AcquireState::Queued(ticket);
                self.table.waits.fetch_add(1, Ordering::Relaxed);
                Poll::Pending
            }
            AcquireState::Queued(ticket) => {
                let q = slot.queue.as_mut().expect("a queued acquire's slot has a queue");
                if q.granted == Some(ticket) {
                    q.granted = None;
                    let inherited = slot.take();
                    drop(slot);
                    return self.hold(inherited);
                }
                let (_, waker) = q
                    .waiters
                    .iter_mut()
                    .find(|(t, _)| *t == ticket)
                    .expect("a queued acquire is in its slot's queue or granted");
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            AcquireState::Done => {
                panic!("the acquire of local lock ({}, {}) polled after it completed", self.node, self.index)
            }
        }
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        let AcquireState::Queued(ticket) = self.state else { return };
        let waker = {
            let mut slot = lock(self.table.slot(self.node, self.index));
            let q = slot.queue.as_mut().expect("a queued acquire's slot has a queue");
            if q.granted == Some(ticket) {
                // Granted but never observed: pass the lock (and any inherited global lock) on.
                q.granted = None;
                slot.pass_on()
            } else {
                q.waiters.retain(|(t, _)| *t != ticket);
                None
            }
        };
        self.table.cancelled.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::task::Wake;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Flag(AtomicUsize);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Flag {
        fn woken(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A client's acquire future and the flag its waker sets.
    struct Waiting<'a> {
        future: Pin<Box<Acquire<'a>>>,
        flag: Arc<Flag>,
    }

    impl<'a> Waiting<'a> {
        fn new(table: &'a LocalLockTable, node: u16, index: u32) -> Waiting<'a> {
            Waiting { future: Box::pin(table.acquire(node, index)), flag: Arc::default() }
        }

        fn poll(&mut self) -> Poll<LocalHold> {
            let waker = Waker::from(self.flag.clone());
            self.future.as_mut().poll(&mut Context::from_waker(&waker))
        }

        /// Polls, expecting to queue.
        fn queued(table: &'a LocalLockTable, node: u16, index: u32) -> Waiting<'a> {
            let mut w = Waiting::new(table, node, index);
            assert!(w.poll().is_pending(), "({node}, {index}) should be taken");
            w
        }

        fn ready(&mut self) -> LocalHold {
            match self.poll() {
                Poll::Ready(hold) => hold,
                Poll::Pending => panic!("expected the lock to be granted"),
            }
        }
    }

    /// Takes a slot that must be free.
    fn take_now(table: &LocalLockTable, node: u16, index: u32) -> LocalHold {
        Waiting::new(table, node, index).ready()
    }

    /// Releases as a caller would: plans, and finishes with the plan.
    fn release(table: &LocalLockTable, hold: LocalHold) -> bool {
        let h = table.plan_release(&hold);
        table.finish_release(hold, h);
        h
    }

    fn table(max_holders: u32) -> LocalLockTable {
        LocalLockTable::new(2, 16, max_holders).unwrap()
    }

    #[test]
    fn sizes_are_validated() {
        assert!(LocalLockTable::new(0, 16, 8).is_err());
        assert!(LocalLockTable::new(2, 0, 8).is_err());
        assert!(LocalLockTable::new(u16::MAX, u32::MAX, 8).is_err());
        let t = LocalLockTable::new(2, SHERMAN_LOCKS_PER_NODE, SHERMAN_MAX_HOLDERS).unwrap();
        assert_eq!((t.memory_nodes(), t.locks_per_node(), t.max_holders()), (2, 32_768, 8));
        assert!(format!("{t:?}").contains("locks_per_node: 32768"));
    }

    #[test]
    #[should_panic(expected = "outside the table")]
    fn an_index_out_of_range_panics() {
        drop(table(8).acquire(0, 16));
    }

    #[test]
    #[should_panic(expected = "outside the table")]
    fn a_node_out_of_range_panics() {
        drop(table(8).acquire(2, 0));
    }

    #[test]
    fn a_free_slot_is_taken_at_once_and_alone_never_hands_over() {
        let t = table(8);
        let hold = take_now(&t, 1, 3);
        assert!(!hold.inherited());
        assert_eq!((hold.node(), hold.index()), (1, 3));
        assert!(!t.plan_release(&hold), "nobody waits: release the global lock");
        t.finish_release(hold, false);
        let hold = take_now(&t, 1, 3);
        assert!(!hold.inherited());
        assert!(!release(&t, hold));
        assert_eq!(t.stats(), HoclStats { acquisitions: 2, ..HoclStats::default() });
    }

    #[test]
    fn waiters_are_served_in_fifo_order() {
        let t = table(0);
        let first = take_now(&t, 0, 0);
        let mut waiting: Vec<Waiting> = (0..4).map(|_| Waiting::queued(&t, 0, 0)).collect();
        t.finish_release(first, false);
        for i in 0..4 {
            assert_eq!(waiting[i].flag.woken(), 1, "waiter {i} is woken once, when granted");
            for later in &mut waiting[i + 1..] {
                assert!(later.poll().is_pending(), "a later waiter must not overtake waiter {i}");
                assert_eq!(later.flag.woken(), 0);
            }
            // The slot is granted, not free: a newcomer queues behind everyone.
            drop(Waiting::queued(&t, 0, 0));
            let hold = waiting[i].ready();
            assert!(!hold.inherited());
            t.finish_release(hold, false);
        }
        assert_eq!(t.stats(), HoclStats { acquisitions: 5, waits: 8, cancelled: 4, ..HoclStats::default() });
        assert!(!take_now(&t, 0, 0).inherited(), "the slot is free again");
    }

    #[test]
    fn hand_over_only_when_someone_waits() {
        let t = table(8);
        let hold = take_now(&t, 0, 5);
        assert!(!t.plan_release(&hold));
        let mut next = Waiting::queued(&t, 0, 5);
        assert!(t.plan_release(&hold), "a waiter arrived: hand over");
        t.finish_release(hold, true);
        let hold = next.ready();
        assert!(hold.inherited(), "the waiter received the global lock");
        assert!(!release(&t, hold));
        let hold = take_now(&t, 0, 5);
        assert!(!hold.inherited(), "the global lock was released, the next holder CASes");
        t.finish_release(hold, false);
        assert_eq!(t.stats(), HoclStats { acquisitions: 3, inherited: 1, waits: 1, handed_over: 1, cancelled: 0 });
    }

    /// A long queue: the global lock is shared by at most `max_holders` holders in a row.
    #[test]
    fn streaks_are_bounded_by_max_holders() {
        let t = table(3);
        let first = take_now(&t, 0, 0);
        let mut waiting: Vec<Waiting> = (0..9).map(|_| Waiting::queued(&t, 0, 0)).collect();
        let mut pattern = vec![first.inherited()];
        let mut plans = vec![release(&t, first)];
        for w in &mut waiting {
            let hold = w.ready();
            pattern.push(hold.inherited());
            plans.push(release(&t, hold));
        }
        let expected: Vec<bool> = (0..10).map(|i| i % 3 != 0).collect();
        assert_eq!(pattern, expected);
        // Each holder but the last of a streak (and the very last, with nobody waiting) hands over.
        let mut planned: Vec<bool> = (0..10).map(|i| i % 3 != 2).collect();
        planned[9] = false;
        assert_eq!(plans, planned);
        let stats = t.stats();
        assert_eq!((stats.acquisitions, stats.inherited, stats.handed_over, stats.waits), (10, 6, 6, 9));
    }

    #[test]
    fn max_holders_zero_or_one_never_hands_over() {
        for max_holders in [0, 1] {
            let t = table(max_holders);
            let first = take_now(&t, 1, 1);
            let mut waiting: Vec<Waiting> = (0..3).map(|_| Waiting::queued(&t, 1, 1)).collect();
            assert!(!release(&t, first));
            for w in &mut waiting {
                let hold = w.ready();
                assert!(!hold.inherited());
                assert!(!release(&t, hold));
            }
            assert_eq!((t.stats().inherited, t.stats().handed_over), (0, 0), "max_holders {max_holders}");
        }
    }

    #[test]
    fn releasing_the_global_lock_after_planning_a_hand_over_is_a_plain_release() {
        let t = table(8);
        let hold = take_now(&t, 0, 0);
        let mut next = Waiting::queued(&t, 0, 0);
        assert!(t.plan_release(&hold));
        t.finish_release(hold, false);
        let hold = next.ready();
        assert!(!hold.inherited(), "the giver released the global lock after all: CAS it");
        t.finish_release(hold, false);
    }

    #[test]
    #[should_panic(expected = "did not plan it")]
    fn an_unplanned_hand_over_panics() {
        let t = table(8);
        let hold = take_now(&t, 0, 0);
        let _next = Waiting::queued(&t, 0, 0);
        t.finish_release(hold, true);
    }

    #[test]
    fn a_dropped_waiter_leaves_the_queue() {
        let t = table(8);
        let hold = take_now(&t, 0, 0);
        let b = Waiting::queued(&t, 0, 0);
        let mut c = Waiting::queued(&t, 0, 0);
        drop(b);
        assert!(t.plan_release(&hold), "c still waits");
        t.finish_release(hold, true);
        assert_eq!(c.flag.woken(), 1);
        let hold = c.ready();
        assert!(hold.inherited());
        t.finish_release(hold, false);
        assert_eq!(t.stats().cancelled, 1);
        // With its only waiter gone, a holder does not hand over.
        let hold = take_now(&t, 0, 0);
        drop(Waiting::queued(&t, 0, 0));
        assert!(!t.plan_release(&hold));
        t.finish_release(hold, false);
    }

    #[test]
    fn a_dropped_granted_waiter_passes_the_lock_and_the_global_lock_on() {
        let t = table(2);
        let hold = take_now(&t, 0, 0);
        let b = Waiting::queued(&t, 0, 0);
        let mut c = Waiting::queued(&t, 0, 0);
        let mut d = Waiting::queued(&t, 0, 0);
        assert!(t.plan_release(&hold));
        t.finish_release(hold, true);
        assert_eq!((b.flag.woken(), c.flag.woken()), (1, 0));
        drop(b);
        assert_eq!(c.flag.woken(), 1, "b's grant went to c");
        assert!(d.poll().is_pending());
        let hold = c.ready();
        assert!(hold.inherited(), "with the global lock b never took");
        // b never held the lock: c is the second holder of the streak, the last one allowed.
        assert!(!t.plan_release(&hold), "d waits, but the streak is at max_holders");
        t.finish_release(hold, false);
        assert!(!d.ready().inherited());
        assert_eq!(t.stats().cancelled, 1);
    }

    #[test]
    fn a_dropped_granted_last_waiter_frees_the_slot() {
        let t = table(8);
        let hold = take_now(&t, 0, 0);
        let b = Waiting::queued(&t, 0, 0);
        t.finish_release(hold, false);
        drop(b);
        let hold = take_now(&t, 0, 0);
        assert!(!hold.inherited());
        t.finish_release(hold, false);
    }

    #[test]
    fn a_leftover_inheritance_goes_to_the_next_acquirer() {
        let t = table(2);
        let hold = take_now(&t, 0, 7);
        let b = Waiting::queued(&t, 0, 7);
        assert!(t.plan_release(&hold));
        drop(b);
        t.finish_release(hold, true);
        // Nobody received the global lock; it is still held by this node.
        let hold = take_now(&t, 0, 7);
        assert!(hold.inherited(), "the next acquirer inherits the leftover global lock");
        // It is the streak's second holder: at the bound, it releases the global lock.
        let mut c = Waiting::queued(&t, 0, 7);
        assert!(!t.plan_release(&hold));
        t.finish_release(hold, false);
        let hold = c.ready();
        assert!(!hold.inherited());
        t.finish_release(hold, false);
        assert_eq!(t.stats(), HoclStats { acquisitions: 3, inherited: 1, waits: 2, handed_over: 1, cancelled: 1 });
    }

    #[test]
    fn a_leftover_inheritance_passes_through_a_granted_waiter_that_drops() {
        let t = table(8);
        let hold = take_now(&t, 0, 0);
        let b = Waiting::queued(&t, 0, 0);
        assert!(t.plan_release(&hold));
        t.finish_release(hold, true);
        drop(b);
        assert!(take_now(&t, 0, 0).inherited());
    }

    #[test]
    fn slots_are_independent() {
        let t = table(8);
        let a = take_now(&t, 0, 1);
        let b = take_now(&t, 0, 2);
        let c = take_now(&t, 1, 1);
        let mut waiting_a = Waiting::queued(&t, 0, 1);
        assert!(!t.plan_release(&b), "a waiter for (0, 1) does not make (0, 2) hand over");
        assert!(!t.plan_release(&c));
        t.finish_release(b, false);
        t.finish_release(c, false);
        assert_eq!(waiting_a.flag.woken(), 0);
        assert!(waiting_a.poll().is_pending());
        assert!(t.plan_release(&a));
        t.finish_release(a, true);
        assert!(waiting_a.ready().inherited());
        assert!(!take_now(&t, 0, 2).inherited(), "(0, 2) inherits nothing from (0, 1)");
    }

    #[test]
    fn a_never_polled_acquire_does_nothing() {
        let t = table(8);
        drop(t.acquire(0, 0));
        let hold = take_now(&t, 0, 0);
        t.finish_release(hold, false);
        assert_eq!(t.stats().cancelled, 0);
    }

    #[test]
    fn a_repoll_with_a_new_waker_is_the_one_woken() {
        let t = table(8);
        let hold = take_now(&t, 0, 0);
        let mut b = Waiting::queued(&t, 0, 0);
        let old = b.flag.clone();
        b.flag = Arc::default();
        assert!(b.poll().is_pending());
        t.finish_release(hold, false);
        assert_eq!((old.woken(), b.flag.woken()), (0, 1));
        t.finish_release(b.ready(), false);
    }

    #[test]
    fn bytes_count_slots_and_queues() {
        let t = table(8);
        let idle = t.bytes();
        assert!(idle >= 32 * size_of::<Mutex<Slot>>() as u64, "{idle}");
        assert!(size_of::<Mutex<Slot>>() <= 32, "a slot is {} bytes", size_of::<Mutex<Slot>>());
        let hold = take_now(&t, 0, 0);
        let waiting: Vec<Waiting> = (0..3).map(|_| Waiting::queued(&t, 0, 0)).collect();
        assert!(t.bytes() > idle, "a contended slot's queue counts");
        drop(waiting);
        t.finish_release(hold, false);
        assert_eq!(t.bytes(), idle, "a free slot drops its queue");
    }

    /// Parks the thread until woken.
    struct Unpark(std::thread::Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }

    /// OS threads hammer two slots with a model of the global lock: mutual exclusion, no global
    /// CAS ever fails (only this node uses the global locks), streaks stay within the bound.
    #[test]
    fn threads_keep_mutual_exclusion_and_the_bound() {
        struct Global {
            held: AtomicBool,
            inside: AtomicUsize,
            streak: AtomicUsize,
        }
        let t = Arc::new(LocalLockTable::new(1, 2, 3).unwrap());
        let globals: Arc<Vec<Global>> =
            Arc::new((0..2).map(|_| Global { held: false.into(), inside: 0.into(), streak: 0.into() }).collect());
        let sc = std::sync::atomic::Ordering::SeqCst;
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (t, globals) = (t.clone(), globals.clone());
                std::thread::spawn(move || {
                    for round in 0..2000u32 {
                        let index = (i + round) % 2;
                        let g = &globals[index as usize];
                        let hold = block_on(t.acquire(0, index));
                        if hold.inherited() {
                            assert!(g.held.load(sc), "an inherited global lock is held");
                            assert!(g.streak.fetch_add(1, sc) < 3, "more than max_holders share it");
                        } else {
                            assert!(g.held.compare_exchange(false, true, sc, sc).is_ok(), "global CAS failed");
                            g.streak.store(1, sc);
                        }
                        assert_eq!(g.inside.fetch_add(1, sc), 0, "two holders at once");
                        std::hint::spin_loop();
                        g.inside.fetch_sub(1, sc);
                        let h = t.plan_release(&hold);
                        if !h {
                            g.held.store(false, sc);
                        }
                        t.finish_release(hold, h);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let stats = t.stats();
        assert_eq!(stats.acquisitions, 8000);
        assert_eq!(stats.inherited, stats.handed_over);
        assert!(globals.iter().all(|g| !g.held.load(sc)));
    }
}

/// A lock taken without a CAS: a local holder on the same compute node handed its global lock
/// over.
pub const LOCK_HANDED_OVER: &str = "lock_handed_over";

/// A global lock CAS that found the word held: count it and CAS again.
pub const HOCL_LOCK_FAILED: RaceHandler = RaceHandler {
    event: Counters::LOCK_FAILURES,
    race: "a writer's lock CAS found the lock word held by another compute node's writer: it CASes again",
};

/// A lock handed over by a local holder on the same compute node: no CAS needed.
pub const HOCL_HANDED_OVER: RaceHandler = RaceHandler {
    event: LOCK_HANDED_OVER,
    race: "a local waiter inherits the global lock from the holder on its compute node instead of releasing and re-taking it",
};

/// A held hierarchical lock: the global lock word, and the local hold if a local table is used.
#[derive(Debug)]
pub struct HoclHeld {
    pub word: RemoteAddr,
    pub hold: Option<LocalHold>,
}

/// Takes the global lock word `word` (slot `(node, index)` of `table`, if there is one): the
/// local lock first — a lock handed over by a local holder needs no verb — then CAS 0 → `me`,
/// at most `max_retries` times. On failure the local hold is released before reporting.
#[allow(clippy::too_many_arguments)]
pub async fn acquire_global<C: Client>(
    ctx: &C,
    table: Option<&LocalLockTable>,
    (word, node, index): (RemoteAddr, u16, u32),
    me: u64,
    max_retries: u32,
    counters: &mut Counters,
    op: &'static str,
) -> Result<HoclHeld, IndexError> {
    let hold = match table {
        Some(t) => Some(t.acquire(node, index).await),
        None => None,
    };
    if hold.as_ref().is_some_and(|h| h.inherited()) {
        counters.event(LOCK_HANDED_OVER);
        return Ok(HoclHeld { word, hold });
    }
    let mut outcome = Err(IndexError::RetriesExhausted { op, retries: max_retries });
    for _ in 0..max_retries {
        match ctx.cas(word, 0, me).await {
            Ok(0) => return Ok(HoclHeld { word, hold }),
            Ok(_) => {
                counters.lock_failures += 1;
                counters.cas_failures += 1;
            }
            Err(e) => {
                outcome = Err(e.into());
                break;
            }
        }
    }
    if let (Some(t), Some(h)) = (table, hold) {
        t.finish_release(h, false);
    }
    outcome
}

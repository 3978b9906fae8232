//! The seam: every point where a task waits is a *step*, and a chooser decides which enabled
//! step runs next.
//!
//! A performance run takes the earliest step in virtual time (ties by sequence number). A
//! checking run hands every enabled step to a [`Chooser`], which may pick any of them: the
//! memory model's rules decide which steps are enabled, timing is ignored.

use dmkit_rdma::{NodeId, RemoteAddr};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What kind of wait a step ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepClass {
    /// A `sleep`, `yield_now` or `charge_cpu` ends.
    Timer,
    /// A task is woken: a local notification (any waker), or a completion whose poll waited for
    /// the thread's CPU.
    Wake,
    /// A service's CPU reads or writes its node's memory (one 8-byte word when split).
    Local,
    /// A post whose thread was busy leaves for the NIC (its requester-side stages start).
    Issue,
    /// A verb reaches the responder NIC.
    Arrive,
    /// A READ samples, or a WRITE places, one atomicity unit (or the whole verb when units are
    /// not split); a single-step RMW.
    Unit,
    /// The read-and-compare half of a two-step RMW.
    RmwRead,
    /// The write half of a two-step RMW.
    RmwWrite,
    /// A doorbell batch's completion is delivered to its client.
    Complete,
    /// An RPC's SEND reaches the server's NIC.
    RpcArrive,
    /// An RPC response is delivered to its client.
    RpcComplete,
    /// A scheduled fault (crash, restart, slowdown).
    Fault,
    /// A `yield_now` ends: the client gave its thread away, typically inside a spin loop (a
    /// lock or a version it waits on). PCT lowers a yielding client's priority, or a spinning
    /// client at the top would starve the one it waits for until its retries run out.
    Yield,
    /// An RPC's request is in the server's memory and its receive completion visible to the
    /// server's threads: it joins the node's RPC queue. (Last, so the other classes keep their
    /// trace-hash tags.)
    RpcDeliver,
}

impl StepClass {
    pub fn name(self) -> &'static str {
        match self {
            StepClass::Timer => "timer",
            StepClass::Wake => "wake",
            StepClass::Local => "local",
            StepClass::Issue => "issue",
            StepClass::Arrive => "arrive",
            StepClass::Unit => "unit",
            StepClass::RmwRead => "rmw-read",
            StepClass::RmwWrite => "rmw-write",
            StepClass::Complete => "complete",
            StepClass::RpcArrive => "rpc-arrive",
            StepClass::RpcComplete => "rpc-complete",
            StepClass::Fault => "fault",
            StepClass::Yield => "yield",
            StepClass::RpcDeliver => "rpc-deliver",
        }
    }
}

/// Who a step belongs to, for choosers that schedule by thread (PCT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Actor {
    Client(u32),
    /// A queue pair's verbs on their way and at the responder, with `SimConfig::qp_actors`.
    Qp(u32),
    Node(NodeId),
    Task(u32),
    Fault,
}

/// What a chooser sees of an enabled step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepInfo {
    pub time_ns: u64,
    /// Creation order; unique within a run.
    pub seq: u64,
    pub class: StepClass,
    pub actor: Actor,
    /// Remote memory the step touches, if any: its first byte and length.
    pub addr: Option<RemoteAddr>,
    pub len: u32,
    /// True if the step stores to memory.
    pub writes: bool,
}

/// Picks the next step among the enabled ones.
pub trait Chooser {
    /// `enabled` is never empty and is ordered by creation (`seq`); return an index into it.
    fn choose(&mut self, enabled: &[StepInfo]) -> usize;
}

/// Uniformly random choices from a seed: the simplest explorer.
#[derive(Debug)]
pub struct RandomChooser {
    rng: ChaCha8Rng,
}

impl RandomChooser {
    pub fn new(seed: u64) -> RandomChooser {
        RandomChooser { rng: ChaCha8Rng::seed_from_u64(seed) }
    }
}

impl Chooser for RandomChooser {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        self.rng.random_range(0..enabled.len())
    }
}

/// Takes the earliest enabled step: the performance order, usable through the chooser seam
/// (e.g. to record a timed run's choices).
#[derive(Debug, Default)]
pub struct EarliestChooser;

impl Chooser for EarliestChooser {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        let mut best = 0;
        for (i, s) in enabled.iter().enumerate() {
            if (s.time_ns, s.seq) < (enabled[best].time_ns, enabled[best].seq) {
                best = i;
            }
        }
        best
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StepKind {
    Timer(u32),
    Wake(crate::core::TaskId),
    /// Local operation, unit index (`WHOLE` for the whole access).
    Local(u32, u32),
    Issue(u32),
    IssueCall(u32),
    Arrive(u32),
    /// Verb, unit index (`WHOLE` for the whole access).
    Unit(u32, u32),
    RmwRead(u32),
    RmwWrite(u32),
    Complete(u32),
    RpcArrive(u32),
    RpcDeliver(u32),
    RpcComplete(u32),
    Fault(u32),
}

pub(crate) const WHOLE: u32 = u32::MAX;

impl StepKind {
    pub(crate) fn class(self) -> StepClass {
        match self {
            StepKind::Timer(_) => StepClass::Timer,
            StepKind::Wake(_) => StepClass::Wake,
            StepKind::Local(..) => StepClass::Local,
            StepKind::Issue(_) | StepKind::IssueCall(_) => StepClass::Issue,
            StepKind::Arrive(_) => StepClass::Arrive,
            StepKind::Unit(..) => StepClass::Unit,
            StepKind::RmwRead(_) => StepClass::RmwRead,
            StepKind::RmwWrite(_) => StepClass::RmwWrite,
            StepKind::Complete(_) => StepClass::Complete,
            StepKind::RpcArrive(_) => StepClass::RpcArrive,
            StepKind::RpcDeliver(_) => StepClass::RpcDeliver,
            StepKind::RpcComplete(_) => StepClass::RpcComplete,
            StepKind::Fault(_) => StepClass::Fault,
        }
    }

    /// A small number per kind, mixed into the trace hash.
    pub(crate) fn tag(self) -> u64 {
        self.class() as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Step {
    pub time_ns: u64,
    pub seq: u64,
    pub kind: StepKind,
}

/// Slots of the timing wheel: one per nanosecond, covering 32 us ahead of the cursor (loaded
/// round trips fit; transport timeouts and long sleeps go to the overflow heap).
const WHEEL_SLOTS: usize = 1 << 15;
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    step: Step,
    next: u32,
}

/// The pending steps of a timed run, popped in `(time, seq)` order.
///
/// Step times never precede the last popped time, and most fall within microseconds of it, so
/// a timing wheel serves them: slot `time % WHEEL_SLOTS` is a FIFO list threaded through a slab
/// (pushes happen in `seq` order, so FIFO is `seq` order), a bitmap finds the next occupied
/// slot, and steps beyond the wheel's window wait in a heap. `pop` takes the smaller of the
/// wheel's and the heap's heads.
pub(crate) struct TimedQueue {
    /// Time of the last popped step; every pending step is at or after it.
    cursor_ns: u64,
    /// `[head, tail]` entry indices per slot.
    slots: Vec<[u32; 2]>,
    occupied: Vec<u64>,
    entries: Vec<Entry>,
    free: Vec<u32>,
    in_wheel: usize,
    overflow: BinaryHeap<Reverse<Step>>,
}

impl Default for TimedQueue {
    fn default() -> Self {
        TimedQueue {
            cursor_ns: 0,
            slots: vec![[NIL, NIL]; WHEEL_SLOTS],
            occupied: vec![0; WHEEL_SLOTS / 64],
            entries: Vec::new(),
            free: Vec::new(),
            in_wheel: 0,
            overflow: BinaryHeap::new(),
        }
    }
}

impl TimedQueue {
    pub(crate) fn push(&mut self, step: Step) {
        assert!(step.time_ns >= self.cursor_ns, "step scheduled in the past: {step:?} before {}", self.cursor_ns);
        if step.time_ns >= self.cursor_ns + WHEEL_SLOTS as u64 {
            self.overflow.push(Reverse(step));
            return;
        }
        let entry = Entry { step, next: NIL };
        let index = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = entry;
                i
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        let slot = (step.time_ns % WHEEL_SLOTS as u64) as usize;
        let [head, tail] = &mut self.slots[slot];
        if *tail == NIL {
            *head = index;
            self.occupied[slot / 64] |= 1 << (slot % 64);
        } else {
            self.entries[*tail as usize].next = index;
        }
        *tail = index;
        self.in_wheel += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.in_wheel + self.overflow.len()
    }

    /// The first occupied slot at or after the cursor.
    fn wheel_head(&self) -> Option<usize> {
        if self.in_wheel == 0 {
            return None;
        }
        let start = (self.cursor_ns % WHEEL_SLOTS as u64) as usize;
        let words = WHEEL_SLOTS / 64;
        for i in 0..=words {
            let w = (start / 64 + i) % words;
            let mut bits = self.occupied[w];
            if i == 0 {
                bits &= !0u64 << (start % 64);
            }
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
        }
        unreachable!("in_wheel > 0 but no occupied slot")
    }

    /// The next step, and its wheel slot (`None`: the heap's head).
    fn head(&self) -> Option<(Step, Option<usize>)> {
        let wheel = self.wheel_head().map(|slot| (self.entries[self.slots[slot][0] as usize].step, Some(slot)));
        let heap = self.overflow.peek().map(|Reverse(s)| (*s, None));
        match (wheel, heap) {
            (Some(w), Some(h)) => Some(if (h.0.time_ns, h.0.seq) < (w.0.time_ns, w.0.seq) { h } else { w }),
            (w, h) => w.or(h),
        }
    }

    pub(crate) fn peek_time(&self) -> Option<u64> {
        self.head().map(|(s, _)| s.time_ns)
    }

    pub(crate) fn pop(&mut self) -> Option<Step> {
        let (step, slot) = self.head()?;
        match slot {
            Some(slot) => {
                let index = self.slots[slot][0];
                let next = self.entries[index as usize].next;
                self.slots[slot][0] = next;
                if next == NIL {
                    self.slots[slot][1] = NIL;
                    self.occupied[slot / 64] &= !(1 << (slot % 64));
                }
                self.free.push(index);
                self.in_wheel -= 1;
            }
            None => {
                self.overflow.pop();
            }
        }
        self.cursor_ns = step.time_ns;
        Some(step)
    }
}

/// Pending steps: a timing wheel for timed runs, a list for chooser runs.
pub(crate) enum StepQueue {
    Timed(Box<TimedQueue>),
    Chosen { steps: Vec<Step>, chooser: Box<dyn Chooser> },
}

impl std::fmt::Debug for StepQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StepQueue({} pending)", self.len())
    }
}

impl StepQueue {
    pub(crate) fn push(&mut self, step: Step) {
        match self {
            StepQueue::Timed(q) => q.push(step),
            StepQueue::Chosen { steps, .. } => steps.push(step),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            StepQueue::Timed(q) => q.len(),
            StepQueue::Chosen { steps, .. } => steps.len(),
        }
    }

    pub(crate) fn is_chosen(&self) -> bool {
        matches!(self, StepQueue::Chosen { .. })
    }

    /// Time of the step a timed run would take next.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        match self {
            StepQueue::Timed(q) => q.peek_time(),
            StepQueue::Chosen { steps, .. } => steps.iter().map(|s| s.time_ns).min(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// The wheel pops exactly what a (time, seq) heap pops, including far-future steps,
    /// equal times, and pushes made while popping.
    #[test]
    fn timing_wheel_matches_a_heap() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut wheel = TimedQueue::default();
        let mut heap = BinaryHeap::new();
        let mut seq = 0;
        let mut now = 0u64;
        for round in 0..20_000 {
            let pushes = if round % 3 == 0 { 2 } else { 1 };
            for _ in 0..pushes {
                seq += 1;
                let ahead = match rng.random_range(0..10) {
                    0 => 0,
                    1..=7 => rng.random_range(0..3_000),
                    8 => rng.random_range(3_000..40_000),
                    _ => rng.random_range(0..1_000_000),
                };
                let s = Step { time_ns: now + ahead, seq, kind: StepKind::Timer(seq as u32) };
                wheel.push(s);
                heap.push(Reverse(s));
            }
            assert_eq!(wheel.peek_time(), heap.peek().map(|Reverse(s)| s.time_ns));
            let (a, b) = (wheel.pop(), heap.pop().map(|Reverse(s)| s));
            assert_eq!(a, b);
            now = a.map_or(now, |s| s.time_ns);
        }
        while let Some(Reverse(s)) = heap.pop() {
            assert_eq!(wheel.pop(), Some(s));
        }
        assert_eq!(wheel.pop(), None);
        assert_eq!(wheel.len(), 0);
    }
}

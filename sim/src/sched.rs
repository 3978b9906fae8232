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
    /// A `sleep` or `yield_now` expires.
    Timer,
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
    /// An RPC reaches the server NIC.
    RpcArrive,
    /// A server thread runs an RPC handler.
    RpcHandle,
    /// An RPC response is delivered to its client.
    RpcComplete,
    /// A scheduled fault (crash, restart, slowdown).
    Fault,
}

impl StepClass {
    pub fn name(self) -> &'static str {
        match self {
            StepClass::Timer => "timer",
            StepClass::Arrive => "arrive",
            StepClass::Unit => "unit",
            StepClass::RmwRead => "rmw-read",
            StepClass::RmwWrite => "rmw-write",
            StepClass::Complete => "complete",
            StepClass::RpcArrive => "rpc-arrive",
            StepClass::RpcHandle => "rpc-handle",
            StepClass::RpcComplete => "rpc-complete",
            StepClass::Fault => "fault",
        }
    }
}

/// Who a step belongs to, for choosers that schedule by thread (PCT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Actor {
    Client(u32),
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
    Arrive(u32),
    /// Verb, unit index (`WHOLE` for the whole access).
    Unit(u32, u32),
    RmwRead(u32),
    RmwWrite(u32),
    Complete(u32),
    RpcArrive(u32),
    RpcHandle(u32),
    RpcComplete(u32),
    Fault(u32),
}

pub(crate) const WHOLE: u32 = u32::MAX;

impl StepKind {
    pub(crate) fn class(self) -> StepClass {
        match self {
            StepKind::Timer(_) => StepClass::Timer,
            StepKind::Arrive(_) => StepClass::Arrive,
            StepKind::Unit(..) => StepClass::Unit,
            StepKind::RmwRead(_) => StepClass::RmwRead,
            StepKind::RmwWrite(_) => StepClass::RmwWrite,
            StepKind::Complete(_) => StepClass::Complete,
            StepKind::RpcArrive(_) => StepClass::RpcArrive,
            StepKind::RpcHandle(_) => StepClass::RpcHandle,
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

/// Pending steps: a heap for timed runs, a list for chooser runs.
pub(crate) enum StepQueue {
    Timed(BinaryHeap<Reverse<Step>>),
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
            StepQueue::Timed(heap) => heap.push(Reverse(step)),
            StepQueue::Chosen { steps, .. } => steps.push(step),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            StepQueue::Timed(heap) => heap.len(),
            StepQueue::Chosen { steps, .. } => steps.len(),
        }
    }

    pub(crate) fn is_chosen(&self) -> bool {
        matches!(self, StepQueue::Chosen { .. })
    }

    /// Time of the step a timed run would take next.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        match self {
            StepQueue::Timed(heap) => heap.peek().map(|Reverse(s)| s.time_ns),
            StepQueue::Chosen { steps, .. } => steps.iter().map(|s| s.time_ns).min(),
        }
    }
}

//! The simulator's state and its step handlers: the verb pipeline, the memory model, RPCs and
//! faults. Single-threaded; the executor in `exec.rs` owns the tasks and calls in here.
//!
//! A verb's life, in steps:
//! 1. **post** (no step): requester-side stages are computed at issue time from the compute
//!    node NIC's next-free time; the verb joins its QP's in-transit queue.
//! 2. **Arrive**: the responder NIC serves verbs in arrival order (IOPS and inbound bandwidth),
//!    then PCIe, device memory or the atomic unit; this fixes when memory may be touched. The
//!    verb joins the QP's responder queue and starts once the ordering table allows.
//! 3. **Unit** (one per atomicity unit when split, else one for the whole verb), or
//!    **RmwRead** + **RmwWrite**: memory is sampled or changed at the responder's virtual time.
//! 4. **Complete**: once a batch's verbs and every earlier verb of its QP are done, the response
//!    crosses back and the completion is delivered.

use crate::allocations::Allocations;
use crate::config::{MemoryModel, SimConfig};
use crate::memory::{FixedMap, NodeMemories, SparseMemory};
use crate::nic::{PS_PER_NS, Server, StageCosts};
use crate::profile::rdma_op::Kind;
use crate::sched::{Actor, Step, StepClass, StepInfo, StepKind, StepQueue, WHOLE};
use crate::stats::{ClientStats, FaultCounters, NodeStats, Stats, VerbKind};
use dmkit_rdma::{
    CpuWork, MaskedAtomics, NodeId, Op, Region, RemoteAddr, Request, Response, VerbsError, validate_batch,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

pub(crate) type TaskId = u32;

/// A slab with deterministic slot reuse.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { items: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                (self.items.len() - 1) as u32
            }
        }
    }
    pub(crate) fn remove(&mut self, i: u32) -> T {
        let item = self.items[i as usize].take().expect("slab slot is live");
        self.free.push(i);
        item
    }
    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize).and_then(Option::as_ref)
    }
    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize).and_then(Option::as_mut)
    }
    pub(crate) fn live(&self) -> usize {
        self.items.len() - self.free.len()
    }
}

impl<T> std::ops::Index<u32> for Slab<T> {
    type Output = T;
    fn index(&self, i: u32) -> &T {
        self.get(i).expect("slab slot is live")
    }
}

impl<T> std::ops::IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, i: u32) -> &mut T {
        self.get_mut(i).expect("slab slot is live")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    InTransit,
    /// At the responder, waiting for the ordering rules.
    Waiting,
    /// Allowed to start, but queued behind another two-step RMW on the same address.
    LockWait,
    Running,
    Done,
}

#[derive(Debug)]
struct Verb {
    batch: u32,
    /// The next verb of the same batch, or `NO_VERB`.
    next_in_batch: u32,
    qp: u32,
    addr: RemoteAddr,
    op: Op,
    fence: bool,
    kind: Kind,
    arrive_ps: u64,
    exec_ps: u64,
    node_epoch: u64,
    phase: Phase,
    /// Unit steps still to run; the next one for ascending order.
    units_left: u32,
    next_unit: u32,
    failed: bool,
    /// Failed by a `ReadFailure` (completes with `Timeout`, not `NodeDown`).
    timed_out: bool,
    rmw_old: u64,
    rmw_new: u64,
    resp_ps: u64,
}

#[derive(Debug)]
pub(crate) enum Outcome<T> {
    Pending,
    Ready(Result<T, VerbsError>),
    /// The future was dropped: discard the result when it comes.
    Abandoned,
}

/// Something a task waits for: a batch, a call, a local access. Its result is taken by the
/// future that posted it, or dropped if that future is gone.
pub(crate) trait Awaited {
    type Output;
    fn outcome(&mut self) -> &mut Outcome<Self::Output>;
    fn waiter(&mut self) -> &mut Option<TaskId>;
}

/// The slab of each awaited kind, so one generic future serves them all.
pub(crate) trait AwaitedSlab<A: Awaited> {
    fn slab(core: &mut Core) -> &mut Slab<A>;
}

impl Core {
    /// Takes the result if it is ready (freeing the slot); otherwise registers the current task
    /// to be woken.
    pub(crate) fn poll_awaited<A: Awaited>(&mut self, id: u32) -> Option<Result<A::Output, VerbsError>>
    where
        Core: AwaitedSlab<A>,
    {
        let waiter = self.current_task;
        let slab = <Core as AwaitedSlab<A>>::slab(self);
        let item = &mut slab[id];
        match std::mem::replace(item.outcome(), Outcome::Pending) {
            Outcome::Ready(result) => {
                slab.remove(id);
                Some(result)
            }
            other => {
                *item.outcome() = other;
                *item.waiter() = waiter;
                None
            }
        }
    }

    /// The waiting future is gone: free a ready result now, or discard it when it comes.
    pub(crate) fn drop_awaited<A: Awaited>(&mut self, id: u32)
    where
        Core: AwaitedSlab<A>,
    {
        let slab = <Core as AwaitedSlab<A>>::slab(self);
        match slab[id].outcome() {
            Outcome::Ready(_) => {
                slab.remove(id);
            }
            other => *other = Outcome::Abandoned,
        }
    }
}

macro_rules! awaited {
    ($kind:ty, $output:ty, $slab:ident) => {
        impl Awaited for $kind {
            type Output = $output;
            fn outcome(&mut self) -> &mut Outcome<$output> {
                &mut self.outcome
            }
            fn waiter(&mut self) -> &mut Option<TaskId> {
                &mut self.waiter
            }
        }
        impl AwaitedSlab<$kind> for Core {
            fn slab(core: &mut Core) -> &mut Slab<$kind> {
                &mut core.$slab
            }
        }
    };
}

/// A batch's responses up to its first failed verb, and that verb's error.
pub(crate) type BatchDone = (Vec<Response>, Option<VerbsError>);

awaited!(Batch, BatchDone, batches);
awaited!(Rpc, Vec<u8>, rpcs);
awaited!(LocalOp, Response, locals);

#[derive(Debug)]
pub(crate) struct Batch {
    client: u32,
    /// When the post's CPU work ends and the verbs leave for the NIC.
    posted_ps: u64,
    /// The batch's verbs in order, linked through `Verb::next_in_batch` (no allocation per batch).
    first_verb: u32,
    len: u32,
    pending: u32,
    signaled: bool,
    resp_ps_max: u64,
    waiter: Option<TaskId>,
    /// The responses of the verbs before the first that failed, and that failure.
    outcome: Outcome<BatchDone>,
}

#[derive(Debug)]
pub(crate) struct Rpc {
    client: u32,
    node: NodeId,
    service: u16,
    request: Vec<u8>,
    node_epoch: u64,
    /// The RPC thread (its client id) handling it.
    handler: Option<u32>,
    /// When the caller's post CPU work ends.
    posted_ps: u64,
    waiter: Option<TaskId>,
    result: Option<Result<Vec<u8>, VerbsError>>,
    outcome: Outcome<Vec<u8>>,
    /// Unique over the run (the slab reuses ids): a deferred reply names it.
    tag: u64,
    /// Answered already (a reply sent while its handler was still running).
    replied: bool,
}

/// A request handed to the executor: run `service`'s handler for `rpc` as a task of the RPC
/// thread's client `handler`.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) rpc: u32,
    pub(crate) node: NodeId,
    pub(crate) service: u16,
    pub(crate) handler: u32,
    pub(crate) request: Vec<u8>,
    /// The RPC's unique tag, for a deferred reply.
    pub(crate) tag: u64,
    /// The node's epoch when the handler started (a crash since ends it).
    pub(crate) node_epoch: u64,
}

/// A service CPU's access to its own node's memory.
#[derive(Debug)]
pub(crate) struct LocalOp {
    addr: RemoteAddr,
    op: Op,
    node_epoch: u64,
    units_left: u32,
    next_unit: u32,
    failed: bool,
    old: u64,
    waiter: Option<TaskId>,
    outcome: Outcome<Response>,
}

#[derive(Debug)]
pub(crate) struct Timer {
    pub(crate) fired: bool,
    pub(crate) abandoned: bool,
    pub(crate) waiter: Option<TaskId>,
    /// Set by `yield_now`: the step is a [`StepClass::Yield`].
    pub(crate) yields: bool,
}

/// `Verb::arrive_ps` of a verb whose post waits for its thread's CPU.
const NOT_ISSUED: u64 = u64::MAX;

/// End of a batch's verb list.
const NO_VERB: u32 = u32::MAX;

#[derive(Debug, Default)]
struct Qp {
    in_transit: VecDeque<u32>,
    /// Whether the head of `in_transit` has its Arrive step scheduled.
    head_scheduled: bool,
    last_arrive_ps: u64,
    at_responder: VecDeque<u32>,
    outstanding: VecDeque<u32>,
    last_completion_ps: u64,
}

/// A memory or server node: registered memory, the responder side of its NIC, its services'
/// RPC threads.
#[derive(Debug)]
struct TargetNode {
    host: SparseMemory,
    device: SparseMemory,
    up: bool,
    epoch: u64,
    slowdown: f64,
    /// READs still to fail (`ReadFailure`s whose time came).
    armed_read_failures: u32,
    pcie: Server,
    atomic: Server,
    /// Per-address next-free time of the atomic unit (ps), pruned when stale.
    atomic_addr_free: FixedMap<u64, u64>,
    /// Two-step RMWs in flight per address, with the RMWs queued behind them.
    rmw_locks: FixedMap<u64, VecDeque<u32>>,
    /// Service ids registered here.
    services: BTreeSet<u16>,
    /// The clients of the node's RPC threads, and which of them are idle.
    rpc_threads: Vec<u32>,
    idle_rpc_threads: VecDeque<u32>,
    /// RPCs waiting for a thread, and RPCs being handled.
    rpc_queue: VecDeque<u32>,
    rpc_running: Vec<u32>,
    /// RPCs whose handler deferred the reply (`Service::dispatch` returned `None`).
    rpc_deferred: Vec<u32>,
    stats: NodeStats,
}

/// Every node's NIC: one link in each direction. Requests a node sends and responses it returns
/// share its outbound link; the inbound server also enforces the responder's IOPS bound.
#[derive(Debug, Default)]
struct Nic {
    out_link: Server,
    in_link: Server,
}

/// A serial CPU: the coroutines of one thread share it.
#[derive(Debug)]
pub(crate) struct Thread {
    pub(crate) node: NodeId,
    cpu_free_ps: u64,
    pub(crate) coroutines: u32,
}

#[derive(Debug)]
pub(crate) struct ClientInfo {
    pub(crate) node: NodeId,
    pub(crate) thread: u32,
    pub(crate) coroutine: u32,
    pub(crate) task: Option<TaskId>,
    /// The client's random stream (shared by every handle to the client).
    pub(crate) rng: std::rc::Rc<std::cell::RefCell<ChaCha8Rng>>,
    pub(crate) stats: ClientStats,
}

#[derive(Clone, Copy, Debug)]
enum FaultEvent {
    CrashClient(u32),
    /// A node crashes, and restarts this many ns later if set.
    CrashNode(u16, Option<u64>),
    RestartNode(u16),
    SlowStart(u16, f64),
    SlowEnd(u16),
    /// The next READ to reach this memory node fails (`ReadFailure`).
    ArmReadFailure(u16),
}

pub(crate) struct Core {
    pub(crate) cfg: SimConfig,
    pub(crate) costs: StageCosts,
    pub(crate) now_ns: u64,
    seq: u64,
    pub(crate) queue: StepQueue,
    verbs: Slab<Verb>,
    batches: Slab<Batch>,
    rpcs: Slab<Rpc>,
    locals: Slab<LocalOp>,
    pub(crate) timers: Slab<Timer>,
    qps: Vec<Qp>,
    nodes: Vec<TargetNode>,
    nics: Vec<Nic>,
    pub(crate) threads: Vec<Thread>,
    pub(crate) clients: Vec<ClientInfo>,
    /// RPCs for the executor to start handlers for.
    pub(crate) dispatches: Vec<Dispatch>,
    /// Nodes that restarted: the executor creates their services afresh.
    pub(crate) restarted: Vec<NodeId>,
    faults: Vec<FaultEvent>,
    /// Tasks to poll, and whether each is already queued.
    pub(crate) ready: VecDeque<TaskId>,
    pub(crate) queued: Vec<bool>,
    pub(crate) current_task: Option<TaskId>,
    /// Tasks a fault has crashed; the executor drops them.
    pub(crate) crashed_tasks: Vec<TaskId>,
    /// The client each task runs for, if any (a finished task no longer holds its client).
    pub(crate) task_clients: Vec<Option<u32>>,
    rng: ChaCha8Rng,
    split_units: bool,
    split_rmw: bool,
    qp_actors: bool,
    pub(crate) steps: u64,
    /// Events stamped for histories so far (see `SimClient::history_stamp`).
    pub(crate) stamps: u64,
    /// Bulk-load mode: verbs, calls and CPU cost no time (see `Sim::set_instant`).
    pub(crate) instant: bool,
    verbs_posted: u64,
    batches_posted: u64,
    calls_posted: u64,
    pub(crate) fault_counters: FaultCounters,
    /// What host memory verbs may address, and the verbs that strayed outside it.
    pub(crate) allocations: Allocations,
    trace_hash: u64,
    pub(crate) trace: Option<Vec<String>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Core(t={}ns, {} steps, {:?})", self.now_ns, self.steps, self.queue)
    }
}

fn ns_of(ps: u64) -> u64 {
    ps.div_ceil(PS_PER_NS)
}

fn mix(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(23)
}

fn kind_of(op: &Op) -> Kind {
    match op {
        Op::Read(_) => Kind::Read,
        Op::Write(_) => Kind::Write,
        _ => Kind::Rmw,
    }
}

impl Core {
    pub(crate) fn new(cfg: SimConfig, queue: StepQueue) -> Core {
        let costs = StageCosts::new(&cfg.profile);
        let t = cfg.topology;
        let nodes = (0..t.target_nodes())
            .map(|_| TargetNode {
                host: SparseMemory::new(),
                device: SparseMemory::new(),
                up: true,
                epoch: 0,
                slowdown: 1.0,
                armed_read_failures: 0,
                pcie: Server::default(),
                atomic: Server::default(),
                atomic_addr_free: FixedMap::default(),
                rmw_locks: FixedMap::default(),
                services: BTreeSet::new(),
                rpc_threads: Vec::new(),
                idle_rpc_threads: VecDeque::new(),
                rpc_queue: VecDeque::new(),
                rpc_running: Vec::new(),
                rpc_deferred: Vec::new(),
                stats: NodeStats::default(),
            })
            .collect();
        let all_nodes = t.target_nodes() as usize + t.compute_nodes as usize;
        let chosen = queue.is_chosen();
        let tearing = cfg.faults.tearing.is_some();
        let mut core = Core {
            costs,
            now_ns: 0,
            seq: 0,
            queue,
            verbs: Slab::default(),
            batches: Slab::default(),
            rpcs: Slab::default(),
            locals: Slab::default(),
            timers: Slab::default(),
            qps: Vec::new(),
            nodes,
            nics: (0..all_nodes).map(|_| Nic::default()).collect(),
            threads: Vec::new(),
            clients: Vec::new(),
            dispatches: Vec::new(),
            restarted: Vec::new(),
            faults: Vec::new(),
            ready: VecDeque::new(),
            queued: Vec::new(),
            current_task: None,
            crashed_tasks: Vec::new(),
            task_clients: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0ffa_0175),
            split_units: chosen || tearing,
            qp_actors: cfg.qp_actors,
            split_rmw: (chosen || tearing) && !cfg.memory_model.rmw_atomic_with_writes,
            steps: 0,
            stamps: 0,
            instant: false,
            verbs_posted: 0,
            batches_posted: 0,
            calls_posted: 0,
            fault_counters: FaultCounters::default(),
            allocations: Allocations::new(t.memory_nodes, t.reserved_bytes),
            trace_hash: 0xcbf2_9ce4_8422_2325,
            trace: cfg.trace.then(Vec::new),
            cfg,
        };
        let f = core.cfg.faults.clone();
        for c in &f.client_crashes {
            core.schedule_fault(c.at_ns, FaultEvent::CrashClient(c.client));
        }
        for c in &f.node_crashes {
            core.schedule_fault(c.at_ns, FaultEvent::CrashNode(c.node, c.restart_at_ns.map(|r| r - c.at_ns)));
        }
        for r in &f.read_failures {
            core.schedule_fault(r.at_ns, FaultEvent::ArmReadFailure(r.node));
        }
        for s in &f.slowdowns {
            core.schedule_fault(s.from_ns, FaultEvent::SlowStart(s.node, s.factor));
            core.schedule_fault(s.to_ns, FaultEvent::SlowEnd(s.node));
        }
        core
    }

    /// Creates the RPC threads of every memory and server node. Called once, when the run
    /// starts, so that the clients a user adds first get ids 0, 1, 2...
    pub(crate) fn start_nodes(&mut self) {
        let t = self.cfg.topology;
        for n in 0..t.target_nodes() {
            let threads = if n < t.memory_nodes { t.memory_node_threads } else { t.server_threads };
            for _ in 0..threads {
                let thread = self.add_thread(NodeId(n));
                let client = self.add_client(thread);
                self.nodes[n as usize].rpc_threads.push(client);
                self.nodes[n as usize].idle_rpc_threads.push_back(client);
            }
        }
    }

    fn mm(&self) -> &MemoryModel {
        &self.cfg.memory_model
    }

    /// Schedules a READ failure (`ReadFailure`) on a memory node during the run.
    pub(crate) fn add_read_failure(&mut self, failure: crate::config::ReadFailure) -> Result<(), String> {
        if failure.node >= self.cfg.topology.memory_nodes {
            return Err(format!(
                "read failure names node {}, but memory nodes are 0..{}",
                failure.node, self.cfg.topology.memory_nodes
            ));
        }
        if failure.at_ns < self.now_ns {
            return Err(format!("read failure on node {} at {} ns: in the past", failure.node, failure.at_ns));
        }
        self.schedule_fault(failure.at_ns, FaultEvent::ArmReadFailure(failure.node));
        Ok(())
    }

    /// Schedules a crash (and restart) of a memory or server node during the run.
    pub(crate) fn add_node_crash(&mut self, crash: crate::config::NodeCrash) -> Result<(), String> {
        if crash.node >= self.cfg.topology.target_nodes() {
            return Err(format!(
                "node crash names node {}, but memory and server nodes are 0..{}",
                crash.node,
                self.cfg.topology.target_nodes()
            ));
        }
        if crash.at_ns < self.now_ns || crash.restart_at_ns.is_some_and(|r| r <= crash.at_ns) {
            return Err(format!(
                "node {} crash at {} ns: in the past, or restarting before it crashes",
                crash.node, crash.at_ns
            ));
        }
        self.schedule_fault(
            crash.at_ns,
            FaultEvent::CrashNode(crash.node, crash.restart_at_ns.map(|r| r - crash.at_ns)),
        );
        Ok(())
    }

    fn schedule_fault(&mut self, at_ns: u64, event: FaultEvent) {
        self.faults.push(event);
        let index = (self.faults.len() - 1) as u32;
        self.schedule(at_ns, StepKind::Fault(index));
    }

    pub(crate) fn schedule(&mut self, time_ns: u64, kind: StepKind) {
        self.seq += 1;
        self.queue.push(Step { time_ns, seq: self.seq, kind });
    }

    /// The thread service worker `index` on `node` runs on: a new one, or, on a server node
    /// whose workers share the RPC threads' cores, an RPC thread's.
    pub(crate) fn worker_thread(&mut self, node: NodeId, index: u32) -> u32 {
        let t = self.cfg.topology;
        let rpc = &self.nodes[node.0 as usize].rpc_threads;
        if node.0 >= t.memory_nodes && t.server_workers_share_cores && !rpc.is_empty() {
            let client = rpc[index as usize % rpc.len()];
            return self.clients[client as usize].thread;
        }
        self.add_thread(node)
    }

    /// A new thread (a serial CPU) on `node`.
    pub(crate) fn add_thread(&mut self, node: NodeId) -> u32 {
        self.threads.push(Thread { node, cpu_free_ps: 0, coroutines: 0 });
        (self.threads.len() - 1) as u32
    }

    /// A new client (coroutine) on `thread`.
    pub(crate) fn add_client(&mut self, thread: u32) -> u32 {
        let t = &mut self.threads[thread as usize];
        let coroutine = t.coroutines;
        t.coroutines += 1;
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed);
        rng.set_stream(self.clients.len() as u64 + 1);
        let rng = std::rc::Rc::new(std::cell::RefCell::new(rng));
        self.clients.push(ClientInfo {
            node: t.node,
            thread,
            coroutine,
            task: None,
            rng,
            stats: ClientStats::default(),
        });
        let nodes = self.nodes.len();
        self.qps.extend((0..nodes).map(|_| Qp::default()));
        (self.clients.len() - 1) as u32
    }

    /// Registers a service id on a target node (its handler lives in the executor).
    pub(crate) fn add_service(&mut self, node: NodeId, service: u16) -> Result<(), VerbsError> {
        let n = self.nodes.get_mut(node.0 as usize).ok_or(VerbsError::NoSuchNode(node))?;
        n.services.insert(service);
        Ok(())
    }

    pub(crate) fn is_target(&self, node: NodeId) -> bool {
        (node.0 as usize) < self.nodes.len()
    }

    /// Reserves `cost_ps` of the client's thread CPU starting no earlier than now; returns when
    /// the work ends.
    pub(crate) fn charge_thread(&mut self, client: u32, cost_ps: u64) -> u64 {
        let now_ps = self.now_ps();
        if self.instant {
            return now_ps;
        }
        let t = &mut self.threads[self.clients[client as usize].thread as usize];
        let end = t.cpu_free_ps.max(now_ps) + cost_ps;
        t.cpu_free_ps = end;
        end
    }

    /// `charge_cpu`: a timer that fires when the work is done, or `None` if it costs nothing and
    /// the CPU is free.
    pub(crate) fn charge_cpu(&mut self, client: u32, work: CpuWork, units: u64) -> Option<u32> {
        let cost_ps = (self.cfg.profile.cpu.cost_ns(work, units) * PS_PER_NS as f64) as u64;
        let end = self.charge_thread(client, cost_ps);
        let at = ns_of(end);
        if at <= self.now_ns {
            return None;
        }
        let id = self.timers.insert(Timer { fired: false, abandoned: false, waiter: None, yields: false });
        self.schedule(at, StepKind::Timer(id));
        Some(id)
    }

    /// Delivers a completion's wake-up to `client`'s task, after the poll that finds it. The
    /// step runs `poll_ps` after the response arrived; if another coroutine held the thread's
    /// CPU then, the wake-up waits for it.
    fn wake_after_poll(&mut self, client: u32, waiter: Option<TaskId>) {
        let now_ps = self.now_ps();
        let poll_ps = if self.instant { 0 } else { self.costs.poll_ps };
        let t = &mut self.threads[self.clients[client as usize].thread as usize];
        if t.cpu_free_ps + poll_ps > now_ps && !self.instant {
            let resume = t.cpu_free_ps + poll_ps;
            t.cpu_free_ps = resume;
            if let Some(task) = waiter {
                self.schedule(ns_of(resume), StepKind::Wake(task));
            }
        } else {
            t.cpu_free_ps = now_ps;
            self.wake(waiter);
        }
    }

    pub(crate) fn qp_index(&self, client: u32, node: NodeId) -> u32 {
        client * self.nodes.len() as u32 + node.0 as u32
    }

    pub(crate) fn wake(&mut self, task: Option<TaskId>) {
        if let Some(t) = task {
            if !self.queued[t as usize] {
                self.queued[t as usize] = true;
                self.ready.push_back(t);
            }
        }
    }

    fn now_ps(&self) -> u64 {
        self.now_ns * PS_PER_NS
    }

    // ---------------------------------------------------------------- direct memory access

    fn region_limit(&self, node: NodeId, region: Region) -> Result<u64, VerbsError> {
        if (node.0 as usize) >= self.nodes.len() {
            return Err(VerbsError::NoSuchNode(node));
        }
        Ok(match region {
            Region::Host => self.cfg.profile.host_memory_bytes,
            Region::Device => self.cfg.profile.device_memory_bytes,
        })
    }

    pub(crate) fn check_range(&self, addr: RemoteAddr, len: u64) -> Result<(), VerbsError> {
        let limit = self.region_limit(addr.node(), addr.region())?;
        match addr.offset().checked_add(len) {
            Some(end) if end <= limit => Ok(()),
            _ => Err(VerbsError::OutOfRange { addr, len }),
        }
    }

    fn mem(&self, addr: RemoteAddr) -> &SparseMemory {
        let n = &self.nodes[addr.node().0 as usize];
        match addr.region() {
            Region::Host => &n.host,
            Region::Device => &n.device,
        }
    }

    fn mem_mut(&mut self, addr: RemoteAddr) -> &mut SparseMemory {
        let n = &mut self.nodes[addr.node().0 as usize];
        match addr.region() {
            Region::Host => &mut n.host,
            Region::Device => &mut n.device,
        }
    }

    /// Reads memory directly (no time passes): tests, bulk load, invariant checks.
    pub(crate) fn peek(&self, addr: RemoteAddr, out: &mut [u8]) -> Result<(), VerbsError> {
        self.check_range(addr, out.len() as u64)?;
        self.mem(addr).read(addr.offset(), out);
        Ok(())
    }

    /// Writes memory directly (no time passes).
    pub(crate) fn poke(&mut self, addr: RemoteAddr, data: &[u8]) -> Result<(), VerbsError> {
        self.check_range(addr, data.len() as u64)?;
        self.mem_mut(addr).write(addr.offset(), data);
        Ok(())
    }

    // ---------------------------------------------------------------- posting

    /// Posts a batch. Returns the batch id for a signaled batch.
    pub(crate) fn post(&mut self, client: u32, requests: Vec<Request>, signaled: bool) -> Result<u32, VerbsError> {
        let node = validate_batch(&requests, self.cfg.profile.max_message_bytes)?;
        for r in &requests {
            self.check_range(r.addr, r.op.byte_len())?;
            self.allocations.check(self.now_ns, client, r.op.name(), r.addr, r.op.byte_len());
            if self.cfg.masked_atomics == MaskedAtomics::Emulated
                && matches!(r.op, Op::MaskedCas { .. } | Op::MaskedFaa { .. })
            {
                return Err(VerbsError::Unsupported(
                    "masked atomics are emulated on this backend: use Verbs::masked_cas / masked_faa outside batches",
                ));
            }
        }
        let qp = self.qp_index(client, node);
        if self.instant
            && !self.queue.is_chosen()
            && self.qps[qp as usize].outstanding.is_empty()
            && self.nodes.get(node.0 as usize).is_none_or(|n| n.armed_read_failures == 0)
        {
            if let Some(batch) = self.post_instant(client, node, requests, signaled) {
                return Ok(batch);
            }
            unreachable!("post_instant takes every batch it is offered");
        }
        // The post's CPU work is booked now, in the thread's order; if the thread is busy, the
        // verbs reach the NIC only when that work ends (an Issue step then), so that a post
        // waiting for the CPU does not hold the NIC for other threads meanwhile.
        let busy = self.thread_busy(client);
        let posted_ps = self.charge_thread(client, self.costs.post_cost_ps(requests.len() as u64));
        let batch = self.batches.insert(Batch {
            client,
            posted_ps,
            first_verb: NO_VERB,
            len: requests.len() as u32,
            pending: requests.len() as u32,
            signaled,
            resp_ps_max: 0,
            waiter: None,
            outcome: Outcome::Pending,
        });
        self.batches_posted += 1;
        let mut last = None;
        for r in requests {
            let kind = kind_of(&r.op);
            let counted = &mut self.clients[client as usize].stats.verbs[VerbKind::of(&r.op) as usize];
            counted.count += 1;
            counted.payload_bytes += r.op.byte_len();
            let v = self.verbs.insert(Verb {
                batch,
                next_in_batch: NO_VERB,
                qp,
                addr: r.addr,
                op: r.op,
                fence: r.fence,
                kind,
                arrive_ps: NOT_ISSUED,
                exec_ps: 0,
                // The incarnation the verb's queue pair is connected to: a verb posted before a
                // crash never executes on the restarted node (`NodeCrash`).
                node_epoch: self.nodes.get(r.addr.node().0 as usize).map_or(0, |n| n.epoch),
                phase: Phase::InTransit,
                units_left: 0,
                next_unit: 0,
                failed: false,
                timed_out: false,
                rmw_old: 0,
                rmw_new: 0,
                resp_ps: 0,
            });
            match last {
                Some(prev) => self.verbs[prev].next_in_batch = v,
                None => self.batches[batch].first_verb = v,
            }
            last = Some(v);
            let q = &mut self.qps[qp as usize];
            q.outstanding.push_back(v);
            q.in_transit.push_back(v);
            self.verbs_posted += 1;
        }
        if busy {
            self.schedule(ns_of(posted_ps), StepKind::Issue(batch));
        } else {
            self.issue(batch);
        }
        Ok(batch)
    }

    /// Bulk-load mode's fast path: with nothing of the QP in flight and no chooser, the verbs
    /// are applied now, in order, and the batch completes at once — the same outcome as the
    /// stepped path in instant mode (every stage costs nothing there), without the three steps
    /// per verb. A down node fails the batch as the stepped path would. Counted like the
    /// stepped path (verbs at the node and the client, one round trip per signalled batch);
    /// one step is counted per batch, so logical time still advances.
    fn post_instant(&mut self, client: u32, node: NodeId, requests: Vec<Request>, signaled: bool) -> Option<u32> {
        let n = node.0 as usize;
        let up = self.nodes[n].up;
        let mut responses = Vec::with_capacity(requests.len());
        for r in requests {
            let kind_index = VerbKind::of(&r.op) as usize;
            let len = r.op.byte_len();
            let counted = &mut self.clients[client as usize].stats.verbs[kind_index];
            counted.count += 1;
            counted.payload_bytes += len;
            self.verbs_posted += 1;
            if !up {
                self.fault_counters.verbs_failed_node_down += 1;
                continue;
            }
            let target = &mut self.nodes[n];
            target.stats.verbs[kind_index].count += 1;
            target.stats.verbs[kind_index].payload_bytes += len;
            let mem = match r.addr.region() {
                Region::Host => &mut target.host,
                Region::Device => &mut target.device,
            };
            let offset = r.addr.offset();
            responses.push(match r.op {
                Op::Read(mut buf) => {
                    mem.read(offset, &mut buf[..]);
                    Response::Read(buf)
                }
                Op::Write(buf) => {
                    mem.write(offset, &buf);
                    Response::Write(buf)
                }
                op => {
                    let old = mem.read_u64(offset);
                    let new = op.rmw_new(old).expect("an RMW");
                    if new != old {
                        mem.write_u64(offset, new);
                    }
                    Response::Atomic(old)
                }
            });
        }
        self.batches_posted += 1;
        self.steps += 1;
        self.trace_hash = mix(mix(self.trace_hash, self.now_ns), 0x1_57a7);
        let outcome = if up { Ok((responses, None)) } else { Err(VerbsError::NodeDown(node)) };
        let batch = self.batches.insert(Batch {
            client,
            posted_ps: self.now_ps(),
            first_verb: NO_VERB,
            len: 0,
            pending: 0,
            signaled,
            resp_ps_max: 0,
            waiter: None,
            outcome: Outcome::Ready(outcome),
        });
        if signaled {
            self.clients[client as usize].stats.round_trips += 1;
        } else {
            self.batches.remove(batch);
        }
        Some(batch)
    }

    /// True if the client's thread has CPU work booked past now.
    fn thread_busy(&self, client: u32) -> bool {
        !self.instant && self.threads[self.clients[client as usize].thread as usize].cpu_free_ps > self.now_ps()
    }

    /// The requester-side stages of a batch's verbs: the compute node's NIC sends them, in
    /// order, from the end of the post's CPU work.
    fn issue(&mut self, batch: u32) {
        let (client, posted_ps) = (self.batches[batch].client, self.batches[batch].posted_ps);
        let nic = self.clients[client as usize].node.0 as usize;
        let first = self.batches[batch].first_verb;
        let qp = self.verbs[first].qp;
        let mut next = first;
        while next != NO_VERB {
            let v = next;
            next = self.verbs[v].next_in_batch;
            let (kind, len) = (self.verbs[v].kind, self.verbs[v].op.byte_len());
            let arrive_ps = if self.instant {
                posted_ps
            } else {
                let req_bytes = self.costs.request_bytes(kind, len);
                let tx_start = posted_ps + self.costs.requester_latency_ps;
                let tx_done = self.nics[nic].out_link.serve(tx_start, self.costs.requester_tx_ps(req_bytes));
                let mut arrive_ps = tx_done + self.costs.wire_latency_ps;
                if let Some(d) = self.cfg.faults.extra_delay {
                    if self.rng.random_bool(d.probability) {
                        arrive_ps += self.rng.random_range(1..=d.max_ns) * PS_PER_NS;
                        self.fault_counters.delays_injected += 1;
                    }
                }
                arrive_ps
            };
            // Never reorder a QP: a verb arrives no earlier than the one posted before it.
            let q = &mut self.qps[qp as usize];
            let arrive_ps = arrive_ps.max(q.last_arrive_ps);
            q.last_arrive_ps = arrive_ps;
            self.verbs[v].arrive_ps = arrive_ps;
        }
        self.schedule_qp_head(qp);
    }

    /// Schedules the Arrive step of the QP's oldest verb in transit, once it has been issued.
    fn schedule_qp_head(&mut self, qp: u32) {
        let q = &self.qps[qp as usize];
        if q.head_scheduled {
            return;
        }
        if let Some(&head) = q.in_transit.front() {
            let arrive_ps = self.verbs[head].arrive_ps;
            if arrive_ps != NOT_ISSUED {
                self.qps[qp as usize].head_scheduled = true;
                let at = ns_of(arrive_ps).max(self.now_ns);
                self.schedule(at, StepKind::Arrive(head));
            }
        }
    }

    // ---------------------------------------------------------------- steps

    /// Picks and runs the next step. Returns false when no step is pending.
    pub(crate) fn step(&mut self) -> bool {
        let step = match &mut self.queue {
            StepQueue::Timed(q) => match q.pop() {
                Some(s) => s,
                None => return false,
            },
            StepQueue::Chosen { steps, .. } if steps.is_empty() => return false,
            StepQueue::Chosen { .. } => {
                let StepQueue::Chosen { steps, chooser } = std::mem::replace(
                    &mut self.queue,
                    StepQueue::Chosen { steps: Vec::new(), chooser: Box::new(crate::sched::EarliestChooser) },
                ) else {
                    unreachable!()
                };
                let infos: Vec<StepInfo> = steps.iter().map(|s| self.info(s)).collect();
                let mut chooser = chooser;
                let mut steps = steps;
                let i = chooser.choose(&infos);
                assert!(i < steps.len(), "chooser picked step {i} of {}", steps.len());
                let s = steps.remove(i);
                self.queue = StepQueue::Chosen { steps, chooser };
                s
            }
        };
        self.run_step(step);
        true
    }

    fn info(&self, s: &Step) -> StepInfo {
        let (actor, addr, len, writes) = match s.kind {
            StepKind::Arrive(v) | StepKind::Unit(v, _) | StepKind::RmwRead(v) | StepKind::RmwWrite(v) => {
                let verb = &self.verbs[v];
                let (addr, len) = match s.kind {
                    StepKind::Unit(_, u) if u != WHOLE => {
                        let (a, l) = self.unit_range(verb, u);
                        (verb.addr.add(a - verb.addr.offset()), l)
                    }
                    _ => (verb.addr, verb.op.byte_len()),
                };
                let writes =
                    !matches!(s.kind, StepKind::Arrive(_) | StepKind::RmwRead(_)) && !matches!(verb.op, Op::Read(_));
                let actor =
                    if self.qp_actors { Actor::Qp(verb.qp) } else { Actor::Client(verb.qp / self.nodes.len() as u32) };
                (actor, Some(addr), len as u32, writes)
            }
            StepKind::Complete(b) | StepKind::Issue(b) => (Actor::Client(self.batches[b].client), None, 0, false),
            StepKind::IssueCall(r) => (Actor::Client(self.rpcs[r].client), None, 0, false),
            StepKind::RpcArrive(r) | StepKind::RpcComplete(r) => (Actor::Client(self.rpcs[r].client), None, 0, false),
            StepKind::Timer(t) => (self.task_actor(self.timers[t].waiter), None, 0, false),
            StepKind::Wake(task) => (self.task_actor(Some(task)), None, 0, false),
            StepKind::Local(l, u) => {
                let op = &self.locals[l];
                let (addr, len) = if u == WHOLE { (op.addr, op.op.byte_len()) } else { (op.addr.add(u as u64 * 8), 8) };
                (Actor::Node(op.addr.node()), Some(addr), len as u32, !matches!(op.op, Op::Read(_)))
            }
            StepKind::Fault(_) => (Actor::Fault, None, 0, true),
        };
        let class = match s.kind {
            StepKind::Timer(t) if self.timers[t].yields => StepClass::Yield,
            k => k.class(),
        };
        StepInfo { time_ns: s.time_ns, seq: s.seq, class, actor, addr, len, writes }
    }

    /// A task's steps belong to its client, if it has one.
    fn task_actor(&self, task: Option<TaskId>) -> Actor {
        match task {
            Some(t) => match self.task_clients.get(t as usize).copied().flatten() {
                Some(c) => Actor::Client(c),
                None => Actor::Task(t),
            },
            None => Actor::Task(u32::MAX),
        }
    }

    fn run_step(&mut self, step: Step) {
        self.now_ns = self.now_ns.max(step.time_ns);
        self.steps += 1;
        let id = match step.kind {
            StepKind::Timer(x)
            | StepKind::Wake(x)
            | StepKind::Issue(x)
            | StepKind::IssueCall(x)
            | StepKind::Arrive(x)
            | StepKind::RmwRead(x)
            | StepKind::RmwWrite(x)
            | StepKind::Complete(x)
            | StepKind::RpcArrive(x)
            | StepKind::RpcComplete(x)
            | StepKind::Fault(x) => x as u64,
            StepKind::Unit(v, u) | StepKind::Local(v, u) => (v as u64) << 32 | u as u64,
        };
        self.trace_hash = mix(mix(mix(self.trace_hash, self.now_ns), step.kind.tag()), id);
        if let Some(trace) = &mut self.trace {
            trace.push(format!("t={} seq={} {:?}", self.now_ns, step.seq, step.kind));
        }
        match step.kind {
            StepKind::Timer(t) => {
                let timer = &mut self.timers[t];
                timer.fired = true;
                let (waiter, abandoned) = (timer.waiter, timer.abandoned);
                if abandoned {
                    self.timers.remove(t);
                } else {
                    self.wake(waiter);
                }
            }
            StepKind::Wake(task) => self.wake(Some(task)),
            StepKind::Issue(b) => self.issue(b),
            StepKind::IssueCall(r) => self.issue_call(r),
            StepKind::Local(l, u) => self.local_unit(l, u),
            StepKind::Arrive(v) => self.arrive(v),
            StepKind::Unit(v, u) => self.unit(v, u),
            StepKind::RmwRead(v) => self.rmw_read(v),
            StepKind::RmwWrite(v) => self.rmw_write(v),
            StepKind::Complete(b) => self.complete(b),
            StepKind::RpcArrive(r) => self.rpc_arrive(r),
            StepKind::RpcComplete(r) => self.rpc_complete(r),
            StepKind::Fault(f) => self.fault(self.faults[f as usize]),
        }
    }

    fn arrive(&mut self, v: u32) {
        let (qp, node, kind, len, region) = {
            let verb = &self.verbs[v];
            (verb.qp, verb.addr.node().0 as usize, verb.kind, verb.op.byte_len(), verb.addr.region())
        };
        let q = &mut self.qps[qp as usize];
        let head = q.in_transit.pop_front();
        debug_assert_eq!(head, Some(v), "verbs reach the responder in QP order");
        q.head_scheduled = false;
        self.schedule_qp_head(qp);
        if self.node_lost(v) {
            // Down, or restarted since the verb was posted: on hardware the queue pair broke
            // with the crash, so the verb completes in error instead of reaching the new
            // incarnation's memory.
            self.fail_verb_now(v);
            return;
        }
        if kind == Kind::Read && self.nodes[node].armed_read_failures > 0 {
            self.nodes[node].armed_read_failures -= 1;
            self.fault_counters.reads_failed += 1;
            self.verbs[v].timed_out = true;
            self.fail_verb_now(v);
            return;
        }
        let now_ps = self.now_ps();
        if self.instant {
            let verb = &mut self.verbs[v];
            verb.exec_ps = now_ps;
            verb.phase = Phase::Waiting;
            self.qps[qp as usize].at_responder.push_back(v);
            if self.may_start(v) {
                self.start(v);
            }
            return;
        }
        let c = &self.costs;
        let n = &mut self.nodes[node];
        if n.slowdown > 1.0 {
            self.fault_counters.verbs_slowed += 1;
        }
        let req_bytes = c.request_bytes(kind, len);
        let rx_service = (c.responder_rx_ps(req_bytes) as f64 * n.slowdown) as u64;
        let rx_done = self.nics[node].in_link.serve(now_ps, rx_service);
        n.stats.wire_bytes_in += req_bytes;
        let t = rx_done + (c.responder_latency_ps as f64 * n.slowdown) as u64;
        let device = region == Region::Device;
        let exec_ps = match (kind, device) {
            (Kind::Rmw, _) => {
                let key = self.verbs[v].addr.raw();
                let same_address = if device { c.device_same_address_ps } else { c.host_same_address_ps };
                let free = n.atomic_addr_free.get(&key).copied().unwrap_or(0);
                let start = t.max(free);
                n.atomic_addr_free.insert(key, start + same_address);
                if n.atomic_addr_free.len() > 4096 {
                    n.atomic_addr_free.retain(|_, f| *f > now_ps);
                }
                let served = n.atomic.serve(start, c.atomic_op_ps as u64);
                served + if device { c.device_access_latency_ps } else { c.pcie_read_latency_ps }
            }
            (_, true) => t + c.device_access_latency_ps,
            (Kind::Read, false) => n.pcie.serve(t, c.pcie_ps(len)) + c.pcie_read_latency_ps,
            (Kind::Write, false) => n.pcie.serve(t, c.pcie_ps(len)) + c.pcie_write_latency_ps,
        };
        let verb = &mut self.verbs[v];
        verb.exec_ps = exec_ps;
        verb.phase = Phase::Waiting;
        self.qps[qp as usize].at_responder.push_back(v);
        if self.may_start(v) {
            self.start(v);
        }
    }

    /// The ordering table of DESIGN.md §1: may `v` start, given the verbs that arrived before
    /// it on its QP and are not done?
    ///
    /// A fence also stalls the send queue behind it, as on hardware (the requester does not
    /// process later work requests until the fenced one may go): a verb never starts before
    /// an earlier fenced verb of its QP has started.
    fn may_start(&self, v: u32) -> bool {
        let verb = &self.verbs[v];
        let later_is_read = matches!(verb.op, Op::Read(_));
        for &u in &self.qps[verb.qp as usize].at_responder {
            if u == v {
                return true;
            }
            let earlier = &self.verbs[u];
            let blocks = match earlier.kind {
                // WRITE → anything: seen / placed after.
                Kind::Write => true,
                // RMW → anything: seen / placed after (a READ may overtake under the switch).
                Kind::Rmw => !(later_is_read && !verb.fence && self.mm().rmw_then_read_unordered),
                // READ → anything: unordered unless the later verb is fenced.
                Kind::Read => verb.fence,
            };
            if blocks || (earlier.fence && earlier.phase == Phase::Waiting) {
                return false;
            }
        }
        unreachable!("verb {v} is not in its QP's responder queue")
    }

    fn unit_count(&self, verb: &Verb) -> u32 {
        let u = self.mm().atomicity_bytes as u64;
        let first = verb.addr.offset() / u;
        let last = (verb.addr.offset() + verb.op.byte_len() - 1) / u;
        (last - first + 1) as u32
    }

    /// Byte range `(offset, len)` of unit `i` of a READ or WRITE.
    fn unit_range(&self, verb: &Verb, i: u32) -> (u64, u64) {
        let u = self.mm().atomicity_bytes as u64;
        let start = verb.addr.offset();
        let end = start + verb.op.byte_len();
        let lo = ((start / u + i as u64) * u).max(start);
        let hi = ((start / u + i as u64 + 1) * u).min(end);
        (lo, hi - lo)
    }

    fn tearing_delay(&mut self) -> u64 {
        match self.cfg.faults.tearing {
            Some(t) if !self.queue.is_chosen() && !self.instant => self.rng.random_range(0..=t.window_ns),
            _ => 0,
        }
    }

    fn start(&mut self, v: u32) {
        let t = ns_of(self.verbs[v].exec_ps).max(self.now_ns);
        let verb = &mut self.verbs[v];
        verb.phase = Phase::Running;
        if verb.kind == Kind::Rmw {
            verb.units_left = 1;
            if !self.split_rmw {
                self.schedule(t, StepKind::Unit(v, WHOLE));
                return;
            }
            let key = verb.addr.raw();
            match self.nodes[verb.addr.node().0 as usize].rmw_locks.get_mut(&key) {
                Some(waiters) => {
                    verb.phase = Phase::LockWait;
                    waiters.push_back(v);
                }
                None => {
                    self.nodes[verb.addr.node().0 as usize].rmw_locks.insert(key, VecDeque::new());
                    self.schedule(t, StepKind::RmwRead(v));
                }
            }
            return;
        }
        let units = self.unit_count(&self.verbs[v]);
        if !self.split_units || units == 1 {
            self.verbs[v].units_left = 1;
            self.schedule(t, StepKind::Unit(v, WHOLE));
            return;
        }
        if !self.queue.is_chosen() {
            self.fault_counters.torn_verbs += 1;
        }
        let ascending = match self.verbs[v].op {
            Op::Read(_) => self.mm().read_units_ascending,
            _ => !self.mm().write_units_arbitrary,
        };
        self.verbs[v].units_left = units;
        if ascending {
            self.verbs[v].next_unit = 1;
            let d = self.tearing_delay();
            self.schedule(t + d, StepKind::Unit(v, 0));
        } else {
            for i in 0..units {
                let d = self.tearing_delay();
                self.schedule(t + d, StepKind::Unit(v, i));
            }
        }
    }

    /// True if the verb's node crashed (or crashed and restarted) since the verb was posted.
    fn node_lost(&self, v: u32) -> bool {
        let verb = &self.verbs[v];
        let n = &self.nodes[verb.addr.node().0 as usize];
        !n.up || n.epoch != verb.node_epoch
    }

    fn unit(&mut self, v: u32, u: u32) {
        if self.node_lost(v) {
            self.verbs[v].failed = true;
        }
        if !self.verbs[v].failed {
            let verb = &self.verbs[v];
            let (offset, len) =
                if u == WHOLE { (verb.addr.offset(), verb.op.byte_len()) } else { self.unit_range(verb, u) };
            let at = (offset - verb.addr.offset()) as usize;
            let n = verb.addr.node().0 as usize;
            let region = verb.addr.region();
            let node = &mut self.nodes[n];
            let mem = match region {
                Region::Host => &mut node.host,
                Region::Device => &mut node.device,
            };
            let verb = &mut self.verbs[v];
            match &mut verb.op {
                Op::Read(buf) => mem.read(offset, &mut buf[at..at + len as usize]),
                Op::Write(buf) => mem.write(offset, &buf[at..at + len as usize]),
                op => {
                    let old = mem.read_u64(offset);
                    let new = op.rmw_new(old).expect("an RMW");
                    if new != old {
                        mem.write_u64(offset, new);
                    }
                    verb.rmw_old = old;
                }
            }
        }
        let verb = &mut self.verbs[v];
        verb.units_left -= 1;
        if verb.units_left == 0 {
            self.finish_at_responder(v);
        } else if verb.next_unit > 0 {
            // Ascending order: the next unit becomes enabled only now.
            let next = verb.next_unit;
            verb.next_unit += 1;
            let d = self.tearing_delay();
            self.schedule(self.now_ns + d, StepKind::Unit(v, next));
        }
    }

    fn rmw_read(&mut self, v: u32) {
        if self.node_lost(v) {
            self.verbs[v].failed = true;
            self.release_rmw_lock(v);
            self.verbs[v].units_left = 0;
            self.finish_at_responder(v);
            return;
        }
        let verb = &self.verbs[v];
        let old = self.mem(verb.addr).read_u64(verb.addr.offset());
        let new = verb.op.rmw_new(old).expect("an RMW");
        let verb = &mut self.verbs[v];
        verb.rmw_old = old;
        verb.rmw_new = new;
        if new == old {
            // Nothing to write: a failed CAS, or an add of zero.
            self.release_rmw_lock(v);
            self.verbs[v].units_left = 0;
            self.finish_at_responder(v);
        } else {
            let d = self.tearing_delay();
            self.schedule(self.now_ns + d, StepKind::RmwWrite(v));
        }
    }

    fn rmw_write(&mut self, v: u32) {
        if self.node_lost(v) {
            self.verbs[v].failed = true;
        } else {
            let (addr, new) = (self.verbs[v].addr, self.verbs[v].rmw_new);
            self.mem_mut(addr).write_u64(addr.offset(), new);
        }
        self.release_rmw_lock(v);
        self.verbs[v].units_left = 0;
        self.finish_at_responder(v);
    }

    fn release_rmw_lock(&mut self, v: u32) {
        let addr = self.verbs[v].addr;
        let node = &mut self.nodes[addr.node().0 as usize];
        let waiters = node.rmw_locks.get_mut(&addr.raw()).expect("a two-step RMW holds its address lock");
        match waiters.pop_front() {
            Some(next) => {
                let t = ns_of(self.verbs[next].exec_ps).max(self.now_ns);
                debug_assert_eq!(self.verbs[next].phase, Phase::LockWait);
                self.verbs[next].phase = Phase::Running;
                self.schedule(t, StepKind::RmwRead(next));
            }
            None => {
                node.rmw_locks.remove(&addr.raw());
            }
        }
    }

    /// The verb never reached memory: its node was down when it arrived.
    fn fail_verb_now(&mut self, v: u32) {
        let verb = &mut self.verbs[v];
        verb.failed = true;
        verb.phase = Phase::Running;
        self.finish_at_responder(v);
    }

    fn finish_at_responder(&mut self, v: u32) {
        let now_ps = self.now_ps();
        let verb = &mut self.verbs[v];
        verb.phase = Phase::Done;
        let qp = verb.qp;
        let node = verb.addr.node().0 as usize;
        if verb.failed {
            verb.resp_ps = now_ps + self.cfg.profile.transport_timeout_ns * PS_PER_NS;
            if !verb.timed_out {
                self.fault_counters.verbs_failed_node_down += 1;
            }
        } else if self.instant {
            verb.resp_ps = now_ps;
            let kind_index = VerbKind::of(&verb.op) as usize;
            let len = verb.op.byte_len();
            let stats = &mut self.nodes[node].stats;
            stats.verbs[kind_index].count += 1;
            stats.verbs[kind_index].payload_bytes += len;
        } else {
            let len = verb.op.byte_len();
            let kind_index = VerbKind::of(&verb.op) as usize;
            let resp_bytes = self.costs.response_bytes(verb.kind, len);
            let link = self.costs.link_ps(resp_bytes);
            let n = &mut self.nodes[node];
            let out = self.nics[node].out_link.serve(now_ps, link) + self.costs.wire_latency_ps;
            n.stats.wire_bytes_out += resp_bytes;
            n.stats.verbs[kind_index].count += 1;
            n.stats.verbs[kind_index].payload_bytes += len;
            let client = qp / self.nodes.len() as u32;
            let requester = self.clients[client as usize].node.0 as usize;
            verb.resp_ps = self.nics[requester].in_link.serve(out, link) + self.costs.completion_latency_ps;
        }
        // Later verbs of the QP that waited on this one may start now.
        let q = &mut self.qps[qp as usize];
        if let Some(pos) = q.at_responder.iter().position(|&x| x == v) {
            q.at_responder.remove(pos);
            let waiting: Vec<u32> =
                q.at_responder.iter().copied().filter(|&x| self.verbs[x].phase == Phase::Waiting).collect();
            for w in waiting {
                if self.verbs[w].phase == Phase::Waiting && self.may_start(w) {
                    self.start(w);
                }
            }
        }
        self.advance_completions(qp);
    }

    /// Completions are delivered in QP order: pop done verbs off the front.
    fn advance_completions(&mut self, qp: u32) {
        while let Some(&front) = self.qps[qp as usize].outstanding.front() {
            if self.verbs[front].phase != Phase::Done {
                break;
            }
            self.qps[qp as usize].outstanding.pop_front();
            let (batch, resp_ps) = (self.verbs[front].batch, self.verbs[front].resp_ps);
            let b = &mut self.batches[batch];
            b.pending -= 1;
            b.resp_ps_max = b.resp_ps_max.max(resp_ps);
            if b.pending > 0 {
                continue;
            }
            let resp_max = b.resp_ps_max;
            let q = &mut self.qps[qp as usize];
            if b.signaled {
                let t = resp_max.max(q.last_completion_ps).max(self.now_ns * PS_PER_NS);
                q.last_completion_ps = t;
                let poll = if self.instant { 0 } else { self.costs.poll_ps };
                self.schedule(ns_of(t + poll), StepKind::Complete(batch));
            } else {
                q.last_completion_ps = q.last_completion_ps.max(resp_max);
                let b = self.batches.remove(batch);
                let mut next = b.first_verb;
                while next != NO_VERB {
                    next = self.verbs.remove(next).next_in_batch;
                }
            }
        }
    }

    fn complete(&mut self, batch: u32) {
        let mut next = self.batches[batch].first_verb;
        let mut completed = Vec::with_capacity(self.batches[batch].len as usize);
        let mut error = None;
        while next != NO_VERB {
            let verb = self.verbs.remove(next);
            next = verb.next_in_batch;
            let response = if verb.timed_out {
                Err(VerbsError::Timeout(verb.addr.node()))
            } else if verb.failed {
                Err(VerbsError::NodeDown(verb.addr.node()))
            } else {
                Ok(match verb.op {
                    Op::Read(buf) => Response::Read(buf),
                    Op::Write(buf) => Response::Write(buf),
                    _ => Response::Atomic(verb.rmw_old),
                })
            };
            // Verbs after the first failure are not reported (on hardware they are flushed).
            match response {
                Ok(r) if error.is_none() => completed.push(r),
                Err(e) if error.is_none() => error = Some(e),
                _ => {}
            }
        }
        let b = &mut self.batches[batch];
        match b.outcome {
            Outcome::Abandoned => {
                self.batches.remove(batch);
            }
            _ => {
                b.outcome = Outcome::Ready(Ok((completed, error)));
                let (client, waiter) = (b.client, b.waiter);
                self.clients[client as usize].stats.round_trips += 1;
                self.wake_after_poll(client, waiter);
            }
        }
    }

    // ---------------------------------------------------------------- RPC

    pub(crate) fn call(
        &mut self,
        client: u32,
        node: NodeId,
        service: u16,
        request: Vec<u8>,
    ) -> Result<u32, VerbsError> {
        if !self.is_target(node) {
            return Err(VerbsError::NoSuchNode(node));
        }
        let busy = self.thread_busy(client);
        let posted_ps = self.charge_thread(client, self.costs.post_cost_ps(1));
        let counted = &mut self.clients[client as usize].stats.verbs[VerbKind::Call as usize];
        counted.count += 1;
        counted.payload_bytes += request.len() as u64;
        let r = self.rpcs.insert(Rpc {
            client,
            node,
            service,
            request,
            // As for verbs: a call posted to one incarnation is never served by the next.
            node_epoch: self.nodes.get(node.0 as usize).map_or(0, |n| n.epoch),
            handler: None,
            posted_ps,
            waiter: None,
            result: None,
            outcome: Outcome::Pending,
            tag: self.calls_posted,
            replied: false,
        });
        self.calls_posted += 1;
        if busy {
            self.schedule(ns_of(posted_ps), StepKind::IssueCall(r));
        } else {
            self.issue_call(r);
        }
        Ok(r)
    }

    /// The SEND of a call leaves the caller's NIC.
    fn issue_call(&mut self, r: u32) {
        let rpc = &self.rpcs[r];
        let posted_ps = rpc.posted_ps;
        let arrive = if self.instant {
            posted_ps
        } else {
            let nic = self.clients[rpc.client as usize].node.0 as usize;
            let bytes = self.costs.send_bytes(rpc.request.len() as u64);
            let tx_start = posted_ps + self.costs.requester_latency_ps;
            self.nics[nic].out_link.serve(tx_start, self.costs.requester_tx_ps(bytes)) + self.costs.wire_latency_ps
        };
        self.schedule(ns_of(arrive).max(self.now_ns), StepKind::RpcArrive(r));
    }

    /// The caller learns of a failed RPC when its transport gives up.
    fn rpc_fail(&mut self, r: u32, error: VerbsError) {
        if matches!(error, VerbsError::NodeDown(_)) {
            self.fault_counters.calls_failed_node_down += 1;
        }
        self.rpcs[r].result = Some(Err(error));
        let at = self.now_ns + self.cfg.profile.transport_timeout_ns;
        self.schedule(at, StepKind::RpcComplete(r));
    }

    fn rpc_arrive(&mut self, r: u32) {
        let node = self.rpcs[r].node;
        let n = node.0 as usize;
        if !self.nodes[n].up || self.nodes[n].epoch != self.rpcs[r].node_epoch {
            self.rpc_fail(r, VerbsError::NodeDown(node));
            return;
        }
        let bytes = self.costs.send_bytes(self.rpcs[r].request.len() as u64);
        let now_ps = self.now_ps();
        let slowdown = self.nodes[n].slowdown;
        let rx = (self.costs.responder_rx_ps(bytes) as f64 * slowdown) as u64;
        // Instant (bulk-load) calls use no NIC capacity, as instant verbs do: a load would
        // otherwise leave the link busy far past the end of the load.
        if !self.instant {
            self.nics[n].in_link.serve(now_ps, rx);
        }
        self.nodes[n].stats.wire_bytes_in += bytes;
        let service = self.rpcs[r].service;
        if !self.nodes[n].services.contains(&service) {
            // Answered by the receiving thread without running a handler.
            self.rpc_respond(r, Err(VerbsError::UnknownService { node, service }));
            return;
        }
        self.nodes[n].rpc_queue.push_back(r);
        self.dispatch_rpcs(n);
    }

    /// Hands queued RPCs to idle RPC threads of node `n`.
    fn dispatch_rpcs(&mut self, n: usize) {
        while !self.nodes[n].rpc_queue.is_empty() && !self.nodes[n].idle_rpc_threads.is_empty() {
            let r = self.nodes[n].rpc_queue.pop_front().expect("non-empty");
            let handler = self.nodes[n].idle_rpc_threads.pop_front().expect("non-empty");
            self.nodes[n].rpc_running.push(r);
            let dispatch = (self.costs.rpc_dispatch_ps as f64 * self.nodes[n].slowdown) as u64;
            self.charge_thread(handler, dispatch);
            let rpc = &mut self.rpcs[r];
            rpc.handler = Some(handler);
            self.dispatches.push(Dispatch {
                rpc: r,
                node: rpc.node,
                service: rpc.service,
                handler,
                request: std::mem::take(&mut rpc.request),
                tag: rpc.tag,
                node_epoch: rpc.node_epoch,
            });
        }
    }

    /// A handler finished: its thread sends `reply` (or, with `None`, leaves the RPC waiting for
    /// [`Core::rpc_reply_deferred`] or the node's crash) and takes the next queued RPC. A reply
    /// sent while the handler still ran (from another thread) already answered it.
    pub(crate) fn rpc_handled(&mut self, d: &Dispatch, reply: Option<Vec<u8>>) {
        let n = d.node.0 as usize;
        if self.nodes[n].epoch != d.node_epoch || !self.nodes[n].up {
            // The node crashed under the handler; the crash already failed the RPC.
            return;
        }
        let open = self.rpcs.get(d.rpc).is_some_and(|rpc| rpc.tag == d.tag && !rpc.replied);
        self.nodes[n].idle_rpc_threads.push_back(d.handler);
        if open {
            self.nodes[n].rpc_running.retain(|&x| x != d.rpc);
            match reply {
                Some(bytes) => {
                    let posted = self.charge_thread(d.handler, self.costs.post_cost_ps(1));
                    self.send_reply(d.rpc, Ok(bytes), posted);
                }
                None => self.nodes[n].rpc_deferred.push(d.rpc),
            }
        }
        self.dispatch_rpcs(n);
    }

    /// Sends the deferred reply of RPC `r` (tagged `tag`) from `client`'s thread, which must run
    /// on the RPC's node: after its handler deferred it, or while the handler still runs (as on
    /// hardware, where another thread may answer a call the moment it holds its responder).
    pub(crate) fn rpc_reply_deferred(
        &mut self,
        client: u32,
        r: u32,
        tag: u64,
        reply: Vec<u8>,
    ) -> Result<(), VerbsError> {
        let node = self.clients[client as usize].node;
        let n = node.0 as usize;
        let owed = self.is_target(node)
            && self.nodes[n].up
            && (self.nodes[n].rpc_deferred.contains(&r) || self.nodes[n].rpc_running.contains(&r))
            && self.rpcs.get(r).is_some_and(|rpc| rpc.tag == tag && rpc.node == node && !rpc.replied);
        if !owed {
            return Err(VerbsError::Protocol(format!(
                "{node} owes no reply to call {r} (tag {tag}): answered already, failed by a crash, or another node's"
            )));
        }
        self.nodes[n].rpc_deferred.retain(|&x| x != r);
        self.nodes[n].rpc_running.retain(|&x| x != r);
        self.rpcs[r].replied = true;
        let posted = self.charge_thread(client, self.costs.post_cost_ps(1));
        self.send_reply(r, Ok(reply), posted);
        Ok(())
    }

    /// Replies from the NIC at once (no handler ran).
    fn rpc_respond(&mut self, r: u32, result: Result<Vec<u8>, VerbsError>) {
        let now_ps = self.now_ps();
        self.send_reply(r, result, now_ps);
    }

    fn send_reply(&mut self, r: u32, result: Result<Vec<u8>, VerbsError>, at_ps: u64) {
        let rpc = &self.rpcs[r];
        let node = rpc.node.0 as usize;
        let len = result.as_ref().map_or(0, |b| b.len() as u64);
        let bytes = self.costs.send_bytes(len);
        let link = self.costs.link_ps(bytes);
        let stats = &mut self.nodes[node].stats;
        stats.verbs[VerbKind::Call as usize].count += 1;
        stats.verbs[VerbKind::Call as usize].payload_bytes += len;
        stats.wire_bytes_out += bytes;
        let caller = self.clients[rpc.client as usize].node.0 as usize;
        let done = if self.instant {
            at_ps
        } else {
            let out = self.nics[node].out_link.serve(at_ps + self.costs.requester_latency_ps, link)
                + self.costs.wire_latency_ps;
            self.nics[caller].in_link.serve(out, link) + self.costs.completion_latency_ps + self.costs.poll_ps
        };
        self.rpcs[r].result = Some(result);
        self.schedule(ns_of(done).max(self.now_ns), StepKind::RpcComplete(r));
    }

    fn rpc_complete(&mut self, r: u32) {
        let rpc = &mut self.rpcs[r];
        let result = rpc.result.take().expect("an RPC completes with a result");
        match rpc.outcome {
            Outcome::Abandoned => {
                self.rpcs.remove(r);
            }
            _ => {
                rpc.outcome = Outcome::Ready(result);
                let (client, waiter) = (rpc.client, rpc.waiter);
                self.clients[client as usize].stats.round_trips += 1;
                self.wake_after_poll(client, waiter);
            }
        }
    }

    // ---------------------------------------------------------------- local memory (service CPUs)

    /// A service CPU's access to its own node's memory: 8-byte atomic accesses in ascending
    /// order (one step each in chooser and tearing runs), after the copy's CPU time.
    pub(crate) fn local(&mut self, client: u32, offset: u64, op: Op) -> Result<u32, VerbsError> {
        let node = self.clients[client as usize].node;
        if !self.is_target(node) {
            return Err(VerbsError::NoSuchNode(node));
        }
        if offset >= RemoteAddr::OFFSET_LIMIT {
            return Err(VerbsError::OutOfRange { addr: RemoteAddr::host(node, 0), len: offset });
        }
        let addr = RemoteAddr::host(node, offset);
        let len = op.byte_len();
        if (op.is_rmw() && offset % 8 != 0) || len == 0 {
            return Err(if len == 0 {
                VerbsError::InvalidLength { addr, len }
            } else {
                VerbsError::Unaligned { addr }
            });
        }
        self.check_range(addr, len)?;
        let cost = (self.cfg.profile.cpu.cost_ns(CpuWork::CopyByte, len) * PS_PER_NS as f64) as u64;
        let start = self.charge_thread(client, cost);
        let words = ((offset + len).div_ceil(8) - offset / 8) as u32;
        let split = self.split_units && words > 1;
        let id = self.locals.insert(LocalOp {
            addr,
            op,
            node_epoch: self.nodes[node.0 as usize].epoch,
            units_left: if split { words } else { 1 },
            next_unit: 0,
            failed: false,
            old: 0,
            waiter: None,
            outcome: Outcome::Pending,
        });
        let at = ns_of(start).max(self.now_ns);
        self.schedule(at, StepKind::Local(id, if split { 0 } else { WHOLE }));
        Ok(id)
    }

    fn local_unit(&mut self, l: u32, unit: u32) {
        let (addr, node_epoch) = (self.locals[l].addr, self.locals[l].node_epoch);
        let n = &self.nodes[addr.node().0 as usize];
        if !n.up || n.epoch != node_epoch {
            self.locals[l].failed = true;
        }
        if !self.locals[l].failed {
            let len = self.locals[l].op.byte_len();
            let (lo, hi) = if unit == WHOLE {
                (addr.offset(), addr.offset() + len)
            } else {
                let word = addr.offset() / 8 + unit as u64;
                ((word * 8).max(addr.offset()), ((word + 1) * 8).min(addr.offset() + len))
            };
            let at = (lo - addr.offset()) as usize;
            let node = &mut self.nodes[addr.node().0 as usize];
            let op = &mut self.locals[l];
            match &mut op.op {
                Op::Read(buf) => node.host.read(lo, &mut buf[at..at + (hi - lo) as usize]),
                Op::Write(buf) => node.host.write(lo, &buf[at..at + (hi - lo) as usize]),
                rmw => {
                    let old = node.host.read_u64(lo);
                    let new = rmw.rmw_new(old).expect("an RMW");
                    if new != old {
                        node.host.write_u64(lo, new);
                    }
                    op.old = old;
                }
            }
        }
        let op = &mut self.locals[l];
        op.units_left -= 1;
        if op.units_left > 0 {
            op.next_unit += 1;
            let d = self.tearing_delay();
            self.schedule(self.now_ns + d, StepKind::Local(l, self.locals[l].next_unit));
            return;
        }
        let op = &mut self.locals[l];
        let result = if op.failed {
            Err(VerbsError::NodeDown(addr.node()))
        } else {
            Ok(match std::mem::replace(&mut op.op, Op::Faa { add: 0 }) {
                Op::Read(buf) => Response::Read(buf),
                Op::Write(buf) => Response::Write(buf),
                _ => Response::Atomic(op.old),
            })
        };
        match op.outcome {
            Outcome::Abandoned => {
                self.locals.remove(l);
            }
            _ => {
                op.outcome = Outcome::Ready(result);
                let waiter = op.waiter;
                self.wake(waiter);
            }
        }
    }

    // ---------------------------------------------------------------- faults

    fn fault(&mut self, event: FaultEvent) {
        match event {
            FaultEvent::CrashClient(c) => {
                if let Some(task) = self.clients.get_mut(c as usize).and_then(|ci| ci.task.take()) {
                    self.fault_counters.client_crashes += 1;
                    self.crashed_tasks.push(task);
                }
            }
            FaultEvent::CrashNode(n, restart_after_ns) => {
                self.crash_node(NodeId(n));
                // The restart is scheduled by the crash, so that in chooser runs (where a fault
                // step may run before its time) a node restarts only after it crashed.
                if let Some(after) = restart_after_ns {
                    self.schedule_fault(self.now_ns + after, FaultEvent::RestartNode(n));
                }
            }
            FaultEvent::RestartNode(n) => {
                let node = &mut self.nodes[n as usize];
                if !node.up {
                    node.up = true;
                    node.epoch += 1;
                    node.idle_rpc_threads = node.rpc_threads.iter().copied().collect();
                    self.fault_counters.node_restarts += 1;
                    self.restarted.push(NodeId(n));
                }
            }
            FaultEvent::SlowStart(n, factor) => self.nodes[n as usize].slowdown = factor,
            FaultEvent::SlowEnd(n) => self.nodes[n as usize].slowdown = 1.0,
            FaultEvent::ArmReadFailure(n) => self.nodes[n as usize].armed_read_failures += 1,
        }
    }

    /// Crash-stop: memory and services' state are lost, every task on the node's threads is
    /// dropped, and the RPCs it held fail at their callers.
    fn crash_node(&mut self, node: NodeId) {
        let n = node.0 as usize;
        if !self.nodes[n].up {
            return;
        }
        let target = &mut self.nodes[n];
        target.up = false;
        target.epoch += 1;
        target.host.clear();
        target.device.clear();
        target.idle_rpc_threads.clear();
        let lost: Vec<u32> = target
            .rpc_queue
            .drain(..)
            .chain(target.rpc_running.drain(..))
            .chain(target.rpc_deferred.drain(..))
            .collect();
        self.fault_counters.node_crashes += 1;
        for r in lost {
            self.rpc_fail(r, VerbsError::NodeDown(node));
        }
        for c in 0..self.clients.len() {
            if self.clients[c].node == node {
                if let Some(task) = self.clients[c].task.take() {
                    self.crashed_tasks.push(task);
                }
            }
        }
        // The killed tasks' booked CPU work dies with them.
        let now_ps = self.now_ps();
        for t in self.threads.iter_mut().filter(|t| t.node == node) {
            t.cpu_free_ps = t.cpu_free_ps.min(now_ps);
        }
    }

    // ---------------------------------------------------------------- images

    /// Copies of every target node's host and device memory; every node must be up.
    pub(crate) fn node_memories(&self) -> Result<NodeMemories, String> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if n.up {
                    Ok((Arc::new(n.host.flatten()), Arc::new(n.device.flatten())))
                } else {
                    Err(format!("node {i} is down"))
                }
            })
            .collect()
    }

    /// Moves every target node's memories out (leaving them empty): an image of a simulation
    /// that ends.
    pub(crate) fn take_node_memories(&mut self) -> Result<NodeMemories, String> {
        if let Some(i) = self.nodes.iter().position(|n| !n.up) {
            return Err(format!("node {i} is down"));
        }
        let take = |m: &mut SparseMemory| Arc::new(std::mem::take(m).into_flat());
        Ok(self.nodes.iter_mut().map(|n| (take(&mut n.host), take(&mut n.device))).collect())
    }

    /// Replaces every target node's memories with copy-on-write forks of an image's (the
    /// caller checked the node count): the simulation holds only the pages it writes.
    pub(crate) fn set_node_memories(&mut self, memories: &[(Arc<SparseMemory>, Arc<SparseMemory>)]) {
        assert_eq!(memories.len(), self.nodes.len(), "one pair of memories per target node");
        for (n, (host, device)) in self.nodes.iter_mut().zip(memories) {
            n.host = SparseMemory::fork(host);
            n.device = SparseMemory::fork(device);
        }
    }

    // ---------------------------------------------------------------- reporting

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            now_ns: self.now_ns,
            steps: self.steps,
            verbs_posted: self.verbs_posted,
            batches_posted: self.batches_posted,
            calls_posted: self.calls_posted,
            nodes: self
                .nodes
                .iter()
                .zip(&self.nics)
                .map(|(n, nic)| NodeStats {
                    nic_busy_ns: nic.in_link.busy_ps() / PS_PER_NS,
                    link_out_busy_ns: nic.out_link.busy_ps() / PS_PER_NS,
                    host_bytes: n.host.host_bytes() + n.device.host_bytes(),
                    nonzero_bytes: n.host.nonzero_line_bytes() + n.device.nonzero_line_bytes(),
                    ..n.stats.clone()
                })
                .collect(),
            faults: self.fault_counters,
            unallocated: self.allocations.outside().clone(),
            trace_hash: self.trace_hash,
        }
    }

    /// Anything still in flight (verbs, calls) keeps the run going after tasks finish.
    pub(crate) fn in_flight(&self) -> usize {
        self.verbs.live() + self.rpcs.live() + self.locals.live()
    }
}

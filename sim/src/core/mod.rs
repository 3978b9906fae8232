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
//!
//! One file a stage: `requester.rs` (queue pairs, posting, issue and completion), `responder.rs`
//! (the responder NIC, ordering, memory units and direct access), `atomic.rs` (two-step RMWs on
//! the atomic unit), `rpc.rs` (calls and service threads), `local.rs` (a service CPU's own memory),
//! `faults.rs` (crashes, restarts, READ failures, slowdowns) and `awaited.rs` (the slabs and the
//! results tasks wait for). This file holds the state, the step loop and what the executor calls.

use crate::allocations::Allocations;
use crate::config::{MemoryModel, SimConfig};
use crate::memory::{FixedMap, NodeMemories, SparseMemory};
use crate::nic::{ContextCache, PS_PER_NS, Server, StageCosts};
use crate::sched::{Actor, Step, StepClass, StepInfo, StepKind, StepQueue, WHOLE};
use crate::stats::{ClientStats, FaultCounters, NodeStats, Stats};
use dmkit_rdma::{CpuWork, NodeId, Op, VerbsError};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

mod atomic;
mod awaited;
mod faults;
mod local;
mod requester;
mod responder;
mod rpc;
mod tasks;

pub(crate) use awaited::{Awaited, AwaitedSlab, Slab};
use awaited::{BatchDone, Outcome};
use faults::FaultEvent;
pub(crate) use local::LocalOp;
pub(crate) use requester::Batch;
use requester::{Phase, Qp, Verb};
use responder::TargetNode;
pub(crate) use rpc::{Dispatch, Rpc};
pub(crate) use tasks::Tasks;
use tasks::Timer;

/// A task: its number, given once and never reused (what traces, the explorer's actors and a
/// stale wake-up see), and the slot its state is kept in, reused once the task has finished.
/// A load spawns a task per RPC — tens of millions at 10 M keys — and a slot per task ever
/// spawned held 17 host bytes each for good; slots now come back, and a wake-up whose number
/// is not its slot's current task's is stale and dropped (as a wake-up of a finished task was).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TaskId {
    pub(crate) number: u32,
    pub(crate) slot: u32,
}

impl std::fmt::Debug for TaskId {
    /// The number only: traces print what they printed when the number was the whole id.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number)
    }
}

/// Every node's NIC: one link in each direction. Requests a node sends and responses it returns
/// share its outbound link; the inbound server also enforces the responder's IOPS bound. Its
/// caches of queue-pair contexts and of the translations of registered pages are modelled when
/// the profile gives them entries.
#[derive(Debug, Default)]
struct Nic {
    out_link: Server,
    in_link: Server,
    contexts: ContextCache,
    translations: ContextCache,
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
    /// When the last completion this client's `round_trips` counted was delivered: a wait
    /// posted before it overlapped that round trip and is not another (`count_round_trip`).
    pub(crate) round_trip_end_ps: u64,
}

pub(crate) struct Core {
    pub(crate) cfg: SimConfig,
    pub(crate) costs: StageCosts,
    pub(crate) now_ns: u64,
    seq: u64,
    queue: StepQueue,
    verbs: Slab<Verb>,
    batches: Slab<Batch>,
    rpcs: Slab<Rpc>,
    locals: Slab<LocalOp>,
    timers: Slab<Timer>,
    qps: Vec<Qp>,
    nodes: Vec<TargetNode>,
    nics: Vec<Nic>,
    pub(crate) threads: Vec<Thread>,
    pub(crate) clients: Vec<ClientInfo>,
    /// RPCs for the executor to start handlers for.
    dispatches: Vec<Dispatch>,
    /// Nodes that restarted: the executor creates their services afresh.
    restarted: Vec<NodeId>,
    faults: Vec<FaultEvent>,
    /// The tasks the executor polls: ready, current, their clients, crashed.
    pub(crate) tasks: Tasks,
    rng: ChaCha8Rng,
    split_units: bool,
    split_rmw: bool,
    qp_actors: bool,
    pub(crate) steps: u64,
    /// Events stamped for histories so far (see `SimClient::history_stamp`).
    stamps: u64,
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
            nics: (0..all_nodes as u64)
                .map(|i| Nic {
                    contexts: ContextCache::new(cfg.profile.qp_context_cache_entries, mix(cfg.seed, 2 * i)),
                    translations: ContextCache::new(cfg.profile.translation_cache_entries, mix(cfg.seed, 2 * i + 1)),
                    ..Nic::default()
                })
                .collect(),
            threads: Vec::new(),
            clients: Vec::new(),
            dispatches: Vec::new(),
            restarted: Vec::new(),
            faults: Vec::new(),
            tasks: Tasks::default(),
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

    /// Bulk-load mode with no chooser: work that would be a step at this very instant is done
    /// at once instead (`post_instant` for verbs; local accesses, calls' deliveries and
    /// replies, wake-ups), and the task that waits for it finds it done without suspending.
    /// Everything costs no time there, so what can change is only the order of this instant's
    /// steps among themselves: a load whose result depended on that order would load
    /// differently. None does: every index's loaded image is the same with and without these
    /// paths (README, Benchmarks), and `tests/images.rs` runs them against the stepped path.
    pub(crate) fn instant_fast_path(&self) -> bool {
        self.instant && !self.queue.is_chosen()
    }

    /// Counts the step an instant fast path stands for, as the stepped path would, so that step
    /// counts and the trace hash still advance.
    pub(crate) fn count_instant_step(&mut self, tag: u64) {
        self.steps += 1;
        self.trace_hash = mix(mix(self.trace_hash, self.now_ns), tag);
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
            round_trip_end_ps: 0,
        });
        let nodes = self.nodes.len();
        self.qps.extend((0..nodes).map(|_| Qp::default()));
        (self.clients.len() - 1) as u32
    }

    /// Counts a completion the client waited for (a signalled batch or a call posted at
    /// `posted_ps`) as a round trip, unless it was posted before the last one counted was
    /// delivered: waits in flight together (two READs to two memory nodes, posted one after
    /// the other and awaited together; a WRITE posted before the READs of a tail) are one round
    /// trip on the critical path, not two. In instant mode (a load: time stands still) every
    /// completion counts.
    pub(super) fn count_round_trip(&mut self, client: u32, posted_ps: u64) {
        let now = self.now_ps();
        let instant = self.instant;
        let c = &mut self.clients[client as usize];
        if instant || posted_ps >= c.round_trip_end_ps {
            c.stats.round_trips += 1;
            c.round_trip_end_ps = now;
        }
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
        if self.instant {
            // Free in bulk-load mode (`charge_thread`): not even priced.
            return None;
        }
        let cost_ps = (self.cfg.profile.cpu.cost_ns(work, units) * PS_PER_NS as f64) as u64;
        let end = self.charge_thread(client, cost_ps);
        let at = ns_of(end);
        if at <= self.now_ns {
            return None;
        }
        Some(self.add_timer(at, false))
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

    /// The queue pair on hardware behind the simulator's `qp`: a thread's coroutines share one
    /// queue pair to each target node (as the seeds' artifacts do), so the NICs' context caches
    /// hold one entry per thread and node, not per coroutine.
    pub(super) fn hardware_qp(&self, qp: u32) -> u64 {
        let nodes = self.nodes.len() as u64;
        let (client, node) = (u64::from(qp) / nodes, u64::from(qp) % nodes);
        u64::from(self.clients[client as usize].thread) * nodes + node
    }

    pub(crate) fn qp_index(&self, client: u32, node: NodeId) -> u32 {
        client * self.nodes.len() as u32 + node.0 as u32
    }

    pub(crate) fn wake(&mut self, task: Option<TaskId>) {
        if let Some(t) = task {
            self.tasks.wake(t);
        }
    }

    fn now_ps(&self) -> u64 {
        self.now_ns * PS_PER_NS
    }

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
            StepKind::RpcArrive(r) | StepKind::RpcDeliver(r) | StepKind::RpcComplete(r) => {
                (Actor::Client(self.rpcs[r].client), None, 0, false)
            }
            StepKind::Timer(t) => (self.task_actor(self.timer_waiter(t)), None, 0, false),
            StepKind::Wake(task) => (self.task_actor(Some(task)), None, 0, false),
            StepKind::Local(l, u) => {
                let op = &self.locals[l];
                let (addr, len) = if u == WHOLE { (op.addr, op.op.byte_len()) } else { (op.addr.add(u as u64 * 8), 8) };
                (Actor::Node(op.addr.node()), Some(addr), len as u32, !matches!(op.op, Op::Read(_)))
            }
            StepKind::Fault(_) => (Actor::Fault, None, 0, true),
        };
        let class = match s.kind {
            StepKind::Timer(t) if self.timer_yields(t) => StepClass::Yield,
            k => k.class(),
        };
        StepInfo { time_ns: s.time_ns, seq: s.seq, class, actor, addr, len, writes }
    }

    /// A task's steps belong to its client, if it has one.
    fn task_actor(&self, task: Option<TaskId>) -> Actor {
        match task {
            Some(t) => match self.tasks.client_of(t) {
                Some(c) => Actor::Client(c),
                None => Actor::Task(t.number),
            },
            None => Actor::Task(u32::MAX),
        }
    }

    fn run_step(&mut self, step: Step) {
        self.now_ns = self.now_ns.max(step.time_ns);
        self.steps += 1;
        let id = match step.kind {
            StepKind::Wake(t) => t.number as u64,
            StepKind::Timer(x)
            | StepKind::Issue(x)
            | StepKind::IssueCall(x)
            | StepKind::Arrive(x)
            | StepKind::RmwRead(x)
            | StepKind::RmwWrite(x)
            | StepKind::Complete(x)
            | StepKind::RpcArrive(x)
            | StepKind::RpcDeliver(x)
            | StepKind::RpcComplete(x)
            | StepKind::Fault(x) => x as u64,
            StepKind::Unit(v, u) | StepKind::Local(v, u) => (v as u64) << 32 | u as u64,
        };
        self.trace_hash = mix(mix(mix(self.trace_hash, self.now_ns), step.kind.tag()), id);
        if let Some(trace) = &mut self.trace {
            trace.push(format!("t={} seq={} {:?}", self.now_ns, step.seq, step.kind));
        }
        match step.kind {
            StepKind::Timer(t) => self.fire_timer(t),
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
            StepKind::RpcDeliver(r) => self.rpc_deliver(r),
            StepKind::RpcComplete(r) => self.rpc_complete(r),
            StepKind::Fault(f) => self.fault(self.faults[f as usize]),
        }
    }

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
                    nic_context_misses: nic.contexts.misses,
                    nic_translation_misses: nic.translations.misses,
                    host_bytes: n.host.host_bytes() + n.device.host_bytes(),
                    nonzero_bytes: n.host.nonzero_line_bytes() + n.device.nonzero_line_bytes(),
                    ..n.stats.clone()
                })
                .collect(),
            compute_nic_context_misses: self.nics[self.nodes.len()..].iter().map(|n| n.contexts.misses).sum(),
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

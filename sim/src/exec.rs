//! The executor: client tasks as futures on one OS thread, in virtual time.
//!
//! Tasks wait only on simulator steps (verb completions, timers, RPCs). The loop polls every
//! ready task, then lets the step queue (earliest-first, or a [`Chooser`]) pick the next step,
//! which may wake tasks. Polling order is the order of wake-ups, so a run is a pure function of
//! its seed, its configuration and its chooser.

use crate::config::{ConfigError, SimConfig};
use crate::core::{Awaited, AwaitedSlab, Batch, Core, Dispatch, LocalOp, Rpc, TaskId};
use crate::sched::{Chooser, StepKind, StepQueue};
use crate::stats::Stats;
use dmkit_rdma::alloc::{ALLOCATOR_SERVICE, AllocRequest, AllocResponse, ChunkAllocator};
use dmkit_rdma::service::{LocalMemory, Replier, Responder, Service, ServiceHost};
use dmkit_rdma::{
    Buf, Caps, ClientCtx, ClientIdentity, CpuWork, NodeId, Op, RemoteAddr, Request, Response, Verbs, VerbsError,
};
use rand_chacha::ChaCha8Rng;
use std::cell::{RefCell, RefMut};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Why a run stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// Tasks are waiting but nothing is pending that could wake them.
    Deadlock { blocked_tasks: usize, now_ns: u64 },
    /// The configured step limit was reached.
    StepLimit { steps: u64, now_ns: u64 },
    /// A task was polled `polls` times in a row without virtual time advancing: a spin loop
    /// that neither sleeps nor yields (see `SimConfig::spin_poll_limit`).
    Spin { client: Option<u32>, polls: u64, now_ns: u64 },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Deadlock { blocked_tasks, now_ns } => {
                write!(f, "deadlock at t={now_ns} ns: {blocked_tasks} tasks wait and no step is pending")
            }
            SimError::StepLimit { steps, now_ns } => write!(f, "step limit of {steps} reached at t={now_ns} ns"),
            SimError::Spin { client, polls, now_ns } => match client {
                Some(c) => write!(f, "client {c} spins: polled {polls} times at t={now_ns} ns without time advancing"),
                None => write!(f, "a task spins: polled {polls} times at t={now_ns} ns without time advancing"),
            },
        }
    }
}

impl std::error::Error for SimError {}

struct Task {
    future: Pin<Box<dyn Future<Output = ()>>>,
    waker: Waker,
    /// Consecutive polls at one virtual time, for the spin detector.
    last_poll_ns: u64,
    polls_at_same_time: u64,
    daemon: bool,
}

/// Makes the task that serves a dispatched call: the service's handler, then the core told
/// what it replied (one boxed future a call).
type HandlerFn = Rc<dyn Fn(SimClient, Dispatch, Rc<RefCell<Core>>) -> Pin<Box<dyn Future<Output = ()>>>>;
type WorkerFn = Rc<dyn Fn(SimClient, u32) -> Pin<Box<dyn Future<Output = ()>>>>;

/// A service with its type erased, as the executor runs it.
struct ServiceInstance {
    dispatch: HandlerFn,
    workers: u32,
    run_worker: WorkerFn,
    /// The service's state (an `Arc<S>`), for [`dmkit_rdma::MemoryView::service_state`].
    state: Arc<dyn std::any::Any + Send + Sync>,
}

/// A copy of a service's state (an `S`, type-erased), as an [`Image`] keeps it.
type ForkedState = Arc<dyn std::any::Any + Send + Sync>;
/// Copies a running instance's state (`None` if its service cannot).
type SnapshotFn = Box<dyn Fn(&ServiceInstance) -> Option<ForkedState>>;
/// Whether a running instance's state could be copied now (`Service::forks`).
type ForksFn = Box<dyn Fn(&ServiceInstance) -> bool>;
/// A running instance from a copied state.
type ResumeFn = Box<dyn Fn(&ForkedState) -> Option<ServiceInstance>>;

struct ServiceEntry {
    factory: Box<dyn Fn() -> ServiceInstance>,
    /// A copy of the running instance's state, if its service can be copied (`Service::fork`).
    snapshot: SnapshotFn,
    forks: ForksFn,
    /// A running instance from a copy, copied again so that the image it came from stays
    /// intact for the next run.
    resume: ResumeFn,
    /// The state the first start resumes from (a restored image) instead of the factory's; a
    /// restart after a crash starts from the factory, as a crash loses the state.
    initial: Option<ForkedState>,
    current: Option<ServiceInstance>,
}

fn erase<S: Service<SimClient>>(service: S) -> ServiceInstance {
    let service = Arc::new(service);
    let workers = service.workers();
    let (h, w, state) = (service.clone(), service.clone(), service);
    ServiceInstance {
        dispatch: Rc::new(move |ctx, mut d: Dispatch, core: Rc<RefCell<Core>>| {
            let responder = Responder { node: d.node, call: d.rpc as u64, tag: d.tag };
            let reply = h.clone().dispatch(ctx, std::mem::take(&mut d.request), responder);
            Box::pin(async move {
                let reply = reply.await;
                core.borrow_mut().rpc_handled(&d, reply);
            })
        }),
        workers,
        run_worker: Rc::new(move |ctx, index| Box::pin(w.clone().run_worker(ctx, index))),
        state,
    }
}

/// The memory node's chunk allocator as a service: one weak core, a fixed handler cost.
struct AllocatorService {
    state: Mutex<ChunkAllocator>,
    handler_ns: u64,
}

impl Service<SimClient> for AllocatorService {
    async fn handle(self: Arc<Self>, ctx: SimClient, request: Vec<u8>) -> Vec<u8> {
        ctx.charge_cpu(CpuWork::Nanoseconds, self.handler_ns).await;
        let response = match AllocRequest::decode(&request) {
            Ok(r) => {
                let response = self.state.lock().unwrap_or_else(|e| e.into_inner()).handle(r);
                if let (AllocRequest::Alloc { bytes, .. }, AllocResponse::Allocated(at)) = (r, &response) {
                    ctx.core.borrow_mut().allocations.note(at.node(), at.offset(), bytes);
                }
                response
            }
            Err(e) => AllocResponse::Rejected(e.to_string()),
        };
        response.encode()
    }

    fn fork(&self) -> Option<Self> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(AllocatorService { state: Mutex::new(state), handler_ns: self.handler_ns })
    }
}

/// Wakes from foreign futures (anything not built on the simulator's own) land here.
struct TaskWaker {
    id: TaskId,
    woken: Arc<Mutex<Vec<TaskId>>>,
    any_woken: Arc<AtomicBool>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.lock().unwrap_or_else(|e| e.into_inner()).push(self.id);
        self.any_woken.store(true, Ordering::Release);
    }
}

/// A simulation: nodes, clients and their tasks.
pub struct Sim {
    core: Rc<RefCell<Core>>,
    /// The tasks, by slot ([`TaskId::slot`]): a finished task's slot is reused, so this holds
    /// the most tasks ever alive at once (a load spawns a task per RPC, tens of millions at
    /// 10 M keys, but only a few are alive at a time).
    tasks: Vec<Option<Task>>,
    services: BTreeMap<(u16, u16), ServiceEntry>,
    started: bool,
    live_tasks: usize,
    woken: Arc<Mutex<Vec<TaskId>>>,
    /// Set by foreign wakers, so the loop locks `woken` only when there is something in it.
    any_woken: Arc<AtomicBool>,
    /// Emptied buffers kept for their room: the woken tasks and the dispatched RPCs are handed
    /// over by swapping with these (a taken `Vec` grew from nothing every time: three
    /// allocations in each of HStore's loaded keys).
    woken_spare: Vec<TaskId>,
    dispatch_spare: Vec<Dispatch>,
    caps: Caps,
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sim({:?}, {} live tasks)", self.core.borrow(), self.live_tasks)
    }
}

impl Sim {
    /// A timed (performance) simulation: steps run in virtual-time order.
    pub fn new(cfg: SimConfig) -> Result<Sim, ConfigError> {
        Sim::build(cfg, StepQueue::Timed(Default::default()))
    }

    /// A checking simulation: `chooser` picks every step among the enabled ones, and every
    /// READ, WRITE and RMW is split into the steps the memory model allows to interleave.
    pub fn with_chooser(cfg: SimConfig, chooser: Box<dyn Chooser>) -> Result<Sim, ConfigError> {
        Sim::build(cfg, StepQueue::Chosen { steps: Vec::new(), chooser })
    }

    fn build(cfg: SimConfig, queue: StepQueue) -> Result<Sim, ConfigError> {
        cfg.validate()?;
        let p = &cfg.profile;
        let caps = Caps {
            masked_atomics: cfg.masked_atomics,
            device_memory_bytes: p.device_memory_bytes,
            max_inline_bytes: p.max_inline_bytes as u32,
            max_message_bytes: p.max_message_bytes,
            max_outstanding_reads_per_qp: p.max_outstanding_reads_per_qp as u32,
        };
        let topology = cfg.topology;
        let (reserved, host_bytes, reuse, handler_ns) =
            (topology.reserved_bytes, cfg.profile.host_memory_bytes, cfg.allocator_reuse, cfg.profile.rpc_handler_ns);
        let mut sim = Sim {
            core: Rc::new(RefCell::new(Core::new(cfg, queue))),
            tasks: Vec::new(),
            services: BTreeMap::new(),
            started: false,
            live_tasks: 0,
            woken: Arc::new(Mutex::new(Vec::new())),
            any_woken: Arc::new(AtomicBool::new(false)),
            woken_spare: Vec::new(),
            dispatch_spare: Vec::new(),
            caps,
        };
        for n in 0..topology.memory_nodes {
            sim.add_service(NodeId(n), ALLOCATOR_SERVICE, move || AllocatorService {
                state: Mutex::new(ChunkAllocator::new(NodeId(n), reserved, host_bytes, reuse)),
                handler_ns,
            })
            .expect("memory nodes take services");
        }
        Ok(sim)
    }

    /// Runs `factory()`'s service as `id` on memory or server node `node`: each `call` to it is
    /// handled on one of the node's RPC threads, its workers get threads of their own, and a
    /// crash and restart of the node creates it afresh.
    pub fn add_service<S: Service<SimClient>>(
        &mut self,
        node: NodeId,
        id: u16,
        factory: impl Fn() -> S + 'static,
    ) -> Result<(), ConfigError> {
        if self.services.contains_key(&(node.0, id)) {
            return Err(ConfigError(format!("{node} already runs service {id}")));
        }
        self.core
            .borrow_mut()
            .add_service(node, id)
            .map_err(|_| ConfigError(format!("{node} is not a memory or server node: services run there")))?;
        let entry = ServiceEntry {
            factory: Box::new(move || erase(factory())),
            snapshot: Box::new(|instance| {
                let state = instance.state.clone().downcast::<S>().ok()?;
                Some(Arc::new(state.fork()?) as ForkedState)
            }),
            forks: Box::new(|instance| instance.state.downcast_ref::<S>().is_some_and(|s| s.forks())),
            resume: Box::new(|state| state.downcast_ref::<S>()?.fork().map(erase)),
            initial: None,
            current: None,
        };
        self.services.insert((node.0, id), entry);
        if self.started {
            self.start_service(node, id);
        }
        Ok(())
    }

    fn start_service(&mut self, node: NodeId, id: u16) {
        let entry = self.services.get_mut(&(node.0, id)).expect("registered");
        let instance = match entry.initial.take() {
            Some(state) => (entry.resume)(&state).expect("an image holds only states its service can copy"),
            None => (entry.factory)(),
        };
        if id == ALLOCATOR_SERVICE {
            // A restored allocator's blocks were handed out before this simulation began.
            if let Ok(allocator) = instance.state.clone().downcast::<AllocatorService>() {
                let state = allocator.state.lock().unwrap_or_else(|e| e.into_inner());
                let mut core = self.core.borrow_mut();
                for (offset, bytes) in state.blocks() {
                    core.allocations.note(node, offset, bytes);
                }
            }
        }
        let (workers, run_worker) = (instance.workers, instance.run_worker.clone());
        entry.current = Some(instance);
        for index in 0..workers {
            let client = {
                let mut core = self.core.borrow_mut();
                let thread = core.worker_thread(node, index);
                core.add_client(thread)
            };
            let ctx = self.handle(client);
            let future = run_worker(ctx.clone(), index);
            let task = self.spawn_task(future, true);
            self.core.borrow_mut().bind_task(task, client);
        }
    }

    /// Creates the nodes' RPC threads and starts the services (at the first run).
    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        self.core.borrow_mut().start_nodes();
        let keys: Vec<(u16, u16)> = self.services.keys().copied().collect();
        for (node, id) in keys {
            self.start_service(NodeId(node), id);
        }
    }

    /// A handle to an existing client.
    fn handle(&self, client: u32) -> SimClient {
        let core = self.core.borrow();
        let info = &core.clients[client as usize];
        SimClient {
            core: self.core.clone(),
            id: client,
            node: info.node,
            thread: info.thread,
            coroutine: info.coroutine,
            caps: self.caps.clone(),
            rng: info.rng.clone(),
        }
    }

    /// Starts handlers for dispatched RPCs and services of restarted nodes; true if it spawned
    /// anything.
    fn serve_requests(&mut self) -> bool {
        let mut dispatches = std::mem::take(&mut self.dispatch_spare);
        let restarted = self.core.borrow_mut().take_requests(&mut dispatches);
        let spawned = !dispatches.is_empty() || !restarted.is_empty();
        for node in restarted {
            let ids: Vec<u16> = self.services.range((node.0, 0)..=(node.0, u16::MAX)).map(|(&(_, id), _)| id).collect();
            for id in ids {
                self.start_service(node, id);
            }
        }
        for d in dispatches.drain(..) {
            let dispatch = match self.services.get(&(d.node.0, d.service)).and_then(|e| e.current.as_ref()) {
                Some(instance) => instance.dispatch.clone(),
                None => unreachable!("the core dispatches only to registered services"),
            };
            let ctx = self.handle(d.handler);
            let task = dispatch(ctx.clone(), d, self.core.clone());
            self.spawn_pinned(&ctx, task);
        }
        self.dispatch_spare = dispatches;
        spawned
    }

    /// A new client on a thread of its own on compute node `compute_node` (0-based among
    /// compute nodes; its node id is `Topology::compute_node_id`).
    pub fn add_client(&mut self, compute_node: u16) -> Result<SimClient, ConfigError> {
        let id = {
            let mut core = self.core.borrow_mut();
            let topology = core.cfg.topology;
            if compute_node >= topology.compute_nodes {
                return Err(ConfigError(format!(
                    "compute node {compute_node} does not exist (there are {})",
                    topology.compute_nodes
                )));
            }
            let thread = core.add_thread(topology.compute_node_id(compute_node));
            core.add_client(thread)
        };
        Ok(self.handle(id))
    }

    /// Another coroutine on `client`'s thread: the two share one CPU.
    pub fn add_coroutine(&mut self, client: &SimClient) -> SimClient {
        let id = self.core.borrow_mut().add_client(client.thread);
        self.handle(id)
    }

    /// Runs `future` as `client`'s task (a client crash drops it).
    pub fn spawn(&mut self, client: &SimClient, future: impl Future<Output = ()> + 'static) {
        self.spawn_pinned(client, Box::pin(future));
    }

    fn spawn_pinned(&mut self, client: &SimClient, future: Pin<Box<dyn Future<Output = ()>>>) {
        let task = self.spawn_task(future, false);
        self.core.borrow_mut().bind_task(task, client.id);
    }

    /// Runs `future` as `client`'s task and keeps what it returns: take it after the run.
    pub fn spawn_output<T: 'static>(
        &mut self,
        client: &SimClient,
        future: impl Future<Output = T> + 'static,
    ) -> TaskOutput<T> {
        let out = TaskOutput(Rc::new(RefCell::new(None)));
        let slot = out.0.clone();
        self.spawn(client, async move {
            let value = future.await;
            *slot.borrow_mut() = Some(value);
        });
        out
    }

    /// Runs `future` as a task of no client.
    pub fn spawn_detached(&mut self, future: impl Future<Output = ()> + 'static) {
        self.spawn_task(Box::pin(future), false);
    }

    /// A daemon (a service worker) waiting for work does not make a run a deadlock: a run ends
    /// when no step is pending and every other task has finished. A daemon that keeps timers
    /// pending keeps the run going (bound such runs with `run_until`).
    fn spawn_task(&mut self, future: Pin<Box<dyn Future<Output = ()>>>, daemon: bool) -> TaskId {
        let id = self.core.borrow_mut().tasks.add();
        let waker =
            Waker::from(Arc::new(TaskWaker { id, woken: self.woken.clone(), any_woken: self.any_woken.clone() }));
        let task = Some(Task { future, waker, last_poll_ns: u64::MAX, polls_at_same_time: 0, daemon });
        match self.tasks.get_mut(id.slot as usize) {
            Some(slot) => {
                debug_assert!(slot.is_none(), "a reused slot's task has finished");
                *slot = task;
            }
            None => {
                debug_assert_eq!(id.slot as usize, self.tasks.len(), "slots are dense");
                self.tasks.push(task);
            }
        }
        if !daemon {
            self.live_tasks += 1;
        }
        id
    }

    /// Runs until every task has finished and every posted verb has landed.
    pub fn run(&mut self) -> Result<(), SimError> {
        self.run_inner(None)
    }

    /// Runs until virtual time `t_ns` (timed runs), or until the run ends if sooner.
    pub fn run_until(&mut self, t_ns: u64) -> Result<(), SimError> {
        self.run_inner(Some(t_ns))
    }

    fn run_inner(&mut self, until: Option<u64>) -> Result<(), SimError> {
        self.start();
        loop {
            loop {
                self.poll_ready()?;
                if !self.serve_requests() {
                    break;
                }
            }
            let mut core = self.core.borrow_mut();
            if let Some(limit) = core.cfg.step_limit {
                if core.steps >= limit {
                    return Err(SimError::StepLimit { steps: core.steps, now_ns: core.now_ns });
                }
            }
            if let Some(t) = until {
                if core.skip_to(t) {
                    return Ok(());
                }
            }
            if !core.step() {
                let now_ns = core.now_ns;
                drop(core);
                if self.live_tasks > 0 {
                    return Err(SimError::Deadlock { blocked_tasks: self.live_tasks, now_ns });
                }
                debug_assert_eq!(self.core.borrow().in_flight(), 0, "no step pending, yet verbs are in flight");
                return Ok(());
            }
            let crashed = core.tasks.take_crashed();
            drop(core);
            for t in crashed {
                // Dropping the future runs its destructors, which may touch the core.
                if let Some(task) = self.tasks[t.slot as usize].take() {
                    if !task.daemon {
                        self.live_tasks -= 1;
                    }
                }
            }
        }
    }

    fn poll_ready(&mut self) -> Result<(), SimError> {
        loop {
            if self.any_woken.swap(false, Ordering::Acquire) {
                // Wakes from wakers (local notifications) go through the seam as steps, so a
                // chooser decides when the woken task runs.
                std::mem::swap(&mut self.woken_spare, &mut *self.woken.lock().unwrap_or_else(|e| e.into_inner()));
                let mut core = self.core.borrow_mut();
                let now = core.now_ns;
                let at_once = core.instant_fast_path();
                for t in self.woken_spare.drain(..) {
                    if at_once {
                        core.count_instant_step(0x3a4e);
                        core.wake(Some(t));
                    } else {
                        core.schedule(now, StepKind::Wake(t));
                    }
                }
            }
            let (next, now_ns, spin_limit) = {
                let mut core = self.core.borrow_mut();
                let next = core.tasks.next();
                // In instant (bulk-load) mode time stands still by design: no spin detection.
                let limit = if core.instant { u64::MAX } else { core.cfg.spin_poll_limit };
                (next, core.now_ns, limit)
            };
            let Some(t) = next else { return Ok(()) };
            let Some(task) = self.tasks[t.slot as usize].as_mut() else {
                self.core.borrow_mut().tasks.polled();
                continue;
            };
            if task.last_poll_ns == now_ns {
                task.polls_at_same_time += 1;
                if task.polls_at_same_time >= spin_limit {
                    let mut core = self.core.borrow_mut();
                    core.tasks.polled();
                    let client = core.tasks.client_of(t);
                    return Err(SimError::Spin { client, polls: task.polls_at_same_time, now_ns });
                }
            } else {
                task.last_poll_ns = now_ns;
                task.polls_at_same_time = 0;
            }
            let Task { future, waker, .. } = task;
            let poll = future.as_mut().poll(&mut Context::from_waker(waker));
            self.core.borrow_mut().tasks.polled();
            if poll.is_ready() {
                if let Some(task) = self.tasks[t.slot as usize].take() {
                    if !task.daemon {
                        self.live_tasks -= 1;
                    }
                }
                self.core.borrow_mut().task_finished(t);
            }
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.core.borrow().now_ns
    }

    /// Bulk-load mode: while on, verbs, calls and CPU work cost no virtual time and use no NIC
    /// or CPU capacity, but still execute with the memory model's semantics (without a
    /// chooser, each the moment it is posted: `Core::instant_fast_path`). Run an
    /// index's own insert logic in it to build an initial structure as inserts would, without
    /// simulated time; turn it off before measuring. Counters still count (take a `stats()`
    /// baseline after loading).
    pub fn set_instant(&mut self, on: bool) {
        self.core.borrow_mut().instant = on;
    }

    /// Crashes (and restarts) a memory or server node during the run, as
    /// [`crate::Faults::node_crashes`] does from the start: for crashes timed after a set-up
    /// whose length is not known in advance (a load). Times are absolute and not in the past.
    pub fn add_node_crash(&mut self, crash: crate::NodeCrash) -> Result<(), ConfigError> {
        self.core.borrow_mut().add_node_crash(crash).map_err(ConfigError)
    }

    /// Fails a READ during the run, as [`crate::Faults::read_failures`] does from the start
    /// (absolute time, not in the past).
    pub fn add_read_failure(&mut self, failure: crate::ReadFailure) -> Result<(), ConfigError> {
        self.core.borrow_mut().add_read_failure(failure).map_err(ConfigError)
    }

    /// Task slots held: the most tasks alive at once (a finished task's slot is reused), plus
    /// one for each task a crash ended.
    pub fn task_slots(&self) -> usize {
        self.tasks.len()
    }

    /// Tasks not yet finished or crashed.
    pub fn live_tasks(&self) -> usize {
        self.live_tasks
    }

    pub fn stats(&self) -> Stats {
        self.core.borrow().stats()
    }

    /// What `SimClient::caps` reports.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Reads simulated memory directly, outside virtual time (tests, invariant checks).
    pub fn read_memory(&self, addr: RemoteAddr, len: usize) -> Result<Vec<u8>, VerbsError> {
        let mut out = vec![0; len];
        self.core.borrow().peek(addr, &mut out)?;
        Ok(out)
    }

    /// Writes simulated memory directly, outside virtual time (bulk load, test set-up).
    pub fn write_memory(&mut self, addr: RemoteAddr, data: &[u8]) -> Result<(), VerbsError> {
        self.core.borrow_mut().poke(addr, data)
    }

    /// The state of every memory and server node — host and device memory, and the state of
    /// each service — to start other runs from (see [`Image`]). The simulation must be
    /// quiescent: every task finished (service workers may wait for work), nothing in flight,
    /// every node up, and every service able to copy its state (`Service::fork`); otherwise
    /// the error says which condition failed.
    pub fn image(&self) -> Result<Image, String> {
        self.make_image(false)
    }

    /// [`Sim::image`] that moves the memories and the services' states out instead of copying
    /// them, for a simulation that ends here (a load): no second copy of every loaded byte or
    /// of a server's host-side structures, and no time spent on one. A service's state is
    /// taken if it could be copied (`Service::forks`); each restore copies it.
    pub fn into_image(self) -> Result<Image, String> {
        self.make_image(true)
    }

    fn make_image(&self, take: bool) -> Result<Image, String> {
        if self.live_tasks > 0 {
            return Err(format!("{} tasks are still running", self.live_tasks));
        }
        if self.core.borrow().in_flight() > 0 {
            return Err(format!("{} verbs or calls are in flight", self.core.borrow().in_flight()));
        }
        let nodes =
            if take { self.core.borrow_mut().take_node_memories()? } else { self.core.borrow().node_memories()? };
        let core = self.core.borrow();
        let topology = core.cfg.topology;
        let mut services = BTreeMap::new();
        for (&(node, id), entry) in &self.services {
            let state = match (&entry.current, &entry.initial) {
                // A simulation being consumed hands its running state over: no run goes on
                // from it, so the image may hold it as it is, and each restore forks it as it
                // would a copy (a copy of HStore's skiplists doubled the load's peak).
                (Some(instance), _) if take => (entry.forks)(instance).then(|| instance.state.clone()),
                (Some(instance), _) => (entry.snapshot)(instance),
                // Never started: the restored copy, or a fresh instance.
                (None, Some(state)) => Some(state.clone()),
                (None, None) => (entry.snapshot)(&(entry.factory)()),
            };
            let state = state.ok_or_else(|| format!("service {id} on node {node} cannot copy its state"))?;
            services.insert((node, id), state);
        }
        Ok(Image {
            memory_nodes: topology.memory_nodes,
            server_nodes: topology.server_nodes,
            host_memory_bytes: core.cfg.profile.host_memory_bytes,
            nodes,
            services,
        })
    }

    /// Starts this simulation from `image` instead of empty nodes: its memories are copied in,
    /// and each service starts from a copy of the image's state for it instead of its factory's
    /// fresh one (a later crash and restart still starts afresh). Call it before the first run,
    /// after registering the same services on the same memory and server nodes as the imaged
    /// simulation had (compute nodes and clients may differ).
    pub fn restore(&mut self, image: &Image) -> Result<(), ConfigError> {
        if self.started {
            return Err(ConfigError("an image is restored before the run starts".into()));
        }
        let mut core = self.core.borrow_mut();
        let t = core.cfg.topology;
        if (t.memory_nodes, t.server_nodes) != (image.memory_nodes, image.server_nodes) {
            return Err(ConfigError(format!(
                "the image has {} memory and {} server nodes; this simulation has {} and {}",
                image.memory_nodes, image.server_nodes, t.memory_nodes, t.server_nodes
            )));
        }
        if core.cfg.profile.host_memory_bytes != image.host_memory_bytes {
            return Err(ConfigError("the image was taken with another host memory size".into()));
        }
        let registered: Vec<(u16, u16)> = self.services.keys().copied().collect();
        let imaged: Vec<(u16, u16)> = image.services.keys().copied().collect();
        if registered != imaged {
            return Err(ConfigError(format!(
                "the image has services {imaged:?} (node, id); this simulation registered {registered:?}"
            )));
        }
        core.set_node_memories(&image.nodes);
        drop(core);
        for (key, state) in &image.services {
            self.services.get_mut(key).expect("compared above").initial = Some(state.clone());
        }
        Ok(())
    }

    /// The trace lines recorded so far (with `SimConfig::trace`), one per executed step.
    pub fn take_trace(&mut self) -> Vec<String> {
        self.core.borrow_mut().trace.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

/// The memories and service states of a simulation's memory and server nodes at a quiescent
/// moment ([`Sim::image`]), to start other simulations from ([`Sim::restore`]): a sweep loads
/// an index once and runs each point from a copy (DESIGN.md §5a, "load once"). Compute-node
/// state is not in it: each run opens the index afresh and warms its caches. `Send + Sync`,
/// so points on several threads share one.
#[derive(Clone)]
pub struct Image {
    memory_nodes: u16,
    server_nodes: u16,
    host_memory_bytes: u64,
    /// Per memory or server node: host and device memory (frozen: a restored simulation forks
    /// them copy-on-write, so the image is shared, never copied).
    nodes: crate::memory::NodeMemories,
    /// Per (node, service id): the service's copied state.
    services: BTreeMap<(u16, u16), ForkedState>,
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Image({} memory nodes, {} server nodes, {} non-zero bytes, services {:?})",
            self.memory_nodes,
            self.server_nodes,
            self.nonzero_bytes(),
            self.services.keys().collect::<Vec<_>>()
        )
    }
}

impl Image {
    /// Non-zero bytes of every node's memories.
    pub fn nonzero_bytes(&self) -> u64 {
        self.nodes.iter().map(|(h, d)| h.nonzero_line_bytes() + d.nonzero_line_bytes()).sum()
    }

    /// Host heap bytes the image's memories occupy.
    pub fn host_bytes(&self) -> u64 {
        self.nodes.iter().map(|(h, d)| h.host_bytes() + d.host_bytes()).sum()
    }

    /// A digest of every node's host and device memory ([`crate::SparseMemory::digest`]).
    pub fn memory_digest(&self) -> u64 {
        self.nodes.iter().fold(0x1_3579u64, |h, (host, dev)| {
            let h = (h ^ host.digest()).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            (h ^ dev.digest()).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        })
    }

    /// Whether two images hold the same memory contents (service states are not compared).
    pub fn same_memory(&self, other: &Image) -> bool {
        self.nodes == other.nodes
    }
}

/// What a task spawned with [`Sim::spawn_output`] returned.
#[derive(Debug)]
pub struct TaskOutput<T>(Rc<RefCell<Option<T>>>);

impl<T> TaskOutput<T> {
    /// The output, if the task has finished (and it was not taken yet).
    pub fn try_take(&self) -> Option<T> {
        self.0.borrow_mut().take()
    }

    /// The output; panics if the task has not finished (a test's expectation).
    pub fn take(&self) -> T {
        self.try_take().expect("the task ran to completion")
    }
}

/// One client: its QPs to every node, its identity, its clock and its seeded randomness.
///
/// Cloning gives another handle to the same client (same QPs).
#[derive(Clone)]
pub struct SimClient {
    core: Rc<RefCell<Core>>,
    id: u32,
    node: NodeId,
    thread: u32,
    coroutine: u32,
    caps: Caps,
    rng: Rc<RefCell<ChaCha8Rng>>,
}

impl fmt::Debug for SimClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimClient({} on {}, thread {}, coroutine {})", self.id, self.node, self.thread, self.coroutine)
    }
}

impl SimClient {
    /// The client's number, unique in the simulation.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The compute node's node id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Virtual time now.
    pub fn now_ns(&self) -> u64 {
        self.core.borrow().now_ns
    }

    /// This client's counters so far (verbs and bytes by kind, round trips waited for).
    pub fn stats(&self) -> crate::stats::ClientStats {
        self.core.borrow().clients[self.id as usize].stats
    }

    /// A fresh position in the run's one total order of recorded events: every call returns a
    /// larger value than every call before it, in any client. The simulator runs its tasks one
    /// at a time on one thread, so this order is the order in which the events happened, and
    /// an operation stamped as responded before another was stamped as invoked really had
    /// returned before the other began — program order (a client's next operation after its
    /// previous one) included, which a step count cannot show: a client's response and its
    /// next invocation happen in the same poll, so in the same step.
    pub fn history_stamp(&self) -> u64 {
        self.core.borrow_mut().next_stamp()
    }

    /// The client's own random stream, derived from the run's seed and the client id. Never
    /// hold it across an `.await`.
    pub fn rng(&self) -> RefMut<'_, ChaCha8Rng> {
        self.rng.borrow_mut()
    }

    /// Waits `ns` of virtual time without using the CPU.
    pub fn sleep(&self, ns: u64) -> Sleep {
        let mut core = self.core.borrow_mut();
        let at = core.now_ns.saturating_add(ns).min(crate::config::MAX_TIME_NS);
        let id = core.add_timer(at, false);
        Sleep { core: self.core.clone(), timer: Some(id) }
    }

    /// Hands the thread to its other coroutines: one coroutine switch of CPU time.
    pub fn yield_now(&self) -> Sleep {
        let switch_ns = self.core.borrow().cfg.profile.cpu.coroutine_switch_ns;
        let sleep = self.charge_cpu(CpuWork::Nanoseconds, switch_ns.ceil() as u64);
        if let Some(t) = sleep.timer {
            self.core.borrow_mut().timer_is_yield(t);
        }
        sleep
    }

    /// Spends CPU on this client's thread (see [`ClientCtx::charge_cpu`]).
    pub fn charge_cpu(&self, work: CpuWork, units: u64) -> Sleep {
        let timer = self.core.borrow_mut().charge_cpu(self.id, work, units);
        Sleep { core: self.core.clone(), timer }
    }

    fn local_op(&self, offset: u64, op: Op) -> LocalFuture {
        let posted = self.core.borrow_mut().local(self.id, offset, op);
        LocalFuture::new(&self.core, posted)
    }
}

impl ClientCtx for SimClient {
    fn now_ns(&self) -> u64 {
        SimClient::now_ns(self)
    }
    fn sleep(&self, ns: u64) -> impl Future<Output = ()> {
        SimClient::sleep(self, ns)
    }
    fn yield_now(&self) -> impl Future<Output = ()> {
        SimClient::yield_now(self)
    }
    fn with_rng<R>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R {
        f(&mut self.rng.borrow_mut())
    }
    fn charge_cpu(&self, work: CpuWork, units: u64) -> impl Future<Output = ()> {
        SimClient::charge_cpu(self, work, units)
    }
    fn cpu_is_free(&self) -> bool {
        self.core.borrow().instant
    }
    fn identity(&self) -> ClientIdentity {
        ClientIdentity { client: self.id, node: self.node, thread: self.thread, coroutine: self.coroutine }
    }
}

impl LocalMemory for SimClient {
    fn local_read(&self, offset: u64, len: usize) -> impl Future<Output = Result<Buf, VerbsError>> {
        let done = self.local_op(offset, Op::Read(Buf::zeroed(len)));
        async move { done.await?.into_buf() }
    }
    fn local_write(&self, offset: u64, data: Buf) -> impl Future<Output = Result<(), VerbsError>> {
        let done = self.local_op(offset, Op::Write(data));
        async move { done.await.map(|_| ()) }
    }
    fn local_cas(&self, offset: u64, expect: u64, swap: u64) -> impl Future<Output = Result<u64, VerbsError>> {
        let done = self.local_op(offset, Op::Cas { expect, swap });
        async move { done.await?.atomic() }
    }
    fn local_faa(&self, offset: u64, add: u64) -> impl Future<Output = Result<u64, VerbsError>> {
        let done = self.local_op(offset, Op::Faa { add });
        async move { done.await?.atomic() }
    }
}

impl Replier for SimClient {
    fn reply(&self, to: Responder, response: Vec<u8>) -> Result<(), VerbsError> {
        let call =
            u32::try_from(to.call).map_err(|_| VerbsError::Protocol(format!("no call {} on {}", to.call, to.node)))?;
        if to.node != self.node {
            return Err(VerbsError::Protocol(format!("{} cannot answer a call {} received", self.node, to.node)));
        }
        self.core.borrow_mut().rpc_reply_deferred(self.id, call, to.tag, response)
    }
}

/// A `sleep` or `yield_now` in progress.
pub struct Sleep {
    core: Rc<RefCell<Core>>,
    timer: Option<u32>,
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sleep({:?})", self.timer)
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let Some(id) = self.timer else { return Poll::Ready(()) };
        let fired = self.core.borrow_mut().poll_timer(id);
        if fired {
            self.timer = None;
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.timer {
            self.core.borrow_mut().drop_timer(id);
        }
    }
}

/// A posted batch, call or local access: resolves to its result when the simulator delivers
/// it. Dropping it does not cancel anything (the operation was posted); the result is discarded.
pub(crate) struct Awaiting<A: Awaited>
where
    Core: AwaitedSlab<A>,
{
    core: Rc<RefCell<Core>>,
    state: Result<Option<u32>, Option<VerbsError>>,
    kind: std::marker::PhantomData<fn() -> A>,
}

/// A posted doorbell batch.
pub(crate) type BatchFuture = Awaiting<Batch>;
/// A `call` in flight.
pub(crate) type CallFuture = Awaiting<Rpc>;
/// A service CPU's local memory access in flight.
pub(crate) type LocalFuture = Awaiting<LocalOp>;

impl<A: Awaited> Awaiting<A>
where
    Core: AwaitedSlab<A>,
{
    fn new(core: &Rc<RefCell<Core>>, posted: Result<u32, VerbsError>) -> Awaiting<A> {
        Awaiting { core: core.clone(), state: posted.map(Some).map_err(Some), kind: std::marker::PhantomData }
    }
}

impl<A: Awaited> fmt::Debug for Awaiting<A>
where
    Core: AwaitedSlab<A>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Awaiting<{}>({:?})", std::any::type_name::<A>(), self.state)
    }
}

impl<A: Awaited> Future for Awaiting<A>
where
    Core: AwaitedSlab<A>,
{
    type Output = Result<A::Output, VerbsError>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.state {
            Err(ref mut e) => Poll::Ready(Err(e.take().expect("polled after completion"))),
            Ok(None) => panic!("polled after completion"),
            Ok(Some(id)) => {
                let result = self.core.borrow_mut().poll_awaited::<A>(id);
                match result {
                    Some(r) => {
                        self.state = Ok(None);
                        Poll::Ready(r)
                    }
                    None => Poll::Pending,
                }
            }
        }
    }
}

impl<A: Awaited> Drop for Awaiting<A>
where
    Core: AwaitedSlab<A>,
{
    fn drop(&mut self) {
        if let Ok(Some(id)) = self.state {
            self.core.borrow_mut().drop_awaited::<A>(id);
        }
    }
}

impl Verbs for SimClient {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn post(&self, requests: Vec<Request>) -> impl Future<Output = Result<Vec<Response>, VerbsError>> {
        let done = self.post_keeping(requests);
        async move { done.await.into_result() }
    }

    fn post_keeping(&self, requests: Vec<Request>) -> impl Future<Output = dmkit_rdma::BatchOutcome> {
        let posted = self.core.borrow_mut().post(self.id, requests, true);
        let done = BatchFuture::new(&self.core, posted);
        async move {
            match done.await {
                Ok((completed, error)) => dmkit_rdma::BatchOutcome { completed, error },
                Err(e) => dmkit_rdma::BatchOutcome { completed: Vec::new(), error: Some(e) },
            }
        }
    }

    fn post_unsignaled(&self, requests: Vec<Request>) -> Result<(), VerbsError> {
        self.core.borrow_mut().post(self.id, requests, false).map(|_| ())
    }

    fn call(&self, node: NodeId, service: u16, request: Vec<u8>) -> impl Future<Output = Result<Vec<u8>, VerbsError>> {
        let posted = self.core.borrow_mut().call(self.id, node, service, request);
        CallFuture::new(&self.core, posted)
    }

    fn masked_cas(
        &self,
        addr: RemoteAddr,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    ) -> impl Future<Output = Result<u64, VerbsError>> {
        let native = self.caps.masked_atomics == dmkit_rdma::MaskedAtomics::Native;
        let posted = native.then(|| self.post(vec![Request::masked_cas(addr, compare, compare_mask, swap, swap_mask)]));
        async move {
            match posted {
                Some(done) => dmkit_rdma::single(done.await?)?.atomic(),
                None => dmkit_rdma::emulate::masked_cas(self, addr, compare, compare_mask, swap, swap_mask).await,
            }
        }
    }

    fn masked_faa(
        &self,
        addr: RemoteAddr,
        add: u64,
        boundary_mask: u64,
    ) -> impl Future<Output = Result<u64, VerbsError>> {
        let native = self.caps.masked_atomics == dmkit_rdma::MaskedAtomics::Native;
        let posted = native.then(|| self.post(vec![Request::masked_faa(addr, add, boundary_mask)]));
        async move {
            match posted {
                Some(done) => dmkit_rdma::single(done.await?)?.atomic(),
                None => dmkit_rdma::emulate::masked_faa(self, addr, add, boundary_mask).await,
            }
        }
    }
}

impl dmkit_rdma::MemoryView for Sim {
    fn read_memory(&self, addr: RemoteAddr, len: usize) -> Result<Vec<u8>, VerbsError> {
        Sim::read_memory(self, addr, len)
    }

    fn service_state(&self, node: NodeId, service: u16) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let entry = self.services.get(&(node.0, service))?;
        match &entry.current {
            Some(instance) => Some(instance.state.clone()),
            // Not started yet: the state a restored image will start it from (an index warms
            // its caches from it before the run).
            None => entry.initial.clone(),
        }
    }
}

impl ServiceHost for Sim {
    type Ctx = SimClient;

    fn add_service<S: Service<SimClient>>(
        &mut self,
        node: NodeId,
        id: u16,
        factory: impl Fn() -> S + 'static,
    ) -> Result<(), String> {
        Sim::add_service(self, node, id, factory).map_err(|e| e.to_string())
    }
}

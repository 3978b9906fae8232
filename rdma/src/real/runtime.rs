//! The async real backend (feature `connectx`): one [`Executor`] per OS thread runs many
//! [`RdmaClient`]s (coroutines), which share the thread's queue pairs to the memory nodes, one
//! completion queue, and a registered staging arena.
//!
//! - **Posting at call time.** `post` plans the batch, copies WRITE payloads into the staging
//!   arena and posts the work requests (one doorbell) before it returns its future, as the
//!   [`Verbs`] contract requires. When a queue pair's send queue is full the batch waits in a
//!   per-node backlog, in order, and is posted as completions free room.
//! - **Completions wake the right task.** Each batch's last work request is signalled; its
//!   wr_id names the batch. The executor polls the completion queue whenever no task is ready,
//!   copies READ results and old words out of the staging arena, and wakes the waiting task.
//! - **Dropped futures.** The batch's staging slice belongs to the pending entry, not to the
//!   future, so it stays allocated until the completion arrives whether or not anyone waits.
//! - **Unsignaled batches** produce no completion; their staging is freed, and their work
//!   requests counted done, by the next signalled completion of the same queue pair (RC
//!   completes in order). At most half the send queue may be unsignaled: past that the batch is
//!   signalled with nobody waiting.
//! - **Masked atomics** are emulated (READ, then a CAS loop: [`crate::emulate`]); a batch is cut
//!   around them, in order.
//! - **`call`** is a SEND of `[call id u64][service u16][payload]` and a RECV of `[call id
//!   u64][status u8][payload]`; a payload is at most [`MAX_CALL_PAYLOAD`] (4 KiB) bytes each way.
//!   Each queue pair has [`CALL_CREDITS`] receives pre-posted on the node for requests and as
//!   many on this side for responses; a call takes a credit and its response gives it back, so
//!   a thread has at most [`CALL_CREDITS`] calls outstanding per node, and a node may answer
//!   them in any order (deferred replies): a response names its call. Like a batch, a call is
//!   posted when it is made; past the credits it waits in the link's queue, in call order, and
//!   is posted as responses give credits back, so a call whose future is dropped at once (a
//!   fire-and-forget message) is still delivered.
//! - **One clock per process.** `now_ns` counts from the first executor of the process, so
//!   times taken on different threads compare (a service's RPC thread and its workers, clients
//!   sharing a compute node's state). Processes' clocks are unrelated.
//! - **Idle threads sleep.** When no task is ready and nothing is in flight, the executor
//!   parks its thread until a waker (from any thread: a service's queue) or its next timer.
//!   With verbs in flight it spins on its completion queue, and after a few empty polls yields
//!   its core between polls (a deferred reply can take long).
//! - **Lazy links.** A service node's threads ([`Executor::with_connector`]) dial a node the
//!   first time a verb or call names it.

use super::device::{Completion, Cq, MemoryRegistration, Nic, RcQp, Region, failed_completion};
use super::plan::{NodeRegions, Part, WorkRequest, plan_batch};
use crate::{
    Buf, Caps, ChaCha8Rng, ClientCtx, ClientIdentity, CpuWork, NodeId, Op, Request, Response, Verbs, VerbsError,
    emulate,
};
use rand::SeedableRng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::net::TcpStream;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// Receives pre-posted per queue pair on each side for calls.
pub const CALL_CREDITS: u32 = 16;
/// The most bytes a call carries each way (its request, its reply): 4 KiB.
pub const MAX_CALL_PAYLOAD: usize = 4096;
/// Header bytes of a call request (`[call id u64][service u16]`).
pub const CALL_REQUEST_HEADER: u32 = 10;
/// Header bytes of a call response (`[call id u64][status u8]`).
pub const CALL_RESPONSE_HEADER: u32 = 9;
/// Bytes of a call message buffer: the payload and the longer header.
pub const CALL_MESSAGE_BYTES: u32 = MAX_CALL_PAYLOAD as u32 + CALL_REQUEST_HEADER;
/// A call request as it goes on the wire: `[call id u64][service u16][payload]`.
pub fn encode_request(call_id: u64, service: u16, payload: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(CALL_REQUEST_HEADER as usize + payload.len());
    msg.extend(call_id.to_le_bytes());
    msg.extend(service.to_le_bytes());
    msg.extend(payload);
    msg
}

/// A response as it goes on the wire: `[call id u64][status u8][body]`.
pub fn encode_response(call_id: u64, status: u8, body: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(CALL_RESPONSE_HEADER as usize + body.len());
    msg.extend(call_id.to_le_bytes());
    msg.push(status);
    msg.extend(body);
    msg
}

/// A request as it comes off the wire: `(call id, service, payload)`, or why it is malformed.
pub fn decode_request(msg: &[u8]) -> Result<(u64, u16, &[u8]), String> {
    if msg.len() < CALL_REQUEST_HEADER as usize {
        return Err(format!(
            "a call request of {} bytes is shorter than its {CALL_REQUEST_HEADER}-byte header",
            msg.len()
        ));
    }
    if msg.len() > CALL_MESSAGE_BYTES as usize {
        let payload = msg.len() - CALL_REQUEST_HEADER as usize;
        return Err(format!("a call request of {payload} bytes (calls carry at most {MAX_CALL_PAYLOAD})"));
    }
    let call_id = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
    let service = u16::from_le_bytes([msg[8], msg[9]]);
    Ok((call_id, service, &msg[CALL_REQUEST_HEADER as usize..]))
}

/// A response as it comes off the wire: `(call id, status, body)`.
pub fn decode_response(msg: &[u8]) -> Result<(u64, u8, &[u8]), VerbsError> {
    if msg.len() < CALL_RESPONSE_HEADER as usize {
        return Err(VerbsError::Protocol("a call response shorter than its header".into()));
    }
    let call_id = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
    Ok((call_id, msg[8], &msg[CALL_RESPONSE_HEADER as usize..]))
}

/// The longest an idle executor sleeps before it looks at its stop flag again.
const MAX_PARK: std::time::Duration = std::time::Duration::from_millis(5);
/// How long a stopping executor waits for its verbs in flight to complete.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(1);
/// Empty completion-queue polls an executor spins through, with verbs in flight, before it
/// yields its core between polls (a few microseconds on hardware, longer than most verbs).
const SPINS_BEFORE_YIELD: u32 = 64;
/// Work requests a queue pair may have outstanding.
pub const SEND_QUEUE_DEPTH: u32 = 512;

const KIND_BATCH: u64 = 0;
const KIND_CALL_SEND: u64 = 1;
const KIND_CALL_RECV: u64 = 2;

/// `[node: 16][kind: 2][sequence: 46]`.
fn wr_id(node: u16, kind: u64, seq: u64) -> u64 {
    (node as u64) << 48 | kind << 46 | (seq & ((1 << 46) - 1))
}

fn split_wr_id(id: u64) -> (u16, u64, u64) {
    ((id >> 48) as u16, (id >> 46) & 3, id & ((1 << 46) - 1))
}

/// First-fit allocator over the staging arena, in 64-byte units.
#[derive(Debug)]
struct Arena {
    /// offset → length of each free range.
    free: BTreeMap<u64, u64>,
}

impl Arena {
    fn new(start: u64, len: u64) -> Arena {
        Arena { free: BTreeMap::from([(start, len)]) }
    }

    fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = len.max(8).div_ceil(64) * 64;
        let (&at, &have) = self.free.iter().find(|(_, l)| **l >= len)?;
        self.free.remove(&at);
        if have > len {
            self.free.insert(at + len, have - len);
        }
        Some(at)
    }

    fn release(&mut self, at: u64, len: u64) {
        let mut len = len.max(8).div_ceil(64) * 64;
        let mut at = at;
        if let Some((&prev, &plen)) = self.free.range(..at).next_back()
            && prev + plen == at
        {
            self.free.remove(&prev);
            at = prev;
            len += plen;
        }
        if let Some(&nlen) = self.free.get(&(at + len)) {
            self.free.remove(&(at + len));
            len += nlen;
        }
        self.free.insert(at, len);
    }
}

/// A batch's outputs: (request index, bytes) of each READ and atomic; for a call, (status,
/// body).
type Outputs = Result<Vec<(u64, Vec<u8>)>, VerbsError>;
type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Where a batch's results go.
#[derive(Debug, Default)]
struct Slot {
    result: Option<Outputs>,
    waker: Option<Waker>,
}

impl Slot {
    /// Stores `result` and wakes the task waiting for it, if any.
    fn fill(slot: &RefCell<Slot>, result: Outputs) {
        let mut s = slot.borrow_mut();
        s.result = Some(result);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

/// A posted (or backlogged) signalled batch.
#[derive(Debug)]
struct Pending {
    staging: (u64, u64),
    /// (request index, staging offset, bytes to copy out) for READs and atomics.
    outputs: Vec<(usize, u64, usize)>,
    slot: Option<Rc<RefCell<Slot>>>,
}

/// A batch waiting for send-queue room.
#[derive(Debug)]
struct Queued {
    wrs: Vec<WorkRequest>,
    staging_offset: u64,
    pending: Option<Pending>,
}

/// A thread's connection to one node.
struct Link {
    qp: RcQp,
    regions: NodeRegions,
    /// Next work-request sequence number, and every sequence below `done` has completed.
    next_seq: u64,
    done: u64,
    /// Work requests posted since the last signalled one.
    unsignaled_wrs: u32,
    /// Staging of unsignaled batches, freed by the next signalled completion.
    unsignaled_staging: Vec<(u64, (u64, u64))>,
    /// Signalled batches in flight, by the sequence number of their last work request.
    pending: HashMap<u64, Pending>,
    backlog: VecDeque<Queued>,
    credits: u32,
    /// Calls waiting for a credit, in call order: each message whole (`[call id][service]
    /// [payload]`). They are posted as responses give credits back, whether or not anyone
    /// still waits for their futures.
    call_backlog: VecDeque<Vec<u8>>,
    /// Response receive buffers: staging offsets, by receive index.
    recv_buffers: Vec<u64>,
    calls: HashMap<u64, Rc<RefCell<Slot>>>,
}

struct State {
    links: BTreeMap<u16, Link>,
    arena: Arena,
    timers: BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
    timer_wakers: HashMap<u64, Waker>,
    next_timer: u64,
    next_call: u64,
    /// Control connections of lazily dialled links (closing one says goodbye to its node).
    controls: Vec<TcpStream>,
}

/// Dials `node` for a thread that has no queue pair to it yet: returns the connection, its
/// queue pair created on the given completion queue, and the control stream to keep open.
pub type Connector = Box<dyn FnMut(NodeId, &Cq) -> Result<(Connection, TcpStream), VerbsError>>;

/// The instant every executor of this process counts its time from.
fn process_epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A thread's executor state. Fields drop in declaration order: tasks first (they hold
/// clients), then the queue pairs (in `state`), then the registration, then the staging memory
/// the queue pairs' receives point into, so the NIC never writes into freed memory.
struct Shared {
    tasks: RefCell<Vec<Option<Task>>>,
    state: RefCell<State>,
    connector: RefCell<Option<Connector>>,
    mr: Arc<MemoryRegistration>,
    staging: RefCell<Region>,
    cq: Cq,
    /// Kept so the device outlives the queue pairs and registrations made on it.
    _nic: Arc<Nic>,
    ready: Arc<Mutex<VecDeque<usize>>>,
    /// The thread that runs the executor (wakers unpark it).
    runner: std::thread::Thread,
    /// The process's epoch ([`process_epoch`]).
    start: Instant,
    caps: Caps,
    compute_node: NodeId,
    thread: u32,
    seed: u64,
}

struct TaskWaker {
    id: usize,
    ready: Arc<Mutex<VecDeque<usize>>>,
    runner: std::thread::Thread,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).push_back(self.id);
        // Cheap when the thread is not parked (an atomic swap).
        self.runner.unpark();
    }
}

/// One thread's event loop: its tasks, its completion queue and its timers.
pub struct Executor {
    shared: Rc<Shared>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("thread", &self.shared.thread).finish()
    }
}

/// A connection to a node, as the handshake produced it: its queue pair (already in RTS) and
/// regions. The node has [`CALL_CREDITS`] receives posted for this queue pair.
#[derive(Debug)]
pub struct Connection {
    pub node: NodeId,
    pub qp: RcQp,
    pub regions: NodeRegions,
}

impl Link {
    fn new(qp: RcQp, regions: NodeRegions, recv_buffers: Vec<u64>) -> Link {
        Link {
            qp,
            regions,
            next_seq: 0,
            done: 0,
            unsignaled_wrs: 0,
            unsignaled_staging: Vec::new(),
            pending: HashMap::new(),
            backlog: VecDeque::new(),
            credits: CALL_CREDITS,
            call_backlog: VecDeque::new(),
            recv_buffers,
            calls: HashMap::new(),
        }
    }

    /// Whether a completion is still due on this link (a signalled batch or a call).
    fn busy(&self) -> bool {
        !self.pending.is_empty() || !self.backlog.is_empty() || !self.calls.is_empty()
    }
}

impl Executor {
    /// An executor for one thread of `compute_node`, whose queue pairs were created on `cq`.
    /// `staging_bytes` bounds the bytes of the batches in flight at once.
    pub fn new(
        nic: Arc<Nic>,
        cq: Cq,
        connections: Vec<Connection>,
        compute_node: NodeId,
        thread: u32,
        seed: u64,
        staging_bytes: usize,
    ) -> Result<Executor, VerbsError> {
        Executor::build(nic, cq, connections, compute_node, thread, seed, staging_bytes, None)
    }

    /// An executor for a thread of service node `node` that starts with no queue pairs and
    /// dials each node the first time a verb or call names it, with `connector` (on `cq`).
    /// `max_inline` is the inline size its queue pairs will have (its [`Caps`] say it before
    /// any exists).
    #[allow(clippy::too_many_arguments)]
    pub fn with_connector(
        nic: Arc<Nic>,
        cq: Cq,
        node: NodeId,
        thread: u32,
        seed: u64,
        staging_bytes: usize,
        connector: Connector,
        max_inline: u32,
    ) -> Result<Executor, VerbsError> {
        Executor::build(nic, cq, Vec::new(), node, thread, seed, staging_bytes, Some((connector, max_inline)))
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        nic: Arc<Nic>,
        cq: Cq,
        connections: Vec<Connection>,
        compute_node: NodeId,
        thread: u32,
        seed: u64,
        staging_bytes: usize,
        connector: Option<(Connector, u32)>,
    ) -> Result<Executor, VerbsError> {
        let staging = Region::new(staging_bytes)?;
        let mr = nic.register(&staging, false)?;
        let recv_bytes = connections.len() as u64 * (CALL_CREDITS * CALL_MESSAGE_BYTES) as u64;
        if recv_bytes * 2 > staging_bytes as u64 {
            return Err(VerbsError::Protocol("the staging arena is too small for the call buffers".into()));
        }
        let mut links = BTreeMap::new();
        let mut max_inline = u32::MAX;
        let mut device_memory = u64::MAX;
        for (i, c) in connections.into_iter().enumerate() {
            let mut qp = c.qp;
            let base = i as u64 * (CALL_CREDITS * CALL_MESSAGE_BYTES) as u64;
            let mut recv_buffers = Vec::new();
            for r in 0..CALL_CREDITS as u64 {
                let at = base + r * CALL_MESSAGE_BYTES as u64;
                qp.post_recv(wr_id(c.node.0, KIND_CALL_RECV, r), &staging, at, CALL_MESSAGE_BYTES, mr.lkey())?;
                recv_buffers.push(at);
            }
            max_inline = max_inline.min(qp.max_inline());
            device_memory = device_memory.min(c.regions.device.map_or(0, |d| d.len));
            links.insert(c.node.0, Link::new(qp, c.regions, recv_buffers));
        }
        let (connector, inline_hint) = match connector {
            Some((c, inline)) => (Some(c), Some(inline)),
            None => (None, None),
        };
        let caps = Caps {
            // Native (one raw WQE) only with feature `mlx5-masked` on a ConnectX, whose queue
            // pairs are then all of the direct-verbs kind.
            masked_atomics: nic.caps().masked_atomics,
            device_memory_bytes: if links.is_empty() { 0 } else { device_memory },
            max_inline_bytes: match inline_hint {
                Some(inline) => inline,
                None if links.is_empty() => 0,
                None => max_inline,
            },
            max_message_bytes: (staging_bytes as u64 - recv_bytes) / 4,
            max_outstanding_reads_per_qp: nic.caps().max_rd_atomic as u32,
        };
        let state = State {
            links,
            arena: Arena::new(recv_bytes, staging_bytes as u64 - recv_bytes),
            timers: BinaryHeap::new(),
            timer_wakers: HashMap::new(),
            next_timer: 0,
            next_call: 0,
            controls: Vec::new(),
        };
        Ok(Executor {
            shared: Rc::new(Shared {
                tasks: RefCell::new(Vec::new()),
                state: RefCell::new(state),
                connector: RefCell::new(connector),
                mr,
                staging: RefCell::new(staging),
                cq,
                _nic: nic,
                ready: Arc::new(Mutex::new(VecDeque::new())),
                runner: std::thread::current(),
                start: process_epoch(),
                caps,
                compute_node,
                thread,
                seed,
            }),
        })
    }

    /// A client (coroutine) of this thread.
    pub fn client(&self, client: u32, coroutine: u32) -> RdmaClient {
        let identity = ClientIdentity { client, node: self.shared.compute_node, thread: self.shared.thread, coroutine };
        let rng = ChaCha8Rng::seed_from_u64(self.shared.seed ^ (client as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        RdmaClient { shared: self.shared.clone(), identity, rng: Rc::new(RefCell::new(rng)) }
    }

    /// Starts `fut` on this thread.
    pub fn spawn(&self, fut: impl Future<Output = ()> + 'static) {
        let mut tasks = self.shared.tasks.borrow_mut();
        tasks.push(Some(Box::pin(fut)));
        let id = tasks.len() - 1;
        self.shared.ready.lock().unwrap_or_else(|e| e.into_inner()).push_back(id);
    }

    /// Runs every spawned task to its end, polling completions and timers in between.
    pub fn run(&self) -> Result<(), VerbsError> {
        self.run_inner(None)
    }

    /// Runs until every spawned task has ended or `stop` is set (a service node's threads).
    /// On a stop it waits (at most a second) for the verbs in flight to complete, then drops
    /// the tasks left.
    pub fn run_until(&self, stop: &AtomicBool) -> Result<(), VerbsError> {
        self.run_inner(Some(stop))
    }

    fn run_inner(&self, stop: Option<&AtomicBool>) -> Result<(), VerbsError> {
        // Polls in a row that found nothing while verbs were in flight.
        let mut idle_polls = 0u32;
        loop {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return self.stop();
            }
            let mut progressed = false;
            loop {
                let next = self.shared.ready.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some(id) = next else { break };
                let task = self.shared.tasks.borrow_mut().get_mut(id).and_then(|t| t.take());
                let Some(mut task) = task else { continue };
                let waker = Waker::from(Arc::new(TaskWaker {
                    id,
                    ready: self.shared.ready.clone(),
                    runner: self.shared.runner.clone(),
                }));
                if task.as_mut().poll(&mut Context::from_waker(&waker)).is_pending() {
                    self.shared.tasks.borrow_mut()[id] = Some(task);
                }
                progressed = true;
            }
            if self.shared.tasks.borrow().iter().all(|t| t.is_none()) {
                return Ok(());
            }
            progressed |= self.shared.poll_completions()? > 0;
            progressed |= self.shared.fire_timers();
            if progressed {
                idle_polls = 0;
            } else if self.shared.in_flight() {
                idle_polls = idle_polls.saturating_add(1);
                if idle_polls < SPINS_BEFORE_YIELD {
                    std::hint::spin_loop();
                } else {
                    // A long wait (a deferred reply, a busy node): give the core to another
                    // thread if one is ready, as a server's RPC threads and workers need on a
                    // machine with fewer cores than threads.
                    std::thread::yield_now();
                }
            } else {
                // Nothing can complete: sleep until a waker or the next timer.
                std::thread::park_timeout(self.shared.until_next_timer().min(MAX_PARK));
            }
        }
    }

    /// A stop: lets the verbs in flight complete (their buffers are the NIC's until then),
    /// then drops the tasks.
    fn stop(&self) -> Result<(), VerbsError> {
        let deadline = Instant::now() + DRAIN;
        while self.shared.in_flight() && Instant::now() < deadline {
            if self.shared.poll_completions()? == 0 {
                std::hint::spin_loop();
            }
        }
        let tasks = std::mem::take(&mut *self.shared.tasks.borrow_mut());
        drop(tasks);
        Ok(())
    }

    /// Runs `fut` (and everything spawned) to the end and returns its output.
    pub fn block_on<T: 'static>(&self, fut: impl Future<Output = T> + 'static) -> Result<T, VerbsError> {
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        self.spawn(async move {
            *o.borrow_mut() = Some(fut.await);
        });
        self.run()?;
        let v = out.borrow_mut().take();
        v.ok_or_else(|| VerbsError::Protocol("the task did not finish".into()))
    }
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Whether a completion is due: a signalled batch or a call in flight.
    fn in_flight(&self) -> bool {
        self.state.borrow().links.values().any(Link::busy)
    }

    /// Time until the earliest timer (a long time if there is none).
    fn until_next_timer(&self) -> std::time::Duration {
        let next = self.state.borrow().timers.peek().map(|std::cmp::Reverse((at, _))| *at);
        match next {
            Some(at) => std::time::Duration::from_nanos(at.saturating_sub(self.now_ns())),
            None => MAX_PARK,
        }
    }

    /// Makes sure this thread has a queue pair to `node`, dialling it if the executor has a
    /// connector.
    fn ensure_link(&self, node: NodeId) -> Result<(), VerbsError> {
        if self.state.borrow().links.contains_key(&node.0) {
            return Ok(());
        }
        let (conn, control) = {
            let mut connector = self.connector.borrow_mut();
            let connect = connector.as_mut().ok_or(VerbsError::NoSuchNode(node))?;
            connect(node, &self.cq)?
        };
        if conn.node != node {
            return Err(VerbsError::Protocol(format!("dialled {node}, connected to {}", conn.node)));
        }
        let mut st = self.state.borrow_mut();
        let block = (CALL_CREDITS * CALL_MESSAGE_BYTES) as u64;
        let base = st.arena.alloc(block).ok_or_else(|| {
            VerbsError::Protocol(format!("the staging arena has no room for the call buffers of a link to {node}"))
        })?;
        let mut qp = conn.qp;
        let mut recv_buffers = Vec::new();
        let staging = self.staging.borrow();
        for r in 0..CALL_CREDITS as u64 {
            let at = base + r * CALL_MESSAGE_BYTES as u64;
            qp.post_recv(wr_id(node.0, KIND_CALL_RECV, r), &staging, at, CALL_MESSAGE_BYTES, self.mr.lkey())?;
            recv_buffers.push(at);
        }
        st.links.insert(node.0, Link::new(qp, conn.regions, recv_buffers));
        st.controls.push(control);
        Ok(())
    }

    fn fire_timers(&self) -> bool {
        let now = self.now_ns();
        let mut st = self.state.borrow_mut();
        let mut fired = false;
        while let Some(std::cmp::Reverse((at, id))) = st.timers.peek().copied() {
            if at > now {
                break;
            }
            st.timers.pop();
            if let Some(w) = st.timer_wakers.remove(&id) {
                w.wake();
            }
            fired = true;
        }
        fired
    }

    /// Dispatches every available completion; returns how many there were.
    fn poll_completions(&self) -> Result<usize, VerbsError> {
        let mut got = Vec::new();
        let n = self.cq.poll(|c| got.push(c))?;
        for c in got {
            self.complete(c)?;
        }
        Ok(n)
    }

    fn complete(&self, c: Completion) -> Result<(), VerbsError> {
        let (node, kind, seq) = split_wr_id(c.wr_id);
        let mut st = self.state.borrow_mut();
        let st = &mut *st;
        let Some(link) = st.links.get_mut(&node) else {
            return Err(VerbsError::Protocol(format!("a completion for unknown node {node}")));
        };
        match kind {
            KIND_BATCH => {
                // RC completes in order: everything up to `seq` is done.
                link.done = link.done.max(seq + 1);
                link.unsignaled_wrs = 0;
                for (_, s) in link.unsignaled_staging.drain(..) {
                    st.arena.release(s.0, s.1);
                }
                let pending = link.pending.remove(&seq);
                if let Some(p) = pending {
                    let result = if c.status != 0 {
                        Err(failed_completion(&c))
                    } else {
                        let staging = self.staging.borrow();
                        Ok(p.outputs
                            .iter()
                            .map(|&(i, at, len)| (i as u64, staging.read_at(at as usize, len)))
                            .collect())
                    };
                    st.arena.release(p.staging.0, p.staging.1);
                    if let Some(slot) = p.slot {
                        Slot::fill(&slot, result);
                    }
                } else if c.status != 0 {
                    // An unsignaled request failed: the queue pair is in error; every later
                    // batch fails too, and says so.
                    return Err(failed_completion(&c));
                }
                // Room in the send queue: post what waited.
                while let Some(q) = link.backlog.front() {
                    if link.next_seq - link.done + q.wrs.len() as u64 > SEND_QUEUE_DEPTH as u64 {
                        break;
                    }
                    let q = link.backlog.pop_front().expect("front");
                    post_now(link, node, q, &self.staging.borrow(), self.mr.lkey())?;
                }
            }
            KIND_CALL_SEND => {
                // The request's bytes were in a staging slice: `seq` names it.
                let len = CALL_MESSAGE_BYTES as u64;
                st.arena.release(seq, len);
                if c.status != 0 {
                    return Err(failed_completion(&c));
                }
            }
            KIND_CALL_RECV => {
                let at = link.recv_buffers[seq as usize];
                let result = if c.status != 0 {
                    Err(failed_completion(&c))
                } else {
                    Ok(self.staging.borrow().read_at(at as usize, c.byte_len as usize))
                };
                // Post the receive again before anyone can send into it.
                link.qp.post_recv(c.wr_id, &self.staging.borrow(), at, CALL_MESSAGE_BYTES, self.mr.lkey())?;
                let bytes = result?;
                let (id, status, body) = decode_response(&bytes)?;
                link.credits += 1;
                if let Some(slot) = link.calls.remove(&id) {
                    Slot::fill(&slot, Ok(vec![(status as u64, body.to_vec())]));
                }
                post_calls(link, node, &mut st.arena, &mut self.staging.borrow_mut(), self.mr.lkey());
            }
            _ => return Err(VerbsError::Protocol(format!("a completion of unknown kind {kind}"))),
        }
        Ok(())
    }
}

/// Posts a queued batch on `link` (room checked by the caller).
fn post_now(link: &mut Link, node: u16, q: Queued, staging: &Region, lkey: u32) -> Result<(), VerbsError> {
    let first = link.next_seq;
    link.next_seq += q.wrs.len() as u64;
    let last = link.next_seq - 1;
    let wrs: Vec<WorkRequest> = q.wrs;
    // The qp names work requests by wr_id; the plan's sequence numbers become ids of this node.
    let ids_first = wr_id(node, KIND_BATCH, first);
    link.qp.post_planned(&wrs, ids_first, staging, q.staging_offset, lkey)?;
    match q.pending {
        Some(p) => {
            link.pending.insert(last, p);
        }
        None => {
            link.unsignaled_wrs += wrs.len() as u32;
        }
    }
    Ok(())
}

/// Posts `link`'s waiting calls, oldest first, while it has credits. A call that cannot be
/// posted (no staging room, a failed post) gets its error in its slot.
fn post_calls(link: &mut Link, node: u16, arena: &mut Arena, staging: &mut Region, lkey: u32) {
    while link.credits > 0 {
        let Some(msg) = link.call_backlog.pop_front() else { return };
        let id = u64::from_le_bytes(msg[..8].try_into().expect("a call message starts with its id"));
        let posted = match arena.alloc(CALL_MESSAGE_BYTES as u64) {
            None => Err(VerbsError::Protocol("the staging arena is full: too many calls in flight".into())),
            Some(at) => {
                staging.write_at(at as usize, &msg);
                let sent =
                    link.qp.post_send(wr_id(node, KIND_CALL_SEND, at), staging, at, msg.len() as u32, lkey, true);
                if sent.is_err() {
                    arena.release(at, CALL_MESSAGE_BYTES as u64);
                }
                sent
            }
        };
        match posted {
            Ok(()) => link.credits -= 1,
            Err(e) => {
                if let Some(slot) = link.calls.remove(&id) {
                    Slot::fill(&slot, Err(e));
                }
            }
        }
    }
}

/// A future that resolves when its slot is filled.
struct Wait(Rc<RefCell<Slot>>);

impl Future for Wait {
    type Output = Outputs;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.0.borrow_mut();
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// One coroutine of a thread: [`Verbs`] and [`ClientCtx`] over the thread's queue pairs.
#[derive(Clone)]
pub struct RdmaClient {
    shared: Rc<Shared>,
    identity: ClientIdentity,
    rng: Rc<RefCell<ChaCha8Rng>>,
}

impl std::fmt::Debug for RdmaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaClient").field("identity", &self.identity).finish()
    }
}

impl RdmaClient {
    /// Posts the work requests of one part (all but masked atomics) now, or queues them if the
    /// send queue is full. Returns the slot the results land in (signalled parts).
    fn post_part(
        &self,
        requests: &[Request],
        wrs: Vec<WorkRequest>,
        signaled: bool,
    ) -> Result<Option<Rc<RefCell<Slot>>>, VerbsError> {
        let node = requests[wrs[0].index].addr.node().0;
        let bytes: u64 = wrs.iter().map(|w| w.len.div_ceil(8) as u64 * 8).sum::<u64>().max(8);
        let mut st = self.shared.state.borrow_mut();
        let st = &mut *st;
        let at = st.arena.alloc(bytes).ok_or_else(|| {
            VerbsError::Protocol(format!(
                "the staging arena is full ({bytes} bytes wanted): too many batches in flight"
            ))
        })?;
        // The plan's offsets start at 0 for this part's first request.
        let base = wrs[0].local_offset;
        {
            let mut staging = self.shared.staging.borrow_mut();
            for w in &wrs {
                if let Op::Write(b) = &requests[w.index].op {
                    staging.write_at((at + w.local_offset - base) as usize, b.as_slice());
                }
            }
        }
        let link = st.links.get_mut(&node).ok_or(VerbsError::NoSuchNode(NodeId(node)))?;
        let mut wrs = wrs;
        for w in &mut wrs {
            w.local_offset -= base;
        }
        // Keep unsignaled work requests to half the queue: past that, signal this batch.
        let signal = signaled || link.unsignaled_wrs + wrs.len() as u32 > SEND_QUEUE_DEPTH / 2;
        if signal {
            wrs.last_mut().expect("non-empty").signaled = true;
        }
        let slot = signaled.then(|| Rc::new(RefCell::new(Slot::default())));
        let pending = signal.then(|| Pending {
            staging: (at, bytes),
            outputs: wrs
                .iter()
                .filter(|w| !matches!(requests[w.index].op, Op::Write(_)))
                .map(|w| {
                    (
                        w.index,
                        at + w.local_offset,
                        if matches!(requests[w.index].op, Op::Read(_)) { w.len as usize } else { 8 },
                    )
                })
                .collect(),
            slot: slot.clone(),
        });
        if !signal {
            link.unsignaled_staging.push((link.next_seq + wrs.len() as u64, (at, bytes)));
        }
        let q = Queued { wrs, staging_offset: at, pending };
        if link.backlog.is_empty() && link.next_seq - link.done + q.wrs.len() as u64 <= SEND_QUEUE_DEPTH as u64 {
            post_now(link, node, q, &self.shared.staging.borrow(), self.shared.mr.lkey())?;
        } else {
            link.backlog.push_back(q);
        }
        Ok(slot)
    }

    /// A call's first half, at call time: dials the node if need be, queues the request
    /// behind the link's earlier calls and posts what the credits allow. Returns the slot its
    /// response lands in.
    fn start_call(&self, node: NodeId, service: u16, request: Vec<u8>) -> Result<Rc<RefCell<Slot>>, VerbsError> {
        if request.len() > MAX_CALL_PAYLOAD {
            return Err(VerbsError::Protocol(format!(
                "a call request of {} bytes: the real backend's calls carry at most {MAX_CALL_PAYLOAD} bytes",
                request.len(),
            )));
        }
        self.shared.ensure_link(node)?;
        let mut st = self.shared.state.borrow_mut();
        let st = &mut *st;
        let id = st.next_call;
        st.next_call += 1;
        let link = st.links.get_mut(&node.0).ok_or(VerbsError::NoSuchNode(node))?;
        let msg = encode_request(id, service, &request);
        let slot = Rc::new(RefCell::new(Slot::default()));
        link.calls.insert(id, slot.clone());
        link.call_backlog.push_back(msg);
        post_calls(link, node.0, &mut st.arena, &mut self.shared.staging.borrow_mut(), self.shared.mr.lkey());
        Ok(slot)
    }
}

impl Verbs for RdmaClient {
    fn caps(&self) -> &Caps {
        &self.shared.caps
    }

    fn post(&self, requests: Vec<Request>) -> impl Future<Output = Result<Vec<Response>, VerbsError>> {
        // Plan and post the first part now; later parts (after an emulated masked atomic) in
        // order, as the future runs. A batch that starts with a masked atomic starts its
        // emulation's READ when the future is first polled.
        let prepared = (|| {
            let regions = regions_of(&self.shared, &requests)?;
            let mut parts = plan_batch(&requests, &regions, &self.shared.caps, true)?.parts;
            let first = match parts.first() {
                Some(Part::Post(_)) => match parts.remove(0) {
                    Part::Post(wrs) => self.post_part(&requests, wrs, true)?,
                    Part::Emulate(_) => None,
                },
                _ => None,
            };
            Ok::<_, VerbsError>((first, parts))
        })();
        let this = self.clone();
        async move {
            let (first, parts) = prepared?;
            let mut olds: HashMap<u64, Vec<u8>> = HashMap::new();
            if let Some(slot) = first {
                for (i, bytes) in Wait(slot).await? {
                    olds.insert(i, bytes);
                }
            }
            for part in parts {
                match part {
                    Part::Post(wrs) => {
                        if let Some(slot) = this.post_part(&requests, wrs, true)? {
                            for (i, bytes) in Wait(slot).await? {
                                olds.insert(i, bytes);
                            }
                        }
                    }
                    Part::Emulate(i) => {
                        let r = &requests[i];
                        // Boxed: the emulation posts through this very method.
                        let emulation: Pin<Box<dyn Future<Output = Result<u64, VerbsError>>>> = match r.op {
                            Op::MaskedCas { compare, compare_mask, swap, swap_mask } => {
                                Box::pin(emulate::masked_cas(&this, r.addr, compare, compare_mask, swap, swap_mask))
                            }
                            Op::MaskedFaa { add, boundary_mask } => {
                                Box::pin(emulate::masked_faa(&this, r.addr, add, boundary_mask))
                            }
                            _ => unreachable!("only masked atomics are emulated"),
                        };
                        let old = emulation.await?;
                        olds.insert(i as u64, old.to_le_bytes().to_vec());
                    }
                }
            }
            let mut out = Vec::with_capacity(requests.len());
            for (i, r) in requests.into_iter().enumerate() {
                let got = olds.remove(&(i as u64));
                out.push(match (r.op, got) {
                    (Op::Write(b), _) => Response::Write(b),
                    (Op::Read(_), Some(bytes)) => Response::Read(Buf::from(bytes)),
                    (_, Some(bytes)) => Response::Atomic(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))),
                    (_, None) => return Err(VerbsError::Protocol(format!("no result for request {i}"))),
                });
            }
            Ok(out)
        }
    }

    fn post_unsignaled(&self, requests: Vec<Request>) -> Result<(), VerbsError> {
        let regions = regions_of(&self.shared, &requests)?;
        let plan = plan_batch(&requests, &regions, &self.shared.caps, false)?;
        for part in plan.parts {
            if let Part::Post(wrs) = part {
                self.post_part(&requests, wrs, false)?;
            }
        }
        Ok(())
    }

    fn call(&self, node: NodeId, service: u16, request: Vec<u8>) -> impl Future<Output = Result<Vec<u8>, VerbsError>> {
        // Posted (or queued for a credit) now: a call whose future is dropped still happens.
        let started = self.start_call(node, service, request);
        async move {
            let mut got = Wait(started?).await?;
            let (status, body) = got.pop().ok_or_else(|| VerbsError::Protocol("an empty call response".into()))?;
            match status {
                0 => Ok(body),
                1 => Err(VerbsError::UnknownService { node, service }),
                _ => Err(VerbsError::Protocol(String::from_utf8_lossy(&body).into_owned())),
            }
        }
    }
}

/// The regions of the node a batch's first request targets; [`plan_batch`] checks the rest of
/// the batch's shape.
fn regions_of(shared: &Shared, requests: &[Request]) -> Result<NodeRegions, VerbsError> {
    let node = requests.first().ok_or(VerbsError::EmptyBatch)?.addr.node();
    shared.ensure_link(node)?;
    shared.state.borrow().links.get(&node.0).map(|l| l.regions).ok_or(VerbsError::NoSuchNode(node))
}

impl ClientCtx for RdmaClient {
    fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    fn sleep(&self, ns: u64) -> impl Future<Output = ()> {
        let shared = self.shared.clone();
        let deadline = shared.now_ns() + ns;
        let mut id = None;
        std::future::poll_fn(move |cx| {
            if shared.now_ns() >= deadline {
                return Poll::Ready(());
            }
            let mut st = shared.state.borrow_mut();
            let me = *id.get_or_insert_with(|| {
                let i = st.next_timer;
                st.next_timer += 1;
                st.timers.push(std::cmp::Reverse((deadline, i)));
                i
            });
            st.timer_wakers.insert(me, cx.waker().clone());
            Poll::Pending
        })
    }

    fn yield_now(&self) -> impl Future<Output = ()> {
        let mut yielded = false;
        std::future::poll_fn(move |cx| {
            if yielded {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
    }

    fn with_rng<R>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R {
        f(&mut self.rng.borrow_mut())
    }

    /// The CPU really does the work on hardware: nothing to charge.
    fn charge_cpu(&self, _work: CpuWork, _units: u64) -> impl Future<Output = ()> {
        std::future::ready(())
    }

    fn identity(&self) -> ClientIdentity {
        self.identity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_reuses_and_merges_ranges() {
        let mut a = Arena::new(0, 1024);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(64).unwrap();
        assert_eq!((x, y), (0, 128));
        assert!(a.alloc(1024).is_none());
        a.release(x, 100);
        a.release(y, 64);
        assert_eq!(a.free, BTreeMap::from([(0, 1024)]), "freed neighbours merge");
        assert_eq!(a.alloc(1024), Some(0));
    }

    #[test]
    fn wr_ids_round_trip() {
        for (n, k, s) in [(0u16, KIND_BATCH, 0u64), (65535, KIND_CALL_RECV, (1 << 46) - 1), (7, KIND_CALL_SEND, 12345)]
        {
            assert_eq!(split_wr_id(wr_id(n, k, s)), (n, k, s));
        }
    }
}

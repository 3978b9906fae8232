//! A service node on hardware (feature `connectx`): the host that runs the service API
//! ([`crate::service`]) of a memory node (the chunk allocator) or a server node (HStore's
//! servers), as the simulator runs it.
//!
//! - **Memory.** The node registers its memory ([`NodeMemory`]; on 2 MiB huge pages with
//!   [`HostConfig::hugepages`]) for peers' READs, WRITEs and atomics, and its handlers and
//!   workers reach it through [`LocalMemory`]: 8-byte atomic CPU accesses in ascending order,
//!   CAS and FAA as CPU atomics on the mapped words (atomic with respect to each other, not to
//!   the NIC's RMWs: RDMA^TSO_RMW).
//! - **Device memory.** Where the NIC has some ([`super::device::DeviceCaps::max_dm_bytes`]),
//!   the node allocates all of it ([`DeviceMemory`], zeroed, registered zero-based) and serves
//!   it as region 1 of its addresses: the welcome carries its rkey and size, and peers' verbs
//!   to region 1 use that rkey. If it cannot be allocated (another process holds it), the node
//!   says so and serves host memory only; peers then see 0 bytes of device memory, and every
//!   region-1 verb to the node is out of range, as in the simulator without device memory.
//!   The node's own threads do not reach it locally ([`LocalMemory`] is host memory).
//!   Untested without ConnectX hardware: Soft-RoCE has none.
//! - **The dispatcher** (the thread that calls [`ServiceNode::serve`]) admits peers on the
//!   control channel ([`super::wire`]: the cluster's token, one queue pair per peer thread,
//!   [`CALL_CREDITS`] receives posted on each), polls the one receive completion queue of all
//!   those queue pairs, posts each receive again at once (which is what lets the peer's credit
//!   come back with the reply) and queues the request for the RPC threads. A call to a service
//!   the node does not run is answered at once with "unknown service".
//! - **RPC threads** (a configurable count): each an OS thread with its own [`Executor`],
//!   taking one request at a time and running [`Service::dispatch`] on it; `Some(reply)` is
//!   sent at once, `None` leaves the call waiting for [`Replier::reply`] and frees the thread.
//! - **Workers**: [`Service::workers`] OS threads per service, each with its own executor,
//!   running [`Service::run_worker`].
//! - **Replies** go from whichever thread answers: the call's record (its connection and the
//!   caller's call id) is looked up and removed under a lock, the reply is copied into one of
//!   the connection's `2 x CALL_CREDITS` send buffers and SENT on that connection. Send
//!   completions (on a completion queue of their own) give buffers back; a replier that finds
//!   none free reaps them itself. A reply longer than [`MAX_CALL_PAYLOAD`] (4 KiB) reaches the
//!   caller as an error saying so, and the replier gets the same error.
//! - **Handlers and workers are clients** ([`ServerClient`]): their executors dial the peers
//!   named in [`HostConfig::peers`] the first time a verb or call names one.
//!
//! Nothing here restarts: a crashed node is a process that exited, and its callers' verbs fail
//! at the transport (the simulator's crash-restart has no hardware counterpart yet).

#![allow(unsafe_code)]

use super::device::{Completion, Cq, DeviceMemory, MemoryRegistration, Nic, RcQp, Region, failed_completion};
use super::node::{Barriers, dial_reporting, serve_control};
use super::plan::RemoteRegion;
use super::runtime::{
    CALL_CREDITS, CALL_MESSAGE_BYTES, Connector, Executor, MAX_CALL_PAYLOAD, RdmaClient, decode_request,
    encode_response,
};
use super::wire::{self, Message};
use crate::alloc::{AllocRequest, AllocResponse, ChunkAllocator, ReuseMode};
use crate::service::{LocalMemory, Replier, Responder, ServerCtx, Service, ServiceHost};
use crate::sync::Queue;
use crate::sync::lock;
use crate::{
    Buf, Caps, ChaCha8Rng, ClientCtx, ClientIdentity, CpuWork, NodeId, RemoteAddr, Request, Response, Verbs, VerbsError,
};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Queue pairs a node admits in all (its completion queues are sized for them).
pub const MAX_CONNECTIONS: usize = 256;
/// Send buffers per admitted queue pair: replies in flight at once on it.
const SEND_SLOTS: u32 = 2 * CALL_CREDITS;
/// Entries of each of the node's two completion queues (receives, reply sends): room for every
/// admitted queue pair's outstanding work.
const NODE_CQ_ENTRIES: u32 = 8192;
/// Entries of each service thread's completion queue.
const THREAD_CQ_ENTRIES: u32 = 8192;
/// How long a reply waits for a free send buffer before it reports the connection stuck.
const SEND_SLOT_WAIT: Duration = Duration::from_secs(5);

const STATUS_OK: u8 = 0;
const STATUS_UNKNOWN_SERVICE: u8 = 1;
const STATUS_ERROR: u8 = 2;

// ------------------------------------------------------------------------------------ memory

/// A node's registered host memory: peers reach it with verbs, the node's own threads with
/// 8-byte atomic CPU accesses ([`LocalMemory`]).
pub struct NodeMemory {
    node: NodeId,
    len: u64,
    rkey: u32,
    // Declared before `region`: deregistered before the memory is freed. (None only in the
    // device-free unit tests.)
    _mr: Option<Arc<MemoryRegistration>>,
    region: Region,
}

// SAFETY: once built, the region's bytes are never reached through a Rust reference: every CPU
// access goes through `AtomicU64` views of aligned words (`word`), which any number of threads
// may use at once. The NIC's DMA is outside the Rust memory model; how it interleaves with the
// CPU's atomic words is RDMA's memory model, which `LocalMemory` documents.
unsafe impl Sync for NodeMemory {}

impl std::fmt::Debug for NodeMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMemory").field("node", &self.node).field("len", &self.len).finish()
    }
}

impl NodeMemory {
    /// Allocates `bytes` zeroed bytes (rounded up to whole pages, so every 8-byte word of the
    /// range is inside the allocation; with `hugepages`, whole 2 MiB huge pages,
    /// [`Region::huge`]) and registers them for remote access.
    pub fn new(nic: &Nic, node: NodeId, bytes: u64, hugepages: bool) -> Result<NodeMemory, VerbsError> {
        let mut memory = if hugepages {
            let alloc = usize::try_from(bytes)
                .map_err(|_| VerbsError::Protocol(format!("cannot allocate {bytes} bytes of node memory")))?;
            NodeMemory { node, len: bytes, rkey: 0, _mr: None, region: Region::huge(alloc)? }
        } else {
            NodeMemory::unregistered(node, bytes)?
        };
        let mr = nic.register(&memory.region, true)?;
        memory.rkey = mr.rkey();
        memory._mr = Some(mr);
        Ok(memory)
    }

    fn unregistered(node: NodeId, bytes: u64) -> Result<NodeMemory, VerbsError> {
        let rounded = bytes.checked_next_multiple_of(4096).filter(|&b| b > 0);
        let alloc = rounded
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| VerbsError::Protocol(format!("cannot allocate {bytes} bytes of node memory")))?;
        let region = Region::new(alloc)?;
        Ok(NodeMemory { node, len: bytes, rkey: 0, _mr: None, region })
    }

    /// Bytes the node offers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the memory is on huge pages.
    pub fn is_huge(&self) -> bool {
        self.region.is_huge()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region as a peer addresses it (the handshake's welcome).
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion { addr: self.region.addr(), rkey: self.rkey, len: self.len }
    }

    /// The errors a local access gets, as the simulator gives them.
    fn check(&self, offset: u64, len: u64, rmw: bool) -> Result<(), VerbsError> {
        if offset >= RemoteAddr::OFFSET_LIMIT {
            return Err(VerbsError::OutOfRange { addr: RemoteAddr::host(self.node, 0), len: offset });
        }
        let addr = RemoteAddr::host(self.node, offset);
        if len == 0 {
            return Err(VerbsError::InvalidLength { addr, len });
        }
        if rmw && offset % 8 != 0 {
            return Err(VerbsError::Unaligned { addr });
        }
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(VerbsError::OutOfRange { addr, len });
        }
        Ok(())
    }

    /// The aligned word at `at` (callers checked that it starts inside the range; the whole word
    /// is inside the page-rounded allocation).
    fn word(&self, at: u64) -> &AtomicU64 {
        assert!(at % 8 == 0 && at < self.len, "word {at} outside the node memory");
        // SAFETY: `at` is 8-byte aligned and below `len`, and the allocation is page-aligned and
        // a whole number of pages covering `len`, so the 8 bytes are inside it and aligned for a
        // u64. The allocation lives (and never moves) as long as `self`, which the returned
        // reference borrows. Every CPU access to the region is atomic (see the `Sync` impl).
        unsafe { AtomicU64::from_ptr((self.region.addr() + at) as *mut u64) }
    }

    /// Reads `len` bytes at `offset`: 8-byte atomic loads in ascending order.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, VerbsError> {
        self.check(offset, len as u64, false)?;
        let end = offset + len as u64;
        let mut out = Vec::with_capacity(len);
        let mut w = offset & !7;
        while w < end {
            let bytes = self.word(w).load(Ordering::SeqCst).to_le_bytes();
            let from = offset.saturating_sub(w) as usize;
            let to = (end - w).min(8) as usize;
            out.extend_from_slice(&bytes[from..to]);
            w += 8;
        }
        Ok(out)
    }

    /// Writes `data` at `offset`: 8-byte atomic stores in ascending order; a word the range
    /// covers only in part is merged with a CAS loop, so a concurrent local access to its other
    /// bytes is not lost.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VerbsError> {
        self.check(offset, data.len() as u64, false)?;
        let end = offset + data.len() as u64;
        let mut w = offset & !7;
        while w < end {
            let (from, to) = (offset.max(w), end.min(w + 8));
            let src = &data[(from - offset) as usize..(to - offset) as usize];
            let word = self.word(w);
            if from == w && to == w + 8 {
                word.store(u64::from_le_bytes(src.try_into().expect("8 bytes")), Ordering::SeqCst);
            } else {
                let (a, b) = ((from - w) as usize, (to - w) as usize);
                let merged = word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |old| {
                    let mut bytes = old.to_le_bytes();
                    bytes[a..b].copy_from_slice(src);
                    Some(u64::from_le_bytes(bytes))
                });
                debug_assert!(merged.is_ok(), "the merge always proposes a word");
            }
            w += 8;
        }
        Ok(())
    }

    /// CPU compare-and-swap of the word at `offset`; returns the old word.
    pub fn cas(&self, offset: u64, expect: u64, swap: u64) -> Result<u64, VerbsError> {
        self.check(offset, 8, true)?;
        Ok(match self.word(offset).compare_exchange(expect, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(old) | Err(old) => old,
        })
    }

    /// CPU fetch-and-add (wrapping) of the word at `offset`; returns the old word.
    pub fn faa(&self, offset: u64, add: u64) -> Result<u64, VerbsError> {
        self.check(offset, 8, true)?;
        Ok(self.word(offset).fetch_add(add, Ordering::SeqCst))
    }
}

// ------------------------------------------------------------------------------- the context

/// What a hardware service's handlers and workers run with ([`ServerCtx`]): a client of its
/// thread's executor ([`Verbs`], [`ClientCtx`]), the node's memory ([`LocalMemory`]) and its
/// replies ([`Replier`]).
#[derive(Clone)]
pub struct ServerClient {
    client: RdmaClient,
    node: Arc<NodeShared>,
}

impl std::fmt::Debug for ServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClient").field("client", &self.client).finish()
    }
}

impl Verbs for ServerClient {
    fn caps(&self) -> &Caps {
        self.client.caps()
    }
    fn post(&self, requests: Vec<Request>) -> impl Future<Output = Result<Vec<Response>, VerbsError>> {
        self.client.post(requests)
    }
    fn post_unsignaled(&self, requests: Vec<Request>) -> Result<(), VerbsError> {
        self.client.post_unsignaled(requests)
    }
    fn call(&self, node: NodeId, service: u16, request: Vec<u8>) -> impl Future<Output = Result<Vec<u8>, VerbsError>> {
        self.client.call(node, service, request)
    }
}

impl ClientCtx for ServerClient {
    fn now_ns(&self) -> u64 {
        self.client.now_ns()
    }
    fn sleep(&self, ns: u64) -> impl Future<Output = ()> {
        self.client.sleep(ns)
    }
    fn yield_now(&self) -> impl Future<Output = ()> {
        self.client.yield_now()
    }
    fn with_rng<R>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R {
        self.client.with_rng(f)
    }
    fn charge_cpu(&self, work: CpuWork, units: u64) -> impl Future<Output = ()> {
        self.client.charge_cpu(work, units)
    }
    fn identity(&self) -> ClientIdentity {
        self.client.identity()
    }
}

impl LocalMemory for ServerClient {
    fn local_read(&self, offset: u64, len: usize) -> impl Future<Output = Result<Buf, VerbsError>> {
        std::future::ready(self.node.memory.read(offset, len).map(Buf::from))
    }
    fn local_write(&self, offset: u64, data: Buf) -> impl Future<Output = Result<(), VerbsError>> {
        std::future::ready(self.node.memory.write(offset, data.as_slice()))
    }
    fn local_cas(&self, offset: u64, expect: u64, swap: u64) -> impl Future<Output = Result<u64, VerbsError>> {
        std::future::ready(self.node.memory.cas(offset, expect, swap))
    }
    fn local_faa(&self, offset: u64, add: u64) -> impl Future<Output = Result<u64, VerbsError>> {
        std::future::ready(self.node.memory.faa(offset, add))
    }
}

impl Replier for ServerClient {
    fn reply(&self, to: Responder, response: Vec<u8>) -> Result<(), VerbsError> {
        self.node.reply(to, response)
    }
}

// ------------------------------------------------------------------------- the node's state

/// A call the node received and has not answered: where its reply goes.
#[derive(Clone, Copy, Debug)]
struct PendingCall {
    conn: u32,
    /// The caller's id of the call (its response names it).
    call_id: u64,
}

/// The sending side of one admitted queue pair. Fields drop in order: the queue pair, then the
/// registration, then the buffers.
struct Tx {
    qp: RcQp,
    send_mr: Arc<MemoryRegistration>,
    send: Region,
    /// Send buffers not in flight.
    free: Vec<u32>,
}

struct Inbound {
    tx: Mutex<Tx>,
}

/// The receiving side of one admitted queue pair: the dispatcher's alone.
struct RecvSide {
    mr: Arc<MemoryRegistration>,
    recv: Region,
}

/// The dispatcher's view of its peers. A peer's queue pairs live as long as its control
/// connection: when that closes (the peer said bye, exited or crashed), they are retired, and
/// freed once no replier holds them, queue pair first and its buffers after.
struct Peers {
    /// Receive sides by connection index (`None`: retired).
    recv: Vec<Option<RecvSide>>,
    live: usize,
    /// Retired connections waiting for their last replier.
    retired: Vec<(Arc<Inbound>, RecvSide)>,
    /// Control threads report the connection indices of a peer whose control connection closed.
    closed_tx: std::sync::mpsc::Sender<Vec<u32>>,
    closed_rx: std::sync::mpsc::Receiver<Vec<u32>>,
}

impl Peers {
    fn new() -> Peers {
        let (closed_tx, closed_rx) = std::sync::mpsc::channel();
        Peers { recv: Vec::new(), live: 0, retired: Vec::new(), closed_tx, closed_rx }
    }

    /// Retires the connections of peers that left, and frees those no replier holds.
    fn retire(&mut self, shared: &NodeShared) -> bool {
        let mut any = false;
        while let Ok(closed) = self.closed_rx.try_recv() {
            let mut conns = shared.conns.write().unwrap_or_else(|e| e.into_inner());
            for conn in closed {
                let i = conn as usize;
                if let (Some(inbound), Some(side)) = (conns[i].take(), self.recv[i].take()) {
                    self.retired.push((inbound, side));
                    self.live -= 1;
                    any = true;
                }
            }
        }
        // The queue pair (in the `Inbound`) goes before the receive buffers it points into.
        self.retired.retain(|(inbound, _)| Arc::strong_count(inbound) > 1);
        any
    }
}

/// What every thread of the node shares.
struct NodeShared {
    node: NodeId,
    name: String,
    memory: Arc<NodeMemory>,
    calls: Mutex<HashMap<u64, PendingCall>>,
    /// Admitted queue pairs by index (`None` once their peer left; indices are never reused).
    conns: RwLock<Vec<Option<Arc<Inbound>>>>,
    send_cq: Cq,
    /// One thread polls the send completion queue at a time.
    reap_lock: Mutex<()>,
}

fn send_id(conn: u32, slot: u32) -> u64 {
    (conn as u64) << 32 | slot as u64
}

fn split_id(id: u64) -> (u32, u32) {
    ((id >> 32) as u32, id as u32)
}

/// Why a reply cannot be sent whole.
fn too_long(len: usize) -> String {
    format!("a reply of {len} bytes: the real backend's calls carry at most {MAX_CALL_PAYLOAD} bytes")
}

impl NodeShared {
    fn reply(&self, to: Responder, response: Vec<u8>) -> Result<(), VerbsError> {
        if to.node != self.node {
            return Err(VerbsError::Protocol(format!("{} cannot answer a call {} received", self.node, to.node)));
        }
        let pending = {
            let mut calls = lock(&self.calls);
            match calls.get(&to.call) {
                Some(p) if p.call_id == to.tag => calls.remove(&to.call),
                _ => None,
            }
        };
        let p = pending.ok_or_else(|| {
            VerbsError::Protocol(format!("{}: call {} is not awaiting a reply (answered already?)", self.node, to.call))
        })?;
        if response.len() > MAX_CALL_PAYLOAD {
            // The caller learns why instead of waiting forever.
            let reason = too_long(response.len());
            self.send(p.conn, p.call_id, STATUS_ERROR, reason.as_bytes())?;
            return Err(VerbsError::Protocol(reason));
        }
        self.send(p.conn, p.call_id, STATUS_OK, &response)
    }

    /// SENDs a response on admitted queue pair `conn` from the calling thread.
    fn send(&self, conn: u32, call_id: u64, status: u8, body: &[u8]) -> Result<(), VerbsError> {
        let inbound =
            self.conns.read().unwrap_or_else(|e| e.into_inner()).get(conn as usize).cloned().flatten().ok_or_else(
                || VerbsError::Protocol(format!("{}: connection {conn} is closed (its peer left)", self.node)),
            )?;
        let msg = encode_response(call_id, status, body);
        let deadline = Instant::now() + SEND_SLOT_WAIT;
        loop {
            {
                let mut tx = lock(&inbound.tx);
                if let Some(slot) = tx.free.pop() {
                    let at = slot as u64 * CALL_MESSAGE_BYTES as u64;
                    let lkey = tx.send_mr.lkey();
                    let Tx { qp, send, free, .. } = &mut *tx;
                    send.write_at(at as usize, &msg);
                    return qp.post_send(send_id(conn, slot), send, at, msg.len() as u32, lkey, true).inspect_err(
                        |_| {
                            free.push(slot);
                        },
                    );
                }
            }
            if self.reap()? == 0 {
                if Instant::now() > deadline {
                    return Err(VerbsError::Protocol(format!(
                        "{}: connection {conn} has had no send buffer free for {SEND_SLOT_WAIT:?}",
                        self.node
                    )));
                }
                std::thread::yield_now();
            }
        }
    }

    /// Gives back the send buffers of completed replies; returns how many completions there were.
    fn reap(&self) -> Result<usize, VerbsError> {
        let mut got: Vec<Completion> = Vec::new();
        {
            let _one = lock(&self.reap_lock);
            self.send_cq.poll(|c| got.push(c))?;
        }
        if got.is_empty() {
            return Ok(0);
        }
        let conns = self.conns.read().unwrap_or_else(|e| e.into_inner());
        for c in &got {
            let (conn, slot) = split_id(c.wr_id);
            if c.status != 0 {
                // The caller went away: its queue pair is in error. Its buffer is free again.
                eprintln!("{}: a reply on connection {conn}: {}", self.name, failed_completion(c));
            }
            if let Some(Some(inbound)) = conns.get(conn as usize) {
                lock(&inbound.tx).free.push(slot);
            }
        }
        Ok(got.len())
    }
}

// ---------------------------------------------------------------------------------- services

type Dispatched = Pin<Box<dyn Future<Output = Option<Vec<u8>>>>>;
type WorkerLoop = Pin<Box<dyn Future<Output = ()>>>;

/// A service with its type erased, shared by the node's threads.
trait ErasedService: Send + Sync {
    fn dispatch(&self, ctx: ServerClient, request: Vec<u8>, responder: Responder) -> Dispatched;
    fn workers(&self) -> u32;
    fn run_worker(&self, ctx: ServerClient, index: u32) -> WorkerLoop;
}

struct Erased<S>(Arc<S>);

impl<S: Service<ServerClient>> ErasedService for Erased<S> {
    fn dispatch(&self, ctx: ServerClient, request: Vec<u8>, responder: Responder) -> Dispatched {
        Box::pin(self.0.clone().dispatch(ctx, request, responder))
    }
    fn workers(&self) -> u32 {
        self.0.workers()
    }
    fn run_worker(&self, ctx: ServerClient, index: u32) -> WorkerLoop {
        Box::pin(self.0.clone().run_worker(ctx, index))
    }
}

/// A request on its way to an RPC thread.
struct Job {
    service: u16,
    handler: Arc<dyn ErasedService>,
    request: Vec<u8>,
    responder: Responder,
}

/// The memory node's chunk allocator as a service (as the simulator runs it): offsets
/// `[reserved, size)` of the node's memory, freed blocks reused oldest first.
#[derive(Debug)]
pub struct AllocatorService {
    state: Mutex<ChunkAllocator>,
}

impl AllocatorService {
    pub fn new(node: NodeId, reserved: u64, size: u64) -> AllocatorService {
        AllocatorService { state: Mutex::new(ChunkAllocator::new(node, reserved, size, ReuseMode::Fifo)) }
    }
}

impl<C: ServerCtx> Service<C> for AllocatorService {
    async fn handle(self: Arc<Self>, _ctx: C, request: Vec<u8>) -> Vec<u8> {
        match AllocRequest::decode(&request) {
            Ok(r) => lock(&self.state).handle(r).encode(),
            Err(e) => AllocResponse::Rejected(e.to_string()).encode(),
        }
    }
}

// -------------------------------------------------------------------------------- the host

/// How a service node runs.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// This node's id (memory nodes `0..m`, server nodes from `m` on).
    pub node: NodeId,
    /// Names the node in messages ("memory node 0", "server node 2").
    pub name: String,
    /// The control channel's address.
    pub listen: SocketAddr,
    /// Registered memory.
    pub memory_bytes: u64,
    /// The cluster's token: peers must present it, and this node presents it when it dials.
    pub token: String,
    /// RPC threads (at least 1).
    pub rpc_threads: u16,
    /// Control addresses of the nodes its handlers and workers may reach (dialled on first use).
    pub peers: BTreeMap<u16, SocketAddr>,
    /// Seeds the threads' random number generators.
    pub seed: u64,
    /// Registered staging bytes of each thread's executor.
    pub staging_bytes: usize,
    /// Back the registered memory with 2 MiB huge pages ([`Region::huge`]); the node refuses
    /// to start if the kernel has too few free.
    pub hugepages: bool,
    /// Allocate and serve the NIC's device memory where it has some (region 1).
    pub device_memory: bool,
}

impl HostConfig {
    /// A node with one RPC thread, no peers, 4 MiB of staging per thread, its memory on
    /// ordinary pages, and the NIC's device memory where it has some.
    pub fn new(node: NodeId, name: &str, listen: SocketAddr, memory_bytes: u64, token: &str) -> HostConfig {
        HostConfig {
            node,
            name: name.into(),
            listen,
            memory_bytes,
            token: token.into(),
            rpc_threads: 1,
            peers: BTreeMap::new(),
            seed: 1,
            staging_bytes: 4 << 20,
            hugepages: false,
            device_memory: true,
        }
    }
}

/// What a node did before it stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeReport {
    /// Control connections admitted and refused.
    pub admitted: u32,
    pub refused: u32,
    /// Calls received (answered or not).
    pub calls: u64,
}

/// A memory or server node: its memory, its services, its threads. Install services with
/// [`ServiceHost::add_service`] (a service for another node is skipped quietly: an index
/// installs every node's services on every host), then [`ServiceNode::serve`].
pub struct ServiceNode {
    nic: Arc<Nic>,
    config: HostConfig,
    shared: Arc<NodeShared>,
    recv_cq: Cq,
    listener: TcpListener,
    services: BTreeMap<u16, Arc<dyn ErasedService>>,
    skipped: Vec<(NodeId, u16)>,
    barriers: Arc<Mutex<Barriers>>,
    report: ServeReport,
    /// The NIC's device memory, served as region 1 (`None`: the NIC has none, or it could not
    /// be allocated). Dropped after the fields above, once no queue pair of the node is left.
    device: Option<DeviceMemory>,
}

impl std::fmt::Debug for ServiceNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceNode")
            .field("config", &self.config)
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ServiceHost for ServiceNode {
    type Ctx = ServerClient;

    fn add_service<S: Service<ServerClient>>(
        &mut self,
        node: NodeId,
        id: u16,
        factory: impl Fn() -> S + 'static,
    ) -> Result<(), String> {
        if node != self.config.node {
            self.skipped.push((node, id));
            return Ok(());
        }
        if self.services.contains_key(&id) {
            return Err(format!("{node} already runs service {id}"));
        }
        self.services.insert(id, Arc::new(Erased(Arc::new(factory()))));
        Ok(())
    }
}

/// What each service thread starts from.
#[derive(Clone)]
struct ThreadKit {
    nic: Arc<Nic>,
    shared: Arc<NodeShared>,
    peers: Arc<BTreeMap<u16, SocketAddr>>,
    token: Arc<str>,
    seed: u64,
    staging_bytes: usize,
    max_inline: u32,
    stop: Arc<AtomicBool>,
    /// The first thread that died before the stop (a panic, or its executor failed): why. The
    /// node stops then, rather than leave the calls that thread would have answered waiting.
    failed: Arc<Mutex<Option<String>>>,
}

type Started = std::sync::mpsc::Sender<Result<(), String>>;

impl ThreadKit {
    /// Dials a peer for one thread: one queue pair on the thread's completion queue. A peer
    /// that cannot be reached is [`VerbsError::NodeDown`] to the service, which may try again
    /// (a service probing a peer that has not started yet): the thread says so once, not at
    /// every attempt.
    fn connector(&self) -> Connector {
        let (nic, peers, token, me) = (self.nic.clone(), self.peers.clone(), self.token.clone(), self.shared.node);
        let name = self.shared.name.clone();
        let mut unreachable = std::collections::BTreeSet::new();
        Box::new(move |peer: NodeId, cq: &Cq| {
            let addr = *peers.get(&peer.0).ok_or(VerbsError::NoSuchNode(peer))?;
            let mut report = |e: &std::io::Error| {
                if unreachable.insert(peer) {
                    let thread = std::thread::current();
                    let thread = thread.name().unwrap_or("a service thread");
                    eprintln!("{name}: {thread}: cannot reach {peer} at {addr} ({e}); dialling again at its next use");
                }
            };
            let (mut conns, control) =
                dial_reporting(&nic, std::slice::from_ref(cq), addr, peer, &token, me.0, &mut report)?;
            if unreachable.remove(&peer) {
                let thread = std::thread::current();
                eprintln!("{name}: {}: reached {peer} at {addr}", thread.name().unwrap_or("a service thread"));
            }
            let conn = conns.pop().ok_or_else(|| VerbsError::Protocol(format!("{peer} gave no queue pair")))?;
            Ok((conn, control))
        })
    }

    /// Starts an OS thread with an executor of its own that runs `body(ctx)` until it ends or
    /// the node stops; reports on `started` whether it could start.
    fn spawn(
        &self,
        thread: u32,
        label: String,
        started: Started,
        body: impl FnOnce(ServerClient) -> WorkerLoop + Send + 'static,
    ) -> Result<std::thread::JoinHandle<Result<(), VerbsError>>, VerbsError> {
        let kit = self.clone();
        let name = label.clone();
        let run = move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| kit.run(thread, started, body)));
            let outcome = outcome.unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(VerbsError::Protocol(format!("panicked: {why}")))
            });
            if let Err(e) = &outcome
                && !kit.stop.load(Ordering::SeqCst)
            {
                lock(&kit.failed).get_or_insert_with(|| format!("{name}: {e}"));
            }
            outcome
        };
        std::thread::Builder::new()
            .name(label)
            .spawn(run)
            .map_err(|e| VerbsError::Protocol(format!("cannot start a thread: {e}")))
    }

    /// A service thread's life: its executor, its client, `body` until it ends or the stop.
    fn run(
        &self,
        thread: u32,
        started: Started,
        body: impl FnOnce(ServerClient) -> WorkerLoop,
    ) -> Result<(), VerbsError> {
        let node = self.shared.node;
        let exec = (|| {
            let cq = self.nic.completion_queue(THREAD_CQ_ENTRIES)?;
            Executor::with_connector(
                self.nic.clone(),
                cq,
                node,
                thread,
                self.seed ^ (thread as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                self.staging_bytes,
                self.connector(),
                self.max_inline,
            )
        })();
        let exec = match exec {
            Ok(e) => e,
            Err(e) => {
                let _ = started.send(Err(e.to_string()));
                return Err(e);
            }
        };
        let _ = started.send(Ok(()));
        // Dropped now: a thread that dies before it reports must end the node's wait.
        drop(started);
        // Service threads' client ids: apart from compute clients', one per thread.
        let client = 1 << 31 | (node.0 as u32) << 12 | (thread & 0xfff);
        let ctx = ServerClient { client: exec.client(client, 0), node: self.shared.clone() };
        exec.spawn(body(ctx));
        exec.run_until(&self.stop)
    }
}

impl ServiceNode {
    /// Registers the node's memory (and the NIC's device memory, where it has some) and
    /// listens on the control address. Errors: memory that cannot be allocated or registered
    /// (too few free huge pages with [`HostConfig::hugepages`]), an address that cannot be
    /// bound, no RPC thread. Device memory that cannot be allocated is not an error: the node
    /// says so on stderr and serves without it.
    pub fn new(nic: Arc<Nic>, config: HostConfig) -> Result<ServiceNode, VerbsError> {
        if config.rpc_threads == 0 {
            return Err(VerbsError::Protocol(format!("{}: a node needs at least one RPC thread", config.name)));
        }
        let memory = Arc::new(NodeMemory::new(&nic, config.node, config.memory_bytes, config.hugepages)?);
        let dm_bytes = nic.caps().max_dm_bytes;
        let device = if config.device_memory && dm_bytes > 0 {
            match DeviceMemory::new(&nic, dm_bytes) {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("{}: no device memory served ({e}); region 1 has 0 bytes", config.name);
                    None
                }
            }
        } else {
            None
        };
        let send_cq = nic.completion_queue(NODE_CQ_ENTRIES)?;
        let recv_cq = nic.completion_queue(NODE_CQ_ENTRIES)?;
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| VerbsError::Protocol(format!("cannot listen on {}: {e}", config.listen)))?;
        listener.set_nonblocking(true).map_err(|e| VerbsError::Protocol(format!("listener: {e}")))?;
        let shared = Arc::new(NodeShared {
            node: config.node,
            name: config.name.clone(),
            memory,
            calls: Mutex::new(HashMap::new()),
            conns: RwLock::new(Vec::new()),
            send_cq,
            reap_lock: Mutex::new(()),
        });
        Ok(ServiceNode {
            nic,
            config,
            shared,
            recv_cq,
            listener,
            services: BTreeMap::new(),
            skipped: Vec::new(),
            barriers: Arc::new(Mutex::new(Barriers::default())),
            report: ServeReport::default(),
            device,
        })
    }

    /// The device memory the node serves as region 1 (its rkey and size, as the welcome
    /// carries them), if any.
    pub fn device_memory(&self) -> Option<RemoteRegion> {
        self.device.as_ref().map(DeviceMemory::remote)
    }

    /// The address the control channel listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener")
    }

    /// The node's memory (tests and checks read it; it outlives the node while held).
    pub fn memory(&self) -> Arc<NodeMemory> {
        self.shared.memory.clone()
    }

    /// The services this node runs.
    pub fn services(&self) -> Vec<u16> {
        self.services.keys().copied().collect()
    }

    /// `(node, service)` of the services installed for other nodes, which this one skipped.
    pub fn skipped(&self) -> &[(NodeId, u16)] {
        &self.skipped
    }

    /// Runs the node until `stop` is set: starts the RPC threads and the services' workers,
    /// then admits peers and dispatches their calls on this thread. On a stop it stops the
    /// threads (each lets its verbs in flight complete) and closes every queue pair. Call it
    /// once. A thread that dies (a handler or worker panicked, or its executor failed: a peer
    /// it reached went away) stops the node with an error that says which and why; a worker
    /// whose loop returns just ends.
    pub fn serve(&mut self, stop: &AtomicBool) -> Result<ServeReport, VerbsError> {
        let max_inline = self.nic.queue_pair_on(&self.recv_cq, 4, 0)?.max_inline();
        let kit = ThreadKit {
            nic: self.nic.clone(),
            shared: self.shared.clone(),
            peers: Arc::new(self.config.peers.clone()),
            token: self.config.token.as_str().into(),
            seed: self.config.seed,
            staging_bytes: self.config.staging_bytes,
            max_inline,
            stop: Arc::new(AtomicBool::new(false)),
            failed: Arc::new(Mutex::new(None)),
        };
        let inbox: Arc<Queue<Job>> = Arc::new(Queue::new());
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let mut rpc = Vec::new();
        let mut workers = Vec::new();
        let mut thread = 0u32;
        let mut spawned = Ok(());
        for t in 0..self.config.rpc_threads as u32 {
            let (inbox, name) = (inbox.clone(), self.config.name.clone());
            let body = move |ctx: ServerClient| -> WorkerLoop { Box::pin(rpc_loop(ctx, inbox, name)) };
            match kit.spawn(thread, format!("rpc-{t}"), started_tx.clone(), body) {
                Ok(h) => rpc.push(h),
                Err(e) => spawned = Err(e),
            }
            thread += 1;
        }
        for (&id, service) in &self.services {
            for index in 0..service.workers() {
                let service = service.clone();
                let body = move |ctx: ServerClient| service.run_worker(ctx, index);
                match kit.spawn(thread, format!("svc{id}-worker{index}"), started_tx.clone(), body) {
                    Ok(h) => workers.push(h),
                    Err(e) => spawned = Err(e),
                }
                thread += 1;
            }
        }
        drop(started_tx);
        let mut result = spawned;
        for _ in 0..rpc.len() + workers.len() {
            match started_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    result = Err(VerbsError::Protocol(format!("{}: a service thread: {e}", self.config.name)))
                }
                Err(_) => break,
            }
        }
        let mut peers = Peers::new();
        if result.is_ok() {
            result = self.dispatch_loop(stop, &inbox, &mut peers, &kit.failed);
        }
        kit.stop.store(true, Ordering::SeqCst);
        for h in rpc.iter().chain(&workers) {
            h.thread().unpark();
        }
        for h in rpc.into_iter().chain(workers) {
            let name = h.thread().name().unwrap_or("a service thread").to_string();
            let ended = h.join().unwrap_or_else(|_| Err(VerbsError::Protocol(format!("{name} panicked"))));
            if let Err(e) = ended {
                eprintln!("{}: {name}: {e}", self.config.name);
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        // The queue pairs go before the receive buffers they point into.
        self.shared.conns.write().unwrap_or_else(|e| e.into_inner()).clear();
        peers.retired.clear();
        drop(peers);
        result.map(|()| self.report)
    }

    fn dispatch_loop(
        &mut self,
        stop: &AtomicBool,
        inbox: &Queue<Job>,
        peers: &mut Peers,
        failed: &Mutex<Option<String>>,
    ) -> Result<(), VerbsError> {
        let mut next_call = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let mut busy = false;
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    busy = true;
                    if let Err(e) = self.admit(stream, peers) {
                        eprintln!("{}: control connection from {peer}: {e}", self.config.name);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(VerbsError::Protocol(format!("accept: {e}"))),
            }
            busy |= self.poll_requests(peers, inbox, &mut next_call)? > 0;
            busy |= self.shared.reap()? > 0;
            busy |= peers.retire(&self.shared);
            if let Some(why) = lock(failed).take() {
                return Err(VerbsError::Protocol(format!("{}: {why}", self.config.name)));
            }
            if !busy {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(())
    }

    /// Answers one control connection: a hello with the token gets queue pairs and the
    /// node's region; the connection then stays open for barriers.
    fn admit(&mut self, mut stream: TcpStream, peers: &mut Peers) -> Result<(), VerbsError> {
        stream
            .set_nonblocking(false)
            .and_then(|_| stream.set_read_timeout(Some(Duration::from_secs(10))))
            .map_err(|e| VerbsError::Protocol(e.to_string()))?;
        // A port probe (a connection closed before its first byte) is not worth a line.
        if matches!(stream.peek(&mut [0u8; 1]), Ok(0)) {
            return Ok(());
        }
        let hello = match Message::receive(&mut stream) {
            Ok(m) => m,
            // A client that gave up mid-hello: nothing to answer.
            Err(wire::WireError::Io(e)) => return Err(VerbsError::Protocol(format!("closed before its hello ({e})"))),
            Err(e) => return Err(e.into()),
        };
        let admitted = wire::admit(&hello, &self.config.token).and_then(|(_, endpoints)| {
            let have = peers.live;
            if have + endpoints.len() > MAX_CONNECTIONS {
                Err(format!("{} takes at most {MAX_CONNECTIONS} queue pairs ({have} connected)", self.config.name))
            } else {
                Ok(endpoints)
            }
        });
        let endpoints = match admitted {
            Ok(endpoints) => endpoints,
            Err(reason) => {
                self.report.refused += 1;
                Message::Refused { reason }.send(&mut stream)?;
                return Ok(());
            }
        };
        let mut indices = Vec::new();
        let built = (|| -> Result<(), VerbsError> {
            let mut mine = Vec::new();
            for ep in endpoints {
                let conn = peers.recv.len() as u32;
                let mut qp = self.nic.queue_pair_split(
                    &self.shared.send_cq,
                    &self.recv_cq,
                    SEND_SLOTS + CALL_CREDITS + 16,
                    0x1000 + conn,
                )?;
                let recv = Region::new((CALL_CREDITS * CALL_MESSAGE_BYTES) as usize)?;
                let send = Region::new((SEND_SLOTS * CALL_MESSAGE_BYTES) as usize)?;
                let (recv_mr, send_mr) = (self.nic.register(&recv, false)?, self.nic.register(&send, false)?);
                for slot in 0..CALL_CREDITS {
                    let at = slot as u64 * CALL_MESSAGE_BYTES as u64;
                    qp.post_recv(send_id(conn, slot), &recv, at, CALL_MESSAGE_BYTES, recv_mr.lkey())?;
                }
                qp.connect(&self.nic, &ep)?;
                mine.push(qp.endpoint(&self.nic));
                let tx = Tx { qp, send_mr, send, free: (0..SEND_SLOTS).rev().collect() };
                let inbound = Arc::new(Inbound { tx: Mutex::new(tx) });
                self.shared.conns.write().unwrap_or_else(|e| e.into_inner()).push(Some(inbound));
                peers.recv.push(Some(RecvSide { mr: recv_mr, recv }));
                peers.live += 1;
                indices.push(conn);
            }
            let host = self.shared.memory.remote();
            let device = self.device_memory();
            Message::Welcome { node: self.config.node.0, host, device, endpoints: mine }.send(&mut stream)?;
            stream.set_read_timeout(None).map_err(|e| VerbsError::Protocol(e.to_string()))
        })();
        if let Err(e) = built {
            // Retire what was built: nobody will use it.
            let _ = peers.closed_tx.send(indices);
            return Err(e);
        }
        self.report.admitted += 1;
        let (barriers, closed) = (self.barriers.clone(), peers.closed_tx.clone());
        std::thread::spawn(move || {
            serve_control(stream, barriers);
            let _ = closed.send(indices);
        });
        Ok(())
    }

    /// Takes every request that arrived: posts its receive again, then queues it for an RPC
    /// thread (or answers an unknown service). Returns how many completions there were.
    fn poll_requests(&mut self, peers: &Peers, inbox: &Queue<Job>, next_call: &mut u64) -> Result<usize, VerbsError> {
        let mut got = Vec::new();
        let n = self.recv_cq.poll(|c| got.push(c))?;
        for c in got {
            let (conn, slot) = split_id(c.wr_id);
            if c.status != 0 {
                // A peer that went away leaves its queue pair in error: report, go on.
                eprintln!("{}: connection {conn}: {}", self.config.name, failed_completion(&c));
                continue;
            }
            // A completion of a retired connection (its peer left) is dropped.
            let (Some(Some(side)), Some(Some(inbound))) = (
                peers.recv.get(conn as usize),
                self.shared.conns.read().unwrap_or_else(|e| e.into_inner()).get(conn as usize).cloned(),
            ) else {
                continue;
            };
            let at = slot as u64 * CALL_MESSAGE_BYTES as u64;
            let msg = side.recv.read_at(at as usize, c.byte_len as usize);
            // Post the receive again before anything else: the caller's credit comes back with
            // the reply, and then it may send into this buffer.
            if let Err(e) = lock(&inbound.tx).qp.post_recv(c.wr_id, &side.recv, at, CALL_MESSAGE_BYTES, side.mr.lkey())
            {
                eprintln!("{}: connection {conn}: {e}", self.config.name);
                continue;
            }
            let (call_id, service, request) = match decode_request(&msg) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{}: connection {conn}: {e}", self.config.name);
                    continue;
                }
            };
            self.report.calls += 1;
            let Some(handler) = self.services.get(&service) else {
                if let Err(e) = self.shared.send(conn, call_id, STATUS_UNKNOWN_SERVICE, &[]) {
                    eprintln!("{}: connection {conn}: {e}", self.config.name);
                }
                continue;
            };
            let call = *next_call;
            *next_call += 1;
            lock(&self.shared.calls).insert(call, PendingCall { conn, call_id });
            inbox.push(Job {
                service,
                handler: handler.clone(),
                request: request.to_vec(),
                responder: Responder { node: self.config.node, call, tag: call_id },
            });
        }
        Ok(n)
    }
}

/// An RPC thread: one request at a time; a reply the handler returns is sent at once.
async fn rpc_loop(ctx: ServerClient, inbox: Arc<Queue<Job>>, name: String) {
    loop {
        let job = inbox.pop().await;
        let reply = job.handler.dispatch(ctx.clone(), job.request, job.responder).await;
        if let Some(bytes) = reply
            && let Err(e) = ctx.reply(job.responder, bytes)
        {
            eprintln!("{name}: service {}: {e}", job.service);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_frame_as_the_runtime_expects() {
        use crate::real::runtime::{CALL_REQUEST_HEADER, CALL_RESPONSE_HEADER, decode_response, encode_request};
        let mut msg = 0x0102_0304_0506_0708u64.to_le_bytes().to_vec();
        msg.extend(0x4854u16.to_le_bytes());
        msg.extend(b"payload");
        assert_eq!(decode_request(&msg), Ok((0x0102_0304_0506_0708, 0x4854, &b"payload"[..])));
        assert_eq!(decode_request(&msg[..10]), Ok((0x0102_0304_0506_0708, 0x4854, &b""[..])));
        assert!(decode_request(&msg[..9]).unwrap_err().contains("header"));
        let huge = vec![0u8; CALL_MESSAGE_BYTES as usize + 1];
        assert!(decode_request(&huge).unwrap_err().contains("at most 4096"));
        assert_eq!(encode_request(0x0102_0304_0506_0708, 0x4854, b"payload"), msg);
        let r = encode_response(7, STATUS_OK, b"ok");
        assert_eq!(r.len(), CALL_RESPONSE_HEADER as usize + 2);
        assert_eq!((&r[..8], r[8], &r[9..]), (&7u64.to_le_bytes()[..], 0, &b"ok"[..]));
        assert_eq!(decode_response(&r).unwrap(), (7, STATUS_OK, &b"ok"[..]));
        assert!(decode_response(&r[..8]).is_err());
        // A full 4 KiB payload fits each way.
        let full = [vec![0u8; CALL_REQUEST_HEADER as usize], vec![1u8; MAX_CALL_PAYLOAD]].concat();
        assert_eq!(decode_request(&full).unwrap().2.len(), 4096);
        assert!(encode_response(1, STATUS_OK, &[1u8; MAX_CALL_PAYLOAD]).len() <= CALL_MESSAGE_BYTES as usize);
        let reason = too_long(5000);
        assert!(reason.contains("5000") && reason.contains("4096"), "{reason}");
        assert!(encode_response(1, STATUS_ERROR, reason.as_bytes()).len() <= CALL_MESSAGE_BYTES as usize);
    }

    #[test]
    fn local_memory_is_word_atomic_and_checks_its_input() {
        let node = NodeId(3);
        let m = NodeMemory::unregistered(node, 100).unwrap();
        // Aligned and unaligned writes, read back across word boundaries.
        m.write(0, &[1u8; 16]).unwrap();
        m.write(5, &[9u8; 6]).unwrap();
        assert_eq!(m.read(0, 16).unwrap(), [[1u8; 5].as_slice(), &[9u8; 6], &[1u8; 5]].concat());
        assert_eq!(m.read(6, 3).unwrap(), vec![9u8; 3]);
        // The last bytes of a range that is not a whole number of words.
        m.write(96, &[7, 8, 9, 10]).unwrap();
        assert_eq!(m.read(94, 6).unwrap(), vec![0, 0, 7, 8, 9, 10]);
        // CAS and FAA return the old word; FAA wraps.
        m.write(16, &5u64.to_le_bytes()).unwrap();
        assert_eq!(m.cas(16, 5, 6), Ok(5));
        assert_eq!(m.cas(16, 5, 7), Ok(6), "a failed CAS returns the word and leaves it");
        assert_eq!(m.faa(16, u64::MAX), Ok(6));
        assert_eq!(m.read(16, 8).unwrap(), 5u64.to_le_bytes());
        // Bad input, as the simulator reports it.
        let at = |o| RemoteAddr::host(node, o);
        assert_eq!(m.read(96, 8), Err(VerbsError::OutOfRange { addr: at(96), len: 8 }));
        assert_eq!(m.cas(20, 0, 1), Err(VerbsError::Unaligned { addr: at(20) }));
        assert_eq!(m.faa(96, 1), Err(VerbsError::OutOfRange { addr: at(96), len: 8 }), "a word past the end");
        assert_eq!(m.write(0, &[]), Err(VerbsError::InvalidLength { addr: at(0), len: 0 }));
        assert!(matches!(m.read(RemoteAddr::OFFSET_LIMIT, 8), Err(VerbsError::OutOfRange { .. })));
        assert!(matches!(m.read(u64::MAX - 2, 8), Err(VerbsError::OutOfRange { .. })));
        assert!(NodeMemory::unregistered(node, 0).is_err());
    }

    #[test]
    fn concurrent_local_faa_and_partial_writes_lose_nothing() {
        let m = Arc::new(NodeMemory::unregistered(NodeId(0), 4096).unwrap());
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.faa(0, 1).unwrap();
                        // Each thread owns one byte of word 8: merges never lose another's byte.
                        let b = m.read(8 + t as u64, 1).unwrap()[0];
                        m.write(8 + t as u64, &[b.wrapping_add(1)]).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(m.read(0, 8).unwrap(), 4000u64.to_le_bytes());
        assert_eq!(m.read(8, 4).unwrap(), vec![(1000 % 256) as u8; 4]);
    }

    #[test]
    fn send_ids_round_trip() {
        for (c, s) in [(0, 0), (255, SEND_SLOTS - 1), (u32::MAX, u32::MAX)] {
            assert_eq!(split_id(send_id(c, s)), (c, s));
        }
    }
}

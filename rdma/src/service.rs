//! The service API: server-side handlers (the memory node's chunk allocator; HStore's hash-table
//! and skiplist servers).
//!
//! A service runs on a memory or server node. Each request arrives by [`crate::Verbs::call`] and
//! is handled on one of the node's RPC threads; a thread handles one request at a time, so the
//! node serves at most as many requests at once as it has threads. A service may also run
//! background workers, each on a thread of its own, fed through [`crate::sync::Queue`]s. Handlers
//! and workers are clients themselves ([`ServerCtx`]): they issue verbs and calls, charge CPU, and
//! read and write their own node's registered memory through [`LocalMemory`].
//!
//! ## Deferred replies
//!
//! By default a handler's return value is the reply, and its RPC thread is busy until then. A
//! server whose reply waits on other work — HStore's hash-table server answers a write only after
//! a worker has shipped it to the skiplist server and applied it — must not hold an RPC thread
//! for that long (eRPC's model: the dispatch thread enqueues and moves on). Such a service
//! overrides [`Service::dispatch`], keeps the [`Responder`] it is given, returns `None` (the RPC
//! thread takes the next request at once), and later answers from any of its node's threads
//! with [`Replier::reply`]. The caller sees one ordinary `call`; a crash of the node before the
//! reply fails it with `NodeDown`, as for any call the node held.
//!
//! ## Installing services
//!
//! An index that runs services (HStore's servers) installs them through a [`ServiceHost`]: the
//! simulator implements it, and so does a hardware server-node process, so the same factory runs
//! on both.

use crate::{Buf, Client, NodeId, VerbsError};
use std::future::Future;
use std::sync::Arc;

/// The node's own registered host memory, as its CPU sees it.
///
/// Each access is 8-byte atomic: a longer read or write is a sequence of 8-byte accesses in
/// ascending order, and a remote READ may observe it half done. A local CAS or FAA is atomic with
/// respect to other local accesses but **not** with respect to remote RMWs (RDMA^TSO_RMW): a
/// remote RMW is a read and a write, and a local store can fall between them and be lost.
pub trait LocalMemory {
    /// Reads `len` bytes at `offset`.
    fn local_read(&self, offset: u64, len: usize) -> impl Future<Output = Result<Buf, VerbsError>>;
    /// Writes `data` at `offset`.
    fn local_write(&self, offset: u64, data: Buf) -> impl Future<Output = Result<(), VerbsError>>;
    /// CPU compare-and-swap of the 8-byte word at `offset`; returns the old word.
    fn local_cas(&self, offset: u64, expect: u64, swap: u64) -> impl Future<Output = Result<u64, VerbsError>>;
    /// CPU fetch-and-add of the 8-byte word at `offset`; returns the old word.
    fn local_faa(&self, offset: u64, add: u64) -> impl Future<Output = Result<u64, VerbsError>>;
}

/// A reply a handler deferred: where it goes. Plain data (`Send`), so a service can keep it in
/// its shared state until a worker answers. The numbers are the backend's own; a responder is
/// answered at most once, and a second answer (or one for a call the node's crash already
/// failed) is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Responder {
    /// The node that received the call.
    pub node: NodeId,
    /// The backend's id of the call.
    pub call: u64,
    /// A tag that tells this call from a later one that reuses its id.
    pub tag: u64,
}

/// Answering deferred calls (see the module doc).
pub trait Replier {
    /// Sends `response` to the caller `to` names, from this thread: its CPU posts the SEND.
    /// Errors if `to` is not a call of this node awaiting its reply.
    fn reply(&self, to: Responder, response: Vec<u8>) -> Result<(), VerbsError>;
}

/// What a handler or worker runs with.
pub trait ServerCtx: Client + LocalMemory + Replier + Clone + 'static {}

impl<T: Client + LocalMemory + Replier + Clone + 'static> ServerCtx for T {}

/// A service: shared state plus a handler per request and optional workers. On hardware the
/// node's threads are OS threads, so the state is shared through an `Arc` and must be `Sync`.
pub trait Service<C: ServerCtx>: Send + Sync + 'static {
    /// Handles one request on an RPC thread and returns the response bytes. A handler that
    /// wants to report an error encodes it in its response.
    fn handle(self: Arc<Self>, ctx: C, request: Vec<u8>) -> impl Future<Output = Vec<u8>>;

    /// Takes one request on an RPC thread: `Some(reply)` answers now; `None` defers the reply,
    /// which someone must later send with [`Replier::reply`] to `responder` (module doc). The
    /// RPC thread is free again when this returns. The default answers with [`Service::handle`].
    fn dispatch(
        self: Arc<Self>,
        ctx: C,
        request: Vec<u8>,
        responder: Responder,
    ) -> impl Future<Output = Option<Vec<u8>>> {
        let _ = responder;
        async move { Some(self.handle(ctx, request).await) }
    }

    /// Background workers to start with the service (each on a thread of its own).
    fn workers(&self) -> u32 {
        0
    }

    /// Worker `index`'s loop; it ends when the service stops (a crash drops it).
    fn run_worker(self: Arc<Self>, ctx: C, index: u32) -> impl Future<Output = ()> {
        let _ = (ctx, index);
        async {}
    }

    /// A copy of the service's state, to start another run from a loaded image (the
    /// simulator's `Image`: a sweep loads an index once and forks it per point). Called only
    /// when the node is quiescent: no request in flight, every worker waiting for work. The
    /// copy must behave exactly as this service would from here on. `None` (the default) says
    /// the service cannot be copied: a sweep then loads afresh for every point.
    fn fork(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// Whether [`Service::fork`] would give a copy now. A simulation that is done with its
    /// services hands their states to its image as they are (`Sim::into_image`), and asks
    /// this instead of copying them; override it when a copy is large (the default makes one).
    fn forks(&self) -> bool
    where
        Self: Sized,
    {
        self.fork().is_some()
    }
}

/// Where an index's services run: the simulator, or a hardware server-node process. `factory`
/// builds the service's state; a node that crashes and restarts gets a fresh one from it.
pub trait ServiceHost {
    /// The context handlers and workers run with.
    type Ctx: ServerCtx;

    /// Runs `factory()`'s service as `id` on `node` (a memory or server node).
    fn add_service<S: Service<Self::Ctx>>(
        &mut self,
        node: NodeId,
        id: u16,
        factory: impl Fn() -> S + 'static,
    ) -> Result<(), String>;
}

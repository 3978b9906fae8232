//! The service API: server-side handlers (the memory node's chunk allocator; HStore's hash-table
//! and skiplist servers).
//!
//! A service runs on a memory or server node. Each request arrives by [`crate::Verbs::call`] and
//! is handled on one of the node's RPC threads; a thread handles one request at a time, so the
//! node serves at most as many requests at once as it has threads. A service may also run
//! background workers, each on a thread of its own, fed through [`crate::sync::Queue`]s. Handlers
//! and workers are clients themselves ([`ServerCtx`]): they issue verbs and calls, charge CPU, and
//! read and write their own node's registered memory through [`LocalMemory`].

use crate::{Buf, Client, VerbsError};
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

/// What a handler or worker runs with.
pub trait ServerCtx: Client + LocalMemory + Clone + 'static {}

impl<T: Client + LocalMemory + Clone + 'static> ServerCtx for T {}

/// A service: shared state plus a handler per request and optional workers. On hardware the
/// node's threads are OS threads, so the state is shared through an `Arc` and must be `Sync`.
pub trait Service<C: ServerCtx>: Send + Sync + 'static {
    /// Handles one request on an RPC thread and returns the response bytes. A handler that
    /// wants to report an error encodes it in its response.
    fn handle(self: Arc<Self>, ctx: C, request: Vec<u8>) -> impl Future<Output = Vec<u8>>;

    /// Background workers to start with the service (each on a thread of its own).
    fn workers(&self) -> u32 {
        0
    }

    /// Worker `index`'s loop; it ends when the service stops (a crash drops it).
    fn run_worker(self: Arc<Self>, ctx: C, index: u32) -> impl Future<Output = ()> {
        let _ = (ctx, index);
        async {}
    }
}

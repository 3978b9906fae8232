//! The `Verbs` trait, its requests and responses, and the memory model every backend honours.

use crate::{Buf, NodeId, RemoteAddr, VerbsError};
use std::future::Future;

/// One verb of a doorbell batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Fetch `buf.len()` bytes into `buf`.
    Read(Buf),
    /// Store the bytes of `buf` (inline when at most [`Caps::max_inline_bytes`]).
    Write(Buf),
    /// 8-byte compare-and-swap; returns the old word.
    Cas { expect: u64, swap: u64 },
    /// 8-byte fetch-and-add; returns the old word.
    Faa { add: u64 },
    /// ConnectX masked CAS (see [`crate::atomics::masked_cas`]); returns the whole old word.
    MaskedCas { compare: u64, compare_mask: u64, swap: u64, swap_mask: u64 },
    /// ConnectX masked FAA (see [`crate::atomics::masked_faa`]); returns the whole old word.
    MaskedFaa { add: u64, boundary_mask: u64 },
}

impl Op {
    /// True for the read-modify-write verbs (CAS, FAA and their masked forms).
    pub fn is_rmw(&self) -> bool {
        !matches!(self, Op::Read(_) | Op::Write(_))
    }

    /// Bytes of remote memory the verb touches.
    pub fn byte_len(&self) -> u64 {
        match self {
            Op::Read(b) | Op::Write(b) => b.len() as u64,
            _ => 8,
        }
    }

    /// Applies an RMW to the old word: the new word. `None` for READ and WRITE.
    pub fn rmw_new(&self, old: u64) -> Option<u64> {
        use crate::atomics;
        Some(match *self {
            Op::Read(_) | Op::Write(_) => return None,
            Op::Cas { expect, swap } => atomics::cas(old, expect, swap),
            Op::Faa { add } => atomics::faa(old, add),
            Op::MaskedCas { compare, compare_mask, swap, swap_mask } => {
                atomics::masked_cas(old, compare, compare_mask, swap, swap_mask)
            }
            Op::MaskedFaa { add, boundary_mask } => atomics::masked_faa(old, add, boundary_mask),
        })
    }

    /// A short lowercase name: `read`, `write`, `cas`, `faa`, `masked-cas`, `masked-faa`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read(_) => "read",
            Op::Write(_) => "write",
            Op::Cas { .. } => "cas",
            Op::Faa { .. } => "faa",
            Op::MaskedCas { .. } => "masked-cas",
            Op::MaskedFaa { .. } => "masked-faa",
        }
    }
}

/// A verb and where it goes. `fence` is IBV_SEND_FENCE: the request waits until every earlier
/// READ and RMW of the same send queue has completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub addr: RemoteAddr,
    pub op: Op,
    pub fence: bool,
}

impl Request {
    pub fn read(addr: RemoteAddr, buf: Buf) -> Request {
        Request { addr, op: Op::Read(buf), fence: false }
    }
    /// A READ into a fresh zeroed buffer of `len` bytes.
    pub fn read_len(addr: RemoteAddr, len: usize) -> Request {
        Request::read(addr, Buf::zeroed(len))
    }
    pub fn write(addr: RemoteAddr, buf: impl Into<Buf>) -> Request {
        Request { addr, op: Op::Write(buf.into()), fence: false }
    }
    pub fn cas(addr: RemoteAddr, expect: u64, swap: u64) -> Request {
        Request { addr, op: Op::Cas { expect, swap }, fence: false }
    }
    pub fn faa(addr: RemoteAddr, add: u64) -> Request {
        Request { addr, op: Op::Faa { add }, fence: false }
    }
    pub fn masked_cas(addr: RemoteAddr, compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) -> Request {
        Request { addr, op: Op::MaskedCas { compare, compare_mask, swap, swap_mask }, fence: false }
    }
    pub fn masked_faa(addr: RemoteAddr, add: u64, boundary_mask: u64) -> Request {
        Request { addr, op: Op::MaskedFaa { add, boundary_mask }, fence: false }
    }
    /// The same request with IBV_SEND_FENCE set.
    pub fn fenced(mut self) -> Request {
        self.fence = true;
        self
    }
}

/// The result of one request of a batch, in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// The READ's buffer, filled.
    Read(Buf),
    /// The WRITE's buffer, handed back.
    Write(Buf),
    /// The old word of an RMW.
    Atomic(u64),
}

impl Response {
    /// The buffer of a READ or WRITE response.
    pub fn into_buf(self) -> Result<Buf, VerbsError> {
        match self {
            Response::Read(b) | Response::Write(b) => Ok(b),
            Response::Atomic(_) => Err(VerbsError::Protocol("expected a buffer, got an atomic result".into())),
        }
    }
    /// The old word of an RMW response.
    pub fn atomic(&self) -> Result<u64, VerbsError> {
        match self {
            Response::Atomic(v) => Ok(*v),
            _ => Err(VerbsError::Protocol("expected an atomic result, got a buffer".into())),
        }
    }
}

/// How a backend provides masked atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskedAtomics {
    /// One verb (ConnectX extended atomics).
    Native,
    /// A READ then a CAS loop: linearizable with respect to other RMWs, and counted as the verbs
    /// it really costs. Soft-RoCE and upstream rdma-core have no masked atomics.
    Emulated,
}

/// What the backend can do. An index may branch on it (e.g. put its lock table in host memory
/// when there is no device memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    pub masked_atomics: MaskedAtomics,
    /// Device-memory bytes per memory node (0: none, as on Soft-RoCE): region 1 of its
    /// addresses. On hardware, the least any node the client reaches serves (all of its NIC's
    /// `max_dm_size`, or 0).
    pub device_memory_bytes: u64,
    /// WRITEs up to this size are sent inline (no DMA read of the source buffer).
    pub max_inline_bytes: u32,
    /// Largest READ or WRITE.
    pub max_message_bytes: u64,
    /// Outstanding READs and atomics a QP may have in flight (`max_qp_rd_atom`).
    pub max_outstanding_reads_per_qp: u32,
}

/// What [`Verbs::post_keeping`] returns: the responses of the verbs that completed, in request
/// order (all of them, or the ones before the failed verb), and the failure if there was one.
#[derive(Debug)]
pub struct BatchOutcome {
    pub completed: Vec<Response>,
    pub error: Option<VerbsError>,
}

impl BatchOutcome {
    /// The whole batch's responses, or its failure (what [`Verbs::post`] returns).
    pub fn into_result(self) -> Result<Vec<Response>, VerbsError> {
        match self.error {
            None => Ok(self.completed),
            Some(e) => Err(e),
        }
    }
}

/// A client's access to remote memory: on hardware, RC queue pairs from this client to every
/// node; in the simulator, the same semantics in virtual time.
///
/// # Posting and ownership
///
/// Every method posts its verbs **when it is called**, not when the returned future is first
/// polled, and a posted verb always executes: dropping the future only discards the result
/// (the buffers come back in the result). This is what hardware does, and the simulator does
/// the same, so a cancelled operation can still change remote memory.
///
/// # The memory model
///
/// Every backend must honour these rules; the simulator exposes each as a switch with the
/// default in bold, so protocols are checked against the weakest behaviour the hardware may show.
///
/// 1. **RMW atomicity.** 8-byte aligned RMWs (CAS, FAA, masked) are atomic with respect to other
///    RMWs on the same NIC. They are *not* atomic with respect to WRITEs or to the memory node's
///    local CPU stores (switch `rmw_atomic_with_writes`, default **false**): an RMW is then a
///    read-and-compare followed by an 8-byte write of the new word, and a WRITE's line or a local
///    store can land between the two (and be overwritten).
/// 2. **Atomicity unit and line order.** A READ or WRITE is atomic only within one aligned unit
///    (`atomicity_bytes` = **64**, or 8). A READ samples its units in **any order** (switch
///    `read_units_ascending`); a WRITE places its units in **ascending** address order (switch
///    `write_units_arbitrary`). A READ that spans units may observe a concurrent WRITE in some
///    units and not in others.
/// 3. **Ordering on one QP** (at the responder, RC). Rows are the earlier verb, columns the later:
///
///    | earlier ↓ / later → | READ | WRITE | RMW |
///    |---|---|---|---|
///    | WRITE | sees the WRITE | placed after | placed after |
///    | RMW | sees the RMW | placed after | placed after |
///    | READ | may sample in either order | may land before the READ samples, unless fenced | may land before the READ samples, unless fenced |
///
///    Sources: InfiniBand Architecture Specification vol. 1, §9.5 (transaction ordering) and
///    §10.8.3.3 (the fence); RDMA^TSO (OOPSLA'24) for the READ/WRITE cells; RDMA^TSO_RMW for the
///    atomics. Across QPs (another client, or this client's QP to another node) nothing is
///    ordered. Unsignaled verbs follow the same rules. A fenced request waits until every earlier
///    READ and RMW of the QP has completed, and the requests posted after it wait for it (the
///    requester stops processing the send queue at the fence); fence whenever a WRITE, SEND or
///    RMW depends on an earlier READ or RMW. The weaker reading, where a later READ may overtake an earlier RMW, is
///    the simulator switch `rmw_then_read_unordered` (default false; the seeds' CAS-then-READ
///    doorbell batches need the cell as written).
/// 4. **Completion.** A delivered completion means the verb and every earlier verb of its QP are
///    visible to every later verb of any client.
///
/// Atomics act on little-endian 64-bit words (x86 responders).
pub trait Verbs {
    /// What this backend can do.
    fn caps(&self) -> &Caps;

    /// Posts a doorbell batch to **one** node: requests in order, each with its fence flag, one
    /// signalled completion, each request's result in request order. Errors in the batch's
    /// arguments (mixed nodes, out of range, unaligned atomics) post nothing.
    fn post(&self, requests: Vec<Request>) -> impl Future<Output = Result<Vec<Response>, VerbsError>>;

    /// As [`Verbs::post`], but a batch that fails part-way also returns the responses of the
    /// verbs before the one that failed. An RC queue pair completes in order, so the error
    /// completion names the first verb that did not complete and every verb before it did (an
    /// atomic's old word is in its local buffer even if unsignalled): a client that took a lock
    /// with the batch's CAS can tell, and release it, when a later READ of the batch fails.
    /// A backend that cannot tell keeps none (this default); the simulator keeps them.
    fn post_keeping(&self, requests: Vec<Request>) -> impl Future<Output = BatchOutcome> {
        let done = self.post(requests);
        async move {
            match done.await {
                Ok(completed) => BatchOutcome { completed, error: None },
                Err(e) => BatchOutcome { completed: Vec::new(), error: Some(e) },
            }
        }
    }

    /// Posts a batch without a completion and returns at once. Its effects land before any later
    /// signalled completion of the same QP is delivered; READ results are discarded.
    fn post_unsignaled(&self, requests: Vec<Request>) -> Result<(), VerbsError>;

    /// Two-sided RPC to `service` on `node` (RC SEND/RECV on hardware), costed at both NICs and
    /// on the server's CPU.
    fn call(&self, node: NodeId, service: u16, request: Vec<u8>) -> impl Future<Output = Result<Vec<u8>, VerbsError>>;

    /// READ `buf.len()` bytes at `addr` into `buf`.
    fn read(&self, addr: RemoteAddr, buf: Buf) -> impl Future<Output = Result<Buf, VerbsError>> {
        let done = self.post(vec![Request::read(addr, buf)]);
        async move { single(done.await?)?.into_buf() }
    }

    /// WRITE `buf` at `addr`; hands the buffer back.
    fn write(&self, addr: RemoteAddr, buf: Buf) -> impl Future<Output = Result<Buf, VerbsError>> {
        let done = self.post(vec![Request::write(addr, buf)]);
        async move { single(done.await?)?.into_buf() }
    }

    /// CAS on the 8-byte word at `addr`; returns the old word (success iff it equals `expect`).
    fn cas(&self, addr: RemoteAddr, expect: u64, swap: u64) -> impl Future<Output = Result<u64, VerbsError>> {
        let done = self.post(vec![Request::cas(addr, expect, swap)]);
        async move { single(done.await?)?.atomic() }
    }

    /// FAA on the 8-byte word at `addr`; returns the old word.
    fn faa(&self, addr: RemoteAddr, add: u64) -> impl Future<Output = Result<u64, VerbsError>> {
        let done = self.post(vec![Request::faa(addr, add)]);
        async move { single(done.await?)?.atomic() }
    }

    /// Masked CAS; returns the whole old word.
    fn masked_cas(
        &self,
        addr: RemoteAddr,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    ) -> impl Future<Output = Result<u64, VerbsError>> {
        let done = self.post(vec![Request::masked_cas(addr, compare, compare_mask, swap, swap_mask)]);
        async move { single(done.await?)?.atomic() }
    }

    /// Masked FAA with field boundaries; returns the whole old word.
    fn masked_faa(
        &self,
        addr: RemoteAddr,
        add: u64,
        boundary_mask: u64,
    ) -> impl Future<Output = Result<u64, VerbsError>> {
        let done = self.post(vec![Request::masked_faa(addr, add, boundary_mask)]);
        async move { single(done.await?)?.atomic() }
    }
}

/// The response of a one-verb batch.
pub fn single(mut responses: Vec<Response>) -> Result<Response, VerbsError> {
    match (responses.pop(), responses.is_empty()) {
        (Some(r), true) => Ok(r),
        _ => Err(VerbsError::Protocol("a one-verb batch must return exactly one response".into())),
    }
}

/// Checks a batch's shape (non-empty, one node, aligned atomics, sane lengths) and returns the
/// node it targets. Backends call it before posting; range checks are theirs.
pub fn validate_batch(requests: &[Request], max_message_bytes: u64) -> Result<NodeId, VerbsError> {
    let first = requests.first().ok_or(VerbsError::EmptyBatch)?;
    let node = first.addr.node();
    for r in requests {
        if r.addr.node() != node {
            return Err(VerbsError::BatchSpansNodes { first: node, other: r.addr.node() });
        }
        if r.op.is_rmw() {
            if r.addr.offset() % 8 != 0 {
                return Err(VerbsError::Unaligned { addr: r.addr });
            }
        } else {
            let len = r.op.byte_len();
            if len == 0 || len > max_message_bytes {
                return Err(VerbsError::InvalidLength { addr: r.addr, len });
            }
        }
        if r.addr.checked_add(r.op.byte_len()).is_none() {
            return Err(VerbsError::OutOfRange { addr: r.addr, len: r.op.byte_len() });
        }
    }
    Ok(node)
}

/// Direct access to remote memory outside time: invariant checks walk a structure through it.
/// The simulator implements it; on hardware a quiescent memory node can serve it.
pub trait MemoryView {
    /// Reads `len` bytes at `addr`.
    fn read_memory(&self, addr: RemoteAddr, len: usize) -> Result<Vec<u8>, VerbsError>;

    /// The state of service `service` on `node` as its factory built it (an
    /// `Arc<TheService>`), for invariant walks of servers whose structures live in their own
    /// process memory (HStore's skiplists). `None` where the view cannot see it (hardware: another
    /// process) or no such service runs; walks then check what memory shows.
    fn service_state(&self, node: NodeId, service: u16) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> {
        let _ = (node, service);
        None
    }
}

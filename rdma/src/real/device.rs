//! The device layer (feature `connectx`): an RDMA device opened through `sideway`, registered
//! memory, RC queue pairs connected from [`Endpoint`]s, and a blocking executor that runs a
//! [`Plan`] on a queue pair and returns each request's [`Response`].
//!
//! This is the first layer of the real backend (issue 12): one thread, one queue pair at a
//! time, completions polled by spinning. The async `Verbs` implementation (many clients per
//! thread, completions waking the right task) builds on it.
//!
//! Local buffers must be registered memory, so a request's bytes go through a registered
//! staging region laid out by [`plan_batch`]: WRITE payloads are copied in (or sent inline when
//! they fit the queue pair's inline limit), READ results and atomics' old words are copied out
//! after the completion. Masked atomics are emulated with a READ and a CAS loop on the same
//! queue pair, as [`crate::emulate`] does (Soft-RoCE and upstream rdma-core have none).
//!
//! Unsafe code is confined to this module: memory registration, scatter-gather entries that
//! point into registered memory, and the staging region's allocation. Each site says why it is
//! sound: the memory outlives every work request that names it, because the executor waits for
//! the completion that covers a batch before it returns, and keeps the region until then.

#![allow(unsafe_code)]

use super::plan::{Part, Plan, WorkRequest, WrOp, plan_batch};
use super::wire::Endpoint;
use crate::{Buf, Caps, MaskedAtomics, Op, Request, Response, VerbsError};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{AtomicCapability, DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairAttributeMask, QueuePairState,
    SetInlineData, SetScatterGatherEntry, WorkRequestFlags,
};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::net::Ipv6Addr;
use std::ptr::NonNull;
use std::sync::Arc;

/// A registration of a [`Region`] (sideway's memory region): its `rkey()` goes to peers.
pub use sideway::ibverbs::memory_region::MemoryRegion as MemoryRegistration;

/// Spins on a completion queue at most this many times before reporting a timeout (the
/// transport's own retries give up long before: timeout 14 and 7 retries is about half a
/// second).
const MAX_POLLS: u64 = 2_000_000_000;

fn device_error(what: &str, e: impl std::fmt::Display) -> VerbsError {
    VerbsError::Protocol(format!("RDMA device: {what}: {e}"))
}

/// Page-aligned, zeroed memory that can be registered with a NIC. Its address never changes.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: `Region` owns its allocation exclusively (like a `Box<[u8]>`); the NIC's accesses are
// synchronised by completions, which the executor waits for.
unsafe impl Send for Region {}

impl Region {
    /// `len` zeroed bytes aligned to 4 KiB. Errors on 0 bytes or a failed allocation.
    pub fn new(len: usize) -> Result<Region, VerbsError> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| VerbsError::Protocol(format!("a region of {len} bytes: {e}")))?;
        if len == 0 {
            return Err(VerbsError::Protocol("a region of 0 bytes".into()));
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(VerbsError::Protocol(format!("cannot allocate {len} bytes")))?;
        Ok(Region { ptr, layout })
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The region's address, as the NIC and a peer's work requests name it.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Copies `src` in at `offset` (the caller knows no NIC access is in flight there).
    pub fn write_at(&mut self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len(), "staging write out of range");
        // SAFETY: in range (checked); the region is valid for its whole length.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) }
    }

    /// Copies `len` bytes out from `offset`.
    pub fn read_at(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.len(), "staging read out of range");
        let mut out = vec![0u8; len];
        // SAFETY: in range (checked); a volatile-free copy is fine because the NIC's writes to
        // this range completed before the completion that let the caller read it.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), len) }
        out
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// What the device offers, as the backend needs it.
#[derive(Clone, Debug)]
pub struct DeviceCaps {
    pub name: String,
    pub atomics: bool,
    /// Outstanding READs/atomics a QP may receive (`max_qp_rd_atom`) and issue
    /// (`max_qp_init_rd_atom`).
    pub max_dest_rd_atomic: u8,
    pub max_rd_atomic: u8,
    pub mtu: Mtu,
    /// Device memory bytes (0 on Soft-RoCE).
    pub max_dm_bytes: u64,
}

/// An opened device and port with its RoCE v2 GID and a protection domain.
pub struct Nic {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    port: u8,
    gid_index: u8,
    gid: Gid,
    caps: DeviceCaps,
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic")
            .field("caps", &self.caps)
            .field("port", &self.port)
            .field("gid_index", &self.gid_index)
            .finish()
    }
}

impl Nic {
    /// Opens device `name` (or the first one), port `port`, and picks the GID: `gid_index`,
    /// or the first RoCE v2 GID with an IPv4-mapped address (index 1 on Soft-RoCE, usually 3
    /// on ConnectX). Errors name what is missing: no device, no such device, no usable GID.
    pub fn open(name: Option<&str>, port: u8, gid_index: Option<u8>) -> Result<Nic, VerbsError> {
        let list = DeviceList::new().map_err(|e| device_error("cannot list devices (is libibverbs installed?)", e))?;
        let mut names = Vec::new();
        let mut found = None;
        for d in &list {
            let n = d.name();
            if found.is_none() && name.is_none_or(|want| want == n) {
                found = Some(d.open().map_err(|e| device_error(&format!("cannot open {n}"), e))?);
            }
            names.push(n);
        }
        let ctx = found.ok_or_else(|| match name {
            Some(want) => device_error(&format!("no device {want}"), format!("devices: {names:?}")),
            None => VerbsError::Unsupported("no RDMA device on this machine"),
        })?;
        let attr = ctx.query_device().map_err(|e| device_error("query_device", e))?;
        let port_attr = ctx.query_port(port).map_err(|e| device_error(&format!("port {port}"), e))?;
        let table = ctx.query_gid_table().map_err(|e| device_error("GID table", e))?;
        let entry = table.iter().filter(|e| e.port_num() == port as u32).find(|e| match gid_index {
            Some(i) => e.gid_index() == i as u32,
            None => e.gid_type() == GidType::RoceV2 && Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some(),
        });
        let entry = entry.ok_or_else(|| device_error("no usable GID", format!("port {port}, index {gid_index:?}")))?;
        let pd = ctx.alloc_pd().map_err(|e| device_error("alloc_pd", e))?;
        let clamp = |v: i32| v.clamp(1, 16) as u8;
        let caps = DeviceCaps {
            name: ctx.name(),
            atomics: attr.atomic_capability() != AtomicCapability::None,
            max_dest_rd_atomic: clamp(attr.max_qp_rd_atom()),
            max_rd_atomic: clamp(attr.max_qp_init_rd_atom()),
            mtu: port_attr.active_mtu(),
            max_dm_bytes: attr.attr.max_dm_size,
        };
        Ok(Nic { ctx, pd, port, gid_index: entry.gid_index() as u8, gid: entry.gid(), caps })
    }

    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// Registers `region`: `remote` opens it to peers' READs, WRITEs and atomics.
    pub fn register(&self, region: &Region, remote: bool) -> Result<Arc<MemoryRegion>, VerbsError> {
        let mut access = AccessFlags::LocalWrite;
        if remote {
            access |= AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic;
        }
        // SAFETY: the region is valid for its length and never moves; callers keep it alive as
        // long as the registration (the executor and the memory node own both together).
        unsafe { self.pd.reg_mr(region.addr() as usize, region.len(), access) }
            .map_err(|e| device_error(&format!("cannot register {} bytes", region.len()), e))
    }

    /// A completion queue with room for `entries` completions.
    pub fn completion_queue(&self, entries: u32) -> Result<Cq, VerbsError> {
        let cq = self.ctx.create_cq_builder().setup_cqe(entries).build().map_err(|e| device_error("create CQ", e))?;
        Ok(Cq(GenericCompletionQueue::from(cq)))
    }

    /// An RC queue pair with room for `depth` outstanding work requests and a completion queue
    /// of its own, in INIT.
    pub fn queue_pair(&self, depth: u32, psn: u32) -> Result<RcQp, VerbsError> {
        let cq = self.completion_queue(2 * depth)?;
        self.queue_pair_on(&cq, depth, psn)
    }

    /// An RC queue pair whose sends and receives complete on `cq` (shared with other queue
    /// pairs: the wr_id must tell them apart), in INIT.
    pub fn queue_pair_on(&self, cq: &Cq, depth: u32, psn: u32) -> Result<RcQp, VerbsError> {
        self.queue_pair_split(cq, cq, depth, psn)
    }

    /// An RC queue pair whose sends complete on `send_cq` and receives on `recv_cq` (a service
    /// node polls its receives on one thread and reaps its replies' sends on any), in INIT.
    pub fn queue_pair_split(&self, send_cq: &Cq, recv_cq: &Cq, depth: u32, psn: u32) -> Result<RcQp, VerbsError> {
        let (cq, recv_cq) = (send_cq.clone(), recv_cq.clone());
        // The provider refuses an inline size it cannot grant: ask for less until it agrees.
        let mut last = None;
        let mut qp: Option<GenericQueuePair> = None;
        for inline in [256u32, 128, 64, 0] {
            let mut b = self.pd.create_qp_builder();
            b.setup_send_cq(cq.0.clone())
                .setup_recv_cq(recv_cq.0.clone())
                .setup_max_send_wr(depth)
                .setup_max_recv_wr(depth)
                .setup_max_send_sge(1)
                .setup_max_recv_sge(1)
                .setup_max_inline_data(inline);
            match b.build() {
                Ok(q) => {
                    qp = Some(q.into());
                    break;
                }
                Err(e) => last = Some(e.to_string()),
            }
        }
        let mut qp = qp.ok_or_else(|| device_error("create QP", last.unwrap_or_default()))?;
        let inline = qp
            .query(QueuePairAttributeMask::Capabilities)
            .map(|(_, init)| init.max_inline_data())
            .map_err(|e| device_error("query QP", e))?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(self.port).setup_access_flags(
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic,
        );
        qp.modify(&a).map_err(|e| device_error("QP to INIT", e))?;
        Ok(RcQp { qp, cq, inline, psn: psn & 0xff_ffff, next_id: 0 })
    }
}

/// A completion queue (cheap to clone: shared).
#[derive(Clone)]
pub struct Cq(GenericCompletionQueue);

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cq")
    }
}

/// One completion: its work request's id, and on success the bytes a receive got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    /// 0 on success; otherwise the verbs status code (and `vendor_err`).
    pub status: u32,
    pub vendor_err: u32,
    /// Bytes received (receives only; meaningful on success).
    pub byte_len: u32,
}

impl Cq {
    /// Hands every available completion to `f`; returns how many there were.
    pub fn poll(&self, mut f: impl FnMut(Completion)) -> Result<usize, VerbsError> {
        match self.0.start_poll() {
            Ok(mut poller) => {
                let mut n = 0;
                for wc in &mut poller {
                    let status = wc.status();
                    f(Completion {
                        wr_id: wc.wr_id(),
                        status,
                        vendor_err: wc.vendor_err(),
                        byte_len: if status == 0 { wc.byte_len() } else { 0 },
                    });
                    n += 1;
                }
                Ok(n)
            }
            Err(PollCompletionQueueError::CompletionQueueEmpty) => Ok(0),
            Err(e) => Err(device_error("poll CQ", e)),
        }
    }
}

/// An RC queue pair and the completion queue of its sends.
pub struct RcQp {
    qp: GenericQueuePair,
    cq: Cq,
    /// The inline size the provider granted.
    inline: u32,
    psn: u32,
    next_id: u64,
}

impl std::fmt::Debug for RcQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcQp").field("qpn", &self.qp.qp_number()).field("inline", &self.inline).finish()
    }
}

impl RcQp {
    /// This side, as the peer needs it.
    pub fn endpoint(&self, nic: &Nic) -> Endpoint {
        Endpoint { qpn: self.qp.qp_number(), psn: self.psn, lid: 0, gid: nic.gid.raw }
    }

    pub fn max_inline(&self) -> u32 {
        self.inline
    }

    /// INIT → RTR → RTS towards `remote`.
    pub fn connect(&mut self, nic: &Nic, remote: &Endpoint) -> Result<(), VerbsError> {
        let mut ah = AddressHandleAttribute::new();
        ah.setup_port(nic.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(nic.gid_index)
            .setup_grh_dest_gid(&Gid { raw: remote.gid })
            .setup_grh_hop_limit(64);
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(nic.caps.mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(nic.caps.max_dest_rd_atomic)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        self.qp.modify(&a).map_err(|e| device_error("QP to RTR", e))?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(nic.caps.max_rd_atomic);
        self.qp.modify(&a).map_err(|e| device_error("QP to RTS", e))
    }

    /// Posts `wrs` with one doorbell; local buffers are in `staging` (registered as `mr`).
    /// Returns the wr_id of the last work request.
    fn post(&mut self, wrs: &[WorkRequest], staging: &Region, mr: &MemoryRegion) -> Result<u64, VerbsError> {
        let base = self.next_id;
        self.next_id += wrs.len() as u64;
        post_wrs(&mut self.qp, self.inline, wrs, base, staging, 0, mr.lkey())?;
        Ok(base + wrs.len() as u64 - 1)
    }

    /// Polls until the completion of `wr_id` (every earlier work request of this queue pair
    /// has then completed too). A failed work request is an error naming its status.
    fn wait(&mut self, wr_id: u64) -> Result<(), VerbsError> {
        for _ in 0..MAX_POLLS {
            let mut done = false;
            let mut failed = None;
            self.cq.poll(|c| {
                if c.status != 0 {
                    failed.get_or_insert(c);
                }
                done |= c.wr_id == wr_id;
            })?;
            if let Some(c) = failed {
                return Err(failed_completion(&c));
            }
            if done {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        Err(VerbsError::Protocol(format!("no completion for work request {wr_id}")))
    }

    /// Posts the planned work requests `wrs` with ids `first_id..`, local buffers in `staging`
    /// (registered as `lkey`) at their plan offsets plus `staging_offset`.
    pub fn post_planned(
        &mut self,
        wrs: &[WorkRequest],
        first_id: u64,
        staging: &Region,
        staging_offset: u64,
        lkey: u32,
    ) -> Result<(), VerbsError> {
        post_wrs(&mut self.qp, self.inline, wrs, first_id, staging, staging_offset, lkey)
    }

    /// Posts one SEND of `len` bytes at `offset` of `region` (registered as `lkey`).
    pub fn post_send(
        &mut self,
        wr_id: u64,
        region: &Region,
        offset: u64,
        len: u32,
        lkey: u32,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let flags = if signaled { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
        let mut g = self.qp.start_post_send();
        if len <= self.inline {
            let data = region.read_at(offset as usize, len as usize);
            g.construct_wr(wr_id, flags).setup_send().setup_inline_data(&data);
        } else {
            let h = g.construct_wr(wr_id, flags).setup_send();
            // SAFETY: inside the registered region, which the caller keeps until completion.
            unsafe { h.setup_sge(lkey, region.addr() + offset, len) }
        }
        g.post().map_err(|e| device_error("post_send", e))
    }

    /// Posts one RECV into `len` bytes at `offset` of `region` (registered as `lkey`).
    pub fn post_recv(
        &mut self,
        wr_id: u64,
        region: &Region,
        offset: u64,
        len: u32,
        lkey: u32,
    ) -> Result<(), VerbsError> {
        assert!(offset as usize + len as usize <= region.len(), "receive buffer out of range");
        let mut g = self.qp.start_post_recv();
        let h = g.construct_wr(wr_id);
        // SAFETY: inside the registered region, which the caller keeps until completion.
        unsafe { h.setup_sge(lkey, region.addr() + offset, len) }
        g.post().map_err(|e| device_error("post_recv", e))
    }
}

/// A failed completion as an error.
pub fn failed_completion(c: &Completion) -> VerbsError {
    VerbsError::Protocol(format!(
        "work request {} failed with status {} (vendor error {})",
        c.wr_id, c.status, c.vendor_err
    ))
}

/// Posts `wrs` on `qp` with one doorbell (ids `first_id..`).
fn post_wrs(
    qp: &mut GenericQueuePair,
    max_inline: u32,
    wrs: &[WorkRequest],
    first_id: u64,
    staging: &Region,
    staging_offset: u64,
    lkey: u32,
) -> Result<(), VerbsError> {
    if wrs.is_empty() {
        // An empty guard must not be posted (sideway would hand libibverbs a dangling list).
        return Err(VerbsError::EmptyBatch);
    }
    let mut g = qp.start_post_send();
    for (i, w) in wrs.iter().enumerate() {
        let mut flags = WorkRequestFlags::none();
        if w.fence {
            flags |= WorkRequestFlags::Fence;
        }
        if w.signaled {
            flags |= WorkRequestFlags::Signaled;
        }
        let offset = staging_offset + w.local_offset;
        let local = staging.addr() + offset;
        let h = g.construct_wr(first_id + i as u64, flags);
        match w.op {
            WrOp::Read => {
                let h = h.setup_read(w.rkey, w.remote_addr);
                // SAFETY: the slice is inside the registered staging region, which the caller
                // keeps until the completion that covers this work request.
                unsafe { h.setup_sge(lkey, local, w.len) }
            }
            WrOp::Write { inline } if inline && w.len <= max_inline => {
                let data = staging.read_at(offset as usize, w.len as usize);
                h.setup_write(w.rkey, w.remote_addr).setup_inline_data(&data)
            }
            WrOp::Write { .. } => {
                let h = h.setup_write(w.rkey, w.remote_addr);
                // SAFETY: as above.
                unsafe { h.setup_sge(lkey, local, w.len) }
            }
            WrOp::Cas { expect, swap } => {
                let h = h.setup_atomic_compare_swap(w.rkey, w.remote_addr, expect, swap);
                // SAFETY: as above; the slot is 8 bytes, 8-byte aligned.
                unsafe { h.setup_sge(lkey, local, 8) }
            }
            WrOp::Faa { add } => {
                let h = h.setup_atomic_fetch_add(w.rkey, w.remote_addr, add);
                // SAFETY: as above.
                unsafe { h.setup_sge(lkey, local, 8) }
            }
            WrOp::MaskedCas { .. } | WrOp::MaskedFaa { .. } => {
                return Err(VerbsError::Unsupported("native masked atomics (feature mlx5-masked)"));
            }
        }
    }
    g.post().map_err(|e| device_error("post_send", e))
}

/// Runs doorbell batches on one queue pair, blocking: the first, single-threaded executor of
/// the real backend, and what the Soft-RoCE integration tests drive.
pub struct BlockingExecutor {
    pub qp: RcQp,
    staging: Region,
    mr: Arc<MemoryRegion>,
    regions: super::plan::NodeRegions,
    caps: Caps,
}

impl std::fmt::Debug for BlockingExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingExecutor").field("qp", &self.qp).field("caps", &self.caps).finish()
    }
}

impl BlockingExecutor {
    /// `qp` connected to the node whose memory is `regions`; `staging_bytes` bounds a batch.
    pub fn new(
        nic: &Nic,
        qp: RcQp,
        regions: super::plan::NodeRegions,
        staging_bytes: usize,
    ) -> Result<BlockingExecutor, VerbsError> {
        let staging = Region::new(staging_bytes)?;
        let mr = nic.register(&staging, false)?;
        let caps = Caps {
            masked_atomics: MaskedAtomics::Emulated,
            device_memory_bytes: regions.device.map_or(0, |d| d.len),
            max_inline_bytes: qp.max_inline(),
            max_message_bytes: staging_bytes as u64,
            max_outstanding_reads_per_qp: nic.caps.max_rd_atomic as u32,
        };
        Ok(BlockingExecutor { qp, staging, mr, regions, caps })
    }

    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Runs one doorbell batch (`signaled`: wait for its completion; an unsignaled batch is
    /// posted and its completion collected by the next signalled one).
    pub fn execute(&mut self, requests: Vec<Request>, signaled: bool) -> Result<Vec<Response>, VerbsError> {
        let plan: Plan = plan_batch(&requests, &self.regions, &self.caps, signaled)?;
        if plan.staging_bytes > self.staging.len() as u64 {
            return Err(VerbsError::InvalidLength { addr: requests[0].addr, len: plan.staging_bytes });
        }
        for w in plan.work_requests() {
            if let Op::Write(b) = &requests[w.index].op {
                self.staging.write_at(w.local_offset as usize, b.as_slice());
            }
        }
        let mut olds: Vec<Option<u64>> = vec![None; requests.len()];
        for part in &plan.parts {
            match part {
                Part::Post(wrs) => {
                    let last = self.qp.post(wrs, &self.staging, &self.mr)?;
                    if signaled {
                        self.qp.wait(last)?;
                    }
                }
                Part::Emulate(i) => olds[*i] = Some(self.emulate(&requests[*i])?),
            }
        }
        if !signaled {
            return Ok(Vec::new());
        }
        let offsets: std::collections::HashMap<usize, u64> =
            plan.work_requests().map(|w| (w.index, w.local_offset)).collect();
        let mut out = Vec::with_capacity(requests.len());
        for (i, r) in requests.into_iter().enumerate() {
            out.push(match r.op {
                Op::Read(b) => Response::Read(Buf::from(self.staging.read_at(offsets[&i] as usize, b.len()))),
                Op::Write(b) => Response::Write(b),
                _ => Response::Atomic(match olds[i] {
                    Some(old) => old,
                    None => {
                        u64::from_le_bytes(self.staging.read_at(offsets[&i] as usize, 8).try_into().expect("8 bytes"))
                    }
                }),
            });
        }
        Ok(out)
    }

    /// A masked atomic as a READ and a CAS loop (linearizable with respect to other RMWs; see
    /// [`crate::emulate`]).
    fn emulate(&mut self, r: &Request) -> Result<u64, VerbsError> {
        let read = self.execute(vec![Request::read_len(r.addr, 8)], true)?;
        let mut old = read.into_iter().next().expect("one").into_buf()?.u64_at(0);
        for _ in 0..crate::emulate::MAX_CAS_ATTEMPTS {
            // A compare that fails leaves the word as it is: done, like the native verb.
            let Some(new) = r.op.rmw_new(old).filter(|&n| n != old) else { return Ok(old) };
            let seen = self.execute(vec![Request::cas(r.addr, old, new)], true)?[0].atomic()?;
            if seen == old {
                return Ok(old);
            }
            old = seen;
        }
        Err(VerbsError::Timeout(r.addr.node()))
    }
}

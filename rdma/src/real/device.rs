//! The device layer (feature `connectx`): an RDMA device opened through `sideway`, registered
//! memory (host memory, 2 MiB huge pages, and the NIC's device memory), RC queue pairs
//! connected from [`Endpoint`]s, and a blocking executor that runs a [`Plan`] on a queue pair
//! and returns each request's [`Response`].
//!
//! This is the first layer of the real backend (issue 12): one thread, one queue pair at a
//! time, completions polled by spinning. The async `Verbs` implementation (many clients per
//! thread, completions waking the right task) builds on it.
//!
//! Local buffers must be registered memory, so a request's bytes go through a registered
//! staging region laid out by [`plan_batch`]: WRITE payloads are copied in (or sent inline when
//! they fit the queue pair's inline limit), READ results and atomics' old words are copied out
//! after the completion. Masked atomics are emulated with a READ and a CAS loop on the same
//! queue pair, as [`crate::emulate`] does (Soft-RoCE and upstream rdma-core have none), unless
//! feature `mlx5-masked` is on and the device is a ConnectX: then they are native, one raw WQE
//! each ([`super::mlx5`]; untested without ConnectX hardware).
//!
//! - **Device memory** ([`DeviceMemory`]): `ibv_alloc_dm` and `ibv_reg_dm_mr` with zero-based
//!   addressing, so a peer's work request names offset `o` of it as remote address `o`, as a
//!   [`crate::RemoteAddr`] of region 1 does. [`DeviceCaps::max_dm_bytes`] is the device's
//!   `max_dm_size` (`ibv_query_device_ex`; 0 where the query or the memory is unsupported, as
//!   on Soft-RoCE). Untested without ConnectX hardware: Soft-RoCE has none.
//! - **Huge pages** ([`Region::huge`]): an anonymous `MAP_HUGETLB` mapping of 2 MiB pages,
//!   refused with a one-line reason ([`check_hugepages`]) when the kernel has too few free.
//!
//! Unsafe code is confined to the real backend: memory registration, scatter-gather entries
//! that point into registered memory, the staging region's allocation, the huge-page mapping,
//! device memory and the raw queries. Each site says why it is sound: the memory outlives every
//! work request that names it, because the executor waits for the completion that covers a
//! batch before it returns, and keeps the region until then.

#![allow(unsafe_code)]
// Without `mlx5-masked` a queue pair has one kind, and the matches over its kinds one arm.
#![cfg_attr(not(feature = "mlx5-masked"), allow(clippy::infallible_destructuring_match))]

use super::plan::{Part, Plan, WorkRequest, WrOp, plan_batch};
use super::wire::Endpoint;
use crate::{Buf, Caps, MaskedAtomics, Op, Request, Response, VerbsError};
use rdma_mummy_sys as sys;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{AtomicCapability, DeviceAttr, DeviceContext, Mtu};
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
    backing: Backing,
}

/// Where a [`Region`]'s bytes come from.
#[derive(Debug)]
enum Backing {
    /// The global allocator, 4 KiB-aligned.
    Heap(Layout),
    /// An anonymous mapping of 2 MiB huge pages, this many bytes (whole pages).
    Huge(usize),
}

// SAFETY: `Region` owns its allocation exclusively (like a `Box<[u8]>`); the NIC's accesses are
// synchronised by completions, which the executor waits for.
unsafe impl Send for Region {}

/// The huge pages `--hugepages` maps: 2 MiB each.
pub const HUGE_PAGE_BYTES: u64 = 2 << 20;

/// Where the kernel counts its 2 MiB huge pages.
const HUGE_PAGES_DIR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// Whether `bytes` (rounded up to whole 2 MiB pages) of huge pages can be mapped now: the
/// number of pages, or why not, in one line (too few free pages, and how many to configure;
/// a kernel without 2 MiB huge pages).
pub fn check_hugepages(bytes: u64) -> Result<u64, String> {
    let pages = bytes.div_ceil(HUGE_PAGE_BYTES);
    let read = |file: &str| {
        std::fs::read_to_string(format!("{HUGE_PAGES_DIR}/{file}")).ok().and_then(|s| s.trim().parse::<u64>().ok())
    };
    let (Some(total), Some(free)) = (read("nr_hugepages"), read("free_hugepages")) else {
        return Err(format!("this kernel offers no 2 MiB huge pages (no {HUGE_PAGES_DIR})"));
    };
    // Free pages another mapping has reserved are not ours to take.
    let available = free.saturating_sub(read("resv_hugepages").unwrap_or(0));
    if available < pages {
        return Err(format!(
            "{bytes} bytes need {pages} huge pages of 2 MiB and {available} are free \
             (vm.nr_hugepages is {total}): raise it to at least {}, e.g. sysctl -w vm.nr_hugepages={}",
            total + (pages - available),
            total + (pages - available),
        ));
    }
    Ok(pages)
}

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
        Ok(Region { ptr, backing: Backing::Heap(layout) })
    }

    /// `len` zeroed bytes on 2 MiB huge pages (`MAP_HUGETLB`), rounded up to whole pages, so
    /// [`Region::len`] may exceed `len`. Errors, with the reason in one line: 0 bytes, too few
    /// free huge pages ([`check_hugepages`]), a failed mapping.
    pub fn huge(len: usize) -> Result<Region, VerbsError> {
        if len == 0 {
            return Err(VerbsError::Protocol("a region of 0 bytes".into()));
        }
        let pages = check_hugepages(len as u64).map_err(|e| VerbsError::Protocol(format!("huge pages: {e}")))?;
        let mapped = usize::try_from(pages * HUGE_PAGE_BYTES)
            .map_err(|_| VerbsError::Protocol(format!("huge pages: {len} bytes do not fit this machine")))?;
        // SAFETY: a fresh anonymous private mapping (no address hint, no file): it aliases
        // nothing, and is unmapped once, in `drop`. The kernel zeroes huge pages, and a private
        // hugetlb mapping reserves its pages when it is made, so touching them cannot fault
        // for want of pages later.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(VerbsError::Protocol(format!(
                "huge pages: cannot map {pages} huge pages of 2 MiB: {}",
                std::io::Error::last_os_error()
            )));
        }
        let ptr = NonNull::new(ptr as *mut u8).ok_or(VerbsError::Protocol("huge pages: mmap gave null".into()))?;
        Ok(Region { ptr, backing: Backing::Huge(mapped) })
    }

    pub fn len(&self) -> usize {
        match self.backing {
            Backing::Heap(layout) => layout.size(),
            Backing::Huge(mapped) => mapped,
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether the region is on huge pages.
    pub fn is_huge(&self) -> bool {
        matches!(self.backing, Backing::Huge(_))
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
        match self.backing {
            // SAFETY: allocated in `new` with this layout.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr.as_ptr(), layout) },
            Backing::Huge(mapped) => {
                // SAFETY: mapped in `huge` with this length, unmapped only here.
                let ret = unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, mapped) };
                debug_assert_eq!(ret, 0, "munmap of a huge-page region");
            }
        }
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
    /// The device memory the NIC has (`ibv_query_device_ex`'s `max_dm_size`): 0 where the
    /// query does not report it, as on Soft-RoCE.
    pub max_dm_bytes: u64,
    /// How this NIC's queue pairs do masked atomics: [`MaskedAtomics::Native`] only with
    /// feature `mlx5-masked` on an mlx5 device (ConnectX), else emulated.
    pub masked_atomics: MaskedAtomics,
}

/// An opened device and port with its RoCE v2 GID and a protection domain.
pub struct Nic {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    port: u8,
    gid_index: u8,
    gid: Gid,
    caps: DeviceCaps,
    /// Queue pairs of the extended work-request API ([`super::mlx5::DvQp`]): always with native
    /// masked atomics; on request otherwise ([`Nic::use_extended_queue_pairs`]).
    #[cfg(feature = "mlx5-masked")]
    extended_qps: bool,
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

/// The device's attributes (`ibv_query_device_ex`) from a zeroed struct, so the fields a
/// provider does not fill (`max_dm_size` where the extended query is unsupported and only the
/// basic one answers) read 0.
fn query_device(ctx: &DeviceContext) -> Result<DeviceAttr, VerbsError> {
    // SAFETY: a zeroed `ibv_device_attr_ex` is a valid out-parameter (plain integers); the
    // context is open while `ctx` is borrowed; a null input selects the default query.
    let (ret, attr) = unsafe {
        let mut attr: sys::ibv_device_attr_ex = std::mem::zeroed();
        let ret = sys::ibv_query_device_ex(ctx.context().as_ptr(), std::ptr::null(), &mut attr);
        (ret, attr)
    };
    match ret {
        0 => Ok(DeviceAttr { attr }),
        e => Err(device_error("query_device", std::io::Error::from_raw_os_error(e))),
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
        let attr = query_device(&ctx)?;
        let port_attr = ctx.query_port(port).map_err(|e| device_error(&format!("port {port}"), e))?;
        let table = ctx.query_gid_table().map_err(|e| device_error("GID table", e))?;
        let entry = table.iter().filter(|e| e.port_num() == port as u32).find(|e| match gid_index {
            Some(i) => e.gid_index() == i as u32,
            None => e.gid_type() == GidType::RoceV2 && Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some(),
        });
        let entry = entry.ok_or_else(|| device_error("no usable GID", format!("port {port}, index {gid_index:?}")))?;
        let pd = ctx.alloc_pd().map_err(|e| device_error("alloc_pd", e))?;
        let clamp = |v: i32| v.clamp(1, 16) as u8;
        #[cfg(feature = "mlx5-masked")]
        let native = super::mlx5::is_mlx5(&ctx, &ctx.name());
        #[cfg(not(feature = "mlx5-masked"))]
        let native = false;
        let caps = DeviceCaps {
            name: ctx.name(),
            atomics: attr.atomic_capability() != AtomicCapability::None,
            max_dest_rd_atomic: clamp(attr.max_qp_rd_atom()),
            max_rd_atomic: clamp(attr.max_qp_init_rd_atom()),
            mtu: port_attr.active_mtu(),
            max_dm_bytes: attr.attr.max_dm_size,
            masked_atomics: if native { MaskedAtomics::Native } else { MaskedAtomics::Emulated },
        };
        Ok(Nic {
            ctx,
            pd,
            port,
            gid_index: entry.gid_index() as u8,
            gid: entry.gid(),
            caps,
            #[cfg(feature = "mlx5-masked")]
            extended_qps: native,
        })
    }

    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// Makes every queue pair created from now on one of the extended work-request API
    /// ([`super::mlx5::DvQp`], created with `ibv_create_qp_ex`), as native masked atomics use
    /// on ConnectX, on a device that is not one: masked atomics stay emulated, and everything
    /// else of that path runs, so Soft-RoCE can test it.
    #[cfg(feature = "mlx5-masked")]
    pub fn use_extended_queue_pairs(&mut self) {
        self.extended_qps = true;
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
        #[cfg(feature = "mlx5-masked")]
        if self.extended_qps {
            return self.extended_queue_pair(cq, recv_cq, depth, psn);
        }
        // The provider refuses an inline size it cannot grant: ask for less until it agrees.
        let mut last = None;
        let mut qp: Option<GenericQueuePair> = None;
        for inline in INLINE_ASKS {
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
        Ok(RcQp { qp: Qp::Verbs(qp), cq, inline, psn: psn & 0xff_ffff, next_id: 0 })
    }

    /// [`Nic::queue_pair_split`] with the extended work-request API: `mlx5dv_create_qp` with
    /// raw WQEs where masked atomics are native, `ibv_create_qp_ex` otherwise.
    #[cfg(feature = "mlx5-masked")]
    fn extended_queue_pair(&self, cq: Cq, recv_cq: Cq, depth: u32, psn: u32) -> Result<RcQp, VerbsError> {
        let mlx5 = self.caps.masked_atomics == MaskedAtomics::Native;
        let mut last = String::new();
        for inline in INLINE_ASKS {
            match super::mlx5::DvQp::create(&self.ctx, &self.pd, &cq.0, &recv_cq.0, depth, inline, mlx5) {
                Ok(mut qp) => {
                    qp.init(self.port).map_err(|e| device_error("QP to INIT", e))?;
                    let inline = qp.max_inline();
                    return Ok(RcQp { qp: Qp::Dv(qp), cq, inline, psn: psn & 0xff_ffff, next_id: 0 });
                }
                Err(e) => last = e,
            }
        }
        Err(device_error("create QP", last))
    }
}

/// Inline sizes a new queue pair asks for, largest first, until the provider grants one.
const INLINE_ASKS: [u32; 4] = [256, 128, 64, 0];

/// Device memory: bytes on the NIC itself (ConnectX "MEMIC"; an RMW there skips PCIe), as a
/// memory node serves it as region 1 of its [`crate::RemoteAddr`]s. Allocated with
/// `ibv_alloc_dm`, zeroed (as the simulator's device memory starts), and registered with
/// `ibv_reg_dm_mr` zero-based for local and remote READs, WRITEs and atomics: a peer names
/// offset `o` as remote address `o` with [`DeviceMemory::rkey`].
///
/// **Untested without ConnectX hardware**: Soft-RoCE has no device memory (`ibv_alloc_dm`
/// fails with "operation not supported"), so only that refusal has run.
pub struct DeviceMemory {
    dm: NonNull<sys::ibv_dm>,
    mr: NonNull<sys::ibv_mr>,
    len: u64,
    /// Kept so the protection domain and its device outlive the registration.
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the handles are owned by this value alone; libibverbs calls on them are thread-safe,
// and nothing here hands out references into the device memory.
unsafe impl Send for DeviceMemory {}
// SAFETY: as above; `&self` methods only read the handles' fields.
unsafe impl Sync for DeviceMemory {}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory").field("len", &self.len).field("rkey", &self.rkey()).finish()
    }
}

impl DeviceMemory {
    /// `len` bytes of `nic`'s device memory (rounded down to whole 64-byte units, the
    /// allocation unit of ConnectX device memory), zeroed and registered. Errors: none left to
    /// allocate, a device without device memory (Soft-RoCE), a failed registration or zeroing.
    pub fn new(nic: &Nic, len: u64) -> Result<DeviceMemory, VerbsError> {
        let len = len / 64 * 64;
        if len == 0 {
            return Err(device_error("device memory", "the NIC has none"));
        }
        let bytes = usize::try_from(len).map_err(|_| device_error("device memory", format!("{len} bytes")))?;
        let mut attr = sys::ibv_alloc_dm_attr { length: bytes, log_align_req: 0, comp_mask: 0 };
        // SAFETY: the context is open while `nic` is borrowed; the attribute struct lives for
        // the call; a null result is checked before use.
        let dm = unsafe { sys::ibv_alloc_dm(nic.ctx.context().as_ptr(), &mut attr) };
        let dm = NonNull::new(dm).ok_or_else(|| {
            device_error(&format!("ibv_alloc_dm of {len} bytes of device memory"), std::io::Error::last_os_error())
        })?;
        let zeros = vec![0u8; 4096];
        let mut at = 0usize;
        while at < bytes {
            let n = zeros.len().min(bytes - at);
            // SAFETY: `[at, at + n)` is inside the allocation, offset and length are multiples
            // of 4 (as the provider requires); the source lives for the call.
            let ret = unsafe { sys::ibv_memcpy_to_dm(dm.as_ptr(), at as u64, zeros.as_ptr() as *const _, n) };
            if ret != 0 {
                // SAFETY: allocated above, not registered, freed once.
                unsafe { sys::ibv_free_dm(dm.as_ptr()) };
                return Err(device_error("zeroing device memory", std::io::Error::from_raw_os_error(ret)));
            }
            at += n;
        }
        use sys::ibv_access_flags as acc;
        let access = acc::IBV_ACCESS_LOCAL_WRITE
            | acc::IBV_ACCESS_REMOTE_WRITE
            | acc::IBV_ACCESS_REMOTE_READ
            | acc::IBV_ACCESS_REMOTE_ATOMIC
            | acc::IBV_ACCESS_ZERO_BASED;
        // SAFETY: the protection domain and the device memory are live; `[0, len)` is the
        // whole allocation; a null result is checked before use.
        let mr = unsafe { sys::ibv_reg_dm_mr(nic.pd.pd().as_ptr(), dm.as_ptr(), 0, bytes, access.0) };
        let Some(mr) = NonNull::new(mr) else {
            let e = std::io::Error::last_os_error();
            // SAFETY: allocated above, not registered, freed once.
            unsafe { sys::ibv_free_dm(dm.as_ptr()) };
            return Err(device_error(&format!("ibv_reg_dm_mr of {len} bytes of device memory"), e));
        };
        Ok(DeviceMemory { dm, mr, len, _pd: nic.pd.clone() })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: the registration is live while `self` is.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    /// The region as a peer addresses it (the handshake's welcome): zero-based.
    pub fn remote(&self) -> super::plan::RemoteRegion {
        super::plan::RemoteRegion { addr: 0, rkey: self.rkey(), len: self.len }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: registered and allocated in `new`, released once, the registration first.
        unsafe {
            if sys::ibv_dereg_mr(self.mr.as_ptr()) != 0 {
                eprintln!("RDMA device: deregistering device memory failed");
            }
            if sys::ibv_free_dm(self.dm.as_ptr()) != 0 {
                eprintln!("RDMA device: freeing device memory failed");
            }
        }
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
    qp: Qp,
    cq: Cq,
    /// The inline size the provider granted.
    inline: u32,
    psn: u32,
    next_id: u64,
}

/// The queue pair of an [`RcQp`]: sideway's, or (feature `mlx5-masked`) one of the
/// extended work-request API that can post raw mlx5 WQEs.
enum Qp {
    Verbs(GenericQueuePair),
    #[cfg(feature = "mlx5-masked")]
    Dv(super::mlx5::DvQp),
}

impl Qp {
    fn qp_number(&self) -> u32 {
        match self {
            Qp::Verbs(qp) => qp.qp_number(),
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(qp) => qp.qp_number(),
        }
    }
}

impl std::fmt::Debug for RcQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.qp {
            Qp::Verbs(_) => "verbs",
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(qp) if qp.has_raw_wqe() => "mlx5 direct verbs",
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(_) => "extended verbs",
        };
        f.debug_struct("RcQp")
            .field("qpn", &self.qp.qp_number())
            .field("kind", &kind)
            .field("inline", &self.inline)
            .finish()
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

    /// Whether this queue pair posts masked atomics natively (one raw mlx5 WQE each).
    pub fn native_masked_atomics(&self) -> bool {
        match &self.qp {
            Qp::Verbs(_) => false,
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(qp) => qp.has_raw_wqe(),
        }
    }

    /// INIT → RTR → RTS towards `remote`.
    pub fn connect(&mut self, nic: &Nic, remote: &Endpoint) -> Result<(), VerbsError> {
        let qp = match &mut self.qp {
            Qp::Verbs(qp) => qp,
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(qp) => {
                let c = &nic.caps;
                return qp
                    .connect(
                        nic.port,
                        nic.gid_index,
                        c.mtu as u32,
                        c.max_dest_rd_atomic,
                        c.max_rd_atomic,
                        self.psn,
                        remote,
                    )
                    .map_err(|e| device_error("connect QP", e));
            }
        };
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
        qp.modify(&a).map_err(|e| device_error("QP to RTR", e))?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(nic.caps.max_rd_atomic);
        qp.modify(&a).map_err(|e| device_error("QP to RTS", e))
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
        let qp = match &mut self.qp {
            Qp::Verbs(qp) => qp,
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(qp) => {
                let data = (len <= self.inline).then(|| region.read_at(offset as usize, len as usize));
                assert!(offset as usize + len as usize <= region.len(), "send buffer out of range");
                let op =
                    super::mlx5::DvOp::Send { local_addr: region.addr() + offset, lkey, len, inline: data.as_deref() };
                // SAFETY: inside the registered region, which the caller keeps until completion.
                return unsafe { qp.post(&[(wr_id, signaled, false, op)]) }.map_err(|e| device_error("post_send", e));
            }
        };
        let flags = if signaled { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
        let mut g = qp.start_post_send();
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
        let qp = match &mut self.qp {
            Qp::Verbs(qp) => qp,
            #[cfg(feature = "mlx5-masked")]
            Qp::Dv(qp) => {
                // SAFETY: inside the registered region, which the caller keeps until completion.
                return unsafe { qp.post_recv(wr_id, region.addr() + offset, len, lkey) }
                    .map_err(|e| device_error("post_recv", e));
            }
        };
        let mut g = qp.start_post_recv();
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
    qp: &mut Qp,
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
    let qp = match qp {
        Qp::Verbs(qp) => qp,
        #[cfg(feature = "mlx5-masked")]
        Qp::Dv(qp) => return post_wrs_dv(qp, max_inline, wrs, first_id, staging, staging_offset, lkey),
    };
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
                return Err(VerbsError::Unsupported("native masked atomics (feature mlx5-masked on a ConnectX)"));
            }
        }
    }
    g.post().map_err(|e| device_error("post_send", e))
}

/// [`post_wrs`] on a queue pair of the extended API: masked atomics become raw mlx5 WQEs
/// ([`super::mlx5`]), the rest `ibv_wr_*` calls, all behind one doorbell.
#[cfg(feature = "mlx5-masked")]
fn post_wrs_dv(
    qp: &mut super::mlx5::DvQp,
    max_inline: u32,
    wrs: &[WorkRequest],
    first_id: u64,
    staging: &Region,
    staging_offset: u64,
    lkey: u32,
) -> Result<(), VerbsError> {
    use super::mlx5::{self, DvOp, WqeTarget};
    let qpn = qp.qp_number();
    let local = |w: &WorkRequest| staging.addr() + staging_offset + w.local_offset;
    // What the operations borrow: inline payloads and raw WQEs, built first.
    let mut inline = Vec::with_capacity(wrs.len());
    let mut raw = Vec::with_capacity(wrs.len());
    for w in wrs {
        let offset = (staging_offset + w.local_offset) as usize;
        assert!(offset + w.len as usize <= staging.len(), "a work request outside its staging region");
        inline.push(match w.op {
            WrOp::Write { inline: true } if w.len <= max_inline => Some(staging.read_at(offset, w.len as usize)),
            _ => None,
        });
        let target = WqeTarget {
            qpn,
            signaled: w.signaled,
            fence: w.fence,
            remote_addr: w.remote_addr,
            rkey: w.rkey,
            local_addr: local(w),
            lkey,
        };
        raw.push(match w.op {
            WrOp::MaskedCas { compare, compare_mask, swap, swap_mask } => {
                Some(mlx5::masked_cas(&target, compare, compare_mask, swap, swap_mask))
            }
            WrOp::MaskedFaa { add, boundary_mask } => Some(mlx5::masked_faa(&target, add, boundary_mask)),
            _ => None,
        });
    }
    if raw.iter().any(Option::is_some) && !qp.has_raw_wqe() {
        return Err(VerbsError::Unsupported("native masked atomics on a queue pair without mlx5 direct verbs"));
    }
    let ops: Vec<_> = wrs
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let (rkey, remote_addr, local_addr, len) = (w.rkey, w.remote_addr, local(w), w.len);
            let op = match (w.op, &raw[i]) {
                (_, Some(wqe)) => DvOp::Raw(wqe),
                (WrOp::Read, None) => DvOp::Read { rkey, remote_addr, local_addr, lkey, len },
                (WrOp::Write { .. }, None) => {
                    DvOp::Write { rkey, remote_addr, local_addr, lkey, len, inline: inline[i].as_deref() }
                }
                (WrOp::Cas { expect, swap }, None) => DvOp::Cas { rkey, remote_addr, local_addr, lkey, expect, swap },
                (WrOp::Faa { add }, None) => DvOp::Faa { rkey, remote_addr, local_addr, lkey, add },
                (WrOp::MaskedCas { .. } | WrOp::MaskedFaa { .. }, None) => unreachable!("encoded above"),
            };
            (first_id + i as u64, w.signaled, w.fence, op)
        })
        .collect();
    // SAFETY: every local slice is inside the registered staging region (checked above), which
    // the caller keeps until the completion that covers these work requests.
    unsafe { qp.post(&ops) }.map_err(|e| device_error("post_send", e))
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
        let masked_atomics = if qp.native_masked_atomics() { MaskedAtomics::Native } else { MaskedAtomics::Emulated };
        let caps = Caps {
            masked_atomics,
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

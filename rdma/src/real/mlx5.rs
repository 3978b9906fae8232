//! Native masked atomics on ConnectX (mlx5 direct verbs), behind feature `mlx5-masked`.
//!
//! **Untested without ConnectX hardware.** These machines have none, and Soft-RoCE has no
//! masked atomics: the WQE byte layout below is unit-tested, and with `mlx5-masked` on a
//! device that is not mlx5 the queue pair code runs its extended-verbs path (no raw WQE),
//! which the Soft-RoCE tests can exercise; a masked atomic itself has never reached a NIC.
//!
//! Upstream rdma-core has no masked-atomic verb (the `ibv_exp_*` ones were MLNX_OFED 4.x
//! only), so a masked CAS or FAA is a hand-built work queue entry posted with
//! `mlx5dv_wr_raw_wqe` on a queue pair created by `mlx5dv_create_qp` with
//! `MLX5DV_QP_EX_WITH_RAW_WQE`; every other verb of that queue pair goes through the
//! extended work-request API (`ibv_wr_*`), so the two kinds interleave in one doorbell.
//!
//! # The WQE ([`masked_cas`], [`masked_faa`])
//!
//! Segments of 16 bytes, every field big-endian (the ConnectX PRM's "extended atomic"
//! operations; the same layout UCX's `rc_mlx5` posts):
//!
//! | bytes | masked CAS (5 segments, 80 bytes) | masked FAA (4 segments, 64 bytes) |
//! |---|---|---|
//! | 0..16 | control: `opmod << 24 \| wqe_index << 8 \| opcode`, `qpn << 8 \| ds`, signature, stream id, `fm_ce_se`, imm | the same |
//! | 16..32 | remote address (8), rkey (4), reserved (4) | the same |
//! | 32..48 | swap (8), compare (8) | add (8), field boundary (8) |
//! | 48..64 | swap mask (8), compare mask (8) | data: byte count (4), lkey (4), local address (8) |
//! | 64..80 | data: byte count (4), lkey (4), local address (8) | — |
//!
//! - opcode `0x14` (masked compare-and-swap) or `0x15` (masked fetch-and-add);
//! - opmod `0x08 | (log2(argument bytes) - 2)` = `0x09` for 8-byte arguments ("extended
//!   atomic, size 2^3");
//! - `ds`, the WQE's size in 16-byte segments; the driver reads exactly `ds * 16` bytes;
//! - `fm_ce_se`: `0x08` asks for a completion (`MLX5_WQE_CTRL_CQ_UPDATE`), `0x80` is the
//!   fence `IBV_SEND_FENCE` sets (`MLX5_WQE_CTRL_FENCE`); the raw-WQE call ignores the work
//!   request's flags, so both are written here;
//! - the WQE index and the signature are the driver's (left 0); the QP number is the
//!   caller's.
//!
//! The memory word is a little-endian `u64` as for plain atomics: the kernel's mlx5 driver
//! puts 8-byte atomics in host-endianness mode where the device supports it, and the old word
//! lands in the local buffer as a plain CAS's does. A device without that mode would swap the
//! bytes of memory and result alike; this is one of the things only hardware can confirm.
//!
//! With the feature on, an mlx5 device's queue pairs are all of this kind: if its rdma-core
//! cannot create one with raw WQEs, the first queue pair fails with that reason (build without
//! the feature to emulate instead).
//!
//! The responder needs nothing beyond remote-atomic access: its kernel driver configures a
//! queue pair's atomic mode for extended atomics when the device has them. Every node of a
//! cluster that uses native masked atomics must therefore be a ConnectX (ConnectX-4 or later)
//! whose `atomic_operations` capability includes masked compare-and-swap and fetch-and-add.

/// `fm_ce_se`: the work request produces a completion (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub const CTRL_CQ_UPDATE: u8 = 2 << 2;
/// `fm_ce_se`: the fence mode `IBV_SEND_FENCE` selects (`MLX5_WQE_CTRL_FENCE`).
pub const CTRL_FENCE: u8 = 4 << 5;
/// Masked compare-and-swap (`MLX5_OPCODE_ATOMIC_MASKED_CS`).
pub const OPCODE_ATOMIC_MASKED_CS: u8 = 0x14;
/// Masked fetch-and-add (`MLX5_OPCODE_ATOMIC_MASKED_FA`).
pub const OPCODE_ATOMIC_MASKED_FA: u8 = 0x15;
/// The opmod of an extended atomic with 8-byte arguments: `0x08 | (3 - 2)`.
pub const OPMOD_EXT_ATOMIC_8B: u8 = 0x08 | (3 - 2);
/// Bytes of a WQE segment (the unit of `ds`).
pub const SEGMENT_BYTES: usize = 16;

/// Where a masked atomic goes and what it reports: everything of the WQE but the operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeTarget {
    /// The sending queue pair's number (24 bits).
    pub qpn: u32,
    /// Ask for a completion.
    pub signaled: bool,
    /// Wait for the send queue's earlier READs and atomics (`IBV_SEND_FENCE`).
    pub fence: bool,
    pub remote_addr: u64,
    pub rkey: u32,
    /// The 8-byte local buffer the old word lands in, and its registration's lkey.
    pub local_addr: u64,
    pub lkey: u32,
}

/// One encoded WQE: [`Wqe::bytes`] is what `mlx5dv_wr_raw_wqe` is given. Aligned like the
/// driver's control segment, which it reads in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Wqe {
    buf: [u8; 5 * SEGMENT_BYTES],
    segments: u8,
}

impl Wqe {
    /// The WQE's bytes: `segments() * 16` of them.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.segments as usize * SEGMENT_BYTES]
    }

    /// Its size in 16-byte segments (the control segment's `ds`).
    pub fn segments(&self) -> u8 {
        self.segments
    }

    fn new(opcode: u8, segments: u8, t: &WqeTarget) -> Wqe {
        let mut w = Wqe { buf: [0; 5 * SEGMENT_BYTES], segments };
        // Control segment. The WQE index (bits 8..24 of the first word) is the driver's.
        let opmod_idx_opcode = (OPMOD_EXT_ATOMIC_8B as u32) << 24 | opcode as u32;
        w.put(0, &opmod_idx_opcode.to_be_bytes());
        w.put(4, &((t.qpn & 0xff_ffff) << 8 | segments as u32).to_be_bytes());
        let mut fm_ce_se = 0;
        if t.signaled {
            fm_ce_se |= CTRL_CQ_UPDATE;
        }
        if t.fence {
            fm_ce_se |= CTRL_FENCE;
        }
        w.buf[11] = fm_ce_se;
        // Remote address segment.
        w.put(16, &t.remote_addr.to_be_bytes());
        w.put(24, &t.rkey.to_be_bytes());
        // Data segment (the last one): where the old word lands.
        let data = (segments as usize - 1) * SEGMENT_BYTES;
        w.put(data, &8u32.to_be_bytes());
        w.put(data + 4, &t.lkey.to_be_bytes());
        w.put(data + 8, &t.local_addr.to_be_bytes());
        w
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// A masked compare-and-swap of the 8-byte word at `t.remote_addr`: compare the bits of
/// `compare_mask`, and on equality replace the bits of `swap_mask` (see
/// [`crate::atomics::masked_cas`]); the whole old word lands at `t.local_addr`.
pub fn masked_cas(t: &WqeTarget, compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) -> Wqe {
    let mut w = Wqe::new(OPCODE_ATOMIC_MASKED_CS, 5, t);
    w.put(32, &swap.to_be_bytes());
    w.put(40, &compare.to_be_bytes());
    w.put(48, &swap_mask.to_be_bytes());
    w.put(56, &compare_mask.to_be_bytes());
    w
}

/// A masked fetch-and-add of the 8-byte word at `t.remote_addr`: `add` with carries cut at
/// the set bits of `boundary_mask` (see [`crate::atomics::masked_faa`]); the old word lands at
/// `t.local_addr`.
pub fn masked_faa(t: &WqeTarget, add: u64, boundary_mask: u64) -> Wqe {
    let mut w = Wqe::new(OPCODE_ATOMIC_MASKED_FA, 4, t);
    w.put(32, &add.to_be_bytes());
    w.put(40, &boundary_mask.to_be_bytes());
    w
}

#[cfg(feature = "mlx5-masked")]
pub(super) use dv::{DvOp, DvQp, is_mlx5};

/// The queue pair of direct verbs: created with `mlx5dv_create_qp` (or, on a device that is
/// not mlx5, `ibv_create_qp_ex`), driven through the extended work-request API.
#[cfg(feature = "mlx5-masked")]
#[allow(unsafe_code)]
mod dv {
    use super::Wqe;
    use crate::real::wire::Endpoint;
    use rdma_mummy_sys as sys;
    use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
    use sideway::ibverbs::device_context::DeviceContext;
    use sideway::ibverbs::protection_domain::ProtectionDomain;
    use std::ptr::NonNull;
    use std::sync::Arc;

    /// Whether the device `name` is driven by the kernel's mlx5 driver and libmlx5 answers for
    /// it (the direct-verbs library is loaded at run time, like libibverbs).
    pub fn is_mlx5(ctx: &DeviceContext, name: &str) -> bool {
        let driver = std::fs::read_link(format!("/sys/class/infiniband/{name}/device/driver"));
        let mlx5_driver = driver.ok().and_then(|p| p.file_name().map(|f| f == "mlx5_core")).unwrap_or(false);
        if !mlx5_driver {
            return false;
        }
        // SAFETY: a zeroed `mlx5dv_context` (comp_mask 0: only the basic fields) is a valid
        // out-parameter; the context is open for the duration of the call (`ctx` borrows it).
        unsafe {
            let mut attrs: sys::mlx5dv_context = std::mem::zeroed();
            sys::mlx5dv_query_device(ctx.context().as_ptr(), &mut attrs) == 0
        }
    }

    /// One work request for [`DvQp::post`].
    #[derive(Clone, Copy, Debug)]
    pub enum DvOp<'a> {
        Read {
            rkey: u32,
            remote_addr: u64,
            local_addr: u64,
            lkey: u32,
            len: u32,
        },
        /// `inline`: the payload copied into the WQE (`local_*` unused then).
        Write {
            rkey: u32,
            remote_addr: u64,
            local_addr: u64,
            lkey: u32,
            len: u32,
            inline: Option<&'a [u8]>,
        },
        Cas {
            rkey: u32,
            remote_addr: u64,
            local_addr: u64,
            lkey: u32,
            expect: u64,
            swap: u64,
        },
        Faa {
            rkey: u32,
            remote_addr: u64,
            local_addr: u64,
            lkey: u32,
            add: u64,
        },
        Send {
            local_addr: u64,
            lkey: u32,
            len: u32,
            inline: Option<&'a [u8]>,
        },
        /// A hand-built WQE (mlx5 only): its own control segment says signalled and fenced.
        Raw(&'a Wqe),
    }

    /// An RC queue pair of the extended verbs, with the mlx5 raw-WQE builder when the device
    /// has it. Fields drop after `Drop` has destroyed the queue pair: the protection domain
    /// and completion queues it was created on outlive it.
    pub struct DvQp {
        qp: NonNull<sys::ibv_qp>,
        qpx: NonNull<sys::ibv_qp_ex>,
        mlx5: Option<NonNull<sys::mlx5dv_qp_ex>>,
        inline: u32,
        _pd: Arc<ProtectionDomain>,
        _cqs: (GenericCompletionQueue, GenericCompletionQueue),
    }

    // SAFETY: the queue pair is owned by this value alone; libibverbs' queue pairs may be used
    // from any thread, one at a time, which `&mut self` on every posting method ensures.
    unsafe impl Send for DvQp {}

    impl std::fmt::Debug for DvQp {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DvQp")
                .field("qpn", &self.qp_number())
                .field("mlx5", &self.mlx5.is_some())
                .field("inline", &self.inline)
                .finish()
        }
    }

    impl Drop for DvQp {
        fn drop(&mut self) {
            // SAFETY: created by `create`, destroyed once; nothing posts on it any more.
            let ret = unsafe { sys::ibv_destroy_qp(self.qp.as_ptr()) };
            if ret != 0 {
                eprintln!("RDMA device: destroy QP {}: error {ret}", self.qp_number());
            }
        }
    }

    fn os_error(ret: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(ret)
    }

    impl DvQp {
        /// An RC queue pair with `depth` send and receive entries, one SGE each, and `inline`
        /// bytes of inline data (or less: the granted size is [`DvQp::max_inline`]), in
        /// RESET. `mlx5`: create it with `mlx5dv_create_qp` and the raw-WQE builder.
        #[allow(clippy::too_many_arguments)]
        pub fn create(
            ctx: &DeviceContext,
            pd: &Arc<ProtectionDomain>,
            send_cq: &GenericCompletionQueue,
            recv_cq: &GenericCompletionQueue,
            depth: u32,
            inline: u32,
            mlx5: bool,
        ) -> Result<DvQp, String> {
            use sys::ibv_qp_create_send_ops_flags as ops;
            // SAFETY: every pointer in the attributes is a live handle borrowed for the call
            // (context, protection domain, completion queues); zeroed attribute structs are
            // valid C values (null pointers, zero masks); the returned queue pair is checked
            // for null before use.
            unsafe {
                let mut attr: sys::ibv_qp_init_attr_ex = std::mem::zeroed();
                attr.send_cq = send_cq.cq().as_ptr();
                attr.recv_cq = recv_cq.cq().as_ptr();
                attr.cap = sys::ibv_qp_cap {
                    // A masked CAS takes two 64-byte blocks of the ring, which the provider
                    // may have sized at one block a request (it counts requests, not blocks,
                    // when it checks for room): twice the requests leaves room for all of them.
                    max_send_wr: if mlx5 { 2 * depth } else { depth },
                    max_recv_wr: depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                };
                attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
                attr.sq_sig_all = 0;
                attr.comp_mask = (sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD
                    | sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
                    .0;
                attr.pd = pd.pd().as_ptr();
                attr.send_ops_flags = (ops::IBV_QP_EX_WITH_RDMA_WRITE
                    | ops::IBV_QP_EX_WITH_RDMA_READ
                    | ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                    | ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                    | ops::IBV_QP_EX_WITH_SEND)
                    .0 as u64;
                let qp = if mlx5 {
                    let mut dv: sys::mlx5dv_qp_init_attr = std::mem::zeroed();
                    dv.comp_mask = sys::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS.0 as u64;
                    dv.send_ops_flags = sys::mlx5dv_qp_create_send_ops_flags::MLX5DV_QP_EX_WITH_RAW_WQE.0 as u64;
                    sys::mlx5dv_create_qp(ctx.context().as_ptr(), &mut attr, &mut dv)
                } else {
                    sys::ibv_create_qp_ex(ctx.context().as_ptr(), &mut attr)
                };
                let qp = NonNull::new(qp).ok_or_else(|| {
                    let how = if mlx5 { "mlx5dv_create_qp with raw WQEs" } else { "ibv_create_qp_ex" };
                    format!("{how}: {}", std::io::Error::last_os_error())
                })?;
                // The provider wrote the capacities it granted back into `attr.cap`.
                let granted = attr.cap.max_inline_data;
                let Some(qpx) = NonNull::new(sys::ibv_qp_to_qp_ex(qp.as_ptr())) else {
                    sys::ibv_destroy_qp(qp.as_ptr());
                    return Err("ibv_qp_to_qp_ex: the queue pair has no extended API".into());
                };
                let dv = if mlx5 {
                    let dv = NonNull::new(sys::mlx5dv_qp_ex_from_ibv_qp_ex(qpx.as_ptr()));
                    if dv.is_none_or(|d| (*d.as_ptr()).wr_raw_wqe.is_none()) {
                        sys::ibv_destroy_qp(qp.as_ptr());
                        return Err("mlx5dv_qp_ex_from_ibv_qp_ex: no raw-WQE builder".into());
                    }
                    dv
                } else {
                    None
                };
                Ok(DvQp {
                    qp,
                    qpx,
                    mlx5: dv,
                    inline: granted,
                    _pd: pd.clone(),
                    _cqs: (send_cq.clone(), recv_cq.clone()),
                })
            }
        }

        pub fn qp_number(&self) -> u32 {
            // SAFETY: the queue pair is live while `self` is.
            unsafe { (*self.qp.as_ptr()).qp_num }
        }

        pub fn max_inline(&self) -> u32 {
            self.inline
        }

        /// Whether raw WQEs (native masked atomics) can be posted.
        pub fn has_raw_wqe(&self) -> bool {
            self.mlx5.is_some()
        }

        fn modify(&mut self, attr: &mut sys::ibv_qp_attr, mask: sys::ibv_qp_attr_mask) -> Result<(), String> {
            // SAFETY: the queue pair is live; `attr` is a valid attribute struct whose fields
            // named by `mask` are set.
            match unsafe { sys::ibv_modify_qp(self.qp.as_ptr(), attr, mask.0 as i32) } {
                0 => Ok(()),
                e => Err(os_error(e).to_string()),
            }
        }

        /// RESET → INIT on `port`, open to remote READs, WRITEs and atomics.
        pub fn init(&mut self, port: u8) -> Result<(), String> {
            use sys::ibv_access_flags as acc;
            use sys::ibv_qp_attr_mask as m;
            // SAFETY: an all-zero `ibv_qp_attr` is a valid value (states, numbers, null-free).
            let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
            a.pkey_index = 0;
            a.port_num = port;
            a.qp_access_flags = (acc::IBV_ACCESS_LOCAL_WRITE
                | acc::IBV_ACCESS_REMOTE_WRITE
                | acc::IBV_ACCESS_REMOTE_READ
                | acc::IBV_ACCESS_REMOTE_ATOMIC)
                .0;
            self.modify(&mut a, m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS)
        }

        /// INIT → RTR → RTS towards `remote` (RoCE: a global route to its GID), with the same
        /// timers and retry counts as the sideway queue pairs.
        #[allow(clippy::too_many_arguments)]
        pub fn connect(
            &mut self,
            port: u8,
            gid_index: u8,
            mtu: u32,
            max_dest_rd_atomic: u8,
            max_rd_atomic: u8,
            psn: u32,
            remote: &Endpoint,
        ) -> Result<(), String> {
            use sys::ibv_qp_attr_mask as m;
            // SAFETY: as in `init`; the GID union is written through its raw bytes.
            let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
            a.path_mtu = mtu;
            a.dest_qp_num = remote.qpn;
            a.rq_psn = remote.psn;
            a.max_dest_rd_atomic = max_dest_rd_atomic;
            a.min_rnr_timer = 12;
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = port;
            a.ah_attr.sl = 0;
            a.ah_attr.dlid = remote.lid;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = gid_index;
            a.ah_attr.grh.hop_limit = 64;
            self.modify(
                &mut a,
                m::IBV_QP_STATE
                    | m::IBV_QP_AV
                    | m::IBV_QP_PATH_MTU
                    | m::IBV_QP_DEST_QPN
                    | m::IBV_QP_RQ_PSN
                    | m::IBV_QP_MAX_DEST_RD_ATOMIC
                    | m::IBV_QP_MIN_RNR_TIMER,
            )
            .map_err(|e| format!("QP to RTR: {e}"))?;
            // SAFETY: as above.
            let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
            a.sq_psn = psn;
            a.timeout = 14;
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.max_rd_atomic = max_rd_atomic;
            self.modify(
                &mut a,
                m::IBV_QP_STATE
                    | m::IBV_QP_SQ_PSN
                    | m::IBV_QP_TIMEOUT
                    | m::IBV_QP_RETRY_CNT
                    | m::IBV_QP_RNR_RETRY
                    | m::IBV_QP_MAX_QP_RD_ATOMIC,
            )
            .map_err(|e| format!("QP to RTS: {e}"))
        }

        /// Posts `ops` with one doorbell (`ibv_wr_start` … `ibv_wr_complete`): each with its
        /// wr_id, signalled and fenced as given (a raw WQE carries its own flags). Nothing is
        /// posted if any of them cannot be.
        ///
        /// # Safety
        ///
        /// Every local address (`local_addr` with `lkey`, a raw WQE's data segment) must lie in
        /// memory registered under that key that stays allocated, and is not otherwise
        /// written, until the completion that covers its work request.
        pub unsafe fn post(&mut self, ops: &[(u64, bool, bool, DvOp<'_>)]) -> Result<(), String> {
            use sys::ibv_send_flags as f;
            let q = self.qpx.as_ptr();
            // SAFETY (the block): `q` is this live queue pair's extended handle; between
            // `ibv_wr_start` and `ibv_wr_complete` (or `ibv_wr_abort`) only builders and setters
            // run, one work request at a time, as the API requires; inline data is copied into
            // the WQE by the setter, so its slice need only live for the call; the caller
            // vouches for the local buffers (see `# Safety`).
            unsafe {
                sys::ibv_wr_start(q);
                for &(wr_id, signaled, fence, op) in ops {
                    (*q).wr_id = wr_id;
                    let mut flags = 0;
                    if signaled {
                        flags |= f::IBV_SEND_SIGNALED.0;
                    }
                    if fence {
                        flags |= f::IBV_SEND_FENCE.0;
                    }
                    // Inline data is set with its own setter, but a provider may still read
                    // the flag (Soft-RoCE's kernel side does: without it the bytes are taken
                    // for a scatter list); mlx5 ignores it.
                    if let DvOp::Write { inline: Some(_), .. } | DvOp::Send { inline: Some(_), .. } = op {
                        flags |= f::IBV_SEND_INLINE.0;
                    }
                    (*q).wr_flags = flags;
                    match op {
                        DvOp::Read { rkey, remote_addr, local_addr, lkey, len } => {
                            sys::ibv_wr_rdma_read(q, rkey, remote_addr);
                            sys::ibv_wr_set_sge(q, lkey, local_addr, len);
                        }
                        DvOp::Write { rkey, remote_addr, local_addr, lkey, len, inline } => {
                            sys::ibv_wr_rdma_write(q, rkey, remote_addr);
                            match inline {
                                Some(data) => sys::ibv_wr_set_inline_data(q, data.as_ptr() as *mut _, data.len()),
                                None => sys::ibv_wr_set_sge(q, lkey, local_addr, len),
                            }
                        }
                        DvOp::Cas { rkey, remote_addr, local_addr, lkey, expect, swap } => {
                            sys::ibv_wr_atomic_cmp_swp(q, rkey, remote_addr, expect, swap);
                            sys::ibv_wr_set_sge(q, lkey, local_addr, 8);
                        }
                        DvOp::Faa { rkey, remote_addr, local_addr, lkey, add } => {
                            sys::ibv_wr_atomic_fetch_add(q, rkey, remote_addr, add);
                            sys::ibv_wr_set_sge(q, lkey, local_addr, 8);
                        }
                        DvOp::Send { local_addr, lkey, len, inline } => {
                            sys::ibv_wr_send(q);
                            match inline {
                                Some(data) => sys::ibv_wr_set_inline_data(q, data.as_ptr() as *mut _, data.len()),
                                None => sys::ibv_wr_set_sge(q, lkey, local_addr, len),
                            }
                        }
                        DvOp::Raw(wqe) => match self.mlx5 {
                            Some(dv) => sys::mlx5dv_wr_raw_wqe(dv.as_ptr(), wqe.bytes().as_ptr() as *const _),
                            None => {
                                sys::ibv_wr_abort(q);
                                return Err("a raw WQE on a queue pair without mlx5 direct verbs".into());
                            }
                        },
                    }
                }
                match sys::ibv_wr_complete(q) {
                    0 => Ok(()),
                    e => Err(format!("post_send: {}", os_error(e))),
                }
            }
        }

        /// Posts one receive of `len` bytes at `addr` (registered under `lkey`).
        ///
        /// # Safety
        ///
        /// The buffer must stay allocated and registered, and not be read, until the receive
        /// completes (or the queue pair is destroyed).
        pub unsafe fn post_recv(&mut self, wr_id: u64, addr: u64, len: u32, lkey: u32) -> Result<(), String> {
            let mut sge = sys::ibv_sge { addr, length: len, lkey };
            let mut wr = sys::ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
            let mut bad = std::ptr::null_mut();
            // SAFETY: the work request and its SGE live for the call (the provider copies
            // them); the caller vouches for the buffer.
            match unsafe { sys::ibv_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) } {
                0 => Ok(()),
                e => Err(format!("post_recv: {}", os_error(e))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> WqeTarget {
        WqeTarget {
            qpn: 0x00ab_cdef,
            signaled: true,
            fence: false,
            remote_addr: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            local_addr: 0x0000_7f00_1234_5678,
            lkey: 0x0102_0304,
        }
    }

    fn be64(b: &[u8], at: usize) -> u64 {
        u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn a_masked_cas_is_five_segments_in_the_prm_layout() {
        let w = masked_cas(&target(), 0xaaaa, 0x00ff, 0xbbbb, 0xff00);
        let b = w.bytes();
        assert_eq!((w.segments(), b.len()), (5, 80));
        // Control: opmod 0x09 (extended atomic, 8 bytes), WQE index 0 (the driver's), opcode 0x14.
        assert_eq!(&b[0..4], &[0x09, 0x00, 0x00, 0x14]);
        // qpn << 8 | ds.
        assert_eq!(&b[4..8], &[0xab, 0xcd, 0xef, 0x05]);
        // Signature and stream id 0 (the driver's), fm_ce_se: a completion, no fence; imm 0.
        assert_eq!(&b[8..11], &[0, 0, 0]);
        assert_eq!(b[11], CTRL_CQ_UPDATE);
        assert_eq!(b[11], 0x08);
        assert_eq!(&b[12..16], &[0; 4]);
        // Remote address segment.
        assert_eq!(&b[16..24], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&b[24..28], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&b[28..32], &[0; 4]);
        // Operands: swap, compare, swap mask, compare mask, each big-endian.
        assert_eq!(be64(b, 32), 0xbbbb);
        assert_eq!(&b[38..40], &[0xbb, 0xbb]);
        assert_eq!(be64(b, 40), 0xaaaa);
        assert_eq!(be64(b, 48), 0xff00);
        assert_eq!(be64(b, 56), 0x00ff);
        // Data segment: 8 bytes, the lkey, the local address.
        assert_eq!(&b[64..68], &[0, 0, 0, 8]);
        assert_eq!(&b[68..72], &[0x01, 0x02, 0x03, 0x04]);
        assert_eq!(be64(b, 72), 0x0000_7f00_1234_5678);
    }

    #[test]
    fn a_masked_faa_is_four_segments_in_the_prm_layout() {
        let t = WqeTarget { signaled: false, fence: true, ..target() };
        let w = masked_faa(&t, 0x0000_0001_0000_0001, 1 << 63 | 1 << 31);
        let b = w.bytes();
        assert_eq!((w.segments(), b.len()), (4, 64), "one 64-byte basic block");
        assert_eq!(&b[0..4], &[0x09, 0x00, 0x00, 0x15]);
        assert_eq!(be32(b, 4), 0x00ab_cdef << 8 | 4);
        // A fence and no completion.
        assert_eq!(b[11], CTRL_FENCE);
        assert_eq!(b[11], 0x80);
        assert_eq!(be64(b, 16), 0x1122_3344_5566_7788);
        assert_eq!(be32(b, 24), 0xdead_beef);
        // Add, then the field boundaries.
        assert_eq!(be64(b, 32), 0x0000_0001_0000_0001);
        assert_eq!(be64(b, 40), 0x8000_0000_8000_0000);
        // The data segment follows at once.
        assert_eq!((be32(b, 48), be32(b, 52), be64(b, 56)), (8, 0x0102_0304, 0x0000_7f00_1234_5678));
    }

    #[test]
    fn flags_and_queue_pair_numbers_stay_in_their_fields() {
        let both = masked_cas(&WqeTarget { fence: true, ..target() }, 0, 0, 0, 0);
        assert_eq!(both.bytes()[11], 0x88);
        let neither = masked_faa(&WqeTarget { signaled: false, ..target() }, 0, 0);
        assert_eq!(neither.bytes()[11], 0);
        // A QP number is 24 bits: higher bits never reach the ds byte or beyond.
        let w = masked_cas(&WqeTarget { qpn: 0xff12_3456, ..target() }, 0, 0, 0, 0);
        assert_eq!(&w.bytes()[4..8], &[0x12, 0x34, 0x56, 0x05]);
        // The WQE is aligned as the driver reads its control segment in place.
        assert_eq!(std::mem::align_of::<Wqe>(), 16);
        assert_eq!(OPMOD_EXT_ATOMIC_8B, 0x09);
    }
}

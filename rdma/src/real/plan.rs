//! Work-request building: a doorbell batch of [`Request`]s turned into the work requests a
//! ConnectX (or Soft-RoCE) queue pair is given, without touching a device.
//!
//! The real backend copies each request's buffer into a registered staging area (a verb's
//! local buffer must be registered memory; registering every `Buf` would cost a system call per
//! verb), so a plan also lays out the staging area: each request gets an 8-byte-aligned slice,
//! atomics an 8-byte slot for the old word. Remote addresses become the memory node's virtual
//! addresses and rkeys from the handshake ([`NodeRegions`]).
//!
//! Masked atomics are native only behind the `mlx5-masked` feature; otherwise a batch is cut
//! around each masked request, which the backend emulates (READ, then a CAS loop,
//! [`crate::emulate`]) between the posts of the parts before and after it. Request order is kept,
//! and the extra verbs are the emulation's real cost.

use crate::{Caps, MaskedAtomics, NodeId, Op, Region, RemoteAddr, Request, VerbsError, validate_batch};

/// One registered remote region of a memory node, as its handshake announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    /// The region's virtual address on the memory node (offset 0 of the region).
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// Device memory of a node whose NIC has none: 0 bytes.
const NO_DEVICE_MEMORY: RemoteRegion = RemoteRegion { addr: 0, rkey: 0, len: 0 };

/// A memory node's regions: host memory, and device memory where its NIC has some (region 1
/// of its [`RemoteAddr`]s: registered zero-based, so `addr` is 0 and offset `o` is remote
/// address `o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRegions {
    pub host: RemoteRegion,
    pub device: Option<RemoteRegion>,
}

/// The opcode of one work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    /// RDMA READ into the staging slice.
    Read,
    /// RDMA WRITE from the staging slice; `inline` copies the payload into the WQE.
    Write { inline: bool },
    /// 8-byte compare-and-swap; the old word lands in the staging slot.
    Cas { expect: u64, swap: u64 },
    /// 8-byte fetch-and-add; the old word lands in the staging slot.
    Faa { add: u64 },
    /// ConnectX masked compare-and-swap (feature `mlx5-masked` only).
    MaskedCas { compare: u64, compare_mask: u64, swap: u64, swap_mask: u64 },
    /// ConnectX masked fetch-and-add (feature `mlx5-masked` only).
    MaskedFaa { add: u64, boundary_mask: u64 },
}

/// One work request, ready to be written into a send queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    /// Index of the request in the batch (the completion names it).
    pub index: usize,
    pub op: WrOp,
    pub remote_addr: u64,
    pub rkey: u32,
    /// Where the local buffer sits in the staging area, and its length.
    pub local_offset: u64,
    pub len: u32,
    /// `IBV_SEND_FENCE`: wait for earlier READs and atomics of the send queue.
    pub fence: bool,
    /// `IBV_SEND_SIGNALED`: this request produces a completion.
    pub signaled: bool,
}

/// A batch cut where masked atomics must be emulated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Work requests posted with one doorbell; the last is signalled unless the batch is
    /// unsignaled.
    Post(Vec<WorkRequest>),
    /// Request `index` is a masked atomic the backend emulates.
    Emulate(usize),
}

/// A planned batch: the node it goes to, its parts in order, and the staging bytes it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub node: NodeId,
    pub parts: Vec<Part>,
    pub staging_bytes: u64,
}

impl Plan {
    /// Every work request of the plan, in order.
    pub fn work_requests(&self) -> impl Iterator<Item = &WorkRequest> {
        self.parts.iter().flat_map(|p| match p {
            Part::Post(wrs) => wrs.as_slice(),
            Part::Emulate(_) => &[],
        })
    }
}

/// Plans `requests` (one doorbell batch to one node) for a queue pair to `regions`.
/// `signaled`: whether the last work request of each part asks for a completion (false for
/// `post_unsignaled`, whose completions the backend collects with the next signalled one).
///
/// Errors, before anything is posted: the checks of [`validate_batch`]; a range outside the
/// target region ([`VerbsError::OutOfRange`]), device memory (region 1) included: a node
/// without device memory has 0 bytes of it, so every region-1 verb to it is out of range, as
/// in the simulator with `device_memory_bytes = 0`; a masked atomic in an unsignaled batch on
/// a backend that must emulate it ([`VerbsError::Unsupported`]: the emulation needs the old
/// word).
pub fn plan_batch(
    requests: &[Request],
    regions: &NodeRegions,
    caps: &Caps,
    signaled: bool,
) -> Result<Plan, VerbsError> {
    let node = validate_batch(requests, caps.max_message_bytes)?;
    let native_masked = caps.masked_atomics == MaskedAtomics::Native;
    let mut parts = Vec::new();
    let mut current = Vec::new();
    let mut staging = 0u64;
    for (index, r) in requests.iter().enumerate() {
        let region = match r.addr.region() {
            Region::Host => regions.host,
            Region::Device => regions.device.unwrap_or(NO_DEVICE_MEMORY),
        };
        let len = r.op.byte_len();
        let end = r.addr.offset().checked_add(len);
        if end.is_none_or(|end| end > region.len) {
            return Err(VerbsError::OutOfRange { addr: r.addr, len });
        }
        let op = match &r.op {
            Op::Read(_) => WrOp::Read,
            Op::Write(b) => WrOp::Write { inline: b.len() as u64 <= caps.max_inline_bytes as u64 },
            Op::Cas { expect, swap } => WrOp::Cas { expect: *expect, swap: *swap },
            Op::Faa { add } => WrOp::Faa { add: *add },
            Op::MaskedCas { compare, compare_mask, swap, swap_mask } if native_masked => {
                WrOp::MaskedCas { compare: *compare, compare_mask: *compare_mask, swap: *swap, swap_mask: *swap_mask }
            }
            Op::MaskedFaa { add, boundary_mask } if native_masked => {
                WrOp::MaskedFaa { add: *add, boundary_mask: *boundary_mask }
            }
            Op::MaskedCas { .. } | Op::MaskedFaa { .. } => {
                if !signaled {
                    return Err(VerbsError::Unsupported("an emulated masked atomic in an unsignaled batch"));
                }
                close(&mut parts, &mut current, signaled);
                parts.push(Part::Emulate(index));
                continue;
            }
        };
        let local_offset = staging;
        staging += len.div_ceil(8) * 8;
        current.push(WorkRequest {
            index,
            op,
            remote_addr: region.addr + r.addr.offset(),
            rkey: region.rkey,
            local_offset,
            len: len as u32,
            fence: r.fence,
            signaled: false,
        });
    }
    close(&mut parts, &mut current, signaled);
    Ok(Plan { node, parts, staging_bytes: staging })
}

/// Ends the current part: its last work request is signalled (if the batch is).
fn close(parts: &mut Vec<Part>, current: &mut Vec<WorkRequest>, signaled: bool) {
    if let Some(last) = current.last_mut() {
        last.signaled = signaled;
        parts.push(Part::Post(std::mem::take(current)));
    }
}

/// The remote address a work request targets, back as a [`RemoteAddr`] (for error messages).
pub fn remote_of(node: NodeId, region: Region, regions: &NodeRegions, remote_addr: u64) -> Option<RemoteAddr> {
    let r = match region {
        Region::Host => regions.host,
        Region::Device => regions.device?,
    };
    let offset = remote_addr.checked_sub(r.addr)?;
    (offset < r.len).then(|| RemoteAddr::new(region, node, offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buf;

    fn caps(masked: MaskedAtomics) -> Caps {
        Caps {
            masked_atomics: masked,
            device_memory_bytes: 0,
            max_inline_bytes: 64,
            max_message_bytes: 1 << 20,
            max_outstanding_reads_per_qp: 16,
        }
    }

    fn regions() -> NodeRegions {
        NodeRegions {
            host: RemoteRegion { addr: 0x7f00_0000_0000, rkey: 0x1234, len: 1 << 20 },
            device: Some(RemoteRegion { addr: 0x1000, rkey: 0x99, len: 4096 }),
        }
    }

    fn host(off: u64) -> RemoteAddr {
        RemoteAddr::host(NodeId(3), off)
    }

    #[test]
    fn a_batch_becomes_one_part_signalled_at_its_end() {
        let reqs = vec![
            Request::cas(host(64), 0, 1),
            Request::read_len(host(128), 100),
            Request::write(host(512), vec![7u8; 64]).fenced(),
            Request::write(host(1024), vec![7u8; 65]),
            Request::faa(RemoteAddr::new(Region::Device, NodeId(3), 8), 5),
        ];
        let p = plan_batch(&reqs, &regions(), &caps(MaskedAtomics::Emulated), true).unwrap();
        assert_eq!(p.node, NodeId(3));
        let [Part::Post(wrs)] = &p.parts[..] else { panic!("{:?}", p.parts) };
        assert_eq!(wrs.len(), 5);
        assert_eq!(wrs[0].op, WrOp::Cas { expect: 0, swap: 1 });
        assert_eq!((wrs[0].remote_addr, wrs[0].rkey), (0x7f00_0000_0000 + 64, 0x1234));
        assert_eq!((wrs[1].op, wrs[1].local_offset, wrs[1].len), (WrOp::Read, 8, 100));
        // 100 bytes round up to 104: every slice starts 8-byte aligned.
        assert_eq!(wrs[2].local_offset, 112);
        assert_eq!(wrs[2].op, WrOp::Write { inline: true });
        assert!(wrs[2].fence && !wrs[1].fence);
        assert_eq!(wrs[3].op, WrOp::Write { inline: false });
        assert_eq!((wrs[4].remote_addr, wrs[4].rkey), (0x1008, 0x99));
        assert_eq!(wrs.iter().filter(|w| w.signaled).count(), 1);
        assert!(wrs[4].signaled);
        assert_eq!(p.staging_bytes, 8 + 104 + 64 + 72 + 8);
    }

    #[test]
    fn emulated_masked_atomics_cut_the_batch_in_order() {
        let reqs = vec![
            Request::read_len(host(0), 8),
            Request::masked_cas(host(8), 0, 1, 1, 1),
            Request::read_len(host(16), 8),
            Request::masked_faa(host(24), 1, 0),
        ];
        let p = plan_batch(&reqs, &regions(), &caps(MaskedAtomics::Emulated), true).unwrap();
        let shape: Vec<String> = p
            .parts
            .iter()
            .map(|part| match part {
                Part::Post(w) => format!("post{:?}", w.iter().map(|w| (w.index, w.signaled)).collect::<Vec<_>>()),
                Part::Emulate(i) => format!("emulate {i}"),
            })
            .collect();
        assert_eq!(shape, ["post[(0, true)]", "emulate 1", "post[(2, true)]", "emulate 3"]);
        let native = plan_batch(&reqs, &regions(), &caps(MaskedAtomics::Native), true).unwrap();
        assert_eq!(native.parts.len(), 1);
        assert_eq!(native.work_requests().count(), 4);
        assert!(
            matches!(
                plan_batch(&reqs, &regions(), &caps(MaskedAtomics::Emulated), false),
                Err(VerbsError::Unsupported(_))
            ),
            "an unsignaled batch cannot wait for an emulation"
        );
    }

    #[test]
    fn unsignaled_batches_ask_for_no_completion() {
        let reqs = vec![Request::write(host(0), vec![1u8; 8]), Request::write(host(8), vec![1u8; 8])];
        let p = plan_batch(&reqs, &regions(), &caps(MaskedAtomics::Emulated), false).unwrap();
        assert!(p.work_requests().all(|w| !w.signaled));
    }

    #[test]
    fn bad_batches_are_refused_before_posting() {
        let c = caps(MaskedAtomics::Emulated);
        let r = regions();
        assert_eq!(plan_batch(&[], &r, &c, true), Err(VerbsError::EmptyBatch));
        assert_eq!(
            plan_batch(&[Request::read_len(host((1 << 20) - 4), 8)], &r, &c, true),
            Err(VerbsError::OutOfRange { addr: host((1 << 20) - 4), len: 8 })
        );
        assert_eq!(
            plan_batch(&[Request::cas(host(4), 0, 1)], &r, &c, true),
            Err(VerbsError::Unaligned { addr: host(4) })
        );
        // Device memory on a node without it: out of range (0 bytes of it), as in the simulator.
        let no_dm = NodeRegions { device: None, ..r };
        let dm = RemoteAddr::new(Region::Device, NodeId(3), 0);
        let err = plan_batch(&[Request::cas(dm, 0, 1)], &no_dm, &c, true).unwrap_err();
        assert_eq!(err, VerbsError::OutOfRange { addr: dm, len: 8 });
        assert_eq!(err.to_string(), "remote range 3:dev:0x0 + 8 bytes is out of range");
        // Past the end of the device memory a node has.
        let past = RemoteAddr::new(Region::Device, NodeId(3), 4096);
        assert_eq!(
            plan_batch(&[Request::read_len(past, 8)], &r, &c, true),
            Err(VerbsError::OutOfRange { addr: past, len: 8 })
        );
        assert!(matches!(
            plan_batch(&[Request::read(host(0), Buf::zeroed(2 << 20))], &r, &c, true),
            Err(VerbsError::InvalidLength { .. })
        ));
    }

    #[test]
    fn remote_addresses_map_back() {
        let r = regions();
        assert_eq!(remote_of(NodeId(3), Region::Host, &r, 0x7f00_0000_0040), Some(host(64)));
        assert_eq!(remote_of(NodeId(3), Region::Host, &r, 0x10), None);
        assert_eq!(remote_of(NodeId(3), Region::Device, &r, 0x1000 + 4096), None);
    }
}

//! The memory node's chunk allocator: its wire protocol, its state machine (served by every
//! backend's memory node), and the client-side calls.
//!
//! Index code allocates remote memory in chunks (SMART: 16 MiB per compute-node thread) and
//! carves nodes out of them locally; this service is reached rarely, by `call`.

use crate::{NodeId, RemoteAddr, Verbs, VerbsError};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;

/// The service id of the chunk allocator on every memory node.
pub const ALLOCATOR_SERVICE: u16 = 0;

/// What a client asks the allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocRequest {
    /// `bytes` of host memory aligned to `align` (a power of two, at most 1 GiB).
    Alloc { bytes: u64, align: u64 },
    /// Give back a block previously allocated with exactly this size.
    Free { addr: RemoteAddr, bytes: u64 },
}

/// What the allocator answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocResponse {
    Allocated(RemoteAddr),
    Freed,
    Exhausted {
        requested_bytes: u64,
    },
    /// A malformed request (zero size, bad alignment, freeing what was never allocated).
    Rejected(String),
}

const TAG_ALLOC: u8 = 1;
const TAG_FREE: u8 = 2;
const TAG_ALLOCATED: u8 = 1;
const TAG_FREED: u8 = 2;
const TAG_EXHAUSTED: u8 = 3;
const TAG_REJECTED: u8 = 4;

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

impl AllocRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(17);
        match *self {
            AllocRequest::Alloc { bytes, align } => {
                out.push(TAG_ALLOC);
                out.extend_from_slice(&bytes.to_le_bytes());
                out.extend_from_slice(&align.to_le_bytes());
            }
            AllocRequest::Free { addr, bytes } => {
                out.push(TAG_FREE);
                out.extend_from_slice(&addr.raw().to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<AllocRequest, VerbsError> {
        let bad = || VerbsError::Protocol(format!("malformed allocator request ({} bytes)", bytes.len()));
        if bytes.len() != 17 {
            return Err(bad());
        }
        let (a, b) = (u64_at(bytes, 1).ok_or_else(bad)?, u64_at(bytes, 9).ok_or_else(bad)?);
        match bytes[0] {
            TAG_ALLOC => Ok(AllocRequest::Alloc { bytes: a, align: b }),
            TAG_FREE => Ok(AllocRequest::Free { addr: RemoteAddr::from_raw(a), bytes: b }),
            _ => Err(bad()),
        }
    }
}

impl AllocResponse {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        match self {
            AllocResponse::Allocated(addr) => {
                out.push(TAG_ALLOCATED);
                out.extend_from_slice(&addr.raw().to_le_bytes());
            }
            AllocResponse::Freed => out.push(TAG_FREED),
            AllocResponse::Exhausted { requested_bytes } => {
                out.push(TAG_EXHAUSTED);
                out.extend_from_slice(&requested_bytes.to_le_bytes());
            }
            AllocResponse::Rejected(msg) => {
                out.push(TAG_REJECTED);
                out.extend_from_slice(msg.as_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<AllocResponse, VerbsError> {
        let bad = || VerbsError::Protocol(format!("malformed allocator response ({} bytes)", bytes.len()));
        match bytes.first() {
            Some(&TAG_ALLOCATED) if bytes.len() == 9 => {
                Ok(AllocResponse::Allocated(RemoteAddr::from_raw(u64_at(bytes, 1).ok_or_else(bad)?)))
            }
            Some(&TAG_FREED) if bytes.len() == 1 => Ok(AllocResponse::Freed),
            Some(&TAG_EXHAUSTED) if bytes.len() == 9 => {
                Ok(AllocResponse::Exhausted { requested_bytes: u64_at(bytes, 1).ok_or_else(bad)? })
            }
            Some(&TAG_REJECTED) => Ok(AllocResponse::Rejected(String::from_utf8_lossy(&bytes[1..]).into_owned())),
            _ => Err(bad()),
        }
    }
}

/// When a freed block is handed out again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReuseMode {
    /// Oldest freed block first: a freed block comes back only after every block of its size
    /// freed before it. The default; stale pointers into it stay harmless for a while.
    #[default]
    Fifo,
    /// The block freed last is handed straight back to the next request of its size: exposes
    /// reuse (ABA) races in protocols that free remote memory.
    Immediate,
}

/// The allocator's state for one memory node: a bump pointer over `[base, limit)` plus exact-size
/// free lists. Deterministic: free lists are ordered containers.
#[derive(Debug, Clone)]
pub struct ChunkAllocator {
    node: NodeId,
    base: u64,
    next: u64,
    limit: u64,
    reuse: ReuseMode,
    free: BTreeMap<u64, VecDeque<u64>>,
    live: BTreeMap<u64, u64>,
    allocated_bytes: u64,
}

impl ChunkAllocator {
    /// Largest alignment a request may ask for.
    pub const MAX_ALIGN: u64 = 1 << 30;

    /// Allocates from host offsets `[base, limit)` of `node`. Offsets below `base` are reserved
    /// (superblocks at fixed addresses, and the null pointer).
    pub fn new(node: NodeId, base: u64, limit: u64, reuse: ReuseMode) -> ChunkAllocator {
        assert!(base <= limit, "allocator base above its limit");
        ChunkAllocator {
            node,
            base,
            next: base,
            limit,
            reuse,
            free: BTreeMap::new(),
            live: BTreeMap::new(),
            allocated_bytes: 0,
        }
    }

    /// Bytes currently allocated (live blocks).
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes
    }

    /// Every block this allocator has handed out, live or freed since, as `(offset, bytes)`:
    /// the host memory a verb may address (with the reserved bytes below `base`). Blocks are
    /// never split or merged, so freed ones keep their bounds.
    pub fn blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let freed = self.free.iter().flat_map(|(&bytes, offsets)| offsets.iter().map(move |&o| (o, bytes)));
        self.live.iter().map(|(&o, &bytes)| (o, bytes)).chain(freed)
    }

    /// Forgets everything (a memory node that crashed and restarted with empty memory).
    pub fn reset(&mut self) {
        *self = ChunkAllocator::new(self.node, self.base, self.limit, self.reuse);
    }

    pub fn handle(&mut self, request: AllocRequest) -> AllocResponse {
        match request {
            AllocRequest::Alloc { bytes, align } => self.alloc(bytes, align),
            AllocRequest::Free { addr, bytes } => self.release(addr, bytes),
        }
    }

    fn alloc(&mut self, bytes: u64, align: u64) -> AllocResponse {
        if bytes == 0 || !align.is_power_of_two() || align > Self::MAX_ALIGN {
            return AllocResponse::Rejected(format!("bad allocation: {bytes} bytes aligned to {align}"));
        }
        if let Some(list) = self.free.get_mut(&bytes) {
            let pick = match self.reuse {
                ReuseMode::Fifo => list.iter().position(|&o| o % align == 0),
                ReuseMode::Immediate => list.iter().rposition(|&o| o % align == 0),
            };
            if let Some(i) = pick {
                let offset = list.remove(i).expect("index from position");
                if list.is_empty() {
                    self.free.remove(&bytes);
                }
                return self.hand_out(offset, bytes);
            }
        }
        let start = self.next.div_ceil(align) * align;
        match start.checked_add(bytes) {
            Some(end) if end <= self.limit => {
                self.next = end;
                self.hand_out(start, bytes)
            }
            _ => AllocResponse::Exhausted { requested_bytes: bytes },
        }
    }

    fn hand_out(&mut self, offset: u64, bytes: u64) -> AllocResponse {
        let previous = self.live.insert(offset, bytes);
        debug_assert!(previous.is_none(), "allocator handed out a live block twice");
        self.allocated_bytes += bytes;
        AllocResponse::Allocated(RemoteAddr::host(self.node, offset))
    }

    fn release(&mut self, addr: RemoteAddr, bytes: u64) -> AllocResponse {
        if addr.node() != self.node || addr.region() != crate::Region::Host {
            return AllocResponse::Rejected(format!("free of {addr}: not this node's host memory"));
        }
        match self.live.get(&addr.offset()) {
            Some(&size) if size == bytes => {
                self.live.remove(&addr.offset());
                self.allocated_bytes -= bytes;
                self.free.entry(bytes).or_default().push_back(addr.offset());
                AllocResponse::Freed
            }
            Some(&size) => AllocResponse::Rejected(format!("free of {addr}: size {bytes}, allocated {size}")),
            None => AllocResponse::Rejected(format!("free of {addr}: not allocated (double free?)")),
        }
    }
}

/// Allocates `bytes` of host memory on `node` through its allocator service. The request is
/// sent when this is called.
pub fn alloc<V: Verbs + ?Sized>(
    verbs: &V,
    node: NodeId,
    bytes: u64,
    align: u64,
) -> impl Future<Output = Result<RemoteAddr, VerbsError>> {
    let sent = verbs.call(node, ALLOCATOR_SERVICE, AllocRequest::Alloc { bytes, align }.encode());
    async move {
        match AllocResponse::decode(&sent.await?)? {
            AllocResponse::Allocated(addr) => Ok(addr),
            AllocResponse::Exhausted { requested_bytes } => {
                Err(VerbsError::RemoteMemoryExhausted { node, requested_bytes })
            }
            AllocResponse::Rejected(msg) => Err(VerbsError::Protocol(msg)),
            AllocResponse::Freed => Err(VerbsError::Protocol("allocator answered Freed to an Alloc".into())),
        }
    }
}

/// Frees a block allocated by [`alloc`] with the same size. The request is sent when this is
/// called.
pub fn free<V: Verbs + ?Sized>(
    verbs: &V,
    addr: RemoteAddr,
    bytes: u64,
) -> impl Future<Output = Result<(), VerbsError>> {
    let sent = verbs.call(addr.node(), ALLOCATOR_SERVICE, AllocRequest::Free { addr, bytes }.encode());
    async move {
        match AllocResponse::decode(&sent.await?)? {
            AllocResponse::Freed => Ok(()),
            AllocResponse::Rejected(msg) => Err(VerbsError::Protocol(msg)),
            other => Err(VerbsError::Protocol(format!("allocator answered {other:?} to a Free"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_round_trips() {
        for r in [
            AllocRequest::Alloc { bytes: 1 << 24, align: 256 },
            AllocRequest::Free { addr: RemoteAddr::host(NodeId(3), 4096), bytes: 64 },
        ] {
            assert_eq!(AllocRequest::decode(&r.encode()), Ok(r));
        }
        for r in [
            AllocResponse::Allocated(RemoteAddr::host(NodeId(1), 1 << 20)),
            AllocResponse::Freed,
            AllocResponse::Exhausted { requested_bytes: 99 },
            AllocResponse::Rejected("no".into()),
        ] {
            assert_eq!(AllocResponse::decode(&r.encode()), Ok(r));
        }
        assert!(AllocRequest::decode(&[9; 17]).is_err());
        assert!(AllocRequest::decode(&[1; 3]).is_err());
        assert!(AllocResponse::decode(&[]).is_err());
    }

    #[test]
    fn bump_align_exhaust() {
        let mut a = ChunkAllocator::new(NodeId(0), 100, 1024, ReuseMode::Fifo);
        assert_eq!(
            a.handle(AllocRequest::Alloc { bytes: 10, align: 64 }),
            AllocResponse::Allocated(RemoteAddr::host(NodeId(0), 128))
        );
        assert_eq!(
            a.handle(AllocRequest::Alloc { bytes: 800, align: 8 }),
            AllocResponse::Allocated(RemoteAddr::host(NodeId(0), 144))
        );
        assert_eq!(
            a.handle(AllocRequest::Alloc { bytes: 200, align: 8 }),
            AllocResponse::Exhausted { requested_bytes: 200 }
        );
        assert!(matches!(a.handle(AllocRequest::Alloc { bytes: 0, align: 8 }), AllocResponse::Rejected(_)));
        assert!(matches!(a.handle(AllocRequest::Alloc { bytes: 8, align: 3 }), AllocResponse::Rejected(_)));
        assert_eq!(a.allocated_bytes(), 810);
    }

    #[test]
    fn reuse_modes_order_freed_blocks() {
        for (mode, expect) in [(ReuseMode::Fifo, 0), (ReuseMode::Immediate, 2)] {
            let mut a = ChunkAllocator::new(NodeId(0), 0, 1 << 20, mode);
            let blocks: Vec<RemoteAddr> = (0..3)
                .map(|_| match a.handle(AllocRequest::Alloc { bytes: 64, align: 64 }) {
                    AllocResponse::Allocated(addr) => addr,
                    other => panic!("{other:?}"),
                })
                .collect();
            for &b in &blocks {
                assert_eq!(a.handle(AllocRequest::Free { addr: b, bytes: 64 }), AllocResponse::Freed);
            }
            assert_eq!(
                a.handle(AllocRequest::Alloc { bytes: 64, align: 64 }),
                AllocResponse::Allocated(blocks[expect]),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn bad_frees_are_rejected_not_corrupting() {
        let mut a = ChunkAllocator::new(NodeId(0), 0, 1 << 20, ReuseMode::Fifo);
        let AllocResponse::Allocated(b) = a.handle(AllocRequest::Alloc { bytes: 64, align: 8 }) else { panic!() };
        assert!(matches!(a.handle(AllocRequest::Free { addr: b, bytes: 32 }), AllocResponse::Rejected(_)));
        assert_eq!(a.handle(AllocRequest::Free { addr: b, bytes: 64 }), AllocResponse::Freed);
        assert!(matches!(a.handle(AllocRequest::Free { addr: b, bytes: 64 }), AllocResponse::Rejected(_)));
        assert!(matches!(
            a.handle(AllocRequest::Free { addr: RemoteAddr::host(NodeId(5), 0), bytes: 64 }),
            AllocResponse::Rejected(_)
        ));
        assert_eq!(a.allocated_bytes(), 0);
    }
}

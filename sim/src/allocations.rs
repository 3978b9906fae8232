//! Which host memory a verb may address: the memory nodes' reserved bytes (superblocks at fixed
//! offsets) and every block their chunk allocators have handed out. A verb anywhere else still
//! runs — real hardware would let it, inside the registered region — but is counted in
//! [`Stats::unallocated`](crate::Stats), so an index's address arithmetic that strays into
//! padding or unallocated memory is a finding of the checker, not a silent success.
//!
//! The line of [`RemoteAddr::NULL`] (node 0's first 64 bytes) is reserved but never addressable:
//! a verb there followed a null pointer.
//!
//! Freed blocks stay addressable (a stale pointer read into a freed node is the optimistic
//! protocols' everyday business, caught by their own versions), and so do blocks of a memory
//! node that crashed and restarted: the check is about where addresses point, not about when.

use dmkit_rdma::{NodeId, Region, RemoteAddr};
use std::collections::BTreeMap;
use std::fmt;

/// Verbs that addressed host memory of a memory node outside its reserved bytes and outside
/// every block its allocator handed out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnallocatedVerbs {
    pub count: u64,
    /// The first of them.
    pub first: Option<UnallocatedVerb>,
}

impl UnallocatedVerbs {
    /// `Err` with the count and the first of them, if there was any: the one wording of the
    /// finding for the checker, `dmkit run` and the sequential tests.
    pub fn verdict(&self) -> Result<(), String> {
        match &self.first {
            Some(first) => Err(format!("{} verb(s) addressed unallocated memory; the first: {first}", self.count)),
            None => Ok(()),
        }
    }
}

/// One verb outside allocated memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnallocatedVerb {
    pub at_ns: u64,
    pub client: u32,
    /// The verb's name (`read`, `cas`, ...: [`dmkit_rdma::Op::name`]).
    pub verb: &'static str,
    pub addr: RemoteAddr,
    pub len: u64,
    /// The allocated block nearest below `addr`, as `(start, end)` host offsets, if any.
    pub nearest: Option<(u64, u64)>,
    /// The verb touched the line of [`RemoteAddr::NULL`] (node 0's first 64 bytes), which no
    /// index may use: a null pointer followed.
    pub null: bool,
}

impl fmt::Display for UnallocatedVerb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.null {
            return write!(
                f,
                "client {} at {} ns: {} of {} bytes at {}, on the null address's line (a null pointer followed)",
                self.client, self.at_ns, self.verb, self.len, self.addr
            );
        }
        write!(
            f,
            "client {} at {} ns: {} of {} bytes at {}, outside the reserved bytes and every allocated block",
            self.client, self.at_ns, self.verb, self.len, self.addr
        )?;
        if let Some((start, end)) = self.nearest {
            write!(f, " (nearest below: [{start:#x}, {end:#x}))")?;
        }
        Ok(())
    }
}

/// Bytes at [`RemoteAddr::NULL`] no verb may touch.
const NULL_LINE: u64 = dmkit_rdma::reserved::NULL_LINE_BYTES;

/// The addressable host memory of each memory node.
#[derive(Debug)]
pub(crate) struct Allocations {
    reserved: u64,
    /// Per memory node: allocated blocks, start offset → end offset.
    blocks: Vec<BTreeMap<u64, u64>>,
    outside: UnallocatedVerbs,
}

impl Allocations {
    pub(crate) fn new(memory_nodes: u16, reserved: u64) -> Allocations {
        Allocations {
            reserved,
            blocks: vec![BTreeMap::new(); memory_nodes as usize],
            outside: UnallocatedVerbs::default(),
        }
    }

    /// The allocator of `node` handed out `[offset, offset + bytes)`.
    pub(crate) fn note(&mut self, node: NodeId, offset: u64, bytes: u64) {
        if let Some(blocks) = self.blocks.get_mut(node.0 as usize) {
            let end = offset.saturating_add(bytes);
            let known = blocks.entry(offset).or_insert(end);
            *known = (*known).max(end);
        }
    }

    /// Whether `[addr, addr + len)` lies in the reserved bytes or inside one allocated block
    /// (always true for device memory and for nodes without an allocator). If not, counts it.
    pub(crate) fn check(&mut self, at_ns: u64, client: u32, verb: &'static str, addr: RemoteAddr, len: u64) -> bool {
        let Some(blocks) = self.blocks.get(addr.node().0 as usize) else { return true };
        if addr.region() != Region::Host {
            return true;
        }
        let (start, end) = (addr.offset(), addr.offset().saturating_add(len));
        let null = addr.node() == RemoteAddr::NULL.node() && start < NULL_LINE;
        let below = blocks.range(..=start).next_back().map(|(&s, &e)| (s, e));
        if !null && (end <= self.reserved || matches!(below, Some((_, e)) if end <= e)) {
            return true;
        }
        self.outside.count += 1;
        if self.outside.first.is_none() {
            self.outside.first = Some(UnallocatedVerb { at_ns, client, verb, addr, len, nearest: below, null });
        }
        false
    }

    pub(crate) fn outside(&self) -> &UnallocatedVerbs {
        &self.outside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_bytes_and_blocks_are_addressable_and_nothing_else_is() {
        let mut a = Allocations::new(2, 4096);
        a.note(NodeId(1), 8192, 256);
        let host = |node, offset| RemoteAddr::host(NodeId(node), offset);
        assert!(a.check(0, 0, "READ", host(0, 64), 4032));
        assert!(a.check(0, 0, "READ", host(1, 0), 64), "only node 0's first line is the null address's");
        assert!(a.check(0, 0, "READ", host(1, 8192), 256));
        assert!(a.check(0, 0, "CAS", host(1, 8192 + 248), 8));
        assert!(a.check(0, 0, "READ", RemoteAddr::device(NodeId(0), 1 << 20), 8));
        assert!(a.check(0, 0, "READ", host(2, 1 << 20), 8), "node 2 has no allocator");
        assert_eq!(a.outside().count, 0);
        assert!(!a.check(5, 3, "WRITE", host(1, 8192 + 250), 8), "past the block's end");
        assert!(!a.check(6, 3, "READ", host(0, 8192), 8), "another node's block");
        assert!(!a.check(7, 3, "READ", host(1, 4000), 200), "from the reserved bytes into a gap");
        assert_eq!(a.outside().count, 3);
        let first = a.outside().first.expect("recorded");
        assert_eq!((first.at_ns, first.client, first.verb, first.len), (5, 3, "WRITE", 8));
        assert_eq!(first.nearest, Some((8192, 8448)));
        assert!(!first.null);
        assert!(!a.check(8, 3, "CAS", RemoteAddr::NULL, 8), "a null pointer followed");
        assert_eq!(a.outside().count, 4);
        let verdict = a.outside().verdict().expect_err("stray verbs");
        assert!(
            verdict.starts_with("4 verb(s) addressed unallocated memory; the first: client 3 at 5 ns"),
            "{verdict}"
        );
        assert_eq!(UnallocatedVerbs::default().verdict(), Ok(()));
    }
}

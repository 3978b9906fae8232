//! Remote addresses: `[region: 1 | node: 15 | offset: 48]`.

use std::fmt;

/// Which memory of a node an address names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Region {
    /// Host DRAM registered with the NIC.
    Host,
    /// The NIC's on-chip device memory (ConnectX "device memory"); RMWs on it skip PCIe.
    Device,
}

/// A node of the cluster: a memory node, a server node or a compute node.
///
/// Only 15 bits fit in a [`RemoteAddr`], so node ids are below [`NodeId::MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

impl NodeId {
    /// One past the largest node id a [`RemoteAddr`] can carry.
    pub const MAX: u16 = 1 << 15;
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A 64-bit remote address: bit 63 is the region (0 host, 1 device memory), bits 48..63 the node,
/// bits 0..48 the byte offset inside that node's region.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RemoteAddr(u64);

impl RemoteAddr {
    /// Largest representable offset plus one (2^48 bytes = 256 TiB).
    pub const OFFSET_LIMIT: u64 = 1 << 48;
    const OFFSET_MASK: u64 = Self::OFFSET_LIMIT - 1;
    const REGION_BIT: u64 = 1 << 63;

    /// The null address (host region, node 0, offset 0). Index layouts use it as "no pointer";
    /// memory node 0 reserves its first bytes so that nothing is ever allocated there.
    pub const NULL: RemoteAddr = RemoteAddr(0);

    /// Builds an address. Panics if `node` or `offset` does not fit: both are programming
    /// errors of the caller, never data read from remote memory (use [`RemoteAddr::from_raw`]).
    pub const fn new(region: Region, node: NodeId, offset: u64) -> RemoteAddr {
        assert!(node.0 < NodeId::MAX, "node id does not fit in 15 bits");
        assert!(offset < Self::OFFSET_LIMIT, "offset does not fit in 48 bits");
        let region_bit = match region {
            Region::Host => 0,
            Region::Device => Self::REGION_BIT,
        };
        RemoteAddr(region_bit | ((node.0 as u64) << 48) | offset)
    }

    /// Host-memory address on `node`.
    pub const fn host(node: NodeId, offset: u64) -> RemoteAddr {
        Self::new(Region::Host, node, offset)
    }

    /// Device-memory address on `node`.
    pub const fn device(node: NodeId, offset: u64) -> RemoteAddr {
        Self::new(Region::Device, node, offset)
    }

    /// Reinterprets 64 raw bits (e.g. a pointer read from remote memory). Every bit pattern is a
    /// valid address; whether it is in range is checked when a verb uses it.
    pub const fn from_raw(raw: u64) -> RemoteAddr {
        RemoteAddr(raw)
    }

    /// The 64 raw bits.
    pub const fn raw(self) -> u64 {
        self.0
    }

    pub const fn region(self) -> Region {
        if self.0 & Self::REGION_BIT == 0 { Region::Host } else { Region::Device }
    }

    pub const fn node(self) -> NodeId {
        NodeId(((self.0 >> 48) & 0x7fff) as u16)
    }

    pub const fn offset(self) -> u64 {
        self.0 & Self::OFFSET_MASK
    }

    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The address `bytes` further on, or `None` if the offset would leave the 48-bit space.
    pub const fn checked_add(self, bytes: u64) -> Option<RemoteAddr> {
        match self.offset().checked_add(bytes) {
            Some(offset) if offset < Self::OFFSET_LIMIT => Some(RemoteAddr((self.0 & !Self::OFFSET_MASK) | offset)),
            _ => None,
        }
    }

    /// The address `bytes` further on, in the same node and region. Panics if the offset leaves
    /// the 48-bit space: use it for offsets inside an object whose base the caller already
    /// validated (and [`RemoteAddr::checked_add`] for anything read from remote memory).
    #[allow(clippy::should_implement_trait)] // offsets are u64, not addresses: no `Add<RemoteAddr>`
    pub fn add(self, bytes: u64) -> RemoteAddr {
        self.checked_add(bytes).expect("remote offset overflow")
    }
}

impl fmt::Debug for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let region = match self.region() {
            Region::Host => "host",
            Region::Device => "dev",
        };
        write!(f, "{}:{}:{:#x}", self.node().0, region, self.offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let a = RemoteAddr::new(Region::Device, NodeId(0x7fff), RemoteAddr::OFFSET_LIMIT - 1);
        assert_eq!(a.region(), Region::Device);
        assert_eq!(a.node(), NodeId(0x7fff));
        assert_eq!(a.offset(), RemoteAddr::OFFSET_LIMIT - 1);
        assert_eq!(RemoteAddr::from_raw(a.raw()), a);
        let b = RemoteAddr::host(NodeId(3), 4096);
        assert_eq!((b.region(), b.node(), b.offset()), (Region::Host, NodeId(3), 4096));
        assert_eq!(b.to_string(), "3:host:0x1000");
    }

    #[test]
    fn add_stays_in_node_and_region() {
        let a = RemoteAddr::device(NodeId(2), 8);
        assert_eq!(a.add(8), RemoteAddr::device(NodeId(2), 16));
        let end = RemoteAddr::host(NodeId(1), RemoteAddr::OFFSET_LIMIT - 8);
        assert_eq!(end.checked_add(8), None);
        assert_eq!(end.checked_add(7).map(|a| a.node()), Some(NodeId(1)));
    }

    #[test]
    #[should_panic(expected = "15 bits")]
    fn oversized_node_panics_at_construction() {
        let _ = RemoteAddr::host(NodeId(NodeId::MAX), 0);
    }
}

//! The reserved bytes at the bottom of every memory node's host memory, and the fixed regions
//! indexes keep there.
//!
//! No allocator hands out the first [`RESERVED_BYTES`] of a memory node (the simulator's
//! `Topology::reserved_bytes` and the memory-node server's `--reserved` default to it), so an
//! index can keep its superblock, root word or host lock table at a fixed address every client
//! knows. A [`Fixed`] region is checked when it is made: a `const` one at compile time, so a
//! superblock moved onto offset 0 (the null pointer), past the reserved bytes, or onto another
//! region of the same index does not build.

use crate::{NodeId, RemoteAddr};

/// Host bytes at the bottom of every memory node that the allocators never hand out.
pub const RESERVED_BYTES: u64 = 1 << 20;

/// The line of [`RemoteAddr::NULL`] (node 0's first 64 bytes): no verb may touch it (the
/// simulator reports any that does), so a null pointer is never mistaken for data. No fixed
/// region starts below it, on any node.
pub const NULL_LINE_BYTES: u64 = 64;

/// A region `[offset, offset + bytes)` of a memory node's reserved bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed {
    offset: u64,
    bytes: u64,
}

impl Fixed {
    /// The region of `bytes` bytes at `offset`. Panics (at compile time in a `const`) unless it
    /// holds a byte, starts above the null pointer's line and ends inside the reserved bytes.
    pub const fn new(offset: u64, bytes: u64) -> Fixed {
        assert!(bytes > 0, "a fixed region holds at least one byte");
        assert!(offset >= NULL_LINE_BYTES, "the first line holds the null pointer");
        assert!(
            offset <= RESERVED_BYTES && bytes <= RESERVED_BYTES - offset,
            "a fixed region ends inside the reserved bytes"
        );
        Fixed { offset, bytes }
    }

    pub const fn offset(self) -> u64 {
        self.offset
    }

    pub const fn bytes(self) -> u64 {
        self.bytes
    }

    pub const fn end(self) -> u64 {
        self.offset + self.bytes
    }

    /// Whether the two regions share no byte.
    pub const fn disjoint(self, other: Fixed) -> bool {
        self.end() <= other.offset || other.end() <= self.offset
    }

    /// The region's first byte on memory node `node`.
    pub const fn on(self, node: NodeId) -> RemoteAddr {
        RemoteAddr::host(node, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_overlap_or_not() {
        const A: Fixed = Fixed::new(4096, 64);
        assert!(A.disjoint(Fixed::new(4160, 8)) && Fixed::new(4160, 8).disjoint(A));
        assert!(!A.disjoint(Fixed::new(4159, 8)) && !A.disjoint(Fixed::new(64, 4033)));
        assert_eq!((A.end(), A.on(NodeId(2))), (4160, RemoteAddr::host(NodeId(2), 4096)));
        assert_eq!(Fixed::new(64, RESERVED_BYTES - 64).end(), RESERVED_BYTES);
    }

    #[test]
    fn a_region_outside_the_reserved_bytes_is_refused() {
        for (offset, bytes) in
            [(0, 8), (8, 8), (63, 1), (64, 0), (RESERVED_BYTES - 8, 9), (RESERVED_BYTES + 8, 8), (64, u64::MAX)]
        {
            assert!(std::panic::catch_unwind(|| Fixed::new(offset, bytes)).is_err(), "{offset} + {bytes}");
        }
    }
}

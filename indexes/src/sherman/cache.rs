//! Sherman's compute-node index cache: the generic range cache of
//! [`crate::common::range_cache`] over Sherman's [`Node`], and what Sherman charges per copy.
//!
//! A cached copy costs its node image (`node_bytes`), a fixed [`ENTRY_OVERHEAD`] and its highest
//! fence (the map key) against the budget ([`charge`]). The cache's policy (deepest covering
//! copy wins, FIFO eviction, invalidation of stale routes) is described in
//! [`crate::common::range_cache`].

use super::layout::Node;
use crate::common::range_cache::{self, RangeNode};

pub use crate::common::CacheStats;
pub use crate::common::range_cache::CacheLevels;

/// Sherman's index cache.
pub type IndexCache = range_cache::IndexCache<Node>;
/// A cached copy of one of Sherman's internal nodes.
pub type CachedNode = range_cache::CachedNode<Node>;

/// Host bytes charged per cached copy beyond the node image (map entry, key, `Arc`).
pub const ENTRY_OVERHEAD: u64 = 64;

/// The bytes a copy of `node`, whose image is `node_bytes` long, is charged against the budget:
/// the image, [`ENTRY_OVERHEAD`] and the highest fence kept as the map key.
pub fn charge(node_bytes: u64, node: &Node) -> u64 {
    node_bytes + ENTRY_OVERHEAD + node.highest.len() as u64
}

impl RangeNode for Node {
    fn level(&self) -> u8 {
        self.level
    }

    fn lowest(&self) -> &[u8] {
        &self.lowest
    }

    fn highest(&self) -> &[u8] {
        &self.highest
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dmkit_rdma::{NodeId, RemoteAddr};

    #[test]
    fn charge_is_image_overhead_and_fence() {
        let n = Node {
            version: 1,
            leftmost: RemoteAddr::host(NodeId(0), 4096),
            sibling: RemoteAddr::NULL,
            level: 1,
            lowest: 0u64.to_be_bytes().to_vec(),
            highest: 100u64.to_be_bytes().to_vec(),
            records: Vec::new(),
            slots: Vec::new(),
        };
        assert_eq!(charge(1024, &n), 1024 + ENTRY_OVERHEAD + 8);
        let c = IndexCache::new(1 << 20, CacheLevels::Level1);
        c.insert(n.leftmost, &n, charge(1024, &n));
        assert_eq!(c.stats().bytes, 1024 + ENTRY_OVERHEAD + 8);
        let e = c.lookup(&50u64.to_be_bytes()).expect("cached");
        assert_eq!((e.node.level, e.addr), (1, n.leftmost));
    }
}

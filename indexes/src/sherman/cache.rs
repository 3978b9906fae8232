//! Sherman's compute-node index cache: the generic range cache of
//! [`crate::common::range_cache`] over Sherman's [`Node`], and what Sherman charges per copy.
//!
//! What a cached copy costs against the budget ([`charge`]) is an option, [`CacheCharge`],
//! because the artifacts the papers ran count differently, and a budget of N MB must hold the
//! nodes the paper's N MB held:
//!
//! - Sherman's artifact, and the fork SMART ran (`IndexCache.h`: `all_page_cnt = budget /
//!   sizeof(InternalPage)`), count whole pages: [`CacheCharge::Page`].
//! - CHIME's artifact runs its Sherman baseline from CHIME's own code, whose tree cache charges a
//!   copy's occupied part (`InternalNode::consumed_cache_size`: 8 bytes, the header, and the
//!   valid entries): [`CacheCharge::Occupied`], the rule CHIME's own cache follows here too.
//! - dmkit's own configuration (`sherman-fixed`) charges the host bytes a copy costs here: the
//!   image, a fixed [`ENTRY_OVERHEAD`] and the highest fence kept as the map key:
//!   [`CacheCharge::Host`].
//!
//! The cache's policy (deepest covering copy wins, FIFO eviction, invalidation of stale routes)
//! is described in [`crate::common::range_cache`].

use super::layout::{Geometry, Node};
use crate::common::range_cache::{self, RangeNode};

pub use crate::common::CacheStats;
pub use crate::common::range_cache::CacheLevels;

/// Sherman's index cache.
pub type IndexCache = range_cache::IndexCache<Node>;
/// A cached copy of one of Sherman's internal nodes.
pub type CachedNode = range_cache::CachedNode<Node>;

/// Host bytes charged per cached copy beyond the node image (map entry, key, `Arc`).
pub const ENTRY_OVERHEAD: u64 = 64;

/// How a cached copy is charged against the cache budget (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheCharge {
    /// The node image, [`ENTRY_OVERHEAD`] and the highest fence: the host bytes of a copy.
    Host,
    /// The node image: a budget holds `budget / node_bytes` copies (Sherman's artifact).
    Page,
    /// 8 bytes, the header and the records present (CHIME's artifact).
    Occupied,
}

/// The bytes a copy of `node` is charged against the budget under `mode`.
pub fn charge(mode: CacheCharge, g: &Geometry, node: &Node) -> u64 {
    match mode {
        CacheCharge::Host => g.node_bytes as u64 + ENTRY_OVERHEAD + node.highest.len() as u64,
        CacheCharge::Page => g.node_bytes as u64,
        CacheCharge::Occupied => (8 + g.header_bytes() + node.records.len() * g.record_bytes()) as u64,
    }
}

/// The most a copy of an internal node is charged under `mode` (a full node, the longest fence).
pub fn max_charge(mode: CacheCharge, g: &Geometry) -> u64 {
    match mode {
        CacheCharge::Host => g.node_bytes as u64 + ENTRY_OVERHEAD + g.key_bytes as u64,
        CacheCharge::Page => g.node_bytes as u64,
        CacheCharge::Occupied => (8 + g.header_bytes() + g.internal_span * g.record_bytes()) as u64,
    }
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
    fn each_charge_counts_what_its_artifact_counts() {
        let g = Geometry {
            key_bytes: 8,
            value_bytes: 8,
            leaf_span: 54,
            internal_span: 61,
            node_bytes: 1024,
            versioning: crate::sherman::layout::Versioning::Bookend,
        };
        let child = RemoteAddr::host(NodeId(0), 8192);
        let n = Node {
            version: 1,
            leftmost: RemoteAddr::host(NodeId(0), 4096),
            sibling: RemoteAddr::NULL,
            level: 1,
            lowest: 0u64.to_be_bytes().to_vec(),
            highest: 100u64.to_be_bytes().to_vec(),
            records: (1..=3u64).map(|k| ((k * 10).to_be_bytes().as_slice().into(), child)).collect(),
            slots: Vec::new(),
        };
        assert_eq!(charge(CacheCharge::Host, &g, &n), 1024 + ENTRY_OVERHEAD + 8);
        assert_eq!(charge(CacheCharge::Page, &g, &n), 1024);
        // Three records of 16 bytes after the header, and CHIME's 8 bytes.
        assert_eq!(charge(CacheCharge::Occupied, &g, &n), (8 + g.header_bytes() + 3 * 16) as u64);
        for mode in [CacheCharge::Host, CacheCharge::Page, CacheCharge::Occupied] {
            assert!(charge(mode, &g, &n) <= max_charge(mode, &g), "{mode:?}");
        }
        let c = IndexCache::new(1 << 20, CacheLevels::Level1);
        c.insert(n.leftmost, &n, charge(CacheCharge::Occupied, &g, &n));
        assert_eq!(c.stats().bytes, charge(CacheCharge::Occupied, &g, &n));
        let e = c.lookup(&50u64.to_be_bytes()).expect("cached");
        assert_eq!((e.node.level, e.addr), (1, n.leftmost));
    }
}

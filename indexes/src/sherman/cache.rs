//! Sherman's compute-node state: the index cache, the cached root, and the shared machinery
//! (local lock table, RDWC, chunk allocator).
//!
//! ## The index cache (digest §1.6, §2.9, §3.11)
//!
//! Copies of internal nodes, per level, keyed by their highest fence. A lookup for `k` takes the
//! entry with the smallest highest fence above `k` and uses it if its lowest fence is at most
//! `k`; the deepest cached level wins. After a split the right half's copy has the old node's
//! highest fence and replaces the stale wide copy, as the artifact's ordering makes the new
//! narrower entries win. The artifact caches level-1 nodes only; CHIME's Sherman caches every
//! internal level ([`CacheLevels`]).
//!
//! The budget is in bytes: a copy costs its node's size plus a fixed entry overhead. Over
//! budget, the oldest copy is evicted (FIFO). The artifact samples two random keys and evicts the
//! less frequently hit (digest §3.11, bug B12: its sampling misses with other key spaces); with
//! the budgets the papers ran, eviction does not happen at all (digest §5.2), so the policy is
//! not what their numbers measure.
//!
//! Nodes are never freed or moved (digest E6), so a stale copy still routes to a node whose
//! range only shrank from the right: the fence check on the next READ catches it.

use super::layout::Node;
use crate::common::primitive::{Mutex, lock};
use dmkit_rdma::RemoteAddr;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// Which internal levels are cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLevels {
    /// Parents of leaves only (the artifact, SMART's fork).
    Level1,
    /// Every internal level (CHIME's Sherman).
    AllInternal,
}

/// Host bytes charged per cached copy beyond the node image (map entry, key, `Arc`).
pub const ENTRY_OVERHEAD: u64 = 64;

/// A cached internal node.
#[derive(Debug)]
pub struct CachedNode {
    pub addr: RemoteAddr,
    pub node: Node,
    bytes: u64,
}

#[derive(Debug, Default)]
struct CacheState {
    /// Per level (index = level), copies keyed by highest fence.
    levels: Vec<BTreeMap<Vec<u8>, Arc<CachedNode>>>,
    /// Insertion order, for eviction: (level, highest fence, address).
    fifo: VecDeque<(u8, Vec<u8>, RemoteAddr)>,
    bytes: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    invalidations: u64,
}

pub use crate::common::CacheStats;

/// The index cache of one compute node.
#[derive(Debug)]
pub struct IndexCache {
    budget: u64,
    levels: CacheLevels,
    state: Mutex<CacheState>,
}

impl IndexCache {
    pub fn new(budget_bytes: u64, levels: CacheLevels) -> IndexCache {
        IndexCache { budget: budget_bytes, levels, state: Mutex::new(CacheState::default()) }
    }

    /// Whether copies of nodes at `level` are kept.
    pub fn caches_level(&self, level: u8) -> bool {
        self.budget > 0
            && match self.levels {
                CacheLevels::Level1 => level == 1,
                CacheLevels::AllInternal => level >= 1,
            }
    }

    /// The deepest cached node covering `key`.
    pub fn lookup(&self, key: &[u8]) -> Option<Arc<CachedNode>> {
        let mut s = lock(&self.state);
        let found = s.levels.iter().skip(1).find_map(|map| {
            let (_, e) = map.range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded)).next()?;
            (e.node.lowest.as_slice() <= key).then(|| e.clone())
        });
        if found.is_some() {
            s.hits += 1;
        } else {
            s.misses += 1;
        }
        found
    }

    /// Keeps a copy of an internal node just read at `addr`.
    pub fn insert(&self, addr: RemoteAddr, node: &Node, node_bytes: u64) {
        if !self.caches_level(node.level) {
            return;
        }
        let bytes = node_bytes + ENTRY_OVERHEAD + node.highest.len() as u64;
        let mut s = lock(&self.state);
        let level = node.level as usize;
        if s.levels.len() <= level {
            s.levels.resize_with(level + 1, BTreeMap::new);
        }
        let entry = Arc::new(CachedNode { addr, node: node.clone(), bytes });
        let replaced = s.levels[level].insert(node.highest.clone(), entry);
        s.bytes += bytes;
        match replaced {
            // A fresher copy of the same node keeps its place in the eviction queue.
            Some(old) if old.addr == addr => s.bytes -= old.bytes,
            Some(old) => {
                s.bytes -= old.bytes;
                s.fifo.push_back((node.level, node.highest.clone(), addr));
            }
            None => s.fifo.push_back((node.level, node.highest.clone(), addr)),
        }
        while s.bytes > self.budget {
            let Some((lv, highest, at)) = s.fifo.pop_front() else { break };
            // Skip queue records of copies replaced since.
            let current = s.levels[lv as usize].get(&highest).map(|e| e.addr);
            if current == Some(at) {
                let gone = s.levels[lv as usize].remove(&highest).expect("present");
                s.bytes -= gone.bytes;
                s.evictions += 1;
            }
        }
        // Keep the queue from growing without bound with replaced records.
        let live: usize = s.levels.iter().map(BTreeMap::len).sum();
        if s.fifo.len() > 2 * live + 64 {
            let CacheState { levels, fifo, .. } = &mut *s;
            fifo.retain(|(lv, h, at)| levels[*lv as usize].get(h).is_some_and(|e| e.addr == *at));
        }
    }

    /// Drops the copy `entry` (it routed a key to a node that does not cover it).
    pub fn invalidate(&self, entry: &CachedNode) {
        let mut s = lock(&self.state);
        let level = entry.node.level as usize;
        let same = s.levels.get(level).and_then(|m| m.get(&entry.node.highest)).is_some_and(|e| e.addr == entry.addr);
        if same {
            let gone = s.levels[level].remove(&entry.node.highest).expect("present");
            s.bytes -= gone.bytes;
            s.invalidations += 1;
        }
    }

    pub fn stats(&self) -> CacheStats {
        let s = lock(&self.state);
        CacheStats {
            bytes: s.bytes,
            entries: s.levels.iter().map(|m| m.len() as u64).sum(),
            hits: s.hits,
            misses: s.misses,
            evictions: s.evictions,
            invalidations: s.invalidations,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    fn internal(lowest: u64, highest: u64, level: u8) -> Node {
        Node {
            version: 1,
            leftmost: RemoteAddr::host(NodeId(0), 4096 + lowest * 64),
            sibling: RemoteAddr::NULL,
            level,
            lowest: lowest.to_be_bytes().to_vec(),
            highest: highest.to_be_bytes().to_vec(),
            records: Vec::new(),
            slots: Vec::new(),
        }
    }

    fn at(i: u64) -> RemoteAddr {
        RemoteAddr::host(NodeId(0), i * 1024)
    }

    #[test]
    fn deepest_covering_copy_wins_and_splits_replace() {
        let c = IndexCache::new(1 << 20, CacheLevels::AllInternal);
        c.insert(at(1), &internal(0, 1000, 2), 1024);
        c.insert(at(2), &internal(0, 100, 1), 1024);
        assert_eq!(c.lookup(&50u64.to_be_bytes()).unwrap().addr, at(2));
        assert_eq!(c.lookup(&500u64.to_be_bytes()).unwrap().addr, at(1));
        // Level-1 node [0, 100) split into [0, 50) and [50, 100): the right copy replaces.
        c.insert(at(3), &internal(50, 100, 1), 1024);
        assert_eq!(c.lookup(&70u64.to_be_bytes()).unwrap().addr, at(3));
        // [0, 50) is not cached any more: the level-2 copy answers.
        assert_eq!(c.lookup(&10u64.to_be_bytes()).unwrap().addr, at(1));
        assert_eq!(c.stats().entries, 2);
    }

    #[test]
    fn level1_only_and_budget() {
        let c = IndexCache::new(3 * (1024 + ENTRY_OVERHEAD + 8), CacheLevels::Level1);
        c.insert(at(9), &internal(0, 1 << 40, 2), 1024);
        assert_eq!(c.stats().entries, 0, "level 2 is not cached");
        for i in 0..5u64 {
            c.insert(at(i), &internal(i * 10, i * 10 + 10, 1), 1024);
        }
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (3, 2));
        assert!(s.bytes <= 3 * (1024 + ENTRY_OVERHEAD + 8));
        assert!(c.lookup(&5u64.to_be_bytes()).is_none(), "the oldest went first");
        let e = c.lookup(&45u64.to_be_bytes()).unwrap();
        c.invalidate(&e);
        assert!(c.lookup(&45u64.to_be_bytes()).is_none());
        assert_eq!(c.stats().invalidations, 1);
        assert!(IndexCache::new(0, CacheLevels::Level1).lookup(&[0; 8]).is_none());
    }
}

//! A compute-node cache of B+tree internal nodes, keyed by their key ranges (Sherman's index
//! cache, digest §1.6, §2.9, §3.11; reused by CHIME with its own node type).
//!
//! Copies of internal nodes, per level, keyed by their highest fence. A lookup for `k` takes the
//! entry with the smallest highest fence above `k` and uses it if its lowest fence is at most
//! `k`; the deepest cached level wins. After a split the right half's copy has the old node's
//! highest fence and replaces the stale wide copy, as the artifact's ordering makes the new
//! narrower entries win. Sherman's artifact caches level-1 nodes only; CHIME's Sherman caches
//! every internal level ([`CacheLevels`]).
//!
//! The budget is in bytes: each copy is charged what its caller says it costs (its node image
//! plus the index's own entry overhead; see `sherman::cache::charge`). Over budget, the oldest
//! copy is evicted (FIFO). Sherman's artifact samples two random keys and evicts the less
//! frequently hit (digest §3.11, bug B12: its sampling misses with other key spaces); with the
//! budgets the papers ran, eviction does not happen at all (digest §5.2), so the policy is not
//! what their numbers measure.
//!
//! The indexes using it never free or move nodes (Sherman digest E6), so a stale copy still
//! routes to a node whose range only shrank from the right: the fence check on the next READ
//! catches it, and the caller then [`IndexCache::invalidate`]s the copy.

use crate::common::CacheStats;
use crate::common::bytes::SmallBytes;
use crate::common::primitive::{Mutex, lock};
use dmkit_rdma::RemoteAddr;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// A decoded B+tree node the cache can keep: its level (leaves are 0) and its fences, the key
/// range `[lowest, highest)` it covers.
pub trait RangeNode: Clone + std::fmt::Debug + Send + Sync + 'static {
    fn level(&self) -> u8;
    fn lowest(&self) -> &[u8];
    fn highest(&self) -> &[u8];
}

/// Which internal levels are cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLevels {
    /// Parents of leaves only (Sherman's artifact, SMART's fork).
    Level1,
    /// Every internal level (CHIME's Sherman).
    AllInternal,
}

/// A cached internal node.
#[derive(Debug)]
pub struct CachedNode<N> {
    pub addr: RemoteAddr,
    pub node: N,
    /// What the entry is charged against the budget.
    bytes: u64,
    /// The entry's place in the eviction queue: unique per queued record, so that a record
    /// is live exactly when the map still holds the entry it was queued for.
    queued: u64,
}

#[derive(Debug)]
struct CacheState<N> {
    /// Per level (index = level), copies keyed by highest fence (inline: a lookup compares
    /// fences without a pointer to follow each).
    levels: Vec<BTreeMap<SmallBytes, Arc<CachedNode<N>>>>,
    /// Insertion order, for eviction: (level, highest fence, the entry's `queued` number).
    fifo: VecDeque<(u8, SmallBytes, u64)>,
    /// The next `queued` number.
    next_queued: u64,
    bytes: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    invalidations: u64,
}

impl<N> Default for CacheState<N> {
    fn default() -> Self {
        CacheState {
            levels: Vec::new(),
            fifo: VecDeque::new(),
            next_queued: 0,
            bytes: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
            invalidations: 0,
        }
    }
}

/// The index cache of one compute node.
#[derive(Debug)]
pub struct IndexCache<N> {
    budget: u64,
    levels: CacheLevels,
    state: Mutex<CacheState<N>>,
}

impl<N: RangeNode> IndexCache<N> {
    pub fn new(budget_bytes: u64, levels: CacheLevels) -> IndexCache<N> {
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
    pub fn lookup(&self, key: &[u8]) -> Option<Arc<CachedNode<N>>> {
        let mut s = lock(&self.state);
        let found = s.levels.iter().skip(1).find_map(|map| {
            let (_, e) = map.range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded)).next()?;
            (e.node.lowest() <= key).then(|| e.clone())
        });
        if found.is_some() {
            s.hits += 1;
        } else {
            s.misses += 1;
        }
        found
    }

    /// Keeps a copy of an internal node just read at `addr`, charging `charged_bytes` (the whole
    /// entry: the caller adds its own overhead) against the budget.
    pub fn insert(&self, addr: RemoteAddr, node: &N, charged_bytes: u64) {
        if self.caches_level(node.level()) {
            self.insert_owned(addr, node.clone(), charged_bytes);
        }
    }

    /// [`IndexCache::insert`] of a node the caller has no more use for (no copy is made).
    pub fn insert_owned(&self, addr: RemoteAddr, node: N, charged_bytes: u64) {
        let level = node.level();
        if !self.caches_level(level) {
            return;
        }
        let bytes = charged_bytes;
        let highest = SmallBytes::from(node.highest());
        let mut s = lock(&self.state);
        if s.levels.len() <= level as usize {
            s.levels.resize_with(level as usize + 1, BTreeMap::new);
        }
        // A fresher copy of the same node keeps its place in the eviction queue; any other
        // entry gets a new record (and the replaced entry's record goes stale).
        let kept = s.levels[level as usize].get(&highest).filter(|old| old.addr == addr).map(|old| old.queued);
        let queued = kept.unwrap_or_else(|| {
            let q = s.next_queued;
            s.next_queued += 1;
            s.fifo.push_back((level, highest.clone(), q));
            q
        });
        let entry = Arc::new(CachedNode { addr, node, bytes, queued });
        if let Some(old) = s.levels[level as usize].insert(highest, entry) {
            s.bytes -= old.bytes;
        }
        s.bytes += bytes;
        while s.bytes > self.budget {
            let Some((lv, highest, q)) = s.fifo.pop_front() else { break };
            // Skip records of entries replaced or invalidated since.
            if s.levels[lv as usize].get(&highest).is_some_and(|e| e.queued == q) {
                let gone = s.levels[lv as usize].remove(&highest).expect("present");
                s.bytes -= gone.bytes;
                s.evictions += 1;
            }
        }
        // Drop stale records once they outnumber the live ones: every live entry has exactly
        // one record, so after this the queue holds the live entries only, and the cost is
        // amortised over at least as many insertions as the queue is long.
        let live: usize = s.levels.iter().map(BTreeMap::len).sum();
        if s.fifo.len() > 2 * live + 64 {
            let CacheState { levels, fifo, .. } = &mut *s;
            fifo.retain(|(lv, h, q)| levels[*lv as usize].get(h).is_some_and(|e| e.queued == *q));
            debug_assert_eq!(fifo.len(), live, "one record per live entry");
        }
    }

    /// Drops the copy `entry` (it routed a key to a node that does not cover it).
    pub fn invalidate(&self, entry: &CachedNode<N>) {
        let mut s = lock(&self.state);
        let level = entry.node.level() as usize;
        let highest = entry.node.highest();
        let same = s.levels.get(level).and_then(|m| m.get(highest)).is_some_and(|e| e.addr == entry.addr);
        if same {
            let gone = s.levels[level].remove(highest).expect("present");
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
            rebuilds: 0,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    #[derive(Clone, Debug)]
    struct TestNode {
        level: u8,
        lowest: Vec<u8>,
        highest: Vec<u8>,
    }

    impl RangeNode for TestNode {
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

    /// What Sherman charges a 1 KiB node with 8-byte fences: image, entry overhead, fence.
    const COPY: u64 = 1024 + 64 + 8;

    fn internal(lowest: u64, highest: u64, level: u8) -> TestNode {
        TestNode { level, lowest: lowest.to_be_bytes().to_vec(), highest: highest.to_be_bytes().to_vec() }
    }

    fn at(i: u64) -> RemoteAddr {
        RemoteAddr::host(NodeId(0), i * 1024)
    }

    #[test]
    fn deepest_covering_copy_wins_and_splits_replace() {
        let c = IndexCache::new(1 << 20, CacheLevels::AllInternal);
        c.insert(at(1), &internal(0, 1000, 2), COPY);
        c.insert(at(2), &internal(0, 100, 1), COPY);
        assert_eq!(c.lookup(&50u64.to_be_bytes()).unwrap().addr, at(2));
        assert_eq!(c.lookup(&500u64.to_be_bytes()).unwrap().addr, at(1));
        // Level-1 node [0, 100) split into [0, 50) and [50, 100): the right copy replaces.
        c.insert(at(3), &internal(50, 100, 1), COPY);
        assert_eq!(c.lookup(&70u64.to_be_bytes()).unwrap().addr, at(3));
        // [0, 50) is not cached any more: the level-2 copy answers.
        assert_eq!(c.lookup(&10u64.to_be_bytes()).unwrap().addr, at(1));
        assert_eq!(c.stats().entries, 2);
        assert_eq!(c.stats().bytes, 2 * COPY);
    }

    #[test]
    fn level1_only_and_budget() {
        let c = IndexCache::new(3 * COPY, CacheLevels::Level1);
        c.insert(at(9), &internal(0, 1 << 40, 2), COPY);
        assert_eq!(c.stats().entries, 0, "level 2 is not cached");
        for i in 0..5u64 {
            c.insert(at(i), &internal(i * 10, i * 10 + 10, 1), COPY);
        }
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (3, 2));
        assert!(s.bytes <= 3 * COPY);
        assert!(c.lookup(&5u64.to_be_bytes()).is_none(), "the oldest went first");
        let e = c.lookup(&45u64.to_be_bytes()).unwrap();
        c.invalidate(&e);
        assert!(c.lookup(&45u64.to_be_bytes()).is_none());
        assert_eq!(c.stats().invalidations, 1);
        assert!(IndexCache::<TestNode>::new(0, CacheLevels::Level1).lookup(&[0; 8]).is_none());
    }
}

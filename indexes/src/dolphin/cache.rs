//! Dolphin's compute-node index cache (digest §2.5, §2.6): copies of remote internal nodes
//! keyed by the key bytes before the byte they branch on, with a byte budget and FIFO eviction.
//!
//! A lookup walks the key's prefixes from the longest (7 bytes: a special node) down and returns
//! the deepest cached node with a usable entry for the next byte: an exact match in a regular
//! node, the floor entry in a special node. A cached special node maps one entry to a leaf of
//! dozens of items (the paper's 1→N mapping), so the cache holds about one node per 7-byte
//! prefix rather than one pointer per item. Nothing cached is trusted: the traversal checks
//! reverse pointers and leaf ranges and invalidates what proves stale.
//!
//! Charged bytes per node follow the artifact (digest §2.6): `1 + 8 + 8·capacity` for the copy,
//! 8 for the hash slot it emulates, and `1 + prefix + 17·records` of radix-tree overhead, where
//! a record is one cached node in the local radix tree (17 B each: the reading under which the
//! digest's §6.6 sanity sum, 340–360 MB for 2^29 dense keys, comes out).
//! Eviction is FIFO over insertions; if the queue empties while over budget, all goes.

use super::layout::{Entry, NodeImage, SPECIAL_POS, capacity, kbyte, prefix_of};
use crate::common::CacheStats;
use crate::common::hash::FixedHashMap;
use crate::common::primitive::{Mutex, lock};
use dmkit_rdma::RemoteAddr;
use std::collections::VecDeque;
use std::sync::Arc;

/// A cached node.
#[derive(Clone, Debug)]
pub struct Cached {
    pub addr: RemoteAddr,
    /// Key position (0-based) its entries branch on.
    pub branch: usize,
    pub entries: Arc<[Entry]>,
    charged: u64,
}

/// Where a cache hit starts the remote walk.
#[derive(Clone, Debug)]
pub struct Hit {
    pub node: Cached,
    pub index: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// (prefix length, prefix bytes) → node. Hashed (with a fixed hasher: nothing iterates
    /// it in an order that matters), so a lookup's probe of up to eight prefixes does not walk
    /// a tree each time.
    map: FixedHashMap<(u8, u64), Cached>,
    fifo: VecDeque<(u8, u64)>,
    stats: CacheStats,
}

#[derive(Debug)]
pub struct NodeCache {
    budget: u64,
    inner: Mutex<Inner>,
}

fn charge(prefix_len: usize, entries: usize) -> u64 {
    (1 + 8 + 8 * entries + 8 + 1 + prefix_len + 17) as u64
}

impl NodeCache {
    pub fn new(budget: u64) -> NodeCache {
        NodeCache { budget, inner: Mutex::new(Inner::default()) }
    }

    /// The deepest cached node with an entry for `key`.
    pub fn lookup(&self, key: u64) -> Option<Hit> {
        let mut g = lock(&self.inner);
        for len in (0..=SPECIAL_POS).rev() {
            let Some(node) = g.map.get(&(len as u8, prefix_of(key, len))) else { continue };
            let live = &node.entries[..];
            let b = kbyte(key, len);
            let index = if len == SPECIAL_POS {
                live.iter()
                    .enumerate()
                    .filter(|(_, e)| !e.is_null() && e.partial() <= b)
                    .max_by_key(|(_, e)| e.partial())
                    .map(|(i, _)| i)
            } else {
                live.iter().position(|e| !e.is_null() && e.partial() == b)
            };
            if let Some(index) = index {
                let node = node.clone();
                g.stats.hits += 1;
                return Some(Hit { node, index });
            }
        }
        g.stats.misses += 1;
        None
    }

    /// Caches (or replaces) the node at `addr` that branches on position `branch` for keys
    /// starting like `key`.
    pub fn insert(&self, key: u64, addr: RemoteAddr, image: &NodeImage) {
        let branch = image.header.branch_pos();
        if self.budget == 0 || branch > SPECIAL_POS {
            return;
        }
        let live = image.live();
        let id = (branch as u8, prefix_of(key, branch));
        let charged = charge(branch, capacity(image.header.node_type()));
        let node = Cached { addr, branch, entries: live.into(), charged };
        let mut g = lock(&self.inner);
        if let Some(old) = g.map.insert(id, node) {
            g.stats.bytes -= old.charged;
        } else {
            g.fifo.push_back(id);
            g.stats.entries += 1;
        }
        // Invalidation leaves its ids in the queue (no linear removal); compact it now and then.
        if g.fifo.len() > 2 * g.map.len() + 64 {
            let Inner { map, fifo, .. } = &mut *g;
            let mut seen = std::collections::BTreeSet::new();
            fifo.retain(|id| map.contains_key(id) && seen.insert(*id));
        }
        g.stats.bytes += charged;
        while g.stats.bytes > self.budget {
            match g.fifo.pop_front() {
                Some(victim) => {
                    if let Some(old) = g.map.remove(&victim) {
                        g.stats.bytes -= old.charged;
                        g.stats.entries -= 1;
                        g.stats.evictions += 1;
                    }
                }
                None => {
                    g.map.clear();
                    g.stats.bytes = 0;
                    g.stats.entries = 0;
                }
            }
        }
    }

    /// Drops the node cached for `key`'s first `branch` bytes, if it is the one at `addr`.
    pub fn invalidate(&self, key: u64, branch: usize, addr: RemoteAddr) {
        let mut g = lock(&self.inner);
        let id = (branch as u8, prefix_of(key, branch));
        if g.map.get(&id).is_some_and(|n| n.addr == addr) {
            let old = g.map.remove(&id).expect("present");
            g.stats.bytes -= old.charged;
            g.stats.entries -= 1;
            g.stats.invalidations += 1;
        }
    }

    /// Drops every node on `key`'s path.
    pub fn invalidate_path(&self, key: u64) {
        let mut g = lock(&self.inner);
        for len in 0..=SPECIAL_POS {
            let id = (len as u8, prefix_of(key, len));
            if let Some(old) = g.map.remove(&id) {
                g.stats.bytes -= old.charged;
                g.stats.entries -= 1;
                g.stats.invalidations += 1;
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        lock(&self.inner).stats
    }

    /// Cached nodes by kind: (special, regular).
    pub fn census(&self) -> (u64, u64) {
        let g = lock(&self.inner);
        let special = g.map.values().filter(|n| n.branch == SPECIAL_POS).count() as u64;
        (special, g.map.len() as u64 - special)
    }
}

//! The skiplist of one SLS partition (digest §2.3, decision 25): p = 1/4, at most 32 levels,
//! keys in bytewise order, nodes in an arena. One worker owns a partition, so it is a plain
//! single-writer structure.
//!
//! Every operation reports the nodes it visited ([`Visits`]), so the SLS can charge its CPU as
//! a real skiplist's cost grows with its size (the paper's Fig. 2a: 3 to 10 memory accesses per
//! lookup): a visit to a node of a level that holds more than [`CACHED_NODES`] nodes is a
//! dependent DRAM access (`CpuWork::CacheLookupLevel`); the sparse upper levels, which every
//! lookup walks, stay in the CPU's caches (`CpuWork::NodeSearchEntry`). 2^16 nodes of a level
//! (a few MiB of nodes) is an assumed share of a server's last-level cache.

use crate::common::bytes::SmallBytes;
use dmkit_rdma::ChaCha8Rng;
use rand::{Rng, SeedableRng};
use std::ops::Bound;

/// The most levels a node has.
pub const MAX_LEVEL: usize = 32;
/// Levels with at most this many nodes are taken to stay in the CPU's caches (assumed).
pub const CACHED_NODES: u64 = 1 << 16;

/// Nodes an operation visited: in levels that miss the CPU's caches, and in cached levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visits {
    pub misses: u64,
    pub hits: u64,
}

impl Visits {
    pub fn total(self) -> u64 {
        self.misses + self.hits
    }
}
const NIL: u32 = u32::MAX;
/// The head node's index.
const HEAD: u32 = 0;

/// What a key maps to: its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value {
    pub addr: u64,
    pub units: u8,
}

/// Links kept in the node itself: with p = 1/4, 99.6% of nodes have at most four levels.
const INLINE_LINKS: usize = 4;

/// A node's forward links, one per level: the first [`INLINE_LINKS`] in place, so a search
/// step reads one cache line of the node, not the node and then its link array (a skiplist
/// step was a quarter of loading HStore, almost all of it waiting for memory).
#[derive(Clone, Debug)]
struct Links {
    low: [u32; INLINE_LINKS],
    high: Vec<u32>,
    len: u8,
}

impl Links {
    fn new(levels: usize) -> Links {
        Links { low: [NIL; INLINE_LINKS], high: vec![NIL; levels.saturating_sub(INLINE_LINKS)], len: levels as u8 }
    }

    fn len(&self) -> usize {
        self.len as usize
    }

    fn get(&self, l: usize) -> Option<u32> {
        (l < self.len()).then(|| self[l])
    }
}

impl std::ops::Index<usize> for Links {
    type Output = u32;
    fn index(&self, l: usize) -> &u32 {
        assert!(l < self.len(), "level {l} of a node of {} levels", self.len);
        if l < INLINE_LINKS { &self.low[l] } else { &self.high[l - INLINE_LINKS] }
    }
}

impl std::ops::IndexMut<usize> for Links {
    fn index_mut(&mut self, l: usize) -> &mut u32 {
        assert!(l < self.len(), "level {l} of a node of {} levels", self.len);
        if l < INLINE_LINKS { &mut self.low[l] } else { &mut self.high[l - INLINE_LINKS] }
    }
}

/// The fields a search step reads come first, in one cache line.
#[derive(Clone, Debug)]
#[repr(C)]
struct Node {
    /// The key's first 8 bytes, big-endian and zero-padded: when two prefixes differ they
    /// order the keys as bytewise comparison does, so a search step is one integer compare
    /// (comparing slices was a sixth of loading HStore).
    prefix: u64,
    next: Links,
    key: SmallBytes,
    value: Value,
}

fn prefix_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

impl Node {
    /// Whether this node's key is at least `key` (whose prefix is `prefix`).
    fn at_least(&self, key: &[u8], prefix: u64) -> bool {
        match self.prefix.cmp(&prefix) {
            std::cmp::Ordering::Equal => self.key.as_slice() >= key,
            o => o.is_gt(),
        }
    }
}

/// A skiplist map from keys to blocks.
#[derive(Clone, Debug)]
pub struct SkipList {
    nodes: Vec<Node>,
    free: Vec<u32>,
    level: usize,
    len: usize,
    /// Nodes whose height is above each level (level 0 holds them all).
    level_counts: [u64; MAX_LEVEL],
    rng: ChaCha8Rng,
}

impl SkipList {
    /// An empty list whose node levels come from `seed`.
    pub fn new(seed: u64) -> SkipList {
        let head =
            Node { prefix: 0, key: SmallBytes::new(), value: Value { addr: 0, units: 0 }, next: Links::new(MAX_LEVEL) };
        SkipList {
            nodes: vec![head],
            free: Vec::new(),
            level: 1,
            len: 0,
            level_counts: [0; MAX_LEVEL],
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn random_level(&mut self) -> usize {
        let mut level = 1;
        while level < MAX_LEVEL && self.rng.random_range(0..4u32) == 0 {
            level += 1;
        }
        level
    }

    /// Counts a visit to a node at level `l`.
    fn visit(&self, v: &mut Visits, l: usize) {
        if self.level_counts[l] > CACHED_NODES {
            v.misses += 1;
        } else {
            v.hits += 1;
        }
    }

    /// For each level, the last node before `key` (the head if none); and the nodes visited.
    fn predecessors(&self, key: &[u8]) -> ([u32; MAX_LEVEL], Visits) {
        let mut update = [HEAD; MAX_LEVEL];
        let mut at = HEAD;
        let mut visited = Visits { misses: 0, hits: 1 };
        let prefix = prefix_of(key);
        for l in (0..self.level).rev() {
            loop {
                let next = self.nodes[at as usize].next[l];
                if next == NIL {
                    break;
                }
                // Reading the next node's key is the access that may miss.
                self.visit(&mut visited, l);
                if self.nodes[next as usize].at_least(key, prefix) {
                    break;
                }
                at = next;
            }
            update[l] = at;
        }
        (update, visited)
    }

    /// The node holding `key` right after `pred`, if any.
    fn at(&self, pred: u32, key: &[u8]) -> Option<u32> {
        let next = self.nodes[pred as usize].next[0];
        (next != NIL && self.nodes[next as usize].key.as_slice() == key).then_some(next)
    }

    pub fn get(&self, key: &[u8]) -> (Option<Value>, Visits) {
        let (update, visited) = self.predecessors(key);
        (self.at(update[0], key).map(|n| self.nodes[n as usize].value), visited)
    }

    /// Inserts or replaces; returns the old value.
    pub fn upsert(&mut self, key: &[u8], value: Value) -> (Option<Value>, Visits) {
        let (update, visited) = self.predecessors(key);
        if let Some(n) = self.at(update[0], key) {
            return (Some(std::mem::replace(&mut self.nodes[n as usize].value, value)), visited);
        }
        let level = self.random_level();
        let node = Node { prefix: prefix_of(key), key: SmallBytes::from(key), value, next: Links::new(level) };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        for (l, &pred) in update.iter().enumerate().take(level) {
            // Levels above the list's current top start at the head.
            let pred = if l < self.level { pred } else { HEAD };
            self.nodes[id as usize].next[l] = self.nodes[pred as usize].next[l];
            self.nodes[pred as usize].next[l] = id;
        }
        self.level = self.level.max(level);
        self.len += 1;
        for count in &mut self.level_counts[..level] {
            *count += 1;
        }
        (None, visited)
    }

    /// Replaces the value of a present key; returns the old value (`None`: absent, unchanged).
    pub fn update(&mut self, key: &[u8], value: Value) -> (Option<Value>, Visits) {
        let (update, visited) = self.predecessors(key);
        let old = self.at(update[0], key).map(|n| std::mem::replace(&mut self.nodes[n as usize].value, value));
        (old, visited)
    }

    /// Removes a key; returns its value.
    pub fn remove(&mut self, key: &[u8]) -> (Option<Value>, Visits) {
        let (update, visited) = self.predecessors(key);
        let Some(n) = self.at(update[0], key) else { return (None, visited) };
        let levels = self.nodes[n as usize].next.len();
        for (l, &pred) in update.iter().enumerate().take(levels) {
            self.nodes[pred as usize].next[l] = self.nodes[n as usize].next[l];
        }
        while self.level > 1 && self.nodes[HEAD as usize].next[self.level - 1] == NIL {
            self.level -= 1;
        }
        for count in &mut self.level_counts[..levels] {
            *count -= 1;
        }
        let node = &mut self.nodes[n as usize];
        node.key = SmallBytes::new();
        node.next = Links::new(0);
        self.free.push(n);
        self.len -= 1;
        (Some(node.value), visited)
    }

    /// Up to `limit` entries with keys within the bounds, ascending; and the nodes visited.
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> (Vec<(Vec<u8>, Value)>, Visits) {
        let (update, mut visited) = match start {
            Bound::Unbounded => ([HEAD; MAX_LEVEL], Visits { misses: 0, hits: 1 }),
            Bound::Included(k) | Bound::Excluded(k) => self.predecessors(k),
        };
        let mut out = Vec::new();
        let mut at = self.nodes[update[0] as usize].next[0];
        while at != NIL && out.len() < limit {
            let node = &self.nodes[at as usize];
            self.visit(&mut visited, 0);
            let after_start = match start {
                Bound::Excluded(k) => node.key.as_slice() > k,
                _ => true,
            };
            let before_end = match end {
                Bound::Unbounded => true,
                Bound::Included(k) => node.key.as_slice() <= k,
                Bound::Excluded(k) => node.key.as_slice() < k,
            };
            if !before_end {
                break;
            }
            if after_start {
                out.push((node.key.to_vec(), node.value));
            }
            at = node.next[0];
        }
        (out, visited)
    }

    /// Every entry, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Value)> + '_ {
        let mut at = self.nodes[HEAD as usize].next[0];
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let node = &self.nodes[at as usize];
            at = node.next[0];
            Some((node.key.as_slice(), node.value))
        })
    }

    /// Checks the list's shape: every level sorted and a sub-list of the one below, the count
    /// right. For invariant walks.
    pub fn check(&self) -> Result<(), String> {
        let mut below: Option<Vec<u32>> = None;
        for l in 0..MAX_LEVEL {
            let mut chain = Vec::new();
            let mut at = self.nodes[HEAD as usize].next[l];
            while at != NIL {
                if chain.len() > self.nodes.len() {
                    return Err(format!("level {l} has a cycle"));
                }
                chain.push(at);
                at = self.nodes[at as usize].next.get(l).ok_or(format!("node {at} linked above its level"))?;
            }
            if chain.windows(2).any(|w| self.nodes[w[0] as usize].key >= self.nodes[w[1] as usize].key) {
                return Err(format!("level {l} is not strictly ascending"));
            }
            if let Some(below) = &below {
                if !chain.iter().all(|n| below.contains(n)) {
                    return Err(format!("level {l} has a node level {} lacks", l - 1));
                }
            } else if chain.len() != self.len {
                return Err(format!("level 0 holds {} nodes, the count says {}", chain.len(), self.len));
            }
            if chain.len() as u64 != self.level_counts[l] {
                return Err(format!("level {l} holds {} nodes, its count says {}", chain.len(), self.level_counts[l]));
            }
            if l >= self.level && !chain.is_empty() {
                return Err(format!("level {l} is above the top level {} but not empty", self.level));
            }
            below = Some(chain);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn v(x: u64) -> Value {
        Value { addr: x, units: 1 }
    }

    #[test]
    fn behaves_like_a_btreemap() {
        let mut list = SkipList::new(1);
        let mut model = BTreeMap::new();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for i in 0..4000u64 {
            let key = rng.random_range(0..300u64).to_be_bytes().to_vec();
            match rng.random_range(0..4) {
                0 | 1 => assert_eq!(list.upsert(&key, v(i)).0, model.insert(key.clone(), v(i))),
                2 => {
                    let want = model.get_mut(&key).map(|old| std::mem::replace(old, v(i)));
                    assert_eq!(list.update(&key, v(i)).0, want);
                }
                _ => assert_eq!(list.remove(&key).0, model.remove(&key)),
            }
            assert_eq!(list.get(&key).0, model.get(&key).copied());
            if i % 500 == 0 {
                list.check().unwrap();
            }
        }
        list.check().unwrap();
        assert_eq!(list.len(), model.len());
        let all: Vec<(Vec<u8>, Value)> = list.iter().map(|(k, v)| (k.to_vec(), v)).collect();
        assert_eq!(all, model.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>());
        let lo = 100u64.to_be_bytes();
        let hi = 200u64.to_be_bytes();
        let (got, _) = list.range(Bound::Excluded(&lo), Bound::Included(&hi), 30);
        let want: Vec<(Vec<u8>, Value)> = model
            .range::<[u8], _>((Bound::Excluded(&lo[..]), Bound::Included(&hi[..])))
            .take(30)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(got, want);
        assert!(list.range(Bound::Unbounded, Bound::Excluded(&lo), 0).0.is_empty());
    }

    #[test]
    fn keys_of_any_length_keep_bytewise_order() {
        // Short keys, keys that differ only after their 8-byte prefix, zero bytes, and one
        // key a prefix of another: the prefix compare must agree with slice order.
        let mut list = SkipList::new(3);
        let mut model = BTreeMap::new();
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for i in 0..3000u64 {
            let len = rng.random_range(0..13usize);
            let key: Vec<u8> = (0..len).map(|_| [0u8, 1, 255][rng.random_range(0..3usize)]).collect();
            if rng.random_range(0..3) == 0 {
                assert_eq!(list.remove(&key).0, model.remove(&key));
            } else {
                assert_eq!(list.upsert(&key, v(i)).0, model.insert(key.clone(), v(i)));
            }
            assert_eq!(list.get(&key).0, model.get(&key).copied());
        }
        list.check().unwrap();
        let all: Vec<Vec<u8>> = list.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(all, model.keys().cloned().collect::<Vec<_>>());
    }

    #[test]
    fn lookups_visit_logarithmically_many_nodes() {
        let mut list = SkipList::new(2);
        for i in 0..100_000u64 {
            list.upsert(&i.to_be_bytes(), v(i));
        }
        let visits: Vec<Visits> = (0..1000u64).map(|i| list.get(&(i * 97).to_be_bytes()).1).collect();
        let mean = visits.iter().map(|v| v.total()).sum::<u64>() as f64 / 1000.0;
        // log4(100 000) ≈ 8.3 levels, a few steps each.
        assert!((8.0..60.0).contains(&mean), "mean visits {mean}");
        // Only level 0 (100 000 nodes; level 1 has about 25 000) holds more than 2^16 nodes:
        // the bottom level's visits miss, the upper levels' hit.
        let misses = visits.iter().map(|v| v.misses).sum::<u64>() as f64 / 1000.0;
        assert!((1.0..6.0).contains(&misses), "mean misses {misses}");
        list.check().unwrap();
    }
}

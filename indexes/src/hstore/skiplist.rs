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
use crate::common::hash::FixedHashSet;
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

/// Links kept in the node's search part: with p = 1/4, 99.6% of nodes have at most four
/// levels; a taller node's other links are in [`SkipList::tall`].
const INLINE_LINKS: usize = 4;
/// Links of a tall node kept outside its search part.
const TALL_LINKS: usize = MAX_LEVEL - INLINE_LINKS;
/// Keys of at most this many bytes are wholly in their prefix: with the length, the prefix
/// compares and matches them without reading the key.
const PREFIX_BYTES: usize = 8;

/// What a search reads of a node, one cache line: its links, each with the prefix of the key
/// it leads to, and its own key's prefix and length. A search compares the key with the
/// prefixes in the node it stands on and loads a node only when it moves to it, so a step
/// costs a dependent DRAM access only when it advances (a skiplist step was a quarter of
/// loading HStore, almost all of it waiting for memory: with each node's prefix in the node
/// itself, every compare loaded the node compared, a 104-byte node, often two lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
struct Hot {
    /// The prefix of the key each low link leads to (0 for NIL).
    next_prefix: [u64; INLINE_LINKS],
    next: [u32; INLINE_LINKS],
    /// The key's first 8 bytes, big-endian and zero-padded: when two prefixes differ they
    /// order the keys as bytewise comparison does, so a search step is one integer compare
    /// (comparing slices was a sixth of loading HStore).
    prefix: u64,
    /// The node's slot in [`SkipList::tall`] if it has more than [`INLINE_LINKS`] levels.
    tall: u32,
    levels: u8,
    /// The key's length, 255 for any longer key.
    key_len: u8,
}

/// The links of a tall node above [`INLINE_LINKS`], each beside its key's prefix (one line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tall {
    links: [TallLink; TALL_LINKS],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TallLink {
    prefix: u64,
    to: u32,
}

const TALL_NIL: Tall = Tall { links: [TallLink { prefix: 0, to: NIL }; TALL_LINKS] };

/// What a search does not read: the key and the value.
#[derive(Clone, Debug, PartialEq)]
struct Cold {
    key: SmallBytes,
    value: Value,
}

fn prefix_of(key: &[u8]) -> u64 {
    let mut b = [0u8; PREFIX_BYTES];
    let n = key.len().min(PREFIX_BYTES);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

fn short_len(key: &[u8]) -> u8 {
    key.len().min(u8::MAX as usize) as u8
}

/// A skiplist map from keys to blocks. Node `i`'s search part is `hot[i]`, its key and value
/// `cold[i]`.
#[derive(Clone, Debug)]
pub struct SkipList {
    hot: Vec<Hot>,
    cold: Vec<Cold>,
    /// The links above [`INLINE_LINKS`] of the tall nodes, and the free slots.
    tall: Vec<Tall>,
    tall_free: Vec<u32>,
    free: Vec<u32>,
    level: usize,
    len: usize,
    /// Nodes whose height is above each level (level 0 holds them all).
    level_counts: [u64; MAX_LEVEL],
    rng: ChaCha8Rng,
    /// While the list holds nodes made by [`SkipList::upsert_unpriced`] and not yet linked
    /// (every node but the head): the hashes of their keys, to notice a key upserted twice
    /// (8 bytes a key, dropped when linked). `None` once linked, for good.
    unlinked: Option<FixedHashSet<u64>>,
}

impl SkipList {
    /// An empty list whose node levels come from `seed`.
    pub fn new(seed: u64) -> SkipList {
        SkipList::with_capacity(seed, 0)
    }

    /// An empty list with room for `keys` keys before its node arrays grow: a load of many
    /// keys otherwise copies them at every doubling, and the old and new arrays coexist while
    /// it does. Room is only reserved: untouched pages cost no host memory. (Loading 300 k
    /// keys: peak RSS 164 → 157 MB; the time did not change measurably.)
    pub fn with_capacity(seed: u64, keys: usize) -> SkipList {
        let mut list = SkipList {
            hot: Vec::with_capacity(keys + 1),
            cold: Vec::with_capacity(keys + 1),
            tall: Vec::new(),
            tall_free: Vec::new(),
            free: Vec::new(),
            level: 1,
            len: 0,
            level_counts: [0; MAX_LEVEL],
            rng: ChaCha8Rng::seed_from_u64(seed),
            unlinked: None,
        };
        let head = list.new_hot(&[], MAX_LEVEL);
        list.hot.push(head);
        list.cold.push(Cold { key: SmallBytes::new(), value: Value { addr: 0, units: 0 } });
        list
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A search part for `key` with `levels` levels, every link NIL (taking a tall slot if it
    /// needs one).
    fn new_hot(&mut self, key: &[u8], levels: usize) -> Hot {
        let tall = if levels > INLINE_LINKS {
            match self.tall_free.pop() {
                Some(t) => {
                    self.tall[t as usize] = TALL_NIL;
                    t
                }
                None => {
                    self.tall.push(TALL_NIL);
                    (self.tall.len() - 1) as u32
                }
            }
        } else {
            NIL
        };
        Hot {
            next_prefix: [0; INLINE_LINKS],
            next: [NIL; INLINE_LINKS],
            prefix: prefix_of(key),
            tall,
            levels: levels as u8,
            key_len: short_len(key),
        }
    }

    /// Node `n`'s link at level `l` (below its height) and the prefix of its target's key.
    #[inline]
    fn link(&self, n: u32, l: usize) -> (u32, u64) {
        let h = &self.hot[n as usize];
        assert!(l < h.levels as usize, "level {l} of a node of {} levels", h.levels);
        if l < INLINE_LINKS {
            (h.next[l], h.next_prefix[l])
        } else {
            let t = &self.tall[h.tall as usize].links[l - INLINE_LINKS];
            (t.to, t.prefix)
        }
    }

    fn next(&self, n: u32, l: usize) -> u32 {
        self.link(n, l).0
    }

    fn set_link(&mut self, n: u32, l: usize, (to, prefix): (u32, u64)) {
        let h = &mut self.hot[n as usize];
        assert!(l < h.levels as usize, "level {l} of a node of {} levels", h.levels);
        if l < INLINE_LINKS {
            h.next[l] = to;
            h.next_prefix[l] = prefix;
        } else {
            self.tall[h.tall as usize].links[l - INLINE_LINKS] = TallLink { prefix, to };
        }
    }

    fn key(&self, n: u32) -> &[u8] {
        self.cold[n as usize].key.as_slice()
    }

    /// Whether node `n`, whose key's prefix is `n_prefix`, holds a key of at least `key`
    /// (whose prefix is `prefix`): the prefixes decide unless equal; then, if both keys fit
    /// their prefixes, the shorter is the smaller. Only then is the node read.
    #[inline]
    fn at_least(&self, n: u32, n_prefix: u64, key: &[u8], prefix: u64) -> bool {
        match n_prefix.cmp(&prefix) {
            std::cmp::Ordering::Equal => {
                let n_len = self.hot[n as usize].key_len as usize;
                if n_len <= PREFIX_BYTES && key.len() <= PREFIX_BYTES { n_len >= key.len() } else { self.key(n) >= key }
            }
            o => o.is_gt(),
        }
    }

    /// Whether node `n`, whose key's prefix is `n_prefix`, holds `key` (whose prefix is
    /// `prefix`).
    fn holds(&self, n: u32, n_prefix: u64, key: &[u8], prefix: u64) -> bool {
        n_prefix == prefix
            && self.hot[n as usize].key_len == short_len(key)
            && (key.len() <= PREFIX_BYTES || self.key(n) == key)
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
                let (next, next_prefix) = self.link(at, l);
                if next == NIL {
                    break;
                }
                // Comparing with the next node's key is the visit charged (the access that may
                // miss on the paper's skiplist; here the prefix is in `at`'s line).
                self.visit(&mut visited, l);
                if self.at_least(next, next_prefix, key, prefix) {
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
        let (next, next_prefix) = self.link(pred, 0);
        (next != NIL && self.holds(next, next_prefix, key, prefix_of(key))).then_some(next)
    }

    pub fn get(&mut self, key: &[u8]) -> (Option<Value>, Visits) {
        self.settle();
        let (update, visited) = self.predecessors(key);
        (self.at(update[0], key).map(|n| self.cold[n as usize].value), visited)
    }

    /// Inserts or replaces; returns the old value.
    pub fn upsert(&mut self, key: &[u8], value: Value) -> (Option<Value>, Visits) {
        self.settle();
        let (update, visited) = self.predecessors(key);
        if let Some(n) = self.at(update[0], key) {
            return (Some(std::mem::replace(&mut self.cold[n as usize].value, value)), visited);
        }
        let (id, level) = self.new_node(key, value);
        let prefix = self.hot[id as usize].prefix;
        for (l, &pred) in update.iter().enumerate().take(level) {
            // Levels above the list's current top start at the head.
            let pred = if l < self.level { pred } else { HEAD };
            let after = self.link(pred, l);
            self.set_link(id, l, after);
            self.set_link(pred, l, (id, prefix));
        }
        self.count_node(level);
        (None, visited)
    }

    /// A new node for `key`, not linked: its height drawn and its slot taken (a freed one
    /// first); returns the slot and the height.
    fn new_node(&mut self, key: &[u8], value: Value) -> (u32, usize) {
        let level = self.random_level();
        let hot = self.new_hot(key, level);
        let cold = Cold { key: SmallBytes::from(key), value };
        let id = match self.free.pop() {
            Some(id) => {
                self.hot[id as usize] = hot;
                self.cold[id as usize] = cold;
                id
            }
            None => {
                self.hot.push(hot);
                self.cold.push(cold);
                (self.hot.len() - 1) as u32
            }
        };
        (id, level)
    }

    /// Counts a node of height `level` that joined the list.
    fn count_node(&mut self, level: usize) {
        self.level = self.level.max(level);
        self.len += 1;
        for count in &mut self.level_counts[..level] {
            *count += 1;
        }
    }

    /// [`SkipList::upsert`] for a caller that does not price the visits (virtual time stands
    /// still: [`dmkit_rdma::ClientCtx::cpu_is_free`]); returns the old value. On a list that has
    /// only ever taken such upserts, the node is made as `upsert` makes it (its height drawn,
    /// its slots taken, in the same order) but linked later, all at once, by
    /// [`SkipList::settle`], which every other operation calls first: so the list ends exactly
    /// as the same upserts would have left it, node for node and link for link, without a
    /// search per insert (which was a fifth of loading HStore: some 30 dependent cache misses a
    /// key). Otherwise it is `upsert`.
    pub fn upsert_unpriced(&mut self, key: &[u8], value: Value) -> Option<Value> {
        if self.unlinked.is_none() && self.hot.len() > 1 {
            return self.upsert(key, value).0;
        }
        let hash = crate::hash::hash64(key, 0);
        // Room for as many keys as the list was made for, so the set never grows by rehashing.
        let room = self.hot.capacity().saturating_sub(1);
        let unlinked =
            self.unlinked.get_or_insert_with(|| FixedHashSet::with_capacity_and_hasher(room, Default::default()));
        if !unlinked.insert(hash) {
            // The key again, or another of its hash (rare in a load): link what there is and
            // search.
            self.settle();
            return self.upsert(key, value).0;
        }
        let (_, level) = self.new_node(key, value);
        self.count_node(level);
        None
    }

    /// Links the nodes [`SkipList::upsert_unpriced`] made: sorted by key, each level chained
    /// in order from the head (what inserting them one by one leaves, as links depend only on
    /// the keys and their heights). A no-op on a linked list.
    pub fn settle(&mut self) {
        if self.unlinked.take().is_none() {
            return;
        }
        // Every node but the head is unlinked (the list was empty when they came), and no slot
        // was freed. Sort by prefix and length, and by the keys only where those tie.
        debug_assert!(self.free.is_empty(), "a slot freed while nodes were unlinked");
        let mut order: Vec<(u64, u8, u32)> =
            self.hot.iter().enumerate().skip(1).map(|(n, h)| (h.prefix, h.key_len, n as u32)).collect();
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                if (a.1 as usize) <= PREFIX_BYTES && (b.1 as usize) <= PREFIX_BYTES {
                    a.1.cmp(&b.1)
                } else {
                    self.key(a.2).cmp(self.key(b.2))
                }
            })
        });
        let mut last = [HEAD; MAX_LEVEL];
        for &(prefix, _, n) in &order {
            for (l, pred) in last.iter_mut().enumerate().take(self.hot[n as usize].levels as usize) {
                self.set_link(*pred, l, (n, prefix));
                *pred = n;
            }
        }
    }

    /// Replaces the value of a present key; returns the old value (`None`: absent, unchanged).
    pub fn update(&mut self, key: &[u8], value: Value) -> (Option<Value>, Visits) {
        self.settle();
        let (update, visited) = self.predecessors(key);
        let old = self.at(update[0], key).map(|n| std::mem::replace(&mut self.cold[n as usize].value, value));
        (old, visited)
    }

    /// Removes a key; returns its value.
    pub fn remove(&mut self, key: &[u8]) -> (Option<Value>, Visits) {
        self.settle();
        let (update, visited) = self.predecessors(key);
        let Some(n) = self.at(update[0], key) else { return (None, visited) };
        let levels = self.hot[n as usize].levels as usize;
        for (l, &pred) in update.iter().enumerate().take(levels) {
            let after = self.link(n, l);
            self.set_link(pred, l, after);
        }
        while self.level > 1 && self.next(HEAD, self.level - 1) == NIL {
            self.level -= 1;
        }
        for count in &mut self.level_counts[..levels] {
            *count -= 1;
        }
        let hot = &mut self.hot[n as usize];
        if hot.tall != NIL {
            self.tall_free.push(hot.tall);
        }
        *hot = Hot {
            next_prefix: [0; INLINE_LINKS],
            next: [NIL; INLINE_LINKS],
            prefix: 0,
            tall: NIL,
            levels: 0,
            key_len: 0,
        };
        let value = self.cold[n as usize].value;
        self.cold[n as usize].key = SmallBytes::new();
        self.free.push(n);
        self.len -= 1;
        (Some(value), visited)
    }

    /// Up to `limit` entries with keys within the bounds, ascending; and the nodes visited.
    pub fn range(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> (Vec<(Vec<u8>, Value)>, Visits) {
        self.settle();
        let (update, mut visited) = match start {
            Bound::Unbounded => ([HEAD; MAX_LEVEL], Visits { misses: 0, hits: 1 }),
            Bound::Included(k) | Bound::Excluded(k) => self.predecessors(k),
        };
        let mut out = Vec::new();
        let mut at = self.next(update[0], 0);
        while at != NIL && out.len() < limit {
            let key = self.key(at);
            self.visit(&mut visited, 0);
            let after_start = match start {
                Bound::Excluded(k) => key > k,
                _ => true,
            };
            let before_end = match end {
                Bound::Unbounded => true,
                Bound::Included(k) => key <= k,
                Bound::Excluded(k) => key < k,
            };
            if !before_end {
                break;
            }
            if after_start {
                out.push((key.to_vec(), self.cold[at as usize].value));
            }
            at = self.next(at, 0);
        }
        (out, visited)
    }

    /// Every entry, ascending. The list must be settled ([`SkipList::settle`]).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Value)> + '_ {
        assert!(self.unlinked.is_none(), "iterating a skiplist with unlinked nodes: settle it first");
        let mut at = self.next(HEAD, 0);
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let node = &self.cold[at as usize];
            at = self.next(at, 0);
            Some((node.key.as_slice(), node.value))
        })
    }

    /// Checks the list's shape: every level sorted and a sub-list of the one below, the count
    /// right, each node's search part agreeing with its key. For invariant walks.
    pub fn check(&self) -> Result<(), String> {
        if self.unlinked.is_some() {
            return Err("the list has unlinked nodes: settle it before checking".into());
        }
        // The nodes of the level below, by index.
        let mut below: Option<Vec<bool>> = None;
        for l in 0..MAX_LEVEL {
            let mut chain = Vec::new();
            let mut at = HEAD;
            loop {
                let (next, next_prefix) = self.link(at, l);
                if next == NIL {
                    break;
                }
                if chain.len() > self.hot.len() {
                    return Err(format!("level {l} has a cycle"));
                }
                if l >= self.hot[next as usize].levels as usize {
                    return Err(format!("node {next} linked above its level"));
                }
                if next_prefix != self.hot[next as usize].prefix {
                    return Err(format!("node {at}'s level-{l} link carries the wrong prefix"));
                }
                chain.push(next);
                at = next;
            }
            if chain.windows(2).any(|w| self.key(w[0]) >= self.key(w[1])) {
                return Err(format!("level {l} is not strictly ascending"));
            }
            if let Some(below) = &below {
                if !chain.iter().all(|&n| below[n as usize]) {
                    return Err(format!("level {l} has a node level {} lacks", l - 1));
                }
            } else {
                if chain.len() != self.len {
                    return Err(format!("level 0 holds {} nodes, the count says {}", chain.len(), self.len));
                }
                if let Some(&n) = chain.iter().find(|&&n| {
                    let h = &self.hot[n as usize];
                    h.prefix != prefix_of(self.key(n)) || h.key_len != short_len(self.key(n))
                }) {
                    return Err(format!("node {n}'s prefix or length disagrees with its key"));
                }
            }
            if chain.len() as u64 != self.level_counts[l] {
                return Err(format!("level {l} holds {} nodes, its count says {}", chain.len(), self.level_counts[l]));
            }
            if l >= self.level && !chain.is_empty() {
                return Err(format!("level {l} is above the top level {} but not empty", self.level));
            }
            let mut members = vec![false; self.hot.len()];
            for &n in &chain {
                members[n as usize] = true;
            }
            below = Some(members);
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

    /// Every part of two lists' state, node for node (their slots, links, heights, tall
    /// slots, free lists, counts and random streams).
    fn assert_same_state(a: &SkipList, b: &SkipList) {
        assert_eq!(a.hot, b.hot, "search parts");
        assert_eq!(a.cold, b.cold, "keys and values");
        assert_eq!(
            a.tall.iter().map(|t| t.links).collect::<Vec<_>>(),
            b.tall.iter().map(|t| t.links).collect::<Vec<_>>()
        );
        assert_eq!((&a.tall_free, &a.free), (&b.tall_free, &b.free));
        assert_eq!((a.level, a.len, a.level_counts), (b.level, b.len, b.level_counts));
        assert_eq!(a.rng, b.rng, "random streams");
    }

    #[test]
    fn unpriced_upserts_settle_into_the_list_upserts_make() {
        // Keys of 0 to 20 bytes over a small alphabet: duplicates (the same key again, found by
        // its hash), keys equal in their 8-byte prefix (the settle's sort reads the keys), one
        // key a prefix of another, and enough of them for tall nodes.
        for seed in 0..6u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let n = [10, 300, 3000, 20_000, 20_000, 60_000][seed as usize];
            let keys: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let len = if seed == 4 { 8 } else { rng.random_range(0..21usize) };
                    (0..len).map(|_| [0u8, 1, 7, 255][rng.random_range(0..4usize)]).collect()
                })
                .collect();
            let (mut priced, mut unpriced) = (SkipList::with_capacity(seed, n), SkipList::with_capacity(seed, n));
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(unpriced.upsert_unpriced(k, v(i as u64)), priced.upsert(k, v(i as u64)).0, "key {i}");
            }
            unpriced.settle();
            assert_same_state(&priced, &unpriced);
            unpriced.check().unwrap();
            // The settled list goes on as the other does.
            for (i, k) in keys.iter().enumerate().step_by(7) {
                assert_eq!(unpriced.remove(k), priced.remove(k));
                assert_eq!(unpriced.upsert_unpriced(k, v(i as u64)), priced.upsert(k, v(i as u64)).0);
            }
            assert_same_state(&priced, &unpriced);
        }
    }

    #[test]
    fn any_other_use_links_the_unlinked_nodes_first() {
        // Distinct keys in no order (a duplicate would link the list at once).
        let keys: Vec<u64> = (0..5000u64).map(|i| i * 7919 % 1_000_003).collect();
        let fill = || {
            let mut list = SkipList::new(5);
            for (i, k) in keys.iter().enumerate() {
                list.upsert_unpriced(&k.to_be_bytes(), v(i as u64));
            }
            list
        };
        let mut model = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            model.insert(k.to_be_bytes().to_vec(), v(i as u64));
        }
        let probe = keys[17].to_be_bytes();
        let mut list = fill();
        assert!(list.check().is_err(), "a check of an unsettled list must say so");
        assert_eq!(list.get(&probe).0, model.get(&probe[..]).copied());
        list.check().unwrap();
        let mut list = fill();
        let (all, _) = list.range(Bound::Unbounded, Bound::Unbounded, usize::MAX);
        assert_eq!(all, model.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>());
        let mut list = fill();
        assert_eq!(list.update(&probe, v(0)).0, model.get(&probe[..]).copied());
        list.check().unwrap();
        let mut list = fill();
        assert_eq!(list.remove(&probe).0, model.get(&probe[..]).copied());
        list.check().unwrap();
        assert_eq!(list.len(), model.len() - 1);
    }

    /// The visits a search for `key` makes, from the keys' heights alone: the head; at each
    /// level `l` the nodes before the key that no taller node separates from it (height
    /// `l + 1`, none taller between them and the key); and at each level one node at or after
    /// the key, if the level has one.
    fn model_visits(list: &SkipList, heights: &[(Vec<u8>, usize)], key: &[u8]) -> Visits {
        let mut v = Visits { misses: 0, hits: 1 };
        let split = heights.partition_point(|(k, _)| k.as_slice() < key);
        let mut tallest_between = 0;
        for (_, h) in heights[..split].iter().rev() {
            if *h >= tallest_between {
                list.visit(&mut v, h - 1);
                tallest_between = *h;
            }
        }
        let tallest_after = heights[split..].iter().map(|(_, h)| *h).max().unwrap_or(0);
        for l in 0..tallest_after.min(list.level) {
            list.visit(&mut v, l);
        }
        v
    }

    #[test]
    fn visits_follow_from_the_heights() {
        // Past CACHED_NODES, so both kinds of visit are counted; keys of 8 bytes (decided by
        // the prefixes) and of 12 (some compares read the keys).
        for (len, n) in [(8usize, 70_000u64), (12, 3_000)] {
            let mut list = SkipList::new(6);
            let mut rng = ChaCha8Rng::seed_from_u64(len as u64);
            let key = |rng: &mut ChaCha8Rng| -> Vec<u8> {
                let mut k = vec![7u8; len];
                k[len - 8..].copy_from_slice(&rng.random_range(0..4 * n).to_be_bytes());
                k
            };
            for i in 0..n {
                let k = key(&mut rng);
                list.upsert(&k, v(i));
            }
            list.check().unwrap();
            let mut heights = Vec::new();
            let mut at = list.next(HEAD, 0);
            while at != NIL {
                heights.push((list.key(at).to_vec(), list.hot[at as usize].levels as usize));
                at = list.next(at, 0);
            }
            for _ in 0..2000 {
                let k = key(&mut rng);
                assert_eq!(list.get(&k).1, model_visits(&list, &heights, &k), "key {k:02x?}");
            }
        }
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

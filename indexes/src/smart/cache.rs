//! SMART's compute-node radix cache (digest §2.8, §3.7).
//!
//! Snapshots of remote internal nodes, keyed by the byte path that identifies each node: the key
//! bytes before its first slot partial (`key[..depth−1]` for a node whose slots discriminate on
//! depth `depth`). A lookup walks the key's prefixes from the longest down and returns the
//! deepest snapshot holding a live slot whose partial is the next key byte — a cache hit yields
//! a *slot*, and the first remote READ is of that slot's child. The paper keeps the snapshots
//! in a local ART with 16-byte long slots; a hash map over prefixes answers the same question
//! (the digest, §8.20: the local structure does not change the remote protocol), and the budget
//! charges what the artifact charges.
//!
//! Nothing in a snapshot is trusted: the reverse check on the child (its reverse pointer must be
//! the cached slot's address), the header type and the deleted marks catch stale entries, which
//! the traversal then invalidates. The root (empty prefix) is never cached, as in the artifact.
//! Eviction is FIFO over insertions; if the queue empties while still over budget, everything
//! goes (the artifact's rule).
//!
//! With kept slots ([`RadixCache::with_kept_slots`], `keep_slots=1`) the charge is split as the
//! artifact's ART-indexed cache splits it: an entry's `1 + 8 + 8n` bytes are freed when it is
//! evicted, invalidated or replaced, but its local slot (17 B) and prefix stay charged, since
//! the artifact's local tree (`CacheNode::records`, a concurrent map without erase) never
//! removes a slot and `FreeMemManager::consume_by_node` charges a node by its slot count. A
//! cache that keeps meeting new prefixes fills with them until the entries left cannot pay the
//! deficit, the queue empties and the whole cache is rebuilt empty (`RadixCache::_evict`).

use super::layout::Slot;
use crate::common::hash::{FixedHashMap, Fnv};
use crate::common::primitive::{Mutex, lock};
use dmkit_rdma::RemoteAddr;
use std::collections::VecDeque;
use std::hash::Hasher;
use std::sync::Arc;

/// A cached internal node: the slots of its type as read, where they live, the key position
/// they discriminate on, and the byte path that identifies the node. One host allocation,
/// shared by every cache holding the same snapshot ([`intern`]):
/// `[address, depth | type | prefix length | charged bytes, prefix words..., slots...]`; and
/// which insertion into its cache this is (the identity FIFO eviction and invalidation go by).
#[derive(Clone, Debug)]
pub struct CacheEntry {
    words: Arc<[u64]>,
    seq: u64,
}

/// The process's distinct snapshots, by content. A snapshot is immutable, and the compute nodes
/// of a run cache the same internal nodes as read (after loading, mostly the same versions), so
/// each distinct snapshot is held once whatever the number of compute nodes holding it: sixteen
/// compute nodes' caches cost the host one copy of their contents plus each cache's own map and
/// queue. Nothing but host memory changes (`interned_snapshots_change_nothing_but_sharing`).
struct Interner {
    map: FixedHashMap<u64, Arc<[u64]>>,
    /// Entries after the last sweep of snapshots no cache holds any more.
    live_after_sweep: usize,
}

static INTERNER: std::sync::LazyLock<std::sync::Mutex<Interner>> =
    std::sync::LazyLock::new(|| std::sync::Mutex::new(Interner { map: FixedHashMap::default(), live_after_sweep: 0 }));

/// The shared copy of `words`. A hash collision between different contents keeps the newer in
/// the table (the older stays valid in the caches holding it). Snapshots no cache holds are
/// dropped when the table has doubled since the last sweep (amortised: at most as many dead as
/// live snapshots are held).
fn intern(words: Vec<u64>) -> Arc<[u64]> {
    let h = snapshot_hash(&words);
    let mut i = INTERNER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = i.map.get(&h).filter(|a| ***a == *words) {
        return a.clone();
    }
    let a: Arc<[u64]> = words.into();
    i.map.insert(h, a.clone());
    if i.map.len() >= 2 * i.live_after_sweep.max(1 << 12) {
        i.map.retain(|_, a| Arc::strong_count(a) > 1);
        i.live_after_sweep = i.map.len();
    }
    a
}

/// A hash of a snapshot's words for the interner, a word at a time in four independent lanes.
/// (FNV a byte at a time was eight dependent multiplies a word, 2,000 for a Node256 snapshot:
/// 8% of loading ART.) Only the interner's sharing depends on it: a collision keeps the newer
/// snapshot, as before, and nothing a run sees changes.
fn snapshot_hash(words: &[u64]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [K, K.rotate_left(16), K.rotate_left(32), K.rotate_left(48)];
    let chunks = words.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for (lane, &w) in lanes.iter_mut().zip(c) {
            *lane = (*lane ^ w).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut h = words.len() as u64;
    for (lane, &w) in lanes.iter().zip(rest.iter().chain([0; 4].iter())) {
        h = (h ^ lane ^ w).wrapping_mul(K).rotate_left(29);
    }
    h ^ h >> 32
}

/// Packs bytes into little-endian words (the last one zero-padded).
fn pack(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks(8).map(|c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(w)
    })
}

impl CacheEntry {
    fn new(
        addr: RemoteAddr,
        depth: usize,
        node_type: u8,
        prefix: &[u8],
        slots: &[Slot],
        bytes: u64,
        seq: u64,
    ) -> CacheEntry {
        debug_assert!(depth < 1 << 16 && prefix.len() < 1 << 16 && bytes < 1 << 24);
        let meta = depth as u64 | u64::from(node_type) << 16 | (prefix.len() as u64) << 24 | bytes << 40;
        let words: Vec<u64> =
            [addr.raw(), meta].into_iter().chain(pack(prefix)).chain(slots.iter().map(|s| s.0)).collect();
        CacheEntry { words: intern(words), seq }
    }

    fn meta(&self) -> u64 {
        self.words[1]
    }

    /// The node's address (its first slot is at `addr + 16`).
    pub fn addr(&self) -> RemoteAddr {
        RemoteAddr::from_raw(self.words[0])
    }

    /// The key position (1-based) of the slots' partials.
    pub fn depth(&self) -> usize {
        (self.meta() & 0xFFFF) as usize
    }

    pub fn node_type(&self) -> u8 {
        (self.meta() >> 16) as u8
    }

    fn prefix_len(&self) -> usize {
        ((self.meta() >> 24) & 0xFFFF) as usize
    }

    fn bytes(&self) -> u64 {
        self.meta() >> 40
    }

    fn prefix_words(&self) -> &[u64] {
        &self.words[2..2 + self.prefix_len().div_ceil(8)]
    }

    fn is_prefix(&self, prefix: &[u8]) -> bool {
        prefix.len() == self.prefix_len() && pack(prefix).eq(self.prefix_words().iter().copied())
    }

    pub fn slot_count(&self) -> usize {
        self.words.len() - 2 - self.prefix_len().div_ceil(8)
    }

    pub fn slot(&self, i: usize) -> Slot {
        Slot(self.words[2 + self.prefix_len().div_ceil(8) + i])
    }

    /// The remote address of slot `i`.
    pub fn slot_addr(&self, i: usize) -> RemoteAddr {
        self.addr().add(16 + 8 * i as u64)
    }

    /// Whether both are the same insertion into one cache.
    fn same(&self, other: &CacheEntry) -> bool {
        self.seq == other.seq
    }
}

pub use crate::common::CacheStats;

/// Entries are keyed by the hash of their prefix (an entry holds its prefix, and a lookup
/// compares it: two prefixes with one hash share a place, the later replacing the earlier), so
/// the host pays one small allocation per entry beyond its slots, not three.
#[derive(Clone, Debug, Default)]
struct State {
    map: FixedHashMap<u64, CacheEntry>,
    /// Entries per prefix length, so a lookup probes only lengths that exist.
    lengths: Vec<u32>,
    /// Insertion order: (prefix hash, entry identity).
    fifo: VecDeque<(u64, u64)>,
    /// Insertions so far (the next entry's identity).
    inserted: u64,
    stats: CacheStats,
    /// With kept slots: the prefixes given a local slot since the cache was last rebuilt.
    slotted: FixedHashMap<u64, ()>,
}

fn prefix_hash(len: usize, words: impl Iterator<Item = u64>) -> u64 {
    let mut h = Fnv::default();
    for w in words {
        h.write(&w.to_le_bytes());
    }
    // Mix the length in, so that prefixes of zeros of different lengths differ.
    h.write(&(len as u32).to_le_bytes());
    h.finish()
}

/// One compute node's cache, shared by its clients.
#[derive(Debug)]
pub struct RadixCache {
    budget: u64,
    /// Slots stay charged after their entries go (the module doc).
    keep_slots: bool,
    state: Mutex<State>,
}

impl RadixCache {
    pub fn new(budget_bytes: u64) -> RadixCache {
        RadixCache::with_kept_slots(budget_bytes, false)
    }

    /// A cache that charges as the artifact's ART-indexed cache does when `keep_slots` (the
    /// module doc).
    pub fn with_kept_slots(budget_bytes: u64, keep_slots: bool) -> RadixCache {
        RadixCache { budget: budget_bytes, keep_slots, state: Mutex::new(State::default()) }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Makes this cache the state `other` is in — entries, their insertion order and
    /// identities, counters — sharing its snapshots (they are immutable). A compute node given
    /// another's warmed cache this way is in exactly the state warming it would have left.
    pub fn copy_from(&self, other: &RadixCache) {
        assert_eq!((self.budget, self.keep_slots), (other.budget, other.keep_slots), "caches of one kind");
        let copy = lock(&other.state).clone();
        *lock(&self.state) = copy;
    }

    /// Whether both hold the same entries (content and identity), in the same insertion order,
    /// with the same counters.
    pub fn same_state(&self, other: &RadixCache) -> bool {
        let (a, b) = (lock(&self.state), lock(&other.state));
        a.lengths == b.lengths
            && a.fifo == b.fifo
            && a.inserted == b.inserted
            && a.stats == b.stats
            && a.slotted.len() == b.slotted.len()
            && a.slotted.keys().all(|h| b.slotted.contains_key(h))
            && a.map.len() == b.map.len()
            && a.map.iter().all(|(h, e)| b.map.get(h).is_some_and(|f| f.same(e) && f.words == e.words))
    }

    /// Bytes charged for a snapshot of `slots` slots under a prefix of `prefix` bytes: the
    /// artifact's `1 + 8 + 8n` entry, its local node's long slot (17 B), and the prefix.
    pub fn entry_bytes(prefix: usize, slots: usize) -> u64 {
        (9 + 8 * slots) as u64 + Self::slot_bytes(prefix)
    }

    /// The part of [`RadixCache::entry_bytes`] that is the local tree's: the long slot (17 B)
    /// and the prefix, which kept slots keep charged after the entry goes.
    fn slot_bytes(prefix: usize) -> u64 {
        (17 + prefix) as u64
    }

    /// The deepest cached slot for `key`: its entry and index. Returns the number of prefix
    /// lengths probed too (the CPU cost of the walk).
    pub fn lookup(&self, key: &[u8]) -> (Option<(CacheEntry, usize)>, u32) {
        let mut s = lock(&self.state);
        let mut probes = 0;
        let top = key.len().min(s.lengths.len().saturating_sub(1));
        for plen in (1..=top).rev() {
            if s.lengths[plen] == 0 {
                continue;
            }
            probes += 1;
            let prefix = &key[..plen];
            if let Some(e) = s.map.get(&prefix_hash(plen, pack(prefix))).filter(|e| e.is_prefix(prefix)) {
                let next = key[plen];
                if let Some(i) = (0..e.slot_count()).find(|&i| {
                    let sl = e.slot(i);
                    !sl.is_empty() && sl.partial() == next
                }) {
                    let e = e.clone();
                    s.stats.hits += 1;
                    return (Some((e, i)), probes);
                }
            }
        }
        s.stats.misses += 1;
        (None, probes.max(1))
    }

    /// Adds or replaces the snapshot of the node at `addr` whose slots discriminate on key
    /// position `depth`, reached along `key`.
    pub fn add(&self, key: &[u8], depth: usize, addr: RemoteAddr, node_type: u8, slots: Vec<Slot>) {
        let plen = depth - 1;
        if plen == 0 || plen >= key.len() || self.budget == 0 {
            return;
        }
        let bytes = Self::entry_bytes(plen, slots.len());
        if bytes > self.budget {
            return;
        }
        let prefix = &key[..plen];
        let h = prefix_hash(plen, pack(prefix));
        let mut s = lock(&self.state);
        // With kept slots the entry is charged its own bytes, and its slot once per rebuild.
        let bytes = match self.keep_slots {
            false => bytes,
            true => {
                let slot = Self::slot_bytes(plen);
                if s.slotted.insert(h, ()).is_none() {
                    s.stats.bytes += slot;
                }
                bytes - slot
            }
        };
        s.inserted += 1;
        let id = s.inserted;
        let entry = CacheEntry::new(addr, depth, node_type, prefix, &slots, bytes, id);
        match s.map.insert(h, entry) {
            Some(old) => {
                s.stats.bytes -= old.bytes();
                if old.prefix_len() != plen {
                    s.lengths[old.prefix_len()] -= 1;
                    if s.lengths.len() <= plen {
                        s.lengths.resize(plen + 1, 0);
                    }
                    s.lengths[plen] += 1;
                }
            }
            None => {
                if s.lengths.len() <= plen {
                    s.lengths.resize(plen + 1, 0);
                }
                s.lengths[plen] += 1;
                s.stats.entries += 1;
            }
        }
        s.stats.bytes += bytes;
        s.fifo.push_back((h, id));
        while s.stats.bytes > self.budget {
            let Some((h, id)) = s.fifo.pop_front() else {
                s.map.clear();
                s.lengths.clear();
                s.slotted.clear();
                s.stats.bytes = 0;
                s.stats.entries = 0;
                s.stats.rebuilds += 1;
                break;
            };
            if s.map.get(&h).is_some_and(|e| e.seq == id) {
                Self::remove(&mut s, h);
                s.stats.evictions += 1;
            }
        }
    }

    fn remove(s: &mut State, h: u64) {
        if let Some(old) = s.map.remove(&h) {
            s.stats.bytes -= old.bytes();
            s.stats.entries -= 1;
            s.lengths[old.prefix_len()] -= 1;
        }
    }

    /// Drops `entry` if it is still a cached snapshot.
    pub fn invalidate(&self, entry: &CacheEntry) {
        let h = prefix_hash(entry.prefix_len(), entry.prefix_words().iter().copied());
        let mut s = lock(&self.state);
        if s.map.get(&h).is_some_and(|e| e.same(entry)) {
            Self::remove(&mut s, h);
            s.stats.invalidations += 1;
        }
    }

    pub fn stats(&self) -> CacheStats {
        lock(&self.state).stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    fn at(i: u64) -> RemoteAddr {
        RemoteAddr::host(NodeId(0), 4096 * i)
    }

    fn slot(p: u8, i: u64) -> Slot {
        Slot::leaf(p, 48, at(i))
    }

    #[test]
    fn deepest_matching_slot_wins_and_falls_back() {
        let c = RadixCache::new(1 << 20);
        c.add(&[1, 2, 3, 4], 2, at(1), 1, vec![slot(2, 10), slot(9, 11)]);
        c.add(&[1, 2, 3, 4], 3, at(2), 1, vec![slot(3, 12)]);
        let (hit, _) = c.lookup(&[1, 2, 3, 4]);
        let (e, i) = hit.expect("a hit");
        assert_eq!((e.addr(), i, e.slot_addr(i), e.depth()), (at(2), 0, at(2).add(16), 3));
        // No slot for byte 7 at depth 3: the shallower snapshot routes by byte 2.
        let (hit, _) = c.lookup(&[1, 2, 7, 4]);
        assert_eq!(hit.expect("a hit").0.addr(), at(1));
        assert!(c.lookup(&[5, 2, 3, 4]).0.is_none());
        let (hit, _) = c.lookup(&[1, 2, 3, 4]);
        c.invalidate(&hit.expect("a hit").0);
        assert_eq!(c.lookup(&[1, 2, 3, 4]).0.expect("fallback").0.addr(), at(1));
        assert_eq!(c.stats().invalidations, 1);
    }

    #[test]
    fn interned_snapshots_change_nothing_but_sharing() {
        // Two compute nodes cache the same snapshot: one host copy.
        let (a, b) = (RadixCache::new(1 << 20), RadixCache::new(1 << 20));
        a.add(&[7, 7, 1], 2, at(70), 1, vec![slot(7, 71)]);
        b.add(&[7, 7, 1], 2, at(70), 1, vec![slot(7, 71)]);
        let (ea, eb) = (a.lookup(&[7, 7, 1]).0.expect("hit").0, b.lookup(&[7, 7, 1]).0.expect("hit").0);
        assert!(Arc::ptr_eq(&ea.words, &eb.words), "one copy of a snapshot");
        // Invalidating it in one cache leaves the other's.
        a.invalidate(&ea);
        assert!(a.lookup(&[7, 7, 1]).0.is_none());
        assert!(b.lookup(&[7, 7, 1]).0.is_some());
        // The same snapshot added again is another insertion: the stale handle no longer
        // invalidates it, and the first insertion's queue record does not evict it.
        b.add(&[7, 7, 1], 2, at(70), 1, vec![slot(7, 71)]);
        b.invalidate(&eb);
        assert!(b.lookup(&[7, 7, 1]).0.is_some(), "a handle invalidates only its own insertion");
        let per = RadixCache::entry_bytes(1, 1);
        let c = RadixCache::new(2 * per);
        c.add(&[1, 0], 2, at(1), 1, vec![slot(0, 1)]);
        c.add(&[2, 0], 2, at(2), 1, vec![slot(0, 1)]);
        c.add(&[1, 0], 2, at(1), 1, vec![slot(0, 1)]);
        c.add(&[3, 0], 2, at(3), 1, vec![slot(0, 1)]);
        // Over budget: the oldest live insertion ([2]) goes, not the re-added [1] (whose
        // first insertion's queue record is stale, though its snapshot is the same allocation).
        assert!(c.lookup(&[1, 0]).0.is_some(), "the replaced insertion's record evicted nothing");
        assert!(c.lookup(&[2, 0]).0.is_none());
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn budget_evicts_oldest_and_root_is_never_cached() {
        let per = RadixCache::entry_bytes(1, 1);
        let c = RadixCache::new(2 * per);
        c.add(&[1, 0], 1, at(9), 1, vec![slot(0, 1)]);
        assert_eq!(c.stats().entries, 0, "an empty prefix (the root) is not cached");
        for b in 0..3u8 {
            c.add(&[b, 0], 2, at(b as u64), 1, vec![slot(0, 1)]);
        }
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (2, 1));
        assert!(c.lookup(&[0, 0]).0.is_none());
        assert!(c.lookup(&[2, 0]).0.is_some());
    }

    #[test]
    fn kept_slots_stay_charged_until_the_cache_is_rebuilt() {
        // Room for four entries of four slots under one-byte prefixes (an entry's own bytes,
        // 41, more than its slot's, 18).
        let four = || (0..4).map(|i| slot(i, 1)).collect::<Vec<_>>();
        let (per, slot_part) = (RadixCache::entry_bytes(1, 4), RadixCache::slot_bytes(1));
        let kept = RadixCache::with_kept_slots(4 * per, true);
        let freed = RadixCache::new(4 * per);
        for c in [&kept, &freed] {
            for b in 0..4u8 {
                c.add(&[b, 0], 2, at(b as u64), 1, four());
            }
            assert_eq!(c.stats().bytes, 4 * per, "the same charge while nothing is evicted");
            // An entry invalidated and added again: kept, its slot is not charged twice.
            let e = c.lookup(&[0, 0]).0.expect("a hit").0;
            c.invalidate(&e);
            c.add(&[0, 0], 2, at(0), 1, four());
            assert_eq!(c.stats().bytes, 4 * per);
        }
        // A new prefix evicts the oldest entry; kept, its slot stays charged, so the fifth
        // prefix costs a second eviction.
        for c in [&kept, &freed] {
            c.add(&[4, 0], 2, at(4), 1, four());
        }
        assert_eq!((freed.stats().entries, freed.stats().evictions), (4, 1));
        assert_eq!((kept.stats().entries, kept.stats().evictions), (3, 2));
        assert_eq!(kept.stats().bytes, 3 * per + 2 * slot_part);
        // New prefixes keep coming: the freeing cache holds four entries for ever; the kept
        // slots crowd the entries out until none is left to evict, and the cache starts empty.
        for b in 5..40u8 {
            for c in [&kept, &freed] {
                c.add(&[b, 0], 2, at(b as u64), 1, four());
            }
            assert!(kept.stats().bytes <= 4 * per);
        }
        assert_eq!((freed.stats().entries, freed.stats().rebuilds), (4, 0));
        assert!(kept.stats().rebuilds > 0, "{:?}", kept.stats());
        assert!(kept.stats().entries < 4, "{:?}", kept.stats());
    }
}

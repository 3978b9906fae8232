//! # CHIME's hotspot buffer (hotness-aware speculative read)
//!
//! A compute node remembers the exact leaf slot of hot keys, so that a search can READ one leaf
//! entry instead of the key's whole neighbourhood (CHIME digest §2.6 item 2, §3.7, §8 item 10).
//! One [`HotspotBuffer`] is shared by all clients of a compute node.
//!
//! ## Structure
//!
//! An entry is 16 B: the leaf's address (raw `u64`, never 0), the slot index in the leaf (`u16`),
//! the fingerprint of the key last seen there (`u16`) and an access counter (`u32`). Entries are
//! stored inline in a set-associative array of [`WAYS`] = 16 ways per set, sized to the byte
//! budget: `sets = max(1, budget / (16 B × 16))`, and [`HotspotBuffer::bytes`] reports
//! `sets × 256` B (30 MiB → 122,880 sets, 1,966,080 entries). A budget of 0 disables the buffer:
//! every call is a no-op, [`HotspotBuffer::candidates`] returns `None`, and nothing is counted.
//! Entry `(leaf, slot)` lives in set `((leaf + slot) × 0x9E37_79B9_7F4A_7C15 >> 32) mod sets`
//! (wrapping arithmetic): deterministic, and it spreads a leaf's neighbouring slots and 64-B
//! aligned leaf addresses over the sets.
//!
//! ## Update rule ([`HotspotBuffer::touch`])
//!
//! Applied on every remote access to a KV entry (search hit, update, scan result):
//!
//! - `(leaf, slot)` present with the same fingerprint → counter + 1 (saturating);
//! - present with another fingerprint (the entry is outdated) → fingerprint := new, counter := 1;
//! - absent → inserted into a free way of its set; if the set is full, the way with the lowest
//!   counter (ties: the lowest way index) is replaced (an *eviction*). After an eviction, the next
//!   [`ADMISSION_PAUSE`] admissions of absent entries, anywhere in the buffer, are skipped (the
//!   artifact's `delay_cnt`), so a stream of cold keys cannot flush the hot ones.
//!
//! ## Speculation rule ([`HotspotBuffer::candidates`], [`HotspotBuffer::forget`])
//!
//! Before a neighbourhood READ, the caller passes the key's neighbourhood slots (the artifact
//! checks `H + 1` slots, `[h, (h + H) mod S]`) and the key's fingerprint. The buffer returns the
//! slot whose entry matches the fingerprint with the highest counter (ties: the lowest slot), or
//! `None`. There is no counter threshold. The caller READs only that entry; if it holds another
//! key, the caller calls `forget(leaf, slot)` and falls back to the neighbourhood READ.
//!
//! ## Concurrency
//!
//! The sets are spread over 16 mutexes (set `s` behind mutex `s mod 16`); one is held only
//! while one set is scanned or updated, never across another set or a verb; `candidates` locks
//! the sets of the given slots one at a time, so its answer is a
//! hint (the speculative READ validates it). The admission pause and the statistics are relaxed
//! atomics: each skipped admission consumes exactly one unit of the pause, but which concurrent
//! admissions are skipped depends on the interleaving.
//!
//! ## Deviation from the artifact
//!
//! The artifact (`IdxCache.h`) has 10^6 buckets × 16 entry *pointers* (128 MB) and charges only
//! the 16-B entries to its 30 MB budget; when the budget is exceeded it evicts the lower-counter
//! of two random buckets' LFU entries, and that global eviction starts the admission pause. Here
//! the inline array *is* the budget (the digest's recommendation \[R\] §8.10): the only eviction is
//! the set-full replacement, which starts the pause, and no randomness is involved. The entry
//! count for a budget is the artifact's (budget / 16 B); the lock words are not charged.

use crate::common::primitive::{AtomicU64, Mutex, Ordering, lock};
use std::fmt;

/// Ways (entries) per set.
pub const WAYS: usize = 16;

/// Bytes of one entry: leaf address 8, slot 2, fingerprint 2, counter 4.
pub const ENTRY_BYTES: u64 = 16;

/// Admissions of absent entries skipped after an eviction (the artifact's `delay_cnt`).
pub const ADMISSION_PAUSE: u64 = 10;

/// The multiplier of the set-index mix (2^64 / golden ratio).
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// One way of a set; `leaf == 0` means empty (leaf addresses are never 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Way {
    leaf: u64,
    slot: u16,
    fp: u16,
    count: u32,
}

impl Way {
    /// Whether stored way `w` is entry `(leaf, slot)` (without decoding the rest).
    fn stored_is(w: &[u64; 2], leaf: u64, slot: u16) -> bool {
        w[0] == leaf && w[1] as u16 == slot
    }

    fn decode([leaf, rest]: [u64; 2]) -> Way {
        Way { leaf, slot: rest as u16, fp: (rest >> 16) as u16, count: (rest >> 32) as u32 }
    }

    fn encode(self) -> [u64; 2] {
        [self.leaf, u64::from(self.slot) | u64::from(self.fp) << 16 | u64::from(self.count) << 32]
    }
}

/// A set as stored: each way two words, `[leaf, slot | fp << 16 | count << 32]`; an empty way
/// is all zeros.
type Set = [[u64; 2]; WAYS];

/// Locks over the sets: set `s` is entry `s / STRIPES` of stripe `s % STRIPES`.
const STRIPES: usize = 16;

/// What a hotspot buffer holds and did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotspotStats {
    /// Bytes of the entry array (`sets × 16 × 16`), see [`HotspotBuffer::bytes`].
    pub bytes: u64,
    /// Entries currently held.
    pub entries: u64,
    /// [`HotspotBuffer::candidates`] calls that returned a slot.
    pub hits: u64,
    /// [`HotspotBuffer::candidates`] calls that returned `None`.
    pub misses: u64,
    /// Entries replaced because their set was full.
    pub evictions: u64,
}

/// The hotspot buffer of one compute node (see the module doc). Shared by the node's clients;
/// every method takes `&self`.
pub struct HotspotBuffer {
    /// The sets, over up to [`STRIPES`] locks (none when disabled, budget 0). A stripe's sets
    /// are one zero-filled allocation of plain words, so the host's OS hands its pages over as
    /// zero pages and a page of sets never touched is never faulted in: built a set at a time
    /// (a mutex and 16 default ways each), the 30 MB buffers of 16 compute nodes were written
    /// in full for every run: faulting them in was 19% of a 20 ms CHIME run's wall time.
    stripes: Vec<Mutex<Vec<Set>>>,
    sets: usize,
    /// Admissions still to skip after the last eviction.
    pause: AtomicU64,
    entries: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl fmt::Debug for HotspotBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotspotBuffer")
            .field("sets", &self.sets)
            .field("pause", &self.pause.load(Ordering::Relaxed))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl HotspotBuffer {
    /// A buffer of `max(1, budget_bytes / 256)` sets of [`WAYS`] entries; disabled if
    /// `budget_bytes` is 0. A non-zero budget below 256 B still gets one set.
    pub fn new(budget_bytes: u64) -> HotspotBuffer {
        let sets = if budget_bytes == 0 { 0 } else { (budget_bytes / (ENTRY_BYTES * WAYS as u64)).max(1) };
        let sets = usize::try_from(sets).expect("hotspot buffer budget exceeds the address space");
        let stripes = sets.min(STRIPES);
        HotspotBuffer {
            // `vec!` of zeros allocates zeroed memory (no write per set).
            stripes: (0..stripes).map(|i| Mutex::new(vec![[[0u64; 2]; WAYS]; (sets - i).div_ceil(stripes)])).collect(),
            sets,
            pause: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Whether the buffer holds anything at all (its budget is not 0).
    pub fn is_enabled(&self) -> bool {
        self.sets > 0
    }

    /// Number of sets (0 when disabled).
    pub fn sets(&self) -> usize {
        self.sets
    }

    /// Bytes charged to the budget: the whole inline entry array, `sets × 16 × 16`.
    pub fn bytes(&self) -> u64 {
        self.sets as u64 * WAYS as u64 * ENTRY_BYTES
    }

    /// Applies the update rule (module doc) to the entry `(leaf, slot)` just accessed remotely,
    /// which held a key of fingerprint `fp`. No-op when disabled or for `leaf == 0`.
    pub fn touch(&self, leaf: u64, slot: u16, fp: u16) {
        let Some((stripe, at)) = self.locate(leaf, slot) else { return };
        let mut guard = lock(&self.stripes[stripe]);
        let set = &mut guard[at];
        if let Some(i) = set.iter().position(|w| Way::stored_is(w, leaf, slot)) {
            let mut way = Way::decode(set[i]);
            if way.fp == fp {
                way.count = way.count.saturating_add(1);
            } else {
                way.fp = fp;
                way.count = 1;
            }
            set[i] = way.encode();
            return;
        }
        // Absent: an admission, unless an eviction paused them.
        if self.pause.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| p.checked_sub(1)).is_ok() {
            return;
        }
        let new = Way { leaf, slot, fp, count: 1 }.encode();
        if let Some(free) = set.iter().position(|w| w[0] == 0) {
            set[free] = new;
            self.entries.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Full: replace the lowest counter; `min_by_key` keeps the first (lowest way) of ties.
        let victim = (0..WAYS).min_by_key(|&i| Way::decode(set[i]).count).expect("a set has ways");
        set[victim] = new;
        self.evictions.fetch_add(1, Ordering::Relaxed);
        self.pause.store(ADMISSION_PAUSE, Ordering::Relaxed);
    }

    /// The speculation rule (module doc): among `slots` of `leaf` (the key's neighbourhood), the
    /// slot whose entry is present with fingerprint `fp` and the highest counter, ties toward the
    /// lowest slot; `None` if there is none. Counts a hit or a miss (nothing when disabled).
    pub fn candidates(&self, leaf: u64, slots: impl IntoIterator<Item = u16>, fp: u16) -> Option<u16> {
        if !self.is_enabled() {
            return None;
        }
        let mut best: Option<(u16, u32)> = None;
        for slot in slots {
            let Some(way) = self.way(leaf, slot) else { continue };
            let count = Some(way.count).filter(|_| way.fp == fp);
            if let Some(count) = count {
                if best.is_none_or(|(s, c)| count > c || (count == c && slot < s)) {
                    best = Some((slot, count));
                }
            }
        }
        let counter = if best.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        best.map(|(slot, _)| slot)
    }

    /// Drops the entry `(leaf, slot)`, if present (a speculative READ found another key there).
    pub fn forget(&self, leaf: u64, slot: u16) {
        let Some((stripe, at)) = self.locate(leaf, slot) else { return };
        let mut guard = lock(&self.stripes[stripe]);
        let set = &mut guard[at];
        if let Some(i) = set.iter().position(|w| Way::stored_is(w, leaf, slot)) {
            set[i] = [0; 2];
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// What the buffer holds and did so far.
    pub fn stats(&self) -> HotspotStats {
        HotspotStats {
            bytes: self.bytes(),
            entries: self.entries.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// The set of entry `(leaf, slot)`; `None` when disabled or for the null leaf.
    fn set_of(&self, leaf: u64, slot: u16) -> Option<usize> {
        if leaf == 0 || self.sets == 0 {
            return None;
        }
        let mixed = leaf.wrapping_add(u64::from(slot)).wrapping_mul(MIX) >> 32;
        Some((mixed % self.sets as u64) as usize)
    }

    /// The stripe and the index in it of entry `(leaf, slot)`'s set.
    fn locate(&self, leaf: u64, slot: u16) -> Option<(usize, usize)> {
        let set = self.set_of(leaf, slot)?;
        Some((set % self.stripes.len(), set / self.stripes.len()))
    }

    /// Entry `(leaf, slot)`, if present.
    fn way(&self, leaf: u64, slot: u16) -> Option<Way> {
        let (stripe, at) = self.locate(leaf, slot)?;
        lock(&self.stripes[stripe])[at].iter().find(|w| Way::stored_is(w, leaf, slot)).map(|&w| Way::decode(w))
    }

    /// Way `i` of set `set` (tests).
    #[cfg(test)]
    fn way_at(&self, set: usize, i: usize) -> Way {
        Way::decode(lock(&self.stripes[set % self.stripes.len()])[set / self.stripes.len()][i])
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// One set, so every entry competes for the same 16 ways.
    const ONE_SET: u64 = ENTRY_BYTES * WAYS as u64;

    /// The `(fingerprint, counter)` of entry `(leaf, slot)`, if present.
    fn peek(b: &HotspotBuffer, leaf: u64, slot: u16) -> Option<(u16, u32)> {
        b.way(leaf, slot).map(|w| (w.fp, w.count))
    }

    #[test]
    fn buffer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<HotspotBuffer>();
    }

    #[test]
    fn bytes_arithmetic() {
        let b = HotspotBuffer::new(30 << 20);
        assert_eq!(b.sets(), 122_880);
        assert_eq!(b.bytes(), 30 << 20);
        assert_eq!(b.stats(), HotspotStats { bytes: 30 << 20, ..HotspotStats::default() });
        // Rounded down to whole sets, but never below one set.
        assert_eq!(HotspotBuffer::new(1000).sets(), 3);
        assert_eq!(HotspotBuffer::new(1000).bytes(), 768);
        assert_eq!(HotspotBuffer::new(1).sets(), 1);
        assert_eq!(HotspotBuffer::new(1).bytes(), 256);
    }

    #[test]
    fn update_rule() {
        let b = HotspotBuffer::new(1 << 20);
        let leaf = 0x1_0000_0040;
        b.touch(leaf, 5, 0xAB);
        assert_eq!(peek(&b, leaf, 5), Some((0xAB, 1)));
        b.touch(leaf, 5, 0xAB);
        b.touch(leaf, 5, 0xAB);
        assert_eq!(peek(&b, leaf, 5), Some((0xAB, 3)));
        // Another key now sits in the slot: the entry is outdated.
        b.touch(leaf, 5, 0xCD);
        assert_eq!(peek(&b, leaf, 5), Some((0xCD, 1)));
        assert_eq!(b.stats().entries, 1);
        // Other slots and leaves are independent entries.
        b.touch(leaf, 6, 0xCD);
        b.touch(leaf + 0x400, 5, 0xCD);
        assert_eq!(peek(&b, leaf, 5), Some((0xCD, 1)));
        assert_eq!(b.stats().entries, 3);
        // Leaf 0 is the null address: ignored.
        b.touch(0, 5, 0xCD);
        assert_eq!(b.stats().entries, 3);
    }

    #[test]
    fn counter_saturates() {
        let b = HotspotBuffer::new(ONE_SET);
        b.touch(64, 1, 7);
        {
            let mut stripe = lock(&b.stripes[0]);
            let i = stripe[0].iter().position(|w| Way::stored_is(w, 64, 1)).expect("present");
            stripe[0][i] = Way { count: u32::MAX - 1, ..Way::decode(stripe[0][i]) }.encode();
        }
        b.touch(64, 1, 7);
        b.touch(64, 1, 7);
        assert_eq!(peek(&b, 64, 1), Some((7, u32::MAX)));
    }

    #[test]
    fn candidates_pick_the_hottest_matching_slot() {
        let b = HotspotBuffer::new(1 << 20);
        let leaf = 0x40;
        let touch = |slot: u16, fp: u16, times: u32| (0..times).for_each(|_| b.touch(leaf, slot, fp));
        touch(3, 9, 2);
        touch(4, 9, 5);
        touch(6, 8, 7); // hotter, but another fingerprint
        touch(20, 9, 9); // hotter, but outside the neighbourhood
        assert_eq!(b.candidates(leaf, 0..8, 9), Some(4));
        assert_eq!(b.candidates(leaf, 0..8, 8), Some(6));
        assert_eq!(b.candidates(leaf, 16..24, 9), Some(20));
        assert_eq!(b.candidates(leaf, 0..4, 9), Some(3));
        assert_eq!(b.candidates(leaf, 0..8, 1), None);
        assert_eq!(b.candidates(leaf + 0x400, 0..8, 9), None);
        // Ties go to the lowest slot, whatever the order of the slots (a wrapped neighbourhood).
        touch(62, 9, 5);
        assert_eq!(b.candidates(leaf, [62, 63, 0, 1, 2, 3, 4, 5], 9), Some(4));
        touch(62, 9, 1);
        assert_eq!(b.candidates(leaf, [62, 63, 0, 1, 2, 3, 4, 5], 9), Some(62));
        let s = b.stats();
        assert_eq!((s.hits, s.misses), (6, 2));
    }

    #[test]
    fn forget_drops_the_entry() {
        let b = HotspotBuffer::new(1 << 20);
        b.touch(0x40, 2, 1);
        b.touch(0x40, 3, 1);
        assert_eq!(b.candidates(0x40, 0..8, 1), Some(2));
        b.forget(0x40, 2);
        b.forget(0x40, 2); // absent: nothing happens
        b.forget(0x80, 3); // another leaf: nothing happens
        assert_eq!(peek(&b, 0x40, 2), None);
        assert_eq!(b.candidates(0x40, 0..8, 1), Some(3));
        assert_eq!(b.stats().entries, 1);
        // A forgotten entry starts over.
        b.touch(0x40, 2, 1);
        assert_eq!(peek(&b, 0x40, 2), Some((1, 1)));
    }

    #[test]
    fn full_set_replaces_lowest_counter_then_pauses_admissions() {
        let b = HotspotBuffer::new(ONE_SET);
        // Fill the 16 ways (leaf 64 × i, slot 0); counters 2, except ways 3 and 9 at 1.
        for i in 1..=16u64 {
            b.touch(64 * i, 0, 1);
            if i != 4 && i != 10 {
                b.touch(64 * i, 0, 1);
            }
        }
        assert_eq!(b.stats().entries, 16);
        assert_eq!(b.stats().evictions, 0);
        // Absent entry: the lowest counter is evicted, ties toward the lowest way (way 3: leaf 256).
        b.touch(0x10_000, 0, 1);
        assert_eq!(peek(&b, 0x10_000, 0), Some((1, 1)));
        assert_eq!(peek(&b, 256, 0), None);
        assert_eq!(b.way_at(0, 3).leaf, 0x10_000);
        assert_eq!(b.stats().evictions, 1);
        // The next ADMISSION_PAUSE admissions are skipped...
        for k in 0..ADMISSION_PAUSE {
            b.touch(0x20_000 + 64 * k, 0, 1);
            assert_eq!(peek(&b, 0x20_000 + 64 * k, 0), None);
        }
        // ...but present entries are still updated meanwhile, and nothing was evicted.
        b.touch(640, 0, 1);
        assert_eq!(peek(&b, 640, 0), Some((1, 2)));
        b.forget(128, 0);
        assert_eq!(b.stats().evictions, 1);
        assert_eq!(b.stats().entries, 15);
        // The pause is over; a free way needs no eviction, so it starts no pause.
        b.touch(0x30_000, 0, 1);
        assert_eq!(peek(&b, 0x30_000, 0), Some((1, 1)));
        assert_eq!(b.stats().entries, 16);
        // Full again: ways 1 (0x30_000, in the freed way) and 3 (0x10_000) have counter 1; the
        // lower way is evicted.
        assert_eq!(b.way_at(0, 1).leaf, 0x30_000);
        b.touch(0x40_000, 0, 1);
        assert_eq!(b.way_at(0, 1).leaf, 0x40_000);
        assert_eq!(b.stats().evictions, 2);
        // And it pauses again.
        b.touch(0x50_000, 0, 1);
        assert_eq!(peek(&b, 0x50_000, 0), None);
        assert_eq!(b.stats().entries, 16);
    }

    #[test]
    fn budget_zero_is_disabled() {
        let b = HotspotBuffer::new(0);
        assert!(!b.is_enabled());
        assert_eq!(b.sets(), 0);
        b.touch(0x40, 1, 1);
        b.touch(0x40, 1, 1);
        assert_eq!(b.candidates(0x40, 0..8, 1), None);
        b.forget(0x40, 1);
        assert_eq!(b.stats(), HotspotStats::default());
    }

    #[test]
    fn sets_spread_a_leafs_neighbourhood() {
        let b = HotspotBuffer::new(30 << 20);
        let set_index = |leaf: u64, slot: u16| b.set_of(leaf, slot).expect("enabled");
        let mut seen: Vec<usize> = (0..8).map(|slot| set_index(0x1_0000_0000, slot)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert!(seen.len() >= 7, "8 neighbouring slots fell into {} sets", seen.len());
        // Deterministic.
        assert_eq!(set_index(0xABC0, 3), set_index(0xABC0, 3));
    }

    #[test]
    fn every_set_has_one_place_and_a_way_its_words() {
        for budget in [1, 1000, ONE_SET * 15, ONE_SET * 16, ONE_SET * 17, ONE_SET * 100, 30 << 20] {
            let b = HotspotBuffer::new(budget);
            let lens: Vec<usize> = b.stripes.iter().map(|s| lock(s).len()).collect();
            assert_eq!(lens.iter().sum::<usize>(), b.sets(), "budget {budget}");
            let mut places: Vec<(usize, usize)> =
                (0..b.sets()).map(|set| (set % lens.len(), set / lens.len())).collect();
            assert!(places.iter().all(|&(stripe, at)| at < lens[stripe]), "budget {budget}");
            places.sort_unstable();
            places.dedup();
            assert_eq!(places.len(), b.sets(), "budget {budget}");
        }
        let way = Way { leaf: u64::MAX - 7, slot: u16::MAX, fp: 0x1234, count: u32::MAX };
        assert_eq!(Way::decode(way.encode()), way);
        assert_eq!(Way::decode([0; 2]), Way::default());
    }

    #[test]
    fn concurrent_touches_keep_counts_exact() {
        let b = HotspotBuffer::new(1 << 20);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        for slot in 0..8 {
                            b.touch(0x40, slot, 3);
                        }
                    }
                });
            }
        });
        for slot in 0..8 {
            assert_eq!(peek(&b, 0x40, slot), Some((3, 4000)));
        }
        assert_eq!(b.stats().entries, 8);
    }
}

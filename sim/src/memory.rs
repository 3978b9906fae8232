//! Simulated memory, stored sparsely by non-zero 64-byte line.
//!
//! A never-written (or re-zeroed) line costs nothing. Lines live in 4 KiB pages: a page keeps a
//! 64-bit presence mask and exactly as many 64-byte lines as are non-zero, in address order, so
//! a dense page costs 4 KiB plus a few dozen bytes of bookkeeping. The page map uses a fixed
//! hasher: no random state anywhere in the simulator.
//!
//! A memory can be a copy-on-write *fork* of a frozen one ([`SparseMemory::fork`]): it shares
//! the frozen memory's pages and holds only the lines it has written since (a line is copied on
//! its first write; a shared line zeroed is kept as an all-zero line over the base's). A sweep's
//! points run from one loaded image this way (DESIGN.md §5a, "load once"): each point costs the
//! host the lines it writes, not a copy of every loaded byte nor of every page it touches
//! (copying whole pages, a YCSB A point at 60 M keys held 3.5 GB of copies for its Zipfian
//! updates), and reads and writes give exactly what a full copy would.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Bytes per stored line (also the default atomicity unit).
pub const LINE_BYTES: usize = 64;
const PAGE_LINES: usize = 64;
const PAGE_BYTES: u64 = (LINE_BYTES * PAGE_LINES) as u64;

type Line = [u8; LINE_BYTES];

#[derive(Clone, Debug, PartialEq, Eq)]
struct Page {
    present: u64,
    /// The stored lines in address order (`len` = the number of bits in `present`).
    lines: Vec<Line>,
}

impl Page {
    /// Line `l` of the page, if stored.
    fn line(&self, l: usize) -> Option<&Line> {
        let bit = 1u64 << l;
        (self.present & bit != 0).then(|| &self.lines[(self.present & (bit - 1)).count_ones() as usize])
    }
}

/// A multiplicative hasher for page numbers (deterministic, and fast for sequential keys).
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        let m = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = m ^ (m >> 29);
    }
}

/// Per node: its host and device memory, frozen (an image's).
pub(crate) type NodeMemories = Vec<(Arc<SparseMemory>, Arc<SparseMemory>)>;

pub(crate) type FixedMap<K, V> = HashMap<K, V, BuildHasherDefault<PageHasher>>;

/// Whether every byte is zero, eight at a time (stopping at the first non-zero word).
fn is_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    words.into_iter().all(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) == 0) && rest.iter().all(|&b| b == 0)
}

/// One region (host or device memory) of one node.
#[derive(Debug, Default)]
pub struct SparseMemory {
    /// This memory's own lines, by page. With no base, every stored line is non-zero. In a
    /// fork they override the base's line for line, and a stored line may be all zeros only
    /// where the base's line is not (a zeroed shared line).
    pages: FixedMap<u64, Page>,
    /// The frozen memory this one is a fork of (it has no base itself).
    base: Option<Arc<SparseMemory>>,
    /// Non-zero lines of the contents (the base's included).
    nonzero_lines: u64,
    /// Lines the own pages' arrays have room for.
    line_capacity: u64,
}

impl Clone for SparseMemory {
    /// A copy with no spare capacity: each own page's lines exactly (a fork's copy shares its base).
    fn clone(&self) -> SparseMemory {
        let line_capacity = self.pages.values().map(|p| p.lines.len() as u64).sum();
        SparseMemory {
            pages: self.pages.clone(),
            base: self.base.clone(),
            nonzero_lines: self.nonzero_lines,
            line_capacity,
        }
    }
}

/// Equal contents (spare capacity, and how the contents are split between a base and own
/// pages, do not count).
impl PartialEq for SparseMemory {
    fn eq(&self, other: &SparseMemory) -> bool {
        self.nonzero_lines == other.nonzero_lines
            && self.stored_pages().count() == other.stored_pages().count()
            && self.stored_pages().all(|(no, p)| other.page(no) == Some(p))
    }
}

impl Eq for SparseMemory {}

impl SparseMemory {
    pub fn new() -> SparseMemory {
        SparseMemory::default()
    }

    /// Forgets every byte (a crashed node's DRAM).
    pub fn clear(&mut self) {
        *self = SparseMemory::default();
    }

    /// Lines that hold at least one non-zero byte.
    pub fn nonzero_lines(&self) -> u64 {
        self.nonzero_lines
    }

    /// Bytes of those lines (the "non-zero simulated bytes" of DESIGN §7).
    pub fn nonzero_line_bytes(&self) -> u64 {
        self.nonzero_lines * LINE_BYTES as u64
    }

    /// Host heap bytes this region holds: the lines and the spare room of their arrays, each
    /// page's allocation header (16 bytes, glibc's on 64-bit), and the page map's buckets; a
    /// fork counts its base too (shared with other forks: see [`SparseMemory::own_host_bytes`]).
    pub fn host_bytes(&self) -> u64 {
        self.own_host_bytes() + self.base.as_ref().map_or(0, |b| b.host_bytes())
    }

    /// Host heap bytes of this memory's own pages only (a fork's cost beyond its shared base).
    pub fn own_host_bytes(&self) -> u64 {
        let bucket = std::mem::size_of::<(u64, Page)>() as u64 + 1;
        let pages = self.pages.len() as u64;
        self.pages.capacity() as u64 * bucket + pages * 16 + self.line_capacity * LINE_BYTES as u64
    }

    /// A copy-on-write fork of `base`: the same contents, sharing `base`'s pages until written.
    /// A base that is itself a fork is flattened first (so a base never has one).
    pub fn fork(base: &Arc<SparseMemory>) -> SparseMemory {
        let base = if base.base.is_some() { Arc::new(base.flatten()) } else { base.clone() };
        SparseMemory {
            pages: FixedMap::default(),
            nonzero_lines: base.nonzero_lines,
            line_capacity: 0,
            base: Some(base),
        }
    }

    /// Whether this memory is a fork (shares a base).
    pub fn is_fork(&self) -> bool {
        self.base.is_some()
    }

    /// The same contents with no base: every page its own.
    pub fn flatten(&self) -> SparseMemory {
        if self.base.is_none() {
            return self.clone();
        }
        let pages: FixedMap<u64, Page> = self.stored_pages().map(|(no, p)| (no, p.into_owned())).collect();
        let line_capacity = pages.values().map(|p| p.lines.len() as u64).sum();
        SparseMemory { pages, base: None, nonzero_lines: self.nonzero_lines, line_capacity }
    }

    /// [`SparseMemory::flatten`] that moves the pages of a memory with no base.
    pub fn into_flat(self) -> SparseMemory {
        if self.base.is_none() { self } else { self.flatten() }
    }

    fn base_page(&self, no: u64) -> Option<&Page> {
        self.base.as_ref().and_then(|b| b.pages.get(&no))
    }

    /// The page numbered `no` as the contents have it: its non-zero lines (`None`: all zeros).
    fn page(&self, no: u64) -> Option<Cow<'_, Page>> {
        let page = match (self.pages.get(&no), self.base_page(no)) {
            (None, None) => return None,
            // Own lines over no shared ones are all non-zero.
            (Some(p), None) | (None, Some(p)) => Cow::Borrowed(p),
            (Some(own), Some(shared)) => {
                let mut merged = Page { present: 0, lines: Vec::new() };
                for l in 0..PAGE_LINES {
                    if let Some(line) = own.line(l).or_else(|| shared.line(l)).filter(|line| !is_zero(&line[..])) {
                        merged.present |= 1 << l;
                        merged.lines.push(*line);
                    }
                }
                Cow::Owned(merged)
            }
        };
        Some(page).filter(|p| p.present != 0)
    }

    /// Every page holding a non-zero line, own or the base's (in no particular order).
    fn stored_pages(&self) -> impl Iterator<Item = (u64, Cow<'_, Page>)> {
        let own = self.pages.keys().copied();
        let shared = self.base.iter().flat_map(|b| b.pages.keys()).filter(|no| !self.pages.contains_key(no)).copied();
        own.chain(shared).filter_map(|no| self.page(no).map(|p| (no, p)))
    }

    /// A digest of the contents (FNV-1a over every non-zero line and its address, in address
    /// order): equal memories give equal digests however they were written, so it shows that
    /// two ways of building a state (a load before and after an optimisation) agree bit for bit.
    pub fn digest(&self) -> u64 {
        let mut pages: Vec<(u64, Cow<'_, Page>)> = self.stored_pages().collect();
        pages.sort_unstable_by_key(|(no, _)| *no);
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
            }
        };
        for (no, page) in pages {
            eat(&no.to_le_bytes());
            eat(&page.present.to_le_bytes());
            for line in page.lines.iter() {
                eat(line);
            }
        }
        h
    }

    /// Copies `out.len()` bytes starting at `offset` into `out` (zeros where nothing was written).
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let in_page = (at % PAGE_BYTES) as usize;
            let n = (PAGE_BYTES as usize - in_page).min(out.len() - done);
            let dst = &mut out[done..done + n];
            let no = at / PAGE_BYTES;
            match (self.pages.get(&no), self.base_page(no)) {
                (None, None) => dst.fill(0),
                // A fork's own lines over the base's, line by line.
                (Some(own), Some(shared)) => {
                    let mut copied = 0usize;
                    while copied < n {
                        let (l, in_line) = ((in_page + copied) / LINE_BYTES, (in_page + copied) % LINE_BYTES);
                        let m = (LINE_BYTES - in_line).min(n - copied);
                        let d = &mut dst[copied..copied + m];
                        match own.line(l).or_else(|| shared.line(l)) {
                            Some(line) => d.copy_from_slice(&line[in_line..in_line + m]),
                            None => d.fill(0),
                        }
                        copied += m;
                    }
                }
                (Some(page), None) | (None, Some(page)) => {
                    // One page look-up; stored lines' slots advance with the presence bits.
                    let first = in_page / LINE_BYTES;
                    let mut slot = (page.present & ((1u64 << first) - 1)).count_ones() as usize;
                    let mut copied = 0usize;
                    let mut l = first;
                    while copied < n {
                        let in_line = (in_page + copied) % LINE_BYTES;
                        let m = (LINE_BYTES - in_line).min(n - copied);
                        let d = &mut dst[copied..copied + m];
                        if page.present & (1u64 << l) != 0 {
                            d.copy_from_slice(&page.lines[slot][in_line..in_line + m]);
                            slot += 1;
                        } else {
                            d.fill(0);
                        }
                        copied += m;
                        l += 1;
                    }
                }
            }
            done += n;
        }
    }

    /// Stores `data` at `offset`.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let in_page = (at % PAGE_BYTES) as usize;
            let n = (PAGE_BYTES as usize - in_page).min(data.len() - done);
            self.write_in_page(at / PAGE_BYTES, in_page, &data[done..done + n]);
            done += n;
        }
    }

    pub fn read_u64(&self, offset: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(offset, &mut b);
        u64::from_le_bytes(b)
    }

    pub fn write_u64(&mut self, offset: u64, value: u64) {
        self.write(offset, &value.to_le_bytes());
    }

    /// Stores `data` at byte `in_page` of page `page_no` (it does not cross the page), line by
    /// line: a stored line is written in place (and dropped if it becomes all zero, unless it
    /// zeroes a fork's shared line), an unstored one is inserted at its slot only if the write
    /// changes it (a fork's shared line is copied first). A page's line array grows by one line
    /// in place (exact size: the allocator's size classes give the slack), so filling a page
    /// costs one move of its tail per new line, not a rebuild of the whole page (which copied
    /// every stored line for each new one: 40% of a load's time in this function went to those
    /// copies).
    fn write_in_page(&mut self, page_no: u64, in_page: usize, data: &[u8]) {
        let first = in_page / LINE_BYTES;
        let last = (in_page + data.len() - 1) / LINE_BYTES;
        // The part of `data` that falls in line `l`, and where in the line it goes.
        let part = |l: usize| {
            let lo = (l * LINE_BYTES).max(in_page);
            let hi = ((l + 1) * LINE_BYTES).min(in_page + data.len());
            (lo - l * LINE_BYTES, &data[lo - in_page..hi - in_page])
        };
        let base_page = self.base.as_ref().and_then(|b| b.pages.get(&page_no));
        let page = match self.pages.entry(page_no) {
            Entry::Occupied(e) => e.into_mut(),
            // Zeros over an unstored page: nothing to do.
            Entry::Vacant(_) if base_page.is_none() && is_zero(data) => return,
            Entry::Vacant(e) => e.insert(Page { present: 0, lines: Vec::new() }),
        };
        let capacity = page.lines.capacity();
        // Non-zero lines gained, less those lost.
        let mut gained = 0i64;
        for l in first..=last {
            let bit = 1u64 << l;
            let (at, bytes) = part(l);
            let slot = (page.present & (bit - 1)).count_ones() as usize;
            let shared = base_page.and_then(|b| b.line(l));
            if page.present & bit != 0 {
                let line = &mut page.lines[slot];
                // Own lines are non-zero but for a fork's zeroed shared lines.
                let was = shared.is_none() || !is_zero(line);
                line[at..at + bytes.len()].copy_from_slice(bytes);
                // Non-zero bytes written keep the line; only zeros can empty it.
                let now = !is_zero(bytes) || !is_zero(line);
                if !now && shared.is_none() {
                    page.lines.remove(slot);
                    page.present &= !bit;
                }
                gained += now as i64 - was as i64;
            } else {
                let mut line = shared.copied().unwrap_or([0u8; LINE_BYTES]);
                line[at..at + bytes.len()].copy_from_slice(bytes);
                let now = match shared {
                    // Unchanged: the shared line still reads right.
                    Some(s) if *s == line => continue,
                    Some(_) => !is_zero(&line),
                    None if is_zero(bytes) => continue,
                    None => true,
                };
                // Exact growth: the allocator's size classes give the slack (mimalloc grows a
                // block in place within its class), so no spare room is held.
                page.lines.reserve_exact(1);
                page.lines.insert(slot, line);
                page.present |= bit;
                gained += now as i64 - shared.is_some() as i64;
            }
        }
        self.nonzero_lines = (self.nonzero_lines as i64 + gained) as u64;
        if page.present == 0 {
            self.line_capacity -= capacity as u64;
            self.pages.remove(&page_no);
        } else {
            self.line_capacity = self.line_capacity + page.lines.capacity() as u64 - capacity as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_writes_across_lines_and_pages() {
        let mut m = SparseMemory::new();
        let data: Vec<u8> = (1..=200u8).collect();
        m.write(4096 - 70, &data);
        let mut out = vec![0u8; 210];
        m.read(4096 - 75, &mut out);
        assert_eq!(&out[..5], &[0; 5]);
        assert_eq!(&out[5..205], &data[..]);
        assert_eq!(&out[205..], &[0; 5]);
        // 4026..4226 touches lines 62, 63 of page 0 and 0, 1, 2 of page 1.
        assert_eq!(m.nonzero_lines(), 5);
    }

    #[test]
    fn zeroed_lines_are_dropped() {
        let mut m = SparseMemory::new();
        m.write_u64(8, 7);
        m.write_u64(128, 9);
        assert_eq!(m.nonzero_lines(), 2);
        m.write_u64(8, 0);
        assert_eq!(m.nonzero_lines(), 1);
        assert_eq!(m.read_u64(128), 9);
        m.write_u64(128, 0);
        assert_eq!(m.nonzero_lines(), 0);
        assert_eq!(m.pages.len(), 0);
        // Writing zeros to fresh memory allocates nothing.
        m.write(1 << 30, &[0; 4096]);
        assert_eq!(m.host_bytes(), m.pages.capacity() as u64 * (std::mem::size_of::<(u64, Page)>() as u64 + 1));
    }

    #[test]
    fn writes_match_a_flat_model() {
        // Random writes (some of zeros) over a few pages, against a plain byte array.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let mut m = SparseMemory::new();
        let mut flat = vec![0u8; 3 * PAGE_BYTES as usize];
        for _ in 0..5000 {
            let at = rng.random_range(0..flat.len() - 1);
            let len = rng.random_range(1..=(flat.len() - at).min(700));
            let zeros = rng.random_bool(0.3);
            let data: Vec<u8> = (0..len).map(|_| if zeros { 0 } else { rng.random_range(0..4) }).collect();
            m.write(at as u64, &data);
            flat[at..at + len].copy_from_slice(&data);
        }
        let mut out = vec![0u8; flat.len()];
        m.read(0, &mut out);
        assert_eq!(out, flat);
        let nonzero = flat.chunks(LINE_BYTES).filter(|l| l.iter().any(|&b| b != 0)).count() as u64;
        assert_eq!(m.nonzero_lines(), nonzero);
        let stored: u64 = m.pages.values().map(|p| p.lines.len() as u64).sum();
        assert_eq!(stored, nonzero, "no zero line is stored");
        let room: u64 = m.pages.values().map(|p| p.lines.capacity() as u64).sum();
        assert_eq!(m.line_capacity, room, "spare capacity is accounted");
        let copy = m.clone();
        assert_eq!(copy, m);
        assert_eq!(copy.line_capacity, nonzero);
        assert_eq!(
            copy.pages.values().map(|p| p.lines.capacity() as u64).sum::<u64>(),
            nonzero,
            "a copy holds no spare room"
        );
    }

    #[test]
    fn a_fork_reads_and_writes_as_a_full_copy_would() {
        // Random writes (some of zeros, emptying pages the base holds) to a fork and to a flat
        // copy of the same base, compared after every write; the base never changes.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut base = SparseMemory::new();
        let mut flat = vec![0u8; 6 * PAGE_BYTES as usize];
        for _ in 0..300 {
            let at = rng.random_range(0..flat.len() - 64);
            let data: Vec<u8> = (0..64).map(|_| rng.random_range(0..3)).collect();
            base.write(at as u64, &data);
            flat[at..at + 64].copy_from_slice(&data);
        }
        let base = Arc::new(base);
        let (base_digest, base_copy) = (base.digest(), base.flatten());
        let mut fork = SparseMemory::fork(&base);
        let mut copy = base.flatten();
        assert_eq!(fork, copy);
        assert_eq!(fork.own_host_bytes(), 0, "a fresh fork holds nothing of its own");
        for round in 0..3000 {
            let at = rng.random_range(0..flat.len() - 1);
            let len = rng.random_range(1..=(flat.len() - at).min(900));
            let zeros = rng.random_bool(0.4);
            let data: Vec<u8> = (0..len).map(|_| if zeros { 0 } else { rng.random_range(0..4) }).collect();
            fork.write(at as u64, &data);
            copy.write(at as u64, &data);
            flat[at..at + len].copy_from_slice(&data);
            if round % 100 == 0 {
                let mut out = vec![0u8; flat.len()];
                fork.read(0, &mut out);
                assert_eq!(out, flat, "round {round}");
                assert_eq!(fork.nonzero_lines(), copy.nonzero_lines());
                assert_eq!(fork, copy);
                assert_eq!(fork.digest(), copy.digest());
            }
        }
        let nonzero = flat.chunks(LINE_BYTES).filter(|l| l.iter().any(|&b| b != 0)).count() as u64;
        assert_eq!(fork.nonzero_lines(), nonzero);
        assert_eq!(fork.flatten(), copy);
        assert!(!fork.flatten().is_fork());
        // A fork of a fork flattens its base; the original base is untouched.
        let twice = SparseMemory::fork(&Arc::new(fork.clone()));
        assert_eq!(twice, copy);
        assert_eq!((base.digest(), base.as_ref()), (base_digest, &base_copy));
    }

    #[test]
    fn a_fork_emptying_a_shared_page_reads_zeros() {
        let mut base = SparseMemory::new();
        base.write_u64(4096 + 8, 5);
        let base = Arc::new(base);
        let mut fork = SparseMemory::fork(&base);
        fork.write_u64(4096 + 8, 0);
        assert_eq!((fork.read_u64(4096 + 8), fork.nonzero_lines()), (0, 0));
        assert_eq!(fork, SparseMemory::new());
        assert_eq!(fork.digest(), SparseMemory::new().digest());
        assert_eq!(base.read_u64(4096 + 8), 5);
        // Writing zeros over a page neither holds stores nothing.
        fork.write(1 << 20, &[0; 128]);
        assert_eq!(fork.pages.len(), 1, "only the zeroed shared line's page");
        assert_eq!(fork.pages.values().map(|p| p.lines.len()).sum::<usize>(), 1);
    }

    #[test]
    fn a_fork_copies_the_lines_it_writes_not_their_pages() {
        // A dense base page; the fork writes one word of one line.
        let mut base = SparseMemory::new();
        base.write(0, &[0x5au8; PAGE_BYTES as usize]);
        let base = Arc::new(base);
        let mut fork = SparseMemory::fork(&base);
        fork.write_u64(130, 7);
        assert_eq!(fork.line_capacity, 1, "one line copied, not 64");
        assert_eq!(fork.read_u64(130), 7);
        assert_eq!(fork.read_u64(138), 0x5a5a_5a5a_5a5a_5a5a, "the rest of the line as the base has it");
        assert_eq!(fork.read_u64(200), 0x5a5a_5a5a_5a5a_5a5a, "the next line is the base's");
        assert_eq!(fork.nonzero_lines(), 64);
        // Writing a shared line's own bytes back copies nothing.
        fork.write(1000, &[0x5a; 24]);
        assert_eq!(fork.line_capacity, 1);
        // Zeroing a shared line keeps a zero line over it, and counts it out.
        fork.write(192, &[0; 64]);
        assert_eq!((fork.line_capacity, fork.nonzero_lines(), fork.read_u64(200)), (2, 63, 0));
        let mut copy = base.flatten();
        copy.write_u64(130, 7);
        copy.write(192, &[0; 64]);
        assert_eq!((fork.digest(), fork.flatten()), (copy.digest(), copy));
    }

    #[test]
    fn dense_pages_cost_little_more_than_their_bytes() {
        let mut m = SparseMemory::new();
        let line = [0xabu8; 64];
        for i in 0..(1u64 << 14) {
            m.write(i * 64, &line);
        }
        let ratio = m.host_bytes() as f64 / m.nonzero_line_bytes() as f64;
        assert!(ratio < 1.1, "ratio {ratio}");
    }
}

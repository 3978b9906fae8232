//! Simulated memory, stored sparsely by non-zero 64-byte line.
//!
//! A never-written (or re-zeroed) line costs nothing. Lines live in 4 KiB pages: a page keeps a
//! 64-bit presence mask and exactly as many 64-byte lines as are non-zero, in address order, so
//! a dense page costs 4 KiB plus a few dozen bytes of bookkeeping. The page map uses a fixed
//! hasher: no random state anywhere in the simulator.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

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
    pages: FixedMap<u64, Page>,
    nonzero_lines: u64,
    /// Lines the pages' arrays have room for (at least `nonzero_lines`).
    line_capacity: u64,
}

impl Clone for SparseMemory {
    /// A copy with no spare capacity: each page's lines exactly.
    fn clone(&self) -> SparseMemory {
        SparseMemory { pages: self.pages.clone(), nonzero_lines: self.nonzero_lines, line_capacity: self.nonzero_lines }
    }
}

/// Equal contents (spare capacity does not count).
impl PartialEq for SparseMemory {
    fn eq(&self, other: &SparseMemory) -> bool {
        self.nonzero_lines == other.nonzero_lines && self.pages == other.pages
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
    /// page's allocation header (16 bytes, glibc's on 64-bit), and the page map's buckets.
    pub fn host_bytes(&self) -> u64 {
        let bucket = std::mem::size_of::<(u64, Page)>() as u64 + 1;
        let pages = self.pages.len() as u64;
        self.pages.capacity() as u64 * bucket + pages * 16 + self.line_capacity * LINE_BYTES as u64
    }

    /// A digest of the contents (FNV-1a over every non-zero line and its address, in address
    /// order): equal memories give equal digests however they were written, so it shows that
    /// two ways of building a state (a load before and after an optimisation) agree bit for bit.
    pub fn digest(&self) -> u64 {
        let mut pages: Vec<(&u64, &Page)> = self.pages.iter().collect();
        pages.sort_unstable_by_key(|(no, _)| **no);
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
            match self.pages.get(&(at / PAGE_BYTES)) {
                None => dst.fill(0),
                Some(page) => {
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
    /// line: a stored line is written in place (and dropped if it becomes all zero), an unstored
    /// one is inserted at its slot only if it gets a non-zero byte. A page's line array grows
    /// by one line in place (exact size: the allocator's size classes give the slack), so
    /// filling a page costs one move of its tail per new line, not a rebuild of the whole page (which copied every stored line for each new one:
    /// 40% of a load's time in this function went to those copies).
    fn write_in_page(&mut self, page_no: u64, in_page: usize, data: &[u8]) {
        let first = in_page / LINE_BYTES;
        let last = (in_page + data.len() - 1) / LINE_BYTES;
        // The part of `data` that falls in line `l`, and where in the line it goes.
        let part = |l: usize| {
            let lo = (l * LINE_BYTES).max(in_page);
            let hi = ((l + 1) * LINE_BYTES).min(in_page + data.len());
            (lo - l * LINE_BYTES, &data[lo - in_page..hi - in_page])
        };
        let page = match self.pages.entry(page_no) {
            Entry::Occupied(e) => e.into_mut(),
            // Zeros over an unstored page: nothing to do.
            Entry::Vacant(_) if is_zero(data) => return,
            Entry::Vacant(e) => e.insert(Page { present: 0, lines: Vec::new() }),
        };
        let capacity = page.lines.capacity();
        let before = page.present.count_ones();
        for l in first..=last {
            let bit = 1u64 << l;
            let (at, bytes) = part(l);
            let slot = (page.present & (bit - 1)).count_ones() as usize;
            if page.present & bit != 0 {
                let line = &mut page.lines[slot];
                line[at..at + bytes.len()].copy_from_slice(bytes);
                // Non-zero bytes written keep the line; only zeros can empty it.
                if is_zero(bytes) && is_zero(line) {
                    page.lines.remove(slot);
                    page.present &= !bit;
                }
            } else if !is_zero(bytes) {
                let mut line = [0u8; LINE_BYTES];
                line[at..at + bytes.len()].copy_from_slice(bytes);
                // Exact growth: the allocator's size classes give the slack (mimalloc grows a
                // block in place within its class), so no spare room is held.
                page.lines.reserve_exact(1);
                page.lines.insert(slot, line);
                page.present |= bit;
            }
        }
        let after = page.present.count_ones();
        self.nonzero_lines = self.nonzero_lines + after as u64 - before as u64;
        if after == 0 {
            self.pages.remove(&page_no);
            self.line_capacity -= capacity as u64;
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

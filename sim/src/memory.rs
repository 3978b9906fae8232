//! Simulated memory, stored sparsely by non-zero 64-byte line.
//!
//! A never-written (or re-zeroed) line costs nothing. Lines live in 4 KiB pages: a page keeps a
//! 64-bit presence mask and exactly as many 64-byte lines as are non-zero, in address order, so
//! a dense page costs 4 KiB plus a few dozen bytes of bookkeeping. The page map uses a fixed
//! hasher: no random state anywhere in the simulator.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Bytes per stored line (also the default atomicity unit).
pub const LINE_BYTES: usize = 64;
const PAGE_LINES: usize = 64;
const PAGE_BYTES: u64 = (LINE_BYTES * PAGE_LINES) as u64;

type Line = [u8; LINE_BYTES];

#[derive(Clone, Debug, PartialEq, Eq)]
struct Page {
    present: u64,
    lines: Box<[Line]>,
}

impl Page {
    fn slot(&self, line: usize) -> Option<usize> {
        let bit = 1u64 << line;
        (self.present & bit != 0).then(|| (self.present & (bit - 1)).count_ones() as usize)
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

pub(crate) type FixedMap<K, V> = HashMap<K, V, BuildHasherDefault<PageHasher>>;

/// Whether every byte is zero, eight at a time (stopping at the first non-zero word).
fn is_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    words.into_iter().all(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) == 0) && rest.iter().all(|&b| b == 0)
}

/// One region (host or device memory) of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseMemory {
    pages: FixedMap<u64, Page>,
    nonzero_lines: u64,
}

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

    /// Host heap bytes this region holds: the lines, each page's allocation header (16 bytes,
    /// glibc's on 64-bit), and the page map's buckets.
    pub fn host_bytes(&self) -> u64 {
        let bucket = std::mem::size_of::<(u64, Page)>() as u64 + 1;
        let pages = self.pages.len() as u64;
        self.pages.capacity() as u64 * bucket + pages * 16 + self.nonzero_line_bytes()
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

    /// Stores `data` at byte `in_page` of page `page_no` (it does not cross the page): in place
    /// when every line it touches is stored and stays non-zero, else by rebuilding the page's
    /// line array once (not once per new line, as a large WRITE into a fresh page would).
    fn write_in_page(&mut self, page_no: u64, in_page: usize, data: &[u8]) {
        let first = in_page / LINE_BYTES;
        let last = (in_page + data.len() - 1) / LINE_BYTES;
        let range: u64 =
            if last - first + 1 == PAGE_LINES { u64::MAX } else { ((1u64 << (last - first + 1)) - 1) << first };
        // The part of `data` that falls in line `l`, and where in the line it goes.
        let part = |l: usize| {
            let lo = (l * LINE_BYTES).max(in_page);
            let hi = ((l + 1) * LINE_BYTES).min(in_page + data.len());
            (lo - l * LINE_BYTES, &data[lo - in_page..hi - in_page])
        };
        let present = self.pages.get(&page_no).map_or(0, |p| p.present);
        // In place when the lines the range lacks only get zeros (they stay unstored).
        let absent = range & !present;
        let in_place = (first..=last).all(|l| absent & (1u64 << l) == 0 || is_zero(part(l).1));
        if in_place && present & range != 0 {
            let page = self.pages.get_mut(&page_no).expect("present");
            let mut emptied = false;
            let mut slot = (present & ((1u64 << first) - 1)).count_ones() as usize;
            for l in first..=last {
                if present & (1u64 << l) == 0 {
                    continue;
                }
                let (at, bytes) = part(l);
                let line = &mut page.lines[slot];
                line[at..at + bytes.len()].copy_from_slice(bytes);
                // Non-zero bytes written keep the line; only zeros can empty it.
                emptied |= is_zero(bytes) && is_zero(line);
                slot += 1;
            }
            if !emptied {
                return;
            }
        } else if in_place {
            // Zeros over unstored lines: nothing to do.
            return;
        }
        // Rebuild: every stored line outside the range as it is, every line in the range with
        // the new bytes over it, and no line that is all zero.
        let old = self.pages.remove(&page_no);
        let candidates = present | range;
        let mut lines: Vec<Line> = Vec::with_capacity(candidates.count_ones() as usize);
        let mut kept = 0u64;
        for l in 0..PAGE_LINES {
            let bit = 1u64 << l;
            if candidates & bit == 0 {
                continue;
            }
            let mut line = match &old {
                Some(p) if p.present & bit != 0 => p.lines[p.slot(l).expect("present")],
                _ => [0u8; LINE_BYTES],
            };
            if range & bit != 0 {
                let (at, bytes) = part(l);
                line[at..at + bytes.len()].copy_from_slice(bytes);
                if is_zero(bytes) && is_zero(&line) {
                    continue;
                }
            }
            lines.push(line);
            kept |= bit;
        }
        self.nonzero_lines = self.nonzero_lines + kept.count_ones() as u64 - present.count_ones() as u64;
        if kept != 0 {
            self.pages.insert(page_no, Page { present: kept, lines: lines.into_boxed_slice() });
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

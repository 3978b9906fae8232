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

    /// Copies `out.len()` bytes starting at `offset` into `out` (zeros where nothing was written).
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let in_line = (at % LINE_BYTES as u64) as usize;
            let n = (LINE_BYTES - in_line).min(out.len() - done);
            let dst = &mut out[done..done + n];
            match self.line(at) {
                Some(line) => dst.copy_from_slice(&line[in_line..in_line + n]),
                None => dst.fill(0),
            }
            done += n;
        }
    }

    /// Stores `data` at `offset`.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let in_line = (at % LINE_BYTES as u64) as usize;
            let n = (LINE_BYTES - in_line).min(data.len() - done);
            self.write_in_line(at, in_line, &data[done..done + n]);
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

    fn line(&self, at: u64) -> Option<&Line> {
        let page = self.pages.get(&(at / PAGE_BYTES))?;
        let slot = page.slot(((at % PAGE_BYTES) / LINE_BYTES as u64) as usize)?;
        Some(&page.lines[slot])
    }

    fn write_in_line(&mut self, at: u64, in_line: usize, data: &[u8]) {
        let page_no = at / PAGE_BYTES;
        let line_no = ((at % PAGE_BYTES) / LINE_BYTES as u64) as usize;
        let bit = 1u64 << line_no;
        let zero = data.iter().all(|&b| b == 0);
        let Some(page) = self.pages.get_mut(&page_no) else {
            if zero {
                return;
            }
            let mut line = [0u8; LINE_BYTES];
            line[in_line..in_line + data.len()].copy_from_slice(data);
            self.pages.insert(page_no, Page { present: bit, lines: Box::new([line]) });
            self.nonzero_lines += 1;
            return;
        };
        let slot = (page.present & (bit - 1)).count_ones() as usize;
        if page.present & bit != 0 {
            let line = &mut page.lines[slot];
            line[in_line..in_line + data.len()].copy_from_slice(data);
            if zero && line.iter().all(|&b| b == 0) {
                // The line became all zero: drop it so memory tracks non-zero bytes only.
                page.present &= !bit;
                self.nonzero_lines -= 1;
                if page.present == 0 {
                    self.pages.remove(&page_no);
                } else {
                    let mut lines = Vec::with_capacity(page.lines.len() - 1);
                    lines.extend_from_slice(&page.lines[..slot]);
                    lines.extend_from_slice(&page.lines[slot + 1..]);
                    page.lines = lines.into_boxed_slice();
                }
            }
        } else if !zero {
            let mut line = [0u8; LINE_BYTES];
            line[in_line..in_line + data.len()].copy_from_slice(data);
            let mut lines = Vec::with_capacity(page.lines.len() + 1);
            lines.extend_from_slice(&page.lines[..slot]);
            lines.push(line);
            lines.extend_from_slice(&page.lines[slot..]);
            page.lines = lines.into_boxed_slice();
            page.present |= bit;
            self.nonzero_lines += 1;
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

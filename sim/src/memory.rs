//! Simulated memory, stored sparsely by non-zero 64-byte line.
//!
//! A never-written (or re-zeroed) line costs nothing. Memory is seen in 4 KiB pages of 64 lines,
//! found through a flat *directory* of 4-byte handles (one per page, in chunks of 512 pages
//! allocated when first written). A page with one non-zero line is a 65-byte record in a slab
//! of single lines (the line and its index in the page); a page with more keeps a 64-bit
//! presence mask and exactly as many lines as are non-zero, in address order. So one line per
//! page costs 69 host bytes per 64 stored (1.08; a page map of 8-byte keys and a `Vec` per page
//! cost 2.15), and a dense page 4 KiB and a few dozen bytes. No hashing anywhere in the store,
//! and no random state.
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
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Bytes per stored line (also the default atomicity unit).
pub const LINE_BYTES: usize = 64;
const PAGE_LINES: usize = 64;
const PAGE_BYTES: u64 = (LINE_BYTES * PAGE_LINES) as u64;
/// Pages per directory chunk: 2 MiB of simulated address in 2 KiB of handles.
const DIR_CHUNK: usize = 512;
/// Simulated offsets are below this (256 TiB; the directory's top level is indexed by chunk).
const MAX_OFFSET: u64 = 1 << 48;
/// Host bytes of one allocation's header, counted per allocation (glibc's on 64-bit; mimalloc
/// has none but rounds sizes up to its bins, which this stands in for).
const ALLOCATION_HEADER: u64 = 16;

type Line = [u8; LINE_BYTES];

/// A page of two or more stored lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Page {
    present: u64,
    /// The stored lines in address order (`len` = the number of bits in `present`).
    lines: Box<[Line]>,
}

/// A page of one stored line: the line and its index in the page (65 bytes: no padding).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Single {
    line: Line,
    at: u8,
}

const _: () = assert!(std::mem::size_of::<Single>() == LINE_BYTES + 1);
const _: () = assert!(std::mem::size_of::<Option<Box<[u32; DIR_CHUNK]>>>() == 8);

/// A page's stored lines as one representation or the other holds them.
#[derive(Clone, Copy)]
enum View<'a> {
    One(u8, &'a Line),
    Many(&'a Page),
}

impl<'a> View<'a> {
    fn present(self) -> u64 {
        match self {
            View::One(at, _) => 1 << at,
            View::Many(page) => page.present,
        }
    }

    /// The stored lines in address order.
    fn lines(self) -> &'a [Line] {
        match self {
            View::One(_, line) => std::slice::from_ref(line),
            View::Many(page) => &page.lines,
        }
    }

    /// Line `l` of the page, if stored.
    fn line(self, l: usize) -> Option<&'a Line> {
        let (bit, present) = (1u64 << l, self.present());
        (present & bit != 0).then(|| &self.lines()[(present & (bit - 1)).count_ones() as usize])
    }
}

/// A page's non-zero lines as the contents have them (a fork's own lines over its base's).
#[derive(Debug, PartialEq, Eq)]
struct Contents<'a> {
    present: u64,
    lines: Cow<'a, [Line]>,
}

/// What a directory handle names: 0 is no page, an odd handle a single line, an even one a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handle {
    None,
    Single(u32),
    Page(u32),
}

impl Handle {
    fn decode(h: u32) -> Handle {
        match h {
            0 => Handle::None,
            h if h & 1 == 1 => Handle::Single(h >> 1),
            h => Handle::Page((h >> 1) - 1),
        }
    }

    fn encode(self) -> u32 {
        match self {
            Handle::None => 0,
            Handle::Single(s) => {
                assert!(s < 1 << 31, "more than 2^31 single-line pages in one memory");
                s << 1 | 1
            }
            Handle::Page(i) => {
                assert!(i < (1 << 31) - 1, "more than 2^31 pages in one memory");
                (i + 1) << 1
            }
        }
    }
}

/// Page number → handle, flat in chunks of [`DIR_CHUNK`] pages.
#[derive(Clone, Debug, Default)]
struct Directory {
    chunks: Vec<Option<Box<[u32; DIR_CHUNK]>>>,
    allocated: u64,
}

impl Directory {
    #[inline]
    fn get(&self, no: u64) -> Handle {
        match self.chunks.get((no / DIR_CHUNK as u64) as usize) {
            Some(Some(chunk)) => Handle::decode(chunk[(no % DIR_CHUNK as u64) as usize]),
            _ => Handle::None,
        }
    }

    fn set(&mut self, no: u64, handle: Handle) {
        let (c, i) = ((no / DIR_CHUNK as u64) as usize, (no % DIR_CHUNK as u64) as usize);
        if c >= self.chunks.len() {
            if handle == Handle::None {
                return;
            }
            self.chunks.resize_with(c + 1, || None);
        }
        let chunk = match &mut self.chunks[c] {
            Some(chunk) => chunk,
            None if handle == Handle::None => return,
            slot @ None => {
                self.allocated += 1;
                slot.insert(Box::new([0; DIR_CHUNK]))
            }
        };
        chunk[i] = handle.encode();
    }

    /// Every page with a handle, in address order.
    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().enumerate().filter_map(|(c, chunk)| chunk.as_ref().map(|chunk| (c, chunk))).flat_map(
            |(c, chunk)| {
                chunk.iter().enumerate().filter(|(_, h)| **h != 0).map(move |(i, _)| (c * DIR_CHUNK + i) as u64)
            },
        )
    }

    fn host_bytes(&self) -> u64 {
        self.chunks.capacity() as u64 * 8 + self.allocated * (DIR_CHUNK as u64 * 4 + ALLOCATION_HEADER)
    }
}

/// Records per slab chunk: 64, 128, 256, 512, then 1024 (65 KiB) each, so a small memory
/// holds a small slab and a large one wastes at most one chunk's tail.
const SLAB_FIRST: usize = 64;
const SLAB_DOUBLINGS: usize = 4;
const SLAB_CHUNK: usize = SLAB_FIRST << SLAB_DOUBLINGS;

/// The single-line pages: a slab of 65-byte records. A freed record keeps the next free one's
/// number in its first four bytes (an intrusive free list: holes cost nothing beyond themselves).
#[derive(Clone, Debug)]
struct Singles {
    chunks: Vec<Box<[Single]>>,
    /// Records handed out (holes included).
    len: u32,
    /// The first free record (`u32::MAX`: none) and how many there are.
    free: u32,
    holes: u32,
}

impl Default for Singles {
    fn default() -> Singles {
        Singles { chunks: Vec::new(), len: 0, free: u32::MAX, holes: 0 }
    }
}

impl Singles {
    fn chunk_len(c: usize) -> usize {
        if c < SLAB_DOUBLINGS { SLAB_FIRST << c } else { SLAB_CHUNK }
    }

    /// Chunk and index within it of record `s`.
    fn locate(s: u32) -> (usize, usize) {
        const DOUBLING: usize = SLAB_FIRST * ((1 << SLAB_DOUBLINGS) - 1);
        let s = s as usize;
        if s < DOUBLING {
            let c = (s / SLAB_FIRST + 1).ilog2() as usize;
            (c, s - SLAB_FIRST * ((1 << c) - 1))
        } else {
            (SLAB_DOUBLINGS + (s - DOUBLING) / SLAB_CHUNK, (s - DOUBLING) % SLAB_CHUNK)
        }
    }

    #[inline]
    fn get(&self, s: u32) -> &Single {
        let (c, i) = Singles::locate(s);
        &self.chunks[c][i]
    }

    fn get_mut(&mut self, s: u32) -> &mut Single {
        let (c, i) = Singles::locate(s);
        &mut self.chunks[c][i]
    }

    fn alloc(&mut self, record: Single) -> u32 {
        let s = if self.free != u32::MAX {
            let s = self.free;
            let next = &self.get(s).line[..4];
            self.free = u32::from_le_bytes(next.try_into().expect("4 bytes"));
            self.holes -= 1;
            s
        } else {
            let s = self.len;
            let (c, _) = Singles::locate(s);
            if c == self.chunks.len() {
                let empty = Single { line: [0; LINE_BYTES], at: 0 };
                self.chunks.push(vec![empty; Singles::chunk_len(c)].into_boxed_slice());
            }
            self.len = s.checked_add(1).expect("single-line slab full");
            s
        };
        *self.get_mut(s) = record;
        s
    }

    fn free(&mut self, s: u32) {
        let next = self.free;
        self.get_mut(s).line[..4].copy_from_slice(&next.to_le_bytes());
        self.free = s;
        self.holes += 1;
    }

    /// Records in use.
    #[cfg(test)]
    fn live(&self) -> u64 {
        (self.len - self.holes) as u64
    }

    fn host_bytes(&self) -> u64 {
        let records: usize = (0..self.chunks.len()).map(Singles::chunk_len).sum();
        self.chunks.capacity() as u64 * 16
            + self.chunks.len() as u64 * ALLOCATION_HEADER
            + (records * std::mem::size_of::<Single>()) as u64
    }
}

/// A multiplicative hasher for page numbers and addresses (deterministic, and fast for
/// sequential keys).
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

/// Writes `bytes` at byte `at` of a stored line over `shared` (the base's line there, if any):
/// whether the line was non-zero in the contents before, and is after. A line that is not, over
/// no shared line, is for the caller to drop.
fn write_stored(line: &mut Line, at: usize, bytes: &[u8], shared: Option<&Line>) -> (bool, bool) {
    // Own lines are non-zero but for a fork's zeroed shared lines.
    let was = shared.is_none() || !is_zero(line);
    line[at..at + bytes.len()].copy_from_slice(bytes);
    // Non-zero bytes written keep the line; only zeros can empty it.
    let now = !is_zero(bytes) || !is_zero(line);
    (was, now)
}

/// One region (host or device memory) of one node.
#[derive(Clone, Debug, Default)]
pub struct SparseMemory {
    /// This memory's own pages. With no base, every stored line is non-zero. In a fork they
    /// override the base's line for line, and a stored line may be all zeros only where the
    /// base's line is not (a zeroed shared line).
    dir: Directory,
    singles: Singles,
    /// Pages of two or more lines; `free_pages` are the unused entries.
    pages: Vec<Page>,
    free_pages: Vec<u32>,
    /// The frozen memory this one is a fork of (it has no base itself).
    base: Option<Arc<SparseMemory>>,
    /// Non-zero lines of the contents (the base's included).
    nonzero_lines: u64,
    /// Lines stored in `pages`.
    page_lines: u64,
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

    /// Host heap bytes this region holds: its directory, its slab of single lines (every
    /// record allocated, free or not), its pages' entries and lines, and a header per
    /// allocation; a fork counts its base too (shared with other forks: see
    /// [`SparseMemory::own_host_bytes`]).
    pub fn host_bytes(&self) -> u64 {
        self.own_host_bytes() + self.base.as_ref().map_or(0, |b| b.host_bytes())
    }

    /// Host heap bytes of this memory's own pages only (a fork's cost beyond its shared base).
    pub fn own_host_bytes(&self) -> u64 {
        let pages = (self.pages.len() - self.free_pages.len()) as u64;
        self.dir.host_bytes()
            + self.singles.host_bytes()
            + self.pages.capacity() as u64 * std::mem::size_of::<Page>() as u64
            + self.free_pages.capacity() as u64 * 4
            + pages * ALLOCATION_HEADER
            + self.page_lines * LINE_BYTES as u64
    }

    /// Lines this memory stores of its own (a fork's zeroed shared lines included).
    #[cfg(test)]
    fn own_lines(&self) -> u64 {
        self.singles.live() + self.page_lines
    }

    /// A copy-on-write fork of `base`: the same contents, sharing `base`'s pages until written.
    /// A base that is itself a fork is flattened first (so a base never has one).
    pub fn fork(base: &Arc<SparseMemory>) -> SparseMemory {
        let base = if base.base.is_some() { Arc::new(base.flatten()) } else { base.clone() };
        SparseMemory { nonzero_lines: base.nonzero_lines, base: Some(base), ..SparseMemory::default() }
    }

    /// Whether this memory is a fork (shares a base).
    pub fn is_fork(&self) -> bool {
        self.base.is_some()
    }

    /// The same contents with no base: every page its own, compactly stored (one copy of each
    /// stored line, the base's or this memory's).
    pub fn flatten(&self) -> SparseMemory {
        let mut pages: Vec<(u64, Contents<'_>)> = self.stored_pages().collect();
        pages.sort_unstable_by_key(|(no, _)| *no);
        let mut flat = SparseMemory::default();
        for (no, contents) in pages {
            flat.store(no, Handle::None, contents.present, contents.lines.into_owned());
        }
        flat.nonzero_lines = self.nonzero_lines;
        flat
    }

    /// [`SparseMemory::flatten`] that moves the pages of a memory with no base. The result
    /// holds no free records and no spare room: a memory frozen into an image (which is then
    /// shared for the rest of the process) keeps none of what its writing left behind. A table
    /// filled in random order had every page pass through the slab of single lines, which then
    /// held a free record per page (6% of a 1 M-key hash table's store).
    pub fn into_flat(mut self) -> SparseMemory {
        if self.base.is_some() {
            return self.flatten();
        }
        let live_pages = self.pages.len() - self.free_pages.len();
        if self.singles.holes == 0
            && live_pages == self.pages.capacity()
            && self.dir.chunks.len() == self.dir.chunks.capacity()
        {
            return self;
        }
        let mut flat =
            SparseMemory { nonzero_lines: self.nonzero_lines, page_lines: self.page_lines, ..SparseMemory::default() };
        flat.pages.reserve_exact(live_pages);
        let SparseMemory { dir, singles, pages, .. } = &mut self;
        for no in dir.iter() {
            let moved = match dir.get(no) {
                Handle::None => unreachable!("the directory lists stored pages only"),
                Handle::Single(s) => Handle::Single(flat.singles.alloc(*singles.get(s))),
                Handle::Page(i) => {
                    flat.pages.push(std::mem::take(&mut pages[i as usize]));
                    Handle::Page((flat.pages.len() - 1) as u32)
                }
            };
            flat.dir.set(no, moved);
        }
        flat.dir.chunks.shrink_to_fit();
        flat
    }

    /// The page numbered `no` as this memory stores it (a fork: its own lines only).
    #[inline]
    fn view(&self, no: u64) -> Option<View<'_>> {
        match self.dir.get(no) {
            Handle::None => None,
            Handle::Single(s) => {
                let single = self.singles.get(s);
                Some(View::One(single.at, &single.line))
            }
            Handle::Page(i) => Some(View::Many(&self.pages[i as usize])),
        }
    }

    #[inline]
    fn base_view(&self, no: u64) -> Option<View<'_>> {
        self.base.as_ref().and_then(|b| b.view(no))
    }

    /// The page numbered `no` as the contents have it: its non-zero lines (`None`: all zeros).
    fn page(&self, no: u64) -> Option<Contents<'_>> {
        let contents = match (self.view(no), self.base_view(no)) {
            (None, None) => return None,
            // Own lines over no shared ones are all non-zero.
            (Some(v), None) | (None, Some(v)) => Contents { present: v.present(), lines: Cow::Borrowed(v.lines()) },
            (Some(own), Some(shared)) => {
                let (mut present, mut lines) = (0u64, Vec::new());
                for l in 0..PAGE_LINES {
                    if let Some(line) = own.line(l).or_else(|| shared.line(l)).filter(|line| !is_zero(&line[..])) {
                        present |= 1 << l;
                        lines.push(*line);
                    }
                }
                Contents { present, lines: Cow::Owned(lines) }
            }
        };
        Some(contents).filter(|c| c.present != 0)
    }

    /// Every page holding a non-zero line, own or the base's (in no particular order).
    fn stored_pages(&self) -> impl Iterator<Item = (u64, Contents<'_>)> {
        let own = self.dir.iter();
        let shared = self.base.iter().flat_map(|b| b.dir.iter()).filter(|&no| self.dir.get(no) == Handle::None);
        own.chain(shared).filter_map(|no| self.page(no).map(|p| (no, p)))
    }

    /// A digest of the contents (FNV-1a over every non-zero line and its address, in address
    /// order): equal memories give equal digests however they were written, so it shows that
    /// two ways of building a state (a load before and after an optimisation) agree bit for bit.
    pub fn digest(&self) -> u64 {
        let mut pages: Vec<(u64, Contents<'_>)> = self.stored_pages().collect();
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
            match (self.view(no), self.base_view(no)) {
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
                    // One directory look-up; stored lines' slots advance with the presence bits.
                    let (present, lines) = (page.present(), page.lines());
                    let first = in_page / LINE_BYTES;
                    let mut slot = (present & ((1u64 << first) - 1)).count_ones() as usize;
                    // A run of stored lines is contiguous in `lines`: one copy each run, and one
                    // fill each run of absent lines (a 2 KiB node was 32 calls of 64 bytes).
                    let mut copied = 0usize;
                    let mut l = first;
                    while copied < n {
                        let in_line = (in_page + copied) % LINE_BYTES;
                        let rest = present >> l;
                        let stored = rest & 1 != 0;
                        let run = if stored { rest.trailing_ones() } else { rest.trailing_zeros() } as usize;
                        let run = run.min(PAGE_LINES - l);
                        let m = (run * LINE_BYTES - in_line).min(n - copied);
                        let d = &mut dst[copied..copied + m];
                        if stored {
                            d.copy_from_slice(&lines[slot..slot + run].as_flattened()[in_line..in_line + m]);
                            slot += run;
                        } else {
                            d.fill(0);
                        }
                        copied += m;
                        l += run;
                    }
                }
            }
            done += n;
        }
    }

    /// Stores `data` at `offset`.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        assert!(
            offset.checked_add(data.len() as u64).is_some_and(|end| end <= MAX_OFFSET),
            "simulated memory offset {offset:#x} (+{}) beyond 256 TiB",
            data.len()
        );
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

    /// Stores `data` at byte `in_page` of page `no` (it does not cross the page), line by line:
    /// a stored line is written in place (and dropped if it becomes all zero, unless it zeroes
    /// a fork's shared line), an unstored one is inserted at its slot only if the write changes
    /// it (a fork's shared line is copied first). A write within a single-line page's line is
    /// done in place; otherwise the page's lines are taken out (a move, not a copy, for a page
    /// of several), changed, and stored back as what they now are: nothing, a single line, or
    /// a page. A page's line array grows by one line at a time, exactly (the allocator's size
    /// classes give the slack: mimalloc grows a block in place within its class), so filling a
    /// page costs one move of its tail per new line, not a rebuild of the whole page.
    fn write_in_page(&mut self, no: u64, in_page: usize, data: &[u8]) {
        let first = in_page / LINE_BYTES;
        let last = (in_page + data.len() - 1) / LINE_BYTES;
        // The part of `data` that falls in line `l`, and where in the line it goes.
        let part = |l: usize| {
            let lo = (l * LINE_BYTES).max(in_page);
            let hi = ((l + 1) * LINE_BYTES).min(in_page + data.len());
            (lo - l * LINE_BYTES, &data[lo - in_page..hi - in_page])
        };
        let base = self.base.as_deref().and_then(|b| b.view(no));
        let handle = self.dir.get(no);
        // A single-line page's own line, in place.
        if let Handle::Single(s) = handle
            && first == last
            && self.singles.get(s).at as usize == first
        {
            let shared = base.and_then(|b| b.line(first));
            let (at, bytes) = part(first);
            let (was, now) = write_stored(&mut self.singles.get_mut(s).line, at, bytes, shared);
            if !now && shared.is_none() {
                self.singles.free(s);
                self.dir.set(no, Handle::None);
            }
            self.nonzero_lines = (self.nonzero_lines as i64 + now as i64 - was as i64) as u64;
            return;
        }
        // Zeros over an unstored page: nothing to do.
        if handle == Handle::None && base.is_none() && is_zero(data) {
            return;
        }
        let (mut present, mut lines) = match handle {
            Handle::None => (0, Vec::new()),
            Handle::Single(s) => {
                let single = self.singles.get(s);
                (1u64 << single.at, vec![single.line])
            }
            Handle::Page(i) => {
                let page = &mut self.pages[i as usize];
                self.page_lines -= page.lines.len() as u64;
                (page.present, std::mem::take(&mut page.lines).into_vec())
            }
        };
        // Non-zero lines gained, less those lost.
        let mut gained = 0i64;
        for l in first..=last {
            let bit = 1u64 << l;
            let (at, bytes) = part(l);
            let slot = (present & (bit - 1)).count_ones() as usize;
            let shared = base.and_then(|b| b.line(l));
            if present & bit != 0 {
                let (was, now) = write_stored(&mut lines[slot], at, bytes, shared);
                if !now && shared.is_none() {
                    lines.remove(slot);
                    present &= !bit;
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
                lines.reserve_exact(1);
                lines.insert(slot, line);
                present |= bit;
                gained += now as i64 - shared.is_some() as i64;
            }
        }
        self.nonzero_lines = (self.nonzero_lines as i64 + gained) as u64;
        self.store(no, handle, present, lines);
    }

    /// Stores page `no`'s own lines (`present` says which), replacing what `old` named (a
    /// page's entry has had its lines taken out already).
    fn store(&mut self, no: u64, old: Handle, present: u64, lines: Vec<Line>) {
        debug_assert_eq!(present.count_ones() as usize, lines.len());
        let new = match (lines.len(), old) {
            (0, _) => Handle::None,
            (1, Handle::Single(s)) => {
                *self.singles.get_mut(s) = Single { line: lines[0], at: present.trailing_zeros() as u8 };
                return;
            }
            (1, _) => Handle::Single(self.singles.alloc(Single { line: lines[0], at: present.trailing_zeros() as u8 })),
            (n, old) => {
                self.page_lines += n as u64;
                let page = Page { present, lines: lines.into_boxed_slice() };
                if let Handle::Page(i) = old {
                    self.pages[i as usize] = page;
                    return;
                }
                match self.free_pages.pop() {
                    Some(i) => {
                        self.pages[i as usize] = page;
                        Handle::Page(i)
                    }
                    None => {
                        self.pages.push(page);
                        Handle::Page((self.pages.len() - 1) as u32)
                    }
                }
            }
        };
        match old {
            Handle::None => {}
            Handle::Single(s) => self.singles.free(s),
            Handle::Page(i) => {
                self.pages[i as usize] = Page::default();
                self.free_pages.push(i);
            }
        }
        self.dir.set(no, new);
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
        assert_eq!((m.dir.iter().count(), m.own_lines()), (0, 0));
        // Writing zeros to fresh memory allocates nothing.
        let before = m.host_bytes();
        m.write(1 << 30, &[0; 4096]);
        assert_eq!(m.host_bytes(), before);
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
        // Reads of any range, starting and ending anywhere in a line, across runs of stored and
        // absent lines and page ends.
        for _ in 0..5000 {
            let at = rng.random_range(0..flat.len() - 1);
            let len = rng.random_range(1..=(flat.len() - at).min(2 * PAGE_BYTES as usize));
            let mut out = vec![0xAAu8; len];
            m.read(at as u64, &mut out);
            assert_eq!(out, flat[at..at + len], "read of {len} bytes at {at}");
        }
        let nonzero = flat.chunks(LINE_BYTES).filter(|l| l.iter().any(|&b| b != 0)).count() as u64;
        assert_eq!(m.nonzero_lines(), nonzero);
        assert_eq!(m.own_lines(), nonzero, "no zero line is stored");
        let in_pages: u64 = m.pages.iter().map(|p| p.lines.len() as u64).sum();
        assert_eq!(m.page_lines, in_pages, "the pages' lines are accounted");
        assert!(m.pages.iter().all(|p| p.lines.is_empty() || p.lines.len() >= 2), "one line is a single");
        let copy = m.clone();
        assert_eq!(copy, m);
        assert_eq!(copy.digest(), m.digest());
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
        assert_eq!(fork.dir.iter().count(), 1, "only the zeroed shared line's page");
        assert_eq!(fork.own_lines(), 1);
    }

    #[test]
    fn a_fork_copies_the_lines_it_writes_not_their_pages() {
        // A dense base page; the fork writes one word of one line.
        let mut base = SparseMemory::new();
        base.write(0, &[0x5au8; PAGE_BYTES as usize]);
        let base = Arc::new(base);
        let mut fork = SparseMemory::fork(&base);
        fork.write_u64(130, 7);
        assert_eq!(fork.own_lines(), 1, "one line copied, not 64");
        assert_eq!(fork.read_u64(130), 7);
        assert_eq!(fork.read_u64(138), 0x5a5a_5a5a_5a5a_5a5a, "the rest of the line as the base has it");
        assert_eq!(fork.read_u64(200), 0x5a5a_5a5a_5a5a_5a5a, "the next line is the base's");
        assert_eq!(fork.nonzero_lines(), 64);
        // Writing a shared line's own bytes back copies nothing.
        fork.write(1000, &[0x5a; 24]);
        assert_eq!(fork.own_lines(), 1);
        // Zeroing a shared line keeps a zero line over it, and counts it out.
        fork.write(192, &[0; 64]);
        assert_eq!((fork.own_lines(), fork.nonzero_lines(), fork.read_u64(200)), (2, 63, 0));
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

    #[test]
    fn one_line_per_page_costs_little_more_than_its_bytes() {
        // The worst case of a page map: every page holds one written line (8 MiB of lines, so the
        // slab's last chunk, at most 65 KiB, weighs little).
        let mut m = SparseMemory::new();
        for page in 0..(1u64 << 17) {
            m.write(page * PAGE_BYTES + (page % 64) * 64 + 8, &[0xcd; 16]);
        }
        assert_eq!((m.nonzero_lines(), m.singles.live(), m.page_lines), (1 << 17, 1 << 17, 0));
        let ratio = m.host_bytes() as f64 / m.nonzero_line_bytes() as f64;
        assert!(ratio < 1.1, "ratio {ratio}");
        // A page gaining a second line becomes a page of two; losing it, a single line again.
        m.write_u64(3 * PAGE_BYTES + 640, 1);
        assert_eq!((m.singles.live(), m.page_lines, m.singles.holes), ((1 << 17) - 1, 2, 1));
        m.write_u64(3 * PAGE_BYTES + 640, 0);
        assert_eq!((m.singles.live(), m.page_lines, m.free_pages.len()), (1 << 17, 0, 1));
        assert_eq!(m.read_u64(3 * PAGE_BYTES + 3 * 64 + 8), 0xcdcd_cdcd_cdcd_cdcd);
        // Emptied singles are reused before the slab grows.
        let records = m.singles.len;
        for page in 0..64u64 {
            m.write(page * PAGE_BYTES + (page % 64) * 64 + 8, &[0; 16]);
        }
        assert_eq!((m.nonzero_lines(), m.singles.holes), ((1 << 17) - 64, 64));
        for page in 0..64u64 {
            m.write_u64(page * PAGE_BYTES, 9);
        }
        assert_eq!((m.nonzero_lines(), m.singles.holes, m.singles.len), (1 << 17, 0, records));
        assert_eq!(m.read_u64(5 * PAGE_BYTES), 9);
    }

    #[test]
    fn slab_records_map_to_distinct_places() {
        let mut seen = std::collections::HashSet::new();
        for s in 0..20_000u32 {
            let (c, i) = Singles::locate(s);
            assert!(i < Singles::chunk_len(c), "record {s}");
            assert!(seen.insert((c, i)), "record {s} shares a place");
        }
        assert_eq!(Singles::locate(SLAB_FIRST as u32), (1, 0));
        assert_eq!(Singles::locate((SLAB_FIRST * ((1 << SLAB_DOUBLINGS) - 1)) as u32), (SLAB_DOUBLINGS, 0));
    }

    #[test]
    fn a_frozen_memory_keeps_no_free_records() {
        // Every page gets one line before any gets a second (a hash table filled at random):
        // the slab of single lines fills, then empties into free records.
        let mut m = SparseMemory::new();
        for round in 0..4u64 {
            for page in 0..4096u64 {
                m.write_u64(page * PAGE_BYTES + round * 64, page + 1);
            }
        }
        assert_eq!((m.singles.live(), m.singles.holes), (0, 4096));
        // A page emptied leaves a free entry too.
        m.write(7 * PAGE_BYTES, &[0; PAGE_BYTES as usize]);
        assert_eq!(m.free_pages.len(), 1);
        let before = m.host_bytes();
        let flat = m.clone().into_flat();
        assert_eq!((flat.singles.len, flat.singles.holes, flat.free_pages.len()), (0, 0, 0));
        assert_eq!(flat.pages.capacity(), 4095);
        assert!(flat.host_bytes() < before - 4096 * 65, "{} vs {before}", flat.host_bytes());
        assert_eq!((flat.digest(), &flat), (m.digest(), &m));
        assert_eq!(flat.read_u64(9 * PAGE_BYTES + 192), 10);
        assert_eq!(m.flatten(), flat);
    }
}

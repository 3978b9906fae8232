//! Byte-exact remote formats of CHIME (digest §2) and the hopscotch algorithm on a leaf image.
//!
//! ## Cache-line versions (digest §2.2)
//!
//! A node has a *decoded* image `D` (what the layouts below describe) and an *encoded* image, the
//! bytes at the memory node: line 0 holds `D[0..64)`; every later line `k` holds one version
//! byte followed by 63 payload bytes `D[64 + 63(k-1) ..]`. The version byte is a copy of the
//! version byte of the object (entry, replica, header) in which that line's payload begins.
//! Every object starts with its own version byte: NV (node version) in the low nibble, EV (entry
//! version) in the high nibble. A whole-node write bumps every NV; an entry write bumps that
//! entry's EV. A reader of any object-aligned range checks each line version byte against its
//! object (C1: a torn entry, or lines of two node writes) and that every object it fetched has
//! one NV (C2). Lines are the NIC's atomic unit, so any mix of two writes is seen, whatever the
//! order the READ samples lines in.
//!
//! ## Leaf (digest §2.4, Fig. 10), `S` entries, neighbourhood `H`, `K`-byte keys, `V`-byte values
//!
//! ```text
//! group g (G = ceil(S/H) groups):  [replica R][entry × H]
//! replica (R = 10, or 10 + 2K without sibling-based validation):
//!     version 1 | valid 1 | sibling 8 [| lowest K | highest K]
//! entry (E = 3 + K + V):  version 1 | bitmap u16 LE | key K | value V
//! lock word (8 B) at roundup8(encoded length):  vacancy bits 0..VB | argmax | lock bit 63
//! ```
//!
//! Without metadata replication, one replica-shaped header sits at offset 0 and the entries
//! follow it. Defaults (S = 64, H = 8, K = V = 8): decoded 1296 B, encoded 1316 B, lock word at
//! 1320 (the digest's numbers).
//!
//! The entry bitmap describes the keys whose *home* is this entry: offset `d` from the home is
//! bit `H-1-d` (offset 0 is the most significant of the `H` bits, the artifact's order). Bit 15
//! marks the entry's own key as deleted (a tombstone, digest §8.6) and bit 14 that the entry
//! holds a key (the artifact reserves the all-zero key for that); so `H <= 14` here, where the
//! artifact allows 16.
//!
//! ## Internal node (digest §2.3, the artifact's layout)
//!
//! ```text
//! 0 version | 1 level | 2 valid | 3 sibling 8 | 11 leftmost 8 | 19 sibling_leftmost 8
//! 27 lowest K | 27+K highest K | 27+2K entries: [version 1 | key K | child 8] × S_i
//! ```
//! Entries are sorted; unused ones have the null key. Defaults: decoded 1131 B, encoded 1148 B,
//! lock word at 1152. Internal nodes are always read and written whole.

use crate::hash::hash64;
use dmkit_rdma::RemoteAddr;

/// Bytes of the NIC's atomic unit, and of a version line.
pub const LINE: usize = 64;
/// Payload bytes of every line after the first.
const PAYLOAD: usize = LINE - 1;
/// Bit 15 of an entry's bitmap: its key is deleted.
pub const TOMBSTONE: u16 = 1 << 15;
/// Bit 14 of an entry's bitmap: it holds a key (so every key, the all-zero one too, can be stored).
pub const OCCUPIED: u16 = 1 << 14;
/// The lock bit of a lock word.
pub const LOCK_BIT: u64 = 1 << 63;
/// The widest neighbourhood: one hop bit per entry, below the two flags.
pub const MAX_HOOD: usize = OCCUPIED.trailing_zeros() as usize;
/// Seeds of the home-slot hash and of the hotspot fingerprint (independent bits, digest §8.9).
const HOME_SEED: u64 = 0xc41e_5eed;
const FP_SEED: u64 = 0xf1_9e59_7175;

// An entry's bitmap: hop bits below the two flags (so a neighbourhood is at most 14 entries),
// and every line after the first gives one byte to its version.
const _: () = {
    assert!(TOMBSTONE & OCCUPIED == 0, "distinct flags");
    assert!(OCCUPIED.trailing_zeros() == 14 && TOMBSTONE.trailing_zeros() == 15, "bits 14 and 15");
    assert!(MAX_HOOD == 14, "hop bits 0..14");
    assert!(PAYLOAD + 1 == LINE, "one version byte a line");
    assert!(LOCK_BIT == 1 << 63, "the lock bit is the lock word's top bit, above any vacancy bits");
};

/// A read saw parts of two writes: read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torn;

/// `x % span`, without a division for the `x < 2 * span` the probes of a leaf give (a hopscotch
/// insert takes a few per entry it looks at, and the split's search for critical keys a few
/// thousand).
#[inline]
fn wrap(x: usize, span: usize) -> usize {
    if x < span {
        x
    } else if x - span < span {
        x - span
    } else {
        x % span
    }
}

/// Encoded length of a decoded image of `l` bytes.
pub fn enc_len(l: usize) -> usize {
    if l <= LINE { l } else { LINE + (l - LINE) + (l - LINE).div_ceil(PAYLOAD) }
}

/// Encoded offset where a READ or WRITE of decoded bytes from `d` on starts (it includes the
/// line version byte when `d` starts a line's payload), and where one ending before `d` ends.
pub fn raw_of(d: usize) -> usize {
    if d < LINE { d } else { d + (d - LINE).div_ceil(PAYLOAD) }
}

/// Encoded position of decoded byte `d`.
fn pos_of(d: usize) -> usize {
    if d < LINE { d } else { d + 1 + (d - LINE) / PAYLOAD }
}

/// Decoded offset of the first payload byte of line `k >= 1`.
fn line_payload(k: usize) -> usize {
    LINE + PAYLOAD * (k - 1)
}

/// The runs of `[d0, d1)` that are contiguous in the encoding too (one per line): each
/// `(d, len)` is decoded bytes `d..d + len` at encoded `pos_of(d)..`. Copying runs, not bytes,
/// took encoding and decoding out of CHIME's load profile.
fn runs(d0: usize, d1: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut d = d0;
    std::iter::from_fn(move || {
        if d >= d1 {
            return None;
        }
        let line_end = if d < LINE { LINE } else { line_payload(2 + (d - LINE) / PAYLOAD) };
        let run = (d, line_end.min(d1) - d);
        d += run.1;
        Some(run)
    })
}

/// Encodes `decoded[d0..d1)` into the encoded bytes `raw_of(d0)..raw_of(d1)`.
/// `object_start(d)` is the decoded offset of the version byte of the object holding `d`.
pub fn encode(decoded: &[u8], d0: usize, d1: usize, object_start: &dyn Fn(usize) -> usize) -> Vec<u8> {
    let (r0, r1) = (raw_of(d0), raw_of(d1));
    let mut out = vec![0u8; r1 - r0];
    for (d, len) in runs(d0, d1) {
        let p = pos_of(d) - r0;
        out[p..p + len].copy_from_slice(&decoded[d..d + len]);
    }
    for k in r0.div_ceil(LINE).max(1)..r1.div_ceil(LINE) {
        out[k * LINE - r0] = decoded[object_start(line_payload(k))];
    }
    out
}

/// Decodes encoded bytes `raw_of(d0)..raw_of(d1)` into `out[d0..d1)`, checking every line
/// version byte in range against its object's version byte (C1). Unchecked when `check` is
/// false (a planted bug).
pub fn decode(
    raw: &[u8],
    d0: usize,
    d1: usize,
    out: &mut [u8],
    object_start: &dyn Fn(usize) -> usize,
    check: bool,
) -> Result<(), Torn> {
    let r0 = raw_of(d0);
    debug_assert_eq!(raw.len(), raw_of(d1) - r0);
    for (d, len) in runs(d0, d1) {
        let p = pos_of(d) - r0;
        out[d..d + len].copy_from_slice(&raw[p..p + len]);
    }
    if check {
        for k in r0.div_ceil(LINE).max(1)..raw_of(d1).div_ceil(LINE) {
            let obj = object_start(line_payload(k));
            if obj >= d0 && raw[k * LINE - r0] != out[obj] {
                return Err(Torn);
            }
        }
    }
    Ok(())
}

/// NV of a version byte.
pub fn nv(version: u8) -> u8 {
    version & 0x0F
}

/// EV of a version byte.
pub fn ev(version: u8) -> u8 {
    version >> 4
}

/// The version byte with NV + 1 (mod 16).
pub fn bump_nv(version: u8) -> u8 {
    (version & 0xF0) | (version.wrapping_add(1) & 0x0F)
}

/// The version byte with EV + 1 (mod 16).
pub fn bump_ev(version: u8) -> u8 {
    version.wrapping_add(0x10)
}

fn round_up8(x: usize) -> usize {
    x.div_ceil(8) * 8
}

/// `key + 1` as a fixed-length big-endian number (`None` for all-0xFF).
pub fn successor(key: &[u8]) -> Option<Vec<u8>> {
    let mut k = key.to_vec();
    for b in k.iter_mut().rev() {
        if *b == 0xFF {
            *b = 0;
        } else {
            *b += 1;
            return Some(k);
        }
    }
    None
}

/// The geometry of one tree's leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafLayout {
    /// Entries (S).
    pub span: usize,
    /// Neighbourhood (H), 1..=15.
    pub hood: usize,
    pub key_bytes: usize,
    /// Bytes of an entry's value field (8 in indirect mode: a block pointer).
    pub value_bytes: usize,
    /// Metadata replicated in front of every group of `hood` entries (else one header).
    pub replicated: bool,
    /// Replicas carry fence keys (no sibling-based validation).
    pub fences: bool,
}

impl LeafLayout {
    pub fn entry_bytes(&self) -> usize {
        3 + self.key_bytes + self.value_bytes
    }

    pub fn replica_bytes(&self) -> usize {
        10 + if self.fences { 2 * self.key_bytes } else { 0 }
    }

    fn group_bytes(&self) -> usize {
        self.replica_bytes() + self.hood * self.entry_bytes()
    }

    /// Decoded offset of entry `i`.
    pub fn entry_at(&self, i: usize) -> usize {
        if self.replicated {
            (i / self.hood) * self.group_bytes() + self.replica_bytes() + (i % self.hood) * self.entry_bytes()
        } else {
            self.replica_bytes() + i * self.entry_bytes()
        }
    }

    /// Decoded offsets of the replicas.
    pub fn replicas(&self) -> Vec<usize> {
        self.replica_offsets().collect()
    }

    fn replica_offsets(&self) -> impl Iterator<Item = usize> {
        let (groups, gb) = (if self.replicated { self.span.div_ceil(self.hood) } else { 1 }, self.group_bytes());
        (0..groups).map(move |g| g * gb)
    }

    pub fn decoded_bytes(&self) -> usize {
        self.entry_at(self.span - 1) + self.entry_bytes()
    }

    pub fn encoded_bytes(&self) -> usize {
        enc_len(self.decoded_bytes())
    }

    pub fn lock_at(&self) -> usize {
        round_up8(self.encoded_bytes())
    }

    pub fn alloc_bytes(&self) -> usize {
        self.lock_at() + 8
    }

    /// Decoded offset of the version byte of the object holding decoded byte `d`.
    pub fn object_start(&self, d: usize) -> usize {
        let (r, e) = (self.replica_bytes(), self.entry_bytes());
        if self.replicated {
            let g = d / self.group_bytes();
            let within = d % self.group_bytes();
            if within < r { g * self.group_bytes() } else { g * self.group_bytes() + r + (within - r) / e * e }
        } else if d < r {
            0
        } else {
            r + (d - r) / e * e
        }
    }

    /// Decoded range of a READ of entries `[a, b)` (no wrap): it starts at the replica in front
    /// of `a` when `a` starts a group (so a neighbourhood always holds one replica).
    pub fn seg_range(&self, a: usize, b: usize) -> (usize, usize) {
        debug_assert!(a < b && b <= self.span);
        let start = if (self.replicated && a % self.hood == 0) || a == 0 {
            self.entry_at(a) - self.replica_bytes()
        } else {
            self.entry_at(a)
        };
        (start, self.entry_at(b - 1) + self.entry_bytes())
    }

    /// The replicas that lie inside decoded range `[d0, d1)`.
    pub fn replicas_in(&self, d0: usize, d1: usize) -> impl Iterator<Item = usize> {
        let rb = self.replica_bytes();
        self.replica_offsets().filter(move |&r| r >= d0 && r + rb <= d1)
    }

    /// Version bytes of every object that starts inside `[d0, d1)`: replicas, then entries.
    /// Visits only the entries in range (every read checks them; scanning all entries and
    /// collecting was a tenth of loading CHIME).
    pub fn versions_in<'a>(&'a self, image: &'a [u8], d0: usize, d1: usize) -> impl Iterator<Item = u8> + 'a {
        // Entry offsets grow with the index: the first entry at or after d0 by bisection.
        let (mut lo, mut hi) = (0, self.span);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.entry_at(mid) < d0 { lo = mid + 1 } else { hi = mid }
        }
        let reps = self.replicas_in(d0, d1).map(|r| image[r]);
        let ents = (lo..self.span).map(|i| self.entry_at(i)).take_while(move |&e| e < d1).map(|e| image[e]);
        reps.chain(ents)
    }

    /// An empty leaf: every entry null, versions 0, `valid`, the given sibling and fences.
    pub fn empty(&self, sibling: RemoteAddr, lowest: &[u8], highest: &[u8]) -> Vec<u8> {
        let mut img = vec![0u8; self.decoded_bytes()];
        for r in self.replicas() {
            img[r + 1] = 1;
            img[r + 2..r + 10].copy_from_slice(&sibling.raw().to_le_bytes());
            if self.fences {
                img[r + 10..r + 10 + self.key_bytes].copy_from_slice(lowest);
                img[r + 10 + self.key_bytes..r + 10 + 2 * self.key_bytes].copy_from_slice(highest);
            }
        }
        img
    }

    /// Encodes the whole leaf.
    pub fn encode_all(&self, image: &[u8]) -> Vec<u8> {
        encode(image, 0, self.decoded_bytes(), &|d| self.object_start(d))
    }

    /// Encodes entries `[a, b)` (no wrap) for a WRITE at `raw_of(start)`.
    pub fn encode_seg(&self, image: &[u8], a: usize, b: usize) -> (usize, Vec<u8>) {
        let (d0, d1) = (self.entry_at(a), self.entry_at(b - 1) + self.entry_bytes());
        (raw_of(d0), encode(image, d0, d1, &|d| self.object_start(d)))
    }

    // --- fields of a decoded image ---

    pub fn version(&self, img: &[u8], i: usize) -> u8 {
        img[self.entry_at(i)]
    }

    pub fn set_version(&self, img: &mut [u8], i: usize, v: u8) {
        img[self.entry_at(i)] = v;
    }

    /// EV + 1 on entry `i` (an entry write).
    pub fn bump_entry(&self, img: &mut [u8], i: usize) {
        let at = self.entry_at(i);
        img[at] = bump_ev(img[at]);
    }

    pub fn bitmap(&self, img: &[u8], i: usize) -> u16 {
        let at = self.entry_at(i) + 1;
        u16::from_le_bytes([img[at], img[at + 1]])
    }

    pub fn set_bitmap(&self, img: &mut [u8], i: usize, b: u16) {
        let at = self.entry_at(i) + 1;
        img[at..at + 2].copy_from_slice(&b.to_le_bytes());
    }

    pub fn key<'a>(&self, img: &'a [u8], i: usize) -> &'a [u8] {
        let at = self.entry_at(i) + 3;
        &img[at..at + self.key_bytes]
    }

    pub fn value<'a>(&self, img: &'a [u8], i: usize) -> &'a [u8] {
        let at = self.entry_at(i) + 3 + self.key_bytes;
        &img[at..at + self.value_bytes]
    }

    pub fn is_empty(&self, img: &[u8], i: usize) -> bool {
        self.bitmap(img, i) & OCCUPIED == 0
    }

    /// Entry `i`'s hop bits (its bitmap without the flags).
    pub fn hops(&self, img: &[u8], i: usize) -> u16 {
        self.bitmap(img, i) & ((1 << self.hood) - 1)
    }

    pub fn is_tombstone(&self, img: &[u8], i: usize) -> bool {
        self.bitmap(img, i) & TOMBSTONE != 0
    }

    /// Sets entry `i`'s key, value and tombstone flag (its bitmap's home bits are kept).
    pub fn set_item(&self, img: &mut [u8], i: usize, key: &[u8], value: &[u8], tombstone: bool) {
        let at = self.entry_at(i) + 3;
        img[at..at + self.key_bytes].copy_from_slice(key);
        img[at + self.key_bytes..at + self.key_bytes + self.value_bytes].copy_from_slice(value);
        let b = (self.bitmap(img, i) & !TOMBSTONE) | OCCUPIED;
        self.set_bitmap(img, i, if tombstone { b | TOMBSTONE } else { b });
    }

    pub fn clear_item(&self, img: &mut [u8], i: usize) {
        let at = self.entry_at(i) + 3;
        img[at..at + self.key_bytes + self.value_bytes].fill(0);
        let b = self.bitmap(img, i) & !(TOMBSTONE | OCCUPIED);
        self.set_bitmap(img, i, b);
    }

    /// Moves entry `from`'s key, value and tombstone flag to entry `to` and clears `from`
    /// (both keep their own home bits and versions).
    pub fn move_item(&self, img: &mut [u8], from: usize, to: usize) {
        let (a, b) = (self.entry_at(from) + 3, self.entry_at(to) + 3);
        img.copy_within(a..a + self.key_bytes + self.value_bytes, b);
        let flags = self.bitmap(img, from) & (TOMBSTONE | OCCUPIED);
        self.set_bitmap(img, to, self.bitmap(img, to) & !(TOMBSTONE | OCCUPIED) | flags);
        self.clear_item(img, from);
    }

    /// The hop bit of offset `d` from the home.
    pub fn hop_bit(&self, d: usize) -> u16 {
        1 << (self.hood - 1 - d)
    }

    /// The offsets set in entry `i`'s bitmap.
    pub fn hop_offsets(&self, img: &[u8], i: usize) -> impl Iterator<Item = usize> {
        let b = self.bitmap(img, i);
        let h = self.hood;
        (0..h).filter(move |&d| b & (1 << (h - 1 - d)) != 0)
    }

    pub fn valid(&self, img: &[u8], replica: usize) -> bool {
        img[replica + 1] != 0
    }

    pub fn sibling(&self, img: &[u8], replica: usize) -> RemoteAddr {
        RemoteAddr::from_raw(u64::from_le_bytes(img[replica + 2..replica + 10].try_into().expect("8 bytes")))
    }

    pub fn fences<'a>(&self, img: &'a [u8], replica: usize) -> (&'a [u8], &'a [u8]) {
        let k = self.key_bytes;
        (&img[replica + 10..replica + 10 + k], &img[replica + 10 + k..replica + 10 + 2 * k])
    }

    /// Rewrites every replica's sibling (and fences) — a whole-node change.
    pub fn set_meta(&self, img: &mut [u8], sibling: RemoteAddr, fences: Option<(&[u8], &[u8])>) {
        for r in self.replicas() {
            img[r + 1] = 1;
            img[r + 2..r + 10].copy_from_slice(&sibling.raw().to_le_bytes());
            if let (true, Some((lo, hi))) = (self.fences, fences) {
                img[r + 10..r + 10 + self.key_bytes].copy_from_slice(lo);
                img[r + 10 + self.key_bytes..r + 10 + 2 * self.key_bytes].copy_from_slice(hi);
            }
        }
    }

    /// Bumps NV on every object (a whole-node write).
    pub fn bump_node(&self, img: &mut [u8]) {
        for r in self.replicas() {
            img[r] = bump_nv(img[r]);
        }
        for i in 0..self.span {
            let at = self.entry_at(i);
            img[at] = bump_nv(img[at]);
        }
    }

    /// The home entry of `key`.
    pub fn home(&self, key: &[u8]) -> usize {
        (hash64(key, HOME_SEED) % self.span as u64) as usize
    }

    /// Entry `base + off` mod S.
    pub fn at(&self, base: usize, off: usize) -> usize {
        wrap(base + off, self.span)
    }

    /// Forward distance from `from` to `to` mod S.
    pub fn dist(&self, from: usize, to: usize) -> usize {
        wrap(to + self.span - from, self.span)
    }

    // --- lock word (vacancy bitmap + argmax + lock bit) ---

    /// Vacancy bits (VB) for spans `self.span` and `internal_span`.
    pub fn vacancy_bits(&self, internal_span: usize) -> usize {
        let m = self.span.max(internal_span);
        let log = usize::BITS as usize - (m - 1).leading_zeros() as usize;
        (63 - log).min(self.span.min(internal_span))
    }
}

/// The lock word's fields (digest §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockWord {
    /// Vacancy bits (VB); entry `i` is in bucket `i * VB / S`.
    pub vb: usize,
    pub span: usize,
}

impl LockWord {
    pub fn bucket(&self, i: usize) -> usize {
        i * self.vb / self.span
    }

    /// First and last entry of bucket `b`.
    pub fn bucket_entries(&self, b: usize) -> (usize, usize) {
        let first = (b * self.span).div_ceil(self.vb);
        let last = ((b + 1) * self.span).div_ceil(self.vb) - 1;
        (first, last.min(self.span - 1))
    }

    pub fn full(&self, word: u64, b: usize) -> bool {
        word & (1 << b) != 0
    }

    pub fn set_full(&self, word: u64, b: usize, full: bool) -> u64 {
        if full { word | (1 << b) } else { word & !(1 << b) }
    }

    pub fn argmax(&self, word: u64) -> usize {
        ((word & !LOCK_BIT) >> self.vb) as usize
    }

    pub fn with_argmax(&self, word: u64, slot: usize) -> u64 {
        (word & ((1 << self.vb) - 1)) | ((slot as u64) << self.vb)
    }

    /// How many entries from `h` an insert must read to reach the first bucket the bitmap
    /// marks vacant, wrapping (digest §8.2 \[R\]); `span` when none is.
    pub fn hop_read_len(&self, word: u64, h: usize) -> usize {
        for t in 0..self.span {
            let j = (h + t) % self.span;
            let b = self.bucket(j);
            if self.full(word, b) {
                continue;
            }
            let (first, last) = self.bucket_entries(b);
            // The bucket must lie ahead of h (not straddle it from behind).
            let d_first = (first + self.span - h) % self.span;
            if d_first > t {
                continue;
            }
            let d_last = (last + self.span - h) % self.span;
            return (d_last + 1).min(self.span);
        }
        self.span
    }
}

/// A decoded internal node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Internal {
    pub nv: u8,
    pub level: u8,
    pub valid: bool,
    pub sibling: RemoteAddr,
    pub leftmost: RemoteAddr,
    pub sibling_leftmost: RemoteAddr,
    pub lowest: Vec<u8>,
    pub highest: Vec<u8>,
    /// Sorted `(pivot, child)`; child `i` covers `[pivot i, pivot i+1)`.
    pub entries: Vec<(Vec<u8>, RemoteAddr)>,
}

impl Internal {
    pub fn covers(&self, key: &[u8]) -> bool {
        self.lowest.as_slice() <= key && key < self.highest.as_slice()
    }

    /// The child covering `key` and its expected right sibling.
    pub fn route(&self, key: &[u8]) -> (RemoteAddr, RemoteAddr) {
        let i = self.entries.partition_point(|(k, _)| k.as_slice() <= key);
        let child = if i == 0 { self.leftmost } else { self.entries[i - 1].1 };
        let next = self.entries.get(i).map_or(self.sibling_leftmost, |e| e.1);
        (child, next)
    }
}

impl crate::common::range_cache::RangeNode for Internal {
    fn level(&self) -> u8 {
        self.level
    }
    fn lowest(&self) -> &[u8] {
        &self.lowest
    }
    fn highest(&self) -> &[u8] {
        &self.highest
    }
}

/// The geometry of one tree's internal nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InternalLayout {
    pub span: usize,
    pub key_bytes: usize,
}

impl InternalLayout {
    pub fn header_bytes(&self) -> usize {
        27 + 2 * self.key_bytes
    }

    pub fn entry_bytes(&self) -> usize {
        9 + self.key_bytes
    }

    pub fn decoded_bytes(&self) -> usize {
        self.header_bytes() + self.span * self.entry_bytes()
    }

    pub fn encoded_bytes(&self) -> usize {
        enc_len(self.decoded_bytes())
    }

    pub fn lock_at(&self) -> usize {
        round_up8(self.encoded_bytes())
    }

    pub fn alloc_bytes(&self) -> usize {
        self.lock_at() + 8
    }

    /// Host bytes the artifact charges a cached copy: `8 + header + entry × entries`.
    pub fn cache_charge(&self, n: &Internal) -> u64 {
        (8 + self.header_bytes() + self.entry_bytes() * n.entries.len()) as u64
    }

    fn object_start(&self, d: usize) -> usize {
        let h = self.header_bytes();
        if d < h { 0 } else { h + (d - h) / self.entry_bytes() * self.entry_bytes() }
    }

    pub fn encode(&self, n: &Internal, entry_versions: &[u8]) -> Vec<u8> {
        let k = self.key_bytes;
        let mut img = vec![0u8; self.decoded_bytes()];
        img[0] = n.nv & 0x0F;
        img[1] = n.level;
        img[2] = n.valid as u8;
        img[3..11].copy_from_slice(&n.sibling.raw().to_le_bytes());
        img[11..19].copy_from_slice(&n.leftmost.raw().to_le_bytes());
        img[19..27].copy_from_slice(&n.sibling_leftmost.raw().to_le_bytes());
        img[27..27 + k].copy_from_slice(&n.lowest);
        img[27 + k..27 + 2 * k].copy_from_slice(&n.highest);
        for i in 0..self.span {
            let at = self.header_bytes() + i * self.entry_bytes();
            img[at] = (entry_versions.get(i).copied().unwrap_or(0) & 0xF0) | (n.nv & 0x0F);
            if let Some((key, child)) = n.entries.get(i) {
                img[at + 1..at + 1 + k].copy_from_slice(key);
                img[at + 1 + k..at + 9 + k].copy_from_slice(&child.raw().to_le_bytes());
            }
        }
        encode(&img, 0, img.len(), &|d| self.object_start(d))
    }

    /// Decodes a whole encoded node, checking C1 and C2 (unless `check` is false).
    pub fn decode(&self, raw: &[u8], check: bool) -> Result<Internal, Torn> {
        let k = self.key_bytes;
        let mut img = vec![0u8; self.decoded_bytes()];
        decode(raw, 0, img.len(), &mut img, &|d| self.object_start(d), check)?;
        let nv0 = nv(img[0]);
        let mut entries = Vec::new();
        for i in 0..self.span {
            let at = self.header_bytes() + i * self.entry_bytes();
            if check && nv(img[at]) != nv0 {
                return Err(Torn);
            }
            let key = &img[at + 1..at + 1 + k];
            if key.iter().any(|&b| b != 0) {
                let child = u64::from_le_bytes(img[at + 1 + k..at + 9 + k].try_into().expect("8 bytes"));
                entries.push((key.to_vec(), RemoteAddr::from_raw(child)));
            }
        }
        let addr = |at: usize| RemoteAddr::from_raw(u64::from_le_bytes(img[at..at + 8].try_into().expect("8 bytes")));
        Ok(Internal {
            nv: nv0,
            level: img[1],
            valid: img[2] != 0,
            sibling: addr(3),
            leftmost: addr(11),
            sibling_leftmost: addr(19),
            lowest: img[27..27 + k].to_vec(),
            highest: img[27 + k..27 + 2 * k].to_vec(),
            entries,
        })
    }
}

/// Result of a hopscotch insert on a local leaf image.
#[derive(Debug, PartialEq, Eq)]
pub struct Hopped {
    /// The entry that received the key.
    pub slot: usize,
    /// Forward distance from the home to the farthest entry changed (the hop range's end).
    pub reach: usize,
    /// Entries whose bytes changed (hop entries and homes whose bitmap changed).
    pub changed: Vec<usize>,
    /// Where each moved key went: (from, to).
    pub moves: Vec<(usize, usize)>,
}

/// One hop of a hopscotch insert: the key at entry `from` (home `home`, `dist` from it) moves
/// `off` entries forward to the empty entry `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub from: usize,
    pub to: usize,
    pub home: usize,
    pub dist: usize,
    pub off: usize,
}

/// Where a hopscotch insert at home `h` would put the key, and the hops that free that entry,
/// using only entries at forward distance `< n` from `h`: `(distance of the key's entry from
/// h, distance of the first empty entry, hops in the order they apply)`. `None` if the range
/// has no empty entry or no key can hop toward `h`. Moves the farthest movable key first (the
/// invariant I4 readers rely on).
///
/// Needs only the table as it is before the insert: each hop moves a key from `p` into the
/// empty entry `j > p`, and the next looks only below `p`, where nothing has moved yet. So
/// `is_empty` and `home` describe the original table, and a caller can ask "what if entry `s`
/// were empty" without copying it (see CHIME's critical keys).
pub fn hop_plan(
    l: &LeafLayout,
    h: usize,
    n: usize,
    is_empty: impl Fn(usize) -> bool,
    mut home: impl FnMut(usize) -> usize,
) -> Option<(usize, usize, Vec<Hop>)> {
    let mut j = (0..n).find(|&t| is_empty(l.at(h, t)))?;
    let reach = j;
    let mut hops = Vec::new();
    while j >= l.hood {
        let mut moved = false;
        for off in (1..l.hood).rev() {
            let p = j - off;
            let ps = l.at(h, p);
            if is_empty(ps) {
                continue;
            }
            let q = home(ps);
            let dq = l.dist(q, ps);
            // The key at p may move to j if j stays in its home's neighbourhood.
            if dq >= l.hood || dq + off >= l.hood {
                continue;
            }
            hops.push(Hop { from: ps, to: l.at(h, j), home: q, dist: dq, off });
            j = p;
            moved = true;
            break;
        }
        if !moved {
            return None;
        }
    }
    Some((j, reach, hops))
}

/// Hopscotch insert of `(key, value)` (home `h`) into `img`, using only entries at forward
/// distance `< n` from `h` (the fetched range; `n == S` is the whole table): [`hop_plan`],
/// applied. `None`, with `img` untouched, where the plan is `None`.
pub fn hop_insert(l: &LeafLayout, img: &mut [u8], h: usize, key: &[u8], value: &[u8], n: usize) -> Option<Hopped> {
    let (j, reach, hops) = {
        let img = &*img;
        hop_plan(l, h, n, |s| l.is_empty(img, s), |s| l.home(l.key(img, s)))?
    };
    let mut changed = Vec::with_capacity(3 * hops.len() + 2);
    let mut moves = Vec::with_capacity(hops.len());
    for hop in hops {
        let Hop { from, to, home, dist, off } = hop;
        l.move_item(img, from, to);
        let b = l.bitmap(img, home) & !l.hop_bit(dist) | l.hop_bit(dist + off);
        l.set_bitmap(img, home, b);
        changed.extend([to, from, home]);
        moves.push((from, to));
    }
    let slot = l.at(h, j);
    l.set_item(img, slot, key, value, false);
    l.set_bitmap(img, h, l.bitmap(img, h) | l.hop_bit(j));
    changed.extend([slot, h]);
    changed.sort_unstable();
    changed.dedup();
    Some(Hopped { slot, reach, changed, moves })
}

/// The hotspot fingerprint of a key (16 independent hash bits).
pub fn fingerprint(key: &[u8]) -> u16 {
    hash64(key, FP_SEED) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    fn chime() -> LeafLayout {
        LeafLayout { span: 64, hood: 8, key_bytes: 8, value_bytes: 8, replicated: true, fences: false }
    }

    #[test]
    fn digest_sizes() {
        let l = chime();
        assert_eq!((l.entry_bytes(), l.replica_bytes()), (19, 10));
        assert_eq!((l.decoded_bytes(), l.encoded_bytes(), l.lock_at()), (1296, 1316, 1320));
        let i = InternalLayout { span: 64, key_bytes: 8 };
        assert_eq!((i.decoded_bytes(), i.encoded_bytes(), i.lock_at()), (1131, 1148, 1152));
        let vb = l.vacancy_bits(64);
        assert_eq!(vb, 57);
        // A neighbourhood read is 164-165 B; a single-entry read 19-30 B.
        for h in 0..57 {
            let (d0, d1) = l.seg_range(h, h + 8);
            let len = raw_of(d1) - raw_of(d0);
            assert!((164..=165).contains(&len), "h {h}: {len}");
            let (d0, d1) = l.seg_range(h, h + 1);
            assert!((19..=30).contains(&(raw_of(d1) - raw_of(d0))));
        }
        let unrep = LeafLayout { replicated: false, fences: true, ..l };
        assert_eq!(unrep.replica_bytes(), 26);
    }

    #[test]
    fn encoding_places_every_byte_at_its_position() {
        let decoded: Vec<u8> = (0..400).map(|d| (d % 253) as u8 + 1).collect();
        let obj = |d: usize| d / 19 * 19;
        for d0 in [0, 1, 63, 64, 65, 126, 127, 128, 200] {
            for d1 in [d0, d0 + 1, 64, 127, 190, 191, 300, 400].into_iter().filter(|&d1| d1 >= d0) {
                let (r0, raw) = (raw_of(d0), encode(&decoded, d0, d1, &obj));
                for d in d0..d1 {
                    assert_eq!(raw[pos_of(d) - r0], decoded[d], "[{d0}, {d1}) byte {d}");
                }
                let mut back = vec![0u8; 400];
                decode(&raw, d0, d1, &mut back, &obj, true).unwrap();
                assert_eq!(back[d0..d1], decoded[d0..d1], "[{d0}, {d1})");
            }
        }
    }

    #[test]
    fn versions_in_are_the_objects_starting_in_range() {
        for l in [
            chime(),
            LeafLayout { replicated: false, fences: true, ..chime() },
            LeafLayout { span: 12, hood: 5, ..chime() },
        ] {
            let mut img = vec![0u8; l.decoded_bytes()];
            for (d, b) in img.iter_mut().enumerate() {
                *b = (d % 251) as u8;
            }
            let n = l.decoded_bytes();
            for (d0, d1) in
                [(0, n), (0, 1), (1, n), (l.entry_at(3), l.entry_at(9)), (l.entry_at(3) + 1, l.entry_at(9) + 1), (5, 5)]
            {
                // The reference: every replica that fits, then every entry that starts in range.
                let mut want: Vec<u8> = l
                    .replicas()
                    .into_iter()
                    .filter(|&r| r >= d0 && r + l.replica_bytes() <= d1)
                    .map(|r| img[r])
                    .collect();
                want.extend((0..l.span).map(|i| l.entry_at(i)).filter(|&e| e >= d0 && e < d1).map(|e| img[e]));
                assert_eq!(l.versions_in(&img, d0, d1).collect::<Vec<_>>(), want, "{l:?} [{d0}, {d1})");
            }
        }
    }

    #[test]
    fn line_versions_catch_any_mix_of_two_writes() {
        let l = chime();
        let mut a = l.empty(RemoteAddr::NULL, &[], &[]);
        for i in 0..64 {
            l.set_item(&mut a, i, &(i as u64 + 1).to_be_bytes(), &[7; 8], false);
        }
        let old = l.encode_all(&a);
        // An entry write of an entry that spans two lines.
        let i = (0..64).find(|&i| pos_of(l.entry_at(i)) / LINE != pos_of(l.entry_at(i) + 18) / LINE).unwrap();
        let mut b = a.clone();
        l.set_item(&mut b, i, &(i as u64 + 1).to_be_bytes(), &[9; 8], false);
        l.bump_entry(&mut b, i);
        let new = l.encode_all(&b);
        let mut checked = 0;
        for line in 0..old.len().div_ceil(LINE) {
            let mut mix = old.clone();
            let r = line * LINE..((line + 1) * LINE).min(old.len());
            mix[r.clone()].copy_from_slice(&new[r]);
            if mix == old || mix == new {
                continue;
            }
            let mut out = vec![0u8; l.decoded_bytes()];
            let (d0, d1) = l.seg_range(i, i + 1);
            let res = decode(&mix[raw_of(d0)..raw_of(d1)], d0, d1, &mut out, &|d| l.object_start(d), true);
            assert_eq!(res, Err(Torn), "line {line}");
            checked += 1;
        }
        assert!(checked >= 1);
        // And a clean read of either image decodes.
        let mut out = vec![0u8; l.decoded_bytes()];
        decode(&new, 0, l.decoded_bytes(), &mut out, &|d| l.object_start(d), true).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn internal_round_trip() {
        let il = InternalLayout { span: 8, key_bytes: 8 };
        let n = Internal {
            nv: 3,
            level: 1,
            valid: true,
            sibling: RemoteAddr::host(NodeId(1), 4096),
            leftmost: RemoteAddr::host(NodeId(0), 8192),
            sibling_leftmost: RemoteAddr::NULL,
            lowest: vec![0; 8],
            highest: vec![0xFF; 8],
            entries: vec![(10u64.to_be_bytes().to_vec(), RemoteAddr::host(NodeId(0), 64))],
        };
        let raw = il.encode(&n, &[]);
        assert_eq!(raw.len(), il.encoded_bytes());
        assert_eq!(il.decode(&raw, true).unwrap(), n);
        assert_eq!(n.route(&5u64.to_be_bytes()), (n.leftmost, RemoteAddr::host(NodeId(0), 64)));
        assert_eq!(n.route(&10u64.to_be_bytes()), (RemoteAddr::host(NodeId(0), 64), RemoteAddr::NULL));
    }

    #[test]
    fn hop_read_len_wraps_and_skips_full_buckets() {
        let lw = LockWord { vb: 57, span: 64 };
        assert_eq!(lw.hop_read_len(0, 5), 1);
        // Buckets of entries 5..=9 full: the first vacant one after h = 5.
        let mut w = 0;
        for i in 5..=9 {
            w = lw.set_full(w, lw.bucket(i), true);
        }
        let n = lw.hop_read_len(w, 5);
        assert!(n >= 6 && lw.bucket_entries(lw.bucket(5 + n - 1)).1 == 5 + n - 1, "{n}");
        // Everything full but bucket 0: wraps around.
        let all = (1u64 << 57) - 1;
        let w = lw.set_full(all, 0, false);
        assert_eq!(lw.hop_read_len(w, 60), 6);
        assert_eq!(lw.hop_read_len(all, 60), 64);
        let w = lw.with_argmax(all | LOCK_BIT, 63);
        assert_eq!(lw.argmax(w), 63);
    }

    #[test]
    fn hopscotch_keeps_keys_in_their_neighbourhoods() {
        let l = LeafLayout { span: 32, hood: 4, ..chime() };
        let mut img = l.empty(RemoteAddr::NULL, &[], &[]);
        let mut n = 0;
        for k in 1..10_000u64 {
            let key = k.to_be_bytes();
            let h = l.home(&key);
            if hop_insert(&l, &mut img, h, &key, &k.to_le_bytes(), l.span).is_none() {
                break;
            }
            n += 1;
            for i in 0..l.span {
                if !l.is_empty(&img, i) {
                    let q = l.home(l.key(&img, i));
                    let d = l.dist(q, i);
                    assert!(d < l.hood && l.bitmap(&img, q) & l.hop_bit(d) != 0);
                }
                for d in l.hop_offsets(&img, i).collect::<Vec<_>>() {
                    assert_eq!(l.home(l.key(&img, l.at(i, d))), i);
                }
            }
        }
        assert!(n > 16, "a 32-entry table with H = 4 holds more than half before failing: {n}");
    }

    /// A failed insert leaves the table as it was, and a plan that pretends one entry is empty
    /// answers as an insert into a copy with that entry cleared does (how CHIME's split finds
    /// its critical keys without copying the leaf).
    #[test]
    fn a_plan_on_the_original_table_is_the_insert() {
        let l = LeafLayout { span: 32, hood: 4, ..chime() };
        let (mut full_tables, mut what_ifs, mut feasible) = (0, 0, 0);
        for seed in 0..40u64 {
            let mut img = l.empty(RemoteAddr::NULL, &[], &[]);
            for k in 1..10_000u64 {
                let key = (k * 7919 + seed * 1_000_003).to_be_bytes();
                let h = l.home(&key);
                let before = img.clone();
                if hop_insert(&l, &mut img, h, &key, &k.to_le_bytes(), l.span).is_some() {
                    continue;
                }
                assert_eq!(img, before, "seed {seed}: a failed insert changed the table");
                full_tables += 1;
                let homes: Vec<usize> = (0..l.span).map(|s| l.home(l.key(&img, s))).collect();
                for s in (0..l.span).filter(|&s| !l.is_empty(&img, s)) {
                    let mut copy = img.clone();
                    l.clear_item(&mut copy, s);
                    let want = hop_insert(&l, &mut copy, h, &key, &[1; 8], l.span).map(|hop| hop.slot);
                    let plan = hop_plan(&l, h, l.span, |t| t == s || l.is_empty(&img, t), |t| homes[t]);
                    assert_eq!(plan.map(|(j, _, _)| l.at(h, j)), want, "seed {seed}, entry {s} cleared");
                    what_ifs += 1;
                    feasible += usize::from(want.is_some());
                }
                break;
            }
        }
        assert_eq!(full_tables, 40);
        assert!(feasible > 0 && feasible < what_ifs, "both answers occur: {feasible} of {what_ifs}");
    }

    /// Digest G1: with H = 12 a 2-byte bitmap can straddle a line. A hop that changes a home's
    /// bitmap without bumping that home's EV lets a READ mix the bitmap's two halves unseen.
    #[test]
    fn g1_home_bitmap_needs_its_own_version_bump() {
        let l = LeafLayout { span: 16, hood: 12, key_bytes: 8, value_bytes: 32, replicated: true, fences: false };
        let q = (0..16).find(|&i| pos_of(l.entry_at(i) + 1) / LINE != pos_of(l.entry_at(i) + 2) / LINE).unwrap();
        let mut old = l.empty(RemoteAddr::NULL, &[], &[]);
        l.set_bitmap(&mut old, q, l.hop_bit(2) | OCCUPIED);
        let torn_accepted = |bump: bool| {
            let mut new = old.clone();
            l.set_bitmap(&mut new, q, l.hop_bit(5) | OCCUPIED);
            if bump {
                l.bump_entry(&mut new, q);
            }
            let (eo, en) = (l.encode_all(&old), l.encode_all(&new));
            let mut accepted = false;
            for line in 0..eo.len().div_ceil(LINE) {
                let mut mix = eo.clone();
                let r = line * LINE..((line + 1) * LINE).min(eo.len());
                mix[r.clone()].copy_from_slice(&en[r]);
                let (d0, d1) = l.seg_range(q, q + 1);
                let mut out = vec![0u8; l.decoded_bytes()];
                let ok = decode(&mix[raw_of(d0)..raw_of(d1)], d0, d1, &mut out, &|d| l.object_start(d), true).is_ok();
                let b = l.hops(&out, q);
                accepted |= ok && b != l.hops(&old, q) && b != l.hops(&new, q);
            }
            accepted
        };
        assert!(torn_accepted(false), "without the home's EV bump a torn bitmap passes C1");
        assert!(!torn_accepted(true), "with it, C1 rejects every torn mix");
    }

    #[test]
    fn successor_is_plus_one() {
        assert_eq!(successor(&[0, 0xFF]), Some(vec![1, 0]));
        assert_eq!(successor(&[0xFF, 0xFF]), None);
    }
}

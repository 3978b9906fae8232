//! Dolphin's remote bytes (digest §2): internal entries and headers as explicit little-endian
//! words, regular nodes allocated at full capacity, special nodes sized by the leaf geometry,
//! and B+tree leaves with separate key and value arrays and a Spear lock word.
//!
//! **Internal entry** (digest §2.2, the artifact's bit fields), bit 0 = least significant:
//!
//! | bits | child is an internal node | child is a leaf |
//! |---|---|---|
//! | 0–7 | partial key byte | partial key byte (`leaf.min[7]` under a special node) |
//! | 8–11 | memory node | memory node (bits 8–14) |
//! | 12–14 | child's node type | |
//! | 15 | 0 | 1 |
//! | 16–63 | byte offset | byte offset |
//!
//! All zeros is NULL. **Header**: byte 0 depth (1-based key position of the first compressed
//! byte), byte 1 bits 0–2 node type and bits 3–7 the number of compressed bytes (0–6), bytes
//! 2–7 those bytes. A node branches on key position `depth − 1 + len` (0-based); a *special*
//! node branches on the last key byte (position 7) with a floor search.
//!
//! **Node**: `[reverse pointer 8][header 8][entry × capacity]`. Regular nodes are allocated for
//! 256 entries (2064 B, 256-aligned) and start as N16; special nodes are allocated for the type
//! the leaf geometry needs (N16 = 144 B for 65-slot leaves, see [`LeafLayout::special_type`]).
//!
//! **Leaf** (digest §2.4). Logical 8-byte words: `0` reverse pointer, `1` front version (byte
//! 0) and valid byte (byte 1), `2` min, `3` max (exclusive; 0 means 2^64), `4..4+S` keys,
//! `4+S..4+2S` values, `4+2S` the Spear lock, then (front/rear format only) the rear version.
//! Two physical formats place these words:
//! - [`LeafFormat::FrontRear`], the paper's: word `w` at byte `8w`; 65 slots make 1088 B with
//!   the lock at 1072 and the rear version at 1080, the artifact's offsets. What the words hold
//!   differs a little: bounds are little-endian integers with an exclusive `max`, and keys and
//!   values are stored XORed with masks (below).
//! - [`LeafFormat::Versioned`], the hardened variant's (FaRM-style line versions): every 64-byte
//!   line keeps its last word for a version and seven data words, word `w` at
//!   `64·(w / 7) + 8·(w % 7)`. A READ that samples its lines in any order (the default memory
//!   model) is consistent iff every line shows one version. The lock word gets a line of its
//!   own, so that one WRITE covers every data line and never the lock. 65 slots make 1344 B.

use dmkit_rdma::{NodeId, RemoteAddr};

pub const NULL: u64 = 0;
const LEAF_BIT: u64 = 1 << 15;
/// Bytes before the first entry of a node.
pub const NODE_PREFIX: u64 = 16;
/// Most compressed bytes a header holds.
pub const MAX_PARTIALS: usize = 6;
/// Every key is 8 bytes; position 7 is the special nodes' byte.
pub const KEY_BYTES: usize = 8;
pub const SPECIAL_POS: usize = 7;
/// Regular nodes: allocated for 256 entries, created as N16.
pub const REGULAR_BYTES: u64 = NODE_PREFIX + 8 * 256;
pub const REGULAR_ALIGN: u64 = 256;
pub const NEW_NODE_TYPE: u8 = 3;
pub const SPECIAL_ALIGN: u64 = 64;
pub const LEAF_ALIGN: u64 = 64;
/// The largest node type (N256).
pub const MAX_TYPE: u8 = 7;
/// Memory nodes an internal entry can name (4 bits).
pub const MAX_MEMORY_NODES: u16 = 16;

/// Entries of a node of type `t` (1..=7): 4, 8, ..., 256.
pub fn capacity(t: u8) -> usize {
    debug_assert!((1..=MAX_TYPE).contains(&t));
    1 << (t as usize + 1)
}

/// The smallest type holding `n` entries.
pub fn type_for(n: usize) -> u8 {
    (1..=MAX_TYPE).find(|&t| capacity(t) >= n).unwrap_or(MAX_TYPE)
}

/// Bytes a READ of a node of type `t` covers.
pub fn node_read_bytes(t: u8) -> usize {
    NODE_PREFIX as usize + 8 * capacity(t)
}

/// Key byte at position `pos` (0-based, big-endian: position 0 is the most significant).
pub fn kbyte(key: u64, pos: usize) -> u8 {
    (key >> (56 - 8 * pos)) as u8
}

/// The first `len` bytes of `key`, the rest zero.
pub fn prefix_of(key: u64, len: usize) -> u64 {
    if len == 0 { 0 } else { key & (u64::MAX << (64 - 8 * len)) }
}

/// One internal entry word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry(pub u64);

impl Entry {
    pub fn null() -> Entry {
        Entry(NULL)
    }

    pub fn internal(partial: u8, node_type: u8, addr: RemoteAddr) -> Entry {
        debug_assert!(addr.node().0 < MAX_MEMORY_NODES && addr.offset() < 1 << 48);
        Entry(u64::from(partial) | u64::from(addr.node().0) << 8 | u64::from(node_type) << 12 | addr.offset() << 16)
    }

    pub fn leaf(partial: u8, addr: RemoteAddr) -> Entry {
        debug_assert!(addr.node().0 < 128 && addr.offset() < 1 << 48);
        Entry(u64::from(partial) | u64::from(addr.node().0) << 8 | LEAF_BIT | addr.offset() << 16)
    }

    pub fn is_null(self) -> bool {
        self.0 == NULL
    }

    pub fn is_leaf(self) -> bool {
        self.0 & LEAF_BIT != 0
    }

    pub fn partial(self) -> u8 {
        self.0 as u8
    }

    pub fn node_type(self) -> u8 {
        ((self.0 >> 12) & 0x7) as u8
    }

    pub fn with_type(self, t: u8) -> Entry {
        Entry((self.0 & !(0x7 << 12)) | u64::from(t) << 12)
    }

    pub fn with_partial(self, p: u8) -> Entry {
        Entry((self.0 & !0xFF) | u64::from(p))
    }

    pub fn addr(self) -> RemoteAddr {
        let node = if self.is_leaf() { (self.0 >> 8) & 0x7F } else { (self.0 >> 8) & 0xF };
        RemoteAddr::host(NodeId(node as u16), self.0 >> 16)
    }
}

/// One node header word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header(pub u64);

impl Header {
    pub fn new(depth: usize, node_type: u8, partials: &[u8]) -> Header {
        assert!((1..=KEY_BYTES).contains(&depth) && partials.len() <= MAX_PARTIALS);
        let mut w = depth as u64 | u64::from(node_type) << 8 | (partials.len() as u64) << 11;
        for (i, &p) in partials.iter().enumerate() {
            w |= u64::from(p) << (16 + 8 * i);
        }
        Header(w)
    }

    pub fn depth(self) -> usize {
        (self.0 & 0xFF) as usize
    }

    pub fn node_type(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }

    pub fn len(self) -> usize {
        ((self.0 >> 11) & 0x1F) as usize
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    pub fn partial(self, i: usize) -> u8 {
        (self.0 >> (16 + 8 * i)) as u8
    }

    /// The key position (0-based) of the first compressed byte.
    pub fn first_pos(self) -> usize {
        self.depth() - 1
    }

    /// The key position (0-based) this node's entries branch on.
    pub fn branch_pos(self) -> usize {
        self.first_pos() + self.len()
    }

    /// The compressed byte at key position `pos` (within `first_pos()..branch_pos()`).
    pub fn byte_at(self, pos: usize) -> u8 {
        self.partial(pos - self.first_pos())
    }

    pub fn with_type(self, t: u8) -> Header {
        Header((self.0 & !(0x7 << 8)) | u64::from(t) << 8)
    }

    /// The header with its compressed bytes before key position `pos` dropped (a prefix split
    /// moved them into a new parent); the branch position is unchanged.
    pub fn trimmed_to(self, pos: usize) -> Header {
        if pos <= self.first_pos() {
            return self;
        }
        let rest: Vec<u8> = (pos..self.branch_pos()).map(|p| self.byte_at(p)).collect();
        Header::new(pos + 1, self.node_type(), &rest)
    }

    pub fn is_special(self) -> bool {
        self.branch_pos() == SPECIAL_POS
    }
}

/// A node as read: reverse pointer, header and the entries read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeImage {
    pub rev: u64,
    pub header: Header,
    pub entries: Vec<Entry>,
}

impl NodeImage {
    pub fn decode(bytes: &[u8]) -> NodeImage {
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let (prefix, entries) = bytes.split_at(NODE_PREFIX as usize);
        // Whole words only, without a bounds check each (a load decodes a node for every level
        // it READs: up to 256 entries, 5% of loading Dolphin when each word was indexed).
        let entries = entries.chunks_exact(8).map(|w| Entry(word(w))).collect();
        NodeImage { rev: word(&prefix[..8]), header: Header(word(&prefix[8..16])), entries }
    }

    pub fn encode(&self, total: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.rev.to_le_bytes());
        out.extend_from_slice(&self.header.0.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.0.to_le_bytes());
        }
        out.resize(total, 0);
        out
    }

    /// The entries the header's type covers.
    pub fn live(&self) -> &[Entry] {
        &self.entries[..capacity(self.header.node_type()).min(self.entries.len())]
    }

    /// The index of the entry for byte `b` (exact match) among the live entries.
    pub fn exact(&self, b: u8) -> Option<usize> {
        self.live().iter().position(|e| !e.is_null() && e.partial() == b)
    }

    /// The index of the entry with the largest partial not above `b` (a special node's floor).
    pub fn floor(&self, b: u8) -> Option<usize> {
        self.live()
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_null() && e.partial() <= b)
            .max_by_key(|(_, e)| e.partial())
            .map(|(i, _)| i)
    }
}

/// Where a node's entry `i` lives.
pub fn entry_addr(node: RemoteAddr, i: usize) -> RemoteAddr {
    node.add(NODE_PREFIX + 8 * i as u64)
}

/// Keys are stored in slots XORed with this mask, so that the slot words 0 (EMPTY) and
/// 2^64−1 (TOMBSTONE) stand for two rare keys, not for 0 and 2^64−1 (dense integer keys start
/// at 0; the artifact maps key 0 to 1 instead).
pub const KEY_MASK: u64 = 0x5A5A_5A5A_5A5A_5A5A;
/// Key-slot states (digest §4.4), as keys: EMPTY, a key, or a tombstone (hardened mode only).
/// Their slot words are 0 and 2^64−1; these two keys are reserved.
pub const EMPTY: u64 = KEY_MASK;
pub const TOMBSTONE: u64 = !KEY_MASK;

/// The slot word of a key (and the key of a slot word: the mapping is its own inverse).
pub fn slot_word(key: u64) -> u64 {
    key ^ KEY_MASK
}
/// A value slot that no write has filled yet.
pub const VALUE_NULL: u64 = 0;
/// Values are stored XORed with this mask, so that the NULL word is one (reserved) value and
/// not the common all-zero one.
pub const VALUE_MASK: u64 = 0xA5A5_A5A5_A5A5_A5A5;

/// The stored word of an 8-byte value.
pub fn store_value(value: &[u8]) -> u64 {
    u64::from_be_bytes(value.try_into().expect("8 bytes")) ^ VALUE_MASK
}

pub fn load_value(word: u64) -> Vec<u8> {
    (word ^ VALUE_MASK).to_be_bytes().to_vec()
}

/// How a leaf's words are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafFormat {
    /// The paper's 1088-byte leaf: a front version at byte 8 and a rear version after the lock.
    FrontRear,
    /// A version word in every 64-byte line (the hardened default).
    Versioned,
}

/// The Spear lock's constants (digest §3.3).
pub const SPEAR_SMO: i64 = -1_000_000;
pub const SPEAR_LIMIT: i64 = -100_000;

/// A leaf geometry: slots and format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafLayout {
    pub slots: usize,
    pub format: LeafFormat,
}

const W_REV: usize = 0;
const W_META: usize = 1;
const W_MIN: usize = 2;
const W_MAX: usize = 3;
const W_KEYS: usize = 4;

// A leaf's words in order: reverse pointer, meta, the two bounds, then the keys.
const _: () =
    assert!(W_REV == 0 && W_META == W_REV + 1 && W_MIN == W_META + 1 && W_MAX == W_MIN + 1 && W_KEYS == W_MAX + 1);
// Empty, tombstone and null are three distinct masked words.
const _: () = assert!(EMPTY != TOMBSTONE && EMPTY != NULL && TOMBSTONE != NULL && VALUE_MASK != VALUE_NULL);

impl LeafLayout {
    fn lock_word(&self) -> usize {
        W_KEYS + 2 * self.slots
    }

    /// Logical words of the front/rear format, the lock and the rear version included.
    fn words(&self) -> usize {
        self.lock_word() + 2
    }

    /// Byte offset of logical word `w`. In the versioned format the lock word opens a line of
    /// its own: a line's data and its version must be written by one WRITE, and no WRITE may
    /// cover the lock.
    pub fn phys(&self, w: usize) -> usize {
        match self.format {
            LeafFormat::FrontRear => 8 * w,
            LeafFormat::Versioned if w >= self.lock_word() => 64 * self.lines() + 8 * (w - self.lock_word()),
            LeafFormat::Versioned => 64 * (w / 7) + 8 * (w % 7),
        }
    }

    pub fn bytes(&self) -> usize {
        match self.format {
            LeafFormat::FrontRear => 8 * self.words(),
            LeafFormat::Versioned => 64 * (self.lines() + 1),
        }
    }

    /// Lines that hold data (the versioned format's version words sit at `64·l + 56`; the lock's
    /// line after them has none).
    pub fn lines(&self) -> usize {
        match self.format {
            LeafFormat::FrontRear => self.bytes().div_ceil(64),
            LeafFormat::Versioned => self.lock_word().div_ceil(7),
        }
    }

    pub fn key_off(&self, i: usize) -> u64 {
        self.phys(W_KEYS + i) as u64
    }

    pub fn value_off(&self, i: usize) -> u64 {
        self.phys(W_KEYS + self.slots + i) as u64
    }

    pub fn lock_off(&self) -> u64 {
        self.phys(self.lock_word()) as u64
    }

    pub fn front_off(&self) -> u64 {
        8
    }

    /// The rear version byte (front/rear format).
    pub fn rear_off(&self) -> u64 {
        self.phys(self.lock_word() + 1) as u64
    }

    /// A special node's type: enough entries for every leaf one 7-byte prefix can need. A split
    /// leaves at least `min_piece` keys on each side, so every leaf's range holds at least that
    /// many distinct keys and one prefix (256 keys) has at most `256 / min_piece` leaves.
    pub fn special_type(&self, split: Split) -> u8 {
        let min_piece = split.min_piece(self.slots);
        type_for(256usize.div_ceil(min_piece.max(1)))
    }
}

/// Where a split cuts the sorted items of a full leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The artifact's: keep `⌊n/4⌋·3` in the old leaf (digest §8.3, matches Table II).
    ThreeQuarters,
    /// The paper's: evenly, the larger half to the new leaf.
    Even,
}

impl Split {
    /// Items kept in the old leaf when `n` items are split.
    pub fn keep(self, n: usize) -> usize {
        match self {
            Split::ThreeQuarters => (n / 4 * 3).clamp(1, n - 1),
            Split::Even => (n / 2).clamp(1, n - 1),
        }
    }

    /// The fewest items either side of a split of a full leaf gets (`slots` items: the live
    /// ones of a leaf with one empty slot left, plus the new key).
    pub fn min_piece(self, slots: usize) -> usize {
        let keep = self.keep(slots);
        keep.min(slots - keep)
    }
}

/// A leaf as read or as about to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafImage {
    pub rev: u64,
    pub front: u8,
    pub valid: u8,
    pub min: u64,
    /// Exclusive upper bound; 0 stands for 2^64.
    pub max: u64,
    pub keys: Vec<u64>,
    pub values: Vec<u64>,
    pub lock: i64,
    /// Rear version (front/rear) or every line's version (versioned).
    pub versions: Vec<u64>,
}

impl LeafImage {
    /// A new leaf for the 7-byte prefix of `min`, up to `max` (exclusive, 0 = 2^64).
    pub fn empty(layout: &LeafLayout, rev: RemoteAddr, min: u64, max: u64) -> LeafImage {
        LeafImage {
            rev: rev.raw(),
            front: 0,
            valid: 1,
            min,
            max,
            keys: vec![EMPTY; layout.slots],
            values: vec![VALUE_NULL; layout.slots],
            lock: 0,
            versions: vec![0; Self::version_count(layout)],
        }
    }

    fn version_count(layout: &LeafLayout) -> usize {
        match layout.format {
            LeafFormat::FrontRear => 1,
            LeafFormat::Versioned => layout.lines(),
        }
    }

    pub fn decode(layout: &LeafLayout, bytes: &[u8]) -> LeafImage {
        let word = |w: usize| {
            let at = layout.phys(w);
            u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        let s = layout.slots;
        let meta = word(W_META);
        let versions = match layout.format {
            LeafFormat::FrontRear => vec![word(layout.lock_word() + 1) & 0xFF],
            LeafFormat::Versioned => (0..layout.lines())
                .map(|l| u64::from_le_bytes(bytes[64 * l + 56..64 * l + 64].try_into().expect("8 bytes")))
                .collect(),
        };
        LeafImage {
            rev: word(W_REV),
            front: meta as u8,
            valid: (meta >> 8) as u8,
            min: word(W_MIN),
            max: word(W_MAX),
            keys: (0..s).map(|i| slot_word(word(W_KEYS + i))).collect(),
            values: (0..s).map(|i| word(W_KEYS + s + i)).collect(),
            lock: word(layout.lock_word()) as i64,
            versions,
        }
    }

    /// The leaf's bytes: every logical word at [`LeafLayout::phys`].
    ///
    /// The words before the lock are laid down in order, each after the last (skipping a
    /// line's version word in the versioned format), not placed one by one: a load builds a
    /// leaf for almost every key, and computing each word's place was 14% of loading Dolphin.
    pub fn encode(&self, layout: &LeafLayout) -> Vec<u8> {
        let mut out = vec![0u8; layout.bytes()];
        let s = layout.slots;
        let meta = u64::from(self.front) | u64::from(self.valid) << 8;
        let mut words = Vec::with_capacity(layout.lock_word());
        words.extend_from_slice(&[self.rev, meta, self.min, self.max]);
        words.extend(self.keys[..s].iter().map(|&k| slot_word(k)));
        words.extend_from_slice(&self.values[..s]);
        // A run of data words: the whole leaf (front/rear), or a line's first seven (versioned).
        let (run, per_run) = match layout.format {
            LeafFormat::FrontRear => (out.len(), words.len()),
            LeafFormat::Versioned => (64, 7),
        };
        for (line, ws) in out.chunks_mut(run).zip(words.chunks(per_run)) {
            for (dst, w) in line.chunks_exact_mut(8).zip(ws) {
                dst.copy_from_slice(&w.to_le_bytes());
            }
        }
        let put = |out: &mut Vec<u8>, w: usize, v: u64| {
            let at = layout.phys(w);
            out[at..at + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(&mut out, layout.lock_word(), self.lock as u64);
        match layout.format {
            LeafFormat::FrontRear => put(&mut out, layout.lock_word() + 1, self.versions[0] & 0xFF),
            LeafFormat::Versioned => {
                for (l, v) in self.versions.iter().enumerate() {
                    out[64 * l + 56..64 * l + 64].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        out
    }

    /// Whether the image was read whole between two structure changes: every line's version
    /// equal (versioned), or front equal to rear.
    pub fn consistent(&self, layout: &LeafLayout) -> bool {
        match layout.format {
            LeafFormat::FrontRear => u64::from(self.front) == self.versions[0],
            LeafFormat::Versioned => self.versions.iter().all(|&v| v == self.versions[0]),
        }
    }

    /// The version a structure change moves the leaf to.
    pub fn version(&self) -> u64 {
        self.versions[0]
    }

    pub fn set_version(&mut self, v: u64) {
        for x in &mut self.versions {
            *x = v;
        }
        self.front = v as u8;
    }

    /// Whether `key` lies in `[min, max)`.
    pub fn covers(&self, key: u64) -> bool {
        key >= self.min && (self.max == 0 || key < self.max)
    }

    /// Live items: slots holding a key (not empty, not a tombstone) and a written value.
    pub fn items(&self) -> Vec<(u64, u64)> {
        self.keys
            .iter()
            .zip(&self.values)
            .filter(|&(&k, &v)| k != EMPTY && k != TOMBSTONE && v != VALUE_NULL)
            .map(|(&k, &v)| (k, v))
            .collect()
    }
}

/// The exclusive upper bound of `key`'s 7-byte prefix (0 = 2^64).
pub fn prefix_end(key: u64) -> u64 {
    (key | 0xFF).wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_leaf_is_the_artifacts_1088_bytes() {
        let l = LeafLayout { slots: 65, format: LeafFormat::FrontRear };
        assert_eq!(l.bytes(), 1088);
        assert_eq!((l.key_off(0), l.value_off(0), l.lock_off(), l.rear_off()), (32, 552, 1072, 1080));
        assert_eq!(l.special_type(Split::ThreeQuarters), 3, "N16, 144 bytes, as the artifact");
        assert_eq!(node_read_bytes(3), 144);
    }

    #[test]
    fn versioned_lines_keep_their_last_word() {
        let l = LeafLayout { slots: 65, format: LeafFormat::Versioned };
        assert_eq!((l.lines(), l.bytes(), l.lock_off()), (20, 1344, 1280));
        for w in 0..l.lock_word() {
            assert_ne!(l.phys(w) % 64, 56, "word {w} on a version word");
            assert!(l.phys(w) < l.lock_off() as usize);
        }
        let mut img = LeafImage::empty(&l, RemoteAddr::host(NodeId(1), 4096), 0x100, 0x200);
        img.keys[64] = 0x1ff;
        img.values[64] = store_value(&7u64.to_be_bytes());
        img.set_version(3);
        let back = LeafImage::decode(&l, &img.encode(&l));
        assert_eq!(back, img);
        assert!(back.consistent(&l));
    }

    #[test]
    fn encode_puts_every_word_where_phys_says() {
        for format in [LeafFormat::FrontRear, LeafFormat::Versioned] {
            for slots in [1, 6, 7, 65, 80] {
                let l = LeafLayout { slots, format };
                let mut img = LeafImage::empty(&l, RemoteAddr::host(NodeId(1), 4096), 0x100, 0x200);
                for i in 0..slots {
                    img.keys[i] = 0x100 + i as u64;
                    img.values[i] = 0x1111_0000 + i as u64;
                }
                (img.front, img.valid, img.lock) = (5, 1, -7);
                img.set_version(9);
                let bytes = img.encode(&l);
                assert_eq!(bytes.len(), l.bytes());
                let word = |w: usize| u64::from_le_bytes(bytes[l.phys(w)..l.phys(w) + 8].try_into().unwrap());
                assert_eq!((word(W_REV), word(W_META), word(W_MIN), word(W_MAX)), (img.rev, 9 | 1 << 8, 0x100, 0x200));
                for i in 0..slots {
                    assert_eq!(word(W_KEYS + i), slot_word(img.keys[i]), "{format:?} {slots}: key {i}");
                    assert_eq!(word(W_KEYS + slots + i), img.values[i], "{format:?} {slots}: value {i}");
                }
                assert_eq!(word(l.lock_word()), -7i64 as u64);
                assert_eq!(LeafImage::decode(&l, &bytes), img, "{format:?} {slots}");
            }
        }
    }

    #[test]
    fn entries_and_headers_round_trip() {
        let a = RemoteAddr::host(NodeId(9), 0x1234_5600);
        let e = Entry::internal(0xAB, 5, a);
        assert_eq!((e.partial(), e.node_type(), e.addr(), e.is_leaf()), (0xAB, 5, a, false));
        let l = Entry::leaf(0x10, RemoteAddr::host(NodeId(100), 64));
        assert!(l.is_leaf() && l.addr() == RemoteAddr::host(NodeId(100), 64));
        let h = Header::new(2, 3, &[1, 2, 3, 4, 5]);
        assert_eq!((h.first_pos(), h.branch_pos(), h.is_special(), h.byte_at(4)), (1, 6, false, 4));
        let t = h.trimmed_to(4);
        assert_eq!((t.first_pos(), t.branch_pos(), t.byte_at(4), t.node_type()), (4, 6, 4, 3));
    }

    #[test]
    fn split_pieces() {
        assert_eq!(Split::ThreeQuarters.keep(65), 48);
        assert_eq!(Split::Even.keep(65), 32);
        assert_eq!(Split::ThreeQuarters.min_piece(4), 1);
        assert_eq!(prefix_end(0x1_23), 0x200);
        assert_eq!(prefix_end(u64::MAX - 3), 0);
    }
}

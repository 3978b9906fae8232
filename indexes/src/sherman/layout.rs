//! Byte-exact remote formats of Sherman's B+tree (Sherman digest §2).
//!
//! A node is one allocation of [`Geometry::alloc_bytes`] bytes, 64-byte aligned (so its lines
//! are the NIC's lines). Its *logical* image — what the artifact lays out — is, with `K`-byte
//! keys and `V`-byte values (offsets for `K = V = 8` in brackets, digest §2.3–2.5):
//!
//! ```text
//!  0        8   reserved word (the artifact's CRC / embedded-lock union; always 0 here)
//!  8        1   version: bookend front version (u8), or NV in the low nibble (cache-line mode)
//!  9        8   leftmost child (RemoteAddr; null in leaves)
//! 17        8   right sibling (RemoteAddr; null in the rightmost node of a level)
//! 25        1   level (0 = leaf)
//! 26        2   last_index (i16; internal nodes: index of the last record, -1 empty; leaves: -1)
//! 28        K   lowest fence key (inclusive)
//! 28+K      K   highest fence key (exclusive; all-0xFF = +infinity)
//! H = 28+2K     records:
//!     internal: span x [key K | child 8]                       (61 x 16 at 1 KiB)
//!     leaf:     span x [ver 1 | key K | value V | meta 1]      (54 x 18 at 1 KiB)
//!     ver  = f-version (low nibble; bookend) or NV | EV << 4 (cache-line mode)
//!     meta = r-version (low nibble) | OCCUPIED (bit 4)
//! H+span*rec    1   rear version (bookend mode; unused in cache-line mode)
//! ```
//!
//! Slot occupancy is a bit in the meta byte's unused high nibble, not "value != 0" as in the
//! artifact: the bytes on the wire are the same, and every value (including all-zero) can be
//! stored. Addresses are dmkit [`RemoteAddr`]s, not the artifact's `GlobalAddress` (same 8 bytes,
//! another bit order: digest §2.1 \[R\]).
//!
//! ## The two consistency modes (digest §8 D3)
//!
//! - [`Versioning::Bookend`] (the artifact): a whole-node write bumps the front and rear version
//!   bytes; a slot write bumps the slot's f and r nibbles. A reader accepts a node if front ==
//!   rear and a slot if f == r. This assumes a READ samples lines in ascending order and
//!   overtakes a concurrent WRITE at most once (digest §4.1, B1): under the simulator's default
//!   (lines in any order) a torn node passes the check. Kept for fidelity and as the known bug.
//! - [`Versioning::CacheLine`] (CHIME's fix, digest §4.4): the physical image inserts one version
//!   byte at the start of every 64-byte line after the first, a copy of the version byte of the
//!   object (header or slot) whose payload continues in that line. The reader strips them and
//!   requires every copy to equal its object's byte and every object to carry the node's NV.
//!   Each line is written atomically and carries a version, so any mix of two writes is seen,
//!   whatever the order the lines are sampled in (up to 16 writes of one slot during one READ:
//!   4-bit versions, digest §8 D13).

use crate::common::bytes::{SmallBytes, key_cmp, key_eq};
use dmkit_rdma::RemoteAddr;

/// Offset of the version byte (bookend front version / NV).
pub const VERSION_AT: usize = 8;
const LEFTMOST_AT: usize = 9;
const SIBLING_AT: usize = 17;
const LEVEL_AT: usize = 25;
const LAST_INDEX_AT: usize = 26;
const LOWEST_AT: usize = 28;
/// Bit of a slot's meta byte that marks it occupied.
const OCCUPIED: u8 = 0x10;
/// The line size of the cache-line versions.
pub const LINE: usize = 64;

// The header is laid out field after field as the table above says: the reserved word, then
// each field right after the one before it, with its width. A changed offset that overlaps or
// leaves a hole fails to build.
const _: () = {
    assert!(VERSION_AT == 8, "the reserved word comes first");
    assert!(LEFTMOST_AT == VERSION_AT + 1, "version: 1 byte");
    assert!(SIBLING_AT == LEFTMOST_AT + 8, "leftmost child: 8 bytes");
    assert!(LEVEL_AT == SIBLING_AT + 8, "right sibling: 8 bytes");
    assert!(LAST_INDEX_AT == LEVEL_AT + 1, "level: 1 byte");
    assert!(LOWEST_AT == LAST_INDEX_AT + 2, "last_index: 2 bytes");
    assert!(OCCUPIED & 0x0F == 0, "the meta byte's low nibble is the r-version");
};

/// How readers detect a node or slot read across a concurrent write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versioning {
    /// Front/rear node versions plus f/r slot versions (the artifact; broken, digest B1).
    Bookend,
    /// Per-object versions copied into every 64-byte line (CHIME's encoding).
    CacheLine,
}

/// Sizes of one tree's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub key_bytes: usize,
    pub value_bytes: usize,
    /// Slots of a leaf; it splits when an insert fills the last one.
    pub leaf_span: usize,
    /// Records of an internal node; it splits when an insert fills the last one.
    pub internal_span: usize,
    /// Bytes of every node READ and node WRITE (the artifact reads 1 KiB for both kinds).
    pub node_bytes: usize,
    pub versioning: Versioning,
}

/// A leaf slot, decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    pub occupied: bool,
    pub key: SmallBytes,
    pub value: SmallBytes,
    /// Bookend: the f nibble; cache-line: EV.
    pub version: u8,
    /// Bookend: f != r (the slot was read across a write). Never set in cache-line mode, where
    /// such a read fails the whole node.
    pub torn: bool,
}

/// A node, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Bookend: the front version; cache-line: NV (4 bits).
    pub version: u8,
    pub leftmost: RemoteAddr,
    pub sibling: RemoteAddr,
    pub level: u8,
    pub lowest: Vec<u8>,
    pub highest: Vec<u8>,
    /// Internal nodes: sorted `(separator, child)`; child `i` covers `[key i, key i+1)`.
    /// Separators are kept inline (a cached node routes every write: no pointer per record).
    pub records: Vec<(SmallBytes, RemoteAddr)>,
    /// Leaves: exactly `leaf_span` slots, unsorted.
    pub slots: Vec<Slot>,
}

/// Why an image was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Read across a concurrent write: read it again.
    Torn,
    /// Bytes no writer produces (bad level, record count): a bug or a foreign region.
    Garbage(String),
}

impl Geometry {
    /// Header bytes (`H`): the first record's logical offset.
    pub fn header_bytes(&self) -> usize {
        LOWEST_AT + 2 * self.key_bytes
    }

    pub fn slot_bytes(&self) -> usize {
        self.key_bytes + self.value_bytes + 2
    }

    pub fn record_bytes(&self) -> usize {
        self.key_bytes + 8
    }

    fn leaf_rear(&self) -> usize {
        self.header_bytes() + self.leaf_span * self.slot_bytes()
    }

    fn internal_rear(&self) -> usize {
        self.header_bytes() + self.internal_span * self.record_bytes()
    }

    /// Logical bytes a node uses (the larger kind).
    pub fn logical_bytes(&self) -> usize {
        self.leaf_rear().max(self.internal_rear()) + 1
    }

    /// Physical offset of logical byte `at`.
    pub fn phys(&self, at: usize) -> usize {
        match self.versioning {
            Versioning::Bookend => at,
            Versioning::CacheLine if at < LINE => at,
            Versioning::CacheLine => LINE + (at - LINE) / (LINE - 1) * LINE + 1 + (at - LINE) % (LINE - 1),
        }
    }

    /// Physical bytes of the logical image (what a node must hold at least).
    pub fn physical_bytes(&self) -> usize {
        self.phys(self.logical_bytes() - 1) + 1
    }

    /// The smallest node size for this geometry, rounded up to 8 bytes.
    pub fn min_node_bytes(&self) -> usize {
        self.physical_bytes().div_ceil(8) * 8
    }

    /// Bytes of one node allocation: the node, then the embedded lock word (used only with
    /// embedded locks, digest §5.3).
    pub fn alloc_bytes(&self) -> usize {
        self.node_bytes + 8
    }

    /// Offset of the embedded lock word in a node allocation.
    pub fn embedded_lock_at(&self) -> usize {
        self.node_bytes
    }

    /// Largest number of slots a leaf of `node_bytes` holds (the artifact's 54 at 1 KiB, 8/8).
    pub fn span_for(&self, node_bytes: usize, leaf: bool) -> usize {
        let per = if leaf { self.slot_bytes() } else { self.record_bytes() };
        let mut g = *self;
        let mut span = (node_bytes.saturating_sub(self.header_bytes() + 1)) / per;
        // Cache-line bytes take room too: shrink until the physical image fits.
        while span > 0 {
            if leaf {
                g.leaf_span = span;
                g.internal_span = 0;
            } else {
                g.internal_span = span;
                g.leaf_span = 0;
            }
            if g.physical_bytes() <= node_bytes {
                break;
            }
            span -= 1;
        }
        span
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.key_bytes == 0 || self.key_bytes > 256 {
            return Err(format!("Sherman keys are 1..=256 bytes, not {}", self.key_bytes));
        }
        if self.value_bytes == 0 || self.value_bytes > 4096 {
            return Err(format!("Sherman values are 1..=4096 bytes, not {}", self.value_bytes));
        }
        if self.leaf_span < 2 || self.internal_span < 3 {
            return Err(format!(
                "a leaf needs at least 2 slots and an internal node 3 records (got {} and {})",
                self.leaf_span, self.internal_span
            ));
        }
        if self.internal_span > i16::MAX as usize || self.leaf_span > 4096 {
            return Err("spans above 4096 are not supported".into());
        }
        if self.node_bytes < self.physical_bytes() || self.node_bytes % 8 != 0 {
            return Err(format!(
                "nodes of {} bytes cannot hold this layout (it needs {} bytes, a multiple of 8)",
                self.node_bytes,
                self.min_node_bytes()
            ));
        }
        Ok(())
    }

    /// +infinity: the highest fence of the rightmost node of every level.
    pub fn infinity(&self) -> Vec<u8> {
        vec![0xFF; self.key_bytes]
    }

    /// An empty leaf covering `[lowest, highest)`.
    pub fn empty_leaf(&self, lowest: Vec<u8>, highest: Vec<u8>) -> Node {
        Node {
            version: 1,
            leftmost: RemoteAddr::NULL,
            sibling: RemoteAddr::NULL,
            level: 0,
            lowest,
            highest,
            records: Vec::new(),
            slots: vec![Slot::default(); self.leaf_span],
        }
    }

    /// An empty internal node of `level` covering `[lowest, highest)` (its leftmost child and
    /// records are the caller's to set).
    pub fn empty_internal(&self, level: u8, lowest: Vec<u8>, highest: Vec<u8>) -> Node {
        Node { level, slots: Vec::new(), ..self.empty_leaf(lowest, highest) }
    }

    /// Logical offset of leaf slot `i`.
    pub fn slot_at(&self, i: usize) -> usize {
        self.header_bytes() + i * self.slot_bytes()
    }

    /// The node's logical image.
    fn encode_logical(&self, n: &Node) -> Vec<u8> {
        let mut b = vec![0u8; self.logical_bytes()];
        let nv = self.node_version_byte(n);
        b[VERSION_AT] = nv;
        b[LEFTMOST_AT..LEFTMOST_AT + 8].copy_from_slice(&n.leftmost.raw().to_le_bytes());
        b[SIBLING_AT..SIBLING_AT + 8].copy_from_slice(&n.sibling.raw().to_le_bytes());
        b[LEVEL_AT] = n.level;
        let last: i16 = if n.level == 0 { -1 } else { n.records.len() as i16 - 1 };
        b[LAST_INDEX_AT..LAST_INDEX_AT + 2].copy_from_slice(&last.to_le_bytes());
        let k = self.key_bytes;
        b[LOWEST_AT..LOWEST_AT + k].copy_from_slice(&n.lowest);
        b[LOWEST_AT + k..LOWEST_AT + 2 * k].copy_from_slice(&n.highest);
        let rear = if n.level == 0 {
            for (i, s) in n.slots.iter().enumerate() {
                let at = self.slot_at(i);
                self.encode_slot_into(n, s, &mut b[at..at + self.slot_bytes()]);
            }
            self.leaf_rear()
        } else {
            for (i, (key, child)) in n.records.iter().enumerate() {
                let at = self.header_bytes() + i * self.record_bytes();
                b[at..at + k].copy_from_slice(key);
                b[at + k..at + k + 8].copy_from_slice(&child.raw().to_le_bytes());
            }
            self.internal_rear()
        };
        if self.versioning == Versioning::Bookend {
            b[rear] = n.version;
        }
        b
    }

    fn node_version_byte(&self, n: &Node) -> u8 {
        match self.versioning {
            Versioning::Bookend => n.version,
            Versioning::CacheLine => n.version & 0x0F,
        }
    }

    fn encode_slot_into(&self, n: &Node, s: &Slot, out: &mut [u8]) {
        let k = self.key_bytes;
        let ver = s.version & 0x0F;
        out[0] = match self.versioning {
            Versioning::Bookend => ver,
            Versioning::CacheLine => (n.version & 0x0F) | ver << 4,
        };
        if s.occupied {
            out[1..1 + k].copy_from_slice(&s.key);
            out[1 + k..1 + k + self.value_bytes].copy_from_slice(&s.value);
        }
        out[self.slot_bytes() - 1] = ver | if s.occupied { OCCUPIED } else { 0 };
    }

    /// The version byte every cache-line copy of logical byte `at` must carry: that of the
    /// object `at` belongs to (a leaf slot, or else the header).
    fn object_version(&self, logical: &[u8], level: u8, at: usize) -> u8 {
        self.object_version_of(&|at| logical[at], level, at)
    }

    /// Whether a cache-line image `phys` of a node at `level`, whose logical byte `at` is
    /// `logical(at)`, has a line or slot version other than its object's (or the node's).
    fn cache_line_torn(&self, phys: &[u8], level: u8, logical: impl Fn(usize) -> u8) -> bool {
        let mut at = LINE;
        let mut p = LINE;
        while at < self.logical_bytes() {
            if phys[p] != self.object_version_of(&logical, level, at) {
                return true;
            }
            (at, p) = (at + LINE - 1, p + LINE);
        }
        let version = logical(VERSION_AT);
        level == 0 && (0..self.leaf_span).any(|i| logical(self.slot_at(i)) & 0x0F != version & 0x0F)
    }

    /// [`Geometry::object_version`] of the logical image whose byte `at` is `logical(at)`.
    fn object_version_of(&self, logical: &impl Fn(usize) -> u8, level: u8, at: usize) -> u8 {
        if level == 0 && at >= self.header_bytes() && at < self.leaf_rear() {
            logical(self.slot_at((at - self.header_bytes()) / self.slot_bytes()))
        } else {
            logical(VERSION_AT)
        }
    }

    /// The full physical image (`node_bytes`) of a node.
    pub fn encode(&self, n: &Node) -> Vec<u8> {
        let logical = self.encode_logical(n);
        let mut out = vec![0u8; self.node_bytes];
        match self.versioning {
            Versioning::Bookend => out[..logical.len()].copy_from_slice(&logical),
            Versioning::CacheLine => {
                // The first line holds 64 payload bytes, every later one a version byte and 63.
                let first = logical.len().min(LINE);
                out[..first].copy_from_slice(&logical[..first]);
                let (mut at, mut p) = (first, LINE);
                while at < logical.len() {
                    let take = (LINE - 1).min(logical.len() - at);
                    out[p] = self.object_version(&logical, n.level, at);
                    out[p + 1..p + 1 + take].copy_from_slice(&logical[at..at + take]);
                    (at, p) = (at + take, p + LINE);
                }
            }
        }
        out
    }

    /// The physical byte range a write of logical range `[from, to)` must cover: in cache-line
    /// mode, the line-version bytes inside it, and the one before it when `from` starts a line.
    pub fn phys_range(&self, from: usize, to: usize) -> (usize, usize) {
        let mut start = self.phys(from);
        if self.versioning == Versioning::CacheLine && start % LINE == 1 && start > LINE {
            start -= 1;
        }
        (start, self.phys(to - 1) + 1)
    }

    /// The physical bytes of leaf slot `i` as they are in `image` (an [`Geometry::encode`]
    /// output): what a slot write-back WRITEs, at the returned physical offset.
    pub fn slot_write(&self, image: &[u8], i: usize) -> (usize, Vec<u8>) {
        let at = self.slot_at(i);
        let (from, to) = self.phys_range(at, at + self.slot_bytes());
        (from, image[from..to].to_vec())
    }

    /// What [`Geometry::slot_write`] gives for leaf slot `i` of `self.encode(n)`, without
    /// encoding the whole node: a write-back changes one slot (a fifth of a bulk load went to
    /// encoding every slot to write one).
    pub fn slot_write_of(&self, n: &Node, i: usize) -> (usize, Vec<u8>) {
        debug_assert_eq!(n.level, 0, "slots are a leaf's");
        let mut slot = vec![0u8; self.slot_bytes()];
        self.encode_slot_into(n, &n.slots[i], &mut slot);
        self.slot_write_bytes(i, &slot)
    }

    /// Where slot `i`'s logical bytes `slot` go in the physical image, and the bytes to write
    /// there: the slot itself (bookend), or the slot spread over its lines (cache-line), where
    /// every byte of the range that holds no slot byte is a line-version byte and carries the
    /// slot's version (its first byte).
    fn slot_write_bytes(&self, i: usize, slot: &[u8]) -> (usize, Vec<u8>) {
        let at = self.slot_at(i);
        let (from, to) = self.phys_range(at, at + slot.len());
        let bytes = match self.versioning {
            Versioning::Bookend => slot.to_vec(),
            Versioning::CacheLine => {
                let mut out = vec![slot[0]; to - from];
                for (d, &b) in slot.iter().enumerate() {
                    out[self.phys(at + d) - from] = b;
                }
                out
            }
        };
        (from, bytes)
    }

    /// Decodes a physical image. Bookend mode rejects a node whose front and rear differ and
    /// marks slots whose f and r differ; cache-line mode rejects any inconsistency.
    pub fn decode(&self, phys: &[u8]) -> Result<Node, Reject> {
        self.decode_with(phys, true)
    }

    /// Decodes, checking versions only if `check` (the `no-version-check` planted bug decodes
    /// whatever was read).
    pub fn decode_with(&self, phys: &[u8], check: bool) -> Result<Node, Reject> {
        Ok(self.view_with(phys, check)?.node())
    }

    /// Checks a physical image as [`Geometry::decode_with`] does (the same rejections, in the
    /// same order) without decoding it: its header, fences, records and slots are read in place
    /// from the returned view. A traversal that only compares a key with the fences (to move
    /// right) or routes through one record needs no decoded [`Node`], and no copy of the image.
    pub fn view_with<'a>(&self, phys: &'a [u8], check: bool) -> Result<View<'a>, Reject> {
        if phys.len() < self.physical_bytes() {
            return Err(Reject::Garbage(format!("image of {} bytes is short", phys.len())));
        }
        let v = View { g: *self, phys, check };
        let level = v.byte(LEVEL_AT);
        let version = v.byte(VERSION_AT);
        match self.versioning {
            _ if !check => {}
            Versioning::Bookend => {
                let rear = if level == 0 { self.leaf_rear() } else { self.internal_rear() };
                if phys[rear] != version {
                    return Err(Reject::Torn);
                }
            }
            Versioning::CacheLine => {
                // Every line-version byte equals the version of the object it continues: line
                // k >= 1 starts with it, followed by logical bytes from 64 + 63 (k - 1). A
                // leaf's objects are its slots: look them up in its gathered logical image.
                let torn = if level == 0 {
                    v.with_image(|b| self.cache_line_torn(phys, level, |at| b[at]))
                } else {
                    self.cache_line_torn(phys, level, |at| v.byte(at))
                };
                if torn {
                    return Err(Reject::Torn);
                }
            }
        }
        if level != 0 {
            let last = v.last_index();
            if last < 0 || last as usize >= self.internal_span {
                // A torn bookend image (or an unchecked one) can show any count: read again; a
                // checked cache-line image is consistent, so it is garbage.
                return Err(match self.versioning {
                    Versioning::CacheLine if check => Reject::Garbage(format!("internal node with last_index {last}")),
                    _ => Reject::Torn,
                });
            }
        }
        Ok(v)
    }

    /// The view of an image [`Geometry::view_with`] accepted before with the same `check`,
    /// without checking it again.
    pub fn view_accepted<'a>(&self, phys: &'a [u8], check: bool) -> View<'a> {
        debug_assert!(self.view_with(phys, check).is_ok(), "an accepted image");
        View { g: *self, phys, check }
    }
}

/// Bytes of a logical range gathered on the stack (longer ranges go to the heap).
const GATHER: usize = 128;

/// A physical node image that passed [`Geometry::view_with`]'s checks, read in place: the
/// fields of [`Node`] without decoding (or allocating) the rest.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    g: Geometry,
    phys: &'a [u8],
    /// Whether versions were checked (a bookend slot is marked torn only then).
    check: bool,
}

impl<'a> View<'a> {
    /// Logical byte `at`.
    fn byte(&self, at: usize) -> u8 {
        self.phys[self.g.phys(at)]
    }

    /// `f` of the logical bytes `[at, at + len)`: in place when they are contiguous in the
    /// physical image (always in bookend mode; in cache-line mode unless they cross a line).
    fn with_logical<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        if len == 0 {
            return f(&[]);
        }
        let (from, last) = (self.g.phys(at), self.g.phys(at + len - 1));
        if last - from == len - 1 {
            return f(&self.phys[from..=last]);
        }
        self.gather::<GATHER, R>(at, len, f)
    }

    /// Cache-line mode: `f` of the logical bytes `[at, at + len)` copied line by line without
    /// their line-version bytes (a line holds 63 payload bytes after the first), on the stack
    /// when they fit in `STACK` bytes.
    fn gather<const STACK: usize, R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut stack = [0u8; STACK];
        let mut heap = Vec::new();
        let out: &mut [u8] = if len <= STACK {
            &mut stack[..len]
        } else {
            heap.resize(len, 0);
            &mut heap
        };
        let mut done = 0;
        while done < len {
            let p = self.g.phys(at + done);
            let in_line = LINE - p % LINE;
            let take = in_line.min(len - done);
            out[done..done + take].copy_from_slice(&self.phys[p..p + take]);
            done += take;
        }
        f(out)
    }

    fn u64_at(&self, at: usize) -> u64 {
        self.with_logical(at, 8, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn last_index(&self) -> i16 {
        i16::from_le_bytes([self.byte(LAST_INDEX_AT), self.byte(LAST_INDEX_AT + 1)])
    }

    pub fn level(&self) -> u8 {
        self.byte(LEVEL_AT)
    }

    pub fn is_leaf(&self) -> bool {
        self.level() == 0
    }

    pub fn sibling(&self) -> RemoteAddr {
        RemoteAddr::from_raw(self.u64_at(SIBLING_AT))
    }

    /// Records of an internal node, slots of a leaf (what a search charges CPU for).
    pub fn entries(&self) -> usize {
        if self.is_leaf() { self.g.leaf_span } else { self.last_index() as usize + 1 }
    }

    /// `f` of the lowest fence.
    pub fn with_lowest<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        self.with_logical(LOWEST_AT, self.g.key_bytes, f)
    }

    /// `f` of the highest fence.
    pub fn with_highest<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        self.with_logical(LOWEST_AT + self.g.key_bytes, self.g.key_bytes, f)
    }

    /// `f` of the whole logical image: the physical one in bookend mode, else gathered without
    /// its line-version bytes (on the stack for nodes up to [`LOGICAL_ON_STACK`] bytes).
    pub fn with_image<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let n = self.g.logical_bytes();
        if self.g.versioning == Versioning::Bookend {
            return f(&self.phys[..n]);
        }
        self.gather::<LOGICAL_ON_STACK, R>(0, n, f)
    }

    /// The decoded node.
    pub fn node(&self) -> Node {
        self.with_image(|b| self.node_of(b))
    }

    /// The decoded node, from its logical image `b`.
    fn node_of(&self, b: &[u8]) -> Node {
        let g = &self.g;
        let k = g.key_bytes;
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let level = b[LEVEL_AT];
        let version = b[VERSION_AT];
        let mut node = Node {
            version: if g.versioning == Versioning::CacheLine { version & 0x0F } else { version },
            leftmost: RemoteAddr::from_raw(u64_at(LEFTMOST_AT)),
            sibling: RemoteAddr::from_raw(u64_at(SIBLING_AT)),
            level,
            lowest: b[LOWEST_AT..LOWEST_AT + k].to_vec(),
            highest: b[LOWEST_AT + k..LOWEST_AT + 2 * k].to_vec(),
            records: Vec::new(),
            slots: Vec::new(),
        };
        if level == 0 {
            let sb = g.slot_bytes();
            node.slots.reserve_exact(g.leaf_span);
            for s in b[g.header_bytes()..g.leaf_rear()].chunks_exact(sb) {
                let meta = s[sb - 1];
                let f = match g.versioning {
                    Versioning::Bookend => s[0] & 0x0F,
                    Versioning::CacheLine => s[0] >> 4,
                };
                let occupied = meta & OCCUPIED != 0;
                node.slots.push(Slot {
                    occupied,
                    key: if occupied { SmallBytes::from(&s[1..1 + k]) } else { SmallBytes::new() },
                    value: if occupied {
                        SmallBytes::from(&s[1 + k..1 + k + g.value_bytes])
                    } else {
                        SmallBytes::new()
                    },
                    version: f,
                    torn: self.check && g.versioning == Versioning::Bookend && f != meta & 0x0F,
                });
            }
        } else {
            let last = i16::from_le_bytes([b[LAST_INDEX_AT], b[LAST_INDEX_AT + 1]]) as usize;
            let rb = g.record_bytes();
            let records = &b[g.header_bytes()..g.header_bytes() + (last + 1) * rb];
            node.records = records
                .chunks_exact(rb)
                .map(|r| {
                    (
                        SmallBytes::from(&r[..k]),
                        RemoteAddr::from_raw(u64::from_le_bytes(r[k..k + 8].try_into().expect("8 bytes"))),
                    )
                })
                .collect();
        }
        node
    }
}

/// A leaf read under its lock, kept as its logical image: a write finds its key and changes one
/// slot in place, and only a split decodes the whole [`Node`] (decoding every slot of the leaf
/// for every insert was most of a bulk load).
///
/// Every slot it changes is re-encoded whole, as [`Geometry::encode`] would encode the slot of
/// the decoded node after the same change: so [`LeafImage::slot_write`] and
/// [`LeafImage::node`] are what [`Geometry::slot_write_of`] and the decoded node give.
#[derive(Debug)]
pub struct LeafImage {
    g: Geometry,
    /// The logical image (`logical_bytes` long).
    b: Vec<u8>,
    /// Whether versions were checked when it was read.
    check: bool,
    /// Occupied slots.
    live: usize,
}

impl LeafImage {
    /// The leaf `view` shows, its logical image gathered into `buf` (a buffer to use again).
    pub fn new(view: &View<'_>, mut buf: Vec<u8>) -> LeafImage {
        debug_assert!(view.is_leaf());
        buf.clear();
        view.with_image(|b| buf.extend_from_slice(b));
        let mut leaf = LeafImage { g: view.g, b: buf, check: view.check, live: 0 };
        leaf.live = (0..leaf.g.leaf_span).filter(|&i| leaf.occupied(i)).count();
        leaf
    }

    /// The image's buffer, to use again.
    pub fn into_buf(self) -> Vec<u8> {
        self.b
    }

    fn slot(&self, i: usize) -> &[u8] {
        let at = self.g.slot_at(i);
        &self.b[at..at + self.g.slot_bytes()]
    }

    fn occupied(&self, i: usize) -> bool {
        self.slot(i)[self.g.slot_bytes() - 1] & OCCUPIED != 0
    }

    /// The slot's version as decoded ([`Slot::version`]).
    fn version(&self, i: usize) -> u8 {
        let s0 = self.slot(i)[0];
        match self.g.versioning {
            Versioning::Bookend => s0 & 0x0F,
            Versioning::CacheLine => s0 >> 4,
        }
    }

    pub fn lowest(&self) -> &[u8] {
        &self.b[LOWEST_AT..LOWEST_AT + self.g.key_bytes]
    }

    pub fn highest(&self) -> &[u8] {
        let k = self.g.key_bytes;
        &self.b[LOWEST_AT + k..LOWEST_AT + 2 * k]
    }

    pub fn sibling(&self) -> RemoteAddr {
        RemoteAddr::from_raw(u64::from_le_bytes(self.b[SIBLING_AT..SIBLING_AT + 8].try_into().expect("8 bytes")))
    }

    /// [`Node::covers`].
    pub fn covers(&self, key: &[u8]) -> bool {
        self.lowest() <= key && key < self.highest()
    }

    /// Whether a slot was read torn ([`Slot::torn`] of any slot).
    pub fn any_torn(&self) -> bool {
        self.check
            && self.g.versioning == Versioning::Bookend
            && (0..self.g.leaf_span).any(|i| self.version(i) != self.slot(i)[self.g.slot_bytes() - 1] & 0x0F)
    }

    /// The first occupied slot holding `key`.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let k = self.g.key_bytes;
        (0..self.g.leaf_span).find(|&i| self.occupied(i) && key_eq(&self.slot(i)[1..1 + k], key))
    }

    /// The value of occupied slot `i`.
    pub fn value(&self, i: usize) -> &[u8] {
        let k = self.g.key_bytes;
        &self.slot(i)[1 + k..1 + k + self.g.value_bytes]
    }

    /// The first free slot.
    pub fn free(&self) -> Option<usize> {
        (0..self.g.leaf_span).find(|&i| !self.occupied(i))
    }

    /// [`Node::live`].
    pub fn live(&self) -> usize {
        self.live
    }

    /// Sets slot `i` to `key` → `value` (or empties it: `None`) and bumps its version, as
    /// changing the decoded slot, [`Slot::bump`] and encoding it do. A key or value of the
    /// wrong size panics, as encoding it does.
    pub fn set(&mut self, i: usize, entry: Option<(&[u8], &[u8])>) {
        let g = self.g;
        let (k, v) = (g.key_bytes, g.value_bytes);
        let ver = (self.version(i) + 1) & 0x0F;
        self.live = self.live + entry.is_some() as usize - self.occupied(i) as usize;
        let nv = self.b[VERSION_AT] & 0x0F;
        let at = g.slot_at(i);
        let s = &mut self.b[at..at + g.slot_bytes()];
        s[0] = match g.versioning {
            Versioning::Bookend => ver,
            Versioning::CacheLine => nv | ver << 4,
        };
        match entry {
            Some((key, value)) => {
                s[1..1 + k].copy_from_slice(key);
                s[1 + k..1 + k + v].copy_from_slice(value);
            }
            None => s[1..1 + k + v].fill(0),
        }
        s[k + v + 1] = ver | if entry.is_some() { OCCUPIED } else { 0 };
    }

    /// [`Geometry::slot_write_of`] of slot `i`.
    pub fn slot_write(&self, i: usize) -> (usize, Vec<u8>) {
        self.g.slot_write_bytes(i, self.slot(i))
    }

    /// The decoded node.
    pub fn node(&self) -> Node {
        View { g: self.g, phys: &[], check: self.check }.node_of(&self.b)
    }
}

/// Logical images up to this size are gathered on the stack.
const LOGICAL_ON_STACK: usize = 2048;

impl Node {
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// Whether `key` lies in `[lowest, highest)`.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.lowest.as_slice() <= key && key < self.highest.as_slice()
    }

    /// The child of an internal node that covers `key` (which the node must cover).
    pub fn route(&self, key: &[u8]) -> RemoteAddr {
        match self.records.iter().rposition(|(k, _)| key_cmp(k, key).is_le()) {
            Some(i) => self.records[i].1,
            None => self.leftmost,
        }
    }

    /// Live slots.
    pub fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.occupied).count()
    }

    /// Bumps the node-level version for a whole-node write (u8 in bookend mode, 4 bits in
    /// cache-line mode; `encode` masks).
    pub fn bump(&mut self, versioning: Versioning) {
        self.version = match versioning {
            Versioning::Bookend => self.version.wrapping_add(1),
            Versioning::CacheLine => (self.version + 1) & 0x0F,
        };
    }
}

impl Slot {
    /// Bumps the slot version (4 bits) for a slot write.
    pub fn bump(&mut self) {
        self.version = (self.version + 1) & 0x0F;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    fn artifact() -> Geometry {
        Geometry {
            key_bytes: 8,
            value_bytes: 8,
            leaf_span: 54,
            internal_span: 61,
            node_bytes: 1024,
            versioning: Versioning::Bookend,
        }
    }

    #[test]
    fn artifact_sizes() {
        let g = artifact();
        // Digest §2.4-2.5: internal 1021 B used, leaf 1017 B, slot 18 B, header at 9..44.
        assert_eq!(g.header_bytes(), 44);
        assert_eq!(g.slot_bytes(), 18);
        assert_eq!(g.internal_rear() + 1, 1021);
        assert_eq!(g.leaf_rear() + 1, 1017);
        assert_eq!(g.span_for(1024, true), 54);
        assert_eq!(g.span_for(1024, false), 61);
        g.validate().unwrap();
    }

    fn leaf(g: &Geometry) -> Node {
        let mut n = g.empty_leaf(vec![0; 8], g.infinity());
        n.sibling = RemoteAddr::host(NodeId(1), 4096);
        for i in [0, 3, 7] {
            n.slots[i] = Slot {
                occupied: true,
                key: (i as u64 * 10).to_be_bytes().to_vec().into(),
                value: vec![i as u8; g.value_bytes].into(),
                version: 3,
                torn: false,
            };
        }
        n
    }

    #[test]
    fn round_trips_in_both_modes() {
        for versioning in [Versioning::Bookend, Versioning::CacheLine] {
            let mut g = Geometry { versioning, ..artifact() };
            g.leaf_span = g.span_for(1024, true);
            g.internal_span = g.span_for(1024, false);
            g.validate().unwrap();
            let n = leaf(&g);
            assert_eq!(g.decode(&g.encode(&n)).unwrap(), n);
            let mut i = g.empty_leaf(vec![0; 8], g.infinity());
            i.level = 2;
            i.slots.clear();
            i.leftmost = RemoteAddr::host(NodeId(0), 64);
            i.records = (1..g.internal_span as u64)
                .map(|k| (k.to_be_bytes().to_vec().into(), RemoteAddr::host(NodeId(0), k * 64)))
                .collect();
            assert_eq!(g.decode(&g.encode(&i)).unwrap(), i);
        }
    }

    #[test]
    fn cache_line_mode_sees_any_mix_of_two_images() {
        let mut g = Geometry { versioning: Versioning::CacheLine, ..artifact() };
        g.leaf_span = g.span_for(1024, true);
        g.internal_span = g.span_for(1024, false);
        g.validate().unwrap();
        let old = leaf(&g);
        // A whole-node rewrite (new NV) and a slot rewrite (new EV of slot 3).
        let mut split = old.clone();
        split.bump(g.versioning);
        split.slots[7] = Slot::default();
        let mut slot = old.clone();
        slot.slots[3].value = vec![0xAB; 8].into();
        slot.slots[3].bump();
        let a = g.encode(&old);
        for new in [g.encode(&split), g.encode(&slot)] {
            let lines = a.len() / LINE;
            for mask in 1..(1u32 << lines) - 1 {
                let mixed: Vec<u8> =
                    (0..a.len()).map(|p| if mask >> (p / LINE) & 1 == 1 { new[p] } else { a[p] }).collect();
                if mixed != a && mixed != new {
                    assert_eq!(g.decode(&mixed), Err(Reject::Torn), "mask {mask:#x}");
                }
            }
        }
    }

    #[test]
    fn bookend_mode_misses_a_torn_middle() {
        // The known bug (digest B1): front and rear from the new image, one middle line from
        // the old one, passes the check. Key 0 moved from slot 0 (line 0, read new: empty) to
        // slot 9 (logical 206..224, line 3, read old: empty).
        let g = artifact();
        let old = leaf(&g);
        let mut new = old.clone();
        new.bump(g.versioning);
        new.slots.swap(0, 9);
        let (a, b) = (g.encode(&old), g.encode(&new));
        let mut mixed = b.clone();
        mixed[192..256].copy_from_slice(&a[192..256]);
        let n = g.decode(&mixed).expect("bookend check passes");
        assert!(n.slots.iter().all(|s| !s.occupied || *s.key != 0u64.to_be_bytes()), "key 0 vanished");
    }

    #[test]
    fn a_slot_encoded_alone_is_the_slot_of_the_encoded_node() {
        for versioning in [Versioning::Bookend, Versioning::CacheLine] {
            let mut g = Geometry { versioning, ..artifact() };
            g.leaf_span = g.span_for(1024, true);
            g.internal_span = g.span_for(1024, false);
            g.validate().unwrap();
            let mut n = leaf(&g);
            n.version = 9;
            for (i, s) in n.slots.iter_mut().enumerate() {
                s.version = (i % 16) as u8;
                if i % 3 != 0 {
                    s.occupied = true;
                    s.key = (i as u64 + 1).to_be_bytes().to_vec().into();
                    s.value = vec![i as u8; g.value_bytes].into();
                }
            }
            let image = g.encode(&n);
            for i in 0..g.leaf_span {
                assert_eq!(g.slot_write_of(&n, i), g.slot_write(&image, i), "{versioning:?} slot {i}");
            }
        }
    }

    #[test]
    fn slot_write_covers_its_line_versions() {
        let mut g = Geometry { versioning: Versioning::CacheLine, ..artifact() };
        g.leaf_span = g.span_for(1024, true);
        g.internal_span = g.span_for(1024, false);
        g.validate().unwrap();
        let old = leaf(&g);
        for i in 0..g.leaf_span {
            let mut new = old.clone();
            new.slots[i] =
                Slot { occupied: true, key: vec![1; 8].into(), value: vec![2; 8].into(), version: 5, torn: false };
            let (at, bytes) = g.slot_write(&g.encode(&new), i);
            assert_eq!(g.slot_write_of(&new, i), (at, bytes.clone()), "slot {i}: the direct encoding");
            let mut image = g.encode(&old);
            image[at..at + bytes.len()].copy_from_slice(&bytes);
            assert_eq!(g.decode(&image).unwrap(), new, "slot {i}");
        }
    }
}

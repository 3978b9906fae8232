//! SMART's remote bytes (digest §2): 8-byte slots and headers as explicit little-endian words,
//! internal nodes allocated at full capacity, and leaves with a rear lock word.
//!
//! **Slot** (digest §2.2, the artifact's bit positions), bit 0 = least significant:
//!
//! | bits | child is an internal node | child is a leaf | tombstone |
//! |---|---|---|---|
//! | 0–7 | partial key | partial key | partial key |
//! | 8 | 0 | leaf length in 8-B units, bits 0–6 over 8–14 | 1 |
//! | 10–14 | child's node type | | 0 |
//! | 15 | 0 | 1 | 0 |
//! | 16–23 | memory node | memory node | 0 |
//! | 24–63 | offset / 64 | offset / 64 | 0 |
//!
//! All zeros is NULL. The tombstone (a deleted leaf's slot, digest H5) keeps its partial, so a
//! slot's partial never changes once set and at most one slot of a node carries a partial (I4).
//! Pointers are 64-byte aligned (digest §8.8: 2^46 bytes per memory node, at most 256 of them).
//!
//! **Header** (digest §2.3): bits 0–7 depth − 1 (so 256-byte keys fit), 8–12 node type, 13–15
//! number of compressed partials (0–6), 16–63 the partials. `depth` is the key position (1-based)
//! of the first header partial; a node's slots discriminate on the byte at `depth + len`.
//!
//! **Internal node**: `[reverse pointer 8][header 8][slot × capacity(largest type)]`. Only the
//! current type's prefix is read; a type switch is in place (the slots behind are zero).
//!
//! **Leaf** (digest §2.5 with the \[R\] fixes H4 and H9): `[reverse pointer 8][valid 1][checksum
//! 8][key K][value V][pad to 8][lock word 8]`; the lock word holds bit 0 = lock, bit 1 = dead.
//! The checksum is CRC-64/WE over key‖value. The paper's leaf puts a 1-byte lock right after the
//! value; ours gives the lock its own aligned word (0–7 bytes of padding) so that a plain CAS
//! takes it, no value byte shares a word with an atomic, and the dead bit has a home.

use crate::common::checksum::crc64;
use dmkit_rdma::{NodeId, RemoteAddr};

/// A slot or header word's node type 0: a deleted internal node (never reachable in our v1).
pub const DELETED: u8 = 0;
pub const NULL: u64 = 0;
pub const TYPE_MASK: u64 = 0x1F << 8;
const LEAF_BIT: u64 = 1 << 15;
const TOMB_BIT: u64 = 1 << 8;
/// The granularity of a slot's pointer, and the default allocation alignment of nodes and
/// leaves (`SmartOptions::alloc_align`, which may be any larger power of two).
pub const NODE_ALIGN: u64 = 64;
/// Bytes before the first slot of an internal node.
pub const NODE_PREFIX: u64 = 16;
pub const MAX_PARTIALS: usize = 6;
pub const LOCK_BIT: u64 = 1;
pub const DEAD_BIT: u64 = 2;
/// The most node types a header's five type bits can name (NODE_DELETED is type 0).
pub const MAX_TYPES: usize = (TYPE_MASK >> 8) as usize;

// The slot and header fields of the tables above do not overlap, and the 48 pointer bits start
// above the flags (a changed mask or bit that collides fails to build).
const _: () = {
    assert!(TOMB_BIT == 1 << 8 && LEAF_BIT == 1 << 15, "slot flags: bits 8 and 15");
    assert!(TOMB_BIT & 0xFF == 0 && LEAF_BIT & 0xFF == 0, "slot flags above the partial key");
    assert!((TOMB_BIT | LEAF_BIT) >> 16 == 0, "slot flags below the memory node and offset");
    assert!(TYPE_MASK & 0xFF == 0, "a header's node type is above its depth byte");
    assert!(TYPE_MASK & (0x7 << 13) == 0, "and below its count of partials");
    assert!(MAX_PARTIALS * 8 == 48 && MAX_PARTIALS < 8, "six partials in bits 16-63, counted in three bits");
    assert!(NODE_PREFIX == 8 + 8, "an internal node: reverse pointer, header, slots");
    assert!(LOCK_BIT & DEAD_BIT == 0, "a leaf's lock and dead bits are distinct");
};

/// Packs a 64-byte-aligned host address into the slot's 48 pointer bits.
pub fn pack_ptr(addr: RemoteAddr) -> u64 {
    debug_assert!(addr.offset() % NODE_ALIGN == 0 && addr.node().0 < 256);
    (u64::from(addr.node().0) << 16) | ((addr.offset() / NODE_ALIGN) << 24)
}

/// One 8-byte slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(pub u64);

impl Slot {
    pub fn null() -> Slot {
        Slot(NULL)
    }

    pub fn internal(partial: u8, node_type: u8, addr: RemoteAddr) -> Slot {
        Slot(u64::from(partial) | (u64::from(node_type) << 10) | pack_ptr(addr))
    }

    pub fn leaf(partial: u8, leaf_bytes: usize, addr: RemoteAddr) -> Slot {
        let units = leaf_bytes.div_ceil(8);
        let units = if units < 128 { units as u64 } else { 0 };
        Slot(u64::from(partial) | (units << 8) | LEAF_BIT | pack_ptr(addr))
    }

    pub fn tombstone(partial: u8) -> Slot {
        Slot(u64::from(partial) | TOMB_BIT)
    }

    pub fn is_null(self) -> bool {
        self.0 == NULL
    }

    pub fn is_leaf(self) -> bool {
        self.0 & LEAF_BIT != 0
    }

    pub fn is_tombstone(self) -> bool {
        !self.is_leaf() && self.0 & TOMB_BIT != 0
    }

    /// NULL or a tombstone: no child.
    pub fn is_empty(self) -> bool {
        self.is_null() || self.is_tombstone()
    }

    pub fn is_internal(self) -> bool {
        !self.is_empty() && !self.is_leaf()
    }

    pub fn partial(self) -> u8 {
        self.0 as u8
    }

    /// The child internal node's type as this slot records it.
    pub fn node_type(self) -> u8 {
        ((self.0 >> 10) & 0x1F) as u8
    }

    pub fn with_type(self, node_type: u8) -> Slot {
        Slot((self.0 & !(0x1F << 10)) | (u64::from(node_type) << 10))
    }

    pub fn with_partial(self, partial: u8) -> Slot {
        Slot((self.0 & !0xFF) | u64::from(partial))
    }

    pub fn ptr(self) -> RemoteAddr {
        RemoteAddr::host(NodeId(((self.0 >> 16) & 0xFF) as u16), (self.0 >> 24) * NODE_ALIGN)
    }
}

/// One 8-byte internal-node header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header(pub u64);

impl Header {
    pub fn new(depth: usize, node_type: u8, partials: &[u8]) -> Header {
        assert!((1..=256).contains(&depth) && partials.len() <= MAX_PARTIALS);
        let mut w = (depth as u64 - 1) | (u64::from(node_type) << 8) | ((partials.len() as u64) << 13);
        for (i, &p) in partials.iter().enumerate() {
            w |= u64::from(p) << (16 + 8 * i);
        }
        Header(w)
    }

    pub fn depth(self) -> usize {
        (self.0 & 0xFF) as usize + 1
    }

    pub fn node_type(self) -> u8 {
        ((self.0 >> 8) & 0x1F) as u8
    }

    pub fn len(self) -> usize {
        ((self.0 >> 13) & 0x7) as usize
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    pub fn partial(self, i: usize) -> u8 {
        (self.0 >> (16 + 8 * i)) as u8
    }

    pub fn partials(self) -> Vec<u8> {
        (0..self.len()).map(|i| self.partial(i)).collect()
    }

    /// The key position its slots discriminate on.
    pub fn slot_depth(self) -> usize {
        self.depth() + self.len()
    }

    pub fn with_type(self, node_type: u8) -> Header {
        Header((self.0 & !TYPE_MASK) | (u64::from(node_type) << 8))
    }

    /// The header after a header split at partial `i` moved partials `..=i` into a new parent
    /// (digest §3.3 TrimHeader): depth advances by `i + 1`, `depth + len` is unchanged.
    pub fn trimmed(self, i: usize) -> Header {
        let rest: Vec<u8> = (i + 1..self.len()).map(|j| self.partial(j)).collect();
        Header::new(self.depth() + i + 1, self.node_type(), &rest)
    }
}

/// `kb(key, d)`: the key byte at depth `d` (1-based; depth 0 is the root slot's virtual 0).
pub fn kb(key: &[u8], d: usize) -> u8 {
    if d == 0 { 0 } else { key.get(d - 1).copied().unwrap_or(0) }
}

/// The first `cap` slots of an internal node's image (its bytes from the node's start: the
/// reverse pointer, the header, then the slots).
pub fn node_slots(image: &[u8], cap: usize) -> Vec<Slot> {
    (0..cap)
        .map(|i| {
            let at = NODE_PREFIX as usize + 8 * i;
            Slot(u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes")))
        })
        .collect()
}

/// Node types: capacities of types 1..=n (type 0 is DELETED).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTypes {
    capacities: Vec<u16>,
}

impl NodeTypes {
    /// SMART's 7 power-of-two types, 4 to 256 (digest §2.4).
    pub fn smart() -> NodeTypes {
        NodeTypes { capacities: vec![4, 8, 16, 32, 64, 128, 256] }
    }

    /// ART's 4, 16, 48, 256 (digest §2.4, the ART baseline).
    pub fn art() -> NodeTypes {
        NodeTypes { capacities: vec![4, 16, 48, 256] }
    }

    /// `n` types of sizes round(4·64^((i−1)/(n−1))), as Fig. 22(d) sweeps; 1 is NODE_256 only.
    pub fn geometric(n: usize) -> Result<NodeTypes, String> {
        if !(1..=MAX_TYPES).contains(&n) {
            return Err(format!("node types: {n} is not within 1..={MAX_TYPES}"));
        }
        if n == 1 {
            return Ok(NodeTypes { capacities: vec![256] });
        }
        let mut caps: Vec<u16> =
            (1..=n).map(|i| (4.0 * 64f64.powf((i - 1) as f64 / (n - 1) as f64)).round() as u16).collect();
        caps.dedup();
        Ok(NodeTypes { capacities: caps })
    }

    pub fn count(&self) -> u8 {
        self.capacities.len() as u8
    }

    /// Slot capacity of type `t` (0 for DELETED or unknown types).
    pub fn capacity(&self, t: u8) -> usize {
        match t {
            0 => 0,
            t => self.capacities.get(t as usize - 1).map_or(0, |&c| c as usize),
        }
    }

    pub fn smallest(&self) -> u8 {
        1
    }

    pub fn largest(&self) -> u8 {
        self.count()
    }

    /// The smallest type whose capacity exceeds slot index `i`.
    pub fn for_slot_index(&self, i: usize) -> u8 {
        (1..=self.count()).find(|&t| i < self.capacity(t)).unwrap_or(self.count())
    }

    /// Bytes an internal node occupies: full capacity, rounded to the allocation alignment
    /// `align` (a multiple of [`NODE_ALIGN`]: `SmartOptions::alloc_align`).
    pub fn node_alloc_bytes(&self, align: u64) -> u64 {
        (NODE_PREFIX + 8 * self.capacity(self.largest()) as u64).next_multiple_of(align)
    }

    /// Bytes a READ of a node of type `t` fetches.
    pub fn read_bytes(&self, t: u8) -> usize {
        NODE_PREFIX as usize + 8 * self.capacity(t)
    }
}

/// The leaf geometry for K-byte keys and V-byte values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafGeometry {
    pub key_bytes: usize,
    pub value_bytes: usize,
}

/// A decoded leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub rev: u64,
    pub valid: bool,
    pub checksum: u64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub lock_word: u64,
}

impl Leaf {
    pub fn dead(&self) -> bool {
        self.lock_word & DEAD_BIT != 0
    }

    /// The checksum matches key‖value (else the READ overlapped a writer's WRITE).
    pub fn intact(&self) -> bool {
        checksum(&self.key, &self.value) == self.checksum
    }
}

pub const VALID_AT: usize = 8;
pub const CHECKSUM_AT: usize = 9;
pub const KEY_AT: usize = 17;

// A leaf: the reverse pointer, then each field right after the one before it.
const _: () = {
    assert!(VALID_AT == 8, "after the 8-byte reverse pointer");
    assert!(CHECKSUM_AT == VALID_AT + 1, "valid: 1 byte");
    assert!(KEY_AT == CHECKSUM_AT + 8, "checksum: 8 bytes");
};

impl LeafGeometry {
    pub fn lock_at(&self) -> usize {
        (KEY_AT + self.key_bytes + self.value_bytes).next_multiple_of(8)
    }

    /// Bytes of a leaf (every leaf READ fetches all of them).
    pub fn bytes(&self) -> usize {
        self.lock_at() + 8
    }

    /// Bytes a leaf occupies, rounded to the allocation alignment `align`.
    pub fn alloc_bytes(&self, align: u64) -> u64 {
        (self.bytes() as u64).next_multiple_of(align)
    }

    pub fn encode(&self, rev: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
        debug_assert_eq!((key.len(), value.len()), (self.key_bytes, self.value_bytes));
        let mut b = vec![0u8; self.bytes()];
        b[..8].copy_from_slice(&rev.to_le_bytes());
        b[VALID_AT] = 0x80;
        b[CHECKSUM_AT..KEY_AT].copy_from_slice(&checksum(key, value).to_le_bytes());
        b[KEY_AT..KEY_AT + key.len()].copy_from_slice(key);
        b[KEY_AT + key.len()..KEY_AT + key.len() + value.len()].copy_from_slice(value);
        b
    }

    pub fn decode(&self, b: &[u8]) -> Leaf {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let k = KEY_AT + self.key_bytes;
        Leaf {
            rev: word(0),
            valid: b[VALID_AT] & 0x80 != 0,
            checksum: word(CHECKSUM_AT),
            key: b[KEY_AT..k].to_vec(),
            value: b[k..k + self.value_bytes].to_vec(),
            lock_word: word(self.lock_at()),
        }
    }
}

/// The leaf checksum: CRC-64/WE over key‖value.
pub fn checksum(key: &[u8], value: &[u8]) -> u64 {
    crc64(&[key, value])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_fields_round_trip() {
        let at = RemoteAddr::host(NodeId(3), 64 * 12345);
        let s = Slot::internal(0xAB, 5, at);
        assert_eq!((s.partial(), s.node_type(), s.ptr(), s.is_leaf(), s.is_internal()), (0xAB, 5, at, false, true));
        assert_eq!(s.with_type(7).node_type(), 7);
        assert_eq!(s.with_type(7).ptr(), at);
        let l = Slot::leaf(0, 48, at);
        assert!(l.is_leaf() && !l.is_empty() && l.ptr() == at && l.partial() == 0);
        let t = Slot::tombstone(0);
        assert!(t.is_tombstone() && t.is_empty() && !t.is_null() && t.partial() == 0);
        assert!(Slot::null().is_empty() && !Slot::null().is_tombstone());
    }

    #[test]
    fn header_fields_and_trim() {
        let h = Header::new(3, 2, &[10, 11, 12, 13]);
        assert_eq!((h.depth(), h.node_type(), h.len(), h.partials()), (3, 2, 4, vec![10, 11, 12, 13]));
        let t = h.trimmed(1);
        assert_eq!((t.depth(), t.len(), t.partials(), t.node_type()), (5, 2, vec![12, 13], 2));
        assert_eq!(t.slot_depth(), h.slot_depth());
        assert_eq!(Header::new(256, 1, &[]).depth(), 256);
        assert_eq!(h.with_type(6).node_type(), 6);
        assert_eq!(h.with_type(6).partials(), h.partials());
    }

    #[test]
    fn node_types() {
        let t = NodeTypes::smart();
        assert_eq!((t.capacity(1), t.capacity(7), t.capacity(0)), (4, 256, 0));
        assert_eq!((t.for_slot_index(3), t.for_slot_index(4), t.for_slot_index(255)), (1, 2, 7));
        assert_eq!(t.read_bytes(1), 48);
        assert_eq!(t.node_alloc_bytes(NODE_ALIGN), 2112);
        // The artifact's 256-byte allocations: a 2,304-byte stride (SMART digest §2.4).
        assert_eq!(t.node_alloc_bytes(256), 2304);
        assert_eq!(NodeTypes::art().for_slot_index(20), 3);
        let g = NodeTypes::geometric(7).expect("valid");
        assert_eq!(g, t);
        assert_eq!(NodeTypes::geometric(1).expect("valid").capacity(1), 256);
    }

    #[test]
    fn leaf_round_trip_and_sizes() {
        let g = LeafGeometry { key_bytes: 8, value_bytes: 8 };
        assert_eq!((g.lock_at(), g.bytes()), (40, 48));
        assert_eq!((g.alloc_bytes(NODE_ALIGN), g.alloc_bytes(256)), (64, 256));
        assert_eq!(LeafGeometry { key_bytes: 32, value_bytes: 64 }.bytes(), 128);
        let b = g.encode(99, &[1; 8], &[2; 8]);
        let l = g.decode(&b);
        assert!(l.valid && l.intact() && !l.dead() && l.rev == 99 && l.key == vec![1; 8]);
        let mut torn = b.clone();
        torn[KEY_AT + 8] ^= 1;
        assert!(!g.decode(&torn).intact());
    }
}

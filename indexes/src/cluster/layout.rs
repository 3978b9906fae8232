//! Byte-exact remote formats of DrTM cluster hashing.
//!
//! ```text
//! superblock (memory node 0, offset SUPERBLOCK_OFFSET):
//!   0  magic             u64  "DMKCLST1"
//!   8  main_buckets      u64  main buckets in total
//!  16  slots             u64  slots per bucket (main and overflow alike)
//!  24  overflow_percent  u64  overflow buckets per 100 main buckets (per memory node, rounded up)
//!  32  key_bytes         u64  longest key
//!  40  value_bytes       u64  longest value
//!  48  memory_nodes      u64
//!  56  regions           u64 × memory_nodes: remote address of each node's region
//!
//! region of memory node i (stride = bucket_stride, 64-byte multiple):
//!   0                pool header: u64 overflow counter (FAA-bumped; >= capacity means exhausted)
//!   stride           main bucket × main_on(i)
//!   stride×(1+main)  overflow bucket × overflow_on(i)
//!
//! bucket (main and overflow):
//!   0        header  u64  [lock: 1 (bit 63) | version: 31 (bits 62..32) | next: 32 (bits 31..0)]
//!   8        slot × slots, u64 each
//!   8+8S     version copy u64 (main buckets; 0 in overflow buckets)
//!
//! slot: [fp: 8 (bits 63..56) | units: 8 (bits 55..48) | offset: 48] — 0 is an empty slot;
//!       the KV block lives on the bucket's memory node at `offset`, `units` × 64 bytes.
//!
//! KV block (units × 64 bytes, written once, never rewritten):
//!   0  key_len    u16
//!   2  value_len  u16
//!   4  reserved   u32  zero
//!   8  checksum   u64  hash64 of bytes 0..8, the key and the value
//!  16  key, value, zero padding
//! ```
//!
//! `next` is 0 at the end of a chain, else 1 + the index of the next overflow bucket on the same
//! memory node (a chain never leaves its main bucket's node). Only main-bucket headers use the
//! lock bit and the version; the version is even when no item is being moved, odd while a
//! delete moves the chain's tail item forward. The copy of the version at the end of a main
//! bucket puts the version into both 64-byte units a main bucket of 8 slots spans (72 bytes of
//! header and slots), so a lock-free READ of the bucket, whose units are sampled in any order,
//! can tell that it saw both halves between the same two moves. All integers little-endian.

use crate::common::bytes::u64_at;
use crate::common::superblock;
use crate::hash::hash64;
use dmkit_rdma::{Fixed, NodeId, RemoteAddr};

pub const SUPERBLOCK_OFFSET: u64 = 4096;
pub const MAGIC: u64 = u64::from_le_bytes(*b"DMKCLST1");
pub const MAX_MEMORY_NODES: usize = 64;
pub const SUPERBLOCK_HEADER_BYTES: usize = superblock::bytes(5, 0);
pub const HEADER_BYTES: usize = 8;
/// The superblock at its largest (every memory node's base), in the reserved bytes.
const SUPERBLOCK: Fixed = Fixed::new(SUPERBLOCK_OFFSET, (SUPERBLOCK_HEADER_BYTES + 8 * MAX_MEMORY_NODES) as u64);
pub const SLOT_BYTES: usize = 8;
/// The largest bucket: header, slots and version copy within two 64-byte units.
pub const MAX_BUCKET_BYTES: usize = 128;
/// Slots that fit in [`MAX_BUCKET_BYTES`].
pub const MAX_SLOTS: u32 = ((MAX_BUCKET_BYTES - HEADER_BYTES - 8) / SLOT_BYTES) as u32;
pub const BLOCK_HEADER_BYTES: usize = 16;
pub const BLOCK_UNIT: usize = 64;
/// A slot's 8-bit length field counts 64-byte units.
pub const MAX_BLOCK_UNITS: usize = 255;

pub const LOCK_BIT: u64 = 1 << 63;
const VERSION_SHIFT: u32 = 32;
const VERSION_MASK: u64 = (1 << 31) - 1;
const NEXT_MASK: u64 = (1 << 32) - 1;
const OFFSET_MASK: u64 = (1 << 48) - 1;

const BUCKET_SEED: u64 = 0x0063_6c75_7374_6572;
const FP_SEED: u64 = 0x6670_7269_6e74;
const CHECKSUM_SEED: u64 = 0xc1c5_b10c_0000;

const _: () = assert!(SUPERBLOCK_HEADER_BYTES + 8 * MAX_MEMORY_NODES <= 1024, "superblock fits in 1 KiB");
const _: () = assert!(MAX_SLOTS == 14, "two units hold a header, 14 slots and the version copy");
const _: () = assert!(HEADER_BYTES + 8 * SLOT_BYTES + 8 == 80, "the paper's 8 slots make an 80-byte bucket");

/// A bucket header word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub locked: bool,
    /// Even: no move in progress. Odd: a delete is moving an item (31 bits, wraps).
    pub version: u32,
    /// 0: end of chain; else 1 + overflow bucket index on the same node.
    pub next: u32,
}

impl Header {
    pub fn encode(self) -> u64 {
        debug_assert!(self.version as u64 <= VERSION_MASK);
        (if self.locked { LOCK_BIT } else { 0 }) | ((self.version as u64) << VERSION_SHIFT) | self.next as u64
    }

    pub fn decode(word: u64) -> Header {
        Header {
            locked: word & LOCK_BIT != 0,
            version: ((word >> VERSION_SHIFT) & VERSION_MASK) as u32,
            next: (word & NEXT_MASK) as u32,
        }
    }

    /// The version after `steps` increments (31-bit wrap).
    pub fn version_plus(version: u32, steps: u32) -> u32 {
        ((version as u64 + steps as u64) & VERSION_MASK) as u32
    }
}

/// A non-empty slot word's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotWord {
    pub fp: u8,
    /// Block length in 64-byte units (1..=255).
    pub units: u8,
    /// Offset of the block on the bucket's memory node (non-zero).
    pub offset: u64,
}

impl SlotWord {
    pub fn encode(self) -> u64 {
        debug_assert!(self.offset != 0 && self.offset <= OFFSET_MASK && self.units != 0);
        ((self.fp as u64) << 56) | ((self.units as u64) << 48) | self.offset
    }

    /// `None` for an empty slot (word 0).
    pub fn decode(word: u64) -> Option<SlotWord> {
        (word != 0).then_some(SlotWord {
            fp: (word >> 56) as u8,
            units: (word >> 48) as u8,
            offset: word & OFFSET_MASK,
        })
    }

    pub fn block_bytes(self) -> usize {
        self.units as usize * BLOCK_UNIT
    }
}

/// The geometry every client derives from the superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub main_buckets: u64,
    pub slots: u32,
    pub overflow_percent: u32,
    pub key_bytes: u32,
    pub value_bytes: u32,
    pub regions: Vec<RemoteAddr>,
}

pub fn superblock_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

pub fn superblock_bytes(memory_nodes: usize) -> usize {
    SUPERBLOCK_HEADER_BYTES + 8 * memory_nodes
}

/// Bytes of a bucket of `slots` slots: header, slots, version copy.
pub fn bucket_bytes(slots: u32) -> usize {
    HEADER_BYTES + slots as usize * SLOT_BYTES + 8
}

/// Distance between buckets: whole 64-byte units, so a bucket starts a unit.
pub fn bucket_stride(slots: u32) -> u64 {
    (bucket_bytes(slots) as u64).div_ceil(64) * 64
}

/// Main buckets on memory node `i` of `m` when `total` are spread round-robin.
pub fn main_on(total: u64, m: u64, i: u64) -> u64 {
    total / m + u64::from(i < total % m)
}

/// Overflow buckets of a node with `main` main buckets.
pub fn overflow_for(main: u64, percent: u32) -> u64 {
    (main * percent as u64).div_ceil(100)
}

/// Bytes of a node's region.
pub fn region_bytes(slots: u32, main: u64, overflow: u64) -> u64 {
    (1 + main + overflow) * bucket_stride(slots)
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let header = [
            self.main_buckets,
            self.slots as u64,
            self.overflow_percent as u64,
            self.key_bytes as u64,
            self.value_bytes as u64,
        ];
        superblock::encode(MAGIC, &header, &self.regions)
    }

    /// Decodes the header and as many regions as `bytes` holds; `Err` names what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, String> {
        let (h, regions) = superblock::decode(bytes, MAGIC, 5, MAX_MEMORY_NODES, "cluster hash table")?;
        let sb = Superblock {
            main_buckets: h[0],
            slots: h[1] as u32,
            overflow_percent: h[2] as u32,
            key_bytes: h[3] as u32,
            value_bytes: h[4] as u32,
            regions,
        };
        if sb.main_buckets < sb.regions.len() as u64 || sb.slots == 0 || sb.slots > MAX_SLOTS {
            return Err(format!("superblock with {} main buckets of {} slots", sb.main_buckets, sb.slots));
        }
        Ok(sb)
    }

    pub fn memory_nodes(&self) -> u64 {
        self.regions.len() as u64
    }

    pub fn bucket_bytes(&self) -> usize {
        bucket_bytes(self.slots)
    }

    pub fn stride(&self) -> u64 {
        bucket_stride(self.slots)
    }

    /// Main buckets on the `i`-th memory node.
    pub fn main_on(&self, i: usize) -> u64 {
        main_on(self.main_buckets, self.memory_nodes(), i as u64)
    }

    /// Overflow buckets on the `i`-th memory node.
    pub fn overflow_on(&self, i: usize) -> u64 {
        overflow_for(self.main_on(i), self.overflow_percent)
    }

    /// Main bucket of a key.
    pub fn bucket_of(&self, key: &[u8]) -> u64 {
        hash64(key, BUCKET_SEED) % self.main_buckets
    }

    /// Memory node index (into `regions`) of main bucket `b`: round-robin.
    pub fn node_of(&self, b: u64) -> usize {
        (b % self.memory_nodes()) as usize
    }

    /// The overflow counter of node `i`.
    pub fn pool_counter_addr(&self, i: usize) -> RemoteAddr {
        self.regions[i]
    }

    pub fn main_addr(&self, b: u64) -> RemoteAddr {
        self.regions[self.node_of(b)].add((1 + b / self.memory_nodes()) * self.stride())
    }

    /// Overflow bucket `index` of node `i`.
    pub fn overflow_addr(&self, i: usize, index: u64) -> RemoteAddr {
        self.regions[i].add((1 + self.main_on(i) + index) * self.stride())
    }

    /// Offset of slot `s` within a bucket.
    pub fn slot_offset(&self, s: usize) -> usize {
        HEADER_BYTES + s * SLOT_BYTES
    }

    /// Offset of the version copy within a main bucket.
    pub fn copy_offset(&self) -> usize {
        HEADER_BYTES + self.slots as usize * SLOT_BYTES
    }

    /// The KV block a slot names, on node `i`.
    pub fn block_addr(&self, i: usize, slot: SlotWord) -> Option<RemoteAddr> {
        RemoteAddr::host(self.regions[i].node(), 0).checked_add(slot.offset)
    }
}

/// A bucket image, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub header: Header,
    pub slots: Vec<u64>,
    /// The version copy (main buckets).
    pub copy: u32,
}

impl Bucket {
    pub fn decode(sb: &Superblock, bytes: &[u8]) -> Bucket {
        debug_assert!(bytes.len() >= sb.bucket_bytes());
        Bucket {
            header: Header::decode(u64_at(bytes, 0)),
            slots: (0..sb.slots as usize).map(|s| u64_at(bytes, sb.slot_offset(s))).collect(),
            copy: (u64_at(bytes, sb.copy_offset()) & VERSION_MASK) as u32,
        }
    }
}

/// Fingerprint of a key (the slot's tag).
pub fn fingerprint(key: &[u8]) -> u8 {
    (hash64(key, FP_SEED) >> 56) as u8
}

/// Units of the block holding `key` and `value`.
pub fn block_units(key_len: usize, value_len: usize) -> usize {
    (BLOCK_HEADER_BYTES + key_len + value_len).div_ceil(BLOCK_UNIT)
}

fn checksum(head: &[u8], body: &[u8]) -> u64 {
    hash64(body, hash64(&head[..8], CHECKSUM_SEED))
}

/// Encodes a KV block (a whole number of units).
pub fn encode_block(key: &[u8], value: &[u8]) -> Vec<u8> {
    let units = block_units(key.len(), value.len());
    assert!(units <= MAX_BLOCK_UNITS && !key.is_empty() && key.len() <= u16::MAX as usize);
    let mut out = vec![0u8; units * BLOCK_UNIT];
    out[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    out[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    let body_end = BLOCK_HEADER_BYTES + key.len() + value.len();
    out[BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + key.len()].copy_from_slice(key);
    out[BLOCK_HEADER_BYTES + key.len()..body_end].copy_from_slice(value);
    let sum = checksum(&out[0..8], &out[BLOCK_HEADER_BYTES..body_end]);
    out[8..16].copy_from_slice(&sum.to_le_bytes());
    out
}

/// A decoded KV block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    Item {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Lengths that do not fit the block, a non-zero reserved field or a checksum mismatch: a
    /// torn, freed or never-written block.
    Invalid,
}

/// Decodes a block read whole.
pub fn decode_block(bytes: &[u8]) -> Block {
    if bytes.len() < BLOCK_HEADER_BYTES {
        return Block::Invalid;
    }
    let key_len = u16::from_le_bytes([bytes[0], bytes[1]]) as usize;
    let value_len = u16::from_le_bytes([bytes[2], bytes[3]]) as usize;
    let body_end = BLOCK_HEADER_BYTES + key_len + value_len;
    if key_len == 0 || body_end > bytes.len() || u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) != 0 {
        return Block::Invalid;
    }
    if u64_at(bytes, 8) != checksum(&bytes[0..8], &bytes[BLOCK_HEADER_BYTES..body_end]) {
        return Block::Invalid;
    }
    Block::Item {
        key: bytes[BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + key_len].to_vec(),
        value: bytes[BLOCK_HEADER_BYTES + key_len..body_end].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(nodes: u16) -> Superblock {
        Superblock {
            main_buckets: 10,
            slots: 8,
            overflow_percent: 300,
            key_bytes: 16,
            value_bytes: 32,
            regions: (0..nodes).map(|n| RemoteAddr::host(NodeId(n), 1 << 20)).collect(),
        }
    }

    #[test]
    fn superblock_round_trips_and_places_buckets() {
        let s = sb(3);
        assert_eq!(Superblock::decode(&s.encode()), Ok(s.clone()));
        assert!(Superblock::decode(&[0; 64]).unwrap_err().contains("magic"));
        assert!(Superblock::decode(&s.encode()[..60]).is_err());
        assert_eq!((0..3).map(|i| s.main_on(i)).sum::<u64>(), 10);
        assert_eq!(s.overflow_on(0), 12);
        assert_eq!(s.bucket_bytes(), 80);
        assert_eq!(s.stride(), 128);
        assert_eq!(s.copy_offset(), 72);
        // Bucket 4 is the second main bucket of node 1, after the pool header.
        assert_eq!(s.main_addr(4), RemoteAddr::host(NodeId(1), (1 << 20) + 2 * 128));
        assert_eq!(s.overflow_addr(1, 0), RemoteAddr::host(NodeId(1), (1 << 20) + (1 + 3) * 128));
        assert_eq!(region_bytes(8, 3, 9), 13 * 128);
        // Fewer than 7 slots fit one unit.
        assert_eq!(bucket_stride(6), 64);
        assert_eq!(bucket_stride(14), 128);
        let mut bad = s.clone();
        bad.slots = 15;
        assert!(Superblock::decode(&bad.encode()).is_err());
    }

    #[test]
    fn header_and_slot_words_round_trip() {
        for h in [
            Header::default(),
            Header { locked: true, version: 7, next: 3 },
            Header { locked: false, version: (1 << 31) - 1, next: u32::MAX },
        ] {
            assert_eq!(Header::decode(h.encode()), h);
        }
        assert_eq!(Header::decode(LOCK_BIT), Header { locked: true, version: 0, next: 0 });
        assert_eq!(Header::version_plus((1 << 31) - 1, 1), 0);
        let w = SlotWord { fp: 0xAB, units: 255, offset: (1 << 48) - 64 };
        assert_eq!(SlotWord::decode(w.encode()), Some(w));
        assert_eq!(SlotWord::decode(0), None);
        assert_eq!(w.block_bytes(), 255 * 64);
        assert_eq!(sb(1).block_addr(0, w), Some(RemoteAddr::host(NodeId(0), (1 << 48) - 64)));
    }

    #[test]
    fn buckets_decode() {
        let s = sb(1);
        let mut bytes = vec![0u8; s.bucket_bytes()];
        bytes[0..8].copy_from_slice(&Header { locked: true, version: 4, next: 2 }.encode().to_le_bytes());
        bytes[16..24].copy_from_slice(&99u64.to_le_bytes());
        bytes[72..80].copy_from_slice(&4u64.to_le_bytes());
        let b = Bucket::decode(&s, &bytes);
        assert_eq!(b.header, Header { locked: true, version: 4, next: 2 });
        assert_eq!(b.slots.len(), 8);
        assert_eq!(b.slots[1], 99);
        assert_eq!(b.copy, 4);
    }

    #[test]
    fn blocks_round_trip_and_detect_tears() {
        // RACE's default 16-byte key and 32-byte value fill one unit.
        assert_eq!(block_units(16, 32), 1);
        assert_eq!(block_units(16, 33), 2);
        let block = encode_block(b"sixteen-byte-key", &[7; 48]);
        assert_eq!(block.len(), 128, "16 + 16 + 48 bytes take two units");
        assert_eq!(decode_block(&block), Block::Item { key: b"sixteen-byte-key".to_vec(), value: vec![7; 48] });
        // Half old, half new: the checksum catches it.
        let other = encode_block(b"sixteen-byte-key", &[8; 48]);
        let mut torn = block.clone();
        torn[64..].copy_from_slice(&other[64..]);
        assert_eq!(decode_block(&torn), Block::Invalid);
        // A freed (zeroed) block and a block read too short are invalid.
        assert_eq!(decode_block(&[0; 64]), Block::Invalid);
        assert_eq!(decode_block(&block[..40]), Block::Invalid);
        let empty = encode_block(b"k", b"");
        assert_eq!(decode_block(&empty), Block::Item { key: b"k".to_vec(), value: Vec::new() });
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }
}

//! Byte-exact remote formats of the example hash table.
//!
//! ```text
//! superblock (memory node 0, offset SUPERBLOCK_OFFSET):
//!   0  magic            u64  "DMKEXHT1"
//!   8  buckets          u64  total buckets
//!  16  slots            u64  slots per bucket
//!  24  max_key_bytes    u64
//!  32  max_value_bytes  u64
//!  40  memory_nodes     u64  buckets are spread round-robin over this many nodes
//!  48  bases            u64 × memory_nodes: remote address of each node's bucket array
//!
//! bucket (stride = bucket_bytes rounded up to 64):
//!   0  lock             u64  0 = free, else the holder's client id + 1
//!   8  slot × slots
//!
//! slot (SLOT_HEADER + key area + value area, areas rounded up to 8 bytes):
//!   0  key_len          u16  0 = empty slot
//!   2  value_len        u16
//!   4  reserved         u32  zero
//!   8  checksum         u64  hash64 of bytes 0..8 and the key and value areas
//!  16  key              key area
//!  ..  value            value area
//! ```
//!
//! All integers are little-endian. An all-zero slot is empty; a slot whose checksum does not
//! match was read torn (a concurrent WRITE landed in some of its units) and is read again.

use crate::common::bytes::u64_at;
use crate::common::superblock;
use crate::hash::hash64;
use dmkit_rdma::{Fixed, NodeId, RemoteAddr};

pub const SUPERBLOCK_OFFSET: u64 = 4096;
pub const MAGIC: u64 = u64::from_le_bytes(*b"DMKEXHT1");
pub const MAX_MEMORY_NODES: usize = 64;
pub const SUPERBLOCK_HEADER_BYTES: usize = superblock::bytes(4, 0);
pub const LOCK_BYTES: usize = 8;
pub const SLOT_HEADER_BYTES: usize = 16;
const CHECKSUM_SEED: u64 = 0x5107_c4ec_5a17;

/// The superblock at its largest (every memory node's base), in the reserved bytes.
const SUPERBLOCK: Fixed = Fixed::new(SUPERBLOCK_OFFSET, (SUPERBLOCK_HEADER_BYTES + 8 * MAX_MEMORY_NODES) as u64);
const _: () = assert!(SUPERBLOCK.bytes() <= 1024, "superblock fits in 1 KiB");

/// The geometry every client derives from the superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub buckets: u64,
    pub slots: u32,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    pub bases: Vec<RemoteAddr>,
}

pub fn superblock_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

pub fn superblock_bytes(memory_nodes: usize) -> usize {
    SUPERBLOCK_HEADER_BYTES + 8 * memory_nodes
}

fn round8(n: u32) -> usize {
    (n as usize).div_ceil(8) * 8
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let header = [self.buckets, self.slots as u64, self.max_key_bytes as u64, self.max_value_bytes as u64];
        superblock::encode(MAGIC, &header, &self.bases)
    }

    /// Decodes the header and as many bases as `bytes` holds; `Err` names what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, String> {
        let (h, bases) = superblock::decode(bytes, MAGIC, 4, MAX_MEMORY_NODES, "example hash table")?;
        let sb = Superblock {
            buckets: h[0],
            slots: h[1] as u32,
            max_key_bytes: h[2] as u32,
            max_value_bytes: h[3] as u32,
            bases,
        };
        if sb.buckets == 0 || sb.slots == 0 {
            return Err("superblock with no buckets or slots".into());
        }
        Ok(sb)
    }

    pub fn slot_bytes(&self) -> usize {
        SLOT_HEADER_BYTES + round8(self.max_key_bytes) + round8(self.max_value_bytes)
    }

    pub fn bucket_bytes(&self) -> usize {
        LOCK_BYTES + self.slots as usize * self.slot_bytes()
    }

    /// Distance between buckets: whole 64-byte lines, so a bucket's lock word starts a line.
    pub fn bucket_stride(&self) -> u64 {
        (self.bucket_bytes() as u64).div_ceil(64) * 64
    }

    /// Buckets stored on memory node `i` of `bases`.
    pub fn buckets_on(&self, i: usize) -> u64 {
        let m = self.bases.len() as u64;
        self.buckets / m + u64::from((i as u64) < self.buckets % m)
    }

    /// Bucket number of a key.
    pub fn bucket_of(&self, key: &[u8]) -> u64 {
        hash64(key, 0x6275_636b_6574) % self.buckets
    }

    /// Remote address of bucket `b`: bucket `b` lives on node `b % m` at index `b / m`.
    pub fn bucket_addr(&self, b: u64) -> RemoteAddr {
        let m = self.bases.len() as u64;
        self.bases[(b % m) as usize].add((b / m) * self.bucket_stride())
    }

    /// Offset of slot `i` within a bucket.
    pub fn slot_offset(&self, i: usize) -> usize {
        LOCK_BYTES + i * self.slot_bytes()
    }
}

/// A decoded slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    Empty,
    Item {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Lengths out of range or a checksum mismatch: torn, or corrupt.
    Torn,
}

fn checksum(head: &[u8], key_area: &[u8], value_area: &[u8]) -> u64 {
    let mut h = hash64(&head[..8], CHECKSUM_SEED);
    h = hash64(key_area, h);
    hash64(value_area, h)
}

/// Encodes an item into a slot of `sb`'s geometry.
pub fn encode_slot(sb: &Superblock, key: &[u8], value: &[u8]) -> Vec<u8> {
    assert!(!key.is_empty() && key.len() <= sb.max_key_bytes as usize && value.len() <= sb.max_value_bytes as usize);
    let mut out = vec![0u8; sb.slot_bytes()];
    out[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    out[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    let key_end = SLOT_HEADER_BYTES + round8(sb.max_key_bytes);
    out[SLOT_HEADER_BYTES..SLOT_HEADER_BYTES + key.len()].copy_from_slice(key);
    out[key_end..key_end + value.len()].copy_from_slice(value);
    let sum = checksum(&out[0..8], &out[SLOT_HEADER_BYTES..key_end], &out[key_end..]);
    out[8..16].copy_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes one slot. With `verify` false the checksum is not checked (a planted bug).
pub fn decode_slot(sb: &Superblock, bytes: &[u8], verify: bool) -> Slot {
    debug_assert_eq!(bytes.len(), sb.slot_bytes());
    let key_len = u16::from_le_bytes([bytes[0], bytes[1]]) as usize;
    let value_len = u16::from_le_bytes([bytes[2], bytes[3]]) as usize;
    if key_len == 0 {
        return Slot::Empty;
    }
    if key_len > sb.max_key_bytes as usize || value_len > sb.max_value_bytes as usize {
        return Slot::Torn;
    }
    let key_end = SLOT_HEADER_BYTES + round8(sb.max_key_bytes);
    if verify && u64_at(bytes, 8) != checksum(&bytes[0..8], &bytes[SLOT_HEADER_BYTES..key_end], &bytes[key_end..]) {
        return Slot::Torn;
    }
    Slot::Item {
        key: bytes[SLOT_HEADER_BYTES..SLOT_HEADER_BYTES + key_len].to_vec(),
        value: bytes[key_end..key_end + value_len].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(nodes: u16) -> Superblock {
        Superblock {
            buckets: 10,
            slots: 4,
            max_key_bytes: 13,
            max_value_bytes: 20,
            bases: (0..nodes).map(|n| RemoteAddr::host(NodeId(n), 1 << 20)).collect(),
        }
    }

    #[test]
    fn superblock_round_trips() {
        let s = sb(3);
        assert_eq!(Superblock::decode(&s.encode()), Ok(s.clone()));
        assert!(Superblock::decode(&[0; 64]).unwrap_err().contains("magic"));
        assert!(Superblock::decode(&s.encode()[..50]).is_err());
        assert_eq!((0..3).map(|i| s.buckets_on(i)).sum::<u64>(), 10);
        assert_eq!(s.bucket_addr(4), RemoteAddr::host(NodeId(1), (1 << 20) + s.bucket_stride()));
        assert_eq!(s.slot_bytes(), 16 + 16 + 24);
        assert_eq!(s.bucket_stride() % 64, 0);
    }

    #[test]
    fn slots_round_trip_and_detect_tears() {
        let s = sb(1);
        let bytes = encode_slot(&s, b"key", b"value");
        assert_eq!(decode_slot(&s, &bytes, true), Slot::Item { key: b"key".to_vec(), value: b"value".to_vec() });
        assert_eq!(decode_slot(&s, &vec![0; s.slot_bytes()], true), Slot::Empty);
        // Half old, half new: the checksum catches it.
        let other = encode_slot(&s, b"key", b"other");
        let mut torn = bytes.clone();
        torn[32..].copy_from_slice(&other[32..]);
        assert_eq!(decode_slot(&s, &torn, true), Slot::Torn);
        assert!(matches!(decode_slot(&s, &torn, false), Slot::Item { .. }), "without the check the tear passes");
        let mut long = bytes;
        long[0] = 200;
        assert_eq!(decode_slot(&s, &long, false), Slot::Torn);
    }
}

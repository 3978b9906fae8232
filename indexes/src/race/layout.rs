//! RACE's remote formats (digest §2, decisions D1, D2, D5, D6, D9, D10).
//!
//! - **Root and directory** on memory node 0 at a fixed address: the root word
//!   `[dir_lock:1 | 0 | gd:8]`, then `2^max_depth` entries of 8 bytes,
//!   `[lock:1 | ld:7 | node:8 | offset:48]`. One READ of `8 + 8·2^gd` bytes fetches the root and
//!   the used area.
//! - **Subtable**: `3G` buckets of `B = 8 + 8K` bytes in groups `[main0][overflow][main1]`. A
//!   bucket is a header `[0 | ld:8 | suffix:32]` and `K` slots.
//! - **Slot**: `[fp:8 | units−1:8 | node:8 | frozen:1 | offset/64:39]`; the all-zero word is
//!   empty. `frozen` marks an item a split is moving (its CAS from the plain word fails).
//! - **KV block**: `[klen u16][flags u16][vlen u32][key][value][padding][crc64 u64]`, a multiple
//!   of 64 bytes, the checksum over everything before it.

use crate::common::checksum::crc64;
use crate::hash::hash64;
use dmkit_rdma::{NodeId, RemoteAddr};

pub const LOCK_BIT: u64 = 1 << 63;
/// A slot's item is being moved by a split.
pub const FROZEN: u64 = 1 << 39;
const OFFSET_MASK: u64 = (1 << 39) - 1;
/// The unit of a KV block's length.
pub const UNIT: usize = 64;
/// The most units a slot's length field names (D9: units − 1 in 8 bits).
pub const MAX_UNITS: usize = 256;
const SEED_DIR: u64 = 0x5241_4345_0000_0001;
const SEED_SECOND: u64 = 0x5241_4345_0000_0002;

// A slot `[fp:8 | units−1:8 | node:8 | frozen:1 | offset/64:39]` fills its word exactly, and
// the lock bit of a directory entry or root word is its top bit.
const _: () = {
    assert!(FROZEN & OFFSET_MASK == 0 && FROZEN == OFFSET_MASK + 1, "frozen sits right above the offset");
    assert!(OFFSET_MASK.count_ones() + 1 + 3 * 8 == u64::BITS, "offset, frozen, node, units, fp fill the word");
    assert!(MAX_UNITS == 1 << 8, "units − 1 in 8 bits");
    assert!(
        UNIT == 64 && OFFSET_MASK.count_ones() + UNIT.trailing_zeros() == 45,
        "offsets of 64-byte blocks, 2^45 bytes"
    );
    assert!(LOCK_BIT == 1 << 63, "the lock is a word's top bit");
};

/// A directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub lock: bool,
    pub ld: u8,
    pub subtable: RemoteAddr,
}

impl Entry {
    pub fn encode(self) -> u64 {
        (self.lock as u64) << 63
            | (self.ld as u64 & 0x7F) << 56
            | (self.subtable.node().0 as u64 & 0xFF) << 48
            | self.subtable.offset() & ((1 << 48) - 1)
    }

    pub fn decode(w: u64) -> Entry {
        Entry {
            lock: w & LOCK_BIT != 0,
            ld: ((w >> 56) & 0x7F) as u8,
            subtable: RemoteAddr::host(NodeId(((w >> 48) & 0xFF) as u16), w & ((1 << 48) - 1)),
        }
    }
}

/// The root word: global depth and the directory lock.
pub fn root_word(gd: u8, dir_lock: bool) -> u64 {
    (dir_lock as u64) << 63 | gd as u64
}

pub fn root_gd(w: u64) -> u8 {
    w as u8
}

/// A bucket header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub ld: u8,
    pub suffix: u32,
}

impl Header {
    pub fn encode(self) -> u64 {
        (self.ld as u64) << 32 | self.suffix as u64
    }

    pub fn decode(w: u64) -> Header {
        Header { ld: (w >> 32) as u8, suffix: w as u32 }
    }
}

/// A slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub fp: u8,
    pub units: usize,
    pub block: RemoteAddr,
}

impl Slot {
    pub fn encode(self) -> u64 {
        debug_assert!((1..=MAX_UNITS).contains(&self.units) && self.block.offset() % UNIT as u64 == 0);
        (self.fp as u64) << 56
            | ((self.units - 1) as u64) << 48
            | (self.block.node().0 as u64 & 0xFF) << 40
            | ((self.block.offset() / UNIT as u64) & OFFSET_MASK)
    }

    /// `None` for the empty word.
    pub fn decode(w: u64) -> Option<Slot> {
        (w != 0).then(|| Slot {
            fp: (w >> 56) as u8,
            units: ((w >> 48) & 0xFF) as usize + 1,
            block: RemoteAddr::host(NodeId(((w >> 40) & 0xFF) as u16), (w & OFFSET_MASK) * UNIT as u64),
        })
    }

    pub fn bytes(self) -> usize {
        self.units * UNIT
    }
}

/// A key's hashes (D5): the directory suffix bits, its two addressable main buckets (in
/// different groups, D6) and its fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash {
    pub dir: u64,
    pub idx: [usize; 2],
    pub fp: u8,
}

/// A subtable's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Slots per bucket (K).
    pub slots: usize,
    /// Bucket groups per subtable (G, at least 2).
    pub groups: usize,
    /// Bits of the directory suffix (M); the in-subtable indices use the other hash bits.
    pub max_depth: u8,
}

impl Geometry {
    pub fn bucket_bytes(&self) -> usize {
        8 + 8 * self.slots
    }

    pub fn buckets(&self) -> usize {
        3 * self.groups
    }

    pub fn subtable_bytes(&self) -> usize {
        self.buckets() * self.bucket_bytes()
    }

    pub fn hash(&self, key: &[u8]) -> KeyHash {
        let h1 = hash64(key, SEED_DIR);
        let h2 = hash64(key, SEED_SECOND);
        let mains = 2 * self.groups as u64;
        let a = ((h1 >> self.max_depth) % mains) as usize;
        let mut b = ((h2 & ((1 << 56) - 1)) % mains) as usize;
        if a / 2 == b / 2 {
            // The second choice moves to the next group, same side.
            b = (b + 2) % (2 * self.groups);
        }
        KeyHash { dir: h1, idx: [a, b], fp: (h2 >> 56) as u8 }
    }

    /// The first physical bucket of addressable main `a`'s combined bucket (main + overflow).
    pub fn combined_first(&self, a: usize) -> usize {
        3 * (a / 2) + a % 2
    }

    /// Byte offset of physical bucket `b` in its subtable.
    pub fn bucket_at(&self, b: usize) -> usize {
        b * self.bucket_bytes()
    }

    /// The main bucket of addressable main `a` (the other bucket of its combined READ is the
    /// group's overflow bucket).
    pub fn main_of(&self, a: usize) -> usize {
        3 * (a / 2) + 2 * (a % 2)
    }
}

/// The low `ld` bits of a key's directory hash.
pub fn suffix(dir_hash: u64, ld: u8) -> u32 {
    (dir_hash & ((1u64 << ld) - 1)) as u32
}

/// Algorithm 5: may a bucket with `header` hold a key with directory hash `dir`, for a client
/// whose cached entry has local depth `cached_ld`?
pub fn bucket_correct(cached_ld: u8, header: Header, dir: u64) -> bool {
    header.ld == cached_ld || suffix(dir, header.ld) == header.suffix
}

/// A KV block for `key` and `value`, padded to whole units, checksummed.
pub fn encode_block(key: &[u8], value: &[u8]) -> Vec<u8> {
    let units = block_units(key.len(), value.len());
    let mut b = Vec::with_capacity(units * UNIT);
    b.extend_from_slice(&(key.len() as u16).to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(value.len() as u32).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b.resize(units * UNIT - 8, 0);
    let crc = crc64(&[&b]);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub fn block_units(key_len: usize, value_len: usize) -> usize {
    (8 + key_len + value_len + 8).div_ceil(UNIT)
}

/// A block's key and value, or `None` if it is invalid (zeroed, torn, or not a block).
pub fn decode_block(b: &[u8]) -> Option<(&[u8], &[u8])> {
    if b.len() < UNIT || b.len() % UNIT != 0 {
        return None;
    }
    let klen = u16::from_le_bytes([b[0], b[1]]) as usize;
    let vlen = u32::from_le_bytes(b[4..8].try_into().expect("4")) as usize;
    let end = b.len() - 8;
    if klen == 0 || 8 + klen + vlen > end {
        return None;
    }
    let crc = u64::from_le_bytes(b[end..].try_into().expect("8"));
    if crc64(&[&b[..end]]) != crc {
        return None;
    }
    Some((&b[8..8 + klen], &b[8 + klen..8 + klen + vlen]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let e = Entry { lock: true, ld: 9, subtable: RemoteAddr::host(NodeId(3), 0x1234_5640) };
        assert_eq!(Entry::decode(e.encode()), e);
        let h = Header { ld: 7, suffix: 0x55 };
        assert_eq!(Header::decode(h.encode()), h);
        let s = Slot { fp: 0xAB, units: 256, block: RemoteAddr::host(NodeId(2), 64 * 12345) };
        assert_eq!(Slot::decode(s.encode()), Some(s));
        assert_eq!(Slot::decode(0), None);
        // Blocks never sit at node 0, offset 0 (the reserved prefix), so a real slot is never 0.
        assert_ne!(Slot { fp: 0, units: 1, block: RemoteAddr::host(NodeId(0), 64) }.encode(), 0);
        assert_eq!(root_gd(root_word(5, true)), 5);
    }

    #[test]
    fn sizes_match_the_digest() {
        let g = Geometry { slots: 7, groups: 4, max_depth: 16 };
        assert_eq!(g.bucket_bytes(), 64, "K = 7: one cache line");
        assert_eq!(2 * g.bucket_bytes(), 128, "a combined bucket");
        // 16-B key, 32-B value: exactly one unit.
        assert_eq!(block_units(16, 32), 1);
        assert_eq!(encode_block(&[1; 16], &[2; 32]).len(), 64);
    }

    #[test]
    fn combined_buckets_are_main_plus_overflow() {
        let g = Geometry { slots: 7, groups: 4, max_depth: 16 };
        for a in 0..8 {
            let first = g.combined_first(a);
            let overflow = 3 * (a / 2) + 1;
            assert!([first, first + 1].contains(&g.main_of(a)));
            assert!([first, first + 1].contains(&overflow));
        }
    }

    #[test]
    fn choices_fall_in_different_groups() {
        let g = Geometry { slots: 7, groups: 2, max_depth: 4 };
        for k in 0u64..2000 {
            let h = g.hash(&k.to_be_bytes());
            assert_ne!(h.idx[0] / 2, h.idx[1] / 2, "key {k}");
            assert!(h.idx.iter().all(|&a| a < 4));
        }
    }

    #[test]
    fn blocks_detect_damage() {
        let b = encode_block(b"key", b"value");
        assert_eq!(decode_block(&b), Some((&b"key"[..], &b"value"[..])));
        let mut torn = b.clone();
        torn[12] ^= 1;
        assert_eq!(decode_block(&torn), None);
        assert_eq!(decode_block(&[0; 64]), None, "a zeroed (freed) block");
    }

    #[test]
    fn a_stale_bucket_is_told_apart() {
        // Cached LD 1; the bucket's subtable split to LD 2 with suffix 0b01.
        let h = Header { ld: 2, suffix: 0b01 };
        assert!(bucket_correct(2, h, 0b1101), "same LD: fine");
        assert!(bucket_correct(1, h, 0b0101), "LD differs, suffix matches: still here");
        assert!(!bucket_correct(1, h, 0b0111), "LD and suffix differ: moved");
    }
}

//! HStore's byte formats (digest §2.2, §2.5, decisions 3 and 4).
//!
//! - **Hash-table server memory** (the HTS's registered region, read one-sided by clients):
//!   offset [`READY_OFFSET`] holds the *ready word* (the table's incarnation, non-zero while the
//!   table is complete and served; 0 while it is being built), the table of `buckets` 64-byte
//!   buckets starts at [`TABLE_OFFSET`], and the overflow buckets of the HTS workers follow it,
//!   one pool per worker.
//! - **Bucket** (64 B, one READ): seven 8-byte slots, then `next`, the HTS offset of the next
//!   bucket of the chain (0 ends it).
//! - **Slot** `[fp:8 | units:8 | addr:48]`; the word is 0 iff the slot is empty. `addr` is a
//!   memory-node block as `[node:8 | offset/64:40]`; `units` is the block's length in 64-byte
//!   units.
//! - **KV block** in the memory pool: `[key_len u8][flags u8][val_len u16][check u32][ts u64]`,
//!   the key, the value, zero padding to a multiple of 64 bytes. `check` is the low 32 bits of
//!   SMART's CRC-64 over the header's first 4 bytes, `ts` and the key and value; `ts` is the
//!   writer's `[client:16 | sequence:48]`.

use crate::common::checksum::crc64;
use crate::hash::hash64;
use dmkit_rdma::{NodeId, RemoteAddr};

/// Bytes of a bucket.
pub const BUCKET_BYTES: u64 = 64;
/// Slots in a bucket (the paper's 7).
pub const MAX_SLOTS: usize = 7;
/// Offset of `next` in a bucket.
pub const NEXT_AT: u64 = 56;
/// The HTS's ready word.
pub const READY_OFFSET: u64 = 4096;
/// The first bucket.
pub const TABLE_OFFSET: u64 = 8192;
/// The unit of a block's length.
pub const UNIT: u64 = 64;
/// A block's header bytes.
pub const HEADER_BYTES: usize = 16;
/// The most units a slot names.
pub const MAX_UNITS: u64 = 255;
/// The largest key (its length is one byte).
pub const MAX_KEY_BYTES: usize = 255;
/// Block flag: written and complete.
pub const VALID: u8 = 1;

const ADDR_MASK: u64 = (1 << 48) - 1;
const OFFSET_UNITS_MASK: u64 = (1 << 40) - 1;
const HASH_SEED: u64 = 0x4853_544f_5245_0001;

/// Where a key goes: its hash and the parts derived from it (digest §3, "recommended hashing").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub hash: u64,
    /// Bucket index (`hash mod buckets`).
    pub bucket: u64,
    /// Fingerprint (the top `fp_bits` bits of the hash).
    pub fp: u8,
    /// HTS log and worker (`bucket mod workers`): every chain has one writer.
    pub worker: u16,
    /// SLS skiplist partition (`(hash >> 32) mod partitions`).
    pub partition: u16,
}

/// The table's shape, which clients and both servers agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub buckets: u64,
    pub slots: usize,
    pub fp_bits: u8,
    pub workers: u16,
    pub partitions: u16,
    /// Overflow buckets in each worker's pool.
    pub pool_buckets: u64,
    pub seed: u64,
}

impl Geometry {
    pub fn place(&self, key: &[u8]) -> Placement {
        let hash = hash64(key, HASH_SEED ^ self.seed);
        let bucket = hash % self.buckets;
        Placement {
            hash,
            bucket,
            fp: ((hash >> 56) as u8) >> (8 - self.fp_bits as u32),
            worker: (bucket % self.workers as u64) as u16,
            partition: ((hash >> 32) % self.partitions as u64) as u16,
        }
    }

    /// HTS offset of bucket `b` of the table.
    pub fn bucket_offset(&self, b: u64) -> u64 {
        TABLE_OFFSET + b * BUCKET_BYTES
    }

    /// HTS offset of the first overflow bucket of worker `w`'s pool.
    pub fn pool_offset(&self, w: u16) -> u64 {
        TABLE_OFFSET + (self.buckets + w as u64 * self.pool_buckets) * BUCKET_BYTES
    }

    /// The end of the HTS's used memory.
    pub fn end_offset(&self) -> u64 {
        self.pool_offset(self.workers)
    }

    /// Whether `offset` is a bucket of a worker's pool (where `next` may point).
    pub fn is_pool_bucket(&self, offset: u64) -> bool {
        offset >= self.pool_offset(0) && offset < self.end_offset() && (offset - TABLE_OFFSET) % BUCKET_BYTES == 0
    }

    /// The pool (worker) a pool bucket belongs to.
    pub fn pool_of(&self, offset: u64) -> u16 {
        ((offset - self.pool_offset(0)) / BUCKET_BYTES / self.pool_buckets) as u16
    }
}

/// A slot's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub fp: u8,
    pub units: u8,
    pub block: RemoteAddr,
}

impl Slot {
    /// The slot word; `block` must be a 64-byte-aligned host address on a node below 256.
    pub fn encode(self) -> u64 {
        debug_assert!(self.block.offset() % UNIT == 0 && self.block.node().0 < 256 && self.units > 0);
        (self.fp as u64) << 56 | (self.units as u64) << 48 | encode_addr(self.block)
    }

    /// `None` for the empty word.
    pub fn decode(word: u64) -> Option<Slot> {
        (word & ADDR_MASK != 0).then(|| Slot {
            fp: (word >> 56) as u8,
            units: (word >> 48) as u8,
            block: decode_addr(word & ADDR_MASK),
        })
    }
}

/// A block address as the 48 bits slots and messages carry: `[node:8 | offset/64:40]`.
pub fn encode_addr(addr: RemoteAddr) -> u64 {
    (addr.node().0 as u64) << 40 | (addr.offset() / UNIT) & OFFSET_UNITS_MASK
}

pub fn decode_addr(bits: u64) -> RemoteAddr {
    RemoteAddr::host(NodeId(((bits >> 40) & 0xFF) as u16), (bits & OFFSET_UNITS_MASK) * UNIT)
}

/// A block and its units in one word, `[units:16 | address:48]`: Clover's version pointers and
/// the values of `indirect` (HStore's slots carry a fingerprint as well: [`Slot`]).
pub fn encode_block_word(block: RemoteAddr, units: u64) -> u64 {
    units << 48 | encode_addr(block)
}

/// The block and units of an [`encode_block_word`] word.
pub fn decode_block_word(word: u64) -> (RemoteAddr, u64) {
    (decode_addr(word & ADDR_MASK), word >> 48)
}

/// A bucket's eight words (slots, then `next`).
pub fn bucket_words(bytes: &[u8]) -> [u64; 8] {
    let mut w = [0u64; 8];
    for (i, c) in bytes[..64].chunks_exact(8).enumerate() {
        w[i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
    }
    w
}

pub fn bucket_bytes(words: &[u64; 8]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Units of a block holding `key` and `value`.
pub fn units_for(key_len: usize, value_len: usize) -> u64 {
    (HEADER_BYTES + key_len + value_len).div_ceil(UNIT as usize) as u64
}

/// The largest value that fits beside a key of `key_len` bytes.
pub fn max_value_bytes(key_len: usize) -> usize {
    (MAX_UNITS * UNIT) as usize - HEADER_BYTES - key_len
}

fn check_of(bytes: &[u8], key_len: usize, value_len: usize) -> u32 {
    crc64(&[&bytes[0..4], &bytes[8..HEADER_BYTES + key_len + value_len]]) as u32
}

/// A KV block's bytes (a multiple of 64).
pub fn encode_block(key: &[u8], value: &[u8], ts: u64) -> Vec<u8> {
    assert!(key.len() <= MAX_KEY_BYTES && value.len() <= u16::MAX as usize);
    let units = units_for(key.len(), value.len());
    assert!(units <= MAX_UNITS, "callers check sizes first");
    let mut b = vec![0u8; (units * UNIT) as usize];
    b[0] = key.len() as u8;
    b[1] = VALID;
    b[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    b[8..16].copy_from_slice(&ts.to_le_bytes());
    b[HEADER_BYTES..HEADER_BYTES + key.len()].copy_from_slice(key);
    b[HEADER_BYTES + key.len()..HEADER_BYTES + key.len() + value.len()].copy_from_slice(value);
    let check = check_of(&b, key.len(), value.len());
    b[4..8].copy_from_slice(&check.to_le_bytes());
    b
}

/// What a READ of a block found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// A complete block.
    Valid { key: Vec<u8>, value: Vec<u8>, ts: u64 },
    /// Not a block this long (zeros, a shorter block's tail, torn or reused bytes).
    Invalid,
}

/// Decodes a block READ of `bytes`; only a block whose check matches is valid.
pub fn decode_block(bytes: &[u8]) -> Block {
    if bytes.len() < HEADER_BYTES || bytes[1] & VALID == 0 {
        return Block::Invalid;
    }
    let (key_len, value_len) = (bytes[0] as usize, u16::from_le_bytes([bytes[2], bytes[3]]) as usize);
    if HEADER_BYTES + key_len + value_len > bytes.len() {
        return Block::Invalid;
    }
    let check = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if check != check_of(bytes, key_len, value_len) {
        return Block::Invalid;
    }
    Block::Valid {
        key: bytes[HEADER_BYTES..HEADER_BYTES + key_len].to_vec(),
        value: bytes[HEADER_BYTES + key_len..HEADER_BYTES + key_len + value_len].to_vec(),
        ts: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
    }
}

/// The key a READ of a block's first `16 + key_len` bytes shows (the HTS's verification READ):
/// `None` if the header is not a valid block's or the key is longer than what was read. The
/// check is not verified: a block reachable from a slot is complete (data before index).
pub fn header_key(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.len() < HEADER_BYTES || bytes[1] & VALID == 0 {
        return None;
    }
    bytes.get(HEADER_BYTES..HEADER_BYTES + bytes[0] as usize)
}

/// A block's `ts`: `[client:16 | sequence:48]`.
pub fn timestamp(client: u32, sequence: u64) -> u64 {
    (client as u64 & 0xFFFF) << 48 | sequence & ((1 << 48) - 1)
}

// The formats' sizes, checked at compile time.
const _: () = assert!(MAX_SLOTS as u64 * 8 + 8 == BUCKET_BYTES);
const _: () = assert!(NEXT_AT == MAX_SLOTS as u64 * 8);
const _: () = assert!(READY_OFFSET + 8 <= TABLE_OFFSET);
const _: () = assert!(MAX_UNITS * UNIT - (HEADER_BYTES as u64) <= u16::MAX as u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry { buckets: 1 << 10, slots: 7, fp_bits: 8, workers: 4, partitions: 4, pool_buckets: 16, seed: 0 }
    }

    #[test]
    fn slots_round_trip_and_empty_is_zero() {
        let s = Slot { fp: 0, units: 4, block: RemoteAddr::host(NodeId(3), 64 * 12345) };
        assert_ne!(s.encode(), 0, "a slot with fingerprint 0 is not empty");
        assert_eq!(Slot::decode(s.encode()), Some(s));
        let s = Slot { fp: 0xAB, units: 255, block: RemoteAddr::host(NodeId(255), 64 * OFFSET_UNITS_MASK) };
        assert_eq!(Slot::decode(s.encode()), Some(s));
        assert_eq!(Slot::decode(0), None);
    }

    #[test]
    fn blocks_round_trip_and_detect_damage() {
        let key = b"user1234567890123456";
        let value = vec![7u8; 200];
        let b = encode_block(key, &value, timestamp(3, 99));
        assert_eq!(b.len() as u64, units_for(key.len(), value.len()) * UNIT);
        assert_eq!(b.len(), 256, "the paper's YCSB item (20 B key, 200 B value) is 4 units");
        assert_eq!(units_for(16, 32), 1, "the paper's db_bench item fits one unit");
        assert_eq!(decode_block(&b), Block::Valid { key: key.to_vec(), value: value.clone(), ts: timestamp(3, 99) });
        assert_eq!(header_key(&b[..HEADER_BYTES + key.len()]), Some(&key[..]));
        for at in [0, 2, 9, HEADER_BYTES, HEADER_BYTES + key.len() + 5] {
            let mut torn = b.clone();
            torn[at] ^= 0x10;
            assert_eq!(decode_block(&torn), Block::Invalid, "damage at byte {at}");
        }
        assert_eq!(decode_block(&vec![0; 256]), Block::Invalid);
        assert_eq!(decode_block(&b[..64]), Block::Invalid, "a READ shorter than the block");
    }

    #[test]
    fn placement_spreads_and_routes_chains_to_one_worker() {
        let g = geometry();
        let mut workers = [0u32; 4];
        let mut partitions = [0u32; 4];
        for i in 0u64..4000 {
            let p = g.place(&i.to_be_bytes());
            assert!(p.bucket < g.buckets);
            assert_eq!(p.worker as u64, p.bucket % 4, "a bucket's chain has one writer");
            workers[p.worker as usize] += 1;
            partitions[p.partition as usize] += 1;
        }
        assert!(workers.iter().chain(&partitions).all(|&n| (850..1150).contains(&n)), "{workers:?} {partitions:?}");
        let narrow = Geometry { fp_bits: 1, ..g };
        assert!((0u64..100).all(|i| narrow.place(&i.to_be_bytes()).fp <= 1));
    }

    #[test]
    fn pools_follow_the_table() {
        let g = geometry();
        assert_eq!(g.pool_offset(0), TABLE_OFFSET + (1 << 10) * 64);
        assert!(g.is_pool_bucket(g.pool_offset(3) + 64 * 15));
        assert!(!g.is_pool_bucket(g.end_offset()));
        assert!(!g.is_pool_bucket(g.bucket_offset(5)));
        assert_eq!(g.pool_of(g.pool_offset(2) + 64), 2);
    }
}

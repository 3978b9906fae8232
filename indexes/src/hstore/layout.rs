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
//! - **KV block** in the memory pool: the format [`crate::common::block`] holds (shared with
//!   `indirect` and Clover), re-exported here.

use crate::common::block::ADDR_MASK;
pub use crate::common::block::{
    Block, HEADER_BYTES, MAX_KEY_BYTES, MAX_UNITS, UNIT, VALID, decode_addr, decode_block, decode_block_word,
    encode_addr, encode_block, encode_block_word, header_key, max_value_bytes, timestamp, units_for,
};
use crate::hash::hash64;
use dmkit_rdma::RemoteAddr;

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

// The formats' sizes, checked at compile time.
const _: () = assert!(MAX_SLOTS as u64 * 8 + 8 == BUCKET_BYTES);
const _: () = assert!(NEXT_AT == MAX_SLOTS as u64 * 8);
const _: () = assert!(READY_OFFSET + 8 <= TABLE_OFFSET);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::block::OFFSET_UNITS_MASK;
    use dmkit_rdma::NodeId;

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

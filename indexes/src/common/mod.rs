//! Compute-node machinery that several indexes share (DESIGN §3).
//!
//! - [`primitive`]: `Mutex`, `Arc` and atomics from `std`, or from loom under `cfg(loom)`. Every
//!   structure here imports them from it and from nowhere else, so loom can check it.
//! - [`chunk`]: the local chunk allocator — remote memory fetched in large chunks from the
//!   memory nodes' allocator service and carved into small blocks without a round trip.
//! - [`block`]: the KV block format and block words shared by HStore, `indirect` and Clover.
//! - [`bytes`]: short byte strings kept inline (decoded keys and values without allocations).
//! - [`checksum`]: CRC-64/WE, over remote records (leaves, KV blocks, versions).
//! - [`hash`]: a deterministic hasher for host-side maps.
//! - [`batch`]: doorbell batches that span memory nodes (one per node, in flight together).
//! - [`bounds`]: whether a key lies within a scan's start and end bounds.
//! - [`change`]: a write's change to its key, and folding a combined batch of them.
//! - [`hocl`]: the local half of the hierarchical on-chip lock (Sherman's local lock table with
//!   hand-over of a held global lock).
//! - [`root`]: a B+tree's root word and each compute node's copy of it.
//! - [`rdwc`]: read delegation and write combining (SMART §4.2), with the SMART digest's fixes
//!   for its admission hazards (H6, H7).
//! - [`range_cache`]: B+tree internal-node cache by fence range and byte budget (Sherman, CHIME).
//! - [`superblock`]: the superblock framing the one-sided hash tables share.
//! - [`warm`]: splitting sorted keys among a node's children, for warming by keys.
//!
//! Everything here is per compute node: shared by that node's clients (`Sync`), its bytes
//! accounted, and never holding a lock across an `.await`.

pub mod batch;
pub mod block;
pub mod bounds;
pub mod bytes;
pub mod change;
pub mod checksum;
pub mod chunk;
pub mod hash;
pub mod hocl;
pub mod primitive;
pub mod range_cache;
pub mod rdwc;
pub mod root;
pub mod superblock;
pub mod warm;

/// Counters of one compute node's index cache (Sherman's node cache, SMART's radix cache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub bytes: u64,
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub invalidations: u64,
    /// Times the whole cache was dropped because evicting every entry did not bring it within
    /// its budget (SMART's radix cache with kept slots).
    pub rebuilds: u64,
}

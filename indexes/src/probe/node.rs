//! The probing table's compute-node state: the cached superblock and the allocator of blocks,
//! shared by the node's clients.

use super::layout::Superblock;
use crate::common::chunk::LocalChunkAllocator;
use crate::common::primitive::{Mutex, lock};
use std::sync::Arc;

/// Per compute node. `Sync`: on hardware the node's threads share it; no lock is held across an
/// `.await`.
#[derive(Debug)]
pub struct ProbeNode {
    superblock: Mutex<Option<Arc<Superblock>>>,
    /// Blocks are carved from chunks on the memory node of the slot that will point to them.
    pub chunks: LocalChunkAllocator,
}

impl ProbeNode {
    pub fn new(chunks: LocalChunkAllocator) -> ProbeNode {
        ProbeNode { superblock: Mutex::new(None), chunks }
    }

    /// The cached superblock, if a client of this node has read it.
    pub fn superblock(&self) -> Option<Arc<Superblock>> {
        lock(&self.superblock).clone()
    }

    /// Caches `sb` unless another client did first; returns the cached one.
    pub fn fill(&self, sb: Superblock) -> Arc<Superblock> {
        lock(&self.superblock).get_or_insert_with(|| Arc::new(sb)).clone()
    }

    /// Host bytes held: the superblock's encoding and the allocator's bookkeeping.
    pub fn bytes(&self) -> u64 {
        self.superblock().map_or(0, |sb| sb.encode().len() as u64) + self.chunks.bytes()
    }
}

//! The example index's compute-node state: the cached superblock, shared by the node's clients.

use super::layout::Superblock;
use crate::common::primitive::{Mutex, lock};
use std::sync::Arc;

/// Per compute node. `Sync`: on hardware the node's threads share it; the lock is never held
/// across an `.await`. Its primitives come from `common::primitive`, so loom checks it.
#[derive(Debug, Default)]
pub struct NodeCache {
    superblock: Mutex<Option<Arc<Superblock>>>,
}

impl NodeCache {
    /// The cached superblock, if a client of this node has read it.
    pub fn get(&self) -> Option<Arc<Superblock>> {
        lock(&self.superblock).clone()
    }

    /// Caches `sb` unless another client did first; returns the cached one. Every caller gets
    /// the same superblock, whoever filled the cache.
    pub fn fill(&self, sb: Superblock) -> Arc<Superblock> {
        lock(&self.superblock).get_or_insert_with(|| Arc::new(sb)).clone()
    }

    /// Bytes held: the superblock's encoding (bases included).
    pub fn bytes(&self) -> u64 {
        self.get().map_or(0, |sb| sb.encode().len() as u64)
    }
}

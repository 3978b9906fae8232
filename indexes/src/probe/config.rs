//! The probing table's options: their defaults and their validation.

use super::layout;
use crate::common::chunk::{ChunkOptions, DEFAULT_CHUNK_BYTES};
use std::collections::BTreeSet;

/// Options of the probing table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Slots in the table: at most this many distinct keys, ever.
    pub slots: u64,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    /// Memory nodes to spread groups over (`0..memory_nodes`).
    pub memory_nodes: u16,
    /// Bytes of the chunks blocks are carved from.
    pub chunk_bytes: u64,
    /// Bound on the CAS attempts of one write before [`IndexError::RetriesExhausted`].
    ///
    /// [`IndexError::RetriesExhausted`]: crate::IndexError::RetriesExhausted
    pub max_retries: u32,
    /// Slots a probe sequence may span: a key lives within this many slots of its home, so a
    /// search stops there and an insert that finds no room there answers
    /// [`IndexError::Full`]. Without a bound, an insert into a full table READs all of it.
    ///
    /// [`IndexError::Full`]: crate::IndexError::Full
    pub max_probe: u64,
    /// Planted bugs (removed protections), by name: [`REUSE_TOMBSTONES`], [`SKIP_LOST_CLAIM`],
    /// [`OVERWRITE_ANY_LOSS`], and one slip of address arithmetic, [`FLOOR_GROUPS_PER_NODE`].
    ///
    /// [`REUSE_TOMBSTONES`]: super::REUSE_TOMBSTONES
    /// [`SKIP_LOST_CLAIM`]: super::SKIP_LOST_CLAIM
    /// [`OVERWRITE_ANY_LOSS`]: super::OVERWRITE_ANY_LOSS
    /// [`FLOOR_GROUPS_PER_NODE`]: super::FLOOR_GROUPS_PER_NODE
    pub plants: BTreeSet<&'static str>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            slots: 1 << 17,
            max_key_bytes: 32,
            max_value_bytes: 64,
            memory_nodes: 1,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            max_retries: 10_000,
            max_probe: 128,
            plants: BTreeSet::new(),
        }
    }
}

impl ProbeOptions {
    pub fn validate(&self) -> Result<(), String> {
        if self.slots == 0 || self.slots >= 1 << 48 {
            return Err(format!("the probing table takes 1..2^48 slots, not {}", self.slots));
        }
        if self.max_key_bytes == 0
            || self.max_key_bytes > layout::MAX_KEY_BYTES
            || self.max_value_bytes > layout::MAX_VALUE_BYTES
        {
            return Err(format!(
                "the probing table takes keys of 1..={} bytes and values of up to {}",
                layout::MAX_KEY_BYTES,
                layout::MAX_VALUE_BYTES
            ));
        }
        if self.memory_nodes == 0 || self.memory_nodes as usize > layout::MAX_MEMORY_NODES {
            return Err(format!("the probing table spreads over 1..={} memory nodes", layout::MAX_MEMORY_NODES));
        }
        if self.max_retries == 0 || self.max_probe == 0 {
            return Err("max_retries and max_probe must be positive".into());
        }
        ChunkOptions::paged(self.memory_nodes, self.chunk_bytes).validate()
    }
}

//! The cluster hash table's options: their defaults and their validation.

use super::{PLANTS, layout};
use crate::common::chunk::{ChunkOptions, DEFAULT_CHUNK_BYTES};
use dmkit_rdma::RemoteAddr;
use std::collections::BTreeSet;

/// Options of the cluster hash table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Main buckets in total (spread round-robin over the memory nodes).
    pub main_buckets: u64,
    /// Slots per bucket, main and overflow alike (the paper: 8; at most [`layout::MAX_SLOTS`]).
    pub slots_per_bucket: u32,
    /// Overflow buckets per 100 main buckets, per memory node (the paper's ratio 3 = 300).
    pub overflow_percent: u32,
    /// Longest key (bytes).
    pub key_bytes: u32,
    /// Longest value (bytes).
    pub value_bytes: u32,
    /// Memory nodes `0..memory_nodes` hold the buckets and KV blocks.
    pub memory_nodes: u16,
    /// Bound on attempts of one operation before [`IndexError::RetriesExhausted`].
    ///
    /// [`IndexError::RetriesExhausted`]: crate::IndexError::RetriesExhausted
    pub max_retries: u32,
    /// Bytes of the chunks KV blocks are carved from (per compute node and memory node).
    pub chunk_bytes: u64,
    /// Planted bugs (removed protections), by name.
    pub plants: BTreeSet<&'static str>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            main_buckets: 1 << 16,
            slots_per_bucket: 8,
            overflow_percent: 300,
            key_bytes: 256,
            value_bytes: 1024,
            memory_nodes: 1,
            max_retries: 10_000,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            plants: BTreeSet::new(),
        }
    }
}

impl ClusterOptions {
    /// A clear message for options the index cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        let m = self.memory_nodes as u64;
        if self.memory_nodes == 0 || self.memory_nodes as usize > layout::MAX_MEMORY_NODES {
            return Err(format!("the cluster index spreads over 1..={} memory nodes", layout::MAX_MEMORY_NODES));
        }
        if self.main_buckets < m {
            return Err(format!(
                "the cluster index needs at least one main bucket per memory node ({} for {m} nodes)",
                self.main_buckets
            ));
        }
        if self.slots_per_bucket == 0 || self.slots_per_bucket > layout::MAX_SLOTS {
            return Err(format!(
                "slots_per_bucket must be 1..={} (a bucket fits two 64-byte units), not {}",
                layout::MAX_SLOTS,
                self.slots_per_bucket
            ));
        }
        let main_per_node = layout::main_on(self.main_buckets, m, 0);
        let overflow_per_node = layout::overflow_for(main_per_node, self.overflow_percent);
        if overflow_per_node >= u32::MAX as u64 {
            return Err(format!("{overflow_per_node} overflow buckets per memory node do not fit a 32-bit link"));
        }
        let region = main_per_node
            .checked_add(overflow_per_node)
            .and_then(|b| b.checked_add(1))
            .and_then(|b| b.checked_mul(layout::bucket_stride(self.slots_per_bucket)));
        if region.is_none_or(|r| r >= RemoteAddr::OFFSET_LIMIT / 2) {
            return Err("the table does not fit a memory node's address space".into());
        }
        if self.key_bytes == 0 || self.key_bytes > u16::MAX as u32 || self.value_bytes > u16::MAX as u32 {
            return Err("key_bytes must be 1..=65535 and value_bytes at most 65535".into());
        }
        let units = layout::block_units(self.key_bytes as usize, self.value_bytes as usize);
        if units > layout::MAX_BLOCK_UNITS {
            return Err(format!(
                "a KV block of a {}-byte key and a {}-byte value takes {units} units of 64 bytes; a slot names at most {}",
                self.key_bytes,
                self.value_bytes,
                layout::MAX_BLOCK_UNITS
            ));
        }
        if self.max_retries == 0 {
            return Err("max_retries must be positive".into());
        }
        let chunks = ChunkOptions::paged(self.memory_nodes, self.chunk_bytes);
        chunks.validate()?;
        if self.chunk_bytes < 4 * (units * layout::BLOCK_UNIT) as u64 {
            return Err(format!("chunks of {} bytes are too small for KV blocks of {units} units", self.chunk_bytes));
        }
        for p in &self.plants {
            if !PLANTS.iter().any(|k| k.name == *p) {
                return Err(format!("unknown planted bug '{p}'"));
            }
        }
        Ok(())
    }
}

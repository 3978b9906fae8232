//! The example hash table's options: their defaults and their validation.

use super::layout;
use std::collections::BTreeSet;

/// Options of the example hash table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExampleOptions {
    /// Buckets in total.
    pub buckets: u64,
    pub slots_per_bucket: u32,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    /// Memory nodes to spread buckets over (`0..memory_nodes`).
    pub memory_nodes: u16,
    /// Bound on attempts of one operation before [`IndexError::RetriesExhausted`].
    ///
    /// [`IndexError::RetriesExhausted`]: crate::IndexError::RetriesExhausted
    pub max_retries: u32,
    /// Planted bugs (removed protections), by name.
    pub plants: BTreeSet<&'static str>,
}

impl Default for ExampleOptions {
    fn default() -> Self {
        ExampleOptions {
            buckets: 1 << 16,
            slots_per_bucket: 4,
            max_key_bytes: 32,
            max_value_bytes: 64,
            memory_nodes: 1,
            max_retries: 10_000,
            plants: BTreeSet::new(),
        }
    }
}

impl ExampleOptions {
    pub fn validate(&self) -> Result<(), String> {
        if self.buckets == 0 || self.slots_per_bucket == 0 {
            return Err("the example index needs at least one bucket and one slot per bucket".into());
        }
        if self.max_key_bytes == 0 || self.max_key_bytes > 1024 || self.max_value_bytes > 4096 {
            return Err("the example index takes keys of 1..=1024 bytes and values of up to 4096".into());
        }
        if self.memory_nodes == 0 || self.memory_nodes as usize > layout::MAX_MEMORY_NODES {
            return Err(format!("the example index spreads over 1..={} memory nodes", layout::MAX_MEMORY_NODES));
        }
        if self.max_retries == 0 {
            return Err("max_retries must be positive".into());
        }
        Ok(())
    }
}

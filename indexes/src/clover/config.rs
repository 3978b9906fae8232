//! Clover's options: their defaults, their validation, and where the metadata server runs.

use super::layout::{HEADER, UNIT};
use crate::common::chunk::{ChunkOptions, DEFAULT_CHUNK_BYTES};
use dmkit_rdma::NodeId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloverOptions {
    pub memory_nodes: u16,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    /// RPC threads of the metadata server.
    pub rpc_threads: u16,
    /// Shortcut words the MS can hand out (one per key ever inserted).
    pub max_keys: u64,
    /// Bound on the versions one operation follows and on its CAS attempts.
    pub max_retries: u32,
    pub chunk_bytes: u64,
    /// Clients cache each key's shortcut address and last seen tail (pDPM's local query
    /// cache); off, every operation asks the MS (`MITSUME_DISABLE_LOCAL_QUERY_CACHE`).
    pub query_cache: bool,
    pub plants: std::collections::BTreeSet<&'static str>,
}

impl Default for CloverOptions {
    fn default() -> Self {
        CloverOptions {
            memory_nodes: 1,
            max_key_bytes: 64,
            max_value_bytes: 1024,
            rpc_threads: 4,
            max_keys: 1 << 20,
            max_retries: 100_000,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            query_cache: true,
            plants: Default::default(),
        }
    }
}

impl CloverOptions {
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_nodes == 0 || self.memory_nodes > 256 {
            return Err(format!("clover: 1 to 256 memory nodes, got {}", self.memory_nodes));
        }
        if !(1..=255).contains(&self.max_key_bytes) {
            return Err(format!("clover: keys of 1 to 255 bytes, got {}", self.max_key_bytes));
        }
        let units = (HEADER as u64 + self.max_key_bytes as u64 + self.max_value_bytes as u64).div_ceil(UNIT);
        if units > 255 || self.max_value_bytes > u16::MAX as u32 {
            return Err(format!("clover: a {}-byte value does not fit a block of 255 units", self.max_value_bytes));
        }
        if self.max_keys == 0 || self.max_retries == 0 || self.rpc_threads == 0 {
            return Err("clover: max_keys, max_retries and rpc_threads must be positive".into());
        }
        ChunkOptions::paged(self.memory_nodes, self.chunk_bytes).validate()
    }

    /// The metadata server's node (the first server node).
    pub fn ms_node(&self) -> NodeId {
        NodeId(self.memory_nodes)
    }
}

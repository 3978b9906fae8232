//! HStore's options and its named configurations (`hstore`, `hstore-sync`, `faithful`,
//! `faithful-sync`): the protocol, sizes and servers a deployment runs with.

use super::layout::{self, Geometry};
use super::wire;
use crate::PlantedBug;
use crate::common::chunk::{ChunkOptions, DEFAULT_CHUNK_BYTES};
use dmkit_rdma::{NodeId, RemoteAddr};
use std::collections::BTreeSet;

/// Options of one HStore deployment (one HTS and one SLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HStoreOptions {
    /// The named configuration these options came from.
    pub config: &'static str,
    pub memory_nodes: u16,
    /// Buckets of the table (no resizing: over-provision, digest decision 5).
    pub buckets: u64,
    /// Slots used per bucket (7; fewer in checking presets, to make chains).
    pub slots: u8,
    /// Fingerprint bits (8; fewer in checking presets, to make collisions).
    pub fp_bits: u8,
    /// HTS workers (and logs); the paper's 4.
    pub hts_workers: u16,
    /// SLS partitions (and workers); the paper's 4.
    pub sls_partitions: u16,
    /// RPC threads of each server; the paper's 4.
    pub rpc_threads: u16,
    /// Each worker shares a core with an RPC thread (the paper: one of each per hyper-threaded
    /// core); off, every thread has a core.
    pub hyperthreads: bool,
    /// Overflow buckets of each HTS worker's pool.
    pub pool_buckets: u64,
    /// Most entries of one log sync (digest decision 8: 64).
    pub batch_entries: u32,
    /// Largest message (request or reply) the servers send: 4 KiB, the real backend's `call`.
    pub max_message_bytes: u32,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    /// HStore (sync): the SLS acks a log sync only once it applied it.
    pub sync_skiplist: bool,
    /// V1's fix: SLS reads wait until what they drained is committed.
    pub commit_wait: bool,
    /// V3's fix: the read lease and reuse delay (`None`: freed blocks are reused at once). It
    /// must exceed the slowest read the platform sees: 50 ms, far above a simulated read, and
    /// above a scan's call in the Soft-RoCE VM (tens of milliseconds when starved); the price
    /// is memory, the blocks freed in the last 50 ms.
    pub lease_ns: Option<u64>,
    /// V2's fix: a write whose call fails or is blocked is retried until acknowledged (else
    /// reported failed at once, as the paper's client would).
    pub retry_writes: bool,
    /// Retried writes are answered from the recorded effect of their first application.
    pub dedup: bool,
    /// Bound on a client's retries of one operation.
    pub max_retries: u32,
    /// First back-off after a blocked or failed call (doubling, up to 64 times this).
    pub backoff_ns: u64,
    /// How long clients send GETs to the SLS after finding the HTS down, before trying the
    /// table again (a try at a dead HTS costs a transport timeout: 5 ms keeps that to 2% of a
    /// degraded client's time, in place of the paper's manager telling clients).
    pub down_probe_ns: u64,
    pub chunk_bytes: u64,
    pub hash_seed: u64,
    pub plants: BTreeSet<&'static str>,
}

impl Default for HStoreOptions {
    fn default() -> Self {
        HStoreOptions {
            config: "hstore",
            memory_nodes: 1,
            buckets: 1 << 16,
            slots: layout::MAX_SLOTS as u8,
            fp_bits: 8,
            hts_workers: 4,
            sls_partitions: 4,
            rpc_threads: 4,
            hyperthreads: true,
            pool_buckets: 4096,
            batch_entries: 64,
            max_message_bytes: 4096,
            max_key_bytes: 64,
            max_value_bytes: 1024,
            sync_skiplist: false,
            commit_wait: true,
            lease_ns: Some(50_000_000),
            retry_writes: true,
            dedup: true,
            max_retries: 4096,
            backoff_ns: 2_000,
            down_probe_ns: 5_000_000,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            hash_seed: 0,
            plants: BTreeSet::new(),
        }
    }
}

/// The named configurations: the default is the digest's fixed protocol; `faithful` is the
/// paper's (gaps V1–V3 open); `-sync` is HStore (sync), the paper's own baseline.
pub const CONFIGS: [&str; 4] = ["hstore", "hstore-sync", "faithful", "faithful-sync"];

impl HStoreOptions {
    /// The wait before try `attempt` (0-based) again after a blocked or failed call:
    /// `backoff_ns`, doubling, up to 64 times it (saturating: `validate` accepts any positive
    /// `backoff_ns`, and a shift of one above 2^57 would wrap to a short wait).
    pub fn retry_wait_ns(&self, attempt: u32) -> u64 {
        self.backoff_ns.saturating_mul(1 << attempt.min(6))
    }

    /// The named configuration `name` (see [`CONFIGS`]).
    pub fn named(name: &str) -> Result<HStoreOptions, String> {
        let mut o = HStoreOptions::default();
        o.configure(name)?;
        Ok(o)
    }

    /// Switches these options to configuration `name`, keeping sizes and geometry.
    pub fn configure(&mut self, name: &str) -> Result<(), String> {
        let config = CONFIGS
            .iter()
            .find(|c| **c == name)
            .ok_or_else(|| format!("hstore has no configuration '{name}' (configurations: {})", CONFIGS.join(", ")))?;
        let faithful = name.starts_with("faithful");
        self.config = config;
        self.sync_skiplist = name.ends_with("-sync");
        self.commit_wait = !faithful;
        self.retry_writes = !faithful;
        self.dedup = !faithful;
        if faithful {
            self.lease_ns = None;
        } else if self.lease_ns.is_none() {
            self.lease_ns = HStoreOptions::default().lease_ns;
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), String> {
        let err = |m: String| Err(format!("hstore: {m}"));
        if self.memory_nodes == 0 || self.memory_nodes > 256 {
            return err(format!(
                "1 to 256 memory nodes (a slot's address names 8 bits of node), got {}",
                self.memory_nodes
            ));
        }
        if self.buckets == 0 || self.buckets > 1 << 36 {
            return err(format!("buckets must be in 1..=2^36, got {}", self.buckets));
        }
        if !(1..=layout::MAX_SLOTS as u8).contains(&self.slots) {
            return err(format!("slots must be 1 to {}, got {}", layout::MAX_SLOTS, self.slots));
        }
        if !(1..=8).contains(&self.fp_bits) {
            return err(format!("fp_bits must be 1 to 8, got {}", self.fp_bits));
        }
        if self.hts_workers == 0 || self.sls_partitions == 0 || self.rpc_threads == 0 {
            return err("workers, partitions and RPC threads must be positive".into());
        }
        if self.pool_buckets == 0 || self.batch_entries == 0 {
            return err("pool_buckets and batch_entries must be positive".into());
        }
        let key = self.max_key_bytes as usize;
        if key == 0 || key > layout::MAX_KEY_BYTES {
            return err(format!("keys of 1 to {} bytes (the block's length byte), got {key}", layout::MAX_KEY_BYTES));
        }
        if self.max_value_bytes as usize > layout::max_value_bytes(key) {
            return err(format!(
                "values of at most {} bytes fit a {key}-byte key in 255 units, got {}",
                layout::max_value_bytes(key),
                self.max_value_bytes
            ));
        }
        // A log sync must carry at least one entry, and a reply at least one item.
        let need = wire::FIXED_BYTES + wire::entry_bytes(key).max(wire::item_bytes(key));
        if (self.max_message_bytes as usize) < need {
            return err(format!(
                "max_message_bytes {} cannot carry one {key}-byte key ({need})",
                self.max_message_bytes
            ));
        }
        if self.max_retries == 0 || self.backoff_ns == 0 {
            return err("max_retries and backoff_ns must be positive".into());
        }
        if self.lease_ns == Some(0) {
            return err("a lease of 0 ns would restart every read".into());
        }
        ChunkOptions::paged(self.memory_nodes, self.chunk_bytes).validate()?;
        let buckets = (self.pool_buckets.checked_mul(self.hts_workers as u64))
            .and_then(|pools| pools.checked_add(self.buckets))
            .and_then(|b| b.checked_mul(layout::BUCKET_BYTES))
            .and_then(|bytes| bytes.checked_add(layout::TABLE_OFFSET));
        match buckets {
            Some(end) if end < RemoteAddr::OFFSET_LIMIT => {}
            _ => {
                return err(format!(
                    "the table and pools ({} + {} x {} buckets) do not fit the HTS's memory",
                    self.buckets, self.hts_workers, self.pool_buckets
                ));
            }
        }
        Ok(())
    }

    pub fn geometry(&self) -> Geometry {
        Geometry {
            buckets: self.buckets,
            slots: self.slots as usize,
            fp_bits: self.fp_bits,
            workers: self.hts_workers,
            partitions: self.sls_partitions,
            pool_buckets: self.pool_buckets,
            seed: self.hash_seed,
        }
    }

    /// The HTS's node (the first server node).
    pub fn hts_node(&self) -> NodeId {
        NodeId(self.memory_nodes)
    }

    /// The SLS's node (the second server node).
    pub fn sls_node(&self) -> NodeId {
        NodeId(self.memory_nodes + 1)
    }

    pub fn planted(&self, bug: PlantedBug) -> bool {
        self.plants.contains(bug.name)
    }

    /// Buckets for `keys` items at about 3 per bucket (the digest's λ ≈ 3, decision 5), a
    /// power of two, and overflow pools for the chains that leaves.
    pub fn sized_for(mut self, keys: u64) -> HStoreOptions {
        self.buckets = (keys / 3).max(16).next_power_of_two();
        // Poisson(λ ≤ 3) leaves about 1.2% of buckets with more than 7 items; keep 4 times
        // that (and room for inserts) in the pools.
        self.pool_buckets = (self.buckets / 16 / self.hts_workers as u64).max(256);
        self
    }
}

#[cfg(test)]
mod retry_wait_tests {
    use super::HStoreOptions;

    #[test]
    fn the_retry_wait_doubles_up_to_64_times_and_never_wraps() {
        let o = HStoreOptions { backoff_ns: 2_000, ..HStoreOptions::default() };
        assert_eq!(
            (0..8).map(|a| o.retry_wait_ns(a)).collect::<Vec<_>>(),
            [2, 4, 8, 16, 32, 64, 128, 128].map(|k| k * 1_000)
        );
        let huge = HStoreOptions { backoff_ns: 1 << 60, ..HStoreOptions::default() };
        assert_eq!(huge.retry_wait_ns(0), 1 << 60);
        assert_eq!(huge.retry_wait_ns(6), u64::MAX, "saturates instead of wrapping (2^60 << 6 would be 0)");
    }
}

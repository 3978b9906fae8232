//! Values out of line: any index, with each value in a KV block of the memory pool and the
//! index mapping keys to block words.
//!
//! HStore compares itself with Sherman and Clover "under disaggregated memory", values in the
//! memory pool; the HStore digest (decision 19) recommends running Sherman that way, so that a
//! GET costs a value READ after the index and a SCAN one READ per value, as HStore's do.
//! `--index sherman --config sherman-hstore-ool` is this adapter over `sherman-hstore`.
//!
//! - **search**: the inner index's search gives the block word `[units:8 | addr:48]` (an 8-byte
//!   value); then one READ of the block, whose key must match (HStore's block format,
//!   [`crate::common::block`]).
//! - **insert / update**: allocate a block, WRITE it and wait for the completion, then the inner
//!   index's insert or update of the word. An update of an absent key frees its block at once
//!   (never published).
//! - **delete**: the inner index's delete.
//! - **scan**: the inner index's scan, then one READ per pair, one after another.
//!
//! Blocks a write replaces are never reused (the index does not return the old word), so no
//! reader can see a block change: the adapter is linearizable exactly when the inner index is.
//! Remote memory grows with every write; runs are short enough for that not to matter.

use crate::common::block::{self as layout, Block};
use crate::common::chunk::{ChunkOptions, DEFAULT_CHUNK_BYTES, LocalChunkAllocator};
use crate::registry::RunShape;
use crate::{Change, Counters, Index, IndexError, IndexKind, InvariantReport, Limits, Pairs, PlantedBug};
use dmkit_rdma::{Buf, Caps, Client, MemoryView};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

/// What names a configuration with values out of line: `sherman-hstore-ool` is
/// `sherman-hstore` under this adapter (the registry's `Indirect<Sherman>` entry).
pub const OUT_OF_LINE: &str = "-ool";

/// An index with values out of line.
#[derive(Debug)]
pub struct Indirect<K>(PhantomData<K>);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndirectOptions<O> {
    /// The inner index's options; its values must be 8 bytes.
    pub inner: O,
    pub max_value_bytes: u32,
    pub memory_nodes: u16,
    pub chunk_bytes: u64,
}

impl<O> IndirectOptions<O> {
    pub fn new(inner: O, max_value_bytes: u32, memory_nodes: u16) -> IndirectOptions<O> {
        IndirectOptions { inner, max_value_bytes, memory_nodes, chunk_bytes: DEFAULT_CHUNK_BYTES }
    }
}

/// A compute node's state: the inner index's and the block allocator.
#[derive(Debug)]
pub struct IndirectNode<N> {
    inner: Arc<N>,
    chunks: LocalChunkAllocator,
}

/// One client's handle.
#[derive(Debug)]
pub struct IndirectHandle<H, N, C> {
    inner: H,
    node: Arc<IndirectNode<N>>,
    ctx: C,
    limits: Limits,
    blocks: u64,
}

impl<H: Index, N, C: Client + Clone + 'static> IndirectHandle<H, N, C> {
    async fn value_at(&self, key: &[u8], w: &[u8]) -> Result<Vec<u8>, IndexError> {
        let w = u64::from_le_bytes(
            w.try_into().map_err(|_| IndexError::Corrupt(format!("a block word of {} bytes", w.len())))?,
        );
        let (block, units) = layout::decode_block_word(w);
        let bytes = self.ctx.read(block, Buf::zeroed((units * layout::UNIT) as usize)).await?;
        match layout::decode_block(&bytes) {
            Block::Valid { key: k, value, .. } if k == key => Ok(value),
            _ => Err(IndexError::Corrupt(format!("the block at {block} is not a complete block of its key"))),
        }
    }

    /// Writes a block for `key` and `value`; returns it and its word.
    async fn write_block(
        &mut self,
        key: &[u8],
        value: &[u8],
    ) -> Result<(dmkit_rdma::RemoteAddr, u64, Vec<u8>), IndexError> {
        self.limits.check_key(key)?;
        self.limits.check_value(value)?;
        let units = layout::units_for(key.len(), value.len());
        let at = self.node.chunks.alloc(&self.ctx, units * layout::UNIT, layout::UNIT).await?;
        self.blocks += 1;
        let ts = layout::timestamp(self.ctx.identity().client, self.blocks);
        self.ctx.write(at, Buf::from(layout::encode_block(key, value, ts))).await?;
        Ok((at, units, layout::encode_block_word(at, units).to_le_bytes().to_vec()))
    }
}

impl<H: Index, N, C: Client + Clone + 'static> Index for IndirectHandle<H, N, C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        match self.inner.search(key).await? {
            Some(w) => Ok(Some(self.value_at(key, &w).await?)),
            None => Ok(None),
        }
    }

    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        match change {
            Change::Upsert(value) => {
                let (_, _, w) = self.write_block(key, &value).await?;
                self.inner.write(key, Change::Upsert(w)).await
            }
            Change::Update(value) => {
                let (at, units, w) = self.write_block(key, &value).await?;
                let existed = self.inner.write(key, Change::Update(w)).await?;
                if !existed {
                    self.node.chunks.free(at, units * layout::UNIT)?;
                }
                Ok(existed)
            }
            Change::Delete => {
                self.limits.check_key(key)?;
                self.inner.write(key, Change::Delete).await
            }
        }
    }

    async fn scan(&mut self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Pairs, IndexError> {
        let words = self.inner.scan(start, end, limit).await?;
        let mut out = Vec::with_capacity(words.len());
        for (key, w) in words {
            let value = self.value_at(&key, &w).await?;
            out.push((key, value));
        }
        Ok(out)
    }

    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
}

impl<K: IndexKind> IndexKind for Indirect<K> {
    const NAME: &'static str = K::NAME;
    const SUPPORTS_SCAN: bool = K::SUPPORTS_SCAN;
    const DENSE_KEYS: Option<&'static str> = K::DENSE_KEYS;
    type Options = IndirectOptions<K::Options>;
    type NodeState = IndirectNode<K::NodeState>;
    type Handle<C: Client + Clone + 'static> = IndirectHandle<K::Handle<C>, K::NodeState, C>;

    fn limits(o: &Self::Options) -> Limits {
        let inner = K::limits(&o.inner);
        Limits { min_value_bytes: 0, max_value_bytes: o.max_value_bytes as usize, ..inner }
    }

    fn validate(o: &Self::Options) -> Result<(), String> {
        K::validate(&o.inner)?;
        let inner = K::limits(&o.inner);
        if !(inner.min_value_bytes..=inner.max_value_bytes).contains(&8) {
            return Err(format!("values out of line need an inner index of 8-byte values, not {inner:?}"));
        }
        let key = inner.max_key_bytes.min(layout::MAX_KEY_BYTES);
        if o.max_value_bytes as usize > layout::max_value_bytes(key) {
            return Err(format!("values of at most {} bytes fit a block", layout::max_value_bytes(key)));
        }
        ChunkOptions::paged(o.memory_nodes, o.chunk_bytes).validate()
    }

    /// A configuration of the inner index with [`OUT_OF_LINE`] appended: the inner index sized
    /// for the run with 8-byte values (its block words), values up to the run's size in blocks.
    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(Self::Options, String), String> {
        let base = config.strip_suffix(OUT_OF_LINE).unwrap_or(config);
        let (inner, _) = K::for_run(&RunShape { value_bytes: 8, ..shape.clone() }, base)?;
        let options = IndirectOptions::new(inner, shape.value_bytes as u32, shape.memory_nodes);
        Self::validate(&options).map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn serves(config: &str) -> bool {
        config.ends_with(OUT_OF_LINE)
    }

    fn servers(o: &Self::Options) -> crate::Servers {
        K::servers(&o.inner)
    }

    fn install<H: dmkit_rdma::service::ServiceHost>(o: &Self::Options, host: &mut H) -> Result<(), String> {
        K::install(&o.inner, host)
    }

    fn server_counters(o: &Self::Options, memory: &dyn MemoryView) -> BTreeMap<&'static str, u64> {
        K::server_counters(&o.inner, memory)
    }

    async fn create<C: Client>(o: &Self::Options, ctx: &C) -> Result<(), IndexError> {
        K::create(&o.inner, ctx).await
    }

    fn node_state(o: &Self::Options, caps: &Caps) -> Self::NodeState {
        let chunks = LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes);
        IndirectNode { inner: Arc::new(K::node_state(&o.inner, caps)), chunks }
    }

    fn inherit(node: &Self::NodeState, loader: &Self::NodeState) {
        K::inherit(&node.inner, &loader.inner);
        node.chunks.inherit(&loader.chunks);
    }

    fn node_state_bytes(n: &Self::NodeState) -> u64 {
        K::node_state_bytes(&n.inner) + n.chunks.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &Self::Options, node: Arc<Self::NodeState>, ctx: C) -> Self::Handle<C> {
        IndirectHandle {
            inner: K::open(&o.inner, node.inner.clone(), ctx.clone()),
            node,
            ctx,
            limits: Self::limits(o),
            blocks: 0,
        }
    }

    fn check_invariants(o: &Self::Options, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        K::check_invariants(&o.inner, memory)
    }

    fn warm(o: &Self::Options, node: &Self::NodeState, memory: &dyn MemoryView) -> Result<(), String> {
        K::warm(&o.inner, &node.inner, memory)
    }

    fn warm_keys(
        o: &Self::Options,
        node: &Self::NodeState,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        K::warm_keys(&o.inner, &node.inner, memory, keys)
    }

    fn replay_keys(
        o: &Self::Options,
        node: &Self::NodeState,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        K::replay_keys(&o.inner, &node.inner, memory, keys)
    }

    fn warm_like(
        o: &Self::Options,
        node: &Self::NodeState,
        warmed: &Self::NodeState,
        memory: &dyn MemoryView,
    ) -> Result<(), String> {
        K::warm_like(&o.inner, &node.inner, &warmed.inner, memory)
    }

    fn node_counters(node: &Self::NodeState) -> BTreeMap<&'static str, u64> {
        K::node_counters(&node.inner)
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &[]
    }

    fn plant(_o: &mut Self::Options, bug: &str) -> Result<(), String> {
        Err(format!("values out of line have no planted bugs (asked for '{bug}')"))
    }
}

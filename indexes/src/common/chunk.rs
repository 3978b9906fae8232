//! # The local chunk allocator
//!
//! Indexes allocate many small remote blocks (SMART's 2,064-B internal nodes and leaves,
//! Sherman's 1-KiB pages, CHIME's leaves, KV blocks). One allocator `call` per block would put
//! a two-sided round trip and the memory node's weak CPU on the critical path of every split, so
//! the seeds' artifacts fetch remote memory in **chunks** (16 MiB in SMART's and CHIME's, 32 MiB
//! in Sherman's) from the memory node's allocator service ([`dmkit_rdma::alloc`]) and carve
//! blocks out of them locally with a bump pointer (SMART digest §2.1 and open decision 9;
//! Sherman digest §3.12). [`LocalChunkAllocator`] is that compute-side half.
//!
//! ## Shape
//!
//! One allocator per compute node, shared by the node's clients (`Sync`; DESIGN §3's
//! per-compute-node level of state). For each memory node it keeps, behind one lock:
//!
//! - the **current chunk**, carved by a bump pointer (`next` rises to `end`);
//! - **spare chunks**: whole chunks installed while the current one still had room — the chunk
//!   fetched by the loser of a refill race (below), kept for later, never dropped;
//! - **exact-size free lists**: blocks given back with [`LocalChunkAllocator::free`], handed out
//!   again to a request of the same size (and alignment) before the chunk is touched;
//! - every range it ever reserved on that node (one entry per chunk or direct block), to refuse a
//!   free of memory outside what it carved. A free is not checked against the size its block
//!   was handed out with: that would take a record per live block.
//!
//! [`LocalChunkAllocator::alloc`] picks the memory node round-robin **per block** (the SMART
//! digest's recommendation: "place nodes round-robin across MNs"; SMART's artifact rotates per
//! chunk and per thread); [`LocalChunkAllocator::alloc_on`] takes the caller's node.
//!
//! ## The synchronous part and the asynchronous part
//!
//! Everything that touches the shared state is synchronous and takes the node's lock once:
//! [`LocalChunkAllocator::try_carve`] (free list, then the current chunk, then a spare),
//! [`LocalChunkAllocator::install_chunk`], [`LocalChunkAllocator::install_chunk_and_carve`] and
//! [`LocalChunkAllocator::free`]. The asynchronous `alloc` only composes them with one
//! allocator `call` on a miss — so no lock is ever held across an `.await` (DESIGN §3), by
//! construction rather than by care, and loom checks the synchronous part on its own
//! (`tests/loom_chunk.rs`).
//!
//! The price is a **refill race**: clients of one compute node that miss at the same time each
//! fetch a chunk. Each installs its chunk and carves its own block under the lock; the first
//! install becomes the current chunk, and a chunk that arrives while the node already has room
//! for its fetcher's block is kept as a spare (counted in [`ChunkAccount::spare_installs`]) and
//! carved when the current one runs out, before anyone fetches again. No chunk is lost and no
//! block is handed out twice. The races are not rare when clients allocate back to back (in
//! `tests/chunk_sim.rs`, with 8 clients per compute node, most chunks arrive as spares), but
//! the surplus is bounded: a client fetches only when its node has no spare, so since the
//! spares last ran out each client installed at most one, and a (compute node, memory node)
//! pair never holds more spares than the compute node has clients — the reservation SMART's
//! artifact makes anyway with one chunk per thread. The alternative,
//! one fetch in flight per memory node with the others waiting on a notification, adds a
//! waiting path (and its cancellation cases) to save remote memory that is only reserved.
//!
//! ## Blocks that do not come from a chunk
//!
//! A block larger than a quarter of a chunk, or aligned more strictly than a chunk, is fetched
//! whole with its own `call` (a *direct* block): carving it would retire up to a quarter of a
//! chunk at a time. When a memory node can no longer give a whole chunk, blocks on it are
//! fetched directly too, so the node's last bytes are still used; only when it refuses the block
//! itself does `alloc_on` fail with [`VerbsError::RemoteMemoryExhausted`] (and `alloc` moves on to
//! the next memory node first). The smallest size a node refused is remembered, so later requests
//! of at least that size fail without another `call` (remote memory is never returned to the
//! memory node by this allocator, so that space does not come back while it lives).
//!
//! ## Invariants (asserted on every change, checked by loom and by `tests/chunk_sim.rs`)
//!
//! 1. **Conservation.** For each memory node, the bytes of installed chunks equal the bytes
//!    carved from them, plus alignment padding, plus the tails of retired chunks, plus what the
//!    current and spare chunks still hold ([`ChunkAccount::is_conserved`]).
//! 2. **No block is handed out twice.** Chunks and direct blocks are disjoint (an overlapping
//!    install is refused as a protocol error); the bump pointer only rises; a free-listed block
//!    leaves its list when it is handed out; a block freed twice is refused.
//! 3. **A fresh chunk serves any chunk-class request** (at most a quarter of a chunk, aligned at
//!    most as a chunk is), so `alloc` needs exactly one `call` per miss and never loops.
//!
//! ## What the caller owes
//!
//! - Free only blocks that no other client can still reach: a block given back is handed to the
//!   next request of its size at once. SMART frees only nodes it allocated for a CAS that then
//!   failed (never published); a protocol that frees published memory needs its own grace period.
//! - Remote memory is not zeroed here: the memory node's memory starts zeroed, but a reused block
//!   holds what its last owner wrote.
//! - Dropping an `alloc` future after its `call` was posted leaks that chunk on the memory node
//!   (the call executes, its answer is lost); the allocator itself stays consistent.
//!
//! ## Costs
//!
//! A hit costs no verb and no simulated CPU (a few comparisons under a lock that no `.await`
//! holds). One lock per memory node serialises a compute node's clients only while they carve;
//! SMART's artifact gives each thread its own allocator instead, which a per-thread front cache
//! could add if a profile shows contention here. Blocks of different alignments carved from one
//! chunk pay padding (less than each block's alignment): an index that allocates one alignment
//! pays none, and the deliberately mixed sizes of `tests/chunk_sim.rs` lose about a quarter.

use super::primitive::{AtomicU64, AtomicUsize, Mutex, Ordering, lock};
use crate::IndexError;
use dmkit_rdma::alloc::ChunkAllocator as MemoryNodeAllocator;
use dmkit_rdma::{Client, NodeId, Region, RemoteAddr, VerbsError};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::mem::size_of;

/// SMART's and CHIME's chunk size (SMART digest §2.1: 16 MiB per compute-node thread).
pub const DEFAULT_CHUNK_BYTES: u64 = 16 << 20;

/// Alignment of every chunk (a page): enough for any node layout the seeds use (64 B or 256 B).
pub const DEFAULT_CHUNK_ALIGN: u64 = 4096;

/// A block larger than `chunk_bytes / DIRECT_FRACTION` is fetched whole, not carved: a request
/// that no longer fits retires the rest of the current chunk, so this bounds that waste.
pub const DIRECT_FRACTION: u64 = 4;

/// Whether allocators created from now on record every block they hand out ([`check_frees`]).
static CHECK_FREES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every [`LocalChunkAllocator`] created after this call record each block it hands out
/// and refuse a free that does not give back exactly such a block, with its size, noting the
/// first for [`take_bad_free`] (the checker turns it on: `dmkit check`, the verify tests). Off
/// by default: a record per block would cost memory at 60 M keys, and nothing else reads it.
/// Prompted by mutation: Clover freeing an unused 64-byte version as 65 bytes was refused only
/// when the block was its chunk's last; otherwise the free was accepted, a leak nobody saw.
pub fn check_frees(on: bool) {
    CHECK_FREES.store(on, std::sync::atomic::Ordering::Relaxed);
}

thread_local! {
    /// The first free [`check_frees`] refused on this thread since [`take_bad_free`].
    static BAD_FREE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The first free that [`check_frees`] refused on this thread (a simulation runs on one), since
/// the last call; the checker judges a run with one a violation.
pub fn take_bad_free() -> Option<String> {
    BAD_FREE.with(|b| b.borrow_mut().take())
}

/// How a [`LocalChunkAllocator`] fetches and carves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkOptions {
    /// Memory nodes `0..memory_nodes` to allocate on.
    pub memory_nodes: u16,
    /// Bytes of one chunk.
    pub chunk_bytes: u64,
    /// Alignment of every chunk; blocks aligned more strictly are fetched whole.
    pub chunk_align: u64,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions { memory_nodes: 1, chunk_bytes: DEFAULT_CHUNK_BYTES, chunk_align: DEFAULT_CHUNK_ALIGN }
    }
}

impl ChunkOptions {
    /// Chunks of `chunk_bytes` on memory nodes `0..memory_nodes`, page-aligned
    /// ([`DEFAULT_CHUNK_ALIGN`]): what the indexes allocate with.
    pub fn paged(memory_nodes: u16, chunk_bytes: u64) -> ChunkOptions {
        ChunkOptions { memory_nodes, chunk_bytes, chunk_align: DEFAULT_CHUNK_ALIGN }
    }

    /// A clear message for options the allocator cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_nodes == 0 || self.memory_nodes >= NodeId::MAX {
            return Err(format!("the chunk allocator needs 1..{} memory nodes", NodeId::MAX));
        }
        if !self.chunk_align.is_power_of_two() || self.chunk_align > MemoryNodeAllocator::MAX_ALIGN {
            return Err(format!(
                "chunk alignment {} is not a power of two of at most {}",
                self.chunk_align,
                MemoryNodeAllocator::MAX_ALIGN
            ));
        }
        if self.chunk_bytes < DIRECT_FRACTION * 8 || self.chunk_bytes >= RemoteAddr::OFFSET_LIMIT {
            return Err(format!(
                "chunk size {} is outside {}..{} bytes",
                self.chunk_bytes,
                DIRECT_FRACTION * 8,
                RemoteAddr::OFFSET_LIMIT
            ));
        }
        Ok(())
    }
}

/// What the allocator did on one memory node (or, summed, on all of them). Counts are
/// cumulative except where a field says "now".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkAccount {
    /// Chunks installed, and their bytes.
    pub chunks: u64,
    pub chunk_bytes: u64,
    /// Blocks fetched whole (large, strictly aligned, or on a node out of whole chunks), and
    /// their bytes.
    pub direct_blocks: u64,
    pub direct_bytes: u64,
    /// Bytes of blocks carved from chunks by the bump pointer.
    pub carved_bytes: u64,
    /// Bytes skipped to align carved blocks.
    pub padding_bytes: u64,
    /// Unused tails of chunks retired because a block did not fit in them.
    pub retired_bytes: u64,
    /// Now: bytes the current and spare chunks can still be carved into.
    pub remaining_bytes: u64,
    /// Bytes given back with `free`, and bytes handed out again from the free lists.
    pub freed_bytes: u64,
    pub reused_bytes: u64,
    /// Now: blocks waiting in the free lists.
    pub free_blocks: u64,
    /// Chunks that arrived while their node already had room for the block they were fetched
    /// for (another client refilled first): kept as spares.
    pub spare_installs: u64,
}

impl ChunkAccount {
    /// Invariant 1: every installed byte is carved, padding, retired or remaining.
    pub fn is_conserved(&self) -> bool {
        self.carved_bytes
            .checked_add(self.padding_bytes)
            .and_then(|s| s.checked_add(self.retired_bytes))
            .and_then(|s| s.checked_add(self.remaining_bytes))
            == Some(self.chunk_bytes)
    }

    /// Bytes now held by the allocator's clients: handed out and not given back.
    pub fn live_bytes(&self) -> u64 {
        (self.carved_bytes + self.direct_bytes + self.reused_bytes).saturating_sub(self.freed_bytes)
    }

    /// Now: bytes waiting in the free lists.
    pub fn free_bytes(&self) -> u64 {
        self.freed_bytes - self.reused_bytes
    }

    /// Adds another account (another memory node's, another compute node's).
    pub fn add(&mut self, other: &ChunkAccount) {
        self.chunks += other.chunks;
        self.chunk_bytes += other.chunk_bytes;
        self.direct_blocks += other.direct_blocks;
        self.direct_bytes += other.direct_bytes;
        self.carved_bytes += other.carved_bytes;
        self.padding_bytes += other.padding_bytes;
        self.retired_bytes += other.retired_bytes;
        self.remaining_bytes += other.remaining_bytes;
        self.freed_bytes += other.freed_bytes;
        self.reused_bytes += other.reused_bytes;
        self.free_blocks += other.free_blocks;
        self.spare_installs += other.spare_installs;
    }
}

/// A chunk being carved: host offsets `[next, end)` are still free, `[base, next)` handed out or
/// padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    base: u64,
    next: u64,
    end: u64,
}

impl Chunk {
    fn remaining(&self) -> u64 {
        self.end - self.next
    }

    /// Where a block of `bytes` aligned to `align` would start, if it fits.
    fn fit(&self, bytes: u64, align: u64) -> Option<u64> {
        let start = self.next.checked_next_multiple_of(align)?;
        (start.checked_add(bytes)? <= self.end).then_some(start)
    }
}

/// A range this allocator got from a memory node: a chunk or a direct block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reserved {
    end: u64,
    /// For a retired chunk, where its bump pointer stopped; for a direct block, `end`; for the
    /// current and spare chunks, not used (their `Chunk` says).
    carved_end: u64,
}

/// The state for one memory node, behind that node's lock.
#[derive(Debug, Clone)]
struct NodeChunks {
    node: NodeId,
    /// `None` only before the first chunk: a retired chunk is replaced by a spare or stays
    /// current until the next install.
    current: Option<Chunk>,
    /// Whole chunks, never carved, oldest first.
    spares: VecDeque<Chunk>,
    /// Block size → offsets of free blocks of that size.
    free: BTreeMap<u64, BTreeSet<u64>>,
    /// Base offset → range, for everything reserved on this node.
    reserved: BTreeMap<u64, Reserved>,
    /// The smallest request this node's allocator refused (`u64::MAX`: none yet).
    refused_bytes: u64,
    account: ChunkAccount,
    /// With [`check_frees`] on: offset → bytes of every block handed out and not freed, so that
    /// a free of another size is caught. `None` otherwise (no record per block at scale).
    handed_out: Option<BTreeMap<u64, u64>>,
}

impl NodeChunks {
    fn new(node: NodeId) -> NodeChunks {
        NodeChunks {
            node,
            current: None,
            spares: VecDeque::new(),
            free: BTreeMap::new(),
            reserved: BTreeMap::new(),
            refused_bytes: u64::MAX,
            account: ChunkAccount::default(),
            handed_out: CHECK_FREES.load(std::sync::atomic::Ordering::Relaxed).then(BTreeMap::new),
        }
    }

    /// Notes a block handed out (with [`check_frees`] on).
    fn hand_out(&mut self, offset: u64, bytes: u64) -> u64 {
        if let Some(blocks) = &mut self.handed_out {
            blocks.insert(offset, bytes);
        }
        offset
    }

    fn remaining_bytes(&self) -> u64 {
        self.current.map_or(0, |c| c.remaining()) + self.spares.iter().map(Chunk::remaining).sum::<u64>()
    }

    fn account(&self) -> ChunkAccount {
        ChunkAccount { remaining_bytes: self.remaining_bytes(), ..self.account }
    }

    fn assert_conserved(&self) {
        let account = self.account();
        assert!(account.is_conserved(), "chunk allocator on {} lost track of bytes: {account:?}", self.node);
    }

    /// Carves a block: an exact-size free block first, then the current chunk, then spares
    /// (retiring the current chunk's tail). `chunk_class` requests only may touch chunks.
    fn carve(&mut self, bytes: u64, align: u64, chunk_class: bool) -> Option<u64> {
        if let Some(offsets) = self.free.get_mut(&bytes) {
            // The highest aligned offset: deterministic, and usually the block freed last.
            if let Some(&offset) = offsets.iter().rev().find(|&&o| o % align == 0) {
                offsets.remove(&offset);
                if offsets.is_empty() {
                    self.free.remove(&bytes);
                }
                self.account.reused_bytes += bytes;
                self.account.free_blocks -= 1;
                return Some(self.hand_out(offset, bytes));
            }
        }
        if !chunk_class {
            return None;
        }
        loop {
            let current = self.current.as_mut()?;
            if let Some(start) = current.fit(bytes, align) {
                self.account.padding_bytes += start - current.next;
                self.account.carved_bytes += bytes;
                current.next = start + bytes;
                assert!(start % align == 0 && current.next <= current.end, "carved outside the chunk");
                self.assert_conserved();
                return Some(self.hand_out(start, bytes));
            }
            // The block does not fit: retire the current chunk if a spare can take over.
            let spare = self.spares.pop_front()?;
            let retired = std::mem::replace(current, spare);
            self.account.retired_bytes += retired.remaining();
            let range = self.reserved.get_mut(&retired.base).expect("a current chunk is reserved");
            range.carved_end = retired.next;
        }
    }

    /// Registers `[offset, offset + bytes)` as reserved; refuses an overlap with anything
    /// reserved before (the memory node handed out one range twice).
    fn reserve(&mut self, offset: u64, bytes: u64, carved_end: u64) -> Result<(), IndexError> {
        let end = offset.checked_add(bytes).filter(|&e| e <= RemoteAddr::OFFSET_LIMIT).ok_or_else(|| {
            VerbsError::Protocol(format!("range {offset:#x} + {bytes} on {} leaves the address space", self.node))
        })?;
        let before = self.reserved.range(..=offset).next_back().filter(|(_, r)| r.end > offset);
        let after = self.reserved.range(offset..).next().filter(|&(&b, _)| b < end);
        if let Some((&base, r)) = before.or(after) {
            return Err(VerbsError::Protocol(format!(
                "{} handed out {offset:#x}..{end:#x}, overlapping {base:#x}..{:#x} reserved before",
                self.node, r.end
            ))
            .into());
        }
        self.reserved.insert(offset, Reserved { end, carved_end });
        Ok(())
    }

    /// Checks that `[offset, offset + bytes)` was handed out and is not free, then frees it.
    fn release(&mut self, offset: u64, bytes: u64) -> Result<(), String> {
        let end = offset.checked_add(bytes).ok_or("the range overflows")?;
        let (&base, range) = self.reserved.range(..=offset).next_back().ok_or("not allocated here")?;
        if end > range.end {
            return Err("not inside one range this allocator reserved".into());
        }
        let carved_end = if let Some(c) = self.current.filter(|c| c.base == base) {
            c.next
        } else if self.spares.iter().any(|c| c.base == base) {
            base
        } else {
            range.carved_end
        };
        if end > carved_end {
            return Err("beyond what was carved (never handed out)".into());
        }
        if let Some(blocks) = &mut self.handed_out {
            // A block given back whole, as it was handed out: anything else is a bug of the
            // index (a free that spans a neighbour lets a later allocation overwrite it; a short
            // one leaks). Refused, and noted for the checker ([`take_bad_free`]): indexes that
            // ignore free's errors (a block of another compute node's chunk is refused too)
            // would not see the refusal.
            let bad = match blocks.get(&offset) {
                Some(&handed) if handed == bytes => {
                    blocks.remove(&offset);
                    None
                }
                Some(&handed) => Some(format!("the block was handed out with {handed} bytes")),
                // Already free (refused below), or not the start of a block.
                None if self.free.get(&bytes).is_some_and(|f| f.contains(&offset)) => None,
                None => Some("no block handed out starts there".to_string()),
            };
            if let Some(why) = bad {
                let what = format!("free of {bytes} bytes at {offset:#x} on {}: {why}", self.node);
                BAD_FREE.with(|b| {
                    b.borrow_mut().get_or_insert(what);
                });
                return Err(why);
            }
        }
        if !self.free.entry(bytes).or_default().insert(offset) {
            return Err("already free (double free?)".into());
        }
        self.account.freed_bytes += bytes;
        self.account.free_blocks += 1;
        Ok(())
    }

    /// Local bytes of this node's state: container payloads, not the heap's overhead.
    fn bytes(&self) -> u64 {
        let spares = self.spares.len() * size_of::<Chunk>();
        let free_lists = self.free.len() * (size_of::<u64>() + size_of::<BTreeSet<u64>>());
        let free_blocks = self.account.free_blocks as usize * size_of::<u64>();
        let reserved = self.reserved.len() * (size_of::<u64>() + size_of::<Reserved>());
        (size_of::<NodeChunks>() + spares + free_lists + free_blocks + reserved) as u64
    }
}

/// The compute-node local chunk allocator (see the module doc). Shared by the clients of one
/// compute node; every method takes `&self`.
#[derive(Debug)]
pub struct LocalChunkAllocator {
    options: ChunkOptions,
    /// Indexed by memory node id.
    nodes: Vec<Mutex<NodeChunks>>,
    /// Round-robin cursor of [`LocalChunkAllocator::alloc`].
    cursor: AtomicUsize,
    /// Bytes of chunks and direct blocks reserved on all memory nodes.
    reserved_bytes: AtomicU64,
}

impl LocalChunkAllocator {
    pub fn new(options: ChunkOptions) -> Result<LocalChunkAllocator, String> {
        options.validate()?;
        Ok(LocalChunkAllocator {
            options,
            nodes: (0..options.memory_nodes).map(|n| Mutex::new(NodeChunks::new(NodeId(n)))).collect(),
            cursor: AtomicUsize::new(0),
            reserved_bytes: AtomicU64::new(0),
        })
    }

    /// A compute node's allocator of [`ChunkOptions::paged`] chunks, from an index's options
    /// that its `validate` accepted (which checks these): panics if they were not validated.
    pub fn paged(memory_nodes: u16, chunk_bytes: u64) -> LocalChunkAllocator {
        LocalChunkAllocator::new(ChunkOptions::paged(memory_nodes, chunk_bytes))
            .unwrap_or_else(|e| panic!("options were validated: {e}"))
    }

    pub fn options(&self) -> &ChunkOptions {
        &self.options
    }

    /// This allocator with [`check_frees`]' record of blocks, whatever the process-wide switch
    /// says. Call it on a fresh allocator.
    pub fn checking_frees(self) -> LocalChunkAllocator {
        for node in &self.nodes {
            lock(node).handed_out.get_or_insert_with(BTreeMap::new);
        }
        self
    }

    /// Whether a request is served from chunks (else it is fetched whole).
    pub fn is_chunk_class(&self, bytes: u64, align: u64) -> bool {
        bytes <= self.options.chunk_bytes / DIRECT_FRACTION && align <= self.options.chunk_align
    }

    /// A clear error for a request no memory node could serve: zero bytes, an alignment that is
    /// not a power of two or above the memory node's limit, a node this allocator does not use.
    pub fn check_request(&self, node: NodeId, bytes: u64, align: u64) -> Result<(), IndexError> {
        if node.0 >= self.options.memory_nodes {
            return Err(VerbsError::NoSuchNode(node).into());
        }
        if bytes == 0
            || bytes >= RemoteAddr::OFFSET_LIMIT
            || !align.is_power_of_two()
            || align > MemoryNodeAllocator::MAX_ALIGN
        {
            return Err(VerbsError::Protocol(format!("bad allocation: {bytes} bytes aligned to {align}")).into());
        }
        Ok(())
    }

    fn node_state(&self, node: NodeId) -> Option<&Mutex<NodeChunks>> {
        self.nodes.get(node.0 as usize)
    }

    /// The memory node the next round-robin allocation goes to.
    pub fn next_node(&self) -> NodeId {
        let i = self.cursor.fetch_add(1, Ordering::Relaxed) % self.options.memory_nodes as usize;
        NodeId(i as u16)
    }

    /// Hands out a block of `bytes` aligned to `align` on `node` from local state only: an
    /// exact-size free block, the current chunk, or a spare chunk. `None` on a miss (and for a
    /// request [`LocalChunkAllocator::check_request`] rejects). Never waits.
    pub fn try_carve(&self, node: NodeId, bytes: u64, align: u64) -> Option<RemoteAddr> {
        self.check_request(node, bytes, align).ok()?;
        let chunk_class = self.is_chunk_class(bytes, align);
        let offset = lock(self.node_state(node)?).carve(bytes, align, chunk_class)?;
        Some(RemoteAddr::host(node, offset))
    }

    /// Adds a chunk of `bytes` (exactly the configured chunk size) at `base`, fetched from
    /// `base`'s memory node: it becomes the current chunk if there is none, else a spare.
    pub fn install_chunk(&self, base: RemoteAddr, bytes: u64) -> Result<(), IndexError> {
        let state = self.check_chunk(base, bytes)?;
        let mut node = lock(state);
        node.reserve(base.offset(), bytes, base.offset())?;
        let chunk = Chunk { base: base.offset(), next: base.offset(), end: base.offset() + bytes };
        match node.current {
            None => node.current = Some(chunk),
            Some(_) => node.spares.push_back(chunk),
        }
        node.account.chunks += 1;
        node.account.chunk_bytes += bytes;
        node.assert_conserved();
        drop(node);
        self.reserved_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Installs a chunk fetched for a request that missed, and carves that request, under one
    /// lock: from whatever has room first (another client may have refilled meanwhile — then the
    /// new chunk is kept as a spare), else from the new chunk, which always has room for a
    /// chunk-class request.
    pub fn install_chunk_and_carve(
        &self,
        base: RemoteAddr,
        bytes: u64,
        block_bytes: u64,
        align: u64,
    ) -> Result<RemoteAddr, IndexError> {
        let node_id = base.node();
        self.check_request(node_id, block_bytes, align)?;
        if !self.is_chunk_class(block_bytes, align) {
            return Err(VerbsError::Protocol(format!(
                "a block of {block_bytes} bytes aligned to {align} is not carved from chunks"
            ))
            .into());
        }
        let state = self.check_chunk(base, bytes)?;
        let mut node = lock(state);
        node.reserve(base.offset(), bytes, base.offset())?;
        node.account.chunks += 1;
        node.account.chunk_bytes += bytes;
        let chunk = Chunk { base: base.offset(), next: base.offset(), end: base.offset() + bytes };
        match node.current {
            None => node.current = Some(chunk),
            Some(_) => node.spares.push_back(chunk),
        }
        let offset = node.carve(block_bytes, align, true).expect("a fresh chunk has room for a chunk-class block");
        if node.spares.back() == Some(&chunk) {
            node.account.spare_installs += 1;
        }
        drop(node);
        self.reserved_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(RemoteAddr::host(node_id, offset))
    }

    fn check_chunk(&self, base: RemoteAddr, bytes: u64) -> Result<&Mutex<NodeChunks>, IndexError> {
        let state = self.node_state(base.node()).ok_or(VerbsError::NoSuchNode(base.node()))?;
        if base.region() != Region::Host
            || bytes != self.options.chunk_bytes
            || base.offset() % self.options.chunk_align != 0
        {
            return Err(VerbsError::Protocol(format!(
                "chunk {base} of {bytes} bytes: expected {} host bytes aligned to {}",
                self.options.chunk_bytes, self.options.chunk_align
            ))
            .into());
        }
        Ok(state)
    }

    /// Records a block fetched whole and hands it out.
    fn install_direct(&self, addr: RemoteAddr, bytes: u64) -> Result<RemoteAddr, IndexError> {
        let state = self.node_state(addr.node()).ok_or(VerbsError::NoSuchNode(addr.node()))?;
        if addr.region() != Region::Host {
            return Err(VerbsError::Protocol(format!("allocator answered {addr}, not host memory")).into());
        }
        let mut node = lock(state);
        node.reserve(addr.offset(), bytes, addr.offset() + bytes)?;
        node.account.direct_blocks += 1;
        node.account.direct_bytes += bytes;
        node.hand_out(addr.offset(), bytes);
        drop(node);
        self.reserved_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(addr)
    }

    /// Becomes a copy of `from`: its chunks, free blocks and the rest of its current chunk
    /// (a run's compute node taking over what the loader's reserved, so that blocks of loaded
    /// items can be freed and reused here). Call it on a fresh allocator, before any use.
    pub fn inherit(&self, from: &LocalChunkAllocator) {
        assert_eq!(self.nodes.len(), from.nodes.len(), "allocators of the same memory nodes");
        for (mine, theirs) in self.nodes.iter().zip(&from.nodes) {
            let copy = lock(theirs).clone();
            *lock(mine) = copy;
        }
        self.cursor.store(from.cursor.load(Ordering::Relaxed), Ordering::Relaxed);
        self.reserved_bytes.store(from.reserved_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether `addr` lies in a chunk this allocator reserved (a block another compute node
    /// carved is not, and cannot be freed here).
    pub fn owns(&self, addr: RemoteAddr) -> bool {
        self.node_state(addr.node()).is_some_and(|state| {
            let n = lock(state);
            n.reserved.range(..=addr.offset()).next_back().is_some_and(|(_, r)| addr.offset() < r.end)
        })
    }

    /// Gives a block back: the next request of exactly `bytes` (and a compatible alignment) on
    /// its node gets it. Never returned to the memory node. A block this allocator did not hand
    /// out, or one already free, is refused (the memory node's allocator words it the same way).
    pub fn free(&self, addr: RemoteAddr, bytes: u64) -> Result<(), IndexError> {
        let refuse =
            |why: &str| IndexError::from(VerbsError::Protocol(format!("free of {addr} ({bytes} bytes): {why}")));
        let state = self.node_state(addr.node()).ok_or_else(|| refuse("not a memory node of this allocator"))?;
        if addr.region() != Region::Host || bytes == 0 {
            return Err(refuse("not a host block"));
        }
        lock(state).release(addr.offset(), bytes).map_err(|why| refuse(&why))
    }

    /// Allocates `bytes` aligned to `align` on the next memory node in round-robin order; a node
    /// that has no room left is skipped, and the error says which node refused last.
    pub async fn alloc<C: Client>(&self, ctx: &C, bytes: u64, align: u64) -> Result<RemoteAddr, IndexError> {
        let first = self.next_node();
        let mut last_error = None;
        for i in 0..self.options.memory_nodes {
            let node = NodeId((first.0 + i) % self.options.memory_nodes);
            match self.alloc_on(ctx, node, bytes, align).await {
                Err(IndexError::Verbs(e @ VerbsError::RemoteMemoryExhausted { .. })) => last_error = Some(e),
                done => return done,
            }
        }
        Err(last_error.expect("at least one memory node").into())
    }

    /// Allocates `bytes` aligned to `align` on `node`: from local state when it can (no verb),
    /// else with one allocator `call` (a new chunk, or the block itself); never holds a lock
    /// across the `call`.
    pub async fn alloc_on<C: Client>(
        &self,
        ctx: &C,
        node: NodeId,
        bytes: u64,
        align: u64,
    ) -> Result<RemoteAddr, IndexError> {
        self.check_request(node, bytes, align)?;
        if let Some(addr) = self.try_carve(node, bytes, align) {
            return Ok(addr);
        }
        let state = self.node_state(node).ok_or(VerbsError::NoSuchNode(node))?;
        let refused_bytes = lock(state).refused_bytes;
        let exhausted = || IndexError::from(VerbsError::RemoteMemoryExhausted { node, requested_bytes: bytes });
        if bytes >= refused_bytes {
            return Err(exhausted());
        }
        let chunk_bytes = self.options.chunk_bytes;
        if self.is_chunk_class(bytes, align) && chunk_bytes < refused_bytes {
            match dmkit_rdma::alloc::alloc(ctx, node, chunk_bytes, self.options.chunk_align).await {
                Ok(base) => return self.install_chunk_and_carve(base, chunk_bytes, bytes, align),
                Err(VerbsError::RemoteMemoryExhausted { .. }) => {
                    let mut s = lock(state);
                    s.refused_bytes = s.refused_bytes.min(chunk_bytes);
                }
                Err(e) => return Err(e.into()),
            }
        }
        match dmkit_rdma::alloc::alloc(ctx, node, bytes, align).await {
            Ok(addr) if addr.node() == node => self.install_direct(addr, bytes),
            Ok(addr) => Err(VerbsError::Protocol(format!("{node}'s allocator answered {addr}")).into()),
            Err(VerbsError::RemoteMemoryExhausted { .. }) => {
                let mut s = lock(state);
                s.refused_bytes = s.refused_bytes.min(bytes);
                Err(exhausted())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Remote bytes reserved on all memory nodes: chunks and direct blocks, used or not.
    pub fn remote_bytes_reserved(&self) -> u64 {
        self.reserved_bytes.load(Ordering::Relaxed)
    }

    /// What the allocator did on `node`, or `None` for a node it does not use.
    pub fn account_of(&self, node: NodeId) -> Option<ChunkAccount> {
        Some(lock(self.node_state(node)?).account())
    }

    /// What the allocator did, summed over its memory nodes.
    pub fn account(&self) -> ChunkAccount {
        let mut sum = ChunkAccount::default();
        for state in &self.nodes {
            sum.add(&lock(state).account());
        }
        sum
    }

    /// Local bytes this allocator occupies (compute-node memory is a metric): its containers'
    /// payloads, not the heap's overhead.
    pub fn bytes(&self) -> u64 {
        let own = size_of::<LocalChunkAllocator>() + self.nodes.len() * size_of::<Mutex<NodeChunks>>();
        own as u64 + self.nodes.iter().map(|state| lock(state).bytes()).sum::<u64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const N0: NodeId = NodeId(0);
    const N1: NodeId = NodeId(1);

    fn allocator(memory_nodes: u16, chunk_bytes: u64) -> LocalChunkAllocator {
        LocalChunkAllocator::new(ChunkOptions { memory_nodes, chunk_bytes, chunk_align: 64 }).unwrap()
    }

    fn overlaps(blocks: &mut [(RemoteAddr, u64)]) -> Option<(RemoteAddr, RemoteAddr)> {
        blocks.sort();
        blocks
            .windows(2)
            .find(|w| w[0].0.node() == w[1].0.node() && w[0].0.offset() + w[0].1 > w[1].0.offset())
            .map(|w| (w[0].0, w[1].0))
    }

    #[test]
    fn options_are_validated() {
        for bad in [
            ChunkOptions { memory_nodes: 0, ..ChunkOptions::default() },
            ChunkOptions { chunk_align: 48, ..ChunkOptions::default() },
            ChunkOptions { chunk_bytes: 8, ..ChunkOptions::default() },
        ] {
            assert!(LocalChunkAllocator::new(bad).is_err(), "{bad:?}");
        }
        assert!(LocalChunkAllocator::new(ChunkOptions::default()).is_ok());
    }

    #[test]
    fn carving_respects_alignment_and_never_overlaps() {
        let a = allocator(1, 1 << 16);
        a.install_chunk(RemoteAddr::host(N0, 1 << 20), 1 << 16).unwrap();
        let mut blocks = Vec::new();
        for (i, (bytes, align)) in
            [(24, 8), (64, 64), (10, 16), (100, 32), (8, 8), (200, 64)].iter().cycle().enumerate()
        {
            let Some(b) = a.try_carve(N0, *bytes, *align) else { break };
            assert_eq!(b.offset() % align, 0, "block {i} of {bytes} bytes at {b} is not aligned to {align}");
            assert!(b.offset() >= 1 << 20 && b.offset() + bytes <= (1 << 20) + (1 << 16), "{b} outside the chunk");
            blocks.push((b, *bytes));
        }
        assert!(blocks.len() > 300, "carved only {} blocks from 64 KiB", blocks.len());
        assert_eq!(overlaps(&mut blocks), None);
        let account = a.account();
        assert!(account.is_conserved(), "{account:?}");
        assert_eq!(account.carved_bytes, blocks.iter().map(|b| b.1).sum::<u64>());
        assert!(account.padding_bytes > 0, "mixed alignments must have padded");
    }

    #[test]
    fn a_miss_refills_from_a_new_chunk_and_retires_the_tail() {
        let a = allocator(1, 1024);
        assert_eq!(a.try_carve(N0, 64, 64), None, "no chunk yet");
        a.install_chunk(RemoteAddr::host(N0, 4096), 1024).unwrap();
        for i in 0..5 {
            assert_eq!(a.try_carve(N0, 200, 8), Some(RemoteAddr::host(N0, 4096 + 200 * i)));
        }
        // 24 bytes are left: a 200-byte block misses, a 16-byte one still fits.
        assert_eq!(a.try_carve(N0, 200, 8), None);
        assert_eq!(a.try_carve(N0, 16, 8), Some(RemoteAddr::host(N0, 5096)));
        let b = a.install_chunk_and_carve(RemoteAddr::host(N0, 8192), 1024, 200, 8).unwrap();
        assert_eq!(b, RemoteAddr::host(N0, 8192));
        let account = a.account();
        assert_eq!((account.chunks, account.retired_bytes, account.remaining_bytes), (2, 8, 824));
        assert!(account.is_conserved(), "{account:?}");
        assert_eq!(a.remote_bytes_reserved(), 2048);
    }

    #[test]
    fn a_racing_refill_is_kept_as_a_spare() {
        let a = allocator(1, 1024);
        // Two clients missed; both fetched a chunk. The second install finds room and keeps its
        // chunk whole for later.
        let first = a.install_chunk_and_carve(RemoteAddr::host(N0, 4096), 1024, 256, 64).unwrap();
        let second = a.install_chunk_and_carve(RemoteAddr::host(N0, 8192), 1024, 256, 64).unwrap();
        assert_eq!((first, second), (RemoteAddr::host(N0, 4096), RemoteAddr::host(N0, 4352)));
        assert_eq!(a.account().spare_installs, 1);
        let mut blocks = vec![(first, 256), (second, 256)];
        while let Some(b) = a.try_carve(N0, 256, 64) {
            blocks.push((b, 256));
        }
        assert_eq!(blocks.len(), 8, "both chunks are used up, none lost");
        assert_eq!(overlaps(&mut blocks), None);
        let account = a.account();
        assert_eq!((account.carved_bytes, account.remaining_bytes, account.retired_bytes), (2048, 0, 0));
    }

    #[test]
    fn free_lists_reuse_exact_sizes() {
        let a = allocator(1, 4096);
        a.install_chunk(RemoteAddr::host(N0, 4096), 4096).unwrap();
        let x = a.try_carve(N0, 128, 64).unwrap();
        let y = a.try_carve(N0, 192, 64).unwrap();
        a.free(x, 128).unwrap();
        a.free(y, 192).unwrap();
        assert_eq!(a.account().free_blocks, 2);
        // A different size does not take a freed block; the same size does.
        let z = a.try_carve(N0, 64, 64).unwrap();
        assert!(z != x && z != y);
        assert_eq!(a.try_carve(N0, 192, 64), Some(y));
        assert_eq!(a.try_carve(N0, 128, 64), Some(x));
        assert_eq!(a.try_carve(N0, 128, 64).map(|b| b == x), Some(false));
        // An alignment the freed block does not have is not served from the list.
        let w = a.try_carve(N0, 96, 32).unwrap();
        let w = if w.offset() % 64 == 0 { a.try_carve(N0, 96, 32).unwrap() } else { w };
        a.free(w, 96).unwrap();
        assert_ne!(a.try_carve(N0, 96, 64), Some(w));
        let account = a.account();
        assert_eq!((account.freed_bytes, account.reused_bytes, account.free_blocks), (416, 320, 1));
        assert!(account.is_conserved());
    }

    #[test]
    fn bad_frees_are_refused() {
        let a = allocator(2, 1024);
        a.install_chunk(RemoteAddr::host(N0, 4096), 1024).unwrap();
        a.install_chunk(RemoteAddr::host(N0, 8192), 1024).unwrap();
        let x = a.try_carve(N0, 64, 64).unwrap();
        a.free(x, 64).unwrap();
        let refused = |r: Result<(), IndexError>| match r {
            Err(IndexError::Verbs(VerbsError::Protocol(msg))) => msg,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert!(refused(a.free(x, 64)).contains("double free"));
        assert!(refused(a.free(x.add(64), 64)).contains("never handed out"), "beyond the bump pointer");
        assert!(refused(a.free(RemoteAddr::host(N0, 8192), 64)).contains("never handed out"), "a spare");
        assert!(refused(a.free(RemoteAddr::host(N0, 64), 64)).contains("not allocated"));
        assert!(refused(a.free(RemoteAddr::host(N1, 4096), 64)).contains("not allocated"));
        assert!(refused(a.free(RemoteAddr::host(NodeId(9), 4096), 64)).contains("not a memory node"));
        assert!(refused(a.free(RemoteAddr::device(N0, 4096), 64)).contains("host"));
        assert_eq!(a.account().freed_bytes, 64);
    }

    /// With [`check_frees`], a free must give back a block whole: a size too large (which spans
    /// the neighbour) or too small (a leak) is refused and noted, not a silent free.
    #[test]
    fn checked_frees_must_match_the_block_handed_out() {
        let a = allocator(1, 4096).checking_frees();
        a.install_chunk(RemoteAddr::host(N0, 4096), 4096).unwrap();
        let x = a.try_carve(N0, 64, 64).unwrap();
        let y = a.try_carve(N0, 128, 64).unwrap();
        let refused = |r: Result<(), IndexError>| match r {
            Err(IndexError::Verbs(VerbsError::Protocol(msg))) => msg,
            other => panic!("expected a refusal, got {other:?}"),
        };
        take_bad_free();
        assert!(refused(a.free(x, 128)).contains("handed out with 64 bytes"), "a free spanning the neighbour");
        assert!(refused(a.free(y.add(64), 64)).contains("no block handed out starts there"), "inside a block");
        // The first is noted for the checker, once.
        assert!(take_bad_free().is_some_and(|m| m.contains("free of 128 bytes")));
        assert_eq!(take_bad_free(), None);
        // Whole blocks go back, once; a reused block may be freed again.
        a.free(x, 64).unwrap();
        assert!(a.free(x, 64).is_err(), "double free");
        assert_eq!(a.try_carve(N0, 64, 64), Some(x));
        a.free(x, 64).unwrap();
        a.free(y, 128).unwrap();
        // Without the switch the allocator keeps no record and cannot tell.
        let unchecked = allocator(1, 4096);
        unchecked.install_chunk(RemoteAddr::host(N0, 4096), 4096).unwrap();
        let x = unchecked.try_carve(N0, 64, 64).unwrap();
        unchecked.try_carve(N0, 128, 64).unwrap();
        unchecked.free(x, 128).unwrap();
        assert_eq!(take_bad_free(), None);
    }

    #[test]
    fn bad_installs_and_requests_are_errors() {
        let a = allocator(1, 1024);
        a.install_chunk(RemoteAddr::host(N0, 4096), 1024).unwrap();
        for (base, bytes) in [
            (RemoteAddr::host(N0, 4096 + 512), 1024),
            (RemoteAddr::host(N0, 4096 - 512), 1024),
            (RemoteAddr::host(N0, 4100), 1024),
            (RemoteAddr::host(N0, 8192), 512),
            (RemoteAddr::device(N0, 8192), 1024),
        ] {
            assert!(a.install_chunk(base, bytes).is_err(), "{base} + {bytes}");
        }
        assert_eq!(
            a.install_chunk(RemoteAddr::host(N1, 8192), 1024),
            Err(IndexError::Verbs(VerbsError::NoSuchNode(N1)))
        );
        assert_eq!(a.account().chunks, 1);
        assert_eq!(a.check_request(N1, 8, 8), Err(IndexError::Verbs(VerbsError::NoSuchNode(N1))));
        assert!(a.check_request(N0, 0, 8).is_err());
        assert!(a.check_request(N0, 8, 24).is_err());
        assert_eq!(a.try_carve(N0, 8, 24), None);
        // Blocks above a quarter of a chunk are fetched whole, never carved.
        assert!(!a.is_chunk_class(257, 8) && a.is_chunk_class(256, 64) && !a.is_chunk_class(8, 128));
        assert_eq!(a.try_carve(N0, 257, 8), None);
        assert!(a.install_chunk_and_carve(RemoteAddr::host(N0, 8192), 1024, 257, 8).is_err());
    }

    /// One client on a memory node with room for two and a half chunks: blocks come from two
    /// chunks, then (once no whole chunk is left) one call each, then the exhaustion error.
    #[test]
    fn exhaustion_is_an_error() {
        use dmkit_sim::{Sim, SimConfig, VerbKind};
        use std::cell::RefCell;
        use std::rc::Rc;
        let chunk_bytes = 64 << 10;
        let mut cfg = SimConfig::default();
        cfg.profile.host_memory_bytes = cfg.topology.reserved_bytes + 2 * chunk_bytes + chunk_bytes / 2;
        let mut sim = Sim::new(cfg).unwrap();
        let a = allocator(1, chunk_bytes);
        let c = sim.add_client(0).unwrap();
        let outcome = Rc::new(RefCell::new(None));
        let (c2, out) = (c.clone(), outcome.clone());
        sim.spawn(&c, async move {
            let mut blocks = 0u64;
            let error = loop {
                match a.alloc(&c2, 1000, 8).await {
                    Ok(_) => blocks += 1,
                    Err(e) => break e,
                }
            };
            let bad = [a.alloc_on(&c2, N1, 8, 8).await, a.alloc(&c2, 0, 8).await];
            *out.borrow_mut() = Some((blocks, error, bad, a.account()));
        });
        sim.run().unwrap();
        let (blocks, error, bad, account) = outcome.borrow_mut().take().expect("the client finished");
        assert_eq!(error, IndexError::Verbs(VerbsError::RemoteMemoryExhausted { node: N0, requested_bytes: 1000 }));
        assert_eq!(bad[0], Err(IndexError::Verbs(VerbsError::NoSuchNode(N1))));
        assert!(matches!(&bad[1], Err(IndexError::Verbs(VerbsError::Protocol(m))) if m.contains("bad allocation")));
        assert_eq!(account.chunks, 2, "{account:?}");
        assert_eq!(account.direct_blocks, (chunk_bytes / 2) / 1000, "the last half chunk is used block by block");
        assert_eq!(blocks, 2 * (chunk_bytes / 1000) + account.direct_blocks);
        let calls = sim.stats().nodes[0].verbs_of(VerbKind::Call).count;
        // Two chunks, the refused third, the direct blocks, the refused block.
        assert_eq!(calls, 2 + 1 + account.direct_blocks + 1);
    }

    #[test]
    fn round_robin_and_bytes() {
        let a = allocator(3, 1024);
        let picked: Vec<u16> = (0..6).map(|_| a.next_node().0).collect();
        assert_eq!(picked, [0, 1, 2, 0, 1, 2]);
        let empty = a.bytes();
        for n in 0..3 {
            a.install_chunk(RemoteAddr::host(NodeId(n), 4096), 1024).unwrap();
            let b = a.try_carve(NodeId(n), 64, 64).unwrap();
            a.free(b, 64).unwrap();
        }
        assert!(a.bytes() > empty, "state grew: {} -> {}", empty, a.bytes());
        assert_eq!(a.remote_bytes_reserved(), 3 * 1024);
        assert_eq!(a.account_of(NodeId(1)).map(|c| c.chunks), Some(1));
        assert_eq!(a.account_of(NodeId(3)), None);
    }
}

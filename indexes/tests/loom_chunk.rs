//! loom models of the local chunk allocator's synchronous part (`common::chunk`): every
//! interleaving of two or three threads carving, installing chunks and freeing blocks on one
//! shared allocator, with chunks installed by hand (no verbs, no async). Each model checks, after
//! the threads join:
//!
//! - no block is handed out twice: the blocks the threads still hold are pairwise disjoint, and
//!   disjoint from the free lists' blocks (drained at the end);
//! - no installed chunk's space is lost: the bytes the threads carved, plus what the allocator
//!   still holds, plus padding and retired tails, equal the bytes installed — and draining the
//!   allocator hands out every remaining byte;
//! - the allocator's own account agrees (`ChunkAccount::is_conserved`), and so does
//!   `remote_bytes_reserved`.
//!
//! Run with `.ci/loom.sh` (`RUSTFLAGS="--cfg loom"`, a separate target directory, release).

#![cfg(loom)]

use dmkit_indexes::common::chunk::{ChunkOptions, LocalChunkAllocator};
use dmkit_indexes::common::primitive::Arc;
use dmkit_rdma::{NodeId, RemoteAddr};
use loom::thread;

const N0: NodeId = NodeId(0);
/// Small chunks, so that a few blocks fill one: four 64-byte blocks each.
const CHUNK: u64 = 256;
const BLOCK: u64 = 64;

fn allocator(memory_nodes: u16) -> Arc<LocalChunkAllocator> {
    let options = ChunkOptions { memory_nodes, chunk_bytes: CHUNK, chunk_align: 64 };
    Arc::new(LocalChunkAllocator::new(options).unwrap())
}

fn chunk(i: u64) -> RemoteAddr {
    RemoteAddr::host(N0, 4096 + i * 1024)
}

/// Explores every interleaving — each model here is small enough to be explored exhaustively
/// in seconds; a larger one can be bounded with `LOOM_MAX_PREEMPTIONS` — and checks that loom
/// did explore more than one (a model with a single schedule proves nothing).
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model::Builder::new().check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{name}: {runs} interleavings");
    assert!(runs > 1, "{name}: loom explored a single interleaving");
}

/// Takes every block the allocator can still hand out on `node`.
fn drain(a: &LocalChunkAllocator, node: NodeId) -> Vec<RemoteAddr> {
    std::iter::from_fn(|| a.try_carve(node, BLOCK, BLOCK)).collect()
}

/// Asserts the blocks (all `BLOCK` bytes) are pairwise disjoint and inside installed chunks.
fn assert_disjoint(blocks: &[RemoteAddr], installed: &[RemoteAddr]) {
    let mut sorted = blocks.to_vec();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].node() != w[1].node() || w[0].offset() + BLOCK <= w[1].offset(), "{} handed out twice", w[1]);
    }
    for b in blocks {
        assert!(
            installed.iter().any(|c| c.node() == b.node() && (c.offset()..c.offset() + CHUNK).contains(&b.offset())),
            "{b} is in no installed chunk"
        );
    }
}

/// Asserts conservation from outside (the bytes handed out and held) and from inside (the
/// allocator's account), and that nothing is left to hand out.
fn assert_all_space_handed_out(a: &LocalChunkAllocator, blocks: &[RemoteAddr], chunks: u64) {
    let account = a.account();
    assert!(account.is_conserved(), "{account:?}");
    assert_eq!(account.chunk_bytes, chunks * CHUNK, "{account:?}");
    assert_eq!(a.remote_bytes_reserved(), chunks * CHUNK);
    assert_eq!(account.remaining_bytes, 0, "{account:?}");
    // 64-byte blocks in 64-aligned, 256-byte chunks: no padding, no tail, so every installed
    // byte is in exactly one block someone holds.
    assert_eq!((account.padding_bytes, account.retired_bytes), (0, 0), "{account:?}");
    assert_eq!(blocks.len() as u64 * BLOCK, chunks * CHUNK, "installed space was lost: {account:?}");
    assert_eq!(account.live_bytes(), chunks * CHUNK);
}

/// Two threads carve three blocks each from one chunk of four: exactly four succeed, and no two
/// are the same.
#[test]
fn concurrent_carves_never_share_a_block() {
    model("concurrent carves", || {
        let a = allocator(1);
        a.install_chunk(chunk(0), CHUNK).unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let a = a.clone();
                thread::spawn(move || (0..3).filter_map(|_| a.try_carve(N0, BLOCK, BLOCK)).collect::<Vec<_>>())
            })
            .collect();
        let blocks: Vec<RemoteAddr> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        assert_disjoint(&blocks, &[chunk(0)]);
        assert_all_space_handed_out(&a, &blocks, 1);
        assert_eq!(a.try_carve(N0, BLOCK, BLOCK), None);
    });
}

/// The refill race: the current chunk is used up; two clients each miss, "fetch" a chunk of
/// their own and install it with their block, then carve one more. Whether the second install
/// finds room (and keeps its chunk as a spare) or not depends on the interleaving; either way
/// both chunks' space is handed out exactly once.
#[test]
fn racing_refills_lose_no_chunk_and_share_no_block() {
    model("racing refills", || {
        let a = allocator(1);
        a.install_chunk(chunk(0), CHUNK).unwrap();
        let mut blocks = drain(&a, N0);
        let threads: Vec<_> = (1..=2)
            .map(|i| {
                let a = a.clone();
                thread::spawn(move || {
                    let mut mine = Vec::new();
                    let first = match a.try_carve(N0, BLOCK, BLOCK) {
                        Some(b) => (b, false),
                        None => (a.install_chunk_and_carve(chunk(i), CHUNK, BLOCK, BLOCK).unwrap(), true),
                    };
                    mine.push(first.0);
                    mine.extend(a.try_carve(N0, BLOCK, BLOCK));
                    (mine, first.1)
                })
            })
            .collect();
        let mut chunks = vec![chunk(0)];
        for (i, t) in threads.into_iter().enumerate() {
            let (mine, fetched) = t.join().unwrap();
            blocks.extend(mine);
            if fetched {
                chunks.push(chunk(i as u64 + 1));
            }
        }
        let installed = chunks.len() as u64;
        // Each thread missed (the current chunk was full when it looked) unless the other had
        // installed first; at least one fetched.
        assert!(installed >= 2);
        let spare_installs = a.account().spare_installs;
        assert_eq!(spare_installs, installed - 2, "a second chunk installed while the first had room is a spare");
        blocks.extend(drain(&a, N0));
        assert_disjoint(&blocks, &chunks);
        assert_all_space_handed_out(&a, &blocks, installed);
    });
}

/// Three threads: one installs a chunk by hand (a refill that lands while others carve), one
/// carves, frees and carves again (the free list), one carves twice. The freed block goes to
/// at most one holder; after the joins, the free list and the chunks drain to exactly the
/// space not held.
#[test]
fn install_carve_and_free_hand_each_block_to_one_holder() {
    model("install, carve and free", || {
        let a = allocator(1);
        a.install_chunk(chunk(0), CHUNK).unwrap();
        let installer = {
            let a = a.clone();
            thread::spawn(move || a.install_chunk(chunk(1), CHUNK).unwrap())
        };
        let recycler = {
            let a = a.clone();
            thread::spawn(move || {
                let b = a.try_carve(N0, BLOCK, BLOCK).expect("chunk 0 has room for this thread's first block");
                a.free(b, BLOCK).unwrap();
                a.try_carve(N0, BLOCK, BLOCK).into_iter().collect::<Vec<_>>()
            })
        };
        let carver = {
            let a = a.clone();
            thread::spawn(move || (0..2).filter_map(|_| a.try_carve(N0, BLOCK, BLOCK)).collect::<Vec<_>>())
        };
        installer.join().unwrap();
        let mut blocks = recycler.join().unwrap();
        blocks.extend(carver.join().unwrap());
        assert_eq!(blocks.len(), 3, "there was room for every request: {blocks:?}");
        assert_disjoint(&blocks, &[chunk(0), chunk(1)]);
        let account = a.account();
        assert!(account.is_conserved(), "{account:?}");
        assert_eq!(account.live_bytes(), 3 * BLOCK, "{account:?}");
        // The freed block was either reused or is still free: draining returns it once.
        assert_eq!(account.free_blocks, 1 - account.reused_bytes / BLOCK, "{account:?}");
        blocks.extend(drain(&a, N0));
        assert_disjoint(&blocks, &[chunk(0), chunk(1)]);
        assert_all_space_handed_out(&a, &blocks, 2);
    });
}

/// The round-robin cursor gives each memory node its share, whatever the interleaving.
#[test]
fn round_robin_spreads_over_memory_nodes() {
    model("round robin", || {
        let a = allocator(2);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let a = a.clone();
                thread::spawn(move || [a.next_node().0, a.next_node().0])
            })
            .collect();
        let mut picks: Vec<u16> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        picks.sort();
        assert_eq!(picks, [0, 0, 1, 1]);
    });
}

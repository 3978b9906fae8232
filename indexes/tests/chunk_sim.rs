//! The local chunk allocator in the simulator: many clients of two compute nodes allocate and
//! free blocks of mixed sizes over two memory nodes at once. No two live blocks may ever
//! overlap, every block is aligned, the allocator reaches the memory nodes about once per chunk
//! (not once per block), and a memory node that runs out of room answers with an error.

use dmkit_indexes::IndexError;
use dmkit_indexes::common::chunk::{ChunkAccount, ChunkOptions, LocalChunkAllocator};
use dmkit_rdma::{NodeId, RemoteAddr, VerbsError};
use dmkit_sim::{Sim, SimConfig, Topology, VerbKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

const COMPUTE_NODES: u16 = 2;
const MEMORY_NODES: u16 = 2;
const CLIENTS: usize = 16;

fn sim(seed: u64, memory_nodes: u16, host_memory_bytes: Option<u64>) -> Sim {
    let mut cfg = SimConfig {
        topology: Topology { compute_nodes: COMPUTE_NODES, memory_nodes, ..Topology::default() },
        seed,
        ..SimConfig::default()
    };
    if let Some(bytes) = host_memory_bytes {
        cfg.profile.host_memory_bytes = bytes;
    }
    Sim::new(cfg).unwrap()
}

fn allocators(options: ChunkOptions) -> Vec<Arc<LocalChunkAllocator>> {
    (0..COMPUTE_NODES).map(|_| Arc::new(LocalChunkAllocator::new(options).unwrap())).collect()
}

/// Allocator calls the memory nodes served.
fn calls(sim: &Sim, memory_nodes: u16) -> u64 {
    let stats = sim.stats();
    (0..memory_nodes as usize).map(|n| stats.nodes[n].verbs_of(VerbKind::Call).count).sum()
}

fn summed(allocators: &[Arc<LocalChunkAllocator>]) -> ChunkAccount {
    let mut sum = ChunkAccount::default();
    for a in allocators {
        let account = a.account();
        assert!(account.is_conserved(), "{account:?}");
        sum.add(&account);
    }
    sum
}

/// Live blocks of the whole run, checked as they are handed out and given back: a block handed
/// out while an overlapping one is still live is reported at once, with who holds what.
#[derive(Debug, Default)]
struct Live {
    blocks: BTreeMap<(u16, u64), (u64, usize)>,
    violations: Vec<String>,
    handed_out: u64,
}

impl Live {
    fn take(&mut self, client: usize, addr: RemoteAddr, bytes: u64, align: u64) {
        self.handed_out += 1;
        let (node, start, end) = (addr.node().0, addr.offset(), addr.offset() + bytes);
        if start % align != 0 {
            self.violations.push(format!("client {client}: {addr} is not aligned to {align}"));
        }
        let before =
            self.blocks.range(..=(node, start)).next_back().filter(|&(&(n, s), &(b, _))| n == node && s + b > start);
        let after = self.blocks.range((node, start)..).next().filter(|&(&(n, s), _)| n == node && s < end);
        if let Some((&(_, s), &(b, holder))) = before.or(after) {
            self.violations.push(format!(
                "client {client} got {addr} + {bytes}, overlapping {s:#x} + {b} held by client {holder}"
            ));
        }
        self.blocks.insert((node, start), (bytes, client));
    }

    fn give_back(&mut self, client: usize, addr: RemoteAddr) {
        // Absent only if another holder of the same block gave it back first.
        if self.blocks.remove(&(addr.node().0, addr.offset())).is_none() {
            self.violations.push(format!("client {client} gave back {addr}, which another holder already freed"));
        }
    }
}

/// Sizes and alignments of the blocks the seeds allocate: KV blocks, 64-B-aligned leaves,
/// SMART's 2,064-B internal nodes at 256-B alignment, Sherman's 1-KiB pages, a page.
const SIZES: [(u64, u64); 7] = [(24, 8), (64, 64), (128, 64), (256, 256), (1024, 1024), (2064, 256), (4096, 4096)];

/// Bytes above a quarter of a chunk: fetched whole.
const LARGE_BYTES: u64 = 80 << 10;

struct Outcome {
    account: ChunkAccount,
    calls: u64,
    blocks: u64,
    block_bytes: u64,
    reserved_bytes: u64,
    /// Sum of (alignment - 1) over the blocks requested from chunks: a bound on padding.
    align_slack_bytes: u64,
}

fn concurrent_clients(seed: u64, steps: usize) -> Outcome {
    let options = ChunkOptions { memory_nodes: MEMORY_NODES, chunk_bytes: 256 << 10, chunk_align: 4096 };
    let mut s = sim(seed, MEMORY_NODES, None);
    let allocators = allocators(options);
    let live = Rc::new(RefCell::new(Live::default()));
    let block_bytes = Rc::new(RefCell::new(0u64));
    let align_slack_bytes = Rc::new(RefCell::new(0u64));
    let errors = Rc::new(RefCell::new(Vec::new()));
    for i in 0..CLIENTS {
        let cn = (i % COMPUTE_NODES as usize) as u16;
        let c = s.add_client(cn).unwrap();
        let (a, live, block_bytes, errors) =
            (allocators[cn as usize].clone(), live.clone(), block_bytes.clone(), errors.clone());
        let align_slack_bytes = align_slack_bytes.clone();
        let c2 = c.clone();
        s.spawn(&c, async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 1000 + i as u64);
            let mut mine: Vec<(RemoteAddr, u64)> = Vec::new();
            for step in 0..steps {
                if !mine.is_empty() && rng.random_range(0..6) == 0 {
                    let (addr, bytes) = mine.swap_remove(rng.random_range(0..mine.len()));
                    live.borrow_mut().give_back(i, addr);
                    if let Err(e) = a.free(addr, bytes) {
                        errors.borrow_mut().push(format!("client {i} step {step}: free {addr}: {e}"));
                    }
                } else {
                    let (bytes, align) = if rng.random_range(0..200) == 0 {
                        (LARGE_BYTES, 64)
                    } else {
                        SIZES[rng.random_range(0..SIZES.len())]
                    };
                    if a.is_chunk_class(bytes, align) {
                        *align_slack_bytes.borrow_mut() += align - 1;
                    }
                    let got = if rng.random_range(0..4) == 0 {
                        a.alloc_on(&c2, NodeId(rng.random_range(0..MEMORY_NODES)), bytes, align).await
                    } else {
                        a.alloc(&c2, bytes, align).await
                    };
                    match got {
                        Ok(addr) => {
                            live.borrow_mut().take(i, addr, bytes, align);
                            *block_bytes.borrow_mut() += bytes;
                            mine.push((addr, bytes));
                        }
                        Err(e) => errors.borrow_mut().push(format!("client {i} step {step}: alloc {bytes}: {e}")),
                    }
                }
                let pause = rng.random_range(0..400);
                c2.sleep(pause).await;
            }
        });
    }
    s.run().unwrap();
    let live = live.borrow();
    assert_eq!(live.violations.first(), None, "seed {seed}");
    assert_eq!(errors.borrow().first(), None, "seed {seed}");

    // The same property after the fact, independently: sort the live blocks, check neighbours.
    let mut ranges: Vec<(u16, u64, u64)> = live.blocks.iter().map(|(&(n, s), &(b, _))| (n, s, s + b)).collect();
    ranges.sort();
    for w in ranges.windows(2) {
        assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "seed {seed}: live blocks overlap: {:?} and {:?}", w[0], w[1]);
    }

    let account = summed(&allocators);
    let reserved_bytes = allocators.iter().map(|a| a.remote_bytes_reserved()).sum();
    let block_bytes = *block_bytes.borrow();
    let align_slack_bytes = *align_slack_bytes.borrow();
    Outcome {
        account,
        calls: calls(&s, MEMORY_NODES),
        blocks: live.handed_out,
        block_bytes,
        reserved_bytes,
        align_slack_bytes,
    }
}

#[test]
fn concurrent_clients_never_share_a_block_and_call_once_per_chunk() {
    let (mut spare_installs, mut reused_bytes) = (0, 0);
    for seed in 0..3 {
        let o = concurrent_clients(seed, 600);
        let a = &o.account;
        let chunk_bytes = 256 << 10;
        // Every call the memory nodes served is a chunk or a block fetched whole.
        assert_eq!(o.calls, a.chunks + a.direct_blocks, "seed {seed}: {a:?}");
        assert_eq!(o.reserved_bytes, a.chunk_bytes + a.direct_bytes);
        assert_eq!(a.chunk_bytes, a.chunks * chunk_bytes);
        // About one call per chunk's worth of blocks: the chunks hold what was carved, the
        // padding and the retired tails; beyond that, only the partly used current chunk of
        // each (compute node, memory node) pair, and the spares of racing refills: a client
        // fetches only when its node has no spare, so a pair never holds more spares than the
        // compute node has clients (module doc of `common::chunk`).
        let used = (a.carved_bytes + a.padding_bytes + a.retired_bytes).div_ceil(chunk_bytes);
        let pairs = (COMPUTE_NODES * MEMORY_NODES) as u64;
        let clients_per_node = (CLIENTS / COMPUTE_NODES as usize) as u64;
        assert!(
            a.chunks >= used && a.chunks <= used + pairs * (clients_per_node + 1),
            "seed {seed}: {} chunks for {used} chunks' worth of blocks: {a:?}",
            a.chunks,
        );
        // Padding is below each carved block's alignment; a retired tail is smaller than the
        // block that did not fit in it.
        assert!(a.padding_bytes <= o.align_slack_bytes, "seed {seed}: {a:?}");
        let (largest, strictest) = SIZES.iter().fold((0, 0), |(b, al), &(x, y)| (b.max(x), al.max(y)));
        assert!(a.retired_bytes < a.chunks * (largest + strictest), "seed {seed}: {a:?}");
        assert!(o.calls * 20 < o.blocks, "seed {seed}: {} calls for {} blocks", o.calls, o.blocks);
        assert!(a.direct_blocks > 0 && a.direct_bytes >= a.direct_blocks * LARGE_BYTES, "seed {seed}: {a:?}");
        assert_eq!(o.block_bytes, a.carved_bytes + a.direct_bytes + a.reused_bytes, "seed {seed}: {a:?}");
        eprintln!(
            "seed {seed}: {} blocks, {} bytes, {} calls ({} chunks for {used} chunks' worth, {} direct, {} kept \
             as spares), {} bytes padding, {} retired, {} reused",
            o.blocks,
            o.block_bytes,
            o.calls,
            a.chunks,
            a.direct_blocks,
            a.spare_installs,
            a.padding_bytes,
            a.retired_bytes,
            a.reused_bytes
        );
        spare_installs += a.spare_installs;
        reused_bytes += a.reused_bytes;
    }
    // Non-vacuity: clients did race to refill, and freed blocks were handed out again.
    assert!(spare_installs > 0, "no two clients ever refilled at once: the race went untested");
    assert!(reused_bytes > 0, "no freed block was reused");
}

/// Clients allocate until the memory nodes are full: each gets the exhaustion error (no panic,
/// no hang), the nodes' last bytes below a whole chunk are still used, and once a node has
/// refused a size, asking again costs no call.
#[test]
fn full_memory_nodes_are_an_error_not_a_panic() {
    const BLOCK: u64 = 3000;
    let chunk_bytes = 1 << 20;
    // 3.5 chunks of room above the reserved megabyte, on each of the two memory nodes.
    let room = 3 * chunk_bytes + chunk_bytes / 2;
    let mut s = sim(7, MEMORY_NODES, Some((1 << 20) + room));
    let allocators = allocators(ChunkOptions { memory_nodes: MEMORY_NODES, chunk_bytes, chunk_align: 4096 });
    let live = Rc::new(RefCell::new(Live::default()));
    let errors = Rc::new(RefCell::new(Vec::new()));
    for i in 0..4 {
        let cn = (i % COMPUTE_NODES as usize) as u16;
        let c = s.add_client(cn).unwrap();
        let (a, live, errors) = (allocators[cn as usize].clone(), live.clone(), errors.clone());
        let c2 = c.clone();
        s.spawn(&c, async move {
            for _ in 0..10_000 {
                match a.alloc(&c2, BLOCK, 8).await {
                    Ok(addr) => live.borrow_mut().take(i, addr, BLOCK, 8),
                    Err(e) => {
                        // Asking again fails the same way, from local state.
                        let again = a.alloc_on(&c2, NodeId(0), BLOCK, 8).await;
                        errors.borrow_mut().push((e, again));
                        return;
                    }
                }
                c2.sleep(50).await;
            }
        });
    }
    s.run().unwrap();
    let errors = errors.borrow();
    assert_eq!(errors.len(), 4, "every client ran into the limit");
    for (e, again) in errors.iter() {
        assert!(
            matches!(e, IndexError::Verbs(VerbsError::RemoteMemoryExhausted { requested_bytes: BLOCK, .. })),
            "{e:?}"
        );
        assert_eq!(
            again,
            &Err(IndexError::Verbs(VerbsError::RemoteMemoryExhausted { node: NodeId(0), requested_bytes: BLOCK }))
        );
    }
    let live = live.borrow();
    assert_eq!(live.violations.first(), None);
    let a = summed(&allocators);
    let handed_out = live.handed_out * BLOCK;
    // All the room is used but for less than a block per chunk tail (retired, or current in
    // each pair of compute and memory node) and per memory node's last direct bytes.
    let slack = (a.chunks + (COMPUTE_NODES * MEMORY_NODES + MEMORY_NODES) as u64) * BLOCK;
    assert!(handed_out + slack >= MEMORY_NODES as u64 * room, "{handed_out} of {room} bytes per node used: {a:?}");
    assert!(a.direct_blocks > 0, "the last bytes below a chunk were not used: {a:?}");
    assert!(a.chunks >= 2 * 3, "{a:?}");

    // One more request on a node that refused this size: an error without a call.
    let before = calls(&s, MEMORY_NODES);
    let c = s.add_client(0).unwrap();
    let (a0, c2, got) = (allocators[0].clone(), c.clone(), Rc::new(RefCell::new(None)));
    let g = got.clone();
    s.spawn(&c, async move { *g.borrow_mut() = Some(a0.alloc(&c2, BLOCK, 8).await) });
    s.run().unwrap();
    assert!(matches!(*got.borrow(), Some(Err(IndexError::Verbs(VerbsError::RemoteMemoryExhausted { .. })))));
    assert_eq!(calls(&s, MEMORY_NODES), before, "a known-full node was asked again");
}

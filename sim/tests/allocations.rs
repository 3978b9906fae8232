//! The simulator counts verbs that address host memory no allocator handed out (outside the
//! reserved bytes): such a verb runs — hardware would let it — but `Stats::unallocated` records
//! it, and the checker and `dmkit run` refuse the run. Blocks handed out before an image was
//! taken stay addressable in simulations restored from it, and freed blocks stay addressable.

use dmkit_rdma::alloc;
use dmkit_rdma::{Buf, NodeId, RemoteAddr, Verbs};
use dmkit_sim::{Sim, SimConfig, UnallocatedVerbs};

fn config() -> SimConfig {
    let mut cfg = SimConfig { step_limit: Some(1_000_000), ..SimConfig::default() };
    cfg.topology.memory_nodes = 2;
    cfg
}

/// Runs `body` as one client of `sim` and returns the run's count of stray verbs.
fn stray<F>(sim: &mut Sim, body: impl FnOnce(dmkit_sim::SimClient) -> F) -> UnallocatedVerbs
where
    F: std::future::Future<Output = ()> + 'static,
{
    let c = sim.add_client(0).unwrap();
    sim.spawn(&c, body(c.clone()));
    sim.run().unwrap();
    sim.stats().unallocated
}

#[test]
fn verbs_inside_blocks_and_reserved_bytes_are_not_counted() {
    let mut sim = Sim::new(config()).unwrap();
    let reserved = config().topology.reserved_bytes;
    let counted = stray(&mut sim, |c| async move {
        let at = alloc::alloc(&c, NodeId(1), 200, 64).await.unwrap();
        c.write(at, Buf::from(vec![1; 200])).await.unwrap();
        c.cas(at.add(192), 0, 1).await.unwrap();
        c.read(RemoteAddr::host(NodeId(0), reserved - 64), Buf::zeroed(64)).await.unwrap();
        c.read(RemoteAddr::device(NodeId(0), 0), Buf::zeroed(8)).await.unwrap();
        alloc::free(&c, at, 200).await.unwrap();
        // A stale pointer into a freed block: the protocols' business, not an address slip.
        c.read(at, Buf::zeroed(8)).await.unwrap();
    });
    assert_eq!(counted, UnallocatedVerbs::default());
}

#[test]
fn a_verb_past_a_block_or_into_a_gap_is_counted_and_the_first_kept() {
    let mut sim = Sim::new(config()).unwrap();
    let counted = stray(&mut sim, |c| async move {
        let at = alloc::alloc(&c, NodeId(1), 200, 64).await.unwrap();
        // The last 8 bytes of this READ are past the block's 200.
        c.read(at.add(136), Buf::zeroed(72)).await.unwrap();
        // The padding between two blocks.
        let next = alloc::alloc(&c, NodeId(1), 64, 4096).await.unwrap();
        assert!(next.offset() >= at.offset() + 4096 - 64);
        c.write(at.add(256), Buf::from(vec![2; 8])).await.unwrap();
        // Another node's memory at the same offset.
        c.read(RemoteAddr::host(NodeId(0), at.offset()), Buf::zeroed(8)).await.unwrap();
    });
    assert_eq!(counted.count, 3);
    let first = counted.first.expect("the first is kept");
    assert_eq!((first.verb, first.len, first.client), ("read", 72, 0));
    assert_eq!(first.nearest.map(|(start, end)| end - start), Some(200));
    assert!(first.to_string().contains("outside the reserved bytes and every allocated block"), "{first}");
}

#[test]
fn blocks_of_a_restored_image_stay_addressable() {
    let mut a = Sim::new(config()).unwrap();
    let c = a.add_client(0).unwrap();
    let out = a.spawn_output(&c, {
        let c = c.clone();
        async move { alloc::alloc(&c, NodeId(0), 4096, 64).await.unwrap() }
    });
    a.run().unwrap();
    let block = out.take();
    let image = a.image().unwrap();
    let mut b = Sim::new(config()).unwrap();
    b.restore(&image).unwrap();
    let counted = stray(&mut b, |c| async move {
        c.read(block.add(4088), Buf::zeroed(8)).await.unwrap();
    });
    assert_eq!(counted.count, 0, "the image's block is known to the restored simulation");
    let counted = stray(&mut b, |c| async move {
        c.read(block.add(4096), Buf::zeroed(8)).await.unwrap();
    });
    assert_eq!(counted.count, 1, "and its end is still its end");
}

//! Images (load once, run many) and the bulk-load fast path: a simulation started from an
//! image continues the imaged one — its memory and its services' state — and bulk-load mode's
//! one-step verbs leave the memory the stepped path leaves.

use dmkit_rdma::alloc;
use dmkit_rdma::service::Service;
use dmkit_rdma::{Buf, NodeId, RemoteAddr, Request, Verbs};
use dmkit_sim::{EarliestChooser, Sim, SimClient, SimConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const SVC: u16 = 1;

/// A service that counts its calls: its state must travel with an image.
struct Counter {
    calls: AtomicU64,
}

impl Service<SimClient> for Counter {
    async fn handle(self: Arc<Self>, _ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        (self.calls.fetch_add(1, Ordering::Relaxed) + 1).to_le_bytes().to_vec()
    }

    fn fork(&self) -> Option<Counter> {
        Some(Counter { calls: AtomicU64::new(self.calls.load(Ordering::Relaxed)) })
    }
}

/// A service that cannot copy its state.
struct Opaque;

impl Service<SimClient> for Opaque {
    async fn handle(self: Arc<Self>, _ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        Vec::new()
    }
}

fn config() -> SimConfig {
    let mut cfg = SimConfig { step_limit: Some(1_000_000), ..SimConfig::default() };
    cfg.topology.server_nodes = 1;
    cfg
}

/// Allocates a block, writes a word into it, calls the counter; returns the block.
fn work(sim: &mut Sim, server: NodeId) -> (RemoteAddr, u64) {
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move {
        let at = alloc::alloc(&c2, NodeId(0), 4096, 64).await.unwrap();
        c2.write(at, Buf::from(7u64.to_le_bytes().to_vec())).await.unwrap();
        let n = c2.call(server, SVC, Vec::new()).await.unwrap();
        (at, u64::from_le_bytes(n.try_into().unwrap()))
    });
    sim.run().unwrap();
    out.take()
}

#[test]
fn a_restored_image_continues_memory_and_services() {
    let cfg = config();
    let server = cfg.topology.server_node_id(0);
    let mut a = Sim::new(cfg.clone()).unwrap();
    a.add_service(server, SVC, || Counter { calls: AtomicU64::new(0) }).unwrap();
    let (first, calls) = work(&mut a, server);
    assert_eq!(calls, 1);
    let image = a.image().unwrap();
    assert!(image.nonzero_bytes() > 0);
    for _ in 0..2 {
        // Each restore starts from the image as it was: the image is not changed by a run.
        let mut b = Sim::new(cfg.clone()).unwrap();
        b.add_service(server, SVC, || Counter { calls: AtomicU64::new(0) }).unwrap();
        b.restore(&image).unwrap();
        assert_eq!(b.read_memory(first, 8).unwrap(), 7u64.to_le_bytes(), "the memory came along");
        let (second, calls) = work(&mut b, server);
        assert_eq!(calls, 2, "the service's state came along");
        assert_ne!(second, first, "the allocator's state came along: the block is not handed out twice");
        assert!(b.image().unwrap().nonzero_bytes() > image.nonzero_bytes());
    }
    assert!(a.image().unwrap().same_memory(&image));
    // A simulation that ends in its image hands over its memory and its services' states
    // instead of copying them; restores continue from it all the same.
    let taken = a.into_image().unwrap();
    assert!(taken.same_memory(&image));
    for _ in 0..2 {
        let mut b = Sim::new(cfg.clone()).unwrap();
        b.add_service(server, SVC, || Counter { calls: AtomicU64::new(0) }).unwrap();
        b.restore(&taken).unwrap();
        assert_eq!(b.read_memory(first, 8).unwrap(), 7u64.to_le_bytes());
        let (second, calls) = work(&mut b, server);
        assert_eq!(calls, 2, "the service's state was handed over");
        assert_ne!(second, first);
    }
}

#[test]
fn images_are_refused_when_they_cannot_be_whole() {
    let cfg = config();
    let server = cfg.topology.server_node_id(0);
    let mut sim = Sim::new(cfg.clone()).unwrap();
    sim.add_service(server, SVC, || Opaque).unwrap();
    let e = sim.image().unwrap_err();
    assert!(e.contains("cannot copy its state"), "{e}");
    let e = sim.into_image().unwrap_err();
    assert!(e.contains("cannot copy its state"), "a state that cannot be copied is not handed over either: {e}");

    let mut sim = Sim::new(cfg.clone()).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    sim.spawn(&c, async move { c2.sleep(1000).await });
    sim.run_until(10).unwrap();
    assert!(sim.image().unwrap_err().contains("still running"));

    let image = Sim::new(SimConfig::default()).unwrap().image().unwrap();
    let mut other = Sim::new(cfg).unwrap();
    let e = other.restore(&image).unwrap_err().to_string();
    assert!(e.contains("server nodes"), "{e}");
}

/// Writes, CASes, FAAs and reads back through doorbell batches in bulk-load mode.
fn bulk(mut sim: Sim) -> (Vec<u8>, Vec<u64>, dmkit_sim::Stats) {
    sim.set_instant(true);
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let at = RemoteAddr::host(NodeId(0), 64 * 1024);
    let out = sim.spawn_output(&c, async move {
        let mut olds = Vec::new();
        for i in 0..50u64 {
            let word = at.add(8 * (i % 16));
            let r = c2
                .post(vec![
                    Request::write(word, (i * 3).to_le_bytes().to_vec()),
                    Request::cas(word, i * 3, i),
                    Request::faa(word, 100),
                ])
                .await
                .unwrap();
            olds.push(r[1].clone().atomic().unwrap());
            olds.push(r[2].clone().atomic().unwrap());
            c2.post_unsignaled(vec![Request::write(at.add(512 + 8 * i), i.to_le_bytes().to_vec())]).unwrap();
        }
        olds
    });
    sim.run().unwrap();
    (sim.read_memory(at, 1024).unwrap(), out.take(), sim.stats())
}

#[test]
fn the_bulk_fast_path_leaves_what_the_stepped_path_leaves() {
    let fast = bulk(Sim::new(SimConfig::default()).unwrap());
    // A chooser turns the fast path off: every verb takes its steps.
    let stepped = bulk(Sim::with_chooser(SimConfig::default(), Box::new(EarliestChooser)).unwrap());
    assert_eq!(fast.0, stepped.0, "memory");
    assert_eq!(fast.1, stepped.1, "the atomics' old values");
    assert_eq!(fast.2.nodes[0].verbs, stepped.2.nodes[0].verbs, "the verbs the node counted");
    assert!(fast.2.steps < stepped.2.steps, "the fast path takes fewer steps");
}

//! Images (load once, run many) and the bulk-load fast paths: a simulation started from an
//! image continues the imaged one — its memory and its services' state — and bulk-load mode's
//! one-step verbs, calls, local accesses and wake-ups leave what the stepped path leaves.

use dmkit_rdma::alloc;
use dmkit_rdma::service::{LocalMemory, Replier, Responder, Service};
use dmkit_rdma::sync::Queue;
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

/// Where the ledger's count and slots sit in its server node's memory.
const LEDGER: u64 = 4096;
const SLOTS: u64 = 32;

/// A service whose RPC threads queue each call for its worker (a deferred reply and a queue's
/// wake-up), which records the call in its node's memory with local accesses and answers it.
#[derive(Default)]
struct Ledger {
    log: Queue<(Vec<u8>, Responder)>,
}

impl Service<SimClient> for Ledger {
    async fn handle(self: Arc<Self>, _ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        unreachable!("every call is dispatched")
    }

    async fn dispatch(self: Arc<Self>, _ctx: SimClient, request: Vec<u8>, to: Responder) -> Option<Vec<u8>> {
        self.log.push((request, to));
        None
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: SimClient, _index: u32) {
        loop {
            let (request, to) = self.log.pop().await;
            let n = ctx.local_faa(LEDGER, 1).await.unwrap();
            let slot = LEDGER + 64 + 16 * (n % SLOTS);
            ctx.local_write(slot, Buf::from(request)).await.unwrap();
            let old = ctx.local_cas(slot + 8, 0, n + 1).await.unwrap();
            let mut reply = ctx.local_read(slot, 16).await.unwrap().to_vec();
            reply.extend(old.to_le_bytes());
            ctx.reply(to, reply).unwrap();
        }
    }
}

/// Calls the ledger 50 times in bulk-load mode (and once a service that is not there); returns
/// the ledger's memory, the replies and the stats.
fn ledger_calls(mut sim: Sim) -> (Vec<u8>, Vec<Vec<u8>>, dmkit_sim::Stats) {
    let server = config().topology.server_node_id(0);
    sim.add_service(server, SVC, Ledger::default).unwrap();
    sim.set_instant(true);
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move {
        let mut replies = Vec::new();
        for i in 0..50u64 {
            replies.push(c2.call(server, SVC, (i * 7 + 1).to_le_bytes().to_vec()).await.unwrap());
        }
        let missing = c2.call(server, SVC + 1, Vec::new()).await.unwrap_err();
        replies.push(missing.to_string().into_bytes());
        replies
    });
    sim.run().unwrap();
    let memory = sim.read_memory(RemoteAddr::host(server, LEDGER), (64 + 16 * SLOTS) as usize).unwrap();
    (memory, out.take(), sim.stats())
}

#[test]
fn bulk_calls_local_accesses_and_wakes_leave_what_the_stepped_path_leaves() {
    let fast = ledger_calls(Sim::new(config()).unwrap());
    // A chooser turns the fast paths off: every delivery, reply, access and wake-up is a step.
    let stepped = ledger_calls(Sim::with_chooser(config(), Box::new(EarliestChooser)).unwrap());
    assert_eq!(u64::from_le_bytes(fast.0[..8].try_into().unwrap()), 50, "every call was recorded");
    assert_eq!(fast.0, stepped.0, "the ledger's memory");
    assert_eq!(fast.1, stepped.1, "the replies");
    // Call 49 reuses call 17's slot: its CAS finds call 17's word (18) and fails.
    let last: Vec<u64> = fast.1[49].chunks(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
    assert_eq!(last, [49 * 7 + 1, 18, 18], "the slot's request and word, then the CAS's old word");
    let server = config().topology.server_node_id(0).0 as usize;
    assert_eq!(fast.2.nodes[server].verbs, stepped.2.nodes[server].verbs, "the calls the node counted");
    assert_eq!(fast.2.now_ns, 0, "bulk-load mode takes no time");
}

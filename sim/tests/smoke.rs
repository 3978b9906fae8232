use dmkit_rdma::{Buf, NodeId, RemoteAddr, Verbs};
use dmkit_sim::{Sim, SimConfig};
use std::cell::Cell;
use std::rc::Rc;

#[test]
fn one_read_round_trip() {
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    let c = sim.add_client(0).unwrap();
    let out = Rc::new(Cell::new(0u64));
    let o = out.clone();
    let c2 = c.clone();
    sim.write_memory(RemoteAddr::host(NodeId(0), 4096), &[7u8; 64]).unwrap();
    sim.spawn(&c, async move {
        let t0 = c2.now_ns();
        let b = c2.read(RemoteAddr::host(NodeId(0), 4096), Buf::zeroed(64)).await.unwrap();
        assert_eq!(&b[..], &[7u8; 64]);
        o.set(c2.now_ns() - t0);
    });
    sim.run().unwrap();
    println!("rtt {}", out.get());
    assert!(out.get() > 1500 && out.get() < 2500);
}

/// A round trip is a wait on the critical path: READs to two memory nodes posted together and
/// awaited together are one, the same READs one after the other two (the metric counted every
/// completion before 2026-12-02: 2, 2 and 8 here).
#[test]
fn round_trips_count_waits_in_flight_together_once() {
    let mut cfg = SimConfig::default();
    cfg.topology.memory_nodes = 2;
    let mut sim = Sim::new(cfg).unwrap();
    let c = sim.add_client(0).unwrap();
    let at = |n: u16| RemoteAddr::host(NodeId(n), 4096);
    let read = move |n: u16| vec![dmkit_rdma::Request::read(at(n), Buf::zeroed(64))];
    let counts = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (c2, out) = (c.clone(), counts.clone());
    sim.spawn(&c, async move {
        let rts = || c2.stats().round_trips;
        let mut last = rts();
        let mut step = |name: &'static str, now: u64| {
            out.borrow_mut().push((name, now - last));
            last = now;
        };
        // Sequential: two round trips.
        c2.post(read(0)).await.unwrap();
        c2.post(read(1)).await.unwrap();
        step("sequential", rts());
        // Together: both posted before either is awaited.
        let (a, b) = (c2.post(read(0)), c2.post(read(1)));
        a.await.unwrap();
        b.await.unwrap();
        step("together", rts());
        // Eight READs to one node and one to the other, all in flight together: still one.
        let many: Vec<_> = (0..8).map(|i| c2.post(read(i % 2))).collect();
        for f in many {
            f.await.unwrap();
        }
        step("eight together", rts());
    });
    sim.run().unwrap();
    assert_eq!(*counts.borrow(), vec![("sequential", 2), ("together", 1), ("eight together", 1)]);
}

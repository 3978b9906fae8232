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

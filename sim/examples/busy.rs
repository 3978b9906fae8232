//! 640 closed-loop clients (10 compute nodes x 64) issuing 64-byte READs to two memory nodes for
//! a virtual duration: the workload of the simulator-speed target (DESIGN.md §7), for profilers.
//!
//! `cargo run --release -p dmkit-sim --example busy -- [virtual_us]`

use dmkit_rdma::{Buf, NodeId, RemoteAddr, Response, Verbs};
use dmkit_sim::{Sim, SimConfig, Topology};
use rand::Rng;

fn main() {
    let virtual_ns: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2_000) * 1000;
    let cfg = SimConfig {
        topology: Topology { memory_nodes: 2, compute_nodes: 10, ..Topology::default() },
        ..SimConfig::default()
    };
    let mut sim = Sim::new(cfg).unwrap();
    for i in 0..640u32 {
        let c = sim.add_client((i % 10) as u16).unwrap();
        let c2 = c.clone();
        sim.spawn(&c, async move {
            let mut buf = Buf::zeroed(64);
            while c2.now_ns() < virtual_ns {
                let (node, line) = {
                    let mut rng = c2.rng();
                    (rng.random_range(0..2u16), rng.random_range(0..1u64 << 20))
                };
                let addr = RemoteAddr::host(NodeId(node), line * 64);
                buf = match c2.read(addr, buf).await {
                    Ok(b) => b,
                    Err(e) => panic!("{e}"),
                };
            }
            let _: Option<Response> = None;
        });
    }
    let started = std::time::Instant::now();
    sim.run().unwrap();
    let s = sim.stats();
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{} verbs, {} steps in {:.3} s: {:.2} M verbs/s, {:.0} ns/step",
        s.verbs_posted,
        s.steps,
        wall,
        s.verbs_posted as f64 / wall / 1e6,
        wall * 1e9 / s.steps as f64
    );
}

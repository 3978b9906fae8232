//! Threads, coroutines, CPU costs and services at the simulator's boundary.
//!
//! 1. A thread is a serial CPU: its coroutines never compute in parallel, other threads are not
//!    delayed, and a verb posted while another coroutine computes leaves after that work.
//! 2. The profile's `[cpu]` costs are charged: post and poll are in the unloaded round trip, and
//!    coroutines of one thread contend for them.
//! 3. The spin detector reports a task that loops without virtual time advancing, and only that.
//! 4. Services on server nodes: throughput bounded by the node's RPC threads, handlers that issue
//!    verbs and calls, local memory access (and its weak atomicity against remote RMWs and
//!    READs), workers fed by a `Queue`, crash-stop and restart, and bad registrations and calls.
//!
//! Expected numbers come from the default profile and the topology, never from a run. Tests
//! named after a simulator bug are regressions: each reproduced a bug found while writing this
//! file, and passes since it was fixed.

use dmkit_rdma::alloc::{self, ALLOCATOR_SERVICE};
use dmkit_rdma::service::{LocalMemory, Replier, Responder, Service};
use dmkit_rdma::sync::Queue;
use dmkit_rdma::{Buf, ClientCtx, CpuWork, NodeId, RemoteAddr, Verbs, VerbsError};
use dmkit_sim::{
    Chooser, NodeCrash, RandomChooser, Sim, SimClient, SimConfig, SimError, StepClass, StepInfo, TaskOutput, VerbKind,
};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where tests that address memory node 0 directly put their words: inside its reserved first
/// MiB, so the allocator never hands these bytes out.
const BASE: u64 = 64 * 1024;

/// The service id the tests register their services under (0 is the allocator on memory nodes).
const SVC: u16 = 1;

fn host(offset: u64) -> RemoteAddr {
    RemoteAddr::host(NodeId(0), offset)
}

/// The default config with a step limit, so that a regression shows up as an error, not a hang.
fn config() -> SimConfig {
    SimConfig { step_limit: Some(5_000_000), ..SimConfig::default() }
}

/// One memory node, one server node with `server_threads` RPC threads, `compute_nodes` compute
/// nodes.
fn server_config(server_threads: u16, compute_nodes: u16) -> SimConfig {
    let mut cfg = config();
    cfg.topology.server_nodes = 1;
    cfg.topology.server_threads = server_threads;
    cfg.topology.compute_nodes = compute_nodes;
    cfg
}

fn server_node(cfg: &SimConfig) -> NodeId {
    cfg.topology.server_node_id(0)
}

/// CPU nanoseconds of posting a doorbell batch of `verbs` verbs, from the profile.
fn post_ns(cfg: &SimConfig, verbs: u64) -> u64 {
    let c = &cfg.profile.cpu;
    (c.post_ns + c.post_per_verb_ns * verbs as f64).round() as u64
}

fn poll_ns(cfg: &SimConfig) -> u64 {
    cfg.profile.cpu.poll_ns.round() as u64
}

fn work_ns(cfg: &SimConfig, work: CpuWork, units: u64) -> u64 {
    cfg.profile.cpu.cost_ns(work, units).round() as u64
}

fn read_rtt(cfg: &SimConfig) -> u64 {
    cfg.profile.unloaded_round_trip_ns(VerbKind::Read, 64, false)
}

fn word(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn u64_of(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("at least 8 bytes"))
}

fn mem_u64(sim: &Sim, addr: RemoteAddr) -> u64 {
    u64_of(&sim.read_memory(addr, 8).unwrap())
}

/// Index code sees CPU only through `ClientCtx`: compute through the trait, as it would.
async fn compute<C: ClientCtx>(c: &C, ns: u64) -> u64 {
    c.charge_cpu(CpuWork::Nanoseconds, ns).await;
    c.now_ns()
}

/// Times one 64-byte READ of `addr`.
async fn timed_read(c: &SimClient, addr: RemoteAddr) -> u64 {
    let t0 = c.now_ns();
    c.read(addr, Buf::zeroed(64)).await.unwrap();
    c.now_ns() - t0
}

// ================================================================== 1. threads and coroutines

#[test]
fn coroutines_of_one_thread_never_compute_in_parallel() {
    const WORK: u64 = 10_000;
    let cfg = config();
    let work = work_ns(&cfg, CpuWork::Nanoseconds, WORK);
    let mut sim = Sim::new(cfg).unwrap();
    let a = sim.add_client(0).unwrap();
    let b = sim.add_coroutine(&a);
    let (c, d) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());
    let (ia, ib, ic, id) = (a.identity(), b.identity(), c.identity(), d.identity());
    assert_eq!((ia.thread, ia.coroutine), (ib.thread, 0), "a is coroutine 0 of the thread b shares");
    assert_eq!(ib.coroutine, 1, "b is the second coroutine of a's thread");
    assert!(ic.thread != ia.thread && id.thread != ia.thread && ic.thread != id.thread);
    assert_eq!((ic.coroutine, id.coroutine), (0, 0));

    let outs: Vec<_> = [&a, &b, &c, &d]
        .into_iter()
        .map(|client| {
            let cl = client.clone();
            sim.spawn_output(client, async move { compute(&cl, WORK).await })
        })
        .collect();
    sim.run().unwrap();
    let ends: Vec<u64> = outs.iter().map(TaskOutput::take).collect();
    let mut same_thread = [ends[0], ends[1]];
    same_thread.sort_unstable();
    assert_eq!(same_thread, [work, 2 * work], "coroutines of one thread compute one after the other");
    assert_eq!([ends[2], ends[3]], [work, work], "two threads compute in parallel");
}

#[test]
fn charge_cpu_delays_only_its_own_thread() {
    const WORK: u64 = 50_000;
    const B_POSTS_AT: u64 = 40_000;
    let cfg = config();
    let (rtt, work) = (read_rtt(&cfg), work_ns(&cfg, CpuWork::Nanoseconds, WORK));
    let mut sim = Sim::new(cfg).unwrap();
    let a = sim.add_client(0).unwrap();
    let b = sim.add_coroutine(&a);
    let other = sim.add_client(0).unwrap();

    let a2 = a.clone();
    let a_end = sim.spawn_output(&a, async move { compute(&a2, WORK).await });
    // Another thread of the same compute node READs while A computes (until B posts: see
    // `a_deferred_post_does_not_hold_the_nic_for_other_threads`).
    let o = other.clone();
    let other_latencies = sim.spawn_output(&other, async move {
        let mut latencies = Vec::new();
        while o.now_ns() + rtt < B_POSTS_AT {
            latencies.push(timed_read(&o, host(BASE)).await);
        }
        latencies
    });
    // B sleeps (no CPU), then posts during A's computation.
    let b2 = b.clone();
    let b_out = sim.spawn_output(&b, async move {
        b2.sleep(B_POSTS_AT).await;
        let posted_at = b2.now_ns();
        (posted_at, timed_read(&b2, host(BASE + 64)).await)
    });
    sim.run().unwrap();

    assert_eq!(a_end.take(), work, "A's work is not delayed by B's post, which queues behind it");
    let latencies = other_latencies.take();
    assert_eq!(latencies.len() as u64, B_POSTS_AT / rtt, "READs on the other thread: {latencies:?}");
    assert!(latencies.iter().all(|&l| l == rtt), "another thread's READs took {latencies:?}, unloaded is {rtt}");
    let (posted_at, b_latency) = b_out.take();
    assert_eq!(posted_at, B_POSTS_AT);
    // B's post starts when A's work ends; from there it is an unloaded round trip.
    assert_eq!(b_latency, (work - B_POSTS_AT) + rtt, "B's READ left only after A's remaining work");
}

/// B posts while A (same thread) computes, so B's verb leaves when A's work ends. Meanwhile a
/// client on another thread of the same compute node posts a READ: nothing delays it.
#[test]
fn a_deferred_post_does_not_hold_the_nic_for_other_threads() {
    const WORK: u64 = 50_000;
    let cfg = config();
    let rtt = read_rtt(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    let a = sim.add_client(0).unwrap();
    let b = sim.add_coroutine(&a);
    let other = sim.add_client(0).unwrap();
    let a2 = a.clone();
    sim.spawn(&a, async move {
        a2.charge_cpu(CpuWork::Nanoseconds, WORK).await;
    });
    let b2 = b.clone();
    sim.spawn(&b, async move {
        b2.read(host(BASE), Buf::zeroed(64)).await.unwrap();
    });
    let o = other.clone();
    let latency = sim.spawn_output(&other, async move {
        o.sleep(1_000).await;
        timed_read(&o, host(BASE + 64)).await
    });
    sim.run().unwrap();
    assert_eq!(latency.take(), rtt, "another thread's READ, posted while B's post waits for A's work");
}

/// A completion that arrives while another coroutine of the thread computes is found by the
/// poll that follows the computation.
#[test]
fn a_completion_waits_for_the_computing_coroutine() {
    const WORK: u64 = 50_000;
    let cfg = config();
    let (rtt, post, poll, work) =
        (read_rtt(&cfg), post_ns(&cfg, 1), poll_ns(&cfg), work_ns(&cfg, CpuWork::Nanoseconds, WORK));
    let mut sim = Sim::new(cfg).unwrap();
    let c = sim.add_client(0).unwrap();
    let a = sim.add_coroutine(&c);
    // C is polled first: it posts at t=0, then A computes after C's post.
    let c2 = c.clone();
    let c_end = sim.spawn_output(&c, async move {
        c2.read(host(BASE), Buf::zeroed(64)).await.unwrap();
        c2.now_ns()
    });
    let a2 = a.clone();
    let a_end = sim.spawn_output(&a, async move { compute(&a2, WORK).await });
    sim.run().unwrap();
    assert!(rtt < work, "the READ's response arrives during A's work");
    assert_eq!(a_end.take(), post + work, "A's work starts after C's post");
    assert_eq!(c_end.take(), post + work + poll, "C's completion is polled after A's work");
}

// ================================================================== 2. CPU costs

/// Latencies of two 64-byte READs posted at t=0 by two clients: coroutines of one thread, or
/// two threads of one compute node.
fn two_concurrent_reads(coroutines: bool) -> [u64; 2] {
    let mut sim = Sim::new(config()).unwrap();
    let x = sim.add_client(0).unwrap();
    let y = if coroutines { sim.add_coroutine(&x) } else { sim.add_client(0).unwrap() };
    let outs: Vec<_> = [(&x, BASE), (&y, BASE + 4096)]
        .into_iter()
        .map(|(client, offset)| {
            let cl = client.clone();
            sim.spawn_output(client, async move { timed_read(&cl, host(offset)).await })
        })
        .collect();
    sim.run().unwrap();
    let mut l = [outs[0].take(), outs[1].take()];
    l.sort_unstable();
    l
}

#[test]
fn post_and_poll_are_charged_and_contended() {
    let cfg = config();
    let (rtt, post, poll) = (read_rtt(&cfg), post_ns(&cfg, 1), poll_ns(&cfg));
    assert!(post > 0 && poll > 0, "the default profile charges post and poll");

    // One client alone: exactly the profile's unloaded round trip, which includes post and poll.
    let mut sim = Sim::new(config()).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let single = sim.spawn_output(&c, async move {
        let mut l = Vec::new();
        for i in 0..5 {
            l.push(timed_read(&c2, host(BASE + i * 64)).await);
        }
        l
    });
    sim.run().unwrap();
    assert_eq!(single.take(), vec![rtt; 5]);

    let threads = two_concurrent_reads(false);
    let coroutines = two_concurrent_reads(true);
    assert_eq!(threads[0], rtt);
    assert_eq!(coroutines[0], rtt);
    // Two threads post in parallel: the second READ only queues at the NICs (tens of ns).
    assert!(threads[1] < rtt + post, "two threads: {threads:?}, unloaded {rtt}");
    // Two coroutines share the CPU: the second post waits for the first.
    assert!(
        coroutines[1] > threads[1],
        "coroutines {coroutines:?} must be slower than threads {threads:?} (post/poll contention)"
    );
    assert!(
        (rtt + post..=rtt + post + poll).contains(&coroutines[1]),
        "the second coroutine's READ took {} ns; unloaded {rtt} + one post {post} (+ at most one poll {poll})",
        coroutines[1]
    );
}

// ================================================================== 3. the spin detector

#[test]
fn a_loop_that_sleeps_zero_is_reported_as_a_spin() {
    let cfg = config();
    let limit = cfg.spin_poll_limit;
    let mut sim = Sim::new(cfg).unwrap();
    let _bystander = sim.add_client(0).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    sim.spawn(&c, async move {
        c2.read(host(BASE), Buf::zeroed(8)).await.unwrap();
        loop {
            c2.sleep(0).await;
        }
    });
    match sim.run() {
        Err(SimError::Spin { client, polls, now_ns }) => {
            assert_eq!(client, Some(c.id()), "the spinning client is named");
            assert!(polls >= limit, "reported after {polls} polls, the limit is {limit}");
            let rtt = config().profile.unloaded_round_trip_ns(VerbKind::Read, 8, false);
            assert_eq!(now_ns, rtt, "the spin began when the READ completed");
        }
        other => panic!("expected a spin report, got {other:?}"),
    }
}

/// A `yield_now` loop waiting for a flag another client sets after a WRITE and a READ: time
/// advances by one coroutine switch a yield, so it is not a spin. Returns the spinner's yields,
/// when the flag was set and when the spinner saw it.
fn yield_loop(same_thread: bool) -> (u64, u64, u64) {
    let mut sim = Sim::new(config()).unwrap();
    let setter = sim.add_client(0).unwrap();
    let spinner = if same_thread { sim.add_coroutine(&setter) } else { sim.add_client(0).unwrap() };
    let flag = Rc::new(Cell::new(None::<u64>));
    let (f, s) = (flag.clone(), setter.clone());
    sim.spawn(&setter, async move {
        s.write(host(BASE), Buf::from(word(1))).await.unwrap();
        s.read(host(BASE), Buf::zeroed(8)).await.unwrap();
        f.set(Some(s.now_ns()));
    });
    let (f, s) = (flag.clone(), spinner.clone());
    let out = sim.spawn_output(&spinner, async move {
        let mut yields = 0u64;
        while f.get().is_none() {
            s.yield_now().await;
            yields += 1;
        }
        (yields, s.now_ns())
    });
    sim.run().unwrap_or_else(|e| panic!("a yield loop is not a spin: {e}"));
    let set_at = flag.get().expect("the flag was set");
    let (yields, seen_at) = out.take();
    (yields, set_at, seen_at)
}

#[test]
fn a_yield_loop_is_not_a_spin_and_sees_the_flag() {
    let cfg = config();
    let (switch, post, poll) = (cfg.profile.cpu.coroutine_switch_ns.ceil() as u64, post_ns(&cfg, 1), poll_ns(&cfg));
    let unloaded = cfg.profile.unloaded_round_trip_ns(VerbKind::Write, 8, false)
        + cfg.profile.unloaded_round_trip_ns(VerbKind::Read, 8, false);

    // On a thread of its own, the spinner's time is exactly its yields, and it sees the flag at
    // the end of the yield during which it was set. The setter is not delayed.
    let (yields, set_at, seen_at) = yield_loop(false);
    assert_eq!(set_at, unloaded, "the setter's thread is not delayed by the spinner");
    assert_eq!(seen_at, yields * switch);
    assert!(seen_at >= set_at && seen_at < set_at + switch, "flag set at {set_at}, seen at {seen_at}");

    // Sharing the setter's thread: the thread never idles, so its time is the spinner's yields
    // plus the setter's two posts and two polls; each verb is delayed by at most two switches
    // (one before its post, one before its poll) and the poll that waited for them.
    let (yields, set_at, seen_at) = yield_loop(true);
    assert_eq!(seen_at, yields * switch + 2 * post + 2 * poll, "every ns of the thread is accounted for");
    assert!(seen_at >= set_at && seen_at <= set_at + switch, "flag set at {set_at}, seen at {seen_at}");
    assert!(
        set_at > unloaded && set_at <= unloaded + 2 * (2 * switch + poll),
        "set at {set_at}: unloaded {unloaded} plus at most two switches and a poll per verb"
    );
}

// ================================================================== 4. services

/// Charges `ns` of CPU per request and echoes it.
#[derive(Debug)]
struct Compute {
    ns: u64,
}

impl Service<SimClient> for Compute {
    async fn handle(self: Arc<Self>, ctx: SimClient, request: Vec<u8>) -> Vec<u8> {
        ctx.charge_cpu(CpuWork::Nanoseconds, self.ns).await;
        request
    }
}

/// Completions per ns over `[WARM_NS, END_NS)` of 64 closed-loop callers on 4 compute nodes,
/// calling a service on a server node with `threads` RPC threads whose handler computes for
/// `handler_ns`; and the rate the threads allow.
fn service_throughput(threads: u16, handler_ns: u64) -> (f64, f64) {
    const CALLERS: u16 = 64;
    const COMPUTE_NODES: u16 = 4;
    const WARM_NS: u64 = 200_000;
    const END_NS: u64 = 2_200_000;
    let cfg = server_config(threads, COMPUTE_NODES);
    let server = server_node(&cfg);
    let c = &cfg.profile.cpu;
    // Per request, one RPC thread dispatches it, runs the handler and posts the reply.
    let per_request_ns =
        c.cost_ns(CpuWork::Nanoseconds, handler_ns) + c.rpc_dispatch_ns + c.post_ns + c.post_per_verb_ns;
    let expected = threads as f64 / per_request_ns;
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, move || Compute { ns: handler_ns }).unwrap();
    let done = Rc::new(RefCell::new(Vec::new()));
    for i in 0..CALLERS {
        let c = sim.add_client(i % COMPUTE_NODES).unwrap();
        let (c2, done) = (c.clone(), done.clone());
        sim.spawn(&c, async move {
            while c2.now_ns() < END_NS {
                let reply = c2.call(server, SVC, word(i as u64)).await.unwrap();
                assert_eq!(u64_of(&reply), i as u64, "the handler echoes the request");
                done.borrow_mut().push(c2.now_ns());
            }
        });
    }
    sim.run().unwrap();
    let in_window = done.borrow().iter().filter(|&&t| (WARM_NS..END_NS).contains(&t)).count();
    (in_window as f64 / (END_NS - WARM_NS) as f64, expected)
}

#[test]
fn a_server_node_serves_at_the_rate_its_threads_allow() {
    const HANDLER_NS: u64 = 10_000;
    let (one, expected_one) = service_throughput(1, HANDLER_NS);
    let (four, expected_four) = service_throughput(4, HANDLER_NS);
    for (threads, got, expected) in [(1, one, expected_one), (4, four, expected_four)] {
        let ratio = got / expected;
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{threads} threads: {:.3} calls/us, the threads allow {:.3} calls/us",
            got * 1e3,
            expected * 1e3
        );
    }
    let scale = four / one;
    assert!((3.6..=4.4).contains(&scale), "4 threads serve {scale:.2}x of 1 thread");
}

/// Calls made in instant (bulk-load) mode use no NIC capacity: after 20,000 of them, a timed
/// call and a timed READ to the same node take their unloaded time (a regression: instant
/// calls left the node's inbound link busy for their total transfer time, so the first timed
/// operation after a load waited hundreds of microseconds).
#[test]
fn instant_calls_leave_no_backlog() {
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || Compute { ns: 0 }).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let reference = sim.spawn_output(&c, async move {
        let t0 = c2.now_ns();
        c2.call(server, SVC, vec![0; 64]).await.unwrap();
        let call = c2.now_ns() - t0;
        let t0 = c2.now_ns();
        c2.read(RemoteAddr::host(server, BASE), Buf::zeroed(64)).await.unwrap();
        (call, c2.now_ns() - t0)
    });
    sim.run().unwrap();
    let (call_ns, read_ns) = reference.take();
    sim.set_instant(true);
    let c2 = c.clone();
    sim.spawn(&c, async move {
        for _ in 0..20_000 {
            c2.call(server, SVC, vec![0; 64]).await.unwrap();
        }
    });
    sim.run().unwrap();
    sim.set_instant(false);
    let c2 = c.clone();
    let after = sim.spawn_output(&c, async move {
        let t0 = c2.now_ns();
        c2.read(RemoteAddr::host(server, BASE), Buf::zeroed(64)).await.unwrap();
        let read = c2.now_ns() - t0;
        let t0 = c2.now_ns();
        c2.call(server, SVC, vec![0; 64]).await.unwrap();
        (c2.now_ns() - t0, read)
    });
    sim.run().unwrap();
    assert_eq!(after.take(), (call_ns, read_ns));
}

#[test]
fn cpu_is_free_exactly_in_instant_mode() {
    // Index code skips work done only to price a charge when `cpu_is_free` says so (HStore's
    // SLS links a loaded skiplist once): it must be true only where a charge takes no time.
    const WORK: u64 = 10_000;
    let cfg = config();
    let work = work_ns(&cfg, CpuWork::Nanoseconds, WORK);
    let mut sim = Sim::new(cfg).unwrap();
    let c = sim.add_client(0).unwrap();
    let mut seen = Vec::new();
    for instant in [false, true, false] {
        sim.set_instant(instant);
        let c2 = c.clone();
        let out = sim.spawn_output(&c, async move {
            let (free, t0) = (c2.cpu_is_free(), c2.now_ns());
            c2.charge_cpu(CpuWork::Nanoseconds, WORK).await;
            (free, c2.now_ns() - t0)
        });
        sim.run().unwrap();
        seen.push(out.take());
    }
    assert!(work > 0);
    assert_eq!(seen, [(false, work), (true, 0), (false, work)]);
}

/// The unloaded round trip of one call of `request_len` bytes to a handler that computes
/// nothing, on one server thread, under `cfg`.
fn call_rtt(cfg: SimConfig, request_len: usize) -> u64 {
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || Compute { ns: 0 }).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let rtt = sim.spawn_output(&c, async move {
        let t0 = c2.now_ns();
        c2.call(server, SVC, vec![0; request_len]).await.unwrap();
        c2.now_ns() - t0
    });
    sim.run().unwrap();
    rtt.take()
}

/// A call's request crosses the server's receive pipeline and is DMA-written into its receive
/// buffer before a thread sees it, as a WRITE's payload is before it is placed: the round trip
/// moves one for one with the responder's pipeline latency and the PCIe write latency, and the
/// request's bytes take the server's PCIe bandwidth. (Until 2026-11-30 neither stage was charged,
/// and a small call was cheaper than a small READ.)
#[test]
fn a_call_pays_the_servers_receive_pipeline_and_dma() {
    let base = server_config(1, 1);
    let rtt = call_rtt(base.clone(), 8);
    let mut slower = base.clone();
    slower.profile.responder_latency_ns += 1_000;
    assert_eq!(call_rtt(slower, 8), rtt + 1_000, "the receive pipeline");
    let mut slower = base.clone();
    slower.profile.pcie_write_latency_ns += 1_000;
    assert_eq!(call_rtt(slower, 8), rtt + 1_000, "the DMA write of the request");
    // 64 KiB more of request: the links' and PCIe's serialisation both grow with it.
    let mut narrow = base.clone();
    narrow.profile.pcie_bytes_per_s /= 100.0;
    let extra = |cfg: SimConfig| call_rtt(cfg.clone(), 65_544) - call_rtt(cfg, 8);
    let pcie_ns = |cfg: &SimConfig| 65_536.0 / cfg.profile.pcie_bytes_per_s * 1e9;
    let growth = extra(narrow.clone()) as f64 - extra(base.clone()) as f64;
    let expected = pcie_ns(&narrow) - pcie_ns(&base);
    assert!((growth - expected).abs() <= 2.0, "PCIe: the round trip grew {growth} ns, expected {expected:.0}");
    // Unloaded, a small call is no cheaper than a small READ, as small eRPC round trips (2-3
    // us) are not against one-sided READs (1.5-2.5 us; HStore digest, section 7): 2,166 against
    // 2,107 ns on the default profile (1,666 before the two stages were charged).
    let read = base.profile.unloaded_round_trip_ns(VerbKind::Read, 8, false);
    assert!(rtt >= read, "an 8-B call {rtt} ns against an 8-B READ {read} ns");
}

/// A request the server's NIC has received but not yet written into the receive buffer when the
/// node crashes is lost with the crash: the call fails, even though the node's next incarnation
/// is up before the request would have been delivered, and that incarnation never serves it.
#[test]
fn a_call_caught_in_its_receive_dma_by_a_crash_fails() {
    let mut cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let run = |cfg: SimConfig| {
        let mut sim = Sim::new(cfg).unwrap();
        let created = Rc::new(Cell::new(0u32));
        let s = created.clone();
        sim.add_service(server, SVC, move || {
            s.set(s.get() + 1);
            Compute { ns: 0 }
        })
        .unwrap();
        let c = sim.add_client(0).unwrap();
        let c2 = c.clone();
        let out = sim.spawn_output(&c, async move { c2.call(server, SVC, word(7)).await.map(|r| u64_of(&r)) });
        sim.run().unwrap();
        (out.take(), sim.take_trace(), sim.stats().faults, created.get())
    };
    // Where the stages fall, from a run without faults.
    cfg.trace = true;
    let (ok, trace, _, _) = run(cfg.clone());
    assert_eq!(ok, Ok(7));
    let at = |kind: &str| -> u64 {
        let line = trace.iter().find(|l| l.contains(kind)).unwrap_or_else(|| panic!("no {kind} step"));
        line.strip_prefix("t=").and_then(|l| l.split(' ').next()).unwrap().parse().unwrap()
    };
    let (arrive, deliver) = (at("RpcArrive"), at("RpcDeliver"));
    assert!(deliver >= arrive + 3, "the receive stages take time: arrival {arrive} ns, delivery {deliver} ns");
    // Crash just after the arrival, restart just before the delivery.
    cfg.trace = false;
    cfg.faults.node_crashes = vec![NodeCrash { node: server.0, at_ns: arrive + 1, restart_at_ns: Some(deliver - 1) }];
    let (result, _, faults, created) = run(cfg);
    assert_eq!(result, Err(VerbsError::NodeDown(server)), "the request died with the incarnation that received it");
    assert_eq!((faults.node_crashes, faults.node_restarts, faults.calls_failed_node_down), (1, 1, 1));
    assert_eq!(created, 2, "the service was created at the start and again at the restart");
}

/// Per request: READs a word on memory node 0 and allocates 64 bytes from its allocator;
/// answers the word and the block's address (or nothing, if either failed).
#[derive(Debug)]
struct Fetch {
    word: RemoteAddr,
}

impl Service<SimClient> for Fetch {
    async fn handle(self: Arc<Self>, ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        let read = ctx.read(self.word, Buf::zeroed(8)).await;
        let block = alloc::alloc(&ctx, NodeId(0), 64, 64).await;
        match (read, block) {
            (Ok(b), Ok(addr)) => [word(b.u64_at(0)), word(addr.raw())].concat(),
            _ => Vec::new(),
        }
    }
}

#[test]
fn a_handler_issues_verbs_and_calls() {
    const VALUE: u64 = 0x0123_4567_89ab_cdef;
    const CALLERS: u64 = 2;
    const CALLS: u64 = 3;
    let cfg = server_config(4, 1);
    let (server, reserved) = (server_node(&cfg), cfg.topology.reserved_bytes);
    let mut sim = Sim::new(cfg).unwrap();
    sim.write_memory(host(BASE), &word(VALUE)).unwrap();
    sim.add_service(server, SVC, || Fetch { word: host(BASE) }).unwrap();
    let outs: Vec<_> = (0..CALLERS)
        .map(|_| {
            let c = sim.add_client(0).unwrap();
            let c2 = c.clone();
            sim.spawn_output(&c, async move {
                let mut replies = Vec::new();
                for _ in 0..CALLS {
                    replies.push(c2.call(server, SVC, Vec::new()).await.unwrap());
                }
                replies
            })
        })
        .collect();
    sim.run().unwrap();
    let mut blocks = Vec::new();
    for reply in outs.iter().flat_map(TaskOutput::take) {
        assert_eq!(reply.len(), 16, "the handler's READ and allocation succeeded");
        assert_eq!(u64_of(&reply[..8]), VALUE, "the handler READ the word on memory node 0");
        let block = RemoteAddr::from_raw(u64_of(&reply[8..]));
        assert_eq!(block.node(), NodeId(0));
        assert!(block.offset() >= reserved && block.offset() % 64 == 0, "allocated {block}");
        blocks.push(block.raw());
    }
    blocks.sort_unstable();
    blocks.dedup();
    assert_eq!(blocks.len() as u64, CALLERS * CALLS, "every allocation got its own block");
    let stats = sim.stats();
    let n = CALLERS * CALLS;
    assert_eq!(stats.nodes[0].verbs_of(VerbKind::Read).count, n, "the handlers' READs reached memory node 0");
    assert_eq!(stats.nodes[0].verbs_of(VerbKind::Call).count, n, "the handlers' allocator calls");
    assert_eq!(stats.nodes[server.0 as usize].verbs_of(VerbKind::Call).count, n, "the callers' calls");
}

/// What a handler's local accesses returned, by name.
type LocalResults = Arc<Mutex<BTreeMap<&'static str, Result<u64, VerbsError>>>>;

/// Exercises every local access on its own node and records the results.
#[derive(Debug)]
struct LocalOps {
    results: LocalResults,
    host_bytes: u64,
}

/// Offsets on the server node: a word the service changes, one a client writes remotely.
const LOCAL_WORD: u64 = 4096;
const REMOTE_WORD: u64 = 4096 + 64;

impl Service<SimClient> for LocalOps {
    async fn handle(self: Arc<Self>, ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        let unit = |r: Result<(), VerbsError>| r.map(|()| 0);
        let as_word = |r: Result<Buf, VerbsError>| r.map(|b| b.u64_at(0));
        let mut out = Vec::new();
        out.push(("write", unit(ctx.local_write(LOCAL_WORD, Buf::from(word(11))).await)));
        out.push(("read", as_word(ctx.local_read(LOCAL_WORD, 8).await)));
        out.push(("cas hit", ctx.local_cas(LOCAL_WORD, 11, 22).await));
        out.push(("cas miss", ctx.local_cas(LOCAL_WORD, 11, 33).await));
        out.push(("faa", ctx.local_faa(LOCAL_WORD, 5).await));
        out.push(("read remote write", as_word(ctx.local_read(REMOTE_WORD, 8).await)));
        out.push(("read past the end", as_word(ctx.local_read(self.host_bytes - 4, 8).await)));
        out.push(("read beyond offsets", as_word(ctx.local_read(RemoteAddr::OFFSET_LIMIT, 8).await)));
        out.push(("unaligned cas", ctx.local_cas(LOCAL_WORD + 4, 0, 1).await));
        out.push(("unaligned faa", ctx.local_faa(LOCAL_WORD + 1, 1).await));
        self.results.lock().unwrap().extend(out);
        Vec::new()
    }
}

#[test]
fn local_memory_of_a_service_node() {
    let cfg = server_config(1, 1);
    let (server, host_bytes) = (server_node(&cfg), cfg.profile.host_memory_bytes);
    let mut sim = Sim::new(cfg).unwrap();
    let results: LocalResults = Arc::default();
    let r = results.clone();
    sim.add_service(server, SVC, move || LocalOps { results: r.clone(), host_bytes }).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move {
        c2.write(RemoteAddr::host(server, REMOTE_WORD), Buf::from(word(0x5eed))).await.unwrap();
        c2.call(server, SVC, Vec::new()).await.unwrap();
        let seen = c2.read(RemoteAddr::host(server, LOCAL_WORD), Buf::zeroed(8)).await.unwrap().u64_at(0);
        let node = c2.node();
        (
            seen,
            node,
            c2.local_read(0, 8).await.map(|b| b.u64_at(0)),
            c2.local_cas(0, 0, 1).await,
            c2.local_write(0, Buf::from(word(1))).await,
        )
    });
    sim.run().unwrap();
    let results = results.lock().unwrap();
    let get = |name: &str| results.get(name).unwrap_or_else(|| panic!("no result for {name}")).clone();
    assert_eq!(get("write"), Ok(0));
    assert_eq!(get("read"), Ok(11));
    assert_eq!(get("cas hit"), Ok(11), "a successful local CAS returns the expected word");
    assert_eq!(get("cas miss"), Ok(22), "a failed local CAS returns the word it found");
    assert_eq!(get("faa"), Ok(22));
    assert_eq!(get("read remote write"), Ok(0x5eed), "the client's remote WRITE is visible locally");
    assert!(matches!(get("read past the end"), Err(VerbsError::OutOfRange { .. })), "{:?}", get("read past the end"));
    assert!(
        matches!(get("read beyond offsets"), Err(VerbsError::OutOfRange { .. })),
        "{:?}",
        get("read beyond offsets")
    );
    assert_eq!(get("unaligned cas"), Err(VerbsError::Unaligned { addr: RemoteAddr::host(server, LOCAL_WORD + 4) }));
    assert_eq!(get("unaligned faa"), Err(VerbsError::Unaligned { addr: RemoteAddr::host(server, LOCAL_WORD + 1) }));

    let (seen, node, local_read, local_cas, local_write) = out.take();
    assert_eq!(seen, 22 + 5, "a remote READ sees the service's local stores");
    assert_eq!(mem_u64(&sim, RemoteAddr::host(server, LOCAL_WORD)), 27);
    assert_eq!(local_read, Err(VerbsError::NoSuchNode(node)), "a compute node has no registered memory");
    assert_eq!(local_cas, Err(VerbsError::NoSuchNode(node)));
    assert_eq!(local_write, Err(VerbsError::NoSuchNode(node)));
}

// ------------------------------------------------------- local accesses vs. remote verbs

/// Every outcome over seeds `0..seeds` under a [`RandomChooser`], with its count and first seed.
fn explore<T: Ord + Debug>(
    cfg: &SimConfig,
    seeds: u64,
    scenario: impl Fn(&mut Sim) -> Box<dyn FnOnce(&Sim) -> T>,
) -> BTreeMap<T, (u64, u64)> {
    let mut seen = BTreeMap::new();
    for seed in 0..seeds {
        let mut cfg = cfg.clone();
        cfg.seed = seed;
        let mut sim = Sim::with_chooser(cfg, Box::new(RandomChooser::new(seed))).unwrap();
        let finish = scenario(&mut sim);
        sim.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(sim.live_tasks(), 0, "seed {seed}: a task did not finish");
        seen.entry(finish(&sim)).or_insert((0, seed)).0 += 1;
    }
    seen
}

/// Answers the old word of `local_cas(LOCAL_WORD, 0, 7)`.
#[derive(Debug)]
struct LocalCas;

impl Service<SimClient> for LocalCas {
    async fn handle(self: Arc<Self>, ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        word(ctx.local_cas(LOCAL_WORD, 0, 7).await.unwrap())
    }
}

/// `(old word the local CAS saw, old word the remote FAA saw, final word)`.
fn local_cas_vs_remote_faa(rmw_atomic_with_writes: bool) -> BTreeMap<(u64, u64, u64), (u64, u64)> {
    let mut cfg = server_config(1, 1);
    cfg.memory_model.rmw_atomic_with_writes = rmw_atomic_with_writes;
    let server = server_node(&cfg);
    explore(&cfg, 300, move |sim| {
        sim.add_service(server, SVC, || LocalCas).unwrap();
        let (a, b) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());
        let a2 = a.clone();
        let cas_old = sim.spawn_output(&a, async move { u64_of(&a2.call(server, SVC, Vec::new()).await.unwrap()) });
        let b2 = b.clone();
        let faa_old =
            sim.spawn_output(&b, async move { b2.faa(RemoteAddr::host(server, LOCAL_WORD), 1).await.unwrap() });
        Box::new(move |sim| (cas_old.take(), faa_old.take(), mem_u64(sim, RemoteAddr::host(server, LOCAL_WORD))))
    })
}

/// A local CAS is one atomic step, a remote FAA is two under the default memory model: the CAS
/// can fall between the FAA's read and its write. Then both report success from 0 — the CAS
/// saw 0 and stored 7, the FAA saw 0 — and the FAA's write of 1 overwrites the 7: final 1, the
/// CAS's update lost. (Final 7 with the FAA returning 0 would need the CAS to compare against a
/// stale 0, which an atomic local CAS cannot.)
#[test]
fn a_local_cas_is_not_atomic_with_remote_rmws() {
    const LOST: (u64, u64, u64) = (0, 0, 1);
    const CAS_FIRST: (u64, u64, u64) = (0, 7, 8);
    const FAA_FIRST: (u64, u64, u64) = (1, 0, 1);

    let weak = local_cas_vs_remote_faa(false);
    assert!(weak.contains_key(&LOST), "the lost update never happened; outcomes {weak:?}");
    assert!(weak.contains_key(&CAS_FIRST) && weak.contains_key(&FAA_FIRST), "outcomes {weak:?}");
    for &(cas, faa, fin) in weak.keys() {
        assert!(
            [CAS_FIRST, FAA_FIRST, LOST].contains(&(cas, faa, fin)),
            "impossible outcome {:?}; {weak:?}",
            (cas, faa, fin)
        );
        assert!(!(faa == 0 && fin == 7), "the FAA's increment was lost; outcomes {weak:?}");
    }

    let strong = local_cas_vs_remote_faa(true);
    assert!(!strong.contains_key(&LOST), "rmw_atomic_with_writes: the CAS's update was lost; {strong:?}");
    assert_eq!(strong.keys().copied().collect::<Vec<_>>(), vec![CAS_FIRST, FAA_FIRST], "outcomes {strong:?}");
}

/// Stores two new words with one 16-byte local write.
#[derive(Debug)]
struct WritePair;

const PAIR: [u64; 2] = [0x1111_1111_1111_1111, 0x2222_2222_2222_2222];

impl Service<SimClient> for WritePair {
    async fn handle(self: Arc<Self>, ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        ctx.local_write(LOCAL_WORD, Buf::from([word(PAIR[0]), word(PAIR[1])].concat())).await.unwrap();
        Vec::new()
    }
}

#[test]
fn a_wide_local_write_is_atomic_per_word_only() {
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let seen = explore(&cfg, 200, move |sim| {
        sim.add_service(server, SVC, || WritePair).unwrap();
        let (a, b) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());
        let a2 = a.clone();
        sim.spawn(&a, async move {
            a2.call(server, SVC, Vec::new()).await.unwrap();
        });
        let b2 = b.clone();
        let read = sim.spawn_output(&b, async move {
            let buf = b2.read(RemoteAddr::host(server, LOCAL_WORD), Buf::zeroed(16)).await.unwrap();
            (buf.u64_at(0), buf.u64_at(8))
        });
        Box::new(move |_| read.take())
    });
    for &(w0, w1) in seen.keys() {
        assert!(w0 == 0 || w0 == PAIR[0], "word 0 is torn: {w0:#x}; outcomes {seen:x?}");
        assert!(w1 == 0 || w1 == PAIR[1], "word 1 is torn: {w1:#x}; outcomes {seen:x?}");
        assert!(!(w0 == 0 && w1 == PAIR[1]), "the local write stores its words in ascending order; {seen:x?}");
    }
    assert!(seen.contains_key(&(PAIR[0], 0)), "no READ saw the write half done; outcomes {seen:x?}");
    assert!(seen.contains_key(&(0, 0)) && seen.contains_key(&(PAIR[0], PAIR[1])), "outcomes {seen:x?}");
}

// ------------------------------------------------------- workers and queues

/// Offsets on the server node: the count of applied items, then the log of applied items.
const APPLIED: u64 = 8192;
const JOURNAL: u64 = 8192 + 64;

/// The handler queues each request's item and replies at once; one worker applies them to local
/// memory (claims a slot with a local FAA, writes the item there) and ends after `expected`.
#[derive(Debug)]
struct Journal {
    queue: Queue<u64>,
    pushed: Arc<Mutex<Vec<u64>>>,
    expected: u64,
}

impl Service<SimClient> for Journal {
    async fn handle(self: Arc<Self>, _ctx: SimClient, request: Vec<u8>) -> Vec<u8> {
        let item = u64_of(&request);
        self.pushed.lock().unwrap().push(item);
        self.queue.push(item);
        Vec::new()
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: SimClient, index: u32) {
        assert_eq!(index, 0);
        for _ in 0..self.expected {
            let item = self.queue.pop().await;
            let slot = ctx.local_faa(APPLIED, 1).await.unwrap();
            ctx.local_write(JOURNAL + 8 * slot, Buf::from(word(item))).await.unwrap();
        }
    }
}

/// A chooser that counts the Wake steps it picks.
struct CountWakes {
    inner: RandomChooser,
    wakes: Rc<Cell<u64>>,
}

impl Chooser for CountWakes {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        let i = self.inner.choose(enabled);
        if enabled[i].class == StepClass::Wake {
            self.wakes.set(self.wakes.get() + 1);
        }
        i
    }
}

/// `callers` clients each call the journal `items` times; returns the run's wake steps (chooser
/// runs) after checking that every pushed item was applied, in push order.
fn journal_run(seed: Option<u64>, callers: u64, items: u64) -> u64 {
    let mut cfg = server_config(2, 1);
    cfg.seed = seed.unwrap_or(0);
    let server = server_node(&cfg);
    let wakes = Rc::new(Cell::new(0));
    let mut sim = match seed {
        None => Sim::new(cfg).unwrap(),
        Some(s) => {
            Sim::with_chooser(cfg, Box::new(CountWakes { inner: RandomChooser::new(s), wakes: wakes.clone() })).unwrap()
        }
    };
    let pushed = Arc::new(Mutex::new(Vec::new()));
    let p = pushed.clone();
    let expected = callers * items;
    sim.add_service(server, SVC, move || Journal { queue: Queue::new(), pushed: p.clone(), expected }).unwrap();
    for caller in 0..callers {
        let c = sim.add_client(0).unwrap();
        let c2 = c.clone();
        sim.spawn(&c, async move {
            for i in 0..items {
                c2.call(server, SVC, word(caller * 1000 + i)).await.unwrap();
            }
        });
    }
    sim.run().unwrap_or_else(|e| panic!("seed {seed:?}: {e}"));
    assert_eq!(sim.live_tasks(), 0, "seed {seed:?}: the worker finished");
    let pushed = pushed.lock().unwrap().clone();
    assert_eq!(pushed.len() as u64, expected, "seed {seed:?}: every call pushed its item");
    assert_eq!(mem_u64(&sim, RemoteAddr::host(server, APPLIED)), expected, "seed {seed:?}: every item was applied");
    let journal: Vec<u64> = sim
        .read_memory(RemoteAddr::host(server, JOURNAL), 8 * expected as usize)
        .unwrap()
        .chunks(8)
        .map(u64_of)
        .collect();
    assert_eq!(journal, pushed, "seed {seed:?}: the worker applied the items in the order they were pushed");
    for caller in 0..callers {
        let mine: Vec<u64> = journal.iter().copied().filter(|&x| x / 1000 == caller).collect();
        assert_eq!(mine, (0..items).map(|i| caller * 1000 + i).collect::<Vec<_>>(), "seed {seed:?}");
    }
    wakes.get()
}

#[test]
fn a_worker_applies_queued_requests_in_order() {
    journal_run(None, 4, 25);
    let mut wakes = 0;
    for seed in 0..24 {
        wakes += journal_run(Some(seed), 3, 4);
    }
    assert!(wakes > 0, "the Queue's wake-ups never went through the seam as Wake steps");
}

// ------------------------------------------------------- crash-stop and restart

/// Counts its calls (state lost in a crash); a request "sleep" sleeps first. Its one worker
/// marks the node's memory when it starts and runs until `worker_end_ns`.
#[derive(Debug)]
struct Counter {
    calls: AtomicU64,
    log: Arc<WorkerLog>,
    worker_end_ns: u64,
}

#[derive(Debug, Default)]
struct WorkerLog {
    started: AtomicU32,
    finished: AtomicU32,
    /// Worker futures dropped, by finishing or by a crash.
    ended: AtomicU32,
}

/// Counts a worker future's end, however it ends.
#[derive(Debug)]
struct EndGuard(Arc<WorkerLog>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::SeqCst);
    }
}

const SLEEP_REQUEST: &[u8] = b"sleep";
const MARKER: u64 = 12_288;
const MARK: u64 = 0xabcd_0000_0000_0000;

impl Service<SimClient> for Counter {
    async fn handle(self: Arc<Self>, ctx: SimClient, request: Vec<u8>) -> Vec<u8> {
        if request == SLEEP_REQUEST {
            ctx.sleep(100_000).await;
        }
        word(self.calls.fetch_add(1, Ordering::SeqCst) + 1)
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: SimClient, _index: u32) {
        self.log.started.fetch_add(1, Ordering::SeqCst);
        let _guard = EndGuard(self.log.clone());
        ctx.local_write(MARKER, Buf::from(word(MARK | ctx.now_ns()))).await.unwrap();
        ctx.sleep(self.worker_end_ns.saturating_sub(ctx.now_ns())).await;
        self.log.finished.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn server_crash_stop_and_restart() {
    const CRASH_NS: u64 = 50_000;
    const RESTART_NS: u64 = 300_000;
    const WORKER_END_NS: u64 = 1_000_000;
    let mut cfg = server_config(2, 1);
    let server = server_node(&cfg);
    let timeout = cfg.profile.transport_timeout_ns;
    cfg.faults.node_crashes = vec![NodeCrash { node: server.0, at_ns: CRASH_NS, restart_at_ns: Some(RESTART_NS) }];
    let mut sim = Sim::new(cfg).unwrap();
    let made = Rc::new(Cell::new(0u32));
    let log = Arc::new(WorkerLog::default());
    let (m, l) = (made.clone(), log.clone());
    sim.add_service(server, SVC, move || {
        m.set(m.get() + 1);
        Counter { calls: AtomicU64::new(0), log: l.clone(), worker_end_ns: WORKER_END_NS }
    })
    .unwrap();
    let (a, b) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());

    let a2 = a.clone();
    let call = move |c: SimClient| async move { c.call(server, SVC, Vec::new()).await.map(|r| u64_of(&r)) };
    let a_out = sim.spawn_output(&a, async move {
        let mut before = Vec::new();
        for _ in 0..3 {
            before.push(call(a2.clone()).await);
        }
        assert!(a2.now_ns() < CRASH_NS);
        a2.sleep(CRASH_NS + 10_000 - a2.now_ns()).await;
        let mut down = Vec::new();
        for _ in 0..2 {
            let t0 = a2.now_ns();
            down.push((call(a2.clone()).await, a2.now_ns() - t0));
        }
        assert!(a2.now_ns() < RESTART_NS, "the down-period calls fail before the restart");
        a2.sleep(RESTART_NS + 10_000 - a2.now_ns()).await;
        let mut after = Vec::new();
        for _ in 0..2 {
            after.push(call(a2.clone()).await);
        }
        let marker = a2.read(RemoteAddr::host(server, MARKER), Buf::zeroed(8)).await.unwrap().u64_at(0);
        (before, down, after, marker)
    });
    // B's call is being handled (its handler sleeps) when the crash hits.
    let b2 = b.clone();
    let b_out = sim.spawn_output(&b, async move {
        b2.sleep(CRASH_NS - 5_000).await;
        let r = b2.call(server, SVC, SLEEP_REQUEST.to_vec()).await;
        (r, b2.now_ns())
    });

    sim.run_until(CRASH_NS - 1).unwrap();
    assert_eq!(made.get(), 1, "the service was created once at the start");
    assert_eq!(log.started.load(Ordering::SeqCst), 1, "its worker started");
    assert_eq!(mem_u64(&sim, RemoteAddr::host(server, MARKER)) & MARK, MARK, "the worker marked memory");
    sim.run_until(CRASH_NS + 1).unwrap();
    assert_eq!(log.ended.load(Ordering::SeqCst), 1, "the crash dropped the worker");
    assert_eq!(log.finished.load(Ordering::SeqCst), 0);
    assert_eq!(mem_u64(&sim, RemoteAddr::host(server, MARKER)), 0, "the crash lost the node's memory");
    assert_eq!(made.get(), 1, "nothing is created while the node is down");
    sim.run().unwrap();

    let (before, down, after, marker) = a_out.take();
    assert_eq!(before, vec![Ok(1), Ok(2), Ok(3)]);
    for (r, latency) in &down {
        assert_eq!(*r, Err(VerbsError::NodeDown(server)), "a call while the node is down");
        assert!(*latency >= timeout, "it fails when the transport gives up ({latency} ns)");
    }
    assert_eq!(after, vec![Ok(1), Ok(2)], "the restarted service starts from fresh state");
    assert!(marker & MARK == MARK && marker & !MARK >= RESTART_NS, "the restarted worker marked memory: {marker:#x}");
    let (b_result, b_done) = b_out.take();
    assert_eq!(b_result, Err(VerbsError::NodeDown(server)), "the call in progress at the crash fails");
    assert_eq!(b_done, CRASH_NS + timeout, "it fails a transport timeout after the crash");

    assert_eq!(made.get(), 2, "the restart created the service afresh");
    assert_eq!(log.started.load(Ordering::SeqCst), 2, "the restart started the worker again");
    assert_eq!(log.finished.load(Ordering::SeqCst), 1, "the restarted worker ran to its end");
    assert_eq!(log.ended.load(Ordering::SeqCst), 2);
    let f = sim.stats().faults;
    assert_eq!((f.node_crashes, f.node_restarts), (1, 1));
    assert_eq!(f.calls_failed_node_down, 3, "one call in progress at the crash, two while down");
}

/// A crash-stop ends the computation of the handlers it kills: after the restart, the node's
/// RPC threads are free at once, not busy until the dead handlers' work would have ended.
#[test]
fn a_crash_frees_the_threads_of_the_handlers_it_killed() {
    const LONG_NS: u64 = 1_000_000;
    const CRASH_NS: u64 = 20_000;
    const RESTART_NS: u64 = 100_000;
    const CALL_AT_NS: u64 = 200_000;
    let mut cfg = server_config(1, 1);
    let server = server_node(&cfg);
    cfg.faults.node_crashes = vec![NodeCrash { node: server.0, at_ns: CRASH_NS, restart_at_ns: Some(RESTART_NS) }];
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || Compute { ns: LONG_NS }).unwrap();
    sim.add_service(server, SVC + 1, || Compute { ns: 0 }).unwrap();
    let (a, b) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());
    let a2 = a.clone();
    let long = sim.spawn_output(&a, async move {
        // After B's reference call: the node has one RPC thread.
        a2.sleep(CRASH_NS / 2).await;
        a2.call(server, SVC, Vec::new()).await
    });
    let b2 = b.clone();
    let quick = sim.spawn_output(&b, async move {
        // An unloaded call for reference, before anything happens.
        let t0 = b2.now_ns();
        b2.call(server, SVC + 1, Vec::new()).await.unwrap();
        let unloaded = b2.now_ns() - t0;
        assert!(b2.now_ns() < CRASH_NS / 2);
        b2.sleep(CALL_AT_NS - b2.now_ns()).await;
        let t0 = b2.now_ns();
        b2.call(server, SVC + 1, Vec::new()).await.unwrap();
        (unloaded, b2.now_ns() - t0)
    });
    sim.run().unwrap();
    assert_eq!(long.take(), Err(VerbsError::NodeDown(server)));
    let (unloaded, after_restart) = quick.take();
    assert_eq!(
        after_restart, unloaded,
        "after the restart a call is served at once (the killed handler's {LONG_NS} ns of work died with it)"
    );
}

// ------------------------------------------------------- deferred replies

/// Defers every reply to its one worker, which answers after `work_ns` of CPU each, in arrival
/// order. A request "twice" makes the worker answer it twice (the second must be refused).
#[derive(Debug)]
struct Deferred {
    queue: Queue<(Responder, Vec<u8>)>,
    work_ns: u64,
    refused: Arc<Mutex<Vec<VerbsError>>>,
    /// When each request was dispatched to the RPC thread.
    dispatched_ns: Arc<Mutex<Vec<u64>>>,
}

impl Service<SimClient> for Deferred {
    async fn handle(self: Arc<Self>, _ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        unreachable!("every request is dispatched")
    }

    async fn dispatch(self: Arc<Self>, ctx: SimClient, request: Vec<u8>, responder: Responder) -> Option<Vec<u8>> {
        self.dispatched_ns.lock().unwrap().push(ctx.now_ns());
        self.queue.push((responder, request));
        None
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: SimClient, _index: u32) {
        loop {
            let (to, request) = self.queue.pop().await;
            ctx.charge_cpu(CpuWork::Nanoseconds, self.work_ns).await;
            ctx.reply(to, request.clone()).unwrap();
            if request == b"twice" {
                let again = ctx.reply(to, request).unwrap_err();
                self.refused.lock().unwrap().push(again);
            }
        }
    }
}

/// A deferred reply frees the RPC thread: one thread takes many requests whose replies the
/// worker sends later, each to its own caller, and a second answer to one call is refused.
#[test]
fn a_deferred_reply_frees_the_rpc_thread() {
    const WORK_NS: u64 = 10_000;
    const CALLERS: u64 = 4;
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    let refused = Arc::new(Mutex::new(Vec::new()));
    let dispatched = Arc::new(Mutex::new(Vec::new()));
    let (r, d) = (refused.clone(), dispatched.clone());
    sim.add_service(server, SVC, move || Deferred {
        queue: Queue::new(),
        work_ns: WORK_NS,
        refused: r.clone(),
        dispatched_ns: d.clone(),
    })
    .unwrap();
    let mut outs = Vec::new();
    for i in 0..CALLERS {
        let c = sim.add_client(0).unwrap();
        let c2 = c.clone();
        outs.push(sim.spawn_output(&c, async move {
            let body = if i == 0 { b"twice".to_vec() } else { word(i) };
            let reply = c2.call(server, SVC, body.clone()).await.unwrap();
            (reply == body, c2.now_ns())
        }));
    }
    sim.run().unwrap();
    let mut done: Vec<u64> = outs
        .iter()
        .map(|o| {
            let (own, at) = o.take();
            assert!(own, "each caller got its own reply");
            at
        })
        .collect();
    done.sort_unstable();
    // The one RPC thread took every request before the worker answered the first: a handler
    // that held its thread until the reply would have taken the second only after it.
    let dispatched = dispatched.lock().unwrap().clone();
    assert_eq!(dispatched.len() as u64, CALLERS);
    assert!(dispatched.iter().all(|&t| t < done[0]), "dispatched at {dispatched:?}, first reply at {}", done[0]);
    for pair in done.windows(2) {
        assert!(pair[1] - pair[0] >= WORK_NS, "replies {done:?} are one worker's work apart");
    }
    // Invariant walks see the running service's state.
    use dmkit_rdma::MemoryView;
    let state = sim.service_state(server, SVC).expect("the service runs");
    let state = state.downcast::<Deferred>().expect("the state is the service's own");
    assert!(Arc::ptr_eq(&state.refused, &refused));
    assert!(sim.service_state(server, SVC + 1).is_none());
    let refused = refused.lock().unwrap();
    assert_eq!(refused.len(), 1);
    assert!(matches!(&refused[0], VerbsError::Protocol(m) if m.contains("owes no reply")), "{refused:?}");
}

/// Computes `work_ns` on its one worker at start; its handler answers at once.
#[derive(Debug)]
struct BusyWorker {
    work_ns: u64,
}

impl Service<SimClient> for BusyWorker {
    async fn handle(self: Arc<Self>, _ctx: SimClient, request: Vec<u8>) -> Vec<u8> {
        request
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: SimClient, _index: u32) {
        ctx.charge_cpu(CpuWork::Nanoseconds, self.work_ns).await;
    }
}

/// With `server_workers_share_cores`, a worker computes on its RPC thread's CPU: a call that
/// arrives while the worker computes waits for it; without, it is served at once.
#[test]
fn workers_can_share_the_rpc_threads_cores() {
    const WORK_NS: u64 = 100_000;
    let latency = |share: bool| {
        let mut cfg = server_config(1, 1);
        cfg.topology.server_workers_share_cores = share;
        let server = server_node(&cfg);
        let mut sim = Sim::new(cfg).unwrap();
        sim.add_service(server, SVC, || BusyWorker { work_ns: WORK_NS }).unwrap();
        let c = sim.add_client(0).unwrap();
        let c2 = c.clone();
        let out = sim.spawn_output(&c, async move {
            c2.call(server, SVC, word(1)).await.unwrap();
            c2.now_ns()
        });
        sim.run().unwrap();
        out.take()
    };
    let (alone, shared) = (latency(false), latency(true));
    assert!(alone < 20_000, "served at once: {alone} ns");
    assert!(shared >= WORK_NS, "served after the worker's {WORK_NS} ns: {shared} ns");
}

/// Answers through its responder before its handler returns (as a hardware host allows),
/// then computes `after_ns` more on the RPC thread.
#[derive(Debug)]
struct EarlyReply {
    after_ns: u64,
}

impl Service<SimClient> for EarlyReply {
    async fn handle(self: Arc<Self>, _ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        unreachable!("every request is dispatched")
    }

    async fn dispatch(self: Arc<Self>, ctx: SimClient, request: Vec<u8>, to: Responder) -> Option<Vec<u8>> {
        ctx.reply(to, request).unwrap();
        ctx.charge_cpu(CpuWork::Nanoseconds, self.after_ns).await;
        // Already answered: a second answer, by return value, is dropped.
        Some(b"late".to_vec())
    }
}

/// A reply sent while the handler still runs reaches the caller at once; the RPC thread stays
/// busy until the handler returns, so a second call waits for it.
#[test]
fn a_handler_may_reply_before_it_returns() {
    const AFTER_NS: u64 = 50_000;
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || EarlyReply { after_ns: AFTER_NS }).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move {
        let first = c2.call(server, SVC, word(1)).await.unwrap();
        let t1 = c2.now_ns();
        let second = c2.call(server, SVC, word(2)).await.unwrap();
        (first, t1, second, c2.now_ns())
    });
    sim.run().unwrap();
    let (first, t1, second, t2) = out.take();
    assert_eq!((first, second), (word(1), word(2)), "each caller got the early reply, not the late one");
    assert!(t1 < AFTER_NS, "the first reply came before its handler returned: {t1} ns");
    assert!(t2 >= AFTER_NS, "the second call waited for the one RPC thread: {t2} ns");
}

/// A deferred call the node holds when it crashes fails at its caller like any other.
#[test]
fn a_crash_fails_the_calls_whose_replies_were_deferred() {
    const CRASH_NS: u64 = 20_000;
    let mut cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let timeout = cfg.profile.transport_timeout_ns;
    cfg.faults.node_crashes = vec![NodeCrash { node: server.0, at_ns: CRASH_NS, restart_at_ns: None }];
    let mut sim = Sim::new(cfg).unwrap();
    // The worker takes a millisecond per reply: the crash comes first.
    sim.add_service(server, SVC, || Deferred {
        queue: Queue::new(),
        work_ns: 1_000_000,
        refused: Arc::default(),
        dispatched_ns: Arc::default(),
    })
    .unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move { (c2.call(server, SVC, word(1)).await, c2.now_ns()) });
    sim.run().unwrap();
    let (result, at) = out.take();
    assert_eq!(result, Err(VerbsError::NodeDown(server)));
    assert_eq!(at, CRASH_NS + timeout);
    assert_eq!(sim.stats().faults.calls_failed_node_down, 1);
}

// ------------------------------------------------------- bad calls and registrations

#[test]
fn unknown_services_and_bad_registrations() {
    let cfg = server_config(2, 1);
    let (server, compute) = (server_node(&cfg), cfg.topology.compute_node_id(0));
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || Compute { ns: 0 }).unwrap();
    assert!(sim.add_service(compute, SVC, || Compute { ns: 0 }).is_err(), "services do not run on compute nodes");
    assert!(sim.add_service(NodeId(999), SVC, || Compute { ns: 0 }).is_err(), "no such node");
    assert!(sim.add_service(server, SVC, || Compute { ns: 0 }).is_err(), "service id registered twice");
    assert!(
        sim.add_service(NodeId(0), ALLOCATOR_SERVICE, || Compute { ns: 0 }).is_err(),
        "memory nodes already run the allocator as service 0"
    );

    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move {
        (
            c2.call(server, 9, Vec::new()).await,
            c2.call(server, ALLOCATOR_SERVICE, Vec::new()).await,
            c2.call(NodeId(0), 9, Vec::new()).await,
            c2.call(compute, SVC, Vec::new()).await,
            c2.call(server, SVC, word(5)).await,
        )
    });
    sim.run().unwrap();
    let (unknown, no_allocator, unknown_on_memory, to_compute, known) = out.take();
    assert_eq!(unknown, Err(VerbsError::UnknownService { node: server, service: 9 }));
    assert_eq!(
        no_allocator,
        Err(VerbsError::UnknownService { node: server, service: ALLOCATOR_SERVICE }),
        "server nodes run no allocator"
    );
    assert_eq!(unknown_on_memory, Err(VerbsError::UnknownService { node: NodeId(0), service: 9 }));
    assert_eq!(to_compute, Err(VerbsError::NoSuchNode(compute)));
    assert_eq!(known, Ok(word(5)));
}

/// Answers a fixed tag.
#[derive(Debug)]
struct Tag(u64);

impl Service<SimClient> for Tag {
    async fn handle(self: Arc<Self>, _ctx: SimClient, _request: Vec<u8>) -> Vec<u8> {
        word(self.0)
    }
}

/// A refused registration changes nothing: the first service of that id keeps serving, and
/// the allocator survives an attempt to register over it.
#[test]
fn a_refused_registration_keeps_the_first_service() {
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || Tag(1)).unwrap();
    assert!(sim.add_service(server, SVC, || Tag(2)).is_err());
    assert!(sim.add_service(NodeId(0), ALLOCATOR_SERVICE, || Tag(3)).is_err());
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move {
        (c2.call(server, SVC, Vec::new()).await.map(|r| u64_of(&r)), alloc::alloc(&c2, NodeId(0), 64, 64).await.is_ok())
    });
    sim.run().unwrap();
    assert_eq!(out.take(), (Ok(1), true), "the first registration serves; the allocator allocates");
}

/// Once the run has started, a refused registration must not disturb the running service.
#[test]
fn a_refused_registration_mid_run_keeps_the_running_service() {
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    sim.add_service(server, SVC, || Tag(1)).unwrap();
    sim.run().unwrap();
    assert!(sim.add_service(server, SVC, || Tag(2)).is_err());
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move { c2.call(server, SVC, Vec::new()).await.map(|r| u64_of(&r)) });
    sim.run().unwrap();
    assert_eq!(out.take(), Ok(1));
}

/// A service may be added after the run has started: it is created at once, with its workers.
#[test]
fn a_service_added_mid_run_serves() {
    let cfg = server_config(1, 1);
    let server = server_node(&cfg);
    let mut sim = Sim::new(cfg).unwrap();
    let c = sim.add_client(0).unwrap();
    let c2 = c.clone();
    sim.spawn(&c, async move {
        c2.sleep(1_000).await;
    });
    sim.run().unwrap();
    sim.add_service(server, SVC, || Tag(7)).unwrap();
    let c2 = c.clone();
    let out = sim.spawn_output(&c, async move { c2.call(server, SVC, Vec::new()).await.map(|r| u64_of(&r)) });
    sim.run().unwrap();
    assert_eq!(out.take(), Ok(7));
}

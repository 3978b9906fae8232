//! Calibration: the simulated NIC reproduces the bounds its profile states (DESIGN.md §2, the
//! SMART digest §1.3 and §6.6). Each test measures through `dmkit perftest`'s engine and compares
//! with a number derived from the profile, never with a constant copied from a run.

use dmkit_experiments::perftest::{PerfPoint, PerfRegion, PerfResult, run_point};
use dmkit_rdma::{Buf, NodeId, RemoteAddr, Verbs};
use dmkit_sim::VerbKind;
use dmkit_sim::{Profile, Sim, SimConfig, Topology};
use std::cell::RefCell;
use std::rc::Rc;

fn point(verb: VerbKind, bytes: u64, clients: u32) -> PerfPoint {
    PerfPoint {
        verb,
        bytes,
        clients,
        compute_nodes: 8,
        memory_nodes: 1,
        region: PerfRegion::Host,
        hot_addresses: 0,
        batch: 1,
        offset: 0,
        span_bytes: 0,
        profile: Profile::default_profile(),
        seed: 7,
        warmup_ns: 100_000,
        duration_ns: 500_000,
        server_threads: 1,
        handler_ns: 1000,
    }
}

fn run(p: PerfPoint) -> PerfResult {
    run_point(&p).expect("perftest point runs")
}

fn within(measured: f64, expected: f64, tolerance: f64) -> bool {
    (measured - expected).abs() <= tolerance * expected
}

#[test]
fn small_reads_saturate_one_memory_node_at_its_iops() {
    let profile = Profile::default_profile();
    let r = run(point(VerbKind::Read, 64, 256));
    let bound_mops = profile.responder_ops_per_s / 1e6;
    assert!(within(r.throughput_mops, bound_mops, 0.05), "{} Mops/s vs the profile's {bound_mops}", r.throughput_mops);
    assert!(r.mn_iops_utilisation > 0.95, "the IOPS stage is the bottleneck: {}", r.mn_iops_utilisation);
    // Adding clients past saturation adds latency, not throughput.
    let more = run(point(VerbKind::Read, 64, 512));
    assert!(within(more.throughput_mops, bound_mops, 0.05));
    assert!(more.latency_ns_p50 > r.latency_ns_p50 * 3 / 2, "{} vs {}", more.latency_ns_p50, r.latency_ns_p50);
}

#[test]
fn large_reads_saturate_one_memory_node_at_its_bandwidth() {
    let profile = Profile::default_profile();
    let r = run(point(VerbKind::Read, 4096, 64));
    let bound_gbps = profile.link_bytes_per_s / 1e9;
    assert!(within(r.throughput_gbytes_per_s, bound_gbps, 0.05), "{} GB/s vs {bound_gbps}", r.throughput_gbytes_per_s);
    // Headers are the only gap between payload and line rate.
    let wire = profile.wire_bytes(4096, profile.ack_header_bytes) as f64;
    let expected = bound_gbps * 4096.0 / wire;
    assert!(
        within(r.throughput_gbytes_per_s, expected, 0.01),
        "{} vs header-adjusted {expected}",
        r.throughput_gbytes_per_s
    );
    assert!(r.mn_bandwidth_utilisation > 0.95);
}

#[test]
fn large_writes_saturate_the_inbound_link() {
    let profile = Profile::default_profile();
    let r = run(point(VerbKind::Write, 4096, 64));
    let expected = profile.link_bytes_per_s / 1e9 * 4096.0 / profile.wire_bytes(4096, profile.rdma_header_bytes) as f64;
    assert!(within(r.throughput_gbytes_per_s, expected, 0.05), "{} vs {expected}", r.throughput_gbytes_per_s);
}

#[test]
fn unloaded_read_round_trip_matches_the_profile() {
    for name in dmkit_sim::profile::EMBEDDED {
        let profile = Profile::embedded(name).unwrap();
        let mut p = point(VerbKind::Read, 64, 1);
        p.profile = profile.clone();
        let r = run(p);
        let expected = profile.unloaded_round_trip_ns(VerbKind::Read, 64, false);
        assert_eq!(r.latency_ns_p50, expected, "{name}");
        assert_eq!(r.latency_ns_max, expected, "{name}: one client sees no queueing");
        // The published order of magnitude: about 2 us for a small READ (RACE and HStore digests).
        assert!((1500..=2500).contains(&expected), "{name}: {expected} ns");
    }
    // Atomics and device memory compose the same way.
    let profile = Profile::default_profile();
    for (verb, region, device) in [(VerbKind::Cas, PerfRegion::Host, false), (VerbKind::Faa, PerfRegion::Device, true)]
    {
        let mut p = point(verb, 8, 1);
        p.region = region;
        assert_eq!(run(p).latency_ns_p50, profile.unloaded_round_trip_ns(verb, 8, device), "{verb:?}");
    }
}

#[test]
fn cas_on_one_hot_address_is_bounded_by_the_atomic_unit() {
    let profile = Profile::default_profile();
    let mut p = point(VerbKind::Cas, 8, 64);
    p.hot_addresses = 1;
    let host = run(p.clone());
    let bound = 1e3 / profile.host_atomic_same_address_ns as f64;
    assert!(within(host.throughput_mops, bound, 0.05), "{} vs {bound}", host.throughput_mops);
    assert!(host.throughput_mops < profile.responder_ops_per_s / 1e6 / 4.0);
    // Spread over many addresses the same clients are not bound by one address.
    p.hot_addresses = 4096;
    assert!(run(p.clone()).throughput_mops > 4.0 * host.throughput_mops);
    // Device memory skips PCIe: its hot-address CAS is faster.
    p.hot_addresses = 1;
    p.region = PerfRegion::Device;
    let device = run(p);
    let device_bound = 1e3 / profile.device_atomic_same_address_ns as f64;
    assert!(within(device.throughput_mops, device_bound, 0.05), "{} vs {device_bound}", device.throughput_mops);
    assert!(device.throughput_mops > 2.0 * host.throughput_mops);
}

#[test]
fn atomics_over_many_addresses_are_bounded_by_the_aggregate_atomic_rate() {
    let profile = Profile::default_profile();
    let mut p = point(VerbKind::Faa, 8, 512);
    p.hot_addresses = 1 << 20;
    let r = run(p);
    let bound = (profile.atomic_ops_per_s.min(profile.responder_ops_per_s)) / 1e6;
    assert!(within(r.throughput_mops, bound, 0.05), "{} vs {bound}", r.throughput_mops);
}

#[test]
fn two_memory_nodes_double_the_saturated_rate() {
    let one = run(point(VerbKind::Read, 64, 512));
    let mut p = point(VerbKind::Read, 64, 512);
    p.memory_nodes = 2;
    p.compute_nodes = 16;
    let two = run(p);
    assert!(
        within(two.throughput_mops, 2.0 * one.throughput_mops, 0.05),
        "{} vs 2 x {}",
        two.throughput_mops,
        one.throughput_mops
    );
}

#[test]
fn doorbell_batches_save_latency_but_every_verb_counts_against_iops() {
    let profile = Profile::default_profile();
    let mut p = point(VerbKind::Read, 64, 64);
    p.batch = 8;
    let r = run(p);
    assert!(within(r.throughput_mops, profile.responder_ops_per_s / 1e6, 0.05), "{}", r.throughput_mops);
}

/// The responder serves verbs in arrival order, not issue order: client A (compute node 0)
/// issues its CAS first, but its NIC is still sending a large WRITE, so client B's CAS (compute
/// node 1, issued 1 us later) arrives first and wins. Without the large WRITE, A wins.
#[test]
fn two_compute_nodes_racing_for_one_memory_node_are_served_in_arrival_order() {
    for a_busy in [false, true] {
        let cfg = SimConfig { topology: Topology { compute_nodes: 2, ..Topology::default() }, ..SimConfig::default() };
        let mut sim = Sim::new(cfg).unwrap();
        let word = RemoteAddr::host(NodeId(0), 1 << 20);
        let bulk = RemoteAddr::host(NodeId(0), 16 << 20);
        let seen = Rc::new(RefCell::new(Vec::new()));
        let a = sim.add_client(0).unwrap();
        let b = sim.add_client(1).unwrap();
        let (a2, seen_a) = (a.clone(), seen.clone());
        sim.spawn(&a, async move {
            if a_busy {
                // 1 MiB at 12.5 GB/s keeps A's send link busy for about 84 us.
                a2.post_unsignaled(vec![dmkit_rdma::Request::write(bulk.add(0), Buf::zeroed(1 << 20))]).unwrap();
            }
            let old = a2.cas(word, 0, 1).await.unwrap();
            seen_a.borrow_mut().push(("a", old));
        });
        let (b2, seen_b) = (b.clone(), seen.clone());
        sim.spawn(&b, async move {
            b2.sleep(1_000).await;
            let old = b2.cas(word, 0, 2).await.unwrap();
            seen_b.borrow_mut().push(("b", old));
        });
        sim.run().unwrap();
        let winner = sim.read_memory(word, 8).unwrap()[0];
        let seen = seen.borrow();
        if a_busy {
            assert_eq!(winner, 2, "B's CAS arrived first: {seen:?}");
            assert!(seen.contains(&("a", 2)) && seen.contains(&("b", 0)));
        } else {
            assert_eq!(winner, 1, "A's CAS was issued and arrived first: {seen:?}");
            assert!(seen.contains(&("a", 0)) && seen.contains(&("b", 1)));
        }
    }
}

#[test]
fn perftest_is_deterministic_and_seed_sensitive() {
    let p = point(VerbKind::Read, 64, 128);
    assert_eq!(run(p.clone()), run(p.clone()));
    let mut other = p.clone();
    other.seed = 8;
    let (x, y) = (run(p), run(other));
    assert_ne!(x.sim_steps + x.latency_ns_max, 0);
    // Another seed draws other addresses; the bound is the same, the run is not.
    assert!(within(x.throughput_mops, y.throughput_mops, 0.05));
}

/// `perftest --verb call`: an echo service on a server node serves at most one request per RPC
/// thread at a time, each costing dispatch + handler + the reply's post on that thread.
#[test]
fn calls_are_bounded_by_the_server_threads() {
    let profile = Profile::default_profile();
    let cpu = &profile.cpu;
    let per_call_ns = 2000.0 + cpu.rpc_dispatch_ns + cpu.post_ns + cpu.post_per_verb_ns;
    let mut rates = Vec::new();
    for threads in [1u16, 4] {
        let mut p = point(VerbKind::Call, 64, 64);
        p.server_threads = threads;
        p.handler_ns = 2000;
        let r = run(p);
        let bound = threads as f64 * 1e3 / per_call_ns;
        assert!(within(r.throughput_mops, bound, 0.05), "{threads} threads: {} Mops/s vs {bound}", r.throughput_mops);
        assert_eq!(r.server_threads, threads);
        rates.push(r.throughput_mops);
    }
    assert!(within(rates[1], 4.0 * rates[0], 0.05), "{rates:?}");
}

/// The default profile with its NIC's caches modelled: `qp_contexts` queue-pair contexts and
/// `translations` page translations of `page_bytes`.
fn with_nic_caches(qp_contexts: u64, translations: u64, page_bytes: u64) -> Profile {
    let mut profile = Profile::default_profile();
    profile.qp_context_cache_entries = qp_contexts;
    profile.translation_cache_entries = translations;
    profile.translation_page_bytes = page_bytes;
    profile
}

#[test]
fn queue_pair_context_misses_cost_the_memory_node_its_iops_beyond_the_cache() {
    let base = Profile::default_profile();
    assert_eq!(run(point(VerbKind::Read, 64, 512)).nic_cache_misses_per_verb, 0.0, "not modelled by default");
    let cached = with_nic_caches(64, 0, 2 << 20);
    let op_ns = 1e9 / base.responder_ops_per_s;
    // 48 threads' queue pairs fit in 64 entries: only cold misses, and nothing changes.
    let fits = run(PerfPoint { profile: cached.clone(), ..point(VerbKind::Read, 64, 48) });
    assert!(fits.nic_cache_misses_per_verb < 0.01, "{}", fits.nic_cache_misses_per_verb);
    assert!(within(fits.throughput_mops, run(point(VerbKind::Read, 64, 48)).throughput_mops, 0.01));
    // 512 threads' do not: nearly every verb fetches its context, and each miss holds the
    // receive pipeline for `context_miss_occupancy_ns` besides the verb's own time.
    let thrashes = run(PerfPoint { profile: cached, ..point(VerbKind::Read, 64, 512) });
    let missed = thrashes.nic_cache_misses_per_verb;
    assert!(missed > 0.8, "{missed} misses a verb");
    let expected = 1e3 / (op_ns + missed.min(1.0) * base.context_miss_occupancy_ns as f64);
    assert!(within(thrashes.throughput_mops, expected, 0.1), "{} Mops/s vs {expected}", thrashes.throughput_mops);
    assert!(thrashes.throughput_mops < 0.75 * run(point(VerbKind::Read, 64, 512)).throughput_mops);
}

#[test]
fn translation_misses_add_a_pcie_read_to_the_round_trip_and_huge_pages_avoid_them() {
    let base = Profile::default_profile();
    // One client reading 64 MiB at random: 16 entries of 4 KiB pages miss nearly always.
    let unloaded = |profile: Profile| {
        run(PerfPoint { profile, span_bytes: 64 << 20, compute_nodes: 1, ..point(VerbKind::Read, 64, 1) })
    };
    let plain = unloaded(base.clone());
    let small = unloaded(with_nic_caches(0, 16, 4096));
    assert!(small.nic_cache_misses_per_verb > 0.99, "{}", small.nic_cache_misses_per_verb);
    let added = small.latency_ns_p50 - plain.latency_ns_p50;
    let expected = base.pcie_read_latency_ns + base.context_miss_occupancy_ns;
    assert!(added.abs_diff(expected) <= 2, "a miss adds {added} ns, not {expected}");
    // 2 MiB pages: the span's 32 pages fit in 64 entries; after their cold misses nothing is
    // added.
    let huge = unloaded(with_nic_caches(0, 64, 2 << 20));
    let misses = huge.nic_cache_misses_per_verb * huge.verbs_measured as f64;
    assert!(misses <= 32.5, "{misses} misses");
    assert_eq!(huge.latency_ns_p50, plain.latency_ns_p50);
}

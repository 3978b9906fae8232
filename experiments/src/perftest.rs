//! `dmkit perftest`: the simulator's counterpart of perftest's `ib_read_bw`, `ib_write_bw`,
//! `ib_atomic_bw` and `ib_read_lat`.
//!
//! Closed-loop clients spread round-robin over compute nodes each keep one doorbell batch of
//! `batch` verbs outstanding, to memory nodes in turn. After a warm-up, completions inside the
//! measurement window count towards throughput, and each batch's latency (post to completion)
//! goes into an HDR histogram. Everything is virtual time: the same flags give the same JSON.

use dmkit_rdma::{Buf, NodeId, Op, Region, RemoteAddr, Request, Response, Verbs, VerbsError};
use dmkit_sim::{Profile, Sim, SimConfig, Topology, VerbKind};
use rand::Rng;
use serde::Serialize;
use std::cell::RefCell;
use std::rc::Rc;

/// Host memory or the NIC's device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PerfRegion {
    Host,
    Device,
}

/// One measurement point.
#[derive(Clone, Debug)]
pub struct PerfPoint {
    pub verb: VerbKind,
    pub bytes: u64,
    pub clients: u32,
    pub compute_nodes: u16,
    pub memory_nodes: u16,
    pub region: PerfRegion,
    /// RMW (or READ/WRITE) targets drawn from this many 64-byte-apart words; 0: spread over
    /// `span_bytes`.
    pub hot_addresses: u64,
    pub batch: u32,
    /// First byte of the region the clients touch.
    pub offset: u64,
    /// Bytes of each memory node the clients spread over (0: 64 MiB host, all device memory).
    pub span_bytes: u64,
    pub profile: Profile,
    pub seed: u64,
    pub warmup_ns: u64,
    pub duration_ns: u64,
    /// `call`: RPC threads of the server node, and CPU time its handler spends per request.
    pub server_threads: u16,
    pub handler_ns: u64,
}

/// The service `perftest --verb call` measures: spends `handler_ns` of CPU and echoes the request.
#[derive(Debug)]
pub struct EchoService {
    pub handler_ns: u64,
}

/// Service id of [`EchoService`] on perftest's server node.
pub const ECHO_SERVICE: u16 = 1;

impl dmkit_rdma::service::Service<dmkit_sim::SimClient> for EchoService {
    async fn handle(self: std::sync::Arc<Self>, ctx: dmkit_sim::SimClient, request: Vec<u8>) -> Vec<u8> {
        ctx.charge_cpu(dmkit_rdma::CpuWork::Nanoseconds, self.handler_ns).await;
        request
    }
}

/// One point's result: the JSON object `--format json` prints.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PerfResult {
    pub verb: VerbKind,
    pub bytes: u64,
    pub clients: u32,
    pub compute_nodes: u16,
    pub memory_nodes: u16,
    pub region: PerfRegion,
    pub hot_addresses: u64,
    pub batch: u32,
    /// `call`: the server node's RPC threads (0 for one-sided verbs).
    pub server_threads: u16,
    pub profile: String,
    pub seed: u64,
    pub duration_ns: u64,
    pub verbs_measured: u64,
    /// Verbs completed per second, in millions, over all memory nodes.
    pub throughput_mops: f64,
    /// Payload bytes per second, in 10^9.
    pub throughput_gbytes_per_s: f64,
    /// Batch latency, post to completion.
    pub latency_ns_p50: u64,
    pub latency_ns_p99: u64,
    pub latency_ns_max: u64,
    /// Busy fraction of the memory nodes' receive pipelines (the IOPS bound), averaged.
    pub mn_iops_utilisation: f64,
    /// Busy fraction of the memory nodes' outbound links, averaged.
    pub mn_bandwidth_utilisation: f64,
    /// Misses of every NIC's context and translation caches per verb (README, "The NIC's
    /// caches"), over the whole run (its cold misses included); 0 when the profile does not
    /// model them.
    pub nic_cache_misses_per_verb: f64,
    /// Simulator steps executed for this point.
    pub sim_steps: u64,
}

#[derive(Default)]
struct Tally {
    verbs: u64,
    latencies: Vec<u64>,
    error: Option<VerbsError>,
}

/// Runs one point in the simulator.
pub fn run_point(p: &PerfPoint) -> Result<PerfResult, String> {
    if p.clients == 0 || p.batch == 0 || p.bytes == 0 || p.duration_ns == 0 {
        return Err("--clients, --batch, --bytes and --duration-us must be positive".into());
    }
    if p.verb.is_rmw() && p.bytes != 8 {
        return Err(format!("{} acts on 8 bytes; got --bytes {}", p.verb.name(), p.bytes));
    }
    let calls = p.verb == VerbKind::Call;
    if calls && p.server_threads == 0 {
        return Err("--verb call needs --server-threads of at least 1".into());
    }
    let topology = Topology {
        memory_nodes: p.memory_nodes,
        compute_nodes: p.compute_nodes,
        server_nodes: u16::from(calls),
        server_threads: p.server_threads.max(1),
        ..Topology::default()
    };
    let cfg = SimConfig { profile: p.profile.clone(), topology, seed: p.seed, ..SimConfig::default() };
    let mut sim = Sim::new(cfg).map_err(|e| e.to_string())?;
    let server = topology.server_node_id(0);
    if calls {
        let handler_ns = p.handler_ns;
        sim.add_service(server, ECHO_SERVICE, move || EchoService { handler_ns }).map_err(|e| e.to_string())?;
    }
    let span = match (p.span_bytes, p.region) {
        (0, PerfRegion::Host) => 64 << 20,
        (0, PerfRegion::Device) => p.profile.device_memory_bytes.saturating_sub(p.offset),
        (s, _) => s,
    };
    let stride = p.bytes.next_multiple_of(64);
    let slots = (span / stride).max(1);
    let tally = Rc::new(RefCell::new(Tally::default()));
    let (warmup, end) = (p.warmup_ns, p.warmup_ns + p.duration_ns);
    for i in 0..p.clients {
        let client = sim.add_client((i % p.compute_nodes as u32) as u16).map_err(|e| e.to_string())?;
        let c = client.clone();
        let tally = tally.clone();
        let p = p.clone();
        sim.spawn(&client, async move {
            let mut seen = 0u64;
            let mut spare: Vec<Buf> = Vec::new();
            let mut round = 0u64;
            while c.now_ns() < end {
                let node = NodeId(((c.id() as u64 + round) % p.memory_nodes as u64) as u16);
                round += 1;
                let requests: Vec<Request> = (0..p.batch)
                    .map(|_| {
                        let slot = {
                            let mut rng = c.rng();
                            if p.hot_addresses > 0 {
                                rng.random_range(0..p.hot_addresses)
                            } else {
                                rng.random_range(0..slots)
                            }
                        };
                        let step = if p.hot_addresses > 0 { 64 } else { stride };
                        let offset = p.offset + slot * step;
                        let addr = match p.region {
                            PerfRegion::Host => RemoteAddr::new(Region::Host, node, offset),
                            PerfRegion::Device => RemoteAddr::new(Region::Device, node, offset),
                        };
                        let mut buf = spare.pop().unwrap_or_default();
                        buf.resize(p.bytes as usize);
                        let op = match p.verb {
                            VerbKind::Read => Op::Read(buf),
                            VerbKind::Write => Op::Write(buf),
                            VerbKind::Cas => Op::Cas { expect: seen, swap: seen.wrapping_add(1) },
                            VerbKind::Faa => Op::Faa { add: 1 },
                            VerbKind::Call => Op::Read(buf),
                            VerbKind::MaskedCas => Op::MaskedCas {
                                compare: seen,
                                compare_mask: 0xffff,
                                swap: seen.wrapping_add(1),
                                swap_mask: 0xffff,
                            },
                            // Adds to the low 16-bit field, its carry stopping there.
                            VerbKind::MaskedFaa => Op::MaskedFaa { add: 1, boundary_mask: 1 << 15 },
                        };
                        Request { addr, op, fence: false }
                    })
                    .collect();
                let t0 = c.now_ns();
                if calls {
                    let mut request = spare.pop().unwrap_or_default().into_vec();
                    request.resize(p.bytes as usize, 0);
                    match c.call(server, ECHO_SERVICE, request).await {
                        Ok(reply) => spare.push(reply.into()),
                        Err(e) => {
                            tally.borrow_mut().error.get_or_insert(e);
                            return;
                        }
                    }
                    let t1 = c.now_ns();
                    if t1 >= warmup && t1 <= end {
                        let mut t = tally.borrow_mut();
                        t.verbs += 1;
                        t.latencies.push(t1 - t0);
                    }
                    continue;
                }
                match c.post(requests).await {
                    Ok(responses) => {
                        for r in responses {
                            match r {
                                Response::Read(b) | Response::Write(b) => spare.push(b),
                                Response::Atomic(old) => seen = old,
                            }
                        }
                    }
                    Err(e) => {
                        tally.borrow_mut().error.get_or_insert(e);
                        return;
                    }
                }
                let t1 = c.now_ns();
                if t1 >= warmup && t1 <= end {
                    let mut t = tally.borrow_mut();
                    t.verbs += p.batch as u64;
                    t.latencies.push(t1 - t0);
                }
            }
        });
    }
    sim.run().map_err(|e| e.to_string())?;
    let tally = Rc::try_unwrap(tally).map_err(|_| "tasks outlived the run")?.into_inner();
    if let Some(e) = tally.error {
        return Err(e.to_string());
    }
    let mut latencies = tally.latencies;
    latencies.sort_unstable();
    let stats = sim.stats();
    let seconds = p.duration_ns as f64 / 1e9;
    let elapsed_ns = stats.now_ns.max(1) as f64;
    // Utilisation of the nodes the verbs target: the memory nodes, or the server for calls.
    let targets: Vec<_> = if calls {
        vec![stats.nodes[server.0 as usize].clone()]
    } else {
        stats.nodes[..p.memory_nodes as usize].to_vec()
    };
    let mns = targets.len() as f64;
    Ok(PerfResult {
        verb: p.verb,
        bytes: p.bytes,
        clients: p.clients,
        compute_nodes: p.compute_nodes,
        memory_nodes: p.memory_nodes,
        region: p.region,
        hot_addresses: p.hot_addresses,
        batch: p.batch,
        server_threads: if calls { p.server_threads } else { 0 },
        profile: p.profile.name.clone(),
        seed: p.seed,
        duration_ns: p.duration_ns,
        verbs_measured: tally.verbs,
        throughput_mops: round3(tally.verbs as f64 / seconds / 1e6),
        throughput_gbytes_per_s: round3(tally.verbs as f64 * p.bytes as f64 / seconds / 1e9),
        latency_ns_p50: percentile(&latencies, 0.50),
        latency_ns_p99: percentile(&latencies, 0.99),
        latency_ns_max: latencies.last().copied().unwrap_or(0),
        mn_iops_utilisation: round3(targets.iter().map(|n| n.nic_busy_ns as f64).sum::<f64>() / mns / elapsed_ns),
        mn_bandwidth_utilisation: round3(
            targets.iter().map(|n| n.link_out_busy_ns as f64).sum::<f64>() / mns / elapsed_ns,
        ),
        nic_cache_misses_per_verb: round3(stats.nic_cache_misses() as f64 / tally.verbs.max(1) as f64),
        sim_steps: stats.steps,
    })
}

/// The nearest-rank percentile of sorted samples (exact: every sample is kept).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A human-readable table of results.
pub fn table(results: &[PerfResult]) -> String {
    let mut out = format!(
        "{:<10} {:>7} {:>7} {:>4} {:>4} {:>5} {:>10} {:>8} {:>9} {:>9} {:>7} {:>7}\n",
        "verb", "bytes", "clients", "CNs", "MNs", "batch", "Mops/s", "GB/s", "p50 ns", "p99 ns", "MN-IOPS", "MN-BW"
    );
    for r in results {
        out.push_str(&format!(
            "{:<10} {:>7} {:>7} {:>4} {:>4} {:>5} {:>10.3} {:>8.3} {:>9} {:>9} {:>6.0}% {:>6.0}%\n",
            r.verb.name(),
            r.bytes,
            r.clients,
            r.compute_nodes,
            r.memory_nodes,
            r.batch,
            r.throughput_mops,
            r.throughput_gbytes_per_s,
            r.latency_ns_p50,
            r.latency_ns_p99,
            r.mn_iops_utilisation * 100.0,
            r.mn_bandwidth_utilisation * 100.0,
        ));
    }
    out
}

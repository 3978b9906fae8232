//! The hardware side of the `dmkit` command (feature `connectx`): `dmkit memory-node`, and the
//! runner behind `dmkit run --backend rdma`.
//!
//! The runner is the simulator's ([`crate::run::run_index`]) on real verbs: the same index
//! options, items and operation sources; the loader creates the index and loads the items, then
//! the measured coroutines run their sources. What it does not do yet: more than one thread
//! per compute node (all of a process's coroutines share one executor thread, because the
//! workload's shared key counter is thread-local), barriers across compute-node processes (run
//! one compute node). After the run the index's invariant walk reads the memory nodes through
//! queue pairs of its own ([`HardwareView`]), as the simulator's walk reads its memory.
//! Verb-level costs (round trips, bytes, NIC utilisation) are the simulator's and read 0 here.

use crate::cluster::ClusterConfig;
use crate::run::{OpSource, RunResult, RunSetup, op_metrics, round3, useful_bytes};
use dmkit_indexes::IndexKind;
use dmkit_indexes::spec::{self, Outcome};
use dmkit_rdma::real::device::{BlockingExecutor, Nic};
use dmkit_rdma::real::node::{NodeHost, allocator_handler, dial};
use dmkit_rdma::real::runtime::Executor;
use dmkit_rdma::{ClientCtx, MemoryView, NodeId, RemoteAddr, Request, Verbs, VerbsError};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes of the compute thread's registered staging arena.
const STAGING_BYTES: usize = 64 << 20;

/// `dmkit memory-node`: registers `size` bytes, serves the chunk allocator (offsets from
/// `reserved` up) and the control channel on `listen` until SIGINT or SIGTERM.
pub fn memory_node(
    listen: SocketAddr,
    size: u64,
    token: &str,
    node: u16,
    reserved: u64,
    device: Option<&str>,
) -> Result<(), String> {
    if size <= reserved {
        return Err(format!("--size {size} must exceed the {reserved} reserved bytes"));
    }
    let nic = Arc::new(Nic::open(device, 1, None).map_err(|e| e.to_string())?);
    let handler = allocator_handler(NodeId(node), reserved, size);
    let mut host = NodeHost::new(nic, node, listen, size, token, handler).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed)).map_err(|e| format!("signal handler: {e}"))?;
    eprintln!("memory node {node}: {size} bytes registered; listening on {}", host.local_addr());
    host.serve(&stop).map_err(|e| e.to_string())?;
    eprintln!("memory node {node}: stopped ({} compute nodes admitted, {} refused)", host.admitted, host.refused);
    Ok(())
}

/// The memory nodes' memory for an invariant walk: READs on queue pairs of its own, one per
/// node, at most [`VIEW_CHUNK`] bytes each.
pub struct HardwareView {
    nodes: RefCell<BTreeMap<u16, BlockingExecutor>>,
}

impl std::fmt::Debug for HardwareView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HardwareView").field("nodes", &self.nodes.borrow().len()).finish()
    }
}

const VIEW_CHUNK: usize = 1 << 20;

impl HardwareView {
    /// Connects to every memory node of `cluster`.
    pub fn connect(nic: &Nic, cluster: &ClusterConfig) -> Result<HardwareView, String> {
        let mut nodes = BTreeMap::new();
        for (i, addr) in cluster.memory_nodes.iter().enumerate() {
            let cq = nic.completion_queue(64).map_err(|e| e.to_string())?;
            let conn =
                dial(nic, std::slice::from_ref(&cq), *addr, NodeId(i as u16), &cluster.token, cluster.compute_node)
                    .map_err(|e| format!("memory node {i} at {addr}: {e}"))?
                    .pop()
                    .ok_or("no queue pair")?;
            let exec = BlockingExecutor::new(nic, conn.qp, conn.regions, VIEW_CHUNK).map_err(|e| e.to_string())?;
            nodes.insert(i as u16, exec);
        }
        Ok(HardwareView { nodes: RefCell::new(nodes) })
    }
}

impl MemoryView for HardwareView {
    fn read_memory(&self, addr: RemoteAddr, len: usize) -> Result<Vec<u8>, VerbsError> {
        let mut nodes = self.nodes.borrow_mut();
        let exec = nodes.get_mut(&addr.node().0).ok_or(VerbsError::NoSuchNode(addr.node()))?;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(VIEW_CHUNK);
            let at = addr.checked_add(out.len() as u64).ok_or(VerbsError::OutOfRange { addr, len: len as u64 })?;
            let r = exec.execute(vec![Request::read_len(at, n)], true)?;
            out.extend_from_slice(r.into_iter().next().expect("one response").into_buf()?.as_slice());
        }
        Ok(out)
    }
}

#[derive(Default)]
struct Tally {
    latencies: BTreeMap<&'static str, Vec<u64>>,
    useful_bytes: u64,
    errors: BTreeMap<String, u64>,
    counters: dmkit_indexes::Counters,
}

/// Runs `sources` against index `K` on the cluster: [`crate::run::run_index`] on hardware.
pub fn run_index<K: IndexKind>(
    cluster: &ClusterConfig,
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    items: Vec<(Vec<u8>, Vec<u8>)>,
    sources: Vec<Box<dyn OpSource>>,
) -> Result<RunResult, String> {
    K::validate(options)?;
    if setup.compute_nodes != 1 || setup.threads_per_cn != 1 {
        return Err("--backend rdma runs one compute node with one thread for now: \
                    --compute-nodes 1 --threads-per-cn 1, and --coroutines for concurrency"
            .into());
    }
    if setup.memory_nodes as usize != cluster.memory_nodes.len() {
        return Err(format!(
            "--memory-nodes {} but the cluster file lists {}",
            setup.memory_nodes,
            cluster.memory_nodes.len()
        ));
    }
    let nic =
        Arc::new(Nic::open(cluster.device.as_deref(), cluster.port, cluster.gid_index).map_err(|e| e.to_string())?);
    let view = HardwareView::connect(&nic, cluster)?;
    let cq = nic.completion_queue(16384).map_err(|e| e.to_string())?;
    let mut connections = Vec::new();
    for (i, addr) in cluster.memory_nodes.iter().enumerate() {
        let c = dial(&nic, std::slice::from_ref(&cq), *addr, NodeId(i as u16), &cluster.token, cluster.compute_node)
            .map_err(|e| format!("memory node {i} at {addr}: {e}"))?;
        connections.extend(c);
    }
    let exec = Executor::new(nic, cq, connections, NodeId(cluster.compute_node), 0, setup.seed, STAGING_BYTES)
        .map_err(|e| e.to_string())?;
    let loader = exec.client(u32::MAX, 0);
    let caps = loader.caps().clone();
    let node = Arc::new(K::node_state(options, &caps));
    let keys = items.len() as u64;
    let item_bytes = items.iter().map(|(k, v)| (k.len() + v.len()) as f64).sum::<f64>() / (keys.max(1) as f64);
    {
        let (o, c) = (options.clone(), loader.clone());
        let mut handle = K::open(options, node.clone(), loader);
        exec.block_on(async move {
            if cluster_is_first(&c) {
                K::create(&o, &c).await.map_err(|e| format!("creating the index: {e}"))?;
            }
            dmkit_indexes::bulk::load(&mut handle, items).await.map_err(|e| format!("loading: {e}"))
        })
        .map_err(|e| e.to_string())??;
    }
    let clients = setup.clients();
    if sources.len() != clients as usize {
        return Err(format!("{} operation sources for {clients} clients", sources.len()));
    }
    let tally = Rc::new(RefCell::new(Tally::default()));
    let probe = exec.client(u32::MAX - 1, 0);
    let start = probe.now_ns();
    let end = if setup.duration_ns == 0 { u64::MAX } else { start + setup.warmup_ns + setup.duration_ns };
    let warmup_end = start + setup.warmup_ns;
    for (i, mut source) in sources.into_iter().enumerate() {
        let c = exec.client(i as u32, i as u32);
        let mut handle = K::open(options, node.clone(), c.clone());
        let tally = tally.clone();
        exec.spawn(async move {
            while c.now_ns() < end {
                let Some(task) = source.next_op() else { break };
                let t0 = c.now_ns();
                let mut outcomes = Vec::with_capacity(task.ops.len());
                for op in &task.ops {
                    let outcome = spec::apply(&mut handle, op).await;
                    let failed = matches!(outcome, Outcome::Failed(_));
                    outcomes.push(outcome);
                    if failed {
                        break;
                    }
                }
                let t1 = c.now_ns();
                if t1 > warmup_end && t1 <= end {
                    let mut t = tally.borrow_mut();
                    t.latencies.entry(task.name).or_default().push(t1 - t0);
                    for (op, outcome) in task.ops.iter().zip(&outcomes) {
                        t.useful_bytes += useful_bytes(op, outcome);
                        if let Outcome::Failed(e) = outcome {
                            *t.errors.entry(e.to_string()).or_default() += 1;
                        }
                    }
                }
            }
            tally.borrow_mut().counters.merge(dmkit_indexes::Index::counters(&handle));
        });
    }
    exec.run().map_err(|e| e.to_string())?;
    let stop = probe.now_ns();
    let report = K::check_invariants(options, &view).map_err(|e| format!("after the run, invariant violated: {e}"))?;
    let tally = Rc::try_unwrap(tally).map_err(|_| "clients outlived the run")?.into_inner();
    let measured_ns = if setup.duration_ns == 0 { stop.saturating_sub(warmup_end).max(1) } else { setup.duration_ns };
    let seconds = measured_ns as f64 / 1e9;
    let all: Vec<u64> = tally.latencies.values().flatten().copied().collect();
    let overall = op_metrics(all, seconds);
    let ops = overall.operations.max(1) as f64;
    let per_op = tally.latencies.into_iter().map(|(k, v)| (k.to_string(), op_metrics(v, seconds))).collect();
    Ok(RunResult {
        index: K::NAME.to_string(),
        config: names.0.to_string(),
        workload: names.1.to_string(),
        profile: format!("rdma:{}", caps_name(&caps)),
        clients,
        compute_nodes: setup.compute_nodes,
        memory_nodes: setup.memory_nodes,
        threads_per_cn: setup.threads_per_cn,
        coroutines: setup.coroutines,
        keys,
        seed: setup.seed,
        duration_ns: measured_ns,
        operations: overall.operations,
        throughput_mops: overall.throughput_mops,
        latency_ns_p50: overall.latency_ns_p50,
        latency_ns_p90: overall.latency_ns_p90,
        latency_ns_p99: overall.latency_ns_p99,
        latency_ns_p999: overall.latency_ns_p999,
        per_op,
        round_trips_per_op: 0.0,
        bytes_read_per_op: 0.0,
        bytes_written_per_op: 0.0,
        read_amplification: 0.0,
        verbs_per_op: BTreeMap::new(),
        mn_iops_utilisation: 0.0,
        mn_bandwidth_utilisation: 0.0,
        cache_bytes_per_cn: K::node_state_bytes(&node) as f64,
        cache_hit_ratio: None,
        remote_bytes_used: report.remote_bytes,
        metadata_bytes_per_item: (report.items > 0)
            .then(|| round3((report.remote_bytes as f64 / report.items as f64 - item_bytes).max(0.0))),
        load_factor: report.capacity_items.filter(|&c| c > 0).map(|c| round3(report.items as f64 / c as f64)),
        retries_per_op: round3(tally.counters.retries as f64 / ops),
        lock_failures: tally.counters.lock_failures,
        cas_failures: tally.counters.cas_failures,
        rdwc: None,
        errors: tally.errors,
        index_counters: tally.counters.events.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        timeseries: Vec::new(),
        history: None,
        sim_steps: 0,
    })
}

/// Compute node 0 creates the index; the others (later, with barriers) only open it.
fn cluster_is_first(c: &impl ClientCtx) -> bool {
    c.identity().node == NodeId(0)
}

fn caps_name(caps: &dmkit_rdma::Caps) -> String {
    format!("inline {} B, device memory {} B", caps.max_inline_bytes, caps.device_memory_bytes)
}

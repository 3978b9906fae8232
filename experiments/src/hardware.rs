//! The hardware side of the `dmkit` command (feature `connectx`): `dmkit memory-node`, and the
//! runner behind `dmkit run --backend rdma`.
//!
//! The runner is the simulator's ([`crate::run::run_index`]) on real verbs: the same index
//! options, items and operation sources; the loader creates the index and loads the items, then
//! `threads_per_cn` OS threads, each an executor with `coroutines` clients, run their sources
//! against the wall clock. With several compute nodes (one `dmkit run` process each, its id in
//! the cluster file), compute node 0 creates and loads the index, and barriers held by memory
//! node 0 start the measured phase together and end it before the walk; each process reports
//! its own clients (add the throughputs). Each process inserts every `compute_nodes`-th fresh
//! key number from its own id (`SharedState::strided`), so no key is inserted twice. After the run the index's invariant walk reads the memory nodes through
//! queue pairs of its own ([`HardwareView`]), as the simulator's walk reads its memory.
//! Verb-level costs (round trips, bytes, NIC utilisation) are the simulator's and read 0 here.

use crate::cluster::ClusterConfig;
use crate::run::{OpSource, RunResult, RunSetup, op_metrics, round3, useful_bytes};
use dmkit_indexes::IndexKind;
use dmkit_indexes::spec::{self, Outcome};
use dmkit_rdma::real::device::{BlockingExecutor, Nic};
use dmkit_rdma::real::node::{NodeHost, allocator_handler, barrier, dial};
use dmkit_rdma::real::runtime::{Connection, Executor};
use dmkit_rdma::{ClientCtx, MemoryView, NodeId, RemoteAddr, Request, Verbs, VerbsError};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes of the compute thread's registered staging arena.
const STAGING_BYTES: usize = 16 << 20;

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
                    .0
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
/// Each of `threads_per_cn` OS threads runs an [`Executor`] with `coroutines` clients and a
/// queue pair of its own to every memory node; the loader (create and load) runs first on the
/// calling thread.
pub fn run_index<K: IndexKind>(
    cluster: &ClusterConfig,
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    items: Vec<(Vec<u8>, Vec<u8>)>,
    sources: Vec<Box<dyn OpSource>>,
) -> Result<RunResult, String> {
    K::validate(options)?;
    let cn_index = cluster.compute_node;
    if cn_index >= setup.compute_nodes {
        return Err(format!(
            "this is compute node {cn_index} (cluster file) of --compute-nodes {}",
            setup.compute_nodes
        ));
    }
    if setup.memory_nodes as usize != cluster.memory_nodes.len() {
        return Err(format!(
            "--memory-nodes {} but the cluster file lists {}",
            setup.memory_nodes,
            cluster.memory_nodes.len()
        ));
    }
    if sources.len() != setup.clients() as usize {
        return Err(format!("{} operation sources for {} clients", sources.len(), setup.clients()));
    }
    // This process runs its own compute node's clients.
    let clients = setup.threads_per_cn * setup.coroutines;
    let sources: Vec<Box<dyn OpSource>> =
        sources.into_iter().skip((cn_index as u32 * clients) as usize).take(clients as usize).collect();
    let nic =
        Arc::new(Nic::open(cluster.device.as_deref(), cluster.port, cluster.gid_index).map_err(|e| e.to_string())?);
    let view = HardwareView::connect(&nic, cluster)?;
    let threads = setup.threads_per_cn as usize;
    // One completion queue per thread, and per memory node one control connection with one
    // queue pair per thread (plus the loader's).
    let cqs: Vec<_> =
        (0..=threads).map(|_| nic.completion_queue(16384).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let mut per_thread: Vec<Vec<Connection>> = (0..=threads).map(|_| Vec::new()).collect();
    let mut control = None;
    for (i, addr) in cluster.memory_nodes.iter().enumerate() {
        let (conns, stream) = dial(&nic, &cqs, *addr, NodeId(i as u16), &cluster.token, cluster.compute_node)
            .map_err(|e| format!("memory node {i} at {addr}: {e}"))?;
        // Memory node 0 holds the compute nodes' barriers.
        control.get_or_insert(stream);
        for (t, c) in conns.into_iter().enumerate() {
            per_thread[t].push(c);
        }
    }
    let mut cqs = cqs;
    let (loader_cq, loader_conns) = (cqs.pop().expect("the loader's"), per_thread.pop().expect("the loader's"));
    let cn = NodeId(cluster.compute_node);
    let keys = items.len() as u64;
    let item_bytes = items.iter().map(|(k, v)| (k.len() + v.len()) as f64).sum::<f64>() / (keys.max(1) as f64);
    let node = {
        let exec = Executor::new(nic.clone(), loader_cq, loader_conns, cn, threads as u32, setup.seed, STAGING_BYTES)
            .map_err(|e| e.to_string())?;
        let loader = exec.client(u32::MAX, 0);
        let node = Arc::new(K::node_state(options, loader.caps()));
        let (o, c) = (options.clone(), loader.clone());
        let mut handle = K::open(options, node.clone(), loader);
        // Compute node 0 creates and loads the index; the others open it once it is loaded.
        if cn_index == 0 {
            exec.block_on(async move {
                K::create(&o, &c).await.map_err(|e| format!("creating the index: {e}"))?;
                dmkit_indexes::bulk::load(&mut handle, items).await.map_err(|e| format!("loading: {e}"))
            })
            .map_err(|e| e.to_string())??;
        }
        node
    };
    let mut control = control.ok_or("no memory node")?;
    let parties = setup.compute_nodes;
    barrier(&mut control, 1, parties).map_err(|e| format!("waiting for the other compute nodes: {e}"))?;
    let start = Instant::now();
    let warmup = Duration::from_nanos(setup.warmup_ns);
    let end = (setup.duration_ns > 0).then(|| warmup + Duration::from_nanos(setup.duration_ns));
    let mut sources = sources.into_iter();
    let work: Vec<ThreadWork> = per_thread
        .into_iter()
        .zip(cqs)
        .map(|(conns, cq)| (conns, cq, sources.by_ref().take(setup.coroutines as usize).collect()))
        .collect();
    let tallies: Vec<Result<Tally, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = work
            .into_iter()
            .enumerate()
            .map(|(t, (conns, cq, mine))| {
                let (nic, node) = (nic.clone(), node.clone());
                scope.spawn(move || {
                    run_thread::<K>(nic, cq, conns, cn, t as u32, setup, options, node, mine, start, warmup, end)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a compute thread panicked".into()))).collect()
    });
    let stop = start.elapsed();
    // Every compute node has finished before anyone walks the index.
    barrier(&mut control, 2, parties).map_err(|e| format!("waiting for the other compute nodes: {e}"))?;
    let mut tally = Tally::default();
    for t in tallies {
        let t = t?;
        for (name, l) in t.latencies {
            tally.latencies.entry(name).or_default().extend(l);
        }
        tally.useful_bytes += t.useful_bytes;
        for (e, n) in t.errors {
            *tally.errors.entry(e).or_default() += n;
        }
        tally.counters.merge(&t.counters);
    }
    let report = K::check_invariants(options, &view).map_err(|e| format!("after the run, invariant violated: {e}"))?;
    let measured_ns = match end {
        Some(_) => setup.duration_ns,
        None => stop.saturating_sub(warmup).as_nanos().max(1) as u64,
    };
    let seconds = measured_ns as f64 / 1e9;
    let all: Vec<u64> = tally.latencies.values().flatten().copied().collect();
    let overall = op_metrics(all, seconds);
    let ops = overall.operations.max(1) as f64;
    let per_op = tally.latencies.into_iter().map(|(k, v)| (k.to_string(), op_metrics(v, seconds))).collect();
    let metadata_bytes_per_item =
        (report.items > 0).then(|| round3((report.remote_bytes as f64 / report.items as f64 - item_bytes).max(0.0)));
    Ok(RunResult {
        cache_bytes_per_cn: K::node_state_bytes(&node) as f64,
        remote_bytes_used: report.remote_bytes,
        metadata_bytes_per_item,
        load_factor: report.capacity_items.filter(|&c| c > 0).map(|c| round3(report.items as f64 / c as f64)),
        retries_per_op: round3(tally.counters.retries as f64 / ops),
        lock_failures: tally.counters.lock_failures,
        cas_failures: tally.counters.cas_failures,
        errors: tally.errors,
        index_counters: tally.counters.events.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        // Verb-level costs and NIC utilisation are the simulator's: they stay 0 here.
        ..RunResult::measured(
            K::NAME,
            names,
            format!("rdma:{}", nic.caps().name),
            setup,
            (clients, keys),
            measured_ns,
            (overall, per_op),
        )
    })
}

/// A compute thread's queue pairs, completion queue and operation sources.
type ThreadWork = (Vec<Connection>, dmkit_rdma::real::device::Cq, Vec<Box<dyn OpSource>>);

/// One compute thread: an executor, its clients, their sources; returns their tally.
#[allow(clippy::too_many_arguments)]
fn run_thread<K: IndexKind>(
    nic: Arc<Nic>,
    cq: dmkit_rdma::real::device::Cq,
    conns: Vec<Connection>,
    cn: NodeId,
    thread: u32,
    setup: &RunSetup,
    options: &K::Options,
    node: Arc<K::NodeState>,
    sources: Vec<Box<dyn OpSource>>,
    start: Instant,
    warmup: Duration,
    end: Option<Duration>,
) -> Result<Tally, String> {
    let exec = Executor::new(nic, cq, conns, cn, thread, setup.seed, STAGING_BYTES).map_err(|e| e.to_string())?;
    let tally = Rc::new(RefCell::new(Tally::default()));
    for (k, mut source) in sources.into_iter().enumerate() {
        let id = thread * setup.coroutines + k as u32;
        let c = exec.client(id, k as u32);
        let mut handle = K::open(options, node.clone(), c.clone());
        let tally = tally.clone();
        exec.spawn(async move {
            while end.is_none_or(|e| start.elapsed() < e) {
                let Some(task) = source.next_op() else { break };
                let t0 = start.elapsed();
                let mut outcomes = Vec::with_capacity(task.ops.len());
                for op in &task.ops {
                    let outcome = spec::apply(&mut handle, op).await;
                    let failed = matches!(outcome, Outcome::Failed(_));
                    outcomes.push(outcome);
                    if failed {
                        break;
                    }
                }
                let t1 = start.elapsed();
                if t1 > warmup && end.is_none_or(|e| t1 <= e) {
                    let mut t = tally.borrow_mut();
                    t.latencies.entry(task.name).or_default().push((t1 - t0).as_nanos() as u64);
                    for (op, outcome) in task.ops.iter().zip(&outcomes) {
                        t.useful_bytes += useful_bytes(op, outcome);
                        if let Outcome::Failed(e) = outcome {
                            *t.errors.entry(e.to_string()).or_default() += 1;
                        }
                    }
                }
                // Let the thread's other coroutines and the completion queue run.
                c.yield_now().await;
            }
            tally.borrow_mut().counters.merge(dmkit_indexes::Index::counters(&handle));
        });
    }
    exec.run().map_err(|e| e.to_string())?;
    Rc::try_unwrap(tally).map_err(|_| "clients outlived the run".to_string()).map(RefCell::into_inner)
}

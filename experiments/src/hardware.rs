//! The hardware side of the `dmkit` command (feature `connectx`): `dmkit memory-node`,
//! `dmkit server-node`, and the runner behind `dmkit run --backend rdma`.
//!
//! Memory and server nodes are both [`ServiceNode`]s: a memory node runs the chunk allocator as
//! a service on one RPC thread (as the simulator does); a server node runs the services its
//! index installs for its node id (`IndexKind::install`), on the index's RPC threads, and its
//! handlers and workers reach the cluster's other nodes. `dmkit server-node --index` builds the
//! index's options exactly as the compute processes do: it goes through
//! [`crate::run::run_request`] with a cluster whose [`ServerRole`] is set, and [`run_index`]
//! then serves instead of running clients.
//!
//! The runner is the simulator's ([`crate::run::run_index`]) on real verbs: the same index
//! options, items and operation sources; the loader creates the index and loads the items, then
//! `threads_per_cn` OS threads, each an executor with `coroutines` clients, run their sources
//! against the wall clock, measured as in the simulator ([`crate::measure`]: steady state
//! by default, judged on this process's own clients; each process stops when its own series
//! has converged, so give a fixed `--duration-us` when several processes must measure one
//! window together). With several compute nodes (one `dmkit run` process each, its id in
//! the cluster file), compute node 0 creates and loads the index, and barriers held by memory
//! node 0 start the measured phase together and end it before the walk; each process reports
//! its own clients (add the throughputs). Each process inserts every `compute_nodes`-th fresh
//! key number from its own id (`SharedState::strided`), so no key is inserted twice. After the run the index's invariant walk reads the memory nodes through
//! queue pairs of its own ([`HardwareView`]), as the simulator's walk reads its memory.
//! Verb-level costs (round trips, bytes, NIC utilisation) are the simulator's and read 0 here.
//!
//! ## Histories on hardware
//!
//! With `--export-history` or `--check`, every operation is stamped at its invocation and at its
//! response from one cluster-wide clock: an FAA of 1 on the word at [`HISTORY_CLOCK`] (memory
//! node 0, host offset 2048, inside the reserved first MiB that no index uses below 4096), the
//! stamp being the old value + 1. The memory node's NIC executes the FAAs one at a time, so the
//! stamps are distinct and totally ordered; an invocation stamp is taken (its FAA completed)
//! before the operation's first verb is posted, and a response stamp is taken after its last
//! completion, so if `a`'s response stamp is below `b`'s invocation stamp, `a` really returned
//! before `b` began, in any process: the history's order is real time's. Program order holds
//! because a client stamps its next invocation after its previous response. The cost: two
//! same-address FAAs per operation, which the NIC serialises (a ConnectX-6 does about 2 M of
//! them per second on one host address): a recorded run measures the checker's clock as much
//! as the index, so its throughput is not a result. Compute node 0's history begins with the
//! loaded items (inserts at time 0); with several compute nodes each process exports its own
//! clients' operations, and `dmkit check-history` judges the files together.

use crate::cluster::{ClusterConfig, ServerRole};
use crate::measure::{Decision, Estimate, Monitor, Window};
use crate::run::client::{Meter, Phase, Recorded, Series, Sink, Tally};
use crate::run::schema::{OpSource, RunResult, RunSetup, coarse_series, round3};
use crate::run::tally::{OpLog, walk_after_run};
use dmkit_indexes::IndexKind;
use dmkit_rdma::alloc::ALLOCATOR_SERVICE;
use dmkit_rdma::real::device::{BlockingExecutor, Nic, check_hugepages};
use dmkit_rdma::real::node::{barrier, dial};
use dmkit_rdma::real::runtime::{Connection, Executor, RdmaClient};
use dmkit_rdma::real::server::{AllocatorService, HostConfig, ServerClient, ServiceNode};
use dmkit_rdma::service::{LocalMemory, Replier, Responder, Service, ServiceHost};
use dmkit_rdma::sync::Queue;
use dmkit_rdma::{ClientCtx, MemoryView, NodeId, RemoteAddr, Request, Verbs, VerbsError};
use dmkit_sim::ClientStats;
use dmkit_verify::history::History;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The cluster-wide clock of recorded histories (module doc).
pub const HISTORY_CLOCK: RemoteAddr = dmkit_rdma::Fixed::new(2048, 8).on(NodeId(0));

/// A fresh stamp of the cluster-wide history clock.
async fn history_stamp<C: Verbs>(c: &C) -> Result<u64, VerbsError> {
    c.faa(HISTORY_CLOCK, 1).await.map(|old| old + 1)
}

/// Bytes of the compute thread's registered staging arena.
const STAGING_BYTES: usize = 16 << 20;

/// The one-line refusal of `--hugepages` when the kernel has too few free huge pages for
/// `size` bytes (checked before anything else starts).
fn check_hugepages_flag(size: u64) -> Result<(), String> {
    check_hugepages(size).map(|_| ()).map_err(|e| format!("--hugepages: {e}"))
}

/// `dmkit memory-node`: registers `size` bytes (on 2 MiB huge pages with `hugepages`) and the
/// NIC's device memory where it has some (region 1), serves the chunk allocator (offsets from
/// `reserved` up) and the control channel on `listen` until SIGINT or SIGTERM.
pub fn memory_node(
    listen: SocketAddr,
    size: u64,
    token: &str,
    node: u16,
    reserved: u64,
    device: Option<&str>,
    hugepages: bool,
) -> Result<(), String> {
    if size <= reserved {
        return Err(format!("--size {size} must exceed the {reserved} reserved bytes"));
    }
    if hugepages {
        check_hugepages_flag(size)?;
    }
    let nic = Arc::new(Nic::open(device, 1, None).map_err(|e| e.to_string())?);
    let name = format!("memory node {node}");
    let mut config = HostConfig::new(NodeId(node), &name, listen, size, token);
    config.hugepages = hugepages;
    let mut host = ServiceNode::new(nic, config).map_err(|e| e.to_string())?;
    let id = NodeId(node);
    host.add_service(id, ALLOCATOR_SERVICE, move || AllocatorService::new(id, reserved, size))?;
    serve_until_signal(host, &name)
}

/// Runs `host` until SIGINT or SIGTERM.
fn serve_until_signal(mut host: ServiceNode, name: &str) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed)).map_err(|e| format!("signal handler: {e}"))?;
    let pages = if host.memory().is_huge() { " on 2 MiB huge pages" } else { "" };
    let device = match host.device_memory() {
        Some(d) => format!("{} bytes of device memory (region 1)", d.len),
        None => "no device memory".into(),
    };
    eprintln!(
        "{name}: {} bytes registered{pages}; {device}; services {:?}; listening on {}",
        host.memory().len(),
        host.services(),
        host.local_addr()
    );
    let report = host.serve(&stop).map_err(|e| e.to_string())?;
    eprintln!(
        "{name}: stopped ({} peers admitted, {} refused, {} calls)",
        report.admitted, report.refused, report.calls
    );
    Ok(())
}

/// `dmkit server-node` without `--index`: registered memory, the control channel, and the
/// diagnostic echo service if `role.echo_service` names one. With a cluster file its threads
/// can reach the cluster's other nodes.
pub fn server_node(
    role: &ServerRole,
    token: &str,
    device: Option<&str>,
    cluster: Option<&ClusterConfig>,
) -> Result<(), String> {
    let mut host = server_host(role, token, device, cluster, 1)?;
    add_echo(&mut host, role)?;
    let name = format!("server node {}", role.node);
    serve_until_signal(host, &name)
}

/// A server node's host: its memory and control channel, peers from the cluster file.
fn server_host(
    role: &ServerRole,
    token: &str,
    device: Option<&str>,
    cluster: Option<&ClusterConfig>,
    rpc_threads: u16,
) -> Result<ServiceNode, String> {
    if role.memory_bytes < 4096 {
        return Err(format!("--size {}: a server node needs at least 4096 bytes", role.memory_bytes));
    }
    if role.hugepages {
        check_hugepages_flag(role.memory_bytes)?;
    }
    let (port, gid_index) = cluster.map_or((1, None), |c| (c.port, c.gid_index));
    let device = device.or(cluster.and_then(|c| c.device.as_deref()));
    let nic = Arc::new(Nic::open(device, port, gid_index).map_err(|e| e.to_string())?);
    let name = format!("server node {}", role.node);
    let mut config = HostConfig::new(NodeId(role.node), &name, role.listen, role.memory_bytes, token);
    config.rpc_threads = rpc_threads.max(1);
    config.hugepages = role.hugepages;
    if let Some(c) = cluster {
        config.peers = c.nodes();
    }
    ServiceNode::new(nic, config).map_err(|e| e.to_string())
}

fn add_echo(host: &mut ServiceNode, role: &ServerRole) -> Result<(), String> {
    match role.echo_service {
        Some(id) => host.add_service(NodeId(role.node), id, || EchoService { queue: Queue::new() }),
        None => Ok(()),
    }
}

/// `dmkit server-node --echo-service ID`: a diagnostic service that exercises a server node's
/// whole path. Each call's reply is deferred to the service's worker, which adds the request's
/// first 8 bytes (a little-endian word; 0 if shorter) to the word at offset 0 of the node's
/// memory with a local FAA, then answers with the request itself.
#[derive(Debug)]
struct EchoService {
    queue: Queue<(Responder, Vec<u8>)>,
}

impl Service<ServerClient> for EchoService {
    async fn handle(self: Arc<Self>, _ctx: ServerClient, request: Vec<u8>) -> Vec<u8> {
        request
    }

    async fn dispatch(self: Arc<Self>, _ctx: ServerClient, request: Vec<u8>, to: Responder) -> Option<Vec<u8>> {
        self.queue.push((to, request));
        None
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: ServerClient, _index: u32) {
        loop {
            let (to, request) = self.queue.pop().await;
            let word = request.get(..8).map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
            if let Err(e) = ctx.local_faa(0, word).await {
                eprintln!("echo service: {e}");
            }
            if let Err(e) = ctx.reply(to, request) {
                eprintln!("echo service: {e}");
            }
        }
    }
}

/// `dmkit server-node --index`: this process is server node `role.node` of index `K`, whose
/// options the compute processes build from the same flags. Installs the services `K` runs on
/// this node (others are skipped), serves until SIGINT or SIGTERM, and reports no operations.
fn serve_index<K: IndexKind>(
    cluster: &ClusterConfig,
    role: &ServerRole,
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    keys: u64,
) -> Result<RunResult, String> {
    // `dmkit server-node` checked that `role.node` is one of the cluster file's server nodes,
    // and `run_index` that the file lists all of the index's.
    let servers = K::servers(options);
    let first = cluster.memory_nodes.len() as u16;
    if servers.nodes == 0 {
        return Err(format!("--node {}: index {} runs no services on server nodes", role.node, K::NAME));
    }
    if role.node >= first + servers.nodes {
        return Err(format!(
            "--node {}: index {} runs services on {} server nodes ({first}..{})",
            role.node,
            K::NAME,
            servers.nodes,
            first + servers.nodes
        ));
    }
    let mut host = server_host(role, &cluster.token, cluster.device.as_deref(), Some(cluster), servers.rpc_threads)?;
    K::install(options, &mut host).map_err(|e| format!("starting the index's services: {e}"))?;
    if host.services().is_empty() {
        eprintln!("server node {}: index {} installs no service here", role.node, K::NAME);
    }
    add_echo(&mut host, role)?;
    let device = host_device_name(cluster);
    serve_until_signal(host, &format!("server node {} ({})", role.node, K::NAME))?;
    Ok(RunResult::measured(K::NAME, names, device, setup, (0, keys), &Default::default(), &OpLog::default()))
}

fn host_device_name(cluster: &ClusterConfig) -> String {
    format!("rdma:{}", cluster.device.as_deref().unwrap_or("first device"))
}

/// The memory nodes' memory for an invariant walk: READs on queue pairs of its own, one per
/// node, at most [`VIEW_CHUNK`] bytes each.
pub struct HardwareView {
    nodes: RefCell<BTreeMap<u16, BlockingExecutor>>,
    /// Control connections, kept as long as the queue pairs (a node retires a peer's queue
    /// pairs when its control connection closes).
    _controls: Vec<std::net::TcpStream>,
}

impl std::fmt::Debug for HardwareView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HardwareView").field("nodes", &self.nodes.borrow().len()).finish()
    }
}

const VIEW_CHUNK: usize = 1 << 20;

impl HardwareView {
    /// Connects to every memory node of `cluster` and to its first `server_nodes` server nodes.
    pub fn connect(nic: &Nic, cluster: &ClusterConfig, server_nodes: u16) -> Result<HardwareView, String> {
        let mut nodes = BTreeMap::new();
        let mut controls = Vec::new();
        for (id, addr) in used_nodes(cluster, server_nodes) {
            let cq = nic.completion_queue(64).map_err(|e| e.to_string())?;
            let (mut conns, control) =
                dial(nic, std::slice::from_ref(&cq), addr, NodeId(id), &cluster.token, cluster.compute_node)
                    .map_err(|e| format!("{} at {addr}: {e}", node_name(cluster, id)))?;
            let conn = conns.pop().ok_or("no queue pair")?;
            let exec = BlockingExecutor::new(nic, conn.qp, conn.regions, VIEW_CHUNK).map_err(|e| e.to_string())?;
            nodes.insert(id, exec);
            controls.push(control);
        }
        Ok(HardwareView { nodes: RefCell::new(nodes), _controls: controls })
    }
}

/// The nodes a run reaches: every memory node and the index's server nodes, by id.
fn used_nodes(cluster: &ClusterConfig, server_nodes: u16) -> Vec<(u16, SocketAddr)> {
    let nodes = cluster.nodes();
    let last = cluster.memory_nodes.len() as u16 + server_nodes;
    nodes.into_iter().filter(|&(id, _)| id < last).collect()
}

fn node_name(cluster: &ClusterConfig, id: u16) -> String {
    let m = cluster.memory_nodes.len() as u16;
    if id < m { format!("memory node {id}") } else { format!("server node {id}") }
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

/// A hardware client's [`Meter`]: the wall clock from the measured phase's `start`, no verb
/// counts (they are the simulator's), the cluster-wide history clock, and a yield between
/// operations so the thread's other coroutines and its completion queue run.
struct RdmaMeter {
    client: RdmaClient,
    start: Instant,
}

impl Meter for RdmaMeter {
    const PER_TICK_COSTS: bool = false;

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn stats(&self) -> ClientStats {
        ClientStats::default()
    }

    async fn stamp(&self) -> Result<u64, String> {
        history_stamp(&self.client).await.map_err(|e| e.to_string())
    }

    async fn between(&self) {
        self.client.yield_now().await;
    }
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
    // The index's services call each other, and clients call them: every one of its server
    // nodes must be listed, for a compute node and a server node alike.
    let servers = K::servers(options).nodes;
    if cluster.server_nodes.len() < servers as usize {
        return Err(format!(
            "index {} runs services on {servers} server nodes, and the cluster file lists {} [[server_node]]",
            K::NAME,
            cluster.server_nodes.len()
        ));
    }
    if let Some(role) = &cluster.server {
        return serve_index::<K>(cluster, role, setup, options, names, items.len() as u64);
    }
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
    let view = HardwareView::connect(&nic, cluster, servers)?;
    let threads = setup.threads_per_cn as usize;
    // One completion queue per thread, and per memory or server node one control connection
    // with one queue pair per thread (plus the loader's).
    let cqs: Vec<_> =
        (0..=threads).map(|_| nic.completion_queue(16384).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let mut per_thread: Vec<Vec<Connection>> = (0..=threads).map(|_| Vec::new()).collect();
    let mut control = None;
    // The other nodes' control connections stay open for the run (closing one says goodbye).
    let mut other_controls = Vec::new();
    for (id, addr) in used_nodes(cluster, servers) {
        let (conns, stream) = dial(&nic, &cqs, addr, NodeId(id), &cluster.token, cluster.compute_node)
            .map_err(|e| format!("{} at {addr}: {e}", node_name(cluster, id)))?;
        // Memory node 0 holds the compute nodes' barriers.
        if id == 0 {
            control = Some(stream);
        } else {
            other_controls.push(stream);
        }
        for (t, c) in conns.into_iter().enumerate() {
            per_thread[t].push(c);
        }
    }
    let mut cqs = cqs;
    let (loader_cq, loader_conns) = (cqs.pop().expect("the loader's"), per_thread.pop().expect("the loader's"));
    let cn = NodeId(cluster.compute_node);
    let keys = items.len() as u64;
    // Compute node 0's history starts with the loaded items, as inserts completed at time 0.
    let preload: Vec<dmkit_verify::history::Record> = if setup.record_history && cn_index == 0 {
        items.iter().map(|(k, v)| dmkit_verify::history::Record::preloaded(k.clone(), v.clone())).collect()
    } else {
        Vec::new()
    };
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
    // The measured phase is chosen as in the simulator (crate::measure), on the wall clock: each
    // process judges its own clients' series and stops on its own (module doc).
    let mut monitor = Monitor::new(setup.window, setup.tick_ns);
    let phase = Arc::new(Phase::new(
        clients as usize,
        setup.tick_ns,
        setup.timeseries_ns > 0,
        match setup.window {
            Window::Fixed { warmup_ns, duration_ns: Some(d) } => warmup_ns + d,
            _ => u64::MAX,
        },
    ));
    let series: Vec<Arc<Series>> = (0..threads).map(|_| Arc::default()).collect();
    let start = Instant::now();
    let now_ns = || start.elapsed().as_nanos() as u64;
    let mut sources = sources.into_iter();
    let work: Vec<ThreadWork> = per_thread
        .into_iter()
        .zip(cqs)
        .zip(&series)
        .map(|((conns, cq), s)| (conns, cq, s.clone(), sources.by_ref().take(setup.coroutines as usize).collect()))
        .collect();
    let (tallies, estimate): (Vec<Result<Recorded, String>>, Estimate) = std::thread::scope(|scope| {
        let handles: Vec<_> = work
            .into_iter()
            .enumerate()
            .map(|(t, (conns, cq, series, mine))| {
                let (nic, node, phase) = (nic.clone(), node.clone(), phase.clone());
                scope.spawn(move || {
                    let thread = ClientThread { cn, thread: t as u32, start, phase: phase.clone(), series };
                    let r = thread.run::<K>(nic, cq, conns, setup, options, node, mine);
                    if r.is_err() {
                        phase.fail();
                    }
                    r
                })
            })
            .collect();
        let estimate = loop {
            let target = monitor.next_check_ns();
            while now_ns() < target && !phase.ended() {
                std::thread::sleep(Duration::from_micros(200).min(Duration::from_nanos(target - now_ns().min(target))));
            }
            let ended = phase.ended();
            // Judge the ticks completed by now (a tick boundary at or before the clock).
            let now = now_ns() / setup.tick_ns * setup.tick_ns;
            if let Decision::Stop(e) = monitor.check(&Series::sum(&series), now, ended) {
                phase.stop_at(now);
                break e;
            }
        };
        let tallies =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a compute thread panicked".into()))).collect();
        (tallies, estimate)
    });
    // Every compute node has finished before anyone walks the index.
    barrier(&mut control, 2, parties).map_err(|e| format!("waiting for the other compute nodes: {e}"))?;
    let mut tally = Tally::default();
    let mut history = History { records: preload };
    for t in tallies {
        let (t, h) = t?;
        if let Some(e) = t.clock_error {
            return Err(format!("reading the history clock on memory node 0: {e}"));
        }
        history.records.extend(h.map(|h| h.records).unwrap_or_default());
        tally.merge(t);
    }
    let report = walk_after_run::<K>(options, &view, &tally.log)?;
    let measured = RunResult::measured(
        K::NAME,
        names,
        format!("rdma:{}", nic.caps().name),
        setup,
        (clients, keys),
        &estimate,
        &tally.log,
    );
    let ops = measured.operations.max(1) as f64;
    let end_ns = start.elapsed().as_nanos() as u64;
    let (series_mops, series_bin_ns) = coarse_series(&Series::sum(&series), setup.tick_ns);
    Ok(RunResult {
        series_mops,
        series_bin_ns,
        cache_bytes_per_cn: K::node_state_bytes(&node) as f64,
        // Over the whole run, not the measured window (`Meter::PER_TICK_COSTS`).
        retries_per_op: round3(tally.log.counters.retries as f64 / ops),
        lock_failures: tally.log.counters.lock_failures,
        cas_failures: tally.log.counters.cas_failures,
        timeseries: if setup.timeseries_ns > 0 { tally.timeseries(setup.timeseries_ns, end_ns) } else { Vec::new() },
        history: setup.record_history.then_some(history),
        supports_scan: K::SUPPORTS_SCAN,
        // Verb-level costs and the memory nodes' NIC utilisation are the simulator's: not
        // measured here, they stay `None` (null in JSON, `—` in the table).
        ..measured.with_structure(&report, item_bytes)
    })
}

/// A compute thread's queue pairs, completion queue, series and operation sources.
type ThreadWork = (Vec<Connection>, dmkit_rdma::real::device::Cq, Arc<Series>, Vec<Box<dyn OpSource>>);

/// One compute thread of compute node `cn`: an executor whose clients record into `series`.
struct ClientThread {
    cn: NodeId,
    thread: u32,
    start: Instant,
    phase: Arc<Phase>,
    series: Arc<Series>,
}

impl ClientThread {
    /// Runs a client per source on an executor of the thread's own; returns their tally and
    /// history.
    #[allow(clippy::too_many_arguments)]
    fn run<K: IndexKind>(
        self,
        nic: Arc<Nic>,
        cq: dmkit_rdma::real::device::Cq,
        conns: Vec<Connection>,
        setup: &RunSetup,
        options: &K::Options,
        node: Arc<K::NodeState>,
        sources: Vec<Box<dyn OpSource>>,
    ) -> Result<Recorded, String> {
        let (cn, thread) = (self.cn, self.thread);
        let exec = Executor::new(nic, cq, conns, cn, thread, setup.seed, STAGING_BYTES).map_err(|e| e.to_string())?;
        let sink = Sink {
            phase: self.phase,
            series: self.series,
            tally: Rc::default(),
            history: setup.record_history.then(|| Rc::new(RefCell::new(History::default()))),
        };
        for (k, source) in sources.into_iter().enumerate() {
            // Unique among the run's clients, every compute node's included (as in the
            // simulator): indexes name lock owners and writers by it (HStore's servers keep
            // each client's last write by its id).
            let id = (cn.0 as u32 * setup.threads_per_cn + thread) * setup.coroutines + k as u32;
            let client = exec.client(id, k as u32);
            let handle = K::open(options, node.clone(), client.clone());
            exec.spawn(sink.client(id, handle, source, RdmaMeter { client, start: self.start }));
        }
        exec.run().map_err(|e| e.to_string())?;
        sink.finish()
    }
}

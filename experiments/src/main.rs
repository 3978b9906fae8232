//! The `dmkit` command.

use clap::{Args, Parser, Subcommand, ValueEnum};
use dmkit_experiments::perftest::{self, PerfPoint, PerfRegion};
use dmkit_experiments::sweep;
use dmkit_sim::Profile;
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: alloc::Mimalloc = alloc::Mimalloc;

/// mimalloc, through its plain `malloc` family wherever a layout allows it.
///
/// `mimalloc::MiMalloc` calls mimalloc's aligned entry points for every allocation; those
/// check the alignment and fall to a generic path often enough that an allocation cost 53
/// instructions in HStore's load (callgrind, 37 allocations a key). Every mimalloc block is
/// aligned to at least 8 bytes (block sizes are whole words), so a layout whose alignment is
/// at most 8 is served by `mi_malloc`; a larger alignment still goes to the aligned calls.
#[allow(unsafe_code)]
mod alloc {
    use libmimalloc_sys as mi;
    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::c_void;

    /// The alignment every mimalloc block has.
    const WORD: usize = 8;

    pub struct Mimalloc;

    // SAFETY: each call forwards to mimalloc, whose blocks satisfy `layout` (size, and an
    // alignment of at least `WORD`, or the requested one through the aligned calls);
    // `dealloc`/`realloc` get pointers these calls returned, which `mi_free`/`mi_realloc*`
    // accept whichever entry point made them.
    unsafe impl GlobalAlloc for Mimalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            unsafe {
                if layout.align() <= WORD {
                    mi::mi_malloc(layout.size()) as *mut u8
                } else {
                    mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
                }
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            unsafe {
                if layout.align() <= WORD {
                    mi::mi_zalloc(layout.size()) as *mut u8
                } else {
                    mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
                }
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            unsafe { mi::mi_free(ptr as *mut c_void) }
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            unsafe {
                if layout.align() <= WORD {
                    mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
                } else {
                    mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
                }
            }
        }
    }
}

/// dmkit: indexes on disaggregated memory, in a deterministic RDMA simulator and on hardware.
#[derive(Parser, Debug)]
#[command(name = "dmkit", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure the simulated NIC like perftest's ib_read_bw / ib_write_bw / ib_atomic_bw / ib_read_lat.
    Perftest(PerftestArgs),
    /// Model-check an index: explore schedules, check linearizability and invariants.
    Check(CheckArgs),
    /// Run one experiment: load an index, warm up, measure; print the metric schema.
    Run(Box<RunArgs>),
    /// Join the result files of a sweep's shards (`dmkit run FILE --shard K/N`) in point order.
    Merge(MergeArgs),
    /// Plot results (JSON lines from `dmkit run --out`) as SVG and PNG.
    Plot(PlotArgs),
    /// Reproduce a paper's figures: run their sweeps and set our numbers beside the paper's.
    Reproduce(ReproduceArgs),
    /// Judge a history file (JSON lines, dmkit_verify::history's format) for linearizability:
    /// exit 0 clean, 1 not linearizable (the minimal conflicting operations are printed),
    /// 3 inconclusive (a key's search hit its bound), 2 bad input.
    CheckHistory(CheckHistoryArgs),
    /// Measure loading: wall time per index and key count, each load in a process of its own.
    BenchLoad(BenchLoadArgs),
    /// Fill a hash table (race, cluster) with unique keys until an insert fails; print its load factor.
    Fill(FillArgs),
    /// Serve a memory node on RDMA hardware: register memory, answer the control channel and
    /// the allocator, until SIGINT or SIGTERM (needs a build with --features connectx).
    MemoryNode(MemoryNodeArgs),
    /// Serve a server node on RDMA hardware: register memory, answer the control channel and
    /// calls, and run the services the named index installs on this node (HStore's servers),
    /// until SIGINT or SIGTERM (needs a build with --features connectx).
    ServerNode(ServerNodeArgs),
}

#[derive(Args, Debug)]
struct ServerNodeArgs {
    /// Control-channel address, e.g. 0.0.0.0:7481.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Registered memory: bytes, or with a unit (16GiB, 512MiB, 4096KiB).
    #[arg(long)]
    size: String,
    /// The cluster's token; peers without it are refused.
    #[arg(long)]
    token: String,
    /// This node's id: memory nodes come first, so server node i of a cluster with m memory
    /// nodes is m + i (its [[server_node]] entry in the cluster file).
    #[arg(long)]
    node: u16,
    /// The cluster (experiments/configs/cluster.example.toml): the nodes this node's services
    /// reach, and the memory-node count the index's options follow. Needed with --index.
    #[arg(long)]
    cluster: Option<std::path::PathBuf>,
    /// RDMA device (default: the cluster file's, or the first).
    #[arg(long)]
    device: Option<String>,
    /// The index whose services to run: those it installs on this node. Give the index flags
    /// below as the `dmkit run` processes get them, so that the options agree.
    #[arg(long)]
    index: Option<String>,
    /// The index's named configuration.
    #[arg(long, default_value = "default", requires = "index")]
    config: String,
    /// Workload (its key and value sizes shape the index's options).
    #[arg(long, default_value = "c", requires = "index")]
    workload: String,
    /// Keys loaded before the run.
    #[arg(long, default_value_t = 100_000, requires = "index")]
    keys: u64,
    #[arg(long, requires = "index")]
    value_bytes: Option<usize>,
    #[arg(long, requires = "index")]
    key_bytes: Option<usize>,
    #[arg(long, requires = "index")]
    email_keys: bool,
    #[arg(long, requires = "index")]
    theta: Option<f64>,
    /// The paper's key count for a dense- or mica- workload's Zipfian (see `dmkit run --help`).
    #[arg(long, requires = "index")]
    zipf_items: Option<u64>,
    #[arg(long, requires = "index")]
    cache_bytes: Option<u64>,
    #[arg(long, default_value_t = 8, requires = "index")]
    compute_nodes: u16,
    #[arg(long, default_value_t = 8, requires = "index")]
    threads_per_cn: u32,
    #[arg(long, default_value_t = 1, requires = "index")]
    coroutines: u32,
    #[arg(long, default_value_t = 1, requires = "index")]
    seed: u64,
    /// Also run a diagnostic service under this id: each call's reply is deferred to a worker,
    /// which adds the request's first 8 bytes (a little-endian word) to the word at offset 0 of
    /// this node's memory with a local FAA and answers with the request.
    #[arg(long)]
    echo_service: Option<u16>,
    /// Back the registered memory with 2 MiB huge pages (MAP_HUGETLB; the size is rounded up
    /// to whole pages). Refused, with the number of pages to configure, when fewer are free
    /// (vm.nr_hugepages).
    #[arg(long)]
    hugepages: bool,
}

#[derive(Args, Debug)]
struct MemoryNodeArgs {
    /// Control-channel address, e.g. 0.0.0.0:7471.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Registered memory: bytes, or with a unit (64GiB, 512MiB, 4096KiB).
    #[arg(long)]
    size: String,
    /// The cluster's token; compute nodes without it are refused.
    #[arg(long)]
    token: String,
    /// This memory node's id (its place in cluster.toml).
    #[arg(long, default_value_t = 0)]
    node: u16,
    /// Bytes at the start of the memory the allocator never hands out (indexes' fixed
    /// superblocks), as in the simulator.
    #[arg(long, default_value_t = dmkit_rdma::RESERVED_BYTES)]
    reserved: u64,
    /// RDMA device (default: the first).
    #[arg(long)]
    device: Option<String>,
    /// Back the registered memory with 2 MiB huge pages (MAP_HUGETLB; the size is rounded up
    /// to whole pages). Refused, with the number of pages to configure, when fewer are free
    /// (vm.nr_hugepages).
    #[arg(long)]
    hugepages: bool,
}

/// `64GiB`, `512MiB`, `4096` (bytes): binary units only, so a size is never ambiguous.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("--size '{text}': expected a number of bytes, e.g. 64GiB"))?;
    let shift = match unit {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return Err(format!("--size '{text}': units are B, KiB, MiB, GiB, TiB")),
    };
    n.checked_mul(1 << shift).filter(|&b| b > 0).ok_or_else(|| format!("--size '{text}' is zero or too large"))
}

fn run_memory_node(a: MemoryNodeArgs) -> Result<(), String> {
    let size = parse_size(&a.size)?;
    #[cfg(feature = "connectx")]
    return dmkit_experiments::hardware::memory_node(
        a.listen,
        size,
        &a.token,
        a.node,
        a.reserved,
        a.device.as_deref(),
        a.hugepages,
    );
    #[cfg(not(feature = "connectx"))]
    {
        let _ = (size, a);
        Err(NO_CONNECTX.into())
    }
}

fn run_server_node(a: ServerNodeArgs) -> Result<(), String> {
    use dmkit_experiments::cluster::{ClusterConfig, ServerRole};
    let size = parse_size(&a.size)?;
    if a.token.is_empty() {
        return Err("--token is empty".into());
    }
    let cluster = a.cluster.as_deref().map(ClusterConfig::load).transpose()?;
    if let (Some(c), Some(path)) = (&cluster, &a.cluster) {
        if c.token != a.token {
            return Err(format!("--token differs from the token in {}", path.display()));
        }
        let (m, s) = (c.memory_nodes.len() as u16, c.server_nodes.len() as u16);
        if a.node < m || a.node >= m + s {
            return Err(format!(
                "--node {}: the server nodes of {} are {m}..{} (after its {m} memory nodes)",
                a.node,
                path.display(),
                m + s
            ));
        }
    }
    let role = ServerRole {
        node: a.node,
        listen: a.listen,
        memory_bytes: size,
        echo_service: a.echo_service,
        hugepages: a.hugepages,
    };
    let Some(index) = &a.index else {
        #[cfg(feature = "connectx")]
        return dmkit_experiments::hardware::server_node(&role, &a.token, a.device.as_deref(), cluster.as_ref());
        #[cfg(not(feature = "connectx"))]
        return Err(NO_CONNECTX.into());
    };
    let Some(mut cluster) = cluster else {
        return Err("--index needs --cluster: the index's options follow the cluster's memory nodes, \
                    and its services reach the other nodes"
            .into());
    };
    // The index's options come from the same path as `dmkit run`'s (a run file), so that they
    // agree with the compute processes'.
    let mut file = toml::Table::new();
    let int =
        |v: u64, flag: &str| i64::try_from(v).map(toml::Value::Integer).map_err(|_| format!("{flag} {v} is too large"));
    file.insert("index".into(), index.clone().into());
    file.insert("config".into(), a.config.clone().into());
    file.insert("workload".into(), a.workload.clone().into());
    file.insert("keys".into(), int(a.keys, "--keys")?);
    file.insert("email_keys".into(), a.email_keys.into());
    file.insert("memory_nodes".into(), (cluster.memory_nodes.len() as i64).into());
    file.insert("compute_nodes".into(), (a.compute_nodes as i64).into());
    file.insert("threads_per_cn".into(), (a.threads_per_cn as i64).into());
    file.insert("coroutines".into(), (a.coroutines as i64).into());
    file.insert("seed".into(), int(a.seed, "--seed")?);
    if let Some(v) = a.value_bytes {
        file.insert("value_bytes".into(), int(v as u64, "--value-bytes")?);
    }
    if let Some(v) = a.key_bytes {
        file.insert("key_bytes".into(), int(v as u64, "--key-bytes")?);
    }
    if let Some(v) = a.theta {
        file.insert("theta".into(), v.into());
    }
    if let Some(v) = a.zipf_items {
        file.insert("zipf_items".into(), int(v, "--zipf-items")?);
    }
    if let Some(v) = a.cache_bytes {
        file.insert("cache_bytes".into(), int(v, "--cache-bytes")?);
    }
    let requests = dmkit_experiments::run::RunFile::parse(&file.to_string())?.requests()?;
    if a.device.is_some() {
        cluster.device = a.device.clone();
    }
    cluster.server = Some(role);
    // A run file without a sweep is one run.
    let mut request = requests.into_iter().next().ok_or("no run")?;
    request.setup.cluster = Some(std::sync::Arc::new(cluster));
    #[cfg(feature = "connectx")]
    return dmkit_experiments::run::run_request(&request).map(|_| ());
    #[cfg(not(feature = "connectx"))]
    {
        let _ = request;
        Err(NO_CONNECTX.into())
    }
}

/// Why a hardware command cannot run in this build.
#[cfg(not(feature = "connectx"))]
const NO_CONNECTX: &str = "this dmkit was built without the real RDMA backend: \
    scripts/setup.sh --rdma && cargo build --release --features connectx";

#[derive(Args, Debug)]
struct BenchLoadArgs {
    /// Indexes, each NAME or NAME:CONFIG (comma list; default: every index). `host-btree` and
    /// `host-hashmap` load the same items into the host's own BTreeMap or HashMap, with no
    /// simulator: how much of a load's growth with the key count the host's caches make.
    #[arg(long, value_delimiter = ',')]
    index: Option<Vec<String>>,
    /// Key counts (comma list).
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    keys: Vec<u64>,
    /// Workload whose key and value sizes are loaded.
    #[arg(long, default_value = "c")]
    workload: String,
    #[arg(long, default_value_t = 1)]
    memory_nodes: u16,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output: a table, or one JSON object per load.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Loads of each point, each in a fresh process: the row gives their median, fastest and
    /// slowest (a short load's wall time varies by tens of percent between runs).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Measure one load in this process and print it as JSON (what each child process runs).
    #[arg(long, hide = true)]
    child: bool,
}

#[derive(Args, Debug)]
struct FillArgs {
    /// A fixed-size hash table (`IndexKind::fixed_table`): race, cluster or probe.
    #[arg(long)]
    index: String,
    /// Slots per bucket (default: 7 for race, 8 for cluster and probe).
    #[arg(long)]
    slots: Option<u32>,
    /// race: bucket groups in its one subtable; cluster: main buckets; probe: groups of
    /// `--slots` slots.
    #[arg(long, default_value_t = 4096)]
    size: u64,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    #[arg(long, default_value_t = 32)]
    value_bytes: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args, Debug)]
struct ReproduceArgs {
    /// Paper (a folder of figure files), or `all`: every paper's figures and a fidelity summary
    /// (results/fidelity.md and .json).
    paper: String,
    /// One figure (default: all of the paper's).
    figure: Option<String>,
    /// reduced (minutes) or full.
    #[arg(long, default_value = "reduced")]
    scale: String,
    /// Folder of figure files.
    #[arg(long, default_value = dmkit_experiments::reproduce::FIGURES_DIR)]
    figures: std::path::PathBuf,
    /// Output folder (default: results/PAPER/FIGURE; with `all`, results/).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Judge the results an earlier run left in the output folders again (report, plots,
    /// fidelity summary) instead of running.
    #[arg(long)]
    rejudge: bool,
    /// Exit with 1 when a number falls outside its figure's tolerance or is missing (without
    /// it, `reproduce` exits 0 whenever it ran: the report says what matched).
    #[arg(long)]
    strict: bool,
    /// Run a figure whose estimated host memory exceeds 90% of this machine's (refused
    /// before it starts otherwise).
    #[arg(long)]
    force: bool,
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// Results: JSON lines, one run per line (e.g. results/result.jsonl).
    results: std::path::PathBuf,
    /// Output path without extension: writes OUT.svg and OUT.png.
    #[arg(long)]
    out: std::path::PathBuf,
    /// Field on the x axis (default: a throughput-latency curve).
    #[arg(long)]
    x: Option<String>,
    /// Field on the y axis.
    #[arg(long)]
    y: Option<String>,
    /// Fields whose values name a series (comma list).
    #[arg(long, value_delimiter = ',')]
    series: Option<Vec<String>>,
    /// Field that orders a series' points (default: clients for throughput-latency, else x).
    #[arg(long)]
    order_by: Option<String>,
    #[arg(long)]
    title: Option<String>,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// A run file (TOML, with an optional [sweep]); instead of the flags below.
    file: Option<std::path::PathBuf>,
    /// Index to run.
    #[arg(long, required_unless_present = "file", conflicts_with = "file")]
    index: Option<String>,
    /// The index's named configuration (sherman: sherman-fixed, sherman-smart, ...; smart: smart,
    /// smart-paper, smart-rd, smart-rearlock, smart-inplace, smart-lockfree; art: art), with
    /// overrides after commas for chime (chime,hood=4,span=128) and smart/art
    /// (smart-paper,rdwc_slots=128,cache_mb=100).
    #[arg(long, default_value = "default", conflicts_with = "file")]
    config: String,
    /// Workload: YCSB a, b, c, d, e, f, or load (inserts of fresh keys after the --keys loaded);
    /// crud, delete-heavy; db_bench's db-put, db-get, db-scan; dense-<letter> (dense ordered keys,
    /// unscrambled Zipfian: Dolphin's artifact) or mica-<letter> (MICA's Zipfian over the loaded
    /// keys: SMART's generated workloads).
    #[arg(long, default_value = "c", conflicts_with = "file")]
    workload: String,
    /// Keys loaded before the run (record count).
    #[arg(long, default_value_t = 100_000, conflicts_with = "file")]
    keys: u64,
    /// Bytes per value (default: the workload's).
    #[arg(long, conflicts_with = "file")]
    value_bytes: Option<usize>,
    /// Bytes per key, 8..=256 (default 8-byte integers; other sizes pad the integer).
    #[arg(long, conflicts_with = "file")]
    key_bytes: Option<usize>,
    /// E-mail-like string keys (of --key-bytes, default 32).
    #[arg(long, conflicts_with = "file")]
    email_keys: bool,
    /// Skew θ of the workload's Zipfian or latest distribution.
    #[arg(long, conflicts_with = "file")]
    theta: Option<f64>,
    /// For a dense- or mica- workload (MICA's unscrambled Zipfian, rank r is key r): draw the
    /// ranks over this many keys, a paper's key count, and fold those past the loaded keys onto
    /// them, so the hottest keys draw the shares they drew at the paper's scale (default: the
    /// loaded keys).
    #[arg(long, conflicts_with = "file")]
    zipf_items: Option<u64>,
    /// Load the keys in a fixed pseudo-random order instead of key-number order (dense keys
    /// ascending, hashed keys in hash order): for footprints that depend on insertion order.
    #[arg(long, conflicts_with = "file")]
    shuffle_load: bool,
    /// The index's cache budget per compute node, in bytes.
    #[arg(long, conflicts_with = "file")]
    cache_bytes: Option<u64>,
    /// Operations per client (the warm-up's included), instead of --duration-us; the measured
    /// window ends when the first client is done, so every client runs throughout it
    #[arg(long, conflicts_with_all = ["file", "duration_us"])]
    ops_per_client: Option<u64>,
    /// LOAD: insert this many fresh keys in all, then stop (a fixed window, as the papers'
    /// insert phases); hash tables are sized for --keys plus these, with any workload
    #[arg(long, conflicts_with_all = ["file", "duration_us", "ops_per_client"])]
    inserts: Option<u64>,
    /// NIC profile: an embedded name (cx6-100g, cx5-100g) or a TOML file.
    #[arg(long, default_value = "cx6-100g", conflicts_with = "file")]
    profile: String,
    #[arg(long, default_value_t = 8, conflicts_with = "file")]
    compute_nodes: u16,
    #[arg(long, default_value_t = 1, conflicts_with = "file")]
    memory_nodes: u16,
    /// Threads per compute node (each a serial CPU).
    #[arg(long, default_value_t = 8, conflicts_with = "file")]
    threads_per_cn: u32,
    /// Clients (coroutines) per thread.
    #[arg(long, default_value_t = 1, conflicts_with = "file")]
    coroutines: u32,
    /// Total clients, instead of --threads-per-cn: spread evenly over the compute nodes.
    #[arg(long, conflicts_with = "file")]
    clients: Option<u32>,
    /// How keys are loaded: bulk (no simulated time) or insert (timed, not measured).
    #[arg(long, default_value = "bulk", conflicts_with = "file")]
    load: String,
    /// With --duration-us: the fixed warm-up (default 100). Without: the least warm-up before
    /// the steady-state analysis starts (default 0; MSER-5 truncation finds the rest).
    #[arg(long, conflicts_with = "file")]
    warmup_us: Option<u64>,
    /// Measure this fixed window instead of running to steady state (no convergence test;
    /// `steady` then reports the trend test alone).
    #[arg(long, conflicts_with = "file")]
    duration_us: Option<u64>,
    /// Steady state: stop when the 95% interval of mean throughput is within this fraction of
    /// the mean (and the series shows no trend), in (0, 1).
    #[arg(long, conflicts_with_all = ["file", "duration_us"])]
    precision: Option<f64>,
    /// Steady state: the cap on simulated time, warm-up included (default 1000000 = 1 s). A
    /// run that reaches it unconverged is reported as not steady, with the reason.
    #[arg(long, conflicts_with_all = ["file", "duration_us"])]
    max_duration_us: Option<u64>,
    /// Tick of the throughput series the measurement is judged on, in microseconds.
    #[arg(long, default_value_t = 10, conflicts_with = "file")]
    tick_us: u64,
    #[arg(long, default_value_t = 1, conflicts_with = "file")]
    seed: u64,
    /// Write every operation of the run (one run only) as a history in JSON lines, for any
    /// linearizability checker (format: dmkit_verify::history).
    #[arg(long)]
    export_history: Option<std::path::PathBuf>,
    /// Judge the history of the whole run (one run only; the loaded keys are its initial
    /// contents) for linearizability: exit 1 with the minimal conflicting operations if it is
    /// not linearizable, 3 if the check is inconclusive.
    #[arg(long)]
    check: bool,
    /// Run even if the estimated host memory exceeds 90% of this machine's (refused before
    /// loading otherwise, with the estimate).
    #[arg(long)]
    force: bool,
    /// Add a throughput time series with this interval (microseconds) to the JSON.
    #[arg(long, default_value_t = 0, conflicts_with = "file")]
    timeseries_us: u64,
    /// Crash this server node of the index (0-based among its server nodes; HStore: 0 is the
    /// hash-table server, 1 the skiplist server) during the run (simulator only).
    #[arg(long, conflicts_with = "file")]
    crash_server: Option<u16>,
    /// When the crash comes, from the start of the warm-up.
    #[arg(long, default_value_t = 0, conflicts_with = "file")]
    crash_at_us: u64,
    /// The crashed server restarts (empty, and recovers) this long after the crash.
    #[arg(long, conflicts_with = "file")]
    restart_after_us: Option<u64>,
    /// What each compute node's caches hold before the run: whole (every internal node the
    /// budget holds), load-share (compute node c of C: the paths of every C-th loaded item
    /// from the c-th, what it would have read loading its share, as CHIME's Fig. 14 measures)
    /// or load-replay (the same share's searches put through the cache in load order, with its
    /// budget, eviction and charge).
    #[arg(long, default_value = "whole", conflicts_with = "file")]
    warm: String,
    /// Where to run: sim (the simulator) or rdma (hardware; needs --cluster and a build with
    /// --features connectx). On rdma, times are wall-clock time.
    #[arg(long, default_value = "sim")]
    backend: String,
    /// The hardware cluster (see experiments/configs/cluster.example.toml).
    #[arg(long)]
    cluster: Option<std::path::PathBuf>,
    /// Output: a table, or the JSON object of the metric schema.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Also write result.jsonl and result.csv into this directory.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// With a run file: run only shard K of N (1 <= K <= N), every N-th point of the sweep
    /// from point K in file order; join the shards' result.jsonl with `dmkit merge`.
    #[arg(long, requires = "file")]
    shard: Option<String>,
}

#[derive(Args, Debug)]
struct MergeArgs {
    /// result.jsonl files of the shards of one sweep (`dmkit run FILE --shard K/N --out DIR`).
    #[arg(required = true)]
    results: Vec<std::path::PathBuf>,
    /// Where to write the joined result.jsonl and result.csv.
    #[arg(long)]
    out: std::path::PathBuf,
}

#[derive(Args, Debug)]
struct CheckHistoryArgs {
    /// The history: JSON lines, one operation per line (`dmkit run --export-history` writes it).
    /// Several files are judged as one history (the compute processes of one hardware run,
    /// each of which exports its own clients' operations).
    #[arg(required = true)]
    files: Vec<std::path::PathBuf>,
    /// Whether the index supports scans: `auto` takes a scan that failed as unsupported to mean
    /// a hash index, `yes` and `no` decide (a successful scan on an index without them, or an
    /// unsupported one on an index with them, is a violation).
    #[arg(long, default_value = "auto", value_parser = ["auto", "yes", "no"])]
    scans: String,
    /// Configurations one key's search may explore before the verdict is inconclusive.
    #[arg(long, default_value_t = dmkit_verify::linearizability::DEFAULT_MAX_STATES_PER_KEY)]
    max_states_per_key: u64,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Index to check (see --list-indexes).
    #[arg(long, required_unless_present = "list_indexes")]
    index: Option<String>,
    /// List the indexes `dmkit check` knows, one per line, and exit (scripts loop over these).
    #[arg(long)]
    list_indexes: bool,
    /// Checking preset (default: the index's first).
    #[arg(long)]
    preset: Option<String>,
    /// Named configuration of the index (Sherman: sherman-fixed, sherman-artifact, ...; SMART:
    /// smart, smart-rd, smart-rearlock, ...), with the preset's small nodes.
    #[arg(long)]
    config: Option<String>,
    /// Override the preset's number of clients.
    #[arg(long)]
    clients: Option<u32>,
    /// Wall-clock budget, split between random, PCT and PCT with queue-pair actors unless --mode
    /// is given.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Exploration strategy: random, pct (depth 3) or dfs (two preemptions, sleep sets).
    #[arg(long)]
    mode: Option<String>,
    /// Seed of the exploration and of the clients' operations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Remove the named protection (see --list-plants).
    #[arg(long)]
    plant: Option<String>,
    /// List the index's planted bugs and exit.
    #[arg(long)]
    list_plants: bool,
    /// List the index's race handlers (the branches that handle a race: re-checks, retries,
    /// waits) and the event each counts, and exit.
    #[arg(long)]
    list_race_handlers: bool,
    /// Run every preset for --seconds each and report which race handlers each reached; exit 1
    /// if a preset fails or a handler ran in none.
    #[arg(long)]
    coverage: bool,
    /// Run every preset of the index's option-space sweep (options at their extremes, more
    /// operations per client) for --seconds each, going on after a violation; exit 1 if any
    /// fails or is vacuous.
    #[arg(long, conflicts_with = "coverage")]
    sweep: bool,
    /// List the index's presets and its sweep presets with their shapes and options, and exit.
    #[arg(long)]
    list_presets: bool,
    /// Run one schedule again, from the string a failure printed.
    #[arg(long)]
    replay: Option<String>,
    /// Stop after this many schedules per mode.
    #[arg(long, default_value_t = u64::MAX)]
    max_schedules: u64,
    /// Write the history of the failing (or last) run as JSON lines.
    #[arg(long)]
    export_history: Option<std::path::PathBuf>,
    /// Schedule each queue pair's verbs as their own actor: PCT and DFS can then hold back one
    /// QP's verbs (an unawaited WRITE) while its client goes on over another QP.
    #[arg(long)]
    qp_actors: bool,
    /// Fail this many READs in every run, on a node that keeps its memory (a transient
    /// transport error: the verb completes with Timeout); the explorer places each failure.
    /// Added to the preset's own faults.
    #[arg(long, default_value_t = 0)]
    read_failures: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Args, Debug)]
struct PerftestArgs {
    /// Verb to issue: read, write, cas, faa, masked-cas, masked-faa or call.
    #[arg(long, default_value = "read")]
    verb: dmkit_sim::VerbKind,
    /// Bytes per READ or WRITE (atomics are always 8).
    #[arg(long, default_value_t = 64)]
    bytes: u64,
    /// Total clients; a comma list sweeps (e.g. 1,8,64,256).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    clients: Vec<u32>,
    /// Compute nodes the clients are spread over, round-robin.
    #[arg(long, default_value_t = 8)]
    compute_nodes: u16,
    /// Memory nodes; each client sends its batches to them in turn.
    #[arg(long, default_value_t = 1)]
    memory_nodes: u16,
    /// Host DRAM or the NIC's device memory.
    #[arg(long, value_enum, default_value = "host")]
    region: PerfRegion,
    /// Draw targets from this many 8-byte words on separate lines (RMW contention); 0 spreads them.
    #[arg(long, default_value_t = 0)]
    hot_addresses: u64,
    /// Verbs per doorbell batch.
    #[arg(long, default_value_t = 1)]
    batch: u32,
    /// First byte of the region the clients use.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Bytes of each memory node the clients spread over (0: 64 MiB of host, or all device memory).
    #[arg(long, default_value_t = 0)]
    span_bytes: u64,
    /// NIC profile: an embedded name (cx6-100g, cx5-100g) or a TOML file.
    #[arg(long, default_value = "cx6-100g")]
    profile: String,
    /// Seed of the run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual warm-up before measuring, in microseconds.
    #[arg(long, default_value_t = 200)]
    warmup_us: u64,
    /// Virtual measurement window, in microseconds.
    #[arg(long, default_value_t = 2000)]
    duration_us: u64,
    /// `--verb call`: RPC threads of the server node running the echo service.
    #[arg(long, default_value_t = 1)]
    server_threads: u16,
    /// `--verb call`: CPU nanoseconds the echo handler spends per request.
    #[arg(long, default_value_t = 1000)]
    handler_ns: u64,
    /// Output: a table, or one JSON object per point (JSON lines).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's message and the valid values, without its usage block.
            let text = e.to_string();
            let line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            eprintln!("{}", line.join(" "));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Perftest(args) => run_perftest(args).map(|()| ExitCode::SUCCESS),
        Command::Check(args) => run_check(args),
        Command::Run(args) => run_run(*args),
        Command::CheckHistory(args) => run_check_history(args),
        Command::Plot(args) => run_plot(args).map(|()| ExitCode::SUCCESS),
        Command::Merge(args) => run_merge(args).map(|()| ExitCode::SUCCESS),
        Command::Reproduce(args) => run_reproduce(args),
        Command::MemoryNode(a) => run_memory_node(a).map(|()| ExitCode::SUCCESS),
        Command::ServerNode(a) => run_server_node(a).map(|()| ExitCode::SUCCESS),
        Command::BenchLoad(a) => run_bench_load(a).map(|()| ExitCode::SUCCESS),
        Command::Fill(a) => {
            let req = dmkit_experiments::fill::FillRequest {
                index: a.index,
                slots: a.slots,
                size: a.size,
                key_bytes: a.key_bytes,
                value_bytes: a.value_bytes,
                seed: a.seed,
            };
            dmkit_experiments::fill::fill(&req).map(|r| {
                println!(
                    "{}: first insertion failure after {} items in {} slots: load factor {:.3}",
                    r.index, r.stored, r.capacity, r.load_factor
                );
                ExitCode::SUCCESS
            })
        }
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run_run(a: RunArgs) -> Result<ExitCode, String> {
    use dmkit_experiments::run::{self, RunFile, RunRequest};
    run::force_memory(a.force);
    // A run file's points are numbered in file order, under a digest of the file's settings.
    let mut sweep_of: Option<(String, usize)> = None;
    let requests: Vec<RunRequest> = match &a.file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let file = RunFile::parse(&text)?;
            let requests = file.requests()?;
            sweep_of = Some((file.digest(), requests.len()));
            requests
        }
        None => {
            // The flags are a run file without a sweep: one path turns both into requests.
            let threads_per_cn = match a.clients {
                Some(0) => return Err("--clients must be positive".into()),
                Some(c) => {
                    let per_thread_group = a.compute_nodes as u32 * a.coroutines;
                    if per_thread_group == 0 || c % per_thread_group != 0 {
                        return Err(format!(
                            "--clients {c} does not spread evenly over {} compute nodes x {} coroutines",
                            a.compute_nodes, a.coroutines
                        ));
                    }
                    c / per_thread_group
                }
                None => a.threads_per_cn,
            };
            let file = RunFile {
                index: a.index.clone().expect("clap requires --index without a file"),
                config: a.config.clone(),
                workload: a.workload.clone(),
                keys: a.keys,
                value_bytes: a.value_bytes,
                key_bytes: a.key_bytes,
                email_keys: a.email_keys,
                theta: a.theta,
                zipf_items: a.zipf_items,
                shuffle_load: a.shuffle_load,
                ops_per_client: a.ops_per_client,
                inserts: a.inserts,
                cache_bytes: a.cache_bytes,
                profile: a.profile.clone(),
                compute_nodes: a.compute_nodes,
                memory_nodes: a.memory_nodes,
                threads_per_cn,
                coroutines: a.coroutines,
                load: a.load.clone(),
                warmup_us: a.warmup_us,
                duration_us: a.duration_us,
                precision: a.precision,
                max_duration_us: a.max_duration_us,
                tick_us: Some(a.tick_us),
                seed: a.seed,
                timeseries_us: a.timeseries_us,
                crash_server: a.crash_server,
                crash_at_us: a.crash_at_us,
                restart_after_us: a.restart_after_us,
                warm: a.warm.clone(),
                sweep: Default::default(),
            };
            let mut requests = file.requests()?;
            for r in &mut requests {
                r.setup.record_history = a.export_history.is_some() || a.check;
            }
            requests
        }
    };
    if (a.export_history.is_some() || a.check) && a.file.is_some() {
        return Err("--export-history and --check take one run, not a run file".into());
    }
    if a.check && a.backend == "rdma" && a.compute_nodes > 1 {
        return Err("--check on --backend rdma judges one process's clients, which with several compute nodes is \
                    part of the history: --export-history in each process, then dmkit check-history FILE..."
            .into());
    }
    let (shard, shards) = match &a.shard {
        None => (1, 1),
        Some(text) => run::parse_shard(text)?,
    };
    let numbered: Vec<(usize, RunRequest)> =
        requests.into_iter().enumerate().filter(|(i, _)| i % shards == shard - 1).collect();
    if numbered.is_empty() {
        return Err(format!("shard {shard}/{shards} has no points (the sweep has fewer than {shard})"));
    }
    let (points, requests): (Vec<usize>, Vec<RunRequest>) = numbered.into_iter().unzip();
    for note in run::key_space_notes(&requests) {
        eprintln!("{note}");
    }
    #[cfg_attr(not(feature = "connectx"), allow(unused_mut))]
    let mut requests = requests;
    let threads = match (a.backend.as_str(), &a.cluster) {
        ("sim", None) => sweep::default_threads(),
        ("sim", Some(_)) => return Err("--cluster is for --backend rdma".into()),
        ("rdma", None) => return Err("--backend rdma needs --cluster cluster.toml".into()),
        ("rdma", Some(path)) => {
            #[cfg(not(feature = "connectx"))]
            {
                let _ = path;
                return Err(NO_CONNECTX.into());
            }
            #[cfg(feature = "connectx")]
            {
                let cluster = std::sync::Arc::new(dmkit_experiments::cluster::ClusterConfig::load(path)?);
                for r in &mut requests {
                    r.setup.cluster = Some(cluster.clone());
                }
                // One run at a time on the hardware.
                1
            }
        }
        (other, _) => return Err(format!("--backend is sim or rdma, not '{other}'")),
    };
    let threads = dmkit_experiments::run::check_memory(&requests, threads)?;
    // Independent runs go on every core; results come back in file order.
    let results = run::run_requests(&requests, threads, "dmkit run");
    let mut results: Vec<_> = results.into_iter().collect::<Result<_, _>>()?;
    if let Some((digest, total)) = &sweep_of {
        for (r, &p) in results.iter_mut().zip(&points) {
            (r.sweep, r.point, r.points) = (Some(digest.clone()), Some(p), Some(*total));
        }
    }
    let lines: Vec<String> =
        results.iter().map(serde_json::to_string).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    match a.format {
        Format::Table => print!("{}", run::table(&results)),
        Format::Json => lines.iter().for_each(|l| println!("{l}")),
    }
    if let (Some(path), Some(history)) = (&a.export_history, results.first().and_then(|r| r.history.as_ref())) {
        std::fs::write(path, history.to_json_lines()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("history of {} operations written to {}", history.records.len(), path.display());
    }
    let mut code = ExitCode::SUCCESS;
    if a.check {
        let r = results.first().ok_or("no run to check")?;
        let history = r.history.as_ref().ok_or("internal: the run recorded no history")?;
        // In the simulator with no crash, a transport error has no cause but the index.
        let faultless = a.backend == "sim" && a.crash_server.is_none();
        code = match history.unexplained_transport_error().filter(|_| faultless) {
            Some(violation) => {
                println!("history: {} operations: NOT CLEAN: {violation}", history.records.len());
                ExitCode::from(1)
            }
            None => judge_history(history, r.supports_scan, &Default::default()),
        };
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let jsonl: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.join("result.jsonl"), jsonl).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("result.csv"), run::csv(&results)).map_err(|e| e.to_string())?;
        eprintln!("wrote {}/result.jsonl and result.csv", dir.display());
    }
    Ok(code)
}

/// Judges `history` and prints the verdict: exit 0 clean, 1 not linearizable, 3 inconclusive.
fn judge_history(
    history: &dmkit_verify::history::History,
    scans_supported: bool,
    options: &dmkit_verify::linearizability::CheckOptions,
) -> ExitCode {
    let started = std::time::Instant::now();
    let verdict = dmkit_verify::linearizability::check_with(history, scans_supported, options);
    let took = started.elapsed().as_secs_f64();
    let n = history.records.len();
    match verdict {
        Ok(report) => {
            println!(
                "history: {n} operations, {} keys: linearizable ({} judged, {} constrained nothing; {} \
                 configurations, at most {} on one key; {took:.1} s)",
                report.keys_checked,
                report.operations_checked,
                report.operations_skipped,
                report.states_explored,
                report.max_states_one_key
            );
            if report.ambiguous_program_order > 0 {
                println!(
                    "  note: at {} instants two clients each returned and invoked on one key, so program order \
                     there was not imposed (judged concurrent; see dmkit_verify::history)",
                    report.ambiguous_program_order
                );
            }
            ExitCode::SUCCESS
        }
        Err(v) if v.is_inconclusive() => {
            println!("history: {n} operations: INCONCLUSIVE ({took:.1} s)\n{v}");
            ExitCode::from(3)
        }
        Err(v) => {
            println!("history: {n} operations: NOT LINEARIZABLE ({took:.1} s)\n{v}");
            ExitCode::from(1)
        }
    }
}

fn run_check_history(a: CheckHistoryArgs) -> Result<ExitCode, String> {
    use dmkit_indexes::IndexError;
    use dmkit_indexes::spec::{Op, Outcome};
    let mut history = dmkit_verify::history::History::default();
    for file in &a.files {
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let part =
            dmkit_verify::history::History::from_json_lines(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        history.records.extend(part.records);
    }
    let scans_supported = match a.scans.as_str() {
        "yes" => true,
        "no" => false,
        _ => !history.records.iter().any(|r| {
            matches!((&r.op, &r.outcome), (Op::Scan { .. }, Outcome::Failed(IndexError::Unsupported(what)))
                if *what != dmkit_verify::linearizability::RECORDED_NO_OP)
        }),
    };
    if a.max_states_per_key == 0 {
        return Err("--max-states-per-key must be at least 1".into());
    }
    let options =
        dmkit_verify::linearizability::CheckOptions { max_states_per_key: a.max_states_per_key, ..Default::default() };
    Ok(judge_history(&history, scans_supported, &options))
}

fn run_bench_load(a: BenchLoadArgs) -> Result<(), String> {
    use dmkit_experiments::bench::{self, LoadBench};
    use dmkit_experiments::run::RunFile;
    let indexes = a
        .index
        .clone()
        .unwrap_or_else(|| dmkit_experiments::run::index_names().into_iter().map(String::from).collect());
    let request = |index: &str, keys: u64| -> Result<dmkit_experiments::run::RunRequest, String> {
        let (index, config) = index.split_once(':').unwrap_or((index, "default"));
        // A host reference loads the items a real index's request generates.
        let (index, config) = if bench::HOST_REFERENCES.contains(&index) {
            (bench::HOST_REFERENCE_ITEMS_FROM, "default")
        } else {
            (index, config)
        };
        let mut file = toml::Table::new();
        file.insert("index".into(), index.into());
        file.insert("config".into(), config.into());
        file.insert("workload".into(), a.workload.clone().into());
        file.insert("keys".into(), i64::try_from(keys).map_err(|_| "--keys too large")?.into());
        file.insert("memory_nodes".into(), (a.memory_nodes as i64).into());
        file.insert("compute_nodes".into(), 1i64.into());
        file.insert("threads_per_cn".into(), 1i64.into());
        file.insert("seed".into(), i64::try_from(a.seed).map_err(|_| "--seed too large")?.into());
        RunFile::parse(&file.to_string())?.requests()?.into_iter().next().ok_or_else(|| "no run".into())
    };
    if a.child {
        let (index, keys) = match (indexes.as_slice(), a.keys.as_slice()) {
            ([i], [k]) => (i, *k),
            _ => return Err("bench-load --child measures one index at one key count".into()),
        };
        let r = if bench::HOST_REFERENCES.contains(&index.as_str()) {
            bench::measure_host(index, &request(index, keys)?)?
        } else {
            bench::measure(&request(index, keys)?)?
        };
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    if a.keys.contains(&0) {
        return Err("--keys must be positive".into());
    }
    if a.repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    // A bad index or configuration is one line, before any load runs.
    let checked = indexes.iter().map(|index| request(index, 1)).collect::<Result<Vec<_>, _>>()?;
    for note in dmkit_experiments::run::key_space_notes(&checked) {
        eprintln!("{note}");
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the dmkit binary: {e}"))?;
    let mut rows: Vec<LoadBench> = Vec::new();
    for index in &indexes {
        for &keys in &a.keys {
            let mut runs = Vec::new();
            for i in 0..a.repeat {
                let of = if a.repeat > 1 { format!(" ({} of {})", i + 1, a.repeat) } else { String::new() };
                eprintln!("bench-load: {index} with {keys} keys{of} ...");
                let out = std::process::Command::new(&exe)
                    .args(["bench-load", "--child", "--index", index, "--keys", &keys.to_string()])
                    .args(["--workload", &a.workload, "--memory-nodes", &a.memory_nodes.to_string()])
                    .args(["--seed", &a.seed.to_string()])
                    .output()
                    .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
                if !out.status.success() {
                    return Err(format!(
                        "{index} with {keys} keys: {}",
                        String::from_utf8_lossy(&out.stderr).trim().trim_start_matches("error: ")
                    ));
                }
                let r = serde_json::from_slice::<LoadBench>(&out.stdout).map_err(|e| format!("{index}: {e}"))?;
                // Each load's result as it lands: the table comes only at the end of the sweep.
                eprintln!(
                    "bench-load: {index} with {keys} keys{of}: {:.2} s, {:.2} us/key, peak {}",
                    r.load_s,
                    r.us_per_key,
                    r.peak_rss_bytes.map_or("-".into(), |b| format!("{:.0} MB", b as f64 / 1e6))
                );
                runs.push(r);
            }
            let r = bench::combine(runs)?;
            if a.format == Format::Json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            }
            rows.push(r);
        }
    }
    if a.format == Format::Table {
        print!("{}", bench::table(&rows));
    }
    Ok(())
}

fn run_merge(a: MergeArgs) -> Result<(), String> {
    use dmkit_experiments::run;
    let mut results = Vec::new();
    for path in &a.results {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let r: run::RunResult = serde_json::from_str(line)
                .map_err(|e| format!("{} line {}: not a dmkit result: {e}", path.display(), i + 1))?;
            results.push((path.clone(), r));
        }
    }
    let merged = run::merge(results)?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let lines: Vec<String> =
        merged.iter().map(serde_json::to_string).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    std::fs::write(a.out.join("result.jsonl"), lines.iter().map(|l| format!("{l}\n")).collect::<String>())
        .map_err(|e| e.to_string())?;
    std::fs::write(a.out.join("result.csv"), run::csv(&merged)).map_err(|e| e.to_string())?;
    eprintln!("merged {} points into {}/result.jsonl and result.csv", merged.len(), a.out.display());
    Ok(())
}

fn run_plot(a: PlotArgs) -> Result<(), String> {
    use dmkit_experiments::plot::{self, PlotSpec};
    let text = std::fs::read_to_string(&a.results).map_err(|e| format!("cannot read {}: {e}", a.results.display()))?;
    let rows = plot::read_results(&text).map_err(|e| format!("{}: {e}", a.results.display()))?;
    let mut spec = PlotSpec::throughput_latency();
    if a.x.is_some() || a.y.is_some() {
        spec.order_by = None;
        spec.title = format!("{} vs {}", a.y.as_deref().unwrap_or(&spec.y), a.x.as_deref().unwrap_or(&spec.x));
    }
    if let Some(x) = a.x {
        spec.x = x;
    }
    if let Some(y) = a.y {
        spec.y = y;
    }
    if let Some(s) = a.series {
        spec.series = s;
    }
    if a.order_by.is_some() {
        spec.order_by = a.order_by;
    }
    if let Some(t) = a.title {
        spec.title = t;
    }
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    plot::plot(&rows, &spec, &a.out)?;
    eprintln!("wrote {} and {}", a.out.with_extension("svg").display(), a.out.with_extension("png").display());
    Ok(())
}

fn run_reproduce(a: ReproduceArgs) -> Result<ExitCode, String> {
    use dmkit_experiments::reproduce::{self, Figure};
    dmkit_experiments::run::force_memory(a.force);
    let all = a.paper == "all";
    if all && a.figure.is_some() {
        return Err("reproduce all takes no figure name".into());
    }
    let papers = if all { reproduce::papers(&a.figures)? } else { vec![a.paper.clone()] };
    // Every figure file is read and checked before the first run starts.
    let mut figures = Vec::new();
    for paper in &papers {
        for file in reproduce::figure_files(&a.figures, paper, if all { None } else { a.figure.as_deref() })? {
            let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let figure = Figure::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
            if a.scale != "reduced" && a.scale != "full" {
                return Err(format!("--scale must be reduced or full, got '{}'", a.scale));
            }
            figures.push(figure);
        }
    }
    let root = a.out.clone().unwrap_or_else(|| std::path::PathBuf::from("results"));
    let started = std::time::Instant::now();
    let mut outside = 0;
    let mut outcomes = Vec::new();
    let mut not_run = Vec::new();
    for (i, figure) in figures.iter().enumerate() {
        let out = match (&a.out, all) {
            (Some(o), false) if figures.len() == 1 => o.clone(),
            _ => root.join(&figure.paper).join(&figure.figure),
        };
        // Judging again everything that was run: a figure never run (at this scale) is listed,
        // not an error, so a summary of the full-scale figures run so far can be made.
        if all && a.rejudge && !out.join("result.jsonl").exists() {
            eprintln!(
                "dmkit: {} {}: no results in {} (not run at this scale)",
                figure.paper,
                figure.figure,
                out.display()
            );
            not_run.push(format!("{} {}", figure.paper, figure.figure));
            continue;
        }
        eprintln!("dmkit: figure {}/{}: {} {} ...", i + 1, figures.len(), figure.paper, figure.figure);
        let outcome = reproduce::judge_figure(figure, &a.scale, &out, sweep::default_threads(), a.rejudge)?;
        print!("{}", outcome.report);
        eprintln!("wrote {} ({:.0} s)", out.display(), outcome.wall_s);
        outside += outcome.failures;
        outcomes.push((format!("{} {}", figure.paper, figure.figure), outcome));
    }
    if all {
        let (mut md, json) = reproduce::fidelity(&outcomes, &a.scale);
        if !not_run.is_empty() {
            md.push_str(&format!("\nNot run at this scale (no results to judge): {}.\n", not_run.join(", ")));
        }
        std::fs::create_dir_all(&root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        std::fs::write(root.join("fidelity.md"), &md).map_err(|e| e.to_string())?;
        let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        std::fs::write(root.join("fidelity.json"), json).map_err(|e| e.to_string())?;
        print!("{md}");
        eprintln!(
            "wrote {} and fidelity.json ({:.1} min in all)",
            root.join("fidelity.md").display(),
            started.elapsed().as_secs_f64() / 60.0
        );
    }
    if outside > 0 {
        eprintln!("{outside} numbers outside their tolerance or missing (see the reports)");
    }
    Ok(if outside > 0 && a.strict { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn run_check(a: CheckArgs) -> Result<ExitCode, String> {
    use dmkit_verify::{explore::Mode, registry};
    if a.list_indexes {
        registry::index_names().iter().for_each(|name| println!("{name}"));
        return Ok(ExitCode::SUCCESS);
    }
    let index = a.index.expect("clap requires --index unless --list-indexes");
    if a.list_plants {
        print!("{}", registry::list_plants(&index)?);
        return Ok(ExitCode::SUCCESS);
    }
    if a.list_race_handlers {
        print!("{}", registry::list_race_handlers(&index)?);
        return Ok(ExitCode::SUCCESS);
    }
    if a.list_presets {
        print!("{}", registry::list_presets(&index)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mode = a.mode.as_deref().map(Mode::parse).transpose()?;
    let request = registry::CheckRequest {
        index,
        preset: a.preset,
        config: a.config,
        clients: a.clients,
        seconds: a.seconds,
        mode,
        seed: a.seed,
        plant: a.plant,
        replay: a.replay,
        max_schedules: a.max_schedules,
        qp_actors: a.qp_actors,
        read_failures: a.read_failures,
    };
    let outcome = if a.coverage {
        registry::run_coverage(&request)?
    } else if a.sweep {
        registry::run_sweep(&request)?
    } else {
        registry::run_check(&request)?
    };
    print!("{}", outcome.report);
    if let Some(path) = a.export_history {
        std::fs::write(&path, &outcome.history).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("history written to {}", path.display());
    }
    Ok(if outcome.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn run_perftest(a: PerftestArgs) -> Result<(), String> {
    let profile = Profile::load(&a.profile).map_err(|e| e.to_string())?;
    if a.clients.contains(&0) {
        return Err("--clients must be positive".into());
    }
    if a.compute_nodes == 0 || a.memory_nodes == 0 {
        return Err("--compute-nodes and --memory-nodes must be positive".into());
    }
    let points: Vec<PerfPoint> = a
        .clients
        .iter()
        .map(|&clients| PerfPoint {
            verb: a.verb,
            bytes: if !a.verb.is_rmw() { a.bytes } else { 8 },
            clients,
            compute_nodes: a.compute_nodes,
            memory_nodes: a.memory_nodes,
            region: a.region,
            hot_addresses: a.hot_addresses,
            batch: a.batch,
            offset: a.offset,
            span_bytes: a.span_bytes,
            profile: profile.clone(),
            seed: a.seed,
            warmup_ns: a.warmup_us * 1000,
            duration_ns: a.duration_us * 1000,
            server_threads: a.server_threads,
            handler_ns: a.handler_ns,
        })
        .collect();
    let started = std::time::Instant::now();
    let results = sweep::run_points(&points, sweep::default_threads(), "perftest", perftest::run_point);
    let results: Vec<_> = results.into_iter().collect::<Result<_, _>>()?;
    match a.format {
        Format::Table => {
            print!("{}", perftest::table(&results));
            let steps: u64 = results.iter().map(|r| r.sim_steps).sum();
            let wall = started.elapsed().as_secs_f64();
            eprintln!(
                "profile {}, seed {}: {} simulator steps in {:.2} s wall-clock",
                profile.name, a.seed, steps, wall
            );
        }
        Format::Json => {
            for r in &results {
                println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
            }
        }
    }
    Ok(())
}

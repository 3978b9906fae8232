//! `dmkit run`: one experiment — load an index, warm up, measure — and the metric schema every
//! index reports in.
//!
//! Clients are spread round-robin over compute nodes; each compute node has
//! `threads_per_cn` threads of `coroutines` clients (a thread is a serial CPU its coroutines
//! share). Every client runs operations from its own [`OpSource`] back to back (closed loop);
//! operations that *complete* inside the measurement window count, with their latency, the
//! round trips they waited for, and the verbs and bytes they issued.

use dmkit_indexes::IndexKind;
use dmkit_indexes::spec::{Op, Outcome};
use dmkit_sim::Profile;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One measured operation: usually one index operation; a read-modify-write is a search then
/// an update of the same key, measured as one (as YCSB F counts it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The name its latency is reported under (`search`, `insert`, ..., `read_modify_write`).
    pub name: &'static str,
    pub ops: Vec<Op>,
}

impl Task {
    pub fn single(op: Op) -> Task {
        Task { name: op.name(), ops: vec![op] }
    }
}

/// Where a client's operations come from.
pub trait OpSource: Send {
    /// The next operation, or `None` when the client is done.
    fn next_op(&mut self) -> Option<Task>;
}

/// How the initial keys get into the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadMethod {
    /// The index's own inserts with no simulated time (`Sim::set_instant`).
    Bulk,
    /// Timed inserts by one client before the run (not measured).
    Insert,
}

/// Topology and timing of a run.
#[derive(Clone, Debug)]
pub struct RunSetup {
    pub profile: Profile,
    pub compute_nodes: u16,
    pub memory_nodes: u16,
    pub threads_per_cn: u32,
    pub coroutines: u32,
    pub load: LoadMethod,
    /// How the measured phase is chosen: steady state (the default) or a fixed window.
    pub window: crate::measure::Window,
    /// Tick of the throughput series the window is judged on, in ns.
    pub tick_ns: u64,
    pub seed: u64,
    /// Report throughput per interval of this many ns over warm-up and measurement (0: off).
    pub timeseries_ns: u64,
    /// Record every operation of the measured clients as a history (for `--export-history`).
    pub record_history: bool,
    /// Run on this hardware cluster instead of the simulator (`--backend rdma`).
    pub cluster: Option<Arc<crate::cluster::ClusterConfig>>,
    /// Server nodes to crash during the run (simulator only).
    pub server_crashes: Vec<ServerCrash>,
}

/// A crash-stop of one of the index's server nodes (HStore's hash-table or skiplist server),
/// timed from the start of the warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ServerCrash {
    /// Server node index (0-based among the index's server nodes).
    pub server: u16,
    pub at_ns: u64,
    /// When it comes back (empty, its services recovering), if it does.
    pub restart_at_ns: Option<u64>,
}

impl RunSetup {
    pub fn clients(&self) -> u32 {
        self.compute_nodes as u32 * self.threads_per_cn * self.coroutines
    }
}

/// Latency and throughput of one kind of operation, or of all.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct OpMetrics {
    pub operations: u64,
    pub throughput_mops: f64,
    pub latency_ns_p50: u64,
    pub latency_ns_p90: u64,
    pub latency_ns_p99: u64,
    pub latency_ns_p999: u64,
    pub latency_ns_max: u64,
}

/// The metric schema (DESIGN.md §5): one JSON object per run.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct RunResult {
    pub index: String,
    pub config: String,
    pub workload: String,
    pub profile: String,
    pub clients: u32,
    pub compute_nodes: u16,
    pub memory_nodes: u16,
    pub threads_per_cn: u32,
    pub coroutines: u32,
    pub keys: u64,
    pub seed: u64,
    /// The measured phase's length (the same as `measured_ns`; kept for older readers).
    pub duration_ns: u64,
    /// Operations completed without error in the measured phase (failed ones are in
    /// `errors`, and in no throughput, latency or per-operation cost).
    pub operations: u64,
    /// Mean throughput of successful operations over the measured phase (the mean of the
    /// batch means).
    pub throughput_mops: f64,
    /// Half-width of the 95% confidence interval of `throughput_mops` (batch means; DESIGN.md
    /// §5a and `measure`).
    pub throughput_mops_ci95: f64,
    /// Whether the run converged: warm-up ended, batches independent, interval within the
    /// precision, no trend. For a fixed window (`--duration-us`), the trend test alone.
    pub steady: bool,
    /// Why it is not steady (empty when it is).
    pub unsteady_reasons: Vec<crate::measure::Unsteady>,
    /// How the measured phase was chosen.
    pub measurement: Measurement,
    /// Simulated time before the measured phase (the warm-up MSER-5 cut, or the fixed one).
    pub warmup_ns: u64,
    pub measured_ns: u64,
    /// Batches of the measured phase, their length and each one's throughput.
    pub batches: usize,
    pub batch_ns: u64,
    pub batch_mops: Vec<f64>,
    /// The whole run's throughput, warm-up included, in at most 100 equal bins of
    /// `series_bin_ns` from the start: the series to look at before believing the mean.
    #[serde(default)]
    pub series_mops: Vec<f64>,
    #[serde(default)]
    pub series_bin_ns: u64,
    /// The trend test's t statistic and von Neumann's independence statistic (standardised).
    pub trend_t: f64,
    pub von_neumann_z: f64,
    /// Latency percentiles are of every operation completed in the measured phase, pooled;
    /// they carry no interval of their own. This is the 95% half-width of the mean of the
    /// batches' 99th percentiles (the batch-quantile method): a guide to how far the tail
    /// moves from batch to batch, not an exact interval of the pooled p99.
    pub latency_ns_p99_ci95: u64,
    pub latency_ns_p50: u64,
    pub latency_ns_p90: u64,
    pub latency_ns_p99: u64,
    pub latency_ns_p999: u64,
    pub per_op: BTreeMap<String, OpMetrics>,
    /// Completions waited for per operation (dependent remote waits on the critical path).
    pub round_trips_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
    /// Bytes READ per byte of key and value the operations asked for.
    pub read_amplification: f64,
    pub verbs_per_op: BTreeMap<String, f64>,
    pub mn_iops_utilisation: f64,
    pub mn_bandwidth_utilisation: f64,
    pub cache_bytes_per_cn: f64,
    /// `None` when the index has no cache, or did not count hits.
    pub cache_hit_ratio: Option<f64>,
    pub remote_bytes_used: u64,
    pub metadata_bytes_per_item: Option<f64>,
    pub load_factor: Option<f64>,
    pub retries_per_op: f64,
    pub lock_failures: u64,
    pub cas_failures: u64,
    /// Read-delegation and write-combining ratios (indexes with RDWC).
    pub rdwc: Option<BTreeMap<String, f64>>,
    /// Operations that returned an error, by error.
    pub errors: BTreeMap<String, u64>,
    /// Index-specific counters.
    pub index_counters: BTreeMap<String, u64>,
    /// Throughput per interval from the start of the warm-up, when asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeseries: Vec<TimePoint>,
    /// Every operation the clients ran, with logical invoke and respond times, when asked for
    /// (JSON lines in the format of `dmkit_verify::history`; not part of the JSON object).
    #[serde(skip)]
    pub history: Option<dmkit_verify::history::History>,
    /// Whether the index supports scans (how its history's scans are judged).
    #[serde(skip)]
    pub supports_scan: bool,
    /// Simulator steps of the whole run.
    pub sim_steps: u64,
    /// The simulator's hash of every step of the run (equal for equal seeds and configs).
    pub trace_hash: u64,
    /// The server node crashed during the run, if any (`crash_server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashed_server: Option<u16>,
    /// The run file this run is a point of (a digest of its settings) and the point's place in
    /// it, so that `dmkit merge` can join the shards of one sweep and refuse others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<usize>,
}

impl RunResult {
    /// What every backend reports the same way (names, shape, operations and latencies); the
    /// backend-specific metrics start at zero.
    pub(crate) fn measured(
        index: &str,
        names: (&str, &str),
        profile: String,
        setup: &RunSetup,
        (clients, keys): (u32, u64),
        measured_ns: u64,
        (overall, per_op): (OpMetrics, BTreeMap<String, OpMetrics>),
    ) -> RunResult {
        RunResult {
            index: index.to_string(),
            config: names.0.to_string(),
            workload: names.1.to_string(),
            profile,
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
            throughput_mops_ci95: 0.0,
            steady: true,
            unsteady_reasons: Vec::new(),
            measurement: Measurement::of(&setup.window),
            warmup_ns: 0,
            measured_ns,
            batches: 0,
            batch_ns: 0,
            batch_mops: Vec::new(),
            series_mops: Vec::new(),
            series_bin_ns: 0,
            trend_t: 0.0,
            von_neumann_z: 0.0,
            latency_ns_p99_ci95: 0,
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
            cache_bytes_per_cn: 0.0,
            cache_hit_ratio: None,
            remote_bytes_used: 0,
            metadata_bytes_per_item: None,
            load_factor: None,
            retries_per_op: 0.0,
            lock_failures: 0,
            cas_failures: 0,
            rdwc: None,
            errors: BTreeMap::new(),
            index_counters: BTreeMap::new(),
            timeseries: Vec::new(),
            history: None,
            supports_scan: true,
            sim_steps: 0,
            trace_hash: 0,
            crashed_server: setup.server_crashes.first().map(|c| c.server),
            sweep: None,
            point: None,
            points: None,
        }
    }
}

/// Operations completed in one interval of a throughput time series.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct TimePoint {
    /// Start of the interval, from the start of the warm-up.
    pub t_us: f64,
    pub operations: u64,
    pub throughput_mops: f64,
}

/// A tick series (operations per `tick_ns`) as throughput in at most 100 equal bins: the
/// throughputs and the bin length.
pub fn coarse_series(ticks: &[u64], tick_ns: u64) -> (Vec<f64>, u64) {
    if ticks.is_empty() || tick_ns == 0 {
        return (Vec::new(), 0);
    }
    let per_bin = ticks.len().div_ceil(100);
    let bin_ns = per_bin as u64 * tick_ns;
    let series = ticks
        .chunks(per_bin)
        .map(|c| round3(c.iter().sum::<u64>() as f64 / (c.len() as u64 * tick_ns) as f64 * 1e3))
        .collect();
    (series, bin_ns)
}

/// How a run's measured phase was chosen (the `--precision` or the fixed window).
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Measurement {
    /// Until steady to `precision` (relative half-width), or until `max_duration_ns`.
    Steady { precision: f64, max_duration_ns: u64 },
    /// A fixed warm-up and window (`--duration-us`, or an operation count per client).
    Fixed { warmup_ns: u64, duration_ns: Option<u64> },
}

impl Measurement {
    pub fn of(window: &crate::measure::Window) -> Measurement {
        match *window {
            crate::measure::Window::Steady { precision, max_duration_ns, .. } => {
                Measurement::Steady { precision, max_duration_ns }
            }
            crate::measure::Window::Fixed { warmup_ns, duration_ns } => Measurement::Fixed { warmup_ns, duration_ns },
        }
    }
}

/// Exact nearest-rank percentile of sorted samples.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    crate::perftest::percentile(sorted, q)
}

pub(crate) fn op_metrics(mut samples: Vec<u64>, seconds: f64) -> OpMetrics {
    samples.sort_unstable();
    OpMetrics {
        operations: samples.len() as u64,
        throughput_mops: round3(samples.len() as f64 / seconds / 1e6),
        latency_ns_p50: percentile(&samples, 0.50),
        latency_ns_p90: percentile(&samples, 0.90),
        latency_ns_p99: percentile(&samples, 0.99),
        latency_ns_p999: percentile(&samples, 0.999),
        latency_ns_max: samples.last().copied().unwrap_or(0),
    }
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub(crate) fn useful_bytes(op: &Op, outcome: &Outcome) -> u64 {
    match (op, outcome) {
        (Op::Search { key }, Outcome::Found(v)) => key.len() as u64 + v.as_ref().map_or(0, |v| v.len() as u64),
        (Op::Insert { key, value } | Op::Update { key, value }, _) => (key.len() + value.len()) as u64,
        (Op::Delete { key }, _) => key.len() as u64,
        (Op::Scan { .. }, Outcome::Scanned(pairs)) => pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
        _ => 0,
    }
}

/// Runs index `K` with `options`: loads `items` (or takes the image in `slot`), then runs every
/// client's source; on hardware when the setup names a cluster. `names` = (index config name,
/// workload name).
pub fn run_index<K: IndexKind>(
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    items: crate::workload::LoadItems,
    sources: Vec<Box<dyn OpSource>>,
    ctx: &RunContext<'_>,
) -> Result<RunResult, String> {
    K::validate(options)?;
    setup.window.validate()?;
    if let Some(cluster) = &setup.cluster {
        #[cfg(feature = "connectx")]
        return crate::hardware::run_index::<K>(cluster, setup, options, names, items.collect(), sources);
        #[cfg(not(feature = "connectx"))]
        {
            let _ = cluster;
            return Err("this build has no real RDMA backend (feature connectx)".into());
        }
    }
    crate::runner::run_index::<K>(setup, options, names, items, sources, ctx.image, ctx.progress)
}

/// What a run shares with the rest of its sweep: the image slot of its load, and where its
/// progress goes.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct RunContext<'a> {
    pub image: Option<&'a crate::runner::ImageSlot>,
    pub progress: &'a dyn crate::runner::Progress,
}

impl RunContext<'static> {
    /// A run alone: its own load, no progress shown.
    pub fn alone() -> RunContext<'static> {
        RunContext { image: None, progress: &crate::runner::Quiet }
    }
}

/// Throughput as `mean ± half-width` (Mops/s).
pub fn mean_ci(mean: f64, ci95: f64) -> String {
    format!("{mean:.3} ± {ci95:.3}")
}

/// What a run's measurement says in words: steady, or why not.
pub fn verdict(r: &RunResult) -> String {
    let window = match r.measurement {
        Measurement::Steady { .. } => "steady state",
        Measurement::Fixed { .. } => "fixed window",
    };
    if r.steady {
        format!(
            "{window}: {:.1} ms warm-up, {:.1} ms measured in {} batches",
            r.warmup_ns as f64 / 1e6,
            r.measured_ns as f64 / 1e6,
            r.batches
        )
    } else {
        let why: Vec<&str> = r.unsteady_reasons.iter().map(|u| u.describe()).collect();
        let cap = match r.measurement {
            Measurement::Steady { max_duration_ns, .. } => {
                format!(" at the cap of {:.0} ms", max_duration_ns as f64 / 1e6)
            }
            Measurement::Fixed { .. } => String::new(),
        };
        format!("NOT STEADY{cap}: {}", why.join("; "))
    }
}

/// A one-line-per-run table, throughput as mean ± 95% half-width, then a line for each run
/// that did not converge.
pub fn table(results: &[RunResult]) -> String {
    let mut out = format!(
        "{:<10} {:<10} {:>7} {:>19} {:>7} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}\n",
        "index",
        "workload",
        "clients",
        "Mops/s (95% CI)",
        "steady",
        "p50 ns",
        "p99 ns",
        "p999 ns",
        "RTT/op",
        "rd B/op",
        "wr B/op"
    );
    for r in results {
        out.push_str(&format!(
            "{:<10} {:<10} {:>7} {:>19} {:>7} {:>9} {:>9} {:>9} {:>7.2} {:>9.1} {:>9.1}\n",
            r.index,
            r.workload,
            r.clients,
            mean_ci(r.throughput_mops, r.throughput_mops_ci95),
            if r.steady { "yes" } else { "NO" },
            r.latency_ns_p50,
            r.latency_ns_p99,
            r.latency_ns_p999,
            r.round_trips_per_op,
            r.bytes_read_per_op,
            r.bytes_written_per_op
        ));
    }
    for (i, r) in results.iter().enumerate() {
        if !r.steady || results.len() == 1 {
            let who = if results.len() == 1 {
                String::new()
            } else {
                format!("run {} ({} {}): ", i + 1, r.index, r.workload)
            };
            out.push_str(&format!("{who}{}\n", verdict(r)));
        }
    }
    out
}

/// A client's operations from a workload stream.
#[allow(missing_debug_implementations)] // the stream holds generator state not worth printing
pub struct WorkloadSource {
    stream: crate::workload::Stream,
}

impl WorkloadSource {
    pub fn new(stream: crate::workload::Stream) -> WorkloadSource {
        WorkloadSource { stream }
    }
}

impl OpSource for WorkloadSource {
    fn next_op(&mut self) -> Option<Task> {
        use crate::workload::WorkloadOp as W;
        Some(match self.stream.next_op() {
            W::Search { key } => Task::single(Op::Search { key: key.bytes }),
            W::Update { key, value } => Task::single(Op::Update { key: key.bytes, value }),
            W::Insert { key, value } => Task::single(Op::Insert { key: key.bytes, value }),
            W::Delete { key } => Task::single(Op::Delete { key: key.bytes }),
            W::Scan { start, limit } => Task::single(Op::Scan {
                start: std::ops::Bound::Included(start.bytes),
                end: std::ops::Bound::Unbounded,
                limit,
            }),
            W::ReadModifyWrite { key, value } => Task {
                name: "read_modify_write",
                ops: vec![Op::Search { key: key.bytes.clone() }, Op::Update { key: key.bytes, value }],
            },
        })
    }
}

/// What `dmkit run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub index: String,
    pub config: String,
    pub workload: String,
    pub keys: u64,
    pub value_bytes: Option<usize>,
    /// Key size: 8-byte integers by default; other sizes are padded integers, or e-mail-like
    /// strings with `email_keys`.
    pub key_bytes: Option<usize>,
    pub email_keys: bool,
    /// The skew θ of the workload's Zipfian or latest distribution.
    pub theta: Option<f64>,
    /// Run this many operations per client after the warm-up instead of a fixed duration.
    pub ops_per_client: Option<u64>,
    /// The fresh keys a LOAD inserts in all (`--inserts`): hash tables are sized for
    /// `keys + inserts` items (see [`RunRequest::items`]).
    pub inserts: Option<u64>,
    /// The index's cache budget per compute node (indexes with a compute-node cache).
    pub cache_bytes: Option<u64>,
    pub setup: RunSetup,
}

impl RunRequest {
    /// The items the index must hold: the loaded keys and the run's budget of fresh inserts.
    /// Hash tables without resizing (or, for RACE, without a split in the run: the RACE
    /// digest's D4, "pre-create enough subtables to hold the target item count") are sized
    /// for it, as the papers size theirs for the whole experiment.
    pub fn items(&self) -> u64 {
        self.keys.saturating_add(self.inserts.unwrap_or(0))
    }
}

/// Applies a request's key size, θ and value size to a workload spec.
fn shape_workload(spec: &mut crate::workload::WorkloadSpec, req: &RunRequest) -> Result<(), String> {
    use crate::workload::{Distribution, KeyFormat, KeyOrder};
    if let Some(v) = req.value_bytes {
        spec.value_bytes = v;
    }
    let order = match spec.key_format {
        KeyFormat::Integer { order } | KeyFormat::Padded { order, .. } => order,
        KeyFormat::Email { .. } => KeyOrder::Hashed,
    };
    spec.key_format = match (req.key_bytes, req.email_keys) {
        (None, false) => spec.key_format,
        (Some(8), false) => KeyFormat::Integer { order },
        (Some(bytes), false) => KeyFormat::Padded { bytes, order },
        (bytes, true) => KeyFormat::Email { bytes: bytes.unwrap_or(32), domain_first: false },
    };
    if let Some(t) = req.theta {
        spec.distribution = match spec.distribution {
            Distribution::ScrambledZipfian { .. } => Distribution::ScrambledZipfian { theta: t },
            Distribution::Zipfian { .. } => Distribution::Zipfian { theta: t },
            Distribution::Latest { .. } => Distribution::Latest { theta: t },
            other => return Err(format!("--theta needs a skewed workload; {} is {other:?}", spec.name)),
        };
    }
    spec.validate().map_err(|e| e.to_string())
}

/// Stops a client's source after `left` operations.
struct Limited {
    inner: Box<dyn OpSource>,
    left: u64,
}

impl OpSource for Limited {
    fn next_op(&mut self) -> Option<Task> {
        self.left = self.left.checked_sub(1)?;
        self.inner.next_op()
    }
}

/// Names `dmkit run --index` accepts.
pub fn index_names() -> Vec<&'static str> {
    vec![
        dmkit_indexes::example::Example::NAME,
        dmkit_indexes::race::Race::NAME,
        dmkit_indexes::cluster::Cluster::NAME,
        dmkit_indexes::sherman::Sherman::NAME,
        dmkit_indexes::smart::Smart::NAME,
        dmkit_indexes::art::Art::NAME,
        dmkit_indexes::chime::Chime::NAME,
        dmkit_indexes::dolphin::Dolphin::NAME,
        dmkit_indexes::hstore::HStore::NAME,
        dmkit_indexes::clover::Clover::NAME,
    ]
}

/// Runs a request: builds the workload and the index's named configuration, then
/// [`run_index`]. Errors are one line (bad index, config or workload).
pub fn run_request(req: &RunRequest) -> Result<RunResult, String> {
    run_request_with(req, &RunContext::alone())
}

/// [`run_request`] sharing its sweep's image and showing progress.
pub fn run_request_with(req: &RunRequest, ctx: &RunContext<'_>) -> Result<RunResult, String> {
    dispatch(req, Run { ctx })
}

/// What a request asks of its index once the index is named and its options built: run it
/// ([`run_request`]), load it only (`dmkit bench-load`), or name its image (sweeps).
pub trait IndexVisitor {
    type Out;
    fn visit<K: IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        names: (&str, &str),
        work: Work,
    ) -> Result<Self::Out, String>;
}

/// A request's workload: the items to load and each client's operations, built on demand.
#[allow(missing_debug_implementations)] // the shared state holds atomics not worth printing
pub struct Work {
    pub spec: crate::workload::WorkloadSpec,
    pub items: crate::workload::LoadItems,
    shared: crate::workload::SharedState,
}

impl Work {
    /// Every client's operation source.
    pub fn sources(&self, req: &RunRequest) -> Vec<Box<dyn OpSource>> {
        (0..req.setup.clients())
            .map(|c| {
                let source: Box<dyn OpSource> =
                    Box::new(WorkloadSource::new(self.spec.stream(req.setup.seed, c, &self.shared)));
                match req.ops_per_client {
                    // Warm-up operations come first: a client that finishes its quota early stops.
                    Some(n) => Box::new(Limited { inner: source, left: n }) as Box<dyn OpSource>,
                    None => source,
                }
            })
            .collect()
    }
}

struct Run<'a, 'b> {
    ctx: &'a RunContext<'b>,
}

impl IndexVisitor for Run<'_, '_> {
    type Out = RunResult;
    fn visit<K: IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        names: (&str, &str),
        work: Work,
    ) -> Result<RunResult, String> {
        let sources = work.sources(req);
        run_index::<K>(&req.setup, options, names, work.items, sources, self.ctx)
    }
}

/// Host memory a request is estimated to need: its loaded image (with the simulation's own
/// state) and its compute nodes' caches, each full. From measured costs per item
/// ([`IndexKind::HOST_BYTES_PER_ITEM`], at 16-byte items; larger items add 1.5 bytes per byte)
/// and [`IndexKind::cache_host_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub image: u64,
    pub caches: u64,
}

/// A request's image key and memory estimate, without running it.
struct Plan;

impl IndexVisitor for Plan {
    type Out = (String, MemoryEstimate);
    fn visit<K: IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        _names: (&str, &str),
        work: Work,
    ) -> Result<(String, MemoryEstimate), String> {
        let items = req.items();
        let item_bytes = (work.spec.key_format.key_bytes() + work.spec.value_bytes) as u64;
        let per_item = K::HOST_BYTES_PER_ITEM + item_bytes.saturating_sub(16) * 3 / 2;
        let estimate = MemoryEstimate {
            image: items.saturating_mul(per_item) + (64 << 20),
            caches: K::cache_host_bytes(options, req.setup.compute_nodes, items),
        };
        Ok((crate::runner::image_key::<K>(&req.setup, options, &work.items), estimate))
    }
}

/// [`MemoryEstimate`] of one request (or the request's error).
pub fn memory_estimate(req: &RunRequest) -> Result<MemoryEstimate, String> {
    dispatch(req, Plan).map(|(_, e)| e)
}

static FORCE_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs requests [`check_memory`] would refuse (`--force`).
pub fn force_memory(yes: bool) {
    FORCE_MEMORY.store(yes, std::sync::atomic::Ordering::Relaxed);
}

/// This machine's memory (`MemTotal`), if it can be read.
pub fn machine_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// How many points of `requests` may run at once (at most `threads`) within 90% of `machine`
/// bytes, by their estimated host memory: `t` points at once hold at most the `t` largest
/// distinct images and `t` sets of the largest caches. Refuses (before anything runs) when one
/// point at a time does not fit. Hardware runs are not estimated.
pub fn check_memory_on(requests: &[RunRequest], threads: usize, machine: u64) -> Result<usize, String> {
    let mut images: Vec<(String, u64)> = Vec::new();
    let mut caches = 0u64;
    for r in requests.iter().filter(|r| r.setup.cluster.is_none()) {
        // A bad request is left to its run, which reports the error.
        let Ok((key, e)) = dispatch(r, Plan) else { continue };
        caches = caches.max(e.caches);
        if !images.iter().any(|(k, _)| *k == key) {
            images.push((key, e.image));
        }
    }
    images.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
    let need = |t: usize| images.iter().take(t).map(|(_, bytes)| bytes).sum::<u64>() + t as u64 * caches;
    let limit = machine / 10 * 9;
    let threads = threads.max(1);
    if let Some(t) = (1..=threads).rev().find(|&t| need(t) <= limit) {
        if t < threads && t < requests.len() {
            eprintln!(
                "dmkit: {t} point(s) at a time instead of {threads}: {threads} at once would need an estimated \
                 {:.1} GB of host memory, more than 90% of this machine's {:.1} GB",
                need(threads) as f64 / 1e9,
                machine as f64 / 1e9
            );
        }
        return Ok(t);
    }
    Err(format!(
        "this needs an estimated {:.1} GB of host memory ({:.1} GB loaded + {:.1} GB of caches), more than 90% \
         of this machine's {:.1} GB: refused before starting (fewer --keys or compute nodes, a smaller \
         cache, or --force to run it anyway)",
        need(1) as f64 / 1e9,
        images[0].1 as f64 / 1e9,
        caches as f64 / 1e9,
        machine as f64 / 1e9
    ))
}

/// [`check_memory_on`] this machine: the points to run at once (`threads` if
/// [`force_memory`] was set or the machine's memory is unknown).
pub fn check_memory(requests: &[RunRequest], threads: usize) -> Result<usize, String> {
    if FORCE_MEMORY.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(threads);
    }
    match machine_memory_bytes() {
        Some(machine) => check_memory_on(requests, threads, machine),
        None => Ok(threads),
    }
}

/// The key of the image a request loads: requests with equal keys load the same state and
/// may share it. `None` on hardware (each run loads its cluster) and for bad requests (their
/// run reports the error).
pub fn image_key(req: &RunRequest) -> Option<String> {
    if req.setup.cluster.is_some() {
        return None;
    }
    dispatch(req, Plan).ok().map(|(key, _)| key)
}

/// Runs every request on up to `threads` cores, loading each distinct state once (see
/// [`crate::sweep`]); results in request order.
pub fn run_requests(requests: &[RunRequest], threads: usize, label: &str) -> Vec<Result<RunResult, String>> {
    let keys: Vec<Option<String>> = requests.iter().map(image_key).collect();
    crate::sweep::run_points_shared(
        requests,
        &keys,
        threads,
        label,
        |r| format!("{} {} {} clients", r.index, r.workload, r.setup.clients()),
        |r, slot, progress| {
            // A panic is a bug; it fails its point with a message rather than the whole sweep.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_request_with(r, &RunContext { image: slot, progress })
            }))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(format!(
                    "{} {} with {} clients panicked (a bug in dmkit; seed {}): {what}",
                    r.index,
                    r.workload,
                    r.setup.clients(),
                    r.setup.seed
                ))
            })
        },
    )
}

/// Builds a request's workload and its index's named configuration, then hands both to `v`.
/// Errors are one line (bad index, config or workload).
pub fn dispatch<V: IndexVisitor>(req: &RunRequest, v: V) -> Result<V::Out, String> {
    use crate::workload::{SharedState, WorkloadSpec, load_items};
    if req.keys == 0 {
        return Err("--keys must be positive".into());
    }
    let mut spec = WorkloadSpec::from_name(&req.workload, req.keys).map_err(|e| e.to_string())?;
    shape_workload(&mut spec, req)?;
    // On hardware each compute-node process generates its own clients' operations: the
    // processes split the fresh key numbers between them so that no key is inserted twice.
    let shared = match &req.setup.cluster {
        Some(c) => SharedState::strided(spec.record_count, c.compute_node as u64, req.setup.compute_nodes as u64),
        None => SharedState::for_spec(&spec),
    };
    // Every workload starts from `keys` loaded items; LOAD then inserts fresh keys beyond them
    // (the papers' LOAD: SMART and CHIME preload 5 M keys, then insert).
    let work = Work { items: load_items(&spec), spec: spec.clone(), shared };
    let needs_scans = spec.mix.scan > 0.0;
    match req.index.as_str() {
        "example" => {
            use dmkit_indexes::example::{Example, ExampleOptions};
            if needs_scans && !Example::SUPPORTS_SCAN {
                return Err(format!("index example does not support scans, and workload {} has them", spec.name));
            }
            if req.cache_bytes.is_some() {
                // Its only compute-node state is the superblock: a budget would change nothing.
                return Err("index example has no compute-node cache: --cache-bytes does not apply".into());
            }
            if req.config != "default" {
                return Err(format!("index example has no configuration '{}' (configurations: default)", req.config));
            }
            // The example table has no overflow buckets: 16 slots with 2 keys per bucket on
            // average after loading leaves room for the run's inserts (a full bucket would need
            // more than 16 of Poisson(2) keys).
            let slots = 16u32;
            let options = ExampleOptions {
                buckets: req.items().div_ceil(2).max(1),
                slots_per_bucket: slots,
                max_key_bytes: spec.key_format.key_bytes().max(8) as u32,
                max_value_bytes: spec.value_bytes.max(8) as u32,
                memory_nodes: req.setup.memory_nodes,
                ..ExampleOptions::default()
            };
            v.visit::<Example>(req, &options, (&req.config, &spec.name), work)
        }
        "cluster" => {
            use dmkit_indexes::cluster::{Cluster, ClusterOptions};
            if needs_scans {
                return Err(format!("index cluster is a hash table: no scans, and workload {} has them", spec.name));
            }
            if req.cache_bytes.is_some() || req.config != "default" {
                return Err("index cluster has no cache and no named configurations".into());
            }
            // The paper's geometry (8 slots, overflow ratio 3), sized like the RACE paper's
            // tables for the run's items (`RunRequest::items`): 75% of all slots (main and
            // overflow) full when they are all in.
            let options = ClusterOptions {
                main_buckets: (req.items() as f64 / (8.0 * 4.0 * 0.75)).ceil().max(1.0) as u64,
                key_bytes: spec.key_format.key_bytes().max(8) as u32,
                value_bytes: spec.value_bytes.max(1) as u32,
                memory_nodes: req.setup.memory_nodes,
                ..ClusterOptions::default()
            };
            v.visit::<Cluster>(req, &options, (&req.config, &spec.name), work)
        }
        "race" => {
            use dmkit_indexes::race::{Race, RaceOptions};
            if needs_scans {
                return Err(format!("index race is a hash table: no scans, and workload {} has them", spec.name));
            }
            if req.cache_bytes.is_some() {
                return Err("index race caches only its directory: --cache-bytes does not apply".into());
            }
            let paper = dmkit_indexes::race::Paper::named(&req.config)?;
            // Subtables of 4,096 groups, as many (a power of two) as hold the run's items
            // (`RunRequest::items`) at about 75% of their slots: the digest's D4, no split in a
            // run that stays within them. Inserts beyond split a subtable, one client moving
            // its items (see the module doc: a growing table stalls while it splits).
            let groups = 4096u64;
            let per_subtable = (3 * groups * 7) as f64 * 0.75;
            let depth =
                ((req.items().max(1) as f64 / per_subtable).ceil() as u64).next_power_of_two().trailing_zeros() as u8;
            let options = RaceOptions {
                key_bytes: spec.key_format.key_bytes().max(8) as u32,
                value_bytes: spec.value_bytes.max(1) as u32,
                groups: groups as u32,
                initial_depth: depth.min(16),
                memory_nodes: req.setup.memory_nodes,
                paper,
                ..RaceOptions::default()
            };
            v.visit::<Race>(req, &options, (&req.config, &spec.name), work)
        }
        "sherman" if req.config.ends_with("-ool") => {
            // Values out of line (`dmkit_indexes::indirect`): the tree maps keys to 8-byte block
            // words, as HStore's digest recommends running its Sherman baseline.
            use dmkit_indexes::indirect::{Indirect, IndirectOptions};
            use dmkit_indexes::sherman::{Sherman, ShermanOptions};
            let base = req.config.trim_end_matches("-ool");
            let mut inner = ShermanOptions::named(base, spec.key_format.key_bytes() as u32, 8)?;
            inner.memory_nodes = req.setup.memory_nodes;
            if let Some(bytes) = req.cache_bytes {
                inner.cache_bytes = bytes;
            }
            inner.validate().map_err(|e| format!("index sherman, configuration {}: {e}", req.config))?;
            let options = IndirectOptions::new(inner, spec.value_bytes as u32, req.setup.memory_nodes);
            v.visit::<Indirect<Sherman>>(req, &options, (&req.config, &spec.name), work)
        }
        "sherman" => {
            use dmkit_indexes::sherman::{Sherman, ShermanOptions};
            let config = if req.config == "default" { "sherman-fixed" } else { req.config.as_str() };
            let mut options =
                ShermanOptions::named(config, spec.key_format.key_bytes() as u32, spec.value_bytes.max(1) as u32)?;
            options.memory_nodes = req.setup.memory_nodes;
            if let Some(bytes) = req.cache_bytes {
                options.cache_bytes = bytes;
            }
            options.validate().map_err(|e| format!("index sherman, configuration {config}: {e}"))?;
            v.visit::<Sherman>(req, &options, (config, &spec.name), work)
        }
        "smart" | "art" => {
            use dmkit_indexes::smart::SmartOptions;
            let index = req.index.as_str();
            let config = if req.config == "default" { index } else { req.config.as_str() };
            let mut options =
                SmartOptions::named(config, spec.key_format.key_bytes() as u32, spec.value_bytes.max(1) as u32)?;
            if index == "art" && config != "art" {
                return Err(format!(
                    "index art has one configuration, 'art' (asked for '{config}'); try --index smart"
                ));
            }
            options.memory_nodes = req.setup.memory_nodes;
            if let Some(bytes) = req.cache_bytes {
                options.cache_bytes = bytes;
            }
            options.validate().map_err(|e| format!("index {index}, configuration {config}: {e}"))?;
            if index == "art" {
                let options = dmkit_indexes::art::ArtOptions(options);
                v.visit::<dmkit_indexes::art::Art>(req, &options, (config, &spec.name), work)
            } else {
                v.visit::<dmkit_indexes::smart::Smart>(req, &options, (config, &spec.name), work)
            }
        }
        "chime" => {
            use dmkit_indexes::chime::{Chime, ChimeOptions};
            let config = if req.config == "default" { "chime" } else { req.config.as_str() };
            let mut options =
                ChimeOptions::named(config, spec.key_format.key_bytes() as u32, spec.value_bytes.max(1) as u32)?;
            options.memory_nodes = req.setup.memory_nodes;
            if let Some(bytes) = req.cache_bytes {
                options.cache_bytes = bytes;
            }
            options.validate().map_err(|e| format!("index chime, configuration {config}: {e}"))?;
            v.visit::<Chime>(req, &options, (config, &spec.name), work)
        }
        "dolphin" => {
            use dmkit_indexes::dolphin::{Dolphin, DolphinOptions};
            if spec.key_format.key_bytes() != 8 || spec.value_bytes != 8 {
                return Err(format!(
                    "index dolphin stores 8-byte keys and values; workload {} has {}-byte keys and {}-byte values",
                    spec.name,
                    spec.key_format.key_bytes(),
                    spec.value_bytes
                ));
            }
            let config = if req.config == "default" { "hardened" } else { req.config.as_str() };
            let mut options = DolphinOptions { memory_nodes: req.setup.memory_nodes, ..DolphinOptions::default() };
            options.configure(config)?;
            if let Some(bytes) = req.cache_bytes {
                options.cache_bytes = bytes;
            }
            options.validate().map_err(|e| format!("index dolphin, configuration {config}: {e}"))?;
            v.visit::<Dolphin>(req, &options, (config, &spec.name), work)
        }
        "clover" => {
            use dmkit_indexes::clover::{Clover, CloverOptions};
            if needs_scans {
                return Err(format!("index clover is a hash index: no scans, and workload {} has them", spec.name));
            }
            if req.cache_bytes.is_some() || req.config != "default" {
                return Err("index clover has no cache budget and no named configurations".into());
            }
            let options = CloverOptions {
                memory_nodes: req.setup.memory_nodes,
                max_key_bytes: spec.key_format.key_bytes().max(1) as u32,
                max_value_bytes: spec.value_bytes as u32,
                // A shortcut per loaded key, and room for the run's inserts.
                max_keys: req.items().saturating_mul(2).max(1 << 16),
                ..CloverOptions::default()
            };
            options.validate().map_err(|e| format!("index clover: {e}"))?;
            v.visit::<Clover>(req, &options, (&req.config, &spec.name), work)
        }
        "hstore" => {
            use dmkit_indexes::hstore::{HStore, HStoreOptions};
            if req.cache_bytes.is_some() {
                return Err("index hstore has no compute-node cache: --cache-bytes does not apply".into());
            }
            let config = if req.config == "default" { "hstore" } else { req.config.as_str() };
            // The table is sized for the loaded keys at about 3 a bucket (no resizing: the
            // paper over-provisions), with overflow pools for the chains and the run's inserts.
            let mut options = HStoreOptions::named(config)?.sized_for(req.items());
            options.memory_nodes = req.setup.memory_nodes;
            options.max_key_bytes = spec.key_format.key_bytes().max(1) as u32;
            options.max_value_bytes = spec.value_bytes as u32;
            options.validate().map_err(|e| format!("index hstore, configuration {config}: {e}"))?;
            v.visit::<HStore>(req, &options, (config, &spec.name), work)
        }
        other => Err(format!("unknown index '{other}' (known: {})", index_names().join(", "))),
    }
}

/// CSV of results: a header and one line per run, the scalar fields of the schema.
pub fn csv(results: &[RunResult]) -> String {
    let mut out = String::from(
        "index,config,workload,profile,clients,keys,seed,throughput_mops,throughput_mops_ci95,steady,unsteady_reasons,warmup_ns,measured_ns,batches,batch_mops,latency_ns_p50,latency_ns_p90,latency_ns_p99,latency_ns_p999,round_trips_per_op,bytes_read_per_op,bytes_written_per_op,read_amplification,mn_iops_utilisation,mn_bandwidth_utilisation,cache_bytes_per_cn,remote_bytes_used,retries_per_op,lock_failures,cas_failures\n",
    );
    for r in results {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.index,
            r.config,
            r.workload,
            r.profile,
            r.clients,
            r.keys,
            r.seed,
            r.throughput_mops,
            r.throughput_mops_ci95,
            r.steady,
            r.unsteady_reasons.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(";"),
            r.warmup_ns,
            r.measured_ns,
            r.batches,
            r.batch_mops.iter().map(f64::to_string).collect::<Vec<_>>().join(";"),
            r.latency_ns_p50,
            r.latency_ns_p90,
            r.latency_ns_p99,
            r.latency_ns_p999,
            r.round_trips_per_op,
            r.bytes_read_per_op,
            r.bytes_written_per_op,
            r.read_amplification,
            r.mn_iops_utilisation,
            r.mn_bandwidth_utilisation,
            r.cache_bytes_per_cn,
            r.remote_bytes_used,
            r.retries_per_op,
            r.lock_failures,
            r.cas_failures
        ));
    }
    out
}

/// A run file: the TOML form of `dmkit run`'s flags, plus an optional `[sweep]` whose lists
/// expand into one run per combination (in file order, the last list varying fastest).
///
/// ```toml
/// index = "example"
/// workload = "c"
/// keys = 100000
/// compute_nodes = 8
/// threads_per_cn = 8
///
/// [sweep]
/// threads_per_cn = [1, 2, 4, 8]
/// workload = ["a", "c"]
/// ```
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    pub index: String,
    #[serde(default = "default_config")]
    pub config: String,
    #[serde(default = "default_workload")]
    pub workload: String,
    #[serde(default = "default_keys")]
    pub keys: u64,
    pub value_bytes: Option<usize>,
    pub key_bytes: Option<usize>,
    #[serde(default)]
    pub email_keys: bool,
    pub theta: Option<f64>,
    pub ops_per_client: Option<u64>,
    /// LOAD: the fresh keys inserted in all, then the run stops (a fixed window, as the papers'
    /// insert phases: RACE's 10 M into a table of 100 M); every workload's hash tables are
    /// sized for `keys + inserts`.
    pub inserts: Option<u64>,
    pub cache_bytes: Option<u64>,
    #[serde(default = "default_profile")]
    pub profile: String,
    #[serde(default = "default_compute_nodes")]
    pub compute_nodes: u16,
    #[serde(default = "one_u16")]
    pub memory_nodes: u16,
    #[serde(default = "default_threads")]
    pub threads_per_cn: u32,
    #[serde(default = "one_u32")]
    pub coroutines: u32,
    #[serde(default = "default_load")]
    pub load: String,
    /// With `duration_us`: the fixed warm-up (default 100). Without: the least warm-up of a
    /// steady-state run (default 0; MSER-5 finds the rest).
    #[serde(default)]
    pub warmup_us: Option<u64>,
    /// A fixed measured window instead of running to steady state.
    #[serde(default)]
    pub duration_us: Option<u64>,
    /// Steady state: the 95% interval's half-width relative to the mean (default 0.02).
    #[serde(default)]
    pub precision: Option<f64>,
    /// Steady state: the cap on simulated time, warm-up included (default 400,000).
    #[serde(default)]
    pub max_duration_us: Option<u64>,
    /// Tick of the throughput series the window is judged on (default 10).
    #[serde(default)]
    pub tick_us: Option<u64>,
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// Throughput time series interval (0: off).
    #[serde(default)]
    pub timeseries_us: u64,
    /// Crash this server node of the index (0-based among its server nodes) `crash_at_us`
    /// after the warm-up starts; it comes back `restart_after_us` later if that is set.
    #[serde(default)]
    pub crash_server: Option<u16>,
    #[serde(default)]
    pub crash_at_us: u64,
    #[serde(default)]
    pub restart_after_us: Option<u64>,
    #[serde(default)]
    pub sweep: Sweep,
}

/// Lists to sweep; each present list multiplies the number of runs.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Indexes, each `NAME` or `NAME:CONFIG` (say `sherman:sherman-smart`), so that one file
    /// compares indexes in their own configurations.
    pub index: Option<Vec<String>>,
    /// The index's named configurations (Sherman: sherman-artifact, sherman-smart, ...).
    pub config: Option<Vec<String>>,
    pub workload: Option<Vec<String>>,
    pub keys: Option<Vec<u64>>,
    pub key_bytes: Option<Vec<usize>>,
    pub theta: Option<Vec<f64>>,
    pub value_bytes: Option<Vec<usize>>,
    pub compute_nodes: Option<Vec<u16>>,
    pub memory_nodes: Option<Vec<u16>>,
    pub threads_per_cn: Option<Vec<u32>>,
    pub coroutines: Option<Vec<u32>>,
    pub seed: Option<Vec<u64>>,
    pub cache_bytes: Option<Vec<u64>>,
    pub crash_server: Option<Vec<u16>>,
}

fn default_config() -> String {
    "default".into()
}
fn default_workload() -> String {
    "c".into()
}
fn default_keys() -> u64 {
    100_000
}
fn default_profile() -> String {
    "cx6-100g".into()
}
fn default_compute_nodes() -> u16 {
    8
}
fn one_u16() -> u16 {
    1
}
fn default_threads() -> u32 {
    8
}
fn one_u32() -> u32 {
    1
}
fn default_load() -> String {
    "bulk".into()
}
fn one_u64() -> u64 {
    1
}

/// `K/N` of `--shard`: shard K (1-based) of N.
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard '{text}': expected K/N with 1 <= K <= N, e.g. 2/8");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// Joins the results of a sweep's shards in point order: every result must come from the same
/// run file (its digest), no point twice, and none missing. Errors are one line.
pub fn merge(results: Vec<(std::path::PathBuf, RunResult)>) -> Result<Vec<RunResult>, String> {
    let Some((first_path, first)) = results.first() else { return Err("no results to merge".into()) };
    let (Some(sweep), Some(total)) = (first.sweep.clone(), first.points) else {
        return Err(format!("{}: results without a sweep digest (from dmkit run FILE)", first_path.display()));
    };
    let mut by_point: Vec<Option<RunResult>> = vec![None; total];
    for (path, r) in results {
        if r.sweep.as_deref() != Some(sweep.as_str()) || r.points != Some(total) {
            return Err(format!(
                "{} holds results of another sweep ({} rather than {sweep}): merge the shards of one run file",
                path.display(),
                r.sweep.as_deref().unwrap_or("none")
            ));
        }
        let p =
            r.point.filter(|&p| p < total).ok_or_else(|| format!("{}: a result without its point", path.display()))?;
        if by_point[p].is_some() {
            return Err(format!("point {} appears twice ({} among them)", p + 1, path.display()));
        }
        by_point[p] = Some(r);
    }
    let missing: Vec<String> =
        by_point.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| (i + 1).to_string()).collect();
    if !missing.is_empty() {
        return Err(format!("points {} of {total} are missing: merge every shard", missing.join(", ")));
    }
    Ok(by_point.into_iter().map(|r| r.expect("checked")).collect())
}

impl RunFile {
    /// A digest of every setting of the file (sweep included): shards of one file share it.
    pub fn digest(&self) -> String {
        let text = format!("{self:?}");
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in text.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// The measured window this file asks for: a fixed one with `duration_us` (or an operation
    /// count per client), else steady state. Errors are one line, in the flags' words.
    pub fn window(&self) -> Result<crate::measure::Window, String> {
        use crate::measure::{MAX_DURATION_NS, PRECISION, Window};
        let fixed = self.duration_us.is_some() || self.ops_per_client.is_some();
        if fixed && (self.precision.is_some() || self.max_duration_us.is_some()) {
            return Err("--precision and --max-duration-us are for steady-state runs; \
                        --duration-us (or --ops-per-client) fixes the window"
                .into());
        }
        let window = if fixed {
            Window::Fixed {
                warmup_ns: self.warmup_us.unwrap_or(100) * 1000,
                duration_ns: match self.ops_per_client {
                    Some(_) => None,
                    None => self.duration_us.map(|d| d * 1000),
                },
            }
        } else {
            Window::Steady {
                precision: self.precision.unwrap_or(PRECISION),
                max_duration_ns: self.max_duration_us.map_or(MAX_DURATION_NS, |d| d.saturating_mul(1000)),
                min_warmup_ns: self.warmup_us.unwrap_or(0) * 1000,
            }
        };
        window.validate()?;
        Ok(window)
    }

    /// `inserts` on a LOAD point: the operations per client that insert them all (the budget
    /// spread evenly, rounded up). `None` for other workloads, where `inserts` sizes tables only.
    fn load_quota(&self) -> Result<Option<u64>, String> {
        let Some(n) = self.inserts else { return Ok(None) };
        if n == 0 {
            return Err("--inserts must be positive".into());
        }
        if self.duration_us.is_some() || self.ops_per_client.is_some() {
            return Err("--inserts fixes a LOAD's window: not with --duration-us or --ops-per-client".into());
        }
        let spec = crate::workload::WorkloadSpec::from_name(&self.workload, self.keys).map_err(|e| e.to_string())?;
        if !spec.mix.is_insert_only() {
            return Ok(None);
        }
        let clients = self.compute_nodes as u64 * self.threads_per_cn as u64 * self.coroutines as u64;
        Ok(Some(n.div_ceil(clients)))
    }

    /// Parses a run file; errors are one line.
    pub fn parse(text: &str) -> Result<RunFile, String> {
        toml::from_str(text).map_err(|e| format!("bad run file: {}", e.message().replace('\n', " ")))
    }

    /// Every run the file describes, as requests.
    pub fn requests(&self) -> Result<Vec<RunRequest>, String> {
        let profile = Profile::load(&self.profile).map_err(|e| e.to_string())?;
        let load = match self.load.as_str() {
            "bulk" => LoadMethod::Bulk,
            "insert" => LoadMethod::Insert,
            other => return Err(format!("load must be bulk or insert, got '{other}'")),
        };
        let mut points = vec![self.clone()];
        let s = &self.sweep;
        macro_rules! expand {
            ($field:ident, $wrap:expr) => {
                if let Some(values) = &s.$field {
                    if values.is_empty() {
                        return Err(format!("sweep.{} is an empty list", stringify!($field)));
                    }
                    points = points
                        .into_iter()
                        .flat_map(|p| {
                            values.iter().map(move |v| {
                                let mut q = p.clone();
                                q.$field = $wrap(v.clone());
                                q
                            })
                        })
                        .collect();
                }
            };
        }
        if let Some(values) = &s.index {
            if values.is_empty() {
                return Err("sweep.index is an empty list".into());
            }
            points = points
                .into_iter()
                .flat_map(|p| {
                    values.iter().map(move |v| {
                        let mut q = p.clone();
                        match v.split_once(':') {
                            Some((index, config)) => (q.index, q.config) = (index.into(), config.into()),
                            None => (q.index, q.config) = (v.clone(), "default".into()),
                        }
                        q
                    })
                })
                .collect();
        }
        expand!(config, |v| v);
        expand!(workload, |v| v);
        expand!(keys, |v| v);
        expand!(key_bytes, Some);
        expand!(theta, Some);
        expand!(value_bytes, Some);
        expand!(compute_nodes, |v| v);
        expand!(memory_nodes, |v| v);
        expand!(threads_per_cn, |v| v);
        expand!(coroutines, |v| v);
        expand!(seed, |v| v);
        expand!(cache_bytes, Some);
        expand!(crash_server, Some);
        points
            .into_iter()
            .map(|mut p| {
                if p.compute_nodes == 0 || p.memory_nodes == 0 || p.threads_per_cn == 0 || p.coroutines == 0 {
                    return Err("compute_nodes, memory_nodes, threads_per_cn and coroutines must be positive".into());
                }
                p.ops_per_client = p.load_quota()?.or(p.ops_per_client);
                let window = p.window()?;
                let tick_ns = p.tick_us.unwrap_or(crate::measure::TICK_NS / 1000) * 1000;
                if tick_ns == 0 {
                    return Err("--tick-us must be positive".into());
                }
                Ok(RunRequest {
                    index: p.index,
                    config: p.config,
                    workload: p.workload,
                    keys: p.keys,
                    value_bytes: p.value_bytes,
                    key_bytes: p.key_bytes,
                    email_keys: p.email_keys,
                    theta: p.theta,
                    ops_per_client: p.ops_per_client,
                    inserts: p.inserts,
                    cache_bytes: p.cache_bytes,
                    setup: RunSetup {
                        profile: profile.clone(),
                        compute_nodes: p.compute_nodes,
                        memory_nodes: p.memory_nodes,
                        threads_per_cn: p.threads_per_cn,
                        coroutines: p.coroutines,
                        load,
                        window,
                        tick_ns,
                        seed: p.seed,
                        timeseries_ns: p.timeseries_us * 1000,
                        record_history: false,
                        cluster: None,
                        server_crashes: p
                            .crash_server
                            .map(|server| ServerCrash {
                                server,
                                at_ns: p.crash_at_us * 1000,
                                restart_at_ns: p.restart_after_us.map(|r| (p.crash_at_us + r) * 1000),
                            })
                            .into_iter()
                            .collect(),
                    },
                })
            })
            .collect()
    }
}

//! The metric schema every index reports in (DESIGN.md §5), the setup of a run, and what a
//! client's operations are.

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
    /// What each compute node's caches hold before the run (simulator only).
    pub warm: Warm,
}

/// What a compute node's caches are warmed with, outside time, before a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Warm {
    /// Every internal node the budget holds, top down (`IndexKind::warm`): the state a long
    /// warm-up over the whole key space leaves. Every compute node the same.
    #[default]
    Whole,
    /// Compute node `c` of `C` holds the internal nodes on the paths of the loaded items at
    /// places `c, c + C, c + 2C, …` of the load order (`IndexKind::warm_keys`): what it would
    /// have read inserting its share had the load been split over the compute nodes with their
    /// caches on, as CHIME's Fig. 14 loads and measures. An index that does not warm by keys
    /// is warmed whole, and its result says so (`warmed`).
    LoadShare,
    /// Compute node `c` of `C` puts its caches through the searches of the same share, in load
    /// order (`IndexKind::replay_keys`): each from the deepest cached node, the nodes below
    /// cached as a search caches them, with the cache's eviction and charge. The state a
    /// compute node that inserted its share with its caches on is left in, budget, eviction and
    /// all (CHIME's and SMART's evaluations load so before they measure). An index that does
    /// not replay is warmed whole, and its result says so.
    LoadReplay,
}

impl Warm {
    pub fn parse(text: &str) -> Result<Warm, String> {
        match text {
            "whole" => Ok(Warm::Whole),
            "load-share" => Ok(Warm::LoadShare),
            "load-replay" => Ok(Warm::LoadReplay),
            other => Err(format!("warm must be whole, load-share or load-replay, not {other:?}")),
        }
    }
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
    /// Everything that determined the operations: mix, distribution (with its θ), key format,
    /// value size, scan lengths, the loaded keys and the Zipfian's item count (`zipf_items`).
    /// A run file's `theta` or `zipf_items` is here, which the workload's name does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_spec: Option<crate::workload::WorkloadSpec>,
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
    ///
    /// This and the five fields after it are the simulator's own accounting of verbs, bytes
    /// and the memory nodes' NICs. A backend that does not measure them (`--backend rdma`)
    /// leaves them `None`: JSON `null`, an empty CSV cell, `—` in the table, never a 0 that
    /// reads as a measurement.
    pub round_trips_per_op: Option<f64>,
    pub bytes_read_per_op: Option<f64>,
    pub bytes_written_per_op: Option<f64>,
    /// Bytes READ per byte of key and value the operations asked for.
    pub read_amplification: Option<f64>,
    /// Verbs per operation by kind; empty where not measured.
    pub verbs_per_op: BTreeMap<String, f64>,
    pub mn_iops_utilisation: Option<f64>,
    pub mn_bandwidth_utilisation: Option<f64>,
    /// Misses of the NICs' queue-pair context and translation caches per operation, compute
    /// and memory side together; present only when the profile models the caches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_cache_misses_per_op: Option<f64>,
    pub cache_bytes_per_cn: f64,
    /// What the compute nodes' caches were warmed with before the run (`RunSetup::warm`, or
    /// `whole` where the index does not warm by keys).
    #[serde(default)]
    pub warmed: Warm,
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

pub(crate) use crate::measure::round3;

pub(crate) fn useful_bytes(op: &Op, outcome: &Outcome) -> u64 {
    match (op, outcome) {
        (Op::Search { key }, Outcome::Found(v)) => key.len() as u64 + v.as_ref().map_or(0, |v| v.len() as u64),
        (Op::Insert { key, value } | Op::Update { key, value }, _) => (key.len() + value.len()) as u64,
        (Op::Delete { key }, _) => key.len() as u64,
        (Op::Scan { .. }, Outcome::Scanned(pairs)) => pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
        _ => 0,
    }
}

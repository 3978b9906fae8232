//! What clients record of their operations, the same on every backend, and what the measured
//! phase makes of it: the simulator's runner ([`crate::runner`]) and the hardware's
//! ([`crate::hardware`]) each keep an [`OpLog`] and build their result with
//! [`RunResult::measured`], so that a number means the same thing on both.

use super::schema::{Measurement, OpMetrics, RunResult, RunSetup, Warm, op_metrics, round3};
use crate::measure::Estimate;
use dmkit_indexes::spec::Outcome;
use dmkit_indexes::{Counters, IndexKind, InvariantReport};
use dmkit_rdma::MemoryView;
use std::collections::BTreeMap;

/// Per operation name, the latency and completion tick of every successful operation; failed
/// operations with their tick and message; and the clients' index counters.
///
/// A failed operation is counted in `errors`, not in throughput, latency or any per-operation
/// cost: a table that is full answers fast.
#[derive(Debug, Default)]
pub struct OpLog {
    latencies: BTreeMap<&'static str, (Vec<u64>, Vec<u32>)>,
    errors: Vec<(u32, String)>,
    pub counters: Counters,
}

impl OpLog {
    /// Records a task (named `name`, its operations' `outcomes`) that completed in `tick`
    /// after `latency_ns`. Returns whether it succeeded: if any operation failed, only its
    /// errors are recorded.
    pub fn task(&mut self, name: &'static str, outcomes: &[Outcome], latency_ns: u64, tick: usize) -> bool {
        let mut failed = false;
        for outcome in outcomes {
            if let Outcome::Failed(e) = outcome {
                self.errors.push((tick as u32, e.to_string()));
                failed = true;
            }
        }
        if !failed {
            let lat = self.latencies.entry(name).or_default();
            lat.0.push(latency_ns);
            lat.1.push(tick as u32);
        }
        !failed
    }

    /// Adds another log's records (another thread's or process's clients).
    pub fn merge(&mut self, other: OpLog) {
        for (name, (l, ticks)) in other.latencies {
            let e = self.latencies.entry(name).or_default();
            e.0.extend(l);
            e.1.extend(ticks);
        }
        self.errors.extend(other.errors);
        self.counters.merge(&other.counters);
    }

    /// Whether any operation failed, in or out of the measured phase.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The mean of per-batch 99th percentiles and its 95% half-width (the batch-quantile
    /// interval of the tail; see `RunResult::latency_ns_p99_ci95`).
    fn batch_p99_ci(&self, e: &Estimate) -> f64 {
        let k = e.batch_operations.len();
        if k < 2 || e.batch_ticks == 0 {
            return 0.0;
        }
        let mut per_batch: Vec<Vec<u64>> = vec![Vec::new(); k];
        // The batches end with the measured phase (a fixed window may start before them).
        let to = e.warmup_ticks + e.measured_ticks;
        let from = to - k * e.batch_ticks;
        for (lat, ticks) in self.latencies.values() {
            for (&l, &t) in lat.iter().zip(ticks) {
                let t = t as usize;
                if (from..to).contains(&t) {
                    per_batch[(t - from) / e.batch_ticks].push(l);
                }
            }
        }
        let p99: Vec<f64> = per_batch
            .into_iter()
            .filter(|b| !b.is_empty())
            .map(|mut b| {
                b.sort_unstable();
                crate::perftest::percentile(&b, 0.99) as f64
            })
            .collect();
        if p99.len() < 2 {
            return 0.0;
        }
        let n = p99.len() as f64;
        let mean = p99.iter().sum::<f64>() / n;
        let var = p99.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        crate::measure::t_975(p99.len() - 1) * (var / n).sqrt()
    }
}

/// The index's invariant walk after a run, over `memory` (the simulator's, or the memory nodes
/// through queue pairs), judged with the run's own errors: a state only an unfinished operation
/// leaves is accepted only if some operation failed.
pub(crate) fn walk_after_run<K: IndexKind>(
    options: &K::Options,
    memory: &dyn MemoryView,
    log: &OpLog,
) -> Result<InvariantReport, String> {
    let violated = |e: String| format!("after the run, invariant violated: {e}");
    let report = K::check_invariants(options, memory).map_err(violated)?;
    report.check_unfinished(log.has_errors()).map_err(violated)?;
    Ok(report)
}

impl RunResult {
    /// The structure as the walk after the run found it: remote bytes, the bytes per item beyond
    /// the items' own key and value bytes (`item_bytes` each: metadata and empty space), and the
    /// load factor of an index with a capacity.
    pub(crate) fn with_structure(self, report: &InvariantReport, item_bytes: f64) -> RunResult {
        RunResult {
            remote_bytes_used: report.remote_bytes,
            metadata_bytes_per_item: (report.items > 0)
                .then(|| round3((report.remote_bytes as f64 / report.items as f64 - item_bytes).max(0.0))),
            load_factor: report.capacity_items.filter(|&c| c > 0).map(|c| round3(report.items as f64 / c as f64)),
            ..self
        }
    }

    /// What every backend reports the same way, from its clients' `log` and the measured
    /// phase `e` chose (ticks of `setup.tick_ns`): names and shape; throughput as the
    /// estimate's mean ± its interval, and the verdict; latencies overall and per operation
    /// name, and errors, of the operations that completed in the measured phase. The
    /// backend-specific metrics start unmeasured (verb costs and utilisation `None`) or at
    /// zero (caches, counters), for the backend to fill in.
    pub(crate) fn measured(
        index: &str,
        names: (&str, &str),
        profile: String,
        setup: &RunSetup,
        (clients, keys): (u32, u64),
        e: &Estimate,
        log: &OpLog,
    ) -> RunResult {
        let tick_ns = setup.tick_ns;
        let (from, to) = (e.warmup_ticks, e.warmup_ticks + e.measured_ticks);
        let in_window = |t: &u32| (from..to).contains(&(*t as usize));
        let measured_ns = (e.measured_ticks as u64 * tick_ns).max(1);
        let seconds = measured_ns as f64 / 1e9;
        let samples = |(lat, ticks): &(Vec<u64>, Vec<u32>)| -> Vec<u64> {
            lat.iter().zip(ticks).filter(|(_, t)| in_window(t)).map(|(l, _)| *l).collect()
        };
        let per_op: BTreeMap<String, OpMetrics> =
            log.latencies.iter().map(|(k, v)| (k.to_string(), op_metrics(samples(v), seconds))).collect();
        let mut overall = op_metrics(log.latencies.values().flat_map(samples).collect(), seconds);
        let mops = |per_tick: f64| round3(per_tick / tick_ns as f64 * 1e3);
        overall.throughput_mops = mops(e.mean);
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        for (t, message) in &log.errors {
            if in_window(t) {
                *errors.entry(message.clone()).or_default() += 1;
            }
        }
        let batch_ns = e.batch_ticks as u64 * tick_ns;
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
            workload_spec: None,
            duration_ns: measured_ns,
            operations: overall.operations,
            throughput_mops: overall.throughput_mops,
            throughput_mops_ci95: mops(e.ci95),
            steady: e.steady(),
            unsteady_reasons: e.unsteady.clone(),
            measurement: Measurement::of(&setup.window),
            warmup_ns: e.warmup_ticks as u64 * tick_ns,
            measured_ns,
            batches: e.batch_operations.len(),
            batch_ns,
            batch_mops: e.batch_mops(batch_ns),
            series_mops: Vec::new(),
            series_bin_ns: 0,
            trend_t: round3(e.slope_t),
            von_neumann_z: round3(e.von_neumann_z),
            latency_ns_p99_ci95: log.batch_p99_ci(e).round() as u64,
            latency_ns_p50: overall.latency_ns_p50,
            latency_ns_p90: overall.latency_ns_p90,
            latency_ns_p99: overall.latency_ns_p99,
            latency_ns_p999: overall.latency_ns_p999,
            per_op,
            round_trips_per_op: None,
            bytes_read_per_op: None,
            bytes_written_per_op: None,
            read_amplification: None,
            verbs_per_op: BTreeMap::new(),
            mn_iops_utilisation: None,
            mn_bandwidth_utilisation: None,
            nic_cache_misses_per_op: None,
            cache_bytes_per_cn: 0.0,
            warmed: Warm::Whole,
            cache_hit_ratio: None,
            remote_bytes_used: 0,
            metadata_bytes_per_item: None,
            load_factor: None,
            retries_per_op: 0.0,
            lock_failures: 0,
            cas_failures: 0,
            rdwc: None,
            errors,
            index_counters: log.counters.events.iter().map(|(k, v)| (k.to_string(), v)).collect(),
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

//! A run's results for a person: the table, the verdict in words, and CSV.

use super::schema::{Measurement, RunResult};

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
            "{:<10} {:<10} {:>7} {:>19} {:>7} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}\n",
            r.index,
            r.workload,
            r.clients,
            mean_ci(r.throughput_mops, r.throughput_mops_ci95),
            if r.steady { "yes" } else { "NO" },
            r.latency_ns_p50,
            r.latency_ns_p99,
            r.latency_ns_p999,
            fixed(r.round_trips_per_op, 2),
            fixed(r.bytes_read_per_op, 1),
            fixed(r.bytes_written_per_op, 1)
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

/// A table cell of a metric the backend may not measure: `—` for none.
fn fixed(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{v:.decimals$}"))
}

/// A CSV cell of a metric the backend may not measure: empty for none.
fn cell(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
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
            cell(r.round_trips_per_op),
            cell(r.bytes_read_per_op),
            cell(r.bytes_written_per_op),
            cell(r.read_amplification),
            cell(r.mn_iops_utilisation),
            cell(r.mn_bandwidth_utilisation),
            r.cache_bytes_per_cn,
            r.remote_bytes_used,
            r.retries_per_op,
            r.lock_failures,
            r.cas_failures
        ));
    }
    out
}

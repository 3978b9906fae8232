//! `dmkit reproduce PAPER [FIGURE]`: a paper's figure as a run file plus the paper's numbers.
//!
//! A figure file (`experiments/configs/figures/<paper>/<figure>.toml`) holds:
//!
//! ```toml
//! paper = "smart"
//! figure = "fig14"
//! title = "YCSB throughput, 16 CNs, 2 MNs"
//! source = "SMART (TOS'24) Fig. 14(b) and (d), and Section 5.2"
//! tolerance = 0.20                       # |ours / paper - 1| allowed, for values and ratios
//!
//! [compare]                              # the comparison point of each series
//! metric = "throughput_mops"
//! over = "peak"                          # the peak over the sweep (or "min", "last")
//! series = ["index", "config", "workload"]
//!
//! [[published]]                          # a number the paper states, for one series
//! series = { index = "smart", workload = "ycsb-c" }
//! value = 96.0
//!
//! [[ratio]]                              # a ratio the paper states between two series
//! numerator = { index = "smart", workload = "ycsb-a" }
//! denominator = { index = "sherman", config = "sherman-smart", workload = "ycsb-a" }
//! value = 6.1
//!
//! [[ratio]]                              # a range the paper states ("+37.3% to +54.5%"):
//! numerator = { index = "hstore", workload = "ycsb-a" }
//! denominator = { index = "sherman", workload = "ycsb-a" }
//! range = [1.373, 1.545]                 # within if ours is in the range widened by the tolerance
//!
//! [[published]]                          # a share of one result: metric / per, of the same row
//! series = { index = "hstore", workload = "db-put", clients = "32" }
//! metric = "index_counters.put_queue_ns" # dotted paths reach into nested fields
//! per = "index_counters.put_latency_ns"
//! range = [0.50, 0.66]
//!
//! [run.reduced]                          # a run file (with its [run.reduced.sweep])
//! [run.full]
//! ```
//!
//! Reproducing runs the sweep at the chosen scale, finds each series' comparison point, and
//! writes `result.jsonl`, `result.csv`, the throughput–latency plot and `report.md`: the paper's
//! numbers beside ours with their ratio and whether it is within the tolerance. A series or
//! field the results lack is reported as missing, never as a pass.

use crate::run::{RunFile, RunResult, csv};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where figure files live, from the repository's root.
pub const FIGURES_DIR: &str = "experiments/configs/figures";

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub paper: String,
    pub figure: String,
    pub title: String,
    pub source: String,
    pub tolerance: f64,
    pub compare: Compare,
    #[serde(default)]
    pub published: Vec<Published>,
    #[serde(default)]
    pub ratio: Vec<Ratio>,
    pub run: Scales,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compare {
    pub metric: String,
    /// `peak`, `min` or `last` (in sweep order), or `extrapolate`: the least-squares line of
    /// the metric over field `x`, evaluated at `at` (a quantity measured at smaller scales).
    pub over: String,
    pub series: Vec<String>,
    #[serde(default)]
    pub x: Option<String>,
    #[serde(default)]
    pub at: Option<f64>,
}

/// Which results a number is about: every field named must match.
pub type Selector = BTreeMap<String, String>;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub series: Selector,
    /// The number (or the middle of `range`).
    #[serde(default)]
    pub value: Option<f64>,
    /// A range the paper states instead of one number.
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    /// This number's metric, instead of `compare.metric`.
    #[serde(default)]
    pub metric: Option<String>,
    /// Divide the metric by this one of the same row (a share).
    #[serde(default)]
    pub per: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ratio {
    pub numerator: Selector,
    pub denominator: Selector,
    #[serde(default)]
    pub value: Option<f64>,
    #[serde(default)]
    pub range: Option<[f64; 2]>,
}

/// What the paper states: one number, or a range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Claim {
    Value(f64),
    Range(f64, f64),
}

impl Claim {
    fn of(value: Option<f64>, range: Option<[f64; 2]>) -> Result<Claim, String> {
        match (value, range) {
            (Some(v), None) if v.is_finite() && v != 0.0 => Ok(Claim::Value(v)),
            (None, Some([lo, hi])) if lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi => {
                Ok(Claim::Range(lo, hi))
            }
            _ => Err(
                "each published number and ratio needs a non-zero `value` or a `range = [low, high]` (0 < low <= high)"
                    .into(),
            ),
        }
    }

    fn middle(self) -> f64 {
        match self {
            Claim::Value(v) => v,
            Claim::Range(lo, hi) => (lo + hi) / 2.0,
        }
    }

    /// Whether `ours` is the number within `tolerance`, or in the range widened by it.
    fn holds(self, ours: f64, tolerance: f64) -> bool {
        match self {
            Claim::Value(v) => (ours / v - 1.0).abs() <= tolerance,
            Claim::Range(lo, hi) => lo * (1.0 - tolerance) <= ours && ours <= hi * (1.0 + tolerance),
        }
    }

    fn show(self) -> String {
        match self {
            Claim::Value(v) => format!("{v}"),
            Claim::Range(lo, hi) => format!("{lo}–{hi}"),
        }
    }
}

impl Published {
    pub fn claim(&self) -> Result<Claim, String> {
        Claim::of(self.value, self.range)
    }
}

impl Ratio {
    pub fn claim(&self) -> Result<Claim, String> {
        Claim::of(self.value, self.range)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scales {
    pub reduced: RunFile,
    pub full: Option<RunFile>,
}

impl Figure {
    pub fn parse(text: &str) -> Result<Figure, String> {
        let f: Figure =
            toml::from_str(text).map_err(|e| format!("bad figure file: {}", e.message().replace('\n', " ")))?;
        if !(f.tolerance > 0.0 && f.tolerance.is_finite()) {
            return Err("bad figure file: tolerance must be positive".into());
        }
        if !["peak", "min", "last", "extrapolate"].contains(&f.compare.over.as_str()) {
            return Err(format!(
                "bad figure file: compare.over is '{}' (peak, min, last, extrapolate)",
                f.compare.over
            ));
        }
        if f.compare.over == "extrapolate" && (f.compare.x.is_none() || f.compare.at.is_none()) {
            return Err("bad figure file: compare.over = \"extrapolate\" needs compare.x and compare.at".into());
        }
        for p in &f.published {
            p.claim().map_err(|e| format!("bad figure file: {e}"))?;
        }
        for r in &f.ratio {
            r.claim().map_err(|e| format!("bad figure file: {e}"))?;
        }
        Ok(f)
    }
}

/// A field of a result by name, or by a dotted path into nested objects
/// (`index_counters.put_queue_ns`).
pub fn field<'a>(row: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(row, |v, part| v.get(part))
}

fn matches(row: &Value, sel: &Selector) -> bool {
    sel.iter().all(|(k, v)| match field(row, k) {
        Some(Value::String(s)) => s == v,
        // Numbers and booleans match their JSON text ("64", "true").
        Some(other) => serde_json::to_string(other).is_ok_and(|text| text == *v),
        None => false,
    })
}

/// A least-squares line `y = intercept + slope * x` through the results `sel` selects.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    pub points: Vec<(f64, f64)>,
    pub intercept: f64,
    pub slope: f64,
}

/// The line of `compare.metric` over `compare.x` through the selected results (two or more
/// distinct x values), or `None`.
pub fn fit(rows: &[Value], compare: &Compare, sel: &Selector) -> Option<Fit> {
    let x = compare.x.as_ref()?;
    let points: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| matches(r, sel))
        .filter_map(|r| Some((field(r, x)?.as_f64()?, field(r, &compare.metric)?.as_f64()?)))
        .collect();
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if points.len() < 2 || sxx == 0.0 {
        return None;
    }
    let slope = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
    Some(Fit { intercept: my - slope * mx, slope, points })
}

/// The comparison value of the results `sel` selects: peak, min or last of the metric, or its
/// extrapolation.
pub fn comparison_point(rows: &[Value], compare: &Compare, sel: &Selector) -> Option<f64> {
    comparison_of(rows, compare, sel, &compare.metric, None)
}

/// The comparison point of `metric` (divided by `per` of the same row, if given).
fn comparison_of(rows: &[Value], compare: &Compare, sel: &Selector, metric: &str, per: Option<&str>) -> Option<f64> {
    if compare.over == "extrapolate" && per.is_none() && metric == compare.metric {
        let f = fit(rows, compare, sel)?;
        return Some(f.intercept + f.slope * compare.at?);
    }
    let values: Vec<f64> = rows
        .iter()
        .filter(|r| matches(r, sel))
        .filter_map(|r| {
            let v = field(r, metric)?.as_f64()?;
            match per {
                None => Some(v),
                Some(p) => Some(v / field(r, p)?.as_f64().filter(|d| *d != 0.0)?),
            }
        })
        .collect();
    match compare.over.as_str() {
        "peak" => values.iter().copied().reduce(f64::max),
        "min" => values.iter().copied().reduce(f64::min),
        _ => values.last().copied(),
    }
}

fn describe(sel: &Selector) -> String {
    sel.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// The markdown report: every published number and ratio beside ours. Returns the report and
/// how many comparisons fell outside the tolerance or were missing.
pub fn report(figure: &Figure, rows: &[Value], scale: &str) -> (String, usize) {
    let mut out = String::new();
    let mut failures = 0;
    let _ = writeln!(out, "# {} {}: {}\n", figure.paper, figure.figure, figure.title);
    let _ = writeln!(
        out,
        "Source: {}. Scale: {scale}. Comparison point: {} of `{}` per series; tolerance ±{:.0}%.\n",
        figure.source,
        figure.compare.over,
        figure.compare.metric,
        figure.tolerance * 100.0
    );
    let mut verdict = |paper: Claim, ours: Option<f64>| match ours {
        Some(o) => {
            let ratio = o / paper.middle();
            let ok = paper.holds(o, figure.tolerance);
            if !ok {
                failures += 1;
            }
            (format!("{o:.3}"), format!("{ratio:.2}"), if ok { "yes" } else { "**no**" }.to_string())
        }
        None => {
            failures += 1;
            ("missing".into(), "-".into(), "**missing**".into())
        }
    };
    if figure.compare.over == "extrapolate" {
        let mut sels: Vec<&Selector> = figure.published.iter().map(|p| &p.series).collect();
        sels.extend(figure.ratio.iter().flat_map(|r| [&r.numerator, &r.denominator]));
        sels.dedup();
        let x = figure.compare.x.as_deref().unwrap_or("x");
        let _ = writeln!(
            out,
            "Fits of `{}` over `{x}` (least squares), evaluated at {x} = {}:\n",
            figure.compare.metric,
            figure.compare.at.unwrap_or(0.0)
        );
        let _ =
            writeln!(out, "| series | points ({x}, value) | intercept | slope | at target |\n|---|---|---|---|---|");
        let mut seen = Vec::new();
        for sel in sels {
            if seen.contains(&sel) {
                continue;
            }
            seen.push(sel);
            match fit(rows, &figure.compare, sel) {
                Some(f) => {
                    let pts: Vec<String> = f.points.iter().map(|p| format!("({}, {:.4e})", p.0, p.1)).collect();
                    let at = f.intercept + f.slope * figure.compare.at.unwrap_or(0.0);
                    let _ = writeln!(
                        out,
                        "| {} | {} | {:.4e} | {:.4e} | {at:.4e} |",
                        describe(sel),
                        pts.join(" "),
                        f.intercept,
                        f.slope
                    );
                }
                None => {
                    let _ = writeln!(out, "| {} | too few points | - | - | - |", describe(sel));
                }
            }
        }
        out.push('\n');
    }
    if !figure.published.is_empty() {
        let _ = writeln!(out, "| series | paper | ours | ours / paper | within |\n|---|---|---|---|---|");
        for p in &figure.published {
            let claim = p.claim().expect("checked when the figure was parsed");
            let metric = p.metric.as_deref().unwrap_or(&figure.compare.metric);
            let ours = comparison_of(rows, &figure.compare, &p.series, metric, p.per.as_deref());
            let (ours, ratio, ok) = verdict(claim, ours);
            let what = match (&p.metric, &p.per) {
                (None, None) => String::new(),
                (m, None) => format!(" `{}`", m.as_deref().unwrap_or(metric)),
                (_, Some(per)) => format!(" `{metric}` / `{per}`"),
            };
            let _ = writeln!(out, "| {}{what} | {} | {ours} | {ratio} | {ok} |", describe(&p.series), claim.show());
        }
        out.push('\n');
    }
    if !figure.ratio.is_empty() {
        let _ = writeln!(out, "| ratio | paper | ours | ours / paper | within |\n|---|---|---|---|---|");
        for r in &figure.ratio {
            let n = comparison_point(rows, &figure.compare, &r.numerator);
            let d = comparison_point(rows, &figure.compare, &r.denominator);
            let ours = match (n, d) {
                (Some(n), Some(d)) if d > 0.0 => Some(n / d),
                _ => None,
            };
            let claim = r.claim().expect("checked when the figure was parsed");
            let (ours, ratio, ok) = verdict(claim, ours);
            let _ = writeln!(
                out,
                "| ({}) / ({}) | {} | {ours} | {ratio} | {ok} |",
                describe(&r.numerator),
                describe(&r.denominator),
                claim.show()
            );
        }
        out.push('\n');
    }
    (out, failures)
}

/// Figure files of `paper` under `figures` (all, or the one named `figure`), sorted.
pub fn figure_files(figures: &Path, paper: &str, figure: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let dir = figures.join(paper);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    if let Some(f) = figure {
        files.retain(|p| p.file_stem().is_some_and(|s| s == f));
    }
    if files.is_empty() {
        return Err(match figure {
            Some(f) => {
                format!("no figure '{f}' for paper '{paper}' in {} (figures come with the index issues)", dir.display())
            }
            None => format!("no figures for paper '{paper}' in {} (figures come with the index issues)", dir.display()),
        });
    }
    Ok(files)
}

/// Runs one figure at `scale` and writes its outputs into `out`; returns the report and the
/// number of comparisons outside the tolerance.
pub fn reproduce(figure: &Figure, scale: &str, out: &Path, threads: usize) -> Result<(String, usize), String> {
    let run = match scale {
        "reduced" => &figure.run.reduced,
        "full" => figure.run.full.as_ref().ok_or("this figure has no full-scale run")?,
        other => return Err(format!("--scale must be reduced or full, got '{other}'")),
    };
    let requests = run.requests()?;
    let results: Vec<RunResult> =
        crate::run::run_requests(&requests, threads, &format!("{} {}", figure.paper, figure.figure))
            .into_iter()
            .collect::<Result<_, _>>()?;
    let lines: Vec<String> =
        results.iter().map(serde_json::to_string).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let rows: Vec<Value> =
        lines.iter().map(|l| serde_json::from_str(l)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    std::fs::write(out.join("result.jsonl"), lines.iter().map(|l| format!("{l}\n")).collect::<String>())
        .map_err(|e| e.to_string())?;
    std::fs::write(out.join("result.csv"), csv(&results)).map_err(|e| e.to_string())?;
    let spec = crate::plot::PlotSpec {
        series: figure.compare.series.clone(),
        title: figure.title.clone(),
        ..crate::plot::PlotSpec::throughput_latency()
    };
    crate::plot::plot(&rows, &spec, &out.join("curve"))?;
    let (text, failures) = report(figure, &rows, scale);
    std::fs::write(out.join("report.md"), &text).map_err(|e| e.to_string())?;
    Ok((text, failures))
}

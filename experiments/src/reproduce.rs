//! `dmkit reproduce PAPER [FIGURE]`: a paper's figure as a run file plus the paper's numbers.
//!
//! A figure file (`experiments/configs/figures/<paper>/<figure>.toml`, its schema in
//! [`crate::figure`]) holds the paper's numbers and the run files of two scales.
//!
//! Reproducing runs the sweep at the chosen scale (each run measured to steady state unless
//! the figure fixes its window; see [`crate::measure`]), finds each series' comparison point,
//! and writes `result.jsonl`, `result.csv`, the throughput–latency plot with 95% error bars,
//! the throughput time series of every run, and `report.md`: the paper's numbers beside ours,
//! ours as mean ± 95% half-width, their ratio, whether it is within the tolerance and, for
//! ratios, whether the paper's ranking of the two systems holds. A series or field the results
//! lack is reported as missing, never as a pass.
//!
//! **Intervals.** A point's interval is its run's (`throughput_mops_ci95`, batch means). Points
//! of a sweep over `seed` that differ in nothing else are one point: the mean over the seeds,
//! with the seeds' own 95% interval (`t(n−1) · s/√n`). A ratio's interval is propagated from
//! its two points' (first order: relative half-widths add in quadrature). Metrics other than
//! throughput (counters, bytes, extrapolations) carry none.
//!
//! **Rankings.** A ratio the paper states above 1 says its numerator beats its denominator
//! (below 1, the reverse); ours *holds* the ranking when it is on the same side of 1 with its
//! interval clear of 1, is *reversed* when it is clear of 1 on the other side, and *unresolved*
//! when its interval spans 1. A paper range that contains 1 claims no ranking.

use crate::run::{RunResult, csv};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use crate::figure::*;

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

/// A least-squares line `y = intercept + slope * t(x)` through the results `sel` selects, where
/// `t` is the figure's [`XScale`] (`x` or `ln x`).
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// The points, `x` as measured (not transformed).
    pub points: Vec<(f64, f64)>,
    pub intercept: f64,
    pub slope: f64,
    pub scale: XScale,
}

impl Fit {
    /// The line's value at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * self.scale.of(x)
    }
}

/// The line of `metric` over `compare.x` (on `compare.x_scale`) through the selected results
/// (two or more distinct x values), or `None`.
pub fn fit(rows: &[Value], compare: &Compare, sel: &Selector, metric: &str) -> Option<Fit> {
    line(fit_points(rows, compare, sel, metric), compare.x_scale)
}

/// The selected results' (x, metric) points, in row order.
fn fit_points(rows: &[Value], compare: &Compare, sel: &Selector, metric: &str) -> Vec<(f64, f64)> {
    let Some(x) = compare.x.as_ref() else { return Vec::new() };
    rows.iter()
        .filter(|r| matches(r, sel))
        .filter_map(|r| Some((field(r, x)?.as_f64()?, field(r, metric)?.as_f64()?)))
        .filter(|(x, _)| compare.x_scale == XScale::Linear || *x > 0.0)
        .collect()
}

/// The least-squares line through `points` on `scale` (two or more distinct x values), or `None`.
fn line(points: Vec<(f64, f64)>, scale: XScale) -> Option<Fit> {
    let n = points.len() as f64;
    let t: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (scale.of(x), y)).collect();
    let (mx, my) = (t.iter().map(|p| p.0).sum::<f64>() / n, t.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = t.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if points.len() < 2 || sxx == 0.0 {
        return None;
    }
    let slope = t.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
    Some(Fit { intercept: my - slope * mx, slope, points, scale })
}

/// The test of an extrapolation on one series: the line through the points below the
/// largest x, its value there, and the mean of the measurements there.
#[derive(Clone, Debug, PartialEq)]
pub struct Holdout {
    pub at: f64,
    pub fit: Fit,
    pub predicted: f64,
    pub measured: f64,
}

impl Holdout {
    /// (predicted − measured) / measured.
    pub fn error(&self) -> f64 {
        (self.predicted - self.measured) / self.measured
    }
}

/// The held-out test of `sel`'s extrapolation of `metric`, if the figure asks for one and the
/// results have two smaller x values below the largest.
pub fn holdout(rows: &[Value], compare: &Compare, sel: &Selector, metric: &str) -> Option<Holdout> {
    if !compare.holdout {
        return None;
    }
    let points = fit_points(rows, compare, sel, metric);
    let at = points.iter().map(|p| p.0).reduce(f64::max)?;
    let there: Vec<f64> = points.iter().filter(|p| p.0 == at).map(|p| p.1).collect();
    let fit = line(points.into_iter().filter(|p| p.0 < at).collect(), compare.x_scale)?;
    let predicted = fit.at(at);
    Some(Holdout { at, fit, predicted, measured: there.iter().sum::<f64>() / there.len() as f64 })
}

/// The comparison value of the results `sel` selects: peak, min or last of the metric, or its
/// extrapolation.
pub fn comparison_point(rows: &[Value], compare: &Compare, sel: &Selector) -> Option<f64> {
    point_of(rows, compare, sel, &compare.metric, None).map(|p| p.value)
}

/// A comparison point: the value, its 95% half-width if the metric has one, and whether the
/// run behind it was steady (if the rows say).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub value: f64,
    pub ci95: Option<f64>,
    pub steady: Option<bool>,
}

/// The comparison point of `metric` (divided by `per` of the same row, if given).
fn point_of(rows: &[Value], compare: &Compare, sel: &Selector, metric: &str, per: Option<&str>) -> Option<Point> {
    if compare.over == "extrapolate" && per.is_none() {
        let f = fit(rows, compare, sel, metric)?;
        return Some(Point { value: f.at(compare.at?), ci95: None, steady: None });
    }
    let points: Vec<Point> = rows
        .iter()
        .filter(|r| matches(r, sel))
        .filter_map(|r| {
            let v = field(r, metric)?.as_f64()?;
            let (value, ci95) = match per {
                None => (v, field(r, &format!("{metric}_ci95")).and_then(Value::as_f64)),
                Some(p) => (v / field(r, p)?.as_f64().filter(|d| *d != 0.0)?, None),
            };
            Some(Point { value, ci95, steady: field(r, "steady").and_then(Value::as_bool) })
        })
        .collect();
    match compare.over.as_str() {
        "peak" => points.iter().copied().reduce(|a, b| if b.value > a.value { b } else { a }),
        "min" => points.iter().copied().reduce(|a, b| if b.value < a.value { b } else { a }),
        _ => points.last().copied(),
    }
}

/// A result field as a table or legend names it: a swept skew
/// (`workload_spec.distribution.theta`) is θ; any other field its path.
pub fn field_name(path: &str) -> &str {
    match path {
        "theta" => "θ",
        p if p.ends_with(".theta") => "θ",
        "workload_spec.shuffled_load" => "shuffled",
        p => p,
    }
}

fn describe(sel: &Selector) -> String {
    sel.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// A selector in few words: the index, its configuration where it says more, the workload,
/// then any other field as `name=value` (`smart ycsb-a`, `sherman sherman-smart ycsb-a`).
fn short(sel: &Selector) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(i) = sel.get("index") {
        parts.push(i.clone());
    }
    if let Some(c) = sel.get("config") {
        if sel.get("index") != Some(c) {
            parts.push(c.clone());
        }
    }
    if let Some(w) = sel.get("workload") {
        parts.push(w.clone());
    }
    for (k, v) in sel {
        if !["index", "config", "workload"].contains(&k.as_str()) {
            parts.push(format!("{}={v}", field_name(k)));
        }
    }
    parts.join(" ")
}

/// A number as a table shows it: three decimals, or four significant digits when large.
fn number(v: f64) -> String {
    if v.abs() >= 1e5 { format!("{v:.3e}") } else { format!("{v:.3}") }
}

/// Whether our ratio keeps the ranking the paper's implies (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ranking {
    Holds,
    Reversed,
    Unresolved,
    /// The paper's number (or range) does not rank the two: it is about 1.
    NotClaimed,
}

impl Ranking {
    fn judge(paper: Claim, ours: f64, ci95: Option<f64>) -> Ranking {
        let (lo, hi) = match paper {
            Claim::Value(v) => (v, v),
            Claim::Range(lo, hi) => (lo, hi),
        };
        if lo <= 1.0 && 1.0 <= hi {
            return Ranking::NotClaimed;
        }
        let paper_above = lo > 1.0;
        let h = ci95.unwrap_or(0.0);
        if ours - h > 1.0 || ours + h < 1.0 {
            if (ours > 1.0) == paper_above { Ranking::Holds } else { Ranking::Reversed }
        } else {
            Ranking::Unresolved
        }
    }

    fn show(self) -> &'static str {
        match self {
            Ranking::Holds => "holds",
            Ranking::Reversed => "**reversed**",
            Ranking::Unresolved => "unresolved (CI spans 1)",
            Ranking::NotClaimed => "-",
        }
    }
}

/// One number of a figure beside the paper's.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub paper: String,
    pub figure: String,
    /// `value` (a published number) or `ratio`.
    pub kind: &'static str,
    /// Which series (and metric) it is about, in words.
    pub what: String,
    pub paper_value: Option<f64>,
    pub paper_range: Option<[f64; 2]>,
    pub ours: Option<f64>,
    pub ours_ci95: Option<f64>,
    pub ours_over_paper: Option<f64>,
    pub within: bool,
    /// Whether every run behind our number was steady (`None`: the rows do not say).
    pub steady: Option<bool>,
    pub ranking: Option<Ranking>,
    /// The figure file's account of the gap ([`crate::figure::Published::why`]).
    pub why: Option<String>,
}

impl Comparison {
    /// Outside the tolerance (or missing), or the paper's ranking of the two systems reversed.
    pub fn misses(&self) -> bool {
        !self.within || self.ranking == Some(Ranking::Reversed)
    }

    /// `mean ± half-width`, or the value alone, or `missing`.
    pub fn ours_text(&self) -> String {
        match (self.ours, self.ours_ci95) {
            (Some(v), Some(h)) if v.abs() >= 1e5 => format!("{} ± {}", number(v), number(h)),
            (Some(v), Some(h)) => format!("{v:.3} ± {h:.3}"),
            (Some(v), None) => number(v),
            (None, _) => "missing".into(),
        }
    }

    pub fn paper_text(&self) -> String {
        match (self.paper_value, self.paper_range) {
            (Some(v), _) if v.abs() >= 1e5 => number(v),
            (Some(v), _) => format!("{v}"),
            (None, Some([lo, hi])) => format!("{lo}–{hi}"),
            _ => "-".into(),
        }
    }
}

fn steady_text(s: Option<bool>) -> &'static str {
    match s {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "-",
    }
}

/// Every comparison a figure states, judged on `rows`.
pub fn comparisons(figure: &Figure, rows: &[Value]) -> Vec<Comparison> {
    let mut out = Vec::new();
    let base = |kind: &'static str, what: String, claim: Claim, why: &Option<String>| {
        let (paper_value, paper_range) = match claim {
            Claim::Value(v) => (Some(v), None),
            Claim::Range(lo, hi) => (None, Some([lo, hi])),
        };
        Comparison {
            paper: figure.paper.clone(),
            figure: figure.figure.clone(),
            kind,
            what,
            paper_value,
            paper_range,
            ours: None,
            ours_ci95: None,
            ours_over_paper: None,
            within: false,
            steady: None,
            ranking: None,
            why: why.clone(),
        }
    };
    for p in &figure.published {
        let claim = p.claim().expect("checked when the figure was parsed");
        let metric = figure.metric_of(p);
        let what = match (&p.metric, &p.per) {
            (None, None) => short(&p.series),
            (m, None) => format!("{} `{}`", short(&p.series), m.as_deref().unwrap_or(metric)),
            (_, Some(per)) => format!("{} `{metric}` / `{per}`", short(&p.series)),
        };
        let mut c = base("value", what, claim, &p.why);
        if let Some(pt) = point_of(rows, &figure.compare, &p.series, metric, p.per.as_deref()) {
            c.ours = Some(pt.value);
            c.ours_ci95 = pt.ci95;
            c.steady = pt.steady;
            c.ours_over_paper = Some(pt.value / claim.middle());
            c.within = claim.holds(pt.value, figure.tolerance);
        }
        out.push(c);
    }
    for r in &figure.ratio {
        let claim = r.claim().expect("checked when the figure was parsed");
        let mut c = base("ratio", format!("{} / {}", short(&r.numerator), short(&r.denominator)), claim, &r.why);
        let n = point_of(rows, &figure.compare, &r.numerator, &figure.compare.metric, None);
        let d = point_of(rows, &figure.compare, &r.denominator, &figure.compare.metric, None);
        if let (Some(n), Some(d)) = (n, d) {
            if d.value > 0.0 {
                let ratio = n.value / d.value;
                let ci = match (n.ci95, d.ci95) {
                    (Some(hn), Some(hd)) if n.value > 0.0 => {
                        Some(ratio * ((hn / n.value).powi(2) + (hd / d.value).powi(2)).sqrt())
                    }
                    _ => None,
                };
                c.ours = Some(ratio);
                c.ours_ci95 = ci;
                c.steady = match (n.steady, d.steady) {
                    (Some(a), Some(b)) => Some(a && b),
                    (a, b) => a.or(b),
                };
                c.ours_over_paper = Some(ratio / claim.middle());
                c.within = claim.holds(ratio, figure.tolerance);
                c.ranking = Some(Ranking::judge(claim, ratio, ci));
            }
        }
        out.push(c);
    }
    out
}

/// The markdown report: every published number and ratio beside ours. Returns the report and
/// how many comparisons fell outside the tolerance or were missing.
pub fn report(figure: &Figure, rows: &[Value], scale: &str) -> (String, usize) {
    let all = comparisons(figure, rows);
    (report_text(figure, rows, scale, &all, None), all.iter().filter(|c| !c.within).count())
}

/// The report's text for comparisons already judged; `footer` (how the figure was measured
/// and how long it took) goes under the title.
fn report_text(figure: &Figure, rows: &[Value], scale: &str, all: &[Comparison], footer: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {} {}: {}\n", figure.paper, figure.figure, figure.title);
    let _ = writeln!(
        out,
        "Source: {}. Scale: {scale}. Comparison point: {} of `{}` per series; tolerance ±{:.0}%.\n",
        figure.source,
        figure.compare.over,
        figure.compare.metric,
        figure.tolerance * 100.0
    );
    if let Some(f) = footer {
        let _ = writeln!(out, "{f}\n");
    }
    if figure.compare.over == "extrapolate" {
        let main = figure.compare.metric.as_str();
        // Every (series, metric) the figure judges: a published number may name its own metric.
        let mut fitted: Vec<(&Selector, &str)> = Vec::new();
        let wanted = figure
            .published
            .iter()
            .filter(|p| p.per.is_none())
            .map(|p| (&p.series, figure.metric_of(p)))
            .chain(figure.ratio.iter().flat_map(|r| [(&r.numerator, main), (&r.denominator, main)]));
        for w in wanted {
            if !fitted.contains(&w) {
                fitted.push(w);
            }
        }
        let x = figure.compare.x.as_deref().unwrap_or("x");
        let on = match figure.compare.x_scale {
            XScale::Linear => format!("`{x}`"),
            XScale::Log => format!("`ln {x}`"),
        };
        let target = figure.compare.at.unwrap_or(0.0);
        let also = &figure.compare.also_at;
        let _ = writeln!(out, "Fits over {on} (least squares), evaluated at {x} = {target}:\n");
        let also_heads: String = also.iter().map(|a| format!(" at {a:e} |")).collect();
        let _ = writeln!(
            out,
            "| series | metric | points ({x}, value) | intercept | slope | at target |{also_heads}\n|---|---|---|---|---|---|{}",
            "---|".repeat(also.len())
        );
        for (sel, metric) in &fitted {
            match fit(rows, &figure.compare, sel, metric) {
                Some(f) => {
                    let pts: Vec<String> = f.points.iter().map(|p| format!("({}, {:.4e})", p.0, p.1)).collect();
                    let more: String = also.iter().map(|a| format!(" {:.4e} |", f.at(*a))).collect();
                    let _ = writeln!(
                        out,
                        "| {} | {metric} | {} | {:.4e} | {:.4e} | {:.4e} |{more}",
                        describe(sel),
                        pts.join(" "),
                        f.intercept,
                        f.slope,
                        f.at(target)
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "| {} | {metric} | too few points | - | - | - |{}",
                        describe(sel),
                        " - |".repeat(also.len())
                    );
                }
            }
        }
        out.push('\n');
        if figure.compare.holdout {
            let _ = writeln!(
                out,
                "The model tested on the largest {x} measured: the line through the smaller points, evaluated \
                 there, against the measurement there:\n\n| series | metric | fitted on | at | predicted | measured | error |\n|---|---|---|---|---|---|---|"
            );
            for (sel, metric) in &fitted {
                match holdout(rows, &figure.compare, sel, metric) {
                    Some(t) => {
                        let xs: Vec<String> = t.fit.points.iter().map(|p| format!("{}", p.0)).collect();
                        let _ = writeln!(
                            out,
                            "| {} | {metric} | {x} = {} | {} | {:.4e} | {:.4e} | {:+.1}% |",
                            describe(sel),
                            xs.join(", "),
                            t.at,
                            t.predicted,
                            t.measured,
                            100.0 * t.error()
                        );
                    }
                    None => {
                        let _ =
                            writeln!(out, "| {} | {metric} | fewer than three sizes | - | - | - | - |", describe(sel));
                    }
                }
            }
            out.push('\n');
        }
    }
    let ratio_of = |c: &Comparison| c.ours_over_paper.map_or("-".into(), |r| format!("{r:.2}"));
    let within = |c: &Comparison| match (c.ours, c.within) {
        (None, _) => "**missing**",
        (_, true) => "yes",
        (_, false) => "**no**",
    };
    let values: Vec<&Comparison> = all.iter().filter(|c| c.kind == "value").collect();
    if !values.is_empty() {
        let _ = writeln!(
            out,
            "| series | paper | ours (95% CI) | ours / paper | within | steady |\n|---|---|---|---|---|---|"
        );
        for c in values {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                c.what,
                c.paper_text(),
                c.ours_text(),
                ratio_of(c),
                within(c),
                steady_text(c.steady)
            );
        }
        out.push('\n');
    }
    let ratios: Vec<&Comparison> = all.iter().filter(|c| c.kind == "ratio").collect();
    if !ratios.is_empty() {
        let _ = writeln!(
            out,
            "| ratio | paper | ours (95% CI) | ours / paper | within | ranking | steady |\n|---|---|---|---|---|---|---|"
        );
        for c in ratios {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                c.what,
                c.paper_text(),
                c.ours_text(),
                ratio_of(c),
                within(c),
                c.ranking.map_or("-", Ranking::show),
                steady_text(c.steady)
            );
        }
        out.push('\n');
    }
    out.push_str(&misses_text(all.iter()));
    out
}

/// Every number that misses, each with the figure file's account of why (`why`), or saying
/// that there is none yet; empty when nothing misses.
fn misses_text<'a>(all: impl Iterator<Item = &'a Comparison>) -> String {
    let misses: Vec<&Comparison> = all.filter(|c| c.misses()).collect();
    if misses.is_empty() {
        return String::new();
    }
    let explained = misses.iter().filter(|c| c.why.is_some()).count();
    let mut out = format!(
        "Why the {} numbers outside their tolerance or against the paper's ranking miss ({explained} explained):\n\n",
        misses.len()
    );
    for c in misses {
        let _ = writeln!(
            out,
            "- {} {}, {}: {}",
            c.paper,
            c.figure,
            c.what,
            c.why.as_deref().unwrap_or("**not explained yet**")
        );
    }
    out.push('\n');
    out
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

/// What reproducing one figure gave.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub report: String,
    pub comparisons: Vec<Comparison>,
    /// Comparisons outside the tolerance or missing.
    pub failures: usize,
    pub runs: usize,
    /// Runs (after averaging over seeds, points) that did not converge.
    pub unsteady_runs: usize,
    pub wall_s: f64,
}

/// Points of a sweep over `seed` that differ in nothing else, averaged (module doc): the mean
/// of each numeric metric over the seeds, throughput's 95% interval from the seeds' spread,
/// `seeds` and the per-seed throughputs added, `steady` only if every seed's run was.
pub fn aggregate_seeds(requests: &[crate::run::RunRequest], rows: &[Value]) -> Vec<Value> {
    let key = |r: &crate::run::RunRequest| {
        let mut r = r.clone();
        r.setup.seed = 0;
        format!("{r:?}")
    };
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let k = key(r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(i),
            None => groups.push((k, vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(_, members)| {
            if members.len() == 1 {
                return rows[members[0]].clone();
            }
            let n = members.len() as f64;
            let mut out = rows[members[0]].clone();
            let numbers = [
                "throughput_mops",
                "latency_ns_p50",
                "latency_ns_p90",
                "latency_ns_p99",
                "latency_ns_p999",
                "round_trips_per_op",
                "bytes_read_per_op",
                "bytes_written_per_op",
                "cache_bytes_per_cn",
            ];
            for f in numbers {
                let vals: Vec<f64> = members.iter().filter_map(|&m| rows[m].get(f)?.as_f64()).collect();
                if vals.len() == members.len() {
                    out[f] = serde_json::json!(vals.iter().sum::<f64>() / n);
                }
            }
            let tput: Vec<f64> = members.iter().filter_map(|&m| rows[m]["throughput_mops"].as_f64()).collect();
            let mean = tput.iter().sum::<f64>() / n;
            let var = tput.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
            out["throughput_mops_ci95"] =
                serde_json::json!(crate::measure::t_975(members.len() - 1) * (var / n).sqrt());
            out["seeds"] = serde_json::json!(members.len());
            out["seed_throughputs_mops"] = serde_json::json!(tput);
            out["steady"] = serde_json::json!(members.iter().all(|&m| rows[m]["steady"].as_bool().unwrap_or(true)));
            out
        })
        .collect()
}

/// Runs one figure at `scale` and writes its outputs into `out`; returns the report and the
/// number of comparisons outside the tolerance.
pub fn reproduce(figure: &Figure, scale: &str, out: &Path, threads: usize) -> Result<(String, usize), String> {
    reproduce_figure(figure, scale, out, threads).map(|o| (o.report, o.failures))
}

/// Runs one figure at `scale`, writes its outputs into `out`, and judges it.
pub fn reproduce_figure(figure: &Figure, scale: &str, out: &Path, threads: usize) -> Result<Outcome, String> {
    judge_figure(figure, scale, out, threads, false)
}

/// [`reproduce_figure`], or with `rejudge` the same report and plots from the results an
/// earlier run left in `out/result.jsonl` (after a change to the report or the figure's
/// numbers, without running again).
pub fn judge_figure(
    figure: &Figure,
    scale: &str,
    out: &Path,
    threads: usize,
    rejudge: bool,
) -> Result<Outcome, String> {
    let started = std::time::Instant::now();
    let run = match scale {
        "reduced" => &figure.run.reduced,
        "full" => figure.run.full.as_ref().ok_or("this figure has no full-scale run")?,
        other => return Err(format!("--scale must be reduced or full, got '{other}'")),
    };
    let requests = run.requests()?;
    let results: Vec<RunResult> = if rejudge {
        let path = out.join("result.jsonl");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {} (run the figure first): {e}", path.display()))?;
        let results: Vec<RunResult> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}", path.display())))
            .collect::<Result<_, _>>()?;
        if results.len() != requests.len() {
            return Err(format!(
                "{} holds {} results and the figure has {} runs: run it again",
                path.display(),
                results.len(),
                requests.len()
            ));
        }
        results
    } else {
        let threads = crate::run::check_memory(&requests, threads)?;
        crate::run::run_requests(&requests, threads, &format!("{} {}", figure.paper, figure.figure))
            .into_iter()
            .collect::<Result<_, _>>()?
    };
    let lines: Vec<String> =
        results.iter().map(serde_json::to_string).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let raw: Vec<Value> =
        lines.iter().map(|l| serde_json::from_str(l)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let rows = aggregate_seeds(&requests, &raw);
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    std::fs::write(out.join("result.jsonl"), lines.iter().map(|l| format!("{l}\n")).collect::<String>())
        .map_err(|e| e.to_string())?;
    std::fs::write(out.join("result.csv"), csv(&results)).map_err(|e| e.to_string())?;
    let comparisons = comparisons(figure, &rows);
    crate::plot::figure_plots(figure, &rows, &raw, out)?;
    let unsteady: Vec<String> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.steady)
        .map(|(i, r)| {
            format!("run {} ({} {} {} clients): {}", i + 1, r.index, r.workload, r.clients, crate::run::verdict(r))
        })
        .collect();
    let wall_s = if rejudge {
        // The time the runs took, as the earlier report said it (not this re-judging).
        std::fs::read_to_string(out.join("report.md"))
            .ok()
            .and_then(|t| {
                let at = t.find("The figure took ")? + "The figure took ".len();
                t[at..].split(' ').next()?.parse().ok()
            })
            .unwrap_or(0.0)
    } else {
        started.elapsed().as_secs_f64()
    };
    let measured = match &results.first().map(|r| r.measurement.clone()) {
        Some(crate::run::Measurement::Steady { precision, max_duration_ns }) => format!(
            "to steady state (95% interval within ±{:.0}%, no trend; capped at {:.0} ms simulated)",
            precision * 100.0,
            *max_duration_ns as f64 / 1e6
        ),
        Some(crate::run::Measurement::Fixed { warmup_ns, duration_ns }) => match duration_ns {
            Some(d) => format!(
                "over a fixed window ({:.1} ms after {:.1} ms of warm-up; this figure's metric is not a steady-state rate)",
                *d as f64 / 1e6,
                *warmup_ns as f64 / 1e6
            ),
            None => "over every operation of a fixed count per client".into(),
        },
        None => "-".into(),
    };
    let seeds = rows.iter().filter_map(|r| r.get("seeds")).count();
    let mut footer = format!(
        "Measured {measured}: {} runs{}, {} steady, {} not. The figure took {:.0} s on {threads} threads.",
        results.len(),
        if seeds > 0 { format!(" ({} points averaged over seeds)", rows.len()) } else { String::new() },
        results.len() - unsteady.len(),
        unsteady.len(),
        wall_s
    );
    for u in &unsteady {
        footer.push_str(&format!("\n- {u}"));
    }
    let text = report_text(figure, &rows, scale, &comparisons, Some(&footer));
    std::fs::write(out.join("report.md"), &text).map_err(|e| e.to_string())?;
    let failures = comparisons.iter().filter(|c| !c.within).count();
    Ok(Outcome { report: text, comparisons, failures, runs: results.len(), unsteady_runs: unsteady.len(), wall_s })
}

/// Papers with figure files under `figures`, sorted.
pub fn papers(figures: &Path) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = std::fs::read_dir(figures)
        .map_err(|e| format!("cannot read {}: {e}", figures.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    out.sort();
    Ok(out)
}

/// The fidelity summary of every figure reproduced: markdown and JSON.
pub fn fidelity(outcomes: &[(String, Outcome)], scale: &str) -> (String, Value) {
    let mut md = String::new();
    let all: Vec<&Comparison> = outcomes.iter().flat_map(|(_, o)| &o.comparisons).collect();
    let within = all.iter().filter(|c| c.within).count();
    let ratios: Vec<&&Comparison> = all.iter().filter(|c| c.kind == "ratio").collect();
    let ranked: Vec<&&&Comparison> =
        ratios.iter().filter(|c| c.ranking.is_some_and(|r| r != Ranking::NotClaimed)).collect();
    let holds = ranked.iter().filter(|c| c.ranking == Some(Ranking::Holds)).count();
    let reversed = ranked.iter().filter(|c| c.ranking == Some(Ranking::Reversed)).count();
    let wall: f64 = outcomes.iter().map(|(_, o)| o.wall_s).sum();
    let runs: usize = outcomes.iter().map(|(_, o)| o.runs).sum();
    let unsteady: usize = outcomes.iter().map(|(_, o)| o.unsteady_runs).sum();
    let misses = all.iter().filter(|c| c.misses()).count();
    let explained = all.iter().filter(|c| c.misses() && c.why.is_some()).count();
    let _ = writeln!(md, "# Fidelity summary ({scale} scale)\n");
    let _ = writeln!(
        md,
        "{} figures, {runs} runs ({unsteady} not steady), {:.0} min. {within} of {} numbers within their \
         figure's tolerance; of {} rankings the papers state, {holds} hold, {reversed} are reversed, {} \
         unresolved; {explained} of the {misses} numbers that miss either way have their mechanism stated \
         (below).\n",
        outcomes.len(),
        wall / 60.0,
        all.len(),
        ranked.len(),
        ranked.len() - holds - reversed
    );
    let _ = writeln!(
        md,
        "| figure | what | paper | ours (95% CI) | ours / paper | within | ranking | steady |\n|---|---|---|---|---|---|---|---|"
    );
    for c in &all {
        let _ = writeln!(
            md,
            "| {} {} | {} | {} | {} | {} | {} | {} | {} |",
            c.paper,
            c.figure,
            c.what,
            c.paper_text(),
            c.ours_text(),
            c.ours_over_paper.map_or("-".into(), |r| format!("{r:.2}")),
            match (c.ours, c.within) {
                (None, _) => "**missing**",
                (_, true) => "yes",
                (_, false) => "**no**",
            },
            c.ranking.map_or("-", Ranking::show),
            steady_text(c.steady)
        );
    }
    md.push('\n');
    md.push_str(&misses_text(all.iter().copied()));
    let _ = writeln!(md, "| figure | runs | not steady | wall s |\n|---|---|---|---|");
    for (name, o) in outcomes {
        let _ = writeln!(md, "| {name} | {} | {} | {:.0} |", o.runs, o.unsteady_runs, o.wall_s);
    }
    let json = serde_json::json!({
        "scale": scale,
        "figures": outcomes.iter().map(|(n, o)| serde_json::json!({
            "figure": n, "runs": o.runs, "unsteady_runs": o.unsteady_runs, "wall_s": o.wall_s,
            "failures": o.failures,
        })).collect::<Vec<_>>(),
        "comparisons": all,
        "within": within,
        "total": all.len(),
        "misses": misses,
        "misses_explained": explained,
        "rankings": { "stated": ranked.len(), "hold": holds, "reversed": reversed },
    });
    (md, json)
}

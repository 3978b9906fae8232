//! Figure files: the schema of a paper's figure as dmkit reproduces it.
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
//! why = "..."                            # where ours misses: the mechanism, as measured
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
//! [`crate::reproduce`] runs and judges them; [`crate::plot`] draws them.

use crate::run::RunFile;
use serde::Deserialize;
use std::collections::BTreeMap;

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
    /// With `extrapolate`: test the model on the largest `x` measured — the line through the
    /// points below it, evaluated there, against the measurement there (the report's
    /// held-out table: the extrapolation's own error at the largest scale this machine runs,
    /// whichever scale the figure ran at). The comparison's fit uses every point.
    #[serde(default)]
    pub holdout: bool,
    /// With `extrapolate`: the scale the line is straight on. `linear` (the default) fits the
    /// metric against `x`; `log` fits it against `ln x`, for a quantity that moves by a constant
    /// step each time the scale doubles (a share of colliding accesses under a Zipfian law,
    /// whose normaliser grows as `ln n`).
    #[serde(default)]
    pub x_scale: XScale,
    /// With `extrapolate`: more values of `x` at which the report evaluates every series' line,
    /// where the paper states a trend beyond its one number (SMART's Fig. 22(g): 60 M items
    /// stated, "decreasing" to 960 M).
    #[serde(default)]
    pub also_at: Vec<f64>,
}

/// The scale an extrapolation's line is straight on (`Compare::x_scale`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum XScale {
    #[default]
    Linear,
    Log,
}

impl XScale {
    /// `x` on this scale.
    pub fn of(self, x: f64) -> f64 {
        match self {
            XScale::Linear => x,
            XScale::Log => x.ln(),
        }
    }
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
    /// Why ours differs from the paper's, as measured (the counter, trace or sweep that shows
    /// it, and where it is written up): reports print it under any number that misses. It
    /// quotes the run it was written from (`docs/fidelity.md` says which): when a change moves
    /// the numbers, read it again.
    #[serde(default)]
    pub why: Option<String>,
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
    /// As [`Published::why`].
    #[serde(default)]
    pub why: Option<String>,
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

    pub(crate) fn middle(self) -> f64 {
        match self {
            Claim::Value(v) => v,
            Claim::Range(lo, hi) => (lo + hi) / 2.0,
        }
    }

    /// Whether `ours` is the number within `tolerance`, or in the range widened by it.
    pub(crate) fn holds(self, ours: f64, tolerance: f64) -> bool {
        match self {
            Claim::Value(v) => (ours / v - 1.0).abs() <= tolerance,
            Claim::Range(lo, hi) => lo * (1.0 - tolerance) <= ours && ours <= hi * (1.0 + tolerance),
        }
    }

    /// The number, or the middle of the range.
    pub fn middle_value(self) -> f64 {
        self.middle()
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
    /// The metric `p` judges: its own, or the figure's.
    pub fn metric_of<'a>(&'a self, p: &'a Published) -> &'a str {
        p.metric.as_deref().unwrap_or(&self.compare.metric)
    }

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
        if f.compare.holdout && f.compare.over != "extrapolate" {
            return Err("bad figure file: compare.holdout tests an extrapolation (over = \"extrapolate\")".into());
        }
        if f.compare.over == "extrapolate" && (f.compare.x.is_none() || f.compare.at.is_none()) {
            return Err("bad figure file: compare.over = \"extrapolate\" needs compare.x and compare.at".into());
        }
        if f.compare.over != "extrapolate" && (f.compare.x_scale != XScale::Linear || !f.compare.also_at.is_empty()) {
            return Err(
                "bad figure file: compare.x_scale and compare.also_at shape an extrapolation (over = \"extrapolate\")"
                    .into(),
            );
        }
        if f.compare.x_scale == XScale::Log
            && f.compare.at.iter().chain(&f.compare.also_at).any(|x| !(*x > 0.0 && x.is_finite()))
        {
            return Err(
                "bad figure file: compare.x_scale = \"log\" needs a positive compare.at and compare.also_at".into()
            );
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

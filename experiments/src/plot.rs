//! `dmkit plot`: curves from result JSON lines, as SVG and PNG.
//!
//! Any two numeric fields of the metric schema make a plot: `throughput_mops` against
//! `latency_ns_p99` is a throughput–latency curve (points in the order of `clients`), `clients`
//! against `throughput_mops` is a sweep curve. Runs are grouped into series by the values of the
//! `--series` fields (default: index, config and workload), one colour and legend entry each.
//! Text is drawn with the bundled DejaVu Sans (`experiments/fonts`), so PNGs need no system fonts.

use crate::reproduce::field;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What to draw.
#[derive(Clone, Debug)]
pub struct PlotSpec {
    pub x: String,
    pub y: String,
    /// Fields whose values name a series.
    pub series: Vec<String>,
    /// Field that orders a series' points (default: `x`).
    pub order_by: Option<String>,
    pub title: String,
}

impl PlotSpec {
    /// Throughput against p99 latency, points ordered by clients.
    pub fn throughput_latency() -> PlotSpec {
        PlotSpec {
            x: "throughput_mops".into(),
            y: "latency_ns_p99".into(),
            series: vec!["index".into(), "config".into(), "workload".into()],
            order_by: Some("clients".into()),
            title: "throughput vs p99 latency".into(),
        }
    }
}

/// One series: its name and its points in order.
pub type Series = (String, Vec<(f64, f64)>);

fn field_f64(row: &Value, name: &str) -> Option<f64> {
    field(row, name)?.as_f64()
}

fn field_label(row: &Value, name: &str) -> String {
    match field(row, name) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "-".into(),
    }
}

/// Groups result rows into ordered series; errors name the line and the missing field.
pub fn series(rows: &[Value], spec: &PlotSpec) -> Result<Vec<Series>, String> {
    let mut groups: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let get =
            |name: &str| field_f64(row, name).ok_or_else(|| format!("result {}: no numeric field '{name}'", i + 1));
        let (x, y) = (get(&spec.x)?, get(&spec.y)?);
        let order = get(spec.order_by.as_deref().unwrap_or(&spec.x))?;
        let name = spec.series.iter().map(|f| field_label(row, f)).collect::<Vec<_>>().join(" ");
        groups.entry(name).or_default().push((order, x, y));
    }
    if groups.is_empty() {
        return Err("no results to plot".into());
    }
    Ok(groups
        .into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (name, points.into_iter().map(|(_, x, y)| (x, y)).collect())
        })
        .collect())
}

/// Reads JSON lines of results; errors name the line.
pub fn read_results(text: &str) -> Result<Vec<Value>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

fn register_font() {
    static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bundled font is valid; a failure here is a packaging bug.
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            panic!("the bundled DejaVu Sans font does not load");
        }
    });
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    spec: &PlotSpec,
    data: &[Series],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let (mut x_max, mut y_max) = (0f64, 0f64);
    for (_, points) in data {
        for &(x, y) in points {
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
    }
    let x_range = 0f64..(x_max * 1.08).max(1e-9);
    let y_max = (y_max * 1.08).max(1e-9);
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0f64..y_max)
        .map_err(err)?;
    // Whole numbers on axes that span more than 100, else enough decimals for three digits.
    let fmt = |max: f64| {
        let decimals = if max > 100.0 { 0 } else { (2.0 - max.log10().floor()).clamp(1.0, 8.0) as usize };
        move |v: &f64| format!("{v:.decimals$}")
    };
    let y_fmt = fmt(y_max);
    let x_fmt = fmt(x_max * 1.08);
    chart
        .configure_mesh()
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_desc(spec.x.as_str())
        .y_desc(spec.y.as_str())
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (i, (name, points)) in data.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(err)?;
    }
    let all = data.iter().flat_map(|(_, p)| p.iter().copied());
    let x_span = (chart.x_range().start, chart.x_range().end);
    let corner = legend_corner(all, x_span, y_max, data.len());
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(corner)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// The corner of a chart whose legend would cover the fewest points: each corner's box is
/// about as wide as a legend of long names (45% of the width) and as tall as `entries` lines.
/// Ties go to the upper left, then upper right, lower right and lower left.
fn legend_corner(
    points: impl Iterator<Item = (f64, f64)> + Clone,
    (x0, x1): (f64, f64),
    y_max: f64,
    entries: usize,
) -> SeriesLabelPosition {
    let (w, h) = (0.45 * (x1 - x0), (0.06 * entries as f64 + 0.06).min(0.95) * y_max);
    let corners = [
        (SeriesLabelPosition::UpperLeft, x0, x0 + w, y_max - h, y_max),
        (SeriesLabelPosition::UpperRight, x1 - w, x1, y_max - h, y_max),
        (SeriesLabelPosition::LowerRight, x1 - w, x1, 0.0, h),
        (SeriesLabelPosition::LowerLeft, x0, x0 + w, 0.0, h),
    ];
    let mut best = (usize::MAX, SeriesLabelPosition::UpperLeft);
    for (corner, xa, xb, ya, yb) in corners {
        let covered = points.clone().filter(|&(x, y)| (xa..=xb).contains(&x) && (ya..=yb).contains(&y)).count();
        if covered < best.0 {
            best = (covered, corner);
        }
    }
    best.1
}

/// Writes `<out>.svg` and `<out>.png`.
pub fn plot(rows: &[Value], spec: &PlotSpec, out: &Path) -> Result<(), String> {
    register_font();
    let data = series(rows, spec)?;
    let svg = out.with_extension("svg");
    let png = out.with_extension("png");
    draw(SVGBackend::new(&svg, (960, 640)).into_drawing_area(), spec, &data)?;
    draw(BitMapBackend::new(&png, (960, 640)).into_drawing_area(), spec, &data)?;
    Ok(())
}

/// One curve of a panel: its legend name and its points `(x, y, x half-width)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// One chart of a figure: a title, its curves, and the paper's numbers as vertical marks.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    pub title: String,
    pub curves: Vec<Curve>,
    pub marks: Vec<(String, f64)>,
}

/// The label of a system in a legend: the index, and its configuration when that says more.
fn system_label(row: &Value, fields: &[String]) -> String {
    let get = |f: &str| field_label(row, f);
    let mut parts = Vec::new();
    for f in fields {
        match f.as_str() {
            "index" => parts.push(get("index")),
            "config" => {
                let (c, i) = (get("config"), get("index"));
                if c != i && c != "default" && c != "-" {
                    parts.push(format!("({c})"));
                }
            }
            "workload" | "clients" => {}
            other => parts.push(format!("{}={}", crate::reproduce::field_name(other), get(other))),
        }
    }
    if parts.is_empty() { get("index") } else { parts.join(" ") }
}

/// The panels of a figure's throughput–latency plot: one per workload, one curve per system
/// (points in the order of their client counts, with the throughput's 95% error bar), p99
/// latency in µs, and the paper's published throughputs as marks.
pub fn figure_panels(figure: &crate::figure::Figure, rows: &[Value]) -> Vec<Panel> {
    let series = &figure.compare.series;
    let mut workloads: Vec<String> = Vec::new();
    for r in rows {
        let w = field_label(r, "workload");
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    let by_workload = series.iter().any(|s| s == "workload") && workloads.len() > 1;
    let panel_names: Vec<String> = if by_workload { workloads } else { vec![String::new()] };
    panel_names
        .iter()
        .map(|w| {
            let mut groups: BTreeMap<String, Vec<(f64, f64, f64, f64)>> = BTreeMap::new();
            for r in rows.iter().filter(|r| !by_workload || field_label(r, "workload") == *w) {
                let (Some(x), Some(y)) = (field_f64(r, "throughput_mops"), field_f64(r, "latency_ns_p99")) else {
                    continue;
                };
                let err = field_f64(r, "throughput_mops_ci95").unwrap_or(0.0);
                let order = field_f64(r, "clients").unwrap_or(0.0);
                groups.entry(system_label(r, series)).or_default().push((order, x, y / 1e3, err));
            }
            let curves = groups
                .into_iter()
                .map(|(name, mut pts)| {
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Curve { name, points: pts.into_iter().map(|(_, x, y, e)| (x, y, e)).collect() }
                })
                .collect();
            let marks = figure
                .published
                .iter()
                .filter(|p| p.metric.is_none() && figure.compare.metric == "throughput_mops")
                .filter(|p| !by_workload || p.series.get("workload").is_none_or(|pw| pw == w))
                .filter_map(|p| {
                    let c = p.claim().ok()?;
                    let mut label: Vec<&str> = Vec::new();
                    for (k, v) in &p.series {
                        if k != "workload" && !label.contains(&v.as_str()) {
                            label.push(v);
                        }
                    }
                    Some((format!("paper: {} {}", label.join(" "), c.middle_value()), c.middle_value()))
                })
                .collect();
            Panel { title: if w.is_empty() { figure.title.clone() } else { w.clone() }, curves, marks }
        })
        .collect()
}

/// The throughput series of every run: one panel per workload, one line per run (its
/// throughput over simulated time, warm-up included), so a reader sees each run settle, or not.
pub fn timeseries_panels(rows: &[Value]) -> Vec<Panel> {
    let mut panels: Vec<Panel> = Vec::new();
    for r in rows {
        let Some(bins) = r.get("series_mops").and_then(Value::as_array) else { continue };
        let bin = field_f64(r, "series_bin_ns").unwrap_or(0.0);
        if bins.is_empty() || bin <= 0.0 {
            continue;
        }
        let w = field_label(r, "workload");
        let points = bins
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some(((i as f64 + 0.5) * bin / 1e6, v.as_f64()?, 0.0)))
            .collect();
        let name = format!(
            "{} {} clients{}",
            system_label(r, &["index".into(), "config".into()]),
            field_label(r, "clients"),
            if r.get("steady").and_then(Value::as_bool) == Some(false) { " (not steady)" } else { "" }
        );
        match panels.iter_mut().find(|p| p.title == w) {
            Some(p) => p.curves.push(Curve { name, points }),
            None => panels.push(Panel { title: w, curves: vec![Curve { name, points }], marks: Vec::new() }),
        }
    }
    panels
}

fn draw_panels<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    panels: &[Panel],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(err)?;
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    let areas = root.split_evenly((rows, cols));
    // One colour per legend name across panels.
    let mut names: Vec<&str> = Vec::new();
    for p in panels {
        for c in &p.curves {
            if !names.contains(&c.name.as_str()) {
                names.push(&c.name);
            }
        }
    }
    for (panel, area) in panels.iter().zip(areas) {
        // Latencies that span more than 20x (a collapsing system beside healthy ones) are
        // drawn on a log scale, as log10 of the value with the value on the axis.
        let ys = panel.curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)).filter(|y| *y > 0.0);
        let (lo, hi) = ys.fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let log = hi > 0.0 && hi / lo > 20.0 && y_desc.contains("latency");
        let owned: Panel;
        let panel = if log {
            owned = Panel {
                title: panel.title.clone(),
                curves: panel
                    .curves
                    .iter()
                    .map(|c| Curve {
                        name: c.name.clone(),
                        points: c
                            .points
                            .iter()
                            .map(|&(x, y, e)| (x, y.max(lo).log10() - lo.log10() + 0.1, e))
                            .collect(),
                    })
                    .collect(),
                marks: panel.marks.clone(),
            };
            &owned
        } else {
            panel
        };
        let shift = if log { lo.log10() - 0.1 } else { 0.0 };
        let y_desc = if log { format!("{y_desc}, log scale") } else { y_desc.to_string() };
        let (mut x_max, mut y_max) = (0f64, 0f64);
        for c in &panel.curves {
            for &(x, y, e) in &c.points {
                x_max = x_max.max(x + e);
                y_max = y_max.max(y);
            }
        }
        for (_, x) in &panel.marks {
            x_max = x_max.max(*x);
        }
        let (x_max, y_max) = ((x_max * 1.08).max(1e-9), (y_max * 1.08).max(1e-9));
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(err)?;
        let fmt = |max: f64| move |v: &f64| if max > 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
        let x_fmt = fmt(x_max);
        let y_fmt = move |v: &f64| {
            if log {
                // Three significant digits.
                let real = 10f64.powf(v + shift);
                let digits = (2 - real.log10().floor() as i32).max(0) as usize;
                let rounded = format!("{real:.digits$}");
                if real >= 1000.0 {
                    let p = 10f64.powi(real.log10().floor() as i32 - 2);
                    format!("{:.0}", (real / p).round() * p)
                } else {
                    rounded
                }
            } else {
                fmt(y_max)(v)
            }
        };
        chart
            .configure_mesh()
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_desc(x_desc)
            .y_desc(y_desc.as_str())
            .axis_desc_style(("sans-serif", 14))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        for c in &panel.curves {
            let i = names.iter().position(|n| *n == c.name).unwrap_or(0);
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(c.points.iter().map(|p| (p.0, p.1)), color.stroke_width(2)))
                .map_err(err)?
                .label(c.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            // Markers where there are few points (a sweep), none on a dense time series.
            if c.points.len() <= 30 {
                chart
                    .draw_series(c.points.iter().map(|&(x, y, _)| Circle::new((x, y), 3, color.filled())))
                    .map_err(err)?;
            }
            chart
                .draw_series(
                    c.points
                        .iter()
                        .filter(|p| p.2 > 0.0)
                        .map(|&(x, y, e)| ErrorBar::new_horizontal(y, x - e, x, x + e, color.stroke_width(1), 8)),
                )
                .map_err(err)?;
        }
        for (i, (label, x)) in panel.marks.iter().enumerate() {
            let style = BLACK.mix(0.6).stroke_width(1);
            let dashes: Vec<(f64, f64)> =
                (0..40).flat_map(|k| [(*x, y_max * k as f64 / 40.0), (*x, y_max * (k as f64 + 0.5) / 40.0)]).collect();
            chart.draw_series(dashes.chunks(2).map(|seg| PathElement::new(seg.to_vec(), style))).map_err(err)?;
            // The label on the side of the line with room for it.
            let h = if *x > x_max / 2.0 { HPos::Right } else { HPos::Left };
            let font = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(h, VPos::Top));
            let at = (*x, y_max * (0.97 - 0.06 * i as f64));
            chart.draw_series(std::iter::once(Text::new(format!(" {label} "), at, font))).map_err(err)?;
        }
        let all = panel.curves.iter().flat_map(|c| c.points.iter().map(|&(x, y, _)| (x, y)));
        let corner = legend_corner(all, (0.0, x_max), y_max, panel.curves.len());
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .position(corner)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// Writes `<out>.svg` and `<out>.png` of `panels`.
pub fn plot_panels(panels: &[Panel], title: &str, axes: (&str, &str), out: &Path) -> Result<(), String> {
    register_font();
    if panels.is_empty() {
        return Err("nothing to plot".into());
    }
    let cols = panels.len().clamp(1, 3) as u32;
    let rows = panels.len().div_ceil(3).max(1) as u32;
    let size = (520 * cols + 40, 420 * rows + 40);
    draw_panels(SVGBackend::new(&out.with_extension("svg"), size).into_drawing_area(), title, axes, panels)?;
    draw_panels(BitMapBackend::new(&out.with_extension("png"), size).into_drawing_area(), title, axes, panels)?;
    Ok(())
}

/// One series of a figure that extrapolates (memory against keys): the points measured, the
/// least-squares line the report evaluates, carried from the smallest point measured to the
/// figure's target, and the paper's numbers at the target.
#[derive(Clone, Debug, PartialEq)]
pub struct Extrapolation {
    pub name: String,
    pub measured: Vec<(f64, f64)>,
    pub line: Vec<(f64, f64)>,
    pub paper: Vec<(f64, f64)>,
}

/// A series' name from its selector: the index, its configuration in parentheses where it
/// says more, then the other fields' values (`dolphin (faithful)`, `smart-paper mica-c`).
fn selector_label(sel: &crate::figure::Selector) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(i) = sel.get("index") {
        parts.push(i.clone());
    }
    for (k, v) in sel {
        match k.as_str() {
            "index" => {}
            "config" if sel.get("index") == Some(v) || v == "default" => {}
            "config" if sel.contains_key("index") => parts.push(format!("({v})")),
            "config" | "workload" => parts.push(v.clone()),
            other => parts.push(format!("{}={v}", crate::reproduce::field_name(other))),
        }
    }
    parts.join(" ")
}

/// The series of `metric` in an extrapolating figure: rows grouped by `compare.series`, each
/// group's line as the report fits it, and each published number of the metric given to the
/// first series it selects (its own entry if none).
pub fn extrapolations(figure: &crate::figure::Figure, rows: &[Value], metric: &str) -> Vec<Extrapolation> {
    let compare = &figure.compare;
    let (Some(x), Some(at)) = (compare.x.as_deref(), compare.at) else { return Vec::new() };
    let mut groups: Vec<(crate::figure::Selector, Vec<(f64, f64)>)> = Vec::new();
    for r in rows {
        let (Some(px), Some(py)) = (field_f64(r, x), field_f64(r, metric)) else { continue };
        let sel: crate::figure::Selector = compare.series.iter().map(|f| (f.clone(), field_label(r, f))).collect();
        match groups.iter_mut().find(|(s, _)| *s == sel) {
            Some((_, points)) => points.push((px, py)),
            None => groups.push((sel, vec![(px, py)])),
        }
    }
    let mut out: Vec<Extrapolation> = groups
        .iter()
        .map(|(sel, points)| {
            let mut measured = points.clone();
            measured.sort_by(|a, b| a.0.total_cmp(&b.0));
            let line = match (crate::reproduce::fit(rows, compare, sel, metric), measured.first()) {
                (Some(f), Some(&(x0, _))) if x0 > 0.0 && at > 0.0 => {
                    // Evenly spaced on a log axis, from the first point to the target.
                    (0..=48).map(|k| x0 * (at / x0).powf(k as f64 / 48.0)).map(|x| (x, f.at(x))).collect()
                }
                _ => Vec::new(),
            };
            Extrapolation { name: selector_label(sel), measured, line, paper: Vec::new() }
        })
        .collect();
    for p in figure.published.iter().filter(|p| p.per.is_none() && figure.metric_of(p) == metric) {
        let Ok(claim) = p.claim() else { continue };
        let selects = |sel: &crate::figure::Selector| p.series.iter().all(|(k, v)| sel.get(k).is_none_or(|s| s == v));
        match groups.iter().position(|(sel, _)| selects(sel)) {
            Some(i) => out[i].paper.push((at, claim.middle())),
            None => out.push(Extrapolation {
                name: format!("{} (not run)", selector_label(&p.series)),
                measured: Vec::new(),
                line: Vec::new(),
                paper: vec![(at, claim.middle())],
            }),
        }
    }
    out
}

/// A number in three significant digits with an SI suffix (`250k`, `1M`, `512M`, `0.125`).
fn si(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e12 => (v / 1e12, "T"),
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let digits = if scaled == 0.0 { 0 } else { (2 - scaled.abs().log10().floor() as i32).max(0) as usize };
    let text = format!("{scaled:.digits$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text };
    format!("{text}{suffix}")
}

/// Draws `series` as `<out>.svg` and `<out>.png`: keys on a log axis out to the target, the
/// metric in binary units when it counts bytes, on a log axis when it spans more than 20x.
fn plot_extrapolation(
    figure: &crate::figure::Figure,
    series: &[Extrapolation],
    metric: &str,
    title: &str,
    out: &Path,
) -> Result<(), String> {
    register_font();
    let ys = || series.iter().flat_map(|s| s.measured.iter().chain(&s.line).chain(&s.paper).map(|p| p.1));
    let xs = || series.iter().flat_map(|s| s.measured.iter().chain(&s.line).chain(&s.paper).map(|p| p.0));
    let hi = ys().fold(0f64, f64::max);
    let lo = ys().filter(|y| *y > 0.0).fold(f64::MAX, f64::min);
    let (unit, scale) = match hi {
        _ if !metric.contains("bytes") => ("", 1.0),
        h if h >= (1u64 << 30) as f64 => (" (GiB)", (1u64 << 30) as f64),
        h if h >= (1u64 << 20) as f64 => (" (MiB)", (1u64 << 20) as f64),
        _ => (" (bytes)", 1.0),
    };
    let log_y = hi > 0.0 && ys().all(|y| y > 0.0) && hi / lo > 20.0;
    let x = figure.compare.x.as_deref().unwrap_or("x");
    let spec = ExtrapolationAxes {
        x_desc: format!("{x} (log scale)"),
        y_desc: format!("{metric}{unit}{}", if log_y { ", log scale" } else { "" }),
        log_y,
        scale,
        x_range: (xs().filter(|x| *x > 0.0).fold(f64::MAX, f64::min), xs().fold(0f64, f64::max)),
        y_range: (lo, hi),
        target: figure.compare.at.unwrap_or(0.0),
    };
    if spec.x_range.0 >= spec.x_range.1 || !spec.x_range.0.is_finite() || hi <= 0.0 {
        return Err(format!("{title}: nothing to plot for {metric}"));
    }
    let svg = out.with_extension("svg");
    let png = out.with_extension("png");
    draw_extrapolation(SVGBackend::new(&svg, (960, 640)).into_drawing_area(), title, &spec, series)?;
    draw_extrapolation(BitMapBackend::new(&png, (960, 640)).into_drawing_area(), title, &spec, series)?;
    Ok(())
}

struct ExtrapolationAxes {
    x_desc: String,
    y_desc: String,
    log_y: bool,
    /// The unit's bytes (1 when not bytes).
    scale: f64,
    x_range: (f64, f64),
    y_range: (f64, f64),
    target: f64,
}

fn draw_extrapolation<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    a: &ExtrapolationAxes,
    series: &[Extrapolation],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut builder = ChartBuilder::on(&root);
    builder.caption(title, ("sans-serif", 18)).margin(20).x_label_area_size(50).y_label_area_size(80);
    let x = ((a.x_range.0 / 1.6)..(a.x_range.1 * 1.6)).log_scale();
    let (lo, hi) = (a.y_range.0 / a.scale, a.y_range.1 / a.scale);
    if a.log_y {
        let chart = builder.build_cartesian_2d(x, ((lo / 1.5)..(hi * 1.5)).log_scale()).map_err(|e| e.to_string())?;
        extrapolation_body(chart, a, series)
    } else {
        let chart = builder.build_cartesian_2d(x, 0f64..(hi * 1.1)).map_err(|e| e.to_string())?;
        extrapolation_body(chart, a, series)
    }?;
    root.present().map_err(|e| e.to_string())
}

fn extrapolation_body<'a, DB: DrawingBackend + 'a, Y>(
    mut chart: ChartContext<'a, DB, Cartesian2d<plotters::coord::combinators::LogCoord<f64>, Y>>,
    a: &ExtrapolationAxes,
    series: &[Extrapolation],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let scaled = |p: &(f64, f64)| (p.0, p.1 / a.scale);
    chart
        .configure_mesh()
        .x_label_formatter(&|v| si(*v))
        .y_label_formatter(&|v| si(*v))
        .x_desc(a.x_desc.as_str())
        .y_desc(a.y_desc.as_str())
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    // The target, where the paper's numbers stand.
    let (y0, y1) = (chart.y_range().start, chart.y_range().end);
    let target = [(a.target, y0), (a.target, y1)];
    chart.draw_series(DashedLineSeries::new(target, 4, 6, BLACK.mix(0.4).stroke_width(1))).map_err(err)?;
    let font = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Right, VPos::Top));
    chart.draw_series(std::iter::once(Text::new(format!("{} ", si(a.target)), (a.target, y1), font))).map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.measured.iter().map(scaled), color.stroke_width(2)))
            .map_err(err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(s.measured.iter().map(|p| Circle::new(scaled(p), 3, color.filled()))).map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(s.line.iter().map(scaled), 6, 5, color.stroke_width(1)))
            .map_err(err)?;
        chart.draw_series(s.paper.iter().map(|p| TriangleMarker::new(scaled(p), 7, color.filled()))).map_err(err)?;
    }
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
        .map_err(err)?
        .label("line fitted to the points, carried to the target")
        .legend(|(x, y)| {
            plotters::element::DashedPathElement::new(vec![(x, y), (x + 20, y)], 5, 3, BLACK.stroke_width(1))
        });
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
        .map_err(err)?
        .label("the paper's number, in its series' colour")
        .legend(|(x, y)| TriangleMarker::new((x + 10, y), 6, BLACK.filled()));
    // The legend in the corner covering the fewest points, judged on the axes as drawn.
    let (xr, yr) = (chart.x_range(), chart.y_range());
    let frac = |v: f64, r: &std::ops::Range<f64>, log: bool| {
        if log { (v.ln() - r.start.ln()) / (r.end.ln() - r.start.ln()) } else { (v - r.start) / (r.end - r.start) }
    };
    let drawn: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.measured.iter().chain(&s.line).chain(&s.paper))
        .map(|p| (frac(p.0, &xr, true), frac(p.1 / a.scale, &yr, a.log_y)))
        .collect();
    let corner = legend_corner(drawn.into_iter(), (0.0, 1.0), 1.0, series.len() + 2);
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(corner)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// A figure's plots: `curve.{svg,png}` (throughput against p99 latency with 95% error bars, the
/// paper's published throughputs marked) and `timeseries.{svg,png}` (every run's batches).
/// `rows` are the judged points (seeds averaged), `raw` every run.
pub fn figure_plots(figure: &crate::figure::Figure, rows: &[Value], raw: &[Value], out: &Path) -> Result<(), String> {
    let title = format!("{} {}: {}", figure.paper, figure.figure, figure.title);
    match (&figure.compare.x, figure.compare.over.as_str()) {
        // A quantity fitted over a scale (memory over keys): that quantity against the scale.
        // Every metric the figure judges gets its own: `curve` for the main one, `curve-<name>`
        // for another a published number names (`curve-write_combining_ratio`).
        (Some(_), "extrapolate") => {
            let mut metrics = vec![figure.compare.metric.as_str()];
            for p in figure.published.iter().filter(|p| p.per.is_none()) {
                if !metrics.contains(&figure.metric_of(p)) {
                    metrics.push(figure.metric_of(p));
                }
            }
            for (i, metric) in metrics.iter().enumerate() {
                let name = match i {
                    0 => "curve".to_string(),
                    _ => format!("curve-{}", metric.rsplit('.').next().unwrap_or(metric)),
                };
                let title = if i == 0 { title.clone() } else { format!("{title}: {metric}") };
                plot_extrapolation(figure, &extrapolations(figure, rows, metric), metric, &title, &out.join(name))?;
            }
        }
        _ => plot_panels(
            &figure_panels(figure, rows),
            &title,
            ("throughput (Mops/s)", "p99 latency (µs)"),
            &out.join("curve"),
        )?,
    }
    let series = timeseries_panels(raw);
    if !series.is_empty() {
        plot_panels(
            &series,
            &format!("{} {}: each run's throughput over time, warm-up included", figure.paper, figure.figure),
            ("simulated time (ms)", "throughput (Mops/s)"),
            &out.join("timeseries"),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corner(points: &[(f64, f64)]) -> SeriesLabelPosition {
        legend_corner(points.iter().copied(), (0.0, 10.0), 10.0, 4)
    }

    #[test]
    fn axis_numbers_take_three_digits_and_a_suffix() {
        let got: Vec<String> = [250_000.0, 1e6, 1.2e6, 512e6, 0.125, 0.0, 3.162, 100.0, 2e12].map(si).into();
        assert_eq!(got, ["250k", "1M", "1.2M", "512M", "0.125", "0", "3.16", "100", "2T"]);
    }

    /// The legend leaves the points it would hide: the upper left unless points are there,
    /// then the corner covering fewest (Sherman's slow, high-tail point in Dolphin's Fig. 7 sat
    /// under a legend fixed at the upper left).
    #[test]
    fn the_legend_goes_where_it_covers_fewest_points() {
        let is = |p: SeriesLabelPosition, name: &str| assert_eq!(format!("{p:?}"), name);
        is(corner(&[]), "UpperLeft");
        is(corner(&[(5.5, 1.0), (9.0, 1.0)]), "UpperLeft");
        is(corner(&[(1.0, 9.5)]), "UpperRight");
        is(corner(&[(1.0, 9.5), (9.0, 9.0), (9.5, 0.5)]), "LowerLeft");
        is(corner(&[(1.0, 9.5), (2.0, 9.0), (9.0, 9.0), (9.5, 0.5), (9.8, 9.9), (0.5, 0.5), (1.0, 1.0)]), "LowerRight");
    }
}

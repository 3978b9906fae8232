//! `dmkit plot`: curves from result JSON lines, as SVG and PNG.
//!
//! Any two numeric fields of the metric schema make a plot: `throughput_mops` against
//! `latency_ns_p99` is a throughput–latency curve (points in the order of `clients`), `clients`
//! against `throughput_mops` is a sweep curve. Runs are grouped into series by the values of the
//! `--series` fields (default: index, config and workload), one colour and legend entry each.
//! Text is drawn with the bundled DejaVu Sans (`experiments/fonts`), so PNGs need no system fonts.

use plotters::prelude::*;
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
    row.get(name)?.as_f64()
}

fn field_label(row: &Value, name: &str) -> String {
    match row.get(name) {
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
    let (x_max, y_max) = ((x_max * 1.08).max(1e-9), (y_max * 1.08).max(1e-9));
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    // Whole numbers on axes that span more than 100; one decimal otherwise.
    let fmt = |max: f64| move |v: &f64| if max > 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
    let (x_fmt, y_fmt) = (fmt(x_max), fmt(y_max));
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
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
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

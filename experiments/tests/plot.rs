//! `dmkit plot`: series are grouped and ordered as documented, and both images are written.

use dmkit_experiments::plot::{self, PlotSpec};
use serde_json::json;

fn rows() -> Vec<serde_json::Value> {
    vec![
        json!({"index": "example", "config": "default", "workload": "ycsb-a", "clients": 64, "throughput_mops": 10.0, "latency_ns_p99": 18000}),
        json!({"index": "example", "config": "default", "workload": "ycsb-a", "clients": 8, "throughput_mops": 2.0, "latency_ns_p99": 4800}),
        json!({"index": "example", "config": "default", "workload": "ycsb-c", "clients": 8, "throughput_mops": 2.7, "latency_ns_p99": 2900}),
    ]
}

#[test]
fn series_are_grouped_and_ordered() {
    let s = plot::series(&rows(), &PlotSpec::throughput_latency()).unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].0, "example default ycsb-a");
    assert_eq!(s[0].1, vec![(2.0, 4800.0), (10.0, 18000.0)], "ordered by clients, not by file order");
    let bad = PlotSpec { y: "no_such_field".into(), ..PlotSpec::throughput_latency() };
    assert!(plot::series(&rows(), &bad).unwrap_err().contains("no_such_field"));
    assert!(plot::series(&[], &PlotSpec::throughput_latency()).is_err());
    assert!(plot::read_results("{\"a\":1}\nnot json").unwrap_err().starts_with("line 2"));
}

#[test]
fn svg_and_png_are_written() {
    let dir = std::env::temp_dir().join(format!("dmkit-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("curve");
    plot::plot(&rows(), &PlotSpec::throughput_latency(), &out).unwrap();
    let svg = std::fs::read_to_string(out.with_extension("svg")).unwrap();
    assert!(svg.contains("example default ycsb-c") && svg.contains("latency_ns_p99"), "legend and axis titles");
    let png = std::fs::read(out.with_extension("png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert!(png.len() > 10_000, "a drawn image, not an empty one ({} bytes)", png.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A figure's plot: a panel per workload, a curve per system (not per system and workload),
/// latency in µs, the throughput's interval as an error bar, and the paper's number marked.
#[test]
fn figure_panels_have_one_curve_per_system_and_the_papers_marks() {
    let figure = dmkit_experiments::reproduce::Figure::parse(
        r#"
paper = "test"
figure = "f"
title = "t"
source = "s"
tolerance = 0.2
[compare]
metric = "throughput_mops"
over = "peak"
series = ["index", "config", "workload"]
[[published]]
series = { index = "example", workload = "ycsb-c" }
value = 3.0
[run.reduced]
index = "example"
"#,
    )
    .unwrap();
    let mut rows = rows();
    for r in &mut rows {
        r["throughput_mops_ci95"] = json!(0.25);
    }
    let panels = plot::figure_panels(&figure, &rows);
    assert_eq!(panels.iter().map(|p| p.title.as_str()).collect::<Vec<_>>(), ["ycsb-a", "ycsb-c"]);
    assert_eq!(panels[0].curves.len(), 1);
    assert_eq!(panels[0].curves[0].name, "example", "the legend names the system, not the run");
    assert_eq!(panels[0].curves[0].points, vec![(2.0, 4.8, 0.25), (10.0, 18.0, 0.25)], "µs, with the error bar");
    assert!(panels[0].marks.is_empty());
    assert_eq!(panels[1].marks, vec![("paper: example 3".to_string(), 3.0)]);
    let dir = std::env::temp_dir().join(format!("dmkit-panels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    plot::plot_panels(&panels, "t", ("x", "y"), &dir.join("p")).unwrap();
    assert!(std::fs::read_to_string(dir.join("p.svg")).unwrap().contains("paper: example 3"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A scale plot (a share over the key count, SMART's Fig. 22(g, h)): a nested field, series
/// named without an index, a logarithmic axis labelled with the key counts, small values with
/// their digits, and the paper's number with the series it names.
#[test]
fn a_log_scale_plot_labels_keys_and_shows_the_papers_points() {
    let figure = dmkit_experiments::reproduce::Figure::parse(
        r#"
paper = "test"
figure = "shares"
title = "shares"
source = "s"
tolerance = 0.2
[compare]
metric = "rdwc.read_delegation_ratio"
over = "extrapolate"
series = ["config"]
x = "keys"
at = 60000000
x_scale = "log"
[[published]]
series = { config = "smart-paper" }
value = 0.119
[run.reduced]
index = "smart"
"#,
    )
    .unwrap();
    let rows: Vec<serde_json::Value> = [(500_000u64, 0.16), (4_000_000, 0.127)]
        .iter()
        .map(|(k, rd)| json!({"config": "smart-paper", "keys": k, "rdwc": {"read_delegation_ratio": rd}}))
        .collect();
    let s = plot::extrapolations(&figure, &rows, "rdwc.read_delegation_ratio");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].name, "smart-paper");
    assert_eq!(s[0].paper, vec![(60e6, 0.119)]);
    let dir = std::env::temp_dir().join(format!("dmkit-plot-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    plot::figure_plots(&figure, &rows, &[], &dir).unwrap();
    let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
    // Each text element's content is the line after its tag.
    let texts: Vec<&str> = svg.lines().map(str::trim).collect();
    for text in ["keys (log scale)", "smart-paper", "0.12", "0.02", "1M", "10M", "60M"] {
        assert!(texts.contains(&text), "{text}: axis title, legend, shares with their digits, key counts");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An extrapolating figure (memory against keys): a series per system, the report's line
/// carried from the first point to the target, and each paper's number in the colour of the
/// series it names, on log axes in binary units.
#[test]
fn an_extrapolation_plot_carries_each_line_to_the_papers_number() {
    let figure = dmkit_experiments::reproduce::Figure::parse(
        r#"
paper = "test"
figure = "m"
title = "memory"
source = "s"
tolerance = 0.25
[compare]
metric = "remote_bytes_used"
over = "extrapolate"
series = ["index", "config"]
x = "keys"
at = 512000000
[[published]]
series = { index = "smart", config = "smart,alloc_align=256" }
value = 167503724544
[[published]]
series = { index = "sherman" }
value = 12884901888
[[published]]
series = { index = "race" }
value = 1e9
[run.reduced]
index = "smart"
"#,
    )
    .unwrap();
    let mut rows = Vec::new();
    for keys in [250_000u64, 500_000, 1_000_000] {
        rows.push(json!({"index": "smart", "config": "smart", "keys": keys, "remote_bytes_used": 72 * keys}));
        rows.push(
            json!({"index": "smart", "config": "smart,alloc_align=256", "keys": keys, "remote_bytes_used": 265 * keys}),
        );
        rows.push(json!({"index": "sherman", "config": "sherman-dolphin", "keys": keys, "remote_bytes_used": 40 * keys + 1000}));
    }
    let s = plot::extrapolations(&figure, &rows, "remote_bytes_used");
    let names: Vec<&str> = s.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["smart", "smart (smart,alloc_align=256)", "sherman (sherman-dolphin)", "race (not run)"]);
    assert_eq!(s[0].measured, vec![(250_000.0, 18e6), (500_000.0, 36e6), (1e6, 72e6)]);
    let (first, last) = (s[1].line[0], *s[1].line.last().unwrap());
    assert!((first.0 - 250_000.0).abs() < 1e-6 && (last.0 - 512e6).abs() < 1e-3, "{first:?} {last:?}");
    assert!((last.1 / (265.0 * 512e6) - 1.0).abs() < 1e-9, "the fitted line at the target: {}", last.1);
    assert!(s[0].paper.is_empty(), "the paper's SMART is the artifact's alignment, not ours");
    assert_eq!(s[1].paper, vec![(512e6, 167503724544.0)]);
    assert_eq!(s[2].paper, vec![(512e6, 12884901888.0)], "a selector naming fewer fields still finds its series");
    assert!(s[3].measured.is_empty() && s[3].paper.len() == 1);
    let dir = std::env::temp_dir().join(format!("dmkit-extrapolation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    plot::figure_plots(&figure, &rows, &[], &dir).unwrap();
    let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
    for text in
        ["remote_bytes_used (GiB), log scale", "keys (log scale)", "smart (smart,alloc_align=256)", "512M", "100M"]
    {
        assert!(svg.contains(text), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

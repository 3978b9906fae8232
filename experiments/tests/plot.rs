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

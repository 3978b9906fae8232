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

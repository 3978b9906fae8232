//! The figure machinery of `dmkit reproduce`, on a test figure over the example index: the
//! "published" numbers here are test inputs chosen around what the run gives, to check the
//! comparison point, the ratio, the tolerance and the report; they are no paper's claims.

use dmkit_experiments::reproduce::{self, Compare, Figure, Selector, comparison_point, holdout, report};
use serde_json::json;

fn sel(pairs: &[(&str, &str)]) -> Selector {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn rows() -> Vec<serde_json::Value> {
    vec![
        json!({"index": "example", "workload": "ycsb-a", "clients": 8, "throughput_mops": 2.0}),
        json!({"index": "example", "workload": "ycsb-a", "clients": 64, "throughput_mops": 10.0}),
        json!({"index": "example", "workload": "ycsb-a", "clients": 128, "throughput_mops": 8.0}),
        json!({"index": "example", "workload": "ycsb-c", "clients": 64, "throughput_mops": 12.5}),
    ]
}

const FIGURE: &str = r#"
paper = "test"
figure = "ycsb"
title = "example index, YCSB A and C"
source = "a test figure"
tolerance = 0.2

[compare]
metric = "throughput_mops"
over = "peak"
series = ["index", "workload"]

[[published]]
series = { index = "example", workload = "ycsb-a" }
value = 9.0

[[published]]
series = { index = "example", workload = "ycsb-c" }
value = 20.0

[[published]]
series = { index = "sherman", workload = "ycsb-c" }
value = 5.0

[[ratio]]
numerator = { index = "example", workload = "ycsb-c" }
denominator = { index = "example", workload = "ycsb-a" }
value = 1.2

[run.reduced]
index = "example"
keys = 4000
compute_nodes = 2
warmup_us = 20
duration_us = 100

[run.reduced.sweep]
workload = ["a", "c"]
threads_per_cn = [1, 4]
"#;

#[test]
fn comparison_points_are_peak_min_or_last() {
    let mut c = Compare {
        metric: "throughput_mops".into(),
        over: "peak".into(),
        series: vec![],
        x: None,
        at: None,
        holdout: false,
        x_scale: Default::default(),
        also_at: vec![],
    };
    let a = sel(&[("workload", "ycsb-a")]);
    assert_eq!(comparison_point(&rows(), &c, &a), Some(10.0));
    c.over = "min".into();
    assert_eq!(comparison_point(&rows(), &c, &a), Some(2.0));
    c.over = "last".into();
    assert_eq!(comparison_point(&rows(), &c, &a), Some(8.0));
    assert_eq!(comparison_point(&rows(), &c, &sel(&[("workload", "ycsb-z")])), None);
}

#[test]
fn the_report_sets_ours_beside_the_paper_and_counts_every_gap() {
    let figure = Figure::parse(FIGURE).unwrap();
    let (text, failures) = report(&figure, &rows(), "reduced");
    // A: 10 vs 9 (within 20%); C: 12.5 vs 20 (outside); sherman: missing; C/A = 1.25 vs 1.2 (within).
    assert!(text.contains("| example ycsb-a | 9 | 10.000 | 1.11 | yes |"), "{text}");
    assert!(text.contains("| example ycsb-c | 20 | 12.500 | 0.62 | **no** |"), "{text}");
    assert!(text.contains("| sherman ycsb-c | 5 | missing | - | **missing** |"), "{text}");
    assert!(text.contains("| 1.2 | 1.250 | 1.04 | yes |"), "{text}");
    assert_eq!(failures, 2, "one value outside the tolerance and one missing series");
}

/// Ranges (a paper's "+37% to +55%") hold within the range widened by the tolerance; a share
/// divides one metric by another of the same row, reached by a dotted path.
#[test]
fn ranges_and_shares_are_judged() {
    let text = r#"
paper = "test"
figure = "shares"
title = "ranges and shares"
source = "a test figure"
tolerance = 0.1

[compare]
metric = "throughput_mops"
over = "last"
series = ["index", "workload"]

[[published]]
series = { index = "example", workload = "ycsb-c" }
metric = "counters.queue_ns"
per = "counters.total_ns"
range = [0.5, 0.66]

[[published]]
series = { index = "example", workload = "ycsb-c" }
metric = "counters.sync_ns"
per = "counters.total_ns"
range = [0.1, 0.2]

[[ratio]]
numerator = { index = "example", workload = "ycsb-c" }
denominator = { index = "example", workload = "ycsb-a" }
range = [1.373, 1.545]

[[ratio]]
numerator = { index = "example", workload = "ycsb-c" }
denominator = { index = "example", workload = "ycsb-a" }
range = [0.4, 1.0]

[run.reduced]
index = "example"
"#;
    let figure = Figure::parse(text).unwrap();
    let rows = vec![
        json!({"index": "example", "workload": "ycsb-a", "throughput_mops": 10.0}),
        json!({"index": "example", "workload": "ycsb-c", "throughput_mops": 16.0,
               "counters": {"queue_ns": 700, "sync_ns": 250, "total_ns": 1000}}),
    ];
    let (report, failures) = report(&figure, &rows, "reduced");
    // 0.7 is in [0.45, 0.726]; 0.25 is above 0.22; 1.6 is in [1.236, 1.700]; 1.6 is above 1.1.
    assert!(report.contains("`counters.queue_ns` / `counters.total_ns` | 0.5–0.66 | 0.700 | 1.21 | yes |"), "{report}");
    assert!(
        report.contains("`counters.sync_ns` / `counters.total_ns` | 0.1–0.2 | 0.250 | 1.67 | **no** |"),
        "{report}"
    );
    assert!(report.contains("| 1.373–1.545 | 1.600 | 1.10 | yes |"), "{report}");
    assert!(report.contains("| 0.4–1 | 1.600 | 2.29 | **no** |"), "{report}");
    assert_eq!(failures, 2);
    for (bad, needle) in [
        (text.replace("range = [0.5, 0.66]", "range = [0.66, 0.5]"), "range"),
        (text.replace("range = [0.5, 0.66]", ""), "value"),
        (text.replace("range = [0.5, 0.66]", "range = [0.5, 0.66]\nvalue = 1.0"), "value"),
    ] {
        let e = Figure::parse(&bad).unwrap_err();
        assert!(e.contains(needle) && !e.contains('\n'), "{e}");
    }
}

#[test]
fn bad_figure_files_are_one_line_errors() {
    for (text, needle) in [
        (FIGURE.replace("tolerance = 0.2", "tolerance = 0.0"), "tolerance"),
        (FIGURE.replace("over = \"peak\"", "over = \"best\""), "best"),
        (FIGURE.replace("paper = \"test\"", "paper = \"test\"\nbogus = 1"), "bogus"),
    ] {
        let err = Figure::parse(&text).unwrap_err();
        assert!(err.contains(needle) && !err.contains('\n'), "{err}");
    }
    let dir = std::env::temp_dir().join(format!("dmkit-figures-{}", std::process::id()));
    assert!(reproduce::figure_files(&dir, "nopaper", None).unwrap_err().contains("nopaper"));
}

#[test]
fn a_figure_runs_end_to_end_into_csv_plot_and_report() {
    let dir = std::env::temp_dir().join(format!("dmkit-reproduce-{}", std::process::id()));
    let figure = Figure::parse(FIGURE).unwrap();
    let (text, failures) = reproduce::reproduce(&figure, "reduced", &dir, 2).unwrap();
    assert!(text.starts_with("# test ycsb"));
    assert!(failures >= 1, "the sherman series is missing from these results");
    for file in ["result.jsonl", "result.csv", "curve.svg", "curve.png", "report.md"] {
        assert!(dir.join(file).exists(), "{file} written");
    }
    assert_eq!(std::fs::read_to_string(dir.join("result.jsonl")).unwrap().lines().count(), 4);
    assert!(reproduce::reproduce(&figure, "full", &dir, 2).unwrap_err().contains("full-scale"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every shipped figure file parses, and both scales expand into valid run requests (so a typo
/// surfaces here, not after a long run).
#[test]
fn every_shipped_figure_file_is_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/figures");
    let mut count = 0;
    for paper in std::fs::read_dir(&root).unwrap() {
        let paper = paper.unwrap().file_name().into_string().unwrap();
        for file in reproduce::figure_files(&root, &paper, None).unwrap() {
            let figure = Figure::parse(&std::fs::read_to_string(&file).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert_eq!(figure.paper, paper, "{}", file.display());
            assert!(!figure.run.reduced.requests().unwrap().is_empty());
            if let Some(full) = &figure.run.full {
                assert!(!full.requests().unwrap().is_empty());
            }
            count += 1;
        }
    }
    assert!(count >= 1, "no figure files under {}", root.display());
}

/// Ours carries its interval, a ratio's is propagated from its two points', and the ranking is
/// judged against 1 with that interval.
#[test]
fn intervals_and_rankings_are_reported() {
    let figure = Figure::parse(FIGURE).unwrap();
    let rows = vec![
        json!({"index": "example", "workload": "ycsb-a", "clients": 64, "throughput_mops": 10.0, "throughput_mops_ci95": 0.3, "steady": true}),
        json!({"index": "example", "workload": "ycsb-c", "clients": 64, "throughput_mops": 12.5, "throughput_mops_ci95": 0.4, "steady": false}),
    ];
    let all = reproduce::comparisons(&figure, &rows);
    let a = &all[0];
    assert_eq!((a.ours, a.ours_ci95, a.steady), (Some(10.0), Some(0.3), Some(true)));
    let ratio = all.iter().find(|c| c.kind == "ratio").unwrap();
    let expected = 1.25 * ((0.4f64 / 12.5).powi(2) + (0.3f64 / 10.0).powi(2)).sqrt();
    assert!((ratio.ours_ci95.unwrap() - expected).abs() < 1e-12);
    assert_eq!(ratio.steady, Some(false), "a ratio is steady only if both its points are");
    assert_eq!(ratio.ranking, Some(reproduce::Ranking::Holds), "1.25 ± 0.05 is clear of 1, as the paper's 1.2");
    let (text, _) = report(&figure, &rows, "reduced");
    assert!(text.contains("| 1.2 | 1.250 ± 0.055 | 1.04 | yes | holds | **no** |"), "{text}");
    // The same ratio with a wide interval is unresolved; below 1, reversed.
    let mut wide = rows.clone();
    wide[1]["throughput_mops_ci95"] = json!(4.0);
    let r = reproduce::comparisons(&figure, &wide).into_iter().find(|c| c.kind == "ratio").unwrap();
    assert_eq!(r.ranking, Some(reproduce::Ranking::Unresolved));
    let mut below = rows.clone();
    below[1]["throughput_mops"] = json!(8.0);
    let r = reproduce::comparisons(&figure, &below).into_iter().find(|c| c.kind == "ratio").unwrap();
    assert_eq!(r.ranking, Some(reproduce::Ranking::Reversed));
}

/// Runs that differ only in their seed become one point: the mean and the seeds' interval.
#[test]
fn seeds_are_aggregated_into_mean_and_interval() {
    let requests = dmkit_experiments::run::RunFile::parse(
        "index = \"example\"\nkeys = 1000\n[sweep]\nworkload = [\"a\", \"c\"]\nseed = [1, 2, 3]\n",
    )
    .unwrap()
    .requests()
    .unwrap();
    let tput = [10.0, 11.0, 12.0, 5.0, 5.0, 5.0];
    let rows: Vec<serde_json::Value> = (0..6)
        .map(|i| {
            let workload = if i < 3 { "ycsb-a" } else { "ycsb-c" };
            json!({"index": "example", "workload": workload, "throughput_mops": tput[i],
                   "throughput_mops_ci95": 0.1, "steady": i != 4})
        })
        .collect();
    let points = reproduce::aggregate_seeds(&requests, &rows);
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["throughput_mops"], 11.0);
    assert_eq!(points[0]["seeds"], 3);
    // s = 1 over 3 seeds: t(2) = 4.3027, half-width 4.3027 / sqrt(3).
    let h = points[0]["throughput_mops_ci95"].as_f64().unwrap();
    assert!((h - 4.3027 / 3f64.sqrt()).abs() < 1e-9, "{h}");
    assert_eq!(points[1]["steady"], false, "one seed's run was not steady");
}

/// What reproducing the test figure over [`rows`] gave: 4 runs in a minute, 2 numbers missing.
fn outcome_of(figure: &Figure, unsteady_runs: usize) -> reproduce::Outcome {
    reproduce::Outcome {
        report: String::new(),
        comparisons: reproduce::comparisons(figure, &rows()),
        failures: 2,
        runs: 4,
        unsteady_runs,
        wall_s: 60.0,
    }
}

#[test]
fn the_fidelity_summary_counts_every_number_and_ranking() {
    let figure = Figure::parse(FIGURE).unwrap();
    let outcome = outcome_of(&figure, 1);
    let (md, json) = reproduce::fidelity(&[("test ycsb".into(), outcome)], "reduced");
    assert!(md.contains("2 of 4 numbers within their figure's tolerance"), "{md}");
    assert!(md.contains("of 1 rankings the papers state, 1 hold"), "{md}");
    assert_eq!(json["total"], 4);
    assert_eq!(json["comparisons"].as_array().unwrap().len(), 4);
}

/// A number that misses carries the figure file's account of why (`why`), in the figure's
/// report and in the summary, and one without an account says so; a number within tolerance
/// lists nothing.
#[test]
fn every_miss_is_listed_with_its_mechanism_or_as_unexplained() {
    let text = FIGURE.replace(
        "[[published]]\nseries = { index = \"example\", workload = \"ycsb-c\" }\nvalue = 20.0\n",
        "[[published]]\nseries = { index = \"example\", workload = \"ycsb-c\" }\nvalue = 20.0\nwhy = \"the test's cause\"\n",
    );
    assert_ne!(text, FIGURE, "the test figure's C value gained a why");
    let figure = Figure::parse(&text).unwrap();
    let (md, _) = report(&figure, &rows(), "reduced");
    assert!(md.contains("miss (1 explained):"), "{md}");
    assert!(md.contains("- test ycsb, example ycsb-c: the test's cause"), "{md}");
    assert!(md.contains("- test ycsb, sherman ycsb-c: **not explained yet**"), "{md}");
    assert!(!md.contains("- test ycsb, example ycsb-a"), "A is within tolerance: {md}");
    let outcome = outcome_of(&figure, 0);
    let (md, json) = reproduce::fidelity(&[("test ycsb".into(), outcome)], "reduced");
    assert!(md.contains("1 of the 2 numbers that miss either way have their mechanism stated"), "{md}");
    assert!(md.contains("- test ycsb, example ycsb-c: the test's cause"), "{md}");
    assert_eq!((json["misses"].as_u64(), json["misses_explained"].as_u64()), (Some(2), Some(1)));
    // A misspelt field is still refused, not taken for a note.
    assert!(Figure::parse(&text.replace("why =", "whyy =")).is_err());
}

/// An extrapolation is tested on the largest scale measured: the line through the smaller
/// points, evaluated there, against the measurement there; the comparison fits every point.
#[test]
fn an_extrapolation_is_tested_on_a_held_out_scale() {
    let text = r#"
paper = "test"
figure = "holdout"
title = "a line tested at its largest point"
source = "a test figure"
tolerance = 0.1

[compare]
metric = "cache_bytes_per_cn"
over = "extrapolate"
series = ["index"]
x = "keys"
at = 100.0
holdout = true

[[published]]
series = { index = "example" }
value = 300.0

[run.reduced]
index = "example"
keys = 1000
"#;
    let figure = Figure::parse(text).unwrap();
    // y = 2x + 1 below the held-out x = 10, where the measurement is 25 (the line says 21).
    let rows: Vec<serde_json::Value> = [(1, 3.0), (2, 5.0), (4, 9.0), (10, 25.0)]
        .iter()
        .map(|(k, y)| json!({"index": "example", "keys": k, "cache_bytes_per_cn": y}))
        .collect();
    let h =
        holdout(&rows, &figure.compare, &sel(&[("index", "example")]), "cache_bytes_per_cn").expect("a held-out test");
    assert_eq!((h.at, h.fit.points.len(), h.predicted, h.measured), (10.0, 3, 21.0, 25.0));
    assert!((h.error() + 0.16).abs() < 1e-12);
    let (report_text, _) = report(&figure, &rows, "reduced");
    assert!(
        report_text
            .contains("| index=example | cache_bytes_per_cn | keys = 1, 2, 4 | 10 | 2.1000e1 | 2.5000e1 | -16.0% |"),
        "{report_text}"
    );
    // With two sizes only, the test says so and the comparison still fits.
    let (report_text, _) = report(&figure, &rows[..2], "reduced");
    assert!(
        report_text.contains("| index=example | cache_bytes_per_cn | fewer than three sizes | - |"),
        "{report_text}"
    );
    assert!(
        report_text.contains("| index=example | cache_bytes_per_cn | (1, 3.0000e0) (2, 5.0000e0) |"),
        "{report_text}"
    );
    // A held-out scale needs an extrapolation.
    let bad = text.replace("over = \"extrapolate\"", "over = \"peak\"");
    assert!(Figure::parse(&bad).unwrap_err().contains("holdout"));
}

/// A share that falls by a constant step per doubling of the scale is a line over `ln x`:
/// `x_scale = "log"` fits it there, a published number may name another metric of the same
/// runs (fitted and held out the same way), and `also_at` evaluates each line further out.
#[test]
fn a_log_scale_extrapolation_fits_every_metric_it_judges() {
    let text = r#"
paper = "test"
figure = "log"
title = "shares over ln keys"
source = "a test figure"
tolerance = 0.1

[compare]
metric = "rdwc.read_delegation_ratio"
over = "extrapolate"
series = ["index"]
x = "keys"
at = 64.0
holdout = true
x_scale = "log"
also_at = [1024.0]

[[published]]
series = { index = "smart" }
value = 0.10

[[published]]
series = { index = "smart" }
metric = "rdwc.write_combining_ratio"
value = 0.2

[run.reduced]
index = "smart"
keys = 1000
"#;
    let figure = Figure::parse(text).unwrap();
    // Read delegation 0.3 - 0.05 log2(x) and write combining 0.5 - 0.05 log2(x), measured at
    // x = 2, 4, 8; at x = 16 the reads are off the line by 0.01.
    let rows: Vec<serde_json::Value> = [2.0f64, 4.0, 8.0, 16.0]
        .iter()
        .map(|&k| {
            let off = if k == 16.0 { 0.01 } else { 0.0 };
            let rd = 0.3 - 0.05 * k.log2() + off;
            let wc = 0.5 - 0.05 * k.log2();
            json!({"index": "smart", "keys": k, "rdwc": {"read_delegation_ratio": rd, "write_combining_ratio": wc}})
        })
        .collect();
    let smart = sel(&[("index", "smart")]);
    let held = holdout(&rows, &figure.compare, &smart, "rdwc.write_combining_ratio").expect("a held-out test");
    assert!((held.predicted - 0.3).abs() < 1e-12 && held.error().abs() < 1e-9, "{held:?}");
    let held = holdout(&rows, &figure.compare, &smart, "rdwc.read_delegation_ratio").expect("a held-out test");
    assert!((held.predicted - 0.1).abs() < 1e-12 && (held.measured - 0.11).abs() < 1e-12, "{held:?}");
    // The comparison: each metric's line at 64 (log2 = 6); both within tolerance of the paper.
    let outcome = reproduce::comparisons(&figure, &rows);
    let ours: Vec<f64> = outcome.iter().map(|c| c.ours.unwrap()).collect();
    assert_eq!(ours.len(), 2);
    assert!((ours[0] - 0.0).abs() < 0.02 && (ours[1] - 0.2).abs() < 1e-12, "{ours:?}");
    let (md, _) = report(&figure, &rows, "reduced");
    assert!(md.contains("Fits over `ln keys`"), "{md}");
    assert!(md.contains("| index=smart | rdwc.write_combining_ratio | keys = 2, 4, 8 | 16 | 3.0000e-1 |"), "{md}");
    // The write-combining line at 1024 (log2 = 10): 0.5 - 0.5 = 0.
    assert!(md.contains(" at 1.024e3 |"), "{md}");
    let wc_row = md.lines().find(|l| l.starts_with("| index=smart | rdwc.write_combining_ratio | (2,")).unwrap();
    let cells: Vec<&str> = wc_row.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
    let (at_target, further): (f64, f64) = (cells[5].parse().unwrap(), cells[6].parse().unwrap());
    assert!((at_target - 0.2).abs() < 1e-9 && further.abs() < 1e-9, "{wc_row}");
    // Bad input: a log scale needs positive targets; the shape belongs to an extrapolation.
    assert!(Figure::parse(&text.replace("at = 64.0", "at = 0.0")).unwrap_err().contains("positive"));
    let peak = text.replace("over = \"extrapolate\"", "over = \"peak\"").replace("holdout = true", "");
    assert!(Figure::parse(&peak).unwrap_err().contains("x_scale"));
    assert!(Figure::parse(&text.replace("x_scale = \"log\"", "x_scale = \"ln\"")).is_err());
}

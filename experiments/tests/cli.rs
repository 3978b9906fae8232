//! The `dmkit` command as a user meets it: output formats, determinism, and one clear error line
//! with exit code 2 for bad input.

use std::process::{Command, Output};

fn dmkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmkit")).args(args).output().expect("dmkit runs")
}

fn stderr_line(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(text.trim_end().lines().count(), 1, "exactly one error line, got: {text:?}");
    assert!(!text.contains("panicked"), "{text}");
    text
}

/// `dmkit args` fails with exit code 2 and one stderr line that mentions `needle`.
fn assert_one_line_error(args: &[&str], needle: &str) {
    let out = dmkit(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let line = stderr_line(&out);
    assert!(line.contains(needle), "{args:?}: '{line}' should mention '{needle}'");
}

const SHORT: [&str; 4] = ["--warmup-us", "20", "--duration-us", "100"];

#[test]
fn perftest_json_has_the_schema_and_is_deterministic() {
    let args =
        [&["perftest", "--verb", "read", "--clients", "1,32", "--format", "json", "--seed", "5"][..], &SHORT].concat();
    let a = dmkit(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let text = String::from_utf8(a.stdout.clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "one JSON object per point");
    for (line, clients) in lines.iter().zip([1, 32]) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for field in [
            "verb",
            "bytes",
            "clients",
            "throughput_mops",
            "throughput_gbytes_per_s",
            "latency_ns_p50",
            "latency_ns_p99",
        ] {
            assert!(v.get(field).is_some(), "missing {field} in {line}");
        }
        assert_eq!(v["clients"], clients);
        assert_eq!(v["verb"], "read");
        assert!(v["throughput_mops"].as_f64().unwrap() > 0.0);
    }
    let b = dmkit(&args);
    assert_eq!(a.stdout, b.stdout, "same flags, same JSON");
    let other = dmkit(
        &[&["perftest", "--verb", "read", "--clients", "1,32", "--format", "json", "--seed", "6"][..], &SHORT].concat(),
    );
    assert!(other.status.success());
}

#[test]
fn perftest_table_sweeps_clients() {
    let out = dmkit(&[&["perftest", "--verb", "write", "--bytes", "256", "--clients", "1,4,16"][..], &SHORT].concat());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 4, "header and three points:\n{text}");
    assert!(text.lines().nth(3).unwrap().starts_with("write"));
}

#[test]
fn bad_input_gives_one_line_and_exit_2() {
    let cases: [(&[&str], &str); 8] = [
        (&["perftest", "--verb", "bogus"], "bogus"),
        (&["perftest", "--profile", "no-such-profile"], "no-such-profile"),
        (&["perftest", "--verb", "cas", "--offset", "3"], "not 8-byte aligned"),
        (&["perftest", "--offset", "68719476736"], "out of range"),
        (&["perftest", "--region", "device", "--bytes", "1048576"], "out of range"),
        (&["perftest", "--clients", "0"], "--clients"),
        (&["perftest", "--memory-nodes", "0"], "--memory-nodes"),
        (&["perftest", "--unknown-flag"], "--unknown-flag"),
    ];
    for (args, needle) in cases {
        assert_one_line_error(&[args, &SHORT].concat(), needle);
    }
}

#[test]
fn a_malformed_profile_file_is_one_error_line() {
    let dir = std::env::temp_dir().join(format!("dmkit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "name = \"x\"\ndescription = \"y\"\n[nic]\nmtu_bytes = \"big\"\n[memory_node]\n").unwrap();
    let out = dmkit(&[&["perftest", "--profile", path.to_str().unwrap()][..], &SHORT].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("bad NIC profile"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_prints_the_full_metric_schema() {
    let out = dmkit(&[
        "run",
        "--index",
        "example",
        "--workload",
        "a",
        "--keys",
        "20000",
        "--clients",
        "64",
        "--duration-us",
        "200",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for field in [
        "index",
        "config",
        "workload",
        "clients",
        "throughput_mops",
        "latency_ns_p50",
        "latency_ns_p90",
        "latency_ns_p99",
        "latency_ns_p999",
        "per_op",
        "round_trips_per_op",
        "bytes_read_per_op",
        "bytes_written_per_op",
        "read_amplification",
        "verbs_per_op",
        "mn_iops_utilisation",
        "mn_bandwidth_utilisation",
        "cache_bytes_per_cn",
        "cache_hit_ratio",
        "remote_bytes_used",
        "metadata_bytes_per_item",
        "load_factor",
        "retries_per_op",
        "lock_failures",
        "cas_failures",
        "rdwc",
        "index_counters",
    ] {
        assert!(v.get(field).is_some(), "missing {field}");
    }
    assert_eq!(v["clients"], 64);
    assert!(v["throughput_mops"].as_f64().unwrap() > 1.0);
    // YCSB A is half searches, half updates; a search is one round trip, an update two.
    let per_op = v["per_op"].as_object().unwrap();
    assert!(per_op.contains_key("search") && per_op.contains_key("update"), "{per_op:?}");
    let rtt = v["round_trips_per_op"].as_f64().unwrap();
    assert!((1.3..=1.8).contains(&rtt), "round trips per op {rtt}");
    assert!(v["load_factor"].as_f64().unwrap() > 0.0);
}

/// Dolphin on the artifact's key space: a search is one leaf READ, an update two round trips.
#[test]
fn dolphin_runs_dense_ycsb_a_in_one_and_two_round_trips() {
    let out = dmkit(&[
        "run",
        "--index",
        "dolphin",
        "--workload",
        "dense-a",
        "--keys",
        "20000",
        "--compute-nodes",
        "2",
        "--threads-per-cn",
        "4",
        "--warmup-us",
        "20",
        "--duration-us",
        "100",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8(out.stdout).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(v["workload"], "dense-a");
    assert!(v["operations"].as_u64().unwrap() > 100, "{v}");
    let rtt = v["round_trips_per_op"].as_f64().unwrap();
    assert!((1.3..=1.6).contains(&rtt), "round trips per op {rtt}");
    assert!(v["errors"].as_object().unwrap().is_empty(), "{v}");
}

fn json_run(args: &[&str]) -> serde_json::Value {
    let out = dmkit(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(String::from_utf8(out.stdout).unwrap().lines().last().unwrap()).unwrap()
}

/// HStore: a GET is two round trips (bucket, then block), a write the block WRITE and the
/// call; YCSB E's scans go through the SLS; Sherman with values out of line adds the value READ.
#[test]
fn hstore_and_its_baseline_run() {
    let common = ["--keys", "5000", "--key-bytes", "20", "--value-bytes", "200", "--compute-nodes", "1"];
    let run = |index: &str, config: &str, workload: &str| {
        let mut args = vec!["run", "--index", index, "--config", config, "--workload", workload];
        args.extend(common);
        args.extend(["--threads-per-cn", "4", "--warmup-us", "20", "--duration-us", "200", "--format", "json"]);
        json_run(&args)
    };
    let c = run("hstore", "hstore", "c");
    assert!(c["operations"].as_u64().unwrap() > 100, "{c}");
    let rtt = c["round_trips_per_op"].as_f64().unwrap();
    assert!((2.0..2.05).contains(&rtt), "two round trips, and a few chained buckets: {c}");
    let a = run("hstore", "hstore-sync", "a");
    assert!(a["index_counters"]["put_ops"].as_u64().unwrap() > 50, "{a}");
    let e = run("hstore", "faithful", "e");
    assert!(e["per_op"]["scan"]["operations"].as_u64().unwrap() > 0, "{e}");
    assert!(e["index_counters"]["sls_scans"].as_u64().unwrap() > 0, "{e}");
    let s = run("sherman", "sherman-hstore-ool", "c");
    assert!(s["round_trips_per_op"].as_f64().unwrap() >= 2.0, "the value READ follows the leaf: {s}");
    for v in [&c, &a, &e, &s] {
        assert!(v["errors"].as_object().unwrap().is_empty(), "{v}");
    }
}

/// Clover as its artifact issues its verbs: with the query cache warm a GET READs the cached
/// tail and the shortcut together (one round trip of latency, no metadata-server call), a PUT
/// WRITEs and CASes; with the cache off (`nocache`) every operation asks the metadata server
/// first, whose answer names the tail to READ.
#[test]
fn clover_warm_gets_take_one_round_trip_and_nocache_asks_the_ms_each_time() {
    let run = |config: &str, workload: &str| {
        json_run(&[
            "run",
            "--index",
            "clover",
            "--config",
            config,
            "--workload",
            workload,
            "--keys",
            "5000",
            "--compute-nodes",
            "1",
            "--threads-per-cn",
            "4",
            "--warmup-us",
            "20",
            "--duration-us",
            "200",
            "--format",
            "json",
        ])
    };
    let (warm, cold) = (run("default", "c"), run("nocache", "c"));
    for v in [&warm, &cold] {
        assert!(v["operations"].as_u64().unwrap() > 100, "{v}");
        assert!(v["errors"].as_object().unwrap().is_empty(), "{v}");
    }
    let ops = |v: &serde_json::Value| v["operations"].as_u64().unwrap();
    let lookups = |v: &serde_json::Value| v["index_counters"]["ms_lookup"].as_u64().unwrap_or(0);
    assert_eq!(lookups(&warm), 0, "a warm cache asks the MS nothing: {warm}");
    assert!(lookups(&cold) >= ops(&cold), "every operation asks the MS: {cold}");
    // Two READs in flight together, to the memory node and the MS's node: one round trip.
    let rtt = warm["round_trips_per_op"].as_f64().unwrap();
    assert!((0.99..1.01).contains(&rtt), "{warm}");
    assert!((1.99..2.01).contains(&warm["verbs_per_op"]["read"].as_f64().unwrap()), "{warm}");
    // Cold: the call, then that round trip.
    let rtt = cold["round_trips_per_op"].as_f64().unwrap();
    assert!((1.99..2.01).contains(&rtt), "{cold}");
    // Cold, the MS's answer names the version the shortcut does, so a GET is the call and then
    // the same round trip: about twice the warm latency (a call costs about a READ), where a
    // call, a shortcut READ and a version READ in series take about three times it.
    let p50 = |v: &serde_json::Value| v["latency_ns_p50"].as_f64().unwrap();
    let slower = p50(&cold) / p50(&warm);
    assert!((1.5..2.4).contains(&slower), "a call and one round trip against one round trip: {warm} {cold}");
    // YCSB A: a warm GET's one round trip and an update's two (the version's WRITE, then the
    // CAS on the cached tail), half and half.
    let a = run("default", "a");
    let rtt = a["round_trips_per_op"].as_f64().unwrap();
    assert!((1.45..1.6).contains(&rtt), "{a}");
}

/// A crashed HTS: GETs go to the SLS; with a restart, the table is rebuilt and served again.
#[test]
fn hstore_survives_a_server_crash() {
    let base = [
        "run",
        "--index",
        "hstore",
        "--workload",
        "a",
        "--keys",
        "3000",
        "--compute-nodes",
        "1",
        "--threads-per-cn",
        "2",
        "--warmup-us",
        "0",
        "--duration-us",
        "3000",
        "--crash-server",
        "0",
        "--crash-at-us",
        "100",
        "--format",
        "json",
    ];
    // Reads only, so that every client's next operation after the crash is a GET the
    // skiplist server answers (a PUT waits for the table to come back).
    let mut reads = base.to_vec();
    reads[4] = "c";
    let down = json_run(&reads);
    assert_eq!(down["crashed_server"], 0);
    assert!(down["index_counters"]["degraded_get"].as_u64().unwrap() > 0, "{down}");
    let mut restart = base.to_vec();
    restart.extend(["--restart-after-us", "50"]);
    let back = json_run(&restart);
    assert_eq!(back["index_counters"]["hts_recoveries"], 1, "{back}");
    assert_eq!(back["index_counters"]["hts_recovered_items"], 3000, "{back}");
    assert!(back["errors"].as_object().unwrap().is_empty(), "{back}");
    assert_one_line_error(&["run", "--index", "example", "--crash-server", "0"], "server");
}

/// `--coverage` runs every preset and tabulates the race handlers each reached; the example's
/// two (lock contention, a torn slot re-read) are reached, so it passes. The schedule bound
/// keeps it fast and independent of the machine's load.
#[test]
fn check_coverage_lists_every_race_handler_and_preset() {
    let out = dmkit(&["check", "--index", "example", "--coverage", "--max-schedules", "300"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let table: Vec<&str> = text.lines().skip_while(|l| !l.contains("race handlers reached per preset")).collect();
    assert!(table[1].contains("default") && table[1].contains("hot") && table[1].contains("pair"), "{text}");
    for handler in ["lock_failures", "torn_search"] {
        let row = table.iter().find(|l| l.starts_with(handler)).unwrap_or_else(|| panic!("{handler}: {text}"));
        let total: u64 = row.split_whitespace().last().unwrap().parse().unwrap();
        assert!(total > 0, "{row}");
    }
    assert!(text.contains("every race handler ran in some preset"), "{text}");
}

/// `--list-indexes` names every index the registry has, and each lists its presets.
#[test]
fn check_lists_the_indexes_it_knows_and_each_has_presets() {
    let out = dmkit(&["check", "--list-indexes"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    for expected in ["example", "sherman", "smart", "art", "chime", "race", "cluster", "dolphin", "hstore", "clover"] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
    for name in &names {
        let presets = dmkit(&["check", "--index", name, "--list-presets"]);
        assert_eq!(presets.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&presets.stderr));
        assert!(
            String::from_utf8_lossy(&presets.stdout).lines().nth(1).is_some_and(|l| l.contains(" clients x ")),
            "{name}"
        );
    }
    let missing = dmkit(&["check"]);
    assert_eq!(missing.status.code(), Some(2), "no --index and no --list-indexes is a usage error");
}

/// `--sweep` runs every sweep preset, one row each, and a sweep preset can be checked alone by
/// name (the replay line of a violation names it).
#[test]
fn check_sweep_runs_every_sweep_preset() {
    let out = dmkit(&["check", "--index", "example", "--sweep", "--max-schedules", "30"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let list = dmkit(&["check", "--index", "example", "--list-presets"]);
    let list = String::from_utf8_lossy(&list.stdout);
    let names: Vec<&str> =
        list.lines().filter(|l| l.starts_with("sweep-")).map(|l| l.split(':').next().unwrap()).collect();
    assert!(names.len() >= 3, "{list}");
    for name in &names {
        let row = text.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("{name}: {text}"));
        assert!(row.ends_with("clean"), "{row}");
    }
    let one = dmkit(&["check", "--index", "example", "--preset", names[0], "--max-schedules", "50"]);
    assert_eq!(one.status.code(), Some(0), "{}", String::from_utf8_lossy(&one.stderr));
}

#[test]
fn run_bad_configs_give_one_line_and_exit_2() {
    let cases: [(&[&str], &str); 22] = [
        (&["run", "--index", "nope"], "unknown index"),
        (&["run", "--index", "smart", "--config", "smart-nope"], "smart-rearlock"),
        (&["run", "--index", "art", "--config", "smart"], "--index smart"),
        (&["run", "--index", "smart", "--key-bytes", "300"], "key"),
        (&["check", "--index", "smart", "--plant", "bogus"], "rev-cas-unsignaled"),
        (&["run", "--index", "sherman", "--config", "sherman-nope"], "sherman-chime"),
        (&["run", "--index", "sherman", "--value-bytes", "4096", "--config", "artifact"], "leaf"),
        (&["check", "--index", "sherman", "--config", "bogus"], "bogus"),
        (&["check", "--index", "example", "--coverage", "--preset", "hot"], "every preset"),
        (&["check", "--index", "example", "--sweep", "--preset", "hot"], "every sweep preset"),
        (&["run", "--index", "example", "--keys", "0"], "--keys"),
        (&["run", "--index", "example", "--workload", "zz"], "zz"),
        (&["run", "--index", "example", "--workload", "e", "--keys", "1000"], "scans"),
        (&["run", "--index", "example", "--config", "huge"], "huge"),
        (&["run", "--index", "example", "--profile", "/no/such/file.toml"], "/no/such/file.toml"),
        (&["run", "--index", "dolphin", "--value-bytes", "16"], "8-byte keys and values"),
        (&["run", "--index", "dolphin", "--config", "fast"], "hardened-even"),
        (&["run", "--index", "dolphin", "--workload", "dense-zz"], "dense-zz"),
        (&["run", "--index", "dolphin", "--workload", "a", "--zipf-items", "100000000"], "scrambled Zipfian"),
        (
            &["run", "--index", "dolphin", "--workload", "dense-a", "--keys", "1000", "--zipf-items", "999"],
            "at least the keys loaded",
        ),
        (&["run", "--index", "hstore", "--config", "fast"], "hstore-sync"),
        (&["run", "--index", "hstore", "--cache-bytes", "100"], "no compute-node cache"),
    ];
    for (args, needle) in cases {
        assert_one_line_error(args, needle);
    }
}

#[test]
fn a_run_file_sweeps_every_combination_in_order() {
    let dir = std::env::temp_dir().join(format!("dmkit-run-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sweep.toml");
    std::fs::write(
        &file,
        "index = \"example\"\nkeys = 5000\ncompute_nodes = 2\nduration_us = 100\nwarmup_us = 20\n\n[sweep]\nworkload = [\"a\", \"c\"]\nthreads_per_cn = [1, 4]\n",
    )
    .unwrap();
    let out_dir = dir.join("out");
    let out = dmkit(&["run", file.to_str().unwrap(), "--format", "json", "--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let points: Vec<(String, u64)> =
        rows.iter().map(|r| (r["workload"].as_str().unwrap().to_string(), r["clients"].as_u64().unwrap())).collect();
    let expected: Vec<(String, u64)> =
        [("ycsb-a", 2), ("ycsb-a", 8), ("ycsb-c", 2), ("ycsb-c", 8)].iter().map(|(w, c)| (w.to_string(), *c)).collect();
    assert_eq!(points, expected, "the last list varies fastest");
    let csv = std::fs::read_to_string(out_dir.join("result.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "a header and four rows");
    assert_eq!(std::fs::read_to_string(out_dir.join("result.jsonl")).unwrap().lines().count(), 4);
    // A file and flags together, or an unknown field, are one-line errors.
    let both = dmkit(&["run", file.to_str().unwrap(), "--index", "example"]);
    assert_eq!(both.status.code(), Some(2));
    std::fs::write(&file, "index = \"example\"\nbogus = 1\n").unwrap();
    let bad = dmkit(&["run", file.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr_line(&bad).contains("bogus"));
    std::fs::write(&file, "index = \"example\"\n[sweep]\nkeys = []\n").unwrap();
    assert!(stderr_line(&dmkit(&["run", file.to_str().unwrap()])).contains("empty"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_reports_a_throughput_time_series_on_request() {
    let args = [
        "run",
        "--index",
        "example",
        "--workload",
        "c",
        "--keys",
        "5000",
        "--clients",
        "16",
        "--warmup-us",
        "100",
        "--duration-us",
        "300",
    ];
    let plain: serde_json::Value =
        serde_json::from_slice(&dmkit(&[&args[..], &["--format", "json"]].concat()).stdout).unwrap();
    assert!(plain.get("timeseries").is_none(), "no series unless asked");
    let out = dmkit(&[&args[..], &["--format", "json", "--timeseries-us", "50"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let series = v["timeseries"].as_array().unwrap();
    assert_eq!(series.len(), 8, "400 us of warm-up and measurement in 50-us intervals");
    // The intervals after the warm-up hold the measured operations.
    let measured: u64 =
        series.iter().filter(|p| p["t_us"].as_f64().unwrap() >= 100.0).map(|p| p["operations"].as_u64().unwrap()).sum();
    let operations = v["operations"].as_u64().unwrap();
    assert!(measured.abs_diff(operations) * 100 <= operations, "{measured} vs {operations}");
    assert_eq!(v["throughput_mops"], plain["throughput_mops"], "asking for the series changes nothing else");
}

#[test]
fn run_takes_key_size_skew_and_an_operation_count() {
    let json = |args: &[&str]| -> serde_json::Value {
        let out = dmkit(
            &[&["run", "--index", "example", "--keys", "5000", "--clients", "16", "--format", "json"][..], args]
                .concat(),
        );
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // Longer keys mean wider slots: a search reads more bytes.
    let small = json(&["--workload", "c", "--duration-us", "200"]);
    let wide = json(&["--workload", "c", "--duration-us", "200", "--key-bytes", "64", "--email-keys"]);
    assert!(wide["bytes_read_per_op"].as_f64().unwrap() > small["bytes_read_per_op"].as_f64().unwrap());
    // An operation count replaces the duration: the window runs until the first client is done
    // (every client runs throughout it), so nearly all of the 1600 are measured, never more.
    let counted = json(&["--workload", "c", "--ops-per-client", "100", "--warmup-us", "0"]);
    let n = counted["operations"].as_u64().unwrap();
    assert!((1500..1600).contains(&n), "{n} of 1600 measured");
    // YCSB F: a read-modify-write is one measured operation (a search then an update).
    let f = json(&["--workload", "f", "--duration-us", "200"]);
    assert!(f["per_op"]["read_modify_write"]["operations"].as_u64().unwrap() > 0, "{}", f["per_op"]);
    assert!(f["per_op"].get("update").is_none(), "updates of F are inside its read-modify-writes");
    for (args, needle) in [
        (&["--cache-bytes", "1000"][..], "no compute-node cache"),
        (&["--key-bytes", "300"][..], "256"),
        (&["--workload", "load", "--theta", "0.5"][..], "theta"),
    ] {
        assert_one_line_error(&[&["run", "--index", "example", "--keys", "1000"][..], args].concat(), needle);
    }
}

#[test]
fn run_exports_a_history_the_checker_accepts() {
    let dir = std::env::temp_dir().join(format!("dmkit-run-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h.jsonl");
    let out = dmkit(&[
        "run",
        "--index",
        "example",
        "--workload",
        "a",
        "--keys",
        "200",
        "--clients",
        "16",
        "--duration-us",
        "200",
        "--export-history",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let history = dmkit_verify::history::History::from_json_lines(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(history.records.len() > 200 + 100, "the loaded keys and the run's operations");
    let report =
        dmkit_verify::linearizability::check(&history, false).expect("a run of a correct index is linearizable");
    assert!(report.operations_checked > 100);
    // Program order comes for free: the stamps are distinct, a client's operations ascend.
    let mut stamps: Vec<u64> =
        history.records.iter().filter(|r| r.client != u32::MAX).flat_map(|r| [r.invoke, r.respond.unwrap()]).collect();
    let n = stamps.len();
    stamps.sort_unstable();
    stamps.dedup();
    assert_eq!(stamps.len(), n, "every invocation and response has its own stamp");

    // `check-history` re-judges the exported history with the same verdict, and catches a
    // search result changed to a value nobody wrote (exit 1, the operation named).
    let out = dmkit(&["check-history", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains(": linearizable"));
    let mut bad = history.clone();
    let at = bad
        .records
        .iter()
        .position(|r| matches!(&r.outcome, dmkit_indexes::spec::Outcome::Found(Some(_))))
        .expect("a search found something");
    bad.records[at].outcome = dmkit_indexes::spec::Outcome::Found(Some(vec![0xee; 8]));
    let bad_path = dir.join("bad.jsonl");
    std::fs::write(&bad_path, bad.to_json_lines()).unwrap();
    let out = dmkit(&["check-history", bad_path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("NOT LINEARIZABLE") && text.contains(&format!("#{at} ")), "{text}");
    // Bad input: exit 2, one line.
    std::fs::write(&bad_path, "{\"client\":1}\n").unwrap();
    assert_one_line_error(&["check-history", bad_path.to_str().unwrap()], "line 1");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `dmkit run --check` judges the whole run: the delete mixes on an index with scans (Sherman)
/// and on a hash table (RACE) are clean.
#[test]
fn run_check_judges_mixes_with_deletes() {
    for (index, workload) in [("sherman", "crud"), ("race", "delete-heavy")] {
        let out = dmkit(&[
            "run",
            "--index",
            index,
            "--workload",
            workload,
            "--keys",
            "2000",
            "--clients",
            "16",
            "--duration-us",
            "300",
            "--check",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{index} {workload}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(": linearizable"), "{text}");
        assert!(text.contains(workload), "{text}");
    }
}

/// Sherman runs from the command line in every named configuration: YCSB A on a small tree
/// reports reads and writes, round trips, and cache bytes.
#[test]
fn sherman_runs_in_every_configuration() {
    for config in
        ["sherman-fixed", "sherman-artifact", "sherman-smart", "sherman-chime", "sherman-hstore", "sherman-dolphin"]
    {
        let args = [
            &["run", "--index", "sherman", "--config", config, "--workload", "a", "--keys", "5000", "--clients", "16"]
                [..],
            &["--format", "json"],
            &SHORT,
        ]
        .concat();
        let out = dmkit(&args);
        assert!(out.status.success(), "{config}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["config"], config);
        assert!(v["throughput_mops"].as_f64().unwrap() > 0.0, "{config}");
        assert!(v["bytes_written_per_op"].as_f64().unwrap() > 0.0, "{config}");
        assert!(v["round_trips_per_op"].as_f64().unwrap() >= 1.0, "{config}");
        assert!(v["cache_bytes_per_cn"].as_f64().unwrap() > 0.0, "{config}");
    }
}

/// SMART runs in every step of the factor analysis, and ART as its own index: YCSB A reports
/// writes, cache bytes and (with RDWC) its delegation and combining ratios.
#[test]
fn smart_and_art_run_in_every_configuration() {
    let configs = dmkit_indexes::smart::config::CONFIGS.iter().map(|c| ("smart", *c)).chain([("art", "default")]);
    for (index, config) in configs {
        if index == "smart" && *config == *"art" {
            continue;
        }
        let args = [
            &["run", "--index", index, "--config", config, "--workload", "a", "--keys", "5000", "--clients", "16"][..],
            &["--format", "json"],
            &SHORT,
        ]
        .concat();
        let out = dmkit(&args);
        assert!(out.status.success(), "{config}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["index"], index);
        assert!(v["throughput_mops"].as_f64().unwrap() > 0.0, "{config}");
        assert!(v["bytes_written_per_op"].as_f64().unwrap() > 0.0, "{config}");
        assert!(v["cache_bytes_per_cn"].as_f64().unwrap() > 0.0, "{config}");
        assert!(v["cache_hit_ratio"].as_f64().unwrap() > 0.5, "{config}: {}", v["cache_hit_ratio"]);
        assert!(v["rdwc"]["read_delegation_ratio"].as_f64().is_some(), "{config}");
    }
}

/// `dmkit fill`: RACE's load factor at the first insertion failure rises with the slots per
/// bucket (Fig. 12a), about 90% at the paper's 7; DrTM's chains with overflow ratio 3 too.
#[test]
fn fill_reports_the_load_factor_at_the_first_failure() {
    use dmkit_experiments::fill::{FillRequest, fill};
    let req = |index: &str, slots: u32, size: u64| FillRequest {
        index: index.into(),
        slots: Some(slots),
        size,
        key_bytes: 16,
        value_bytes: 32,
        seed: 1,
    };
    let four = fill(&req("race", 4, 128)).unwrap();
    let seven = fill(&req("race", 7, 128)).unwrap();
    assert_eq!(seven.capacity, 3 * 128 * 7);
    assert!(four.load_factor < seven.load_factor, "{four:?} {seven:?}");
    assert!((0.85..0.97).contains(&seven.load_factor), "{seven:?}");
    let drtm = fill(&req("cluster", 8, 128)).unwrap();
    assert!(drtm.load_factor > 0.8, "{drtm:?}");
    // Linear probing fills every slot before an insert fails.
    let probe = fill(&req("probe", 8, 16)).unwrap();
    assert_eq!((probe.capacity, probe.load_factor), (128, 1.0), "{probe:?}");
    let e = fill(&req("sherman", 8, 128)).unwrap_err();
    assert!(e.contains("fixed-size hash tables (race, cluster, ") && e.ends_with("), not sherman"), "{e}");
}

#[test]
fn shards_of_a_sweep_merge_into_the_whole_sweep() {
    let dir = std::env::temp_dir().join(format!("dmkit-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sweep.toml");
    std::fs::write(
        &file,
        "index = \"example\"\nkeys = 2000\ncompute_nodes = 1\nduration_us = 200\n[sweep]\nthreads_per_cn = [1, 2, 3]\nworkload = [\"a\", \"c\"]\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let whole = dir.join("whole");
    assert!(dmkit(&["run", f, "--out", whole.to_str().unwrap()]).status.success());
    let mut parts = Vec::new();
    for k in 1..=4 {
        let out = dir.join(format!("shard{k}"));
        let o = dmkit(&["run", f, "--shard", &format!("{k}/4"), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        parts.push(out.join("result.jsonl"));
    }
    let merged = dir.join("merged");
    let mut args: Vec<String> = vec!["merge".into(), "--out".into(), merged.to_str().unwrap().into()];
    // Shards in any order.
    args.extend(parts.iter().rev().map(|p| p.to_str().unwrap().to_string()));
    let o = dmkit(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&merged.join("result.jsonl")), read(&whole.join("result.jsonl")), "the merged sweep is the sweep");
    assert_eq!(read(&merged.join("result.csv")), read(&whole.join("result.csv")));
    // A missing shard, a shard twice, and a shard of another sweep are refused.
    let m = merged.to_str().unwrap();
    let p: Vec<&str> = parts.iter().map(|p| p.to_str().unwrap()).collect();
    assert_one_line_error(&["merge", "--out", m, p[0], p[1], p[2]], "missing");
    assert_one_line_error(&["merge", "--out", m, p[0], p[0], p[1], p[2], p[3]], "twice");
    let other = dir.join("other.toml");
    std::fs::write(&other, read(&file).replace("keys = 2000", "keys = 3000")).unwrap();
    let o = dir.join("other");
    assert!(dmkit(&["run", other.to_str().unwrap(), "--shard", "1/4", "--out", o.to_str().unwrap()]).status.success());
    let other_part = o.join("result.jsonl");
    assert_one_line_error(&["merge", "--out", m, other_part.to_str().unwrap(), p[1], p[2], p[3]], "another sweep");
    for bad in ["0/4", "5/4", "2", "a/b"] {
        assert_one_line_error(&["run", f, "--shard", bad], "--shard");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_measurement_settings_are_one_line() {
    let base = ["run", "--index", "example", "--keys", "1000"];
    for (extra, needle) in [
        (&["--precision", "0"][..], "--precision"),
        (&["--precision", "1.5"][..], "--precision"),
        (&["--max-duration-us", "5000", "--warmup-us", "8000"][..], "warm-up"),
        (&["--max-duration-us", "100"][..], "first convergence check"),
        (&["--duration-us", "0"][..], "--duration-us"),
        (&["--tick-us", "0"][..], "--tick-us"),
        (&["--precision", "0.05", "--duration-us", "100"][..], "--duration-us"),
    ] {
        assert_one_line_error(&[&base[..], extra].concat(), needle);
    }
}

#[test]
fn the_table_says_how_each_run_was_measured() {
    let out = dmkit(&["run", "--index", "example", "--keys", "2000", "--compute-nodes", "1", "--threads-per-cn", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(" ± "), "throughput as mean ± half-width:\n{text}");
    assert!(text.contains("steady state:"), "{text}");
    let capped = dmkit(&[
        "run",
        "--index",
        "example",
        "--keys",
        "2000",
        "--compute-nodes",
        "1",
        "--threads-per-cn",
        "1",
        "--precision",
        "0.0001",
        "--max-duration-us",
        "10000",
    ]);
    let text = String::from_utf8(capped.stdout).unwrap();
    assert!(capped.status.success(), "a run that did not converge is not an error");
    assert!(text.contains("NOT STEADY at the cap of 10 ms"), "{text}");
}

/// The four kinds of conflict a step-count clock hid (verify/tests/histories, cut from
/// planted-bug runs that were judged clean): `check-history` rejects each, exit 1.
#[test]
fn check_history_rejects_the_program_order_cores() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../verify/tests/histories");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let out = dmkit(&["check-history", path.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{}: {text}", path.display());
        assert!(text.contains("NOT LINEARIZABLE"), "{text}");
        seen += 1;
    }
    assert_eq!(seen, 4);
}

/// `--check` on hardware with several compute processes would judge a part of the history:
/// refused, pointing at the per-process export and `check-history`.
#[test]
fn run_check_on_several_hardware_processes_is_refused() {
    assert_one_line_error(
        &["run", "--index", "example", "--backend", "rdma", "--compute-nodes", "2", "--check"],
        "check-history",
    );
    assert_one_line_error(&["check-history"], "required");
    assert_one_line_error(&["check-history", "/nonexistent/h.jsonl"], "cannot read");
}

/// A result names everything that determined its operations: `--theta` and `--zipf-items`
/// change them without changing the workload's name, so the result carries the workload's spec.
#[test]
fn a_result_records_its_workloads_theta_and_zipf_items() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let args = [
            &["run", "--index", "example", "--workload", "dense-a", "--keys", "2000", "--format", "json"][..],
            &SHORT,
            extra,
        ]
        .concat();
        let out = dmkit(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    };
    let plain = run(&[]);
    let skewed = run(&["--theta", "0.5", "--zipf-items", "1000000"]);
    assert_eq!(plain["workload"], skewed["workload"], "the name does not say");
    let spec = |v: &serde_json::Value| v["workload_spec"].clone();
    assert_eq!(spec(&plain)["distribution"]["theta"], 0.99, "{plain}");
    assert!(spec(&plain).get("zipfian_items").is_none(), "{plain}");
    assert_eq!(spec(&skewed)["distribution"]["theta"], 0.5, "{skewed}");
    assert_eq!(spec(&skewed)["zipfian_items"], 1000000, "{skewed}");
    assert_eq!(spec(&skewed)["record_count"], 2000, "{skewed}");
}

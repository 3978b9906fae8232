//! The runner's measurement and its load-once: steady state by default, a fixed window on
//! request, and a point forked from a shared image is the point loaded for it alone.

use dmkit_experiments::run::{RunContext, RunFile, RunRequest, RunResult, run_request, run_request_with};
use dmkit_experiments::runner::{ImageSlot, Quiet};
use std::sync::{Arc, OnceLock};

fn requests(toml: &str) -> Vec<RunRequest> {
    RunFile::parse(toml).unwrap().requests().unwrap()
}

fn json(r: &RunResult) -> serde_json::Value {
    serde_json::to_value(r).unwrap()
}

#[test]
fn a_forked_point_is_the_freshly_loaded_point() {
    // Two points of one sweep share a load; the second, run from the image the first used
    // (and ran on), equals the second run alone with a load of its own, bit for bit.
    for index in ["example", "sherman", "hstore", "clover"] {
        let points = requests(&format!(
            "index = \"{index}\"\nworkload = \"a\"\nkeys = 3000\ncompute_nodes = 2\nthreads_per_cn = 2\n\
             duration_us = 300\nwarmup_us = 50\n[sweep]\nthreads_per_cn = [1, 2]\n"
        ));
        let (a, b) = (&points[0], &points[1]);
        assert_eq!(dmkit_experiments::run::image_key(a), dmkit_experiments::run::image_key(b));
        let slot: ImageSlot = Arc::new(OnceLock::new());
        let ctx = RunContext { image: Some(&slot), progress: &Quiet };
        let first = run_request_with(a, &ctx).unwrap();
        let forked = run_request_with(b, &ctx).unwrap();
        let alone = run_request(b).unwrap();
        assert_eq!(json(&forked), json(&alone), "{index}: the forked point differs from the fresh one");
        assert_ne!(first.trace_hash, forked.trace_hash, "{index}: two different points");
        assert!(forked.operations > 0);
    }
}

#[test]
fn points_that_load_differently_have_different_images() {
    let points = requests(
        "index = \"example\"\nkeys = 1000\ncompute_nodes = 1\nthreads_per_cn = 1\n\
         [sweep]\nseed = [1, 2]\nkeys = [1000, 2000]\n",
    );
    let keys: Vec<_> = points.iter().map(dmkit_experiments::run::image_key).collect();
    for i in 0..keys.len() {
        for j in 0..i {
            assert_ne!(keys[i], keys[j], "points {j} and {i}");
        }
    }
}

#[test]
fn a_run_is_steady_by_default_and_says_so() {
    let r =
        run_request(&requests("index = \"example\"\nkeys = 5000\ncompute_nodes = 2\nthreads_per_cn = 4\n")[0]).unwrap();
    assert!(r.steady, "{:?}", r.unsteady_reasons);
    assert!(r.throughput_mops_ci95 > 0.0 && r.throughput_mops_ci95 <= 0.02 * r.throughput_mops);
    assert_eq!(r.batch_mops.len(), r.batches);
    assert!(r.batches >= 10);
    assert_eq!(r.measured_ns, r.batches as u64 * r.batch_ns);
    assert!(r.warmup_ns + r.measured_ns >= 10_000_000, "no run stops before its first check at 10 ms");
    let mean = r.batch_mops.iter().sum::<f64>() / r.batches as f64;
    assert!((mean - r.throughput_mops).abs() <= 0.002 * r.throughput_mops + 0.001, "{mean} vs {}", r.throughput_mops);
    // The operations counted are those of the measured phase.
    let expected = r.throughput_mops * r.measured_ns as f64 / 1e3;
    assert!((r.operations as f64 - expected).abs() <= 0.01 * expected, "{} vs {expected}", r.operations);
}

#[test]
fn a_fixed_window_measures_exactly_it() {
    let r = run_request(
        &requests("index = \"example\"\nkeys = 5000\ncompute_nodes = 2\nthreads_per_cn = 4\nwarmup_us = 100\nduration_us = 400\n")[0],
    )
    .unwrap();
    assert_eq!((r.warmup_ns, r.measured_ns), (100_000, 400_000));
    assert!(r.throughput_mops_ci95 > 0.0, "a fixed window still has its interval");
}

#[test]
fn a_run_that_cannot_converge_says_why() {
    // 1 client and a 20 ms cap: too few operations for ±0.1%.
    let r = run_request(
        &requests(
            "index = \"example\"\nkeys = 1000\ncompute_nodes = 1\nthreads_per_cn = 1\nprecision = 0.0001\nmax_duration_us = 20000\n",
        )[0],
    )
    .unwrap();
    assert!(!r.steady);
    assert!(!r.unsteady_reasons.is_empty());
    assert!(r.warmup_ns + r.measured_ns <= 20_000_000);
    let line = dmkit_experiments::run::verdict(&r);
    assert!(line.starts_with("NOT STEADY at the cap of 20 ms"), "{line}");
}

#[test]
fn a_run_capped_before_its_second_look_is_not_steady() {
    // Steady by every test at its first check (10 ms), but a stop before 40 ms needs a second
    // look at twice the run; a 15 ms cap ends it first, and the result says so. With room for
    // the look it is steady.
    let run = |cap_us: u64| {
        let toml = format!(
            "index = \"example\"\nkeys = 5000\ncompute_nodes = 2\nthreads_per_cn = 4\nmax_duration_us = {cap_us}\n"
        );
        run_request(&requests(&toml)[0]).unwrap()
    };
    let capped = run(15_000);
    assert!(!capped.steady);
    assert_eq!(json(&capped)["unsteady_reasons"], serde_json::json!(["unconfirmed"]));
    let line = dmkit_experiments::run::verdict(&capped);
    assert!(line.contains("ended before a second look confirmed its steady verdict"), "{line}");
    let room = run(40_000);
    assert!(room.steady, "{:?}", room.unsteady_reasons);
}

#[test]
fn runs_whose_last_ticks_complete_nothing_are_measured() {
    // One client whose operations take longer than a 1 us tick: many ticks, the last ones of
    // some windows among them, see no completion (HStore's scans did this, and the series was
    // cut at the last completion).
    for duration in 100..108 {
        let r = run_request(
            &requests(&format!(
                "index = \"example\"\nkeys = 1000\ncompute_nodes = 1\nthreads_per_cn = 1\ntick_us = 1\n\
                 warmup_us = 10\nduration_us = {duration}\n"
            ))[0],
        )
        .unwrap();
        assert_eq!(r.measured_ns, duration * 1000);
        assert_eq!(r.series_mops.len(), (duration as usize + 10).div_ceil((duration as usize + 10).div_ceil(100)));
    }
}

#[test]
fn an_insert_budget_sizes_the_table_and_ends_the_load() {
    // The paper's insert phase: a fixed number of fresh keys into a table sized for them.
    let sweep = requests(
        "index = \"cluster\"\nworkload = \"load\"\nkeys = 2000\ninserts = 1000\ncompute_nodes = 2\n\
         threads_per_cn = 3\n[sweep]\nworkload = [\"load\", \"c\"]\n",
    );
    let (load, search) = (&sweep[0], &sweep[1]);
    // 1000 over 6 clients: 167 each (rounded up), the warm-up's included; searches are not
    // budgeted, and run to steady state on the same table.
    assert_eq!((load.ops_per_client, search.ops_per_client), (Some(167), None));
    assert_eq!(load.items(), 3000);
    assert_eq!(dmkit_experiments::run::image_key(load), dmkit_experiments::run::image_key(search));
    let r = run_request(load).unwrap();
    assert!(r.errors.is_empty(), "a table sized for the inserts takes them all: {:?}", r.errors);
    // Measured while every client runs: the first client to finish ends the window, so fewer
    // than the budget are measured, and no ramp-down.
    assert!(r.operations > 0 && r.operations < 6 * 167, "{}", r.operations);
    let ran_ns = r.series_mops.len() as u64 * r.series_bin_ns;
    assert!(ran_ns > r.warmup_ns + r.measured_ns, "the last clients ran on after the window: {ran_ns} ns");
    let loaded_only =
        requests("index = \"cluster\"\nworkload = \"load\"\nkeys = 2000\ncompute_nodes = 2\nthreads_per_cn = 3\n");
    assert_ne!(dmkit_experiments::run::image_key(&loaded_only[0]), dmkit_experiments::run::image_key(load));
    for bad in ["inserts = 0", "inserts = 10\nduration_us = 100", "inserts = 10\nops_per_client = 5"] {
        let file = RunFile::parse(&format!("index = \"cluster\"\nworkload = \"load\"\n{bad}\n")).unwrap();
        let e = file.requests().unwrap_err();
        assert!(e.contains("--inserts"), "{bad}: {e}");
    }
}

#[test]
fn failed_operations_are_errors_not_throughput() {
    // DrTM cluster hashing does not grow: LOAD fills its table within the window, and every
    // insert after that fails fast. Those are errors, not operations.
    let r = run_request(
        &requests(
            "index = \"cluster\"\nworkload = \"load\"\nkeys = 100\ncompute_nodes = 1\nthreads_per_cn = 4\n\
             warmup_us = 0\nduration_us = 2000\n",
        )[0],
    )
    .unwrap();
    let failed: u64 = r.errors.values().sum();
    assert!(failed > 100, "{:?}", r.errors);
    // Counted with the failures, the operations could never be fewer than them.
    assert!(r.operations < failed, "{} operations beside {failed} failures", r.operations);
}

#[test]
fn caches_warm_from_the_image_before_the_run_starts() {
    // Clover warms every key's shortcut from its metadata server's state: in a run started
    // from an image that state is the image's, before any service runs. A cold cache would
    // ask the metadata server for every key on its first GET.
    let r = run_request(
        &requests(
            "index = \"clover\"\nworkload = \"c\"\nkeys = 2000\nkey_bytes = 16\nvalue_bytes = 32\n\
             compute_nodes = 1\nthreads_per_cn = 4\nduration_us = 500\n",
        )[0],
    )
    .unwrap();
    assert!(r.operations > 100);
    assert_eq!(r.index_counters.get("ms_lookup"), None, "{:?}", r.index_counters);
}

#[test]
fn a_run_too_large_for_the_machine_is_refused_with_its_estimate() {
    use dmkit_experiments::run::{check_memory_on, memory_estimate};
    const GB: u64 = 1_000_000_000;
    let sweep = requests(
        "index = \"smart\"\nworkload = \"c\"\nkeys = 60000000\ncompute_nodes = 16\nmemory_nodes = 2\n\
         [sweep]\nindex = [\"smart\", \"sherman:sherman-smart\"]\nthreads_per_cn = [8, 16]\n",
    );
    let smart = memory_estimate(&sweep[0]).unwrap();
    // 240 B an item loaded; the default 600 MB cache shared by 16 compute nodes.
    assert_eq!(smart.image, 60_000_000 * 240 + (64 << 20));
    assert!(smart.caches > 5 * GB && smart.caches < 6 * GB, "{smart:?}");
    // Points at once hold the largest distinct images and a set of caches each: on 24 GB one
    // point at a time; on 30 GB two of one image, not one of each of two; on 36 GB both; and a
    // machine that holds neither refuses.
    assert_eq!(check_memory_on(&sweep[..2], 2, 24 * GB), Ok(1));
    assert_eq!(check_memory_on(&sweep[..2], 2, 30 * GB), Ok(2));
    assert_eq!(check_memory_on(&sweep, 2, 30 * GB), Ok(1));
    assert_eq!(check_memory_on(&sweep, 2, 36 * GB), Ok(2));
    let err = check_memory_on(&sweep, 2, 12 * GB).unwrap_err();
    assert!(err.contains("GB of host memory") && err.contains("--force"), "{err}");
    // Larger items cost more; a bad request is left to its run's error.
    let big = requests("index = \"example\"\nworkload = \"c\"\nkeys = 1000000\nvalue_bytes = 1024\n");
    let small = requests("index = \"example\"\nworkload = \"c\"\nkeys = 1000000\n");
    assert!(memory_estimate(&big[0]).unwrap().image > memory_estimate(&small[0]).unwrap().image + 1_000_000_000);
    // Clover's compute nodes each warm a cache entry for every key: its estimate counts them
    // (a run of 10 M keys on 8 compute nodes peaked at 8.2 GB when an entry was 68 bytes, the
    // estimate having said 4.3 GB; an entry is 83 now, measured on 2 compute nodes), and
    // nothing with the cache off.
    let clover = requests("index = \"clover\"\nworkload = \"c\"\nkeys = 10000000\ncompute_nodes = 8\n");
    let e = memory_estimate(&clover[0]).unwrap();
    assert_eq!(e.caches, 8 * 10_000_000 * 83);
    assert!((8 * GB..11 * GB).contains(&(e.image + e.caches)), "{e:?}");
    let cold =
        requests("index = \"clover\"\nconfig = \"nocache\"\nworkload = \"c\"\nkeys = 10000000\ncompute_nodes = 8\n");
    assert_eq!(memory_estimate(&cold[0]).unwrap().caches, 0);
    let bad = requests("index = \"sherman\"\nworkload = \"c\"\nkeys = 1000000\nconfig = \"no-such\"\n");
    assert!(memory_estimate(&bad[0]).is_err() && check_memory_on(&bad, 1, GB) == Ok(1));
}

#[test]
fn a_load_share_warms_each_compute_node_with_the_paths_of_its_own_keys() {
    // SMART at 20 k keys over 10 compute nodes: each node's share (2 k keys) misses some of
    // the radix tree's lower nodes, so the mean cache is smaller than the whole tree's.
    let run = |index: &str, warm: &str| {
        run_request(
            &requests(&format!(
                "index = \"{index}\"\nworkload = \"c\"\nkeys = 20000\ncompute_nodes = 10\nthreads_per_cn = 1\n\
                 warmup_us = 10\nduration_us = 20\nwarm = \"{warm}\"\n"
            ))[0],
        )
        .unwrap()
    };
    use dmkit_experiments::run::Warm;
    let (whole, share) = (run("smart", "whole"), run("smart", "load-share"));
    assert_eq!((whole.warmed, share.warmed), (Warm::Whole, Warm::LoadShare));
    assert!(
        share.cache_bytes_per_cn < 0.95 * whole.cache_bytes_per_cn && share.cache_bytes_per_cn > 0.0,
        "{} against {}",
        share.cache_bytes_per_cn,
        whole.cache_bytes_per_cn
    );
    assert_eq!(json(&share)["warmed"], "load-share");
    // Clover's query cache holds an entry per key: a node's share is a tenth of them.
    let (whole, share) = (run("clover", "whole"), run("clover", "load-share"));
    assert_eq!(share.warmed, Warm::LoadShare);
    let tenth = share.cache_bytes_per_cn / whole.cache_bytes_per_cn;
    assert!((0.05..0.2).contains(&tenth), "{tenth}");
    // RACE has no compute-node cache to warm by keys: warmed whole, and said so.
    assert_eq!(run("race", "load-share").warmed, Warm::Whole);
    // Replayed, SMART's caches hold what their shares' searches read: with a budget that holds
    // the tree, each node's share of it, as warmed by its keys.
    let replayed = run("smart", "load-replay");
    assert_eq!((replayed.warmed, run("race", "load-replay").warmed), (Warm::LoadReplay, Warm::Whole));
    assert_eq!(replayed.cache_bytes_per_cn, run("smart", "load-share").cache_bytes_per_cn);
    let err = RunFile::parse("index = \"smart\"\nwarm = \"half\"\n").unwrap().requests().unwrap_err();
    assert_eq!(err, "warm must be whole, load-share or load-replay, not \"half\"");
}

#[test]
fn smarts_artifact_cache_charge_keeps_slots_until_it_rebuilds() {
    // A cache of about three second-level nodes (2 KiB each) over 20 k keys: reads churn
    // through the 256 of them. Charged as dmkit charges, eviction frees a node's whole charge
    // and the cache never empties; charged as the artifact does (`keep_slots=1`), each new
    // prefix's slot stays charged until the budget holds nothing else and the cache is
    // rebuilt, and the end-of-run node counters say so.
    let run = |config: &str| {
        run_request(
            &requests(&format!(
                "index = \"smart\"\nconfig = \"{config}\"\nworkload = \"c\"\nkeys = 20000\ncache_bytes = 7000\n\
                 compute_nodes = 1\nthreads_per_cn = 8\nwarmup_us = 0\nduration_us = 2000\n"
            ))[0],
        )
        .unwrap()
    };
    let counter = |r: &RunResult, name: &str| r.index_counters.get(name).copied().unwrap_or(0);
    let (freed, kept) = (run("smart"), run("smart,keep_slots=1"));
    assert!(counter(&freed, "cache_evictions") > 100, "{:?}", freed.index_counters);
    assert_eq!(counter(&freed, "cache_rebuilds"), 0);
    assert!(counter(&kept, "cache_rebuilds") > 0, "{:?}", kept.index_counters);
    assert!(kept.cache_hit_ratio < freed.cache_hit_ratio, "{:?} {:?}", kept.cache_hit_ratio, freed.cache_hit_ratio);
}

#[test]
fn every_shipped_run_file_parses_into_its_points() {
    // The run files under experiments/configs (not the figures, which reproduce reads).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "toml") && !name.starts_with("cluster") {
            let text = std::fs::read_to_string(&path).unwrap();
            let points = RunFile::parse(&text).and_then(|f| f.requests()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!points.is_empty(), "{name}");
            seen += 1;
        }
    }
    assert!(seen >= 5, "{seen} run files");
}

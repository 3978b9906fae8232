//! Every registered index runs through the one dispatcher `dmkit run`, `reproduce` and
//! `bench-load` use (`dmkit_indexes::registry`), with its options sized in its own folder, and
//! a request the index cannot serve is one line naming the problem.

use dmkit_experiments::run::{RunFile, RunRequest, run_request};

fn request(toml: &str) -> RunRequest {
    RunFile::parse(toml).unwrap().requests().unwrap().remove(0)
}

fn small(index: &str, extra: &str) -> RunRequest {
    request(&format!(
        "index = \"{index}\"\nkeys = 2000\ncompute_nodes = 1\nthreads_per_cn = 2\nduration_us = 100\nwarmup_us = 20\n{extra}"
    ))
}

#[test]
fn every_registered_index_runs_through_the_dispatcher() {
    let names = dmkit_indexes::registry::index_names();
    assert_eq!(names, dmkit_experiments::run::index_names());
    assert_eq!(names, dmkit_verify::registry::index_names(), "dmkit run and dmkit check know the same indexes");
    for index in names {
        let r = run_request(&small(index, "workload = \"a\"\n")).unwrap_or_else(|e| panic!("{index}: {e}"));
        assert_eq!(r.index, index);
        assert!(r.operations > 0, "{index} ran no operation");
    }
}

#[test]
fn a_configuration_run_by_another_type_goes_through_its_entry() {
    // `sherman-hstore-ool` is the registry's `Indirect<Sherman>` over `sherman-hstore`: the
    // 64-byte values in blocks, the tree holding 8-byte block words.
    let inline = run_request(&small("sherman", "workload = \"c\"\nconfig = \"sherman-hstore\"\nvalue_bytes = 64\n"));
    let out_of_line =
        run_request(&small("sherman", "workload = \"c\"\nconfig = \"sherman-hstore-ool\"\nvalue_bytes = 64\n"));
    let (inline, out_of_line) = (inline.unwrap(), out_of_line.unwrap());
    assert_eq!(out_of_line.config, "sherman-hstore-ool");
    assert_eq!(inline.config, "sherman-hstore");
    // A GET out of line is the tree's READs and one more for the block.
    let (out_of_line, inline) = (out_of_line.round_trips_per_op.unwrap(), inline.round_trips_per_op.unwrap());
    assert!(out_of_line > inline + 0.5, "out of line {out_of_line} round trips per GET, inline {inline}");
}

#[test]
fn requests_an_index_cannot_serve_are_refused_by_name() {
    let refused = |index: &str, extra: &str| run_request(&small(index, extra)).unwrap_err();
    let e = refused("btree", "workload = \"a\"\n");
    assert!(e.contains("unknown index 'btree'") && e.contains("smart"), "{e}");
    let e = refused("race", "workload = \"e\"\n");
    assert!(e.contains("index race has no scans"), "{e}");
    let e = refused("race", "workload = \"a\"\ncache_bytes = 1000000\n");
    assert!(e.contains("--cache-bytes does not apply"), "{e}");
    let e = refused("example", "workload = \"a\"\nconfig = \"fast\"\n");
    assert!(e.contains("index example has no configuration 'fast'"), "{e}");
    let e = refused("dolphin", "workload = \"a\"\nvalue_bytes = 16\n");
    assert!(e.contains("8-byte keys and values"), "{e}");
    let e = refused("art", "workload = \"a\"\nconfig = \"smart\"\n");
    assert!(e.contains("try --index smart"), "{e}");
}

#[test]
fn a_metric_the_backend_did_not_measure_reads_as_none_not_zero() {
    use dmkit_experiments::run::report;
    let mut r = run_request(&small("sherman", "workload = \"c\"\n")).unwrap();
    assert!(r.round_trips_per_op.unwrap() >= 1.0, "the simulator measures its round trips");
    // What `--backend rdma` leaves: the simulator's verb accounting unmeasured.
    r.round_trips_per_op = None;
    r.bytes_read_per_op = None;
    r.bytes_written_per_op = None;
    r.read_amplification = None;
    r.mn_iops_utilisation = None;
    r.mn_bandwidth_utilisation = None;
    let json = serde_json::to_value(&r).unwrap();
    for f in ["round_trips_per_op", "bytes_read_per_op", "mn_iops_utilisation", "mn_bandwidth_utilisation"] {
        assert!(json[f].is_null(), "{f}: {}", json[f]);
    }
    let table = report::table(std::slice::from_ref(&r));
    let row = table.lines().nth(1).unwrap();
    assert!(row.trim_end().ends_with("—         —         —"), "{row}");
    let csv = report::csv(std::slice::from_ref(&r));
    let (header, line) = (csv.lines().next().unwrap(), csv.lines().nth(1).unwrap());
    let at = header.split(',').position(|h| h == "round_trips_per_op").unwrap();
    let cells: Vec<&str> = line.split(',').collect();
    assert_eq!(&cells[at..at + 6], &["", "", "", "", "", ""], "{line}");
    // And a result with them absent reads back as absent.
    let back: dmkit_experiments::run::schema::RunResult = serde_json::from_value(json).unwrap();
    assert_eq!(back.round_trips_per_op, None);
}

#[test]
fn an_index_built_for_dense_keys_is_noted_when_given_hashed_ones() {
    use dmkit_experiments::run::key_space_notes;
    let notes = key_space_notes(&[
        small("dolphin", "workload = \"c\"\n"),
        small("dolphin", "workload = \"a\"\n"),
        small("dolphin", "workload = \"dense-c\"\n"),
        small("sherman", "workload = \"c\"\n"),
    ]);
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("dolphin is built for dense keys and workload ycsb-c"), "{}", notes[0]);
    assert!(notes.iter().all(|n| n.contains("dolphin")), "Sherman's B+tree is not noted: {notes:?}");
}

#[test]
fn smarts_artifact_alignment_changes_its_footprint_and_nothing_it_reads() {
    // SMART's artifact allocates every leaf and node at 256 bytes (`alloc_align=256`), dmkit at
    // 64: the same tree, its leaves at 256 bytes instead of 64 and its nodes at a 2,304-byte
    // stride instead of 2,112 (the walk after the run also checks every address's alignment).
    let run = |config: &str| {
        run_request(&small("smart", &format!("workload = \"c\"\nconfig = \"{config}\"\nseed = 3\n")))
            .unwrap_or_else(|e| panic!("{config}: {e}"))
    };
    let (ours, artifact) = (run("smart"), run("smart,alloc_align=256"));
    assert_eq!(artifact.config, "smart,alloc_align=256");
    let leaves = 2000;
    let nodes = (ours.remote_bytes_used - 64 * leaves) / 2112;
    assert!(nodes > 0 && ours.remote_bytes_used == 64 * leaves + 2112 * nodes, "{}", ours.remote_bytes_used);
    assert_eq!(artifact.remote_bytes_used, 256 * leaves + 2304 * nodes);
    assert_eq!(artifact.round_trips_per_op, ours.round_trips_per_op);
    assert_eq!(artifact.bytes_read_per_op, ours.bytes_read_per_op);
    let e = run_request(&small("smart", "workload = \"c\"\nconfig = \"smart,alloc_align=100\"\n")).unwrap_err();
    assert!(e.contains("alloc_align 100 is not a power of two"), "{e}");
}

#[test]
fn a_shuffled_load_fills_sherman_leaves_as_a_random_order_does() {
    // Sherman's even splits leave an ascending load's leaves half full; the same keys in a
    // random order fill them further, so the tree is smaller (Dolphin's Table II, table2-ms).
    let run = |extra: &str| {
        let r = request(&format!(
            "index = \"sherman\"\nconfig = \"sherman-dolphin\"\nworkload = \"dense-c\"\nkeys = 20000\n\
             compute_nodes = 1\nthreads_per_cn = 2\nduration_us = 50\nwarmup_us = 20\n{extra}"
        ));
        run_request(&r).unwrap()
    };
    let (ordered, shuffled) = (run(""), run("shuffle_load = true\n"));
    assert_eq!(shuffled.workload_spec.as_ref().map(|s| s.shuffled_load), Some(true));
    assert_eq!(ordered.workload_spec.as_ref().map(|s| s.shuffled_load), Some(false));
    let (o, s) = (ordered.remote_bytes_used as f64, shuffled.remote_bytes_used as f64);
    assert!(s < 0.85 * o, "shuffled {s} bytes against {o} in order");
}

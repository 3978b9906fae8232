//! The linearizability checker on hand-written histories (each verdict asserted, and for each
//! rejection the key and the exact minimal set of conflicting operations), and two property
//! tests: histories of a sequential run, widened to overlap, are accepted and a corrupted search
//! is not; on small concurrent histories the verdict agrees with a brute-force checker and the
//! reported core is itself not linearizable.

use dmkit_indexes::IndexError;
use dmkit_indexes::spec::{Op, Outcome, SpecMap};
use dmkit_verify::history::{History, Record};
use dmkit_verify::linearizability::{CheckOptions, Violation, ViolationKind, check, check_with};
use proptest::prelude::*;
use std::ops::Bound;

fn key(n: u8) -> Vec<u8> {
    vec![0x6b, n]
}

fn val(n: u8) -> Vec<u8> {
    vec![0xff, n]
}

fn rec(client: u32, invoke: u64, respond: impl Into<Option<u64>>, op: Op, outcome: Outcome) -> Record {
    Record { client, op, outcome, invoke, respond: respond.into() }
}

fn search(client: u32, at: (u64, u64), k: u8, found: Option<u8>) -> Record {
    rec(client, at.0, at.1, Op::Search { key: key(k) }, Outcome::Found(found.map(val)))
}

fn insert(client: u32, at: (u64, u64), k: u8, v: u8, existed: bool) -> Record {
    rec(client, at.0, at.1, Op::Insert { key: key(k), value: val(v) }, Outcome::Existed(existed))
}

fn update(client: u32, at: (u64, u64), k: u8, v: u8, existed: bool) -> Record {
    rec(client, at.0, at.1, Op::Update { key: key(k), value: val(v) }, Outcome::Existed(existed))
}

fn delete(client: u32, at: (u64, u64), k: u8, existed: bool) -> Record {
    rec(client, at.0, at.1, Op::Delete { key: key(k) }, Outcome::Existed(existed))
}

/// A scan of `[key(from), key(to))` with `limit` that returned `pairs` (key, value) numbers.
fn scan(client: u32, at: (u64, u64), from: u8, to: u8, limit: usize, pairs: &[(u8, u8)]) -> Record {
    rec(
        client,
        at.0,
        at.1,
        Op::Scan { start: Bound::Included(key(from)), end: Bound::Excluded(key(to)), limit },
        Outcome::Scanned(pairs.iter().map(|&(k, v)| (key(k), val(v))).collect()),
    )
}

/// An indeterminate record: the same operation, failed with an error whose effect is unknown.
fn unknown(mut r: Record) -> Record {
    r.outcome = Outcome::Failed(IndexError::RetriesExhausted { op: "write", retries: 8 });
    r
}

/// An indeterminate record: the same operation, never returned.
fn pending(mut r: Record) -> Record {
    r.respond = None;
    r
}

fn history(records: Vec<Record>) -> History {
    History { records }
}

#[track_caller]
fn accepts(records: Vec<Record>) {
    let h = history(records);
    if let Err(v) = check(&h, true) {
        panic!("a linearizable history was rejected:\n{v}");
    }
}

#[track_caller]
fn rejects(records: Vec<Record>, scans_supported: bool) -> Violation {
    let h = history(records);
    let v = check(&h, scans_supported).expect_err("a non-linearizable history was accepted");
    assert!(v.is_violation(), "{v}");
    assert_eq!(v.operations.len(), v.details.len());
    v
}

/// Rejected as not linearizable, at `k`, with exactly `core` as the minimal conflict.
#[track_caller]
fn rejects_at(records: Vec<Record>, k: u8, core: &[usize]) -> Violation {
    let v = rejects(records, true);
    assert_eq!(v.kind, ViolationKind::NotLinearizable, "{v}");
    assert_eq!(v.key, Some(key(k)), "{v}");
    assert_eq!(v.operations, core, "{v}");
    v
}

// ---------------------------------------------------------------- accepted

#[test]
fn accepts_sequential_history() {
    accepts(vec![
        search(1, (0, 1), 1, None),
        update(1, (2, 3), 1, 1, false),
        delete(1, (4, 5), 1, false),
        insert(1, (6, 7), 1, 1, false),
        search(2, (8, 9), 1, Some(1)),
        insert(2, (10, 11), 1, 2, true),
        update(1, (12, 13), 1, 3, true),
        search(1, (14, 15), 1, Some(3)),
        scan(3, (16, 17), 0, 9, 10, &[(1, 3)]),
        delete(2, (18, 19), 1, true),
        search(2, (20, 21), 1, None),
        scan(3, (22, 23), 0, 9, 10, &[]),
        insert(1, (24, 25), 2, 7, false),
        search(1, (26, 27), 2, Some(7)),
    ]);
}

#[test]
fn accepts_search_overlapping_insert_seeing_old_or_new() {
    for seen in [1, 2] {
        accepts(vec![
            insert(1, (0, 1), 1, 1, false),
            insert(1, (10, 20), 1, 2, true),
            search(2, (12, 15), 1, Some(seen)),
            search(2, (21, 22), 1, Some(2)),
        ]);
    }
    // Absent before, present after: an overlapping search may see either.
    for seen in [None, Some(1)] {
        accepts(vec![insert(1, (10, 20), 1, 1, false), search(2, (5, 15), 1, seen)]);
    }
}

#[test]
fn accepts_concurrent_upserts_seen_in_either_order() {
    for last in [1, 2] {
        accepts(vec![
            insert(3, (0, 1), 1, 0, false),
            insert(1, (2, 10), 1, 1, true),
            insert(2, (3, 11), 1, 2, true),
            search(3, (12, 13), 1, Some(last)),
            search(4, (14, 15), 1, Some(last)),
        ]);
    }
    // From an absent key, `existed` tells which came first; either is fine.
    for (first, second) in [(1, 2), (2, 1)] {
        accepts(vec![
            insert(1, (2, 10), 1, 1, first == 2),
            insert(2, (3, 11), 1, 2, first == 1),
            search(3, (12, 13), 1, Some(second)),
        ]);
    }
}

#[test]
fn accepts_indeterminate_writes_that_did_or_did_not_happen() {
    for (seen, make) in [(1, unknown as fn(Record) -> Record), (2, unknown), (1, pending), (2, pending)] {
        accepts(vec![
            insert(1, (0, 1), 1, 1, false),
            make(insert(2, (2, 3), 1, 2, true)),
            search(3, (4, 5), 1, Some(seen)),
            search(3, (6, 7), 1, Some(seen)),
        ]);
    }
    // An indeterminate write may take effect after its failure was reported (a write still in
    // flight): its response is at infinity.
    accepts(vec![
        insert(1, (0, 1), 1, 1, false),
        unknown(delete(2, (2, 3), 1, true)),
        search(3, (4, 5), 1, Some(1)),
        search(3, (6, 7), 1, None),
    ]);
    // Certainly-no-effect failures constrain nothing.
    accepts(vec![
        rec(1, 0, 1, Op::Insert { key: key(1), value: val(1) }, Outcome::Failed(IndexError::Full)),
        search(2, (2, 3), 1, None),
    ]);
}

#[test]
fn rejects_an_indeterminate_write_that_happened_and_then_unhappened() {
    rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            pending(insert(2, (2, 3), 1, 2, true)),
            search(3, (4, 5), 1, Some(2)),
            search(3, (6, 7), 1, Some(1)),
        ],
        1,
        &[0, 1, 2, 3],
    );
}

#[test]
fn accepts_delete_races() {
    for (a, b) in [(true, false), (false, true)] {
        accepts(vec![
            insert(1, (0, 1), 1, 1, false),
            delete(2, (2, 10), 1, a),
            delete(3, (3, 11), 1, b),
            search(1, (12, 13), 1, None),
        ]);
    }
    // A delete racing an insert: the search after both sees what the order implies.
    accepts(vec![insert(1, (0, 10), 1, 1, false), delete(2, (1, 11), 1, false), search(3, (12, 13), 1, Some(1))]);
    accepts(vec![insert(1, (0, 10), 1, 1, false), delete(2, (1, 11), 1, true), search(3, (12, 13), 1, None)]);
}

#[test]
fn rejects_two_deletes_that_both_removed_the_key() {
    rejects_at(
        vec![insert(1, (0, 1), 1, 1, false), delete(2, (2, 10), 1, true), delete(3, (3, 11), 1, true)],
        1,
        &[0, 1, 2],
    );
}

#[test]
fn accepts_non_atomic_scan_that_is_fine_per_key() {
    let setup = || vec![insert(1, (0, 1), 1, 1, false), insert(4, (2, 3), 2, 1, false), insert(5, (2, 3), 3, 1, false)];
    // k1 before its write, k2 after its (later) write: no single instant, but per key fine; k3
    // was deleted during the scan and is missing.
    let mut records = setup();
    records.extend([
        scan(2, (10, 30), 0, 9, 10, &[(1, 1), (2, 2)]),
        insert(1, (11, 12), 1, 2, true),
        insert(1, (13, 14), 2, 2, true),
        delete(3, (15, 16), 3, true),
    ]);
    accepts(records);
    // And the other way round.
    let mut records = setup();
    records.extend([
        scan(2, (10, 30), 0, 9, 10, &[(1, 2), (2, 1), (3, 1)]),
        insert(1, (11, 12), 1, 2, true),
        insert(1, (13, 14), 2, 2, true),
    ]);
    accepts(records);
}

#[test]
fn accepts_scan_cut_at_its_limit() {
    let mut records: Vec<Record> = (1..=5).map(|k| insert(10 + k as u32, (0, 1), k, k, false)).collect();
    records.push(scan(2, (2, 3), 0, 9, 2, &[(1, 1), (2, 2)]));
    records.push(scan(2, (4, 5), 2, 9, 1, &[(2, 2)]));
    records.push(scan(2, (6, 7), 0, 9, 0, &[]));
    records.push(scan(2, (8, 9), 4, 4, 3, &[]));
    records.push(scan(2, (10, 11), 5, 3, 3, &[]));
    accepts(records);
}

#[test]
fn accepts_unsupported_scans_on_a_hash_index() {
    let unsupported = || {
        rec(
            2,
            2,
            3,
            Op::Scan { start: Bound::Unbounded, end: Bound::Unbounded, limit: 10 },
            Outcome::Failed(IndexError::Unsupported("scan")),
        )
    };
    let h = history(vec![insert(1, (0, 1), 1, 1, false), unsupported(), search(1, (4, 5), 1, Some(1))]);
    let report = check(&h, false).expect("unsupported scans are fine on a hash index");
    assert_eq!((report.keys_checked, report.operations_checked, report.operations_skipped), (1, 2, 1));
    // ... but not on an index that supports scans.
    let v = check(&h, true).unwrap_err();
    assert_eq!((v.kind, v.operations.clone()), (ViolationKind::ScanSupport, vec![1]), "{v}");
}

#[test]
fn report_counts_keys_operations_and_states() {
    let h = history(vec![
        insert(1, (0, 1), 1, 1, false),
        insert(4, (0, 1), 2, 1, false),
        scan(2, (2, 3), 0, 9, 10, &[(1, 1), (2, 1)]),
        pending(search(3, (4, 5), 3, None)),
    ]);
    let report = check(&h, true).unwrap();
    assert_eq!(report.keys_checked, 3, "key 3 appears in the history, so the scan observed it absent");
    assert_eq!(report.operations_checked, 3);
    assert_eq!(report.operations_skipped, 1);
    assert_eq!(report.observations_checked, 5, "two inserts and the scan's three observations");
    assert!(report.states_explored >= 4 && report.max_states_one_key >= 2, "{report:?}");
}

#[test]
fn checks_a_history_read_from_json_lines() {
    let text = r#"{"client":1,"invoke":7,"respond":90,"op":"insert","key":"6b01","value":"ff00","result":{"existed":false}}
{"client":3,"invoke":120,"respond":311,"op":"search","key":"6b01","result":{"found":"ff00"}}
{"client":4,"invoke":100,"respond":180,"op":"scan","start":{"included":"6b00"},"end":"unbounded","limit":10,"result":{"pairs":[["6b01","ff00"]]}}
{"client":5,"invoke":5,"respond":null,"op":"delete","key":"6b01","result":{"failed":"node 0 is down"}}
{"client":6,"invoke":400,"respond":410,"op":"scan","start":"unbounded","end":"unbounded","limit":10,"result":{"failed":"key too long","effect_unknown":false}}
"#;
    let h = History::from_json_lines(text).unwrap();
    check(&h, true).expect("linearizable (the delete never happened, or happened after 311)");
    let mut h = h;
    h.records.push(search(3, (400, 401), 1, Some(0)));
    h.records.push(search(3, (402, 403), 1, None));
    h.records.push(search(3, (404, 405), 1, Some(0)));
    let v = check(&h, true).unwrap_err();
    // Once the key was seen absent after being present, only the delete can explain it, so
    // it cannot be present again.
    assert_eq!(
        (v.kind, v.key.clone(), v.operations.clone()),
        (ViolationKind::NotLinearizable, Some(key(1)), vec![0, 3, 6, 7]),
        "{v}"
    );
}

#[test]
fn initial_contents_count_as_present_from_the_start() {
    let h = history(vec![search(1, (0, 1), 1, Some(1)), scan(2, (2, 3), 0, 9, 10, &[(1, 1)])]);
    check(&h, true).unwrap_err();
    let options =
        CheckOptions { initial: [(key(1), val(1)), (key(2), val(2))].into_iter().collect(), ..CheckOptions::default() };
    // The scan misses key 2, present from the start.
    let v = check_with(&h, true, &options).unwrap_err();
    assert_eq!((v.key.clone(), v.operations.clone()), (Some(key(2)), vec![1]), "{v}");
    let h = history(vec![search(1, (0, 1), 1, Some(1)), scan(2, (2, 3), 0, 9, 10, &[(1, 1), (2, 2)])]);
    check_with(&h, true, &options).unwrap();
}

// ---------------------------------------------------------------- rejected

#[test]
fn rejects_read_of_a_value_never_written() {
    let v = rejects_at(
        vec![insert(1, (0, 1), 1, 1, false), search(2, (2, 3), 1, Some(9)), insert(1, (4, 5), 2, 9, false)],
        1,
        &[1],
    );
    assert!(v.details[0].contains("search 6b01 -> found ff09"), "{v}");
}

#[test]
fn rejects_stale_read_after_a_completed_write() {
    rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            search(2, (2, 3), 1, Some(1)),
            insert(3, (0, 3), 2, 5, false),
            insert(1, (4, 5), 1, 2, true),
            search(2, (6, 7), 1, Some(1)),
            search(3, (8, 9), 2, Some(5)),
        ],
        1,
        &[0, 3, 4],
    );
}

#[test]
fn rejects_concurrent_upserts_seen_in_opposite_orders() {
    rejects_at(
        vec![
            insert(3, (0, 1), 1, 0, false),
            insert(1, (2, 10), 1, 1, true),
            insert(2, (3, 11), 1, 2, true),
            search(3, (12, 13), 1, Some(2)),
            search(4, (14, 15), 1, Some(1)),
        ],
        1,
        &[0, 1, 2, 3, 4],
    );
}

#[test]
fn rejects_delete_that_missed_a_present_key() {
    rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            search(2, (2, 3), 1, Some(1)),
            delete(2, (4, 5), 1, false),
            search(2, (6, 7), 1, Some(1)),
        ],
        1,
        &[0, 2],
    );
}

#[test]
fn rejects_lost_insert_and_prints_each_conflicting_operation() {
    let v = rejects_at(
        vec![
            insert(1, (10, 20), 1, 1, false),
            insert(1, (21, 22), 2, 2, false),
            search(2, (30, 40), 1, None),
            search(2, (41, 42), 2, Some(2)),
        ],
        1,
        &[0, 2],
    );
    let text = v.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("not linearizable: key 6b01: "), "{text}");
    assert_eq!(lines[1].trim(), "#0 client 1 [10, 20] insert 6b01 = ff01 -> existed=false", "{text}");
    assert_eq!(lines[2].trim(), "#2 client 2 [30, 40] search 6b01 -> found none", "{text}");
}

#[test]
fn rejects_update_that_found_an_absent_key() {
    rejects_at(vec![search(1, (0, 1), 1, None), update(2, (2, 3), 1, 1, true)], 1, &[1]);
    rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            delete(1, (2, 3), 1, true),
            update(2, (4, 5), 1, 2, true),
            search(2, (6, 7), 1, Some(2)),
        ],
        1,
        &[0, 1, 2],
    );
}

#[test]
fn rejects_scan_missing_a_key_present_throughout() {
    let v = rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            insert(1, (2, 3), 2, 2, false),
            insert(1, (4, 5), 3, 3, false),
            scan(2, (6, 7), 0, 9, 10, &[(1, 1), (3, 3)]),
        ],
        2,
        &[1, 3],
    );
    assert!(v.details[1].contains("(so 6b02 absent at some instant of the scan)"), "{v}");
    // Cut at its limit, a scan still may not skip a key below its last one.
    rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            insert(1, (2, 3), 2, 2, false),
            insert(1, (4, 5), 3, 3, false),
            scan(2, (6, 7), 0, 9, 2, &[(1, 1), (3, 3)]),
        ],
        2,
        &[1, 3],
    );
}

#[test]
fn rejects_scan_returning_a_value_never_written() {
    rejects_at(
        vec![
            insert(1, (0, 1), 1, 1, false),
            insert(4, (0, 1), 2, 2, false),
            scan(2, (2, 3), 0, 9, 10, &[(1, 1), (2, 7)]),
        ],
        2,
        &[2],
    );
}

#[test]
fn rejects_malformed_scan_results() {
    let setup = || vec![insert(1, (0, 1), 1, 1, false), insert(1, (0, 1), 2, 2, false)];
    for (pairs, limit, from) in [
        (&[(2, 2), (1, 1)][..], 10, 0), // unordered
        (&[(1, 1), (1, 1)][..], 10, 0), // a duplicate
        (&[(1, 1), (2, 2)][..], 1, 0),  // over the limit
        (&[(1, 1), (2, 2)][..], 10, 2), // below the start bound
    ] {
        let mut records = setup();
        records.push(scan(2, (2, 3), from, 9, limit, pairs));
        let v = rejects(records, true);
        assert_eq!((v.kind, v.operations.clone()), (ViolationKind::ScanShape, vec![2]), "{v}");
    }
}

#[test]
fn rejects_successful_scan_on_an_index_without_scans() {
    let v = rejects(vec![insert(1, (0, 1), 1, 1, false), scan(2, (2, 3), 0, 9, 10, &[(1, 1)])], false);
    assert_eq!((v.kind, v.operations.clone()), (ViolationKind::ScanSupport, vec![1]), "{v}");
}

#[test]
fn rejects_malformed_records() {
    let v = rejects(vec![rec(1, 0, 1, Op::Search { key: key(1) }, Outcome::Existed(true))], true);
    assert_eq!(v.kind, ViolationKind::MalformedRecord, "{v}");
    let v = rejects(vec![insert(1, (5, 4), 1, 1, false)], true);
    assert_eq!(v.kind, ViolationKind::MalformedRecord, "{v}");
}

#[test]
fn a_search_over_its_bound_is_inconclusive_and_a_real_violation_wins() {
    // Twelve concurrent upserts of distinct values, and a read that sees the first one: the
    // greedy order fails and the search must backtrack.
    let mut records = vec![insert(99, (0, 1), 1, 99, false)];
    records.extend((0..12).map(|i| insert(i, (2, 100), 1, i as u8, true)));
    records.push(search(20, (101, 102), 1, Some(0)));
    let h = history(records.clone());
    let tight = CheckOptions { max_states_per_key: 5, ..CheckOptions::default() };
    let v = check_with(&h, true, &tight).unwrap_err();
    assert!(v.is_inconclusive() && !v.is_violation(), "{v}");
    assert_eq!(v.kind, ViolationKind::Inconclusive);
    assert_eq!(v.key, Some(key(1)));
    assert!(v.to_string().starts_with("inconclusive: key 6b01: "), "{v}");
    let report = check(&h, true).expect("within the default bound, linearizable");
    assert!(report.states_explored > 5, "{report:?}");
    // A lost insert on key 2 is a violation even though key 1 is inconclusive.
    records.push(insert(30, (0, 1), 2, 1, false));
    records.push(search(30, (2, 3), 2, None));
    let v = check_with(&history(records), true, &tight).unwrap_err();
    assert_eq!(
        (v.kind, v.key.clone(), v.operations.clone()),
        (ViolationKind::NotLinearizable, Some(key(2)), vec![14, 15]),
        "{v}"
    );
}

#[test]
fn a_stale_read_on_a_hot_key_is_decided_without_search() {
    // Twelve overlapping upserts, a delete after all of them, then a read of one of their
    // values: no search needed (a bound of 5 configurations would make the search inconclusive).
    let mut records = vec![insert(99, (0, 1), 1, 99, false)];
    records.extend((0..12).map(|i| insert(i, (2, 100), 1, i as u8, true)));
    records.push(delete(20, (101, 102), 1, true));
    records.push(search(21, (103, 104), 1, Some(3)));
    let tight = CheckOptions { max_states_per_key: 5, ..CheckOptions::default() };
    let v = check_with(&history(records), true, &tight).unwrap_err();
    assert_eq!((v.kind, v.key.clone()), (ViolationKind::NotLinearizable, Some(key(1))), "{v}");
    assert_eq!(v.operations, [0, 4, 13, 14], "{v}");
}

// ---------------------------------------------------------------- property

/// One generated operation: keys and values are small numbers.
#[derive(Clone, Debug)]
enum Gen {
    Search(u8),
    Insert(u8, u8),
    Update(u8, u8),
    Delete(u8),
    Scan { from: u8, span: Option<u8>, limit: usize },
}

fn gen_op() -> impl Strategy<Value = Gen> {
    prop_oneof![
        3 => (0..5u8).prop_map(Gen::Search),
        3 => (0..5u8, 0..4u8).prop_map(|(k, v)| Gen::Insert(k, v)),
        1 => (0..5u8, 0..4u8).prop_map(|(k, v)| Gen::Update(k, v)),
        2 => (0..5u8).prop_map(Gen::Delete),
        1 => (0..5u8, proptest::option::of(0..4u8), 0..4usize).prop_map(|(from, span, limit)| Gen::Scan { from, span, limit }),
    ]
}

fn int_key(k: u8) -> Vec<u8> {
    u64::from(k).to_be_bytes().to_vec()
}

/// What happened to a write: completed, effect unknown but it happened, effect unknown and it
/// did not happen, never returned (but happened).
#[derive(Clone, Copy, Debug)]
enum Fate {
    Done,
    UnknownHappened,
    UnknownNot,
    Pending,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![12 => Just(Fate::Done), 1 => Just(Fate::UnknownHappened), 1 => Just(Fate::UnknownNot), 1 => Just(Fate::Pending)]
}

/// Runs `ops` on the model one after another, ten time units apart, then widens each interval by
/// `(before, after)`: the sequential order stays a linearization.
fn sequential_history(ops: &[(Gen, u64, u64, Fate)]) -> History {
    let mut model = SpecMap::new();
    let mut records = Vec::new();
    for (i, (g, before, after, fate)) in ops.iter().enumerate() {
        let op = match g {
            Gen::Search(k) => Op::Search { key: int_key(*k) },
            Gen::Insert(k, v) => Op::Insert { key: int_key(*k), value: vec![*v] },
            Gen::Update(k, v) => Op::Update { key: int_key(*k), value: vec![*v] },
            Gen::Delete(k) => Op::Delete { key: int_key(*k) },
            Gen::Scan { from, span, limit } => Op::Scan {
                start: Bound::Included(int_key(*from)),
                end: span.map_or(Bound::Unbounded, |s| Bound::Excluded(int_key(from + s))),
                limit: *limit,
            },
        };
        let is_write = matches!(g, Gen::Insert(..) | Gen::Update(..) | Gen::Delete(_));
        let fate = if is_write { *fate } else { Fate::Done };
        let outcome = match fate {
            Fate::UnknownNot => Outcome::Failed(IndexError::RetriesExhausted { op: "write", retries: 3 }),
            Fate::UnknownHappened => {
                model.apply(&op, true);
                Outcome::Failed(IndexError::RetriesExhausted { op: "write", retries: 8 })
            }
            Fate::Done | Fate::Pending => model.apply(&op, true),
        };
        let t = 1000 + 10 * i as u64;
        let respond = if matches!(fate, Fate::Pending) { None } else { Some(t + 5 + after) };
        // Widened intervals overlap, so each operation has its own client (a client is sequential).
        records.push(Record { client: i as u32, op, outcome, invoke: t - before, respond });
    }
    History { records }
}

/// 64 cases under `CI=true`, 256 otherwise; `PROPTEST_CASES` overrides both.
fn proptest_cases() -> u32 {
    if let Some(cases) = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()) {
        return cases;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") { 64 } else { 256 }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    #[test]
    fn sequential_histories_widened_are_accepted_and_a_corrupted_search_is_not(
        ops in proptest::collection::vec((gen_op(), 0..40u64, 0..40u64, fate()), 1..60),
        pick in any::<proptest::sample::Index>(),
    ) {
        let mut h = sequential_history(&ops);
        if let Err(v) = check(&h, true) {
            return Err(TestCaseError::fail(format!("rejected a sequential history:\n{v}\n{}", h.to_json_lines())));
        }
        let searches: Vec<usize> = h
            .records
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.op, Op::Search { .. }))
            .map(|(i, _)| i)
            .collect();
        let at = if searches.is_empty() {
            let t = 2000 + 10 * h.records.len() as u64;
            h.records.push(Record { client: 1_000, op: Op::Search { key: int_key(0) }, outcome: Outcome::Found(None), invoke: t, respond: Some(t + 1) });
            h.records.len() - 1
        } else {
            searches[pick.index(searches.len())]
        };
        h.records[at].outcome = Outcome::Found(Some(vec![0xee, 0xee]));
        let v = check(&h, true).expect_err("a search of a value never written was accepted");
        prop_assert_eq!(v.kind, ViolationKind::NotLinearizable);
        prop_assert_eq!(&v.operations, &vec![at]);
    }
}

// ---------------------------------------------------------------- against brute force

/// Whether `records` (single-key operations only) have a linearization, by trying every order:
/// an operation may go next if no remaining determinate operation returned before it was
/// invoked; an indeterminate one may also be left out, and returns whatever the model says.
fn brute_force(records: &[Record]) -> bool {
    brute_force_with(records, false)
}

/// A small concurrent history: each operation takes effect at a point inside its interval, in
/// point order, so its results are true; then perhaps one result is changed.
fn concurrent_history(
    ops: &[(u8, u8, u8, u64, u64, u64, u8)],
    corrupt: Option<(proptest::sample::Index, u8)>,
) -> History {
    let mut by_point: Vec<usize> = (0..ops.len()).collect();
    by_point.sort_by_key(|&i| (ops[i].3 + ops[i].5 % (ops[i].4 + 1), i));
    let mut model = SpecMap::new();
    let mut records: Vec<Option<Record>> = vec![None; ops.len()];
    for i in by_point {
        let (kind, k, v, invoke, len, _, fate) = ops[i];
        let (key, value) = (vec![k], vec![v]);
        let op = match kind % 4 {
            0 => Op::Search { key },
            1 => Op::Insert { key, value },
            2 => Op::Update { key, value },
            _ => Op::Delete { key },
        };
        let is_write = kind % 4 != 0;
        // fate: 0-5 completed; 6 never returned (happened); 7 failed, effect unknown, did not happen
        let (outcome, respond) = match fate {
            6 if is_write => (model.apply(&op, true), None),
            7 if is_write => {
                (Outcome::Failed(IndexError::RetriesExhausted { op: "w", retries: 1 }), Some(invoke + len))
            }
            _ => (model.apply(&op, true), Some(invoke + len)),
        };
        records[i] = Some(Record { client: i as u32, op, outcome, invoke, respond });
    }
    let mut records: Vec<Record> = records.into_iter().map(Option::unwrap).collect();
    corrupt_one(&mut records, corrupt);
    History { records }
}

/// Changes one result, if asked: a search's value, or an `existed`.
fn corrupt_one(records: &mut [Record], corrupt: Option<(proptest::sample::Index, u8)>) {
    if let Some((at, flip)) = corrupt {
        let r = &mut records[at.index(records.len())];
        r.outcome = match &r.outcome {
            Outcome::Found(_) => Outcome::Found((flip % 4 != 0).then(|| vec![flip % 4])),
            Outcome::Existed(e) => Outcome::Existed(!e),
            other => other.clone(),
        };
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    #[test]
    fn agrees_with_brute_force_and_reports_a_non_linearizable_core(
        ops in proptest::collection::vec((0..4u8, 0..2u8, 1..4u8, 0..40u64, 0..20u64, 0..100u64, 0..8u8), 1..13),
        corrupt in proptest::option::of((any::<proptest::sample::Index>(), 0..8u8)),
    ) {
        let h = concurrent_history(&ops, corrupt);
        let expected = brute_force(&h.records);
        match check(&h, true) {
            Ok(_) => prop_assert!(expected, "accepted a non-linearizable history:\n{}", h.to_json_lines()),
            Err(v) => {
                prop_assert!(!expected, "rejected a linearizable history:\n{v}\n{}", h.to_json_lines());
                prop_assert_eq!(v.kind, ViolationKind::NotLinearizable);
                let core: Vec<Record> = v.operations.iter().map(|&i| h.records[i].clone()).collect();
                prop_assert!(!brute_force(&core), "the reported core is linearizable:\n{v}");
                let on_key = |r: &Record| match &r.op {
                    Op::Search { key } | Op::Insert { key, .. } | Op::Update { key, .. } | Op::Delete { key } => {
                        Some(key) == v.key.as_ref()
                    }
                    Op::Scan { .. } => false,
                };
                prop_assert!(core.iter().all(on_key), "{}", v);
            }
        }
    }
}

// ---------------------------------------------------------------- program order

/// The four cores the cross-check found accepted while the harness stamped a client's next
/// invocation with its previous response's step: each needs "a client's operation that returned
/// precedes its next one" to be rejected, and each is accepted (correctly: equal times are
/// concurrent) when the touching operations belong to different clients.
#[test]
fn a_clients_next_operation_follows_its_previous_one_at_equal_times() {
    // Read your own insert (smart and art, `no-reverse-check`).
    let own = |c: u32| vec![insert(2, (141, 267), 1, 1, false), search(c, (267, 302), 1, None)];
    rejects_at(own(2), 1, &[0, 1]);
    accepts(own(3));

    // Lost update (clover, `trust-shortcut`): preloaded, then two upserts by one client.
    let lost = |c: u32| {
        vec![
            insert(u32::MAX, (0, 0), 1, 0, false),
            insert(2, (134, 176), 1, 4, true),
            insert(c, (176, 226), 1, 5, true),
            search(0, (236, 244), 1, Some(4)),
        ]
    };
    rejects_at(lost(2), 1, &[0, 1, 2, 3]);
    accepts(lost(3));

    // A stale read hidden by the reader's next operation (smart, `no-reverse-check`).
    let hidden = |c: u32| {
        vec![insert(0, (296, 345), 1, 1, false), search(2, (347, 359), 1, None), delete(c, (359, 424), 1, true)]
    };
    rejects_at(hidden(2), 1, &[0, 1]);
    accepts(hidden(3));

    // A scan that sees a write its own next search does not (hstore, `no-commit-wait`).
    let scanned = |c: u32| {
        vec![
            insert(0, (280, 400), 1, 1, false),
            scan(1, (290, 345), 0, 9, 10, &[(1, 1)]),
            search(c, (345, 379), 1, None),
        ]
    };
    rejects_at(scanned(1), 1, &[0, 1, 2]);
    accepts(scanned(3));
}

#[test]
fn program_order_at_an_instant_shared_by_two_touching_clients_is_counted_not_guessed() {
    // Clients 1 and 2 both return and invoke at 10: no order of the four events keeps each
    // client's own order without ordering one client's operation before the other's, so the
    // instant is judged concurrent (sound) and reported.
    let h = history(vec![
        insert(1, (0, 10), 1, 1, false),
        search(1, (10, 20), 1, None),
        insert(2, (0, 10), 1, 2, true),
        search(2, (10, 20), 1, Some(2)),
    ]);
    let report = check(&h, true).expect("concurrent at the shared instant, so a linearization exists");
    assert_eq!(report.ambiguous_program_order, 1);
    // One linked client at an instant is exact.
    let h =
        history(vec![insert(1, (0, 10), 1, 1, false), search(1, (10, 20), 1, Some(1)), search(2, (5, 10), 1, None)]);
    assert_eq!(check(&h, true).unwrap().ambiguous_program_order, 0);
}

#[test]
fn a_client_with_two_operations_in_flight_is_malformed() {
    let v = check(&history(vec![insert(1, (0, 10), 1, 1, false), search(1, (5, 20), 1, Some(1))]), true).unwrap_err();
    assert_eq!((v.kind, v.operations.clone()), (ViolationKind::MalformedRecord, vec![0, 1]), "{v}");
    // An operation that never returned is its client's last.
    let v = check(&history(vec![pending(insert(1, (0, 10), 1, 1, false)), search(1, (15, 20), 1, None)]), true)
        .unwrap_err();
    assert_eq!(v.kind, ViolationKind::MalformedRecord, "{v}");
}

/// Brute force: an operation may go next unless a remaining determinate operation returned
/// before it was invoked or, with `program_order`, comes before it in its client's order.
fn brute_force_with(records: &[Record], program_order: bool) -> bool {
    type Seen = std::collections::HashSet<(Vec<bool>, Vec<(Vec<u8>, Vec<u8>)>)>;
    // Records are in program order within a client (the generator pushes them so).
    fn before(records: &[&Record], a: usize, b: usize, program_order: bool) -> bool {
        let (ra, rb) = (records[a], records[b]);
        ra.respond.is_some_and(|t| t < rb.invoke) || (program_order && ra.client == rb.client && a < b)
    }
    fn go(records: &[&Record], po: bool, left: &mut Vec<bool>, model: &SpecMap, failed: &mut Seen) -> bool {
        let contents = |m: &SpecMap| m.scan(Bound::Unbounded, Bound::Unbounded, usize::MAX);
        let pending: Vec<usize> = (0..records.len()).filter(|&i| left[i]).collect();
        if pending.iter().all(|&i| records[i].indeterminate()) {
            return true;
        }
        if failed.contains(&(left.clone(), contents(model))) {
            return false;
        }
        for &i in &pending {
            let r = records[i];
            if pending.iter().any(|&j| j != i && !records[j].indeterminate() && before(records, j, i, po)) {
                continue;
            }
            let mut next = model.clone();
            let outcome = next.apply(&r.op, true);
            if !r.indeterminate() && outcome != r.outcome {
                continue;
            }
            left[i] = false;
            let found =
                go(records, po, left, &next, failed) || (r.indeterminate() && go(records, po, left, model, failed));
            left[i] = true;
            if found {
                return true;
            }
        }
        failed.insert((left.clone(), contents(model)));
        false
    }
    let records: Vec<&Record> =
        records.iter().filter(|r| !matches!(r.outcome, Outcome::Failed(_)) || r.indeterminate()).collect();
    let mut left = vec![true; records.len()];
    go(&records, program_order, &mut left, &SpecMap::new(), &mut Seen::new())
}

/// Clients that run their operations back to back (each invoked at its previous one's
/// response), short intervals so that instants are shared; effects at points inside the
/// intervals in point order (a client's own ties in its order), then perhaps one result changed.
fn back_to_back_history(ops: &[(u8, u8, u8, u64, u64, u8)], corrupt: Option<(proptest::sample::Index, u8)>) -> History {
    let mut clock = [0u64, 1, 2];
    let mut intervals = Vec::new();
    for (seq, &(client, _, _, len, frac, _)) in ops.iter().enumerate() {
        let c = client as usize % clock.len();
        let invoke = clock[c];
        clock[c] += len;
        intervals.push((c as u32, invoke, invoke + len, invoke + frac % (len + 1), seq));
    }
    let mut by_point: Vec<usize> = (0..ops.len()).collect();
    by_point.sort_by_key(|&i| (intervals[i].3, intervals[i].4));
    let mut model = SpecMap::new();
    let mut records: Vec<Option<Record>> = vec![None; ops.len()];
    for i in by_point {
        let (_, kind, v, _, _, fate) = ops[i];
        let (client, invoke, respond, _, _) = intervals[i];
        let (key, value) = (vec![0], vec![v]);
        let op = match kind % 4 {
            0 => Op::Search { key },
            1 => Op::Insert { key, value },
            2 => Op::Update { key, value },
            _ => Op::Delete { key },
        };
        // fate 7: a write that failed with its effect unknown and did not happen.
        let outcome = if fate == 7 && kind % 4 != 0 {
            Outcome::Failed(IndexError::RetriesExhausted { op: "w", retries: 1 })
        } else {
            model.apply(&op, true)
        };
        records[i] = Some(Record { client, op, outcome, invoke, respond: Some(respond) });
    }
    let mut records: Vec<Record> = records.into_iter().map(Option::unwrap).collect();
    corrupt_one(&mut records, corrupt);
    History { records }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    /// On one key (where the comparison is exact), with program order: the checker agrees with
    /// brute force whenever it reports no ambiguous instant, and never rejects what brute force
    /// accepts.
    #[test]
    fn agrees_with_brute_force_on_back_to_back_clients(
        ops in proptest::collection::vec((0..3u8, 0..4u8, 1..4u8, 0..4u64, 0..8u64, 0..8u8), 1..13),
        corrupt in proptest::option::of((any::<proptest::sample::Index>(), 0..8u8)),
    ) {
        let h = back_to_back_history(&ops, corrupt);
        let expected = brute_force_with(&h.records, true);
        match check(&h, true) {
            Ok(report) => prop_assert!(
                expected || report.ambiguous_program_order > 0,
                "accepted a non-linearizable history:\n{}", h.to_json_lines()
            ),
            Err(v) => {
                prop_assert!(!expected, "rejected a linearizable history:\n{v}\n{}", h.to_json_lines());
                prop_assert_eq!(v.kind, ViolationKind::NotLinearizable);
                let core: Vec<Record> = v.operations.iter().map(|&i| h.records[i].clone()).collect();
                prop_assert!(!brute_force_with(&core, true), "the reported core is linearizable:\n{v}");
            }
        }
    }
}

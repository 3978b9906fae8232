//! A per-key linearizability checker for map histories (DESIGN.md §3–§4).
//!
//! [`check`] judges a [`History`] against the sequential specification of
//! [`dmkit_indexes::spec`].
//!
//! ## Decomposition
//!
//! Search, insert, update and delete act on one key, and a map is a product of independent
//! registers, so the history is linearizable iff every key's sub-history is linearizable against
//! a one-register model whose state is `Option<value>` (P-compositionality). Scans are not atomic
//! in any seed index; the checked property is per key, and each scan is decomposed into read-only
//! *observations* that join the keys' sub-histories, each with the scan's real-time interval:
//!
//! - every returned pair `(k, v)`: "`k` had value `v` at some instant of the scan";
//! - every key `k` in the scan's range that appears anywhere in the history (or in
//!   [`CheckOptions::initial`]) and was not returned: "`k` was absent at some instant of the
//!   scan" — if the scan returned fewer than `limit` pairs, or `k` is smaller than the largest
//!   returned key. Keys beyond the last returned key of a scan cut at its limit impose nothing.
//!
//! A scan's own shape is checked directly: pairs strictly ascending by key, within the bounds, at
//! most `limit` of them. A successful scan when `scans_supported == false` is a violation, and so
//! is a scan that failed with `Unsupported` when `scans_supported == true`.
//!
//! ## Real-time and program order
//!
//! `a` precedes `b` iff `a.respond < b.invoke`, or `a` and `b` belong to one client and `a` is
//! its earlier operation (equal times included): see the timing rule in
//! [`crate::history`]. A client with two operations in flight at once is a
//! [`ViolationKind::MalformedRecord`]. Program order at equal times is imposed per key by
//! re-timing the key's events (`enforce_program_order`) before the search.
//!
//! ## Records that constrain nothing, and indeterminate ones
//!
//! A record that failed with an error whose effect is certainly none (a limit, `Full`,
//! `Unsupported`) is dropped. An indeterminate record ([`Record::indeterminate`]: no response,
//! or a failure that may have taken effect) is given a response at infinity and an unconstrained
//! result: it may be linearized at any point after its invocation, and linearizing it last is
//! the same as omitting it, so "it may not have happened" needs no separate case. Indeterminate
//! reads (searches, scans) therefore constrain nothing and are dropped.
//!
//! ## Search (per key)
//!
//! First a linear-time test for *stale results* ([`stale_witness`]): a read (or a `false`
//! `existed`) whose state has a single possible producer, with an operation certainly between
//! the producer and the read that certainly left another state. It decides the common bugs —
//! stale reads, lost inserts and deletes — without search, even on keys too hot to search.
//!
//! Then Wing & Gong's search over the sub-history's call/return events (a doubly linked list that
//! operations are lifted out of when linearized and put back when the search backtracks), with
//! Lowe's memoisation: a cache of `(set of linearized operations, register state)`
//! configurations already explored, the set a bitset over the key's operations (numbered by
//! invocation, stored as the window between its all-ones prefix and all-zeros suffix) with an
//! incrementally maintained Zobrist hash. Each configuration is explored at most once, so a key
//! with `n` operations and `w` distinct values costs at most `2^n · (w + 2)` configurations; four
//! sound refinements (see [`search`]) keep it near `n` in practice: read-only operations that fit
//! the current state are linearized without branching, choices that make a pending result
//! unreachable are cut, present values no pending operation needs are one state in the cache,
//! and interchangeable writes (same kind and `existed`, unneeded values) are tried only in
//! response order. The configurations per key are capped by
//! [`CheckOptions::max_states_per_key`]; past it the verdict is [`ViolationKind::Inconclusive`],
//! never a silent pass and never a false violation. A real violation on another key takes
//! precedence over an inconclusive key.
//!
//! Measured (benches/linearizability.rs, 64 clients, 10 000 operations): 1 000 keys or 10 hot
//! keys take milliseconds; a single key with ~64 operations in flight at once takes up to about
//! a million configurations (a second) when linearizable, and a violation there is found by the
//! stale-result test or, if it is of another kind, may be inconclusive.
//!
//! ## The reported conflict
//!
//! For the first key (in key order) whose sub-history is not linearizable, [`explain`] finds a
//! small core: the operation whose response first makes the history non-linearizable (the
//! *culprit*, by a binary search over truncations of the history), the shortest suffix of a
//! linearization of the rest that still conflicts with it, then delta debugging (chunks, then
//! single operations, repeated until nothing more can go). A removal is kept only if the rest
//! still has no linearization, still has one without the culprit (so the core is about the
//! culprit, not some other conflict that removing operations created), and leaves no result
//! unexplained that was explained (a value read that nobody in the core writes any more,
//! `existed = true` with no insert left...: otherwise a stale read would shrink to "a read of a
//! value never written", which is true but useless). So no single operation can be dropped from
//! the core without losing the conflict or the explanation of a result. The core's operations
//! are [`Violation::operations`], indices into [`History::records`].

use crate::history::{History, Record, effect_unknown};
use dmkit_indexes::IndexError;
use dmkit_indexes::spec::{Op, Outcome, as_ref};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;

/// The default cap on explored configurations per key (each costs about 40 bytes of cache plus
/// an eighth of a byte per operation in the window of concurrent operations).
pub const DEFAULT_MAX_STATES_PER_KEY: u64 = 1_000_000;

/// The message [`History::from_json_lines`] gives a determinate failure other than an
/// unsupported operation (the format keeps the error's kind and text, not the error): a no-op,
/// not a real `Unsupported`.
pub const RECORDED_NO_OP: &str = "recorded no-op";

/// How to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Configurations one key's search may explore before the verdict is inconclusive.
    pub max_states_per_key: u64,
    /// The map's contents before the history began (empty unless keys were loaded outside it).
    pub initial: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Default for CheckOptions {
    fn default() -> CheckOptions {
        CheckOptions { max_states_per_key: DEFAULT_MAX_STATES_PER_KEY, initial: BTreeMap::new() }
    }
}

/// What a successful check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Keys with at least one operation or observation.
    pub keys_checked: usize,
    /// Records that constrained something.
    pub operations_checked: usize,
    /// Records that constrained nothing: determinate failures, indeterminate reads.
    pub operations_skipped: usize,
    /// Per-key operations judged: single-key records plus the per-key observations of scans.
    pub observations_checked: usize,
    /// Configurations explored over all keys (not counting the shrinking of a violation).
    pub states_explored: u64,
    /// The most configurations one key needed.
    pub max_states_one_key: u64,
    /// Instants (per key) at which two or more clients each returned one operation and invoked
    /// their next, so program order could not be imposed without also ordering one client's
    /// operation before another's that shared the instant: those pairs were judged concurrent
    /// (see [`enforce_program_order`]). Always 0 for dmkit's own histories, whose stamps are
    /// distinct.
    pub ambiguous_program_order: usize,
}

/// What kind of failure a [`Violation`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// A key's sub-history has no linearization.
    NotLinearizable,
    /// A scan's result is unordered, outside its bounds or longer than its limit.
    ScanShape,
    /// A scan succeeded on an index without scans, or failed `Unsupported` on one with them.
    ScanSupport,
    /// A record makes no sense (a result of the wrong type, a response before its invocation).
    MalformedRecord,
    /// The index itself reported its structure corrupt (an `IndexError::Corrupt` result).
    IndexReportedCorruption,
    /// Not a violation: a key's search exceeded its state bound, so nothing was decided.
    Inconclusive,
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ViolationKind::NotLinearizable => "not linearizable",
            ViolationKind::ScanShape => "malformed scan result",
            ViolationKind::ScanSupport => "scan support mismatch",
            ViolationKind::MalformedRecord => "malformed record",
            ViolationKind::IndexReportedCorruption => "the index reported corruption",
            ViolationKind::Inconclusive => "inconclusive",
        })
    }
}

/// Why a history was rejected (or, for [`ViolationKind::Inconclusive`], could not be judged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub kind: ViolationKind,
    /// The key whose sub-history is at fault, if one is.
    pub key: Option<Vec<u8>>,
    pub message: String,
    /// The conflicting operations, as indices into [`History::records`], ascending. For
    /// [`ViolationKind::NotLinearizable`], a 1-minimal set of the key's operations with no
    /// linearization.
    pub operations: Vec<usize>,
    /// One line per entry of `operations`: client, interval, operation and result, in hex.
    pub details: Vec<String>,
}

impl Violation {
    /// True if this is a real violation, false if the check was merely inconclusive.
    pub fn is_violation(&self) -> bool {
        self.kind != ViolationKind::Inconclusive
    }

    /// True if the check ran out of its state bound.
    pub fn is_inconclusive(&self) -> bool {
        self.kind == ViolationKind::Inconclusive
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(key) = &self.key {
            write!(f, ": key {}", hex(key))?;
        }
        write!(f, ": {}", self.message)?;
        for line in &self.details {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

/// Checks `history` with the default options. `scans_supported = false` models a hash index.
pub fn check(history: &History, scans_supported: bool) -> Result<CheckReport, Violation> {
    check_with(history, scans_supported, &CheckOptions::default())
}

/// Checks `history` with `options`.
pub fn check_with<'h>(
    history: &'h History,
    scans_supported: bool,
    options: &'h CheckOptions,
) -> Result<CheckReport, Violation> {
    let records = &history.records;
    for (index, record) in records.iter().enumerate() {
        check_record(records, index, record, scans_supported)?;
    }
    check_clients_sequential(records)?;

    // Every key the history mentions: the scans' absent-observations range over these.
    let mut universe: BTreeSet<&'h [u8]> = options.initial.keys().map(Vec::as_slice).collect();
    for record in records {
        match (&record.op, &record.outcome) {
            (Op::Search { key } | Op::Insert { key, .. } | Op::Update { key, .. } | Op::Delete { key }, _) => {
                universe.insert(key);
            }
            (Op::Scan { .. }, Outcome::Scanned(pairs)) => universe.extend(pairs.iter().map(|(k, _)| k.as_slice())),
            (Op::Scan { .. }, _) => {}
        }
    }

    let mut keys: BTreeMap<&'h [u8], KeyHistory<'h>> = BTreeMap::new();
    let mut report = CheckReport::default();
    for (index, record) in records.iter().enumerate() {
        let indeterminate = record.indeterminate();
        if matches!(record.outcome, Outcome::Failed(_)) && !indeterminate {
            report.operations_skipped += 1; // certainly no effect
            continue;
        }
        let respond = if indeterminate { INFINITY } else { record.respond.expect("determinate records responded") };
        let mut add = |key: &'h [u8], effect: Effect<&'h [u8]>, via_scan: bool| {
            let op = KeyOp { record: index, invoke: record.invoke, respond, indeterminate, via_scan, effect };
            keys.entry(key).or_default().ops.push(op);
        };
        match (&record.op, &record.outcome) {
            (Op::Search { .. } | Op::Scan { .. }, _) if indeterminate => {
                report.operations_skipped += 1;
                continue;
            }
            (Op::Search { key }, Outcome::Found(found)) => add(key, Effect::read(found.as_deref()), false),
            (Op::Insert { key, value }, outcome) => {
                add(key, Effect::Insert { value, existed: existed(outcome, indeterminate) }, false)
            }
            (Op::Update { key, value }, outcome) => {
                add(key, Effect::Update { value, existed: existed(outcome, indeterminate) }, false)
            }
            (Op::Delete { key }, outcome) => {
                add(key, Effect::Delete { existed: existed(outcome, indeterminate) }, false)
            }
            (Op::Scan { start, end, limit }, Outcome::Scanned(pairs)) => {
                let cut = pairs.len() >= *limit;
                let last = pairs.last().map(|(k, _)| k.as_slice());
                let mut returned = pairs.iter().peekable();
                for &key in range(&universe, start, end) {
                    if cut && last.is_none_or(|last| key > last) {
                        break;
                    }
                    while returned.next_if(|(k, _)| k.as_slice() < key).is_some() {}
                    match returned.next_if(|(k, _)| k.as_slice() == key) {
                        Some((_, value)) => add(key, Effect::read(Some(value)), true),
                        None => add(key, Effect::read(None), true),
                    }
                }
            }
            (op, outcome) => unreachable!("check_record let through {} -> {outcome:?}", op.name()),
        }
        report.operations_checked += 1;
    }

    let mut inconclusive = None;
    for (&key, key_history) in &mut keys {
        report.ambiguous_program_order += enforce_program_order(&mut key_history.ops, records);
        let ops = key_history.compile(options.initial.get(key).map(Vec::as_slice));
        report.keys_checked += 1;
        report.observations_checked += ops.ops.len();
        let all: Vec<usize> = (0..ops.ops.len()).collect();
        // A stale result is found without search.
        let (verdict, states) = match stale_witness(&ops, &all) {
            Some(_) => (Verdict::NotLinearizable, 0),
            None => {
                let (verdict, states, _) = search(&ops, &all, options.max_states_per_key);
                (verdict, states)
            }
        };
        report.states_explored += states;
        report.max_states_one_key = report.max_states_one_key.max(states);
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Inconclusive => {
                if inconclusive.is_none() {
                    inconclusive = Some(Violation {
                        kind: ViolationKind::Inconclusive,
                        key: Some(key.to_vec()),
                        message: format!(
                            "the search over {} operations explored more than {} configurations without a verdict \
                             (raise CheckOptions::max_states_per_key, or check a shorter history)",
                            ops.ops.len(),
                            options.max_states_per_key
                        ),
                        operations: Vec::new(),
                        details: Vec::new(),
                    });
                }
            }
            Verdict::NotLinearizable => {
                let core = explain(&ops, options.max_states_per_key);
                let mut conflict: Vec<(usize, String)> = core
                    .iter()
                    .map(|&i| {
                        let op = &ops.ops[i];
                        let observed = op.via_scan.then(|| (key, ops.read_value(op.effect)));
                        (op.record, describe(op.record, &records[op.record], observed))
                    })
                    .collect();
                conflict.sort();
                conflict.dedup_by_key(|(index, _)| *index);
                return Err(Violation {
                    kind: ViolationKind::NotLinearizable,
                    key: Some(key.to_vec()),
                    message: format!(
                        "these {} of the key's {} operations have no linearization, and none can be dropped without \
                         losing the conflict or the explanation of a result",
                        conflict.len(),
                        ops.ops.len()
                    ),
                    operations: conflict.iter().map(|(index, _)| *index).collect(),
                    details: conflict.into_iter().map(|(_, line)| line).collect(),
                });
            }
        }
    }
    match inconclusive {
        Some(v) => Err(v),
        None => Ok(report),
    }
}

/// Every client runs one operation at a time: sorted by invocation, each of its operations
/// returned no later than its next was invoked (an operation that never returned is its last).
fn check_clients_sequential(records: &[Record]) -> Result<(), Violation> {
    let mut order: Vec<usize> = (0..records.len()).collect();
    let respond = |i: usize| records[i].respond.unwrap_or(INFINITY);
    order.sort_by_key(|&i| (records[i].client, records[i].invoke, respond(i), i));
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if records[a].client == records[b].client && respond(a) > records[b].invoke {
            return Err(Violation {
                kind: ViolationKind::MalformedRecord,
                key: None,
                message: format!(
                    "client {} invoked an operation while its previous one was still in flight \
                     (a client runs one operation at a time: give each concurrent caller its own client id)",
                    records[a].client
                ),
                operations: vec![a, b],
                details: vec![describe(a, &records[a], None), describe(b, &records[b], None)],
            });
        }
    }
    Ok(())
}

/// Re-times one key's operations so that a client's operation that returned precedes its next
/// one even when the history gives the response and the next invocation the same time, and
/// returns the number of instants where that could not be done soundly.
///
/// Equal times mean "order unknown", so events of different clients at one instant stay
/// concurrent. Within an instant `t`, the new order is: the invocations of other clients, then
/// the one client whose response and next invocation both fall at `t` (its events in program
/// order), then the responses of other clients. Each other client's events at `t` thus stay
/// concurrent with everything at `t` (an invocation before every response), and the linked
/// client's are ordered among themselves. With two linked clients at one instant no such order
/// exists (each one's response would have to precede its own invocation and follow the other's:
/// a cycle), so the instant is left as it was — judged concurrent, which can only miss a
/// violation, never invent one — and counted. The re-timing preserves every strict order of the
/// history (`a.respond < b.invoke` stays true), so a verdict on the new times is a verdict on
/// the history with program order added.
fn enforce_program_order(ops: &mut [KeyOp<&[u8]>], records: &[Record]) -> usize {
    // Each operation's position in its client's program order (on this key): by invocation,
    // then by the recorded response (an indeterminate operation that returned an error returned
    // before its client's next operation, whatever its effect), then as recorded.
    let mut by_client: Vec<usize> = (0..ops.len()).collect();
    by_client.sort_by_key(|&i| {
        let r = &records[ops[i].record];
        (r.client, r.invoke, r.respond.unwrap_or(INFINITY), ops[i].record)
    });
    let mut position = vec![0u64; ops.len()];
    for (rank, &i) in by_client.iter().enumerate() {
        position[i] = rank as u64;
    }
    // Events: (time, response?, op). Indeterminate responses stay at infinity.
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * ops.len());
    for (i, op) in ops.iter().enumerate() {
        events.push((op.invoke, false, i));
        if op.respond != INFINITY {
            events.push((op.respond, true, i));
        }
    }
    events.sort_unstable();
    let mut ambiguous = 0;
    // (time, slot, order within the slot) per event; then dense ranks.
    let mut keyed: Vec<((u64, u8, u64), bool, usize)> = Vec::with_capacity(events.len());
    let mut at = 0;
    while at < events.len() {
        let t = events[at].0;
        let end = at + events[at..].partition_point(|e| e.0 == t);
        let instant = &events[at..end];
        // A client is linked at `t` if it returned one operation and invoked another here.
        let mut linked: Option<u32> = None;
        let mut links = 0;
        let mut clients: Vec<u32> = instant.iter().map(|e| records[ops[e.2].record].client).collect();
        clients.sort_unstable();
        clients.dedup();
        for &c in &clients {
            let mine = || instant.iter().filter(|e| records[ops[e.2].record].client == c);
            let returned: Vec<usize> = mine().filter(|e| e.1).map(|e| e.2).collect();
            if mine().any(|e| !e.1 && returned.iter().any(|&r| r != e.2)) {
                linked = Some(c);
                links += 1;
            }
        }
        if links > 1 {
            ambiguous += 1;
            linked = None;
        }
        for &(_, response, i) in instant {
            let key = match linked {
                Some(c) if records[ops[i].record].client == c => (t, 1, 2 * position[i] + response as u64),
                _ => (t, if response { 2 } else { 0 }, 0),
            };
            keyed.push((key, response, i));
        }
        at = end;
    }
    keyed.sort_unstable_by_key(|e| e.0);
    let mut rank = 0u64;
    for j in 0..keyed.len() {
        if j > 0 && keyed[j].0 != keyed[j - 1].0 {
            rank += 1;
        }
        let (_, response, i) = keyed[j];
        if response {
            ops[i].respond = rank;
        } else {
            ops[i].invoke = rank;
        }
    }
    ambiguous
}

/// The register's state for "absent", and the response time of indeterminate operations.
const ABSENT: u32 = u32::MAX;
const INFINITY: u64 = u64::MAX;
/// In the cache: some present value that no pending operation needs.
const UNNEEDED: u32 = u32::MAX - 1;

/// What `existed` result an insert, update or delete must agree with (`None`: any — an
/// indeterminate operation's result, even one recorded, was never returned to its client).
fn existed(outcome: &Outcome, indeterminate: bool) -> Option<bool> {
    match outcome {
        Outcome::Existed(e) if !indeterminate => Some(*e),
        _ => None,
    }
}

/// Checks one record on its own: result type, interval, scan support and shape.
fn check_record(records: &[Record], index: usize, record: &Record, scans_supported: bool) -> Result<(), Violation> {
    let fail = |kind: ViolationKind, key: Option<&[u8]>, message: String| Violation {
        kind,
        key: key.map(<[u8]>::to_vec),
        message,
        operations: vec![index],
        details: vec![describe(index, &records[index], None)],
    };
    if let Some(respond) = record.respond
        && respond < record.invoke
    {
        return Err(fail(
            ViolationKind::MalformedRecord,
            None,
            format!("responded at {respond}, before it was invoked"),
        ));
    }
    if let Outcome::Failed(IndexError::Corrupt(what)) = &record.outcome {
        return Err(fail(ViolationKind::IndexReportedCorruption, None, what.clone()));
    }
    let well_typed = matches!(
        (&record.op, &record.outcome),
        (_, Outcome::Failed(_))
            | (Op::Search { .. }, Outcome::Found(_))
            | (Op::Insert { .. } | Op::Update { .. } | Op::Delete { .. }, Outcome::Existed(_))
            | (Op::Scan { .. }, Outcome::Scanned(_))
    );
    if !well_typed {
        return Err(fail(
            ViolationKind::MalformedRecord,
            None,
            format!("a {} cannot return this result", record.op.name()),
        ));
    }
    let Op::Scan { start, end, limit } = &record.op else { return Ok(()) };
    match &record.outcome {
        Outcome::Failed(IndexError::Unsupported(what)) if scans_supported && *what != RECORDED_NO_OP => Err(fail(
            ViolationKind::ScanSupport,
            None,
            "a scan failed as unsupported on an index that supports scans".into(),
        )),
        Outcome::Scanned(_) if !scans_supported && record.respond.is_some() => Err(fail(
            ViolationKind::ScanSupport,
            None,
            "a scan succeeded on an index without scans (it must fail with Unsupported)".into(),
        )),
        Outcome::Scanned(pairs) => {
            if pairs.len() > *limit {
                return Err(fail(
                    ViolationKind::ScanShape,
                    None,
                    format!("the scan returned {} pairs, more than its limit of {limit}", pairs.len()),
                ));
            }
            for (i, (key, _)) in pairs.iter().enumerate() {
                if !in_bounds(key, start, end) {
                    return Err(fail(
                        ViolationKind::ScanShape,
                        Some(key),
                        "the scan returned a key outside its bounds".into(),
                    ));
                }
                if i > 0 && pairs[i - 1].0 >= *key {
                    return Err(fail(
                        ViolationKind::ScanShape,
                        Some(key),
                        format!(
                            "the scan's pairs are not strictly ascending by key (pair {i} is not above pair {})",
                            i - 1
                        ),
                    ));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn in_bounds(key: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let above = match start {
        Bound::Included(s) => key >= s.as_slice(),
        Bound::Excluded(s) => key > s.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match end {
        Bound::Included(e) => key <= e.as_slice(),
        Bound::Excluded(e) => key < e.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// The keys of `universe` within the bounds (`BTreeSet::range` panics on an inverted range).
fn range<'u, 'a>(
    universe: &'u BTreeSet<&'a [u8]>,
    start: &Bound<Vec<u8>>,
    end: &Bound<Vec<u8>>,
) -> impl Iterator<Item = &'u &'a [u8]> + use<'u, 'a> {
    let empty = match (start, end) {
        (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
            s > e || (s == e && !(matches!(start, Bound::Included(_)) && matches!(end, Bound::Included(_))))
        }
        _ => false,
    };
    (!empty).then(|| universe.range::<[u8], _>((as_ref(start), as_ref(end)))).into_iter().flatten()
}

/// A read-only observation expects this register state; writes carry their value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect<V> {
    Read(Option<V>),
    Insert { value: V, existed: Option<bool> },
    Update { value: V, existed: Option<bool> },
    Delete { existed: Option<bool> },
}

impl<'a> Effect<&'a [u8]> {
    fn read(value: Option<&'a [u8]>) -> Effect<&'a [u8]> {
        Effect::Read(value)
    }
}

/// One key's operations as recorded, values still as bytes.
#[derive(Debug, Default)]
struct KeyHistory<'a> {
    ops: Vec<KeyOp<&'a [u8]>>,
}

impl<'a> KeyHistory<'a> {
    /// Interns the values and builds the register model's operations.
    fn compile(&self, initial: Option<&'a [u8]>) -> KeyOps<'a> {
        let mut values: Vec<&'a [u8]> = Vec::new();
        let mut ids: HashMap<&'a [u8], u32> = HashMap::new();
        let mut intern = |v: &'a [u8]| -> u32 {
            *ids.entry(v).or_insert_with(|| {
                values.push(v);
                (values.len() - 1) as u32
            })
        };
        let initial = initial.map_or(ABSENT, &mut intern);
        let ops = self
            .ops
            .iter()
            .map(|op| KeyOp {
                effect: match op.effect {
                    Effect::Read(v) => Effect::Read(v.map(&mut intern)),
                    Effect::Insert { value, existed } => Effect::Insert { value: intern(value), existed },
                    Effect::Update { value, existed } => Effect::Update { value: intern(value), existed },
                    Effect::Delete { existed } => Effect::Delete { existed },
                },
                record: op.record,
                invoke: op.invoke,
                respond: op.respond,
                indeterminate: op.indeterminate,
                via_scan: op.via_scan,
            })
            .collect();
        KeyOps { ops, values, initial }
    }
}

/// One operation of a key's sub-history, on the register model (values as interned ids once
/// compiled).
#[derive(Clone, Copy, Debug)]
struct KeyOp<V = u32> {
    record: usize,
    invoke: u64,
    /// [`INFINITY`] for an indeterminate operation.
    respond: u64,
    indeterminate: bool,
    /// A read derived from a scan.
    via_scan: bool,
    effect: Effect<V>,
}

/// A key's sub-history on the register model.
#[derive(Debug)]
struct KeyOps<'a> {
    ops: Vec<KeyOp>,
    values: Vec<&'a [u8]>,
    initial: u32,
}

impl KeyOps<'_> {
    /// The value a read expects, as bytes (`None` for absent).
    fn read_value(&self, effect: Effect<u32>) -> Option<&[u8]> {
        match effect {
            Effect::Read(Some(v)) => Some(self.values[v as usize]),
            _ => None,
        }
    }
}

impl Effect<u32> {
    /// The one register state in which the operation can return its result, if there is one.
    fn needs(self) -> Option<u32> {
        match self {
            Effect::Read(v) => Some(v.unwrap_or(ABSENT)),
            Effect::Insert { existed: Some(false), .. }
            | Effect::Update { existed: Some(false), .. }
            | Effect::Delete { existed: Some(false) } => Some(ABSENT),
            _ => None,
        }
    }

    /// The register state the operation certainly leaves behind, if its result says.
    fn certain_state_after(self) -> Option<u32> {
        match self {
            Effect::Read(v) => Some(v.unwrap_or(ABSENT)),
            Effect::Insert { value, .. } | Effect::Update { value, existed: Some(true) } => Some(value),
            Effect::Update { existed: Some(false), .. } | Effect::Delete { existed: Some(_) } => Some(ABSENT),
            _ => None,
        }
    }

    /// The register state the operation may leave behind (other than the one it found).
    fn writes(self) -> Option<u32> {
        match self {
            Effect::Insert { value, .. } => Some(value),
            Effect::Update { value, existed } if existed != Some(false) => Some(value),
            Effect::Delete { existed } if existed != Some(false) => Some(ABSENT),
            _ => None,
        }
    }

    /// True if the operation leaves the register unchanged in every state where it can return
    /// its result: a read, a delete or update that found nothing.
    fn read_only(self) -> bool {
        matches!(
            self,
            Effect::Read(_) | Effect::Update { existed: Some(false), .. } | Effect::Delete { existed: Some(false) }
        )
    }

    /// The register's next state, or `None` if the operation cannot return its result in `state`.
    fn step(self, state: u32) -> Option<u32> {
        let present = state != ABSENT;
        let agrees = |existed: Option<bool>| existed.is_none_or(|e| e == present);
        match self {
            Effect::Read(expected) => (expected.unwrap_or(ABSENT) == state).then_some(state),
            Effect::Insert { value, existed } => agrees(existed).then_some(value),
            Effect::Update { value, existed } => agrees(existed).then_some(if present { value } else { state }),
            Effect::Delete { existed } => agrees(existed).then_some(ABSENT),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Linearizable,
    NotLinearizable,
    Inconclusive,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Hashes a `u64` that is already a good hash.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

const NIL: u32 = u32::MAX;

/// Lowe's cache: configurations (linearized set, state) already explored. Operations are
/// numbered in invocation order, so a linearized set is mostly a prefix: each entry keeps only
/// the words between the first word not all linearized and the last word with any linearized
/// (a window about as wide as the concurrency), not the whole bitset.
struct Cache {
    entries: Vec<CacheEntry>,
    words: Vec<u64>,
    heads: HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>,
}

struct CacheEntry {
    /// Where the entry's words start in `Cache::words`.
    start: usize,
    /// The index of its first word in the full bitset; words below are all ones, above all zero.
    first_word: u32,
    len: u32,
    state: u32,
    /// The next entry with the same hash.
    chain: u32,
}

impl Cache {
    fn new() -> Cache {
        Cache { entries: Vec::new(), words: Vec::new(), heads: HashMap::default() }
    }

    fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Adds the configuration; false if it was already there.
    fn insert(&mut self, set_hash: u64, bits: &[u64], state: u32) -> bool {
        let first = bits.iter().position(|&w| w != u64::MAX).unwrap_or(bits.len());
        let end = bits.iter().rposition(|&w| w != 0).map_or(first, |last| (last + 1).max(first));
        let window = &bits[first..end];
        let hash = set_hash ^ splitmix64(u64::from(state) ^ 0x5851_f42d_4c95_7f2d);
        let fresh = self.entries.len() as u32;
        let chain = match self.heads.entry(hash) {
            Entry::Occupied(mut head) => {
                let mut at = *head.get();
                while at != NIL {
                    let e = &self.entries[at as usize];
                    if e.state == state
                        && e.first_word as usize == first
                        && self.words[e.start..e.start + e.len as usize] == *window
                    {
                        return false;
                    }
                    at = e.chain;
                }
                head.insert(fresh)
            }
            Entry::Vacant(slot) => {
                slot.insert(fresh);
                NIL
            }
        };
        self.entries.push(CacheEntry {
            start: self.words.len(),
            first_word: first as u32,
            len: window.len() as u32,
            state,
            chain,
        });
        self.words.extend_from_slice(window);
        true
    }
}

/// Wing–Gong search with Lowe's memoisation over `subset` (indices into `ops.ops`). Returns the
/// verdict, the configurations explored and, if linearizable, a linearization (indeterminate
/// operations left out of it did not happen).
///
/// A configuration is the set of linearized operations and the register's state. Its candidates
/// are the operations whose call events come before the first pending return event (Wing & Gong:
/// anything invoked before the earliest pending operation must return). Four refinements, each
/// sound:
///
/// - *Read-only reduction*: a read-only operation (one that changes the register in no state
///   where it can return its result: a read, a delete or update that found nothing) that can be
///   linearized now is linearized at once, without trying alternatives, and backtracking over it
///   backtracks further. In any completion, moving it to the front changes no other operation's
///   view, and breaks no real-time order: every operation that returned before it was invoked is
///   already linearized (its return event would otherwise come first in the list). An
///   indeterminate write is not read-only even where it would change nothing now: later, it
///   might.
/// - *Dead states*: a choice that leaves a pending operation's result unreachable (the one state
///   it can return in is neither current nor producible by any unlinearized operation) fails at
///   once.
/// - *Canonical states in the cache*: present values that no pending operation needs lead to the
///   same futures, so the cache stores them as one state.
/// - *Symmetry*: of interchangeable candidates only the one answering first is tried (see
///   [`Search::symmetry_class`]).
///
/// Candidates are tried earliest response first: the operation whose return is nearest must be
/// linearized soonest.
fn search(ops: &KeyOps, subset: &[usize], max_states: u64) -> (Verdict, u64, Vec<usize>) {
    let mut s = Search::new(ops, subset);
    let remaining = subset.iter().filter(|&&i| !ops.ops[i].indeterminate).count();
    if remaining == 0 {
        return (Verdict::Linearizable, 0, Vec::new());
    }
    if (0..ops.values.len() as u32).chain([ABSENT]).any(|x| s.pending.dead(x, ops.initial)) {
        return (Verdict::NotLinearizable, 0, Vec::new());
    }
    s.remaining = remaining;
    // Candidates of the frames on the stack, each frame's after its parent's.
    let mut arena: Vec<u32> = Vec::new();
    let mut frames: Vec<Frame> = Vec::new();
    loop {
        // A new configuration.
        if s.remaining == 0 {
            let order = frames.iter().map(|f| s.order[f.chosen as usize]).collect();
            return (Verdict::Linearizable, s.cache.len(), order);
        }
        if s.cache.len() > max_states {
            return (Verdict::Inconclusive, s.cache.len(), Vec::new());
        }
        let mut backtrack = false;
        let free = s.candidates().find(|&j| s.effects[j].read_only() && s.effects[j].step(s.state).is_some());
        if let Some(j) = free {
            let old_state = s.state;
            if s.try_apply(j, true) {
                frames.push(Frame {
                    start: arena.len(),
                    next: arena.len(),
                    chosen: j as u32,
                    old_state,
                    reduced: true,
                    tried_classes: 0,
                });
                continue;
            }
            backtrack = true; // the reduced successor failed before, so this configuration fails
        } else {
            let start = arena.len();
            arena.extend(s.candidates().map(|j| j as u32));
            arena[start..].sort_unstable_by_key(|&j| (s.respond[j as usize], j));
            frames.push(Frame {
                start,
                next: start,
                chosen: NIL,
                old_state: s.state,
                reduced: false,
                tried_classes: 0,
            });
        }
        loop {
            if !backtrack {
                let frame = frames.last_mut().expect("a frame to choose in");
                let mut applied = false;
                while frame.next < arena.len() {
                    let j = arena[frame.next] as usize;
                    frame.next += 1;
                    if let Some(class) = s.symmetry_class(j) {
                        if frame.tried_classes & class != 0 {
                            continue; // an interchangeable operation answering sooner was tried
                        }
                        frame.tried_classes |= class;
                    }
                    if s.try_apply(j, false) {
                        frame.chosen = j as u32;
                        applied = true;
                        break;
                    }
                }
                if applied {
                    break; // on to the new configuration
                }
                arena.truncate(frame.start);
                frames.pop();
            }
            backtrack = false;
            // Undo the parent's choice; reduced choices are undone and passed over.
            loop {
                let Some(frame) = frames.last_mut() else {
                    return (Verdict::NotLinearizable, s.cache.len(), Vec::new());
                };
                s.undo(frame.chosen as usize, frame.old_state);
                frame.chosen = NIL;
                if !frame.reduced {
                    break;
                }
                frames.pop();
            }
        }
    }
}

/// A configuration on the search's stack: its candidates `arena[start..]` (tried up to `next`),
/// the operation chosen in it, and the state before that choice.
#[derive(Debug)]
struct Frame {
    start: usize,
    next: usize,
    chosen: u32,
    old_state: u32,
    reduced: bool,
    /// The symmetry classes tried in this configuration (see [`Search::symmetry_class`]).
    tried_classes: u32,
}

/// The mutable state of one key's search.
struct Search<'o> {
    /// The operations (indices into `KeyOps::ops`) by invocation; the search numbers them so.
    order: Vec<usize>,
    effects: Vec<Effect<u32>>,
    determinate: Vec<bool>,
    respond: Vec<u64>,
    zobrist: Vec<u64>,
    /// Events `(time, is_return, op)`, calls before returns at equal times (operations that
    /// touch at one instant are concurrent), in a circular doubly linked list with sentinel
    /// `head`; linearized operations are unlinked.
    events: Vec<(u64, bool, u32)>,
    next: Vec<usize>,
    prev: Vec<usize>,
    head: usize,
    call_event: Vec<usize>,
    return_event: Vec<usize>,
    linearized: Vec<u64>,
    set_hash: u64,
    state: u32,
    remaining: usize,
    pending: Pending,
    cache: Cache,
    _ops: std::marker::PhantomData<&'o KeyOps<'o>>,
}

impl<'o> Search<'o> {
    fn new(ops: &'o KeyOps<'o>, subset: &[usize]) -> Search<'o> {
        let n = subset.len();
        // Number the operations in invocation order (see [`Cache`]).
        let mut order = subset.to_vec();
        order.sort_by_key(|&i| (ops.ops[i].invoke, i));
        let subset = &order[..];
        let mut events: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * n);
        for (j, &i) in subset.iter().enumerate() {
            let op = &ops.ops[i];
            events.push((op.invoke, false, j as u32));
            events.push((op.respond, true, j as u32));
        }
        events.sort_unstable();
        let head = 2 * n;
        let mut next: Vec<usize> = (1..=2 * n + 1).collect();
        next[head] = 0;
        let prev: Vec<usize> = (0..=2 * n).map(|e| if e == 0 { head } else { e - 1 }).collect();
        let (mut call_event, mut return_event) = (vec![0; n], vec![0; n]);
        for (e, &(_, is_return, j)) in events.iter().enumerate() {
            if is_return {
                return_event[j as usize] = e;
            } else {
                call_event[j as usize] = e;
            }
        }
        let effects: Vec<Effect<u32>> = subset.iter().map(|&i| ops.ops[i].effect).collect();
        let determinate: Vec<bool> = subset.iter().map(|&i| !ops.ops[i].indeterminate).collect();
        let mut pending = Pending::new(ops.values.len());
        for j in 0..n {
            pending.count(effects[j], determinate[j], 1);
        }
        Search {
            order: subset.to_vec(),
            respond: subset.iter().map(|&i| ops.ops[i].respond).collect(),
            zobrist: (0..n as u64)
                .map(|j| splitmix64(j.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xa076_1d64_78bd_642f))
                .collect(),
            effects,
            determinate,
            events,
            next,
            prev,
            head,
            call_event,
            return_event,
            linearized: vec![0; n.div_ceil(64)],
            set_hash: 0,
            state: ops.initial,
            remaining: 0,
            pending,
            cache: Cache::new(),
            _ops: std::marker::PhantomData,
        }
    }

    /// Candidates of one symmetry class are interchangeable: deletes with the same `existed`,
    /// and inserts (or updates) with the same `existed` whose values no pending operation needs.
    /// Of two such candidates, if a completion linearizes the one answering later first, then
    /// swapping the two gives a completion too: each sees what the other saw and leaves a state
    /// the future cannot tell apart, the earlier-answering one moves earlier (all it must follow
    /// is linearized) and the other moves to a place before the first's response, so before its
    /// own. So only the first of each class, in candidate order, is tried.
    fn symmetry_class(&self, j: usize) -> Option<u32> {
        let (kind, existed) = match self.effects[j] {
            Effect::Delete { existed } => (0, existed),
            Effect::Insert { value, existed } if !self.pending.needed(value) => (1, existed),
            Effect::Update { value, existed } if !self.pending.needed(value) => (2, existed),
            _ => return None,
        };
        let existed = match existed {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        };
        Some(1 << ((kind * 3 + existed) * 2 + u32::from(self.determinate[j])))
    }

    /// The current configuration's candidates: calls before the first pending return.
    fn candidates(&self) -> impl Iterator<Item = usize> + '_ {
        let mut e = self.next[self.head];
        std::iter::from_fn(move || {
            debug_assert_ne!(e, self.head, "a determinate operation's return ends every walk of the list");
            let (_, is_return, j) = self.events[e];
            e = self.next[e];
            (!is_return).then_some(j as usize)
        })
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        self.prev[n] = e;
    }

    fn flip(&mut self, j: usize) {
        self.linearized[j / 64] ^= 1 << (j % 64);
        self.set_hash ^= self.zobrist[j];
    }

    /// Linearizes candidate `j` if it can return its result now, leaves no pending result
    /// unreachable (unless `reduced`: read-only operations cannot) and reaches a configuration
    /// not explored before.
    fn try_apply(&mut self, j: usize, reduced: bool) -> bool {
        let Some(new_state) = self.effects[j].step(self.state) else { return false };
        self.pending.count(self.effects[j], self.determinate[j], -1);
        let dead = !reduced
            && (self.pending.dead(self.state, new_state)
                || self.effects[j].writes().is_some_and(|x| self.pending.dead(x, new_state)));
        self.flip(j);
        if dead || !self.cache.insert(self.set_hash, &self.linearized, self.pending.canonical(new_state)) {
            self.flip(j);
            self.pending.count(self.effects[j], self.determinate[j], 1);
            return false;
        }
        self.state = new_state;
        self.unlink(self.call_event[j]);
        self.unlink(self.return_event[j]);
        if self.determinate[j] {
            self.remaining -= 1;
        }
        true
    }

    /// Undoes the linearization of `j`, the last one applied.
    fn undo(&mut self, j: usize, old_state: u32) {
        self.flip(j);
        self.pending.count(self.effects[j], self.determinate[j], 1);
        self.state = old_state;
        self.relink(self.return_event[j]);
        self.relink(self.call_event[j]);
        if self.determinate[j] {
            self.remaining += 1;
        }
    }
}

/// Finds a *stale result* without search: an operation `r` that can only return its result in
/// state `x`, where `x` has exactly one possible producer `w` (a write of `x`, or the initial
/// state), and some operation `m` certainly between them in real time (`w` returned before `m`
/// was invoked, `m` returned before `r` was invoked) certainly leaves a state other than `x`.
/// Then in every linearization the last producer before `r` is `w`, `m` lies between them and
/// `r` cannot see `x`. Looks within `subset` (indices into `ops.ops`); returns `{w, m, r}`,
/// which is itself not linearizable, and `r`. Runs in `O(n log n)`; it decides stale reads and
/// lost writes on keys too hot for the search.
fn stale_witness(ops: &KeyOps, subset: &[usize]) -> Option<(Vec<usize>, usize)> {
    const INITIAL: usize = usize::MAX;
    let slot = |x: u32| if x == ABSENT { ops.values.len() } else { x as usize };
    // Per state: how many operations (or the initial state) may produce it, and one of them.
    let mut producers: Vec<(u32, usize)> = vec![(0, 0); ops.values.len() + 1];
    producers[slot(ops.initial)] = (1, INITIAL);
    for &i in subset {
        if let Some(x) = ops.ops[i].effect.writes() {
            let p = &mut producers[slot(x)];
            *p = (p.0 + 1, i);
        }
    }
    // Determinate operations by invocation, with the state each certainly leaves behind.
    let mut by_invoke: Vec<(u64, u64, u32, usize)> = subset
        .iter()
        .map(|&i| (i, &ops.ops[i]))
        .filter(|(_, op)| !op.indeterminate)
        .filter_map(|(i, op)| op.effect.certain_state_after().map(|x| (op.invoke, op.respond, x, i)))
        .collect();
    by_invoke.sort_unstable();
    // For each suffix: the earliest response, and the earliest response leaving another state.
    let none = (INFINITY, ABSENT, usize::MAX);
    let mut best: Vec<[(u64, u32, usize); 2]> = vec![[none, none]; by_invoke.len() + 1];
    for k in (0..by_invoke.len()).rev() {
        let (_, respond, x, i) = by_invoke[k];
        let [mut first, mut second] = best[k + 1];
        if respond < first.0 {
            if first.1 != x {
                second = first;
            }
            first = (respond, x, i);
        } else if x != first.1 && respond < second.0 {
            second = (respond, x, i);
        }
        best[k] = [first, second];
    }
    for &r in subset {
        let op = &ops.ops[r];
        let Some(x) = op.effect.needs().filter(|_| !op.indeterminate) else { continue };
        let (count, w) = producers[slot(x)];
        if count != 1 {
            continue;
        }
        let from = if w == INITIAL {
            0
        } else if ops.ops[w].indeterminate {
            continue;
        } else {
            let after = ops.ops[w].respond;
            by_invoke.partition_point(|&(invoke, ..)| invoke <= after)
        };
        let [first, second] = best[from];
        let m = if first.1 != x { first } else { second };
        if m.0 < op.invoke {
            let mut witness = vec![m.2, r];
            if w != INITIAL {
                witness.push(w);
            }
            witness.sort_unstable();
            return Some((witness, r));
        }
    }
    None
}

/// Per register state, how many unlinearized determinate operations can only return their result
/// in that state, and how many unlinearized operations may still produce it. A state that is
/// needed, cannot be produced and is not the current one makes the configuration a dead end.
struct Pending {
    needs: Vec<u32>,
    producers: Vec<u32>,
}

impl Pending {
    fn new(values: usize) -> Pending {
        Pending { needs: vec![0; values + 1], producers: vec![0; values + 1] }
    }

    fn slot(&self, state: u32) -> usize {
        if state == ABSENT { self.needs.len() - 1 } else { state as usize }
    }

    /// Adds (`sign = 1`) or removes (`-1`) an operation's needs and products.
    fn count(&mut self, effect: Effect<u32>, determinate: bool, sign: i32) {
        if let Some(x) = effect.needs().filter(|_| determinate) {
            let i = self.slot(x);
            self.needs[i] = self.needs[i].wrapping_add_signed(sign);
        }
        if let Some(x) = effect.writes() {
            let i = self.slot(x);
            self.producers[i] = self.producers[i].wrapping_add_signed(sign);
        }
    }

    /// The state as the cache knows it: every present value no pending operation needs leads to
    /// the same futures (reads of needed values fail, writes overwrite, `existed` sees presence),
    /// so they are one state.
    fn canonical(&self, state: u32) -> u32 {
        if state != ABSENT && !self.needed(state) { UNNEEDED } else { state }
    }

    /// Whether some pending operation can only return its result with `x` present.
    fn needed(&self, x: u32) -> bool {
        self.needs[self.slot(x)] > 0
    }

    fn dead(&self, x: u32, current: u32) -> bool {
        let i = self.slot(x);
        x != current && self.needs[i] > 0 && self.producers[i] == 0
    }
}

/// Over a set of a key's operations, when each kind of explanation first becomes available, to
/// tell whether an operation's result is explainable at all by the others: a value read needs a
/// writer of that value invoked before the read returned; presence needs an insert that may have
/// created the key, invoked before; absence needs the key absent from the start and not certainly
/// created before, or a delete that may have removed it, invoked before.
struct Support {
    /// Per value id: the earliest invocation of a write of it.
    writer_first_invoke: Vec<u64>,
    creator_first_invoke: u64,
    creator_first_respond: u64,
    remover_first_invoke: u64,
    remover_first_respond: u64,
    /// Inserts that returned `existed = false` with no delete invoked before they returned:
    /// only the initial state can explain them, and it explains at most one.
    absence_claims: u32,
    /// Deletes that returned `existed = true` with no insert invoked before they returned.
    presence_claims: u32,
}

impl Support {
    fn of(ops: &KeyOps, set: &[usize]) -> Support {
        let mut s = Support {
            writer_first_invoke: vec![INFINITY; ops.values.len()],
            creator_first_invoke: INFINITY,
            creator_first_respond: INFINITY,
            remover_first_invoke: INFINITY,
            remover_first_respond: INFINITY,
            absence_claims: 0,
            presence_claims: 0,
        };
        for &i in set {
            let op = &ops.ops[i];
            let (writes, creates, removes) = match op.effect {
                Effect::Insert { value, existed } => (Some(value), existed != Some(true), false),
                Effect::Update { value, existed } => ((existed != Some(false)).then_some(value), false, false),
                Effect::Delete { existed } => (None, false, existed != Some(false)),
                Effect::Read(_) => (None, false, false),
            };
            if let Some(v) = writes {
                s.writer_first_invoke[v as usize] = s.writer_first_invoke[v as usize].min(op.invoke);
            }
            if creates {
                s.creator_first_invoke = s.creator_first_invoke.min(op.invoke);
                s.creator_first_respond = s.creator_first_respond.min(op.respond);
            }
            if removes {
                s.remover_first_invoke = s.remover_first_invoke.min(op.invoke);
                s.remover_first_respond = s.remover_first_respond.min(op.respond);
            }
        }
        for &i in set {
            let op = &ops.ops[i];
            match op.effect {
                Effect::Insert { existed: Some(false), .. } if s.remover_first_invoke > op.respond => {
                    s.absence_claims += 1
                }
                Effect::Delete { existed: Some(true) } if s.creator_first_invoke > op.respond => s.presence_claims += 1,
                _ => {}
            }
        }
        s
    }

    /// Whether the set (or the initial state) could conceivably give `op` its result. An
    /// operation never explains its own result, so it needs no excluding.
    fn supports(&self, initial: u32, op: &KeyOp) -> bool {
        // The initial state explains presence (absence) until a delete (insert) certainly
        // happened, and explains at most one delete (insert) that claims it.
        let present = (initial != ABSENT && self.remover_first_respond >= op.invoke && self.presence_claims <= 1)
            || self.creator_first_invoke <= op.respond;
        let absent = (initial == ABSENT && self.creator_first_respond >= op.invoke && self.absence_claims <= 1)
            || self.remover_first_invoke <= op.respond;
        match op.effect {
            Effect::Read(None) => absent,
            Effect::Read(Some(v)) => (initial == v || self.writer_first_invoke[v as usize] <= op.respond) && present,
            Effect::Insert { existed, .. } | Effect::Update { existed, .. } | Effect::Delete { existed } => {
                match existed {
                    Some(true) => present,
                    Some(false) => absent,
                    None => true,
                }
            }
        }
    }
}

/// Whether removing operations from `before` to get `after` leaves every result that was
/// explainable in `before` explainable.
fn keeps_support(ops: &KeyOps, before: &[usize], after: &[usize]) -> bool {
    let (b, a) = (Support::of(ops, before), Support::of(ops, after));
    after.iter().all(|&i| !b.supports(ops.initial, &ops.ops[i]) || a.supports(ops.initial, &ops.ops[i]))
}

/// A small core of a non-linearizable key history (indices into `ops.ops`, ascending).
///
/// 1. An operation whose result nothing in the history can explain (a value never written) and
///    that is not linearizable alone is the core.
/// 2. Otherwise a *culprit* is found: the operation whose response first makes the history non-
///    linearizable. The history truncated at the `k`-th response (operations that had not
///    returned by then made indeterminate, reads among them dropped) is linearizable for small
///    `k` and not for the last, monotonically, so a binary search finds the least `k`.
/// 3. A linearization of the truncated history without the culprit gives cut points, where the
///    register is back in its initial state; the operations before the latest cut that keeps
///    the rest not linearizable, with every result explained that was, are dropped (a binary
///    search over the cuts).
/// 4. The rest is shrunk keeping the culprit essential: a removal is kept only if
///    the rest is still not linearizable, is linearizable without the culprit, and leaves no
///    result unexplained that was explained. So the core is about the culprit, not about some
///    other conflict that removing operations created (two inserts that both found the key
///    absent, once the delete between them is gone).
///
/// Every judgement tries [`stale_witness`] before the search, so this stays cheap on keys too
/// hot for the search when the violation is a stale result.
fn explain(ops: &KeyOps, max_states: u64) -> Vec<usize> {
    let all: Vec<usize> = (0..ops.ops.len()).collect();
    let whole = Support::of(ops, &all);
    for &i in &all {
        if !whole.supports(ops.initial, &ops.ops[i]) && search(ops, &[i], max_states).0 == Verdict::NotLinearizable {
            return vec![i];
        }
    }
    let mut ranked: Vec<usize> = all.iter().copied().filter(|&i| !ops.ops[i].indeterminate).collect();
    ranked.sort_by_key(|&i| (ops.ops[i].respond, i));
    let (mut lo, mut hi) = (0, ranked.len()); // truncated at `lo` responses: linearizable
    let mut found = None;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let (variant, set) = truncate(ops, &ranked, mid);
        if judge(&variant, &set, max_states) == Verdict::NotLinearizable {
            hi = mid;
            found = Some((variant, set));
        } else {
            lo = mid;
        }
    }
    let (variant, set) = found.unwrap_or_else(|| truncate(ops, &ranked, hi));
    let culprit = ranked[hi - 1];
    let without: Vec<usize> = set.iter().copied().filter(|&i| i != culprit).collect();
    let (verdict, _, linearization) = search(&variant, &without, max_states);
    if verdict != Verdict::Linearizable {
        return shrink(&variant, set, None, max_states);
    }
    // Drop the longest prefix of that linearization after which the register is back in its
    // initial state and the rest is still not linearizable: the rest without the culprit stays
    // linearizable (the suffix, from the initial state), and long insert-delete chains that
    // explain one another go at once.
    let mut cuts = vec![0];
    let mut state = variant.initial;
    for (p, &i) in linearization.iter().enumerate() {
        state = variant.ops[i].effect.step(state).expect("a linearization steps");
        if state == variant.initial {
            cuts.push(p + 1);
        }
    }
    let after = |cut: usize| -> Vec<usize> {
        let mut dropped = vec![false; variant.ops.len()];
        for &i in &linearization[..cut] {
            dropped[i] = true;
        }
        set.iter().copied().filter(|&i| !dropped[i]).collect()
    };
    let (mut lo, mut hi) = (0, cuts.len()); // dropping up to cuts[lo] keeps it not linearizable
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let rest = after(cuts[mid]);
        if keeps_support(&variant, &set, &rest) && judge(&variant, &rest, max_states) == Verdict::NotLinearizable {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    shrink(&variant, after(cuts[lo]), Some(culprit), max_states)
}

/// The verdict on `subset`: a stale-result witness, else the search.
fn judge(ops: &KeyOps, subset: &[usize], max_states: u64) -> Verdict {
    match stale_witness(ops, subset) {
        Some(_) => Verdict::NotLinearizable,
        None => search(ops, subset, max_states).0,
    }
}

/// The key's history truncated at the `k`-th response (`ranked`: determinate operations by
/// response): the operations invoked by then, those that had not returned made indeterminate
/// (reads among them dropped). Returns the operations (same indices) and the subset to check.
fn truncate<'a>(ops: &KeyOps<'a>, ranked: &[usize], k: usize) -> (KeyOps<'a>, Vec<usize>) {
    let at = ops.ops[ranked[k - 1]].respond;
    let mut returned = vec![false; ops.ops.len()];
    for &i in &ranked[..k] {
        returned[i] = true;
    }
    let mut variant = KeyOps { ops: ops.ops.clone(), values: ops.values.clone(), initial: ops.initial };
    let mut set = Vec::new();
    for (i, op) in variant.ops.iter_mut().enumerate() {
        if op.invoke > at {
            continue;
        }
        if !returned[i] {
            op.respond = INFINITY;
            op.indeterminate = true;
            op.effect = match op.effect {
                Effect::Read(_) => continue,
                Effect::Insert { value, .. } => Effect::Insert { value, existed: None },
                Effect::Update { value, .. } => Effect::Update { value, existed: None },
                Effect::Delete { .. } => Effect::Delete { existed: None },
            };
        }
        set.push(i);
    }
    (variant, set)
}

/// Shrinks a non-linearizable `set` of a key's operations (delta debugging: chunks, then single
/// operations, until no removal is kept; see [`explain`] for when one is).
fn shrink(ops: &KeyOps, mut set: Vec<usize>, culprit: Option<usize>, max_states: u64) -> Vec<usize> {
    // Each trial gets a fraction of the bound: an inconclusive trial only keeps an operation.
    let max_states = (max_states / 16).max(10_000);
    let not_linearizable = |candidate: &[usize]| judge(ops, candidate, max_states) == Verdict::NotLinearizable;
    let mut chunk = (set.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut start = 0;
        while start < set.len() && set.len() > 1 {
            let end = (start + chunk).min(set.len());
            let candidate: Vec<usize> = set[..start].iter().chain(&set[end..]).copied().collect();
            let keep = culprit.is_none_or(|c| candidate.contains(&c))
                && keeps_support(ops, &set, &candidate)
                && not_linearizable(&candidate)
                && culprit.is_none_or(|c| {
                    let without: Vec<usize> = candidate.iter().copied().filter(|&i| i != c).collect();
                    judge(ops, &without, max_states) == Verdict::Linearizable
                });
            if keep {
                set = candidate;
                removed = true;
            } else {
                start = end;
            }
        }
        if !removed {
            if chunk == 1 {
                return set;
            }
            chunk = (chunk / 2).max(1);
        } else {
            chunk = chunk.min((set.len() / 2).max(1));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn describe_bound(b: &Bound<Vec<u8>>, lower: bool) -> String {
    match (b, lower) {
        (Bound::Included(k), true) => format!("[{}", hex(k)),
        (Bound::Excluded(k), true) => format!("({}", hex(k)),
        (Bound::Unbounded, true) => "(-inf".into(),
        (Bound::Included(k), false) => format!("{}]", hex(k)),
        (Bound::Excluded(k), false) => format!("{})", hex(k)),
        (Bound::Unbounded, false) => "+inf)".into(),
    }
}

/// One line for a record: `#index client C [invoke, respond] op -> result`, and for a scan's
/// observation of one key, what it implies for that key.
fn describe(index: usize, record: &Record, observed: Option<(&[u8], Option<&[u8]>)>) -> String {
    let respond = match record.respond {
        Some(r) => r.to_string(),
        None => "never".into(),
    };
    let op = match &record.op {
        Op::Search { key } => format!("search {}", hex(key)),
        Op::Insert { key, value } => format!("insert {} = {}", hex(key), hex(value)),
        Op::Update { key, value } => format!("update {} = {}", hex(key), hex(value)),
        Op::Delete { key } => format!("delete {}", hex(key)),
        Op::Scan { start, end, limit } => {
            format!("scan {}, {} limit {limit}", describe_bound(start, true), describe_bound(end, false))
        }
    };
    let result = match &record.outcome {
        _ if record.respond.is_none() => "no response (indeterminate)".into(),
        Outcome::Found(Some(v)) => format!("found {}", hex(v)),
        Outcome::Found(None) => "found none".into(),
        Outcome::Existed(e) => format!("existed={e}"),
        Outcome::Scanned(pairs) => {
            const SHOWN: usize = 8;
            let mut s: Vec<String> = pairs.iter().take(SHOWN).map(|(k, v)| format!("{}={}", hex(k), hex(v))).collect();
            if pairs.len() > SHOWN {
                s.push(format!("... {} more", pairs.len() - SHOWN));
            }
            format!("{} pairs [{}]", pairs.len(), s.join(", "))
        }
        Outcome::Failed(e) if effect_unknown(e) => format!("failed, effect unknown: {e}"),
        Outcome::Failed(e) => format!("failed: {e}"),
    };
    let mut line = format!("#{index} client {} [{}, {respond}] {op} -> {result}", record.client, record.invoke);
    if let Some((key, value)) = observed {
        match value {
            Some(v) => line.push_str(&format!(" (so {} = {} during the scan)", hex(key), hex(v))),
            None => line.push_str(&format!(" (so {} absent at some instant of the scan)", hex(key))),
        }
    }
    line
}

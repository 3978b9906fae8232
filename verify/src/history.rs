//! Histories of map operations: what the checkers judge.
//!
//! A history is the list of operations clients ran, each with the logical time it was invoked
//! and the logical time it returned. An operation that failed with an error whose effect is
//! unknown (a node down, retries exhausted) is *indeterminate*: it may or may not have taken
//! effect, at any time after its invocation.
//!
//! ## The timing rule
//!
//! - `a` precedes `b` (so `b` must see `a`'s effect) iff `a.respond < b.invoke`; equal times
//!   mean "order unknown" and the two are concurrent;
//! - **program order**: a client runs one operation at a time, so its operations must not
//!   overlap (`a.respond <= b.invoke` for its consecutive operations, or the history is
//!   malformed), and a client's operation that returned precedes its next one *even at equal
//!   times*; among a client's operations with equal times, the order of the records is the
//!   program order. Give each concurrent caller (thread, coroutine) its own client id. The
//!   checker imposes this exactly unless two clients each return and invoke at one instant on
//!   one key, which no order of the events can express; such instants stay concurrent and are
//!   counted (`CheckReport::ambiguous_program_order`).
//!
//! dmkit's own histories never need the tie rule: the simulator stamps every invocation and
//! response with [`SimClient::history_stamp`](dmkit_sim::SimClient::history_stamp), a counter
//! that orders all events of a run as they happened (one thread runs every task), so stamps are
//! distinct and a response stamped before an invocation really came first. (Stamping with the
//! simulator's step count, as dmkit did before, gave a client's response and its next invocation
//! the same time — they happen in one poll — and so let the checker reorder a client's own
//! operations.)
//!
//! ## JSON lines format
//!
//! One object per operation, in any order; keys and values are lowercase hex strings:
//!
//! ```text
//! {"client":3,"invoke":120,"respond":311,"op":"search","key":"6b01","result":{"found":"ff00"}}
//! {"client":3,"invoke":120,"respond":311,"op":"search","key":"6b01","result":{"found":null}}
//! {"client":1,"invoke":7,"respond":90,"op":"insert","key":"6b01","value":"ff00","result":{"existed":false}}
//! {"client":1,"invoke":7,"respond":90,"op":"update","key":"6b01","value":"ff00","result":{"existed":true}}
//! {"client":2,"invoke":9,"respond":95,"op":"delete","key":"6b01","result":{"existed":true}}
//! {"client":4,"invoke":5,"respond":80,"op":"scan","start":{"included":"6b00"},"end":"unbounded","limit":10,
//!  "result":{"pairs":[["6b01","ff00"]]}}
//! ```
//!
//! `start`/`end` are `"unbounded"`, `{"included": hex}` or `{"excluded": hex}`. A `respond` and
//! `result` of `null` mark an operation still in flight when the history ended (it never
//! returned: indeterminate, no result). A `failed` result carries the error's text, whether its
//! effect is unknown (see [`effect_unknown`]; if so the operation is indeterminate) and its kind
//! (`error`: `limit`, `full`, `unsupported`, `retries`, `verbs`); errors that certainly changed
//! nothing (a key too long, a full bucket, an unsupported scan) are determinate no-ops. A
//! `corrupt` result is the index reporting that it found its own structure broken: a violation,
//! whatever the rest of the history:
//!
//! ```text
//! {"client":6,"invoke":40,"respond":null,"op":"insert","key":"6b02","value":"ff01","result":null}
//! {"client":7,"invoke":41,"respond":77,"op":"search","key":"6b02","result":{"corrupt":"leaf 0x40 has a bad checksum"}}
//! {"client":5,"invoke":5,"respond":80,"op":"delete","key":"6b01","result":{"failed":"node 0 is down","effect_unknown":true,"error":"verbs"}}
//! ```

use dmkit_indexes::spec::{self, Op, Outcome};
use dmkit_indexes::{Index, IndexError, Limits};
use dmkit_rdma::VerbsError;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::ops::Bound;

/// The simulator's history clock for [`apply_recorded`]: `c`'s
/// [`history_stamp`](dmkit_sim::SimClient::history_stamp), which cannot fail.
pub fn simulated_clock(
    c: &dmkit_sim::SimClient,
) -> impl FnMut() -> std::future::Ready<Result<u64, std::convert::Infallible>> + '_ {
    || std::future::ready(Ok(c.history_stamp()))
}

/// Runs `op` on `handle` as `client`'s and records it in `history` as real time saw it: the
/// one way an operation enters a dmkit history, on every backend and in the checker's harness.
///
/// `stamp` is the history's clock ([`SimClient::history_stamp`](dmkit_sim::SimClient::history_stamp)
/// in the simulator, a cluster-wide FAA on hardware). The invocation is stamped and recorded,
/// unfinished, before the operation's first verb, so an operation whose client never returns
/// (a crash, a run that stops) stays in the history as indeterminate; the response is stamped
/// after its last completion and fills the record in. A client stamps its next invocation after
/// its previous response, so program order holds in the stamps. Records are in invocation order.
///
/// If the clock fails, `Err` says why: at the invocation nothing was run or recorded; at the
/// response the record keeps its outcome but no response time (indeterminate).
pub async fn apply_recorded<I, E, F, S>(
    handle: &mut I,
    op: &Op,
    client: u32,
    history: &RefCell<History>,
    mut stamp: S,
) -> Result<Outcome, E>
where
    I: Index,
    S: FnMut() -> F,
    F: std::future::Future<Output = Result<u64, E>>,
{
    let invoke = stamp().await?;
    let at = {
        let r = &mut history.borrow_mut().records;
        // The outcome is a placeholder until the response: an unfinished record has none.
        r.push(Record { client, op: op.clone(), outcome: Outcome::Existed(false), invoke, respond: None });
        r.len() - 1
    };
    let outcome = spec::apply(handle, op).await;
    let respond = stamp().await;
    let r = &mut history.borrow_mut().records[at];
    r.outcome = outcome.clone();
    r.respond = Some(respond?);
    Ok(outcome)
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub client: u32,
    pub op: Op,
    pub outcome: Outcome,
    /// Logical time of the invocation.
    pub invoke: u64,
    /// Logical time of the response; `None` if the operation never returned (its client crashed).
    pub respond: Option<u64>,
}

impl Record {
    /// A loaded item as the history's initial contents: an insert by no client (`u32::MAX`),
    /// completed at time 0, before every stamped event.
    pub fn preloaded(key: Vec<u8>, value: Vec<u8>) -> Record {
        Record {
            client: u32::MAX,
            op: Op::Insert { key, value },
            outcome: Outcome::Existed(false),
            invoke: 0,
            respond: Some(0),
        }
    }

    /// True if the operation may or may not have taken effect.
    pub fn indeterminate(&self) -> bool {
        self.respond.is_none() || matches!(&self.outcome, Outcome::Failed(e) if effect_unknown(e))
    }
}

/// Whether a failed operation may still have changed the map: an error of a limit, a full
/// structure or an unsupported operation changed nothing; retries given up, corruption and
/// transport errors may have left an effect.
pub fn effect_unknown(e: &IndexError) -> bool {
    matches!(error_kind(e), "retries" | "corrupt" | "verbs")
}

/// The error a parsed operation that never returned carries (it is indeterminate; no result).
const IN_FLIGHT: &str = "in flight when the history ended: no result";

/// The kind of an error, as the JSON lines format names it.
fn error_kind(e: &IndexError) -> &'static str {
    match e {
        IndexError::KeyTooShort { .. }
        | IndexError::KeyTooLong { .. }
        | IndexError::ValueTooLong { .. }
        | IndexError::ValueTooShort { .. }
        | IndexError::ReservedKey(_)
        | IndexError::ReservedValue(_) => "limit",
        IndexError::Full => "full",
        IndexError::Unsupported(_) => "unsupported",
        IndexError::RetriesExhausted { .. } => "retries",
        IndexError::Corrupt(_) => "corrupt",
        IndexError::Verbs(_) => "verbs",
    }
}

/// A history: operations in the order they were recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub records: Vec<Record>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("odd-length hex string '{s}'"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("bad hex string '{s}'")))
        .collect()
}

fn bound_json(b: &Bound<Vec<u8>>) -> Value {
    match b {
        Bound::Included(k) => json!({ "included": hex(k) }),
        Bound::Excluded(k) => json!({ "excluded": hex(k) }),
        Bound::Unbounded => json!("unbounded"),
    }
}

fn bound_from(v: &Value) -> Result<Bound<Vec<u8>>, String> {
    match v {
        Value::String(s) if s == "unbounded" => Ok(Bound::Unbounded),
        Value::Object(m) => match (m.get("included"), m.get("excluded")) {
            (Some(Value::String(k)), None) => Ok(Bound::Included(unhex(k)?)),
            (None, Some(Value::String(k))) => Ok(Bound::Excluded(unhex(k)?)),
            _ => Err(format!("bad bound {v}")),
        },
        _ => Err(format!("bad bound {v}")),
    }
}

impl Record {
    /// The record as one JSON object (a line of the export format).
    pub fn to_json(&self) -> Value {
        let mut o =
            json!({ "client": self.client, "invoke": self.invoke, "respond": self.respond, "op": self.op.name() });
        let m = o.as_object_mut().expect("an object");
        match &self.op {
            Op::Search { key } | Op::Delete { key } => {
                m.insert("key".into(), json!(hex(key)));
            }
            Op::Insert { key, value } | Op::Update { key, value } => {
                m.insert("key".into(), json!(hex(key)));
                m.insert("value".into(), json!(hex(value)));
            }
            Op::Scan { start, end, limit } => {
                m.insert("start".into(), bound_json(start));
                m.insert("end".into(), bound_json(end));
                m.insert("limit".into(), json!(limit));
            }
        }
        let result = match &self.outcome {
            Outcome::Found(v) => json!({ "found": v.as_ref().map(|v| hex(v)) }),
            Outcome::Existed(e) => json!({ "existed": e }),
            Outcome::Scanned(pairs) => {
                json!({ "pairs": pairs.iter().map(|(k, v)| json!([hex(k), hex(v)])).collect::<Vec<_>>() })
            }
            Outcome::Failed(IndexError::Corrupt(what)) => json!({ "corrupt": what }),
            Outcome::Failed(e) => {
                json!({ "failed": e.to_string(), "effect_unknown": effect_unknown(e), "error": error_kind(e) })
            }
        };
        // An operation that never returned has no result, only its invocation.
        let result = if self.respond.is_none() { Value::Null } else { result };
        m.insert("result".into(), result);
        o
    }

    /// Parses one line of the export format.
    pub fn from_json(v: &Value) -> Result<Record, String> {
        let field = |k: &str| v.get(k).ok_or_else(|| format!("missing field '{k}'"));
        let text = |k: &str| -> Result<String, String> {
            field(k)?.as_str().map(str::to_string).ok_or_else(|| format!("'{k}' must be a string"))
        };
        let key = || unhex(&text("key")?);
        let value = || unhex(&text("value")?);
        let op = match text("op")?.as_str() {
            "search" => Op::Search { key: key()? },
            "insert" => Op::Insert { key: key()?, value: value()? },
            "update" => Op::Update { key: key()?, value: value()? },
            "delete" => Op::Delete { key: key()? },
            "scan" => Op::Scan {
                start: bound_from(field("start")?)?,
                end: bound_from(field("end")?)?,
                limit: field("limit")?.as_u64().ok_or("'limit' must be a number")? as usize,
            },
            other => return Err(format!("unknown op '{other}'")),
        };
        let result = field("result")?;
        let respond = match field("respond")? {
            Value::Null => None,
            r => Some(r.as_u64().ok_or("'respond' must be a number or null")?),
        };
        let outcome = if result.is_null() {
            if respond.is_some() {
                return Err("a null result needs a null respond (an operation that never returned)".into());
            }
            Outcome::Failed(IndexError::Verbs(VerbsError::Protocol(IN_FLIGHT.into())))
        } else if let Some(what) = result.get("corrupt") {
            Outcome::Failed(IndexError::Corrupt(what.as_str().unwrap_or("corrupt").to_string()))
        } else if let Some(f) = result.get("found") {
            Outcome::Found(match f {
                Value::Null => None,
                Value::String(s) => Some(unhex(s)?),
                _ => return Err("'found' must be hex or null".into()),
            })
        } else if let Some(e) = result.get("existed") {
            Outcome::Existed(e.as_bool().ok_or("'existed' must be a boolean")?)
        } else if let Some(p) = result.get("pairs") {
            let pairs = p.as_array().ok_or("'pairs' must be an array")?;
            let mut out = Vec::with_capacity(pairs.len());
            for pair in pairs {
                match pair.as_array().map(Vec::as_slice) {
                    Some([Value::String(k), Value::String(v)]) => out.push((unhex(k)?, unhex(v)?)),
                    _ => return Err("a scan pair must be [key, value]".into()),
                }
            }
            Outcome::Scanned(out)
        } else if let Some(f) = result.get("failed") {
            let msg = f.as_str().unwrap_or("failed").to_string();
            let unknown = result.get("effect_unknown").and_then(Value::as_bool).unwrap_or(true);
            // The error itself is not rebuilt: its kind decides how it is judged.
            Outcome::Failed(match result.get("error").and_then(Value::as_str) {
                Some("unsupported") => IndexError::Unsupported("operation (as recorded)"),
                _ if unknown => IndexError::Verbs(VerbsError::Protocol(format!("as recorded: {msg}"))),
                _ => IndexError::Unsupported(crate::linearizability::RECORDED_NO_OP),
            })
        } else {
            return Err("unknown result".into());
        };
        Ok(Record {
            client: field("client")?.as_u64().ok_or("'client' must be a number")? as u32,
            op,
            outcome,
            invoke: field("invoke")?.as_u64().ok_or("'invoke' must be a number")?,
            respond,
        })
    }
}

impl History {
    /// The violation to report for the first operation that failed with a transport or protocol
    /// error (`IndexError::Verbs`), if any. In a run with no crashed node and no failed READ such
    /// an error has no cause but the index (a misread reply, a bad verb), and judged as an
    /// operation of unknown effect it would vanish from the history: the checkers report it as a
    /// violation of its own.
    pub fn unexplained_transport_error(&self) -> Option<String> {
        let r = self.records.iter().find(|r| matches!(r.outcome, Outcome::Failed(IndexError::Verbs(_))))?;
        Some(format!(
            "an operation failed with a transport error although no fault was injected: client {} {:?} -> {:?}",
            r.client, r.op, r.outcome
        ))
    }

    /// The violation to report for the first operation refused as a key or value of the wrong
    /// length although every key and value it carries is within `limits`, the index's own
    /// declared bounds. Such a refusal changed nothing, so the linearizability check accepts it:
    /// an index refusing every scan or write so would pass (a mutation survivor of HStore's scan
    /// bound check did).
    pub fn refused_valid_input(&self, limits: &Limits) -> Option<String> {
        let r = self.records.iter().find(|r| {
            let Outcome::Failed(e) = &r.outcome else { return false };
            let length_error = matches!(
                e,
                IndexError::KeyTooShort { .. }
                    | IndexError::KeyTooLong { .. }
                    | IndexError::ValueTooShort { .. }
                    | IndexError::ValueTooLong { .. }
            );
            let (keys, value): (Vec<&[u8]>, Option<&[u8]>) = match &r.op {
                Op::Search { key } | Op::Delete { key } => (vec![key], None),
                Op::Insert { key, value } | Op::Update { key, value } => (vec![key], Some(value)),
                Op::Scan { start, end, .. } => (
                    [start, end]
                        .into_iter()
                        .filter_map(|b| match b {
                            Bound::Included(k) | Bound::Excluded(k) => Some(k.as_slice()),
                            Bound::Unbounded => None,
                        })
                        .collect(),
                    None,
                ),
            };
            length_error
                && keys.iter().all(|k| limits.check_key(k).is_ok())
                && value.is_none_or(|v| limits.check_value(v).is_ok())
        })?;
        Some(format!(
            "an operation was refused for a length within the index's own limits ({limits:?}): client {} {:?} -> {:?}",
            r.client, r.op, r.outcome
        ))
    }

    /// A violation if some operation gave up after a retry bound of at least `bound` attempts
    /// ([`IndexError::RetriesExhausted`]): under a fair schedule with no fault injected, a
    /// bound that large is exhausted only by a livelock or a retry condition that never clears.
    pub fn unfair_give_up(&self, bound: u32) -> Option<String> {
        let r = self.records.iter().find(
            |r| matches!(&r.outcome, Outcome::Failed(IndexError::RetriesExhausted { retries, .. }) if *retries >= bound),
        )?;
        Some(format!(
            "an operation gave up under a fair (random) schedule with no fault injected (a livelock, or a retry condition that never clears): client {} {:?} -> {:?}",
            r.client, r.op, r.outcome
        ))
    }

    /// The history as JSON lines.
    pub fn to_json_lines(&self) -> String {
        let mut out = String::new();
        for r in &self.records {
            out.push_str(&r.to_json().to_string());
            out.push('\n');
        }
        out
    }

    /// Parses JSON lines; errors name the line.
    pub fn from_json_lines(text: &str) -> Result<History, String> {
        let mut records = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            records.push(Record::from_json(&v).map_err(|e| format!("line {}: {e}", i + 1))?);
        }
        Ok(History { records })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search of client `client` that failed with `e`.
    fn failed(client: u32, e: IndexError) -> Record {
        Record { client, op: Op::Search { key: vec![1] }, outcome: Outcome::Failed(e), invoke: 1, respond: Some(2) }
    }

    #[test]
    fn a_transport_error_is_found_and_other_failures_are_not() {
        let mut h = History {
            records: vec![
                failed(0, IndexError::Full),
                failed(1, IndexError::RetriesExhausted { op: "x", retries: 1 }),
                failed(2, IndexError::Corrupt("x".into())),
            ],
        };
        assert!(h.unexplained_transport_error().is_none(), "only transport errors count");
        h.records.push(failed(3, IndexError::Verbs(VerbsError::Protocol("bad reply".into()))));
        let message = h.unexplained_transport_error().expect("the Protocol error is found");
        assert!(message.contains("client 3 "), "{message}");
    }

    #[test]
    fn a_give_up_counts_only_at_a_large_bound() {
        let mut h = History {
            records: vec![
                failed(0, IndexError::Full),
                failed(1, IndexError::RetriesExhausted { op: "x", retries: 3 }),
                failed(2, IndexError::Verbs(VerbsError::Protocol("x".into()))),
            ],
        };
        assert!(h.unfair_give_up(100).is_none(), "a bound of 3 may run out; other failures are not give-ups");
        h.records.push(failed(3, IndexError::RetriesExhausted { op: "lock", retries: 2000 }));
        let message = h.unfair_give_up(100).expect("a bound of 2000 ran out");
        assert!(message.contains("client 3 ") && message.contains("fair"), "{message}");
        assert!(h.unfair_give_up(2001).is_none());
    }

    #[test]
    fn json_lines_round_trip() {
        let h = History {
            records: vec![
                Record {
                    client: 1,
                    op: Op::Insert { key: vec![1], value: vec![2] },
                    outcome: Outcome::Existed(false),
                    invoke: 1,
                    respond: Some(5),
                },
                Record {
                    client: 2,
                    op: Op::Search { key: vec![1] },
                    outcome: Outcome::Found(Some(vec![2])),
                    invoke: 3,
                    respond: Some(9),
                },
                Record {
                    client: 2,
                    op: Op::Search { key: vec![7] },
                    outcome: Outcome::Found(None),
                    invoke: 10,
                    respond: Some(12),
                },
                Record {
                    client: 3,
                    op: Op::Scan { start: Bound::Included(vec![0]), end: Bound::Excluded(vec![9]), limit: 4 },
                    outcome: Outcome::Scanned(vec![(vec![1], vec![2])]),
                    invoke: 2,
                    respond: Some(20),
                },
                Record {
                    client: 4,
                    op: Op::Delete { key: vec![1] },
                    outcome: Outcome::Existed(true),
                    invoke: 21,
                    respond: None,
                },
            ],
        };
        let parsed = History::from_json_lines(&h.to_json_lines()).unwrap();
        assert_eq!(parsed.records[..4], h.records[..4]);
        // An operation in flight keeps no result: it reads back as indeterminate, not as the
        // placeholder its recorder held.
        assert!(h.to_json_lines().lines().nth(4).unwrap().contains("\"result\":null"));
        assert_eq!((parsed.records[4].respond, parsed.records[4].op.clone()), (None, h.records[4].op.clone()));
        assert!(parsed.records[4].indeterminate());
        assert!(h.records[4].indeterminate());
        assert!(!h.records[0].indeterminate());
        let err = History::from_json_lines("{\"client\":1}\n{oops").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
    }

    #[test]
    fn errors_keep_their_kind_and_corruption_is_its_own_result() {
        let rec = |outcome: Outcome| Record {
            client: 1,
            op: Op::Search { key: vec![1] },
            outcome,
            invoke: 1,
            respond: Some(2),
        };
        let round = |r: &Record| Record::from_json(&r.to_json()).unwrap();
        let corrupt = round(&rec(Outcome::Failed(IndexError::Corrupt("bad leaf".into()))));
        assert_eq!(corrupt.outcome, Outcome::Failed(IndexError::Corrupt("bad leaf".into())));
        let v = crate::linearizability::check(&History { records: vec![corrupt] }, true).unwrap_err();
        assert_eq!(v.kind, crate::linearizability::ViolationKind::IndexReportedCorruption, "{v}");
        let down = round(&rec(Outcome::Failed(IndexError::Verbs(VerbsError::NodeDown(dmkit_rdma::NodeId(0))))));
        assert!(down.indeterminate() && !matches!(down.outcome, Outcome::Failed(IndexError::Corrupt(_))));
        let unsupported = round(&rec(Outcome::Failed(IndexError::Unsupported("scan"))));
        assert!(matches!(unsupported.outcome, Outcome::Failed(IndexError::Unsupported(w))
            if w != crate::linearizability::RECORDED_NO_OP));
        let full = round(&rec(Outcome::Failed(IndexError::Full)));
        assert!(!full.indeterminate());
        // A result with a response but no result is malformed input.
        let mut line = rec(Outcome::Found(None)).to_json();
        line["result"] = Value::Null;
        assert!(Record::from_json(&line).is_err());
    }

    #[test]
    fn a_length_refusal_is_judged_against_the_declared_limits() {
        let limits = Limits { min_key_bytes: 8, max_key_bytes: 8, min_value_bytes: 0, max_value_bytes: 16 };
        let refused = |op: Op, e: IndexError| History {
            records: vec![Record { client: 0, op, outcome: Outcome::Failed(e), invoke: 1, respond: Some(2) }],
        };
        let too_long = IndexError::KeyTooLong { len: 8, max: 7 };
        let valid_scan = Op::Scan { start: Bound::Included(vec![1; 8]), end: Bound::Unbounded, limit: 4 };
        assert!(refused(valid_scan, too_long.clone()).refused_valid_input(&limits).is_some());
        let long_bound = Op::Scan { start: Bound::Included(vec![1; 9]), end: Bound::Unbounded, limit: 4 };
        assert!(refused(long_bound, too_long.clone()).refused_valid_input(&limits).is_none());
        let value = IndexError::ValueTooLong { len: 17, max: 16 };
        let long_value = Op::Insert { key: vec![1; 8], value: vec![0; 17] };
        assert!(refused(long_value, value.clone()).refused_valid_input(&limits).is_none());
        let fine_value = Op::Update { key: vec![1; 8], value: vec![0; 16] };
        assert!(refused(fine_value, value).refused_valid_input(&limits).is_some());
        // Other refusals are the index's to make (a reserved key, a full table).
        assert!(refused(Op::Search { key: vec![1; 8] }, IndexError::Full).refused_valid_input(&limits).is_none());
    }
}

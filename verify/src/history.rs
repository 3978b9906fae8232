//! Histories of map operations: what the checkers judge.
//!
//! A history is the list of operations clients ran, each with the logical time it was invoked
//! and the logical time it returned (the simulator's step count: every step advances it, so an
//! operation that returned before another was invoked has a smaller `respond` than the other's
//! `invoke`). An operation that failed with an error whose effect is unknown (a node down, retries
//! exhausted) is *indeterminate*: it may or may not have taken effect, at any time after its
//! invocation.
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
//! {"client":5,"invoke":5,"respond":null,"op":"delete","key":"6b01","result":{"failed":"node 0 is down"}}
//! ```
//!
//! `start`/`end` are `"unbounded"`, `{"included": hex}` or `{"excluded": hex}`. A `respond` of
//! `null` marks an indeterminate operation; so does a `failed` result whose error may have left an
//! effect (see [`effect_unknown`]). Errors that certainly changed nothing (a key too long, a full
//! bucket, an unsupported scan) are determinate no-ops.

use dmkit_indexes::IndexError;
use dmkit_indexes::spec::{Op, Outcome};
use serde_json::{Value, json};
use std::ops::Bound;

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
    /// True if the operation may or may not have taken effect.
    pub fn indeterminate(&self) -> bool {
        self.respond.is_none() || matches!(&self.outcome, Outcome::Failed(e) if effect_unknown(e))
    }
}

/// Whether a failed operation may still have changed the map.
pub fn effect_unknown(e: &IndexError) -> bool {
    match e {
        IndexError::KeyTooShort { .. }
        | IndexError::KeyTooLong { .. }
        | IndexError::ValueTooLong { .. }
        | IndexError::ValueTooShort { .. }
        | IndexError::ReservedKey(_)
        | IndexError::ReservedValue(_)
        | IndexError::Full
        | IndexError::Unsupported(_) => false,
        IndexError::RetriesExhausted { .. } | IndexError::Corrupt(_) | IndexError::Verbs(_) => true,
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
            Outcome::Failed(e) => json!({ "failed": e.to_string(), "effect_unknown": effect_unknown(e) }),
        };
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
        let outcome = if let Some(f) = result.get("found") {
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
            // The error's kind is not kept; keep whether its effect is known.
            Outcome::Failed(if unknown { IndexError::Corrupt(msg) } else { IndexError::Unsupported("recorded no-op") })
        } else {
            return Err("unknown result".into());
        };
        Ok(Record {
            client: field("client")?.as_u64().ok_or("'client' must be a number")? as u32,
            op,
            outcome,
            invoke: field("invoke")?.as_u64().ok_or("'invoke' must be a number")?,
            respond: match field("respond")? {
                Value::Null => None,
                r => Some(r.as_u64().ok_or("'respond' must be a number or null")?),
            },
        })
    }
}

impl History {
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
        assert_eq!(History::from_json_lines(&h.to_json_lines()), Ok(h.clone()));
        assert!(h.records[4].indeterminate());
        assert!(!h.records[0].indeterminate());
        let err = History::from_json_lines("{\"client\":1}\n{oops").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
    }
}

//! The sequential specification every index implements, as an executable model.
//!
//! An index behaves like a map from byte-string keys to byte-string values:
//!
//! - `search(k)` returns the value of `k`, or `None`;
//! - `insert(k, v)` is an **upsert**: afterwards `k` maps to `v`; returns whether `k` existed;
//! - `update(k, v)` changes the value of an existing `k` and returns `true`, or returns `false`
//!   and changes nothing if `k` is absent;
//! - `delete(k)` removes `k` and returns whether it existed;
//! - `scan(start, end, limit)` returns up to `limit` pairs with keys in `[start, end)` (bounds as
//!   given), ascending by key.
//!
//! Concurrent operations are linearizable per key. Scans are not atomic in any seed index: the
//! checked property is per key — every pair a scan returns was that key's value at some instant
//! during the scan, and every key present in the range throughout the scan is returned (unless
//! `limit` pairs with smaller keys came first). Hash indexes return [`IndexError::Unsupported`]
//! for scans.

use crate::IndexError;
use std::collections::BTreeMap;
use std::ops::Bound;

/// One operation of the specification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Search { key: Vec<u8> },
    Insert { key: Vec<u8>, value: Vec<u8> },
    Update { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
    Scan { start: Bound<Vec<u8>>, end: Bound<Vec<u8>>, limit: usize },
}

impl Op {
    /// The operation's name: search, insert, update, delete, scan.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Search { .. } => "search",
            Op::Insert { .. } => "insert",
            Op::Update { .. } => "update",
            Op::Delete { .. } => "delete",
            Op::Scan { .. } => "scan",
        }
    }
}

/// What an operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `search`: the value found.
    Found(Option<Vec<u8>>),
    /// `insert`, `update`, `delete`: whether the key existed.
    Existed(bool),
    /// `scan`: the pairs returned.
    Scanned(Vec<(Vec<u8>, Vec<u8>)>),
    /// The operation failed (a limit, an unsupported scan, remote memory exhausted...).
    Failed(IndexError),
}

/// The model: a `BTreeMap`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecMap {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl SpecMap {
    pub fn new() -> SpecMap {
        SpecMap::default()
    }

    pub fn search(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map.get(key).cloned()
    }

    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> bool {
        self.map.insert(key.to_vec(), value.to_vec()).is_some()
    }

    pub fn update(&mut self, key: &[u8], value: &[u8]) -> bool {
        match self.map.get_mut(key) {
            Some(v) => {
                *v = value.to_vec();
                true
            }
            None => false,
        }
    }

    pub fn delete(&mut self, key: &[u8]) -> bool {
        self.map.remove(key).is_some()
    }

    pub fn scan(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) = (start, end) {
            if s > e || (s == e && (matches!(start, Bound::Excluded(_)) || matches!(end, Bound::Excluded(_)))) {
                return Vec::new();
            }
        }
        self.map.range::<[u8], _>((start, end)).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Applies `op` to the model. `scans_supported = false` models a hash index.
    pub fn apply(&mut self, op: &Op, scans_supported: bool) -> Outcome {
        match op {
            Op::Search { key } => Outcome::Found(self.search(key)),
            Op::Insert { key, value } => Outcome::Existed(self.insert(key, value)),
            Op::Update { key, value } => Outcome::Existed(self.update(key, value)),
            Op::Delete { key } => Outcome::Existed(self.delete(key)),
            Op::Scan { start, end, limit } if scans_supported => {
                Outcome::Scanned(self.scan(as_ref(start), as_ref(end), *limit))
            }
            Op::Scan { .. } => Outcome::Failed(IndexError::Unsupported("scan")),
        }
    }
}

/// `Bound<Vec<u8>>` as `Bound<&[u8]>`.
pub fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Runs one operation against any index.
pub async fn apply<I: crate::Index>(index: &mut I, op: &Op) -> Outcome {
    let result = match op {
        Op::Search { key } => index.search(key).await.map(Outcome::Found),
        Op::Insert { key, value } => index.insert(key, value).await.map(Outcome::Existed),
        Op::Update { key, value } => index.update(key, value).await.map(Outcome::Existed),
        Op::Delete { key } => index.delete(key).await.map(Outcome::Existed),
        Op::Scan { start, end, limit } => index.scan(as_ref(start), as_ref(end), *limit).await.map(Outcome::Scanned),
    };
    result.unwrap_or_else(Outcome::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upsert_update_delete_semantics() {
        let mut m = SpecMap::new();
        assert!(!m.update(b"a", b"1"), "update of an absent key changes nothing");
        assert_eq!(m.search(b"a"), None);
        assert!(!m.insert(b"a", b"1"));
        assert!(m.insert(b"a", b"2"), "insert is an upsert");
        assert_eq!(m.search(b"a"), Some(b"2".to_vec()));
        assert!(m.update(b"a", b"3"));
        assert!(m.delete(b"a"));
        assert!(!m.delete(b"a"));
        assert!(m.is_empty());
    }

    #[test]
    fn scan_is_ordered_bounded_and_limited() {
        let mut m = SpecMap::new();
        for k in [5u8, 1, 3, 9, 7] {
            m.insert(&[k], &[k * 10]);
        }
        let keys = |v: Vec<(Vec<u8>, Vec<u8>)>| v.into_iter().map(|(k, _)| k[0]).collect::<Vec<_>>();
        assert_eq!(keys(m.scan(Bound::Included(&[3]), Bound::Excluded(&[9]), 10)), vec![3, 5, 7]);
        assert_eq!(keys(m.scan(Bound::Excluded(&[3]), Bound::Unbounded, 2)), vec![5, 7]);
        assert_eq!(keys(m.scan(Bound::Included(&[9]), Bound::Excluded(&[3]), 10)), Vec::<u8>::new());
        assert_eq!(keys(m.scan(Bound::Included(&[3]), Bound::Excluded(&[3]), 10)), Vec::<u8>::new());
        assert_eq!(
            m.apply(&Op::Scan { start: Bound::Unbounded, end: Bound::Unbounded, limit: 1 }, false),
            Outcome::Failed(IndexError::Unsupported("scan"))
        );
    }
}

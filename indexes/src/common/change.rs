//! What a write does to its key, and how a batch of them (an RDWC window's combined writes, in
//! deposit order) folds into one final state. Shared by the indexes that combine writes.

use crate::IndexError;

/// What a write does to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Upsert(Vec<u8>),
    Update(Vec<u8>),
    Delete,
}

/// A delegated or combined operation's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Read(Result<Option<Vec<u8>>, IndexError>),
    Write(Result<bool, IndexError>),
}

/// Applies `changes` in order to `state` (the key's value, or `None` if absent). Returns the
/// final state and, per change, whether the key existed just before it (each operation's
/// result: upsert and update report "existed", delete reports "was deleted").
pub fn fold(mut state: Option<Vec<u8>>, changes: &[Change]) -> (Option<Vec<u8>>, Vec<bool>) {
    let mut results = Vec::with_capacity(changes.len());
    for c in changes {
        results.push(state.is_some());
        match c {
            Change::Upsert(v) => state = Some(v.clone()),
            Change::Update(v) if state.is_some() => state = Some(v.clone()),
            Change::Update(_) => {}
            Change::Delete => state = None,
        }
    }
    (state, results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_reports_existence_before_each_change() {
        let v = |b: u8| vec![b];
        let (s, r) = fold(None, &[Change::Update(v(1)), Change::Upsert(v(2)), Change::Delete, Change::Delete]);
        assert_eq!((s, r), (None, vec![false, false, true, false]));
        let (s, r) = fold(Some(v(0)), &[Change::Update(v(3))]);
        assert_eq!((s, r), (Some(v(3)), vec![true]));
    }
}

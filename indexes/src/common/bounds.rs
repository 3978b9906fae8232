//! A scan's bounds, checked one side at a time (scans that walk keys in order stop at the first
//! key past the end, and skip keys before the start).

use std::ops::Bound;

/// `key` is not before `start`.
pub fn above_start(key: &[u8], start: Bound<&[u8]>) -> bool {
    match start {
        Bound::Included(s) => key >= s,
        Bound::Excluded(s) => key > s,
        Bound::Unbounded => true,
    }
}

/// `key` is not past `end`.
pub fn below_end(key: &[u8], end: Bound<&[u8]>) -> bool {
    match end {
        Bound::Included(e) => key <= e,
        Bound::Excluded(e) => key < e,
        Bound::Unbounded => true,
    }
}

/// `key` lies within `[start, end]` (each side as its bound says).
pub fn in_bounds(key: &[u8], start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    above_start(key, start) && below_end(key, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_kind() {
        let k: &[u8] = &[5];
        assert!(above_start(k, Bound::Included(&[5])) && !above_start(k, Bound::Excluded(&[5])));
        assert!(below_end(k, Bound::Included(&[5])) && !below_end(k, Bound::Excluded(&[5])));
        assert!(in_bounds(k, Bound::Unbounded, Bound::Unbounded));
        assert!(!in_bounds(k, Bound::Included(&[6]), Bound::Unbounded));
    }
}

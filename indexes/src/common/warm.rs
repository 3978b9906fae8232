//! Warming a compute node's cache with the paths of given keys (`IndexKind::warm_keys`): the
//! keys are sorted bytewise, and a level-by-level walk carries, for each node, the run of them
//! that passes through it. These split a run among a node's children.

use dmkit_rdma::RemoteAddr;
use std::ops::Range;

/// The children of a B+tree internal node with the runs of `keys` below each: child `i` covers
/// `[pivot i, pivot i+1)`, `leftmost` what lies below the first pivot. Without keys (warming
/// the whole tree) every child, with an empty run; with keys only the children some key of
/// `below` reaches.
pub fn children_below<'p>(
    keys: Option<&[Vec<u8>]>,
    below: Range<usize>,
    leftmost: RemoteAddr,
    pivots: impl Iterator<Item = (&'p [u8], RemoteAddr)>,
) -> Vec<(RemoteAddr, Range<usize>)> {
    let Some(keys) = keys else {
        return std::iter::once(leftmost).chain(pivots.map(|(_, c)| c)).map(|c| (c, 0..0)).collect();
    };
    let run = &keys[below.clone()];
    let mut out = Vec::new();
    let (mut child, mut from) = (leftmost, 0);
    for (pivot, next) in pivots {
        let to = from + run[from..].partition_point(|k| k.as_slice() < pivot);
        if to > from {
            out.push((child, below.start + from..below.start + to));
        }
        (child, from) = (next, to);
    }
    if run.len() > from {
        out.push((child, below.start + from..below.end));
    }
    out
}

/// The part of `below` that `matches` (a radix node's compressed prefix), or `None` when no
/// key does: keys sharing every byte before the prefix, sorted, match in one contiguous run.
/// Without keys (warming the whole tree), `below` as it is.
pub fn matching_run(
    keys: Option<&[Vec<u8>]>,
    below: Range<usize>,
    matches: impl Fn(&[u8]) -> bool,
) -> Option<Range<usize>> {
    let Some(keys) = keys else { return Some(below) };
    let run = &keys[below.clone()];
    let first = run.iter().position(|k| matches(k))?;
    let len = run[first..].iter().take_while(|k| matches(k)).count();
    Some(below.start + first..below.start + first + len)
}

/// The part of `below` whose byte (`byte_of`, the one a radix node branches on, the same
/// position for all of them) is `b`, or `None` when no key's is. Without keys, `below` as it
/// is.
pub fn byte_run(
    keys: Option<&[Vec<u8>]>,
    below: Range<usize>,
    byte_of: impl Fn(&[u8]) -> u8,
    b: u8,
) -> Option<Range<usize>> {
    let Some(keys) = keys else { return Some(below) };
    let run = &keys[below.clone()];
    let lo = run.partition_point(|k| byte_of(k) < b);
    let hi = run.partition_point(|k| byte_of(k) <= b);
    (lo < hi).then(|| below.start + lo..below.start + hi)
}

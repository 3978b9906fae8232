//! Short byte strings kept inline: a decoded node's keys and values without an allocation
//! each.
//!
//! Decoding a Sherman leaf made two heap allocations per slot (its key and its value), and
//! freeing them again; with 8-32-byte keys and values that was a fifth of a bulk load
//! (`dmkit bench-load`, callgrind). [`SmallBytes`] keeps up to 30 bytes in place and longer
//! strings on the heap; it reads as a `[u8]` everywhere.

use std::fmt;
use std::ops::Deref;

/// Bytes kept inline.
const INLINE: usize = 30;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

/// A byte string, inline up to 30 bytes.
#[derive(Clone)]
pub struct SmallBytes(Repr);

impl SmallBytes {
    pub fn new() -> SmallBytes {
        SmallBytes(Repr::Inline { len: 0, bytes: [0; INLINE] })
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Heap(b) => b,
        }
    }
}

/// `a.cmp(b)`, with 8-byte keys (the common size) compared as one big-endian word rather than by
/// a `memcmp` call: a tree routes every operation through dozens of such comparisons.
#[inline]
pub fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (<&[u8; 8]>::try_from(a), <&[u8; 8]>::try_from(b)) {
        (Ok(a), Ok(b)) => u64::from_be_bytes(*a).cmp(&u64::from_be_bytes(*b)),
        _ => a.cmp(b),
    }
}

/// `a == b`, with 8-byte keys compared as one word (see [`key_cmp`]).
#[inline]
pub fn key_eq(a: &[u8], b: &[u8]) -> bool {
    match (<&[u8; 8]>::try_from(a), <&[u8; 8]>::try_from(b)) {
        (Ok(a), Ok(b)) => u64::from_ne_bytes(*a) == u64::from_ne_bytes(*b),
        _ => a == b,
    }
}

impl Default for SmallBytes {
    fn default() -> SmallBytes {
        SmallBytes::new()
    }
}

impl From<&[u8]> for SmallBytes {
    fn from(b: &[u8]) -> SmallBytes {
        if b.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            SmallBytes(Repr::Inline { len: b.len() as u8, bytes })
        } else {
            SmallBytes(Repr::Heap(b.into()))
        }
    }
}

impl From<Vec<u8>> for SmallBytes {
    fn from(v: Vec<u8>) -> SmallBytes {
        if v.len() <= INLINE { SmallBytes::from(v.as_slice()) } else { SmallBytes(Repr::Heap(v.into_boxed_slice())) }
    }
}

impl From<&Vec<u8>> for SmallBytes {
    fn from(v: &Vec<u8>) -> SmallBytes {
        SmallBytes::from(v.as_slice())
    }
}

impl Deref for SmallBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for SmallBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for SmallBytes {
    fn eq(&self, other: &SmallBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SmallBytes {}

impl PartialEq<[u8]> for SmallBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u8]> for SmallBytes {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl PartialEq<Vec<u8>> for SmallBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialOrd for SmallBytes {
    fn partial_cmp(&self, other: &SmallBytes) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallBytes {
    fn cmp(&self, other: &SmallBytes) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

/// Maps keyed by `SmallBytes` are looked up by `&[u8]` (the hash and order are the slice's).
impl std::borrow::Borrow<[u8]> for SmallBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::hash::Hash for SmallBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for SmallBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// The little-endian u64 at byte `at` of `b` (remote formats are little-endian).
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_the_bytes_it_was_made_of_inline_or_not() {
        for len in [0usize, 1, 8, 29, 30, 31, 64, 256] {
            let v: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            let a = SmallBytes::from(v.as_slice());
            let b = SmallBytes::from(v.clone());
            assert_eq!(&*a, v.as_slice());
            assert_eq!(a, b);
            assert!(a == v);
            assert_eq!(matches!(a.0, Repr::Inline { .. }), len <= INLINE, "len {len}");
        }
        let (x, y) = (SmallBytes::from(&[1u8, 2][..]), SmallBytes::from(&[1u8, 2, 0][..]));
        let words: [&[u8]; 7] =
            [&[], &[0; 8], &[0, 0, 0, 0, 0, 0, 0, 1], &[1, 0, 0, 0, 0, 0, 0, 0], &[0xFF; 8], &[0; 9], &[1]];
        for a in words {
            for b in words {
                assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(key_eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
        assert!(x < y, "ordered as byte strings, not by their padding");
        assert_ne!(x, y);
    }
}

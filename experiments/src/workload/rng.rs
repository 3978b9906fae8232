//! The run's randomness: ChaCha8 streams from the run's seed, one per purpose, phase and
//! client, and the small functions drawing from them.

use super::*;

/// The ChaCha8 generator for `(seed, purpose, phase)`, on stream `stream`.
pub(crate) fn chacha(seed: u64, purpose: u64, phase: u64, stream: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[0..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&purpose.to_le_bytes());
    key[16..24].copy_from_slice(&phase.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    rng.set_stream(stream);
    rng
}

pub(crate) const PURPOSE_STREAM: u64 = 1;
pub(crate) const PURPOSE_FILL: u64 = 2;
pub(crate) const PURPOSE_TRACE: u64 = 3;

/// A uniform `f64` in `[0, 1)` with 53 random bits.
pub(crate) fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An integer in `[0, n)`, `n > 0`.
pub(crate) fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// SplitMix64's finaliser: a bijection of `u64`.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

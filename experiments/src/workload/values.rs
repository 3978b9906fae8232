//! Values: a key's value at a version, and reading the version back (so a checker knows which
//! write a read saw).

use super::*;

/// The version of loaded values.
pub const LOAD_VERSION: u64 = 0;

/// The version of the `seq`-th operation of client `client` in phase `phase`: bits 56–62 hold
/// `phase + 1`, bits 36–55 the client, bits 0–35 the sequence number (so versions stay below
/// 2^63 and never equal [`LOAD_VERSION`]). Panics beyond 126 phases, 2^20 clients or 2^36
/// operations per client.
pub fn version_of(phase: u32, client: u32, seq: u64) -> u64 {
    assert!(phase < 126, "at most 126 phases");
    assert!(client < 1 << 20, "at most 2^20 clients");
    assert!(seq < 1 << 36, "at most 2^36 operations per client");
    ((phase as u64 + 1) << 56) | ((client as u64) << 36) | seq
}

pub(crate) fn key_mask(key_number: u64) -> u64 {
    mix64(key_number ^ 0x7a1e_0000_0000_0000) | 1 << 63
}

/// The value of `key_number` at `version` (< 2^63), `len` bytes: the big-endian word
/// `version XOR mask(key_number)` (top bit always set), then SplitMix64 output seeded by that word
/// and the key number (so beyond 8 bytes a value checks against its own key only).
pub fn value_for(key_number: u64, version: u64, len: usize) -> Vec<u8> {
    assert!(version < 1 << 63, "versions are below 2^63");
    let word = version ^ key_mask(key_number);
    let mut out = Vec::with_capacity(len.max(8));
    out.extend_from_slice(&word.to_be_bytes());
    let mut state = word ^ mix64(key_number ^ 0x0fa1_0000_0000_0000);
    while out.len() < len {
        state = state.wrapping_add(GOLDEN_GAMMA);
        out.extend_from_slice(&mix64(state).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The version a value of `key_number` was written at, if `value` is exactly
/// [`value_for`]`(key_number, version, value.len())` for some version; `None` for values shorter
/// than 8 bytes (they carry no check) or values no generator wrote.
pub fn value_version(key_number: u64, value: &[u8]) -> Option<u64> {
    let word = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let version = word ^ key_mask(key_number);
    if version >= 1 << 63 || value_for(key_number, version, value.len()) != value {
        return None;
    }
    Some(version)
}

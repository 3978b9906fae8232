//! Clover's byte formats: the version block (laid out in the module doc of [`super`]), its
//! encoding, decoding and checksum, and where the shortcut words start in the MS's memory.

use crate::common::checksum::crc64;

/// The first shortcut word in the MS's memory.
pub(super) const SHORTCUTS_OFFSET: u64 = 8192;
pub(super) const HEADER: usize = 16;
pub(super) const UNIT: u64 = 64;
const TOMBSTONE: u8 = 2;
const VALID: u8 = 1;

fn check(b: &[u8], k: usize, v: usize) -> u32 {
    crc64(&[&b[8..12], &b[HEADER..HEADER + k + v]]) as u32
}

pub(super) fn encode(key: &[u8], value: &[u8], tombstone: bool) -> Vec<u8> {
    let units = (HEADER + key.len() + value.len()).div_ceil(UNIT as usize);
    let mut b = vec![0u8; units * UNIT as usize];
    b[8] = key.len() as u8;
    b[9] = if tombstone { TOMBSTONE | VALID } else { VALID };
    b[10..12].copy_from_slice(&(value.len() as u16).to_le_bytes());
    b[HEADER..HEADER + key.len()].copy_from_slice(key);
    b[HEADER + key.len()..HEADER + key.len() + value.len()].copy_from_slice(value);
    let c = check(&b, key.len(), value.len());
    b[12..16].copy_from_slice(&c.to_le_bytes());
    b
}

/// A version as READ: its `next`, key, value (`None` for a tombstone).
pub(super) struct Version {
    pub(super) next: u64,
    pub(super) key: Vec<u8>,
    pub(super) value: Option<Vec<u8>>,
}

pub(super) fn decode(b: &[u8]) -> Option<Version> {
    if b.len() < HEADER || b[9] & VALID == 0 {
        return None;
    }
    let (k, v) = (b[8] as usize, u16::from_le_bytes([b[10], b[11]]) as usize);
    if HEADER + k + v > b.len() || u32::from_le_bytes(b[12..16].try_into().ok()?) != check(b, k, v) {
        return None;
    }
    Some(Version {
        next: u64::from_le_bytes(b[..8].try_into().ok()?),
        key: b[HEADER..HEADER + k].to_vec(),
        value: (b[9] & TOMBSTONE == 0).then(|| b[HEADER + k..HEADER + k + v].to_vec()),
    })
}

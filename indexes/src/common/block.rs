//! The KV block format that several indexes share: HStore's KV blocks (digest §2.2), the values
//! [`crate::indirect`] keeps out of line, and the block words of Clover's version pointers.
//!
//! - **Block address** as 48 bits: `[node:8 | offset/64:40]` ([`encode_addr`]); with its length
//!   in 64-byte units, a *block word* `[units:16 | address:48]` ([`encode_block_word`]).
//! - **KV block** in the memory pool: `[key_len u8][flags u8][val_len u16][check u32][ts u64]`,
//!   the key, the value, zero padding to a multiple of 64 bytes. `check` is the low 32 bits of
//!   SMART's CRC-64 over the header's first 4 bytes, `ts` and the key and value; `ts` is the
//!   writer's `[client:16 | sequence:48]`.

use crate::common::checksum::crc64;
use dmkit_rdma::{NodeId, RemoteAddr};

/// The unit of a block's length.
pub const UNIT: u64 = 64;
/// A block's header bytes.
pub const HEADER_BYTES: usize = 16;
/// The most units a slot names.
pub const MAX_UNITS: u64 = 255;
/// The largest key (its length is one byte).
pub const MAX_KEY_BYTES: usize = 255;
/// Block flag: written and complete.
pub const VALID: u8 = 1;

/// The 48 address bits of a slot or block word.
pub(crate) const ADDR_MASK: u64 = (1 << 48) - 1;
/// The offset bits (in units) of a block address.
pub(crate) const OFFSET_UNITS_MASK: u64 = (1 << 40) - 1;

/// A block address as the 48 bits slots and messages carry: `[node:8 | offset/64:40]`.
pub fn encode_addr(addr: RemoteAddr) -> u64 {
    (addr.node().0 as u64) << 40 | (addr.offset() / UNIT) & OFFSET_UNITS_MASK
}

pub fn decode_addr(bits: u64) -> RemoteAddr {
    RemoteAddr::host(NodeId(((bits >> 40) & 0xFF) as u16), (bits & OFFSET_UNITS_MASK) * UNIT)
}

/// A block and its units in one word, `[units:16 | address:48]`: Clover's version pointers and
/// the values of `indirect` (HStore's slots carry a fingerprint as well: [`crate::hstore::layout::Slot`]).
pub fn encode_block_word(block: RemoteAddr, units: u64) -> u64 {
    units << 48 | encode_addr(block)
}

/// The block and units of an [`encode_block_word`] word.
pub fn decode_block_word(word: u64) -> (RemoteAddr, u64) {
    (decode_addr(word & ADDR_MASK), word >> 48)
}

/// Units of a block holding `key` and `value`.
pub fn units_for(key_len: usize, value_len: usize) -> u64 {
    (HEADER_BYTES + key_len + value_len).div_ceil(UNIT as usize) as u64
}

/// The largest value that fits beside a key of `key_len` bytes.
pub fn max_value_bytes(key_len: usize) -> usize {
    (MAX_UNITS * UNIT) as usize - HEADER_BYTES - key_len
}

fn check_of(bytes: &[u8], key_len: usize, value_len: usize) -> u32 {
    crc64(&[&bytes[0..4], &bytes[8..HEADER_BYTES + key_len + value_len]]) as u32
}

/// A KV block's bytes (a multiple of 64).
pub fn encode_block(key: &[u8], value: &[u8], ts: u64) -> Vec<u8> {
    assert!(key.len() <= MAX_KEY_BYTES && value.len() <= u16::MAX as usize);
    let units = units_for(key.len(), value.len());
    assert!(units <= MAX_UNITS, "callers check sizes first");
    let mut b = vec![0u8; (units * UNIT) as usize];
    b[0] = key.len() as u8;
    b[1] = VALID;
    b[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    b[8..16].copy_from_slice(&ts.to_le_bytes());
    b[HEADER_BYTES..HEADER_BYTES + key.len()].copy_from_slice(key);
    b[HEADER_BYTES + key.len()..HEADER_BYTES + key.len() + value.len()].copy_from_slice(value);
    let check = check_of(&b, key.len(), value.len());
    b[4..8].copy_from_slice(&check.to_le_bytes());
    b
}

/// What a READ of a block found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// A complete block.
    Valid { key: Vec<u8>, value: Vec<u8>, ts: u64 },
    /// Not a block this long (zeros, a shorter block's tail, torn or reused bytes).
    Invalid,
}

/// Decodes a block READ of `bytes`; only a block whose check matches is valid.
pub fn decode_block(bytes: &[u8]) -> Block {
    if bytes.len() < HEADER_BYTES || bytes[1] & VALID == 0 {
        return Block::Invalid;
    }
    let (key_len, value_len) = (bytes[0] as usize, u16::from_le_bytes([bytes[2], bytes[3]]) as usize);
    if HEADER_BYTES + key_len + value_len > bytes.len() {
        return Block::Invalid;
    }
    let check = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if check != check_of(bytes, key_len, value_len) {
        return Block::Invalid;
    }
    Block::Valid {
        key: bytes[HEADER_BYTES..HEADER_BYTES + key_len].to_vec(),
        value: bytes[HEADER_BYTES + key_len..HEADER_BYTES + key_len + value_len].to_vec(),
        ts: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
    }
}

/// The key a READ of a block's first `16 + key_len` bytes shows (the HTS's verification READ):
/// `None` if the header is not a valid block's or the key is longer than what was read. The
/// check is not verified: a block reachable from a slot is complete (data before index).
pub fn header_key(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.len() < HEADER_BYTES || bytes[1] & VALID == 0 {
        return None;
    }
    bytes.get(HEADER_BYTES..HEADER_BYTES + bytes[0] as usize)
}

/// A block's `ts`: `[client:16 | sequence:48]`.
pub fn timestamp(client: u32, sequence: u64) -> u64 {
    (client as u64 & 0xFFFF) << 48 | sequence & ((1 << 48) - 1)
}

// The format's sizes, checked at compile time.
const _: () = assert!(MAX_UNITS * UNIT - (HEADER_BYTES as u64) <= u16::MAX as u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_detect_damage() {
        let key = b"user1234567890123456";
        let value = vec![7u8; 200];
        let b = encode_block(key, &value, timestamp(3, 99));
        assert_eq!(b.len() as u64, units_for(key.len(), value.len()) * UNIT);
        assert_eq!(b.len(), 256, "the paper's YCSB item (20 B key, 200 B value) is 4 units");
        assert_eq!(units_for(16, 32), 1, "the paper's db_bench item fits one unit");
        assert_eq!(decode_block(&b), Block::Valid { key: key.to_vec(), value: value.clone(), ts: timestamp(3, 99) });
        assert_eq!(header_key(&b[..HEADER_BYTES + key.len()]), Some(&key[..]));
        for at in [0, 2, 9, HEADER_BYTES, HEADER_BYTES + key.len() + 5] {
            let mut torn = b.clone();
            torn[at] ^= 0x10;
            assert_eq!(decode_block(&torn), Block::Invalid, "damage at byte {at}");
        }
        assert_eq!(decode_block(&vec![0; 256]), Block::Invalid);
        assert_eq!(decode_block(&b[..64]), Block::Invalid, "a READ shorter than the block");
    }
}

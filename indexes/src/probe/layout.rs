//! Byte-exact remote formats of the probing hash table.
//!
//! ```text
//! superblock (memory node 0, the SUPERBLOCK region of the reserved bytes):
//!   0  magic            u64  "DMKPROBE"
//!   8  slots            u64  slots in the table
//!  16  max_key_bytes    u64
//!  24  max_value_bytes  u64
//!  32  max_probe        u64  slots a probe sequence may span from its home
//!  40  memory_nodes     u64  groups are spread round-robin over this many nodes
//!  48  bases            u64 × memory_nodes: remote address of each node's groups
//!
//! group (64 bytes, one cache line): the words of 8 consecutive slots. Slot i is word i % 8 of
//! group i / 8; group g lives on node g % memory_nodes, at index g / memory_nodes.
//!
//! slot word (u64):
//!   0                         empty: never claimed
//!   bit 63                    tombstone: the key was deleted (the slot stays its key's)
//!   bits 55..63   fingerprint 8 bits of the key's hash, to skip other keys without a READ
//!   bits 48..55   lines       the block's length in 64-byte lines (1..=127)
//!   bits 0..48    offset      the block's offset on the slot's own memory node (never 0)
//!
//! block (lines × 64 bytes, 64-aligned, on the slot's node; written once, then only read):
//!   0  key_len          u16  1..=1024
//!   2  reserved         u16  zero
//!   4  value_len        u32  0..=4096
//!   8  key, then value
//! ```
//!
//! All integers are little-endian. A block is written in full before the CAS that publishes it
//! (the two go in one doorbell batch to the block's node: on one QP the CAS is placed after the
//! WRITE), and never written again, so no reader sees a torn block and blocks need no checksum.

use crate::common::superblock;
use crate::hash::hash64;
use dmkit_rdma::{Fixed, NodeId, RemoteAddr};

pub const MAGIC: u64 = u64::from_le_bytes(*b"DMKPROBE");
pub const MAX_MEMORY_NODES: usize = 64;
pub const SUPERBLOCK_HEADER_BYTES: usize = superblock::bytes(4, 0);
/// Slots per group: one 64-byte line of 8-byte words, read whole and atomically.
pub const GROUP_SLOTS: u64 = 8;
pub const GROUP_BYTES: u64 = GROUP_SLOTS * 8;
pub const BLOCK_HEADER_BYTES: usize = 8;
pub const LINE_BYTES: u64 = 64;
pub const MAX_KEY_BYTES: u32 = 1024;
pub const MAX_VALUE_BYTES: u32 = 4096;

const TOMBSTONE: u64 = 1 << 63;
const FP_SHIFT: u32 = 55;
const LINES_SHIFT: u32 = 48;
const OFFSET_MASK: u64 = (1 << LINES_SHIFT) - 1;
/// The most lines a slot word can name.
pub const MAX_LINES: u64 = (1 << (FP_SHIFT - LINES_SHIFT)) - 1;
const HASH_SEED: u64 = 0x7072_6f62_6521;

/// The superblock at its largest (every memory node's base), in the reserved bytes.
const SUPERBLOCK: Fixed = Fixed::new(4096, (SUPERBLOCK_HEADER_BYTES + 8 * MAX_MEMORY_NODES) as u64);
const _: () = assert!(SUPERBLOCK.bytes() <= 1024, "superblock fits in 1 KiB");
// The largest block the limits allow fits in the lines a word can name, and a word's fields
// do not overlap.
const _: () = assert!(
    (BLOCK_HEADER_BYTES as u64 + MAX_KEY_BYTES as u64 + MAX_VALUE_BYTES as u64).div_ceil(LINE_BYTES) <= MAX_LINES
);
const _: () = assert!(FP_SHIFT + 8 == 63 && LINES_SHIFT == RemoteAddr::OFFSET_LIMIT.trailing_zeros());

pub fn superblock_addr() -> RemoteAddr {
    SUPERBLOCK.on(NodeId(0))
}

pub fn superblock_bytes(memory_nodes: usize) -> usize {
    SUPERBLOCK_HEADER_BYTES + 8 * memory_nodes
}

/// The geometry every client derives from the superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub slots: u64,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    pub max_probe: u64,
    pub bases: Vec<RemoteAddr>,
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let header = [self.slots, self.max_key_bytes as u64, self.max_value_bytes as u64, self.max_probe];
        superblock::encode(MAGIC, &header, &self.bases)
    }

    /// Decodes the header and the bases; `Err` names what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, String> {
        let (h, bases) = superblock::decode(bytes, MAGIC, 4, MAX_MEMORY_NODES, "probing hash table")?;
        let sb = Superblock {
            slots: h[0],
            max_key_bytes: h[1] as u32,
            max_value_bytes: h[2] as u32,
            max_probe: h[3],
            bases,
        };
        if sb.slots == 0
            || sb.slots >= 1 << 48
            || sb.max_key_bytes == 0
            || sb.max_key_bytes > MAX_KEY_BYTES
            || sb.max_value_bytes > MAX_VALUE_BYTES
            || sb.max_probe == 0
        {
            return Err(format!(
                "superblock with {} slots, {}-byte keys and {}-byte values",
                sb.slots, sb.max_key_bytes, sb.max_value_bytes
            ));
        }
        Ok(sb)
    }

    pub fn groups(&self) -> u64 {
        self.slots.div_ceil(GROUP_SLOTS)
    }

    /// Groups stored on memory node `i` of `bases`.
    pub fn groups_on(&self, i: usize) -> u64 {
        let m = self.bases.len() as u64;
        self.groups() / m + u64::from((i as u64) < self.groups() % m)
    }

    /// The memory node of slot `slot` (and of the blocks its word points to).
    pub fn node_of(&self, slot: u64) -> NodeId {
        self.bases[((slot / GROUP_SLOTS) % self.bases.len() as u64) as usize].node()
    }

    /// Remote address of the group holding slot `slot`, and the slots it holds (8, or fewer in
    /// the last group).
    pub fn group_of(&self, slot: u64) -> (RemoteAddr, u64) {
        let g = slot / GROUP_SLOTS;
        let m = self.bases.len() as u64;
        let first = g * GROUP_SLOTS;
        (self.bases[(g % m) as usize].add((g / m) * GROUP_BYTES), (self.slots - first).min(GROUP_SLOTS))
    }

    /// Remote address of slot `slot`'s word.
    pub fn slot_addr(&self, slot: u64) -> RemoteAddr {
        self.group_of(slot).0.add(8 * (slot % GROUP_SLOTS))
    }

    /// Where `key`'s probe sequence starts, and its fingerprint.
    pub fn home(&self, key: &[u8]) -> (u64, u8) {
        let h = hash64(key, HASH_SEED);
        (h % self.slots, (h >> 56) as u8)
    }

    /// The slot `step` places after `home`, wrapping.
    pub fn probe(&self, home: u64, step: u64) -> u64 {
        (home + step) % self.slots
    }

    /// Slots a probe sequence visits: `max_probe`, or the whole table if that is smaller.
    pub fn probe_len(&self) -> u64 {
        self.slots.min(self.max_probe)
    }

    /// Steps from `home` to `slot` along the probe sequence.
    pub fn distance(&self, home: u64, slot: u64) -> u64 {
        (slot + self.slots - home) % self.slots
    }

    /// Lines of the largest block the limits allow.
    pub fn max_block_lines(&self) -> u64 {
        block_lines(self.max_key_bytes as usize, self.max_value_bytes as usize)
    }
}

/// The slot words of a group as READ.
pub fn words(group: &[u8]) -> impl Iterator<Item = u64> + '_ {
    group.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}

/// A decoded slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    Empty,
    Claimed { tombstone: bool, fingerprint: u8, lines: u64, offset: u64 },
}

impl Word {
    pub fn decode(w: u64) -> Word {
        if w == 0 {
            return Word::Empty;
        }
        Word::Claimed {
            tombstone: w & TOMBSTONE != 0,
            fingerprint: (w >> FP_SHIFT) as u8,
            lines: (w >> LINES_SHIFT) & MAX_LINES,
            offset: w & OFFSET_MASK,
        }
    }
}

/// The word that publishes a block of `lines` lines at `offset` for a key with `fingerprint`.
pub fn live_word(fingerprint: u8, lines: u64, offset: u64) -> u64 {
    assert!((1..=MAX_LINES).contains(&lines) && offset != 0 && offset <= OFFSET_MASK && offset % LINE_BYTES == 0);
    (u64::from(fingerprint) << FP_SHIFT) | (lines << LINES_SHIFT) | offset
}

/// `word` with its key deleted: the same block (which still names the key), marked.
pub fn tombstone_of(word: u64) -> u64 {
    assert_ne!(word, 0, "only a claimed slot is deleted");
    word | TOMBSTONE
}

pub fn is_tombstone(word: u64) -> bool {
    word & TOMBSTONE != 0
}

pub fn fingerprint(word: u64) -> u8 {
    (word >> FP_SHIFT) as u8
}

/// Where `word`'s block is, given its slot's node: address and bytes.
pub fn block_of(node: NodeId, word: u64) -> (RemoteAddr, usize) {
    let Word::Claimed { lines, offset, .. } = Word::decode(word) else { panic!("an empty slot has no block") };
    (RemoteAddr::host(node, offset), (lines * LINE_BYTES) as usize)
}

/// Lines a block of this key and value takes.
pub fn block_lines(key_len: usize, value_len: usize) -> u64 {
    ((BLOCK_HEADER_BYTES + key_len + value_len) as u64).div_ceil(LINE_BYTES)
}

/// A block's bytes: header, key, value, zero to the end of its last line.
pub fn encode_block(key: &[u8], value: &[u8]) -> Vec<u8> {
    assert!(!key.is_empty() && key.len() <= MAX_KEY_BYTES as usize && value.len() <= MAX_VALUE_BYTES as usize);
    let mut out = vec![0u8; (block_lines(key.len(), value.len()) * LINE_BYTES) as usize];
    out[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    out[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out[8..8 + key.len()].copy_from_slice(key);
    out[8 + key.len()..8 + key.len() + value.len()].copy_from_slice(value);
    out
}

/// A block's key and value; `Err` if its lengths do not fit in `bytes` (corruption: a
/// published block is always whole).
pub fn decode_block(bytes: &[u8]) -> Result<(&[u8], &[u8]), String> {
    if bytes.len() < BLOCK_HEADER_BYTES {
        return Err(format!("a block of {} bytes", bytes.len()));
    }
    let key_len = u16::from_le_bytes([bytes[0], bytes[1]]) as usize;
    let value_len = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    if key_len == 0 || BLOCK_HEADER_BYTES + key_len + value_len > bytes.len() {
        return Err(format!(
            "a block of {} bytes names a {key_len}-byte key and a {value_len}-byte value",
            bytes.len()
        ));
    }
    Ok((&bytes[8..8 + key_len], &bytes[8 + key_len..8 + key_len + value_len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(nodes: u16, slots: u64) -> Superblock {
        Superblock {
            slots,
            max_key_bytes: 16,
            max_value_bytes: 100,
            max_probe: 128,
            bases: (0..nodes).map(|n| RemoteAddr::host(NodeId(n), 1 << 20)).collect(),
        }
    }

    #[test]
    fn superblock_round_trips_and_places_groups_round_robin() {
        let s = sb(3, 20);
        assert_eq!(Superblock::decode(&s.encode()), Ok(s.clone()));
        assert!(Superblock::decode(&[0; 64]).unwrap_err().contains("magic"));
        assert_eq!(s.groups(), 3);
        assert_eq!((0..3).map(|i| s.groups_on(i)).sum::<u64>(), 3);
        // Slot 17 is word 1 of group 2: node 2, the first group there; the last group holds 4.
        assert_eq!(s.group_of(17), (RemoteAddr::host(NodeId(2), 1 << 20), 4));
        assert_eq!(s.node_of(9), NodeId(1));
        assert_eq!(s.probe(19, 2), 1);
        assert_eq!(s.distance(19, 1), 2);
    }

    #[test]
    fn words_and_blocks_round_trip() {
        let w = live_word(0xAB, 3, 64 * 1000);
        assert_eq!(Word::decode(w), Word::Claimed { tombstone: false, fingerprint: 0xAB, lines: 3, offset: 64_000 });
        let t = tombstone_of(w);
        assert!(is_tombstone(t) && !is_tombstone(w));
        assert_eq!(fingerprint(t), 0xAB);
        assert_eq!(block_of(NodeId(2), t), (RemoteAddr::host(NodeId(2), 64_000), 192));
        assert_eq!(Word::decode(0), Word::Empty);
        let block = encode_block(b"key", &[7; 100]);
        assert_eq!(block.len(), 128);
        assert_eq!(decode_block(&block), Ok((&b"key"[..], &[7u8; 100][..])));
        assert!(decode_block(&block[..64]).is_err(), "a block cut short is refused");
        assert!(decode_block(&[0; 64]).is_err(), "a zero block is not a block");
    }
}

//! The probing table's invariant walk, run with no operation in flight.

use super::ProbeOptions;
use super::layout::{self, GROUP_SLOTS, LINE_BYTES, Superblock, Word};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, RemoteAddr};
use std::collections::BTreeMap;

/// Checks, for every claimed slot: its word points to a whole block on the slot's node, of the
/// length the word names; the block's key has the word's fingerprint and fits the limits; no
/// slot between the key's home and its slot is empty (else a search would stop there and miss
/// it); and no key has two slots.
pub(super) fn walk(o: &ProbeOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let raw = memory
        .read_memory(layout::superblock_addr(), layout::superblock_bytes(o.memory_nodes as usize))
        .map_err(|e| e.to_string())?;
    let sb = Superblock::decode(&raw)?;
    let mut words = Vec::with_capacity(sb.slots as usize);
    for g in 0..sb.groups() {
        let (addr, n) = sb.group_of(g * GROUP_SLOTS);
        let bytes = memory.read_memory(addr, 8 * n as usize).map_err(|e| e.to_string())?;
        words.extend(bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))));
    }
    let mut report = InvariantReport::default();
    let mut owners: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut block_bytes = 0;
    for (slot, &word) in (0u64..).zip(&words) {
        let Word::Claimed { tombstone, fingerprint, lines, offset } = Word::decode(word) else { continue };
        let at = |what: String| format!("slot {slot} (word {word:#x}): {what}");
        if lines == 0 || lines > sb.max_block_lines() || offset == 0 {
            return Err(at(format!("a block of {lines} lines at offset {offset}")));
        }
        let bytes = memory
            .read_memory(RemoteAddr::host(sb.node_of(slot), offset), (lines * LINE_BYTES) as usize)
            .map_err(|e| at(e.to_string()))?;
        let (key, value) = layout::decode_block(&bytes).map_err(at)?;
        if key.len() > sb.max_key_bytes as usize || value.len() > sb.max_value_bytes as usize {
            return Err(at(format!("a {}-byte key and a {}-byte value exceed the limits", key.len(), value.len())));
        }
        if layout::block_lines(key.len(), value.len()) != lines {
            return Err(at(format!(
                "the word names {lines} lines for a block of {}",
                layout::block_lines(key.len(), value.len())
            )));
        }
        let (home, fp) = sb.home(key);
        if fp != fingerprint {
            return Err(at(format!("fingerprint {fingerprint:#x}, but key {key:02x?} has {fp:#x}")));
        }
        if let Some(gap) = (0..sb.distance(home, slot)).map(|d| sb.probe(home, d)).find(|&s| words[s as usize] == 0) {
            return Err(at(format!("key {key:02x?} (home {home}) is past the empty slot {gap}: a search stops there")));
        }
        if let Some(other) = owners.insert(key.to_vec(), slot) {
            return Err(at(format!("key {key:02x?} also has slot {other}")));
        }
        block_bytes += lines * LINE_BYTES;
        if tombstone {
            *report.structures.entry("tombstones").or_default() += 1;
        } else {
            report.items += 1;
        }
    }
    report.structures.insert("slots", sb.slots);
    report.remote_bytes = sb.groups() * layout::GROUP_BYTES + raw.len() as u64 + block_bytes;
    report.capacity_items = Some(sb.slots);
    Ok(report)
}

//! The probing table's invariant walk, run with no operation in flight.

use super::ProbeOptions;
use super::layout::{self, GROUP_SLOTS, LINE_BYTES, Superblock, Word};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, NodeId, RemoteAddr};
use std::collections::BTreeMap;

/// Checks the superblock against the options, then, for every claimed slot: its word points to a
/// whole, line-aligned block on the slot's node, of the length the word names, overlapping no
/// other block, group or the superblock; the block's key has the word's fingerprint and fits the
/// limits; no slot between the key's home and its slot is empty (else a search would stop there
/// and miss it); and no key has two slots.
pub(super) fn walk(o: &ProbeOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let raw = memory
        .read_memory(layout::superblock_addr(), layout::superblock_bytes(o.memory_nodes as usize))
        .map_err(|e| e.to_string())?;
    let sb = Superblock::decode(&raw)?;
    if (sb.slots, sb.max_key_bytes, sb.max_value_bytes, sb.max_probe, sb.bases.len())
        != (o.slots, o.max_key_bytes, o.max_value_bytes, o.max_probe, o.memory_nodes as usize)
    {
        return Err(format!("the superblock ({sb:?}) is not the options' table ({o:?})"));
    }
    // Every range of remote memory the table holds, per node: (start, end, what).
    let mut ranges: BTreeMap<NodeId, Vec<(u64, u64, String)>> = BTreeMap::new();
    let sb_addr = layout::superblock_addr();
    let sb_end = sb_addr.offset() + raw.len() as u64;
    ranges.entry(sb_addr.node()).or_default().push((sb_addr.offset(), sb_end, "the superblock".into()));
    for (i, base) in sb.bases.iter().enumerate() {
        let end = base.offset() + sb.groups_on(i) * layout::GROUP_BYTES;
        ranges.entry(base.node()).or_default().push((base.offset(), end, format!("node {i}'s groups")));
    }
    let mut words = Vec::with_capacity(sb.slots as usize);
    for g in 0..sb.groups() {
        let (addr, n) = sb.group_of(g * GROUP_SLOTS);
        let bytes = memory.read_memory(addr, 8 * n as usize).map_err(|e| e.to_string())?;
        words.extend(layout::words(&bytes));
    }
    let mut report = InvariantReport::default();
    let mut owners: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut block_bytes = 0;
    for (slot, &word) in (0u64..).zip(&words) {
        let Word::Claimed { tombstone, fingerprint, lines, offset } = Word::decode(word) else { continue };
        let at = |what: String| format!("slot {slot} (word {word:#x}): {what}");
        if lines == 0 || lines > sb.max_block_lines() || offset == 0 || offset % LINE_BYTES != 0 {
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
        if sb.distance(home, slot) >= sb.probe_len() {
            return Err(at(format!(
                "key {key:02x?} (home {home}) lies beyond the {} slots a search probes",
                sb.probe_len()
            )));
        }
        if let Some(gap) = (0..sb.distance(home, slot)).map(|d| sb.probe(home, d)).find(|&s| words[s as usize] == 0) {
            return Err(at(format!("key {key:02x?} (home {home}) is past the empty slot {gap}: a search stops there")));
        }
        if let Some(other) = owners.insert(key.to_vec(), slot) {
            return Err(at(format!("key {key:02x?} also has slot {other}")));
        }
        block_bytes += lines * LINE_BYTES;
        let node = sb.node_of(slot);
        ranges.entry(node).or_default().push((offset, offset + lines * LINE_BYTES, format!("slot {slot}'s block")));
        if tombstone {
            *report.structures.entry("tombstones").or_default() += 1;
        } else {
            report.items += 1;
        }
    }
    for (node, list) in ranges {
        if let Some(overlap) = first_overlap(list) {
            return Err(format!("on node {}: {overlap}", node.0));
        }
    }
    report.structures.insert("slots", sb.slots);
    report.remote_bytes = sb.groups() * layout::GROUP_BYTES + raw.len() as u64 + block_bytes;
    report.capacity_items = Some(sb.slots);
    Ok(report)
}

/// The first two of `ranges` (start, end, what) that share a byte, in words.
fn first_overlap(mut ranges: Vec<(u64, u64, String)>) -> Option<String> {
    ranges.sort();
    ranges.windows(2).find(|w| w[1].0 < w[0].1).map(|w| {
        format!("{} [{:#x}, {:#x}) overlaps {} [{:#x}, {:#x})", w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1)
    })
}

#[cfg(test)]
mod tests {
    use super::first_overlap;

    #[test]
    fn ranges_that_share_a_byte_are_reported_and_touching_ones_are_not() {
        let r = |s: u64, e: u64, w: &str| (s, e, w.to_string());
        assert_eq!(first_overlap(vec![r(128, 192, "b"), r(0, 64, "a"), r(64, 128, "c")]), None);
        let found = first_overlap(vec![r(128, 256, "b"), r(0, 64, "a"), r(192, 256, "c")]).unwrap();
        assert_eq!(found, "b [0x80, 0x100) overlaps c [0xc0, 0x100)");
        assert!(first_overlap(vec![r(0, 64, "a"), r(0, 64, "a again")]).is_some(), "two slots on one block");
    }
}

//! Dolphin's invariant walk (digest §4.2) and cache warm-up, outside time.
//!
//! With no operation in flight: every node's reverse pointer names the entry that points to it
//! (I6); headers are consistent with their path (prefix bytes, branch positions, special nodes
//! at position 7, types within 1..=7 and no entry behind the type's capacity); a node's entries
//! have distinct bytes; under a special node the leaves partition its prefix exactly — an entry
//! with byte 0, each leaf's `min[7]` equal to its entry's byte, consecutive leaves meeting
//! (I1, I2); every leaf is unlocked (I7), its lines of one version, its live keys within its
//! range, each key once, no key without its value and no EMPTY key with a value left behind.

use super::layout::*;
use super::{DolphinNode, DolphinOptions, root_addr};
use crate::InvariantReport;
use crate::common::warm::{byte_run, matching_run};
use dmkit_rdma::{MemoryView, RemoteAddr};
use std::collections::BTreeSet;

fn read(memory: &dyn MemoryView, at: RemoteAddr, len: usize) -> Result<Vec<u8>, String> {
    memory.read_memory(at, len).map_err(|e| e.to_string())
}

fn read_node(memory: &dyn MemoryView, p: Entry) -> Result<NodeImage, String> {
    let head = NodeImage::decode(&read(memory, p.addr(), 16)?);
    let t = head.header.node_type();
    if !(1..=MAX_TYPE).contains(&t) {
        return Err(format!("node {} has type {t}", p.addr()));
    }
    Ok(NodeImage::decode(&read(memory, p.addr(), node_read_bytes(t))?))
}

/// Walks the tree and checks I1–I7 and I9.
pub fn check(o: &DolphinOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let layout = o.layout();
    let special_type = o.special_type();
    let mut report = InvariantReport::default();
    let root = Entry(u64::from_le_bytes(read(memory, root_addr(), 8)?.try_into().expect("8 bytes")));
    if root.is_null() {
        return Ok(report);
    }
    // (entry slot, entry, key position the child starts at, key bytes before it)
    let mut stack = vec![(root_addr(), root, 0usize, 0u64)];
    let mut all_keys = BTreeSet::new();
    while let Some((slot, p, pos, known)) = stack.pop() {
        let at = p.addr();
        if p.is_leaf() {
            return Err(format!("entry {slot} points to leaf {at} outside a special node"));
        }
        let img = read_node(memory, p)?;
        let h = img.header;
        if img.rev != slot.raw() {
            return Err(format!("node {at}: reverse pointer {:#x}, reached from entry {slot}", img.rev));
        }
        if h.first_pos() != pos || h.branch_pos() > SPECIAL_POS {
            return Err(format!(
                "node {at}: header covers positions {}..{} but its path reaches it at {pos}",
                h.first_pos(),
                h.branch_pos()
            ));
        }
        let mut prefix = known;
        for x in pos..h.branch_pos() {
            prefix |= u64::from(h.byte_at(x)) << (56 - 8 * x);
        }
        let b = h.branch_pos();
        if p.node_type() > h.node_type() {
            return Err(format!("node {at}: entry says type {} but the header {}", p.node_type(), h.node_type()));
        }
        if h.node_type() < MAX_TYPE && !h.is_special() {
            let behind = read(memory, at.add(node_read_bytes(h.node_type()) as u64), 8)?;
            if behind.iter().any(|&x| x != 0) {
                return Err(format!("node {at}: an entry behind its type's capacity with no change in flight"));
            }
        }
        let live: Vec<(usize, Entry)> = img.live().iter().copied().enumerate().filter(|(_, e)| !e.is_null()).collect();
        let bytes: BTreeSet<u8> = live.iter().map(|(_, e)| e.partial()).collect();
        if bytes.len() != live.len() {
            return Err(format!("node {at}: two entries carry one byte"));
        }
        if !h.is_special() {
            *report.structures.entry("internal").or_default() += 1;
            report.remote_bytes += REGULAR_BYTES;
            for (i, e) in live {
                if e.is_leaf() {
                    return Err(format!("node {at}: a leaf under a regular node"));
                }
                let kp = prefix | u64::from(e.partial()) << (56 - 8 * b);
                stack.push((entry_addr(at, i), e, b + 1, kp));
            }
            continue;
        }
        // A special node: its leaves partition the 7-byte prefix.
        *report.structures.entry("special").or_default() += 1;
        report.remote_bytes += node_read_bytes(special_type) as u64;
        if h.node_type() != special_type {
            return Err(format!("special node {at} has type {}, not {special_type}", h.node_type()));
        }
        let mut leaves = live;
        leaves.sort_by_key(|(_, e)| e.partial());
        if leaves.first().map(|(_, e)| e.partial()) != Some(0) {
            return Err(format!("special node {at} has no entry for byte 0"));
        }
        let mut expect_min = prefix;
        for (i, e) in leaves {
            if !e.is_leaf() {
                return Err(format!("special node {at}: entry {i} is not a leaf"));
            }
            let la = e.addr();
            let leaf = LeafImage::decode(&layout, &read(memory, la, layout.bytes())?);
            *report.structures.entry("leaf").or_default() += 1;
            report.remote_bytes += layout.bytes() as u64;
            let name = format!("leaf {la} (prefix {prefix:#018x})");
            if leaf.rev != entry_addr(at, i).raw() {
                return Err(format!("{name}: reverse pointer {:#x}, reached from {}", leaf.rev, entry_addr(at, i)));
            }
            if leaf.min != expect_min || kbyte(leaf.min, SPECIAL_POS) != e.partial() {
                return Err(format!(
                    "{name}: min {:#x}, expected {expect_min:#x} for entry byte {}",
                    leaf.min,
                    e.partial()
                ));
            }
            if leaf.lock != 0 {
                return Err(format!("{name}: Spear word {} with no operation in flight", leaf.lock));
            }
            if !leaf.consistent(&layout) {
                return Err(format!("{name}: lines of different versions {:?}", leaf.versions));
            }
            for s in 0..layout.slots {
                let (k, v) = (leaf.keys[s], leaf.values[s]);
                if k == EMPTY && v != VALUE_NULL {
                    return Err(format!("{name}: slot {s} is EMPTY but holds a value"));
                }
                if k == EMPTY || k == TOMBSTONE {
                    continue;
                }
                if v == VALUE_NULL {
                    return Err(format!("{name}: key {k:#x} without its value"));
                }
                if !leaf.covers(k) {
                    return Err(format!("{name}: key {k:#x} outside [{:#x}, {:#x})", leaf.min, leaf.max));
                }
                if !all_keys.insert(k) {
                    return Err(format!("{name}: key {k:#x} appears twice"));
                }
                report.items += 1;
            }
            expect_min = leaf.max;
        }
        if expect_min != prefix_end(prefix) {
            return Err(format!("special node {at}: its leaves end at {expect_min:#x}, not at the prefix's end"));
        }
    }
    Ok(report)
}

/// Caches internal nodes top-down, breadth first, while they fit the budget.
pub fn warm(o: &DolphinOptions, node: &DolphinNode, memory: &dyn MemoryView) -> Result<(), String> {
    warm_paths(o, node, memory, None)
}

/// [`warm`] restricted to the internal nodes a search for one of `keys` (sorted bytewise)
/// passes (`IndexKind::warm_keys`).
pub fn warm_keys(
    o: &DolphinOptions,
    node: &DolphinNode,
    memory: &dyn MemoryView,
    keys: &[Vec<u8>],
) -> Result<(), String> {
    warm_paths(o, node, memory, Some(keys))
}

fn warm_paths(
    o: &DolphinOptions,
    node: &DolphinNode,
    memory: &dyn MemoryView,
    keys: Option<&[Vec<u8>]>,
) -> Result<(), String> {
    let root = Entry(u64::from_le_bytes(read(memory, root_addr(), 8)?.try_into().expect("8 bytes")));
    if root.is_null() {
        return Ok(());
    }
    let byte = |key: &[u8], x: usize| key.get(x).copied().unwrap_or(0);
    let mut level = vec![(root, 0u64, 0..keys.map_or(0, <[_]>::len))];
    while !level.is_empty() {
        let mut next = Vec::new();
        for (p, known, below) in level {
            if p.is_leaf() {
                continue;
            }
            let img = read_node(memory, p)?;
            let h = img.header;
            // The keys a search takes through this node: those with its prefix bytes (a
            // contiguous run of the sorted keys, which share every byte before them).
            let matches = |key: &[u8]| (h.first_pos()..h.branch_pos()).all(|x| byte(key, x) == h.byte_at(x));
            let Some(below) = matching_run(keys, below, matches) else { continue };
            let mut prefix = known;
            for x in h.first_pos()..h.branch_pos() {
                prefix |= u64::from(h.byte_at(x)) << (56 - 8 * x);
            }
            let before = node.cache.stats().bytes;
            node.cache.insert(prefix, p.addr(), &img);
            if node.cache.stats().bytes <= before || node.cache.stats().bytes >= o.cache_bytes {
                return Ok(());
            }
            let b = h.branch_pos();
            for e in img.live().iter().filter(|e| !e.is_null() && !e.is_leaf()) {
                let Some(below) = byte_run(keys, below.clone(), |key| byte(key, b), e.partial()) else { continue };
                next.push((*e, prefix | u64::from(e.partial()) << (56 - 8 * b), below));
            }
        }
        level = next;
    }
    Ok(())
}

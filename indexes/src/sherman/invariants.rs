//! The invariant walk of a Sherman tree, with no operation in flight:
//!
//! 1. the superblock is Sherman's and its root word names a node of the level it says;
//! 2. every node decodes with consistent versions (no torn node or slot);
//! 3. each level is one sibling chain from the leftmost node: fences contiguous from all-zero
//!    to +infinity, every node of the level's level, no cycle;
//! 4. internal records are sorted and inside the node's fences; the children of each level, in
//!    order, appear in the next level's chain in the same order, each starting at its separator.
//!    A node of the chain that no parent points to is a split whose separator was never
//!    inserted: legal in a B-link tree (readers reach it through its left sibling), and what an
//!    operation that gave up or crashed between the two steps leaves. It is counted as
//!    `unfinished_splits` and listed in [`InvariantReport::unfinished`], so the checker accepts
//!    it only after a run in which some operation did not finish (found by mutation: a root
//!    helper that returned before inserting its own separator left such a node in runs whose
//!    every operation finished, and the walk passed them);
//! 5. leaf keys lie inside their leaf's fences and appear once per leaf (fences are disjoint, so
//!    once in the tree);
//! 6. every lock word is free.

use super::layout::Node;
use super::{Locks, MAGIC, NODE_ALIGN, SUPERBLOCK_BYTES, ShermanOptions, superblock_addr};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, NodeId, RemoteAddr};
use std::collections::HashSet;

/// Walks the tree; see the module doc.
pub fn check(o: &ShermanOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let g = o.geometry()?;
    let sb = memory.read_memory(superblock_addr(), SUPERBLOCK_BYTES).map_err(|e| e.to_string())?;
    let word = u64::from_le_bytes(sb[0..8].try_into().expect("8 bytes"));
    if u64::from_le_bytes(sb[8..16].try_into().expect("8 bytes")) != MAGIC {
        return Err("superblock: no Sherman tree here (bad magic)".into());
    }
    let locks = Locks::from_code(sb[16], u32::from_le_bytes(sb[20..24].try_into().expect("4 bytes")))?;
    let (root, root_level) = crate::common::root::unpack(word);
    let read = |at: RemoteAddr| -> Result<Node, String> {
        let image = memory.read_memory(at, g.node_bytes).map_err(|e| format!("node at {at}: {e}"))?;
        let n = g.decode(&image).map_err(|e| format!("node at {at} does not decode: {e:?}"))?;
        if n.slots.iter().any(|s| s.torn) {
            return Err(format!("leaf at {at} has a torn slot"));
        }
        if locks.placement == super::LockPlacement::Embedded {
            let word = memory.read_memory(at.add(g.embedded_lock_at() as u64), 8).map_err(|e| e.to_string())?;
            if word.iter().any(|&b| b != 0) {
                return Err(format!("node at {at}: embedded lock held with no operation in flight"));
            }
        }
        Ok(n)
    };
    let zero = vec![0u8; g.key_bytes];
    let inf = g.infinity();
    let mut report = InvariantReport::default();
    let mut seen = HashSet::new();
    // Children the level above expects, in order: (address, separator it starts at).
    let mut expected: Vec<(RemoteAddr, Vec<u8>)> = vec![(root, zero.clone())];
    let mut level = root_level as i32;
    while level >= 0 {
        let mut at = expected.first().map(|e| e.0).ok_or("a level with no nodes")?;
        let mut want_lowest = zero.clone();
        let mut next = Vec::new();
        let mut chain = Vec::new();
        loop {
            if at.is_null() || at.raw() % NODE_ALIGN != 0 {
                return Err(format!("level {level}: bad node address {at}"));
            }
            if !seen.insert(at) {
                return Err(format!("level {level}: node at {at} reached twice (a cycle, or shared)"));
            }
            let n = read(at)?;
            if n.level as i32 != level {
                return Err(format!("node at {at} has level {} in the chain of level {level}", n.level));
            }
            if n.lowest != want_lowest {
                return Err(format!(
                    "node at {at}: lowest fence {:02x?} does not follow {:02x?}",
                    n.lowest, want_lowest
                ));
            }
            if n.lowest >= n.highest {
                return Err(format!("node at {at}: empty fence range"));
            }
            if n.is_leaf() {
                let mut keys = HashSet::new();
                for s in n.slots.iter().filter(|s| s.occupied) {
                    if !n.covers(&s.key) {
                        return Err(format!("leaf at {at}: key {:02x?} outside its fences", s.key));
                    }
                    if !keys.insert(s.key.clone()) {
                        return Err(format!("leaf at {at}: key {:02x?} twice", s.key));
                    }
                }
                report.items += keys.len() as u64;
                *report.structures.entry("leaves").or_default() += 1;
                *report.structures.entry("leaf_slots").or_default() += g.leaf_span as u64;
            } else {
                let mut prev = n.lowest.clone();
                next.push((n.leftmost, n.lowest.clone()));
                for (k, child) in &n.records {
                    if k.as_slice() <= prev.as_slice() {
                        return Err(format!("node at {at}: records out of order at {k:02x?}"));
                    }
                    if !n.covers(k) {
                        return Err(format!("node at {at}: separator {k:02x?} outside its fences"));
                    }
                    prev = k.to_vec();
                    next.push((*child, k.to_vec()));
                }
                *report.structures.entry("internal_nodes").or_default() += 1;
            }
            chain.push((at, n.lowest.clone()));
            want_lowest = n.highest.clone();
            if n.highest == inf {
                if !n.sibling.is_null() {
                    return Err(format!("node at {at}: +infinity fence but a sibling"));
                }
                break;
            }
            at = n.sibling;
        }
        // The level above's children appear in this chain in order, at their separators.
        let mut i = 0;
        for (child, sep) in &expected {
            while i < chain.len() && chain[i].0 != *child {
                i += 1;
            }
            if i == chain.len() {
                return Err(format!(
                    "level {level}: child {child} of the level above is not in the chain (or out of order)"
                ));
            }
            if chain[i].1 != *sep {
                return Err(format!(
                    "level {level}: child {child} starts at {:02x?}, its separator is {sep:02x?}",
                    chain[i].1
                ));
            }
        }
        let parented: HashSet<RemoteAddr> = expected.iter().map(|e| e.0).collect();
        let mut unfinished_splits = 0;
        for (at, lowest) in chain.iter().filter(|(at, _)| !parented.contains(at)) {
            unfinished_splits += 1;
            report.unfinished.push(format!(
                "level {level}: node at {at} (from {lowest:02x?}) is reached only through its left sibling: a split whose separator never reached the parent"
            ));
        }
        *report.structures.entry("unfinished_splits").or_default() += unfinished_splits;
        expected = next;
        level -= 1;
    }
    *report.structures.entry("levels").or_default() += root_level as u64 + 1;
    let nodes = seen.len() as u64;
    report.remote_bytes = nodes * g.alloc_bytes() as u64;
    if locks.placement != super::LockPlacement::Embedded {
        for mn in 0..o.memory_nodes {
            let base = match locks.placement {
                super::LockPlacement::OnChip => RemoteAddr::device(NodeId(mn), 0),
                _ => RemoteAddr::host(NodeId(mn), super::HOST_LOCK_TABLE_AT),
            };
            let table = memory.read_memory(base, locks.count as usize * 8).map_err(|e| e.to_string())?;
            if let Some(i) = table.chunks(8).position(|w| w.iter().any(|&b| b != 0)) {
                return Err(format!("memory node {mn}: lock {i} held with no operation in flight"));
            }
        }
    }
    Ok(report)
}

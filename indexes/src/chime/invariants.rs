//! The structural walk `dmkit check` runs between schedules (digest §4.2, §4.5): it reads the
//! whole tree from memory and checks what must hold whenever no lock is held.
//!
//! - Internal levels: levels decrease by one per step down; entries sorted within the fences;
//!   every child's range nests in its parent's; each node's sibling is the next node of its
//!   level and `sibling_leftmost` that node's leftmost child.
//! - Half splits: a node whose right half no parent lists yet (its pivot never went up: the
//!   splitter gave up or is still on its way) is reached from its left sibling, the left half's
//!   range ending at its highest fence (internal) or at its maximum's successor (leaf). Each is
//!   listed in [`InvariantReport::unfinished`], so the checker accepts it only after a run in
//!   which some operation did not finish.
//! - Leaves: every leaf is reachable from a parent or as such a right half; lines and
//!   objects carry consistent versions (C1, one NV: I2); all replicas are identical (I5); every
//!   key sits within `H` of its home with its bit set, and every bit names a key (I3); no key
//!   twice; every key inside the range its parent gives it (I6); a leaf with a sibling holds its
//!   largest key (tombstone or not) at argmax, and its range ends at that key's successor (I9);
//!   a vacancy bit says "vacant" only if the bucket has an empty entry (I10); no lock bit set.

use super::layout::{self, LOCK_BIT};
use super::{ChimeOptions, MAGIC, internal_layout, leaf_layout, lock_word_layout, superblock_addr};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, RemoteAddr};
use std::collections::HashSet;

pub fn check(o: &ChimeOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let (l, il, lw) = (leaf_layout(o), internal_layout(o), lock_word_layout(o));
    let sb = memory.read_memory(superblock_addr(), 16).map_err(|e| e.to_string())?;
    let word = u64::from_le_bytes(sb[0..8].try_into().expect("8"));
    if u64::from_le_bytes(sb[8..16].try_into().expect("8")) != MAGIC {
        return Err("the superblock has no CHIME magic".into());
    }
    let (root, root_level) = crate::common::root::unpack(word);
    let k = l.key_bytes;
    let mut report = InvariantReport::default();
    // (address, lowest, highest) of the nodes the level above lists, in key order.
    let mut level: Vec<(RemoteAddr, Vec<u8>, Vec<u8>)> = vec![(root, vec![0; k], vec![0xFF; k])];
    let mut seen: HashSet<RemoteAddr> = HashSet::new();
    for lv in (1..=root_level).rev() {
        let listed: HashSet<RemoteAddr> = level.iter().map(|n| n.0).collect();
        let mut next = Vec::new();
        // (address, sibling, leftmost child, sibling's leftmost child) along the level.
        let mut chain: Vec<(RemoteAddr, RemoteAddr, RemoteAddr, RemoteAddr)> = Vec::new();
        for (first, lo, hi) in &level {
            let (mut at, mut lo) = (*first, lo.clone());
            loop {
                if !seen.insert(at) {
                    return Err(format!("internal node at {at} is reached twice"));
                }
                let raw = memory.read_memory(at, il.alloc_bytes()).map_err(|e| e.to_string())?;
                let n = il
                    .decode(&raw[..il.encoded_bytes()], true)
                    .map_err(|_| format!("internal node at {at} is torn"))?;
                if u64::from_le_bytes(raw[il.lock_at()..il.lock_at() + 8].try_into().expect("8")) & LOCK_BIT != 0 {
                    return Err(format!("internal node at {at} is locked"));
                }
                if n.level != lv || !n.valid {
                    return Err(format!("internal node at {at}: level {} (expected {lv}), valid {}", n.level, n.valid));
                }
                // A node whose highest fence is below the range the level above gives it split,
                // and its right half (never in a parent yet) covers the rest.
                let split = n.highest != *hi;
                if n.lowest != lo
                    || split
                        && (n.highest <= lo || n.highest > *hi || n.sibling.is_null() || listed.contains(&n.sibling))
                {
                    return Err(format!(
                        "internal node at {at}: fences {:?}..{:?} outside {lo:?}..{hi:?}",
                        n.lowest, n.highest
                    ));
                }
                if split {
                    report.unfinished.push(format!(
                        "internal node at {at} split at {:?} and its right half {} is in no parent",
                        n.highest, n.sibling
                    ));
                }
                *report.structures.entry("internal_nodes").or_default() += 1;
                report.remote_bytes += il.alloc_bytes() as u64;
                let mut bound = lo.clone();
                let mut child = n.leftmost;
                for (key, c) in &n.entries {
                    if key.as_slice() <= bound.as_slice() || key.as_slice() >= n.highest.as_slice() {
                        return Err(format!("internal node at {at}: pivot {key:?} out of order or range"));
                    }
                    next.push((child, bound.clone(), key.clone()));
                    bound = key.clone();
                    child = *c;
                }
                next.push((child, bound, n.highest.clone()));
                chain.push((at, n.sibling, n.leftmost, n.sibling_leftmost));
                if !split {
                    break;
                }
                (at, lo) = (n.sibling, n.highest);
            }
        }
        // B-link: each node's sibling is the next node of the level, and `sibling_leftmost` that
        // node's leftmost child (the last node has neither).
        for (i, &(at, sibling, _, sibling_leftmost)) in chain.iter().enumerate() {
            let (want, want_leftmost) = chain.get(i + 1).map_or((RemoteAddr::NULL, RemoteAddr::NULL), |n| (n.0, n.2));
            if sibling != want || sibling_leftmost != want_leftmost {
                return Err(format!(
                    "internal node at {at}: sibling {sibling} (leftmost {sibling_leftmost}), the level's next node is {want} (leftmost {want_leftmost})"
                ));
            }
        }
        level = next;
    }
    let mut all_keys: Vec<Vec<u8>> = Vec::new();
    let listed: HashSet<RemoteAddr> = level.iter().map(|n| n.0).collect();
    for (i, (first, lo, hi)) in level.iter().enumerate() {
        let expected = level.get(i + 1).map_or(RemoteAddr::NULL, |n| n.0);
        let (mut at, mut lo) = (*first, lo.clone());
        loop {
            if !seen.insert(at) {
                return Err(format!("leaf at {at} is reached twice"));
            }
            let raw = memory.read_memory(at, l.alloc_bytes()).map_err(|e| e.to_string())?;
            let mut img = vec![0u8; l.decoded_bytes()];
            layout::decode(&raw[..l.encoded_bytes()], 0, l.decoded_bytes(), &mut img, &|d| l.object_start(d), true)
                .map_err(|_| format!("leaf at {at}: line versions disagree with their objects"))?;
            let nv = layout::nv(img[0]);
            if l.versions_in(&img, 0, l.decoded_bytes()).any(|v| layout::nv(v) != nv) {
                return Err(format!("leaf at {at}: objects with different node versions"));
            }
            let reps = l.replicas();
            let r0 = &img[reps[0]..reps[0] + l.replica_bytes()];
            if reps.iter().any(|&r| img[r..r + l.replica_bytes()] != *r0) {
                return Err(format!("leaf at {at}: replicas differ"));
            }
            let sibling = l.sibling(&img, reps[0]);
            // A leaf whose sibling is not the parent's next child split, and its right half (in no
            // parent yet) covers the rest of the range, from the successor of this leaf's maximum.
            let split = sibling != expected;
            if split && (sibling.is_null() || listed.contains(&sibling)) {
                return Err(format!("leaf at {at}: sibling {sibling} but the parent's next child is {expected}"));
            }
            let word = u64::from_le_bytes(raw[l.lock_at()..l.lock_at() + 8].try_into().expect("8"));
            if word & LOCK_BIT != 0 {
                return Err(format!("leaf at {at} is locked"));
            }
            let mut bits = vec![0u16; l.span];
            let mut keys = Vec::new();
            for s in 0..l.span {
                if l.is_empty(&img, s) {
                    if l.is_tombstone(&img, s) {
                        return Err(format!("leaf at {at}: an empty entry {s} marked deleted"));
                    }
                    continue;
                }
                let key = l.key(&img, s).to_vec();
                let q = l.home(&key);
                let d = l.dist(q, s);
                if d >= l.hood {
                    return Err(format!("leaf at {at}: key {key:?} at {s}, {d} from its home {q}"));
                }
                bits[q] |= l.hop_bit(d);
                if key.as_slice() < lo.as_slice() || key.as_slice() >= hi.as_slice() {
                    return Err(format!("leaf at {at}: key {key:?} outside its parent's range {lo:?}..{hi:?}"));
                }
                if !l.is_tombstone(&img, s) {
                    report.items += 1;
                }
                keys.push((key, s));
            }
            for (q, &want) in bits.iter().enumerate() {
                if want != l.hops(&img, q) {
                    return Err(format!(
                        "leaf at {at}: bitmap of {q} is {:#x}, its keys say {want:#x}",
                        l.bitmap(&img, q)
                    ));
                }
            }
            if o.vacancy_bitmap {
                for b in 0..lw.vb {
                    let (first, last) = lw.bucket_entries(b);
                    if !lw.full(word, b) && (first..=last).all(|s| !l.is_empty(&img, s)) {
                        return Err(format!(
                            "leaf at {at}: vacancy bit {b} says vacant, entries {first}..={last} are full"
                        ));
                    }
                }
            }
            // I9, exact: a leaf with a sibling holds its largest key, deleted or not, at argmax,
            // and its range ends at that key's successor. A split leaves it so on both halves (the
            // left keeps its largest key, the right inherits the old leaf's, tombstone included)
            // and inserts stay below the end; an insert moving right through a parent older than
            // the split trusts exactly this.
            let mut end = hi.clone();
            if !sibling.is_null() {
                let a = lw.argmax(word);
                if l.is_empty(&img, a) {
                    return Err(format!("leaf at {at} has a sibling but its argmax {a} is empty"));
                }
                let max = keys.iter().map(|(k, _)| k).max().expect("argmax is occupied");
                if l.key(&img, a) != max.as_slice() {
                    return Err(format!(
                        "leaf at {at}: argmax {a} holds {:?}, its largest key is {max:?}",
                        l.key(&img, a)
                    ));
                }
                let successor = layout::successor(max).ok_or_else(|| format!("leaf at {at} holds +infinity"))?;
                if split {
                    report.unfinished.push(format!(
                        "leaf at {at} split at {successor:?} and its right half {sibling} is in no parent"
                    ));
                    end = successor;
                } else if successor != *hi {
                    return Err(format!("leaf at {at}: its largest key {max:?} does not end its range {lo:?}..{hi:?}"));
                }
            }
            if o.indirect {
                // Whole keys are in the blocks; each must carry its entry's prefix.
                for (key, s) in keys.iter_mut() {
                    let (block_at, lines) =
                        super::split_block_pointer(u64::from_le_bytes(l.value(&img, *s).try_into().expect("8")));
                    let block = memory.read_memory(block_at, lines * 64).map_err(|e| e.to_string())?;
                    let (full, _) = super::parse_block(&block).map_err(|e| format!("leaf at {at}, entry {s}: {e}"))?;
                    let mut prefix = full[..full.len().min(k)].to_vec();
                    prefix.resize(k, 0);
                    if prefix != *key {
                        return Err(format!("leaf at {at}, entry {s}: block key {full:?} under prefix {key:?}"));
                    }
                    *key = full;
                }
            }
            let n = keys.len();
            keys.sort();
            keys.dedup_by(|a, b| a.0 == b.0);
            if keys.len() != n {
                return Err(format!("leaf at {at} holds a key twice"));
            }
            all_keys.extend(keys.into_iter().map(|(k, _)| k));
            *report.structures.entry("leaves").or_default() += 1;
            report.remote_bytes += l.alloc_bytes() as u64;
            if !split {
                break;
            }
            (at, lo) = (sibling, end);
        }
    }
    if all_keys.windows(2).any(|w| w[0] >= w[1]) {
        return Err("leaf keys are not ascending along the sibling chain".into());
    }
    report.capacity_items = Some(report.structures.get("leaves").copied().unwrap_or(0) * l.span as u64);
    Ok(report)
}

//! The structural walk (digest §4.2), outside time, with no operation in flight.
//!
//! - I1: what is reachable from the root slot is a tree; internal nodes have a known type,
//!   reachable leaves are not dead and unlocked (an out-of-place update that lost its slot CAS
//!   leaves the leaf it retired current: counted as `retired_current_leaf`).
//! - I2: header partials agree with the path; a header behind its path (an untrimmed split)
//!   only repeats path bytes (counted as `untrimmed_header`); a header ahead of it is an error.
//! - I3: every leaf's key has its path's bytes.
//! - I4: within a node, no two live slots (leaves, nodes, tombstones) share a partial.
//! - I6: a slot records its child's type; no live slot lies behind the header's capacity
//!   (counted as `unfinished_type_switch` if one does: an insert that gave up).
//! - I9: leaf checksums match.
//! - I10: every reverse pointer is the address of the slot pointing to it.

use super::layout::{Header, LeafGeometry, Slot};
use super::{SmartOptions, leaf_geometry, root_slot_addr};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, RemoteAddr};
use std::collections::HashSet;

pub fn check(o: &SmartOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let read = |at: RemoteAddr, len: usize| memory.read_memory(at, len).map_err(|e| format!("read {at}: {e}"));
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let sb = read(root_slot_addr(), 24)?;
    if word(&sb, 8) != u64::from_le_bytes(*b"DMKSMRT1") {
        return Err("superblock: bad magic (was the tree created?)".into());
    }
    let g: LeafGeometry = leaf_geometry(o);
    let types = &o.node_types;
    let k = o.key_bytes as usize;
    let mut report = InvariantReport::default();
    // Internal nodes seen (a node reachable twice, or a cycle, is a violation). Leaves and
    // keys need no set: every slot's child is checked against the exact path to it (header
    // partials, then the slot's partial, each unique in its node), and a leaf's key must
    // extend its path. Two reachable leaves holding one key would have paths that are both
    // prefixes of the key, so both walks would take the same slot of every node from the root
    // (one slot per partial) and end at the same slot, which holds one pointer; one leaf
    // reachable from two slots would give it two paths, both prefixes of its key, the same
    // argument. So only a node reachable twice can duplicate a leaf, and that is caught here.
    // (A set of every key and leaf cost about 3.5 GB of host memory at 60 M keys.)
    let mut seen = HashSet::new();
    let bump = |r: &mut InvariantReport, what: &'static str| *r.structures.entry(what).or_default() += 1;
    // (slot, its address, depth of the child, path bytes at depths 1..depth)
    let mut stack = vec![(Slot(word(&sb, 0)), root_slot_addr(), 1usize, Vec::<u8>::new())];
    while let Some((s, sa, d, path)) = stack.pop() {
        if s.is_null() {
            continue;
        }
        if s.is_tombstone() {
            bump(&mut report, "tombstone");
            continue;
        }
        if !s.is_leaf() && !seen.insert(s.ptr()) {
            return Err(format!("{} is reachable twice (second time from {sa})", s.ptr()));
        }
        if s.ptr().offset() % o.alloc_align != 0 {
            return Err(format!("{} (slot {sa}) is not aligned to alloc_align {}", s.ptr(), o.alloc_align));
        }
        if s.is_leaf() {
            let l = g.decode(&read(s.ptr(), g.bytes())?);
            let at = s.ptr();
            if l.dead() {
                // A delete marks the leaf dead, then swings its slot to a tombstone; one that
                // failed between the two leaves this, which searches read as absent, inserts
                // publish over (`dead_leaf_replaced`) and deletes unlink.
                report.unfinished.push(format!("reachable leaf at {at} (slot {sa}) is deleted"));
                continue;
            }
            if !l.valid {
                // Retired by an out-of-place update whose slot CAS then failed: still current
                // (readers check the slot).
                bump(&mut report, "retired_current_leaf");
            }
            if l.lock_word != 0 {
                return Err(format!("leaf at {at} is locked ({:#x}) at quiescence", l.lock_word));
            }
            if !l.intact() {
                return Err(format!("leaf at {at} fails its checksum"));
            }
            if l.rev != sa.raw() {
                return Err(format!("leaf at {at}: reverse pointer {:#x}, but its slot is {sa}", l.rev));
            }
            if l.key.len() != k || !l.key.starts_with(&path) {
                return Err(format!("leaf at {at} with key {:02x?} is under path {:02x?}", l.key, path));
            }
            report.items += 1;
            report.remote_bytes += g.alloc_bytes(o.alloc_align);
            bump(&mut report, "leaf");
            continue;
        }
        let at = s.ptr();
        let image = read(at, types.read_bytes(types.largest()))?;
        let h = Header(word(&image, 8));
        let cap = types.capacity(h.node_type());
        if cap == 0 {
            return Err(format!("reachable node at {at} has type {}", h.node_type()));
        }
        if word(&image, 0) != sa.raw() {
            return Err(format!("node at {at}: reverse pointer {:#x}, but its slot is {sa}", word(&image, 0)));
        }
        if s.node_type() != h.node_type() {
            return Err(format!("slot {sa} records type {} for node {at} of type {}", s.node_type(), h.node_type()));
        }
        if h.depth() > d {
            return Err(format!("node at {at} starts at depth {} below its path's {d}", h.depth()));
        }
        let mut p = path.clone();
        for j in 0..h.len() {
            let depth = h.depth() + j;
            if depth < d {
                if path.get(depth - 1) != Some(&h.partial(j)) {
                    return Err(format!("node at {at}: redundant partial {j} disagrees with its path"));
                }
            } else {
                p.push(h.partial(j));
            }
        }
        if h.depth() < d {
            bump(&mut report, "untrimmed_header");
        }
        if h.slot_depth() > k {
            return Err(format!("node at {at} discriminates on byte {} of {k}-byte keys", h.slot_depth()));
        }
        bump(&mut report, "internal");
        report.remote_bytes += types.node_alloc_bytes(o.alloc_align);
        let mut partials = HashSet::new();
        for i in 0..types.capacity(types.largest()) {
            let c = Slot(word(&image, 16 + 8 * i));
            if c.is_null() {
                continue;
            }
            if i >= cap {
                bump(&mut report, "unfinished_type_switch");
            }
            if !partials.insert(c.partial()) {
                return Err(format!("node at {at} has two slots with partial {:#04x}", c.partial()));
            }
            let mut cp = p.clone();
            cp.push(c.partial());
            stack.push((c, at.add(16 + 8 * i as u64), h.slot_depth() + 1, cp));
        }
    }
    Ok(report)
}

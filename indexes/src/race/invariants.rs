//! The invariant walk of a RACE table, with no operation in flight: the directory, every
//! subtable it names, and every KV block a slot points to.

use super::layout::{self, Entry, Header, Slot};
use super::{RaceOptions, entry_addr, root_addr};
use crate::InvariantReport;
use dmkit_rdma::MemoryView;
use std::collections::BTreeSet;

/// The walk: directory consistent with the subtables' headers (I2), every slot's block valid
/// with its fingerprint, in one of its key's combined buckets of the right subtable (I3), and
/// no key twice (P4).
pub fn check(o: &RaceOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let g = o.geometry();
    let root = memory.read_memory(root_addr(), 8).map_err(|e| e.to_string())?;
    let root_word = u64::from_le_bytes(root[..8].try_into().expect("8"));
    if root_word & layout::LOCK_BIT != 0 {
        return Err("the directory lock is held with no operation in flight".into());
    }
    let gd = layout::root_gd(root_word);
    let mut report = InvariantReport::default();
    let mut seen_tables = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for i in 0..1usize << gd {
        let raw = memory.read_memory(entry_addr(i), 8).map_err(|e| e.to_string())?;
        let e = Entry::decode(u64::from_le_bytes(raw[..8].try_into().expect("8")));
        if e.lock {
            return Err(format!("directory entry {i} is locked with no operation in flight"));
        }
        if e.ld > gd {
            return Err(format!("directory entry {i}: local depth {} above the global depth {gd}", e.ld));
        }
        if !seen_tables.insert(e.subtable.raw()) {
            continue;
        }
        let want = Header { ld: e.ld, suffix: layout::suffix(i as u64, e.ld) };
        let bytes = memory.read_memory(e.subtable, g.subtable_bytes()).map_err(|e| e.to_string())?;
        *report.structures.entry("subtables").or_default() += 1;
        report.remote_bytes += g.subtable_bytes() as u64;
        for b in 0..g.buckets() {
            let at = g.bucket_at(b);
            let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
            if word & layout::LOCK_BIT != 0 {
                return Err(format!("subtable of entry {i}, bucket {b}: insert lock held with no operation in flight"));
            }
            let h = Header::decode(word);
            if h != want {
                return Err(format!("subtable of entry {i}, bucket {b}: header {h:?}, the directory says {want:?}"));
            }
            for s in 0..g.slots {
                let p = at + 8 + 8 * s;
                let word = u64::from_le_bytes(bytes[p..p + 8].try_into().expect("8"));
                if word & layout::FROZEN != 0 {
                    return Err(format!("bucket {b} slot {s}: frozen with no split in flight"));
                }
                let Some(slot) = Slot::decode(word) else {
                    continue;
                };
                let block = memory.read_memory(slot.block, slot.bytes()).map_err(|e| e.to_string())?;
                let (k, _) = layout::decode_block(&block)
                    .ok_or_else(|| format!("bucket {b} slot {s}: an invalid block at {}", slot.block))?;
                let kh = g.hash(k);
                if kh.fp != slot.fp {
                    return Err(format!(
                        "bucket {b} slot {s}: fingerprint {} for a key whose fingerprint is {}",
                        slot.fp, kh.fp
                    ));
                }
                if layout::suffix(kh.dir, e.ld) != want.suffix {
                    return Err(format!("key {k:?} in the subtable of suffix {:#x}", want.suffix));
                }
                let home = kh.idx.iter().any(|&a| [g.combined_first(a), g.combined_first(a) + 1].contains(&b));
                if !home {
                    return Err(format!("key {k:?} in bucket {b}, outside its combined buckets"));
                }
                if !keys.insert(k.to_vec()) {
                    return Err(format!("key {k:?} is stored twice"));
                }
                report.items += 1;
                report.remote_bytes += slot.bytes() as u64;
            }
        }
    }
    report.capacity_items = Some(seen_tables.len() as u64 * (g.buckets() * g.slots) as u64);
    Ok(report)
}

//! The invariant walk of the example hash table, with no operation in flight: what the index's
//! module doc lists under "Invariants".

use super::ExampleOptions;
use super::layout::{self, Slot, Superblock};
use crate::InvariantReport;
use dmkit_rdma::MemoryView;
use std::collections::BTreeSet;

pub fn check(o: &ExampleOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let raw = memory
        .read_memory(layout::superblock_addr(), layout::superblock_bytes(o.memory_nodes as usize))
        .map_err(|e| e.to_string())?;
    let sb = Superblock::decode(&raw)?;
    let mut report = InvariantReport::default();
    for b in 0..sb.buckets {
        let bytes = memory.read_memory(sb.bucket_addr(b), sb.bucket_bytes()).map_err(|e| e.to_string())?;
        let lock = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        if lock != 0 {
            return Err(format!("bucket {b}: lock word {lock:#x} held with no operation in flight"));
        }
        let mut keys = BTreeSet::new();
        for i in 0..sb.slots as usize {
            let at = sb.slot_offset(i);
            match layout::decode_slot(&sb, &bytes[at..at + sb.slot_bytes()], true) {
                Slot::Empty => {}
                Slot::Torn => return Err(format!("bucket {b} slot {i}: bad lengths or checksum")),
                Slot::Item { key, .. } => {
                    if sb.bucket_of(&key) != b {
                        return Err(format!(
                            "bucket {b} slot {i}: key {key:02x?} belongs to bucket {}",
                            sb.bucket_of(&key)
                        ));
                    }
                    if !keys.insert(key.clone()) {
                        return Err(format!("bucket {b}: key {key:02x?} appears twice"));
                    }
                    report.items += 1;
                }
            }
        }
        *report.structures.entry("buckets").or_default() += 1;
    }
    report.remote_bytes =
        (0..sb.bases.len()).map(|i| sb.buckets_on(i).max(1) * sb.bucket_stride()).sum::<u64>() + raw.len() as u64;
    report.capacity_items = Some(sb.buckets * sb.slots as u64);
    Ok(report)
}

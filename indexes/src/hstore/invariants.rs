//! HStore's invariant walk (digest §4.3), outside time, with no operation in flight.
//!
//! - The table (if the HTS serves it): every chain links only overflow buckets of its worker's
//!   pool, without cycles; unused slots of a bucket stay empty; every slot points to a complete
//!   block (S5) whose key hashes to that bucket and fingerprint and whose length matches; no
//!   key has two slots and no block two slots (S6).
//! - The skiplists (where the view shows the SLS's state, as the simulator's does): each is a
//!   well-formed skiplist holding only keys of its partition; once their logs are applied they
//!   map exactly the keys the table maps, to the same blocks (S9).

use super::layout::{self, Block, Slot};
use super::wire::{HTS_SERVICE, SLS_SERVICE, ServerState};
use super::{HStoreOptions, hts::Hts, sls::Sls};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, RemoteAddr};
use std::collections::{BTreeMap, BTreeSet};

pub fn check(o: &HStoreOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let g = o.geometry();
    let hts = o.hts_node();
    let read = |addr: RemoteAddr, len: usize| memory.read_memory(addr, len).map_err(|e| format!("reading {addr}: {e}"));
    let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let mut report = InvariantReport::default();
    let ready = word(&read(RemoteAddr::host(hts, layout::READY_OFFSET), 8)?);
    let hts_state = memory.service_state(hts, HTS_SERVICE).and_then(|s| s.downcast::<Hts>().ok()).map(|h| h.state());
    // A table is complete when its ready word is set; a recovering HTS has none yet.
    let serving = ready != 0
        && hts_state
            .is_none_or(|(s, inc)| matches!(s, ServerState::Serving | ServerState::PeerRecovering) && inc == ready);
    let mut table: BTreeMap<Vec<u8>, (u64, u8)> = BTreeMap::new();
    if serving {
        let mut blocks = BTreeSet::new();
        let mut linked = BTreeSet::new();
        let mut overflow = 0u64;
        let mut block_bytes = 0u64;
        let chunk = 1024u64;
        let mut first = 0;
        while first < g.buckets {
            let n = chunk.min(g.buckets - first);
            let heads = read(RemoteAddr::host(hts, g.bucket_offset(first)), (n * layout::BUCKET_BYTES) as usize)?;
            for (i, head) in heads.chunks_exact(64).enumerate() {
                let b = first + i as u64;
                let mut words = layout::bucket_words(head);
                let mut off = g.bucket_offset(b);
                loop {
                    for (i, &w) in words[..layout::MAX_SLOTS].iter().enumerate() {
                        if i >= g.slots {
                            if w != 0 {
                                return Err(format!("bucket {off:#x} uses slot {i} of {}", g.slots));
                            }
                            continue;
                        }
                        let Some(s) = Slot::decode(w) else { continue };
                        let bytes = read(s.block, s.units as usize * layout::UNIT as usize)?;
                        let Block::Valid { key, value, .. } = layout::decode_block(&bytes) else {
                            return Err(format!(
                                "slot {off:#x}+{i} points at {} which is not a complete block",
                                s.block
                            ));
                        };
                        let p = g.place(&key);
                        if p.bucket != b || p.fp != s.fp {
                            return Err(format!(
                                "key {key:02x?} is in bucket {b} with fingerprint {}, its hash says bucket {} fingerprint {}",
                                s.fp, p.bucket, p.fp
                            ));
                        }
                        if layout::units_for(key.len(), value.len()) != s.units as u64 {
                            return Err(format!(
                                "slot {off:#x}+{i} says {} units for a block of {:?}",
                                s.units,
                                (key.len(), value.len())
                            ));
                        }
                        if !blocks.insert(s.block) {
                            return Err(format!("block {} has two slots", s.block));
                        }
                        block_bytes += s.units as u64 * layout::UNIT;
                        if table.insert(key.clone(), (layout::encode_addr(s.block), s.units)).is_some() {
                            return Err(format!("key {key:02x?} has two slots in bucket {b}'s chain (S6)"));
                        }
                    }
                    let next = words[7];
                    if next == 0 {
                        break;
                    }
                    if !g.is_pool_bucket(next) || g.pool_of(next) != p_worker(&g, b) {
                        return Err(format!(
                            "bucket {off:#x} links {next:#x}, not a bucket of worker {}'s pool",
                            p_worker(&g, b)
                        ));
                    }
                    if !linked.insert(next) {
                        return Err(format!("overflow bucket {next:#x} is linked twice (a cycle or a shared bucket)"));
                    }
                    overflow += 1;
                    off = next;
                    words = layout::bucket_words(&read(RemoteAddr::host(hts, off), 64)?);
                }
            }
            first += n;
        }
        report.items = table.len() as u64;
        report.structures.insert("buckets", g.buckets);
        report.structures.insert("overflow_buckets", overflow);
        report.remote_bytes = (g.buckets + overflow) * layout::BUCKET_BYTES + block_bytes;
        report.capacity_items = Some(g.buckets * g.slots as u64);
    }
    report.structures.insert("hts_serving", serving as u64);
    if let Some(sls) = memory.service_state(o.sls_node(), SLS_SERVICE).and_then(|s| s.downcast::<Sls>().ok()) {
        if sls.state() == ServerState::Serving {
            // S9, entry by entry: every settled entry is the table's, and there are as many
            // (the table has no key twice, S6, and the partitions no key in common).
            let settled = sls.for_each_settled(|key, v| if serving { compare(&table, key, v) } else { Ok(()) })?;
            report.structures.insert("sls_items", settled);
            if serving {
                if settled != table.len() as u64 {
                    let mut seen = BTreeSet::new();
                    sls.for_each_settled(|key, _| {
                        seen.insert(key.to_vec());
                        Ok(())
                    })?;
                    let key = table.keys().find(|k| !seen.contains(*k)).expect("a table key the skiplists lack");
                    return Err(format!("key {key:02x?} is in the table but not in the skiplists (S9)"));
                }
                report.structures.insert("sls_compared", 1);
            } else {
                report.items = settled;
            }
        }
    }
    Ok(report)
}

fn p_worker(g: &layout::Geometry, bucket: u64) -> u16 {
    (bucket % g.workers as u64) as u16
}

/// S9 for one settled skiplist entry: the table maps its key to the same block.
fn compare(table: &BTreeMap<Vec<u8>, (u64, u8)>, key: &[u8], v: super::skiplist::Value) -> Result<(), String> {
    match table.get(key) {
        Some(&(addr, units)) if v.addr == addr && v.units == units => Ok(()),
        Some(&(addr, _)) => Err(format!(
            "key {key:02x?}: the table points at {}, the skiplist at {} (S9)",
            layout::decode_addr(addr),
            layout::decode_addr(v.addr)
        )),
        None => Err(format!("key {key:02x?} is in the skiplists but not in the table (S9)")),
    }
}

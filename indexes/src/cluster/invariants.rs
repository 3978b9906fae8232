//! The invariant walk of the cluster hash table, with no operation in flight: every chain from
//! its main bucket, every KV block a slot names, and the overflow buckets handed out.

use super::ClusterOptions;
use super::layout::{self, Block, Bucket, SlotWord, Superblock};
use crate::InvariantReport;
use dmkit_rdma::{MemoryView, RemoteAddr};
use std::collections::{BTreeMap, BTreeSet};

/// The invariant walk (see the module doc of [`super`]).
pub fn walk(o: &ClusterOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let read = |addr: RemoteAddr, len: usize| memory.read_memory(addr, len).map_err(|e| e.to_string());
    let raw = read(layout::superblock_addr(), layout::superblock_bytes(o.memory_nodes as usize))?;
    let sb = Superblock::decode(&raw)?;
    let mut report = InvariantReport { remote_bytes: raw.len() as u64, ..InvariantReport::default() };
    let m = sb.regions.len();
    // Overflow buckets handed out per node, and which chain links each.
    let mut handed_out = Vec::with_capacity(m);
    let mut linked: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); m];
    for i in 0..m {
        let counter = u64::from_le_bytes(read(sb.pool_counter_addr(i), 8)?.try_into().expect("8 bytes"));
        handed_out.push(counter.min(sb.overflow_on(i)));
        report.remote_bytes += layout::region_bytes(sb.slots, sb.main_on(i), sb.overflow_on(i));
    }
    let mut longest_chain = 0u64;
    for b in 0..sb.main_buckets {
        let i = sb.node_of(b);
        let main = Bucket::decode(&sb, &read(sb.main_addr(b), sb.bucket_bytes())?);
        let h = main.header;
        if h.locked {
            return Err(format!("main bucket {b}: locked with no operation in flight"));
        }
        if h.version % 2 != 0 || main.copy != h.version {
            return Err(format!("main bucket {b}: version {} (copy {}) is odd or torn", h.version, main.copy));
        }
        let mut keys = BTreeSet::new();
        let mut chain = vec![main];
        let mut packed_end: Option<(usize, usize)> = None;
        loop {
            let cur = chain.len() - 1;
            let bucket = &chain[cur];
            for (s, &word) in bucket.slots.iter().enumerate() {
                let Some(slot) = SlotWord::decode(word) else {
                    packed_end.get_or_insert((cur, s));
                    continue;
                };
                if let Some((pb, ps)) = packed_end {
                    return Err(format!(
                        "chain {b}: bucket {cur} slot {s} holds an item after the empty slot {ps} of bucket {pb}"
                    ));
                }
                let at =
                    sb.block_addr(i, slot).ok_or_else(|| format!("chain {b}: slot word {word:#x} out of range"))?;
                let bytes = read(at, slot.block_bytes())?;
                let Block::Item { key, value } = layout::decode_block(&bytes) else {
                    return Err(format!("chain {b}: bucket {cur} slot {s} names an invalid KV block at {at}"));
                };
                if layout::block_units(key.len(), value.len()) != slot.units as usize {
                    return Err(format!("chain {b}: slot length {} does not match its block", slot.units));
                }
                if layout::fingerprint(&key) != slot.fp {
                    return Err(format!("chain {b}: key {key:02x?} has another fingerprint than its slot"));
                }
                if sb.bucket_of(&key) != b {
                    return Err(format!("chain {b}: key {key:02x?} belongs to chain {}", sb.bucket_of(&key)));
                }
                if !keys.insert(key.clone()) {
                    return Err(format!("chain {b}: key {key:02x?} appears twice"));
                }
                report.items += 1;
                report.remote_bytes += slot.block_bytes() as u64;
                *report.structures.entry("kv_blocks").or_default() += 1;
            }
            let next = bucket.header.next;
            if next == 0 {
                break;
            }
            let index = next as u64 - 1;
            if index >= handed_out[i] {
                return Err(format!(
                    "chain {b}: links overflow bucket {index}, beyond the {} handed out",
                    handed_out[i]
                ));
            }
            if let Some(other) = linked[i].insert(index, b) {
                return Err(format!("overflow bucket {index} of node {i} is linked by chains {other} and {b}"));
            }
            let bucket = Bucket::decode(&sb, &read(sb.overflow_addr(i, index), sb.bucket_bytes())?);
            if bucket.header.locked || bucket.header.version != 0 || bucket.copy != 0 {
                return Err(format!("chain {b}: overflow bucket {index} has lock or version bits"));
            }
            chain.push(bucket);
        }
        longest_chain = longest_chain.max(chain.len() as u64);
        *report.structures.entry("main_buckets").or_default() += 1;
        *report.structures.entry("overflow_buckets").or_default() += chain.len() as u64 - 1;
    }
    for i in 0..m {
        if linked[i].len() as u64 != handed_out[i] {
            return Err(format!(
                "node {i}: {} overflow buckets handed out but {} linked",
                handed_out[i],
                linked[i].len()
            ));
        }
    }
    report.structures.insert("longest_chain", longest_chain);
    let overflow: u64 = (0..m).map(|i| sb.overflow_on(i)).sum();
    report.capacity_items = Some((sb.main_buckets + overflow) * sb.slots as u64);
    Ok(report)
}

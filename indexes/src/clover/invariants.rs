//! The invariant walk of Clover, with no operation in flight: every registered key's version
//! chain, from its shortcut.

use super::layout::{UNIT, decode};
use super::{CloverOptions, MS_SERVICE, MetadataServer};
use crate::InvariantReport;
use crate::common::block::decode_block_word;
use crate::common::primitive::lock;
use dmkit_rdma::{MemoryView, RemoteAddr};

/// Every registered key's chain, from its shortcut: complete versions of that key, ending
/// at a tail; the shortcut points into its own key's chain.
pub fn check(o: &CloverOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
    let mut report = InvariantReport::default();
    let Some(ms) = memory.service_state(o.ms_node(), MS_SERVICE).and_then(|s| s.downcast::<MetadataServer>().ok())
    else {
        return Ok(report);
    };
    let keys = lock(&ms.keys).clone();
    for (key, slot) in keys {
        let read = |a: RemoteAddr, n: usize| memory.read_memory(a, n).map_err(|e| e.to_string());
        let mut w = u64::from_le_bytes(read(RemoteAddr::host(o.ms_node(), slot), 8)?.try_into().expect("8 bytes"));
        let mut hops = 0u64;
        loop {
            let (at, units) = decode_block_word(w);
            let v = decode(&read(at, (units * UNIT) as usize)?)
                .ok_or_else(|| format!("key {key:02x?}: {at} is not a complete version"))?;
            if key != v.key {
                return Err(format!("key {key:02x?}: its chain reaches a version of {:02x?}", v.key));
            }
            report.remote_bytes += units * UNIT;
            hops += 1;
            if v.next == 0 {
                report.items += v.value.is_some() as u64;
                break;
            }
            if hops > 1 << 24 {
                return Err(format!("key {key:02x?}: a chain longer than 2^24 versions (a cycle?)"));
            }
            w = v.next;
        }
        *report.structures.entry("versions_from_shortcuts").or_default() += hops;
    }
    Ok(report)
}

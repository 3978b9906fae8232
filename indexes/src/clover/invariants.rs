//! The invariant walk of Clover, with no operation in flight: every registered key's version
//! chain, from its shortcut.

use super::layout::{UNIT, Version, decode};
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
        let mut hops = 0u64;
        let (_, tail) = chain(o, memory, &key, slot, |units| {
            report.remote_bytes += units * UNIT;
            hops += 1;
        })?;
        report.items += tail.value.is_some() as u64;
        *report.structures.entry("versions_from_shortcuts").or_default() += hops;
    }
    Ok(report)
}

/// Walks `key`'s chain outside time, from the version its shortcut word (at `slot` in the MS's
/// memory) names, calling `each` with every version's units; returns the tail's block word and
/// version. Every version must be complete and of `key`, and the chain end within 2^24 hops.
pub(super) fn chain(
    o: &CloverOptions,
    memory: &dyn MemoryView,
    key: &[u8],
    slot: u64,
    mut each: impl FnMut(u64),
) -> Result<(u64, Version), String> {
    let read = |a: RemoteAddr, n: usize| memory.read_memory(a, n).map_err(|e| e.to_string());
    let mut w = u64::from_le_bytes(read(RemoteAddr::host(o.ms_node(), slot), 8)?.try_into().expect("8 bytes"));
    for _ in 0..1u64 << 24 {
        let (at, units) = decode_block_word(w);
        let v = decode(&read(at, (units * UNIT) as usize)?)
            .ok_or_else(|| format!("key {key:02x?}: {at} is not a complete version"))?;
        if key != v.key {
            return Err(format!("key {key:02x?}: its chain reaches a version of {:02x?}", v.key));
        }
        each(units);
        if v.next == 0 {
            return Ok((w, v));
        }
        w = v.next;
    }
    Err(format!("key {key:02x?}: a chain longer than 2^24 versions (a cycle?)"))
}

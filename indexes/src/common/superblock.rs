//! The superblock format the one-sided hash tables share (`example`, `cluster`, `probe`): a
//! magic word, the table's header words, the number of memory nodes, then one remote address per
//! node, every field a little-endian u64. Each table keeps its own magic and the meaning of its
//! header words; this is only the framing, so that it is written and checked once.

use crate::common::bytes::u64_at;
use dmkit_rdma::RemoteAddr;

/// Bytes of a superblock with `header` header words and `nodes` node addresses.
pub const fn bytes(header: usize, nodes: usize) -> usize {
    8 * (2 + header + nodes)
}

/// `magic`, `header`, the node count, `bases`.
pub fn encode(magic: u64, header: &[u64], bases: &[RemoteAddr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes(header.len(), bases.len()));
    for w in std::iter::once(magic).chain(header.iter().copied()).chain([bases.len() as u64]) {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for b in bases {
        out.extend_from_slice(&b.raw().to_le_bytes());
    }
    out
}

/// The `header` header words and the node addresses of a superblock, checking its magic, that
/// it names 1 to `max_nodes` nodes and that `raw` holds them all; `Err` names what is wrong
/// (`table` names the table a wrong magic is not).
pub fn decode(
    raw: &[u8],
    magic: u64,
    header: usize,
    max_nodes: usize,
    table: &str,
) -> Result<(Vec<u64>, Vec<RemoteAddr>), String> {
    if raw.len() < bytes(header, 0) {
        return Err("superblock too short".into());
    }
    if u64_at(raw, 0) != magic {
        return Err(format!("no {table} here (magic {:#x})", u64_at(raw, 0)));
    }
    let nodes = u64_at(raw, 8 * (1 + header)) as usize;
    if nodes == 0 || nodes > max_nodes || raw.len() < bytes(header, nodes) {
        return Err(format!("superblock names {nodes} memory nodes"));
    }
    let words = (0..header).map(|i| u64_at(raw, 8 * (1 + i))).collect();
    let first = bytes(header, 0);
    Ok((words, (0..nodes).map(|i| RemoteAddr::from_raw(u64_at(raw, first + 8 * i))).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    #[test]
    fn round_trips_and_names_what_is_wrong() {
        let bases = [RemoteAddr::host(NodeId(0), 1 << 20), RemoteAddr::host(NodeId(1), 1 << 21)];
        let raw = encode(7, &[1, 2, 3], &bases);
        assert_eq!(raw.len(), bytes(3, 2));
        assert_eq!(decode(&raw, 7, 3, 4, "t"), Ok((vec![1, 2, 3], bases.to_vec())));
        assert_eq!(decode(&raw, 8, 3, 4, "table x"), Err("no table x here (magic 0x7)".into()));
        assert_eq!(decode(&raw[..40], 7, 3, 4, "t"), Err("superblock names 2 memory nodes".into()));
        assert_eq!(decode(&raw, 7, 3, 1, "t"), Err("superblock names 2 memory nodes".into()));
        assert_eq!(decode(&raw[..8], 7, 3, 4, "t"), Err("superblock too short".into()));
    }
}

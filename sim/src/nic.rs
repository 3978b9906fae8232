//! The NIC model's arithmetic: FIFO servers with a rate and a bandwidth, and the stage costs
//! derived from a [`Profile`].
//!
//! A verb passes requester NIC → wire → responder NIC → PCIe/memory (or the atomic unit, or
//! device memory) → responder NIC → wire → requester NIC. Servers keep their next-free time in
//! picoseconds so that a 45 Mops/s bound (22.2 ns a verb) is not rounded to whole nanoseconds;
//! events are scheduled at whole nanoseconds.

use crate::profile::Profile;
use crate::stats::VerbKind;

pub(crate) const PS_PER_NS: u64 = 1000;

/// A FIFO server: work arriving at `t` starts when the server is free and holds it for its
/// service time. Causality holds because callers present work in arrival order.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Server {
    next_free_ps: u64,
    busy_ps: u64,
}

impl Server {
    /// Serves work arriving at `arrive_ps` for `service_ps`; returns its finish time.
    pub(crate) fn serve(&mut self, arrive_ps: u64, service_ps: u64) -> u64 {
        let start = arrive_ps.max(self.next_free_ps);
        self.next_free_ps = start.saturating_add(service_ps);
        self.busy_ps = self.busy_ps.saturating_add(service_ps);
        self.next_free_ps
    }

    /// Total service time given so far (for utilisation).
    pub(crate) fn busy_ps(&self) -> u64 {
        self.busy_ps
    }
}

/// Per-verb stage costs of one profile, precomputed.
#[derive(Clone, Debug)]
pub(crate) struct StageCosts {
    pub responder_op_ps: f64,
    pub requester_op_ps: f64,
    pub link_ps_per_byte: f64,
    pub pcie_ps_per_byte: f64,
    pub atomic_op_ps: f64,
    pub host_same_address_ps: u64,
    pub device_same_address_ps: u64,
    pub requester_latency_ps: u64,
    pub wire_latency_ps: u64,
    pub responder_latency_ps: u64,
    pub completion_latency_ps: u64,
    pub pcie_read_latency_ps: u64,
    pub pcie_write_latency_ps: u64,
    pub device_access_latency_ps: u64,
    pub post_ps: u64,
    pub post_per_verb_ps: u64,
    pub poll_ps: u64,
    pub rpc_dispatch_ps: u64,
    pub context_miss_occupancy_ps: u64,
    mtu: u64,
    packet_header: u64,
    rdma_header: u64,
    atomic_header: u64,
    ack_header: u64,
    atomic_ack_header: u64,
}

fn ps(ns: u64) -> u64 {
    ns * PS_PER_NS
}

impl StageCosts {
    pub(crate) fn new(p: &Profile) -> StageCosts {
        StageCosts {
            responder_op_ps: 1e12 / p.responder_ops_per_s,
            requester_op_ps: 1e12 / p.requester_ops_per_s,
            link_ps_per_byte: 1e12 / p.link_bytes_per_s,
            pcie_ps_per_byte: 1e12 / p.pcie_bytes_per_s,
            atomic_op_ps: 1e12 / p.atomic_ops_per_s,
            host_same_address_ps: ps(p.host_atomic_same_address_ns),
            device_same_address_ps: ps(p.device_atomic_same_address_ns),
            requester_latency_ps: ps(p.requester_latency_ns),
            wire_latency_ps: ps(p.wire_latency_ns),
            responder_latency_ps: ps(p.responder_latency_ns),
            completion_latency_ps: ps(p.completion_latency_ns),
            pcie_read_latency_ps: ps(p.pcie_read_latency_ns),
            pcie_write_latency_ps: ps(p.pcie_write_latency_ns),
            device_access_latency_ps: ps(p.device_access_latency_ns),
            post_ps: (p.cpu.post_ns * PS_PER_NS as f64) as u64,
            post_per_verb_ps: (p.cpu.post_per_verb_ns * PS_PER_NS as f64) as u64,
            poll_ps: (p.cpu.poll_ns * PS_PER_NS as f64) as u64,
            rpc_dispatch_ps: (p.cpu.rpc_dispatch_ns * PS_PER_NS as f64) as u64,
            context_miss_occupancy_ps: ps(p.context_miss_occupancy_ns),
            mtu: p.mtu_bytes,
            packet_header: p.packet_header_bytes,
            rdma_header: p.rdma_header_bytes,
            atomic_header: p.atomic_header_bytes,
            ack_header: p.ack_header_bytes,
            atomic_ack_header: p.atomic_ack_header_bytes,
        }
    }

    fn wire_bytes(&self, payload: u64, ext: u64) -> u64 {
        payload + ext + payload.div_ceil(self.mtu).max(1) * self.packet_header
    }

    /// Wire bytes of a verb's request.
    pub(crate) fn request_bytes(&self, kind: VerbKind, len: u64) -> u64 {
        match kind {
            VerbKind::Read => self.wire_bytes(0, self.rdma_header),
            VerbKind::Write | VerbKind::Call => self.wire_bytes(len, self.rdma_header),
            VerbKind::Cas | VerbKind::Faa | VerbKind::MaskedCas | VerbKind::MaskedFaa => {
                self.wire_bytes(0, self.atomic_header)
            }
        }
    }

    /// Wire bytes of a verb's response (READ data, ACK, atomic ACK).
    pub(crate) fn response_bytes(&self, kind: VerbKind, len: u64) -> u64 {
        match kind {
            VerbKind::Read => self.wire_bytes(len, self.ack_header),
            VerbKind::Write | VerbKind::Call => self.wire_bytes(0, self.ack_header),
            VerbKind::Cas | VerbKind::Faa | VerbKind::MaskedCas | VerbKind::MaskedFaa => {
                self.wire_bytes(0, self.atomic_ack_header)
            }
        }
    }

    /// Wire bytes of a SEND of `len` bytes (RPC request or response).
    pub(crate) fn send_bytes(&self, len: u64) -> u64 {
        self.wire_bytes(len, 0)
    }

    pub(crate) fn link_ps(&self, bytes: u64) -> u64 {
        (bytes as f64 * self.link_ps_per_byte) as u64
    }

    pub(crate) fn pcie_ps(&self, bytes: u64) -> u64 {
        (bytes as f64 * self.pcie_ps_per_byte) as u64
    }

    /// Service time at a requester NIC's send side.
    pub(crate) fn requester_tx_ps(&self, wire_bytes: u64) -> u64 {
        (self.requester_op_ps as u64).max(self.link_ps(wire_bytes))
    }

    /// Service time at a responder NIC's receive side: the IOPS bound and the inbound link.
    pub(crate) fn responder_rx_ps(&self, wire_bytes: u64) -> u64 {
        (self.responder_op_ps as u64).max(self.link_ps(wire_bytes))
    }

    /// CPU time to post a batch of `verbs` verbs.
    pub(crate) fn post_cost_ps(&self, verbs: u64) -> u64 {
        self.post_ps + self.post_per_verb_ps * verbs
    }

    /// The unloaded round trip of one verb as its client sees it (post, network, memory, poll),
    /// composed from the same pieces the simulator charges, rounded up to whole nanoseconds at
    /// the same three event boundaries (arrival, memory access, completion).
    pub(crate) fn unloaded_round_trip_ns(&self, kind: VerbKind, len: u64, device: bool) -> u64 {
        let up = |ps: u64| ps.div_ceil(PS_PER_NS) * PS_PER_NS;
        let req = self.request_bytes(kind, len);
        let resp = self.response_bytes(kind, len);
        let posted = self.post_cost_ps(1) + self.requester_latency_ps;
        let arrive = up(posted + self.requester_tx_ps(req) + self.wire_latency_ps);
        let exec = up(arrive
            + self.responder_rx_ps(req)
            + self.responder_latency_ps
            + self.memory_stage_ps(kind, len, device));
        let complete = exec
            + self.link_ps(resp)
            + self.wire_latency_ps
            + self.link_ps(resp)
            + self.completion_latency_ps
            + self.poll_ps;
        complete.div_ceil(PS_PER_NS)
    }

    /// Unloaded time from the end of the responder's receive pipeline to the memory access.
    pub(crate) fn memory_stage_ps(&self, kind: VerbKind, len: u64, device: bool) -> u64 {
        match (kind, device) {
            (k, true) if k.is_rmw() => self.atomic_op_ps as u64 + self.device_access_latency_ps,
            (k, false) if k.is_rmw() => self.atomic_op_ps as u64 + self.pcie_read_latency_ps,
            (_, true) => self.device_access_latency_ps,
            (VerbKind::Read, false) => self.pcie_ps(len) + self.pcie_read_latency_ps,
            (_, false) => self.pcie_ps(len) + self.pcie_write_latency_ps,
        }
    }
}

/// A NIC's on-chip cache of contexts (queue-pair contexts, or address translations of
/// registered pages). A NIC's real caches are set-associative and their policy unpublished;
/// the model is a fully associative cache of the same number of entries with random
/// replacement, so that misses grow gradually with the entries in use, as measured on hardware
/// (StaR, ICNP'21; PipeDevice, CoNEXT'22), and not at a cliff as LRU's do under the near-cyclic
/// order in which closed-loop clients' verbs arrive. A capacity of 0 means the cache is not
/// modelled (every look-up hits). The victims come from a generator seeded by the run's seed.
#[derive(Clone, Debug, Default)]
pub(crate) struct ContextCache {
    capacity: usize,
    /// Key to its slot in `slots`.
    index: crate::memory::FixedMap<u64, u32>,
    slots: Vec<u64>,
    rng: u64,
    pub(crate) misses: u64,
}

impl ContextCache {
    pub(crate) fn new(capacity: u64, seed: u64) -> ContextCache {
        // SplitMix64 of the seed: a non-zero state for the xorshift below.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ContextCache { capacity: capacity as usize, rng: (z ^ (z >> 31)) | 1, ..ContextCache::default() }
    }

    pub(crate) fn modelled(&self) -> bool {
        self.capacity > 0
    }

    /// Looks `key` up; returns whether it missed (and so was fetched, evicting a random entry
    /// when the cache is full).
    pub(crate) fn miss(&mut self, key: u64) -> bool {
        if self.capacity == 0 || self.index.contains_key(&key) {
            return false;
        }
        self.misses += 1;
        if self.slots.len() < self.capacity {
            self.index.insert(key, self.slots.len() as u32);
            self.slots.push(key);
        } else {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let s = (self.rng % self.capacity as u64) as usize;
            self.index.remove(&self.slots[s]);
            self.index.insert(key, s as u32);
            self.slots[s] = key;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::ContextCache;

    #[test]
    fn context_cache_holds_what_fits_and_misses_in_proportion_beyond() {
        let mut c = ContextCache::new(4, 1);
        assert!((0..4).all(|k| c.miss(k)), "cold misses");
        assert!((0..4).all(|k| !c.miss(k)), "four keys fit in four entries");
        assert!(c.miss(9));
        assert_eq!(c.misses, 5);
        // Uniform look-ups over twice the entries: random replacement hits about half of them.
        let mut c = ContextCache::new(100, 7);
        let mut x = 1u64;
        for _ in 0..100_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            c.miss((x >> 33) % 200);
        }
        let ratio = c.misses as f64 / 100_000.0;
        assert!((0.45..0.55).contains(&ratio), "miss ratio {ratio}");
        // Cyclic look-ups over one more key than fit still hit mostly (LRU would miss them all).
        let mut c = ContextCache::new(100, 7);
        for _ in 0..100 {
            for k in 0..101 {
                c.miss(k);
            }
        }
        assert!(c.misses < 101 * 100 / 5, "{} misses", c.misses);
        let mut off = ContextCache::new(0, 1);
        assert!(!off.modelled() && !off.miss(7) && off.misses == 0);
    }
}

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

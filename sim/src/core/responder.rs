//! The responder side: the memory node's NIC (inbound link, IOPS, PCIe, device memory), the
//! ordering table that decides when an arrived verb may start, the memory units a verb is
//! sampled or written in, and direct memory access for tests and loading.

use super::{Core, Phase, Verb, ns_of};
use crate::memory::{FixedMap, SparseMemory};
use crate::nic::{PS_PER_NS, Server};
use crate::sched::{StepKind, WHOLE};
use crate::stats::{NodeStats, VerbKind};
use dmkit_rdma::{NodeId, Op, Region, RemoteAddr, VerbsError};
use rand::Rng;
use std::collections::{BTreeSet, VecDeque};

/// A memory or server node: registered memory, the responder side of its NIC, its services'
/// RPC threads.
#[derive(Debug)]
pub(super) struct TargetNode {
    pub(super) host: SparseMemory,
    pub(super) device: SparseMemory,
    pub(super) up: bool,
    pub(super) epoch: u64,
    pub(super) slowdown: f64,
    /// READs still to fail (`ReadFailure`s whose time came).
    pub(super) armed_read_failures: u32,
    pub(super) pcie: Server,
    pub(super) atomic: Server,
    /// Per-address next-free time of the atomic unit (ps), pruned when stale.
    pub(super) atomic_addr_free: FixedMap<u64, u64>,
    /// Two-step RMWs in flight per address, with the RMWs queued behind them.
    pub(super) rmw_locks: FixedMap<u64, VecDeque<u32>>,
    /// Service ids registered here.
    pub(super) services: BTreeSet<u16>,
    /// The clients of the node's RPC threads, and which of them are idle.
    pub(super) rpc_threads: Vec<u32>,
    pub(super) idle_rpc_threads: VecDeque<u32>,
    /// RPCs waiting for a thread, and RPCs being handled.
    pub(super) rpc_queue: VecDeque<u32>,
    pub(super) rpc_running: Vec<u32>,
    /// RPCs whose handler deferred the reply (`Service::dispatch` returned `None`).
    pub(super) rpc_deferred: Vec<u32>,
    pub(super) stats: NodeStats,
}

/// What a verb's look-ups in a NIC's caches missed: the entries fetched, and the fetches in
/// series on its path (the queue pair's context, then the page translations, fetched together).
pub(super) struct CacheFetches {
    pub(super) misses: u64,
    pub(super) dependent: u64,
}

impl CacheFetches {
    pub(super) fn new(context: bool, translations: u64) -> CacheFetches {
        CacheFetches {
            misses: u64::from(context) + translations,
            dependent: u64::from(context) + u64::from(translations > 0),
        }
    }
}

impl Core {
    pub(super) fn region_limit(&self, node: NodeId, region: Region) -> Result<u64, VerbsError> {
        if (node.0 as usize) >= self.nodes.len() {
            return Err(VerbsError::NoSuchNode(node));
        }
        Ok(match region {
            Region::Host => self.cfg.profile.host_memory_bytes,
            Region::Device => self.cfg.profile.device_memory_bytes,
        })
    }

    pub(crate) fn check_range(&self, addr: RemoteAddr, len: u64) -> Result<(), VerbsError> {
        let limit = self.region_limit(addr.node(), addr.region())?;
        match addr.offset().checked_add(len) {
            Some(end) if end <= limit => Ok(()),
            _ => Err(VerbsError::OutOfRange { addr, len }),
        }
    }

    pub(super) fn mem(&self, addr: RemoteAddr) -> &SparseMemory {
        let n = &self.nodes[addr.node().0 as usize];
        match addr.region() {
            Region::Host => &n.host,
            Region::Device => &n.device,
        }
    }

    pub(super) fn mem_mut(&mut self, addr: RemoteAddr) -> &mut SparseMemory {
        let n = &mut self.nodes[addr.node().0 as usize];
        match addr.region() {
            Region::Host => &mut n.host,
            Region::Device => &mut n.device,
        }
    }

    /// Reads memory directly (no time passes): tests, bulk load, invariant checks.
    pub(crate) fn peek(&self, addr: RemoteAddr, out: &mut [u8]) -> Result<(), VerbsError> {
        self.check_range(addr, out.len() as u64)?;
        self.mem(addr).read(addr.offset(), out);
        Ok(())
    }

    /// Writes memory directly (no time passes).
    pub(crate) fn poke(&mut self, addr: RemoteAddr, data: &[u8]) -> Result<(), VerbsError> {
        self.check_range(addr, data.len() as u64)?;
        self.mem_mut(addr).write(addr.offset(), data);
        Ok(())
    }

    pub(super) fn arrive(&mut self, v: u32) {
        let (qp, node, kind, len, region) = {
            let verb = &self.verbs[v];
            (verb.qp, verb.addr.node().0 as usize, verb.kind, verb.op.byte_len(), verb.addr.region())
        };
        let q = &mut self.qps[qp as usize];
        let head = q.in_transit.pop_front();
        debug_assert_eq!(head, Some(v), "verbs reach the responder in QP order");
        q.head_scheduled = false;
        self.schedule_qp_head(qp);
        if self.node_lost(v) {
            // Down, or restarted since the verb was posted: on hardware the queue pair broke
            // with the crash, so the verb completes in error instead of reaching the new
            // incarnation's memory.
            self.fail_verb_now(v);
            return;
        }
        if kind == VerbKind::Read && self.nodes[node].armed_read_failures > 0 {
            self.nodes[node].armed_read_failures -= 1;
            self.fault_counters.reads_failed += 1;
            self.verbs[v].timed_out = true;
            self.fail_verb_now(v);
            return;
        }
        let now_ps = self.now_ps();
        if self.instant {
            let verb = &mut self.verbs[v];
            verb.exec_ps = now_ps;
            verb.phase = Phase::Waiting;
            self.qps[qp as usize].at_responder.push_back(v);
            if self.may_start(v) {
                self.start(v);
            }
            return;
        }
        let fetches = self.responder_cache_fetches(v);
        let c = &self.costs;
        let n = &mut self.nodes[node];
        if n.slowdown > 1.0 {
            self.fault_counters.verbs_slowed += 1;
        }
        let req_bytes = c.request_bytes(kind, len);
        let rx_service =
            (c.responder_rx_ps(req_bytes) as f64 * n.slowdown) as u64 + fetches.misses * c.context_miss_occupancy_ps;
        let rx_done = self.nics[node].in_link.serve(now_ps, rx_service);
        n.stats.wire_bytes_in += req_bytes;
        let t =
            rx_done + (c.responder_latency_ps as f64 * n.slowdown) as u64 + fetches.dependent * c.pcie_read_latency_ps;
        let device = region == Region::Device;
        let exec_ps = match (kind, device) {
            (k, _) if k.is_rmw() => {
                let key = self.verbs[v].addr.raw();
                let same_address = if device { c.device_same_address_ps } else { c.host_same_address_ps };
                let free = n.atomic_addr_free.get(&key).copied().unwrap_or(0);
                let start = t.max(free);
                n.atomic_addr_free.insert(key, start + same_address);
                if n.atomic_addr_free.len() > 4096 {
                    n.atomic_addr_free.retain(|_, f| *f > now_ps);
                }
                let served = n.atomic.serve(start, c.atomic_op_ps as u64);
                served + if device { c.device_access_latency_ps } else { c.pcie_read_latency_ps }
            }
            (_, true) => t + c.device_access_latency_ps,
            (VerbKind::Read, false) => n.pcie.serve(t, c.pcie_ps(len)) + c.pcie_read_latency_ps,
            (_, false) => n.pcie.serve(t, c.pcie_ps(len)) + c.pcie_write_latency_ps,
        };
        let verb = &mut self.verbs[v];
        verb.exec_ps = exec_ps;
        verb.phase = Phase::Waiting;
        self.qps[qp as usize].at_responder.push_back(v);
        if self.may_start(v) {
            self.start(v);
        }
    }

    /// Looks up the responder NIC's caches for verb `v`: the context of the queue pair it
    /// arrived on, and the translation of every registered page of host memory it touches.
    /// Device memory is on the NIC and needs no translation.
    fn responder_cache_fetches(&mut self, v: u32) -> CacheFetches {
        let verb = &self.verbs[v];
        let (node, addr, len) = (verb.addr.node().0 as usize, verb.addr, verb.op.byte_len().max(1));
        let qp = self.hardware_qp(verb.qp);
        let nic = &mut self.nics[node];
        let context = nic.contexts.miss(qp);
        let mut translations = 0;
        if nic.translations.modelled() && addr.region() == Region::Host {
            let page = self.cfg.profile.translation_page_bytes;
            for p in addr.offset() / page..=(addr.offset() + len - 1) / page {
                translations += u64::from(nic.translations.miss(p));
            }
        }
        CacheFetches::new(context, translations)
    }

    /// The ordering table of DESIGN.md §1: may `v` start, given the verbs that arrived before
    /// it on its QP and are not done?
    ///
    /// A fence also stalls the send queue behind it, as on hardware (the requester does not
    /// process later work requests until the fenced one may go): a verb never starts before
    /// an earlier fenced verb of its QP has started.
    pub(super) fn may_start(&self, v: u32) -> bool {
        let verb = &self.verbs[v];
        let later_is_read = matches!(verb.op, Op::Read(_));
        for &u in &self.qps[verb.qp as usize].at_responder {
            if u == v {
                return true;
            }
            let earlier = &self.verbs[u];
            let blocks = match earlier.kind {
                // WRITE → anything: seen / placed after.
                VerbKind::Write | VerbKind::Call => true,
                // RMW → anything: seen / placed after (a READ may overtake under the switch).
                VerbKind::Cas | VerbKind::Faa | VerbKind::MaskedCas | VerbKind::MaskedFaa => {
                    !(later_is_read && !verb.fence && self.mm().rmw_then_read_unordered)
                }
                // READ → anything: unordered unless the later verb is fenced.
                VerbKind::Read => verb.fence,
            };
            if blocks || (earlier.fence && earlier.phase == Phase::Waiting) {
                return false;
            }
        }
        unreachable!("verb {v} is not in its QP's responder queue")
    }

    pub(super) fn unit_count(&self, verb: &Verb) -> u32 {
        let u = self.mm().atomicity_bytes as u64;
        let first = verb.addr.offset() / u;
        let last = (verb.addr.offset() + verb.op.byte_len() - 1) / u;
        (last - first + 1) as u32
    }

    /// Byte range `(offset, len)` of unit `i` of a READ or WRITE.
    pub(super) fn unit_range(&self, verb: &Verb, i: u32) -> (u64, u64) {
        let u = self.mm().atomicity_bytes as u64;
        let start = verb.addr.offset();
        let end = start + verb.op.byte_len();
        let lo = ((start / u + i as u64) * u).max(start);
        let hi = ((start / u + i as u64 + 1) * u).min(end);
        (lo, hi - lo)
    }

    pub(super) fn tearing_delay(&mut self) -> u64 {
        match self.cfg.faults.tearing {
            Some(t) if !self.queue.is_chosen() && !self.instant => self.rng.random_range(0..=t.window_ns),
            _ => 0,
        }
    }

    pub(super) fn start(&mut self, v: u32) {
        let t = ns_of(self.verbs[v].exec_ps).max(self.now_ns);
        let verb = &mut self.verbs[v];
        verb.phase = Phase::Running;
        if verb.kind.is_rmw() {
            verb.units_left = 1;
            if !self.split_rmw {
                self.schedule(t, StepKind::Unit(v, WHOLE));
                return;
            }
            let key = verb.addr.raw();
            match self.nodes[verb.addr.node().0 as usize].rmw_locks.get_mut(&key) {
                Some(waiters) => {
                    verb.phase = Phase::LockWait;
                    waiters.push_back(v);
                }
                None => {
                    self.nodes[verb.addr.node().0 as usize].rmw_locks.insert(key, VecDeque::new());
                    self.schedule(t, StepKind::RmwRead(v));
                }
            }
            return;
        }
        let units = self.unit_count(&self.verbs[v]);
        if !self.split_units || units == 1 {
            self.verbs[v].units_left = 1;
            self.schedule(t, StepKind::Unit(v, WHOLE));
            return;
        }
        if !self.queue.is_chosen() {
            self.fault_counters.torn_verbs += 1;
        }
        let ascending = match self.verbs[v].op {
            Op::Read(_) => self.mm().read_units_ascending,
            _ => !self.mm().write_units_arbitrary,
        };
        self.verbs[v].units_left = units;
        if ascending {
            self.verbs[v].next_unit = 1;
            let d = self.tearing_delay();
            self.schedule(t + d, StepKind::Unit(v, 0));
        } else {
            for i in 0..units {
                let d = self.tearing_delay();
                self.schedule(t + d, StepKind::Unit(v, i));
            }
        }
    }

    /// True if the verb's node crashed (or crashed and restarted) since the verb was posted.
    pub(super) fn node_lost(&self, v: u32) -> bool {
        let verb = &self.verbs[v];
        let n = &self.nodes[verb.addr.node().0 as usize];
        !n.up || n.epoch != verb.node_epoch
    }

    pub(super) fn unit(&mut self, v: u32, u: u32) {
        if self.node_lost(v) {
            self.verbs[v].failed = true;
        }
        if !self.verbs[v].failed {
            let verb = &self.verbs[v];
            let (offset, len) =
                if u == WHOLE { (verb.addr.offset(), verb.op.byte_len()) } else { self.unit_range(verb, u) };
            let at = (offset - verb.addr.offset()) as usize;
            let n = verb.addr.node().0 as usize;
            let region = verb.addr.region();
            let node = &mut self.nodes[n];
            let mem = match region {
                Region::Host => &mut node.host,
                Region::Device => &mut node.device,
            };
            let verb = &mut self.verbs[v];
            match &mut verb.op {
                Op::Read(buf) => mem.read(offset, &mut buf[at..at + len as usize]),
                Op::Write(buf) => mem.write(offset, &buf[at..at + len as usize]),
                op => {
                    let old = mem.read_u64(offset);
                    let new = op.rmw_new(old).expect("an RMW");
                    if new != old {
                        mem.write_u64(offset, new);
                    }
                    verb.rmw_old = old;
                }
            }
        }
        let verb = &mut self.verbs[v];
        verb.units_left -= 1;
        if verb.units_left == 0 {
            self.finish_at_responder(v);
        } else if verb.next_unit > 0 {
            // Ascending order: the next unit becomes enabled only now.
            let next = verb.next_unit;
            verb.next_unit += 1;
            let d = self.tearing_delay();
            self.schedule(self.now_ns + d, StepKind::Unit(v, next));
        }
    }

    /// The verb never reached memory: its node was down when it arrived.
    pub(super) fn fail_verb_now(&mut self, v: u32) {
        let verb = &mut self.verbs[v];
        verb.failed = true;
        verb.phase = Phase::Running;
        self.finish_at_responder(v);
    }

    pub(super) fn finish_at_responder(&mut self, v: u32) {
        let now_ps = self.now_ps();
        let verb = &mut self.verbs[v];
        verb.phase = Phase::Done;
        let qp = verb.qp;
        let node = verb.addr.node().0 as usize;
        if verb.failed {
            verb.resp_ps = now_ps + self.cfg.profile.transport_timeout_ns * PS_PER_NS;
            if !verb.timed_out {
                self.fault_counters.verbs_failed_node_down += 1;
            }
        } else if self.instant {
            verb.resp_ps = now_ps;
            let kind_index = VerbKind::of(&verb.op) as usize;
            let len = verb.op.byte_len();
            let stats = &mut self.nodes[node].stats;
            stats.verbs[kind_index].count += 1;
            stats.verbs[kind_index].payload_bytes += len;
        } else {
            let len = verb.op.byte_len();
            let kind_index = VerbKind::of(&verb.op) as usize;
            let resp_bytes = self.costs.response_bytes(verb.kind, len);
            let link = self.costs.link_ps(resp_bytes);
            let n = &mut self.nodes[node];
            let out = self.nics[node].out_link.serve(now_ps, link) + self.costs.wire_latency_ps;
            n.stats.wire_bytes_out += resp_bytes;
            n.stats.verbs[kind_index].count += 1;
            n.stats.verbs[kind_index].payload_bytes += len;
            let client = qp / self.nodes.len() as u32;
            let requester = self.clients[client as usize].node.0 as usize;
            verb.resp_ps = self.nics[requester].in_link.serve(out, link) + self.costs.completion_latency_ps;
        }
        // Later verbs of the QP that waited on this one may start now.
        let q = &mut self.qps[qp as usize];
        if let Some(pos) = q.at_responder.iter().position(|&x| x == v) {
            q.at_responder.remove(pos);
            let waiting: Vec<u32> =
                q.at_responder.iter().copied().filter(|&x| self.verbs[x].phase == Phase::Waiting).collect();
            for w in waiting {
                if self.verbs[w].phase == Phase::Waiting && self.may_start(w) {
                    self.start(w);
                }
            }
        }
        self.advance_completions(qp);
    }
}

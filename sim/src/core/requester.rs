//! The requester side: queue pairs, posting a batch (the post's CPU cost, the compute node
//! NIC's outbound link), issue, and completions in QP order.

use super::{BatchDone, Core, Outcome, TaskId, ns_of};
use crate::nic::PS_PER_NS;
use crate::sched::StepKind;
use crate::stats::VerbKind;
use dmkit_rdma::{MaskedAtomics, NodeId, Op, Region, RemoteAddr, Request, Response, VerbsError, validate_batch};
use rand::Rng;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    InTransit,
    /// At the responder, waiting for the ordering rules.
    Waiting,
    /// Allowed to start, but queued behind another two-step RMW on the same address.
    LockWait,
    Running,
    Done,
}

#[derive(Debug)]
pub(super) struct Verb {
    pub(super) batch: u32,
    /// The next verb of the same batch, or `NO_VERB`.
    pub(super) next_in_batch: u32,
    pub(super) qp: u32,
    pub(super) addr: RemoteAddr,
    pub(super) op: Op,
    pub(super) fence: bool,
    pub(super) kind: VerbKind,
    pub(super) arrive_ps: u64,
    pub(super) exec_ps: u64,
    pub(super) node_epoch: u64,
    pub(super) phase: Phase,
    /// Unit steps still to run; the next one for ascending order.
    pub(super) units_left: u32,
    pub(super) next_unit: u32,
    pub(super) failed: bool,
    /// Failed by a `ReadFailure` (completes with `Timeout`, not `NodeDown`).
    pub(super) timed_out: bool,
    pub(super) rmw_old: u64,
    pub(super) rmw_new: u64,
    pub(super) resp_ps: u64,
}

#[derive(Debug)]
pub(crate) struct Batch {
    pub(super) client: u32,
    /// When the post's CPU work ends and the verbs leave for the NIC.
    pub(super) posted_ps: u64,
    /// The batch's verbs in order, linked through `Verb::next_in_batch` (no allocation per batch).
    pub(super) first_verb: u32,
    pub(super) len: u32,
    pub(super) pending: u32,
    pub(super) signaled: bool,
    pub(super) resp_ps_max: u64,
    pub(super) waiter: Option<TaskId>,
    /// The responses of the verbs before the first that failed, and that failure.
    pub(super) outcome: Outcome<BatchDone>,
}

/// `Verb::arrive_ps` of a verb whose post waits for its thread's CPU.
pub(super) const NOT_ISSUED: u64 = u64::MAX;

/// End of a batch's verb list.
pub(super) const NO_VERB: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(super) struct Qp {
    pub(super) in_transit: VecDeque<u32>,
    /// Whether the head of `in_transit` has its Arrive step scheduled.
    pub(super) head_scheduled: bool,
    pub(super) last_arrive_ps: u64,
    pub(super) at_responder: VecDeque<u32>,
    pub(super) outstanding: VecDeque<u32>,
    pub(super) last_completion_ps: u64,
}

impl Core {
    /// Posts a batch. Returns the batch id for a signaled batch.
    pub(crate) fn post(&mut self, client: u32, requests: Vec<Request>, signaled: bool) -> Result<u32, VerbsError> {
        let node = validate_batch(&requests, self.cfg.profile.max_message_bytes)?;
        for r in &requests {
            self.check_range(r.addr, r.op.byte_len())?;
            self.allocations.check(self.now_ns, client, r.op.name(), r.addr, r.op.byte_len());
            if self.cfg.masked_atomics == MaskedAtomics::Emulated
                && matches!(r.op, Op::MaskedCas { .. } | Op::MaskedFaa { .. })
            {
                return Err(VerbsError::Unsupported(
                    "masked atomics are emulated on this backend: use Verbs::masked_cas / masked_faa outside batches",
                ));
            }
        }
        let qp = self.qp_index(client, node);
        if self.instant_fast_path()
            && self.qps[qp as usize].outstanding.is_empty()
            && self.nodes.get(node.0 as usize).is_none_or(|n| n.armed_read_failures == 0)
        {
            if let Some(batch) = self.post_instant(client, node, requests, signaled) {
                return Ok(batch);
            }
            unreachable!("post_instant takes every batch it is offered");
        }
        // The post's CPU work is booked now, in the thread's order; if the thread is busy, the
        // verbs reach the NIC only when that work ends (an Issue step then), so that a post
        // waiting for the CPU does not hold the NIC for other threads meanwhile.
        let busy = self.thread_busy(client);
        let posted_ps = self.charge_thread(client, self.costs.post_cost_ps(requests.len() as u64));
        let batch = self.batches.insert(Batch {
            client,
            posted_ps,
            first_verb: NO_VERB,
            len: requests.len() as u32,
            pending: requests.len() as u32,
            signaled,
            resp_ps_max: 0,
            waiter: None,
            outcome: Outcome::Pending,
        });
        self.batches_posted += 1;
        let mut last = None;
        for r in requests {
            let kind = VerbKind::of(&r.op);
            let counted = &mut self.clients[client as usize].stats.verbs[VerbKind::of(&r.op) as usize];
            counted.count += 1;
            counted.payload_bytes += r.op.byte_len();
            let v = self.verbs.insert(Verb {
                batch,
                next_in_batch: NO_VERB,
                qp,
                addr: r.addr,
                op: r.op,
                fence: r.fence,
                kind,
                arrive_ps: NOT_ISSUED,
                exec_ps: 0,
                // The incarnation the verb's queue pair is connected to: a verb posted before a
                // crash never executes on the restarted node (`NodeCrash`).
                node_epoch: self.nodes.get(r.addr.node().0 as usize).map_or(0, |n| n.epoch),
                phase: Phase::InTransit,
                units_left: 0,
                next_unit: 0,
                failed: false,
                timed_out: false,
                rmw_old: 0,
                rmw_new: 0,
                resp_ps: 0,
            });
            match last {
                Some(prev) => self.verbs[prev].next_in_batch = v,
                None => self.batches[batch].first_verb = v,
            }
            last = Some(v);
            let q = &mut self.qps[qp as usize];
            q.outstanding.push_back(v);
            q.in_transit.push_back(v);
            self.verbs_posted += 1;
        }
        if busy {
            self.schedule(ns_of(posted_ps), StepKind::Issue(batch));
        } else {
            self.issue(batch);
        }
        Ok(batch)
    }

    /// Bulk-load mode's fast path: with nothing of the QP in flight and no chooser, the verbs
    /// are applied now, in order, and the batch completes at once — the same outcome as the
    /// stepped path in instant mode (every stage costs nothing there), without the three steps
    /// per verb. A down node fails the batch as the stepped path would. Counted like the
    /// stepped path (verbs at the node and the client, one round trip per signalled batch);
    /// one step is counted per batch, so logical time still advances.
    pub(super) fn post_instant(
        &mut self,
        client: u32,
        node: NodeId,
        requests: Vec<Request>,
        signaled: bool,
    ) -> Option<u32> {
        let n = node.0 as usize;
        let up = self.nodes[n].up;
        let mut responses = Vec::with_capacity(requests.len());
        for r in requests {
            let kind_index = VerbKind::of(&r.op) as usize;
            let len = r.op.byte_len();
            let counted = &mut self.clients[client as usize].stats.verbs[kind_index];
            counted.count += 1;
            counted.payload_bytes += len;
            self.verbs_posted += 1;
            if !up {
                self.fault_counters.verbs_failed_node_down += 1;
                continue;
            }
            let target = &mut self.nodes[n];
            target.stats.verbs[kind_index].count += 1;
            target.stats.verbs[kind_index].payload_bytes += len;
            let mem = match r.addr.region() {
                Region::Host => &mut target.host,
                Region::Device => &mut target.device,
            };
            let offset = r.addr.offset();
            responses.push(match r.op {
                Op::Read(mut buf) => {
                    mem.read(offset, &mut buf[..]);
                    Response::Read(buf)
                }
                Op::Write(buf) => {
                    mem.write(offset, &buf);
                    Response::Write(buf)
                }
                op => {
                    let old = mem.read_u64(offset);
                    let new = op.rmw_new(old).expect("an RMW");
                    if new != old {
                        mem.write_u64(offset, new);
                    }
                    Response::Atomic(old)
                }
            });
        }
        self.batches_posted += 1;
        self.count_instant_step(0x1_57a7);
        let outcome = if up { Ok((responses, None)) } else { Err(VerbsError::NodeDown(node)) };
        let batch = self.batches.insert(Batch {
            client,
            posted_ps: self.now_ps(),
            first_verb: NO_VERB,
            len: 0,
            pending: 0,
            signaled,
            resp_ps_max: 0,
            waiter: None,
            outcome: Outcome::Ready(outcome),
        });
        if signaled {
            self.count_round_trip(client, self.now_ps());
        } else {
            self.batches.remove(batch);
        }
        Some(batch)
    }

    /// True if the client's thread has CPU work booked past now.
    pub(super) fn thread_busy(&self, client: u32) -> bool {
        !self.instant && self.threads[self.clients[client as usize].thread as usize].cpu_free_ps > self.now_ps()
    }

    /// The requester-side stages of a batch's verbs: the compute node's NIC sends them, in
    /// order, from the end of the post's CPU work.
    pub(super) fn issue(&mut self, batch: u32) {
        let (client, posted_ps) = (self.batches[batch].client, self.batches[batch].posted_ps);
        let nic = self.clients[client as usize].node.0 as usize;
        let first = self.batches[batch].first_verb;
        let qp = self.verbs[first].qp;
        let mut next = first;
        while next != NO_VERB {
            let v = next;
            next = self.verbs[v].next_in_batch;
            let (kind, len) = (self.verbs[v].kind, self.verbs[v].op.byte_len());
            let arrive_ps = if self.instant {
                posted_ps
            } else {
                // The sending NIC needs the queue pair's context too.
                let hw_qp = self.hardware_qp(qp);
                let fetches = super::responder::CacheFetches::new(self.nics[nic].contexts.miss(hw_qp), 0);
                let req_bytes = self.costs.request_bytes(kind, len);
                let tx_start =
                    posted_ps + self.costs.requester_latency_ps + fetches.dependent * self.costs.pcie_read_latency_ps;
                let tx_service =
                    self.costs.requester_tx_ps(req_bytes) + fetches.misses * self.costs.context_miss_occupancy_ps;
                let tx_done = self.nics[nic].out_link.serve(tx_start, tx_service);
                let mut arrive_ps = tx_done + self.costs.wire_latency_ps;
                if let Some(d) = self.cfg.faults.extra_delay {
                    if self.rng.random_bool(d.probability) {
                        arrive_ps += self.rng.random_range(1..=d.max_ns) * PS_PER_NS;
                        self.fault_counters.delays_injected += 1;
                    }
                }
                arrive_ps
            };
            // Never reorder a QP: a verb arrives no earlier than the one posted before it.
            let q = &mut self.qps[qp as usize];
            let arrive_ps = arrive_ps.max(q.last_arrive_ps);
            q.last_arrive_ps = arrive_ps;
            self.verbs[v].arrive_ps = arrive_ps;
        }
        self.schedule_qp_head(qp);
    }

    /// Schedules the Arrive step of the QP's oldest verb in transit, once it has been issued.
    pub(super) fn schedule_qp_head(&mut self, qp: u32) {
        let q = &self.qps[qp as usize];
        if q.head_scheduled {
            return;
        }
        if let Some(&head) = q.in_transit.front() {
            let arrive_ps = self.verbs[head].arrive_ps;
            if arrive_ps != NOT_ISSUED {
                self.qps[qp as usize].head_scheduled = true;
                let at = ns_of(arrive_ps).max(self.now_ns);
                self.schedule(at, StepKind::Arrive(head));
            }
        }
    }

    /// Completions are delivered in QP order: pop done verbs off the front.
    pub(super) fn advance_completions(&mut self, qp: u32) {
        while let Some(&front) = self.qps[qp as usize].outstanding.front() {
            if self.verbs[front].phase != Phase::Done {
                break;
            }
            self.qps[qp as usize].outstanding.pop_front();
            let (batch, resp_ps) = (self.verbs[front].batch, self.verbs[front].resp_ps);
            let b = &mut self.batches[batch];
            b.pending -= 1;
            b.resp_ps_max = b.resp_ps_max.max(resp_ps);
            if b.pending > 0 {
                continue;
            }
            let resp_max = b.resp_ps_max;
            let q = &mut self.qps[qp as usize];
            if b.signaled {
                let t = resp_max.max(q.last_completion_ps).max(self.now_ns * PS_PER_NS);
                q.last_completion_ps = t;
                let poll = if self.instant { 0 } else { self.costs.poll_ps };
                self.schedule(ns_of(t + poll), StepKind::Complete(batch));
            } else {
                q.last_completion_ps = q.last_completion_ps.max(resp_max);
                let b = self.batches.remove(batch);
                let mut next = b.first_verb;
                while next != NO_VERB {
                    next = self.verbs.remove(next).next_in_batch;
                }
            }
        }
    }

    pub(super) fn complete(&mut self, batch: u32) {
        let mut next = self.batches[batch].first_verb;
        let mut completed = Vec::with_capacity(self.batches[batch].len as usize);
        let mut error = None;
        while next != NO_VERB {
            let verb = self.verbs.remove(next);
            next = verb.next_in_batch;
            let response = if verb.timed_out {
                Err(VerbsError::Timeout(verb.addr.node()))
            } else if verb.failed {
                Err(VerbsError::NodeDown(verb.addr.node()))
            } else {
                Ok(match verb.op {
                    Op::Read(buf) => Response::Read(buf),
                    Op::Write(buf) => Response::Write(buf),
                    _ => Response::Atomic(verb.rmw_old),
                })
            };
            // Verbs after the first failure are not reported (on hardware they are flushed).
            match response {
                Ok(r) if error.is_none() => completed.push(r),
                Err(e) if error.is_none() => error = Some(e),
                _ => {}
            }
        }
        let b = &mut self.batches[batch];
        match b.outcome {
            Outcome::Abandoned => {
                self.batches.remove(batch);
            }
            _ => {
                b.outcome = Outcome::Ready(Ok((completed, error)));
                let (client, waiter, posted_ps) = (b.client, b.waiter, b.posted_ps);
                self.count_round_trip(client, posted_ps);
                self.wake_after_poll(client, waiter);
            }
        }
    }
}

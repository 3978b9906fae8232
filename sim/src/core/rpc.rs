//! Two-sided calls: a request crosses to a server node, waits for an idle RPC thread, runs
//! the service's handler as a task (the executor starts it from a `Dispatch`), and its reply
//! (immediate or deferred) crosses back.

use super::{Core, Outcome, TaskId, ns_of};
use crate::sched::StepKind;
use crate::stats::VerbKind;
use dmkit_rdma::{NodeId, VerbsError};

#[derive(Debug)]
pub(crate) struct Rpc {
    pub(super) client: u32,
    pub(super) node: NodeId,
    pub(super) service: u16,
    pub(super) request: Vec<u8>,
    pub(super) node_epoch: u64,
    /// The RPC thread (its client id) handling it.
    pub(super) handler: Option<u32>,
    /// When the caller's post CPU work ends.
    pub(super) posted_ps: u64,
    pub(super) waiter: Option<TaskId>,
    pub(super) result: Option<Result<Vec<u8>, VerbsError>>,
    pub(super) outcome: Outcome<Vec<u8>>,
    /// Unique over the run (the slab reuses ids): a deferred reply names it.
    pub(super) tag: u64,
    /// Answered already (a reply sent while its handler was still running).
    pub(super) replied: bool,
}

/// A request handed to the executor: run `service`'s handler for `rpc` as a task of the RPC
/// thread's client `handler`.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) rpc: u32,
    pub(crate) node: NodeId,
    pub(crate) service: u16,
    pub(crate) handler: u32,
    pub(crate) request: Vec<u8>,
    /// The RPC's unique tag, for a deferred reply.
    pub(crate) tag: u64,
    /// The node's epoch when the handler started (a crash since ends it).
    pub(crate) node_epoch: u64,
}

impl Core {
    pub(crate) fn call(
        &mut self,
        client: u32,
        node: NodeId,
        service: u16,
        request: Vec<u8>,
    ) -> Result<u32, VerbsError> {
        if !self.is_target(node) {
            return Err(VerbsError::NoSuchNode(node));
        }
        let busy = self.thread_busy(client);
        let posted_ps = self.charge_thread(client, self.costs.post_cost_ps(1));
        let counted = &mut self.clients[client as usize].stats.verbs[VerbKind::Call as usize];
        counted.count += 1;
        counted.payload_bytes += request.len() as u64;
        let r = self.rpcs.insert(Rpc {
            client,
            node,
            service,
            request,
            // As for verbs: a call posted to one incarnation is never served by the next.
            node_epoch: self.nodes.get(node.0 as usize).map_or(0, |n| n.epoch),
            handler: None,
            posted_ps,
            waiter: None,
            result: None,
            outcome: Outcome::Pending,
            tag: self.calls_posted,
            replied: false,
        });
        self.calls_posted += 1;
        if busy {
            self.schedule(ns_of(posted_ps), StepKind::IssueCall(r));
        } else {
            self.issue_call(r);
        }
        Ok(r)
    }

    /// The SEND of a call leaves the caller's NIC.
    pub(super) fn issue_call(&mut self, r: u32) {
        if self.instant_fast_path() {
            // Bulk-load mode: the SEND arrives now (instant calls take no time), so it is
            // delivered now rather than as a step behind the others of this instant.
            self.count_instant_step(0xca11);
            self.rpc_arrive(r);
            return;
        }
        let rpc = &self.rpcs[r];
        let posted_ps = rpc.posted_ps;
        let arrive = if self.instant {
            posted_ps
        } else {
            let nic = self.clients[rpc.client as usize].node.0 as usize;
            let bytes = self.costs.send_bytes(rpc.request.len() as u64);
            let tx_start = posted_ps + self.costs.requester_latency_ps;
            self.nics[nic].out_link.serve(tx_start, self.costs.requester_tx_ps(bytes)) + self.costs.wire_latency_ps
        };
        self.schedule(ns_of(arrive).max(self.now_ns), StepKind::RpcArrive(r));
    }

    /// The caller learns of a failed RPC when its transport gives up.
    pub(super) fn rpc_fail(&mut self, r: u32, error: VerbsError) {
        if matches!(error, VerbsError::NodeDown(_)) {
            self.fault_counters.calls_failed_node_down += 1;
        }
        self.rpcs[r].result = Some(Err(error));
        let at = self.now_ns + self.cfg.profile.transport_timeout_ns;
        self.schedule(at, StepKind::RpcComplete(r));
    }

    /// The request's SEND reaches the server's NIC. As any inbound request, it takes a slot of
    /// the NIC's operation rate and its link, then the NIC's receive pipeline; then the NIC
    /// DMA-writes the message into the pre-posted receive buffer (and its completion after
    /// it), and a server thread sees it once that posted write is visible: the same stages a
    /// WRITE of the request's bytes pays before it is placed. Until 2026-11-30 a call skipped the
    /// last two and was dispatched the moment it arrived, which made a small call about the
    /// responder's pipeline and PCIe write latency (0.5 us on `cx5-100g`) cheaper than a small
    /// READ; small eRPC round trips are 2–3 us where one-sided 64-B READs are 1.5–2.5 us (the
    /// HStore digest, §7).
    pub(super) fn rpc_arrive(&mut self, r: u32) {
        let Some(n) = self.rpc_target_alive(r) else { return };
        let len = self.rpcs[r].request.len() as u64;
        let bytes = self.costs.send_bytes(len);
        self.nodes[n].stats.wire_bytes_in += bytes;
        // Instant (bulk-load) calls use no NIC capacity and take no time, as instant verbs do: a
        // load would otherwise leave the link busy far past the end of the load.
        if self.instant {
            self.rpc_deliver(r);
            return;
        }
        let now_ps = self.now_ps();
        let c = &self.costs;
        let slowdown = self.nodes[n].slowdown;
        let rx = (c.responder_rx_ps(bytes) as f64 * slowdown) as u64;
        let rx_done = self.nics[n].in_link.serve(now_ps, rx);
        let pipeline_done = rx_done + (c.responder_latency_ps as f64 * slowdown) as u64;
        let visible = self.nodes[n].pcie.serve(pipeline_done, c.pcie_ps(len)) + c.pcie_write_latency_ps;
        self.schedule(ns_of(visible).max(self.now_ns), StepKind::RpcDeliver(r));
    }

    /// The index of RPC `r`'s node if the incarnation it was posted to is still up; otherwise
    /// the call fails (as a verb does, a call is never served by the node's next incarnation).
    fn rpc_target_alive(&mut self, r: u32) -> Option<usize> {
        let node = self.rpcs[r].node;
        let n = node.0 as usize;
        if self.nodes[n].up && self.nodes[n].epoch == self.rpcs[r].node_epoch {
            Some(n)
        } else {
            self.rpc_fail(r, VerbsError::NodeDown(node));
            None
        }
    }

    /// The request is in the server's memory: a thread of the node takes it up.
    pub(super) fn rpc_deliver(&mut self, r: u32) {
        let Some(n) = self.rpc_target_alive(r) else { return };
        let node = self.rpcs[r].node;
        let service = self.rpcs[r].service;
        if !self.nodes[n].services.contains(&service) {
            // Answered by the receiving thread without running a handler.
            self.rpc_respond(r, Err(VerbsError::UnknownService { node, service }));
            return;
        }
        self.nodes[n].rpc_queue.push_back(r);
        self.dispatch_rpcs(n);
    }

    /// Hands queued RPCs to idle RPC threads of node `n`.
    pub(super) fn dispatch_rpcs(&mut self, n: usize) {
        while !self.nodes[n].rpc_queue.is_empty() && !self.nodes[n].idle_rpc_threads.is_empty() {
            let r = self.nodes[n].rpc_queue.pop_front().expect("non-empty");
            let handler = self.nodes[n].idle_rpc_threads.pop_front().expect("non-empty");
            self.nodes[n].rpc_running.push(r);
            let dispatch = (self.costs.rpc_dispatch_ps as f64 * self.nodes[n].slowdown) as u64;
            self.charge_thread(handler, dispatch);
            let rpc = &mut self.rpcs[r];
            rpc.handler = Some(handler);
            self.dispatches.push(Dispatch {
                rpc: r,
                node: rpc.node,
                service: rpc.service,
                handler,
                request: std::mem::take(&mut rpc.request),
                tag: rpc.tag,
                node_epoch: rpc.node_epoch,
            });
        }
    }

    /// A handler finished: its thread sends `reply` (or, with `None`, leaves the RPC waiting for
    /// [`Core::rpc_reply_deferred`] or the node's crash) and takes the next queued RPC. A reply
    /// sent while the handler still ran (from another thread) already answered it.
    pub(crate) fn rpc_handled(&mut self, d: &Dispatch, reply: Option<Vec<u8>>) {
        let n = d.node.0 as usize;
        if self.nodes[n].epoch != d.node_epoch || !self.nodes[n].up {
            // The node crashed under the handler; the crash already failed the RPC.
            return;
        }
        let open = self.rpcs.get(d.rpc).is_some_and(|rpc| rpc.tag == d.tag && !rpc.replied);
        self.nodes[n].idle_rpc_threads.push_back(d.handler);
        if open {
            self.nodes[n].rpc_running.retain(|&x| x != d.rpc);
            match reply {
                Some(bytes) => {
                    let posted = self.charge_thread(d.handler, self.costs.post_cost_ps(1));
                    self.send_reply(d.rpc, Ok(bytes), posted);
                }
                None => self.nodes[n].rpc_deferred.push(d.rpc),
            }
        }
        self.dispatch_rpcs(n);
    }

    /// Sends the deferred reply of RPC `r` (tagged `tag`) from `client`'s thread, which must run
    /// on the RPC's node: after its handler deferred it, or while the handler still runs (as on
    /// hardware, where another thread may answer a call the moment it holds its responder).
    pub(crate) fn rpc_reply_deferred(
        &mut self,
        client: u32,
        r: u32,
        tag: u64,
        reply: Vec<u8>,
    ) -> Result<(), VerbsError> {
        let node = self.clients[client as usize].node;
        let n = node.0 as usize;
        let owed = self.is_target(node)
            && self.nodes[n].up
            && (self.nodes[n].rpc_deferred.contains(&r) || self.nodes[n].rpc_running.contains(&r))
            && self.rpcs.get(r).is_some_and(|rpc| rpc.tag == tag && rpc.node == node && !rpc.replied);
        if !owed {
            return Err(VerbsError::Protocol(format!(
                "{node} owes no reply to call {r} (tag {tag}): answered already, failed by a crash, or another node's"
            )));
        }
        self.nodes[n].rpc_deferred.retain(|&x| x != r);
        self.nodes[n].rpc_running.retain(|&x| x != r);
        self.rpcs[r].replied = true;
        let posted = self.charge_thread(client, self.costs.post_cost_ps(1));
        self.send_reply(r, Ok(reply), posted);
        Ok(())
    }

    /// Replies from the NIC at once (no handler ran).
    pub(super) fn rpc_respond(&mut self, r: u32, result: Result<Vec<u8>, VerbsError>) {
        let now_ps = self.now_ps();
        self.send_reply(r, result, now_ps);
    }

    pub(super) fn send_reply(&mut self, r: u32, result: Result<Vec<u8>, VerbsError>, at_ps: u64) {
        let rpc = &self.rpcs[r];
        let node = rpc.node.0 as usize;
        let len = result.as_ref().map_or(0, |b| b.len() as u64);
        let bytes = self.costs.send_bytes(len);
        let link = self.costs.link_ps(bytes);
        let stats = &mut self.nodes[node].stats;
        stats.verbs[VerbKind::Call as usize].count += 1;
        stats.verbs[VerbKind::Call as usize].payload_bytes += len;
        stats.wire_bytes_out += bytes;
        let caller = self.clients[rpc.client as usize].node.0 as usize;
        let done = if self.instant {
            at_ps
        } else {
            let out = self.nics[node].out_link.serve(at_ps + self.costs.requester_latency_ps, link)
                + self.costs.wire_latency_ps;
            self.nics[caller].in_link.serve(out, link) + self.costs.completion_latency_ps + self.costs.poll_ps
        };
        self.rpcs[r].result = Some(result);
        if self.instant_fast_path() {
            // Bulk-load mode: the reply is back now; the caller finds it when next polled.
            self.count_instant_step(0x2e91);
            self.rpc_complete(r);
            return;
        }
        self.schedule(ns_of(done).max(self.now_ns), StepKind::RpcComplete(r));
    }

    pub(super) fn rpc_complete(&mut self, r: u32) {
        let rpc = &mut self.rpcs[r];
        let result = rpc.result.take().expect("an RPC completes with a result");
        match rpc.outcome {
            Outcome::Abandoned => {
                self.rpcs.remove(r);
            }
            _ => {
                rpc.outcome = Outcome::Ready(result);
                let (client, waiter, posted_ps) = (rpc.client, rpc.waiter, rpc.posted_ps);
                self.count_round_trip(client, posted_ps);
                self.wake_after_poll(client, waiter);
            }
        }
    }
}

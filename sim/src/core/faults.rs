//! Faults: client crashes, node crashes (crash-stop: memory and service state lost) and restarts
//! (a new epoch), slowdowns and READ failures, each a step at its scheduled time.

use super::Core;
use crate::sched::StepKind;
use dmkit_rdma::{NodeId, VerbsError};

#[derive(Clone, Copy, Debug)]
pub(super) enum FaultEvent {
    CrashClient(u32),
    /// A node crashes, and restarts this many ns later if set.
    CrashNode(u16, Option<u64>),
    RestartNode(u16),
    SlowStart(u16, f64),
    SlowEnd(u16),
    /// The next READ to reach this memory node fails (`ReadFailure`).
    ArmReadFailure(u16),
}

impl Core {
    /// Schedules a READ failure (`ReadFailure`) on a memory node during the run.
    pub(crate) fn add_read_failure(&mut self, failure: crate::config::ReadFailure) -> Result<(), String> {
        if failure.node >= self.cfg.topology.memory_nodes {
            return Err(format!(
                "read failure names node {}, but memory nodes are 0..{}",
                failure.node, self.cfg.topology.memory_nodes
            ));
        }
        if failure.at_ns < self.now_ns {
            return Err(format!("read failure on node {} at {} ns: in the past", failure.node, failure.at_ns));
        }
        self.schedule_fault(failure.at_ns, FaultEvent::ArmReadFailure(failure.node));
        Ok(())
    }

    /// Schedules a crash (and restart) of a memory or server node during the run.
    pub(crate) fn add_node_crash(&mut self, crash: crate::config::NodeCrash) -> Result<(), String> {
        if crash.node >= self.cfg.topology.target_nodes() {
            return Err(format!(
                "node crash names node {}, but memory and server nodes are 0..{}",
                crash.node,
                self.cfg.topology.target_nodes()
            ));
        }
        if crash.at_ns < self.now_ns || crash.restart_at_ns.is_some_and(|r| r <= crash.at_ns) {
            return Err(format!(
                "node {} crash at {} ns: in the past, or restarting before it crashes",
                crash.node, crash.at_ns
            ));
        }
        self.schedule_fault(
            crash.at_ns,
            FaultEvent::CrashNode(crash.node, crash.restart_at_ns.map(|r| r - crash.at_ns)),
        );
        Ok(())
    }

    pub(super) fn schedule_fault(&mut self, at_ns: u64, event: FaultEvent) {
        self.faults.push(event);
        let index = (self.faults.len() - 1) as u32;
        self.schedule(at_ns, StepKind::Fault(index));
    }

    pub(super) fn fault(&mut self, event: FaultEvent) {
        match event {
            FaultEvent::CrashClient(c) => {
                if let Some(task) = self.clients.get_mut(c as usize).and_then(|ci| ci.task.take()) {
                    self.fault_counters.client_crashes += 1;
                    self.tasks.crashed(task);
                }
            }
            FaultEvent::CrashNode(n, restart_after_ns) => {
                self.crash_node(NodeId(n));
                // The restart is scheduled by the crash, so that in chooser runs (where a fault
                // step may run before its time) a node restarts only after it crashed.
                if let Some(after) = restart_after_ns {
                    self.schedule_fault(self.now_ns + after, FaultEvent::RestartNode(n));
                }
            }
            FaultEvent::RestartNode(n) => {
                let node = &mut self.nodes[n as usize];
                if !node.up {
                    node.up = true;
                    node.epoch += 1;
                    node.idle_rpc_threads = node.rpc_threads.iter().copied().collect();
                    self.fault_counters.node_restarts += 1;
                    self.restarted.push(NodeId(n));
                }
            }
            FaultEvent::SlowStart(n, factor) => self.nodes[n as usize].slowdown = factor,
            FaultEvent::SlowEnd(n) => self.nodes[n as usize].slowdown = 1.0,
            FaultEvent::ArmReadFailure(n) => self.nodes[n as usize].armed_read_failures += 1,
        }
    }

    /// Crash-stop: memory and services' state are lost, every task on the node's threads is
    /// dropped, and the RPCs it held fail at their callers.
    pub(super) fn crash_node(&mut self, node: NodeId) {
        let n = node.0 as usize;
        if !self.nodes[n].up {
            return;
        }
        let target = &mut self.nodes[n];
        target.up = false;
        target.epoch += 1;
        target.host.clear();
        target.device.clear();
        target.idle_rpc_threads.clear();
        let lost: Vec<u32> = target
            .rpc_queue
            .drain(..)
            .chain(target.rpc_running.drain(..))
            .chain(target.rpc_deferred.drain(..))
            .collect();
        self.fault_counters.node_crashes += 1;
        for r in lost {
            self.rpc_fail(r, VerbsError::NodeDown(node));
        }
        for c in 0..self.clients.len() {
            if self.clients[c].node == node {
                if let Some(task) = self.clients[c].task.take() {
                    self.tasks.crashed(task);
                }
            }
        }
        // The killed tasks' booked CPU work dies with them.
        let now_ps = self.now_ps();
        for t in self.threads.iter_mut().filter(|t| t.node == node) {
            t.cpu_free_ps = t.cpu_free_ps.min(now_ps);
        }
    }
}

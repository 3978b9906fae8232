//! A service CPU's accesses to its own node's memory (`LocalMemory`): no NIC; after the copy's
//! CPU time, 8-byte atomic words in ascending order, each its own step where schedules are
//! explored or tearing is on, so one-sided verbs on the same memory interleave with them.

use super::{Core, Outcome, TaskId, ns_of};
use crate::nic::PS_PER_NS;
use crate::sched::{StepKind, WHOLE};
use dmkit_rdma::{CpuWork, Op, RemoteAddr, Response, VerbsError};

/// A service CPU's access to its own node's memory.
#[derive(Debug)]
pub(crate) struct LocalOp {
    pub(super) addr: RemoteAddr,
    pub(super) op: Op,
    pub(super) node_epoch: u64,
    pub(super) units_left: u32,
    pub(super) next_unit: u32,
    pub(super) failed: bool,
    pub(super) old: u64,
    pub(super) waiter: Option<TaskId>,
    pub(super) outcome: Outcome<Response>,
}

impl Core {
    /// A service CPU's access to its own node's memory: 8-byte atomic accesses in ascending
    /// order (one step each in chooser and tearing runs), after the copy's CPU time.
    pub(crate) fn local(&mut self, client: u32, offset: u64, op: Op) -> Result<u32, VerbsError> {
        let node = self.clients[client as usize].node;
        if !self.is_target(node) {
            return Err(VerbsError::NoSuchNode(node));
        }
        if offset >= RemoteAddr::OFFSET_LIMIT {
            return Err(VerbsError::OutOfRange { addr: RemoteAddr::host(node, 0), len: offset });
        }
        let addr = RemoteAddr::host(node, offset);
        let len = op.byte_len();
        if (op.is_rmw() && offset % 8 != 0) || len == 0 {
            return Err(if len == 0 {
                VerbsError::InvalidLength { addr, len }
            } else {
                VerbsError::Unaligned { addr }
            });
        }
        self.check_range(addr, len)?;
        let cost = (self.cfg.profile.cpu.cost_ns(CpuWork::CopyByte, len) * PS_PER_NS as f64) as u64;
        let start = self.charge_thread(client, cost);
        let words = ((offset + len).div_ceil(8) - offset / 8) as u32;
        let split = self.split_units && words > 1;
        let id = self.locals.insert(LocalOp {
            addr,
            op,
            node_epoch: self.nodes[node.0 as usize].epoch,
            units_left: if split { words } else { 1 },
            next_unit: 0,
            failed: false,
            old: 0,
            waiter: None,
            outcome: Outcome::Pending,
        });
        if !split && self.instant_fast_path() {
            // Bulk-load mode: the access costs no time, so it is done now and its future finds
            // it ready, without the step and the task's suspension.
            self.count_instant_step(0x10ca1);
            self.local_unit(id, WHOLE);
            return Ok(id);
        }
        let at = ns_of(start).max(self.now_ns);
        self.schedule(at, StepKind::Local(id, if split { 0 } else { WHOLE }));
        Ok(id)
    }

    pub(super) fn local_unit(&mut self, l: u32, unit: u32) {
        let (addr, node_epoch) = (self.locals[l].addr, self.locals[l].node_epoch);
        let n = &self.nodes[addr.node().0 as usize];
        if !n.up || n.epoch != node_epoch {
            self.locals[l].failed = true;
        }
        if !self.locals[l].failed {
            let len = self.locals[l].op.byte_len();
            let (lo, hi) = if unit == WHOLE {
                (addr.offset(), addr.offset() + len)
            } else {
                let word = addr.offset() / 8 + unit as u64;
                ((word * 8).max(addr.offset()), ((word + 1) * 8).min(addr.offset() + len))
            };
            let at = (lo - addr.offset()) as usize;
            let node = &mut self.nodes[addr.node().0 as usize];
            let op = &mut self.locals[l];
            match &mut op.op {
                Op::Read(buf) => node.host.read(lo, &mut buf[at..at + (hi - lo) as usize]),
                Op::Write(buf) => node.host.write(lo, &buf[at..at + (hi - lo) as usize]),
                rmw => {
                    let old = node.host.read_u64(lo);
                    let new = rmw.rmw_new(old).expect("an RMW");
                    if new != old {
                        node.host.write_u64(lo, new);
                    }
                    op.old = old;
                }
            }
        }
        let op = &mut self.locals[l];
        op.units_left -= 1;
        if op.units_left > 0 {
            op.next_unit += 1;
            let d = self.tearing_delay();
            self.schedule(self.now_ns + d, StepKind::Local(l, self.locals[l].next_unit));
            return;
        }
        let op = &mut self.locals[l];
        let result = if op.failed {
            Err(VerbsError::NodeDown(addr.node()))
        } else {
            Ok(match std::mem::replace(&mut op.op, Op::Faa { add: 0 }) {
                Op::Read(buf) => Response::Read(buf),
                Op::Write(buf) => Response::Write(buf),
                _ => Response::Atomic(op.old),
            })
        };
        match op.outcome {
            Outcome::Abandoned => {
                self.locals.remove(l);
            }
            _ => {
                op.outcome = Outcome::Ready(result);
                let waiter = op.waiter;
                self.wake(waiter);
            }
        }
    }
}

//! The atomic unit's two-step read-modify-writes: when the memory model lets an RMW's read and
//! write be separate steps (explored schedules, tearing), an RMW holds its address until its
//! write lands, and later RMWs of the address queue behind it.

use super::{Core, Phase, ns_of};
use crate::sched::StepKind;

impl Core {
    pub(super) fn rmw_read(&mut self, v: u32) {
        if self.node_lost(v) {
            self.verbs[v].failed = true;
            self.release_rmw_lock(v);
            self.verbs[v].units_left = 0;
            self.finish_at_responder(v);
            return;
        }
        let verb = &self.verbs[v];
        let old = self.mem(verb.addr).read_u64(verb.addr.offset());
        let new = verb.op.rmw_new(old).expect("an RMW");
        let verb = &mut self.verbs[v];
        verb.rmw_old = old;
        verb.rmw_new = new;
        if new == old {
            // Nothing to write: a failed CAS, or an add of zero.
            self.release_rmw_lock(v);
            self.verbs[v].units_left = 0;
            self.finish_at_responder(v);
        } else {
            let d = self.tearing_delay();
            self.schedule(self.now_ns + d, StepKind::RmwWrite(v));
        }
    }

    pub(super) fn rmw_write(&mut self, v: u32) {
        if self.node_lost(v) {
            self.verbs[v].failed = true;
        } else {
            let (addr, new) = (self.verbs[v].addr, self.verbs[v].rmw_new);
            self.mem_mut(addr).write_u64(addr.offset(), new);
        }
        self.release_rmw_lock(v);
        self.verbs[v].units_left = 0;
        self.finish_at_responder(v);
    }

    pub(super) fn release_rmw_lock(&mut self, v: u32) {
        let addr = self.verbs[v].addr;
        let node = &mut self.nodes[addr.node().0 as usize];
        let waiters = node.rmw_locks.get_mut(&addr.raw()).expect("a two-step RMW holds its address lock");
        match waiters.pop_front() {
            Some(next) => {
                let t = ns_of(self.verbs[next].exec_ps).max(self.now_ns);
                debug_assert_eq!(self.verbs[next].phase, Phase::LockWait);
                self.verbs[next].phase = Phase::Running;
                self.schedule(t, StepKind::RmwRead(next));
            }
            None => {
                node.rmw_locks.remove(&addr.raw());
            }
        }
    }
}

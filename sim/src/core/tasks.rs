//! What the core and the executor share about tasks, and timers: the narrow interface
//! `exec.rs` drives the core through. The executor owns the futures; the core decides which
//! task is ready (a completion, a timer, a wake step), knows the task being polled (the waiter
//! a new await registers), the client each task runs for, and the tasks a crash ended.

use super::{Core, Dispatch, TaskId};
use crate::sched::StepKind;
use dmkit_rdma::NodeId;
use std::collections::VecDeque;

/// Tasks ready to poll (each queued once), the one being polled, the client of each, and the
/// tasks a fault ended. Indexed by a task's slot ([`TaskId`]): a finished task's slot is
/// reused; a crashed task's is not (its number keeps naming its client to the explorer, as it
/// always did, and crashes are few).
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    ready: VecDeque<TaskId>,
    queued: Vec<bool>,
    current: Option<TaskId>,
    /// The client each task runs for, if any (a finished task no longer holds its client).
    clients: Vec<Option<u32>>,
    /// The number of the task each slot holds (or last held, while free).
    numbers: Vec<u32>,
    /// Slots of finished tasks, reused last-freed first.
    free: Vec<u32>,
    /// Tasks ever added: the next task's number.
    added: u32,
    crashed: Vec<TaskId>,
}

impl Tasks {
    /// A new task, ready for its first poll: the next number, in a free slot if there is one.
    pub(crate) fn add(&mut self) -> TaskId {
        let number = self.added;
        self.added = number.checked_add(1).expect("more than 2^32 tasks in one simulation");
        let slot = match self.free.pop() {
            Some(slot) => {
                let s = slot as usize;
                self.numbers[s] = number;
                self.queued[s] = false;
                self.clients[s] = None;
                slot
            }
            None => {
                self.numbers.push(number);
                self.queued.push(false);
                self.clients.push(None);
                (self.numbers.len() - 1) as u32
            }
        };
        let id = TaskId { number, slot };
        self.wake(id);
        id
    }

    /// Whether `task` is the task its slot holds (not one that finished before the slot was
    /// reused).
    fn live(&self, task: TaskId) -> bool {
        self.numbers[task.slot as usize] == task.number
    }

    /// Queues `task` for a poll unless it is queued already or stale.
    pub(crate) fn wake(&mut self, task: TaskId) {
        let s = task.slot as usize;
        if self.live(task) && !self.queued[s] {
            self.queued[s] = true;
            self.ready.push_back(task);
        }
    }

    /// The next task to poll, which becomes the current task until [`Tasks::polled`]. A queued
    /// task that finished since (its slot free or another task's) is skipped.
    pub(crate) fn next(&mut self) -> Option<TaskId> {
        while let Some(t) = self.ready.pop_front() {
            if !self.live(t) {
                continue;
            }
            self.queued[t.slot as usize] = false;
            self.current = Some(t);
            return Some(t);
        }
        None
    }

    /// The poll of the current task is over.
    pub(crate) fn polled(&mut self) {
        self.current = None;
    }

    /// The task being polled: what an await registers as its waiter.
    pub(crate) fn current(&self) -> Option<TaskId> {
        self.current
    }

    /// The client `task` runs for, if any.
    pub(crate) fn client_of(&self, task: TaskId) -> Option<u32> {
        if self.live(task) { self.clients[task.slot as usize] } else { None }
    }

    /// Tasks a crash ended since the last call: the executor drops them.
    pub(crate) fn take_crashed(&mut self) -> Vec<TaskId> {
        std::mem::take(&mut self.crashed)
    }

    pub(super) fn crashed(&mut self, task: TaskId) {
        self.crashed.push(task);
    }
}

/// A sleep, a yield or a CPU charge in progress: fires at its step.
#[derive(Debug)]
pub(crate) struct Timer {
    fired: bool,
    abandoned: bool,
    waiter: Option<TaskId>,
    /// Set by `yield_now`: the step is a [`StepClass::Yield`].
    yields: bool,
}

impl Core {
    /// Runs `task` for `client`: a crash of the client drops it.
    pub(crate) fn bind_task(&mut self, task: TaskId, client: u32) {
        self.clients[client as usize].task = Some(task);
        self.tasks.clients[task.slot as usize] = Some(client);
    }

    /// `task` finished: its client no longer runs it, and its slot is free for the next task.
    pub(crate) fn task_finished(&mut self, task: TaskId) {
        let s = task.slot as usize;
        debug_assert!(self.tasks.live(task), "a task finishes once");
        if let Some(client) = self.tasks.clients[s].take() {
            self.clients[client as usize].task = None;
        }
        self.tasks.free.push(task.slot);
    }

    /// A timer that fires at `at_ns`; `yields` marks it a coroutine switch for the explorer.
    pub(crate) fn add_timer(&mut self, at_ns: u64, yields: bool) -> u32 {
        let id = self.timers.insert(Timer { fired: false, abandoned: false, waiter: None, yields });
        self.schedule(at_ns, StepKind::Timer(id));
        id
    }

    /// True (and the timer freed) if it fired; otherwise the current task waits for it.
    pub(crate) fn poll_timer(&mut self, id: u32) -> bool {
        let waiter = self.tasks.current();
        let timer = &mut self.timers[id];
        if timer.fired {
            self.timers.remove(id);
            true
        } else {
            timer.waiter = waiter;
            false
        }
    }

    /// The timer's future is gone: free it now, or when it fires.
    pub(crate) fn drop_timer(&mut self, id: u32) {
        if self.timers[id].fired {
            self.timers.remove(id);
        } else {
            self.timers[id].abandoned = true;
        }
    }

    /// The step of timer `t`: wakes its waiter, or frees an abandoned timer.
    pub(super) fn fire_timer(&mut self, t: u32) {
        let timer = &mut self.timers[t];
        timer.fired = true;
        let (waiter, abandoned) = (timer.waiter, timer.abandoned);
        if abandoned {
            self.timers.remove(t);
        } else {
            self.wake(waiter);
        }
    }

    /// Timer `id` (a CPU charge) is a coroutine switch: the explorer may treat it as a yield.
    pub(crate) fn timer_is_yield(&mut self, id: u32) {
        self.timers[id].yields = true;
    }

    pub(super) fn timer_waiter(&self, t: u32) -> Option<TaskId> {
        self.timers[t].waiter
    }

    pub(super) fn timer_yields(&self, t: u32) -> bool {
        self.timers[t].yields
    }

    /// RPCs for the executor to start handlers for (swapped into `dispatches`, which must be
    /// empty: the core keeps its room for the next ones), and nodes that restarted (whose
    /// services it creates afresh), since the last call.
    pub(crate) fn take_requests(&mut self, dispatches: &mut Vec<Dispatch>) -> Vec<NodeId> {
        debug_assert!(dispatches.is_empty(), "dispatches handed over twice");
        std::mem::swap(&mut self.dispatches, dispatches);
        std::mem::take(&mut self.restarted)
    }

    /// For `run_until(t)`: if no step is due by `t` (on a timed schedule; a chosen one has no
    /// clock to skip), time moves to `t` and the answer is true.
    pub(crate) fn skip_to(&mut self, t: u64) -> bool {
        if !self.queue.is_chosen() && self.queue.peek_time().is_none_or(|next| next > t) {
            self.now_ns = self.now_ns.max(t);
            return true;
        }
        false
    }

    /// The next history stamp (see `SimClient::history_stamp`).
    pub(crate) fn next_stamp(&mut self) -> u64 {
        self.stamps += 1;
        self.stamps
    }
}

//! The slabs the core keeps its in-flight work in, and the results tasks wait for: a batch,
//! a call or a local access is posted, its task registers as the waiter, and the result is
//! taken by the future that posted it, or discarded if that future is gone.

use super::{Batch, Core, LocalOp, Rpc, TaskId};
use dmkit_rdma::{Response, VerbsError};

/// A slab with deterministic slot reuse.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    pub(super) items: Vec<Option<T>>,
    pub(super) free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { items: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                (self.items.len() - 1) as u32
            }
        }
    }
    pub(crate) fn remove(&mut self, i: u32) -> T {
        let item = self.items[i as usize].take().expect("slab slot is live");
        self.free.push(i);
        item
    }
    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize).and_then(Option::as_ref)
    }
    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize).and_then(Option::as_mut)
    }
    pub(crate) fn live(&self) -> usize {
        self.items.len() - self.free.len()
    }
}

impl<T> std::ops::Index<u32> for Slab<T> {
    type Output = T;
    fn index(&self, i: u32) -> &T {
        self.get(i).expect("slab slot is live")
    }
}

impl<T> std::ops::IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, i: u32) -> &mut T {
        self.get_mut(i).expect("slab slot is live")
    }
}

#[derive(Debug)]
pub(crate) enum Outcome<T> {
    Pending,
    Ready(Result<T, VerbsError>),
    /// The future was dropped: discard the result when it comes.
    Abandoned,
}

/// Something a task waits for: a batch, a call, a local access. Its result is taken by the
/// future that posted it, or dropped if that future is gone.
pub(crate) trait Awaited {
    type Output;
    fn outcome(&mut self) -> &mut Outcome<Self::Output>;
    fn waiter(&mut self) -> &mut Option<TaskId>;
}

/// The slab of each awaited kind, so one generic future serves them all.
pub(crate) trait AwaitedSlab<A: Awaited> {
    fn slab(core: &mut Core) -> &mut Slab<A>;
}

impl Core {
    /// Takes the result if it is ready (freeing the slot); otherwise registers the current task
    /// to be woken.
    pub(crate) fn poll_awaited<A: Awaited>(&mut self, id: u32) -> Option<Result<A::Output, VerbsError>>
    where
        Core: AwaitedSlab<A>,
    {
        let waiter = self.tasks.current();
        let slab = <Core as AwaitedSlab<A>>::slab(self);
        let item = &mut slab[id];
        match std::mem::replace(item.outcome(), Outcome::Pending) {
            Outcome::Ready(result) => {
                slab.remove(id);
                Some(result)
            }
            other => {
                *item.outcome() = other;
                *item.waiter() = waiter;
                None
            }
        }
    }

    /// The waiting future is gone: free a ready result now, or discard it when it comes.
    pub(crate) fn drop_awaited<A: Awaited>(&mut self, id: u32)
    where
        Core: AwaitedSlab<A>,
    {
        let slab = <Core as AwaitedSlab<A>>::slab(self);
        match slab[id].outcome() {
            Outcome::Ready(_) => {
                slab.remove(id);
            }
            other => *other = Outcome::Abandoned,
        }
    }
}

macro_rules! awaited {
    ($kind:ty, $output:ty, $slab:ident) => {
        impl Awaited for $kind {
            type Output = $output;
            fn outcome(&mut self) -> &mut Outcome<$output> {
                &mut self.outcome
            }
            fn waiter(&mut self) -> &mut Option<TaskId> {
                &mut self.waiter
            }
        }
        impl AwaitedSlab<$kind> for Core {
            fn slab(core: &mut Core) -> &mut Slab<$kind> {
                &mut core.$slab
            }
        }
    };
}

/// A batch's responses up to its first failed verb, and that verb's error.
pub(crate) type BatchDone = (Vec<Response>, Option<VerbsError>);

awaited!(Batch, BatchDone, batches);

awaited!(Rpc, Vec<u8>, rpcs);

awaited!(LocalOp, Response, locals);

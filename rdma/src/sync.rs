//! Local synchronisation that works on any executor: the simulator's (where every wake-up goes
//! through its seam, so the schedule explorer can order it) and a real one per OS thread on
//! hardware. Built on `std` only: `Mutex`-protected state, never held across an `.await`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// A mutex's guard, also after a panic while it was held (the state stays usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct NotifyState {
    /// Permits stored by `notify_one` when nobody waited.
    permits: u64,
    /// Waiters, each with a slot its notifier fills.
    waiters: VecDeque<(u64, Option<Waker>)>,
    notified: Vec<u64>,
    next_id: u64,
}

/// Wakes waiting tasks: `notify_one` wakes the oldest waiter, or stores one permit that the next
/// `notified().await` takes at once.
#[derive(Debug, Default)]
pub struct Notify {
    state: Mutex<NotifyState>,
}

impl Notify {
    pub fn new() -> Notify {
        Notify::default()
    }

    /// Wakes the oldest waiter, or leaves a permit.
    pub fn notify_one(&self) {
        let waker = {
            let mut s = lock(&self.state);
            match s.waiters.pop_front() {
                Some((id, waker)) => {
                    s.notified.push(id);
                    waker
                }
                None => {
                    s.permits += 1;
                    None
                }
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Waits for a `notify_one`.
    pub fn notified(&self) -> Notified<'_> {
        Notified { notify: self, id: None }
    }
}

/// The future of [`Notify::notified`].
#[derive(Debug)]
pub struct Notified<'a> {
    notify: &'a Notify,
    id: Option<u64>,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = lock(&self.notify.state);
        match self.id {
            None => {
                if s.permits > 0 {
                    s.permits -= 1;
                    return Poll::Ready(());
                }
                let id = s.next_id;
                s.next_id += 1;
                s.waiters.push_back((id, Some(cx.waker().clone())));
                drop(s);
                self.id = Some(id);
                Poll::Pending
            }
            Some(id) => {
                if let Some(pos) = s.notified.iter().position(|&n| n == id) {
                    s.notified.swap_remove(pos);
                    drop(s);
                    self.id = None;
                    return Poll::Ready(());
                }
                if let Some(w) = s.waiters.iter_mut().find(|(n, _)| *n == id) {
                    w.1 = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut s = lock(&self.notify.state);
        if let Some(pos) = s.notified.iter().position(|&n| n == id) {
            // Notified but never observed: pass the wake-up on.
            s.notified.swap_remove(pos);
            drop(s);
            self.notify.notify_one();
        } else {
            s.waiters.retain(|(n, _)| *n != id);
        }
    }
}

/// An unbounded multi-producer, multi-consumer queue of local items (a service's work queue).
#[derive(Debug)]
pub struct Queue<T> {
    items: Mutex<VecDeque<T>>,
    ready: Notify,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue { items: Mutex::new(VecDeque::new()), ready: Notify::new() }
    }
}

impl<T> Queue<T> {
    pub fn new() -> Queue<T> {
        Queue::default()
    }

    pub fn push(&self, item: T) {
        lock(&self.items).push_back(item);
        self.ready.notify_one();
    }

    /// Takes the oldest item, waiting for one.
    pub async fn pop(&self) -> T {
        loop {
            if let Some(item) = lock(&self.items).pop_front() {
                return item;
            }
            self.ready.notified().await;
        }
    }

    /// Takes the oldest item if there is one.
    pub fn try_pop(&self) -> Option<T> {
        lock(&self.items).pop_front()
    }

    /// Takes the oldest item if there is one and `take` accepts it (else leaves it first).
    pub fn pop_if(&self, take: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut items = lock(&self.items);
        if take(items.front()?) { items.pop_front() } else { None }
    }

    pub fn len(&self) -> usize {
        lock(&self.items).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicUsize);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn poll<F: Future>(f: Pin<&mut F>, flag: &Arc<Flag>) -> Poll<F::Output> {
        let waker = Waker::from(flag.clone());
        f.poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn notify_wakes_in_order_and_stores_permits() {
        let n = Notify::new();
        let flag = Arc::new(Flag(0.into()));
        let mut a = Box::pin(n.notified());
        let mut b = Box::pin(n.notified());
        assert!(poll(a.as_mut(), &flag).is_pending());
        assert!(poll(b.as_mut(), &flag).is_pending());
        n.notify_one();
        assert_eq!(flag.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(poll(b.as_mut(), &flag).is_pending(), "the oldest waiter is woken first");
        assert!(poll(a.as_mut(), &flag).is_ready());
        // A permit left with no waiter is taken at once.
        n.notify_one();
        n.notify_one();
        assert!(poll(b.as_mut(), &flag).is_ready());
        assert!(poll(Box::pin(n.notified()).as_mut(), &flag).is_ready());
        assert!(poll(Box::pin(n.notified()).as_mut(), &flag).is_pending());
    }

    #[test]
    fn a_dropped_notified_waiter_passes_its_wake_up_on() {
        let n = Notify::new();
        let flag = Arc::new(Flag(0.into()));
        let mut a = Box::pin(n.notified());
        let mut b = Box::pin(n.notified());
        assert!(poll(a.as_mut(), &flag).is_pending());
        assert!(poll(b.as_mut(), &flag).is_pending());
        n.notify_one();
        drop(a);
        assert!(poll(b.as_mut(), &flag).is_ready(), "a's wake-up went to b");
    }

    #[test]
    fn queue_hands_items_over_in_order() {
        let q = Queue::new();
        let flag = Arc::new(Flag(0.into()));
        let mut p = Box::pin(q.pop());
        assert!(poll(p.as_mut(), &flag).is_pending());
        q.push(1);
        q.push(2);
        assert_eq!(poll(p.as_mut(), &flag), Poll::Ready(1));
        assert_eq!(q.pop_if(|&x| x > 2), None, "2 is left first");
        assert_eq!(q.try_pop(), Some(2));
        assert!(q.is_empty());
        assert_eq!(q.pop_if(|_| true), None);
    }
}

//! loom models of the local lock table (`common::hocl`): every interleaving of two or three
//! clients of one compute node, each on its own thread, taking a local lock, working a model
//! global lock, and releasing with or without a hand-over. The global lock is an `AtomicBool`
//! that only this compute node uses, so:
//!
//! - a holder that did not inherit takes it with a compare-exchange false → true that must
//!   succeed (a failure means the global lock was still held: a hand-over went unnoticed, or a
//!   release came too late);
//! - a holder that inherited finds it held (a hand-over is never received without the lock);
//! - a counter of clients inside the critical section never exceeds 1;
//! - with `max_holders = 2`, a counter of holders since the last global acquisition never
//!   exceeds 2;
//! - after the joins, the global lock is free and the slot is free (a fresh `acquire` is ready at
//!   once and inherits nothing), and the table's counts agree with what the clients saw.
//!
//! Run with `.ci/loom.sh` (`RUSTFLAGS="--cfg loom"`, a separate target directory, release).

#![cfg(loom)]

use dmkit_indexes::common::hocl::{LocalHold, LocalLockTable};
use dmkit_indexes::common::primitive::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::thread;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};

/// Explores every interleaving (with at most `preemptions` preemptions per execution, if given)
/// and checks that loom did explore more than one (a model with a single schedule proves
/// nothing).
fn model(name: &str, preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{name}: {runs} interleavings");
    assert!(runs > 1, "{name}: loom explored a single interleaving");
}

/// Wakes a parked loom thread. (`loom::future::block_on` needs loom's `futures` feature, which
/// this crate does not enable.)
struct Unpark(thread::Thread);

impl Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `f` to completion on the current loom thread, parking it while `f` is pending; a
/// wake-up that comes before the park leaves a token, so none is lost.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

/// The model of one global lock, and what its holders observe.
#[derive(Default)]
struct Global {
    /// The lock word: held by this compute node.
    held: AtomicBool,
    /// Clients inside the critical section.
    inside: AtomicUsize,
    /// Holders since the last global acquisition.
    streak: AtomicUsize,
    /// Holders that inherited it.
    inherited: AtomicUsize,
}

/// Enters the critical section with `hold`: takes the global lock unless it was inherited.
fn enter(g: &Global, hold: &LocalHold, max_holders: usize) {
    if hold.inherited() {
        assert!(g.held.load(SeqCst), "inherited a global lock that is not held");
        let streak = g.streak.fetch_add(1, SeqCst) + 1;
        assert!(streak <= max_holders.max(1), "{streak} holders share one global acquisition");
        g.inherited.fetch_add(1, SeqCst);
    } else {
        assert!(g.held.compare_exchange(false, true, SeqCst, SeqCst).is_ok(), "the global CAS failed");
        g.streak.store(1, SeqCst);
    }
    assert_eq!(g.inside.fetch_add(1, SeqCst), 0, "two holders at once");
    g.inside.fetch_sub(1, SeqCst);
}

/// Releases as the caller would: plan, release the global lock unless handing over, finish.
fn leave(table: &LocalLockTable, g: &Global, hold: LocalHold) -> bool {
    let handed_over = table.plan_release(&hold);
    if !handed_over {
        g.held.store(false, SeqCst);
    }
    table.finish_release(hold, handed_over);
    handed_over
}

/// One client's whole critical section on `(node, index)`.
fn client(table: &LocalLockTable, g: &Global, node: u16, index: u32, max_holders: usize) {
    let hold = block_on(table.acquire(node, index));
    enter(g, &hold, max_holders);
    leave(table, g, hold);
}

/// After the clients joined: the global lock is free, the slot is free and inherits nothing,
/// and the table counted what the clients saw.
fn assert_quiet(table: &LocalLockTable, g: &Global, node: u16, index: u32) {
    assert!(!g.held.load(SeqCst), "the global lock was left held");
    let mut acquire = pin!(table.acquire(node, index));
    let Poll::Ready(hold) = acquire.as_mut().poll(&mut Context::from_waker(Waker::noop())) else {
        panic!("the slot was left locked");
    };
    assert!(!hold.inherited());
    table.finish_release(hold, false);
}

/// Runs `clients` threads on slot (0, 0) of a table allowing `max_holders`.
fn one_slot(clients: usize, max_holders: u32) {
    let table = Arc::new(LocalLockTable::new(1, 2, max_holders).unwrap());
    let g = Arc::new(Global::default());
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (table, g) = (table.clone(), g.clone());
            thread::spawn(move || client(&table, &g, 0, 0, max_holders as usize))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = table.stats();
    assert_eq!(stats.acquisitions, clients as u64);
    assert_eq!(stats.inherited, g.inherited.load(SeqCst) as u64);
    assert_eq!(stats.handed_over, stats.inherited, "every hand-over was received");
    assert!(stats.waits >= stats.inherited, "only a waiter inherits");
    assert_quiet(&table, &g, 0, 0);
}

#[test]
fn two_clients_one_slot() {
    model("two clients, one slot", None, || one_slot(2, 8));
}

#[test]
fn three_clients_one_slot() {
    model("three clients, one slot", Some(3), || one_slot(3, 8));
}

/// `max_holders = 2`: three clients, so a streak could reach 3 if the bound were not kept.
#[test]
fn three_clients_hand_over_at_most_once_per_global_acquisition() {
    model("three clients, max_holders 2", Some(3), || one_slot(3, 2));
}

/// Hand-over off: every holder takes the global lock itself.
#[test]
fn two_clients_without_hand_over() {
    model("two clients, max_holders 1", None, || {
        one_slot(2, 1);
    });
}

/// Two clients on slot (0, 1) and one on slot (1, 1) of the same table: the slots neither
/// exclude nor hand over to each other (each has its own model global lock).
#[test]
fn two_slots_are_independent() {
    model("two slots", Some(3), || {
        let table = Arc::new(LocalLockTable::new(2, 2, 8).unwrap());
        let globals = Arc::new([Global::default(), Global::default()]);
        let threads: Vec<_> = [0u16, 0, 1]
            .into_iter()
            .map(|node| {
                let (table, globals) = (table.clone(), globals.clone());
                thread::spawn(move || client(&table, &globals[node as usize], node, 1, 8))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(globals[1].inherited.load(SeqCst), 0, "slot (1, 1) had a single client");
        assert_eq!(table.stats().acquisitions, 3);
        assert_quiet(&table, &globals[0], 0, 1);
        assert_quiet(&table, &globals[1], 1, 1);
    });
}

/// A client that gives up: it queues (one poll) and drops its future, racing with the holder's
/// release, while another client waits for the lock. Whether the quitter was still queued,
/// already granted (then it passes the grant on), or never queued, the waiter gets the lock,
/// the global lock is never lost, and a hand-over meant for the quitter is inherited by whoever
/// holds the slot next.
#[test]
fn a_cancelled_waiter_loses_neither_the_grant_nor_the_global_lock() {
    model("a cancelled waiter", Some(5), || {
        let table = Arc::new(LocalLockTable::new(1, 1, 8).unwrap());
        let g = Arc::new(Global::default());
        let hold = block_on(table.acquire(0, 0));
        enter(&g, &hold, 8);
        let quitter = {
            let table = table.clone();
            thread::spawn(move || {
                let mut acquire = pin!(table.acquire(0, 0));
                match acquire.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    // The slot was free: release the lock unused (this client never CASed,
                    // so a release would have to give back what it inherited).
                    Poll::Ready(hold) => Some(hold),
                    Poll::Pending => None,
                }
            })
        };
        let waiter = {
            let (table, g) = (table.clone(), g.clone());
            thread::spawn(move || client(&table, &g, 0, 0, 8))
        };
        leave(&table, &g, hold);
        if let Some(hold) = quitter.join().unwrap() {
            enter(&g, &hold, 8);
            leave(&table, &g, hold);
        }
        waiter.join().unwrap();
        let stats = table.stats();
        assert!(stats.inherited <= stats.handed_over);
        // A hand-over nobody received stays with the slot: the next holder inherits it.
        let leftover = stats.handed_over - stats.inherited;
        assert!(leftover <= 1);
        assert_eq!(g.held.load(SeqCst), leftover == 1, "the global lock is held iff a hand-over is pending");
        let hold = block_on(table.acquire(0, 0));
        assert_eq!(hold.inherited(), leftover == 1);
        enter(&g, &hold, 8);
        leave(&table, &g, hold);
        assert_quiet(&table, &g, 0, 0);
    });
}

//! loom models of read delegation and write combining (`common::rdwc`): client threads of one
//! compute node searching or writing one hot key through a shared table, with the remote memory
//! modelled by loom atomics and a loom mutex (the remote lock), and followers driven by a
//! `block_on` on loom's park and unpark. Each model checks, after the threads join:
//!
//! - **delegated reads are linearizable (H6)**: a writer changes the remote value while readers
//!   search it; every reader returns a value that was current at some point between its start
//!   and its end, whether it led, followed or searched again;
//! - **combined writes are linearizable (H7)**: every writer gets a result; every operation is
//!   applied exactly once (none lost, none applied twice, so no writer was both combined and ran
//!   its own operation); the final value is the last operation applied; and each writer's result
//!   is what its operation saw in that one order of application;
//! - a follower cancelled while its leader closes leaves nothing behind, and its operation is
//!   applied at most once;
//! - the table's counters agree with what the threads did.
//!
//! Run with `.ci/loom.sh` (`RUSTFLAGS="--cfg loom"`, a separate target directory, release).

#![cfg(loom)]

use dmkit_indexes::common::primitive::atomic::{AtomicU64, Ordering};
use dmkit_indexes::common::primitive::{Arc, Mutex, lock};
use dmkit_indexes::common::rdwc::{Rdwc, ReadRole, WriteRole};
use loom::thread;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};

const KEY: &[u8] = b"hot";

/// Explores the interleavings — exhaustively, or within `preemptions` preemptions per execution
/// (loom's usual bound; most concurrency bugs need very few; `LOOM_MAX_PREEMPTIONS` overrides
/// it) — and checks that loom did explore more than one (a model with a single schedule proves
/// nothing) and that the paths the model is about were taken: each execution returns the events
/// it saw, and every one of `required` must have been seen in some execution.
fn model(
    name: &str,
    preemptions: Option<usize>,
    required: &[&'static str],
    f: impl Fn() -> Vec<&'static str> + Sync + Send + 'static,
) {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let (counted, tally) = (runs.clone(), seen.clone());
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let events = f();
        tally.lock().unwrap().extend(events);
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    let seen = seen.lock().unwrap();
    eprintln!("{name}: {runs} interleavings, saw {seen:?}");
    assert!(runs > 1, "{name}: loom explored a single interleaving");
    for event in required {
        assert!(seen.contains(event), "{name}: no execution saw {event:?} (saw {seen:?})");
    }
}

/// Wakes a loom thread parked in [`block_on`].
struct Unpark(thread::Thread);

impl Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `f` to completion on the current loom thread, parking it while `f` is pending (loom's
/// own `loom::future::block_on` needs its `futures` feature; this is the same thing). A wake-up
/// that comes before the park leaves loom's token, so the park returns at once.
fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

// ---------------------------------------------------------------------------------------------
// Reads

type Reads = Rdwc<(), u64>;

/// How a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadHow {
    Led,
    Delegated,
    Bypassed,
}

/// One search of `KEY`, as an index would run it: a leader marks right before its READ (one load
/// of the remote value); a follower told `None` starts over. Returns the value and how many
/// times it was cut off.
fn search(table: &Reads, remote: &AtomicU64) -> (u64, ReadHow, u64) {
    let mut cut_off = 0;
    loop {
        match table.begin_read(KEY) {
            ReadRole::Leader(mut leader) => {
                leader.mark();
                let v = remote.load(Ordering::SeqCst);
                leader.finish(v);
                return (v, ReadHow::Led, cut_off);
            }
            ReadRole::Follower(wait) => match block_on(wait) {
                Some(v) => return (v, ReadHow::Delegated, cut_off),
                None => cut_off += 1,
            },
            ReadRole::Bypass => return (remote.load(Ordering::SeqCst), ReadHow::Bypassed, cut_off),
        }
    }
}

/// A reader: the remote value only grows, so a value current at some point of the search lies
/// between the value seen just before it began and the value seen just after it ended.
fn checked_search(table: &Reads, remote: &AtomicU64) -> (ReadHow, u64) {
    let before = remote.load(Ordering::SeqCst);
    let (v, how, cut_off) = search(table, remote);
    let after = remote.load(Ordering::SeqCst);
    assert!(before <= v && v <= after, "stale read ({how:?}): got {v}, but {before} was current when it began");
    (how, cut_off)
}

/// Readers of one compute node search the key while a writer (on another compute node: it does
/// not go through the table) changes it `writes` times.
fn reads_model(readers: usize, writes: u64) -> Vec<&'static str> {
    let table = Arc::new(Reads::new(1, true));
    let remote = Arc::new(AtomicU64::new(0));
    let writer = {
        let remote = remote.clone();
        thread::spawn(move || {
            for v in 1..=writes {
                remote.store(v, Ordering::SeqCst);
            }
        })
    };
    let others: Vec<_> = (1..readers)
        .map(|_| {
            let (table, remote) = (table.clone(), remote.clone());
            thread::spawn(move || checked_search(&table, &remote))
        })
        .collect();
    let mut outcomes = vec![checked_search(&table, &remote)];
    outcomes.extend(others.into_iter().map(|t| t.join().unwrap()));
    writer.join().unwrap();

    let count = |how| outcomes.iter().filter(|o| o.0 == how).count() as u64;
    let stats = table.stats();
    assert_eq!(stats.reads_led, count(ReadHow::Led));
    assert_eq!(stats.reads_delegated, count(ReadHow::Delegated));
    assert_eq!(stats.reads_bypassed, count(ReadHow::Bypassed));
    assert_eq!(count(ReadHow::Bypassed), 0, "one key never conflicts with itself");
    assert_eq!(stats.reads_cut_off, outcomes.iter().map(|o| o.1).sum::<u64>());
    assert_eq!(stats.reads_orphaned, 0);
    assert_eq!(table.bytes(), Reads::new(1, true).bytes(), "every window closed, every outcome taken");
    let mut events = Vec::new();
    if stats.reads_delegated > 0 {
        events.push("delegated");
    }
    if stats.reads_cut_off > 0 {
        events.push("cut off");
    }
    events
}

/// H6: two readers and a writer. Without the join stamp, a reader joining after the leader's
/// READ would be handed the value that READ saw, from before the write it saw complete.
#[test]
fn delegated_reads_return_a_value_current_during_the_search() {
    model("two readers, one write", None, &["delegated", "cut off"], || reads_model(2, 1));
}

/// Three readers and a writer that writes twice: followers cut off by the stamp search again and
/// lead or follow the next window. Bounded to two preemptions per execution (about 30,000
/// interleavings; three take over a minute).
#[test]
fn three_readers_and_two_writes() {
    model("three readers, two writes", Some(2), &["delegated", "cut off"], || reads_model(3, 2));
}

// ---------------------------------------------------------------------------------------------
// Writes

/// An operation: the writer's id, which it writes as the new value. The result: the value it
/// overwrote.
type Writes = Rdwc<u64, u64>;

/// The remote key, behind the remote lock: its value and every operation applied, in order.
#[derive(Debug, Default)]
struct Remote {
    value: u64,
    applied: Vec<u64>,
}

impl Remote {
    fn apply(&mut self, op: u64) -> u64 {
        self.applied.push(op);
        std::mem::replace(&mut self.value, op)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteHow {
    Led,
    Combined,
    Bypassed,
}

/// One write of `KEY`, as an index would run it: the leader takes the remote lock, reads the
/// state, closes, applies every operation in order and writes once, releases the lock, then
/// finishes; a bypassing writer applies its own under the remote lock; a follower told `None`
/// starts over.
fn write(table: &Writes, remote: &Mutex<Remote>, op: u64) -> (u64, WriteHow) {
    loop {
        match table.begin_write(KEY, op) {
            WriteRole::Leader(mut leader) => {
                let mut r = lock(remote);
                let ops = leader.close();
                assert_eq!(ops[0], op, "the leader's own operation comes first");
                let results: Vec<u64> = ops.into_iter().map(|o| r.apply(o)).collect();
                drop(r);
                let mine = results[0];
                leader.finish(results);
                return (mine, WriteHow::Led);
            }
            WriteRole::Follower(wait) => {
                if let Some(result) = block_on(wait) {
                    return (result, WriteHow::Combined);
                }
            }
            WriteRole::Bypass(op) => return (lock(remote).apply(op), WriteHow::Bypassed),
            WriteRole::Queued(..) => unreachable!("this table does not queue late writers"),
        }
    }
}

/// Writers `1..=writers` of one compute node write the key at once.
fn writes_model(writers: u64) -> Vec<&'static str> {
    let table = Arc::new(Writes::new(1, true));
    let remote = Arc::new(Mutex::new(Remote::default()));
    let others: Vec<_> = (2..=writers)
        .map(|op| {
            let (table, remote) = (table.clone(), remote.clone());
            thread::spawn(move || (op, write(&table, &remote, op)))
        })
        .collect();
    let mut outcomes = vec![(1, write(&table, &remote, 1))];
    outcomes.extend(others.into_iter().map(|t| t.join().unwrap()));

    let remote = lock(&remote);
    let mut applied = remote.applied.clone();
    applied.sort_unstable();
    assert_eq!(applied, (1..=writers).collect::<Vec<_>>(), "every operation applied exactly once: {remote:?}");
    assert_eq!(Some(&remote.value), remote.applied.last(), "the last operation applied wins");
    for &(op, (result, how)) in &outcomes {
        let pos = remote.applied.iter().position(|&o| o == op).unwrap();
        let before = if pos == 0 { 0 } else { remote.applied[pos - 1] };
        assert_eq!(result, before, "writer {op} ({how:?}) got the result of another order: {remote:?}");
    }
    let count = |how| outcomes.iter().filter(|o| o.1.1 == how).count() as u64;
    let stats = table.stats();
    assert_eq!(stats.writes_combined, count(WriteHow::Combined));
    assert_eq!(stats.writes_bypassed, count(WriteHow::Bypassed));
    assert_eq!(stats.writes_led, count(WriteHow::Led));
    assert_eq!(stats.writes_orphaned, 0, "no leader fails here");
    assert_eq!(table.bytes(), Writes::new(1, true).bytes(), "every window closed, every outcome taken");
    let mut events = Vec::new();
    if stats.writes_combined > 0 {
        events.push("combined");
    }
    if stats.writes_bypassed > 0 {
        events.push("bypassed a closed window");
    }
    if stats.writes_led > 1 {
        events.push("led again");
    }
    events
}

/// H7: two writers. Whether the second deposits before the leader's close (combined) or after it
/// (bypass, serialised by the remote lock), its operation is applied exactly once.
#[test]
fn two_combined_writes_apply_every_operation_once() {
    model("two writers", None, &["combined", "bypassed a closed window", "led again"], || writes_model(2));
}

/// Three writers: a second window can open while the first one's follower is still waking, and
/// a writer can be cut off by the close while another was admitted (exhaustive in seconds).
#[test]
fn three_combined_writes_apply_every_operation_once() {
    model("three writers", None, &["combined", "bypassed a closed window", "led again"], || writes_model(3));
}

/// A follower cancels its write while the leader closes the window: its operation is applied
/// (it was admitted) or not (it withdrew first, or arrived after the close and gave up), never
/// twice, and the table is left clean whatever the order of the cancellation, the close and the
/// finish.
#[test]
fn a_cancelled_follower_is_applied_at_most_once_and_leaves_nothing() {
    model("cancelled follower", None, &["admitted", "withdrawn"], || {
        let table = Arc::new(Writes::new(1, true));
        let remote = Arc::new(Mutex::new(Remote::default()));
        let mut leader = match table.begin_write(KEY, 1) {
            WriteRole::Leader(l) => l,
            other => panic!("the first writer leads: {other:?}"),
        };
        let canceller = {
            let table = table.clone();
            thread::spawn(move || match table.begin_write(KEY, 2) {
                WriteRole::Follower(wait) => drop(wait),
                // Arrived after the close, or after the finish: gives up before doing anything.
                WriteRole::Bypass(_) | WriteRole::Leader(_) | WriteRole::Queued(..) => {}
            })
        };
        let mut r = lock(&remote);
        let results: Vec<u64> = leader.close().into_iter().map(|o| r.apply(o)).collect();
        let admitted = results.len() == 2;
        drop(r);
        leader.finish(results);
        canceller.join().unwrap();
        let remote = lock(&remote);
        assert_eq!(remote.applied, if admitted { vec![1, 2] } else { vec![1] });
        let stats = table.stats();
        assert!(stats.writes_combined <= u64::from(admitted), "{stats:?}");
        assert_eq!(stats.writes_orphaned, 0, "{stats:?}");
        assert_eq!(table.bytes(), Writes::new(1, true).bytes(), "nothing left behind");
        vec![if admitted { "admitted" } else { "withdrawn" }]
    });
}

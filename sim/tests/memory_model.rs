//! The memory model of DESIGN.md §1 ("The memory model every backend must honour"), checked
//! against the simulator's schedule explorer.
//!
//! Every test builds a small scenario (a few clients, a few verbs), runs it under
//! [`RandomChooser`] for many seeds (every wait is a choice point, timing is ignored) and
//! collects the set of observed outcomes. Each test asserts both directions, so it can fail:
//! the outcome the model forbids NEVER occurs over all seeds, and the weak outcome the model
//! allows DOES occur in at least one seed (otherwise the check would be vacuous, or the
//! simulator stronger than the model it claims to expose).
//!
//! Sources, cited per test:
//! - InfiniBand Architecture Specification vol. 1, §9.5 (transaction ordering) and §10.8.3.3
//!   (IBV_SEND_FENCE, "fence indicator");
//! - RDMA^TSO: Ambal et al., "Semantics of Remote Direct Memory Access: Operational and
//!   Declarative Models of RDMA on TSO Architectures", OOPSLA 2024 (READ/WRITE cells, litmus
//!   shapes);
//! - RDMA^TSO_RMW: the extension of RDMA^TSO to remote atomics (RMW cells, RMW atomicity).
//!
//! Where a source is weaker or silent, the cell is the one DESIGN.md §1 adopts, and the test
//! says so.

use dmkit_rdma::{Buf, NodeId, RemoteAddr, Request, Response, Verbs};
use dmkit_sim::{MemoryModel, RandomChooser, Sim, SimClient, SimConfig};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::rc::Rc;

// ------------------------------------------------------------------------------------ harness

/// Seeds for ordinary two-client scenarios.
const SEEDS: u64 = 1000;
/// Seeds for scenarios whose weak outcome needs several unlikely choices in a row.
const MANY_SEEDS: u64 = 5000;
/// Seeds for IRIW's weak outcome (four clients must interleave just so: about 1 in 600).
const IRIW_SEEDS: u64 = 20_000;

/// No scenario here needs more than a few hundred steps; a run that exceeds this is a hang.
const STEP_LIMIT: u64 = 100_000;
/// Bound on a polling loop's `yield_now` rounds and on a CAS loop's attempts.
const SPIN_LIMIT: u32 = 10_000;

/// Three words in three different 64-byte lines of memory node 0.
const X: RemoteAddr = RemoteAddr::host(NodeId(0), 0x1000);
const Y: RemoteAddr = RemoteAddr::host(NodeId(0), 0x2000);
const Z: RemoteAddr = RemoteAddr::host(NodeId(0), 0x3000);
/// Two adjacent 64-byte units (128-byte aligned) of memory node 0.
const LINES: RemoteAddr = RemoteAddr::host(NodeId(0), 0x4000);
const UNIT: u64 = 64;

fn word(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn fill(byte: u8, len: usize) -> Vec<u8> {
    vec![byte; len]
}

/// The word a READ fetched (its first 8 bytes) or the old word an RMW returned.
fn value(r: &Response) -> u64 {
    match r {
        Response::Read(b) => b.u64_at(0),
        Response::Atomic(v) => *v,
        Response::Write(_) => panic!("a WRITE has no value"),
    }
}

fn bytes(r: Response) -> Vec<u8> {
    r.into_buf().expect("a READ response").into_vec()
}

fn mem_word(sim: &Sim, addr: RemoteAddr) -> u64 {
    let b = sim.read_memory(addr, 8).expect("in range");
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

fn config(mm: MemoryModel) -> SimConfig {
    SimConfig { memory_model: mm, ..SimConfig::default() }
}

fn default_config() -> SimConfig {
    config(MemoryModel::default())
}

/// What a scenario hands back: computes the run's outcome once the run has ended.
type Finish<T> = Box<dyn FnOnce(&Sim) -> T>;

/// A value a task reports back to the test; read after the run.
#[derive(Clone, Debug, Default)]
struct Rec(Rc<Cell<Option<u64>>>);

impl Rec {
    fn set(&self, v: u64) {
        assert!(self.0.replace(Some(v)).is_none(), "a result is recorded twice");
    }
    fn get(&self) -> u64 {
        self.0.get().expect("the task ran to completion and recorded its result")
    }
}

/// Adds a client on compute node 0 and runs `body` as its task.
fn spawn<F, Fut>(sim: &mut Sim, body: F)
where
    F: FnOnce(SimClient) -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    let client = sim.add_client(0).expect("compute node 0 exists");
    let task = body(client.clone());
    sim.spawn(&client, task);
}

/// Every outcome observed over the seeds, with how often and the first seed that showed it.
struct Outcomes<T> {
    label: String,
    runs: u64,
    seen: BTreeMap<T, (u64, u64)>,
}

impl<T: Ord + Debug> Outcomes<T> {
    /// Asserts that no seed produced an outcome matching `bad`.
    fn never(&self, what: &str, bad: impl Fn(&T) -> bool) -> &Self {
        for (o, (n, seed)) in &self.seen {
            assert!(
                !bad(o),
                "[{}] forbidden outcome ({what}) {o:?} occurred in {n} of {} schedules, first with seed {seed}; \
                 all outcomes: {:?}",
                self.label,
                self.runs,
                self.seen
            );
        }
        self
    }

    /// Asserts that every seed produced an outcome matching `good`.
    fn always(&self, what: &str, good: impl Fn(&T) -> bool) -> &Self {
        self.never(&format!("not: {what}"), |o| !good(o))
    }

    /// Asserts that at least one seed produced an outcome matching `good`.
    fn sometimes(&self, what: &str, good: impl Fn(&T) -> bool) -> &Self {
        assert!(
            self.seen.keys().any(good),
            "[{}] allowed outcome ({what}) never occurred in {} schedules; outcomes: {:?}",
            self.label,
            self.runs,
            self.seen
        );
        self
    }
}

/// Runs `scenario` once per seed `0..seeds` under a [`RandomChooser`] and collects the outcome
/// its returned closure computes after the run (from recorded results and final memory).
fn explore<T: Ord + Debug>(
    label: &str,
    cfg: &SimConfig,
    seeds: u64,
    scenario: impl Fn(&mut Sim) -> Finish<T>,
) -> Outcomes<T> {
    let mut seen = BTreeMap::new();
    for seed in 0..seeds {
        let mut cfg = cfg.clone();
        cfg.seed = seed;
        cfg.step_limit = Some(STEP_LIMIT);
        let mut sim = Sim::with_chooser(cfg, Box::new(RandomChooser::new(seed))).expect("valid config");
        let outcome = scenario(&mut sim);
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run())) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("[{label}] seed {seed}: {e}"),
            Err(p) => {
                let msg =
                    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
                panic!("[{label}] seed {seed}: the simulator panicked: {}", msg.unwrap_or_default())
            }
        }
        assert_eq!(sim.live_tasks(), 0, "[{label}] seed {seed}: a task did not finish");
        seen.entry(outcome(&sim)).or_insert((0, seed)).0 += 1;
    }
    Outcomes { label: label.to_string(), runs: seeds, seen }
}

// ------------------------------------------------------------- 1. the ordering table, 3 × 3

/// Ordering table, cell WRITE → READ ("sees the WRITE"): `[WRITE x=1, READ x]` in one batch.
/// The READ never misses its own QP's earlier WRITE (it may see a concurrent client's later
/// WRITE x=2 instead).
///
/// Source: InfiniBand vol. 1 §9.5 (an RDMA READ is not executed ahead of an earlier RDMA WRITE
/// of the same RC QP at the responder); RDMA^TSO (OOPSLA'24), put → get on one QP.
#[test]
fn cell_write_then_read_sees_the_write() {
    let seen = explore("WRITE->READ", &default_config(), SEEDS, |sim| {
        let r = Rec::default();
        let r2 = r.clone();
        spawn(sim, move |c| async move {
            let out = c.post(vec![Request::write(X, word(1)), Request::read_len(X, 8)]).await.unwrap();
            r2.set(value(&out[1]));
        });
        spawn(sim, move |c| async move {
            c.write(X, word(2).into()).await.unwrap();
        });
        Box::new(move |_| r.get())
    });
    seen.never("the READ missed the earlier WRITE of its QP", |&r| r == 0)
        .sometimes("the READ sees its own WRITE", |&r| r == 1)
        .sometimes("the READ sees the other client's later WRITE", |&r| r == 2);
}

/// Ordering table, cell WRITE → WRITE ("placed after"): `[WRITE x=1, WRITE x=2]` in one batch,
/// observed by another client with `[READ x, READ x (fenced)]`. The final value is always 2 and
/// the observer never sees 2 then 1; it does see the intermediate 1.
///
/// Source: InfiniBand vol. 1 §9.5 (WRITEs of one RC QP are placed in order); RDMA^TSO
/// (OOPSLA'24), put → put on one QP.
#[test]
fn cell_write_then_write_placed_after() {
    let seen = explore("WRITE->WRITE", &default_config(), SEEDS, |sim| {
        let (a, b) = (Rec::default(), Rec::default());
        let (a2, b2) = (a.clone(), b.clone());
        spawn(sim, move |c| async move {
            c.post(vec![Request::write(X, word(1)), Request::write(X, word(2))]).await.unwrap();
        });
        spawn(sim, move |c| async move {
            let out = c.post(vec![Request::read_len(X, 8), Request::read_len(X, 8).fenced()]).await.unwrap();
            a2.set(value(&out[0]));
            b2.set(value(&out[1]));
        });
        Box::new(move |sim| (a.get(), b.get(), mem_word(sim, X)))
    });
    seen.always("the later WRITE is placed last", |&(_, _, fin)| fin == 2)
        .never("an observer sees the later WRITE, then the earlier one", |&(a, b, _)| a == 2 && b == 1)
        .sometimes("an observer sees the intermediate value", |&(a, b, _)| a == 1 || b == 1)
        .sometimes("an observer sees the change happen", |&(a, b, _)| a < b);
}

/// Ordering table, cell WRITE → RMW ("placed after"): `[WRITE x=5, CAS x 5→6]` in one batch
/// always succeeds (returns 5), the final value is 6, and an observer can see the 5 in between.
///
/// Source: InfiniBand vol. 1 §9.5 (an atomic is not executed ahead of an earlier WRITE of the
/// same QP); RDMA^TSO_RMW, put → RMW on one QP.
#[test]
fn cell_write_then_rmw_placed_after() {
    let seen = explore("WRITE->RMW", &default_config(), SEEDS, |sim| {
        let (old, obs) = (Rec::default(), Rec::default());
        let (old2, obs2) = (old.clone(), obs.clone());
        spawn(sim, move |c| async move {
            let out = c.post(vec![Request::write(X, word(5)), Request::cas(X, 5, 6)]).await.unwrap();
            old2.set(value(&out[1]));
        });
        spawn(sim, move |c| async move {
            obs2.set(c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0));
        });
        Box::new(move |sim| (old.get(), mem_word(sim, X), obs.get()))
    });
    seen.always("the CAS sees the WRITE and succeeds", |&(old, fin, _)| old == 5 && fin == 6)
        .sometimes("an observer sees the WRITE before the CAS", |&(_, _, o)| o == 5)
        .sometimes("an observer sees the initial value", |&(_, _, o)| o == 0);
}

/// Ordering table, cell RMW → READ ("sees the RMW"): `[FAA x +1, READ x]` always reads 1. Under
/// the weaker reading (switch `rmw_then_read_unordered = true`) the READ can overtake the FAA
/// and read 0, but never when the READ is fenced.
///
/// Source: RDMA^TSO_RMW (RMW → get on one QP); InfiniBand vol. 1 §10.8.3.3 for the fence (a
/// fenced request waits for every earlier READ and atomic of the send queue). DESIGN.md §1
/// adopts "sees the RMW" as the default because the seeds' CAS-then-READ batches need it.
#[test]
fn cell_rmw_then_read_sees_the_rmw() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<u64> {
            let r = Rec::default();
            let r2 = r.clone();
            spawn(sim, move |c| async move {
                let read = Request::read_len(X, 8);
                let read = if fenced { read.fenced() } else { read };
                let out = c.post(vec![Request::faa(X, 1), read]).await.unwrap();
                assert_eq!(value(&out[0]), 0);
                r2.set(value(&out[1]));
            });
            Box::new(move |_| r.get())
        }
    };
    let weak = config(MemoryModel { rmw_then_read_unordered: true, ..MemoryModel::default() });
    explore("RMW->READ default", &default_config(), SEEDS, scenario(false))
        .always("the READ sees the FAA", |&r| r == 1);
    explore("RMW->READ unordered", &weak, SEEDS, scenario(false))
        .sometimes("the READ overtakes the FAA", |&r| r == 0)
        .sometimes("the READ sees the FAA", |&r| r == 1);
    explore("RMW->READ unordered, fenced READ", &weak, SEEDS, scenario(true))
        .always("the fenced READ sees the FAA", |&r| r == 1);
}

/// Ordering table, cell RMW → WRITE ("placed after"): `[CAS x 0→1, WRITE x=7]` always ends with 7
/// (the WRITE never lands between the CAS's read and its write, and the CAS never lands after
/// the WRITE); an observer can see the CAS's 1 in between.
///
/// Source: InfiniBand vol. 1 §9.5; RDMA^TSO_RMW, RMW → put on one QP.
#[test]
fn cell_rmw_then_write_placed_after() {
    let seen = explore("RMW->WRITE", &default_config(), SEEDS, |sim| {
        let (old, obs) = (Rec::default(), Rec::default());
        let (old2, obs2) = (old.clone(), obs.clone());
        spawn(sim, move |c| async move {
            let out = c.post(vec![Request::cas(X, 0, 1), Request::write(X, word(7))]).await.unwrap();
            old2.set(value(&out[0]));
        });
        spawn(sim, move |c| async move {
            obs2.set(c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0));
        });
        Box::new(move |sim| (old.get(), mem_word(sim, X), obs.get()))
    });
    seen.always("the CAS succeeds and the WRITE is placed last", |&(old, fin, _)| old == 0 && fin == 7)
        .sometimes("an observer sees the CAS before the WRITE", |&(_, _, o)| o == 1)
        .sometimes("an observer sees the WRITE", |&(_, _, o)| o == 7);
}

/// Ordering table, cell RMW → RMW ("placed after"): `[FAA x +1, CAS x 1→2]` — the CAS always sees
/// the FAA and succeeds; an observer can see the 1 in between.
///
/// Source: InfiniBand vol. 1 §9.5; RDMA^TSO_RMW, RMW → RMW on one QP.
#[test]
fn cell_rmw_then_rmw_placed_after() {
    let seen = explore("RMW->RMW", &default_config(), SEEDS, |sim| {
        let (faa, cas, obs) = (Rec::default(), Rec::default(), Rec::default());
        let (faa2, cas2, obs2) = (faa.clone(), cas.clone(), obs.clone());
        spawn(sim, move |c| async move {
            let out = c.post(vec![Request::faa(X, 1), Request::cas(X, 1, 2)]).await.unwrap();
            faa2.set(value(&out[0]));
            cas2.set(value(&out[1]));
        });
        spawn(sim, move |c| async move {
            obs2.set(c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0));
        });
        Box::new(move |sim| (faa.get(), cas.get(), mem_word(sim, X), obs.get()))
    });
    seen.always("the CAS sees the FAA and succeeds", |&(f, c, fin, _)| f == 0 && c == 1 && fin == 2)
        .sometimes("an observer sees the FAA before the CAS", |&(.., o)| o == 1);
}

/// Ordering table, cell READ → READ ("may sample in either order"): `[READ x, READ x]` with a
/// concurrent client writing x=1. The second READ can return an older value than the first
/// (1 then 0); never when the second READ is fenced.
///
/// Source: RDMA^TSO (OOPSLA'24): gets of one QP are not ordered with each other at the
/// responder; InfiniBand vol. 1 §10.8.3.3: the fence orders a request after earlier READs.
#[test]
fn cell_read_then_read_either_order() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            let (a, b) = (Rec::default(), Rec::default());
            let (a2, b2) = (a.clone(), b.clone());
            spawn(sim, move |c| async move {
                let second = Request::read_len(X, 8);
                let second = if fenced { second.fenced() } else { second };
                let out = c.post(vec![Request::read_len(X, 8), second]).await.unwrap();
                a2.set(value(&out[0]));
                b2.set(value(&out[1]));
            });
            spawn(sim, move |c| async move {
                c.write(X, word(1).into()).await.unwrap();
            });
            Box::new(move |_| (a.get(), b.get()))
        }
    };
    explore("READ->READ", &default_config(), SEEDS, scenario(false))
        .sometimes("the second READ sees an older value than the first", |&(a, b)| a == 1 && b == 0);
    explore("READ->READ fenced", &default_config(), SEEDS, scenario(true))
        .never("the fenced READ sees an older value", |&(a, b)| a == 1 && b == 0)
        .sometimes("the fenced READ sees a newer value", |&(a, b)| a == 0 && b == 1);
}

/// Ordering table, cell READ → WRITE ("may land before the READ samples, unless fenced"):
/// `[READ x, WRITE x=1]` on x=0: the READ can return its own later WRITE's 1; never when the
/// WRITE is fenced.
///
/// Source: RDMA^TSO (OOPSLA'24), get → put on one QP; InfiniBand vol. 1 §10.8.3.3 (the fence).
#[test]
fn cell_read_then_write_unless_fenced() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<u64> {
            let r = Rec::default();
            let r2 = r.clone();
            spawn(sim, move |c| async move {
                let write = Request::write(X, word(1));
                let write = if fenced { write.fenced() } else { write };
                let out = c.post(vec![Request::read_len(X, 8), write]).await.unwrap();
                r2.set(value(&out[0]));
            });
            Box::new(move |_| r.get())
        }
    };
    explore("READ->WRITE", &default_config(), SEEDS, scenario(false))
        .sometimes("the WRITE lands before the READ samples", |&r| r == 1)
        .sometimes("the READ samples first", |&r| r == 0);
    explore("READ->WRITE fenced", &default_config(), SEEDS, scenario(true))
        .always("the fenced WRITE lands after the READ", |&r| r == 0);
}

/// Ordering table, cell READ → RMW ("may land before the READ samples, unless fenced"):
/// `[READ x, FAA x +1]` on x=0: the READ can see the FAA's 1; never when the FAA is fenced.
///
/// Source: RDMA^TSO_RMW, get → RMW on one QP; InfiniBand vol. 1 §10.8.3.3 (the fence).
#[test]
fn cell_read_then_rmw_unless_fenced() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            let (r, old) = (Rec::default(), Rec::default());
            let (r2, old2) = (r.clone(), old.clone());
            spawn(sim, move |c| async move {
                let faa = Request::faa(X, 1);
                let faa = if fenced { faa.fenced() } else { faa };
                let out = c.post(vec![Request::read_len(X, 8), faa]).await.unwrap();
                r2.set(value(&out[0]));
                old2.set(value(&out[1]));
            });
            Box::new(move |sim| {
                assert_eq!(mem_word(sim, X), 1);
                (r.get(), old.get())
            })
        }
    };
    explore("READ->RMW", &default_config(), SEEDS, scenario(false))
        .always("the FAA returns the old word", |&(_, old)| old == 0)
        .sometimes("the FAA lands before the READ samples", |&(r, _)| r == 1)
        .sometimes("the READ samples first", |&(r, _)| r == 0);
    explore("READ->RMW fenced", &default_config(), SEEDS, scenario(true))
        .always("the fenced FAA lands after the READ", |&(r, old)| r == 0 && old == 0);
}

// ------------------------------------------------------------------ 2. nothing across QPs

/// Across QPs nothing is ordered. A client posts an unsignaled WRITE x=1 to memory node 0 and
/// then an unsignaled WRITE y=1 to memory node 1 (two QPs); another client READs y, waits for
/// it, then READs x (so its two READs are ordered). It can see y=1 and x=0. With both words on
/// one node (one QP, WRITE → WRITE placed in order) it never can.
///
/// Source: InfiniBand vol. 1 §9.5 (ordering is per QP only); RDMA^TSO (OOPSLA'24), puts on
/// different QPs.
#[test]
fn writes_on_different_qps_are_unordered() {
    let scenario = |x: RemoteAddr, y: RemoteAddr| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            let (ry, rx) = (Rec::default(), Rec::default());
            let (ry2, rx2) = (ry.clone(), rx.clone());
            spawn(sim, move |c| async move {
                c.post_unsignaled(vec![Request::write(x, word(1))]).unwrap();
                c.post_unsignaled(vec![Request::write(y, word(1))]).unwrap();
            });
            spawn(sim, move |c| async move {
                ry2.set(value(&c.post(vec![Request::read_len(y, 8)]).await.unwrap()[0]));
                rx2.set(value(&c.post(vec![Request::read_len(x, 8).fenced()]).await.unwrap()[0]));
            });
            Box::new(move |sim| {
                assert_eq!((mem_word(sim, x), mem_word(sim, y)), (1, 1), "unsignaled WRITEs still land");
                (ry.get(), rx.get())
            })
        }
    };
    let mut two = default_config();
    two.topology.memory_nodes = 2;
    let x0 = RemoteAddr::host(NodeId(0), 0x1000);
    let y1 = RemoteAddr::host(NodeId(1), 0x1000);
    explore("cross-QP", &two, SEEDS, scenario(x0, y1))
        .sometimes("the later WRITE (other QP) is seen, the earlier is not", |&(y, x)| y == 1 && x == 0);
    explore("same QP", &two, SEEDS, scenario(X, Y))
        .never("the later WRITE is seen, the earlier is not", |&(y, x)| y == 1 && x == 0)
        .sometimes("the reader sees both", |&(y, x)| y == 1 && x == 1);
}

// ------------------------------------------------------------------------ 3. completion

/// Completion: once a client's signalled WRITE x=1 has completed, every later READ of any
/// client sees it. The reader waits for a flag the writer sets after its completion (polling
/// with `yield_now`); a third client that READs without waiting can still see 0.
///
/// Source: InfiniBand vol. 1 §9.5 / §10.8 (an RC completion means the responder has executed
/// the request and every earlier one of the QP); DESIGN.md §1 rule 4.
#[test]
fn completed_write_is_visible_to_later_reads() {
    let seen = explore("completion", &default_config(), SEEDS, |sim| {
        let flag = Rc::new(Cell::new(false));
        let (after, before) = (Rec::default(), Rec::default());
        let (after2, before2, f1, f2) = (after.clone(), before.clone(), flag.clone(), flag.clone());
        spawn(sim, move |c| async move {
            c.write(X, word(1).into()).await.unwrap();
            f1.set(true);
        });
        spawn(sim, move |c| async move {
            for spins in 0.. {
                if f2.get() {
                    break;
                }
                assert!(spins < SPIN_LIMIT, "the flag was never raised");
                c.yield_now().await;
            }
            after2.set(c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0));
        });
        spawn(sim, move |c| async move {
            before2.set(c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0));
        });
        Box::new(move |_| (after.get(), before.get()))
    });
    seen.always("a READ after the completion sees the WRITE", |&(a, _)| a == 1)
        .sometimes("a READ that did not wait misses it", |&(_, b)| b == 0)
        .sometimes("a READ that did not wait sees it", |&(_, b)| b == 1);
}

/// Completion covers earlier unsignaled verbs: a client posts an unsignaled WRITE x=1, then a
/// signalled READ of another word on the same QP; once that READ's completion is delivered, the
/// WRITE is visible to other clients. If the writer raises the flag as soon as
/// `post_unsignaled` returns instead, a reader can miss the WRITE (so the wait matters).
///
/// The same holds when the earlier unsignaled verb is an FAA and the switch
/// `rmw_then_read_unordered` lets the signalled READ execute first: the READ's completion is
/// still not delivered before the FAA has landed.
///
/// Source: InfiniBand vol. 1 §10.8 (completions of an RC send queue are delivered in order, and
/// a completion implies every earlier request of the queue completed); DESIGN.md §1 rule 4 and
/// `post_unsignaled`.
#[test]
fn signalled_completion_covers_earlier_unsignaled_verbs() {
    #[derive(Clone, Copy)]
    enum Earlier {
        Write,
        Faa,
    }
    let scenario = |earlier: Earlier, wait: bool| {
        move |sim: &mut Sim| -> Finish<u64> {
            let flag = Rc::new(Cell::new(false));
            let seen = Rec::default();
            let (seen2, f1, f2) = (seen.clone(), flag.clone(), flag.clone());
            spawn(sim, move |c| async move {
                let req = match earlier {
                    Earlier::Write => Request::write(X, word(1)),
                    Earlier::Faa => Request::faa(X, 1),
                };
                c.post_unsignaled(vec![req]).unwrap();
                if wait {
                    c.post(vec![Request::read_len(Z, 8)]).await.unwrap();
                }
                f1.set(true);
            });
            spawn(sim, move |c| async move {
                for spins in 0.. {
                    if f2.get() {
                        break;
                    }
                    assert!(spins < SPIN_LIMIT, "the flag was never raised");
                    c.yield_now().await;
                }
                seen2.set(c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0));
            });
            Box::new(move |_| seen.get())
        }
    };
    explore("unsignaled WRITE, signalled READ", &default_config(), SEEDS, scenario(Earlier::Write, true))
        .always("the WRITE is visible after the later completion", |&v| v == 1);
    explore("unsignaled WRITE, no wait", &default_config(), SEEDS, scenario(Earlier::Write, false))
        .sometimes("without a completion the WRITE may not have landed", |&v| v == 0);
    let weak = config(MemoryModel { rmw_then_read_unordered: true, ..MemoryModel::default() });
    explore("unsignaled FAA, signalled READ, unordered", &weak, SEEDS, scenario(Earlier::Faa, true))
        .always("the FAA is visible after the later completion", |&v| v == 1);
    explore("unsignaled FAA, no wait", &weak, SEEDS, scenario(Earlier::Faa, false))
        .sometimes("without a completion the FAA may not have landed", |&v| v == 0);
}

// --------------------------------------------------------------------------- 4. tearing

/// How each `unit`-byte piece of a READ's buffer relates to the two patterns a concurrent WRITE
/// moves between: `O` all old, `N` all new, `M` mixed (a tear inside the unit).
fn classify(buf: &[u8], unit: usize, old: u8, new: u8) -> String {
    buf.chunks(unit)
        .map(|c| {
            if c.iter().all(|&b| b == old) {
                'O'
            } else if c.iter().all(|&b| b == new) {
                'N'
            } else {
                'M'
            }
        })
        .collect()
}

/// A WRITE of `write_len` bytes at `LINES` (from all-`OLD` to all-`NEW`) concurrent with a READ
/// of `read_len` bytes at `read_at`: the READ's buffer, classified per `piece` bytes.
fn torn_read(
    label: &str,
    cfg: &SimConfig,
    seeds: u64,
    read_at: RemoteAddr,
    read_len: usize,
    write_len: usize,
    piece: usize,
) -> Outcomes<String> {
    const OLD: u8 = 0x11;
    const NEW: u8 = 0x22;
    explore(label, cfg, seeds, move |sim| {
        sim.write_memory(LINES, &fill(OLD, write_len)).unwrap();
        let out = Rc::new(RefCell::new(Vec::new()));
        let out2 = out.clone();
        spawn(sim, move |c| async move {
            c.write(LINES, fill(NEW, write_len).into()).await.unwrap();
        });
        spawn(sim, move |c| async move {
            let b = c.post(vec![Request::read_len(read_at, read_len)]).await.unwrap();
            *out2.borrow_mut() = bytes(b.into_iter().next().unwrap());
        });
        Box::new(move |sim| {
            assert_eq!(out.borrow().len(), read_len, "the READ completed");
            assert_eq!(sim.read_memory(LINES, write_len).unwrap(), fill(NEW, write_len));
            classify(&out.borrow(), piece, OLD, NEW)
        })
    })
}

/// Tearing at 64-byte units (the default `atomicity_bytes`): a 128-byte READ spanning two units,
/// concurrent with a 128-byte WRITE of another pattern, returns one unit old and the other new
/// in some schedule, but never a unit that is part old, part new. Units are aligned to
/// addresses, not to the verb: a 64-byte READ at offset 32 spans two units and can tear at its
/// byte 32, never elsewhere.
///
/// Source: DESIGN.md §1 rule 2; RDMA^TSO (OOPSLA'24) models a get or put as per-location
/// accesses with no single-copy atomicity across the whole message (on hardware, a PCIe
/// transaction is at best atomic within one aligned cache line).
#[test]
fn reads_tear_between_units_never_inside_one() {
    let cfg = default_config();
    torn_read("tear 64", &cfg, SEEDS, LINES, 128, 128, 64)
        .never("a 64-byte unit is part old, part new", |s| s.contains('M'))
        .sometimes("one unit old, the other new", |s| s == "ON" || s == "NO")
        .sometimes("all old", |s| s == "OO")
        .sometimes("all new", |s| s == "NN");
    torn_read("tear 64, misaligned READ", &cfg, SEEDS, LINES.add(32), 64, 128, 32)
        .never("a tear inside a unit", |s| s.contains('M'))
        .sometimes("a tear at the unit boundary", |s| s == "ON" || s == "NO");
}

/// Tearing at 8-byte units (`atomicity_bytes = 8`): a 64-byte READ of one line concurrent with a
/// 64-byte WRITE shows some words old and others new (a tear inside one 64-byte line), never a
/// word that is part old, part new. With the default 64-byte unit the same READ is never torn.
///
/// Source: DESIGN.md §1 rule 2 (`atomicity_bytes` = 64 or 8: the weakest reading keeps only
/// aligned 8-byte single-copy atomicity); RDMA^TSO (OOPSLA'24), non-atomic gets and puts.
#[test]
fn eight_byte_atomicity_tears_inside_a_line() {
    let eight = config(MemoryModel { atomicity_bytes: 8, ..MemoryModel::default() });
    torn_read("tear 8", &eight, SEEDS, LINES, 64, 64, 8)
        .never("an 8-byte word is part old, part new", |s| s.contains('M'))
        .sometimes("a 64-byte line torn at 8-byte granularity", |s| s.contains('O') && s.contains('N'));
    torn_read("no tear at 64", &default_config(), SEEDS, LINES, 64, 64, 64)
        .always("a one-unit READ is all old or all new", |s| s == "O" || s == "N");
}

// ---------------------------------------------------------------- 5, 6. unit-order switches

/// `read_units_ascending`: client A posts `[WRITE unit1 := 1s, WRITE unit0 := 1s]` on one QP
/// (placed in that order); client B reads both units with one 128-byte READ. B can see unit0
/// new and unit1 old only if its READ samples unit1 before unit0: possible by default (any
/// order), impossible with `read_units_ascending = true`.
///
/// Source: RDMA^TSO (OOPSLA'24): the order in which a get reads its bytes is unspecified;
/// DESIGN.md §1 rule 2.
#[test]
fn read_unit_order_switch() {
    let scenario = |sim: &mut Sim| -> Finish<String> {
        let out = Rc::new(RefCell::new(Vec::new()));
        let out2 = out.clone();
        spawn(sim, move |c| async move {
            c.post(vec![Request::write(LINES.add(UNIT), fill(1, 64)), Request::write(LINES, fill(1, 64))])
                .await
                .unwrap();
        });
        spawn(sim, move |c| async move {
            let b = c.post(vec![Request::read_len(LINES, 128)]).await.unwrap();
            *out2.borrow_mut() = bytes(b.into_iter().next().unwrap());
        });
        Box::new(move |_| classify(&out.borrow(), 64, 0, 1))
    };
    explore("READ units in any order", &default_config(), SEEDS, scenario)
        .never("a torn unit", |s| s.contains('M'))
        .sometimes("unit0 new, unit1 old", |s| s == "NO");
    let ascending = config(MemoryModel { read_units_ascending: true, ..MemoryModel::default() });
    explore("READ units ascending", &ascending, SEEDS, scenario)
        .never("unit0 new, unit1 old", |s| s == "NO")
        .sometimes("unit0 old, unit1 new", |s| s == "ON");
}

/// `write_units_arbitrary`: a 128-byte WRITE of 1s over two units; a reader posts
/// `[READ unit1, READ unit0 (fenced)]`. Seeing unit1 new and unit0 old needs the WRITE to place
/// unit1 first: never with the default ascending placement, possible with
/// `write_units_arbitrary = true`.
///
/// Source: RDMA^TSO (OOPSLA'24): the order in which a put writes its bytes is unspecified
/// (ascending in practice for PCIe posted writes); DESIGN.md §1 rule 2.
#[test]
fn write_unit_order_switch() {
    let scenario = |sim: &mut Sim| -> Finish<(u64, u64)> {
        let (u1, u0) = (Rec::default(), Rec::default());
        let (u1b, u0b) = (u1.clone(), u0.clone());
        spawn(sim, move |c| async move {
            c.write(LINES, fill(1, 128).into()).await.unwrap();
        });
        spawn(sim, move |c| async move {
            let out = c
                .post(vec![Request::read_len(LINES.add(UNIT), 64), Request::read_len(LINES, 64).fenced()])
                .await
                .unwrap();
            u1b.set(out[0].clone().into_buf().unwrap()[0] as u64);
            u0b.set(out[1].clone().into_buf().unwrap()[0] as u64);
        });
        Box::new(move |_| (u1.get(), u0.get()))
    };
    explore("WRITE units ascending", &default_config(), SEEDS, scenario)
        .never("unit1 new, unit0 old", |&(u1, u0)| u1 == 1 && u0 == 0)
        .sometimes("unit1 old, unit0 new", |&(u1, u0)| u1 == 0 && u0 == 1);
    let arbitrary = config(MemoryModel { write_units_arbitrary: true, ..MemoryModel::default() });
    explore("WRITE units arbitrary", &arbitrary, SEEDS, scenario)
        .sometimes("unit1 new, unit0 old", |&(u1, u0)| u1 == 1 && u0 == 0);
}

// ------------------------------------------------------------------------ 7, 8. RMW atomicity

/// `rmw_atomic_with_writes`: an FAA(+1) on x=0 by one client concurrent with a WRITE x=5 by
/// another. By default (false) the RMW is a read step and a write step, and the WRITE can land
/// between them and be lost: final value 1. With true the final value is always 5 (FAA first)
/// or 6 (WRITE first).
///
/// Source: RDMA^TSO_RMW (remote atomics are atomic only with respect to other atomics of the
/// same NIC, not to puts or CPU stores); InfiniBand vol. 1 §9.4.5 / §10.8.3.3 leave atomicity
/// with respect to non-atomic accesses to the implementation; DESIGN.md §1 rule 1.
#[test]
fn rmw_atomicity_with_writes_switch() {
    let scenario = |sim: &mut Sim| -> Finish<(u64, u64)> {
        let old = Rec::default();
        let old2 = old.clone();
        spawn(sim, move |c| async move {
            old2.set(c.faa(X, 1).await.unwrap());
        });
        spawn(sim, move |c| async move {
            c.write(X, word(5).into()).await.unwrap();
        });
        Box::new(move |sim| (old.get(), mem_word(sim, X)))
    };
    explore("FAA vs WRITE, two-step RMW", &default_config(), SEEDS, scenario)
        .sometimes("the WRITE is lost between the RMW's steps", |&(old, fin)| old == 0 && fin == 1)
        .sometimes("FAA first", |&(_, fin)| fin == 5)
        .sometimes("WRITE first", |&(old, fin)| old == 5 && fin == 6);
    let atomic = config(MemoryModel { rmw_atomic_with_writes: true, ..MemoryModel::default() });
    explore("FAA vs WRITE, atomic RMW", &atomic, SEEDS, scenario)
        .always("the FAA and the WRITE are serialised", |&(old, fin)| (old == 0 && fin == 5) || (old == 5 && fin == 6))
        .sometimes("FAA first", |&(_, fin)| fin == 5)
        .sometimes("WRITE first", |&(_, fin)| fin == 6);
}

/// The scenario of [`rmws_are_atomic_with_each_other`]: `clients` clients each increment x
/// `rounds` times; even clients with FAA +1, odd ones with a CAS loop (a READ for the first guess,
/// then CAS until it succeeds). With `read_first`, every FAA is posted in a batch behind an
/// unrelated READ of another word (`[READ z, FAA x]`). The outcome is the final value and
/// whether the old words of the successful increments were exactly `0..total` (each increment
/// saw a distinct predecessor).
fn increments(clients: u64, rounds: u64, read_first: bool) -> impl Fn(&mut Sim) -> Finish<(u64, bool)> {
    move |sim: &mut Sim| {
        let olds = Rc::new(RefCell::new(Vec::new()));
        for i in 0..clients {
            let olds = olds.clone();
            spawn(sim, move |c| async move {
                for _ in 0..rounds {
                    if i % 2 == 0 {
                        let old = if read_first {
                            value(&c.post(vec![Request::read_len(Z, 8), Request::faa(X, 1)]).await.unwrap()[1])
                        } else {
                            c.faa(X, 1).await.unwrap()
                        };
                        olds.borrow_mut().push(old);
                    } else {
                        let mut guess = c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0);
                        for attempt in 0.. {
                            assert!(attempt < SPIN_LIMIT, "a CAS loop did not converge");
                            let old = c.cas(X, guess, guess + 1).await.unwrap();
                            if old == guess {
                                olds.borrow_mut().push(old);
                                break;
                            }
                            guess = old;
                        }
                    }
                }
            });
        }
        Box::new(move |sim| {
            let mut olds = olds.borrow().clone();
            olds.sort_unstable();
            let exact = olds.iter().copied().eq(0..clients * rounds);
            (mem_word(sim, X), exact)
        })
    }
}

/// RMW atomicity among RMWs, under the default (two-step RMWs): 4 clients each increment the
/// same word 3 times (two with FAA, two with CAS loops); the final value is always exactly 12
/// and the increments' old words are exactly 0..12 (no RMW lost, none saw the same
/// predecessor). Some CAS must have failed in some schedule (the clients really raced).
///
/// Source: InfiniBand vol. 1 §9.4.5 (atomic operations are atomic with respect to other atomics
/// of the same HCA); RDMA^TSO_RMW; DESIGN.md §1 rule 1.
#[test]
fn rmws_are_atomic_with_each_other() {
    explore("4 clients x 3 increments", &default_config(), SEEDS, increments(4, 3, false))
        .always("every increment counted, once", |&(fin, exact)| fin == 12 && exact);
    // Non-vacuity: with one CAS client racing one FAA client, some CAS sees a stale guess.
    let seen = explore("CAS retries happen", &default_config(), SEEDS, |sim| {
        let failed = Rc::new(Cell::new(false));
        let f2 = failed.clone();
        spawn(sim, move |c| async move {
            c.faa(X, 1).await.unwrap();
        });
        spawn(sim, move |c| async move {
            let guess = c.read(X, Buf::zeroed(8)).await.unwrap().u64_at(0);
            if c.cas(X, guess, guess + 1).await.unwrap() != guess {
                f2.set(true);
            }
        });
        Box::new(move |_| failed.get())
    });
    seen.sometimes("a CAS fails because an FAA got in first", |&f| f);
}

/// The same, with every FAA posted behind an unrelated READ in its batch (`[READ z, FAA x]`, the
/// shape of a read-then-lock doorbell batch). The READ does not order the FAA (READ → RMW is
/// unordered unless fenced), but the FAA must still be applied exactly once.
///
/// Source: InfiniBand vol. 1 §9.4.5; RDMA^TSO_RMW; DESIGN.md §1 rule 1.
#[test]

fn rmws_are_atomic_with_each_other_behind_reads() {
    explore("2 FAA + 2 CAS clients, [READ, FAA] batches", &default_config(), SEEDS, increments(4, 3, true))
        .always("every increment counted, once", |&(fin, exact)| fin == 12 && exact);
}

/// Regression scenario for a simulator bug found by this suite: a two-step RMW that queues on its address lock
/// (because another QP's RMW on the same word is between its read and write steps) is started
/// AGAIN when any other verb of its own QP finishes meanwhile, so it sits in the lock's waiter
/// queue twice and its RmwRead step runs twice.
///
/// Client A: `FAA x +1`. Client B: `[READ z, FAA x +1]` (the READ does not order the FAA).
/// Expected: final x = 2 and the FAAs return {0, 1}. Observed before the fix, over seeds 0..3000: 116 schedules silently apply B's FAA twice (final x = 3, B's FAA returns 2, its own
/// first increment; first at seed 61), and 315 panic in the simulator (first at seed 6) because
/// the stale duplicate RmwRead/RmwWrite step refers to a verb whose slab slot was freed when its
/// batch completed ("slab slot is live") or reused by another verb ("an RMW"). The same happens
/// with `[FAA x, READ z]` under `rmw_then_read_unordered` (the later READ finishing re-starts the
/// queued FAA). Timed runs with the tearing fault split RMWs too and can hit it as well.
///
/// Regression: `start` once left a lock-queued RMW in `Phase::Waiting`, and
/// `finish_at_responder` re-ran `may_start` + `start` on it, queueing it twice (it now waits in
/// `Phase::LockWait`).
///
/// Source: InfiniBand vol. 1 §9.4.5 and RDMA^TSO_RMW (an atomic executes exactly once, atomically
/// with respect to other atomics); DESIGN.md §1 rule 1.
#[test]
fn rmw_queued_on_address_lock_executes_once() {
    let scenario = |read_first: bool| {
        move |sim: &mut Sim| -> Finish<(u64, u64, u64)> {
            let (a, b) = (Rec::default(), Rec::default());
            let (a2, b2) = (a.clone(), b.clone());
            spawn(sim, move |c| async move {
                a2.set(c.faa(X, 1).await.unwrap());
            });
            spawn(sim, move |c| async move {
                let old = if read_first {
                    value(&c.post(vec![Request::read_len(Z, 8), Request::faa(X, 1)]).await.unwrap()[1])
                } else {
                    value(&c.post(vec![Request::faa(X, 1), Request::read_len(Z, 8)]).await.unwrap()[0])
                };
                b2.set(old);
            });
            Box::new(move |sim| (a.get().min(b.get()), a.get().max(b.get()), mem_word(sim, X)))
        }
    };
    explore("[READ z, FAA x] vs FAA x", &default_config(), SEEDS, scenario(true))
        .always("each FAA applied once", |&o| o == (0, 1, 2));
    let weak = config(MemoryModel { rmw_then_read_unordered: true, ..MemoryModel::default() });
    explore("[FAA x, READ z] vs FAA x, unordered", &weak, SEEDS, scenario(false))
        .always("each FAA applied once", |&o| o == (0, 1, 2));
}

// ------------------------------------------------------------------------- 9. litmus shapes

/// Litmus MP (message passing), from RDMA^TSO (OOPSLA'24): the writer puts data then flag on
/// one QP; the reader gets flag then data. The weak outcome flag=1, data=0 is allowed when the
/// reader's two READs are unfenced (READ → READ unordered) and forbidden when the data READ is
/// fenced, whichever way the writer orders its WRITEs on its QP: one batch, two unsignaled
/// posts, or a WRITE then a CAS on the flag.
///
/// Source: RDMA^TSO (OOPSLA'24), MP with put/put and get/get; InfiniBand vol. 1 §9.5 and
/// §10.8.3.3 (the fence).
#[test]
fn litmus_mp() {
    #[derive(Clone, Copy, Debug)]
    enum Writer {
        Batch,
        Unsignaled,
        WriteThenCas,
    }
    let scenario = |writer: Writer, fenced: bool| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            let (flag, data) = (Rec::default(), Rec::default());
            let (flag2, data2) = (flag.clone(), data.clone());
            spawn(sim, move |c| async move {
                match writer {
                    Writer::Batch => {
                        c.post(vec![Request::write(X, word(1)), Request::write(Y, word(1))]).await.unwrap();
                    }
                    Writer::Unsignaled => {
                        c.post_unsignaled(vec![Request::write(X, word(1))]).unwrap();
                        c.post_unsignaled(vec![Request::write(Y, word(1))]).unwrap();
                    }
                    Writer::WriteThenCas => {
                        c.post(vec![Request::write(X, word(1)), Request::cas(Y, 0, 1)]).await.unwrap();
                    }
                }
            });
            spawn(sim, move |c| async move {
                let data_read = Request::read_len(X, 8);
                let data_read = if fenced { data_read.fenced() } else { data_read };
                let out = c.post(vec![Request::read_len(Y, 8), data_read]).await.unwrap();
                flag2.set(value(&out[0]));
                data2.set(value(&out[1]));
            });
            Box::new(move |_| (flag.get(), data.get()))
        }
    };
    let weak = |&(flag, data): &(u64, u64)| flag == 1 && data == 0;
    for writer in [Writer::Batch, Writer::Unsignaled, Writer::WriteThenCas] {
        explore(&format!("MP {writer:?}, unfenced reads"), &default_config(), MANY_SEEDS, scenario(writer, false))
            .sometimes("flag=1, data=0", weak);
        explore(&format!("MP {writer:?}, fenced data READ"), &default_config(), SEEDS, scenario(writer, true))
            .never("flag=1, data=0", weak)
            .sometimes("flag=1, data=1", |&(f, d)| f == 1 && d == 1);
    }
}

/// Litmus SB (store buffering), from RDMA^TSO (OOPSLA'24), phrased with verbs: client A puts
/// x=1 then gets y; client B puts y=1 then gets x. Outcome (A reads y=0, B reads x=0):
/// - both words on one node, each client's WRITE and READ in one batch (one QP, WRITE → READ
///   "sees the WRITE"): forbidden;
/// - x on node 0 and y on node 1 (the WRITE and the READ on different QPs), both posted before
///   either completes: allowed;
/// - the same two QPs, but the READ posted only after the WRITE's completion: forbidden
///   (completion makes the WRITE visible to every later verb).
///
/// Source: RDMA^TSO (OOPSLA'24), SB; InfiniBand vol. 1 §9.5; DESIGN.md §1 rules 3 and 4.
#[test]
fn litmus_sb() {
    #[derive(Clone, Copy, Debug)]
    enum Shape {
        OneQpBatch,
        TwoQpsInFlight,
        TwoQpsAwaitWrite,
    }
    let scenario = |shape: Shape| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            let (x, y) = match shape {
                Shape::OneQpBatch => (X, Y),
                _ => (RemoteAddr::host(NodeId(0), 0x1000), RemoteAddr::host(NodeId(1), 0x1000)),
            };
            let (ra, rb) = (Rec::default(), Rec::default());
            for (mine, other, rec) in [(x, y, ra.clone()), (y, x, rb.clone())] {
                spawn(sim, move |c| async move {
                    let r = match shape {
                        Shape::OneQpBatch => value(
                            &c.post(vec![Request::write(mine, word(1)), Request::read_len(other, 8)]).await.unwrap()[1],
                        ),
                        Shape::TwoQpsInFlight => {
                            let w = c.post(vec![Request::write(mine, word(1))]);
                            let r = c.post(vec![Request::read_len(other, 8)]);
                            let r = value(&r.await.unwrap()[0]);
                            w.await.unwrap();
                            r
                        }
                        Shape::TwoQpsAwaitWrite => {
                            c.post(vec![Request::write(mine, word(1))]).await.unwrap();
                            value(&c.post(vec![Request::read_len(other, 8)]).await.unwrap()[0])
                        }
                    };
                    rec.set(r);
                });
            }
            Box::new(move |_| (ra.get(), rb.get()))
        }
    };
    let mut two = default_config();
    two.topology.memory_nodes = 2;
    let both_zero = |&(a, b): &(u64, u64)| a == 0 && b == 0;
    explore("SB one QP", &two, SEEDS, scenario(Shape::OneQpBatch))
        .never("both READs miss the other WRITE", both_zero)
        .sometimes("both READs see the other WRITE", |&(a, b)| a == 1 && b == 1);
    explore("SB two QPs in flight", &two, SEEDS, scenario(Shape::TwoQpsInFlight))
        .sometimes("both READs miss the other WRITE", both_zero);
    explore("SB two QPs, WRITE awaited", &two, SEEDS, scenario(Shape::TwoQpsAwaitWrite))
        .never("both READs miss the other WRITE", both_zero);
}

/// Litmus 2+2W, from RDMA^TSO (OOPSLA'24): client A puts x=1 then y=2; client B puts y=1 then
/// x=2. The final state x=1 ∧ y=1 needs each client's second WRITE to be placed before its
/// first: forbidden when each client's two WRITEs share a QP (WRITE → WRITE placed after),
/// allowed when x and y live on different memory nodes (two QPs per client).
///
/// Source: RDMA^TSO (OOPSLA'24), 2+2W; InfiniBand vol. 1 §9.5.
#[test]
fn litmus_2_plus_2w() {
    let scenario = |x: RemoteAddr, y: RemoteAddr| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            for (first, second) in [(x, y), (y, x)] {
                spawn(sim, move |c| async move {
                    c.post_unsignaled(vec![Request::write(first, word(1))]).unwrap();
                    c.post(vec![Request::write(second, word(2))]).await.unwrap();
                });
            }
            Box::new(move |sim| (mem_word(sim, x), mem_word(sim, y)))
        }
    };
    let mut two = default_config();
    two.topology.memory_nodes = 2;
    let (x1, y1) = (RemoteAddr::host(NodeId(0), 0x1000), RemoteAddr::host(NodeId(1), 0x1000));
    explore("2+2W one QP", &two, SEEDS, scenario(X, Y))
        .never("x=1, y=1", |&(x, y)| x == 1 && y == 1)
        .sometimes("x=2, y=2 (the WRITEs interleave)", |&(x, y)| x == 2 && y == 2);
    explore("2+2W two QPs", &two, SEEDS, scenario(x1, y1)).sometimes("x=1, y=1", |&(x, y)| x == 1 && y == 1);
}

/// Litmus LB (load buffering), from RDMA^TSO (OOPSLA'24): client A posts `[READ x, WRITE y=1]`,
/// client B `[READ y, WRITE x=1]`. Both READs returning 1 needs each WRITE to land before its
/// own QP's earlier READ samples: allowed with unfenced WRITEs (READ → WRITE unordered),
/// forbidden when the WRITEs are fenced.
///
/// Source: RDMA^TSO (OOPSLA'24), LB (get → put); InfiniBand vol. 1 §10.8.3.3 (the fence).
#[test]
fn litmus_lb() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<(u64, u64)> {
            let (ra, rb) = (Rec::default(), Rec::default());
            for (read, write, rec) in [(X, Y, ra.clone()), (Y, X, rb.clone())] {
                spawn(sim, move |c| async move {
                    let w = Request::write(write, word(1));
                    let w = if fenced { w.fenced() } else { w };
                    rec.set(value(&c.post(vec![Request::read_len(read, 8), w]).await.unwrap()[0]));
                });
            }
            Box::new(move |_| (ra.get(), rb.get()))
        }
    };
    let both_one = |&(a, b): &(u64, u64)| a == 1 && b == 1;
    explore("LB unfenced", &default_config(), SEEDS, scenario(false)).sometimes("both READs see 1", both_one);
    explore("LB fenced", &default_config(), SEEDS, scenario(true))
        .never("both READs see 1", both_one)
        .sometimes("one READ sees 1", |&(a, b)| a + b == 1);
}

/// Litmus IRIW (independent reads of independent writes), from RDMA^TSO (OOPSLA'24): A puts
/// x=1, B puts y=1; C gets x then y, D gets y then x. C seeing (x=1, y=0) while D sees
/// (y=1, x=0) means the two readers disagree on the order of the WRITEs: allowed when the
/// readers' second READs are unfenced (READ → READ unordered), forbidden when fenced (memory
/// is multi-copy atomic).
///
/// Source: RDMA^TSO (OOPSLA'24), IRIW; InfiniBand vol. 1 §10.8.3.3 (the fence).
#[test]
fn litmus_iriw() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<[u64; 4]> {
            for a in [X, Y] {
                spawn(sim, move |c| async move {
                    c.write(a, word(1).into()).await.unwrap();
                });
            }
            let recs: Vec<Rec> = (0..4).map(|_| Rec::default()).collect();
            for (first, second, r1, r2) in
                [(X, Y, recs[0].clone(), recs[1].clone()), (Y, X, recs[2].clone(), recs[3].clone())]
            {
                spawn(sim, move |c| async move {
                    let s = Request::read_len(second, 8);
                    let s = if fenced { s.fenced() } else { s };
                    let out = c.post(vec![Request::read_len(first, 8), s]).await.unwrap();
                    r1.set(value(&out[0]));
                    r2.set(value(&out[1]));
                });
            }
            Box::new(move |_| [recs[0].get(), recs[1].get(), recs[2].get(), recs[3].get()])
        }
    };
    let disagree = |o: &[u64; 4]| *o == [1, 0, 1, 0];
    explore("IRIW unfenced", &default_config(), IRIW_SEEDS, scenario(false))
        .sometimes("the readers disagree on the order of the WRITEs", disagree);
    explore("IRIW fenced", &default_config(), MANY_SEEDS, scenario(true))
        .never("the readers disagree on the order of the WRITEs", disagree)
        .sometimes("one reader sees one WRITE only", |o| o[0] != o[1] || o[2] != o[3]);
}

/// Litmus WRC (write-to-read causality), from RDMA^TSO (OOPSLA'24): A puts x=1; B posts
/// `[READ x, WRITE y=1]`; C posts `[READ y, READ x (fenced)]`. The outcome B reads x=1, C reads
/// y=1 and x=0 is allowed when B's WRITE is unfenced (it may land before B's READ samples) and
/// forbidden when it is fenced (then y=1 implies x=1 was already placed).
///
/// Source: RDMA^TSO (OOPSLA'24), WRC; InfiniBand vol. 1 §10.8.3.3 (fence on a WRITE that
/// depends on an earlier READ).
#[test]
fn litmus_wrc() {
    let scenario = |fenced: bool| {
        move |sim: &mut Sim| -> Finish<(u64, u64, u64)> {
            let (bx, cy, cx) = (Rec::default(), Rec::default(), Rec::default());
            let (bx2, cy2, cx2) = (bx.clone(), cy.clone(), cx.clone());
            spawn(sim, move |c| async move {
                c.write(X, word(1).into()).await.unwrap();
            });
            spawn(sim, move |c| async move {
                let w = Request::write(Y, word(1));
                let w = if fenced { w.fenced() } else { w };
                bx2.set(value(&c.post(vec![Request::read_len(X, 8), w]).await.unwrap()[0]));
            });
            spawn(sim, move |c| async move {
                let out = c.post(vec![Request::read_len(Y, 8), Request::read_len(X, 8).fenced()]).await.unwrap();
                cy2.set(value(&out[0]));
                cx2.set(value(&out[1]));
            });
            Box::new(move |_| (bx.get(), cy.get(), cx.get()))
        }
    };
    let weak = |&(bx, cy, cx): &(u64, u64, u64)| bx == 1 && cy == 1 && cx == 0;
    explore("WRC unfenced WRITE", &default_config(), MANY_SEEDS, scenario(false))
        .sometimes("B saw x, C saw y but not x", weak);
    explore("WRC fenced WRITE", &default_config(), MANY_SEEDS, scenario(true))
        .never("B saw x, C saw y but not x", weak)
        .sometimes("C saw y and x", |&(_, cy, cx)| cy == 1 && cx == 1);
}

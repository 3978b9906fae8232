//! The measured client, written once for every backend: the loop that takes operations from a
//! client's [`OpSource`], runs them (recording them in the history when one is kept), and
//! tallies what completed, with the state it shares with its run's monitor.
//!
//! What differs between backends is a [`Meter`]: how a client tells time (simulated, or the
//! wall clock from the measured phase's start), what its verbs cost so far (the simulator's
//! counts; nothing on hardware), the history's clock (the simulator's step counter, a
//! cluster-wide FAA on hardware), and what happens between two operations (nothing in the
//! simulator, whose schedule must not change; a yield on hardware, so a thread's other
//! coroutines and its completion queue run).

use super::schema::{OpSource, TimePoint, round3, useful_bytes};
use super::tally::OpLog;
use dmkit_indexes::Index;
use dmkit_indexes::spec::{self, Op, Outcome};
use dmkit_sim::ClientStats;
use dmkit_verify::history::{History, apply_recorded};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// How a backend's client measures itself (module doc).
pub(crate) trait Meter: 'static {
    /// Whether the client's verb and retry costs are tallied per tick, so that a result can
    /// give them over the measured window. The simulator's ticks are of simulated time and a
    /// run lasts milliseconds; on hardware a tick of wall-clock time makes this 152 bytes per
    /// 10 µs per thread (1.8 GB a minute at 32 threads), for verb counts it does not have, so
    /// hardware gives its retries over the whole run instead.
    const PER_TICK_COSTS: bool;
    /// Nanoseconds since the measured phase began.
    fn now_ns(&self) -> u64;
    /// The client's verb costs so far (zero where the backend does not count them).
    fn stats(&self) -> ClientStats;
    /// A fresh stamp of the history's clock.
    fn stamp(&self) -> impl Future<Output = Result<u64, String>>;
    /// Runs between two operations of the client.
    fn between(&self) -> impl Future<Output = ()>;
}

/// What a run's clients share with its monitor: when to stop, how many still run, and when
/// the first ran out of operations. Times are ns from the measured phase's start.
#[derive(Debug)]
pub(crate) struct Phase {
    pub tick_ns: u64,
    /// Whether every completion time is kept (`--timeseries-us`).
    pub timeseries: bool,
    /// Clients start no operation at or after this.
    end_ns: AtomicU64,
    running: AtomicUsize,
    first_done_ns: AtomicU64,
    /// An executor failed: the run ends now, whatever its clients still have to do.
    failed: AtomicBool,
}

impl Phase {
    /// The phase of `clients` clients, which stop starting operations at `end_ns`.
    pub fn new(clients: usize, tick_ns: u64, timeseries: bool, end_ns: u64) -> Phase {
        Phase {
            tick_ns,
            timeseries,
            end_ns: AtomicU64::new(end_ns),
            running: AtomicUsize::new(clients),
            first_done_ns: AtomicU64::new(u64::MAX),
            failed: AtomicBool::new(false),
        }
    }

    pub fn end_ns(&self) -> u64 {
        self.end_ns.load(Ordering::Relaxed)
    }

    /// No client starts an operation at or after `at`.
    pub fn stop_at(&self, at: u64) {
        self.end_ns.fetch_min(at, Ordering::Relaxed);
    }

    /// An executor failed: stop every client, and let the monitor end the run.
    #[cfg_attr(not(feature = "connectx"), allow(dead_code))]
    pub fn fail(&self) {
        self.stop_at(0);
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Whether every client has finished (or the run failed).
    pub fn ended(&self) -> bool {
        self.running.load(Ordering::Relaxed) == 0 || self.failed.load(Ordering::Relaxed)
    }

    /// When the first client ran out of operations (`u64::MAX` while none has).
    pub fn first_done_ns(&self) -> u64 {
        self.first_done_ns.load(Ordering::Relaxed)
    }
}

/// Operations completed per tick by one executor's clients (the simulation's, or one hardware
/// thread's); the monitor sums every executor's at its checks.
#[derive(Debug, Default)]
pub(crate) struct Series(Mutex<Vec<u64>>);

impl Series {
    fn count(&self, tick: usize) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if s.len() <= tick {
            s.resize(tick + 1, 0);
        }
        s[tick] += 1;
    }

    /// The series of several executors, summed tick by tick.
    pub fn sum(all: &[impl AsRef<Series>]) -> Vec<u64> {
        let mut sum: Vec<u64> = Vec::new();
        for s in all {
            let s = s.as_ref().0.lock().unwrap_or_else(|e| e.into_inner());
            if sum.len() < s.len() {
                sum.resize(s.len(), 0);
            }
            for (total, x) in sum.iter_mut().zip(s.iter()) {
                *total += x;
            }
        }
        sum
    }
}

/// What one tick of the series accumulates besides its operation count.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TickCost {
    pub cost: ClientStats,
    pub useful_bytes: u64,
    pub retries: u64,
    pub lock_failures: u64,
    pub cas_failures: u64,
}

impl TickCost {
    fn add(&mut self, other: &TickCost) {
        self.cost.add(&other.cost);
        self.useful_bytes += other.useful_bytes;
        self.retries += other.retries;
        self.lock_failures += other.lock_failures;
        self.cas_failures += other.cas_failures;
    }
}

/// What one executor's measured clients record.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub log: OpLog,
    /// Per tick, what its completed operations cost.
    pub costs: Vec<TickCost>,
    /// Completion times of every operation, if a time series was asked for.
    pub completions: Vec<u64>,
    /// Why the history's clock could not be read, if it could not.
    pub clock_error: Option<String>,
}

impl Tally {
    /// Adds another executor's tally.
    #[cfg_attr(not(feature = "connectx"), allow(dead_code))]
    pub fn merge(&mut self, other: Tally) {
        self.log.merge(other.log);
        if self.costs.len() < other.costs.len() {
            self.costs.resize(other.costs.len(), TickCost::default());
        }
        for (mine, theirs) in self.costs.iter_mut().zip(&other.costs) {
            mine.add(theirs);
        }
        self.completions.extend(other.completions);
        self.clock_error = self.clock_error.take().or(other.clock_error);
    }

    /// The costs of ticks `from..to`, summed.
    pub fn window_cost(&self, from: usize, to: usize) -> TickCost {
        let mut sum = TickCost::default();
        for c in self.costs.get(from..to.min(self.costs.len())).unwrap_or(&[]) {
            sum.add(c);
        }
        sum
    }

    /// Operations completed per `step_ns` over the first `until_ns` of the phase.
    pub fn timeseries(&self, step_ns: u64, until_ns: u64) -> Vec<TimePoint> {
        let buckets = until_ns.div_ceil(step_ns).max(1) as usize;
        let mut counts = vec![0u64; buckets];
        for &t in &self.completions {
            counts[((t / step_ns) as usize).min(buckets - 1)] += 1;
        }
        counts
            .into_iter()
            .enumerate()
            .map(|(i, n)| TimePoint {
                t_us: (i as u64 * step_ns) as f64 / 1e3,
                operations: n,
                throughput_mops: round3(n as f64 / (step_ns as f64 / 1e9) / 1e6),
            })
            .collect()
    }
}

/// What an executor's clients leave: their tally, and their history when one was kept.
pub(crate) type Recorded = (Tally, Option<History>);

/// Where a measured client records: its run's phase, its executor's series and tally, and the
/// executor's history when one is kept.
#[derive(Clone)]
pub(crate) struct Sink {
    pub phase: std::sync::Arc<Phase>,
    pub series: std::sync::Arc<Series>,
    pub tally: Rc<RefCell<Tally>>,
    pub history: Option<Rc<RefCell<History>>>,
}

impl Sink {
    /// The tally and the history, once every client of the executor has finished.
    pub fn finish(self) -> Result<Recorded, String> {
        let outlived = || "clients outlived the run".to_string();
        let tally = Rc::try_unwrap(self.tally).map_err(|_| outlived())?.into_inner();
        let history = match self.history {
            Some(h) => Some(Rc::try_unwrap(h).map_err(|_| outlived())?.into_inner()),
            None => None,
        };
        Ok((tally, history))
    }

    /// Runs client `id` (one of the clients its [`Phase`] counts): operations from `source` on
    /// `handle` until the source runs dry or the phase ends, each task's outcome tallied if it
    /// completed before the end.
    pub fn client<I: Index + 'static, M: Meter>(
        &self,
        id: u32,
        mut handle: I,
        mut source: Box<dyn OpSource>,
        meter: M,
    ) -> impl Future<Output = ()> + 'static {
        let Sink { phase, series, tally, history } = self.clone();
        async move {
            while meter.now_ns() < phase.end_ns() {
                let Some(task) = source.next_op() else { break };
                let (t0, s0) = (meter.now_ns(), meter.stats());
                let k0 = handle.counters();
                let k0 = (k0.retries, k0.lock_failures, k0.cas_failures);
                let recorded = history.as_deref().map(|h| (id, h, || meter.stamp()));
                let outcomes = match perform(&mut handle, &task.ops, recorded).await {
                    Ok(outcomes) => outcomes,
                    // The record whose response could not be stamped stays unfinished
                    // (indeterminate), and the run fails with the clock's error.
                    Err(e) => {
                        tally.borrow_mut().clock_error = Some(e);
                        break;
                    }
                };
                let t1 = meter.now_ns();
                // An operation that completed after the run was stopped is not measured.
                if t1 <= phase.end_ns() {
                    let tick = (t1 / phase.tick_ns) as usize;
                    let k1 = handle.counters();
                    let mut t = tally.borrow_mut();
                    if t.log.task(task.name, &outcomes, t1 - t0, tick) {
                        series.count(tick);
                        if phase.timeseries {
                            t.completions.push(t1);
                        }
                        if M::PER_TICK_COSTS {
                            if t.costs.len() <= tick {
                                t.costs.resize(tick + 1, TickCost::default());
                            }
                            let cost = &mut t.costs[tick];
                            cost.cost.add(&meter.stats().since(&s0));
                            cost.retries += k1.retries - k0.0;
                            cost.lock_failures += k1.lock_failures - k0.1;
                            cost.cas_failures += k1.cas_failures - k0.2;
                            for (op, outcome) in task.ops.iter().zip(&outcomes) {
                                cost.useful_bytes += useful_bytes(op, outcome);
                            }
                        }
                    }
                }
                meter.between().await;
            }
            tally.borrow_mut().log.counters.merge(handle.counters());
            phase.first_done_ns.fetch_min(meter.now_ns(), Ordering::Relaxed);
            phase.running.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A task's operations in order, stopping after the first that failed. With `recorded` =
/// (client id, history, the history's clock), each operation enters the history through
/// [`apply_recorded`]; `Err` is the clock's failure, after which the client must stop.
async fn perform<I, E, F, S>(
    handle: &mut I,
    ops: &[Op],
    mut recorded: Option<(u32, &RefCell<History>, S)>,
) -> Result<Vec<Outcome>, E>
where
    I: Index,
    S: FnMut() -> F,
    F: Future<Output = Result<u64, E>>,
{
    let mut outcomes = Vec::with_capacity(ops.len());
    for op in ops {
        let outcome = match &mut recorded {
            Some((client, history, stamp)) => apply_recorded(handle, op, *client, history, &mut *stamp).await?,
            None => spec::apply(handle, op).await,
        };
        let failed = matches!(outcome, Outcome::Failed(_));
        outcomes.push(outcome);
        if failed {
            break;
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(retries: u64) -> TickCost {
        TickCost { retries, useful_bytes: 8 * retries, ..TickCost::default() }
    }

    #[test]
    fn executors_series_add_tick_by_tick() {
        let (a, b) = (std::sync::Arc::new(Series::default()), std::sync::Arc::new(Series::default()));
        for t in [0, 0, 2] {
            a.count(t);
        }
        b.count(1);
        b.count(4);
        assert_eq!(Series::sum(&[a, b]), vec![2, 1, 1, 0, 1]);
    }

    #[test]
    fn merged_tallies_keep_every_ticks_cost_and_the_first_clock_error() {
        let mut one = Tally { costs: vec![cost(1), cost(2)], completions: vec![5], ..Tally::default() };
        let other = Tally {
            costs: vec![cost(10), cost(20), cost(30)],
            completions: vec![7],
            clock_error: Some("node down".into()),
            ..Tally::default()
        };
        one.merge(other);
        assert_eq!(one.costs.iter().map(|c| c.retries).collect::<Vec<_>>(), vec![11, 22, 30]);
        assert_eq!(one.completions, vec![5, 7]);
        assert_eq!(one.clock_error.as_deref(), Some("node down"));
        // The window is ticks 1..3, past the end of the costs too.
        let w = one.window_cost(1, 5);
        assert_eq!((w.retries, w.useful_bytes), (52, 416));
        assert_eq!(one.window_cost(3, 5).retries, 0);
    }

    #[test]
    fn the_timeseries_buckets_completions_up_to_the_end() {
        let t = Tally { completions: vec![0, 999, 1000, 2500, 9999], ..Tally::default() };
        let s = t.timeseries(1000, 3000);
        assert_eq!(s.iter().map(|p| p.operations).collect::<Vec<_>>(), vec![2, 1, 2]);
        assert_eq!(s[0].throughput_mops, 2.0);
        assert_eq!(s[2].t_us, 2.0);
    }

    #[test]
    fn a_phase_ends_when_its_clients_finish_or_an_executor_fails() {
        let p = Phase::new(2, 100, false, u64::MAX);
        assert!(!p.ended());
        p.stop_at(500);
        p.stop_at(700);
        assert_eq!(p.end_ns(), 500);
        p.running.fetch_sub(2, Ordering::Relaxed);
        assert!(p.ended());
        let q = Phase::new(3, 100, false, u64::MAX);
        q.fail();
        assert!(q.ended());
        assert_eq!(q.end_ns(), 0);
    }
}

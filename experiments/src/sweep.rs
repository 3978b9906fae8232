//! Running the points of a sweep on every core, loading each index once, with progress.
//!
//! Each point is its own deterministic simulation, so running them in parallel changes only
//! the wall-clock time, never a result; results come back in point order. Points that load
//! the same state (the same image key: index, options, items, memory nodes, seed) share one
//! image ([`crate::runner`]): the first point to need it loads it, the others wait for it, and
//! it is dropped when its last point is done. A worker picks, in order of preference, a point
//! whose image is ready, then one whose image nobody is loading, so that two cores load two
//! images at once rather than wait on one.
//!
//! Progress goes to stderr: on a terminal, a bar for the sweep and a line per worker (keys
//! loaded with rate and ETA, or simulated time and the current interval); without one (a CI
//! log), a line every 10 seconds.

use crate::runner::{ImageSlot, Progress};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a log line is written when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Where a sweep's progress is shown.
struct Reporter {
    label: String,
    total: usize,
    started: Instant,
    /// What each worker is doing, for log lines.
    lines: Mutex<Vec<String>>,
    done: Mutex<usize>,
    bars: Option<(MultiProgress, ProgressBar, Vec<ProgressBar>)>,
}

impl Reporter {
    fn new(label: &str, total: usize, workers: usize) -> Reporter {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let overall = multi.add(ProgressBar::new(total as u64));
            overall.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} points, {elapsed}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            overall.set_message(label.to_string());
            overall.enable_steady_tick(Duration::from_millis(200));
            let lines = (0..workers)
                .map(|_| {
                    let b = multi.add(ProgressBar::new(1));
                    b.set_style(ProgressStyle::with_template("  {msg}").expect("valid template"));
                    b
                })
                .collect();
            (multi, overall, lines)
        });
        Reporter {
            label: label.to_string(),
            total,
            started: Instant::now(),
            lines: Mutex::new(vec![String::from("idle"); workers]),
            done: Mutex::new(0),
            bars,
        }
    }

    fn set(&self, worker: usize, line: String) {
        if let Some((_, _, lines)) = &self.bars {
            lines[worker].set_message(line.clone());
        }
        lock(&self.lines)[worker] = line;
    }

    fn point_done(&self) {
        *lock(&self.done) += 1;
        if let Some((_, overall, _)) = &self.bars {
            overall.inc(1);
        }
    }

    /// One log line: the sweep's state and each worker's.
    fn log_line(&self) -> String {
        let lines = lock(&self.lines);
        format!(
            "dmkit: {}: {}/{} points done after {:.0} s; {}",
            self.label,
            lock(&self.done),
            self.total,
            self.started.elapsed().as_secs_f64(),
            lines.iter().enumerate().map(|(i, l)| format!("[{}] {l}", i + 1)).collect::<Vec<_>>().join("; ")
        )
    }

    fn finish(&self) {
        if let Some((multi, overall, lines)) = &self.bars {
            for l in lines {
                l.finish_and_clear();
            }
            overall.finish_and_clear();
            let _ = multi.clear();
        }
    }
}

/// One worker's progress, as the runner reports it.
struct WorkerProgress<'a> {
    reporter: &'a Reporter,
    worker: usize,
    what: String,
    load_started: Mutex<Option<Instant>>,
}

impl Progress for WorkerProgress<'_> {
    fn loading(&self, done: u64, total: u64) {
        let mut started = lock(&self.load_started);
        let t0 = *started.get_or_insert_with(Instant::now);
        let secs = t0.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        let eta = if rate > 0.0 { format!(", ETA {:.0} s", (total - done) as f64 / rate) } else { String::new() };
        let pct = (100 * done).checked_div(total).unwrap_or(100);
        self.reporter.set(
            self.worker,
            format!("{}: loading {done}/{total} keys ({pct}%, {:.0}k keys/s{eta})", self.what, rate / 1e3),
        );
    }

    fn measuring(&self, sim_ns: u64, status: &str) {
        self.reporter.set(self.worker, format!("{}: {:.1} ms simulated, {status}", self.what, sim_ns as f64 / 1e6));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shared images of a sweep and which points still need each.
struct Images {
    /// Per distinct key: its slot, points not yet finished, workers running a point of it.
    slots: Vec<(ImageSlot, usize, usize)>,
    /// Per point: its key's index in `slots`, if it shares one.
    of_point: Vec<Option<usize>>,
    /// Points not yet taken, in order.
    pending: Vec<usize>,
}

/// Runs `f` on every point on up to `threads` OS threads, showing progress on stderr. Points
/// with the same `Some(key)` share an image slot (module doc); `describe` names a point in
/// progress lines. Returns the results in point order.
pub fn run_points_shared<P: Sync, R: Send>(
    points: &[P],
    keys: &[Option<String>],
    threads: usize,
    label: &str,
    describe: impl Fn(&P) -> String + Sync,
    f: impl Fn(&P, Option<&ImageSlot>, &dyn Progress) -> R + Sync,
) -> Vec<R> {
    assert_eq!(points.len(), keys.len(), "one key per point");
    let mut distinct: Vec<&String> = Vec::new();
    let of_point: Vec<Option<usize>> = keys
        .iter()
        .map(|k| {
            k.as_ref().map(|k| match distinct.iter().position(|d| *d == k) {
                Some(i) => i,
                None => {
                    distinct.push(k);
                    distinct.len() - 1
                }
            })
        })
        .collect();
    let mut slots: Vec<(ImageSlot, usize, usize)> =
        distinct.iter().map(|_| (Arc::new(std::sync::OnceLock::new()), 0, 0)).collect();
    for i in of_point.iter().flatten() {
        slots[*i].1 += 1;
    }
    let state = Mutex::new(Images { slots, of_point, pending: (0..points.len()).collect() });
    let workers = threads.clamp(1, points.len().max(1));
    let reporter = Reporter::new(label, points.len(), workers);
    let results: Mutex<Vec<Option<R>>> = Mutex::new(points.iter().map(|_| None).collect());
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        if reporter.bars.is_none() {
            s.spawn(|| {
                let mut last = Instant::now();
                while !finished.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if last.elapsed() >= LOG_EVERY {
                        eprintln!("{}", reporter.log_line());
                        last = Instant::now();
                    }
                }
            });
        }
        let mut handles = Vec::new();
        for worker in 0..workers {
            let (state, reporter, results, f, describe) = (&state, &reporter, &results, &f, &describe);
            handles.push(s.spawn(move || {
                loop {
                    // Take a point: one whose image is ready, else one whose image nobody is
                    // loading, else the first (it waits for the load in progress).
                    let (i, slot) = {
                        let mut st = lock(state);
                        if st.pending.is_empty() {
                            break;
                        }
                        let ready =
                            |st: &Images, p: usize| st.of_point[p].is_none_or(|k| st.slots[k].0.get().is_some());
                        let free = |st: &Images, p: usize| st.of_point[p].is_none_or(|k| st.slots[k].2 == 0);
                        let at = st
                            .pending
                            .iter()
                            .position(|&p| ready(&st, p))
                            .or_else(|| st.pending.iter().position(|&p| free(&st, p)))
                            .unwrap_or(0);
                        let i = st.pending.remove(at);
                        let slot = st.of_point[i].map(|k| {
                            st.slots[k].2 += 1;
                            st.slots[k].0.clone()
                        });
                        (i, slot)
                    };
                    let progress = WorkerProgress {
                        reporter,
                        worker,
                        what: format!("point {}/{} {}", i + 1, points.len(), describe(&points[i])),
                        load_started: Mutex::new(None),
                    };
                    reporter.set(worker, format!("{}: starting", progress.what));
                    let r = f(&points[i], slot.as_ref(), &progress);
                    drop(slot);
                    {
                        let mut st = lock(state);
                        if let Some(k) = st.of_point[i] {
                            st.slots[k].1 -= 1;
                            st.slots[k].2 -= 1;
                            if st.slots[k].1 == 0 {
                                // The image's last point is done: free its memory.
                                st.slots[k].0 = Arc::new(std::sync::OnceLock::new());
                            }
                        }
                    }
                    lock(results)[i] = Some(r);
                    reporter.point_done();
                    reporter.set(worker, "idle".into());
                }
            }));
        }
        for h in handles {
            if let Err(panic) = h.join() {
                finished.store(true, Ordering::Relaxed);
                std::panic::resume_unwind(panic);
            }
        }
        finished.store(true, Ordering::Relaxed);
    });
    reporter.finish();
    results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().map(|r| r.expect("every point ran")).collect()
}

/// Runs `f` on every point, on up to `threads` OS threads, showing progress on stderr. Returns
/// the results in point order. For points that load nothing shared (perftest).
pub fn run_points<P: Sync, R: Send>(points: &[P], threads: usize, label: &str, f: impl Fn(&P) -> R + Sync) -> Vec<R> {
    let keys = vec![None; points.len()];
    run_points_shared(points, &keys, threads, label, |_| String::new(), |p, _, _| f(p))
}

/// Worker threads to use: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

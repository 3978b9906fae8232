//! Running independent points of a sweep on every core, with a progress bar.
//!
//! Each point is its own deterministic simulation, so running them in parallel changes only
//! the wall-clock time, never a result; results come back in point order.

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Runs `f` on every point, on up to `threads` OS threads, showing progress on stderr when it
/// is a terminal. Returns the results in point order.
pub fn run_points<P: Sync, R: Send>(points: &[P], threads: usize, label: &str, f: impl Fn(&P) -> R + Sync) -> Vec<R> {
    let bar = ProgressBar::new(points.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} points, {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new(points.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, points.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = points.get(i) else { break };
                    let r = f(p);
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().map(|r| r.expect("every point ran")).collect()
}

/// Worker threads to use: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

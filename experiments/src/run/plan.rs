//! What a request needs before it runs: the key of the image it loads, and its host memory.

use super::request::{IndexVisitor, RunRequest, Work, dispatch};
use dmkit_indexes::IndexKind;

/// Host memory a request is estimated to need: its loaded image (with the simulation's own
/// state) and its compute nodes' caches, each full. From measured costs per item
/// ([`IndexKind::HOST_BYTES_PER_ITEM`], at 16-byte items; larger items add 1.5 bytes per byte)
/// and [`IndexKind::cache_host_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub image: u64,
    pub caches: u64,
}

/// A request's image key and memory estimate, without running it.
struct Plan;

impl IndexVisitor for Plan {
    type Out = (String, MemoryEstimate);
    fn visit<K: IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        _names: (&str, &str),
        work: Work,
    ) -> Result<(String, MemoryEstimate), String> {
        let items = req.items();
        let item_bytes = (work.spec.key_format.key_bytes() + work.spec.value_bytes) as u64;
        let per_item = K::HOST_BYTES_PER_ITEM + item_bytes.saturating_sub(16) * 3 / 2;
        let estimate = MemoryEstimate {
            image: items.saturating_mul(per_item) + (64 << 20),
            caches: K::cache_host_bytes(options, req.setup.compute_nodes, items),
        };
        Ok((crate::runner::image_key::<K>(&req.setup, options, &work.items), estimate))
    }
}

/// [`MemoryEstimate`] of one request (or the request's error).
pub fn memory_estimate(req: &RunRequest) -> Result<MemoryEstimate, String> {
    dispatch(req, Plan).map(|(_, e)| e)
}

static FORCE_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs requests [`check_memory`] would refuse (`--force`).
pub fn force_memory(yes: bool) {
    FORCE_MEMORY.store(yes, std::sync::atomic::Ordering::Relaxed);
}

/// This machine's memory (`MemTotal`), if it can be read.
pub fn machine_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// How many points of `requests` may run at once (at most `threads`) within 90% of `machine`
/// bytes, by their estimated host memory: `t` points at once hold at most the `t` largest
/// distinct images and `t` sets of the largest caches. Refuses (before anything runs) when one
/// point at a time does not fit. Hardware runs are not estimated.
pub fn check_memory_on(requests: &[RunRequest], threads: usize, machine: u64) -> Result<usize, String> {
    let mut images: Vec<(String, u64)> = Vec::new();
    let mut caches = 0u64;
    for r in requests.iter().filter(|r| r.setup.cluster.is_none()) {
        // A bad request is left to its run, which reports the error.
        let Ok((key, e)) = dispatch(r, Plan) else { continue };
        caches = caches.max(e.caches);
        if !images.iter().any(|(k, _)| *k == key) {
            images.push((key, e.image));
        }
    }
    images.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
    let need = |t: usize| images.iter().take(t).map(|(_, bytes)| bytes).sum::<u64>() + t as u64 * caches;
    let limit = machine / 10 * 9;
    let threads = threads.max(1);
    if let Some(t) = (1..=threads).rev().find(|&t| need(t) <= limit) {
        if t < threads && t < requests.len() {
            eprintln!(
                "dmkit: {t} point(s) at a time instead of {threads}: {threads} at once would need an estimated \
                 {:.1} GB of host memory, more than 90% of this machine's {:.1} GB",
                need(threads) as f64 / 1e9,
                machine as f64 / 1e9
            );
        }
        return Ok(t);
    }
    Err(format!(
        "this needs an estimated {:.1} GB of host memory ({:.1} GB loaded + {:.1} GB of caches), more than 90% \
         of this machine's {:.1} GB: refused before starting (fewer --keys or compute nodes, a smaller \
         cache, or --force to run it anyway)",
        need(1) as f64 / 1e9,
        images[0].1 as f64 / 1e9,
        caches as f64 / 1e9,
        machine as f64 / 1e9
    ))
}

/// [`check_memory_on`] this machine: the points to run at once (`threads` if
/// [`force_memory`] was set or the machine's memory is unknown).
pub fn check_memory(requests: &[RunRequest], threads: usize) -> Result<usize, String> {
    if FORCE_MEMORY.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(threads);
    }
    match machine_memory_bytes() {
        Some(machine) => check_memory_on(requests, threads, machine),
        None => Ok(threads),
    }
}

/// The key of the image a request loads: requests with equal keys load the same state and
/// may share it. `None` on hardware (each run loads its cluster) and for bad requests (their
/// run reports the error).
pub fn image_key(req: &RunRequest) -> Option<String> {
    if req.setup.cluster.is_some() {
        return None;
    }
    dispatch(req, Plan).ok().map(|(key, _)| key)
}

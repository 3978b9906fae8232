//! `dmkit bench-load`: how long loading takes, per index and key count.
//!
//! Each measurement runs in a child process of its own (the same binary), so that its peak
//! resident memory is its own and one load's heap does not slow the next. A load is the
//! runner's ([`crate::runner::load`]): create the index, bulk-load the items with the index's
//! own insert logic in the simulator's instant mode, image the result. It runs on one core.

use crate::run::{IndexVisitor, RunRequest, Work, dispatch};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One load measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LoadBench {
    pub index: String,
    pub config: String,
    pub keys: u64,
    /// Wall-clock seconds of the load (create, insert every key, image).
    pub load_s: f64,
    pub us_per_key: f64,
    /// Non-zero bytes of the loaded memory nodes, and the host bytes the image holds them in.
    pub nonzero_bytes: u64,
    pub image_host_bytes: u64,
    /// [`dmkit_sim::Image::memory_digest`] of the loaded memory nodes: a change that only makes
    /// loading faster must leave it as it was.
    #[serde(default)]
    pub memory_digest: u64,
    /// Peak resident memory of the process that loaded (VmHWM), if the system reports it.
    pub peak_rss_bytes: Option<u64>,
}

struct LoadOnly;

impl IndexVisitor for LoadOnly {
    type Out = LoadBench;
    fn visit<K: dmkit_indexes::IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        names: (&str, &str),
        work: Work,
    ) -> Result<LoadBench, String> {
        K::validate(options)?;
        let loaded = crate::runner::load::<K>(&req.setup, options, work.items, &crate::runner::Quiet)?;
        Ok(LoadBench {
            index: req.index.clone(),
            config: names.0.to_string(),
            keys: loaded.keys,
            load_s: loaded.load_wall_s,
            us_per_key: loaded.load_wall_s * 1e6 / loaded.keys.max(1) as f64,
            nonzero_bytes: loaded.image.nonzero_bytes(),
            image_host_bytes: loaded.image.host_bytes(),
            memory_digest: loaded.image.memory_digest(),
            peak_rss_bytes: peak_rss_bytes(),
        })
    }
}

/// This process's peak resident set (VmHWM in /proc/self/status), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Loads `req`'s index in this process and measures it.
pub fn measure(req: &RunRequest) -> Result<LoadBench, String> {
    dispatch(req, LoadOnly)
}

/// The table of measurements, with each index's cost per key at its largest count relative to
/// its smallest.
pub fn table(rows: &[LoadBench]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:<16} {:>10} {:>9} {:>8} {:>11} {:>11} {:>10} {:>16}",
        "index", "config", "keys", "load s", "us/key", "nonzero MB", "image MB", "peak MB", "memory digest"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<9} {:<16} {:>10} {:>9.2} {:>8.2} {:>11.1} {:>11.1} {:>10} {:016x}",
            r.index,
            r.config,
            r.keys,
            r.load_s,
            r.us_per_key,
            r.nonzero_bytes as f64 / 1e6,
            r.image_host_bytes as f64 / 1e6,
            r.peak_rss_bytes.map_or("-".into(), |b| format!("{:.0}", b as f64 / 1e6)),
            r.memory_digest
        );
    }
    let mut names: Vec<(&str, &str)> = rows.iter().map(|r| (r.index.as_str(), r.config.as_str())).collect();
    names.dedup();
    for (index, config) in names {
        let mine: Vec<&LoadBench> = rows.iter().filter(|r| r.index == index && r.config == config).collect();
        if let (Some(lo), Some(hi)) = (mine.iter().min_by_key(|r| r.keys), mine.iter().max_by_key(|r| r.keys)) {
            if hi.keys > lo.keys {
                let _ = writeln!(
                    out,
                    "{index} {config}: cost per key x{:.2} from {} to {} keys",
                    hi.us_per_key / lo.us_per_key,
                    lo.keys,
                    hi.keys
                );
            }
        }
    }
    out
}

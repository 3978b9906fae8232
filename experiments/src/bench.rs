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
    /// The simulator's steps (events) and the verbs and calls posted, per key loaded: the
    /// load's own work, which the host does not change ([`crate::runner::Loaded::load_steps`]).
    #[serde(default)]
    pub steps_per_key: f64,
    #[serde(default)]
    pub verbs_per_key: f64,
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
        let per_key = |x: f64| x / loaded.keys.max(1) as f64;
        Ok(LoadBench {
            index: req.index.clone(),
            config: names.0.to_string(),
            keys: loaded.keys,
            load_s: loaded.load_wall_s,
            us_per_key: per_key(loaded.load_wall_s * 1e6),
            steps_per_key: per_key(loaded.load_steps as f64),
            verbs_per_key: per_key(loaded.load_verbs as f64),
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
/// its smallest: its wall time, and the simulator's steps and verbs (what of the growth is
/// the load's own work; the rest is the host's).
pub fn table(rows: &[LoadBench]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:<16} {:>10} {:>9} {:>8} {:>10} {:>10} {:>11} {:>11} {:>10} {:>16}",
        "index",
        "config",
        "keys",
        "load s",
        "us/key",
        "steps/key",
        "verbs/key",
        "nonzero MB",
        "image MB",
        "peak MB",
        "memory digest"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<9} {:<16} {:>10} {:>9.2} {:>8.2} {:>10.2} {:>10.2} {:>11.1} {:>11.1} {:>10} {:016x}",
            r.index,
            r.config,
            r.keys,
            r.load_s,
            r.us_per_key,
            r.steps_per_key,
            r.verbs_per_key,
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
                    "{index} {config}: cost per key x{:.2} from {} to {} keys (simulator steps per key x{:.2}, verbs x{:.2})",
                    hi.us_per_key / lo.us_per_key,
                    lo.keys,
                    hi.keys,
                    hi.steps_per_key / lo.steps_per_key,
                    hi.verbs_per_key / lo.verbs_per_key
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(keys: u64, us_per_key: f64, steps_per_key: f64, verbs_per_key: f64) -> LoadBench {
        LoadBench {
            index: "example".into(),
            config: "example".into(),
            keys,
            load_s: us_per_key * keys as f64 / 1e6,
            us_per_key,
            steps_per_key,
            verbs_per_key,
            nonzero_bytes: 0,
            image_host_bytes: 0,
            memory_digest: 0,
            peak_rss_bytes: None,
        }
    }

    #[test]
    fn the_table_tells_the_loads_own_growth_from_the_hosts() {
        let t = table(&[row(100_000, 2.0, 4.0, 3.0), row(10_000_000, 3.0, 4.4, 3.3)]);
        assert!(
            t.contains("example example: cost per key x1.50 from 100000 to 10000000 keys (simulator steps per key x1.10, verbs x1.10)"),
            "{t}"
        );
        assert!(t.lines().next().unwrap().contains("steps/key"), "{t}");
    }

    #[test]
    fn a_load_counts_its_steps_and_verbs() {
        let req = crate::run::RunFile::parse("index = \"example\"\nkeys = 2000\nworkload = \"c\"\n")
            .unwrap()
            .requests()
            .unwrap()
            .remove(0);
        let r = measure(&req).unwrap();
        assert_eq!(r.keys, 2000);
        // Every insert posts at least one verb, and every verb is at least one step.
        assert!(r.verbs_per_key >= 1.0 && r.steps_per_key >= 1.0, "{r:?}");
    }
}

//! `dmkit bench-load`: how long loading takes, per index and key count.
//!
//! Each measurement runs in a child process of its own (the same binary), so that its peak
//! resident memory is its own and one load's heap does not slow the next. A load is the
//! runner's ([`crate::runner::load`]): create the index, bulk-load the items with the index's
//! own insert logic in the simulator's instant mode, image the result. It runs on one core.
//!
//! A load's wall time on a shared or virtual machine varies by tens of percent from one run to
//! the next, most for the short ones (a 100 k-key load took 0.15 s in one run and 0.19 s in the
//! next), and the growth of the cost per key is a ratio of two such times. `--repeat R` loads
//! each point R times, each in a fresh process, and reports the median with the fastest and
//! slowest ([`combine`]); the growth line then gives its range as well. Repeated loads must
//! leave the same memory (same digest): a load is deterministic, and a difference is an error.

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
    /// With repeated loads ([`combine`]): how many, and the fastest and slowest wall time
    /// (`load_s` is then their median). Zero for a single load.
    #[serde(default)]
    pub loads: u32,
    #[serde(default)]
    pub load_s_min: f64,
    #[serde(default)]
    pub load_s_max: f64,
}

impl LoadBench {
    /// The fastest and slowest load time: the spread of repeated loads, or the one load's.
    fn range_s(&self) -> (f64, f64) {
        if self.loads > 1 { (self.load_s_min, self.load_s_max) } else { (self.load_s, self.load_s) }
    }
}

/// Repeated loads of one point as one row: the median wall time (and cost per key), the
/// fastest and slowest, the largest peak RSS. An error if the loads left different memory
/// (a load is deterministic) or measured different points.
pub fn combine(mut runs: Vec<LoadBench>) -> Result<LoadBench, String> {
    let first = runs.first().ok_or("no load to combine")?.clone();
    for r in &runs {
        if (&r.index, &r.config, r.keys) != (&first.index, &first.config, first.keys) {
            return Err(format!(
                "cannot combine loads of {}:{} with {} keys and {}:{} with {}",
                first.index, first.config, first.keys, r.index, r.config, r.keys
            ));
        }
        if r.memory_digest != first.memory_digest {
            return Err(format!(
                "{} with {} keys loaded different memory in two runs (digests {:016x} and {:016x}): \
                 the load is not deterministic",
                first.index, first.keys, first.memory_digest, r.memory_digest
            ));
        }
    }
    if runs.len() == 1 {
        return Ok(first);
    }
    runs.sort_by(|a, b| a.load_s.total_cmp(&b.load_s));
    let n = runs.len();
    let median = if n % 2 == 1 { runs[n / 2].load_s } else { (runs[n / 2 - 1].load_s + runs[n / 2].load_s) / 2.0 };
    Ok(LoadBench {
        load_s: median,
        us_per_key: median * 1e6 / first.keys.max(1) as f64,
        peak_rss_bytes: runs.iter().filter_map(|r| r.peak_rss_bytes).max(),
        loads: n as u32,
        load_s_min: runs[0].load_s,
        load_s_max: runs[n - 1].load_s,
        ..first
    })
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
            loads: 0,
            load_s_min: 0.0,
            load_s_max: 0.0,
        })
    }
}

/// Reference loads: the same items, in the same order, into the host's own maps, with no
/// simulator around them. Their cost per key grows with the key count as the host's caches
/// and TLB stop holding the structure, which no simulator doing the same random accesses can
/// undercut: the yardstick for how much of an index's growth is the host's (README,
/// Benchmarks). `host-btree` is `std::collections::BTreeMap` (an ordered map, as the trees'
/// images are), `host-hashmap` `std::collections::HashMap` with a fixed SipHash key.
pub const HOST_REFERENCES: [&str; 2] = ["host-btree", "host-hashmap"];

/// The index whose request generates a host reference's items (any index's would do: the
/// items depend on the workload, its sizes and the seed, not on the index).
pub const HOST_REFERENCE_ITEMS_FROM: &str = "example";

struct HostLoad<'a>(&'a str);

impl IndexVisitor for HostLoad<'_> {
    type Out = LoadBench;
    fn visit<K: dmkit_indexes::IndexKind>(
        self,
        _req: &RunRequest,
        _options: &K::Options,
        _names: (&str, &str),
        work: Work,
    ) -> Result<LoadBench, String> {
        use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
        // A digest of what the map holds, in key order, so that repeated loads are checked to
        // hold the same items as index loads are.
        fn digest<'a>(items: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> u64 {
            let mut h = DefaultHasher::new();
            items.for_each(|kv| kv.hash(&mut h));
            h.finish()
        }
        let start = std::time::Instant::now();
        let (keys, memory_digest, load_s) = match self.0 {
            "host-btree" => {
                let mut map = std::collections::BTreeMap::new();
                for (k, v) in work.items {
                    map.insert(k, v);
                }
                let load_s = start.elapsed().as_secs_f64();
                (map.len() as u64, digest(map.iter()), load_s)
            }
            "host-hashmap" => {
                let mut map: std::collections::HashMap<Vec<u8>, Vec<u8>, BuildHasherDefault<DefaultHasher>> =
                    Default::default();
                for (k, v) in work.items {
                    map.insert(k, v);
                }
                let load_s = start.elapsed().as_secs_f64();
                let mut sorted: Vec<_> = map.iter().collect();
                sorted.sort();
                (map.len() as u64, digest(sorted.into_iter()), load_s)
            }
            other => return Err(format!("no host reference named {other}: {}", HOST_REFERENCES.join(", "))),
        };
        Ok(LoadBench {
            index: self.0.to_string(),
            config: "-".into(),
            keys,
            load_s,
            us_per_key: load_s * 1e6 / keys.max(1) as f64,
            steps_per_key: 0.0,
            verbs_per_key: 0.0,
            nonzero_bytes: 0,
            image_host_bytes: 0,
            memory_digest,
            peak_rss_bytes: peak_rss_bytes(),
            loads: 0,
            load_s_min: 0.0,
            load_s_max: 0.0,
        })
    }
}

/// Loads `req`'s items into host reference `name` (one of [`HOST_REFERENCES`]) in this
/// process and measures it. `req` names the index whose items are loaded.
pub fn measure_host(name: &str, req: &RunRequest) -> Result<LoadBench, String> {
    dispatch(req, HostLoad(name))
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
        "{:<9} {:<16} {:>10} {:>9} {:>18} {:>8} {:>10} {:>10} {:>11} {:>11} {:>10} {:>16}",
        "index",
        "config",
        "keys",
        "load s",
        "fastest-slowest",
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
            "{:<9} {:<16} {:>10} {:>9.2} {:>18} {:>8.2} {:>10.2} {:>10.2} {:>11.1} {:>11.1} {:>10} {:016x}",
            r.index,
            r.config,
            r.keys,
            r.load_s,
            if r.loads > 1 { format!("{:.2}-{:.2} ({})", r.load_s_min, r.load_s_max, r.loads) } else { "-".into() },
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
                // With repeated loads, the growth any pair of them gives: slowest small against
                // fastest large, and the other way round.
                let per_key = |s: f64, r: &LoadBench| s / r.keys as f64;
                let ((lo_min, lo_max), (hi_min, hi_max)) = (lo.range_s(), hi.range_s());
                let range = if lo.loads > 1 || hi.loads > 1 {
                    format!(
                        " [x{:.2}-x{:.2}]",
                        per_key(hi_min, hi) / per_key(lo_max, lo),
                        per_key(hi_max, hi) / per_key(lo_min, lo)
                    )
                } else {
                    String::new()
                };
                // The simulator's own work per key, where there is a simulator (not in the host
                // references).
                let work = if lo.steps_per_key > 0.0 {
                    format!(
                        "; simulator steps per key x{:.2}, verbs x{:.2}",
                        hi.steps_per_key / lo.steps_per_key,
                        hi.verbs_per_key / lo.verbs_per_key
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "{index} {config}: cost per key x{:.2}{range} from {} to {} keys ({:+.2} us per key{work})",
                    hi.us_per_key / lo.us_per_key,
                    lo.keys,
                    hi.keys,
                    hi.us_per_key - lo.us_per_key,
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
            loads: 0,
            load_s_min: 0.0,
            load_s_max: 0.0,
        }
    }

    #[test]
    fn repeated_loads_give_their_median_and_range() {
        let at =
            |load_s: f64, digest: u64| LoadBench { memory_digest: digest, ..row(100_000, load_s * 10.0, 4.0, 3.0) };
        let one = combine(vec![at(0.2, 7)]).unwrap();
        assert_eq!((one.loads, one.load_s), (0, 0.2), "one load is itself");
        let c = combine(vec![at(0.3, 7), at(0.1, 7), at(0.2, 7)]).unwrap();
        assert_eq!((c.loads, c.load_s, c.load_s_min, c.load_s_max), (3, 0.2, 0.1, 0.3));
        assert!((c.us_per_key - 2.0).abs() < 1e-9, "{c:?}");
        let even = combine(vec![at(0.1, 7), at(0.4, 7)]).unwrap();
        assert!((even.load_s - 0.25).abs() < 1e-12, "{even:?}");
        let e = combine(vec![at(0.1, 7), at(0.1, 8)]).unwrap_err();
        assert!(e.contains("not deterministic"), "{e}");
        // 3 us a key (20 to 40 s) against 2 (1 to 3 us): x1.5, between 2/3 and 4.
        let big = LoadBench { loads: 3, load_s_min: 20.0, load_s_max: 40.0, ..row(10_000_000, 3.0, 4.0, 3.0) };
        let t = table(&[c, big]);
        assert!(t.contains("cost per key x1.50 [x0.67-x4.00] from 100000 to 10000000"), "{t}");
        assert!(t.contains("0.10-0.30 (3)"), "{t}");
    }

    #[test]
    fn the_table_tells_the_loads_own_growth_from_the_hosts() {
        let t = table(&[row(100_000, 2.0, 4.0, 3.0), row(10_000_000, 3.0, 4.4, 3.3)]);
        assert!(
            t.contains(
                "example example: cost per key x1.50 from 100000 to 10000000 keys (+1.00 us per key; simulator steps per key x1.10, verbs x1.10)"
            ),
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

    #[test]
    fn a_host_reference_loads_the_same_items_into_the_hosts_map() {
        let req = crate::run::RunFile::parse("index = \"example\"\nkeys = 2000\nworkload = \"c\"\n")
            .unwrap()
            .requests()
            .unwrap()
            .remove(0);
        let tree = measure_host("host-btree", &req).unwrap();
        let hash = measure_host("host-hashmap", &req).unwrap();
        assert_eq!((tree.keys, hash.keys), (2000, 2000));
        // Both hold the same items, digested in key order.
        assert_eq!(tree.memory_digest, hash.memory_digest);
        assert_eq!(tree.steps_per_key, 0.0, "no simulator");
        let t = table(&[tree.clone(), LoadBench { keys: 4000, us_per_key: tree.us_per_key * 2.0, ..tree }]);
        assert!(t.contains("host-btree -: cost per key x2.00 from 2000 to 4000 keys (+"), "{t}");
        assert!(!t.contains("simulator steps"), "{t}");
        assert!(measure_host("host-skiplist", &req).unwrap_err().contains("no host reference"));
    }
}

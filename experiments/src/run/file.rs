//! Run files: the TOML form of `dmkit run`'s flags with a `[sweep]`, shards, and merging the
//! results of one sweep.

use super::request::RunRequest;
use super::schema::{LoadMethod, RunResult, RunSetup, ServerCrash, Warm};
use dmkit_sim::Profile;

/// A run file: the TOML form of `dmkit run`'s flags, plus an optional `[sweep]` whose lists
/// expand into one run per combination (in file order, the last list varying fastest).
///
/// ```toml
/// index = "example"
/// workload = "c"
/// keys = 100000
/// compute_nodes = 8
/// threads_per_cn = 8
///
/// [sweep]
/// threads_per_cn = [1, 2, 4, 8]
/// workload = ["a", "c"]
/// ```
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    pub index: String,
    #[serde(default = "default_config")]
    pub config: String,
    #[serde(default = "default_workload")]
    pub workload: String,
    #[serde(default = "default_keys")]
    pub keys: u64,
    pub value_bytes: Option<usize>,
    pub key_bytes: Option<usize>,
    #[serde(default)]
    pub email_keys: bool,
    pub theta: Option<f64>,
    /// A dense- or mica- workload's Zipfian drawn over this many keys, a paper's key count
    /// ([`crate::workload::WorkloadSpec::zipfian_items`]).
    pub zipf_items: Option<u64>,
    /// Load the keys in a fixed pseudo-random order instead of key-number order
    /// ([`crate::workload::WorkloadSpec::shuffled_load`]).
    #[serde(default)]
    pub shuffle_load: bool,
    pub ops_per_client: Option<u64>,
    /// LOAD: the fresh keys inserted in all, then the run stops (a fixed window, as the papers'
    /// insert phases: RACE's 10 M into a table of 100 M); every workload's hash tables are
    /// sized for `keys + inserts`.
    pub inserts: Option<u64>,
    pub cache_bytes: Option<u64>,
    #[serde(default = "default_profile")]
    pub profile: String,
    #[serde(default = "default_compute_nodes")]
    pub compute_nodes: u16,
    #[serde(default = "one_u16")]
    pub memory_nodes: u16,
    #[serde(default = "default_threads")]
    pub threads_per_cn: u32,
    #[serde(default = "one_u32")]
    pub coroutines: u32,
    #[serde(default = "default_load")]
    pub load: String,
    /// With `duration_us`: the fixed warm-up (default 100). Without: the least warm-up of a
    /// steady-state run (default 0; MSER-5 finds the rest).
    #[serde(default)]
    pub warmup_us: Option<u64>,
    /// A fixed measured window instead of running to steady state.
    #[serde(default)]
    pub duration_us: Option<u64>,
    /// Steady state: the 95% interval's half-width relative to the mean (default 0.02).
    #[serde(default)]
    pub precision: Option<f64>,
    /// Steady state: the cap on simulated time, warm-up included (default 400,000).
    #[serde(default)]
    pub max_duration_us: Option<u64>,
    /// Tick of the throughput series the window is judged on (default 10).
    #[serde(default)]
    pub tick_us: Option<u64>,
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// Throughput time series interval (0: off).
    #[serde(default)]
    pub timeseries_us: u64,
    /// Crash this server node of the index (0-based among its server nodes) `crash_at_us`
    /// after the warm-up starts; it comes back `restart_after_us` later if that is set.
    #[serde(default)]
    pub crash_server: Option<u16>,
    #[serde(default)]
    pub crash_at_us: u64,
    #[serde(default)]
    pub restart_after_us: Option<u64>,
    /// What the compute nodes' caches are warmed with: `whole` (default), `load-share` or
    /// `load-replay` ([`crate::run::Warm`]).
    #[serde(default = "default_warm")]
    pub warm: String,
    #[serde(default)]
    pub sweep: Sweep,
}

/// Lists to sweep; each present list multiplies the number of runs.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Indexes, each `NAME` or `NAME:CONFIG` (say `sherman:sherman-smart`), so that one file
    /// compares indexes in their own configurations.
    pub index: Option<Vec<String>>,
    /// The index's named configurations (Sherman: sherman-artifact, sherman-smart, ...).
    pub config: Option<Vec<String>>,
    pub workload: Option<Vec<String>>,
    pub keys: Option<Vec<u64>>,
    pub key_bytes: Option<Vec<usize>>,
    pub shuffle_load: Option<Vec<bool>>,
    pub theta: Option<Vec<f64>>,
    pub value_bytes: Option<Vec<usize>>,
    pub compute_nodes: Option<Vec<u16>>,
    pub memory_nodes: Option<Vec<u16>>,
    pub threads_per_cn: Option<Vec<u32>>,
    pub coroutines: Option<Vec<u32>>,
    pub seed: Option<Vec<u64>>,
    pub cache_bytes: Option<Vec<u64>>,
    pub crash_server: Option<Vec<u16>>,
    /// Any of `whole`, `load-share`, `load-replay` ([`crate::run::Warm`]): points differing
    /// only in this share their load.
    pub warm: Option<Vec<String>>,
}

fn default_config() -> String {
    "default".into()
}
fn default_workload() -> String {
    "c".into()
}
fn default_keys() -> u64 {
    100_000
}
fn default_profile() -> String {
    "cx6-100g".into()
}
fn default_compute_nodes() -> u16 {
    8
}
fn one_u16() -> u16 {
    1
}
fn default_threads() -> u32 {
    8
}
fn one_u32() -> u32 {
    1
}
fn default_warm() -> String {
    "whole".into()
}

fn default_load() -> String {
    "bulk".into()
}
fn one_u64() -> u64 {
    1
}

/// `K/N` of `--shard`: shard K (1-based) of N.
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard '{text}': expected K/N with 1 <= K <= N, e.g. 2/8");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// Joins the results of a sweep's shards in point order: every result must come from the same
/// run file (its digest), no point twice, and none missing. Errors are one line.
pub fn merge(results: Vec<(std::path::PathBuf, RunResult)>) -> Result<Vec<RunResult>, String> {
    let Some((first_path, first)) = results.first() else { return Err("no results to merge".into()) };
    let (Some(sweep), Some(total)) = (first.sweep.clone(), first.points) else {
        return Err(format!("{}: results without a sweep digest (from dmkit run FILE)", first_path.display()));
    };
    let mut by_point: Vec<Option<RunResult>> = vec![None; total];
    for (path, r) in results {
        if r.sweep.as_deref() != Some(sweep.as_str()) || r.points != Some(total) {
            return Err(format!(
                "{} holds results of another sweep ({} rather than {sweep}): merge the shards of one run file",
                path.display(),
                r.sweep.as_deref().unwrap_or("none")
            ));
        }
        let p =
            r.point.filter(|&p| p < total).ok_or_else(|| format!("{}: a result without its point", path.display()))?;
        if by_point[p].is_some() {
            return Err(format!("point {} appears twice ({} among them)", p + 1, path.display()));
        }
        by_point[p] = Some(r);
    }
    let missing: Vec<String> =
        by_point.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| (i + 1).to_string()).collect();
    if !missing.is_empty() {
        return Err(format!("points {} of {total} are missing: merge every shard", missing.join(", ")));
    }
    Ok(by_point.into_iter().map(|r| r.expect("checked")).collect())
}

impl RunFile {
    /// A digest of every setting of the file (sweep included): shards of one file share it.
    pub fn digest(&self) -> String {
        let text = format!("{self:?}");
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in text.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// The measured window this file asks for: a fixed one with `duration_us` (or an operation
    /// count per client), else steady state. Errors are one line, in the flags' words.
    pub fn window(&self) -> Result<crate::measure::Window, String> {
        use crate::measure::{MAX_DURATION_NS, PRECISION, Window};
        let fixed = self.duration_us.is_some() || self.ops_per_client.is_some();
        if fixed && (self.precision.is_some() || self.max_duration_us.is_some()) {
            return Err("--precision and --max-duration-us are for steady-state runs; \
                        --duration-us (or --ops-per-client) fixes the window"
                .into());
        }
        let window = if fixed {
            Window::Fixed {
                warmup_ns: self.warmup_us.unwrap_or(100) * 1000,
                duration_ns: match self.ops_per_client {
                    Some(_) => None,
                    None => self.duration_us.map(|d| d * 1000),
                },
            }
        } else {
            Window::Steady {
                precision: self.precision.unwrap_or(PRECISION),
                max_duration_ns: self.max_duration_us.map_or(MAX_DURATION_NS, |d| d.saturating_mul(1000)),
                min_warmup_ns: self.warmup_us.unwrap_or(0) * 1000,
            }
        };
        window.validate()?;
        Ok(window)
    }

    /// `inserts` on a LOAD point: the operations per client that insert them all (the budget
    /// spread evenly, rounded up). `None` for other workloads, where `inserts` sizes tables only.
    fn load_quota(&self) -> Result<Option<u64>, String> {
        let Some(n) = self.inserts else { return Ok(None) };
        if n == 0 {
            return Err("--inserts must be positive".into());
        }
        if self.duration_us.is_some() || self.ops_per_client.is_some() {
            return Err("--inserts fixes a LOAD's window: not with --duration-us or --ops-per-client".into());
        }
        let spec = crate::workload::WorkloadSpec::from_name(&self.workload, self.keys).map_err(|e| e.to_string())?;
        if !spec.mix.is_insert_only() {
            return Ok(None);
        }
        let clients = self.compute_nodes as u64 * self.threads_per_cn as u64 * self.coroutines as u64;
        Ok(Some(n.div_ceil(clients)))
    }

    /// Parses a run file; errors are one line.
    pub fn parse(text: &str) -> Result<RunFile, String> {
        toml::from_str(text).map_err(|e| format!("bad run file: {}", e.message().replace('\n', " ")))
    }

    /// Every run the file describes, as requests.
    pub fn requests(&self) -> Result<Vec<RunRequest>, String> {
        let profile = Profile::load(&self.profile).map_err(|e| e.to_string())?;
        let load = match self.load.as_str() {
            "bulk" => LoadMethod::Bulk,
            "insert" => LoadMethod::Insert,
            other => return Err(format!("load must be bulk or insert, got '{other}'")),
        };
        let mut points = vec![self.clone()];
        let s = &self.sweep;
        macro_rules! expand {
            ($field:ident, $wrap:expr) => {
                if let Some(values) = &s.$field {
                    if values.is_empty() {
                        return Err(format!("sweep.{} is an empty list", stringify!($field)));
                    }
                    points = points
                        .into_iter()
                        .flat_map(|p| {
                            values.iter().map(move |v| {
                                let mut q = p.clone();
                                q.$field = $wrap(v.clone());
                                q
                            })
                        })
                        .collect();
                }
            };
        }
        if let Some(values) = &s.index {
            if values.is_empty() {
                return Err("sweep.index is an empty list".into());
            }
            points = points
                .into_iter()
                .flat_map(|p| {
                    values.iter().map(move |v| {
                        let mut q = p.clone();
                        match v.split_once(':') {
                            Some((index, config)) => (q.index, q.config) = (index.into(), config.into()),
                            None => (q.index, q.config) = (v.clone(), "default".into()),
                        }
                        q
                    })
                })
                .collect();
        }
        expand!(config, |v| v);
        expand!(workload, |v| v);
        expand!(keys, |v| v);
        expand!(key_bytes, Some);
        expand!(theta, Some);
        expand!(shuffle_load, |v| v);
        expand!(value_bytes, Some);
        expand!(compute_nodes, |v| v);
        expand!(memory_nodes, |v| v);
        expand!(threads_per_cn, |v| v);
        expand!(coroutines, |v| v);
        expand!(seed, |v| v);
        expand!(cache_bytes, Some);
        expand!(crash_server, Some);
        expand!(warm, |v| v);
        points
            .into_iter()
            .map(|mut p| {
                if p.compute_nodes == 0 || p.memory_nodes == 0 || p.threads_per_cn == 0 || p.coroutines == 0 {
                    return Err("compute_nodes, memory_nodes, threads_per_cn and coroutines must be positive".into());
                }
                p.ops_per_client = p.load_quota()?.or(p.ops_per_client);
                let window = p.window()?;
                let warm = Warm::parse(&p.warm)?;
                let tick_ns = p.tick_us.unwrap_or(crate::measure::TICK_NS / 1000) * 1000;
                if tick_ns == 0 {
                    return Err("--tick-us must be positive".into());
                }
                Ok(RunRequest {
                    index: p.index,
                    config: p.config,
                    workload: p.workload,
                    keys: p.keys,
                    value_bytes: p.value_bytes,
                    key_bytes: p.key_bytes,
                    email_keys: p.email_keys,
                    theta: p.theta,
                    zipf_items: p.zipf_items,
                    shuffle_load: p.shuffle_load,
                    ops_per_client: p.ops_per_client,
                    inserts: p.inserts,
                    cache_bytes: p.cache_bytes,
                    setup: RunSetup {
                        profile: profile.clone(),
                        compute_nodes: p.compute_nodes,
                        memory_nodes: p.memory_nodes,
                        threads_per_cn: p.threads_per_cn,
                        coroutines: p.coroutines,
                        load,
                        window,
                        tick_ns,
                        seed: p.seed,
                        timeseries_ns: p.timeseries_us * 1000,
                        record_history: false,
                        cluster: None,
                        server_crashes: p
                            .crash_server
                            .map(|server| ServerCrash {
                                server,
                                at_ns: p.crash_at_us * 1000,
                                restart_at_ns: p.restart_after_us.map(|r| (p.crash_at_us + r) * 1000),
                            })
                            .into_iter()
                            .collect(),
                        warm,
                    },
                })
            })
            .collect()
    }
}

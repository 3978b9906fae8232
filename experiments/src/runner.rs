//! The simulator runner: load an index once into an image, then run points from it.
//!
//! A run has two halves. **Loading** ([`load`]) builds a simulation of the memory and server
//! nodes, creates the index and bulk-loads the items with one client (the index's own insert
//! logic, no simulated time), and keeps the result as a [`dmkit_sim::Image`]: every node's
//! memory and every service's state. **A point** ([`run_loaded`]) starts a fresh simulation with
//! the point's compute nodes from a copy of the image, opens the index on every compute node
//! with fresh state (caches, local lock tables, chunk caches), warms the caches outside time,
//! and measures its clients by the steady-state method of [`crate::measure`].
//!
//! Every run goes through an image, whether or not its sweep shares one, so a point forked from
//! a shared image is the same run as one loaded for it alone (`a_forked_point_is_the_freshly_loaded_point`).
//! What is shared between points: the memory and server nodes' state after loading. What is
//! fresh per point: the simulator (time, NIC queues, random streams from the point's seed), the
//! compute nodes and their index state, the clients. Client 0 stays reserved for the loader, as
//! the image's services may know it (HStore's servers keep each client's last write): the
//! measured clients are numbered from 1, as they were when one simulation loaded and ran.

use crate::measure::{Decision, Estimate, Monitor, Window};
use crate::run::client::{Meter, Phase, Series, Sink};
use crate::run::schema::{OpSource, RunResult, RunSetup, Warm, round3};
use crate::run::tally::walk_after_run;
use crate::workload::LoadItems;
use dmkit_indexes::common::rdwc::{
    RDWC_READS_BYPASSED, RDWC_READS_DELEGATED, RDWC_READS_LED, RDWC_WRITES_BYPASSED, RDWC_WRITES_COMBINED,
    RDWC_WRITES_LED,
};
use dmkit_indexes::{Counters, IndexKind};
use dmkit_sim::{ClientStats, Image, Sim, SimClient, SimConfig, Stats, VerbKind};
use dmkit_verify::deploy;
use dmkit_verify::history::History;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

/// Items loaded per simulator call, so that a long load reports progress.
const LOAD_CHUNK: usize = 20_000;

/// Progress of a run, for a bar or a log line.
pub trait Progress: Sync {
    /// `done` of `total` keys loaded.
    fn loading(&self, done: u64, total: u64);
    /// The measured phase has reached `sim_ns` of simulated time; `status` says how far it is
    /// from converging.
    fn measuring(&self, sim_ns: u64, status: &str);
}

/// Progress nobody watches.
#[derive(Debug)]
pub struct Quiet;

impl Progress for Quiet {
    fn loading(&self, _: u64, _: u64) {}
    fn measuring(&self, _: u64, _: &str) {}
}

/// An index loaded into a simulator image.
pub struct Loaded {
    /// Everything that determined the loaded state (index, options, items, topology, seed):
    /// a point runs from this image only if its own key is the same.
    pub key: String,
    pub image: Image,
    /// The loader's allocator, in a compute-node state of its own (an `Arc<K::NodeState>`):
    /// compute node 0 of each run inherits it ([`IndexKind::inherit`]).
    pub loader: Arc<dyn std::any::Any + Send + Sync>,
    pub keys: u64,
    /// Mean bytes of a loaded key plus its value.
    pub item_bytes: f64,
    /// Wall-clock seconds the load took.
    pub load_wall_s: f64,
    /// The simulator's work for the load: steps (events) executed, and verbs and calls posted.
    /// Unlike the wall time, these do not depend on the host, so they tell the load's own
    /// growth with the key count from the host's (`dmkit bench-load`).
    pub load_steps: u64,
    pub load_verbs: u64,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Loaded({} keys, {:?})", self.keys, self.image)
    }
}

/// A slot for a shared image: the first point that needs it loads it, later ones wait.
pub type ImageSlot = Arc<OnceLock<Result<Arc<Loaded>, String>>>;

/// The simulation a run needs for `options` with `compute_nodes` compute nodes.
fn sim_config<K: IndexKind>(setup: &RunSetup, options: &K::Options, compute_nodes: u16) -> SimConfig {
    SimConfig {
        profile: setup.profile.clone(),
        topology: deploy::topology::<K>(options, setup.memory_nodes, compute_nodes),
        seed: setup.seed,
        ..SimConfig::default()
    }
}

/// The key of the image `load` would build: every input of the loaded state (the items are a
/// pure function of their generator's state, which their `Debug` shows).
pub fn image_key<K: IndexKind>(setup: &RunSetup, options: &K::Options, items: &LoadItems) -> String {
    format!(
        "v1|{}|{options:?}|mn={}|load={:?}|seed={}|profile={:?}|items={items:?}",
        K::NAME,
        setup.memory_nodes,
        setup.load,
        setup.seed,
        setup.profile
    )
}

/// Creates index `K` and loads `items` with one client on one compute node; returns the image.
pub fn load<K: IndexKind>(
    setup: &RunSetup,
    options: &K::Options,
    items: LoadItems,
    progress: &dyn Progress,
) -> Result<Loaded, String> {
    let started = std::time::Instant::now();
    let keys = items.len() as u64;
    let key = image_key::<K>(setup, options, &items);
    let mut item_bytes_total = 0u64;
    let mut sim = Sim::new(sim_config::<K>(setup, options, 1)).map_err(|e| e.to_string())?;
    let deployed = deploy::deploy::<K>(&mut sim, options, 1)?;
    // What runs inherit from the loader: a fresh compute node given the loader's allocator
    // (`inherit` copies it) once the load is done, not the loader's node, whose caches would
    // stay with the image for nothing (SMART's at 60 M keys: its 600 MB budget, full).
    let kept = K::node_state(options, sim.caps());
    sim.set_instant(setup.load == crate::run::schema::LoadMethod::Bulk);
    // The creator creates the index and hands its handle back; the items follow in chunks.
    let created = deployed.create_then(&mut sim, options, |handle| async move { handle });
    sim.run().map_err(|e| e.to_string())?;
    let mut handle = Some(
        created
            .try_take()
            .ok_or("creating the index: its client is blocked")?
            .map_err(|e| format!("creating the index: {e}"))?,
    );
    let loader = deployed.creator.clone();
    let mut items = items.into_iter();
    let mut done = 0u64;
    progress.loading(0, keys);
    loop {
        let chunk: Vec<(Vec<u8>, Vec<u8>)> = items.by_ref().take(LOAD_CHUNK).collect();
        if chunk.is_empty() {
            break;
        }
        item_bytes_total += chunk.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        let n = chunk.len() as u64;
        let mut h = handle.take().expect("the loader's handle is back after every chunk");
        let out = sim.spawn_output(&loader, async move {
            let r = dmkit_indexes::bulk::load(&mut h, chunk).await;
            (h, r)
        });
        sim.run().map_err(|e| e.to_string())?;
        let (h, r) = out.take();
        r.map_err(|e| format!("loading: {e}"))?;
        handle = Some(h);
        done += n;
        progress.loading(done, keys);
    }
    drop(handle);
    K::inherit(&kept, &deployed.nodes[0]);
    drop(deployed);
    let loader_state: Arc<dyn std::any::Any + Send + Sync> = Arc::new(kept);
    let stats = sim.stats();
    stray_verbs(&stats, "loading")?;
    let image = sim.into_image().map_err(|e| format!("imaging the loaded index: {e}"))?;
    let item_bytes = item_bytes_total as f64 / keys.max(1) as f64;
    Ok(Loaded {
        key,
        image,
        loader: loader_state,
        keys,
        item_bytes,
        load_wall_s: started.elapsed().as_secs_f64(),
        load_steps: stats.steps,
        load_verbs: stats.verbs_posted + stats.calls_posted,
    })
}

/// A simulated client's [`Meter`]: simulated time from `start`, the simulator's verb counts,
/// its history stamps, and nothing between operations (the schedule stays the one a run has
/// always had).
struct SimMeter {
    client: SimClient,
    start: u64,
}

impl Meter for SimMeter {
    const PER_TICK_COSTS: bool = true;

    fn now_ns(&self) -> u64 {
        self.client.now_ns() - self.start
    }

    fn stats(&self) -> ClientStats {
        self.client.stats()
    }

    async fn stamp(&self) -> Result<u64, String> {
        Ok(self.client.history_stamp())
    }

    async fn between(&self) {}
}

/// Compute-node counters ([`IndexKind::node_counters`]) summed over nodes.
fn node_counters<K: IndexKind>(nodes: &[Arc<K::NodeState>]) -> BTreeMap<&'static str, u64> {
    let mut sum = BTreeMap::new();
    for n in nodes {
        for (k, v) in K::node_counters(n) {
            *sum.entry(k).or_default() += v;
        }
    }
    sum
}

/// The RDWC counters of a window and the delegation and combining ratios (of all searches and
/// all writes), if the index has RDWC counters.
fn rdwc_ratios(
    end: &BTreeMap<&'static str, u64>,
    start: &BTreeMap<&'static str, u64>,
) -> Option<BTreeMap<String, f64>> {
    let get = |k: &str| end.get(k).copied().unwrap_or(0) - start.get(k).copied().unwrap_or(0);
    if !end.keys().any(|k| k.starts_with("rdwc_")) {
        return None;
    }
    let mut out: BTreeMap<String, f64> =
        end.keys().filter(|k| k.starts_with("rdwc_")).map(|k| (k.to_string(), get(k) as f64)).collect();
    let reads = get(RDWC_READS_LED) + get(RDWC_READS_DELEGATED) + get(RDWC_READS_BYPASSED);
    let writes = get(RDWC_WRITES_LED) + get(RDWC_WRITES_COMBINED) + get(RDWC_WRITES_BYPASSED);
    // Shares of a few percent or less (the linearizable window delegates about 0.1%): five
    // decimals, so a fit over the item count (SMART's Fig. 22(g)) sees more than three steps.
    let share = |part: u64, whole: u64| (part as f64 / whole.max(1) as f64 * 1e5).round() / 1e5;
    out.insert("read_delegation_ratio".into(), share(get(RDWC_READS_DELEGATED), reads));
    out.insert("write_combining_ratio".into(), share(get(RDWC_WRITES_COMBINED), writes));
    Some(out)
}

/// An error if a verb of `phase` addressed memory no allocator handed out: an index's address
/// arithmetic went astray, and its numbers are not to be trusted (see `dmkit_sim::UnallocatedVerbs`).
pub(crate) fn stray_verbs(stats: &Stats, phase: &str) -> Result<(), String> {
    stats.unallocated.verdict().map_err(|e| format!("{phase}: {e}"))
}

/// NIC busy time summed over memory nodes, and the compute nodes' RDWC and cache counters, at a
/// tick boundary.
struct Snapshot {
    nic_busy_ns: u64,
    link_out_busy_ns: u64,
    /// Misses of every NIC's context and translation caches (README, "The NIC's caches").
    nic_cache_misses: u64,
    rdwc: BTreeMap<&'static str, u64>,
    cache: (u64, u64),
}

fn snapshot<K: IndexKind>(sim: &Sim, memory_nodes: u16, nodes: &[Arc<K::NodeState>]) -> Snapshot {
    let stats = sim.stats();
    let mns = &stats.nodes[..memory_nodes as usize];
    let mut rdwc = node_counters::<K>(nodes);
    let count = |name| rdwc.get(name).copied().unwrap_or(0);
    let cache = (count(Counters::CACHE_HIT), count(Counters::CACHE_MISS));
    rdwc.retain(|k, _| k.starts_with("rdwc_"));
    Snapshot {
        nic_busy_ns: mns.iter().map(|n| n.nic_busy_ns).sum(),
        link_out_busy_ns: mns.iter().map(|n| n.link_out_busy_ns).sum(),
        nic_cache_misses: stats.nic_cache_misses(),
        rdwc,
        cache,
    }
}

/// Runs `sources` (one per client) against the loaded index: a fresh simulation from a copy
/// of the image, fresh compute nodes, warm caches, the measured clients. `names` = (index
/// config name, workload name); `preload` is the history of the loaded items, when a history
/// is recorded; `items` the loaded items, which [`Warm::LoadShare`] and [`Warm::LoadReplay`]
/// deal out to the compute nodes.
#[allow(clippy::too_many_arguments)]
pub fn run_loaded<K: IndexKind>(
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    loaded: &Loaded,
    items: &LoadItems,
    mut sources: Vec<Box<dyn OpSource>>,
    preload: Vec<dmkit_verify::history::Record>,
    progress: &dyn Progress,
) -> Result<RunResult, String> {
    let clients = setup.clients();
    if clients == 0 || sources.len() != clients as usize {
        return Err(format!("{} operation sources for {clients} clients", sources.len()));
    }
    setup.window.validate()?;
    let servers = K::servers(options);
    let mut sim = Sim::new(sim_config::<K>(setup, options, setup.compute_nodes)).map_err(|e| e.to_string())?;
    // Client 0, the creator, stays the loader's (module doc): it runs nothing here.
    let deployed = deploy::deploy::<K>(&mut sim, options, setup.compute_nodes)?;
    sim.restore(&loaded.image).map_err(|e| e.to_string())?;
    let nodes = &deployed.nodes;
    let loader_state =
        loaded.loader.clone().downcast::<K::NodeState>().map_err(|_| "internal: an image of another index")?;
    K::inherit(&nodes[0], &loader_state);
    // Warm every compute node's caches outside time: the papers measure after tens of seconds
    // of warm-up, which a bandwidth-bound index would need minutes of simulation to reach.
    // By load share, each node its own paths; whole, every node warms to the same state: warm
    // the first, give the others its state.
    let mut warmed = Warm::Whole;
    if setup.warm != Warm::Whole {
        for (i, node) in nodes.iter().enumerate() {
            let how = if setup.warm == Warm::LoadShare { "with" } else { "through" };
            progress
                .measuring(0, &format!("warming compute node {}/{}'s caches {how} its load share", i + 1, nodes.len()));
            let mut keys = items.share_keys(i as u64, nodes.len() as u64);
            let done = match setup.warm {
                Warm::LoadShare => {
                    keys.sort_unstable();
                    K::warm_keys(options, node, &sim, &keys)
                }
                _ => K::replay_keys(options, node, &sim, &keys),
            };
            match done.map_err(|e| format!("warming the caches: {e}"))? {
                true => warmed = setup.warm,
                false if i == 0 => break, // the index does not warm so: whole, below
                false => return Err(format!("internal: {} warmed compute node 0 by keys, not {i}", K::NAME)),
            }
        }
    }
    for (i, node) in nodes.iter().enumerate().filter(|_| warmed == Warm::Whole) {
        // Minutes at 60 M keys with sixteen full caches: say so.
        progress.measuring(0, &format!("warming compute node {}/{}'s caches", i + 1, nodes.len()));
        match i {
            0 => K::warm(options, node, &sim),
            _ => K::warm_like(options, node, &nodes[0], &sim),
        }
        .map_err(|e| format!("warming the caches: {e}"))?;
    }
    let start = sim.now_ns();
    for c in &setup.server_crashes {
        if c.server >= servers.nodes {
            return Err(format!(
                "index {} has {} server nodes; cannot crash server {}",
                K::NAME,
                servers.nodes,
                c.server
            ));
        }
        sim.add_node_crash(dmkit_sim::NodeCrash {
            node: setup.memory_nodes + c.server,
            at_ns: start + c.at_ns.max(1),
            restart_at_ns: c.restart_at_ns.map(|r| start + r),
        })
        .map_err(|e| e.to_string())?;
    }
    let tick_ns = setup.tick_ns;
    let timeseries = setup.timeseries_ns > 0;
    let phase = Arc::new(Phase::new(
        clients as usize,
        tick_ns,
        timeseries,
        match setup.window {
            Window::Fixed { warmup_ns, duration_ns: Some(d) } => warmup_ns + d,
            _ => u64::MAX,
        },
    ));
    let sink = Sink {
        phase: phase.clone(),
        series: Arc::default(),
        tally: Rc::default(),
        // The history, when one is recorded, starts with the loaded items.
        history: setup.record_history.then(|| Rc::new(RefCell::new(History { records: preload }))),
    };
    let mut index = 0usize;
    for cn in 0..setup.compute_nodes {
        for _ in 0..setup.threads_per_cn {
            let first = sim.add_client(cn).map_err(|e| e.to_string())?;
            let mut thread = vec![first.clone()];
            for _ in 1..setup.coroutines {
                thread.push(sim.add_coroutine(&first));
            }
            for client in thread {
                let source = std::mem::replace(&mut sources[index], Box::new(Done));
                index += 1;
                let handle = deployed.open(options, cn, &client);
                let meter = SimMeter { client: client.clone(), start };
                sim.spawn(&client, sink.client(client.id(), handle, source, meter));
            }
        }
    }

    // Advance tick by tick, snapshotting the NICs at each boundary; the monitor decides at its
    // checks whether the run goes on.
    let mut monitor = Monitor::new(setup.window, tick_ns);
    let mut snapshots = vec![snapshot::<K>(&sim, setup.memory_nodes, nodes)];
    let mut now = 0u64;
    let mut last_report = std::time::Instant::now();
    let mut status = String::from("warming up");
    let estimate = loop {
        let target = monitor.next_check_ns();
        let mut ended = false;
        while now < target {
            now += tick_ns;
            sim.run_until(start + now).map_err(|e| e.to_string())?;
            snapshots.push(snapshot::<K>(&sim, setup.memory_nodes, nodes));
            if phase.ended() {
                ended = true;
                break;
            }
            if last_report.elapsed().as_millis() >= 200 {
                progress.measuring(now, &status);
                last_report = std::time::Instant::now();
            }
        }
        // Operations per client: the window ends at the tick the first client finished in (when
        // that is past the warm-up), so every measured tick had every client running.
        let judged_until = match setup.window {
            Window::Fixed { warmup_ns, duration_ns: None } if ended => {
                let cut = phase.first_done_ns() / tick_ns * tick_ns;
                if cut > warmup_ns { cut.min(now) } else { now }
            }
            _ => now,
        };
        let decision = monitor.check(&Series::sum(std::slice::from_ref(&sink.series)), judged_until, ended);
        match decision {
            Decision::RunUntil { interim, .. } => {
                if let Some(e) = interim {
                    status = describe_progress(&e);
                }
            }
            Decision::Stop(e) => break e,
        }
    };
    // Stop the clients and let the operations in flight finish (they are not measured).
    phase.stop_at(now);
    sim.run().map_err(|e| e.to_string())?;
    progress.measuring(now, "done; walking the structure's invariants");
    let stats = sim.stats();
    stray_verbs(&stats, "the run")?;
    let whole_series = Series::sum(std::slice::from_ref(&sink.series));
    let (tally, history) = sink.finish()?;
    let report = walk_after_run::<K>(options, &sim, &tally.log)?;

    let (from, to) = (estimate.warmup_ticks, estimate.warmup_ticks + estimate.measured_ticks);
    let cost = tally.window_cost(from, to);
    let mut measured = RunResult::measured(
        K::NAME,
        names,
        setup.profile.name.clone(),
        setup,
        (clients, loaded.keys),
        &estimate,
        &tally.log,
    );
    // The servers' counters beside the clients' (a name both count takes the server's).
    measured.index_counters.extend(K::server_counters(options, &sim).into_iter().map(|(k, v)| (k.to_string(), v)));
    // The compute nodes' own counters at the end of the run, summed (cache entries, evictions,
    // rebuilds; the RDWC windows are reported as ratios over the measured phase instead), where
    // the clients count nothing of the name.
    for (k, v) in node_counters::<K>(nodes).into_iter().filter(|(k, _)| !k.starts_with("rdwc_")) {
        measured.index_counters.entry(k.to_string()).or_insert(v);
    }
    let (ops, measured_ns) = (measured.operations.max(1) as f64, measured.measured_ns);
    let (s0, s1) = (&snapshots[from.min(snapshots.len() - 1)], &snapshots[to.min(snapshots.len() - 1)]);
    let busy = |a: u64, b: u64| (b - a) as f64 / setup.memory_nodes as f64 / measured_ns as f64;
    let verbs_per_op = VerbKind::ALL
        .iter()
        .filter(|k| cost.cost.verbs_of(**k).count > 0)
        .map(|k| (k.name().to_string(), round3(cost.cost.verbs_of(*k).count as f64 / ops)))
        .collect();
    let cache_bytes = nodes.iter().map(|n| K::node_state_bytes(n) as f64).sum::<f64>() / nodes.len() as f64;
    // A cache's look-ups, counted by its clients (over the run) or by the compute node (over
    // the measured window).
    let event = |name| tally.log.counters.events.get(name).copied().unwrap_or(0);
    let hits = event(Counters::CACHE_HIT) + (s1.cache.0 - s0.cache.0);
    let misses = event(Counters::CACHE_MISS) + (s1.cache.1 - s0.cache.1);
    // The series to the end of the run (trailing ticks without a completion are zeros).
    let mut whole = whole_series;
    whole.resize((now / tick_ns) as usize, 0);
    let (series_mops, series_bin_ns) = crate::run::schema::coarse_series(&whole, tick_ns);
    Ok(RunResult {
        series_mops,
        series_bin_ns,
        round_trips_per_op: Some(round3(cost.cost.round_trips as f64 / ops)),
        bytes_read_per_op: Some(round3(cost.cost.bytes_read() as f64 / ops)),
        bytes_written_per_op: Some(round3(cost.cost.bytes_written() as f64 / ops)),
        read_amplification: Some(round3(cost.cost.bytes_read() as f64 / cost.useful_bytes.max(1) as f64)),
        verbs_per_op,
        mn_iops_utilisation: Some(round3(busy(s0.nic_busy_ns, s1.nic_busy_ns))),
        mn_bandwidth_utilisation: Some(round3(busy(s0.link_out_busy_ns, s1.link_out_busy_ns))),
        nic_cache_misses_per_op: (setup.profile.qp_context_cache_entries > 0
            || setup.profile.translation_cache_entries > 0)
            .then(|| round3((s1.nic_cache_misses - s0.nic_cache_misses) as f64 / ops)),
        cache_bytes_per_cn: round3(cache_bytes),
        warmed,
        // An index that counts either event has a cache; one never counted is absent.
        cache_hit_ratio: match (hits, misses) {
            (h, m) if h + m > 0 => Some(round3(h as f64 / (h + m) as f64)),
            _ => None,
        },
        retries_per_op: round3(cost.retries as f64 / ops),
        lock_failures: cost.lock_failures,
        cas_failures: cost.cas_failures,
        rdwc: rdwc_ratios(&s1.rdwc, &s0.rdwc),
        timeseries: if timeseries { tally.timeseries(setup.timeseries_ns, now) } else { Vec::new() },
        history,
        supports_scan: K::SUPPORTS_SCAN,
        sim_steps: stats.steps,
        trace_hash: stats.trace_hash,
        ..measured.with_structure(&report, loaded.item_bytes)
    })
}

/// Loads (or takes the shared image from `slot`) and runs one point.
#[allow(clippy::too_many_arguments)]
pub fn run_index<K: IndexKind>(
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    items: LoadItems,
    sources: Vec<Box<dyn OpSource>>,
    slot: Option<&ImageSlot>,
    progress: &dyn Progress,
) -> Result<RunResult, String> {
    let preload: Vec<dmkit_verify::history::Record> = if setup.record_history {
        // A recorded history starts with the loaded keys, as inserts completed at time 0, so
        // that a checker knows the initial contents.
        items.clone().map(|(k, v)| dmkit_verify::history::Record::preloaded(k, v)).collect()
    } else {
        Vec::new()
    };
    let share = items.clone();
    let loaded = match slot {
        Some(slot) => {
            let key = image_key::<K>(setup, options, &items);
            let loaded = slot.get_or_init(|| load::<K>(setup, options, items, progress).map(Arc::new)).clone()?;
            if loaded.key != key {
                return Err(format!(
                    "internal: a point was given the image of another load ({} instead of {key})",
                    loaded.key
                ));
            }
            loaded
        }
        None => Arc::new(load::<K>(setup, options, items, progress)?),
    };
    run_loaded::<K>(setup, options, names, &loaded, &share, sources, preload, progress)
}

/// A one-line account of where a run stands, for progress.
fn describe_progress(e: &Estimate) -> String {
    if e.unsteady.contains(&crate::measure::Unsteady::WarmingUp) {
        return "warming up".into();
    }
    format!("±{:.1}%{}", e.relative_ci() * 100.0, if e.trend { ", trending" } else { "" })
}

struct Done;

impl OpSource for Done {
    fn next_op(&mut self) -> Option<crate::run::schema::Task> {
        None
    }
}

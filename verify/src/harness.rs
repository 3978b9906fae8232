//! Checking any index: presets, the explored workload, and the verdict of each run.
//!
//! A [`Preset`] says how small the run is (clients, operations, key space, the index's options
//! with tiny nodes) and which counters must move for a clean result to mean anything. Each run
//! creates the index and preloads keys earliest-first, then lets the explorer choose every step
//! while the clients run their operations; the run is judged by
//! - liveness: the run ends within its step limit (else: livelock or a lock never released);
//! - linearizability of the recorded history ([`crate::linearizability`]);
//! - the index's own invariant walk ([`IndexKind::check_invariants`]).
//!
//! After an exploration, a preset's required counters summed over every run must be non-zero,
//! or the result is reported as vacuous.

use crate::deploy;
use crate::explore::{self, Exploration, Judge, Mode, Phase, Scenario};
use crate::history::{History, Record, apply_recorded, simulated_clock};
use crate::linearizability;
use dmkit_indexes::spec::{self, Op};
use dmkit_indexes::{Counters, Index, IndexKind};
use dmkit_sim::{Faults, MemoryModel, Sim, SimClient, SimConfig, SimError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::{Cell, RefCell};
use std::ops::Bound;
use std::rc::Rc;
use std::time::Duration;

pub use dmkit_indexes::checking::{
    Checked, FaultPlan, Mix, Preset, ScanBounds, be_key, point, preset_named, scan_shapes_preset,
};

/// `count` READ failures ([`dmkit_sim::ReadFailure`]) spread over memory nodes
/// `0..memory_nodes` in turn: in a checking run each is a fault step the explorer places, so the
/// failed READ can be any one of the run.
pub fn read_failures(memory_nodes: u16, count: u32) -> Faults {
    let nodes = u32::from(memory_nodes.max(1));
    Faults {
        read_failures: (0..count)
            .map(|i| dmkit_sim::ReadFailure { node: (i % nodes) as u16, at_ns: 1_000 * (u64::from(i) + 1) })
            .collect(),
        ..Faults::default()
    }
}

/// The simulator's faults for a preset's [`FaultPlan`]. The times do not matter in a checking
/// run (the explorer places each fault); a restart follows its crash by 5 µs of virtual time.
pub fn simulated(plan: &FaultPlan) -> Faults {
    Faults {
        node_crashes: plan
            .crashes
            .iter()
            .map(|node| dmkit_sim::NodeCrash { node: node.0, at_ns: 1_000_000, restart_at_ns: Some(1_005_000) })
            .collect(),
        ..read_failures(plan.memory_nodes, plan.read_failures)
    }
}

/// The value client `client` writes in its `seq`-th operation: unique, so the checker can tell
/// every write apart, and the same 8 bytes repeated, so any mix of two writes is a value nobody
/// wrote.
fn value_of(client: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut word = client.to_be_bytes().to_vec();
    word.extend_from_slice(&seq.to_be_bytes());
    word.iter().copied().cycle().take(len.max(8)).collect()
}

/// One index under exploration.
pub struct IndexScenario<K: Checked> {
    pub preset: Preset,
    pub options: K::Options,
    pub memory_model: MemoryModel,
    /// Fixes the clients' operations (the explorer varies only the schedule).
    pub workload_seed: u64,
    /// Counters summed over every run of the exploration.
    pub counters: Rc<RefCell<Counters>>,
    /// The history of the last run.
    pub last_history: Rc<RefCell<History>>,
    /// Fixed operations per client, instead of the preset's random mix: a regression scenario
    /// that sets up one known race and lets the explorer look for the schedule that loses.
    pub script: Option<Vec<Vec<Op>>>,
    /// Schedule each queue pair's verbs as their own actor (`SimConfig::qp_actors`).
    pub qp_actors: bool,
    /// Faults injected into every run ([`Checked::faults`] of the preset). Node crashes are
    /// timed from the start of the explored phase (the set-up runs before them).
    pub faults: Faults,
    /// The schedules are fair (random): an operation that gives up after a retry bound of
    /// [`FAIR_GIVE_UP_BOUND`] or more, with no fault injected, is a violation (a livelock or a
    /// broken retry condition, not bad luck). Under PCT or DFS a client may be starved by
    /// construction, so there a give-up is an indeterminate outcome like any failure.
    /// [`check_index`] sets it from the mode; a replay takes it from `--mode`.
    pub fair_schedule: Cell<bool>,
}

/// The smallest retry bound whose exhaustion under a fair schedule is a violation. Presets that
/// test give-ups set bounds of 1 to 3; indexes' defaults are 200 and up. Under a random
/// schedule a lock holder among three runnable tasks stays unscheduled for 100 of a spinner's
/// steps with probability (2/3)^100 < 1e-17.
pub const FAIR_GIVE_UP_BOUND: u32 = 100;

impl<K: Checked> std::fmt::Debug for IndexScenario<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IndexScenario({} {}, {:?}, seed {})", K::NAME, self.preset.name, self.options, self.workload_seed)
    }
}

impl<K: Checked> IndexScenario<K> {
    pub fn new(preset: Preset, options: K::Options, workload_seed: u64) -> IndexScenario<K> {
        IndexScenario {
            preset,
            options,
            memory_model: MemoryModel::default(),
            workload_seed,
            counters: Rc::default(),
            last_history: Rc::default(),
            script: None,
            qp_actors: false,
            faults: Faults::default(),
            fair_schedule: Cell::new(false),
        }
    }

    /// The scenario `dmkit check` explores: preset `name` of `K` (its first if `None`), with
    /// the named configuration `config` and the planted bug `plant` applied, options validated.
    pub fn from_preset(
        name: Option<&str>,
        config: Option<&str>,
        plant: Option<&str>,
        workload_seed: u64,
    ) -> Result<IndexScenario<K>, String> {
        let presets = K::presets();
        let (preset, mut options) = match name {
            None => presets[0].clone(),
            Some(name) => presets.iter().cloned().chain(K::sweep()).find(|(p, _)| p.name == name).ok_or_else(|| {
                let names: Vec<&str> = presets.iter().map(|(p, _)| p.name).collect();
                format!(
                    "index {} has no preset '{name}' (presets: {}; and {} sweep presets, see --list-presets)",
                    K::NAME,
                    names.join(", "),
                    K::sweep().len()
                )
            })?,
        };
        if let Some(config) = config {
            K::configure(&mut options, config)?;
        }
        if let Some(bug) = plant {
            K::plant(&mut options, bug)?;
        }
        K::validate(&options)?;
        let faults = simulated(&K::faults(preset.name, &options));
        Ok(IndexScenario { faults, ..IndexScenario::new(preset, options, workload_seed) })
    }

    /// The same scenario with fixed operations per client (one list per client, in client
    /// order; the preset's client count becomes the script's).
    pub fn scripted(mut self, script: Vec<Vec<Op>>) -> IndexScenario<K> {
        self.preset.clients = script.len() as u32;
        self.script = Some(script);
        self
    }

    fn op(&self, rng: &mut ChaCha8Rng, client: u32, seq: u32) -> Op {
        let m = self.preset.mix;
        let total = m.search + m.insert + m.update + m.delete + m.scan;
        let key = (self.preset.key_of)(rng.random_range(0..self.preset.keys.max(1)));
        let mut pick = rng.random_range(0..total.max(1));
        for (weight, kind) in [(m.search, 0), (m.insert, 1), (m.update, 2), (m.delete, 3), (m.scan, 4)] {
            if pick < weight {
                return match kind {
                    0 => Op::Search { key },
                    1 => Op::Insert { key, value: value_of(client, seq, self.preset.value_bytes) },
                    2 => Op::Update { key, value: value_of(client, seq, self.preset.value_bytes) },
                    3 => Op::Delete { key },
                    _ => self.scan(rng, key),
                };
            }
            pick -= weight;
        }
        Op::Search { key }
    }

    /// A scan from `key`, shaped by the preset's [`ScanBounds`].
    fn scan(&self, rng: &mut ChaCha8Rng, key: Vec<u8>) -> Op {
        let p = &self.preset;
        let ScanBounds::Shapes { other_lengths } = p.scan_bounds else {
            return Op::Scan { start: Bound::Included(key), end: Bound::Unbounded, limit: p.scan_limit };
        };
        let reshape = |rng: &mut ChaCha8Rng, mut k: Vec<u8>| {
            if other_lengths {
                match rng.random_range(0..4) {
                    0 if k.len() > 1 => {
                        k.pop();
                    }
                    1 => k.push(0xFF),
                    _ => {}
                }
            }
            k
        };
        let start = match rng.random_range(0..3) {
            0 => Bound::Included(reshape(rng, key)),
            1 => Bound::Excluded(reshape(rng, key)),
            _ => Bound::Unbounded,
        };
        let end_kind = rng.random_range(0..3);
        let end = if end_kind == 0 {
            Bound::Unbounded
        } else {
            let k = (p.key_of)(rng.random_range(0..p.keys.max(1)));
            let k = reshape(rng, k);
            if end_kind == 1 { Bound::Included(k) } else { Bound::Excluded(k) }
        };
        Op::Scan { start, end, limit: rng.random_range(0..=p.scan_limit + 2) }
    }
}

impl<K: Checked> Scenario for IndexScenario<K> {
    fn config(&self) -> SimConfig {
        SimConfig {
            topology: deploy::topology::<K>(&self.options, self.preset.memory_nodes, self.preset.compute_nodes),
            memory_model: self.memory_model,
            seed: self.workload_seed,
            step_limit: Some(self.preset.step_limit),
            qp_actors: self.qp_actors,
            // Node crashes and READ failures are added when the explored phase starts (see
            // `build`).
            faults: Faults { node_crashes: Vec::new(), read_failures: Vec::new(), ..self.faults.clone() },
            ..SimConfig::default()
        }
    }

    fn varies(&self) -> bool {
        self.script.is_none()
    }

    fn build(&self, sim: &mut Sim, phase: &Phase, variant: u64) -> Judge {
        let client_cn = |i: u32| (i % self.preset.compute_nodes as u32) as u16;
        // With `low_client_ids`, the checking clients exist before the creator and the services'
        // workers (which the set-up run starts), so they take ids 0..clients, as on hardware.
        let mut early: Vec<SimClient> = Vec::new();
        if self.preset.low_client_ids {
            for i in 0..self.preset.clients {
                early.push(sim.add_client(client_cn(i)).expect("compute node exists"));
            }
        }
        watch_frees();
        // Set-up, earliest-first: start the index's services, create it and preload keys with
        // one client.
        let deployed = match deploy::deploy::<K>(sim, &self.options, self.preset.compute_nodes) {
            Ok(deployed) => deployed,
            Err(e) => return Box::new(move |_, _| Err(e)),
        };
        let (preload, value_bytes, key_of) = (self.preset.preload, self.preset.value_bytes, self.preset.key_of);
        let set_up = deployed.create_then(sim, &self.options, move |mut loader| async move {
            for k in 0..preload {
                if let Err(e) = loader.insert(&(key_of)(k), &value_of(u32::MAX, k as u32, value_bytes)).await {
                    return Err(format!("preload: {e}"));
                }
            }
            Ok(())
        });
        if let Err(e) = sim.run() {
            return Box::new(move |_, _| Err(format!("set-up did not finish: {e}")));
        }
        let set_up = match set_up.try_take() {
            None => Err("set-up did not finish: the creator's task is blocked".to_string()),
            Some(r) => r.map_err(|e| format!("create: {e}")).and_then(|r| r),
        };
        if let Err(e) = set_up {
            return Box::new(move |_, _| Err(e));
        }
        // The preloaded keys, as completed inserts before time 0 of the history.
        let mut history = History::default();
        for k in 0..preload {
            history.records.push(Record::preloaded(
                (self.preset.key_of)(k),
                value_of(u32::MAX, k as u32, self.preset.value_bytes),
            ));
        }
        for c in &self.faults.node_crashes {
            let now = sim.now_ns();
            let crash = dmkit_sim::NodeCrash {
                node: c.node,
                at_ns: now + c.at_ns,
                restart_at_ns: c.restart_at_ns.map(|r| now + r),
            };
            if let Err(e) = sim.add_node_crash(crash) {
                return Box::new(move |_, _| Err(format!("scheduling a crash: {e}")));
            }
        }
        for r in &self.faults.read_failures {
            let failure = dmkit_sim::ReadFailure { node: r.node, at_ns: sim.now_ns() + r.at_ns };
            if let Err(e) = sim.add_read_failure(failure) {
                return Box::new(move |_, _| Err(format!("scheduling a READ failure: {e}")));
            }
        }
        let history = Rc::new(RefCell::new(history));
        let run_counters = Rc::new(RefCell::new(Counters::default()));
        // The last client to finish audits the final state: it searches every key, so a lost
        // or resurrected write shows in the history even if no operation read it afterwards.
        let running = Rc::new(RefCell::new(self.preset.clients));
        let audit: Vec<Op> = (0..self.preset.keys).map(|k| Op::Search { key: (self.preset.key_of)(k) }).collect();
        phase.explore();
        for i in 0..self.preset.clients {
            let cn = client_cn(i);
            let client = match early.get(i as usize) {
                Some(client) => client.clone(),
                None => sim.add_client(cn).expect("compute node exists"),
            };
            let mut handle = deployed.open(&self.options, cn, &client);
            let mut rng = ChaCha8Rng::seed_from_u64(
                self.workload_seed ^ variant.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (0x5eed_0000 + i as u64),
            );
            let ops: Vec<Op> = match &self.script {
                Some(script) => script[i as usize].clone(),
                None => (0..self.preset.ops_per_client).map(|s| self.op(&mut rng, i, s)).collect(),
            };
            let (history, run_counters, c) = (history.clone(), run_counters.clone(), client.clone());
            let (running, audit) = (running.clone(), audit.clone());
            sim.spawn(&client, async move {
                let mut ops = ops;
                let mut audited = false;
                while !ops.is_empty() {
                    let op = ops.remove(0);
                    let Ok(_) = apply_recorded(&mut handle, &op, i, &history, simulated_clock(&c)).await;
                    if ops.is_empty() && !audited {
                        audited = true;
                        let mut left = running.borrow_mut();
                        *left -= 1;
                        if *left == 0 {
                            ops = audit.clone();
                        }
                    }
                }
                run_counters.borrow_mut().merge(handle.counters());
            });
        }
        let (options, last, total, scans) =
            (self.options.clone(), self.last_history.clone(), self.counters.clone(), K::SUPPORTS_SCAN);
        let faulted = !self.faults.node_crashes.is_empty() || !self.faults.read_failures.is_empty();
        // Give-ups are judged in fault-free runs of fair schedules, unless the preset has them
        // by design.
        let judge_give_ups =
            !faulted && self.fair_schedule.get() && !K::gives_up_by_design(self.preset.name, &self.options);
        Box::new(move |sim: &Sim, outcome: Result<(), SimError>| {
            *last.borrow_mut() = history.borrow().clone();
            total.borrow_mut().merge(&run_counters.borrow());
            let servers =
                Counters { events: K::server_counters(&options, sim).into_iter().collect(), ..Counters::default() };
            total.borrow_mut().merge(&servers);
            match outcome {
                Ok(()) => {}
                Err(SimError::StepLimit { steps, .. }) => {
                    return Err(format!(
                        "no progress: the run did not end within {steps} steps (livelock, or a lock never released)"
                    ));
                }
                Err(e) => return Err(format!("the run failed: {e}")),
            }
            // A verb that addressed memory no allocator handed out: an address computation
            // went astray, whether or not the bytes it touched mattered to this run.
            sim.stats().unallocated.verdict()?;
            bad_free_verdict()?;
            // Work the index abandoned with no cause in this run (a failed recovery).
            for name in K::abandoned() {
                let n = counter(&servers, name) + counter(&run_counters.borrow(), name);
                if n > 0 {
                    return Err(format!("the index abandoned work a checking run gives no cause to: {name} = {n}"));
                }
            }
            // A transport error without an injected fault: a violation of its own (see
            // `History::unexplained_transport_error`; an index failing every operation so would
            // pass otherwise).
            if !faulted && let Some(violation) = history.borrow().unexplained_transport_error() {
                return Err(violation);
            }
            if judge_give_ups && let Some(violation) = history.borrow().unfair_give_up(FAIR_GIVE_UP_BOUND) {
                return Err(violation);
            }
            // A valid input refused as too long or too short: no effect, so the linearizability
            // check would accept it (see `History::refused_valid_input`).
            if let Some(violation) = history.borrow().refused_valid_input(&K::limits(&options)) {
                return Err(violation);
            }
            // An index that detects a broken invariant reports it: the checker judges that a
            // violation of its own kind (`IndexReportedCorruption`), not an operation of unknown
            // effect.
            if let Err(v) = linearizability::check(&history.borrow(), scans) {
                // An inconclusive check is not a clean run either: say so, distinctly.
                return Err(if v.is_inconclusive() {
                    format!("inconclusive (checker bound exceeded): {v}")
                } else {
                    v.to_string()
                });
            }
            let report = K::check_invariants(&options, sim).map_err(|e| format!("invariant violated: {e}"))?;
            unfinished_allowed(&report, &history.borrow())
        })
    }
}

/// The states an unfinished operation leaves ([`dmkit_indexes::InvariantReport::unfinished`])
/// are accepted only if some operation of `history` did not finish: it failed, or its client
/// crashed before it returned.
fn unfinished_allowed(report: &dmkit_indexes::InvariantReport, history: &History) -> Result<(), String> {
    let some_unfinished =
        history.records.iter().any(|r| r.respond.is_none() || matches!(r.outcome, spec::Outcome::Failed(_)));
    report.check_unfinished(some_unfinished).map_err(|e| format!("invariant violated: {e}"))
}

/// Runs `ops` one after another on a fresh index with one client in a timed simulation, and
/// returns what the index answered beside what the specification answers: the body of a
/// proptest over operation sequences (proptest then shrinks a failing sequence to a minimal one).
pub fn run_sequence<K: IndexKind>(options: &K::Options, ops: &[Op]) -> (Vec<spec::Outcome>, Vec<spec::Outcome>) {
    let (got, want, _) = run_sequence_checked::<K>(options, ops);
    (got, want)
}

/// Before a checked run: every block a free gives back must be one handed out, whole (the chunk
/// allocators the run creates keep a record of blocks; see `check_frees`).
fn watch_frees() {
    dmkit_indexes::common::chunk::check_frees(true);
    dmkit_indexes::common::chunk::take_bad_free();
}

/// After a checked run: a free that gave back something other than a block whole (a leak, or a
/// neighbour's bytes), whether or not the index looked at free's answer.
fn bad_free_verdict() -> Result<(), String> {
    match dmkit_indexes::common::chunk::take_bad_free() {
        Some(bad) => Err(format!("the index freed memory it was not handed out as one block: {bad}")),
        None => Ok(()),
    }
}

/// [`run_sequence`], and the index's invariant walk of the final structure.
pub fn run_sequence_checked<K: IndexKind>(
    options: &K::Options,
    ops: &[Op],
) -> (Vec<spec::Outcome>, Vec<spec::Outcome>, Result<dmkit_indexes::InvariantReport, String>) {
    let mut sim = deploy::default_sim::<K>(options).expect("the default configuration is valid");
    watch_frees();
    let deployed = deploy::deploy::<K>(&mut sim, options, 1).expect("the index's services install");
    let todo = ops.to_vec();
    let run = deployed.create_then(&mut sim, options, move |mut handle| async move {
        let mut got = Vec::new();
        for op in &todo {
            got.push(spec::apply(&mut handle, op).await);
        }
        got
    });
    sim.run().expect("a sequential run ends");
    let got = run.take().unwrap_or_else(|e| vec![spec::Outcome::Failed(e)]);
    if let Err(stray) = sim.stats().unallocated.verdict().and_then(|()| bad_free_verdict()) {
        panic!("{stray}");
    }
    let mut model = spec::SpecMap::new();
    let want = ops.iter().map(|op| model.apply(op, K::SUPPORTS_SCAN)).collect();
    let walk = K::check_invariants(options, &sim);
    (got, want, walk)
}

/// The value of counter `name` in `c`.
pub fn counter(c: &Counters, name: &str) -> u64 {
    match name {
        Counters::RETRIES => c.retries,
        Counters::LOCK_FAILURES => c.lock_failures,
        Counters::CAS_FAILURES => c.cas_failures,
        other => c.events.get(other).copied().unwrap_or(0),
    }
}

/// An exploration of one index, and whether it counted.
#[derive(Debug)]
pub struct IndexCheck {
    pub exploration: Exploration,
    pub counters: Counters,
    /// Required counters that stayed zero (a clean result then proves nothing).
    pub vacuous: Vec<&'static str>,
}

impl IndexCheck {
    /// Panics, naming `what`, if the exploration failed, ran fewer than `min_schedules`
    /// schedules, or (with `require_counters`) left a required counter at zero: what every
    /// "clean and not vacuous" test asserts. (A mode that explores few schedules, such as DFS
    /// of a small preset, need not move every counter.)
    pub fn assert_clean(&self, what: &str, min_schedules: u64, require_counters: bool) {
        if let Some(f) = &self.exploration.failure {
            panic!("{what}: {f}");
        }
        let schedules = self.exploration.schedules;
        assert!(schedules >= min_schedules, "{what}: {schedules} schedules, fewer than {min_schedules}");
        if require_counters {
            assert!(self.vacuous.is_empty(), "{what}: counters {:?} stayed zero", self.vacuous);
        }
    }
}

/// Explores an index scenario and checks its required counters.
pub fn check_index<K: Checked>(
    scenario: &IndexScenario<K>,
    mode: Mode,
    seed: u64,
    budget: Duration,
    max_schedules: u64,
) -> IndexCheck {
    scenario.fair_schedule.set(matches!(mode, Mode::Random));
    let exploration = explore::explore(scenario, mode, seed, budget, max_schedules);
    let counters = scenario.counters.borrow().clone();
    let vacuous = if exploration.failure.is_none() {
        scenario.preset.required_counters.iter().copied().filter(|name| counter(&counters, name) == 0).collect()
    } else {
        Vec::new()
    };
    IndexCheck { exploration, counters, vacuous }
}

/// Explores `scenario` with seed 1 and a bound of `schedules` (so a test does not depend on the
/// machine's speed) and returns the failure's message, after checking that the failing schedule
/// replays to the same failure; panics, naming `name`, if nothing fails. What every "this
/// protection is needed" test asserts.
pub fn find_replayable<K: Checked>(name: &str, scenario: &IndexScenario<K>, mode: Mode, schedules: u64) -> String {
    let check = check_index(scenario, mode, 1, Duration::from_secs(3600), schedules);
    let f = check.exploration.failure.unwrap_or_else(|| {
        panic!("{name}: not found in {} schedules; counters {:?}", check.exploration.schedules, check.counters)
    });
    eprintln!("{name}: found at schedule {}: {}", check.exploration.schedules, f.message);
    assert_eq!(explore::replay(scenario, f.variant, &f.choices), Err(f.message.clone()), "{name}: the replay differs");
    f.message
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmkit_indexes::{IndexError, InvariantReport};

    fn record(client: u32, outcome: spec::Outcome, respond: Option<u64>) -> Record {
        Record { client, op: Op::Search { key: vec![1] }, outcome, invoke: 1, respond }
    }

    /// An unfinished operation's state left in the structure is a violation unless some
    /// operation of the run failed or never returned.
    #[test]
    fn unfinished_states_need_an_unfinished_operation() {
        let report = InvariantReport { unfinished: vec!["a dead leaf still linked".into()], ..Default::default() };
        let finished = History { records: vec![record(0, spec::Outcome::Found(None), Some(2))] };
        let err = unfinished_allowed(&report, &finished).unwrap_err();
        assert!(err.contains("a dead leaf still linked") && err.contains("every operation finished"), "{err}");
        let failed = History {
            records: vec![
                record(0, spec::Outcome::Found(None), Some(2)),
                record(1, spec::Outcome::Failed(IndexError::Corrupt("x".into())), Some(3)),
            ],
        };
        assert_eq!(unfinished_allowed(&report, &failed), Ok(()));
        let crashed = History { records: vec![record(0, spec::Outcome::Found(None), None)] };
        assert_eq!(unfinished_allowed(&report, &crashed), Ok(()));
        assert_eq!(unfinished_allowed(&InvariantReport::default(), &finished), Ok(()));
    }
}

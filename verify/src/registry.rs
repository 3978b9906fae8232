//! The indexes `dmkit check` knows, their presets, and one entry point that runs a check from
//! command-line arguments.

use crate::explore::{self, Mode};
use crate::harness::{Checked, IndexCheck, IndexScenario, Preset, check_index, counter, read_failures};
use dmkit_indexes::Counters;
use dmkit_indexes::IndexKind;
use std::fmt::Write as _;
use std::time::Duration;

pub use dmkit_indexes::chime::presets::{chime_key, chime_var_key};
pub use dmkit_indexes::dolphin::presets::{dolphin_key, dolphin_options};
pub use dmkit_indexes::smart::presets::smart_key;

/// Something done with one index, whichever it is: [`visit`] finds the index by name and
/// calls `visit::<K>()` with its type, so each command is one generic function instead of a
/// `match` over names.
pub trait Visit {
    type Output;
    fn visit<K: Checked>(self) -> Self::Output;
}

macro_rules! checked {
    (indexes: [$($index:ty),* $(,)?], configurations: [$($config:ty),* $(,)?]) => {
        /// Calls `v` with the index named `index`, or returns an error naming the known ones.
        /// The indexes are the registry's ([`dmkit_indexes::registry!`]); the checker runs each
        /// index's own type (configurations another type runs, such as Sherman's values out of
        /// line, are not checked by name).
        pub fn visit<V: Visit>(index: &str, v: V) -> Result<V::Output, String> {
            $(
                if index == <$index as IndexKind>::NAME {
                    return Ok(v.visit::<$index>());
                }
            )*
            Err(unknown(index))
        }
    };
}
dmkit_indexes::registry!(checked);

/// Names `dmkit check --index` accepts: the registry's.
pub fn index_names() -> Vec<&'static str> {
    dmkit_indexes::registry::index_names()
}

/// What `dmkit check` was asked to do.
#[derive(Clone, Debug)]
pub struct CheckRequest {
    pub index: String,
    pub preset: Option<String>,
    /// A named configuration of the index, applied to the preset's options.
    pub config: Option<String>,
    pub clients: Option<u32>,
    pub seconds: f64,
    /// `None`: random, PCT, and PCT with queue-pair actors, a third of the budget each (half
    /// each of random and PCT if `qp_actors`).
    pub mode: Option<Mode>,
    pub seed: u64,
    pub plant: Option<String>,
    pub replay: Option<String>,
    pub max_schedules: u64,
    /// Schedule each queue pair's verbs as their own actor (`SimConfig::qp_actors`), so that
    /// PCT and DFS can hold back one QP's verbs while the client goes on over another.
    pub qp_actors: bool,
    /// READ failures added to the preset's faults ([`dmkit_sim::ReadFailure`]), spread over
    /// the memory nodes; the explorer places each.
    pub read_failures: u32,
}

/// The result: a report for the terminal and whether the check passed; `history` is the JSON
/// lines of the failing run (or of the last run if clean).
#[derive(Clone, Debug)]
pub struct CheckOutcome {
    pub passed: bool,
    pub report: String,
    pub history: String,
    /// Counters summed over every run of the check.
    pub counters: Counters,
    /// Required counters of the preset that stayed zero (then `passed` is false although no
    /// run failed).
    pub vacuous: Vec<&'static str>,
}

/// Planted bugs of an index, one per line: `name: description`.
pub fn list_plants(index: &str) -> Result<String, String> {
    struct List;
    impl Visit for List {
        type Output = String;
        fn visit<K: Checked>(self) -> String {
            K::planted_bugs().iter().map(|p| format!("{}: {}\n", p.name, p.description)).collect()
        }
    }
    visit(index, List)
}

/// Names of an index's checking presets (the ones `--coverage` runs), the default first.
pub fn preset_names(index: &str) -> Result<Vec<&'static str>, String> {
    names(index, false)
}

/// Names of an index's option-space sweep points (`dmkit check --sweep`), in order.
pub fn sweep_names(index: &str) -> Result<Vec<&'static str>, String> {
    names(index, true)
}

fn names(index: &str, sweep: bool) -> Result<Vec<&'static str>, String> {
    struct Names(bool);
    impl Visit for Names {
        type Output = Vec<&'static str>;
        fn visit<K: Checked>(self) -> Self::Output {
            let presets = if self.0 { K::sweep() } else { K::presets() };
            presets.into_iter().map(|(p, _)| p.name).collect()
        }
    }
    visit(index, Names(sweep))
}

/// Race handlers of an index, one per line: `event: the race it handles`.
pub fn list_race_handlers(index: &str) -> Result<String, String> {
    struct List;
    impl Visit for List {
        type Output = String;
        fn visit<K: Checked>(self) -> String {
            K::race_handlers().iter().map(|h| format!("{}: {}\n", h.event, h.race)).collect()
        }
    }
    visit(index, List)
}

fn unknown(index: &str) -> String {
    dmkit_indexes::registry::unknown(index)
}

/// Runs a check. `Err` is for bad arguments (exit 2); a failed check is `Ok` with `passed: false`.
pub fn run_check(req: &CheckRequest) -> Result<CheckOutcome, String> {
    struct Run<'a>(&'a CheckRequest);
    impl Visit for Run<'_> {
        type Output = Result<CheckOutcome, String>;
        fn visit<K: Checked>(self) -> Self::Output {
            run::<K>(self.0)
        }
    }
    visit(&req.index, Run(req))?
}

/// The race handlers that stayed at zero in `counters`.
fn unreached<K: Checked>(counters: &Counters) -> Vec<&'static str> {
    K::race_handlers().iter().filter(|h| counter(counters, h.event) == 0).map(|h| h.event).collect()
}

fn run<K: Checked>(req: &CheckRequest) -> Result<CheckOutcome, String> {
    if req.clients == Some(0) {
        return Err("--clients must be positive".into());
    }
    let mut scenario =
        IndexScenario::<K>::from_preset(req.preset.as_deref(), req.config.as_deref(), req.plant.as_deref(), req.seed)?;
    if let Some(c) = req.clients {
        scenario.preset.clients = c;
    }
    scenario.qp_actors = req.qp_actors;
    scenario.faults.read_failures.extend(read_failures(scenario.preset.memory_nodes, req.read_failures).read_failures);
    if !(req.seconds > 0.0 && req.seconds.is_finite()) {
        return Err("--seconds must be positive".into());
    }
    let preset = &scenario.preset;
    let command = format!(
        "dmkit check --index {} --preset {}{}{} --seed {}{}{}{}",
        K::NAME,
        preset.name,
        req.config.as_ref().map(|c| format!(" --config {c}")).unwrap_or_default(),
        req.clients.map(|c| format!(" --clients {c}")).unwrap_or_default(),
        req.seed,
        req.plant.as_ref().map(|p| format!(" --plant {p}")).unwrap_or_default(),
        if req.qp_actors { " --qp-actors" } else { "" },
        if req.read_failures > 0 { format!(" --read-failures {}", req.read_failures) } else { String::new() },
    );
    if let Some(replay) = &req.replay {
        let (variant, choices) = explore::decode_replay(replay)?;
        // A schedule found in random mode is judged as fair (give-ups are violations): its
        // replay line says `--mode random`.
        scenario.fair_schedule.set(matches!(req.mode, Some(Mode::Random)));
        let verdict = explore::replay(&scenario, variant, &choices);
        let history = scenario.last_history.borrow().to_json_lines();
        return Ok(match verdict {
            Ok(()) => CheckOutcome {
                passed: true,
                report: "replayed schedule: clean\n".into(),
                history,
                counters: Counters::default(),
                vacuous: Vec::new(),
            },
            Err(e) => CheckOutcome {
                passed: false,
                report: format!("replayed schedule: VIOLATION\n{e}\n"),
                history,
                counters: Counters::default(),
                vacuous: Vec::new(),
            },
        });
    }
    let budget = Duration::from_secs_f64(req.seconds);
    // Without --mode: random, PCT, and PCT with each queue pair its own actor, a third of the
    // budget each. Neither PCT finds every planted bug the other finds (measured on every plant,
    // README "Checking an index"), and both explore as many schedules per second.
    let pct = Mode::Pct { depth: 3 };
    let modes: Vec<(Mode, bool, Duration)> = match req.mode {
        Some(m) => vec![(m, req.qp_actors, budget)],
        None if req.qp_actors => vec![(Mode::Random, true, budget / 2), (pct, true, budget / 2)],
        None => vec![(Mode::Random, false, budget / 3), (pct, false, budget / 3), (pct, true, budget / 3)],
    };
    let mut report = String::new();
    let _ = writeln!(
        report,
        "{}: preset {} ({} clients x {} ops on {} keys, {} compute nodes, {} memory nodes){}",
        K::NAME,
        preset.name,
        preset.clients,
        preset.ops_per_client,
        preset.keys,
        preset.compute_nodes,
        preset.memory_nodes,
        req.plant.as_ref().map(|p| format!(", planted bug {p}")).unwrap_or_default()
    );
    let mut vacuous = Vec::new();
    for (mode, qp_actors, budget) in modes {
        scenario.qp_actors = qp_actors;
        // The mode that turned QP actors on although the request did not: its name and replay
        // line say so.
        let extra_qp = qp_actors && !req.qp_actors;
        let name = if extra_qp { format!("{}/qp", mode.name()) } else { mode.name().to_string() };
        let IndexCheck { exploration: e, counters, vacuous: v } =
            check_index(&scenario, mode, req.seed, budget, req.max_schedules);
        let _ = writeln!(
            report,
            "  {:<6} {} schedules, {} steps in {:.1} s ({:.0} schedules/s){}",
            name,
            e.schedules,
            e.steps,
            e.elapsed.as_secs_f64(),
            e.schedules_per_second(),
            if e.complete { ", bound exhausted" } else { "" }
        );
        if let Some(f) = e.failure {
            let _ = writeln!(report, "VIOLATION in schedule {} ({name}):\n{}", f.schedule, f.message);
            let qp = if extra_qp { " --qp-actors" } else { "" };
            let fair = if mode == Mode::Random { " --mode random" } else { "" };
            let _ = writeln!(report, "replay: {command}{qp}{fair} --replay {}", f.replay_string());
            let history = scenario.last_history.borrow().to_json_lines();
            let counters = scenario.counters.borrow().clone();
            return Ok(CheckOutcome { passed: false, report, history, counters, vacuous: Vec::new() });
        }
        let _ = writeln!(
            report,
            "  counters so far: retries {}, lock failures {}, CAS failures {}, events {:?}",
            counters.retries, counters.lock_failures, counters.cas_failures, counters.events
        );
        vacuous = v;
    }
    let history = scenario.last_history.borrow().to_json_lines();
    let counters = scenario.counters.borrow().clone();
    let handlers = K::race_handlers();
    if !handlers.is_empty() {
        let zero = unreached::<K>(&counters);
        let _ = writeln!(
            report,
            "  race handlers reached: {} of {}{}",
            handlers.len() - zero.len(),
            handlers.len(),
            if zero.is_empty() { String::new() } else { format!("; never ran: {}", zero.join(", ")) }
        );
    }
    if !vacuous.is_empty() {
        let _ = writeln!(report, "VACUOUS: required counters stayed zero: {}", vacuous.join(", "));
        return Ok(CheckOutcome { passed: false, report, history, counters, vacuous });
    }
    let _ = writeln!(report, "clean");
    Ok(CheckOutcome { passed: true, report, history, counters, vacuous })
}

/// Runs every preset of the index (`req.seconds` each, modes as in [`run_check`]) and reports
/// which race handlers each reached: a table of handler × preset counts, then the handlers no
/// preset reached. Passes when every preset is clean and every handler ran somewhere.
pub fn run_coverage(req: &CheckRequest) -> Result<CheckOutcome, String> {
    struct Cover<'a>(&'a CheckRequest);
    impl Visit for Cover<'_> {
        type Output = Result<CheckOutcome, String>;
        fn visit<K: Checked>(self) -> Self::Output {
            coverage::<K>(self.0)
        }
    }
    if req.preset.is_some() || req.plant.is_some() || req.replay.is_some() {
        return Err("--coverage runs every preset without plants: drop --preset, --plant and --replay".into());
    }
    visit(&req.index, Cover(req))?
}

fn coverage<K: Checked>(req: &CheckRequest) -> Result<CheckOutcome, String> {
    let handlers = K::race_handlers();
    if handlers.is_empty() {
        return Err(format!("{} declares no race handlers", K::NAME));
    }
    let mut columns: Vec<(&'static str, Counters)> = Vec::new();
    let mut report = String::new();
    for (preset, _) in K::presets() {
        let one = CheckRequest { preset: Some(preset.name.into()), ..req.clone() };
        let outcome = run::<K>(&one)?;
        eprint!("{}", outcome.report);
        // A vacuous preset still counts its handlers; only a failed run ends the coverage.
        if !outcome.passed && outcome.vacuous.is_empty() {
            report.push_str(&outcome.report);
            return Ok(CheckOutcome { report, ..outcome });
        }
        columns.push((preset.name, outcome.counters));
    }
    let width = handlers.iter().map(|h| h.event.len()).max().unwrap_or(0).max(7);
    let _ =
        write!(report, "{}: race handlers reached per preset ({} s each)\n{:<width$}", K::NAME, req.seconds, "handler");
    for (name, _) in &columns {
        let _ = write!(report, " {:>w$}", name, w = name.len().max(6));
    }
    let _ = writeln!(report, " {:>8}", "total");
    let mut never = Vec::new();
    for h in handlers {
        let _ = write!(report, "{:<width$}", h.event);
        let mut total = 0;
        for (name, c) in &columns {
            let n = counter(c, h.event);
            total += n;
            let _ = write!(report, " {:>w$}", n, w = name.len().max(6));
        }
        let _ = writeln!(report, " {total:>8}");
        if total == 0 {
            never.push(*h);
        }
    }
    if never.is_empty() {
        let _ = writeln!(report, "every race handler ran in some preset");
    } else {
        let _ = writeln!(report, "NOT REACHED by any preset ({} of {}):", never.len(), handlers.len());
        for h in &never {
            let _ = writeln!(report, "  {}: {}", h.event, h.race);
        }
    }
    Ok(CheckOutcome {
        passed: never.is_empty(),
        report,
        history: String::new(),
        counters: Counters::default(),
        vacuous: Vec::new(),
    })
}

/// Every preset of an index, one per line (`name: clients x ops on keys, ...`): the presets
/// `--coverage` runs, then the option-space sweep's.
pub fn list_presets(index: &str) -> Result<String, String> {
    struct List;
    impl Visit for List {
        type Output = String;
        fn visit<K: Checked>(self) -> String {
            let line = |(p, o): (Preset, K::Options), out: &mut String| {
                let _ = writeln!(
                    out,
                    "{}: {} clients x {} ops on {} keys ({} preloaded), {} compute nodes, {} memory nodes; {:?}",
                    p.name, p.clients, p.ops_per_client, p.keys, p.preload, p.compute_nodes, p.memory_nodes, o
                );
            };
            let mut out = String::from("presets:\n");
            K::presets().into_iter().for_each(|p| line(p, &mut out));
            out.push_str("sweep (dmkit check --sweep):\n");
            K::sweep().into_iter().for_each(|p| line(p, &mut out));
            out
        }
    }
    visit(index, List)
}

/// Runs every preset of the index's option-space sweep ([`Checked::sweep`]) for `req.seconds`
/// each (modes as in [`run_check`]), going on after a failure, and reports a table: preset,
/// verdict, schedules, and the replay line of each violation. Passes when every sweep preset
/// is clean and none is vacuous.
pub fn run_sweep(req: &CheckRequest) -> Result<CheckOutcome, String> {
    struct Sweep<'a>(&'a CheckRequest);
    impl Visit for Sweep<'_> {
        type Output = Result<CheckOutcome, String>;
        fn visit<K: Checked>(self) -> Self::Output {
            sweep::<K>(self.0)
        }
    }
    if req.preset.is_some() || req.replay.is_some() {
        return Err("--sweep runs every sweep preset: drop --preset and --replay".into());
    }
    visit(&req.index, Sweep(req))?
}

fn sweep<K: Checked>(req: &CheckRequest) -> Result<CheckOutcome, String> {
    let presets = K::sweep();
    if presets.is_empty() {
        return Err(format!("{} has no option-space sweep", K::NAME));
    }
    let mut rows = Vec::new();
    let mut failures = String::new();
    let mut passed = true;
    for (i, (preset, _)) in presets.iter().enumerate() {
        eprintln!("[{}/{}] {} {}", i + 1, presets.len(), K::NAME, preset.name);
        let one = CheckRequest { preset: Some(preset.name.into()), ..req.clone() };
        let started = std::time::Instant::now();
        let verdict = match run::<K>(&one) {
            // A named configuration (--config) or a plant may not accept a sweep preset's
            // options: that point is skipped, and says so.
            Err(e) => format!("rejected: {e}"),
            Ok(outcome) => {
                eprint!("{}", outcome.report);
                if outcome.passed {
                    "clean".to_string()
                } else if !outcome.vacuous.is_empty() {
                    passed = false;
                    format!("VACUOUS ({})", outcome.vacuous.join(", "))
                } else {
                    passed = false;
                    let _ = writeln!(failures, "--- {}\n{}", preset.name, outcome.report);
                    let replay = outcome.report.lines().find(|l| l.starts_with("replay: ")).unwrap_or("").to_string();
                    format!("VIOLATION after {:.1} s; {replay}", started.elapsed().as_secs_f64())
                }
            }
        };
        rows.push((preset.name, verdict));
    }
    let mut report = failures;
    let _ = writeln!(
        report,
        "{}: option-space sweep, {} presets, {} s each{}",
        K::NAME,
        rows.len(),
        req.seconds,
        req.plant.as_ref().map(|p| format!(", planted bug {p}")).unwrap_or_default()
    );
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, verdict) in &rows {
        let _ = writeln!(report, "  {name:<width$}  {verdict}");
    }
    Ok(CheckOutcome { passed, report, history: String::new(), counters: Counters::default(), vacuous: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every index declares its race handlers, each event once (a duplicate would show one
    /// counter as two rows of the coverage table).
    #[test]
    fn every_index_declares_distinct_race_handlers() {
        for name in index_names() {
            let list = list_race_handlers(name).unwrap();
            let events: Vec<&str> = list.lines().map(|l| l.split(':').next().unwrap()).collect();
            assert!(!events.is_empty(), "{name} declares no race handlers");
            let mut distinct = events.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), events.len(), "{name}: {events:?}");
        }
    }

    /// Every registered index is found by the checker's dispatcher and lists its plants and
    /// presets there (the list is the registry's: `dmkit_indexes::registry!`).
    #[test]
    fn every_registered_index_lists_plants_and_presets() {
        assert_eq!(index_names(), dmkit_indexes::registry::index_names());
        for name in index_names() {
            let plants = list_plants(name).unwrap();
            assert!(plants.lines().count() >= 2, "{name} plants fewer than two bugs:\n{plants}");
            assert!(!preset_names(name).unwrap().is_empty(), "{name} has no preset");
        }
        assert!(list_plants("btree").unwrap_err().contains("known: example, race"));
    }

    /// Sweep presets are named `sweep-...`, apart from the presets and each other, and the
    /// index accepts their options (a sweep point the index refuses would test nothing).
    #[test]
    fn sweep_presets_are_named_apart_and_valid() {
        struct Check;
        impl Visit for Check {
            type Output = ();
            fn visit<K: Checked>(self) {
                let mut names: Vec<&str> = K::presets().iter().map(|(p, _)| p.name).collect();
                for (p, o) in K::sweep() {
                    assert!(p.name.starts_with("sweep-"), "{}: {}", K::NAME, p.name);
                    assert!(!names.contains(&p.name), "{}: {} twice", K::NAME, p.name);
                    names.push(p.name);
                    K::validate(&o).unwrap_or_else(|e| panic!("{} {}: {e}", K::NAME, p.name));
                    assert!(p.preload <= p.keys && p.clients > 0 && p.ops_per_client > 0, "{} {}", K::NAME, p.name);
                }
            }
        }
        for name in index_names() {
            visit(name, Check).unwrap();
        }
    }
}

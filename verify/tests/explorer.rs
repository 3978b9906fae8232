//! The schedule explorer on small protocols and on the example index: it finds what is wrong
//! (and the printed schedule replays it), and stays clean on what is right.
//!
//! Budgets are short under `CI=true`; `dmkit check` runs the long explorations.

use dmkit_indexes::IndexKind;
use dmkit_indexes::example::Example;
use dmkit_rdma::{Buf, NodeId, RemoteAddr, Request, Verbs};
use dmkit_sim::{MemoryModel, Sim, SimConfig, SimError};
use dmkit_verify::explore::{self, Judge, Mode, Phase, Scenario, decode_choices, decode_replay, encode_choices};
use dmkit_verify::harness::{Checked, IndexScenario, check_index};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

fn ci() -> bool {
    std::env::var("CI").is_ok()
}

/// Budget for "find it" runs (the issue asks within 60 s; they take well under a second here).
fn find_budget() -> Duration {
    Duration::from_secs(if ci() { 20 } else { 60 })
}

/// Budget for "stays clean" runs.
fn clean_budget() -> Duration {
    Duration::from_secs(if ci() { 3 } else { 60 })
}

const RECORD: RemoteAddr = RemoteAddr::host(NodeId(0), 4096);

/// An optimistic versioned record of two 64-byte units. The writer takes the version from even
/// to odd with a CAS, writes the data (every data byte = the new version's low byte), and
/// writes the new even version. A reader READs the record once and accepts it if the version it
/// saw is even; it then checks that every byte it accepted belongs to that version.
///
/// Without per-unit versions only unit 0 carries the version, so a READ whose units are sampled
/// across the writer's WRITE passes the check with torn data. With per-unit versions every unit
/// starts with the version (the writer writes it into each unit) and the reader accepts only if
/// all units carry the same even version: each unit is atomic, so the data is whole.
struct VersionedRecord {
    per_unit_versions: bool,
}

impl VersionedRecord {
    fn image(&self, version: u64) -> Vec<u8> {
        let mut rec = vec![version as u8; 128];
        rec[0..8].copy_from_slice(&version.to_le_bytes());
        if self.per_unit_versions {
            rec[64..72].copy_from_slice(&version.to_le_bytes());
        }
        rec
    }
}

impl Scenario for VersionedRecord {
    fn config(&self) -> SimConfig {
        SimConfig { step_limit: Some(100_000), ..SimConfig::default() }
    }

    fn build(&self, sim: &mut Sim, phase: &Phase, _variant: u64) -> Judge {
        sim.write_memory(RECORD, &self.image(2)).unwrap();
        phase.explore();
        let writer = sim.add_client(0).unwrap();
        let w = writer.clone();
        let per_unit = self.per_unit_versions;
        let images: Vec<Vec<u8>> = [4u64, 6].iter().map(|&v| self.image(v)).collect();
        sim.spawn(&writer, async move {
            let mut version = 2u64;
            for image in images {
                let old = w.cas(RECORD, version, version + 1).await.unwrap();
                assert_eq!(old, version, "one writer: the CAS always succeeds");
                // Data first (the version word of unit 0 stays odd), then the new version.
                let mut data = image.clone();
                data[0..8].copy_from_slice(&(version + 1).to_le_bytes());
                w.write(RECORD, Buf::from(data)).await.unwrap();
                w.write(RECORD, Buf::from(image[0..8].to_vec())).await.unwrap();
                version += 2;
            }
        });
        let bad = Rc::new(RefCell::new(None::<String>));
        for _ in 0..2 {
            let reader = sim.add_client(0).unwrap();
            let (r, bad) = (reader.clone(), bad.clone());
            sim.spawn(&reader, async move {
                for _attempt in 0..20 {
                    let rec = r.read(RECORD, Buf::zeroed(128)).await.unwrap();
                    let v0 = u64::from_le_bytes(rec[0..8].try_into().unwrap());
                    let accepted = if per_unit {
                        let v1 = u64::from_le_bytes(rec[64..72].try_into().unwrap());
                        v0 % 2 == 0 && v0 == v1
                    } else {
                        v0 % 2 == 0
                    };
                    if accepted {
                        let data =
                            rec.iter().enumerate().filter(|(i, _)| !(*i < 8 || per_unit && (64..72).contains(i)));
                        if let Some((i, b)) = data.map(|(i, &b)| (i, b)).find(|&(_, b)| b != v0 as u8) {
                            *bad.borrow_mut() = Some(format!("accepted version {v0} with byte {i} = {b} (torn read)"));
                        }
                        return;
                    }
                    r.sleep(50).await;
                }
            });
        }
        Box::new(move |_: &Sim, outcome: Result<(), SimError>| {
            outcome.map_err(|e| e.to_string())?;
            match bad.borrow_mut().take() {
                Some(b) => Err(b),
                None => Ok(()),
            }
        })
    }
}

#[test]
fn the_torn_read_is_found_and_its_schedule_replays() {
    let flawed = VersionedRecord { per_unit_versions: false };
    for mode in [Mode::Random, Mode::Pct { depth: 3 }] {
        let e = explore::explore(&flawed, mode, 1, find_budget(), u64::MAX);
        let f = e.failure.unwrap_or_else(|| panic!("{mode:?} missed the torn read in {} schedules", e.schedules));
        assert!(f.message.contains("torn"), "{}", f.message);
        assert!(e.elapsed < find_budget());
        // The printed string replays the very same failure.
        let (variant, choices) = decode_replay(&f.replay_string()).unwrap();
        assert_eq!((variant, &choices), (f.variant, &f.choices));
        assert_eq!(explore::replay(&flawed, variant, &choices), Err(f.message.clone()));
        // A different schedule (all earliest-first) does not fail: the replay is what found it.
        assert_eq!(explore::replay(&flawed, variant, &[]), Ok(()));
    }
}

#[test]
fn per_unit_versions_stay_clean() {
    let sound = VersionedRecord { per_unit_versions: true };
    for mode in [Mode::Random, Mode::Pct { depth: 3 }] {
        let e = explore::explore(&sound, mode, 2, clean_budget(), u64::MAX);
        assert!(e.failure.is_none(), "{mode:?}: {:?}", e.failure);
        assert!(e.schedules > 20, "{mode:?} explored only {} schedules", e.schedules);
    }
    let e = explore::explore(&sound, Mode::Dfs { preemptions: 2 }, 2, clean_budget(), u64::MAX);
    assert!(e.failure.is_none(), "dfs: {:?}", e.failure);
}

/// A protocol that is correct only if RMWs are atomic with WRITEs: client A counts with FAA
/// while client B resets the counter with a WRITE of 100; afterwards the counter must be 100 or
/// 101. Under the default memory model the WRITE can land between the FAA's read and write
/// steps and be lost (final 1).
struct ResetCounter {
    memory_model: MemoryModel,
}

impl Scenario for ResetCounter {
    fn config(&self) -> SimConfig {
        SimConfig { memory_model: self.memory_model, ..SimConfig::default() }
    }

    fn build(&self, sim: &mut Sim, phase: &Phase, _variant: u64) -> Judge {
        phase.explore();
        let (a, b) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());
        let (a2, b2) = (a.clone(), b.clone());
        sim.spawn(&a, async move {
            a2.faa(RECORD, 1).await.unwrap();
        });
        sim.spawn(&b, async move {
            b2.post(vec![Request::write(RECORD, 100u64.to_le_bytes().to_vec())]).await.unwrap();
        });
        Box::new(|sim: &Sim, outcome| {
            outcome.map_err(|e| e.to_string())?;
            let v = u64::from_le_bytes(sim.read_memory(RECORD, 8).unwrap().try_into().unwrap());
            if v == 100 || v == 101 { Ok(()) } else { Err(format!("counter is {v}: the reset was lost")) }
        })
    }
}

#[test]
fn a_protocol_needing_atomic_rmw_versus_write_is_flagged_under_the_default() {
    let weak = ResetCounter { memory_model: MemoryModel::default() };
    for mode in [Mode::Random, Mode::Pct { depth: 3 }, Mode::Dfs { preemptions: 2 }] {
        let e = explore::explore(&weak, mode, 3, find_budget(), u64::MAX);
        let f = e.failure.unwrap_or_else(|| panic!("{mode:?} missed the lost reset"));
        assert!(f.message.contains("counter is 1"), "{}", f.message);
        assert_eq!(explore::replay(&weak, f.variant, &f.choices), Err(f.message.clone()));
    }
    // With the switch on, DFS exhausts every schedule and finds nothing.
    let strong = ResetCounter { memory_model: MemoryModel { rmw_atomic_with_writes: true, ..MemoryModel::default() } };
    let e = explore::explore(&strong, Mode::Dfs { preemptions: 2 }, 3, clean_budget(), u64::MAX);
    assert!(e.failure.is_none(), "{:?}", e.failure);
    assert!(e.complete, "the tiny scenario's DFS tree is exhausted ({} schedules)", e.schedules);
}

/// The example index's preset for `mode`: DFS gets the small `pair` preset.
fn example_scenario_for(mode: Mode, plant: Option<&str>, seed: u64) -> IndexScenario<Example> {
    let name = if matches!(mode, Mode::Dfs { .. }) { "pair" } else { "default" };
    let (preset, mut options) = Example::presets().into_iter().find(|(p, _)| p.name == name).unwrap();
    if let Some(bug) = plant {
        Example::plant(&mut options, bug).unwrap();
    }
    IndexScenario::new(preset, options, seed)
}

#[test]
fn the_example_index_is_clean_in_every_mode_and_not_vacuously() {
    for mode in [Mode::Random, Mode::Pct { depth: 3 }, Mode::Dfs { preemptions: 2 }] {
        let scenario = example_scenario_for(mode, None, 7);
        check_index(&scenario, mode, 7, clean_budget(), u64::MAX).assert_clean(&format!("{mode:?}"), 5, true);
    }
}

#[test]
fn each_planted_bug_of_the_example_is_found_by_each_mode() {
    for bug in ["no-lock", "unlock-before-write", "no-checksum"] {
        for mode in [Mode::Random, Mode::Pct { depth: 3 }, Mode::Dfs { preemptions: 2 }] {
            let scenario = example_scenario_for(mode, Some(bug), 11);
            let check = check_index(&scenario, mode, 11, find_budget(), u64::MAX);
            let f = check
                .exploration
                .failure
                .unwrap_or_else(|| panic!("{bug} not found by {mode:?} in {} schedules", check.exploration.schedules));
            // The failing schedule replays to the same verdict.
            let again = example_scenario_for(mode, Some(bug), 11);
            assert_eq!(explore::replay(&again, f.variant, &f.choices), Err(f.message.clone()), "{bug} {mode:?}");
        }
    }
}

#[test]
fn replay_strings_survive_the_command_line() {
    let choices = vec![0, 0, 0, 3, 1, 0, 0, 0, 0, 12];
    assert_eq!(decode_choices(&encode_choices(&choices)).unwrap(), choices);
}

/// The liveness bound: a run that does not end within the preset's step limit is reported as
/// making no progress (here the limit is set far below what the workload needs).
#[test]
fn a_run_without_progress_is_reported() {
    let (mut preset, options) = Example::presets().remove(0);
    preset.step_limit = 150;
    let scenario = IndexScenario::<Example>::new(preset, options, 5);
    let check = check_index(&scenario, Mode::Random, 5, find_budget(), 10);
    let f = check.exploration.failure.expect("the step bound fires");
    assert!(f.message.contains("no progress"), "{}", f.message);
    assert_eq!(explore::replay(&scenario, f.variant, &f.choices), Err(f.message.clone()));
}

/// A lock that is never released: client A takes it and stops; client B waits for it forever
/// (sleeping between attempts). Only the step bound ends the run.
struct AbandonedLock;

impl Scenario for AbandonedLock {
    fn config(&self) -> SimConfig {
        SimConfig { step_limit: Some(20_000), ..SimConfig::default() }
    }

    fn build(&self, sim: &mut Sim, phase: &Phase, _variant: u64) -> Judge {
        phase.explore();
        let (a, b) = (sim.add_client(0).unwrap(), sim.add_client(0).unwrap());
        let (a2, b2) = (a.clone(), b.clone());
        sim.spawn(&a, async move {
            a2.cas(RECORD, 0, 1).await.unwrap();
        });
        sim.spawn(&b, async move {
            b2.sleep(10_000).await;
            while b2.cas(RECORD, 0, 2).await.unwrap() != 0 {
                b2.sleep(1_000).await;
            }
        });
        Box::new(|_: &Sim, outcome| match outcome {
            Err(SimError::StepLimit { steps, .. }) => {
                Err(format!("no progress within {steps} steps: a lock never released"))
            }
            other => other.map_err(|e| e.to_string()),
        })
    }
}

#[test]
fn a_lock_never_released_is_found_as_livelock() {
    for mode in [Mode::Random, Mode::Pct { depth: 3 }, Mode::Dfs { preemptions: 2 }] {
        let e = explore::explore(&AbandonedLock, mode, 9, find_budget(), 50);
        let f = e.failure.unwrap_or_else(|| panic!("{mode:?}: the stuck lock went unnoticed"));
        assert!(f.message.contains("lock never released"), "{}", f.message);
    }
}

/// A spin lock: two clients each take it (at most `SPINS` attempts, waiting between attempts
/// with `yield_now` as the indexes' lock loops do, or with a plain `sleep`), do two more verbs
/// and release it.
struct SpinLock {
    yields: bool,
}

const SPINS: u32 = 40;

impl Scenario for SpinLock {
    fn config(&self) -> SimConfig {
        SimConfig { step_limit: Some(20_000), ..SimConfig::default() }
    }

    fn build(&self, sim: &mut Sim, phase: &Phase, _variant: u64) -> Judge {
        phase.explore();
        let done = Rc::new(RefCell::new(0));
        for id in 1..=2u64 {
            let c = sim.add_client(0).unwrap();
            let (c2, done, yields) = (c.clone(), done.clone(), self.yields);
            let data = RECORD.add(64);
            sim.spawn(&c, async move {
                for _ in 0..SPINS {
                    if c2.cas(RECORD, 0, id).await.unwrap() == 0 {
                        c2.write(data, Buf::from(vec![id as u8; 8])).await.unwrap();
                        c2.read(data, Buf::zeroed(8)).await.unwrap();
                        c2.write(RECORD, Buf::from(0u64.to_le_bytes().to_vec())).await.unwrap();
                        *done.borrow_mut() += 1;
                        return;
                    }
                    if yields {
                        c2.yield_now().await;
                    } else {
                        c2.sleep(1).await;
                    }
                }
            });
        }
        Box::new(move |_: &Sim, outcome| {
            outcome.map_err(|e| e.to_string())?;
            match *done.borrow() {
                2 => Ok(()),
                n => Err(format!("{} client gave up after {SPINS} attempts", 2 - n)),
            }
        })
    }
}

/// PCT runs the highest-priority client; a spinner above the lock holder would spin until its
/// retries run out unless a change point happens to demote it, so PCT reports failed
/// operations it manufactured. A client whose `yield_now` runs drops to the lowest priority:
/// the yielding spinner always gets the lock, and a spinner that only sleeps is still starved.
#[test]
fn pct_demotes_a_yielding_spinner() {
    let mode = Mode::Pct { depth: 2 };
    let starved = explore::explore(&SpinLock { yields: false }, mode, 3, find_budget(), 500);
    let f = starved.failure.expect("PCT starves the holder under a spinner that does not yield");
    assert!(f.message.contains("gave up"), "{}", f.message);
    let fair = explore::explore(&SpinLock { yields: true }, mode, 3, find_budget(), 500);
    assert!(fair.failure.is_none(), "{}", fair.failure.unwrap());
    assert_eq!(fair.schedules, 500);
}

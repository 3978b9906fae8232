//! The test `scripts/mutants.sh` gives cargo-mutants: every checking preset of one index, a
//! fixed number of schedules each, must be clean. A mutant of the index's protocol is killed
//! when some preset finds a violation (or the run panics or hangs past cargo-mutants' timeout).
//!
//! Schedules, not seconds, bound each preset, so a mutant's verdict does not depend on how busy
//! the machine is. Ignored in ordinary test runs: it is a benchmark-style measurement.
//!
//! `DMKIT_MUTANTS_INDEX` names the index, or several separated by commas when they share the
//! mutated code (SMART's module is ART's too: `smart,art`); `DMKIT_MUTANTS_SCHEDULES` (default
//! 2000) the schedules per preset and mode (random, then PCT). `DMKIT_MUTANTS_SWEEP=1` adds the
//! option-space sweep's points (`dmkit check --sweep`): options at their extremes reach code no
//! preset does (HStore's multi-unit blocks), at several times the cost per mutant.

use dmkit_verify::explore::Mode;
use dmkit_verify::registry::{self, CheckRequest};

#[test]
#[ignore = "run by scripts/mutants.sh under cargo-mutants"]
fn every_preset_is_clean() {
    let indexes = std::env::var("DMKIT_MUTANTS_INDEX").expect("DMKIT_MUTANTS_INDEX names the index");
    let schedules: u64 =
        std::env::var("DMKIT_MUTANTS_SCHEDULES").map_or(2000, |s| s.parse().expect("DMKIT_MUTANTS_SCHEDULES"));
    for index in indexes.split(',').map(str::to_string) {
        every_preset_of_one_index_is_clean(index, schedules);
    }
}

fn every_preset_of_one_index_is_clean(index: String, schedules: u64) {
    let mut presets = registry::preset_names(&index).expect("a known index");
    if std::env::var("DMKIT_MUTANTS_SWEEP").is_ok_and(|v| v == "1") {
        presets.extend(registry::sweep_names(&index).expect("a known index"));
    }
    for preset in presets {
        // Required counters that stayed zero in every mode so far: a preset is vacuous only if
        // some counter stays zero over both modes, as `dmkit check` judges it over its modes
        // (RACE's `read-failure` reaches a released split only under PCT).
        let mut never: Option<Vec<&'static str>> = None;
        for mode in [Mode::Random, Mode::Pct { depth: 3 }] {
            let req = CheckRequest {
                index: index.clone(),
                preset: Some(preset.into()),
                config: None,
                clients: None,
                seconds: 3600.0,
                mode: Some(mode),
                seed: 1,
                plant: None,
                replay: None,
                max_schedules: schedules,
                qp_actors: false,
                read_failures: 0,
            };
            let outcome = registry::run_check(&req).expect("a valid request");
            // A failed run (violation, invariant, panic, no progress) reports no vacuity.
            let failed = !outcome.passed && outcome.vacuous.is_empty();
            assert!(!failed, "{index} preset {preset} ({}):\n{}", mode.name(), outcome.report);
            never = Some(match never {
                None => outcome.vacuous,
                Some(zero) => zero.into_iter().filter(|c| outcome.vacuous.contains(c)).collect(),
            });
        }
        // A vacuous result also kills: the mutant broke what the preset exists to exercise.
        let never = never.unwrap_or_default();
        assert!(never.is_empty(), "{index} preset {preset}: required counters stayed zero in every mode: {never:?}");
    }
}

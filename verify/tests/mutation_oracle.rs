//! The test `scripts/mutants.sh` gives cargo-mutants: every checking preset of one index, a
//! fixed number of schedules each, must be clean. A mutant of the index's protocol is killed
//! when some preset finds a violation (or the run panics or hangs past cargo-mutants' timeout).
//!
//! Schedules, not seconds, bound each preset, so a mutant's verdict does not depend on how busy
//! the machine is. Ignored in ordinary test runs: it is a benchmark-style measurement.
//!
//! `DMKIT_MUTANTS_INDEX` names the index; `DMKIT_MUTANTS_SCHEDULES` (default 2000) the
//! schedules per preset and mode (random, then PCT).

use dmkit_verify::explore::Mode;
use dmkit_verify::registry::{self, CheckRequest};

#[test]
#[ignore = "run by scripts/mutants.sh under cargo-mutants"]
fn every_preset_is_clean() {
    let index = std::env::var("DMKIT_MUTANTS_INDEX").expect("DMKIT_MUTANTS_INDEX names the index");
    let schedules: u64 =
        std::env::var("DMKIT_MUTANTS_SCHEDULES").map_or(2000, |s| s.parse().expect("DMKIT_MUTANTS_SCHEDULES"));
    let presets = registry::preset_names(&index).expect("a known index");
    for preset in presets {
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
            // A vacuous result (a required counter at zero) also kills: the mutant broke
            // what the preset exists to exercise.
            assert!(outcome.passed, "{index} preset {preset} ({}):\n{}", mode.name(), outcome.report);
        }
    }
}

//! The tutorial's index (`docs/new-index.md`): sequences against the specification, clean
//! checks in every explorer mode, and each planted bug found, each by random and by PCT
//! exploration, with a replayable schedule.

use dmkit_indexes::IndexKind;
use dmkit_indexes::checking::Checked;
use dmkit_indexes::probe::{
    FLOOR_GROUPS_PER_NODE, OVERWRITE_ANY_LOSS, Probe, ProbeOptions, REUSE_TOMBSTONES, SKIP_LOST_CLAIM,
};
use dmkit_indexes::spec::{Op, Outcome, SpecMap};
use dmkit_indexes::{IndexError, PlantedBug};
use dmkit_verify::explore::{self, Mode};
use dmkit_verify::harness::{IndexScenario, check_index, run_sequence_checked};
use proptest::prelude::*;
use std::time::Duration;

fn ci() -> bool {
    std::env::var("CI").is_ok()
}

fn scenario(preset: &str, plant: Option<PlantedBug>, seed: u64) -> IndexScenario<Probe> {
    IndexScenario::from_preset(Some(preset), None, plant.map(|p| p.name), seed).unwrap()
}

#[test]
fn clean_in_every_mode_and_not_vacuously() {
    let budget = Duration::from_secs(if ci() { 3 } else { 10 });
    for (preset, mode) in [
        ("default", Mode::Random),
        ("default", Mode::Pct { depth: 3 }),
        ("spread", Mode::Pct { depth: 3 }),
        ("claim", Mode::Random),
        ("pair", Mode::Dfs { preemptions: 2 }),
    ] {
        check_index(&scenario(preset, None, 5), mode, 5, budget, u64::MAX).assert_clean(
            &format!("{preset} {mode:?}"),
            5,
            true,
        );
    }
}

#[test]
fn each_planted_bug_is_found_and_replays() {
    let budget = Duration::from_secs(if ci() { 20 } else { 60 });
    for bug in [REUSE_TOMBSTONES, SKIP_LOST_CLAIM, OVERWRITE_ANY_LOSS] {
        for mode in [Mode::Random, Mode::Pct { depth: 3 }] {
            let check = check_index(&scenario("default", Some(bug), 11), mode, 11, budget, u64::MAX);
            let f = check.exploration.failure.unwrap_or_else(|| {
                panic!("{} not found by {mode:?} in {} schedules", bug.name, check.exploration.schedules)
            });
            let again = scenario("default", Some(bug), 11);
            assert_eq!(explore::replay(&again, f.variant, &f.choices), Err(f.message.clone()), "{} {mode:?}", bug.name);
        }
    }
}

/// An address slip that changes no answer is found all the same: the simulator counts the verbs
/// outside allocated memory, and the checker judges the run by them. Clean unplanted (the
/// `groups` preset's 7 groups over 2 nodes are what make the floor differ from the share).
#[test]
fn an_address_past_the_allocation_is_found() {
    let budget = Duration::from_secs(if ci() { 3 } else { 10 });
    check_index(&scenario("groups", None, 3), Mode::Random, 3, budget, u64::MAX).assert_clean("groups", 3, true);
    let check = check_index(&scenario("groups", Some(FLOOR_GROUPS_PER_NODE), 3), Mode::Random, 3, budget, u64::MAX);
    let f = check.exploration.failure.expect("a verb past node 0's allocation");
    assert!(f.message.contains("addressed unallocated memory"), "{}", f.message);
    let again = scenario("groups", Some(FLOOR_GROUPS_PER_NODE), 3);
    assert_eq!(explore::replay(&again, f.variant, &f.choices), Err(f.message.clone()));
}

#[test]
fn every_plant_is_tested_here() {
    let names: Vec<&str> = Probe::planted_bugs().iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [REUSE_TOMBSTONES.name, SKIP_LOST_CLAIM.name, OVERWRITE_ANY_LOSS.name, FLOOR_GROUPS_PER_NODE.name]
    );
    assert!(Probe::presets().iter().any(|(p, _)| p.name == "pair"), "DFS above needs the pair preset");
}

fn ops(keys: u8) -> impl Strategy<Value = Vec<Op>> {
    let key = (0..keys).prop_map(|k| vec![k; 1 + (k % 3) as usize]);
    let value = prop::collection::vec(any::<u8>(), 0..80);
    let op = prop_oneof![
        key.clone().prop_map(|key| Op::Search { key }),
        (key.clone(), value.clone()).prop_map(|(key, value)| Op::Insert { key, value }),
        (key.clone(), value).prop_map(|(key, value)| Op::Update { key, value }),
        key.prop_map(|key| Op::Delete { key }),
    ];
    prop::collection::vec(op, 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if ci() { 32 } else { 128 }, ..ProptestConfig::default() })]

    /// One client against the specification, on tables of 1 to 20 slots (the checking presets
    /// cover several memory nodes): full tables and over-long values are errors the model does
    /// not have, so the model follows only the operations the index accepted. The invariant
    /// walk then holds on what is left.
    #[test]
    fn sequences_match_the_specification(slots in 1u64..20, ops in ops(12)) {
        let options = ProbeOptions { slots, max_value_bytes: 64, chunk_bytes: 1 << 16, ..ProbeOptions::default() };
        let (got, _, walk) = run_sequence_checked::<Probe>(&options, &ops);
        prop_assert!(walk.is_ok(), "{:?}", walk);
        prop_assert_eq!(got.len(), ops.len());
        let mut model = SpecMap::new();
        for (op, got) in ops.iter().zip(&got) {
            if matches!(got, Outcome::Failed(IndexError::Full | IndexError::ValueTooLong { .. })) {
                continue;
            }
            prop_assert_eq!(got, &model.apply(op, false), "{:?}", op);
        }
    }
}

/// The walk reports each broken invariant: a second slot for a key, an empty slot before a
/// key's own, a fingerprint that is not the key's.
#[test]
fn the_invariant_walk_catches_each_corruption() {
    use dmkit_indexes::Index;
    use dmkit_indexes::probe::layout::{self, Superblock};
    use dmkit_sim::{Sim, SimConfig};
    use std::sync::Arc;

    let options = ProbeOptions { slots: 8, chunk_bytes: 1 << 16, ..ProbeOptions::default() };
    let mut sim = Sim::new(SimConfig::default()).unwrap();
    let c = sim.add_client(0).unwrap();
    let mut h = Probe::open(&options, Arc::new(Probe::node_state(&options, sim.caps())), c.clone());
    let (o, c2) = (options.clone(), c.clone());
    sim.spawn(&c, async move {
        Probe::create(&o, &c2).await.unwrap();
        // Homes in 8 slots: keys 0 and 7 share slot 0, the others have their own.
        for k in [0u64, 1, 2, 3, 4, 7] {
            h.insert(&k.to_be_bytes(), b"v").await.unwrap();
        }
        h.delete(&0u64.to_be_bytes()).await.unwrap();
    });
    sim.run().unwrap();
    let report = Probe::check_invariants(&options, &sim).unwrap();
    assert_eq!((report.items, report.structures["tombstones"]), (5, 1));

    let sb =
        Superblock::decode(&sim.read_memory(layout::superblock_addr(), layout::superblock_bytes(1)).unwrap()).unwrap();
    let word_at = |sim: &Sim, slot: u64| {
        let addr = sb.slot_addr(slot);
        (addr, u64::from_le_bytes(sim.read_memory(addr, 8).unwrap().try_into().unwrap()))
    };
    let words: Vec<u64> = (0..8).map(|s| word_at(&sim, s).1).collect();
    let restore = |sim: &mut Sim| {
        for (s, w) in words.iter().enumerate() {
            sim.write_memory(word_at(sim, s as u64).0, &w.to_le_bytes()).unwrap();
        }
        assert!(Probe::check_invariants(&options, sim).is_ok());
    };
    // The key each slot holds, read before anything is corrupted.
    let keys: Vec<Option<Vec<u8>>> = (0..8)
        .map(|s| {
            (words[s] != 0).then(|| {
                let (addr, len) = layout::block_of(sb.node_of(s as u64), words[s]);
                layout::decode_block(&sim.read_memory(addr, len).unwrap()).unwrap().0.to_vec()
            })
        })
        .collect();

    // A key's word copied into the first empty slot after its own: the key has two slots.
    let empty = (0..8).find(|&s| words[s as usize] == 0).expect("6 keys in 8 slots leave room");
    let before = (1..8).map(|d| (empty + 8 - d) % 8).find(|&s| words[s as usize] != 0).unwrap();
    sim.write_memory(word_at(&sim, empty).0, &words[before as usize].to_le_bytes()).unwrap();
    assert!(Probe::check_invariants(&options, &sim).unwrap_err().contains("also has slot"));
    restore(&mut sim);

    // A key not in its home slot: empty its home, and a search would stop short of it.
    let (slot, k) = (0..8u64)
        .filter_map(|s| keys[s as usize].clone().map(|k| (s, k)))
        .find(|(s, k)| sb.home(k).0 != *s)
        .expect("key 7 is not in its home");
    let home = sb.home(&k).0;
    sim.write_memory(word_at(&sim, home).0, &0u64.to_le_bytes()).unwrap();
    assert!(
        Probe::check_invariants(&options, &sim).unwrap_err().contains("past the empty slot"),
        "key {k:?} at {slot}"
    );
    restore(&mut sim);

    // One fingerprint bit flipped.
    sim.write_memory(word_at(&sim, slot).0, &(words[slot as usize] ^ (1 << 60)).to_le_bytes()).unwrap();
    assert!(Probe::check_invariants(&options, &sim).unwrap_err().contains("fingerprint"));
}

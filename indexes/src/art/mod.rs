//! # ART on disaggregated memory: the SMART paper's baseline (digest §3.11)
//!
//! The adaptive radix tree ported to DM the way the SMART paper's authors did for their
//! comparison: ART's node types 4/16/48/256 with pessimistic headers, **ROWEX** — an insert
//! locks every internal node it visits, through Sherman's hierarchical lock (on-chip lock words
//! and the local lock table with hand-over) — and **out-of-place leaf updates** (RCU: write a
//! new leaf, CAS the parent slot, clear the old leaf's valid byte), which move leaves and so
//! invalidate other compute nodes' cached slots. The same compute-node radix cache as SMART.
//!
//! It is SMART's code with the factor analysis's switches off (the `art` configuration of
//! [`crate::smart::config`], as the artifact builds both from one source with flags), under
//! its own name so that experiments and checks can name it: a [`Configuration`] of SMART with
//! its own configurations, race handlers, plants and presets. What is not modelled: 1-bit locks
//! (the lock words are 64-bit, as Sherman's).
//!
//! ## The update hand-over, and why YCSB A collapsed without it
//!
//! The artifact serialises same-key out-of-place updates on each compute node through a local
//! ticket lock and hands the winner's result to the writers queued behind it
//! (`TREE_TEST_HOCL_HANDOVER`, on in every build without write combining). dmkit models it as a
//! window of RDWC's write table whose late writers queue
//! ([`crate::smart::SmartOptions::update_handover`], [`crate::common::rdwc`]): a writer is
//! combined only if it joined before the window closed, which is before the slot CAS; the
//! artifact's hand-over until the winner's *release* is the planted bug `late-handover`.
//!
//! Without the hand-over (dmkit before 2026-11-28), every client raced every other's CAS on a
//! hot key and a loser retried at once: under YCSB A (Zipfian 0.99, 1 M keys, 16 CNs x 8
//! clients) 3 slot CASes were lost per update, updates' p99 reached 3.6 ms, and throughput fell
//! from 7.4 to 1.3 Mops/s within 5 ms as closed-loop clients piled up on the hottest keys (a
//! client that reached one stayed for milliseconds). With it, no CAS is lost among one node's
//! clients, at most 16 race per key, and the same run gives 14 Mops/s (README, the main job).
//!
//! What drifts, and why it is the model's honest answer: YCSB A starts 4-10% above where it
//! settles and falls over its first 100-200 ms. Between 30 and 300 ms, stale routes per
//! operation rise from 0.25 to 0.37 and READs per operation from 2.00 to 2.37, while lost
//! CASes, hand-overs and cache hits per operation stay put. Runs start with every compute
//! node's cache warmed from the loaded image, so every cached slot is fresh; an out-of-place
//! update moves a leaf and makes the other nodes' cached slots of it stale until they next use
//! it. Hot keys reach their equilibrium staleness at once, but under a Zipfian the tail of
//! rarely updated keys keeps adding stale slots for a while. A cache warmed by running the
//! workload, as on hardware, would start nearer that equilibrium (not built). The drift is too
//! slow for a short window to see, and its tail too small against the noise of five ticks for
//! MSER-5 to cut: until 2026-12-02 the three runs of SMART's Fig. 14 ran to the 400 ms cap
//! flagged as trending (13.0, 19.5 and 19.9 Mops/s at 128, 256 and 512 clients), and in
//! 2026-11-30's `reproduce all` (f99920f) the 256-client point had passed the test after 9.6 ms
//! at 21.3 Mops/s, the flat start. Since the steady-state analysis cuts a trending run's warm-up
//! a second time over coarser groups (experiments/src/measure.rs, step 2) and the cap is 1 s,
//! all three converge: 12.908 ± 0.031, 19.387 ± 0.035 and 19.907 ± 0.102 Mops/s, cut at 114, 82
//! and 44 ms and stopped at 711, 445 and 445 ms (4.12-4.25 round trips, 2.43-2.50 READs per
//! operation; 73fa43f, whose second cut must also halve the slope per tick); run to a 2 s cap with the first cut alone, the 256- and 512-client runs gave
//! 19.414 ± 0.085 and 19.907 ± 0.102, and the 128-client run converged only at 1.96 s, on 12.889
//! ± 0.054.
//!
//! YCSB LOAD at 1 M keys is a reduced-scale artifact, and the mechanism is known. With fresh
//! hashed keys after 1 M loaded (16 CNs x 24 clients), throughput falls from 11 to 2.8 Mops/s
//! within 50 ms and stays there for about 300 ms, with 2.2 failed lock CASes per insert; then it
//! recovers, to 16-17 Mops/s by 1 s, as the switches below run out (SMART's Fig. 18 at the 1 s
//! cap of 2026-12-02: not steady, its second half 15.5 ± 2.1). Counted by the depth of
//! the node locked (an instrumented build, 40 ms): 11,571 inserts missed the cache and every one
//! of them locked the root, failing 367,607 CASes on it (32 per acquisition), while the 262,047
//! that hit locked a level-2 node and failed 2,848 in all. Why they miss: 1 M hashed 8-byte keys
//! put ART's level-2 nodes (65,536 of them) at 15.3 children on average, right at the NODE_16
//! limit, so a LOAD switches them to NODE_48 by the thousand; a type switch changes the type
//! bits of the parent's slot, so every compute node's cached snapshot of the level-1 parent
//! fails its type check and is dropped (`type_stale_read`, `cache_invalidated`), and the next
//! inserts under that parent start at the root, which is never cached (nor in the artifact).
//! Insert traversals lock every node they visit (ROWEX with HOCL, as the artifact: a miss there
//! locks a null address and then the root, no better), so those inserts queue on one lock word;
//! the queue delays the traversal that would cache the level-1 node again, so more inserts miss:
//! a convoy. Not the lock table: 1-bit-like lock words (a table of 2^20 words instead of 2^14,
//! on a profile with 8 MiB of device memory) gave the same series (4.16 against 4.18 Mops/s).
//! At 8 M keys the level-2 nodes are NODE_256 and stay so: the same LOAD runs flat at 17.1
//! Mops/s for 150 ms with no cache miss and 0.017 failed lock CASes per insert (`dmkit run
//! --index art --workload load --keys 8000000 --compute-nodes 16 --memory-nodes 2
//! --threads-per-cn 12 --coroutines 2 --duration-us 150000 --timeseries-us 5000`). The paper's
//! 60 M keys are further still from the boundary. So SMART's Fig. 18 LOAD ratio at 1 M keys
//! (README) measures this boundary, not ART against SMART.

pub mod presets;

use crate::configured::{Configuration, Configured};
use crate::registry::RunShape;
use crate::smart::{self, Smart, SmartOptions};
use crate::{IndexKind, PlantedBug, RaceHandler};

/// ART's [`IndexKind`]: SMART in its `art` configuration, under its own name.
pub type Art = Configured<ArtConfig>;

/// What ART has of its own ([`Configuration`]).
#[derive(Debug)]
pub struct ArtConfig;

/// SMART's options in the `art` configuration, for `key_bytes`-byte keys and `value_bytes`-byte
/// values.
pub fn options(key_bytes: u32, value_bytes: u32) -> SmartOptions {
    SmartOptions::named(Art::NAME, key_bytes, value_bytes).expect("the art configuration exists")
}

/// SMART's plant of the same name, for ART's cache.
pub use crate::smart::NO_REVERSE_CHECK;
// ART's own plants: SMART's handle, which ART runs, consults them.
pub const RETIRE_AFTER_PUBLISH: PlantedBug = PlantedBug {
    name: "retire-after-publish",
    description: "an out-of-place update clears the old leaf's valid byte after the slot CAS, unsignaled (the artifact): a stale cached slot still reads the old value after a newer update returned",
};
pub const LATE_HANDOVER: PlantedBug = PlantedBug {
    name: "late-handover",
    description: "an update queued behind a same-key update of its compute node returns with that update's outcome instead of running its own (the artifact's hand-over until the winner's release): one that queued after the winner's CAS took effect is lost",
};
pub const NO_NODE_LOCKS: PlantedBug = PlantedBug {
    name: "no-node-locks",
    description: "inserts visit internal nodes without their ROWEX lock: two header splits of one node race, and the loser's trim finds the header changed under what should have been its lock (reported as corruption; SMART, lock-free, retries there instead)",
};
const PLANTS: [PlantedBug; 4] = [NO_REVERSE_CHECK, RETIRE_AFTER_PUBLISH, LATE_HANDOVER, NO_NODE_LOCKS];

impl Configuration for ArtConfig {
    type Of = Smart;
    const NAME: &'static str = "art";
    /// 147 B at 10 M keys (`dmkit bench-load`, 2026-11-27) but about 230 at 60 M (`dmkit run
    /// --index smart --workload a --keys 60000000 --compute-nodes 16 --memory-nodes 2`: 14 GB
    /// loaded, 2026-11-28): from 10 M keys on, the third level's nodes fill in, each a 256-slot
    /// allocation with a few lines written. The larger, as the estimate's basis.
    const HOST_BYTES_PER_ITEM: u64 = 240;

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(SmartOptions, String), String> {
        let config = if config == "default" { Self::NAME } else { config };
        if config != Self::NAME {
            return Err(format!("index art has one configuration, 'art' (asked for '{config}'); try --index smart"));
        }
        let mut options = SmartOptions::named(config, shape.key_bytes as u32, shape.value_bytes.max(1) as u32)?;
        options.memory_nodes = shape.memory_nodes;
        if let Some(bytes) = shape.cache_bytes {
            options.cache_bytes = bytes;
        }
        options.validate().map_err(|e| format!("index {}, configuration {config}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &smart::ART_RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut SmartOptions, bug: &str) -> Result<(), String> {
        smart::plant(o, bug, Self::NAME, &PLANTS)
    }
}

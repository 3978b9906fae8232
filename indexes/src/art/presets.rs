//! Checking presets of ART, SMART's baseline configuration: SMART's presets with ART's
//! counters.

use crate::Counters;
use crate::IndexKind;
use crate::art::Art;
use crate::checking::{Checked, FaultPlan, Preset, point, preset_named};
use crate::common::change::{RDWC_COMBINED, RDWC_WRITE_QUEUED};
use crate::common::hocl::LOCK_HANDED_OVER;
use crate::smart::presets::{long, smart_long_key, smart_presets, wide};
use crate::smart::{HEADER_SPLIT, LEAF_MOVED, LEAF_SPLIT, RCU_LOST, RCU_UPDATE, SmartOptions, TYPE_SWITCH};

impl Checked for Art {
    fn presets() -> Vec<(Preset, SmartOptions)> {
        smart_presets(Art::NAME)
            .into_iter()
            .map(|(mut p, o)| {
                match p.name {
                    "local" => {
                        p.required_counters =
                            &[LOCK_HANDED_OVER, RCU_UPDATE, LEAF_SPLIT, RDWC_WRITE_QUEUED, RDWC_COMBINED]
                    }
                    // No combining in ART: the failed READs meet its locks and splits instead.
                    "read-failure" => p.required_counters = &[LOCK_HANDED_OVER, LEAF_SPLIT],
                    // The node locks serialize the switch and the split (`switch_type`).
                    "switch-under-split" => p.required_counters = &[TYPE_SWITCH, HEADER_SPLIT, LOCK_HANDED_OVER],
                    // A compute node a client: no local hand-over, the lock word contended.
                    "low-ids" => p.required_counters = &[TYPE_SWITCH, HEADER_SPLIT, Counters::LOCK_FAILURES],
                    _ => {}
                }
                (p, o)
            })
            .collect()
    }

    fn faults(preset: &str, _: &SmartOptions) -> FaultPlan {
        FaultPlan::read_failure_preset(preset, 1)
    }

    fn sweep() -> Vec<(Preset, SmartOptions)> {
        let presets = Self::presets();
        let (base, o) = preset_named(&presets, "default");
        let (local, lo) = preset_named(&presets, "local");
        let with = |o: &SmartOptions, f: &dyn Fn(&mut SmartOptions)| {
            let mut o = o.clone();
            f(&mut o);
            o
        };
        let locks = &[Counters::LOCK_FAILURES, LEAF_SPLIT, HEADER_SPLIT, TYPE_SWITCH][..];
        vec![
            // One lock word per memory node: every internal node shares it, so inserts on
            // unrelated nodes serialize and hand it over.
            point(
                "sweep-lock-table-1",
                Preset { required_counters: locks, ..base.clone() },
                with(&o, &|o| o.lock_table_bytes = 8),
            ),
            // One lock word on one compute node with four clients: hand-overs of the word
            // between inserts into different nodes.
            point(
                "sweep-lock-table-1-local",
                Preset { required_counters: &[LOCK_HANDED_OVER, LEAF_SPLIT], ..local.clone() },
                with(&lo, &|o| o.lock_table_bytes = 8),
            ),
            // No hand-over (a streak of one): every local waiter takes the word by CAS itself.
            point(
                "sweep-handover-1",
                Preset { required_counters: &[RCU_UPDATE, LEAF_SPLIT, Counters::LOCK_FAILURES], ..local.clone() },
                with(&lo, &|o| o.max_handover = 1),
            ),
            // No update hand-over (the option off): one node's same-key updates race each
            // other's slot CAS, as across nodes.
            point(
                "sweep-no-update-handover",
                Preset { required_counters: &[RCU_UPDATE, RCU_LOST], ..local.clone() },
                with(&lo, &|o| o.update_handover = false),
            ),
            // Unbounded hand-over on two compute nodes of two clients each: the other node's
            // inserts wait while one node's clients pass the lock among themselves.
            point(
                "sweep-handover-max",
                Preset { clients: 4, required_counters: &[LOCK_HANDED_OVER, Counters::LOCK_FAILURES], ..base.clone() },
                with(&o, &|o| o.max_handover = u32::MAX),
            ),
            // No radix cache: every insert locks its way down from the root.
            point(
                "sweep-cache-0",
                Preset { required_counters: locks, ..base.clone() },
                with(&o, &|o| o.cache_bytes = 0),
            ),
            // ART's types 4/16/48/256 on one node filled past 16 children: the switch to
            // NODE_48 under the node lock, raced by lock-free readers.
            point("sweep-wide", wide(&base), o.clone()),
            // Out-of-place updates of 4 KiB values: every update writes a 66-line leaf and
            // retires the old one.
            point(
                "sweep-value-4096",
                Preset {
                    value_bytes: 4096,
                    step_limit: 4_000_000,
                    required_counters: &[RCU_UPDATE, LEAF_SPLIT, LEAF_MOVED],
                    ..base.clone()
                },
                with(&o, &|o| o.value_bytes = 4096),
            ),
            // 32-byte keys with long shared prefixes: inserts lock a chain of nodes one by one.
            point(
                "sweep-keys-32",
                Preset { keys: 16, key_of: smart_long_key::<24>, step_limit: 1_000_000, ..base.clone() },
                with(&o, &|o| o.key_bytes = 32),
            ),
            // One attempt per operation: a writer that loses a lock or CAS race gives up.
            point(
                "sweep-retries-1",
                Preset { required_counters: &[LEAF_SPLIT, Counters::LOCK_FAILURES], ..long(&base) },
                with(&o, &|o| o.max_retries = 1),
            ),
            // Long runs on the default shape and on one node filled to its switch.
            point("sweep-long", long(&base), o.clone()),
            point("sweep-long-wide", long(&wide(&base)), o),
        ]
    }
}

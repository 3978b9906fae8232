//! What `dmkit check --index probe` explores: tables of a few slots, so that every key's probe
//! sequence runs into others', and mixes that claim, overwrite and delete.

use super::{CLAIM_LOST_OTHER_KEY, CLAIM_LOST_SAME_KEY, Probe, ProbeOptions, WRITE_LOST, WRITE_OVERWRITTEN};
use crate::Counters;
use crate::checking::{Checked, FaultPlan, Mix, Preset, ScanBounds, be_key, point};

/// Options for a table of `slots` slots over `memory_nodes` memory nodes, with small chunks.
fn tiny(slots: u64, memory_nodes: u16) -> ProbeOptions {
    ProbeOptions {
        slots,
        memory_nodes,
        max_key_bytes: 8,
        max_value_bytes: 48,
        chunk_bytes: 1 << 16,
        max_retries: 200,
        ..ProbeOptions::default()
    }
}

/// Keys of 1 KiB, the most the options accept: 1016 zero bytes, then [`be_key`].
fn max_key(k: u64) -> Vec<u8> {
    let mut key = vec![0; 1016];
    key.extend(be_key(k));
    key
}

impl Checked for Probe {
    fn presets() -> Vec<(Preset, ProbeOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 1,
            clients: 3,
            ops_per_client: 5,
            keys: 4,
            key_of: be_key,
            value_bytes: 48,
            preload: 1,
            mix: Mix { search: 30, insert: 35, update: 15, delete: 20, scan: 0 },
            scan_limit: 0,
            scan_bounds: ScanBounds::From,
            required_counters: &[CLAIM_LOST_OTHER_KEY, WRITE_OVERWRITTEN, WRITE_LOST],
            step_limit: 200_000,
            low_client_ids: false,
        };
        vec![
            // Four keys in five slots. Keys 0 and 1 share home 3, key 3's is 4: with key 0
            // preloaded at 3, inserts of keys 1 and 3 race for slot 4, and sequences wrap.
            (base.clone(), tiny(5, 1)),
            // Inserts of two keys into an empty table: both clients of a pair reach the same
            // empty slot, and the loser must find its own key there.
            (
                Preset {
                    name: "claim",
                    clients: 4,
                    keys: 2,
                    preload: 0,
                    mix: Mix { search: 20, insert: 60, update: 0, delete: 20, scan: 0 },
                    required_counters: &[CLAIM_LOST_SAME_KEY],
                    ..base.clone()
                },
                tiny(3, 1),
            ),
            // Two memory nodes: a sequence leaves a group on one node for the next on the other,
            // and its blocks follow it.
            (Preset { name: "spread", memory_nodes: 2, keys: 10, preload: 6, clients: 4, ..base.clone() }, tiny(12, 2)),
            // Several groups on each memory node, unevenly (7 groups: 4 on node 0, 3 on node 1),
            // and sixteen keys whose homes fall in six of them: a group's place on its node and
            // each node's share of groups matter. Found by the mutation run (README).
            (
                Preset {
                    name: "groups",
                    memory_nodes: 2,
                    keys: 16,
                    preload: 8,
                    required_counters: &[Counters::CAS_FAILURES],
                    ..base.clone()
                },
                tiny(56, 2),
            ),
            // Three READ failures the explorer places anywhere: a write that fails midway must
            // leave no half-published block behind.
            (Preset { name: "read-failure", ..base.clone() }, tiny(5, 1)),
            // Small enough for DFS: two clients, three operations, two keys in two slots.
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    preload: 1,
                    mix: Mix { search: 30, insert: 40, update: 10, delete: 20, scan: 0 },
                    required_counters: &[Counters::CAS_FAILURES],
                    step_limit: 100_000,
                    ..base.clone()
                },
                tiny(2, 1),
            ),
        ]
    }

    fn sweep() -> Vec<(Preset, ProbeOptions)> {
        let (base, _) = Self::presets().swap_remove(0);
        vec![
            // One slot: one key ever, every other insert answers Full.
            point(
                "sweep-slots-1",
                Preset { required_counters: &[WRITE_OVERWRITTEN, WRITE_LOST], ..base.clone() },
                tiny(1, 1),
            ),
            // The largest blocks the options accept: 1 KiB keys, 4 KiB values, 81 lines a block.
            // In three slots keys 0, 1 and 2 share home 0 (key 3's is 2): a full table too.
            point(
                "sweep-block-max",
                Preset { key_of: max_key, value_bytes: 4096, step_limit: 2_000_000, ..base.clone() },
                ProbeOptions { max_key_bytes: 1024, max_value_bytes: 4096, ..tiny(3, 1) },
            ),
            // A key only in its home slot (a direct-mapped table), or within two of it: inserts
            // answer Full while the table has room, and searches stop at the bound.
            point(
                "sweep-probe-1",
                Preset { required_counters: &[WRITE_OVERWRITTEN], ..base.clone() },
                ProbeOptions { max_probe: 1, ..tiny(5, 1) },
            ),
            point("sweep-probe-2", base.clone(), ProbeOptions { max_probe: 2, ..tiny(5, 1) }),
            // One attempt per write: a write that loses its CAS gives up.
            point("sweep-retries-1", base.clone(), ProbeOptions { max_retries: 1, ..tiny(5, 1) }),
            // Four memory nodes, a group of 8 slots on each: the homes of keys 0..12 fall in all
            // four groups, so blocks are carved on every node.
            point(
                "sweep-nodes-4",
                Preset {
                    memory_nodes: 4,
                    keys: 12,
                    preload: 4,
                    required_counters: &[Counters::CAS_FAILURES],
                    ..base.clone()
                },
                tiny(32, 4),
            ),
            // Long runs: 4 clients x 20 operations on 5 keys in 5 slots.
            point(
                "sweep-long",
                Preset { clients: 4, ops_per_client: 20, keys: 5, step_limit: 2_000_000, ..base },
                tiny(5, 1),
            ),
        ]
    }

    fn faults(preset: &str, options: &ProbeOptions) -> FaultPlan {
        FaultPlan::read_failure_preset(preset, options.memory_nodes)
    }

    fn gives_up_by_design(preset: &str, _: &ProbeOptions) -> bool {
        // One CAS attempt per write: losing a race is giving up, by the preset's choice.
        preset == "sweep-retries-1"
    }
}

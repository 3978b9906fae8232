//! What `dmkit check` explores for an index, as data the index owns: its presets (how small a
//! run is, which operations, which counters must move), the option-space sweep, the faults a
//! preset injects, and its named configurations applied to a preset.
//!
//! An index implements [`Checked`] in its own folder (`src/<name>/presets.rs`); the checker
//! (`dmkit-verify`) runs the presets, and the registry line makes `dmkit check` know them.

use crate::IndexKind;
use dmkit_rdma::NodeId;

/// Percentages of each operation (they need not sum to 100; they are weights).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    pub search: u32,
    pub insert: u32,
    pub update: u32,
    pub delete: u32,
    pub scan: u32,
}

/// A checking preset.
#[derive(Clone, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub compute_nodes: u16,
    pub memory_nodes: u16,
    pub clients: u32,
    pub ops_per_client: u32,
    /// Keys are `key_of(0..keys)`.
    pub keys: u64,
    /// Key number to key bytes: [`be_key`] (8-byte big-endian) unless an index needs keys
    /// with shape (SMART's shared prefixes).
    pub key_of: fn(u64) -> Vec<u8>,
    /// Bytes of each written value (at least 8): long enough to span atomicity units, so that
    /// a torn read shows as a value nobody wrote.
    pub value_bytes: usize,
    /// Keys inserted before the explored part.
    pub preload: u64,
    pub mix: Mix,
    pub scan_limit: usize,
    /// How scans choose their bounds and limits.
    pub scan_bounds: ScanBounds,
    /// Counters that must be non-zero over an exploration: `retries`, `lock_failures`,
    /// `cas_failures`, or an index event name.
    pub required_counters: &'static [&'static str],
    /// Steps after which a run is reported as making no progress.
    pub step_limit: u64,
    /// The checking clients take client ids `0..clients`, as a run's workload clients do on
    /// hardware (`dmkit run --backend rdma` numbers them from 0), instead of the ids after the
    /// creator's (0) and the services' workers' (`1..=workers` in the simulator, which starts
    /// the services when the creator first runs). An index that derives a word from its client
    /// id (a lock owner `id + 1`) meets ids 0 and 1 only this way. Off in most presets: it
    /// changes every client's id, and so its random stream and every schedule's numbering.
    pub low_client_ids: bool,
}

/// How a preset's scans choose their bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanBounds {
    /// `[key, unbounded)` from a preset key, `scan_limit` pairs at most.
    From,
    /// Each end drawn from included, excluded and unbounded, the ends from the preset's keys (so
    /// some ranges are empty and some end before keys the index holds), and a limit from 0 to
    /// `scan_limit + 2`. With `other_lengths`, a bound is sometimes a key without its last byte
    /// or with a 0xFF byte appended (for indexes whose scans take bounds of any length): bounds
    /// between keys, and bounds that are a prefix of keys.
    Shapes { other_lengths: bool },
}

/// The `scan-shapes` preset of an index with scans: `base` with a write-heavy mix, 30% of it
/// scans of every shape ([`ScanBounds::Shapes`]), so that bounds meet splits.
pub fn scan_shapes_preset(base: &Preset, other_lengths: bool, required_counters: &'static [&'static str]) -> Preset {
    Preset {
        name: "scan-shapes",
        mix: Mix { search: 15, insert: 40, update: 10, delete: 5, scan: 30 },
        scan_bounds: ScanBounds::Shapes { other_lengths },
        required_counters,
        ..base.clone()
    }
}

/// An index the checker knows presets for.
pub trait Checked: IndexKind {
    /// Presets with the options each uses; the first is the default.
    fn presets() -> Vec<(Preset, Self::Options)>;

    /// The option-space sweep: presets that each take one option the index accepts (a bucket,
    /// leaf or span size, a neighbourhood, a lease, a retry bound) to an extreme, with the
    /// structure changes it affects, or run more operations per client so that rare
    /// combinations are reached. Not run by `--coverage` or the tests; `dmkit check --sweep`
    /// runs them all, and `--preset` finds them by name. Names start with `sweep-`.
    fn sweep() -> Vec<(Preset, Self::Options)> {
        Vec::new()
    }

    /// Faults a preset injects (READ failures, crashes of server nodes for an index with
    /// services); none by default. In a checking run a fault is a step like any other: the
    /// explorer chooses when it happens, and a restart comes a few microseconds of virtual time
    /// after the crash.
    fn faults(preset: &str, options: &Self::Options) -> FaultPlan {
        let _ = (preset, options);
        FaultPlan::default()
    }

    /// Events the index counts when it abandons work that a checking run gives it no cause to
    /// abandon: a recovery that failed although only one node crashed (HStore's servers give up
    /// a recovery whose peer is down too, and do not retry it). Any of them in a run is a
    /// violation: an abandoned recovery leaves every later operation failing with an error of
    /// unknown effect, which a linearizability check alone accepts.
    fn abandoned() -> &'static [&'static str] {
        &[]
    }

    /// Whether a preset's operations may give up under a fair schedule with no fault (see
    /// [`IndexScenario::fair_schedule`]): a liveness limit of the configuration the preset chose
    /// on purpose, which the implementation states. False (the default): such a give-up is a
    /// violation.
    fn gives_up_by_design(preset: &str, options: &Self::Options) -> bool {
        let _ = (preset, options);
        false
    }

    /// Replaces a preset's options with the index's named configuration `config`, keeping what
    /// the preset needs (small nodes, key and value sizes).
    fn configure(options: &mut Self::Options, config: &str) -> Result<(), String> {
        let _ = options;
        Err(format!("index {} has no named configurations (asked for '{config}')", Self::NAME))
    }
}

/// The faults of a preset, as data: the checker turns them into the simulator's faults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// READ failures, spread over memory nodes `0..memory_nodes` in turn: in a checking run
    /// each is a fault step the explorer places, so the failed READ can be any one of the run.
    pub read_failures: u32,
    pub memory_nodes: u16,
    /// Nodes that crash once and restart, each at a time the explorer chooses.
    pub crashes: Vec<NodeId>,
}

impl FaultPlan {
    /// `count` READ failures over memory nodes `0..memory_nodes`.
    pub fn read_failures(memory_nodes: u16, count: u32) -> FaultPlan {
        FaultPlan { read_failures: count, memory_nodes, crashes: Vec::new() }
    }

    /// One crash and restart of `node`.
    pub fn crash(node: NodeId) -> FaultPlan {
        FaultPlan { crashes: vec![node], ..FaultPlan::default() }
    }

    /// The faults of a preset named `read-failure`: three READ failures over memory nodes
    /// `0..memory_nodes`; none for any other preset.
    pub fn read_failure_preset(preset: &str, memory_nodes: u16) -> FaultPlan {
        if preset == "read-failure" { FaultPlan::read_failures(memory_nodes, 3) } else { FaultPlan::default() }
    }
}

/// The preset named `name` in `presets`, with its options (sweeps build on presets by name, so
/// that adding a preset moves none of them).
pub fn preset_named<O: Clone>(presets: &[(Preset, O)], name: &str) -> (Preset, O) {
    presets.iter().find(|(p, _)| p.name == name).cloned().unwrap_or_else(|| panic!("no preset named {name}"))
}

/// A sweep point: `preset` under the name `name`, with `options`.
pub fn point<O>(name: &'static str, preset: Preset, options: O) -> (Preset, O) {
    (Preset { name, ..preset }, options)
}

/// Key `k` as 8 big-endian bytes: the default [`Preset::key_of`].
pub fn be_key(k: u64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

/// Key `k` as the byte `k + 1` eight times: keys that sort as their numbers do and differ in
/// every byte (never all-zero, never the all-0xFF fence, for `k < 254`). With [`be_key`] only
/// the last byte differs, so a READ torn inside a node's entry mixes two keys' equal leading
/// bytes and reads one of them whole: a torn entry never names a key no node has, and removing
/// a B-tree's version check on internal nodes went unnoticed (CHIME's and Sherman's
/// `wide-keys` presets were added for that).
pub fn wide_key(k: u64) -> Vec<u8> {
    assert!(k < 254, "wide keys are one byte repeated");
    vec![k as u8 + 1; 8]
}

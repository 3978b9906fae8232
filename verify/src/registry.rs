//! The indexes `dmkit check` knows, their presets, and one entry point that runs a check from
//! command-line arguments.

use crate::explore::{self, Mode};
use crate::harness::{Checked, IndexCheck, IndexScenario, Mix, Preset, be_key, check_index};
use dmkit_indexes::IndexKind;
use dmkit_indexes::art::{Art, ArtOptions};
use dmkit_indexes::chime::{Chime, ChimeOptions};
use dmkit_indexes::clover::Clover;
use dmkit_indexes::cluster::Cluster;
use dmkit_indexes::dolphin::{Dolphin, DolphinOptions};
use dmkit_indexes::example::{Example, ExampleOptions};
use dmkit_indexes::hstore::HStore;
use dmkit_indexes::race::{Race, RaceOptions};
use dmkit_indexes::sherman::{Sherman, ShermanOptions};
use dmkit_indexes::smart::{Smart, SmartOptions};
use std::fmt::Write as _;
use std::time::Duration;

impl Checked for Example {
    fn presets() -> Vec<(Preset, ExampleOptions)> {
        let tiny = ExampleOptions { buckets: 2, slots_per_bucket: 4, max_retries: 200, ..ExampleOptions::default() };
        vec![
            (
                Preset {
                    name: "default",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 3,
                    ops_per_client: 5,
                    keys: 4,
                    value_bytes: 48,
                    preload: 2,
                    mix: Mix { search: 35, insert: 25, update: 20, delete: 20, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures"],
                    step_limit: 200_000,
                    key_of: be_key,
                },
                tiny.clone(),
            ),
            (
                Preset {
                    name: "hot",
                    compute_nodes: 2,
                    memory_nodes: 2,
                    clients: 4,
                    ops_per_client: 6,
                    keys: 2,
                    value_bytes: 48,
                    preload: 1,
                    mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures", "retries"],
                    step_limit: 400_000,
                    key_of: be_key,
                },
                ExampleOptions { memory_nodes: 2, ..tiny.clone() },
            ),
            (
                // Small enough for DFS: two writers, short runs, every key in one bucket.
                Preset {
                    name: "pair",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    value_bytes: 48,
                    preload: 1,
                    mix: Mix { search: 30, insert: 40, update: 20, delete: 10, scan: 0 },
                    scan_limit: 4,
                    required_counters: &["lock_failures"],
                    step_limit: 100_000,
                    key_of: be_key,
                },
                ExampleOptions { buckets: 1, ..tiny },
            ),
        ]
    }
}

/// Sherman's checking nodes: 3 slots per leaf and 3 records per internal node, so a handful of
/// inserts split leaves, internal nodes and the root.
const SHERMAN_SPANS: (u32, u32) = (3, 3);
/// Values of 24 bytes: long enough that a torn slot shows as a value nobody wrote.
const SHERMAN_VALUE: u32 = 24;

fn sherman_options(config: &str, memory_nodes: u16) -> ShermanOptions {
    let o = ShermanOptions::named(config, 8, SHERMAN_VALUE).expect("a known configuration");
    ShermanOptions { memory_nodes, max_retries: 2_000, ..o.with_spans(SHERMAN_SPANS.0, SHERMAN_SPANS.1) }
}

impl Checked for Sherman {
    fn presets() -> Vec<(Preset, ShermanOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 2,
            clients: 3,
            ops_per_client: 6,
            keys: 12,
            value_bytes: SHERMAN_VALUE as usize,
            preload: 5,
            mix: Mix { search: 30, insert: 40, update: 10, delete: 10, scan: 10 },
            scan_limit: 6,
            required_counters: &["leaf_split", "internal_split", "root_split", "move_right", "scan_next_leaf"],
            step_limit: 400_000,
            key_of: be_key,
        };
        vec![
            (base.clone(), sherman_options("sherman-fixed", 2)),
            // One compute node, hot keys: local lock hand-over and write combining.
            (
                Preset {
                    name: "local",
                    compute_nodes: 1,
                    memory_nodes: 1,
                    clients: 4,
                    keys: 4,
                    preload: 2,
                    mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                    required_counters: &["lock_handed_over", "rdwc_combined", "rdwc_delegated", "leaf_split"],
                    ..base.clone()
                },
                ShermanOptions { rdwc: true, max_handover: 8, ..sherman_options("sherman-fixed", 1) },
            ),
            // Small enough for DFS: two clients, a few inserts around one split.
            (
                Preset {
                    name: "pair",
                    compute_nodes: 2,
                    memory_nodes: 1,
                    clients: 2,
                    ops_per_client: 3,
                    keys: 6,
                    preload: 2,
                    mix: Mix { search: 40, insert: 60, update: 0, delete: 0, scan: 0 },
                    required_counters: &["leaf_split"],
                    step_limit: 200_000,
                    ..base
                },
                sherman_options("sherman-fixed", 1),
            ),
        ]
    }

    fn configure(options: &mut ShermanOptions, config: &str) -> Result<(), String> {
        ShermanOptions::named(config, options.key_bytes, options.value_bytes)?;
        *options = ShermanOptions {
            rdwc: options.rdwc || ShermanOptions::named(config, 8, 8)?.rdwc,
            plants: options.plants.clone(),
            ..sherman_options(config, options.memory_nodes)
        };
        Ok(())
    }
}

/// SMART's checking keys: two groups of six sharing seven bytes and differing in the last
/// (so a node fills past NODE_4 and switches type), split at byte 5, and two keys diverging at
/// byte 2 (inside the compressed header of the first chain: a header split). The first two
/// inserts make a leaf split into a two-node chain (seven common bytes).
pub fn smart_key(k: u64) -> Vec<u8> {
    if k < 12 {
        vec![0, 0, 0, 0, 0, (k / 6) as u8, 0, (k % 6) as u8]
    } else {
        vec![0, 0, 1, 0, 0, 0, 0, (k - 12) as u8]
    }
}

/// Values of 64 bytes: a leaf spans two cache lines, so an update can tear a READ.
const SMART_VALUE: u32 = 64;

fn smart_options(config: &str, memory_nodes: u16) -> SmartOptions {
    let o = SmartOptions::named(config, 8, SMART_VALUE).expect("a known configuration");
    SmartOptions { memory_nodes, max_retries: 2_000, cache_bytes: 1 << 20, ..o }
}

fn smart_presets(config: &str) -> Vec<(Preset, SmartOptions)> {
    let base = Preset {
        name: "default",
        compute_nodes: 2,
        memory_nodes: 2,
        clients: 3,
        ops_per_client: 6,
        keys: 14,
        key_of: smart_key,
        value_bytes: SMART_VALUE as usize,
        preload: 4,
        mix: Mix { search: 35, insert: 35, update: 10, delete: 10, scan: 10 },
        scan_limit: 6,
        required_counters: &["leaf_split", "header_split", "type_switch", "cache_hit", "cache_invalidated"],
        step_limit: 400_000,
    };
    vec![
        (base.clone(), smart_options(config, 2)),
        // One compute node, hot keys: delegation, combining, lock contention.
        (
            Preset {
                name: "local",
                compute_nodes: 1,
                memory_nodes: 1,
                clients: 4,
                keys: 4,
                preload: 1,
                mix: Mix { search: 40, insert: 30, update: 20, delete: 10, scan: 0 },
                required_counters: &["rdwc_combined", "rdwc_delegated", "leaf_split", "lock_failures"],
                ..base.clone()
            },
            smart_options(config, 1),
        ),
        // Small enough for DFS: two clients, a split and an update race.
        (
            Preset {
                name: "pair",
                compute_nodes: 2,
                memory_nodes: 1,
                clients: 2,
                ops_per_client: 3,
                keys: 4,
                preload: 1,
                mix: Mix { search: 40, insert: 40, update: 20, delete: 0, scan: 0 },
                required_counters: &["leaf_split"],
                step_limit: 200_000,
                ..base
            },
            smart_options(config, 1),
        ),
    ]
}

impl Checked for Smart {
    fn presets() -> Vec<(Preset, SmartOptions)> {
        smart_presets("smart")
    }

    fn configure(options: &mut SmartOptions, config: &str) -> Result<(), String> {
        let named = SmartOptions::named(config, options.key_bytes, options.value_bytes)?;
        *options = SmartOptions {
            plants: options.plants.clone(),
            memory_nodes: options.memory_nodes,
            max_retries: options.max_retries,
            cache_bytes: options.cache_bytes,
            ..named
        };
        Ok(())
    }
}

impl Checked for Art {
    fn presets() -> Vec<(Preset, ArtOptions)> {
        smart_presets("art")
            .into_iter()
            .map(|(mut p, o)| {
                if p.name == "local" {
                    p.required_counters = &["lock_handed_over", "rcu_update", "leaf_split"];
                }
                (p, ArtOptions(o))
            })
            .collect()
    }
}

/// CHIME's checking keys: `k + 1` big-endian (the all-zero key marks empty entries).
pub fn chime_key(k: u64) -> Vec<u8> {
    (k + 1).to_be_bytes().to_vec()
}

/// CHIME-Indirect's checking keys (with `prefix=2`): three keys of 2, 3 and 5 bytes per 2-byte
/// prefix, `[p]`, `[p, 0]`, `[p, 9, 9, 9]` for `p = k / 3 + 1`, so every lookup resolves a
/// prefix collision through the blocks, and the keys sort as their numbers do.
pub fn chime_var_key(k: u64) -> Vec<u8> {
    let mut key = ((k / 3 + 1) as u16).to_be_bytes().to_vec();
    key.extend_from_slice(match k % 3 {
        0 => &[][..],
        1 => &[0][..],
        _ => &[9, 9, 9][..],
    });
    key
}

/// Values of 32 bytes: a 43-byte entry often spans two lines, so an update can tear a READ.
const CHIME_VALUE: u32 = 32;

/// Leaves of 8 entries with neighbourhoods of 4 and internal nodes of 3: a handful of inserts
/// displace keys, split leaves, internal nodes and the root.
fn chime_options(config: &str, memory_nodes: u16) -> ChimeOptions {
    let o = ChimeOptions::named(config, 8, CHIME_VALUE).expect("a known configuration");
    ChimeOptions {
        memory_nodes,
        max_retries: 2_000,
        cache_bytes: 1 << 20,
        hotspot_bytes: 1 << 16,
        ..o.with_spans(8, 4, 2)
    }
}

fn chime_presets(config: &str) -> Vec<(Preset, ChimeOptions)> {
    let base = Preset {
        name: "default",
        compute_nodes: 2,
        memory_nodes: 2,
        clients: 3,
        ops_per_client: 6,
        keys: 24,
        key_of: chime_key,
        value_bytes: CHIME_VALUE as usize,
        preload: 8,
        mix: Mix { search: 35, insert: 35, update: 10, delete: 10, scan: 10 },
        scan_limit: 8,
        required_counters: &["leaf_split", "internal_split", "hop", "cache_hit", "half_split_right", "scan_next_leaf"],
        step_limit: 400_000,
    };
    vec![
        (base.clone(), chime_options(config, 2)),
        // One compute node, hot keys: delegation, combining, speculation, lock contention.
        (
            Preset {
                name: "local",
                compute_nodes: 1,
                memory_nodes: 1,
                clients: 4,
                keys: 6,
                preload: 3,
                mix: Mix { search: 40, insert: 20, update: 30, delete: 10, scan: 0 },
                required_counters: &["rdwc_combined", "rdwc_delegated", "speculation_hit", "lock_failures"],
                ..base.clone()
            },
            chime_options(config, 1),
        ),
        // Neighbourhoods of 12 in leaves of 16: 2-byte bitmaps that straddle lines (digest G1).
        (
            Preset { name: "wide", keys: 40, preload: 14, required_counters: &["leaf_split", "hop"], ..base.clone() },
            ChimeOptions { ..chime_options(config, 2).with_spans(16, 12, 2) },
        ),
        // CHIME-Indirect: variable-length keys in blocks, entries holding 2-byte prefixes that
        // three keys share (whatever `--config` says: the keys need indirect mode).
        (
            Preset {
                name: "indirect",
                keys: 36,
                preload: 12,
                key_of: chime_var_key,
                required_counters: &["leaf_split", "hop", "prefix_collision", "half_split_right"],
                ..base.clone()
            },
            ChimeOptions { prefix: 2, ..chime_options("chime-indirect", 2) },
        ),
        // Small enough for DFS: two clients around one split.
        (
            Preset {
                name: "pair",
                compute_nodes: 2,
                memory_nodes: 1,
                clients: 2,
                ops_per_client: 3,
                keys: 10,
                preload: 6,
                mix: Mix { search: 40, insert: 60, update: 0, delete: 0, scan: 0 },
                required_counters: &["leaf_split"],
                step_limit: 200_000,
                ..base
            },
            chime_options(config, 1),
        ),
    ]
}

impl Checked for Chime {
    fn presets() -> Vec<(Preset, ChimeOptions)> {
        chime_presets("chime")
    }

    fn configure(options: &mut ChimeOptions, config: &str) -> Result<(), String> {
        let named = ChimeOptions::named(config, options.key_bytes, options.value_bytes)?;
        *options = ChimeOptions {
            plants: options.plants.clone(),
            memory_nodes: options.memory_nodes,
            max_retries: options.max_retries,
            cache_bytes: options.cache_bytes,
            hotspot_bytes: options.hotspot_bytes,
            ..named.with_spans(options.span, options.hood, options.internal_span)
        };
        Ok(())
    }
}

/// RACE's checking tables: 2 groups of 3 buckets of 2 slots in one subtable, so few keys fill
/// combined buckets, share them and collide on fingerprints' buckets.
fn race_options(memory_nodes: u16) -> RaceOptions {
    RaceOptions {
        key_bytes: 8,
        value_bytes: 32,
        slots: 2,
        groups: 2,
        initial_depth: 1,
        max_depth: 4,
        memory_nodes,
        max_retries: 2_000,
        ..RaceOptions::default()
    }
}

impl Checked for Race {
    fn presets() -> Vec<(Preset, RaceOptions)> {
        let basic = Preset {
            name: "basic",
            compute_nodes: 2,
            memory_nodes: 2,
            clients: 3,
            ops_per_client: 6,
            keys: 6,
            key_of: be_key,
            value_bytes: 32,
            preload: 2,
            mix: Mix { search: 35, insert: 35, update: 15, delete: 15, scan: 0 },
            scan_limit: 4,
            required_counters: &["cas_failures", "lock_failures"],
            step_limit: 400_000,
        };
        // One subtable of six 1-slot buckets: inserts split it and double the directory while
        // searches and writes meet items in flight.
        let default = Preset {
            name: "default",
            keys: 8,
            preload: 3,
            mix: Mix { search: 35, insert: 40, update: 15, delete: 10, scan: 0 },
            required_counters: &["split", "item_moved", "directory_doubling", "search_on_resize", "split_wait"],
            step_limit: 1_000_000,
            ..basic.clone()
        };
        vec![
            (default.clone(), RaceOptions { slots: 1, initial_depth: 0, ..race_options(2) }),
            // "default" with 2-slot buckets (24 bytes): some buckets' headers and slots sit in
            // different cache lines, so a READ of one bucket can see its header and its slots at
            // different times while a split moves the bucket. Twice the keys, more preloaded:
            // with 8 keys a key's two combined buckets (8 slots) never fill, so nothing splits.
            (
                Preset { name: "default-2slot", keys: 16, preload: 9, ..default.clone() },
                RaceOptions { slots: 2, initial_depth: 0, ..race_options(2) },
            ),
            // Two subtables of 1-slot buckets and more keys: splits of a subtable shallower than
            // the directory (several entries re-pointed, no doubling) as well as doublings.
            (
                Preset {
                    name: "deep",
                    keys: 16,
                    preload: 10,
                    mix: Mix { search: 35, insert: 40, update: 15, delete: 10, scan: 0 },
                    required_counters: &["shallow_split", "directory_doubling", "item_moved", "search_on_resize"],
                    step_limit: 1_000_000,
                    ..basic.clone()
                },
                RaceOptions { slots: 1, initial_depth: 1, ..race_options(2) },
            ),
            // Two subtables of 2-slot buckets, no splits: the plain protocol.
            (basic.clone(), race_options(2)),
            // Three keys in 1-slot buckets, three inserting clients: concurrent inserts of one
            // absent key land in different slots.
            (
                Preset {
                    name: "same-key",
                    keys: 3,
                    preload: 1,
                    mix: Mix { search: 30, insert: 50, update: 0, delete: 20, scan: 0 },
                    ..basic.clone()
                },
                RaceOptions { slots: 1, ..race_options(1) },
            ),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    preload: 1,
                    required_counters: &[],
                    step_limit: 100_000,
                    ..basic
                },
                race_options(1),
            ),
        ]
    }

    fn configure(options: &mut RaceOptions, config: &str) -> Result<(), String> {
        options.paper = dmkit_indexes::race::Paper::named(config)?;
        Ok(())
    }
}

/// Dolphin's checking keys: six in one 7-byte prefix (one special node, leaves of 4 slots that
/// split), one in a sibling prefix (a new child of the first node) and two that leave the first
/// node's compressed prefix early (prefix splits above it). The first six descend (11, 9, ...,
/// 1), so the preloaded keys are the largest and a split moves one of them to the new leaf.
pub fn dolphin_key(k: u64) -> Vec<u8> {
    let word: u64 = match k {
        0..=5 => 11 - 2 * k,
        6 => 0x1_05,
        7 => 0x0000_0001_0000_0003,
        _ => 0x0100_0000_0000_0000 + k,
    };
    word.to_be_bytes().to_vec()
}

/// Dolphin's checking options: 4-slot leaves (a split every few inserts) on two memory nodes.
pub fn dolphin_options(memory_nodes: u16) -> DolphinOptions {
    DolphinOptions {
        leaf_slots: 4,
        memory_nodes,
        chunk_bytes: 1 << 20,
        cache_bytes: 1 << 20,
        max_retries: 2_000,
        ..DolphinOptions::default()
    }
}

impl Checked for Dolphin {
    fn presets() -> Vec<(Preset, DolphinOptions)> {
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 2,
            clients: 3,
            ops_per_client: 6,
            keys: 9,
            key_of: dolphin_key,
            value_bytes: 8,
            preload: 3,
            mix: Mix { search: 30, insert: 35, update: 15, delete: 10, scan: 10 },
            scan_limit: 4,
            required_counters: &[
                "leaf_split",
                "backtrack",
                "prefix_split",
                "new_prefix",
                "cas_failures",
                "scan_from_cache",
                "scan_reread",
            ],
            step_limit: 1_000_000,
        };
        vec![
            (base.clone(), dolphin_options(2)),
            // One prefix, hot: updates and deletes meet splits and compactions.
            (
                Preset {
                    name: "leaf",
                    keys: 6,
                    preload: 3,
                    mix: Mix { search: 30, insert: 30, update: 20, delete: 15, scan: 5 },
                    required_counters: &["leaf_split", "compaction", "smo_wait"],
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            // One compute node, three hot keys: read delegation and write combining.
            (
                Preset {
                    name: "local",
                    compute_nodes: 1,
                    memory_nodes: 1,
                    clients: 4,
                    keys: 3,
                    preload: 2,
                    mix: Mix { search: 45, insert: 20, update: 25, delete: 10, scan: 0 },
                    required_counters: &["rdwc_delegated", "rdwc_combined"],
                    ..base.clone()
                },
                dolphin_options(1),
            ),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 4,
                    preload: 3,
                    required_counters: &[],
                    step_limit: 200_000,
                    ..base
                },
                dolphin_options(1),
            ),
        ]
    }

    fn configure(options: &mut DolphinOptions, config: &str) -> Result<(), String> {
        options.configure(config)
    }
}

/// Names `dmkit check --index` accepts.
pub fn index_names() -> Vec<&'static str> {
    vec![
        Example::NAME,
        Sherman::NAME,
        Smart::NAME,
        Art::NAME,
        Chime::NAME,
        Race::NAME,
        Dolphin::NAME,
        Cluster::NAME,
        HStore::NAME,
        Clover::NAME,
    ]
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
    /// `None`: random, then PCT, half the budget each.
    pub mode: Option<Mode>,
    pub seed: u64,
    pub plant: Option<String>,
    pub replay: Option<String>,
    pub max_schedules: u64,
}

/// The result: a report for the terminal and whether the check passed; `history` is the JSON
/// lines of the failing run (or of the last run if clean).
#[derive(Clone, Debug)]
pub struct CheckOutcome {
    pub passed: bool,
    pub report: String,
    pub history: String,
}

/// Planted bugs of an index, one per line: `name: description`.
pub fn list_plants(index: &str) -> Result<String, String> {
    let plants = match index {
        "example" => Example::planted_bugs(),
        "sherman" => Sherman::planted_bugs(),
        "smart" => Smart::planted_bugs(),
        "art" => Art::planted_bugs(),
        "chime" => Chime::planted_bugs(),
        "race" => Race::planted_bugs(),
        "dolphin" => Dolphin::planted_bugs(),
        "cluster" => Cluster::planted_bugs(),
        "hstore" => HStore::planted_bugs(),
        "clover" => Clover::planted_bugs(),
        other => return Err(unknown(other)),
    };
    Ok(plants.iter().map(|p| format!("{}: {}\n", p.name, p.description)).collect())
}

fn unknown(index: &str) -> String {
    format!("unknown index '{index}' (known: {})", index_names().join(", "))
}

/// Runs a check. `Err` is for bad arguments (exit 2); a failed check is `Ok` with `passed: false`.
pub fn run_check(req: &CheckRequest) -> Result<CheckOutcome, String> {
    match req.index.as_str() {
        "example" => run::<Example>(req),
        "sherman" => run::<Sherman>(req),
        "smart" => run::<Smart>(req),
        "art" => run::<Art>(req),
        "chime" => run::<Chime>(req),
        "race" => run::<Race>(req),
        "dolphin" => run::<Dolphin>(req),
        "cluster" => run::<Cluster>(req),
        "hstore" => run::<HStore>(req),
        "clover" => run::<Clover>(req),
        other => Err(unknown(other)),
    }
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
    if !(req.seconds > 0.0 && req.seconds.is_finite()) {
        return Err("--seconds must be positive".into());
    }
    let preset = &scenario.preset;
    let command = format!(
        "dmkit check --index {} --preset {}{}{} --seed {}{}",
        K::NAME,
        preset.name,
        req.config.as_ref().map(|c| format!(" --config {c}")).unwrap_or_default(),
        req.clients.map(|c| format!(" --clients {c}")).unwrap_or_default(),
        req.seed,
        req.plant.as_ref().map(|p| format!(" --plant {p}")).unwrap_or_default(),
    );
    if let Some(replay) = &req.replay {
        let (variant, choices) = explore::decode_replay(replay)?;
        let verdict = explore::replay(&scenario, variant, &choices);
        let history = scenario.last_history.borrow().to_json_lines();
        return Ok(match verdict {
            Ok(()) => CheckOutcome { passed: true, report: "replayed schedule: clean\n".into(), history },
            Err(e) => CheckOutcome { passed: false, report: format!("replayed schedule: VIOLATION\n{e}\n"), history },
        });
    }
    let budget = Duration::from_secs_f64(req.seconds);
    let modes: Vec<(Mode, Duration)> = match req.mode {
        Some(m) => vec![(m, budget)],
        None => vec![(Mode::Random, budget / 2), (Mode::Pct { depth: 3 }, budget / 2)],
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
    for (mode, budget) in modes {
        let IndexCheck { exploration: e, counters, vacuous: v } =
            check_index(&scenario, mode, req.seed, budget, req.max_schedules);
        let _ = writeln!(
            report,
            "  {:<6} {} schedules, {} steps in {:.1} s ({:.0} schedules/s){}",
            mode.name(),
            e.schedules,
            e.steps,
            e.elapsed.as_secs_f64(),
            e.schedules_per_second(),
            if e.complete { ", bound exhausted" } else { "" }
        );
        if let Some(f) = e.failure {
            let _ = writeln!(report, "VIOLATION in schedule {} ({}):\n{}", f.schedule, mode.name(), f.message);
            let _ = writeln!(report, "replay: {command} --replay {}", f.replay_string());
            let history = scenario.last_history.borrow().to_json_lines();
            return Ok(CheckOutcome { passed: false, report, history });
        }
        let _ = writeln!(
            report,
            "  counters so far: retries {}, lock failures {}, CAS failures {}, events {:?}",
            counters.retries, counters.lock_failures, counters.cas_failures, counters.events
        );
        vacuous = v;
    }
    let history = scenario.last_history.borrow().to_json_lines();
    if !vacuous.is_empty() {
        let _ = writeln!(report, "VACUOUS: required counters stayed zero: {}", vacuous.join(", "));
        return Ok(CheckOutcome { passed: false, report, history });
    }
    let _ = writeln!(report, "clean");
    Ok(CheckOutcome { passed: true, report, history })
}

//! What a workload is: its distribution, operation mix, scan lengths, and the named workloads
//! (YCSB A–F, LOAD and the papers' own).

use super::*;

/// A workload or trace configuration error: one line for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

pub(crate) fn spec_error<T>(message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(message.into()))
}

/// How keys are chosen for searches, updates, scans, read-modify-writes and deletes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Distribution {
    /// Uniform over the keys present.
    Uniform,
    /// YCSB's scrambled Zipfian (its `requestdistribution=zipfian`).
    ScrambledZipfian { theta: f64 },
    /// MICA-style Zipfian: rank r is key number r.
    Zipfian { theta: f64 },
    /// YCSB's skewed-latest: the most recent inserts are the most popular.
    Latest { theta: f64 },
    /// Key numbers 0, 1, 2, … in order, shared by all clients, wrapping.
    Sequential,
}

impl Distribution {
    fn theta(self) -> Option<f64> {
        match self {
            Distribution::ScrambledZipfian { theta }
            | Distribution::Zipfian { theta }
            | Distribution::Latest { theta } => Some(theta),
            Distribution::Uniform | Distribution::Sequential => None,
        }
    }
}

/// The weights of each operation type. Only ratios matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mix {
    /// Search (YCSB "read").
    pub read: f64,
    pub update: f64,
    /// Insert of a fresh key.
    pub insert: f64,
    pub scan: f64,
    /// A search followed by an update of the same key (YCSB F).
    pub read_modify_write: f64,
    pub delete: f64,
}

/// The operation types of a [`Mix`], in the order the chooser tries them (YCSB's order, then
/// delete).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Search,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    Delete,
}

impl OpKind {
    pub const ALL: [OpKind; 6] =
        [OpKind::Search, OpKind::Update, OpKind::Insert, OpKind::Scan, OpKind::ReadModifyWrite, OpKind::Delete];

    /// The name used in metrics: search, update, insert, scan, read_modify_write, delete.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Search => "search",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "read_modify_write",
            OpKind::Delete => "delete",
        }
    }
}

impl Mix {
    /// Inserts of fresh keys and nothing else (a LOAD).
    pub fn is_insert_only(&self) -> bool {
        self.insert > 0.0 && OpKind::ALL.iter().all(|&k| k == OpKind::Insert || self.weight(k) == 0.0)
    }

    pub fn weight(&self, kind: OpKind) -> f64 {
        match kind {
            OpKind::Search => self.read,
            OpKind::Update => self.update,
            OpKind::Insert => self.insert,
            OpKind::Scan => self.scan,
            OpKind::ReadModifyWrite => self.read_modify_write,
            OpKind::Delete => self.delete,
        }
    }

    pub fn total(&self) -> f64 {
        OpKind::ALL.iter().map(|&k| self.weight(k)).sum()
    }

    /// The share of `kind` in the mix.
    pub fn fraction(&self, kind: OpKind) -> f64 {
        self.weight(kind) / self.total()
    }

    fn validate(&self) -> Result<(), SpecError> {
        for kind in OpKind::ALL {
            let w = self.weight(kind);
            if !w.is_finite() || w < 0.0 {
                return spec_error(format!("mix weight of {} must be a finite number >= 0, got {w}", kind.name()));
            }
        }
        if self.total() <= 0.0 {
            return spec_error("the operation mix is empty: give some operation a positive weight");
        }
        Ok(())
    }

    /// The kind for a uniform `u` in `[0, 1)` (YCSB's `DiscreteGenerator`: subtract normalised
    /// weights in order).
    pub fn choose(&self, u: f64) -> OpKind {
        let total = self.total();
        let mut rest = u;
        let mut last = OpKind::Search;
        for kind in OpKind::ALL {
            let w = self.weight(kind);
            if w <= 0.0 {
                continue;
            }
            let share = w / total;
            if rest < share {
                return kind;
            }
            rest -= share;
            last = kind;
        }
        last
    }
}

/// Scan lengths: uniform in `min..=max` (YCSB's `scanlengthdistribution=uniform`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanLength {
    pub min: usize,
    pub max: usize,
}

impl Default for ScanLength {
    /// YCSB E's: 1 to 100.
    fn default() -> ScanLength {
        ScanLength { min: 1, max: 100 }
    }
}

/// One workload: what a run's streams generate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// For reports: "ycsb-a", "load", or the user's name.
    pub name: String,
    pub mix: Mix,
    pub distribution: Distribution,
    pub key_format: KeyFormat,
    /// Keys present before the run (key numbers `0..record_count`, see [`load_items`]).
    pub record_count: u64,
    /// The run's total operations over all clients (YCSB's `operationcount`). Used only to size
    /// the Zipfian key spaces for mixes with inserts as YCSB does; 0 when unknown (then reads go
    /// only to the loaded keys under the Zipfians). [`Phase::new`] sets it.
    pub operation_count: u64,
    /// Length of every value written (1..=2^20).
    pub value_bytes: usize,
    pub scan_length: ScanLength,
    /// The ranks an unscrambled [`Distribution::Zipfian`] draws over, when more than the keys
    /// present: a paper's key count at reduced scale. A rank at or past the keys present folds
    /// onto them (`rank mod present`) instead of being redrawn, so the hottest keys draw the
    /// shares they draw among the paper's keys (θ = 0.99: keys 0–47 draw 29.5% of requests over
    /// 10^6 keys, 19.9% over 2^29), and the folded tail stays spread thin. `None`: the keys
    /// present, as MICA's generator draws over the keys it loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zipfian_items: Option<u64>,
    /// Load the keys in a fixed pseudo-random order ([`load_items`]) instead of in key-number
    /// order: the same keys, inserted as a load from hashed or shuffled input would insert
    /// them. For footprints that depend on insertion order (a B+-tree's leaves fill to half on
    /// an ascending load with even splits, to about 69% on a random one).
    #[serde(default)]
    pub shuffled_load: bool,
}

/// Largest value size a spec accepts.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

impl WorkloadSpec {
    /// A spec with 8-byte hashed integer keys, 8-byte values and YCSB's scan lengths.
    pub fn custom(name: &str, mix: Mix, distribution: Distribution, record_count: u64) -> WorkloadSpec {
        WorkloadSpec {
            name: name.to_string(),
            mix,
            distribution,
            key_format: KeyFormat::Integer { order: KeyOrder::Hashed },
            record_count,
            operation_count: 0,
            value_bytes: 8,
            scan_length: ScanLength::default(),
            zipfian_items: None,
            shuffled_load: false,
        }
    }

    /// YCSB's core workloads A–F (workloads/workload[a-f] in YCSB), over `record_count` loaded
    /// keys, θ = 0.99, 8-byte keys and values:
    ///
    /// | | mix | distribution | keys |
    /// |---|---|---|---|
    /// | A | 50% read, 50% update | scrambled Zipfian | hashed |
    /// | B | 95% read, 5% update | scrambled Zipfian | hashed |
    /// | C | 100% read | scrambled Zipfian | hashed |
    /// | D | 95% read, 5% insert | latest | hashed |
    /// | E | 95% scan, 5% insert, length uniform 1..=100 | scrambled Zipfian | **ordered** |
    /// | F | 50% read, 50% read-modify-write | scrambled Zipfian | hashed |
    ///
    /// E uses ordered keys as CHIME's and SMART's artifacts do (YCSB's own workloade keeps the
    /// default hashed order, which makes a scan's start key random in the key space).
    pub fn ycsb(letter: char, record_count: u64) -> Result<WorkloadSpec, SpecError> {
        let zipf = Distribution::ScrambledZipfian { theta: YCSB_ZIPFIAN_CONSTANT };
        let (mix, distribution, order) = match letter.to_ascii_lowercase() {
            'a' => (Mix { read: 0.5, update: 0.5, ..Mix::default() }, zipf, KeyOrder::Hashed),
            'b' => (Mix { read: 0.95, update: 0.05, ..Mix::default() }, zipf, KeyOrder::Hashed),
            'c' => (Mix { read: 1.0, ..Mix::default() }, zipf, KeyOrder::Hashed),
            'd' => (
                Mix { read: 0.95, insert: 0.05, ..Mix::default() },
                Distribution::Latest { theta: YCSB_ZIPFIAN_CONSTANT },
                KeyOrder::Hashed,
            ),
            'e' => (Mix { scan: 0.95, insert: 0.05, ..Mix::default() }, zipf, KeyOrder::Ordered),
            'f' => (Mix { read: 0.5, read_modify_write: 0.5, ..Mix::default() }, zipf, KeyOrder::Hashed),
            other => {
                return spec_error(format!(
                    "unknown workload `{other}` (expected a, b, c, d, e, f, load, db-put, db-get or db-scan)"
                ));
            }
        };
        let mut spec =
            WorkloadSpec::custom(&format!("ycsb-{}", letter.to_ascii_lowercase()), mix, distribution, record_count);
        spec.key_format = KeyFormat::Integer { order };
        Ok(spec)
    }

    /// YCSB LOAD: 100% inserts of fresh keys. Run `record_count` operations of it against
    /// `SharedState::new(0)` to load by inserts: the keys are exactly those of
    /// [`load_items`]. Run it against `SharedState::for_spec` to insert beyond a preloaded
    /// `record_count` (CHIME's and SMART's LOAD: 5 M preloaded, then inserts).
    pub fn ycsb_load(record_count: u64) -> WorkloadSpec {
        WorkloadSpec::custom("load", Mix { insert: 1.0, ..Mix::default() }, Distribution::Uniform, record_count)
    }

    /// `a`…`f`, `ycsb-a`…`ycsb-f`, `load`, or db_bench's `db-put`, `db-get`, `db-scan`
    /// (case-insensitive); `dense-` before any of them
    /// gives Dolphin's artifact's key space: dense keys in order (`insertorder=ordered`) and an
    /// unscrambled Zipfian (rank r is key r, θ = 0.99), so hot keys share leaves. `mica-` before
    /// a Zipfian one (a, b, c, e, f) draws its keys as MICA's generator does, SMART's "generated
    /// Zipfian workloads" (its Fig. 22): ranks over the loaded keys, not YCSB's 10^10 (rank r is
    /// key number r, keys hashed as the workload's), so the hottest key's share falls as the key
    /// count grows (θ = 0.99: 6.5% of draws at 10^6 keys, 5.0% at 6·10^7), where YCSB's scrambled
    /// Zipfian gives about the same shares at every key count.
    pub fn from_name(name: &str, record_count: u64) -> Result<WorkloadSpec, SpecError> {
        let lower = name.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("dense-") {
            let mut spec = WorkloadSpec::from_name(rest, record_count).map_err(|_| {
                SpecError(format!("unknown workload `{name}` (expected dense- before a, b, c, d, e, f or load)"))
            })?;
            spec.name = format!("dense-{}", spec.name.trim_start_matches("ycsb-"));
            spec.key_format = match spec.key_format {
                KeyFormat::Integer { .. } => KeyFormat::Integer { order: KeyOrder::Ordered },
                KeyFormat::Padded { bytes, .. } => KeyFormat::Padded { bytes, order: KeyOrder::Ordered },
                email => email,
            };
            if let Distribution::ScrambledZipfian { theta } = spec.distribution {
                spec.distribution = Distribution::Zipfian { theta };
            }
            return Ok(spec);
        }
        if let Some(rest) = lower.strip_prefix("mica-") {
            let scrambled = WorkloadSpec::from_name(rest, record_count).ok().and_then(|s| match s.distribution {
                Distribution::ScrambledZipfian { theta } => Some((s, theta)),
                _ => None,
            });
            let Some((mut spec, theta)) = scrambled else {
                return spec_error(format!("unknown workload `{name}` (expected mica- before a, b, c, e or f)"));
            };
            spec.name = format!("mica-{}", spec.name.trim_start_matches("ycsb-"));
            spec.distribution = Distribution::Zipfian { theta };
            return Ok(spec);
        }
        // db_bench's single-operation benchmarks as HStore ran them (digest §5.3): uniform
        // keys over the loaded ones; PUTs overwrite, SCANs cover 100 keys from an ordered key
        // space (a uniform start).
        let db = |name: &str, mix: Mix, order: KeyOrder| {
            let mut spec = WorkloadSpec::custom(name, mix, Distribution::Uniform, record_count);
            spec.key_format = KeyFormat::Integer { order };
            spec.scan_length = ScanLength { min: 100, max: 100 };
            Ok(spec)
        };
        // Mixes that delete, so that histories of long runs exercise every operation (YCSB has
        // none): `crud` is a uniform quarter each of search, insert, update and delete;
        // `delete-heavy` is 40% delete, 30% insert, 20% search, 10% update over scrambled
        // Zipfian keys, so hot keys are deleted and re-created while others read them.
        match lower.as_str() {
            "crud" => {
                let mix = Mix { read: 0.25, insert: 0.25, update: 0.25, delete: 0.25, ..Mix::default() };
                let mut spec = WorkloadSpec::custom("crud", mix, Distribution::Uniform, record_count);
                spec.key_format = KeyFormat::Integer { order: KeyOrder::Hashed };
                return Ok(spec);
            }
            "delete-heavy" => {
                let mix = Mix { read: 0.2, insert: 0.3, update: 0.1, delete: 0.4, ..Mix::default() };
                let zipf = Distribution::ScrambledZipfian { theta: YCSB_ZIPFIAN_CONSTANT };
                let mut spec = WorkloadSpec::custom("delete-heavy", mix, zipf, record_count);
                spec.key_format = KeyFormat::Integer { order: KeyOrder::Hashed };
                return Ok(spec);
            }
            _ => {}
        }
        match lower.as_str() {
            "db-put" => return db("db-put", Mix { update: 1.0, ..Mix::default() }, KeyOrder::Hashed),
            "db-get" => return db("db-get", Mix { read: 1.0, ..Mix::default() }, KeyOrder::Hashed),
            "db-scan" => return db("db-scan", Mix { scan: 1.0, ..Mix::default() }, KeyOrder::Ordered),
            _ => {}
        }
        let short = lower.strip_prefix("ycsb-").or_else(|| lower.strip_prefix("ycsb")).unwrap_or(&lower);
        if short == "load" {
            return Ok(WorkloadSpec::ycsb_load(record_count));
        }
        let mut chars = short.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => WorkloadSpec::ycsb(c, record_count),
            _ => spec_error(format!(
                "unknown workload `{name}` (expected a, b, c, d, e, f, load, crud, delete-heavy, db-put, db-get or \
                 db-scan, with dense- or mica- before a letter)"
            )),
        }
    }

    /// Checks everything a stream relies on; the message is one line for the user.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.mix.validate()?;
        self.key_format.validate()?;
        if let Some(theta) = self.distribution.theta() {
            if !(0.0..1.0).contains(&theta) {
                return spec_error(format!("Zipfian theta must be in [0, 1), got {theta}"));
            }
        }
        if let Some(items) = self.zipfian_items {
            if !matches!(self.distribution, Distribution::Zipfian { .. }) {
                return spec_error(format!(
                    "zipf_items needs an unscrambled Zipfian (a dense- or mica- workload); {}'s keys are {}",
                    self.name,
                    match self.distribution {
                        Distribution::ScrambledZipfian { .. } =>
                            "YCSB's scrambled Zipfian, which draws over 10^10 items at every key count",
                        Distribution::Latest { .. } => "skewed to the latest inserts",
                        _ => "uniform or sequential",
                    }
                ));
            }
            if items < self.record_count.max(1) {
                return spec_error(format!(
                    "zipf_items ({items}) must be at least the keys loaded ({}): it is the paper's key count, \
                     not a cut",
                    self.record_count
                ));
            }
        }
        if !(1..=MAX_VALUE_BYTES).contains(&self.value_bytes) {
            return spec_error(format!("value size must be 1 to {MAX_VALUE_BYTES} bytes, got {}", self.value_bytes));
        }
        if self.mix.scan > 0.0 && (self.scan_length.min == 0 || self.scan_length.min > self.scan_length.max) {
            return spec_error(format!(
                "scan length must satisfy 1 <= min <= max, got {}..={}",
                self.scan_length.min, self.scan_length.max
            ));
        }
        let capacity = self.key_format.capacity();
        let needed = self.record_count.saturating_add(self.operation_count);
        if needed > capacity {
            return spec_error(format!(
                "{} keys do not fit {}-byte e-mail keys (at most {capacity})",
                needed,
                self.key_format.key_bytes()
            ));
        }
        Ok(())
    }

    /// The number of key numbers the Zipfian distributions draw over: the record count plus the
    /// inserts YCSB expects (`(int) (operation_count × insert fraction × 2.0)`).
    pub fn zipfian_key_space(&self) -> u64 {
        let expected_new = (self.operation_count as f64 * self.mix.fraction(OpKind::Insert) * 2.0) as u64;
        self.record_count.saturating_add(expected_new).max(1)
    }

    /// Client `client`'s stream of the first phase. Panics if the spec does not
    /// [`validate`](Self::validate).
    pub fn stream(&self, seed: u64, client: u32, shared: &SharedState) -> Stream {
        self.stream_in_phase(seed, 0, client, shared)
    }

    /// Client `client`'s stream in phase `phase` of a phased run (phases draw independent
    /// randomness and versions).
    pub fn stream_in_phase(&self, seed: u64, phase: u32, client: u32, shared: &SharedState) -> Stream {
        Stream::new(self, seed, phase, client, shared, false)
    }

    /// A stream of inserts of fresh keys only, forever (run until the first `Full` error: the
    /// maximum load factor). Clients share the key counter, so all inserted keys are distinct.
    pub fn fill_stream(&self, seed: u64, client: u32, shared: &SharedState) -> Stream {
        Stream::new(self, seed, 0, client, shared, true)
    }
}

/// One phase of a phased run: a spec and its operation count (over all clients).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub spec: WorkloadSpec,
    pub operations: u64,
}

impl Phase {
    /// Sets `spec.operation_count = operations` (for YCSB's key-space sizing).
    pub fn new(mut spec: WorkloadSpec, operations: u64) -> Phase {
        spec.operation_count = operations;
        Phase { spec, operations }
    }

    /// Client `client`'s stream for this phase, the `index`-th of the run. Use one
    /// [`SharedState`] for all phases so inserts of one phase are present in the next.
    pub fn stream(&self, index: u32, seed: u64, client: u32, shared: &SharedState) -> Stream {
        self.spec.stream_in_phase(seed, index, client, shared)
    }
}

/// Insert-only then mixed: a LOAD phase of `record_count` inserts (start from
/// `SharedState::new(0)`), then `operations` of `run` over those keys.
pub fn load_then_run(run: &WorkloadSpec, operations: u64) -> Vec<Phase> {
    let mut load = WorkloadSpec::ycsb_load(run.record_count);
    load.key_format = run.key_format;
    load.value_bytes = run.value_bytes;
    vec![Phase::new(load, run.record_count), Phase::new(run.clone(), operations)]
}

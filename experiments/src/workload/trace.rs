//! Traces: a text format of operations, reading, writing and partitioning it over clients,
//! and synthetic traces.

use super::*;

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceOp {
    Get {
        key: Vec<u8>,
    },
    /// An upsert of a `value_bytes`-byte value.
    Set {
        key: Vec<u8>,
        value_bytes: usize,
    },
    Del {
        key: Vec<u8>,
    },
    Scan {
        key: Vec<u8>,
        count: usize,
    },
}

/// Largest key a trace may name.
pub const TRACE_MAX_KEY_BYTES: usize = 256;
/// Largest value size and scan count a trace may name.
pub const TRACE_MAX_VALUE_BYTES: usize = 1 << 20;
pub const TRACE_MAX_SCAN_COUNT: usize = 1 << 20;

/// A malformed trace line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

impl fmt::Display for TraceOp {
    /// The trace line, without the newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceOp::Get { key } => write!(f, "get {}", hex(key)),
            TraceOp::Set { key, value_bytes } => write!(f, "set {} {value_bytes}", hex(key)),
            TraceOp::Del { key } => write!(f, "del {}", hex(key)),
            TraceOp::Scan { key, count } => write!(f, "scan {} {count}", hex(key)),
        }
    }
}

/// The key number a trace key stands for: FNV-1a 64 of its bytes (for [`value_for`]).
pub fn trace_key_number(key: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS_64;
    for &b in key {
        hash ^= b as u64;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash
}

impl TraceOp {
    pub fn key(&self) -> &[u8] {
        match self {
            TraceOp::Get { key } | TraceOp::Set { key, .. } | TraceOp::Del { key } | TraceOp::Scan { key, .. } => key,
        }
    }

    /// The operation to run: get → search, set → insert (an upsert) of [`value_for`] the key's
    /// [`trace_key_number`] at `version`, del → delete, scan → scan.
    pub fn to_workload_op(&self, version: u64) -> WorkloadOp {
        let key = Key { number: trace_key_number(self.key()), bytes: self.key().to_vec() };
        match self {
            TraceOp::Get { .. } => WorkloadOp::Search { key },
            TraceOp::Set { value_bytes, .. } => {
                let value = value_for(key.number, version, *value_bytes);
                WorkloadOp::Insert { key, value }
            }
            TraceOp::Del { .. } => WorkloadOp::Delete { key },
            TraceOp::Scan { count, .. } => WorkloadOp::Scan { start: key, limit: *count },
        }
    }
}

pub(crate) fn parse_hex_key(token: &str) -> Result<Vec<u8>, String> {
    if token.len() % 2 != 0 {
        return Err(format!("key `{token}` has an odd number of hex digits"));
    }
    if token.len() / 2 > TRACE_MAX_KEY_BYTES {
        return Err(format!("key is {} bytes, more than {TRACE_MAX_KEY_BYTES}", token.len() / 2));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    token
        .as_bytes()
        .chunks(2)
        .map(|pair| match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(format!("key `{token}` is not hexadecimal")),
        })
        .collect()
}

pub(crate) fn parse_count(token: &str, what: &str, min: usize, max: usize) -> Result<usize, String> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} `{token}` is not a decimal number"));
    }
    match token.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{what} `{token}` is out of range {min}..={max}")),
    }
}

pub(crate) fn parse_trace_line(line: &str) -> Result<Option<TraceOp>, String> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    let fields: Vec<&str> = trimmed.split_ascii_whitespace().collect();
    let (arity, usage) = match fields[0] {
        "get" => (2, "get <key-hex>"),
        "set" => (3, "set <key-hex> <value-bytes>"),
        "del" => (2, "del <key-hex>"),
        "scan" => (3, "scan <key-hex> <count>"),
        other => return Err(format!("unknown operation `{other}` (expected get, set, del or scan)")),
    };
    if fields.len() != arity {
        return Err(format!("expected `{usage}`, got {} field(s)", fields.len()));
    }
    let key = parse_hex_key(fields[1])?;
    if key.is_empty() {
        return Err("empty key".to_string());
    }
    Ok(Some(match fields[0] {
        "get" => TraceOp::Get { key },
        "del" => TraceOp::Del { key },
        "set" => TraceOp::Set { key, value_bytes: parse_count(fields[2], "value size", 0, TRACE_MAX_VALUE_BYTES)? },
        _ => TraceOp::Scan { key, count: parse_count(fields[2], "scan count", 1, TRACE_MAX_SCAN_COUNT)? },
    }))
}

/// Reads a trace (format in the module documentation): one operation a line, `#` comment lines
/// and blank lines skipped, fields separated by spaces or tabs, operation names lowercase. The
/// first malformed line is an error naming its line number.
pub fn read_trace(text: &str) -> Result<Vec<TraceOp>, TraceError> {
    let mut ops = Vec::new();
    for (index, line) in text.lines().enumerate() {
        match parse_trace_line(line) {
            Ok(Some(op)) => ops.push(op),
            Ok(None) => {}
            Err(message) => return Err(TraceError { line: index + 1, message }),
        }
    }
    Ok(ops)
}

/// Writes operations in the trace format, one a line.
pub fn write_trace(ops: &[TraceOp]) -> String {
    let mut out = String::new();
    for op in ops {
        out.push_str(&op.to_string());
        out.push('\n');
    }
    out
}

/// Splits a trace over `clients` clients round-robin (operation i goes to client i mod clients).
pub fn partition_trace(ops: &[TraceOp], clients: usize) -> Vec<Vec<TraceOp>> {
    assert!(clients > 0, "at least one client");
    let mut parts = vec![Vec::new(); clients];
    for (i, op) in ops.iter().enumerate() {
        parts[i % clients].push(op.clone());
    }
    parts
}

/// A synthetic stand-in for a cache trace that cannot be shipped: point gets and sets whose keys
/// follow a Zipf law with exponent `zipf_alpha` (any value > 0, sampled exactly from a cumulative
/// table) over `distinct_keys` keys.
///
/// The presets imitate the two Twitter clusters Dolphin replayed (Yang et al., OSDI'20; the
/// per-cluster statistics are in twitter/cache-trace, `stat/2020Mar.md`). What each field comes
/// from:
///
/// | field | cluster8 | cluster9 | source |
/// |---|---|---|---|
/// | `get_fraction` | 0.50 (set 0.50) | 0.99 (set 0.01) | stat table "operation"; cluster9's missing 1% **assumed** to be sets |
/// | `zipf_alpha` | 1.7366 | 1.6796 | stat table "Zipf alpha" |
/// | `key_bytes` | 8 | 8 | **assumed** per Dolphin digest §8.20 (artifact cuts keys to 8 B); the traces' mean keys are 23 B and 32 B |
/// | `value_bytes` | 8 | 8 | **assumed** per Dolphin digest §8.20; the traces' mean values are 9497 B and 39 B |
/// | `distinct_keys` | 10^6 | 10^6 | **assumed**: the trace slice Dolphin used is unknown |
///
/// Rank r's key is the big-endian SplitMix64 finaliser (a bijection of `u64`) of r + 1, which is
/// never zero, right-aligned after a namespace prefix (`tw:` repeated) when `key_bytes > 8`, so
/// keys are unique, non-zero and scattered. The stand-in
/// keeps only the published get/set ratio and popularity skew: no TTLs, no diurnal changes, no
/// value-size distribution, no one-hit wonders. Replay it after loading every key
/// ([`preload_keys`](Self::preload_keys), assumed, so that gets hit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticTrace {
    pub name: String,
    pub get_fraction: f64,
    pub zipf_alpha: f64,
    pub distinct_keys: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
}

impl SyntheticTrace {
    /// Twitter cluster8 (write-intensive; Dolphin Fig. 9).
    pub fn twitter_cluster8() -> SyntheticTrace {
        SyntheticTrace {
            name: "twitter-cluster8".to_string(),
            get_fraction: 0.50,
            zipf_alpha: 1.7366,
            distinct_keys: 1_000_000,
            key_bytes: 8,
            value_bytes: 8,
        }
    }

    /// Twitter cluster9 (read-mostly; Dolphin Fig. 9).
    pub fn twitter_cluster9() -> SyntheticTrace {
        SyntheticTrace {
            name: "twitter-cluster9".to_string(),
            get_fraction: 0.99,
            zipf_alpha: 1.6796,
            distinct_keys: 1_000_000,
            key_bytes: 8,
            value_bytes: 8,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if !(0.0..=1.0).contains(&self.get_fraction) {
            return spec_error(format!("get fraction must be in [0, 1], got {}", self.get_fraction));
        }
        if !(self.zipf_alpha.is_finite() && self.zipf_alpha > 0.0) {
            return spec_error(format!("Zipf alpha must be > 0, got {}", self.zipf_alpha));
        }
        if !(1..=1 << 26).contains(&self.distinct_keys) {
            return spec_error(format!("distinct keys must be 1 to 2^26, got {}", self.distinct_keys));
        }
        if !(MIN_KEY_BYTES..=TRACE_MAX_KEY_BYTES).contains(&self.key_bytes) {
            return spec_error(format!("key size must be 8 to 256 bytes, got {}", self.key_bytes));
        }
        if self.value_bytes > TRACE_MAX_VALUE_BYTES {
            return spec_error(format!("value size must be at most {TRACE_MAX_VALUE_BYTES} bytes"));
        }
        Ok(())
    }

    /// The key of popularity rank `rank` (0 is the hottest).
    pub fn key_of_rank(&self, rank: u64) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_bytes);
        let prefix = b"tw:";
        while key.len() < self.key_bytes - 8 {
            key.push(prefix[key.len() % prefix.len()]);
        }
        key.extend_from_slice(&mix64(rank + 1).to_be_bytes());
        key
    }

    /// Every key, for warming the index before the replay.
    pub fn preload_keys(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..self.distinct_keys).map(|r| self.key_of_rank(r))
    }

    /// The probability of rank `rank`: `(rank+1)^−α / ζ(distinct_keys, α)`.
    pub fn rank_probability(&self, rank: u64) -> f64 {
        math::pow((rank + 1) as f64, -self.zipf_alpha) / math::zeta(self.distinct_keys, self.zipf_alpha)
    }

    fn cumulative(&self) -> Vec<f64> {
        let mut sum = 0.0;
        (1..=self.distinct_keys)
            .map(|i| {
                sum += math::pow(i as f64, -self.zipf_alpha);
                sum
            })
            .collect()
    }

    /// `operations` operations, deterministic from `seed`. Panics if the profile does not
    /// [`validate`](Self::validate).
    pub fn generate(&self, seed: u64, operations: usize) -> Vec<TraceOp> {
        if let Err(e) = self.validate() {
            panic!("invalid synthetic trace `{}`: {e}", self.name);
        }
        let cumulative = self.cumulative();
        let total = *cumulative.last().expect("at least one key");
        let mut rng = chacha(seed, PURPOSE_TRACE, 0, 0);
        (0..operations)
            .map(|_| {
                let is_get = unit(&mut rng) < self.get_fraction;
                let x = unit(&mut rng) * total;
                let rank = cumulative.partition_point(|&c| c <= x).min(cumulative.len() - 1) as u64;
                let key = self.key_of_rank(rank);
                if is_get { TraceOp::Get { key } } else { TraceOp::Set { key, value_bytes: self.value_bytes } }
            })
            .collect()
    }

    /// [`generate`](Self::generate) written in the trace format, with a header of comments
    /// recording the parameters.
    pub fn write(&self, seed: u64, operations: usize) -> String {
        let mut out = format!(
            "# synthetic stand-in `{}` (dmkit): seed {seed}, {operations} operations\n\
             # get fraction {}, Zipf alpha {}, {} distinct keys, {}-byte keys, {}-byte values\n",
            self.name, self.get_fraction, self.zipf_alpha, self.distinct_keys, self.key_bytes, self.value_bytes
        );
        out.push_str(&write_trace(&self.generate(seed, operations)));
        out
    }
}

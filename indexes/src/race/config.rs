//! RACE's options, and its named configurations: safe mode and the paper's behaviours, each
//! alone or all together ([`Paper`]).

use super::MAX_DEPTH;
use super::layout::{self, Geometry};
use crate::common::chunk::ChunkOptions;
use std::collections::BTreeSet;

/// Options of one RACE table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceOptions {
    /// Largest key (keys are 1..=key_bytes bytes).
    pub key_bytes: u32,
    /// Largest value.
    pub value_bytes: u32,
    /// Slots per bucket (K).
    pub slots: u32,
    /// Bucket groups per subtable (G).
    pub groups: u32,
    /// Global depth at creation: `2^initial_depth` subtables.
    pub initial_depth: u8,
    /// Directory reservation: `2^max_depth` entries (M).
    pub max_depth: u8,
    pub memory_nodes: u16,
    pub chunk_bytes: u64,
    pub max_retries: u32,
    /// Which of the paper's own behaviours replace the digest's safe choices (all off: safe
    /// mode; all on: the faithful mode).
    pub paper: Paper,
    pub plants: BTreeSet<&'static str>,
}

impl Default for RaceOptions {
    fn default() -> Self {
        RaceOptions {
            key_bytes: 16,
            value_bytes: 32,
            slots: 7,
            groups: 4096,
            initial_depth: 4,
            max_depth: 16,
            memory_nodes: 1,
            chunk_bytes: crate::common::chunk::DEFAULT_CHUNK_BYTES,
            max_retries: 100_000,
            paper: Paper::default(),
            plants: BTreeSet::new(),
        }
    }
}

/// The paper's behaviours, each of which opens holes the digest predicts (§4.5); each can be
/// switched on alone so that a scenario shows one hole at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Paper {
    /// Algorithm 1: an insert publishes without looking for its key, then removes duplicates
    /// by the agreement rule (K3, and concurrent inserts that both report "absent").
    pub insert: bool,
    /// D15's faithful column: inserts, updates and deletes act on a subtable while a split
    /// fills it, and the mover does not freeze what it copies (K4, K5, K6).
    pub split: bool,
    /// A block is zeroed and reused as soon as its pointer leaves its slot, and a search skips
    /// a block that no longer holds its key (K1, K2).
    pub reuse: bool,
    /// The printed pseudo-code's restart paths and results: updates and deletes restart on a
    /// stale bucket without re-reading the directory, and succeed on an absent key (K7).
    pub printed: bool,
}

impl Paper {
    /// Configuration names and what each switches on.
    pub const CONFIGS: [(&'static str, Paper); 6] = [
        ("safe", Paper { insert: false, split: false, reuse: false, printed: false }),
        ("faithful", Paper { insert: true, split: true, reuse: true, printed: true }),
        ("paper-insert", Paper { insert: true, split: false, reuse: false, printed: false }),
        ("paper-split", Paper { insert: false, split: true, reuse: false, printed: false }),
        ("paper-reuse", Paper { insert: false, split: false, reuse: true, printed: false }),
        ("paper-printed", Paper { insert: false, split: false, reuse: false, printed: true }),
    ];

    /// The configuration called `name` (`default` is `safe`).
    pub fn named(name: &str) -> Result<Paper, String> {
        let name = if name == "default" { "safe" } else { name };
        Paper::CONFIGS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p).ok_or_else(|| {
            let names: Vec<&str> = Paper::CONFIGS.iter().map(|(n, _)| *n).collect();
            format!("race has configurations {} (safe is the default), not '{name}'", names.join(", "))
        })
    }
}

impl RaceOptions {
    pub fn geometry(&self) -> Geometry {
        Geometry { slots: self.slots as usize, groups: self.groups as usize, max_depth: self.max_depth }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=1024).contains(&self.key_bytes) || self.value_bytes == 0 {
            return Err(format!(
                "RACE keys are 1..=1024 bytes and values at least 1, not {}/{}",
                self.key_bytes, self.value_bytes
            ));
        }
        if layout::block_units(self.key_bytes as usize, self.value_bytes as usize) > layout::MAX_UNITS {
            return Err(format!("a KV block holds at most {} bytes", layout::MAX_UNITS * layout::UNIT - 16));
        }
        if !(1..=64).contains(&self.slots) || self.groups < 2 {
            return Err(format!(
                "RACE needs 1..=64 slots per bucket and at least 2 groups, not {}/{}",
                self.slots, self.groups
            ));
        }
        if self.max_depth > MAX_DEPTH {
            return Err(format!(
                "the directory reservation 2^{} does not fit (at most 2^{MAX_DEPTH} entries)",
                self.max_depth
            ));
        }
        if self.initial_depth > self.max_depth {
            return Err("the initial depth exceeds the directory reservation".into());
        }
        if self.memory_nodes == 0 || self.memory_nodes > 256 {
            return Err("RACE spreads over 1..=256 memory nodes".into());
        }
        if self.max_retries == 0 {
            return Err("max_retries must be at least 1".into());
        }
        ChunkOptions::paged(self.memory_nodes, self.chunk_bytes).validate()
    }
}

#[cfg(test)]
mod tests {
    use super::Paper;

    /// Every name finds its own configuration, `default` the safe one, and a wrong name an
    /// error listing them (a mutation run found no test of the look-up).
    #[test]
    fn configurations_are_found_by_name() {
        for (name, paper) in Paper::CONFIGS {
            assert_eq!(Paper::named(name), Ok(paper), "{name}");
        }
        assert_eq!(Paper::named("default"), Ok(Paper::default()));
        assert_eq!(Paper::named("safe"), Ok(Paper::default()));
        let err = Paper::named("unsafe").expect_err("no such configuration");
        assert!(err.contains("paper-split") && err.contains("'unsafe'"), "{err}");
    }
}

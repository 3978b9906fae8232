//! CHIME's options and the named configurations of its factor analysis (digest §5.3, Appendix B).
//!
//! | name | vacancy bitmap | replicas | sibling validation | speculative read | values |
//! |---|---|---|---|---|---|
//! | `chime` (default) | yes | yes | yes | yes | inline |
//! | `chime-no-sr` | yes | yes | yes | no | inline |
//! | `chime-no-sbv` | yes | yes | fences in every replica | no | inline |
//! | `chime-no-replication` | yes | one header | fences | no | inline |
//! | `chime-hopscotch` | no (inserts read the leaf) | one header | fences | no | inline |
//! | `chime-indirect` | yes | yes | yes | yes | 8-B pointer to a block |
//!
//! `chime-indirect` is CHIME-Indirect (digest §8.22): keys of 1..=`key_bytes` bytes and values
//! of any length live in blocks; a leaf entry holds the key's first `prefix` bytes (8 unless
//! overridden; zero-padded), which order the tree and pick the home, and the block's pointer.
//! Keys that share a prefix share a home and a leaf, so at most H of them fit in one tree (more
//! is `IndexError::Full`); widen `prefix` for keys with long common prefixes.
//!
//! The rows from `chime-hopscotch` up are Fig. 15a's ladder after "Sherman + hopscotch leaf"
//! (Sherman itself is `sherman:sherman-chime`). Any name takes overrides after commas:
//! `chime,hood=4,span=128,internal=64`, for the H and span sweeps (Figs. 18e/f, 19).

use std::collections::BTreeSet;

/// Options of one CHIME tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChimeOptions {
    /// The configuration name these options came from (with its overrides).
    pub config: String,
    pub key_bytes: u32,
    /// Inline value bytes; in indirect mode, the largest value (blocks hold the values).
    pub value_bytes: u32,
    /// Keys and values live in blocks; leaf entries hold a key prefix and an 8-byte pointer
    /// (CHIME-Indirect, digest §8.22). Keys are then 1..=`key_bytes` bytes long.
    pub indirect: bool,
    /// In indirect mode, the key prefix a leaf entry (and an internal pivot) holds.
    pub prefix: u32,
    /// Leaf span S.
    pub span: u32,
    /// Neighbourhood H (1..=14; bits 15 and 14 of the bitmap are flags).
    pub hood: u32,
    /// Internal span S_i.
    pub internal_span: u32,
    /// The lock word carries the vacancy bitmap, so an insert reads only its hop range.
    pub vacancy_bitmap: bool,
    /// Leaf metadata replicated in front of every H entries (else one header, read alongside).
    pub replication: bool,
    /// Sibling-based validation (else fence keys in the leaf metadata).
    pub sibling_validation: bool,
    /// The hotspot buffer and speculative single-entry reads.
    pub speculative_read: bool,
    /// Read delegation and write combining (on for every system in CHIME's evaluation).
    pub rdwc: bool,
    pub rdwc_slots: u32,
    /// Internal-node cache budget per compute node, bytes (70 MB: the artifact's 100 MB minus the
    /// hotspot buffer, digest §8.11).
    pub cache_bytes: u64,
    /// Hotspot buffer budget per compute node, bytes (30 MB).
    pub hotspot_bytes: u64,
    pub memory_nodes: u16,
    pub chunk_bytes: u64,
    pub max_retries: u32,
    pub plants: BTreeSet<&'static str>,
}

/// Every configuration name, the default first.
pub const CONFIGS: [&str; 6] =
    ["chime", "chime-no-sr", "chime-no-sbv", "chime-no-replication", "chime-hopscotch", "chime-indirect"];

const MB: u64 = 1 << 20;

impl Default for ChimeOptions {
    fn default() -> Self {
        ChimeOptions::named("chime", 8, 8).expect("the default configuration is valid")
    }
}

impl ChimeOptions {
    /// The named configuration (with `,name=value` overrides) for the given key/value sizes.
    pub fn named(spec: &str, key_bytes: u32, value_bytes: u32) -> Result<ChimeOptions, String> {
        let (name, overrides) = crate::registry::config_overrides(spec);
        let Some(base) = CONFIGS.iter().copied().find(|c| *c == name) else {
            return Err(format!("CHIME has no configuration '{name}' (configurations: {})", CONFIGS.join(", ")));
        };
        let mut o = ChimeOptions {
            config: spec.to_string(),
            key_bytes,
            value_bytes,
            indirect: false,
            prefix: 8,
            span: 64,
            hood: 8,
            internal_span: 64,
            vacancy_bitmap: true,
            replication: true,
            sibling_validation: true,
            speculative_read: true,
            rdwc: true,
            rdwc_slots: 1024,
            cache_bytes: 70 * MB,
            hotspot_bytes: 30 * MB,
            memory_nodes: 1,
            chunk_bytes: 16 * MB,
            max_retries: 100_000,
            plants: BTreeSet::new(),
        };
        let ladder = CONFIGS.iter().position(|c| *c == base).expect("found");
        if (1..=4).contains(&ladder) {
            o.speculative_read = false;
        }
        if (2..=4).contains(&ladder) {
            o.sibling_validation = false;
        }
        if (3..=4).contains(&ladder) {
            o.replication = false;
        }
        if ladder == 4 {
            o.vacancy_bitmap = false;
        }
        if base == "chime-indirect" {
            o.indirect = true;
        }
        for over in overrides {
            let (k, n) = over?;
            match k {
                "hood" => o.hood = n as u32,
                "span" => o.span = n as u32,
                "internal" => o.internal_span = n as u32,
                "hotspot_mb" => o.hotspot_bytes = n * MB,
                "hotspot_kb" => o.hotspot_bytes = n << 10,
                "cache_kb" => o.cache_bytes = n << 10,
                "prefix" => o.prefix = n as u32,
                other => {
                    return Err(format!(
                        "unknown override '{other}' (hood, span, internal, hotspot_mb, hotspot_kb, cache_kb, prefix)"
                    ));
                }
            }
        }
        Ok(o)
    }

    /// The same options with small nodes (checking presets: splits within a few operations).
    pub fn with_spans(mut self, span: u32, hood: u32, internal_span: u32) -> ChimeOptions {
        (self.span, self.hood, self.internal_span) = (span, hood, internal_span);
        self
    }

    /// Bytes of an entry's key field and of an internal pivot: the key, or in indirect mode its
    /// prefix.
    pub fn slot_key_bytes(&self) -> u32 {
        if self.indirect { self.prefix.min(self.key_bytes) } else { self.key_bytes }
    }

    /// Bytes of an entry's value field.
    pub fn value_field(&self) -> u32 {
        if self.indirect { 8 } else { self.value_bytes }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=256).contains(&self.key_bytes) {
            return Err(format!("CHIME keys are 1..=256 bytes, not {}", self.key_bytes));
        }
        if self.value_bytes == 0 || (!self.indirect && self.value_bytes > 1024) {
            return Err(format!("inline values are 1..=1024 bytes, not {}", self.value_bytes));
        }
        if self.indirect && self.key_bytes + self.value_bytes > super::MAX_BLOCK_PAYLOAD as u32 {
            return Err(format!(
                "an indirect block holds at most {} bytes of key and value, not {} + {}",
                super::MAX_BLOCK_PAYLOAD,
                self.key_bytes,
                self.value_bytes
            ));
        }
        if self.indirect && self.prefix == 0 {
            return Err("the key prefix in leaf entries needs at least one byte".into());
        }
        if !(1..=super::layout::MAX_HOOD as u32).contains(&self.hood) {
            return Err(format!("the neighbourhood is 1..={} entries, not {}", super::layout::MAX_HOOD, self.hood));
        }
        if self.span < self.hood.max(2) || self.span > 1024 {
            return Err(format!("the leaf span is {}..=1024 entries, not {}", self.hood.max(2), self.span));
        }
        if !(2..=1024).contains(&self.internal_span) {
            return Err(format!("the internal span is 2..=1024 entries, not {}", self.internal_span));
        }
        if self.memory_nodes == 0 || self.memory_nodes > 1024 {
            return Err("CHIME spreads over 1..=1024 memory nodes".into());
        }
        if self.max_retries == 0 {
            return Err("max_retries must be positive".into());
        }
        if self.rdwc && self.rdwc_slots == 0 {
            return Err("RDWC needs at least one slot".into());
        }
        let node = super::leaf_layout(self).alloc_bytes().max(super::internal_layout(self).alloc_bytes());
        if self.chunk_bytes < 4 * node as u64 {
            return Err(format!("chunks of {} bytes are too small for nodes of {node}", self.chunk_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_and_overrides() {
        for name in CONFIGS {
            let o = ChimeOptions::named(name, 8, 8).unwrap();
            o.validate().unwrap();
        }
        let h = ChimeOptions::named("chime-hopscotch", 8, 8).unwrap();
        assert!(!h.vacancy_bitmap && !h.replication && !h.sibling_validation && !h.speculative_read);
        let o = ChimeOptions::named("chime,hood=4,span=128", 8, 8).unwrap();
        assert_eq!((o.hood, o.span), (4, 128));
        assert!(ChimeOptions::named("chime,hood=16", 8, 8).unwrap().validate().is_err());
        assert!(ChimeOptions::named("chime,colour=3", 8, 8).unwrap_err().contains("unknown override"));
        assert!(ChimeOptions::named("nope", 8, 8).unwrap_err().contains("chime-indirect"));
    }
}

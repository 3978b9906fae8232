//! Dolphin's options and its named configurations (`hardened`, `faithful`, `digest`, each with
//! an `-even` split): the protocol, the leaf format and the split a run uses.

use super::layout::{LeafFormat, LeafLayout, MAX_MEMORY_NODES, Split};
use crate::common::chunk::ChunkOptions;
use std::collections::BTreeSet;

/// Which protocol the leaves run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The digest's §4.4 protocol.
    Hardened,
    /// The paper's.
    Paper,
}

/// Dolphin's options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DolphinOptions {
    /// Key slots per leaf (65 in the artifact).
    pub leaf_slots: u32,
    pub split: Split,
    pub protocol: Protocol,
    pub format: LeafFormat,
    /// Compute-node cache budget in bytes (the artifact's default is 200 MB).
    pub cache_bytes: u64,
    pub memory_nodes: u16,
    pub chunk_bytes: u64,
    /// Bound on retries of one operation before [`IndexError::RetriesExhausted`].
    ///
    /// [`IndexError::RetriesExhausted`]: crate::IndexError::RetriesExhausted
    pub max_retries: u32,
    /// Read delegation and write combining on each compute node (the artifact's, inherited from
    /// SMART: digest §2.8, §8.14), and the slots of its table.
    pub read_delegation: bool,
    pub write_combining: bool,
    pub rdwc_slots: u32,
    pub plants: BTreeSet<&'static str>,
}

impl Default for DolphinOptions {
    fn default() -> Self {
        DolphinOptions {
            leaf_slots: 65,
            split: Split::ThreeQuarters,
            protocol: Protocol::Hardened,
            format: LeafFormat::Versioned,
            cache_bytes: 200 << 20,
            memory_nodes: 1,
            chunk_bytes: crate::common::chunk::DEFAULT_CHUNK_BYTES,
            max_retries: 100_000,
            read_delegation: true,
            write_combining: true,
            rdwc_slots: 1024,
            plants: BTreeSet::new(),
        }
    }
}

/// Named configurations, for `--config`: the protocol and leaf format, with the artifact's
/// 3/4 split; `-even` after any of them splits evenly (the paper's text).
pub const CONFIGS: [&str; 6] = ["hardened", "faithful", "digest", "hardened-even", "faithful-even", "digest-even"];

impl DolphinOptions {
    /// Applies the named configuration: protocol, leaf format and split.
    pub fn configure(&mut self, config: &str) -> Result<(), String> {
        let (name, split) = match config.strip_suffix("-even") {
            Some(name) => (name, Split::Even),
            None => (config, Split::ThreeQuarters),
        };
        (self.protocol, self.format) = match name {
            "hardened" => (Protocol::Hardened, LeafFormat::Versioned),
            "faithful" => (Protocol::Paper, LeafFormat::FrontRear),
            "digest" => (Protocol::Hardened, LeafFormat::FrontRear),
            _ => return Err(format!("dolphin has no configuration '{config}' (it has: {})", CONFIGS.join(", "))),
        };
        self.split = split;
        Ok(())
    }

    pub fn layout(&self) -> LeafLayout {
        LeafLayout { slots: self.leaf_slots as usize, format: self.format }
    }

    pub fn special_type(&self) -> u8 {
        self.layout().special_type(self.split)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(4..=1024).contains(&self.leaf_slots) {
            return Err(format!("dolphin leaves hold 4..=1024 slots, not {}", self.leaf_slots));
        }
        if self.memory_nodes == 0 || self.memory_nodes > MAX_MEMORY_NODES {
            return Err(format!("dolphin's entries name 1..={MAX_MEMORY_NODES} memory nodes"));
        }
        if self.max_retries == 0 {
            return Err("max_retries must be positive".into());
        }
        if self.rdwc_slots == 0 && (self.read_delegation || self.write_combining) {
            return Err("read delegation and write combining need rdwc_slots > 0".into());
        }
        ChunkOptions::paged(self.memory_nodes, self.chunk_bytes).validate()
    }
}

//! SMART's options and named configurations: the paper's factor analysis (Fig. 18) as steps
//! from the ART port to SMART, each adding one technique.
//!
//! | name | internal nodes | leaf update | rear lock | read delegation | write combining | node types |
//! |---|---|---|---|---|---|---|
//! | `art` (index `art`) | ROWEX: node locks on insert (HOCL) | out of place (RCU) | – | off | off | 4/16/48/256 |
//! | `smart-lockfree` | lock-free (CAS on slots) | out of place | – | off | off | 7 types |
//! | `smart-inplace` | lock-free | in place, lock then unlock | no | off | off | 7 types |
//! | `smart-rearlock` | lock-free | in place | yes (one WRITE) | off | off | 7 types |
//! | `smart-rd` | lock-free | in place | yes | on | off | 7 types |
//! | `smart` (default) | lock-free | in place | yes | on | on | 7 types |
//! | `smart-paper` | lock-free | in place | yes | the paper's window | on | 7 types |
//!
//! `smart-no-rdwc` is `smart-rearlock` under the name the paper's Fig. 19 uses. Every
//! configuration has the digest's safety fixes (H1–H5, H9, H10); the paper's behaviour at each
//! hazard is a planted bug (`dmkit check --plant`). `smart-paper` is the one configuration that runs
//! a hazard's unsafe side on purpose: the paper's read-delegation window (H6 open), so that a
//! figure can show the paper's protocol beside the safe one (the gap between them is what the
//! safety costs).

use super::layout::NodeTypes;
use std::collections::BTreeSet;

/// Options of one SMART (or ART) tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmartOptions {
    /// The named configuration these options came from.
    pub config: &'static str,
    pub key_bytes: u32,
    pub value_bytes: u32,
    pub node_types: NodeTypes,
    /// ROWEX: an insert locks every internal node it visits (the ART baseline), through
    /// Sherman's hierarchical lock (on-chip lock words and the local lock table).
    pub internal_locks: bool,
    /// Updates write a new leaf and swing the parent slot (RCU), instead of in place.
    pub out_of_place_update: bool,
    /// In-place updates release the lock with the data's WRITE (the lock is the leaf's last
    /// word); else a second WRITE after the data lands.
    pub rear_lock: bool,
    pub read_delegation: bool,
    /// The paper's read-delegation window, unsafe (H6): followers that join until the leader's
    /// leaf READ has returned take its result, and a result that depended on an earlier READ is
    /// shared too (what plants `rdwc-late-mark` and `rdwc-no-unmark` do together). Off in every
    /// configuration but `smart-paper`.
    pub paper_read_window: bool,
    pub write_combining: bool,
    /// The hand-over of same-key out-of-place updates on a compute node (SMART's artifact builds
    /// every configuration without write combining with it, `TREE_TEST_HOCL_HANDOVER`): updates
    /// of one key on one compute node are serialised, and those that queued while another was
    /// running are combined into the next one's slot CAS ([`crate::common::rdwc`], queued
    /// mode). Applies to updates of out-of-place configurations only (the artifact's
    /// `out_of_place_update_leaf` disables it for inserts); the artifact's other hand-over, of
    /// in-place updates' leaf locks, is not modelled.
    pub update_handover: bool,
    /// Local RDWC slots per compute node (the digest's 1,024; the paper's knee is 128).
    pub rdwc_slots: u32,
    /// Radix cache budget per compute node, bytes.
    pub cache_bytes: u64,
    /// Internal-node lock table per memory node (ART), bytes of 8-byte lock words.
    pub lock_table_bytes: u64,
    /// Local holders sharing one global node lock (ART's HOCL hand-over).
    pub max_handover: u32,
    pub memory_nodes: u16,
    pub chunk_bytes: u64,
    /// Alignment (and so granularity) of every node and leaf allocated: 64 bytes, the pointer
    /// granularity, by default; SMART's artifact allocates at 256 (`ALLOC_ALLIGN_BIT = 8`,
    /// digest §2.1), so a leaf of 8-byte keys and values takes 256 bytes and a node a 2,304-byte
    /// stride. Only the remote footprint and the addresses change: every READ and WRITE is of
    /// the same bytes. Override `alloc_align=256`.
    pub alloc_align: u64,
    /// Charge the radix cache as SMART's artifact does with its ART-indexed cache (the
    /// default build, and CHIME's): a cached node's local slot (17 B) and its prefix stay
    /// charged after the node's entry is evicted or invalidated, since the local tree never
    /// removes a slot, until the budget holds nothing but them and the whole cache is dropped
    /// and rebuilt ([`super::cache::RadixCache`]). Off, eviction frees the whole charge.
    /// Override `keep_slots=1`.
    pub keep_slots: bool,
    /// Bound on the attempts of one operation (re-reads, lock CASes, slot CASes).
    pub max_retries: u32,
    pub plants: BTreeSet<&'static str>,
}

/// Every configuration name, the default first.
pub const CONFIGS: [&str; 8] =
    ["smart", "smart-paper", "smart-rd", "smart-rearlock", "smart-no-rdwc", "smart-inplace", "smart-lockfree", "art"];

const MB: u64 = 1 << 20;

impl Default for SmartOptions {
    fn default() -> Self {
        SmartOptions::named("smart", 8, 8).expect("the default configuration is valid")
    }
}

impl SmartOptions {
    /// The named configuration for `key_bytes`-byte keys and `value_bytes`-byte values, with
    /// optional overrides after it: `smart-paper,rdwc_slots=128,cache_mb=100` (`rdwc_slots`,
    /// `cache_mb`, `cache_kb`, `max_handover`, `lock_table_kb`, `alloc_align`, `keep_slots`), as CHIME's configurations take
    /// them, for sensitivity runs (the paper's RDWC knee is 128 slots, the digest's default
    /// 1,024).
    pub fn named(spec: &str, key_bytes: u32, value_bytes: u32) -> Result<SmartOptions, String> {
        let (name, overrides) = crate::registry::config_overrides(spec);
        let mut o = SmartOptions::base(name, key_bytes, value_bytes)?;
        for over in overrides {
            let (k, n) = over?;
            let small = || u32::try_from(n).map_err(|_| format!("override {k}={n}: {n} is too large"));
            match k {
                "rdwc_slots" => o.rdwc_slots = small()?,
                "cache_mb" => o.cache_bytes = n.saturating_mul(MB),
                "cache_kb" => o.cache_bytes = n.saturating_mul(1 << 10),
                "max_handover" => o.max_handover = small()?,
                "lock_table_kb" => o.lock_table_bytes = n.saturating_mul(1 << 10),
                "alloc_align" => o.alloc_align = n,
                "keep_slots" if n <= 1 => o.keep_slots = n == 1,
                "keep_slots" => return Err(format!("override keep_slots={n}: 0 or 1")),
                other => {
                    return Err(format!(
                        "unknown override '{other}' (rdwc_slots, cache_mb, cache_kb, max_handover, lock_table_kb, \
                         alloc_align, keep_slots)"
                    ));
                }
            }
        }
        Ok(o)
    }

    fn base(name: &str, key_bytes: u32, value_bytes: u32) -> Result<SmartOptions, String> {
        let Some(config) = CONFIGS.iter().copied().find(|c| *c == name) else {
            return Err(format!("SMART has no configuration '{name}' (configurations: {})", CONFIGS.join(", ")));
        };
        let mut o = SmartOptions {
            config,
            key_bytes,
            value_bytes,
            node_types: NodeTypes::smart(),
            internal_locks: false,
            out_of_place_update: false,
            rear_lock: true,
            read_delegation: true,
            paper_read_window: false,
            write_combining: true,
            update_handover: false,
            rdwc_slots: 1024,
            cache_bytes: 600 * MB,
            lock_table_bytes: 128 << 10,
            max_handover: 8,
            memory_nodes: 1,
            chunk_bytes: 16 * MB,
            alloc_align: super::layout::NODE_ALIGN,
            keep_slots: false,
            max_retries: 10_000,
            plants: BTreeSet::new(),
        };
        match config {
            "smart" => {}
            "smart-paper" => o.paper_read_window = true,
            "smart-rd" => o.write_combining = false,
            "smart-rearlock" | "smart-no-rdwc" => (o.read_delegation, o.write_combining) = (false, false),
            "smart-inplace" => (o.read_delegation, o.write_combining, o.rear_lock) = (false, false, false),
            "smart-lockfree" => {
                (o.read_delegation, o.write_combining, o.out_of_place_update) = (false, false, true);
                o.update_handover = true;
            }
            "art" => {
                (o.read_delegation, o.write_combining, o.out_of_place_update) = (false, false, true);
                o.update_handover = true;
                o.internal_locks = true;
                o.node_types = NodeTypes::art();
            }
            _ => unreachable!("every name in CONFIGS is matched"),
        }
        Ok(o)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(8..=256).contains(&self.key_bytes) {
            return Err(format!("key_bytes {} is not within 8..=256", self.key_bytes));
        }
        if !(1..=4096).contains(&self.value_bytes) {
            return Err(format!("value_bytes {} is not within 1..=4096", self.value_bytes));
        }
        if self.memory_nodes == 0 || self.memory_nodes > 256 {
            return Err(format!(
                "memory_nodes {} is not within 1..=256 (slots hold 8-bit node ids)",
                self.memory_nodes
            ));
        }
        if self.node_types.count() == 0 || self.node_types.capacity(self.node_types.largest()) != 256 {
            return Err("the largest node type must hold 256 slots".into());
        }
        if self.rdwc_slots == 0 && (self.read_delegation || self.write_combining || self.update_handover) {
            return Err("RDWC and the update hand-over need at least one local slot".into());
        }
        if self.update_handover && (self.write_combining || !self.out_of_place_update) {
            return Err("the update hand-over is for out-of-place updates without write combining".into());
        }
        if self.internal_locks && self.lock_table_bytes < 8 {
            return Err("internal-node locks need a lock table of at least one word".into());
        }
        if self.max_retries == 0 {
            return Err("max_retries must be positive".into());
        }
        if !self.alloc_align.is_power_of_two() || !(super::layout::NODE_ALIGN..=4096).contains(&self.alloc_align) {
            return Err(format!(
                "alloc_align {} is not a power of two within 64..=4096 (pointers name 64-byte units)",
                self.alloc_align
            ));
        }
        if self.chunk_bytes < 64 << 10 {
            return Err(format!("chunk_bytes {} is below 64 KiB", self.chunk_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_takes_overrides_and_refuses_bad_ones() {
        let o = SmartOptions::named("smart-paper,rdwc_slots=128, cache_mb=100", 8, 8).unwrap();
        assert_eq!((o.config, o.rdwc_slots, o.cache_bytes), ("smart-paper", 128, 100 * MB));
        assert!(o.paper_read_window, "the base configuration's techniques stay");
        assert_eq!(SmartOptions::named("art,max_handover=2", 8, 8).unwrap().max_handover, 2);
        for bad in ["smart,rdwc_slots", "smart,rdwc_slots=x", "smart,slots=4", "smart,rdwc_slots=5000000000", "smrt"] {
            assert!(SmartOptions::named(bad, 8, 8).is_err(), "{bad}");
        }
        assert!(SmartOptions::named("smart,rdwc_slots=0", 8, 8).unwrap().validate().is_err());
        assert_eq!(SmartOptions::named("smart,alloc_align=256", 8, 8).unwrap().alloc_align, 256);
        for bad in [32, 96, 8192] {
            let o = SmartOptions::named(&format!("smart,alloc_align={bad}"), 8, 8).unwrap();
            assert!(o.validate().unwrap_err().contains("alloc_align"), "{bad}");
        }
        assert!(SmartOptions::named("smart,keep_slots=1", 8, 8).unwrap().keep_slots);
        assert!(!SmartOptions::named("smart", 8, 8).unwrap().keep_slots);
        assert!(SmartOptions::named("smart,keep_slots=2", 8, 8).unwrap_err().contains("0 or 1"));
    }

    #[test]
    fn every_configuration_is_valid_and_the_steps_add_one_technique() {
        for name in CONFIGS {
            SmartOptions::named(name, 8, 8).expect("known").validate().expect("valid");
        }
        let art = SmartOptions::named("art", 8, 8).expect("known");
        assert!(art.internal_locks && art.out_of_place_update && !art.read_delegation);
        let smart = SmartOptions::default();
        assert!(!smart.internal_locks && !smart.out_of_place_update && smart.rear_lock);
        assert!(smart.read_delegation && smart.write_combining);
        assert!(SmartOptions::named("bogus", 8, 8).unwrap_err().contains("smart-rd"));
        assert!(SmartOptions::named("smart", 4, 8).expect("known").validate().is_err());
        assert!(SmartOptions::named("smart", 300, 8).expect("known").validate().is_err());
    }
}

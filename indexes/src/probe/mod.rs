//! # The probing table: a one-sided hash table of CAS-published slots
//!
//! The index `docs/new-index.md` builds, step by step. Compared with [`crate::example`] it has
//! no locks at all: every write is one compare-and-swap of an 8-byte slot word, and values live
//! out of place in blocks the word points to.
//!
//! ## Remote layout ([`layout`])
//!
//! An open-addressing table of 8-byte slot words with linear probing, 8 words to a 64-byte
//! group (one cache line, read whole and atomically), groups spread round-robin over the memory
//! nodes. A claimed word points to an immutable block (key and value) on its own memory node,
//! and carries the key's 8-bit fingerprint, the block's length in lines and a tombstone bit.
//!
//! ## The one rule: a slot, once claimed, is its key's for good
//!
//! A slot goes `empty → block → block' → … → tombstone → block'' → …` and never back to empty,
//! and every block it ever points to holds the same key. So along a key's probe sequence, the
//! slots before its own are other keys' forever, and two inserts of one key that probe at the
//! same time reach the same first empty slot: one CAS wins, and the loser sees the winner's
//! block there. That is why there are no duplicate keys, and why a search that reaches an
//! empty slot may answer "absent" (every earlier slot was someone else's when read, and still
//! is). The price: deleted keys keep their slots, so the table's capacity counts every key ever
//! inserted, not the live ones; blocks are never freed (a reader may still be about to READ
//! one; reclaiming them needs an epoch scheme this table does not have); and in a nearly full
//! table an insert reads many groups before it finds an empty slot (`for_run` sizes a run's
//! table at most half full).
//!
//! ## Operations (each checks the key and value against [`Limits`] first)
//!
//! - **search**: READ groups along the probe sequence from the key's home slot until the key's
//!   slot or an empty one, at most `max_probe` slots (no key lives further from its home); READ the block of each word whose fingerprint matches. Usually 2
//!   round trips (a group, the block).
//! - **insert** (upsert): locate as search does. At the key's own slot, or at the first empty
//!   slot, post one batch to the slot's node: `[WRITE new block, CAS slot word old → new]` (on
//!   one QP the CAS is placed after the WRITE, so the block is whole before anyone can see the
//!   word). If the CAS over the key's live word lost to other writes of the key, this write is
//!   done: linearized just before the first of them (which came after this write read the
//!   word), it was overwritten before anyone could read it, so a hot key costs one CAS per
//!   update, not a retry storm. If a claim of an empty slot lost, READ the winner's block: the
//!   same key (a concurrent insert of it) makes this slot the key's own, so write over it;
//!   another key owns it for good, so probe on. 2 round trips for a new key (a group, the
//!   batch), 3 for a present one (a group, its block, the batch).
//! - **update**: as insert, but only over a live word of the key's own slot.
//! - **delete**: CAS the key's live word to its tombstone (the same block, marked): 3 round
//!   trips, no block written. A delete that lost its CAS retries over the word it found (the
//!   winner saw the key live, so the delete cannot go before it), as does an insert over a
//!   tombstone.
//! - **scan**: unsupported (a hash table has no order).
//!
//! ## Invariants ([`invariants`])
//!
//! With no operation in flight: every claimed word points to a whole block on its node whose
//! key has the word's fingerprint; between a key's home and its slot no slot is empty; no key
//! has two slots.
//!
//! ## Planted bugs
//!
//! - `reuse-tombstones`: an insert claims another key's tombstone (the first one on its probe
//!   sequence) instead of an empty slot. The slot's key changes, so "the slots before mine are
//!   others' for good" no longer holds: two inserts of one key that probe at different times
//!   claim two different slots.
//! - `skip-lost-claim`: an insert whose claim of an empty slot lost probes on without looking at
//!   who won. If the winner was an insert of the same key, the key gets a second slot.
//! - `overwrite-any-loss`: every write that lost its CAS on the key's slot returns as
//!   overwritten, deletes and inserts over a tombstone too. A delete linearized before an update
//!   that saw the key live (or an insert before one that saw it absent) explains neither result.
//! - `floor-groups-per-node`: not a removed protection but an address-arithmetic slip. `create`
//!   sizes each node's share of the table as `groups / nodes`, rounded down, so with 7 groups
//!   over 2 nodes node 0's fourth group lies past its allocation, in padding no one else uses:
//!   every answer stays right. The simulator counts verbs outside allocated memory, and the
//!   checker judges any such verb a violation (preset `groups`).

pub mod config;
mod invariants;
pub mod layout;
pub mod node;
mod ops;
pub mod presets;

use crate::common::chunk::LocalChunkAllocator;
use crate::registry::{self, RunShape, TableShape};
use crate::{IndexError, IndexKind, InvariantReport, Limits, PlantedBug, RaceHandler};
pub use config::ProbeOptions;
use dmkit_rdma::{Buf, Caps, Client, MemoryView, NodeId, RemoteAddr};
use layout::Superblock;
use node::ProbeNode;
pub use ops::ProbeHandle;
use std::sync::Arc;

/// A claim of an empty slot lost to an insert of the same key: the slot is the key's, so the
/// insert writes over it.
pub const CLAIM_LOST_SAME_KEY: &str = "claim_lost_same_key";
/// A claim of an empty slot lost to another key: that slot is theirs for good, probe on.
pub const CLAIM_LOST_OTHER_KEY: &str = "claim_lost_other_key";
/// An update's CAS over the key's live word lost to another write of the key: the update is
/// linearized just before it, overwritten unseen, and returns.
pub const WRITE_OVERWRITTEN: &str = "write_overwritten";
/// A delete's CAS, or an insert's over the key's tombstone, lost to another write of the key:
/// retry over the word the CAS returned (a delete or update that finds a tombstone answers
/// "absent").
pub const WRITE_LOST: &str = "write_lost";

const RACE_HANDLERS: [RaceHandler; 4] = [
    RaceHandler {
        event: CLAIM_LOST_SAME_KEY,
        race: "two inserts of one key claimed the same empty slot: the loser reads the winner's block and writes over the slot instead of claiming a second one",
    },
    RaceHandler {
        event: CLAIM_LOST_OTHER_KEY,
        race: "another key claimed the slot first: the insert probes on from the next slot",
    },
    RaceHandler {
        event: WRITE_OVERWRITTEN,
        race: "an update's CAS over its key's live word lost to other writes of the key: linearized just before the first of them, it is overwritten unseen and returns",
    },
    RaceHandler {
        event: WRITE_LOST,
        race: "a delete, or an insert over a tombstone, lost its CAS to another write of the key: it retries over the word its CAS returned",
    },
];

pub const REUSE_TOMBSTONES: PlantedBug = PlantedBug {
    name: "reuse-tombstones",
    description: "inserts claim another key's tombstone: a slot's key changes, and two inserts of one key claim two slots",
};
pub const SKIP_LOST_CLAIM: PlantedBug = PlantedBug {
    name: "skip-lost-claim",
    description: "an insert that lost the claim of an empty slot probes on without reading who won: a second slot for its key",
};
pub const OVERWRITE_ANY_LOSS: PlantedBug = PlantedBug {
    name: "overwrite-any-loss",
    description: "a delete, or an insert over a tombstone, that lost its CAS returns as if overwritten: its result contradicts the winner's",
};
/// Not a removed protection but an address-arithmetic slip, to show what catches one: the
/// simulator counts every verb outside allocated memory (`dmkit_sim::UnallocatedVerbs`), and the
/// checker judges a run with any such verb a violation. Without that count this bug is silent:
/// the missing group's bytes are allocator padding no one else uses.
pub const FLOOR_GROUPS_PER_NODE: PlantedBug = PlantedBug {
    name: "floor-groups-per-node",
    description: "each node's share of the table is allocated as groups / nodes, rounded down: with groups not a multiple of nodes, the first nodes' last group lies past their allocation",
};
const PLANTS: [PlantedBug; 4] = [REUSE_TOMBSTONES, SKIP_LOST_CLAIM, OVERWRITE_ANY_LOSS, FLOOR_GROUPS_PER_NODE];

/// The probing table's [`IndexKind`].
#[derive(Debug)]
pub struct Probe;

impl IndexKind for Probe {
    const NAME: &'static str = "probe";
    /// `dmkit bench-load --index probe --keys 10000000`, 2026-11-29: peak 848 MB.
    const HOST_BYTES_PER_ITEM: u64 = 85;
    const SUPPORTS_SCAN: bool = false;
    type Options = ProbeOptions;
    type NodeState = ProbeNode;
    type Handle<C: Client + Clone + 'static> = ProbeHandle<C>;

    fn limits(o: &ProbeOptions) -> Limits {
        Limits {
            min_key_bytes: 1,
            max_key_bytes: o.max_key_bytes as usize,
            min_value_bytes: 0,
            max_value_bytes: o.max_value_bytes as usize,
        }
    }

    fn validate(o: &ProbeOptions) -> Result<(), String> {
        o.validate()
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(ProbeOptions, String), String> {
        if shape.cache_bytes.is_some() {
            return Err(registry::no_cache_budget(Self::NAME, "has no compute-node cache"));
        }
        if config != "default" {
            return Err(registry::no_configuration(Self::NAME, config, &["default"]));
        }
        // Twice the slots the run's keys need: linear probing's expected probe length grows as
        // 1/(1-load)^2 for a miss, so a half-full table keeps a miss to a group or two.
        let options = ProbeOptions {
            slots: (2 * shape.items).max(layout::GROUP_SLOTS),
            max_key_bytes: shape.key_bytes.max(8) as u32,
            max_value_bytes: shape.value_bytes.max(8) as u32,
            memory_nodes: shape.memory_nodes,
            ..ProbeOptions::default()
        };
        Self::validate(&options).map_err(|e| format!("index {}: {e}", Self::NAME))?;
        Ok((options, config.to_string()))
    }

    fn fixed_table(shape: &TableShape) -> Option<Result<ProbeOptions, String>> {
        // `dmkit fill`: a table of `size` × `slots` slots (8 unless given), whatever the groups.
        let slots = shape.size.saturating_mul(u64::from(shape.slots.unwrap_or(layout::GROUP_SLOTS as u32)));
        let options = ProbeOptions {
            slots,
            max_key_bytes: shape.key_bytes.max(1) as u32,
            max_value_bytes: shape.value_bytes as u32,
            ..ProbeOptions::default()
        };
        Some(Self::validate(&options).map(|()| options))
    }

    async fn create<C: Client>(o: &ProbeOptions, ctx: &C) -> Result<(), IndexError> {
        Self::validate(o).map_err(IndexError::Corrupt)?;
        let mut sb = Superblock {
            slots: o.slots,
            max_key_bytes: o.max_key_bytes,
            max_value_bytes: o.max_value_bytes,
            max_probe: o.max_probe,
            bases: vec![RemoteAddr::NULL; o.memory_nodes as usize],
        };
        for i in 0..sb.bases.len() {
            // Fresh remote memory is zero: every slot starts empty.
            let groups = if o.plants.contains(FLOOR_GROUPS_PER_NODE.name) {
                sb.groups() / sb.bases.len() as u64
            } else {
                sb.groups_on(i)
            };
            let bytes = groups.max(1) * layout::GROUP_BYTES;
            sb.bases[i] = dmkit_rdma::alloc::alloc(ctx, NodeId(i as u16), bytes, layout::GROUP_BYTES).await?;
        }
        ctx.write(layout::superblock_addr(), Buf::from(sb.encode())).await?;
        Ok(())
    }

    fn node_state(o: &ProbeOptions, _: &Caps) -> ProbeNode {
        ProbeNode::new(LocalChunkAllocator::paged(o.memory_nodes, o.chunk_bytes))
    }

    fn inherit(node: &ProbeNode, loader: &ProbeNode) {
        node.chunks.inherit(&loader.chunks);
    }

    fn node_state_bytes(node: &ProbeNode) -> u64 {
        node.bytes()
    }

    fn open<C: Client + Clone + 'static>(o: &ProbeOptions, node: Arc<ProbeNode>, ctx: C) -> ProbeHandle<C> {
        ProbeHandle::new(o.clone(), node, ctx)
    }

    fn check_invariants(o: &ProbeOptions, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        invariants::walk(o, memory)
    }

    fn race_handlers() -> &'static [RaceHandler] {
        &RACE_HANDLERS
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        &PLANTS
    }

    fn plant(o: &mut ProbeOptions, bug: &str) -> Result<(), String> {
        o.plants.insert(PlantedBug::named(&PLANTS, "the probing table", bug)?);
        Ok(())
    }
}

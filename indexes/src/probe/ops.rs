//! The probing table's operations: a client's handle.

use super::layout::{self, GROUP_SLOTS, Superblock, fingerprint, is_tombstone, tombstone_of};
use super::node::ProbeNode;
use super::{
    CLAIM_LOST_OTHER_KEY, CLAIM_LOST_SAME_KEY, OVERWRITE_ANY_LOSS, Probe, ProbeOptions, REUSE_TOMBSTONES,
    SKIP_LOST_CLAIM, WRITE_LOST, WRITE_OVERWRITTEN,
};
use crate::{Change, Counters, Index, IndexError, IndexKind, Limits, PlantedBug};
use dmkit_rdma::{Buf, Client, CpuWork, NodeId, RemoteAddr, Request};
use rand::Rng;
use std::ops::Bound;
use std::sync::Arc;

/// One client's handle.
#[derive(Debug)]
pub struct ProbeHandle<C> {
    options: ProbeOptions,
    node: Arc<ProbeNode>,
    ctx: C,
    counters: Counters,
}

/// Where a key is, or where it would go.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    /// The key's own slot and its word when read; `value` is the block's if the word is live.
    Owned { slot: u64, word: u64, value: Option<Vec<u8>> },
    /// The key has no slot: `slot`, `step` places along its probe sequence, is the first empty
    /// one (`word` 0), or, with [`REUSE_TOMBSTONES`] planted, another key's tombstone before it.
    Free { slot: u64, step: u64, word: u64 },
    /// Every slot within reach of the key's home (`max_probe`) is another key's.
    Full,
}

/// A block written for this operation and not (yet) published.
struct Staged {
    node: NodeId,
    addr: RemoteAddr,
    bytes: Vec<u8>,
    /// Its WRITE went out (in the batch of a CAS that lost).
    written: bool,
    /// A CAS that would have published it failed in transport: it may have landed, so the
    /// block may be published and must not go back to the allocator.
    in_doubt: bool,
}

impl<C: Client + Clone + 'static> ProbeHandle<C> {
    pub(super) fn new(options: ProbeOptions, node: Arc<ProbeNode>, ctx: C) -> ProbeHandle<C> {
        ProbeHandle { options, node, ctx, counters: Counters::default() }
    }

    fn planted(&self, bug: PlantedBug) -> bool {
        self.options.plants.contains(bug.name)
    }

    fn limits(&self) -> Limits {
        Probe::limits(&self.options)
    }

    /// The superblock, from the node's cache or (once per node) from remote memory.
    async fn superblock(&self) -> Result<Arc<Superblock>, IndexError> {
        self.ctx.charge_cpu(CpuWork::CacheLookupLevel, 1).await;
        if let Some(sb) = self.node.superblock() {
            return Ok(sb);
        }
        let len = layout::superblock_bytes(self.options.memory_nodes as usize);
        let raw = self.ctx.read(layout::superblock_addr(), Buf::zeroed(len)).await?;
        let sb = Superblock::decode(&raw).map_err(IndexError::Corrupt)?;
        Ok(self.node.fill(sb))
    }

    /// The key's home slot and fingerprint.
    async fn home(&self, sb: &Superblock, key: &[u8]) -> (u64, u8) {
        self.ctx.charge_cpu(CpuWork::HashByte, key.len() as u64).await;
        sb.home(key)
    }

    /// The key and value of the block `word` (a claimed word of `slot`) points to.
    async fn read_block(&self, sb: &Superblock, slot: u64, word: u64) -> Result<(Vec<u8>, Vec<u8>), IndexError> {
        let (addr, len) = layout::block_of(sb.node_of(slot), word);
        let bytes = self.ctx.read(addr, Buf::zeroed(len)).await?;
        let (key, value) = layout::decode_block(&bytes)
            .map_err(|e| IndexError::Corrupt(format!("slot {slot}, word {word:#x}: {e}")))?;
        self.ctx.charge_cpu(CpuWork::CopyByte, (key.len() + value.len()) as u64).await;
        Ok((key.to_vec(), value.to_vec()))
    }

    /// Walks `key`'s probe sequence from `from` steps past its home, at most
    /// [`Superblock::probe_len`] slots: READ a group at a time, and the block of each word whose
    /// fingerprint is the key's.
    async fn locate(&mut self, sb: &Superblock, key: &[u8], home: u64, fp: u8, from: u64) -> Result<Place, IndexError> {
        let mut group: Option<(u64, Vec<u64>)> = None;
        let mut reusable = None;
        for step in from..sb.probe_len() {
            let slot = sb.probe(home, step);
            let g = slot / GROUP_SLOTS;
            if group.as_ref().is_none_or(|(read, _)| *read != g) {
                let (addr, n) = sb.group_of(slot);
                let bytes = self.ctx.read(addr, Buf::zeroed(8 * n as usize)).await?;
                group = Some((g, layout::words(&bytes).collect()));
            }
            let word = group.as_ref().expect("read above").1[(slot % GROUP_SLOTS) as usize];
            self.ctx.charge_cpu(CpuWork::NodeSearchEntry, 1).await;
            if word == 0 {
                return Ok(reusable.unwrap_or(Place::Free { slot, step, word }));
            }
            if fingerprint(word) == fp {
                let (k, value) = self.read_block(sb, slot, word).await?;
                if k == key {
                    return Ok(Place::Owned { slot, word, value: (!is_tombstone(word)).then_some(value) });
                }
            }
            // Planted bug: remember the first tombstone of another key, to claim it instead of
            // the empty slot at the end of the sequence.
            if is_tombstone(word) && reusable.is_none() && self.planted(REUSE_TOMBSTONES) {
                reusable = Some(Place::Free { slot, step, word });
            }
        }
        Ok(reusable.unwrap_or(Place::Full))
    }

    /// Waits a random, growing time after a lost CAS (bounded exponential backoff).
    async fn back_off(&mut self, attempt: u32) {
        self.counters.retries += 1;
        let cap = 100u64 << attempt.min(6);
        let ns = self.ctx.with_rng(|r| r.random_range(0..=cap));
        self.ctx.sleep(ns).await;
    }

    /// The word for a block of `key` and `value` on `slot`'s node, writing nothing yet: the
    /// staged block is reused while the slot stays on its node, and replaced otherwise.
    async fn stage(
        &mut self,
        sb: &Superblock,
        slot: u64,
        key: &[u8],
        value: &[u8],
        fp: u8,
        staged: &mut Option<Staged>,
    ) -> Result<u64, IndexError> {
        let node = sb.node_of(slot);
        if let Some(s) = staged.take_if(|s| s.node != node) {
            self.release(s);
        }
        if staged.is_none() {
            let bytes = layout::encode_block(key, value);
            let addr = self.node.chunks.alloc_on(&self.ctx, node, bytes.len() as u64, layout::LINE_BYTES).await?;
            *staged = Some(Staged { node, addr, bytes, written: false, in_doubt: false });
        }
        let s = staged.as_ref().expect("staged above");
        Ok(layout::live_word(fp, s.bytes.len() as u64 / layout::LINE_BYTES, s.addr.offset()))
    }

    /// CAS `slot`'s word from `expected` to `new`, behind the WRITE of the staged block if
    /// `new` points to it and it is not written yet. Returns the word the CAS found.
    async fn publish(
        &mut self,
        sb: &Superblock,
        slot: u64,
        expected: u64,
        new: u64,
        staged: &mut Option<Staged>,
    ) -> Result<u64, IndexError> {
        let addr = sb.slot_addr(slot);
        let mut batch = Vec::with_capacity(2);
        let block = staged.as_mut().filter(|s| !is_tombstone(new) && !s.written);
        if let Some(s) = block {
            assert_eq!(s.node, addr.node(), "a block lives on its slot's node");
            // On one QP the CAS below is placed after this WRITE: whoever reads the new word
            // finds the block whole.
            batch.push(Request::write(s.addr, s.bytes.clone()));
            s.written = true;
        }
        batch.push(Request::cas(addr, expected, new));
        let mut responses = match self.ctx.post(batch).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(s) = staged.as_mut().filter(|_| !is_tombstone(new)) {
                    s.in_doubt = true;
                }
                return Err(e.into());
            }
        };
        let old = responses.pop().expect("a CAS response").atomic()?;
        if old != expected {
            self.counters.cas_failures += 1;
        }
        Ok(old)
    }

    async fn do_search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.limits().check_key(key)?;
        let sb = self.superblock().await?;
        let (home, fp) = self.home(&sb, key).await;
        Ok(match self.locate(&sb, key, home, fp, 0).await? {
            Place::Owned { value, .. } => value,
            Place::Free { .. } | Place::Full => None,
        })
    }

    /// Gives an unpublished block back to the allocator that carved it.
    fn release(&self, s: Staged) {
        self.node
            .chunks
            .free(s.addr, s.bytes.len() as u64)
            .expect("an unpublished block goes back to the allocator that carved it");
    }

    /// [`Index::write`] from the probe sequence's start: claims or writes over `key`'s slot,
    /// staging the value's block in `staged`.
    async fn write_from(
        &mut self,
        sb: &Superblock,
        key: &[u8],
        home: u64,
        fp: u8,
        change: &Change,
        staged: &mut Option<Staged>,
    ) -> Result<bool, IndexError> {
        let mut place = self.locate(sb, key, home, fp, 0).await?;
        for attempt in 0..self.options.max_retries {
            let (slot, expected, step) = match (&place, change) {
                (Place::Full, Change::Upsert(_)) => return Err(IndexError::Full),
                // Update and delete touch only a live word of the key's own slot.
                (Place::Full | Place::Free { .. }, Change::Update(_) | Change::Delete) => return Ok(false),
                (Place::Owned { word, .. }, Change::Update(_) | Change::Delete) if is_tombstone(*word) => {
                    return Ok(false);
                }
                (Place::Owned { slot, word, .. }, _) => (*slot, *word, None),
                (Place::Free { slot, step, word }, _) => (*slot, *word, Some(*step)),
            };
            let new = match change {
                Change::Delete => tombstone_of(expected),
                Change::Upsert(v) | Change::Update(v) => self.stage(sb, slot, key, v, fp, staged).await?,
            };
            let found = self.publish(sb, slot, expected, new, staged).await?;
            if found == expected {
                if !is_tombstone(new) {
                    // Published: the block is the slot's now.
                    *staged = None;
                }
                // A claim (`step` is some) found no key; a write over the key's slot found it
                // live unless the word was a tombstone.
                return Ok(step.is_none() && !is_tombstone(expected));
            }
            place = match step {
                // Other writes of this key replaced the live word this value was to replace.
                // Linearized just before the first of them (inside this operation: it came
                // after this operation read the word), this one is overwritten before anyone
                // could read it (no word ever named its block), and the key was live then:
                // done, with no second CAS. Not for a delete (the winner saw the key live), nor
                // for an insert over a tombstone (the winner saw it absent).
                None if (!is_tombstone(expected) && !matches!(change, Change::Delete))
                    || self.planted(OVERWRITE_ANY_LOSS) =>
                {
                    self.counters.event(WRITE_OVERWRITTEN);
                    return Ok(true);
                }
                // Otherwise retry over the word the CAS found: the slot is still the key's.
                None => {
                    self.counters.event(WRITE_LOST);
                    if attempt + 1 < self.options.max_retries {
                        self.back_off(attempt).await;
                    }
                    Place::Owned { slot, word: found, value: None }
                }
                // Planted bug: probe on as if another key had won.
                Some(step) if self.planted(SKIP_LOST_CLAIM) => self.locate(sb, key, home, fp, step + 1).await?,
                // Who claimed the slot? An insert of this key made it the key's: write over it.
                // Another key owns it for good: probe on past it.
                Some(step) => {
                    let same = fingerprint(found) == fp && self.read_block(sb, slot, found).await?.0 == key;
                    if same {
                        self.counters.event(CLAIM_LOST_SAME_KEY);
                        Place::Owned { slot, word: found, value: None }
                    } else {
                        self.counters.event(CLAIM_LOST_OTHER_KEY);
                        self.locate(sb, key, home, fp, step + 1).await?
                    }
                }
            };
        }
        Err(IndexError::RetriesExhausted { op: change.op(), retries: self.options.max_retries })
    }
}

impl<C: Client + Clone + 'static> Index for ProbeHandle<C> {
    async fn search(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        self.do_search(key).await
    }

    /// Insert, update and delete: applies `change` to `key`; returns whether the key existed
    /// (was live) before.
    async fn write(&mut self, key: &[u8], change: Change) -> Result<bool, IndexError> {
        self.limits().check_key(key)?;
        if let Change::Upsert(v) | Change::Update(v) = &change {
            self.limits().check_value(v)?;
        }
        let sb = self.superblock().await?;
        let (home, fp) = self.home(&sb, key).await;
        let mut staged = None;
        let result = self.write_from(&sb, key, home, fp, &change, &mut staged).await;
        // A block that was never published goes back to the allocator; one whose publishing CAS
        // failed in transport may have been published (the CAS may have landed) and stays.
        if let Some(s) = staged.filter(|s| !s.in_doubt) {
            self.release(s);
        }
        result
    }

    async fn scan(
        &mut self,
        _: Bound<&[u8]>,
        _: Bound<&[u8]>,
        _: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, IndexError> {
        Err(IndexError::Unsupported("scan"))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

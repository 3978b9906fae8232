//! A B+tree's root word and each compute node's copy of it (Sherman, CHIME).
//!
//! The root word is `address | level` in one 8-byte word of a superblock: nodes are 64-byte
//! aligned, so the low 6 bits are free for the root's level. It changes only by CAS, from
//! `(old root, l)` to `(new root, l + 1)`. A compute node keeps the newest word it has seen
//! (never an older one: [`CachedRoot`]) and re-reads it when a traversal finds it stale.

use crate::common::primitive::{AtomicU64, Ordering};
use crate::{Counters, IndexError, PlantedBug};
use dmkit_rdma::{Buf, Client, RemoteAddr};

/// A READ of the root word from the superblock (no copy on the compute node, or a stale one).
pub const ROOT_READ: &str = "root_read";

/// Alignment of every node a root word may name.
pub const ROOT_ALIGN: u64 = 64;

/// The root word of the node at `addr`, at `level`.
pub fn pack(addr: RemoteAddr, level: u8) -> u64 {
    debug_assert!(addr.raw() % ROOT_ALIGN == 0 && (level as u64) < ROOT_ALIGN);
    addr.raw() | level as u64
}

/// The root's address and level.
pub fn unpack(word: u64) -> (RemoteAddr, u8) {
    (RemoteAddr::from_raw(word & !(ROOT_ALIGN - 1)), (word & (ROOT_ALIGN - 1)) as u8)
}

/// A compute node's copy of the root word at `at`.
///
/// The copy only moves forward. Its clients refresh it concurrently (on a traversal that finds
/// the root split, on first use), and a refresh READ issued before another client's root CAS can
/// land after that client stored the new root: stored as it came, it would take the copy back a
/// level or more, and a client of this node finishing a split above the copy's level would find
/// no parent level to insert into. So a stored word replaces the copy only if its level is at
/// least the copy's (the superblock's word only grows: each root CAS goes from level `l` to
/// `l + 1`, so one level has one root word, ever), and forgetting marks the copy stale without
/// lowering it. With that, every level a client of this node has seen (through a traversal from
/// the copy, the node's cache of internal nodes filled by such traversals, or a root CAS) is at
/// most the copy's level: Sherman's and CHIME's `insert_parent` report a copy below the level
/// that split as corruption.
#[derive(Debug)]
pub struct CachedRoot {
    at: RemoteAddr,
    /// The root word last stored (0: never read).
    word: AtomicU64,
    /// 1: a traversal found the copy's root split; the next [`CachedRoot::get`] reads the
    /// superblock.
    stale: AtomicU64,
    /// The first word stored: where a READ issued before the tree grew would take the copy
    /// back to ([`CachedRoot::regress`]).
    first: AtomicU64,
}

impl CachedRoot {
    pub fn new(at: RemoteAddr) -> CachedRoot {
        CachedRoot { at, word: AtomicU64::new(0), stale: AtomicU64::new(0), first: AtomicU64::new(0) }
    }

    /// Stores `word` unless the copy is already at a higher level; returns whether it did (a
    /// word of the copy's own level is the copy's word, and storing it ends staleness).
    pub fn set(&self, word: u64) -> bool {
        let level = unpack(word).1;
        let stored = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur == 0 || unpack(cur).1 <= level).then_some(word)
            })
            .is_ok();
        if stored {
            self.stale.store(0, Ordering::Release);
            let _ = self.first.compare_exchange(0, word, Ordering::AcqRel, Ordering::Acquire);
        }
        stored
    }

    /// Marks the copy stale: the next [`CachedRoot::get`] reads the superblock. The copy's level
    /// stays a floor for what that READ may store.
    pub fn forget(&self) {
        self.stale.store(1, Ordering::Release);
    }

    /// Whether a traversal found the copy's root split since it was stored.
    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Acquire) != 0
    }

    /// The copy's word as it is (0: never read), stale or not.
    pub fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Puts the copy back to the first word it stored, as a superblock READ issued before the
    /// tree grew and landing after the newer words would if [`CachedRoot::set`] stored every
    /// word as it came. For the plants that show what that does (it is reported as corruption).
    pub fn regress(&self) {
        self.word.store(self.first.load(Ordering::Acquire), Ordering::Release);
        self.stale.store(0, Ordering::Release);
    }

    /// The root, from the copy or the superblock.
    pub async fn get<C: Client>(&self, ctx: &C, counters: &mut Counters) -> Result<(RemoteAddr, u8), IndexError> {
        let word = self.word.load(Ordering::Acquire);
        if word != 0 && self.stale.load(Ordering::Acquire) == 0 {
            return Ok(unpack(word));
        }
        self.refresh(ctx, counters).await
    }

    /// The root, read from the superblock (one READ of 8 bytes), or the copy's if another
    /// client stored a newer one while the READ was in flight.
    pub async fn refresh<C: Client>(&self, ctx: &C, counters: &mut Counters) -> Result<(RemoteAddr, u8), IndexError> {
        counters.event(ROOT_READ);
        let word = ctx.read(self.at, Buf::zeroed(8)).await?.u64_at(0);
        if word == 0 {
            return Err(IndexError::Corrupt("the superblock holds no root: was the tree created?".into()));
        }
        if self.set(word) {
            return Ok(unpack(word));
        }
        Ok(unpack(self.word()))
    }
}

/// Sherman's and CHIME's plant: [`CachedRoot::regress`] after an internal split, where the
/// unguarded store of a late READ would leave the copy.
pub const ROOT_COPY_REGRESSES: PlantedBug = PlantedBug {
    name: "root-copy-regresses",
    description: "the compute node's copy of the root goes back to the first root it held while an insert into the parent level splits an internal node (a superblock READ issued before the tree grew, landing late, with the copy stored as it comes instead of only forward): the next level finds no parent",
};

/// The corruption a separator insert reports when its node's copy of the root is below the
/// level that split (impossible while [`CachedRoot`] only moves forward).
pub fn copy_below_split(copy_level: u8, level: u8) -> IndexError {
    IndexError::Corrupt(format!(
        "this compute node's copy of the root is at level {copy_level}, below the level {level} that split: the copy moved backwards"
    ))
}

/// The corruption a root helper reports when the root it would help has not split, though
/// another node of its level did.
pub fn root_not_split(root: RemoteAddr, level: u8, left: RemoteAddr) -> IndexError {
    IndexError::Corrupt(format!("root at {root} (level {level}) has not split though node {left} of its level did"))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dmkit_rdma::NodeId;

    #[test]
    fn pack_round_trips() {
        let a = RemoteAddr::host(NodeId(3), 64 * 1000);
        assert_eq!(unpack(pack(a, 5)), (a, 5));
    }

    #[test]
    fn the_copy_never_moves_back_a_level() {
        let words: Vec<u64> = (0..3).map(|l| pack(RemoteAddr::host(NodeId(0), 64 * (10 + l)), l as u8)).collect();
        let copy = CachedRoot::new(RemoteAddr::host(NodeId(0), 64));
        assert!(copy.set(words[1]));
        assert!(copy.set(words[2]));
        // A READ of the superblock issued before the root CAS, landing after it.
        assert!(!copy.set(words[0]));
        assert!(!copy.set(words[1]));
        assert_eq!(copy.word(), words[2]);
        // Forgetting keeps the floor; the same level's word ends the staleness.
        copy.forget();
        assert!(!copy.set(words[1]));
        assert!(copy.is_stale(), "an older word does not make the copy fresh");
        assert!(copy.set(words[2]));
        assert!(!copy.is_stale());
        copy.regress();
        assert_eq!(copy.word(), words[1], "regress goes back to the first word stored");
    }
}

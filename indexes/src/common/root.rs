//! A B+tree's root word and each compute node's copy of it (Sherman, CHIME).
//!
//! The root word is `address | level` in one 8-byte word of a superblock: nodes are 64-byte
//! aligned, so the low 6 bits are free for the root's level. It changes only by CAS, from
//! `(old root, l)` to `(new root, l + 1)`. A compute node keeps the word it last read and
//! forgets it when a traversal finds it stale.

use crate::common::primitive::{AtomicU64, Ordering};
use crate::{Counters, IndexError};
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

/// A compute node's copy of the root word at `at` (0: not read yet, or forgotten).
#[derive(Debug)]
pub struct CachedRoot {
    at: RemoteAddr,
    word: AtomicU64,
}

impl CachedRoot {
    pub fn new(at: RemoteAddr) -> CachedRoot {
        CachedRoot { at, word: AtomicU64::new(0) }
    }

    pub fn set(&self, word: u64) {
        self.word.store(word, Ordering::Release);
    }

    /// Drops the copy: the next [`CachedRoot::get`] reads the superblock.
    pub fn forget(&self) {
        self.set(0);
    }

    /// The root, from the copy or the superblock.
    pub async fn get<C: Client>(&self, ctx: &C, counters: &mut Counters) -> Result<(RemoteAddr, u8), IndexError> {
        let word = self.word.load(Ordering::Acquire);
        if word != 0 {
            return Ok(unpack(word));
        }
        self.refresh(ctx, counters).await
    }

    /// The root, read from the superblock (one READ of 8 bytes).
    pub async fn refresh<C: Client>(&self, ctx: &C, counters: &mut Counters) -> Result<(RemoteAddr, u8), IndexError> {
        counters.event(ROOT_READ);
        let word = ctx.read(self.at, Buf::zeroed(8)).await?.u64_at(0);
        if word == 0 {
            return Err(IndexError::Corrupt("the superblock holds no root: was the tree created?".into()));
        }
        self.set(word);
        Ok(unpack(word))
    }
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
}

//! loom model of a compute node's copy of a B+tree's root word (`common::root::CachedRoot`,
//! Sherman and CHIME): its clients store the words their superblock READs and root CASes
//! return, in any order, and mark it stale when a traversal finds its root split. Whatever the
//! interleaving, the copy never goes below a level it held (a READ issued before the tree grew
//! and landing late is ignored), and a reader sees its level only grow.
//!
//! Run with `.ci/loom.sh` (`RUSTFLAGS="--cfg loom"`, a separate target directory, release).

#![cfg(loom)]

use dmkit_indexes::common::primitive::Arc;
use dmkit_indexes::common::root::{CachedRoot, pack, unpack};
use dmkit_rdma::{NodeId, RemoteAddr};
use loom::thread;

fn word(level: u8) -> u64 {
    pack(RemoteAddr::host(NodeId(0), 4096 + 64 * level as u64), level)
}

#[test]
fn the_copy_only_moves_forward() {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model::Builder::new().check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = Arc::new(CachedRoot::new(RemoteAddr::host(NodeId(0), 64)));
        copy.set(word(0));
        // A late READ of the level-1 word, a root CAS to level 2, a traversal that forgets.
        let late = {
            let c = copy.clone();
            thread::spawn(move || c.set(word(1)))
        };
        let grown = {
            let c = copy.clone();
            thread::spawn(move || {
                assert!(c.set(word(2)), "a higher level is always stored");
                c.forget();
            })
        };
        let levels: Vec<u8> = (0..3).map(|_| unpack(copy.word()).1).collect();
        assert!(levels.windows(2).all(|w| w[0] <= w[1]), "a reader saw the copy go back: {levels:?}");
        late.join().unwrap();
        grown.join().unwrap();
        assert_eq!(copy.word(), word(2), "the copy ends at the highest level stored");
        // The level-2 word again (a re-read) ends staleness; a level-1 one does not.
        copy.forget();
        assert!(!copy.set(word(1)) && copy.is_stale());
        assert!(copy.set(word(2)) && !copy.is_stale());
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("the_copy_only_moves_forward: {runs} interleavings");
    assert!(runs > 1, "loom explored a single interleaving");
}

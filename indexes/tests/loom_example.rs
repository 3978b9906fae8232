//! loom model of the example index's compute-node state (`example::cache::NodeCache`): clients
//! of one compute node that miss the cache at once both read the superblock and race to fill
//! it. Whoever wins, every client ends up using one and the same superblock, and a reader that
//! sees the cache filled sees the filled value. Run with `.ci/loom.sh`.

#![cfg(loom)]

use dmkit_indexes::common::primitive::Arc;
use dmkit_indexes::example::cache::NodeCache;
use dmkit_indexes::example::layout::Superblock;
use dmkit_rdma::{NodeId, RemoteAddr};
use loom::thread;

fn superblock(buckets: u64) -> Superblock {
    Superblock {
        buckets,
        slots: 4,
        max_key_bytes: 8,
        max_value_bytes: 8,
        bases: vec![RemoteAddr::host(NodeId(0), 1 << 20)],
    }
}

#[test]
fn racing_fills_agree_on_one_superblock() {
    loom::model(|| {
        let cache = Arc::new(NodeCache::default());
        let handles: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|buckets| {
                let cache = cache.clone();
                thread::spawn(move || {
                    let seen_before = cache.get();
                    let filled = cache.fill(superblock(buckets));
                    if let Some(before) = seen_before {
                        assert!(std::sync::Arc::ptr_eq(&before, &filled), "a filled cache never changes");
                    }
                    filled
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(std::sync::Arc::ptr_eq(&results[0], &results[1]), "both clients use the same superblock");
        let cached = cache.get().expect("filled");
        assert!(std::sync::Arc::ptr_eq(&cached, &results[0]));
        assert!(cached.buckets == 1 || cached.buckets == 2);
        assert_eq!(cache.bytes(), cached.encode().len() as u64);
    });
}

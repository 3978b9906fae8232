//! The synchronisation primitives of compute-node structures, from loom or from `std`.
//!
//! Compute-node state (caches, local lock tables, the chunk allocator) is shared by the OS
//! threads of a compute node on hardware, so it is model-checked with loom (DESIGN §4). Every
//! such structure imports its `Mutex`, `Arc` and atomics from here and never names loom or
//! `std::sync` itself: a build with `RUSTFLAGS="--cfg loom"` (`.ci/loom.sh`) swaps them all at
//! once, and a normal build never compiles loom. This is crossbeam-epoch's `primitive` module.
//!
//! Only what both backends offer with the same signatures is re-exported: `Mutex::lock` returns a
//! `LockResult` in both (use [`lock`], which treats poisoning as recovered), and the atomics take
//! the same [`atomic::Ordering`]. Nothing here is `const`-constructible under loom.

#[cfg(loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex, MutexGuard};

/// Atomic integers and their orderings.
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    #[cfg(not(loom))]
    pub use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
}

pub use atomic::{AtomicU64, AtomicUsize, Ordering};

/// Locks `mutex`, using the state as it is if another thread panicked while holding it: that
/// panic is a bug its own task reports, and the node's other clients go on (as
/// `dmkit_rdma::sync` does). Structures keep the lock only for short, non-awaiting sections.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

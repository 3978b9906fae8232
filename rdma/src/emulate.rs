//! Masked atomics emulated with plain verbs, for backends without ConnectX extended atomics
//! (Soft-RoCE, upstream rdma-core).
//!
//! A READ of the 8-byte word, then a CAS loop. Each CAS compares the whole word, so the emulation
//! is linearizable with respect to other RMWs: its linearization point is the successful CAS, or
//! the (8-byte atomic) READ or failed CAS that showed the compared bits did not match. It costs
//! the verbs it really issues, and the caller sees them in the backend's counters.

use crate::{RemoteAddr, Verbs, VerbsError, atomics};
use std::future::Future;

/// Upper bound on CAS attempts before giving up with [`VerbsError::Timeout`]: a bounded loop
/// turns starvation into a report instead of a hang.
pub const MAX_CAS_ATTEMPTS: u32 = 10_000;

/// Runs the CAS loop after `first`, the already-posted READ of the word.
async fn emulate_rmw<V: Verbs + ?Sized>(
    verbs: &V,
    addr: RemoteAddr,
    first: impl Future<Output = Result<crate::Buf, VerbsError>>,
    apply: impl Fn(u64) -> Option<u64>,
) -> Result<u64, VerbsError> {
    let buf = first.await?;
    let mut old = buf.u64_at(0);
    for _ in 0..MAX_CAS_ATTEMPTS {
        let Some(new) = apply(old) else { return Ok(old) };
        if new == old {
            return Ok(old);
        }
        let seen = verbs.cas(addr, old, new).await?;
        if seen == old {
            return Ok(old);
        }
        old = seen;
    }
    Err(VerbsError::Timeout(addr.node()))
}

/// Masked CAS from READ + CAS. Returns the whole old word, like the native verb. The READ is
/// posted when this is called, like any verb.
pub fn masked_cas<V: Verbs + ?Sized>(
    verbs: &V,
    addr: RemoteAddr,
    compare: u64,
    compare_mask: u64,
    swap: u64,
    swap_mask: u64,
) -> impl Future<Output = Result<u64, VerbsError>> {
    let first = verbs.read(addr, crate::Buf::zeroed(8));
    emulate_rmw(verbs, addr, first, move |old| {
        ((old ^ compare) & compare_mask == 0).then(|| atomics::masked_cas(old, compare, compare_mask, swap, swap_mask))
    })
}

/// Masked FAA from READ + CAS. Returns the whole old word, like the native verb. The READ is
/// posted when this is called, like any verb.
pub fn masked_faa<V: Verbs + ?Sized>(
    verbs: &V,
    addr: RemoteAddr,
    add: u64,
    boundary_mask: u64,
) -> impl Future<Output = Result<u64, VerbsError>> {
    let first = verbs.read(addr, crate::Buf::zeroed(8));
    emulate_rmw(verbs, addr, first, move |old| Some(atomics::masked_faa(old, add, boundary_mask)))
}

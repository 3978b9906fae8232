//! The client context: the only way index code sees time, randomness and CPU.
//!
//! No `Instant::now()`, `thread_rng()` or OS sleeps in index code: the simulator supplies
//! virtual time and a seeded random stream per client, and charges CPU work to the client's
//! thread from the profile's `[cpu]` table; the hardware backend supplies the real ones.

use crate::{NodeId, Verbs};
use rand_chacha::ChaCha8Rng;
use std::future::Future;

/// Kinds of compute work an index charges to its thread; the profile prices one unit of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CpuWork {
    /// One level of a compute-node cache walk (a dependent pointer chase).
    CacheLookupLevel,
    /// One byte hashed (key hashing, fingerprints).
    HashByte,
    /// One byte checksummed (CRC over a leaf or KV block).
    ChecksumByte,
    /// One entry compared while searching a node.
    NodeSearchEntry,
    /// One byte copied between local buffers.
    CopyByte,
    /// Plain nanoseconds, for work no other kind describes (say what in a comment).
    Nanoseconds,
}

impl CpuWork {
    pub const ALL: [CpuWork; 6] = [
        CpuWork::CacheLookupLevel,
        CpuWork::HashByte,
        CpuWork::ChecksumByte,
        CpuWork::NodeSearchEntry,
        CpuWork::CopyByte,
        CpuWork::Nanoseconds,
    ];
}

/// Who a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientIdentity {
    /// Unique among the clients of a run.
    pub client: u32,
    /// The node the client runs on (a compute node, or a server node for service threads).
    pub node: NodeId,
    /// The thread (a serial CPU) on that node; coroutines of one thread share it.
    pub thread: u32,
    /// Index of this coroutine on its thread.
    pub coroutine: u32,
}

/// Time, randomness, CPU and identity for one client.
pub trait ClientCtx {
    /// Virtual (or real) time now, in nanoseconds.
    fn now_ns(&self) -> u64;

    /// Waits `ns` without using the CPU.
    fn sleep(&self, ns: u64) -> impl Future<Output = ()>;

    /// Gives the CPU to the other coroutines of this thread (costs one coroutine switch). A spin
    /// loop must `yield_now` or `sleep`; the simulator reports a client that spins without
    /// virtual time advancing.
    fn yield_now(&self) -> impl Future<Output = ()>;

    /// The client's own random stream, derived from the run's seed and the client's identity.
    fn with_rng<R>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R;

    /// Spends `units` of `work` on this client's thread: coroutines of one thread never compute
    /// in parallel, and other threads are not delayed.
    fn charge_cpu(&self, work: CpuWork, units: u64) -> impl Future<Output = ()>;

    /// Whether [`ClientCtx::charge_cpu`] costs nothing here: true only in the simulator's
    /// instant mode (a load, where virtual time stands still). Index code may then skip host
    /// work whose only use is to price a charge, provided what it leaves behind is exactly what
    /// the priced path would have left (HStore's SLS links a loaded skiplist once, at its first
    /// priced use, instead of searching it for every insert). False by default and on hardware.
    fn cpu_is_free(&self) -> bool {
        false
    }

    fn identity(&self) -> ClientIdentity;
}

/// What index code is written against: remote memory plus the client context.
pub trait Client: Verbs + ClientCtx {}

impl<T: Verbs + ClientCtx> Client for T {}

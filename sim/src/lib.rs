//! # dmkit-sim: a deterministic RDMA NIC simulator
//!
//! Discrete-event, one OS thread, virtual time in integer nanoseconds. Clients are async tasks
//! that use [`dmkit_rdma::Verbs`] through a [`SimClient`]; the same seed and configuration give
//! a bit-identical run (the [`Stats::trace_hash`] proves it).
//!
//! - **NIC model** ([`Profile`], `nic.rs`): requester NIC → wire → responder NIC (IOPS bound,
//!   inbound bandwidth, arrival order) → PCIe or device memory or the atomic unit → responder
//!   NIC (outbound bandwidth) → wire → requester NIC. Per-packet headers and MTU segmentation
//!   are counted; doorbell batches cost one submission but every verb counts against IOPS.
//! - **Memory model** ([`MemoryModel`]): every switch of DESIGN.md §1, enforced by which steps
//!   are enabled, so the schedule explorer sees every behaviour the switches allow.
//! - **The seam** ([`Chooser`]): every wait is a step; timed runs take the earliest, checking
//!   runs let a chooser take any enabled one.
//! - **Memory** ([`SparseMemory`]): stored by non-zero 64-byte line.
//! - **Faults** ([`Faults`]): extra delay, maximal tearing, client crash, memory-node crash and
//!   restart, memory-node slowdown; each counted in [`FaultCounters`].
//!
//! In timed runs without the tearing fault, a READ or WRITE is applied in one step (one of the
//! behaviours the model allows); tearing and chooser runs split verbs into their units.

mod allocations;
mod config;
mod core;
mod exec;
mod memory;
mod nic;
pub mod profile;
mod sched;
mod stats;

pub use allocations::{UnallocatedVerb, UnallocatedVerbs};
pub use config::{
    ClientCrash, ConfigError, ExtraDelay, Faults, MemoryModel, NodeCrash, ReadFailure, SimConfig, Slowdown, Tearing,
    Topology,
};
pub use exec::{Image, Sim, SimClient, SimError, Sleep, TaskOutput};
pub use memory::{LINE_BYTES, SparseMemory};
pub use profile::{Basis, Profile, ProfileError};
pub use sched::{Actor, Chooser, EarliestChooser, RandomChooser, StepClass, StepInfo};
pub use stats::{ClientStats, FaultCounters, NodeStats, Stats, VerbCount, VerbKind};

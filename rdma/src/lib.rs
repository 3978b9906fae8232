//! # dmkit-rdma: the verbs API
//!
//! Index code is written once against [`Verbs`] and runs unchanged in the simulator
//! (`dmkit-sim`), under the model checkers (`dmkit-verify`) and on ConnectX hardware.
//!
//! - [`RemoteAddr`]: `[region: 1 | node: 15 | offset: 48]`.
//! - [`Buf`]: owned buffers; a posted verb always executes.
//! - [`Verbs`]: READ, WRITE, CAS, FAA, masked CAS/FAA, doorbell batches, unsignaled batches and
//!   two-sided `call`, with the memory model written on the trait.
//! - [`Caps`]: what a backend can do; [`emulate`] gives masked atomics where it cannot.
//! - [`ClientCtx`]: time, randomness, CPU and identity; [`Client`] = `Verbs + ClientCtx` is what
//!   index code is written against.
//! - [`service`]: server-side handlers and workers with local memory access; [`sync`]: local
//!   notification and queues that work on any executor.
//! - [`alloc`]: the memory node's chunk allocator, reached by `call`.
//! - [`real`]: the real backend's work-request building and control-channel handshake.

mod addr;
pub mod alloc;
pub mod atomics;
mod buf;
mod ctx;
pub mod emulate;
mod error;
pub mod real;
pub mod reserved;
pub mod service;
pub mod sync;
mod verbs;

pub use addr::{NodeId, Region, RemoteAddr};
pub use buf::Buf;
pub use ctx::{Client, ClientCtx, ClientIdentity, CpuWork};
pub use error::VerbsError;
pub use rand_chacha::ChaCha8Rng;
pub use reserved::{Fixed, NULL_LINE_BYTES, RESERVED_BYTES};
pub use verbs::{BatchOutcome, Caps, MaskedAtomics, MemoryView, Op, Request, Response, Verbs, single, validate_batch};

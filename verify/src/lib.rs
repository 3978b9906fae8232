//! # dmkit-verify: checking indexes' synchronization by machine
//!
//! - [`history`]: operation histories and their JSON lines format.
//! - [`linearizability`]: a per-key linearizability checker (Wing–Gong with Lowe's memoisation),
//!   scans judged by the per-key property of DESIGN.md §3.

pub mod history;
pub mod linearizability;

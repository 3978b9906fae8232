//! # dmkit-verify: checking indexes' synchronization by machine
//!
//! - [`explore`]: the schedule explorer over the simulator's seam (random, PCT, DFS with
//!   preemption bounding and sleep sets), with replay strings.
//! - [`history`]: operation histories and their JSON lines format.
//! - [`linearizability`]: a per-key linearizability checker (Wing–Gong with Lowe's memoisation),
//!   scans judged by the per-key property of DESIGN.md §3.
//! - [`deploy`]: an index installed in the simulator, for all who run one.
//! - [`harness`]: presets and the judged, explored workload for any index.
//! - [`registry`]: the indexes `dmkit check` knows; each index's presets are in its own folder
//!   (`dmkit_indexes::<name>::presets`).

pub mod deploy;
pub mod explore;
pub mod harness;
pub mod history;
pub mod linearizability;
pub mod registry;

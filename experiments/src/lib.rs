//! # dmkit-experiments: workloads, runner, reports and the `dmkit` command
//!
//! - [`perftest`]: the simulator's ib_*_bw / ib_read_lat.
//! - [`cluster`]: `cluster.toml`, a hardware run's memory nodes.
//! - `hardware` (feature `connectx`): `dmkit memory-node` and the runner on real verbs.
//! - [`fill`]: a hash table's load factor at its first insertion failure.
//! - [`workload`]: YCSB and other workload generators, traces.
//! - [`run`]: one experiment (or a sweep from a run file) and the metric schema.
//! - [`plot`]: curves from results, SVG and PNG.
//! - [`reproduce`]: a paper's figure: its sweep, its numbers beside ours.
//! - [`sweep`]: independent points on every core.

pub mod cluster;
pub mod fill;
#[cfg(feature = "connectx")]
pub mod hardware;
pub mod perftest;
pub mod plot;
pub mod reproduce;
pub mod run;
pub mod sweep;
pub mod workload;

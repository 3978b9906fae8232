//! # dmkit-experiments: workloads, runner, reports and the `dmkit` command
//!
//! - [`perftest`]: the simulator's ib_*_bw / ib_read_lat.
//! - [`fill`]: a hash table's load factor at its first insertion failure.
//! - [`workload`]: YCSB and other workload generators, traces.
//! - [`run`]: one experiment (or a sweep from a run file) and the metric schema.
//! - [`plot`]: curves from results, SVG and PNG.
//! - [`reproduce`]: a paper's figure: its sweep, its numbers beside ours.
//! - [`sweep`]: independent points on every core.

pub mod fill;
pub mod perftest;
pub mod plot;
pub mod reproduce;
pub mod run;
pub mod sweep;
pub mod workload;

//! # dmkit-experiments: workloads, runner, reports and the `dmkit` command
//!
//! - [`bench`]: `dmkit bench-load`, load time per index and key count.
//! - [`perftest`]: the simulator's ib_*_bw / ib_read_lat.
//! - [`cluster`]: `cluster.toml`, a hardware run's memory nodes.
//! - `hardware` (feature `connectx`): `dmkit memory-node` and the runner on real verbs.
//! - [`fill`]: a hash table's load factor at its first insertion failure.
//! - [`workload`]: YCSB and other workload generators, traces.
//! - [`run`]: one experiment (or a sweep from a run file) and the metric schema.
//! - [`runner`]: the simulator runner: load once into an image, run points from it.
//! - [`measure`]: steady-state measurement: MSER-5 warm-up, batch means, the stopping rule.
//! - [`plot`]: curves from results, SVG and PNG.
//! - [`reproduce`]: a paper's figure: its sweep, its numbers beside ours.
//! - [`sweep`]: independent points on every core.

pub mod bench;
pub mod cluster;
pub mod figure;
pub mod fill;
#[cfg(feature = "connectx")]
pub mod hardware;
pub mod measure;
pub mod perftest;
pub mod plot;
pub mod reproduce;
pub mod run;
pub mod runner;
pub mod sweep;
pub mod workload;

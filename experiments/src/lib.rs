//! # dmkit-experiments: workloads, runner, reports and the `dmkit` command
//!
//! So far: [`perftest`], the simulator's ib_*_bw / ib_read_lat, and [`sweep`], which runs
//! independent points on the machine's cores.

pub mod perftest;
pub mod run;
pub mod sweep;
pub mod workload;

//! `dmkit run`: one experiment — load an index, warm up, measure — and the metric schema every
//! index reports in.
//!
//! Clients are spread round-robin over compute nodes; each compute node has
//! `threads_per_cn` threads of `coroutines` clients (a thread is a serial CPU its coroutines
//! share). Every client runs operations from its own [`OpSource`] back to back (closed loop);
//! operations that *complete* inside the measurement window count, with their latency, the
//! round trips they waited for, and the verbs and bytes they issued.
//!
//! One concern a file: [`schema`] (the result and the setup), [`request`] (a request, its
//! index from the registry, the sweep runner), [`plan`] (image keys and memory estimates),
//! [`report`] (table and CSV), [`file`] (run files, shards, merge), [`client`] (the measured
//! client, written once for every backend), [`tally`] (what clients record, and the result
//! both backends build from it). The simulator's runner is
//! [`crate::runner`], the hardware's [`crate::hardware`]; both take the schema from here, and
//! only [`run_index`] chooses between them.

pub(crate) mod client;
pub mod file;
pub mod plan;
pub mod report;
pub mod request;
pub mod schema;
pub mod tally;

pub use file::*;
pub use plan::*;
pub use report::*;
pub use request::*;
pub use schema::*;
pub use tally::*;

use dmkit_indexes::IndexKind;

/// Runs index `K` with `options`: loads `items` (or takes the image in `slot`), then runs every
/// client's source; on hardware when the setup names a cluster. `names` = (index config name,
/// workload name).
pub fn run_index<K: IndexKind>(
    setup: &RunSetup,
    options: &K::Options,
    names: (&str, &str),
    items: crate::workload::LoadItems,
    sources: Vec<Box<dyn OpSource>>,
    ctx: &RunContext<'_>,
) -> Result<RunResult, String> {
    K::validate(options)?;
    setup.window.validate()?;
    if let Some(cluster) = &setup.cluster {
        if setup.warm != Warm::Whole {
            return Err("--warm load-share and load-replay are the simulator's (they fill caches outside time); on \
                        hardware the caches warm by running"
                .into());
        }
        #[cfg(feature = "connectx")]
        return crate::hardware::run_index::<K>(cluster, setup, options, names, items.collect(), sources);
        #[cfg(not(feature = "connectx"))]
        {
            let _ = cluster;
            return Err("this build has no real RDMA backend (feature connectx)".into());
        }
    }
    crate::runner::run_index::<K>(setup, options, names, items, sources, ctx.image, ctx.progress)
}

/// What a run shares with the rest of its sweep: the image slot of its load, and where its
/// progress goes.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct RunContext<'a> {
    pub image: Option<&'a crate::runner::ImageSlot>,
    pub progress: &'a dyn crate::runner::Progress,
}

impl RunContext<'static> {
    /// A run alone: its own load, no progress shown.
    pub fn alone() -> RunContext<'static> {
        RunContext { image: None, progress: &crate::runner::Quiet }
    }
}

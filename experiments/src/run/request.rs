//! A request (`dmkit run`'s flags or a run file's point): its workload, its index found in the
//! registry and sized for it ([`dispatch`]), and the sweep runner.

use super::plan::image_key;
use super::schema::{OpSource, RunResult, RunSetup, Task};
use super::{RunContext, run_index};
use dmkit_indexes::IndexKind;
use dmkit_indexes::spec::Op;

/// A client's operations from a workload stream.
#[allow(missing_debug_implementations)] // the stream holds generator state not worth printing
pub struct WorkloadSource {
    stream: crate::workload::Stream,
}

impl WorkloadSource {
    pub fn new(stream: crate::workload::Stream) -> WorkloadSource {
        WorkloadSource { stream }
    }
}

impl OpSource for WorkloadSource {
    fn next_op(&mut self) -> Option<Task> {
        use crate::workload::WorkloadOp as W;
        Some(match self.stream.next_op() {
            W::Search { key } => Task::single(Op::Search { key: key.bytes }),
            W::Update { key, value } => Task::single(Op::Update { key: key.bytes, value }),
            W::Insert { key, value } => Task::single(Op::Insert { key: key.bytes, value }),
            W::Delete { key } => Task::single(Op::Delete { key: key.bytes }),
            W::Scan { start, limit } => Task::single(Op::Scan {
                start: std::ops::Bound::Included(start.bytes),
                end: std::ops::Bound::Unbounded,
                limit,
            }),
            W::ReadModifyWrite { key, value } => Task {
                name: "read_modify_write",
                ops: vec![Op::Search { key: key.bytes.clone() }, Op::Update { key: key.bytes, value }],
            },
        })
    }
}

/// What `dmkit run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub index: String,
    pub config: String,
    pub workload: String,
    pub keys: u64,
    pub value_bytes: Option<usize>,
    /// Key size: 8-byte integers by default; other sizes are padded integers, or e-mail-like
    /// strings with `email_keys`.
    pub key_bytes: Option<usize>,
    pub email_keys: bool,
    /// The skew θ of the workload's Zipfian or latest distribution.
    pub theta: Option<f64>,
    /// The ranks a dense- or mica- workload's Zipfian draws over (a paper's key count).
    pub zipf_items: Option<u64>,
    /// Load the keys in a fixed pseudo-random order (`WorkloadSpec::shuffled_load`).
    pub shuffle_load: bool,
    /// Run this many operations per client after the warm-up instead of a fixed duration.
    pub ops_per_client: Option<u64>,
    /// The fresh keys a LOAD inserts in all (`--inserts`): hash tables are sized for
    /// `keys + inserts` items (see [`RunRequest::items`]).
    pub inserts: Option<u64>,
    /// The index's cache budget per compute node (indexes with a compute-node cache).
    pub cache_bytes: Option<u64>,
    pub setup: RunSetup,
}

impl RunRequest {
    /// The items the index must hold: the loaded keys and the run's budget of fresh inserts.
    /// Hash tables without resizing (or, for RACE, without a split in the run: the RACE
    /// digest's D4, "pre-create enough subtables to hold the target item count") are sized
    /// for it, as the papers size theirs for the whole experiment.
    pub fn items(&self) -> u64 {
        self.keys.saturating_add(self.inserts.unwrap_or(0))
    }
}

/// Applies a request's key size, θ, Zipfian key count and value size to a workload spec.
fn shape_workload(spec: &mut crate::workload::WorkloadSpec, req: &RunRequest) -> Result<(), String> {
    use crate::workload::{Distribution, KeyFormat, KeyOrder};
    if let Some(v) = req.value_bytes {
        spec.value_bytes = v;
    }
    let order = match spec.key_format {
        KeyFormat::Integer { order } | KeyFormat::Padded { order, .. } => order,
        KeyFormat::Email { .. } => KeyOrder::Hashed,
    };
    spec.key_format = match (req.key_bytes, req.email_keys) {
        (None, false) => spec.key_format,
        (Some(8), false) => KeyFormat::Integer { order },
        (Some(bytes), false) => KeyFormat::Padded { bytes, order },
        (bytes, true) => KeyFormat::Email { bytes: bytes.unwrap_or(32), domain_first: false },
    };
    if let Some(t) = req.theta {
        spec.distribution = match spec.distribution {
            Distribution::ScrambledZipfian { .. } => Distribution::ScrambledZipfian { theta: t },
            Distribution::Zipfian { .. } => Distribution::Zipfian { theta: t },
            Distribution::Latest { .. } => Distribution::Latest { theta: t },
            other => return Err(format!("--theta needs a skewed workload; {} is {other:?}", spec.name)),
        };
    }
    spec.zipfian_items = req.zipf_items;
    spec.shuffled_load = req.shuffle_load;
    spec.validate().map_err(|e| e.to_string())
}

/// Stops a client's source after `left` operations.
struct Limited {
    inner: Box<dyn OpSource>,
    left: u64,
}

impl OpSource for Limited {
    fn next_op(&mut self) -> Option<Task> {
        self.left = self.left.checked_sub(1)?;
        self.inner.next_op()
    }
}

/// Names `dmkit run --index` accepts: the registry's.
pub fn index_names() -> Vec<&'static str> {
    dmkit_indexes::registry::index_names()
}

/// Runs a request: builds the workload and the index's named configuration, then
/// [`run_index`]. Errors are one line (bad index, config or workload).
pub fn run_request(req: &RunRequest) -> Result<RunResult, String> {
    run_request_with(req, &RunContext::alone())
}

/// [`run_request`] sharing its sweep's image and showing progress.
pub fn run_request_with(req: &RunRequest, ctx: &RunContext<'_>) -> Result<RunResult, String> {
    dispatch(req, Run { ctx })
}

/// What a request asks of its index once the index is named and its options built: run it
/// ([`run_request`]), load it only (`dmkit bench-load`), or name its image (sweeps).
pub trait IndexVisitor {
    type Out;
    fn visit<K: IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        names: (&str, &str),
        work: Work,
    ) -> Result<Self::Out, String>;
}

/// One line for each request whose index is built for dense keys ([`IndexKind::DENSE_KEYS`])
/// and whose workload gives it hashed ones, for the person running it (distinct lines only).
pub fn key_space_notes(requests: &[RunRequest]) -> Vec<String> {
    struct KeySpace;
    impl IndexVisitor for KeySpace {
        type Out = Option<String>;
        fn visit<K: IndexKind>(
            self,
            _req: &RunRequest,
            _options: &K::Options,
            _names: (&str, &str),
            work: Work,
        ) -> Result<Option<String>, String> {
            use crate::workload::{KeyFormat, KeyOrder};
            let hashed = matches!(
                work.spec.key_format,
                KeyFormat::Integer { order: KeyOrder::Hashed } | KeyFormat::Padded { order: KeyOrder::Hashed, .. }
            );
            Ok(K::DENSE_KEYS.filter(|_| hashed).map(|why| {
                format!(
                    "dmkit: note: {} is built for dense keys and workload {} gives it hashed ones: {why}",
                    K::NAME,
                    work.spec.name
                )
            }))
        }
    }
    let mut notes: Vec<String> = Vec::new();
    for r in requests {
        // A bad request is left to its run, which reports the error.
        if let Ok(Some(note)) = dispatch(r, KeySpace) {
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    notes
}

/// A request's workload: the items to load and each client's operations, built on demand.
#[allow(missing_debug_implementations)] // the shared state holds atomics not worth printing
pub struct Work {
    pub spec: crate::workload::WorkloadSpec,
    pub items: crate::workload::LoadItems,
    shared: crate::workload::SharedState,
}

impl Work {
    /// Every client's operation source.
    pub fn sources(&self, req: &RunRequest) -> Vec<Box<dyn OpSource>> {
        (0..req.setup.clients())
            .map(|c| {
                let source: Box<dyn OpSource> =
                    Box::new(WorkloadSource::new(self.spec.stream(req.setup.seed, c, &self.shared)));
                match req.ops_per_client {
                    // Warm-up operations come first: a client that finishes its quota early stops.
                    Some(n) => Box::new(Limited { inner: source, left: n }) as Box<dyn OpSource>,
                    None => source,
                }
            })
            .collect()
    }
}

struct Run<'a, 'b> {
    ctx: &'a RunContext<'b>,
}

impl IndexVisitor for Run<'_, '_> {
    type Out = RunResult;
    fn visit<K: IndexKind>(
        self,
        req: &RunRequest,
        options: &K::Options,
        names: (&str, &str),
        work: Work,
    ) -> Result<RunResult, String> {
        let sources = work.sources(req);
        let spec = work.spec.clone();
        let mut result = run_index::<K>(&req.setup, options, names, work.items, sources, self.ctx)?;
        result.workload_spec = Some(spec);
        Ok(result)
    }
}

/// Runs every request on up to `threads` cores, loading each distinct state once (see
/// [`crate::sweep`]); results in request order.
pub fn run_requests(requests: &[RunRequest], threads: usize, label: &str) -> Vec<Result<RunResult, String>> {
    let keys: Vec<Option<String>> = requests.iter().map(image_key).collect();
    crate::sweep::run_points_shared(
        requests,
        &keys,
        threads,
        label,
        |r| format!("{} {} {} clients", r.index, r.workload, r.setup.clients()),
        |r, slot, progress| {
            // A panic is a bug; it fails its point with a message rather than the whole sweep.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_request_with(r, &RunContext { image: slot, progress })
            }))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(format!(
                    "{} {} with {} clients panicked (a bug in dmkit; seed {}): {what}",
                    r.index,
                    r.workload,
                    r.setup.clients(),
                    r.setup.seed
                ))
            })
        },
    )
}

/// Builds a request's workload and its index's named configuration, then hands both to `v`.
/// Errors are one line (bad index, config or workload).
pub fn dispatch<V: IndexVisitor>(req: &RunRequest, v: V) -> Result<V::Out, String> {
    use crate::workload::{SharedState, WorkloadSpec, load_items};
    if req.keys == 0 {
        return Err("--keys must be positive".into());
    }
    let mut spec = WorkloadSpec::from_name(&req.workload, req.keys).map_err(|e| e.to_string())?;
    shape_workload(&mut spec, req)?;
    // On hardware each compute-node process generates its own clients' operations: the
    // processes split the fresh key numbers between them so that no key is inserted twice.
    let shared = match &req.setup.cluster {
        Some(c) => SharedState::strided(spec.record_count, c.compute_node as u64, req.setup.compute_nodes as u64),
        None => SharedState::for_spec(&spec),
    };
    // Every workload starts from `keys` loaded items; LOAD then inserts fresh keys beyond them
    // (the papers' LOAD: SMART and CHIME preload 5 M keys, then insert).
    let work = Work { items: load_items(&spec), spec, shared };
    dmkit_indexes::registry::visit(&req.index, &req.config, Sized { req, v, work })?
}

/// [`dispatch`]'s step from the registry's index to the request's visitor: the index's options
/// for the request's shape ([`IndexKind::for_run`]).
struct Sized<'r, V> {
    req: &'r RunRequest,
    v: V,
    work: Work,
}

impl<V: IndexVisitor> dmkit_indexes::registry::Visitor for Sized<'_, V> {
    type Out = Result<V::Out, String>;
    fn visit<K: IndexKind>(self) -> Self::Out {
        let Sized { req, v, work } = self;
        let spec = &work.spec;
        if spec.mix.scan > 0.0 && !K::SUPPORTS_SCAN {
            return Err(format!("index {} has no scans, and workload {} has them", K::NAME, spec.name));
        }
        let shape = dmkit_indexes::registry::RunShape {
            items: req.items(),
            key_bytes: spec.key_format.key_bytes(),
            value_bytes: spec.value_bytes,
            memory_nodes: req.setup.memory_nodes,
            cache_bytes: req.cache_bytes,
            workload: &spec.name,
        };
        let (options, config) = K::for_run(&shape, &req.config)?;
        // `work` moves into the visitor: the workload's name is kept apart.
        let workload = spec.name.clone();
        v.visit::<K>(req, &options, (&config, &workload), work)
    }
}

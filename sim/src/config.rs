//! Simulation configuration: topology, memory-model switches, faults.

use crate::profile::Profile;
use dmkit_rdma::MaskedAtomics;
use dmkit_rdma::alloc::ReuseMode;
use std::fmt;

/// The memory-model switches of DESIGN.md §1. Defaults are the weakest behaviour the hardware
/// may show; a protocol must be correct under them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryModel {
    /// RMWs are atomic with respect to WRITEs and local stores too (default false: an RMW is a
    /// read-and-compare step and a write step, and a WRITE may land between them).
    pub rmw_atomic_with_writes: bool,
    /// The unit a READ or WRITE is atomic within: 64 (default) or 8.
    pub atomicity_bytes: u32,
    /// READs sample their units in ascending address order (default false: any order).
    pub read_units_ascending: bool,
    /// WRITEs place their units in any order (default false: ascending).
    pub write_units_arbitrary: bool,
    /// A later READ on a QP may sample before an earlier RMW of that QP completes (default
    /// false: the ordering table's "RMW → READ: sees the RMW").
    pub rmw_then_read_unordered: bool,
}

impl Default for MemoryModel {
    fn default() -> Self {
        MemoryModel {
            rmw_atomic_with_writes: false,
            atomicity_bytes: 64,
            read_units_ascending: false,
            write_units_arbitrary: false,
            rmw_then_read_unordered: false,
        }
    }
}

/// How many nodes of each kind. Memory nodes get ids `0..memory_nodes`, server nodes follow,
/// then compute nodes. Memory and server nodes have registered memory (verbs may target them);
/// compute nodes run clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    pub memory_nodes: u16,
    pub server_nodes: u16,
    pub compute_nodes: u16,
    /// RPC threads of each memory node (its weak cores serving the chunk allocator).
    pub memory_node_threads: u16,
    /// RPC threads of each server node.
    pub server_threads: u16,
    /// Service workers on server nodes share the CPUs of the RPC threads (worker `i` with RPC
    /// thread `i mod server_threads`), as hyper-threads of one core do (HStore's servers run
    /// 4 RPC and 4 worker threads on 4 cores): the two never compute at once. Off, every
    /// worker has a CPU of its own.
    pub server_workers_share_cores: bool,
    /// Host bytes at the bottom of every memory node that the allocator never hands out
    /// (superblocks at fixed addresses live there, and offset 0 stays the null pointer).
    pub reserved_bytes: u64,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            memory_nodes: 1,
            server_nodes: 0,
            compute_nodes: 1,
            memory_node_threads: 1,
            server_threads: 4,
            server_workers_share_cores: false,
            reserved_bytes: dmkit_rdma::RESERVED_BYTES,
        }
    }
}

impl Topology {
    /// Nodes with registered memory: memory nodes, then server nodes.
    pub fn target_nodes(&self) -> u16 {
        self.memory_nodes + self.server_nodes
    }

    /// The node id of compute node `i`.
    pub fn compute_node_id(&self, i: u16) -> dmkit_rdma::NodeId {
        dmkit_rdma::NodeId(self.target_nodes() + i)
    }

    /// The node id of server node `i`.
    pub fn server_node_id(&self, i: u16) -> dmkit_rdma::NodeId {
        dmkit_rdma::NodeId(self.memory_nodes + i)
    }
}

/// Extra delay added to a verb's trip to the responder. It never reorders a QP: a delayed verb
/// also delays the verbs posted after it on the same QP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExtraDelay {
    /// Chance that a verb is delayed.
    pub probability: f64,
    /// Largest delay; each delayed verb draws uniformly from `1..=max_ns`.
    pub max_ns: u64,
}

/// Maximal tearing in timed runs: every READ and WRITE that spans several atomicity units is
/// split into one step per unit, each at an independent random time within `window_ns` of the
/// memory access (in the order the memory-model switches allow), and two-step RMWs spread the
/// same way when `rmw_atomic_with_writes` is false. Chooser runs always split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tearing {
    pub window_ns: u64,
}

/// A memory or server node stops at `at_ns` (its memory, its services' state and its threads'
/// tasks are lost) and, if `restart_at_ns` is set, comes back empty then, with its services
/// created afresh. Verbs and calls carry the incarnation they were posted to: one posted before
/// the crash that reaches the node after the restart completes in error (`NodeDown`), as on
/// hardware, where the crash breaks the queue pair; it never touches the new incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeCrash {
    pub node: u16,
    pub at_ns: u64,
    pub restart_at_ns: Option<u64>,
}

/// A transient transport failure on a node that stays up: the first READ to reach memory node
/// `node` at or after `at_ns` completes in error ([`dmkit_rdma::VerbsError::Timeout`]) after
/// the profile's transport timeout, without reading memory, as when a packet is lost and the
/// retry budget runs out. The node keeps its memory, and the queue pair stays usable: later
/// verbs run and complete as usual (the simplification: on hardware the failure breaks the
/// queue pair and the client reconnects, and verbs in flight behind the failed one complete in
/// error too, whether or not they executed). In chooser runs the failure is armed by a fault
/// step the explorer places, as it places crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadFailure {
    pub node: u16,
    pub at_ns: u64,
}

/// A client's task is dropped at the first step boundary at or after `at_ns`. Verbs it posted
/// still land, and whatever it held (remote locks) stays held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientCrash {
    pub client: u32,
    pub at_ns: u64,
}

/// A memory node serves verbs `factor` times slower during `[from_ns, to_ns)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowdown {
    pub node: u16,
    pub from_ns: u64,
    pub to_ns: u64,
    pub factor: f64,
}

/// Every fault mode; all seeded, all counted in [`crate::FaultCounters`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    pub extra_delay: Option<ExtraDelay>,
    pub tearing: Option<Tearing>,
    pub client_crashes: Vec<ClientCrash>,
    pub node_crashes: Vec<NodeCrash>,
    pub slowdowns: Vec<Slowdown>,
    pub read_failures: Vec<ReadFailure>,
}

/// The end of virtual time (about 106 days): picosecond stage arithmetic stays in `u64`
/// below it, and a `sleep` longer than that ends there.
pub const MAX_TIME_NS: u64 = u64::MAX / 1000 / 2;

/// Largest extra delay a verb can draw (1000 s of virtual time).
pub const MAX_FAULT_DELAY_NS: u64 = 1_000_000_000_000;

/// Largest slowdown factor.
pub const MAX_SLOWDOWN: f64 = 1e6;

/// Everything a simulation needs besides the tasks it runs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub profile: Profile,
    pub topology: Topology,
    pub memory_model: MemoryModel,
    pub faults: Faults,
    pub seed: u64,
    /// Native (ConnectX) or emulated masked atomics, as a backend's `Caps` reports.
    pub masked_atomics: MaskedAtomics,
    pub allocator_reuse: ReuseMode,
    /// Keep one line per executed step (see [`crate::Sim::take_trace`]).
    pub trace: bool,
    /// Stop with [`crate::SimError::StepLimit`] after this many steps.
    pub step_limit: Option<u64>,
    /// Report [`crate::SimError::Spin`] when one task is polled this many times in a row without
    /// virtual time advancing.
    pub spin_poll_limit: u64,
    /// Who a verb's steps belong to for choosers (PCT priorities, DFS preemptions): its client
    /// (false, the default), or its queue pair (true), so that one QP's posted verbs can be
    /// held back while the client goes on over another QP — what an unawaited WRITE does on a
    /// NIC. Finer actors cost preemptions elsewhere: a bug inside one client's two QPs needs
    /// more of them.
    pub qp_actors: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            profile: Profile::default_profile(),
            topology: Topology::default(),
            memory_model: MemoryModel::default(),
            faults: Faults::default(),
            seed: 0,
            masked_atomics: MaskedAtomics::Native,
            allocator_reuse: ReuseMode::Fifo,
            trace: false,
            step_limit: None,
            spin_poll_limit: 100_000,
            qp_actors: false,
        }
    }
}

/// A configuration the simulator refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad simulation config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl SimConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.topology;
        let err = |m: String| Err(ConfigError(m));
        if t.memory_nodes == 0 {
            return err("at least one memory node is needed".into());
        }
        if t.compute_nodes == 0 {
            return err("at least one compute node is needed".into());
        }
        if t.memory_node_threads == 0 || (t.server_nodes > 0 && t.server_threads == 0) {
            return err("memory and server nodes need at least one RPC thread".into());
        }
        if t.memory_nodes as u32 + t.server_nodes as u32 + t.compute_nodes as u32 > dmkit_rdma::NodeId::MAX as u32 {
            return err(format!("at most {} nodes fit in a remote address", dmkit_rdma::NodeId::MAX));
        }
        if t.reserved_bytes > self.profile.host_memory_bytes {
            return err("reserved bytes exceed the memory node's host memory".into());
        }
        if ![8, 64].contains(&self.memory_model.atomicity_bytes) {
            return err(format!("atomicity_bytes must be 8 or 64, got {}", self.memory_model.atomicity_bytes));
        }
        let f = &self.faults;
        if let Some(d) = f.extra_delay {
            if !(0.0..=1.0).contains(&d.probability) || d.max_ns == 0 || d.max_ns > MAX_FAULT_DELAY_NS {
                return err(format!(
                    "extra delay needs a probability in [0, 1] and 0 < max_ns <= {MAX_FAULT_DELAY_NS}, got {d:?}"
                ));
            }
        }
        for c in &f.node_crashes {
            if c.node >= t.target_nodes() {
                return err(format!(
                    "node crash names node {}, but memory and server nodes are 0..{}",
                    c.node,
                    t.target_nodes()
                ));
            }
            if c.restart_at_ns.is_some_and(|r| r <= c.at_ns) {
                return err(format!("node {} restarts before it crashes", c.node));
            }
        }
        for r in &f.read_failures {
            if r.node >= t.memory_nodes {
                return err(format!("read failure names node {}, but memory nodes are 0..{}", r.node, t.memory_nodes));
            }
        }
        for s in &f.slowdowns {
            if s.node >= t.target_nodes() || !(1.0..=MAX_SLOWDOWN).contains(&s.factor) || s.to_ns <= s.from_ns {
                return err(format!(
                    "bad slowdown {s:?}: needs a memory node, 1 <= factor <= {MAX_SLOWDOWN} and from < to"
                ));
            }
        }
        Ok(())
    }
}

//! Counters a run reports.

/// The kinds of verb: what the simulator's stage arithmetic (READ, WRITE or SEND, atomic),
/// its counters and `dmkit perftest` distinguish. One enum for all three.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerbKind {
    Read,
    Write,
    Cas,
    Faa,
    MaskedCas,
    MaskedFaa,
    Call,
}

impl VerbKind {
    pub const ALL: [VerbKind; 7] = [
        VerbKind::Read,
        VerbKind::Write,
        VerbKind::Cas,
        VerbKind::Faa,
        VerbKind::MaskedCas,
        VerbKind::MaskedFaa,
        VerbKind::Call,
    ];

    pub fn name(self) -> &'static str {
        match self {
            VerbKind::Read => "read",
            VerbKind::Write => "write",
            VerbKind::Cas => "cas",
            VerbKind::Faa => "faa",
            VerbKind::MaskedCas => "masked_cas",
            VerbKind::MaskedFaa => "masked_faa",
            VerbKind::Call => "call",
        }
    }

    /// Executed by the responder's atomic unit (a read-modify-write of 8 bytes).
    pub fn is_rmw(self) -> bool {
        matches!(self, VerbKind::Cas | VerbKind::Faa | VerbKind::MaskedCas | VerbKind::MaskedFaa)
    }

    /// The kind of a one-sided verb.
    pub fn of(op: &dmkit_rdma::Op) -> VerbKind {
        use dmkit_rdma::Op;
        match op {
            Op::Read(_) => VerbKind::Read,
            Op::Write(_) => VerbKind::Write,
            Op::Cas { .. } => VerbKind::Cas,
            Op::Faa { .. } => VerbKind::Faa,
            Op::MaskedCas { .. } => VerbKind::MaskedCas,
            Op::MaskedFaa { .. } => VerbKind::MaskedFaa,
        }
    }
}

impl std::str::FromStr for VerbKind {
    type Err = String;

    /// A kind by its name, with `-` or `_` between words (`masked-cas`, `masked_cas`).
    fn from_str(s: &str) -> Result<VerbKind, String> {
        let wanted = s.replace('-', "_");
        VerbKind::ALL.into_iter().find(|k| k.name() == wanted).ok_or_else(|| {
            let names: Vec<&str> = VerbKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown verb '{s}' (one of {})", names.join(", "))
        })
    }
}

impl std::fmt::Display for VerbKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How many verbs of one kind a node served, and their payload bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerbCount {
    pub count: u64,
    pub payload_bytes: u64,
}

/// Per target node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeStats {
    /// Indexed like [`VerbKind::ALL`].
    pub verbs: [VerbCount; 7],
    /// Wire bytes received and sent by the node's NIC.
    pub wire_bytes_in: u64,
    pub wire_bytes_out: u64,
    /// Time the NIC's receive pipeline (the IOPS bound) was busy.
    pub nic_busy_ns: u64,
    /// Time the NIC's send link was busy.
    pub link_out_busy_ns: u64,
    /// Misses of the NIC's queue-pair context cache and translation cache (0 when the profile
    /// does not model them).
    pub nic_context_misses: u64,
    pub nic_translation_misses: u64,
    /// Host bytes the node's simulated memory occupies, and the non-zero bytes it stores.
    pub host_bytes: u64,
    pub nonzero_bytes: u64,
}

impl NodeStats {
    pub fn verbs_of(&self, kind: VerbKind) -> VerbCount {
        self.verbs[kind as usize]
    }

    /// Verbs of every one-sided kind.
    pub fn one_sided_verbs(&self) -> u64 {
        self.verbs[..6].iter().map(|v| v.count).sum()
    }
}

/// How often each fault mode fired. A test that configures a fault asserts its counter moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    pub delays_injected: u64,
    pub torn_verbs: u64,
    pub client_crashes: u64,
    pub node_crashes: u64,
    pub node_restarts: u64,
    pub verbs_failed_node_down: u64,
    pub calls_failed_node_down: u64,
    pub verbs_slowed: u64,
    /// READs failed by [`crate::ReadFailure`].
    pub reads_failed: u64,
}

/// A snapshot of a run's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub now_ns: u64,
    /// Steps executed (events).
    pub steps: u64,
    pub verbs_posted: u64,
    pub batches_posted: u64,
    pub calls_posted: u64,
    /// Indexed by target node id (memory nodes).
    pub nodes: Vec<NodeStats>,
    /// Queue-pair context misses of the compute nodes' NICs (sending verbs).
    pub compute_nic_context_misses: u64,
    pub faults: FaultCounters,
    /// Verbs that addressed host memory no allocator handed out (see `allocations.rs`).
    pub unallocated: crate::UnallocatedVerbs,
    /// Hash of every executed step: equal for equal seeds and configs.
    pub trace_hash: u64,
}

impl Stats {
    /// Misses of every NIC's caches: the compute nodes' context misses and the target nodes'
    /// context and translation misses (README, "The NIC's caches").
    pub fn nic_cache_misses(&self) -> u64 {
        self.compute_nic_context_misses
            + self.nodes.iter().map(|n| n.nic_context_misses + n.nic_translation_misses).sum::<u64>()
    }
}

/// One client's counters: what its operations cost. Per-operation metrics are differences of
/// two snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Verbs posted, by kind (indexed like [`VerbKind::ALL`]; calls included), with payload bytes.
    pub verbs: [VerbCount; 7],
    /// Round trips on the client's critical path: completions it waited for (doorbell batches
    /// and calls), those in flight together counted once (a batch posted before the last
    /// counted completion arrived overlapped it; `Core::count_round_trip`). Until 2026-12-02
    /// every completion counted, so READs to two nodes posted together counted two.
    pub round_trips: u64,
}

impl ClientStats {
    pub fn verbs_of(&self, kind: VerbKind) -> VerbCount {
        self.verbs[kind as usize]
    }

    /// Payload bytes fetched by READs.
    pub fn bytes_read(&self) -> u64 {
        self.verbs[VerbKind::Read as usize].payload_bytes
    }

    /// Payload bytes stored by WRITEs.
    pub fn bytes_written(&self) -> u64 {
        self.verbs[VerbKind::Write as usize].payload_bytes
    }

    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &ClientStats) -> ClientStats {
        let mut out = *self;
        for (o, e) in out.verbs.iter_mut().zip(&earlier.verbs) {
            o.count -= e.count;
            o.payload_bytes -= e.payload_bytes;
        }
        out.round_trips -= earlier.round_trips;
        out
    }

    pub fn add(&mut self, other: &ClientStats) {
        for (o, e) in self.verbs.iter_mut().zip(&other.verbs) {
            o.count += e.count;
            o.payload_bytes += e.payload_bytes;
        }
        self.round_trips += other.round_trips;
    }
}

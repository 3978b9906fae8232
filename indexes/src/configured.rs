//! An index that is a named configuration of another, registered under a name of its own.
//!
//! ART is SMART's code with SMART's switches off, as the SMART artifact builds both from one
//! source: its own name, configurations, race handlers, plants and checking presets, and
//! everything else — create, open, node state, invariant walk, caches — SMART's. A
//! [`Configuration`] says what is its own; [`Configured`] is then an index, with one line in the
//! registry (`registry!`), and no forwarding written per index.

use crate::registry::RunShape;
use crate::{IndexError, IndexKind, InvariantReport, Limits, PlantedBug, RaceHandler, Servers};
use dmkit_rdma::service::ServiceHost;
use dmkit_rdma::{Caps, Client, MemoryView};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

/// What a named configuration of index [`Configuration::Of`] has of its own.
pub trait Configuration: 'static {
    /// The index whose code runs.
    type Of: IndexKind;
    /// Its name for `dmkit run --index` and `dmkit check --index`.
    const NAME: &'static str;
    /// As [`IndexKind::HOST_BYTES_PER_ITEM`].
    const HOST_BYTES_PER_ITEM: u64 = <Self::Of as IndexKind>::HOST_BYTES_PER_ITEM;
    /// The options of a run of this shape in configuration `config` ("default" for its own).
    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(Options<Self>, String), String>;
    /// As [`IndexKind::race_handlers`].
    fn race_handlers() -> &'static [RaceHandler];
    /// As [`IndexKind::planted_bugs`].
    fn planted_bugs() -> &'static [PlantedBug];
    /// As [`IndexKind::plant`].
    fn plant(options: &mut Options<Self>, bug: &str) -> Result<(), String>;
}

/// The options of configuration `C`: its index's.
pub type Options<C> = <<C as Configuration>::Of as IndexKind>::Options;

/// Configuration `C` as an index.
pub struct Configured<C>(PhantomData<C>);

impl<C: Configuration> std::fmt::Debug for Configured<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (a configuration of {})", C::NAME, <C::Of as IndexKind>::NAME)
    }
}

impl<C: Configuration> IndexKind for Configured<C> {
    const NAME: &'static str = C::NAME;
    const SUPPORTS_SCAN: bool = <C::Of as IndexKind>::SUPPORTS_SCAN;
    const DENSE_KEYS: Option<&'static str> = <C::Of as IndexKind>::DENSE_KEYS;
    const HOST_BYTES_PER_ITEM: u64 = C::HOST_BYTES_PER_ITEM;
    type Options = Options<C>;
    type NodeState = <C::Of as IndexKind>::NodeState;
    type Handle<Cl: Client + Clone + 'static> = <C::Of as IndexKind>::Handle<Cl>;

    fn limits(o: &Self::Options) -> Limits {
        C::Of::limits(o)
    }

    fn cache_host_bytes(o: &Self::Options, compute_nodes: u16, items: u64) -> u64 {
        C::Of::cache_host_bytes(o, compute_nodes, items)
    }

    fn validate(o: &Self::Options) -> Result<(), String> {
        C::Of::validate(o)
    }

    fn for_run(shape: &RunShape<'_>, config: &str) -> Result<(Self::Options, String), String> {
        C::for_run(shape, config)
    }

    fn servers(o: &Self::Options) -> Servers {
        C::Of::servers(o)
    }

    fn install<H: ServiceHost>(o: &Self::Options, host: &mut H) -> Result<(), String> {
        C::Of::install(o, host)
    }

    async fn create<Cl: Client>(o: &Self::Options, ctx: &Cl) -> Result<(), IndexError> {
        C::Of::create(o, ctx).await
    }

    fn node_state(o: &Self::Options, caps: &Caps) -> Self::NodeState {
        C::Of::node_state(o, caps)
    }

    fn node_state_bytes(node: &Self::NodeState) -> u64 {
        C::Of::node_state_bytes(node)
    }

    fn open<Cl: Client + Clone + 'static>(o: &Self::Options, node: Arc<Self::NodeState>, ctx: Cl) -> Self::Handle<Cl> {
        C::Of::open(o, node, ctx)
    }

    fn check_invariants(o: &Self::Options, memory: &dyn MemoryView) -> Result<InvariantReport, String> {
        C::Of::check_invariants(o, memory)
    }

    fn warm(o: &Self::Options, node: &Self::NodeState, memory: &dyn MemoryView) -> Result<(), String> {
        C::Of::warm(o, node, memory)
    }

    fn warm_keys(
        o: &Self::Options,
        node: &Self::NodeState,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        C::Of::warm_keys(o, node, memory, keys)
    }

    fn replay_keys(
        o: &Self::Options,
        node: &Self::NodeState,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        C::Of::replay_keys(o, node, memory, keys)
    }

    fn warm_like(
        o: &Self::Options,
        node: &Self::NodeState,
        warmed: &Self::NodeState,
        memory: &dyn MemoryView,
    ) -> Result<(), String> {
        C::Of::warm_like(o, node, warmed, memory)
    }

    fn inherit(node: &Self::NodeState, loader: &Self::NodeState) {
        C::Of::inherit(node, loader)
    }

    fn node_counters(node: &Self::NodeState) -> BTreeMap<&'static str, u64> {
        C::Of::node_counters(node)
    }

    fn server_counters(o: &Self::Options, memory: &dyn MemoryView) -> BTreeMap<&'static str, u64> {
        C::Of::server_counters(o, memory)
    }

    fn race_handlers() -> &'static [RaceHandler] {
        C::race_handlers()
    }

    fn planted_bugs() -> &'static [PlantedBug] {
        C::planted_bugs()
    }

    fn plant(o: &mut Self::Options, bug: &str) -> Result<(), String> {
        C::plant(o, bug)
    }
}

//! An index deployed in the simulator, the same way for everyone who deploys one: the
//! checker's harness, the sequential proptests, and the experiments' runner (whose hardware
//! twin deploys on real nodes from the same [`IndexKind`] hooks).

use dmkit_indexes::IndexKind;
use dmkit_sim::{Sim, Topology};
use std::sync::Arc;

/// The nodes a simulation of `K` needs: `memory_nodes`, `compute_nodes`, and the server nodes,
/// RPC threads and core sharing its services ask for ([`IndexKind::servers`]); the rest as
/// [`Topology::default`].
pub fn topology<K: IndexKind>(options: &K::Options, memory_nodes: u16, compute_nodes: u16) -> Topology {
    let servers = K::servers(options);
    Topology {
        memory_nodes,
        compute_nodes,
        server_nodes: servers.nodes,
        server_threads: servers.rpc_threads.max(1),
        server_workers_share_cores: servers.workers_share_cores,
        ..Topology::default()
    }
}

/// Starts `K`'s services in `sim` and gives each of `compute_nodes` compute nodes a fresh
/// node state (its caches, local lock table, chunk cache), in compute-node order.
pub fn install<K: IndexKind>(
    sim: &mut Sim,
    options: &K::Options,
    compute_nodes: u16,
) -> Result<Vec<Arc<K::NodeState>>, String> {
    K::install(options, sim)?;
    let caps = sim.caps().clone();
    Ok((0..compute_nodes).map(|_| Arc::new(K::node_state(options, &caps))).collect())
}

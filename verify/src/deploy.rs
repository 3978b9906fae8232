//! An index deployed in the simulator, the same way for everyone who deploys one: the
//! checker's harness, the sequential proptests, `dmkit fill`, and the experiments' runner (whose
//! hardware twin deploys on real nodes from the same [`IndexKind`] hooks, and runs its measured
//! clients through the same client loop, `dmkit_experiments::run::client`).
//!
//! A deployment is [`topology`] (the nodes), then [`deploy`]: the index's services, a fresh
//! state per compute node, and the creator — client 0 on compute node 0, whose handle creates
//! the index and loads or preloads it ([`Deployed::create_then`]) before any other client
//! starts.

use dmkit_indexes::{IndexError, IndexKind};
use dmkit_sim::{Sim, SimClient, SimConfig, TaskOutput, Topology};
use std::future::Future;
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

/// A simulation with the default configuration and the nodes `K` needs (one compute node's
/// worth of sequential use: `dmkit fill`, the sequential proptests).
pub fn default_sim<K: IndexKind>(options: &K::Options) -> Result<Sim, String> {
    let mut cfg = SimConfig::default();
    cfg.topology = topology::<K>(options, cfg.topology.memory_nodes, cfg.topology.compute_nodes);
    Sim::new(cfg).map_err(|e| e.to_string())
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

/// Index `K` deployed in a simulation (module doc).
pub struct Deployed<K: IndexKind> {
    /// Each compute node's state, in compute-node order.
    pub nodes: Vec<Arc<K::NodeState>>,
    /// Client 0, on compute node 0.
    pub creator: SimClient,
}

impl<K: IndexKind> std::fmt::Debug for Deployed<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deployed({}, {} compute nodes)", K::NAME, self.nodes.len())
    }
}

/// Installs `K` in `sim` ([`install`]) on `compute_nodes` compute nodes (at least one) and adds
/// its creator.
pub fn deploy<K: IndexKind>(sim: &mut Sim, options: &K::Options, compute_nodes: u16) -> Result<Deployed<K>, String> {
    let nodes = install::<K>(sim, options, compute_nodes).map_err(|e| format!("starting the index's services: {e}"))?;
    let creator = sim.add_client(0).map_err(|e| e.to_string())?;
    Ok(Deployed { nodes, creator })
}

impl<K: IndexKind> Deployed<K> {
    /// A handle of `client`, which runs on compute node `cn`.
    pub fn open(&self, options: &K::Options, cn: u16, client: &SimClient) -> K::Handle<SimClient> {
        K::open(options, self.nodes[cn as usize].clone(), client.clone())
    }

    /// Spawns the creator's task: `K::create`, then `then` with the creator's handle (a load,
    /// a preload, a sequence of operations). Its output is `Err` if the create failed; run the
    /// simulation to get it.
    pub fn create_then<T, F, Fut>(
        &self,
        sim: &mut Sim,
        options: &K::Options,
        then: F,
    ) -> TaskOutput<Result<T, IndexError>>
    where
        T: 'static,
        F: FnOnce(K::Handle<SimClient>) -> Fut + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let handle = self.open(options, 0, &self.creator);
        let (c, o) = (self.creator.clone(), options.clone());
        sim.spawn_output(&self.creator, async move {
            K::create(&o, &c).await?;
            Ok(then(handle).await)
        })
    }
}

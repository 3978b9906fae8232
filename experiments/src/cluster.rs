//! `cluster.toml`: where a hardware run's memory and server nodes are and how to reach them.
//! Parsed and checked on every machine (no RDMA needed); used by `dmkit run --backend rdma` and
//! `dmkit server-node`.
//!
//! ```toml
//! token = "change-me"          # every node refuses a compute node without it
//! device = "mlx5_0"            # optional: the first RDMA device
//! port = 1                     # optional (default 1)
//! gid_index = 3                # optional: the first RoCE v2 GID with an IPv4 address
//!
//! [[memory_node]]              # node 0, 1, ... in this order
//! addr = "10.0.0.1:7471"       # where `dmkit memory-node --listen` listens
//!
//! [[server_node]]              # optional: nodes m, m + 1, ... after the m memory nodes
//! addr = "10.0.0.3:7481"       # where `dmkit server-node --listen` listens
//!
//! [compute]
//! node = 0                     # this process's compute-node id
//! ```
//!
//! Server nodes run the services of indexes that have them (HStore's servers); their node ids
//! follow the memory nodes' ids, as in the simulator's topology.

use serde::Deserialize;
use std::net::{SocketAddr, ToSocketAddrs};

/// A parsed, checked `cluster.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    pub token: String,
    pub device: Option<String>,
    pub port: u8,
    pub gid_index: Option<u8>,
    /// Memory node `i`'s control address.
    pub memory_nodes: Vec<SocketAddr>,
    /// Server node `i`'s control address (its node id is `memory_nodes.len() + i`).
    pub server_nodes: Vec<SocketAddr>,
    pub compute_node: u16,
    /// Set only by `dmkit server-node`: this process is that server node, not a compute node.
    pub server: Option<ServerRole>,
}

/// What a `dmkit server-node` process is (see [`ClusterConfig::server`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerRole {
    /// Its node id (one of the cluster file's server nodes).
    pub node: u16,
    pub listen: SocketAddr,
    /// Registered memory.
    pub memory_bytes: u64,
    /// A diagnostic echo service to run as well, under this id.
    pub echo_service: Option<u16>,
    /// Back the registered memory with 2 MiB huge pages (`--hugepages`).
    pub hugepages: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    token: String,
    device: Option<String>,
    port: Option<u8>,
    gid_index: Option<u8>,
    #[serde(default)]
    memory_node: Vec<RawNode>,
    #[serde(default)]
    server_node: Vec<RawNode>,
    compute: Option<RawCompute>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    addr: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompute {
    node: u16,
}

impl ClusterConfig {
    /// Parses `text` (`name` is the file, for messages). Every error is one line naming what
    /// is wrong.
    pub fn parse(text: &str, name: &str) -> Result<ClusterConfig, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| format!("{name}: {}", e.message()))?;
        if raw.token.is_empty() {
            return Err(format!("{name}: the token is empty"));
        }
        if raw.memory_node.is_empty() {
            return Err(format!("{name}: no [[memory_node]]"));
        }
        let mut seen = Vec::new();
        let mut addresses =
            |kind: &str, nodes: &[RawNode]| -> Result<Vec<SocketAddr>, String> {
                let mut out = Vec::new();
                for (i, n) in nodes.iter().enumerate() {
                    let addr =
                        n.addr.to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or_else(|| {
                            format!("{name}: {kind} node {i}: '{}' is not a host:port address", n.addr)
                        })?;
                    if seen.contains(&addr) {
                        return Err(format!("{name}: {kind} node {i}: {addr} is listed twice"));
                    }
                    seen.push(addr);
                    out.push(addr);
                }
                Ok(out)
            };
        let memory_nodes = addresses("memory", &raw.memory_node)?;
        let server_nodes = addresses("server", &raw.server_node)?;
        if memory_nodes.len() + server_nodes.len() > u16::MAX as usize {
            return Err(format!("{name}: too many nodes"));
        }
        let port = raw.port.unwrap_or(1);
        if port == 0 {
            return Err(format!("{name}: ports count from 1"));
        }
        Ok(ClusterConfig {
            token: raw.token,
            device: raw.device,
            port,
            gid_index: raw.gid_index,
            memory_nodes,
            server_nodes,
            compute_node: raw.compute.map_or(0, |c| c.node),
            server: None,
        })
    }

    /// Server node `i`'s node id.
    pub fn server_node_id(&self, i: usize) -> u16 {
        (self.memory_nodes.len() + i) as u16
    }

    /// Every node's control address by node id: memory nodes, then server nodes.
    pub fn nodes(&self) -> std::collections::BTreeMap<u16, SocketAddr> {
        self.memory_nodes.iter().chain(&self.server_nodes).enumerate().map(|(i, a)| (i as u16, *a)).collect()
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &std::path::Path) -> Result<ClusterConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        ClusterConfig::parse(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("cluster.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start().to_string() + "\n")
            .collect();
        let c = ClusterConfig::parse(&example, "example").unwrap();
        assert_eq!(c.memory_nodes, vec!["10.0.0.1:7471".parse().unwrap()]);
        assert_eq!(c.server_nodes, vec!["10.0.0.3:7481".parse().unwrap()]);
        assert_eq!((c.port, c.gid_index, c.compute_node), (1, Some(3), 0));
        assert_eq!(c.device.as_deref(), Some("mlx5_0"));
        assert_eq!(c.server, None, "only dmkit server-node sets a server role");
        let shipped = ClusterConfig::parse(include_str!("../configs/cluster.example.toml"), "example.toml").unwrap();
        assert_eq!((shipped.memory_nodes.len(), shipped.server_nodes.len()), (2, 2));
    }

    #[test]
    fn server_nodes_follow_the_memory_nodes() {
        let text = "token = \"t\"\n[[server_node]]\naddr = \"1.2.3.4:9\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"\n\
                    [[memory_node]]\naddr = \"1.2.3.4:2\"\n[[server_node]]\naddr = \"1.2.3.4:10\"";
        let c = ClusterConfig::parse(text, "c.toml").unwrap();
        assert_eq!((c.server_node_id(0), c.server_node_id(1)), (2, 3));
        let port = |n: u16| c.nodes()[&n].port();
        assert_eq!((port(0), port(1), port(2), port(3)), (1, 2, 9, 10), "memory nodes first, each list in order");
        let none = ClusterConfig::parse("token = \"t\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "c.toml").unwrap();
        assert!(none.server_nodes.is_empty());
    }

    #[test]
    fn bad_files_are_one_line_errors() {
        for (text, says) in [
            ("", "token"),
            ("token = \"\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "empty"),
            ("token = \"t\"", "no [[memory_node]]"),
            ("token = \"t\"\n[[memory_node]]\naddr = \"nowhere\"", "not a host:port"),
            ("token = \"t\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "twice"),
            (
                "token = \"t\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"\n[[server_node]]\naddr = \"1.2.3.4:1\"",
                "server node 0",
            ),
            ("token = \"t\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"\n[[server_node]]\naddr = \"x\"", "server node 0"),
            ("token = \"t\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"\n[[server_node]]\nport = 1", "port"),
            ("token = \"t\"\nport = 0\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "from 1"),
            ("token = \"t\"\ncolour = 1\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "colour"),
        ] {
            let e = ClusterConfig::parse(text, "c.toml").unwrap_err();
            assert!(e.starts_with("c.toml: ") && e.contains(says) && !e.contains('\n'), "{text:?}: {e}");
        }
    }
}

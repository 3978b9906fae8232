//! `cluster.toml`: where a hardware run's memory nodes are and how to reach them. Parsed and
//! checked on every machine (no RDMA needed); used by `dmkit run --backend rdma`.
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
//! [compute]
//! node = 0                     # this process's compute-node id
//! ```

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
    pub compute_node: u16,
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
        let mut memory_nodes = Vec::new();
        for (i, n) in raw.memory_node.iter().enumerate() {
            let addr = n
                .addr
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("{name}: memory node {i}: '{}' is not a host:port address", n.addr))?;
            if memory_nodes.contains(&addr) {
                return Err(format!("{name}: memory node {i}: {addr} is listed twice"));
            }
            memory_nodes.push(addr);
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
            compute_node: raw.compute.map_or(0, |c| c.node),
        })
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
        assert_eq!((c.port, c.gid_index, c.compute_node), (1, Some(3), 0));
        assert_eq!(c.device.as_deref(), Some("mlx5_0"));
        let shipped = include_str!("../configs/cluster.example.toml");
        ClusterConfig::parse(shipped, "configs/cluster.example.toml").unwrap();
    }

    #[test]
    fn bad_files_are_one_line_errors() {
        for (text, says) in [
            ("", "token"),
            ("token = \"\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "empty"),
            ("token = \"t\"", "no [[memory_node]]"),
            ("token = \"t\"\n[[memory_node]]\naddr = \"nowhere\"", "not a host:port"),
            ("token = \"t\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "twice"),
            ("token = \"t\"\nport = 0\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "from 1"),
            ("token = \"t\"\ncolour = 1\n[[memory_node]]\naddr = \"1.2.3.4:1\"", "colour"),
        ] {
            let e = ClusterConfig::parse(text, "c.toml").unwrap_err();
            assert!(e.starts_with("c.toml: ") && e.contains(says) && !e.contains('\n'), "{text:?}: {e}");
        }
    }
}

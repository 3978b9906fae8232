//! The one error type of the verbs path.

use crate::{NodeId, RemoteAddr};
use std::fmt;

/// Everything a verb, a batch or a call can fail with. Bad input is an error here, never a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerbsError {
    /// `[addr, addr + len)` is not inside the target region of its node.
    OutOfRange { addr: RemoteAddr, len: u64 },
    /// An atomic whose address is not 8-byte aligned.
    Unaligned { addr: RemoteAddr },
    /// A zero-length READ or WRITE, or one above the largest message size.
    InvalidLength { addr: RemoteAddr, len: u64 },
    /// A doorbell batch with no requests.
    EmptyBatch,
    /// A doorbell batch whose requests target more than one node (a batch goes to one QP).
    BatchSpansNodes { first: NodeId, other: NodeId },
    /// The address names a node that does not exist or has no memory of that region.
    NoSuchNode(NodeId),
    /// The target node crashed (or was down when the verb arrived): the transport gave up.
    NodeDown(NodeId),
    /// No completion within the transport's retry budget.
    Timeout(NodeId),
    /// The memory node's allocator has no block of the requested size left.
    RemoteMemoryExhausted { node: NodeId, requested_bytes: u64 },
    /// `call` named a service the node does not run.
    UnknownService { node: NodeId, service: u16 },
    /// A service answered with bytes that do not decode, or rejected the request.
    Protocol(String),
    /// The backend cannot do this at all (e.g. device memory on Soft-RoCE).
    Unsupported(&'static str),
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::OutOfRange { addr, len } => {
                write!(f, "remote range {addr} + {len} bytes is out of range")
            }
            VerbsError::Unaligned { addr } => {
                write!(f, "atomic at {addr} is not 8-byte aligned")
            }
            VerbsError::InvalidLength { addr, len } => {
                write!(f, "invalid length {len} for the verb at {addr}")
            }
            VerbsError::EmptyBatch => write!(f, "doorbell batch has no requests"),
            VerbsError::BatchSpansNodes { first, other } => {
                write!(f, "doorbell batch targets both {first} and {other}; a batch goes to one node")
            }
            VerbsError::NoSuchNode(node) => write!(f, "{node} does not exist or has no such memory"),
            VerbsError::NodeDown(node) => write!(f, "{node} is down"),
            VerbsError::Timeout(node) => write!(f, "timed out waiting for {node}"),
            VerbsError::RemoteMemoryExhausted { node, requested_bytes } => {
                write!(f, "remote memory exhausted on {node} ({requested_bytes} bytes requested)")
            }
            VerbsError::UnknownService { node, service } => {
                write!(f, "{node} runs no service {service}")
            }
            VerbsError::Protocol(msg) => write!(f, "protocol error: {msg}"),
            VerbsError::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for VerbsError {}

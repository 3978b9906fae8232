//! The real backend. Its device-free parts (how a doorbell batch becomes work requests,
//! [`plan`]; the control channel's handshake, [`wire`]; the byte layout of the mlx5 WQEs of
//! native masked atomics, [`mlx5`]) are unit-tested on every machine; the
//! queue pairs ([`device`]), the async executor and clients ([`runtime`]), the control
//! channel's ends ([`node`]) and the service nodes that host the service API ([`server`]) need
//! feature `connectx` (over `sideway`).

#[cfg(feature = "connectx")]
pub mod device;
pub mod mlx5;
#[cfg(feature = "connectx")]
pub mod node;
pub mod plan;
#[cfg(feature = "connectx")]
pub mod runtime;
#[cfg(feature = "connectx")]
pub mod server;
pub mod wire;

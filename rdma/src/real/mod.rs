//! The real backend's device-free parts (issue 12, in progress): how a doorbell batch becomes
//! work requests ([`plan`]) and the control channel's handshake ([`wire`]). They are unit-tested
//! on every machine; the queue pairs themselves (feature `connectx`, over `sideway`) build on
//! them.

#[cfg(feature = "connectx")]
pub mod device;
#[cfg(feature = "connectx")]
pub mod node;
pub mod plan;
#[cfg(feature = "connectx")]
pub mod runtime;
pub mod wire;

//! The control channel's two ends (feature `connectx`): [`dial`], how a compute node (or a
//! service node's thread) connects to a memory or server node over TCP and gets its queue
//! pairs; [`barrier`], how compute nodes meet at memory node 0; and the node's side of a
//! control connection after its welcome ([`serve_control`]). The node itself, which admits
//! peers and answers their calls, is [`super::server::ServiceNode`].

use super::device::{Cq, Nic};
use super::wire::{self, Message};
use crate::VerbsError;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Compute nodes waiting at each barrier epoch: the streams to answer.
#[derive(Debug, Default)]
pub(super) struct Barriers {
    waiting: std::collections::BTreeMap<u64, Vec<TcpStream>>,
}

/// One control connection after its welcome: answers barriers until the compute node says bye
/// or goes away.
pub(super) fn serve_control(mut stream: TcpStream, barriers: Arc<Mutex<Barriers>>) {
    loop {
        match Message::receive(&mut stream) {
            Ok(Message::Barrier { epoch, parties }) => {
                let Ok(reply) = stream.try_clone() else { return };
                let mut b = barriers.lock().unwrap_or_else(|e| e.into_inner());
                let waiting = b.waiting.entry(epoch).or_default();
                waiting.push(reply);
                if waiting.len() >= parties as usize {
                    for mut w in b.waiting.remove(&epoch).unwrap_or_default() {
                        let _ = Message::Barrier { epoch, parties }.send(&mut w);
                    }
                }
            }
            Ok(Message::Bye) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// A compute node's wait at barrier `epoch` with `parties` compute nodes, over its control
/// connection to memory node 0 (kept open by [`dial`]).
pub fn barrier(control: &mut TcpStream, epoch: u64, parties: u16) -> Result<(), VerbsError> {
    Message::Barrier { epoch, parties }.send(control)?;
    control.set_read_timeout(None).map_err(|e| VerbsError::Protocol(e.to_string()))?;
    match Message::receive(control)? {
        Message::Barrier { epoch: e, .. } if e == epoch => Ok(()),
        other => Err(VerbsError::Protocol(format!("barrier {epoch}: the node answered {other:?}"))),
    }
}

/// A compute node's side of the control channel: connects to the node at `addr` with one queue
/// pair per completion queue in `cqs` (one per thread), presents `token`, and returns the
/// connections ready for an [`super::runtime::Executor`], and the control stream (for
/// [`barrier`]s). Keep the stream as long as the queue pairs: when it closes, the node retires
/// them. A refusal is an error with the node's reason; an unreachable node is
/// [`VerbsError::NodeDown`].
pub fn dial(
    nic: &Nic,
    cqs: &[Cq],
    addr: SocketAddr,
    node: crate::NodeId,
    token: &str,
    compute_node: u16,
) -> Result<(Vec<super::runtime::Connection>, TcpStream), VerbsError> {
    dial_reporting(nic, cqs, addr, node, token, compute_node, &mut |e| eprintln!("cannot reach {node} at {addr}: {e}"))
}

/// [`dial`], telling `unreachable` why the node could not be reached (instead of printing it)
/// before it returns [`VerbsError::NodeDown`].
pub(super) fn dial_reporting(
    nic: &Nic,
    cqs: &[Cq],
    addr: SocketAddr,
    node: crate::NodeId,
    token: &str,
    compute_node: u16,
    unreachable: &mut dyn FnMut(&std::io::Error),
) -> Result<(Vec<super::runtime::Connection>, TcpStream), VerbsError> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| {
        unreachable(&e);
        VerbsError::NodeDown(node)
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| VerbsError::Protocol(e.to_string()))?;
    let mut qps = Vec::new();
    for (i, cq) in cqs.iter().enumerate() {
        qps.push(nic.queue_pair_on(cq, super::runtime::SEND_QUEUE_DEPTH + 64, 0x20_0000 + i as u32)?);
    }
    let endpoints = qps.iter().map(|q| q.endpoint(nic)).collect();
    Message::Hello { version: wire::PROTOCOL_VERSION, token: token.into(), compute_node, endpoints }
        .send(&mut stream)?;
    match Message::receive(&mut stream)? {
        Message::Welcome { node: id, host, device, endpoints } => {
            if id != node.0 || endpoints.len() != qps.len() {
                return Err(VerbsError::Protocol(format!(
                    "{addr} is node {id} with {} queue pairs, expected {node} with {}",
                    endpoints.len(),
                    qps.len()
                )));
            }
            let regions = super::plan::NodeRegions { host, device };
            let conns = qps
                .into_iter()
                .zip(endpoints)
                .map(|(mut qp, ep)| {
                    qp.connect(nic, &ep)?;
                    Ok(super::runtime::Connection { node, qp, regions })
                })
                .collect::<Result<Vec<_>, VerbsError>>()?;
            Ok((conns, stream))
        }
        Message::Refused { reason } => Err(VerbsError::Protocol(format!("{node} at {addr} refused us: {reason}"))),
        other => Err(VerbsError::Protocol(format!("{node} at {addr} answered {other:?}"))),
    }
}

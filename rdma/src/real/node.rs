//! A memory node on hardware (feature `connectx`): registered host memory, the control channel
//! that admits compute nodes (TCP, [`super::wire`]), and `call`s answered by a handler (the
//! chunk allocator; server nodes' services later).
//!
//! One thread runs the node: it accepts control connections (non-blocking), answers each
//! [`Message::Hello`] with queue pairs of its own and [`CALL_CREDITS`] receives posted on each,
//! and polls one completion queue for requests. A request's receive is posted again before its
//! response is sent, which is what returns the compute node's credit.

use super::device::{Cq, MemoryRegistration, Nic, RcQp, Region, failed_completion};
use super::plan::RemoteRegion;
use super::runtime::{CALL_CREDITS, CALL_MESSAGE_BYTES};
use super::wire::{self, Message};
use crate::VerbsError;
use crate::alloc::{ALLOCATOR_SERVICE, AllocRequest, ChunkAllocator, ReuseMode};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a call handler answers: `Ok(body)`, or `Err(None)` for an unknown service, or
/// `Err(Some(reason))`.
pub type Handled = Result<Vec<u8>, Option<String>>;

/// A handler of calls: `(service, request) -> response`.
pub type Handler = Box<dyn FnMut(u16, &[u8]) -> Handled + Send>;

/// The memory node's allocator as a call handler: offsets `[reserved, size)` of its memory.
pub fn allocator_handler(node: crate::NodeId, reserved: u64, size: u64) -> Handler {
    let mut alloc = ChunkAllocator::new(node, reserved, size, ReuseMode::Fifo);
    Box::new(move |service, request| {
        if service != ALLOCATOR_SERVICE {
            return Err(None);
        }
        let req = AllocRequest::decode(request).map_err(|e| Some(e.to_string()))?;
        Ok(alloc.handle(req).encode())
    })
}

struct Conn {
    qp: RcQp,
    /// Receive and send buffers, `CALL_CREDITS` of each.
    recv: Region,
    recv_mr: Arc<MemoryRegistration>,
    send: Region,
    send_mr: Arc<MemoryRegistration>,
}

/// A memory node: its memory, its queue pairs, its handler.
pub struct NodeHost {
    nic: Arc<Nic>,
    node: u16,
    token: String,
    memory: Region,
    memory_mr: Arc<MemoryRegistration>,
    cq: Cq,
    conns: Vec<Conn>,
    handler: Handler,
    listener: TcpListener,
    barriers: Arc<Mutex<Barriers>>,
    /// Compute nodes admitted and refused so far.
    pub admitted: u32,
    pub refused: u32,
}

impl std::fmt::Debug for NodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHost").field("node", &self.node).field("connections", &self.conns.len()).finish()
    }
}

const KIND_RECV: u64 = 0;
const KIND_SEND: u64 = 1;

impl NodeHost {
    /// Registers `size` bytes of memory and listens on `listen` for compute nodes that present
    /// `token`. Errors: no device, memory that cannot be allocated or registered, an address
    /// that cannot be bound.
    pub fn new(
        nic: Arc<Nic>,
        node: u16,
        listen: SocketAddr,
        size: u64,
        token: &str,
        handler: Handler,
    ) -> Result<NodeHost, VerbsError> {
        let memory = Region::new(size as usize)?;
        let memory_mr = nic.register(&memory, true)?;
        let cq = nic.completion_queue(4096)?;
        let listener =
            TcpListener::bind(listen).map_err(|e| VerbsError::Protocol(format!("cannot listen on {listen}: {e}")))?;
        listener.set_nonblocking(true).map_err(|e| VerbsError::Protocol(format!("listener: {e}")))?;
        Ok(NodeHost {
            nic,
            node,
            token: token.into(),
            memory,
            memory_mr,
            cq,
            conns: Vec::new(),
            handler,
            listener,
            barriers: Arc::new(Mutex::new(Barriers::default())),
            admitted: 0,
            refused: 0,
        })
    }

    /// The address the control channel listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener")
    }

    /// The node's memory (for checks after a run).
    pub fn memory(&self) -> &Region {
        &self.memory
    }

    /// Serves until `stop` is set: control connections and calls.
    pub fn serve(&mut self, stop: &AtomicBool) -> Result<(), VerbsError> {
        while !stop.load(Ordering::Relaxed) {
            let mut busy = false;
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    busy = true;
                    if let Err(e) = self.admit(stream) {
                        eprintln!("memory node {}: control connection from {peer}: {e}", self.node);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(VerbsError::Protocol(format!("accept: {e}"))),
            }
            busy |= self.poll_calls()? > 0;
            if !busy {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(())
    }

    fn admit(&mut self, mut stream: TcpStream) -> Result<(), VerbsError> {
        stream
            .set_nonblocking(false)
            .and_then(|_| stream.set_read_timeout(Some(Duration::from_secs(10))))
            .map_err(|e| VerbsError::Protocol(e.to_string()))?;
        let hello = match Message::receive(&mut stream) {
            Ok(m) => m,
            // A port probe, or a client that gave up: nothing to answer.
            Err(wire::WireError::Io(e)) => {
                return Err(VerbsError::Protocol(format!("closed before its hello ({e})")));
            }
            Err(e) => return Err(e.into()),
        };
        let endpoints = match wire::admit(&hello, &self.token) {
            Ok((_, endpoints)) => endpoints,
            Err(reason) => {
                self.refused += 1;
                Message::Refused { reason }.send(&mut stream)?;
                return Ok(());
            }
        };
        let mut mine = Vec::new();
        for ep in endpoints {
            let index = self.conns.len() as u64;
            let mut qp = self.nic.queue_pair_on(&self.cq, 2 * CALL_CREDITS + 16, 0x1000 + index as u32)?;
            let bytes = (CALL_CREDITS * CALL_MESSAGE_BYTES) as usize;
            let (recv, send) = (Region::new(bytes)?, Region::new(bytes)?);
            let (recv_mr, send_mr) = (self.nic.register(&recv, false)?, self.nic.register(&send, false)?);
            for slot in 0..CALL_CREDITS as u64 {
                qp.post_recv(
                    id(index, KIND_RECV, slot),
                    &recv,
                    slot * CALL_MESSAGE_BYTES as u64,
                    CALL_MESSAGE_BYTES,
                    recv_mr.lkey(),
                )?;
            }
            qp.connect(&self.nic, &ep)?;
            mine.push(qp.endpoint(&self.nic));
            self.conns.push(Conn { qp, recv, recv_mr, send, send_mr });
        }
        let host =
            RemoteRegion { addr: self.memory.addr(), rkey: self.memory_mr.rkey(), len: self.memory.len() as u64 };
        Message::Welcome { node: self.node, host, device: None, endpoints: mine }.send(&mut stream)?;
        self.admitted += 1;
        // The connection stays open for barriers (and a clean Bye).
        stream.set_read_timeout(None).map_err(|e| VerbsError::Protocol(e.to_string()))?;
        let barriers = self.barriers.clone();
        std::thread::spawn(move || serve_control(stream, barriers));
        Ok(())
    }

    /// Answers every request that arrived; returns how many completions there were.
    pub fn poll_calls(&mut self) -> Result<usize, VerbsError> {
        let mut got = Vec::new();
        let n = self.cq.poll(|c| got.push(c))?;
        for c in got {
            let (conn, kind, slot) = (c.wr_id >> 32, (c.wr_id >> 31) & 1, c.wr_id & 0x7fff_ffff);
            if c.status != 0 {
                // A compute node that went away leaves its queue pair in error: report, go on.
                eprintln!("memory node {}: connection {conn}: {}", self.node, failed_completion(&c));
                continue;
            }
            if kind == KIND_SEND {
                continue;
            }
            let Some(cn) = self.conns.get_mut(conn as usize) else { continue };
            let at = slot * CALL_MESSAGE_BYTES as u64;
            let msg = cn.recv.read_at(at as usize, c.byte_len as usize);
            cn.qp.post_recv(c.wr_id, &cn.recv, at, CALL_MESSAGE_BYTES, cn.recv_mr.lkey())?;
            if msg.len() < 10 {
                continue;
            }
            let call_id = &msg[..8];
            let service = u16::from_le_bytes([msg[8], msg[9]]);
            let (status, body) = match (self.handler)(service, &msg[10..]) {
                Ok(body) => (0u8, body),
                Err(None) => (1, Vec::new()),
                Err(Some(reason)) => (2, reason.into_bytes()),
            };
            let mut out = call_id.to_vec();
            out.push(status);
            out.extend(&body);
            out.truncate(CALL_MESSAGE_BYTES as usize);
            cn.send.write_at(at as usize, &out);
            cn.qp.post_send(id(conn, KIND_SEND, slot), &cn.send, at, out.len() as u32, cn.send_mr.lkey(), true)?;
        }
        Ok(n)
    }
}

/// Compute nodes waiting at each barrier epoch: the streams to answer.
#[derive(Default)]
struct Barriers {
    waiting: std::collections::BTreeMap<u64, Vec<TcpStream>>,
}

/// One control connection after its welcome: answers barriers until the compute node says bye
/// or goes away.
fn serve_control(mut stream: TcpStream, barriers: Arc<Mutex<Barriers>>) {
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

fn id(conn: u64, kind: u64, slot: u64) -> u64 {
    conn << 32 | kind << 31 | slot
}

/// A compute node's side of the control channel: connects to the node at `addr` with one queue
/// pair per completion queue in `cqs` (one per thread), presents `token`, and returns the
/// connections ready for an [`super::runtime::Executor`], and the control stream (for
/// [`barrier`]s; dropping it closes the control connection). A refusal is an error with the node's
/// reason; an unreachable node is [`VerbsError::NodeDown`].
pub fn dial(
    nic: &Nic,
    cqs: &[Cq],
    addr: SocketAddr,
    node: crate::NodeId,
    token: &str,
    compute_node: u16,
) -> Result<(Vec<super::runtime::Connection>, TcpStream), VerbsError> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| {
        eprintln!("cannot reach {node} at {addr}: {e}");
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

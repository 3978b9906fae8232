//! The control channel: the messages compute nodes and memory (or server) nodes exchange over
//! TCP to connect queue pairs, and their byte format. Device-free, so every machine tests it.
//!
//! A frame is `[len: u32 LE][tag: u8][body]`, `len` counting the tag and the body, at most
//! [`MAX_FRAME_BYTES`]. Integers are little-endian; a string is `[len: u16][UTF-8]`; a list is
//! `[count: u32][items]`; an option is `[0]` or `[1][value]`.
//!
//! The exchange: a compute node sends [`Message::Hello`] (protocol version, the cluster's
//! token, its node id and one queue-pair endpoint per client); the node answers
//! [`Message::Welcome`] (its id, its registered regions, one endpoint of its own per client
//! endpoint, in order) or [`Message::Refused`] with the reason, and closes. Both sides then move
//! their queue pairs to RTS. [`Message::Barrier`] synchronises the phases of a run;
//! [`Message::Bye`] ends a connection cleanly.

use super::plan::RemoteRegion;
use std::io::{Read, Write};

/// Bumped on any change to the format below, or to the call messages' (`super::runtime`):
/// 2 since calls carry 4 KiB of payload (their buffers grew by the header).
pub const PROTOCOL_VERSION: u16 = 2;
/// A frame larger than this is refused before it is read (a stray client cannot make the node
/// allocate gigabytes).
pub const MAX_FRAME_BYTES: u32 = 1 << 20;

/// One side of an RC queue pair, as the other side needs it to reach RTR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Queue-pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID the other side addresses (RoCE v2: the IPv4-mapped address).
    pub gid: [u8; 16],
}

/// A control-channel message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Hello {
        version: u16,
        token: String,
        compute_node: u16,
        endpoints: Vec<Endpoint>,
    },
    Welcome {
        node: u16,
        host: RemoteRegion,
        device: Option<RemoteRegion>,
        endpoints: Vec<Endpoint>,
    },
    Refused {
        reason: String,
    },
    /// From a compute node: it reached barrier `epoch`, which `parties` compute nodes share;
    /// from the node (memory node 0): all of them have (`parties` echoed).
    Barrier {
        epoch: u64,
        parties: u16,
    },
    Bye,
}

/// What can go wrong reading or decoding a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum WireError {
    /// The connection failed or closed (the I/O error's text).
    Io(String),
    TooLarge(u32),
    /// The frame ended inside a field.
    Truncated,
    UnknownTag(u8),
    BadUtf8,
    /// Bytes left over after the message.
    Trailing(usize),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Io(e) => write!(f, "control channel: {e}"),
            WireError::TooLarge(n) => write!(f, "control frame of {n} bytes (at most {MAX_FRAME_BYTES})"),
            WireError::Truncated => write!(f, "control frame ends inside a field"),
            WireError::UnknownTag(t) => write!(f, "unknown control message tag {t}"),
            WireError::BadUtf8 => write!(f, "control message string is not UTF-8"),
            WireError::Trailing(n) => write!(f, "{n} bytes after the control message"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<WireError> for crate::VerbsError {
    fn from(e: WireError) -> Self {
        crate::VerbsError::Protocol(e.to_string())
    }
}

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const REFUSED: u8 = 3;
const BARRIER: u8 = 4;
const BYE: u8 = 5;

impl Message {
    /// The message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        match self {
            Message::Hello { version, token, compute_node, endpoints } => {
                b.push(HELLO);
                b.extend(version.to_le_bytes());
                put_str(&mut b, token);
                b.extend(compute_node.to_le_bytes());
                put_endpoints(&mut b, endpoints);
            }
            Message::Welcome { node, host, device, endpoints } => {
                b.push(WELCOME);
                b.extend(node.to_le_bytes());
                put_region(&mut b, host);
                match device {
                    Some(d) => {
                        b.push(1);
                        put_region(&mut b, d);
                    }
                    None => b.push(0),
                }
                put_endpoints(&mut b, endpoints);
            }
            Message::Refused { reason } => {
                b.push(REFUSED);
                put_str(&mut b, reason);
            }
            Message::Barrier { epoch, parties } => {
                b.push(BARRIER);
                b.extend(epoch.to_le_bytes());
                b.extend(parties.to_le_bytes());
            }
            Message::Bye => b.push(BYE),
        }
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        b
    }

    /// Decodes one frame's payload (the bytes after the length).
    pub fn decode(payload: &[u8]) -> Result<Message, WireError> {
        let mut r = Reader { b: payload };
        let m = match r.u8()? {
            HELLO => Message::Hello {
                version: r.u16()?,
                token: r.string()?,
                compute_node: r.u16()?,
                endpoints: r.endpoints()?,
            },
            WELCOME => Message::Welcome {
                node: r.u16()?,
                host: r.region()?,
                device: match r.u8()? {
                    0 => None,
                    _ => Some(r.region()?),
                },
                endpoints: r.endpoints()?,
            },
            REFUSED => Message::Refused { reason: r.string()? },
            BARRIER => Message::Barrier { epoch: r.u64()?, parties: r.u16()? },
            BYE => Message::Bye,
            t => return Err(WireError::UnknownTag(t)),
        };
        if !r.b.is_empty() {
            return Err(WireError::Trailing(r.b.len()));
        }
        Ok(m)
    }

    /// Writes the message as one frame.
    pub fn send(&self, w: &mut impl Write) -> Result<(), WireError> {
        w.write_all(&self.encode()).and_then(|_| w.flush()).map_err(|e| WireError::Io(e.to_string()))
    }

    /// Reads one frame and decodes it.
    pub fn receive(r: &mut impl Read) -> Result<Message, WireError> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(|e| WireError::Io(e.to_string()))?;
        let len = u32::from_le_bytes(len);
        if len > MAX_FRAME_BYTES {
            return Err(WireError::TooLarge(len));
        }
        let mut payload = vec![0u8; len as usize];
        r.read_exact(&mut payload).map_err(|e| WireError::Io(e.to_string()))?;
        Message::decode(&payload)
    }
}

/// A node's check of a [`Message::Hello`]: the protocol version and the cluster's token
/// (compared in constant time). `Err` is the reason to send back in [`Message::Refused`].
pub fn admit(hello: &Message, token: &str) -> Result<(u16, Vec<Endpoint>), String> {
    let Message::Hello { version, token: offered, compute_node, endpoints } = hello else {
        return Err("expected a hello".into());
    };
    if *version != PROTOCOL_VERSION {
        return Err(format!("protocol version {version}, this node speaks {PROTOCOL_VERSION}"));
    }
    let (a, b) = (offered.as_bytes(), token.as_bytes());
    let differ = a.len() != b.len() || a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) != 0;
    if differ {
        return Err("wrong cluster token".into());
    }
    if endpoints.is_empty() {
        return Err("a hello with no queue pairs".into());
    }
    Ok((*compute_node, endpoints.clone()))
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.extend((bytes.len() as u16).to_le_bytes());
    b.extend(bytes);
}

fn put_region(b: &mut Vec<u8>, r: &RemoteRegion) {
    b.extend(r.addr.to_le_bytes());
    b.extend(r.rkey.to_le_bytes());
    b.extend(r.len.to_le_bytes());
}

fn put_endpoints(b: &mut Vec<u8>, eps: &[Endpoint]) {
    b.extend((eps.len() as u32).to_le_bytes());
    for e in eps {
        b.extend(e.qpn.to_le_bytes());
        b.extend(e.psn.to_le_bytes());
        b.extend(e.lid.to_le_bytes());
        b.extend(e.gid);
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let (head, rest) = self.b.split_first_chunk::<N>().ok_or(WireError::Truncated)?;
        self.b = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        self.take().map(u64::from_le_bytes)
    }
    fn string(&mut self) -> Result<String, WireError> {
        let n = self.u16()? as usize;
        if self.b.len() < n {
            return Err(WireError::Truncated);
        }
        let (s, rest) = self.b.split_at(n);
        self.b = rest;
        String::from_utf8(s.to_vec()).map_err(|_| WireError::BadUtf8)
    }
    fn region(&mut self) -> Result<RemoteRegion, WireError> {
        Ok(RemoteRegion { addr: self.u64()?, rkey: self.u32()?, len: self.u64()? })
    }
    fn endpoints(&mut self) -> Result<Vec<Endpoint>, WireError> {
        let n = self.u32()? as usize;
        // Each endpoint is 26 bytes: a count the frame cannot hold is truncation, not a reason
        // to allocate.
        if n > self.b.len() / 26 {
            return Err(WireError::Truncated);
        }
        (0..n)
            .map(|_| Ok(Endpoint { qpn: self.u32()?, psn: self.u32()?, lid: self.u16()?, gid: self.take()? }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(i: u8) -> Endpoint {
        Endpoint { qpn: 0x00ab_cd00 + i as u32, psn: 0x12_3456, lid: 0, gid: [i; 16] }
    }

    fn all() -> Vec<Message> {
        let host = RemoteRegion { addr: 0x7f12_3456_0000, rkey: 0xdead_beef, len: 64 << 30 };
        vec![
            Message::Hello {
                version: PROTOCOL_VERSION,
                token: "s3cret".into(),
                compute_node: 7,
                endpoints: vec![ep(1), ep(2)],
            },
            Message::Welcome { node: 1, host, device: None, endpoints: vec![ep(3)] },
            Message::Welcome {
                node: 2,
                host,
                device: Some(RemoteRegion { addr: 0, rkey: 5, len: 128 << 10 }),
                endpoints: vec![],
            },
            Message::Refused { reason: "wrong cluster token".into() },
            Message::Barrier { epoch: u64::MAX, parties: 16 },
            Message::Bye,
        ]
    }

    #[test]
    fn every_message_round_trips_through_a_stream() {
        let mut stream = Vec::new();
        for m in all() {
            m.send(&mut stream).unwrap();
        }
        let mut r = stream.as_slice();
        for m in all() {
            assert_eq!(Message::receive(&mut r).unwrap(), m);
        }
        assert!(matches!(Message::receive(&mut r), Err(WireError::Io(_))), "end of stream");
    }

    #[test]
    fn damaged_frames_are_errors_not_panics() {
        for m in all() {
            let frame = m.encode();
            // Every strict prefix of the payload is truncated (or, for a bare tag, complete).
            for cut in 5..frame.len() {
                let r = Message::decode(&frame[4..cut]);
                assert!(r.is_err(), "{m:?} cut at {cut} decoded as {r:?}");
            }
            let mut longer = frame[4..].to_vec();
            longer.push(0);
            assert_eq!(Message::decode(&longer), Err(WireError::Trailing(1)));
        }
        assert_eq!(Message::decode(&[99]), Err(WireError::UnknownTag(99)));
        assert_eq!(Message::decode(&[]), Err(WireError::Truncated));
        let huge = (MAX_FRAME_BYTES + 1).to_le_bytes();
        assert_eq!(Message::receive(&mut &huge[..]), Err(WireError::TooLarge(MAX_FRAME_BYTES + 1)));
        // A list count the frame cannot hold.
        let mut lying = vec![HELLO];
        lying.extend(PROTOCOL_VERSION.to_le_bytes());
        lying.extend(0u16.to_le_bytes());
        lying.extend(0u16.to_le_bytes());
        lying.extend(u32::MAX.to_le_bytes());
        assert_eq!(Message::decode(&lying), Err(WireError::Truncated));
        assert_eq!(Message::decode(&[REFUSED, 2, 0, 0xff, 0xfe]), Err(WireError::BadUtf8));
    }

    #[test]
    fn a_node_admits_only_its_cluster() {
        let hello = |token: &str, version: u16, eps: Vec<Endpoint>| Message::Hello {
            version,
            token: token.into(),
            compute_node: 4,
            endpoints: eps,
        };
        assert_eq!(admit(&hello("tok", PROTOCOL_VERSION, vec![ep(1)]), "tok"), Ok((4, vec![ep(1)])));
        assert_eq!(admit(&hello("tak", PROTOCOL_VERSION, vec![ep(1)]), "tok"), Err("wrong cluster token".into()));
        assert_eq!(admit(&hello("tok2", PROTOCOL_VERSION, vec![ep(1)]), "tok"), Err("wrong cluster token".into()));
        assert!(admit(&hello("tok", PROTOCOL_VERSION + 1, vec![ep(1)]), "tok").unwrap_err().contains("version"));
        assert!(admit(&hello("tok", PROTOCOL_VERSION, vec![]), "tok").is_err());
        assert!(admit(&Message::Bye, "tok").is_err());
    }
}

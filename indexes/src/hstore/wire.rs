//! HStore's messages: clients to the servers, and the HTS to the SLS (digest §3, wire formats
//! \[R\]). Every message is a tag byte and little-endian fields; keys carry a 2-byte length.
//! A message that does not decode is a protocol error, never a panic.

use dmkit_rdma::VerbsError;
use std::ops::Bound;

/// The hash-table server's service id.
pub const HTS_SERVICE: u16 = 0x4854;
/// The skiplist server's service id.
pub const SLS_SERVICE: u16 = 0x534c;

/// What a write asks for. Both servers apply it by the same rule, so they agree on its effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WriteOp {
    /// Insert or replace (PUT).
    Upsert = 1,
    /// Replace only if present (the spec's `update`; YCSB's updates are PUTs of present keys).
    Update = 2,
    Delete = 3,
}

impl WriteOp {
    fn from_u8(v: u8) -> Result<WriteOp, VerbsError> {
        Ok(match v {
            1 => WriteOp::Upsert,
            2 => WriteOp::Update,
            3 => WriteOp::Delete,
            _ => return Err(bad(format!("write op {v}"))),
        })
    }
}

/// One logged write: what the HTS logs, ships to the SLS and applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub op: WriteOp,
    /// The new block's length in units (0 for a delete).
    pub units: u8,
    /// The new block's 48-bit address (0 for a delete).
    pub addr: u64,
    pub client: u32,
    pub req_id: u64,
    pub key: Vec<u8>,
}

/// A write's effect, the same on both servers: whether the key existed, and the block it
/// pointed to before (0 if none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    pub existed: bool,
    pub old_addr: u64,
    pub old_units: u8,
}

/// Where a write's time went on the HTS (the breakdown of the paper's Fig. 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Waiting in the HTS log for its worker.
    pub queue_ns: u64,
    /// The log sync with the SLS (and the key verification READs it overlaps).
    pub sync_ns: u64,
    /// Planning and applying the change to the hash table.
    pub index_ns: u64,
    /// Entries in the write's batch.
    pub batch: u32,
}

/// An item the SLS returns: a key and its block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub key: Vec<u8>,
    pub addr: u64,
    pub units: u8,
}

/// A client's last applied write and its effect (retried writes are answered from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dedup {
    pub client: u32,
    pub req_id: u64,
    pub effect: Effect,
}

/// A server's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Started, not yet initialised by `create` nor recovered.
    Fresh = 0,
    /// Rebuilding from its peer.
    Recovering = 1,
    Serving = 2,
    /// The HTS while the SLS rebuilds from it: writes are blocked.
    PeerRecovering = 3,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    // To the HTS.
    Write(Entry),
    // To the SLS.
    LogSync {
        incarnation: u64,
        worker: u16,
        first_seq: u64,
        committed: u64,
        entries: Vec<Entry>,
    },
    Commit {
        incarnation: u64,
        worker: u16,
        seq: u64,
    },
    Scan {
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        limit: u32,
    },
    Get {
        key: Vec<u8>,
    },
    Dump {
        incarnation: u64,
        partition: u16,
        after: Option<Vec<u8>>,
    },
    /// The SLS's record of each client's last write, clients after `after`.
    DumpDedup {
        after: Option<u32>,
    },
    /// The SLS to the HTS: answer once worker `worker`'s commit point reaches `seq` (`Ok`), or
    /// at once if `incarnation` is not the HTS's (`Stale`).
    CommitQuery {
        incarnation: u64,
        worker: u16,
        seq: u64,
    },
    // To either.
    Status,
    Init,
    // The SLS to the HTS around its recovery.
    PeerRecovering,
    PeerReady,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok,
    /// The HTS incarnation a commit query names is gone.
    Stale,
    /// A server is recovering: try again later.
    Blocked,
    /// The hash table has no room (its overflow pools are spent).
    Full,
    Error(String),
    /// The server's own verbs failed (a memory node timed out or went down) while serving the
    /// request: a transport failure, not a refusal, so the client reports an error of unknown
    /// effect rather than corruption.
    Failed(String),
    Done {
        effect: Effect,
        timing: Timing,
    },
    Status {
        state: ServerState,
        incarnation: u64,
        init_ns: u64,
    },
    Items {
        items: Vec<Item>,
        more: bool,
        drained: u32,
        waited: bool,
    },
    Found {
        addr: u64,
        units: u8,
    },
    Absent,
    Page {
        items: Vec<Item>,
        dedup: Vec<Dedup>,
        done: bool,
    },
}

fn bad(what: String) -> VerbsError {
    VerbsError::Protocol(format!("hstore: bad message: {what}"))
}

struct Writer(Vec<u8>);

/// Room a message's buffer starts with: every fixed-size message, and a write of a key of up
/// to 40 bytes, fit without growing it (growing it twice or three times was a tenth of the
/// HStore code's own share of a bulk load's time).
const MESSAGE_ROOM: usize = 64;

impl Writer {
    fn new(room: usize) -> Writer {
        Writer(Vec::with_capacity(room))
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
        self
    }
    fn bound(&mut self, b: &Bound<Vec<u8>>) -> &mut Self {
        match b {
            Bound::Unbounded => self.u8(0),
            Bound::Included(k) => self.u8(1).bytes(k),
            Bound::Excluded(k) => self.u8(2).bytes(k),
        }
    }
    fn entry(&mut self, e: &Entry) -> &mut Self {
        self.u8(e.op as u8).u8(e.units).u64(e.addr).u32(e.client).u64(e.req_id).bytes(&e.key)
    }
    fn effect(&mut self, e: &Effect) -> &mut Self {
        self.u8(e.existed as u8).u64(e.old_addr).u8(e.old_units)
    }
    fn items(&mut self, items: &[Item]) -> &mut Self {
        self.u32(items.len() as u32);
        for i in items {
            self.bytes(&i.key).u64(i.addr).u8(i.units);
        }
        self
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], VerbsError> {
        let s = self.b.get(self.at..self.at + n).ok_or_else(|| bad(format!("truncated at byte {}", self.at)))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, VerbsError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, VerbsError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, VerbsError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, VerbsError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bool(&mut self) -> Result<bool, VerbsError> {
        Ok(self.u8()? != 0)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, VerbsError> {
        let n = self.u16()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn bound(&mut self) -> Result<Bound<Vec<u8>>, VerbsError> {
        Ok(match self.u8()? {
            0 => Bound::Unbounded,
            1 => Bound::Included(self.bytes()?),
            2 => Bound::Excluded(self.bytes()?),
            t => return Err(bad(format!("bound tag {t}"))),
        })
    }
    fn entry(&mut self) -> Result<Entry, VerbsError> {
        Ok(Entry {
            op: WriteOp::from_u8(self.u8()?)?,
            units: self.u8()?,
            addr: self.u64()?,
            client: self.u32()?,
            req_id: self.u64()?,
            key: self.bytes()?,
        })
    }
    fn effect(&mut self) -> Result<Effect, VerbsError> {
        Ok(Effect { existed: self.bool()?, old_addr: self.u64()?, old_units: self.u8()? })
    }
    /// A count of items that each take at least `min_bytes`, bounded by what is left.
    fn count(&mut self, min_bytes: usize) -> Result<usize, VerbsError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.b.len() - self.at {
            return Err(bad(format!("{n} items in {} bytes", self.b.len() - self.at)));
        }
        Ok(n)
    }
    fn items(&mut self) -> Result<Vec<Item>, VerbsError> {
        let n = self.count(11)?;
        (0..n).map(|_| Ok(Item { key: self.bytes()?, addr: self.u64()?, units: self.u8()? })).collect()
    }
    fn end(self) -> Result<(), VerbsError> {
        if self.at == self.b.len() { Ok(()) } else { Err(bad(format!("{} trailing bytes", self.b.len() - self.at))) }
    }
}

/// Bytes an item takes in a reply (for paging replies under a message limit).
pub fn item_bytes(key_len: usize) -> usize {
    2 + key_len + 9
}

/// Bytes an entry takes in a log sync.
pub fn entry_bytes(key_len: usize) -> usize {
    24 + key_len
}

/// Bytes of a reply's or a log sync's fixed part (under any message limit's slack).
pub const FIXED_BYTES: usize = 64;

/// The encoded refusal of a request longer than `max_message_bytes`, counted in the server's
/// `counters` as `MESSAGE_OVERSIZED`; each server checks before decoding. (eRPC, the papers'
/// transport, cannot carry a message above its limit: a sender that batches past the limit is
/// a bug the checker should see, not a bigger message.)
pub(crate) fn refuse_oversized(
    request: &[u8],
    max_message_bytes: u32,
    counters: &super::ServerCounters,
) -> Option<Vec<u8>> {
    (request.len() > max_message_bytes as usize).then(|| {
        counters.add(super::MESSAGE_OVERSIZED, 1);
        Reply::Error(format!("a request of {} bytes, above max_message_bytes {max_message_bytes}", request.len()))
            .encode()
    })
}

/// A `Request::LogSync`'s bytes, from entries kept elsewhere (the HTS encodes its batch without
/// copying its entries into a request first).
pub fn encode_log_sync<'a>(
    incarnation: u64,
    worker: u16,
    first_seq: u64,
    committed: u64,
    entries: impl IntoIterator<Item = &'a Entry, IntoIter: ExactSizeIterator>,
) -> Vec<u8> {
    let entries = entries.into_iter();
    let mut w = Writer::new(FIXED_BYTES + entries.len() * entry_bytes(16));
    w.u8(2).u64(incarnation).u16(worker).u64(first_seq).u64(committed).u32(entries.len() as u32);
    for e in entries {
        w.entry(e);
    }
    w.0
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(MESSAGE_ROOM);
        match self {
            Request::Write(e) => w.u8(1).entry(e),
            Request::LogSync { incarnation, worker, first_seq, committed, entries } => {
                return encode_log_sync(*incarnation, *worker, *first_seq, *committed, entries);
            }
            Request::Commit { incarnation, worker, seq } => w.u8(3).u64(*incarnation).u16(*worker).u64(*seq),
            Request::Scan { start, end, limit } => w.u8(4).bound(start).bound(end).u32(*limit),
            Request::Get { key } => w.u8(5).bytes(key),
            Request::Dump { incarnation, partition, after } => {
                w.u8(6).u64(*incarnation).u16(*partition);
                match after {
                    None => w.u8(0),
                    Some(k) => w.u8(1).bytes(k),
                }
            }
            Request::Status => w.u8(7),
            Request::Init => w.u8(8),
            Request::PeerRecovering => w.u8(9),
            Request::PeerReady => w.u8(10),
            Request::CommitQuery { incarnation, worker, seq } => w.u8(12).u64(*incarnation).u16(*worker).u64(*seq),
            Request::DumpDedup { after } => match after {
                None => w.u8(11).u8(0),
                Some(c) => w.u8(11).u8(1).u32(*c),
            },
        };
        w.0
    }

    pub fn decode(b: &[u8]) -> Result<Request, VerbsError> {
        let mut r = Reader { b, at: 0 };
        let req = match r.u8()? {
            1 => Request::Write(r.entry()?),
            2 => {
                let (incarnation, worker, first_seq, committed) = (r.u64()?, r.u16()?, r.u64()?, r.u64()?);
                let n = r.count(24)?;
                let entries = (0..n).map(|_| r.entry()).collect::<Result<_, _>>()?;
                Request::LogSync { incarnation, worker, first_seq, committed, entries }
            }
            3 => Request::Commit { incarnation: r.u64()?, worker: r.u16()?, seq: r.u64()? },
            4 => Request::Scan { start: r.bound()?, end: r.bound()?, limit: r.u32()? },
            5 => Request::Get { key: r.bytes()? },
            6 => Request::Dump {
                incarnation: r.u64()?,
                partition: r.u16()?,
                after: if r.bool()? { Some(r.bytes()?) } else { None },
            },
            7 => Request::Status,
            8 => Request::Init,
            9 => Request::PeerRecovering,
            10 => Request::PeerReady,
            11 => Request::DumpDedup { after: if r.bool()? { Some(r.u32()?) } else { None } },
            12 => Request::CommitQuery { incarnation: r.u64()?, worker: r.u16()?, seq: r.u64()? },
            t => return Err(bad(format!("request tag {t}"))),
        };
        r.end()?;
        Ok(req)
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(MESSAGE_ROOM);
        match self {
            Reply::Ok => w.u8(1),
            Reply::Blocked => w.u8(2),
            Reply::Full => w.u8(3),
            Reply::Error(m) => w.u8(4).bytes(&m.as_bytes()[..m.len().min(1024)]),
            Reply::Failed(m) => w.u8(12).bytes(&m.as_bytes()[..m.len().min(1024)]),
            Reply::Done { effect, timing } => {
                w.u8(5).effect(effect).u64(timing.queue_ns).u64(timing.sync_ns).u64(timing.index_ns).u32(timing.batch)
            }
            Reply::Status { state, incarnation, init_ns } => w.u8(6).u8(*state as u8).u64(*incarnation).u64(*init_ns),
            Reply::Items { items, more, drained, waited } => {
                w.u8(7).items(items).u8(*more as u8).u32(*drained).u8(*waited as u8)
            }
            Reply::Found { addr, units } => w.u8(8).u64(*addr).u8(*units),
            Reply::Absent => w.u8(9),
            Reply::Stale => w.u8(11),
            Reply::Page { items, dedup, done } => {
                w.u8(10).items(items).u32(dedup.len() as u32);
                for d in dedup {
                    w.u32(d.client).u64(d.req_id).effect(&d.effect);
                }
                w.u8(*done as u8)
            }
        };
        w.0
    }

    pub fn decode(b: &[u8]) -> Result<Reply, VerbsError> {
        let mut r = Reader { b, at: 0 };
        let reply = match r.u8()? {
            1 => Reply::Ok,
            2 => Reply::Blocked,
            3 => Reply::Full,
            4 => Reply::Error(String::from_utf8_lossy(&r.bytes()?).into_owned()),
            12 => Reply::Failed(String::from_utf8_lossy(&r.bytes()?).into_owned()),
            5 => Reply::Done {
                effect: r.effect()?,
                timing: Timing { queue_ns: r.u64()?, sync_ns: r.u64()?, index_ns: r.u64()?, batch: r.u32()? },
            },
            6 => Reply::Status {
                state: match r.u8()? {
                    0 => ServerState::Fresh,
                    1 => ServerState::Recovering,
                    2 => ServerState::Serving,
                    3 => ServerState::PeerRecovering,
                    s => return Err(bad(format!("server state {s}"))),
                },
                incarnation: r.u64()?,
                init_ns: r.u64()?,
            },
            7 => Reply::Items { items: r.items()?, more: r.bool()?, drained: r.u32()?, waited: r.bool()? },
            8 => Reply::Found { addr: r.u64()?, units: r.u8()? },
            9 => Reply::Absent,
            10 => {
                let items = r.items()?;
                let n = r.count(22)?;
                let dedup = (0..n)
                    .map(|_| Ok(Dedup { client: r.u32()?, req_id: r.u64()?, effect: r.effect()? }))
                    .collect::<Result<_, VerbsError>>()?;
                Reply::Page { items, dedup, done: r.bool()? }
            }
            11 => Reply::Stale,
            t => return Err(bad(format!("reply tag {t}"))),
        };
        r.end()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: WriteOp, key: &[u8]) -> Entry {
        Entry { op, units: 4, addr: 0x12_3456_789a, client: 7, req_id: 99, key: key.to_vec() }
    }

    #[test]
    fn messages_round_trip() {
        let requests = vec![
            Request::Write(entry(WriteOp::Upsert, b"k")),
            Request::LogSync {
                incarnation: 5,
                worker: 3,
                first_seq: 10,
                committed: 9,
                entries: vec![entry(WriteOp::Delete, b""), entry(WriteOp::Update, &[1; 255])],
            },
            Request::Commit { incarnation: 1, worker: 0, seq: u64::MAX },
            Request::Scan { start: Bound::Excluded(b"a".to_vec()), end: Bound::Unbounded, limit: 100 },
            Request::Scan { start: Bound::Unbounded, end: Bound::Included(b"z".to_vec()), limit: 0 },
            Request::Get { key: b"key".to_vec() },
            Request::Dump { incarnation: 2, partition: 1, after: Some(b"m".to_vec()) },
            Request::Dump { incarnation: 2, partition: 1, after: None },
            Request::Status,
            Request::Init,
            Request::PeerRecovering,
            Request::PeerReady,
            Request::DumpDedup { after: None },
            Request::DumpDedup { after: Some(7) },
            Request::CommitQuery { incarnation: 3, worker: 1, seq: 99 },
        ];
        for q in requests {
            assert_eq!(Request::decode(&q.encode()), Ok(q.clone()), "{q:?}");
        }
        let item = Item { key: b"abc".to_vec(), addr: 64, units: 1 };
        let replies = vec![
            Reply::Ok,
            Reply::Blocked,
            Reply::Full,
            Reply::Error("no".into()),
            Reply::Failed("timed out".into()),
            Reply::Done {
                effect: Effect { existed: true, old_addr: 3, old_units: 2 },
                timing: Timing { queue_ns: 1, sync_ns: 2, index_ns: 3, batch: 4 },
            },
            Reply::Status { state: ServerState::PeerRecovering, incarnation: 9, init_ns: 8 },
            Reply::Items { items: vec![item.clone(), item.clone()], more: true, drained: 5, waited: true },
            Reply::Found { addr: 77, units: 3 },
            Reply::Absent,
            Reply::Stale,
            Reply::Page {
                items: vec![item],
                dedup: vec![Dedup { client: 1, req_id: 2, effect: Effect::default() }],
                done: false,
            },
        ];
        for r in replies {
            assert_eq!(Reply::decode(&r.encode()), Ok(r.clone()), "{r:?}");
        }
    }

    #[test]
    fn garbage_is_an_error() {
        for bytes in [&[][..], &[0], &[1, 9], &[200], &[7, 0xff, 0xff, 0xff, 0xff], &[1, 1, 0, 0]] {
            assert!(Request::decode(bytes).is_err(), "{bytes:?}");
            assert!(Reply::decode(bytes).is_err() || bytes == [1], "{bytes:?}");
        }
        let mut ok = Reply::Absent.encode();
        ok.push(0);
        assert!(Reply::decode(&ok).is_err(), "trailing bytes");
        assert!(entry_bytes(10) >= Request::Write(entry(WriteOp::Upsert, &[0; 10])).encode().len() - 1);
    }
}

//! A client's operations: the shared state clients draw fresh keys from, each client's
//! stream, and the items a run loads.

use super::*;

/// A key: its number and its bytes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub number: u64,
    pub bytes: Vec<u8>,
}

/// One generated operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadOp {
    Search {
        key: Key,
    },
    Update {
        key: Key,
        value: Vec<u8>,
    },
    /// An insert of a fresh key (an upsert in the index specification).
    Insert {
        key: Key,
        value: Vec<u8>,
    },
    /// Up to `limit` pairs from `start` upwards (YCSB's `scan(startkey, recordcount)`: the
    /// index specification's `scan(Included(start), Unbounded, limit)`). SMART's artifact scans
    /// the key interval `[k, k + limit)` instead; with dense ordered keys (YCSB E) the two agree
    /// except around deleted or not yet inserted keys.
    Scan {
        start: Key,
        limit: usize,
    },
    /// A search of `key`, then an update of it to `value`.
    ReadModifyWrite {
        key: Key,
        value: Vec<u8>,
    },
    Delete {
        key: Key,
    },
}

impl WorkloadOp {
    pub fn kind(&self) -> OpKind {
        match self {
            WorkloadOp::Search { .. } => OpKind::Search,
            WorkloadOp::Update { .. } => OpKind::Update,
            WorkloadOp::Insert { .. } => OpKind::Insert,
            WorkloadOp::Scan { .. } => OpKind::Scan,
            WorkloadOp::ReadModifyWrite { .. } => OpKind::ReadModifyWrite,
            WorkloadOp::Delete { .. } => OpKind::Delete,
        }
    }

    /// The key operated on (a scan's start key).
    pub fn key(&self) -> &Key {
        match self {
            WorkloadOp::Search { key }
            | WorkloadOp::Update { key, .. }
            | WorkloadOp::Insert { key, .. }
            | WorkloadOp::ReadModifyWrite { key, .. }
            | WorkloadOp::Delete { key } => key,
            WorkloadOp::Scan { start, .. } => start,
        }
    }

    /// The value written, if any.
    pub fn value(&self) -> Option<&[u8]> {
        match self {
            WorkloadOp::Update { value, .. }
            | WorkloadOp::Insert { value, .. }
            | WorkloadOp::ReadModifyWrite { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// State shared by all clients of a run: the insert-key counter, which keys are visible to
/// reads, the sequential cursor, and the skewed-latest generator's constants. Clone it to hand
/// it to each client. The simulator uses it from one thread (so its order is deterministic);
/// hardware runs from several, hence atomics and locks.
#[derive(Clone, Debug)]
pub struct SharedState {
    inner: Arc<SharedInner>,
}

#[derive(Debug)]
pub(crate) struct SharedInner {
    /// Counts this state's inserts from `keys_present`: the `i`-th takes key number
    /// `keys_present + i·parties + rank`.
    next_key: AtomicU64,
    keys_present: u64,
    /// This process's share of the fresh key numbers when several compute-node processes run
    /// one workload (hardware runs): every `parties`-th number from `rank`.
    rank: u64,
    parties: u64,
    /// Key numbers below this are visible to reads.
    visible: AtomicU64,
    /// `Some` in acknowledgement mode: acknowledged inserts at or above `visible`.
    acknowledged: Option<Mutex<BTreeSet<u64>>>,
    sequential: AtomicU64,
    /// Per θ (by bits): a Zipfian generator over the current `visible` count.
    latest: Mutex<Vec<(u64, ZipfianGenerator)>>,
}

impl SharedState {
    /// `keys_present` keys (numbers `0..keys_present`) exist; an insert is visible to reads as
    /// soon as it is generated.
    pub fn new(keys_present: u64) -> SharedState {
        Self::build(keys_present, false)
    }

    /// Like [`new`](Self::new), but an insert becomes visible to reads only once it and every
    /// earlier insert have been [`acknowledge`](Self::acknowledge)d — YCSB's
    /// `AcknowledgedCounterGenerator`, so reads never target a key whose insert is in flight.
    pub fn with_acknowledgements(keys_present: u64) -> SharedState {
        Self::build(keys_present, true)
    }

    /// `SharedState::new(spec.record_count)`: the run starts after [`load_items`].
    pub fn for_spec(spec: &WorkloadSpec) -> SharedState {
        Self::new(spec.record_count)
    }

    /// Like [`new`](Self::new) for one of `parties` compute-node processes that run one
    /// workload without sharing memory: this one (`rank`) inserts every `parties`-th fresh key
    /// number, so no two processes insert the same key. Reads target any key number below the
    /// largest issued here, so some target keys another process has not inserted yet.
    pub fn strided(keys_present: u64, rank: u64, parties: u64) -> SharedState {
        assert!(parties >= 1 && rank < parties, "rank {rank} of {parties} parties");
        let mut state = Self::build(keys_present, false);
        let inner = Arc::get_mut(&mut state.inner).expect("not shared yet");
        (inner.rank, inner.parties) = (rank, parties);
        state
    }

    fn build(keys_present: u64, acknowledgements: bool) -> SharedState {
        SharedState {
            inner: Arc::new(SharedInner {
                next_key: AtomicU64::new(keys_present),
                keys_present,
                rank: 0,
                parties: 1,
                visible: AtomicU64::new(keys_present),
                acknowledged: acknowledgements.then(|| Mutex::new(BTreeSet::new())),
                sequential: AtomicU64::new(0),
                latest: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The number of key numbers handed out (loaded plus inserted); with a stride, a bound
    /// above every number issued.
    pub fn issued(&self) -> u64 {
        let i = &self.inner;
        i.keys_present + (i.next_key.load(Ordering::SeqCst) - i.keys_present) * i.parties
    }

    /// Key numbers below this are targets for reads, updates, scans and deletes.
    pub fn visible(&self) -> u64 {
        self.inner.visible.load(Ordering::SeqCst)
    }

    /// Reports that the insert of `key_number` completed (successfully or not, as YCSB). A no-op
    /// unless the state was built [`with_acknowledgements`](Self::with_acknowledgements).
    pub fn acknowledge(&self, key_number: u64) {
        let Some(pending) = &self.inner.acknowledged else { return };
        assert!(key_number < self.issued(), "acknowledged key {key_number} was never issued");
        let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut visible = self.inner.visible.load(Ordering::SeqCst);
        if key_number < visible {
            return;
        }
        pending.insert(key_number);
        while pending.remove(&visible) {
            visible += 1;
        }
        self.inner.visible.store(visible, Ordering::SeqCst);
    }

    fn issue_insert(&self) -> u64 {
        let i = &self.inner;
        let local = i.next_key.fetch_add(1, Ordering::SeqCst) - i.keys_present;
        let n = local
            .checked_mul(i.parties)
            .and_then(|x| x.checked_add(i.keys_present + i.rank))
            .filter(|&n| n < u64::MAX)
            .expect("key numbers exhausted");
        if self.inner.acknowledged.is_none() {
            self.inner.visible.fetch_max(n + 1, Ordering::SeqCst);
        }
        n
    }

    fn next_sequential(&self) -> u64 {
        self.inner.sequential.fetch_add(1, Ordering::SeqCst)
    }

    /// A rank from the latest generator for θ over the `visible` present keys.
    fn latest_rank(&self, theta: f64, visible: u64, u: f64) -> u64 {
        let mut cache = self.inner.latest.lock().unwrap_or_else(|e| e.into_inner());
        let bits = theta.to_bits();
        let index = match cache.iter().position(|(b, _)| *b == bits) {
            Some(i) => i,
            None => {
                cache.push((bits, ZipfianGenerator::new(visible, theta)));
                cache.len() - 1
            }
        };
        let generator = &mut cache[index].1;
        if generator.items() != visible {
            *generator = ZipfianGenerator::new(visible, theta);
        }
        generator.rank(u)
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Chooser {
    Uniform,
    Scrambled(ScrambledZipfianGenerator),
    /// The generator, and whether ranks past the keys present fold onto them
    /// ([`WorkloadSpec::zipfian_items`]) rather than being redrawn.
    Zipfian(ZipfianGenerator, bool),
    Latest(f64),
    Sequential,
}

/// How many times a Zipfian draw of a key not yet inserted is redrawn before falling back to
/// `key % visible` (YCSB redraws without a bound; the bound only matters for specs whose key
/// space is mostly empty).
pub(crate) const MAX_REDRAWS: u32 = 1000;

/// One client's operations (an endless iterator).
#[derive(Debug)]
pub struct Stream {
    mix: Mix,
    key_format: KeyFormat,
    value_bytes: usize,
    scan_length: ScanLength,
    chooser: Chooser,
    rng: ChaCha8Rng,
    shared: SharedState,
    phase: u32,
    client: u32,
    seq: u64,
    fill: bool,
}

impl Stream {
    pub(crate) fn new(
        spec: &WorkloadSpec,
        seed: u64,
        phase: u32,
        client: u32,
        shared: &SharedState,
        fill: bool,
    ) -> Stream {
        if let Err(e) = spec.validate() {
            panic!("invalid workload `{}`: {e}", spec.name);
        }
        let _ = version_of(phase, client, 0); // checks the ranges
        let space = spec.zipfian_key_space();
        let chooser = match spec.distribution {
            Distribution::Uniform => Chooser::Uniform,
            // YCSB: new ScrambledZipfianGenerator(insertstart, insertstart + insertcount +
            // expectednewkeys), an inclusive maximum, hence the + 1.
            Distribution::ScrambledZipfian { theta } => {
                Chooser::Scrambled(ScrambledZipfianGenerator::new(space + 1, theta))
            }
            Distribution::Zipfian { theta } => match spec.zipfian_items {
                Some(items) => Chooser::Zipfian(ZipfianGenerator::new(items.max(space), theta), true),
                None => Chooser::Zipfian(ZipfianGenerator::new(space, theta), false),
            },
            Distribution::Latest { theta } => Chooser::Latest(theta),
            Distribution::Sequential => Chooser::Sequential,
        };
        let purpose = if fill { PURPOSE_FILL } else { PURPOSE_STREAM };
        Stream {
            mix: spec.mix,
            key_format: spec.key_format,
            value_bytes: spec.value_bytes,
            scan_length: spec.scan_length,
            chooser,
            rng: chacha(seed, purpose, phase as u64, client as u64),
            shared: shared.clone(),
            phase,
            client,
            seq: 0,
            fill,
        }
    }

    pub fn client(&self) -> u32 {
        self.client
    }

    /// Operations generated so far.
    pub fn generated(&self) -> u64 {
        self.seq
    }

    /// Whether this is a run-until-insert-failure stream.
    pub fn is_fill(&self) -> bool {
        self.fill
    }

    fn key(&self, number: u64) -> Key {
        Key { number, bytes: self.key_format.encode(number) }
    }

    /// A key number for a read, update, scan, read-modify-write or delete.
    fn choose_key_number(&mut self) -> u64 {
        let visible = self.shared.visible();
        if visible == 0 {
            return 0; // nothing present: the operation targets key 0, which misses
        }
        match &self.chooser {
            Chooser::Uniform => below(&mut self.rng, visible),
            Chooser::Sequential => self.shared.next_sequential() % visible,
            Chooser::Scrambled(g) => {
                let mut k = 0;
                for _ in 0..MAX_REDRAWS {
                    k = g.key(unit(&mut self.rng));
                    if k < visible {
                        return k;
                    }
                }
                k % visible
            }
            Chooser::Zipfian(g, true) => g.rank(unit(&mut self.rng)) % visible,
            Chooser::Zipfian(g, false) => {
                let mut k = 0;
                for _ in 0..MAX_REDRAWS {
                    k = g.rank(unit(&mut self.rng));
                    if k < visible {
                        return k;
                    }
                }
                k % visible
            }
            Chooser::Latest(theta) => {
                let u = unit(&mut self.rng);
                visible - 1 - self.shared.latest_rank(*theta, visible, u)
            }
        }
    }

    /// The next operation.
    pub fn next_op(&mut self) -> WorkloadOp {
        let version = version_of(self.phase, self.client, self.seq);
        self.seq += 1;
        let kind = if self.fill { OpKind::Insert } else { self.mix.choose(unit(&mut self.rng)) };
        if kind == OpKind::Insert {
            let number = self.shared.issue_insert();
            return WorkloadOp::Insert { key: self.key(number), value: value_for(number, version, self.value_bytes) };
        }
        let number = self.choose_key_number();
        let key = self.key(number);
        match kind {
            OpKind::Search => WorkloadOp::Search { key },
            OpKind::Update => WorkloadOp::Update { key, value: value_for(number, version, self.value_bytes) },
            OpKind::ReadModifyWrite => {
                WorkloadOp::ReadModifyWrite { key, value: value_for(number, version, self.value_bytes) }
            }
            OpKind::Delete => WorkloadOp::Delete { key },
            OpKind::Scan => {
                let ScanLength { min, max } = self.scan_length;
                let limit = min + below(&mut self.rng, (max - min) as u64 + 1) as usize;
                WorkloadOp::Scan { start: key, limit }
            }
            OpKind::Insert => unreachable!("handled above"),
        }
    }
}

impl Iterator for Stream {
    type Item = WorkloadOp;

    fn next(&mut self) -> Option<WorkloadOp> {
        Some(self.next_op())
    }
}

/// The load phase: `(key, value)` for key numbers `0..record_count` in order (so in hashed key
/// order for hashed keys, ascending for ordered ones), or with [`WorkloadSpec::shuffled_load`]
/// in a fixed pseudo-random order of the same key numbers; values at [`LOAD_VERSION`].
pub fn load_items(spec: &WorkloadSpec) -> LoadItems {
    LoadItems {
        key_format: spec.key_format,
        value_bytes: spec.value_bytes,
        next: 0,
        end: spec.record_count,
        shuffled: spec.shuffled_load,
    }
}

/// The iterator of [`load_items`].
#[derive(Clone, Debug)]
pub struct LoadItems {
    key_format: KeyFormat,
    value_bytes: usize,
    next: u64,
    end: u64,
    shuffled: bool,
}

/// The `i`-th of `0..n` in a fixed pseudo-random permutation of `0..n`: a four-round Feistel
/// network over the smallest even number of bits that holds `n`, walking the cycle until it
/// lands below `n` (at most four tries expected). The same for every run: the order is a
/// property of the load, not of the run's seed.
pub fn shuffled_index(i: u64, n: u64) -> u64 {
    debug_assert!(i < n);
    let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2).next_multiple_of(2);
    let half = bits / 2;
    let mask = (1u64 << half) - 1;
    let round = |r: u64, x: u64| {
        // splitmix64's finaliser of the round and the half.
        let mut z = x.wrapping_add(r.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x6a09_e667_f3bc_c909);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut x = i;
    loop {
        let (mut l, mut r) = (x >> half, x & mask);
        for k in 0..4 {
            (l, r) = (r, l ^ (round(k, r) & mask));
        }
        x = (l << half) | r;
        if x < n {
            return x;
        }
    }
}

impl Iterator for LoadItems {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        if self.next >= self.end {
            return None;
        }
        let n = if self.shuffled { shuffled_index(self.next, self.end) } else { self.next };
        self.next += 1;
        Some((self.key_format.encode(n), value_for(n, LOAD_VERSION, self.value_bytes)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl ExactSizeIterator for LoadItems {}

impl LoadItems {
    /// The keys at places `share, share + shares, share + 2·shares, …` of the whole load order
    /// (whatever of it this iterator has yielded), in that order: one loader's share when the
    /// load is dealt round-robin over `shares` loaders.
    pub fn share_keys(&self, share: u64, shares: u64) -> Vec<Vec<u8>> {
        assert!(share < shares, "share {share} of {shares}");
        (share..self.end)
            .step_by(shares as usize)
            .map(|i| self.key_format.encode(if self.shuffled { shuffled_index(i, self.end) } else { i }))
            .collect()
    }
}

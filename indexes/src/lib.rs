//! # dmkit-indexes: indexes on disaggregated memory
//!
//! Every index is written against [`dmkit_rdma::Client`] (verbs plus the client context) and
//! never names a backend. It implements [`Index`] (the operations of one client: `search`,
//! `write` — insert, update and delete, told apart by a [`Change`] — and `scan`) and
//! [`IndexKind`] (how to create, open, check and break it).
//!
//! - [`spec`]: the sequential specification, in words and as an executable model.
//! - [`example`]: a small, fully documented one-sided hash table with per-bucket locks — read it
//!   first to learn how an index is written.
//! - [`sherman`], [`smart`], [`art`], [`chime`], [`race`], [`dolphin`], [`hstore`]: the indexes of the papers and their baselines.
//! - [`bulk`]: loading an initial structure with an index's own insert logic.
//! - [`registry`]: every index, one line each, and how the commands find them by name.
//!
//! Three levels of state: remote memory; per compute node ([`IndexKind::NodeState`], shared by
//! that node's clients, `Sync`, its bytes accounted); per client (the [`IndexKind::Handle`]).

pub mod art;
pub mod bulk;
pub mod checking;
pub mod chime;
pub mod clover;
pub mod cluster;
pub mod common;
pub mod configured;
pub mod dolphin;
pub mod example;
pub mod hash;
pub mod hstore;
pub mod indirect;
pub mod probe;
pub mod race;
pub mod registry;
pub mod sherman;
pub mod smart;
pub mod spec;

use dmkit_rdma::service::ServiceHost;
use dmkit_rdma::{Caps, Client, MemoryView, VerbsError};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::ops::Bound;
use std::sync::Arc;

/// Why an index operation failed. Bad input is an error, never a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexError {
    KeyTooShort {
        len: usize,
        min: usize,
    },
    KeyTooLong {
        len: usize,
        max: usize,
    },
    ValueTooLong {
        len: usize,
        max: usize,
    },
    /// The index stores values of a fixed size and this one is shorter.
    ValueTooShort {
        len: usize,
        min: usize,
    },
    /// The key is reserved by the index's layout (say, a fence's +infinity).
    ReservedKey(&'static str),
    /// The value is reserved by the index's layout (say, the word that marks an empty slot).
    ReservedValue(&'static str),
    /// The structure has no room for the key (a full bucket, a full table).
    Full,
    /// The index does not offer this operation (scans on hash indexes).
    Unsupported(&'static str),
    /// An operation retried more than its bound (contention, or a lock never released).
    RetriesExhausted {
        op: &'static str,
        retries: u32,
    },
    /// The index read a remote structure that violates its invariants: a bug report.
    Corrupt(String),
    /// The verbs layer failed (node down, memory exhausted...).
    Verbs(VerbsError),
}

impl From<VerbsError> for IndexError {
    fn from(e: VerbsError) -> IndexError {
        IndexError::Verbs(e)
    }
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::KeyTooShort { len, min } => write!(f, "key of {len} bytes is shorter than {min}"),
            IndexError::KeyTooLong { len, max } => write!(f, "key of {len} bytes is longer than {max}"),
            IndexError::ValueTooLong { len, max } => write!(f, "value of {len} bytes is longer than {max}"),
            IndexError::ValueTooShort { len, min } => write!(f, "value of {len} bytes is shorter than {min}"),
            IndexError::ReservedKey(why) => write!(f, "reserved key: {why}"),
            IndexError::ReservedValue(why) => write!(f, "reserved value: {why}"),
            IndexError::Full => write!(f, "the index has no room for this key"),
            IndexError::Unsupported(op) => write!(f, "this index does not support {op}"),
            IndexError::RetriesExhausted { op, retries } => write!(f, "{op} gave up after {retries} retries"),
            IndexError::Corrupt(msg) => write!(f, "corrupt remote structure: {msg}"),
            IndexError::Verbs(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for IndexError {}

/// Key and value sizes an index accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub min_key_bytes: usize,
    pub max_key_bytes: usize,
    pub min_value_bytes: usize,
    pub max_value_bytes: usize,
}

impl Limits {
    pub fn check_key(&self, key: &[u8]) -> Result<(), IndexError> {
        if key.len() < self.min_key_bytes {
            return Err(IndexError::KeyTooShort { len: key.len(), min: self.min_key_bytes });
        }
        if key.len() > self.max_key_bytes {
            return Err(IndexError::KeyTooLong { len: key.len(), max: self.max_key_bytes });
        }
        Ok(())
    }

    pub fn check_value(&self, value: &[u8]) -> Result<(), IndexError> {
        if value.len() < self.min_value_bytes {
            return Err(IndexError::ValueTooShort { len: value.len(), min: self.min_value_bytes });
        }
        if value.len() > self.max_value_bytes {
            return Err(IndexError::ValueTooLong { len: value.len(), max: self.max_value_bytes });
        }
        Ok(())
    }
}

/// A client's counters: retries, failed lock and CAS attempts, and index-specific events
/// (splits, displacements, resizes...) that checking presets require to be non-zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub retries: u64,
    pub lock_failures: u64,
    pub cas_failures: u64,
    pub events: Events,
}

/// A client's named event counts, in the order of their names.
///
/// Indexes count a few events on every operation (HStore: seven for a PUT) and know a few
/// dozen names at most, each an index's `&'static str` constant. A count finds its name by
/// comparing addresses first and bytes only if no address matched (a `BTreeMap` compared bytes
/// at every level: 4% of the instructions of loading HStore).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Events(Vec<(&'static str, u64)>);

impl Events {
    /// Adds `n` to `name`'s count (a name first counted with `n == 0` is listed, at 0).
    pub fn add(&mut self, name: &'static str, n: u64) {
        *self.count_mut(name) += n;
    }

    /// `name`'s count, to change in place; a name not counted before is listed at 0.
    pub fn count_mut(&mut self, name: &'static str) -> &mut u64 {
        let at = match self.0.iter().position(|(k, _)| std::ptr::eq(*k, name)) {
            Some(at) => at,
            None => match self.0.binary_search_by(|(k, _)| (*k).cmp(name)) {
                Ok(at) => at,
                Err(at) => {
                    self.0.insert(at, (name, 0));
                    at
                }
            },
        };
        &mut self.0[at].1
    }

    /// `name`'s count, if it was ever counted.
    pub fn get(&self, name: &str) -> Option<&u64> {
        self.0.binary_search_by(|(k, _)| (*k).cmp(name)).ok().map(|at| &self.0[at].1)
    }

    /// Every name counted and its count, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.0.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(&'static str, u64)> for Events {
    fn from_iter<T: IntoIterator<Item = (&'static str, u64)>>(items: T) -> Self {
        let mut e = Events::default();
        for (k, n) in items {
            e.add(k, n);
        }
        e
    }
}

impl Counters {
    /// The name of [`Counters::retries`] where counters are named (a preset's required
    /// counters, a race handler's event): operations that started again.
    pub const RETRIES: &'static str = "retries";
    /// The name of [`Counters::lock_failures`]: lock attempts that found the lock held.
    pub const LOCK_FAILURES: &'static str = "lock_failures";
    /// The name of [`Counters::cas_failures`]: CASes that found another value than expected.
    pub const CAS_FAILURES: &'static str = "cas_failures";
    /// Look-ups a compute-node cache answered, by the name every index with a cache counts them
    /// under (as a client event or a node counter): a run reports the hit ratio from these two.
    pub const CACHE_HIT: &'static str = "cache_hit";
    /// Look-ups a compute-node cache could not answer (see [`Counters::CACHE_HIT`]).
    pub const CACHE_MISS: &'static str = "cache_miss";

    /// Counts one `name` event (the index's constant for it, declared where it is counted).
    pub fn event(&mut self, name: &'static str) {
        self.events.add(name, 1);
    }

    /// Adds another client's counters.
    pub fn merge(&mut self, other: &Counters) {
        self.retries += other.retries;
        self.lock_failures += other.lock_failures;
        self.cas_failures += other.cas_failures;
        for (k, v) in other.events.iter() {
            self.events.add(k, v);
        }
    }
}

/// Key-value pairs, as scans return them.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// What a write does to its key: [`Index::write`]'s argument, and what an RDWC window combines
/// ([`common::change`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Insert the key, or replace its value ([`Index::insert`]).
    Upsert(Vec<u8>),
    /// Replace the value of a present key; an absent key stays absent ([`Index::update`]).
    Update(Vec<u8>),
    /// Remove the key ([`Index::delete`]).
    Delete,
}

impl Change {
    /// The operation's name, as histories and errors say it: `insert`, `update` or `delete`.
    pub fn op(&self) -> &'static str {
        match self {
            Change::Upsert(_) => "insert",
            Change::Update(_) => "update",
            Change::Delete => "delete",
        }
    }
}

/// The operations of one client (one coroutine) on an index. See [`spec`] for what each must
/// do; every key and value is checked against the index's [`Limits`] first.
///
/// An index implements `search`, `write`, `scan` and `counters`; `insert`, `update` and
/// `delete` are `write` with a [`Change`].
pub trait Index {
    fn search(&mut self, key: &[u8]) -> impl Future<Output = Result<Option<Vec<u8>>, IndexError>>;
    /// Applies `change` to `key`; returns whether the key existed just before it (so: upsert and
    /// update say "existed", delete says "was deleted"; an update of an absent key changes
    /// nothing).
    fn write(&mut self, key: &[u8], change: Change) -> impl Future<Output = Result<bool, IndexError>>;
    /// Upsert: returns whether the key existed.
    fn insert(&mut self, key: &[u8], value: &[u8]) -> impl Future<Output = Result<bool, IndexError>> {
        self.write(key, Change::Upsert(value.to_vec()))
    }
    /// Returns false (and changes nothing) if the key is absent.
    fn update(&mut self, key: &[u8], value: &[u8]) -> impl Future<Output = Result<bool, IndexError>> {
        self.write(key, Change::Update(value.to_vec()))
    }
    /// Returns whether the key was deleted (existed).
    fn delete(&mut self, key: &[u8]) -> impl Future<Output = Result<bool, IndexError>> {
        self.write(key, Change::Delete)
    }
    /// Up to `limit` pairs with keys within the bounds, ascending.
    fn scan(
        &mut self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Pairs, IndexError>>;
    /// This client's counters so far.
    fn counters(&self) -> &Counters;
}

/// A removable protection of an index's protocol, for `dmkit check --plant NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlantedBug {
    pub name: &'static str,
    /// What the protection guards against, and what goes wrong without it.
    pub description: &'static str,
}

impl PlantedBug {
    /// The name of `bug` among `plants`, or an error naming `index` and every plant it has.
    pub fn named(plants: &'static [PlantedBug], index: &str, bug: &str) -> Result<&'static str, String> {
        plants.iter().find(|p| p.name == bug).map(|p| p.name).ok_or_else(|| {
            let names: Vec<&str> = plants.iter().map(|p| p.name).collect();
            format!("{index} has no planted bug '{bug}' (it has: {})", names.join(", "))
        })
    }
}

/// A branch of an index's protocol that exists only to handle a race with another client or
/// a fault — a re-check, a retry, a wait, a repair — named by the [`Counters`] event it counts
/// (or by `retries`, `lock_failures`, `cas_failures`). A clean check says nothing about a
/// handler no run reached: `dmkit check` lists the ones that stayed at zero, and
/// `dmkit check --coverage` the ones no preset reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaceHandler {
    pub event: &'static str,
    /// The race it handles, and what would go wrong without it.
    pub race: &'static str,
}

/// What an invariant walk saw, for reports (load factor, memory per item) and for presets'
/// non-vacuity checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InvariantReport {
    /// Items (key-value pairs) found.
    pub items: u64,
    /// Remote nodes, buckets or blocks visited, by kind.
    pub structures: BTreeMap<&'static str, u64>,
    /// Remote bytes the structure occupies (allocated for it).
    pub remote_bytes: u64,
    /// Items it could hold without growing, where that is fixed (hash tables): load factor is
    /// `items / capacity_items`.
    pub capacity_items: Option<u64>,
    /// States that only an operation that did not finish leaves behind (one that failed with
    /// an error midway, or whose client crashed), and that the protocol tolerates: a delete's
    /// dead leaf still linked, say. A walk lists them here instead of failing, and the checker
    /// accepts them only if some operation of the run did not finish: after a run whose every
    /// operation finished, any entry is a violation.
    pub unfinished: Vec<String>,
}

impl InvariantReport {
    /// Accepts the [`InvariantReport::unfinished`] states only if `some_operation_unfinished`
    /// (an operation of the run failed, or never returned); otherwise the first of them, as a
    /// violation.
    pub fn check_unfinished(&self, some_operation_unfinished: bool) -> Result<(), String> {
        match self.unfinished.first() {
            Some(first) if !some_operation_unfinished => {
                Err(format!("{first} ({} such states), although every operation finished", self.unfinished.len()))
            }
            _ => Ok(()),
        }
    }
}

/// Server nodes an index runs services on besides its memory nodes (HStore's hash-table and
/// skiplist servers): `nodes` of them, each with `rpc_threads` RPC threads; its services'
/// workers get threads of their own, which share the RPC threads' cores if
/// `workers_share_cores` (hyper-threads). Server node `i` is node `memory_nodes + i`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Servers {
    pub nodes: u16,
    pub rpc_threads: u16,
    pub workers_share_cores: bool,
}

/// How to create, open, check and break one index.
pub trait IndexKind: 'static {
    /// Name used by `dmkit run --index` and `dmkit check --index`.
    const NAME: &'static str;
    /// Whether `scan` is offered (hash indexes return [`IndexError::Unsupported`]).
    const SUPPORTS_SCAN: bool = true;
    /// For a structure built for dense integer keys (1..N, as Dolphin's paper and artifact load
    /// them) that degenerates on sparse ones: what happens to it on them, and what its paper
    /// runs instead. `dmkit run` prints it when a workload gives the index hashed keys.
    const DENSE_KEYS: Option<&'static str> = None;
    type Options: Clone + fmt::Debug + Default + Send + Sync + 'static;
    /// State shared by the clients of one compute node (caches, local lock tables).
    type NodeState: Send + Sync + 'static;
    /// One client's handle.
    type Handle<C: Client + Clone + 'static>: Index;

    /// Host bytes a loaded item costs (8-byte keys and values; the loaded image and the
    /// simulation's own state), as `dmkit bench-load` measures it at 10 M items: peak RSS over
    /// items (for an index whose runs hold much more than its load, a run's peak: HStore,
    /// Clover). The basis of a run's memory estimate, which refuses a run this machine cannot
    /// hold before it starts; an index that does not say is assumed to cost 512 bytes an item.
    const HOST_BYTES_PER_ITEM: u64 = 512;

    /// The key and value sizes these options accept.
    fn limits(options: &Self::Options) -> Limits;

    /// Host bytes `compute_nodes` compute nodes' caches may take at most with `items` items
    /// loaded (each full: its budget, or every cacheable node of the index if that is less),
    /// for the memory estimate; 0 (no cache) by default.
    fn cache_host_bytes(options: &Self::Options, compute_nodes: u16, items: u64) -> u64 {
        let _ = (options, compute_nodes, items);
        0
    }

    /// Checks options before anything is built: a clear error, never a panic later.
    fn validate(options: &Self::Options) -> Result<(), String>;

    /// Options for a run of `shape` in the named configuration `config` (`default`: the index's
    /// default), validated, and the configuration's name as results report it. The sizing a
    /// run's shape implies (tables for its items, a cache budget) lives here, with the index.
    /// Errors are one line naming the index (an unknown configuration, a budget the index has
    /// no use for, keys or values it cannot store).
    fn for_run(shape: &registry::RunShape<'_>, config: &str) -> Result<(Self::Options, String), String>;

    /// Whether this type runs configuration `config` of the index named [`IndexKind::NAME`]:
    /// true for an index's own type. A registry entry that runs some of another index's
    /// configurations (values out of line) says which ([`registry`]).
    fn serves(config: &str) -> bool {
        let _ = config;
        true
    }

    /// `dmkit fill`'s table: validated options for a hash table of `shape` that never grows, or
    /// `None` if the index is not a fixed-size hash table (the default).
    fn fixed_table(shape: &registry::TableShape) -> Option<Result<Self::Options, String>> {
        let _ = shape;
        None
    }

    /// The server nodes the index's services need (none for one-sided indexes).
    fn servers(options: &Self::Options) -> Servers {
        let _ = options;
        Servers::default()
    }

    /// Starts the index's services on its server nodes, before anything runs. Indexes without
    /// services keep the default.
    fn install<H: ServiceHost>(options: &Self::Options, host: &mut H) -> Result<(), String> {
        let _ = (options, host);
        Ok(())
    }

    /// Builds the empty remote structure (superblock, root) with one client, once per run.
    fn create<C: Client>(options: &Self::Options, ctx: &C) -> impl Future<Output = Result<(), IndexError>>;

    /// A compute node's fresh state.
    fn node_state(options: &Self::Options, caps: &Caps) -> Self::NodeState;

    /// Bytes a compute node's state occupies (cache consumption is a metric).
    fn node_state_bytes(node: &Self::NodeState) -> u64;

    /// A client's handle on its compute node's state.
    fn open<C: Client + Clone + 'static>(
        options: &Self::Options,
        node: Arc<Self::NodeState>,
        ctx: C,
    ) -> Self::Handle<C>;

    /// Walks the remote structure outside time and checks its invariants; call it when no
    /// operation is in flight.
    fn check_invariants(options: &Self::Options, memory: &dyn MemoryView) -> Result<InvariantReport, String>;

    /// Fills a compute node's caches from the remote structure, outside time: the state a long
    /// warm-up leaves (papers measure after tens of seconds of it), without simulating one at
    /// bandwidth-bound speed. Call it after loading, with no operation in flight. Indexes with
    /// nothing to warm keep the default.
    fn warm(options: &Self::Options, node: &Self::NodeState, memory: &dyn MemoryView) -> Result<(), String> {
        let _ = (options, node, memory);
        Ok(())
    }

    /// Leaves `node` as [`IndexKind::warm`] on `memory` would, given `warmed`, a compute node
    /// of the same run already warmed on the same memory: warming depends only on the options
    /// and the memory, so every compute node ends in the same state, and an index whose warm
    /// is costly copies it (sixteen 600 MB caches at 60 M keys took five minutes to warm one
    /// by one). The default warms `node` itself; an override must leave exactly the state
    /// `warm` would (its test compares the two).
    fn warm_like(
        options: &Self::Options,
        node: &Self::NodeState,
        warmed: &Self::NodeState,
        memory: &dyn MemoryView,
    ) -> Result<(), String> {
        let _ = warmed;
        Self::warm(options, node, memory)
    }

    /// Fills a compute node's caches with what it would have read had it inserted `keys` (sorted
    /// ascending, bytewise) into the loaded structure: the internal nodes on their paths, top
    /// down and level by level as [`IndexKind::warm`] does, until the budget is full. A paper
    /// that loads its keys split over its compute nodes and reports one node's cache (CHIME's
    /// Fig. 14) measures this, not [`IndexKind::warm`]'s whole tree. The paths are those of the
    /// loaded structure: a node read during the load and replaced before it ended (a radix
    /// node grown to a larger type) is charged at its final size. Call it where
    /// [`IndexKind::warm`] is called. Returns `false`, leaving `node` as it was, for an index
    /// that does not warm by keys (the default): the caller warms it whole and says so.
    fn warm_keys(
        options: &Self::Options,
        node: &Self::NodeState,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        let _ = (options, node, memory, keys);
        Ok(false)
    }

    /// Puts a compute node's caches through the searches of `keys`, in their order (a load
    /// share, in load order), outside time: each from the deepest cached node, the nodes below
    /// read from memory and cached as a search caches them, with the cache's own eviction and
    /// charge. The state a compute node's caches are in after it inserted these keys with its
    /// caches on, as the papers' compute nodes load (over the loaded structure: the paths are
    /// the final tree's). Returns `false`, leaving `node` as it was, for an index that does not
    /// replay (the default): the caller warms it whole and says so.
    fn replay_keys(
        options: &Self::Options,
        node: &Self::NodeState,
        memory: &dyn MemoryView,
        keys: &[Vec<u8>],
    ) -> Result<bool, String> {
        let _ = (options, node, memory, keys);
        Ok(false)
    }

    /// Hands compute node 0 of a run what the loader's compute node holds that outlives the
    /// load — its chunk allocator's reservations, free blocks and current chunk — so that blocks
    /// of loaded items are freed and reused there, as when one simulation loads and runs (runs
    /// start from a loaded image with fresh compute nodes). `loader` is shared by every run from
    /// one image and only read. Indexes whose compute-node state holds nothing of the kind keep
    /// the default.
    fn inherit(node: &Self::NodeState, loader: &Self::NodeState) {
        let _ = (node, loader);
    }

    /// A compute node's own counters (RDWC windows, cache entries...), summed over nodes by
    /// reports. A cache counted here rather than by its clients names its look-ups
    /// [`Counters::CACHE_HIT`] and [`Counters::CACHE_MISS`], so runs report its hit ratio.
    /// Indexes without any keep the default.
    fn node_counters(node: &Self::NodeState) -> BTreeMap<&'static str, u64> {
        let _ = node;
        BTreeMap::new()
    }

    /// Counters of the index's services (batches, drains, recoveries), read outside time from
    /// their state where the view shows it; summed into a run's index counters. Indexes without
    /// services keep the default.
    fn server_counters(options: &Self::Options, memory: &dyn MemoryView) -> BTreeMap<&'static str, u64> {
        let _ = (options, memory);
        BTreeMap::new()
    }

    /// The race-handling branches of the protocol, each with the event that counts it.
    fn race_handlers() -> &'static [RaceHandler] {
        &[]
    }

    /// Every planted bug this index offers.
    fn planted_bugs() -> &'static [PlantedBug];

    /// Removes the protection named `bug` in `options`.
    fn plant(options: &mut Self::Options, bug: &str) -> Result<(), String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_count_a_name_once_whatever_its_address() {
        const SPLIT: &str = "leaf_split";
        // The same name at another address (as a constant used from another crate may be).
        let copy: &'static str = String::from(SPLIT).leak();
        assert!(!std::ptr::eq(copy, SPLIT));
        let mut e = Events::default();
        e.add(SPLIT, 2);
        e.add("cache_hit", 0);
        e.add(copy, 3);
        e.add("aborts", 1);
        assert_eq!(e.get(SPLIT), Some(&5));
        assert_eq!(e.get("cache_hit"), Some(&0), "a name counted at 0 is listed");
        assert_eq!(e.get("missing"), None);
        let listed: Vec<_> = e.iter().collect();
        assert_eq!(listed, [("aborts", 1), ("cache_hit", 0), ("leaf_split", 5)], "in name order");
        let mut c = Counters::default();
        c.merge(&Counters { events: e.clone(), ..Counters::default() });
        c.merge(&Counters { events: [(SPLIT, 1)].into_iter().collect(), ..Counters::default() });
        assert_eq!(c.events.get(SPLIT), Some(&6));
        assert_eq!(format!("{e:?}"), r#"{"aborts": 1, "cache_hit": 0, "leaf_split": 5}"#);
    }
}

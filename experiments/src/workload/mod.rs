//! # Workload generators, deterministic from a seed
//!
//! Everything an experiment feeds an index: YCSB A–F and LOAD, arbitrary mixes (including
//! delete), phased runs, key formats from 8 to 256 bytes, values of any size, the key
//! distributions of DESIGN.md §5, a run-until-insert-failure mode, and a documented trace format
//! with a reader and a synthetic stand-in for the Twitter cache traces Dolphin used.
//!
//! ## Determinism
//!
//! - Randomness comes only from `rand_chacha`'s `ChaCha8Rng`, read through `next_u64` (whose output
//!   ChaCha fixes), never through `rand`'s distributions (whose algorithms may change between
//!   releases): a uniform `f64` in `[0, 1)` is `(next_u64 >> 11) · 2^-53`, as Java's
//!   `Random.nextDouble` builds it, and an integer below `n` is the high half of
//!   `next_u64 · n` (Lemire's multiply, without the rejection step: bias below `n / 2^64`).
//! - No platform `libm` decides an outcome. The Zipfian samplers need `x^y`, `ln` and `exp`;
//!   [`math`] implements them with IEEE-754 `+ - × ÷` and bit manipulation only, so every
//!   platform draws the same ranks. They agree with `std`'s to about 1e-15 relative (tested), which
//!   is far below any sampling effect. Constants (ζ(n, θ), η, α) are computed once per generator at
//!   construction; ζ(n, θ) uses the Euler–Maclaurin formula ([`math::zeta`]), so a generator over
//!   60 million (or YCSB's 10^10) items costs microseconds instead of YCSB's minutes.
//! - No hash maps with random state and no wall clock.
//! - A stream is fixed by `(seed, phase, client)`; different clients draw independent ChaCha
//!   streams (`set_stream(client)`). What a stream returns can also depend on the keys other
//!   clients have inserted (the [`SharedState`] counter), which the simulator's deterministic
//!   schedule fixes in turn.
//!
//! ## Key numbers, keys and values
//!
//! Operations name a *key number* `n` (0, 1, 2, …, dense, in insertion order) and its *key bytes*
//! `KeyFormat::encode(n)`. The load phase holds key numbers `0..record_count`; every insert of a
//! run takes the next fresh number from a counter shared by all clients ([`SharedState`]), exactly
//! as YCSB's `transactioninsertkeysequence` does. So "latest" follows the inserts, and inserts never
//! repeat a key.
//!
//! - [`KeyFormat::Integer`]: the 8-byte big-endian `u64`, either of `n` itself
//!   ([`KeyOrder::Ordered`], YCSB's `insertorder=ordered`) or of YCSB's `fnvhash64(n)`
//!   ([`KeyOrder::Hashed`], YCSB's default `insertorder=hashed`, which scatters consecutive
//!   inserts over the key space).
//! - [`KeyFormat::Padded`]: the same integer right-aligned in `bytes` zero bytes (key-size sweeps,
//!   8–256 bytes); the order of keys is the order of the integers.
//! - [`KeyFormat::Email`]: synthetic e-mail addresses of exactly `bytes` bytes (see
//!   [`email_key`] for the construction and its uniqueness argument).
//!
//! A value is a function of its key number and a *version* ([`value_for`]), so a reader can check
//! it ([`value_version`]): the loaded values have version [`LOAD_VERSION`] (0) and every write of a
//! stream has a version naming its phase, client and sequence number ([`version_of`]). The first
//! byte of every value has its top bit set, so no value (nor any prefix of one) is all zero bytes
//! (Dolphin's artifact reserves value 0 as NULL).
//!
//! ## Distributions ([`Distribution`])
//!
//! - `Uniform`: uniform over the keys present (key numbers below [`SharedState::visible`]).
//!   YCSB's uniform covers only the loaded keys; ours includes the run's inserts.
//! - `ScrambledZipfian { theta }`: YCSB's `ScrambledZipfianGenerator` as YCSB's `CoreWorkload`
//!   uses it. A rank is drawn from a Zipfian generator (Gray et al., SIGMOD 1994, as in YCSB's
//!   `ZipfianGenerator.java`) over YCSB's **10^10 + 1** items (`ITEM_COUNT`, with YCSB's
//!   precomputed ζ = 26.46902820178302 when θ = 0.99), and the key is `fnvhash64(rank) mod
//!   item_count` — YCSB does not draw ranks over the record count. `item_count` is YCSB's: the
//!   record count plus the expected new keys (`2 × operation_count × insert fraction`) **plus
//!   one** (`CoreWorkload` passes an inclusive maximum); a key not inserted yet is redrawn, as
//!   `CoreWorkload.nextKeynum` does. See [`ScrambledZipfianGenerator`].
//! - `Zipfian { theta }`: MICA's generator (`mehcached_zipf_next`, the same Gray et al. algorithm)
//!   over the same key space, unscrambled: rank r is key number r, so small key numbers are
//!   hottest (Dolphin's artifact, CHIME Fig. 18a, SMART Fig. 22a). Its head grows heavier as the
//!   key count falls (θ = 0.99: the 48 hottest keys draw 29.5% over 10^6 keys, 19.9% over 2^29),
//!   so at reduced scale [`WorkloadSpec::zipfian_items`] draws the ranks over the paper's key count
//!   and folds those past the loaded keys onto them (`zipf_items` in a run file).
//! - `Latest { theta }`: YCSB's `SkewedLatestGenerator`: a Zipfian rank over the keys present,
//!   counted back from the most recent insert (key `visible − 1 − rank`). Two YCSB quirks are
//!   not reproduced: YCSB draws the rank over `lastValue` = count − 1 items, so key 0 is never
//!   requested, and after the count grows it recomputes η with the item count of construction;
//!   here the rank ranges over all `visible` keys and ζ, η are those of the current count.
//! - `Sequential`: dense ordered key numbers 0, 1, 2, … shared by all clients of a run, wrapping
//!   at the number of keys present (YCSB's `SequentialGenerator`).
//!
//! θ must lie in `[0, 1)` for every Zipfian here: Gray's method divides by `1 − θ`. (The synthetic
//! Twitter traces need θ > 1 and use an exact inverse-CDF table instead: [`SyntheticTrace`].)
//!
//! Gray's method is exact for ranks 0 and 1 only; for rank r ≥ 2 it approximates the Zipf
//! probability `1 / ((r+1)^θ · ζ(n, θ))` (with θ = 0.99 over 10^6 items the third rank comes out
//! 19% too frequent, the tenth 3.6%). We reproduce YCSB's algorithm, not the ideal law:
//! [`ZipfianGenerator::rank_probability`] gives the algorithm's exact probabilities, and the tests
//! check the samples against those.
//!
//! ## Traces
//!
//! The trace format, one operation per line (see [`read_trace`]):
//!
//! ```text
//! # comment lines start with '#'; blank lines are ignored
//! get <key-hex>
//! set <key-hex> <value-bytes>
//! del <key-hex>
//! scan <key-hex> <count>
//! ```
//!
//! Keys are 1–256 bytes written as an even number of hex digits; `<value-bytes>` (0 to 2^20) and
//! `<count>` (1 to 2^20) are decimal. A `set` is an upsert; its value is [`value_for`] the key's
//! [`trace_key_number`], at the version the replayer chooses.
//!
//! One concern a file: [`math`] (deterministic floating point), [`rng`] (seeded streams),
//! [`generators`] (YCSB's), [`spec`] (workloads and mixes), [`keys`], [`values`], [`stream`]
//! (clients' operations and the loaded items), [`trace`].

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub mod generators;
pub mod keys;
pub mod math;
pub mod rng;
pub mod spec;
pub mod stream;
pub mod trace;
pub mod values;

pub use generators::*;
pub use keys::*;
pub(crate) use rng::*;
pub use spec::*;
pub use stream::*;
pub use trace::*;
pub use values::*;

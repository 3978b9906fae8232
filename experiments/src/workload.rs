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
//!   hottest (Dolphin's artifact, CHIME Fig. 18a, SMART Fig. 22a).
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

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------------------------
// Deterministic floating-point functions
// ---------------------------------------------------------------------------------------------

/// `ln`, `exp`, `x^y` and ζ(n, θ) from IEEE-754 `+ - × ÷` only, so that every platform computes
/// the same bits (std's `ln`/`exp`/`powf` call the platform's libm, whose last bits differ
/// between implementations).
pub mod math {
    /// ln 2 split so that `k · LN2_HI` is exact for |k| < 2^11 (fdlibm's constants).
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 6.93147180369123816490e-01
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // 1.90821492927058770002e-10

    /// `1/(2k+1)` for k = 1..=22 (the atanh series of `ln`), evaluated at compile time.
    const ODD_RECIPROCALS: [f64; 22] = {
        let mut table = [0.0; 22];
        let mut k = 0;
        while k < 22 {
            table[k] = 1.0 / (2 * k + 3) as f64;
            k += 1;
        }
        table
    };

    /// `1/k!` for k = 0..=24, each the correctly rounded quotient of the previous by k.
    const INVERSE_FACTORIALS: [f64; 25] = {
        let mut table = [1.0; 25];
        let mut k = 1;
        while k < 25 {
            table[k] = table[k - 1] / k as f64;
            k += 1;
        }
        table
    };

    /// The natural logarithm of a positive finite `x` (NaN for anything else, `-inf` at 0).
    pub fn ln(x: f64) -> f64 {
        if x.is_nan() || x < 0.0 {
            return f64::NAN;
        }
        if x == 0.0 {
            return f64::NEG_INFINITY;
        }
        if x.is_infinite() {
            return f64::INFINITY;
        }
        let mut bits = x.to_bits();
        let mut exponent = ((bits >> 52) & 0x7ff) as i64;
        if exponent == 0 {
            // Subnormal: scale into the normal range first.
            bits = (x * 18_014_398_509_481_984.0).to_bits(); // 2^54
            exponent = ((bits >> 52) & 0x7ff) as i64 - 54;
        }
        exponent -= 1023;
        // m in [1, 2), then folded into [sqrt(1/2), sqrt(2)).
        let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
        if m > std::f64::consts::SQRT_2 {
            m *= 0.5;
            exponent += 1;
        }
        // ln m = 2 atanh(f) = 2 (f + f^3/3 + f^5/5 + ...), f = (m-1)/(m+1), |f| <= 0.1716.
        let f = (m - 1.0) / (m + 1.0);
        let s = f * f;
        let mut series = 0.0;
        for c in ODD_RECIPROCALS.iter().rev() {
            series = c + s * series;
        }
        let ln_m = 2.0 * f + 2.0 * f * s * series;
        let e = exponent as f64;
        e * LN2_HI + (e * LN2_LO + ln_m)
    }

    /// `e^x`.
    pub fn exp(x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        if x > 709.782_712_893_384 {
            return f64::INFINITY;
        }
        if x < -745.133_219_101_941_2 {
            return 0.0;
        }
        // x = k ln 2 + r, |r| <= ln2 / 2.
        let t = x * std::f64::consts::LOG2_E;
        let k = if t >= 0.0 { (t + 0.5) as i64 } else { (t - 0.5) as i64 };
        let kf = k as f64;
        let r = (x - kf * LN2_HI) - kf * LN2_LO;
        // Taylor series of e^r to degree 20 (remainder below 1e-25).
        let mut p = 0.0;
        for c in INVERSE_FACTORIALS[..=20].iter().rev() {
            p = c + r * p;
        }
        scale_by_power_of_two(p, k)
    }

    /// `e^x − 1`, accurate near 0.
    pub fn exp_m1(x: f64) -> f64 {
        if x.abs() < 0.5 {
            // x (1 + x/2! + ... + x^23/24!)  (remainder below 1e-32)
            let mut p = 0.0;
            for c in INVERSE_FACTORIALS[1..=24].iter().rev() {
                p = c + x * p;
            }
            x * p
        } else {
            exp(x) - 1.0
        }
    }

    /// `x · 2^k`, exact unless the result is subnormal.
    fn scale_by_power_of_two(x: f64, k: i64) -> f64 {
        let pow2 = |e: i64| f64::from_bits(((e + 1023) as u64) << 52);
        if (-1022..=1023).contains(&k) {
            x * pow2(k)
        } else if k > 1023 {
            x * pow2(1023) * pow2((k - 1023).min(1023))
        } else {
            x * pow2(-1022) * pow2((k + 1022).max(-1022))
        }
    }

    /// `x^y` for `x >= 0` (as `exp(y ln x)`; `x^0 = 1`, `0^y` is 0 for y > 0 and +inf for y < 0).
    pub fn pow(x: f64, y: f64) -> f64 {
        if y == 0.0 || x == 1.0 {
            return 1.0;
        }
        if x == 0.0 {
            return if y > 0.0 { 0.0 } else { f64::INFINITY };
        }
        exp(y * ln(x))
    }

    /// ζ(n, θ) = Σ_{i=1..n} i^−θ, for any θ >= 0.
    ///
    /// Up to 64 terms it is the plain sum; beyond, the first 31 terms plus the Euler–Maclaurin
    /// formula from 32 to n with Bernoulli terms up to B8 (relative error about 1e-16, checked
    /// against exact sums in the tests). YCSB's and MICA's generators add all n terms one by one,
    /// which takes minutes at 10^10 items and accumulates rounding error; the values agree (for
    /// n = 10^10, θ = 0.99, YCSB's constant 26.46902820178302 and this one differ by 1.2e-12
    /// relative).
    pub fn zeta(n: u64, theta: f64) -> f64 {
        const HEAD: u64 = 32;
        if n <= 2 * HEAD {
            let mut sum = 0.0;
            for i in 1..=n {
                sum += pow(i as f64, -theta);
            }
            return sum;
        }
        let mut sum = 0.0;
        for i in 1..HEAD {
            sum += pow(i as f64, -theta);
        }
        let m = HEAD as f64;
        let nf = n as f64;
        // ∫_m^n x^−θ dx, written with exp_m1 so that θ near 1 does not cancel.
        let one_minus = 1.0 - theta;
        let integral =
            if one_minus == 0.0 { ln(nf / m) } else { pow(m, one_minus) * exp_m1(one_minus * ln(nf / m)) / one_minus };
        let f_m = pow(m, -theta);
        let f_n = pow(nf, -theta);
        sum += integral + 0.5 * (f_m + f_n);
        // Σ B_2k/(2k)! (f^(2k−1)(n) − f^(2k−1)(m)), f^(j)(x) = (−1)^j θ(θ+1)…(θ+j−1) x^(−θ−j).
        const COEFFICIENTS: [f64; 4] = [1.0 / 12.0, -1.0 / 720.0, 1.0 / 30_240.0, -1.0 / 1_209_600.0];
        let mut rising = theta; // θ(θ+1)…(θ+j−1) for j = 1
        let mut j = 1;
        for c in COEFFICIENTS {
            let derivative = |x: f64, fx: f64| {
                let mut x_to_j = 1.0;
                for _ in 0..j {
                    x_to_j *= x;
                }
                -rising * fx / x_to_j
            };
            sum += c * (derivative(nf, f_n) - derivative(m, f_m));
            rising *= (theta + j as f64) * (theta + (j + 1) as f64);
            j += 2;
        }
        sum
    }
}

// ---------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------

/// The ChaCha8 generator for `(seed, purpose, phase)`, on stream `stream`.
fn chacha(seed: u64, purpose: u64, phase: u64, stream: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[0..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&purpose.to_le_bytes());
    key[16..24].copy_from_slice(&phase.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    rng.set_stream(stream);
    rng
}

const PURPOSE_STREAM: u64 = 1;
const PURPOSE_FILL: u64 = 2;
const PURPOSE_TRACE: u64 = 3;

/// A uniform `f64` in `[0, 1)` with 53 random bits.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An integer in `[0, n)`, `n > 0`.
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// SplitMix64's finaliser: a bijection of `u64`.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

// ---------------------------------------------------------------------------------------------
// YCSB's generators
// ---------------------------------------------------------------------------------------------

/// YCSB's `ScrambledZipfianGenerator.ITEM_COUNT`: the ranks of a scrambled Zipfian are drawn over
/// this many items (plus one: YCSB builds `new ZipfianGenerator(0, ITEM_COUNT, …)`, inclusive).
pub const YCSB_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB's `ScrambledZipfianGenerator.ZETAN`, its precomputed ζ(10^10, 0.99).
pub const YCSB_ZETAN: f64 = 26.469_028_201_783_02;
/// YCSB's `ZipfianGenerator.ZIPFIAN_CONSTANT`.
pub const YCSB_ZIPFIAN_CONSTANT: f64 = 0.99;
/// FNV-1 64-bit offset basis (YCSB `Utils.FNV_OFFSET_BASIS_64`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
/// FNV 64-bit prime (YCSB `Utils.FNV_PRIME_64`).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64(long)`: FNV-1a over the 8 bytes of the value, low byte first, then
/// `Math.abs` of the signed result.
///
/// The one input class where Java differs: when the hash is exactly `Long.MIN_VALUE`, Java's
/// `Math.abs` returns it unchanged (negative); here it becomes 2^63. YCSB then takes `% itemcount`
/// of a negative number, a bug this function does not reproduce.
pub fn fnvhash64(value: u64) -> u64 {
    let mut val = value as i64;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = (val & 0xff) as u64;
        val >>= 8; // Java's `>>` on a long: arithmetic
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    (hash as i64).unsigned_abs()
}

/// Gray et al.'s Zipfian generator ("Quickly Generating Billion-Record Synthetic Databases",
/// SIGMOD 1994) as YCSB's `ZipfianGenerator` and MICA's `mehcached_zipf_next` implement it: rank
/// 0 is the most popular of `items`.
#[derive(Clone, Debug, PartialEq)]
pub struct ZipfianGenerator {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// `1 + 0.5^θ`: below `threshold_two / ζ(n)` a draw is rank 1.
    threshold_two: f64,
}

impl ZipfianGenerator {
    /// A generator over `items` ranks; ζ(items, θ) is computed here ([`math::zeta`]).
    ///
    /// Panics unless `items >= 1` and `0 <= theta < 1` (check specs with
    /// [`WorkloadSpec::validate`]).
    pub fn new(items: u64, theta: f64) -> ZipfianGenerator {
        Self::with_zetan(items, theta, math::zeta(items, theta))
    }

    /// A generator with a precomputed ζ(items, θ), as YCSB's 4-argument constructor.
    pub fn with_zetan(items: u64, theta: f64, zetan: f64) -> ZipfianGenerator {
        assert!(items >= 1, "a Zipfian generator needs at least one item");
        assert!((0.0..1.0).contains(&theta), "Zipfian theta must be in [0, 1), got {theta}");
        let zeta2 = math::zeta(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - math::pow(2.0 / items as f64, 1.0 - theta)) / (1.0 - zeta2 / zetan);
        ZipfianGenerator { items, theta, alpha, zetan, eta, threshold_two: 1.0 + math::pow(0.5, theta) }
    }

    pub fn items(&self) -> u64 {
        self.items
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// ζ(items, θ) as used by the generator.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The rank for a uniform draw `u` in `[0, 1)` (YCSB's `nextLong`, with `u` its
    /// `nextDouble()`). A result that rounding would put at `items` is clamped to `items − 1`.
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.threshold_two {
            return 1;
        }
        let rank = (self.items as f64 * math::pow(self.eta * u - self.eta + 1.0, self.alpha)) as u64;
        rank.min(self.items - 1)
    }

    /// The exact probability that [`rank`](Self::rank) returns `rank` for `u` uniform in `[0, 1)`:
    /// what YCSB's generator actually produces (equal to the Zipf law for ranks 0 and 1 only).
    pub fn rank_probability(&self, rank: u64) -> f64 {
        if rank >= self.items {
            return 0.0;
        }
        let p0 = (1.0 / self.zetan).min(1.0);
        let p01 = (self.threshold_two / self.zetan).min(1.0);
        match rank {
            0 => p0,
            1 => p01 - p0,
            _ => {
                // rank = floor(items · (η u − η + 1)^α) ≥ k  ⇔  u ≥ 1 − (1 − (k/items)^(1−θ)) / η
                let bound = |k: u64| {
                    if k >= self.items {
                        1.0
                    } else {
                        1.0 - (1.0 - math::pow(k as f64 / self.items as f64, 1.0 - self.theta)) / self.eta
                    }
                };
                let low = bound(rank).max(p01);
                let high = bound(rank + 1).clamp(p01, 1.0);
                (high - low).max(0.0)
            }
        }
    }

    /// The ideal Zipf probability of `rank`: `1 / ((rank+1)^θ · ζ(items, θ))`.
    pub fn ideal_probability(&self, rank: u64) -> f64 {
        math::pow((rank + 1) as f64, -self.theta) / self.zetan
    }
}

/// YCSB's `ScrambledZipfianGenerator`: ranks from a [`ZipfianGenerator`] over
/// [`YCSB_ITEM_COUNT`] + 1 items (with [`YCSB_ZETAN`] when θ is exactly 0.99, as YCSB), mapped
/// to `fnvhash64(rank) mod item_count`.
///
/// Because the ranks range over 10^10 items, many ranks share each key and the keys are less
/// skewed than a Zipfian over `item_count` would be (θ = 0.99, 10^6 keys: the hottest key gets
/// about 3.8% of requests, against 6.5% for a Zipfian over 10^6 ranks). That is YCSB's behaviour,
/// which the papers' YCSB runs inherit.
#[derive(Clone, Debug, PartialEq)]
pub struct ScrambledZipfianGenerator {
    ranks: ZipfianGenerator,
    item_count: u64,
}

impl ScrambledZipfianGenerator {
    pub fn new(item_count: u64, theta: f64) -> ScrambledZipfianGenerator {
        assert!(item_count >= 1, "a scrambled Zipfian needs at least one item");
        let items = YCSB_ITEM_COUNT + 1;
        #[allow(clippy::float_cmp)] // YCSB compares with `==` too
        let ranks = if theta == YCSB_ZIPFIAN_CONSTANT {
            ZipfianGenerator::with_zetan(items, theta, YCSB_ZETAN)
        } else {
            ZipfianGenerator::new(items, theta)
        };
        ScrambledZipfianGenerator { ranks, item_count }
    }

    /// The underlying rank generator.
    pub fn ranks(&self) -> &ZipfianGenerator {
        &self.ranks
    }

    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// The key a rank maps to: `fnvhash64(rank) % item_count`.
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        fnvhash64(rank) % self.item_count
    }

    /// The key for a uniform draw `u` in `[0, 1)`.
    pub fn key(&self, u: f64) -> u64 {
        self.key_of_rank(self.ranks.rank(u))
    }
}

// ---------------------------------------------------------------------------------------------
// Specification types
// ---------------------------------------------------------------------------------------------

/// A workload or trace configuration error: one line for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

fn spec_error<T>(message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(message.into()))
}

/// How keys are chosen for searches, updates, scans, read-modify-writes and deletes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Distribution {
    /// Uniform over the keys present.
    Uniform,
    /// YCSB's scrambled Zipfian (its `requestdistribution=zipfian`).
    ScrambledZipfian { theta: f64 },
    /// MICA-style Zipfian: rank r is key number r.
    Zipfian { theta: f64 },
    /// YCSB's skewed-latest: the most recent inserts are the most popular.
    Latest { theta: f64 },
    /// Key numbers 0, 1, 2, … in order, shared by all clients, wrapping.
    Sequential,
}

impl Distribution {
    fn theta(self) -> Option<f64> {
        match self {
            Distribution::ScrambledZipfian { theta }
            | Distribution::Zipfian { theta }
            | Distribution::Latest { theta } => Some(theta),
            Distribution::Uniform | Distribution::Sequential => None,
        }
    }
}

/// Whether integer keys follow the key numbers or YCSB's FNV hash of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyOrder {
    /// `fnvhash64(n)`: YCSB's default `insertorder=hashed`.
    Hashed,
    /// `n`: YCSB's `insertorder=ordered` (dense ordered keys; YCSB E in CHIME and SMART).
    Ordered,
}

/// How a key number becomes key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum KeyFormat {
    /// 8-byte big-endian integers.
    Integer { order: KeyOrder },
    /// The integer key right-aligned in `bytes` bytes (8..=256), zero-filled on the left.
    Padded { bytes: usize, order: KeyOrder },
    /// Synthetic e-mail addresses of exactly `bytes` bytes (8..=256), unique per key number.
    /// `domain_first` writes them as SMART pre-processed its e-mail keys: domain components
    /// reversed, then `@`, then the user (`com.gmail@anna.k3x`).
    Email { bytes: usize, domain_first: bool },
}

/// Smallest and largest key size of a format.
pub const MIN_KEY_BYTES: usize = 8;
pub const MAX_KEY_BYTES: usize = 256;

impl KeyFormat {
    /// The length of every key.
    pub fn key_bytes(self) -> usize {
        match self {
            KeyFormat::Integer { .. } => 8,
            KeyFormat::Padded { bytes, .. } | KeyFormat::Email { bytes, .. } => bytes,
        }
    }

    /// How many key numbers (from 0) the format can encode distinctly.
    pub fn capacity(self) -> u64 {
        match self {
            KeyFormat::Integer { .. } | KeyFormat::Padded { .. } => u64::MAX,
            KeyFormat::Email { bytes, .. } => email_capacity(bytes),
        }
    }

    fn validate(self) -> Result<(), SpecError> {
        let bytes = self.key_bytes();
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&bytes) {
            return spec_error(format!("key size must be {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, got {bytes}"));
        }
        Ok(())
    }

    /// The key bytes of key number `n`. Panics if `n >= capacity()` (validated specs never ask).
    pub fn encode(self, n: u64) -> Vec<u8> {
        match self {
            KeyFormat::Integer { order } => integer_key(n, order).to_be_bytes().to_vec(),
            KeyFormat::Padded { bytes, order } => {
                let mut key = vec![0u8; bytes];
                key[bytes - 8..].copy_from_slice(&integer_key(n, order).to_be_bytes());
                key
            }
            KeyFormat::Email { bytes, domain_first } => email_key(n, bytes, domain_first),
        }
    }
}

/// The integer behind an integer key: `n` or YCSB's `fnvhash64(n)` (YCSB's `buildKeyName`).
///
/// Hashed keys are below 2^63 (YCSB takes `Math.abs`). FNV-1a over 8 bytes is not proven
/// injective, so two key numbers could in principle share a hashed key; the tests check that the
/// first 10^6 key numbers do not.
pub fn integer_key(n: u64, order: KeyOrder) -> u64 {
    match order {
        KeyOrder::Hashed => fnvhash64(n),
        KeyOrder::Ordered => n,
    }
}

/// Syllables for the user part of e-mail keys.
const SYLLABLES: [&str; 48] = [
    "an", "bel", "ca", "dan", "el", "fa", "gio", "han", "ia", "jo", "ka", "li", "ma", "na", "ol", "pe", "qi", "ra",
    "sa", "ta", "ul", "vi", "wen", "xu", "ya", "zo", "mar", "tin", "son", "lee", "kim", "chen", "wang", "ber", "ste",
    "rob", "ert", "mi", "chel", "nor", "ri", "ko", "yu", "ami", "ron", "lu", "cas", "dre",
];

/// Domains with relative weights (a plausible mix, not measured).
const DOMAINS: [(&str, u64); 16] = [
    ("gmail.com", 30),
    ("yahoo.com", 10),
    ("hotmail.com", 9),
    ("outlook.com", 6),
    ("qq.com", 6),
    ("163.com", 5),
    ("aol.com", 4),
    ("icloud.com", 4),
    ("mail.ru", 4),
    ("gmx.de", 3),
    ("yandex.ru", 3),
    ("live.com", 3),
    ("web.de", 3),
    ("naver.com", 3),
    ("comcast.net", 3),
    ("protonmail.com", 4),
];

/// `n` in base 36, lowercase, no leading zeros ("0" for 0).
fn base36(mut n: u64) -> Vec<u8> {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    out
}

fn email_capacity(bytes: usize) -> u64 {
    // The base-36 core plus '@' must fit: core length <= bytes - 1.
    let digits = bytes.saturating_sub(1);
    let mut capacity: u64 = 1;
    for _ in 0..digits {
        capacity = match capacity.checked_mul(36) {
            Some(c) => c,
            None => return u64::MAX,
        };
    }
    capacity
}

/// The synthetic e-mail key of key number `n`, exactly `bytes` bytes.
///
/// Construction: a *core* — `n` in base 36, canonical (no leading zeros) — is always written in
/// full, immediately followed by `@`. Before the core comes an optional user name of letters
/// (syllables chosen by a hash of `n`) and a `.`; after `@` comes a domain (picked by the same
/// hash from a weighted list), truncated when space is short or followed by a `.` (a
/// fully-qualified trailing dot) when exactly one byte is left over. So the string is
/// `[letters "."] core "@" domain-ish`, padded to the length by lengthening the user name.
///
/// Uniqueness: the first `@` in the string is the one after the core (user names are letters and
/// the core is base-36 digits), and the core is everything between the last `.` before that `@`
/// (or the start) and the `@`. Reading the core back in base 36 gives `n`, so different key
/// numbers give different strings. With `domain_first`, the string is the reversed domain, `@`,
/// then `[letters "."] core`; the core is what follows the last `.` (or the `@`), and the same
/// argument holds. The only limit is that the core and `@` must fit: `n < 36^(bytes−1)`
/// ([`KeyFormat::capacity`]; 7.8·10^10 keys at 8 bytes).
pub fn email_key(n: u64, bytes: usize, domain_first: bool) -> Vec<u8> {
    let core = base36(n);
    assert!(
        core.len() < bytes,
        "key number {n} does not fit a {bytes}-byte e-mail key (capacity {})",
        email_capacity(bytes)
    );
    let mut h = mix64(n ^ 0x5eed_e3a1_1000_0000);
    let mut next = || {
        h = h.wrapping_add(GOLDEN_GAMMA);
        mix64(h)
    };
    let total_weight: u64 = DOMAINS.iter().map(|d| d.1).sum();
    let mut pick = next() % total_weight;
    let mut domain = DOMAINS[0].0;
    for (d, w) in DOMAINS {
        if pick < w {
            domain = d;
            break;
        }
        pick -= w;
    }
    let available = bytes - core.len() - 1;
    let (user_len, domain_part): (usize, Vec<u8>) = if available >= domain.len() + 2 {
        (available - domain.len() - 1, domain.as_bytes().to_vec())
    } else if available == domain.len() + 1 {
        (0, format!("{domain}.").into_bytes())
    } else {
        (0, domain.as_bytes()[..available].to_vec())
    };
    let mut user = Vec::with_capacity(user_len);
    while user.len() < user_len {
        user.extend_from_slice(SYLLABLES[(next() % SYLLABLES.len() as u64) as usize].as_bytes());
    }
    user.truncate(user_len);
    let mut local = Vec::with_capacity(user_len + 1 + core.len());
    if user_len > 0 {
        local.extend_from_slice(&user);
        local.push(b'.');
    }
    local.extend_from_slice(&core);
    let mut key = Vec::with_capacity(bytes);
    if domain_first {
        let text = String::from_utf8(domain_part).expect("ASCII domain");
        let reversed: Vec<&str> = text.split('.').rev().collect();
        key.extend_from_slice(reversed.join(".").as_bytes());
        key.push(b'@');
        key.extend_from_slice(&local);
    } else {
        key.extend_from_slice(&local);
        key.push(b'@');
        key.extend_from_slice(&domain_part);
    }
    debug_assert_eq!(key.len(), bytes);
    key
}

/// The weights of each operation type. Only ratios matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mix {
    /// Search (YCSB "read").
    pub read: f64,
    pub update: f64,
    /// Insert of a fresh key.
    pub insert: f64,
    pub scan: f64,
    /// A search followed by an update of the same key (YCSB F).
    pub read_modify_write: f64,
    pub delete: f64,
}

/// The operation types of a [`Mix`], in the order the chooser tries them (YCSB's order, then
/// delete).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Search,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    Delete,
}

impl OpKind {
    pub const ALL: [OpKind; 6] =
        [OpKind::Search, OpKind::Update, OpKind::Insert, OpKind::Scan, OpKind::ReadModifyWrite, OpKind::Delete];

    /// The name used in metrics: search, update, insert, scan, read_modify_write, delete.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Search => "search",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "read_modify_write",
            OpKind::Delete => "delete",
        }
    }
}

impl Mix {
    /// Inserts of fresh keys and nothing else (a LOAD).
    pub fn is_insert_only(&self) -> bool {
        self.insert > 0.0 && OpKind::ALL.iter().all(|&k| k == OpKind::Insert || self.weight(k) == 0.0)
    }

    pub fn weight(&self, kind: OpKind) -> f64 {
        match kind {
            OpKind::Search => self.read,
            OpKind::Update => self.update,
            OpKind::Insert => self.insert,
            OpKind::Scan => self.scan,
            OpKind::ReadModifyWrite => self.read_modify_write,
            OpKind::Delete => self.delete,
        }
    }

    pub fn total(&self) -> f64 {
        OpKind::ALL.iter().map(|&k| self.weight(k)).sum()
    }

    /// The share of `kind` in the mix.
    pub fn fraction(&self, kind: OpKind) -> f64 {
        self.weight(kind) / self.total()
    }

    fn validate(&self) -> Result<(), SpecError> {
        for kind in OpKind::ALL {
            let w = self.weight(kind);
            if !w.is_finite() || w < 0.0 {
                return spec_error(format!("mix weight of {} must be a finite number >= 0, got {w}", kind.name()));
            }
        }
        if self.total() <= 0.0 {
            return spec_error("the operation mix is empty: give some operation a positive weight");
        }
        Ok(())
    }

    /// The kind for a uniform `u` in `[0, 1)` (YCSB's `DiscreteGenerator`: subtract normalised
    /// weights in order).
    pub fn choose(&self, u: f64) -> OpKind {
        let total = self.total();
        let mut rest = u;
        let mut last = OpKind::Search;
        for kind in OpKind::ALL {
            let w = self.weight(kind);
            if w <= 0.0 {
                continue;
            }
            let share = w / total;
            if rest < share {
                return kind;
            }
            rest -= share;
            last = kind;
        }
        last
    }
}

/// Scan lengths: uniform in `min..=max` (YCSB's `scanlengthdistribution=uniform`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanLength {
    pub min: usize,
    pub max: usize,
}

impl Default for ScanLength {
    /// YCSB E's: 1 to 100.
    fn default() -> ScanLength {
        ScanLength { min: 1, max: 100 }
    }
}

/// One workload: what a run's streams generate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// For reports: "ycsb-a", "load", or the user's name.
    pub name: String,
    pub mix: Mix,
    pub distribution: Distribution,
    pub key_format: KeyFormat,
    /// Keys present before the run (key numbers `0..record_count`, see [`load_items`]).
    pub record_count: u64,
    /// The run's total operations over all clients (YCSB's `operationcount`). Used only to size
    /// the Zipfian key spaces for mixes with inserts as YCSB does; 0 when unknown (then reads go
    /// only to the loaded keys under the Zipfians). [`Phase::new`] sets it.
    pub operation_count: u64,
    /// Length of every value written (1..=2^20).
    pub value_bytes: usize,
    pub scan_length: ScanLength,
}

/// Largest value size a spec accepts.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

impl WorkloadSpec {
    /// A spec with 8-byte hashed integer keys, 8-byte values and YCSB's scan lengths.
    pub fn custom(name: &str, mix: Mix, distribution: Distribution, record_count: u64) -> WorkloadSpec {
        WorkloadSpec {
            name: name.to_string(),
            mix,
            distribution,
            key_format: KeyFormat::Integer { order: KeyOrder::Hashed },
            record_count,
            operation_count: 0,
            value_bytes: 8,
            scan_length: ScanLength::default(),
        }
    }

    /// YCSB's core workloads A–F (workloads/workload[a-f] in YCSB), over `record_count` loaded
    /// keys, θ = 0.99, 8-byte keys and values:
    ///
    /// | | mix | distribution | keys |
    /// |---|---|---|---|
    /// | A | 50% read, 50% update | scrambled Zipfian | hashed |
    /// | B | 95% read, 5% update | scrambled Zipfian | hashed |
    /// | C | 100% read | scrambled Zipfian | hashed |
    /// | D | 95% read, 5% insert | latest | hashed |
    /// | E | 95% scan, 5% insert, length uniform 1..=100 | scrambled Zipfian | **ordered** |
    /// | F | 50% read, 50% read-modify-write | scrambled Zipfian | hashed |
    ///
    /// E uses ordered keys as CHIME's and SMART's artifacts do (YCSB's own workloade keeps the
    /// default hashed order, which makes a scan's start key random in the key space).
    pub fn ycsb(letter: char, record_count: u64) -> Result<WorkloadSpec, SpecError> {
        let zipf = Distribution::ScrambledZipfian { theta: YCSB_ZIPFIAN_CONSTANT };
        let (mix, distribution, order) = match letter.to_ascii_lowercase() {
            'a' => (Mix { read: 0.5, update: 0.5, ..Mix::default() }, zipf, KeyOrder::Hashed),
            'b' => (Mix { read: 0.95, update: 0.05, ..Mix::default() }, zipf, KeyOrder::Hashed),
            'c' => (Mix { read: 1.0, ..Mix::default() }, zipf, KeyOrder::Hashed),
            'd' => (
                Mix { read: 0.95, insert: 0.05, ..Mix::default() },
                Distribution::Latest { theta: YCSB_ZIPFIAN_CONSTANT },
                KeyOrder::Hashed,
            ),
            'e' => (Mix { scan: 0.95, insert: 0.05, ..Mix::default() }, zipf, KeyOrder::Ordered),
            'f' => (Mix { read: 0.5, read_modify_write: 0.5, ..Mix::default() }, zipf, KeyOrder::Hashed),
            other => {
                return spec_error(format!(
                    "unknown workload `{other}` (expected a, b, c, d, e, f, load, db-put, db-get or db-scan)"
                ));
            }
        };
        let mut spec =
            WorkloadSpec::custom(&format!("ycsb-{}", letter.to_ascii_lowercase()), mix, distribution, record_count);
        spec.key_format = KeyFormat::Integer { order };
        Ok(spec)
    }

    /// YCSB LOAD: 100% inserts of fresh keys. Run `record_count` operations of it against
    /// `SharedState::new(0)` to load by inserts: the keys are exactly those of
    /// [`load_items`]. Run it against `SharedState::for_spec` to insert beyond a preloaded
    /// `record_count` (CHIME's and SMART's LOAD: 5 M preloaded, then inserts).
    pub fn ycsb_load(record_count: u64) -> WorkloadSpec {
        WorkloadSpec::custom("load", Mix { insert: 1.0, ..Mix::default() }, Distribution::Uniform, record_count)
    }

    /// `a`…`f`, `ycsb-a`…`ycsb-f`, `load`, or db_bench's `db-put`, `db-get`, `db-scan`
    /// (case-insensitive); `dense-` before any of them
    /// gives Dolphin's artifact's key space: dense keys in order (`insertorder=ordered`) and an
    /// unscrambled Zipfian (rank r is key r, θ = 0.99), so hot keys share leaves.
    pub fn from_name(name: &str, record_count: u64) -> Result<WorkloadSpec, SpecError> {
        let lower = name.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("dense-") {
            let mut spec = WorkloadSpec::from_name(rest, record_count).map_err(|_| {
                SpecError(format!("unknown workload `{name}` (expected dense- before a, b, c, d, e, f or load)"))
            })?;
            spec.name = format!("dense-{}", spec.name.trim_start_matches("ycsb-"));
            spec.key_format = match spec.key_format {
                KeyFormat::Integer { .. } => KeyFormat::Integer { order: KeyOrder::Ordered },
                KeyFormat::Padded { bytes, .. } => KeyFormat::Padded { bytes, order: KeyOrder::Ordered },
                email => email,
            };
            if let Distribution::ScrambledZipfian { theta } = spec.distribution {
                spec.distribution = Distribution::Zipfian { theta };
            }
            return Ok(spec);
        }
        // db_bench's single-operation benchmarks as HStore ran them (digest §5.3): uniform
        // keys over the loaded ones; PUTs overwrite, SCANs cover 100 keys from an ordered key
        // space (a uniform start).
        let db = |name: &str, mix: Mix, order: KeyOrder| {
            let mut spec = WorkloadSpec::custom(name, mix, Distribution::Uniform, record_count);
            spec.key_format = KeyFormat::Integer { order };
            spec.scan_length = ScanLength { min: 100, max: 100 };
            Ok(spec)
        };
        // Mixes that delete, so that histories of long runs exercise every operation (YCSB has
        // none): `crud` is a uniform quarter each of search, insert, update and delete;
        // `delete-heavy` is 40% delete, 30% insert, 20% search, 10% update over scrambled
        // Zipfian keys, so hot keys are deleted and re-created while others read them.
        match lower.as_str() {
            "crud" => {
                let mix = Mix { read: 0.25, insert: 0.25, update: 0.25, delete: 0.25, ..Mix::default() };
                let mut spec = WorkloadSpec::custom("crud", mix, Distribution::Uniform, record_count);
                spec.key_format = KeyFormat::Integer { order: KeyOrder::Hashed };
                return Ok(spec);
            }
            "delete-heavy" => {
                let mix = Mix { read: 0.2, insert: 0.3, update: 0.1, delete: 0.4, ..Mix::default() };
                let zipf = Distribution::ScrambledZipfian { theta: YCSB_ZIPFIAN_CONSTANT };
                let mut spec = WorkloadSpec::custom("delete-heavy", mix, zipf, record_count);
                spec.key_format = KeyFormat::Integer { order: KeyOrder::Hashed };
                return Ok(spec);
            }
            _ => {}
        }
        match lower.as_str() {
            "db-put" => return db("db-put", Mix { update: 1.0, ..Mix::default() }, KeyOrder::Hashed),
            "db-get" => return db("db-get", Mix { read: 1.0, ..Mix::default() }, KeyOrder::Hashed),
            "db-scan" => return db("db-scan", Mix { scan: 1.0, ..Mix::default() }, KeyOrder::Ordered),
            _ => {}
        }
        let short = lower.strip_prefix("ycsb-").or_else(|| lower.strip_prefix("ycsb")).unwrap_or(&lower);
        if short == "load" {
            return Ok(WorkloadSpec::ycsb_load(record_count));
        }
        let mut chars = short.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => WorkloadSpec::ycsb(c, record_count),
            _ => spec_error(format!(
                "unknown workload `{name}` (expected a, b, c, d, e, f, load, crud, delete-heavy, db-put, db-get or \
                 db-scan)"
            )),
        }
    }

    /// Checks everything a stream relies on; the message is one line for the user.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.mix.validate()?;
        self.key_format.validate()?;
        if let Some(theta) = self.distribution.theta() {
            if !(0.0..1.0).contains(&theta) {
                return spec_error(format!("Zipfian theta must be in [0, 1), got {theta}"));
            }
        }
        if !(1..=MAX_VALUE_BYTES).contains(&self.value_bytes) {
            return spec_error(format!("value size must be 1 to {MAX_VALUE_BYTES} bytes, got {}", self.value_bytes));
        }
        if self.mix.scan > 0.0 && (self.scan_length.min == 0 || self.scan_length.min > self.scan_length.max) {
            return spec_error(format!(
                "scan length must satisfy 1 <= min <= max, got {}..={}",
                self.scan_length.min, self.scan_length.max
            ));
        }
        let capacity = self.key_format.capacity();
        let needed = self.record_count.saturating_add(self.operation_count);
        if needed > capacity {
            return spec_error(format!(
                "{} keys do not fit {}-byte e-mail keys (at most {capacity})",
                needed,
                self.key_format.key_bytes()
            ));
        }
        Ok(())
    }

    /// The number of key numbers the Zipfian distributions draw over: the record count plus the
    /// inserts YCSB expects (`(int) (operation_count × insert fraction × 2.0)`).
    pub fn zipfian_key_space(&self) -> u64 {
        let expected_new = (self.operation_count as f64 * self.mix.fraction(OpKind::Insert) * 2.0) as u64;
        self.record_count.saturating_add(expected_new).max(1)
    }

    /// Client `client`'s stream of the first phase. Panics if the spec does not
    /// [`validate`](Self::validate).
    pub fn stream(&self, seed: u64, client: u32, shared: &SharedState) -> Stream {
        self.stream_in_phase(seed, 0, client, shared)
    }

    /// Client `client`'s stream in phase `phase` of a phased run (phases draw independent
    /// randomness and versions).
    pub fn stream_in_phase(&self, seed: u64, phase: u32, client: u32, shared: &SharedState) -> Stream {
        Stream::new(self, seed, phase, client, shared, false)
    }

    /// A stream of inserts of fresh keys only, forever (run until the first `Full` error: the
    /// maximum load factor). Clients share the key counter, so all inserted keys are distinct.
    pub fn fill_stream(&self, seed: u64, client: u32, shared: &SharedState) -> Stream {
        Stream::new(self, seed, 0, client, shared, true)
    }
}

/// One phase of a phased run: a spec and its operation count (over all clients).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub spec: WorkloadSpec,
    pub operations: u64,
}

impl Phase {
    /// Sets `spec.operation_count = operations` (for YCSB's key-space sizing).
    pub fn new(mut spec: WorkloadSpec, operations: u64) -> Phase {
        spec.operation_count = operations;
        Phase { spec, operations }
    }

    /// Client `client`'s stream for this phase, the `index`-th of the run. Use one
    /// [`SharedState`] for all phases so inserts of one phase are present in the next.
    pub fn stream(&self, index: u32, seed: u64, client: u32, shared: &SharedState) -> Stream {
        self.spec.stream_in_phase(seed, index, client, shared)
    }
}

/// Insert-only then mixed: a LOAD phase of `record_count` inserts (start from
/// `SharedState::new(0)`), then `operations` of `run` over those keys.
pub fn load_then_run(run: &WorkloadSpec, operations: u64) -> Vec<Phase> {
    let mut load = WorkloadSpec::ycsb_load(run.record_count);
    load.key_format = run.key_format;
    load.value_bytes = run.value_bytes;
    vec![Phase::new(load, run.record_count), Phase::new(run.clone(), operations)]
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// The version of loaded values.
pub const LOAD_VERSION: u64 = 0;

/// The version of the `seq`-th operation of client `client` in phase `phase`: bits 56–62 hold
/// `phase + 1`, bits 36–55 the client, bits 0–35 the sequence number (so versions stay below
/// 2^63 and never equal [`LOAD_VERSION`]). Panics beyond 126 phases, 2^20 clients or 2^36
/// operations per client.
pub fn version_of(phase: u32, client: u32, seq: u64) -> u64 {
    assert!(phase < 126, "at most 126 phases");
    assert!(client < 1 << 20, "at most 2^20 clients");
    assert!(seq < 1 << 36, "at most 2^36 operations per client");
    ((phase as u64 + 1) << 56) | ((client as u64) << 36) | seq
}

fn key_mask(key_number: u64) -> u64 {
    mix64(key_number ^ 0x7a1e_0000_0000_0000) | 1 << 63
}

/// The value of `key_number` at `version` (< 2^63), `len` bytes: the big-endian word
/// `version XOR mask(key_number)` (top bit always set), then SplitMix64 output seeded by that word
/// and the key number (so beyond 8 bytes a value checks against its own key only).
pub fn value_for(key_number: u64, version: u64, len: usize) -> Vec<u8> {
    assert!(version < 1 << 63, "versions are below 2^63");
    let word = version ^ key_mask(key_number);
    let mut out = Vec::with_capacity(len.max(8));
    out.extend_from_slice(&word.to_be_bytes());
    let mut state = word ^ mix64(key_number ^ 0x0fa1_0000_0000_0000);
    while out.len() < len {
        state = state.wrapping_add(GOLDEN_GAMMA);
        out.extend_from_slice(&mix64(state).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The version a value of `key_number` was written at, if `value` is exactly
/// [`value_for`]`(key_number, version, value.len())` for some version; `None` for values shorter
/// than 8 bytes (they carry no check) or values no generator wrote.
pub fn value_version(key_number: u64, value: &[u8]) -> Option<u64> {
    let word = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let version = word ^ key_mask(key_number);
    if version >= 1 << 63 || value_for(key_number, version, value.len()) != value {
        return None;
    }
    Some(version)
}

// ---------------------------------------------------------------------------------------------
// Operations and streams
// ---------------------------------------------------------------------------------------------

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
struct SharedInner {
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
enum Chooser {
    Uniform,
    Scrambled(ScrambledZipfianGenerator),
    Zipfian(ZipfianGenerator),
    Latest(f64),
    Sequential,
}

/// How many times a Zipfian draw of a key not yet inserted is redrawn before falling back to
/// `key % visible` (YCSB redraws without a bound; the bound only matters for specs whose key
/// space is mostly empty).
const MAX_REDRAWS: u32 = 1000;

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
    fn new(spec: &WorkloadSpec, seed: u64, phase: u32, client: u32, shared: &SharedState, fill: bool) -> Stream {
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
            Distribution::Zipfian { theta } => Chooser::Zipfian(ZipfianGenerator::new(space, theta)),
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
            Chooser::Zipfian(g) => {
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
/// order for hashed keys, ascending for ordered ones), values at [`LOAD_VERSION`].
pub fn load_items(spec: &WorkloadSpec) -> LoadItems {
    LoadItems { key_format: spec.key_format, value_bytes: spec.value_bytes, next: 0, end: spec.record_count }
}

/// The iterator of [`load_items`].
#[derive(Clone, Debug)]
pub struct LoadItems {
    key_format: KeyFormat,
    value_bytes: usize,
    next: u64,
    end: u64,
}

impl Iterator for LoadItems {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        if self.next >= self.end {
            return None;
        }
        let n = self.next;
        self.next += 1;
        Some((self.key_format.encode(n), value_for(n, LOAD_VERSION, self.value_bytes)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl ExactSizeIterator for LoadItems {}

// ---------------------------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------------------------

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceOp {
    Get {
        key: Vec<u8>,
    },
    /// An upsert of a `value_bytes`-byte value.
    Set {
        key: Vec<u8>,
        value_bytes: usize,
    },
    Del {
        key: Vec<u8>,
    },
    Scan {
        key: Vec<u8>,
        count: usize,
    },
}

/// Largest key a trace may name.
pub const TRACE_MAX_KEY_BYTES: usize = 256;
/// Largest value size and scan count a trace may name.
pub const TRACE_MAX_VALUE_BYTES: usize = 1 << 20;
pub const TRACE_MAX_SCAN_COUNT: usize = 1 << 20;

/// A malformed trace line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

impl fmt::Display for TraceOp {
    /// The trace line, without the newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceOp::Get { key } => write!(f, "get {}", hex(key)),
            TraceOp::Set { key, value_bytes } => write!(f, "set {} {value_bytes}", hex(key)),
            TraceOp::Del { key } => write!(f, "del {}", hex(key)),
            TraceOp::Scan { key, count } => write!(f, "scan {} {count}", hex(key)),
        }
    }
}

/// The key number a trace key stands for: FNV-1a 64 of its bytes (for [`value_for`]).
pub fn trace_key_number(key: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS_64;
    for &b in key {
        hash ^= b as u64;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash
}

impl TraceOp {
    pub fn key(&self) -> &[u8] {
        match self {
            TraceOp::Get { key } | TraceOp::Set { key, .. } | TraceOp::Del { key } | TraceOp::Scan { key, .. } => key,
        }
    }

    /// The operation to run: get → search, set → insert (an upsert) of [`value_for`] the key's
    /// [`trace_key_number`] at `version`, del → delete, scan → scan.
    pub fn to_workload_op(&self, version: u64) -> WorkloadOp {
        let key = Key { number: trace_key_number(self.key()), bytes: self.key().to_vec() };
        match self {
            TraceOp::Get { .. } => WorkloadOp::Search { key },
            TraceOp::Set { value_bytes, .. } => {
                let value = value_for(key.number, version, *value_bytes);
                WorkloadOp::Insert { key, value }
            }
            TraceOp::Del { .. } => WorkloadOp::Delete { key },
            TraceOp::Scan { count, .. } => WorkloadOp::Scan { start: key, limit: *count },
        }
    }
}

fn parse_hex_key(token: &str) -> Result<Vec<u8>, String> {
    if token.len() % 2 != 0 {
        return Err(format!("key `{token}` has an odd number of hex digits"));
    }
    if token.len() / 2 > TRACE_MAX_KEY_BYTES {
        return Err(format!("key is {} bytes, more than {TRACE_MAX_KEY_BYTES}", token.len() / 2));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    token
        .as_bytes()
        .chunks(2)
        .map(|pair| match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(format!("key `{token}` is not hexadecimal")),
        })
        .collect()
}

fn parse_count(token: &str, what: &str, min: usize, max: usize) -> Result<usize, String> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} `{token}` is not a decimal number"));
    }
    match token.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{what} `{token}` is out of range {min}..={max}")),
    }
}

fn parse_trace_line(line: &str) -> Result<Option<TraceOp>, String> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    let fields: Vec<&str> = trimmed.split_ascii_whitespace().collect();
    let (arity, usage) = match fields[0] {
        "get" => (2, "get <key-hex>"),
        "set" => (3, "set <key-hex> <value-bytes>"),
        "del" => (2, "del <key-hex>"),
        "scan" => (3, "scan <key-hex> <count>"),
        other => return Err(format!("unknown operation `{other}` (expected get, set, del or scan)")),
    };
    if fields.len() != arity {
        return Err(format!("expected `{usage}`, got {} field(s)", fields.len()));
    }
    let key = parse_hex_key(fields[1])?;
    if key.is_empty() {
        return Err("empty key".to_string());
    }
    Ok(Some(match fields[0] {
        "get" => TraceOp::Get { key },
        "del" => TraceOp::Del { key },
        "set" => TraceOp::Set { key, value_bytes: parse_count(fields[2], "value size", 0, TRACE_MAX_VALUE_BYTES)? },
        _ => TraceOp::Scan { key, count: parse_count(fields[2], "scan count", 1, TRACE_MAX_SCAN_COUNT)? },
    }))
}

/// Reads a trace (format in the module documentation): one operation a line, `#` comment lines
/// and blank lines skipped, fields separated by spaces or tabs, operation names lowercase. The
/// first malformed line is an error naming its line number.
pub fn read_trace(text: &str) -> Result<Vec<TraceOp>, TraceError> {
    let mut ops = Vec::new();
    for (index, line) in text.lines().enumerate() {
        match parse_trace_line(line) {
            Ok(Some(op)) => ops.push(op),
            Ok(None) => {}
            Err(message) => return Err(TraceError { line: index + 1, message }),
        }
    }
    Ok(ops)
}

/// Writes operations in the trace format, one a line.
pub fn write_trace(ops: &[TraceOp]) -> String {
    let mut out = String::new();
    for op in ops {
        out.push_str(&op.to_string());
        out.push('\n');
    }
    out
}

/// Splits a trace over `clients` clients round-robin (operation i goes to client i mod clients).
pub fn partition_trace(ops: &[TraceOp], clients: usize) -> Vec<Vec<TraceOp>> {
    assert!(clients > 0, "at least one client");
    let mut parts = vec![Vec::new(); clients];
    for (i, op) in ops.iter().enumerate() {
        parts[i % clients].push(op.clone());
    }
    parts
}

/// A synthetic stand-in for a cache trace that cannot be shipped: point gets and sets whose keys
/// follow a Zipf law with exponent `zipf_alpha` (any value > 0, sampled exactly from a cumulative
/// table) over `distinct_keys` keys.
///
/// The presets imitate the two Twitter clusters Dolphin replayed (Yang et al., OSDI'20; the
/// per-cluster statistics are in twitter/cache-trace, `stat/2020Mar.md`). What each field comes
/// from:
///
/// | field | cluster8 | cluster9 | source |
/// |---|---|---|---|
/// | `get_fraction` | 0.50 (set 0.50) | 0.99 (set 0.01) | stat table "operation"; cluster9's missing 1% **assumed** to be sets |
/// | `zipf_alpha` | 1.7366 | 1.6796 | stat table "Zipf alpha" |
/// | `key_bytes` | 8 | 8 | **assumed** per Dolphin digest §8.20 (artifact cuts keys to 8 B); the traces' mean keys are 23 B and 32 B |
/// | `value_bytes` | 8 | 8 | **assumed** per Dolphin digest §8.20; the traces' mean values are 9497 B and 39 B |
/// | `distinct_keys` | 10^6 | 10^6 | **assumed**: the trace slice Dolphin used is unknown |
///
/// Rank r's key is the big-endian SplitMix64 finaliser (a bijection of `u64`) of r + 1, which is
/// never zero, right-aligned after a namespace prefix (`tw:` repeated) when `key_bytes > 8`, so
/// keys are unique, non-zero and scattered. The stand-in
/// keeps only the published get/set ratio and popularity skew: no TTLs, no diurnal changes, no
/// value-size distribution, no one-hit wonders. Replay it after loading every key
/// ([`preload_keys`](Self::preload_keys), assumed, so that gets hit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticTrace {
    pub name: String,
    pub get_fraction: f64,
    pub zipf_alpha: f64,
    pub distinct_keys: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
}

impl SyntheticTrace {
    /// Twitter cluster8 (write-intensive; Dolphin Fig. 9).
    pub fn twitter_cluster8() -> SyntheticTrace {
        SyntheticTrace {
            name: "twitter-cluster8".to_string(),
            get_fraction: 0.50,
            zipf_alpha: 1.7366,
            distinct_keys: 1_000_000,
            key_bytes: 8,
            value_bytes: 8,
        }
    }

    /// Twitter cluster9 (read-mostly; Dolphin Fig. 9).
    pub fn twitter_cluster9() -> SyntheticTrace {
        SyntheticTrace {
            name: "twitter-cluster9".to_string(),
            get_fraction: 0.99,
            zipf_alpha: 1.6796,
            distinct_keys: 1_000_000,
            key_bytes: 8,
            value_bytes: 8,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if !(0.0..=1.0).contains(&self.get_fraction) {
            return spec_error(format!("get fraction must be in [0, 1], got {}", self.get_fraction));
        }
        if !(self.zipf_alpha.is_finite() && self.zipf_alpha > 0.0) {
            return spec_error(format!("Zipf alpha must be > 0, got {}", self.zipf_alpha));
        }
        if !(1..=1 << 26).contains(&self.distinct_keys) {
            return spec_error(format!("distinct keys must be 1 to 2^26, got {}", self.distinct_keys));
        }
        if !(MIN_KEY_BYTES..=TRACE_MAX_KEY_BYTES).contains(&self.key_bytes) {
            return spec_error(format!("key size must be 8 to 256 bytes, got {}", self.key_bytes));
        }
        if self.value_bytes > TRACE_MAX_VALUE_BYTES {
            return spec_error(format!("value size must be at most {TRACE_MAX_VALUE_BYTES} bytes"));
        }
        Ok(())
    }

    /// The key of popularity rank `rank` (0 is the hottest).
    pub fn key_of_rank(&self, rank: u64) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_bytes);
        let prefix = b"tw:";
        while key.len() < self.key_bytes - 8 {
            key.push(prefix[key.len() % prefix.len()]);
        }
        key.extend_from_slice(&mix64(rank + 1).to_be_bytes());
        key
    }

    /// Every key, for warming the index before the replay.
    pub fn preload_keys(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..self.distinct_keys).map(|r| self.key_of_rank(r))
    }

    /// The probability of rank `rank`: `(rank+1)^−α / ζ(distinct_keys, α)`.
    pub fn rank_probability(&self, rank: u64) -> f64 {
        math::pow((rank + 1) as f64, -self.zipf_alpha) / math::zeta(self.distinct_keys, self.zipf_alpha)
    }

    fn cumulative(&self) -> Vec<f64> {
        let mut sum = 0.0;
        (1..=self.distinct_keys)
            .map(|i| {
                sum += math::pow(i as f64, -self.zipf_alpha);
                sum
            })
            .collect()
    }

    /// `operations` operations, deterministic from `seed`. Panics if the profile does not
    /// [`validate`](Self::validate).
    pub fn generate(&self, seed: u64, operations: usize) -> Vec<TraceOp> {
        if let Err(e) = self.validate() {
            panic!("invalid synthetic trace `{}`: {e}", self.name);
        }
        let cumulative = self.cumulative();
        let total = *cumulative.last().expect("at least one key");
        let mut rng = chacha(seed, PURPOSE_TRACE, 0, 0);
        (0..operations)
            .map(|_| {
                let is_get = unit(&mut rng) < self.get_fraction;
                let x = unit(&mut rng) * total;
                let rank = cumulative.partition_point(|&c| c <= x).min(cumulative.len() - 1) as u64;
                let key = self.key_of_rank(rank);
                if is_get { TraceOp::Get { key } } else { TraceOp::Set { key, value_bytes: self.value_bytes } }
            })
            .collect()
    }

    /// [`generate`](Self::generate) written in the trace format, with a header of comments
    /// recording the parameters.
    pub fn write(&self, seed: u64, operations: usize) -> String {
        let mut out = format!(
            "# synthetic stand-in `{}` (dmkit): seed {seed}, {operations} operations\n\
             # get fraction {}, Zipf alpha {}, {} distinct keys, {}-byte keys, {}-byte values\n",
            self.name, self.get_fraction, self.zipf_alpha, self.distinct_keys, self.key_bytes, self.value_bytes
        );
        out.push_str(&write_trace(&self.generate(seed, operations)));
        out
    }
}

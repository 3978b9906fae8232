//! YCSB's generators, bit for bit: the Zipfian and scrambled Zipfian of YCSB's core workloads,
//! and FNV-1a.

use super::*;

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

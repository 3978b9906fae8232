//! Workload generators: YCSB's distributions, mixes, key formats, streams, phases and traces.

use dmkit_experiments::workload::*;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `observed` successes of `trials` lie within `sigmas` standard errors of probability `p`.
fn assert_within(what: &str, observed: u64, trials: u64, p: f64, sigmas: f64) {
    let expected = trials as f64 * p;
    let sd = (trials as f64 * p * (1.0 - p)).sqrt().max(1e-9);
    let z = (observed as f64 - expected) / sd;
    assert!(
        z.abs() <= sigmas,
        "{what}: observed {observed} of {trials}, expected {expected:.1} (p = {p:.6}), z = {z:.2}"
    );
}

// --- deterministic math ---------------------------------------------------------------------

#[test]
fn deterministic_math_agrees_with_std() {
    let mut x = 1e-300;
    while x < 1e300 {
        for m in [1.0, 1.234_567, 1.414, 1.415, 1.999_999] {
            let v = x * m;
            let rel = (math::ln(v) - v.ln()).abs() / v.ln().abs().max(1e-300);
            assert!(rel < 1e-14 || (math::ln(v) - v.ln()).abs() < 1e-15, "ln({v}): {} vs {}", math::ln(v), v.ln());
        }
        x *= 7.3;
    }
    let mut e = -740.0;
    while e < 709.0 {
        let rel = (math::exp(e) - e.exp()).abs() / e.exp();
        assert!(rel < 2e-15, "exp({e}): {} vs {}", math::exp(e), e.exp());
        e += 0.731;
    }
    for &t in &[-0.49, -1e-3, -1e-12, 0.0, 1e-12, 1e-5, 0.3, 0.49, 2.0, -3.0] {
        let rel = (math::exp_m1(t) - t.exp_m1()).abs() / t.exp_m1().abs().max(1e-300);
        assert!(rel < 1e-15, "exp_m1({t})");
    }
    for &(b, y) in &[(0.863, 100.0), (0.999_999, 100.0), (2e-6, 0.01), (0.5, 0.99), (123.0, -0.99), (1e6, 0.5)] {
        let rel = (math::pow(b, y) - f64::powf(b, y)).abs() / f64::powf(b, y);
        assert!(rel < 1e-13, "pow({b}, {y}): {} vs {}", math::pow(b, y), f64::powf(b, y));
    }
    assert_eq!(math::pow(1.0, 100.0), 1.0);
    assert_eq!(math::ln(1.0), 0.0);
    assert_eq!(math::exp(0.0), 1.0);
}

#[test]
fn zeta_matches_direct_sums_and_ycsb_constant() {
    for &(n, theta) in &[
        (1u64, 0.99),
        (2, 0.5),
        (64, 0.9),
        (65, 0.9),
        (1000, 0.2),
        (100_000, 0.5),
        (1_000_000, 0.99),
        (100_000, 1.7366),
        (50_000, 1.0),
    ] {
        // Kahan-summed reference, smallest terms first.
        let (mut sum, mut c) = (0.0f64, 0.0f64);
        for i in (1..=n).rev() {
            let y = (i as f64).powf(-theta) - c;
            let t = sum + y;
            c = (t - sum) - y;
            sum = t;
        }
        let rel = (math::zeta(n, theta) - sum).abs() / sum;
        assert!(rel < 1e-14, "zeta({n}, {theta}) = {} vs {sum}", math::zeta(n, theta));
    }
    let rel = (math::zeta(YCSB_ITEM_COUNT, 0.99) - YCSB_ZETAN).abs() / YCSB_ZETAN;
    assert!(rel < 1e-10, "zeta(1e10, 0.99) = {} vs YCSB's {YCSB_ZETAN}", math::zeta(YCSB_ITEM_COUNT, 0.99));
}

// --- YCSB's Zipfian and its scrambling ------------------------------------------------------------

#[test]
fn fnvhash64_matches_ycsb_definition() {
    // Computed independently from YCSB's Utils.fnvhash64: offset basis 0xCBF29CE484222325,
    // prime 1099511628211, the 8 bytes of the long low byte first (xor, then multiply), abs.
    let pinned: [(u64, u64); 11] = [
        (0, 6_284_781_860_667_377_211),
        (1, 8_517_097_267_634_966_620),
        (2, 1_820_151_046_732_198_393),
        (3, 4_052_466_453_699_787_802),
        (255, 8_064_062_821_143_829_734),
        (256, 2_056_600_594_528_442_646),
        (1000, 5_952_875_239_596_136_740),
        (12_345, 1_792_800_413_050_876_852),
        (1_000_000, 1_011_632_231_655_643_464),
        (1 << 40, 6_908_947_124_047_430_886),
        (10_000_000_000, 1_201_321_332_300_452_516),
    ];
    for (input, hash) in pinned {
        assert_eq!(fnvhash64(input), hash, "fnvhash64({input})");
    }
}

#[test]
fn zipfian_rank_frequencies_match_ycsb_algorithm() {
    let n = 1_000_000;
    let zipf = ZipfianGenerator::new(n, 0.99);
    let samples: u64 = 2_000_000;
    let mut counts = [0u64; 10];
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    for _ in 0..samples {
        let r = zipf.rank(uniform(&mut rng));
        assert!(r < n);
        if r < 10 {
            counts[r as usize] += 1;
        }
    }
    for (r, &count) in counts.iter().enumerate() {
        let p = zipf.rank_probability(r as u64);
        assert_within(&format!("rank {}", r + 1), count, samples, p, 4.0);
    }
    // Ranks 1 and 2 (0 and 1 here) are exactly Zipf: 1/(r^θ ζ(n, θ)).
    for r in 0..2 {
        let ideal = 1.0 / (((r + 1) as f64).powf(0.99) * zipf.zetan());
        assert!((zipf.rank_probability(r) - ideal).abs() < 1e-15);
        assert!((zipf.ideal_probability(r) - ideal).abs() < 1e-15);
        assert_within(&format!("rank {} vs Zipf", r + 1), counts[r as usize], samples, ideal, 4.0);
    }
    // Beyond, Gray's approximation over-weights the head (documented): rank 3 by 19%, rank 10 by 3.6%.
    let excess = |r: u64| zipf.rank_probability(r) / zipf.ideal_probability(r) - 1.0;
    assert!((0.18..0.21).contains(&excess(2)), "rank 3 excess {}", excess(2));
    assert!((0.03..0.04).contains(&excess(9)), "rank 10 excess {}", excess(9));
    // rank_probability is a distribution.
    let total: f64 = (0..n).map(|r| zipf.rank_probability(r)).sum();
    assert!((total - 1.0).abs() < 1e-9, "probabilities sum to {total}");
}

#[test]
fn scrambled_zipfian_is_ycsbs() {
    let items = 1_000_000;
    let g = ScrambledZipfianGenerator::new(items, 0.99);
    // YCSB draws ranks over ITEM_COUNT + 1 items with its precomputed zeta.
    assert_eq!(g.ranks().items(), YCSB_ITEM_COUNT + 1);
    assert_eq!(g.ranks().zetan(), YCSB_ZETAN);
    // Another theta computes zeta instead.
    let other = ScrambledZipfianGenerator::new(items, 0.9);
    assert!((other.ranks().zetan() - math::zeta(YCSB_ITEM_COUNT + 1, 0.9)).abs() < 1e-9);
    // The scrambling: fnvhash64(rank) mod item_count.
    for (rank, key) in [
        (0u64, 6_284_781_860_667_377_211u64 % items),
        (1, 8_517_097_267_634_966_620 % items),
        (2, 1_820_151_046_732_198_393 % items),
    ] {
        assert_eq!(g.key_of_rank(rank), key);
    }
    assert_eq!(g.key_of_rank(0), 377_211);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let samples = 1_000_000u64;
    let mut rank_counts = [0u64; 5];
    let mut hottest = 0u64;
    for _ in 0..samples {
        let u = uniform(&mut rng);
        let rank = g.ranks().rank(u);
        let key = g.key(u);
        assert_eq!(key, g.key_of_rank(rank));
        assert!(key < items);
        if rank < 5 {
            rank_counts[rank as usize] += 1;
        }
        if key == g.key_of_rank(0) {
            hottest += 1;
        }
    }
    for (r, &c) in rank_counts.iter().enumerate() {
        assert_within(&format!("10^10-item rank {}", r + 1), c, samples, g.ranks().rank_probability(r as u64), 4.0);
    }
    // The hottest key collects rank 0 (1/26.47 = 3.8%) plus the far ranks that hash onto it.
    let p0 = 1.0 / YCSB_ZETAN;
    assert!(hottest as f64 / samples as f64 > p0 * 0.98, "hottest key share {}", hottest as f64 / samples as f64);
}

#[test]
fn ycsb_c_requests_concentrate_on_fnv_of_rank_zero() {
    let spec = WorkloadSpec::ycsb('c', 100_000).unwrap();
    let shared = SharedState::for_spec(&spec);
    let mut stream = spec.stream(3, 0, &shared);
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for _ in 0..200_000 {
        let op = stream.next_op();
        assert!(op.key().number < 100_000);
        *counts.entry(op.key().number).or_default() += 1;
    }
    let top = counts.iter().max_by_key(|(_, c)| **c).map(|(k, _)| *k).unwrap();
    // CoreWorkload: ScrambledZipfianGenerator(0, recordcount + expectednewkeys), inclusive.
    assert_eq!(top, fnvhash64(0) % 100_001);
    // Hashed integer keys: the big-endian fnvhash64 of the key number.
    let op = stream.next_op();
    assert_eq!(op.key().bytes, fnvhash64(op.key().number).to_be_bytes().to_vec());
}

// --- streams --------------------------------------------------------------------------------------

fn all_distributions() -> Vec<Distribution> {
    vec![
        Distribution::Uniform,
        Distribution::ScrambledZipfian { theta: 0.99 },
        Distribution::Zipfian { theta: 0.7 },
        Distribution::Latest { theta: 0.99 },
        Distribution::Sequential,
    ]
}

fn mixed() -> Mix {
    Mix { read: 0.3, update: 0.2, insert: 0.1, scan: 0.1, read_modify_write: 0.1, delete: 0.2 }
}

fn take(spec: &WorkloadSpec, seed: u64, client: u32, n: usize) -> Vec<WorkloadOp> {
    let shared = SharedState::for_spec(spec);
    let mut stream = spec.stream(seed, client, &shared);
    (0..n).map(|_| stream.next_op()).collect()
}

#[test]
fn a_seed_fixes_the_stream() {
    for distribution in all_distributions() {
        let spec = WorkloadSpec::custom("t", mixed(), distribution, 10_000);
        let a = take(&spec, 11, 0, 2000);
        assert_eq!(a, take(&spec, 11, 0, 2000), "{distribution:?}: same seed, same stream");
        assert_ne!(a, take(&spec, 12, 0, 2000), "{distribution:?}: another seed, another stream");
        assert_ne!(a, take(&spec, 11, 1, 2000), "{distribution:?}: another client, another stream");
    }
    // Several clients interleaved on one shared state: the same seed gives the same ops.
    let run = || {
        let spec = WorkloadSpec::ycsb('d', 5000).unwrap();
        let shared = SharedState::for_spec(&spec);
        let mut streams: Vec<Stream> = (0..4).map(|c| spec.stream(5, c, &shared)).collect();
        (0..4000).map(|i| streams[i % 4].next_op()).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn each_mix_has_its_proportions() {
    let n: u64 = 100_000;
    let mut cases: Vec<WorkloadSpec> = "abcdef".chars().map(|c| WorkloadSpec::ycsb(c, 10_000).unwrap()).collect();
    cases.push(WorkloadSpec::ycsb_load(10_000));
    cases.push(WorkloadSpec::custom("with-deletes", mixed(), Distribution::Uniform, 10_000));
    let expected: [(&str, [f64; 6]); 8] = [
        ("ycsb-a", [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]),
        ("ycsb-b", [0.95, 0.05, 0.0, 0.0, 0.0, 0.0]),
        ("ycsb-c", [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        ("ycsb-d", [0.95, 0.0, 0.05, 0.0, 0.0, 0.0]),
        ("ycsb-e", [0.0, 0.0, 0.05, 0.95, 0.0, 0.0]),
        ("ycsb-f", [0.5, 0.0, 0.0, 0.0, 0.5, 0.0]),
        ("load", [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]),
        ("with-deletes", [0.3, 0.2, 0.1, 0.1, 0.1, 0.2]),
    ];
    for (spec, (name, shares)) in cases.iter().zip(expected) {
        assert_eq!(spec.name, name);
        let mut counts: BTreeMap<OpKind, u64> = BTreeMap::new();
        for op in take(spec, 1, 0, n as usize) {
            *counts.entry(op.kind()).or_default() += 1;
        }
        for (kind, share) in OpKind::ALL.into_iter().zip(shares) {
            let c = counts.get(&kind).copied().unwrap_or(0);
            assert!((spec.mix.fraction(kind) - share).abs() < 1e-12, "{name}: {} share", kind.name());
            if share == 0.0 {
                assert_eq!(c, 0, "{name}: no {}", kind.name());
            } else {
                assert_within(&format!("{name} {}", kind.name()), c, n, share, 5.0);
            }
        }
    }
}

#[test]
fn ycsb_presets_follow_the_standard_definitions() {
    let zipf = Distribution::ScrambledZipfian { theta: 0.99 };
    for c in "abcf".chars() {
        let spec = WorkloadSpec::ycsb(c, 1000).unwrap();
        assert_eq!(spec.distribution, zipf);
        assert_eq!(spec.key_format, KeyFormat::Integer { order: KeyOrder::Hashed });
    }
    assert_eq!(WorkloadSpec::ycsb('d', 1000).unwrap().distribution, Distribution::Latest { theta: 0.99 });
    let e = WorkloadSpec::ycsb('E', 1000).unwrap();
    assert_eq!(e.distribution, zipf);
    assert_eq!(e.key_format, KeyFormat::Integer { order: KeyOrder::Ordered });
    assert_eq!(e.scan_length, ScanLength { min: 1, max: 100 });
    assert_eq!(WorkloadSpec::from_name("ycsb-b", 5).unwrap(), WorkloadSpec::ycsb('b', 5).unwrap());
    assert_eq!(WorkloadSpec::from_name("LOAD", 5).unwrap(), WorkloadSpec::ycsb_load(5));
    assert!(WorkloadSpec::from_name("g", 5).unwrap_err().to_string().contains("unknown workload"));
    assert!(WorkloadSpec::ycsb('x', 5).is_err());
}

#[test]
fn scan_lengths_are_uniform_and_start_on_ordered_keys() {
    let spec = WorkloadSpec::ycsb('e', 10_000).unwrap();
    let mut lengths = [0u64; 101];
    let mut scans = 0u64;
    for op in take(&spec, 9, 0, 100_000) {
        if let WorkloadOp::Scan { start, limit } = op {
            assert!((1..=100).contains(&limit));
            assert_eq!(start.bytes, start.number.to_be_bytes().to_vec());
            lengths[limit] += 1;
            scans += 1;
        }
    }
    for (len, &count) in lengths.iter().enumerate().skip(1) {
        assert_within(&format!("scan length {len}"), count, scans, 0.01, 5.0);
    }
}

#[test]
fn latest_requests_the_most_recent_inserts_most() {
    let record_count = 10_000;
    let spec = WorkloadSpec::ycsb('d', record_count).unwrap();
    let shared = SharedState::for_spec(&spec);
    let mut streams: Vec<Stream> = (0..8).map(|c| spec.stream(21, c, &shared)).collect();
    let mut last_inserted = record_count - 1;
    let mut ages: BTreeMap<u64, u64> = BTreeMap::new(); // age (newest = 0) -> requests
    let mut searches = 0u64;
    for i in 0..200_000 {
        let op = streams[i % 8].next_op();
        match op {
            WorkloadOp::Insert { key, .. } => {
                assert_eq!(key.number, last_inserted + 1, "inserts take fresh numbers in order");
                last_inserted = key.number;
            }
            WorkloadOp::Search { key } => {
                assert!(key.number <= last_inserted);
                *ages.entry(last_inserted - key.number).or_default() += 1;
                searches += 1;
            }
            other => panic!("D generated {other:?}"),
        }
    }
    assert_eq!(shared.issued(), last_inserted + 1);
    // The newest key is the most requested, then popularity falls with age.
    let count = |age: u64| ages.get(&age).copied().unwrap_or(0);
    assert!(count(0) > count(1) && count(1) > count(2) && count(2) > count(5), "{ages:?}");
    let newest_1_percent: u64 = (0..record_count / 100).map(count).sum();
    let oldest_half: u64 = (record_count / 2..record_count).map(count).sum();
    assert!(newest_1_percent > 4 * oldest_half, "newest 1%: {newest_1_percent}, oldest half: {oldest_half}");
    // The newest key gets a Zipfian rank-0 share: 1/ζ(n, 0.99) with n about the current count.
    let p0 = 1.0 / math::zeta(record_count + 5_000, 0.99);
    assert!(
        (count(0) as f64 / searches as f64 - p0).abs() < 0.1 * p0,
        "newest share {}",
        count(0) as f64 / searches as f64
    );
}

#[test]
fn uniform_sequential_and_mica_zipfian_choose_as_documented() {
    let n = 1000;
    let spec = |d| WorkloadSpec::custom("t", Mix { read: 1.0, ..Mix::default() }, d, n);
    // Sequential: 0, 1, 2, ... wrapping, shared by the clients.
    let s = spec(Distribution::Sequential);
    let shared = SharedState::for_spec(&s);
    let mut a = s.stream(1, 0, &shared);
    let mut b = s.stream(1, 1, &shared);
    let numbers: Vec<u64> =
        (0..2 * n as usize + 3).map(|i| if i % 2 == 0 { a.next_op() } else { b.next_op() }.key().number).collect();
    let want: Vec<u64> = (0..2 * n + 3).map(|i| i % n).collect();
    assert_eq!(numbers, want);
    // MICA Zipfian: rank r is key r.
    let ops = take(&spec(Distribution::Zipfian { theta: 0.99 }), 2, 0, 100_000);
    let zipf = ZipfianGenerator::new(n, 0.99);
    for r in 0..3u64 {
        let c = ops.iter().filter(|op| op.key().number == r).count() as u64;
        assert_within(&format!("MICA key {r}"), c, 100_000, zipf.rank_probability(r), 4.5);
    }
    // Uniform: every key near 1/n.
    let ops = take(&spec(Distribution::Uniform), 3, 0, 100_000);
    let mut counts = vec![0u64; n as usize];
    for op in &ops {
        counts[op.key().number as usize] += 1;
    }
    let max = *counts.iter().max().unwrap();
    assert!(max < 100 + 5 * 10, "uniform max count {max}");
    assert_within("uniform key 0", counts[0], 100_000, 1.0 / n as f64, 5.0);
}

/// `mica-` workloads draw as SMART's item-count test does (MICA's generator over the loaded
/// keys): the hottest key's share falls with the key count, where YCSB's scrambled Zipfian,
/// whose ranks range over 10^10 items whatever the key count, keeps it nearly constant.
#[test]
fn mica_workloads_are_zipfian_over_the_loaded_keys() {
    let top_share = |name: &str, keys: u64| {
        let spec = WorkloadSpec::from_name(name, keys).unwrap();
        let ops = take(&spec, 5, 0, 200_000);
        let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
        for op in &ops {
            *counts.entry(op.key().number).or_default() += 1;
        }
        (spec, *counts.values().max().unwrap() as f64 / ops.len() as f64)
    };
    let (small, mica_small) = top_share("mica-c", 10_000);
    let (_, mica_large) = top_share("mica-c", 10_000_000);
    assert_eq!(small.name, "mica-c");
    assert_eq!(small.mix, WorkloadSpec::ycsb('c', 10_000).unwrap().mix);
    assert_eq!(small.key_format, WorkloadSpec::ycsb('c', 10_000).unwrap().key_format, "hashed keys, as YCSB C's");
    assert_eq!(small.distribution, Distribution::Zipfian { theta: 0.99 });
    // ζ(10^4, 0.99) = 10.22 and ζ(10^7, 0.99) = 18.07: rank 0 draws 9.78% and 5.54% (200,000
    // draws: a standard deviation of 0.07 and 0.05 points).
    assert!((mica_small - 0.0978).abs() < 0.003 && (mica_large - 0.0554).abs() < 0.003, "{mica_small} {mica_large}");
    let (_, ycsb_small) = top_share("c", 10_000);
    let (_, ycsb_large) = top_share("c", 10_000_000);
    assert!((ycsb_small - ycsb_large).abs() < 0.004, "YCSB's shares barely move: {ycsb_small} {ycsb_large}");
    assert_eq!(WorkloadSpec::from_name("MICA-A", 100).unwrap().name, "mica-a");
    // Bad input: a workload that is not Zipfian has no MICA form.
    for bad in ["mica-d", "mica-load", "mica-db-get", "mica-", "mica-zz"] {
        let e = WorkloadSpec::from_name(bad, 100).unwrap_err().to_string();
        assert!(e.contains("expected mica- before a, b, c, e or f"), "{bad}: {e}");
    }
}

/// `zipfian_items` draws a dense or MICA Zipfian's ranks over a paper's key count at reduced
/// scale: the hottest keys keep the shares they have among the paper's keys (what bounds a hot
/// leaf's lock word), every key drawn is a loaded one, and the default is unchanged.
#[test]
fn zipfian_items_keep_the_papers_hot_shares_at_reduced_scale() {
    let keys = 100_000;
    let hot_share = |items: Option<u64>| {
        let mut spec = WorkloadSpec::from_name("dense-c", keys).unwrap();
        spec.zipfian_items = items;
        spec.validate().unwrap();
        let ops = take(&spec, 9, 0, 200_000);
        assert!(ops.iter().all(|op| op.key().number < keys), "a key past the loaded ones");
        ops.iter().filter(|op| op.key().number < 48).count() as u64
    };
    // The generator's own probabilities (Gray's method, as MICA's) for ranks 0..48.
    let expected = |items: u64| (0..48).map(|r| ZipfianGenerator::new(items, 0.99).rank_probability(r)).sum::<f64>();
    let (small, paper) = (expected(keys), expected(1 << 29));
    assert!(small > 0.33 && paper < 0.21, "{small} {paper}");
    // Folded ranks add to keys 0..48 only ranks 10^5.. of 2^29, under 0.01% of draws.
    assert_within("keys 0..48 over the loaded keys", hot_share(None), 200_000, small, 5.0);
    assert_within("keys 0..48 over 2^29 ranks", hot_share(Some(1 << 29)), 200_000, paper, 5.0);
    // As many ranks as keys is the default distribution, draw for draw.
    let mut same = WorkloadSpec::from_name("dense-c", keys).unwrap();
    same.zipfian_items = Some(keys);
    let default = WorkloadSpec::from_name("dense-c", keys).unwrap();
    let numbers = |s: &WorkloadSpec| take(s, 3, 1, 5_000).iter().map(|op| op.key().number).collect::<Vec<_>>();
    assert_eq!(numbers(&same), numbers(&default));
    // Bad input: YCSB's scrambled Zipfian already draws over 10^10 items; fewer ranks than keys
    // would be a different distribution, not a paper's key count.
    let mut scrambled = WorkloadSpec::ycsb('c', keys).unwrap();
    scrambled.zipfian_items = Some(1 << 29);
    assert!(scrambled.validate().unwrap_err().to_string().contains("scrambled Zipfian"));
    let mut short = WorkloadSpec::from_name("dense-c", keys).unwrap();
    short.zipfian_items = Some(keys - 1);
    assert!(short.validate().unwrap_err().to_string().contains("at least the keys loaded"));
}

#[test]
fn zipfian_key_space_follows_ycsb_sizing() {
    let mut e = WorkloadSpec::ycsb('e', 1000).unwrap();
    assert_eq!(e.zipfian_key_space(), 1000);
    e.operation_count = 10_000;
    assert_eq!(e.zipfian_key_space(), 1000 + 1000); // 10 000 × 0.05 × 2
    // Keys not yet inserted are redrawn: every request targets a present key.
    let shared = SharedState::for_spec(&e);
    let mut stream = e.stream(4, 0, &shared);
    for _ in 0..20_000 {
        let op = stream.next_op();
        assert!(op.key().number < shared.issued());
    }
}

// --- keys and values ------------------------------------------------------------------------

/// Reads the key number back from an e-mail key (the uniqueness argument of `email_key`).
fn email_core(key: &[u8], domain_first: bool) -> u64 {
    let text = std::str::from_utf8(key).unwrap();
    let at = text.find('@').unwrap();
    let local = if domain_first { &text[at + 1..] } else { &text[..at] };
    let core = local.rsplit('.').next().unwrap();
    u64::from_str_radix(core, 36).unwrap()
}

#[test]
fn email_keys_are_unique_and_exactly_sized() {
    for bytes in [8usize, 12, 16, 32, 64, 256] {
        for domain_first in [false, true] {
            let format = KeyFormat::Email { bytes, domain_first };
            let mut seen = BTreeSet::new();
            for n in 0..100_000u64 {
                let key = format.encode(n);
                assert_eq!(key.len(), bytes, "{key:?}");
                assert!(key.iter().all(|b| b.is_ascii_graphic()), "{key:?}");
                assert_eq!(key.iter().filter(|&&b| b == b'@').count(), 1);
                assert_eq!(email_core(&key, domain_first), n, "{}", String::from_utf8_lossy(&key));
                assert!(seen.insert(key));
            }
        }
    }
    // Large key numbers up to the capacity.
    let format = KeyFormat::Email { bytes: 8, domain_first: false };
    assert_eq!(format.capacity(), 36u64.pow(7));
    let key = format.encode(format.capacity() - 1);
    assert_eq!(key, b"zzzzzzz@".to_vec());
    // Readable at realistic sizes.
    let key = String::from_utf8(KeyFormat::Email { bytes: 32, domain_first: false }.encode(12_345)).unwrap();
    assert!(key.ends_with(".com") || key.ends_with(".net") || key.ends_with(".ru") || key.ends_with(".de"), "{key}");
    let flipped = String::from_utf8(KeyFormat::Email { bytes: 32, domain_first: true }.encode(12_345)).unwrap();
    assert!(
        flipped.starts_with("com.")
            || flipped.starts_with("net.")
            || flipped.starts_with("ru.")
            || flipped.starts_with("de."),
        "{flipped}"
    );
    // Too many keys for the size is a spec error.
    let mut spec = WorkloadSpec::ycsb('c', 36u64.pow(7) + 1).unwrap();
    spec.key_format = format;
    assert!(spec.validate().unwrap_err().to_string().contains("e-mail"));
}

#[test]
fn integer_and_padded_keys_for_size_sweeps() {
    for bytes in 8..=256usize {
        for order in [KeyOrder::Hashed, KeyOrder::Ordered] {
            let format = KeyFormat::Padded { bytes, order };
            assert_eq!(format.key_bytes(), bytes);
            let key = format.encode(77);
            assert_eq!(key.len(), bytes);
            assert!(key[..bytes - 8].iter().all(|&b| b == 0));
            assert_eq!(key[bytes - 8..], integer_key(77, order).to_be_bytes());
        }
        let ordered = KeyFormat::Padded { bytes, order: KeyOrder::Ordered };
        assert!(ordered.encode(255) < ordered.encode(256), "ordered keys sort like their numbers");
    }
    assert_eq!(KeyFormat::Integer { order: KeyOrder::Ordered }.encode(0x0102), vec![0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(
        KeyFormat::Integer { order: KeyOrder::Hashed }.encode(0),
        6_284_781_860_667_377_211u64.to_be_bytes().to_vec()
    );
    // Hashed keys of the first 10^6 key numbers are distinct.
    let mut hashed: Vec<u64> = (0..1_000_000).map(fnvhash64).collect();
    hashed.sort_unstable();
    hashed.dedup();
    assert_eq!(hashed.len(), 1_000_000);
    for bad in [7usize, 257] {
        let mut spec = WorkloadSpec::ycsb('a', 10).unwrap();
        spec.key_format = KeyFormat::Padded { bytes: bad, order: KeyOrder::Ordered };
        assert!(spec.validate().unwrap_err().to_string().contains("key size"));
    }
}

#[test]
fn values_can_be_verified() {
    for len in [1usize, 7, 8, 9, 64, 1000] {
        for (key, version) in
            [(0u64, LOAD_VERSION), (5, version_of(0, 3, 9)), (u64::MAX, version_of(125, (1 << 20) - 1, (1 << 36) - 1))]
        {
            let v = value_for(key, version, len);
            assert_eq!(v.len(), len);
            assert!(v[0] & 0x80 != 0, "first byte never zero");
            if len >= 8 {
                assert_eq!(value_version(key, &v), Some(version));
                if len > 8 {
                    // Beyond the first word a value checks against its own key and bytes only.
                    assert_eq!(value_version(key ^ 1, &v), None);
                    let mut corrupt = v.clone();
                    *corrupt.last_mut().unwrap() ^= 1;
                    assert_eq!(value_version(key, &corrupt), None);
                }
            } else {
                assert_eq!(value_version(key, &v), None);
            }
        }
    }
    assert_ne!(version_of(0, 0, 0), LOAD_VERSION);
    // Written values carry their writer.
    let spec = WorkloadSpec::ycsb('a', 100).unwrap();
    let shared = SharedState::for_spec(&spec);
    let mut s = spec.stream_in_phase(1, 2, 7, &shared);
    for _ in 0..100 {
        let op = s.next_op();
        let seq = s.generated() - 1;
        if let Some(value) = op.value() {
            assert_eq!(value_version(op.key().number, value), Some(version_of(2, 7, seq)));
        }
    }
}

// --- load, phases, fill, acknowledgements -----------------------------------------------------------

/// A shuffled load inserts the same keys in another order: a permutation of the key numbers,
/// the same every time, and not close to ascending.
#[test]
fn a_shuffled_load_is_a_fixed_permutation_of_the_same_keys() {
    for n in [1u64, 2, 3, 5, 1000, 4097] {
        let order: Vec<u64> = (0..n).map(|i| shuffled_index(i, n)).collect();
        let set: BTreeSet<u64> = order.iter().copied().collect();
        assert_eq!(set, (0..n).collect::<BTreeSet<u64>>(), "a permutation of 0..{n}");
    }
    let mut spec = WorkloadSpec::from_name("dense-c", 5000).unwrap();
    let ascending: Vec<(Vec<u8>, Vec<u8>)> = load_items(&spec).collect();
    spec.shuffled_load = true;
    let shuffled: Vec<(Vec<u8>, Vec<u8>)> = load_items(&spec).collect();
    assert_eq!(shuffled, load_items(&spec).collect::<Vec<_>>(), "the same order every time");
    assert_ne!(shuffled, ascending);
    let (mut a, mut b) = (ascending.clone(), shuffled.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same keys and values");
    // Few neighbours in key order are neighbours in load order.
    let rises = shuffled.windows(2).filter(|w| w[1].0 > w[0].0).count();
    assert!((2000..3000).contains(&rises), "{rises} of 4999 steps ascend (a random order: about half)");
}

#[test]
fn load_items_and_loading_by_inserts_give_the_same_keys() {
    for spec in [WorkloadSpec::ycsb('a', 5000).unwrap(), WorkloadSpec::ycsb('e', 5000).unwrap()] {
        let items: Vec<(Vec<u8>, Vec<u8>)> = load_items(&spec).collect();
        assert_eq!(items.len(), 5000);
        assert_eq!(load_items(&spec).len(), 5000);
        for (n, (key, value)) in items.iter().enumerate() {
            assert_eq!(*key, spec.key_format.encode(n as u64));
            assert_eq!(value_version(n as u64, value), Some(LOAD_VERSION));
        }
        let phases = load_then_run(&spec, 10_000);
        assert_eq!(phases[0].operations, 5000);
        assert_eq!(phases[1].spec.operation_count, 10_000);
        let shared = SharedState::new(0);
        let mut load = phases[0].stream(0, 8, 0, &shared);
        let inserted: Vec<Vec<u8>> = (0..5000)
            .map(|_| match load.next_op() {
                WorkloadOp::Insert { key, .. } => key.bytes,
                other => panic!("load generated {other:?}"),
            })
            .collect();
        assert_eq!(inserted, items.into_iter().map(|(k, _)| k).collect::<Vec<_>>());
        // The mixed phase then reads the loaded keys.
        let mut run = phases[1].stream(1, 8, 0, &shared);
        for _ in 0..1000 {
            assert!(run.next_op().key().number < 5000 + 500);
        }
    }
    if let KeyFormat::Integer { order } = WorkloadSpec::ycsb('e', 1).unwrap().key_format {
        assert_eq!(order, KeyOrder::Ordered, "E loads ascending keys");
    }
}

#[test]
fn fill_streams_insert_fresh_keys_forever() {
    let spec = WorkloadSpec::ycsb('c', 100).unwrap();
    let shared = SharedState::for_spec(&spec);
    let mut streams: Vec<Stream> = (0..3).map(|c| spec.fill_stream(6, c, &shared)).collect();
    assert!(streams[0].is_fill());
    let mut numbers = Vec::new();
    for i in 0..30_000 {
        match streams[i % 3].next_op() {
            WorkloadOp::Insert { key, .. } => numbers.push(key.number),
            other => panic!("fill generated {other:?}"),
        }
    }
    assert_eq!(numbers, (100..30_100).collect::<Vec<u64>>());
}

/// Compute-node processes of one hardware run each have their own shared state: with a stride
/// per process, their fresh keys are disjoint and together dense.
#[test]
fn strided_states_split_the_fresh_keys_between_processes() {
    let spec = WorkloadSpec::ycsb('c', 100).unwrap();
    let mut numbers = Vec::new();
    for rank in 0..3 {
        let shared = SharedState::strided(100, rank, 3);
        let mut fill = spec.fill_stream(6, 0, &shared);
        let mine: Vec<u64> = (0..1000).map(|_| fill.next_op().key().number).collect();
        assert!(mine.iter().all(|n| (n - 100) % 3 == rank), "rank {rank}: {:?}", &mine[..5]);
        assert!(shared.issued() > *mine.last().unwrap());
        numbers.extend(mine);
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (100..3100).collect::<Vec<u64>>());
    // One party is the plain state.
    let one = SharedState::strided(100, 0, 1);
    let mut fill = spec.fill_stream(6, 0, &one);
    assert_eq!((0..3).map(|_| fill.next_op().key().number).collect::<Vec<_>>(), vec![100, 101, 102]);
    assert_eq!(one.issued(), 103);
}

#[test]
fn acknowledged_inserts_become_visible_in_order() {
    let spec = WorkloadSpec::ycsb('d', 10).unwrap();
    let shared = SharedState::with_acknowledgements(10);
    let mut fill = spec.fill_stream(1, 0, &shared);
    let inserted: Vec<u64> = (0..3).map(|_| fill.next_op().key().number).collect();
    assert_eq!(inserted, vec![10, 11, 12]);
    assert_eq!((shared.issued(), shared.visible()), (13, 10));
    shared.acknowledge(11);
    assert_eq!(shared.visible(), 10, "11 waits for 10");
    shared.acknowledge(10);
    assert_eq!(shared.visible(), 12);
    shared.acknowledge(12);
    assert_eq!(shared.visible(), 13);
    // Reads never target unacknowledged keys.
    let _ = fill.next_op(); // issues 13, unacknowledged
    let latest_reads = WorkloadSpec::custom(
        "latest-reads",
        Mix { read: 1.0, ..Mix::default() },
        Distribution::Latest { theta: 0.99 },
        10,
    );
    let mut reads = latest_reads.stream(2, 1, &shared);
    let mut newest = 0;
    for _ in 0..5000 {
        let number = reads.next_op().key().number;
        assert!(number < 13, "read of unacknowledged key {number}");
        newest += u64::from(number == 12);
    }
    assert!(newest > 1000, "the newest acknowledged key is the hottest ({newest})");
    // Without acknowledgements, inserts are visible at once and acknowledge is a no-op.
    let plain = SharedState::new(0);
    let mut s = WorkloadSpec::ycsb_load(0).stream(0, 0, &plain);
    let _ = s.next_op();
    plain.acknowledge(0);
    assert_eq!(plain.visible(), 1);
}

// --- specs as configuration ----------------------------------------------------------------------

#[test]
fn specs_round_trip_and_reject_bad_configs() {
    let spec = WorkloadSpec::custom("custom", mixed(), Distribution::Zipfian { theta: 0.8 }, 1234);
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<WorkloadSpec>(&json).unwrap(), spec);
    let with_unknown = json.replacen("\"record_count\"", "\"recordcount\"", 1);
    assert!(serde_json::from_str::<WorkloadSpec>(&with_unknown).is_err());
    let bad_dist = json.replacen("\"theta\":0.8", "\"theta\":0.8,\"skew\":1", 1);
    assert!(serde_json::from_str::<WorkloadSpec>(&bad_dist).is_err());

    let check = |f: &dyn Fn(&mut WorkloadSpec), needle: &str| {
        let mut s = spec.clone();
        f(&mut s);
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains(needle), "`{err}` should mention `{needle}`");
        assert!(!err.contains('\n'));
    };
    check(&|s| s.distribution = Distribution::ScrambledZipfian { theta: 1.0 }, "theta");
    check(&|s| s.distribution = Distribution::Latest { theta: -0.1 }, "theta");
    check(&|s| s.mix = Mix::default(), "mix is empty");
    check(&|s| s.mix.delete = -1.0, "delete");
    check(&|s| s.value_bytes = 0, "value size");
    check(&|s| s.scan_length = ScanLength { min: 5, max: 4 }, "scan length");
    check(&|s| s.key_format = KeyFormat::Email { bytes: 300, domain_first: false }, "key size");
    assert!(spec.validate().is_ok());
}

// --- traces --------------------------------------------------------------------------------------

#[test]
fn trace_reader_accepts_a_valid_trace() {
    let text = "# a trace\n\nget 0001020304050607\nset AABBccdd 100\n  del 00   \n\tscan 0000000000000001\t50\n# end\nset 0a 0\r\n";
    let ops = read_trace(text).unwrap();
    assert_eq!(
        ops,
        vec![
            TraceOp::Get { key: vec![0, 1, 2, 3, 4, 5, 6, 7] },
            TraceOp::Set { key: vec![0xaa, 0xbb, 0xcc, 0xdd], value_bytes: 100 },
            TraceOp::Del { key: vec![0] },
            TraceOp::Scan { key: vec![0, 0, 0, 0, 0, 0, 0, 1], count: 50 },
            TraceOp::Set { key: vec![0x0a], value_bytes: 0 },
        ]
    );
    assert_eq!(read_trace(&write_trace(&ops)).unwrap(), ops);
    assert_eq!(ops[1].to_string(), "set aabbccdd 100");
    assert!(read_trace("").unwrap().is_empty());
    // Replay: set is an upsert of a verifiable value.
    let op = ops[1].to_workload_op(version_of(0, 1, 2));
    assert_eq!(op.kind(), OpKind::Insert);
    assert_eq!(
        value_version(trace_key_number(&[0xaa, 0xbb, 0xcc, 0xdd]), op.value().unwrap()),
        Some(version_of(0, 1, 2))
    );
    assert_eq!(
        ops[3].to_workload_op(0),
        WorkloadOp::Scan {
            start: Key { number: trace_key_number(&[0, 0, 0, 0, 0, 0, 0, 1]), bytes: vec![0, 0, 0, 0, 0, 0, 0, 1] },
            limit: 50
        }
    );
    let parts = partition_trace(&ops, 2);
    assert_eq!(parts[0], vec![ops[0].clone(), ops[2].clone(), ops[4].clone()]);
    assert_eq!(parts[1], vec![ops[1].clone(), ops[3].clone()]);
}

#[test]
fn trace_reader_rejects_malformed_lines_with_their_number() {
    let long_key = "ab".repeat(257);
    let cases: Vec<(String, usize, &str)> = vec![
        ("get 00\nput 00 1\n".into(), 2, "unknown operation `put`"),
        ("GET 00\n".into(), 1, "unknown operation `GET`"),
        ("# c\n\nget\n".into(), 3, "expected `get <key-hex>`"),
        ("get 00 11\n".into(), 1, "expected `get <key-hex>`"),
        ("set 00\n".into(), 1, "expected `set <key-hex> <value-bytes>`"),
        ("get 0\n".into(), 1, "odd number of hex digits"),
        ("get 0g\n".into(), 1, "not hexadecimal"),
        (format!("get 00\nget 00\nget {long_key}\n"), 3, "more than 256"),
        ("set 00 -1\n".into(), 1, "not a decimal number"),
        ("set 00 1x\n".into(), 1, "not a decimal number"),
        ("set 00 2000000\n".into(), 1, "out of range"),
        ("scan 00 0\n".into(), 1, "out of range"),
        ("scan 00 99999999999999999999999\n".into(), 1, "out of range"),
        ("get 00 # trailing comment\n".into(), 1, "expected `get <key-hex>`"),
    ];
    for (text, line, needle) in cases {
        let err = read_trace(&text).unwrap_err();
        assert_eq!(err.line, line, "{text:?}: {err}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("trace line {line}: ")), "{message}");
        assert!(message.contains(needle), "{text:?}: `{message}` should contain `{needle}`");
        assert!(!message.contains('\n'));
    }
}

#[test]
fn synthetic_twitter_traces_read_back_with_documented_statistics() {
    for profile in [SyntheticTrace::twitter_cluster8(), SyntheticTrace::twitter_cluster9()] {
        assert!(profile.validate().is_ok());
        let n = 100_000usize;
        let text = profile.write(17, n);
        assert_eq!(text, profile.write(17, n), "deterministic");
        let mut small = profile.clone();
        small.distinct_keys = 1000;
        assert_ne!(small.generate(17, 1000), small.generate(18, 1000), "the seed matters");
        let ops = read_trace(&text).unwrap();
        assert_eq!(ops, profile.generate(17, n));
        let gets = ops.iter().filter(|op| matches!(op, TraceOp::Get { .. })).count() as u64;
        assert_within(&format!("{} gets", profile.name), gets, n as u64, profile.get_fraction, 5.0);
        for op in &ops {
            assert_eq!(op.key().len(), profile.key_bytes);
            if let TraceOp::Set { value_bytes, .. } = op {
                assert_eq!(*value_bytes, profile.value_bytes);
            }
        }
        // Skew: the hottest keys' shares are the Zipf(alpha) law's.
        for rank in 0..3 {
            let key = profile.key_of_rank(rank);
            let c = ops.iter().filter(|op| op.key() == key.as_slice()).count() as u64;
            assert_within(
                &format!("{} rank {}", profile.name, rank + 1),
                c,
                n as u64,
                profile.rank_probability(rank),
                5.0,
            );
        }
        let p0 = profile.rank_probability(0);
        assert!((0.45..0.6).contains(&p0), "alpha ~1.7: the hottest key takes about half the requests ({p0})");
        let distinct: BTreeSet<&[u8]> = ops.iter().map(|op| op.key()).collect();
        assert!(distinct.len() < 5000, "{} distinct keys", distinct.len());
    }
    assert_eq!(SyntheticTrace::twitter_cluster8().get_fraction, 0.5);
    assert_eq!(SyntheticTrace::twitter_cluster9().get_fraction, 0.99);
    // Longer keys keep a unique 8-byte tail after a namespace prefix.
    let mut long = SyntheticTrace::twitter_cluster9();
    long.key_bytes = 32;
    long.distinct_keys = 1000;
    let keys: BTreeSet<Vec<u8>> = long.preload_keys().collect();
    assert_eq!(keys.len(), 1000);
    assert!(keys.iter().all(|k| k.len() == 32 && k.starts_with(b"tw:tw:")));
    long.zipf_alpha = 0.0;
    assert!(long.validate().unwrap_err().to_string().contains("alpha"));
}

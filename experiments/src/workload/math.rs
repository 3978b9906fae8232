//! `ln`, `exp`, `x^y` and ζ(n, θ) from IEEE-754 `+ - × ÷` only, so that every platform computes
//! the same bits (std's `ln`/`exp`/`powf` call the platform's libm, whose last bits differ
//! between implementations).

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

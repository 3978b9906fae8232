//! Key numbers to key bytes: integers (in YCSB's hashed or dense order), padded integers, and
//! e-mail-like strings.

use super::*;

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

    pub(crate) fn validate(self) -> Result<(), SpecError> {
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
pub(crate) const SYLLABLES: [&str; 48] = [
    "an", "bel", "ca", "dan", "el", "fa", "gio", "han", "ia", "jo", "ka", "li", "ma", "na", "ol", "pe", "qi", "ra",
    "sa", "ta", "ul", "vi", "wen", "xu", "ya", "zo", "mar", "tin", "son", "lee", "kim", "chen", "wang", "ber", "ste",
    "rob", "ert", "mi", "chel", "nor", "ri", "ko", "yu", "ami", "ron", "lu", "cas", "dre",
];

/// Domains with relative weights (a plausible mix, not measured).
pub(crate) const DOMAINS: [(&str, u64); 16] = [
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
pub(crate) fn base36(mut n: u64) -> Vec<u8> {
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

pub(crate) fn email_capacity(bytes: usize) -> u64 {
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

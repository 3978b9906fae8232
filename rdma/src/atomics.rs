//! The arithmetic of RDMA atomics, shared by every backend (and by emulations), so that
//! "what a masked CAS does" is written down exactly once.
//!
//! Words are little-endian `u64`s in the responder's memory (x86 hosts, as on every testbed
//! of the seed papers).

/// Plain compare-and-swap: the new memory word, given the old one.
pub const fn cas(old: u64, expect: u64, swap: u64) -> u64 {
    if old == expect { swap } else { old }
}

/// Fetch-and-add, wrapping at 2^64.
pub const fn faa(old: u64, add: u64) -> u64 {
    old.wrapping_add(add)
}

/// ConnectX masked compare-and-swap: compare only the bits of `compare_mask`; on equality replace
/// only the bits of `swap_mask`. The verb always returns the whole old word.
pub const fn masked_cas(old: u64, compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) -> u64 {
    if (old ^ compare) & compare_mask == 0 { (old & !swap_mask) | (swap & swap_mask) } else { old }
}

/// ConnectX masked fetch-and-add: the word is a vector of fields, and a set bit of
/// `boundary_mask` marks the most significant bit of a field, so a carry out of that bit is
/// dropped instead of flowing into the next field. `boundary_mask == 0` is a plain 64-bit FAA;
/// `boundary_mask == 1 << 63 | 1 << 31` adds two independent 32-bit counters.
pub const fn masked_faa(old: u64, add: u64, boundary_mask: u64) -> u64 {
    // Add without carries, then propagate carries bit by bit, cutting them at field boundaries.
    // `carry` holds the carries into each bit position; a carry out of a boundary bit is masked
    // away before it is shifted into the next field.
    let mut sum = old ^ add;
    let mut carry = (old & add) & !boundary_mask;
    while carry != 0 {
        let shifted = carry << 1;
        let next_carry = (sum & shifted) & !boundary_mask;
        sum ^= shifted;
        carry = next_carry;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_cas_compares_and_swaps_only_masked_bits() {
        // Compare the low byte only; swap the high byte only.
        let old = 0x1100_0000_0000_00aa;
        assert_eq!(masked_cas(old, 0xffaa, 0xff, 0x2200_0000_0000_0000, 0xff00_0000_0000_0000), 0x2200_0000_0000_00aa);
        // Mismatch in a compared bit: memory unchanged.
        assert_eq!(masked_cas(old, 0xab, 0xff, 0, u64::MAX), old);
        // An all-ones mask is plain CAS.
        assert_eq!(masked_cas(5, 5, u64::MAX, 9, u64::MAX), cas(5, 5, 9));
        assert_eq!(masked_cas(5, 6, u64::MAX, 9, u64::MAX), cas(5, 6, 9));
    }

    #[test]
    fn masked_faa_cuts_carries_at_boundaries() {
        // Two 32-bit fields: the low field wraps without touching the high field.
        let fields = (1u64 << 63) | (1u64 << 31);
        let old = (7u64 << 32) | 0xffff_ffff;
        assert_eq!(masked_faa(old, 1, fields), 7u64 << 32);
        // Adding to both fields at once.
        assert_eq!(masked_faa((1 << 32) | 2, (3 << 32) | 4, fields), (4 << 32) | 6);
        // No boundaries: plain wrapping add, carries included.
        assert_eq!(masked_faa(u64::MAX, 2, 0), 1);
        assert_eq!(masked_faa(0x00ff, 1, 0), 0x0100);
        // Every bit a field: a pure XOR.
        assert_eq!(masked_faa(0b1011, 0b0110, u64::MAX), 0b1101);
    }

    #[test]
    fn masked_faa_matches_per_field_reference() {
        // Reference: split into fields, add each modulo its width.
        fn reference(old: u64, add: u64, boundary: u64) -> u64 {
            let mut out = 0u64;
            let mut start = 0u32;
            for bit in 0..64u32 {
                if boundary & (1 << bit) != 0 || bit == 63 {
                    let width = bit - start + 1;
                    let mask = if width == 64 { u64::MAX } else { ((1u64 << width) - 1) << start };
                    let field = ((old & mask) >> start).wrapping_add((add & mask) >> start);
                    out |= (field << start) & mask;
                    start = bit + 1;
                }
            }
            out
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            // xorshift: deterministic operands.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (old, add, boundary) = (x, x.rotate_left(17) ^ 0x5555, x.rotate_left(31) & x.rotate_left(5));
            assert_eq!(
                masked_faa(old, add, boundary),
                reference(old, add, boundary),
                "{old:#x} {add:#x} {boundary:#x}"
            );
        }
    }
}

//! CRC-64/WE, the checksum SMART's leaves, RACE's and HStore's KV blocks and Clover's versions
//! carry (each over its own fields).

const fn crc64_table() -> [u64; 256] {
    const POLY: u64 = 0x42F0_E1EB_A9EA_3693;
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u64) << 56;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & (1 << 63) != 0 { (crc << 1) ^ POLY } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC64: [u64; 256] = crc64_table();

/// CRC-64/WE (poly 0x42F0E1EBA9EA3693, init and xorout all ones, not reflected) over `parts`.
pub fn crc64(parts: &[&[u8]]) -> u64 {
    let mut crc = !0u64;
    for part in parts {
        for &b in *part {
            crc = CRC64[((crc >> 56) as u8 ^ b) as usize] ^ (crc << 8);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_we_check_value() {
        // The catalogue's check value of CRC-64/WE over "123456789".
        assert_eq!(crc64(&[b"123456789"]), 0x62EC_59E3_F1A4_F00A);
        // Parts are one stream.
        assert_eq!(crc64(&[b"1234", b"", b"56789"]), crc64(&[b"123456789"]));
    }
}

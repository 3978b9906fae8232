//! Owned verb buffers.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// A buffer a verb takes by value and hands back on completion.
///
/// Ownership is the point: a posted verb always executes, even if its future is dropped, and on
/// hardware the NIC writes into (or reads from) the buffer until the completion arrives. Lending a
/// `&mut [u8]` across an `.await` would let safe code reuse memory the NIC still owns. The
/// simulator stores the bytes here; the real backend copies them to and from registered memory
/// (or, with a registered pool, owns registered memory directly).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Buf {
    bytes: Vec<u8>,
}

impl Buf {
    /// A buffer of `len` zero bytes (the length a READ fetches).
    pub fn zeroed(len: usize) -> Buf {
        Buf { bytes: vec![0; len] }
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.bytes
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// Resizes in place, zero-filling any new bytes: reusing a returned buffer for the next verb
    /// avoids an allocation on hot paths.
    pub fn resize(&mut self, len: usize) {
        self.bytes.resize(len, 0);
    }

    /// Reads the little-endian u64 at byte `at` (the responder's byte order for atomics).
    pub fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"))
    }
}

impl From<Vec<u8>> for Buf {
    fn from(bytes: Vec<u8>) -> Buf {
        Buf { bytes }
    }
}

impl From<&[u8]> for Buf {
    fn from(bytes: &[u8]) -> Buf {
        Buf { bytes: bytes.to_vec() }
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 16;
        write!(f, "Buf({} bytes:", self.bytes.len())?;
        for b in self.bytes.iter().take(SHOWN) {
            write!(f, " {b:02x}")?;
        }
        if self.bytes.len() > SHOWN {
            write!(f, " ..")?;
        }
        write!(f, ")")
    }
}

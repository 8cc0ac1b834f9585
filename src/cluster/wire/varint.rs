//! The byte-level primitives of a batch message: LEB128 varints, zigzag signed integers and
//! a reader that never reads past its slice, so a damaged body is an error and not a panic.

use super::WireError;

/// Longest LEB128 encoding of a u64.
const MAX_VARINT_LEN: usize = 10;

/// Appends `v` as an LEB128 varint: seven bits a byte, low bits first, the high bit set on
/// every byte but the last.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`put_varint`] writes for `v`.
pub(super) fn varint_len(v: u64) -> usize {
    // 1 for 0..=127, then one more per started group of 7 bits.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Maps signed to unsigned so that small magnitudes of either sign take few varint bytes:
/// 0, -1, 1, -2, ... become 0, 1, 2, 3, ...
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub(super) fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Appends `v` zigzagged, as a varint.
pub(super) fn put_signed(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

/// A cursor over a message body. Every read checks the remaining length first; offsets in
/// errors are from the start of the body.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Offset of the next byte to read.
    pub(super) fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes; `what` names the field for the error.
    pub(super) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::BodyEndsEarly {
                what,
                offset: self.pos,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    pub(super) fn f64_bits(&mut self, what: &'static str) -> Result<u64, WireError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("took 8 bytes")))
    }

    /// An LEB128 varint of at most 10 bytes whose value fits 64 bits.
    pub(super) fn varint(&mut self, what: &'static str) -> Result<u64, WireError> {
        let start = self.pos;
        let mut v = 0u64;
        for i in 0..MAX_VARINT_LEN {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(WireError::BodyEndsEarly {
                    what,
                    offset: start,
                });
            };
            self.pos += 1;
            // The tenth byte carries bit 63 only.
            if i == MAX_VARINT_LEN - 1 && b > 1 {
                return Err(WireError::BadVarint {
                    what,
                    offset: start,
                });
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError::BadVarint {
            what,
            offset: start,
        })
    }

    /// A varint that must be at most `max`, as a usize.
    pub(super) fn varint_at_most(
        &mut self,
        max: u64,
        what: &'static str,
    ) -> Result<usize, WireError> {
        let offset = self.pos;
        let v = self.varint(what)?;
        if v > max {
            return Err(WireError::OutOfRange {
                what,
                value: v,
                max,
                offset,
            });
        }
        Ok(v as usize)
    }

    /// A zigzagged varint.
    pub(super) fn signed(&mut self, what: &'static str) -> Result<i64, WireError> {
        Ok(unzigzag(self.varint(what)?))
    }
}

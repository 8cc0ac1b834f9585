//! A distribution bucket's histogram in a period file's histogram area (see
//! [`super::format`]): a fixed-size cell of atomic words beside the bucket's record, holding
//! a `u16` length and that many bytes of [`crate::histogram::Histogram::encode`], so a
//! cell of all zeros is a bucket without one. The record's seqlock covers the cell: the
//! writer stores it while the record's update-in-flight bit is set
//! ([`super::mapped_cell::BucketCell::add_with`]), and readers copy it inside the record's
//! read ([`super::mapped_cell::BucketCell::read_with`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::histogram::{DecodeError, Histogram};

/// The largest cell in words (1024 bytes): what a writer's image in `writers.state` holds.
pub(crate) const MAX_WORDS: usize = 128;
const _: () = assert!(MAX_WORDS == super::writer_state::IMAGE_WORDS);

/// Copies a cell's words out (`Relaxed` loads: the record's seqlock orders them).
#[inline]
pub(super) fn load(cell: &[AtomicU64], out: &mut [u64]) {
    for (o, w) in out.iter_mut().zip(cell) {
        *o = w.load(Ordering::Relaxed);
    }
}

/// Stores words into a cell. Only its writer calls this, between the record's update-in-flight
/// stores, or while no writer runs (repair, restore).
#[inline]
pub(super) fn store(cell: &[AtomicU64], words: &[u64]) {
    for (w, &v) in cell.iter().zip(words) {
        w.store(v, Ordering::Relaxed);
    }
}

/// The histogram a cell's words hold; `Ok(None)` for an empty cell.
///
/// # Errors
/// A [`DecodeError`] when the words are not a histogram (a damaged cell).
pub(crate) fn decode(words: &[u64]) -> Result<Option<Histogram>, DecodeError> {
    let bytes = to_bytes(words);
    let len = usize::from(u16::from_le_bytes([bytes[0], bytes[1]]));
    if len == 0 {
        return Ok(None);
    }
    let body = bytes
        .get(2..2 + len)
        .ok_or(DecodeError::Truncated(bytes.len()))?;
    let (histogram, used) = Histogram::decode(body)?;
    if used != len {
        return Err(DecodeError::Malformed(used));
    }
    Ok(Some(histogram))
}

/// Encodes `histogram` into `words` (the cell's size), reducing its scale until it fits;
/// `None`, with `words` untouched, when it cannot fit at the coarsest scale.
pub(crate) fn encode(histogram: &mut Histogram, words: &mut [u64]) -> Option<()> {
    let capacity = words.len() * 8 - 2;
    let mut body = Vec::with_capacity(capacity);
    histogram.encode_within(capacity, &mut body)?;
    let mut bytes = vec![0u8; words.len() * 8];
    bytes[..2].copy_from_slice(&(body.len() as u16).to_le_bytes());
    bytes[2..2 + body.len()].copy_from_slice(&body);
    for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        *w = u64::from_le_bytes(b.try_into().expect("8 bytes"));
    }
    Some(())
}

fn to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_round_trip_and_zero_is_empty() {
        let mut words = [0u64; 32];
        assert_eq!(decode(&words), Ok(None));
        let mut h = Histogram::default();
        for v in [1.0, 2.5, 2.5, 1000.0, -3.0, 0.0] {
            h.record(v);
        }
        encode(&mut h, &mut words).expect("fits");
        assert_eq!(decode(&words), Ok(Some(h)));
    }

    #[test]
    fn a_full_cell_reduces_the_scale_and_keeps_the_count() {
        let mut words = [0u64; 32];
        let mut h = Histogram::default();
        for i in 0..5000 {
            h.record(1.0 + f64::from(i) * 0.37);
        }
        encode(&mut h, &mut words).expect("fits");
        let back = decode(&words).expect("decodes").expect("not empty");
        assert_eq!(back.count(), 5000);
        assert!(back.scale() < crate::histogram::DEFAULT_SCALE);
    }

    #[test]
    fn damaged_cells_are_errors() {
        let mut words = [0u64; 32];
        words[0] = 250; // a length with nothing behind it
        assert!(decode(&words).is_err());
        words[0] = 300 | (1 << 16); // longer than the cell
        assert!(decode(&words).is_err());
    }
}

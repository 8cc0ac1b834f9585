//! A distribution bucket's histogram in a period file's histogram area (see
//! [`super::format`]): a fixed-size cell of atomic words beside the bucket's record, holding
//! a `u16` length and that many bytes of [`crate::histogram::Histogram::encode`], so a
//! cell of all zeros is a bucket without one. A cell's words may lie apart (a run's cells
//! interleaved: [`super::format::CellLayout`]); [`Cell`] walks them in order. The record's seqlock covers the cell: the
//! writer stores it while the record's update-in-flight bit is set
//! ([`super::mapped_cell::BucketCell::update_with`]), and readers copy it inside the record's
//! read ([`super::mapped_cell::BucketCell::read_with`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::histogram::{DecodeError, Histogram};

/// The largest cell in words (1024 bytes): what a writer's image in `writers.state` holds.
pub(crate) const MAX_WORDS: usize = super::format::MAX_HISTOGRAM_CELL / 8;
const _: () = assert!(MAX_WORDS == super::writer_state::IMAGE_WORDS);

/// Room to copy one cell out and lay its bytes out. A read of many cells reuses one, so it
/// does not clear 2 KiB per cell (as much time as the rest of a small cell's read).
pub(crate) struct CellBuffer {
    pub(super) words: [u64; MAX_WORDS],
    pub(super) bytes: [u8; MAX_WORDS * 8],
}

impl Default for CellBuffer {
    fn default() -> CellBuffer {
        CellBuffer {
            words: [0; MAX_WORDS],
            bytes: [0; MAX_WORDS * 8],
        }
    }
}

/// One cell's words in a mapped histogram area: word `j` is `words[first + j * stride]`.
#[derive(Clone, Copy)]
pub(super) struct Cell<'a> {
    words: &'a [AtomicU64],
    first: usize,
    stride: usize,
    len: usize,
}

impl<'a> Cell<'a> {
    /// A cell whole in one place.
    pub(super) fn whole(words: &'a [AtomicU64]) -> Cell<'a> {
        Cell {
            words,
            first: 0,
            stride: 1,
            len: words.len(),
        }
    }

    /// The `b`-th of the `stride` cells interleaved word by word in `run`.
    pub(super) fn interleaved(run: &'a [AtomicU64], b: usize, stride: usize) -> Cell<'a> {
        Cell {
            words: run,
            first: b,
            stride,
            len: run.len() / stride,
        }
    }

    /// Its length in words.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Its word `j`.
    #[inline]
    pub(super) fn word(&self, j: usize) -> &'a AtomicU64 {
        &self.words[self.first + j * self.stride]
    }

    /// Stores `words` into its first words. Only its writer calls this, between the
    /// record's update-in-flight stores, or while no writer runs (repair, restore).
    #[inline]
    pub(super) fn store(&self, words: &[u64]) {
        for (j, &v) in words.iter().enumerate().take(self.len) {
            self.word(j).store(v, Ordering::Relaxed);
        }
    }

    /// Sets its words from `j` on to zero.
    pub(super) fn store_zeros_from(&self, j: usize) {
        for j in j..self.len {
            self.word(j).store(0, Ordering::Relaxed);
        }
    }

    /// Copies the words that hold its histogram (the length word, then as many as the
    /// length says, at most the cell's) into `out`; returns how many. `Relaxed` loads: the
    /// record's seqlock orders them, and a length torn by a concurrent update only makes the
    /// copy the wrong length for a snapshot the seqlock then discards.
    #[inline]
    pub(super) fn load_used(&self, out: &mut [u64]) -> usize {
        if self.len == 0 {
            return 0;
        }
        out[0] = self.word(0).load(Ordering::Relaxed);
        let words = used_words(&out[..self.len.min(out.len())]);
        for (j, o) in out.iter_mut().enumerate().take(words).skip(1) {
            *o = self.word(j).load(Ordering::Relaxed);
        }
        words
    }
}

/// Words of `words` (a cell's, as [`encode`] or [`Cell::load_used`] left them) that its
/// length word says are in use: at least the length word itself.
#[inline]
pub(super) fn used_words(words: &[u64]) -> usize {
    let len = words.first().map_or(0, |w| (w & 0xffff) as usize);
    (2 + len).div_ceil(8).clamp(1, words.len())
}

/// The encoding a cell's words (`words`, as [`Cell::load_used`] copied them) hold, laid out in
/// `bytes`; `Ok(None)` for an empty cell.
///
/// # Errors
/// [`DecodeError::Truncated`] when the length says more than the words hold.
#[inline]
pub(crate) fn body<'a>(
    words: &[u64],
    bytes: &'a mut [u8],
) -> Result<Option<&'a [u8]>, DecodeError> {
    let Some(&first) = words.first() else {
        return Ok(None);
    };
    let len = (first & 0xffff) as usize;
    if len == 0 {
        return Ok(None);
    }
    if 2 + len > words.len() * 8 || 2 + len > bytes.len() {
        return Err(DecodeError::Truncated(words.len() * 8));
    }
    for (i, word) in words.iter().enumerate() {
        // A fixed 8-byte store: a slice of unknown length would be a call to memcpy a word.
        let chunk: &mut [u8; 8] = (&mut bytes[i * 8..i * 8 + 8]).try_into().expect("8 bytes");
        *chunk = word.to_le_bytes();
    }
    Ok(Some(&bytes[2..2 + len]))
}

/// The histogram a cell's words hold; `Ok(None)` for an empty cell.
///
/// # Errors
/// A [`DecodeError`] when the words are not a histogram (a damaged cell).
pub(crate) fn decode(words: &[u64]) -> Result<Option<Histogram>, DecodeError> {
    let mut bytes = [0u8; MAX_WORDS * 8];
    let Some(body) = body(words, &mut bytes)? else {
        return Ok(None);
    };
    let (histogram, used) = Histogram::decode(body)?;
    if used != body.len() {
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

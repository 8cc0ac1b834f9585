//! The columns of a version 5 slot (see [`super`]'s layout): a column whose values are all
//! equal as one value, any other as a chunk of pco's wrapped format without the wrapped
//! file's header (one for every chunk of the file, [`PCO_WRAPPED_HEADER`]); and lists of
//! bucket indices as varints. Every length is known to the reader from what it read
//! before, so none is stored.

use crate::histogram::{get_varint, put_varint};

/// The header of pco's wrapped format, 4.1, which pco 1 writes and every chunk of a version 5
/// file is read as. It is stored nowhere: a pco that writes another format makes
/// [`tests::pco_writes_the_wrapped_format_version_5_reads`] fail, and needs a new file
/// version.
pub(super) const PCO_WRAPPED_HEADER: [u8; 2] = [4, 1];

/// Column form: every value is the same; its bits follow as one varint.
pub(super) const COLUMN_CONSTANT: u8 = 0;
/// Column form: a wrapped pco chunk follows, its metadata and one page.
pub(super) const COLUMN_PCO: u8 = 1;

/// A number a version 5 column holds, with the bits its constant form stores as a varint:
/// small counts and offsets take a byte or two.
pub(super) trait ColumnValue: pco::data_types::Number {
    fn bits(self) -> u64;
    fn from_bits(bits: u64) -> Self;
}

impl ColumnValue for u64 {
    fn bits(self) -> u64 {
        self
    }
    fn from_bits(bits: u64) -> Self {
        bits
    }
}

impl ColumnValue for i64 {
    /// Zigzag, so small magnitudes of either sign stay short.
    fn bits(self) -> u64 {
        ((self << 1) ^ (self >> 63)) as u64
    }
    fn from_bits(bits: u64) -> Self {
        ((bits >> 1) as i64) ^ -((bits & 1) as i64)
    }
}

impl ColumnValue for f64 {
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

/// Appends `values` as a column: nothing for none, the constant form when all are equal bit
/// for bit, else a pco chunk of one page.
pub(super) fn push_column<T: ColumnValue>(
    out: &mut Vec<u8>,
    values: &[T],
) -> pco::errors::PcoResult<()> {
    let Some(&first) = values.first() else {
        return Ok(());
    };
    if values.iter().all(|&v| v.bits() == first.bits()) {
        out.push(COLUMN_CONSTANT);
        put_varint(out, first.bits());
    } else {
        out.push(COLUMN_PCO);
        push_chunk(out, values, &[values.len()])?;
    }
    Ok(())
}

/// Appends a wrapped pco chunk of `values` cut into pages of `pages` values (all above 0,
/// summing to `values.len()`): its metadata and the first page. The compressor returned
/// writes the others ([`push_page`]).
pub(super) fn push_chunk<T: pco::data_types::Number>(
    out: &mut Vec<u8>,
    values: &[T],
    pages: &[usize],
) -> pco::errors::PcoResult<pco::wrapped::ChunkCompressor> {
    let config =
        pco::ChunkConfig::default().with_paging_spec(pco::PagingSpec::Exact(pages.to_vec()));
    let mut chunk = pco::wrapped::FileCompressor::default().chunk_compressor(values, &config)?;
    chunk.write_meta(&mut *out)?;
    chunk.write_page(0, &mut *out)?;
    Ok(chunk)
}

/// The most bytes a column or chunk of `n` values takes, from pco's own guarantee (at least
/// the 10 bytes of a constant's varint).
pub(super) fn chunk_bound(n: usize) -> usize {
    pco::wrapped::guarantee::chunk_size::<u64>(n).max(10)
}

/// Appends page `page` of `chunk`.
pub(super) fn push_page(
    out: &mut Vec<u8>,
    chunk: &mut pco::wrapped::ChunkCompressor,
    page: usize,
) -> pco::errors::PcoResult<()> {
    chunk.write_page(page, &mut *out)?;
    Ok(())
}

/// The column of `n` values at the start of `rest` ([`push_column`]); `what` names it in
/// the reason it does not decode.
pub(super) fn take_column<T: ColumnValue>(
    rest: &mut &[u8],
    n: usize,
    what: &str,
) -> Result<Vec<T>, String> {
    if n == 0 {
        return Ok(Vec::new());
    }
    match take_byte(rest, what)? {
        COLUMN_CONSTANT => Ok(vec![T::from_bits(take_varint(rest, what)?); n]),
        COLUMN_PCO => {
            let mut chunk = take_chunk::<T>(rest, what)?;
            take_page(&mut chunk, rest, n, what)
        }
        other => Err(format!("{what} column of unknown form {other}")),
    }
}

/// The metadata of a wrapped pco chunk at the start of `rest`.
pub(super) fn take_chunk<T: pco::data_types::Number>(
    rest: &mut &[u8],
    what: &str,
) -> Result<pco::wrapped::ChunkDecompressor<T>, String> {
    let (file, _) = pco::wrapped::FileDecompressor::new(&PCO_WRAPPED_HEADER[..])
        .map_err(|e| format!("pco format: {e}"))?;
    let (chunk, tail) = file
        .chunk_decompressor::<T, _>(*rest)
        .map_err(|e| format!("{what} column: {e}"))?;
    *rest = tail;
    Ok(chunk)
}

/// The next page of `chunk`, `n` values, at the start of `rest`.
pub(super) fn take_page<T: pco::data_types::Number>(
    chunk: &mut pco::wrapped::ChunkDecompressor<T>,
    rest: &mut &[u8],
    n: usize,
    what: &str,
) -> Result<Vec<T>, String> {
    let bad = |e: pco::errors::PcoError| format!("{what} column: {e}");
    let mut page = chunk.page_decompressor(*rest, n).map_err(bad)?;
    let mut out = vec![T::default(); n];
    let progress = page.read(&mut out).map_err(bad)?;
    if progress.n_processed != n || !progress.finished {
        return Err(format!("{what} column holds fewer than {n} values"));
    }
    *rest = page.into_src();
    Ok(out)
}

/// Appends an ascending list of bucket indices: its length, then the first index and each
/// later one's gap from the one before less one, all varints.
pub(super) fn push_list(out: &mut Vec<u8>, list: &[u32]) {
    put_varint(out, list.len() as u64);
    let mut next = 0;
    for &i in list {
        put_varint(out, u64::from(i - next));
        next = i + 1;
    }
}

/// The list at the start of `rest` ([`push_list`]), every index below `buckets`.
pub(super) fn take_list(rest: &mut &[u8], buckets: u32, what: &str) -> Result<Vec<u32>, String> {
    let len = take_varint(rest, what)?;
    if len > u64::from(buckets) {
        return Err(format!("{len} {what} buckets in {buckets}"));
    }
    let mut list = Vec::with_capacity(len as usize);
    let mut next = 0u64;
    for _ in 0..len {
        let i = next.saturating_add(take_varint(rest, what)?);
        if i >= u64::from(buckets) {
            return Err(format!("{what} list runs past the period"));
        }
        list.push(i as u32);
        next = i + 1;
    }
    Ok(list)
}

pub(super) fn take_byte(rest: &mut &[u8], what: &str) -> Result<u8, String> {
    let (&byte, tail) = rest
        .split_first()
        .ok_or_else(|| format!("{what} cut short"))?;
    *rest = tail;
    Ok(byte)
}

fn take_varint(rest: &mut &[u8], what: &str) -> Result<u64, String> {
    let mut at = 0;
    let v = get_varint(rest, &mut at).map_err(|e| match e {
        crate::histogram::DecodeError::Truncated(_) => format!("{what} cut short"),
        _ => format!("{what}: malformed varint"),
    })?;
    *rest = &rest[at..];
    Ok(v)
}

#[cfg(test)]
mod tests;

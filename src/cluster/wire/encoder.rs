//! Writing a batch message: samples grouped by key, keys sorted and prefix-shared (and
//! deflated when that is smaller), each key's columns in their smallest encoding, the
//! header and checksum last.

use super::columns::{TsPlan, ValuePlan};
use super::memo::SectionMemo;
use super::varint::{put_signed, put_varint, varint_len};
use super::*;
use crate::engine::SampleBatch;
use crate::registry::SeriesKey;
use miniz_oxide::deflate::core::{
    compress, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush, TDEFLStatus,
};

/// Checks what [`encode`] cannot write: bad series indexes and batches over the limits.
fn check_encodable(batch: &SampleBatch) -> Result<(), WireError> {
    if batch.samples.len() > MAX_SAMPLES {
        return Err(too_many("samples", batch.samples.len(), MAX_SAMPLES));
    }
    if batch.series.len() > MAX_SERIES {
        return Err(too_many("series", batch.series.len(), MAX_SERIES));
    }
    let mut key_bytes = 0;
    for s in &batch.series {
        if s.key.len() > SeriesKey::MAX_LEN {
            return Err(too_many("bytes in a key", s.key.len(), SeriesKey::MAX_LEN));
        }
        key_bytes += s.key.len();
    }
    if key_bytes > MAX_KEY_BYTES {
        return Err(too_many("key bytes", key_bytes, MAX_KEY_BYTES));
    }
    if batch.observed.len() > MAX_SAMPLES {
        return Err(too_many("observations", batch.observed.len(), MAX_SAMPLES));
    }
    let series_count = batch.series.len();
    let indexes =
        (batch.samples.iter().map(|s| s.series)).chain(batch.observed.iter().map(|o| o.series));
    for (i, series) in indexes.enumerate() {
        if series as usize >= series_count {
            return Err(WireError::SeriesIndexOutOfRange {
                sample: i,
                series,
                series_count,
            });
        }
    }
    Ok(())
}

/// Appends the message for `batch` to `out`. Series that share a key are written as one
/// group; what comes back from [`decode`] is described there.
///
/// # Errors
/// `WireError::SeriesIndexOutOfRange` when a sample's series index is not in
/// `batch.series`, and `WireError::TooMany` when the batch is over `MAX_SAMPLES`,
/// `MAX_SERIES`, `MAX_KEY_BYTES` or has a key over `SeriesKey::MAX_LEN`. `out` is
/// unchanged then.
pub fn encode(batch: &SampleBatch, out: &mut Vec<u8>) -> Result<(), WireError> {
    check_encodable(batch)?;
    let series = &batch.series;

    // Series in key order; a stable sort keeps the entries of one key in their order.
    let mut order: Vec<u32> = (0..series.len() as u32).collect();
    order.sort_by(|&a, &b| series[a as usize].key.cmp(&series[b as usize].key));
    // group_of[s] and entry_of[s]: where original series s went.
    let mut group_of = vec![0u32; series.len()];
    let mut entry_of = vec![0u32; series.len()];
    // Per group: its range in `order`.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for (pos, &s) in order.iter().enumerate() {
        let new_key = match groups.last() {
            Some(&(start, _)) => series[order[start] as usize].key != series[s as usize].key,
            None => true,
        };
        if new_key {
            groups.push((pos, pos));
        }
        let g = groups.len() - 1;
        groups[g].1 = pos + 1;
        group_of[s as usize] = g as u32;
        entry_of[s as usize] = (pos - groups[g].0) as u32;
    }

    // Samples grouped by key, each key's in their order (a counting sort).
    let mut group_start = vec![0u32; groups.len() + 1];
    for s in &batch.samples {
        group_start[group_of[s.series as usize] as usize + 1] += 1;
    }
    for g in 0..groups.len() {
        group_start[g + 1] += group_start[g];
    }
    let mut fill = group_start.clone();
    let mut grouped = vec![0u32; batch.samples.len()];
    for (i, s) in batch.samples.iter().enumerate() {
        let g = group_of[s.series as usize] as usize;
        grouped[fill[g] as usize] = i as u32;
        fill[g] += 1;
    }

    let start = out.len();
    out.resize(start + HEADER_LEN, 0);
    out.reserve(batch.samples.len() * 2 + groups.len() * 16);

    // Key section.
    let mut keys = Vec::new();
    let mut prev: &[u8] = &[];
    for &(first, _) in &groups {
        let key = series[order[first] as usize].key.as_bytes();
        let shared = key.iter().zip(prev).take_while(|(a, b)| a == b).count();
        put_varint(&mut keys, shared as u64);
        put_varint(&mut keys, (key.len() - shared) as u64);
        keys.extend_from_slice(&key[shared..]);
        prev = key;
    }
    let mut flags = put_key_section(out, &keys);

    // Series section.
    let mut ts = Vec::new();
    let mut values = Vec::new();
    let mut entries = Vec::new();
    let mut scaled = Vec::new();
    let mut prev_start = 0i64;
    for (g, &(first, end)) in groups.iter().enumerate() {
        let members = &order[first..end];
        let samples = &grouped[group_start[g] as usize..group_start[g + 1] as usize];
        ts.clear();
        values.clear();
        entries.clear();
        for &i in samples {
            let s = &batch.samples[i as usize];
            ts.push(s.ts);
            values.push(s.value);
            entries.push(entry_of[s.series as usize]);
        }
        // A lone entry whose kind the tag's two bits cannot hold is listed as several are.
        let kind = match members {
            [one] => kind_code(series[*one as usize].kind).min(KIND_SEVERAL),
            _ => KIND_SEVERAL,
        };
        let plans = (!samples.is_empty()).then(|| {
            (
                TsPlan::new(&ts, prev_start),
                ValuePlan::new(&values, &mut scaled),
            )
        });
        let tag = kind | plans.as_ref().map_or(0, |(t, v)| t.tag | v.tag);
        out.push(tag);
        if kind == KIND_SEVERAL {
            put_varint(out, members.len() as u64);
            out.extend(members.iter().map(|&s| kind_code(series[s as usize].kind)));
        }
        put_varint(out, samples.len() as u64);
        let Some((ts_plan, value_plan)) = plans else {
            continue;
        };
        if members.len() > 1 {
            put_runs(out, &entries);
        }
        ts_plan.write(out, &ts, prev_start);
        value_plan.write(out, &values, &scaled);
        prev_start = ts[0];
    }

    // Observed section: each names its series by its place in the decoded batch, the key
    // order.
    if !batch.observed.is_empty() {
        flags |= OBSERVED;
        let mut place = vec![0u32; series.len()];
        for (pos, &s) in order.iter().enumerate() {
            place[s as usize] = pos as u32;
        }
        put_varint(out, batch.observed.len() as u64);
        let mut prev_ts = 0i64;
        let mut histogram = Vec::new();
        for o in &batch.observed {
            put_varint(out, u64::from(place[o.series as usize]));
            put_signed(out, o.ts.wrapping_sub(prev_ts));
            prev_ts = o.ts;
            out.extend_from_slice(&o.observed.sum.to_bits().to_le_bytes());
            match o.observed.extremes {
                None => out.push(0),
                Some((min, max)) => {
                    out.push(1);
                    out.extend_from_slice(&min.to_bits().to_le_bytes());
                    out.extend_from_slice(&max.to_bits().to_le_bytes());
                }
            }
            histogram.clear();
            o.observed.histogram.encode(&mut histogram);
            put_varint(out, histogram.len() as u64);
            out.extend_from_slice(&histogram);
        }
    }

    // Header last: it holds the body's length and the checksum over everything.
    let body_len = out.len() - start - HEADER_LEN;
    let header = &mut out[start..start + HEADER_LEN];
    header[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    header[VERSION_OFFSET] = FORMAT_VERSION;
    header[FLAGS_OFFSET] = flags;
    header[KEYS_OFFSET..SERIES_OFFSET].copy_from_slice(&(groups.len() as u32).to_le_bytes());
    header[SERIES_OFFSET..SAMPLES_OFFSET].copy_from_slice(&(series.len() as u32).to_le_bytes());
    header[SAMPLES_OFFSET..BODY_LEN_OFFSET]
        .copy_from_slice(&(batch.samples.len() as u32).to_le_bytes());
    // The limits keep a body far below 4 GiB: at most 10 + 8 + 9 bytes per sample, and
    // bounded keys and entries.
    header[BODY_LEN_OFFSET..CRC_OFFSET].copy_from_slice(&(body_len as u32).to_le_bytes());
    let crc = checksum(&out[start..]);
    out[start + CRC_OFFSET..start + HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The message for `batch`, in a new vector (the tests' shorthand). See [`encode`].
///
/// # Errors
/// As [`encode`].
#[cfg(test)]
pub(crate) fn encode_to_vec(batch: &SampleBatch) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    encode(batch, &mut out)?;
    Ok(out)
}

/// Appends the key section, deflated when that is smaller; returns the header flags.
fn put_key_section(out: &mut Vec<u8>, keys: &[u8]) -> u8 {
    if keys.len() >= MIN_DEFLATE {
        let deflated_put = DEFLATED.with_borrow_mut(|memo| {
            let Ok(deflated) = memo.get_or_make(keys, |keys| {
                Ok::<_, std::convert::Infallible>(deflate(keys))
            });
            let len =
                varint_len(keys.len() as u64) + varint_len(deflated.len() as u64) + deflated.len();
            if len >= keys.len() {
                return false;
            }
            put_varint(out, keys.len() as u64);
            put_varint(out, deflated.len() as u64);
            out.extend_from_slice(&deflated);
            true
        });
        if deflated_put {
            return KEYS_DEFLATED;
        }
    }
    out.extend_from_slice(keys);
    0
}

thread_local! {
    /// The key sections this thread deflated lately ([`SectionMemo`]).
    static DEFLATED: std::cell::RefCell<SectionMemo> =
        const { std::cell::RefCell::new(SectionMemo::new()) };

    /// This thread's compressor, reset for each key section: a new one allocates and zeroes
    /// about 300 KB of tables, which the kernel maps and unmaps again per message (page
    /// faults and TLB shootdowns took a tenth of a cluster node's CPU).
    static COMPRESSOR: std::cell::RefCell<Option<Box<CompressorOxide>>> =
        const { std::cell::RefCell::new(None) };
}

/// `input` as raw deflate at [`KEY_DEFLATE_LEVEL`]: the bytes
/// `miniz_oxide::deflate::compress_to_vec` gives, from a compressor kept per thread.
fn deflate(mut input: &[u8]) -> Vec<u8> {
    COMPRESSOR.with_borrow_mut(|slot| {
        let compressor = slot.get_or_insert_with(|| {
            let flags = create_comp_flags_from_zip_params(KEY_DEFLATE_LEVEL.into(), 0, 0);
            Box::new(CompressorOxide::new(flags))
        });
        compressor.reset();
        let mut output = vec![0; (input.len() / 2).max(64)];
        let mut written = 0;
        loop {
            let (status, read, wrote) = compress(
                compressor,
                input,
                &mut output[written..],
                TDEFLFlush::Finish,
            );
            written += wrote;
            input = &input[read.min(input.len())..];
            match status {
                TDEFLStatus::Okay => {
                    if output.len() - written < 64 {
                        output.resize(output.len() * 2, 0);
                    }
                }
                // Done, or a failure the level and flags above cannot cause: the caller
                // keeps the keys as they are whenever the result is not smaller.
                _ => {
                    output.truncate(written);
                    return output;
                }
            }
        }
    })
}

/// Writes which entry each sample of a group belongs to, as runs.
fn put_runs(out: &mut Vec<u8>, entries: &[u32]) {
    let runs = 1 + entries.windows(2).filter(|w| w[0] != w[1]).count();
    put_varint(out, runs as u64);
    for run in entries.chunk_by(|a, b| a == b) {
        put_varint(out, u64::from(run[0]));
        put_varint(out, run.len() as u64);
    }
}

#[cfg(test)]
mod deflate_tests {
    use super::*;

    #[test]
    fn the_kept_compressor_gives_the_bytes_of_a_fresh_one_call_after_call() {
        let mut inputs: Vec<Vec<u8>> = vec![Vec::new(), b"a".to_vec()];
        let mut keys = Vec::new();
        for i in 0..5_000u32 {
            keys.extend_from_slice(format!("host{:03}.cpu{}.user", i % 300, i % 7).as_bytes());
        }
        inputs.push(keys);
        inputs.push(
            (0..200_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect(),
        );
        for _ in 0..2 {
            for input in &inputs {
                let fresh = miniz_oxide::deflate::compress_to_vec(input, KEY_DEFLATE_LEVEL);
                assert_eq!(deflate(input), fresh, "{} bytes in", input.len());
            }
        }
    }
}

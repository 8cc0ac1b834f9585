//! Reading a batch message without trusting it: header, length and checksum first, then
//! every count capped by the bytes left and the limits before anything is allocated.

use super::columns::{read_timestamps, read_values};
use super::memo::SectionMemo;
use super::varint::Reader;
use super::*;
use crate::engine::{BatchObserved, BatchSample, BatchSeries, SampleBatch};
use crate::histogram::{Histogram, Observed};
use crate::registry::SeriesKey;

/// The batch a message holds.
///
/// What comes back is the encoded batch up to a stable grouping by key: `series` lists the
/// distinct keys in increasing byte order, each key's entries (one per kind a write
/// declared, normally one) in their original relative order; `samples` lists each key's
/// samples, key after key in that order, each key's in exactly their original order, with
/// timestamps and value bits unchanged. Different keys never share a bucket, so applying
/// the decoded batch gives the buckets the original order would. Decoding a message made
/// from a decoded batch gives that batch again.
///
/// # Errors
/// A `WireError` saying what is wrong: a foreign payload (`WireError::BadMagic`),
/// another version, a truncated or overlong message, a checksum mismatch, or (behind a
/// valid checksum, so only from a faulty encoder) a body that does not decode. Decoding
/// never panics, and allocates at most what the limits (`MAX_SAMPLES`, `MAX_SERIES`,
/// `MAX_KEY_BYTES`) allow, whatever the header claims.
pub fn decode(bytes: &[u8]) -> Result<SampleBatch, WireError> {
    if let Some(found) = bytes.get(MAGIC_OFFSET..VERSION_OFFSET) {
        if found != MAGIC {
            return Err(WireError::BadMagic {
                found: found.try_into().expect("4 bytes"),
            });
        }
    }
    if let Some(&found) = bytes.get(VERSION_OFFSET) {
        if found != FORMAT_VERSION {
            return Err(WireError::UnknownVersion { found });
        }
    }
    if bytes.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            expected: HEADER_LEN,
            got: bytes.len(),
        });
    }
    let body_len = u32_at(bytes, BODY_LEN_OFFSET) as usize;
    let expected = HEADER_LEN + body_len;
    if bytes.len() < expected {
        return Err(WireError::Truncated {
            expected,
            got: bytes.len(),
        });
    }
    if bytes.len() > expected {
        return Err(WireError::TrailingBytes {
            extra: bytes.len() - expected,
        });
    }
    let stored = u32_at(bytes, CRC_OFFSET);
    let computed = checksum(bytes);
    if stored != computed {
        return Err(WireError::ChecksumMismatch { stored, computed });
    }
    let flags = bytes[FLAGS_OFFSET];
    if flags & !(KEYS_DEFLATED | OBSERVED) != 0 {
        return Err(WireError::UnknownFlags { flags });
    }
    let deflated = flags & KEYS_DEFLATED != 0;
    let counts = Counts::check(
        u32_at(bytes, KEYS_OFFSET) as usize,
        u32_at(bytes, SERIES_OFFSET) as usize,
        u32_at(bytes, SAMPLES_OFFSET) as usize,
        body_len,
        deflated,
    )?;
    let mut r = Reader::new(&bytes[HEADER_LEN..]);
    let keys = if deflated {
        read_deflated_keys(&mut r, counts.keys)?
    } else {
        read_keys(&mut r, counts.keys)?
    };
    let mut batch = read_groups(&mut r, keys, &counts)?;
    if flags & OBSERVED != 0 {
        batch.observed = read_observed(&mut r, batch.series.len())?;
    }
    if r.remaining() != 0 {
        return Err(WireError::CountMismatch {
            what: "body bytes",
            claimed: body_len as u64,
            found: format!("the series end at body offset {}", r.offset()),
        });
    }
    Ok(batch)
}

/// Bytes an observation takes at least: its series, time, sum, extremes flag and
/// histogram length.
const MIN_OBSERVED_LEN: usize = 1 + 1 + 8 + 1 + 1;

/// Reads the observed section: bucketed observations of the batch's `series` series.
fn read_observed(r: &mut Reader<'_>, series: usize) -> Result<Vec<BatchObserved>, WireError> {
    let most = (r.remaining() / MIN_OBSERVED_LEN).min(MAX_SAMPLES) as u64;
    let n = r.varint_at_most(most, "observations")?;
    let mut observed = Vec::with_capacity(n);
    let mut prev_ts = 0i64;
    for _ in 0..n {
        let offset = r.offset();
        let place = r.varint("an observation's series")?;
        let place = u32::try_from(place)
            .ok()
            .filter(|&p| (p as usize) < series)
            .ok_or(WireError::OutOfRange {
                what: "an observation's series",
                value: place,
                max: series.saturating_sub(1) as u64,
                offset,
            })?;
        let ts = prev_ts.wrapping_add(r.signed("an observation's time")?);
        prev_ts = ts;
        let sum = f64::from_bits(r.f64_bits("an observation's sum")?);
        let offset = r.offset();
        let extremes = match r.u8("an observation's extremes flag")? {
            0 => None,
            1 => Some((
                f64::from_bits(r.f64_bits("an observation's min")?),
                f64::from_bits(r.f64_bits("an observation's max")?),
            )),
            flag => {
                return Err(WireError::OutOfRange {
                    what: "an observation's extremes flag",
                    value: flag.into(),
                    max: 1,
                    offset,
                })
            }
        };
        let len = r.varint_at_most(r.remaining() as u64, "a histogram's length")?;
        let offset = r.offset();
        let bytes = r.take(len, "a histogram")?;
        let histogram = match Histogram::decode(bytes) {
            Ok((histogram, used)) if used == len => histogram,
            _ => {
                return Err(WireError::Malformed {
                    what: "a histogram that does not decode",
                    offset,
                })
            }
        };
        observed.push(BatchObserved {
            series: place,
            ts,
            observed: Observed {
                histogram,
                sum,
                extremes,
            },
        });
    }
    Ok(observed)
}

/// The header's counts, checked against the limits and the body's length.
struct Counts {
    keys: usize,
    series: usize,
    samples: usize,
}

impl Counts {
    fn check(
        keys: usize,
        series: usize,
        samples: usize,
        body_len: usize,
        keys_deflated: bool,
    ) -> Result<Self, WireError> {
        if series > MAX_SERIES {
            return Err(too_many("series", series, MAX_SERIES));
        }
        if samples > MAX_SAMPLES {
            return Err(too_many("samples", samples, MAX_SAMPLES));
        }
        if keys > series {
            return Err(WireError::CountMismatch {
                what: "keys",
                claimed: keys as u64,
                found: format!("only {series} series"),
            });
        }
        // Deflated keys may take fewer bytes than keys; groups never do.
        let min_key_len = if keys_deflated { 0 } else { MIN_KEY_LEN };
        let min_len = keys * (min_key_len + MIN_GROUP_LEN);
        // Each entry beyond a key's first costs a kind byte.
        if min_len > body_len || series - keys > body_len - min_len {
            return Err(WireError::CountMismatch {
                what: "keys and series",
                claimed: series as u64,
                found: format!("{keys} keys and {series} series cannot fit {body_len} bytes"),
            });
        }
        Ok(Counts {
            keys,
            series,
            samples,
        })
    }
}

/// Reads a deflated key section: inflates it, at most to its declared length, and reads
/// the keys from that.
fn read_deflated_keys(r: &mut Reader<'_>, count: usize) -> Result<Vec<String>, WireError> {
    let raw_len = r.varint_at_most(MAX_KEY_SECTION as u64, "the key section's length")?;
    let deflated_len = r.varint_at_most(r.remaining() as u64, "the deflated keys' length")?;
    let deflated = r.take(deflated_len, "the deflated keys")?;
    INFLATED.with_borrow_mut(|memo| {
        // At most raw_len bytes: a memo's section inflated to another length fails the
        // length check below, as the limit would have made it fail.
        let raw = memo.get_or_make(deflated, |deflated| {
            miniz_oxide::inflate::decompress_to_vec_with_limit(deflated, raw_len)
                .map_err(|_| WireError::BadDeflate { raw_len })
        })?;
        if raw.len() != raw_len {
            return Err(WireError::BadDeflate { raw_len });
        }
        let mut keys = Reader::new(&raw);
        let out = read_keys(&mut keys, count)?;
        if keys.remaining() != 0 {
            return Err(WireError::CountMismatch {
                what: "keys",
                claimed: count as u64,
                found: format!("the key section holds {} bytes more", keys.remaining()),
            });
        }
        Ok(out)
    })
}

thread_local! {
    /// The key sections this thread inflated lately ([`SectionMemo`]).
    static INFLATED: std::cell::RefCell<SectionMemo> =
        const { std::cell::RefCell::new(SectionMemo::new()) };
}

/// Reads the key section. With deflated keys, error offsets are within the inflated
/// section.
fn read_keys(r: &mut Reader<'_>, count: usize) -> Result<Vec<String>, WireError> {
    let mut keys: Vec<String> = Vec::with_capacity(count);
    let mut total = 0usize;
    for index in 0..count {
        let prev = keys.last().map_or(&[][..], |k| k.as_bytes());
        let shared = r.varint_at_most(prev.len() as u64, "a key's shared prefix length")?;
        let suffix_len = r.varint_at_most(
            (SeriesKey::MAX_LEN - shared) as u64,
            "a key's suffix length",
        )?;
        let suffix = r.take(suffix_len, "a key's suffix")?;
        total += shared + suffix_len;
        if total > MAX_KEY_BYTES {
            return Err(too_many("key bytes", total, MAX_KEY_BYTES));
        }
        let mut key = Vec::with_capacity(shared + suffix_len);
        key.extend_from_slice(&prev[..shared]);
        key.extend_from_slice(suffix);
        if index > 0 && key.as_slice() <= prev {
            return Err(WireError::KeysOutOfOrder { index });
        }
        let key = String::from_utf8(key).map_err(|_| WireError::KeyNotUtf8 { index })?;
        keys.push(key);
    }
    Ok(keys)
}

/// Reads the series section: one group per key.
fn read_groups(
    r: &mut Reader<'_>,
    keys: Vec<String>,
    counts: &Counts,
) -> Result<SampleBatch, WireError> {
    let mut series: Vec<BatchSeries> = Vec::with_capacity(counts.series);
    // Samples may cost no bytes (regular timestamps, equal values), so the body's length
    // does not bound them; the header's count, checked against MAX_SAMPLES, does.
    let mut samples: Vec<BatchSample> =
        Vec::with_capacity(counts.samples.min(r.remaining().saturating_mul(8)));
    let mut kinds: Vec<Option<SeriesKind>> = Vec::new();
    let mut prev_start = 0i64;
    for key in keys {
        let offset = r.offset();
        let tag = r.u8("a series tag")?;
        if tag & TAG_RESERVED != 0 {
            return Err(WireError::OutOfRange {
                what: "series tag",
                value: tag.into(),
                max: u64::from(!TAG_RESERVED),
                offset,
            });
        }
        kinds.clear();
        if tag & KIND_MASK == KIND_SEVERAL {
            let offset = r.offset();
            let n = r.varint_at_most((counts.series - series.len()) as u64, "a key's entries")?;
            let mut first = 0;
            for i in 0..n {
                let offset = r.offset();
                let code = r.u8("an entry's kind")?;
                kinds.push(kind_of_code(code, offset)?);
                if i == 0 {
                    first = code;
                }
            }
            // One entry is listed only when the tag's two bits cannot hold its kind.
            if n == 0 || n == 1 && first < KIND_SEVERAL {
                return Err(WireError::Malformed {
                    what: "a key marked as having several entries lists fewer than two",
                    offset,
                });
            }
        } else {
            kinds.push(kind_of_code(tag & KIND_MASK, offset)?);
        }
        if kinds.len() > counts.series - series.len() {
            return Err(WireError::CountMismatch {
                what: "series",
                claimed: counts.series as u64,
                found: "the body holds more".to_string(),
            });
        }
        let base = series.len() as u32;
        let (last, rest) = kinds.split_last().expect("at least one entry");
        for &kind in rest {
            series.push(BatchSeries {
                key: key.clone(),
                kind,
            });
        }
        series.push(BatchSeries { key, kind: *last });

        let n = r.varint_at_most(
            (counts.samples - samples.len()) as u64,
            "a key's samples (past the header's count)",
        )?;
        if n == 0 {
            continue;
        }
        // Bytes the columns take at least: refuse before allocating for them.
        let min_bytes = if tag & columns::TS_REGULAR == 0 {
            n.saturating_sub(2)
        } else {
            0
        } + if tag & columns::VALUES_EQUAL == 0 {
            n - 1
        } else {
            0
        };
        if min_bytes > r.remaining() {
            return Err(WireError::BodyEndsEarly {
                what: "a series' samples",
                offset: r.offset(),
            });
        }
        let first = samples.len();
        samples.resize(
            first + n,
            BatchSample {
                series: base,
                ts: 0,
                value: 0.0,
            },
        );
        let group = &mut samples[first..];
        if kinds.len() > 1 {
            read_runs(r, group, base, kinds.len())?;
        }
        prev_start = read_timestamps(r, tag, group, prev_start)?;
        read_values(r, tag, group)?;
    }
    if series.len() != counts.series || samples.len() != counts.samples {
        return Err(WireError::CountMismatch {
            what: "series and samples",
            claimed: counts.samples as u64,
            found: format!(
                "the body holds {} series and {} samples",
                series.len(),
                samples.len()
            ),
        });
    }
    Ok(SampleBatch {
        series,
        samples,
        observed: Vec::new(),
    })
}

/// Reads which entry each sample of a group belongs to.
fn read_runs(
    r: &mut Reader<'_>,
    group: &mut [BatchSample],
    base: u32,
    entries: usize,
) -> Result<(), WireError> {
    let runs = r.varint_at_most(group.len() as u64, "runs of entries")?;
    let mut filled = 0;
    for _ in 0..runs {
        let entry = r.varint_at_most(entries as u64 - 1, "a run's entry")?;
        let offset = r.offset();
        let len = r.varint_at_most((group.len() - filled) as u64, "a run's length")?;
        if len == 0 {
            return Err(WireError::Malformed {
                what: "a run of entries is empty",
                offset,
            });
        }
        for s in &mut group[filled..filled + len] {
            s.series = base + entry as u32;
        }
        filled += len;
    }
    if filled != group.len() {
        return Err(WireError::CountMismatch {
            what: "samples of a key",
            claimed: group.len() as u64,
            found: format!("its runs cover {filled}"),
        });
    }
    Ok(())
}

//! The bytes of one published batch: a [`SampleBatch`] encoded compactly, exactly and under
//! a checksum, as the payload of one JetStream message.
//!
//! The log keeps every message for as long as the stream's retention says, and every owner
//! of the partition reads each one, so bytes per sample matter; decoding must never trust
//! the message, because a damaged or foreign payload must become an error, not a panic or a
//! huge allocation. Keys are written once per message, sorted and prefix-shared; each
//! series' samples follow as columns ([`columns`] says how timestamps and values are
//! packed). A series' own samples keep their order, which is all that applying them needs.
//!
//! Byte layout, little-endian throughout. Offsets are derived one from another in the
//! constants below; docs/file-format.md ("Cluster log messages") mirrors this.
//!
//! Header (26 bytes):
//!
//! | offset | size | field                                                          |
//! |--------|------|----------------------------------------------------------------|
//! | 0      | 4    | magic, `TDBW`                                                  |
//! | 4      | 1    | format version, u8, currently 1                                |
//! | 5      | 1    | flags, u8, must be 0 (none are defined in version 1)           |
//! | 6      | 4    | `keys`, u32: distinct keys, at most [`MAX_SERIES`]             |
//! | 10     | 4    | `series`, u32: series entries, `keys..=`[`MAX_SERIES`]         |
//! | 14     | 4    | `samples`, u32: at most [`MAX_SAMPLES`]                        |
//! | 18     | 4    | `body_len`, u32: bytes after the header, exactly               |
//! | 22     | 4    | CRC-32 (IEEE) of bytes 0..22, then of the body                 |
//!
//! Body: the key section, then the series section. `varint` is LEB128 (7 bits a byte, low
//! first, at most 10 bytes); `signed` is a zigzagged varint (0, -1, 1, -2 → 0, 1, 2, 3).
//!
//! Key section, `keys` times, keys in strictly increasing byte order, each valid UTF-8 and
//! at most `SeriesKey::MAX_LEN` (8192) bytes, all together at most [`MAX_KEY_BYTES`]:
//!
//! | size     | field                                                               |
//! |----------|---------------------------------------------------------------------|
//! | varint   | `shared`: bytes taken from the start of the previous key (0 first)  |
//! | varint   | `suffix_len`                                                        |
//! | suffix   | the key's remaining bytes                                           |
//!
//! Series section, one group per key, in key order. A group holds the series entries of
//! its key (normally one; more when writes declared different kinds) and their samples:
//!
//! | size        | field                                                            |
//! |-------------|------------------------------------------------------------------|
//! | 1           | tag: bits 0-1 kind (0 none, 1 gauge, 2 counter, 3 several        |
//! |             | entries), bit 2 `TS_SAME_START`, bit 3 `TS_REGULAR`, bit 4       |
//! |             | `VALUES_EQUAL`, bits 5-6 value mode (0 XOR, 1 decimal deltas,    |
//! |             | 2 decimal deltas of deltas), bit 7 must be 0                     |
//! | (kind 3)    | varint `entries` (at least 2), then one kind byte (0-2) each      |
//! | varint      | `n`: samples of this key                                         |
//! | (kind 3, n>0) | varint `runs`, then `runs` × (varint entry, varint length ≥ 1):  |
//! |             | which entry each sample belongs to, in order; lengths sum to `n` |
//! | (n > 0)     | timestamps, then values, as below                                |
//!
//! Timestamps: unless `TS_SAME_START`, `signed` first timestamp minus the first timestamp
//! of the previous group that has samples (0 before the first). If `n ≥ 2`, `signed`
//! second minus first; unless `TS_REGULAR` (all deltas equal), `n - 2` × `signed` delta
//! minus previous delta. Values, mode 0: the first value's f64 bits (8 bytes); unless
//! `VALUES_EQUAL`, `n - 1` XORs with the previous value's bits, each a control byte (high
//! nibble: bytes of leading zeros, low nibble: bytes of trailing zeros, 0x80 for zero)
//! and the bytes between, low first. Modes 1 and 2: a byte `d` (0..=18), then the values
//! as integers `m` with value = `m as f64 / 10^d` (exact: the encoder checks the bits):
//! `signed` first `m`; unless `VALUES_EQUAL`, `n - 1` × `signed` delta (mode 1), or the
//! first delta then `n - 2` deltas of deltas (mode 2). All integer arithmetic wraps.
//!
//! The encoder chooses per group the smallest of these; the decoder accepts any of them.

mod columns;
mod varint;

#[cfg(test)]
mod tests;

use thiserror::Error;

use self::columns::{read_timestamps, read_values, TsPlan, ValuePlan};
use self::varint::{put_varint, Reader};
use crate::cluster::{BatchSample, BatchSeries, SampleBatch};
use crate::counter::SeriesKind;
use crate::registry::SeriesKey;

/// Identifies a batch message.
pub const MAGIC: [u8; 4] = *b"TDBW";
/// The only layout this build reads and writes.
pub const FORMAT_VERSION: u8 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const FLAGS_OFFSET: usize = VERSION_OFFSET + size_of::<u8>();
const KEYS_OFFSET: usize = FLAGS_OFFSET + size_of::<u8>();
const SERIES_OFFSET: usize = KEYS_OFFSET + size_of::<u32>();
const SAMPLES_OFFSET: usize = SERIES_OFFSET + size_of::<u32>();
const BODY_LEN_OFFSET: usize = SAMPLES_OFFSET + size_of::<u32>();
const CRC_OFFSET: usize = BODY_LEN_OFFSET + size_of::<u32>();
/// Bytes before the body.
pub const HEADER_LEN: usize = CRC_OFFSET + size_of::<u32>();

/// Most samples one message may hold. A series whose timestamps are regular and whose
/// values are all equal costs no bytes per sample, so the body's length cannot bound the
/// decoded size; this does (24 MiB of decoded samples). Publishers split larger batches.
pub const MAX_SAMPLES: usize = 1 << 20;
/// Most series entries (and so distinct keys) one message may hold.
pub const MAX_SERIES: usize = 1 << 16;
/// Most key text, all keys together, one message may hold. Prefix sharing lets a short
/// body name long keys; this bounds what decoding it allocates.
pub const MAX_KEY_BYTES: usize = 16 << 20;

/// Tag bits 0-1: the kind of the group's single entry, or [`KIND_SEVERAL`].
const KIND_MASK: u8 = 0b11;
/// Kind code: the group has several entries, listed after the tag.
const KIND_SEVERAL: u8 = 3;
/// Tag bit 7, reserved.
const TAG_RESERVED: u8 = 1 << 7;
/// Bytes every group takes at least (tag and sample count).
const MIN_GROUP_LEN: usize = 2;
/// Bytes every key takes at least in the key section (its two lengths).
const MIN_KEY_LEN: usize = 2;

/// Why bytes are not a batch message (decoding), or a batch cannot be one (encoding).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes do not start with [`MAGIC`]: not a batch message at all.
    #[error("not a tierdb batch message: it starts with {found:02x?}, not \"TDBW\"")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// Written by a build with another layout.
    #[error("batch message format version {found}; this build reads version {FORMAT_VERSION}")]
    UnknownVersion {
        /// The version byte.
        found: u8,
    },
    /// Fewer bytes than the header, or than the header says the message holds.
    #[error("batch message truncated: {expected} bytes expected, {got} received")]
    Truncated {
        /// Bytes needed (the header's length, or header plus `body_len`).
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// More bytes than the header says the message holds.
    #[error("batch message has {extra} bytes after its declared end")]
    TrailingBytes {
        /// Bytes past `HEADER_LEN + body_len`.
        extra: usize,
    },
    /// The content is not what was written.
    #[error("batch message checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// CRC-32 in the header.
        stored: u32,
        /// CRC-32 of the bytes received.
        computed: u32,
    },
    /// Flags this build does not know.
    #[error("batch message has unknown flags {flags:#04x}")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A field runs past the end of the body.
    #[error("batch message body ends inside {what} (body offset {offset})")]
    BodyEndsEarly {
        /// The field being read.
        what: &'static str,
        /// Where it starts in the body.
        offset: usize,
    },
    /// A varint longer than 10 bytes or over 64 bits.
    #[error("bad varint for {what} at body offset {offset}")]
    BadVarint {
        /// The field being read.
        what: &'static str,
        /// Where it starts in the body.
        offset: usize,
    },
    /// A field's value is outside what it may be (an entry index past the group's entries,
    /// a count past the header's, an unknown kind or mode).
    #[error("{what} is {value}, at most {max} allowed (body offset {offset})")]
    OutOfRange {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest allowed there.
        max: u64,
        /// Where it starts in the body.
        offset: usize,
    },
    /// A field holds a value its place forbids (an empty run, a key marked as having several
    /// entries with fewer than two).
    #[error("malformed batch message: {what} (body offset {offset})")]
    Malformed {
        /// What is wrong.
        what: &'static str,
        /// Where the field starts in the body.
        offset: usize,
    },
    /// A decoded key is not UTF-8.
    #[error("series key {index} of the batch message is not UTF-8")]
    KeyNotUtf8 {
        /// Its position in the key section.
        index: usize,
    },
    /// A key is not greater than the one before it.
    #[error("series key {index} of the batch message does not sort after the one before it")]
    KeysOutOfOrder {
        /// Its position in the key section.
        index: usize,
    },
    /// The header's counts disagree with the body or with one another.
    #[error("batch message header counts {claimed} {what}, but {found}")]
    CountMismatch {
        /// What is counted.
        what: &'static str,
        /// The header's count.
        claimed: u64,
        /// What the body (or the other counts) allow, in words.
        found: String,
    },
    /// More of something than one message may hold (see [`MAX_SAMPLES`], [`MAX_SERIES`],
    /// [`MAX_KEY_BYTES`], `SeriesKey::MAX_LEN`).
    #[error("too many {what} for one batch message: {count}, at most {max}")]
    TooMany {
        /// What is counted.
        what: &'static str,
        /// How many there are (or are claimed).
        count: u64,
        /// The limit.
        max: u64,
    },
    /// Encoding: a sample names a series the batch does not have.
    #[error("sample {sample} names series {series}, but the batch has {series_count} series")]
    SeriesIndexOutOfRange {
        /// The sample's position.
        sample: usize,
        /// Its series index.
        series: u32,
        /// Series in the batch.
        series_count: usize,
    },
}

fn kind_code(kind: Option<SeriesKind>) -> u8 {
    match kind {
        None => 0,
        Some(SeriesKind::Gauge) => 1,
        Some(SeriesKind::Counter) => 2,
    }
}

fn kind_of_code(code: u8, offset: usize) -> Result<Option<SeriesKind>, WireError> {
    match code {
        0 => Ok(None),
        1 => Ok(Some(SeriesKind::Gauge)),
        2 => Ok(Some(SeriesKind::Counter)),
        _ => Err(WireError::OutOfRange {
            what: "series kind",
            value: code.into(),
            max: 2,
            offset,
        }),
    }
}

fn too_many(what: &'static str, count: usize, max: usize) -> WireError {
    WireError::TooMany {
        what,
        count: count as u64,
        max: max as u64,
    }
}

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
    let series_count = batch.series.len();
    for (i, s) in batch.samples.iter().enumerate() {
        if s.series as usize >= series_count {
            return Err(WireError::SeriesIndexOutOfRange {
                sample: i,
                series: s.series,
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
/// [`WireError::SeriesIndexOutOfRange`] when a sample's series index is not in
/// `batch.series`, and [`WireError::TooMany`] when the batch is over [`MAX_SAMPLES`],
/// [`MAX_SERIES`], [`MAX_KEY_BYTES`] or has a key over `SeriesKey::MAX_LEN`. `out` is
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
    let mut prev: &[u8] = &[];
    for &(first, _) in &groups {
        let key = series[order[first] as usize].key.as_bytes();
        let shared = key.iter().zip(prev).take_while(|(a, b)| a == b).count();
        put_varint(out, shared as u64);
        put_varint(out, (key.len() - shared) as u64);
        out.extend_from_slice(&key[shared..]);
        prev = key;
    }

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
        let kind = if members.len() == 1 {
            kind_code(series[members[0] as usize].kind)
        } else {
            KIND_SEVERAL
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
        if kind == KIND_SEVERAL {
            put_runs(out, &entries);
        }
        ts_plan.write(out, &ts, prev_start);
        value_plan.write(out, &values, &scaled);
        prev_start = ts[0];
    }

    // Header last: it holds the body's length and the checksum over everything.
    let body_len = out.len() - start - HEADER_LEN;
    let header = &mut out[start..start + HEADER_LEN];
    header[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    header[VERSION_OFFSET] = FORMAT_VERSION;
    header[FLAGS_OFFSET] = 0;
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

/// The message for `batch`, in a new vector. See [`encode`].
///
/// # Errors
/// As [`encode`].
pub fn encode_to_vec(batch: &SampleBatch) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    encode(batch, &mut out)?;
    Ok(out)
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

/// CRC-32 of a whole message but its CRC field.
fn checksum(message: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&message[..CRC_OFFSET]);
    h.update(&message[HEADER_LEN..]);
    h.finalize()
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

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
/// A [`WireError`] saying what is wrong: a foreign payload ([`WireError::BadMagic`]),
/// another version, a truncated or overlong message, a checksum mismatch, or (behind a
/// valid checksum, so only from a faulty encoder) a body that does not decode. Decoding
/// never panics, and allocates at most what the limits ([`MAX_SAMPLES`], [`MAX_SERIES`],
/// [`MAX_KEY_BYTES`]) allow, whatever the header claims.
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
    if flags != 0 {
        return Err(WireError::UnknownFlags { flags });
    }
    let counts = Counts::check(
        u32_at(bytes, KEYS_OFFSET) as usize,
        u32_at(bytes, SERIES_OFFSET) as usize,
        u32_at(bytes, SAMPLES_OFFSET) as usize,
        body_len,
    )?;
    let mut r = Reader::new(&bytes[HEADER_LEN..]);
    let keys = read_keys(&mut r, counts.keys)?;
    let batch = read_groups(&mut r, keys, &counts)?;
    if r.remaining() != 0 {
        return Err(WireError::CountMismatch {
            what: "body bytes",
            claimed: body_len as u64,
            found: format!("the series end at body offset {}", r.offset()),
        });
    }
    Ok(batch)
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
        let min_len = keys * (MIN_KEY_LEN + MIN_GROUP_LEN);
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

/// Reads the key section.
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
            if n < 2 {
                return Err(WireError::Malformed {
                    what: "a key marked as having several entries lists fewer than two",
                    offset,
                });
            }
            for _ in 0..n {
                let offset = r.offset();
                kinds.push(kind_of_code(r.u8("an entry's kind")?, offset)?);
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
    Ok(SampleBatch { series, samples })
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

//! The bytes of one published batch: a [`SampleBatch`](crate::engine::SampleBatch) encoded
//! compactly, exactly and under a checksum, as the payload of one JetStream message.
//!
//! The log keeps every message for as long as the stream's retention says, and every owner
//! of the partition reads each one, so bytes per sample matter; decoding must never trust
//! the message, because a damaged or foreign payload must become an error, not a panic or a
//! huge allocation. Keys are written once per message, sorted and prefix-shared; each
//! series' samples follow as columns (`wire/columns.rs` says how timestamps and values are
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
//! | 5      | 1    | flags, u8: bit 0 `KEYS_DEFLATED`, bit 1 `OBSERVED`; the others |
//! |        |      | must be 0                                                      |
//! | 6      | 4    | `keys`, u32: distinct keys, at most [`MAX_SERIES`]             |
//! | 10     | 4    | `series`, u32: series entries, `keys..=`[`MAX_SERIES`]         |
//! | 14     | 4    | `samples`, u32: at most [`MAX_SAMPLES`]                        |
//! | 18     | 4    | `body_len`, u32: bytes after the header, exactly               |
//! | 22     | 4    | CRC-32 (IEEE) of bytes 0..22, then of the body                 |
//!
//! Body: the key section, then the series section. `varint` is LEB128 (7 bits a byte, low
//! first, at most 10 bytes); `signed` is a zigzagged varint (0, -1, 1, -2 → 0, 1, 2, 3).
//! With `KEYS_DEFLATED`, the key section is stored compressed: varint `raw_len` (at most
//! [`MAX_KEY_BYTES`] + 4 × [`MAX_SERIES`]), varint `deflated_len`, then `deflated_len`
//! bytes of raw DEFLATE (RFC 1951) that inflate to exactly `raw_len` bytes of key section.
//! The encoder deflates when that is smaller: front coding shares a key's prefix with its
//! neighbour, DEFLATE also finds what keys repeat elsewhere (metric names across hosts).
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
//! | size            | field                                                        |
//! |-----------------|--------------------------------------------------------------|
//! | 1               | tag: bits 0-1 kind (0 none, 1 gauge, 2 counter, 3 several    |
//! |                 | entries), bit 2 `TS_SAME_START`, bit 3 `TS_REGULAR`, bit 4   |
//! |                 | `VALUES_EQUAL`, bits 5-6 value mode (0 XOR, 1 decimal        |
//! |                 | deltas, 2 decimal deltas of deltas), bit 7 must be 0         |
//! | (kind 3)        | varint `entries` (at least 2; 1 for kind 3 or 4), then one   |
//! |                 | kind byte each (0-2 as above, 3 delta counter, 4             |
//! |                 | distribution)                                                |
//! | varint          | `n`: samples of this key                                     |
//! | (entries ≥ 2,   | varint `runs`, then `runs` × (varint entry, varint length    |
//! |  n > 0)         |                                                              |
//! |                 | ≥ 1): the entry of each sample, in order; lengths sum to `n` |
//! | (n > 0)         | timestamps, then values, as below                            |
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
//!
//! With `OBSERVED`, the observed section follows: bucketed observations (native and OTLP
//! histogram points), which the header's `samples` does not count. varint `n`, then `n`
//! times: varint series (its place among the decoded batch's series: key order, a key's
//! entries in order), `signed` time minus the previous observation's (0 before the first),
//! the sum's f64 bits (8 bytes), a byte 0 or 1 (extremes sent), with 1 the min's and the
//! max's f64 bits, then varint `len` and `len` bytes of `Histogram::encode`. A build
//! without this section refuses such a message for its unknown flag, by name.

mod columns;
mod decoder;
mod encoder;
mod memo;
mod varint;

#[cfg(test)]
mod tests;

use thiserror::Error;

pub use self::decoder::decode;
pub use self::encoder::encode;
#[cfg(test)]
pub(crate) use self::encoder::encode_to_vec;
use crate::counter::SeriesKind;

/// Identifies a batch message.
pub(crate) const MAGIC: [u8; 4] = *b"TDBW";
/// The only layout this build reads and writes.
pub(crate) const FORMAT_VERSION: u8 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const FLAGS_OFFSET: usize = VERSION_OFFSET + size_of::<u8>();
const KEYS_OFFSET: usize = FLAGS_OFFSET + size_of::<u8>();
const SERIES_OFFSET: usize = KEYS_OFFSET + size_of::<u32>();
const SAMPLES_OFFSET: usize = SERIES_OFFSET + size_of::<u32>();
const BODY_LEN_OFFSET: usize = SAMPLES_OFFSET + size_of::<u32>();
const CRC_OFFSET: usize = BODY_LEN_OFFSET + size_of::<u32>();
/// Bytes before the body.
pub(crate) const HEADER_LEN: usize = CRC_OFFSET + size_of::<u32>();

/// Most samples one message may hold. A series whose timestamps are regular and whose
/// values are all equal costs no bytes per sample, so the body's length cannot bound the
/// decoded size; this does (24 MiB of decoded samples). Publishers split larger batches.
pub(crate) const MAX_SAMPLES: usize = 1 << 20;
/// Most series entries (and so distinct keys) one message may hold.
pub(crate) const MAX_SERIES: usize = 1 << 16;
/// Most key text, all keys together, one message may hold. Prefix sharing lets a short
/// body name long keys; this bounds what decoding it allocates.
pub(crate) const MAX_KEY_BYTES: usize = 16 << 20;

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

/// Header flag: the key section is stored deflated.
const KEYS_DEFLATED: u8 = 1;
/// Header flag: an observed section follows the series section.
const OBSERVED: u8 = 2;
/// Largest key section: the key text and each key's two lengths (two bytes each, as a key
/// is at most 8192 bytes).
const MAX_KEY_SECTION: usize = MAX_KEY_BYTES + 4 * MAX_SERIES;
/// Key sections shorter than this are stored as they are: DEFLATE's block overhead leaves
/// little to gain.
const MIN_DEFLATE: usize = 64;
/// miniz's level for the key section (0-10).
const KEY_DEFLATE_LEVEL: u8 = 6;

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
    /// The deflated key section does not inflate to its declared length.
    #[error("batch message's deflated keys do not inflate to the {raw_len} bytes declared")]
    BadDeflate {
        /// The declared length of the key section.
        raw_len: usize,
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
        Some(SeriesKind::DeltaCounter) => 3,
        Some(SeriesKind::Distribution) => 4,
    }
}

fn kind_of_code(code: u8, offset: usize) -> Result<Option<SeriesKind>, WireError> {
    match code {
        0 => Ok(None),
        1 => Ok(Some(SeriesKind::Gauge)),
        2 => Ok(Some(SeriesKind::Counter)),
        3 => Ok(Some(SeriesKind::DeltaCounter)),
        4 => Ok(Some(SeriesKind::Distribution)),
        _ => Err(WireError::OutOfRange {
            what: "series kind",
            value: code.into(),
            max: 4,
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

/// The little-endian u32 at `offset` of `bytes` (the caller checked the length): the log's
/// messages and their envelopes read their headers with it.
pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

/// CRC-32 of a whole message but its CRC field.
fn checksum(message: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&message[..CRC_OFFSET]);
    h.update(&message[HEADER_LEN..]);
    h.finalize()
}

//! `apply.undo`: the undo chain of the groups of messages applied since the last checkpoint.
//! Each group appends one record: its last stream sequence and the absolute value, before
//! the checkpoint's first group touched it, of everything the group may change that is not
//! idempotent (bucket cells, counter state records) and that no earlier record of the chain
//! holds. A record is written whole and fsynced before its group's first store; the chain is
//! in force while its sequences are above the applied one in `apply.state`, and a checkpoint
//! (every store flushed, the applied sequence recorded) ends its force and cuts the file
//! back to an empty chain.
//!
//! The file is a [journal] (its framing: a header, then records
//! each a control entry with a sequence, a layout fingerprint, a kind and a CRC, and its
//! entries), of records of kind 0 ([`Kind::ApplyGroup`]), the stream sequence as each
//! record's. Entries (little-endian words):
//! ```text
//! header, 4096 bytes: the record_file.rs frame, magic "TIERDBAU", version 1, record size 64
//! each record's n entries: cells and states as storage/undo_entry.rs encodes them (the encoding
//!   counters.journal shares), then empty blocks, then the raw tails (with a raw tier
//!   only):
//!     cell:  w0 = 1 | tier << 8 (adds unused: 0), w1 = period start, w2 = chunk << 32 | bucket,
//!            w3 = slot, w4..w8 = count, total, min, max before the chain (f64 bits)
//!     state: w0 = 2, w1 = series id, w2..w5 = flags, last time, last raw value before it
//!     raw:   w0 = 3, w1 = series id, w2 = 1 when the series had a raw point before the chain
//!            (else 0), w3 = that point's time (i64), w4..w8 = 0
//!     empty block: w0 = 4 | tier << 8, w1 = period start, w2 = chunk << 32 | first
//!            bucket, w3 = first slot (both multiples of 16), w4..w8 = 256 bits: bit
//!            16 × b + s (bit i % 64 of w[4 + i / 64]) set when the cell of bucket
//!            first + b and slot first + s was empty before the chain (all four fields
//!            zero, as a cell no sample reached)
//!     histogram: w0 = 5 | tier << 8 | m << 32, w1 = period start, w2 = chunk << 32 |
//!            bucket, w3 = slot, w4 = length L of the histogram's encoding
//!            (`Histogram::encode`; 0: the cell held none), w5..w8 = its first 24 bytes;
//!            then m = ceil((L - 24) / 64) continuation entries (counted in n) holding the
//!            rest, zero-padded: the histogram of a distribution series' cell whose
//!            bucket was not empty before the chain, beside that cell's entry
//! ```
//! A cell entry for an empty cell would take 64 bytes to say "zero": in a bulk load or under
//! live traffic nearly every pre-image is of a bucket no sample reached yet. A group's
//! cells come a series at a time (its buckets in time order) or an instant at a time (one
//! bucket of many series); either way most of them fall in a few blocks of 16 buckets by
//! 16 slots, which an empty block entry holds whole.
//! A chain of one record is the format this file had when it held one group's record, so a
//! file written by an older binary reads the same. (An older binary reads only a chain's
//! first record: after a crash, open the directory with this version before going back.)
//! Raw appends are not undone by a pre-image: a group only appends after each series' last
//! raw point, so putting the series back to the points up to the time its raw entry keeps
//! ([`crate::storage::raw::RawStore::truncate_after`]) takes away exactly what the chain's
//! groups appended. A binary older than the raw entries refuses the record by name, as an
//! entry of no known kind; it also refused a raw tier in cluster mode, so it never meets one.
//! A binary older than the empty blocks refuses a chain holding one the same way: open the
//! directory with this version first, to roll it back. The same holds for histogram entries.
//! A cell emptied by a roll-back loses its histogram with its record, so a cell empty before
//! the chain needs no histogram entry.
//! The chain ends as a journal's does: at a control entry that is all zero, a record that
//! runs past the file, fails its CRC (it was torn while being written, before anything of
//! its group was stored: the group's stores wait for the fsync) or does not follow its
//! predecessor's sequence. A whole record of another kind is refused by name.

use std::path::Path;

use crate::bucket::Bucket;
use crate::error::Error;
use crate::error::Result;
use crate::histogram::Histogram;
use crate::storage::cells::{same_bits, CellAt};
use crate::storage::journal::{self, Entry, Journal, Kind};
use crate::storage::record_file::Frame;
use crate::storage::undo_entry::{Undo, ENTRY_SIZE, WORDS};
use crate::time::Timestamp;

/// The kind word of a raw tail entry (the counters journal's kinds are 1 and 2).
const KIND_RAW_TAIL: u64 = 3;

/// The kind of an empty block entry.
const KIND_EMPTY_BLOCK: u64 = 4;

/// The kind of a histogram entry.
const KIND_HISTOGRAM: u64 = 5;

/// Bytes of a histogram's encoding its entry holds; the rest follow in continuation entries.
const HISTOGRAM_HEAD: usize = 24;

/// Buckets, and slots, one empty block spans.
const BLOCK_SIDE: u32 = 16;

const FRAME: Frame = Frame {
    magic: b"TIERDBAU",
    version: 1,
    record_size: ENTRY_SIZE as u32,
    what: "partition undo record",
};

/// One group's undo record as read back.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct UndoRecord {
    /// The group's last stream sequence.
    pub(super) seq: u64,
    /// The tiers layout fingerprint the cell entries were taken under.
    pub(super) layout: u64,
    /// The pre-images.
    pub(super) entries: Vec<Undo>,
    /// The raw tails before the group, of every series it names (with a raw tier).
    pub(super) raw_tails: Vec<RawTail>,
    /// The histograms of the distribution cells among the entries.
    pub(super) histograms: Vec<HistogramImage>,
}

/// A distribution series' cell's histogram before a group: `None` when it held none.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct HistogramImage {
    /// The cell.
    pub(super) at: CellAt,
    /// Its histogram.
    pub(super) histogram: Option<Histogram>,
}

impl HistogramImage {
    /// The entry and its continuation entries.
    fn encode(&self, out: &mut Vec<[u64; WORDS]>) {
        let mut body = Vec::new();
        if let Some(histogram) = &self.histogram {
            histogram.encode(&mut body);
        }
        let rest = body.len().saturating_sub(HISTOGRAM_HEAD);
        let more = rest.div_ceil(ENTRY_SIZE);
        let at = self.at;
        let mut head = [0u8; HISTOGRAM_HEAD];
        let first = body.len().min(HISTOGRAM_HEAD);
        head[..first].copy_from_slice(&body[..first]);
        let mut w = [
            KIND_HISTOGRAM | (at.tier as u64) << 8 | (more as u64) << 32,
            at.period_start as u64,
            u64::from(at.chunk) << 32 | u64::from(at.bucket),
            u64::from(at.slot),
            body.len() as u64,
            0,
            0,
            0,
        ];
        for (word, bytes) in w[5..].iter_mut().zip(head.chunks_exact(8)) {
            *word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        }
        out.push(w);
        for chunk in body[first..].chunks(ENTRY_SIZE) {
            let mut bytes = [0u8; ENTRY_SIZE];
            bytes[..chunk.len()].copy_from_slice(chunk);
            let mut w = [0u64; WORDS];
            for (word, b) in w.iter_mut().zip(bytes.chunks_exact(8)) {
                *word = u64::from_le_bytes(b.try_into().expect("8 bytes"));
            }
            out.push(w);
        }
    }

    /// The image whose entry is `w`, its continuation entries taken from `rest` (the entries
    /// after it); with how many it took. `None` when `w` and those entries are not one this
    /// format writes.
    fn decode(w: &[u64; WORDS], rest: &[[u64; WORDS]]) -> Option<(HistogramImage, usize)> {
        if w[0] & 0xff != KIND_HISTOGRAM {
            return None;
        }
        let more = (w[0] >> 32) as usize;
        let len = usize::try_from(w[4]).ok()?;
        if len.saturating_sub(HISTOGRAM_HEAD).div_ceil(ENTRY_SIZE) != more || more > rest.len() {
            return None;
        }
        let mut body: Vec<u8> = w[5..].iter().flat_map(|word| word.to_le_bytes()).collect();
        body.extend(
            rest[..more]
                .iter()
                .flatten()
                .flat_map(|word| word.to_le_bytes()),
        );
        if body[len..].iter().any(|&b| b != 0) {
            return None;
        }
        body.truncate(len);
        let histogram = match len {
            0 => None,
            _ => match Histogram::decode(&body) {
                Ok((histogram, used)) if used == len => Some(histogram),
                _ => return None,
            },
        };
        let at = CellAt {
            tier: ((w[0] >> 8) & 0xff_ffff) as usize,
            period_start: w[1] as Timestamp,
            chunk: (w[2] >> 32) as u32,
            bucket: w[2] as u32,
            slot: u32::try_from(w[3]).ok()?,
        };
        Some((HistogramImage { at, histogram }, more))
    }
}

/// A series' raw tier before a group: the time of its last raw point, `None` when it had
/// none. Rolling the group back keeps the points up to it and takes the rest away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RawTail {
    /// Series id.
    pub(super) id: u32,
    /// Its last raw point's time.
    pub(super) last: Option<Timestamp>,
}

impl RawTail {
    fn encode(&self) -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        w[0] = KIND_RAW_TAIL;
        w[1] = u64::from(self.id);
        if let Some(last) = self.last {
            w[2] = 1;
            w[3] = last as u64;
        }
        w
    }

    /// `None` when `w` is no raw tail entry, or not one this format writes.
    fn decode(w: &[u64; WORDS]) -> Option<RawTail> {
        let well_formed = w[0] == KIND_RAW_TAIL
            && w[2] <= 1
            && (w[2] == 1 || w[3] == 0)
            && w[4..].iter().all(|&x| x == 0);
        if !well_formed {
            return None;
        }
        Some(RawTail {
            id: u32::try_from(w[1]).ok()?,
            last: (w[2] == 1).then_some(w[3] as Timestamp),
        })
    }
}

/// Cells empty before the chain, in one block of [`BLOCK_SIDE`] buckets by as many slots of
/// one tier, period and chunk, from `first_bucket` and `first_slot` (multiples of the side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EmptyBlock {
    tier: usize,
    period_start: Timestamp,
    chunk: u32,
    first_bucket: u32,
    first_slot: u32,
    /// Bit `i % 64` of word `i / 64`, for `i` = side × (bucket - first) + (slot - first).
    cells: [u64; 4],
}

impl EmptyBlock {
    /// The block holding `entry` alone, when it is a cell empty before the chain, bit for bit
    /// ([`Bucket::EMPTY`]), with no adds: a restore writes exactly that back.
    fn of(entry: &Undo) -> Option<EmptyBlock> {
        let Undo::Cell {
            at,
            adds: 0,
            before,
        } = *entry
        else {
            return None;
        };
        if !same_bits(&before, &Bucket::EMPTY) {
            return None;
        }
        let i = (at.bucket % BLOCK_SIDE) * BLOCK_SIDE + at.slot % BLOCK_SIDE;
        let mut cells = [0u64; 4];
        cells[(i / 64) as usize] = 1 << (i % 64);
        Some(EmptyBlock {
            tier: at.tier,
            period_start: at.period_start,
            chunk: at.chunk,
            first_bucket: at.bucket - at.bucket % BLOCK_SIDE,
            first_slot: at.slot - at.slot % BLOCK_SIDE,
            cells,
        })
    }

    /// Which block it is: tier, period start, chunk, first bucket, first slot.
    fn place(&self) -> (usize, Timestamp, u32, u32, u32) {
        let EmptyBlock {
            tier,
            period_start,
            chunk,
            first_bucket,
            first_slot,
            cells: _,
        } = *self;
        (tier, period_start, chunk, first_bucket, first_slot)
    }

    /// Adds `other`'s cells when it is the same block; false (and nothing added) when not.
    fn merge(&mut self, other: &EmptyBlock) -> bool {
        let same = self.place() == other.place();
        if same {
            for (mine, theirs) in self.cells.iter_mut().zip(other.cells) {
                *mine |= theirs;
            }
        }
        same
    }

    fn encode(&self) -> [u64; WORDS] {
        let [a, b, c, d] = self.cells;
        [
            KIND_EMPTY_BLOCK | (self.tier as u64) << 8,
            self.period_start as u64,
            u64::from(self.chunk) << 32 | u64::from(self.first_bucket),
            u64::from(self.first_slot),
            a,
            b,
            c,
            d,
        ]
    }

    /// `None` when `w` is no empty block entry, or not one this format writes.
    fn decode(w: &[u64; WORDS]) -> Option<EmptyBlock> {
        let first_bucket = w[2] as u32;
        let first_slot = u32::try_from(w[3]).ok()?;
        let aligned = |first: u32| {
            first.is_multiple_of(BLOCK_SIDE) && first.checked_add(BLOCK_SIDE - 1).is_some()
        };
        let well_formed = w[0] & 0xff == KIND_EMPTY_BLOCK
            && w[0] >> 32 == 0
            && aligned(first_bucket)
            && aligned(first_slot)
            && w[4..].iter().any(|&x| x != 0);
        well_formed.then(|| EmptyBlock {
            tier: ((w[0] >> 8) & 0xff_ffff) as usize,
            period_start: w[1] as Timestamp,
            chunk: (w[2] >> 32) as u32,
            first_bucket,
            first_slot,
            cells: [w[4], w[5], w[6], w[7]],
        })
    }

    /// The block's cells, as the cell entries they stand for.
    fn undo_entries(self) -> impl Iterator<Item = Undo> {
        (0..BLOCK_SIDE * BLOCK_SIDE)
            .filter(move |i| self.cells[(i / 64) as usize] & 1 << (i % 64) != 0)
            .map(move |i| Undo::Cell {
                at: CellAt {
                    tier: self.tier,
                    period_start: self.period_start,
                    chunk: self.chunk,
                    bucket: self.first_bucket + i / BLOCK_SIDE,
                    slot: self.first_slot + i % BLOCK_SIDE,
                },
                adds: 0,
                before: Bucket::EMPTY,
            })
    }
}

/// The open undo file: a [`Journal`] of [`Kind::ApplyGroup`] records.
pub(super) struct UndoFile {
    journal: Journal,
    /// Reused between groups.
    entries: Vec<Entry>,
}

impl UndoFile {
    /// File name inside the partition's engine directory.
    pub(super) const FILE_NAME: &'static str = "apply.undo";

    /// Opens `dir/apply.undo`, creating it whole (no record) when missing.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file when it is not this format's; [`Error::Io`].
    pub(super) fn open(dir: &Path) -> Result<UndoFile> {
        Ok(UndoFile {
            journal: Journal::open(dir.join(Self::FILE_NAME), &FRAME)?,
            entries: Vec::new(),
        })
    }

    /// The path, for messages.
    pub(super) fn path(&self) -> &Path {
        self.journal.path()
    }

    /// The chain the file holds, first record first; empty when it holds none (never
    /// written, cleared, or its first record torn while being written).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the file for a whole record (its CRC holds) of another
    /// kind than an apply group's, or with an entry of no known kind; [`Error::Io`].
    pub(super) fn read(&self) -> Result<Vec<UndoRecord>> {
        (self.journal.read()?.into_iter())
            .map(|record| self.decode(record))
            .collect()
    }

    /// The undo record a journal record holds.
    fn decode(&self, journal_record: journal::Record) -> Result<UndoRecord> {
        let at = journal_record.offset;
        if journal_record.kind != Kind::ApplyGroup {
            return Err(Error::corrupt(
                self.path(),
                format!(
                    "the record at byte {at} is a {:?} record, which has no place in an undo chain",
                    journal_record.kind
                ),
            ));
        }
        let mut record = UndoRecord {
            seq: journal_record.seq,
            layout: journal_record.layout,
            entries: Vec::new(),
            raw_tails: Vec::new(),
            histograms: Vec::new(),
        };
        let words = &journal_record.entries;
        let mut i = 0;
        while let Some(w) = words.get(i) {
            let unknown = || {
                Error::corrupt(
                    self.path(),
                    format!("entry {} at byte {at} is of no known kind", i + 1),
                )
            };
            match w[0] & 0xff {
                KIND_RAW_TAIL => (record.raw_tails).push(RawTail::decode(w).ok_or_else(unknown)?),
                KIND_EMPTY_BLOCK => (record.entries)
                    .extend(EmptyBlock::decode(w).ok_or_else(unknown)?.undo_entries()),
                KIND_HISTOGRAM => {
                    let (image, more) =
                        HistogramImage::decode(w, &words[i + 1..]).ok_or_else(unknown)?;
                    record.histograms.push(image);
                    i += more;
                }
                _ => record.entries.push(Undo::decode(*w).ok_or_else(unknown)?),
            }
            i += 1;
        }
        Ok(record)
    }

    /// Appends the record of the group ending at `seq` to the chain, whole, and fsyncs it:
    /// once this returns, the group may store. `seq` is above the chain's last sequence.
    /// Empty cells go in empty blocks, written after the other entries. A tier's next cell
    /// is most often in the block its last one went in (the same series' next bucket, or the
    /// same bucket's next series), which is tried before the table of every block. Returns
    /// the entries the record took after its control entry: what bounds the chain's length.
    pub(super) fn append(
        &mut self,
        seq: u64,
        layout: u64,
        entries: &[Undo],
        raw_tails: &[RawTail],
        histograms: &[HistogramImage],
    ) -> Result<usize> {
        let mut out = std::mem::take(&mut self.entries);
        out.clear();
        let mut blocks: Vec<EmptyBlock> = Vec::new();
        let mut block_at = rustc_hash::FxHashMap::default();
        // At a tier's index: the block its last empty cell went in.
        let mut last_block: Vec<Option<usize>> = Vec::new();
        for entry in entries {
            let Some(block) = EmptyBlock::of(entry) else {
                out.push(entry.encode());
                continue;
            };
            if last_block.len() <= block.tier {
                last_block.resize(block.tier + 1, None);
            }
            let last = &mut last_block[block.tier];
            if last.is_some_and(|i| blocks[i].merge(&block)) {
                continue;
            }
            let i = *block_at.entry(block.place()).or_insert(blocks.len());
            if i == blocks.len() {
                blocks.push(block);
            } else {
                blocks[i].merge(&block);
            }
            *last = Some(i);
        }
        out.extend(blocks.iter().map(EmptyBlock::encode));
        out.extend(raw_tails.iter().map(RawTail::encode));
        for image in histograms {
            image.encode(&mut out);
        }
        let n = out.len();
        let written = self.journal.append(Kind::ApplyGroup, seq, layout, &out);
        self.entries = out;
        written.map(|()| n)
    }

    /// Empties the chain, durably: after a checkpoint or a rollback, so it is not rolled
    /// back again. The file is cut back to one zero control entry.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(super) fn clear(&mut self) -> Result<()> {
        self.journal.clear()
    }
}

//! One log message carrying the entries of several partitions: the edge publishes a round's
//! partitions together (a large round, a message per set of partitions that the same nodes
//! apply) rather than a message per partition, because a message costs a publish, an
//! acknowledgement, three log copies and a delivery to each node that reads it whatever its
//! size. Each partition's reader takes its own section and applies it as
//! it would a message of its own; the stream sequence is the message's, shared by its
//! sections. A message that holds one partition's entry, or one entry for all the
//! partitions it names (a deletion), is that entry alone, without an envelope.
//!
//! Byte layout, little-endian; docs/file-format.md ("Cluster log messages") mirrors it:
//!
//! | offset | size   | field                                                          |
//! |--------|--------|----------------------------------------------------------------|
//! | 0      | 4      | magic, `TDBM`                                                  |
//! | 4      | 1      | format version, u8, 1                                          |
//! | 5      | 4      | `sections`, u32: 2 to [`MAX_SECTIONS`]                         |
//! | 9      | 4      | CRC-32 (IEEE) of the table                                     |
//! | 13     | 8 × n  | the table: per section, its partition (u32, strictly           |
//! |        |        | increasing) and its length in bytes (u32)                      |
//! | then   | rest   | the sections, in the table's order; their lengths sum to the   |
//! |        |        | rest exactly                                                   |
//!
//! A section is a batch message (`TDBW`, [`super::wire`]) with its own checksum, so the
//! envelope's covers only the table: a damaged table could otherwise hand a partition
//! another's samples.

use bytes::Bytes;

use super::delete_entry::{self, LogEntry};
use super::ownership::MAX_PARTITIONS;
use super::wire::u32_at;

/// Identifies an envelope among the log's messages.
const MAGIC: [u8; 4] = *b"TDBM";
/// The one layout this build writes and reads.
const VERSION: u8 = 1;
const VERSION_OFFSET: usize = MAGIC.len();
const SECTIONS_OFFSET: usize = VERSION_OFFSET + 1;
const CRC_OFFSET: usize = SECTIONS_OFFSET + 4;
const TABLE_OFFSET: usize = CRC_OFFSET + 4;
/// Bytes per table row.
const ROW_LEN: usize = 8;

/// Sections one envelope may hold: one per partition of the largest cluster.
const MAX_SECTIONS: usize = MAX_PARTITIONS as usize;

/// Bytes an envelope of `sections` sections adds to their own.
pub(crate) fn overhead(sections: usize) -> usize {
    TABLE_OFFSET + ROW_LEN * sections
}

/// An envelope of `sections` (partition, entry), partitions strictly increasing, at least two.
pub(crate) fn encode(sections: &[(u32, Bytes)]) -> Bytes {
    debug_assert!(sections.len() >= 2, "an envelope of one section");
    debug_assert!(
        sections.windows(2).all(|w| w[0].0 < w[1].0),
        "sections out of order"
    );
    let body: usize = sections.iter().map(|(_, entry)| entry.len()).sum();
    let mut out = Vec::with_capacity(overhead(sections.len()) + body);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for (partition, entry) in sections {
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&(entry.len() as u32).to_le_bytes());
    }
    let crc = crc32fast::hash(&out[TABLE_OFFSET..]);
    out[CRC_OFFSET..TABLE_OFFSET].copy_from_slice(&crc.to_le_bytes());
    for (_, entry) in sections {
        out.extend_from_slice(entry);
    }
    Bytes::from(out)
}

/// `partition`'s entry in the log message `payload`, decoded: a batch of samples or a
/// deletion.
///
/// # Errors
/// Why the message holds no entry of `partition` that can be read.
pub(crate) fn entry(payload: &Bytes, partition: u32) -> Result<LogEntry, String> {
    section(payload, partition).and_then(|entry| delete_entry::decode(&entry))
}

/// `partition`'s entry in the log message `payload`: its section when the payload is an
/// envelope, else the whole payload. Shares `payload`'s bytes.
///
/// # Errors
/// Why the envelope cannot be read, or that it holds no section of `partition`.
pub(crate) fn section(payload: &Bytes, partition: u32) -> Result<Bytes, String> {
    if !payload.starts_with(&MAGIC) {
        return Ok(payload.clone());
    }
    if payload.len() < TABLE_OFFSET {
        return Err(format!(
            "an envelope of {} bytes, shorter than its header",
            payload.len()
        ));
    }
    if payload[VERSION_OFFSET] != VERSION {
        return Err(format!(
            "an envelope of format version {}; this build reads version {VERSION}",
            payload[VERSION_OFFSET]
        ));
    }
    let sections = u32_at(payload, SECTIONS_OFFSET) as usize;
    if !(2..=MAX_SECTIONS).contains(&sections) {
        return Err(format!(
            "an envelope of {sections} sections; 2 to {MAX_SECTIONS} allowed"
        ));
    }
    let body_start = overhead(sections);
    if payload.len() < body_start {
        return Err(format!(
            "an envelope of {} bytes, shorter than its table of {sections} sections",
            payload.len()
        ));
    }
    let table = &payload[TABLE_OFFSET..body_start];
    if crc32fast::hash(table) != u32_at(payload, CRC_OFFSET) {
        return Err("an envelope whose table's checksum does not match".into());
    }
    let mut start = body_start;
    let mut found = None;
    let mut previous = None;
    for row in 0..sections {
        let at = TABLE_OFFSET + row * ROW_LEN;
        let (held, len) = (u32_at(payload, at), u32_at(payload, at + 4) as usize);
        if previous.is_some_and(|p| held <= p) {
            return Err(format!(
                "an envelope whose partitions are out of order at section {row}"
            ));
        }
        previous = Some(held);
        let end = start.saturating_add(len);
        if held == partition {
            found = Some(start..end);
        }
        start = end;
    }
    if start != payload.len() {
        return Err(format!(
            "an envelope whose sections add up to {} bytes, not the {} it holds",
            start - body_start,
            payload.len() - body_start
        ));
    }
    found
        .map(|range| payload.slice(range))
        .ok_or_else(|| format!("an envelope without a section of partition {partition}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections() -> Vec<(u32, Bytes)> {
        vec![
            (1, Bytes::from_static(b"TDBW one")),
            (4, Bytes::from_static(b"")),
            (9, Bytes::from_static(b"TDBW nine, longer")),
        ]
    }

    #[test]
    fn each_partition_gets_its_own_section_back() {
        let payload = encode(&sections());
        assert_eq!(payload.len(), overhead(3) + 8 + 17);
        for (partition, entry) in sections() {
            assert_eq!(section(&payload, partition).unwrap(), entry);
        }
        let missing = section(&payload, 2).unwrap_err();
        assert!(
            missing.contains("without a section of partition 2"),
            "{missing}"
        );
        // Anything else is the partition's entry whole.
        let plain = Bytes::from_static(b"TDBW alone");
        assert_eq!(section(&plain, 7).unwrap(), plain);
    }

    #[test]
    fn a_damaged_or_foreign_envelope_is_refused_and_never_panics() {
        let payload = encode(&sections()).to_vec();
        let refused = |bytes: Vec<u8>| section(&Bytes::from(bytes), 1).unwrap_err();
        let mut table = payload.clone();
        table[TABLE_OFFSET] ^= 1;
        assert!(refused(table).contains("checksum"));
        let mut version = payload.clone();
        version[VERSION_OFFSET] = 2;
        assert!(refused(version).contains("version 2"));
        let mut short = payload.clone();
        short.pop();
        assert!(refused(short).contains("add up to"));
        let mut long = payload.clone();
        long.push(0);
        assert!(refused(long).contains("add up to"));
        let mut count = payload.clone();
        count[SECTIONS_OFFSET..CRC_OFFSET].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refused(count).contains("sections; 2 to"));
        let mut no_table = payload[..TABLE_OFFSET + 4].to_vec();
        no_table[SECTIONS_OFFSET..CRC_OFFSET].copy_from_slice(&2u32.to_le_bytes());
        assert!(refused(no_table).contains("shorter than its table"));
        assert!(refused(payload[..7].to_vec()).contains("shorter than its header"));
        // Every truncation and every flipped byte of the header and table is an error or a
        // section, never a panic.
        for cut in 0..payload.len() {
            let _ = section(&Bytes::from(payload[..cut].to_vec()), 4);
        }
        for at in 0..overhead(3) {
            let mut flipped = payload.clone();
            flipped[at] ^= 0x80;
            let _ = section(&Bytes::from(flipped), 9);
        }
    }

    #[test]
    fn partitions_out_of_order_are_refused() {
        let mut rows = encode(&sections()).to_vec();
        // Swap the first two rows' partitions, then mend the table's checksum.
        rows[TABLE_OFFSET..TABLE_OFFSET + 4].copy_from_slice(&4u32.to_le_bytes());
        rows[TABLE_OFFSET + ROW_LEN..TABLE_OFFSET + ROW_LEN + 4]
            .copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32fast::hash(&rows[TABLE_OFFSET..overhead(3)]);
        rows[CRC_OFFSET..TABLE_OFFSET].copy_from_slice(&crc.to_le_bytes());
        let err = section(&Bytes::from(rows), 9).unwrap_err();
        assert!(err.contains("out of order"), "{err}");
    }
}

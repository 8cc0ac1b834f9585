//! A deletion in the ingest log. Series are deleted in cluster mode by publishing this entry
//! as one message that holds every partition (its whole payload is the entry of each): each
//! owner of a partition meets it at the same place in the partition's order as every other
//! owner, deletes what the selector selects in its store then, and records the entry's
//! sequence as applied, so it is applied exactly once
//! ([`crate::engine::Engine::apply_delete`]); samples before it are deleted
//! with the series, samples after it start the series anew.
//!
//! Byte layout (a message's whole payload), little-endian:
//!
//! | offset | size | field                                                  |
//! |--------|------|--------------------------------------------------------|
//! | 0      | 4    | magic, `TDBD` (a batch's is `TDBW`)                    |
//! | 4      | 1    | format version, u8, 1                                  |
//! | 5      | 4    | CRC-32 (IEEE) of the selector's bytes                  |
//! | 9      | rest | the selector as JSON: `{"pattern": "cpu.*", "filters": |
//! |        |      | [{"Eq": ["host", "web-*"]}, {"NotEq": [k, v]}]}`       |
//!
//! JSON rather than the selector's text form, which does not escape what a tag value may
//! hold (`,`, `}`): the entry must select on every owner exactly what it selected here.

use bytes::Bytes;

use super::wire;
use crate::engine::SampleBatch;
use crate::registry::Selector;

/// Identifies a deletion among the log's messages.
const MAGIC: [u8; 4] = *b"TDBD";
/// The one layout this build writes and reads.
const VERSION: u8 = 1;
const VERSION_OFFSET: usize = MAGIC.len();
const CRC_OFFSET: usize = VERSION_OFFSET + 1;
const TEXT_OFFSET: usize = CRC_OFFSET + 4;

/// What one message of the log holds.
#[derive(Debug)]
pub(crate) enum LogEntry {
    /// Samples to store.
    Batch(SampleBatch),
    /// Series to delete.
    Delete(Selector),
}

impl LogEntry {
    /// The samples it holds: none for a deletion.
    pub(crate) fn samples(&self) -> usize {
        match self {
            LogEntry::Batch(batch) => batch.samples.len(),
            LogEntry::Delete(_) => 0,
        }
    }
}

/// The payload of a deletion of what `selector` selects.
pub(crate) fn encode(selector: &Selector) -> Bytes {
    // A selector is strings and a list of them: it always serializes.
    let json = serde_json::to_vec(selector).unwrap_or_default();
    let mut payload = Vec::with_capacity(TEXT_OFFSET + json.len());
    payload.extend_from_slice(&MAGIC);
    payload.push(VERSION);
    payload.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    payload.extend_from_slice(&json);
    Bytes::from(payload)
}

/// Decodes a message of the log: a deletion, or else a batch of samples.
///
/// # Errors
/// What is wrong with a payload that is neither.
pub(crate) fn decode(payload: &[u8]) -> Result<LogEntry, String> {
    if !payload.starts_with(&MAGIC) {
        return wire::decode(payload)
            .map(LogEntry::Batch)
            .map_err(|e| e.to_string());
    }
    if payload.len() < TEXT_OFFSET {
        return Err(format!(
            "a deletion of {} bytes, shorter than its header",
            payload.len()
        ));
    }
    if payload[VERSION_OFFSET] != VERSION {
        return Err(format!(
            "a deletion of format version {}; this build reads version {VERSION}",
            payload[VERSION_OFFSET]
        ));
    }
    let text = &payload[TEXT_OFFSET..];
    if crc32fast::hash(text) != wire::u32_at(payload, CRC_OFFSET) {
        return Err("a deletion whose checksum does not match".into());
    }
    serde_json::from_slice::<Selector>(text)
        .map(LogEntry::Delete)
        .map_err(|e| format!("a deletion's selector: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_round_trips_and_a_damaged_one_is_refused() {
        for text in [
            "cpu.*{host=web-*,dc!=eu}",
            "a.b",
            "x{k=a\\,b}",
            "*;host=old-1",
        ] {
            let selector = Selector::parse(text).unwrap();
            let payload = encode(&selector);
            match decode(&payload) {
                Ok(LogEntry::Delete(back)) => assert_eq!(back, selector),
                _ => panic!("{text} did not come back"),
            }
            let mut damaged = payload.to_vec();
            *damaged.last_mut().unwrap() ^= 1;
            assert!(decode(&damaged).unwrap_err().contains("checksum"));
            damaged[VERSION_OFFSET] = 9;
            assert!(decode(&damaged).unwrap_err().contains("version 9"));
        }
        assert!(decode(b"TDBD").unwrap_err().contains("shorter"));
        // Anything else is read as a batch.
        assert!(decode(b"not a message").is_err());
    }
}

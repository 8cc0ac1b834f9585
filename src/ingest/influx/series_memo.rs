//! A thread's memo of the series parts of the Influx lines it parsed lately: a line's
//! measurement and tags as written (`cpu,host=a,region=eu`), to the canonical text of the
//! measurement and of the tag part. An agent sends the same series at every interval, and
//! taking a line's tags apart, sorting them and printing them canonically was about half of
//! parsing a line. What the memo keeps is a pure function of the written bytes, and it is
//! kept only for a series part that parsed, so what it gives back is what parsing would
//! give.
//!
//! Direct-mapped: a written part has one slot, chosen by its hash, and takes the slot over
//! when it misses there twice in a row (a series met again before another series of the
//! slot). Once the slots' strings have grown nothing is allocated and the memory stays
//! bounded. With many more series than slots, a part's second miss rarely follows its
//! first, so a line costs what parsing costs plus a hash and two reads of small arrays:
//! copying every missed series into its slot made such lines half as slow again.

use std::cell::RefCell;

use crate::registry::text_hash;

/// Slots per thread, a power of two.
const SLOTS: usize = 16384;

/// Longest text a slot keeps (written part, measurement or tag part), so the memo holds at
/// most 3 × `SLOTS` × this many bytes of text per thread, beside its slots (about 1.4 MB);
/// longer series are parsed every time.
const TEXT_BYTES: usize = 256;

thread_local! {
    /// This thread's memo; see the module docs.
    static MEMO: RefCell<SeriesMemo> = const {
        RefCell::new(SeriesMemo {
            held: Vec::new(),
            missed: Vec::new(),
            slots: Vec::new(),
        })
    };
}

/// The memo, its vectors made on first use, each of `SLOTS` entries.
struct SeriesMemo {
    /// Per slot, the hash of the written part it holds (0: none).
    held: Vec<u64>,
    /// Per slot, the hash of the written part that missed there last (0: none).
    missed: Vec<u64>,
    slots: Vec<Slot>,
}

/// One written series part and its canonical texts; all empty while unused.
#[derive(Default)]
struct Slot {
    written: String,
    measurement: String,
    tag_part: String,
}

/// Where a written series part sits in the memo, found once per line for [`recall`] and,
/// after a miss, [`remember`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    /// The part's hash, never 0 (which marks an empty entry).
    hash: u64,
    /// Its slot: the top bits of the hash (FxHash mixes into the high bits).
    at: usize,
}

impl Place {
    pub(super) fn of(written: &str) -> Place {
        let hash = text_hash(written).max(1);
        let at = (hash >> (u64::BITS - SLOTS.trailing_zeros())) as usize;
        Place { hash, at }
    }
}

/// Copies the canonical measurement and tag part of the series part `written` (at `place`)
/// into `measurement` and `tag_part` (replacing what they held) when this thread's memo has
/// them; false, and both untouched, when it has not.
pub(super) fn recall(
    place: Place,
    written: &str,
    measurement: &mut String,
    tag_part: &mut String,
) -> bool {
    if written.len() > TEXT_BYTES {
        return false;
    }
    let Place { hash, at } = place;
    MEMO.with_borrow(|memo| {
        if memo.held.get(at) != Some(&hash) || memo.slots[at].written != written {
            return false;
        }
        let slot = &memo.slots[at];
        measurement.clone_from(&slot.measurement);
        tag_part.clone_from(&slot.tag_part);
        true
    })
}

/// Notes in this thread's memo that the series part `written` (at `place`), which parsed,
/// has the canonical `measurement` and `tag_part`: kept when `written` missed its slot the
/// last time too (see the module docs).
pub(super) fn remember(place: Place, written: &str, measurement: &str, tag_part: &str) {
    if [written, measurement, tag_part]
        .iter()
        .any(|text| text.len() > TEXT_BYTES)
    {
        return;
    }
    let Place { hash, at } = place;
    MEMO.with_borrow_mut(|memo| {
        if memo.slots.is_empty() {
            memo.held = vec![0; SLOTS];
            memo.missed = vec![0; SLOTS];
            memo.slots.resize_with(SLOTS, Slot::default);
        }
        if memo.missed[at] != hash {
            memo.missed[at] = hash;
            return;
        }
        memo.held[at] = hash;
        let slot = &mut memo.slots[at];
        for (kept, text) in [
            (&mut slot.written, written),
            (&mut slot.measurement, measurement),
            (&mut slot.tag_part, tag_part),
        ] {
            kept.clear();
            kept.push_str(text);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recalled(written: &str, measurement: &mut String, tag_part: &mut String) -> bool {
        recall(Place::of(written), written, measurement, tag_part)
    }

    fn kept(written: &str, measurement: &str, tag_part: &str) {
        remember(Place::of(written), written, measurement, tag_part);
    }

    #[test]
    fn a_series_part_is_recalled_as_remembered_until_another_takes_its_slot() {
        let (mut measurement, mut tag_part) = (String::from("old"), String::from("old"));
        assert!(!recalled("cpu,host=a", &mut measurement, &mut tag_part));
        assert_eq!((measurement.as_str(), tag_part.as_str()), ("old", "old"));
        // Kept at its second miss in a row.
        kept("cpu,host=a", "cpu", "x{host=a}");
        assert!(!recalled("cpu,host=a", &mut measurement, &mut tag_part));
        kept("cpu,host=a", "cpu", "x{host=a}");
        assert!(recalled("cpu,host=a", &mut measurement, &mut tag_part));
        assert_eq!(
            (measurement.as_str(), tag_part.as_str()),
            ("cpu", "x{host=a}")
        );
        assert!(!recalled("cpu,host=b", &mut measurement, &mut tag_part));
        // A part of the same slot replaces it at its second miss in a row, not at a miss
        // between two of another part.
        let slot_of = |written: &str| Place::of(written).at;
        let rivals: Vec<String> = (0..)
            .map(|i| format!("m{i},host=a"))
            .filter(|w| slot_of(w) == slot_of("cpu,host=a"))
            .take(2)
            .collect();
        let rival = &rivals[0];
        kept(rival, "rival", "x");
        kept(&rivals[1], "other", "x");
        kept(rival, "rival", "x");
        assert!(recalled("cpu,host=a", &mut measurement, &mut tag_part));
        kept(rival, "rival", "x");
        assert!(!recalled("cpu,host=a", &mut measurement, &mut tag_part));
        assert!(recalled(rival, &mut measurement, &mut tag_part));
        assert_eq!(measurement, "rival");
    }

    #[test]
    fn long_texts_are_not_kept() {
        let long = "m".repeat(TEXT_BYTES + 1);
        let (mut measurement, mut tag_part) = (String::new(), String::new());
        for _ in 0..2 {
            kept(&long, "m", "x");
            kept("short,a=b", &long, "x");
        }
        assert!(!recalled(&long, &mut measurement, &mut tag_part));
        assert!(!recalled("short,a=b", &mut measurement, &mut tag_part));
    }
}

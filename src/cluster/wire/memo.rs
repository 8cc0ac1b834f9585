//! A thread's memo of the key sections it deflated or inflated lately. An agent sends the
//! same series in the same order at every interval, so a partition's message usually carries
//! the key section of the partition's message before it, and deflating that again cost more
//! than all the rest of a small message's encoding (miniz resets its 300 KB of tables per
//! section, whatever the section's size). What the memo keeps is the result of a pure
//! function of the section's bytes, so what it gives back is what the function would give.

use std::borrow::Cow;

/// Sections a memo keeps; one more empties it first (a node's partitions are fewer).
const SECTIONS: usize = 64;

/// A section longer than this is not kept: it is a large message's, whose other work dwarfs
/// the deflate, and the memo stays within `SECTIONS` × 2 × this many bytes.
const SECTION_BYTES: usize = 16 * 1024;

/// Results of one function by its input section; see the module docs.
pub(super) struct SectionMemo {
    results: rustc_hash::FxHashMap<Box<[u8]>, Box<[u8]>>,
}

impl SectionMemo {
    pub(super) const fn new() -> SectionMemo {
        SectionMemo {
            results: std::collections::HashMap::with_hasher(rustc_hash::FxBuildHasher),
        }
    }

    /// `make(section)`, from the memo when it was made before. An error is not kept.
    pub(super) fn get_or_make<E>(
        &mut self,
        section: &[u8],
        make: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
    ) -> Result<Cow<'_, [u8]>, E> {
        if section.len() > SECTION_BYTES {
            return make(section).map(Cow::Owned);
        }
        if !self.results.contains_key(section) {
            let made = make(section)?;
            if made.len() > SECTION_BYTES {
                return Ok(Cow::Owned(made));
            }
            if self.results.len() >= SECTIONS {
                self.results.clear();
            }
            self.results.insert(section.into(), made.into());
        }
        Ok(Cow::Borrowed(&self.results[section]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_made_once_while_kept_and_errors_and_large_ones_are_not_kept() {
        let mut memo = SectionMemo::new();
        let made = std::cell::Cell::new(0);
        let reverse = |s: &[u8]| -> Result<Vec<u8>, ()> {
            made.set(made.get() + 1);
            Ok(s.iter().rev().copied().collect())
        };
        assert_eq!(&*memo.get_or_make(b"abc", reverse).unwrap(), b"cba");
        assert_eq!(&*memo.get_or_make(b"abc", reverse).unwrap(), b"cba");
        assert_eq!(&*memo.get_or_make(b"abd", reverse).unwrap(), b"dba");
        assert_eq!(made.get(), 2);
        assert!(memo
            .get_or_make(b"bad", |_| Err::<Vec<u8>, _>("no"))
            .is_err());
        assert_eq!(&*memo.get_or_make(b"bad", reverse).unwrap(), b"dab");
        let large = vec![7u8; SECTION_BYTES + 1];
        memo.get_or_make(&large, reverse).unwrap();
        memo.get_or_make(&large, reverse).unwrap();
        assert_eq!(made.get(), 5);
        // Past SECTIONS, the memo starts again rather than grow.
        for i in 0..SECTIONS as u32 + 1 {
            memo.get_or_make(&i.to_le_bytes(), reverse).unwrap();
        }
        assert!(memo.results.len() <= SECTIONS);
        assert_eq!(made.get(), 5 + SECTIONS + 1);
    }
}

//! The registry's keys in memory: every canonical key text once, back to back in one arena,
//! an end offset per id, and an index of bare ids hashed by their text. About 60 bytes per
//! series for 40-byte keys, where a map of boxed strings plus parsed keys took over 400.
//! A deleted series leaves a hole: its id keeps its place (ids index slots) but has no key.

use std::hash::Hasher;

use hashbrown::HashTable;
use rayon::prelude::*;
use rustc_hash::FxHasher;

use super::view::{is_canonical, KeyView};

/// The keys of ids `0..len`, and the index that finds an id by its text.
#[derive(Default)]
pub(super) struct KeyStore {
    /// Canonical texts in id order, back to back: one allocation instead of one per key.
    texts: String,
    /// End of each id's text in `texts`; it starts where the previous id's ends. u64, since
    /// a million keys of up to 8 KiB each can pass 4 GiB.
    ends: Vec<u64>,
    /// Ids hashed by their text: a lookup hashes the text as received and compares it with
    /// the arena, and the table holds 4 bytes (plus a control byte) per slot.
    index: HashTable<u32>,
    /// Ids of deleted series: not in `index`, no key. Read from the log as records without
    /// text; a deletion since load leaves its text in `texts`, unreachable.
    holes: rustc_hash::FxHashSet<u32>,
}

/// Why the keys read from the log were refused: the record (= id) and what is wrong.
pub(super) enum Refusal {
    /// The text, `.1`, is not a canonical key.
    NotCanonical(usize, String),
    /// The text is that of an earlier id, `.1`.
    Duplicate(usize, u32),
}

impl KeyStore {
    /// Takes the texts of ids `0..ends.len()` as read from the log (`ends` as in the field),
    /// checks that each is canonical and none repeats, and indexes them. The checks and the
    /// hashing run in parallel; only the inserts are sequential.
    ///
    /// # Errors
    /// The first record refused, in id order.
    pub(super) fn from_texts(texts: String, ends: Vec<u64>) -> Result<KeyStore, Refusal> {
        let mut store = KeyStore {
            texts,
            ends,
            index: HashTable::new(),
            holes: Default::default(),
        };
        let len = store.len();
        store.holes = (0..len)
            .filter(|&id| store.text(id).is_empty())
            .map(|id| id as u32)
            .collect();
        if let Some(bad) = (0..len)
            .into_par_iter()
            .find_first(|&id| !store.text(id).is_empty() && !is_canonical(store.text(id)))
        {
            return Err(Refusal::NotCanonical(bad, store.text(bad).to_owned()));
        }
        let hashes: Vec<u64> = (0..len)
            .into_par_iter()
            .map(|id| text_hash(store.text(id)))
            .collect();
        let KeyStore {
            texts,
            ends,
            index,
            holes,
        } = &mut store;
        *index = HashTable::with_capacity(len - holes.len());
        for (id, h) in hashes.into_iter().enumerate() {
            let text = text_of(texts, ends, id);
            if text.is_empty() {
                continue;
            }
            let found = index.find(h, |&other| text_of(texts, ends, other as usize) == text);
            if let Some(&first) = found {
                return Err(Refusal::Duplicate(id, first));
            }
            // Ids come from record positions, which the log caps below 2^32 records.
            index.insert_unique(h, id as u32, |&other| {
                text_hash(text_of(texts, ends, other as usize))
            });
        }
        Ok(store)
    }

    /// Number of keys.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The id of canonical `text`, if it is held.
    pub(super) fn get(&self, text: &str) -> Option<u32> {
        let KeyStore {
            texts, ends, index, ..
        } = self;
        index
            .find(text_hash(text), |&id| {
                text_of(texts, ends, id as usize) == text
            })
            .copied()
    }

    /// Appends canonical `text` as id [`KeyStore::len`]; the caller has checked that it is
    /// not held yet and that the id fits in a u32.
    pub(super) fn push(&mut self, text: &str) {
        let id = self.len() as u32;
        let KeyStore {
            texts, ends, index, ..
        } = self;
        texts.push_str(text);
        ends.push(texts.len() as u64);
        index.insert_unique(text_hash(text), id, |&other| {
            text_hash(text_of(texts, ends, other as usize))
        });
    }

    /// The key of `id`, if it is held (not a hole).
    pub(super) fn view(&self, id: usize) -> Option<KeyView<'_>> {
        (id < self.len() && !self.is_hole(id)).then(|| KeyView::new(self.text(id)))
    }

    /// Whether `id` is a deleted series' hole.
    pub(super) fn is_hole(&self, id: usize) -> bool {
        !self.holes.is_empty() && self.holes.contains(&(id as u32))
    }

    /// How many holes there are.
    pub(super) fn hole_count(&self) -> usize {
        self.holes.len()
    }

    /// The holes, in no order.
    pub(super) fn holes(&self) -> impl Iterator<Item = u32> + '_ {
        self.holes.iter().copied()
    }

    /// Makes `id` a hole: its key is no longer found, listed or viewed, and a later key of
    /// the same text gets a new id. False when `id` is not a held key.
    pub(super) fn remove(&mut self, id: u32) -> bool {
        if id as usize >= self.len() || self.is_hole(id as usize) {
            return false;
        }
        let KeyStore {
            texts,
            ends,
            index,
            holes,
        } = self;
        let text = text_of(texts, ends, id as usize);
        if let Ok(entry) = index.find_entry(text_hash(text), |&other| other == id) {
            entry.remove();
        }
        holes.insert(id);
        true
    }

    /// Each id's text as the log stores it: its key, or nothing for a hole.
    pub(super) fn log_texts(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(|id| match self.is_hole(id) {
            true => "",
            false => self.text(id),
        })
    }

    /// The text of `id`, which must be held.
    fn text(&self, id: usize) -> &str {
        text_of(&self.texts, &self.ends, id)
    }

    /// Bytes held on the heap (capacities, not lengths), for tests and benches of the
    /// per-series cost.
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.texts.capacity()
            + self.ends.capacity() * size_of::<u64>()
            + self.index.allocation_size()
    }
}

/// The text of `id` in an arena and its end offsets (split from [`KeyStore`] so the index
/// can be borrowed mutably beside them).
fn text_of<'a>(texts: &'a str, ends: &[u64], id: usize) -> &'a str {
    let start = match id {
        0 => 0,
        _ => ends[id - 1] as usize,
    };
    &texts[start..ends[id] as usize]
}

/// The hash of a series name or canonical text wherever the crate keys a table of bare
/// indexes by text they point at (this index, the ingest name caches, a cluster batch's key
/// index) or memoizes by text (the Influx series memo): one function for all of them.
pub(crate) fn text_hash(text: &str) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish()
}

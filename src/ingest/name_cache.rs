//! A connection's or an import's cache from series name to what the name resolves to: its id
//! on a single node, its partition on a cluster node's edge. One cache serves every ingest
//! path, so a name is resolved once per connection rather than once per sample.
//!
//! Agents send their series in one order at every instant, so the entry after the one just
//! found is checked first: with 100k series a hash lookup misses the CPU cache twice (its
//! slot, then its key), and that was the largest cost of parsing an import; the next entry in
//! first-met order is read in sequence. Any other order falls back to the hash map.
//!
//! A server's caches draw their bytes from one [`NameBudget`] that every connection shares,
//! and give them back when cleared or dropped; an import's cache is unbounded.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;

use crate::registry::text_hash;

/// Bytes of names one connection may cache, however much of the shared budget is free, so a
/// few connections cannot take all of it.
pub(crate) const CACHE_BYTES: usize = 8 * 1024 * 1024;
/// What a cached name costs beyond its text: the map's slot and the order's entry.
pub(crate) const CACHE_ENTRY_BYTES: usize = 32;

/// The bytes every connection's name cache holds together, and how often one was emptied
/// for want of room; shown in `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct NameBudget {
    bytes: AtomicUsize,
    clears: AtomicU64,
}

impl NameBudget {
    /// Draws `bytes` within `limit`; false (and nothing drawn) when that would overspend it.
    fn draw(&self, bytes: usize, limit: usize) -> bool {
        (self.bytes)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&after| after <= limit)
            })
            .is_ok()
    }

    /// Gives back `bytes` a cache drew.
    fn give_back(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes all caches hold together.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Caches emptied for want of room, since start.
    pub(crate) fn clears(&self) -> u64 {
        self.clears.load(Ordering::Relaxed)
    }
}

/// Series names met, each with what it resolves to, in the order first met.
pub(crate) struct NameCache<V> {
    /// Index into `order`, hashed by the entry's text: the texts are kept once, in `texts`.
    index: HashTable<u32>,
    /// Names in the order first met: (end of its text in `texts`, value).
    order: Vec<(usize, V)>,
    /// The texts of `order`, one after another.
    texts: String,
    /// The entry of `order` expected next.
    next: usize,
    /// Bytes this cache holds, as drawn from the budget.
    bytes: usize,
    /// The shared budget and its limit; `None`: unbounded.
    budget: Option<(Arc<NameBudget>, usize)>,
}

impl<V: Copy> NameCache<V> {
    /// A cache drawing its bytes from `budget`, which all caches share up to `limit` bytes.
    pub(crate) fn bounded(budget: Arc<NameBudget>, limit: usize) -> NameCache<V> {
        NameCache::new(Some((budget, limit)))
    }

    /// A cache without a budget (an import, which holds one cache).
    #[cfg(any(feature = "cli", test))]
    pub(crate) fn unbounded() -> NameCache<V> {
        NameCache::new(None)
    }

    fn new(budget: Option<(Arc<NameBudget>, usize)>) -> NameCache<V> {
        NameCache {
            index: HashTable::new(),
            order: Vec::new(),
            texts: String::new(),
            next: 0,
            bytes: 0,
            budget,
        }
    }

    fn text(&self, i: usize) -> &str {
        text_at(&self.texts, &self.order, i)
    }

    /// The entry of `order` named `name`, whose [`text_hash`] is `hash`.
    fn find(&self, hash: u64, name: &str) -> Option<usize> {
        let (texts, order) = (&self.texts, &self.order);
        let found = self
            .index
            .find(hash, |&i| text_at(texts, order, i as usize) == name);
        found.map(|&i| i as usize)
    }

    /// What `name` resolves to, if cached.
    pub(crate) fn get(&mut self, name: &str) -> Option<V> {
        self.get_mut(name).copied()
    }

    /// What `name` resolves to, if cached, for the caller to note more in (a cluster edge
    /// keeps where the name sits in the batch being built).
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        let i = if self.next < self.order.len() && self.text(self.next) == name {
            self.next
        } else {
            self.find(text_hash(name), name)?
        };
        self.next = i + 1;
        Some(&mut self.order[i].1)
    }

    /// Remembers `name`. A bounded cache at its own limit ([`CACHE_BYTES`]), or one that
    /// finds the shared budget spent, starts over; if the budget is still spent by the
    /// others, the name is not cached (lookups then go to the registry).
    pub(crate) fn insert(&mut self, name: &str, value: V) {
        let hash = text_hash(name);
        if self.find(hash, name).is_some() {
            return;
        }
        if let Some((budget, limit)) = self.budget.clone() {
            let cost = name.len() + CACHE_ENTRY_BYTES;
            if self.bytes + cost > CACHE_BYTES {
                self.clear();
            }
            if !budget.draw(cost, limit) {
                if self.bytes == 0 {
                    return;
                }
                self.clear();
                if !budget.draw(cost, limit) {
                    return;
                }
            }
            self.bytes += cost;
        }
        let i = self.order.len() as u32;
        self.texts.push_str(name);
        self.order.push((self.texts.len(), value));
        let (texts, order) = (&self.texts, &self.order);
        self.index.insert_unique(hash, i, |&other| {
            text_hash(text_at(texts, order, other as usize))
        });
        self.next = self.order.len();
    }

    /// Empties the cache for want of room (counted in the budget's clears), freeing its
    /// memory, and gives its bytes back to the budget.
    fn clear(&mut self) {
        if let Some((budget, _)) = &self.budget {
            if self.bytes > 0 {
                budget.clears.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.forget_all();
    }

    /// Empties the cache because what it resolved may have changed (a series deleted), not
    /// counted as a clear for want of room; frees its memory and gives its bytes back.
    pub(crate) fn forget_all(&mut self) {
        if let Some((budget, _)) = &self.budget {
            budget.give_back(self.bytes);
        }
        self.index = HashTable::new();
        self.order = Vec::new();
        self.texts = String::new();
        self.next = 0;
        self.bytes = 0;
    }
}

/// The text of entry `i` of `order`, whose texts lie one after another in `texts`.
fn text_at<'a, V>(texts: &'a str, order: &[(usize, V)], i: usize) -> &'a str {
    let start = if i == 0 { 0 } else { order[i - 1].0 };
    &texts[start..order[i].0]
}

impl<V> Drop for NameCache<V> {
    fn drop(&mut self) {
        if let Some((budget, _)) = &self.budget {
            budget.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests;

use std::sync::Arc;

use super::{NameBudget, NameCache, CACHE_ENTRY_BYTES};
use crate::registry::SeriesId;

#[test]
fn names_are_found_in_any_order() {
    let mut ids = NameCache::unbounded();
    for (i, name) in ["a.b", "c", "a.b.c"].into_iter().enumerate() {
        assert_eq!(ids.get(name), None);
        ids.insert(name, SeriesId(i as u32));
    }
    // The same order again, then out of order, repeats and an unknown name.
    for (name, id) in [
        ("a.b", 0),
        ("c", 1),
        ("a.b.c", 2),
        ("c", 1),
        ("c", 1),
        ("a.b", 0),
    ] {
        assert_eq!(ids.get(name), Some(SeriesId(id)), "{name}");
    }
    assert_eq!(ids.get("a"), None);
    assert_eq!(ids.get("a.b.c"), Some(SeriesId(2)));
}

#[test]
fn name_caches_draw_on_one_budget_and_give_it_back() {
    let shared = Arc::new(NameBudget::default());
    let name = |i: usize| format!("series.{i:04}");
    // 11 bytes of name plus the entry's overhead.
    let cost = 11 + CACHE_ENTRY_BYTES;
    let limit = 10 * cost;
    let mut first = NameCache::bounded(Arc::clone(&shared), limit);
    let mut second = NameCache::bounded(Arc::clone(&shared), limit);
    for i in 0..8 {
        first.insert(&name(i), SeriesId(i as u32));
    }
    assert_eq!(shared.bytes(), 8 * cost);
    // The second cache finds two entries' room, then the budget spent: it starts over, and
    // caches again from what it gave back.
    for i in 0..3 {
        second.insert(&name(100 + i), SeriesId(100 + i as u32));
    }
    assert_eq!(shared.bytes(), 9 * cost);
    assert_eq!(shared.clears(), 1);
    assert_eq!(second.get("series.0102"), Some(SeriesId(102)));
    assert_eq!(second.get("series.0100"), None);
    assert_eq!(first.get("series.0007"), Some(SeriesId(7)));
    // A third takes the last entry's room; an empty cache that finds the budget spent then
    // caches nothing.
    let mut third = NameCache::bounded(Arc::clone(&shared), limit);
    third.insert(&name(200), SeriesId(200));
    let mut fourth = NameCache::bounded(Arc::clone(&shared), limit);
    fourth.insert(&name(300), SeriesId(300));
    assert_eq!(fourth.get("series.0300"), None);
    assert_eq!(shared.bytes(), 10 * cost);
    assert_eq!(shared.clears(), 1);
    drop((first, second, third, fourth));
    assert_eq!(shared.bytes(), 0);
}

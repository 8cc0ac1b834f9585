use std::sync::Arc;

use super::{IngestReport, NameCache, FIRST_ERRORS};
use crate::registry::SeriesId;
use crate::server::stats::ServerStats;

#[test]
fn a_report_keeps_the_refusals_of_the_lowest_lines_in_line_order() {
    let mut report = IngestReport::default();
    // Refusals caught while parsing come first; the batch's own come at its flush.
    for line in [3, 9, 14, 20, 21, 22, 23, 24, 25, 26, 27] {
        report.note(line, "invalid_value", || format!("line {line}"));
    }
    for line in [1, 5, 5] {
        report.note(line, "series_limit", String::new);
    }
    let lines: Vec<usize> = report.errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 3, 5, 5, 9, 14, 20, 21, 22, 23]);
    assert_eq!(lines.len(), FIRST_ERRORS);
    assert_eq!(report.errors[2].reason, "series_limit");
}

#[test]
fn name_caches_draw_on_one_budget_and_give_it_back() {
    let stats = Arc::new(ServerStats::default());
    let name = |i: usize| format!("series.{i:04}").into_boxed_str();
    // 11 bytes of name plus the entry's overhead.
    let cost = 11 + super::CACHE_ENTRY_BYTES;
    let budget = 10 * cost;
    let mut first = NameCache::new(Arc::clone(&stats), budget);
    let mut second = NameCache::new(Arc::clone(&stats), budget);
    for i in 0..8 {
        first.insert(name(i), SeriesId(i as u32));
    }
    assert_eq!(stats.name_cache_bytes(), 8 * cost);
    // The second cache finds two entries' room, then the budget spent: it starts over, and
    // caches again from what it gave back.
    for i in 0..3 {
        second.insert(name(100 + i), SeriesId(100 + i as u32));
    }
    assert_eq!(stats.name_cache_bytes(), 9 * cost);
    assert_eq!(stats.name_cache_clears(), 1);
    assert_eq!(second.get("series.0102"), Some(SeriesId(102)));
    assert_eq!(second.get("series.0100"), None);
    assert_eq!(first.get("series.0007"), Some(SeriesId(7)));
    // A third takes the last entry's room; an empty cache that finds the budget spent then
    // caches nothing.
    let mut third = NameCache::new(Arc::clone(&stats), budget);
    third.insert(name(200), SeriesId(200));
    let mut fourth = NameCache::new(Arc::clone(&stats), budget);
    fourth.insert(name(300), SeriesId(300));
    assert_eq!(fourth.get("series.0300"), None);
    assert_eq!(stats.name_cache_bytes(), 10 * cost);
    assert_eq!(stats.name_cache_clears(), 1);
    drop((first, second, third, fourth));
    assert_eq!(stats.name_cache_bytes(), 0);
}

//! Tests of the render cache: a render through it answers what storage holds, whatever was
//! written since the last one (a sample in the still-filling bucket, a late sample in an
//! old bucket, a new series), while a repeated or slid render reads only the buckets that
//! may have changed; and its memory stays within its bound.

use std::sync::Arc;

use super::{CachedStore, RenderCache};
use crate::clock::ManualClock;
use crate::config::TiersConfig;
use crate::engine::Engine;
use crate::read::budget::ReadBudget;
use crate::render::{render, RenderRequest, RenderedSeries, StoredSource};
use crate::sample::Sample;

/// 2025-11-21T12:00:00Z.
const NOW: i64 = 1_763_726_400;

struct Fixture {
    engine: Engine,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

/// Ten series, one sample a minute over the last three hours.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(Arc::clone(&clock) as Arc<dyn crate::clock::Clock>)
        .background_maintenance(false)
        .open()
        .unwrap();
    let f = Fixture {
        engine,
        clock,
        _dir: dir,
    };
    for host in 0..10 {
        for minute in 0..180 {
            let ts = NOW - 3 * 3600 + minute * 60;
            f.write(
                &format!("web{host}.cpu"),
                ts,
                f64::from(host) + (minute % 7) as f64,
            );
        }
    }
    f
}

impl Fixture {
    /// One sample, stored at once.
    fn write(&self, series: &str, ts: i64, value: f64) {
        let id = self.engine.series(series).unwrap();
        let report = self
            .engine
            .record_batch(&[Sample::new(id, ts, value)])
            .unwrap();
        assert_eq!(report.accepted, 1);
    }
}

fn request(targets: &[&str], from: i64, until: i64) -> RenderRequest {
    RenderRequest {
        targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        from,
        until,
        max_data_points: None,
        default_max_points: 1_000,
        x_files_factor: 0.0,
        now: until,
    }
}

/// The render through `cache`, checked equal to the render without it.
fn both(f: &Fixture, cache: &RenderCache, r: &RenderRequest) -> Vec<RenderedSeries> {
    let budget = ReadBudget::unlimited();
    let cached = render(
        &StoredSource::new(CachedStore::new(f.engine.reader(), cache)),
        r,
        &budget,
    )
    .unwrap();
    let stored = render(&StoredSource::new(f.engine.reader()), r, &budget).unwrap();
    assert_eq!(cached, stored, "{:?}", r.targets);
    cached
}

const TARGETS: [&str; 3] = [
    "sumSeries(web*.cpu)",
    "web*.cpu",
    "groupByNode(web*.cpu, 0, 'max')",
];

#[test]
fn a_write_after_a_cached_read_is_seen() {
    let f = fixture();
    let cache = RenderCache::new(1 << 20);
    let r = request(&TARGETS, NOW - 3600, NOW);
    let before = both(&f, &cache, &r);
    let first = cache.stats();
    assert_eq!((first.hits, first.partial_hits), (0, 0));
    assert!(first.misses >= 3 && first.entries >= 3, "{first:?}");
    // Asked again with nothing written: every read from the cache.
    assert_eq!(both(&f, &cache, &r), before);
    let again = cache.stats();
    assert_eq!(again.misses, first.misses);
    assert!(again.hits >= 3, "{again:?}");

    // A sample in the still-filling bucket, then a late one an hour back: both seen, and
    // only the buckets from the late one's on are read again.
    f.write("web3.cpu", NOW, 1_000.0);
    let with_now = both(&f, &cache, &r);
    assert_ne!(with_now, before);
    f.write("web3.cpu", NOW - 1800, 500.0);
    let with_late = both(&f, &cache, &r);
    assert_ne!(with_late, with_now);
    let stats = cache.stats();
    assert!(stats.partial_hits >= 6, "{stats:?}");
    assert_eq!(stats.misses, first.misses);
    let sum = |answer: &[RenderedSeries], at: i64| {
        (answer[0].datapoints.iter())
            .find(|p| p.1 == at)
            .and_then(|p| p.0)
            .unwrap()
    };
    // web3's bucket now averages 6 and 500.
    assert_eq!(
        sum(&with_late, NOW - 1800) - sum(&with_now, NOW - 1800),
        247.0
    );

    // A new series matching the paths: the entries are read again whole.
    f.write("web10.cpu", NOW - 600, 7.0);
    let with_new = both(&f, &cache, &r);
    assert_eq!(with_new.len(), 1 + 11 + 11);
    assert!(cache.stats().misses > stats.misses);
}

#[test]
fn a_slid_window_reads_only_the_new_buckets() {
    let f = fixture();
    let cache = RenderCache::new(1 << 20);
    both(&f, &cache, &request(&TARGETS, NOW - 3600, NOW));
    let first = cache.stats();
    // Grafana's next refresh, 90 seconds on, with a minute's samples written meanwhile.
    f.clock.advance(90);
    for host in 0..10 {
        f.write(&format!("web{host}.cpu"), NOW + 60, 3.0);
    }
    both(&f, &cache, &request(&TARGETS, NOW + 90 - 3600, NOW + 90));
    let slid = cache.stats();
    assert_eq!(slid.misses, first.misses);
    assert!(slid.partial_hits >= 3, "{slid:?}");
    // Slid back before the entry's first bucket: read whole.
    both(&f, &cache, &request(&TARGETS, NOW - 7200, NOW));
    assert!(cache.stats().misses > slid.misses);
}

#[test]
fn memory_stays_within_the_bound() {
    let f = fixture();
    // Room for an aggregate's points but not for ten series' buckets.
    let cache = RenderCache::new(8 << 10);
    for (host, minutes) in [60, 90, 120, 150, 170].into_iter().enumerate() {
        let target = format!("sumSeries(web{host}.cpu, web*.cpu)");
        both(&f, &cache, &request(&[&target], NOW - minutes * 60, NOW));
        let stats = cache.stats();
        assert!(stats.bytes <= stats.capacity, "{stats:?}");
    }
    both(&f, &cache, &request(&["web*.cpu"], NOW - 3600, NOW));
    let stats = cache.stats();
    assert!(stats.bytes <= stats.capacity, "{stats:?}");
    assert!(stats.evictions > 0, "{stats:?}");
    // Nothing is kept by a cache of no room, and every answer is still storage's.
    let none = RenderCache::new(0);
    both(&f, &none, &request(&TARGETS, NOW - 3600, NOW));
    assert_eq!((none.stats().entries, none.stats().bytes), (0, 0));
}

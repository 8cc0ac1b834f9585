use std::sync::Arc;

use super::{chunk_runs, Bits, FilesNeeded};
use crate::clock::ManualClock;
use crate::config::{TierSpec, TiersConfig};
use crate::engine::Engine;
use crate::read::query::Query;
use crate::sample::Sample;
use crate::time::Span;

/// 2025-11-21T12:00:00Z, on the hour.
const NOW: i64 = 1_763_726_400;
const HOUR: i64 = 3_600;

fn bits(members: &[usize]) -> Bits {
    let mut bits = Bits::default();
    for &i in members {
        bits.insert(i);
    }
    bits
}

/// Runs that start, end or cross inside a word, and a member added below the first word.
#[test]
fn a_set_reads_as_runs_of_consecutive_members() {
    let mut members: Vec<usize> = vec![130, 3, 4, 5, 63, 64, 65];
    members.extend(200..=260);
    members.push(1);
    let set = bits(&members);
    assert_eq!(
        set.runs(),
        vec![(1, 1), (3, 3), (63, 3), (130, 1), (200, 61)]
    );
    assert_eq!(Bits::default().runs(), vec![]);
    assert_eq!(bits(&(0..128).collect::<Vec<_>>()).runs(), vec![(0, 128)]);
}

#[test]
fn a_union_holds_the_members_of_both() {
    let mut set = bits(&[300, 301]);
    set.union(&bits(&[2, 299, 302, 700]));
    assert_eq!(set.runs(), vec![(2, 1), (299, 4), (700, 1)]);
}

/// Words of either set that the other lacks, and members below the other's first word.
#[test]
fn a_difference_holds_the_members_of_one_only() {
    let set = bits(&[2, 3, 64, 65, 66, 300, 700]);
    let other = bits(&[65, 128, 300, 701]);
    assert_eq!(
        set.difference(&other).runs(),
        vec![(2, 2), (64, 1), (66, 1), (700, 1)]
    );
    assert_eq!(other.difference(&set).runs(), vec![(128, 1), (701, 1)]);
    assert_eq!(set.difference(&set).runs(), vec![]);
    assert_eq!(set.difference(&Bits::default()).runs(), set.runs());
}

#[test]
fn runs_are_cut_at_chunk_boundaries() {
    assert_eq!(
        chunk_runs(&[(30, 5), (64, 70)], 32),
        vec![(0, 30, 2), (1, 0, 3), (2, 0, 32), (3, 0, 32), (4, 0, 6)]
    );
}

/// 1m buckets in 1h periods and 1h buckets in 1d periods, 16 series per chunk: two page
/// groups (8 slots each) per chunk.
fn engine(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Engine {
    let mut tiers = TiersConfig::default();
    tiers.engine.series_per_chunk = 16;
    let tier = |name: &str, resolution: u64, period: u64| TierSpec {
        name: name.into(),
        resolution: Span::from_secs(resolution),
        period: Span::from_secs(period),
        retention: Span::from_secs(2 * period),
        create_ahead: 1,
        earlier_periods: Vec::new(),
    };
    tiers.tiers = vec![
        tier("1m", 60, HOUR as u64),
        tier("1h", 3_600, 24 * HOUR as u64),
    ];
    Engine::builder(dir)
        .tiers(tiers)
        .clock(clock.clone())
        .background_maintenance(false)
        .open()
        .unwrap()
}

/// A batch grouped by series (a cluster message) moves between two blocks of the 1m tier at
/// every sample while staying in one block of the 1h tier: each block is noted with the
/// page groups of every series stored into it, no more, and the batch lands whole (a store
/// into a page whose space was not reserved fails a debug assertion).
#[test]
fn a_batch_notes_the_pages_of_every_block_it_stores_into() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW + 40 * 60));
    let engine = engine(dir.path(), &clock);
    let ids: Vec<_> = (0..40)
        .map(|i| engine.series(&format!("s{i}")).unwrap())
        .collect();
    // The first 1m block (minutes 0..16) and the second (16..32); series 0..23 and 32..39,
    // so the third page group (16..23) is followed by a gap of one (24..31).
    let (early, late) = (NOW + 70, NOW + 20 * 60);
    let stored: Vec<_> = ids.iter().filter(|id| !(24..32).contains(&id.0)).collect();
    let batch: Vec<Sample> = stored
        .iter()
        .flat_map(|&&id| {
            [
                Sample::new(id, early, f64::from(id.0)),
                Sample::new(id, late, 1.0),
            ]
        })
        .collect();

    let bounds = engine.bounds(NOW + 40 * 60);
    let mut files = FilesNeeded::new(&engine.shared);
    for sample in &batch {
        let place = crate::registry::SetPlace::of_id(sample.series);
        files.note(
            sample,
            place,
            &bounds.windows,
            crate::storage::period_file::LatestPages::Reserve,
        );
    }
    let runs = files.block_runs(2);
    let blocks: Vec<_> = (files.blocks.iter())
        .map(|b| (b.tier, b.span.start))
        .collect();
    assert_eq!(
        blocks,
        vec![(0, NOW), (1, NOW - 12 * HOUR), (0, NOW + 16 * 60)],
        "the blocks, in the order met"
    );
    let expected = vec![(0, 0, 2), (1, 0, 1), (2, 0, 1)]
        .into_iter()
        .map(|(c, f, n)| (c, f, n, crate::storage::period_file::LatestPages::Reserve))
        .collect::<Vec<_>>();
    for (block, runs) in blocks.iter().zip(&runs) {
        assert_eq!(*runs, expected, "the page groups of block {block:?}");
    }

    let report = engine.record_batch(&batch).unwrap();
    assert_eq!(report.accepted as usize, batch.len());
    for &&id in &stored {
        let name = format!("s{}", id.0);
        let minute = engine
            .query(&Query::new(&name, early - 10, early + 50).tier("1m"))
            .unwrap();
        assert_eq!(minute.points[0].1, Some(f64::from(id.0)), "{name}");
        let hour = engine
            .query(&Query::new(&name, NOW, NOW + HOUR).tier("1h"))
            .unwrap();
        assert_eq!(
            hour.points[0].1,
            Some((f64::from(id.0) + 1.0) / 2.0),
            "{name}"
        );
    }
}

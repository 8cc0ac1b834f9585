use super::*;
use crate::time::Span;

const HOUR: i64 = 3_600;
/// 2025-11-21T12:00:00Z.
const NOW: Timestamp = 1_763_726_400;

fn spec() -> RawTierSpec {
    RawTierSpec {
        name: "raw".to_string(),
        period: Span::from_secs(HOUR as u64),
        retention: Span::from_secs(6 * HOUR as u64),
        create_ahead: 1,
        dedupe_unchanged: false,
    }
}

/// Appends `points` to `series` the way a writer does: claim when the segment is full or
/// the period changes, link on the first point.
fn append(store: &RawStore, series: u32, points: &[(Timestamp, f64)]) {
    let mut tail: Option<(SegmentRef, usize)> = store.tail(series).map(|s| {
        let len = s.segment().len();
        (s, len)
    });
    for &(ts, v) in points {
        let fits = tail.as_ref().is_some_and(|(s, len)| {
            *len < SEGMENT_POINTS && align_down(ts, store.spec().period) == s.file.period_start()
        });
        if fits {
            let (s, len) = tail.as_mut().unwrap();
            s.segment().append(*len, ts, v);
            *len += 1;
        } else {
            let prev = tail.as_ref().map(|(s, len)| s.segment().time(len - 1));
            let (file, index) = store.claim(series, ts, prev).unwrap();
            file.segment(index).append(0, ts, v);
            let seg = SegmentRef {
                file,
                index,
                first: ts,
            };
            store.link(series, seg.clone());
            tail = Some((seg, 1));
        }
    }
}

#[test]
fn file_names_round_trip() {
    let name = segment::file_name(NOW - NOW % HOUR, 7);
    assert_eq!(name, "20251121T120000Z-s00007.tdr");
    assert_eq!(segment::parse_file_name(&name), Some((NOW - NOW % HOUR, 7)));
    assert_eq!(
        segment::parse_file_name("20251121T120000Z-c00007.tdb"),
        None
    );
}

#[test]
fn a_segment_is_one_page_of_header_times_and_values() {
    assert_eq!(SEGMENT_POINTS, 252);
    assert_eq!(FILE_LEN, 4096 + 256 * 4096);
}

#[test]
fn chains_link_segments_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let points: Vec<(Timestamp, f64)> = (0..600)
        .map(|i| (NOW - 2 * HOUR + i * 7, i as f64))
        .collect();
    {
        let store = RawStore::open(dir.path(), &spec(), true, 2).unwrap();
        append(&store, 1, &points);
        append(&store, 0, &[(NOW - 10, -1.0)]);
        // 600 points over 70 minutes: two periods, three segments, the first full.
        let chain: Vec<SegmentRef> = store.chains.read().unwrap()[1].clone();
        assert_eq!(chain.len(), 4);
        for pair in chain.windows(2) {
            let (a, b) = (pair[0].segment(), pair[1].segment());
            assert_eq!(a.next_start(), Some(b.time(0)));
            assert_eq!(b.prev_end(), Some(a.time(a.len() - 1)));
        }
        assert_eq!(chain[0].segment().prev_end(), None);
        assert_eq!(chain[3].segment().next_start(), None);
        store.flush().unwrap();
    }
    let store = RawStore::open(dir.path(), &spec(), false, 2).unwrap();
    let all = store.read(1, NOW - 3 * HOUR, NOW, usize::MAX);
    assert_eq!(all.points, points);
    assert_eq!((all.before, all.after), (None, None));
    // Over a limit, the read stops one point past it, across segments, with no `after`.
    let limit = SEGMENT_POINTS + 10;
    let capped = store.read(1, NOW - 3 * HOUR, NOW, limit);
    assert_eq!(capped.points, points[..=limit]);
    assert_eq!(capped.after, None);
    assert_eq!(
        store.read(1, NOW - 3 * HOUR, NOW, points.len()).points,
        points
    );
    // Starting exactly at a segment's first point: the neighbour is the last of the one before.
    let second = points[SEGMENT_POINTS].0;
    let read = store.read(1, second, second + 1, usize::MAX);
    assert_eq!(read.before, Some(points[SEGMENT_POINTS - 1]));
    assert_eq!(read.points, vec![points[SEGMENT_POINTS]]);
    assert_eq!(read.after, Some(points[SEGMENT_POINTS + 1]));
    // A range between two points holds none, yet has both neighbours.
    let read = store.read(1, points[10].0 + 1, points[11].0, usize::MAX);
    assert_eq!(
        (read.before, read.points.len(), read.after),
        (Some(points[10]), 0, Some(points[11]))
    );
    assert_eq!(
        store.read(0, NOW - 5, NOW, usize::MAX).before,
        Some((NOW - 10, -1.0))
    );
    assert_eq!(store.read(5, NOW - 5, NOW, usize::MAX), RawRead::default());
}

#[test]
fn a_full_period_gets_a_file_on_demand_and_drops_go_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = RawStore::open(dir.path(), &spec(), true, 300).unwrap();
    let start = NOW - NOW % HOUR - 3 * HOUR;
    // 300 series with a point each in one period: 300 segments, two files.
    for s in 0..300 {
        append(&store, s, &[(start + i64::from(s), f64::from(s))]);
    }
    let files = store.files(NOW);
    assert_eq!((files.files, files.on_demand_creations), (2, 2));
    let due = |_| true;
    assert_eq!(
        store.prepare_ahead(NOW, &due, 1).unwrap(),
        1,
        "paced: one file a call"
    );
    let created = 1 + store.prepare_ahead(NOW, &due, 16).unwrap();
    assert_eq!(created, 2, "the current period and the next, one file each");
    assert_eq!(store.drop_before(start + HOUR).unwrap(), 2);
    assert_eq!(store.read(7, start, NOW, usize::MAX), RawRead::default());
    assert_eq!(store.files(NOW).files, 2);
    assert!(std::fs::read_dir(store.dir()).unwrap().count() == 2);
    drop(store);
    // Reopened: the files left are the ahead ones, with nothing claimed in them.
    let store = RawStore::open(dir.path(), &spec(), true, 300).unwrap();
    assert_eq!(store.segments_in_use(), 0);
    assert_eq!(store.files(NOW).files, 2);
}

/// A series whose registration a crash lost: its id is handed out again to another series,
/// which must start with no raw points (and the open must not take the old ones for its).
#[test]
fn segments_of_unregistered_ids_are_given_up_at_a_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    let late = NOW - 100;
    {
        let store = RawStore::open(dir.path(), &spec(), true, 2).unwrap();
        append(&store, 0, &[(late - 50, 1.0)]);
        append(&store, 1, &[(late, 2.0)]);
    }
    // The registry came back with one series: a read-only open leaves the files alone...
    let store = RawStore::open(dir.path(), &spec(), false, 1).unwrap();
    assert_eq!(
        store.read(0, late - 60, NOW, usize::MAX).points,
        vec![(late - 50, 1.0)]
    );
    drop(store);
    assert_eq!(
        RawStore::open(dir.path(), &spec(), false, 2)
            .unwrap()
            .read(1, 0, NOW, usize::MAX)
            .points
            .len(),
        1
    );
    // ...a writable one gives the lost series' segment up.
    drop(RawStore::open(dir.path(), &spec(), true, 1).unwrap());
    let store = RawStore::open(dir.path(), &spec(), true, 2).unwrap();
    assert_eq!(store.read(1, 0, NOW, usize::MAX), RawRead::default());
    // The id's new series starts from nothing, earlier times included.
    append(&store, 1, &[(late - 1_000, 3.0)]);
    assert_eq!(
        store.read(1, 0, NOW, usize::MAX).points,
        vec![(late - 1_000, 3.0)]
    );
    assert_eq!(
        store.read(0, 0, NOW, usize::MAX).points,
        vec![(late - 50, 1.0)]
    );
}

/// What a cluster partition's roll-back does: a series cut back to a time keeps exactly its
/// points up to it, across segments and periods, and so after a reopen; the next append
/// links on from there; a cut to `None` leaves nothing; the other series are untouched.
#[test]
fn a_series_cut_back_keeps_exactly_its_points_up_to_the_time() {
    let dir = tempfile::tempdir().unwrap();
    let points: Vec<(Timestamp, f64)> = (0..600)
        .map(|i| (NOW - 2 * HOUR + i * 7, i as f64))
        .collect();
    let other = [(NOW - 100, 5.0), (NOW - 50, 6.0)];
    let read_all = |store: &RawStore, series| store.read(series, 0, NOW + HOUR, usize::MAX - 1);
    {
        let store = RawStore::open(dir.path(), &spec(), true, 2).unwrap();
        append(&store, 1, &points);
        append(&store, 0, &other);
        assert_eq!(store.last_time(1), Some(points[599].0));
        // Into the second segment: the third and fourth are given up.
        let cut = points[300].0;
        assert_eq!(store.truncate_after(1, Some(cut)), 299);
        assert_eq!(read_all(&store, 1).points, points[..=300]);
        assert_eq!(store.last_time(1), Some(cut));
        // Nothing after the last point: nothing changes.
        assert_eq!(store.truncate_after(1, Some(cut)), 0);
        assert_eq!(store.truncate_after(1, Some(cut + 3)), 0);
        store.flush().unwrap();
    }
    let store = RawStore::open(dir.path(), &spec(), true, 2).unwrap();
    assert_eq!(read_all(&store, 1).points, points[..=300]);
    assert_eq!(read_all(&store, 0).points, other);
    // Appends go on from the cut, linked.
    append(&store, 1, &points[301..]);
    let read = read_all(&store, 1);
    assert_eq!(read.points, points);
    let chain: Vec<SegmentRef> = store.chains.read().unwrap()[1].clone();
    for pair in chain.windows(2) {
        assert_eq!(pair[0].segment().next_start(), Some(pair[1].first));
    }
    assert_eq!(store.truncate_after(1, None), 600);
    assert_eq!(store.last_time(1), None);
    assert!(read_all(&store, 1).points.is_empty());
    assert_eq!(read_all(&store, 0).points, other);
    drop(store);
    let store = RawStore::open(dir.path(), &spec(), true, 2).unwrap();
    assert!(read_all(&store, 1).points.is_empty());
    assert_eq!(store.truncate_after(5, None), 0, "a series with no chain");
}

/// Claims for a period right after an expiry took it out of the map (writers whose raw
/// window was taken before the maintenance pass's clock reading) make its files anew, from
/// number 0: an expiry that unlinked after its lock would take the new file 0 and leave the
/// new file 1, and the next open would refuse the directory ("has no file 0 before it").
#[test]
fn claims_right_after_an_expiry_forgot_their_period_leave_the_directory_openable() {
    let dir = tempfile::tempdir().unwrap();
    let start = align_down(NOW, spec().period);
    {
        let store = RawStore::open(dir.path(), &spec(), true, 1_000).unwrap();
        store.claim(0, start + 10, None).unwrap();
        let pause = store.after_forget.arm();
        std::thread::scope(|scope| {
            let expiry = scope.spawn(|| store.drop_before(start + HOUR));
            // The period has left the map.
            pause.wait();
            for series in 1..=SEGMENTS_PER_FILE + 1 {
                if store.claim(series, start + 20, None).is_err() {
                    break;
                }
            }
            pause.wait();
            expiry.join().unwrap().unwrap();
        });
    }
    if let Err(e) = RawStore::open(dir.path(), &spec(), true, 1_000) {
        panic!("the directory no longer opens: {e}");
    }
}

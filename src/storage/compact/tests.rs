//! Compacted files: exact round trips of every kind of column, and refusal of damaged,
//! truncated, foreign and mismatched files with the file's name, never a panic.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::time::Span;

/// 2025-11-21T00:00:00Z, a day boundary.
const DAY_START: i64 = 1_763_683_200;
const SLOTS: u32 = 8;

/// A 1m/1d period of `slots` slots, chunk 3.
fn meta(slots: u32) -> PeriodMeta {
    PeriodMeta {
        tier: "1m".to_string(),
        resolution: Span::from_secs(60),
        period: Span::from_secs(86_400),
        period_start: DAY_START,
        slots,
        chunk: 3,
    }
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// A gauge sampled `per` times a bucket, values from `value(rng, previous)`.
fn gauge(
    rng: &mut Rng,
    n: u32,
    per: u64,
    mut value: impl FnMut(&mut Rng, f64) -> f64,
) -> Vec<Bucket> {
    let mut v = 100.0;
    (0..n)
        .map(|_| {
            let mut b = Bucket::EMPTY;
            for _ in 0..per {
                v = value(rng, v);
                b.add(v);
            }
            b
        })
        .collect()
}

/// One slot of each kind the tests cover, `n` buckets each.
fn kinds(n: u32) -> Vec<(&'static str, Vec<Bucket>)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let constant = gauge(&mut rng, n, 6, |_, _| 42.0);
    let int_walk = gauge(&mut rng, n, 6, |r, v| v + (r.next() % 7) as f64 - 3.0);
    let cents_walk = gauge(&mut rng, n, 6, |r, v| {
        ((v * 100.0).round() + (r.next() % 201) as f64 - 100.0) / 100.0
    });
    let random = gauge(&mut rng, n, 6, |r, _| r.unit() * 1e6);
    let mut gaps = gauge(&mut rng, n, 6, |r, v| v + r.unit());
    for (i, b) in gaps.iter_mut().enumerate() {
        if (i / 50) % 3 == 1 || i % 17 == 0 {
            *b = Bucket::EMPTY;
        }
    }
    let mut last_only = vec![Bucket::EMPTY; n as usize];
    last_only[n as usize - 1] = Bucket {
        count: 1,
        total: -7.25,
        min: -7.25,
        max: -7.25,
    };
    let mut special = vec![Bucket::EMPTY; n as usize];
    let odd = [
        (1, -0.0, -0.0, -0.0),
        (2, f64::MIN_POSITIVE / 8.0, -f64::MIN_POSITIVE / 3.0, 5e-324),
        (
            u64::MAX >> 1,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
        ),
        (u64::MAX, f64::MAX, f64::MIN, f64::NAN),
        (0, 1.5, 0.0, -0.0),
        (0, 0.0, 0.0, -0.0),
        (7, 0.0, 0.0, 0.0),
    ];
    for (i, &(count, total, min, max)) in odd.iter().enumerate() {
        special[i * 3 + 1] = Bucket {
            count,
            total,
            min,
            max,
        };
    }
    vec![
        ("constant", constant),
        ("integer walk", int_walk),
        ("2-decimal walk", cents_walk),
        ("random floats", random),
        ("gaps", gaps),
        ("all empty", vec![Bucket::EMPTY; n as usize]),
        ("last bucket only", last_only),
        ("special values", special),
    ]
}

/// Writes `slots` (one `Vec` of every bucket per slot) as a compacted file in `dir`.
fn create(dir: &Path, meta: &PeriodMeta, slots: &[Vec<Bucket>]) -> CompactFile {
    CompactFile::create(dir, meta, &|bucket, slot| {
        slots[slot as usize][bucket as usize]
    })
    .expect("create")
}

fn bits(b: &Bucket) -> [u64; 4] {
    [b.count, b.total.to_bits(), b.min.to_bits(), b.max.to_bits()]
}

fn assert_bits_eq(found: &[Bucket], expected: &[Bucket], what: &str) {
    assert_eq!(found.len(), expected.len(), "{what}: length");
    for (i, (f, e)) in found.iter().zip(expected).enumerate() {
        assert_eq!(bits(f), bits(e), "{what}: bucket {i}: {f:?} != {e:?}");
    }
}

fn read(file: &CompactFile, slot: u32, buckets: Range<u32>) -> Result<Vec<Bucket>> {
    let mut out = vec![Bucket::EMPTY; buckets.len()];
    file.open_reader()?.read_slot(slot, buckets, &mut out)?;
    Ok(out)
}

/// Every slot, whole and in sub-ranges, and for_each_slot, against `slots`, bit for bit.
fn check_round_trip(file: &CompactFile, slots: &[Vec<Bucket>]) {
    let n = file.meta().buckets();
    for (slot, expected) in slots.iter().enumerate() {
        let slot = slot as u32;
        let ranges = [0..n, 0..1, n - 1..n, 5..5, n / 3..n / 2, 0..n.min(360)];
        for range in ranges {
            let found = read(file, slot, range.clone()).unwrap();
            let want = &expected[range.start as usize..range.end as usize];
            assert_bits_eq(&found, want, &format!("slot {slot} {range:?}"));
        }
    }
    let mut seen = Vec::new();
    file.for_each_slot(&mut |slot, buckets| {
        assert_bits_eq(
            buckets,
            &slots[slot as usize],
            &format!("for_each_slot {slot}"),
        );
        seen.push(slot);
    })
    .unwrap();
    let non_empty: Vec<u32> = (0..slots.len() as u32)
        .filter(|&s| slots[s as usize].iter().any(|b| !is_zero(b)))
        .collect();
    assert_eq!(
        seen, non_empty,
        "for_each_slot visits the non-empty slots in order"
    );
}

/// A file of every kind in `dir`, with its slots.
fn kinds_file(dir: &Path) -> (CompactFile, Vec<Vec<Bucket>>) {
    let m = meta(SLOTS);
    let slots: Vec<Vec<Bucket>> = kinds(m.buckets()).into_iter().map(|(_, b)| b).collect();
    (create(dir, &m, &slots), slots)
}

#[test]
fn every_kind_of_column_round_trips_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = kinds_file(dir.path());
    check_round_trip(&file, &slots);
}

#[test]
fn creation_names_the_file_and_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    assert_eq!(
        CompactFile::file_name(file.meta()),
        "20251121T000000Z-c00003.tdc"
    );
    assert_eq!(file.path(), dir.path().join("20251121T000000Z-c00003.tdc"));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["20251121T000000Z-c00003.tdc"]);
    assert!(file.disk_bytes().unwrap() > 0);
}

#[test]
fn all_empty_slots_take_only_their_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let m = meta(256);
    let file = CompactFile::create(dir.path(), &m, &|_, _| Bucket::EMPTY).unwrap();
    let len = std::fs::metadata(file.path()).unwrap().len();
    assert_eq!(len, (HEADER_LEN + 256 * ENTRY_LEN) as u64);
    assert_bits_eq(
        &read(&file, 255, 0..1440).unwrap(),
        &[Bucket::EMPTY; 1440],
        "empty",
    );
    let mut calls = 0;
    file.for_each_slot(&mut |_, _| calls += 1).unwrap();
    assert_eq!(calls, 0);
}

#[test]
fn a_handle_does_no_io_and_a_missing_file_is_an_io_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("20251121T000000Z-c00003.tdc");
    let file = CompactFile::new(path.clone(), meta(SLOTS));
    for err in [
        read(&file, 0, 0..10).unwrap_err(),
        file.for_each_slot(&mut |_, _| {}).unwrap_err(),
        file.disk_bytes().unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::Io { path: p, .. } if *p == path),
            "{err}"
        );
        assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
    }
}

/// Asserts `result` is a refusal naming `path`, whose reason contains `reason`.
fn assert_refused<T: std::fmt::Debug>(result: Result<T>, path: &Path, reason: &str) {
    match result {
        Err(Error::CorruptFile { path: p, reason: r }) => {
            assert_eq!(p, path);
            assert!(r.contains(reason), "reason {r:?} lacks {reason:?}");
            let shown = Error::corrupt(&p, r).to_string();
            assert!(shown.contains(&*path.to_string_lossy()), "{shown}");
        }
        other => panic!(
            "expected a refusal of {} for {reason:?}, got {other:?}",
            path.display()
        ),
    }
}

/// The file's bytes changed by `f`, written back.
fn patch(path: &PathBuf, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// Recomputes the header checksum, so a test reaches the check after it.
fn reseal_header(bytes: &mut [u8]) {
    let crc = crc32fast::hash(&bytes[..CHECKSUM_OFFSET]);
    put_u32(bytes, CHECKSUM_OFFSET, crc);
}

#[test]
fn every_flipped_header_or_index_byte_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    let original = std::fs::read(file.path()).unwrap();
    let head_len = HEADER_LEN + SLOTS as usize * ENTRY_LEN;
    for at in 0..head_len {
        let mut bytes = original.clone();
        bytes[at] ^= 0x10;
        std::fs::write(file.path(), &bytes).unwrap();
        let expected = if at < MAGIC_OFFSET + 8 {
            "bad magic"
        } else if (VERSION_OFFSET..VERSION_OFFSET + 4).contains(&at) {
            "format version"
        } else if at < HEADER_LEN {
            "header checksum"
        } else {
            "index checksum"
        };
        assert_refused(read(&file, 1, 0..1440), file.path(), expected);
        assert_refused(file.for_each_slot(&mut |_, _| {}), file.path(), expected);
    }
}

#[test]
fn a_flipped_data_byte_refuses_that_slot_and_the_others_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = kinds_file(dir.path());
    let head = std::fs::read(file.path()).unwrap();
    let victim = entry(&head, 2);
    patch(&file.path().to_path_buf(), |b| {
        b[victim.offset as usize + victim.len as usize / 2] ^= 1;
    });
    assert_refused(
        read(&file, 2, 0..1440),
        file.path(),
        "data checksum mismatch in slot 2",
    );
    assert_refused(file.for_each_slot(&mut |_, _| {}), file.path(), "slot 2");
    for slot in [0, 1, 3, 4, 5, 6, 7] {
        let found = read(&file, slot, 0..1440).unwrap();
        assert_bits_eq(&found, &slots[slot as usize], &format!("slot {slot}"));
    }
}

#[test]
fn damage_behind_valid_checksums_is_refused_not_a_panic() {
    // Every byte of the 2-decimal walk's data flipped in turn, with the slot, index and header
    // checksums made to match: the decoder itself must refuse or return values, never panic.
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    let original = std::fs::read(file.path()).unwrap();
    let victim = entry(&original, 2);
    let head_len = HEADER_LEN + SLOTS as usize * ENTRY_LEN;
    let step = (victim.len as usize / 400).max(1);
    for i in (0..victim.len as usize).step_by(step) {
        let mut bytes = original.clone();
        let start = victim.offset as usize;
        bytes[start + i] ^= 0x5a;
        let crc = crc32fast::hash(&bytes[start..start + victim.len as usize]);
        put_u32(&mut bytes, HEADER_LEN + 2 * ENTRY_LEN + ENTRY_CRC, crc);
        let index_crc = crc32fast::hash(&bytes[HEADER_LEN..head_len]);
        put_u32(&mut bytes, INDEX_CRC_OFFSET, index_crc);
        reseal_header(&mut bytes);
        std::fs::write(file.path(), &bytes).unwrap();
        match read(&file, 2, 0..1440) {
            Ok(_) => {}
            Err(e) => assert_refused::<()>(Err(e), file.path(), "slot 2"),
        }
    }
}

#[test]
fn truncation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = kinds_file(dir.path());
    let original = std::fs::read(file.path()).unwrap();
    let head_len = HEADER_LEN + SLOTS as usize * ENTRY_LEN;
    let last = entry(&original, 7);
    for len in [0, 7, HEADER_LEN - 1, HEADER_LEN, head_len - 1] {
        std::fs::write(file.path(), &original[..len]).unwrap();
        assert_refused(read(&file, 0, 0..1440), file.path(), "truncated");
        assert_refused(file.for_each_slot(&mut |_, _| {}), file.path(), "truncated");
    }
    // Cut inside the last slot's data: that slot and the whole-file walk are refused, the
    // slots before it still read.
    let cut = last.offset as usize + last.len as usize / 2;
    std::fs::write(file.path(), &original[..cut]).unwrap();
    assert_refused(read(&file, 7, 0..1440), file.path(), "truncated");
    assert_refused(file.for_each_slot(&mut |_, _| {}), file.path(), "truncated");
    assert_bits_eq(&read(&file, 0, 0..1440).unwrap(), &slots[0], "slot 0");
    // Bytes appended are refused by the whole-file walk.
    let mut longer = original.clone();
    longer.push(0);
    std::fs::write(file.path(), &longer).unwrap();
    assert_refused(
        file.for_each_slot(&mut |_, _| {}),
        file.path(),
        "header promises",
    );
}

#[test]
fn foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = meta(SLOTS);
    let path = dir.path().join(CompactFile::file_name(&m));
    let file = CompactFile::new(path.clone(), m.clone());
    let mut rng = Rng(7);
    let random: Vec<u8> = (0..100_000).map(|_| rng.next() as u8).collect();
    std::fs::write(&path, &random).unwrap();
    assert_refused(read(&file, 0, 0..1440), &path, "bad magic");
    assert_refused(file.for_each_slot(&mut |_, _| {}), &path, "bad magic");
    // A hot period file's header, renamed .tdc.
    let mut hot = m.encode().to_vec();
    hot.resize(hot.len() + 64 * 1024, 0);
    std::fs::write(&path, &hot).unwrap();
    assert_refused(read(&file, 0, 0..1440), &path, "bad magic");
    assert_refused(file.for_each_slot(&mut |_, _| {}), &path, "bad magic");
}

#[test]
fn another_format_version_or_codec_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    let original = std::fs::read(file.path()).unwrap();
    let path = file.path().to_path_buf();
    patch(&path, |b| {
        put_u32(b, VERSION_OFFSET, FORMAT_VERSION + 1);
        reseal_header(b);
    });
    assert_refused(read(&file, 0, 0..1440), &path, "compacted format version 2");
    std::fs::write(&path, &original).unwrap();
    patch(&path, |b| {
        put_u32(b, CODEC_OFFSET, 9);
        reseal_header(b);
    });
    assert_refused(read(&file, 0, 0..1440), &path, "codec 9");
}

#[test]
fn a_header_that_disagrees_with_the_expected_meta_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    let mut others = Vec::new();
    let base = meta(SLOTS);
    others.push(PeriodMeta {
        chunk: 4,
        ..base.clone()
    });
    others.push(PeriodMeta {
        tier: "5m".into(),
        ..base.clone()
    });
    others.push(PeriodMeta {
        period_start: DAY_START + 86_400,
        ..base.clone()
    });
    others.push(PeriodMeta {
        resolution: Span::from_secs(300),
        ..base.clone()
    });
    others.push(PeriodMeta {
        slots: SLOTS * 2,
        ..base.clone()
    });
    for other in others {
        let wrong = CompactFile::new(file.path().to_path_buf(), other);
        assert_refused(read(&wrong, 0, 0..1), file.path(), "header holds");
        assert_refused(
            wrong.for_each_slot(&mut |_, _| {}),
            file.path(),
            "header holds",
        );
    }
}

fn bucket_strategy() -> impl Strategy<Value = Bucket> {
    let finite = any::<f64>().prop_filter("finite", |v| v.is_finite());
    prop_oneof![
        2 => Just(Bucket::EMPTY),
        5 => (0u64..1_000, finite.clone(), finite.clone(), finite).prop_map(
            |(count, total, min, max)| Bucket { count, total, min, max }
        ),
        1 => (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(count, t, mi, ma)| Bucket {
                count,
                total: f64::from_bits(t),
                min: f64::from_bits(mi),
                max: f64::from_bits(ma),
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn arbitrary_buckets_round_trip(
        slots in prop::collection::vec(prop::collection::vec(bucket_strategy(), 24), 1..5),
        start in 0u32..24,
        len in 0u32..24,
    ) {
        // A 1h/1d period: 24 buckets.
        let m = PeriodMeta {
            resolution: Span::from_secs(3_600),
            ..meta(slots.len() as u32)
        };
        let dir = tempfile::tempdir().unwrap();
        let file = create(dir.path(), &m, &slots);
        check_round_trip(&file, &slots);
        let end = (start + len).min(24);
        for (slot, expected) in slots.iter().enumerate() {
            let found = read(&file, slot as u32, start..end).unwrap();
            assert_bits_eq(&found, &expected[start as usize..end as usize], "sub-range");
        }
    }
}

#[test]
fn a_hot_period_file_compacts_through_its_load() {
    use crate::config::TiersConfig;
    use crate::storage::{Creation, Storage};
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    let storage = Storage::open(dir.path(), &tiers, SLOTS, true).unwrap();
    let (hot, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::Ahead)
        .unwrap();
    let writer = storage.writer_slot().unwrap().expect("writable");
    let file = storage.writable_file(0, DAY_START, 0).unwrap();
    for (bucket, slot, value) in [(0, 0, 1.25), (0, 0, -3.5), (17, 5, 0.1), (359, 7, -0.0)] {
        file.add(bucket, slot, value, writer.publisher());
    }
    let out = tempfile::tempdir().unwrap();
    let compact = CompactFile::create(out.path(), hot.meta(), &|b, s| hot.load(b, s)).unwrap();
    let n = hot.meta().buckets();
    let expected: Vec<Vec<Bucket>> = (0..SLOTS)
        .map(|s| (0..n).map(|b| hot.load(b, s)).collect())
        .collect();
    check_round_trip(&compact, &expected);
    assert_eq!(read(&compact, 0, 0..1).unwrap()[0].count, 2);
}

#[test]
fn creation_replaces_a_leftover_temporary_and_names_the_file_when_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let m = meta(SLOTS);
    let name = CompactFile::file_name(&m);
    std::fs::write(dir.path().join(format!("{name}.tmp")), b"left by a crash").unwrap();
    let file = CompactFile::create(dir.path(), &m, &|_, _| Bucket::EMPTY).unwrap();
    assert!(!dir.path().join(format!("{name}.tmp")).exists());
    assert!(file.path().exists());

    let missing = dir.path().join("no such directory");
    let err = CompactFile::create(&missing, &m, &|_, _| Bucket::EMPTY).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path.starts_with(&missing)),
        "{err}"
    );
    assert!(err.to_string().contains("no such directory"), "{err}");
}

#[test]
fn an_index_entry_past_any_slot_size_is_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    let head_len = HEADER_LEN + SLOTS as usize * ENTRY_LEN;
    patch(&file.path().to_path_buf(), |b| {
        put_u32(b, HEADER_LEN + 3 * ENTRY_LEN + ENTRY_DATA_LEN, u32::MAX);
        put_u64(b, DATA_LEN_OFFSET, u64::MAX / 2);
        let index_crc = crc32fast::hash(&b[HEADER_LEN..head_len]);
        put_u32(b, INDEX_CRC_OFFSET, index_crc);
        reseal_header(b);
    });
    assert_refused(
        read(&file, 3, 0..1440),
        file.path(),
        "points outside the data",
    );
    assert_refused(file.for_each_slot(&mut |_, _| {}), file.path(), "");
}

//! Compacted files: exact round trips of every kind of column, and refusal of damaged,
//! truncated, foreign and mismatched files with the file's name, never a panic.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::storage::period_file::LatestPages;
use crate::time::Span;

/// 2025-11-21T00:00:00Z, a day boundary.
const DAY_START: i64 = 1_763_683_200;
/// Slots of the file of every kind: one a kind.
const SLOTS: u32 = 10;

/// A 1m/1d period of `slots` slots, chunk 3.
fn meta(slots: u32) -> PeriodMeta {
    PeriodMeta {
        tier: "1m".to_string(),
        resolution: Span::from_secs(60),
        period: Span::from_secs(86_400),
        period_start: DAY_START,
        slots,
        chunk: 3,
        histogram_cells: crate::storage::format::CellLayout::new_file(Span::from_secs(60)),
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

/// Sets buckets `first`, `first + stride`, ... of `slot` to `odd`'s (count, total, min, max).
fn plant(slot: &mut [Bucket], odd: &[(u64, f64, f64, f64)], stride: usize, first: usize) {
    for (i, &(count, total, min, max)) in odd.iter().enumerate() {
        slot[first + i * stride] = Bucket {
            count,
            total,
            min,
            max,
            last: None,
        };
    }
}

/// One slot of each kind the tests cover, `n` (at least 64) buckets each: those of
/// [`v1_kinds`], then single samples.
fn kinds(n: u32) -> Vec<(&'static str, Vec<Bucket>)> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let singles = gauge(&mut rng, n, 1, |r, v| {
        ((v * 100.0).round() + (r.next() % 201) as f64 - 100.0) / 100.0
    });
    // Single samples, some of them count-1 buckets whose min or max is not their total bit
    // for bit (a cell overwritten with other bits), which must be stored whole.
    let mut mixed = gauge(&mut rng, n, 1, |r, v| v + r.unit());
    let odd = [
        (1, 5.0, 4.0, 6.0),
        (1, -0.0, 0.0, -0.0),
        (1, 0.0, 0.0, -0.0),
        (1, 2.5, 2.5, f64::INFINITY),
        (1, f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY),
        (1, 5e-324, 5e-324, 5e-324),
        (1, -0.0, -0.0, -0.0),
        (1, 7.0, f64::MIN_POSITIVE / 4.0, 7.0),
        (2, 3.0, 1.5, 1.5),
        (0, 0.0, -0.0, 0.0),
    ];
    plant(&mut mixed, &odd, 5, 2);
    mixed[n as usize / 2] = Bucket::EMPTY;
    let mut all = v1_kinds(n);
    all.push(("single samples", singles));
    all.push(("single samples, some not plain", mixed));
    all
}

/// The kinds the version 1 fixture holds, one a slot (`V1_SLOTS`), `n` buckets each.
fn v1_kinds(n: u32) -> Vec<(&'static str, Vec<Bucket>)> {
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
        last: None,
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
    plant(&mut special, &odd, 3, 1);
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
        (slots[slot as usize][bucket as usize], None)
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
    file.for_each_slot(&mut |slot, buckets, _| {
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
    assert_eq!(slots.len(), SLOTS as usize);
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
    let file = CompactFile::create(dir.path(), &m, &|_, _| (Bucket::EMPTY, None)).unwrap();
    let len = std::fs::metadata(file.path()).unwrap().len();
    assert_eq!(len, (HEADER_LEN + 256 * ENTRY_LEN) as u64);
    assert_bits_eq(
        &read(&file, 255, 0..1440).unwrap(),
        &[Bucket::EMPTY; 1440],
        "empty",
    );
    let mut calls = 0;
    file.for_each_slot(&mut |_, _, _| calls += 1).unwrap();
    assert_eq!(calls, 0);
}

#[test]
fn a_handle_does_no_io_and_a_missing_file_is_an_io_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("20251121T000000Z-c00003.tdc");
    let file = CompactFile::new(path.clone(), meta(SLOTS));
    for err in [
        read(&file, 0, 0..10).unwrap_err(),
        file.for_each_slot(&mut |_, _, _| {}).unwrap_err(),
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
        assert_refused(file.for_each_slot(&mut |_, _, _| {}), file.path(), expected);
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
    assert_refused(file.for_each_slot(&mut |_, _, _| {}), file.path(), "slot 2");
    for slot in (0..SLOTS).filter(|&s| s != 2) {
        let found = read(&file, slot, 0..1440).unwrap();
        assert_bits_eq(&found, &slots[slot as usize], &format!("slot {slot}"));
    }
}

/// Flips bytes of `slot`'s data in turn (about 400 of them), with the slot, index and
/// header checksums made to match: the decoder itself must refuse or return values, never
/// panic.
fn damage_behind_valid_checksums(file: &CompactFile, slot: u32) {
    let original = std::fs::read(file.path()).unwrap();
    let victim = entry(&original, slot);
    let slots = file.meta().slots as usize;
    let head_len = HEADER_LEN + slots * ENTRY_LEN;
    let at = HEADER_LEN + slot as usize * ENTRY_LEN + ENTRY_CRC;
    let step = (victim.len as usize / 400).max(1);
    let buckets = file.meta().buckets();
    for i in (0..victim.len as usize).step_by(step) {
        let mut bytes = original.clone();
        let start = victim.offset as usize;
        bytes[start + i] ^= 0x5a;
        let crc = crc32fast::hash(&bytes[start..start + victim.len as usize]);
        put_u32(&mut bytes, at, crc);
        let index_crc = crc32fast::hash(&bytes[HEADER_LEN..head_len]);
        put_u32(&mut bytes, INDEX_CRC_OFFSET, index_crc);
        reseal_header(&mut bytes);
        std::fs::write(file.path(), &bytes).unwrap();
        match read(file, slot, 0..buckets) {
            Ok(_) => {}
            Err(e) => assert_refused::<()>(Err(e), file.path(), &format!("slot {slot}")),
        }
    }
    std::fs::write(file.path(), &original).unwrap();
}

#[test]
fn damage_behind_valid_checksums_is_refused_not_a_panic() {
    // The 2-decimal walk, and the single samples with exceptions: every list and column.
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    damage_behind_valid_checksums(&file, 2);
    damage_behind_valid_checksums(&file, SLOTS - 1);
    let (v1, _) = v1_fixture(dir.path());
    damage_behind_valid_checksums(&v1, 2);
    damage_behind_valid_checksums(&v1, 7);
}

/// Slots of the version 1 fixture: one for each of [`v1_kinds`].
const V1_SLOTS: u32 = 8;

/// The fixture of format `version`, `tests/fixtures/compact-v<version>/` (a 1m/6h period of
/// `slots` slots, chunk 3), copied into `dir`.
fn fixture(dir: &Path, version: u32, slots: u32) -> CompactFile {
    let m = PeriodMeta {
        period: Span::from_secs(6 * 3_600),
        ..meta(slots)
    };
    let name = CompactFile::file_name(&m);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/compact-v{version}"))
        .join(&name);
    std::fs::copy(&fixture, dir.join(&name)).expect("the fixture");
    CompactFile::new(dir.join(name), m)
}

/// The version 1 fixture, `tests/fixtures/compact-v1/20251121T000000Z-c00003.tdc`, copied
/// into `dir`, and the buckets it holds: [`v1_kinds`] over a 1m/6h period. Written by the
/// version 1 code (commit 231fbca), before version 2 existed.
fn v1_fixture(dir: &Path) -> (CompactFile, Vec<Vec<Bucket>>) {
    let file = fixture(dir, 1, V1_SLOTS);
    let slots = v1_kinds(file.meta().buckets())
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    (file, slots)
}

#[test]
fn a_version_1_file_still_reads_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = v1_fixture(dir.path());
    let bytes = std::fs::read(file.path()).unwrap();
    assert_eq!(
        get_u32(&bytes, VERSION_OFFSET),
        1,
        "the fixture is version 1"
    );
    check_round_trip(&file, &slots);
    // Its slots decode as version 1 only: read as version 2 they are refused.
    let e = entry(&bytes, 1);
    let data = &bytes[e.offset as usize..(e.offset + u64::from(e.len)) as usize];
    assert!(decode_slot(data, file.meta().buckets(), times(), 2, Latest::Read, true).is_err());
}

#[test]
fn plain_singles_store_only_their_total() {
    let slot = &kinds(1440)[SLOTS as usize - 1].1;
    let kept = slot.iter().filter(|b| !is_zero(b)).count();
    let plain = slot.iter().filter(|b| is_plain_single(b)).count();
    let exceptions: Vec<u32> = (0..1440)
        .filter(|&i| slot[i as usize].count == 1 && !is_plain_single(&slot[i as usize]))
        .collect();
    assert_eq!(exceptions, [2, 7, 12, 17, 37]);
    // All but the exceptions, the count-2 bucket, the ghost and the empty one.
    assert_eq!(plain, 1440 - exceptions.len() - 3);
    let data = encode_slot(slot, &vec![None; slot.len()], times()).unwrap();
    let mut rest = &data[..];
    assert_eq!(columns::take_list(&mut rest, 1440, "ghost").unwrap(), [47]);
    assert_eq!(
        columns::take_list(&mut rest, 1440, "exception").unwrap(),
        exceptions
    );
    let counts: Vec<u64> = columns::take_column(&mut rest, 1440, "count").unwrap();
    assert_eq!(counts.len(), 1440);
    // The values section: every kept bucket's total, the mins and maxes of the others only.
    // Its length is not stored: the counts and lists say it.
    let (values, _) = take_values(&mut rest, kept, 2 * (kept - plain)).unwrap();
    assert_eq!(values.len(), kept + 2 * (kept - plain));
    assert_eq!(
        rest,
        [LATEST_NONE],
        "no latest sample known: the section's form alone"
    );
    assert_bits_eq(
        &decode_slot(&data, 1440, times(), FORMAT_VERSION, Latest::Read, true)
            .unwrap()
            .buckets,
        slot,
        "decoded",
    );
}

/// A read that skips the latest samples (a sum over many series) leaves their section
/// undecoded: every other field as a whole read gives it, the latest samples unknown.
#[test]
fn a_read_that_skips_the_latest_samples_decodes_the_rest_alike() {
    let mut slot = vec![Bucket::EMPTY; 1440];
    for i in (0..1440).step_by(7) {
        let ts = times().start(i) + 30;
        slot[i].add_at(i as f64, Last::new(i as f64 * 2.0, ts));
        if i % 3 == 0 {
            slot[i].add_at(1.5, Last::new(-1.0, ts + 5));
        }
    }
    let data = encode_slot(&slot, &vec![None; slot.len()], times()).unwrap();
    let decode = |latest| {
        decode_slot(&data, 1440, times(), FORMAT_VERSION, latest, false)
            .unwrap()
            .buckets
    };
    let lasts = |buckets: &[Bucket]| buckets.iter().map(|b| b.last).collect::<Vec<_>>();
    let read = decode(Latest::Read);
    assert_bits_eq(&read, &slot, "read");
    assert_eq!(lasts(&read), lasts(&slot));
    assert!(read[7].last.is_some());
    let skipped = decode(Latest::Skip);
    assert_bits_eq(&skipped, &slot, "skipped");
    assert!(skipped.iter().all(|b| b.last.is_none()));
}

#[test]
fn truncation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = kinds_file(dir.path());
    let original = std::fs::read(file.path()).unwrap();
    let head_len = HEADER_LEN + SLOTS as usize * ENTRY_LEN;
    let last = entry(&original, SLOTS - 1);
    for len in [0, 7, HEADER_LEN - 1, HEADER_LEN, head_len - 1] {
        std::fs::write(file.path(), &original[..len]).unwrap();
        assert_refused(read(&file, 0, 0..1440), file.path(), "truncated");
        assert_refused(
            file.for_each_slot(&mut |_, _, _| {}),
            file.path(),
            "truncated",
        );
    }
    // Cut inside the last slot's data: that slot and the whole-file walk are refused, the
    // slots before it still read.
    let cut = last.offset as usize + last.len as usize / 2;
    std::fs::write(file.path(), &original[..cut]).unwrap();
    assert_refused(read(&file, SLOTS - 1, 0..1440), file.path(), "truncated");
    assert_refused(
        file.for_each_slot(&mut |_, _, _| {}),
        file.path(),
        "truncated",
    );
    assert_bits_eq(&read(&file, 0, 0..1440).unwrap(), &slots[0], "slot 0");
    // Bytes appended are refused by the whole-file walk.
    let mut longer = original.clone();
    longer.push(0);
    std::fs::write(file.path(), &longer).unwrap();
    assert_refused(
        file.for_each_slot(&mut |_, _, _| {}),
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
    assert_refused(file.for_each_slot(&mut |_, _, _| {}), &path, "bad magic");
    // A hot period file's header, renamed .tdc.
    let mut hot = m.encode().to_vec();
    hot.resize(hot.len() + 64 * 1024, 0);
    std::fs::write(&path, &hot).unwrap();
    assert_refused(read(&file, 0, 0..1440), &path, "bad magic");
    assert_refused(file.for_each_slot(&mut |_, _, _| {}), &path, "bad magic");
}

#[test]
fn another_format_version_or_codec_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = kinds_file(dir.path());
    let original = std::fs::read(file.path()).unwrap();
    let path = file.path().to_path_buf();
    assert_eq!(
        get_u32(&original, VERSION_OFFSET),
        5,
        "files are written as version 5"
    );
    for version in [0, FORMAT_VERSION + 1, u32::MAX] {
        std::fs::write(&path, &original).unwrap();
        patch(&path, |b| {
            put_u32(b, VERSION_OFFSET, version);
            reseal_header(b);
        });
        assert_refused(
            read(&file, 0, 0..1440),
            &path,
            &format!("compacted format version {version}, this build reads versions 1 to 5"),
        );
        assert_refused(
            file.for_each_slot(&mut |_, _, _| {}),
            &path,
            &format!("compacted format version {version}"),
        );
    }
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
            wrong.for_each_slot(&mut |_, _, _| {}),
            file.path(),
            "header holds",
        );
    }
}

fn bucket_strategy() -> impl Strategy<Value = Bucket> {
    let finite = any::<f64>().prop_filter("finite", |v| v.is_finite());
    prop_oneof![
        2 => Just(Bucket::EMPTY),
        2 => finite.clone().prop_map(|v| Bucket { count: 1, total: v, min: v, max: v, last: None }),
        5 => (0u64..1_000, finite.clone(), finite.clone(), finite).prop_map(
            |(count, total, min, max)| Bucket { count, total, min, max, last: None }
        ),
        1 => (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(t, mi, ma)| Bucket {
            count: 1,
            total: f64::from_bits(t),
            min: f64::from_bits(mi),
            max: f64::from_bits(ma),
            last: None,
        }),
        1 => (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(count, t, mi, ma)| Bucket {
                count,
                total: f64::from_bits(t),
                min: f64::from_bits(mi),
                max: f64::from_bits(ma),
                last: None,
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
    const HOT_SLOTS: u32 = 8;
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, HOT_SLOTS),
        true,
    )
    .unwrap();
    let (hot, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::Ahead)
        .unwrap();
    let writer = storage.writer_slot().unwrap().expect("writable");
    let file = storage.writable_file(0, DAY_START, 0).unwrap();
    for (bucket, slot, value) in [(0, 0, 1.25), (0, 0, -3.5), (17, 5, 0.1), (359, 7, -0.0)] {
        file.reserve_and_add(bucket, slot, value, writer.publisher());
    }
    let out = tempfile::tempdir().unwrap();
    let compact =
        CompactFile::create(out.path(), hot.meta(), &|b, s| hot.load_closed(b, s)).unwrap();
    let n = hot.meta().buckets();
    let expected: Vec<Vec<Bucket>> = (0..HOT_SLOTS)
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
    let file = CompactFile::create(dir.path(), &m, &|_, _| (Bucket::EMPTY, None)).unwrap();
    assert!(!dir.path().join(format!("{name}.tmp")).exists());
    assert!(file.path().exists());

    let missing = dir.path().join("no such directory");
    let err = CompactFile::create(&missing, &m, &|_, _| (Bucket::EMPTY, None)).unwrap_err();
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
    assert_refused(file.for_each_slot(&mut |_, _, _| {}), file.path(), "");
}

/// A distribution slot's buckets and histograms over `n` buckets: `per` log-normal samples
/// (three decades wide) in each bucket `keep` says to fill.
fn distribution(rng: &mut Rng, n: u32, per: u32, keep: impl Fn(u32) -> bool) -> Vec<Loaded> {
    (0..n)
        .map(|i| {
            if !keep(i) {
                return (Bucket::EMPTY, None);
            }
            let mut bucket = Bucket::EMPTY;
            let mut histogram = Histogram::default();
            for _ in 0..per {
                // Box-Muller from two uniforms in (0, 1].
                let (u, v) = ((rng.unit() + 1.0) / 2.0, (rng.unit() + 1.0) / 2.0);
                let normal = (-2.0 * (1.0 - u).max(1e-300).ln()).sqrt()
                    * (2.0 * std::f64::consts::PI * v).cos();
                let value = (3.0 + 1.2 * normal).exp();
                bucket.add(value);
                histogram.record(value);
            }
            (bucket, Some(histogram))
        })
        .collect()
}

/// Slots with histograms: one on every kept bucket; one on some (a bitmap), with a ghost
/// holding one and a bucket holding one beside an all-zero record (not kept); and gauges.
fn distribution_slots(n: u32) -> Vec<Vec<Loaded>> {
    let mut rng = Rng(0x51_7cc1_b727_220a);
    let every = distribution(&mut rng, n, 5, |i| i % 7 != 3);
    let mut some = distribution(&mut rng, n, 3, |i| i % 3 != 0);
    for (i, (bucket, histogram)) in some.iter_mut().enumerate() {
        if i % 5 == 1 {
            // Samples written before the series became a distribution.
            *histogram = None;
        }
        if i % 3 == 0 {
            *bucket = Bucket {
                count: 1,
                total: 2.5,
                min: 2.5,
                max: 2.5,
                last: None,
            };
        }
    }
    // A histogram beside a record of zero bits (no sample): not kept.
    let mut stray = Histogram::default();
    stray.record(1.0);
    some[n as usize - 1] = (Bucket::EMPTY, Some(stray));
    some[9] = (
        Bucket {
            count: 0,
            total: 1.5,
            min: 0.0,
            max: 0.0,
            last: None,
        },
        Some(Histogram::default()),
    );
    let mut gauges: Vec<Vec<Loaded>> = kinds(n)
        .into_iter()
        .map(|(_, b)| b.into_iter().map(|b| (b, None)).collect())
        .collect();
    gauges.truncate(3);
    let mut slots = vec![every, some];
    slots.extend(gauges);
    slots
}

/// What a compacted file gives back for `slots`: a histogram beside an all-zero record is
/// not kept.
fn kept_form(slots: &[Vec<Loaded>]) -> Vec<Vec<Loaded>> {
    slots
        .iter()
        .map(|slot| {
            slot.iter()
                .map(|(b, h)| (*b, if is_zero(b) { None } else { h.clone() }))
                .collect()
        })
        .collect()
}

fn create_distributions(dir: &Path, meta: &PeriodMeta, slots: &[Vec<Loaded>]) -> CompactFile {
    CompactFile::create(dir, meta, &|bucket, slot| {
        slots[slot as usize][bucket as usize].clone()
    })
    .expect("create")
}

fn read_distributions(file: &CompactFile, slot: u32, buckets: Range<u32>) -> Result<Vec<Loaded>> {
    file.open_reader()?.read_slot_distributions(slot, buckets)
}

fn assert_loaded_eq(found: &[Loaded], expected: &[Loaded], what: &str) {
    assert_eq!(found.len(), expected.len(), "{what}: length");
    for (i, (f, e)) in found.iter().zip(expected).enumerate() {
        assert_eq!(bits(&f.0), bits(&e.0), "{what}: bucket {i}");
        assert_eq!(f.1, e.1, "{what}: histogram of bucket {i}");
    }
}

#[test]
fn histograms_round_trip_beside_their_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let m = meta(5);
    let n = m.buckets();
    let slots = distribution_slots(n);
    let file = create_distributions(dir.path(), &m, &slots);
    let expected = kept_form(&slots);
    let last = n as usize - 1;
    assert!(slots[1][last].1.is_some() && expected[1][last].1.is_none());
    for (slot, want) in expected.iter().enumerate() {
        let slot = slot as u32;
        for range in [0..n, 0..1, n - 1..n, 5..5, n / 3..n / 2] {
            let what = format!("slot {slot} {range:?}");
            let found = read_distributions(&file, slot, range.clone()).unwrap();
            let want = &want[range.start as usize..range.end as usize];
            assert_loaded_eq(&found, want, &what);
            let buckets: Vec<Bucket> = want.iter().map(|(b, _)| *b).collect();
            assert_bits_eq(&read(&file, slot, range).unwrap(), &buckets, &what);
        }
    }
    let mut seen = 0;
    file.for_each_slot(&mut |slot, buckets, histograms| {
        let found: Vec<Loaded> = buckets
            .iter()
            .copied()
            .zip(histograms.iter().cloned())
            .collect();
        assert_loaded_eq(
            &found,
            &expected[slot as usize],
            &format!("for_each_slot {slot}"),
        );
        seen += 1;
    })
    .unwrap();
    assert_eq!(seen, 5);
    // The forms: every kept bucket of slot 0 has one; slot 1 marks them; gauges have none.
    let bytes = std::fs::read(file.path()).unwrap();
    let section = |slot: u32| {
        let e = entry(&bytes, slot);
        let data = &bytes[e.offset as usize..(e.offset + u64::from(e.len)) as usize];
        let buckets: Vec<Bucket> = slots[slot as usize].iter().map(|(b, _)| *b).collect();
        let without = encode_slot(&buckets, &vec![None; buckets.len()], times()).unwrap();
        data[without.len()..].to_vec()
    };
    assert_eq!(section(0)[0], HISTOGRAMS_EVERY);
    assert_eq!(section(1)[0], HISTOGRAMS_MARKED);
    assert!(
        section(2).is_empty(),
        "a slot without histograms costs nothing"
    );
}

/// Slots of the version 2 fixture: one for each of [`kinds`].
const V2_SLOTS: u32 = SLOTS;

/// The version 2 fixture, `tests/fixtures/compact-v2/20251121T000000Z-c00003.tdc`, copied
/// into `dir`, and the buckets it holds: [`kinds`] over a 1m/6h period. Written by the
/// version 2 code (commit 9a172d2), before version 3 existed.
fn v2_fixture(dir: &Path) -> (CompactFile, Vec<Vec<Bucket>>) {
    let file = fixture(dir, 2, V2_SLOTS);
    let slots = kinds(file.meta().buckets())
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    (file, slots)
}

#[test]
fn a_version_2_file_still_reads_bit_for_bit_without_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = v2_fixture(dir.path());
    let bytes = std::fs::read(file.path()).unwrap();
    assert_eq!(
        get_u32(&bytes, VERSION_OFFSET),
        2,
        "the fixture is version 2"
    );
    check_round_trip(&file, &slots);
    let n = file.meta().buckets();
    for (slot, want) in slots.iter().enumerate() {
        let found = read_distributions(&file, slot as u32, 0..n).unwrap();
        let want: Vec<Loaded> = want.iter().map(|b| (*b, None)).collect();
        assert_loaded_eq(&found, &want, &format!("slot {slot}"));
    }
    // Version 2 slot data has nothing after its columns: a byte more is refused.
    let e = entry(&bytes, 1);
    let mut data = bytes[e.offset as usize..(e.offset + u64::from(e.len)) as usize].to_vec();
    assert!(decode_slot(&data, n, times(), 2, Latest::Read, false).is_ok());
    data.push(HISTOGRAMS_EVERY);
    assert!(decode_slot(&data, n, times(), 2, Latest::Read, false).is_err());
    damage_behind_valid_checksums(&file, 2);
}

/// Rewrites slot `slot`'s data of the file at `path` with `f`, the index entry's CRC, the
/// data offsets after it, the index CRC and the header made to match: damage only the
/// decoder can see.
fn rewrite_slot(path: &Path, slot: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let bytes = std::fs::read(path).unwrap();
    let slots = get_u32(&bytes, SLOTS_OFFSET);
    let head_len = HEADER_LEN + slots as usize * ENTRY_LEN;
    let mut datas: Vec<Vec<u8>> = (0..slots)
        .map(|s| {
            let e = entry(&bytes, s);
            bytes[e.offset as usize..(e.offset + u64::from(e.len)) as usize].to_vec()
        })
        .collect();
    f(&mut datas[slot as usize]);
    let mut out = bytes[..head_len].to_vec();
    for (s, data) in datas.iter().enumerate() {
        let at = HEADER_LEN + s * ENTRY_LEN;
        let offset = out.len() as u64;
        put_u64(&mut out, at + ENTRY_DATA_OFFSET, offset);
        put_u32(&mut out, at + ENTRY_DATA_LEN, data.len() as u32);
        put_u32(&mut out, at + ENTRY_CRC, crc32fast::hash(data));
        out.extend_from_slice(data);
    }
    let data_len = (out.len() - head_len) as u64;
    put_u64(&mut out, DATA_LEN_OFFSET, data_len);
    let index_crc = crc32fast::hash(&out[HEADER_LEN..head_len]);
    put_u32(&mut out, INDEX_CRC_OFFSET, index_crc);
    reseal_header(&mut out);
    std::fs::write(path, out).unwrap();
}

/// A change made to a slot's data.
type Damage = Box<dyn Fn(&mut Vec<u8>)>;

#[test]
fn damage_to_the_histogram_section_refuses_that_slot_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let m = meta(5);
    let n = m.buckets();
    let slots = distribution_slots(n);
    let file = create_distributions(dir.path(), &m, &slots);
    let expected = kept_form(&slots);
    let original = std::fs::read(file.path()).unwrap();
    let section_at = |slot: u32| {
        let buckets: Vec<Bucket> = slots[slot as usize].iter().map(|(b, _)| *b).collect();
        encode_slot(&buckets, &vec![None; buckets.len()], times())
            .unwrap()
            .len()
    };
    let (every, marked) = (section_at(0), section_at(1));
    // Not a multiple of 8, so the bitmap's last byte has bits past the kept buckets.
    let kept = slots[1].iter().filter(|(b, _)| !is_zero(b)).count();
    assert_eq!(kept % 8, 7);
    let cases: Vec<(u32, &str, Damage)> = vec![
        (0, "unknown form", Box::new(move |d| d[every] = 7)),
        (
            1,
            "past the kept ones",
            Box::new(move |d| {
                d[marked + kept.div_ceil(8)] |= 0x80;
            }),
        ),
        (
            1,
            "marks no bucket",
            Box::new(move |d| {
                d.truncate(marked + 1);
                d.extend(std::iter::repeat_n(0, kept.div_ceil(8)));
            }),
        ),
        (
            1,
            "bitmap cut short",
            Box::new(move |d| d.truncate(marked + 2)),
        ),
        (
            0,
            "histogram count column",
            Box::new(move |d| {
                d.truncate(d.len() - 1);
            }),
        ),
        (
            0,
            "1 bytes after the histogram columns",
            Box::new(|d| d.push(0)),
        ),
    ];
    // Columns that decode but do not make histograms: slot 0's, each changed in one way.
    let histograms: Vec<&Histogram> = expected[0].iter().filter_map(|(_, h)| h.as_ref()).collect();
    let columns = || HistogramColumns::of(&histograms);
    let first_bucket = (0..n as usize)
        .find(|&i| expected[0][i].1.is_some())
        .unwrap();
    let changed: Vec<(String, HistogramColumns)> = vec![
        (
            format!("histogram of bucket {first_bucket}: a count of 0"),
            HistogramColumns {
                counts: [vec![0], columns().counts[1..].to_vec()].concat(),
                ..columns()
            },
        ),
        (
            "scale 9 outside -4..=8".into(),
            HistogramColumns {
                scales: [vec![9], columns().scales[1..].to_vec()].concat(),
                ..columns()
            },
        ),
        (
            "zero threshold -1".into(),
            HistogramColumns {
                thresholds: [vec![-1.0], columns().thresholds[1..].to_vec()].concat(),
                ..columns()
            },
        ),
        (
            "out of range".into(),
            HistogramColumns {
                firsts: [vec![i64::MAX], columns().firsts[1..].to_vec()].concat(),
                ..columns()
            },
        ),
        (
            "overflows".into(),
            HistogramColumns {
                gaps: [vec![u64::MAX], columns().gaps[1..].to_vec()].concat(),
                ..columns()
            },
        ),
        (
            "histogram lengths past what the histograms can hold".into(),
            HistogramColumns {
                lengths: [vec![u64::MAX], columns().lengths[1..].to_vec()].concat(),
                ..columns()
            },
        ),
        // Columns whose lengths disagree: each is read as long as the lengths before it say
        // (a pco page read as longer or shorter than written is not always refused; the
        // slot's CRC is what refuses damage).
        (
            "histogram".into(),
            HistogramColumns {
                gaps: Vec::new(),
                ..columns()
            },
        ),
    ];
    let mut cases = cases;
    let reasons: Vec<String> = changed.iter().map(|(r, _)| r.clone()).collect();
    for (_, c) in changed {
        let bytes = column_bytes(&c);
        cases.push((
            0,
            "",
            Box::new(move |d: &mut Vec<u8>| {
                d.truncate(every + 1);
                d.extend_from_slice(&bytes);
            }),
        ));
    }
    let mut crafted = reasons.iter();
    for (slot, reason, damage) in cases {
        let reason = if reason.is_empty() {
            crafted.next().unwrap().as_str()
        } else {
            reason
        };
        std::fs::write(file.path(), &original).unwrap();
        rewrite_slot(file.path(), slot, damage);
        assert_refused(
            read_distributions(&file, slot, 0..n),
            file.path(),
            &format!("slot {slot}: "),
        );
        match read_distributions(&file, slot, 0..n) {
            Err(Error::CorruptFile { reason: r, .. }) => assert!(r.contains(reason), "{r}"),
            other => panic!("{reason}: {other:?}"),
        }
        assert_refused(file.for_each_slot(&mut |_, _, _| {}), file.path(), reason);
        // The other slots read as before.
        for other in (0..5).filter(|&s| s != slot) {
            let found = read_distributions(&file, other, 0..n).unwrap();
            assert_loaded_eq(
                &found,
                &expected[other as usize],
                &format!("{reason}: {other}"),
            );
        }
    }
    // Flipped bytes of the section behind valid checksums: refused or read, never a panic;
    // one behind the stored checksum: refused by it, for the buckets too.
    std::fs::write(file.path(), &original).unwrap();
    for at in (every..every + 300).step_by(3) {
        std::fs::write(file.path(), &original).unwrap();
        rewrite_slot(file.path(), 0, |d| {
            if at < d.len() {
                d[at] ^= 0x5a;
            }
        });
        if let Err(e) = read_distributions(&file, 0, 0..n) {
            assert_refused::<()>(Err(e), file.path(), "slot 0: ");
        }
    }
    std::fs::write(file.path(), &original).unwrap();
    let e = entry(&original, 0);
    patch(&file.path().to_path_buf(), |b| {
        b[e.offset as usize + every + 4] ^= 1;
    });
    assert_refused(
        read(&file, 0, 0..n),
        file.path(),
        "data checksum mismatch in slot 0",
    );
    assert_refused(
        read_distributions(&file, 0, 0..n),
        file.path(),
        "data checksum mismatch in slot 0",
    );
}

/// The test distribution, in a hot file of the default first tier (1m, 6 h periods,
/// 360 buckets) through the write path: 100 StatsD timers of a 128-slot chunk, each minute
/// of each holding 10 to 100 (uniform) seeded log-normal latencies, median e^3 = 20 ms,
/// sigma 1.05 (three decades between the 0.1st and 99.9th percentiles). The period is
/// compacted, read back, made hot again and one bucket emptied as a deletion does; every
/// step keeps every bucket and histogram exactly. Prints the bytes per bucket hot and
/// compacted (`cargo test --lib distribution_buckets -- --nocapture`).
#[test]
fn distribution_buckets_compact_rehydrate_and_clear_exactly() {
    use crate::config::TiersConfig;
    use crate::storage::{Creation, HeldPeriod, Storage};
    use std::os::unix::fs::MetadataExt;
    const SLOTS: u32 = 128;
    const SERIES: u32 = 100;
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    assert_eq!(
        (tiers[0].resolution.secs(), tiers[0].period.secs()),
        (60, 6 * 3_600)
    );
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let (hot, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::Ahead)
        .unwrap();
    let writer = storage.writer_slot().unwrap().expect("writable");
    let file = storage.writable_file(0, DAY_START, 0).unwrap();
    let n = hot.meta().buckets();
    let mut rng = Rng(0x7e57_d157_2026_1206);
    let mut samples = 0u64;
    for slot in 0..SERIES {
        for bucket in 0..n {
            file.reserve_slots(bucket, slot, 1, LatestPages::Leave)
                .unwrap();
            file.reserve_histograms(bucket, slot, 1).unwrap();
            let per = 10 + rng.next() % 91;
            for _ in 0..per {
                // Box-Muller from two uniforms in (0, 1].
                let (u, v) = ((rng.unit() + 1.0) / 2.0, (rng.unit() + 1.0) / 2.0);
                let normal = (-2.0 * (1.0 - u).max(1e-300).ln()).sqrt()
                    * (2.0 * std::f64::consts::PI * v).cos();
                assert!(file.add_distribution(
                    bucket,
                    slot,
                    &[(3.0 + 1.05 * normal).exp()],
                    &writer
                ));
            }
            samples += per;
        }
    }
    file.mark_dirty();
    let load_all = |hot: &crate::storage::period_file::PeriodFile| -> Vec<Vec<Loaded>> {
        (0..SLOTS)
            .map(|s| (0..n).map(|b| hot.load_closed(b, s)).collect())
            .collect()
    };
    let before = load_all(&hot);
    assert!(before[..SERIES as usize]
        .iter()
        .flatten()
        .all(|(b, h)| b.count > 0 && h.as_ref().map(Histogram::count) == Some(b.count)));
    // A bucket and its histogram take 224 bytes hot by layout (a 32-byte record and a
    // 192-byte cell; a distribution keeps no latest sample, and its runs' pages of the
    // latest area stay holes), at most 256 as the whole file allocates it (issue #53's
    // budget), and the test distribution's histograms keep their full scale in it (the
    // stated 0.55% error).
    let hot_bucket = crate::storage::format::RECORD_SIZE + hot.meta().histogram_cell_len();
    assert!(hot_bucket <= 224, "{hot_bucket} bytes");
    assert!(
        !latest_area_holds_data(&hot),
        "no page of the latest area has disk"
    );
    assert!(before[..SERIES as usize].iter().flatten().all(|(_, h)| {
        h.as_ref().map(Histogram::scale) == Some(crate::histogram::DEFAULT_SCALE)
    }));
    let hot_bytes = std::fs::metadata(hot.path()).unwrap().blocks() * 512;
    let allocated = hot_bytes as f64 / f64::from(SERIES * n);
    let encoded: Vec<usize> = (before.iter().flatten())
        .filter_map(|(_, h)| h.as_ref().map(Histogram::encoded_len))
        .collect();
    assert!(
        allocated <= 256.0,
        "{allocated:.1} bytes a bucket allocated"
    );

    assert!(storage.compact(0, &hot).unwrap(), "compacted");
    let Some(crate::storage::StoredPeriod::Compacted(compact)) = storage.stored(0, DAY_START, 0)
    else {
        panic!("the period is compacted");
    };
    let compact_len = std::fs::metadata(compact.path()).unwrap().len();
    let reader = compact.open_reader().unwrap();
    for (slot, want) in before.iter().enumerate() {
        let found = reader.read_slot_distributions(slot as u32, 0..n).unwrap();
        assert_loaded_eq(&found, want, &format!("compacted slot {slot}"));
    }
    // The histogram section's share: each slot encoded again without its histograms.
    let mut sections = 0;
    for slot in &before {
        let (buckets, histograms): (Vec<Bucket>, Vec<Option<Histogram>>) =
            slot.iter().cloned().unzip();
        let without = encode_slot(&buckets, &vec![None; buckets.len()], times())
            .unwrap()
            .len();
        sections += encode_slot(&buckets, &histograms, times()).unwrap().len() - without;
    }
    let filled = f64::from(SERIES * n);
    let head = (HEADER_LEN + SLOTS as usize * ENTRY_LEN) as u64;
    eprintln!(
        "{SERIES} timers at 1m, {:.1} samples a bucket on average: hot {} B a bucket by \
         layout ({} B record + {} B histogram cell; histograms encoded in {:.1} B on \
         average, {} at most), {:.1} B a filled bucket allocated (the whole file); compacted {:.1} B a bucket ({:.1} B of it histograms, {:.1} B \
         the rest of the slot data; header and index {} B)",
        samples as f64 / filled,
        hot_bucket,
        crate::storage::format::RECORD_SIZE,
        hot.meta().histogram_cell_len(),
        encoded.iter().sum::<usize>() as f64 / encoded.len() as f64,
        encoded.iter().max().unwrap(),
        allocated,
        (compact_len - head) as f64 / filled,
        sections as f64 / filled,
        (compact_len - head - sections as u64) as f64 / filled,
        head,
    );

    // A late write makes the period hot again: every histogram is back in its cell.
    let (again, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::OnDemand)
        .unwrap();
    assert!(matches!(
        storage
            .files_of_chunk(0, 0, DAY_START, DAY_START + 1)
            .unwrap()[0]
            .1,
        HeldPeriod::Hot(_)
    ));
    let rehydrated = load_all(&again);
    for (slot, want) in before.iter().enumerate() {
        assert_loaded_eq(&rehydrated[slot], want, &format!("rehydrated slot {slot}"));
    }
    assert!(!latest_area_holds_data(&again), "none written back");
    // A deletion sets the cell empty: its histogram goes with it, the neighbours stay.
    let file = storage.writable_file(0, DAY_START, 0).unwrap();
    file.restore(7, 3, &Bucket::EMPTY).unwrap();
    assert_loaded_eq(
        &[again.load_closed(7, 3)],
        &[(Bucket::EMPTY, None)],
        "cleared",
    );
    assert_loaded_eq(&[again.load_closed(8, 3)], &[before[3][8].clone()], "kept");
    assert_loaded_eq(&[again.load_closed(7, 4)], &[before[4][7].clone()], "kept");
    assert!(!latest_area_holds_data(&again), "nor taken by the deletion");
}

/// Whether any page of `file`'s latest area holds data (not a hole) on disk.
fn latest_area_holds_data(file: &crate::storage::period_file::PeriodFile) -> bool {
    use rustix::fs::{seek, SeekFrom};
    let meta = file.meta();
    let (from, to) = (meta.latest_offset(0), meta.histogram_offset());
    let handle = std::fs::File::open(file.path()).unwrap();
    match seek(&handle, SeekFrom::Data(from)) {
        Ok(data) => data < to,
        Err(rustix::io::Errno::NXIO) => false,
        Err(e) => panic!("{}: {e}", file.path().display()),
    }
}

/// Columns as a slot's histogram section holds them after its form and bitmap.
fn column_bytes(c: &HistogramColumns) -> Vec<u8> {
    let mut out = Vec::new();
    columns::push_column(&mut out, &c.scales).unwrap();
    columns::push_column(&mut out, &c.thresholds).unwrap();
    columns::push_column(&mut out, &c.zero_counts).unwrap();
    columns::push_column(&mut out, &c.lengths).unwrap();
    columns::push_column(&mut out, &c.firsts).unwrap();
    columns::push_column(&mut out, &c.gaps).unwrap();
    columns::push_column(&mut out, &c.counts).unwrap();
    out
}

#[test]
fn histogram_columns_round_trip_every_shape() {
    let mut shapes = vec![Histogram::default()];
    let mut h = Histogram::new(crate::histogram::MIN_SCALE);
    h.record(1e300);
    h.record(-1e-300);
    shapes.push(h);
    let mut h = Histogram::from_parts(3, 0.5, 7, [(-4, 1), (2, 9)], [(8000, 2)]).unwrap();
    h.record(0.25);
    shapes.push(h);
    let mut h = Histogram::default();
    for v in [0.0, 1.0, 1.0, 2.5, 1000.0, -3.0] {
        h.record(v);
    }
    shapes.push(h);
    let refs: Vec<&Histogram> = shapes.iter().collect();
    let columns = HistogramColumns::of(&refs);
    let back = columns.histograms(shapes.len(), |k| k).unwrap();
    assert_eq!(back, shapes);
    // Through the bytes too.
    let mut section = vec![HISTOGRAMS_EVERY];
    section.extend(column_bytes(&columns));
    let kept: Vec<usize> = (0..shapes.len()).collect();
    let found = take_histograms(&section, &kept, shapes.len(), FORMAT_VERSION).unwrap();
    assert_eq!(found, shapes.into_iter().map(Some).collect::<Vec<_>>());
}

/// Bucket times for a slot's data encoded or decoded alone: minute buckets from 0.
fn times() -> BucketTimes {
    BucketTimes {
        start: 0,
        width: 60,
    }
}

/// Slots of the version 4 fixture: one for each of [`v4_slots`].
const V4_SLOTS: u32 = 6;

/// The slots of the version 4 fixture over `n` buckets starting at `times`: the
/// [`distribution_slots`], and the single samples of [`kinds`], with latest samples: every
/// kept bucket's for the gauges (50 s in, its max; the singles' own value, implied), some
/// for the distributions (every third bucket, at varying offsets, other values).
fn v4_slots(n: u32, times: BucketTimes) -> Vec<Vec<Loaded>> {
    let mut slots = distribution_slots(n);
    let singles = kinds(n).swap_remove(8);
    assert_eq!(singles.0, "single samples");
    slots.push(singles.1.into_iter().map(|b| (b, None)).collect());
    for (s, slot) in slots.iter_mut().enumerate() {
        for (i, (b, _)) in slot.iter_mut().enumerate() {
            if is_zero(b) {
                continue;
            }
            b.last = match s {
                0 | 1 if i % 3 == 0 => Some(Last::new(-b.min, times.start(i) + (i % 60) as i64)),
                0 | 1 => None,
                _ => Some(Last::new(b.max, times.start(i) + 50)),
            };
        }
    }
    slots
}

/// The version 4 fixture, `tests/fixtures/compact-v4/20251121T000000Z-c00003.tdc`, copied
/// into `dir`, and what it holds: [`v4_slots`] over a 1m/6h period. Written by the version 4
/// code (commit 7b5057e), before version 5 existed.
fn v4_fixture(dir: &Path) -> (CompactFile, Vec<Vec<Loaded>>) {
    let file = fixture(dir, 4, V4_SLOTS);
    let m = file.meta();
    let slots = kept_form(&v4_slots(m.buckets(), BucketTimes::of(m)));
    (file, slots)
}

#[test]
fn a_version_4_file_still_reads_bit_for_bit_with_latest_samples_and_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let (file, slots) = v4_fixture(dir.path());
    let bytes = std::fs::read(file.path()).unwrap();
    assert_eq!(
        get_u32(&bytes, VERSION_OFFSET),
        4,
        "the fixture is version 4"
    );
    let n = file.meta().buckets();
    let lasts = |l: &[Loaded]| l.iter().map(|(b, _)| b.last).collect::<Vec<_>>();
    for (slot, want) in slots.iter().enumerate() {
        let what = format!("slot {slot}");
        let found = read_distributions(&file, slot as u32, 0..n).unwrap();
        assert_loaded_eq(&found, want, &what);
        assert_eq!(lasts(&found), lasts(want), "{what}: latest samples");
    }
    assert!(slots[0].iter().any(|(b, _)| b.last.is_some()));
    let buckets: Vec<Vec<Bucket>> = slots
        .iter()
        .map(|s| s.iter().map(|(b, _)| *b).collect())
        .collect();
    check_round_trip(&file, &buckets);
    damage_behind_valid_checksums(&file, 0);
    damage_behind_valid_checksums(&file, 4);
}

/// What a compacted slot costs besides its buckets, on the 1m tier: 256 series of a 2-decimal
/// random walk sampled every 10 s (six samples a bucket, the latest 50 s in), compacted as a
/// period of an hour and of six hours; the line through the two file sizes gives the bytes
/// a bucket and the fixed bytes a slot (its index entry included). Prints them (`cargo test
/// --lib storage::compact::tests::slot_cost -- --nocapture`).
#[test]
fn slot_cost_of_a_compacted_1m_hour_and_six_hours() {
    const SERIES: u32 = 256;
    let dir = tempfile::tempdir().unwrap();
    let size = |hours: u64| {
        let m = PeriodMeta {
            period: Span::from_secs(hours * 3_600),
            ..meta(SERIES)
        };
        let times = BucketTimes::of(&m);
        let slots: Vec<Vec<Bucket>> = (0..SERIES)
            .map(|s| {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(s) * 7919));
                let mut v = 100.0;
                (0..m.buckets() as usize)
                    .map(|i| {
                        let mut b = Bucket::EMPTY;
                        for k in 0..6 {
                            v = ((v * 100.0_f64).round() + (rng.next() % 201) as f64 - 100.0)
                                / 100.0;
                            b.add_at(v, Last::new(v, times.start(i) + 10 * k));
                        }
                        b
                    })
                    .collect()
            })
            .collect();
        let file = create(dir.path(), &m, &slots);
        (
            m.buckets(),
            std::fs::metadata(file.path()).unwrap().len() as f64,
        )
    };
    let (hour, six) = (size(1), size(6));
    let per_bucket = (six.1 - hour.1) / f64::from(SERIES * (six.0 - hour.0));
    let per_slot =
        (hour.1 - HEADER_LEN as f64) / f64::from(SERIES) - per_bucket * f64::from(hour.0);
    println!(
        "compacted 1m files of {SERIES} series: an hour {:.1} KB, six hours {:.1} KB: \
         {per_bucket:.2} bytes a bucket plus {per_slot:.1} bytes a slot",
        hour.1 / 1e3,
        six.1 / 1e3
    );
    // Version 4 took 5.60 bytes a bucket and 270.0 a slot.
    assert!(per_bucket < 5.6, "{per_bucket:.2} bytes a bucket");
    assert!(per_slot < 150.0, "{per_slot:.1} bytes a slot");
}

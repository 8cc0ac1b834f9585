//! Read-only storage: files mapped read-only are readable and yield nothing to store into.

use super::*;
use crate::bucket::Bucket;
use crate::config::TiersConfig;
use crate::storage::period_file::LatestPages;

const SLOTS: u32 = 16;

/// A configuration of `tiers` alone, `slots` series per chunk: what a storage test opens.
pub(crate) fn config_of(tiers: &[crate::config::TierSpec], slots: u32) -> TiersConfig {
    TiersConfig {
        tiers: tiers.to_vec(),
        engine: crate::config::EngineSettings {
            series_per_chunk: slots,
            ..Default::default()
        },
        ..TiersConfig::default()
    }
}
/// 2025-11-21T00:00:00Z, a day boundary.
const DAY_START: Timestamp = 1_763_683_200;

#[test]
fn read_only_storage_yields_no_writable_file() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    {
        let (storage, _writer, _) = one_sample_stored(dir.path());
        assert_eq!(storage.writable_files().len(), 1);
    }
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        false,
    )
    .unwrap();
    let file = storage.file(0, DAY_START, 0).expect("the file is there");
    assert_eq!(
        file.load(5, 3),
        Bucket {
            count: 1,
            total: 2.5,
            min: 2.5,
            max: 2.5,
            last: None
        }
    );
    assert!(storage.writable_file(0, DAY_START, 0).is_none());
    assert!(storage.writable_files().is_empty());
    assert!(
        storage.writer_slot().unwrap().is_none(),
        "no writer threads in a read-only storage"
    );
}

/// A group creates every missing file of one period, leaves no temporary file, skips the
/// files that exist, and a read-only storage refuses each file of it.
#[test]
fn a_group_creates_the_missing_files_of_a_period() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    {
        let storage = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            true,
        )
        .unwrap();
        storage
            .get_or_create(0, DAY_START, 2, Creation::Ahead)
            .unwrap();
        let done = storage.create_files(0, DAY_START, &[0, 1, 2, 3, 7], Creation::OnDemand);
        assert!(done.failed.is_empty(), "{:?}", done.failed);
        assert_eq!(done.created, 4, "chunk 2 existed");
        for chunk in [0, 1, 2, 3, 7] {
            assert!(
                storage.writable_file(0, DAY_START, chunk).is_some(),
                "{chunk}"
            );
            let file = storage.file(0, DAY_START, chunk).expect("created");
            assert_eq!(file.meta().chunk, chunk);
        }
        let files = storage.tier_files(0, DAY_START);
        assert_eq!(
            (files.files, files.created_ahead, files.on_demand_creations),
            (5, 1, 4)
        );
        let names = || -> Vec<String> {
            std::fs::read_dir(dir.path().join(TIERS_DIR).join(&tiers[0].name))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        };
        // The group's list of its unsynced files stays until a flush has synced them.
        let listed = |names: &[String]| names.iter().filter(|n| n.ends_with(".creating")).count();
        assert_eq!(listed(&names()), 1, "{:?}", names());
        storage.flush().unwrap();
        let names = names();
        assert!(names.iter().all(|n| n.ends_with(FILE_SUFFIX)), "{names:?}");
        assert_eq!(names.len(), 5);
    }
    // Reopened, the group's files are found whole.
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        false,
    )
    .unwrap();
    assert_eq!(storage.period_files(0, DAY_START).len(), 5);
    let done = storage.create_files(0, DAY_START, &[0, 8, 9], Creation::Ahead);
    assert_eq!(done.created, 0);
    assert_eq!(
        done.failed.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        [8, 9]
    );
}

/// A power loss before the flush that syncs a group's files may leave one short or with a
/// header of zeros: the next open removes those its group's list names (nothing stored into
/// them was durable) and creates them again on demand, keeps the whole ones, and syncs them
/// at its first flush. A damaged file no list names is still refused.
#[test]
fn a_group_file_a_power_loss_left_unwritten_is_removed_at_open_and_made_again() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    let tier_dir = dir.path().join(TIERS_DIR).join(&tiers[0].name);
    let paths: Vec<std::path::PathBuf> = {
        let storage = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            true,
        )
        .unwrap();
        let done = storage.create_files(0, DAY_START, &[0, 1, 2], Creation::Ahead);
        assert_eq!(done.created, 3);
        (0..3)
            .map(|chunk| tier_dir.join(storage.tiers[0].meta(DAY_START, chunk, SLOTS).file_name()))
            .collect()
    };
    let path = |chunk: usize| &paths[chunk];
    let cut = |chunk: usize| -> std::fs::File {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path(chunk))
            .unwrap()
    };
    // What a power loss may leave of files never synced: one empty, one with no header.
    cut(0).set_len(0).unwrap();
    cut(1).write_all_at(&[0; 64], 0).unwrap();
    {
        let storage = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            true,
        )
        .unwrap();
        assert!(!path(0).exists() && !path(1).exists());
        assert_eq!(
            storage.period_files(0, DAY_START).len(),
            1,
            "chunk 2 is whole"
        );
        let done = storage.create_files(0, DAY_START, &[0, 1], Creation::OnDemand);
        assert_eq!(done.created, 2, "{:?}", done.failed);
        storage.flush().unwrap();
        let lists = std::fs::read_dir(&tier_dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".creating")
            })
            .count();
        assert_eq!(lists, 0, "the flush synced every listed file");
    }
    // Synced and no longer listed, a damaged file is refused.
    cut(2).set_len(0).unwrap();
    match Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    ) {
        Err(Error::CorruptFile { .. }) => {}
        other => panic!("expected the damaged file refused, got {:?}", other.err()),
    }
}

/// A writable storage in `dir` of the default tiers, one sample (2.5) stored in bucket 5 of
/// slot 3 of the first tier's period at [`DAY_START`], chunk 0; with its writer slot and
/// that hot file.
fn one_sample_stored(dir: &std::path::Path) -> (Storage, WriterSlot, Arc<PeriodFile>) {
    let storage = Storage::open(
        dir,
        &crate::storage::tests::config_of(&TiersConfig::default().tiers, SLOTS),
        true,
    )
    .unwrap();
    let writer = storage
        .writer_slot()
        .unwrap()
        .expect("a writable storage has writers");
    let (hot, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::Ahead)
        .unwrap();
    (storage.writable_file(0, DAY_START, 0).unwrap()).reserve_and_add(
        5,
        3,
        2.5,
        writer.publisher(),
    );
    (storage, writer, hot)
}

/// A read-only storage (a CLI query beside a server) lists a period as compacted; the writing
/// process then makes it hot again for a late sample, and later drops it. The reads find the
/// hot file, then nothing, never an error.
#[test]
fn a_read_only_storage_follows_a_compacted_period_made_hot_again_or_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    let period = tiers[0].period.secs() as i64;
    let (writer_storage, writer, hot) = one_sample_stored(dir.path());
    assert!(writer_storage.compact(0, &hot).unwrap(), "compacted");

    let reader_storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        false,
    )
    .unwrap();
    let read = |storage: &Storage| -> Vec<Bucket> {
        let mut out = Vec::new();
        for (_, held) in storage
            .files_of_chunk(0, 0, DAY_START, DAY_START + period)
            .expect("the read never fails")
        {
            out.push(match held {
                HeldPeriod::Hot(file) => file.load(5, 3),
                HeldPeriod::Compacted(reader) => {
                    let mut one = [Bucket::EMPTY];
                    reader.read_slot(3, 5..6, &mut one).unwrap();
                    one[0]
                }
            });
        }
        out
    };
    let one = Bucket {
        count: 1,
        total: 2.5,
        min: 2.5,
        max: 2.5,
        last: None,
    };
    assert_eq!(read(&reader_storage), vec![one]);

    // A late sample: the writer turns the period hot again, the compacted file goes.
    let (again, created) = writer_storage
        .get_or_create(0, DAY_START, 0, Creation::OnDemand)
        .unwrap();
    assert!(created);
    writer_storage
        .writable_file(0, DAY_START, 0)
        .unwrap()
        .reserve_and_add(5, 3, 1.5, writer.publisher());
    assert_eq!(again.load(5, 3).count, 2);
    // A reader that had not opened the compacted file yet finds the hot one.
    let fresh_reader = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        false,
    )
    .unwrap();
    assert_eq!(read(&fresh_reader).len(), 1);
    let reader_storage = {
        // The listing made before the rehydration: Compacted, whose file is gone now.
        let stale = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            false,
        )
        .unwrap();
        stale.tiers[0].files.write().unwrap().insert(
            (DAY_START, 0),
            StoredPeriod::Compacted(Arc::new(CompactFile::new(
                dir.path()
                    .join("tiers/1m")
                    .join(CompactFile::file_name(hot.meta())),
                hot.meta().clone(),
            ))),
        );
        stale
    };
    assert_eq!(
        read(&reader_storage)[0].count,
        2,
        "the hot file, read instead"
    );

    // Dropped: nothing to read, and no error.
    writer_storage.drop_before(0, DAY_START + period).unwrap();
    assert!(read(&reader_storage).is_empty());
}

/// A late write makes a period hot again right after its compaction swapped it in: the new
/// hot file takes the old one's name, and the compaction's unlink of the old file must not
/// take it, or the period's data is gone at the next open.
#[test]
fn a_period_made_hot_again_right_after_its_compaction_keeps_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    {
        let (storage, writer, hot) = one_sample_stored(dir.path());
        let pause = storage.after_swap.arm();
        std::thread::scope(|scope| {
            let compaction = scope.spawn(|| storage.compact(0, &hot));
            // Swapped: the period is compacted.
            pause.wait();
            let (_, created) = storage
                .get_or_create(0, DAY_START, 0, Creation::OnDemand)
                .unwrap();
            assert!(created, "made hot again");
            (storage.writable_file(0, DAY_START, 0).unwrap()).reserve_and_add(
                5,
                3,
                1.5,
                writer.publisher(),
            );
            pause.wait();
            assert!(compaction.join().unwrap().unwrap(), "compacted");
        });
    }
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        false,
    )
    .unwrap();
    let file = storage
        .file(0, DAY_START, 0)
        .expect("the hot file made for the late write is on disk");
    assert_eq!(
        file.load(5, 3),
        Bucket {
            count: 2,
            total: 4.0,
            min: 1.5,
            max: 2.5,
            last: None
        }
    );
}

/// A write that needs a file for a period right after an expiry took the period out of the
/// map (a batch whose window was taken before the maintenance pass's clock reading) makes a
/// new file of the same name; the expiry's unlink must not take it: while the map holds a
/// hot file for a period, that file is on disk.
#[test]
fn a_file_made_right_after_an_expiry_forgot_its_period_stays_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    let period = tiers[0].period.secs() as i64;
    let (storage, writer, hot) = one_sample_stored(dir.path());
    let path = hot.path().to_path_buf();
    let pause = storage.after_forget.arm();
    let storage = &storage;
    std::thread::scope(|scope| {
        let expiry = scope.spawn(|| storage.drop_before(0, DAY_START + period));
        // The period has left the map; its file is not unlinked yet.
        pause.wait();
        let (done, finished) = std::sync::mpsc::channel();
        let creation = scope.spawn(move || {
            let made = storage.get_or_create(0, DAY_START, 0, Creation::OnDemand);
            let _ = done.send(());
            made
        });
        // A creation nothing holds back is made before the expiry goes on.
        let _ = finished.recv_timeout(std::time::Duration::from_millis(500));
        pause.wait();
        expiry.join().unwrap().unwrap();
        let (_, created) = creation.join().unwrap().unwrap();
        assert!(created, "made anew");
    });
    (storage.writable_file(0, DAY_START, 0).unwrap()).reserve_and_add(
        5,
        3,
        1.5,
        writer.publisher(),
    );
    assert!(
        path.exists(),
        "the storage holds a hot file for the period, but the expiry unlinked it: what was \
         stored into it is gone at the next open"
    );
}

/// A period file takes disk only for the pages written (on a disk filesystem; tmpfs files
/// are written whole), and a writable open learns which pages hold data, so they need no
/// reservation again and are prefaulted after a restart.
#[test]
fn a_period_file_is_sparse_and_its_written_pages_are_known_again_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    let (path, sparse) = {
        let (storage, _writer, hot) = one_sample_stored(dir.path());
        storage.flush().unwrap();
        let file = std::fs::File::open(hot.path()).unwrap();
        (hot.path().to_path_buf(), !super::disk::is_tmpfs(&file))
    };
    let allocated = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&path).unwrap().blocks() * 512
    };
    let length = std::fs::metadata(&path).unwrap().len();
    if sparse {
        assert!(
            allocated <= 3 * super::format::PAGE_LEN as u64,
            "{allocated} bytes allocated of {length}: the header, one page of records and \
             one of the latest area"
        );
    }
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let file = storage.file(0, DAY_START, 0).unwrap();
    let written = file.meta().page_of(super::format::cell_index(5, 3, SLOTS));
    assert!(
        file.is_reserved(written),
        "the written page is known at open"
    );
    let (latest, _) = file.meta().latest_pages_of(written, 1).unwrap();
    assert!(
        file.is_reserved(latest),
        "the written page of the latest area is known at open"
    );
    let other = file.meta().pages() - 1;
    assert_eq!(file.is_reserved(other), !sparse, "a hole is not");
}

/// A writable storage of the default tiers, 256 slots a chunk, with the first tier's file of
/// chunk 0 for the day starting at `DAY_START` created.
fn a_file_of_256_slots(dir: &std::path::Path) -> (Storage, Arc<PeriodFile>) {
    let storage = Storage::open(
        dir,
        &crate::storage::tests::config_of(&TiersConfig::default().tiers, 256),
        true,
    )
    .unwrap();
    let (hot, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::Ahead)
        .unwrap();
    (storage, hot)
}

/// A reservation of pages of which some are reserved already reserves the others: the check
/// that skips a reservation reads the reserved pages a word of 64 at a time, so runs that
/// start, end or cross inside a word are the cases to get right.
#[test]
fn a_reservation_across_reserved_and_fresh_pages_reserves_the_fresh_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (_storage, hot) = a_file_of_256_slots(dir.path());
    let sparse = !super::disk::is_tmpfs(&std::fs::File::open(hot.path()).unwrap());
    let pages = hot.meta().pages();
    assert!(pages > 300, "{pages} pages: enough for several words");
    let reserved = |range: std::ops::Range<usize>| range.clone().all(|p| hot.is_reserved(p));
    hot.reserve(10, 50, LatestPages::Leave).unwrap();
    hot.reserve(70, 60, LatestPages::Leave).unwrap();
    hot.reserve(201, 2, LatestPages::Leave).unwrap();
    assert!(reserved(10..60) && reserved(70..130) && reserved(201..203));
    if sparse {
        assert!(!hot.is_reserved(9) && !hot.is_reserved(60) && !hot.is_reserved(200));
    }
    // Its first word wholly reserved, its second not.
    hot.reserve(100, 40, LatestPages::Leave).unwrap();
    assert!(reserved(100..140));
    hot.reserve(5, 130, LatestPages::Leave).unwrap();
    hot.reserve(200, 4, LatestPages::Leave).unwrap();
    hot.reserve(256, 64, LatestPages::Leave).unwrap();
    assert!(reserved(5..140) && reserved(200..204) && reserved(256..320));
    if sparse {
        assert!(!hot.is_reserved(4) && !hot.is_reserved(140) && !hot.is_reserved(204));
        assert!(!hot.is_reserved(255) && !hot.is_reserved(320));
    }
}

/// A batch reserves only the runs of pages not reserved yet, and learns whether it reserved
/// one: a block written for the first time is where the blocks before it are written back
/// early (an import of history or of new series). That writeback leaves the stores in place.
#[test]
fn a_slots_reservation_says_whether_it_reserved_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let (storage, hot) = a_file_of_256_slots(dir.path());
    let writer = storage.writer_slot().unwrap().expect("writable");
    let file = storage.writable_file(0, DAY_START, 0).unwrap();
    assert!(
        !file.slots_reserved(3, 0, 8, LatestPages::Reserve),
        "a new file's page"
    );
    assert!(
        file.reserve_slots(3, 0, 8, LatestPages::Reserve).unwrap(),
        "reserved now"
    );
    assert!(file.slots_reserved(3, 0, 8, LatestPages::Reserve));
    assert!(
        !file.reserve_slots(3, 0, 8, LatestPages::Reserve).unwrap(),
        "reserved already"
    );
    assert!(
        !file.slots_reserved(3, 8, 8, LatestPages::Reserve),
        "the next 8 slots' page"
    );
    assert!(
        !file.slots_reserved(20, 0, 8, LatestPages::Reserve),
        "the next block's page"
    );
    file.add(3, 5, 2.5, None, writer.publisher());
    assert!(file.reserve_slots(20, 0, 8, LatestPages::Reserve).unwrap());
    hot.start_writeback_before(20).unwrap();
    hot.start_writeback_before(3).unwrap();
    assert_eq!(hot.load(3, 5).count, 1);
    assert_eq!(hot.load(3, 5).total, 2.5);
}

/// A hot file an older build wrote (format version 1: its cells 256 bytes by its resolution,
/// which its header does not say; its histogram area not yet there) is read and written with
/// those cells. Compacted and made hot again, the period keeps a histogram that only a
/// 256-byte cell holds at full scale: a period made hot again takes version 1's cells.
#[test]
fn a_version_1_file_keeps_its_cells_and_a_period_made_hot_again_takes_wide_ones() {
    use crate::histogram::{Histogram, DEFAULT_SCALE};
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    let path = {
        let storage = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            true,
        )
        .unwrap();
        let (hot, _) = storage
            .get_or_create(0, DAY_START, 0, Creation::Ahead)
            .unwrap();
        assert_eq!(hot.meta().histogram_cell_len(), 192, "a new file's cells");
        let old = hot
            .meta()
            .with_cells(format::CellLayout::version_1(hot.meta().resolution));
        let mut bytes = std::fs::read(hot.path()).unwrap();
        bytes.truncate(old.file_len() as usize);
        bytes[..format::HEADER_LEN].copy_from_slice(&old.encode());
        std::fs::write(hot.path(), &bytes).unwrap();
        hot.path().to_path_buf()
    };
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let writer = storage.writer_slot().unwrap().expect("writable");
    let hot = storage.file(0, DAY_START, 0).expect("the version 1 file");
    assert_eq!(hot.meta().histogram_cell_len(), 256);
    // 200 values a bucket apart or two at scale 6: about 206 bytes encoded, more than a
    // new file's 192-byte cell holds.
    let wide: Vec<f64> = (0..200).map(|i| 1.02f64.powi(i)).collect();
    let file = storage.writable_file(0, DAY_START, 0).unwrap();
    for (bucket, values) in [(5, &wide[..]), (6, &[2.5][..])] {
        file.reserve_slots(bucket, 3, 1, LatestPages::Reserve)
            .unwrap();
        file.reserve_histograms(bucket, 3, 1).unwrap();
        assert!(file.add_distribution(bucket, 3, values, &writer));
    }
    file.mark_dirty();
    let before = [hot.load_closed(5, 3), hot.load_closed(6, 3)];
    let scale = |loaded: &(Bucket, Option<Histogram>)| loaded.1.as_ref().map(Histogram::scale);
    assert_eq!(before[0].0.count, 200);
    assert_eq!(
        scale(&before[0]),
        Some(DEFAULT_SCALE),
        "kept whole in 256 bytes"
    );
    let mut encoded = Vec::new();
    before[0].1.as_ref().unwrap().encode(&mut encoded);
    assert!(encoded.len() + 2 > 192, "{} bytes", encoded.len());

    assert!(storage.compact(0, &hot).unwrap(), "compacted");
    assert!(!path.exists());
    let (again, _) = storage
        .get_or_create(0, DAY_START, 0, Creation::OnDemand)
        .unwrap();
    assert_eq!(again.meta().histogram_cell_len(), 256);
    assert_eq!([again.load_closed(5, 3), again.load_closed(6, 3)], before);
    let header = std::fs::read(again.path()).unwrap();
    let meta = format::PeriodMeta::decode(&header, again.path()).unwrap();
    assert_eq!(meta.histogram_cell_len(), 256, "the header says so");
}

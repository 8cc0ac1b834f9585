use super::*;
use crate::bucket::Bucket;
use crate::storage::format::PeriodMeta;
use crate::time::Span;

fn meta(chunk: u32) -> PeriodMeta {
    PeriodMeta {
        tier: "1m".into(),
        resolution: Span::from_secs(60),
        period: Span::from_secs(3_600),
        period_start: 0,
        slots: 16,
        chunk,
        histogram_cells: crate::storage::format::CellLayout::new_file(Span::from_secs(60)),
    }
}

fn one_bucket(dir: &std::path::Path, chunk: u32, value: f64) -> CompactFile {
    CompactFile::create(dir, &meta(chunk), &|bucket, slot| {
        if bucket == 0 && slot == 0 {
            (
                Bucket {
                    count: 1,
                    total: value,
                    min: value,
                    max: value,
                    last: None,
                },
                None,
            )
        } else {
            (Bucket::EMPTY, None)
        }
    })
    .expect("create")
}

fn first_total(readers: &Readers, file: &CompactFile) -> f64 {
    let mut out = [Bucket::EMPTY];
    readers
        .get(file)
        .expect("reader")
        .read_slot(0, 0..1, &mut out)
        .expect("read");
    out[0].total
}

#[test]
fn a_kept_reader_is_reused_and_a_file_written_again_under_its_name_is_read_anew() {
    let dir = tempfile::tempdir().unwrap();
    let readers = Readers::new();
    let first = one_bucket(dir.path(), 0, 1.0);
    assert_eq!(first_total(&readers, &first), 1.0);
    let kept = readers.get(&first).unwrap();
    assert!(Arc::ptr_eq(&kept, &readers.get(&first).unwrap()), "reused");
    // The same name written again (a period compacted again after a late write): a new file,
    // a new identity, so a new reader.
    let second = one_bucket(dir.path(), 0, 2.0);
    assert_eq!(first_total(&readers, &second), 2.0);
    readers.forget(&first);
    assert!(
        !Arc::ptr_eq(&kept, &readers.get(&first).unwrap()),
        "forgotten"
    );
}

#[test]
fn only_the_most_recently_read_files_stay_open() {
    let dir = tempfile::tempdir().unwrap();
    let readers = Readers::new();
    let files: Vec<CompactFile> = (0..OPEN_READERS as u32 + 8)
        .map(|chunk| one_bucket(dir.path(), chunk, f64::from(chunk)))
        .collect();
    for file in &files {
        assert_eq!(first_total(&readers, file), f64::from(file.meta().chunk));
    }
    assert_eq!(readers.lock().len(), OPEN_READERS);
    assert!(
        readers.lock().peek(&files[0].id()).is_none(),
        "the oldest was let go"
    );
}

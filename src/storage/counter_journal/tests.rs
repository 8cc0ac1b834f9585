use super::*;
use crate::bucket::Bucket;
use crate::storage::cells::CellAt;

fn undo(cells: u32) -> Vec<Undo> {
    (0..cells)
        .map(|i| Undo::Cell {
            at: CellAt {
                tier: 3,
                period_start: -86_400,
                chunk: i,
                bucket: 1439,
                slot: 255,
            },
            adds: 6,
            before: Bucket {
                count: 2,
                total: 1.5,
                min: -0.5,
                max: 2.0,
                last: None,
            },
        })
        .chain([Undo::State {
            id: 7,
            before: [4, 1_700_000_000, 12.5f64.to_bits()],
        }])
        .collect()
}

/// Opens `dir`'s journal as a writable open does: reads what is left, ends it (the roll-back
/// being the counter table's), then opens for writing. Returns the journal and what was
/// left to roll back.
fn open(dir: &Path) -> Result<(CounterJournal, Vec<Unfinished>)> {
    let mut left = left(dir)?;
    let handed = left.unfinished.take().into_iter().collect();
    left.end()?;
    Ok((CounterJournal::open(dir)?, handed))
}

#[test]
fn a_batch_left_recorded_is_rolled_back_once_and_an_ended_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (mut journal, handed) = open(dir.path()).unwrap();
    assert!(handed.is_empty());
    let undo = undo(5000);
    journal.begin(&undo, 42).unwrap();
    // An unfinished batch is never overwritten.
    assert!(matches!(journal.begin(&[], 42), Err(Error::Poisoned(_))));
    drop(journal);
    let (mut journal, handed) = open(dir.path()).unwrap();
    assert_eq!(handed, vec![(42, undo.clone())]);
    // Rolled back once: the open emptied the journal.
    assert!(open(dir.path()).unwrap().1.is_empty());
    journal.begin(&undo[..3], 43).unwrap();
    journal.end().unwrap();
    journal.begin(&undo[4..], 44).unwrap();
    journal.end().unwrap();
    drop(journal);
    assert!(open(dir.path()).unwrap().1.is_empty());
}

#[test]
fn a_version_1_file_left_active_is_rolled_back_then_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CounterJournal::FILE_NAME);
    let undo = undo(3);
    let write_v1 = |active: u64| {
        let mut bytes = FRAME_V1.header();
        let control = [active, undo.len() as u64, 42, 0, 0, 0, 0, 0];
        let entries = std::iter::once(control).chain(undo.iter().map(Undo::encode));
        bytes.extend(entries.flatten().flat_map(u64::to_le_bytes));
        bytes.resize(HEADER_SIZE as usize + 4096 * ENTRY_SIZE, 0);
        std::fs::write(&path, &bytes).unwrap();
    };
    write_v1(1);
    let (_, handed) = open(dir.path()).unwrap();
    assert_eq!(handed, vec![(42, undo.clone())]);
    assert_eq!(std::fs::read(&path).unwrap()[8..12], 2u32.to_le_bytes());
    assert!(open(dir.path()).unwrap().1.is_empty());
    write_v1(0);
    let (_, handed) = open(dir.path()).unwrap();
    assert!(handed.is_empty());
    assert_eq!(std::fs::read(&path).unwrap()[8..12], 2u32.to_le_bytes());
    // A damaged version 1 file is refused by name, never replaced.
    write_v1(5);
    let err = open(dir.path()).err().unwrap().to_string();
    assert!(
        err.contains("counters.journal") && err.contains("control word 5"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap()[8..12], 1u32.to_le_bytes());
}

#[test]
fn foreign_files_and_damaged_records_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CounterJournal::FILE_NAME);
    std::fs::write(
        &path,
        b"not a journal at all, but long enough to read a header",
    )
    .unwrap();
    let err = open(dir.path()).err().unwrap().to_string();
    assert!(err.contains("counters.journal"), "{err}");
    std::fs::remove_file(&path).unwrap();
    let (mut journal, _) = open(dir.path()).unwrap();
    let mut bad = Journal::open(path.clone(), &FRAME).unwrap();
    journal.begin(&[], 7).unwrap();
    bad.clear().unwrap();
    bad.append_with(
        Kind::CounterBatch,
        1,
        7,
        &[
            Undo::State {
                id: 1,
                before: [0; 3],
            }
            .encode(),
            [99; WORDS],
        ],
        Durability::Cached,
    )
    .unwrap();
    let err = open(dir.path()).err().unwrap().to_string();
    assert!(
        err.contains("counters.journal") && err.contains("entry 2"),
        "{err}"
    );
}

//! The writer state file: publications survive a reopen, a reset forgets them, the file
//! grows for more writers, and a damaged or foreign file is replaced, not trusted.

use super::*;

#[test]
fn publications_outlive_the_process_until_reset() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = WriterStateFile::open(dir.path()).unwrap();
    assert_eq!(state.fingerprint(), None, "a new file has no layout");
    state.reset(42).unwrap();
    let a = state.next_slot().unwrap();
    let b = state.next_slot().unwrap();
    let name = Publication::new(Some(2), 1_763_683_200, 7, 123_456);
    a.hold_image(name, &[7, 8, 9]);
    a.publisher().publish(name);
    b.publisher().publish(Publication::new(Some(0), 0, 0, 0));
    b.clear();
    assert!(a.names(name) && !b.names(name));
    drop((a, b, state));

    let mut state = WriterStateFile::open(dir.path()).unwrap();
    assert_eq!(state.fingerprint(), Some(42));
    assert_eq!(state.publications(), vec![(name, Some(vec![7, 8, 9]))]);
    assert_eq!(name.decode(), Some((2, 1_763_683_200, 7, 123_456)));
    state.reset(43).unwrap();
    assert!(state.publications().is_empty());
    assert_eq!(state.fingerprint(), Some(43));
}

#[test]
fn an_image_of_another_cell_is_not_offered() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = WriterStateFile::open(dir.path()).unwrap();
    state.reset(1).unwrap();
    let a = state.next_slot().unwrap();
    a.hold_image(Publication::new(Some(0), 0, 0, 5), &[1, 2]);
    let later = Publication::new(Some(0), 0, 0, 6);
    a.publisher().publish(later);
    drop((a, state));
    let state = WriterStateFile::open(dir.path()).unwrap();
    assert_eq!(state.publications(), vec![(later, None)]);
}

#[test]
fn negative_period_starts_and_unknown_tiers_round_trip() {
    let name = Publication::new(Some(0), -86_400, u32::MAX, u32::MAX);
    assert_eq!(name.decode(), Some((0, -86_400, u32::MAX, u32::MAX)));
    assert_ne!(name.file, 0, "a real cell is never 'no cell'");
    assert_eq!(Publication::new(None, 0, 1, 2).decode(), None);
}

#[test]
fn the_file_grows_for_more_writer_threads() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = WriterStateFile::open(dir.path()).unwrap();
    state.reset(1).unwrap();
    let slots: Vec<WriterSlot> = (0..GROWTH + 3)
        .map(|_| state.next_slot().unwrap())
        .collect();
    for (i, slot) in slots.iter().enumerate() {
        slot.publisher()
            .publish(Publication::new(Some(0), 0, 0, i as u32));
    }
    assert_eq!(state.publications().len(), GROWTH + 3);
    let len = std::fs::metadata(state.path()).unwrap().len();
    assert_eq!(len, WriterStateFile::len_for(2 * GROWTH));
}

#[test]
fn a_damaged_or_foreign_file_is_replaced_and_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(WriterStateFile::FILE_NAME);
    std::fs::write(&path, b"not a writer state file at all").unwrap();
    let mut state = WriterStateFile::open(dir.path()).unwrap();
    assert_eq!(state.fingerprint(), None);
    assert!(state.publications().is_empty());
    state.reset(9).unwrap();
    drop(state);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] ^= 1; // the version, so the CRC no longer matches
    std::fs::write(&path, &bytes).unwrap();
    let state = WriterStateFile::open(dir.path()).unwrap();
    assert_eq!(state.fingerprint(), None, "{}", path.display());
}

use super::*;

const FRAME: Frame = Frame {
    magic: b"TIERDBJT",
    version: 1,
    record_size: ENTRY_SIZE as u32,
    what: "test journal",
};

fn entries(n: u64) -> Vec<Entry> {
    (0..n)
        .map(|i| [i + 1, 2, 3, 4, 5, 6, 7, u64::MAX - i])
        .collect()
}

fn open(dir: &Path) -> Journal {
    Journal::open(dir.join("test.journal"), &FRAME).unwrap()
}

#[test]
fn records_of_every_kind_read_back_in_order_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = open(dir.path());
    assert!(journal.is_empty());
    journal
        .append(Kind::ApplyGroup, 7, 42, &entries(3))
        .unwrap();
    journal.append(Kind::Delete, 9, 42, &entries(0)).unwrap();
    journal.append(Kind::Retype, 10, 42, &entries(1)).unwrap();
    drop(journal);
    let mut journal = open(dir.path());
    let chain = journal.read().unwrap();
    let got: Vec<_> = (chain.iter())
        .map(|r| (r.kind, r.seq, r.layout, r.entries.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (Kind::ApplyGroup, 7, 42, entries(3)),
            (Kind::Delete, 9, 42, entries(0)),
            (Kind::Retype, 10, 42, entries(1)),
        ]
    );
    assert_eq!(journal.last_seq(), 10);
    // Appends go after the chain a reopen found.
    journal.append(Kind::Delete, 11, 42, &entries(2)).unwrap();
    assert_eq!(open(dir.path()).read().unwrap().len(), 4);
    journal.clear().unwrap();
    assert!(journal.is_empty());
    assert_eq!(open(dir.path()).read().unwrap(), vec![]);
}

/// Kind 0's CRC is the plain CRC-32 of the control's first 24 bytes and the entries: the
/// format `apply.undo` had before records had kinds.
#[test]
fn kind_zero_is_the_format_before_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = open(dir.path());
    journal.append(Kind::ApplyGroup, 5, 9, &entries(2)).unwrap();
    let bytes = std::fs::read(journal.path()).unwrap();
    let record = &bytes[HEADER_SIZE as usize..HEADER_SIZE as usize + 3 * ENTRY_SIZE];
    let mut plain = record[..24].to_vec();
    plain.extend_from_slice(&record[ENTRY_SIZE..]);
    assert_eq!(record[24..28], crc32fast::hash(&plain).to_le_bytes());
    assert!(record[28..ENTRY_SIZE].iter().all(|&b| b == 0));
}

#[test]
fn a_torn_record_ends_the_chain_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = open(dir.path());
    journal.append(Kind::Delete, 1, 0, &entries(1)).unwrap();
    journal.append(Kind::Delete, 2, 0, &entries(2)).unwrap();
    let path = journal.path().to_path_buf();
    drop(journal);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // A byte of the second record's last entry, as a write cut short leaves it.
    let at = HEADER_SIZE + (2 + 2 + 1) as u64 * ENTRY_SIZE as u64 - 1;
    file.write_all_at(&[0x5a], at).unwrap();
    let chain = open(dir.path()).read().unwrap();
    assert_eq!(chain.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1]);
    // The kind is under the CRC too.
    file.write_all_at(&[2], HEADER_SIZE + 28).unwrap();
    assert_eq!(open(dir.path()).read().unwrap(), vec![]);
}

#[test]
fn a_sequence_not_above_its_predecessor_ends_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = open(dir.path());
    journal.append(Kind::Delete, 4, 0, &entries(1)).unwrap();
    let end = journal.end;
    journal.append(Kind::Delete, 5, 0, &entries(1)).unwrap();
    // Write a whole record of sequence 3 over the second one.
    journal.end = end;
    journal.last = (0, 0);
    journal.append(Kind::Delete, 3, 0, &entries(1)).unwrap();
    let chain = open(dir.path()).read().unwrap();
    assert_eq!(chain.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![4]);
}

#[test]
fn a_whole_record_of_an_unknown_kind_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = open(dir.path());
    journal.append(Kind::Delete, 1, 0, &entries(1)).unwrap();
    let path = journal.path().to_path_buf();
    drop(journal);
    let mut bytes = std::fs::read(&path).unwrap();
    let control = HEADER_SIZE as usize;
    let mut covered = bytes[control..control + 24].to_vec();
    covered.extend_from_slice(&bytes[control + ENTRY_SIZE..control + 2 * ENTRY_SIZE]);
    let crc = checksum(77, &covered[..24], &covered[24..]);
    bytes[control + 24..control + 28].copy_from_slice(&crc.to_le_bytes());
    bytes[control + 28..control + 32].copy_from_slice(&77u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = Journal::open(path, &FRAME).err().unwrap().to_string();
    assert!(
        err.contains("test.journal") && err.contains("kind 77"),
        "{err}"
    );
}

use super::*;
use crate::storage::cells::CellAt;

fn converted() -> Vec<Converted> {
    let at = |tier, bucket| CellAt {
        tier,
        period_start: 1_763_683_200,
        chunk: 3,
        bucket,
        slot: 17,
    };
    let bucket = Bucket {
        count: 2,
        total: -0.0,
        min: f64::NEG_INFINITY,
        max: 1e308,
        last: Some(Last::new(0.1, 1_763_683_290)),
    };
    vec![
        Converted {
            id: SeriesId(785),
            cells: vec![(at(0, 4), bucket), (at(2, 0), Bucket::EMPTY)],
            latest: Some((1_763_683_290, 0.1)),
        },
        Converted {
            id: SeriesId(7),
            cells: Vec::new(),
            latest: None,
        },
    ]
}

/// What an intent holds, comparable (floats by their bits).
fn image(intent: &Intent) -> String {
    match intent {
        Intent::Delete(ids) => format!("delete {ids:?}"),
        Intent::Retype { kind, group } => {
            let series: Vec<String> = (group.iter())
                .map(|c| {
                    let bits = |b: &Bucket| {
                        let last = b.last.map(|l| (l.ts(), l.value.to_bits()));
                        let fields = [b.total, b.min, b.max].map(f64::to_bits);
                        (b.count, fields, last)
                    };
                    let cells: Vec<_> = c.cells.iter().map(|(at, b)| (at, bits(b))).collect();
                    let latest = c.latest.map(|(t, v)| (t, v.to_bits()));
                    format!("{} {latest:?} {cells:?}", c.id.0)
                })
                .collect();
            format!("retype {} {series:?}", kind.as_str())
        }
    }
}

fn read_back(dir: &Path) -> Vec<Intent> {
    let journal = Journal::open(dir.join(FILE_NAME), &FRAME).unwrap();
    (journal.read().unwrap().iter())
        .map(|record| decode(journal.path(), record).unwrap())
        .collect()
}

#[test]
fn deletions_and_retypes_round_trip_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<SeriesId> = (0..20).chain([u32::MAX]).map(SeriesId).collect();
    let delete = begin_delete(dir.path(), 42, &ids).unwrap();
    let retype = begin_retype(dir.path(), 42, SeriesKind::Counter, &converted()).unwrap();
    drop(delete);
    let got: Vec<String> = read_back(dir.path()).iter().map(image).collect();
    let want = [
        Intent::Delete(ids),
        Intent::Retype {
            kind: SeriesKind::Counter,
            group: converted(),
        },
    ];
    assert_eq!(got, want.iter().map(image).collect::<Vec<_>>());
    assert_eq!(pending(dir.path()).unwrap(), vec!["delete", "retype"]);
    retype.finish().unwrap();
    assert!(read_back(dir.path()).is_empty());
    assert_eq!(pending(dir.path()).unwrap(), Vec::<&str>::new());
}

#[test]
fn a_damaged_record_is_refused_by_name_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let series = [KIND_SERIES | 2 << 8, 7, 0, 0, 0, 0, 0, 0];
    let latest = [KIND_LATEST, 1, 2, 0, 0, 0, 0, 0];
    let cases: [(Kind, Vec<Entry>, &str); 5] = [
        (
            Kind::Delete,
            vec![[KIND_IDS, 0, 0, 0, 0, 0, 0, 0]],
            "not a deletion's ids",
        ),
        (
            Kind::Delete,
            vec![[KIND_IDS | 1 << 8, 1 << 40, 0, 0, 0, 0, 0, 0]],
            "past u32",
        ),
        (Kind::Retype, vec![latest], "after no cell"),
        (
            Kind::Retype,
            vec![series, [99, 0, 0, 0, 0, 0, 0, 0]],
            "entry 2",
        ),
        (Kind::ApplyGroup, vec![], "kind ApplyGroup"),
    ];
    for (kind, entries, says) in cases {
        let begun = begin(dir.path(), kind, 42, &entries).unwrap();
        let journal = Journal::open(dir.path().join(FILE_NAME), &FRAME).unwrap();
        let record = journal.read().unwrap().pop().unwrap();
        let err = decode(journal.path(), &record).unwrap_err().to_string();
        assert!(
            err.contains("engine.journal") && err.contains(says),
            "{err}"
        );
        begun.finish().unwrap();
    }
}

#[test]
fn an_older_builds_intent_files_read_as_the_journal_does() {
    let dir = tempfile::tempdir().unwrap();
    let retype = Intent::Retype {
        kind: SeriesKind::Gauge,
        group: converted(),
    };
    let delete = Intent::Delete(vec![SeriesId(3), SeriesId(9)]);
    legacy::write(dir.path(), 42, &retype).unwrap();
    legacy::write(dir.path(), 42, &delete).unwrap();
    let got: Vec<String> = (legacy::read(dir.path(), 42).unwrap().iter())
        .map(|(_, intent)| image(intent))
        .collect();
    assert_eq!(got, vec![image(&delete), image(&retype)]);
    // Written under another tiers layout: refused, naming the file.
    let err = legacy::read(dir.path(), 43).unwrap_err().to_string();
    assert!(
        err.contains("RETYPING") && err.contains("another tiers"),
        "{err}"
    );
    legacy::remove(dir.path()).unwrap();
    assert!(legacy::read(dir.path(), 42).unwrap().is_empty());
}

#[test]
fn a_cut_or_foreign_intent_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let retype = Intent::Retype {
        kind: SeriesKind::Counter,
        group: converted(),
    };
    legacy::write(dir.path(), 42, &retype).unwrap();
    let path = dir.path().join(legacy::RETYPING);
    let text = std::fs::read_to_string(&path).unwrap();
    let cut = &text[..text.len() - "end\n".len()];
    for bad in [cut, "hello\n", &text.replace("cell 0", "cell x")] {
        std::fs::write(&path, bad).unwrap();
        let err = legacy::read(dir.path(), 42).unwrap_err().to_string();
        assert!(err.contains("RETYPING"), "{err}");
    }
    std::fs::remove_file(&path).unwrap();
    let path = dir.path().join(legacy::DELETING);
    for bad in ["tierdb delete intent v1\n12\nx\n", "hello\n3\n"] {
        std::fs::write(&path, bad).unwrap();
        let err = legacy::read(dir.path(), 42).unwrap_err().to_string();
        assert!(err.contains("DELETING"), "{err}");
    }
}

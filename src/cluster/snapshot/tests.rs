use std::path::Path;

use super::*;
use crate::storage::format;

/// A directory shaped like an engine's: files at the top and in nested directories, the
/// lock file among them.
fn engine_like(dir: &Path) {
    std::fs::create_dir_all(dir.join("tiers/1m")).unwrap();
    std::fs::write(dir.join("apply.state"), b"state").unwrap();
    std::fs::write(dir.join("series.log"), vec![7u8; 200_000]).unwrap();
    std::fs::write(dir.join("LOCK"), b"1234").unwrap();
    std::fs::write(dir.join("OPEN"), b"").unwrap();
    std::fs::write(dir.join("tiers/1m/1795392000-c0.tdc"), b"compacted").unwrap();
    std::fs::write(dir.join("tiers/1m/1795392000-0.tdb"), vec![1u8; 70_000]).unwrap();
}

fn snapshot_of(dir: &Path, file: &Path) -> SnapshotInfo {
    let mut out = std::io::BufWriter::new(File::create(file).unwrap());
    write(&StillFiles { dir, applied: 4242 }, 3, &mut out, file).unwrap()
}

/// Every file below `dir`, with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let files = StillFiles { dir, applied: 0 }.files().unwrap();
    files
        .into_iter()
        .map(|f| {
            (
                relative_text(&f.relative).unwrap(),
                std::fs::read(dir.join(&f.relative)).unwrap(),
            )
        })
        .collect()
}

/// Nor a file being created (`*.tmp`): it may be renamed before it is read, and an open
/// removes it anyway.
#[test]
fn a_snapshot_carries_every_file_but_the_lock_bit_for_bit() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    engine_like(&source);
    std::fs::write(source.join("tiers/1m/1795413600-0.tdb.tmp"), b"half").unwrap();
    let file = root.path().join("snap");
    let written = snapshot_of(&source, &file);
    assert_eq!(written.files, 5);
    assert_eq!(written.bytes, 5 + 200_000 + 9 + 70_000);
    let dest = root.path().join("dest");
    let read_back = read(&file, 3, &dest).unwrap();
    assert_eq!(read_back, written);
    assert_eq!(read_back.applied, 4242);
    let mut expected = contents(&source);
    expected.retain(|(path, _)| path != "LOCK" && !path.ends_with(".tmp"));
    assert_eq!(contents(&dest), expected);
    assert!(!dest.join("LOCK").exists());
}

#[test]
fn a_snapshot_of_another_partition_or_a_foreign_file_is_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    engine_like(&source);
    let file = root.path().join("snap");
    snapshot_of(&source, &file);
    let err = read(&file, 4, &root.path().join("dest4")).unwrap_err();
    assert!(
        err.to_string().contains("partition 3, not 4") && err.to_string().contains("snap"),
        "{err}"
    );
    let foreign = root.path().join("foreign");
    std::fs::write(&foreign, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let err = read(&foreign, 3, &root.path().join("dest-f")).unwrap_err();
    assert!(
        matches!(err, Error::CorruptFile { ref path, .. } if path == &foreign),
        "{err}"
    );
}

#[test]
fn every_cut_and_every_bit_flip_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    std::fs::create_dir_all(source.join("tiers")).unwrap();
    std::fs::write(source.join("apply.state"), b"state bytes").unwrap();
    std::fs::write(source.join("tiers/a.tdb"), [9u8; 40]).unwrap();
    let file = root.path().join("snap");
    snapshot_of(&source, &file);
    let bytes = std::fs::read(&file).unwrap();
    let bad = root.path().join("bad");
    let mut attempt = 0;
    let mut refused = |content: &[u8], what: &str| {
        attempt += 1;
        std::fs::write(&bad, content).unwrap();
        let dest = root.path().join(format!("dest{attempt}"));
        match read(&bad, 3, &dest) {
            Err(Error::CorruptFile { path, .. }) => assert_eq!(path, bad, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    };
    for cut in 0..bytes.len() {
        refused(&bytes[..cut], &format!("cut at {cut}"));
    }
    let mut longer = bytes.clone();
    longer.push(0);
    refused(&longer, "a byte after the end");
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        refused(&flipped, &format!("bit {bit} flipped"));
    }
}

#[test]
fn paths_that_climb_out_or_name_the_lock_are_refused() {
    for path in [
        "../x",
        "a/../../x",
        "/etc/passwd",
        "a//b",
        ".",
        "a/./b",
        "sp ace",
        "LOCK",
    ] {
        let mut stream = header(0, 1).to_vec();
        let mut crc = crc32fast::Hasher::new();
        stream.push(FILE_TAG);
        for part in [
            &(path.len() as u16).to_le_bytes()[..],
            path.as_bytes(),
            &1u64.to_le_bytes(),
            b"x",
        ] {
            stream.extend_from_slice(part);
            crc.update(part);
        }
        stream.extend_from_slice(&crc.finalize().to_le_bytes());
        stream.push(END_TAG);
        stream.extend_from_slice(&1u32.to_le_bytes());
        stream.extend_from_slice(&1u64.to_le_bytes());
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("snap");
        std::fs::write(&file, &stream).unwrap();
        let err = read(&file, 0, &root.path().join("dest")).unwrap_err();
        assert!(
            err.to_string().contains("a path a snapshot may not carry"),
            "{path}: {err}"
        );
        assert!(!root.path().join("x").exists());
    }
}

/// A copy is not put in place of a directory an engine still has open (a store that a read
/// held past its stop): that engine would go on compacting, creating and unlinking files by
/// name in the copy. Nothing is changed, nothing is left beside it, and once the engine is
/// closed the copy goes in.
#[test]
fn a_copy_is_not_put_in_place_of_a_directory_an_engine_has_open() {
    use crate::engine::Engine;
    use crate::sample::Sample;
    let root = tempfile::tempdir().unwrap();
    let partitions = root.path().join("partitions");
    std::fs::create_dir_all(&partitions).unwrap();
    let dir = partitions.join("007");
    let engine = Engine::builder(&dir)
        .background_maintenance(false)
        .open()
        .unwrap();
    let id = engine.series("s0").unwrap();
    engine
        .record_batch(&[Sample::new(id, engine.now() - 60, 1.0)])
        .unwrap();
    engine.flush().unwrap();
    let file = root.path().join("007.snapshot");
    snapshot_of(&dir, &file);
    let before = contents(&dir);

    let refused = place(&file, 3, &dir).unwrap_err();
    assert!(matches!(refused, Error::Locked { .. }), "{refused}");
    assert_eq!(contents(&dir), before, "the open directory is untouched");
    assert!(!partitions.join("007.incoming").exists());

    engine.close().unwrap();
    assert_eq!(place(&file, 3, &dir).unwrap().applied, 4242);
    // The copy in place: every file as it was, a period file up to its records' end (its
    // histogram area, all zeros here, is not carried).
    let placed = contents(&dir);
    let names = |files: &[(String, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&placed), names(&before));
    for ((name, got), (_, was)) in placed.iter().zip(&before) {
        if name.ends_with(format::FILE_SUFFIX) {
            assert!(
                got.len() < was.len(),
                "{name}: its histogram area is left out"
            );
            assert_eq!(got[..], was[..got.len()], "{name}");
            assert!(was[got.len()..].iter().all(|&b| b == 0), "{name}");
        } else {
            assert_eq!(got, was, "{name}");
        }
    }
}

/// A period file whose histogram area holds a distribution's histograms is carried whole:
/// the copy holds every byte, and answers the same quantile.
#[test]
fn a_copy_carries_the_histograms_of_distribution_series() {
    use crate::counter::SeriesKind;
    use crate::engine::Engine;
    use crate::sample::Sample;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("partitions").join("003");
    let engine = Engine::builder(&dir)
        .background_maintenance(false)
        .open()
        .unwrap();
    let id = engine.series("req.time").unwrap();
    engine.declare_kind(id, SeriesKind::Distribution).unwrap();
    let now = engine.now();
    let samples: Vec<Sample> = (1..=50)
        .map(|i| Sample::new(id, now - 60, f64::from(i) * 1.7))
        .collect();
    engine.record_batch(&samples).unwrap();
    engine.flush().unwrap();
    let file = root.path().join("003.snapshot");
    snapshot_of(&dir, &file);
    let before = contents(&dir);
    let p99 = |engine: &Engine| {
        let id = engine.registry().get("req.time").expect("registered");
        let resolution = engine.config().tiers[0].resolution;
        let points = (engine.reader())
            .distribution(id, 0, now - 3600, now, resolution)
            .unwrap();
        let p99: Vec<Option<f64>> = points.iter().map(|p| p.quantile(0.99)).collect();
        assert!(p99.iter().flatten().count() == 1, "{p99:?}");
        p99
    };
    let want = p99(&engine);
    let engine_tiers = || crate::config::TiersConfig::default().tiers.len();
    engine.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    place(&file, 3, &dir).unwrap();
    let placed = contents(&dir);
    let names = |files: &[(String, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&placed), names(&before));
    // The period files the sample went into (one per tier) are carried whole; the others
    // (periods made ahead) up to their records, their histogram areas being all zeros.
    let mut whole = 0;
    for ((name, got), (_, was)) in placed.iter().zip(&before) {
        assert!(got[..] == was[..got.len()], "{name}: its bytes carried");
        assert!(
            was[got.len()..].iter().all(|&b| b == 0),
            "{name}: nothing left out"
        );
        if name.ends_with(format::FILE_SUFFIX) && got.len() == was.len() {
            whole += 1;
        }
    }
    assert_eq!(
        whole,
        engine_tiers(),
        "one period file per tier holds histograms"
    );
    let reopened = Engine::open(&dir).unwrap();
    assert_eq!(p99(&reopened), want);
}

/// A rebuild cut short by a crash: the directory renamed aside comes back when the copy had
/// not taken its place yet, and is removed when it had; downloads and copies being read go.
#[test]
fn a_rebuild_cut_short_leaves_a_whole_partition_directory() {
    let root = tempfile::tempdir().unwrap();
    let partitions = root.path();
    // Partition 1: stopped between the two renames.
    engine_like(&partitions.join("001.replaced"));
    engine_like(&partitions.join("001.incoming"));
    let old = contents(&partitions.join("001.replaced"));
    // Partition 2: stopped after the copy took its place, the old one half removed.
    engine_like(&partitions.join("002"));
    std::fs::create_dir_all(partitions.join("002.replaced/tiers")).unwrap();
    std::fs::write(partitions.join("003.snapshot"), b"cut short").unwrap();

    tidy_unfinished(partitions).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(partitions)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["001", "002"]);
    assert_eq!(contents(&partitions.join("001")), old);
}

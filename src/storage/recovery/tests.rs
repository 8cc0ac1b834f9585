//! The repair at an unclean open reads only what may need it: the published cells, and the
//! runs of slots past the registry's end.

use super::*;
use crate::bucket::Bucket;
use crate::config::TiersConfig;
use crate::storage::format::BUCKET_BLOCK;
use crate::storage::Creation;

const SLOTS: u32 = 16;
/// 2025-11-21T00:00:00Z, a day boundary.
const DAY_START: Timestamp = 1_763_683_200;
const LAYOUT: u64 = 7;

fn one(value: f64) -> Bucket {
    Bucket {
        count: 1,
        total: value,
        min: value,
        max: value,
        last: None,
    }
}

#[test]
fn only_slots_past_the_registry_are_read_and_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    {
        let storage = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            true,
        )
        .unwrap();
        assert_eq!(storage.recover(false, LAYOUT, &[0]).unwrap(), None);
        let writer = storage.writer_slot().unwrap().unwrap();
        for chunk in 0..3 {
            storage
                .get_or_create(0, DAY_START, chunk, Creation::Ahead)
                .unwrap();
            let file = storage.writable_file(0, DAY_START, chunk).unwrap();
            for slot in 0..SLOTS {
                file.reserve_and_add(100, slot, 1.0, writer.publisher());
            }
        }
        writer.clear();
    }
    // 20 series known: chunk 0 is whole, chunk 1 holds 4, chunk 2 none.
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let recovery = storage.recover(true, LAYOUT, &[20]).unwrap().unwrap();
    let cells = storage.file(0, DAY_START, 0).unwrap().meta().cells();
    let blocks = cells / (SLOTS * BUCKET_BLOCK) as usize;
    assert_eq!(recovery.full_scan, None);
    assert_eq!(recovery.files_scanned, 2, "chunks 1 and 2");
    assert_eq!(
        recovery.cells_scanned,
        blocks * BUCKET_BLOCK as usize * (12 + 16),
        "the runs of slots 4.. of chunk 1 and every slot of chunk 2"
    );
    assert_eq!(recovery.cleared, 12 + 16);
    assert_eq!(recovery.interrupted, 0);
    let file = |c| storage.file(0, DAY_START, c).unwrap();
    assert_eq!(file(0).load(100, 15), one(1.0));
    assert_eq!(file(1).load(100, 3), one(1.0));
    assert_eq!(file(1).load(100, 4), Bucket::EMPTY);
    assert_eq!(file(2).load(100, 0), Bucket::EMPTY);
}

#[test]
fn another_layout_or_no_state_reads_everything() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    {
        let storage = Storage::open(
            dir.path(),
            &crate::storage::tests::config_of(&tiers, SLOTS),
            true,
        )
        .unwrap();
        storage.recover(false, LAYOUT, &[0]).unwrap();
        storage
            .get_or_create(0, DAY_START, 0, Creation::Ahead)
            .unwrap();
    }
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let recovery = storage.recover(true, LAYOUT + 1, &[16]).unwrap().unwrap();
    assert!(recovery.full_scan.unwrap().contains("another tiers layout"));
    assert_eq!(recovery.files_scanned, 1);
    drop(storage);
    std::fs::remove_file(dir.path().join("writers.state")).unwrap();
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let recovery = storage.recover(true, LAYOUT + 1, &[16]).unwrap().unwrap();
    assert!(recovery.full_scan.unwrap().contains("missing"));
    // The open recorded the layout: the next unclean open trusts it.
    drop(storage);
    let storage = Storage::open(
        dir.path(),
        &crate::storage::tests::config_of(&tiers, SLOTS),
        true,
    )
    .unwrap();
    let recovery = storage.recover(true, LAYOUT + 1, &[16]).unwrap().unwrap();
    assert_eq!(recovery.full_scan, None);
    assert_eq!(recovery.files_scanned, 0, "chunk 0 holds only known series");
}

//! Read-only storage: files mapped read-only are readable and yield nothing to store into.

use super::*;
use crate::bucket::Bucket;
use crate::config::TiersConfig;

const SLOTS: u32 = 16;
/// 2025-11-21T00:00:00Z, a day boundary.
const DAY_START: Timestamp = 1_763_683_200;

#[test]
fn read_only_storage_yields_no_writable_file() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = TiersConfig::default().tiers;
    {
        let storage = Storage::open(dir.path(), &tiers, SLOTS, true).unwrap();
        storage
            .get_or_create(0, DAY_START, 0, Creation::Ahead)
            .unwrap();
        let file = storage.writable_file(0, DAY_START, 0).expect("writable");
        let writer = storage
            .writer_slot()
            .unwrap()
            .expect("a writable storage has writers");
        file.add(5, 3, 2.5, writer.publisher());
        assert_eq!(storage.writable_files().len(), 1);
    }
    let storage = Storage::open(dir.path(), &tiers, SLOTS, false).unwrap();
    let file = storage.file(0, DAY_START, 0).expect("the file is there");
    assert_eq!(
        file.load(5, 3),
        Bucket {
            count: 1,
            total: 2.5,
            min: 2.5,
            max: 2.5
        }
    );
    assert!(storage.writable_file(0, DAY_START, 0).is_none());
    assert!(storage.writable_files().is_empty());
    assert!(
        storage.writer_slot().unwrap().is_none(),
        "no writer threads in a read-only storage"
    );
}

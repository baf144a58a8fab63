//! Invariants of log replay on open:
//! - a torn tail (garbage after the last valid record, within the unsynced window) is cut
//!   off physically: new records land where it was, and they survive the next reopen;
//! - damage to a record with valid records far behind it (further than the unsynced window)
//!   is `Error::Corruption` naming the segment file and the offset, never silently dropped;
//! - so is damage to a synced record near the end of the log, with nothing valid behind it,
//!   when the sync mark says the log was synced past it (without the mark it would look like
//!   a torn tail and be cut).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use holt_core::{Db, Error, Options};

fn opts() -> Options {
    Options {
        wal_ring_bytes: 4096,
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        ..Options::default()
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .collect();
    v.sort();
    v
}

/// Offset just past the last non-zero byte of a file.
fn data_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i as u64 + 1)
}

#[test]
fn torn_tail_is_cut_and_later_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..50u32 {
        db.put(format!("k{i:03}").as_bytes(), format!("v{i}").as_bytes()).unwrap();
    }
    drop(db);
    let seg = segments(dir.path()).into_iter().find(|p| data_end(p) > 0).expect("a segment with records");
    let original_end = data_end(&seg);
    let end = (original_end + 7) & !7;
    // A torn record: a plausible header followed by garbage, as a cut write leaves it.
    let mut torn = Vec::new();
    torn.extend_from_slice(b"HWAL");
    torn.extend_from_slice(&200u32.to_le_bytes());
    torn.extend_from_slice(&[0xAB; 100]);
    OpenOptions::new().write(true).open(&seg).unwrap().write_all_at(&torn, end).unwrap();

    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..50u32 {
        assert_eq!(db.get(format!("k{i:03}").as_bytes()).unwrap().unwrap().value, format!("v{i}").as_bytes());
    }
    assert_eq!(data_end(&seg), original_end, "the torn bytes must be gone from the file");
    db.put(b"after", b"torn-tail").unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"after").unwrap().unwrap().value, b"torn-tail");
    assert_eq!(db.get(b"k049").unwrap().unwrap().value, b"v49");
}

#[test]
fn damage_before_synced_records_is_corruption_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    // Well over the unsynced window (2 × 4 KiB ring) of synced records.
    for i in 0..400u32 {
        db.put(format!("key-{i:05}").as_bytes(), &[b'x'; 64]).unwrap();
    }
    drop(db);
    let seg = segments(dir.path()).into_iter().find(|p| data_end(p) > 0).expect("a segment with records");
    // Flip a byte inside the first record (it starts at offset 32; 108 bytes).
    let f = OpenOptions::new().read(true).write(true).open(&seg).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 100).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], 100).unwrap();
    drop(f);
    match Db::open(dir.path(), opts()) {
        Err(Error::Corruption { location, reason }) => {
            assert_eq!(location.file.file_name(), seg.file_name(), "names the segment: {reason}");
            assert!(location.offset == 32, "offset {} ({reason})", location.offset);
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("expected Corruption, the database opened (data silently dropped)"),
    }
}

/// The last records of the log, synced (each put waited for its fdatasync), with no valid
/// record a window further on: without the sync mark, damage there looks like a torn tail.
#[test]
fn damage_to_synced_records_at_the_end_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..10u32 {
        db.put(format!("key-{i:05}").as_bytes(), &[b'x'; 64]).unwrap();
    }
    drop(db);
    let seg = segments(dir.path()).into_iter().find(|p| data_end(p) > 0).expect("a segment with records");
    // Flip a byte inside the last record (every record is 8-byte aligned; its last word
    // holds the checksum).
    let last = data_end(&seg) - 6;
    let f = OpenOptions::new().read(true).write(true).open(&seg).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, last).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], last).unwrap();
    drop(f);
    match Db::open(dir.path(), opts()) {
        Err(Error::Corruption { location, reason }) => {
            assert_eq!(location.file.file_name(), seg.file_name(), "names the segment: {reason}");
            assert!(location.offset > 32 && location.offset < last, "offset {} ({reason})", location.offset);
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(db) => panic!(
            "expected Corruption, the database opened (key-00009 is {:?}: the damaged record was cut)",
            db.get(b"key-00009").unwrap().map(|e| e.value.len())
        ),
    }
}

//! Invariant: what a handle wrote is what the next handle reads, whether the first handle
//! closed cleanly (checkpoint) or was dropped (log replay only), across several reopen
//! cycles with checkpoints in between; and only one handle may hold a directory at a time.

use holt_core::{Batch, Db, Durability, Error, ListItem, ListRequest, Options, WriteOptions};
use std::collections::BTreeMap;

fn opts() -> Options {
    Options {
        wal_ring_bytes: 1 << 16,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        ..Options::default()
    }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        let got = db.get(k).unwrap().unwrap_or_else(|| panic!("missing {:?}", String::from_utf8_lossy(k)));
        assert_eq!(&got.value, v);
    }
    let all = db.scan(b"", b"", usize::MAX).unwrap();
    let keys: Vec<&Vec<u8>> = all.iter().map(|(k, _)| k).collect();
    let expect: Vec<&Vec<u8>> = model.keys().collect();
    assert_eq!(keys, expect);
}

#[test]
fn close_drop_and_checkpoint_cycles_keep_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    for round in 0..6u32 {
        let db = Db::open(dir.path(), opts()).unwrap();
        check(&db, &model);
        for i in 0..300u32 {
            let key = format!("b/{}/k{:05}", i % 7, (i * 7919 + round * 31) % 1000).into_bytes();
            if i % 11 == 0 {
                db.delete(&key).unwrap();
                model.remove(&key);
            } else {
                let value = format!("v{round}-{i}").into_bytes();
                let d = if i % 2 == 0 { Durability::Sync } else { Durability::Async };
                db.put_with(&key, &value, Default::default(), WriteOptions { durability: Some(d) }).unwrap();
                model.insert(key, value);
            }
        }
        let mut batch = Batch::new();
        batch.put(format!("batch/{round}/a"), b"1".to_vec()).put(format!("batch/{round}/b"), b"2".to_vec());
        db.write_batch(&batch, WriteOptions::default()).unwrap();
        model.insert(format!("batch/{round}/a").into_bytes(), b"1".to_vec());
        model.insert(format!("batch/{round}/b").into_bytes(), b"2".to_vec());
        if round % 3 == 1 {
            db.checkpoint().unwrap();
        }
        check(&db, &model);
        match round % 2 {
            0 => db.close().unwrap(),
            _ => drop(db),
        }
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, &model);
    let page =
        db.list(&ListRequest { prefix: b"b/", delimiter: b"/", limit: 100, ..Default::default() }).unwrap();
    let names: Vec<&[u8]> = page.items.iter().map(ListItem::name).collect();
    let expect: Vec<Vec<u8>> = (0..7).map(|i| format!("b/{i}/").into_bytes()).collect();
    assert_eq!(names, expect.iter().map(|v| &v[..]).collect::<Vec<_>>());
    assert!(db.stats().checkpoints == 0);
    db.close().unwrap();
}

#[test]
fn second_handle_is_refused_until_the_first_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    match Db::open(dir.path(), opts()) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"k").unwrap().unwrap().value, b"v");
}

#[test]
fn versions_increase_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let v1 = db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap().version, v1);
    let v2 = db.put(b"a", b"2").unwrap();
    assert!(v2 > v1);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap().version, v2);
}

/// Both frame I/O paths (io_uring batches and pread/pwrite) write and read back the same
/// frames, with a memory budget small enough that frames are evicted and re-read.
#[test]
fn frames_round_trip_with_and_without_io_uring() {
    for use_io_uring in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { use_io_uring, memory_budget_bytes: 1 << 20, ..opts() };
        let db = Db::open(dir.path(), options.clone()).unwrap();
        for i in 0..3000u32 {
            db.put(format!("d{}/k{i:05}", i % 13).as_bytes(), &[b'a' + (i % 26) as u8; 300]).unwrap();
        }
        db.close().unwrap();
        let db = Db::open(dir.path(), options).unwrap();
        for i in (0..3000u32).step_by(7) {
            let e = db.get(format!("d{}/k{i:05}", i % 13).as_bytes()).unwrap().expect("present");
            assert_eq!(e.value, vec![b'a' + (i % 26) as u8; 300], "io_uring={use_io_uring}");
        }
        assert!(db.stats().frame_reads > 0, "frames were read back (io_uring={use_io_uring})");
    }
}

/// A record written under a larger log ring than the manifest names, then recovered under a
/// smaller one: the larger ring is recorded before the log takes a record, so the record is
/// replayed, not taken for a torn tail and cut.
#[test]
fn a_record_from_a_larger_ring_survives_a_reopen_with_a_smaller_one() {
    let dir = tempfile::tempdir().unwrap();
    let ring = |bytes: usize| Options { wal_ring_bytes: bytes, durability: Durability::Sync, ..opts() };
    // Created under a 16 KiB ring: its manifest bounds records to 32 KiB (two rings).
    let db = Db::open(dir.path(), ring(16 << 10)).unwrap();
    db.put(b"small", b"v").unwrap();
    db.close().unwrap();
    // Reopened under a 1 MiB ring: a 60 KiB value, acknowledged, then no checkpoint.
    let db = Db::open(dir.path(), ring(1 << 20)).unwrap();
    let big = vec![0x5a; 60 << 10];
    db.put(b"big", &big).unwrap();
    drop(db);
    // Recovered under the small ring again.
    let db = Db::open(dir.path(), ring(16 << 10)).unwrap();
    assert_eq!(db.get(b"big").unwrap().map(|e| e.value), Some(big), "an acknowledged record was cut");
    assert_eq!(db.get(b"small").unwrap().map(|e| e.value), Some(b"v".to_vec()));
    db.close().unwrap();
}

/// A log segment far larger than any ring of the database writes (a corrupt length, or a
/// file grown by something else) is refused as corruption naming the segment, instead of
/// being read into memory whole.
#[test]
fn an_oversized_log_segment_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    drop(db);
    let segment = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .min()
        .expect("a log segment");
    // Sparse: 64 GiB of nothing past the records, against segments of a few MiB here.
    std::fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(64 << 30).unwrap();
    match Db::open(dir.path(), opts()) {
        Err(Error::Corruption { location, reason }) => {
            assert!(reason.contains("more than the"), "{reason}");
            assert!(location.file.to_string_lossy().contains("wal-"), "{location:?}");
        }
        other => panic!("an oversized segment was opened: {:?}", other.map(|_| ())),
    }
}

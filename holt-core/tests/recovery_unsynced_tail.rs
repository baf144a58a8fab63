//! Invariant: log records that an open reads from the page cache only (written by a process
//! that died before syncing them, or left there, marked clean, by a failed fdatasync, which
//! Linux never writes again) are made durable by that open before any new write is
//! acknowledged behind them. A power cut after the reopen then loses no acknowledged write,
//! and the database opens again.
//!
//! The simulated file system models both: `SimFs::kill` keeps unsynced writes readable but
//! unsynced, and a failed sync leaves a random subset of its writes durable and none pending.

mod oracle;

use std::sync::Arc;
use std::time::Duration;

use holt_core::io::{Fault, FaultError, OpKind, SimFs, Vfs};
use holt_core::{Condition, Db, Durability, Options, WriteOptions};

const ROUNDS: u64 = 24;

fn open(vfs: &Arc<dyn Vfs>, opts: &Options, context: &str) -> Db {
    Db::open_with_vfs(vfs.clone(), opts.clone()).unwrap_or_else(|e| panic!("{context}: open: {e}"))
}

fn assert_present(db: &Db, keys: &[Vec<u8>], context: &str) {
    for k in keys {
        let found = db.get(k).unwrap_or_else(|e| panic!("{context}: get: {e}"));
        assert!(found.is_some(), "{context}: acknowledged write {:?} lost", String::from_utf8_lossy(k));
    }
}

/// A failed log fdatasync poisons the database; it is dropped and reopened without a reboot
/// (the failed record is still in the page cache, and maybe not on disk); new writes are
/// acknowledged; then the power fails.
#[test]
fn failed_fsync_reopen_write_power_cut() {
    let base = oracle::seed("failed_fsync_reopen_write_power_cut");
    for round in 0..ROUNDS {
        let seed = base.wrapping_add(round);
        let context = format!("seed {seed}");
        let fs = SimFs::new(seed);
        let vfs: Arc<dyn Vfs> = fs.clone();
        let opts = oracle::opts();
        let mut acked = Vec::new();

        let db = open(&vfs, &opts, &context);
        for i in 0..20u32 {
            let k = format!("before/{i:03}").into_bytes();
            db.put(&k, b"v").unwrap();
            acked.push(k);
        }
        // The first segment's sync only (a new database's log starts in segment 1): matching
        // every `wal-` file let the spare segment's preparation take the fault when it ran late.
        fs.inject(Fault {
            op: Some(OpKind::Sync),
            path_contains: Some(format!("wal-{:016}.log", 1)),
            nth: 1,
            error: FaultError::Eio,
            forever: false,
        });
        assert!(db.put(b"failed", b"v").is_err(), "{context}: the put whose fdatasync failed succeeded");
        drop(db);

        let db = open(&vfs, &opts, &context);
        for i in 0..20u32 {
            let k = format!("after/{i:03}").into_bytes();
            db.put(&k, b"v").unwrap_or_else(|e| panic!("{context}: put after reopen: {e}"));
            acked.push(k);
        }
        fs.crash();
        drop(db);

        let db = open(&vfs, &opts, &context);
        assert_present(&db, &acked, &context);
    }
}

/// A process writing asynchronously is killed with records written to the log but not
/// synced; the next process opens (replaying them) and checkpoints, which moves the log's
/// replay start past them or, when no new segment is ready, leaves the log in place and
/// records that it was synced up to there; then the power fails. Every write the checkpoint
/// covered must come back, and the database must open. With a sync write after the
/// checkpoint, its fdatasync would sync the killed process's records too; the case here is
/// the checkpoint alone.
#[test]
fn killed_writer_reopen_checkpoint_power_cut() {
    let base = oracle::seed("killed_writer_reopen_checkpoint_power_cut");
    for round in 0..ROUNDS {
        let seed = base.wrapping_add(round);
        let context = format!("seed {seed}");
        let fs = SimFs::new(seed);
        let vfs: Arc<dyn Vfs> = fs.clone();
        // A small ring: the flusher writes records to make room long before the flush
        // interval would sync them, so some are written and unsynced at the kill.
        let opts = Options {
            durability: Durability::Async,
            wal_flush_interval: Duration::from_secs(3600),
            checkpoint_wal_bytes: u64::MAX,
            ..oracle::opts()
        };

        let db = open(&vfs, &opts, &context);
        for i in 0..2_000u32 {
            db.put(format!("async/{i:05}").as_bytes(), &[b'x'; 40]).unwrap();
        }
        fs.kill();
        drop(db);

        let db = open(&vfs, &opts, &context);
        // What the killed process left is async (a power cut may take it) until something
        // makes it durable; the checkpoint does.
        let covered: Vec<Vec<u8>> = (0..2_000u32)
            .map(|i| format!("async/{i:05}").into_bytes())
            .filter(|k| db.get(k).unwrap().is_some())
            .collect();
        db.checkpoint().unwrap_or_else(|e| panic!("{context}: checkpoint: {e}"));
        fs.crash();
        drop(db);

        let db = open(&vfs, &opts, &context);
        assert_present(&db, &covered, &context);
        let sync = WriteOptions { durability: Some(Durability::Sync) };
        db.put_with(b"after", b"v", Condition::None, sync).unwrap_or_else(|e| panic!("{context}: put: {e}"));
    }
}

/// Options that keep every record in the first log segment: no background checkpoint.
fn one_segment_opts() -> Options {
    Options { checkpoint_wal_bytes: u64::MAX, ..oracle::opts() }
}

/// Writes `count` records of one size (same key length, same value) and drops the database
/// without a checkpoint; returns the log segment's path and the records' padded size.
fn segment_of_equal_records(dir: &std::path::Path, prefix: &str, count: u32) -> (std::path::PathBuf, usize) {
    let db = Db::open(dir, one_segment_opts()).expect("open");
    for i in 0..count {
        db.put(format!("{prefix}/{i:03}").as_bytes(), &[b'v'; 64]).expect("put");
    }
    drop(db);
    let segment = dir.join("wal-0000000000000001.log");
    let bytes = std::fs::read(&segment).expect("the first log segment");
    let end = bytes.iter().rposition(|&b| b != 0).expect("records") + 1;
    // Records are 8-byte aligned after the 32-byte segment header (docs/format.md).
    let used = ((end + 7) & !7) - SEGMENT_HEADER_BYTES;
    assert_eq!(used % count as usize, 0, "records of one size");
    (segment, used / count as usize)
}

const SEGMENT_HEADER_BYTES: usize = 32;

/// Rewrites the record at the start of `bytes`, if one is there, as one made before any
/// fdatasync: its `durable` field (offset 24) zero, its checksum (the last 4 bytes of `len`)
/// made anew (docs/format.md, "Record").
fn claim_nothing(bytes: &mut [u8]) {
    if bytes[..4] != *b"HWAL" {
        return;
    }
    let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    bytes[24..32].fill(0);
    let crc = crc32c::crc32c(&bytes[..len - 4]);
    bytes[len - 4..len].copy_from_slice(&crc.to_le_bytes());
}

/// The segment the log continues in lost its header write but kept later writes (the header
/// goes out with the first records, and a power cut may keep a later write and lose that
/// one). Its records' lsns still match their positions, so if the next process appended from
/// the segment's start over them, a later open would take the old records beyond the new
/// ones for the log's continuation and replay them as phantom writes. The open clears them.
#[test]
fn headerless_segment_with_old_records_is_cleared() {
    use std::os::unix::fs::FileExt;

    let dir = tempfile::tempdir().unwrap();
    let (segment, record) = segment_of_equal_records(dir.path(), "old", 200);
    // The first write (header and the records in its first 4 KiB) never reached the disk.
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&segment).unwrap();
    file.write_all_at(&[0; 4096], 0).unwrap();
    // The records say the log was synced past the header: it was lost after being synced.
    match Db::open(dir.path(), one_segment_opts()) {
        Err(holt_core::Error::Corruption { .. }) => {}
        other => panic!("a header lost after the records claim it synced: {:?}", other.err()),
    }
    // Now as if no fdatasync of this segment had completed: no record claims durability
    // past the segment's start, and no sync mark names a position in it.
    let mut bytes = std::fs::read(&segment).unwrap();
    for i in 0..200 {
        claim_nothing(&mut bytes[SEGMENT_HEADER_BYTES + i * record..]);
    }
    file.write_all_at(&bytes, 0).unwrap();
    std::fs::remove_file(dir.path().join("WAL-SYNCED")).unwrap();
    // New records of the same size ending exactly where the first surviving old one starts.
    let new_count = (4096 - SEGMENT_HEADER_BYTES).div_ceil(record) as u32;

    let db = Db::open(dir.path(), one_segment_opts()).expect("open over the headerless segment");
    for i in 0..new_count {
        db.put(format!("new/{i:03}").as_bytes(), &[b'v'; 64]).expect("put");
    }
    drop(db);
    let db = Db::open(dir.path(), one_segment_opts()).expect("reopen");
    for i in 0..new_count {
        assert!(db.get(format!("new/{i:03}").as_bytes()).unwrap().is_some(), "new/{i:03} lost");
    }
    for i in 0..200u32 {
        assert!(db.get(format!("old/{i:03}").as_bytes()).unwrap().is_none(), "phantom old/{i:03}");
    }
}

/// A zeroed header in front of an intact first record cannot come from a torn write (the
/// record shares the header's sector): the header went bad after it was written, and the
/// open reports corruption instead of clearing synced records.
#[test]
fn zeroed_header_before_an_intact_record_is_corruption() {
    use std::os::unix::fs::FileExt;

    let dir = tempfile::tempdir().unwrap();
    let (segment, _) = segment_of_equal_records(dir.path(), "old", 50);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .write_all_at(&[0; SEGMENT_HEADER_BYTES], 0)
        .unwrap();
    match Db::open(dir.path(), one_segment_opts()) {
        Err(holt_core::Error::Corruption { .. }) => {}
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("opened over a segment whose header was zeroed after it was synced"),
    }
}

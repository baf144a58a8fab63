//! Invariant: a checkpoint taken while no preallocated log segment is ready keeps the log in
//! its current segment and names that segment's start as the manifest's checkpoint_lsn, so
//! the frames hold writes past it (up to the manifest's frames_lsn). Recovery reads the log
//! from checkpoint_lsn, skips the records below frames_lsn and applies the rest; the result
//! must be exactly the acknowledged state: every value and version, no deleted key back, and
//! the same key count.
//!
//! The spare segment never becomes ready here: creating log segment 2 fails with ENOSPC
//! forever (simulated I/O), so every checkpoint stays in segment 1. Crash model:
//! `SimFs::crash` (unsynced writes dropped, kept or torn).

mod oracle;

use std::collections::BTreeMap;
use std::sync::Arc;

use holt_core::io::{Fault, FaultError, OpKind, SimFs, Vfs};
use holt_core::{Db, Durability, Options, WriteOptions};

fn opts() -> Options {
    Options {
        // No background checkpoints: the test places them.
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        ..oracle::opts()
    }
}

type Model = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

fn check(db: &Db, model: &Model, context: &str) {
    let got = oracle::dump(db);
    let want: Vec<(Vec<u8>, Vec<u8>, u64)> =
        model.iter().map(|(k, (v, ver))| (k.clone(), v.clone(), *ver)).collect();
    assert_eq!(got, want, "{context}: recovered state differs");
    assert_eq!(db.stats().keys, model.len() as u64, "{context}: key count differs");
}

/// A simulated disk on which log segment 2 can never be created (ENOSPC forever), so every
/// checkpoint keeps the log in segment 1.
fn without_a_spare_segment(seed: u64) -> (Arc<SimFs>, Arc<dyn Vfs>) {
    let fs = SimFs::new(seed);
    fs.inject(Fault {
        op: Some(OpKind::Open),
        path_contains: Some("wal-0000000000000002".into()),
        nth: 1,
        error: FaultError::Enospc,
        forever: true,
    });
    let vfs: Arc<dyn Vfs> = fs.clone();
    (fs, vfs)
}

#[test]
fn checkpoints_that_keep_the_segment_replay_to_the_same_state() {
    let seed = oracle::seed("checkpoints_that_keep_the_segment_replay_to_the_same_state");
    for case in 0..8u64 {
        let seed = seed.wrapping_add(case);
        let (fs, vfs) = without_a_spare_segment(seed);
        let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open");
        let sync = WriteOptions { durability: Some(Durability::Sync) };
        let mut model = Model::new();
        let mut rng = seed;
        // Rounds of puts, overwrites and deletes, each ended by a checkpoint; the last round
        // is left to the log alone.
        for round in 0..4 {
            for i in 0..40 {
                let key = oracle::key(&mut rng, 60);
                if oracle::next(&mut rng).is_multiple_of(4) {
                    db.delete_with(&key, holt_core::Condition::None, sync).expect("delete");
                    model.remove(&key);
                } else {
                    let value = format!("r{round}-{i}").into_bytes();
                    let version = db.put_with(&key, &value, holt_core::Condition::None, sync).expect("put");
                    model.insert(key, (value, version.0));
                }
            }
            if round < 3 {
                db.checkpoint().expect("checkpoint without a spare segment");
            }
        }
        assert!(
            fs.op_count() > 0 && db.stats().checkpoints >= 3,
            "seed {seed}: the checkpoints must have completed"
        );
        let context = format!("seed {seed}");
        check(&db, &model, &format!("{context}, before the crash"));
        fs.crash();
        drop(db);
        let db = Db::open_with_vfs(vfs.clone(), opts()).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
        check(&db, &model, &format!("{context}, after the crash"));
        drop(db);
        let db = Db::open_with_vfs(vfs.clone(), opts()).expect("second reopen");
        check(&db, &model, &format!("{context}, after a second reopen"));
    }
}

/// The frames hold exactly the writes below the log position a checkpoint captured (the
/// manifest's `frames_lsn`), so reopening after checkpoints that kept their segment applies
/// none of the records before it again: no frame comes back dirty. Applying them again (what
/// recovery did before manifest version 2) changed no value but dirtied every frame they
/// touched, and dirty frames cannot be evicted: a database reopened with a small cache held
/// them all until its next checkpoint. Writes after the last checkpoint are still replayed.
#[test]
fn reopening_after_in_place_checkpoints_replays_only_what_the_frames_lack() {
    let seed = oracle::seed("reopening_after_in_place_checkpoints_replays_only_what_the_frames_lack");
    let (fs, vfs) = without_a_spare_segment(seed);
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open");
    let put = |db: &Db, model: &mut Model, i: u32, tag: &str| {
        let key = format!("bucket/dir-{:02}/object-{i:05}", i % 16).into_bytes();
        let value = format!("{tag}-{i}-{}", "v".repeat(200)).into_bytes();
        let version = db.put(&key, &value).expect("put");
        model.insert(key, (value, version.0));
    };
    let mut model = Model::new();
    for i in 0..2500 {
        put(&db, &mut model, i, "first");
    }
    db.checkpoint().expect("checkpoint without a spare segment");
    for i in (0..2500).step_by(7) {
        put(&db, &mut model, i, "second");
    }
    let frames = db.stats().frames;
    println!("{frames} frames");
    // `close` checkpoints too, again in segment 1: everything in the log is in the frames.
    db.close().expect("close");

    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("reopen");
    check(&db, &model, "after a clean close");
    assert_eq!(db.stats().frames_dirty, 0, "reopening re-applied writes the frames hold: {:?}", db.stats());
    put(&db, &mut model, 3, "third");
    assert_eq!(db.stats().frames_dirty, 1, "one write dirties its frame");

    // A crash after writes that no checkpoint covers: those must be replayed (and dirty
    // their frames), the ones before the checkpoint must not.
    db.checkpoint().expect("checkpoint");
    for i in [10, 1000, 2000] {
        put(&db, &mut model, i, "fourth");
    }
    fs.crash();
    drop(db);
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("reopen after the crash");
    check(&db, &model, "after the crash");
    let dirty = db.stats().frames_dirty;
    assert!((1..=3).contains(&dirty), "the 3 replayed writes dirty 1 to 3 frames, not {dirty} of {frames}");
}

/// The log is synced up to the checkpoint's position before the manifest names it, so a log
/// that ends before that position has lost synced records. Recovery must say so, not cut the
/// damage as a torn tail and resume below the position: new records would get lsns the next
/// recovery skips as already in the frames.
#[test]
fn a_log_ending_before_the_checkpoint_position_is_corruption() {
    let seed = oracle::seed("a_log_ending_before_the_checkpoint_position_is_corruption");
    let (_fs, vfs) = without_a_spare_segment(seed);
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open");
    for i in 0..200u32 {
        db.put(format!("key-{i:04}").as_bytes(), b"value").expect("put");
    }
    // `close` checkpoints in segment 1: the frames hold everything, and the manifest says the
    // log was synced up to its end.
    db.close().expect("close");

    let segment = std::path::Path::new("wal-0000000000000001.log");
    let file = vfs.open(segment, false).expect("segment 1");
    let mut bytes = vec![0u8; file.len().expect("len") as usize];
    file.read_exact_at(&mut bytes, 0).expect("read");
    let last = bytes.iter().rposition(|&b| b != 0).expect("records");
    // Damage the last record (synced long ago): a bad checksum, nothing valid after it.
    file.write_all_at(&[0xFF; 8], (last as u64).saturating_sub(16)).expect("write");
    file.sync_data().expect("sync");
    drop(file);

    match Db::open_with_vfs(vfs.clone(), opts()) {
        Err(holt_core::Error::Corruption { reason, .. }) => {
            assert!(reason.contains("synced"), "names the cause: {reason}")
        }
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(_) => panic!("a log missing synced records was opened"),
    }
}

/// With a spare segment ready, a checkpoint still keeps the log in its segment while little
/// of it is used (less than half its room, and less than `checkpoint_wal_bytes`): moving on
/// would leave the rest unused and zero-fill a new spare for every checkpoint. Once the
/// segment is half used, a checkpoint moves to the spare and the old segment is deleted.
/// Either way a crash afterwards recovers exactly the acknowledged state.
#[test]
fn a_checkpoint_moves_to_the_spare_segment_only_once_the_current_one_is_half_used() {
    let seed = oracle::seed("a_checkpoint_moves_to_the_spare_segment_only_once_the_current_one_is_half_used");
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let segment = |no: u64| std::path::PathBuf::from(format!("wal-{no:016}.log"));
    let header_written = |no: u64| {
        let mut head = [0u8; 32];
        let file = vfs.open(&segment(no), false).expect("segment file");
        file.read_exact_at(&mut head, 0).expect("read the header");
        head.iter().any(|&b| b != 0)
    };
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open");
    // The spare (segment 2) is prepared on a helper thread at open: wait until it exists and
    // give the flusher time to take it, so the first checkpoint has a segment to move to.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !vfs.exists(&segment(2)).expect("exists") {
        assert!(std::time::Instant::now() < deadline, "the spare segment was never created");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));

    let mut model = Model::new();
    let mut put = |db: &Db, i: u32, len: usize| {
        let key = format!("bucket/object-{i:05}").into_bytes();
        let value = vec![b'a' + (i % 26) as u8; len];
        let version = db.put(&key, &value).expect("put");
        model.insert(key, (value, version.0));
    };
    for i in 0..50 {
        put(&db, i, 100);
    }
    db.checkpoint().expect("checkpoint");
    assert!(vfs.exists(&segment(1)).expect("exists"), "segment 1 was deleted after ~8 KiB of log");
    assert!(!header_written(2), "the checkpoint moved the log to segment 2 after ~8 KiB of a 1 MiB segment");

    // About 600 KiB more: past half of segment 1. The spare may still be settling, so a few
    // more checkpoints are allowed, each after one more write.
    for i in 50..650 {
        put(&db, i, 1000);
    }
    let mut tries = 0;
    loop {
        db.checkpoint().expect("checkpoint");
        if !vfs.exists(&segment(1)).expect("exists") {
            break;
        }
        tries += 1;
        assert!(tries < 50, "segment 1 is still there after {tries} checkpoints past half of it");
        std::thread::sleep(std::time::Duration::from_millis(20));
        put(&db, 10_000 + tries, 10);
    }
    for i in 650..700 {
        put(&db, i, 100);
    }
    assert!(header_written(2), "the log moved on to segment 2");
    fs.crash();
    drop(db);
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("reopen after the crash");
    check(&db, &model, &format!("seed {seed}, after the crash"));
}

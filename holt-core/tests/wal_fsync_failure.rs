//! Invariant: after a failed fdatasync of the log, the waiting writer learns its write may
//! have been applied (`Io { may_have_applied: true }`), every later write is refused with
//! `Poisoned` (a retried fsync proves nothing), and reopening recovers every write that was
//! acknowledged before the failure.

mod oracle;

use std::sync::Arc;

use holt_core::io::{Fault, FaultError, OpKind, SimFs, Vfs};
use holt_core::{Condition, Db, Error, WriteOptions};

/// EIO from the next fdatasync of the log, once.
/// The next fdatasync of the first log segment, the one these tests write in (a new database
/// starts its log in segment 1). Matching every `wal-` file let the helper thread that
/// prepares the spare segment (segment 2) take the fault first, when it ran late.
fn next_log_sync_fails_once() -> Fault {
    Fault {
        op: Some(OpKind::Sync),
        path_contains: Some(format!("wal-{:016}.log", 1)),
        nth: 1,
        error: FaultError::Eio,
        forever: false,
    }
}

#[test]
fn failed_fsync_poisons_until_reopen() {
    let fs = SimFs::new(oracle::seed("failed_fsync_poisons_until_reopen"));
    let vfs: Arc<dyn Vfs> = fs.clone();
    let db = Db::open_with_vfs(vfs.clone(), oracle::opts()).unwrap();
    for i in 0..20u32 {
        db.put(format!("ok/{i}").as_bytes(), b"v").unwrap();
    }
    fs.inject(next_log_sync_fails_once());
    match db.put(b"failing", b"v") {
        Err(Error::Io { may_have_applied: true, .. }) => {}
        other => panic!("expected Io with may_have_applied, got {:?}", other.map(|v| v.0)),
    }
    // The fault fired once; the disk "works" again, but the database must not trust it.
    for _ in 0..3 {
        assert!(matches!(db.put(b"later", b"v"), Err(Error::Poisoned)));
    }
    // Nor serve what it holds: "failing" was published before its fsync failed, and
    // recovery may not bring it back.
    assert!(matches!(db.get(b"failing"), Err(Error::Poisoned)));
    assert!(matches!(db.get(b"ok/1"), Err(Error::Poisoned)));
    assert!(matches!(db.scan(b"", b"", 10), Err(Error::Poisoned)));
    let request = holt_core::ListRequest { prefix: b"ok/", limit: 10, ..Default::default() };
    assert!(matches!(db.list(&request), Err(Error::Poisoned)));
    assert!(db.checkpoint().is_err());
    drop(db);
    let db = Db::open_with_vfs(vfs, oracle::opts()).unwrap();
    for i in 0..20u32 {
        assert!(db.get(format!("ok/{i}").as_bytes()).unwrap().is_some());
    }
    assert!(db.get(b"later").unwrap().is_none());
    db.put(b"after", b"reopen").unwrap();
}

/// A task awaiting its write (`Db::put_pending`) learns of the failed fdatasync as a blocking
/// writer does, instead of waiting forever or being told the write is safe.
#[test]
fn failed_fsync_reaches_an_awaiting_task() {
    let fs = SimFs::new(oracle::seed("failed_fsync_reaches_an_awaiting_task"));
    let vfs: Arc<dyn Vfs> = fs.clone();
    let db = Db::open_with_vfs(vfs, oracle::opts()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
    let write = |key: &'static [u8]| {
        runtime.block_on(async { db.put_pending(key, b"v", Condition::None, WriteOptions::default())?.await })
    };
    write(b"ok").unwrap();
    fs.inject(next_log_sync_fails_once());
    match write(b"failing") {
        Err(Error::Io { may_have_applied: true, .. }) => {}
        other => panic!("expected Io with may_have_applied, got {:?}", other.map(|v| v.0)),
    }
    assert!(matches!(write(b"later"), Err(Error::Poisoned)));
}

//! Invariant: after a failed fdatasync of the log, the waiting writer learns its write may
//! have been applied (`Io { may_have_applied: true }`), every later write is refused with
//! `Poisoned` (a retried fsync proves nothing), and reopening recovers every write that was
//! acknowledged before the failure.

mod oracle;

use std::sync::Arc;

use holt_core::io::{Fault, FaultError, OpKind, SimFs, Vfs};
use holt_core::{Db, Error};

#[test]
fn failed_fsync_poisons_until_reopen() {
    let fs = SimFs::new(oracle::seed("failed_fsync_poisons_until_reopen"));
    let vfs: Arc<dyn Vfs> = fs.clone();
    let db = Db::open_with_vfs(vfs.clone(), oracle::opts()).unwrap();
    for i in 0..20u32 {
        db.put(format!("ok/{i}").as_bytes(), b"v").unwrap();
    }
    fs.inject(Fault {
        op: Some(OpKind::Sync),
        path_contains: Some("wal-".into()),
        nth: 1,
        error: FaultError::Eio,
        forever: false,
    });
    match db.put(b"failing", b"v") {
        Err(Error::Io { may_have_applied: true, .. }) => {}
        other => panic!("expected Io with may_have_applied, got {:?}", other.map(|v| v.0)),
    }
    // The fault fired once; the disk "works" again, but the database must not trust it.
    for _ in 0..3 {
        assert!(matches!(db.put(b"later", b"v"), Err(Error::Poisoned)));
    }
    assert!(db.checkpoint().is_err());
    drop(db);
    let db = Db::open_with_vfs(vfs, oracle::opts()).unwrap();
    for i in 0..20u32 {
        assert!(db.get(format!("ok/{i}").as_bytes()).unwrap().is_some());
    }
    assert!(db.get(b"later").unwrap().is_none());
    db.put(b"after", b"reopen").unwrap();
}

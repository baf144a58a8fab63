//! Invariant: a checkpoint taken while no preallocated log segment is ready keeps the log in
//! its current segment and names that segment's start as the manifest's checkpoint_lsn, so
//! the frames hold writes past it. Recovery replays those writes again over frames that
//! already contain them; the result must be exactly the acknowledged state: every value and
//! version, no deleted key back, and the same key count.
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

#[test]
fn checkpoints_that_keep_the_segment_replay_to_the_same_state() {
    let seed = oracle::seed("checkpoints_that_keep_the_segment_replay_to_the_same_state");
    for case in 0..8u64 {
        let seed = seed.wrapping_add(case);
        let fs = SimFs::new(seed);
        fs.inject(Fault {
            op: Some(OpKind::Open),
            path_contains: Some("wal-0000000000000002".into()),
            nth: 1,
            error: FaultError::Enospc,
            forever: true,
        });
        let vfs: Arc<dyn Vfs> = fs.clone();
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

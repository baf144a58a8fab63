//! Invariant: an error injected by name at every durability step (the `fail` crate's
//! failpoints, feature `failpoints`) never loses an acknowledged write: after the error the
//! workload continues, the database is dropped (a process exit), and reopening on the real
//! file system must satisfy the crash oracle (tests/oracle/mod.rs).
//!
//! Run: `cargo test -p holt-core --features failpoints --test failpoint_steps`.
#![cfg(feature = "failpoints")]

mod oracle;

use std::sync::Arc;

use holt_core::io::{SimFs, StdFs, Vfs};
use holt_core::Db;

const FAILPOINTS: &[&str] = &[
    "wal-append-write",
    "wal-fdatasync",
    "wal-segment-create",
    "wal-segment-roll",
    "frame-write",
    "frame-sync",
    "manifest-write",
    "manifest-sync",
    "manifest-rename",
    "dir-sync",
];

#[test]
fn every_named_failpoint_once_and_forever() {
    let base = oracle::seed("every_named_failpoint_once_and_forever");
    // Failpoints are process-global: this single test runs them one after another.
    let scenario = fail::FailScenario::setup();
    for (i, name) in FAILPOINTS.iter().enumerate() {
        for (j, action) in ["1*return", "return"].iter().enumerate() {
            let seed = base.wrapping_add((i * 2 + j) as u64);
            let dir = tempfile::tempdir().unwrap();
            let vfs: Arc<dyn Vfs> = Arc::new(StdFs::new(dir.path()));
            let db = Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("open");
            // The workload's SimFs is only a fault-free stand-in for the inject hook.
            let unused = SimFs::new(seed);
            let mut rng = seed;
            let mut history = oracle::workload(&db, &unused, &mut rng, 40, usize::MAX, None);
            fail::cfg(*name, action).unwrap();
            let more = oracle::workload(&db, &unused, &mut rng, 60, usize::MAX, None);
            history.writes.extend(more.writes);
            let _ = db.checkpoint();
            drop(db);
            fail::remove(*name);
            let context = format!("failpoint {name} {action} seed {seed}");
            let db = Db::open_with_vfs(vfs.clone(), oracle::opts())
                .unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
            let state = oracle::check(&db, &history, &context);
            drop(db);
            oracle::check_stable(
                || Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("reopen"),
                &state,
                &context,
            );
        }
    }
    scenario.teardown();
}

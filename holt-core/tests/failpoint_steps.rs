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
        assert_reached(name, base.wrapping_add(i as u64 * 2));
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

/// The workload of `every_named_failpoint_once_and_forever`, run with `name` counting its
/// hits instead of failing, must reach the step: an error injected at a step the workload
/// never passes would test nothing.
fn assert_reached(name: &str, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(StdFs::new(dir.path()));
    let db = Db::open_with_vfs(vfs, oracle::opts()).expect("open");
    let unused = SimFs::new(seed);
    let mut rng = seed;
    oracle::workload(&db, &unused, &mut rng, 40, usize::MAX, None);
    // Counted from where the test injects the error.
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    fail::cfg_callback(name, move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    oracle::workload(&db, &unused, &mut rng, 60, usize::MAX, None);
    let _ = db.checkpoint();
    drop(db);
    fail::remove(name);
    let hits = hits.load(std::sync::atomic::Ordering::Relaxed);
    assert!(hits > 0, "the workload never reaches failpoint {name}");
    println!("failpoint {name}: {hits} hits");
}

/// The `wal-cut-mark` and `wal-truncate` steps run only while opening a log with a torn tail,
/// so they get their own scenario: a failure to record or cut the tail must fail the open
/// (never append after garbage), and the next open, with the step working again, recovers
/// every write and cuts the tail.
#[test]
fn torn_tail_cut_failure_fails_the_open_and_the_next_open_recovers() {
    let scenario = fail::FailScenario::setup();
    for step in ["wal-cut-mark", "wal-truncate"] {
        let dir = thirty_writes_dropped_with_a_torn_tail();
        open_fails_at_then_recovers(dir.path(), step);
        // The open that finished the cut removed its mark.
        assert!(!dir.path().join("WAL-CUT").exists(), "{step}: the cut mark outlived the cut");
    }
    scenario.teardown();
}

/// `thirty_writes_dropped`, then a torn record after the last valid one.
fn thirty_writes_dropped_with_a_torn_tail() -> tempfile::TempDir {
    use std::os::unix::fs::FileExt;

    let dir = thirty_writes_dropped();
    // A torn record after the last valid one: a plausible header followed by garbage.
    let mut segments: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .collect();
    segments.sort();
    let (seg, end) = segments
        .iter()
        .rev()
        .find_map(|p| {
            let bytes = std::fs::read(p).unwrap();
            bytes.iter().rposition(|&b| b != 0).map(|i| (p.clone(), (i as u64 + 1 + 7) & !7))
        })
        .expect("a segment with records");
    let mut torn = b"HWAL".to_vec();
    torn.extend_from_slice(&200u32.to_le_bytes());
    torn.extend_from_slice(&[0xAB; 100]);
    std::fs::OpenOptions::new().write(true).open(&seg).unwrap().write_all_at(&torn, end).unwrap();
    dir
}

/// The `wal-resync` step runs while opening a log whose last segment holds records (it writes
/// them again and syncs them, in case they were only in the page cache): a failure there must
/// fail the open (never acknowledge writes behind records that may not be durable), and the
/// next open, with the step working again, recovers every write.
#[test]
fn resync_failure_fails_the_open_and_the_next_open_recovers() {
    let scenario = fail::FailScenario::setup();
    let dir = thirty_writes_dropped();
    open_fails_at_then_recovers(dir.path(), "wal-resync");
    scenario.teardown();
}

/// A database holding `k000`..`k029` = `v0`..`v29`, dropped, not closed: no checkpoint, so
/// the records stay in the log for the next open.
fn thirty_writes_dropped() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), oracle::opts()).expect("open");
    for i in 0..30u32 {
        db.put(format!("k{i:03}").as_bytes(), format!("v{i}").as_bytes()).expect("put");
    }
    drop(db);
    dir
}

/// Opening `dir` (which holds `k000`..`k029` = `v0`..`v29`) with the open-time step `step`
/// failing, once and then forever, must fail; with the step working again the open recovers
/// every write and takes new ones, which the next open finds.
fn open_fails_at_then_recovers(dir: &std::path::Path, step: &str) {
    for action in ["1*return", "return"] {
        fail::cfg(step, action).unwrap();
        assert!(Db::open(dir, oracle::opts()).is_err(), "open must fail when {step} fails ({action})");
        fail::remove(step);
    }
    let db = Db::open(dir, oracle::opts()).expect("open after the failpoint is gone");
    for i in 0..30u32 {
        let entry = db.get(format!("k{i:03}").as_bytes()).unwrap().expect("acknowledged write present");
        assert_eq!(entry.value, format!("v{i}").as_bytes());
    }
    db.put(b"after", step.as_bytes()).expect("writes after recovery");
    drop(db);
    let db = Db::open(dir, oracle::opts()).expect("reopen");
    assert_eq!(db.get(b"after").unwrap().unwrap().value, step.as_bytes());
    assert_eq!(db.get(b"k029").unwrap().unwrap().value, b"v29");
}

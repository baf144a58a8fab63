//! Invariant: after a power cut at a random moment (simulated I/O: unsynced writes dropped,
//! kept or torn at 512 B / 4 KiB, unsynced directory changes undone), reopening yields a
//! prefix of the log containing every acknowledged write (see tests/oracle/mod.rs).
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs). The machine freezes at a random I/O
//! operation (all later I/O fails), then crashes; checkpoints run during the workload.

mod oracle;

use std::sync::Arc;
use std::time::Duration;

use holt_core::io::{Fault, FaultError, SimFs, Vfs};
use holt_core::{Batch, Condition, Db, Options, WriteOptions};
use oracle::History;

pub fn opts() -> Options {
    Options {
        wal_ring_bytes: 4096,
        wal_flush_interval: Duration::from_millis(1),
        checkpoint_wal_bytes: 16 << 10,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

/// Runs `writes` random writes, injecting `fault` before write `inject_at`; returns history.
pub fn workload(db: &Db, fs: &SimFs, rng: &mut u64, writes: usize, inject_at: usize, fault: Option<Fault>) -> History {
    let mut history = History::default();
    for i in 0..writes {
        if i == inject_at {
            if let Some(f) = fault.clone() {
                fs.inject(f);
            }
        }
        let r = oracle::next(rng) % 100;
        let k = oracle::key(rng, 300);
        if r < 75 {
            let v = format!("v{i}-{}", oracle::next(rng) % 1000).into_bytes();
            let res = db.put(&k, &v).map(|v| v.0);
            history.record(vec![(k, Some(v))], &res);
        } else if r < 90 {
            let res = db.delete_with(&k, Condition::None, WriteOptions::default()).map(|_| 0);
            // A delete's version is not observable; record it as unversioned.
            let (_, outcome) = oracle::classify(&res);
            history.writes.push(oracle::Write { ops: vec![(k, None)], version: None, outcome });
        } else {
            let k2 = oracle::key(rng, 300);
            let mut b = Batch::new();
            b.put(k.clone(), b"batch-a".to_vec()).put(k2.clone(), b"batch-b".to_vec());
            let res = db.write_batch(&b, WriteOptions::default()).map(|v| v.0);
            history.record(vec![(k, Some(b"batch-a".to_vec())), (k2, Some(b"batch-b".to_vec()))], &res);
        }
        if i % 41 == 40 {
            let _ = db.checkpoint();
        }
    }
    history
}

/// One crash case: workload, crash, reopen, oracle, reopen twice.
pub fn crash_case(seed: u64, writes: usize, inject_at: usize, fault: Option<Fault>, label: &str) {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open fresh");
    let history = workload(&db, &fs, &mut rng, writes, inject_at, fault);
    fs.crash();
    drop(db);
    let context = format!("{label} seed {seed}");
    let db = Db::open_with_vfs(vfs.clone(), opts()).unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
    let state = oracle::check(&db, &history, &context);
    drop(db);
    oracle::check_stable(|| Db::open_with_vfs(vfs.clone(), opts()).expect("reopen"), &state, &context);
}

#[test]
fn crash_at_random_operations() {
    let base = oracle::seed("crash_at_random_operations");
    for case in 0..40u64 {
        let seed = base.wrapping_add(case);
        let mut rng = seed ^ 0xC0FFEE;
        let writes = 60 + (oracle::next(&mut rng) % 120) as usize;
        let inject_at = (oracle::next(&mut rng) % writes as u64) as usize;
        let fault = Fault {
            op: None,
            path_contains: None,
            nth: 1 + oracle::next(&mut rng) % 30,
            error: FaultError::Freeze,
            forever: true,
        };
        crash_case(seed, writes, inject_at, Some(fault), "freeze");
    }
}

#[test]
fn crash_without_faults_keeps_every_acked_write() {
    let base = oracle::seed("crash_without_faults_keeps_every_acked_write");
    for case in 0..10u64 {
        crash_case(base.wrapping_add(case), 150, usize::MAX, None, "clean crash");
    }
}

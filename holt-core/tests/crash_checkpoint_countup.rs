//! Invariant: whichever I/O operation fails during a checkpoint (the n-th, for every n up to
//! 200, failing once or forever), the database either carries on or refuses writes, and after
//! a crash the oracle holds: the checkpoint never loses log records it did not yet cover.
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs) after the failed checkpoint and more writes.

mod oracle;

use std::sync::Arc;

use holt_core::io::{Fault, FaultError, SimFs, Vfs};
use holt_core::Db;

fn case(seed: u64, n: u64, forever: bool) {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    let db = Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("open fresh");
    let mut history = oracle::workload(&db, &fs, &mut rng, 40, usize::MAX, None);
    fs.inject(Fault { op: None, path_contains: None, nth: n, error: FaultError::Eio, forever });
    let _ = db.checkpoint();
    let more = oracle::workload(&db, &fs, &mut rng, 15, usize::MAX, None);
    history.writes.extend(more.writes);
    let _ = db.checkpoint();
    fs.crash();
    drop(db);
    let context = format!("count-up n={n} forever={forever} seed {seed}");
    let db =
        Db::open_with_vfs(vfs.clone(), oracle::opts()).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
    let state = oracle::check(&db, &history, &context);
    drop(db);
    oracle::check_stable(
        || Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("reopen"),
        &state,
        &context,
    );
}

#[test]
fn fail_each_io_operation_of_a_checkpoint() {
    let base = oracle::seed("fail_each_io_operation_of_a_checkpoint");
    let max: u64 = std::env::var("HOLT_COUNTUP_MAX").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    for n in 1..=max {
        case(base.wrapping_add(n), n, false);
        case(base.wrapping_add(n + 100_000), n, true);
    }
}

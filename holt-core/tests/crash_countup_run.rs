//! Invariant: whichever I/O operation of a whole run fails (the n-th, counted from the first
//! write, for every n up to the number the run performs when nothing fails: log appends,
//! fdatasyncs, segment rolls and preallocations, two checkpoints with their frame writes,
//! manifest switch and segment removals), failing once, failing forever, or with the power
//! cut right there, no acknowledged write is lost, none is invented, and the database reopens.
//! This is SQLite's count-up: a fault at every step of a recorded run, rather than at the
//! first or second operation of each kind (`crash_sim_matrix.rs`).
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs) after the run.

mod oracle;

use std::sync::Arc;

use holt_core::io::{Fault, FaultError, SimFs, Vfs};
use holt_core::Db;

/// Writes per run: two checkpoints (every 41st write), several segment rolls.
const WRITES: usize = 90;

const MODES: &[(&str, FaultError, bool)] = &[
    ("EIO once", FaultError::Eio, false),
    ("EIO forever", FaultError::Eio, true),
    ("crash", FaultError::Freeze, true),
];

/// The I/O operations a run of `seed` performs after open when nothing fails.
fn operations_of_run(seed: u64) -> u64 {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    let db = Db::open_with_vfs(vfs, oracle::opts()).expect("open fresh");
    let before = fs.op_count();
    oracle::workload(&db, &fs, &mut rng, WRITES, usize::MAX, None);
    fs.op_count() - before
}

#[test]
fn fail_each_io_operation_of_a_run() {
    let seed = oracle::seed("fail_each_io_operation_of_a_run");
    let total = operations_of_run(seed);
    println!("{total} I/O operations in the run");
    assert!(total > 2 * WRITES as u64, "the run did too little I/O to mean anything: {total}");
    let mut cases = 0;
    for n in 1..=total {
        for (mode, error, forever) in MODES {
            let fault = Fault { op: None, path_contains: None, nth: n, error: *error, forever: *forever };
            oracle::crash_case(seed, WRITES, 0, Some(fault), &format!("count-up n={n}/{total} {mode}"));
            cases += 1;
        }
    }
    println!("{cases} cases");
}

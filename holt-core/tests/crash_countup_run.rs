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

use holt_core::io::{Fault, FaultError, OpKind, SimFs, Vfs};
use holt_core::{Db, Error};

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

/// How far each misdirected write lands from its offset, in 4 KiB pages: the next sector
/// group, a few pages, and a whole frame (128 pages: the same page of the neighbouring slot).
const MISDIRECTS: &[i64] = &[1, -1, 3, -8, 128, -128];

/// Invariant: whichever write of a run is misdirected (it reports success, but its bytes land
/// some pages away and its own range keeps what it held), the reopened database either passes
/// the crash oracle or reports `Error::Corruption`, at open or on a read. It never serves an
/// older state as if it were current: a lost write is detected, not hidden.
#[test]
fn misdirect_each_write_of_a_run() {
    let seed = oracle::seed("misdirect_each_write_of_a_run");
    let (mut cases, mut detected) = (0, 0);
    for n in 1.. {
        let pages = MISDIRECTS[n as usize % MISDIRECTS.len()];
        let fault = Fault {
            op: Some(OpKind::Write),
            path_contains: None,
            nth: n,
            error: FaultError::Misdirect { pages },
            forever: false,
        };
        let context = format!("misdirect write n={n} by {pages} pages seed {seed}");
        match misdirect_case(seed, fault, &context) {
            None => break,
            Some(found) => {
                cases += 1;
                detected += usize::from(found);
            }
        }
    }
    println!("{cases} writes misdirected, {detected} detected as corruption, the rest harmless");
    assert!(cases > WRITES, "the run wrote too little to mean anything: {cases} writes");
}

/// Runs the workload with `fault` armed from the start, crashes, reopens and checks. `None`
/// when the run made fewer writes than the fault's `nth` (it never fired); otherwise whether
/// the damage was reported as corruption (else the oracle held).
fn misdirect_case(seed: u64, fault: Fault, context: &str) -> Option<bool> {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    let db = Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("open fresh");
    let history = oracle::workload(&db, &fs, &mut rng, WRITES, 0, Some(fault));
    if fs.faults_fired() == 0 {
        return None;
    }
    let context = &format!("{context} {:?}", fs.misdirected());
    fs.crash();
    drop(db);
    let db = match Db::open_with_vfs(vfs.clone(), oracle::opts()) {
        Ok(db) => db,
        Err(Error::Corruption { .. }) => return Some(true),
        Err(e) => panic!("{context}: reopen failed other than as corruption: {e}"),
    };
    match db.scan(b"", b"", usize::MAX) {
        Ok(_) => {}
        Err(Error::Corruption { .. }) => return Some(true),
        Err(e) => panic!("{context}: scan failed other than as corruption: {e}"),
    }
    let state = oracle::check(&db, &history, context);
    drop(db);
    oracle::check_stable(|| Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("reopen"), &state, context);
    Some(false)
}

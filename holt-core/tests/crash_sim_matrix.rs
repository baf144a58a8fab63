//! Invariant: a fault at any durability step — EIO once, EIO forever, ENOSPC, or a power cut
//! right there — never loses an acknowledged write, never invents one, and never leaves a
//! state recovery cannot open: after the fault the workload goes on, then the machine
//! crashes and the oracle (tests/oracle/mod.rs) checks the reopened database.
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs). Durability steps are addressed by the kind
//! of I/O operation and the file it touches.

mod oracle;

use holt_core::io::{Fault, FaultError, OpKind};

/// Every durability step: (name, operation kind, file-name fragment).
const STEPS: &[(&str, OpKind, Option<&str>)] = &[
    ("wal append write", OpKind::Write, Some("wal-")),
    ("wal fdatasync", OpKind::Sync, Some("wal-")),
    ("wal segment preallocate", OpKind::Allocate, Some("wal-")),
    ("wal segment create", OpKind::Open, Some("wal-")),
    ("frame write", OpKind::Write, Some("frames")),
    ("frame sync", OpKind::Sync, Some("frames")),
    ("manifest write", OpKind::Write, Some("MANIFEST")),
    ("manifest sync", OpKind::Sync, Some("MANIFEST")),
    ("manifest rename", OpKind::Rename, None),
    ("directory fsync", OpKind::SyncDir, None),
    ("wal segment remove", OpKind::Remove, Some("wal-")),
];

const MODES: &[(&str, FaultError, bool)] = &[
    ("EIO once", FaultError::Eio, false),
    ("EIO forever", FaultError::Eio, true),
    ("ENOSPC", FaultError::Enospc, false),
    ("crash", FaultError::Freeze, true),
];

#[test]
fn every_step_times_every_fault() {
    let base = oracle::seed("every_step_times_every_fault");
    let seeds: u64 = std::env::var("HOLT_MATRIX_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for s in 0..seeds {
        for (i, (step, op, path)) in STEPS.iter().enumerate() {
            for (j, (mode, error, forever)) in MODES.iter().enumerate() {
                let seed = base.wrapping_add(s * 1000 + (i * 10 + j) as u64);
                let fault = Fault {
                    op: Some(*op),
                    path_contains: path.map(str::to_owned),
                    nth: 1 + seed % 2,
                    error: *error,
                    forever: *forever,
                };
                oracle::crash_case(seed, 130, 20, Some(fault), &format!("{step} / {mode}"));
            }
        }
    }
}

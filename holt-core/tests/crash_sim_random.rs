//! Invariant: after a power cut at a random moment (simulated I/O: unsynced writes dropped,
//! kept or torn at 512 B / 4 KiB, unsynced directory changes undone), reopening yields a
//! prefix of the log containing every acknowledged write (see tests/oracle/mod.rs).
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs). The machine freezes at a random I/O
//! operation (all later I/O fails), then crashes; checkpoints run during the workload.

mod oracle;

use holt_core::io::{Fault, FaultError};
use oracle::crash_case;

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

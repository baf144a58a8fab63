//! A panic inside the log never strands the other threads: when the flusher's loop panics, or
//! a writer panics between reserving its record's bytes and publishing them (the flusher would
//! wait at that gap for good), the log is poisoned: a sync write waiting then, or made after,
//! fails instead of waiting forever, the handle drops, and a reopen recovers every sync write
//! acknowledged before. A write made by a destructor while some other panic unwinds is an
//! ordinary write: it does not poison the log.
//!
//! Run: `cargo test -p holt-core --features failpoints --test wal_panics` (the failpoint
//! cases need the feature).

use holt_core::{Db, Durability, Options};

/// Failpoints are process-global: the tests here run one at a time, so the plain one never
/// meets a failpoint the other configured.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn options() -> Options {
    Options { durability: Durability::Sync, ..Options::default() }
}

#[cfg(feature = "failpoints")]
mod failpoints {
    use std::sync::mpsc;
    use std::time::Duration;

    use holt_core::Db;

    use super::{options, serial};

    /// Long enough for any honest wait on this machine; a stranded thread never returns.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// `f` on another thread, or `None` if it has not returned within `PATIENCE`.
    fn within_patience<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (done, result) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(f());
        });
        result.recv_timeout(PATIENCE).ok()
    }

    /// Sync writes before the panic, the panic (`panic` runs it), then a sync write that must fail
    /// and a drop that must return; the reopened database holds the writes acknowledged before.
    fn panic_poisons_the_log(failpoint: &'static str, action: &'static str, panic: impl FnOnce(&Db)) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options()).unwrap();
        for i in 0..10u32 {
            db.put(format!("before/{i:02}").as_bytes(), b"acknowledged").unwrap();
        }
        fail::cfg(failpoint, action).unwrap();
        panic(&db);
        let db = std::sync::Arc::new(db);
        let writer = std::sync::Arc::clone(&db);
        let after = within_patience(move || writer.put(b"after", b"x").map(|_| ()))
            .unwrap_or_else(|| panic!("{failpoint}: a sync write after the panic waited for good"));
        assert!(after.is_err(), "{failpoint}: a sync write after the panic succeeded");
        fail::remove(failpoint);
        let db = std::sync::Arc::into_inner(db).expect("the writer thread has ended");
        within_patience(move || drop(db)).unwrap_or_else(|| panic!("{failpoint}: the drop waited for good"));
        let db = Db::open(dir.path(), options()).unwrap();
        for i in 0..10u32 {
            let got = db.get(format!("before/{i:02}").as_bytes()).unwrap();
            assert_eq!(got.map(|e| e.value), Some(b"acknowledged".to_vec()), "{failpoint}: write {i} lost");
        }
        db.put(b"reopened", b"y").unwrap();
    }

    #[test]
    fn panics_in_the_log_poison_it_rather_than_strand_its_waiters() {
        let _serial = serial();
        // Failpoints are process-global: one test runs both cases in turn.
        let scenario = fail::FailScenario::setup();
        // The flusher panics at the top of its loop, the next time it wakes.
        panic_poisons_the_log("wal-flusher-loop", "panic", |_| {});
        // A writer panics with its record's bytes reserved and unpublished.
        panic_poisons_the_log("wal-append-reserved", "1*panic", |db| {
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.put(b"torn", b"z")));
            assert!(panicked.is_err(), "the failpoint did not panic the write");
        });
        scenario.teardown();
    }
}

/// A sync write from a destructor that runs while an unrelated panic unwinds succeeds, and
/// the log stays healthy: the guard poisons only for a panic that began inside the log.
#[test]
fn a_write_during_another_panics_unwind_does_not_poison_the_log() {
    struct WritesOnDrop<'a>(&'a Db);
    impl Drop for WritesOnDrop<'_> {
        fn drop(&mut self) {
            self.0.put(b"written while unwinding", b"w").unwrap();
        }
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _writes = WritesOnDrop(&db);
        panic!("a panic that has nothing to do with the log");
    }));
    assert!(unwound.is_err());
    db.put(b"after", b"x").expect("the log was poisoned by a write made while unwinding");
    assert_eq!(db.get(b"written while unwinding").unwrap().map(|e| e.value), Some(b"w".to_vec()));
}

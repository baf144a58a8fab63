//! Model checks of `RootCell` (`src/sync/root_cell.rs`), the split-reference-counted cell
//! that publishes frame roots, under every interleaving loom explores.
//!
//! Invariants checked in each model:
//! - a value a reader borrowed is never dropped while the reader's guard lives;
//! - every value the cell let go of is dropped exactly once, by the time every thread is done
//!   (no leak, no double drop), and the value still in the cell is not dropped;
//! - a reader sees either an empty cell or one of the values stored, never anything else;
//! - every access to a holder's value (a writer filling a slot, a reader reading it, the last
//!   give-back taking it out) is ordered by happens-before: the cell keeps values in loom's
//!   `UnsafeCell` under `cfg(loom)`, which fails the model on any unordered pair. (Checked:
//!   a writer's swap with Release instead of AcqRel, or a slot freed and claimed with Relaxed
//!   instead of Release/Acquire, fails two and three of these models.)
//!
//! `store` is `replace` with the value it hands back dropped at once, so the first invariant
//! is also `replace`'s promise: a value it returns to the writer is one no guard can reach
//! (the tree's path copies free the old path on that promise: `Path::put_lent`).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p holt-core --test loom_root_cell --release`
#![cfg(loom)]

#[allow(dead_code)]
#[path = "../src/sync/root_cell.rs"]
mod root_cell;

use std::sync::Arc as StdArc;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use root_cell::RootCell;

/// A value that records its own drop in a shared table (which outlives it).
struct Tracked {
    id: usize,
    drops: Arc<[AtomicUsize; 4]>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

fn tracked(id: usize, drops: &Arc<[AtomicUsize; 4]>) -> StdArc<Tracked> {
    StdArc::new(Tracked { id, drops: Arc::clone(drops) })
}

fn drop_table() -> Arc<[AtomicUsize; 4]> {
    Arc::new([AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)])
}

/// A reader: loads, checks the value it borrowed is alive across a yield point, drops the guard.
fn read(cell: &RootCell<StdArc<Tracked>>, drops: &Arc<[AtomicUsize; 4]>, allowed: &[usize]) {
    let guard = cell.load();
    if let Some(value) = guard.get() {
        let (id, at) = (value.id, StdArc::as_ptr(value));
        assert!(allowed.contains(&id), "reader saw a value never stored: {id}");
        assert_eq!(drops[id].load(Ordering::SeqCst), 0, "value {id} dropped under a guard");
        thread::yield_now();
        // The same value, still alive: a holder reused under a live guard would show another.
        let again = guard.get().expect("a guard keeps its value");
        assert!(again.id == id && StdArc::as_ptr(again) == at, "the guard's value changed under it");
        assert_eq!(drops[id].load(Ordering::SeqCst), 0, "value {id} dropped under a guard");
    }
}

fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Two readers against a writer that replaces the value twice: covers a reader giving back
/// through the word, a reader giving back after the swap (early, before the writer settles,
/// and late, after), and the writer freeing the old holder itself.
#[test]
fn two_readers_one_writer() {
    model(|| {
        let drops = drop_table();
        let cell = Arc::new(RootCell::empty());
        cell.store(Some(tracked(0, &drops)));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, drops) = (Arc::clone(&cell), Arc::clone(&drops));
                thread::spawn(move || read(&cell, &drops, &[0, 1, 2]))
            })
            .collect();
        cell.store(Some(tracked(1, &drops)));
        cell.store(Some(tracked(2, &drops)));
        for r in readers {
            r.join().unwrap();
        }
        for id in 0..2 {
            assert_eq!(
                drops[id].load(Ordering::SeqCst),
                1,
                "value {id} dropped {} times",
                drops[id].load(Ordering::SeqCst)
            );
        }
        assert_eq!(drops[2].load(Ordering::SeqCst), 0, "the current value was dropped");
        drop(cell);
        assert_eq!(drops[2].load(Ordering::SeqCst), 1, "dropping the cell drops its value");
    });
}

/// A reader against a writer that empties the cell and fills it again (eviction and reload):
/// covers a borrow taken on an empty cell and given back after it was refilled, and a reader
/// holding two guards at once.
#[test]
fn empty_and_refill() {
    model(|| {
        let drops = drop_table();
        let cell = Arc::new(RootCell::empty());
        cell.store(Some(tracked(0, &drops)));
        let reader = {
            let (cell, drops) = (Arc::clone(&cell), Arc::clone(&drops));
            thread::spawn(move || {
                let outer = cell.load();
                read(&cell, &drops, &[0, 1]);
                if let Some(value) = outer.get() {
                    assert_eq!(drops[value.id].load(Ordering::SeqCst), 0, "outer guard's value dropped");
                }
            })
        };
        cell.store(None);
        cell.store(Some(tracked(1, &drops)));
        reader.join().unwrap();
        assert_eq!(drops[0].load(Ordering::SeqCst), 1, "the evicted value was not dropped exactly once");
        assert_eq!(drops[1].load(Ordering::SeqCst), 0, "the current value was dropped");
        assert_eq!(cell.load_full().map(|v| v.id), Some(1));
    });
}

/// Two writers racing (the latch normally serializes them; the cell must not rely on it)
/// with a reader: every replaced value is dropped once.
#[test]
fn two_writers_one_reader() {
    model(|| {
        let drops = drop_table();
        let cell = Arc::new(RootCell::empty());
        cell.store(Some(tracked(0, &drops)));
        let writer = {
            let (cell, drops) = (Arc::clone(&cell), Arc::clone(&drops));
            thread::spawn(move || cell.store(Some(tracked(1, &drops))))
        };
        let reader = {
            let (cell, drops) = (Arc::clone(&cell), Arc::clone(&drops));
            thread::spawn(move || read(&cell, &drops, &[0, 1, 2]))
        };
        cell.store(Some(tracked(2, &drops)));
        writer.join().unwrap();
        reader.join().unwrap();
        let last = cell.load_full().map(|v| v.id).expect("a value");
        for id in 0..3 {
            let expected = usize::from(id != last);
            assert_eq!(drops[id].load(Ordering::SeqCst), expected, "value {id}");
        }
    });
}

/// Both inline slots held by guards, so the third value goes to a boxed holder; a reader
/// borrows it while the writer replaces it, so the reader's late give-back or the writer's
/// settle frees the box, whichever comes second.
#[test]
fn boxed_holder_freed_by_a_late_reader() {
    model(|| {
        let drops = drop_table();
        let cell = Arc::new(RootCell::empty());
        cell.store(Some(tracked(0, &drops)));
        let g0 = cell.load();
        cell.store(Some(tracked(1, &drops)));
        let g1 = cell.load();
        cell.store(Some(tracked(2, &drops)));
        assert!(cell.holds_boxed(), "both slots are held, so value 2 must be boxed");
        let reader = {
            let (cell, drops) = (Arc::clone(&cell), Arc::clone(&drops));
            thread::spawn(move || read(&cell, &drops, &[2, 3]))
        };
        cell.store(Some(tracked(3, &drops)));
        reader.join().unwrap();
        assert_eq!(drops[2].load(Ordering::SeqCst), 1, "the boxed value was not dropped exactly once");
        drop((g0, g1));
        for id in 0..3 {
            assert_eq!(drops[id].load(Ordering::SeqCst), 1, "value {id}");
        }
        assert_eq!(drops[3].load(Ordering::SeqCst), 0, "the current value was dropped");
    });
}

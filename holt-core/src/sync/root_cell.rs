//! `RootCell`: an `Option<T>` that readers load without locks and writers replace at a
//! cost that does not grow with the number of threads (split reference counting). `T` is a
//! handle that owns what readers walk (a frame root: a pointer to the root node, itself
//! reference counted), kept in the cell itself so a reader reaches the node in one step.
//!
//! The cell's word packs a `Holder` (which owns one `T`) in its low 48 bits and a borrow
//! count in its high 16 bits. A holder is one of the cell's own `INLINE` slots, named by its
//! index (1..=INLINE), or, when every slot still has readers, a boxed one named by its
//! address. Reading through an inline slot costs no extra cache miss: it sits in the cell. A reader borrows with one `fetch_add` on the word
//! and reads through the holder; it gives the borrow back by decrementing the count, if the
//! word still names its holder. A writer swaps in a new holder and moves the count it swapped
//! out (the borrows still outstanding on the old holder) into the old holder's own counter;
//! each late reader then gives its borrow back there instead, and whoever brings that counter
//! to zero frees the holder and drops its `T`. Usually nobody is borrowing when a writer
//! swaps, and the writer frees the old holder (and its root) at once, while it is hot.
//!
//! `arc_swap`, used before, made every store scan a slot list per thread that ever loaded
//! (one compare-and-swap per slot): with 64 writer threads that scan was a fifth of all CPU
//! time (see ARCHITECTURE.md, "Measured and rejected").
//!
//! Invariants:
//! - A holder is freed exactly once, after every borrow taken on it was given back: its
//!   counter starts at 0, early givers-back (who see the word changed before the writer moved
//!   the count) take it below zero, the writer adds the count it swapped out, and it reaches
//!   zero only after the writer's add and the last give-back, whichever comes second.
//! - While the word names a holder, that holder is alive and its borrow count is at least
//!   the number of borrowers that have not given back through the word. A holder (slot or
//!   address) is reused only after it is freed, so a reader that finds its holder in the
//!   word has found its own holder, not a later use of it (no ABA).
//! - An inline slot is written only by the writer that claimed it (FREE to USED) and freed
//!   (USED to FREE) only after its value was taken out; readers read it only while borrowing.
//! - The count never carries into the pointer bits: a borrow that finds the count at
//!   `BORROW_LIMIT` or above gives it back and waits (only reachable with more than 32,767
//!   guards on one cell at once).
//!
//! Boxed holders require user-space addresses below 2^48 (x86-64 and AArch64 Linux hand out
//! higher ones only to a mapping that asks for them); checked when one is made.
#![expect(unsafe_code, reason = "split reference counting hands out references through raw holder pointers")]

use std::marker::PhantomData;

// Under loom, holder values sit in loom's `UnsafeCell`, which reports any two accesses not
// ordered by happens-before (a writer filling a slot a reader may still read, say).
#[cfg(loom)]
use loom::cell::UnsafeCell;
#[cfg(loom)]
use loom::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};

/// `std::cell::UnsafeCell` with loom's access API (`with`, `with_mut`).
#[cfg(not(loom))]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline]
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

const PTR_BITS: u32 = 48;
const PTR_MASK: u64 = (1 << PTR_BITS) - 1;
const ONE_BORROW: u64 = 1 << PTR_BITS;
/// Borrows at or above this count wait; the 15 bits above it absorb the transient
/// over-increments of readers that will give theirs straight back.
const BORROW_LIMIT: u64 = 1 << 15;
/// Holders kept inside the cell. Two suffice when replacements rarely meet readers: the one
/// the word names, and one still draining late readers.
const INLINE: usize = 2;

const FREE: u8 = 0;
const USED: u8 = 1;
const BOXED: u8 = 2;

struct Holder<T> {
    /// Outstanding borrows as this holder knows them: see the module's invariants. Within
    /// ±2^16 (the word's count), so 32 bits hold it and a 16-byte `T` keeps a holder at 24.
    borrows: AtomicI32,
    /// FREE or USED for an inline slot; BOXED for a boxed holder.
    state: AtomicU8,
    /// Set while the holder is in use (written only by the writer that claimed the slot).
    value: UnsafeCell<Option<T>>,
}

impl<T> Holder<T> {
    fn new(state: u8, value: Option<T>) -> Self {
        Holder { borrows: AtomicI32::new(0), state: AtomicU8::new(state), value: UnsafeCell::new(value) }
    }
}

/// See the module documentation.
pub(crate) struct RootCell<T> {
    word: AtomicU64,
    slots: [Holder<T>; INLINE],
    _owns: PhantomData<Option<T>>,
}

// A frame cell keeps its root cell and two flags in one 64-byte line (`buffer::FrameCell`),
// with a root handle of two words whose `Option` needs no third (a tree node: its kind and a
// non-null pointer).
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<RootCell<(std::num::NonZeroUsize, usize)>>() == 56);

// SAFETY: the cell owns `T`s (through holders), hands out `&T` to other threads and drops a
// `T` on whichever thread gives back the last borrow: sound when `T: Send + Sync`. Holder
// values are written only by the thread that claimed the holder (module invariants).
unsafe impl<T: Send + Sync> Send for RootCell<T> {}
unsafe impl<T: Send + Sync> Sync for RootCell<T> {}

/// A borrowed view of the cell's value at the time of `load`; gives the borrow back on drop.
pub(crate) struct RootGuard<'a, T> {
    cell: &'a RootCell<T>,
    /// The holder's tag in the word (0: the cell was empty).
    tag: u64,
}

impl<T> RootCell<T> {
    pub(crate) fn empty() -> Self {
        RootCell {
            word: AtomicU64::new(0),
            slots: [Holder::new(FREE, None), Holder::new(FREE, None)],
            _owns: PhantomData,
        }
    }

    /// The holder a nonzero tag names.
    #[inline]
    fn holder(&self, tag: u64) -> *const Holder<T> {
        debug_assert_ne!(tag, 0);
        if tag <= INLINE as u64 {
            &self.slots[tag as usize - 1]
        } else {
            tag as *const Holder<T>
        }
    }

    /// The current value, borrowed: never waits for writers.
    #[inline]
    pub(crate) fn load(&self) -> RootGuard<'_, T> {
        loop {
            // Acquire: the holder's contents were written before the store that published it.
            let word = self.word.fetch_add(ONE_BORROW, Ordering::Acquire);
            let tag = word & PTR_MASK;
            if word >> PTR_BITS >= BORROW_LIMIT {
                self.give_back(tag);
                #[cfg(loom)]
                loom::thread::yield_now();
                #[cfg(not(loom))]
                std::thread::yield_now();
                continue;
            }
            if tag == 0 {
                self.give_back(0);
            }
            return RootGuard { cell: self, tag };
        }
    }

    /// Whether the current value sits in a boxed holder (both inline slots were busy).
    #[cfg(test)]
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn holds_boxed(&self) -> bool {
        self.word.load(Ordering::Relaxed) & PTR_MASK > INLINE as u64
    }

    /// The current value, cloned out of the cell.
    pub(crate) fn load_full(&self) -> Option<T>
    where
        T: Clone,
    {
        self.load().get().cloned()
    }

    /// Replaces the value. The old one is dropped here unless a reader still borrows it, in
    /// which case the last such reader drops it.
    pub(crate) fn store(&self, value: Option<T>) {
        drop(self.replace(value));
    }

    /// Replaces the value and returns the old one if no reader borrowed it at the swap: the
    /// caller then owns it, and no reader can reach it any more. `None` if the cell was
    /// empty, or if a reader still borrows the old value: the last such reader drops it.
    pub(crate) fn replace(&self, value: Option<T>) -> Option<T> {
        let new = match value {
            Some(value) => self.claim(value),
            None => 0,
        };
        // AcqRel: Release publishes the new holder; Acquire makes every give-back through the
        // word (Release) happen before the old holder is freed below.
        let old = self.word.swap(new, Ordering::AcqRel);
        let tag = old & PTR_MASK;
        if tag == 0 {
            return None;
        }
        // SAFETY: `tag` was the cell's holder: alive until its counter reaches zero, which
        // needs this add.
        unsafe { self.settle(tag, (old >> PTR_BITS) as i32) }
    }

    /// A holder for `value`: a free inline slot if there is one, else a boxed holder.
    fn claim(&self, value: T) -> u64 {
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.state.compare_exchange(FREE, USED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                // SAFETY: claiming the slot made this thread its only user: no reader borrows a
                // free slot, and its previous value was taken out before it was freed.
                slot.value.with_mut(|v| unsafe { *v = Some(value) });
                // A freed slot's counter is already back at zero (that is what freed it).
                debug_assert_eq!(slot.borrows.load(Ordering::Relaxed), 0);
                return i as u64 + 1;
            }
        }
        let holder = Box::into_raw(Box::new(Holder::new(BOXED, None)));
        let addr = holder as u64;
        if addr & !PTR_MASK != 0 || addr <= INLINE as u64 {
            // SAFETY: just made, never published.
            drop(unsafe { Box::from_raw(holder) });
            // Never dropped on this path: the value may be a path copy lending its children's
            // counts (`Inner::with_child_lent`), and dropping it would give back counts it
            // does not own. Leaked; the caller's loan settles through the old root.
            std::mem::forget(value);
            panic!("RootCell needs addresses below 2^48, got {addr:#x}");
        }
        // SAFETY: just made, never published: this thread is its only user.
        unsafe { &*holder }.value.with_mut(|v| unsafe { *v = Some(value) });
        addr
    }

    /// Adds `delta` to a holder the cell no longer names; if that brings its counter to
    /// zero, frees the holder and returns its value.
    ///
    /// # Safety
    /// The holder `tag` names must be alive: either the caller is the writer that swapped it
    /// out (adding the count it swapped out), or a reader with a borrow on it (adding -1).
    unsafe fn settle(&self, tag: u64, delta: i32) -> Option<T> {
        let holder = self.holder(tag);
        // SAFETY: alive per the contract.
        let before = unsafe { (*holder).borrows.fetch_add(delta, Ordering::AcqRel) };
        if before + delta != 0 {
            return None;
        }
        // The counter reached zero: the writer's add and every borrower's give-back have all
        // happened (module invariants), so nobody else can reach the holder.
        // SAFETY: as above, this thread is the holder's only user now.
        unsafe {
            if (*holder).state.load(Ordering::Relaxed) == BOXED {
                Box::from_raw(holder as *mut Holder<T>).value.with_mut(|v| (*v).take())
            } else {
                let value = (*holder).value.with_mut(|v| (*v).take());
                // Release: the take above happens before the next claim writes the slot.
                (*holder).state.store(FREE, Ordering::Release);
                value
            }
        }
    }

    /// Gives back one borrow taken on the holder `tag` names (0: the cell was empty).
    #[inline]
    fn give_back(&self, tag: u64) {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & PTR_MASK != tag {
                // The holder was swapped out: its writer counted this borrow into it.
                if tag != 0 {
                    // SAFETY: this borrow keeps the holder alive until this call.
                    drop(unsafe { self.settle(tag, -1) });
                }
                return;
            }
            if word >> PTR_BITS == 0 {
                // Only an empty cell gets here (a holder in the word counts this borrow): it
                // was emptied and refilled meanwhile, and an empty cell's borrows hold nothing.
                debug_assert_eq!(tag, 0);
                return;
            }
            // Release: this reader's use of the holder happens before whoever frees it.
            match self.word.compare_exchange_weak(
                word,
                word - ONE_BORROW,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
    }
}

impl<T> Drop for RootCell<T> {
    fn drop(&mut self) {
        // No guard outlives the cell (guards borrow it), so only the value itself is left.
        self.store(None);
    }
}

impl<T> RootGuard<'_, T> {
    /// The value borrowed, if the cell held one.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        if self.tag == 0 {
            return None;
        }
        // SAFETY: the borrow this guard holds keeps the holder alive, and its value set,
        // until the guard drops.
        unsafe { (*self.cell.holder(self.tag)).value.with(|v| (*v).as_ref()) }
    }

    pub(crate) fn is_some(&self) -> bool {
        self.tag != 0
    }

    pub(crate) fn is_none(&self) -> bool {
        self.tag == 0
    }
}

impl<T> Drop for RootGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.tag != 0 {
            self.cell.give_back(self.tag);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Guards held across replacements: both inline slots busy, so the third value goes to a
    /// boxed holder; each old value is dropped exactly when its last guard goes.
    #[test]
    fn held_guards_outlive_replacements() {
        let values: Vec<Arc<u32>> = (0..4).map(Arc::new).collect();
        let cell: RootCell<Arc<u32>> = RootCell::empty();
        assert!(cell.load().is_none());
        cell.store(Some(Arc::clone(&values[0])));
        let g0 = cell.load();
        cell.store(Some(Arc::clone(&values[1])));
        let g1 = cell.load();
        let g1b = cell.load();
        cell.store(Some(Arc::clone(&values[2])));
        assert!(cell.load().get().is_some_and(|v| **v == 2));
        let g2 = cell.load();
        assert!(cell.holds_boxed(), "expected a boxed holder");
        cell.store(Some(Arc::clone(&values[3])));
        assert_eq!((*g0.get().unwrap().as_ref(), **g1.get().unwrap(), **g2.get().unwrap()), (0, 1, 2));
        assert_eq!(Arc::strong_count(&values[0]), 2, "the cell's copy of 0 lives while g0 does");
        drop(g0);
        assert_eq!(Arc::strong_count(&values[0]), 1);
        drop(g1);
        assert_eq!(Arc::strong_count(&values[1]), 2);
        drop(g1b);
        assert_eq!(Arc::strong_count(&values[1]), 1);
        drop(g2);
        assert_eq!(Arc::strong_count(&values[2]), 1);
        assert_eq!(cell.load_full().map(|v| *v), Some(3));
        cell.store(None);
        assert!(cell.load().get().is_none());
        assert_eq!(Arc::strong_count(&values[3]), 1);
        cell.store(Some(Arc::clone(&values[1])));
        drop(cell);
        assert_eq!(Arc::strong_count(&values[1]), 1, "dropping the cell drops its value");
    }

    /// Many threads loading while one replaces: every value is dropped once, none early.
    #[test]
    fn concurrent_loads_and_stores() {
        let cell: Arc<RootCell<Arc<u64>>> = Arc::new(RootCell::empty());
        let values: Vec<Arc<u64>> = (0..2000).map(Arc::new).collect();
        cell.store(Some(Arc::clone(&values[0])));
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let cell = Arc::clone(&cell);
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..200_000 {
                        let guard = cell.load();
                        let v = **guard.get().expect("never emptied");
                        assert!(v >= last, "values go forward: {v} after {last}");
                        last = v;
                    }
                })
            })
            .collect();
        for v in &values[1..] {
            cell.store(Some(Arc::clone(v)));
        }
        for r in readers {
            r.join().expect("reader");
        }
        for v in &values[..1999] {
            assert_eq!(Arc::strong_count(v), 1, "value {v} leaked or still held");
        }
        assert_eq!(Arc::strong_count(&values[1999]), 2);
    }
}

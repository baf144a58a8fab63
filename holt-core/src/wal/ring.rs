//! The log ring: a bounded byte ring shared by every writer, drained by one flusher.
//!
//! Protocol (each step names the invariant it keeps):
//!
//! 1. **Reserve.** A writer claims `len` bytes with ONE compare-and-swap on `head`, after
//!    checking that the range fits in the ring (`head + len - tail <= capacity`) and under the
//!    disk-space limit (`head + len <= limit`). Reservations therefore tile the log stream with
//!    no gaps and no overlaps, and a record's byte position is its place in the log order.
//! 2. **Copy.** Writers copy their records into their own ranges in parallel. The ring is an
//!    array of `AtomicU64` words, so copying is plain relaxed word stores: no `unsafe`, and a
//!    flusher can never observe a torn word.
//! 3. **Publish.** The writer stores the record's first word (never zero: it holds the magic and
//!    the length) LAST, with `Release`. A zero first word means "reserved or free, not published".
//! 4. **Drain.** The single flusher reads first words at `tail` with `Acquire`. It takes records
//!    while they are published and stops at the first unpublished one: it only ever copies the
//!    CONTIGUOUS published prefix, never a reserved-but-unpublished gap. It zeroes every word it
//!    takes (so a stale word can never look published on the next lap) and only then advances
//!    `tail` with `Release`, which hands the space back to writers.
//! 5. **Durable.** The flusher numbers its syncs: before each fdatasync it publishes the
//!    sync's number and the log position it covers (`begin_sync`); after it, it advances
//!    `durable` and wakes the writers waiting for that sync (`end_sync`). Concurrent writers share one
//!    fdatasync (group commit). A waiting writer sleeps on one futex word with the bit of the
//!    sync it waits for (the one in progress if it covers the record, else the next), and
//!    the flusher wakes every writer of a sync with ONE `FUTEX_WAKE_BITSET` call: a sync that
//!    covers 50 of 64 waiting writers wakes those 50, in one system call, and leaves the 14
//!    whose records came too late asleep. (Unparking 50 writers one call at a time kept the
//!    flusher from its next fdatasync for ~120 µs here: woken writers preempted it between
//!    calls.)
//! 6. **Async waiters.** A writer on an async runtime does not sleep: it polls
//!    (`poll_durable`), which registers its task's waker, keyed by the position it waits
//!    for, in `wakers`. `end_sync` takes the wakers its sync covers out under the lock and
//!    wakes them after dropping it. Registration and the check after it pair with the
//!    flusher's advance of `durable` and its look at `async_waiters` through two RMWs on
//!    `async_waiters` (the `space_waiters` handshake), so the flusher takes the lock only
//!    when a task waits and a waker is never left behind a sync that covered it.
//!
//! Bounded memory: a writer that does not fit parks on a condition variable until the flusher
//! frees space; the ring never grows.
//!
//! Wake-ups use an event count (`epoch`): a writer that wants the flusher awake bumps it with
//! an RMW, and the flusher goes to sleep only by CAS-ing the epoch it saw when it last found no
//! work to one with the SLEEPING bit. RMWs on one location are totally ordered, so either the
//! CAS fails (the flusher rescans) or the writer's RMW sees the bit and notifies under the lock
//! the flusher holds until it waits: no lost wake-up, without relying on SeqCst fences.
//! A flusher that will wake up on its own within the flush interval sleeps LAZY: writers of
//! records that nobody waits for (`nudge_flusher`) then only bump the count, with no system
//! call; writers that need it now (`wake_flusher`) wake it either way.
//!
//! This file is self-contained (std or loom only) so `tests/loom_ring.rs` can model-check it.

#[cfg(loom)]
use loom::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering},
        Condvar, Mutex, MutexGuard,
    },
    thread::{current as current_thread, park, Thread},
};
#[cfg(not(loom))]
use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering},
    Condvar, Mutex, MutexGuard,
};
#[cfg(all(not(loom), not(target_os = "linux")))]
use std::{
    sync::atomic::AtomicU32,
    thread::{current as current_thread, park, Thread},
};

use std::collections::BTreeMap;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The ring accepts reservations.
const STATE_OPEN: u8 = 0;
/// An fsync failed: refuse new reservations, wake every waiter with an error.
const STATE_POISONED: u8 = 1;
/// Closing: refuse new reservations; the flusher drains what is left and exits.
const STATE_CLOSED: u8 = 2;

/// Low bit of `epoch`: the flusher is asleep (or about to sleep) and must be notified.
const SLEEPING: u64 = 1;
/// Second bit of `epoch`: the sleeping flusher's timer fires within the flush interval, so
/// writers that can wait that long need not wake it.
const LAZY: u64 = 2;
/// One event in `epoch` (above the two flag bits).
const EVENT: u64 = 4;

/// Why a reservation or a wait did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The reservation would pass the disk-space limit: refused, nothing reserved.
    DiskFull,
    /// The ring was poisoned by a failed fsync.
    Poisoned,
    /// The ring is closed.
    Closed,
    /// The record is larger than the ring could ever hold.
    TooLarge,
}

/// The bytes of a unit's first word hold its length in the upper 32 bits (the WAL record's
/// `len` field); units occupy that length rounded up to 8 bytes.
pub fn unit_padded_len(first_word: u64) -> u64 {
    ((first_word >> 32) + 7) & !7
}

/// The shared log ring. Positions are byte offsets in the log stream (monotonic, 8-aligned);
/// the ring index of position `p` is `(p / 8) & mask`.
pub struct Ring {
    words: Box<[AtomicU64]>,
    mask: u64,
    capacity_bytes: u64,
    /// Next position to reserve.
    head: AtomicU64,
    /// Everything before `tail` has been copied out by the flusher; space before it is free.
    tail: AtomicU64,
    /// Reservations must end at or before this position (disk space available in the log).
    limit: AtomicU64,
    /// Set by the flusher when the log could not get more disk space (preallocating the next
    /// segment failed). A reservation past `limit` then fails with DiskFull; while this is
    /// clear, the next segment is on its way and the reservation waits for `limit` to move,
    /// like a writer waiting for ring space (same registration protocol, `space_waiters`).
    space_exhausted: AtomicBool,
    /// Everything before `durable` is on disk (or, in async mode, written and synced).
    durable: AtomicU64,
    /// Event count for flusher wake-ups (see the module docs): events << 2 | LAZY | SLEEPING.
    epoch: AtomicU64,
    state: AtomicU8,
    /// Writers parked for space. Registered with an RMW before checking the
    /// condition; the flusher reads them with an RMW after advancing `tail`. Two
    /// RMWs on one location are ordered, so either the flusher sees the waiter (and takes the
    /// lock to notify) or the waiter's RMW synchronizes with the flusher's and its check sees
    /// the advanced position. The flusher skips the lock when nobody waits.
    space_waiters: AtomicU64,
    lock: Mutex<()>,
    flusher_cv: Condvar,
    space_cv: Condvar,
    /// The number of the last sync the flusher began (`begin_sync`); 0 before the first.
    sync_started: AtomicU64,
    /// The log position each of the last `ROUNDS` syncs covers, at its number mod `ROUNDS`.
    sync_covers: [AtomicU64; ROUNDS as usize],
    /// Writers waiting for `durable` sleep here. Changed after every advance of `durable`
    /// and on poisoning, so a writer that read it before checking `durable` cannot sleep
    /// through a wake-up (see `wait_durable`).
    durable_word: DurableWord,
    /// Tasks waiting for `durable` (see `poll_durable`), and how many there are. The count
    /// changes only under the lock, with an RMW; the flusher reads it with an RMW after
    /// advancing `durable` and takes the lock only when it is not zero.
    wakers: Mutex<Wakers>,
    async_waiters: AtomicU64,
}

/// The wakers of tasks waiting for durability, by (position waited for, registration number):
/// the ones a sync covers are a prefix of the map.
#[derive(Default)]
struct Wakers {
    by_end: BTreeMap<(u64, u64), Waker>,
    next: u64,
}

/// A task's registration with `Ring::poll_durable`: kept by the waiting future between polls
/// and handed to `Ring::forget_waiter` when it is dropped before it finished.
#[derive(Debug, Default)]
pub struct WaiterSlot(Option<(u64, u64)>);

/// Syncs a waiter can name: the bits of a futex bitset.
const ROUNDS: u64 = 32;

/// The futex bit of sync number `round` (numbers `ROUNDS` apart share a bit, which only ever
/// costs a spurious wake-up).
fn round_bit(round: u64) -> u32 {
    1 << (round % ROUNDS)
}

/// A word to sleep on until a wake-up names one of the sleeper's bits: a Linux futex
/// (`FUTEX_WAIT_BITSET`, `FUTEX_WAKE_BITSET`).
#[cfg(all(target_os = "linux", not(loom)))]
struct DurableWord(linux_futex::Futex<linux_futex::Private>);

#[cfg(all(target_os = "linux", not(loom)))]
impl DurableWord {
    fn new() -> DurableWord {
        DurableWord(linux_futex::Futex::new(0))
    }
    fn value(&self) -> u32 {
        self.0.value.load(Ordering::Acquire)
    }
    fn bump(&self) {
        self.0.value.fetch_add(1, Ordering::AcqRel);
    }
    /// Sleeps unless the word no longer holds `seen`, until a `wake` names one of `bits`.
    /// May return early (a signal, a changed word): callers look again and loop.
    fn wait(&self, seen: u32, bits: u32) {
        let _ = self.0.wait_bitset(seen, bits);
    }
    /// Wakes every sleeper with one of `bits`, in one system call.
    fn wake(&self, bits: u32) {
        self.0.wake_bitset(i32::MAX, bits);
    }
}

/// The same contract from a mutex and thread parking: under loom (which models it) and
/// off Linux. The sleeper checks the word and queues under the lock the waker takes after
/// changing the word, as the kernel does with its futex hash bucket.
#[cfg(any(loom, not(target_os = "linux")))]
struct DurableWord {
    value: AtomicU32,
    sleepers: Mutex<Vec<(u32, Thread)>>,
}

#[cfg(any(loom, not(target_os = "linux")))]
impl DurableWord {
    fn new() -> DurableWord {
        DurableWord { value: AtomicU32::new(0), sleepers: Mutex::new(Vec::new()) }
    }
    fn value(&self) -> u32 {
        self.value.load(Ordering::Acquire)
    }
    fn bump(&self) {
        self.value.fetch_add(1, Ordering::AcqRel);
    }
    fn sleepers(&self) -> MutexGuard<'_, Vec<(u32, Thread)>> {
        // Entries are pushed and removed whole: a panic while it was held broke nothing.
        self.sleepers.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn wait(&self, seen: u32, bits: u32) {
        let me = current_thread();
        {
            let mut sleepers = self.sleepers();
            if self.value.load(Ordering::Acquire) != seen {
                return;
            }
            sleepers.push((bits, me.clone()));
        }
        park();
        // Still queued only after a spurious wake-up.
        self.sleepers().retain(|(_, thread)| thread.id() != me.id());
    }
    fn wake(&self, bits: u32) {
        let woken: Vec<Thread> = {
            let mut sleepers = self.sleepers();
            let mut woken = Vec::new();
            sleepers.retain(|(mine, thread)| {
                let wake = mine & bits != 0;
                if wake {
                    woken.push(thread.clone());
                }
                !wake
            });
            woken
        };
        for thread in woken {
            thread.unpark();
        }
    }
}

impl Ring {
    /// A ring of `capacity_bytes` (a power of two, at least 16) whose stream starts at `start`.
    pub fn new(capacity_bytes: usize, start: u64) -> Ring {
        // 16 bytes is enough for the model checks; the log itself uses at least 4 KiB.
        assert!(capacity_bytes.is_power_of_two() && capacity_bytes >= 16, "ring capacity {capacity_bytes}");
        assert_eq!(start & 7, 0, "log positions are 8-aligned");
        let words: Vec<AtomicU64> = (0..capacity_bytes / 8).map(|_| AtomicU64::new(0)).collect();
        Ring {
            words: words.into_boxed_slice(),
            mask: (capacity_bytes / 8 - 1) as u64,
            capacity_bytes: capacity_bytes as u64,
            head: AtomicU64::new(start),
            tail: AtomicU64::new(start),
            limit: AtomicU64::new(u64::MAX),
            space_exhausted: AtomicBool::new(false),
            durable: AtomicU64::new(start),
            epoch: AtomicU64::new(0),
            state: AtomicU8::new(STATE_OPEN),
            space_waiters: AtomicU64::new(0),
            lock: Mutex::new(()),
            flusher_cv: Condvar::new(),
            space_cv: Condvar::new(),
            sync_started: AtomicU64::new(0),
            sync_covers: std::array::from_fn(|_| AtomicU64::new(0)),
            durable_word: DurableWord::new(),
            wakers: Mutex::new(Wakers::default()),
            async_waiters: AtomicU64::new(0),
        }
    }

    /// Next position to be reserved: every record before it has been reserved.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub fn tail(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }

    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Sets the disk-space limit (only the flusher calls this).
    pub fn set_limit(&self, limit: u64) {
        // The flusher sets it on every pass; only a change can unblock a waiter.
        if self.limit.swap(limit, Ordering::AcqRel) != limit {
            self.notify_space_waiters();
        }
    }

    /// Records whether the log is out of disk space (only the flusher calls this): see
    /// `space_exhausted`.
    pub fn set_space_exhausted(&self, exhausted: bool) {
        if self.space_exhausted.swap(exhausted, Ordering::AcqRel) != exhausted {
            self.notify_space_waiters();
        }
    }

    /// Wakes writers parked in `wait_for_space` or `wait_for_limit`. The RMW pairs with the
    /// waiters' registration (see `space_waiters`); the lock is taken only if someone waits.
    fn notify_space_waiters(&self) {
        if self.space_waiters.fetch_add(0, Ordering::AcqRel) != 0 {
            let _guard = self.guard();
            self.space_cv.notify_all();
        }
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        // The mutex protects no data (only the wait/notify handshake), so a panic while it was
        // held cannot have left anything inconsistent: ignore poisoning.
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_state(&self) -> Result<(), RingError> {
        match self.state.load(Ordering::Acquire) {
            STATE_OPEN => Ok(()),
            STATE_POISONED => Err(RingError::Poisoned),
            _ => Err(RingError::Closed),
        }
    }

    /// Reserves `len` bytes (a multiple of 8) and returns the start position. Parks while the
    /// ring is full. Fails without reserving when the disk limit would be passed.
    pub fn reserve(&self, len: u64) -> Result<u64, RingError> {
        debug_assert!(len & 7 == 0 && len >= 8);
        if len > self.capacity_bytes {
            return Err(RingError::TooLarge);
        }
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            self.check_state()?;
            // Acquire pairs with the flusher's Release store of `tail`: its zeroing of the
            // freed words happens before our stores into them.
            let tail = self.tail.load(Ordering::Acquire);
            // `head` may be stale (loaded before other writers reserved and the flusher
            // drained past it): then `tail` can exceed `head + len`. Nothing is full then, and
            // the compare-and-swap below fails and reloads `head`.
            if (head + len).saturating_sub(tail) > self.capacity_bytes {
                self.wait_for_space(head, len);
                head = self.head.load(Ordering::Relaxed);
                continue;
            }
            if head + len > self.limit.load(Ordering::Acquire) {
                if self.space_exhausted.load(Ordering::Acquire) {
                    return Err(RingError::DiskFull);
                }
                self.wait_for_limit(head + len);
                head = self.head.load(Ordering::Relaxed);
                continue;
            }
            match self.head.compare_exchange_weak(head, head + len, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok(head),
                Err(current) => head = current,
            }
        }
    }

    fn wait_for_space(&self, head: u64, len: u64) {
        self.park_while(|| {
            self.head.load(Ordering::Relaxed) == head
                && (head + len).saturating_sub(self.tail.load(Ordering::Acquire)) > self.capacity_bytes
        });
    }

    /// Parks until a reservation ending at `end` fits under the disk limit, the log is out of
    /// space, or the ring is no longer open (the caller re-checks each).
    fn wait_for_limit(&self, end: u64) {
        self.park_while(|| {
            end > self.limit.load(Ordering::Acquire) && !self.space_exhausted.load(Ordering::Acquire)
        });
    }

    /// Parks a writer while the ring is open and `blocked()` holds: ring space (`tail`) or log
    /// space (`limit`, `space_exhausted`), both of which the flusher changes and then wakes
    /// through `notify_space_waiters`.
    fn park_while(&self, blocked: impl Fn() -> bool) {
        let mut guard = self.guard();
        self.space_waiters.fetch_add(1, Ordering::AcqRel);
        // See `space_waiters`: after registering, a check that still sees the old state means
        // the flusher's later RMW will see us and notify under the lock we hold until waiting.
        while self.state.load(Ordering::Acquire) == STATE_OPEN && blocked() {
            // Ask the flusher to run: to drain a full ring, or to collect the next segment.
            self.bump_locked();
            guard = self.space_cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.space_waiters.fetch_sub(1, Ordering::AcqRel);
        drop(guard);
    }

    /// Copies `unit` (a multiple of 8 bytes whose first word is non-zero) into the range
    /// reserved at `pos`, publishing it with its first word, and wakes the flusher if it
    /// sleeps (lazily or not): for records someone waits for.
    pub fn publish(&self, pos: u64, unit: &[u8]) {
        self.publish_quiet(pos, unit);
        self.wake_flusher();
    }

    /// Like `publish`, without waking the flusher. The caller must guarantee that someone
    /// wakes it (or that its timer is soon enough): see `Wal::append`.
    pub fn publish_quiet(&self, pos: u64, unit: &[u8]) {
        debug_assert!(unit.len() & 7 == 0 && !unit.is_empty());
        let mut words = unit.chunks_exact(8).map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        });
        let first = words.next().unwrap_or(0);
        debug_assert!(first != 0 && unit_padded_len(first) == unit.len() as u64);
        let base = pos / 8;
        for (i, w) in words.enumerate() {
            self.words[((base + 1 + i as u64) & self.mask) as usize].store(w, Ordering::Relaxed);
        }
        // Publication: Release orders every word above before the first word.
        self.words[(base & self.mask) as usize].store(first, Ordering::Release);
    }

    /// Bytes between the flusher's tail and `end`: how full the ring is up to `end`.
    pub fn backlog_bytes(&self, end: u64) -> u64 {
        end.saturating_sub(self.tail.load(Ordering::Relaxed))
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Wakes the flusher if it sleeps (also used for roll requests and shutdown).
    pub fn wake_flusher(&self) {
        let before = self.epoch.fetch_add(EVENT, Ordering::AcqRel);
        if before & SLEEPING != 0 {
            let _guard = self.guard();
            self.flusher_cv.notify_one();
        }
    }

    /// Records an event without waking a LAZY sleeper (its timer drains the ring soon enough);
    /// wakes a flusher that sleeps without a near deadline.
    pub fn nudge_flusher(&self) {
        let before = self.epoch.fetch_add(EVENT, Ordering::AcqRel);
        if before & SLEEPING != 0 && before & LAZY == 0 {
            let _guard = self.guard();
            self.flusher_cv.notify_one();
        }
    }

    fn bump_locked(&self) {
        let before = self.epoch.fetch_add(EVENT, Ordering::AcqRel);
        if before & SLEEPING != 0 {
            self.flusher_cv.notify_one();
        }
    }

    /// Flusher: a snapshot of the event count, taken BEFORE looking for work.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire) & !(SLEEPING | LAZY)
    }

    /// Flusher: sleeps until woken or `timeout`, unless the event count moved since `epoch`
    /// (then something happened after the caller last looked: it must look again).
    pub fn sleep(&self, epoch: u64, timeout: Option<Duration>) {
        self.sleep_flagged(epoch, timeout, SLEEPING);
    }

    /// Like `sleep`, for a flusher whose `timeout` is within the flush interval: `nudge_flusher`
    /// leaves it asleep.
    pub fn sleep_lazy(&self, epoch: u64, timeout: Duration) {
        self.sleep_flagged(epoch, Some(timeout), SLEEPING | LAZY);
    }

    fn sleep_flagged(&self, epoch: u64, timeout: Option<Duration>, flags: u64) {
        let guard = self.guard();
        if self.epoch.compare_exchange(epoch, epoch | flags, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        let guard = match timeout {
            Some(t) => {
                self.flusher_cv.wait_timeout(guard, t).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0)
            }
            None => self.flusher_cv.wait(guard).unwrap_or_else(|e| e.into_inner()),
        };
        self.epoch.fetch_and(!(SLEEPING | LAZY), Ordering::AcqRel);
        drop(guard);
    }

    /// Flusher: copies the contiguous published prefix starting at `tail` (at most `max_bytes`,
    /// but always at least one record if one is published) onto `out`, calling `boundary` with
    /// each record's start position. Frees the space and returns the new tail.
    pub fn drain(&self, out: &mut Vec<u8>, max_bytes: u64, mut boundary: impl FnMut(u64)) -> u64 {
        let start = self.tail.load(Ordering::Relaxed);
        let mut pos = start;
        loop {
            let idx = ((pos / 8) & self.mask) as usize;
            // Acquire pairs with the writer's Release publication of this first word.
            let first = self.words[idx].load(Ordering::Acquire);
            if first == 0 {
                break;
            }
            let len = unit_padded_len(first);
            assert!(len >= 8 && len <= self.capacity_bytes, "ring unit length {len} at {pos}");
            if pos > start && pos + len - start > max_bytes {
                break;
            }
            boundary(pos);
            out.extend_from_slice(&first.to_le_bytes());
            self.words[idx].store(0, Ordering::Relaxed);
            for i in 1..len / 8 {
                let j = ((pos / 8 + i) & self.mask) as usize;
                out.extend_from_slice(&self.words[j].swap(0, Ordering::Relaxed).to_le_bytes());
            }
            pos += len;
        }
        if pos != start {
            // Release: the zeroing above happens before any writer reuses these words.
            self.tail.store(pos, Ordering::Release);
            self.notify_space_waiters();
        }
        pos
    }

    /// Flusher: starts the next sync, which will make everything before `covers` durable.
    /// Call before the fdatasync, then `end_sync` after it.
    pub fn begin_sync(&self, covers: u64) {
        let round = self.sync_started.load(Ordering::Relaxed) + 1;
        // Release pairs with the waiter's Acquire (see `wait_durable`).
        self.sync_covers[(round % ROUNDS) as usize].store(covers, Ordering::Release);
        self.sync_started.store(round, Ordering::Release);
    }

    /// Flusher: the sync begun last finished, so everything before what it covers is
    /// durable. Wakes the writers waiting for that sync's bit. (The position comes from
    /// `begin_sync`, never from the caller: a sync that ended short of what it announced
    /// would leave its writers asleep on a bit no later sync uses for 32 syncs.)
    pub fn end_sync(&self) {
        let round = self.sync_started.load(Ordering::Relaxed);
        let pos = self.sync_covers[(round % ROUNDS) as usize].load(Ordering::Relaxed);
        self.durable.fetch_max(pos, Ordering::AcqRel);
        self.durable_word.bump();
        self.durable_word.wake(round_bit(round));
        self.wake_tasks(false);
    }

    /// Wakes the tasks whose positions are durable now (all of them if `all`, on poisoning).
    /// The RMW pairs with the registration in `poll_durable`.
    fn wake_tasks(&self, all: bool) {
        if self.async_waiters.fetch_add(0, Ordering::AcqRel) == 0 {
            return;
        }
        let woken = {
            let mut wakers = self.wakers_guard();
            let durable = self.durable.load(Ordering::Acquire);
            let woken = if all {
                std::mem::take(&mut wakers.by_end)
            } else {
                // Entries at or past (durable + 1, 0) still wait; the rest are covered.
                let waiting = wakers.by_end.split_off(&(durable.saturating_add(1), 0));
                std::mem::replace(&mut wakers.by_end, waiting)
            };
            self.async_waiters.fetch_sub(woken.len() as u64, Ordering::AcqRel);
            woken
        };
        // Outside the lock: a woken task may run at once, on another thread, and poll again.
        for waker in woken.into_values() {
            waker.wake();
        }
    }

    fn wakers_guard(&self) -> MutexGuard<'_, Wakers> {
        // Entries are inserted and removed whole: a panic while it was held broke nothing.
        self.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the wait for `end` is over: `Some(Ok)` once everything before it is durable,
    /// `Some(Err)` once the ring is poisoned, `None` while it must go on. Reads `durable`
    /// before the state, as `wait_durable` does.
    fn settled(&self, end: u64) -> Option<Result<(), RingError>> {
        if self.durable.load(Ordering::Acquire) >= end {
            Some(Ok(()))
        } else if self.state.load(Ordering::Acquire) == STATE_POISONED {
            Some(Err(RingError::Poisoned))
        } else {
            None
        }
    }

    /// Writer on an async runtime: `wait_durable` without blocking. Ready once everything
    /// before `end` is durable (or with an error once the ring is poisoned); otherwise the
    /// task's waker is registered (in `slot`, which the caller keeps across polls) and woken
    /// by the sync that covers `end`.
    pub fn poll_durable(
        &self,
        end: u64,
        slot: &mut WaiterSlot,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), RingError>> {
        if let Some(result) = self.settled(end) {
            self.forget_waiter(slot);
            return Poll::Ready(result);
        }
        {
            let mut wakers = self.wakers_guard();
            let registered = slot.0.and_then(|key| wakers.by_end.get_mut(&key));
            match registered {
                Some(waker) => {
                    if !waker.will_wake(cx.waker()) {
                        waker.clone_from(cx.waker());
                    }
                }
                None => {
                    let key = (end, wakers.next);
                    wakers.next += 1;
                    wakers.by_end.insert(key, cx.waker().clone());
                    slot.0 = Some(key);
                    // The RMW that pairs with `wake_tasks`: either the flusher's look at the
                    // count comes later and finds this waker, or it came first and this RMW
                    // synchronizes with it, so the check below sees what that sync advanced.
                    self.async_waiters.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        match self.settled(end) {
            Some(result) => {
                self.forget_waiter(slot);
                Poll::Ready(result)
            }
            None => Poll::Pending,
        }
    }

    /// Removes the registration in `slot`, if the flusher has not taken it already.
    pub fn forget_waiter(&self, slot: &mut WaiterSlot) {
        if let Some(key) = slot.0.take() {
            let mut wakers = self.wakers_guard();
            if wakers.by_end.remove(&key).is_some() {
                self.async_waiters.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Writer: waits until everything before `end` is durable.
    pub fn wait_durable(&self, end: u64) -> Result<(), RingError> {
        loop {
            // Read before `durable`: a sync finishing after this read changes the word, so
            // the wait below returns at once instead of sleeping through its wake-up.
            let seen = self.durable_word.value();
            if self.durable.load(Ordering::Acquire) >= end {
                return Ok(());
            }
            // A closing flusher still drains and syncs everything reserved before it exits
            // (or poisons the ring if it cannot), so only poisoning ends this wait early.
            if self.state.load(Ordering::Acquire) == STATE_POISONED {
                return Err(RingError::Poisoned);
            }
            // The sync in progress (or the last one) if it covers the record; otherwise the
            // next is the first that may (if it does not, its wake-up is spurious and the
            // writer looks again). The slot read may already hold the value of a sync `ROUNDS`
            // later; then `ROUNDS - 1` syncs have ended since `seen` was read, the word has
            // changed, and the wait returns at once.
            let round = self.sync_started.load(Ordering::Acquire);
            let covers = self.sync_covers[(round % ROUNDS) as usize].load(Ordering::Acquire);
            let wait_for = if end <= covers { round } else { round + 1 };
            self.durable_word.wait(seen, round_bit(wait_for));
        }
    }

    /// Refuses new reservations and wakes every waiter with an error (after a failed fsync).
    pub fn poison(&self) {
        self.set_state(STATE_POISONED);
    }

    /// Refuses new reservations; the flusher drains what was already reserved.
    pub fn close(&self) {
        let _ = self.state.compare_exchange(STATE_OPEN, STATE_CLOSED, Ordering::AcqRel, Ordering::Acquire);
        self.notify_all_waiters();
    }

    pub fn is_poisoned(&self) -> bool {
        self.state.load(Ordering::Acquire) == STATE_POISONED
    }

    pub fn is_open(&self) -> bool {
        self.state.load(Ordering::Acquire) == STATE_OPEN
    }

    fn set_state(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        self.notify_all_waiters();
    }

    fn notify_all_waiters(&self) {
        self.epoch.fetch_add(EVENT, Ordering::AcqRel);
        {
            let _guard = self.guard();
            self.flusher_cv.notify_all();
            self.space_cv.notify_all();
        }
        // Durability waiters leave only when covered or on poisoning; closing leaves them
        // asleep, because the closing flusher still syncs what they wait for.
        if self.state.load(Ordering::Acquire) == STATE_POISONED {
            self.durable_word.bump();
            self.durable_word.wake(u32::MAX);
            self.wake_tasks(true);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn unit(tag: u8, len: usize) -> Vec<u8> {
        let padded = (len + 7) & !7;
        let mut v = vec![tag; padded];
        v[0..4].copy_from_slice(&[0xAA, tag, 0, 0]);
        v[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        v
    }

    #[test]
    fn drain_stops_at_unpublished_gap() {
        let ring = Ring::new(256, 8);
        let a = ring.reserve(16).unwrap();
        let b = ring.reserve(24).unwrap();
        let c = ring.reserve(16).unwrap();
        assert_eq!((a, b, c), (8, 24, 48));
        ring.publish(a, &unit(1, 16));
        ring.publish(c, &unit(3, 16));
        let mut out = Vec::new();
        assert_eq!(ring.drain(&mut out, 1 << 20, |_| {}), 24, "must stop before the unpublished record");
        assert_eq!(out, unit(1, 16));
        ring.publish(b, &unit(2, 20));
        out.clear();
        assert_eq!(ring.drain(&mut out, 1 << 20, |_| {}), 64);
        assert_eq!(out, [unit(2, 20), unit(3, 16)].concat());
    }

    /// Past the limit while the next segment is on its way, a reservation waits for the
    /// limit to move instead of failing; once the flusher reports the disk out of space, it
    /// fails with DiskFull.
    #[test]
    fn limit_waits_for_the_next_segment_and_fails_only_when_out_of_space() {
        let ring = Arc::new(Ring::new(256, 0));
        ring.set_limit(32);
        assert_eq!(ring.reserve(24), Ok(0));
        let waiter = {
            let ring = Arc::clone(&ring);
            std::thread::spawn(move || ring.reserve(16))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "a reservation past the limit must wait, not fail");
        ring.set_limit(64);
        assert_eq!(waiter.join().unwrap(), Ok(24));

        let waiter = {
            let ring = Arc::clone(&ring);
            std::thread::spawn(move || ring.reserve(64))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished());
        ring.set_space_exhausted(true);
        assert_eq!(waiter.join().unwrap(), Err(RingError::DiskFull));
        assert_eq!(ring.head(), 40, "a refused reservation reserves nothing");
    }

    #[test]
    fn limit_refuses_without_reserving() {
        let ring = Ring::new(256, 0);
        ring.set_limit(32);
        ring.set_space_exhausted(true);
        assert_eq!(ring.reserve(24), Ok(0));
        assert_eq!(ring.reserve(16), Err(RingError::DiskFull));
        assert_eq!(ring.head(), 24);
        assert_eq!(ring.reserve(512), Err(RingError::TooLarge));
    }

    /// Group commit on the real wake-up word: writers wait for their records while the
    /// flusher syncs whatever prefix it drained, sometimes in several rounds per drain and
    /// sometimes covering only part of what is published. Every writer must return, and only
    /// once `durable` covers its record; a lost wake-up hangs a writer and fails the join.
    #[test]
    fn every_waiter_returns_once_covered() {
        const WRITERS: u8 = 8;
        const RECORDS: usize = 400;
        let ring = Arc::new(Ring::new(512, 8));
        let done = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (ring, done) = (Arc::clone(&ring), Arc::clone(&done));
                std::thread::spawn(move || {
                    for i in 0..RECORDS {
                        let u = unit(t + 1, 8 + (i % 3) * 8);
                        let pos = ring.reserve(u.len() as u64).unwrap();
                        ring.publish(pos, &u);
                        let end = pos + u.len() as u64;
                        ring.wait_durable(end).unwrap();
                        assert!(ring.durable() >= end, "returned before its record was durable");
                    }
                    done.fetch_add(1, Ordering::AcqRel);
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut out = Vec::new();
        let mut round = 0u64;
        while done.load(Ordering::Acquire) < u64::from(WRITERS) {
            assert!(std::time::Instant::now() < deadline, "a writer was never woken");
            let epoch = ring.epoch();
            out.clear();
            let before = ring.durable();
            let after = ring.drain(&mut out, 64, |_| {});
            if after == before {
                ring.sleep(epoch, Some(Duration::from_millis(1)));
                continue;
            }
            round += 1;
            // Every third drain is made durable in two syncs: first a part, then the rest.
            if round.is_multiple_of(3) {
                let part = before + 8;
                ring.begin_sync(part);
                ring.end_sync();
            }
            ring.begin_sync(after);
            ring.end_sync();
        }
        for w in writers {
            w.join().unwrap();
        }
    }

    #[test]
    fn threads_wrap_many_laps_in_order() {
        let ring = Arc::new(Ring::new(128, 0));
        let writers: Vec<_> = (0..4u8)
            .map(|t| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..2000usize {
                        let u = unit(t + 1, 8 + (i % 5) * 8);
                        let pos = ring.reserve(u.len() as u64).unwrap();
                        ring.publish(pos, &u);
                    }
                })
            })
            .collect();
        let mut total = 0u64;
        let mut out = Vec::new();
        let expected: u64 = 4 * (0..2000u64).map(|i| 8 + (i % 5) * 8).sum::<u64>();
        while total < expected {
            let e = ring.epoch();
            out.clear();
            let before = ring.tail();
            let after = ring.drain(&mut out, 64, |_| {});
            // Every drained unit is whole and self-consistent.
            let mut off = 0;
            while off < out.len() {
                let first = u64::from_le_bytes(out[off..off + 8].try_into().unwrap());
                let len = unit_padded_len(first) as usize;
                let tag = out[off + 1];
                assert!(out[off + 8..off + len].iter().all(|&b| b == tag), "torn unit at {off}");
                off += len;
            }
            total += after - before;
            ring.begin_sync(after);
            ring.end_sync();
            if after == before {
                ring.sleep(e, Some(Duration::from_millis(1)));
            }
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(ring.head(), expected);
    }

    /// Counts its wake-ups.
    #[derive(Default)]
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn woken(count: &Arc<CountingWaker>) -> usize {
        count.0.load(Ordering::SeqCst)
    }

    /// A task's waker is woken by the first sync that covers its position, and not by an
    /// earlier one; a task further on stays registered.
    #[test]
    fn a_task_is_woken_by_the_sync_that_covers_it() {
        let ring = Ring::new(256, 8);
        let (a, b) = (ring.reserve(16).unwrap(), ring.reserve(16).unwrap());
        let (wa, wb) = (Arc::new(CountingWaker::default()), Arc::new(CountingWaker::default()));
        let (waker_a, waker_b) = (Waker::from(wa.clone()), Waker::from(wb.clone()));
        let (mut slot_a, mut slot_b) = (WaiterSlot::default(), WaiterSlot::default());
        let mut cx_a = Context::from_waker(&waker_a);
        let mut cx_b = Context::from_waker(&waker_b);
        assert!(ring.poll_durable(a + 16, &mut slot_a, &mut cx_a).is_pending());
        assert!(ring.poll_durable(b + 16, &mut slot_b, &mut cx_b).is_pending());
        // Polling again keeps one registration.
        assert!(ring.poll_durable(a + 16, &mut slot_a, &mut cx_a).is_pending());
        assert_eq!(ring.async_waiters.load(Ordering::SeqCst), 2);
        ring.begin_sync(a);
        ring.end_sync();
        assert_eq!((woken(&wa), woken(&wb)), (0, 0), "a sync short of both positions wakes nobody");
        ring.begin_sync(a + 16);
        ring.end_sync();
        assert_eq!((woken(&wa), woken(&wb)), (1, 0));
        assert_eq!(ring.poll_durable(a + 16, &mut slot_a, &mut cx_a), Poll::Ready(Ok(())));
        assert!(ring.poll_durable(b + 16, &mut slot_b, &mut cx_b).is_pending());
        assert_eq!(ring.async_waiters.load(Ordering::SeqCst), 1);
        ring.begin_sync(b + 16);
        ring.end_sync();
        assert_eq!(woken(&wb), 1);
        assert_eq!(ring.poll_durable(b + 16, &mut slot_b, &mut cx_b), Poll::Ready(Ok(())));
        assert_eq!(ring.async_waiters.load(Ordering::SeqCst), 0);
    }

    /// Poisoning wakes every waiting task, and its next poll reports the failure.
    #[test]
    fn poisoning_wakes_waiting_tasks_with_an_error() {
        let ring = Ring::new(256, 8);
        let pos = ring.reserve(16).unwrap();
        let count = Arc::new(CountingWaker::default());
        let waker = Waker::from(count.clone());
        let mut slot = WaiterSlot::default();
        let mut cx = Context::from_waker(&waker);
        assert!(ring.poll_durable(pos + 16, &mut slot, &mut cx).is_pending());
        ring.poison();
        assert_eq!(woken(&count), 1);
        assert_eq!(ring.poll_durable(pos + 16, &mut slot, &mut cx), Poll::Ready(Err(RingError::Poisoned)));
        assert_eq!(ring.async_waiters.load(Ordering::SeqCst), 0);
    }

    /// A wait abandoned before its sync leaves nothing behind, and its waker is not called.
    #[test]
    fn a_forgotten_waiter_is_not_woken() {
        let ring = Ring::new(256, 8);
        let pos = ring.reserve(16).unwrap();
        let count = Arc::new(CountingWaker::default());
        let waker = Waker::from(count.clone());
        let mut slot = WaiterSlot::default();
        assert!(ring.poll_durable(pos + 16, &mut slot, &mut Context::from_waker(&waker)).is_pending());
        ring.forget_waiter(&mut slot);
        assert_eq!(ring.async_waiters.load(Ordering::SeqCst), 0);
        ring.begin_sync(pos + 16);
        ring.end_sync();
        assert_eq!(woken(&count), 0);
    }
}

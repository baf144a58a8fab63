//! The write-ahead log: record codec (`format::wal`), the lock-free ring (`ring`), the flusher
//! and its segment files (`flusher`), and replay on open (`replay`).
//!
//! A write calls [`Wal::append`] while it holds its frame latches, so for any key the log
//! order is the apply order. The record's log position is its lsn (and the value's version):
//! positions are byte offsets in the log stream, so one atomic reservation assigns both the
//! place in the ring and the sequence number.

mod flusher;
pub(crate) mod replay;
pub(crate) mod ring;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::api::{Durability, Op};
use crate::error::{Error, Result};
use crate::format::wal::{encode_record, padded_len, record_len, SEGMENT_HEADER_BYTES};
use crate::io::Vfs;
pub(crate) use ring::WaiterSlot;
use ring::{Ring, RingError};

/// Fresh logs start at this position (so no record has lsn 0).
pub(crate) const FIRST_LSN: u64 = 8;

/// Sizes and timing of the log.
#[derive(Debug, Clone)]
pub(crate) struct WalConfig {
    /// Ring capacity (a power of two).
    pub ring_bytes: usize,
    /// Size each segment file is preallocated to. At least 4 × ring_bytes (see `limit`).
    pub segment_bytes: u64,
    /// Longest time an async record stays unsynced.
    pub flush_interval: Duration,
    /// The database's `checkpoint_wal_bytes`: how much log it lets recovery read.
    pub checkpoint_wal_bytes: u64,
}

impl WalConfig {
    pub(crate) fn new(
        ring_bytes: usize,
        segment_bytes: u64,
        flush_interval: Duration,
        checkpoint_wal_bytes: u64,
    ) -> WalConfig {
        let ring_bytes = ring_bytes.clamp(4096, 1 << 30).next_power_of_two();
        // Room for the header plus 4 rings (see `Flusher::update_limit`), rounded to 4 KiB.
        let floor = (4 * ring_bytes as u64 + SEGMENT_HEADER_BYTES as u64 + 4095) & !4095;
        let segment_bytes = segment_bytes.max(floor);
        WalConfig { ring_bytes, segment_bytes, flush_interval, checkpoint_wal_bytes }
    }

    /// A checkpoint's roll keeps the log in its current segment while less than this much of
    /// the segment is used: half its room (rolling earlier leaves the rest unused and
    /// zero-fills a new spare per checkpoint), and no more than the log the database lets
    /// recovery read (`checkpoint_wal_bytes`), since replay reads the segment from its start.
    pub(crate) fn stay_bytes(&self) -> u64 {
        (self.segment_room() / 2).min(self.checkpoint_wal_bytes)
    }

    /// Log bytes one segment holds: its size less its header.
    pub(crate) fn segment_room(&self) -> u64 {
        self.segment_bytes - SEGMENT_HEADER_BYTES as u64
    }

    /// Largest record (padded) the log accepts: half the ring, so two always fit.
    pub(crate) fn max_record_bytes(&self) -> usize {
        self.ring_bytes / 2
    }

    /// Most bytes the flusher writes without an fdatasync: a torn tail lies within this many
    /// bytes of the first bad record (recovery's corruption/torn-tail boundary).
    pub(crate) fn window_bytes(&self) -> u64 {
        2 * self.ring_bytes as u64
    }
}

/// Where the log continues after recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resume {
    pub segment: u64,
    pub base_lsn: u64,
    /// Whether the segment's header is on disk (it is written with the first records).
    pub header_written: bool,
    pub next_lsn: u64,
}

/// A logged record: its lsn (the write's version) and the position after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    pub lsn: u64,
    pub end: u64,
}

/// Why the log stopped accepting writes.
#[derive(Debug, Clone)]
struct Failure {
    op: &'static str,
    kind: io::ErrorKind,
    raw_os_error: Option<i32>,
    message: String,
}

impl Failure {
    fn to_io(&self) -> io::Error {
        match self.raw_os_error {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.message.clone()),
        }
    }
}

/// Poisons the log if the thread holding it unwinds from a panic that began while it was
/// held: the flusher's loop, and a writer between reserving its record's bytes and
/// publishing them. Either leaving silently would strand everyone else: waiters for
/// durability and for ring space wait for a flusher that is gone or that waits forever at the
/// unpublished record, and so does the close. Poisoning wakes them all with an error, as a
/// failed fsync does. A write made by a destructor during some other unwind is not one.
pub(super) struct PoisonOnPanic<'a> {
    shared: &'a Shared,
    op: &'static str,
    unwinding_before: bool,
}

impl<'a> PoisonOnPanic<'a> {
    pub(super) fn new(shared: &'a Shared, op: &'static str) -> Self {
        PoisonOnPanic { shared, op, unwinding_before: std::thread::panicking() }
    }
}

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.unwinding_before {
            self.shared.poison(self.op, &io::Error::other(format!("{} panicked", self.op)));
        }
    }
}

/// The flusher's answer to a checkpoint's roll request at log position L.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rolled {
    /// The segment replay must start with.
    pub segment: u64,
    /// Its first log position: L after a roll, or below L when the log stayed in its current
    /// segment, because no preallocated segment was ready or little of the current one is
    /// used (`WalConfig::stay_bytes`; replay reads the records between the two again but does
    /// not apply them: see `checkpoint`).
    /// Either way the log is durable up to L when the answer is given.
    pub base_lsn: u64,
}

#[derive(Default)]
struct RollState {
    /// Roll to a new segment at this log position (set with the tree's write gate held
    /// exclusively).
    request: Option<u64>,
    /// The flusher's answer.
    answer: Option<std::result::Result<Rolled, Error>>,
}

pub(crate) struct Shared {
    ring: Ring,
    vfs: Arc<dyn Vfs>,
    cfg: WalConfig,
    /// Highest log position a sync writer waits for: the flusher fdatasyncs while it is
    /// beyond what is durable.
    sync_wanted: AtomicU64,
    failure: Mutex<Option<Failure>>,
    roll: Mutex<RollState>,
    roll_cv: Condvar,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
}

impl Shared {
    /// Records the first failure and poisons the ring: no later write is accepted, and every
    /// waiter gets an error. A failed fsync is never retried (the kernel may have dropped the
    /// dirty pages and a retry would report success for lost data).
    fn poison(&self, op: &'static str, err: &io::Error) {
        {
            let mut failure = self.failure.lock();
            if failure.is_none() {
                tracing::error!(op, error = %err, "write-ahead log failed; refusing writes until reopened");
                *failure = Some(Failure {
                    op,
                    kind: err.kind(),
                    raw_os_error: err.raw_os_error(),
                    message: err.to_string(),
                });
            }
        }
        self.ring.poison();
        let mut roll = self.roll.lock();
        if roll.request.take().is_some() {
            roll.answer = Some(Err(Error::Poisoned));
        }
        self.roll_cv.notify_all();
    }

    /// See `Wal::wait`.
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        self.ring.wait_durable(ticket.end).map_err(|e| self.ring_error(e, true))
    }

    /// `wait` for a task on an async runtime: ready once the record of `ticket` is durable;
    /// until then the task's waker sits in `slot` (release it with `forget` if the wait is
    /// abandoned).
    pub(crate) fn poll_wait(
        &self,
        ticket: Ticket,
        slot: &mut WaiterSlot,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        self.ring.poll_durable(ticket.end, slot, cx).map_err(|e| self.ring_error(e, true))
    }

    /// Withdraws the waker `poll_wait` left in `slot`.
    pub(crate) fn forget(&self, slot: &mut WaiterSlot) {
        self.ring.forget_waiter(slot);
    }

    /// Whether the record of `ticket` is durable.
    pub(crate) fn is_durable(&self, ticket: Ticket) -> bool {
        self.ring.durable() >= ticket.end
    }

    fn ring_error(&self, e: RingError, reserved: bool) -> Error {
        match e {
            RingError::DiskFull => Error::DiskFull,
            RingError::TooLarge => Error::BatchTooLarge { bytes: self.cfg.ring_bytes },
            RingError::Closed => Error::Closed,
            RingError::Poisoned if reserved => match self.failure.lock().as_ref() {
                Some(f) => Error::Io { op: f.op, source: f.to_io(), may_have_applied: true },
                None => Error::Poisoned,
            },
            RingError::Poisoned => Error::Poisoned,
        }
    }
}

/// The write-ahead log handle.
pub(crate) struct Wal {
    shared: Arc<Shared>,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

thread_local! {
    /// Each writer thread encodes into its own reused buffer: no allocation per record.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Wal {
    /// Starts the log at `resume` (from recovery, or a fresh log) and its flusher thread.
    pub(crate) fn open(vfs: Arc<dyn Vfs>, cfg: WalConfig, resume: Resume) -> Result<Wal> {
        let shared = Arc::new(Shared {
            ring: Ring::new(cfg.ring_bytes, resume.next_lsn),
            vfs,
            cfg,
            sync_wanted: AtomicU64::new(0),
            failure: Mutex::new(None),
            roll: Mutex::new(RollState::default()),
            roll_cv: Condvar::new(),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        });
        let flusher = flusher::Flusher::start(shared.clone(), resume)?;
        let handle = std::thread::Builder::new()
            .name("holt-wal-flusher".into())
            .spawn(move || flusher.run())
            .map_err(|e| Error::Io { op: "spawn wal flusher", source: e, may_have_applied: false })?;
        Ok(Wal { shared, flusher: Mutex::new(Some(handle)) })
    }

    /// Appends the redo record of `ops` to the ring and returns its lsn. Called once per
    /// batch, with the batch's frame latches held. Refuses (before anything is applied) when
    /// the log is poisoned, closed, or out of disk space.
    pub(crate) fn append(&self, ops: &[Op<'_>], durability: Durability) -> Result<Ticket> {
        let len = padded_len(record_len(ops));
        if len > self.shared.cfg.max_record_bytes() {
            return Err(Error::BatchTooLarge { bytes: len });
        }
        let ring = &self.shared.ring;
        let lsn = ring.reserve(len as u64).map_err(|e| self.ring_error(e, false))?;
        let end = lsn + len as u64;
        // Reserved, not yet published: the flusher stops at this gap until it is.
        let _unpublished = PoisonOnPanic::new(&self.shared, "log append");
        fail::fail_point!("wal-append-reserved");
        SCRATCH.with(|scratch| {
            let mut buf = scratch.borrow_mut();
            encode_record(ops, lsn, ring.durable(), &mut buf);
            self.publish(lsn, &buf, durability);
        });
        Ok(Ticket { lsn, end })
    }

    /// Publishes the encoded record reserved at `lsn` and wakes the flusher if the record
    /// needs it now.
    fn publish(&self, lsn: u64, record: &[u8], durability: Durability) {
        let ring = &self.shared.ring;
        let end = lsn + record.len() as u64;
        if durability == Durability::Sync {
            // Before publishing: the flusher reads this after draining the record.
            self.shared.sync_wanted.fetch_max(end, Ordering::AcqRel);
            ring.publish(lsn, record);
            return;
        }
        // An async record wakes the flusher only when someone needs it now: waking it per
        // record costs the writer a futex wake (and the flusher a write per record).
        // Otherwise a flusher sleeping LAZY drains the ring within `flush_interval`.
        ring.publish_quiet(lsn, record);
        // A sync writer may have published a record after this one and be waiting for it:
        // the flusher stops at this record's gap until it is published. Reading `sync_wanted`
        // with an RMW after publishing orders the two writers: either this RMW comes after
        // the sync writer's `fetch_max` (and sees it, so we wake the flusher), or the sync
        // writer's RMW comes after ours, synchronizes with it, and the wake-up it sends after
        // publishing makes the flusher see this record too.
        let sync_waiting = self.shared.sync_wanted.fetch_add(0, Ordering::AcqRel) > lsn;
        // Keep a quarter of the ring as the most an idle flusher leaves undrained.
        let filling = ring.backlog_bytes(end) >= ring.capacity_bytes() / 4;
        if sync_waiting || filling {
            ring.wake_flusher();
        } else {
            ring.nudge_flusher();
        }
    }

    /// Waits until the record of `ticket` is durable (group commit: one fdatasync covers every
    /// record drained before it).
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        self.shared.wait(ticket)
    }

    /// The log's shared state, for a write's `Pending` to wait on (it may outlive this borrow,
    /// never the records: the flusher syncs everything reserved before it exits).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn ring_error(&self, e: RingError, reserved: bool) -> Error {
        self.shared.ring_error(e, reserved)
    }

    /// Makes everything appended so far durable.
    pub(crate) fn flush(&self) -> Result<()> {
        self.wait(self.request_flush())
    }

    /// Asks the flusher to sync everything appended so far, without waiting: the returned
    /// ticket is durable once that sync has finished.
    pub(crate) fn request_flush(&self) -> Ticket {
        let head = self.shared.ring.head();
        self.shared.sync_wanted.fetch_max(head, Ordering::AcqRel);
        self.shared.ring.wake_flusher();
        Ticket { lsn: head, end: head }
    }

    /// The next lsn to be assigned: every record before it has been reserved.
    pub(crate) fn head(&self) -> u64 {
        self.shared.ring.head()
    }

    pub(crate) fn durable(&self) -> u64 {
        self.shared.ring.durable()
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.shared.ring.is_poisoned()
    }

    pub(crate) fn config(&self) -> &WalConfig {
        &self.shared.cfg
    }

    /// Poisons the log from outside (a checkpoint's directory fsync failed).
    pub(crate) fn poison(&self, op: &'static str, err: &io::Error) {
        self.shared.poison(op, err);
    }

    /// Asks the flusher to start a new segment at `lsn`. Call with the tree's write gate held
    /// exclusively (so `lsn == head()` and no record at or after it has been reserved yet).
    pub(crate) fn request_roll(&self, lsn: u64) {
        let mut roll = self.shared.roll.lock();
        // A log that is no longer open has a flusher that is gone or leaving without looking
        // at requests again: answer here, or `wait_roll` would wait for it forever. Checked
        // under the lock: `Shared::poison` and the flusher's exit change the state before they
        // take it to clear a request, so a request set here after an open state was seen is
        // one they will still answer.
        if !self.shared.ring.is_open() {
            roll.request = None;
            roll.answer = Some(Err(if self.is_poisoned() { Error::Poisoned } else { Error::Closed }));
            return;
        }
        roll.request = Some(lsn);
        roll.answer = None;
        drop(roll);
        self.shared.ring.wake_flusher();
    }

    /// Waits for the flusher's answer to `request_roll`: the segment replay starts with.
    pub(crate) fn wait_roll(&self) -> Result<Rolled> {
        let mut roll = self.shared.roll.lock();
        loop {
            if let Some(answer) = roll.answer.take() {
                return answer;
            }
            if roll.request.is_none() {
                return Err(if self.is_poisoned() { Error::Poisoned } else { Error::Closed });
            }
            self.shared.roll_cv.wait_for(&mut roll, Duration::from_millis(100));
        }
    }

    pub(crate) fn bytes_written(&self) -> u64 {
        self.shared.bytes_written.load(Ordering::Relaxed)
    }

    pub(crate) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Stops accepting records, lets the flusher write and sync what was reserved, and joins
    /// it. Returns the log's failure, if it failed.
    pub(crate) fn shutdown(&self) -> Result<()> {
        self.shared.ring.close();
        if let Some(handle) = self.flusher.lock().take() {
            let _ = handle.join();
        }
        match self.shared.failure.lock().as_ref() {
            Some(f) => Err(Error::Io { op: f.op, source: f.to_io(), may_have_applied: true }),
            None => Ok(()),
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::api::Condition;
    use crate::io::{Fault, FaultError, SimFs};

    fn put(key: &[u8]) -> [Op<'_>; 1] {
        [Op::Put { key, value: b"value", condition: Condition::None }]
    }

    /// A sync record published behind an async record that is reserved but not yet published
    /// must not wait for the flush interval: when the async record is finally published
    /// (without a wake-up of its own, the flusher sleeping lazily at the gap), its writer sees
    /// the waiting sync writer through `sync_wanted` and wakes the flusher.
    #[test]
    fn sync_record_behind_an_unannounced_async_record_is_not_delayed() {
        let interval = Duration::from_secs(10);
        let cfg = WalConfig::new(4096, 1 << 20, interval, u64::MAX);
        let resume = Resume { segment: 1, base_lsn: FIRST_LSN, header_written: false, next_lsn: FIRST_LSN };
        let wal = Arc::new(Wal::open(SimFs::new(7), cfg, resume).expect("open log"));
        let async_ops = put(b"async");
        let async_len = padded_len(record_len(&async_ops)) as u64;
        let async_lsn = wal.shared.ring.reserve(async_len).expect("reserve");
        let writer = Arc::clone(&wal);
        let sync_writer = std::thread::spawn(move || {
            let ticket = writer.append(&put(b"sync"), Durability::Sync).expect("append");
            let start = Instant::now();
            writer.wait(ticket).expect("wait");
            start.elapsed()
        });
        // Long enough for the flusher to drain up to the gap and fall asleep lazily.
        std::thread::sleep(Duration::from_millis(100));
        let mut record = Vec::new();
        encode_record(&async_ops, async_lsn, wal.durable(), &mut record);
        wal.publish(async_lsn, &record, Durability::Async);
        let waited = sync_writer.join().expect("sync writer");
        assert!(waited < interval / 5, "the sync write waited {waited:?} (flush interval {interval:?})");
        assert_eq!(wal.durable(), wal.head());
    }

    /// A checkpoint that asks for a roll after the flusher failed and left (the log poisoned
    /// between the checkpoint's poison check and its request) is answered, not left waiting
    /// for a flusher that will never look again.
    #[test]
    fn a_roll_requested_after_the_log_failed_is_refused_not_awaited() {
        let fs = SimFs::new(11);
        let cfg = WalConfig::new(4096, 1 << 20, Duration::from_millis(1), u64::MAX);
        let resume = Resume { segment: 1, base_lsn: FIRST_LSN, header_written: false, next_lsn: FIRST_LSN };
        let wal = Arc::new(Wal::open(fs.clone(), cfg, resume).expect("open log"));
        fs.inject(Fault { op: None, path_contains: None, nth: 1, error: FaultError::Freeze, forever: true });
        let ticket = wal.append(&put(b"lost"), Durability::Sync).expect("append");
        assert!(wal.wait(ticket).is_err(), "the sync write's fdatasync failed");
        assert!(wal.is_poisoned());
        let (done, answered) = std::sync::mpsc::channel();
        let checkpoint = Arc::clone(&wal);
        std::thread::spawn(move || {
            checkpoint.request_roll(checkpoint.head());
            let _ = done.send(checkpoint.wait_roll());
        });
        let answer = answered.recv_timeout(Duration::from_secs(30)).expect("wait_roll returned");
        assert!(matches!(answer, Err(Error::Poisoned)), "{answer:?}");
    }
}

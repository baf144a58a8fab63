//! The flusher thread: drains the ring's published prefix into segment files, fdatasyncs
//! (group commit), rolls segments, and keeps a preallocated spare segment ready.
//!
//! Disk space: writers may only reserve log positions below the ring's `limit`, which the
//! flusher sets to what the current segment plus the spare (if one exists) can hold. A
//! reservation past the limit waits while the next segment is being prepared, and fails with
//! DiskFull before anything is applied once preparing one has failed; the flusher retries the
//! preallocation periodically, so writes succeed again once space is freed. (Failing as soon
//! as the limit was reached made a burst of writes that outran the zero-filling of the next
//! segment fail with DiskFull on a disk with gigabytes free.)
//!
//! Unsynced bytes never exceed `WalConfig::window_bytes`: that bound is what lets recovery
//! tell a torn tail from corruption.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::format::wal::{
    encode_sync_mark, segment_name, SegmentHeader, SEGMENT_HEADER_BYTES, SYNC_MARK_NAME,
};
use crate::io::{failpoint, VfsFile};

use super::{PoisonOnPanic, Resume, Rolled, Shared};

/// How often a failed segment preallocation is retried.
const SPARE_RETRY: Duration = Duration::from_millis(100);
/// Shortest time between two writes of the sync mark: one after every fdatasync cost a single
/// sync writer 4% of its rate here (116 against 110 µs per write). The last this long of
/// synced records may go unmarked, and damage to them then reads as a torn tail.
const MARK_INTERVAL: Duration = Duration::from_millis(5);

struct Segment {
    no: u64,
    base_lsn: u64,
    file: Arc<dyn VfsFile>,
    header_written: bool,
}

pub(super) struct Flusher {
    shared: Arc<Shared>,
    cur: Segment,
    spare: Option<(u64, Arc<dyn VfsFile>)>,
    /// The thread preparing segment `next_no` while no spare is ready.
    preparing: Option<std::thread::JoinHandle<io::Result<Arc<dyn VfsFile>>>>,
    next_no: u64,
    retry_spare_at: Instant,
    /// Everything before `written` is in the segment files; before `synced`, durable.
    written: u64,
    synced: u64,
    last_sync: Instant,
    /// The sync mark file (`None` if it could not be opened: the mark is only a hint).
    mark: Option<Arc<dyn VfsFile>>,
    /// The position the sync mark last recorded, and when.
    marked: u64,
    last_mark: Option<Instant>,
    buf: Vec<u8>,
    bounds: Vec<u64>,
}

fn io_err(op: &'static str, e: io::Error) -> Error {
    Error::Io { op, source: e, may_have_applied: false }
}

/// Creates segment `no`, reserves its blocks and fills it with zeros, and makes it (and its
/// directory entry) durable. Writing into it later is an in-place overwrite of written
/// blocks: it never grows the file or converts unwritten extents, which halves the
/// fdatasync latency here (~127 µs versus ~265 µs for fallocated space, ~3 ms for appends).
/// Without `zero_fill` the blocks are only reserved (fast: used for the first segment of a
/// log, so opening a database does not write a whole segment of zeros).
pub(super) fn create_segment(shared: &Shared, no: u64, zero_fill: bool) -> io::Result<Arc<dyn VfsFile>> {
    const CHUNK_BYTES: u64 = 1 << 20;
    let name = segment_name(no);
    let vfs = &shared.vfs;
    let result = failpoint("wal-segment-create").and_then(|()| {
        let file = vfs.open(Path::new(&name), true)?;
        let size = shared.cfg.segment_bytes;
        file.allocate(size)?;
        if !zero_fill {
            file.set_len(size)?;
            file.sync_data()?;
            vfs.sync_dir()?;
            return Ok(file);
        }
        let zeros = vec![0u8; CHUNK_BYTES.min(size) as usize];
        let mut off = 0;
        while off < size {
            let n = (size - off).min(CHUNK_BYTES) as usize;
            file.write_all_at(&zeros[..n], off)?;
            off += n as u64;
        }
        file.sync_data()?;
        vfs.sync_dir()?;
        Ok(file)
    });
    if result.is_err() {
        // Best effort: a half-made spare is harmless (recovery removes empty segments).
        let _ = vfs.remove(Path::new(&name));
    }
    result
}

impl Drop for Flusher {
    /// No helper may outlive the log (a reopened log must not see it create files), whether
    /// the loop ended or panicked; joined after the guard in `run` poisoned the log.
    fn drop(&mut self) {
        if let Some(handle) = self.preparing.take() {
            let _ = handle.join();
        }
    }
}

impl Flusher {
    pub(super) fn start(shared: Arc<Shared>, resume: Resume) -> Result<Flusher> {
        let name = segment_name(resume.segment);
        let file = if shared.vfs.exists(Path::new(&name)).map_err(|e| io_err("wal open", e))? {
            shared.vfs.open(Path::new(&name), false).map_err(|e| io_err("wal open", e))?
        } else {
            create_segment(&shared, resume.segment, false).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) => Error::DiskFull,
                _ => io_err("wal segment create", e),
            })?
        };
        let mut flusher = Flusher {
            cur: Segment {
                no: resume.segment,
                base_lsn: resume.base_lsn,
                file,
                header_written: resume.header_written,
            },
            spare: None,
            preparing: None,
            next_no: resume.segment + 1,
            retry_spare_at: Instant::now(),
            written: resume.next_lsn,
            synced: resume.next_lsn,
            last_sync: Instant::now(),
            mark: shared.vfs.open(Path::new(SYNC_MARK_NAME), true).ok(),
            marked: 0,
            last_mark: None,
            buf: Vec::with_capacity(shared.cfg.ring_bytes),
            bounds: Vec::new(),
            shared,
        };
        flusher.ensure_spare(false);
        Ok(flusher)
    }

    fn seg_bytes(&self) -> u64 {
        self.shared.cfg.segment_bytes
    }

    /// Log positions a reservation may end at: what the current segment and the spare hold.
    fn update_limit(&self) {
        let room = self.shared.cfg.segment_room();
        let mut limit = self.cur.base_lsn + room;
        if self.spare.is_some() {
            // A size roll happens at the first record that does not fit, which wastes at most
            // one record's worth of the current segment.
            limit += room - self.shared.cfg.max_record_bytes() as u64;
        }
        self.shared.ring.set_limit(limit);
    }

    /// No spare this time: writers past the limit now fail with DiskFull instead of waiting,
    /// and the preparation is retried after `SPARE_RETRY`.
    fn spare_failed(&mut self) {
        self.retry_spare_at = Instant::now() + SPARE_RETRY;
        self.shared.ring.set_space_exhausted(true);
    }

    /// Keeps a spare segment coming: prepared on a helper thread (zero-filling a segment
    /// takes long enough to stall group commit), collected here. With `wait`, blocks until
    /// the preparation in progress (or a new one) finishes.
    fn ensure_spare(&mut self, wait: bool) {
        if self.spare.is_none() {
            if self.preparing.is_none() && (wait || Instant::now() >= self.retry_spare_at) {
                let shared = Arc::clone(&self.shared);
                let no = self.next_no;
                let spawned = std::thread::Builder::new().name("holt-wal-prealloc".into()).spawn(move || {
                    let result = create_segment(&shared, no, true);
                    shared.ring.wake_flusher();
                    result
                });
                match spawned {
                    Ok(handle) => self.preparing = Some(handle),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the log preallocation thread");
                        self.spare_failed();
                    }
                }
            }
            if self.preparing.as_ref().is_some_and(|h| wait || h.is_finished()) {
                if let Some(handle) = self.preparing.take() {
                    match handle.join() {
                        Ok(Ok(file)) => {
                            self.spare = Some((self.next_no, file));
                            self.next_no += 1;
                            self.shared.ring.set_space_exhausted(false);
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "cannot preallocate the next log segment; retrying");
                            self.spare_failed();
                        }
                        Err(_) => self.spare_failed(),
                    }
                }
            }
        }
        self.update_limit();
    }

    /// Runs the loop until the log closes or fails. On a panic, the guard poisons the log;
    /// either way the drop joins the preallocation helper (`Drop for Flusher`).
    pub(super) fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let _panic = PoisonOnPanic::new(&shared, "log flusher");
        if let Err((op, e)) = self.run_inner() {
            self.shared.poison(op, &e);
        }
    }

    fn run_inner(&mut self) -> std::result::Result<(), (&'static str, io::Error)> {
        let ring_bytes = self.shared.cfg.ring_bytes as u64;
        loop {
            fail::fail_point!("wal-flusher-loop");
            let epoch = self.shared.ring.epoch();
            if self.shared.ring.is_poisoned() {
                return Ok(());
            }
            let open = self.shared.ring.is_open();
            let mut buf = std::mem::take(&mut self.buf);
            let mut bounds = std::mem::take(&mut self.bounds);
            buf.clear();
            bounds.clear();
            self.shared.ring.drain(&mut buf, ring_bytes, |pos| bounds.push(pos));
            // Read after draining: a roll request for a position inside this batch was made
            // before those records were reserved, so it is visible here.
            let roll_at = self.shared.roll.lock().request;
            let wrote = !buf.is_empty();
            let result = self.write_records(&buf, &bounds, roll_at);
            self.buf = buf;
            self.bounds = bounds;
            result?;
            if roll_at == Some(self.written) {
                self.roll(self.written, false)?;
            }

            let wanted = self.shared.sync_wanted.load(Ordering::Acquire);
            let interval = self.shared.cfg.flush_interval;
            let due = self.written > self.synced
                && (wanted > self.synced || !open || self.last_sync.elapsed() >= interval);
            if due {
                self.sync()?;
            }
            self.ensure_spare(false);

            if !open && self.written == self.shared.ring.head() && self.synced == self.written {
                self.write_mark(true);
                let mut roll = self.shared.roll.lock();
                if roll.request.take().is_some() {
                    roll.answer = Some(Err(Error::Closed));
                }
                self.shared.roll_cv.notify_all();
                return Ok(());
            }
            if !wrote && !due {
                // While anything reserved is not yet synced, sleep LAZY: the timer fires
                // within the flush interval, so async writers need not wake us (see
                // `Ring::nudge_flusher`). With nothing outstanding, the next record wakes us.
                let lazy = self.written > self.synced || self.shared.ring.head() > self.written;
                let mut timeout = if self.written > self.synced {
                    interval.saturating_sub(self.last_sync.elapsed())
                } else if lazy {
                    interval
                } else {
                    Duration::from_secs(1)
                };
                if self.spare.is_none() {
                    timeout = timeout.min(SPARE_RETRY);
                }
                let timeout = timeout.max(Duration::from_micros(50));
                if lazy {
                    self.shared.ring.sleep_lazy(epoch, timeout);
                } else {
                    self.shared.ring.sleep(epoch, Some(timeout));
                }
            }
        }
    }

    /// Writes drained records (`bounds` holds each one's log position), rolling segments at
    /// a requested position and where a record would not fit.
    fn write_records(
        &mut self,
        buf: &[u8],
        bounds: &[u64],
        roll_at: Option<u64>,
    ) -> std::result::Result<(), (&'static str, io::Error)> {
        let Some(&first) = bounds.first() else { return Ok(()) };
        debug_assert_eq!(first, self.written);
        let end = first + buf.len() as u64;
        let mut chunk_start = first;
        for (i, &pos) in bounds.iter().enumerate() {
            let next = bounds.get(i + 1).copied().unwrap_or(end);
            let over = SEGMENT_HEADER_BYTES as u64 + next - self.cur.base_lsn > self.seg_bytes();
            if (roll_at == Some(pos) || over) && pos != self.cur.base_lsn {
                self.write_chunk(&buf[(chunk_start - first) as usize..(pos - first) as usize])?;
                chunk_start = pos;
                self.roll(pos, over)?;
            } else if roll_at == Some(pos) {
                self.answer_roll(pos);
            }
        }
        self.write_chunk(&buf[(chunk_start - first) as usize..])
    }

    fn write_chunk(&mut self, chunk: &[u8]) -> std::result::Result<(), (&'static str, io::Error)> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.written - self.synced + chunk.len() as u64 > self.shared.cfg.window_bytes() {
            self.sync()?;
        }
        let offset = SEGMENT_HEADER_BYTES as u64 + self.written - self.cur.base_lsn;
        let file = self.cur.file.clone();
        let header_written = self.cur.header_written;
        let header = SegmentHeader { segment: self.cur.no, base_lsn: self.cur.base_lsn };
        let result = failpoint("wal-append-write").and_then(|()| {
            if header_written {
                file.write_all_at(chunk, offset)
            } else {
                // The header goes out with the first records, in one write.
                file.write_all_at(&[&header.encode()[..], chunk].concat(), 0)
            }
        });
        result.map_err(|e| ("wal write", e))?;
        self.cur.header_written = true;
        self.written += chunk.len() as u64;
        self.shared.bytes_written.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn sync(&mut self) -> std::result::Result<(), (&'static str, io::Error)> {
        if self.written == self.synced {
            return Ok(());
        }
        let file = self.cur.file.clone();
        self.shared.ring.begin_sync(self.written);
        failpoint("wal-fdatasync").and_then(|()| file.sync_data()).map_err(|e| ("wal fdatasync", e))?;
        self.synced = self.written;
        self.last_sync = Instant::now();
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        self.shared.ring.end_sync();
        self.write_mark(false);
        Ok(())
    }

    /// Records in the sync mark file that the log is durable below `synced`: written after
    /// the fdatasync returned, never synced itself (see `SYNC_MARK_NAME`), at most every
    /// `MARK_INTERVAL` unless `now` (the log is closing). Best effort: a mark that is not
    /// written leaves replay with an older one.
    fn write_mark(&mut self, now: bool) {
        if self.synced <= self.marked || (!now && self.last_mark.is_some_and(|t| t.elapsed() < MARK_INTERVAL))
        {
            return;
        }
        if let Some(mark) = &self.mark {
            if let Err(e) = mark.write_all_at(&encode_sync_mark(self.synced), 0) {
                tracing::debug!(error = %e, "writing the log's sync mark failed");
            }
        }
        self.marked = self.synced;
        self.last_mark = Some(Instant::now());
    }

    /// Starts the spare segment at log position `pos` (a record boundary; everything before
    /// it is written). The old segment is synced first, so the durable log is always a prefix.
    /// `size`: the next record does not fit the current segment (else a checkpoint asked).
    fn roll(&mut self, pos: u64, size: bool) -> std::result::Result<(), (&'static str, io::Error)> {
        debug_assert_eq!(pos, self.written);
        if pos == self.cur.base_lsn {
            self.answer_roll(pos);
            return Ok(());
        }
        if !size && (self.spare.is_none() || pos - self.cur.base_lsn < self.shared.cfg.stay_bytes()) {
            // A checkpoint asked, and the log stays in this segment, durable up to `pos`; the
            // checkpoint replays from its start (see `Rolled`). Either the next segment is
            // still being zero-filled (taking ~0.1 s for 32 MiB here: waiting would stall
            // every sync writer that long), or this one is little used (`stay_bytes`):
            // rolling would zero-fill a whole spare for every checkpoint, which made a
            // checkpoint after 100k overwrites take 0.19 s instead of 0.12 s here.
            self.sync()?;
            self.answer_roll(pos);
            self.ensure_spare(false);
            return Ok(());
        }
        if self.spare.is_none() {
            self.ensure_spare(true);
        }
        let Some((no, file)) = self.spare.take() else {
            // No space for a new segment. Only a size roll gets here (a checkpoint's roll
            // stays in place when no spare is ready), and it cannot happen, because the
            // limit kept writers out; answer a request at this position all the same.
            let mut roll = self.shared.roll.lock();
            if roll.request == Some(pos) {
                roll.request = None;
                roll.answer = Some(Err(Error::DiskFull));
                self.shared.roll_cv.notify_all();
            }
            return Ok(());
        };
        failpoint("wal-segment-roll").map_err(|e| ("wal segment roll", e))?;
        self.sync()?;
        self.cur = Segment { no, base_lsn: pos, file, header_written: false };
        self.ensure_spare(false);
        self.answer_roll(pos);
        Ok(())
    }

    fn answer_roll(&self, pos: u64) {
        let mut roll = self.shared.roll.lock();
        if roll.request == Some(pos) {
            debug_assert!(self.synced >= pos || self.cur.base_lsn == pos);
            roll.request = None;
            roll.answer = Some(Ok(Rolled { segment: self.cur.no, base_lsn: self.cur.base_lsn }));
            self.shared.roll_cv.notify_all();
        }
    }
}

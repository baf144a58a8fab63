//! Checkpoints: dirty frames to fresh slots, the manifest switch, then log truncation.
//!
//! Order of a checkpoint, and why each step sits where it does:
//! 1. Under the write gate (writers hold it shared from log reservation to publication, so
//!    when the checkpointer holds it exclusively no batch is half done): read the log head L,
//!    ask the flusher to start a new segment at L, and capture the dirty frames (Arc clones).
//!    This is the only time writers wait; its length is `Stats::checkpoint_stall_max_us`.
//!    The flusher syncs the log up to L and answers with the segment replay must start
//!    with: the new one (base L), or, when no preallocated segment is ready yet, the
//!    current one (base below L) rather than making every sync writer wait for one.
//! 2. With no lock held: encode the captured frames, write them to FRESH slots, fdatasync.
//!    A frame whose change log says which keys changed since its image on disk is written
//!    as a delta of those keys instead (appended to the frame's chain), unless the chain is
//!    long or large already; see "Frame deltas" in ARCHITECTURE.md.
//! 3. Write the new manifest (checkpoint_lsn = that segment's base) to a temp file, fsync
//!    it, rename it over the manifest, fsync the directory. From here on it is durable.
//! 4. Only then delete log segments before that segment (and fsync the directory), and mark
//!    the written frames clean so the cache may evict them.
//!
//! Frames that hold writes at or past the manifest's checkpoint_lsn (the segment stayed) are
//! safe: replay applies those records again, and each is a blind put or delete stamped with
//! its own lsn, so the last one to each key wins whatever the frames held.
//!
//! A failure in 1–3 before the rename leaves the old manifest, its slots and the whole log
//! untouched: the checkpoint is simply retried. A failure of the rename or of the directory
//! fsync leaves the durable manifest unknown, so the database is poisoned (reopen recovers).

pub(crate) mod store;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::api::Options;
use crate::error::{Error, Result};
use crate::format::frame::image_sum;
use crate::format::manifest::{Manifest, StoredUsage, MANIFEST_NAME, MANIFEST_TMP_NAME};
use crate::format::wal::parse_segment_name;
use crate::format::FRAME_SIZE;
use crate::io::{failpoint, DirLock, Vfs};
use crate::tree::{encode_delta, encode_frame, Capture, CapturedFrame, Tree};
use crate::wal::{Rolled, Wal};
use store::{manifest_lists, FrameLoc, FrameStore, SlotTable, SlotWrite};

/// How long after a failed background checkpoint the next attempt waits.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// How often the background checkpointer looks at its triggers.
const POLL: Duration = Duration::from_millis(50);

/// The shortest time between two checkpoints started because the frame cache is over budget.
const PRESSURE_SPACING: Duration = Duration::from_secs(1);
/// The time between two checkpoints started one after the other for frames that reads want
/// written whole (`Tree::wants_rewrites`), each taking at most `REWRITES_PER_CHECKPOINT` of
/// them, once the first waited for `Options::checkpoint_interval`.
const REWRITE_SPACING: Duration = Duration::from_millis(200);

/// Everything a directory-backed database has beyond its tree.
pub(crate) struct Durable {
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) wal: Wal,
    pub(crate) store: Arc<FrameStore>,
    pub(crate) options: Options,
    /// The durable manifest; the lock also serializes checkpoints.
    manifest: Mutex<Manifest>,
    last_checkpoint_lsn: AtomicU64,
    checkpoints: AtomicU64,
    /// Checkpoints started and not returned yet (`Stats::checkpoint_running`): one at most
    /// holds the manifest lock, another may be finishing after releasing it.
    running: AtomicUsize,
    stall_max_us: AtomicU64,
    /// Frames checkpoints wrote whole, and as deltas; of the deltas, those that replaced a
    /// chain.
    frames_whole: AtomicU64,
    frames_delta: AtomicU64,
    chains_merged: AtomicU64,
    /// Of the frames written whole, those written for their reads (`CapturedFrame::rewrite`).
    frames_rewritten: AtomicU64,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    background: Mutex<Option<std::thread::JoinHandle<()>>>,
    _lock: DirLock,
}

/// Counts a checkpoint as running (`Durable::running`) until dropped, whichever way it returns.
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    fn start(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Running(count)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn io_error(op: &'static str) -> impl Fn(io::Error) -> Error {
    move |source| match source.raw_os_error() {
        Some(libc::ENOSPC) => Error::DiskFull,
        _ => Error::Io { op, source, may_have_applied: false },
    }
}

/// Most threads a checkpoint encodes frames on.
const ENCODE_THREADS_MAX: usize = 4;

/// Frames a checkpoint encodes and writes at a time: bounds the encoded images it holds
/// (at most 16 × 512 KiB), while keeping `ENCODE_THREADS_MAX` encoders busy and batching the
/// writes (io_uring submits a batch at once).
const WRITE_BATCH_FRAMES: usize = 4 * ENCODE_THREADS_MAX;

/// How a checkpoint writes a frame.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Its whole image, in a slot of its own (the chain starts empty).
    Whole,
    /// A delta appended to its chain.
    Delta,
    /// A delta that replaces its chain (`Tree::merge_chain`).
    Merged,
}

/// A frame id, its encoded image or delta, and how it is written.
type Encoded = (u64, Vec<u8>, Written);

/// Most deltas on top of a frame's image: the next checkpoint merges the chain into one
/// delta if that is small (`DELTA_MERGE_FRACTION`), else writes the frame whole.
const DELTA_CHAIN_MAX: usize = 4;
/// A frame's deltas together stay below this fraction of its encoded size; past it the
/// frame is written whole (a load reads and applies every delta).
const DELTA_CHAIN_FRACTION: usize = 4;
/// A full chain is merged into one delta (with the new changes) while that delta stays
/// below this fraction of the frame's encoded size, instead of the frame being written
/// whole (an evicted frame read, decoded, changed and encoded: ~1 ms; a resident one
/// encoded). Sparse random writes, a few keys a frame between checkpoints, fill chains with
/// tiny deltas: at 100M keys the checkpoint after 100k random overwrites took 6.8 s writing
/// them whole, 2.1 s merging. At 10M keys, 100k overwrites a checkpoint (22 keys a frame)
/// fill four deltas past 1/32 of a frame: with 1/16, 2-35 frames a round were written
/// whole instead of 328-1,243, and the checkpoint took 0.09-0.63 s instead of 0.23-0.83,
/// gets and 100-key scans unchanged. Small, to bound the deltas walks verify and keep
/// (merging up to a quarter slowed reads: docs/decisions.md).
const DELTA_MERGE_FRACTION: usize = 16;

/// Encodes the captured frames, in order, on up to `ENCODE_THREADS_MAX` threads (the calling
/// one included). Encoding walks every node of a frame and is bound by memory latency (about
/// 2 ms per full frame here), so it dominated the checkpoint on one thread; the I/O that
/// follows stays on the calling thread, in frame order, so simulated-I/O tests replay exactly.
fn encode_parallel<T: Sync>(
    dirty: &[T],
    encode: impl Fn(&T) -> Result<Encoded> + Sync,
) -> Result<Vec<Encoded>> {
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(ENCODE_THREADS_MAX).min(dirty.len());
    if threads <= 1 {
        return dirty.iter().map(&encode).collect();
    }
    let next = AtomicUsize::new(0);
    // Each worker takes the next frame index until none is left (or one failed).
    let work = || {
        let mut done: Vec<(usize, Encoded)> = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(frame) = dirty.get(i) else { return Ok(done) };
            match encode(frame) {
                Ok(blob) => done.push((i, blob)),
                Err(e) => {
                    next.store(dirty.len(), Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    };
    let parts: Vec<Result<Vec<(usize, Encoded)>>> =
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
            let mut parts = vec![work()];
            for helper in helpers {
                parts.push(helper.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument("a frame encoding thread panicked".into()))
                }));
            }
            parts
        });
    let mut blobs: Vec<Option<Encoded>> = (0..dirty.len()).map(|_| None).collect();
    for part in parts {
        for (i, blob) in part? {
            blobs[i] = Some(blob);
        }
    }
    // Every index below `dirty.len()` was taken by exactly one worker, and none failed.
    blobs
        .into_iter()
        .enumerate()
        .map(|(i, blob)| blob.ok_or_else(|| Error::InvalidArgument(format!("frame #{i} was not encoded"))))
        .collect()
}

/// Why writing a manifest failed: before the rename nothing changed; after it, the durable
/// manifest is unknown.
pub(crate) enum ManifestError {
    BeforeRename(&'static str, io::Error),
    AfterRename(&'static str, io::Error),
}

/// Replaces the manifest atomically and durably: temp file, fsync, rename, directory fsync.
pub(crate) fn write_manifest(vfs: &dyn Vfs, manifest: &Manifest) -> std::result::Result<(), ManifestError> {
    let bytes = manifest.encode();
    let before = |op: &'static str| move |e: io::Error| ManifestError::BeforeRename(op, e);
    let tmp = vfs.open(Path::new(MANIFEST_TMP_NAME), true).map_err(before("manifest write"))?;
    failpoint("manifest-write")
        .and_then(|()| tmp.set_len(0))
        .and_then(|()| tmp.write_all_at(&bytes, 0))
        .map_err(before("manifest write"))?;
    failpoint("manifest-sync").and_then(|()| tmp.sync_data()).map_err(before("manifest sync"))?;
    let after = |op: &'static str| move |e: io::Error| ManifestError::AfterRename(op, e);
    failpoint("manifest-rename")
        .and_then(|()| vfs.rename(Path::new(MANIFEST_TMP_NAME), Path::new(MANIFEST_NAME)))
        .map_err(after("manifest rename"))?;
    failpoint("dir-sync").and_then(|()| vfs.sync_dir()).map_err(after("directory fsync"))
}

impl Durable {
    pub(crate) fn new(
        vfs: Arc<dyn Vfs>,
        wal: Wal,
        store: Arc<FrameStore>,
        manifest: Manifest,
        options: Options,
        lock: DirLock,
    ) -> Durable {
        Durable {
            vfs,
            wal,
            store,
            options,
            last_checkpoint_lsn: AtomicU64::new(manifest.checkpoint_lsn),
            manifest: Mutex::new(manifest),
            checkpoints: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            stall_max_us: AtomicU64::new(0),
            frames_whole: AtomicU64::new(0),
            frames_delta: AtomicU64::new(0),
            chains_merged: AtomicU64::new(0),
            frames_rewritten: AtomicU64::new(0),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            background: Mutex::new(None),
            _lock: lock,
        }
    }

    pub(crate) fn checkpoints(&self) -> u64 {
        self.checkpoints.load(Ordering::Relaxed)
    }

    /// Whether a checkpoint is running: it may have taken the change logs it writes (their
    /// memory no longer counted by the cache) and not be counted in `checkpoints` yet.
    pub(crate) fn checkpoint_running(&self) -> bool {
        self.running.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn stall_max_us(&self) -> u64 {
        self.stall_max_us.load(Ordering::Relaxed)
    }

    /// Frames written whole and as deltas by checkpoints since open, of the deltas those
    /// that replaced a chain, and of the whole ones those written for their reads.
    pub(crate) fn frames_written(&self) -> (u64, u64, u64, u64) {
        (
            self.frames_whole.load(Ordering::Relaxed),
            self.frames_delta.load(Ordering::Relaxed),
            self.chains_merged.load(Ordering::Relaxed),
            self.frames_rewritten.load(Ordering::Relaxed),
        )
    }

    /// Runs one checkpoint (see the module docs for the steps).
    pub(crate) fn checkpoint(&self, tree: &Tree) -> Result<()> {
        let mut durable_manifest = self.manifest.lock();
        let _running = Running::start(&self.running);
        if self.wal.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let stall_start = Instant::now();
        let (lsn, capture) = {
            let _gate = tree.write_gate().write();
            let lsn = self.wal.head();
            self.wal.request_roll(lsn);
            (lsn, tree.capture())
        };
        let stall_us = stall_start.elapsed().as_micros() as u64;
        self.stall_max_us.fetch_max(stall_us, Ordering::Relaxed);
        let rolled = self.wal.wait_roll();
        // Checked once the roll it asked for is answered: a checkpoint leaves no request behind.
        let capture = capture?;
        // From here on the capture holds the dirty frames' change logs. If the checkpoint
        // fails, those frames are written whole next time: marked before the manifest lock is
        // released, or a checkpoint waiting for it would capture the frames' later keys alone
        // and write deltas without the lost ones.
        let written = rolled.and_then(|rolled| {
            if capture.dirty.is_empty() && lsn == self.last_checkpoint_lsn.load(Ordering::Acquire) {
                return Ok(None);
            }
            self.write_checkpoint(tree, &mut durable_manifest, lsn, &rolled, &capture)
                .map(|held| Some((rolled, held)))
        });
        let (rolled, held) = match written {
            Ok(Some(written)) => written,
            Ok(None) => return Ok(()),
            Err(e) => {
                tree.checkpoint_failed(capture.dirty.iter().map(|f| f.id));
                return Err(e);
            }
        };
        // Clean before the manifest lock is released: a checkpoint waiting for it would
        // otherwise capture these frames again (still dirty, at the same generation), and
        // then rewrite them after this loop let the cache evict them, changing the slots of
        // a clean, evicted frame under a point read that is walking its pages and deltas.
        for frame in &capture.dirty {
            tree.mark_clean(frame.id, frame.generation);
        }
        drop(held);
        // Before another checkpoint may write slots, after readers are let in.
        self.store.collect_garbage(false);
        drop(durable_manifest);
        // A named point after the lock is released, so a test can start a checkpoint here.
        fail::fail_point!("checkpoint-unlocked");
        self.remove_segments_before(rolled.segment);
        tracing::debug!(
            lsn,
            segment = rolled.segment,
            frames = capture.dirty.len(),
            stall_us,
            "checkpoint done"
        );
        Ok(())
    }

    /// Gives back to the file system every byte this process freed and has not punched yet
    /// (see `FrameStore::collect_garbage`): a clean close leaves the file at about its live
    /// bytes, unless an earlier process stopped without one (what it left stays until reused).
    pub(crate) fn release_garbage(&self) {
        let _manifest = self.manifest.lock();
        self.store.collect_garbage(true);
    }

    /// How a captured frame is written: a delta when its change log allows and its chain has
    /// room; a delta replacing a full chain when that is small; else its whole image.
    fn encode_captured(&self, tree: &Tree, frame: &CapturedFrame, old: &SlotTable) -> Result<Encoded> {
        let id = frame.id;
        let loc = old.get(&id.0).filter(|_| !frame.rewrite);
        let delta = loc.filter(|loc| loc.deltas.len() < DELTA_CHAIN_MAX).and_then(|loc| {
            let chain: usize =
                loc.deltas.iter().map(|&(at, _)| self.store.used_bytes(at).unwrap_or(FRAME_SIZE)).sum();
            let room = (frame.encoded_bytes / DELTA_CHAIN_FRACTION).checked_sub(chain)?;
            encode_delta(id, frame.root.as_ref(), &[], &frame.changes, loc.deltas.len() as u32 + 1, room)
        });
        if let Some(bytes) = delta {
            return Ok((id.0, bytes, Written::Delta));
        }
        let merge_max = frame.encoded_bytes / DELTA_MERGE_FRACTION;
        // A chain whose deltas' bytes (where known) pass the limit is not read: the merge
        // drops only each key's older entries, which few chains hold many of.
        let too_large = |loc: &FrameLoc| {
            loc.deltas.iter().map(|&(at, _)| self.store.used_bytes(at).unwrap_or(0)).sum::<usize>()
                > merge_max + loc.deltas.len() * crate::format::frame::HEADER_LEN
        };
        if loc.is_some_and(|loc| loc.deltas.len() == DELTA_CHAIN_MAX && !too_large(loc)) {
            match tree.merge_chain(frame, merge_max) {
                Ok(Some(bytes)) => return Ok((id.0, bytes, Written::Merged)),
                Ok(None) => {}
                // A resident frame does not need its chain: written whole, it drops a chain
                // that cannot be read (which would otherwise fail every checkpoint).
                Err(e) if frame.root.is_some() => {
                    tracing::warn!(frame = id.0, error = %e, "a frame's deltas could not be merged; writing it whole")
                }
                Err(e) => return Err(e),
            }
        }
        let image = match &frame.root {
            Some(root) => encode_frame(id, root)?,
            None => tree.rewrite_unloaded(frame)?,
        };
        Ok((id.0, image, Written::Whole))
    }

    /// Steps 2 to 4 of a checkpoint (see the module docs) for a capture taken at `lsn`.
    /// Returns the load locks of the frames captured without a root, held from before the
    /// new manifest's slots are installed: the caller marks the frames clean (dropping the
    /// captured changes the new slots hold) before it lets loads and point reads in.
    fn write_checkpoint<'c>(
        &self,
        tree: &Tree,
        durable_manifest: &mut Manifest,
        lsn: u64,
        rolled: &Rolled,
        capture: &'c Capture,
    ) -> Result<Vec<parking_lot::MutexGuard<'c, ()>>> {
        // Encode and write in batches: the images of every dirty frame at once would be held
        // in memory together (about the encoded size of the whole tree after random writes).
        let old = self.store.slots();
        // Enough for every frame: a whole image takes a slot, and deltas (each at most a
        // quarter of a frame) pack at least one to a slot.
        let mut fresh = self.store.fresh_slots(capture.dirty.len()).into_iter();
        let mut next_slot = || {
            fresh.next().ok_or_else(|| Error::InvalidArgument("a checkpoint ran out of fresh slots".into()))
        };
        let mut table: SlotTable = HashMap::with_capacity(capture.live.len());
        for id in &capture.live {
            if let Some(loc) = old.get(&id.0) {
                table.insert(id.0, loc.clone());
            }
        }
        let (mut whole, mut deltas, mut merged) = (0u64, 0u64, 0u64);
        // Deltas waiting to fill the slot they are packed into (written when it is full, and
        // at the end): one write per slot instead of one small write per frame.
        let mut pack: Vec<Vec<u8>> = Vec::new();
        let mut pack_slot: Option<u64> = None;
        let mut pack_bytes = 0usize;
        let write_pack = |pack: &mut Vec<Vec<u8>>, slot: Option<u64>| -> Result<()> {
            if let Some(slot) = slot.filter(|_| !pack.is_empty()) {
                let images = pack.iter().map(|d| &d[..]).collect();
                self.store.write_slots(&[SlotWrite { slot, images }]).map_err(io_error("frame write"))?;
            }
            pack.clear();
            Ok(())
        };
        for frames in capture.dirty.chunks(WRITE_BATCH_FRAMES) {
            let blobs = encode_parallel(frames, |f: &CapturedFrame| self.encode_captured(tree, f, &old))?;
            let mut images: Vec<(u64, Vec<u8>)> = Vec::new();
            for (id, bytes, written) in blobs {
                if written == Written::Whole {
                    let slot = next_slot()?;
                    whole += 1;
                    table.insert(
                        id,
                        FrameLoc { image: slot, image_sum: image_sum(&bytes), deltas: Vec::new() },
                    );
                    images.push((slot, bytes));
                    continue;
                }
                if pack_slot.is_none() || pack_bytes + bytes.len() > FRAME_SIZE {
                    write_pack(&mut pack, pack_slot)?;
                    pack_slot = Some(next_slot()?);
                    pack_bytes = 0;
                }
                let slot = pack_slot.unwrap_or_default();
                deltas += 1;
                let at = slot * FRAME_SIZE as u64 + pack_bytes as u64;
                let chain = &mut table.entry(id).or_default().deltas;
                if written == Written::Merged {
                    merged += 1;
                    chain.clear();
                }
                chain.push((at, image_sum(&bytes)));
                // Sealed images are padded to 4 KiB already: the next delta starts aligned.
                pack_bytes += bytes.len();
                pack.push(bytes);
            }
            let writes: Vec<SlotWrite<'_>> = images
                .iter()
                .map(|(slot, bytes)| SlotWrite { slot: *slot, images: vec![&bytes[..]] })
                .collect();
            self.store.write_slots(&writes).map_err(io_error("frame write"))?;
        }
        write_pack(&mut pack, pack_slot)?;
        self.store.sync().map_err(io_error("frame sync"))?;
        if let Some(missing) = capture.live.iter().find(|id| !table.contains_key(&id.0)) {
            return Err(Error::InvalidArgument(format!("live frame {missing} has no image to checkpoint")));
        }
        let (frames, delta_list) = manifest_lists(&table);
        // Replay starts at the segment's first record: L after a roll, or an earlier position
        // when the log stayed in its segment. The frames hold exactly the writes below L
        // (captured under the exclusive gate), so replay skips the records between
        // `base_lsn` and L: applying them again would change nothing but would dirty every
        // frame they touch, and a dirty frame is evicted only while its log can stand for it.
        debug_assert!(rolled.base_lsn <= lsn);
        let manifest = Manifest {
            checkpoint_lsn: rolled.base_lsn,
            wal_segment: rolled.segment,
            root_frame: capture.root_frame.0,
            key_count: capture.keys,
            // Never smaller than before: the log may still hold records an earlier, larger
            // ring wrote (replay reads a segment from its start).
            wal_window_bytes: self.wal.config().window_bytes().max(durable_manifest.wal_window_bytes),
            frames_lsn: lsn,
            frames,
            deltas: delta_list,
            usage: Some(StoredUsage {
                weigher: self.options.weigher.map_or("", |w| w.name).into(),
                frames: capture.usage.iter().map(|&(id, keys, weight)| (id.0, keys, weight)).collect(),
            }),
            sizes: capture.sizes.iter().map(|&(id, size)| (id.0, size)).collect(),
        };
        match write_manifest(&*self.vfs, &manifest) {
            Ok(()) => {}
            Err(ManifestError::BeforeRename(op, source)) => return Err(io_error(op)(source)),
            Err(ManifestError::AfterRename(op, source)) => {
                self.wal.poison(op, &source);
                return Err(Error::Io { op, source, may_have_applied: false });
            }
        }
        // In id order, as every holder of more than one takes them (a loader holds one). Every
        // captured frame's, not only those captured without a root: a frame captured resident
        // may have been evicted dirty just after (`FrameCell::detach_changes` runs under the
        // latch, which the capture does not take), and no walk may pair its new disk state
        // with what it kept of the old one.
        let held = capture.dirty.iter().map(|f| f.cell.hold_loads()).collect();
        self.store.install(table);
        *durable_manifest = manifest;
        self.last_checkpoint_lsn.store(lsn, Ordering::Release);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.frames_whole.fetch_add(whole, Ordering::Relaxed);
        self.frames_delta.fetch_add(deltas, Ordering::Relaxed);
        self.chains_merged.fetch_add(merged, Ordering::Relaxed);
        let rewritten = capture.dirty.iter().filter(|f| f.rewrite).count() as u64;
        self.frames_rewritten.fetch_add(rewritten, Ordering::Relaxed);
        Ok(held)
    }

    /// Deletes log segments older than `segment` (the durable checkpoint covers them).
    /// Failures only leave files that the next checkpoint or open removes.
    fn remove_segments_before(&self, segment: u64) {
        let Ok(names) = self.vfs.list() else { return };
        let mut removed = false;
        for name in names {
            if parse_segment_name(&name).is_some_and(|no| no < segment) {
                removed |= self.vfs.remove(Path::new(&name)).is_ok();
            }
        }
        if removed {
            if let Err(e) = self.vfs.sync_dir() {
                tracing::warn!(error = %e, "directory fsync after removing log segments failed");
            }
        }
    }

    /// Starts the background checkpointer: checkpoints when the log grew by
    /// `checkpoint_wal_bytes` since the last one, every `checkpoint_interval` while anything
    /// was written or frames wait to be written whole for their reads (sooner once reads
    /// went through `checkpoint_wal_bytes` of deltas again), and (at most every
    /// `PRESSURE_SPACING`) when the frame cache is over its memory budget: frames due to be
    /// written whole, and logs the cache counts, go only when a checkpoint writes them.
    pub(crate) fn start_background(self: &Arc<Self>, tree: Arc<Tree>) {
        let durable = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("holt-checkpoint".into()).spawn(move || {
            let mut last = Instant::now();
            let mut retry_at = Instant::now();
            let mut rewriting = false;
            loop {
                {
                    let mut stop = durable.stop.lock();
                    if !*stop {
                        durable.stop_cv.wait_for(&mut stop, POLL);
                    }
                    if *stop || durable.wal.is_poisoned() {
                        return;
                    }
                }
                let grown =
                    durable.wal.head().saturating_sub(durable.last_checkpoint_lsn.load(Ordering::Acquire));
                let interval = durable.options.checkpoint_interval;
                // Frames reads want written whole: after the interval, as for writes, or once
                // reads went through as many bytes of deltas again as the log may grow by; then,
                // while more wait than one checkpoint takes, every `REWRITE_SPACING`.
                rewriting &= tree.wants_rewrites();
                let rewrites_due = tree.wants_rewrites()
                    && (last.elapsed() >= interval
                        || tree.reread_bytes() >= durable.options.checkpoint_wal_bytes
                        || (rewriting && last.elapsed() >= REWRITE_SPACING));
                let due = grown >= durable.options.checkpoint_wal_bytes
                    || (grown > 0 && last.elapsed() >= interval)
                    || (grown > 0 && last.elapsed() >= PRESSURE_SPACING && tree.over_budget_after_eviction())
                    || rewrites_due;
                if !due || Instant::now() < retry_at {
                    continue;
                }
                match durable.checkpoint(&tree) {
                    Ok(()) => {
                        last = Instant::now();
                        rewriting = rewrites_due;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "background checkpoint failed; will retry");
                        retry_at = Instant::now() + RETRY_AFTER_FAILURE;
                    }
                }
            }
        });
        match spawned {
            Ok(handle) => *self.background.lock() = Some(handle),
            Err(e) => tracing::error!(error = %e, "cannot start the background checkpointer"),
        }
    }

    /// Stops the background checkpointer (idempotent).
    pub(crate) fn stop_background(&self) {
        *self.stop.lock() = true;
        self.stop_cv.notify_all();
        if let Some(handle) = self.background.lock().take() {
            let _ = handle.join();
        }
    }
}

//! Hooks for the checkpointer and for opening a stored tree.
//!
//! A checkpoint, with writers stopped by the tree's write gate (held exclusively), calls
//! `capture` (Arc clones only: no encoding while writers wait), lets writers go, encodes and
//! writes the captured roots with `encode_frame`, and then calls `mark_clean` for each written
//! frame so the cache may evict it. Opening calls `from_frames`: nothing is read until a frame is first touched.

use std::sync::Arc;

use super::node::{Cell, Node, Weigh};
use super::Tree;
use crate::buffer::{ChangeLog, FrameCell, FrameSource};
use crate::error::{Error, Result};
use crate::format::FrameId;

/// A frame changed since its last checkpoint, as it stood when captured.
pub(crate) struct CapturedFrame {
    pub id: FrameId,
    /// Pass back to `mark_clean` once this image is durable.
    pub generation: u64,
    /// The frame's root; `None` for a frame written to while evicted (`Tree::write_unloaded`),
    /// whose state is its disk state with `changes` applied (`Tree::rewrite_unloaded`).
    pub root: Option<Node>,
    /// The keys changed since the previous capture (see `ChangeLog`).
    pub changes: Arc<ChangeLog<Node>>,
    /// The frame's cell: a checkpoint that writes an evicted frame holds off its loads and
    /// point reads while it switches the frame's disk state (`FrameCell::hold_loads`).
    pub cell: Arc<Cell>,
    /// The frame's encoded size when captured.
    pub encoded_bytes: usize,
    /// Written whole whatever its changes: reads kept going through its deltas
    /// (`FrameCell::wants_rewrite`). A clean frame captured for this has no changes.
    pub rewrite: bool,
}

/// Most frames a capture takes to be written whole for their reads (`CapturedFrame::rewrite`):
/// each costs the checkpoint about a millisecond and two frames of I/O, and the background
/// checkpointer comes back for the rest (`Tree::wants_rewrites`).
const REWRITES_PER_CHECKPOINT: usize = 128;

/// The result of `Tree::capture`.
pub(crate) struct Capture {
    /// Frames to write.
    pub dirty: Vec<CapturedFrame>,
    /// Every live frame (the manifest's list); frames not listed any more were merged away.
    pub live: Vec<FrameId>,
    /// The frame holding the tree's root.
    pub root_frame: FrameId,
    /// Keys in the tree at capture time.
    pub keys: u64,
    /// Every live frame's subtree totals at capture time (`Tree::usage_table`).
    pub usage: Vec<(FrameId, u64, u64)>,
    /// The encoded size bound of every live frame whose size is known, at capture time,
    /// sorted by frame id (`FrameCell::size_bytes`; 0, not known, is left out).
    pub sizes: Vec<(FrameId, u64)>,
}

impl Tree {
    /// Snapshots the dirty frames and takes their change logs. The caller keeps writers out
    /// while this runs, so the snapshot is consistent across frames; it costs one `Arc` clone
    /// per dirty frame. The caller must pass every captured frame to `checkpoint_failed` if the
    /// checkpoint fails, or to `mark_clean` once it is durable.
    /// A dirty frame without a resident root holds its changes in its change log alone
    /// (`Tree::write_unloaded`): it is captured without a root.
    pub(crate) fn capture(&self) -> Result<Capture> {
        let frames = self.frames.lock();
        let mut live: Vec<FrameId> = Vec::with_capacity(frames.len());
        let mut sizes: Vec<(FrameId, u64)> = Vec::with_capacity(frames.len());
        let mut dirty = Vec::new();
        let (mut rewrites, mut rewrites_left) = (0, 0);
        for (id, cell) in frames.iter() {
            live.push(*id);
            // A bound past a frame is no use to a reader (a write to the frame loads it).
            if let size @ 1..=crate::format::FRAME_SIZE = cell.size_bytes() {
                sizes.push((*id, size as u64));
            }
            let mut rewrite = cell.wants_rewrite();
            if rewrite && rewrites == REWRITES_PER_CHECKPOINT {
                rewrite = false;
                rewrites_left += 1;
            }
            rewrites += usize::from(rewrite);
            if cell.is_dirty() || rewrite {
                let (changes, released) = cell.capture_changes();
                self.pool.resized(-(released as i64));
                dirty.push(CapturedFrame {
                    id: cell.id,
                    generation: cell.generation(),
                    root: cell.root.load_full(),
                    changes,
                    encoded_bytes: cell.size_bytes(),
                    cell: Arc::clone(cell),
                    rewrite,
                });
            }
        }
        live.sort_unstable();
        sizes.sort_unstable();
        dirty.sort_unstable_by_key(|f| f.id);
        drop(frames);
        self.pool.set_rewrites_wanted(rewrites_left);
        let usage = self.usage_table();
        Ok(Capture { dirty, live, root_frame: self.root.id, keys: self.key_count(), usage, sizes })
    }

    /// Sets the encoded size bound the manifest stored (`Capture::sizes`) of each frame whose
    /// size is not known yet: at open, before replay, so the first write to an evicted frame
    /// need not bound it from its image and deltas (`codec::image_and_deltas`), which counts
    /// every put a delta holds as a new key and would pass the split size for many full
    /// frames.
    pub(crate) fn set_size_table(&self, table: &[(u64, u64)]) {
        let frames = self.frames.lock();
        for &(id, size) in table {
            if let Some(cell) = frames.get(&FrameId(id)) {
                cell.learn_size(size as usize);
            }
        }
    }

    /// Records that `generation` of frame `id` is durable; the frame becomes evictable unless
    /// it changed since.
    pub(crate) fn mark_clean(&self, id: FrameId, generation: u64) {
        let cell = self.frames.lock().get(&id).cloned();
        if let Some(cell) = cell {
            let (detached, deltas) = cell.mark_clean(generation);
            self.pool.released(detached, deltas);
        }
        self.pool.evict_if_needed();
    }

    /// After a failed checkpoint: the changes it captured go back to the frames' logs
    /// (nothing it wrote is named by a durable manifest).
    pub(crate) fn checkpoint_failed(&self, ids: impl Iterator<Item = FrameId>) {
        let frames = self.frames.lock();
        for id in ids {
            if let Some(cell) = frames.get(&id) {
                let released = cell.checkpoint_failed();
                self.pool.resized(-(released as i64));
            }
        }
    }

    /// The image of a frame captured without a root: its image and deltas on disk with the
    /// captured changes applied, written without decoding the frame (`splice`). Called by the
    /// checkpoint that captured it, under the manifest lock (the disk state cannot change
    /// meanwhile).
    pub(crate) fn rewrite_unloaded(&self, frame: &CapturedFrame) -> Result<Vec<u8>> {
        let cell = &frame.cell;
        // The captured changes are newer than every delta: applied after them.
        let changes = super::codec::logged_entries(&frame.changes)?;
        self.pool.read_stored(cell.id, |bytes, location, deltas| {
            let mut entries = super::codec::chain_entries(deltas)?;
            entries.extend(changes);
            let last = super::codec::last_entries(entries);
            let batch = super::codec::batch_of(&last, self.weigh);
            super::splice::rewrite_frame(bytes, cell.id, location, &batch, self.weigh, |id| {
                self.linked_frame(&self.frames.lock(), cell, id)
            })
        })
    }

    /// The delta that replaces frame `frame`'s whole chain on disk: the chain's entries and
    /// the captured changes, each key's last, as delta 1 of a new chain; `None` if it would
    /// pass `max_bytes` (or the change log gave up). The image stays as it is.
    pub(crate) fn merge_chain(&self, frame: &CapturedFrame, max_bytes: usize) -> Result<Option<Vec<u8>>> {
        if frame.changes.whole {
            return Ok(None);
        }
        self.pool.read_stored_deltas(frame.id, |deltas| {
            let mut earlier = Vec::new();
            for delta in deltas {
                earlier.extend(delta.entries()?);
            }
            Ok(super::codec::encode_delta(
                frame.id,
                frame.root.as_ref(),
                &earlier,
                &frame.changes,
                1,
                max_bytes,
            ))
        })
    }

    /// Opens a stored tree lazily: `frames` lists every live frame (the root among them),
    /// `source` reads them on first touch, `keys` is the stored key count, `weigh` the
    /// weight of a value (see `Options::weigher`). The frames' subtree totals start at zero:
    /// the caller sets them (`set_usage_table`) or counts them (`recount_usage`).
    pub(crate) fn from_frames(
        root_frame: FrameId,
        frames: &[FrameId],
        source: Arc<dyn FrameSource>,
        frame_budget_bytes: usize,
        memory_budget_bytes: usize,
        keys: u64,
        weigh: Weigh,
    ) -> Result<Tree> {
        if !frames.contains(&root_frame) {
            return Err(Error::InvalidArgument(format!(
                "root frame {root_frame} is not among the live frames"
            )));
        }
        let root = Arc::new(FrameCell::evicted(root_frame));
        let tree =
            Tree::assemble(Arc::clone(&root), frame_budget_bytes, memory_budget_bytes, Some(source), keys)
                .with_weigh(weigh);
        {
            let mut map = tree.frames.lock();
            for &id in frames {
                map.entry(id).or_insert_with(|| Arc::new(FrameCell::<Node>::evicted(id)));
            }
            let next = frames.iter().map(|f| f.0 + 1).max().unwrap_or(1);
            tree.next_frame_id.fetch_max(next, std::sync::atomic::Ordering::Relaxed);
        }
        // Load the root now: it is pinned in memory and every operation needs it.
        tree.load_root(&root)?;
        Ok(tree)
    }

    /// All live frames (for tests and stats).
    pub(crate) fn live_frames(&self) -> super::FrameMap {
        self.frames.lock().clone()
    }
}

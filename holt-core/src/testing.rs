//! A harness over the internal tree, for holt-core's own integration tests and benchmarks:
//! a tree with a chosen frame budget, its invariant check, listing cost, and reopening from
//! encoded frame images (the checkpoint path without files). Not a stable API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::api::{BatchOp, Entry, ListPage, ListRequest, Version};
use crate::buffer::{FrameSource, MemFrameSource};
use crate::error::Result;
use crate::format::FrameId;
pub use crate::tree::ShapeStats;
use crate::tree::{encode_frame, Tree, FRAME_BUDGET_BYTES};

/// The on-disk size of every frame.
pub const FRAME_SIZE: usize = crate::format::FRAME_SIZE;
/// The default split threshold of a frame.
pub const DEFAULT_FRAME_BUDGET_BYTES: usize = FRAME_BUDGET_BYTES;

/// The harness's weigher: a value weighs its length, so usage totals are checked with
/// weights that change on every overwrite.
fn length_weight(value: &[u8]) -> u64 {
    value.len() as u64
}

/// A tree plus the in-memory frame images it was last checkpointed to.
pub struct TreeHarness {
    tree: Tree,
    images: Arc<MemFrameSource>,
    lsn: AtomicU64,
    frame_budget_bytes: usize,
}

impl TreeHarness {
    /// An empty tree whose frames split above `frame_budget_bytes`.
    pub fn new(frame_budget_bytes: usize) -> TreeHarness {
        TreeHarness {
            tree: Tree::new(frame_budget_bytes, usize::MAX, None).with_weigh(length_weight),
            images: Arc::new(MemFrameSource::default()),
            lsn: AtomicU64::new(0),
            frame_budget_bytes,
        }
    }

    /// Applies a batch; returns its version and, per op, whether the key existed before it.
    pub fn apply(&self, ops: &[BatchOp]) -> Result<(Version, Vec<bool>)> {
        let outcome = self
            .tree
            .apply(&crate::api::ops_of(ops), &mut || Ok(self.lsn.fetch_add(1, Ordering::AcqRel) + 1))?;
        Ok((Version(outcome.version), outcome.existed.to_vec()))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.tree.get(key)
    }

    /// Keys under `prefix` and the sum of their values' lengths (`Tree::usage`).
    pub fn usage(&self, prefix: &[u8]) -> Result<crate::api::Usage> {
        self.tree.usage(prefix)
    }

    /// `Tree::get_with`: `f` on the borrowed value and version.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8], Version) -> R) -> Result<Option<R>> {
        self.tree.get_with(key, f)
    }

    /// `Tree::get_resident`: `None` when the key's path crosses an evicted frame.
    pub fn get_resident(&self, key: &[u8]) -> Option<Option<Entry>> {
        self.tree.get_resident(key)
    }

    /// `Tree::is_resident`: whether the key's path crosses no evicted frame.
    pub fn is_resident(&self, key: &[u8]) -> bool {
        self.tree.is_resident(key)
    }

    /// A listing page and the number of nodes the walk visited.
    pub fn list(&self, request: &ListRequest<'_>) -> Result<(ListPage, u64)> {
        let outcome = self.tree.list(request)?;
        Ok((outcome.page, outcome.nodes_visited))
    }

    /// A listing page and how many times the walk met a merged frame and restarted.
    pub fn list_restarts(&self, request: &ListRequest<'_>) -> Result<(ListPage, u64)> {
        let outcome = self.tree.list(request)?;
        Ok((outcome.page, outcome.restarts))
    }

    /// The spelled path of every link between frames and the depth of the frame it leads to
    /// (1 for frame 0's children), in key order.
    pub fn links(&self) -> Result<Vec<(Vec<u8>, usize)>> {
        self.tree.link_paths()
    }

    /// Checks every structural invariant of the tree.
    pub fn check(&self) -> std::result::Result<(), String> {
        self.tree.check_invariants()
    }

    pub fn frame_count(&self) -> usize {
        self.tree.frame_count()
    }

    pub fn key_count(&self) -> u64 {
        self.tree.key_count()
    }

    /// Sum of the frames' encoded sizes (header and records, without padding).
    pub fn encoded_bytes(&self) -> u64 {
        self.tree.live_frames().values().map(|c| c.size_bytes() as u64).sum()
    }

    /// Memory the cache counts for its resident frames (what the budget bounds).
    pub fn cache_bytes(&self) -> u64 {
        self.tree.pool_stats().cache_bytes
    }

    /// Point reads answered from a frame's image without decoding it.
    pub fn image_reads(&self) -> u64 {
        self.tree.pool_stats().image_reads
    }

    /// Reads from the frame images (the stand-in for the frames file).
    pub fn source_reads(&self) -> u64 {
        self.tree.pool_stats().source_reads
    }

    /// Splits, merges, merges that withdrew a grandparent frame's lead, and frames unlinked
    /// by the batch that emptied them, since creation.
    pub fn shape_stats(&self) -> ShapeStats {
        self.tree.shape_stats()
    }

    /// Frames read back from images, and frames evicted.
    pub fn cache_counters(&self) -> (u64, u64) {
        let s = self.tree.pool_stats();
        (s.frame_reads, s.frame_evictions)
    }

    /// Encodes every dirty frame into the image store and marks it clean, like a checkpoint
    /// (which may run beside writers: the capture holds the write gate, as a checkpoint's
    /// does). Not beside another `checkpoint`.
    pub fn checkpoint(&self) -> Result<()> {
        let capture = {
            let _gate = self.tree.write_gate().write();
            self.tree.capture()?
        };
        let mut images = Vec::with_capacity(capture.dirty.len());
        for frame in &capture.dirty {
            let image = match &frame.root {
                Some(root) => encode_frame(frame.id, root)?,
                None => self.tree.rewrite_unloaded(frame)?,
            };
            images.push((frame.id, image));
        }
        // As a checkpoint does: no load or point read of a captured frame sees its new image
        // before its captured changes are dropped.
        let held: Vec<_> = capture.dirty.iter().map(|f| f.cell.hold_loads()).collect();
        for (id, image) in images {
            self.images.store(id, image);
        }
        self.images.retain(&capture.live);
        for frame in &capture.dirty {
            self.tree.mark_clean(frame.id, frame.generation);
        }
        drop(held);
        Ok(())
    }

    /// The stored images (after `checkpoint`), by frame id.
    pub fn images(&self) -> Vec<(u64, Vec<u8>)> {
        self.images.images().into_iter().map(|(id, b)| (id.0, b)).collect()
    }

    /// Checkpoints, then opens a new tree over the images with a cache of
    /// `memory_budget_bytes`; frames are read back on first touch.
    pub fn reopen(self, memory_budget_bytes: usize) -> Result<TreeHarness> {
        self.checkpoint()?;
        let capture = self.tree.capture()?;
        let keys = self.tree.key_count();
        let lsn = self.lsn.load(Ordering::Acquire);
        let source: Arc<dyn FrameSource> = self.images.clone();
        let tree = Tree::from_frames(
            capture.root_frame,
            &capture.live,
            source,
            self.frame_budget_bytes,
            memory_budget_bytes,
            keys,
            length_weight,
        )?;
        tree.set_usage_table(&capture.usage);
        Ok(TreeHarness {
            tree,
            images: self.images,
            lsn: AtomicU64::new(lsn),
            frame_budget_bytes: self.frame_budget_bytes,
        })
    }

    /// Opens a tree over raw images (root frame 0), for corruption tests.
    pub fn open_images(
        images: Vec<(u64, Vec<u8>)>,
        frame_budget_bytes: usize,
        memory_budget_bytes: usize,
    ) -> Result<TreeHarness> {
        let source = Arc::new(MemFrameSource::default());
        let mut live = Vec::new();
        for (id, bytes) in images {
            live.push(FrameId(id));
            source.store(FrameId(id), bytes);
        }
        let dyn_source: Arc<dyn FrameSource> = source.clone();
        let tree = Tree::from_frames(
            FrameId::ROOT,
            &live,
            dyn_source,
            frame_budget_bytes,
            memory_budget_bytes,
            0,
            length_weight,
        )?;
        Ok(TreeHarness { tree, images: source, lsn: AtomicU64::new(1 << 40), frame_budget_bytes })
    }
}

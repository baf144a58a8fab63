//! The adaptive radix tree, partitioned into frames.
//!
//! A frame is a subtree whose root is published through a `FrameCell`; a parent frame points
//! at a child frame with a `Node::Link`. Frame 0 holds the root of the tree. A key belongs to
//! the deepest frame its path reaches: every key that passes a link lives below it, so the
//! path at which a frame hangs never changes during the frame's life.
//!
//! - `node`: node layouts (N4/N16/N48/N256, leaves, links).
//! - `write`: put and delete by path copying inside one frame.
//! - `apply`: batches, conditions, latching and publication.
//! - `split`: moving a subtree into a new frame, merging a small frame back.
//! - `list`: ordered scans and delimiter listings that skip rolled-up subtrees.
//! - `codec`: a frame's nodes to and from its on-disk bytes.
//! - `frames`: checkpoint hooks (capture, mark clean) and opening from stored frames.

mod apply;
mod check;
mod codec;
mod frames;
mod list;
pub(crate) mod node;
mod splice;
mod split;
mod usage;
mod write;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::api::{Entry, Version};
use crate::buffer::{BufferPool, FrameCell, FrameSource};
use crate::error::Result;
use crate::format::frame::FRAME_HEADER_LEN;
use crate::format::{FrameId, FRAME_SIZE};
use node::{Cell, Inner, Leaf, Node, Shared, Weigh};

pub(crate) use apply::ApplyOutcome;
pub(crate) use codec::{encode_delta, encode_frame};
pub(crate) use frames::{Capture, CapturedFrame};
pub(crate) use node::no_weight;

/// Split a frame when its encoded size passes this: the whole frame minus its header and page
/// table. (Encoded sizes count the 32-byte fixed header and the records, not the page table,
/// which takes the same 512 bytes in every frame; so a frame at this size, page table
/// included, still fits `FRAME_SIZE`.)
pub(crate) const FRAME_BUDGET_BYTES: usize = FRAME_SIZE - FRAME_HEADER_LEN;

/// Frame ids are small integers handed out in order: one multiplication spreads them over
/// the table (the top seven bits pick its control bytes). SipHash, the default, took 4% of
/// a rolled-up listing of evicted frames, which looks up the frame of every link it meets.
#[derive(Default)]
pub(crate) struct FrameIdHash(u64);

impl std::hash::Hasher for FrameIdHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The registry of live frames by id.
pub(crate) type FrameMap = HashMap<FrameId, Arc<Cell>, std::hash::BuildHasherDefault<FrameIdHash>>;

pub(crate) struct Tree {
    root: Arc<Cell>,
    pool: BufferPool<Node>,
    /// Every live frame, resident or not.
    frames: Mutex<FrameMap>,
    next_frame_id: AtomicU64,
    /// A frame splits above this many encoded bytes (smaller than `FRAME_SIZE` only in tests).
    frame_budget_bytes: usize,
    keys: AtomicI64,
    /// The weight of a stored value (`Options::weigher`).
    weigh: Weigh,
    /// Held shared by a write adding its change to the subtree totals of its frame and the
    /// frames above it (`add_subtree_usage`), exclusively by a split or merge while it
    /// re-parents frames: the totals never go up a chain of parents being rewired.
    topology: RwLock<()>,
    /// The write gate. A change to the tree's shape or contents holds it shared while it
    /// publishes (a batch from its log record to its publication, a merge while it rewires
    /// frames); a checkpoint holds it exclusively while it captures the dirty frames, so the
    /// capture never sees half a change. Lock order: frame latches first, then the gate, and
    /// nothing is latched while the gate is held without the latch already held: the
    /// checkpointer, holding it exclusively, takes no latch, so it can never wait on a thread
    /// that waits for it.
    gate: RwLock<()>,
    shape: ShapeCounters,
}

/// Counts of the tree's shape changes since it was opened (for tests and diagnostics).
#[derive(Debug, Default)]
pub(crate) struct ShapeCounters {
    pub splits: AtomicU64,
    pub merges: AtomicU64,
    /// Merges that changed the parent frame root's first byte and so republished the
    /// grandparent frame without the lead its node above the parent's link counted on.
    pub merge_lead_withdrawals: AtomicU64,
    /// Frames a batch left empty and unlinked in its own publication.
    pub emptied_unlinked: AtomicU64,
}

/// A snapshot of `ShapeCounters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShapeStats {
    /// Splits: a frame over its budget moved a subtree out into a new child frame.
    pub splits: u64,
    /// Merges: a small child frame was folded back into its parent.
    pub merges: u64,
    /// Merges that changed the parent frame root's first byte, so that the grandparent frame
    /// was republished without the lead its node above the parent's link counted on.
    pub merge_lead_withdrawals: u64,
    /// Frames a batch left empty and unlinked in its own publication.
    pub emptied_unlinked: u64,
}

/// Where a key's walk inside one frame ends.
pub(super) enum Walk<'a> {
    /// In this frame: the leaf holding the key, if any (its allocation, for callers that keep
    /// it).
    Here(Option<&'a Shared<Leaf>>),
    /// The key's path continues in a child frame, whose root starts at this key depth.
    Link(&'a Arc<Cell>, usize),
}

/// Walks `key` from `node`, whose prefix starts at `key[depth..]`, without leaving the frame.
pub(super) fn walk_frame<'a>(mut node: &'a Node, key: &[u8], mut depth: usize) -> Walk<'a> {
    loop {
        match node {
            Node::Leaf(l) => return Walk::Here((l.suffix() == &key[depth..]).then_some(l)),
            Node::Link(cell) => return Walk::Link(cell, depth),
            Node::Inner(inner) => {
                let rest = &key[depth..];
                let prefix = inner.prefix();
                if !rest.starts_with(prefix) {
                    return Walk::Here(None);
                }
                depth += prefix.len();
                let Some(&b) = key.get(depth) else {
                    return Walk::Here(inner.terminal());
                };
                match inner.children().get(b) {
                    Some(child) => {
                        node = child;
                        depth += 1;
                    }
                    None => return Walk::Here(None),
                }
            }
        }
    }
}

/// A frame's root as a walk holds it: see `Tree::walk_root`.
pub(super) enum WalkRoot<'a> {
    Borrowed(crate::sync::root_cell::RootGuard<'a, Node>),
    Loaded(Node),
}

impl std::ops::Deref for WalkRoot<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        match self {
            WalkRoot::Borrowed(guard) => guard.get().expect("a borrowed root is a resident one"),
            WalkRoot::Loaded(root) => root,
        }
    }
}

enum Lookup {
    /// Found: the lookup's visitor has been called with the value.
    Found,
    Missing,
    Restart,
    /// A frame on the key's path is evicted and the lookup was asked not to read it.
    NotResident,
}

/// Where a write's owner search goes from an evicted frame (`Tree::link_from_image`).
enum ImageStep {
    /// On in this linked frame, entered at this key depth.
    Link(Arc<Cell>, usize),
    /// The frame was merged away: search again from the top.
    Retired,
    /// The key ends in this frame (with its state in the frame's image and deltas), or its
    /// image was not walked (`None`).
    Ends(Option<ImageState>),
}

/// A key's state in an evicted frame's image and deltas, as an owner search read it: its
/// version, weight and value length, or `None` if absent. Valid while the frame's dirty and
/// clean generations are still `stamp`: a write recorded in or published to the frame bumps
/// the first, a checkpoint that moves its logged writes to disk the second. The batch that
/// records the key's write in the frame's change log then need not walk the image again
/// (`Tree::plan_unloaded`).
#[derive(Clone, Copy)]
pub(super) struct ImageState {
    pub(super) stamp: (u64, u64),
    pub(super) state: Option<(u64, u64, usize)>,
}

/// What a lookup may read for a frame that is not in the cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Nothing: the frame is not resident.
    Memory,
    /// Its image's pages, if the page cache holds them and nothing else holds the frame.
    PageCache,
    /// Whatever it needs, from the disk if it must.
    Disk,
}

#[cfg(debug_assertions)]
thread_local! {
    /// Write gates this thread holds (`Tree::gate_read`).
    static GATE_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The write gate held shared by a writer (`Tree::gate_read`).
pub(super) struct GateRead<'t> {
    _guard: parking_lot::RwLockReadGuard<'t, ()>,
}

impl Drop for GateRead<'_> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        GATE_HELD.with(|held| held.set(held.get() - 1));
    }
}

/// The frame a key's path ends in (or continues in), and the key depth its root starts at.
pub(super) type Owner = (Arc<Cell>, usize);

impl Tree {
    /// An empty tree: frame 0 holds an empty root. With a `source` (where checkpoints write
    /// frames), clean frames are evicted beyond `memory_budget_bytes`; without one (a purely
    /// in-memory tree) nothing can be read back, so nothing is evicted.
    pub(crate) fn new(
        frame_budget_bytes: usize,
        memory_budget_bytes: usize,
        source: Option<Arc<dyn FrameSource>>,
    ) -> Tree {
        let root_node = Node::Inner(Inner::empty());
        let size = split::frame_size(&root_node);
        let root = Arc::new(FrameCell::resident(FrameId::ROOT, root_node, size, true));
        Tree::assemble(root, frame_budget_bytes, memory_budget_bytes, source, 0)
    }

    fn assemble(
        root: Arc<Cell>,
        frame_budget_bytes: usize,
        memory_budget_bytes: usize,
        source: Option<Arc<dyn FrameSource>>,
        keys: u64,
    ) -> Tree {
        assert!(frame_budget_bytes <= FRAME_BUDGET_BYTES, "a frame must fit its on-disk size");
        let pool = BufferPool::new(memory_budget_bytes, source, root.id);
        if root.root.load().is_some() {
            pool.admit(&root);
        }
        let mut frames = FrameMap::default();
        frames.insert(root.id, Arc::clone(&root));
        Tree {
            next_frame_id: AtomicU64::new(root.id.0 + 1),
            root,
            pool,
            frames: Mutex::new(frames),
            frame_budget_bytes,
            keys: AtomicI64::new(keys as i64),
            weigh: node::no_weight,
            topology: RwLock::new(()),
            gate: RwLock::new(()),
            shape: ShapeCounters::default(),
        }
    }

    /// The tree with `weigh` as the weight of a value (`Options::weigher`). Before any key is
    /// stored or any frame decoded: leaves keep the weight they were built with.
    pub(crate) fn with_weigh(self, weigh: Weigh) -> Tree {
        Tree { weigh, ..self }
    }

    /// The write gate (see the field): checkpoints take it exclusively to capture frames.
    pub(crate) fn write_gate(&self) -> &RwLock<()> {
        &self.gate
    }

    /// The write gate, shared, for a writer. Debug builds remember that this thread holds
    /// it, so that a frame load from disk under it (which would stall every checkpoint's
    /// capture behind a disk read) fails an assertion (`load_root`).
    pub(super) fn gate_read(&self) -> GateRead<'_> {
        #[cfg(debug_assertions)]
        GATE_HELD.with(|held| held.set(held.get() + 1));
        GateRead { _guard: self.gate.read() }
    }

    /// Number of keys stored.
    pub(crate) fn key_count(&self) -> u64 {
        self.keys.load(Ordering::Relaxed).max(0) as u64
    }

    /// The root of `cell` for a walk: borrowed through the cell's guard when resident (no
    /// reference count taken and dropped on a root every walk passes through), loaded when
    /// evicted.
    pub(super) fn walk_root<'a>(&self, cell: &'a Arc<Cell>) -> Result<WalkRoot<'a>> {
        cell.touch();
        let guard = cell.root.load();
        if guard.is_some() {
            return Ok(WalkRoot::Borrowed(guard));
        }
        // An empty cell's guard borrows nothing (see `RootCell::load`).
        drop(guard);
        self.load_root(cell).map(WalkRoot::Loaded)
    }

    /// Frees what a frame merged away or unlinked keeps (under its latch, once it is retired
    /// and out of the registry and the cache's count): its root and its change logs. The
    /// clock ring still names the cell until its hand passes, which it does only when the
    /// cache is over budget: a deleted directory's keys and values stayed in memory, unseen
    /// by the budget, until then. Readers that still reach the cell find no root, take the
    /// empty one (`load_root`) and restart on seeing it retired.
    pub(super) fn release_retired(&self, cell: &Cell) {
        debug_assert!(cell.is_retired());
        cell.root.store(None);
        let (detached, deltas) = cell.drop_changes();
        self.pool.released(detached, deltas);
    }

    /// The root of `cell`, loading the frame if it was evicted. A retired frame's root was
    /// released (`release_retired`) and its image is no longer the database's: it reads as
    /// empty, and the caller, which checks retirement after loading, restarts.
    pub(super) fn load_root(&self, cell: &Arc<Cell>) -> Result<Node> {
        cell.touch();
        match cell.root.load_full() {
            Some(root) => Ok(root),
            None if cell.is_retired() => Ok(Node::Inner(Inner::empty())),
            #[cfg(debug_assertions)]
            None if GATE_HELD.with(std::cell::Cell::get) > 0 => {
                panic!("frame {} would be read from disk under the write gate", cell.id)
            }
            None => self
                .pool
                .load(cell, |bytes, location, deltas| self.decode_frame(cell, bytes, location, deltas)),
        }
    }

    /// The value and version of `key`. Lock-free: restarts only if it meets a merged frame.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.get_with(key, |value, version| Entry { value: value.to_vec(), version })
    }

    /// `f` applied to the value and version of `key`, borrowed from the tree (nodes are
    /// immutable once published); `None` if the key is absent. `f` runs at most once, after
    /// the lookup is final.
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8], Version) -> R) -> Result<Option<R>> {
        let mut f = Some(f);
        let mut out = None;
        let mut found = |value: &[u8], version: Version| out = f.take().map(|f| f(value, version));
        loop {
            match self.get_in(&self.root, key, 0, Reach::Disk, &mut found)? {
                Lookup::Found => return Ok(out),
                Lookup::Missing => return Ok(None),
                Lookup::Restart => continue,
                Lookup::NotResident => unreachable!("a loading lookup reads evicted frames"),
            }
        }
    }

    /// Like `get`, but only from memory: frames in the cache, and evicted frames' pages that
    /// the page cache holds (`BufferPool::read_image_cached`). `None` when the read would wait
    /// for the disk, or for another thread loading a frame on the path; nothing is read then.
    pub(crate) fn get_resident(&self, key: &[u8]) -> Option<Option<Entry>> {
        let mut out = None;
        let mut found = |value: &[u8], version: Version| out = Some(Entry { value: value.to_vec(), version });
        loop {
            match self.get_in(&self.root, key, 0, Reach::PageCache, &mut found) {
                Ok(Lookup::Found) => return Some(out),
                Ok(Lookup::Missing) => return Some(None),
                Ok(Lookup::Restart) => continue,
                Ok(Lookup::NotResident) | Err(_) => return None,
            }
        }
    }

    /// Whether every frame on `key`'s path is in memory, so that reading `key` (or a write's
    /// descent to it) reads nothing from disk. Copies nothing.
    pub(crate) fn is_resident(&self, key: &[u8]) -> bool {
        loop {
            match self.get_in(&self.root, key, 0, Reach::Memory, &mut |_, _| {}) {
                Ok(Lookup::Found | Lookup::Missing) => return true,
                Ok(Lookup::Restart) => continue,
                Ok(Lookup::NotResident) | Err(_) => return false,
            }
        }
    }

    /// Looks `key` up from frame `cell` down; on `Lookup::Found`, `found` was called once
    /// with the value (never before the lookup is final: a restart calls nothing).
    fn get_in(
        &self,
        cell: &Arc<Cell>,
        key: &[u8],
        depth: usize,
        reach: Reach,
        found: &mut dyn FnMut(&[u8], Version),
    ) -> Result<Lookup> {
        cell.touch();
        let guard = cell.root.load();
        let owned: Node;
        let root: &Node = match guard.get() {
            Some(root) => root,
            None if reach == Reach::Memory => return Ok(Lookup::NotResident),
            None if cell.is_retired() => return Ok(Lookup::Restart),
            None => {
                drop(guard);
                if let Some(lookup) = self.get_from_image(cell, key, depth, reach, found)? {
                    return Ok(lookup);
                }
                if reach == Reach::PageCache {
                    return Ok(Lookup::NotResident);
                }
                owned = self.load_root(cell)?;
                &owned
            }
        };
        // Checked after loading the root: see the read protocol in `sync`.
        if cell.is_retired() {
            return Ok(Lookup::Restart);
        }
        match walk_frame(root, key, depth) {
            Walk::Here(Some(leaf)) => {
                found(leaf.value(), Version(leaf.version()));
                Ok(Lookup::Found)
            }
            Walk::Here(None) => Ok(Lookup::Missing),
            Walk::Link(child, depth) => self.get_in(child, key, depth, reach, found),
        }
    }

    /// Looks `key` up in the image of the evicted frame `cell` when the cache is full (see
    /// `BufferPool::read_image`); `None` when the frame should be loaded instead.
    fn get_from_image(
        &self,
        cell: &Arc<Cell>,
        key: &[u8],
        depth: usize,
        reach: Reach,
        found: &mut dyn FnMut(&[u8], Version),
    ) -> Result<Option<Lookup>> {
        enum Step {
            /// The value, copied out of the image: `found` is called only once the frame is
            /// known not to have been merged away meanwhile.
            Found(Vec<u8>, Version),
            Missing,
            Link(Arc<Cell>, usize),
        }
        let walk = |image: &mut dyn crate::buffer::ImageBody, deltas: &[crate::buffer::DeltaRef<'_>]| {
            // Writes made while the frame was evicted come first: they are newer than its disk state.
            if let Some(state) = cell.unloaded_state(key.get(depth..).unwrap_or_default()) {
                return Ok(match state {
                    Some(Node::Leaf(leaf)) => Step::Found(leaf.value().to_vec(), Version(leaf.version())),
                    None => Step::Missing,
                    Some(_) => {
                        return Err(image.corruption(0, "internal: a change log holds a non-leaf".into()))
                    }
                });
            }
            Ok(match codec::walk_image(image, deltas, key, depth)? {
                codec::ImageWalk::Found { value, version } => Step::Found(value, Version(version)),
                codec::ImageWalk::Missing => Step::Missing,
                // Resolved while this frame's load lock is held, as the decoder resolves its
                // links: a merge of the child into this frame must load this frame first, so
                // the child is still registered here (and retired, not gone, if merged later).
                codec::ImageWalk::Link { frame, depth } => {
                    // A named point inside the window, so a test can run a merge in it.
                    fail::fail_point!("image-walk-link");
                    Step::Link(self.image_link(cell, image, frame)?, depth)
                }
            })
        };
        let step = match reach {
            Reach::PageCache => self.pool.read_image_cached(cell, walk)?,
            Reach::Memory | Reach::Disk => self.pool.read_image(cell, walk)?,
        };
        // As after loading a root (the read protocol in `sync`): a frame merged away since
        // its parent was read may hold an older state than its parent now does.
        if step.is_some() && cell.is_retired() {
            return Ok(Some(Lookup::Restart));
        }
        match step {
            None => Ok(None),
            Some(Step::Found(value, version)) => {
                found(&value, version);
                Ok(Some(Lookup::Found))
            }
            Some(Step::Missing) => Ok(Some(Lookup::Missing)),
            Some(Step::Link(child, depth)) => self.get_in(&child, key, depth, reach, found).map(Some),
        }
    }

    /// The live frame the link to `frame` in the image of `cell` names; a link to no live
    /// frame is corruption of the image. Called under `cell`'s load lock: a merge of the
    /// child into `cell` must load `cell` first, so the child is still registered.
    /// The linked frame learns `cell` is its parent, as when a decoded frame resolves it:
    /// a write reaching a frame through images adds to its ancestors' subtree totals.
    pub(super) fn image_link(
        &self,
        cell: &Arc<Cell>,
        image: &dyn crate::buffer::ImageBody,
        frame: FrameId,
    ) -> Result<Arc<Cell>> {
        let child = self
            .linked_frame(&self.frames.lock(), cell, frame)
            .ok_or_else(|| image.corruption(0, format!("link to unknown frame {frame}")))?;
        child.set_parent(cell);
        Ok(child)
    }

    /// The deepest frame on `key`'s path and the key depth at which its root starts. While
    /// the cache is full, an evicted frame the path only passes through is walked in its
    /// image, not loaded (`link_from_image`): a batch's writes would otherwise load every
    /// evicted frame above their owners, and with the cache full of dirty frames each load
    /// evicts the one before, so every op of the batch loaded the path again. An evicted
    /// owner is loaded while the cache has room, else left evicted: the batch may record its
    /// writes in the frame's change log (`apply_latched`). An evicted frame returned may also
    /// be one the key only passes through, when its image could not be walked (the frame is
    /// due to be admitted): the batch then loads it and looks again.
    pub(super) fn find_owner(&self, key: &[u8]) -> Result<(Owner, Option<ImageState>)> {
        self.find_owner_in(key, None, false)
    }

    /// The first frame on `key`'s path from `from` (the root frame if `None`) that is evicted,
    /// or the owner if every frame down to it is resident: for a put that may be recorded
    /// without loading its frame (`write_unloaded`, which walks the evicted frame's image and
    /// goes on from the frame it links to, if any).
    pub(super) fn find_owner_unloaded(&self, key: &[u8], from: Option<Owner>) -> Result<Owner> {
        self.find_owner_in(key, from, true).map(|(owner, _)| owner)
    }

    fn find_owner_in(
        &self,
        key: &[u8],
        from: Option<Owner>,
        stop_at_evicted: bool,
    ) -> Result<(Owner, Option<ImageState>)> {
        let mut from = from;
        'restart: loop {
            let (mut cell, mut depth) = from.take().unwrap_or_else(|| (Arc::clone(&self.root), 0));
            loop {
                if cell.root.load().is_none() {
                    if stop_at_evicted {
                        return Ok(((cell, depth), None));
                    }
                    match self.link_from_image(&cell, key, depth)? {
                        ImageStep::Link(child, d) => {
                            cell = child;
                            depth = d;
                            continue;
                        }
                        ImageStep::Retired => continue 'restart,
                        // The key ends here (or the frame is due to be admitted): left
                        // evicted while the cache is full, else loaded.
                        ImageStep::Ends(state) if self.pool.is_full_for_writes() => {
                            return Ok(((cell, depth), state))
                        }
                        ImageStep::Ends(_) => {}
                    }
                }
                let next = {
                    let root = self.walk_root(&cell)?;
                    if cell.is_retired() {
                        continue 'restart;
                    }
                    match walk_frame(&root, key, depth) {
                        Walk::Here(_) => None,
                        Walk::Link(child, d) => Some((Arc::clone(child), d)),
                    }
                };
                match next {
                    None => return Ok(((cell, depth), None)),
                    Some((child, d)) => {
                        cell = child;
                        depth = d;
                    }
                }
            }
        }
    }

    /// Where `key`'s path goes from the evicted frame `cell` (entered at `depth`), read from
    /// its image while the cache is full: the linked frame it continues in, counted towards
    /// admitting `cell` as a write passing through (`count_passing_write`), or `Load` when
    /// the key ends in `cell` (with the key's state there) or the frame should be loaded
    /// anyway (`BufferPool::read_image_for_write`). Writes recorded while the frame was
    /// evicted hold only leaves, never links, so the image and deltas decide.
    fn link_from_image(&self, cell: &Arc<Cell>, key: &[u8], depth: usize) -> Result<ImageStep> {
        let step = self.pool.read_image_for_write(cell, |image, deltas| {
            // Read under the load lock, as the walk: nothing records a write meanwhile.
            let stamp = cell.generations();
            Ok(match codec::walk_image(image, deltas, key, depth)? {
                codec::ImageWalk::Link { frame, depth } => {
                    ImageStep::Link(self.image_link(cell, image, frame)?, depth)
                }
                codec::ImageWalk::Found { version, value } => ImageStep::Ends(Some(ImageState {
                    stamp,
                    state: Some((version, (self.weigh)(&value), value.len())),
                })),
                codec::ImageWalk::Missing => ImageStep::Ends(Some(ImageState { stamp, state: None })),
            })
        })?;
        // As after loading a root (the read protocol in `sync`).
        if step.is_some() && cell.is_retired() {
            return Ok(ImageStep::Retired);
        }
        if let Some(ImageStep::Link(..)) = step {
            self.pool.count_passing_write(cell);
        }
        Ok(step.unwrap_or(ImageStep::Ends(None)))
    }

    fn new_frame_id(&self) -> FrameId {
        FrameId(self.next_frame_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn frame_count(&self) -> usize {
        self.frames.lock().len()
    }

    pub(crate) fn pool_stats(&self) -> crate::buffer::PoolStats {
        self.pool.stats()
    }

    pub(crate) fn shape_stats(&self) -> ShapeStats {
        let c = &self.shape;
        ShapeStats {
            splits: c.splits.load(Ordering::Relaxed),
            merges: c.merges.load(Ordering::Relaxed),
            merge_lead_withdrawals: c.merge_lead_withdrawals.load(Ordering::Relaxed),
            emptied_unlinked: c.emptied_unlinked.load(Ordering::Relaxed),
        }
    }

    /// Whether the cached frames take more memory than the budget once the frames that may
    /// go are evicted: what holds it there (dirty frames that cannot be evicted yet, change
    /// logs) goes only when a checkpoint writes it. Writes recorded in change logs make no
    /// eviction pass of their own, so without this one a cache of clean frames and growing
    /// logs would call for a checkpoint every `PRESSURE_SPACING`, each giving every frame
    /// written to a delta.
    /// Whether a frame waits for a checkpoint to write it whole for its reads
    /// (`CapturedFrame::rewrite`).
    pub(crate) fn wants_rewrites(&self) -> bool {
        self.pool.wants_rewrites()
    }

    /// Bytes of deltas reads went through again since the last capture.
    pub(crate) fn reread_bytes(&self) -> u64 {
        self.pool.reread_bytes()
    }

    pub(crate) fn over_budget_after_eviction(&self) -> bool {
        self.pool.evict_if_needed();
        self.pool.over_budget()
    }
}

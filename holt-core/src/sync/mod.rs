//! Latches and the read protocol.
//!
//! Readers take no locks. Every node is immutable once published, so a reader holds only
//! reference-counted nodes (through `RootCell` guards) and never a `&[u8]` over bytes anyone
//! can change. The one race a reader must detect is following a link into a frame that was
//! merged into its parent after the reader loaded the parent: the merging writer retires the
//! child *before* it publishes the parent's new root, and a reader checks `retired` *after*
//! loading the child's root, so a reader that sees "not retired" has a root that was current
//! at that moment; one that sees "retired" restarts from the root frame.
//!
//! Writers latch frames. A write that touches several frames (a batch, a merge) latches them in
//! ascending `FrameId` order, so two writers can never wait on each other in a cycle.

pub(crate) mod root_cell;

use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::buffer::FrameCell;

/// Latches held on a set of frames, in ascending id order; released on drop.
pub(crate) struct Latched<'a, N> {
    pub(crate) cells: Vec<&'a Arc<FrameCell<N>>>,
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl<'a, N> Latched<'a, N> {
    /// Latches every distinct frame of `cells` in ascending id order.
    pub(crate) fn acquire(cells: &'a [Arc<FrameCell<N>>]) -> Self {
        let mut sorted: Vec<&Arc<FrameCell<N>>> = cells.iter().collect();
        sorted.sort_by_key(|c| c.id);
        sorted.dedup_by_key(|c| c.id);
        let guards = sorted.iter().map(|c| c.latch.lock()).collect();
        Latched { cells: sorted, _guards: guards }
    }
}

//! Frame splits and merges.
//!
//! Split (under the frame's latch): while the frame's encoded size exceeds the budget, pick
//! the subtree whose size is closest to half the frame, give it a new frame, and replace it
//! in place with a link. The moved nodes are shared, not copied.
//!
//! Merge (latches on parent and child, in id order): a frame below a quarter of the budget
//! whose parent has room goes back into its parent; the child is retired *before* the parent's
//! new root is published, so a reader holding the old parent restarts (see `sync`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::node::{first_own_byte, Cell, Footprint, Inner, Node};
use super::write::rebuild;
use super::Tree;
use crate::buffer::{FrameCell, FrameSize};
use crate::error::Result;
use crate::format::frame::HEADER_LEN;
use crate::sync::Latched;

/// Upper bound on splits after one write. One write adds at most one leaf (under 70 KiB) to a
/// frame, and every split moves a non-empty subtree out, so a few splits always suffice; the
/// bound only guards against a frame made of nodes that cannot move.
const SPLITS_PER_WRITE_MAX: usize = 4096;

/// The footprint of the subtree at `node` within its frame (links count as links; no header).
pub(super) fn subtree_footprint(node: &Node) -> Footprint {
    let mut total = Footprint::ZERO;
    let mut stack: Vec<&Node> = vec![node];
    while let Some(node) = stack.pop() {
        total += node.footprint();
        if let Node::Inner(inner) = node {
            stack.extend(inner.children().iter().map(|(_, c)| c));
        }
    }
    total
}

/// The size of the frame rooted at `root`, measured by walking it (the fixed header included,
/// the page table not: see `FRAME_BUDGET_BYTES`).
pub(super) fn frame_size(root: &Node) -> FrameSize {
    let header = Footprint { encoded: HEADER_LEN as isize, memory: 0 };
    (header + subtree_footprint(root)).to_size()
}

/// The byte path (from the frame root) and encoded size of the subtree closest to `target`
/// bytes, among the non-root, non-link nodes of the frame no larger than `max` bytes.
fn pick_subtree(root: &Node, target: usize, max: usize) -> Option<(Vec<u8>, usize)> {
    struct Level<'a> {
        children: Option<super::node::ChildIter<'a>>,
        size: usize,
    }
    let mut best: Option<(Vec<u8>, usize)> = None;
    let mut path: Vec<u8> = Vec::new();
    let mut stack: Vec<Level<'_>> = vec![Level {
        children: match root {
            Node::Inner(i) => Some(i.children().iter()),
            _ => None,
        },
        size: root.encoded_len(),
    }];
    // Post-order walk with an explicit stack (depth is bounded by the key length, but an
    // explicit stack keeps deep frames off the thread's stack).
    while let Some(top) = stack.last_mut() {
        match top.children.as_mut().and_then(Iterator::next) {
            Some((b, child)) => {
                if let Node::Link(_) = child {
                    top.size += child.encoded_len();
                    continue;
                }
                path.push(b);
                stack.push(Level {
                    children: match child {
                        Node::Inner(i) => Some(i.children().iter()),
                        _ => None,
                    },
                    size: child.encoded_len(),
                });
            }
            None => {
                let Some(done) = stack.pop() else { break };
                if let Some(parent) = stack.last_mut() {
                    parent.size += done.size;
                    let better = done.size <= max
                        && match &best {
                            None => true,
                            Some((_, s)) => done.size.abs_diff(target) < s.abs_diff(target),
                        };
                    if better {
                        best = Some((path.clone(), done.size));
                    }
                    path.pop();
                }
            }
        }
    }
    best
}

/// The inner nodes along `path` from `root` (root first), each with the byte taken.
/// Inner nodes from a frame root down a path, each with the child byte taken.
type Steps<'a> = Vec<(&'a Inner, u8)>;

fn steps_along<'a>(root: &'a Node, path: &[u8]) -> Option<(Steps<'a>, &'a Node)> {
    let mut steps = Vec::with_capacity(path.len());
    let mut node = root;
    let mut last = None;
    for &b in path {
        let Node::Inner(inner) = node else { return None };
        let child = inner.children().get(b)?;
        steps.push((inner, b));
        node = child;
        last = Some(child);
    }
    last.map(|l| (steps, l))
}

/// Visits every link of the subtree at `node` inside its frame.
fn for_each_link(node: &Node, mut f: impl FnMut(&Arc<Cell>)) {
    let mut stack: Vec<&Node> = vec![node];
    while let Some(n) = stack.pop() {
        match n {
            Node::Link(cell) => f(cell),
            Node::Inner(inner) => stack.extend(inner.children().iter().map(|(_, c)| c)),
            Node::Leaf(_) => {}
        }
    }
}

/// The byte path from `root` to the link pointing at `target`, within one frame.
fn path_to_link(root: &Node, target: &Arc<Cell>) -> Option<Vec<u8>> {
    // Each entry: a node, its depth in bytes, and the byte that leads to it.
    let mut stack: Vec<(&Node, usize, u8)> = vec![(root, 0, 0)];
    let mut path: Vec<u8> = Vec::new();
    while let Some((node, depth, byte)) = stack.pop() {
        path.truncate(depth.saturating_sub(1));
        if depth > 0 {
            path.push(byte);
        }
        match node {
            Node::Link(cell) if Arc::ptr_eq(cell, target) => return Some(path),
            Node::Inner(inner) => stack.extend(inner.children().iter().map(|(b, c)| (c, depth + 1, b))),
            _ => {}
        }
    }
    None
}

/// `parent_root` with the node that holds the link to `child` promising no lead, for a
/// write that is about to give `child`'s root another first byte (see `Inner::lead`).
/// `None` when that node promises none already. Sizes do not change: `lead` is not encoded.
pub(super) fn without_link_lead(parent_root: &Node, child: &Arc<Cell>) -> Option<Node> {
    let path = path_to_link(parent_root, child)?;
    let (steps, _) = steps_along(parent_root, &path)?;
    let (&(holder, _), above) = steps.split_last()?;
    holder.lead()?;
    let (root, delta) = rebuild(above, Some(Node::Inner(holder.without_lead())));
    debug_assert_eq!(delta, Footprint::ZERO, "clearing a lead changed a frame's size");
    root
}

/// `parent_root` with its link to `child` replaced by `bottom` (`None` removes it),
/// normalized up the path; an empty root when nothing is left. `None` when the link is not
/// in `parent_root`.
fn replace_link(parent_root: &Node, child: &Arc<Cell>, bottom: Option<Node>) -> Option<Node> {
    let path = path_to_link(parent_root, child)?;
    let (steps, _) = steps_along(parent_root, &path)?;
    let (root, _) = rebuild(&steps, bottom);
    Some(root.unwrap_or_else(|| Node::Inner(Inner::empty())))
}

/// `parent_root` without its link to `child` (a frame left empty); see `replace_link`.
pub(super) fn without_link(parent_root: &Node, child: &Arc<Cell>) -> Option<Node> {
    replace_link(parent_root, child, None)
}

impl Tree {
    /// Moves subtrees of `cell` into new frames until it fits the budget. Caller holds the
    /// latch of `cell`, whose root is resident (it was just written).
    pub(super) fn split_oversized(&self, cell: &Arc<Cell>) -> Result<()> {
        for _ in 0..SPLITS_PER_WRITE_MAX {
            let size = cell.size_bytes();
            if size <= self.frame_budget_bytes {
                return Ok(());
            }
            let root = self.load_root(cell)?;
            let Some((path, _)) =
                pick_subtree(&root, (size - HEADER_LEN) / 2, self.frame_budget_bytes - HEADER_LEN)
            else {
                return Ok(());
            };
            let Some((steps, subtree)) = steps_along(&root, &path) else { return Ok(()) };
            let moved = subtree_footprint(subtree);
            let id = self.new_frame_id();
            let child = Arc::new(FrameCell::resident(id, subtree.clone(), frame_size(subtree), true));
            {
                // The new frame's subtree totals: its own keys and its links' totals, read
                // with no write between them and the re-parenting (see `add_subtree_usage`).
                let _topology = self.topology.write();
                let own = subtree.agg();
                let (mut keys, mut weight) = (u64::from(own.keys), own.weight);
                child.set_parent(cell);
                for_each_link(subtree, |grandchild| {
                    grandchild.set_parent(&child);
                    let (k, w) = grandchild.subtree_usage();
                    keys += k;
                    weight = weight.wrapping_add(w);
                });
                child.set_subtree_usage((keys, weight));
            }
            let link = Node::Link(Arc::clone(&child));
            let link_len = link.footprint();
            let (new_root, path_delta) = rebuild(&steps, Some(link));
            let Some(new_root) = new_root else { return Ok(()) };
            let old_size = cell.size();
            let new_size = old_size.grown(path_delta + link_len - moved);
            // The child frame is complete and registered before the link to it is published.
            self.frames.lock().insert(id, Arc::clone(&child));
            self.pool.admit(&child);
            cell.set_size(new_size);
            cell.rewrite_whole();
            cell.publish(new_root);
            cell.mark_dirty();
            self.pool.resized(new_size.memory as i64 - old_size.memory as i64);
            self.shape.splits.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(frame = %cell.id, new_frame = %id, moved = moved.encoded, "frame split");
        }
        Ok(())
    }

    /// Merges `child` back into its parent frame when it is small and the parent has room, or
    /// whatever the parent's size when `child` is empty; then the parent into its own parent
    /// while the merges leave it small. Takes no latch of its own on entry.
    ///
    /// An empty frame must not stay linked: a listing rolls a subtree up without descending
    /// into it (the fast-forward), which holds only if every subtree holds a key. Batches
    /// unlink the frames they empty (`Tree::unlink_emptied`); an empty frame reaches a merge
    /// only from files written before that rule. Its merge only removes the link, so the
    /// parent can always take it.
    pub(super) fn try_merge(&self, child: &Arc<Cell>) -> Result<()> {
        let mut next = Some(Arc::clone(child));
        while let Some(cell) = next.take() {
            next = match self.merge_into_parent(&cell)? {
                Merge::Done(parent) => parent,
                // The frames around `cell` were rewired meanwhile: look at its parent again.
                Merge::Moved => Some(cell),
            };
            if next.is_some() {
                // Between two merges, nothing latched: a test lists here.
                fail::fail_point!("merge-cascade");
            }
        }
        Ok(())
    }

    /// One merge of `child` into its parent (latched with the grandparent, in id order).
    fn merge_into_parent(&self, child: &Arc<Cell>) -> Result<Merge> {
        let quarter = self.frame_budget_bytes / 4;
        if child.id == self.root.id || child.is_retired() || child.size_bytes() >= quarter {
            return Ok(Merge::Done(None));
        }
        let Some(parent) = child.parent() else { return Ok(Merge::Done(None)) };
        // Most small frames sit under a parent too large to take them, and are written again
        // and again: such a merge is refused from the sizes the cells keep through eviction,
        // not after loading three frames at every write. Only for a resident child that holds
        // a key (an empty one merges whatever its parent's size) and a parent whose size is
        // known (0 until it is first read since open); the loads below settle every other case.
        let parent_known = parent.size_bytes();
        if parent_known > 0
            && child.root.load_full().is_some_and(|root| !root.is_empty())
            && parent_known + child.size_bytes() > self.frame_budget_bytes / 4 * 3
        {
            return Ok(Merge::Done(None));
        }
        // Latched too: the parent's root may lose its first byte (a child frame left empty
        // was all it held), and the grandparent's node above its link must stop counting on
        // that byte first (see `Inner::lead`).
        let grandparent = parent.parent();
        let mut cells = vec![Arc::clone(&parent), Arc::clone(child)];
        cells.extend(grandparent.iter().cloned());
        let _latched = Latched::acquire(&cells);
        // Every frame this merge reads may be out of memory (no caller just wrote the
        // grandparent or the parent, and the child may have been evicted since its write):
        // all are loaded, and the merge decided, before the gate, which a checkpoint waits
        // for, so that a read from disk does not stall one. The latches keep what is read
        // here from changing until the merge is published.
        let above = grandparent.as_ref().map(|g| self.load_root(g)).transpose()?;
        let same = |a: Option<Arc<Cell>>, b: Option<&Arc<Cell>>| match (a, b) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        if child.is_retired() {
            return Ok(Merge::Done(None));
        }
        let still_linked = same(child.parent(), Some(&parent)) && same(parent.parent(), grandparent.as_ref());
        if parent.is_retired() || !still_linked {
            return Ok(Merge::Moved);
        }
        let child_root = self.load_root(child)?;
        let parent_root = self.load_root(&parent)?;
        // Read after the loads, which set an evicted frame's sizes exactly (the cache's count
        // below subtracts them).
        let (parent_size, child_size) = (parent.size(), child.size());
        // Hysteresis: the merged frame stays well below the split threshold.
        if !child_root.is_empty()
            && (child_size.encoded >= quarter
                || parent_size.encoded + child_size.encoded > self.frame_budget_bytes / 4 * 3)
        {
            return Ok(Merge::Done(None));
        }
        let bottom = if child_root.is_empty() { None } else { Some(child_root.clone()) };
        let Some(new_root) = replace_link(&parent_root, child, bottom) else { return Ok(Merge::Done(None)) };
        let new_size = frame_size(&new_root);
        // After the latches, never before (see `Tree::gate`): a merge rewires two frames, and
        // a checkpoint's capture must see both before or both after.
        let _gate = self.gate_read();
        if let (Some(grandparent), Some(above)) =
            (grandparent.filter(|_| parent.lead() != first_own_byte(&new_root)), above)
        {
            if let Some(root) = without_link_lead(&above, &parent) {
                grandparent.rewrite_whole();
                grandparent.publish(root);
                grandparent.mark_dirty();
                self.shape.merge_lead_withdrawals.fetch_add(1, Ordering::Relaxed);
            }
        }
        child.retire();
        {
            // The parent's totals already count the child's subtree.
            let _topology = self.topology.write();
            for_each_link(&child_root, |grandchild| grandchild.set_parent(&parent));
        }
        parent.set_size(new_size);
        parent.rewrite_whole();
        parent.publish(new_root);
        parent.mark_dirty();
        self.frames.lock().remove(&child.id);
        // The child's changes are in the parent's root now (loading it applied them).
        self.release_retired(child);
        self.pool.resized(new_size.memory as i64 - parent_size.memory as i64 - child_size.memory as i64);
        self.shape.merges.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(frame = %child.id, into = %parent.id, "frame merged");
        Ok(Merge::Done((new_size.encoded < quarter).then_some(parent)))
    }
}

/// How one merge attempt ended.
enum Merge {
    /// Merged or left alone; with the parent when it merged and is now small enough to try
    /// merging on.
    Done(Option<Arc<Cell>>),
    /// The child's parent or grandparent changed before the latches were taken.
    Moved,
}

//! Ordered scans and delimiter listings (S3 ListObjectsV2 semantics).
//!
//! A depth-first walk in key order carries the key bytes spelled so far. Subtrees are pruned
//! by the listing prefix and by `start_after` before they are entered. As soon as the spelled
//! bytes (from the end of the listing prefix on) contain the delimiter, every key below shares
//! the common prefix that ends with it: the walk emits that prefix and skips the whole subtree
//! without visiting any of its keys, so each emitted entry costs O(depth).
//!
//! A walk that reaches a merged frame restarts from the root, resuming at the path of the link
//! it met (inclusive) when that path lies past where the walk started. In key order everything
//! below that path comes after every entry emitted so far and nothing above it is left: the
//! path holds no delimiter past the listing prefix (the walk would have rolled it up before
//! reaching the link), so no common prefix emitted before it covers any key under it. A link
//! met on the way down to the start lies before it and leaves the start as it was.

use crate::api::{Entry, ListEntry, ListItem, ListPage, ListRequest, Version, KEY_LEN_MAX};
use crate::error::{Error, Location, Result};

use super::codec::{self, OwnedRecord};
use super::node::{touch, Cell, Inner, Leaf, Node, Shared};
use super::Tree;
use crate::format::delta::DeltaEntry;
use crate::format::node::InnerKind;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A listing page and how many nodes the walk visited (the cost measure tests assert on).
pub(crate) struct ListOutcome {
    pub page: ListPage,
    pub nodes_visited: u64,
    pub restarts: u64,
}

/// How a walk ended: whether more entries follow the last one visited, and its cost.
pub(crate) struct VisitOutcome {
    pub truncated: bool,
    pub nodes_visited: u64,
    /// Times the walk met a merged frame and restarted from the root.
    pub restarts: u64,
}

/// What the walk does after a node. Plain values, not `Result`s, so the recursion returns
/// in a register: an error is parked in `Walk::error` and the walk stops.
enum Flow {
    Continue,
    Stop,
    Restart,
}

/// Where the spelled path stands against the listing prefix and the start bound.
#[derive(Clone, Copy)]
struct Bounds {
    /// The path has all of the listing prefix (otherwise it is a prefix of it).
    in_prefix: bool,
    /// The path is a prefix of the start bound (otherwise it is already past it).
    on_start_after: bool,
}

struct Walk<'r> {
    prefix: &'r [u8],
    delimiter: &'r [u8],
    /// Entries are listed from here on: the request's `start_after` (exclusive) or, after a
    /// restart, the path of the link where the walk restarted (inclusive).
    start_after: Vec<u8>,
    start_inclusive: bool,
    with_values: bool,
    /// The page size.
    limit: usize,
    /// Entries handed to `visit` so far.
    emitted: usize,
    /// Set when an entry was found after the page was full (the walk then stops).
    truncated: bool,
    /// The path of the retired frame's link that made the walk restart.
    restart_at: Vec<u8>,
    visit: &'r mut dyn FnMut(ListEntry<'_>),
    visited: u64,
    /// The error that stopped the walk (reading an evicted frame back).
    error: Option<Error>,
    /// For a walk without a delimiter, the changes of each evicted frame it is inside that
    /// were read from its image in part (`Tree::pruned_from_image`), innermost last: merged
    /// into the keys as they are emitted instead of applied to the part read.
    pending: Vec<PendingChanges>,
    /// `emit_key` takes its slow path once `emitted` reaches this: the page's `limit`, or 0
    /// while changes are pending, so the walk of a resident frame checks one bound per key.
    key_gate: usize,
}

/// An evicted frame's changes since its image that a scan merges as it emits keys: each a
/// key relative to the frame (whose keys begin with `path`), its value and version or `None`
/// for a deletion, in key order; `at` is the next not yet merged.
struct PendingChanges {
    path: Vec<u8>,
    changes: Vec<ScanChange>,
    at: usize,
}

/// A change `PendingChanges` holds.
type ScanChange = (Vec<u8>, Option<(Vec<u8>, u64)>);

impl Walk<'_> {
    /// Bounds of `path` given its parent's, or `None` if no key below it can be listed.
    #[inline]
    fn bounds(&self, path: &[u8], parent: Bounds) -> Option<Bounds> {
        let mut b = parent;
        if b.in_prefix && !b.on_start_after {
            return Some(b);
        }
        if !b.in_prefix {
            let n = path.len().min(self.prefix.len());
            if path[..n] != self.prefix[..n] {
                return None;
            }
            b.in_prefix = path.len() >= self.prefix.len();
        }
        if b.on_start_after {
            let sa = &self.start_after[..];
            let n = path.len().min(sa.len());
            match path[..n].cmp(&sa[..n]) {
                std::cmp::Ordering::Less => return None,
                std::cmp::Ordering::Greater => b.on_start_after = false,
                std::cmp::Ordering::Equal => {
                    b.on_start_after =
                        path.len() < sa.len() || (path.len() == sa.len() && !self.start_inclusive)
                }
            }
        }
        Some(b)
    }

    /// Whether the key `key` (whole) could be listed, or rolled up into an entry, by the page:
    /// it lies under the prefix and past the start bound.
    fn reaches(&self, key: &[u8]) -> bool {
        let start = &self.start_after[..];
        begins_with(key, self.prefix)
            && (start.is_empty() || key > start || (self.start_inclusive && key == start))
    }

    /// End of the first delimiter occurrence starting at or after the prefix and ending after
    /// `checked` (earlier ends were searched by an ancestor).
    #[inline]
    fn delimiter_end(&self, path: &[u8], checked: usize) -> Option<usize> {
        let d = self.delimiter;
        if d.is_empty() || path.len() < self.prefix.len() + d.len() {
            return None;
        }
        let first = self.prefix.len().max((checked + 1).saturating_sub(d.len()));
        match d {
            [byte] => find_byte(&path[first..], *byte).map(|at| first + at + 1),
            _ => find_end(&path[first..], d).map(|end| first + end),
        }
    }

    /// Hands `entry` to the visitor, unless the page is full: then the entry only proves
    /// that the page is truncated, and the walk stops.
    #[inline]
    fn emit(&mut self, entry: ListEntry<'_>) -> Flow {
        if self.emitted >= self.limit {
            self.truncated = true;
            return Flow::Stop;
        }
        (self.visit)(entry);
        self.emitted += 1;
        Flow::Continue
    }

    /// Whether the common prefix `cp` lies past the start bound (a prefix equal to
    /// `start_after`, or before it, was on an earlier page).
    #[inline]
    fn past_start(&self, cp: &[u8]) -> bool {
        let start = &self.start_after[..];
        start.is_empty() || cp > start || (self.start_inclusive && cp == start)
    }

    #[inline]
    fn emit_common_prefix(&mut self, cp: &[u8]) -> Flow {
        if self.past_start(cp) {
            self.emit(ListEntry::CommonPrefix(cp))
        } else {
            Flow::Continue
        }
    }

    /// Whether a key spelled by `path`, or a subtree every key of which extends `path`, gives
    /// the page an entry of its own: its bounds `b` put it in the page's range, and if it
    /// rolls up, its common prefix lies past the start bound. A key past `start_after` can
    /// roll up into a prefix that is not (`a/b` after `a/`), which the walk skips.
    fn shows(&self, path: &[u8], checked: usize, b: Bounds) -> bool {
        b.in_prefix
            && !b.on_start_after
            && self.delimiter_end(path, checked).is_none_or(|end| self.past_start(&path[..end]))
    }

    #[inline]
    fn emit_key(&mut self, key: &[u8], leaf: &Leaf) -> Flow {
        if self.emitted >= self.key_gate {
            return self.emit_key_gated(key, leaf);
        }
        let value = if self.with_values { leaf.value() } else { &[] };
        (self.visit)(ListEntry::Key { key, value, version: Version(leaf.version()) });
        self.emitted += 1;
        Flow::Continue
    }

    /// `emit_key` past its gate: the page is full, or changes are pending.
    #[inline(never)]
    fn emit_key_gated(&mut self, key: &[u8], leaf: &Leaf) -> Flow {
        if !self.pending.is_empty() {
            match self.merge_pending(Some(key)) {
                Merge::Emit => {}
                Merge::Skip => return Flow::Continue,
                Merge::Stop => return Flow::Stop,
            }
        }
        let value = if self.with_values { leaf.value() } else { &[] };
        self.emit(ListEntry::Key { key, value, version: Version(leaf.version()) })
    }

    /// Enters an evicted frame whose changes a scan merges (`merge_pending`).
    fn push_pending(&mut self, pending: PendingChanges) {
        self.pending.push(pending);
        self.key_gate = 0;
    }

    /// Leaves the frame `push_pending` entered last (or all, after a restart).
    fn pop_pending(&mut self, all: bool) {
        match all {
            true => self.pending.clear(),
            false => drop(self.pending.pop()),
        }
        if self.pending.is_empty() {
            self.key_gate = self.limit;
        }
    }

    /// Emits the innermost pending changes' puts ordered before `key` (`None`: all that are
    /// left), and tells what becomes of `key` itself: a put of it was emitted in its place or
    /// it was deleted (`Skip`), or it stands (`Emit`). Keys of a linked frame lie between two
    /// of its parent's changes, so only the innermost frame's are compared.
    fn merge_pending(&mut self, key: Option<&[u8]>) -> Merge {
        let Some(mut pending) = self.pending.pop() else { return Merge::Emit };
        let base = pending.path.len();
        let mut merge = Merge::Emit;
        // Bound: every step moves `at` on.
        while let Some((rel, state)) = pending.changes.get(pending.at) {
            let order = match key {
                Some(key) => rel[..].cmp(key.get(base..).unwrap_or_default()),
                None => std::cmp::Ordering::Less,
            };
            if order == std::cmp::Ordering::Greater {
                break;
            }
            pending.at += 1;
            if let Some((value, version)) = state {
                pending.path.extend_from_slice(rel);
                let value = if self.with_values { &value[..] } else { &[] };
                let flow =
                    self.emit(ListEntry::Key { key: &pending.path, value, version: Version(*version) });
                pending.path.truncate(base);
                if let Flow::Stop = flow {
                    merge = Merge::Stop;
                    break;
                }
            }
            if order == std::cmp::Ordering::Equal {
                merge = Merge::Skip;
                break;
            }
        }
        self.pending.push(pending);
        merge
    }

    /// Entries the page can still take, plus the one that decides `truncated`.
    fn remaining(&self) -> usize {
        self.limit.saturating_add(1).saturating_sub(self.emitted)
    }
}

/// What `Walk::merge_pending` leaves of the key the walk was about to emit.
enum Merge {
    Emit,
    Skip,
    Stop,
}

impl Tree {
    /// A page of `request`, with the walk's cost.
    pub(crate) fn list(&self, request: &ListRequest<'_>) -> Result<ListOutcome> {
        let mut items = Vec::with_capacity(request.limit.min(1024));
        let outcome = self.list_with(request, &mut |entry| {
            items.push(match entry {
                ListEntry::Key { key, value, version } => {
                    ListItem::Key { key: key.to_vec(), entry: Entry { value: value.to_vec(), version } }
                }
                ListEntry::CommonPrefix(p) => ListItem::CommonPrefix(p.to_vec()),
            })
        })?;
        Ok(ListOutcome {
            page: ListPage { items, truncated: outcome.truncated },
            nodes_visited: outcome.nodes_visited,
            restarts: outcome.restarts,
        })
    }

    /// Walks a page of `request`, handing each entry to `visit` in key order as it is met,
    /// borrowed from the tree (nodes are immutable once published, so nothing changes under
    /// the borrow). At most `request.limit` entries are visited.
    pub(crate) fn list_with(
        &self,
        request: &ListRequest<'_>,
        visit: &mut dyn FnMut(ListEntry<'_>),
    ) -> Result<VisitOutcome> {
        if request.limit == 0 {
            return Ok(VisitOutcome { truncated: false, nodes_visited: 0, restarts: 0 });
        }
        let mut walk = Walk {
            prefix: request.prefix,
            delimiter: request.delimiter,
            start_after: request.start_after.to_vec(),
            start_inclusive: false,
            with_values: request.with_values,
            limit: request.limit,
            emitted: 0,
            truncated: false,
            restart_at: Vec::new(),
            visit,
            visited: 0,
            error: None,
            pending: Vec::new(),
            key_gate: request.limit,
        };
        // Bound: a restart happens only when the walk meets a frame merged after it started.
        let mut restarts = 0;
        loop {
            let bounds = Bounds { in_prefix: walk.prefix.is_empty(), on_start_after: true };
            let mut path = Vec::with_capacity(256);
            match self.list_frame(&mut walk, &self.root, &mut path, 0, bounds) {
                Flow::Continue | Flow::Stop => break,
                Flow::Restart => {
                    restarts += 1;
                    walk.pop_pending(true);
                    // Resume at the link only if it lies past the start: a link met on the way
                    // back down to the start (an ancestor of it) lies before it, and resuming
                    // there would list again what lies between the two.
                    let at = std::mem::take(&mut walk.restart_at);
                    if at > walk.start_after {
                        walk.start_after = at;
                        walk.start_inclusive = true;
                    }
                }
            }
        }
        match walk.error {
            Some(e) => Err(e),
            None => Ok(VisitOutcome { truncated: walk.truncated, nodes_visited: walk.visited, restarts }),
        }
    }

    fn list_frame(
        &self,
        walk: &mut Walk<'_>,
        cell: &Arc<Cell>,
        path: &mut Vec<u8>,
        checked: usize,
        bounds: Bounds,
    ) -> Flow {
        if path.len() > KEY_LEN_MAX {
            walk.error = Some(Error::Corruption {
                location: Location { file: "<frames>".into(), frame: Some(cell.id.0), offset: 0 },
                reason: "links form a path longer than any key".into(),
            });
            return Flow::Stop;
        }
        // A resident frame is walked in place, without asking the image path below (for
        // evicted frames) how full the cache is: a rolled-up listing passes a link per prefix.
        let guard = cell.root.load();
        if let Some(root) = guard.get() {
            cell.touch();
            return self.list_root(walk, cell, root, path, checked, bounds);
        }
        drop(guard);
        // An evicted frame, while the cache is full: read only what the walk can reach.
        match self.pruned_from_image(walk, cell, path, checked, bounds) {
            Ok(None) => {}
            Ok(Some(Pruned { part, changes })) => {
                if cell.is_retired() {
                    walk.restart_at.clone_from(path);
                    return Flow::Restart;
                }
                if changes.is_empty() {
                    return self.list_node(walk, &part, path, checked, bounds);
                }
                walk.push_pending(PendingChanges { path: path.clone(), changes, at: 0 });
                let mut flow = self.list_node(walk, &part, path, checked, bounds);
                // The frame's puts after its last key in the part read.
                if matches!(flow, Flow::Continue) && matches!(walk.merge_pending(None), Merge::Stop) {
                    flow = Flow::Stop;
                }
                walk.pop_pending(false);
                return flow;
            }
            Err(e) => {
                walk.error = Some(e);
                return Flow::Stop;
            }
        }
        match self.walk_root(cell) {
            Ok(root) => self.list_root(walk, cell, &root, path, checked, bounds),
            Err(e) => {
                walk.error = Some(e);
                Flow::Stop
            }
        }
    }

    /// Lists the frame `cell` from its root `root`, unless the frame was retired meanwhile
    /// (then the walk restarts at `path`).
    fn list_root(
        &self,
        walk: &mut Walk<'_>,
        cell: &Arc<Cell>,
        root: &Node,
        path: &mut Vec<u8>,
        checked: usize,
        bounds: Bounds,
    ) -> Flow {
        // A test merges a linked frame away here (after the walk loaded its root) to force a restart.
        fail::fail_point!("list-frame-loaded", !path.is_empty(), |_| Flow::Stop);
        if cell.is_retired() {
            walk.restart_at.clone_from(path);
            return Flow::Restart;
        }
        self.list_node(walk, root, path, checked, bounds)
    }

    /// Lists the subtree at `node`, whose prefix starts after `path`. `checked`: the delimiter
    /// was searched for in every window of `path` ending at or before it.
    fn list_node(
        &self,
        walk: &mut Walk<'_>,
        node: &Node,
        path: &mut Vec<u8>,
        checked: usize,
        bounds: Bounds,
    ) -> Flow {
        walk.visited += 1;
        let base = path.len();
        let flow = match node {
            Node::Link(cell) => {
                // The puts of the frame around this link that come before the linked frame's
                // keys (its keys begin with `path`; none of the frame's own does).
                if !walk.pending.is_empty() {
                    if let Merge::Stop = walk.merge_pending(Some(path)) {
                        return Flow::Stop;
                    }
                }
                return self.list_frame(walk, cell, path, checked, bounds);
            }
            Node::Leaf(leaf) => {
                path.extend_from_slice(leaf.suffix());
                match walk.bounds(path, bounds) {
                    // A key equal to or below `start_after` (a prefix of it) is not listed.
                    Some(b) if b.in_prefix && !b.on_start_after => match walk.delimiter_end(path, checked) {
                        Some(end) => walk.emit_common_prefix(&path[..end]),
                        None => walk.emit_key(path, leaf),
                    },
                    _ => Flow::Continue,
                }
            }
            Node::Inner(inner) => {
                path.extend_from_slice(inner.prefix());
                match walk.bounds(path, bounds) {
                    None => Flow::Continue,
                    Some(b) => match walk.delimiter_end(path, checked) {
                        Some(end) => walk.emit_common_prefix(&path[..end]),
                        None => self.list_inner(walk, inner, path, b),
                    },
                }
            }
        };
        path.truncate(base);
        flow
    }

    fn list_inner(
        &self,
        walk: &mut Walk<'_>,
        inner: &super::node::Inner,
        path: &mut Vec<u8>,
        bounds: Bounds,
    ) -> Flow {
        let len = path.len();
        if let Some(t) = inner.terminal() {
            if bounds.in_prefix && !bounds.on_start_after {
                if let Flow::Stop = walk.emit_key(path, t) {
                    return Flow::Stop;
                }
            }
        }
        // Only one child can match while the path is still inside the listing prefix.
        if !bounds.in_prefix {
            let Some(&b) = walk.prefix.get(len) else { return Flow::Continue };
            let Some(child) = inner.children().get(b) else { return Flow::Continue };
            path.push(b);
            let flow = self.list_node(walk, child, path, len, bounds);
            path.truncate(len);
            return flow;
        }
        let from = if bounds.on_start_after { walk.start_after.get(len).copied().unwrap_or(0) } else { 0 };
        // Past the start bound, with a one-byte delimiter, a child that rolls up or is a key
        // is emitted here without a call per child: the shape of a rollup page (every child
        // a common prefix) and of a directory's files (every child a leaf).
        let single = match walk.delimiter {
            [d] if !bounds.on_start_after => Some(*d),
            _ => None,
        };
        if let Some(d) = single.filter(|&d| inner.lead() == Some(d)) {
            // Every child's own bytes begin with the delimiter: each child rolls up right
            // after its key byte (or at it, if the key byte is the delimiter), and the page
            // is made from this node's keys without reading a child. The name's last two
            // bytes are rewritten in place for each child.
            path.extend_from_slice(&[d, d]);
            let mut flow = Flow::Continue;
            for (b, _) in inner.children().iter_from(from) {
                path[len] = b;
                let end = if b == d { len + 1 } else { len + 2 };
                flow = walk.emit_common_prefix(&path[..end]);
                if !matches!(flow, Flow::Continue) {
                    break;
                }
            }
            path.truncate(len);
            return flow;
        }
        touch_ahead(inner, from, walk.remaining());
        for (b, child) in inner.children().iter_from(from) {
            path.push(b);
            // How many of the child's own bytes the common prefix takes, if it rolls up. Searched
            // in the node, not through `delimiter_end` over `path`: for leaves that took the
            // key-heavy walk from 13.7–14.1 to 14.9–15.1 µs (2026-11-24).
            let rollup =
                |d: u8, own: &[u8]| if b == d { Some(0) } else { find_byte(own, d).map(|at| at + 1) };
            let flow = match (single, child) {
                (Some(d), Node::Leaf(leaf)) => {
                    walk.visited += 1;
                    let own = leaf.suffix();
                    path.extend_from_slice(own);
                    match rollup(d, own) {
                        Some(end) => walk.emit_common_prefix(&path[..len + 1 + end]),
                        None => walk.emit_key(path, leaf),
                    }
                }
                (Some(d), Node::Inner(node)) => match rollup(d, node.prefix()) {
                    Some(end) => {
                        walk.visited += 1;
                        path.extend_from_slice(&node.prefix()[..end]);
                        walk.emit_common_prefix(path)
                    }
                    None => self.list_node(walk, child, path, len, bounds),
                },
                // A linked frame whose root's own bytes begin with the delimiter (or under the
                // delimiter as key byte) rolls up from the lead in its cell, without loading
                // the root. A merged frame takes the common path, which restarts the walk.
                (Some(d), Node::Link(cell)) => match self.link_lead(cell) {
                    Some(l) if (b == d || l == d) && !cell.is_retired() => {
                        walk.visited += 1;
                        if b != d {
                            path.push(l);
                        }
                        walk.emit_common_prefix(path)
                    }
                    _ => self.list_node(walk, child, path, len, bounds),
                },
                _ => self.list_node(walk, child, path, len, bounds),
            };
            path.truncate(len);
            match flow {
                Flow::Continue => {}
                other => return other,
            }
        }
        Flow::Continue
    }
}

impl Tree {
    /// What a walk at `path` (with `checked` and `bounds` as `list_node` takes them) can reach
    /// of the evicted frame `cell`, read through its pages top-down from the root record
    /// while the cache is full, without decoding the rest: children outside the listing
    /// prefix or wholly before the start bound are left out; a node whose bytes reach the
    /// delimiter is kept as a stub (a leaf spelling its own bytes), which the walk rolls up
    /// without looking inside; and once the parts kept hold more entries than the page can
    /// take, later children are left out. The frame's deltas and recorded writes are applied
    /// on top, deleted keys left uncounted while parts are kept. `None` when the frame should
    /// be read another way: the cache has room (it is loaded) or the frame is read often
    /// enough to be admitted. A stub under which keys were deleted since the image is kept
    /// only if the image holds another key under it (`Pruning::survives`).
    fn pruned_from_image(
        &self,
        walk: &Walk<'_>,
        cell: &Arc<Cell>,
        path: &[u8],
        checked: usize,
        bounds: Bounds,
    ) -> Result<Option<Pruned>> {
        let kept = self.pool.read_image(cell, |image, deltas| {
            let Changes { puts, deleted, rolled_deleted } = changed_keys(walk, path, cell, deltas)?;
            let mut spelled = path.to_vec();
            let mut promised = 0;
            let root = image.root_offset();
            let frame_at = path.len();
            let mut pruning = Pruning {
                tree: self,
                walk,
                cell,
                image,
                promised: &mut promised,
                deleted: &deleted,
                rolled_deleted: &rolled_deleted,
                frame_at,
            };
            let kept = pruning.record(root, &mut spelled, checked, bounds, true)?;
            // The deltas scanned count towards admitting the frame as the pages they fill,
            // and towards writing it whole.
            let delta_bytes: usize = deltas.iter().map(|delta| delta.len()).sum();
            self.pool.count_image_work(cell, delta_bytes / crate::format::frame::PAGE_BYTES);
            self.pool.count_listing_through_chain(cell, deltas);
            let kept = kept.unwrap_or_else(|| Node::Inner(Inner::empty()));
            if walk.delimiter.is_empty() {
                // A scan merges them as it emits the keys (`Walk::merge_pending`), in key
                // order (a key is a put or deleted, not both): applied to the part read,
                // they were a sixth of a 100-key scan's time.
                let mut changes: Vec<ScanChange> = puts
                    .into_iter()
                    .map(|(key, value, version)| (key.into_owned(), Some((value.into_owned(), version))))
                    .chain(deleted.into_iter().map(|key| (key, None)))
                    .collect();
                changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                return Ok(Some(Pruned { part: kept, changes }));
            }
            // One batch, in key order (a key is a put or deleted, not both).
            let mut batch: Vec<super::write::Entry<'_>> = puts
                .iter()
                .map(|(key, value, version)| (&key[..], Some((&value[..], *version, (self.weigh)(value)))))
                .chain(deleted.iter().map(|key| (&key[..], None)))
                .collect();
            batch.sort_unstable_by(|a, b| a.0.cmp(b.0));
            Ok(Some(Pruned { part: super::write::apply_sorted(&kept, &batch)?, changes: Vec::new() }))
        })?;
        Ok(kept.flatten())
    }

    /// The lead of the linked frame `cell`; for an evicted frame not loaded since open, told
    /// from its image (`lead_from_image`) rather than by loading it. `None` when it has none
    /// or it cannot be told so: the walk then enters the frame, and reports any error there.
    fn link_lead(&self, cell: &Arc<Cell>) -> Option<u8> {
        match cell.known_lead() {
            Some(lead) => lead,
            None => self.lead_from_image(cell).ok().flatten().flatten(),
        }
    }
}

/// What a walk reads of an evicted frame in part (`Tree::pruned_from_image`): the part of its
/// image the walk can reach, with the frame's changes since the image applied, or for a
/// walk without a delimiter, left to merge as it emits keys (`changes`).
struct Pruned {
    part: Node,
    changes: Vec<ScanChange>,
}

/// A put a frame took since its image: key (relative to the frame), value and version;
/// borrowed from the frame's deltas, or copied from its change logs.
type Put<'d> = (Cow<'d, [u8]>, Cow<'d, [u8]>, u64);

/// What `changed_keys` finds, each key relative to the frame.
struct Changes<'d> {
    /// The puts the page can see.
    puts: Vec<Put<'d>>,
    /// Keys deleted that the page would list as themselves.
    deleted: BTreeSet<Vec<u8>>,
    /// Keys deleted that the page would roll up into a common prefix under which no put is
    /// left: the prefix stays only if the image holds another key under it.
    rolled_deleted: BTreeSet<Vec<u8>>,
}

/// A change to a key (relative to the frame) since the image.
type KeyChange<'d> = (Cow<'d, [u8]>, PutState<'d>);

/// A put's value and version, or `None` for a deletion.
type PutState<'d> = Option<(Cow<'d, [u8]>, u64)>;

/// The changes the evicted frame `cell` (reached by `path`) took since its image that the
/// walk can see, each key's last (its deltas', then its logs', in order): puts, keeping only
/// keys the page could list and, of the keys under one common prefix, one still there (one
/// is enough to make the walk emit it: a stub or a key already there rolls up the same way);
/// and the keys deleted. A frame written many times holds thousands of changes, most of them
/// beside the page: the chain's merged index (`ChainView`, each key's newest delta entry)
/// and the logs are each sorted by key, so one merge of the two, from where the prefix begins
/// (found by binary search), finds every key's last change in key order, with the keys under
/// one common prefix side by side, skipped once one of them is a put; and it stops once the
/// puts found fill the page. Delta entries are read only as the merge reaches them.
fn changed_keys<'d>(
    walk: &Walk<'_>,
    path: &[u8],
    cell: &Cell,
    deltas: &[crate::buffer::DeltaRef<'d>],
) -> Result<Changes<'d>> {
    // Keys the page can reach begin with what the prefix asks of the frame.
    let under = walk.prefix.get(path.len()..).unwrap_or_default();
    // Two sources, each in key order with a key at most once and only keys under the
    // prefix: the deltas' (each key's newest entry over the chain), then the logs' (newer).
    let chain = crate::buffer::ChainView::new(deltas)?;
    // Nor keys before the start bound (a key before it rolls up only into a prefix before
    // it): a page deep into a directory does not read the chain's entries before it.
    let start = match walk.start_after.is_empty() {
        true => &[][..],
        false => walk.start_after.strip_prefix(path).unwrap_or_default(),
    };
    // Empty bounds told apart: see `begins_with`.
    let lowest = match (under.is_empty(), start.is_empty()) {
        (_, true) => under,
        (true, false) => start,
        (false, false) => under.max(start),
    };
    let mut at_chain = if lowest.is_empty() { 0 } else { chain.seek(0, lowest)? };
    let mut logged: std::collections::BTreeMap<Vec<u8>, PutState<'d>> = Default::default();
    cell.each_change(|key, state| {
        if begins_with(key, under) && (start.is_empty() || (!key.is_empty() && key >= start)) {
            let put = match state {
                Some(Node::Leaf(leaf)) => Some((Cow::Owned(leaf.value().to_vec()), leaf.version())),
                _ => None,
            };
            logged.insert(key.to_vec(), put);
        }
        Ok(())
    })?;
    let mut logged: Vec<KeyChange<'d>> =
        logged.into_iter().map(|(key, put)| (Cow::Owned(key), put)).collect();
    let mut at_log = 0;
    // The chain's entry `i`, read once, if the prefix's keys reach it.
    let chain_change = |i: usize| -> Result<Option<KeyChange<'d>>> {
        if i >= chain.len() {
            return Ok(None);
        }
        let change = match chain.entry(i)? {
            DeltaEntry::Put { key, value, version } => {
                (Cow::Borrowed(key), Some((Cow::Borrowed(value), version)))
            }
            DeltaEntry::Delete { key } => (Cow::Borrowed(key), None),
        };
        Ok(begins_with(&change.0, under).then_some(change))
    };
    let mut chain_head = chain_change(at_chain)?;

    let mut changes = Changes { puts: Vec::new(), deleted: BTreeSet::new(), rolled_deleted: BTreeSet::new() };
    // The common prefix being read (its length in the key that opened it), the first put
    // under it still there, and the keys under it deleted.
    let mut name: Option<(Cow<'d, [u8]>, usize)> = None;
    let mut name_put: Option<Put<'d>> = None;
    let mut name_deleted: Vec<Vec<u8>> = Vec::new();
    let flush = |changes: &mut Changes<'d>, put: &mut Option<Put<'d>>, deleted: &mut Vec<Vec<u8>>| {
        match put.take() {
            Some(put) => changes.puts.push(put),
            None => changes.rolled_deleted.extend(deleted.iter().cloned()),
        }
        deleted.clear();
    };
    let mut full = path.to_vec();
    // Entries the puts found so far give the page: once they fill it, later changes are past
    // its end.
    let mut shown = 0;
    // Bound: every step moves at least one source on.
    while shown < walk.remaining() {
        // The smallest key either source is at; at the same key, the log's (newer) wins.
        let chain_key = chain_head.as_ref().map(|(key, _)| &key[..]);
        let log_key = logged.get(at_log).map(|(key, _)| &key[..]);
        let (from_log, same) = match (chain_key, log_key) {
            (None, None) => break,
            (Some(c), Some(l)) => (l <= c, l == c),
            (None, Some(_)) => (true, false),
            (Some(_), None) => (false, false),
        };
        let taken = match from_log {
            true => {
                if same {
                    at_chain += 1;
                    chain_head = chain_change(at_chain)?;
                }
                at_log += 1;
                // Taken, not copied: the merge never looks back.
                Some(std::mem::replace(&mut logged[at_log - 1], (Cow::Borrowed(&[]), None)))
            }
            false => {
                at_chain += 1;
                std::mem::replace(&mut chain_head, chain_change(at_chain)?)
            }
        };
        // Bound: `from_log` is false only while the chain has a head.
        let Some((key, put)) = taken else { break };
        full.truncate(path.len());
        full.extend_from_slice(&key);
        if !walk.reaches(&full) {
            continue;
        }
        // A delimiter in `path` past the prefix would have rolled the frame up before the
        // walk entered it, so a common prefix ends inside `key`.
        let rolls_up = walk.delimiter_end(&full, 0).map(|end| end.saturating_sub(path.len()).min(key.len()));
        match rolls_up {
            None => match put {
                Some((value, version)) => {
                    changes.puts.push((key, value, version));
                    shown += 1;
                }
                None => {
                    changes.deleted.insert(key.into_owned());
                }
            },
            Some(n) => {
                if name.as_ref().is_none_or(|(open, len)| open[..*len] != key[..n]) {
                    flush(&mut changes, &mut name_put, &mut name_deleted);
                    name = Some((key.clone(), n));
                }
                match put {
                    Some((value, version)) => {
                        // The prefix shows: the other keys under it are beside the point.
                        let past = chain.past_prefix(at_chain, &key[..n])?;
                        if past != at_chain {
                            at_chain = past;
                            chain_head = chain_change(at_chain)?;
                        }
                        at_log += logged[at_log..].partition_point(|(k, _)| k.starts_with(&key[..n]));
                        name_put = Some((key, value, version));
                        // A key past the start bound rolls up into a prefix that may not be.
                        shown += usize::from(walk.reaches(&full[..path.len() + n]));
                    }
                    None => name_deleted.push(key.into_owned()),
                }
            }
        }
    }
    flush(&mut changes, &mut name_put, &mut name_deleted);
    Ok(changes)
}

/// A subtree a scan lists from its start is decoded whole when its records take at most
/// this many bytes, however few keys the page still needs (`Pruning::window_bound`).
const DECODE_WHOLE_MIN_BYTES: usize = 1024;

/// The top-down read of an evicted frame's image that `Tree::pruned_from_image` makes.
struct Pruning<'p, 'w> {
    tree: &'p Tree,
    walk: &'p Walk<'w>,
    cell: &'p Arc<Cell>,
    image: &'p mut dyn crate::buffer::ImageBody,
    /// Entries the parts kept so far will give the walk, at least.
    promised: &'p mut usize,
    /// Keys deleted since the image (relative to the frame), which the parts kept may still
    /// hold: they promise nothing.
    deleted: &'p BTreeSet<Vec<u8>>,
    /// Keys deleted since the image that the page would roll up into a common prefix no put
    /// keeps (`Changes::rolled_deleted`).
    rolled_deleted: &'p BTreeSet<Vec<u8>>,
    /// Where the frame's keys start in the path the walk spells.
    frame_at: usize,
}

impl Pruning<'_, '_> {
    /// Whether the key `path` spells was deleted since the image.
    fn is_deleted(&self, path: &[u8]) -> bool {
        !self.deleted.is_empty() && path.get(self.frame_at..).is_some_and(|key| self.deleted.contains(key))
    }

    /// How many keys deleted since the image begin with what `path` spells.
    fn deleted_under(&self, path: &[u8]) -> usize {
        let Some(under) = path.get(self.frame_at..).filter(|_| !self.deleted.is_empty()) else { return 0 };
        self.deleted.range(under.to_vec()..).take_while(|key| key.starts_with(under)).count()
    }

    /// Whether a key the page would roll up, deleted since the image, begins with what `path`
    /// spells (`whole`: is what it spells).
    fn rolled_deleted_at(&self, path: &[u8], whole: bool) -> bool {
        let Some(under) = path.get(self.frame_at..).filter(|_| !self.rolled_deleted.is_empty()) else {
            return false;
        };
        match whole {
            true => self.rolled_deleted.contains(under),
            false => {
                self.rolled_deleted.range(under.to_vec()..).next().is_some_and(|key| key.starts_with(under))
            }
        }
    }

    /// Whether the subtree whose top record is at body offset `pos`, reached by `path`, holds
    /// a key not deleted since the image (of those the page would roll up). Reads down only
    /// where deleted keys are: a part of the image under which none was deleted holds a key
    /// (an image holds no empty node), and so does a linked frame (an emptied frame is
    /// unlinked).
    fn survives(&mut self, pos: usize, path: &mut Vec<u8>) -> Result<bool> {
        if !self.rolled_deleted_at(path, false) {
            return Ok(true);
        }
        if path.len() > KEY_LEN_MAX {
            let at = crate::format::frame::FRAME_HEADER_LEN + pos;
            return Err(self.image.corruption(at, "inner nodes spell a path longer than any key".into()));
        }
        let base = path.len();
        let survives = match codec::read_record(&mut *self.image, pos, self.tree.weigh)? {
            OwnedRecord::Link(_) => true,
            OwnedRecord::Leaf(leaf) => {
                path.extend_from_slice(leaf.suffix());
                !self.rolled_deleted_at(path, true)
            }
            OwnedRecord::Inner { prefix, has_terminal, keys, distances, .. } => {
                path.extend_from_slice(&prefix);
                let mut found = has_terminal && !self.rolled_deleted_at(path, true);
                let len = path.len();
                for (&key, &back) in keys.iter().zip(&distances[distances.len().saturating_sub(keys.len())..])
                {
                    if found {
                        break;
                    }
                    path.push(key);
                    found = self.survives(pos - back, path)?;
                    path.truncate(len);
                }
                found
            }
        };
        path.truncate(base);
        Ok(survives)
    }

    /// What the walk can reach of the subtree whose top record is at body offset `pos`,
    /// reached by `path`; `None` if nothing.
    fn record(
        &mut self,
        pos: usize,
        path: &mut Vec<u8>,
        checked: usize,
        bounds: Bounds,
        is_root: bool,
    ) -> Result<Option<Node>> {
        let corrupt = |image: &dyn crate::buffer::ImageBody, reason: &str| {
            image.corruption(crate::format::frame::FRAME_HEADER_LEN + pos, reason.to_owned())
        };
        if path.len() > KEY_LEN_MAX {
            return Err(corrupt(&*self.image, "inner nodes spell a path longer than any key"));
        }
        let base = path.len();
        let kept = match codec::read_record(&mut *self.image, pos, self.tree.weigh)? {
            OwnedRecord::Link(_) if is_root => {
                return Err(corrupt(&*self.image, "the frame's root is a link"))
            }
            OwnedRecord::Link(frame) => match self.walk.bounds(path, bounds) {
                None => None,
                Some(b) => {
                    // A linked frame holds at least one key (an emptied frame is unlinked).
                    *self.promised += usize::from(self.walk.shows(path, checked, b));
                    Some(Node::Link(self.tree.image_link(self.cell, &*self.image, frame)?))
                }
            },
            OwnedRecord::Leaf(leaf) => {
                path.extend_from_slice(leaf.suffix());
                let shows = self.walk.bounds(path, bounds).map(|b| self.walk.shows(path, checked, b));
                let deleted = self.is_deleted(path);
                let gone = self.rolled_deleted_at(path, true);
                path.truncate(base);
                shows.filter(|_| !gone).map(|shows| {
                    *self.promised += usize::from(shows && !deleted);
                    Node::Leaf(Shared::new(leaf))
                })
            }
            OwnedRecord::Inner { kind, prefix, has_terminal, keys, distances } => {
                if distances.len() != keys.len() + usize::from(has_terminal) {
                    return Err(corrupt(&*self.image, "missing back distance"));
                }
                path.extend_from_slice(&prefix);
                let rolls_up = self.walk.delimiter_end(path, checked).is_some();
                // A stub stands for a key under it: one must be left.
                let emptied = rolls_up && self.rolled_deleted_at(path, false) && {
                    let mut at = path[..base].to_vec();
                    !self.survives(pos, &mut at)?
                };
                let kept = match self.walk.bounds(path, bounds) {
                    None => None,
                    Some(_) if emptied => None,
                    Some(b) if rolls_up => {
                        *self.promised += usize::from(self.walk.shows(path, checked, b));
                        // A leaf, not an inner node without children: the puts applied on top
                        // split it like any leaf, where they would take an empty inner node's
                        // place and lose the common prefix it stands for.
                        Some(Node::Leaf(Shared::new(Leaf::new(&prefix, &[], 0, 0))))
                    }
                    Some(b) => self.inner(pos, path, b, kind, &prefix, &keys, &distances)?,
                };
                path.truncate(base);
                kept
            }
        };
        Ok(kept)
    }

    /// The most body bytes a subtree the page lists from its start is decoded whole in: twice
    /// what the records of the keys the page still needs take on average (a subtree holds
    /// about as many inner records as leaves), and at least `DECODE_WHOLE_MIN_BYTES`. Decoding
    /// every key of each subtree the walk entered, 100-key scans of 10M keys decoded about 570.
    fn window_bound(&self) -> usize {
        let need = self.walk.remaining().saturating_sub(*self.promised);
        let per_record = self.image.body_len() / self.image.record_count().max(1);
        // `need` is unbounded for a listing without a limit.
        need.saturating_mul(per_record).saturating_mul(2).max(DECODE_WHOLE_MIN_BYTES)
    }

    /// The subtree whose top record is at body offset `top` (its records `window`), reached
    /// by `path`, decoded whole; its keys count as promised.
    fn decode_whole(&mut self, top: usize, window: (usize, usize), path: &[u8]) -> Result<Node> {
        let (tree, cell) = (self.tree, self.cell);
        let resolve = |id| tree.linked_frame(&tree.frames.lock(), cell, id);
        let (node, keys) = codec::decode_subtree(&mut *self.image, top, window, tree.weigh, resolve)?;
        // Deleted keys under it may be among its keys (or not: then this promises too few,
        // which only keeps more).
        *self.promised += match self.deleted_under(path) {
            0 => keys.max(1),
            deleted => keys.saturating_sub(deleted),
        };
        Ok(node)
    }

    /// `record` for an inner node that does not roll up: its terminal and the children the
    /// walk can reach (`path` spells the node's own bytes; `b` are their bounds).
    #[allow(clippy::too_many_arguments)]
    fn inner(
        &mut self,
        pos: usize,
        path: &mut Vec<u8>,
        b: Bounds,
        kind: InnerKind,
        prefix: &[u8],
        keys: &[u8],
        distances: &[usize],
    ) -> Result<Option<Node>> {
        let terminal = match distances.first().filter(|_| distances.len() > keys.len()) {
            None => None,
            Some(&back) => match codec::read_record(&mut *self.image, pos - back, self.tree.weigh)? {
                OwnedRecord::Leaf(t) if t.suffix().is_empty() => {
                    *self.promised += usize::from(b.in_prefix && !b.on_start_after && !self.is_deleted(path));
                    Some(Shared::new(t))
                }
                _ => {
                    return Err(self.image.corruption(
                        crate::format::frame::FRAME_HEADER_LEN + pos,
                        "terminal is not a leaf with an empty suffix".into(),
                    ))
                }
            },
        };
        let child_distances = &distances[distances.len() - keys.len()..];
        let len = path.len();
        let from = if b.on_start_after { self.walk.start_after.get(len).copied().unwrap_or(0) } else { 0 };
        let mut kept_keys = Vec::with_capacity(keys.len());
        let mut kept_nodes = Vec::with_capacity(keys.len());
        for (&key, &back) in keys.iter().zip(child_distances) {
            // Later children are never reached: the page fills before them.
            if *self.promised >= self.walk.remaining() {
                break;
            }
            if key < from || (!b.in_prefix && self.walk.prefix.get(len) != Some(&key)) {
                continue;
            }
            path.push(key);
            let child = match self.walk.bounds(path, b) {
                // Without a delimiter, a child whose keys are all listed is decoded whole from
                // its contiguous records, faster than reading them one by one, unless it holds
                // many more records than the page still needs: then it is read a level down.
                Some(cb) if self.walk.delimiter.is_empty() && cb.in_prefix && !cb.on_start_after => {
                    let window = codec::subtree_window(&mut *self.image, pos - back)?;
                    match window.1 - window.0 <= self.window_bound() {
                        true => self.decode_whole(pos - back, window, path).map(Some),
                        false => self.record(pos - back, path, len, b, false),
                    }
                }
                _ => self.record(pos - back, path, len, b, false),
            };
            path.truncate(len);
            if let Some(child) = child? {
                kept_keys.push(key);
                kept_nodes.push(child);
            }
        }
        if terminal.is_none() && kept_nodes.is_empty() {
            return Ok(None);
        }
        Ok(Some(Node::Inner(Inner::from_parts(prefix, terminal, kind, &kept_keys, kept_nodes.into_iter()))))
    }
}

/// Whether `key` begins with `prefix`, an empty prefix told apart first. The merge of a
/// frame's changes tests each key it reads against the start bound and the part of the
/// listing prefix left (often empty): comparing with an empty slice calls `memcmp` with a
/// length of 0 and, for an empty vector or literal, a dangling pointer, whose masked load the
/// CPU completes by a microcode assist. That was a fifth of a 100-key scan's time beyond the
/// budget (10M keys: 48 against 40 µs).
#[inline]
fn begins_with(key: &[u8], prefix: &[u8]) -> bool {
    prefix.is_empty() || key.starts_with(prefix)
}

/// End of the first occurrence of the non-empty `needle` in `hay`. The windows searched are
/// a few bytes long (the bytes a node adds to the path), so this is a plain loop rather than a
/// call to `memcmp` per window: that call was the largest single cost of a listing page.
#[inline]
fn find_end(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    let mut from = 0;
    while from <= last_start {
        let s = from + hay[from..=last_start].iter().position(|&b| b == first)?;
        if hay[s + 1..s + needle.len()].iter().zip(rest).all(|(a, b)| a == b) {
            return Some(s + needle.len());
        }
        from = s + 1;
    }
    None
}

/// Position of the first `byte` in `hay`, eight bytes per step (SWAR): the windows a
/// listing searches are a few to a few dozen bytes, too short for a vectorized search to pay
/// for its set-up.
#[inline]
fn find_byte(hay: &[u8], byte: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * u64::from(byte);
    let mut chunks = hay.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes")) ^ pattern;
        // The lowest byte of `word` that is zero sets the lowest flagged bit (a borrow can
        // only flag bytes above a zero byte).
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return Some(at + (zeros.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| b == byte).map(|p| at + p)
}

/// How many children `touch_ahead` reads before the walk enters the first of them.
const TOUCH_AHEAD_MAX: usize = 16;

/// Reads the first bytes of the next children the walk will enter, so their cache misses
/// overlap instead of being paid one after the other: nodes inserted in random order are
/// scattered over the heap, and a listing that emits one entry per child (a rollup page, the
/// leaves of a directory) was bound by one dependent miss per entry. Safe code only: plain
/// loads whose result is kept alive with `black_box`, not prefetch instructions. Reads at
/// most `remaining` (entries the page still needs) and `TOUCH_AHEAD_MAX` children.
fn touch_ahead(inner: &super::node::Inner, from: u8, remaining: usize) {
    touch(inner.children().iter_from(from).take(remaining.min(TOUCH_AHEAD_MAX)).map(|(_, c)| c));
}

#[cfg(test)]
mod tests {
    use super::{find_byte, find_end};

    #[test]
    fn find_byte_agrees_with_position() {
        // Every length across two words and a tail, the byte at every position, repeated
        // bytes, and bytes that differ from the target only in the high bit (0x2F vs 0xAF).
        for len in 0..24 {
            for at in 0..=len {
                let mut hay: Vec<u8> =
                    (0..len).map(|i| if i % 3 == 0 { 0xAF } else { b'a' + i as u8 }).collect();
                if at < len {
                    hay[at] = b'/';
                    if at + 2 < len {
                        hay[at + 2] = b'/';
                    }
                }
                let want = hay.iter().position(|&b| b == b'/');
                assert_eq!(find_byte(&hay, b'/'), want, "{hay:?}");
                assert_eq!(find_byte(&hay, 0), hay.iter().position(|&b| b == 0));
            }
        }
        assert_eq!(find_byte(&[0x80, 0x01, 0x00, 0xFF], 0x00), Some(2));
        assert_eq!(find_byte(&[0xFF; 9], 0xFF), Some(0));
        assert_eq!(find_byte(&[0xFE; 17], 0xFF), None);
    }

    /// The obvious definition `find_end` must agree with.
    fn naive(hay: &[u8], needle: &[u8]) -> Option<usize> {
        (0..=hay.len().checked_sub(needle.len())?)
            .find(|&s| &hay[s..s + needle.len()] == needle)
            .map(|s| s + needle.len())
    }

    #[test]
    fn find_end_agrees_with_the_definition() {
        let alphabet = [b'/', b'a', 0u8];
        // Every hay of up to 6 bytes and needle of 1..=3 bytes over a 3-letter alphabet.
        let words = |max: usize| {
            let mut all = vec![Vec::new()];
            let mut level = vec![Vec::new()];
            for _ in 0..max {
                level = level
                    .iter()
                    .flat_map(|w: &Vec<u8>| alphabet.iter().map(move |&c| [&w[..], &[c]].concat()))
                    .collect();
                all.extend(level.iter().cloned());
            }
            all
        };
        let needles: Vec<Vec<u8>> = words(3).into_iter().filter(|w| !w.is_empty()).collect();
        for hay in words(6) {
            for needle in &needles {
                assert_eq!(find_end(&hay, needle), naive(&hay, needle), "{hay:?} {needle:?}");
            }
        }
        assert_eq!(find_end(b"abc", b""), None);
    }
}

//! Put and delete inside one frame, by path copying: the nodes from the frame's root to the
//! change are copied, everything else is shared with the previous root.
//!
//! Every function returns the new frame root and the exact change in the frame's footprint
//! (encoded bytes and memory: the footprints of the nodes it created minus those of the nodes
//! it replaced), so the frame's size stays exact without re-encoding or re-measuring it.

use smallvec::SmallVec;

use super::node::{keep_spare_leaf, shared_leaf, Footprint, Inner, Leaf, Node, Shared};
use crate::error::{Error, Location, Result};

/// The result of one write inside a frame.
pub(super) struct Change {
    pub root: Node,
    pub size_delta: Footprint,
    /// Whether the key held a value before the write.
    pub existed: bool,
    /// The weight of the value the write replaced or removed (0 if none).
    pub old_weight: u64,
    /// The leaf a put stored (`None` for a delete): what the frame's change log records,
    /// found in the few nodes the put created rather than by walking the new root again.
    pub stored: Option<Shared<Leaf>>,
}

impl Change {
    /// A write that found nothing to do: the root stays as it was.
    fn unchanged(root: &Node) -> Change {
        Change {
            root: root.clone(),
            size_delta: Footprint::ZERO,
            existed: false,
            old_weight: 0,
            stored: None,
        }
    }
}

fn footprint_of(node: &Option<Node>) -> Footprint {
    node.as_ref().map_or(Footprint::ZERO, |n| n.footprint())
}

fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A link met where the caller's owner walk found none: the caller did not hold the latch
/// it validated under. Reported instead of writing into the wrong frame.
fn stray_link() -> Error {
    Error::Corruption {
        location: Location { file: "<memory>".into(), frame: None, offset: 0 },
        reason: "internal: a write met a link inside the frame it latched".into(),
    }
}

/// Restores the node invariants after a child of `inner` changed or vanished: an inner node
/// with nothing left disappears, one with only a terminal becomes a leaf, and one with a
/// single non-link child and no terminal is folded into that child.
/// Returns the node and the footprint of the child it absorbed (zero if none).
pub(super) fn normalize(inner: Inner) -> (Option<Node>, Footprint) {
    let folded = match (inner.children().len(), inner.terminal()) {
        (0, None) => return (None, Footprint::ZERO),
        (0, Some(t)) => {
            return (Some(Node::Leaf(Shared::new(t.with_suffix(inner.prefix())))), Footprint::ZERO)
        }
        (1, None) => inner.children().iter().next().and_then(|(b, child)| {
            let mut extra = Vec::with_capacity(inner.prefix().len() + 1);
            extra.extend_from_slice(inner.prefix());
            extra.push(b);
            child.prepend(&extra).map(|folded| (folded, child.footprint()))
        }),
        _ => None,
    };
    match folded {
        Some((node, absorbed)) => (Some(node), absorbed),
        None => (Some(Node::Inner(inner)), Footprint::ZERO),
    }
}

/// Copies the path `steps` (inner node and the child byte taken, root first) with the node at
/// its end replaced by `bottom` (`None` removes it), normalizing every copied node.
/// Returns the new root (`None` when the frame became empty) and the footprint change of the
/// copied nodes (the caller accounts for `bottom` itself).
pub(super) fn rebuild(steps: &[(&Inner, u8)], bottom: Option<Node>) -> (Option<Node>, Footprint) {
    let mut current = bottom;
    let mut delta = Footprint::ZERO;
    for &(inner, b) in steps.iter().rev() {
        let (node, d) = copy_step(inner, b, current);
        delta += d;
        current = node;
    }
    (current, delta)
}

/// One step of `rebuild`: `inner` with child `b` set to `child` (`None` removes it),
/// normalized, and the footprint change of the copy.
fn copy_step(inner: &Inner, b: u8, child: Option<Node>) -> (Option<Node>, Footprint) {
    let copy = match child {
        Some(node) => inner.with_child(b, node),
        None => inner.without_child(b),
    };
    let (node, absorbed) = normalize(copy);
    let delta = footprint_of(&node) - inner.footprint() - absorbed;
    (node, delta)
}

/// The inner nodes a write passes through in its frame, with the child byte taken at each:
/// inline up to a depth that path-shaped keys stay within, so a write allocates no list.
type Steps<'a> = SmallVec<[(&'a Inner, u8); 16]>;

/// Where a put or delete of a key lands in a frame: the inner nodes passed through (and the
/// child byte taken at each), and the node at which the key's path stops. Found by one walk
/// (`descend`), which is all a write needs before it is logged: whether the key's path stays
/// in the frame, and the key's current version. The write itself (`put`, `delete`) builds
/// on the path without walking again.
pub(super) struct Path<'a> {
    root: &'a Node,
    steps: Steps<'a>,
    node: &'a Node,
    depth: usize,
}

/// Walks `key` from `root` (which starts at `key[depth..]`) down to where a write of it
/// changes the frame: a leaf, an inner node whose prefix the key leaves or ends at, or one
/// without the key's child. `None` if the path continues into another frame (a link).
pub(super) fn descend<'a>(root: &'a Node, key: &[u8], depth: usize) -> Option<Path<'a>> {
    let mut steps = Steps::new();
    let mut node: &Node = root;
    let mut depth = depth;
    loop {
        match node {
            Node::Link(_) => return None,
            Node::Leaf(_) => break,
            Node::Inner(inner) => {
                let p = inner.prefix();
                let rest = &key[depth..];
                if rest.len() <= p.len() || !rest.starts_with(p) {
                    break;
                }
                let b = rest[p.len()];
                match inner.children().get(b) {
                    Some(child) => {
                        steps.push((inner, b));
                        node = child;
                        depth += p.len() + 1;
                    }
                    None => break,
                }
            }
        }
    }
    Some(Path { root, steps, node, depth })
}

impl Path<'_> {
    /// The leaf holding the key's value now, if the key is present.
    pub(super) fn current(&self, key: &[u8]) -> Option<&Leaf> {
        let rest = &key[self.depth..];
        match self.node {
            Node::Leaf(leaf) => (leaf.suffix() == rest).then_some(&**leaf),
            Node::Inner(inner) if inner.prefix() == rest => inner.terminal().map(|t| &**t),
            _ => None,
        }
    }

    /// Stores `value` under `key` (the key `descend` walked).
    pub(super) fn put(self, key: &[u8], value: &[u8], version: u64, weight: u64) -> Change {
        let old_weight = self.current(key).map_or(0, Leaf::weight);
        let (replacement, mut delta, existed) = self.put_bottom(key, value, version, weight);
        let stored = self.stored_in(&replacement, key);
        let (new_root, path_delta) = rebuild(&self.steps, Some(replacement));
        delta += path_delta;
        let root = new_root.unwrap_or_else(|| Node::Inner(Inner::empty()));
        Change { root, size_delta: delta, existed, old_weight, stored }
    }

    /// The leaf holding `key` in `replacement`, the node `put_bottom` built in place of the
    /// one the path stops at (one or two levels deep).
    fn stored_in(&self, replacement: &Node, key: &[u8]) -> Option<Shared<Leaf>> {
        match super::walk_frame(replacement, key, self.depth) {
            super::Walk::Here(leaf) => leaf.cloned(),
            super::Walk::Link(..) => None,
        }
    }

    /// `put`, with the path copy's siblings lent by the old path instead of counted
    /// (`Inner::with_child_lent`). The loan is paid when the result is published
    /// (`LentRoot::publish`) or dropped; the result holds a count on the frame root the path
    /// was walked from, so the caller drops its own before publishing (a second count on
    /// the old root makes the loan be paid by settling, which takes every count a counted
    /// copy would have).
    pub(super) fn put_lent(self, key: &[u8], value: &[u8], version: u64, weight: u64) -> LentRoot {
        let old_weight = self.current(key).map_or(0, Leaf::weight);
        let (replacement, delta, existed) = self.put_bottom(key, value, version, weight);
        let stored = self.stored_in(&replacement, key);
        let (new_root, path_delta, lent) = rebuild_lent(&self.steps, Some(replacement));
        let root = new_root.unwrap_or_else(|| Node::Inner(Inner::empty()));
        LentRoot::new(
            self.root,
            &self.steps[..lent],
            Change { root, size_delta: delta + path_delta, existed, old_weight, stored },
        )
    }

    /// `delete`, lending counts like `put_lent` on the part of the path above the nodes the
    /// delete reshapes (those are copied with counts, as `delete` copies them).
    pub(super) fn delete_lent(self, key: &[u8]) -> LentRoot {
        let old_weight = self.current(key).map_or(0, Leaf::weight);
        let Some((replacement, delta)) = self.delete_bottom(key) else {
            return LentRoot::new(self.root, &[], Change::unchanged(self.root));
        };
        let (new_root, path_delta, lent) = rebuild_lent(&self.steps, replacement);
        let change = finish_delete(new_root, delta + path_delta, old_weight);
        LentRoot::new(self.root, &self.steps[..lent], change)
    }

    /// The node that replaces the one the path stops at when `key` is put, the footprint
    /// change at that level, and whether the key existed.
    fn put_bottom(&self, key: &[u8], value: &[u8], version: u64, weight: u64) -> (Node, Footprint, bool) {
        let rest = &key[self.depth..];
        let new_leaf = |suffix: &[u8]| Leaf::new(suffix, value, version, weight);
        let (replacement, delta, existed): (Node, Footprint, bool) = match self.node {
            Node::Leaf(old) => {
                let old_len = old.footprint();
                if old.suffix() == rest {
                    let leaf = new_leaf(rest);
                    let d = leaf.footprint() - old_len;
                    (Node::Leaf(shared_leaf(leaf)), d, true)
                } else {
                    // Two keys diverge (or one ends) inside the old leaf's suffix: a new inner node.
                    let s = old.suffix();
                    let c = common_prefix_len(s, rest);
                    let mut created = Footprint::ZERO;
                    let mut terminal = None;
                    let mut entries: Vec<(u8, Node)> = Vec::with_capacity(2);
                    if c == rest.len() {
                        let t = new_leaf(&[]);
                        created += t.footprint();
                        terminal = Some(Shared::new(t));
                    } else {
                        let l = new_leaf(&rest[c + 1..]);
                        created += l.footprint();
                        entries.push((rest[c], Node::Leaf(Shared::new(l))));
                    }
                    if c == s.len() {
                        let t = old.with_suffix(&[]);
                        created += t.footprint();
                        terminal = Some(Shared::new(t));
                    } else {
                        let l = old.with_suffix(&s[c + 1..]);
                        created += l.footprint();
                        entries.push((s[c], Node::Leaf(Shared::new(l))));
                    }
                    entries.sort_by_key(|e| e.0);
                    // The terminal is part of the inner node's footprint: counted once, there.
                    let inner = Inner::with_entries(&rest[..c], terminal.clone(), None, entries);
                    let t_len = terminal.as_ref().map_or(Footprint::ZERO, |t| t.footprint());
                    let d = inner.footprint() - t_len + created - old_len;
                    (Node::Inner(inner), d, false)
                }
            }
            Node::Inner(inner) if inner.is_empty() => {
                let leaf = new_leaf(rest);
                let d = leaf.footprint() - inner.footprint();
                (Node::Leaf(Shared::new(leaf)), d, false)
            }
            Node::Inner(inner) => {
                let p = inner.prefix();
                let c = common_prefix_len(p, rest);
                if c < p.len() {
                    // The key leaves the compressed prefix: split it.
                    let lower = inner.with_prefix(&p[c + 1..]);
                    let mut d = lower.footprint() - inner.footprint();
                    let mut entries: Vec<(u8, Node)> = vec![(p[c], Node::Inner(lower))];
                    let mut terminal = None;
                    if c == rest.len() {
                        terminal = Some(Shared::new(new_leaf(&[])));
                    } else {
                        let l = new_leaf(&rest[c + 1..]);
                        d += l.footprint();
                        entries.push((rest[c], Node::Leaf(Shared::new(l))));
                        entries.sort_by_key(|e| e.0);
                    }
                    let upper = Inner::with_entries(&p[..c], terminal, None, entries);
                    d += upper.footprint();
                    (Node::Inner(upper), d, false)
                } else if rest.len() == p.len() {
                    let copy = inner.with_terminal(Some(Shared::new(new_leaf(&[]))));
                    let d = copy.footprint() - inner.footprint();
                    (Node::Inner(copy), d, inner.terminal().is_some())
                } else {
                    // `descend` stopped here: the key's child is missing.
                    let b = rest[c];
                    let leaf = new_leaf(&rest[c + 1..]);
                    let leaf_len = leaf.footprint();
                    let copy = inner.with_child(b, Node::Leaf(Shared::new(leaf)));
                    let d = copy.footprint() - inner.footprint() + leaf_len;
                    (Node::Inner(copy), d, false)
                }
            }
            Node::Link(_) => unreachable!("descend never stops at a link"),
        };
        (replacement, delta, existed)
    }

    /// Removes `key` (the key `descend` walked); a missing key leaves the root as it was.
    pub(super) fn delete(self, key: &[u8]) -> Change {
        let old_weight = self.current(key).map_or(0, Leaf::weight);
        let Some((replacement, delta)) = self.delete_bottom(key) else {
            return Change::unchanged(self.root);
        };
        let (new_root, path_delta) = rebuild(&self.steps, replacement);
        finish_delete(new_root, delta + path_delta, old_weight)
    }

    /// What replaces the node the path stops at when `key` is deleted (`None`: removed) and
    /// the footprint change at that level; `None` if the key is absent.
    fn delete_bottom(&self, key: &[u8]) -> Option<(Option<Node>, Footprint)> {
        let rest = &key[self.depth..];
        match self.node {
            Node::Leaf(leaf) => (leaf.suffix() == rest).then(|| (None, -leaf.footprint())),
            Node::Inner(inner) => {
                if inner.prefix() != rest || inner.terminal().is_none() {
                    // The key leaves the prefix, or its child is missing, or no terminal.
                    return None;
                }
                let (n, absorbed) = normalize(inner.with_terminal(None));
                let d = footprint_of(&n) - inner.footprint() - absorbed;
                Some((n, d))
            }
            Node::Link(_) => unreachable!("descend never stops at a link"),
        }
    }
}

/// A deleted key's change, given the rebuilt root (`None`: the frame is empty now) and the
/// footprint change so far.
fn finish_delete(new_root: Option<Node>, mut delta: Footprint, old_weight: u64) -> Change {
    let root = match new_root {
        Some(r) => r,
        None => {
            let empty = Node::Inner(Inner::empty());
            delta += empty.footprint();
            empty
        }
    };
    Change { root, size_delta: delta, existed: true, old_weight, stored: None }
}

/// `rebuild`, lending counts on the upper part of the path: from the bottom up, nodes are
/// copied with counts (and normalized) until the node built is a replacement of an existing
/// child in a node `normalize` leaves alone; that node and every one above it are copied
/// with `Inner::with_child_lent`. Returns the new root, the footprint change of the copies,
/// and how many steps (from the root) lend.
fn rebuild_lent(steps: &[(&Inner, u8)], bottom: Option<Node>) -> (Option<Node>, Footprint, usize) {
    // Copying a node with `b` replaced keeps its children: `normalize` changes it only if
    // it has one child and no terminal, which the invariants allow for links alone.
    let lendable = |inner: &Inner, b: u8| {
        (inner.children().len() >= 2 || inner.terminal().is_some()) && inner.children().get(b).is_some()
    };
    let mut current = bottom;
    let mut delta = Footprint::ZERO;
    let mut lent = steps.len();
    while lent > 0 {
        let (inner, b) = steps[lent - 1];
        if current.is_some() && lendable(inner, b) {
            break;
        }
        let (node, d) = copy_step(inner, b, current);
        delta += d;
        current = node;
        lent -= 1;
    }
    // Checked before anything is built, so that no copy lending counts is ever dropped half
    // built. (Never false in a tree that keeps the node invariants.)
    if !steps[..lent].iter().all(|&(inner, b)| lendable(inner, b)) {
        let (root, path_delta) = rebuild(&steps[..lent], current);
        return (root, delta + path_delta, 0);
    }
    for &(inner, b) in steps[..lent].iter().rev() {
        let node = current.take().expect("a lent step replaces a child");
        // SAFETY: the caller hands the copy to a `LentRoot` (`LentRoot::new` with these
        // steps), which pays the loan exactly once, published or dropped, with the old path
        // kept alive by its count on the old root.
        #[expect(unsafe_code, reason = "the path copy lends its siblings' counts")]
        let copy = unsafe { inner.with_child_lent(b, node) }.expect("checked above: child `b` exists");
        delta += copy.footprint() - inner.footprint();
        current = Some(Node::Inner(copy));
    }
    (current, delta, lent)
}

/// A write's new frame root whose path copy borrowed its siblings' counts from the old
/// root's path (`Path::put_lent`, `Path::delete_lent`), until the loan is paid: by
/// `publish`, or by the drop of a `LentRoot` never published (an unwinding writer), which
/// settles it.
pub(super) struct LentRoot {
    /// A count on the old root, which keeps the lent children alive until the loan is paid.
    old: Option<Node>,
    /// The child bytes the path took from the old root, one per node copied with lent
    /// counts (empty: nothing was lent).
    path: SmallVec<[u8; 16]>,
    /// Taken by `publish`.
    change: Option<Change>,
}

impl LentRoot {
    /// The change of a write whose copy lent counts on the steps `lent` (from the old root
    /// `old` down; none if empty).
    fn new(old: &Node, lent: &[(&Inner, u8)], change: Change) -> LentRoot {
        LentRoot {
            old: Some(old.clone()),
            path: lent.iter().map(|&(_, b)| b).collect(),
            change: Some(change),
        }
    }

    pub(super) fn change(&self) -> &Change {
        self.change.as_ref().expect("not yet published")
    }

    /// The leaf the put stored (`Change::stored`), moved out for the frame's change log.
    pub(super) fn take_stored(&mut self) -> Option<Shared<Leaf>> {
        self.change.as_mut().and_then(|c| c.stored.take())
    }

    /// Publishes the new root with `store`, which returns the old root if it took it back
    /// from every reader (`RootCell::replace`), and pays the loan: with the old root taken
    /// back and no other count on a node of the old path, that path is freed without
    /// touching its siblings' counts (they pass to the copy); from the first node that
    /// someone else still holds (a reader's clone, a checkpoint's capture), and for the whole
    /// path if a reader still borrows the old root, the copy takes counts of its own.
    pub(super) fn publish(mut self, store: impl FnOnce(Node) -> Option<Node>) {
        let change = self.change.take().expect("published once");
        let old = store(change.root);
        if self.path.is_empty() {
            return;
        }
        // Taken: the loan is paid here, not again on drop.
        let ours = self.old.take().expect("held until paid");
        match old {
            Some(old) if old.same(&ours) => {
                // Ours and the cell's were two counts on the old root: leave one.
                drop(ours);
                release_lent(old, &self.path);
            }
            // Still borrowed (or, never under the latch, another root): settle through ours.
            _ => settle_lent(&ours, &self.path),
        }
    }
}

impl Drop for LentRoot {
    fn drop(&mut self) {
        // `old` is still held only if `publish` did not pay the loan.
        if let Some(old) = &self.old {
            settle_lent(old, &self.path);
        }
    }
}

/// Pays a path copy's loan by freeing the old path from `old` down (`Inner::release_lent`)
/// while this is its only count, then settling the rest of it; drops the old node below the
/// lent steps (the write's copy of it took counts of its own, or it is gone).
fn release_lent(old: Node, path: &[u8]) {
    let mut node = old;
    for (i, &b) in path.iter().enumerate() {
        let Node::Inner(inner) = node else { unreachable!("a path copy's steps are inner nodes") };
        match inner.release_lent(b) {
            Ok(child) => node = child.expect("the path's child"),
            Err(inner) => {
                let held = Node::Inner(inner);
                settle_lent(&held, &path[i..]);
                return;
            }
        }
    }
    // An overwritten leaf: its allocation may serve the next write's leaf.
    if let Node::Leaf(leaf) = node {
        keep_spare_leaf(leaf);
    }
}

/// Pays a path copy's loan while the old path stays alive: every node on it takes counts on
/// its children for the copy (`Inner::settle_lent`).
fn settle_lent(old: &Node, path: &[u8]) {
    let mut node = old;
    for &b in path {
        let Node::Inner(inner) = node else { unreachable!("a path copy's steps are inner nodes") };
        inner.settle_lent(b);
        node = inner.children().get(b).expect("the path's child");
    }
}

/// Stores `value` under `key`; `root` starts at `key[depth..]`.
pub(super) fn put(
    root: &Node,
    key: &[u8],
    depth: usize,
    value: &[u8],
    version: u64,
    weight: u64,
) -> Result<Change> {
    Ok(descend(root, key, depth).ok_or_else(stray_link)?.put(key, value, version, weight))
}

/// Removes `key`; `root` starts at `key[depth..]`. A missing key leaves the root as it was.
pub(super) fn delete(root: &Node, key: &[u8], depth: usize) -> Result<Change> {
    Ok(descend(root, key, depth).ok_or_else(stray_link)?.delete(key))
}

/// A put's value, version and weight.
type Stored<'a> = (&'a [u8], u64, u64);

/// A key's state after a batch (`apply_sorted`): what a put stored, or `None` for a delete.
pub(super) type Put<'a> = Option<Stored<'a>>;

/// A key (relative to the frame) with something of its own.
pub(super) type Keyed<'a, T> = (&'a [u8], T);

/// A key (relative to the frame) and its state after a batch.
pub(super) type Entry<'a> = Keyed<'a, Put<'a>>;

/// The byte that keys of a batch share at a depth, and those keys (`next_group`).
pub(super) type Group<'r, 'k, T> = (u8, &'r [Keyed<'k, T>]);

/// `root` with `entries` applied: keys relative to the frame, ascending and distinct, each
/// with the state it ends in. The same frame as applying them one by one (`put`, `delete`),
/// but each inner node the batch reaches is rebuilt once, not once per key below it: a frame
/// rebuilt from its image, its deltas and its change log (hundreds of keys spread over the
/// frame) copied its root and upper nodes, every child count taken and dropped, per key.
/// Footprints are not tracked: the caller measures the result. An emptied frame is an empty
/// root, as `delete` leaves it.
pub(super) fn apply_sorted(root: &Node, entries: &[Entry<'_>]) -> Result<Node> {
    debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "a batch's keys ascend");
    Ok(apply_under(Some(root), entries, 0, 0)?.unwrap_or_else(|| Node::Inner(Inner::empty())))
}

/// Inner nodes a batch rebuilds as a whole on one path (`apply_sorted`, `splice`); below,
/// its keys are written one by one: bounds the recursion where keys nest thousands deep.
pub(super) const BATCH_DEPTH_MAX: usize = 64;

/// `apply_sorted` for the subtree `node` (absent: none yet), which starts at `key[depth..]`
/// of every entry; `None` when the subtree ends up empty. `level`: nodes rebuilt above.
pub(super) fn apply_under(
    node: Option<&Node>,
    entries: &[Entry<'_>],
    depth: usize,
    level: usize,
) -> Result<Option<Node>> {
    let inner = match node {
        _ if entries.is_empty() => return Ok(node.cloned()),
        _ if entries.len() == 1 || level >= BATCH_DEPTH_MAX => return apply_one_by_one(node, entries, depth),
        Some(Node::Inner(inner)) if !inner.is_empty() => inner,
        // A subtree the batch creates (a page's keys under a stub it listed, a frame filled
        // anew) is built from the sorted keys, not put together one key at a time.
        None | Some(Node::Inner(_)) => return build_sorted(entries, depth, level),
        Some(Node::Leaf(leaf)) => {
            // The leaf's key joins the batch, unless the batch names it.
            let key: Vec<u8> = [entries[0].0.get(..depth).unwrap_or_default(), leaf.suffix()].concat();
            let mut joined = entries.to_vec();
            if let Err(at) = entries.binary_search_by(|&(k, _)| k.cmp(&key)) {
                joined.insert(at, (&key, Some((leaf.value(), leaf.version(), leaf.weight()))));
            }
            return build_sorted(&joined, depth, level);
        }
        Some(Node::Link(_)) => return apply_one_by_one(node, entries, depth),
    };
    let at = depth + inner.prefix().len();
    // A put that leaves the compressed prefix splits it: the one-key writer's shape.
    let Some(entries) = within_prefix(entries, depth, inner.prefix()) else {
        return apply_one_by_one(node, entries, depth);
    };
    let entries = &entries[..];
    // The key ending at this node sorts first (every other one continues past it).
    let (terminal, below) = match entries.split_first() {
        Some((&(key, state), rest)) if key.len() == at => (state.map(|s| shared_leaf(leaf_of(&[], s))), rest),
        _ => (inner.terminal().cloned(), entries),
    };
    let mut children: Vec<(u8, Node)> = Vec::with_capacity(inner.children().len() + below.len());
    let mut old = inner.children().iter().peekable();
    let mut rest = below;
    while let Some((b, group)) = next_group(&mut rest, at)? {
        while let Some((c, child)) = old.next_if(|&(c, _)| c < b) {
            children.push((c, child.clone()));
        }
        let existing = old.next_if(|&(c, _)| c == b).map(|(_, child)| child);
        if matches!(existing, Some(Node::Link(_))) {
            return Err(stray_link());
        }
        if let Some(child) = apply_under(existing, group, at + 1, level + 1)? {
            children.push((b, child));
        }
    }
    children.extend(old.map(|(c, child)| (c, child.clone())));
    let built = Inner::with_entries(inner.prefix(), terminal, Some(inner.kind()), children);
    Ok(normalize(built).0)
}

/// The subtree holding exactly the puts of `entries` (ascending, distinct; deletes name no
/// key here), which start at `key[depth..]`; `None` if there are none. Every inner node is
/// built once, in the layout that fits its children, as one-key puts leave a subtree they
/// grow from nothing.
fn build_sorted(entries: &[Entry<'_>], depth: usize, level: usize) -> Result<Option<Node>> {
    let puts: Vec<(&[u8], Stored<'_>)> =
        entries.iter().filter_map(|&(key, state)| Some((key, state?))).collect();
    build_puts(&puts, depth, level)
}

/// `build_sorted` of puts alone.
fn build_puts(puts: &[(&[u8], Stored<'_>)], depth: usize, level: usize) -> Result<Option<Node>> {
    let (Some(&(first, put)), Some(&(last, _))) = (puts.first(), puts.last()) else { return Ok(None) };
    let (own_first, own_last) = match (first.get(depth..), last.get(depth..)) {
        (Some(f), Some(l)) => (f, l),
        _ => return Err(unsorted_batch()),
    };
    if puts.len() == 1 {
        return Ok(Some(Node::Leaf(shared_leaf(leaf_of(own_first, put)))));
    }
    if level >= BATCH_DEPTH_MAX {
        let entries: Vec<Entry<'_>> = puts.iter().map(|&(key, put)| (key, Some(put))).collect();
        return apply_one_by_one(None, &entries, depth);
    }
    // Sorted: the prefix the first and last keys share, all of them share.
    let at = depth + common_prefix_len(own_first, own_last);
    let (terminal, mut rest) = match puts.split_first() {
        Some((&(key, put), rest)) if key.len() == at => (Some(shared_leaf(leaf_of(&[], put))), rest),
        _ => (None, puts),
    };
    let mut children: Vec<(u8, Node)> = Vec::new();
    while let Some((b, group)) = next_group(&mut rest, at)? {
        if let Some(child) = build_puts(group, at + 1, level + 1)? {
            children.push((b, child));
        }
    }
    Ok(Some(Node::Inner(Inner::with_entries(&first[depth..at], terminal, None, children))))
}

/// `entries` (of a subtree entered at `depth`) without the deletes of keys that leave the
/// subtree's root prefix `prefix` (no such key is in the subtree); `None` if a put leaves it
/// (the prefix splits).
pub(super) fn within_prefix<'e, 'k>(
    entries: &'e [Entry<'k>],
    depth: usize,
    prefix: &[u8],
) -> Option<std::borrow::Cow<'e, [Entry<'k>]>> {
    let passes = |key: &[u8]| key.get(depth..).is_some_and(|rest| rest.starts_with(prefix));
    if entries.iter().all(|&(key, _)| passes(key)) {
        return Some(std::borrow::Cow::Borrowed(entries));
    }
    if entries.iter().any(|&(key, state)| state.is_some() && !passes(key)) {
        return None;
    }
    Some(std::borrow::Cow::Owned(entries.iter().filter(|&&(key, _)| passes(key)).copied().collect()))
}

/// Splits off the front of `rest` (keys ascending, sharing their first `at` bytes) the
/// entries whose byte `at` is the first key's: that byte and those entries; `None` once
/// `rest` is empty.
pub(super) fn next_group<'r, 'k, T>(
    rest: &mut &'r [Keyed<'k, T>],
    at: usize,
) -> Result<Option<Group<'r, 'k, T>>> {
    let Some(first) = rest.first() else { return Ok(None) };
    let b = *first.0.get(at).ok_or_else(unsorted_batch)?;
    let (group, after) = rest.split_at(rest.partition_point(|(key, _)| key.get(at) == Some(&b)));
    *rest = after;
    Ok(Some((b, group)))
}

/// A batch whose keys are not ascending and distinct (or shorter than the path it reached):
/// refused, never a panic.
pub(super) fn unsorted_batch() -> Error {
    Error::InvalidArgument("internal: a batch's keys are not ascending and distinct".into())
}

/// `apply_under` by one-key writes: for a single key, a link (which refuses them), or keys
/// that reshape the node's prefix.
pub(super) fn apply_one_by_one(
    node: Option<&Node>,
    entries: &[Entry<'_>],
    depth: usize,
) -> Result<Option<Node>> {
    let mut current = node.cloned();
    if entries.iter().any(|(key, _)| key.len() < depth) {
        return Err(unsorted_batch());
    }
    for &(key, state) in entries {
        current = match (current, state) {
            (None, None) => None,
            (None, Some(put)) => Some(Node::Leaf(shared_leaf(leaf_of(&key[depth..], put)))),
            (Some(node), Some((value, version, weight))) => {
                Some(put(&node, key, depth, value, version, weight)?.root)
            }
            (Some(node), None) => Some(delete(&node, key, depth)?.root).filter(|n| !n.is_empty()),
        };
    }
    Ok(current)
}

fn leaf_of(suffix: &[u8], (value, version, weight): Stored<'_>) -> Leaf {
    Leaf::new(suffix, value, version, weight)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::format::node::InnerKind;
    use crate::tree::node::{first_own_byte, next_kind};
    use crate::tree::{walk_frame, Walk};

    /// Every key of 1..=`len` bytes over `alphabet`.
    pub(in crate::tree) fn keys(alphabet: &[u8], len: usize) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        let mut out = Vec::new();
        for _ in 0..len {
            all = all.iter().flat_map(|k| alphabet.iter().map(move |&b| [&k[..], &[b]].concat())).collect();
            out.extend(all.iter().cloned());
        }
        out
    }

    /// Every node under `node` holds one count, and `node` itself `counts`: a path
    /// copy's loan paid twice would leave a count too few (a node freed under a reader), one
    /// never paid a count too many (a leak).
    fn assert_single_counts(node: &Node, counts: usize) {
        match node {
            Node::Leaf(l) => assert_eq!(Shared::count(l), counts, "leaf {:?}", l.suffix()),
            Node::Inner(inner) => {
                assert_eq!(inner.count(), counts, "inner node {:?}", inner.prefix());
                if let Some(t) = inner.terminal() {
                    assert_eq!(Shared::count(t), 1, "terminal under {:?}", inner.prefix());
                }
                for (_, child) in inner.children().iter() {
                    assert_single_counts(child, 1);
                }
            }
            Node::Link(_) => unreachable!("no links in these frames"),
        }
    }

    /// Keys and the values a frame holds.
    type Contents = std::collections::HashMap<Vec<u8>, Vec<u8>>;

    fn value_of(root: &Node, key: &[u8]) -> Option<Vec<u8>> {
        match walk_frame(root, key, 0) {
            Walk::Here(leaf) => leaf.map(|l| l.value().to_vec()),
            Walk::Link(..) => unreachable!(),
        }
    }

    /// A single put's copy is built in the allocations the previous put's loan freed on
    /// this thread (`node::Spares`): the overwritten leaf's and the old path's.
    #[test]
    fn path_copies_reuse_what_a_paid_loan_freed() {
        let all = keys(b"ab", 3);
        let mut root = Node::Inner(Inner::empty());
        for key in &all {
            root = put(&root, key, 0, b"v", 1, 1).expect("put").root;
        }
        let addresses = |root: &Node, key: &[u8]| -> (*const u8, *const u8) {
            let Node::Inner(top) = root else { panic!("an inner root") };
            let leaf = match walk_frame(root, key, 0) {
                Walk::Here(Some(leaf)) => (&**leaf as *const Leaf).cast::<u8>(),
                _ => panic!("{key:?} is stored"),
            };
            (top.address(), leaf)
        };
        // Two leaves on paths of the same shape: "aaa" and "bbb".
        let (first, second) = (&all[6], &all[all.len() - 1]);
        assert_eq!((&first[..], &second[..]), (&b"aaa"[..], &b"bbb"[..]));
        let (old_root, old_leaf) = addresses(&root, first);
        let lent = descend(&root, first, 0).expect("no links").put_lent(first, b"w", 2, 1);
        lent.publish(|new| Some(std::mem::replace(&mut root, new)));
        // Freed and kept: the next copy of a root of the same layout and the next leaf, not
        // the next allocations of their sizes (which a plain allocator would hand them to).
        let decoy_leaf = Shared::new(Leaf::new(b"", b"w", 9, 1));
        // As many nodes of the path's layout as the first put freed (the path's three).
        let decoy_nodes: Vec<Inner> = (0..3)
            .map(|_| {
                let child = || Node::Leaf(decoy_leaf.clone());
                Inner::new(
                    &[],
                    None,
                    crate::format::node::InnerKind::N4,
                    vec![(b'a', child()), (b'b', child())],
                )
            })
            .collect();
        let lent = descend(&root, second, 0).expect("no links").put_lent(second, b"w", 3, 1);
        lent.publish(|new| Some(std::mem::replace(&mut root, new)));
        assert_eq!(addresses(&root, second), (old_root, old_leaf));
        assert!(decoy_nodes.iter().all(|n| n.address() != old_root));
        assert_ne!((&*decoy_leaf as *const Leaf).cast::<u8>(), old_leaf);
        assert_eq!(value_of(&root, first), Some(b"w".to_vec()));
        assert_single_counts(&root, 1);
    }

    /// Puts and deletes whose path copies lend their siblings' counts (`Path::put_lent`,
    /// `delete_lent`), published every way the cell can answer: the old root handed back
    /// with no other count on its path (freed, its counts passed on), handed back while a
    /// reader holds a clone of a node on the path, kept by a reader that still borrows it,
    /// and never published (an unwinding writer). Old roots kept by readers read exactly what they held, and once the readers
    /// are gone every node holds exactly one count.
    #[test]
    fn lent_path_copies_pay_their_loans_once() {
        let all = keys(b"a/\0", 4);
        let mut root = Node::Inner(Inner::empty());
        let mut want: Contents = Default::default();
        for (i, key) in all.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
            root = put(&root, key, 0, &[i as u8], 1, 1).expect("put").root;
            want.insert(key.clone(), vec![i as u8]);
        }
        assert_single_counts(&root, 1);
        for round in 0..4u8 {
            // Old roots a reader still borrows, with what they held; clones of path nodes.
            let mut borrowed: Vec<(Node, Contents)> = Vec::new();
            let mut clones: Vec<Node> = Vec::new();
            for (i, key) in all.iter().enumerate().filter(|(i, _)| i % 2 == usize::from(round % 2)) {
                let value = vec![round, i as u8];
                let path = descend(&root, key, 0).expect("no links");
                let scenario = (i / 2) % 4;
                if scenario == 2 {
                    // A reader's clone of the second node on the key's path, if there is one.
                    if let Some(&(inner, _)) = path.steps.get(1) {
                        clones.push(Node::Inner(inner.clone()));
                    }
                }
                let delete = (i + usize::from(round)) % 3 == 0;
                let lent = if delete {
                    path.delete_lent(key)
                } else {
                    path.put_lent(key, &value, 2, value.len() as u64)
                };
                if delete && !want.contains_key(key) {
                    assert!(lent.change().root.same(&root), "deleting an absent key changed the root");
                    continue;
                }
                match scenario {
                    0 | 2 => lent.publish(|new| Some(std::mem::replace(&mut root, new))),
                    1 => {
                        let old = std::mem::replace(&mut root, Node::Inner(Inner::empty()));
                        let held = want.clone();
                        lent.publish(|new| {
                            root = new;
                            None
                        });
                        borrowed.push((old, held));
                    }
                    _ => {
                        drop(lent);
                        continue;
                    }
                }
                if delete {
                    want.remove(key);
                } else {
                    want.insert(key.clone(), value);
                }
                for (old, held) in &borrowed {
                    for k in all.iter().step_by(7) {
                        assert_eq!(value_of(old, k), held.get(k).cloned(), "an old root changed at {k:?}");
                    }
                }
            }
            for k in &all {
                assert_eq!(value_of(&root, k), want.get(k).cloned(), "round {round}, key {k:?}");
            }
            for (old, held) in borrowed.drain(..) {
                for k in &all {
                    assert_eq!(value_of(&old, k), held.get(k).cloned(), "an old root changed at {k:?}");
                }
            }
            drop(clones);
            assert_single_counts(&root, 1);
        }
    }

    /// The version a write's condition is checked against is the one a lookup finds: a
    /// single-op write reads it from the path it builds on (`Path::current`), a batch from
    /// `walk_frame`. Checked for every key, present or not, in trees holding every subset
    /// stride of short keys (prefixes of each other, keys ending inside compressed prefixes,
    /// terminals).
    #[test]
    fn descend_finds_what_a_lookup_finds() {
        let all = keys(b"a/\0", 4);
        for stride in [1, 2, 3, 5, 7, 11] {
            let mut root = Node::Inner(Inner::empty());
            for (i, key) in all.iter().enumerate().filter(|(i, _)| i % stride == 0) {
                root = put(&root, key, 0, &[i as u8], i as u64 + 1, 1).expect("put").root;
            }
            for key in &all {
                let path = descend(&root, key, 0).expect("no links in this frame");
                let want = match walk_frame(&root, key, 0) {
                    Walk::Here(leaf) => leaf.map(|l| (l.version(), l.value().to_vec())),
                    Walk::Link(..) => unreachable!(),
                };
                let got = path.current(key).map(|l| (l.version(), l.value().to_vec()));
                assert_eq!(got, want, "stride {stride}, key {key:?}");
            }
            // Deleting every key through `descend` empties the frame, one key at a time.
            for key in &all {
                root = delete(&root, key, 0).expect("delete").root;
                assert!(matches!(walk_frame(&root, key, 0), Walk::Here(None)), "key {key:?} still found");
            }
            assert!(matches!(&root, Node::Inner(inner) if inner.is_empty()), "stride {stride}");
        }
    }

    /// Checks the node invariants `Tree::check_invariants` checks within a frame: no empty
    /// node but an empty root, no node with only a terminal or an unfolded only child, kinds
    /// within their capacity and shrink point, true leads and sums.
    fn assert_node_invariants(node: &Node, is_root: bool) {
        let Node::Inner(inner) = node else { return };
        let n = inner.children().len();
        if inner.is_empty() {
            assert!(is_root && inner.prefix().is_empty(), "an empty inner node below the root");
            return;
        }
        assert!(n > 0, "an inner node with only a terminal");
        assert!(n > 1 || inner.terminal().is_some(), "an only child left unfolded");
        assert!(n <= inner.kind().capacity(), "{:?} holds {n}", inner.kind());
        let kind = inner.kind();
        assert!(kind == InnerKind::N4 || next_kind(kind, n) == kind, "{kind:?} with {n} children");
        if let Some(x) = inner.lead() {
            assert!(inner.children().iter().all(|(_, c)| first_own_byte(c) == Some(x)), "a wrong lead");
        }
        let sum = inner.summed_agg();
        assert!(inner.agg() == sum, "a node's sums differ from its children's");
        for (_, child) in inner.children().iter() {
            assert_node_invariants(child, false);
        }
    }

    /// A batch applied at once (`apply_sorted`) leaves the frame the same keys, values and
    /// versions as the one-key writes applied in order, with every node invariant kept:
    /// random trees of short keys (prefixes of each other, keys ending inside compressed
    /// prefixes, terminals) and random batches of puts and deletes, present keys and absent,
    /// up to emptying the frame.
    #[test]
    fn a_sorted_batch_writes_what_one_key_writes_write() {
        use rand::{Rng, SeedableRng};
        let all = keys(b"a/\0", 4);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x0BA7C4);
        for case in 0..400 {
            let mut root = Node::Inner(Inner::empty());
            let fill = [0.0, 0.05, 0.3, 0.9][case % 4];
            for (i, key) in all.iter().enumerate() {
                if rng.gen_bool(fill) {
                    root = put(&root, key, 0, &[i as u8], 1, 1).expect("put").root;
                }
            }
            let share = [0.01, 0.1, 0.5, 1.0][(case / 4) % 4];
            let values: Vec<Vec<u8>> = (0..all.len()).map(|i| vec![case as u8, i as u8, 7]).collect();
            let mut batch: Vec<Entry<'_>> = Vec::new();
            for (i, key) in all.iter().enumerate() {
                if rng.gen_bool(share) {
                    let state = rng.gen_bool(0.5).then(|| (&values[i][..], case as u64 + 2, 3));
                    batch.push((&key[..], state));
                }
            }
            batch.sort_by(|a, b| a.0.cmp(b.0));
            let mut want = root.clone();
            for &(key, state) in &batch {
                want = match state {
                    Some((value, version, weight)) => put(&want, key, 0, value, version, weight),
                    None => delete(&want, key, 0),
                }
                .expect("one-key write")
                .root;
            }
            let got = apply_sorted(&root, &batch).expect("batch");
            assert_node_invariants(&got, true);
            let state = |root: &Node, key: &[u8]| match walk_frame(root, key, 0) {
                Walk::Here(leaf) => leaf.map(|l| (l.value().to_vec(), l.version(), l.weight())),
                Walk::Link(..) => unreachable!("no links in these frames"),
            };
            for key in &all {
                assert_eq!(state(&got, key), state(&want, key), "case {case}, key {key:?}");
            }
            assert_eq!(got.agg(), want.agg(), "case {case}");
            // Shared with the tree before the batch and with the one-key result until they go.
            drop((root, want));
            assert_single_counts(&got, 1);
        }
    }
}

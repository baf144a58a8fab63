//! Put and delete inside one frame, by path copying: the nodes from the frame's root to the
//! change are copied, everything else is shared with the previous root.
//!
//! Every function returns the new frame root and the exact change in the frame's encoded size
//! (the sum of the records of the nodes it created minus those of the nodes it replaced), so
//! the frame's size stays exact without re-encoding it.

use std::sync::Arc;

use super::node::{Inner, Leaf, Node};
use crate::error::{Error, Location, Result};

/// The result of one write inside a frame.
pub(super) struct Change {
    pub root: Arc<Node>,
    pub size_delta: isize,
    /// Whether the key held a value before the write.
    pub existed: bool,
}

fn len_of(node: &Option<Arc<Node>>) -> isize {
    node.as_ref().map_or(0, |n| n.encoded_len() as isize)
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
/// Returns the node and the encoded size of the child it absorbed (0 if none).
pub(super) fn normalize(inner: Inner) -> (Option<Arc<Node>>, usize) {
    let folded = match (inner.children().len(), inner.terminal()) {
        (0, None) => return (None, 0),
        (0, Some(t)) => return (Some(Arc::new(Node::Leaf(t.with_suffix(inner.prefix())))), 0),
        (1, None) => inner.children().iter().next().and_then(|(b, child)| {
            let mut extra = Vec::with_capacity(inner.prefix().len() + 1);
            extra.extend_from_slice(inner.prefix());
            extra.push(b);
            child.prepend(&extra).map(|folded| (folded, child.encoded_len()))
        }),
        _ => None,
    };
    match folded {
        Some((node, absorbed)) => (Some(Arc::new(node)), absorbed),
        None => (Some(Arc::new(Node::Inner(inner))), 0),
    }
}

/// Copies the path `steps` (inner node and the child byte taken, root first) with the node at
/// its end replaced by `bottom` (`None` removes it), normalizing every copied node.
/// Returns the new root (`None` when the frame became empty) and the size change of the
/// copied nodes (the caller accounts for `bottom` itself).
pub(super) fn rebuild(steps: &[(&Inner, u8)], bottom: Option<Arc<Node>>) -> (Option<Arc<Node>>, isize) {
    let mut current = bottom;
    let mut delta = 0isize;
    for &(inner, b) in steps.iter().rev() {
        let copy = match current {
            Some(node) => inner.with_child(b, node),
            None => inner.without_child(b),
        };
        let (node, absorbed) = normalize(copy);
        delta += len_of(&node) - inner.encoded_len() as isize - absorbed as isize;
        current = node;
    }
    (current, delta)
}

/// Stores `value` under `key`; `root` starts at `key[depth..]`.
pub(super) fn put(root: &Arc<Node>, key: &[u8], depth: usize, value: &[u8], version: u64) -> Result<Change> {
    let mut steps: Vec<(&Inner, u8)> = Vec::new();
    let mut node: &Arc<Node> = root;
    let mut depth = depth;
    let new_leaf = |suffix: &[u8]| Leaf::new(suffix, value, version);
    let (replacement, mut delta, existed): (Arc<Node>, isize, bool) = loop {
        let rest = &key[depth..];
        match &**node {
            Node::Link(_) => return Err(stray_link()),
            Node::Leaf(old) => {
                let old_len = old.encoded_len() as isize;
                if old.suffix() == rest {
                    let leaf = new_leaf(rest);
                    let d = leaf.encoded_len() as isize - old_len;
                    break (Arc::new(Node::Leaf(leaf)), d, true);
                }
                // Two keys diverge (or one ends) inside the old leaf's suffix: a new inner node.
                let s = old.suffix();
                let c = common_prefix_len(s, rest);
                let mut created = 0isize;
                let mut terminal = None;
                let mut entries: Vec<(u8, Arc<Node>)> = Vec::with_capacity(2);
                if c == rest.len() {
                    let t = new_leaf(&[]);
                    created += t.encoded_len() as isize;
                    terminal = Some(Arc::new(t));
                } else {
                    let l = new_leaf(&rest[c + 1..]);
                    created += l.encoded_len() as isize;
                    entries.push((rest[c], Arc::new(Node::Leaf(l))));
                }
                if c == s.len() {
                    let t = Leaf::new(&[], old.value(), old.version());
                    created += t.encoded_len() as isize;
                    terminal = Some(Arc::new(t));
                } else {
                    let l = old.with_suffix(&s[c + 1..]);
                    created += l.encoded_len() as isize;
                    entries.push((s[c], Arc::new(Node::Leaf(l))));
                }
                entries.sort_by_key(|e| e.0);
                // The terminal's record is part of the inner node's encoded length.
                let inner = Inner::with_entries(&rest[..c], terminal.clone(), None, entries);
                let t_len = terminal.as_ref().map_or(0, |t| t.encoded_len() as isize);
                let d = inner.encoded_len() as isize - t_len + created - old_len;
                break (Arc::new(Node::Inner(inner)), d, false);
            }
            Node::Inner(inner) if inner.is_empty() => {
                let leaf = new_leaf(rest);
                let d = leaf.encoded_len() as isize - inner.encoded_len() as isize;
                break (Arc::new(Node::Leaf(leaf)), d, false);
            }
            Node::Inner(inner) => {
                let p = inner.prefix();
                let c = common_prefix_len(p, rest);
                if c < p.len() {
                    // The key leaves the compressed prefix: split it.
                    let lower = inner.with_prefix(&p[c + 1..]);
                    let mut d = lower.encoded_len() as isize - inner.encoded_len() as isize;
                    let mut entries: Vec<(u8, Arc<Node>)> = vec![(p[c], Arc::new(Node::Inner(lower)))];
                    let mut terminal = None;
                    if c == rest.len() {
                        terminal = Some(Arc::new(new_leaf(&[])));
                    } else {
                        let l = new_leaf(&rest[c + 1..]);
                        d += l.encoded_len() as isize;
                        entries.push((rest[c], Arc::new(Node::Leaf(l))));
                        entries.sort_by_key(|e| e.0);
                    }
                    let upper = Inner::with_entries(&p[..c], terminal, None, entries);
                    d += upper.encoded_len() as isize;
                    break (Arc::new(Node::Inner(upper)), d, false);
                }
                if rest.len() == p.len() {
                    let copy = inner.with_terminal(Some(Arc::new(new_leaf(&[]))));
                    let d = copy.encoded_len() as isize - inner.encoded_len() as isize;
                    break (Arc::new(Node::Inner(copy)), d, inner.terminal().is_some());
                }
                let b = rest[c];
                match inner.children().get(b) {
                    Some(child) => {
                        steps.push((inner, b));
                        node = child;
                        depth += c + 1;
                    }
                    None => {
                        let leaf = new_leaf(&rest[c + 1..]);
                        let leaf_len = leaf.encoded_len() as isize;
                        let copy = inner.with_child(b, Arc::new(Node::Leaf(leaf)));
                        let d = copy.encoded_len() as isize - inner.encoded_len() as isize + leaf_len;
                        break (Arc::new(Node::Inner(copy)), d, false);
                    }
                }
            }
        }
    };
    let (new_root, path_delta) = rebuild(&steps, Some(replacement));
    delta += path_delta;
    let root = new_root.unwrap_or_else(|| Arc::new(Node::Inner(Inner::empty())));
    Ok(Change { root, size_delta: delta, existed })
}

/// Removes `key`; `root` starts at `key[depth..]`. A missing key leaves the root as it was.
pub(super) fn delete(root: &Arc<Node>, key: &[u8], depth: usize) -> Result<Change> {
    let unchanged = || Ok(Change { root: Arc::clone(root), size_delta: 0, existed: false });
    let mut steps: Vec<(&Inner, u8)> = Vec::new();
    let mut node: &Arc<Node> = root;
    let mut depth = depth;
    // The replacement of `node` (None: removed) and the size change at that level.
    let (replacement, mut delta): (Option<Arc<Node>>, isize) = loop {
        let rest = &key[depth..];
        match &**node {
            Node::Link(_) => return Err(stray_link()),
            Node::Leaf(leaf) => {
                if leaf.suffix() != rest {
                    return unchanged();
                }
                break (None, -(leaf.encoded_len() as isize));
            }
            Node::Inner(inner) => {
                let p = inner.prefix();
                if !rest.starts_with(p) {
                    return unchanged();
                }
                if rest.len() == p.len() {
                    if inner.terminal().is_none() {
                        return unchanged();
                    }
                    let (n, absorbed) = normalize(inner.with_terminal(None));
                    let d = len_of(&n) - inner.encoded_len() as isize - absorbed as isize;
                    break (n, d);
                }
                let b = rest[p.len()];
                match inner.children().get(b) {
                    Some(child) => {
                        steps.push((inner, b));
                        node = child;
                        depth += p.len() + 1;
                    }
                    None => return unchanged(),
                }
            }
        }
    };
    let (new_root, path_delta) = rebuild(&steps, replacement);
    delta += path_delta;
    let root = match new_root {
        Some(r) => r,
        None => {
            let empty = Node::Inner(Inner::empty());
            delta += empty.encoded_len() as isize;
            Arc::new(empty)
        }
    };
    Ok(Change { root, size_delta: delta, existed: true })
}

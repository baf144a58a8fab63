//! Put and delete inside one frame, by path copying: the nodes from the frame's root to the
//! change are copied, everything else is shared with the previous root.
//!
//! Every function returns the new frame root and the exact change in the frame's footprint
//! (encoded bytes and memory: the footprints of the nodes it created minus those of the nodes
//! it replaced), so the frame's size stays exact without re-encoding or re-measuring it.

use super::node::{Footprint, Inner, Leaf, Node, Shared};
use crate::error::{Error, Location, Result};

/// The result of one write inside a frame.
pub(super) struct Change {
    pub root: Node,
    pub size_delta: Footprint,
    /// Whether the key held a value before the write.
    pub existed: bool,
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
        let copy = match current {
            Some(node) => inner.with_child(b, node),
            None => inner.without_child(b),
        };
        let (node, absorbed) = normalize(copy);
        delta += footprint_of(&node) - inner.footprint() - absorbed;
        current = node;
    }
    (current, delta)
}

/// Stores `value` under `key`; `root` starts at `key[depth..]`.
pub(super) fn put(root: &Node, key: &[u8], depth: usize, value: &[u8], version: u64) -> Result<Change> {
    let mut steps: Vec<(&Inner, u8)> = Vec::new();
    let mut node: &Node = root;
    let mut depth = depth;
    let new_leaf = |suffix: &[u8]| Leaf::new(suffix, value, version);
    let (replacement, mut delta, existed): (Node, Footprint, bool) = loop {
        let rest = &key[depth..];
        match node {
            Node::Link(_) => return Err(stray_link()),
            Node::Leaf(old) => {
                let old_len = old.footprint();
                if old.suffix() == rest {
                    let leaf = new_leaf(rest);
                    let d = leaf.footprint() - old_len;
                    break (Node::Leaf(Shared::new(leaf)), d, true);
                }
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
                    let t = Leaf::new(&[], old.value(), old.version());
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
                break (Node::Inner(inner), d, false);
            }
            Node::Inner(inner) if inner.is_empty() => {
                let leaf = new_leaf(rest);
                let d = leaf.footprint() - inner.footprint();
                break (Node::Leaf(Shared::new(leaf)), d, false);
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
                    break (Node::Inner(upper), d, false);
                }
                if rest.len() == p.len() {
                    let copy = inner.with_terminal(Some(Shared::new(new_leaf(&[]))));
                    let d = copy.footprint() - inner.footprint();
                    break (Node::Inner(copy), d, inner.terminal().is_some());
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
                        let leaf_len = leaf.footprint();
                        let copy = inner.with_child(b, Node::Leaf(Shared::new(leaf)));
                        let d = copy.footprint() - inner.footprint() + leaf_len;
                        break (Node::Inner(copy), d, false);
                    }
                }
            }
        }
    };
    let (new_root, path_delta) = rebuild(&steps, Some(replacement));
    delta += path_delta;
    let root = new_root.unwrap_or_else(|| Node::Inner(Inner::empty()));
    Ok(Change { root, size_delta: delta, existed })
}

/// Removes `key`; `root` starts at `key[depth..]`. A missing key leaves the root as it was.
pub(super) fn delete(root: &Node, key: &[u8], depth: usize) -> Result<Change> {
    let unchanged = || Ok(Change { root: root.clone(), size_delta: Footprint::ZERO, existed: false });
    let mut steps: Vec<(&Inner, u8)> = Vec::new();
    let mut node: &Node = root;
    let mut depth = depth;
    // The replacement of `node` (None: removed) and the size change at that level.
    let (replacement, mut delta): (Option<Node>, Footprint) = loop {
        let rest = &key[depth..];
        match node {
            Node::Link(_) => return Err(stray_link()),
            Node::Leaf(leaf) => {
                if leaf.suffix() != rest {
                    return unchanged();
                }
                break (None, -leaf.footprint());
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
                    let d = footprint_of(&n) - inner.footprint() - absorbed;
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
            delta += empty.footprint();
            empty
        }
    };
    Ok(Change { root, size_delta: delta, existed: true })
}

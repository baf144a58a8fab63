//! Put and delete inside one frame, by path copying: the nodes from the frame's root to the
//! change are copied, everything else is shared with the previous root.
//!
//! Every function returns the new frame root and the exact change in the frame's footprint
//! (encoded bytes and memory: the footprints of the nodes it created minus those of the nodes
//! it replaced), so the frame's size stays exact without re-encoding or re-measuring it.

use smallvec::SmallVec;

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
    pub(super) fn put(self, key: &[u8], value: &[u8], version: u64) -> Change {
        let rest = &key[self.depth..];
        let new_leaf = |suffix: &[u8]| Leaf::new(suffix, value, version);
        let (replacement, mut delta, existed): (Node, Footprint, bool) = match self.node {
            Node::Leaf(old) => {
                let old_len = old.footprint();
                if old.suffix() == rest {
                    let leaf = new_leaf(rest);
                    let d = leaf.footprint() - old_len;
                    (Node::Leaf(Shared::new(leaf)), d, true)
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
        let (new_root, path_delta) = rebuild(&self.steps, Some(replacement));
        delta += path_delta;
        let root = new_root.unwrap_or_else(|| Node::Inner(Inner::empty()));
        Change { root, size_delta: delta, existed }
    }

    /// Removes `key` (the key `descend` walked); a missing key leaves the root as it was.
    pub(super) fn delete(self, key: &[u8]) -> Change {
        let unchanged = || Change { root: self.root.clone(), size_delta: Footprint::ZERO, existed: false };
        let rest = &key[self.depth..];
        // The replacement of the node (None: removed) and the size change at that level.
        let (replacement, mut delta): (Option<Node>, Footprint) = match self.node {
            Node::Leaf(leaf) => {
                if leaf.suffix() != rest {
                    return unchanged();
                }
                (None, -leaf.footprint())
            }
            Node::Inner(inner) => {
                if inner.prefix() != rest || inner.terminal().is_none() {
                    // The key leaves the prefix, or its child is missing, or no terminal.
                    return unchanged();
                }
                let (n, absorbed) = normalize(inner.with_terminal(None));
                let d = footprint_of(&n) - inner.footprint() - absorbed;
                (n, d)
            }
            Node::Link(_) => unreachable!("descend never stops at a link"),
        };
        let (new_root, path_delta) = rebuild(&self.steps, replacement);
        delta += path_delta;
        let root = match new_root {
            Some(r) => r,
            None => {
                let empty = Node::Inner(Inner::empty());
                delta += empty.footprint();
                empty
            }
        };
        Change { root, size_delta: delta, existed: true }
    }
}

/// Stores `value` under `key`; `root` starts at `key[depth..]`.
pub(super) fn put(root: &Node, key: &[u8], depth: usize, value: &[u8], version: u64) -> Result<Change> {
    Ok(descend(root, key, depth).ok_or_else(stray_link)?.put(key, value, version))
}

/// Removes `key`; `root` starts at `key[depth..]`. A missing key leaves the root as it was.
pub(super) fn delete(root: &Node, key: &[u8], depth: usize) -> Result<Change> {
    Ok(descend(root, key, depth).ok_or_else(stray_link)?.delete(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{walk_frame, Walk};

    /// Every key of 1..=`len` bytes over `alphabet`.
    fn keys(alphabet: &[u8], len: usize) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        let mut out = Vec::new();
        for _ in 0..len {
            all = all.iter().flat_map(|k| alphabet.iter().map(move |&b| [&k[..], &[b]].concat())).collect();
            out.extend(all.iter().cloned());
        }
        out
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
                root = put(&root, key, 0, &[i as u8], i as u64 + 1).expect("put").root;
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
}

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

use super::node::{touch, Cell, Leaf, Node};
use super::Tree;
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
}

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

    #[inline]
    fn emit_common_prefix(&mut self, cp: &[u8]) -> Flow {
        let start = &self.start_after[..];
        if start.is_empty() || cp > start || (self.start_inclusive && cp == start) {
            self.emit(ListEntry::CommonPrefix(cp))
        } else {
            Flow::Continue
        }
    }

    #[inline]
    fn emit_key(&mut self, key: &[u8], leaf: &Leaf) -> Flow {
        let value = if self.with_values { leaf.value() } else { &[] };
        self.emit(ListEntry::Key { key, value, version: Version(leaf.version()) })
    }

    /// Entries the page can still take, plus the one that decides `truncated`.
    fn remaining(&self) -> usize {
        self.limit.saturating_add(1).saturating_sub(self.emitted)
    }
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
        // An evicted frame the listing prefix narrows: read only the part the prefix leads to.
        let rel = walk.prefix.strip_prefix(&path[..]).filter(|rel| !rel.is_empty());
        if let Some(rel) = rel {
            match self.subtree_from_image(cell, rel) {
                Ok(None) => {}
                Ok(Some((depth, part))) => {
                    if cell.is_retired() {
                        walk.restart_at.clone_from(path);
                        return Flow::Restart;
                    }
                    let base = path.len();
                    path.extend_from_slice(&rel[..depth]);
                    let flow = self.list_node(walk, &part, path, checked, bounds);
                    path.truncate(base);
                    return flow;
                }
                Err(e) => {
                    walk.error = Some(e);
                    return Flow::Stop;
                }
            }
        }
        let root = match self.walk_root(cell) {
            Ok(root) => root,
            Err(e) => {
                walk.error = Some(e);
                return Flow::Stop;
            }
        };
        // A test merges a linked frame away here (after the walk loaded its root) to force a restart.
        fail::fail_point!("list-frame-loaded", !path.is_empty(), |_| Flow::Stop);
        if cell.is_retired() {
            walk.restart_at.clone_from(path);
            return Flow::Restart;
        }
        self.list_node(walk, &root, path, checked, bounds)
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
            Node::Link(cell) => return self.list_frame(walk, cell, path, checked, bounds),
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
                (Some(d), Node::Link(cell)) => match cell.lead() {
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

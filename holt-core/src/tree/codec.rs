//! A frame's nodes to and from its on-disk bytes (`format::frame` + `format::node`).
//!
//! Encoding is a post-order walk (terminal leaf, children ascending, then the inner record);
//! decoding rebuilds nodes with a stack. Both use explicit stacks: a frame can be as deep as
//! the longest key.

use std::path::PathBuf;
use std::sync::Arc;

use super::node::{touch, Cell, Inner, Leaf, Node, Shared, Weigh};
use super::Tree;
use super::{walk_frame, write, Walk};
use crate::buffer::FrameSize;
use crate::buffer::{corruption_at as corruption, ChangeLog, DeltaRef, ImageBody};
use crate::error::{Error, Result};
use crate::format::delta::{DeltaEntry, DeltaWriter};
use crate::format::frame::{self, FRAME_HEADER_LEN};
use crate::format::node::{write_inner, write_leaf, write_link, Record, RecordError, RecordReader};
use crate::format::{FrameId, FRAME_SIZE};

/// Encodes the frame `id` rooted at `root` into its checksummed image: header and records,
/// zero-padded to a multiple of 4 KiB (the frame's `FRAME_SIZE` bytes minus padding).
/// Fails only if the nodes do not fit, which the split policy rules out.
pub(crate) fn encode_frame(id: FrameId, root: &Node) -> Result<Vec<u8>> {
    let mut buf = frame::start_frame(FRAME_SIZE);
    let (count, root_offset) = encode_records(&mut buf, root);
    seal_frame(&mut buf, id, count, root_offset)?;
    Ok(buf)
}

/// Seals the image `buf` of frame `id` (`count` records, the root's at `root_offset`);
/// fails if its records do not fit the frame.
pub(super) fn seal_frame(buf: &mut Vec<u8>, id: FrameId, count: u32, root_offset: usize) -> Result<()> {
    let used = buf.len();
    frame::seal(buf, id, count, root_offset).map_err(|_| {
        Error::InvalidArgument(format!(
            "frame {id} needs {used} bytes, more than the {FRAME_SIZE}-byte frame"
        ))
    })
}

/// Appends the records of the subtree `root` to `buf` (a frame's image being written, its
/// header first) in post order; returns how many it wrote and the body offset of the top one.
/// Stops once the image passes the frame's size (sealing it then fails).
pub(super) fn encode_records(buf: &mut Vec<u8>, root: &Node) -> (u32, usize) {
    enum Step<'a> {
        Enter(&'a Node),
        Terminal(&'a Leaf),
        Exit(&'a Inner),
    }
    let mut count: u32 = 0;
    let mut stack = vec![Step::Enter(root)];
    let mut children: Vec<&Node> = Vec::new();
    // Body offsets of the records written and not yet popped by their parent's record.
    let mut written: Vec<usize> = Vec::new();
    let mut distances: Vec<usize> = Vec::new();
    while let Some(step) = stack.pop() {
        let start = buf.len() - FRAME_HEADER_LEN;
        match step {
            Step::Enter(Node::Leaf(l)) => write_leaf(buf, l.suffix(), l.value(), l.version()),
            Step::Enter(Node::Link(cell)) => write_link(buf, cell.id.0),
            Step::Enter(Node::Inner(inner)) => {
                stack.push(Step::Exit(inner));
                children.clear();
                children.extend(inner.children().iter().map(|(_, c)| c));
                // Every child now, so their cache misses overlap instead of being paid one by
                // one as the walk reaches them (nodes are scattered over the heap).
                touch(children.iter().copied());
                stack.extend(children.iter().rev().map(|c| Step::Enter(c)));
                if let Some(t) = inner.terminal() {
                    stack.push(Step::Terminal(t));
                }
                continue;
            }
            Step::Terminal(t) => write_leaf(buf, &[], t.value(), t.version()),
            Step::Exit(inner) => {
                let keys = inner.children().iter().map(|(b, _)| b);
                let n = inner.children().len();
                let popped = n + usize::from(inner.terminal().is_some());
                distances.clear();
                distances.extend(written.drain(written.len() - popped..).map(|at| start - at));
                write_inner(
                    buf,
                    inner.kind(),
                    inner.prefix(),
                    inner.terminal().is_some(),
                    n,
                    keys,
                    &distances,
                );
            }
        }
        written.push(start);
        count += 1;
        if buf.len() > FRAME_SIZE {
            break;
        }
    }
    (count, written.first().copied().unwrap_or(0))
}

/// Encodes the delta that takes frame `id` from its state on disk to `root`, given the
/// changes written since (`changes`, relative to the frame): for each key, its last entry,
/// which is the key's state in `root` (the log and the root are captured together).
/// `earlier`: entries of deltas this one replaces (the frame's chain, oldest first), older
/// than every change; empty when it is appended to the chain. `None` when a delta cannot or
/// should not stand in for the whole frame: the log gave up (`whole`), or the delta would
/// exceed `max_bytes`.
pub(crate) fn encode_delta(
    id: FrameId,
    root: Option<&Node>,
    earlier: &[DeltaEntry<'_>],
    changes: &ChangeLog<Node>,
    chain_index: u32,
    max_bytes: usize,
) -> Option<Vec<u8>> {
    if changes.whole {
        return None;
    }
    // A put records the leaf it stored: anything else (never met) is written whole.
    let mut entries: Vec<DeltaEntry<'_>> = earlier.to_vec();
    entries.extend(logged_entries(changes).ok()?);
    let entries = last_entries(entries);
    let hint = if earlier.is_empty() { changes.accounted_bytes() } else { max_bytes };
    let mut delta = DeltaWriter::new(hint.min(max_bytes));
    for entry in &entries {
        if let Some(root) = root {
            debug_assert_eq!(
                state_in(root, entry.key()),
                Some(entry.clone()),
                "change log and root disagree"
            );
        }
        delta.push(entry);
        if delta.len() > max_bytes {
            return None;
        }
    }
    delta.finish(id, chain_index).ok()
}

/// `key`'s state in the frame `root` as a delta entry; `None` if the key now lives in another
/// frame (only a split moves keys out, and a split makes the frame be written whole). Only
/// debug builds look (every test checks the change log against the root this way).
fn state_in<'a>(root: &'a Node, key: &'a [u8]) -> Option<DeltaEntry<'a>> {
    match walk_frame(root, key, 0) {
        Walk::Here(Some(leaf)) => Some(DeltaEntry::Put { key, value: leaf.value(), version: leaf.version() }),
        Walk::Here(None) => Some(DeltaEntry::Delete { key }),
        Walk::Link(..) => None,
    }
}

/// The changes of a change log as delta entries, in the order written; refused if the log
/// holds a state that is not a leaf (a put records the leaf it stored).
pub(super) fn logged_entries(changes: &ChangeLog<Node>) -> Result<Vec<DeltaEntry<'_>>> {
    changes
        .iter()
        .map(|(key, state)| match state {
            Some(Node::Leaf(leaf)) => {
                Ok(DeltaEntry::Put { key, value: leaf.value(), version: leaf.version() })
            }
            None => Ok(DeltaEntry::Delete { key }),
            Some(_) => {
                Err(Error::InvalidArgument("internal: a change log holds a state that is not a leaf".into()))
            }
        })
        .collect()
}

/// Each key's last entry among `entries` (oldest first), in key order.
pub(super) fn last_entries(entries: Vec<DeltaEntry<'_>>) -> Vec<DeltaEntry<'_>> {
    // Newest first within a key, so that `dedup` keeps each key's last entry.
    let mut numbered: Vec<(usize, DeltaEntry<'_>)> = entries.into_iter().enumerate().collect();
    numbered.sort_unstable_by(|(i, a), (j, b)| a.key().cmp(b.key()).then(j.cmp(i)));
    numbered.dedup_by(|(_, later), (_, kept)| later.key() == kept.key());
    numbered.into_iter().map(|(_, entry)| entry).collect()
}

/// `root` (a frame's decoded image) with `entries` (changes to its keys, relative to the
/// frame, oldest first) applied: each key's last, in one batch (`write::apply_sorted`).
pub(super) fn apply_entries(root: &Node, entries: Vec<DeltaEntry<'_>>, weigh: Weigh) -> Result<Node> {
    write::apply_sorted(root, &batch_of(&last_entries(entries), weigh))
}

/// The batch `write::apply_sorted` (or `splice::rewrite_frame`) applies for `last`, entries
/// in key order with one per key (`last_entries`).
pub(super) fn batch_of<'a>(last: &[DeltaEntry<'a>], weigh: Weigh) -> Vec<(&'a [u8], write::Put<'a>)> {
    last.iter()
        .map(|entry| match *entry {
            DeltaEntry::Put { key, value, version } => (key, Some((value, version, weigh(value)))),
            DeltaEntry::Delete { key } => (key, None),
        })
        .collect()
}

/// The entries of `deltas` (a frame's chain, oldest first), in order.
pub(super) fn chain_entries<'a>(deltas: &[DeltaRef<'a>]) -> Result<Vec<DeltaEntry<'a>>> {
    let mut entries = Vec::new();
    for delta in deltas {
        entries.extend(delta.entries()?);
    }
    Ok(entries)
}

/// Applies frame `id`'s deltas, in order, to `root` (the frame's decoded image); returns the
/// resulting root.
pub(super) fn apply_deltas(root: Node, deltas: &[DeltaRef<'_>], weigh: Weigh) -> Result<Node> {
    apply_entries(&root, chain_entries(deltas)?, weigh)
}

/// `root` with `key` (relative to the frame) given the state a change log recorded for it:
/// the value and version of the leaf a put stored, or absent.
/// Returns the new root and the node the change left under the key (the leaf a put stored).
pub(super) fn apply_change(root: &Node, key: &[u8], state: Option<&Node>) -> Result<(Node, Option<Node>)> {
    let change = match state {
        Some(Node::Leaf(leaf)) => write::put(root, key, 0, leaf.value(), leaf.version(), leaf.weight())?,
        None => write::delete(root, key, 0)?,
        Some(_) => {
            return Err(Error::InvalidArgument(
                "internal: a change log holds a state that is not a leaf".into(),
            ))
        }
    };
    let stored = match state {
        Some(_) => Some(Node::Leaf(
            change
                .stored
                .ok_or_else(|| Error::InvalidArgument("internal: a replayed put stored no leaf".into()))?,
        )),
        None => None,
    };
    Ok((change.root, stored))
}

/// A decoded record waiting for its parent: leaves stay bare until we know whether they are
/// a child or a terminal.
enum Pending {
    Leaf(Leaf),
    Node(Node),
}

impl Pending {
    fn into_node(self) -> Node {
        match self {
            Pending::Leaf(l) => Node::Leaf(Shared::new(l)),
            Pending::Node(n) => n,
        }
    }
}

/// The most inner nodes above a record in one frame: a key of `KEY_LEN_MAX` bytes passes at
/// most one inner node per byte, plus the one whose terminal it is. A deeper frame is corrupt
/// (however valid its checksum), and is refused before its nodes are built: dropping or
/// walking a chain of tens of thousands of nodes would overflow the stack.
const FRAME_DEPTH_MAX: u16 = crate::api::KEY_LEN_MAX as u16 + 1;

/// Decodes a frame's bytes into its root, resolving each link through `resolve`.
/// Returns the root and the frame's encoded size. Never panics on any input.
pub(super) fn decode_frame(
    bytes: &[u8],
    id: FrameId,
    location: &(PathBuf, u64),
    weigh: Weigh,
    resolve: impl FnMut(FrameId) -> Option<Arc<Cell>>,
) -> Result<(Node, usize)> {
    let fail = |offset: usize, reason: String| corruption(location, id, offset, reason);
    let view = frame::open(bytes, id).map_err(|e: RecordError| fail(e.offset, e.reason))?;
    let decoded = decode_records(RecordReader::new(view.body), &fail, weigh, resolve)?;
    if decoded.records != view.node_count {
        return Err(fail(
            0,
            format!("header counts {} records, body holds {}", view.node_count, decoded.records),
        ));
    }
    if decoded.first_start != view.root_offset {
        return Err(fail(0, format!("header names offset {} as the root's", view.root_offset)));
    }
    // Links as roots could chain frames without the key getting deeper (see `walk_image`).
    if matches!(decoded.root, Node::Link(_)) {
        return Err(fail(FRAME_HEADER_LEN + view.root_offset, "the frame's root is a link".into()));
    }
    // The size writers keep (`split::frame_size`): the fixed header and the records; the page
    // table is the same 512 bytes in every frame, so `FRAME_BUDGET_BYTES` leaves room for it.
    Ok((decoded.root, frame::HEADER_LEN + view.body.len()))
}

/// What `decode_records` built.
pub(super) struct Decoded {
    pub root: Node,
    /// Records read.
    pub records: u32,
    /// Leaf records read: the keys of the tree.
    leaves: usize,
    /// The body offset of the first record the root's record popped (the root's own, for a
    /// single record): for a whole body, the root record's offset.
    pub first_start: usize,
}

/// Builds the one tree the records of `reader` (a whole body, or a window holding exactly
/// one subtree's records) form, checking every back distance and the nesting depth.
pub(super) fn decode_records(
    mut reader: RecordReader<'_>,
    fail: &dyn Fn(usize, String) -> Error,
    weigh: Weigh,
    mut resolve: impl FnMut(FrameId) -> Option<Arc<Cell>>,
) -> Result<Decoded> {
    let mut stack: Vec<Pending> = Vec::new();
    // The body offset of each record on `stack`: back distances must name exactly these.
    let mut starts: Vec<usize> = Vec::new();
    // The inner nodes below each record on `stack` (0 for a leaf or a link).
    let mut heights: Vec<u16> = Vec::new();
    let mut records: u32 = 0;
    let mut leaves = 0;
    while !reader.is_at_end() {
        let body_at = reader.body_position();
        let at = FRAME_HEADER_LEN + body_at;
        let record = reader.next_record().map_err(|e| fail(FRAME_HEADER_LEN + e.offset, e.reason))?;
        records = records.saturating_add(1);
        match record {
            Record::Leaf { suffix, value, version } => {
                stack.push(Pending::Leaf(Leaf::new(suffix, value, version, weigh(value))));
                heights.push(0);
                leaves += 1;
            }
            Record::Link { frame } => {
                let cell = resolve(FrameId(frame))
                    .ok_or_else(|| fail(at, format!("link to unknown frame {frame}")))?;
                stack.push(Pending::Node(Node::Link(cell)));
                heights.push(0);
            }
            Record::Inner { kind, prefix, has_terminal, child_count, keys, distances } => {
                let needed = child_count + usize::from(has_terminal);
                if stack.len() < needed {
                    return Err(fail(
                        at,
                        format!("inner node needs {needed} records, {} precede it", stack.len()),
                    ));
                }
                let mut key_bytes = [0u8; 256];
                let mut key_count = 0usize;
                for b in keys.iter() {
                    if let Some(slot) = key_bytes.get_mut(key_count) {
                        *slot = b;
                    }
                    key_count += 1;
                }
                if key_count != child_count || key_count > kind.capacity() {
                    return Err(fail(at, "child keys disagree with child count".into()));
                }
                let popped_starts = starts.drain(starts.len() - needed..);
                if popped_starts.enumerate().any(|(i, s)| distances.get(i) != Some(body_at - s)) {
                    return Err(fail(at, "a back distance does not name the record it pops".into()));
                }
                let height = heights.drain(heights.len() - needed..).max().unwrap_or(0) + 1;
                if height > FRAME_DEPTH_MAX {
                    return Err(fail(at, format!("inner nodes nest deeper than {FRAME_DEPTH_MAX}")));
                }
                heights.push(height);
                // Drained in place: no vector per node (allocation dominated decoding).
                let mut popped = stack.drain(stack.len() - needed..);
                let terminal = if has_terminal {
                    match popped.next() {
                        Some(Pending::Leaf(t)) if t.suffix().is_empty() => Some(Shared::new(t)),
                        _ => return Err(fail(at, "terminal is not a leaf with an empty suffix".into())),
                    }
                } else {
                    None
                };
                let inner = Inner::from_parts(
                    prefix,
                    terminal,
                    kind,
                    &key_bytes[..key_count],
                    popped.map(Pending::into_node),
                );
                stack.push(Pending::Node(Node::Inner(inner)));
            }
        }
        starts.push(body_at);
    }
    let root = match (stack.pop(), stack.is_empty()) {
        (Some(root), true) => root.into_node(),
        _ => return Err(fail(0, format!("body does not form one tree ({} roots)", stack.len() + 1))),
    };
    let first_start = starts.first().copied().unwrap_or(0);
    Ok(Decoded { root, records, leaves, first_start })
}

/// The body range `[first, end)` the subtree whose top record is at body offset `top` in a
/// frame's image occupies: a subtree's records are contiguous and end with its top record
/// (the encoding is post-order), and the first of them is found by following each inner
/// record's first back distance down to a leaf or a link.
pub(super) fn subtree_window(image: &mut dyn ImageBody, top: usize) -> Result<(usize, usize)> {
    let end = with_record(image, top, |_, reader| top + reader.position())?;
    let mut first = top;
    // Bound: `first` strictly decreases at every step (the reader rejects back distances
    // that do not point before their record).
    loop {
        let back = with_record(image, first, |record, _| match record {
            Record::Inner { distances, .. } => distances.get(0),
            _ => None,
        })?;
        match back {
            Some(back) => first -= back,
            None => break,
        }
    }
    Ok((first, end))
}

/// Decodes the subtree whose top record is at body offset `top` in a frame's image, whose
/// records are `window` (`subtree_window`), fetching only those. Links resolve through
/// `resolve`. Returns the subtree's root and how many keys it holds (links not counted).
pub(super) fn decode_subtree(
    image: &mut dyn ImageBody,
    top: usize,
    (first, end): (usize, usize),
    weigh: Weigh,
    resolve: impl FnMut(FrameId) -> Option<Arc<Cell>>,
) -> Result<(Node, usize)> {
    let (location, id) = (image.location().clone(), image.id());
    let fail = |offset: usize, reason: String| corruption(&location, id, offset, reason);
    let bytes = image.bytes_at(first, end - first)?;
    let window = bytes
        .get(..end - first)
        .ok_or_else(|| fail(FRAME_HEADER_LEN + first, "the subtree runs past the body".into()))?;
    let decoded = decode_records(RecordReader::window(window, first), &fail, weigh, resolve)?;
    if decoded.first_start != top {
        return Err(fail(
            FRAME_HEADER_LEN + top,
            "the subtree's records do not end with its top record".into(),
        ));
    }
    Ok((decoded.root, decoded.leaves))
}

impl Tree {
    /// Decodes frame `cell` read from the source: links resolve to the live frames, and each
    /// linked frame learns `cell` is its parent.
    pub(super) fn decode_frame(
        &self,
        cell: &Arc<Cell>,
        bytes: &[u8],
        location: &(PathBuf, u64),
        deltas: &[DeltaRef<'_>],
    ) -> Result<(Node, FrameSize)> {
        let frames = self.frames.lock();
        let (root, encoded) = decode_frame(bytes, cell.id, location, self.weigh, |id| {
            let child = self.linked_frame(&frames, cell, id)?;
            child.set_parent(cell);
            Some(child)
        })?;
        drop(frames);
        let mut root = root;
        let mut changed = !deltas.is_empty();
        if changed {
            root = apply_deltas(root, deltas, self.weigh)?;
        }
        // Writes made while the frame was evicted (`Tree::write_unloaded`), not on disk yet.
        let released = cell.replay_changes(|key, state| {
            changed = true;
            let (new_root, stored) = apply_change(&root, key, state)?;
            root = new_root;
            Ok(stored)
        })?;
        // The log's own copies are gone: it holds the root's leaves now.
        self.pool.resized(-(released as i64));
        if changed {
            let size = super::split::frame_size(&root);
            return Ok((root, size));
        }
        // The encoded size is the decoder's (what the frame holds); the memory is measured.
        let size = FrameSize { encoded, memory: super::split::frame_size(&root).memory };
        Ok((root, size))
    }
}

impl Tree {
    /// The lead of the evicted frame `cell` (`FrameRoot::lead`), told from its image's root
    /// record without loading the frame while the cache is full, and kept on the cell; `None`
    /// when it cannot be told that way: the cache has room (the caller loads), or a change in
    /// its deltas or recorded writes may change it (`LeadKeeper`).
    pub(super) fn lead_from_image(&self, cell: &Arc<Cell>) -> Result<Option<Option<u8>>> {
        let lead = self.pool.read_image(cell, |image, deltas| {
            if let Some(known) = cell.known_lead() {
                return Ok(Some(known));
            }
            let (mut keeper, _) = image_and_deltas(image, deltas)?;
            if cell.has_unloaded_changes() {
                cell.each_change(|key, state| {
                    keeper.change(key, state.is_some());
                    Ok(())
                })?;
            }
            let learnt = keeper.kept().then_some(keeper.image_lead());
            if let Some(lead) = learnt {
                cell.learn_lead(lead);
            }
            Ok(learnt)
        })?;
        Ok(lead.flatten())
    }
}

impl Tree {
    /// The live frame a link in frame `from` names, if it may link there: a link back to the
    /// frame itself or to the root would make a cycle. `frames` is the locked registry.
    pub(super) fn linked_frame(
        &self,
        frames: &super::FrameMap,
        from: &Cell,
        id: FrameId,
    ) -> Option<Arc<Cell>> {
        if id == from.id || id == self.root.id {
            return None;
        }
        frames.get(&id).cloned()
    }
}

/// Where a point lookup over a frame's encoded image ends.
pub(super) enum ImageWalk {
    /// The value, copied out of the image, and its version.
    Found {
        value: Vec<u8>,
        version: u64,
    },
    Missing,
    /// The key's path continues in frame `frame`, whose root starts at key depth `depth`.
    Link {
        frame: FrameId,
        depth: usize,
    },
}

/// Bytes fetched for a record before its length is known: most records (inner nodes of
/// path-shaped keys, leaves with small values) are shorter; a longer one fetches more.
const RECORD_GUESS_BYTES: usize = 256;

/// Looks `key` up in a frame's image without decoding it: from the root record, each inner
/// record's back distances lead to the one record on the key's path, so a lookup reads a
/// dozen records (and, from disk, the few pages holding them) instead of building thousands
/// of nodes. `depth` as in `walk_frame`. Never panics; a malformed body is a corruption error.
/// `deltas` are the frame's deltas in the order they apply: a key they name has the state the
/// last of them gives it, whatever the image holds (deltas change keys, never the frame's
/// shape, so a key under a link is never in them).
pub(super) fn walk_image(
    image: &mut dyn ImageBody,
    deltas: &[DeltaRef<'_>],
    key: &[u8],
    depth: usize,
) -> Result<ImageWalk> {
    if !deltas.is_empty() {
        if let Some(state) = delta_state(deltas, key.get(depth..).unwrap_or_default())? {
            return Ok(state);
        }
    }
    walk_pages(image, key, depth)
}

/// The state the last of `deltas` that names `key` (relative to the frame) gives it; `None`
/// when none does.
fn delta_state(deltas: &[DeltaRef<'_>], key: &[u8]) -> Result<Option<ImageWalk>> {
    let hash = crate::buffer::key_hash(key);
    for delta in deltas.iter().rev() {
        if let Some(entry) = delta.find(key, hash)? {
            return Ok(Some(match entry {
                DeltaEntry::Put { value, version, .. } => ImageWalk::Found { value: value.to_vec(), version },
                DeltaEntry::Delete { .. } => ImageWalk::Missing,
            }));
        }
    }
    Ok(None)
}

/// Whether the changes made to a frame since its image keep the lead of the image's root
/// (`FrameRoot::lead`), told from the root record and the changed keys (relative to the
/// frame) without decoding the frame. A root with an own byte keeps it while every changed
/// key begins with that byte: a put of such a key splits the root's bytes after it at the
/// earliest, a delete can only fold a child into the root behind it, and a frame left empty
/// is unlinked. A root with none (it branches at its first byte) gains none by puts, which
/// add branches at most; a delete may empty a branch, so with deletes it keeps none while two
/// of its branches remain that no delete touched (their keys are all still there).
pub(super) struct LeadKeeper {
    lead: Option<u8>,
    /// For a root with no own byte: its branches (bit `b` for child byte `b`, bit 256 for a
    /// key ending at the root).
    branches: [u64; 5],
    /// The branches a delete touched.
    deleted: [u64; 5],
    /// No change has begun with another byte than an own byte's.
    kept: bool,
}

/// The branch of a key relative to a root with no own byte.
fn branch(key: &[u8]) -> usize {
    key.first().map_or(256, |&b| usize::from(b))
}

impl LeadKeeper {
    /// The lead of the image's root and its branches, read from its root record.
    pub(super) fn of_image(image: &mut dyn ImageBody) -> Result<LeadKeeper> {
        let pos = image.root_offset();
        let shape = with_record(image, pos, |record, _| {
            let mut branches = [0u64; 5];
            let mut add = |b: usize| branches[b / 64] |= 1 << (b % 64);
            let lead = match record {
                Record::Leaf { suffix, .. } => {
                    if suffix.is_empty() {
                        add(256);
                    }
                    suffix.first().copied()
                }
                Record::Inner { prefix, has_terminal, keys, .. } => {
                    if prefix.is_empty() {
                        keys.iter().for_each(|b| add(usize::from(b)));
                        if has_terminal {
                            add(256);
                        }
                    }
                    prefix.first().copied()
                }
                Record::Link { .. } => return None,
            };
            Some((lead, branches))
        })?;
        match shape {
            Some((lead, branches)) => Ok(LeadKeeper { lead, branches, deleted: [0; 5], kept: true }),
            None => Err(image.corruption(FRAME_HEADER_LEN + pos, "the frame's root is a link".into())),
        }
    }

    /// The lead of the image's root.
    pub(super) fn image_lead(&self) -> Option<u8> {
        self.lead
    }

    /// Counts a put (`put`) or delete of `key`.
    pub(super) fn change(&mut self, key: &[u8], put: bool) {
        match self.lead {
            Some(lead) => self.kept &= key.first() == Some(&lead),
            None if put => {}
            None => {
                let b = branch(key);
                self.deleted[b / 64] |= 1 << (b % 64);
            }
        }
    }

    /// Whether the changes counted keep the image's lead.
    pub(super) fn kept(&self) -> bool {
        let untouched: u32 =
            self.branches.iter().zip(&self.deleted).map(|(b, d)| (b & !d).count_ones()).sum();
        self.kept && (self.lead.is_some() || self.deleted == [0; 5] || untouched >= 2)
    }
}

/// The most a new key of `key_len` bytes (relative to its frame) with a `value_len`-byte
/// value grows its frame's encoding by: its leaf at the widest version, and the inner record
/// where it branches off (a prefix or a leaf's suffix split in two, whose bytes are carved
/// from the old ones), with a byte each for the varints that may lengthen (the split
/// prefix's length, a child count reaching 128).
pub(crate) fn new_key_growth(key_len: usize, value_len: usize) -> usize {
    use crate::format::node::{inner_len, leaf_len, InnerKind};
    leaf_len(key_len, value_len, u64::MAX) + inner_len(InnerKind::N4, 0, 2, true) + 2
}

/// What an evicted frame's image and `deltas` tell without decoding: the `LeadKeeper` with
/// every delta entry counted, and an upper bound of the frame's encoded size with no write
/// recorded. Each put a delta holds is counted as a new key at its widest (`new_key_growth`),
/// as a recorded write is, so the size stays an upper bound (`FrameCell::record_unloaded`).
pub(super) fn image_and_deltas(
    image: &mut dyn ImageBody,
    deltas: &[DeltaRef<'_>],
) -> Result<(LeadKeeper, usize)> {
    let mut keeper = LeadKeeper::of_image(image)?;
    let mut size = frame::HEADER_LEN + image.body_len();
    for delta in deltas {
        for entry in delta.entries()? {
            keeper.change(entry.key(), matches!(entry, DeltaEntry::Put { .. }));
            if let DeltaEntry::Put { key, value, .. } = entry {
                size += new_key_growth(key.len(), value.len());
            }
        }
    }
    Ok((keeper, size))
}

/// A record of a frame's image copied out of its pages, for a walk that reads more records
/// while it still needs this one.
///
/// An inner record's parts are inline up to a node of 16 children with a 24-byte prefix:
/// three heap allocations per record were a tenth of a rolled-up listing of evicted frames,
/// which reads the inner records above every common prefix it rolls up.
pub(super) enum OwnedRecord {
    Leaf(Leaf),
    Link(FrameId),
    Inner {
        kind: crate::format::node::InnerKind,
        prefix: smallvec::SmallVec<[u8; 24]>,
        has_terminal: bool,
        keys: smallvec::SmallVec<[u8; 16]>,
        /// Back distances: the terminal's first (if any), then the children's in key order.
        distances: smallvec::SmallVec<[usize; 17]>,
    },
}

/// The record at body offset `pos` of a frame's image, fetched and copied out.
pub(super) fn read_record(image: &mut dyn ImageBody, pos: usize, weigh: Weigh) -> Result<OwnedRecord> {
    with_record(image, pos, |record, _| match record {
        Record::Leaf { suffix, value, version } => {
            OwnedRecord::Leaf(Leaf::new(suffix, value, version, weigh(value)))
        }
        Record::Link { frame } => OwnedRecord::Link(FrameId(frame)),
        Record::Inner { kind, prefix, has_terminal, child_count, keys, distances } => OwnedRecord::Inner {
            kind,
            prefix: prefix.into(),
            has_terminal,
            keys: keys.iter().collect(),
            distances: (0..child_count + usize::from(has_terminal)).map_while(|i| distances.get(i)).collect(),
        },
    })
}

/// How many bytes from body offset `pos` hold the whole record there: fetched until it
/// parses or the body ends (bound: the fetch grows each time).
fn fetch_record(image: &mut dyn ImageBody, pos: usize) -> Result<usize> {
    let body_len = image.body_len();
    let mut want = RECORD_GUESS_BYTES;
    loop {
        let bytes = image.bytes_at(pos, want)?;
        let fetched = bytes.len();
        match RecordReader::window(bytes, pos).next_record() {
            Ok(_) => return Ok(want),
            Err(_) if pos + fetched < body_len => want = fetched + frame::PAGE_BYTES,
            Err(e) => return Err(image.corruption(FRAME_HEADER_LEN + e.offset, e.reason)),
        }
    }
}

/// `f` applied to the record at body offset `pos` (and the reader, positioned after it),
/// parsed once: from the first `RECORD_GUESS_BYTES` fetched when they hold it (nearly every
/// record), else after `fetch_record` found how many bytes it needs. A record that cannot be
/// parsed is a corruption error naming where.
fn with_record<R>(
    image: &mut dyn ImageBody,
    pos: usize,
    f: impl FnOnce(Record<'_>, &RecordReader<'_>) -> R,
) -> Result<R> {
    let body_len = image.body_len();
    let bytes = image.bytes_at(pos, RECORD_GUESS_BYTES)?;
    let fetched = bytes.len();
    let mut reader = RecordReader::window(bytes, pos);
    match reader.next_record() {
        Ok(record) => return Ok(f(record, &reader)),
        Err(_) if pos + fetched < body_len => {}
        Err(e) => return Err(image.corruption(FRAME_HEADER_LEN + e.offset, e.reason)),
    }
    let want = fetch_record(image, pos)?;
    let bytes = image.bytes_at(pos, want)?;
    let mut reader = RecordReader::window(bytes, pos);
    match reader.next_record() {
        Ok(record) => Ok(f(record, &reader)),
        Err(e) => Err(image.corruption(FRAME_HEADER_LEN + e.offset, e.reason)),
    }
}

/// `walk_image` over the image alone.
fn walk_pages(image: &mut dyn ImageBody, key: &[u8], mut depth: usize) -> Result<ImageWalk> {
    /// What one record tells the walk.
    enum Step {
        Done(ImageWalk),
        /// Down to the record `back` bytes before this one, the key consumed to `depth`;
        /// `terminal` when that record must be the terminal leaf of the key.
        Down {
            back: usize,
            depth: usize,
            terminal: bool,
        },
        Corrupt(&'static str),
    }
    let root_offset = image.root_offset();
    let mut pos = root_offset;
    let mut at_terminal = false;
    // Bound: `pos` strictly decreases at every step (the reader rejects back distances that
    // do not point before their record).
    loop {
        let rest = key.get(depth..).unwrap_or_default();
        let step = with_record(image, pos, |record, _| match record {
            _ if at_terminal && !matches!(record, Record::Leaf { .. }) => {
                Step::Corrupt("terminal is not a leaf")
            }
            Record::Leaf { suffix, value, version } => Step::Done(if suffix == rest {
                ImageWalk::Found { value: value.to_vec(), version }
            } else {
                ImageWalk::Missing
            }),
            // A frame's root is never a link: links as roots could chain frames without the
            // key getting any deeper, so a corrupt pair of frames could send lookups in circles.
            Record::Link { .. } if pos == root_offset => Step::Corrupt("the frame's root is a link"),
            Record::Link { frame } => Step::Done(ImageWalk::Link { frame: FrameId(frame), depth }),
            Record::Inner { prefix, has_terminal, keys, distances, .. } => {
                if !rest.starts_with(prefix) {
                    return Step::Done(ImageWalk::Missing);
                }
                let depth = depth + prefix.len();
                let (index, depth, terminal) = match key.get(depth) {
                    None if has_terminal => (0, depth, true),
                    None => return Step::Done(ImageWalk::Missing),
                    Some(&b) => match keys.index_of(b) {
                        Some(i) => (i + usize::from(has_terminal), depth + 1, false),
                        None => return Step::Done(ImageWalk::Missing),
                    },
                };
                match distances.get(index) {
                    Some(back) => Step::Down { back, depth, terminal },
                    None => Step::Corrupt("missing back distance"),
                }
            }
        })?;
        match step {
            Step::Done(walk) => return Ok(walk),
            Step::Down { back, depth: next, terminal } => {
                pos -= back;
                depth = next;
                at_terminal = terminal;
            }
            Step::Corrupt(reason) => return Err(image.corruption(FRAME_HEADER_LEN + pos, reason.into())),
        }
    }
}

/// A frame image held whole in memory (verified when wrapped), walked like a paged one.
#[cfg(test)]
pub(super) struct WholeImage<'a> {
    body: &'a [u8],
    root_offset: usize,
    records: usize,
    id: FrameId,
    location: &'a (PathBuf, u64),
}

#[cfg(test)]
impl<'a> WholeImage<'a> {
    /// Verifies the image of frame `id` (header, page table, every page).
    pub(super) fn open(bytes: &'a [u8], id: FrameId, location: &'a (PathBuf, u64)) -> Result<WholeImage<'a>> {
        let view = frame::open(bytes, id).map_err(|e| corruption(location, id, e.offset, e.reason))?;
        let records = view.node_count as usize;
        Ok(WholeImage { body: view.body, root_offset: view.root_offset, records, id, location })
    }
}

#[cfg(test)]
impl ImageBody for WholeImage<'_> {
    fn root_offset(&self) -> usize {
        self.root_offset
    }
    fn body_len(&self) -> usize {
        self.body.len()
    }
    fn record_count(&self) -> usize {
        self.records
    }
    fn bytes_at(&mut self, pos: usize, _len: usize) -> Result<&[u8]> {
        match self.body.get(pos..) {
            Some(rest) if !rest.is_empty() => Ok(rest),
            _ => Err(self.corruption(FRAME_HEADER_LEN + pos, "a record lies outside the body".into())),
        }
    }
    fn corruption(&self, offset: usize, reason: String) -> Error {
        corruption(self.location, self.id, offset, reason)
    }
    fn location(&self) -> &(PathBuf, u64) {
        self.location
    }
    fn id(&self) -> FrameId {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Op;
    use crate::tree::node::no_weight;

    /// The example in docs/format.md, byte for byte, and a walk of it.
    #[test]
    fn encodes_the_documented_example() {
        let tree = Tree::new(super::super::FRAME_BUDGET_BYTES, usize::MAX, None);
        let put =
            |key: &'static [u8], value: &'static [u8]| Op::Put { key, value, condition: Default::default() };
        tree.replay(&[put(b"ab", b"x")], 5).unwrap();
        tree.replay(&[put(b"ac", b"y")], 6).unwrap();
        let root = tree.load_root(&tree.root).unwrap();
        let image = encode_frame(FrameId::ROOT, &root).unwrap();
        let view = frame::open(&image, FrameId::ROOT).unwrap();
        let expected: &[u8] = &[
            0x01, 0x00, 0x01, 0x78, 0x05, // leaf at 0
            0x01, 0x00, 0x01, 0x79, 0x06, // leaf at 5
            0x10, 0x01, 0x61, 0x02, 0x62, 0x63, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x00, // inner at 10
        ];
        assert_eq!((view.body, view.node_count, view.root_offset), (expected, 3, 10));
        let at = (PathBuf::from("<test>"), 0);
        let found = |key: &[u8]| match walk_image(
            &mut WholeImage::open(&image, FrameId::ROOT, &at).unwrap(),
            &[],
            key,
            0,
        )
        .unwrap()
        {
            ImageWalk::Found { value, version } => Some((value, version)),
            ImageWalk::Missing => None,
            ImageWalk::Link { .. } => panic!("no links here"),
        };
        assert_eq!(found(b"ab"), Some((b"x".to_vec(), 5)));
        assert_eq!(found(b"ac"), Some((b"y".to_vec(), 6)));
        assert_eq!((found(b"a"), found(b"ad"), found(b"abc"), found(b"b")), (None, None, None, None));
    }

    /// What keeps a frame's lead (`LeadKeeper`): changes under a root's own byte keep it,
    /// one under another byte does not; a root with no own byte keeps none under puts, and
    /// under deletes while two of its branches are untouched.
    #[test]
    fn a_lead_is_kept_by_the_changes_that_cannot_change_it() {
        let at = (PathBuf::from("<test>"), 0);
        let kept = |keys: &[&'static [u8]], changes: &[(&[u8], bool)]| {
            let tree = Tree::new(super::super::FRAME_BUDGET_BYTES, usize::MAX, None);
            for (n, &key) in keys.iter().enumerate() {
                tree.replay(&[Op::Put { key, value: b"v", condition: Default::default() }], n as u64 + 1)
                    .unwrap();
            }
            let image = encode_frame(FrameId::ROOT, &tree.load_root(&tree.root).unwrap()).unwrap();
            let mut keeper =
                LeadKeeper::of_image(&mut WholeImage::open(&image, FrameId::ROOT, &at).unwrap()).unwrap();
            for &(key, put) in changes {
                keeper.change(key, put);
            }
            (keeper.image_lead(), keeper.kept())
        };
        let own: &[&[u8]] = &[b"ab", b"ac"];
        assert_eq!(kept(own, &[(b"ax", true), (b"ab", false)]), (Some(b'a'), true));
        assert_eq!(kept(own, &[(b"bx", true)]), (Some(b'a'), false));
        assert_eq!(kept(own, &[(b"", false)]), (Some(b'a'), false));
        let branching: &[&[u8]] = &[b"a1", b"a2", b"b1", b"c1"];
        assert_eq!(kept(branching, &[]), (None, true));
        assert_eq!(kept(branching, &[(b"d1", true), (b"a3", true)]), (None, true));
        assert_eq!(kept(branching, &[(b"a1", false), (b"a2", false), (b"a9", false)]), (None, true));
        assert_eq!(kept(branching, &[(b"a1", false), (b"b1", false)]), (None, false));
        assert_eq!(kept(branching, &[(b"d1", true), (b"a1", false), (b"d1", false)]), (None, true));
        // Only the image's branches count: one a put added may be deleted again.
        assert_eq!(kept(branching, &[(b"d1", true), (b"a1", false), (b"b1", false)]), (None, false));
        let two: &[&[u8]] = &[b"a", b"ab", b"b"];
        assert_eq!(kept(two, &[(b"c", true), (b"ab", false)]), (None, false));
    }

    /// `new_key_growth` bounds what a new key adds to a frame's encoding: keys from a small
    /// alphabet (prefixes of each other, short suffixes, branches at the root), versions past
    /// 2^14 and 2^56, every key added to every tree of a few hundred.
    #[test]
    fn a_new_key_grows_its_frame_by_at_most_the_bound() {
        use rand::{Rng, SeedableRng};
        let atoms: [&[u8]; 5] = [b"a", b"b", b"x", b"/", b"ab"];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let key = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            (0..rng.gen_range(1..5)).flat_map(|_| atoms[rng.gen_range(0..atoms.len())].to_vec()).collect()
        };
        for _ in 0..300 {
            let tree = Tree::new(super::super::FRAME_BUDGET_BYTES, usize::MAX, None);
            let mut held = std::collections::BTreeSet::new();
            for _ in 0..rng.gen_range(1..12) {
                let k = key(&mut rng);
                let version = [3, 1 << 14, 1 << 56][rng.gen_range(0..3)];
                tree.replay(&[Op::Put { key: &k, value: b"v", condition: Default::default() }], version)
                    .unwrap();
                held.insert(k);
            }
            let before = super::super::split::frame_size(&tree.load_root(&tree.root).unwrap()).encoded;
            for _ in 0..20 {
                let k = key(&mut rng);
                if held.contains(&k) {
                    continue;
                }
                let value = vec![b'w'; rng.gen_range(0..3)];
                let grown = Tree::new(super::super::FRAME_BUDGET_BYTES, usize::MAX, None);
                for (n, held) in held.iter().enumerate() {
                    let op = Op::Put { key: held, value: b"v", condition: Default::default() };
                    grown.replay(&[op], tree.get(held).unwrap().map_or(n as u64, |e| e.version.0)).unwrap();
                }
                grown
                    .replay(
                        &[Op::Put { key: &k, value: &value, condition: Default::default() }],
                        u64::MAX >> 1,
                    )
                    .unwrap();
                let after = super::super::split::frame_size(&grown.load_root(&grown.root).unwrap()).encoded;
                let growth = after as isize - before as isize;
                let bound = new_key_growth(k.len(), value.len()) as isize;
                assert!(
                    growth <= bound,
                    "adding {k:?} to {held:?} grew the frame by {growth} B, bound {bound}"
                );
            }
        }
    }

    /// A frame whose root is a link is corruption for the decoder and for a point lookup
    /// (two such frames linking to each other would otherwise send lookups in circles).
    #[test]
    fn a_link_as_a_frame_root_is_corruption() {
        let tree = Tree::new(super::super::FRAME_BUDGET_BYTES, usize::MAX, None);
        let mut image = frame::start_frame(4096);
        write_link(&mut image, 7);
        frame::seal(&mut image, FrameId(5), 1, 0).unwrap();
        let at = (PathBuf::from("<test>"), 0);
        let decoded = decode_frame(&image, FrameId(5), &at, no_weight, |_| Some(Arc::clone(&tree.root)));
        assert!(matches!(decoded, Err(Error::Corruption { .. })));
        let walked =
            WholeImage::open(&image, FrameId(5), &at).and_then(|mut i| walk_image(&mut i, &[], b"key", 0));
        assert!(matches!(walked, Err(Error::Corruption { .. })));
    }

    /// A checksum-valid frame holding a chain of `depth` inner nodes, each with a terminal
    /// and one child (`a`), ending in a leaf: written in the order the encoder writes
    /// (every terminal before the subtree below it, each inner node after both).
    fn chain_image(depth: usize) -> Vec<u8> {
        use crate::format::node::InnerKind;
        let mut image = frame::start_frame(FRAME_SIZE);
        let body_at = |image: &Vec<u8>| image.len() - FRAME_HEADER_LEN;
        let mut terminals = Vec::with_capacity(depth);
        for _ in 0..depth {
            terminals.push(body_at(&image));
            write_leaf(&mut image, &[], b"t", 1);
        }
        let mut below = body_at(&image);
        write_leaf(&mut image, &[], b"v", 1);
        for &terminal in terminals.iter().rev() {
            let at = body_at(&image);
            write_inner(
                &mut image,
                InnerKind::N4,
                &[],
                true,
                1,
                [b'a'].into_iter(),
                &[at - terminal, at - below],
            );
            below = at;
        }
        frame::seal(&mut image, FrameId(5), (2 * depth + 1) as u32, below).unwrap();
        image
    }

    /// A frame nested deeper than any key can reach is refused as corruption (naming the
    /// record), before its nodes are built: the listing walk and `Drop` recurse over them.
    /// A frame exactly as deep as the longest key still decodes.
    #[test]
    fn a_frame_nested_deeper_than_a_key_is_corruption() {
        let tree = Tree::new(super::super::FRAME_BUDGET_BYTES, usize::MAX, None);
        let at = (PathBuf::from("<test>"), 0);
        let deepest = chain_image(usize::from(FRAME_DEPTH_MAX));
        assert!(decode_frame(&deepest, FrameId(5), &at, no_weight, |_| Some(Arc::clone(&tree.root))).is_ok());
        let image = chain_image(20_000);
        match decode_frame(&image, FrameId(5), &at, no_weight, |_| Some(Arc::clone(&tree.root))) {
            Err(Error::Corruption { reason, location }) => {
                assert!(reason.contains("nest deeper than"), "{reason}");
                assert_eq!(location.frame, Some(5));
            }
            other => panic!("a 20,000-deep frame decoded: {:?}", other.map(|_| ())),
        }
    }
}

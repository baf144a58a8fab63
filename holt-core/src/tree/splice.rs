//! A frame's new image from its image on disk and a batch of changes to its keys, without
//! decoding the frame: what a checkpoint writes for an evicted frame whose deltas can no
//! longer stand in for it.
//!
//! A subtree's records are contiguous in the body and end with its top record (post order),
//! and back distances are relative to the record that holds them: a subtree's bytes read
//! the same anywhere in a body. So the subtrees no change reaches are copied as they are,
//! runs of siblings at once, and only the inner records on the changed keys' paths are
//! written again, with their new distances. Where a change reshapes a node (a key leaving a
//! compressed prefix, a leaf becoming an inner node, a node emptied or left with one child
//! to fold), that node's subtree alone is decoded, changed by the one-key writers and
//! encoded. Decoding a whole frame into nodes, changing it and encoding it took most of a
//! checkpoint that rewrote thousands of evicted frames.

use std::path::PathBuf;
use std::sync::Arc;

use smallvec::SmallVec;

use super::codec::{decode_records, encode_records, seal_frame};
use super::node::{next_kind, Cell, Inner, Node, Weigh};
use super::write::{self, Entry, BATCH_DEPTH_MAX};
use crate::buffer::corruption_at as corruption;
use crate::error::{Error, Result};
use crate::format::frame::{self, FRAME_HEADER_LEN};
use crate::format::node::{write_inner, write_leaf, Record, RecordReader};
use crate::format::{FrameId, FRAME_SIZE};

/// Frame `id`'s image with `entries` applied (keys relative to the frame, ascending and
/// distinct, each with the state it ends in: `write::apply_sorted`'s batch). `bytes` is the
/// frame's image as stored (verified here), `location` names it in errors; links met in a
/// subtree that is rebuilt resolve through `resolve`. The image holds the same keys, values
/// and versions as the frame decoded, changed by `write::apply_sorted` and encoded.
pub(super) fn rewrite_frame(
    bytes: &[u8],
    id: FrameId,
    location: &(PathBuf, u64),
    entries: &[Entry<'_>],
    weigh: Weigh,
    resolve: impl FnMut(FrameId) -> Option<Arc<Cell>>,
) -> Result<Vec<u8>> {
    let fail = |offset: usize, reason: String| corruption(location, id, offset, reason);
    let view = frame::open(bytes, id).map_err(|e| fail(e.offset, e.reason))?;
    let mut splicer = Splicer {
        body: view.body,
        out: frame::start_frame(FRAME_SIZE),
        replaced: 0,
        written: 0,
        fail: &fail,
        weigh,
        resolve,
    };
    let root = match splicer.splice(view.root_offset, 0, entries, 0)? {
        Some(top) => top,
        // An emptied frame is an empty root, as `write::apply_sorted` leaves it.
        None => splicer.encode(&Node::Inner(Inner::empty())),
    };
    let Splicer { mut out, replaced, written, .. } = splicer;
    let count = (u64::from(view.node_count) + written)
        .checked_sub(replaced)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            fail(0, format!("the header counts {} records, fewer than replaced", view.node_count))
        })?;
    seal_frame(&mut out, id, count, root)?;
    Ok(out)
}

struct Splicer<'a, R> {
    /// The old image's body.
    body: &'a [u8],
    /// The new image: header, then the records written so far.
    out: Vec<u8>,
    /// Records of the old body left out of the new one, and records written anew (copied
    /// records are neither): the new record count is the old one plus the difference.
    replaced: u64,
    written: u64,
    fail: &'a dyn Fn(usize, String) -> Error,
    weigh: Weigh,
    resolve: R,
}

impl<'a, R: FnMut(FrameId) -> Option<Arc<Cell>>> Splicer<'a, R> {
    /// The body offset the next record written takes.
    fn position(&self) -> usize {
        self.out.len() - FRAME_HEADER_LEN
    }

    /// The record at old body offset `at`, and the offset just past it.
    fn record_at(&self, at: usize) -> Result<(Record<'a>, usize)> {
        let body: &'a [u8] = self.body;
        let window = body
            .get(at..)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| (self.fail)(FRAME_HEADER_LEN + at, "a back distance leaves the body".into()))?;
        let mut reader = RecordReader::window(window, at);
        let record = reader.next_record().map_err(|e| (self.fail)(FRAME_HEADER_LEN + e.offset, e.reason))?;
        Ok((record, at + reader.position()))
    }

    /// The old body offset of the first record of the subtree whose top record is at `top`:
    /// each inner record's first back distance leads to the first record it pops.
    fn subtree_start(&self, top: usize) -> Result<usize> {
        let mut at = top;
        // Bound: distances are at least 1, so `at` falls every step.
        loop {
            match self.record_at(at)?.0 {
                Record::Inner { distances, .. } => match distances.get(0) {
                    Some(back) => {
                        at = at.checked_sub(back).ok_or_else(|| {
                            (self.fail)(FRAME_HEADER_LEN + at, "a back distance leaves the body".into())
                        })?
                    }
                    None => return Ok(at),
                },
                _ => return Ok(at),
            }
        }
    }

    /// Copies the old records `from..to` (whole subtrees); returns where they begin now.
    fn copy(&mut self, from: usize, to: usize) -> Result<usize> {
        let bytes = self
            .body
            .get(from..to)
            .ok_or_else(|| (self.fail)(FRAME_HEADER_LEN + from, "a subtree runs past the body".into()))?;
        let at = self.position();
        self.out.extend_from_slice(bytes);
        Ok(at)
    }

    /// Copies the untouched subtrees `run` (child byte and old top offset; consecutive
    /// siblings, so their records are contiguous) in one piece, adding each child's byte and
    /// new top offset to `keys` and `pops`.
    fn copy_run(&mut self, run: &mut Vec<(u8, usize)>, keys: &mut Vec<u8>, pops: &mut Pops) -> Result<()> {
        let (Some(&(_, first)), Some(&(_, last))) = (run.first(), run.last()) else { return Ok(()) };
        let from = self.subtree_start(first)?;
        let to = self.record_at(last)?.1;
        let at = self.copy(from, to)?;
        for (b, top) in run.drain(..) {
            if !(from..to).contains(&top) {
                return Err((self.fail)(
                    FRAME_HEADER_LEN + top,
                    "sibling subtrees are not contiguous".into(),
                ));
            }
            keys.push(b);
            pops.push(at + (top - from));
        }
        Ok(())
    }

    /// Appends the records of `node`'s subtree; returns its top record's offset.
    fn encode(&mut self, node: &Node) -> usize {
        let (count, top) = encode_records(&mut self.out, node);
        self.written += u64::from(count);
        top
    }

    /// Writes the subtree whose top record is at old offset `top` (keys enter it at
    /// `depth`) with `entries` applied; returns its top record's new offset, `None` if it
    /// ended empty. `level`: inner records rewritten above this one.
    fn splice(
        &mut self,
        top: usize,
        depth: usize,
        entries: &[Entry<'_>],
        level: usize,
    ) -> Result<Option<usize>> {
        let (record, _) = self.record_at(top)?;
        let Record::Inner { kind, prefix, has_terminal, child_count, keys, distances } = record else {
            return self.rebuild(top, depth, entries, level);
        };
        if level >= BATCH_DEPTH_MAX || child_count == 0 {
            return self.rebuild(top, depth, entries, level);
        }
        // A put that leaves the compressed prefix splits it: rebuilt.
        let Some(entries) = write::within_prefix(entries, depth, prefix) else {
            return self.rebuild(top, depth, entries, level);
        };
        let entries = &entries[..];
        let mark = (self.out.len(), self.replaced, self.written);
        let at = depth + prefix.len();
        let fail = self.fail;
        let popped = |i: usize| {
            distances
                .get(i)
                .and_then(|back| top.checked_sub(back))
                .ok_or_else(|| fail(FRAME_HEADER_LEN + top, "a back distance leaves the body".into()))
        };
        // The new record's pops (terminal first, then children) and child bytes.
        let mut pops = Pops::new();
        let mut new_keys: Vec<u8> = Vec::with_capacity(child_count + entries.len());
        // The key ending at this node sorts first (every other one continues past it).
        let (terminal, below) = match entries.split_first() {
            Some((&(key, state), rest)) if key.len() == at => (Some(state), rest),
            _ => (None, entries),
        };
        let has_terminal_now = match terminal {
            Some(Some((value, version, _))) => {
                pops.push(self.position());
                write_leaf(&mut self.out, &[], value, version);
                self.written += 1;
                self.replaced += u64::from(has_terminal);
                true
            }
            Some(None) => {
                self.replaced += u64::from(has_terminal);
                false
            }
            None if has_terminal => {
                let old = popped(0)?;
                let end = self.record_at(old)?.1;
                pops.push(self.copy(old, end)?);
                true
            }
            None => false,
        };
        let first_child = usize::from(has_terminal);
        let mut old_children = keys.iter().enumerate().peekable();
        let mut run: Vec<(u8, usize)> = Vec::new();
        let mut rest = below;
        while let Some((b, group)) = write::next_group(&mut rest, at)? {
            while let Some((i, c)) = old_children.next_if(|&(_, c)| c < b) {
                run.push((c, popped(first_child + i)?));
            }
            self.copy_run(&mut run, &mut new_keys, &mut pops)?;
            let written = match old_children.next_if(|&(_, c)| c == b) {
                Some((i, _)) => self.splice(popped(first_child + i)?, at + 1, group, level + 1)?,
                None => write::apply_under(None, group, at + 1, level + 1)?.map(|node| self.encode(&node)),
            };
            if let Some(child) = written {
                new_keys.push(b);
                pops.push(child);
            }
        }
        for (i, c) in old_children {
            run.push((c, popped(first_child + i)?));
        }
        self.copy_run(&mut run, &mut new_keys, &mut pops)?;
        let n = new_keys.len();
        let only_child_folds =
            n == 1 && !has_terminal_now && !pops.last().is_some_and(|&p| self.written_link(p));
        if n == 0 || only_child_folds {
            // The node is reshaped (`write::normalize`): rebuilt from its records instead.
            self.out.truncate(mark.0);
            (self.replaced, self.written) = (mark.1, mark.2);
            return self.rebuild(top, depth, entries, level);
        }
        let position = self.position();
        let distances: Pops = pops.iter().map(|&p| position - p).collect();
        write_inner(
            &mut self.out,
            next_kind(kind, n),
            prefix,
            has_terminal_now,
            n,
            new_keys.into_iter(),
            &distances,
        );
        self.replaced += 1;
        self.written += 1;
        Ok(Some(position))
    }

    /// Whether the record written at new body offset `at` is a link.
    fn written_link(&self, at: usize) -> bool {
        let written = self.out.get(FRAME_HEADER_LEN + at..).unwrap_or_default();
        matches!(RecordReader::new(written).next_record(), Ok(Record::Link { .. }))
    }

    /// `splice` by decoding the subtree, applying the entries to its nodes and encoding it.
    fn rebuild(
        &mut self,
        top: usize,
        depth: usize,
        entries: &[Entry<'_>],
        level: usize,
    ) -> Result<Option<usize>> {
        let (from, to) = (self.subtree_start(top)?, self.record_at(top)?.1);
        let window = self
            .body
            .get(from..to)
            .ok_or_else(|| (self.fail)(FRAME_HEADER_LEN + from, "a subtree runs past the body".into()))?;
        let decoded =
            decode_records(RecordReader::window(window, from), self.fail, self.weigh, &mut self.resolve)?;
        if decoded.first_start != top {
            return Err((self.fail)(
                FRAME_HEADER_LEN + top,
                "a subtree's records do not end with its top record".into(),
            ));
        }
        self.replaced += u64::from(decoded.records);
        Ok(write::apply_under(Some(&decoded.root), entries, depth, level)?.map(|node| self.encode(&node)))
    }
}

/// Offsets of the records an inner record pops, inline for the usual few.
type Pops = SmallVec<[usize; 16]>;

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::format::node::InnerKind;
    use crate::tree::codec::{decode_frame, encode_frame, seal_frame};
    use crate::tree::node::{no_weight, Shared};
    use crate::tree::{walk_frame, Walk};

    /// Every key of 1..=`len` bytes over `alphabet`, ascending.
    fn keys(alphabet: &[u8], len: usize) -> Vec<Vec<u8>> {
        let mut all = crate::tree::write::tests::keys(alphabet, len);
        all.sort();
        all
    }

    fn location() -> (PathBuf, u64) {
        ("frames".into(), 0)
    }

    fn decode(image: &[u8], links: &[Arc<Cell>]) -> Node {
        decode_frame(image, FrameId(3), &location(), no_weight, |id| {
            links.iter().find(|c| c.id == id).cloned()
        })
        .expect("the new image decodes")
        .0
    }

    /// A random frame over `all` (or under `under`, a child byte of the root) and a random
    /// batch of puts and deletes of keys of `all`, present and absent.
    fn case<'v>(
        rng: &mut rand::rngs::StdRng,
        all: &'v [Vec<u8>],
        values: &'v [Vec<u8>],
        case: usize,
    ) -> (Node, Vec<Entry<'v>>) {
        let fill = [0.0, 0.05, 0.3, 0.9, 1.0][case % 5];
        let mut root = Node::Inner(Inner::empty());
        for (i, key) in all.iter().enumerate() {
            if rng.gen_bool(fill) {
                root = write::put(&root, key, 0, &values[i], 1, 0).expect("put").root;
            }
        }
        let share = [0.003, 0.02, 0.1, 0.5, 1.0][(case / 5) % 5];
        let delete = [0.0, 0.3, 0.9][(case / 25) % 3];
        let mut batch = Vec::new();
        for (i, key) in all.iter().enumerate() {
            if rng.gen_bool(share) {
                let state =
                    (!rng.gen_bool(delete)).then(|| (&values[all.len() - 1 - i][..], case as u64 + 2, 0));
                batch.push((&key[..], state));
            }
        }
        (root, batch)
    }

    /// The spliced image is the image of the frame decoded, changed by the batch writer and
    /// encoded, byte for byte (so it holds the same keys, values and versions, its record
    /// count and distances pass the decoder's checks, and its node layouts are the ones the
    /// nodes would have had): random frames of short keys (prefixes of each other, keys
    /// ending inside compressed prefixes, terminals, nodes of every layout) and random
    /// batches, from a key or two to every key, up to emptying the frame.
    #[test]
    fn a_spliced_image_is_the_changed_frame_encoded() {
        let all = keys(b"ab/\0", 4);
        let values: Vec<Vec<u8>> = (0..all.len()).map(|i| vec![i as u8; i % 7]).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5911CE);
        for n in 0..300 {
            let (root, batch) = case(&mut rng, &all, &values, n);
            let image = encode_frame(FrameId(3), &root).expect("encode");
            let stored = decode(&image, &[]);
            let want = encode_frame(FrameId(3), &write::apply_sorted(&stored, &batch).expect("batch"))
                .expect("encode");
            let got =
                rewrite_frame(&image, FrameId(3), &location(), &batch, no_weight, |_| None).expect("splice");
            if got != want {
                let (got, want) = (decode(&got, &[]), decode(&want, &[]));
                for key in &all {
                    let state = |root: &Node| match walk_frame(root, key, 0) {
                        Walk::Here(leaf) => leaf.map(|l| (l.value().to_vec(), l.version())),
                        Walk::Link(..) => unreachable!("no links here"),
                    };
                    assert_eq!(state(&got), state(&want), "case {n}, key {key:?}");
                }
                panic!("case {n}: the same keys, another image");
            }
        }
    }

    /// Wide nodes (N48 and N256 layouts, grown and shrunk by the batch) and a link to another
    /// frame: the link's record is copied while no key of the batch reaches it, and a batch
    /// that reaches it is refused, not written into the frame.
    #[test]
    fn wide_nodes_and_links_splice() {
        let mut all: Vec<Vec<u8>> =
            (0..=255u8).flat_map(|b| [vec![b'k', b], vec![b'k', b, b'/', b]]).collect();
        all.sort();
        let values: Vec<Vec<u8>> = (0..all.len()).map(|i| vec![7; i % 5]).collect();
        let link = Arc::new(Cell::evicted(FrameId(9)));
        let links = [Arc::clone(&link)];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x11AC);
        let mut kinds = Vec::new();
        for n in 0..150 {
            let (inside, batch) = case(&mut rng, &all, &values, n);
            if inside.is_empty() {
                continue;
            }
            if let Node::Inner(inner) = &inside {
                kinds.push(inner.kind());
            }
            // The root: the random subtree (every key begins with `k`) beside a link at `z`.
            let children = vec![(b'k', strip_first(&inside)), (b'z', Node::Link(Arc::clone(&link)))];
            let root = Node::Inner(Inner::new(&[], None, InnerKind::N4, children));
            let image = encode_frame(FrameId(3), &root).expect("encode");
            let resolve = |id: FrameId| links.iter().find(|c| c.id == id).cloned();
            let stored = decode(&image, &links);
            let want = encode_frame(FrameId(3), &write::apply_sorted(&stored, &batch).expect("batch"))
                .expect("encode");
            let got =
                rewrite_frame(&image, FrameId(3), &location(), &batch, no_weight, resolve).expect("splice");
            assert!(got == want, "case {n}: another image");
            // A key through the link is refused, alone or beside keys of the frame.
            let through: [Entry<'_>; 2] = [(b"k\x00", None), (b"zz", Some((b"v", 1, 0)))];
            for batch in [&through[1..], &through[..]] {
                match rewrite_frame(&image, FrameId(3), &location(), batch, no_weight, resolve) {
                    Err(Error::Corruption { reason, .. }) if reason.contains("link") => {}
                    other => panic!("case {n}: a write through a link: {:?}", other.map(|i| i.len())),
                }
            }
        }
        assert!(kinds.contains(&InnerKind::N256) && kinds.contains(&InnerKind::N48), "{kinds:?}");
    }

    /// `node` (whose keys all begin with the same byte, in its own bytes) as a child under
    /// that byte: its own bytes without the first.
    fn strip_first(node: &Node) -> Node {
        match node {
            Node::Leaf(leaf) => Node::Leaf(Shared::new(leaf.with_suffix(&leaf.suffix()[1..]))),
            Node::Inner(inner) => Node::Inner(inner.with_prefix(&inner.prefix()[1..])),
            Node::Link(_) => unreachable!("no links inside"),
        }
    }

    /// Every key of 1..=`len` bytes over `alphabet`, and the image of a frame holding them.
    fn image_of_every_key(alphabet: &[u8], len: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
        let all = keys(alphabet, len);
        let mut root = Node::Inner(Inner::empty());
        for key in &all {
            root = write::put(&root, key, 0, b"value", 1, 0).expect("put").root;
        }
        let image = encode_frame(FrameId(3), &root).expect("encode");
        (all, image)
    }

    /// An image whose checksums hold but whose records do not (a back distance in a subtree
    /// the batch leaves alone, off by one) is never a panic, and never a new image that
    /// reads (the splicer may copy such a subtree without reading it; the next read of the
    /// image refuses it).
    #[test]
    fn records_broken_under_a_valid_checksum_are_not_passed_on() {
        let (all, image) = image_of_every_key(b"ab/", 4);
        let view = frame::open(&image, FrameId(3)).expect("open");
        // The first inner record of the body: deep under the first key's path.
        let mut reader = RecordReader::new(view.body);
        let (mut at, mut end) = (0, 0);
        while !reader.is_at_end() {
            at = reader.position();
            if let Record::Inner { .. } = reader.next_record().expect("record") {
                end = reader.position();
                break;
            }
        }
        assert!(end > at, "an inner record");
        let mut body = view.body.to_vec();
        // Its last back distance (u24, little-endian) one more.
        body[end - 3] = body[end - 3].wrapping_add(1);
        let mut broken = frame::start_frame(FRAME_SIZE);
        broken.extend_from_slice(&body);
        seal_frame(&mut broken, FrameId(3), view.node_count, view.root_offset).expect("seal");
        // A batch on the last keys only: the broken subtree is copied.
        let last = all.iter().max().expect("keys");
        let batch: [Entry<'_>; 1] = [(last, Some((b"new", 9, 0)))];
        match rewrite_frame(&broken, FrameId(3), &location(), &batch, no_weight, |_| None) {
            Err(_) => {}
            Ok(written) => {
                let read = decode_frame(&written, FrameId(3), &location(), no_weight, |_| None);
                assert!(read.is_err(), "a broken subtree was written into a valid image");
            }
        }
    }

    /// A corrupted image is refused with the frame named, never spliced or a panic.
    #[test]
    fn a_corrupted_image_is_refused() {
        let (_, image) = image_of_every_key(b"ab", 5);
        let batch: [Entry<'_>; 1] = [(b"ab", None)];
        // Every byte the header and page table cover (past them, zero padding nobody reads).
        for at in (0..frame::claimed_used(&image)).step_by(7) {
            let mut bad = image.clone();
            bad[at] ^= 0x10;
            match rewrite_frame(&bad, FrameId(3), &location(), &batch, no_weight, |_| None) {
                Err(Error::Corruption { .. }) => {}
                other => panic!("a flipped byte at {at}: {:?}", other.map(|image| image.len())),
            }
        }
    }
}

//! A frame's nodes to and from its on-disk bytes (`format::frame` + `format::node`).
//!
//! Encoding is a post-order walk (terminal leaf, children ascending, then the inner record);
//! decoding rebuilds nodes with a stack. Both use explicit stacks: a frame can be as deep as
//! the longest key.

use std::path::PathBuf;
use std::sync::Arc;

use super::node::{Cell, Inner, Leaf, Node};
use super::Tree;
use crate::buffer::FrameSize;
use crate::error::{Error, Location, Result};
use crate::format::frame::{self, HEADER_LEN};
use crate::format::node::{write_inner, write_leaf, write_link, Record, RecordError, RecordReader};
use crate::format::{FrameId, FRAME_SIZE};

/// Encodes the frame `id` rooted at `root` into its checksummed image: header and records,
/// zero-padded to a multiple of 4 KiB (the frame's `FRAME_SIZE` bytes minus padding).
/// Fails only if the nodes do not fit, which the split policy rules out.
pub(crate) fn encode_frame(id: FrameId, root: &Node) -> Result<Vec<u8>> {
    enum Step<'a> {
        Enter(&'a Node),
        Terminal(&'a Leaf),
        Exit(&'a Inner),
    }
    let mut buf = frame::start_frame(FRAME_SIZE);
    let mut count: u32 = 0;
    let mut stack = vec![Step::Enter(root)];
    let mut children: Vec<&Node> = Vec::new();
    while let Some(step) = stack.pop() {
        match step {
            Step::Enter(Node::Leaf(l)) => write_leaf(&mut buf, l.suffix(), l.value(), l.version()),
            Step::Enter(Node::Link(cell)) => write_link(&mut buf, cell.id.0),
            Step::Enter(Node::Inner(inner)) => {
                stack.push(Step::Exit(inner));
                children.clear();
                children.extend(inner.children().iter().map(|(_, c)| &**c));
                stack.extend(children.iter().rev().map(|c| Step::Enter(c)));
                if let Some(t) = inner.terminal() {
                    stack.push(Step::Terminal(t));
                }
                continue;
            }
            Step::Terminal(t) => write_leaf(&mut buf, &[], t.value(), t.version()),
            Step::Exit(inner) => {
                let keys = inner.children().iter().map(|(b, _)| b);
                let n = inner.children().len();
                write_inner(&mut buf, inner.kind(), inner.prefix(), inner.terminal().is_some(), n, keys);
            }
        }
        count += 1;
        if buf.len() > FRAME_SIZE {
            break;
        }
    }
    let used = buf.len();
    frame::seal(&mut buf, id, count).map_err(|_| {
        Error::InvalidArgument(format!(
            "frame {id} needs {used} bytes, more than the {FRAME_SIZE}-byte frame"
        ))
    })?;
    Ok(buf)
}

fn corruption(location: &(PathBuf, u64), id: FrameId, offset: usize, reason: String) -> Error {
    Error::Corruption {
        location: Location {
            file: location.0.clone(),
            frame: Some(id.0),
            offset: location.1 + offset as u64,
        },
        reason,
    }
}

/// A decoded record waiting for its parent: leaves stay bare until we know whether they are
/// a child or a terminal.
enum Pending {
    Leaf(Leaf),
    Node(Arc<Node>),
}

impl Pending {
    fn into_node(self) -> Arc<Node> {
        match self {
            Pending::Leaf(l) => Arc::new(Node::Leaf(l)),
            Pending::Node(n) => n,
        }
    }
}

/// Decodes a frame's bytes into its root, resolving each link through `resolve`.
/// Returns the root and the frame's encoded size. Never panics on any input.
pub(super) fn decode_frame(
    bytes: &[u8],
    id: FrameId,
    location: &(PathBuf, u64),
    mut resolve: impl FnMut(FrameId) -> Option<Arc<Cell>>,
) -> Result<(Arc<Node>, usize)> {
    let fail = |offset: usize, reason: String| corruption(location, id, offset, reason);
    let view = frame::open(bytes, id).map_err(|e: RecordError| fail(e.offset, e.reason))?;
    let mut reader = RecordReader::new(view.body);
    let mut stack: Vec<Pending> = Vec::new();
    let mut records: u32 = 0;
    while !reader.is_at_end() {
        let at = HEADER_LEN + reader.position();
        let record = reader.next_record().map_err(|e| fail(HEADER_LEN + e.offset, e.reason))?;
        records = records.saturating_add(1);
        match record {
            Record::Leaf { suffix, value, version } => {
                stack.push(Pending::Leaf(Leaf::new(suffix, value, version)))
            }
            Record::Link { frame } => {
                let cell = resolve(FrameId(frame))
                    .ok_or_else(|| fail(at, format!("link to unknown frame {frame}")))?;
                stack.push(Pending::Node(Arc::new(Node::Link(cell))));
            }
            Record::Inner { kind, prefix, has_terminal, child_count, keys } => {
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
                // Drained in place: no vector per node (allocation dominated decoding).
                let mut popped = stack.drain(stack.len() - needed..);
                let terminal = if has_terminal {
                    match popped.next() {
                        Some(Pending::Leaf(t)) if t.suffix().is_empty() => Some(Arc::new(t)),
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
                stack.push(Pending::Node(Arc::new(Node::Inner(inner))));
            }
        }
    }
    if records != view.node_count {
        return Err(fail(0, format!("header counts {} records, body holds {records}", view.node_count)));
    }
    let root = match (stack.pop(), stack.is_empty()) {
        (Some(root), true) => root.into_node(),
        _ => return Err(fail(0, format!("body does not form one tree ({} roots)", stack.len() + 1))),
    };
    Ok((root, HEADER_LEN + view.body.len()))
}

impl Tree {
    /// Decodes frame `cell` read from the source: links resolve to the live frames, and each
    /// linked frame learns `cell` is its parent.
    pub(super) fn decode_frame(
        &self,
        cell: &Arc<Cell>,
        bytes: &[u8],
        location: &(PathBuf, u64),
    ) -> Result<(Arc<Node>, FrameSize)> {
        let frames = self.frames.lock();
        let (root, encoded) = decode_frame(bytes, cell.id, location, |id| {
            // A link back to the frame itself or to the root would make a cycle.
            if id == cell.id || id == self.root.id {
                return None;
            }
            let child = frames.get(&id).cloned()?;
            child.set_parent(cell);
            Some(child)
        })?;
        drop(frames);
        // The encoded size is the decoder's (what the frame holds); the memory is measured.
        let size = FrameSize { encoded, memory: super::split::frame_size(&root).memory };
        Ok((root, size))
    }
}

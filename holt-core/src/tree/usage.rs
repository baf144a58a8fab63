//! How many keys, and how much weight, lie under a prefix (`Db::usage`).
//!
//! Two counts answer it without visiting the keys:
//! - every inner node carries its subtree's keys, weight and links *within its frame*
//!   (`Agg`), kept by the path copy of every write;
//! - every frame's cell carries the keys and weight of its whole subtree, that frame and all
//!   below it (`FrameCell::subtree_usage`): a write adds its change to its frame's cell and
//!   to every ancestor's, and the totals are stored in the manifest at each checkpoint.
//!
//! A prefix leads to one node (or to the middle of one's compressed path, or of a leaf's
//! suffix). The answer is that node's in-frame aggregates plus the subtree totals of the
//! links below it in the same frame, found through the nodes whose aggregates count links.
//! The cost is the depth of the prefix plus the links below the node in its frame, at most
//! the links one frame holds; no linked frame is read.
//!
//! **Consistency.** Totals count every write acknowledged before the call began. Writes in
//! flight may be counted in one frame and not yet in another, so under concurrent writes an
//! answer may mix states a few writes apart; without writers it is exact.

use std::sync::Arc;

use super::node::{Agg, Cell, Node, WEIGHT_MAX};
use super::Tree;
use crate::api::Usage;
use crate::error::Result;
use crate::format::FrameId;

impl Tree {
    /// Adds a write's change of `keys` and `weight` to the subtree totals of `cell` and of
    /// every frame above it. Holds the topology lock shared, so the chain of parents does not
    /// change under it (a split or merge re-parenting frames holds it exclusively).
    pub(super) fn add_subtree_usage(&self, cell: &Arc<Cell>, keys: i64, weight: i64) {
        let _topology = self.topology.read();
        cell.add_subtree_usage(keys, weight);
        let mut at = cell.parent();
        while let Some(frame) = at {
            frame.add_subtree_usage(keys, weight);
            at = frame.parent();
        }
    }

    /// The keys stored under `prefix` and the sum of their weights.
    pub(crate) fn usage(&self, prefix: &[u8]) -> Result<Usage> {
        'restart: loop {
            let mut cell = Arc::clone(&self.root);
            let mut depth = 0;
            loop {
                let root = self.walk_root(&cell)?;
                // As after any root load (the read protocol in `sync`): a frame merged away
                // since its parent was read may hold an older state.
                if cell.is_retired() {
                    continue 'restart;
                }
                match under(&root, prefix, depth) {
                    Under::Node(node) => return Ok(node_usage(node)),
                    Under::Nothing => return Ok(Usage::default()),
                    Under::Link(child, at) => {
                        let child = Arc::clone(child);
                        drop(root);
                        cell = child;
                        depth = at;
                    }
                }
            }
        }
    }

    /// The subtree totals of every live frame, for the manifest. Called by the capture, with
    /// writers held off, so the totals agree with the captured roots and the log position.
    pub(crate) fn usage_table(&self) -> Vec<(FrameId, u64, u64)> {
        let frames = self.frames.lock();
        let mut table: Vec<(FrameId, u64, u64)> = frames
            .iter()
            .map(|(id, cell)| {
                let (keys, weight) = cell.subtree_usage();
                (*id, keys, weight)
            })
            .collect();
        table.sort_unstable_by_key(|e| e.0);
        table
    }

    /// Sets the subtree totals of the frames the manifest lists; frames it does not list
    /// keep zero.
    pub(crate) fn set_usage_table(&self, table: &[(FrameId, u64, u64)]) {
        let frames = self.frames.lock();
        for (id, keys, weight) in table {
            if let Some(cell) = frames.get(id) {
                cell.set_subtree_usage((*keys, *weight));
            }
        }
    }

    /// Counts every frame's subtree totals again from its keys: for a database whose
    /// manifest holds none (written before they existed) or was weighed by another weigher.
    /// Loads every frame once (evicting as it goes). Called at open, before any writer.
    pub(crate) fn recount_usage(&self) -> Result<()> {
        // Post-order over the frame tree: a frame's total needs its children's.
        let mut order: Vec<Arc<Cell>> = Vec::new();
        let mut stack = vec![Arc::clone(&self.root)];
        while let Some(cell) = stack.pop() {
            let root = self.load_root(&cell)?;
            for_each_link(&root, &mut |child| stack.push(Arc::clone(child)));
            order.push(cell);
        }
        for cell in order.iter().rev() {
            let root = self.load_root(cell)?;
            let own = root.agg();
            let (mut keys, mut weight) = (u64::from(own.keys), own.weight);
            for_each_link(&root, &mut |child| {
                let (k, w) = child.subtree_usage();
                keys += k;
                weight = weight.wrapping_add(w);
            });
            cell.set_subtree_usage((keys, weight));
        }
        Ok(())
    }

    /// The subtree totals of every frame, counted from the keys, against the totals the
    /// frames carry: for `check_invariants`. `Err` names the first frame that differs.
    pub(super) fn check_usage(&self) -> std::result::Result<(), String> {
        let mut order: Vec<(Arc<Cell>, Node)> = Vec::new();
        let mut stack = vec![Arc::clone(&self.root)];
        while let Some(cell) = stack.pop() {
            let root = self.load_root(&cell).map_err(|e| e.to_string())?;
            for_each_link(&root, &mut |child| stack.push(Arc::clone(child)));
            order.push((cell, root));
        }
        let mut counted = std::collections::HashMap::new();
        for (cell, root) in order.iter().rev() {
            let mut keys = 0u64;
            let mut weight = 0u64;
            let mut nodes = vec![root];
            while let Some(node) = nodes.pop() {
                match node {
                    Node::Leaf(leaf) => {
                        keys += 1;
                        weight = weight.wrapping_add((self.weigh)(leaf.value()).min(WEIGHT_MAX));
                    }
                    Node::Link(child) => {
                        let (k, w): (u64, u64) = counted.get(&child.id).copied().unwrap_or_default();
                        keys += k;
                        weight = weight.wrapping_add(w);
                    }
                    Node::Inner(inner) => {
                        if let Some(t) = inner.terminal() {
                            keys += 1;
                            weight = weight.wrapping_add((self.weigh)(t.value()).min(WEIGHT_MAX));
                        }
                        nodes.extend(inner.children().iter().map(|(_, c)| c));
                    }
                }
            }
            counted.insert(cell.id, (keys, weight));
            if cell.subtree_usage() != (keys, weight) {
                return Err(format!(
                    "frame {} carries subtree totals {:?}, its keys add up to {:?}",
                    cell.id,
                    cell.subtree_usage(),
                    (keys, weight)
                ));
            }
        }
        Ok(())
    }
}

/// Where a prefix leads within one frame.
enum Under<'a> {
    /// Every key under this node starts with the prefix, and no other key does.
    Node(&'a Node),
    /// The prefix goes on into a linked frame, whose root starts at this key depth.
    Link(&'a Arc<Cell>, usize),
    /// No key starts with the prefix.
    Nothing,
}

/// Walks `prefix` from `node`, whose own bytes start at `prefix[depth..]`, within one frame.
fn under<'a>(mut node: &'a Node, prefix: &[u8], mut depth: usize) -> Under<'a> {
    loop {
        let rest = &prefix[depth..];
        match node {
            // The whole linked frame lies under the prefix once the prefix is spelled.
            Node::Link(_) if rest.is_empty() => return Under::Node(node),
            Node::Link(cell) => return Under::Link(cell, depth),
            Node::Leaf(leaf) => {
                return if leaf.suffix().starts_with(rest) { Under::Node(node) } else { Under::Nothing }
            }
            Node::Inner(inner) => {
                let own = inner.prefix();
                if rest.len() <= own.len() {
                    // The prefix ends inside (or right after) this node's compressed path.
                    return if own.starts_with(rest) { Under::Node(node) } else { Under::Nothing };
                }
                if !rest.starts_with(own) {
                    return Under::Nothing;
                }
                depth += own.len();
                match inner.children().get(prefix[depth]) {
                    Some(child) => {
                        node = child;
                        depth += 1;
                    }
                    None => return Under::Nothing,
                }
            }
        }
    }
}

/// The keys and weight under `node`: its in-frame aggregates, plus the subtree totals of the
/// frames linked below it (reached through the nodes whose aggregates count links).
fn node_usage(node: &Node) -> Usage {
    let own: Agg = node.agg();
    let mut usage = Usage { keys: u64::from(own.keys), weight: own.weight };
    let mut nodes = vec![node];
    while let Some(node) = nodes.pop() {
        match node {
            Node::Link(cell) => {
                let (keys, weight) = cell.subtree_usage();
                usage.keys += keys;
                usage.weight = usage.weight.wrapping_add(weight);
            }
            Node::Inner(inner) if inner.agg().links > 0 => {
                nodes.extend(inner.children().iter().map(|(_, c)| c).filter(|c| c.agg().links > 0));
            }
            _ => {}
        }
    }
    usage
}

/// Calls `f` on every link in `node`'s subtree (within its frame).
fn for_each_link(node: &Node, f: &mut dyn FnMut(&Arc<Cell>)) {
    let mut nodes = vec![node];
    while let Some(node) = nodes.pop() {
        match node {
            Node::Link(cell) => f(cell),
            Node::Inner(inner) if inner.agg().links > 0 => {
                nodes.extend(inner.children().iter().map(|(_, c)| c).filter(|c| c.agg().links > 0));
            }
            _ => {}
        }
    }
}

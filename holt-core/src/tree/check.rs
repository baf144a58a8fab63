//! A full structural check of the tree, for tests: every invariant stated in `node`, `split`
//! and `buffer`, verified by walking every frame.

use std::collections::HashSet;
use std::sync::Arc;

use super::node::{first_own_byte, next_kind, Node, WEIGHT_MAX};
use super::split::frame_size;
use super::Tree;
use crate::format::node::InnerKind;

impl Tree {
    /// Walks every frame; returns a description of the first broken invariant.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let registry = self.live_frames();
        // The cache counts exactly the memory of the resident frames and of the states their
        // change logs hold alone (before this walk loads any evicted one).
        let resident: usize =
            registry.values().filter(|c| c.root.load().is_some()).map(|c| c.size().memory).sum();
        let detached: usize = registry.values().map(|c| c.detached_bytes() + c.kept_delta_bytes()).sum();
        let cached = self.pool_stats().cache_bytes;
        if cached != (resident + detached) as u64 {
            return Err(format!(
                "the cache counts {cached} bytes, resident frames hold {resident}, change logs and kept deltas {detached}"
            ));
        }
        let mut reached = HashSet::new();
        let mut frames = vec![Arc::clone(&self.root)];
        let mut keys: u64 = 0;
        while let Some(cell) = frames.pop() {
            if !reached.insert(cell.id) {
                return Err(format!("frame {} reached twice", cell.id));
            }
            if cell.is_retired() {
                return Err(format!("retired frame {} is still linked", cell.id));
            }
            // Recorded before the load: loading sets it again, and an evicted frame's lead
            // must already be true (or unknown) while the frame is out.
            let recorded = cell.lead();
            let root = self.load_root(&cell).map_err(|e| e.to_string())?;
            if recorded.is_some() && recorded != first_own_byte(&root) {
                return Err(format!(
                    "frame {} recorded lead {recorded:?} while out of memory, its root begins with {:?}",
                    cell.id,
                    first_own_byte(&root)
                ));
            }
            let size = frame_size(&root);
            if size != cell.size() {
                return Err(format!("frame {} records {:?}, measures {size:?}", cell.id, cell.size()));
            }
            if size.encoded > crate::format::FRAME_SIZE {
                return Err(format!("frame {} does not fit: {} bytes", cell.id, size.encoded));
            }
            if cell.lead() != first_own_byte(&root) {
                return Err(format!(
                    "frame {} records lead {:?}, its root begins with {:?}",
                    cell.id,
                    cell.lead(),
                    first_own_byte(&root)
                ));
            }
            if matches!(&root, Node::Link(_)) {
                return Err(format!("frame {} has a link as its root", cell.id));
            }
            let mut stack: Vec<(&Node, bool)> = vec![(&root, true)];
            while let Some((node, is_root)) = stack.pop() {
                match node {
                    Node::Leaf(leaf) => {
                        keys += 1;
                        if leaf.weight() != (self.weigh)(leaf.value()).min(WEIGHT_MAX) {
                            return Err(format!("a leaf in frame {} has a stale weight", cell.id));
                        }
                    }
                    Node::Link(child) => {
                        if !registry.contains_key(&child.id) {
                            return Err(format!("link to unregistered frame {}", child.id));
                        }
                        if !child.parent().is_some_and(|p| Arc::ptr_eq(&p, &cell)) {
                            return Err(format!(
                                "frame {} does not name {} as its parent",
                                child.id, cell.id
                            ));
                        }
                        frames.push(Arc::clone(child));
                    }
                    Node::Inner(inner) => {
                        let n = inner.children().len();
                        if inner.is_empty() {
                            if !is_root || !inner.prefix().is_empty() {
                                return Err(format!("empty inner node inside frame {}", cell.id));
                            }
                            // A listing rolls subtrees up unread, so none may be empty.
                            if cell.id != self.root.id {
                                return Err(format!("frame {} is empty and still linked", cell.id));
                            }
                            continue;
                        }
                        if let Some(t) = inner.terminal() {
                            keys += 1;
                            if !t.suffix().is_empty() {
                                return Err("terminal with a suffix".into());
                            }
                        }
                        if n == 0 {
                            return Err(format!("inner node with only a terminal in frame {}", cell.id));
                        }
                        let only_child_folds = n == 1
                            && inner.terminal().is_none()
                            && inner.children().iter().all(|(_, c)| !matches!(c, Node::Link(_)));
                        if only_child_folds {
                            return Err(format!(
                                "inner node with one child left unfolded in frame {}",
                                cell.id
                            ));
                        }
                        if n > inner.kind().capacity() {
                            return Err(format!("{:?} holds {n} children", inner.kind()));
                        }
                        // A node is never smaller than its layout's shrink point.
                        if inner.kind() != InnerKind::N4 && next_kind(inner.kind(), n) != inner.kind() {
                            return Err(format!("{:?} with only {n} children", inner.kind()));
                        }
                        if let Some(x) = inner.lead() {
                            let holds = inner.children().iter().all(|(_, c)| first_own_byte(c) == Some(x));
                            if !holds {
                                return Err(format!("lead {x:#04x} wrong for a node in frame {}", cell.id));
                            }
                        }
                        let sum = inner.summed_agg();
                        if inner.agg() != sum {
                            return Err(format!(
                                "a node in frame {} records {:?}, its children hold {sum:?}",
                                cell.id,
                                inner.agg()
                            ));
                        }
                        let bytes: Vec<u8> = inner.children().iter().map(|(b, _)| b).collect();
                        if bytes.windows(2).any(|w| w[0] >= w[1]) {
                            return Err("children out of order".into());
                        }
                        stack.extend(inner.children().iter().map(|(_, c)| (c, false)));
                    }
                }
            }
        }
        let registered: HashSet<_> = registry.keys().copied().collect();
        if registered != reached {
            return Err(format!("registered frames {registered:?} differ from linked frames {reached:?}"));
        }
        if keys != self.key_count() {
            return Err(format!("counted {keys} keys, the tree says {}", self.key_count()));
        }
        self.check_usage()
    }

    /// The spelled path of every link and the depth of the frame it leads to (frame 0's
    /// children are at depth 1), in key order.
    pub(crate) fn link_paths(&self) -> crate::error::Result<Vec<(Vec<u8>, usize)>> {
        let mut links = Vec::new();
        let mut frames = vec![(Arc::clone(&self.root), Vec::new(), 0)];
        while let Some((cell, path, depth)) = frames.pop() {
            let root = self.load_root(&cell)?;
            let mut stack: Vec<(&Node, Vec<u8>)> = vec![(&root, path)];
            while let Some((node, mut path)) = stack.pop() {
                match node {
                    Node::Leaf(_) => {}
                    Node::Link(child) => {
                        links.push((path.clone(), depth + 1));
                        frames.push((Arc::clone(child), path, depth + 1));
                    }
                    Node::Inner(inner) => {
                        path.extend_from_slice(inner.prefix());
                        for (b, child) in inner.children().iter() {
                            stack.push((child, [&path[..], &[b]].concat()));
                        }
                    }
                }
            }
        }
        links.sort();
        Ok(links)
    }
}

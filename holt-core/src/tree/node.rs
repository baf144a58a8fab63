//! The nodes of the adaptive radix tree. Every node is immutable once published and shared
//! through `Arc`; a write copies the path from its frame's root to the change.
//!
//! Invariants (checked by `Tree::check_invariants` in tests):
//! - An inner node stores its whole compressed prefix (pessimistic path compression).
//! - An inner node has at least two children, or one child and a terminal, or one child that
//!   is a link (an inner node is never collapsed into another frame), except the empty root
//!   (no prefix, no children, no terminal) that stands for an empty frame. Only the root
//!   frame is ever published empty: a batch unlinks the frames it empties
//!   (`Tree::unlink_emptied`), since a listing rolls subtrees up unread and every subtree
//!   must hold a key.
//! - Child keys are distinct; small layouts keep them ascending.
//! - A leaf stores only its key's suffix below its parent's child byte.

use std::sync::Arc;

use crate::buffer::{FrameCell, FrameSize};
use crate::format::node::{inner_len, leaf_len, link_len, InnerKind};

pub(crate) type Cell = FrameCell<Node>;

/// What one node costs, its children excluded: its record's bytes in the frame and the heap
/// bytes it holds in memory (see `FrameSize`). Writes change a frame's size by differences of
/// footprints, so both parts are signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    pub encoded: isize,
    pub memory: isize,
}

impl Footprint {
    pub(crate) const ZERO: Footprint = Footprint { encoded: 0, memory: 0 };

    /// A whole frame's footprint as its size (negative parts, never reached, read as zero).
    pub(crate) fn to_size(self) -> FrameSize {
        FrameSize { encoded: self.encoded.max(0) as usize, memory: self.memory.max(0) as usize }
    }
}

impl FrameSize {
    /// This size changed by `delta`.
    pub(crate) fn grown(self, delta: Footprint) -> FrameSize {
        Footprint {
            encoded: self.encoded as isize + delta.encoded,
            memory: self.memory as isize + delta.memory,
        }
        .to_size()
    }
}

impl std::ops::Add for Footprint {
    type Output = Footprint;
    fn add(self, o: Footprint) -> Footprint {
        Footprint { encoded: self.encoded + o.encoded, memory: self.memory + o.memory }
    }
}

impl std::ops::Sub for Footprint {
    type Output = Footprint;
    fn sub(self, o: Footprint) -> Footprint {
        Footprint { encoded: self.encoded - o.encoded, memory: self.memory - o.memory }
    }
}

impl std::ops::AddAssign for Footprint {
    fn add_assign(&mut self, o: Footprint) {
        *self = *self + o;
    }
}

impl std::ops::Neg for Footprint {
    type Output = Footprint;
    fn neg(self) -> Footprint {
        Footprint::ZERO - self
    }
}

/// Bytes of an `Arc` allocation's two reference counts.
const ARC_COUNTS: usize = 2 * std::mem::size_of::<usize>();

/// Bytes of the allocation behind an `Arc<Node>`: every node is one.
const NODE_ALLOC: usize = ARC_COUNTS + std::mem::size_of::<Node>();

pub(crate) enum Node {
    Leaf(Leaf),
    Inner(Inner),
    /// The child subtree lives in another frame.
    Link(Arc<Cell>),
}

/// A key's suffix, its value and its version. Suffix and value live inside the node when
/// they fit (`LEAF_INLINE_MAX`, sized so `Node` stays 88 bytes): a lookup pays one cache miss
/// for the leaf instead of two, and the leaf costs one allocation instead of two.
pub(crate) struct Leaf {
    version: u64,
    bytes: LeafBytes,
    suffix_len: u16,
}

/// Suffix and value bytes of a leaf up to this length are stored inline (path-shaped keys
/// leave a suffix of a few bytes; S3 metadata values of ~60 bytes then fit).
const LEAF_INLINE_MAX: usize = 70;

enum LeafBytes {
    Inline { len: u8, bytes: [u8; LEAF_INLINE_MAX] },
    Heap(Box<[u8]>),
}

impl LeafBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            LeafBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            LeafBytes::Heap(b) => b,
        }
    }
}

impl Leaf {
    pub(crate) fn new(suffix: &[u8], value: &[u8], version: u64) -> Leaf {
        debug_assert!(suffix.len() <= crate::KEY_LEN_MAX);
        let total = suffix.len() + value.len();
        let bytes = if total <= LEAF_INLINE_MAX {
            let mut inline = [0u8; LEAF_INLINE_MAX];
            inline[..suffix.len()].copy_from_slice(suffix);
            inline[suffix.len()..total].copy_from_slice(value);
            LeafBytes::Inline { len: total as u8, bytes: inline }
        } else {
            let mut heap = Vec::with_capacity(total);
            heap.extend_from_slice(suffix);
            heap.extend_from_slice(value);
            LeafBytes::Heap(heap.into_boxed_slice())
        };
        Leaf { version, bytes, suffix_len: suffix.len() as u16 }
    }
    pub(crate) fn suffix(&self) -> &[u8] {
        &self.bytes.as_slice()[..usize::from(self.suffix_len)]
    }
    pub(crate) fn value(&self) -> &[u8] {
        &self.bytes.as_slice()[usize::from(self.suffix_len)..]
    }
    pub(crate) fn version(&self) -> u64 {
        self.version
    }
    /// The same value and version under another suffix.
    pub(crate) fn with_suffix(&self, suffix: &[u8]) -> Leaf {
        Leaf::new(suffix, self.value(), self.version)
    }
    pub(crate) fn encoded_len(&self) -> usize {
        leaf_len(self.suffix().len(), self.value().len(), self.version)
    }
    /// Heap bytes of suffix and value when they do not fit inline.
    fn heap_len(&self) -> usize {
        match &self.bytes {
            LeafBytes::Inline { .. } => 0,
            LeafBytes::Heap(b) => b.len(),
        }
    }
    /// The footprint of this leaf as a node of its own (`Node::Leaf`).
    pub(crate) fn footprint(&self) -> Footprint {
        Footprint { encoded: self.encoded_len() as isize, memory: (NODE_ALLOC + self.heap_len()) as isize }
    }
    /// Memory of this leaf as an inner node's terminal (an `Arc<Leaf>` of its own).
    fn terminal_memory(&self) -> usize {
        ARC_COUNTS + std::mem::size_of::<Leaf>() + self.heap_len()
    }
}

/// Children keyed by the next byte of the key, in one of four layouts.
pub(crate) enum Children {
    /// N4: keys and pointers inline in the node, so a lookup through it pays no second
    /// cache miss for a pointer array (slots `len..` are `None`).
    N4 { keys: [u8; 4], len: u8, ptrs: [Option<Arc<Node>>; 4] },
    /// N16: up to 16 ascending keys inline, pointers beside them.
    Small { keys: [u8; 16], ptrs: Box<[Arc<Node>]> },
    /// N48: a byte-indexed table of slot numbers (0 = none, i = ptrs[i - 1]).
    N48 { index: Box<[u8; 256]>, ptrs: Box<[Arc<Node>]> },
    /// N256: one pointer per byte value.
    N256 { ptrs: Box<[Option<Arc<Node>>; 256]>, len: u16 },
}

/// Prefix bytes kept inside the node up to this length (most path segments are shorter), so
/// a lookup does not pay a separate cache miss for the prefix.
const PREFIX_INLINE_MAX: usize = 22;

/// A compressed prefix: inline when short, on the heap otherwise.
#[derive(Clone)]
enum Prefix {
    Inline { len: u8, bytes: [u8; PREFIX_INLINE_MAX] },
    Heap(Box<[u8]>),
}

impl Prefix {
    fn new(prefix: &[u8]) -> Prefix {
        if prefix.len() <= PREFIX_INLINE_MAX {
            let mut bytes = [0u8; PREFIX_INLINE_MAX];
            bytes[..prefix.len()].copy_from_slice(prefix);
            Prefix::Inline { len: prefix.len() as u8, bytes }
        } else {
            Prefix::Heap(prefix.into())
        }
    }
    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            Prefix::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Prefix::Heap(b) => b,
        }
    }
}

pub(crate) struct Inner {
    prefix: Prefix,
    /// The value of the key that ends exactly after `prefix` (how K and K+0x00 coexist).
    terminal: Option<Arc<Leaf>>,
    kind: InnerKind,
    /// `Some(x)` only if every child's own bytes (an inner child's prefix, a leaf's suffix, a
    /// linked frame root's own bytes) begin with `x`: with a delimiter `x`, every child rolls
    /// up right after its key byte, and a listing emits them from this node alone. `None`
    /// promises nothing (kept conservative where an exact answer would read every child).
    /// Derived: not encoded, recomputed when a frame is decoded. A linked frame counts with
    /// the lead its cell records (`FrameCell::lead`); a write that makes a frame's root stop
    /// beginning with that byte first republishes the parent frame with this field cleared
    /// in the node holding the link (`Tree::apply`), so a published node never promises a
    /// byte that its linked frame lacks.
    lead: Option<u8>,
    children: Children,
}

/// The first of `node`'s own bytes, if it has one; for a link, the linked frame's root's as
/// its cell records it (`None` while not known).
#[inline]
pub(crate) fn first_own_byte(node: &Node) -> Option<u8> {
    match node {
        Node::Inner(inner) => inner.prefix().first().copied(),
        Node::Leaf(leaf) => leaf.suffix().first().copied(),
        Node::Link(cell) => cell.lead(),
    }
}

impl crate::buffer::FrameRoot for Node {
    fn lead(&self) -> Option<u8> {
        // A frame's root is never a link (the tree checker verifies it).
        first_own_byte(self)
    }
}

/// `lead` of a node whose children are `nodes` (reads every one of them).
fn lead_of<'a>(mut nodes: impl Iterator<Item = &'a Arc<Node>>) -> Option<u8> {
    let first = first_own_byte(nodes.next()?)?;
    nodes.all(|n| first_own_byte(n) == Some(first)).then_some(first)
}

/// The smallest kind that holds `len` children.
fn fitting_kind(len: usize) -> InnerKind {
    match len {
        0..=4 => InnerKind::N4,
        5..=16 => InnerKind::N16,
        17..=48 => InnerKind::N48,
        _ => InnerKind::N256,
    }
}

/// Grows when full; shrinks only well below the next smaller capacity (hysteresis, so a node
/// at a boundary does not flip layout on every insert/delete).
pub(crate) fn next_kind(old: InnerKind, len: usize) -> InnerKind {
    let shrink_at = match old {
        InnerKind::N4 => 0,
        InnerKind::N16 => 3,
        InnerKind::N48 => 12,
        InnerKind::N256 => 40,
    };
    if len > old.capacity() || len <= shrink_at {
        fitting_kind(len)
    } else {
        old
    }
}

impl Inner {
    /// Builds a node of `kind` from ascending, distinct `entries`.
    pub(crate) fn new(
        prefix: &[u8],
        terminal: Option<Arc<Leaf>>,
        kind: InnerKind,
        entries: Vec<(u8, Arc<Node>)>,
    ) -> Inner {
        let lead = lead_of(entries.iter().map(|(_, n)| n));
        Inner::with_lead(prefix, terminal, kind, entries, lead)
    }

    /// `new` with `lead` given by the caller (see the field).
    fn with_lead(
        prefix: &[u8],
        terminal: Option<Arc<Leaf>>,
        kind: InnerKind,
        entries: Vec<(u8, Arc<Node>)>,
        lead: Option<u8>,
    ) -> Inner {
        debug_assert!(entries.len() <= kind.capacity());
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        let children = match kind {
            InnerKind::N4 => {
                let (mut keys, mut ptrs) = ([0u8; 4], [None, None, None, None]);
                let len = entries.len() as u8;
                for (i, (b, n)) in entries.into_iter().enumerate() {
                    keys[i] = b;
                    ptrs[i] = Some(n);
                }
                Children::N4 { keys, len, ptrs }
            }
            InnerKind::N16 => {
                let mut keys = [0u8; 16];
                for (slot, (b, _)) in keys.iter_mut().zip(&entries) {
                    *slot = *b;
                }
                Children::Small { keys, ptrs: entries.into_iter().map(|(_, n)| n).collect() }
            }
            InnerKind::N48 => {
                let mut index = Box::new([0u8; 256]);
                for (i, (b, _)) in entries.iter().enumerate() {
                    index[usize::from(*b)] = (i + 1) as u8;
                }
                Children::N48 { index, ptrs: entries.into_iter().map(|(_, n)| n).collect() }
            }
            InnerKind::N256 => {
                let len = entries.len() as u16;
                let mut ptrs: Box<[Option<Arc<Node>>; 256]> = Box::new(std::array::from_fn(|_| None));
                for (b, n) in entries {
                    ptrs[usize::from(b)] = Some(n);
                }
                Children::N256 { ptrs, len }
            }
        };
        Inner { prefix: Prefix::new(prefix), terminal, kind, lead, children }
    }

    /// Builds a node of `kind` from ascending, distinct `keys` and their `nodes`, allocating
    /// the pointer array once (the decoder's path: no intermediate vector per node).
    pub(crate) fn from_parts(
        prefix: &[u8],
        terminal: Option<Arc<Leaf>>,
        kind: InnerKind,
        keys: &[u8],
        nodes: impl ExactSizeIterator<Item = Arc<Node>>,
    ) -> Inner {
        debug_assert_eq!(keys.len(), nodes.len());
        debug_assert!(keys.len() <= kind.capacity());
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let children = match kind {
            InnerKind::N4 => {
                let (mut inline, mut ptrs) = ([0u8; 4], [None, None, None, None]);
                inline[..keys.len()].copy_from_slice(keys);
                for (slot, n) in ptrs.iter_mut().zip(nodes) {
                    *slot = Some(n);
                }
                Children::N4 { keys: inline, len: keys.len() as u8, ptrs }
            }
            InnerKind::N16 => {
                let mut inline = [0u8; 16];
                inline[..keys.len()].copy_from_slice(keys);
                Children::Small { keys: inline, ptrs: nodes.collect() }
            }
            InnerKind::N48 => {
                let mut index = Box::new([0u8; 256]);
                for (i, b) in keys.iter().enumerate() {
                    index[usize::from(*b)] = (i + 1) as u8;
                }
                Children::N48 { index, ptrs: nodes.collect() }
            }
            InnerKind::N256 => {
                let len = keys.len() as u16;
                let mut ptrs: Box<[Option<Arc<Node>>; 256]> = Box::new(std::array::from_fn(|_| None));
                for (b, n) in keys.iter().zip(nodes) {
                    ptrs[usize::from(*b)] = Some(n);
                }
                Children::N256 { ptrs, len }
            }
        };
        let lead = lead_of(children.iter().map(|(_, n)| n));
        Inner { prefix: Prefix::new(prefix), terminal, kind, lead, children }
    }

    /// Builds a node choosing the kind from the old kind (hysteresis) or from scratch.
    pub(crate) fn with_entries(
        prefix: &[u8],
        terminal: Option<Arc<Leaf>>,
        old_kind: Option<InnerKind>,
        entries: Vec<(u8, Arc<Node>)>,
    ) -> Inner {
        let kind = match old_kind {
            Some(k) => next_kind(k, entries.len()),
            None => fitting_kind(entries.len()),
        };
        Inner::new(prefix, terminal, kind, entries)
    }

    /// The node of an empty frame.
    pub(crate) fn empty() -> Inner {
        Inner::new(&[], None, InnerKind::N4, Vec::new())
    }

    #[inline]
    pub(crate) fn prefix(&self) -> &[u8] {
        self.prefix.as_slice()
    }
    pub(crate) fn terminal(&self) -> Option<&Arc<Leaf>> {
        self.terminal.as_ref()
    }
    pub(crate) fn kind(&self) -> InnerKind {
        self.kind
    }
    pub(crate) fn children(&self) -> &Children {
        &self.children
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.terminal.is_none() && self.children.is_empty()
    }

    /// `Some(x)` only if every child's own bytes begin with `x` (see the field).
    #[inline]
    pub(crate) fn lead(&self) -> Option<u8> {
        self.lead
    }

    /// The same node under another prefix (children shared).
    pub(crate) fn with_prefix(&self, prefix: &[u8]) -> Inner {
        Inner::with_lead(prefix, self.terminal.clone(), self.kind, self.children.entries(), self.lead)
    }
    /// The same node promising no lead (see the field): its linked frame is about to lose it.
    pub(crate) fn without_lead(&self) -> Inner {
        Inner::with_lead(self.prefix(), self.terminal.clone(), self.kind, self.children.entries(), None)
    }
    /// The same node with another terminal.
    pub(crate) fn with_terminal(&self, terminal: Option<Arc<Leaf>>) -> Inner {
        Inner::with_lead(self.prefix(), terminal, self.kind, self.children.entries(), self.lead)
    }
    /// `lead` once `node` replaces a child (`replacing`) or is added, without reading the
    /// other children.
    fn lead_with(&self, replacing: bool, node: &Node) -> Option<u8> {
        let others = self.children.len() - usize::from(replacing);
        match first_own_byte(node) {
            Some(x) if others == 0 || self.lead == Some(x) => Some(x),
            _ => None,
        }
    }
    /// The same node with child `b` set to `node` (added or replaced).
    pub(crate) fn with_child(&self, b: u8, node: Arc<Node>) -> Inner {
        // Replacing a child (every level of a path copy but the last) keeps the layout: copy
        // the pointer array in one pass instead of rebuilding the node from entries.
        if let Some(children) = self.children.replaced(b, &node) {
            return Inner {
                prefix: self.prefix.clone(),
                terminal: self.terminal.clone(),
                kind: self.kind,
                lead: self.lead_with(true, &node),
                children,
            };
        }
        let mut entries = self.children.entries();
        let lead = match entries.binary_search_by_key(&b, |e| e.0) {
            Ok(i) => {
                let lead = self.lead_with(true, &node);
                entries[i].1 = node;
                lead
            }
            Err(i) => {
                let lead = self.lead_with(false, &node);
                entries.insert(i, (b, node));
                lead
            }
        };
        let kind = next_kind(self.kind, entries.len());
        Inner::with_lead(self.prefix(), self.terminal.clone(), kind, entries, lead)
    }
    /// The same node without child `b`. (`lead` still holds for the children left.)
    pub(crate) fn without_child(&self, b: u8) -> Inner {
        let mut entries = self.children.entries();
        entries.retain(|e| e.0 != b);
        let kind = next_kind(self.kind, entries.len());
        Inner::with_lead(self.prefix(), self.terminal.clone(), kind, entries, self.lead)
    }

    /// Encoded size of this node's record plus its terminal's (children not included).
    pub(crate) fn encoded_len(&self) -> usize {
        inner_len(self.kind, self.prefix().len(), self.children.len(), self.terminal.is_some())
            + self.terminal.as_ref().map_or(0, |t| t.encoded_len())
    }
    /// The footprint of this node (as a `Node::Inner`) and its terminal, children excluded:
    /// the node, a prefix too long to be inline, the child arrays, the terminal.
    pub(crate) fn footprint(&self) -> Footprint {
        let prefix = match &self.prefix {
            Prefix::Inline { .. } => 0,
            Prefix::Heap(b) => b.len(),
        };
        let arrays = match &self.children {
            Children::N4 { .. } => 0,
            Children::Small { ptrs, .. } => std::mem::size_of_val::<[Arc<Node>]>(ptrs),
            Children::N48 { index, ptrs } => {
                std::mem::size_of_val::<[u8; 256]>(index) + std::mem::size_of_val::<[Arc<Node>]>(ptrs)
            }
            Children::N256 { ptrs, .. } => std::mem::size_of_val::<[Option<Arc<Node>>; 256]>(ptrs),
        };
        let terminal = self.terminal.as_ref().map_or(0, |t| t.terminal_memory());
        Footprint {
            encoded: self.encoded_len() as isize,
            memory: (NODE_ALLOC + prefix + arrays + terminal) as isize,
        }
    }
}

impl Children {
    pub(crate) fn len(&self) -> usize {
        match self {
            Children::N4 { len, .. } => usize::from(*len),
            Children::Small { ptrs, .. } | Children::N48 { ptrs, .. } => ptrs.len(),
            Children::N256 { len, .. } => usize::from(*len),
        }
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub(crate) fn get(&self, b: u8) -> Option<&Arc<Node>> {
        match self {
            Children::N4 { keys, len, ptrs } => {
                let i = keys[..usize::from(*len)].iter().position(|&k| k == b)?;
                ptrs[i].as_ref()
            }
            Children::Small { keys, ptrs } => {
                keys[..ptrs.len()].iter().position(|&k| k == b).map(|i| &ptrs[i])
            }
            Children::N48 { index, ptrs } => {
                let slot = usize::from(index[usize::from(b)]);
                if slot == 0 {
                    None
                } else {
                    ptrs.get(slot - 1)
                }
            }
            Children::N256 { ptrs, .. } => ptrs[usize::from(b)].as_ref(),
        }
    }
    /// Children in ascending key order.
    pub(crate) fn iter(&self) -> ChildIter<'_> {
        self.iter_from(0)
    }
    /// Children with key >= `b`, ascending.
    pub(crate) fn iter_from(&self, b: u8) -> ChildIter<'_> {
        let pos = match self {
            Children::N4 { keys, len, .. } => {
                keys[..usize::from(*len)].iter().take_while(|&&k| k < b).count()
            }
            Children::Small { keys, ptrs } => keys[..ptrs.len()].iter().take_while(|&&k| k < b).count(),
            _ => usize::from(b),
        };
        ChildIter { children: self, pos }
    }
    /// A copy with the existing child `b` replaced by `node`; `None` if there is no child `b`.
    fn replaced(&self, b: u8, node: &Arc<Node>) -> Option<Children> {
        match self {
            Children::N4 { keys, len, ptrs } => {
                let i = keys[..usize::from(*len)].iter().position(|&k| k == b)?;
                let mut copy = ptrs.clone();
                copy[i] = Some(Arc::clone(node));
                Some(Children::N4 { keys: *keys, len: *len, ptrs: copy })
            }
            Children::Small { keys, ptrs } => {
                let i = keys[..ptrs.len()].iter().position(|&k| k == b)?;
                let mut copy = ptrs.to_vec();
                copy[i] = Arc::clone(node);
                Some(Children::Small { keys: *keys, ptrs: copy.into_boxed_slice() })
            }
            Children::N48 { index, ptrs } => {
                let slot = usize::from(index[usize::from(b)]).checked_sub(1)?;
                let mut copy = ptrs.to_vec();
                *copy.get_mut(slot)? = Arc::clone(node);
                Some(Children::N48 { index: index.clone(), ptrs: copy.into_boxed_slice() })
            }
            Children::N256 { ptrs, len } => {
                ptrs[usize::from(b)].as_ref()?;
                let mut copy = ptrs.clone();
                copy[usize::from(b)] = Some(Arc::clone(node));
                Some(Children::N256 { ptrs: copy, len: *len })
            }
        }
    }

    /// Owned (key, child) pairs, ascending.
    pub(crate) fn entries(&self) -> Vec<(u8, Arc<Node>)> {
        let mut v = Vec::with_capacity(self.len() + 1);
        v.extend(self.iter().map(|(b, n)| (b, Arc::clone(n))));
        v
    }
}

pub(crate) struct ChildIter<'a> {
    children: &'a Children,
    pos: usize,
}

impl<'a> Iterator for ChildIter<'a> {
    type Item = (u8, &'a Arc<Node>);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self.children {
            Children::N4 { keys, len, ptrs } => {
                let i = self.pos;
                if i >= usize::from(*len) {
                    return None;
                }
                self.pos += 1;
                ptrs[i].as_ref().map(|p| (keys[i], p))
            }
            Children::Small { keys, ptrs } => {
                let i = self.pos;
                self.pos += 1;
                ptrs.get(i).map(|p| (keys[i], p))
            }
            Children::N48 { index, ptrs } => {
                while self.pos < 256 {
                    let b = self.pos;
                    self.pos += 1;
                    let slot = usize::from(index[b]);
                    if slot != 0 {
                        return ptrs.get(slot - 1).map(|p| (b as u8, p));
                    }
                }
                None
            }
            Children::N256 { ptrs, .. } => {
                while self.pos < 256 {
                    let b = self.pos;
                    self.pos += 1;
                    if let Some(p) = &ptrs[b] {
                        return Some((b as u8, p));
                    }
                }
                None
            }
        }
    }
}

impl Node {
    /// Encoded size of this node's own record(s), children excluded.
    pub(crate) fn encoded_len(&self) -> usize {
        match self {
            Node::Leaf(l) => l.encoded_len(),
            Node::Inner(i) => i.encoded_len(),
            Node::Link(cell) => link_len(cell.id.0),
        }
    }
    /// Encoded size and memory of this node's own record(s), children excluded.
    pub(crate) fn footprint(&self) -> Footprint {
        match self {
            Node::Leaf(l) => l.footprint(),
            Node::Inner(i) => i.footprint(),
            // The linked frame is a frame of its own, with its own size.
            Node::Link(cell) => {
                Footprint { encoded: link_len(cell.id.0) as isize, memory: NODE_ALLOC as isize }
            }
        }
    }
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Node::Inner(i) if i.is_empty())
    }
    /// A byte from the start of the node's own memory (read by `touch`).
    fn first_byte(&self) -> u8 {
        match self {
            Node::Leaf(l) => l.suffix_len as u8,
            Node::Inner(i) => i.prefix().first().copied().unwrap_or(0),
            // The linked frame's lead sits in the cell's first line, which a rollup reads.
            Node::Link(cell) => cell.lead().unwrap_or(0),
        }
    }
    /// This node re-rooted `extra` bytes higher: `extra` is prepended to its prefix or suffix.
    /// Used when a parent collapses into its only child. Links cannot be re-rooted.
    pub(crate) fn prepend(&self, extra: &[u8]) -> Option<Node> {
        match self {
            Node::Leaf(l) => Some(Node::Leaf(l.with_suffix(&[extra, l.suffix()].concat()))),
            Node::Inner(i) => Some(Node::Inner(i.with_prefix(&[extra, i.prefix()].concat()))),
            Node::Link(_) => None,
        }
    }
}

/// Reads the first byte of each of `nodes`, so that their cache misses are in flight
/// together before a walk enters them one by one. Plain loads kept alive with `black_box`
/// (no prefetch intrinsics, no `unsafe`): the listing's touch-ahead and the checkpoint
/// encoder use it.
pub(super) fn touch<'a>(nodes: impl Iterator<Item = &'a Node>) {
    std::hint::black_box(nodes.fold(0u8, |acc, node| acc ^ node.first_byte()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(v: u8) -> Arc<Node> {
        Arc::new(Node::Leaf(Leaf::new(&[], &[v], 1)))
    }

    fn values(inner: &Inner) -> Vec<(u8, u8)> {
        inner
            .children()
            .iter()
            .map(|(b, n)| match &**n {
                Node::Leaf(l) => (b, l.value()[0]),
                _ => panic!("unexpected node"),
            })
            .collect()
    }

    #[test]
    fn grows_through_every_kind_and_shrinks_with_hysteresis() {
        // Insert in a scrambled order so the small layouts must keep keys sorted.
        let order: Vec<u8> = (0..=255u8).map(|i| i.wrapping_mul(167).wrapping_add(13)).collect();
        let mut node = Inner::empty();
        let mut seen_kinds = vec![node.kind()];
        for (n, &b) in order.iter().enumerate() {
            node = node.with_child(b, leaf(b));
            let len = n + 1;
            assert_eq!(node.children().len(), len);
            let expected = match len {
                0..=4 => InnerKind::N4,
                5..=16 => InnerKind::N16,
                17..=48 => InnerKind::N48,
                _ => InnerKind::N256,
            };
            assert_eq!(node.kind(), expected, "after {len} inserts");
            if seen_kinds.last() != Some(&node.kind()) {
                seen_kinds.push(node.kind());
            }
            // Every child is found by lookup and the iteration is ascending.
            for &k in &order[..len] {
                assert!(
                    matches!(node.children().get(k).map(|n| &**n), Some(Node::Leaf(l)) if l.value()[0] == k)
                );
            }
            let vals = values(&node);
            assert!(vals.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(vals.iter().all(|(b, v)| b == v));
        }
        assert_eq!(seen_kinds, [InnerKind::N4, InnerKind::N16, InnerKind::N48, InnerKind::N256]);

        // Shrink: the kind changes only well below each capacity.
        let mut shrink_points = Vec::new();
        for (n, &b) in order.iter().enumerate() {
            let before = node.kind();
            node = node.without_child(b);
            assert!(node.children().get(b).is_none());
            if node.kind() != before {
                shrink_points.push((256 - n - 1, node.kind()));
            }
        }
        assert_eq!(shrink_points, [(40, InnerKind::N48), (12, InnerKind::N16), (3, InnerKind::N4)]);
        assert!(node.is_empty());
    }

    #[test]
    fn replacing_a_child_keeps_layout_and_siblings() {
        for count in [3usize, 10, 30, 200] {
            let entries: Vec<(u8, Arc<Node>)> =
                (0..count).map(|i| ((i * 251 % 256) as u8, leaf(i as u8))).collect();
            let mut sorted = entries.clone();
            sorted.sort_by_key(|e| e.0);
            let node = Inner::with_entries(b"p", None, None, sorted);
            let target = entries[count / 2].0;
            let copy = node.with_child(target, leaf(255));
            assert_eq!((copy.kind(), copy.children().len(), copy.prefix()), (node.kind(), count, &b"p"[..]));
            for (b, child) in copy.children().iter() {
                let Node::Leaf(l) = &**child else { panic!("not a leaf") };
                let Some(Node::Leaf(old)) = node.children().get(b).map(|n| &**n) else {
                    panic!("missing {b}")
                };
                let want = if b == target { 255 } else { old.value()[0] };
                assert_eq!(l.value()[0], want, "count {count}, child {b}");
            }
        }
    }

    #[test]
    fn leaves_round_trip_inline_and_on_the_heap() {
        // Around the inline limit, and far above it (a 64 KiB value).
        let cases = [
            (0, 0),
            (4, 62),
            (4, 66),
            (0, LEAF_INLINE_MAX),
            (1, LEAF_INLINE_MAX),
            (LEAF_INLINE_MAX, 0),
            (9, 65536),
        ];
        for (suffix_len, value_len) in cases {
            let suffix: Vec<u8> = (0..suffix_len).map(|i| i as u8).collect();
            let value: Vec<u8> = (0..value_len).map(|i| (i * 7 + 1) as u8).collect();
            let leaf = Leaf::new(&suffix, &value, 77);
            assert_eq!((leaf.suffix(), leaf.value(), leaf.version()), (&suffix[..], &value[..], 77));
            let inline = matches!(leaf.bytes, LeafBytes::Inline { .. });
            assert_eq!(inline, suffix_len + value_len <= LEAF_INLINE_MAX, "{suffix_len}+{value_len}");
            let moved = leaf.with_suffix(b"xyz");
            assert_eq!((moved.suffix(), moved.value(), moved.version()), (&b"xyz"[..], &value[..], 77));
            assert_eq!(leaf.encoded_len(), leaf_len(suffix_len, value_len, 77));
        }
    }

    #[test]
    fn iter_from_skips_smaller_keys_in_every_layout() {
        for count in [3usize, 10, 30, 200] {
            let entries: Vec<(u8, Arc<Node>)> = (0..count).map(|i| (i as u8, leaf(i as u8))).collect();
            let node = Inner::with_entries(b"p", None, None, entries);
            let from: Vec<u8> = node.children().iter_from(2).map(|(b, _)| b).collect();
            assert_eq!(from, (2..count as u8).collect::<Vec<_>>(), "count {count}");
        }
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// Every leaf pays for the largest variant: keep nodes small (measured at 1M keys).
    #[test]
    fn nodes_stay_small() {
        assert!(std::mem::size_of::<Node>() <= 88, "Node is {} bytes", std::mem::size_of::<Node>());
        // A leaf may use all of it: its suffix and value are inline up to LEAF_INLINE_MAX.
        assert!(std::mem::size_of::<Leaf>() <= std::mem::size_of::<Node>());
    }
}

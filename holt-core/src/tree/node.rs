//! The nodes of the adaptive radix tree. Every node is immutable once published and shared
//! through reference-counted allocations (`Shared`); a write copies the path from its frame's root to the change.
//! A single put's copy lends its siblings' counts instead of taking them
//! (`Inner::with_child_lent`, paid back by `release_lent` or `settle_lent`).
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

/// The allocation of a leaf or an inner node: one reference count and no weak count, 8 bytes
/// less than `std::sync::Arc` (a bench leaf then fits mimalloc's 96-byte class, not 112).
pub(crate) use triomphe::Arc as Shared;

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

/// Bytes of a `Shared` allocation's reference count.
const ARC_COUNTS: usize = std::mem::size_of::<usize>();

/// A pointer to a node, as a parent's child slot holds it: 16 bytes, the variant beside the
/// pointer. Each kind of node is an allocation of its own exact size, so an inner node keeps
/// its child slots inline (a lookup pays one cache miss per level, not one for the node and
/// another for a separate pointer array) without every leaf paying for the largest layout.
/// Cloning a `Node` bumps a reference count: nodes are immutable once published.
#[derive(Clone)]
pub(crate) enum Node {
    Leaf(Shared<Leaf>),
    Inner(Inner),
    /// The child subtree lives in another frame.
    Link(Arc<Cell>),
}

/// A key's suffix, its value and its version. Suffix and value live inside the leaf when
/// they fit (`LEAF_INLINE_MAX`): a lookup pays one cache miss
/// for the leaf instead of two, and the leaf costs one allocation instead of two.
pub(crate) struct Leaf {
    version: u64,
    bytes: LeafBytes,
    suffix_len: u16,
    /// The key's weight (`Options::weigher`), 48 bits in two fields that sit in what would
    /// otherwise be the struct's padding: a leaf stays 88 bytes.
    weight_low: u32,
    weight_high: u16,
}

/// How much a stored value weighs in usage totals (`Options::weigher`).
pub(crate) type Weigh = fn(&[u8]) -> u64;

/// The weigher of a database opened without one: every key weighs nothing.
pub(crate) fn no_weight(_: &[u8]) -> u64 {
    0
}

/// The largest weight a key carries; larger weights are stored as this (256 TiB, above any
/// object an S3 store accepts).
pub(crate) const WEIGHT_MAX: u64 = (1 << 48) - 1;

/// What a subtree holds within its frame: keys, the sum of their weights, and links to
/// other frames (whose keys count in those frames' totals, `FrameCell::subtree_usage`). Kept in
/// every inner node, so the usage of a prefix is read at the node it leads to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Agg {
    pub weight: u64,
    /// A frame holds at most a few hundred thousand keys (512 KiB of records), so the
    /// count of one frame's subtree fits.
    pub keys: u32,
    pub links: u32,
}

impl Agg {
    pub(crate) const ZERO: Agg = Agg { weight: 0, keys: 0, links: 0 };

    #[inline]
    fn plus(self, other: Agg) -> Agg {
        Agg {
            weight: self.weight.wrapping_add(other.weight),
            keys: self.keys.wrapping_add(other.keys),
            links: self.links.wrapping_add(other.links),
        }
    }
    #[inline]
    fn minus(self, other: Agg) -> Agg {
        Agg {
            weight: self.weight.wrapping_sub(other.weight),
            keys: self.keys.wrapping_sub(other.keys),
            links: self.links.wrapping_sub(other.links),
        }
    }
    /// One key of weight `weight`.
    #[inline]
    pub(crate) fn key(weight: u64) -> Agg {
        Agg { weight, keys: 1, links: 0 }
    }
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
    pub(crate) fn new(suffix: &[u8], value: &[u8], version: u64, weight: u64) -> Leaf {
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
        let weight = weight.min(WEIGHT_MAX);
        Leaf {
            version,
            bytes,
            suffix_len: suffix.len() as u16,
            weight_low: weight as u32,
            weight_high: (weight >> 32) as u16,
        }
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
    /// The key's weight (`Options::weigher` of its value when it was stored).
    #[inline]
    pub(crate) fn weight(&self) -> u64 {
        u64::from(self.weight_low) | u64::from(self.weight_high) << 32
    }
    /// The same value, version and weight under another suffix.
    pub(crate) fn with_suffix(&self, suffix: &[u8]) -> Leaf {
        Leaf::new(suffix, self.value(), self.version, self.weight())
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
    /// The footprint of this leaf (as a child or as a terminal): its record and its `Shared`
    /// allocation, with suffix and value if they are not inline.
    pub(crate) fn footprint(&self) -> Footprint {
        Footprint { encoded: self.encoded_len() as isize, memory: self.memory() as isize }
    }
    fn memory(&self) -> usize {
        ARC_COUNTS + std::mem::size_of::<Leaf>() + self.heap_len()
    }
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

/// The fields every inner node has, whatever its layout.
#[derive(Clone)]
struct Head {
    prefix: Prefix,
    /// The value of the key that ends exactly after `prefix` (how K and K+0x00 coexist).
    terminal: Option<Shared<Leaf>>,
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
    /// The keys, weight and links of this node's subtree within its frame, terminal included.
    agg: Agg,
}

/// An inner node of one layout: its head and its child slots, one allocation. `repr(C)`
/// keeps the head first in every layout, so reading it needs no per-layout offset.
#[repr(C)]
pub(crate) struct Body<S> {
    head: Head,
    slots: S,
}

/// N4 and N16: up to `N` ascending keys and their children, in slots `..len`.
pub(crate) struct Sorted<const N: usize> {
    keys: [u8; N],
    len: u8,
    ptrs: [Option<Node>; N],
}

/// N48: a byte-indexed table of slot numbers (0 = none, i = `ptrs[i - 1]`), slots `..len`
/// in use.
pub(crate) struct Indexed {
    index: [u8; 256],
    len: u8,
    ptrs: [Option<Node>; 48],
}

/// N256: one slot per byte value.
pub(crate) struct Direct {
    len: u16,
    ptrs: [Option<Node>; 256],
}

/// Slots `..len` of `ptrs` cloned, the rest empty (a path copy clones only the children),
/// except the slot of `replace`, which takes its node (moved: no count taken on it, and none
/// on the child it replaces).
fn copy_slots<const N: usize>(
    ptrs: &[Option<Node>; N],
    len: usize,
    replace: Option<(usize, Node)>,
) -> [Option<Node>; N] {
    let (slot, mut node) = match replace {
        Some((slot, node)) => (slot, Some(node)),
        None => (N, None),
    };
    std::array::from_fn(|i| {
        if i == slot {
            node.take()
        } else if i < len {
            ptrs[i].clone()
        } else {
            None
        }
    })
}

/// Slots `..len` of `ptrs` copied bit for bit, without taking a count on any child, the rest
/// empty, except `slot`, which takes `node`: the copy and `ptrs` then hold each child on one
/// count between them (see `Inner::with_child_lent`).
///
/// # Safety
/// The caller takes on `Inner::with_child_lent`'s contract for the copy.
#[expect(unsafe_code, reason = "a path copy lends the siblings' counts instead of taking them")]
unsafe fn lend_slots<const N: usize>(
    ptrs: &[Option<Node>; N],
    len: usize,
    slot: usize,
    node: Node,
) -> [Option<Node>; N] {
    let mut node = Some(node);
    std::array::from_fn(|i| {
        if i == slot {
            node.take()
        } else if i < len {
            // SAFETY: a bitwise copy of a live slot; the contract settles who drops it.
            unsafe { std::ptr::read(&ptrs[i]) }
        } else {
            None
        }
    })
}

impl<const N: usize> Clone for Sorted<N> {
    fn clone(&self) -> Self {
        Sorted { keys: self.keys, len: self.len, ptrs: copy_slots(&self.ptrs, usize::from(self.len), None) }
    }
}

impl Clone for Direct {
    fn clone(&self) -> Self {
        Direct { len: self.len, ptrs: copy_slots(&self.ptrs, 256, None) }
    }
}

impl Clone for Indexed {
    fn clone(&self) -> Self {
        Indexed {
            index: self.index,
            len: self.len,
            ptrs: copy_slots(&self.ptrs, usize::from(self.len), None),
        }
    }
}

/// An inner node: a pointer to the allocation of its layout. N4 and N16 nodes (their
/// encoded kinds) come in several capacities, the smallest that holds the node's children
/// when it is built (a path copy keeps it): slots are 16 bytes, and a node of five children
/// in sixteen slots would cost twice the memory it needs.
#[derive(Clone)]
pub(crate) enum Inner {
    S2(Shared<Body<Sorted<2>>>),
    S4(Shared<Body<Sorted<4>>>),
    S6(Shared<Body<Sorted<6>>>),
    S8(Shared<Body<Sorted<8>>>),
    S11(Shared<Body<Sorted<11>>>),
    S16(Shared<Body<Sorted<16>>>),
    N48(Shared<Body<Indexed>>),
    N256(Shared<Body<Direct>>),
}

/// An inner node's children, borrowed from it.
#[derive(Clone, Copy)]
pub(crate) enum Children<'a> {
    /// Ascending keys and their children (N4, N16).
    Sorted {
        keys: &'a [u8],
        ptrs: &'a [Option<Node>],
    },
    /// Slot numbers by byte, and the slots in use.
    Indexed {
        index: &'a [u8; 256],
        ptrs: &'a [Option<Node>],
    },
    Direct {
        len: u16,
        ptrs: &'a [Option<Node>; 256],
    },
}

/// Applies `$body` to the node's allocation, whatever its layout (`$b` binds the
/// `Shared<Body<_>>`).
macro_rules! each_layout {
    ($inner:expr, $b:ident => $body:expr) => {
        match $inner {
            Inner::S2($b) => $body,
            Inner::S4($b) => $body,
            Inner::S6($b) => $body,
            Inner::S8($b) => $body,
            Inner::S11($b) => $body,
            Inner::S16($b) => $body,
            Inner::N48($b) => $body,
            Inner::N256($b) => $body,
        }
    };
}

/// Like `each_layout`, with `$body`'s result (a `Shared<Body<_>>`) wrapped back into the
/// same layout's variant.
macro_rules! same_layout {
    ($inner:expr, $b:ident => $body:expr) => {
        match $inner {
            Inner::S2($b) => Inner::S2($body),
            Inner::S4($b) => Inner::S4($body),
            Inner::S6($b) => Inner::S6($body),
            Inner::S8($b) => Inner::S8($body),
            Inner::S11($b) => Inner::S11($body),
            Inner::S16($b) => Inner::S16($body),
            Inner::N48($b) => Inner::N48($body),
            Inner::N256($b) => Inner::N256($body),
        }
    };
}

/// Building and copying the slots of one layout.
pub(crate) trait Slots: Clone + Sized {
    /// Slots holding ascending, distinct `entries` (at most the layout's capacity).
    fn from_entries(len: usize, entries: impl Iterator<Item = (u8, Node)>) -> Self;
    /// Where child `b` sits, if there is one.
    fn slot_of(&self, b: u8) -> Option<usize>;
    /// A copy with `slot` (in use) holding `node` instead of its child.
    fn with_slot(&self, slot: usize, node: Node) -> Self;
    /// `with_slot` with the other children lent, not counted (`lend_slots`).
    ///
    /// # Safety
    /// As `lend_slots`.
    #[expect(unsafe_code, reason = "see lend_slots")]
    unsafe fn with_slot_lent(&self, slot: usize, node: Node) -> Self;
    /// Takes the child out of `slot`, leaving it empty (only on a node about to be freed:
    /// an empty slot in use breaks the layout's invariants).
    fn take_slot(&mut self, slot: usize) -> Option<Node>;
    /// Empties every slot without dropping its child (their counts belong to a copy that
    /// borrowed them), leaving no children: only on a node about to be freed or kept spare.
    fn forget_children(&mut self);
    fn children(&self) -> Children<'_>;
}

impl<const N: usize> Slots for Sorted<N> {
    fn from_entries(len: usize, entries: impl Iterator<Item = (u8, Node)>) -> Self {
        let mut s = Sorted { keys: [0; N], len: len as u8, ptrs: std::array::from_fn(|_| None) };
        for (i, (b, node)) in entries.enumerate() {
            s.keys[i] = b;
            s.ptrs[i] = Some(node);
        }
        s
    }
    fn slot_of(&self, b: u8) -> Option<usize> {
        self.keys[..usize::from(self.len)].iter().position(|&k| k == b)
    }
    fn with_slot(&self, slot: usize, node: Node) -> Self {
        let ptrs = copy_slots(&self.ptrs, usize::from(self.len), Some((slot, node)));
        Sorted { keys: self.keys, len: self.len, ptrs }
    }
    #[expect(unsafe_code, reason = "see lend_slots")]
    unsafe fn with_slot_lent(&self, slot: usize, node: Node) -> Self {
        // SAFETY: passed on to the caller.
        let ptrs = unsafe { lend_slots(&self.ptrs, usize::from(self.len), slot, node) };
        Sorted { keys: self.keys, len: self.len, ptrs }
    }
    fn take_slot(&mut self, slot: usize) -> Option<Node> {
        self.ptrs[slot].take()
    }
    fn forget_children(&mut self) {
        self.ptrs[..usize::from(self.len)].iter_mut().for_each(|p| std::mem::forget(p.take()));
        self.len = 0;
    }
    #[inline]
    fn children(&self) -> Children<'_> {
        let len = usize::from(self.len);
        Children::Sorted { keys: &self.keys[..len], ptrs: &self.ptrs[..len] }
    }
}

impl Slots for Indexed {
    fn from_entries(len: usize, entries: impl Iterator<Item = (u8, Node)>) -> Self {
        let mut s = Indexed { index: [0; 256], len: len as u8, ptrs: std::array::from_fn(|_| None) };
        for (i, (b, node)) in entries.enumerate() {
            s.index[usize::from(b)] = (i + 1) as u8;
            s.ptrs[i] = Some(node);
        }
        s
    }
    fn slot_of(&self, b: u8) -> Option<usize> {
        usize::from(self.index[usize::from(b)]).checked_sub(1)
    }
    fn with_slot(&self, slot: usize, node: Node) -> Self {
        let ptrs = copy_slots(&self.ptrs, usize::from(self.len), Some((slot, node)));
        Indexed { index: self.index, len: self.len, ptrs }
    }
    #[expect(unsafe_code, reason = "see lend_slots")]
    unsafe fn with_slot_lent(&self, slot: usize, node: Node) -> Self {
        // SAFETY: passed on to the caller.
        let ptrs = unsafe { lend_slots(&self.ptrs, usize::from(self.len), slot, node) };
        Indexed { index: self.index, len: self.len, ptrs }
    }
    fn take_slot(&mut self, slot: usize) -> Option<Node> {
        self.ptrs[slot].take()
    }
    fn forget_children(&mut self) {
        self.ptrs[..usize::from(self.len)].iter_mut().for_each(|p| std::mem::forget(p.take()));
        self.index = [0; 256];
        self.len = 0;
    }
    #[inline]
    fn children(&self) -> Children<'_> {
        Children::Indexed { index: &self.index, ptrs: &self.ptrs[..usize::from(self.len)] }
    }
}

impl Slots for Direct {
    fn from_entries(len: usize, entries: impl Iterator<Item = (u8, Node)>) -> Self {
        let mut s = Direct { len: len as u16, ptrs: std::array::from_fn(|_| None) };
        for (b, node) in entries {
            s.ptrs[usize::from(b)] = Some(node);
        }
        s
    }
    fn slot_of(&self, b: u8) -> Option<usize> {
        self.ptrs[usize::from(b)].is_some().then_some(usize::from(b))
    }
    fn with_slot(&self, slot: usize, node: Node) -> Self {
        Direct { len: self.len, ptrs: copy_slots(&self.ptrs, 256, Some((slot, node))) }
    }
    #[expect(unsafe_code, reason = "see lend_slots")]
    unsafe fn with_slot_lent(&self, slot: usize, node: Node) -> Self {
        // SAFETY: passed on to the caller.
        Direct { len: self.len, ptrs: unsafe { lend_slots(&self.ptrs, 256, slot, node) } }
    }
    fn take_slot(&mut self, slot: usize) -> Option<Node> {
        self.ptrs[slot].take()
    }
    fn forget_children(&mut self) {
        self.ptrs.iter_mut().for_each(|p| std::mem::forget(p.take()));
        self.len = 0;
    }
    #[inline]
    fn children(&self) -> Children<'_> {
        Children::Direct { len: self.len, ptrs: &self.ptrs }
    }
}

/// Allocations of nodes a single-op write freed (`Inner::release_lent`), kept for the next
/// path copy on the same thread (`new_shared`): the memory of the path a write just walked
/// and replaced is in this core's cache, where a fresh allocation, on a heap that a
/// million-key tree has scattered its frees over, is usually a miss (and the allocator's slow
/// path: a page with free blocks to find). A kept allocation holds an emptied node (no
/// children, no terminal), so dropping one frees nothing else.
#[derive(Default)]
struct Spares {
    s2: Vec<Shared<Body<Sorted<2>>>>,
    s4: Vec<Shared<Body<Sorted<4>>>>,
    s6: Vec<Shared<Body<Sorted<6>>>>,
    s8: Vec<Shared<Body<Sorted<8>>>>,
    s11: Vec<Shared<Body<Sorted<11>>>>,
    s16: Vec<Shared<Body<Sorted<16>>>>,
    n48: Vec<Shared<Body<Indexed>>>,
    n256: Vec<Shared<Body<Direct>>>,
    leaves: Vec<Shared<Leaf>>,
}

/// Most allocations kept per node type and thread (a path is ~5 nodes; 9 types × 16 is at
/// most ~90 KB a thread, most of it N256 nodes, which paths rarely hold). Nothing kept holds
/// heap bytes of its own: a prefix or value too long to be inline is dropped first.
const SPARES_MAX: usize = 16;

thread_local! {
    static SPARES: std::cell::RefCell<Spares> = std::cell::RefCell::new(Spares::default());
}

/// A node type `Spares` keeps.
trait Spare: Sized {
    fn stack(spares: &mut Spares) -> &mut Vec<Shared<Self>>;
}

macro_rules! spare {
    ($($t:ty => $field:ident),* $(,)?) => {
        $(impl Spare for $t {
            fn stack(spares: &mut Spares) -> &mut Vec<Shared<Self>> {
                &mut spares.$field
            }
        })*
    };
}

spare!(
    Body<Sorted<2>> => s2,
    Body<Sorted<4>> => s4,
    Body<Sorted<6>> => s6,
    Body<Sorted<8>> => s8,
    Body<Sorted<11>> => s11,
    Body<Sorted<16>> => s16,
    Body<Indexed> => n48,
    Body<Direct> => n256,
    Leaf => leaves,
);

/// `Shared::new(value)`, in an allocation this thread kept spare if it has one.
fn new_shared<T: Spare>(value: T) -> Shared<T> {
    let spare = SPARES.try_with(|s| T::stack(&mut s.borrow_mut()).pop()).ok().flatten();
    match spare {
        Some(mut arc) => match Shared::get_mut(&mut arc) {
            Some(slot) => {
                // Drops the emptied node it held: nothing below it.
                *slot = value;
                arc
            }
            None => Shared::new(value),
        },
        None => Shared::new(value),
    }
}

/// Keeps `arc`'s allocation for `new_shared` if `arc` is its only count and there is room;
/// else drops it. An inner node must have been emptied (`Slots::forget_children`, no
/// terminal).
fn keep_spare<T: Spare>(mut arc: Shared<T>) {
    if Shared::get_mut(&mut arc).is_none() {
        return;
    }
    let _ = SPARES.try_with(|s| {
        let mut spares = s.borrow_mut();
        let stack = T::stack(&mut spares);
        if stack.len() < SPARES_MAX {
            stack.push(arc);
        }
    });
}

/// `Shared::new(leaf)`, in a spare allocation if this thread kept one.
pub(crate) fn shared_leaf(leaf: Leaf) -> Shared<Leaf> {
    new_shared(leaf)
}

/// Keeps the allocation of a leaf a write replaced, if nothing else holds it (and its bytes
/// are inline).
pub(crate) fn keep_spare_leaf(leaf: Shared<Leaf>) {
    if matches!(leaf.bytes, LeafBytes::Inline { .. }) {
        keep_spare(leaf);
    }
}

impl<S: Slots> Body<S> {
    /// A copy with the child in `slot` replaced by `node`, under `lead`.
    fn replaced(&self, slot: usize, node: Node, lead: Option<u8>, agg: Agg) -> Shared<Body<S>> {
        let slots = self.slots.with_slot(slot, node);
        Shared::new(Body { head: Head { lead, agg, ..self.head.clone() }, slots })
    }
    /// The same children under another head.
    fn with_head(&self, head: Head) -> Shared<Body<S>> {
        Shared::new(Body { head, slots: self.slots.clone() })
    }
    /// `replaced` with the other children lent (`lend_slots`); the head is cloned.
    ///
    /// # Safety
    /// As `lend_slots`.
    #[expect(unsafe_code, reason = "see lend_slots")]
    unsafe fn replaced_lent(&self, slot: usize, node: Node, lead: Option<u8>, agg: Agg) -> Shared<Body<S>>
    where
        Body<S>: Spare,
    {
        // SAFETY: passed on to the caller.
        let slots = unsafe { self.slots.with_slot_lent(slot, node) };
        new_shared(Body { head: Head { lead, agg, ..self.head.clone() }, slots })
    }
}

/// Frees the node `body` if `body` holds its last count, dropping its head but none of its
/// children except the one under `b`, which is returned (see `Inner::release_lent`).
fn release_body<S: Slots>(mut body: Shared<Body<S>>, b: u8) -> Result<Option<Node>, Shared<Body<S>>>
where
    Body<S>: Spare,
{
    let Some(node) = Shared::get_mut(&mut body) else { return Err(body) };
    let child = node.slots.slot_of(b).and_then(|slot| node.slots.take_slot(slot));
    // The other children's counts now belong to the copy that borrowed them.
    node.slots.forget_children();
    node.head.terminal = None;
    if matches!(node.head.prefix, Prefix::Heap(_)) {
        node.head.prefix = Prefix::new(&[]);
    }
    keep_spare(body);
    Ok(child)
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
    fn state_bytes(&self) -> usize {
        self.footprint().memory.max(0) as usize
    }
}

/// `lead` of a node whose children are `nodes` (reads every one of them).
fn lead_of<'a>(mut nodes: impl Iterator<Item = &'a Node>) -> Option<u8> {
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

/// The lead a node is built with (see `Head::lead`): given by the caller, or read from the
/// children once they are in place.
enum Lead {
    Given(Option<u8>),
    Derived,
}

impl Inner {
    /// A node of `kind` holding ascending, distinct `entries` (`len` of them), in the
    /// smallest capacity of that kind that holds them.
    /// `agg`: the subtree's aggregates if the caller knows them (`None`: summed from the
    /// children, which reads every one of them).
    fn build(
        kind: InnerKind,
        prefix: &[u8],
        terminal: Option<Shared<Leaf>>,
        lead: Lead,
        agg: Option<Agg>,
        len: usize,
        entries: impl Iterator<Item = (u8, Node)>,
    ) -> Inner {
        debug_assert!(len <= kind.capacity());
        let prefix = Prefix::new(prefix);
        fn body<S: Slots>(
            prefix: Prefix,
            terminal: Option<Shared<Leaf>>,
            lead: Lead,
            agg: Option<Agg>,
            len: usize,
            entries: impl Iterator<Item = (u8, Node)>,
        ) -> Shared<Body<S>> {
            let slots = S::from_entries(len, entries);
            let lead = match lead {
                Lead::Given(lead) => lead,
                Lead::Derived => lead_of(slots.children().iter().map(|(_, n)| n)),
            };
            let agg = agg.unwrap_or_else(|| {
                let own = terminal.as_ref().map_or(Agg::ZERO, |t| Agg::key(t.weight()));
                slots.children().iter().fold(own, |sum, (_, n)| sum.plus(n.agg()))
            });
            Shared::new(Body { head: Head { prefix, terminal, lead, agg }, slots })
        }
        let (p, t, a) = (prefix, terminal, agg);
        match (kind, len) {
            (InnerKind::N4, 0..=2) => Inner::S2(body(p, t, lead, a, len, entries)),
            (InnerKind::N4, _) => Inner::S4(body(p, t, lead, a, len, entries)),
            (InnerKind::N16, 0..=6) => Inner::S6(body(p, t, lead, a, len, entries)),
            (InnerKind::N16, 7..=8) => Inner::S8(body(p, t, lead, a, len, entries)),
            (InnerKind::N16, 9..=11) => Inner::S11(body(p, t, lead, a, len, entries)),
            (InnerKind::N16, _) => Inner::S16(body(p, t, lead, a, len, entries)),
            (InnerKind::N48, _) => Inner::N48(body(p, t, lead, a, len, entries)),
            (InnerKind::N256, _) => Inner::N256(body(p, t, lead, a, len, entries)),
        }
    }

    /// Builds a node of `kind` from ascending, distinct `entries`.
    pub(crate) fn new(
        prefix: &[u8],
        terminal: Option<Shared<Leaf>>,
        kind: InnerKind,
        entries: Vec<(u8, Node)>,
    ) -> Inner {
        Inner::with_lead(prefix, terminal, kind, entries, Lead::Derived, None)
    }

    /// `new` with the lead given by the caller or derived (see `Head::lead`).
    fn with_lead(
        prefix: &[u8],
        terminal: Option<Shared<Leaf>>,
        kind: InnerKind,
        entries: Vec<(u8, Node)>,
        lead: Lead,
        agg: Option<Agg>,
    ) -> Inner {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        Inner::build(kind, prefix, terminal, lead, agg, entries.len(), entries.into_iter())
    }

    /// Builds a node of `kind` from ascending, distinct `keys` and their `nodes` (the
    /// decoder's path: no intermediate vector per node).
    pub(crate) fn from_parts(
        prefix: &[u8],
        terminal: Option<Shared<Leaf>>,
        kind: InnerKind,
        keys: &[u8],
        nodes: impl ExactSizeIterator<Item = Node>,
    ) -> Inner {
        debug_assert_eq!(keys.len(), nodes.len());
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        Inner::build(kind, prefix, terminal, Lead::Derived, None, keys.len(), keys.iter().copied().zip(nodes))
    }

    /// Builds a node choosing the kind from the old kind (hysteresis) or from scratch.
    pub(crate) fn with_entries(
        prefix: &[u8],
        terminal: Option<Shared<Leaf>>,
        old_kind: Option<InnerKind>,
        entries: Vec<(u8, Node)>,
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

    /// The address of this node's allocation.
    pub(crate) fn address(&self) -> *const u8 {
        each_layout!(self, b => Shared::as_ptr(b).cast::<u8>())
    }
    #[inline]
    fn head(&self) -> &Head {
        each_layout!(self, b => &b.head)
    }
    #[inline]
    pub(crate) fn prefix(&self) -> &[u8] {
        self.head().prefix.as_slice()
    }
    pub(crate) fn terminal(&self) -> Option<&Shared<Leaf>> {
        self.head().terminal.as_ref()
    }
    pub(crate) fn kind(&self) -> InnerKind {
        match self {
            Inner::S2(_) | Inner::S4(_) => InnerKind::N4,
            Inner::S6(_) | Inner::S8(_) | Inner::S11(_) | Inner::S16(_) => InnerKind::N16,
            Inner::N48(_) => InnerKind::N48,
            Inner::N256(_) => InnerKind::N256,
        }
    }
    #[inline]
    pub(crate) fn children(&self) -> Children<'_> {
        each_layout!(self, b => b.slots.children())
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.terminal().is_none() && self.children().is_empty()
    }

    /// `Some(x)` only if every child's own bytes begin with `x` (see `Head::lead`).
    #[inline]
    pub(crate) fn lead(&self) -> Option<u8> {
        self.head().lead
    }

    /// The keys, weight and links of this subtree within its frame (see `Head::agg`).
    #[inline]
    pub(crate) fn agg(&self) -> Agg {
        self.head().agg
    }

    /// The sums `agg` must hold, read from the terminal and every child (structural checks).
    pub(crate) fn summed_agg(&self) -> Agg {
        let own = self.terminal().map_or(Agg::ZERO, |t| Agg::key(t.weight()));
        self.children().iter().fold(own, |sum, (_, c)| sum.plus(c.agg()))
    }

    /// The same children under `head`.
    fn with_head(&self, head: Head) -> Inner {
        same_layout!(self, b => b.with_head(head))
    }
    /// The same node under another prefix (children shared).
    pub(crate) fn with_prefix(&self, prefix: &[u8]) -> Inner {
        self.with_head(Head { prefix: Prefix::new(prefix), ..self.head().clone() })
    }
    /// The same node promising no lead (see `Head::lead`): its linked frame is about to lose
    /// it.
    pub(crate) fn without_lead(&self) -> Inner {
        self.with_head(Head { lead: None, ..self.head().clone() })
    }
    /// The same node with another terminal.
    pub(crate) fn with_terminal(&self, terminal: Option<Shared<Leaf>>) -> Inner {
        let of = |t: Option<&Shared<Leaf>>| t.map_or(Agg::ZERO, |t| Agg::key(t.weight()));
        let agg = self.agg().minus(of(self.terminal())).plus(of(terminal.as_ref()));
        self.with_head(Head { terminal, agg, ..self.head().clone() })
    }
    /// `lead` once `node` replaces a child (`replacing`) or is added, without reading the
    /// other children.
    fn lead_with(&self, replacing: bool, node: &Node) -> Option<u8> {
        let others = self.children().len() - usize::from(replacing);
        match first_own_byte(node) {
            Some(x) if others == 0 || self.lead() == Some(x) => Some(x),
            _ => None,
        }
    }
    /// The same node with child `b` set to `node` (added or replaced).
    pub(crate) fn with_child(&self, b: u8, node: Node) -> Inner {
        let slot = each_layout!(self, body => body.slots.slot_of(b));
        let lead = self.lead_with(slot.is_some(), &node);
        let agg = self.agg_with(b, &node);
        if let Some(slot) = slot {
            // Replacing a child (every level of a path copy but the last) keeps the layout:
            // copy the slots in one pass instead of rebuilding the node from entries.
            return same_layout!(self, body => body.replaced(slot, node, lead, agg));
        }
        let mut entries = self.children().entries();
        entries.insert(entries.partition_point(|e| e.0 < b), (b, node));
        let kind = next_kind(self.kind(), entries.len());
        Inner::with_lead(self.prefix(), self.terminal().cloned(), kind, entries, Lead::Given(lead), Some(agg))
    }
    /// `agg` once `node` becomes child `b` (replacing the child there, if any), reading only
    /// the child replaced.
    #[inline]
    fn agg_with(&self, b: u8, node: &Node) -> Agg {
        let old = self.children().get(b).map_or(Agg::ZERO, Node::agg);
        self.agg().minus(old).plus(node.agg())
    }
    /// `with_child(b, node)` for an existing child `b`, with the other children *lent*: the
    /// copy holds them without taking their counts, so the two nodes share one count per
    /// child until the loan is paid, by exactly one of
    /// - `release_lent(b)` on `self` once nobody else can reach it: `self` is freed and its
    ///   counts pass to the copy (the write path's usual case: nothing takes or drops a count
    ///   on the siblings, ~30% of a random overwrite's time when it did);
    /// - `settle_lent(b)` on `self` while it is alive: the copy gets counts of its own.
    ///
    /// `None` if `b` is not a child (nothing is built).
    ///
    /// # Safety
    /// Until one of the two is called, neither `self` nor the copy may be dropped, and none of
    /// their children's counts may be dropped through them. That holds on panic paths too: a
    /// copy (or a root built on it) that cannot be published is leaked, never dropped (as
    /// `RootCell::claim` does), and the loan is settled through `self`.
    #[expect(unsafe_code, reason = "see lend_slots")]
    pub(crate) unsafe fn with_child_lent(&self, b: u8, node: Node) -> Option<Inner> {
        let slot = each_layout!(self, body => body.slots.slot_of(b))?;
        let lead = self.lead_with(true, &node);
        let agg = self.agg_with(b, &node);
        // SAFETY: passed on to the caller.
        Some(same_layout!(self, body => unsafe { body.replaced_lent(slot, node, lead, agg) }))
    }
    /// Pays a loan taken by `with_child_lent(b, ..)` while `self` stays alive: takes a count
    /// on every child but `b` for the copy.
    pub(crate) fn settle_lent(&self, b: u8) {
        for (k, child) in self.children().iter() {
            if k != b {
                std::mem::forget(child.clone());
            }
        }
    }
    /// Pays a loan taken by `with_child_lent(b, ..)` by freeing `self`, if this is its last
    /// count: its children's counts (all but `b`'s) pass to the copy, and child `b` is
    /// returned with its count. `Err(self)` if another count on `self` exists; the caller
    /// then settles instead.
    pub(crate) fn release_lent(self, b: u8) -> Result<Option<Node>, Inner> {
        match self {
            Inner::S2(x) => release_body(x, b).map_err(Inner::S2),
            Inner::S4(x) => release_body(x, b).map_err(Inner::S4),
            Inner::S6(x) => release_body(x, b).map_err(Inner::S6),
            Inner::S8(x) => release_body(x, b).map_err(Inner::S8),
            Inner::S11(x) => release_body(x, b).map_err(Inner::S11),
            Inner::S16(x) => release_body(x, b).map_err(Inner::S16),
            Inner::N48(x) => release_body(x, b).map_err(Inner::N48),
            Inner::N256(x) => release_body(x, b).map_err(Inner::N256),
        }
    }
    /// The counts on this node's allocation (tests check that path copies pay their loans).
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        each_layout!(self, b => Shared::count(b))
    }
    /// The same node without child `b`. (`lead` still holds for the children left.)
    pub(crate) fn without_child(&self, b: u8) -> Inner {
        let removed = self.children().get(b).map_or(Agg::ZERO, Node::agg);
        let mut entries = self.children().entries();
        entries.retain(|e| e.0 != b);
        let kind = next_kind(self.kind(), entries.len());
        let agg = Some(self.agg().minus(removed));
        Inner::with_lead(
            self.prefix(),
            self.terminal().cloned(),
            kind,
            entries,
            Lead::Given(self.lead()),
            agg,
        )
    }

    /// Encoded size of this node's record plus its terminal's (children not included).
    pub(crate) fn encoded_len(&self) -> usize {
        inner_len(self.kind(), self.prefix().len(), self.children().len(), self.terminal().is_some())
            + self.terminal().map_or(0, |t| t.encoded_len())
    }
    /// The footprint of this node and its terminal, children excluded: the node's allocation
    /// (head and slots), a prefix too long to be inline, the terminal.
    pub(crate) fn footprint(&self) -> Footprint {
        let head = self.head();
        let prefix = match &head.prefix {
            Prefix::Inline { .. } => 0,
            Prefix::Heap(b) => b.len(),
        };
        let body = each_layout!(self, b => std::mem::size_of_val::<Body<_>>(b));
        let terminal = head.terminal.as_ref().map_or(0, |t| t.memory());
        Footprint {
            encoded: self.encoded_len() as isize,
            memory: (ARC_COUNTS + body + prefix + terminal) as isize,
        }
    }
}

impl<'a> Children<'a> {
    pub(crate) fn len(self) -> usize {
        match self {
            Children::Sorted { keys, .. } => keys.len(),
            Children::Indexed { ptrs, .. } => ptrs.len(),
            Children::Direct { len, .. } => usize::from(len),
        }
    }
    pub(crate) fn is_empty(self) -> bool {
        self.len() == 0
    }
    #[inline]
    pub(crate) fn get(self, b: u8) -> Option<&'a Node> {
        match self {
            Children::Sorted { keys, ptrs } => ptrs[keys.iter().position(|&k| k == b)?].as_ref(),
            Children::Indexed { index, ptrs, .. } => {
                let slot = usize::from(index[usize::from(b)]).checked_sub(1)?;
                ptrs.get(slot)?.as_ref()
            }
            Children::Direct { ptrs, .. } => ptrs[usize::from(b)].as_ref(),
        }
    }
    /// Children in ascending key order.
    pub(crate) fn iter(self) -> ChildIter<'a> {
        ChildIter { children: self, pos: 0 }
    }
    /// Children with key >= `b`, ascending.
    pub(crate) fn iter_from(self, b: u8) -> ChildIter<'a> {
        let pos = match self {
            Children::Sorted { keys, .. } => keys.iter().take_while(|&&k| k < b).count(),
            _ => usize::from(b),
        };
        ChildIter { children: self, pos }
    }
    /// Owned (key, child) pairs, ascending.
    pub(crate) fn entries(self) -> Vec<(u8, Node)> {
        let mut v = Vec::with_capacity(self.len() + 1);
        v.extend(self.iter().map(|(b, n)| (b, n.clone())));
        v
    }
}

pub(crate) struct ChildIter<'a> {
    children: Children<'a>,
    pos: usize,
}

impl<'a> Iterator for ChildIter<'a> {
    type Item = (u8, &'a Node);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self.children {
            Children::Sorted { keys, ptrs } => {
                let i = self.pos;
                self.pos += 1;
                Some((*keys.get(i)?, ptrs[i].as_ref()?))
            }
            Children::Indexed { index, ptrs, .. } => {
                while self.pos < 256 {
                    let b = self.pos;
                    self.pos += 1;
                    if let Some(slot) = usize::from(index[b]).checked_sub(1) {
                        return ptrs.get(slot)?.as_ref().map(|p| (b as u8, p));
                    }
                }
                None
            }
            Children::Direct { ptrs, .. } => {
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
            // The link is its parent's slot; the linked frame has its own size.
            Node::Link(cell) => Footprint { encoded: link_len(cell.id.0) as isize, memory: 0 },
        }
    }
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Node::Inner(i) if i.is_empty())
    }
    /// The keys, weight and links of this subtree within its frame (a link counts as one
    /// link: its keys are in its frame's totals).
    #[inline]
    pub(crate) fn agg(&self) -> Agg {
        match self {
            Node::Leaf(l) => Agg::key(l.weight()),
            Node::Inner(i) => i.agg(),
            Node::Link(_) => Agg { weight: 0, keys: 0, links: 1 },
        }
    }
    /// Whether `self` and `other` are the same node (the same allocation).
    pub(crate) fn same(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Leaf(a), Node::Leaf(b)) => Shared::ptr_eq(a, b),
            (Node::Link(a), Node::Link(b)) => Arc::ptr_eq(a, b),
            // Two live allocations never share an address.
            (Node::Inner(a), Node::Inner(b)) => a.address() == b.address(),
            _ => false,
        }
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
            Node::Leaf(l) => Some(Node::Leaf(Shared::new(l.with_suffix(&[extra, l.suffix()].concat())))),
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

    fn leaf(v: u8) -> Node {
        Node::Leaf(Shared::new(Leaf::new(&[], &[v], 1, u64::from(v))))
    }

    fn values(inner: &Inner) -> Vec<(u8, u8)> {
        inner
            .children()
            .iter()
            .map(|(b, n)| match n {
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
                assert!(matches!(node.children().get(k), Some(Node::Leaf(l)) if l.value()[0] == k));
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
            let entries: Vec<(u8, Node)> =
                (0..count).map(|i| ((i * 251 % 256) as u8, leaf(i as u8))).collect();
            let mut sorted = entries.clone();
            sorted.sort_by_key(|e| e.0);
            let node = Inner::with_entries(b"p", None, None, sorted);
            let target = entries[count / 2].0;
            let copy = node.with_child(target, leaf(255));
            assert_eq!((copy.kind(), copy.children().len(), copy.prefix()), (node.kind(), count, &b"p"[..]));
            for (b, child) in copy.children().iter() {
                let Node::Leaf(l) = child else { panic!("not a leaf") };
                let Some(Node::Leaf(old)) = node.children().get(b) else { panic!("missing {b}") };
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
            let leaf = Leaf::new(&suffix, &value, 77, WEIGHT_MAX + 5);
            assert_eq!((leaf.suffix(), leaf.value(), leaf.version()), (&suffix[..], &value[..], 77));
            let inline = matches!(leaf.bytes, LeafBytes::Inline { .. });
            assert_eq!(inline, suffix_len + value_len <= LEAF_INLINE_MAX, "{suffix_len}+{value_len}");
            let moved = leaf.with_suffix(b"xyz");
            assert_eq!((moved.suffix(), moved.value(), moved.version()), (&b"xyz"[..], &value[..], 77));
            // A weight past 48 bits is stored as the largest; a moved leaf keeps it.
            assert_eq!((leaf.weight(), moved.weight()), (WEIGHT_MAX, WEIGHT_MAX));
            let small = Leaf::new(&suffix, &value, 77, 0x1234_5678_9ABC);
            assert_eq!(small.weight(), 0x1234_5678_9ABC);
            assert_eq!(leaf.encoded_len(), leaf_len(suffix_len, value_len, 77));
        }
    }

    #[test]
    fn sorted_nodes_take_the_smallest_capacity_that_holds_them() {
        let size = |inner: &Inner| inner.footprint().memory as usize - ARC_COUNTS;
        for len in 0..=16usize {
            let entries: Vec<(u8, Node)> = (0..len).map(|i| (i as u8, leaf(i as u8))).collect();
            let node = Inner::with_entries(b"p", None, None, entries);
            let want = match len {
                0..=2 => std::mem::size_of::<Body<Sorted<2>>>(),
                3..=4 => std::mem::size_of::<Body<Sorted<4>>>(),
                5..=6 => std::mem::size_of::<Body<Sorted<6>>>(),
                7..=8 => std::mem::size_of::<Body<Sorted<8>>>(),
                9..=11 => std::mem::size_of::<Body<Sorted<11>>>(),
                _ => std::mem::size_of::<Body<Sorted<16>>>(),
            };
            assert_eq!(size(&node), want, "{len} children");
            // A path copy keeps the capacity.
            if let Some((b, _)) = node.children().iter().next() {
                assert_eq!(size(&node.with_child(b, leaf(9))), want, "{len} children, copied");
            }
        }
    }

    #[test]
    fn iter_from_skips_smaller_keys_in_every_layout() {
        for count in [3usize, 10, 30, 200] {
            let entries: Vec<(u8, Node)> = (0..count).map(|i| (i as u8, leaf(i as u8))).collect();
            let node = Inner::with_entries(b"p", None, None, entries);
            let from: Vec<u8> = node.children().iter_from(2).map(|(b, _)| b).collect();
            assert_eq!(from, (2..count as u8).collect::<Vec<_>>(), "count {count}");
        }
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// A child slot is a pointer and its variant; a leaf is one allocation of its own size.
    #[test]
    fn nodes_stay_small() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
        assert_eq!(std::mem::size_of::<Option<Node>>(), 16);
        assert!(std::mem::size_of::<Leaf>() <= 88, "Leaf is {} bytes", std::mem::size_of::<Leaf>());
        // With its reference count, an inline leaf fits the allocator's 96-byte size class.
        let leaf = Leaf::new(b"45.bin", &[b'v'; 62], 1, WEIGHT_MAX);
        assert_eq!(leaf.memory(), 96, "a bench leaf's allocation");
    }
}

// A frame's root cell holds the root's `Node` itself and still fits the 56 bytes the frame
// cell's first line leaves it (`sync/root_cell.rs`). Loom's atomics are larger, so not there.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<crate::sync::root_cell::RootCell<Node>>() == 56);

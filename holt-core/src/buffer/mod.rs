//! The frame cache: each frame's root is published through a `FrameCell`; frames are
//! evicted by a clock (second-chance) sweep when the cached bytes exceed the memory budget,
//! and loaded back from a `FrameSource` on first touch.
//!
//! The budget counts what resident frames cost in memory: the heap bytes of their decoded
//! nodes (`FrameSize::memory`), not their encoded size. Decoded nodes take about 1.5 times
//! their encoded bytes, so a budget of encoded bytes let the process grow well past it.
//!
//! Invariants:
//! - A frame's root goes from `None` (evicted) to `Some` only under the cell's `load_lock`,
//!   and from `Some` to `None` only under its write latch while the frame is clean, or dirty
//!   with its current change log standing for every change since its disk state
//!   (`FrameCell::detach_changes`), or once it is retired (`Tree::release_retired`): a frame
//!   a writer changed is never replaced by older bytes. An evicted frame may still be
//!   written: its change logs then hold the writes (`Tree::write_unloaded`), and reads and
//!   loads apply them.
//! - A frame's lead (the first byte of its root's own bytes) is set only by `publish`, with
//!   the root it describes, and survives eviction.
//! - A dirty frame whose log gave up (it is written whole next) or that a checkpoint in
//!   flight captured is not evicted.
//! - The root frame is never evicted: it is touched by every operation.

mod filter;

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex};

use filter::KeyFilter;

use crate::error::{Error, Location, Result};
use crate::format::delta::{entry_at, find_indexed, key_at, DeltaEntry};
use crate::format::frame::{
    self, FrameHead, FRAME_HEADER_LEN, PAGES_PER_FRAME, PAGE_BYTES, STORE_ALIGN_BYTES,
};
use crate::format::{FrameId, FRAME_SIZE};
use crate::sync::root_cell::RootCell;

/// Where evicted frames are read back from: implemented by the durable layer over the frame
/// files, and by an in-memory map in tests.
pub(crate) trait FrameSource: Send + Sync {
    /// Reads the last checkpointed image of frame `id` into the start of `buf` (exactly
    /// `FRAME_SIZE` long; the caller reuses it across reads) and returns how many bytes it
    /// read: the image's stored length when known, else the whole `FRAME_SIZE`.
    fn read_frame(&self, id: FrameId, buf: &mut [u8]) -> Result<usize>;
    /// Reads the bytes `[offset, offset + buf.len())` of frame `id`'s last checkpointed image
    /// into `buf`, through the operating system's page cache (a point read fetches the few
    /// pages its path crosses, and pages read again are served from memory the process does
    /// not hold). Whole pages: `offset` and the length are multiples of `PAGE_BYTES`.
    fn read_pages(&self, id: FrameId, offset: usize, buf: &mut [u8]) -> Result<()>;
    /// Calls `f` once: with frame `id`'s last checkpointed slot (`FRAME_SIZE` bytes, the
    /// image unverified but for the manifest's checksum of it) and its deltas' stored bytes
    /// (likewise) lent in place from a mapping of the page cache, or with `None` where the
    /// source cannot lend them all (`f` then reads pages with `read_pages` and deltas with
    /// `read_delta`, and the source holds no lock meanwhile). Nothing lent can be freed while
    /// `f` runs. With `resident` of `Some(n)`, lends only if the page cache holds the slot's
    /// first `n` bytes and every delta, so that reading them waits for no disk; otherwise
    /// `f(None)`, having read nothing.
    fn lend_image(
        &self,
        id: FrameId,
        resident: Option<usize>,
        f: &mut dyn FnMut(Option<Lent<'_>>) -> Result<()>,
    ) -> Result<()> {
        let _ = (id, resident);
        f(None)
    }
    /// How many deltas apply on top of frame `id`'s image (its image alone is stale if any).
    fn delta_count(&self, id: FrameId) -> usize {
        let _ = id;
        0
    }
    /// Reads delta `index` (from 0, in the order they apply) of frame `id` into the start of
    /// `buf` (`FRAME_SIZE` long) and returns its stored length and its file and byte offset.
    fn read_delta(&self, id: FrameId, index: usize, buf: &mut [u8]) -> Result<(usize, (PathBuf, u64))> {
        let _ = (index, buf);
        Err(Error::InvalidArgument(format!("frame {id} has no deltas here")))
    }
    /// The file holding frame `id` and the frame's byte offset in it, for corruption reports.
    fn locate(&self, id: FrameId) -> (PathBuf, u64) {
        let _ = id;
        (PathBuf::from("<frames>"), 0)
    }
}

/// What a source lends a walk in place (`FrameSource::lend_image`): a frame's slot, and each
/// of its deltas' stored bytes, in the order they apply.
pub(crate) struct Lent<'a> {
    pub slot: &'a [u8],
    /// Each delta's byte offset in the file and its bytes.
    pub deltas: &'a [(u64, &'a [u8])],
}

/// A delta of a frame, verified whole once (checksum, frame, chain position, entries in
/// ascending key order) when it was first read or lent, with where each entry starts: a walk
/// then finds a key by binary search, and nothing checks the delta again.
pub(crate) struct Delta {
    id: FrameId,
    /// Its bytes, when held in memory (read through `FrameSource::read_delta`); `None` when
    /// only the index is kept and each walk is lent the bytes (`Lent::deltas`).
    bytes: Option<Vec<u8>>,
    /// Its header's checksum field: tells it from another delta lent in its place.
    sum: Option<u32>,
    /// Where it lies (file and byte offset), for errors.
    location: (PathBuf, u64),
    /// Body offsets of its entries, in key order.
    entries: Vec<u32>,
    /// Each entry's `key_fence`, beside `entries`: a listing's binary search reads the keys
    /// themselves (a cache miss each, in the delta's bytes) only where fences tie.
    fences: Vec<u64>,
    /// Its keys, for a point read to skip it without a search when its key is absent.
    filter: KeyFilter,
    /// In the newest delta of a chain of several that a walk keeps (`BufferPool::walk_deltas`),
    /// each key's newest entry over the chain, in key order (`merge_chain`): a listing reads
    /// this one list instead of merging the deltas' own on every walk. Empty otherwise (a
    /// listing then merges the chain on the spot).
    chain_index: Vec<ChainEntry>,
}

/// An entry of a chain's merged index (`Delta::chain_index`): the delta (its place in the
/// chain) holding a key's newest entry, and that entry's body offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChainEntry {
    delta: u32,
    at: u32,
    /// The entry's `key_fence`.
    fence: u64,
}

/// The first eight bytes of `key`, zero-padded, as a big-endian number. Where two keys'
/// fences differ they order the keys: the first byte that differs is a byte of both, or
/// the shorter key ends before it and is the other's prefix; a byte of zero against the
/// padding ties them, and only a tie needs the keys themselves.
#[expect(clippy::big_endian_bytes, reason = "a number that orders as the bytes do; never stored")]
pub(crate) fn key_fence(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

/// The chain `deltas` of frame `id` as walks read it: each delta from its kept bytes or from
/// what the source lent in its place (`lent`: each delta's offset and bytes).
fn delta_refs<'a>(
    id: FrameId,
    deltas: &'a [Delta],
    lent: Option<&[(u64, &'a [u8])]>,
) -> Result<Vec<DeltaRef<'a>>> {
    let lent_delta = |i: usize| lent.and_then(|l| l.get(i)).map(|&(_, bytes)| bytes);
    deltas
        .iter()
        .enumerate()
        .map(|(i, delta)| delta.read(lent_delta(i)))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::InvalidArgument(format!("frame {id}: a delta was neither kept nor lent")))
}

/// Each key's newest entry over the chain `deltas` (oldest first), in key order.
fn merge_chain(deltas: &[DeltaRef<'_>]) -> Result<Vec<ChainEntry>> {
    // The key of each delta's entry `next[d]`, if it has one.
    fn head<'a>(delta: &DeltaRef<'a>, next: usize) -> Result<Option<&'a [u8]>> {
        match delta.delta.entries.get(next) {
            Some(&at) => key_at(delta.body, at).map(Some).map_err(|e| delta.corruption(e)),
            None => Ok(None),
        }
    }
    let mut next = vec![0usize; deltas.len()];
    let mut merged = Vec::with_capacity(deltas.iter().map(|d| d.delta.entries.len()).sum());
    // Bound: every step moves at least one delta on.
    loop {
        // The smallest key any delta is at; of the deltas at it, the newest (the last) wins.
        let mut newest: Option<(usize, &[u8])> = None;
        for (d, delta) in deltas.iter().enumerate() {
            let Some(key) = head(delta, next[d])? else { continue };
            if newest.is_none_or(|(_, smallest)| key <= smallest) {
                newest = Some((d, key));
            }
        }
        let Some((d, key)) = newest else { break };
        merged.push(ChainEntry {
            delta: d as u32,
            at: deltas[d].delta.entries[next[d]],
            fence: key_fence(key),
        });
        for (e, delta) in deltas.iter().enumerate() {
            if head(delta, next[e])? == Some(key) {
                next[e] += 1;
            }
        }
    }
    merged.shrink_to_fit();
    Ok(merged)
}

/// A chain's entries as a listing reads them: each key's newest entry, in key order (the
/// newest delta's `chain_index`, or a lone delta's own entries), found by binary search and
/// read as the listing reaches them.
pub(crate) struct ChainView<'r, 'a> {
    deltas: &'r [DeltaRef<'a>],
    index: ChainIndex<'r>,
}

enum ChainIndex<'r> {
    Lone(&'r [u32]),
    Merged(std::borrow::Cow<'r, [ChainEntry]>),
}

impl<'r, 'a> ChainView<'r, 'a> {
    /// The view of the chain `deltas` (oldest first; none gives an empty view).
    pub(crate) fn new(deltas: &'r [DeltaRef<'a>]) -> Result<Self> {
        let index = match deltas {
            [] => ChainIndex::Lone(&[]),
            [lone] => ChainIndex::Lone(&lone.delta.entries),
            [.., newest] if !newest.delta.chain_index.is_empty() => {
                ChainIndex::Merged(std::borrow::Cow::Borrowed(&newest.delta.chain_index))
            }
            // A chain not kept (`walk_deltas` indexes only those it keeps): merged here.
            _ => ChainIndex::Merged(std::borrow::Cow::Owned(merge_chain(deltas)?)),
        };
        Ok(ChainView { deltas, index })
    }

    pub(crate) fn len(&self) -> usize {
        match &self.index {
            ChainIndex::Lone(entries) => entries.len(),
            ChainIndex::Merged(merged) => merged.len(),
        }
    }

    /// The delta and body offset of entry `i`.
    fn locate(&self, i: usize) -> (DeltaRef<'a>, u32) {
        match &self.index {
            ChainIndex::Lone(entries) => (self.deltas[0], entries[i]),
            ChainIndex::Merged(merged) => (self.deltas[merged[i].delta as usize], merged[i].at),
        }
    }

    /// The key of entry `i` (relative to the frame), or `None` past the last.
    pub(crate) fn key(&self, i: usize) -> Result<Option<&'a [u8]>> {
        if i >= self.len() {
            return Ok(None);
        }
        let (delta, at) = self.locate(i);
        key_at(delta.body, at).map(Some).map_err(|e| delta.corruption(e))
    }

    /// Entry `i` (below `len`).
    pub(crate) fn entry(&self, i: usize) -> Result<DeltaEntry<'a>> {
        let (delta, at) = self.locate(i);
        entry_at(delta.body, at).map_err(|e| delta.corruption(e))
    }

    /// The fence (`key_fence`) of entry `i` (below `len`).
    fn fence(&self, i: usize) -> u64 {
        match &self.index {
            ChainIndex::Lone(_) => self.deltas[0].delta.fences[i],
            ChainIndex::Merged(merged) => merged[i].fence,
        }
    }

    /// The first entry from `from` whose key is not below `key`, by binary search on the
    /// entries' fences, reading a key only where its fence ties `key`'s (a probe of the keys
    /// themselves was a tenth of a 100-key scan of evicted frames).
    pub(crate) fn seek(&self, from: usize, key: &[u8]) -> Result<usize> {
        let target = key_fence(key);
        let (mut low, mut high) = (from, self.len());
        // Bound: the range shrinks every step.
        while low < high {
            let mid = low + (high - low) / 2;
            let below = match self.fence(mid).cmp(&target) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                std::cmp::Ordering::Equal => self.key(mid)?.is_some_and(|k| k < key),
            };
            match below {
                true => low = mid + 1,
                false => high = mid,
            }
        }
        Ok(low)
    }

    /// The first entry from `from` whose key does not begin with `prefix` (the entries from
    /// `from` on whose keys begin with it come first).
    pub(crate) fn past_prefix(&self, from: usize, prefix: &[u8]) -> Result<usize> {
        self.partition(from, |k| k.starts_with(prefix))
    }

    /// The first entry from `from` whose key fails `holds`, by binary search: `holds` is true
    /// of the keys from `from` up to some entry and false of the rest.
    fn partition(&self, from: usize, holds: impl Fn(&[u8]) -> bool) -> Result<usize> {
        let (mut low, mut high) = (from, self.len());
        // Bound: the range shrinks every step.
        while low < high {
            let mid = low + (high - low) / 2;
            match self.key(mid)?.is_some_and(&holds) {
                true => low = mid + 1,
                false => high = mid,
            }
        }
        Ok(low)
    }
}

impl Delta {
    /// Verifies `bytes` as delta `index` (from 0) of frame `id`'s chain, found at `location`;
    /// keeps the bytes if `keep` (else each walk must be lent them).
    pub(crate) fn verify(
        id: FrameId,
        index: usize,
        bytes: &[u8],
        location: (PathBuf, u64),
        keep: bool,
    ) -> Result<Delta> {
        let fail = |offset: usize, reason: String| corruption_at(&location, id, offset, reason);
        let view = crate::format::delta::open(bytes, id).map_err(|e| fail(e.offset, e.reason))?;
        if view.chain_index as usize != index + 1 {
            return Err(fail(
                28,
                format!("delta is number {} of its chain, expected {}", view.chain_index, index + 1),
            ));
        }
        let entries = view.entry_offsets().map_err(|e| fail(e.offset, e.reason))?;
        let body = crate::format::delta::verified_body(bytes);
        let mut hashes = Vec::with_capacity(entries.len());
        let mut fences = Vec::with_capacity(entries.len());
        for &at in &entries {
            let key = key_at(body, at).map_err(|e| fail(e.offset, e.reason))?;
            hashes.push(key_hash(key));
            fences.push(key_fence(key));
        }
        let filter = KeyFilter::new(hashes.into_iter());
        let stored = frame::claimed_used(bytes).next_multiple_of(STORE_ALIGN_BYTES).min(bytes.len());
        let sum = frame::image_sum(bytes);
        let bytes = keep.then(|| bytes[..stored].to_vec());
        Ok(Delta { id, bytes, sum, location, entries, fences, filter, chain_index: Vec::new() })
    }

    /// Heap bytes it holds.
    fn memory(&self) -> usize {
        self.bytes.as_ref().map_or(0, Vec::len)
            + self.entries.len() * size_of::<u32>()
            + self.fences.len() * size_of::<u64>()
            + self.filter.memory()
            + self.chain_index.len() * size_of::<ChainEntry>()
    }

    /// Whether `bytes` (lent in its place) are this delta's.
    fn is(&self, bytes: &[u8]) -> bool {
        self.sum.is_some() && self.sum == frame::image_sum(bytes)
    }

    /// This delta read from its kept bytes, or from `lent` (its bytes lent in place).
    fn read<'a>(&'a self, lent: Option<&'a [u8]>) -> Option<DeltaRef<'a>> {
        let bytes = self.bytes.as_deref().or(lent)?;
        Some(DeltaRef { body: crate::format::delta::verified_body(bytes), delta: self })
    }
}

/// A verified delta as a walk reads it: its body, borrowed from its kept or lent bytes.
#[derive(Clone, Copy)]
pub(crate) struct DeltaRef<'a> {
    body: &'a [u8],
    delta: &'a Delta,
}

impl<'a> DeltaRef<'a> {
    /// Every entry, in key order.
    pub(crate) fn entries(&self) -> Result<Vec<DeltaEntry<'a>>> {
        let body = self.body;
        self.delta.entries.iter().map(|&at| entry_at(body, at).map_err(|e| self.corruption(e))).collect()
    }

    /// The entry for `key` (relative to the frame), if the delta has one. `hash` is the
    /// key's `key_hash`.
    pub(crate) fn find(&self, key: &[u8], hash: u32) -> Result<Option<DeltaEntry<'a>>> {
        if !self.delta.filter.may_contain(hash) {
            return Ok(None);
        }
        find_indexed(self.body, &self.delta.entries, key).map_err(|e| self.corruption(e))
    }

    /// The bytes of its body (its entries).
    pub(crate) fn len(&self) -> usize {
        self.body.len()
    }

    fn corruption(&self, e: crate::format::node::RecordError) -> Error {
        corruption_at(&self.delta.location, self.delta.id, e.offset, e.reason)
    }
}

/// What a frame's root tells a listing about the frame without being loaded.
pub(crate) trait FrameRoot: Clone {
    /// The first of the root's own bytes (after the link's key byte), if it has one: every key
    /// in the frame then continues with it.
    fn lead(&self) -> Option<u8>;
    /// The heap bytes of this node alone, as a change log's state (a leaf).
    fn state_bytes(&self) -> usize;
}

/// `FrameCell::lead` when the root has none or it is not known (any value above a byte).
const LEAD_UNKNOWN: u16 = 0x100;
/// `FrameCell::lead` when the root is known to have no own byte.
const LEAD_NONE: u16 = 0x101;

/// What a frame costs: its encoded bytes (header and records: what decides splits and merges)
/// and the heap bytes of its decoded nodes (what the memory budget counts; requested bytes,
/// the allocator's rounding not included). Writers keep both exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FrameSize {
    pub encoded: usize,
    pub memory: usize,
}

/// One frame: the published root of a subtree, with the state the cache and writers need.
///
/// The fields every read touches (`root`, `retired`, `referenced`) come first and share one
/// cache line: `repr(C)` keeps the order, the alignment starts the line.
#[repr(C, align(64))]
pub(crate) struct FrameCell<N> {
    /// The frame's current root; `None` while the frame is evicted.
    pub(crate) root: RootCell<N>,
    /// Set when the frame was merged into its parent: readers that reach it restart.
    retired: AtomicBool,
    /// The clock's second-chance bit, set by every access.
    referenced: AtomicBool,
    /// The first of the root's own bytes (`FrameRoot::lead`), or `LEAD_UNKNOWN`. Kept through
    /// eviction (the frame's bytes do not change while it is out), unknown for a frame not
    /// loaded since open. A listing rolls a linked frame up from this without loading its
    /// root: see `publish` for why that reads a state the frame really had.
    lead: AtomicU16,
    pub(crate) id: FrameId,
    /// Held by a writer while it changes the frame (and by the evictor while it drops it).
    pub(crate) latch: Mutex<()>,
    /// Serializes loading an evicted frame, so it is decoded once.
    load_lock: Mutex<()>,
    /// Bumped on every published change.
    dirty_generation: AtomicU64,
    /// The generation the last checkpoint wrote; the frame is clean when both are equal.
    clean_generation: AtomicU64,
    /// Encoded size of the frame (header + records), kept exact by writers.
    size_bytes: AtomicUsize,
    /// Heap bytes of the frame's decoded nodes while resident, kept exact by writers.
    memory_bytes: AtomicUsize,
    /// Pages that reads of the frame's image (point reads, listings) fetched since it was
    /// last admitted, halved for every admission epoch since they were counted: the epoch
    /// in the high 32 bits, the pages in the low (see `BufferPool::admission_epoch`).
    image_pages: AtomicU64,
    /// The verified header and page table of the frame's image on disk, kept from the first
    /// point read that fetched them while the frame is clean (its image cannot move then),
    /// so later point reads skip page 0: 552 bytes per frame, not counted in the budget.
    image_head: Mutex<Option<Arc<FrameHead>>>,
    /// The frame's deltas on disk, verified and indexed by the first walk that met them while
    /// the frame is evicted, kept until its chain changes (`mark_clean`) or it is loaded: a
    /// read or write walk of a frame with deltas would otherwise read and check them whole
    /// every time. Where the source lends deltas in place only their indexes are kept (a few
    /// bytes an entry); otherwise their bytes too. Counted in the cache's bytes, within
    /// `DELTA_CACHE_FRACTION` of the budget; when that share is full, the kept deltas of a
    /// frame not walked since the hand last passed make room (`BufferPool::make_delta_room`).
    kept_deltas: Mutex<Option<Arc<Vec<Delta>>>>,
    /// The delta clock's second-chance bit: set by a walk that used the kept deltas.
    deltas_referenced: AtomicBool,
    /// Whether the frame is in the delta clock (`BufferPool::delta_ring`); changed only under
    /// that ring's lock, so a frame is in it at most once.
    in_delta_ring: AtomicBool,
    /// Bytes of the frame's deltas that reads went through again since its chain last changed
    /// (`BufferPool::count_reread`): past `REWRITE_AFTER_REREAD_BYTES` the next checkpoint
    /// writes the frame whole, and its chain goes (`FrameCell::wants_rewrite`).
    reread_bytes: AtomicU64,
    /// The frame holding the link to this one (empty for the root frame).
    parent: Mutex<Weak<FrameCell<N>>>,
    /// Keys stored in this frame and every frame below it, and the sum of their weights
    /// (`Tree::usage`). Writers add their changes here and in every ancestor's; kept
    /// through eviction, and stored in the manifest.
    subtree_keys: AtomicU64,
    subtree_weight: AtomicU64,
    /// The changes written since the last capture (for the next checkpoint's delta), and
    /// those the checkpoint in flight captured (until it marks the frame clean).
    changes: Mutex<ChangeLogs<N>>,
}

/// A frame's change logs: the one writes append to, and the one a checkpoint captured and is
/// writing. While a frame is evicted these hold the writes made to it since its image and
/// deltas on disk (see `Tree::write_unloaded`): reads and loads apply `captured`, then
/// `current`, on top of what they read from disk.
#[derive(Debug)]
struct ChangeLogs<N> {
    current: ChangeLog<N>,
    captured: Option<Arc<ChangeLog<N>>>,
}

impl<N> Default for ChangeLogs<N> {
    fn default() -> Self {
        ChangeLogs { current: ChangeLog::default(), captured: None }
    }
}

/// What a frame's writes changed since the last checkpoint captured it: each write's key
/// (relative to the frame: the bytes after its parent's child byte) with the node it left
/// there (the leaf holding the value and version it stored; `None` for a deletion), so the
/// checkpoint can write a delta instead of the whole frame without looking the keys up
/// again. `whole` means a delta cannot say what changed (a split, a merge, a new frame, too
/// many changes for a delta to pay, or a failed checkpoint that lost the changes it had
/// taken): the next checkpoint writes the whole frame.
#[derive(Debug)]
pub(crate) struct ChangeLog<N> {
    pub whole: bool,
    /// Keys, each as a little-endian u16 length and its bytes, in the order written
    /// (duplicates included): one buffer, so recording a key costs no allocation.
    keys: Vec<u8>,
    /// What each write left under its key, in the same order. A leaf held here after a
    /// later write replaced it in the tree stays allocated until the capture is done.
    states: Vec<Option<N>>,
    /// Where each entry's key starts in `keys`.
    offsets: Vec<u32>,
    /// The last entry whose key has each checksum (`key_hash`): a point read of an evicted
    /// frame looks its key up here instead of scanning every entry (a log holds thousands).
    /// Kept for the entries recorded while the frame was evicted (the only logs looked up);
    /// a resident write's entry skips it, and sets `unindexed`.
    index: HashMap<u32, u32, BuildHasherDefault<KeyHash>>,
    /// Whether some entry is not in `index`: lookups then scan.
    unindexed: bool,
    /// What the log holds, counted as a delta's bytes would be (keys and values): what
    /// `CHANGE_LOG_FRACTION` limits.
    accounted: usize,
    /// Heap bytes of the states written while the frame was evicted, held by this log alone
    /// (no root shares them): counted in the cache's bytes until the log is dropped.
    detached: usize,
}

impl<N> Default for ChangeLog<N> {
    fn default() -> Self {
        ChangeLog {
            whole: false,
            keys: Vec::new(),
            states: Vec::new(),
            offsets: Vec::new(),
            index: HashMap::default(),
            unindexed: false,
            accounted: 0,
            detached: 0,
        }
    }
}

impl<N> ChangeLog<N> {
    /// A log that gave up: the frame is written whole.
    fn given_up() -> Self {
        ChangeLog { whole: true, ..ChangeLog::default() }
    }

    /// Every change recorded, in the order written.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&N>)> {
        let mut rest = &self.keys[..];
        let keys = std::iter::from_fn(move || {
            let (len, tail) = rest.split_first_chunk::<2>()?;
            let (key, tail) = tail.split_at_checked(usize::from(u16::from_le_bytes(*len)))?;
            rest = tail;
            Some(key)
        });
        keys.zip(self.states.iter().map(Option::as_ref))
    }

    /// The bytes a delta of every entry would take, about.
    pub(crate) fn accounted_bytes(&self) -> usize {
        self.accounted
    }

    /// The state the last entry for `key` left, if any entry names it.
    fn state_of(&self, key: &[u8]) -> Option<Option<&N>> {
        if !self.unindexed {
            let &at = self.index.get(&key_hash(key))?;
            if self.key_at(at as usize) == key {
                return Some(self.states[at as usize].as_ref());
            }
        }
        // Entries the index lacks, or another key with the same checksum written after this
        // one's last entry: scan.
        let mut last = None;
        for (k, state) in self.iter() {
            if k == key {
                last = Some(state);
            }
        }
        last
    }

    fn key_at(&self, i: usize) -> &[u8] {
        let at = self.offsets[i] as usize;
        let len = usize::from(u16::from_le_bytes([self.keys[at], self.keys[at + 1]]));
        &self.keys[at + 2..at + 2 + len]
    }

    /// Heap bytes of the log's buffers (what they reserved, not what they use).
    fn buffer_bytes(&self) -> usize {
        self.keys.capacity()
            + self.states.capacity() * size_of::<Option<N>>()
            + self.offsets.capacity() * size_of::<u32>()
            // A slot and its control byte.
            + self.index.capacity() * (size_of::<(u32, u32)>() + 1)
    }

    /// Appends an entry; `indexed`: also to `index` (see there).
    fn push(&mut self, key: &[u8], state: Option<N>, indexed: bool) {
        if indexed {
            self.index.insert(key_hash(key), self.states.len() as u32);
        } else {
            self.unindexed = true;
        }
        self.offsets.push(self.keys.len() as u32);
        self.keys.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.keys.extend_from_slice(key);
        self.states.push(state);
    }

    /// `earlier`'s entries, then this log's: a failed checkpoint's capture put back.
    fn after(self, earlier: &ChangeLog<N>) -> ChangeLog<N>
    where
        N: Clone,
    {
        if self.whole || earlier.whole {
            return ChangeLog { detached: self.detached + earlier.detached, ..ChangeLog::given_up() };
        }
        let mut log = ChangeLog {
            keys: Vec::with_capacity(earlier.keys.len() + self.keys.len()),
            states: Vec::with_capacity(earlier.states.len() + self.states.len()),
            accounted: earlier.accounted + self.accounted,
            detached: earlier.detached + self.detached,
            ..ChangeLog::default()
        };
        for (key, state) in earlier.iter().chain(self.iter()) {
            log.push(key, state.cloned(), true);
        }
        log
    }
}

/// A frame's change log gives up (the frame is written whole) past this fraction of the
/// frame's encoded size: the checkpoint writes no delta larger than a quarter of the frame
/// (`checkpoint::DELTA_CHAIN_FRACTION`), and the log is memory.
const CHANGE_LOG_FRACTION: usize = 4;

const _: () = assert!(crate::api::KEY_LEN_MAX <= u16::MAX as usize, "change log lengths are u16");

impl<N> FrameCell<N> {
    /// A frame whose root is in memory. A new frame is dirty (never written).
    pub(crate) fn resident(id: FrameId, root: N, size: FrameSize, dirty: bool) -> Self
    where
        N: FrameRoot,
    {
        let cell = Self::evicted(id);
        cell.publish(root);
        cell.set_size(size);
        if dirty {
            cell.dirty_generation.store(1, Ordering::Relaxed);
            cell.changes.lock().current = ChangeLog::given_up();
        }
        cell
    }

    /// A frame known only by id: loaded from the source on first touch.
    pub(crate) fn evicted(id: FrameId) -> Self {
        FrameCell {
            id,
            root: RootCell::empty(),
            latch: Mutex::new(()),
            load_lock: Mutex::new(()),
            dirty_generation: AtomicU64::new(0),
            clean_generation: AtomicU64::new(0),
            size_bytes: AtomicUsize::new(0),
            memory_bytes: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            referenced: AtomicBool::new(true),
            lead: AtomicU16::new(LEAD_UNKNOWN),
            image_pages: AtomicU64::new(0),
            image_head: Mutex::new(None),
            kept_deltas: Mutex::new(None),
            deltas_referenced: AtomicBool::new(false),
            in_delta_ring: AtomicBool::new(false),
            reread_bytes: AtomicU64::new(0),
            parent: Mutex::new(Weak::new()),
            subtree_keys: AtomicU64::new(0),
            subtree_weight: AtomicU64::new(0),
            changes: Mutex::new(ChangeLogs::default()),
        }
    }

    pub(crate) fn size_bytes(&self) -> usize {
        self.size_bytes.load(Ordering::Relaxed)
    }
    pub(crate) fn size(&self) -> FrameSize {
        FrameSize {
            encoded: self.size_bytes.load(Ordering::Relaxed),
            memory: self.memory_bytes.load(Ordering::Relaxed),
        }
    }
    /// Only under the latch (or the load lock, for a frame being loaded).
    pub(crate) fn set_size(&self, size: FrameSize) {
        self.size_bytes.store(size.encoded, Ordering::Relaxed);
        self.memory_bytes.store(size.memory, Ordering::Relaxed);
    }
    pub(crate) fn generation(&self) -> u64 {
        self.dirty_generation.load(Ordering::Acquire)
    }
    /// The dirty and clean generations: unchanged while nothing changes the frame's
    /// contents or moves its changes to disk.
    pub(crate) fn generations(&self) -> (u64, u64) {
        (self.generation(), self.clean_generation.load(Ordering::Acquire))
    }
    pub(crate) fn is_dirty(&self) -> bool {
        self.generation() != self.clean_generation.load(Ordering::Acquire)
    }
    /// Records a published change (under the latch).
    pub(crate) fn mark_dirty(&self) {
        self.dirty_generation.fetch_add(1, Ordering::AcqRel);
    }
    /// Records that generation `generation` of the frame is on disk (after the manifest
    /// naming it is installed), with the changes captured for it: the captured log goes.
    /// A whole image written there may lie in a new slot: the header a point read kept
    /// describes the old one, so it goes too. Returns the detached bytes released.
    pub(crate) fn mark_clean(&self, generation: u64) -> (usize, usize) {
        *self.image_head.lock() = None;
        self.reread_bytes.store(0, Ordering::Relaxed);
        let released = self.changes.lock().captured.take().map_or(0, |l| l.detached);
        let deltas = self.drop_kept_deltas();
        self.clean_generation.fetch_max(generation, Ordering::AcqRel);
        (released, deltas)
    }
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }
    /// Called before the parent publishes the merged root (see `Tree::try_merge` in `tree/split.rs`).
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }
    /// Publishes `root` as the frame's root, with its lead, under the latch (a frame being
    /// loaded goes through `publish_loaded`).
    ///
    /// A lead that changes is withdrawn before the new root is published and set after it:
    /// a reader that sees a lead saw it while the root it describes was published, so a
    /// rollup made from it is what loading the root at that moment would have given.
    pub(crate) fn publish(&self, root: N)
    where
        N: FrameRoot,
    {
        drop(self.publish_taking(root));
    }
    /// `publish`, returning the old root if no reader borrowed it (`RootCell::replace`).
    pub(crate) fn publish_taking(&self, root: N) -> Option<N>
    where
        N: FrameRoot,
    {
        let old = self.lead.load(Ordering::Relaxed);
        let new = root.lead().map_or(LEAD_NONE, u16::from);
        if old != new && old != LEAD_UNKNOWN {
            self.lead.store(LEAD_UNKNOWN, Ordering::Release);
        }
        let replaced = self.root.replace(Some(root));
        if old != new {
            self.lead.store(new, Ordering::Release);
        }
        replaced
    }
    /// Publishes the root of an evicted frame just read back (under the load lock, not the
    /// latch). The lead goes first: the frame's bytes are those it had when it was evicted (or
    /// checkpointed), so the lead is already true, and a latched writer that gets this root
    /// without waiting for the load lock then also sees it. Stored after the root, a writer
    /// could publish a root with another first byte in between and the loader's late store
    /// would leave a lead the frame lacks.
    pub(crate) fn publish_loaded(&self, root: N)
    where
        N: FrameRoot,
    {
        self.lead.store(root.lead().map_or(LEAD_NONE, u16::from), Ordering::Release);
        // A named point between the two stores, so a test can write meanwhile.
        fail::fail_point!("frame-load-lead");
        self.root.store(Some(root));
    }
    /// The root's lead as of some moment while this call ran (see `publish`); `None` when it
    /// has none or it is not known.
    #[inline]
    pub(crate) fn lead(&self) -> Option<u8> {
        u8::try_from(self.lead.load(Ordering::Acquire)).ok()
    }
    /// Sets the lead and encoded size (an upper bound) of an evicted frame not loaded since
    /// open, read from its image and deltas (under its latch and load lock, with no write
    /// recorded).
    /// A size already known (from the manifest, `learn_size`) is kept where it is smaller:
    /// both bound the same bytes.
    pub(crate) fn learn_image(&self, lead: Option<u8>, encoded: usize) {
        self.lead.store(lead.map_or(LEAD_NONE, u16::from), Ordering::Release);
        let known = self.size_bytes.load(Ordering::Relaxed);
        let bound = if known == 0 { encoded } else { known.min(encoded) };
        self.size_bytes.store(bound, Ordering::Relaxed);
    }
    /// Sets the encoded size bound of an evicted frame whose size is not known (0), from the
    /// manifest at open.
    pub(crate) fn learn_size(&self, encoded: usize) {
        let _ = self.size_bytes.compare_exchange(0, encoded, Ordering::Relaxed, Ordering::Relaxed);
    }
    /// Sets the lead of an evicted frame, read from its image with its deltas and recorded
    /// writes (under its load lock, with no root published: nothing else sets it meanwhile).
    pub(crate) fn learn_lead(&self, lead: Option<u8>) {
        self.lead.store(lead.map_or(LEAD_NONE, u16::from), Ordering::Release);
    }
    /// The lead of an evicted frame, read under its latch and load lock (nothing publishes
    /// it then): `Some(None)` when its root has no own byte, `None` when not known (the
    /// frame was not loaded since open).
    pub(crate) fn known_lead(&self) -> Option<Option<u8>> {
        match self.lead.load(Ordering::Acquire) {
            LEAD_UNKNOWN => None,
            LEAD_NONE => Some(None),
            lead => u8::try_from(lead).ok().map(Some),
        }
    }

    /// The pages counted towards admitting this frame, aged to admission epoch `epoch`.
    fn admission_pages(&self, epoch: u32) -> u32 {
        aged_pages(self.image_pages.load(Ordering::Relaxed), epoch)
    }

    /// Starts this frame's admission count again, at zero in epoch `epoch` (it was loaded, or
    /// a load failed).
    fn restart_admission(&self, epoch: u32) {
        self.image_pages.store(u64::from(epoch) << 32, Ordering::Relaxed);
    }

    /// Counts `pages` more towards admitting this frame, in admission epoch `epoch`.
    fn count_admission_pages(&self, pages: u32, epoch: u32) {
        let _ = self.image_pages.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |packed| {
            // A count made meanwhile in a later epoch (a racing reader) keeps its epoch.
            let epoch = epoch.max((packed >> 32) as u32);
            let pages = aged_pages(packed, epoch).saturating_add(pages);
            Some(u64::from(epoch) << 32 | u64::from(pages))
        });
    }

    pub(crate) fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }
    pub(crate) fn parent(&self) -> Option<Arc<FrameCell<N>>> {
        self.parent.lock().upgrade()
    }
    pub(crate) fn set_parent(&self, parent: &Arc<FrameCell<N>>) {
        let mut slot = self.parent.lock();
        // Most calls name the parent it has (a listing of evicted frames resolves every link
        // it meets): a new weak count on the parent's shared line is left for the change.
        if !std::ptr::eq(slot.as_ptr(), Arc::as_ptr(parent)) {
            *slot = Arc::downgrade(parent);
        }
    }
    /// Keys in this frame's subtree (this frame and the frames below it) and their weight.
    pub(crate) fn subtree_usage(&self) -> (u64, u64) {
        (self.subtree_keys.load(Ordering::Relaxed), self.subtree_weight.load(Ordering::Relaxed))
    }
    /// Adds a change of `keys` and `weight` to this frame's subtree totals (two's
    /// complement: a negative change wraps back).
    pub(crate) fn add_subtree_usage(&self, keys: i64, weight: i64) {
        if keys != 0 {
            self.subtree_keys.fetch_add(keys as u64, Ordering::Relaxed);
        }
        if weight != 0 {
            self.subtree_weight.fetch_add(weight as u64, Ordering::Relaxed);
        }
    }
    pub(crate) fn set_subtree_usage(&self, (keys, weight): (u64, u64)) {
        self.subtree_keys.store(keys, Ordering::Relaxed);
        self.subtree_weight.store(weight, Ordering::Relaxed);
    }
    /// Records what a write did to `key` (relative to the frame): `state` is the node the
    /// write left there (`None` if it deleted the key) and `value_len` the value's length.
    /// Called under the write gate, before the write is published: the last entry for a key
    /// is then the key's state in any root a checkpoint captures with the log.
    pub(crate) fn record_change(&self, key: &[u8], state: Option<N>, value_len: usize) {
        let limit = self.change_log_limit();
        let mut logs = self.changes.lock();
        let log = &mut logs.current;
        if log.whole {
            return;
        }
        // About the bytes of the delta entry, the most a leaf held here can keep alive.
        log.accounted += change_bytes(key, value_len);
        if log.accounted > limit {
            // Resident: the root holds every state the log held (none was detached).
            debug_assert_eq!(log.detached, 0, "an evicted frame's log gave up");
            *log = ChangeLog::given_up();
            return;
        }
        // The resident write path: no index (a resident frame's log is never looked up).
        log.push(key, state, false);
    }

    fn change_log_limit(&self) -> usize {
        (self.size_bytes() / CHANGE_LOG_FRACTION).max(STORE_ALIGN_BYTES)
    }

    /// Whether a write to the evicted frame may be recorded (under its latch, the write gate
    /// and its load lock, with the root still `None`; see `record_unloaded`). Refused (`false`)
    /// when the log would pass its limit, since giving up would lose the write: the caller
    /// loads the frame instead. Checked before the write is logged.
    /// `changes`: each write's key (relative to the frame) and value length.
    pub(crate) fn can_record_unloaded<'k>(&self, changes: impl Iterator<Item = (&'k [u8], usize)>) -> bool {
        let bytes: usize = changes.map(|(key, value_len)| change_bytes(key, value_len)).sum();
        let logs = self.changes.lock();
        !logs.current.whole && logs.current.accounted + bytes <= self.change_log_limit()
    }

    /// Heap bytes of the states the frame's change logs hold alone (counted in the cache).
    pub(crate) fn detached_bytes(&self) -> usize {
        let logs = self.changes.lock();
        logs.current.detached + logs.captured.as_ref().map_or(0, |l| l.detached)
    }

    /// Whether any write is recorded in the frame's change logs.
    pub(crate) fn has_unloaded_changes(&self) -> bool {
        let logs = self.changes.lock();
        !logs.current.states.is_empty() || logs.captured.as_ref().is_some_and(|l| !l.states.is_empty())
    }

    /// Records the write `can_record_unloaded` allowed: `state` is the put's leaf, or `None`
    /// for a deletion. `growth` is the most a put grows the frame's encoding by (a deletion
    /// only shrinks it), counted now so its size stays an upper bound while it is evicted.
    /// `memory` is the state's heap bytes; returns the heap bytes the log grew by (the
    /// state's and any growth of the log's buffers), for the caller to add to the cache's
    /// count.
    pub(crate) fn record_unloaded(
        &self,
        key: &[u8],
        state: Option<N>,
        value_len: usize,
        growth: usize,
        memory: usize,
    ) -> usize {
        let mut logs = self.changes.lock();
        let log = &mut logs.current;
        let before = log.buffer_bytes();
        log.accounted += change_bytes(key, value_len);
        log.push(key, state, true);
        let grown = memory + log.buffer_bytes().saturating_sub(before);
        log.detached += grown;
        self.size_bytes.fetch_add(growth, Ordering::Relaxed);
        grown
    }

    /// The state the writes recorded while the frame was evicted left `key` (relative to the
    /// frame) in: `None` when none names it. Under the load lock, so that no checkpoint moves
    /// the logs' writes to disk meanwhile.
    pub(crate) fn unloaded_state(&self, key: &[u8]) -> Option<Option<N>>
    where
        N: Clone,
    {
        let logs = self.changes.lock();
        let state = logs.current.state_of(key).or_else(|| logs.captured.as_ref()?.state_of(key))?;
        Some(state.cloned())
    }

    /// Hands `f` every change recorded since the frame's disk state (the captured log's, then
    /// the current one's) without taking any: for a read that applies them to part of the
    /// frame it decoded (under the load lock, like `replay_changes`).
    pub(crate) fn each_change(&self, mut f: impl FnMut(&[u8], Option<&N>) -> Result<()>) -> Result<()> {
        let logs = self.changes.lock();
        if logs.current.whole {
            return Err(Error::InvalidArgument(format!(
                "frame {}: a log that gave up cannot be replayed",
                self.id
            )));
        }
        for (key, state) in logs.captured.iter().flat_map(|l| l.iter()).chain(logs.current.iter()) {
            f(key, state)?;
        }
        Ok(())
    }

    /// Hands `apply` every change recorded since the frame's disk state (the captured log's,
    /// then the current one's), for a load to apply on top of it (under the load lock).
    /// `apply` returns the node it stored for the change: the current log then holds that
    /// node instead of its own copy, so the log no longer holds states alone (as for a
    /// resident frame, whose log may give up and drop its entries). Returns the detached
    /// bytes released; nothing changes if `apply` fails.
    pub(crate) fn replay_changes(
        &self,
        mut apply: impl FnMut(&[u8], Option<&N>) -> Result<Option<N>>,
    ) -> Result<usize> {
        let mut logs = self.changes.lock();
        if logs.current.whole {
            // Only a resident frame gives up its log, and a resident frame is not loaded.
            return Err(Error::InvalidArgument(format!(
                "frame {}: a log that gave up cannot be replayed",
                self.id
            )));
        }
        for (key, state) in logs.captured.iter().flat_map(|l| l.iter()) {
            apply(key, state)?;
        }
        let mut stored = Vec::with_capacity(logs.current.states.len());
        for (key, state) in logs.current.iter() {
            stored.push(apply(key, state)?);
        }
        logs.current.states = stored;
        Ok(std::mem::take(&mut logs.current.detached))
    }

    /// Makes the current change log the only holder of the frame's writes since its disk
    /// state, for evicting the frame while it is dirty (under its latch, before the root is
    /// dropped): possible when no checkpoint holds a capture of the frame and the log did not
    /// give up, for then every change since the disk state is in the log (the invariant of
    /// `Tree::capture`), and the frame becomes what a frame written while evicted is
    /// (`record_unloaded`). Indexes the entries, which reads of the evicted frame look up,
    /// and counts the states and buffers as detached. Returns the bytes that adds to what
    /// the log already counted as detached (entries a failed checkpoint put back, whose
    /// states it held alone), or `None` (and changes nothing) when the log cannot stand for
    /// the frame.
    pub(crate) fn detach_changes(&self) -> Option<usize>
    where
        N: FrameRoot,
    {
        let mut logs = self.changes.lock();
        if logs.captured.is_some() || logs.current.whole {
            return None;
        }
        let log = &mut logs.current;
        if log.unindexed {
            log.index.clear();
            for at in 0..log.states.len() {
                let hash = key_hash(log.key_at(at));
                log.index.insert(hash, at as u32);
            }
            log.unindexed = false;
        }
        let states: usize = log.states.iter().flatten().map(FrameRoot::state_bytes).sum();
        let total = states + log.buffer_bytes();
        let counted = std::mem::replace(&mut log.detached, total);
        Some(total.saturating_sub(counted))
    }

    /// Whether `detach_changes` would succeed now (no lock held after), and the frame is
    /// worth evicting dirty: its log is within half its limit, so that writes to the evicted
    /// frame have room to be recorded (a log near its limit would load the frame again on
    /// the next write).
    fn may_detach_changes(&self) -> bool {
        let limit = self.change_log_limit();
        let logs = self.changes.lock();
        logs.captured.is_none() && !logs.current.whole && logs.current.accounted <= limit / 2
    }

    /// The frame changed in a way a delta cannot describe: the next checkpoint writes it whole.
    /// Only for a resident frame (under its latch).
    pub(crate) fn rewrite_whole(&self) {
        let mut logs = self.changes.lock();
        // A load replays the log into the root and keeps the root's nodes (`replay_changes`).
        debug_assert_eq!(logs.current.detached, 0, "a resident frame's log holds no detached states");
        logs.current = ChangeLog::given_up();
    }

    /// Takes the change log for a checkpoint's capture (under the exclusive write gate): it
    /// stays readable here as the captured log until `mark_clean` or `checkpoint_failed`.
    /// Also returns the detached bytes released (none unless an earlier capture was left).
    pub(crate) fn capture_changes(&self) -> (Arc<ChangeLog<N>>, usize)
    where
        N: Clone,
    {
        let mut logs = self.changes.lock();
        let mut taken = std::mem::take(&mut logs.current);
        let mut released = 0;
        if let Some(earlier) = logs.captured.take() {
            // Never met: every capture ends in `mark_clean` or `checkpoint_failed`.
            let before = earlier.detached + taken.detached;
            taken = taken.after(&earlier);
            released = before - taken.detached;
        }
        let taken = Arc::new(taken);
        logs.captured = Some(Arc::clone(&taken));
        (taken, released)
    }

    /// A checkpoint that captured this frame failed: its captured changes go back in front
    /// of the current ones (nothing reached the disk). Returns the detached bytes released.
    pub(crate) fn checkpoint_failed(&self) -> usize
    where
        N: Clone,
    {
        let mut logs = self.changes.lock();
        let Some(captured) = logs.captured.take() else { return 0 };
        let before = captured.detached + logs.current.detached;
        let current = std::mem::take(&mut logs.current);
        logs.current = current.after(&captured);
        before - logs.current.detached
    }

    /// Holds off loads and point reads of the frame: a checkpoint holds it while it switches
    /// an evicted frame's disk state and drops the captured changes that state now holds.
    pub(crate) fn hold_loads(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.load_lock.lock()
    }

    /// Drops every change log and the kept deltas (a frame merged away). Returns the
    /// detached bytes and the delta bytes released.
    pub(crate) fn drop_changes(&self) -> (usize, usize) {
        let mut logs = self.changes.lock();
        let released = logs.current.detached + logs.captured.as_ref().map_or(0, |l| l.detached);
        *logs = ChangeLogs::default();
        (released, self.drop_kept_deltas())
    }

    /// Whether reads went through the frame's deltas so often since its chain last changed
    /// that writing it whole (its chain gone) costs less than reading on: a checkpoint then
    /// captures it even if clean (`Tree::capture`).
    pub(crate) fn wants_rewrite(&self) -> bool {
        self.reread_bytes.load(Ordering::Relaxed) >= REWRITE_AFTER_REREAD_BYTES
    }

    /// Forgets the kept deltas; returns their bytes.
    fn drop_kept_deltas(&self) -> usize {
        self.kept_deltas.lock().take().map_or(0, |d| delta_bytes(&d))
    }

    /// Heap bytes of the kept deltas (counted in the cache).
    pub(crate) fn kept_delta_bytes(&self) -> usize {
        self.kept_deltas.lock().as_ref().map_or(0, |d| delta_bytes(d))
    }
}

/// The heap bytes of a frame's deltas as kept in memory (bytes and indexes).
fn delta_bytes(deltas: &[Delta]) -> usize {
    deltas.iter().map(Delta::memory).sum()
}

/// Writes load evicted frames only while the cache is below this fraction of its budget
/// (`BufferPool::is_full_for_writes`).
const WRITE_LOAD_FRACTION: (usize, usize) = (3, 4);

/// Deltas kept for evicted frames take at most this fraction of the budget.
const DELTA_CACHE_FRACTION: usize = 8;

/// A frame whose deltas reads went through this many bytes of again since its chain last
/// changed (`BufferPool::count_reread`) is written whole by the next checkpoint, as LevelDB
/// compacts a file that lookups keep passing through: reading its image, applying the chain
/// and writing it costs about two frames of I/O and a millisecond of CPU, once, where every
/// read of the frame would verify the chain again when it is not kept (tens of microseconds
/// for a chain of a few thousand entries), and every listing merge it.
const REWRITE_AFTER_REREAD_BYTES: u64 = 2 * FRAME_SIZE as u64;

/// A change log's index key for `key`, and what the deltas' key filters hold of it: its
/// CRC32C (hardware-computed; both check the key they find, so a collision only costs a
/// scan or a search).
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    crc32c::crc32c(key)
}

/// The identity hash of a `key_hash` value, for the change log's index.
#[derive(Default)]
struct KeyHash(u64);

impl std::hash::Hasher for KeyHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        // Spread into the high bits too: the table's control bytes take the top seven.
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The bytes a change to `key` with a value of `value_len` bytes adds to a delta, about.
pub(crate) fn change_bytes(key: &[u8], value_len: usize) -> usize {
    8 + key.len() + value_len
}

/// How an image walk holds the frame's load lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// Takes it, waiting for a load or another walk.
    Take,
    /// Takes it only if free (`BufferPool::read_image_cached`), reading nothing else.
    Try,
    /// The caller holds it (`BufferPool::read_image_held`).
    Held,
}

/// The cache of frames: memory budget, clock ring, and the source evicted frames come from.
pub(crate) struct BufferPool<N> {
    budget_bytes: usize,
    source: Option<Arc<dyn FrameSource>>,
    cached_bytes: AtomicI64,
    /// Resident frames in clock order. Retired or evicted entries are dropped as the hand passes.
    ring: Mutex<VecDeque<Arc<FrameCell<N>>>>,
    frame_reads: AtomicU64,
    frame_evictions: AtomicU64,
    /// Evictions of dirty frames (`FrameCell::detach_changes`).
    dirty_evictions: AtomicU64,
    /// Point reads served from a frame's image without decoding it.
    image_reads: AtomicU64,
    /// Reads from the frame source (decoding loads and image reads alike).
    source_reads: AtomicU64,
    /// Pages read by point reads of evicted frames.
    page_reads: AtomicU64,
    /// Pages counted towards admitting frames, over all frames (`admission_epoch`).
    admission_pages: AtomicU64,
    /// Pages counted per admission epoch (`admission_window`), fixed with the budget.
    admission_window: u64,
    /// Puts and deletes recorded in an evicted frame's change log (`Tree::write_unloaded`).
    unloaded_writes: AtomicU64,
    /// Bytes of the deltas kept on evicted frames (`FrameCell::kept_deltas`).
    kept_delta_bytes: AtomicI64,
    /// Deltas verified whole for walks (read or lent anew), and kept deltas dropped by the
    /// delta clock's hand.
    delta_verifies: AtomicU64,
    delta_evictions: AtomicU64,
    /// Frames whose reads passed `REWRITE_AFTER_REREAD_BYTES` since the last capture
    /// (`Tree::capture` sets it to those it left for later): the background checkpointer
    /// runs when there are any.
    rewrites_wanted: AtomicU64,
    /// Bytes of deltas reads went through again since the last capture, over all frames
    /// (`count_reread`): the background checkpointer starts a checkpoint for the rewrites
    /// once this passes `Options::checkpoint_wal_bytes`, without waiting for the interval.
    reread_bytes: AtomicU64,
    /// Frames that kept deltas, in clock order: when the deltas' share of the budget is full,
    /// the hand drops the kept deltas of a frame not walked since it last passed. Frames whose
    /// deltas went meanwhile (a checkpoint, a load) leave as the hand passes them.
    delta_ring: Mutex<VecDeque<Arc<FrameCell<N>>>>,
    /// The root frame: never evicted.
    pinned: FrameId,
    /// Frame read buffers: at most `READ_BUFFERS_MAX` exist, reused from one read to the next,
    /// and a read waits for one. A fresh 512 KiB allocation per read made glibc consolidate its
    /// free lists on every miss (measured: most of a cache miss's CPU time at 1M keys), and
    /// one per concurrent reader let a server with 64 connections grow by hundreds of MB.
    read_buffers: Mutex<ReadBuffers>,
    read_buffer_freed: Condvar,
}

/// A read buffer on loan; given back to the pool when dropped, however the read ended.
struct ReadBuffer<'p, N> {
    pool: &'p BufferPool<N>,
    bytes: Box<[u8]>,
}

impl<N> Drop for ReadBuffer<'_, N> {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        self.pool.read_buffers.lock().free.push(bytes);
        self.pool.read_buffer_freed.notify_one();
    }
}

#[derive(Default)]
struct ReadBuffers {
    free: Vec<Box<[u8]>>,
    allocated: usize,
}

/// Frame reads (loads and image reads) in flight at once, at most: each holds a 512 KiB buffer.
const READ_BUFFERS_MAX: usize = 8;

/// A frame whose image reads fetched this many pages lately (while the cache was full) is
/// decoded and admitted on the next read (evicting a colder frame): about 1,024 point reads
/// (`POINT_READ_PAGES` each), or fifty listings that read most of its pages. "Lately": counts
/// halve every admission epoch (`admission_window`), so a frame is admitted only
/// while it draws at least the share of image reads one frame of the cache would get.
const ADMIT_AFTER_IMAGE_PAGES: u32 = 1024 * POINT_READ_PAGES;

/// The fewest frames `admission_window` reckons a cache to hold. A read draws
/// pages from every evicted frame on its path, so even the frame of the only key read draws
/// a half or a third of them: a cache of one or two frames reckoned as such would never
/// admit it.
const ADMISSION_FRAMES_MIN: usize = 8;

/// The pages a frame's packed admission count (`FrameCell::image_pages`) holds, halved for
/// every admission epoch from the one it was counted in to `epoch`.
fn aged_pages(packed: u64, epoch: u32) -> u32 {
    let (counted_in, pages) = ((packed >> 32) as u32, packed as u32);
    pages.checked_shr(epoch.saturating_sub(counted_in)).unwrap_or(0)
}

/// Pages counted towards admission (over all frames) per admission epoch, for a cache of
/// `budget_bytes`: half of `ADMIT_AFTER_IMAGE_PAGES` for each frame the cache holds (the
/// budget over `2 × FRAME_SIZE`, as `is_full_for` reckons a frame not loaded yet; at least
/// `ADMISSION_FRAMES_MIN`). A
/// frame's count, halved every epoch, settles near twice what it draws in one, so it
/// reaches the threshold only while the frame draws at least the share of image pages
/// one frame of the cache would get if reads were spread evenly over it. Reads spread
/// evenly over more frames than the cache holds admit none (each admission would evict a
/// frame as often read, to be read back whole later); frames read more than that still
/// win a place. (Half the share, a window twice as long, kept some churn at 10M keys.)
fn admission_window(budget_bytes: usize) -> u64 {
    let frames = (budget_bytes / (2 * FRAME_SIZE)).max(ADMISSION_FRAMES_MIN) as u64;
    u64::from(ADMIT_AFTER_IMAGE_PAGES).saturating_mul(frames) / 2
}

/// About the pages a point read of an evicted frame fetches (3.2 measured with the header
/// kept; `tests/beyond_memory_reads.rs`).
const POINT_READ_PAGES: u32 = 3;

/// Counters of the cache.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolStats {
    pub frames_cached: u64,
    pub frames_dirty: u64,
    pub cache_bytes: u64,
    pub frame_reads: u64,
    pub frame_evictions: u64,
    pub dirty_evictions: u64,
    pub image_reads: u64,
    pub source_reads: u64,
    pub page_reads: u64,
    pub unloaded_writes: u64,
    pub delta_verifies: u64,
    pub delta_evictions: u64,
}

impl<N> BufferPool<N> {
    pub(crate) fn new(budget_bytes: usize, source: Option<Arc<dyn FrameSource>>, pinned: FrameId) -> Self {
        BufferPool {
            // Compared with a signed count: keep it representable.
            budget_bytes: budget_bytes.min(i64::MAX as usize),
            source,
            cached_bytes: AtomicI64::new(0),
            ring: Mutex::new(VecDeque::new()),
            frame_reads: AtomicU64::new(0),
            frame_evictions: AtomicU64::new(0),
            dirty_evictions: AtomicU64::new(0),
            image_reads: AtomicU64::new(0),
            source_reads: AtomicU64::new(0),
            page_reads: AtomicU64::new(0),
            admission_pages: AtomicU64::new(0),
            admission_window: admission_window(budget_bytes),
            unloaded_writes: AtomicU64::new(0),
            kept_delta_bytes: AtomicI64::new(0),
            delta_verifies: AtomicU64::new(0),
            delta_evictions: AtomicU64::new(0),
            rewrites_wanted: AtomicU64::new(0),
            reread_bytes: AtomicU64::new(0),
            delta_ring: Mutex::new(VecDeque::new()),
            pinned,
            read_buffers: Mutex::new(ReadBuffers::default()),
            read_buffer_freed: Condvar::new(),
        }
    }

    /// Starts tracking a resident frame (a new frame, or one just loaded).
    pub(crate) fn admit(&self, cell: &Arc<FrameCell<N>>) {
        self.cached_bytes.fetch_add(cell.size().memory as i64, Ordering::Relaxed);
        self.ring.lock().push_back(Arc::clone(cell));
    }

    /// The current admission epoch (`admission_window`).
    fn admission_epoch(&self) -> u32 {
        self.epoch_at(self.admission_pages.load(Ordering::Relaxed))
    }

    fn epoch_at(&self, counted: u64) -> u32 {
        u32::try_from(counted / self.admission_window).unwrap_or(u32::MAX)
    }

    /// Counts `pages` towards admitting the evicted frame `cell`, in the epoch they end.
    fn count_admission(&self, cell: &FrameCell<N>, pages: u32) {
        let counted = self.admission_pages.fetch_add(u64::from(pages), Ordering::Relaxed) + u64::from(pages);
        cell.count_admission_pages(pages, self.epoch_at(counted));
    }

    /// Counts a write's walk through the evicted frame `cell` towards admitting it, as a
    /// point read's walk counts: the write's key continued in a frame linked from it.
    pub(crate) fn count_passing_write(&self, cell: &FrameCell<N>) {
        self.count_admission(cell, POINT_READ_PAGES);
    }

    /// Counts `pages` more pages' worth of work towards admitting the evicted frame `cell`
    /// (a listing that scanned its deltas).
    pub(crate) fn count_image_work(&self, cell: &FrameCell<N>, pages: usize) {
        self.count_admission(cell, u32::try_from(pages).unwrap_or(u32::MAX));
    }

    /// Counts a put or delete recorded in an evicted frame's change log.
    pub(crate) fn count_unloaded_write(&self) {
        self.unloaded_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Adjusts the cached byte count after a resident frame's memory changed by `delta`.
    pub(crate) fn resized(&self, delta: i64) {
        self.cached_bytes.fetch_add(delta, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let ring = self.ring.lock();
        let (mut frames_cached, mut frames_dirty) = (0, 0);
        for cell in ring.iter().filter(|c| !c.is_retired() && c.root.load().is_some()) {
            frames_cached += 1;
            frames_dirty += u64::from(cell.is_dirty());
        }
        PoolStats {
            frames_cached,
            frames_dirty,
            cache_bytes: self.cached_bytes.load(Ordering::Relaxed).max(0) as u64,
            frame_reads: self.frame_reads.load(Ordering::Relaxed),
            frame_evictions: self.frame_evictions.load(Ordering::Relaxed),
            dirty_evictions: self.dirty_evictions.load(Ordering::Relaxed),
            image_reads: self.image_reads.load(Ordering::Relaxed),
            source_reads: self.source_reads.load(Ordering::Relaxed),
            page_reads: self.page_reads.load(Ordering::Relaxed),
            unloaded_writes: self.unloaded_writes.load(Ordering::Relaxed),
            delta_verifies: self.delta_verifies.load(Ordering::Relaxed),
            delta_evictions: self.delta_evictions.load(Ordering::Relaxed),
        }
    }

    /// The root of `cell`, loading it from the source when it is evicted. `decode` turns the
    /// frame's image and deltas into its root and size. Waits only on I/O and on other loaders.
    pub(crate) fn load(
        &self,
        cell: &Arc<FrameCell<N>>,
        decode: impl FnOnce(&[u8], &(PathBuf, u64), &[DeltaRef<'_>]) -> Result<(N, FrameSize)>,
    ) -> Result<N>
    where
        N: FrameRoot,
    {
        let root = {
            let _loading = cell.load_lock.lock();
            if let Some(root) = cell.root.load_full() {
                return Ok(root);
            }
            let (root, size) = match self.read_stored(cell.id, decode) {
                Ok(loaded) => loaded,
                Err(e) => {
                    // Its count starts again: until it is read often enough to be tried
                    // again, reads walk its pages, and a damaged page fails only the reads
                    // that cross it rather than every read of the frame.
                    cell.restart_admission(self.admission_epoch());
                    return Err(e);
                }
            };
            // Counted before the root is published: once it is, a writer may change the frame
            // and account for that change itself.
            cell.set_size(size);
            self.cached_bytes.fetch_add(size.memory as i64, Ordering::Relaxed);
            // A named point between counting and publishing, so a test can write meanwhile.
            fail::fail_point!("frame-load-publish");
            cell.publish_loaded(root.clone());
            // Its root holds what they say now.
            let deltas = cell.drop_kept_deltas();
            self.released(0, deltas);
            self.ring.lock().push_back(Arc::clone(cell));
            cell.touch();
            cell.restart_admission(self.admission_epoch());
            self.frame_reads.fetch_add(1, Ordering::Relaxed);
            root
        };
        self.evict_if_needed();
        // Even if the frame is evicted again right away, `root` is what it held while clean.
        Ok(root)
    }

    /// Frame `id`'s deltas on disk, each verified, handed to `read` oldest first: for a
    /// checkpoint merging the chain into one delta (under the manifest lock: the disk state
    /// cannot change meanwhile). The image is not read.
    pub(crate) fn read_stored_deltas<R>(
        &self,
        id: FrameId,
        read: impl FnOnce(&[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<R> {
        let missing = |what: &str| Error::Corruption {
            location: Location { file: PathBuf::from("<frames>"), frame: Some(id.0), offset: 0 },
            reason: format!("the frame's deltas {what}"),
        };
        let source = self.source.as_ref().ok_or_else(|| missing("have no frame source"))?;
        let deltas = self.read_deltas(&**source, id)?;
        let deltas: Vec<DeltaRef<'_>> = deltas
            .iter()
            .map(|d| d.read(None))
            .collect::<Option<_>>()
            .ok_or_else(|| missing("were read without their bytes"))?;
        read(&deltas)
    }

    /// Frame `id`'s image and deltas on disk, handed to `decode`: for a load (under the
    /// frame's load lock), or for a checkpoint rebuilding an evicted frame (under the
    /// manifest lock: the disk state cannot change meanwhile).
    pub(crate) fn read_stored<R>(
        &self,
        id: FrameId,
        decode: impl FnOnce(&[u8], &(PathBuf, u64), &[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<R> {
        let source = self.source.as_ref().ok_or_else(|| Error::Corruption {
            location: Location { file: PathBuf::from("<memory>"), frame: Some(id.0), offset: 0 },
            reason: "frame is not resident and there is no frame source".into(),
        })?;
        let deltas = self.read_deltas(&**source, id)?;
        // Read with their bytes: each reads from them.
        let deltas: Vec<DeltaRef<'_>> = deltas.iter().filter_map(|d| d.read(None)).collect();
        self.read_frame(&**source, id, |bytes, at| decode(bytes, at, &deltas))
    }

    /// Opens the image of the evicted frame `cell` for `walk`, which fetches the pages it
    /// needs (each verified against the frame's page table), and hands it the frame's
    /// deltas, without decoding or admitting the frame: a point read's or a listing's way
    /// through a frame while the cache is full. `None` when the frame should be decoded and
    /// admitted instead: it is resident already, the cache has room, or reads of this frame
    /// fetched `ADMIT_AFTER_IMAGE_PAGES` pages since it was last admitted (so frames read
    /// often, or read at length, win a place in the cache). Held under the frame's load lock, like a load:
    /// nobody can change (and so rewrite) the frame while its pages are read.
    pub(crate) fn read_image<R>(
        &self,
        cell: &Arc<FrameCell<N>>,
        walk: impl FnOnce(&mut dyn ImageBody, &[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<Option<R>> {
        self.walk_image(cell, true, Locking::Take, walk)
    }

    /// `read_image` that waits for nothing: it walks only an image whose header a walk
    /// opened before and whose used bytes and deltas the page cache holds, and only if no
    /// other walk or load holds the frame; `None` otherwise, having read nothing. For a caller
    /// on an async runtime's worker, which hands the read to a blocking thread on `None`.
    pub(crate) fn read_image_cached<R>(
        &self,
        cell: &Arc<FrameCell<N>>,
        walk: impl FnOnce(&mut dyn ImageBody, &[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<Option<R>> {
        self.walk_image(cell, true, Locking::Try, walk)
    }

    /// `read_image` for a write (`Tree::write_unloaded`): it does not count towards admitting
    /// the frame, since a write that loaded the frame would pin it (a dirty frame cannot be
    /// evicted) until the next checkpoint; a write that only passes through the frame counts
    /// itself (`count_passing_write`), so frames on many writes' paths are admitted.
    pub(crate) fn read_image_for_write<R>(
        &self,
        cell: &Arc<FrameCell<N>>,
        walk: impl FnOnce(&mut dyn ImageBody, &[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<Option<R>> {
        self.walk_image(cell, false, Locking::Take, walk)
    }

    /// `read_image_for_write` of a frame whose load lock the caller holds (`held`, from
    /// `FrameCell::hold_loads`): for a batch recording writes in several evicted frames, which
    /// holds their load locks from reading the keys' states until the writes are recorded.
    pub(crate) fn read_image_held<R>(
        &self,
        cell: &Arc<FrameCell<N>>,
        held: &parking_lot::MutexGuard<'_, ()>,
        walk: impl FnOnce(&mut dyn ImageBody, &[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<Option<R>> {
        debug_assert!(
            std::ptr::eq(parking_lot::MutexGuard::mutex(held), &cell.load_lock),
            "frame {}: the load lock held is another frame's",
            cell.id
        );
        self.walk_image(cell, false, Locking::Held, walk)
    }

    /// `admit`: whether the pages read count towards admitting the frame.
    fn walk_image<R>(
        &self,
        cell: &Arc<FrameCell<N>>,
        admit: bool,
        locking: Locking,
        walk: impl FnOnce(&mut dyn ImageBody, &[DeltaRef<'_>]) -> Result<R>,
    ) -> Result<Option<R>> {
        let Some(source) = self.source.as_ref() else { return Ok(None) };
        // A walk that does not count towards admitting the frame is a write's. The frame is
        // reckoned to need what it decoded to when last loaded, if more than a full frame's
        // estimate: the room that estimate finds may not hold it, and the clock would evict
        // it again at once, to be loaded again by the next read.
        let needed = (2 * FRAME_SIZE).max(cell.size().memory);
        let full = || match admit {
            true => self.is_full_for(needed, self.budget_bytes),
            false => self.is_full_for(needed, self.write_load_limit()),
        };
        if !full() {
            return Ok(None); // no lock needed to decide to load instead
        }
        let cached = locking == Locking::Try;
        let _loading = match locking {
            Locking::Take => Some(cell.load_lock.lock()),
            Locking::Try => match cell.load_lock.try_lock() {
                Some(guard) => Some(guard),
                None => return Ok(None),
            },
            Locking::Held => None,
        };
        if cell.root.load().is_some() || !full() {
            return Ok(None);
        }
        if cell.admission_pages(self.admission_epoch()) >= ADMIT_AFTER_IMAGE_PAGES {
            return Ok(None); // `load` resets the count
        }
        let mut kept = cell.image_head.lock().clone();
        let resident = match (cached, &kept) {
            (false, _) => None,
            (true, Some(head)) => Some(head.used),
            (true, None) => return Ok(None), // opening the header reads page 0
        };
        // Asked before the slot is lent: the source's lock is held while it is.
        let mut location = Some(source.locate(cell.id));
        let (mut walk, mut walked) = (Some(walk), None);
        let mut not_cached = false;
        let lent = source.lend_image(cell.id, resident, &mut |lent| {
            // A kept header of another image (rewritten since) does not say what is resident.
            let other_image =
                |lent: &Lent<'_>| kept.as_ref().is_none_or(|h| frame::image_sum(lent.slot) != Some(h.sum));
            if cached && lent.as_ref().is_none_or(other_image) {
                not_cached = true;
                return Ok(());
            }
            // `lend_image` calls this once: the location and the kept header move in.
            let location = location.take().unwrap_or_default();
            // The frame's deltas (changes to keys since its image): the walk looks the key up
            // in them, newest first, before trusting the image.
            let lent_deltas = lent.as_ref().map(|l| l.deltas);
            let deltas = self.walk_deltas(cell, &**source, &location.0, lent_deltas, admit)?;
            let deltas = delta_refs(cell.id, &deltas, lent_deltas)?;
            let kept = kept.take();
            let kept_at = kept.as_ref().map(Arc::as_ptr);
            let mut image =
                PagedImage::open(&**source, cell.id, location, kept, lent.as_ref().map(|l| l.slot))?;
            if kept_at != Some(Arc::as_ptr(&image.head)) {
                *cell.image_head.lock() = Some(Arc::clone(&image.head));
            }
            if let Some(walk) = walk.take() {
                walked = Some((walk(&mut image, &deltas), image.pages_read));
            }
            Ok(())
        });
        if not_cached {
            return Ok(None);
        }
        self.source_reads.fetch_add(1, Ordering::Relaxed);
        lent?;
        let Some((result, pages_read)) = walked else {
            return Err(Error::InvalidArgument(format!(
                "frame {}'s image was not lent to the walk",
                cell.id
            )));
        };
        if admit {
            self.count_admission(cell, u32::try_from(pages_read).unwrap_or(u32::MAX));
        }
        self.page_reads.fetch_add(pages_read, Ordering::Relaxed);
        self.image_reads.fetch_add(1, Ordering::Relaxed);
        result.map(Some)
    }

    /// Reads frame `id` from `source` into a reused buffer and hands its bytes to `f`.
    fn read_frame<R>(
        &self,
        source: &dyn FrameSource,
        id: FrameId,
        f: impl FnOnce(&[u8], &(PathBuf, u64)) -> Result<R>,
    ) -> Result<R> {
        let mut buffer = ReadBuffer { pool: self, bytes: self.take_read_buffer() };
        self.source_reads.fetch_add(1, Ordering::Relaxed);
        let bytes = &mut buffer.bytes;
        source.read_frame(id, bytes).and_then(|n| f(&bytes[..n], &source.locate(id)))
    }

    /// The deltas of the evicted frame `cell` for a walk (under its load lock): those kept on
    /// it, if they are usable with what the source lent (`lent`: each delta's offset and
    /// bytes, if lent); else verified from `lent`, or read from the source, and kept while
    /// the kept deltas of all frames fit their share of the budget. `file` names the frames
    /// file in errors.
    fn walk_deltas(
        &self,
        cell: &Arc<FrameCell<N>>,
        source: &dyn FrameSource,
        file: &std::path::Path,
        lent: Option<&[(u64, &[u8])]>,
        read: bool,
    ) -> Result<Arc<Vec<Delta>>> {
        let kept = cell.kept_deltas.lock().clone();
        if let Some(kept) = kept {
            let usable = match lent {
                Some(lent) => {
                    kept.len() == lent.len()
                        && kept.iter().zip(lent).all(|(d, &(_, bytes))| d.bytes.is_some() || d.is(bytes))
                }
                None => kept.iter().all(|d| d.bytes.is_some()),
            };
            if usable {
                if !cell.deltas_referenced.load(Ordering::Relaxed) {
                    cell.deltas_referenced.store(true, Ordering::Relaxed);
                }
                return Ok(kept);
            }
        }
        let mut deltas = match lent {
            Some(lent) => lent
                .iter()
                .enumerate()
                .map(|(i, &(at, bytes))| {
                    crate::io::will_need(bytes); // verifying reads it all
                    Delta::verify(cell.id, i, bytes, (file.to_path_buf(), at), false)
                })
                .collect::<Result<Vec<_>>>()?,
            None => self.read_deltas(source, cell.id)?,
        };
        self.delta_verifies.fetch_add(deltas.len() as u64, Ordering::Relaxed);
        if read {
            let bytes: u64 = match lent {
                Some(lent) => lent.iter().map(|&(_, b)| b.len() as u64).sum(),
                None => deltas.iter().map(|d| d.bytes.as_ref().map_or(0, |b| b.len() as u64)).sum(),
            };
            self.count_reread(cell, bytes);
        }
        let old = cell.kept_deltas.lock().take();
        if let Some(old) = old {
            self.released(0, delta_bytes(&old));
        }
        // The chain's merged index, for listings, only for a chain kept: one verified again
        // by every walk would pay the merge on every point read too. Its bound: a key an entry.
        let index_bound = match deltas.len() {
            0 | 1 => 0,
            _ => deltas.iter().map(|d| d.entries.len()).sum::<usize>() * size_of::<ChainEntry>(),
        };
        if index_bound > 0 && self.make_delta_room(cell, delta_bytes(&deltas) + index_bound) {
            let merged = merge_chain(&delta_refs(cell.id, &deltas, lent)?)?;
            if let Some(newest) = deltas.last_mut() {
                newest.chain_index = merged;
            }
        }
        let deltas = Arc::new(deltas);
        let bytes = delta_bytes(&deltas);
        if self.make_delta_room(cell, bytes) {
            self.kept_delta_bytes.fetch_add(bytes as i64, Ordering::Relaxed);
            self.cached_bytes.fetch_add(bytes as i64, Ordering::Relaxed);
            *cell.kept_deltas.lock() = Some(Arc::clone(&deltas));
            let mut ring = self.delta_ring.lock();
            if !cell.in_delta_ring.swap(true, Ordering::Relaxed) {
                ring.push_back(Arc::clone(cell));
                // Frames whose deltas went (checkpointed, loaded, merged away) leave from the
                // front as others come in, so the ring stays about as long as the frames
                // keeping deltas even while the share never fills and the hand never runs.
                for _ in 0..2 {
                    match ring.front() {
                        Some(front) if !Arc::ptr_eq(front, cell) && front.kept_deltas.lock().is_none() => {
                            front.in_delta_ring.store(false, Ordering::Relaxed);
                            ring.pop_front();
                        }
                        _ => break,
                    }
                }
            }
        }
        Ok(deltas)
    }

    /// Whether a frame waits for a checkpoint to write it whole (`FrameCell::wants_rewrite`).
    pub(crate) fn wants_rewrites(&self) -> bool {
        self.rewrites_wanted.load(Ordering::Relaxed) > 0
    }

    /// Counts `bytes` of the evicted frame `cell`'s deltas that a read went through again:
    /// verified anew (they were not kept), or, for a listing, the chain's index entries it
    /// searched and merged (`count_listing_through_chain`). Past
    /// `REWRITE_AFTER_REREAD_BYTES` the frame wants a rewrite.
    pub(crate) fn count_reread(&self, cell: &FrameCell<N>, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.reread_bytes.fetch_add(bytes, Ordering::Relaxed);
        let before = cell.reread_bytes.fetch_add(bytes, Ordering::Relaxed);
        if before < REWRITE_AFTER_REREAD_BYTES && before + bytes >= REWRITE_AFTER_REREAD_BYTES {
            self.rewrites_wanted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A listing walked the evicted frame `cell` through its chain `deltas` (kept or not):
    /// it searched and merged the chain's entries under its prefix, counted as the bytes of
    /// a merged index entry each (`ChainEntry`). A rolled-up listing entering many frames
    /// spent 40% of its time there (1M keys, 18 MiB budget, wide root).
    pub(crate) fn count_listing_through_chain(&self, cell: &FrameCell<N>, deltas: &[DeltaRef<'_>]) {
        let entries: usize = deltas.iter().map(|d| d.delta.entries.len()).sum();
        self.count_reread(cell, (entries * size_of::<ChainEntry>()) as u64);
    }

    /// Bytes of deltas reads went through again since the last capture (`reread_bytes`).
    pub(crate) fn reread_bytes(&self) -> u64 {
        self.reread_bytes.load(Ordering::Relaxed)
    }

    /// After a capture: `left` frames still want a rewrite; the count of bytes verified
    /// again starts over.
    pub(crate) fn set_rewrites_wanted(&self, left: u64) {
        self.rewrites_wanted.store(left, Ordering::Relaxed);
        self.reread_bytes.store(0, Ordering::Relaxed);
    }

    /// Whether `bytes` more of kept deltas fit their share of the budget, once the hand of
    /// the delta clock has dropped, if it must, the kept deltas of frames not walked since it
    /// last passed them (each frame gets a second chance). `cell` (the frame about to keep
    /// its deltas, holding none) stays. Called without any frame's `kept_deltas` lock held:
    /// the hand takes the ring's lock, then a frame's.
    fn make_delta_room(&self, cell: &Arc<FrameCell<N>>, bytes: usize) -> bool {
        let share = (self.budget_bytes / DELTA_CACHE_FRACTION) as i64;
        let fits = || self.kept_delta_bytes.load(Ordering::Relaxed) + bytes as i64 <= share;
        if bytes == 0 || bytes as i64 > share {
            return false;
        }
        if fits() {
            return true;
        }
        let mut ring = self.delta_ring.lock();
        // Bound: each frame is passed at most twice (its second chance, then its drop).
        let mut steps = 2 * ring.len();
        while !fits() && steps > 0 {
            steps -= 1;
            let Some(frame) = ring.pop_front() else { break };
            if Arc::ptr_eq(&frame, cell) {
                ring.push_back(frame);
                continue;
            }
            let holds = frame.kept_deltas.lock().is_some();
            if holds && frame.deltas_referenced.swap(false, Ordering::Relaxed) {
                ring.push_back(frame);
                continue;
            }
            frame.in_delta_ring.store(false, Ordering::Relaxed);
            if holds {
                self.released(0, frame.drop_kept_deltas());
                self.delta_evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        fits()
    }

    /// Uncounts what a frame released: `detached` bytes of change-log states and `deltas`
    /// bytes of kept deltas.
    pub(crate) fn released(&self, detached: usize, deltas: usize) {
        self.kept_delta_bytes.fetch_sub(deltas as i64, Ordering::Relaxed);
        self.cached_bytes.fetch_sub((detached + deltas) as i64, Ordering::Relaxed);
    }

    /// The deltas of frame `id`, in order, read through one of the pool's buffers, verified
    /// and held in memory.
    fn read_deltas(&self, source: &dyn FrameSource, id: FrameId) -> Result<Vec<Delta>> {
        let count = source.delta_count(id);
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut buffer = ReadBuffer { pool: self, bytes: self.take_read_buffer() };
        (0..count)
            .map(|i| {
                let (n, at) = source.read_delta(id, i, &mut buffer.bytes)?;
                Delta::verify(id, i, &buffer.bytes[..n], at, true)
            })
            .collect()
    }

    /// A read buffer: a free one, a new one while fewer than `READ_BUFFERS_MAX` exist, or the
    /// next one given back.
    fn take_read_buffer(&self) -> Box<[u8]> {
        let mut buffers = self.read_buffers.lock();
        // Bound: every buffer taken is given back when its `ReadBuffer` drops (panics too).
        loop {
            if let Some(b) = buffers.free.pop() {
                return b;
            }
            if buffers.allocated < READ_BUFFERS_MAX {
                buffers.allocated += 1;
                return vec![0u8; FRAME_SIZE].into_boxed_slice();
            }
            self.read_buffer_freed.wait(&mut buffers);
        }
    }

    /// Whether admitting a frame of `needed` bytes would push the cache past `limit` (the
    /// budget, or `write_load_limit`; the eviction after each load keeps the cache just under
    /// the budget, so "over budget" is rarely seen by a reader).
    fn is_full_for(&self, needed: usize, limit: usize) -> bool {
        self.source.is_some()
            && self.cached_bytes.load(Ordering::Relaxed).saturating_add(needed as i64) > limit as i64
    }

    /// Writes load evicted frames only into the room below this (`is_full_for_writes`).
    fn write_load_limit(&self) -> usize {
        self.budget_bytes / WRITE_LOAD_FRACTION.1 * WRITE_LOAD_FRACTION.0
    }

    /// Whether a write to an evicted frame records its change in the frame's change log
    /// (`Tree::write_unloaded`) rather than loading the frame, a decoded frame taken to need
    /// `2 × FRAME_SIZE` bytes (about what a full frame decodes to). Writes load frames only
    /// into the room below `WRITE_LOAD_FRACTION` of the budget: once the frames a workload
    /// writes to outgrow the budget, a frame loaded to take a write displaces another
    /// (evicted dirty, `FrameCell::detach_changes`) before it takes many more, and each
    /// checkpoint frees the logs it wrote out, a room such loads refilled. The rest is for
    /// the frames reads admit and for the logs.
    pub(crate) fn is_full_for_writes(&self) -> bool {
        self.is_full_for(2 * FRAME_SIZE, self.write_load_limit())
    }

    /// Whether the cached bytes exceed the budget (always false without a source: nothing can
    /// be evicted then).
    pub(crate) fn over_budget(&self) -> bool {
        self.source.is_some() && self.cached_bytes.load(Ordering::Relaxed) > self.budget_bytes as i64
    }

    /// Runs the clock hand until the cached bytes fit the budget or nothing more can go.
    pub(crate) fn evict_if_needed(&self)
    where
        N: FrameRoot,
    {
        if !self.over_budget() {
            return;
        }
        let mut ring = self.ring.lock();
        // Bound: two passes give every referenced frame its second chance.
        let mut steps = ring.len() * 2;
        while steps > 0 && self.cached_bytes.load(Ordering::Relaxed) > self.budget_bytes as i64 {
            steps -= 1;
            let Some(cell) = ring.pop_front() else { break };
            if cell.is_retired() || cell.root.load().is_none() {
                continue; // no longer resident here; drop the entry
            }
            if cell.id == self.pinned
                || cell.referenced.swap(false, Ordering::Relaxed)
                || (cell.is_dirty() && !cell.may_detach_changes())
            {
                ring.push_back(cell);
                continue;
            }
            let Some(_latch) = cell.latch.try_lock() else {
                ring.push_back(cell);
                continue;
            };
            // A merge may have retired the frame (and uncounted its memory) since the check
            // above; it holds the latch while it does, so this check is final.
            if cell.is_retired() {
                continue;
            }
            // A dirty frame goes when its change log can stand for it (its writes since the
            // disk state), as if they had been written while it was evicted: a load that
            // outruns the checkpointer writes every frame again before the checkpoint that
            // would clean it ends, so only clean frames going let the heap grow to the whole
            // tree. Writers are latched out; a checkpoint capturing the frame meanwhile
            // takes the log whole, indexed or not, and its root or none: both describe it
            // (and it holds the load locks of all it captured until they are clean).
            let dirty = cell.is_dirty();
            let detached = match dirty {
                false => 0,
                true => match cell.detach_changes() {
                    Some(bytes) => bytes,
                    None => {
                        ring.push_back(Arc::clone(&cell));
                        continue;
                    }
                },
            };
            cell.root.store(None);
            self.cached_bytes.fetch_add(detached as i64 - cell.size().memory as i64, Ordering::Relaxed);
            self.frame_evictions.fetch_add(1, Ordering::Relaxed);
            if dirty {
                self.dirty_evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The body of a frame image as a point read walks it: from the root record down, one record
/// per step, each fetched (and verified) on demand.
pub(crate) trait ImageBody {
    /// The body offset of the root record.
    fn root_offset(&self) -> usize;
    /// The body's length in bytes.
    fn body_len(&self) -> usize;
    /// How many records the body holds (the header's count).
    fn record_count(&self) -> usize;
    /// The body's bytes from offset `pos` on: at least `len` of them (fewer only at the
    /// body's end), fetched and verified. `pos` is inside the body.
    fn bytes_at(&mut self, pos: usize, len: usize) -> Result<&[u8]>;
    /// A corruption error naming `offset` (in the image) of this frame.
    fn corruption(&self, offset: usize, reason: String) -> Error;
    /// Where the frame's image lies (file and offset), for errors.
    fn location(&self) -> &(PathBuf, u64);
    /// The frame's id.
    fn id(&self) -> FrameId;
}

/// An evicted frame's image, read page by page through the page cache: page 0 (header and
/// page table) at open, then the pages holding each record the walk visits. Where the source
/// lends the slot from a mapping, records are read in place, each page verified the first
/// time the walk touches it; otherwise pages are copied into a small window (a point read
/// moves from the root record towards the body's start, visiting about one record per level).
pub(crate) struct PagedImage<'s> {
    source: &'s dyn FrameSource,
    id: FrameId,
    head: Arc<FrameHead>,
    location: (PathBuf, u64),
    /// The slot, lent by the source (`FrameSource::lend_image`).
    mapped: Option<&'s [u8]>,
    /// Pages of `mapped` verified so far, a bit each.
    verified: u128,
    /// Without a mapping: image pages `first ..` (whole pages, each verified).
    window: Vec<u8>,
    first: usize,
    /// Pages fetched from the source.
    pub(crate) pages_read: u64,
}

const _: () = assert!(PAGES_PER_FRAME <= u128::BITS as usize, "a bit per page of a frame");

impl<'s> PagedImage<'s> {
    /// Opens frame `id`'s image: with its header as a point read verified it before
    /// (`kept`), or by verifying page 0 (header, page table and first records), read in
    /// `mapped` where the source lent the slot. `location` is where the source keeps it.
    pub(crate) fn open(
        source: &'s dyn FrameSource,
        id: FrameId,
        location: (PathBuf, u64),
        kept: Option<Arc<FrameHead>>,
        mapped: Option<&'s [u8]>,
    ) -> Result<PagedImage<'s>> {
        // A kept header describes the image a walk read before; in a mapped slot it must be
        // this one (its trusted pages say nothing of another image).
        let kept = kept.filter(|head| mapped.is_none_or(|slot| frame::image_sum(slot) == Some(head.sum)));
        let (head, window, verified): (_, _, u128) = match kept {
            Some(head) => (head, Vec::new(), 0),
            None => {
                let mut window = Vec::new();
                let page0 = match mapped {
                    Some(slot) => &slot[..PAGE_BYTES],
                    None => {
                        window = vec![0u8; PAGE_BYTES];
                        source.read_pages(id, 0, &mut window)?;
                        &window[..]
                    }
                };
                let head = frame::open_frame_head(page0, FRAME_SIZE, id)
                    .map_err(|e| corruption_at(&location, id, e.offset, e.reason))?;
                if let Some(slot) = mapped {
                    // Page 0 was verified in place. This is the first walk of this image in
                    // this process: the rest of its used bytes are read in, in the background,
                    // rather than a page a fault.
                    head.trusted[0].fetch_or(1, Ordering::Release);
                    crate::io::will_need(slot.get(PAGE_BYTES..head.used).unwrap_or_default());
                }
                (Arc::new(head), window, 1)
            }
        };
        let pages_read = u64::from(verified.count_ones());
        Ok(PagedImage { source, id, head, location, mapped, verified, window, first: 0, pages_read })
    }

    fn window_pages(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.window.len() / PAGE_BYTES
    }

    /// Pages `first..last` of the lent slot, the bytes from `start`. Each page is verified
    /// the first time any walk of this image touches it (`FrameHead::trusted`): the slot's
    /// bytes cannot change while the manifest names it, so a page once verified in the page
    /// cache stays verified for this process.
    fn mapped_at(&mut self, slot: &'s [u8], start: usize, first: usize, last: usize) -> Result<&'s [u8]> {
        for page in first..last {
            if self.verified & (1 << page) != 0 {
                continue;
            }
            let (trusted, bit) = (&self.head.trusted[page / 64], 1u64 << (page % 64));
            if trusted.load(Ordering::Acquire) & bit == 0 {
                if let Err(e) = self.head.pages.check(page, &slot[page * PAGE_BYTES..]) {
                    return Err(self.corruption(e.offset, e.reason));
                }
                trusted.fetch_or(bit, Ordering::Release);
            }
            self.verified |= 1 << page;
            self.pages_read += 1;
        }
        Ok(&slot[start..self.head.used.min(last * PAGE_BYTES)])
    }
}

impl ImageBody for PagedImage<'_> {
    fn root_offset(&self) -> usize {
        self.head.root_offset
    }
    fn body_len(&self) -> usize {
        self.head.used - FRAME_HEADER_LEN
    }
    fn record_count(&self) -> usize {
        self.head.records
    }
    fn bytes_at(&mut self, pos: usize, len: usize) -> Result<&[u8]> {
        let start = FRAME_HEADER_LEN + pos;
        let end = start.saturating_add(len).min(self.head.used);
        if start >= end {
            return Err(self.corruption(start, "a record lies outside the body".into()));
        }
        let (first, last) = (start / PAGE_BYTES, end.div_ceil(PAGE_BYTES));
        if let Some(slot) = self.mapped {
            return self.mapped_at(slot, start, first, last);
        }
        let have = self.window_pages();
        if !(have.start <= first && last <= have.end) {
            // Keep what the window holds when it starts the run (a record found longer than
            // first fetched); otherwise start a new window at the record's page.
            let keep = if have.contains(&first) { have.end } else { first };
            if keep == first {
                self.window.clear();
                self.first = first;
            }
            let from = self.window.len();
            self.window.resize((last - self.first) * PAGE_BYTES, 0);
            if let Err(e) = self.source.read_pages(self.id, keep * PAGE_BYTES, &mut self.window[from..]) {
                self.window.clear(); // nothing unread stays readable
                return Err(e);
            }
            self.pages_read += (last - keep) as u64;
            for page in keep..last {
                let at = (page - self.first) * PAGE_BYTES;
                if let Err(e) = self.head.pages.check(page, &self.window[at..]) {
                    self.window.clear(); // nothing unverified stays readable
                    return Err(self.corruption(e.offset, e.reason));
                }
            }
        }
        let base = self.first * PAGE_BYTES;
        Ok(&self.window[start - base..self.head.used.min(self.window_pages().end * PAGE_BYTES) - base])
    }
    fn corruption(&self, offset: usize, reason: String) -> Error {
        corruption_at(&self.location, self.id, offset, reason)
    }

    fn location(&self) -> &(PathBuf, u64) {
        &self.location
    }

    fn id(&self) -> FrameId {
        self.id
    }
}

/// A corruption error at byte `offset` of frame `id`'s image (or delta) that lies at `location`.
pub(crate) fn corruption_at(location: &(PathBuf, u64), id: FrameId, offset: usize, reason: String) -> Error {
    Error::Corruption {
        location: Location {
            file: location.0.clone(),
            frame: Some(id.0),
            offset: location.1 + offset as u64,
        },
        reason,
    }
}

/// Frame images held in memory: the frame source of tests and of the tree harness.
#[derive(Default)]
pub(crate) struct MemFrameSource {
    frames: Mutex<std::collections::HashMap<FrameId, Vec<u8>>>,
}

impl MemFrameSource {
    /// Stores (or replaces) the image of frame `id`.
    pub(crate) fn store(&self, id: FrameId, bytes: Vec<u8>) {
        self.frames.lock().insert(id, bytes);
    }
    /// Forgets every frame not in `live`.
    pub(crate) fn retain(&self, live: &[FrameId]) {
        self.frames.lock().retain(|id, _| live.contains(id));
    }
    pub(crate) fn images(&self) -> Vec<(FrameId, Vec<u8>)> {
        let mut v: Vec<_> = self.frames.lock().iter().map(|(id, b)| (*id, b.clone())).collect();
        v.sort_by_key(|(id, _)| *id);
        v
    }
}

impl FrameSource for MemFrameSource {
    fn read_frame(&self, id: FrameId, buf: &mut [u8]) -> Result<usize> {
        let frames = self.frames.lock();
        let corrupt = |reason: &str| Error::Corruption {
            location: Location { file: PathBuf::from("<memory>"), frame: Some(id.0), offset: 0 },
            reason: reason.into(),
        };
        let image = frames.get(&id).ok_or_else(|| corrupt("frame image missing"))?;
        if image.len() > buf.len() {
            return Err(corrupt("frame image is longer than a frame"));
        }
        // An image holds the frame up to its padding, which is never read.
        buf[..image.len()].copy_from_slice(image);
        Ok(image.len())
    }
    fn read_pages(&self, id: FrameId, offset: usize, buf: &mut [u8]) -> Result<()> {
        let frames = self.frames.lock();
        let bytes = frames.get(&id).and_then(|image| image.get(offset..offset.checked_add(buf.len())?));
        let bytes = bytes.ok_or_else(|| Error::Corruption {
            location: Location { file: PathBuf::from("<memory>"), frame: Some(id.0), offset: offset as u64 },
            reason: "frame image missing or shorter than the pages read".into(),
        })?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
    fn locate(&self, id: FrameId) -> (PathBuf, u64) {
        let _ = id;
        (PathBuf::from("<memory>"), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain's merged index (`merge_chain`, read through `ChainView`) holds each key's
    /// newest entry in key order, and its searches agree with a scan, over random chains of
    /// one to four deltas sharing keys, with puts and deletes; the view of a chain indexed
    /// by `walk_deltas` (the newest delta's `chain_index`) equals one merged on the spot.
    #[test]
    fn a_chains_merged_index_holds_each_keys_newest_entry() {
        use crate::format::delta::DeltaWriter;
        use rand::{Rng, SeedableRng};
        /// A key's state: its value and version, or deleted.
        type State = Option<(Vec<u8>, u64)>;
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let id = FrameId(9);
        for round in 0..200 {
            let chain = rng.gen_range(1..=4);
            let mut model: std::collections::BTreeMap<Vec<u8>, State> = Default::default();
            let mut deltas = Vec::new();
            for i in 0..chain {
                let mut keys: std::collections::BTreeMap<Vec<u8>, State> = Default::default();
                for _ in 0..rng.gen_range(0..40) {
                    // Keys sharing their first eight bytes (`key_fence` ties) and keys ending
                    // in a zero byte (which ties the fence's padding) beside short ones.
                    let (d, k) = (rng.gen_range(0..3), rng.gen_range(0..30));
                    let key = match rng.gen_range(0..3) {
                        0 => format!("d{d}/k{k:02}").into_bytes(),
                        1 => format!("d{d}/k{k:02}/file-{:03}", rng.gen_range(0..5)).into_bytes(),
                        _ => [format!("d{d}/k{}", k % 10).as_bytes(), b"\0"].concat(),
                    };
                    let state = rng.gen_bool(0.8).then(|| (format!("v{round}.{i}").into_bytes(), i as u64));
                    keys.insert(key, state);
                }
                let mut writer = DeltaWriter::new(4096);
                for (key, state) in &keys {
                    writer.push(&match state {
                        Some((value, version)) => DeltaEntry::Put { key, value, version: *version },
                        None => DeltaEntry::Delete { key },
                    });
                }
                let bytes = writer.finish(id, i as u32 + 1).unwrap();
                deltas.push(Delta::verify(id, i, &bytes, (PathBuf::from("t"), 0), true).unwrap());
                model.extend(keys);
            }
            let refs: Vec<DeltaRef<'_>> = deltas.iter().map(|d| d.read(None).unwrap()).collect();
            let view = ChainView::new(&refs).unwrap();
            let got: Vec<(Vec<u8>, State)> = (0..view.len())
                .map(|i| match view.entry(i).unwrap() {
                    DeltaEntry::Put { key, value, version } => {
                        (key.to_vec(), Some((value.to_vec(), version)))
                    }
                    DeltaEntry::Delete { key } => (key.to_vec(), None),
                })
                .collect();
            let want: Vec<_> = model.clone().into_iter().collect();
            assert_eq!(got, want, "round {round}, {chain} deltas");
            let keys: Vec<&Vec<u8>> = model.keys().collect();
            for probe in [
                "",
                "d0",
                "d1/",
                "d1/k1",
                "d1/k1\0",
                "d1/k15",
                "d1/k15/",
                "d1/k15/file-002",
                "d2/k29",
                "d2/k3",
                "d2/k3\0\0",
                "e",
            ] {
                let probe = probe.as_bytes();
                let from = rng.gen_range(0..=keys.len());
                let seek = keys
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, k)| k.as_slice() >= probe)
                    .map_or(keys.len(), |(i, _)| i);
                assert_eq!(
                    view.seek(from, probe).unwrap(),
                    seek,
                    "seek {:?} from {from}",
                    String::from_utf8_lossy(probe)
                );
                let start = view.seek(0, probe).unwrap();
                let past = keys
                    .iter()
                    .enumerate()
                    .skip(start)
                    .find(|(_, k)| !k.starts_with(probe))
                    .map_or(keys.len(), |(i, _)| i);
                assert_eq!(view.past_prefix(start, probe).unwrap(), past);
            }
            assert_eq!(view.key(view.len()).unwrap(), None);
            if chain > 1 {
                let merged = merge_chain(&refs).unwrap();
                let indexed: Vec<(u32, u32)> = merged.iter().map(|e| (e.delta, e.at)).collect();
                deltas.last_mut().unwrap().chain_index = merged;
                let refs: Vec<DeltaRef<'_>> = deltas.iter().map(|d| d.read(None).unwrap()).collect();
                let view = ChainView::new(&refs).unwrap();
                assert!(matches!(view.index, ChainIndex::Merged(std::borrow::Cow::Borrowed(_))));
                let kept: Vec<(u32, u32)> = (0..view.len())
                    .map(|i| view.locate(i))
                    .map(|(d, at)| {
                        (refs.iter().position(|r| std::ptr::eq(r.delta, d.delta)).unwrap() as u32, at)
                    })
                    .collect();
                assert_eq!(kept, indexed);
            }
        }
    }

    #[test]
    fn admission_counts_halve_every_epoch_and_vanish_after_thirty_two() {
        let packed = |epoch: u32, pages: u32| u64::from(epoch) << 32 | u64::from(pages);
        assert_eq!(aged_pages(packed(7, 3_000), 7), 3_000);
        assert_eq!(aged_pages(packed(7, 3_000), 8), 1_500);
        assert_eq!(aged_pages(packed(7, 3_000), 10), 375);
        assert_eq!(aged_pages(packed(7, u32::MAX), 7 + 32), 0);
        // A count from a later epoch than the caller knows of is not aged.
        assert_eq!(aged_pages(packed(9, 3_000), 8), 3_000);

        let cell = FrameCell::<()>::evicted(FrameId(5));
        cell.count_admission_pages(1_000, 2);
        cell.count_admission_pages(1_000, 2);
        assert_eq!(cell.admission_pages(2), 2_000);
        // The next epoch halves what was counted before it, then adds.
        cell.count_admission_pages(100, 3);
        assert_eq!(cell.admission_pages(3), 1_100);
        assert_eq!(cell.admission_pages(4), 550);
        // A reader still in an older epoch counts into the newer one.
        cell.count_admission_pages(10, 2);
        assert_eq!(cell.admission_pages(3), 1_110);
    }

    #[test]
    fn the_admission_window_is_half_a_threshold_a_frame_of_the_cache() {
        let pool = |budget: usize| BufferPool::<()>::new(budget, None, FrameId(0));
        let threshold = u64::from(ADMIT_AFTER_IMAGE_PAGES);
        assert_eq!(pool(64 * 2 * FRAME_SIZE).admission_window, threshold * 32);
        assert_eq!(pool(FRAME_SIZE).admission_window, threshold * ADMISSION_FRAMES_MIN as u64 / 2);
        assert!(pool(usize::MAX).admission_window > threshold, "no overflow");
    }
}

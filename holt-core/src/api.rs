//! Public value types of the holt-core API (the handle itself is in `db.rs`).

use std::time::Duration;

/// Largest key, in bytes. Keys are 1..=KEY_LEN_MAX arbitrary bytes (0x00 included).
pub const KEY_LEN_MAX: usize = 4096;
/// Largest value, in bytes.
pub const VALUE_LEN_MAX: usize = 65536;

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// After an fdatasync that covers the write (shared by concurrent writers: group commit).
    #[default]
    Sync,
    /// Once the record is in the log ring; on disk within `Options::wal_flush_interval`.
    Async,
    /// The durability of a database opened with `Db::open_in_memory`: no log, data lives until
    /// the process ends. As a per-write override on a database with a log it is treated as
    /// `Async` (the write is logged: an unlogged write would break replay's version order).
    Memory,
}

/// Options for opening a database.
#[derive(Debug, Clone)]
pub struct Options {
    /// Default durability of writes; each write may override it.
    pub durability: Durability,
    /// Memory budget for cached frames, counted as the heap bytes of their decoded nodes (about
    /// 1.5–1.8× their encoded size); clean frames are evicted beyond it.
    pub memory_budget_bytes: usize,
    /// Bytes of the write-ahead log ring shared by all writers.
    pub wal_ring_bytes: usize,
    /// Longest time an `Async` write stays only in memory.
    pub wal_flush_interval: Duration,
    /// Start a background checkpoint once the log has grown this much since the last one.
    /// Also the most log a checkpoint leaves for recovery to read again: a checkpoint keeps
    /// the log in its current segment (instead of moving to a fresh one) only while less
    /// than this much, and less than half the segment, is used. Reads that went through this
    /// many bytes of evicted frames' deltas again (verified anew, or merged by listings) also
    /// start one, which writes the frames they went through most whole.
    pub checkpoint_wal_bytes: u64,
    /// Start a background checkpoint at least this often while there are dirty frames, or
    /// frames whose deltas reads keep verifying (a checkpoint writes those whole).
    pub checkpoint_interval: Duration,
    /// Use io_uring for frame I/O where the kernel offers it (feature `io-uring`).
    pub use_io_uring: bool,
    /// Read and write whole frames with O_DIRECT where the file system supports it, so the
    /// page cache holds no second copy of what the frame cache decoded. Off by default:
    /// beyond the memory budget, the page cache is what serves evicted frames' pages, and
    /// images a checkpoint wrote with O_DIRECT reach it only by a disk read (10M keys, data
    /// 8× the budget: gets 3.8–5.1 against 3.1 µs, the metadata mix 43–53 against 25–29).
    pub direct_io: bool,
    /// Read evicted frames' pages in place through a read-only mapping of the frames file
    /// instead of a `pread` each (Linux), verifying each page of an image once per process
    /// rather than on every read. Faster beyond the memory budget; the costs: a media error
    /// while the kernel reads such a page kills the process with SIGBUS instead of failing
    /// the read with an I/O error, and damage on the disk after a page's first check is
    /// found at the next open, not the next read.
    pub mapped_reads: bool,
    /// The weight of each stored value in usage totals (`Db::usage`); `None` weighs every
    /// value 0, so usage counts keys only.
    pub weigher: Option<Weigher>,
}

/// How much a stored value weighs in usage totals: the gateway weighs an object record by
/// the object's size. A pure function of the value, named so that a database opened with
/// another weigher (or none) than the one its totals were counted with counts them again
/// (once, at open). Weights above 2^48 − 1 count as 2^48 − 1.
#[derive(Clone, Copy)]
pub struct Weigher {
    /// Stored in the manifest beside the totals; at most 255 bytes.
    pub name: &'static str,
    /// The weight of a stored value.
    pub weigh: fn(&[u8]) -> u64,
}

impl std::fmt::Debug for Weigher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weigher").field("name", &self.name).finish_non_exhaustive()
    }
}

/// The keys stored under a prefix and the sum of their weights (`Db::usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Keys stored under the prefix.
    pub keys: u64,
    /// The sum of their weights (`Options::weigher`).
    pub weight: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            memory_budget_bytes: 1 << 30,
            wal_ring_bytes: 8 << 20,
            wal_flush_interval: Duration::from_millis(5),
            checkpoint_wal_bytes: 256 << 20,
            checkpoint_interval: Duration::from_secs(60),
            use_io_uring: true,
            direct_io: false,
            mapped_reads: true,
            weigher: None,
        }
    }
}

/// The version of a stored value: the log sequence number of the write that stored it.
/// Returned by reads; a compare-and-swap write names the version it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u64);

/// A precondition checked atomically with a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Condition {
    /// Write unconditionally.
    #[default]
    None,
    /// Write only if the key is absent (S3 `If-None-Match: *`).
    Absent,
    /// Write only if the key is present.
    Present,
    /// Write only if the key is present with exactly this version (S3 `If-Match`).
    Version(Version),
}

/// Options for one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Overrides the database's default durability for this write.
    pub durability: Option<Durability>,
}

/// One operation of an atomic batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Store `value` under `key` (replacing any value), if `condition` holds.
    Put {
        /// The key: 1..=[`KEY_LEN_MAX`] bytes.
        key: Vec<u8>,
        /// The value: at most [`VALUE_LEN_MAX`] bytes.
        value: Vec<u8>,
        /// Checked against the key's state before the batch; if it fails, no op of the batch
        /// is applied.
        condition: Condition,
    },
    /// Remove `key` (a no-op when it is absent), if `condition` holds.
    Delete {
        /// The key: 1..=[`KEY_LEN_MAX`] bytes.
        key: Vec<u8>,
        /// Checked against the key's state before the batch; if it fails, no op of the batch
        /// is applied.
        condition: Condition,
    },
}

impl BatchOp {
    /// The key the op writes.
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key, .. } => key,
        }
    }

    /// The op with its bytes borrowed, as the log and the tree read it.
    pub(crate) fn as_op(&self) -> Op<'_> {
        match self {
            BatchOp::Put { key, value, condition } => Op::Put { key, value, condition: *condition },
            BatchOp::Delete { key, condition } => Op::Delete { key, condition: *condition },
        }
    }
}

/// Every op of `ops`, borrowed.
pub(crate) fn ops_of(ops: &[BatchOp]) -> Vec<Op<'_>> {
    ops.iter().map(BatchOp::as_op).collect()
}

/// One operation with its key and value borrowed: what the log encodes and the tree applies.
/// A single put or delete builds one on the stack instead of copying its key and value into
/// a `BatchOp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    Put { key: &'a [u8], value: &'a [u8], condition: Condition },
    Delete { key: &'a [u8], condition: Condition },
}

impl<'a> Op<'a> {
    pub(crate) fn key(&self) -> &'a [u8] {
        match *self {
            Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    pub(crate) fn condition(&self) -> Condition {
        match *self {
            Op::Put { condition, .. } | Op::Delete { condition, .. } => condition,
        }
    }

    /// A put's value; `None` for a delete.
    pub(crate) fn value(&self) -> Option<&'a [u8]> {
        match *self {
            Op::Put { value, .. } => Some(value),
            Op::Delete { .. } => None,
        }
    }
}

/// An atomic group of puts and deletes: all of it is applied and logged, or none of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The operations, applied in this order (of two ops on one key, the later wins); every
    /// condition is checked against the state before the batch.
    pub ops: Vec<BatchOp>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds an unconditional put of `value` under `key`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(BatchOp::Put { key: key.into(), value: value.into(), condition: Condition::None });
        self
    }
    /// Adds a put that applies only if `condition` holds for `key`; if it does not, the whole
    /// batch fails with `Error::ConditionFailed`.
    pub fn put_if(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        condition: Condition,
    ) -> &mut Self {
        self.ops.push(BatchOp::Put { key: key.into(), value: value.into(), condition });
        self
    }
    /// Adds an unconditional delete of `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(BatchOp::Delete { key: key.into(), condition: Condition::None });
        self
    }
    /// Adds a delete that applies only if `condition` holds for `key`; if it does not, the
    /// whole batch fails with `Error::ConditionFailed`.
    pub fn delete_if(&mut self, key: impl Into<Vec<u8>>, condition: Condition) -> &mut Self {
        self.ops.push(BatchOp::Delete { key: key.into(), condition });
        self
    }
    /// Whether the batch has no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Number of operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// A stored value and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value bytes (empty in a listing that did not ask `with_values`).
    pub value: Vec<u8>,
    /// The version of the write that stored the value.
    pub version: Version,
}

/// A delimiter listing request, with S3 ListObjectsV2 semantics (see `list`).
#[derive(Debug, Clone, Default)]
pub struct ListRequest<'a> {
    /// Only keys starting with this are listed.
    pub prefix: &'a [u8],
    /// Roll keys up to their first occurrence of this (any length) at or after the end of
    /// `prefix`. Empty means no rollup.
    pub delimiter: &'a [u8],
    /// Exclusive lower bound: only entries (keys or common prefixes) greater than this.
    /// A common prefix of which `start_after` is an extension is not returned again.
    pub start_after: &'a [u8],
    /// Most entries to return (keys and common prefixes each count one).
    pub limit: usize,
    /// Whether to return values with keys (a listing of names only skips copying them).
    pub with_values: bool,
}

/// One entry of a listing, in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListItem {
    /// A key under the prefix that no delimiter rolled up.
    Key {
        /// The whole key, prefix included.
        key: Vec<u8>,
        /// Its value (empty unless the request asked `with_values`) and version.
        entry: Entry,
    },
    /// A rollup of every key that shares this prefix, up to and including the delimiter.
    CommonPrefix(Vec<u8>),
}

impl ListItem {
    /// The key or common prefix: the exclusive resume point after this item.
    pub fn name(&self) -> &[u8] {
        match self {
            ListItem::Key { key, .. } => key,
            ListItem::CommonPrefix(p) => p,
        }
    }
}

/// One entry of a listing as `Db::list_with` meets it, borrowed from the tree for the length
/// of the visit: no copy of the key or the value is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListEntry<'a> {
    /// A key, with its value (empty unless the request asked `with_values`) and version.
    Key {
        /// The whole key, prefix included.
        key: &'a [u8],
        /// The value, or empty when the request did not ask `with_values`.
        value: &'a [u8],
        /// The version of the write that stored the value.
        version: Version,
    },
    /// A rollup of every key that shares this prefix, up to and including the delimiter.
    CommonPrefix(&'a [u8]),
}

impl ListEntry<'_> {
    /// The key or common prefix: the exclusive resume point after this entry.
    pub fn name(&self) -> &[u8] {
        match self {
            ListEntry::Key { key, .. } => key,
            ListEntry::CommonPrefix(p) => p,
        }
    }
}

/// A page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// At most `ListRequest::limit` keys and common prefixes, in byte order.
    pub items: Vec<ListItem>,
    /// True when at least one more entry follows the last item (decided by looking past it).
    pub truncated: bool,
}

/// Counters for operators (exported by the gateway's /metrics).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Keys stored.
    pub keys: u64,
    /// Frames the tree is made of, cached or not.
    pub frames: u64,
    /// Frames decoded in memory now.
    pub frames_cached: u64,
    /// Cached frames changed since the last checkpoint wrote them (evicted only while their
    /// change log can stand for them: `frame_dirty_evictions`).
    pub frames_dirty: u64,
    /// Memory of the cached frames' decoded nodes: what `Options::memory_budget_bytes` bounds.
    pub cache_bytes: u64,
    /// Reads from the frames file: frames loaded (decoded), and the reads counted in
    /// `frame_image_reads`.
    pub frame_reads: u64,
    /// Frames loaded into the cache (read whole and decoded) for reads and writes; unlike
    /// `frame_reads`, not a checkpoint's reads of evicted frames it rewrites whole.
    pub frame_loads: u64,
    /// Frames dropped from the cache to stay within `Options::memory_budget_bytes`.
    pub frame_evictions: u64,
    /// Of `frame_evictions`, frames dropped while dirty: their change logs then hold their
    /// writes since the last checkpoint, as for writes to an evicted frame.
    pub frame_dirty_evictions: u64,
    /// Point reads and listings answered from part of an evicted frame's on-disk image (the
    /// pages on a key's path, or the pages of the part a listing's prefix leads to) instead
    /// of decoding the whole frame.
    pub frame_image_reads: u64,
    /// 4 KiB pages those reads fetched (through the page cache), header pages included.
    pub frame_page_reads: u64,
    /// Puts and deletes recorded in an evicted frame's change log without loading the frame.
    pub frame_unloaded_writes: u64,
    /// Deltas of evicted frames read and verified whole for point reads, listings and writes.
    /// A frame's deltas, once verified, are kept (their index, a few bytes an entry) within
    /// an eighth of the budget, so a walk that finds them kept verifies none.
    pub frame_delta_verifies: u64,
    /// Kept deltas dropped to make room for another frame's (the frame had not been walked
    /// since the delta clock's hand last passed it).
    pub frame_delta_evictions: u64,
    /// Bytes written to the write-ahead log since open (0 in memory).
    pub wal_bytes_written: u64,
    /// fdatasync calls on the log since open; one covers every record drained before it.
    pub wal_syncs: u64,
    /// Checkpoints completed since open.
    pub checkpoints: u64,
    /// Whether a checkpoint is running now. From its start it holds the change logs it
    /// writes (the cache no longer counts their memory); `checkpoints` counts it only once
    /// its manifest is durable.
    pub checkpoint_running: bool,
    /// Longest time, in microseconds, a checkpoint held writers off while it captured the
    /// dirty frames (the only time writers wait for one).
    pub checkpoint_stall_max_us: u64,
    /// Frames checkpoints wrote as whole images, and as deltas of the keys that changed.
    pub checkpoint_frames_whole: u64,
    /// Frames checkpoints wrote as deltas of the keys changed since the frame's image.
    pub checkpoint_frames_delta: u64,
    /// Of those deltas, the ones that replaced a full chain (its entries merged with the new
    /// changes) instead of the frame being written whole.
    pub checkpoint_chains_merged: u64,
    /// Of `checkpoint_frames_whole`, frames written whole because reads kept going through
    /// their deltas (verifying them anew, or merging them in listings): their chains went.
    pub checkpoint_frames_rewritten: u64,
    /// The log position (in bytes) past the last record reserved, which the next write's
    /// version will be; in memory, the last write's version.
    pub last_lsn: u64,
    /// The log position below which every record is fdatasynced; equals `last_lsn` in memory.
    pub durable_lsn: u64,
}

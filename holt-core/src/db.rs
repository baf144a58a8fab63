//! The public handle: open, read, write, list, checkpoint, close.
//!
//! Signatures here are what the gateway codes against: change them only together with the
//! gateway.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::api::*;
use crate::error::{Error, Result};
use crate::tree::{Tree, FRAME_BUDGET_BYTES};

/// A database handle. Cheap to share: wrap it in an `Arc` (all methods take `&self`).
/// `Db` is `Send + Sync`; readers never wait for writers.
pub struct Db {
    tree: Tree,
    /// The last sequence number handed out (memory mode: the log is a counter).
    last_lsn: AtomicU64,
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > KEY_LEN_MAX {
        return Err(Error::KeyLength { len: key.len() });
    }
    Ok(())
}

impl Db {
    /// Opens (or creates) the database in `dir`, taking an exclusive lock on the directory and
    /// recovering from the manifest, the frames and the write-ahead log.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        let _ = (dir.as_ref(), options);
        Err(Error::InvalidArgument("on-disk databases are not wired yet".into()))
    }

    /// A database that lives in memory only (no files, no log).
    pub fn open_in_memory(options: Options) -> Result<Db> {
        Ok(Db { tree: Tree::new(FRAME_BUDGET_BYTES, options.memory_budget_bytes), last_lsn: AtomicU64::new(0) })
    }

    fn apply(&self, ops: &[BatchOp]) -> Result<crate::tree::ApplyOutcome> {
        self.tree.apply(ops, &mut || Ok(self.last_lsn.fetch_add(1, Ordering::AcqRel) + 1))
    }

    /// The value and version stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        check_key(key)?;
        self.tree.get(key)
    }

    /// Stores `value` under `key` with the database's default durability.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Version> {
        self.put_with(key, value, Condition::None, WriteOptions::default())
    }

    /// Stores `value` under `key` if `condition` holds (checked atomically with the write);
    /// otherwise returns `Error::ConditionFailed` and changes nothing.
    pub fn put_with(&self, key: &[u8], value: &[u8], condition: Condition, options: WriteOptions) -> Result<Version> {
        let _ = options;
        let op = BatchOp::Put { key: key.to_vec(), value: value.to_vec(), condition };
        Ok(Version(self.apply(std::slice::from_ref(&op))?.version))
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.delete_with(key, Condition::None, WriteOptions::default())
    }

    /// Deletes `key` if `condition` holds; returns whether it existed.
    pub fn delete_with(&self, key: &[u8], condition: Condition, options: WriteOptions) -> Result<bool> {
        let _ = options;
        let op = BatchOp::Delete { key: key.to_vec(), condition };
        let outcome = self.apply(std::slice::from_ref(&op))?;
        Ok(outcome.existed.first().copied().unwrap_or(false))
    }

    /// Applies every operation of `batch` atomically (one log record): if any condition fails,
    /// nothing is applied and `Error::ConditionFailed` is returned. Returns the batch's version.
    pub fn write_batch(&self, batch: &Batch, options: WriteOptions) -> Result<Version> {
        let _ = options;
        Ok(Version(self.apply(&batch.ops)?.version))
    }

    /// Keys starting with `prefix` and greater than `start_after`, in byte order, at most
    /// `limit` of them.
    pub fn scan(&self, prefix: &[u8], start_after: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Entry)>> {
        let request = ListRequest { prefix, delimiter: b"", start_after, limit, with_values: true };
        let page = self.tree.list(&request)?.page;
        Ok(page
            .items
            .into_iter()
            .filter_map(|item| match item {
                ListItem::Key { key, entry } => Some((key, entry)),
                ListItem::CommonPrefix(_) => None,
            })
            .collect())
    }

    /// A delimiter listing with S3 ListObjectsV2 semantics. After a common prefix the walk
    /// resumes past every key under it without visiting them: O(depth) per returned entry.
    pub fn list(&self, request: &ListRequest<'_>) -> Result<ListPage> {
        Ok(self.tree.list(request)?.page)
    }

    /// Writes every dirty frame to fresh slots, switches the manifest and truncates the log.
    pub fn checkpoint(&self) -> Result<()> {
        Err(Error::InvalidArgument("checkpoints need an on-disk database, which is not wired yet".into()))
    }

    /// Operator counters.
    pub fn stats(&self) -> Stats {
        let pool = self.tree.pool_stats();
        let last = self.last_lsn.load(Ordering::Acquire);
        Stats {
            keys: self.tree.key_count(),
            frames: self.tree.frame_count() as u64,
            frames_cached: pool.frames_cached,
            cache_bytes: pool.cache_bytes,
            frame_reads: pool.frame_reads,
            frame_evictions: pool.frame_evictions,
            last_lsn: last,
            durable_lsn: last,
            ..Stats::default()
        }
    }

    /// Flushes the log, checkpoints, and releases the directory lock.
    pub fn close(self) -> Result<()> {
        Ok(())
    }
}

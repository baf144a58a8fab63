//! The public handle: open, read, write, list, checkpoint, close.
//!
//! INTERFACE CONTRACT (skeleton; the bodies are being filled in). Signatures here are what the
//! gateway codes against: change them only together with the gateway.

use std::path::Path;

use crate::api::*;
use crate::error::Result;

/// A database handle. Cheap to share: wrap it in an `Arc` (all methods take `&self`).
/// `Db` is `Send + Sync`; readers never wait for writers.
pub struct Db {
    _private: (),
}

impl Db {
    /// Opens (or creates) the database in `dir`, taking an exclusive lock on the directory and
    /// recovering from the manifest, the frames and the write-ahead log.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        let _ = (dir, options);
        unimplemented!()
    }

    /// A database that lives in memory only (no files, no log).
    pub fn open_in_memory(options: Options) -> Result<Db> {
        let _ = options;
        unimplemented!()
    }

    /// The value and version stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        let _ = key;
        unimplemented!()
    }

    /// Stores `value` under `key` with the database's default durability.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Version> {
        self.put_with(key, value, Condition::None, WriteOptions::default())
    }

    /// Stores `value` under `key` if `condition` holds (checked atomically with the write);
    /// otherwise returns `Error::ConditionFailed` and changes nothing.
    pub fn put_with(&self, key: &[u8], value: &[u8], condition: Condition, options: WriteOptions) -> Result<Version> {
        let _ = (key, value, condition, options);
        unimplemented!()
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.delete_with(key, Condition::None, WriteOptions::default())
    }

    /// Deletes `key` if `condition` holds; returns whether it existed.
    pub fn delete_with(&self, key: &[u8], condition: Condition, options: WriteOptions) -> Result<bool> {
        let _ = (key, condition, options);
        unimplemented!()
    }

    /// Applies every operation of `batch` atomically (one log record): if any condition fails,
    /// nothing is applied and `Error::ConditionFailed` is returned. Returns the batch's version.
    pub fn write_batch(&self, batch: &Batch, options: WriteOptions) -> Result<Version> {
        let _ = (batch, options);
        unimplemented!()
    }

    /// Keys starting with `prefix` and greater than `start_after`, in byte order, at most
    /// `limit` of them.
    pub fn scan(&self, prefix: &[u8], start_after: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Entry)>> {
        let _ = (prefix, start_after, limit);
        unimplemented!()
    }

    /// A delimiter listing with S3 ListObjectsV2 semantics. After a common prefix the walk
    /// resumes past every key under it without visiting them: O(depth) per returned entry.
    pub fn list(&self, request: &ListRequest<'_>) -> Result<ListPage> {
        let _ = request;
        unimplemented!()
    }

    /// Writes every dirty frame to fresh slots, switches the manifest and truncates the log.
    pub fn checkpoint(&self) -> Result<()> {
        unimplemented!()
    }

    /// Operator counters.
    pub fn stats(&self) -> Stats {
        unimplemented!()
    }

    /// Flushes the log, checkpoints, and releases the directory lock.
    pub fn close(self) -> Result<()> {
        unimplemented!()
    }
}

//! The public handle: open, read, write, list, checkpoint, close.
//!
//! Signatures here are what the gateway codes against: change them only together with the
//! gateway.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::api::*;
use crate::checkpoint::Durable;
use crate::error::{Error, Result};
use crate::io::{StdFs, Vfs};
use crate::tree::{ApplyOutcome, Tree, FRAME_BUDGET_BYTES};
use crate::wal::{Shared as WalShared, Ticket, WaiterSlot};

/// A database handle. Cheap to share: wrap it in an `Arc` (all methods take `&self`).
/// `Db` is `Send + Sync`; readers never wait for writers.
pub struct Db {
    tree: Arc<Tree>,
    /// The last sequence number handed out (memory mode: the log is a counter).
    last_lsn: AtomicU64,
    /// The log, frames file and checkpointer of a directory-backed database.
    durable: Option<Arc<Durable>>,
    default_durability: Durability,
}

/// Whether a single delete found its key.
fn existed(outcome: &ApplyOutcome) -> bool {
    outcome.existed.first().copied().unwrap_or(false)
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > KEY_LEN_MAX {
        return Err(Error::KeyLength { len: key.len() });
    }
    Ok(())
}

/// Creates `dir` and any missing parents, and makes each new entry durable (an fsync of the
/// directory that holds it): a database whose directory entry a power cut loses is lost
/// whole, manifest and log included, however well their own files were synced.
fn create_dir_durably(dir: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    // Bound: one step per path component.
    while let Some(path) = at.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        missing.push(path);
        at = path.parent();
    }
    std::fs::create_dir_all(dir)?;
    for created in missing.iter().rev() {
        let parent = created.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

impl Db {
    /// Opens (or creates) the database in `dir`, taking an exclusive lock on the directory and
    /// recovering from the manifest, the frames and the write-ahead log.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        let dir = dir.as_ref();
        create_dir_durably(dir).map_err(|source| Error::Io {
            op: "create directory",
            source,
            may_have_applied: false,
        })?;
        let fs = StdFs::with_io_uring(dir, options.use_io_uring)
            .with_direct_io(options.direct_io)
            .with_mapped_reads(options.mapped_reads);
        Self::open_on(Arc::new(fs), options, dir)
    }

    /// Opens a database stored in any [`Vfs`] (the simulated one in crash tests).
    #[doc(hidden)]
    pub fn open_with_vfs(vfs: Arc<dyn Vfs>, options: Options) -> Result<Db> {
        Self::open_on(vfs, options, Path::new("<vfs>"))
    }

    fn open_on(vfs: Arc<dyn Vfs>, options: Options, dir: &Path) -> Result<Db> {
        let opened = crate::recovery::open(vfs, &options, dir)?;
        opened.durable.start_background(Arc::clone(&opened.tree));
        Ok(Db {
            tree: opened.tree,
            last_lsn: AtomicU64::new(0),
            durable: Some(opened.durable),
            default_durability: options.durability,
        })
    }

    /// A database that lives in memory only (no files, no log).
    pub fn open_in_memory(options: Options) -> Result<Db> {
        Ok(Db {
            tree: Arc::new(
                Tree::new(FRAME_BUDGET_BYTES, options.memory_budget_bytes, None).with_weigh(
                    options.weigher.map_or(crate::tree::no_weight as fn(&[u8]) -> u64, |w| w.weigh),
                ),
            ),
            last_lsn: AtomicU64::new(0),
            durable: None,
            default_durability: Durability::Memory,
        })
    }

    /// Applies a batch: conditions checked and the record logged with the batch's frames
    /// latched (so for every key, log order is apply order). The write is visible to readers
    /// on return; a `Sync` write also returns the ticket whose group fdatasync the caller
    /// waits for (blocking in `apply`, or through a `Pending`). With a log, `Memory`
    /// durability is logged like `Async` (an unlogged write would break replay's ordering of
    /// versions).
    fn apply_logged(&self, ops: &[Op<'_>], options: WriteOptions) -> Result<(ApplyOutcome, Option<Ticket>)> {
        let Some(durable) = &self.durable else {
            let outcome =
                self.tree.apply(ops, &mut || Ok(self.last_lsn.fetch_add(1, Ordering::AcqRel) + 1))?;
            return Ok((outcome, None));
        };
        let durability = options.durability.unwrap_or(self.default_durability);
        let mut ticket = None;
        // The tree calls this with the batch's frames latched and its write gate held shared
        // (until the batch is published), so a checkpoint's capture never sees a batch that
        // is logged but not yet applied.
        let result = self.tree.apply(ops, &mut || {
            let t = durable.wal.append(ops, durability)?;
            ticket = Some(t);
            Ok(t.lsn)
        });
        match (result, ticket) {
            (Ok(outcome), ticket) => Ok((outcome, ticket.filter(|_| durability == Durability::Sync))),
            (Err(e), None) => Err(e),
            (Err(e), Some(_)) => {
                // Logged but not applied: memory and log disagree. Refuse further writes;
                // reopening replays the log, where the write is present.
                let source = std::io::Error::other(e.to_string());
                durable.wal.poison("apply after log", &source);
                Err(Error::Io { op: "apply after log", source, may_have_applied: true })
            }
        }
    }

    /// `apply_logged`, then blocks until a `Sync` write is durable.
    fn apply(&self, ops: &[Op<'_>], options: WriteOptions) -> Result<ApplyOutcome> {
        let (outcome, ticket) = self.apply_logged(ops, options)?;
        if let (Some(durable), Some(ticket)) = (&self.durable, ticket) {
            durable.wal.wait(ticket)?;
        }
        Ok(outcome)
    }

    /// `apply_logged`, the wait for a `Sync` write handed to the caller.
    fn apply_pending(&self, ops: &[Op<'_>], options: WriteOptions) -> Result<Pending<ApplyOutcome>> {
        let (outcome, ticket) = self.apply_logged(ops, options)?;
        Ok(self.pending(ticket, outcome))
    }

    /// A `Pending` for `value`, waiting for `ticket` if there is one.
    fn pending<T>(&self, ticket: Option<Ticket>, value: T) -> Pending<T> {
        let wal = match (&self.durable, ticket) {
            (Some(durable), Some(ticket)) => Some((Arc::clone(durable.wal.shared()), ticket)),
            _ => None,
        };
        Pending { wal, slot: WaiterSlot::default(), value: Some(value) }
    }

    /// The value and version stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        check_key(key)?;
        self.check_readable()?;
        self.tree.get(key)
    }

    /// `get` without a copy: `f` gets the value and version of `key` borrowed from the tree
    /// and decodes what it needs; `Ok(None)` (and `f` not called) if the key is absent.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8], Version) -> R) -> Result<Option<R>> {
        check_key(key)?;
        self.check_readable()?;
        self.tree.get_with(key, f)
    }

    /// `get` served only from memory, for callers that must not block on disk (an async
    /// runtime's worker): from frames in the cache, and from evicted frames whose pages the
    /// operating system's page cache holds (through the mapping, once a `get` has opened the
    /// frame's image). `Ok(None)` when the read would wait for the disk or for another thread
    /// loading a frame on the path, having read nothing; then call `get` where blocking is fine.
    pub fn get_resident(&self, key: &[u8]) -> Result<Option<Option<Entry>>> {
        check_key(key)?;
        self.check_readable()?;
        Ok(self.tree.get_resident(key))
    }

    /// Whether every frame on `key`'s path is in memory: reading `key`, or a write's descent
    /// to it, reads nothing from disk. A caller on an async runtime's worker writes inline
    /// when it holds (a frame evicted in between is then read on the worker, once) and moves
    /// the write to a blocking thread when it does not.
    pub fn is_resident(&self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        Ok(self.tree.is_resident(key))
    }

    /// Stores `value` under `key` with the database's default durability.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Version> {
        self.put_with(key, value, Condition::None, WriteOptions::default())
    }

    /// Stores `value` under `key` if `condition` holds (checked atomically with the write);
    /// otherwise returns `Error::ConditionFailed` and changes nothing.
    pub fn put_with(
        &self,
        key: &[u8],
        value: &[u8],
        condition: Condition,
        options: WriteOptions,
    ) -> Result<Version> {
        Ok(Version(self.apply(&[Op::Put { key, value, condition }], options)?.version))
    }

    /// `put_with` that returns as soon as the write is applied and logged, before a `Sync`
    /// write's fdatasync: `.await` the result (or `wait` on it) for the durability. The write
    /// is visible to readers at once, as every write is before it is acknowledged.
    pub fn put_pending(
        &self,
        key: &[u8],
        value: &[u8],
        condition: Condition,
        options: WriteOptions,
    ) -> Result<Pending<Version>> {
        Ok(self.apply_pending(&[Op::Put { key, value, condition }], options)?.map(|o| Version(o.version)))
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.delete_with(key, Condition::None, WriteOptions::default())
    }

    /// Deletes `key` if `condition` holds; returns whether it existed.
    pub fn delete_with(&self, key: &[u8], condition: Condition, options: WriteOptions) -> Result<bool> {
        Ok(existed(&self.apply(&[Op::Delete { key, condition }], options)?))
    }

    /// `delete_with` that does not wait for the durability (see `put_pending`).
    pub fn delete_pending(
        &self,
        key: &[u8],
        condition: Condition,
        options: WriteOptions,
    ) -> Result<Pending<bool>> {
        Ok(self.apply_pending(&[Op::Delete { key, condition }], options)?.map(|o| existed(&o)))
    }

    /// Applies every operation of `batch` atomically (one log record): if any condition fails,
    /// nothing is applied and `Error::ConditionFailed` is returned. Returns the batch's version.
    pub fn write_batch(&self, batch: &Batch, options: WriteOptions) -> Result<Version> {
        Ok(Version(self.apply(&ops_of(&batch.ops), options)?.version))
    }

    /// `write_batch` that does not wait for the durability (see `put_pending`).
    pub fn write_batch_pending(&self, batch: &Batch, options: WriteOptions) -> Result<Pending<Version>> {
        Ok(self.apply_pending(&ops_of(&batch.ops), options)?.map(|o| Version(o.version)))
    }

    /// Keys starting with `prefix` and greater than `start_after`, in byte order, at most
    /// `limit` of them.
    pub fn scan(&self, prefix: &[u8], start_after: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Entry)>> {
        self.check_readable()?;
        let request = ListRequest { prefix, delimiter: b"", start_after, limit, with_values: true };
        let mut out = Vec::with_capacity(limit.min(1024));
        // Without a delimiter every entry is a key.
        self.tree.list_with(&request, &mut |entry| {
            if let ListEntry::Key { key, value, version } = entry {
                out.push((key.to_vec(), Entry { value: value.to_vec(), version }));
            }
        })?;
        Ok(out)
    }

    /// The keys stored under `prefix` (any byte string, empty for the whole database) and
    /// the sum of their weights (`Options::weigher`), without visiting them: the nodes carry
    /// their subtrees' counts and every frame its subtree's totals, so the cost is the
    /// prefix's depth plus the links to other frames below the node it leads to, never the
    /// keys under it. Counts every write acknowledged before the call; under concurrent
    /// writes, the answer may count some writes in flight and not others.
    pub fn usage(&self, prefix: &[u8]) -> Result<Usage> {
        self.check_readable()?;
        self.tree.usage(prefix)
    }

    /// A delimiter listing with S3 ListObjectsV2 semantics. After a common prefix the walk
    /// resumes past every key under it without visiting them: O(depth) per returned entry.
    pub fn list(&self, request: &ListRequest<'_>) -> Result<ListPage> {
        self.check_readable()?;
        Ok(self.tree.list(request)?.page)
    }

    /// Makes every write acknowledged so far durable, whatever its durability: returns after
    /// an fdatasync of the log that covers them (shared with concurrent sync writers). A
    /// caller that must not act on an `Async` write until it survives a crash (for example,
    /// unlinking the file the previous value named) calls this first. In-memory databases
    /// have nothing to sync.
    pub fn sync(&self) -> Result<()> {
        match &self.durable {
            Some(durable) => durable.wal.flush(),
            None => Ok(()),
        }
    }

    /// `sync` that does not wait: the fdatasync is requested at once, and the returned
    /// `Pending` is durable once it has covered every write acknowledged before this call.
    /// `.await` it on an async runtime instead of blocking a thread.
    pub fn sync_pending(&self) -> Pending<()> {
        let ticket = self.durable.as_ref().map(|durable| durable.wal.request_flush());
        self.pending(ticket, ())
    }

    /// `list` without copies: hands each entry of the page to `visit`, in key order, borrowed
    /// from the tree (`visit` decodes what it needs and copies nothing it does not). Returns
    /// whether more entries follow the page (`ListPage::truncated`).
    pub fn list_with(&self, request: &ListRequest<'_>, visit: &mut dyn FnMut(ListEntry<'_>)) -> Result<bool> {
        self.check_readable()?;
        Ok(self.tree.list_with(request, visit)?.truncated)
    }

    /// `list_with`, handing each common prefix with the usage of the subtree it rolled up
    /// (`usage` of the prefix: O(depth) more per common prefix, never the keys below it);
    /// keys come with `None`. A `du --max-depth=1` over a page.
    pub fn list_with_usage(
        &self,
        request: &ListRequest<'_>,
        visit: &mut dyn FnMut(ListEntry<'_>, Option<Usage>),
    ) -> Result<bool> {
        self.check_readable()?;
        let mut failed = None;
        let outcome = self.tree.list_with(request, &mut |entry| {
            let usage = match entry {
                ListEntry::CommonPrefix(prefix) if failed.is_none() => match self.tree.usage(prefix) {
                    Ok(usage) => Some(usage),
                    Err(e) => {
                        failed = Some(e);
                        None
                    }
                },
                _ => None,
            };
            if failed.is_none() {
                visit(entry, usage);
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(outcome.truncated),
        }
    }

    /// Reads fail once the log has failed (`Error::Poisoned`): a write is published before
    /// its fdatasync, so after a failed one the tree may hold writes recovery will not bring
    /// back, and serving them would show data the database is about to lose.
    fn check_readable(&self) -> Result<()> {
        match &self.durable {
            Some(durable) if durable.wal.is_poisoned() => Err(Error::Poisoned),
            _ => Ok(()),
        }
    }

    /// Writes every dirty frame to fresh slots, switches the manifest and truncates the log.
    pub fn checkpoint(&self) -> Result<()> {
        match &self.durable {
            Some(durable) => durable.checkpoint(&self.tree),
            None => Ok(()),
        }
    }

    /// The durability writes get unless their options override it: `Memory` exactly when the
    /// database is in memory (it has no log to sync); otherwise `Sync` or `Async` as opened
    /// (a database with a log opened with `Memory` logs its writes like `Async`).
    pub fn durability(&self) -> Durability {
        match (&self.durable, self.default_durability) {
            (Some(_), Durability::Memory) => Durability::Async,
            (_, durability) => durability,
        }
    }

    /// Operator counters.
    pub fn stats(&self) -> Stats {
        let pool = self.tree.pool_stats();
        let last = self.last_lsn.load(Ordering::Acquire);
        if let Some(d) = &self.durable {
            return Stats {
                keys: self.tree.key_count(),
                frames: self.tree.frame_count() as u64,
                frames_cached: pool.frames_cached,
                frames_dirty: pool.frames_dirty,
                cache_bytes: pool.cache_bytes,
                frame_reads: pool.source_reads,
                frame_loads: pool.frame_reads,
                frame_evictions: pool.frame_evictions,
                frame_dirty_evictions: pool.dirty_evictions,
                frame_image_reads: pool.image_reads,
                frame_page_reads: pool.page_reads,
                frame_unloaded_writes: pool.unloaded_writes,
                frame_delta_verifies: pool.delta_verifies,
                frame_delta_evictions: pool.delta_evictions,
                wal_bytes_written: d.wal.bytes_written(),
                wal_syncs: d.wal.syncs(),
                checkpoints: d.checkpoints(),
                checkpoint_running: d.checkpoint_running(),
                checkpoint_stall_max_us: d.stall_max_us(),
                checkpoint_frames_whole: d.frames_written().0,
                checkpoint_frames_delta: d.frames_written().1,
                checkpoint_chains_merged: d.frames_written().2,
                checkpoint_frames_rewritten: d.frames_written().3,
                last_lsn: d.wal.head(),
                durable_lsn: d.wal.durable(),
            };
        }
        Stats {
            keys: self.tree.key_count(),
            frames: self.tree.frame_count() as u64,
            frames_cached: pool.frames_cached,
            frames_dirty: pool.frames_dirty,
            cache_bytes: pool.cache_bytes,
            frame_reads: pool.source_reads,
            frame_loads: pool.frame_reads,
            frame_evictions: pool.frame_evictions,
            frame_dirty_evictions: pool.dirty_evictions,
            frame_image_reads: pool.image_reads,
            frame_page_reads: pool.page_reads,
            frame_unloaded_writes: pool.unloaded_writes,
            frame_delta_verifies: pool.delta_verifies,
            frame_delta_evictions: pool.delta_evictions,
            last_lsn: last,
            durable_lsn: last,
            ..Stats::default()
        }
    }

    /// Flushes the log, checkpoints, and releases the directory lock.
    pub fn close(self) -> Result<()> {
        let Some(durable) = &self.durable else { return Ok(()) };
        durable.stop_background();
        durable.wal.flush()?;
        durable.checkpoint(&self.tree)?;
        durable.release_garbage();
        durable.wal.shutdown()
        // Dropping `self` releases the directory lock.
    }
}

impl Drop for Db {
    /// Without `close`: the log is flushed and synced (nothing reserved is dropped), but no
    /// checkpoint is taken; the next open replays the log.
    fn drop(&mut self) {
        if let Some(durable) = &self.durable {
            durable.stop_background();
            let _ = durable.wal.shutdown();
        }
    }
}

/// A write that is applied (readers see it) and logged, whose durability may still be to
/// come: the result of `Db::put_pending` and its siblings. `wait` blocks until the group
/// fdatasync that covers the write has finished; `.await` does the same without holding a
/// thread, so thousands of writers on a few runtime threads share each fdatasync. Either
/// gives the write's result, or the log's error if the sync failed (the write may then be
/// lost; the database refuses writes until reopened). Writes that are not `Sync` are durable
/// as far as they will be at once.
///
/// It owns what it waits on, so it may leave the thread or closure that made the write (a
/// blocking pool's thread applies, the task awaits). Closing the database syncs every logged
/// write, so a `Pending` that outlives its `Db` still resolves.
///
/// Dropping it without waiting leaves the write as it is: logged, and synced with the next
/// group (like an `Async` write, nobody learns when).
#[must_use = "a Sync write is durable only once this is awaited or waited on"]
pub struct Pending<T> {
    /// The log and the record a `Sync` write waits for; `None` once there is nothing to wait for.
    wal: Option<(Arc<WalShared>, Ticket)>,
    /// The task's registration while `.await` is pending.
    slot: WaiterSlot,
    /// The write's result, handed out once.
    value: Option<T>,
}

impl<T> Pending<T> {
    fn map<U>(mut self, f: impl FnOnce(T) -> U) -> Pending<U> {
        Pending { wal: self.wal.take(), slot: WaiterSlot::default(), value: self.value.take().map(f) }
    }

    /// Blocks until the write is durable and returns its result.
    pub fn wait(mut self) -> Result<T> {
        if let Some((wal, ticket)) = self.wal.take() {
            wal.wait(ticket)?;
        }
        Ok(self.value.take().expect("a pending write's result is taken once"))
    }

    /// Whether the write is durable already (`wait` would not block).
    pub fn is_durable(&self) -> bool {
        self.wal.as_ref().is_none_or(|(wal, ticket)| wal.is_durable(*ticket))
    }
}

impl<T: Unpin> Future for Pending<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        if let Some((wal, ticket)) = &this.wal {
            match wal.poll_wait(*ticket, &mut this.slot, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => {
                    this.wal = None;
                    result?;
                }
            }
        }
        Poll::Ready(Ok(this.value.take().expect("a finished pending write was polled again")))
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let Some((wal, _)) = &self.wal {
            wal.forget(&mut self.slot);
        }
    }
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waits_for = self.wal.as_ref().map(|(_, ticket)| ticket.end);
        f.debug_struct("Pending").field("waits_for", &waits_for).finish_non_exhaustive()
    }
}

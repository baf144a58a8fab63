//! Storage: the key schema (`schema`), the value codecs (`meta`), the body store (`bodies`),
//! the background unlinking of replaced bodies (`reclaim`), continuation tokens (`token`), and
//! `Store`, which runs engine calls off the async threads.

pub mod bodies;
pub mod meta;
pub mod reclaim;
pub mod schema;
pub mod token;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use holt_core::{Batch, Condition, Db, Durability, Entry, Pending, Version, WriteOptions};

use crate::error::{S3Error, S3Result};
use crate::metrics::WorkerTimes;
use bodies::BodyStore;
use meta::{BodyId, BodyRef, ObjectMeta, PartMeta};
use reclaim::Reclaimer;
use token::TokenKey;

/// Page size for the engine scans the gateway does itself (sweep, bucket emptiness checks).
const SCAN_PAGE: usize = 1000;

/// The engine, the body store and the token key.
#[derive(Clone)]
pub struct Store {
    db: Arc<Db>,
    /// The durability every write of the store gets (the engine's default; writes here never
    /// override it). `Async` writes are acknowledged before they are on disk, so `reclaim`
    /// unlinks a body the previous record named only once the log is synced.
    durability: Durability,
    /// Syncs and unlinks reclaimed bodies in batches, under `Async` durability (when the
    /// store was opened inside a tokio runtime).
    reclaimer: Option<Arc<Reclaimer>>,
    /// Object and part bodies too large to inline.
    pub bodies: Arc<BodyStore>,
    /// Seals and opens listing continuation tokens.
    pub tokens: Arc<TokenKey>,
    /// How long writes applied on a worker held it, and how many went to the pool.
    pub worker_times: Arc<WorkerTimes>,
    /// Upstream mode: the object store that holds the bodies (`None`: standalone, bodies in
    /// `bodies`).
    pub upstream: Option<Arc<crate::upstream::Upstream>>,
}

/// Runs engine work that may block on the blocking pool: a read (or a write's descent) that
/// misses the frame cache reads and decodes a 512 KiB frame (about a millisecond), which must
/// not stall an async worker. Reads and writes served from the cache run inline: they take
/// microseconds, far less than a hand-off to another thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> holt_core::Result<T> + Send + 'static,
) -> S3Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(S3Error::from),
        Err(e) => Err(S3Error::internal("engine task", e)),
    }
}

/// The records under `prefix` (at most `limit`), each mapped by `map`; the first mapping
/// failure is the result.
fn scan_map_in<T>(
    db: &Db,
    prefix: &[u8],
    limit: usize,
    map: impl Fn(&[u8], &[u8]) -> S3Result<T>,
) -> holt_core::Result<S3Result<Vec<T>>> {
    let request = holt_core::ListRequest { prefix, limit, with_values: true, ..Default::default() };
    let mut out = Vec::new();
    let mut failed = None;
    db.list_with(&request, &mut |entry| {
        if let (None, holt_core::ListEntry::Key { key, value, .. }) = (&failed, entry) {
            match map(key, value) {
                Ok(v) => out.push(v),
                Err(e) => failed = Some(e),
            }
        }
    })?;
    Ok(match failed {
        Some(e) => Err(e),
        None => Ok(out),
    })
}

impl Store {
    /// Wraps an open engine: loads (or creates, once) the token secret and sweeps body files
    /// that no committed record names. Writes get the engine's default durability.
    pub fn open(db: Db, data_dir: &Path, inline_max: usize) -> std::io::Result<Store> {
        let durability = db.durability();
        let bodies = BodyStore::open(data_dir, inline_max)?;
        let to_io = |e: holt_core::Error| std::io::Error::other(e.to_string());
        let secret: [u8; 32] = rand::random();
        match db.put_with(schema::TOKEN_SECRET, &secret, Condition::Absent, WriteOptions::default()) {
            Ok(_) | Err(holt_core::Error::ConditionFailed) => {}
            Err(e) => return Err(to_io(e)),
        }
        let stored = db.get(schema::TOKEN_SECRET).map_err(to_io)?.map(|e| e.value).unwrap_or_default();
        let secret: [u8; 32] = stored
            .as_slice()
            .try_into()
            .map_err(|_| std::io::Error::other("token secret record is corrupt"))?;
        let db = Arc::new(db);
        let reclaimer = match durability {
            Durability::Async => Reclaimer::spawn(Arc::downgrade(&db), Arc::clone(&bodies)).map(Arc::new),
            // Committed changes are durable already (`Sync`), or there is no log (`Memory`).
            Durability::Sync | Durability::Memory => None,
        };
        let store = Store {
            db,
            durability,
            reclaimer,
            bodies,
            tokens: Arc::new(TokenKey::new(secret)),
            worker_times: Arc::default(),
            upstream: None,
        };
        let referenced = store.referenced_bodies().map_err(to_io)?;
        let removed = store.bodies.sweep(&referenced)?;
        if removed > 0 {
            tracing::info!(removed, "removed body files that no committed record names");
        }
        Ok(store)
    }

    /// The store in upstream mode: bodies and writes go to `upstream`.
    pub fn with_upstream(mut self, upstream: crate::upstream::Upstream) -> Store {
        self.upstream = Some(Arc::new(upstream));
        self
    }

    /// Every body id named by an object or a part record.
    fn referenced_bodies(&self) -> holt_core::Result<HashSet<BodyId>> {
        let mut ids = HashSet::new();
        for prefix in [&b"O"[..], b"P"] {
            let mut after = Vec::new();
            loop {
                let page = self.db.scan(prefix, &after, SCAN_PAGE)?;
                for (k, e) in &page {
                    let id = if prefix == b"O" {
                        ObjectMeta::decode(&e.value).and_then(|m| m.body.file_id())
                    } else {
                        PartMeta::decode(&e.value).and_then(|m| m.body.file_id())
                    };
                    if let Some(id) = id {
                        ids.insert(id);
                    } else if ObjectMeta::decode(&e.value).is_none() && PartMeta::decode(&e.value).is_none() {
                        tracing::warn!(key = %String::from_utf8_lossy(k), "undecodable record during sweep");
                    }
                }
                match page.last() {
                    Some((k, _)) if page.len() == SCAN_PAGE => after = k.clone(),
                    _ => break,
                }
            }
        }
        Ok(ids)
    }

    /// Unlinks a new body that no committed record ever named (a write refused by a
    /// precondition, a checksum mismatch, a lost race): no crash can bring back a record
    /// naming it, so there is nothing to wait for. Inline bodies have nothing to unlink.
    pub async fn discard(&self, body: &BodyRef) {
        self.bodies.remove(body).await;
    }

    /// Disposes of the new body of a write that failed with `err`: discarded, unless the
    /// write may still be applied (it reached the log), in which case replay after a restart
    /// can bring back the record naming it. Such a body stays; the start-up sweep removes it
    /// if, after recovery, no record names it.
    pub async fn abandon(&self, body: &BodyRef, err: &S3Error) {
        if err.write_may_have_applied() {
            if let Some(id) = body.file_id() {
                tracing::warn!(body = %id.to_hex(), "write may have applied: its body is kept");
            }
            return;
        }
        self.discard(body).await;
    }

    /// Unlinks a body that a record named until a committed change (see `reclaim_all`).
    pub async fn reclaim(&self, body: &BodyRef) {
        self.reclaim_all(std::slice::from_ref(body)).await;
    }

    /// Unlinks bodies that records named until a committed change, once that change is
    /// durable: a crash must never bring back a record whose body file is gone. Under `Sync`
    /// durability (or without a log) that is now. Under `Async` the bodies go to the
    /// reclaimer, which syncs the log once for a whole batch before unlinking, off the request
    /// path; if its queue is full (or it has stopped), the log is synced here, once for all of
    /// `bodies`. If a sync fails the files stay for the start-up sweep. Inline bodies have
    /// nothing to unlink.
    pub async fn reclaim_all<'a>(&self, bodies: impl IntoIterator<Item = &'a BodyRef>) {
        let mut files: Vec<&BodyRef> = bodies.into_iter().filter(|b| b.file_id().is_some()).collect();
        if self.durability == Durability::Async {
            if let Some(reclaimer) = &self.reclaimer {
                files.retain(|body| !reclaimer.try_queue(body));
            }
            if files.is_empty() {
                return;
            }
            if let Err(e) = self.sync().await {
                tracing::warn!(error = %e, files = files.len(), "log sync failed; body files left for the start-up sweep");
                return;
            }
        }
        for body in files {
            self.bodies.remove(body).await;
        }
    }

    /// Stops the reclaimer after it has synced the log and unlinked every body queued; later
    /// reclaims sync and unlink themselves. Called before the engine is closed.
    pub async fn stop_reclaimer(&self) {
        if let Some(reclaimer) = &self.reclaimer {
            reclaimer.stop().await;
        }
    }

    /// Makes every write acknowledged so far durable (`Db::sync`), awaiting the fsync.
    pub async fn sync(&self) -> S3Result<()> {
        Ok(self.db.sync_pending().await?)
    }

    /// Gives the engine back for `Db::close`, if no request still holds the store. Bodies
    /// still queued for the reclaimer are left for the start-up sweep: `stop_reclaimer` first.
    pub fn into_db(self) -> Option<Db> {
        self.try_into_db().ok()
    }

    /// `into_db`, handing the store back while something else still holds the engine (an
    /// engine call on the blocking pool holds it until it returns).
    pub fn try_into_db(self) -> Result<Db, Store> {
        let Store { db, durability, reclaimer, bodies, tokens, worker_times, upstream } = self;
        Arc::try_unwrap(db).map_err(|db| Store {
            db,
            durability,
            reclaimer,
            bodies,
            tokens,
            worker_times,
            upstream,
        })
    }

    /// The engine's counters, for `/metrics`.
    pub fn stats(&self) -> holt_core::Stats {
        self.db.stats()
    }

    /// Inline when the key's path is in memory (frames in the engine's cache, or pages the
    /// page cache holds: `Db::get_resident`); on the blocking pool otherwise.
    pub async fn get(&self, key: Vec<u8>) -> S3Result<Option<Entry>> {
        if let Some(found) = self.db.get_resident(&key)? {
            return Ok(found);
        }
        let db = Arc::clone(&self.db);
        blocking(move || db.get(&key)).await
    }

    /// Runs `write` inline when `resident` (the written keys' paths are cached: microseconds
    /// for the descent, the path copy and the log append), on the blocking pool when a frame
    /// would have to be read first. Either way the group fdatasync is then awaited on the
    /// request's task, so no thread is held while the log syncs. (A frame evicted between
    /// the check and the write is read on the worker, once, as a listing page does.) How long
    /// an inline write held the worker is recorded in `worker_times` (`/metrics`).
    async fn write<T: Send + Unpin + 'static>(
        &self,
        resident: bool,
        write: impl FnOnce(&Db) -> holt_core::Result<Pending<T>> + Send + 'static,
    ) -> S3Result<T> {
        let pending = if resident {
            let start = std::time::Instant::now();
            let written = write(&self.db);
            self.worker_times.record_inline(start.elapsed());
            written?
        } else {
            self.worker_times.record_pool();
            let db = Arc::clone(&self.db);
            blocking(move || write(&db)).await?
        };
        Ok(pending.await?)
    }

    /// Stores `value` under `key` if `condition` holds (else PreconditionFailed); returns once
    /// the write is as durable as the store's durability asks.
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>, condition: Condition) -> S3Result<Version> {
        let resident = self.db.is_resident(&key)?;
        self.write(resident, move |db| db.put_pending(&key, &value, condition, WriteOptions::default())).await
    }

    /// Deletes `key` if `condition` holds (else PreconditionFailed); returns whether it existed.
    pub async fn delete(&self, key: Vec<u8>, condition: Condition) -> S3Result<bool> {
        let resident = self.db.is_resident(&key)?;
        self.write(resident, move |db| db.delete_pending(&key, condition, WriteOptions::default())).await
    }

    /// Deletes `keys` in one batch without awaiting durability: the deletes are logged and
    /// applied, and reach disk with the next group sync (`Durability::Async`). For records
    /// whose survival of a crash is harmless, such as a settled write's intent (a surviving
    /// intent only repeats a repair at the next start).
    pub async fn delete_lazily(&self, keys: Vec<Vec<u8>>) -> S3Result<()> {
        let mut batch = Batch::new();
        for key in keys {
            batch.delete(key);
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.write_batch_lazily(batch).await.map(drop)
    }

    /// Applies `batch` atomically: if any condition fails, nothing is written and the result is
    /// PreconditionFailed.
    pub async fn write_batch(&self, batch: Batch) -> S3Result<Version> {
        self.write_batch_with(batch, WriteOptions::default()).await
    }

    /// `write_batch` without awaiting durability (`Durability::Async`), for a batch whose loss
    /// in a crash something already durable repairs, such as an upstream write's record
    /// covered by its intent. The log keeps order: a later write that survives a crash
    /// brings this one with it.
    pub async fn write_batch_lazily(&self, batch: Batch) -> S3Result<Version> {
        self.write_batch_with(batch, WriteOptions { durability: Some(Durability::Async) }).await
    }

    async fn write_batch_with(&self, batch: Batch, options: WriteOptions) -> S3Result<Version> {
        // A bad key is reported by the write itself, on the blocking path.
        let resident = batch.ops.iter().all(|op| self.db.is_resident(op.key()).unwrap_or(false));
        self.write(resident, move |db| db.write_batch_pending(&batch, options)).await
    }

    /// Up to `limit` records under `prefix` after `start_after`, in key order, with their values
    /// copied (on the blocking pool).
    pub async fn scan(
        &self,
        prefix: Vec<u8>,
        start_after: Vec<u8>,
        limit: usize,
    ) -> S3Result<Vec<(Vec<u8>, Entry)>> {
        let db = Arc::clone(&self.db);
        blocking(move || db.scan(&prefix, &start_after, limit)).await
    }

    /// Up to `limit` keys under `prefix`, each handed with its record (borrowed from the
    /// engine, on the blocking pool) to `map`, which keeps what it needs: a scan whose
    /// records hold more than the caller wants (part records with inline bodies) copies
    /// only that. `map` failing ends the scan with its error.
    pub async fn scan_map<T: Send + 'static>(
        &self,
        prefix: Vec<u8>,
        limit: usize,
        map: impl Fn(&[u8], &[u8]) -> S3Result<T> + Send + 'static,
    ) -> S3Result<Vec<T>> {
        let db = Arc::clone(&self.db);
        blocking(move || scan_map_in(&db, &prefix, limit, map)).await?
    }

    /// `scan_map` on the calling thread (a heavy-work thread: see `Inner::run_heavy`).
    pub fn scan_map_now<T>(
        &self,
        prefix: &[u8],
        limit: usize,
        map: impl Fn(&[u8], &[u8]) -> S3Result<T>,
    ) -> S3Result<Vec<T>> {
        scan_map_in(&self.db, prefix, limit, map).map_err(S3Error::from)?
    }

    /// Keys under `prefix` and the sum of their records' sizes (`Db::usage`, with the
    /// engine weighing records by `meta::RECORD_WEIGHER`), on the caller's thread: an answer
    /// reads the nodes on the prefix's path and the frames' totals, never the keys.
    pub fn usage(&self, prefix: &[u8]) -> S3Result<holt_core::Usage> {
        Ok(self.db.usage(prefix)?)
    }

    /// `holt_bucket_objects` and `holt_bucket_bytes` of every bucket, appended to `out` for
    /// `/metrics`: a `usage` per bucket, so a scrape costs the number of buckets, never
    /// their objects.
    pub fn render_bucket_usage(&self, out: &mut String) -> S3Result<()> {
        let mut rows = Vec::new();
        let mut after = Vec::new();
        loop {
            let request = holt_core::ListRequest {
                prefix: schema::BUCKETS_PREFIX,
                delimiter: b"",
                start_after: &after,
                limit: 1_000,
                with_values: false,
            };
            let mut last = None;
            let more = self.list_with(&request, |entry| {
                if let holt_core::ListEntry::Key { key, .. } = entry {
                    last = Some(key.to_vec());
                    if let Some(name) = schema::bucket_name_from_key(key) {
                        rows.push(name.to_owned());
                    }
                }
                Ok(())
            })?;
            match last {
                Some(key) if more => after = key,
                _ => break,
            }
        }
        let mut objects = String::from(
            "# HELP holt_bucket_objects Objects stored in a bucket.\n# TYPE holt_bucket_objects gauge\n",
        );
        let mut bytes = String::from(
            "# HELP holt_bucket_bytes Bytes of the objects stored in a bucket.\n# TYPE holt_bucket_bytes gauge\n",
        );
        for name in rows {
            let usage = self.usage(&schema::objects_prefix(&name))?;
            objects.push_str(&format!("holt_bucket_objects{{bucket=\"{name}\"}} {}\n", usage.keys));
            bytes.push_str(&format!("holt_bucket_bytes{{bucket=\"{name}\"}} {}\n", usage.weight));
        }
        out.push_str(&objects);
        out.push_str(&bytes);
        Ok(())
    }

    /// One `Db::list_with` call: the whole page of an S3 listing, handed entry by entry to
    /// `visit`, borrowed from the engine (no copy of keys or records); returns whether more
    /// entries follow. `visit` may fail an entry: the first failure ends the walk's effect and
    /// is returned. It runs on the caller's thread, so a page that meets an evicted frame reads
    /// it there: a listing is milliseconds of work either way, and `visit` borrows the page
    /// being built, which cannot move to the blocking pool.
    pub fn list_with(
        &self,
        request: &holt_core::ListRequest<'_>,
        mut visit: impl FnMut(holt_core::ListEntry<'_>) -> S3Result<()>,
    ) -> S3Result<bool> {
        let mut failed = None;
        let truncated = self.db.list_with(request, &mut |entry| {
            if failed.is_none() {
                if let Err(e) = visit(entry) {
                    failed = Some(e);
                }
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(truncated),
        }
    }

    /// `list_with`, each common prefix handed with its objects and bytes (`Db::list_with_usage`).
    pub fn list_with_usage(
        &self,
        request: &holt_core::ListRequest<'_>,
        mut visit: impl FnMut(holt_core::ListEntry<'_>, Option<holt_core::Usage>) -> S3Result<()>,
    ) -> S3Result<bool> {
        let mut failed = None;
        let truncated = self.db.list_with_usage(request, &mut |entry, usage| {
            if failed.is_none() {
                if let Err(e) = visit(entry, usage) {
                    failed = Some(e);
                }
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(truncated),
        }
    }
}

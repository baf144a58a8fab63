//! Storage: the key schema (`schema`), the value codecs (`meta`), the body store (`bodies`),
//! continuation tokens (`token`), and `Store`, which runs engine calls off the async threads.

pub mod bodies;
pub mod meta;
pub mod schema;
pub mod token;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use holt_core::{Batch, Condition, Db, Entry, ListPage, Version, WriteOptions};

use crate::error::{S3Error, S3Result};
use bodies::BodyStore;
use meta::{BodyId, ObjectMeta, PartMeta};
use token::TokenKey;

/// Page size for the engine scans the gateway does itself (sweep, bucket emptiness checks).
const SCAN_PAGE: usize = 1000;

/// The engine, the body store and the token key.
#[derive(Clone)]
pub struct Store {
    db: Arc<Db>,
    pub bodies: Arc<BodyStore>,
    pub tokens: Arc<TokenKey>,
}

/// Runs an engine write on the blocking pool: a durable write waits for the group fsync,
/// which must not stall the async workers. Reads run inline: they take microseconds from the
/// frame cache (a miss is one short pread), far less than a hand-off to another thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> holt_core::Result<T> + Send + 'static,
) -> S3Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(S3Error::from),
        Err(e) => Err(S3Error::internal("engine task", e)),
    }
}

impl Store {
    /// Wraps an open engine: loads (or creates, once) the token secret and sweeps body files
    /// that no committed record names.
    pub fn open(db: Db, data_dir: &Path, inline_max: usize) -> std::io::Result<Store> {
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
        let store = Store { db: Arc::new(db), bodies, tokens: Arc::new(TokenKey::new(secret)) };
        let referenced = store.referenced_bodies().map_err(to_io)?;
        let removed = store.bodies.sweep(&referenced)?;
        if removed > 0 {
            tracing::info!(removed, "removed body files that no committed record names");
        }
        Ok(store)
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

    /// Gives the engine back for `Db::close`, if no request still holds the store.
    pub fn into_db(self) -> Option<Db> {
        Arc::try_unwrap(self.db).ok()
    }

    pub fn stats(&self) -> holt_core::Stats {
        self.db.stats()
    }

    pub async fn get(&self, key: Vec<u8>) -> S3Result<Option<Entry>> {
        self.db.get(&key).map_err(S3Error::from)
    }

    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>, condition: Condition) -> S3Result<Version> {
        let db = Arc::clone(&self.db);
        blocking(move || db.put_with(&key, &value, condition, WriteOptions::default())).await
    }

    pub async fn delete(&self, key: Vec<u8>, condition: Condition) -> S3Result<bool> {
        let db = Arc::clone(&self.db);
        blocking(move || db.delete_with(&key, condition, WriteOptions::default())).await
    }

    pub async fn write_batch(&self, batch: Batch) -> S3Result<Version> {
        let db = Arc::clone(&self.db);
        blocking(move || db.write_batch(&batch, WriteOptions::default())).await
    }

    pub async fn scan(
        &self,
        prefix: Vec<u8>,
        start_after: Vec<u8>,
        limit: usize,
    ) -> S3Result<Vec<(Vec<u8>, Entry)>> {
        let db = Arc::clone(&self.db);
        blocking(move || db.scan(&prefix, &start_after, limit)).await
    }

    /// One `Db::list` call: the whole page of an S3 listing.
    pub async fn list(
        &self,
        prefix: Vec<u8>,
        delimiter: Vec<u8>,
        start_after: Vec<u8>,
        limit: usize,
        with_values: bool,
    ) -> S3Result<ListPage> {
        self.db
            .list(&holt_core::ListRequest {
                prefix: &prefix,
                delimiter: &delimiter,
                start_after: &start_after,
                limit,
                with_values,
            })
            .map_err(S3Error::from)
    }
}

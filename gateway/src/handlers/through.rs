//! The object handlers' upstream-mode steps: writing a body through to the upstream store,
//! reading it back, and keeping the index true to the upstream (repairs after a crash or a
//! write that bypassed the gateway, and imports of buckets that already hold objects).
//!
//! A write goes in this order, under the key's lock (`KeyLocks`):
//! 1. the intent record `schema::intent` is written (with the store's durability);
//! 2. the body goes upstream, streamed;
//! 3. the object record commits to the index, and the intent is removed. A PutObject whose
//!    record the upstream can give back whole (`restorable`) does not wait for the record's
//!    fsync: the intent, durable since before the upstream took the body, covers it.
//!
//! The client hears of success only after 3. A crash between 1 and 3, or before such a
//! record reached disk (the log keeps order: the intent's removal is lost with it), leaves
//! the intent, and start-up repairs its key from the upstream (`recover_intents`): whatever
//! the upstream
//! holds is what the index shows, so an acknowledged write is never missing and no object the
//! upstream lacks is listed.

use std::sync::Arc;

use axum::body::Body;
use holt_core::Condition;
use md5::{Digest as _, Md5};

use super::ReqCtx;
use crate::checksum::ChecksumType;
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BodyRef, ObjectHeaders, ObjectMeta, UpstreamBody};
use crate::storage::{schema, Store};
use crate::upstream::{HeadInfo, Upstream};

/// Upstream keys indexed per import page (the most a ListObjectsV2 page holds).
const IMPORT_BATCH: usize = 1000;

/// The upstream client, in upstream mode.
pub fn upstream(ctx: &ReqCtx) -> Option<Arc<Upstream>> {
    ctx.store().upstream.clone()
}

/// The error for a record held upstream when no upstream is configured (a gateway restarted
/// without `--upstream` over an index made in upstream mode).
pub fn no_upstream() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::ServiceUnavailable,
        "This record's data is held upstream, and no upstream is configured.",
    )
}

/// The MD5 and part count an ETag stands for: `hex` or `hex-N` as S3 and MinIO write them.
/// An ETag of another shape (some encrypted or composite objects) is kept as the MD5 of its
/// text, so the index still tells versions apart; clients are shown the upstream's text
/// (`ObjectMeta::etag`).
pub fn md5_and_parts(etag: &str) -> ([u8; 16], u32) {
    crate::storage::meta::md5_etag(etag).unwrap_or_else(|| (Md5::digest(etag.as_bytes()).into(), 0))
}

/// Whether a repair from the upstream (`meta_from_head`) gives back what `meta`, the record
/// of a PutObject sent through, says: its content headers and user metadata went upstream,
/// and it holds nothing only the index keeps (checksums, a canned ACL, a storage class) or
/// a repair may not read back (tags: not every upstream reports them on HEAD). The repair
/// takes the upstream's last-modified time, and its content type where the client sent
/// none.
pub fn restorable(meta: &ObjectMeta) -> bool {
    meta.checksums.is_empty()
        && meta.tags.is_empty()
        && !meta.public_read
        && meta.headers.storage_class.is_none()
        && meta.parts == 0
}

/// The object record an upstream HEAD describes.
pub fn meta_from_head(info: HeadInfo) -> ObjectMeta {
    let (md5, parts) = md5_and_parts(&info.etag);
    ObjectMeta {
        size: info.size,
        md5,
        parts,
        last_modified_ms: info.last_modified_ms,
        headers: info.headers,
        checksums: Vec::new(),
        body: BodyRef::Upstream(UpstreamBody {
            etag: info.etag,
            version_id: info.version_id,
            headers_pending: false,
        }),
        part_sizes: Vec::new(),
        checksum_type: ChecksumType::FullObject,
        tags: Vec::new(),
        public_read: false,
    }
}

/// The object record an upstream listing entry describes; its headers are fetched on first
/// read (`headers_pending`).
fn meta_from_listing(entry: &rusty_s3::actions::list_objects_v2::ListObjectsContent) -> ObjectMeta {
    let etag = entry.etag.as_deref().unwrap_or("").trim_matches('"').to_owned();
    let (md5, parts) = md5_and_parts(&etag);
    let storage_class = entry.storage_class.clone().filter(|c| c != "STANDARD");
    ObjectMeta {
        size: entry.size.unwrap_or(0),
        md5,
        parts,
        last_modified_ms: entry.last_modified.as_deref().and_then(crate::time::parse_iso8601).unwrap_or(0),
        headers: ObjectHeaders { storage_class, ..ObjectHeaders::default() },
        checksums: Vec::new(),
        body: BodyRef::Upstream(UpstreamBody { etag, version_id: None, headers_pending: true }),
        part_sizes: Vec::new(),
        checksum_type: ChecksumType::FullObject,
        tags: Vec::new(),
        public_read: false,
    }
}

/// Step 1 of a write: the intent record.
pub async fn write_intent(ctx: &ReqCtx, bucket: &str, key: &str) -> S3Result<()> {
    put_intent(ctx.store().clone(), schema::intent(bucket, key)).await
}

/// Writes the intent record `record` (a `schema::intent` key), with the store's durability.
async fn put_intent(store: Store, record: Vec<u8>) -> S3Result<()> {
    store.put(record, Vec::new(), Condition::None).await.map(drop)
}

/// Step 1 of a write whose upstream request starts before its intent is durable: the
/// intent is applied at once (on a task of its own) and [`IntentWrite::durable`] waits for
/// its fsync. The caller must not let the upstream complete the write before then.
pub struct IntentWrite(IntentState);

enum IntentState {
    Pending(tokio::task::JoinHandle<S3Result<()>>),
    Done(S3Result<()>),
}

impl IntentWrite {
    /// Starts writing `bucket/key`'s intent record.
    pub fn start(ctx: &ReqCtx, bucket: &str, key: &str) -> IntentWrite {
        let task = tokio::spawn(put_intent(ctx.store().clone(), schema::intent(bucket, key)));
        IntentWrite(IntentState::Pending(task))
    }

    /// Waits until the intent is durable, or failed; any later call answers at once, the same.
    pub async fn durable(&mut self) -> S3Result<()> {
        let outcome = match &mut self.0 {
            IntentState::Done(outcome) => return outcome.clone(),
            IntentState::Pending(task) => {
                task.await.unwrap_or_else(|e| Err(S3Error::internal("intent write task", e)))
            }
        };
        self.0 = IntentState::Done(outcome.clone());
        outcome
    }
}

/// After step 3 (or a write that failed before reaching the upstream): the intent goes,
/// without waiting for the log's sync. A failure here, or a crash before the next sync, only
/// leaves a repair for the next start, which finds the upstream and the index agreeing.
pub async fn clear_intent(ctx: &ReqCtx, bucket: &str, key: &str) {
    clear_intents(ctx, vec![schema::intent(bucket, key)]).await;
}

/// [`clear_intent`] for several intent records (`schema::intent` keys) at once.
pub async fn clear_intents(ctx: &ReqCtx, intents: Vec<Vec<u8>>) {
    if let Err(e) = ctx.store().delete_lazily(intents).await {
        tracing::warn!(error = ?e.code, "intent records left for the next start's repair");
    }
}

/// Ends a write begun with `write_intent`. On failure the upstream may or may not hold the
/// new body (a connection lost after the upload, an index commit that failed): the key is
/// repaired from the upstream at once. The intent goes unless that repair failed too, in
/// which case the next start repairs it.
pub async fn settle<T>(ctx: &ReqCtx, bucket: &str, key: &str, result: S3Result<T>) -> S3Result<T> {
    if result.is_err() {
        if let Some(up) = upstream(ctx) {
            if let Err(e) = repair_key(ctx.store(), &up, bucket, key).await {
                tracing::warn!(error = ?e.code, bucket, key, "repair after a failed write failed; left for the next start");
                return result;
            }
        }
    }
    clear_intent(ctx, bucket, key).await;
    result
}

/// Makes the index's record of `bucket/key` what the upstream holds: the HEAD's metadata, or
/// no record if the upstream has none. A record changed meanwhile by a local write is left
/// alone (that write ordered itself after the upstream's state through its key lock).
pub async fn repair_key(store: &Store, up: &Upstream, bucket: &str, key: &str) -> S3Result<()> {
    let okey = schema::object(bucket, key);
    let current = store.get(okey.clone()).await?;
    let condition = current.as_ref().map_or(Condition::Absent, |e| Condition::Version(e.version));
    let outcome = match up.head_object(bucket, key).await? {
        Some(info) => {
            let tag_count = info.tag_count;
            let mut meta = meta_from_head(info);
            // The ACL and checksums live only in the index: keep them across a repair of the
            // same body, and its tags until the upstream's are read.
            if let Some(old) = current.as_ref().and_then(|e| ObjectMeta::decode(&e.value)) {
                if old.md5 == meta.md5 && old.parts == meta.parts {
                    meta.tags = old.tags;
                    meta.public_read = old.public_read;
                    meta.checksums = old.checksums;
                    meta.checksum_type = old.checksum_type;
                    meta.part_sizes = old.part_sizes;
                }
            }
            // Tags are the upstream's: read when it reports some, or when the record has
            // some the upstream may have dropped (AWS S3 reports no count on HEAD). An
            // upstream that cannot answer leaves the record's (a later repair reads them).
            if tag_count.is_some_and(|n| n > 0) || !meta.tags.is_empty() {
                match up.get_object_tagging(bucket, key).await {
                    Ok(Some(tags)) => meta.tags = tags,
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = ?e.code, bucket, key, "upstream tags unread; kept the record's")
                    }
                }
            }
            let unchanged = current.as_ref().is_some_and(|e| e.value == meta.encode());
            if unchanged {
                return Ok(());
            }
            up.repairs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            store.put(okey, meta.encode(), condition).await.map(drop)
        }
        None if current.is_some() => {
            up.repairs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            store.delete(okey, condition).await.map(drop)
        }
        None => Ok(()),
    };
    match outcome {
        Err(e) if e.code == S3ErrorCode::PreconditionFailed => Ok(()),
        other => other,
    }
}

/// Fetches the content headers of a record made from a listing, and records them.
pub async fn fill_headers(ctx: &ReqCtx, bucket: &str, key: &str, meta: ObjectMeta) -> S3Result<ObjectMeta> {
    let Some(up) = upstream(ctx) else { return Ok(meta) };
    repair_key(ctx.store(), &up, bucket, key).await?;
    super::object::load_object(ctx, bucket, key).await
}

/// The body `ub` of `bucket/key`, bytes `start..start+len`, streamed from the upstream while
/// it still is the body the index names (412 PreconditionFailed otherwise: the caller repairs
/// and reads the record again).
pub async fn read_body(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    ub: &UpstreamBody,
    start: u64,
    len: u64,
    whole: bool,
) -> S3Result<Body> {
    let up = upstream(ctx).ok_or_else(no_upstream)?;
    let range = (!whole).then(|| (start, start + len - 1));
    let body = up.get_object(bucket, key, range, &ub.etag).await?;
    Ok(Body::new(body))
}

/// Repairs every key whose write a crash interrupted (see the module's order of steps).
/// Called at start-up, before requests are served.
pub async fn recover_intents(store: &Store) -> S3Result<Recovered> {
    let Some(up) = store.upstream.clone() else { return Ok(Recovered::default()) };
    let mut done = Recovered::default();
    let mut after = Vec::new();
    loop {
        let page = store.scan(schema::INTENTS_PREFIX.to_vec(), after.clone(), IMPORT_BATCH).await?;
        let Some((last, _)) = page.last() else { return Ok(done) };
        after = last.clone();
        for (k, _) in page {
            let Some((bucket, key)) = schema::split_intent(&k) else {
                store.delete(k, Condition::None).await?;
                continue;
            };
            // Under the key's lock, and only if the intent is still there: when retried while
            // serving, a write of the key may be in flight, and it settles its own intent.
            let _order = up.locks.lock(schema::object(bucket, key)).await;
            if store.get(k.clone()).await?.is_none() {
                continue;
            }
            match repair_key(store, &up, bucket, key).await {
                Ok(_) => {
                    store.delete(k, Condition::None).await?;
                    done.repaired += 1;
                }
                // Left for the next pass: the upstream may be down for now.
                Err(e) => {
                    tracing::warn!(code = ?e.code, message = %e.message, bucket, key, "an interrupted write could not be repaired yet");
                    done.left += 1;
                }
            }
        }
    }
}

/// What [`recover_intents`] did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Recovered {
    /// Keys repaired (their intents cleared).
    pub repaired: usize,
    /// Keys whose repair failed (the upstream unreachable): their intents stay.
    pub left: usize,
}

/// How often [`spawn_intent_retries`] tries again.
const INTENT_RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Retries the intents start-up could not repair until none is left.
pub fn spawn_intent_retries(store: Store) {
    let Some(up) = store.upstream.clone() else { return };
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(INTENT_RETRY_EVERY).await;
            match recover_intents(&store).await {
                Ok(r) if r.left == 0 => {
                    tracing::info!(repaired = r.repaired, "every interrupted upstream write is repaired");
                    return;
                }
                Ok(r) => tracing::warn!(
                    repaired = r.repaired,
                    left = r.left,
                    "interrupted upstream writes still unrepaired"
                ),
                Err(e) => {
                    tracing::warn!(code = ?e.code, message = %e.message, "retrying interrupted upstream writes failed")
                }
            }
        }
    });
    up.track(task.abort_handle());
}

/// Starts indexing the upstream bucket behind `bucket` from where its import records say (the
/// beginning for a new import): see `import`. Every page's keys are written with the
/// position after them, in one batch, so a crash resumes after the last page written.
/// Progress: a log line every 10 s and `/metrics`.
pub fn spawn_import(store: Store, bucket: String) {
    let Some(up) = store.upstream.clone() else { return };
    let filler = Arc::clone(&up);
    let task = tokio::spawn(async move {
        match import(&store, &bucket).await {
            Ok(n) => {
                tracing::info!(bucket, imported = n, "import finished");
                fill_headers_logged(&store, &filler, &bucket).await;
            }
            Err(e) => {
                tracing::error!(bucket, code = ?e.code, message = %e.message, "import failed; it resumes at the next start")
            }
        }
    });
    up.track(task.abort_handle());
}

/// Upstream HEADs the background header fill has in flight at once.
const HEADER_FILL_PARALLEL: usize = 8;

/// Fetches the content headers of every record of `bucket` an import made from a listing
/// (`headers_pending`), [`HEADER_FILL_PARALLEL`] HEADs at a time, so that HeadObject answers
/// from the index without going upstream first. Each is `repair_key`, a write conditional on
/// the record's version: a write through the gateway meanwhile wins. Runs while the bucket's
/// header fill record (`schema::header_fill_cursor`) stands, from the key it names, which
/// moves on after each page and goes at the bucket's end: a restart resumes the fill where
/// it was and reads nothing of a bucket whose fill is done.
async fn fill_headers_of(store: &Store, up: &Upstream, bucket: &str) -> S3Result<u64> {
    use futures_util::StreamExt as _;
    let prefix = schema::objects_prefix(bucket);
    let record = schema::header_fill_cursor(bucket);
    let Some(cursor) = store.get(record.clone()).await? else { return Ok(0) };
    let mut after = match cursor.value.is_empty() {
        true => Vec::new(),
        false => [&prefix[..], &cursor.value].concat(),
    };
    let mut filled = 0;
    loop {
        let page = store.scan(prefix.clone(), after.clone(), IMPORT_BATCH).await?;
        let Some((last, _)) = page.last() else {
            store.delete(record, Condition::None).await?;
            return Ok(filled);
        };
        after = last.clone();
        let pending: Vec<String> = page
            .iter()
            .filter(|(_, e)| {
                ObjectMeta::decode(&e.value)
                    .is_some_and(|m| matches!(m.body, BodyRef::Upstream(ub) if ub.headers_pending))
            })
            .filter_map(|(k, _)| std::str::from_utf8(&k[prefix.len()..]).ok().map(str::to_owned))
            .collect();
        let results: Vec<S3Result<()>> = futures_util::stream::iter(pending)
            .map(|key| async move { repair_key(store, up, bucket, &key).await })
            .buffer_unordered(HEADER_FILL_PARALLEL)
            .collect()
            .await;
        for result in results {
            result?;
            filled += 1;
            up.headers_filled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        store.put(record.clone(), after[prefix.len()..].to_vec(), Condition::None).await?;
    }
}

/// `fill_headers_of`, its outcome logged (a failure is retried at the next start; reads
/// fetch a record's headers on demand meanwhile).
async fn fill_headers_logged(store: &Store, up: &Upstream, bucket: &str) {
    match fill_headers_of(store, up, bucket).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(bucket, filled = n, "imported records' headers fetched"),
        Err(e) => tracing::warn!(
            bucket,
            code = ?e.code,
            message = %e.message,
            "fetching imported records' headers failed; it resumes at the next start"
        ),
    }
}

/// Starts the header fills (`fill_headers_of`) a restart interrupted: those of the buckets
/// with a header fill record not being imported (an import runs its fill when it ends). A
/// database from before the records gets one for every bucket first, once.
pub async fn resume_header_fills(store: &Store) -> S3Result<()> {
    let Some(up) = store.upstream.clone() else { return Ok(()) };
    if store.get(schema::HEADER_FILL_CURSORS_KEPT.to_vec()).await?.is_none() {
        let buckets = store.scan(schema::BUCKETS_PREFIX.to_vec(), Vec::new(), 100_000).await?;
        let mut batch = holt_core::Batch::new();
        for (k, _) in buckets {
            if let Some(bucket) = schema::bucket_name_from_key(&k) {
                batch.put(schema::header_fill_cursor(bucket), Vec::new());
            }
        }
        batch.put(schema::HEADER_FILL_CURSORS_KEPT.to_vec(), Vec::new());
        store.write_batch(batch).await?;
    }
    let fills = store.scan(schema::HEADER_FILLS_PREFIX.to_vec(), Vec::new(), 100_000).await?;
    for (k, _) in fills {
        let Some(bucket) =
            std::str::from_utf8(&k[schema::HEADER_FILLS_PREFIX.len()..]).ok().map(str::to_owned)
        else {
            continue;
        };
        if store.get(schema::import_cursor(&bucket)).await?.is_some() {
            continue;
        }
        let (store, up2) = (store.clone(), Arc::clone(&up));
        let task = tokio::spawn(async move { fill_headers_logged(&store, &up2, &bucket).await });
        up.track(task.abort_handle());
    }
    Ok(())
}

/// Resumes every import a restart interrupted.
pub async fn resume_imports(store: &Store) -> S3Result<()> {
    let cursors = store.scan(schema::IMPORTS_PREFIX.to_vec(), Vec::new(), 100_000).await?;
    for (k, _) in cursors {
        // Import records only: a prefix cursor has a NUL after the bucket name.
        if k.contains(&0) {
            continue;
        }
        if let Ok(bucket) = std::str::from_utf8(&k[schema::IMPORTS_PREFIX.len()..]) {
            tracing::info!(bucket, "resuming the import");
            spawn_import(store.clone(), bucket.to_owned());
        }
    }
    Ok(())
}

/// Whether `bucket` is still being imported (its listings then come from the upstream).
pub async fn importing(ctx: &ReqCtx, bucket: &str) -> S3Result<bool> {
    if ctx.store().upstream.is_none() {
        return Ok(false);
    }
    Ok(ctx.store().get(schema::import_cursor(bucket)).await?.is_some())
}

/// A listing of a bucket still being imported, answered by the upstream (the index does not
/// hold every key yet). A ListObjectsV2 page carries a continuation token of ours, sealing its
/// last entry as the index's own pages do, so a listing that goes on after the import has
/// finished resumes from the index at the right key (and one that goes on before, from the
/// upstream with `start-after`).
pub async fn list_from_upstream(ctx: &ReqCtx, bucket: &str) -> S3Result<axum::response::Response> {
    use crate::storage::token::{TokenKind, TokenScope};
    let up = upstream(ctx).ok_or_else(no_upstream)?;
    let v2 = ctx.query.get("list-type") == Some("2");
    let scope = TokenScope {
        kind: TokenKind::ListObjectsV2,
        bucket,
        prefix: ctx.query.get("prefix").unwrap_or("").as_bytes(),
        delimiter: ctx.query.get("delimiter").unwrap_or("").as_bytes(),
        url_encoding: super::list::parse_encoding(ctx)?,
    };
    let token_in = ctx.query.get("continuation-token").filter(|t| v2 && !t.is_empty());
    let resume = match token_in {
        Some(t) => Some(
            String::from_utf8(ctx.store().tokens.decode(&scope, t)?)
                .map_err(|_| S3Error::new(S3ErrorCode::InvalidArgument))?,
        ),
        None => None,
    };
    let mut query: Vec<(&str, &str)> = ctx
        .query
        .pairs()
        .filter(|(k, _)| resume.is_none() || !matches!(*k, "continuation-token" | "start-after"))
        .collect();
    if let Some(r) = &resume {
        query.push(("start-after", r));
    }
    let doc = up.list_passthrough(bucket, &query).await?;
    let doc = if v2 {
        let text = String::from_utf8(doc.to_vec())
            .map_err(|_| S3Error::internal("upstream listing", "not UTF-8"))?;
        let next = last_listed(&text).map(|last| ctx.store().tokens.encode(&scope, last.as_bytes()));
        let mut text = replace_element(&text, "NextContinuationToken", next.as_deref());
        if resume.is_some() {
            text = replace_element(&text, "ContinuationToken", token_in);
            text =
                replace_element(&text, "StartAfter", ctx.query.get("start-after").filter(|s| !s.is_empty()));
        }
        bytes::Bytes::from(text)
    } else {
        doc
    };
    let mut resp = axum::response::Response::new(Body::from(doc));
    super::set_header(&mut resp, "content-type", "application/xml");
    Ok(resp)
}

/// The last key or common prefix a truncated ListObjectsV2 page lists (decoded), or `None`
/// for a page that is not truncated.
fn last_listed(doc: &str) -> Option<String> {
    if !doc.contains("<IsTruncated>true</IsTruncated>") {
        return None;
    }
    let url = doc.contains("<EncodingType>url</EncodingType>");
    let last_of = |open: &str| -> Option<String> {
        let at = doc.rfind(open)? + open.len();
        let end = doc[at..].find('<')? + at;
        let text = crate::upstream::xml_unescape(&doc[at..end]);
        Some(if url {
            percent_encoding::percent_decode_str(&text.replace('+', " ")).decode_utf8_lossy().into_owned()
        } else {
            text
        })
    };
    let key = last_of("<Key>");
    let prefix = last_of("<CommonPrefixes><Prefix>");
    key.into_iter().chain(prefix).max()
}

/// `doc` with the text of its first `<name>` element replaced by `value`, or the element
/// removed for `None` (added before `</ListBucketResult>` if absent and `value` is given).
fn replace_element(doc: &str, name: &str, value: Option<&str>) -> String {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let element = value
        .map(|v| {
            let mut escaped = Vec::new();
            crate::xml::escape_into(&mut escaped, v);
            format!("{open}{}{close}", String::from_utf8_lossy(&escaped))
        })
        .unwrap_or_default();
    if let Some(start) = doc.find(&open) {
        if let Some(len) = doc[start..].find(&close) {
            let end = start + len + close.len();
            return format!("{}{element}{}", &doc[..start], &doc[end..]);
        }
    }
    match (value, doc.rfind("</ListBucketResult>")) {
        (Some(_), Some(at)) => format!("{}{element}{}", &doc[..at], &doc[at..]),
        _ => doc.to_owned(),
    }
}

/// How often a running import logs its progress (also in `/metrics`).
const IMPORT_PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Top-level prefixes an import lists at once.
const IMPORT_WORKERS: usize = 4;

/// One import's shared progress, for the log.
struct ImportProgress {
    started: std::time::Instant,
    imported: std::sync::atomic::AtomicU64,
    reported: parking_lot::Mutex<std::time::Instant>,
}

impl ImportProgress {
    fn add(&self, up: &Upstream, bucket: &str, n: u64) {
        let total = self.imported.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
        up.imports.lock().entry(bucket.to_owned()).or_default().objects += n;
        let mut reported = self.reported.lock();
        if reported.elapsed() >= IMPORT_PROGRESS_EVERY {
            *reported = std::time::Instant::now();
            let rate = total as f64 / self.started.elapsed().as_secs_f64().max(0.001);
            tracing::info!(bucket, imported = total, per_second = rate as u64, "importing");
        }
    }
}

/// Imports `bucket` in two phases, each resumable. Discovery lists the top level with the
/// delimiter `/`: its keys are indexed and each common prefix gets a cursor record, in the
/// same batch as the import record's position. Then [`IMPORT_WORKERS`] tasks list the
/// prefixes, each page's keys written in one batch with the prefix's cursor (deleted with
/// its last page); a prefix taken while the others are too few to keep every task busy may
/// be split into the prefixes under it first (`import_prefix`). The import record goes when
/// no prefix is left.
async fn import(store: &Store, bucket: &str) -> S3Result<u64> {
    let up = store.upstream.clone().ok_or_else(|| S3Error::internal("import", "no upstream"))?;
    let record = schema::import_cursor(bucket);
    let progress = ImportProgress {
        started: std::time::Instant::now(),
        imported: Default::default(),
        reported: parking_lot::Mutex::new(std::time::Instant::now()),
    };
    loop {
        // Discovery, page by page, from where the record says.
        let Some(state) = store.get(record.clone()).await? else { return Ok(0) };
        if state.value.first() == Some(&b'P') {
            break;
        }
        let after = String::from_utf8(state.value.get(1..).unwrap_or_default().to_vec())
            .map_err(|e| S3Error::internal("import record", e))?;
        let page = up.list_page(bucket, "", &after, Some("/")).await?;
        let last = page
            .contents
            .last()
            .map(|e| e.key.as_str())
            .into_iter()
            .chain(page.common_prefixes.last().map(|p| p.prefix.as_str()))
            .max()
            .map(str::to_owned);
        let next = match (&page.next_continuation_token, last) {
            (Some(_), Some(last)) => [b"D".as_slice(), last.as_bytes()].concat(),
            _ => b"P".to_vec(),
        };
        let cursors = prefix_cursors(bucket, &page).map(|(cursor, _)| cursor).collect();
        let n = write_listed(store, bucket, &page.contents, cursors, (record.clone(), Some(next))).await?;
        progress.add(&up, bucket, n);
    }
    // The prefixes, a few at a time, each to its end.
    let mut pending = std::collections::VecDeque::new();
    let mut from = Vec::new();
    let cursors_prefix = schema::import_prefix_cursors(bucket);
    loop {
        let chunk = store.scan(cursors_prefix.clone(), from.clone(), IMPORT_BATCH).await?;
        let Some((last, _)) = chunk.last() else { break };
        from = last.clone();
        for (k, _) in &chunk {
            if let Ok(prefix) = std::str::from_utf8(&k[cursors_prefix.len()..]) {
                pending.push_back(prefix.to_owned());
            }
        }
    }
    up.imports.lock().entry(bucket.to_owned()).or_default().prefixes = pending.len() as u64;
    let known = pending.iter().cloned().collect();
    let queue = parking_lot::Mutex::new(PrefixQueue { pending, taken: 0, known });
    let changed = tokio::sync::Notify::new();
    let worker = || async {
        loop {
            // Registered before the queue is looked at, so a change in between still wakes.
            let woken = changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let next = {
                let mut q = queue.lock();
                match q.pending.pop_front() {
                    Some(prefix) => {
                        q.taken += 1;
                        // Split only what would otherwise leave a task idle.
                        Some((prefix, q.pending.len() + q.taken < IMPORT_WORKERS))
                    }
                    // Nothing left and nothing being listed that could add prefixes: done.
                    None if q.taken == 0 => return Ok::<(), S3Error>(()),
                    None => None,
                }
            };
            let Some((prefix, may_split)) = next else {
                woken.await;
                continue;
            };
            let mut outcome = import_prefix(store, &up, bucket, &prefix, may_split, &progress).await;
            {
                let mut q = queue.lock();
                q.taken -= 1;
                if let Ok(split) = outcome.as_deref() {
                    let mut imports = up.imports.lock();
                    let stats = imports.entry(bucket.to_owned()).or_default();
                    stats.prefixes += split.len() as u64;
                    stats.prefixes_done += 1;
                }
                // A prefix queued already (a split redone after a crash) is not queued twice.
                for prefix in outcome.as_mut().map(std::mem::take).unwrap_or_default() {
                    if q.known.insert(prefix.clone()) {
                        q.pending.push_back(prefix);
                    }
                }
            }
            changed.notify_waiters();
            outcome?;
        }
    };
    let outcomes = futures_util::future::join_all((0..IMPORT_WORKERS).map(|_| worker())).await;
    outcomes.into_iter().collect::<S3Result<Vec<()>>>()?;
    if store.get(record.clone()).await?.is_some() {
        // The header fill takes over in the same batch: a crash cannot lose it.
        let mut batch = holt_core::Batch::new();
        batch.delete(record).put(schema::header_fill_cursor(bucket), Vec::new());
        store.write_batch(batch).await?;
        up.imports.lock().entry(bucket.to_owned()).or_default().done = true;
    }
    Ok(progress.imported.load(std::sync::atomic::Ordering::Relaxed))
}

/// The prefixes an import has yet to list, shared by its tasks.
struct PrefixQueue {
    pending: std::collections::VecDeque<String>,
    /// Prefixes a task is listing (or splitting) now.
    taken: usize,
    /// Every prefix queued so far.
    known: std::collections::HashSet<String>,
}

/// The cursor record (new, empty) and the prefix of each common prefix of a delimiter
/// listing's `page` the gateway can address upstream.
fn prefix_cursors<'p>(
    bucket: &'p str,
    page: &'p rusty_s3::actions::ListObjectsV2Response,
) -> impl Iterator<Item = ((Vec<u8>, Vec<u8>), &'p str)> + 'p {
    page.common_prefixes
        .iter()
        .map(|p| p.prefix.as_str())
        .filter(|p| crate::upstream::addressable(p))
        .map(move |p| ((schema::import_prefix_cursor(bucket, p), Vec::new()), p))
}

/// A prefix is split into at most this many: each costs a listing of its own however few
/// keys it holds (900 small directories would take 900 requests where a flat listing of
/// their keys takes one a thousand keys).
const IMPORT_SPLIT_MAX: usize = 4 * IMPORT_WORKERS;

/// Imports every key under `prefix`, from its cursor to the end. A prefix not yet started
/// that `may_split` (tasks would be idle) is first listed with the delimiter `/`: if that one
/// page holds the whole level, with at most [`IMPORT_SPLIT_MAX`] prefixes, its keys are
/// indexed and the prefix's cursor is replaced by one per prefix under it, in one batch, and
/// those prefixes are returned to be listed in turn. Any other level is listed flat, a
/// request a thousand keys: the delimiter page is the split's only cost. Returns nothing but
/// a split's prefixes.
async fn import_prefix(
    store: &Store,
    up: &Upstream,
    bucket: &str,
    prefix: &str,
    may_split: bool,
    progress: &ImportProgress,
) -> S3Result<Vec<String>> {
    let cursor = schema::import_prefix_cursor(bucket, prefix);
    let mut first = true;
    loop {
        // Gone: the prefix is done, or the bucket was deleted meanwhile.
        let Some(state) = store.get(cursor.clone()).await? else { return Ok(Vec::new()) };
        if store.get(schema::import_cursor(bucket)).await?.is_none() {
            return Ok(Vec::new());
        }
        let after = String::from_utf8(state.value).map_err(|e| S3Error::internal("import cursor", e))?;
        if std::mem::take(&mut first) && may_split && after.is_empty() {
            let level = up.list_page(bucket, prefix, "", Some("/")).await?;
            let (cursors, under): (Vec<_>, Vec<&str>) = prefix_cursors(bucket, &level).unzip();
            if level.next_continuation_token.is_none() && under.len() <= IMPORT_SPLIT_MAX {
                let n = write_listed(store, bucket, &level.contents, cursors, (cursor, None)).await?;
                progress.add(up, bucket, n);
                return Ok(under.into_iter().map(str::to_owned).collect());
            }
        }
        let page = up.list_page(bucket, prefix, &after, None).await?;
        let last = page.contents.last().map(|e| e.key.as_bytes().to_vec());
        let next = match (&page.next_continuation_token, last) {
            (Some(_), Some(last)) => Some(last),
            _ => None,
        };
        let done = next.is_none();
        let n = write_listed(store, bucket, &page.contents, Vec::new(), (cursor.clone(), next)).await?;
        progress.add(up, bucket, n);
        if done {
            return Ok(Vec::new());
        }
    }
}

/// Indexes the keys of one listed page that are absent from the index (a client's newer write
/// wins), creates the `cursors` that are absent, and sets `position` (deletes it for `None`),
/// in one batch; if a key or cursor exists already, the same one by one, the position last.
/// Returns the keys listed.
async fn write_listed(
    store: &Store,
    bucket: &str,
    listed: &[rusty_s3::actions::list_objects_v2::ListObjectsContent],
    cursors: Vec<(Vec<u8>, Vec<u8>)>,
    (position, value): (Vec<u8>, Option<Vec<u8>>),
) -> S3Result<u64> {
    // Keys the gateway cannot address upstream are not indexed (see `addressable`).
    let entries: Vec<(Vec<u8>, Vec<u8>)> = listed
        .iter()
        .filter(|e| crate::upstream::addressable(&e.key))
        .map(|e| (schema::object(bucket, &e.key), meta_from_listing(e).encode()))
        .chain(cursors)
        .collect();
    let set_position = |batch: &mut holt_core::Batch| {
        match &value {
            Some(v) => batch.put(position.clone(), v.clone()),
            None => batch.delete(position.clone()),
        };
    };
    let mut batch = holt_core::Batch::new();
    for (k, v) in &entries {
        batch.put_if(k.clone(), v.clone(), Condition::Absent);
    }
    set_position(&mut batch);
    match store.write_batch(batch).await {
        Ok(_) => return Ok(listed.len() as u64),
        Err(e) if e.code == S3ErrorCode::PreconditionFailed => {}
        Err(e) => return Err(e),
    }
    for (k, v) in entries {
        match store.put(k, v, Condition::Absent).await {
            Ok(_) => {}
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => {}
            Err(e) => return Err(e),
        }
    }
    let mut batch = holt_core::Batch::new();
    set_position(&mut batch);
    store.write_batch(batch).await?;
    Ok(listed.len() as u64)
}

/// Runs `reconcile` over every bucket each `every`, for as long as the process lives.
pub fn spawn_reconciler(store: Store, every: std::time::Duration) {
    let Some(up) = store.upstream.clone() else { return };
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            match reconcile(&store).await {
                Ok(0) => tracing::debug!("reconciliation found nothing to repair"),
                Ok(n) => tracing::info!(
                    repaired = n,
                    "reconciliation repaired keys that drifted from the upstream"
                ),
                Err(e) => {
                    tracing::warn!(code = ?e.code, message = %e.message, "reconciliation stopped; it runs again next period")
                }
            }
        }
    });
    up.track(task.abort_handle());
}

/// Re-lists each bucket's upstream and repairs every key whose index record disagrees (a
/// different ETag or size, missing, or no longer upstream): the bound on how stale the index
/// can get when notifications are lost or not configured. Buckets still being imported are
/// left to their import. Returns the keys repaired.
pub async fn reconcile(store: &Store) -> S3Result<u64> {
    let Some(up) = store.upstream.clone() else { return Ok(0) };
    let buckets = store.scan(schema::BUCKETS_PREFIX.to_vec(), Vec::new(), 100_000).await?;
    let mut repaired = 0;
    for (k, _) in buckets {
        let Ok(bucket) = std::str::from_utf8(&k[schema::BUCKETS_PREFIX.len()..]) else { continue };
        if store.get(schema::import_cursor(bucket)).await?.is_some() {
            continue;
        }
        repaired += reconcile_bucket(store, &up, bucket).await?;
    }
    Ok(repaired)
}

/// `reconcile` for one bucket: the upstream's listing and the index are walked side by side,
/// a page of the upstream at a time against the index records in the same key range.
pub async fn reconcile_bucket(store: &Store, up: &Upstream, bucket: &str) -> S3Result<u64> {
    let prefix = schema::objects_prefix(bucket);
    let mut after = String::new();
    let mut repaired = 0;
    loop {
        let page = up.list_page(bucket, "", &after, None).await?;
        let done = page.next_continuation_token.is_none() || page.contents.is_empty();
        let upper = if done { None } else { page.contents.last().map(|e| e.key.clone()) };
        let mut upstream: std::collections::BTreeMap<&str, (String, u64)> = page
            .contents
            .iter()
            // Keys the gateway cannot address upstream are not indexed (see `addressable`).
            .filter(|e| crate::upstream::addressable(&e.key))
            .map(|e| {
                (
                    e.key.as_str(),
                    (e.etag.as_deref().unwrap_or("").trim_matches('"').to_owned(), e.size.unwrap_or(0)),
                )
            })
            .collect();
        // The index's records in (after, upper].
        let mut from = if after.is_empty() { Vec::new() } else { schema::object(bucket, &after) };
        let mut differ = Vec::new();
        'index: loop {
            let chunk = store.scan(prefix.clone(), from.clone(), IMPORT_BATCH).await?;
            for (k, e) in &chunk {
                let key = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                if upper.as_deref().is_some_and(|u| key.as_str() > u) {
                    break 'index;
                }
                let indexed = ObjectMeta::decode(&e.value).and_then(|m| match m.body {
                    BodyRef::Upstream(ub) => Some((ub.etag, m.size)),
                    _ => None,
                });
                match (upstream.remove(key.as_str()), indexed) {
                    (Some(theirs), Some(ours)) if theirs == ours => {}
                    _ => differ.push(key),
                }
            }
            match chunk.last() {
                Some((k, _)) if chunk.len() == IMPORT_BATCH => from = k.clone(),
                _ => break,
            }
        }
        // Upstream keys the index lacks.
        differ.extend(upstream.into_keys().map(str::to_owned));
        for key in &differ {
            repair_key(store, up, bucket, key).await?;
        }
        repaired += differ.len() as u64;
        match upper {
            Some(u) => after = u,
            None => return Ok(repaired),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_passed_through_resume_at_their_last_entry() {
        let doc = "<ListBucketResult><Name>b</Name><Prefix></Prefix><IsTruncated>true</IsTruncated>\
                   <Contents><Key>a&amp;b</Key></Contents><Contents><Key>c</Key></Contents>\
                   <CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes>\
                   <NextContinuationToken>theirs</NextContinuationToken></ListBucketResult>";
        assert_eq!(last_listed(doc).as_deref(), Some("d/"));
        assert_eq!(last_listed(&doc.replace("true", "false")), None);
        let url = "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>\
                   <Contents><Key>a+b%2Bc</Key></Contents></ListBucketResult>";
        assert_eq!(last_listed(url).as_deref(), Some("a b+c"));
        let ours = replace_element(doc, "NextContinuationToken", Some("ours"));
        assert!(
            ours.contains("<NextContinuationToken>ours</NextContinuationToken>") && !ours.contains("theirs")
        );
        let none = replace_element(doc, "NextContinuationToken", None);
        assert!(!none.contains("ContinuationToken"));
        assert_eq!(crate::upstream::xml_unescape("x&lt;&#65;&#x42;&unknown;"), "x<AB&unknown;");
    }

    #[test]
    fn etags_stand_for_md5_and_parts() {
        let (md5, parts) = md5_and_parts("3cee2b9176b56e17908c46ad6d464be2-3");
        assert_eq!((hex::encode(md5), parts), ("3cee2b9176b56e17908c46ad6d464be2".to_owned(), 3));
        assert_eq!(md5_and_parts("b1946ac92492d2347c6235b4d2611184").1, 0);
        // Another shape is kept apart from every MD5 by hashing its text.
        let (other, parts) = md5_and_parts("not-an-md5");
        assert_eq!((other, parts), (<[u8; 16]>::from(Md5::digest(b"not-an-md5")), 0));
    }
}

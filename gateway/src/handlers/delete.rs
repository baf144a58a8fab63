//! DeleteObject and DeleteObjects.

use std::collections::HashSet;

use axum::body::Body;
use axum::response::Response;
use holt_core::{Batch, Condition};
use http::StatusCode;

use super::body::{read_small, XML_BODY_BYTES_MAX};
use super::{check_key, empty_response, through, xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::ObjectMeta;
use crate::storage::schema;
use crate::xml::{request, response};

const DELETE_ATTEMPTS_MAX: usize = 16;
/// DeleteObjects in upstream mode: repairs of keys the upstream did not delete, in flight at
/// once for one request.
const UPSTREAM_REPAIRS_AT_ONCE: usize = 16;

/// Deletes one object (absent is fine) and then reclaims its body. In upstream mode the
/// upstream deletes it first (see `through`).
pub async fn delete_object_record(ctx: &ReqCtx, bucket: &str, key: &str) -> S3Result<()> {
    let Some(up) = through::upstream(ctx) else { return delete_indexed(ctx, bucket, key).await };
    let _order = up.locks.lock(schema::object(bucket, key)).await;
    through::write_intent(ctx, bucket, key).await?;
    let result = async {
        up.delete_object(bucket, key).await?;
        delete_indexed(ctx, bucket, key).await
    }
    .await;
    through::settle(ctx, bucket, key, result).await
}

/// Removes the object's record and reclaims its local body.
async fn delete_indexed(ctx: &ReqCtx, bucket: &str, key: &str) -> S3Result<()> {
    let okey = schema::object(bucket, key);
    for _ in 0..DELETE_ATTEMPTS_MAX {
        let Some(current) = ctx.store().get(okey.clone()).await? else { return Ok(()) };
        // Conditional on the version whose body we reclaim: a concurrent overwrite makes us
        // look again instead of unlinking the new body.
        match ctx.store().delete(okey.clone(), Condition::Version(current.version)).await {
            Ok(_) => {
                if let Some(meta) = ObjectMeta::decode(&current.value) {
                    ctx.store().reclaim(&meta.body).await;
                }
                return Ok(());
            }
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => continue,
            Err(e) => return Err(e),
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent writes to this key."))
}

/// DeleteObject: 204 whether or not the key existed; a `versionId` other than `null`
/// deletes nothing.
pub async fn handle_delete_object(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    // Deleting a version that does not exist deletes nothing (as DeleteObjects does): the
    // object's one version, `null`, is left alone.
    if ctx.names_current_version()? {
        delete_object_record(ctx, bucket, key).await?;
    }
    Ok(empty_response(StatusCode::NO_CONTENT))
}

/// Removes the records of `keys` (distinct) from the index. Fast path: one atomic batch
/// deleting every named object at the version just read (one log record and one fsync for up
/// to 1000 keys). If any object changed in between, or the batch fails, it falls back to
/// deleting key by key.
async fn delete_indexed_all<'k>(
    ctx: &ReqCtx,
    bucket: &str,
    keys: Vec<&'k str>,
    deleted: &mut Vec<&'k str>,
    failures: &mut Vec<(String, S3Error)>,
) -> S3Result<()> {
    let mut batch = Batch::new();
    let mut reclaim = Vec::new();
    for key in &keys {
        if let Some(current) = ctx.store().get(schema::object(bucket, key)).await? {
            batch.delete_if(schema::object(bucket, key), Condition::Version(current.version));
            if let Some(meta) = ObjectMeta::decode(&current.value) {
                reclaim.push(meta.body);
            }
        }
    }
    let batch_ok = batch.is_empty() || ctx.store().write_batch(batch).await.is_ok();
    if batch_ok {
        ctx.store().reclaim_all(&reclaim).await;
        deleted.extend(keys);
        return Ok(());
    }
    for key in keys {
        match delete_indexed(ctx, bucket, key).await {
            Ok(()) => deleted.push(key),
            Err(e) => failures.push((key.to_owned(), e)),
        }
    }
    Ok(())
}

/// DeleteObjects in upstream mode: one upstream DeleteObjects request for all of `keys`
/// (distinct), under every key's lock (taken in key order, so two such requests never wait
/// on each other) and their intents (one batch, one fsync). Keys the upstream deleted leave
/// the index in one batch; a key it did not delete is repaired from the upstream and
/// reported, as a failed DeleteObject is (`through::settle`).
async fn delete_upstream_all<'k>(
    ctx: &ReqCtx,
    up: &crate::upstream::Upstream,
    bucket: &str,
    mut keys: Vec<&'k str>,
    deleted: &mut Vec<&'k str>,
    failures: &mut Vec<(String, S3Error)>,
) -> S3Result<()> {
    keys.sort_unstable();
    let mut order = Vec::with_capacity(keys.len());
    for key in &keys {
        order.push(up.locks.lock(schema::object(bucket, key)).await);
    }
    let mut intents = Batch::new();
    for key in &keys {
        intents.put(schema::intent(bucket, key), Vec::new());
    }
    ctx.store().write_batch(intents).await?;
    let refused = match up.delete_objects(bucket, &keys).await {
        Ok(refused) => refused,
        // The request failed as a whole: the upstream may have deleted any of the keys.
        Err(e) => keys.iter().map(|&k| (k.to_owned(), e.clone())).collect(),
    };
    let refused_keys: HashSet<&str> = refused.iter().map(|(k, _)| k.as_str()).collect();
    let gone: Vec<&'k str> = keys.iter().copied().filter(|k| !refused_keys.contains(k)).collect();
    let from = deleted.len();
    let before = failures.len();
    delete_indexed_all(ctx, bucket, gone, deleted, failures).await?;
    let mut cleared: Vec<Vec<u8>> = deleted[from..].iter().map(|k| schema::intent(bucket, k)).collect();
    // Failures, the upstream's or the index's, are repaired from the upstream (a few at a
    // time); a key whose repair fails keeps its intent for the retries.
    use futures_util::stream::{self, StreamExt};
    let index_failures: Vec<(String, S3Error)> = failures.drain(before..).collect();
    let mut repairs = Vec::new();
    for (key, err) in refused.into_iter().chain(index_failures) {
        repairs.push(async move {
            let repaired = through::repair_key(ctx.store(), up, bucket, &key).await.is_ok();
            (key, err, repaired)
        });
    }
    let repaired: Vec<_> = stream::iter(repairs).buffered(UPSTREAM_REPAIRS_AT_ONCE).collect().await;
    for (key, err, ok) in repaired {
        if ok {
            cleared.push(schema::intent(bucket, &key));
        } else {
            tracing::warn!(bucket, key, "repair after a failed delete failed; left for the next start");
        }
        failures.push((key, err));
    }
    through::clear_intents(ctx, cleared).await;
    drop(order);
    Ok(())
}

/// DeleteObjects: deletes up to 1000 keys named in the XML body, reporting each key as
/// deleted or failed (only failures in quiet mode).
pub async fn handle_delete_objects(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    ctx.owned_bucket().await?;
    // Content-MD5 is verified when present but not required: boto3 sends a CRC32 checksum.
    let body = read_small(ctx, body, XML_BODY_BYTES_MAX).await.map_err(|e| {
        if e.code == S3ErrorCode::EntityTooLarge {
            S3Error::with_message(S3ErrorCode::MalformedXML, "The DeleteObjects body is larger than 2 MiB.")
        } else {
            e
        }
    })?;
    let heavy = body.len() >= crate::HEAVY_DOCUMENT_BYTES;
    let req = ctx.state.0.run_heavy(&ctx.user, heavy, move || request::parse_delete(&body)).await?;
    let mut deleted: Vec<&str> = Vec::new();
    let mut failures: Vec<(String, S3Error)> = Vec::new();
    let mut valid: Vec<&str> = Vec::new();
    for obj in &req.objects {
        match check_key(&obj.key) {
            Err(e) => failures.push((obj.key.clone(), e)),
            // No versions exist besides `null`: deleting another one is a no-op.
            Ok(()) if obj.version_id.as_deref().is_some_and(|v| v != "null") => deleted.push(&obj.key),
            Ok(()) => valid.push(&obj.key),
        }
    }
    match through::upstream(ctx) {
        Some(up) => {
            // A key named twice is deleted once and reported as named.
            let mut distinct = valid.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let mut done = Vec::with_capacity(distinct.len());
            delete_upstream_all(ctx, &up, bucket, distinct, &mut done, &mut failures).await?;
            deleted.extend(valid.into_iter().filter(|k| done.binary_search(k).is_ok()));
        }
        None => delete_indexed_all(ctx, bucket, valid, &mut deleted, &mut failures).await?,
    }
    let errors: Vec<response::DeleteError<'_>> = failures
        .iter()
        .map(|(k, e)| response::DeleteError { key: k, code: e.code.as_str(), message: &e.message })
        .collect();
    let shown: &[&str] = if req.quiet { &[] } else { &deleted };
    Ok(xml_response(response::delete_result(shown, &errors)))
}

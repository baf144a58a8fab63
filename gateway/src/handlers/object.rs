//! PutObject, GetObject, HeadObject, and the commit step shared by every operation that
//! stores an object (PutObject, CopyObject, CompleteMultipartUpload).

use axum::body::Body;
use axum::response::Response;
use holt_core::{Batch, BatchOp, Condition};
use http::StatusCode;

use super::body::{ingest, ingest_to, Sink, UpstreamStart};
use super::headers::{object_headers_from_request, write_object_headers};
use super::through;
use super::{conditional, set_header, ReqCtx};
use crate::checksum::{encode_value, ChecksumType, ALL_ALGOS};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BodyRef, BucketMeta, ObjectMeta};
use crate::storage::schema;
use crate::time;

/// How often a commit retries after losing a race with another writer of the same key.
const COMMIT_ATTEMPTS_MAX: usize = 16;

/// A client precondition on a write.
#[derive(Debug, Clone)]
pub enum PutCondition {
    /// No precondition: write whatever is there.
    None,
    /// `If-None-Match: *`: only if the key does not exist.
    Absent,
    /// `If-Match: <etag list>`: only if the current object's ETag matches.
    Match(String),
    /// `If-None-Match: <etag list>`: unless the current object's ETag matches (412 then); a
    /// missing key is written. AWS takes only `*`; Ceph and MinIO take a list, and clients
    /// written against them send one.
    NoneMatch(String),
}

/// Reads `If-None-Match` / `If-Match` of a PutObject-like request.
pub fn put_condition(ctx: &ReqCtx) -> S3Result<PutCondition> {
    match (ctx.header("if-none-match"), ctx.header("if-match")) {
        (Some(_), Some(_)) => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "If-Match and If-None-Match together are not supported on writes.",
        )),
        (Some(v), None) if v.trim() == "*" => Ok(PutCondition::Absent),
        (Some(list), None) => Ok(PutCondition::NoneMatch(list.to_owned())),
        (None, Some(list)) => Ok(PutCondition::Match(list.to_owned())),
        (None, None) => Ok(PutCondition::None),
    }
}

/// What a commit of an object record waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The record as durable as the store's durability asks.
    Durable,
    /// Nothing: a durable intent record covers the write (upstream mode, `through`), and the
    /// upstream holds everything the record says (`through::restorable`), so a crash before
    /// the record reaches disk is repaired at the next start to what was acknowledged.
    CoveredByIntent,
}

/// Commits `meta` as the object `bucket/key`, atomically with the client's precondition, then
/// reclaims the body it replaced. On failure the new body is abandoned (`Store::abandon`):
/// removed, unless the failed write may still be applied.
pub async fn commit_object(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    meta: &ObjectMeta,
    condition: &PutCondition,
    wait: Wait,
) -> S3Result<()> {
    let value = meta.encode();
    let mut result =
        Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent writes to this key."));
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        match try_commit(ctx, bucket, key, &value, condition, &[], wait).await {
            // Another writer got in between our read and our write: re-evaluate.
            Ok(Committed::Conflict) => continue,
            Ok(Committed::Done { old, version }) => {
                result = Ok((old, version));
                break;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    settle_commit(ctx, bucket, key, meta, result).await
}

/// The outcome of one `try_commit`.
pub enum Committed {
    /// Written; `old` is the body of the record it replaced (to reclaim once settled).
    Done {
        /// The body of the replaced record (`None` if the key was new).
        old: Option<BodyRef>,
        /// The engine version of the new record.
        version: holt_core::Version,
    },
    /// The object record, or a condition among `extra`, changed since it was read.
    Conflict,
}

/// One attempt at writing the object record: reads the current record, applies the client's
/// precondition to it, and writes `value` together with `extra` in one atomic batch that is
/// conditional on exactly the version read (so the body reclaimed afterwards is the one
/// replaced, never a newer one).
pub async fn try_commit(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    value: &[u8],
    condition: &PutCondition,
    extra: &[BatchOp],
    wait: Wait,
) -> S3Result<Committed> {
    let okey = schema::object(bucket, key);
    let current = ctx.store().get(okey.clone()).await?;
    let old = match &current {
        Some(e) => Some(ObjectMeta::decode(&e.value).ok_or_else(|| {
            S3Error::internal("object record", format!("undecodable record for {bucket}/{key}"))
        })?),
        None => None,
    };
    let engine_condition = match (condition, &current, &old) {
        (PutCondition::Absent, Some(_), _) => return Err(S3Error::new(S3ErrorCode::PreconditionFailed)),
        (PutCondition::Match(_), None, _) => return Err(S3Error::new(S3ErrorCode::NoSuchKey)),
        (PutCondition::Match(list), Some(_), Some(o)) if !conditional::etag_matches(list, &o.etag()) => {
            return Err(S3Error::new(S3ErrorCode::PreconditionFailed))
        }
        (PutCondition::NoneMatch(list), Some(_), Some(o)) if conditional::etag_matches(list, &o.etag()) => {
            return Err(S3Error::new(S3ErrorCode::PreconditionFailed))
        }
        (_, Some(e), _) => Condition::Version(e.version),
        (_, None, _) => Condition::Absent,
    };
    let mut batch = Batch::new();
    batch.put_if(okey, value.to_vec(), engine_condition);
    batch.ops.extend_from_slice(extra);
    let written = match wait {
        Wait::Durable => ctx.store().write_batch(batch).await,
        Wait::CoveredByIntent => ctx.store().write_batch_lazily(batch).await,
    };
    match written {
        Ok(version) => Ok(Committed::Done { old: old.map(|o| o.body), version }),
        Err(e) if e.code == S3ErrorCode::PreconditionFailed => Ok(Committed::Conflict),
        Err(e) => Err(e),
    }
}

/// Finishes a commit attempt: withdraws the object if its bucket was deleted meanwhile, then
/// reclaims (in one call) whichever bodies no committed record names any more. A failed
/// attempt abandons the new body.
pub async fn settle_commit(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    meta: &ObjectMeta,
    result: S3Result<(Option<BodyRef>, holt_core::Version)>,
) -> S3Result<()> {
    match result {
        Ok((old, version)) => {
            let replaced = old.filter(|b| *b != meta.body);
            // DeleteBucket checks emptiness before removing the bucket record; a write that
            // committed in between would be left in a deleted bucket. Whichever side looks
            // second sees the other: here the object is withdrawn, in DeleteBucket the bucket
            // restored.
            let bucket_gone = match ctx.store().get(schema::bucket(bucket)).await {
                // Gone, or deleted and created again by someone else: either way the object
                // must not stay.
                Ok(b) => b.and_then(|e| BucketMeta::decode(&e.value)).is_none_or(|m| m.owner != ctx.user),
                Err(e) => {
                    // The object committed and names its body: keep both, reclaim the old one.
                    if let Some(old) = &replaced {
                        ctx.store().reclaim(old).await;
                    }
                    return Err(e);
                }
            };
            let mut unnamed: Vec<&BodyRef> = replaced.iter().collect();
            if bucket_gone {
                let withdrawn =
                    ctx.store().delete(schema::object(bucket, key), Condition::Version(version)).await;
                // If another writer replaced our record first, it reclaims our body itself.
                if matches!(withdrawn, Ok(true)) {
                    unnamed.push(&meta.body);
                }
            }
            ctx.store().reclaim_all(unnamed).await;
            if bucket_gone {
                return Err(S3Error::new(S3ErrorCode::NoSuchBucket));
            }
            Ok(())
        }
        Err(e) => {
            ctx.store().abandon(&meta.body, &e).await;
            Err(e)
        }
    }
}

/// PutObject: streams the body into the body store, then commits the object record under
/// the request's `If-None-Match: *` or `If-Match` precondition.
pub async fn handle_put_object(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    let acl = super::acl::check_acl_headers(ctx)?;
    let headers = object_headers_from_request(ctx)?;
    let tags = super::tagging::from_header(ctx)?;
    let condition = put_condition(ctx)?;
    let Some(up) = through::upstream(ctx) else {
        let ingested = ingest(ctx, body, None).await?;
        let meta = put_meta(ingested, headers, tags, acl);
        commit_object(ctx, bucket, key, &meta, &condition, Wait::Durable).await?;
        return Ok(put_response(&meta));
    };
    // Upstream mode: the upstream applies the precondition (it holds the current object);
    // the key's lock orders the index commit after it (see `through`).
    let _order = up.locks.lock(schema::object(bucket, key)).await;
    // The intent's fsync overlaps the upstream request's start: only the body's last byte
    // waits for it (`Sink::Upstream::before_end`).
    let mut intent = through::IntentWrite::start(ctx, bucket, key);
    let mut sent = crate::upstream::object_header_pairs(&headers);
    sent.extend(crate::upstream::tagging_header(&tags));
    for name in ["if-match", "if-none-match", "content-md5"] {
        if let Some(v) = ctx.header(name) {
            sent.push((name.to_owned(), v.to_owned()));
        }
    }
    let (b, k) = (bucket.to_owned(), key.to_owned());
    let start: UpstreamStart =
        Box::new(move |len, body| Box::pin(async move { up.put_object(&b, &k, len, sent, body).await }));
    let result = async {
        let sink = Sink::Upstream { start, before_end: Some(Box::pin(intent.durable())) };
        let ingested = ingest_to(ctx, body, None, sink).await;
        // Settled only once the intent is: a repair must not run before it lands.
        intent.durable().await?;
        let meta = put_meta(ingested?, headers, tags, acl);
        let wait = if through::restorable(&meta) { Wait::CoveredByIntent } else { Wait::Durable };
        commit_object(ctx, bucket, key, &meta, &PutCondition::None, wait).await?;
        Ok(meta)
    }
    .await;
    let meta = through::settle(ctx, bucket, key, result).await?;
    Ok(put_response(&meta))
}

/// The record of an object PutObject stores.
fn put_meta(
    ingested: super::body::Ingested,
    headers: crate::storage::meta::ObjectHeaders,
    tags: crate::storage::meta::Tags,
    acl: Option<super::acl::Acl>,
) -> ObjectMeta {
    ObjectMeta {
        size: ingested.size,
        md5: ingested.md5,
        parts: 0,
        last_modified_ms: time::now_ms(),
        headers,
        checksums: ingested.checksums,
        body: ingested.body,
        part_sizes: Vec::new(),
        checksum_type: ChecksumType::FullObject,
        tags,
        public_read: acl.is_some_and(super::acl::Acl::is_public_read),
    }
}

/// PutObject's answer: the ETag and the checksums stored.
fn put_response(meta: &ObjectMeta) -> Response {
    let mut resp = super::empty_response(StatusCode::OK);
    set_header(&mut resp, "etag", &meta.etag());
    for (algo, value) in &meta.checksums {
        set_header(&mut resp, algo.header(), &encode_value(value));
    }
    resp
}

/// Loads an object's metadata; NoSuchKey if absent.
pub async fn load_object(ctx: &ReqCtx, bucket: &str, key: &str) -> S3Result<ObjectMeta> {
    let entry = ctx.store().get(schema::object(bucket, key)).await?;
    let entry =
        entry.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchKey).resource(format!("/{bucket}/{key}")))?;
    ObjectMeta::decode(&entry.value)
        .ok_or_else(|| S3Error::internal("object record", format!("undecodable record for {bucket}/{key}")))
}

/// A byte range of an object: `start..start+len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// Offset of the first byte.
    pub start: u64,
    /// Number of bytes; at least 1 for a range parsed from a request.
    pub len: u64,
}

/// Parses a `Range` header against an object of `size` bytes. `Ok(None)`: serve the whole
/// object (no header, or a form S3 ignores, such as several ranges). Unsatisfiable ranges are
/// 416 InvalidRange.
pub fn parse_range(header: Option<&str>, size: u64) -> S3Result<Option<ByteRange>> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else { return Ok(None) };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return Ok(None) };
    let unsatisfiable = || S3Error::range_not_satisfiable(size);
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else { return Ok(None) };
        if n == 0 || size == 0 {
            return Err(unsatisfiable());
        }
        let n = n.min(size);
        ByteRange { start: size - n, len: n }
    } else {
        let Ok(start) = a.parse::<u64>() else { return Ok(None) };
        let end = if b.is_empty() {
            size.saturating_sub(1)
        } else {
            match b.parse::<u64>() {
                Ok(e) if e >= start => e.min(size.saturating_sub(1)),
                _ => return Ok(None),
            }
        };
        if start >= size {
            return Err(unsatisfiable());
        }
        ByteRange { start, len: end - start + 1 }
    };
    Ok(Some(range))
}

/// GetObject and HeadObject.
pub async fn handle_get_object(ctx: &ReqCtx, head: bool) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    if !ctx.names_current_version()? {
        return Err(S3Error::new(S3ErrorCode::NoSuchVersion).resource(format!("/{bucket}/{key}")));
    }
    // A body can be reclaimed between reading the record and opening the file when the
    // object is overwritten at that moment; the second attempt sees the new record.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut meta = load_object(ctx, bucket, key).await?;
        if matches!(&meta.body, BodyRef::Upstream(ub) if ub.headers_pending) {
            meta = through::fill_headers(ctx, bucket, key, meta).await?;
        }
        // Let in by the object's ACL: the record read now must still be public (an
        // overwrite since the grant was checked may have made it private).
        if ctx.object_acl_grant && !meta.public_read {
            return Err(S3Error::new(S3ErrorCode::AccessDenied).resource(format!("/{bucket}/{key}")));
        }
        match conditional::check_get(&ctx.headers, &meta) {
            Ok(()) => {}
            Err(e) if e.code == S3ErrorCode::NotModified => return Ok(not_modified(ctx, &meta)),
            Err(e) => return Err(e),
        }
        let (range, part_number) = select_range(ctx, &meta)?;
        let (start, len) = range.map_or((0, meta.size), |r| (r.start, r.len));
        let mut resp = if head || len == 0 {
            Response::new(Body::empty())
        } else if let BodyRef::Inline(data) = &meta.body {
            // In memory already: a body of exact size, which holds no in-flight slot while
            // it is sent (`hold_until_sent`).
            let slice = usize::try_from(start)
                .ok()
                .zip(start.checked_add(len).and_then(|end| usize::try_from(end).ok()))
                .and_then(|(from, to)| data.get(from..to));
            match slice {
                Some(bytes) => Response::new(Body::from(bytes.to_vec())),
                None => return Err(S3Error::internal("inline body", "shorter than its metadata")),
            }
        } else if let BodyRef::Upstream(ub) = &meta.body {
            match through::read_body(ctx, bucket, key, ub, start, len, range.is_none()).await {
                Ok(body) => Response::new(body),
                // Replaced or deleted upstream behind the index: repair the record, read again.
                Err(e)
                    if matches!(e.code, S3ErrorCode::PreconditionFailed | S3ErrorCode::NoSuchKey)
                        && attempts < 3 =>
                {
                    if let Some(up) = through::upstream(ctx) {
                        through::repair_key(ctx.store(), &up, bucket, key).await?;
                    }
                    continue;
                }
                Err(e) => return Err(e),
            }
        } else {
            match ctx.store().bodies.read_range(&meta.body, start, len).await {
                Ok(stream) => Response::new(Body::from_stream(stream)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 3 => continue,
                Err(e) => return Err(S3Error::internal("body read", e)),
            }
        };
        write_object_headers(ctx, &mut resp, &meta);
        set_header(&mut resp, "content-length", &len.to_string());
        if let Some(r) = range {
            // A stored checksum describes the whole object, not this slice of it: a client
            // that checked the slice against it would fail (AWS omits it on ranges too).
            for algo in ALL_ALGOS {
                resp.headers_mut().remove(algo.header());
            }
            resp.headers_mut().remove("x-amz-checksum-type");
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            set_header(
                &mut resp,
                "content-range",
                &format!("bytes {}-{}/{}", r.start, r.start + r.len - 1, meta.size),
            );
        }
        if part_number.is_some() && meta.parts > 0 {
            set_header(&mut resp, "x-amz-mp-parts-count", &meta.parts.to_string());
        }
        return Ok(resp);
    }
}

/// A 304 answer to a GET/HEAD: no body, and (RFC 7232 §4.1) the validators and caching
/// headers the 200 would have carried, so a cache can refresh what it holds.
fn not_modified(ctx: &ReqCtx, meta: &ObjectMeta) -> Response {
    let mut full = Response::new(Body::empty());
    write_object_headers(ctx, &mut full, meta);
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NOT_MODIFIED;
    for name in
        [http::header::ETAG, http::header::LAST_MODIFIED, http::header::CACHE_CONTROL, http::header::EXPIRES]
    {
        if let Some(v) = full.headers_mut().remove(&name) {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}

/// The byte range a GET/HEAD asks for, from `partNumber` or `Range` (not both).
fn select_range(ctx: &ReqCtx, meta: &ObjectMeta) -> S3Result<(Option<ByteRange>, Option<u32>)> {
    let Some(pn) = ctx.query.get("partNumber") else {
        return Ok((parse_range(ctx.header("range"), meta.size)?, None));
    };
    if ctx.headers.contains_key("range") {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "Cannot specify both Range header and partNumber.",
        ));
    }
    let n: u32 = pn.parse().ok().filter(|n| (1..=10_000).contains(n)).ok_or_else(|| {
        S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive",
        )
    })?;
    if meta.parts == 0 {
        // A single-part object is its own part 1.
        return if n == 1 { Ok((None, Some(1))) } else { Err(S3Error::new(S3ErrorCode::InvalidPartNumber)) };
    }
    let idx = (n - 1) as usize;
    let Some(&len) = meta.part_sizes.get(idx) else {
        return Err(S3Error::new(S3ErrorCode::InvalidPartNumber));
    };
    let start: u64 = meta.part_sizes[..idx].iter().sum();
    Ok((Some(ByteRange { start, len }), Some(n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let r = |h: &str, size| parse_range(Some(h), size).map_err(|e| e.code);
        assert_eq!(r("bytes=0-9", 100), Ok(Some(ByteRange { start: 0, len: 10 })));
        assert_eq!(r("bytes=90-", 100), Ok(Some(ByteRange { start: 90, len: 10 })));
        assert_eq!(r("bytes=-10", 100), Ok(Some(ByteRange { start: 90, len: 10 })));
        assert_eq!(r("bytes=-1000", 100), Ok(Some(ByteRange { start: 0, len: 100 })));
        assert_eq!(r("bytes=50-1000", 100), Ok(Some(ByteRange { start: 50, len: 50 })));
        assert_eq!(r("bytes=100-", 100), Err(S3ErrorCode::InvalidRange));
        assert_eq!(r("bytes=-0", 100), Err(S3ErrorCode::InvalidRange));
        assert_eq!(r("bytes=0-", 0), Err(S3ErrorCode::InvalidRange));
        assert_eq!(r("bytes=5-1", 100), Ok(None));
        assert_eq!(r("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(r("items=0-1", 100), Ok(None));
        assert_eq!(parse_range(None, 100).unwrap(), None);
    }
}

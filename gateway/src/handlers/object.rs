//! PutObject, GetObject, HeadObject, and the commit step shared by every operation that
//! stores an object (PutObject, CopyObject, CompleteMultipartUpload).

use axum::body::Body;
use axum::response::Response;
use holt_core::Condition;
use http::StatusCode;

use super::body::ingest;
use super::headers::{object_headers_from_request, write_object_headers};
use super::{conditional, set_header, ReqCtx};
use crate::checksum::encode_value;
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BodyRef, ObjectMeta};
use crate::storage::schema;
use crate::time;

/// How often a commit retries after losing a race with another writer of the same key.
const COMMIT_ATTEMPTS_MAX: usize = 16;

/// A client precondition on a write.
#[derive(Debug, Clone)]
pub enum PutCondition {
    None,
    /// `If-None-Match: *`: only if the key does not exist.
    Absent,
    /// `If-Match: <etag list>`: only if the current object's ETag matches.
    Match(String),
}

/// Reads `If-None-Match` / `If-Match` of a PutObject-like request.
pub fn put_condition(ctx: &ReqCtx) -> S3Result<PutCondition> {
    match (ctx.header("if-none-match"), ctx.header("if-match")) {
        (Some(_), Some(_)) => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "If-Match and If-None-Match together are not supported on writes.",
        )),
        (Some(v), None) if v.trim() == "*" => Ok(PutCondition::Absent),
        (Some(_), None) => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "If-None-Match on writes supports only '*'.",
        )),
        (None, Some(list)) => Ok(PutCondition::Match(list.to_owned())),
        (None, None) => Ok(PutCondition::None),
    }
}

/// Commits `meta` as the object `bucket/key`, atomically with the client's precondition, then
/// reclaims the body it replaced. On failure the new body is removed (it was never named by a
/// committed record).
pub async fn commit_object(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    meta: &ObjectMeta,
    condition: &PutCondition,
) -> S3Result<()> {
    let mut result = commit_inner(ctx, bucket, key, meta, condition).await;
    if let Ok((_, version)) = &result {
        // DeleteBucket checks emptiness before removing the bucket record; a write that
        // committed in between would be left in a deleted bucket. Whichever side looks second
        // sees the other: here the object is withdrawn, in DeleteBucket the bucket restored.
        if ctx.store().get(schema::bucket(bucket)).await?.is_none() {
            let _ = ctx.store().delete(schema::object(bucket, key), Condition::Version(*version)).await;
            result = Err(S3Error::new(S3ErrorCode::NoSuchBucket));
        }
    }
    match result.map(|(old, _)| old) {
        Ok(Some(old_body)) => {
            if old_body != meta.body {
                ctx.store().bodies.remove(&old_body).await;
            }
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => {
            ctx.store().bodies.remove(&meta.body).await;
            Err(e)
        }
    }
}

async fn commit_inner(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    meta: &ObjectMeta,
    condition: &PutCondition,
) -> S3Result<(Option<BodyRef>, holt_core::Version)> {
    let okey = schema::object(bucket, key);
    let value = meta.encode();
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        // Read the current record so that the write is conditional on exactly the version whose
        // body we will reclaim (and on the client's precondition).
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
            (_, Some(e), _) => Condition::Version(e.version),
            (_, None, _) => Condition::Absent,
        };
        match ctx.store().put(okey.clone(), value.clone(), engine_condition).await {
            Ok(version) => return Ok((old.map(|o| o.body), version)),
            // Another writer got in between our read and our write: re-evaluate.
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => continue,
            Err(e) => return Err(e),
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent writes to this key."))
}

pub async fn handle_put_object(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    let headers = object_headers_from_request(ctx)?;
    let condition = put_condition(ctx)?;
    let ingested = ingest(ctx, body, None).await?;
    let meta = ObjectMeta {
        size: ingested.size,
        md5: ingested.md5,
        parts: 0,
        last_modified_ms: time::now_ms(),
        headers,
        checksums: ingested.checksums,
        body: ingested.body,
        part_sizes: Vec::new(),
    };
    commit_object(ctx, bucket, key, &meta, &condition).await?;
    let mut resp = super::empty_response(StatusCode::OK);
    set_header(&mut resp, "etag", &meta.etag());
    for (algo, value) in &meta.checksums {
        set_header(&mut resp, algo.header(), &encode_value(value));
    }
    Ok(resp)
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
    pub start: u64,
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
    let unsatisfiable = || {
        S3Error::with_message(
            S3ErrorCode::InvalidRange,
            format!("The requested range is not satisfiable (size {size})"),
        )
    };
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
    // A body can be reclaimed between reading the record and opening the file when the
    // object is overwritten at that moment; the second attempt sees the new record.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let meta = load_object(ctx, bucket, key).await?;
        conditional::check_get(&ctx.headers, &meta)?;
        let (range, part_number) = select_range(ctx, &meta)?;
        let (start, len) = range.map_or((0, meta.size), |r| (r.start, r.len));
        let mut resp = if head || len == 0 {
            Response::new(Body::empty())
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

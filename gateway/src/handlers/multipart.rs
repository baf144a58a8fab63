//! CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload.
//!
//! Parts are bodies in the body store, each named by a `P` record. Completion concatenates the
//! listed parts into one new body (so GetObject reads one file) and records the part sizes, so
//! `partNumber` reads still work; the part records and bodies are then removed.

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use holt_core::{Batch, Condition};
use http::StatusCode;
use md5::{Digest as _, Md5};

use super::body::{ingest, read_small, COMPLETE_BODY_BYTES_MAX};
use super::headers::object_headers_from_request;
use super::object::{commit_object, put_condition};
use super::{empty_response, set_header, xml_response, ReqCtx};
use crate::checksum::{encode_value, ChecksumAlgo};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{ObjectMeta, PartMeta, UploadMeta};
use crate::storage::schema;
use crate::time;
use crate::xml::{request, response};

/// Smallest part that may be followed by another part.
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Part numbers are 1..=PART_NUMBER_MAX.
pub const PART_NUMBER_MAX: u32 = 10_000;

pub fn new_upload_id() -> String {
    let raw: [u8; 16] = rand::random();
    hex::encode(raw)
}

/// The `uploadId` query parameter, shaped like one of ours (anything else cannot exist).
pub fn upload_id(ctx: &ReqCtx) -> S3Result<&str> {
    let id = ctx.query.get("uploadId").unwrap_or("");
    if id.len() == schema::UPLOAD_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id)
    } else {
        Err(S3Error::new(S3ErrorCode::NoSuchUpload))
    }
}

pub fn part_number(ctx: &ReqCtx) -> S3Result<u32> {
    ctx.query
        .get("partNumber")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=PART_NUMBER_MAX).contains(n))
        .ok_or_else(|| {
            S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })
}

/// Loads the upload named by the request; NoSuchUpload if it does not exist.
pub async fn load_upload(ctx: &ReqCtx, bucket: &str, key: &str, id: &str) -> S3Result<UploadMeta> {
    let entry = ctx.store().get(schema::upload(bucket, key, id)).await?;
    let entry = entry.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchUpload))?;
    UploadMeta::decode(&entry.value).ok_or_else(|| S3Error::internal("upload record", "undecodable"))
}

/// Every part record of an upload, in part-number order.
pub async fn load_parts(ctx: &ReqCtx, id: &str) -> S3Result<Vec<(u32, PartMeta)>> {
    let rows = ctx.store().scan(schema::parts_prefix(id), Vec::new(), PART_NUMBER_MAX as usize).await?;
    let mut parts = Vec::with_capacity(rows.len());
    for (k, e) in rows {
        let n =
            schema::part_number_from_key(&k).ok_or_else(|| S3Error::internal("part record", "bad key"))?;
        let m = PartMeta::decode(&e.value).ok_or_else(|| S3Error::internal("part record", "undecodable"))?;
        parts.push((n, m));
    }
    Ok(parts)
}

pub async fn handle_create_multipart_upload(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    let headers = object_headers_from_request(ctx)?;
    let checksum_algo = match ctx.header("x-amz-checksum-algorithm") {
        None => None,
        Some(name) => Some(ChecksumAlgo::from_name(name).ok_or_else(|| {
            S3Error::with_message(S3ErrorCode::InvalidArgument, "Checksum algorithm provided is unsupported.")
        })?),
    };
    let id = new_upload_id();
    let meta = UploadMeta { initiated_ms: time::now_ms(), headers, checksum_algo };
    let version = ctx.store().put(schema::upload(bucket, key, &id), meta.encode(), Condition::Absent).await?;
    // See `commit_object`: a concurrent DeleteBucket must not strand the upload.
    if ctx.store().get(schema::bucket(bucket)).await?.is_none() {
        let _ = ctx.store().delete(schema::upload(bucket, key, &id), Condition::Version(version)).await;
        return Err(S3Error::new(S3ErrorCode::NoSuchBucket));
    }
    let mut resp = xml_response(response::initiate_multipart_upload(bucket, key, &id));
    if let Some(a) = checksum_algo {
        set_header(&mut resp, "x-amz-checksum-algorithm", a.name());
    }
    Ok(resp)
}

/// Records a new part body, replacing (and reclaiming) an earlier upload of the same number.
pub async fn store_part(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    id: &str,
    number: u32,
    part: &PartMeta,
) -> S3Result<()> {
    let pkey = schema::part(id, number);
    let previous = ctx.store().get(pkey.clone()).await?;
    if let Err(e) = ctx.store().put(pkey.clone(), part.encode(), Condition::None).await {
        ctx.store().bodies.remove(&part.body).await;
        return Err(e);
    }
    if let Some(prev) = previous.and_then(|e| PartMeta::decode(&e.value)) {
        if prev.body != part.body {
            ctx.store().bodies.remove(&prev.body).await;
        }
    }
    // The upload may have been completed or aborted while the body streamed in: then this
    // part belongs to nothing, so take it back out.
    if ctx.store().get(schema::upload(bucket, key, id)).await?.is_none() {
        let _ = ctx.store().delete(pkey, Condition::None).await;
        ctx.store().bodies.remove(&part.body).await;
        return Err(S3Error::new(S3ErrorCode::NoSuchUpload));
    }
    Ok(())
}

pub async fn handle_upload_part(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let number = part_number(ctx)?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    let upload = load_upload(ctx, bucket, key, id).await?;
    let ingested = ingest(ctx, body, upload.checksum_algo).await?;
    let part = PartMeta {
        size: ingested.size,
        md5: ingested.md5,
        last_modified_ms: time::now_ms(),
        checksums: ingested.checksums,
        body: ingested.body,
    };
    store_part(ctx, bucket, key, id, number, &part).await?;
    let mut resp = empty_response(StatusCode::OK);
    set_header(&mut resp, "etag", &part.etag());
    for (algo, value) in &part.checksums {
        set_header(&mut resp, algo.header(), &encode_value(value));
    }
    Ok(resp)
}

fn strip_quotes(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(s)
}

/// Removes an upload's records (one batch) and then the bodies of its parts.
async fn remove_upload(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    id: &str,
    parts: &[(u32, PartMeta)],
) -> S3Result<()> {
    let mut batch = Batch::new();
    batch.delete(schema::upload(bucket, key, id));
    for (n, _) in parts {
        batch.delete(schema::part(id, *n));
    }
    ctx.store().write_batch(batch).await?;
    for (_, p) in parts {
        ctx.store().bodies.remove(&p.body).await;
    }
    Ok(())
}

pub async fn handle_complete_multipart_upload(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    let upload = load_upload(ctx, bucket, key, id).await?;
    let condition = put_condition(ctx)?;
    let body = read_small(ctx, body, COMPLETE_BODY_BYTES_MAX).await?;
    let listed = request::parse_complete_multipart(&body)?;
    let stored = load_parts(ctx, id).await?;

    // Validate the list: strictly ascending, each part present with the same ETag, and every
    // part but the last at least 5 MiB.
    if listed.windows(2).any(|w| w[1].part_number <= w[0].part_number) {
        return Err(S3Error::new(S3ErrorCode::InvalidPartOrder));
    }
    let mut chosen: Vec<&PartMeta> = Vec::with_capacity(listed.len());
    for p in &listed {
        let part = stored
            .binary_search_by_key(&p.part_number, |(n, _)| *n)
            .ok()
            .map(|i| &stored[i].1)
            .filter(|m| hex::encode(m.md5) == strip_quotes(&p.etag).to_ascii_lowercase())
            .ok_or_else(|| S3Error::new(S3ErrorCode::InvalidPart))?;
        chosen.push(part);
    }
    if let Some((i, small)) =
        chosen.iter().enumerate().take(chosen.len() - 1).find(|(_, m)| m.size < PART_BYTES_MIN)
    {
        return Err(S3Error::with_message(
            S3ErrorCode::EntityTooSmall,
            format!(
                "Part {} is {} bytes; every part but the last must be at least 5 MiB.",
                listed[i].part_number, small.size
            ),
        ));
    }

    // Concatenate the parts into the object's body.
    let mut writer = ctx.store().bodies.writer();
    let mut md5_of_md5s = Md5::new();
    for part in &chosen {
        md5_of_md5s.update(part.md5);
        let mut stream = ctx.store().bodies.read_range(&part.body, 0, part.size).await?;
        while let Some(chunk) = stream.next().await {
            writer.write(&chunk?).await?;
        }
    }
    let size = writer.len();
    let object_body = writer.commit().await?;
    let meta = ObjectMeta {
        size,
        md5: md5_of_md5s.finalize().into(),
        parts: chosen.len() as u32,
        last_modified_ms: time::now_ms(),
        headers: upload.headers,
        checksums: Vec::new(),
        body: object_body,
        part_sizes: chosen.iter().map(|p| p.size).collect(),
    };
    commit_object(ctx, bucket, key, &meta, &condition).await?;
    remove_upload(ctx, bucket, key, id, &stored).await?;
    let location = format!("/{bucket}/{key}");
    Ok(xml_response(response::complete_multipart_upload(&location, bucket, key, &meta.etag())))
}

pub async fn handle_abort_multipart_upload(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    load_upload(ctx, bucket, key, id).await?;
    let parts = load_parts(ctx, id).await?;
    remove_upload(ctx, bucket, key, id, &parts).await?;
    Ok(empty_response(StatusCode::NO_CONTENT))
}

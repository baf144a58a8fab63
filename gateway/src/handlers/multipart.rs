//! CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload.
//!
//! Parts are bodies in the body store, each named by a `P` record. Completion concatenates the
//! listed parts into one new body (so GetObject reads one file) and records the part sizes, so
//! `partNumber` reads still work; the part records and bodies are then removed.
//!
//! Concurrency: every part write bumps the upload record's version (`store_part`), and
//! completion and abort remove the upload record only at the version they read, in the same
//! batch as the object write. So concurrent completions have exactly one winner, the others
//! answer NoSuchUpload, and no part record or body outlives its upload.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use holt_core::{Batch, BatchOp, Condition, Entry, Version};
use http::StatusCode;

use super::body::{
    ingest, ingest_to, read_small_unchecked, requested_algos, Sink, UpstreamStart, COMPLETE_BODY_BYTES_MAX,
};
use super::completion;
use super::headers::object_headers_from_request;
use super::list::url_encode;
use super::object::{put_condition, settle_commit, try_commit, Committed, PutCondition, Wait};
use super::{empty_response, set_header, through, xml_response, ReqCtx};
use crate::checksum::{encode_value, ChecksumAlgo, ChecksumType, ALL_ALGOS};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::routing;
use crate::storage::meta::{BodyRef, BucketMeta, ObjectMeta, PartMeta, UploadMeta, UpstreamBody};
use crate::storage::schema;
use crate::time;
use crate::xml::{request, response};

/// Smallest part that may be followed by another part.
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Part numbers are 1..=PART_NUMBER_MAX.
pub const PART_NUMBER_MAX: u32 = 10_000;
/// How often a part write or a completion retries after losing a race.
const COMMIT_ATTEMPTS_MAX: usize = 16;

/// A fresh upload id: 16 random bytes as 32 hex digits (`schema::UPLOAD_ID_LEN`).
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

/// The `partNumber` query parameter: 1 to 10000, else InvalidArgument.
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
    Ok(load_upload_entry(ctx, bucket, key, id).await?.0)
}

/// The upload record and its raw entry (whose version every part write bumps; see
/// `store_part`).
pub async fn load_upload_entry(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    id: &str,
) -> S3Result<(UploadMeta, Entry)> {
    let entry = ctx.store().get(schema::upload(bucket, key, id)).await?;
    let entry = entry.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchUpload))?;
    let meta =
        UploadMeta::decode(&entry.value).ok_or_else(|| S3Error::internal("upload record", "undecodable"))?;
    Ok((meta, entry))
}

/// Every part record of an upload, in part-number order, without the parts' inline bodies
/// (`PartMeta::decode_summary`): what a Complete or an Abort reads. With 10,000 inline parts
/// of 4 KiB, whole records made each of 64 concurrent Completes hold ~40 MB before it could
/// refuse a wrong ETag; summaries take ~100 bytes a part, and `completion::assemble` reads
/// the inline bodies it copies one at a time.
pub async fn load_part_summaries(ctx: &ReqCtx, id: &str) -> S3Result<Vec<(u32, PartMeta)>> {
    ctx.store().scan_map(schema::parts_prefix(id), PART_NUMBER_MAX as usize, part_summary).await
}

/// A part record as `(part number, summary)`: the body of an inline part is left out.
fn part_summary(key: &[u8], value: &[u8]) -> S3Result<(u32, PartMeta)> {
    let n = schema::part_number_from_key(key).ok_or_else(|| S3Error::internal("part record", "bad key"))?;
    let m = PartMeta::decode_summary(value).ok_or_else(|| S3Error::internal("part record", "undecodable"))?;
    Ok((n, m))
}

/// `x-amz-checksum-algorithm` and `x-amz-checksum-type` of a CreateMultipartUpload.
fn requested_checksum(ctx: &ReqCtx) -> S3Result<(Option<ChecksumAlgo>, Option<ChecksumType>)> {
    let algo = match ctx.header("x-amz-checksum-algorithm") {
        None => None,
        Some(name) => Some(ChecksumAlgo::from_name(name).ok_or_else(|| {
            S3Error::with_message(S3ErrorCode::InvalidArgument, "Checksum algorithm provided is unsupported.")
        })?),
    };
    let requested_type = match ctx.header("x-amz-checksum-type") {
        None => None,
        Some(name) => Some(ChecksumType::from_name(name).ok_or_else(|| {
            S3Error::with_message(S3ErrorCode::InvalidRequest, "Value for x-amz-checksum-type is invalid.")
        })?),
    };
    match (algo, requested_type) {
        (None, None) => Ok((None, None)),
        (None, Some(_)) => Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header.",
        )),
        (Some(a), None) => Ok((Some(a), Some(a.default_multipart_type()))),
        (Some(a), Some(t)) if a.supports(t) => Ok((Some(a), Some(t))),
        (Some(a), Some(t)) => Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            format!(
                "The {} checksum type cannot be used with the {} checksum algorithm.",
                t.name(),
                a.name()
            ),
        )),
    }
}

/// CreateMultipartUpload: records a new upload with the object's headers and its checksum
/// algorithm and type, and returns its id.
pub async fn handle_create_multipart_upload(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    let public_read = super::acl::check_acl_headers(ctx)?.is_some_and(super::acl::Acl::is_public_read);
    let headers = object_headers_from_request(ctx)?;
    let (checksum_algo, checksum_type) = requested_checksum(ctx)?;
    let tags = super::tagging::from_header(ctx)?;
    let id = new_upload_id();
    // Upstream mode: the parts go straight to an upload of the upstream's.
    let upstream = through::upstream(ctx);
    let upstream_id = match &upstream {
        Some(up) => {
            let mut sent = crate::upstream::object_header_pairs(&headers);
            sent.extend(crate::upstream::tagging_header(&tags));
            Some(up.create_multipart(bucket, key, sent).await?)
        }
        None => None,
    };
    let meta = UploadMeta {
        initiated_ms: time::now_ms(),
        headers,
        checksum_algo,
        checksum_type,
        tags,
        public_read,
        upstream_id: upstream_id.clone(),
    };
    let recorded = ctx.store().put(schema::upload(bucket, key, &id), meta.encode(), Condition::Absent).await;
    let version = match recorded {
        Ok(v) => v,
        Err(e) => {
            if let (Some(up), Some(uid)) = (&upstream, &upstream_id) {
                let _ = up.abort_multipart(bucket, key, uid).await;
            }
            return Err(e);
        }
    };
    // See `settle_commit`: a concurrent DeleteBucket must not strand the upload, nor may it
    // land in a bucket of the same name created by someone else meanwhile.
    let still_ours = ctx
        .store()
        .get(schema::bucket(bucket))
        .await?
        .and_then(|e| BucketMeta::decode(&e.value))
        .is_some_and(|m| m.owner == ctx.user);
    if !still_ours {
        let _ = ctx.store().delete(schema::upload(bucket, key, &id), Condition::Version(version)).await;
        if let (Some(up), Some(uid)) = (&upstream, &upstream_id) {
            let _ = up.abort_multipart(bucket, key, uid).await;
        }
        return Err(S3Error::new(S3ErrorCode::NoSuchBucket));
    }
    let mut resp = xml_response(response::initiate_multipart_upload(bucket, key, &id));
    if let (Some(a), Some(t)) = (checksum_algo, checksum_type) {
        set_header(&mut resp, "x-amz-checksum-algorithm", a.name());
        set_header(&mut resp, "x-amz-checksum-type", t.name());
    }
    Ok(resp)
}

/// Records a new part body, replacing (and reclaiming) an earlier upload of the same number.
///
/// Race protocol: the part record is written in one batch with a rewrite of the (immutable)
/// upload record conditional on it being present. So a part can only land in a live upload,
/// and every part write bumps the upload record's version; CompleteMultipartUpload and
/// AbortMultipartUpload delete the upload record conditional on the version they read, so a
/// part written after their read makes them re-read the parts instead of stranding it. On any
/// failure the new body is abandoned (`Store::abandon`): removed, unless the failed write may
/// still be applied.
pub async fn store_part(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    id: &str,
    number: u32,
    part: &PartMeta,
    upload_value: &[u8],
) -> S3Result<()> {
    match store_part_inner(ctx, bucket, key, id, number, part, upload_value).await {
        Ok(previous) => {
            if let Some(prev) = previous.filter(|b| *b != part.body) {
                ctx.store().reclaim(&prev).await;
            }
            Ok(())
        }
        Err(e) => {
            ctx.store().abandon(&part.body, &e).await;
            Err(e)
        }
    }
}

/// Writes the part record; returns the body of the record it replaced.
async fn store_part_inner(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    id: &str,
    number: u32,
    part: &PartMeta,
    upload_value: &[u8],
) -> S3Result<Option<BodyRef>> {
    let pkey = schema::part(id, number);
    let ukey = schema::upload(bucket, key, id);
    let value = part.encode();
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        let previous = ctx.store().get(pkey.clone()).await?;
        let mut batch = Batch::new();
        batch.put_if(
            pkey.clone(),
            value.clone(),
            previous.as_ref().map_or(Condition::Absent, |e| Condition::Version(e.version)),
        );
        batch.put_if(ukey.clone(), upload_value.to_vec(), Condition::Present);
        match ctx.store().write_batch(batch).await {
            Ok(_) => return Ok(previous.and_then(|e| PartMeta::decode(&e.value)).map(|p| p.body)),
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => {
                // Either the upload was completed or aborted while the body streamed in, or
                // another upload of the same part number won the race: look again.
                if ctx.store().get(ukey.clone()).await?.is_none() {
                    return Err(S3Error::new(S3ErrorCode::NoSuchUpload));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent uploads of this part."))
}

/// A part request may not name a checksum algorithm other than the upload's (AWS: "Checksum
/// Type mismatch"); uploads created without one accept any.
pub fn check_part_algos(ctx: &ReqCtx, upload: &UploadMeta) -> S3Result<()> {
    let Some(expected) = upload.checksum_algo else { return Ok(()) };
    if let Some(other) = requested_algos(ctx, None).into_iter().find(|a| *a != expected) {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            format!(
                "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
                expected.name(),
                other.name()
            ),
        ));
    }
    Ok(())
}

/// UploadPart: stores the body as part `partNumber`, replacing an earlier upload of that
/// number; the ETag is the part's MD5.
pub async fn handle_upload_part(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let number = part_number(ctx)?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    let (upload, entry) = load_upload_entry(ctx, bucket, key, id).await?;
    check_part_algos(ctx, &upload)?;
    let ingested = match &upload.upstream_id {
        None => ingest(ctx, body, upload.checksum_algo).await?,
        Some(uid) => {
            let up = through::upstream(ctx).ok_or_else(through::no_upstream)?;
            let number16 = u16::try_from(number).map_err(|_| S3Error::new(S3ErrorCode::InvalidArgument))?;
            let (b, k, uid) = (bucket.to_owned(), key.to_owned(), uid.clone());
            let start: UpstreamStart = Box::new(move |len, body| {
                Box::pin(async move {
                    let etag = up.upload_part(&b, &k, &uid, number16, len, body).await?;
                    Ok(UpstreamBody { etag, version_id: None, headers_pending: false })
                })
            });
            let sink = Sink::Upstream { start, before_end: None };
            ingest_to(ctx, body, upload.checksum_algo, sink).await?
        }
    };
    let part = PartMeta {
        size: ingested.size,
        md5: ingested.md5,
        last_modified_ms: time::now_ms(),
        checksums: ingested.checksums,
        body: ingested.body,
    };
    store_part(ctx, bucket, key, id, number, &part, &entry.value).await?;
    let mut resp = empty_response(StatusCode::OK);
    set_header(&mut resp, "etag", &part.etag());
    for (algo, value) in &part.checksums {
        set_header(&mut resp, algo.header(), &encode_value(value));
    }
    Ok(resp)
}

/// Deletes the upload record (only at `version`) and every part record read with it, in one
/// batch. Parts written after that read bumped the version, so the batch fails instead.
fn upload_removal(
    bucket: &str,
    key: &str,
    id: &str,
    version: Version,
    parts: &[(u32, PartMeta)],
) -> Vec<BatchOp> {
    let mut ops = vec![BatchOp::Delete {
        key: schema::upload(bucket, key, id),
        condition: Condition::Version(version),
    }];
    for (n, _) in parts {
        ops.push(BatchOp::Delete { key: schema::part(id, *n), condition: Condition::None });
    }
    ops
}

async fn reclaim_part_bodies(ctx: &ReqCtx, parts: &[(u32, PartMeta)]) {
    ctx.store().reclaim_all(parts.iter().map(|(_, p)| &p.body)).await;
}

/// CompleteMultipartUpload: joins the listed parts (ascending, each but the last at least
/// 5 MiB, ETags matching) into the object and removes the upload in the same batch.
pub async fn handle_complete_multipart_upload(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    // A completed or aborted upload is NoSuchUpload whatever the body says.
    load_upload(ctx, bucket, key, id).await?;
    let condition = put_condition(ctx)?;
    // Here `x-amz-checksum-*` headers describe the object, not this XML body.
    let body = read_small_unchecked(ctx, body, COMPLETE_BODY_BYTES_MAX).await?;
    let heavy = body.len() >= crate::HEAVY_DOCUMENT_BYTES;
    let listed =
        ctx.state.0.run_heavy(&ctx.user, heavy, move || request::parse_complete_multipart(&body)).await?;
    let heavy = heavy || listed.len() >= crate::HEAVY_PARTS;
    let listed = ctx.state.0.drop_on_heavy(heavy, Arc::new(listed));
    if listed.windows(2).any(|w| w[1].part_number <= w[0].part_number) {
        return Err(S3Error::new(S3ErrorCode::InvalidPartOrder));
    }
    let expected_object = object_checksums_sent(ctx)?;
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        let (upload, entry) = load_upload_entry(ctx, bucket, key, id).await?;
        // Reading thousands of part records and checking the list against them is heavy work
        // too (the engine reads run on the heavy-work thread, which may block).
        let (stored, choice) = if heavy {
            let (state, parts_prefix, list, algo) =
                (ctx.state.clone(), schema::parts_prefix(id), Arc::clone(&listed), upload.checksum_algo);
            ctx.state
                .0
                .run_heavy(&ctx.user, true, move || {
                    let stored =
                        state.0.store.scan_map_now(&parts_prefix, PART_NUMBER_MAX as usize, part_summary)?;
                    let choice = completion::choose_parts(&list, &stored, algo);
                    Ok((stored, choice))
                })
                .await?
        } else {
            let stored = load_part_summaries(ctx, id).await?;
            let choice = completion::choose_parts(&listed, &stored, upload.checksum_algo);
            (stored, choice)
        };
        let stored = ctx.state.0.drop_on_heavy(heavy, stored);
        let chosen = match choice {
            Ok(at) => at.iter().map(|&i| &stored[i].1).collect::<Vec<_>>(),
            // The upload and its parts were read apart: an abort or a competing completion in
            // between removes the parts first seen here. Judge the list only against parts that
            // belong to the upload as it still is.
            Err(e) => match ctx.store().get(schema::upload(bucket, key, id)).await? {
                None => return Err(S3Error::new(S3ErrorCode::NoSuchUpload)),
                Some(now) if now.version == entry.version => return Err(e),
                Some(_) => continue,
            },
        };
        if let Some(uid) = upload.upstream_id.clone() {
            return complete_upstream(
                ctx,
                bucket,
                key,
                id,
                &uid,
                &upload,
                &listed,
                &chosen,
                &expected_object,
            )
            .await;
        }
        let Some(assembled) =
            completion::assemble(ctx, &upload, id, &listed, &chosen, &expected_object).await?
        else {
            // A part body vanished: the part was replaced or the upload finished meanwhile.
            match ctx.store().get(schema::upload(bucket, key, id)).await? {
                None => return Err(S3Error::new(S3ErrorCode::NoSuchUpload)),
                Some(now) if now.version == entry.version => {
                    return Err(S3Error::internal("complete", "a part body is missing"))
                }
                Some(_) => continue,
            }
        };
        let meta = ObjectMeta {
            size: assembled.size,
            md5: assembled.md5_of_md5s,
            parts: chosen.len() as u32,
            last_modified_ms: time::now_ms(),
            headers: upload.headers,
            checksums: assembled.checksums,
            body: assembled.body,
            part_sizes: chosen.iter().map(|p| p.size).collect(),
            checksum_type: upload.checksum_type.unwrap_or(ChecksumType::FullObject),
            tags: upload.tags.clone(),
            public_read: upload.public_read,
        };
        if let Err(e) = completion::verify_object_checksums(&meta, &expected_object, &assembled.full) {
            ctx.store().discard(&meta.body).await;
            return Err(e);
        }
        let value = meta.encode();
        let removal = upload_removal(bucket, key, id, entry.version, &stored);
        // The object write and the upload removal are one batch: exactly one concurrent
        // completion wins; the others see the upload gone.
        let mut settled = None;
        for _ in 0..COMMIT_ATTEMPTS_MAX {
            match try_commit(ctx, bucket, key, &value, &condition, &removal, Wait::Durable).await {
                Ok(Committed::Done { old, version }) => {
                    settled = Some(settle_commit(ctx, bucket, key, &meta, Ok((old, version))).await);
                    break;
                }
                Ok(Committed::Conflict) => match ctx.store().get(schema::upload(bucket, key, id)).await {
                    // Only the object changed: the assembled body is still right.
                    Ok(Some(now)) if now.version == entry.version => continue,
                    Ok(_) => break,
                    Err(e) => {
                        settled = Some(settle_commit(ctx, bucket, key, &meta, Err(e)).await);
                        break;
                    }
                },
                Err(e) => {
                    settled = Some(settle_commit(ctx, bucket, key, &meta, Err(e)).await);
                    break;
                }
            }
        }
        match settled {
            Some(Ok(())) => {
                reclaim_part_bodies(ctx, &stored).await;
                let location = object_url(ctx, bucket, key);
                let shown: Vec<(ChecksumAlgo, String)> = meta.checksum_values().collect();
                return Ok(xml_response(response::complete_multipart_upload(
                    &location,
                    bucket,
                    key,
                    &meta.etag(),
                    &shown,
                    meta.checksum_type,
                )));
            }
            Some(Err(e)) => {
                if e.code == S3ErrorCode::NoSuchBucket {
                    // Committed, then withdrawn: the upload is consumed all the same.
                    reclaim_part_bodies(ctx, &stored).await;
                }
                return Err(e);
            }
            // The upload changed under us (a part was written, or it was completed or
            // aborted): our write was refused, so start over from a fresh read.
            None => ctx.store().discard(&meta.body).await,
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent changes to this upload."))
}

/// CompleteMultipartUpload of an upload held upstream: the upstream joins the parts, then the
/// object record commits with the upload's removal (under the key's lock and an intent, as
/// every upstream write; see `through`). The upstream's completion cannot be taken back, so
/// the commit is retried against fresh reads of the upload rather than started over.
#[expect(clippy::too_many_arguments, reason = "the state of one completion, read by the caller")]
async fn complete_upstream(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    id: &str,
    upstream_id: &str,
    upload: &UploadMeta,
    listed: &[crate::xml::request::CompletedPart],
    chosen: &[&PartMeta],
    expected: &[(ChecksumAlgo, Vec<u8>)],
) -> S3Result<Response> {
    let up = through::upstream(ctx).ok_or_else(through::no_upstream)?;
    let mut parts = Vec::with_capacity(chosen.len());
    for (l, p) in listed.iter().zip(chosen) {
        let BodyRef::Upstream(ub) = &p.body else {
            return Err(S3Error::internal("complete", "a part of an upstream upload is held locally"));
        };
        parts.push((l.part_number, ub.etag.clone()));
    }
    let mut conditions = Vec::new();
    for name in ["if-match", "if-none-match"] {
        if let Some(v) = ctx.header(name) {
            conditions.push((name.to_owned(), v.to_owned()));
        }
    }
    let _order = up.locks.lock(schema::object(bucket, key)).await;
    through::write_intent(ctx, bucket, key).await?;
    let result = async {
        let stored = up.complete_multipart(bucket, key, upstream_id, &parts, conditions).await?;
        let described =
            completion::describe_upstream(&up, bucket, key, stored, upload, chosen, expected).await?;
        let meta = ObjectMeta {
            size: described.size,
            md5: described.md5_of_md5s,
            parts: chosen.len() as u32,
            last_modified_ms: time::now_ms(),
            headers: upload.headers.clone(),
            checksums: described.checksums,
            body: described.body,
            part_sizes: chosen.iter().map(|p| p.size).collect(),
            checksum_type: upload.checksum_type.unwrap_or(ChecksumType::FullObject),
            tags: upload.tags.clone(),
            public_read: upload.public_read,
        };
        if let Err(e) = completion::verify_object_checksums(&meta, expected, &described.full) {
            // Too late to refuse upstream: the object there is not the one the client meant,
            // so it goes (the settle below removes its record).
            up.delete_object(bucket, key).await?;
            return Err(e);
        }
        let value = meta.encode();
        for _ in 0..COMMIT_ATTEMPTS_MAX {
            let (removal, stored) = match ctx.store().get(schema::upload(bucket, key, id)).await? {
                Some(now) => {
                    let stored = load_part_summaries(ctx, id).await?;
                    (upload_removal(bucket, key, id, now.version, &stored), stored)
                }
                None => (Vec::new(), Vec::new()),
            };
            match try_commit(ctx, bucket, key, &value, &PutCondition::None, &removal, Wait::Durable).await? {
                Committed::Done { old, version } => {
                    settle_commit(ctx, bucket, key, &meta, Ok((old, version))).await?;
                    reclaim_part_bodies(ctx, &stored).await;
                    return Ok(meta);
                }
                Committed::Conflict => continue,
            }
        }
        Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent changes to this upload."))
    }
    .await;
    let meta = through::settle(ctx, bucket, key, result).await?;
    let location = object_url(ctx, bucket, key);
    let shown: Vec<(ChecksumAlgo, String)> = meta.checksum_values().collect();
    Ok(xml_response(response::complete_multipart_upload(
        &location,
        bucket,
        key,
        &meta.etag(),
        &shown,
        meta.checksum_type,
    )))
}

/// AbortMultipartUpload: removes the upload and its parts in one batch, then their bodies.
pub async fn handle_abort_multipart_upload(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    let upload = load_upload(ctx, bucket, key, id).await?;
    if let Some(uid) = &upload.upstream_id {
        through::upstream(ctx).ok_or_else(through::no_upstream)?.abort_multipart(bucket, key, uid).await?;
    }
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        let (_, entry) = load_upload_entry(ctx, bucket, key, id).await?;
        let parts = load_part_summaries(ctx, id).await?;
        let batch = Batch { ops: upload_removal(bucket, key, id, entry.version, &parts) };
        match ctx.store().write_batch(batch).await {
            Ok(_) => {
                reclaim_part_bodies(ctx, &parts).await;
                return Ok(empty_response(StatusCode::NO_CONTENT));
            }
            // A part landed, or the upload finished, since the read: look again.
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => continue,
            Err(e) => return Err(e),
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent changes to this upload."))
}

/// The object's absolute URL for CompleteMultipartUpload's `Location`, in the scheme the
/// request came by and its addressing style (`https://host/bucket/key` or
/// `https://bucket.domain/key`), the key percent-encoded as a path. Without a Host header:
/// the path alone.
fn object_url(ctx: &ReqCtx, bucket: &str, key: &str) -> String {
    let key = url_encode(key);
    let virtual_hosted = routing::virtual_host_bucket(&ctx.headers, ctx.state.0.settings.domain.as_deref())
        .is_some_and(|b| b == bucket);
    let host = ctx.header("host").map(str::to_owned).or_else(|| ctx.uri.authority().map(|a| a.to_string()));
    let scheme = if ctx.secure { "https" } else { "http" };
    match host {
        Some(host) if virtual_hosted => format!("{scheme}://{host}/{key}"),
        Some(host) => format!("{scheme}://{host}/{bucket}/{key}"),
        None => format!("/{bucket}/{key}"),
    }
}

/// `x-amz-checksum-*` headers of a CompleteMultipartUpload: the client's checksum of the whole
/// object (full-object value, or `value-N` for a composite one), decoded.
fn object_checksums_sent(ctx: &ReqCtx) -> S3Result<Vec<(ChecksumAlgo, Vec<u8>)>> {
    let mut out = Vec::new();
    for algo in ALL_ALGOS {
        if let Some(v) = ctx.header(algo.header()) {
            // A composite value carries its part count after a dash; base64 has no dashes.
            let digest = v.split_once('-').map_or(v, |(d, _)| d);
            out.push((algo, algo.decode_value(digest)?));
        }
    }
    Ok(out)
}

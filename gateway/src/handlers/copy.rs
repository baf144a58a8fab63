//! CopyObject and UploadPartCopy.

use axum::response::Response;
use futures_util::StreamExt;
use md5::{Digest as _, Md5};
use percent_encoding::percent_decode_str;

use super::headers::{object_headers_from_request, storage_class_from_request};
use super::multipart::{check_part_algos, load_upload_entry, part_number, store_part, upload_id};
use super::object::{commit_object, load_object, put_condition, ByteRange, Wait};
use super::{check_key, conditional, load_owned_bucket, through, xml_response, ReqCtx};
use crate::checksum::{ChecksumAlgo, ChecksumType, Hasher};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BodyRef, ObjectHeaders, ObjectMeta, PartMeta, UpstreamBody};
use crate::time;
use crate::xml::response;

/// `x-amz-copy-source`: `[/]bucket/key[?versionId=null]`, URL-encoded.
pub fn parse_copy_source(value: &str) -> S3Result<(String, String)> {
    let bad = || S3Error::with_message(S3ErrorCode::InvalidArgument, "Invalid copy source.");
    let (path, query) = match value.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (value, None),
    };
    if let Some(q) = query {
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("versionId", "null")) => {}
                Some(("versionId", _)) => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::NoSuchKey,
                        "The specified version does not exist.",
                    ))
                }
                _ => return Err(bad()),
            }
        }
    }
    let decoded = percent_decode_str(path).decode_utf8().map_err(|_| bad())?;
    let decoded = decoded.strip_prefix('/').unwrap_or(&decoded);
    let (bucket, key) = decoded.split_once('/').ok_or_else(bad)?;
    if bucket.is_empty() || key.is_empty() {
        return Err(bad());
    }
    check_key(key)?;
    Ok((bucket.to_owned(), key.to_owned()))
}

/// Loads the copy source, checking ownership and the copy-source preconditions.
async fn load_source(ctx: &ReqCtx) -> S3Result<(String, String, ObjectMeta)> {
    let value = ctx.header("x-amz-copy-source").ok_or_else(|| S3Error::new(S3ErrorCode::InvalidArgument))?;
    let (bucket, key) = parse_copy_source(value)?;
    load_owned_bucket(ctx, &bucket).await?;
    let meta = load_object(ctx, &bucket, &key).await?;
    conditional::check_copy_source(&ctx.headers, &meta)?;
    Ok((bucket, key, meta))
}

/// A copied body with its MD5 and checksums.
type Copied = (BodyRef, [u8; 16], Vec<(ChecksumAlgo, Vec<u8>)>);

/// How often a copy re-reads its source after the source body vanished under it.
const SOURCE_ATTEMPTS_MAX: usize = 3;

/// Copies `range` of a source body into a new body, computing its MD5 and checksums.
/// `Ok(None)`: the source body was reclaimed between reading its record and opening it (the
/// source was overwritten or deleted); the caller reads the source record again.
async fn copy_body(
    ctx: &ReqCtx,
    source: &BodyRef,
    range: ByteRange,
    algos: &[ChecksumAlgo],
) -> S3Result<Option<Copied>> {
    let mut writer = ctx.store().bodies.writer();
    let mut md5 = Md5::new();
    let mut hashers: Vec<Hasher> = algos.iter().map(|a| Hasher::new(*a)).collect();
    // The file is open once this returns: a later unlink cannot take it away mid-copy.
    let mut stream = match ctx.store().bodies.read_range(source, range.start, range.len).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        md5.update(&chunk);
        for h in &mut hashers {
            h.update(&chunk);
        }
        writer.write(&chunk).await?;
    }
    let body = writer.commit().await?;
    let checksums = hashers.into_iter().map(|h| (h.algo(), h.finish())).collect();
    Ok(Some((body, md5.finalize().into(), checksums)))
}

fn source_vanished() -> S3Error {
    S3Error::with_message(S3ErrorCode::SlowDown, "The copy source kept changing during the copy.")
}

/// CopyObject: copies the source's bytes into a new body (metadata copied or replaced per
/// `x-amz-metadata-directive`); retried a few times if the source is overwritten mid-copy.
pub async fn handle_copy_object(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    ctx.owned_bucket().await?;
    // The copy's ACL is the request's, never the source's (as in S3): private by default.
    let public_read = super::acl::check_acl_headers(ctx)?.is_some_and(super::acl::Acl::is_public_read);
    for _ in 0..SOURCE_ATTEMPTS_MAX {
        if let Some(resp) = copy_object_once(ctx, bucket, key, public_read).await? {
            return Ok(resp);
        }
    }
    Err(source_vanished())
}

/// One CopyObject attempt; `Ok(None)` when the source changed under it.
async fn copy_object_once(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    public_read: bool,
) -> S3Result<Option<Response>> {
    let (src_bucket, src_key, src) = load_source(ctx).await?;
    let replace = match ctx.header("x-amz-metadata-directive") {
        None => false,
        Some(d) if d.eq_ignore_ascii_case("COPY") => false,
        Some(d) if d.eq_ignore_ascii_case("REPLACE") => true,
        Some(_) => {
            return Err(S3Error::with_message(S3ErrorCode::InvalidArgument, "Unknown metadata directive."))
        }
    };
    // The storage class comes from the request under either directive (absent: STANDARD), so
    // a copy onto itself that names a storage class is a change of storage class.
    let storage_class = storage_class_from_request(ctx)?;
    let same = src_bucket == bucket && src_key == key;
    if same && !replace && storage_class.is_none() {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the \
             object's metadata, storage class, website redirect location or encryption attributes.",
        ));
    }
    // Tags are copied unless `x-amz-tagging-directive: REPLACE` (then `x-amz-tagging`).
    let tags = match ctx.header("x-amz-tagging-directive") {
        None => src.tags.clone(),
        Some(d) if d.eq_ignore_ascii_case("COPY") => src.tags.clone(),
        Some(d) if d.eq_ignore_ascii_case("REPLACE") => super::tagging::from_header(ctx)?,
        Some(_) => {
            return Err(S3Error::with_message(S3ErrorCode::InvalidArgument, "Unknown tagging directive."))
        }
    };
    let headers = if replace {
        object_headers_from_request(ctx)?
    } else {
        ObjectHeaders { storage_class, ..src.headers.clone() }
    };
    let condition = put_condition(ctx)?;
    check_copy_source_size(src.size)?;
    if let BodyRef::Upstream(src_body) = &src.body {
        let upstream = Upstream { bucket: &src_bucket, key: &src_key, body: src_body };
        return copy_object_upstream(ctx, bucket, key, &src, upstream, headers, tags, public_read)
            .await
            .map(Some);
    }
    let algos: Vec<ChecksumAlgo> = src.checksums.iter().map(|(a, _)| *a).collect();
    let full = ByteRange { start: 0, len: src.size };
    let Some((body, md5, checksums)) = copy_body(ctx, &src.body, full, &algos).await? else {
        return Ok(None);
    };
    let meta = ObjectMeta {
        size: src.size,
        // A copy is a single-part object: its ETag is the MD5 of its bytes.
        md5,
        parts: 0,
        last_modified_ms: time::now_ms(),
        headers,
        checksums,
        body,
        part_sizes: Vec::new(),
        checksum_type: ChecksumType::FullObject,
        tags,
        public_read,
    };
    commit_object(ctx, bucket, key, &meta, &condition, Wait::Durable).await?;
    Ok(Some(xml_response(response::copy_result(
        "CopyObjectResult",
        &meta.etag(),
        &time::iso8601(meta.last_modified_ms),
    ))))
}

/// A copy source whose body is held upstream.
struct Upstream<'a> {
    bucket: &'a str,
    key: &'a str,
    body: &'a UpstreamBody,
}

/// CopyObject in upstream mode: the upstream copies (server-side, only while the source is
/// the version the index names), with the headers the index decided on; then the record
/// commits (under the key's lock and an intent; see `through`).
#[expect(clippy::too_many_arguments, reason = "the parts of one copy, decided by the caller")]
async fn copy_object_upstream(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    src: &ObjectMeta,
    source: Upstream<'_>,
    headers: ObjectHeaders,
    tags: crate::storage::meta::Tags,
    public_read: bool,
) -> S3Result<Response> {
    let up = through::upstream(ctx).ok_or_else(through::no_upstream)?;
    let mut sent = crate::upstream::object_header_pairs(&headers);
    // The copy's tags, as the index decided them (none: REPLACE with no header).
    sent.push(("x-amz-tagging-directive".to_owned(), "REPLACE".to_owned()));
    sent.extend(crate::upstream::tagging_header(&tags));
    for name in ["if-match", "if-none-match"] {
        if let Some(v) = ctx.header(name) {
            sent.push((name.to_owned(), v.to_owned()));
        }
    }
    let _order = up.locks.lock(crate::storage::schema::object(bucket, key)).await;
    through::write_intent(ctx, bucket, key).await?;
    let result = async {
        let from = (source.bucket, source.key, source.body.etag.as_str());
        let stored = up.copy_object(from, bucket, key, sent).await?;
        let (md5, parts) = through::md5_and_parts(&stored.etag);
        let meta = ObjectMeta {
            size: src.size,
            md5,
            parts,
            last_modified_ms: time::now_ms(),
            headers,
            // The same bytes: a full-object checksum carries over; a composite one describes
            // parts the copy does not have.
            checksums: if src.checksum_type == ChecksumType::FullObject {
                src.checksums.clone()
            } else {
                Vec::new()
            },
            body: BodyRef::Upstream(stored),
            part_sizes: Vec::new(),
            checksum_type: ChecksumType::FullObject,
            tags,
            public_read,
        };
        commit_object(ctx, bucket, key, &meta, &super::object::PutCondition::None, Wait::Durable).await?;
        Ok(meta)
    }
    .await;
    let meta = through::settle(ctx, bucket, key, result).await?;
    Ok(xml_response(response::copy_result(
        "CopyObjectResult",
        &meta.etag(),
        &time::iso8601(meta.last_modified_ms),
    )))
}

/// `x-amz-copy-source-range: bytes=first-last` (both required, inclusive, within the source).
pub fn parse_copy_range(value: Option<&str>, size: u64) -> S3Result<ByteRange> {
    let Some(v) = value else { return Ok(ByteRange { start: 0, len: size }) };
    let bad = || {
        S3Error::with_message(S3ErrorCode::InvalidArgument, "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy")
    };
    let spec = v.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let (first, last) = (a.parse::<u64>().map_err(|_| bad())?, b.parse::<u64>().map_err(|_| bad())?);
    if first > last {
        return Err(bad());
    }
    if last >= size {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRange,
            "Range specified is not valid for source object",
        ));
    }
    Ok(ByteRange { start: first, len: last - first + 1 })
}

/// UploadPartCopy: stores a part whose bytes are the source object's, or the
/// `x-amz-copy-source-range` of them.
pub async fn handle_upload_part_copy(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let number = part_number(ctx)?;
    let id = upload_id(ctx)?;
    ctx.owned_bucket().await?;
    let (upload, entry) = load_upload_entry(ctx, bucket, key, id).await?;
    check_part_algos(ctx, &upload)?;
    if let Some(uid) = &upload.upstream_id {
        if let Some(algo) = upload.checksum_algo {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!(
                    "UploadPartCopy into an upload with {} checksums is not supported in upstream mode.",
                    algo.name()
                ),
            ));
        }
        return upload_part_copy_upstream(ctx, (bucket, key, id, uid), number, &entry.value).await;
    }
    let algos: Vec<ChecksumAlgo> = upload.checksum_algo.into_iter().collect();
    let mut copied = None;
    for _ in 0..SOURCE_ATTEMPTS_MAX {
        let (_, _, src) = load_source(ctx).await?;
        let range = parse_copy_range(ctx.header("x-amz-copy-source-range"), src.size)?;
        if range.len > super::body::OBJECT_BYTES_MAX {
            return Err(S3Error::new(S3ErrorCode::EntityTooLarge));
        }
        if let Some(c) = copy_body(ctx, &src.body, range, &algos).await? {
            copied = Some((range, c));
            break;
        }
    }
    let Some((range, (body, md5, checksums))) = copied else { return Err(source_vanished()) };
    let part = PartMeta { size: range.len, md5, last_modified_ms: time::now_ms(), checksums, body };
    store_part(ctx, bucket, key, id, number, &part, &entry.value).await?;
    Ok(xml_response(response::copy_result(
        "CopyPartResult",
        &part.etag(),
        &time::iso8601(part.last_modified_ms),
    )))
}

/// UploadPartCopy into an upload held upstream: the upstream copies the range from the
/// source it holds. Checksums of the upload's algorithm cannot be computed without the bytes,
/// so an upload that asked for one refuses copied parts.
async fn upload_part_copy_upstream(
    ctx: &ReqCtx,
    (bucket, key, id, upstream_id): (&str, &str, &str, &str),
    number: u32,
    upload_value: &[u8],
) -> S3Result<Response> {
    let up = through::upstream(ctx).ok_or_else(through::no_upstream)?;
    let (src_bucket, src_key, src) = load_source(ctx).await?;
    let range = parse_copy_range(ctx.header("x-amz-copy-source-range"), src.size)?;
    if range.len > super::body::OBJECT_BYTES_MAX {
        return Err(S3Error::new(S3ErrorCode::EntityTooLarge));
    }
    let BodyRef::Upstream(src_body) = &src.body else {
        return Err(S3Error::internal("upload part copy", "a source held locally in upstream mode"));
    };
    let number16 = u16::try_from(number).map_err(|_| S3Error::new(S3ErrorCode::InvalidArgument))?;
    let etag = up
        .upload_part_copy(
            (&src_bucket, &src_key, &src_body.etag),
            (bucket, key, upstream_id, number16),
            (range.start, range.start + range.len.saturating_sub(1)),
        )
        .await?;
    let (md5, _) = through::md5_and_parts(&etag);
    let body = BodyRef::Upstream(UpstreamBody { etag, version_id: None, headers_pending: false });
    let part =
        PartMeta { size: range.len, md5, last_modified_ms: time::now_ms(), checksums: Vec::new(), body };
    store_part(ctx, bucket, key, id, number, &part, upload_value).await?;
    Ok(xml_response(response::copy_result(
        "CopyPartResult",
        &part.etag(),
        &time::iso8601(part.last_modified_ms),
    )))
}

/// CopyObject copies at most 5 GiB, as in S3 (a multipart object can be larger; copy it with
/// UploadPartCopy ranges instead).
fn check_copy_source_size(size: u64) -> S3Result<()> {
    if size > super::body::OBJECT_BYTES_MAX {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            format!(
                "The specified copy source is larger than the maximum allowable size for a copy source: {}",
                super::body::OBJECT_BYTES_MAX
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_forms() {
        assert_eq!(parse_copy_source("/b/k%20x").unwrap(), ("b".into(), "k x".into()));
        assert_eq!(parse_copy_source("b/dir/k?versionId=null").unwrap(), ("b".into(), "dir/k".into()));
        assert_eq!(parse_copy_source("b").unwrap_err().code, S3ErrorCode::InvalidArgument);
        assert_eq!(parse_copy_source("b/k?versionId=abc").unwrap_err().code, S3ErrorCode::NoSuchKey);
    }

    #[test]
    fn copy_sources_over_5_gib_are_refused() {
        assert!(check_copy_source_size(5 << 30).is_ok());
        assert_eq!(check_copy_source_size((5 << 30) + 1).unwrap_err().code, S3ErrorCode::InvalidRequest);
    }

    #[test]
    fn copy_ranges() {
        assert_eq!(parse_copy_range(Some("bytes=0-9"), 100).unwrap(), ByteRange { start: 0, len: 10 });
        assert_eq!(parse_copy_range(Some("bytes=0-100"), 100).unwrap_err().code, S3ErrorCode::InvalidRange);
        assert_eq!(parse_copy_range(Some("bytes=5-"), 100).unwrap_err().code, S3ErrorCode::InvalidArgument);
        assert_eq!(parse_copy_range(None, 7).unwrap(), ByteRange { start: 0, len: 7 });
    }
}

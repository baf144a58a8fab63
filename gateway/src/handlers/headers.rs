//! Object headers: from a request into `ObjectHeaders` (with the S3 limits), and from stored
//! metadata back onto GET/HEAD responses.

use axum::response::Response;

use super::{set_header, ReqCtx};
use crate::auth;
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{ObjectHeaders, ObjectMeta};
use crate::time;

/// Total bytes of user metadata names and values.
pub const USER_META_BYTES_MAX: usize = 2048;

const STORAGE_CLASSES: &[&str] = &[
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
    "OUTPOSTS",
    "SNOW",
    "EXPRESS_ONEZONE",
];

/// Reads the storable headers of a PutObject / CreateMultipartUpload / CopyObject(REPLACE).
pub fn object_headers_from_request(ctx: &ReqCtx) -> S3Result<ObjectHeaders> {
    let get = |name: &str| ctx.header(name).map(str::to_owned);
    let mut user_meta = Vec::new();
    let mut meta_bytes = 0usize;
    for (name, value) in &ctx.headers {
        if let Some(short) = name.as_str().strip_prefix("x-amz-meta-") {
            let value = match value.to_str() {
                Ok(v) => v.to_owned(),
                // Non-ASCII header bytes: keep them if they are UTF-8 (clients that send raw
                // UTF-8 read it back the same way).
                Err(_) => String::from_utf8(value.as_bytes().to_vec()).map_err(|_| {
                    S3Error::with_message(S3ErrorCode::InvalidArgument, "metadata is not UTF-8")
                })?,
            };
            meta_bytes += short.len() + value.len();
            user_meta.push((short.to_owned(), value));
        }
    }
    if meta_bytes > USER_META_BYTES_MAX {
        return Err(S3Error::with_message(
            S3ErrorCode::MetadataTooLarge,
            format!("Your metadata headers are {meta_bytes} bytes; the limit is {USER_META_BYTES_MAX}."),
        ));
    }
    let storage_class = storage_class_from_request(ctx)?;
    Ok(ObjectHeaders {
        content_type: get("content-type"),
        content_encoding: ctx.header("content-encoding").and_then(auth::stored_content_encoding),
        content_language: get("content-language"),
        content_disposition: get("content-disposition"),
        cache_control: get("cache-control"),
        expires: get("expires"),
        user_meta,
        storage_class,
    })
}

/// `x-amz-storage-class` of a write (None: STANDARD). CopyObject takes it from the request
/// whatever its metadata directive.
pub fn storage_class_from_request(ctx: &ReqCtx) -> S3Result<Option<String>> {
    match ctx.header("x-amz-storage-class") {
        None => Ok(None),
        Some(c) if STORAGE_CLASSES.contains(&c) => Ok(Some(c.to_owned())),
        Some(_) => Err(S3Error::new(S3ErrorCode::InvalidStorageClass)),
    }
}

/// Writes the stored headers of `meta` onto a GET/HEAD response, honouring the
/// `response-*` query overrides.
pub fn write_object_headers(ctx: &ReqCtx, resp: &mut Response, meta: &ObjectMeta) {
    let h = &meta.headers;
    let pick = |query: &str, stored: &Option<String>| {
        ctx.query.get(query).map(str::to_owned).or_else(|| stored.clone())
    };
    let content_type =
        pick("response-content-type", &h.content_type).unwrap_or_else(|| "binary/octet-stream".into());
    set_header(resp, "content-type", &content_type);
    for (name, query, stored) in [
        ("content-encoding", "response-content-encoding", &h.content_encoding),
        ("content-language", "response-content-language", &h.content_language),
        ("content-disposition", "response-content-disposition", &h.content_disposition),
        ("cache-control", "response-cache-control", &h.cache_control),
        ("expires", "response-expires", &h.expires),
    ] {
        if let Some(v) = pick(query, stored) {
            set_header(resp, name, &v);
        }
    }
    set_header(resp, "etag", &meta.etag());
    set_header(resp, "last-modified", &time::http_date(meta.last_modified_ms));
    set_header(resp, "accept-ranges", "bytes");
    for (k, v) in &h.user_meta {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(format!("x-amz-meta-{k}").as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    if let Some(class) = h.storage_class.as_deref().filter(|c| *c != "STANDARD") {
        set_header(resp, "x-amz-storage-class", class);
    }
    if !meta.tags.is_empty() {
        set_header(resp, "x-amz-tagging-count", itoa::Buffer::new().format(meta.tags.len()));
    }
    if ctx.header("x-amz-checksum-mode").is_some_and(|m| m.eq_ignore_ascii_case("ENABLED")) {
        for (algo, value) in meta.checksum_values() {
            set_header(resp, algo.header(), &value);
        }
        if !meta.checksums.is_empty() {
            set_header(resp, "x-amz-checksum-type", meta.checksum_type.name());
        }
    }
}

//! `GET /bucket?usage&prefix=P&delimiter=D`: how many objects and bytes lie under a prefix,
//! and, with a delimiter, under each common prefix below it (a `du --max-depth=1` for S3).
//! An extension of ours, signed and owner-checked like ListObjectsV2, with the same paging:
//! `max-keys` (at most 1,000), `continuation-token`, `start-after`, `encoding-type=url`.
//!
//! Every figure comes from `Db::usage`, which reads the counts the engine's nodes and frames
//! carry: the cost of an answer is the prefix's depth, not the objects under it. A page is
//! one engine listing under the prefix (keys and common prefixes, as ListObjectsV2 would
//! list them), of which the common prefixes are shown with their counts; a page may hold
//! fewer than `max-keys` prefixes while more follow.
//!
//! Multipart uploads in progress under the prefix are counted apart: how many, and the bytes
//! of the parts they hold so far (a count of the uploads, then a `Db::usage` per upload).
//!
//! ```xml
//! <UsageResult>
//!   <Name>bucket</Name><Prefix>logs/</Prefix><Delimiter>/</Delimiter><MaxKeys>1000</MaxKeys>
//!   <Objects>120</Objects><Bytes>52428800</Bytes>
//!   <UploadsInProgress><Uploads>1</Uploads><Bytes>5242880</Bytes></UploadsInProgress>
//!   <IsTruncated>false</IsTruncated>
//!   <CommonPrefixes><Prefix>logs/2026/</Prefix><Objects>100</Objects><Bytes>41943040</Bytes></CommonPrefixes>
//! </UsageResult>
//! ```

use axum::response::Response;
use holt_core::ListEntry;

use super::list::{parse_encoding, parse_max, resume_position, url_encode, MAX_KEYS_LIMIT};
use super::{xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::schema;
use crate::storage::token::{TokenKind, TokenScope};
use crate::xml::{is_xml_safe, XmlWriter};

/// Uploads in progress under a prefix whose parts are counted; past it, `<Bytes>` of
/// `UploadsInProgress` counts these only and `<BytesComplete>` says so.
const UPLOADS_COUNTED_MAX: usize = 10_000;

/// A common prefix of the page with its objects and bytes.
struct Rolled {
    name: String,
    objects: u64,
    bytes: u64,
}

/// `GET /bucket?usage`.
pub async fn handle_get_bucket_usage(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    ctx.owned_bucket().await?;
    if super::through::importing(ctx, bucket).await? {
        return Err(S3Error::with_message(
            S3ErrorCode::ServiceUnavailable,
            "the bucket's index is still being imported from the upstream store: usage is not known yet",
        ));
    }
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-keys", MAX_KEYS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let start_after = ctx.query.get("start-after").unwrap_or("");
    let token_echo = ctx.query.get("continuation-token");
    let scope = TokenScope {
        kind: TokenKind::Usage,
        bucket,
        prefix: prefix.as_bytes(),
        delimiter: delimiter.as_bytes(),
        url_encoding: requested,
    };
    let resume = resume_position(ctx, &scope, token_echo.filter(|t| !t.is_empty()))?;
    let from = resume.as_deref().unwrap_or(start_after);

    let store = ctx.store();
    let ns = schema::objects_prefix(bucket);
    let under = [&ns[..], prefix.as_bytes()].concat();
    let total = store.usage(&under)?;
    let (uploads, upload_bytes, uploads_complete) = uploads_under(ctx, bucket, prefix)?;

    let mut rolled = Vec::new();
    let mut truncated = false;
    let mut last = String::new();
    if !delimiter.is_empty() && max > 0 {
        let start = if from.is_empty() { Vec::new() } else { [&ns[..], from.as_bytes()].concat() };
        let request = holt_core::ListRequest {
            prefix: &under,
            delimiter: delimiter.as_bytes(),
            start_after: &start,
            limit: max,
            with_values: false,
        };
        truncated = store.list_with_usage(&request, |entry, usage| {
            let full = match entry {
                ListEntry::Key { key, .. } => key,
                ListEntry::CommonPrefix(p) => p,
            };
            let name = full
                .strip_prefix(&ns[..])
                .and_then(|n| std::str::from_utf8(n).ok())
                .ok_or_else(|| S3Error::internal("usage", "a listed name outside its bucket"))?;
            last.clear();
            last.push_str(name);
            if let Some(usage) = usage {
                rolled.push(Rolled { name: name.to_owned(), objects: usage.keys, bytes: usage.weight });
            }
            Ok(())
        })?;
    }
    let next_token = (truncated && !last.is_empty()).then(|| store.tokens.encode(&scope, last.as_bytes()));

    let url = requested
        || ![prefix, delimiter, start_after].iter().all(|t| is_xml_safe(t))
        || !rolled.iter().all(|r| is_xml_safe(&r.name));
    let enc = |s: &str| if url { url_encode(s) } else { s.to_owned() };
    let mut w = XmlWriter::new();
    w.open_root("UsageResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc(prefix));
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc(delimiter));
    }
    w.elem_num("MaxKeys", max as u64);
    if url {
        w.elem("EncodingType", "url");
    }
    w.elem_num("Objects", total.keys);
    w.elem_num("Bytes", total.weight);
    w.open("UploadsInProgress");
    w.elem_num("Uploads", uploads);
    w.elem_num("Bytes", upload_bytes);
    if !uploads_complete {
        w.elem_bool("BytesComplete", false);
    }
    w.close("UploadsInProgress");
    w.elem_bool("IsTruncated", truncated);
    w.elem_opt("ContinuationToken", token_echo);
    w.elem_opt("NextContinuationToken", next_token.as_deref());
    if !start_after.is_empty() {
        w.elem("StartAfter", &enc(start_after));
    }
    for r in &rolled {
        w.open("CommonPrefixes");
        w.elem("Prefix", &enc(&r.name));
        w.elem_num("Objects", r.objects);
        w.elem_num("Bytes", r.bytes);
        w.close("CommonPrefixes");
    }
    w.close("UsageResult");
    Ok(xml_response(w.finish()))
}

/// The uploads in progress under `prefix` in `bucket`, the bytes of the parts they hold
/// (counted for the first `UPLOADS_COUNTED_MAX`), and whether those bytes count them all.
fn uploads_under(ctx: &ReqCtx, bucket: &str, prefix: &str) -> S3Result<(u64, u64, bool)> {
    let store = ctx.store();
    let ns = schema::uploads_prefix(bucket);
    let under = [&ns[..], prefix.as_bytes()].concat();
    let uploads = store.usage(&under)?.keys;
    if uploads == 0 {
        return Ok((0, 0, true));
    }
    let mut ids = Vec::new();
    let request = holt_core::ListRequest {
        prefix: &under,
        delimiter: b"",
        start_after: b"",
        limit: UPLOADS_COUNTED_MAX,
        with_values: false,
    };
    let more = store.list_with(&request, |entry| {
        if let ListEntry::Key { key, .. } = entry {
            let suffix = key.get(ns.len()..).unwrap_or_default();
            if let Some((_, id)) = schema::split_upload_suffix(suffix) {
                ids.push(id.to_owned());
            }
        }
        Ok(())
    })?;
    let mut bytes = 0u64;
    for id in &ids {
        bytes = bytes.saturating_add(store.usage(&schema::parts_prefix(id))?.weight);
    }
    Ok((uploads, bytes, !more))
}

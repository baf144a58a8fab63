//! ListParts and ListMultipartUploads.

use axum::response::Response;

use super::list::{parse_encoding, parse_max, url_encode};
use super::multipart::{load_upload, upload_id};
use super::{xml_response, ReqCtx};
use crate::checksum::encode_value;
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{PartMeta, UploadMeta};
use crate::storage::schema;
use crate::time;
use crate::xml::{is_xml_safe, response::owner_elem, XmlWriter};

const MAX_PARTS_LIMIT: usize = 1000;
const MAX_UPLOADS_LIMIT: usize = 1000;
/// Upload records read per engine scan while rolling up common prefixes.
const UPLOAD_SCAN_PAGE: usize = 1000;

/// ListParts: one page of an upload's parts in number order, from `part-number-marker`.
pub async fn handle_list_parts(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    let owner = ctx.owned_bucket().await?.owner;
    let owner = ctx.shown_owner(&owner).to_owned();
    let upload = load_upload(ctx, bucket, key, id).await?;
    let max = parse_max(ctx, "max-parts", MAX_PARTS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let marker: u32 = match ctx.query.get("part-number-marker").filter(|m| !m.is_empty()) {
        None => 0,
        Some(m) => m.parse().map_err(|_| {
            S3Error::with_message(S3ErrorCode::InvalidArgument, "part-number-marker must be an integer")
        })?,
    };
    let start_after = if marker == 0 { Vec::new() } else { schema::part(id, marker) };
    let rows = if max == 0 {
        Vec::new()
    } else {
        ctx.store().scan(schema::parts_prefix(id), start_after, max + 1).await?
    };
    let truncated = rows.len() > max;
    let mut parts = Vec::new();
    for (k, e) in rows.into_iter().take(max) {
        let n =
            schema::part_number_from_key(&k).ok_or_else(|| S3Error::internal("part record", "bad key"))?;
        let m = PartMeta::decode(&e.value).ok_or_else(|| S3Error::internal("part record", "undecodable"))?;
        parts.push((n, m));
    }
    // As in the listings: encoded when asked, or when XML 1.0 cannot carry the key, and then
    // always marked, so a client decodes exactly what was encoded.
    let url = requested || !is_xml_safe(key);
    let key_text = if url { url_encode(key) } else { key.to_owned() };
    let mut w = XmlWriter::new();
    w.open_root("ListPartsResult");
    w.elem("Bucket", bucket);
    w.elem("Key", &key_text);
    w.elem("UploadId", id);
    if url {
        w.elem("EncodingType", "url");
    }
    w.elem_num("PartNumberMarker", u64::from(marker));
    if let Some((n, _)) = parts.last() {
        w.elem_num("NextPartNumberMarker", u64::from(*n));
    }
    w.elem_num("MaxParts", max as u64);
    w.elem_bool("IsTruncated", truncated);
    for (n, p) in &parts {
        w.open("Part");
        w.elem_num("PartNumber", u64::from(*n));
        w.elem("LastModified", &time::iso8601(p.last_modified_ms));
        w.elem("ETag", &p.etag());
        w.elem_num("Size", p.size);
        for (algo, v) in &p.checksums {
            w.elem(&format!("Checksum{}", algo.name()), &encode_value(v));
        }
        w.close("Part");
    }
    w.open("Initiator");
    w.elem("ID", &owner);
    w.elem("DisplayName", &owner);
    w.close("Initiator");
    owner_elem(&mut w, &owner);
    w.elem("StorageClass", upload.headers.storage_class.as_deref().unwrap_or("STANDARD"));
    if let Some(a) = upload.checksum_algo {
        w.elem("ChecksumAlgorithm", a.name());
    }
    if let Some(t) = upload.checksum_type {
        w.elem("ChecksumType", t.name());
    }
    w.close("ListPartsResult");
    Ok(xml_response(w.finish()))
}

/// The exclusive resume point of a listing given its markers (AWS semantics):
/// - no key-marker: the start;
/// - key-marker rolls up to common prefix P under the delimiter: past every record starting
///   with P (a prefix not greater than the marker is never listed again, and no key byte is
///   0xFF, so `P 0xFF` is above all of them);
/// - key-marker K and upload-id-marker I: after the record (K, I), so K's later uploads follow;
/// - key-marker K alone: after K's last possible upload record, so keys that merely start
///   with K (`Kb`) still follow.
fn resume_after(bucket: &str, prefix: &str, delimiter: &str, key_marker: &str, id_marker: &str) -> Vec<u8> {
    if key_marker.is_empty() {
        return Vec::new();
    }
    let rolled_up = (!delimiter.is_empty())
        .then(|| key_marker.strip_prefix(prefix))
        .flatten()
        .and_then(|rest| rest.find(delimiter))
        .map(|i| &key_marker[..prefix.len() + i + delimiter.len()]);
    if let Some(p) = rolled_up {
        let mut a = schema::uploads_prefix(bucket);
        a.extend_from_slice(p.as_bytes());
        a.push(0xFF);
        return a;
    }
    if id_marker.is_empty() {
        schema::last_upload_of_key(bucket, key_marker)
    } else {
        schema::upload(bucket, key_marker, id_marker)
    }
}

/// Whether the engine's own delimiter rollup can list the upload records: they are
/// `key \0 upload-id` (the id lower-case hex), so a delimiter without a 0 byte or a lower-case
/// hex digit first occurs in the key part, and the engine rolls a whole subtree of records up
/// without reading it. Other delimiters (and prefixes holding a 0 byte) take the scan below.
fn engine_rollup(prefix: &str, delimiter: &str) -> bool {
    !delimiter.is_empty()
        && !prefix.contains('\0')
        && !delimiter.bytes().any(|b| b == 0 || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Up to `max` uploads and common prefixes after `after`, rolled up by the engine; returns
/// whether more follow.
fn list_rolled_up(
    ctx: &ReqCtx,
    ns: &[u8],
    scan_prefix: &[u8],
    delimiter: &str,
    after: &[u8],
    max: usize,
    entries: &mut Vec<UploadEntry>,
) -> S3Result<bool> {
    let request = holt_core::ListRequest {
        prefix: scan_prefix,
        delimiter: delimiter.as_bytes(),
        start_after: after,
        limit: max,
        with_values: true,
    };
    ctx.store().list_with(&request, |entry| {
        match entry {
            holt_core::ListEntry::CommonPrefix(p) => {
                entries.push(UploadEntry::Prefix(utf8_key(p.get(ns.len()..).unwrap_or_default())?))
            }
            holt_core::ListEntry::Key { key, value, .. } => {
                let (key, id) = upload_key(key.get(ns.len()..).unwrap_or_default())?;
                entries.push(UploadEntry::Upload { key, id: id.to_owned(), meta: upload_meta(value)? });
            }
        }
        Ok(())
    })
}

/// The object key and upload id of an upload record's key (its bucket part stripped).
fn upload_key(rest: &[u8]) -> S3Result<(String, &str)> {
    let (key, id) =
        schema::split_upload_suffix(rest).ok_or_else(|| S3Error::internal("upload record", "bad key"))?;
    Ok((utf8_key(key)?, id))
}

fn utf8_key(bytes: &[u8]) -> S3Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| S3Error::internal("upload record", "key not UTF-8"))
}

fn upload_meta(value: &[u8]) -> S3Result<Box<UploadMeta>> {
    UploadMeta::decode(value).map(Box::new).ok_or_else(|| S3Error::internal("upload record", "undecodable"))
}

enum UploadEntry {
    Upload { key: String, id: String, meta: Box<UploadMeta> },
    Prefix(String),
}

/// ListMultipartUploads. Upload records are `key \0 upload-id`, so the delimiter rollup is done
/// here over the key part: after emitting common prefix P the scan resumes past every record
/// starting with P (no key byte is 0xFF, so `P 0xFF` is above all of them) without reading
/// them.
pub async fn handle_list_multipart_uploads(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let owner = ctx.owned_bucket().await?.owner;
    let owner = ctx.shown_owner(&owner).to_owned();
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-uploads", MAX_UPLOADS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let key_marker = ctx.query.get("key-marker").unwrap_or("");
    let id_marker = ctx.query.get("upload-id-marker").unwrap_or("");
    let ns = schema::uploads_prefix(bucket);
    let mut scan_prefix = ns.clone();
    scan_prefix.extend_from_slice(prefix.as_bytes());
    let mut after = resume_after(bucket, prefix, delimiter, key_marker, id_marker);
    let mut entries: Vec<UploadEntry> = Vec::new();
    let mut truncated = false;
    let by_engine = engine_rollup(prefix, delimiter);
    if max > 0 && by_engine {
        truncated = list_rolled_up(ctx, &ns, &scan_prefix, delimiter, &after, max, &mut entries)?;
    }
    'outer: loop {
        if max == 0 || by_engine {
            break;
        }
        let rows = ctx.store().scan(scan_prefix.clone(), after.clone(), UPLOAD_SCAN_PAGE).await?;
        let full_page = rows.len() == UPLOAD_SCAN_PAGE;
        let mut skipped_to: Option<Vec<u8>> = None;
        for (k, e) in &rows {
            if let Some(skip) = &skipped_to {
                if k <= skip {
                    continue;
                }
            }
            let (key, id) = upload_key(&k[ns.len()..])?;
            // The scan matched the record's bytes, not its key: a prefix running past the key
            // (`a\0...` against key `a`, whose record is `a \0 upload-id`) matches records of
            // shorter keys. They are not under the prefix; step over them.
            if !key.starts_with(prefix) {
                after = k.clone();
                continue;
            }
            if entries.len() == max {
                truncated = true;
                break 'outer;
            }
            let rolled = (!delimiter.is_empty())
                .then(|| {
                    key[prefix.len()..]
                        .find(delimiter)
                        .map(|i| key[..prefix.len() + i + delimiter.len()].to_owned())
                })
                .flatten();
            match rolled {
                Some(p) => {
                    let mut skip = ns.clone();
                    skip.extend_from_slice(p.as_bytes());
                    skip.push(0xFF);
                    after = skip.clone();
                    skipped_to = Some(skip);
                    entries.push(UploadEntry::Prefix(p));
                }
                None => {
                    after = k.clone();
                    entries.push(UploadEntry::Upload {
                        key,
                        id: id.to_owned(),
                        meta: upload_meta(&e.value)?,
                    });
                }
            }
        }
        if !full_page {
            break;
        }
    }
    let url = requested
        || !is_xml_safe(prefix)
        || !is_xml_safe(delimiter)
        || entries.iter().any(|e| match e {
            UploadEntry::Upload { key, .. } => !is_xml_safe(key),
            UploadEntry::Prefix(p) => !is_xml_safe(p),
        });
    let f = |s: &str| if url { url_encode(s) } else { s.to_owned() };
    let mut w = XmlWriter::new();
    w.open_root("ListMultipartUploadsResult");
    w.elem("Bucket", bucket);
    w.elem("KeyMarker", &f(key_marker));
    w.elem("UploadIdMarker", id_marker);
    if truncated {
        match entries.last() {
            Some(UploadEntry::Upload { key, id, .. }) => {
                w.elem("NextKeyMarker", &f(key));
                w.elem("NextUploadIdMarker", id);
            }
            Some(UploadEntry::Prefix(p)) => {
                w.elem("NextKeyMarker", &f(p));
                w.elem("NextUploadIdMarker", "");
            }
            None => {}
        }
    }
    if !delimiter.is_empty() {
        w.elem("Delimiter", &f(delimiter));
    }
    w.elem("Prefix", &f(prefix));
    w.elem_num("MaxUploads", max as u64);
    if url {
        w.elem("EncodingType", "url");
    }
    w.elem_bool("IsTruncated", truncated);
    for e in &entries {
        if let UploadEntry::Upload { key, id, meta } = e {
            w.open("Upload");
            w.elem("Key", &f(key));
            w.elem("UploadId", id);
            w.open("Initiator");
            w.elem("ID", &owner);
            w.elem("DisplayName", &owner);
            w.close("Initiator");
            owner_elem(&mut w, &owner);
            w.elem("StorageClass", meta.headers.storage_class.as_deref().unwrap_or("STANDARD"));
            w.elem("Initiated", &time::iso8601(meta.initiated_ms));
            w.close("Upload");
        }
    }
    for e in &entries {
        if let UploadEntry::Prefix(p) = e {
            w.open("CommonPrefixes");
            w.elem("Prefix", &f(p));
            w.close("CommonPrefixes");
        }
    }
    w.close("ListMultipartUploadsResult");
    Ok(xml_response(w.finish()))
}

//! ListObjectsV2, ListObjects (v1) and ListObjectVersions. Every page is ONE `Db::list` call
//! under `objects_prefix(bucket) + prefix` with the client's delimiter: the engine rolls keys
//! up into common prefixes and skips the keys under each one, so a page costs O(entries), not
//! O(keys under the prefixes).

use axum::response::Response;
use holt_core::ListEntry;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{ListedObject, ObjectMeta};
use crate::storage::schema;
use crate::storage::token::{TokenKind, TokenScope};
use crate::time;
use crate::xml::{is_xml_safe, response::owner_elem, XmlWriter};

/// Largest page (and the default): larger `max-keys` values are clamped.
pub const MAX_KEYS_LIMIT: usize = 1000;

/// `encoding-type=url`: everything but unreserved characters and `/` is percent-encoded
/// (so `+` is `%2B` and a space `%20`).
const URL_ENCODE_SET: &AsciiSet =
    &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');

pub fn url_encode(s: &str) -> String {
    utf8_percent_encode(s, URL_ENCODE_SET).to_string()
}

/// Parses `max-keys` (or `max-parts`, `max-uploads`): absent → the limit; negative or not a
/// number → InvalidArgument; above the limit → the limit.
pub fn parse_max(ctx: &ReqCtx, name: &str, limit: usize) -> S3Result<usize> {
    match ctx.query.get(name) {
        None => Ok(limit),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) if n >= 0 => Ok(usize::try_from(n).unwrap_or(limit).min(limit)),
            _ => Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                format!("Provided {name} not an integer or within integer range"),
            )),
        },
    }
}

/// Whether `encoding-type=url` was requested; other values are InvalidArgument.
pub fn parse_encoding(ctx: &ReqCtx) -> S3Result<bool> {
    match ctx.query.get("encoding-type") {
        None | Some("") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("url") => Ok(true),
        Some(_) => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "Invalid Encoding Method specified in Request",
        )),
    }
}

/// One listed entry, namespace stripped.
enum Entry {
    Key { key: String, meta: ListedObject },
    Prefix(String),
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Entry::Key { key, .. } => key,
            Entry::Prefix(p) => p,
        }
    }
}

struct Page {
    entries: Vec<Entry>,
    truncated: bool,
}

impl Page {
    /// About the size of this page's listing document: ~260 bytes of markup per object
    /// entry besides its key, ~50 per common prefix.
    fn document_bytes(&self) -> usize {
        let entries: usize = self
            .entries
            .iter()
            .map(|e| match e {
                Entry::Key { key, .. } => 260 + key.len(),
                Entry::Prefix(p) => 50 + p.len(),
            })
            .sum();
        1024 + entries
    }
}

/// One engine call: entries of `bucket` under `prefix`, rolled up at `delimiter`, strictly
/// after `start_after`, at most `max` of them.
async fn list_page(
    ctx: &ReqCtx,
    bucket: &str,
    prefix: &str,
    delimiter: &str,
    start_after: &str,
    max: usize,
) -> S3Result<Page> {
    if max == 0 {
        return Ok(Page { entries: Vec::new(), truncated: false });
    }
    let ns = schema::objects_prefix(bucket);
    let mut full_prefix = ns.clone();
    full_prefix.extend_from_slice(prefix.as_bytes());
    let full_start = if start_after.is_empty() {
        Vec::new()
    } else {
        let mut s = ns.clone();
        s.extend_from_slice(start_after.as_bytes());
        s
    };
    let request = holt_core::ListRequest {
        prefix: &full_prefix,
        delimiter: delimiter.as_bytes(),
        start_after: &full_start,
        limit: max,
        with_values: true,
    };
    let mut entries = Vec::with_capacity(max.min(1000));
    let strip = |k: &[u8]| -> S3Result<String> {
        let rest = k
            .strip_prefix(ns.as_slice())
            .ok_or_else(|| S3Error::internal("list", "entry outside its bucket"))?;
        String::from_utf8(rest.to_vec()).map_err(|_| S3Error::internal("list", "stored key is not UTF-8"))
    };
    let truncated = ctx.store().list_with(&request, |entry| {
        entries.push(match entry {
            ListEntry::Key { key, value, .. } => {
                let meta = ObjectMeta::decode_listed(value)
                    .ok_or_else(|| S3Error::internal("list", "undecodable object record"))?;
                Entry::Key { key: strip(key)?, meta }
            }
            ListEntry::CommonPrefix(p) => Entry::Prefix(strip(p)?),
        });
        Ok(())
    })?;
    Ok(Page { entries, truncated })
}

/// Text fields of a listing document, encoded or not.
struct Enc {
    url: bool,
}

impl Enc {
    fn f(&self, s: &str) -> String {
        if self.url {
            url_encode(s)
        } else {
            s.to_owned()
        }
    }

    /// `<name>s</name>`, `s` url-encoded when the page is, escaped otherwise (no copy of `s`
    /// on the way when it is not encoded).
    fn elem(&self, w: &mut XmlWriter, name: &str, s: &str) {
        if self.url {
            w.elem(name, &url_encode(s));
        } else {
            w.elem(name, s);
        }
    }
}

/// Decides whether to url-encode: when the client asked, or when some text could not be
/// carried by XML 1.0 otherwise (control characters in keys). Returns whether it applies.
fn must_encode(requested: bool, texts: &[&str], page: &Page) -> bool {
    requested || !texts.iter().all(|t| is_xml_safe(t)) || !page.entries.iter().all(|e| is_xml_safe(e.name()))
}

fn write_contents(w: &mut XmlWriter, enc: &Enc, page: &Page, owner: Option<&str>, versions: bool) {
    let mut dates = time::Iso8601Writer::default();
    for e in &page.entries {
        if let Entry::Key { key, meta } = e {
            w.open(if versions { "Version" } else { "Contents" });
            enc.elem(w, "Key", key);
            if versions {
                w.elem("VersionId", "null");
                w.elem_bool("IsLatest", true);
            }
            w.elem_with("LastModified", |out| dates.write(out, meta.last_modified_ms));
            w.elem_with("ETag", |out| meta.etag_xml_into(out));
            w.elem_num("Size", meta.size);
            if let Some(o) = owner {
                owner_elem(w, o);
            }
            if let Some(algo) = meta.checksum_algo {
                w.elem("ChecksumAlgorithm", algo.name());
            }
            w.elem("StorageClass", meta.storage_class.as_deref().unwrap_or("STANDARD"));
            w.close(if versions { "Version" } else { "Contents" });
        }
    }
    for e in &page.entries {
        if let Entry::Prefix(p) = e {
            w.open("CommonPrefixes");
            enc.elem(w, "Prefix", p);
            w.close("CommonPrefixes");
        }
    }
}

pub async fn handle_list_objects_v2(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let owner = ctx.owned_bucket().await?.owner;
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-keys", MAX_KEYS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let start_after = ctx.query.get("start-after").unwrap_or("");
    let token_in = ctx.query.get("continuation-token").filter(|t| !t.is_empty());
    let scope = TokenScope {
        kind: TokenKind::ListObjectsV2,
        bucket,
        prefix: prefix.as_bytes(),
        delimiter: delimiter.as_bytes(),
        url_encoding: requested,
    };
    let resume = match token_in {
        Some(t) => {
            let raw = ctx.store().tokens.decode(&scope, t)?;
            Some(String::from_utf8(raw).map_err(|_| S3Error::new(S3ErrorCode::InvalidArgument))?)
        }
        None => None,
    };
    // A continuation token overrides start-after (both are echoed).
    let from = resume.as_deref().unwrap_or(start_after);
    let page = list_page(ctx, bucket, prefix, delimiter, from, max).await?;
    let enc = Enc { url: must_encode(requested, &[prefix, delimiter, start_after], &page) };
    let next_token = match (page.truncated, page.entries.last()) {
        (true, Some(last)) => Some(ctx.store().tokens.encode(&scope, last.name().as_bytes())),
        _ => None,
    };
    let fetch_owner = ctx.query.get("fetch-owner").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let mut w = XmlWriter::with_capacity(page.document_bytes());
    w.open_root("ListBucketResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc.f(prefix));
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc.f(delimiter));
    }
    w.elem_num("MaxKeys", max as u64);
    if enc.url {
        w.elem("EncodingType", "url");
    }
    w.elem_num("KeyCount", page.entries.len() as u64);
    w.elem_bool("IsTruncated", page.truncated);
    if let Some(t) = token_in {
        w.elem("ContinuationToken", t);
    }
    w.elem_opt("NextContinuationToken", next_token.as_deref());
    if !start_after.is_empty() {
        w.elem("StartAfter", &enc.f(start_after));
    }
    write_contents(&mut w, &enc, &page, fetch_owner.then_some(owner.as_str()), false);
    w.close("ListBucketResult");
    Ok(xml_response(w.finish()))
}

pub async fn handle_list_objects(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let owner = ctx.owned_bucket().await?.owner;
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-keys", MAX_KEYS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let marker = ctx.query.get("marker").unwrap_or("");
    let page = list_page(ctx, bucket, prefix, delimiter, marker, max).await?;
    let enc = Enc { url: must_encode(requested, &[prefix, delimiter, marker], &page) };
    let mut w = XmlWriter::with_capacity(page.document_bytes());
    w.open_root("ListBucketResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc.f(prefix));
    w.elem("Marker", &enc.f(marker));
    // NextMarker only with a delimiter (without one, clients resume from the last key).
    if page.truncated && !delimiter.is_empty() {
        if let Some(last) = page.entries.last() {
            w.elem("NextMarker", &enc.f(last.name()));
        }
    }
    w.elem_num("MaxKeys", max as u64);
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc.f(delimiter));
    }
    if enc.url {
        w.elem("EncodingType", "url");
    }
    w.elem_bool("IsTruncated", page.truncated);
    write_contents(&mut w, &enc, &page, Some(&owner), false);
    w.close("ListBucketResult");
    Ok(xml_response(w.finish()))
}

/// ListObjectVersions of an unversioned bucket: every object is its own latest, `null`
/// version.
pub async fn handle_list_object_versions(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let owner = ctx.owned_bucket().await?.owner;
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-keys", MAX_KEYS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let key_marker = ctx.query.get("key-marker").unwrap_or("");
    let version_marker = ctx.query.get("version-id-marker").unwrap_or("");
    // The only version of each key is `null`: a marker naming it resumes after the key.
    let page = list_page(ctx, bucket, prefix, delimiter, key_marker, max).await?;
    let enc = Enc { url: must_encode(requested, &[prefix, delimiter, key_marker], &page) };
    let mut w = XmlWriter::with_capacity(page.document_bytes());
    w.open_root("ListVersionsResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc.f(prefix));
    w.elem("KeyMarker", &enc.f(key_marker));
    w.elem("VersionIdMarker", version_marker);
    if page.truncated {
        if let Some(last) = page.entries.last() {
            w.elem("NextKeyMarker", &enc.f(last.name()));
            w.elem("NextVersionIdMarker", "null");
        }
    }
    w.elem_num("MaxKeys", max as u64);
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc.f(delimiter));
    }
    if enc.url {
        w.elem("EncodingType", "url");
    }
    w.elem_bool("IsTruncated", page.truncated);
    write_contents(&mut w, &enc, &page, Some(&owner), true);
    w.close("ListVersionsResult");
    Ok(xml_response(w.finish()))
}

#[cfg(test)]
mod tests {
    use super::url_encode;

    #[test]
    fn url_encoding_rules() {
        assert_eq!(url_encode("a b+c/d~e_f-g.h"), "a%20b%2Bc/d~e_f-g.h");
        assert_eq!(url_encode("é\u{1}%"), "%C3%A9%01%25");
    }
}

//! ListObjectsV2, ListObjects (v1) and ListObjectVersions. Every page is ONE `Db::list` call
//! under `objects_prefix(bucket) + prefix` with the client's delimiter: the engine rolls keys
//! up into common prefixes and skips the keys under each one, so a page costs O(entries), not
//! O(keys under the prefixes). Each entry is written as XML while the engine visits it (no
//! per-entry allocation), and the document goes out as the pieces it was written in.

use axum::response::Response;
use holt_core::ListEntry;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{xml_response_chunks, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{ListedObject, ObjectMeta};
use crate::storage::schema;
use crate::storage::token::{TokenKind, TokenScope};
use crate::time;
use crate::xml::{is_plain_text, is_xml_safe, response::owner_elem, XmlWriter};

/// Largest page (and the default): larger `max-keys` values are clamped.
pub const MAX_KEYS_LIMIT: usize = 1000;

/// `encoding-type=url`: everything but unreserved characters and `/` is percent-encoded
/// (so `+` is `%2B` and a space `%20`).
const URL_ENCODE_SET: &AsciiSet =
    &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');

/// Percent-encodes `s` as `encoding-type=url` asks: all but unreserved characters and `/`.
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

/// The name a continuation token `token` (bound to `scope`) resumes after; `None` without
/// one. A token of another listing, or tampered with, is 400 InvalidArgument.
pub fn resume_position(
    ctx: &ReqCtx,
    scope: &TokenScope<'_>,
    token: Option<&str>,
) -> S3Result<Option<String>> {
    let Some(t) = token else { return Ok(None) };
    let raw = ctx.store().tokens.decode(scope, t)?;
    String::from_utf8(raw).map(Some).map_err(|_| S3Error::new(S3ErrorCode::InvalidArgument))
}

/// What an entry of a page is written as.
#[derive(Clone, Copy)]
struct Style<'a> {
    /// `<Version>` elements (ListObjectVersions) instead of `<Contents>`.
    versions: bool,
    /// The owner shown in every entry, if the request asked for it.
    owner: Option<&'a str>,
}

/// One page, rendered as it is listed: the entries' elements in the order the document
/// shows them (objects, then common prefixes), to follow the document's header unjoined.
struct Rendered {
    contents: Vec<u8>,
    prefixes: Vec<u8>,
    count: usize,
    truncated: bool,
    /// The last entry's name (namespace stripped), raw.
    last: String,
    /// Whether names and prefixes were url-encoded (`EncodingType` must say so).
    url: bool,
}

/// About the size of a page's entries: ~260 bytes of markup per object entry besides its key.
fn contents_capacity(max: usize) -> usize {
    max.min(MAX_KEYS_LIMIT) * 320
}

/// One page asked for: entries of `bucket` under `prefix`, rolled up at `delimiter`,
/// strictly after `start_after`, at most `max` of them, each written in `style`.
struct PageRequest<'a> {
    bucket: &'a str,
    prefix: &'a str,
    delimiter: &'a str,
    start_after: &'a str,
    max: usize,
    style: Style<'a>,
}

/// One engine call for `req`, each entry written as it comes. `None` when a name cannot be
/// carried by XML 1.0 and `url` is off: the caller renders the page again url-encoded (S3
/// encodes the whole page then, and says so).
fn render_page(ctx: &ReqCtx, req: &PageRequest<'_>, url: bool) -> S3Result<Option<Rendered>> {
    let PageRequest { bucket, prefix, delimiter, start_after, max, style } = *req;
    let mut page = Rendered {
        contents: Vec::new(),
        prefixes: Vec::new(),
        count: 0,
        truncated: false,
        last: String::new(),
        url,
    };
    if max == 0 {
        return Ok(Some(page));
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
    let mut refused = false;
    let mut dates = time::Iso8601Writer::default();
    let mut contents = XmlWriter::fragment(contents_capacity(max));
    let mut prefixes = XmlWriter::fragment(0);
    let mut last = Vec::new();
    let mut count = 0;
    let truncated = ctx.store().list_with(&request, |entry| {
        let (key, value) = match entry {
            ListEntry::Key { key, value, .. } => (key, Some(value)),
            ListEntry::CommonPrefix(key) => (key, None),
        };
        let name = key
            .strip_prefix(ns.as_slice())
            .ok_or_else(|| S3Error::internal("list", "entry outside its bucket"))?;
        let carried = match value {
            Some(value) => {
                let meta = ObjectMeta::decode_listed(value)
                    .ok_or_else(|| S3Error::internal("list", "undecodable object record"))?;
                write_entry(&mut contents, url, name, &meta, style, &mut dates)?
            }
            None => {
                prefixes.raw(b"<CommonPrefixes><Prefix>");
                let carried = write_name(&mut prefixes, url, name)?;
                prefixes.raw(b"</Prefix></CommonPrefixes>");
                carried
            }
        };
        if !carried {
            refused = true;
            return Err(S3Error::internal("list", "a name XML cannot carry"));
        }
        last.clear();
        last.extend_from_slice(name);
        count += 1;
        Ok(())
    });
    if refused {
        return Ok(None);
    }
    page.truncated = truncated?;
    page.contents = contents.finish();
    page.prefixes = prefixes.finish();
    // Every name written was checked to be UTF-8.
    page.last = String::from_utf8(last).map_err(|_| S3Error::internal("list", "stored key is not UTF-8"))?;
    page.count = count;
    Ok(Some(page))
}

/// Writes a listed `name` (a key without its bucket's namespace) as the page's encoding asks.
/// `Ok(false)` when XML 1.0 cannot carry it and the page is not url-encoded (nothing is
/// written then). Most names are plain text and are copied as they are, in one pass.
fn write_name(w: &mut XmlWriter, url: bool, name: &[u8]) -> S3Result<bool> {
    if !url && is_plain_text(name) {
        w.raw(name);
        return Ok(true);
    }
    let name = std::str::from_utf8(name).map_err(|_| S3Error::internal("list", "stored key is not UTF-8"))?;
    if url {
        w.text(&url_encode(name));
    } else if is_xml_safe(name) {
        w.text(name);
    } else {
        return Ok(false);
    }
    Ok(true)
}

/// Lists and renders one page: url-encoded when the client asked (`requested`), when the
/// request's own texts (`texts`, echoed in the header) need it, or when a listed name does.
fn list_rendered(ctx: &ReqCtx, req: &PageRequest<'_>, requested: bool, texts: &[&str]) -> S3Result<Rendered> {
    let url = requested || !texts.iter().all(|t| is_xml_safe(t));
    if let Some(page) = render_page(ctx, req, url)? {
        return Ok(page);
    }
    render_page(ctx, req, true)?.ok_or_else(|| S3Error::internal("list", "a url-encoded page refused a name"))
}

/// Text fields of the document's header: url-encoded when the page is.
fn enc(url: bool, s: &str) -> std::borrow::Cow<'_, str> {
    if url {
        url_encode(s).into()
    } else {
        s.into()
    }
}

/// One object entry. The markup between the variable fields is written as one constant run
/// each (a page writes a thousand entries: an element at a time, a copy call per tag name,
/// took 14% of the gateway's CPU under load).
/// `Ok(false)` as `write_name`.
fn write_entry(
    w: &mut XmlWriter,
    url: bool,
    name: &[u8],
    meta: &ListedObject,
    style: Style<'_>,
    dates: &mut time::Iso8601Writer,
) -> S3Result<bool> {
    w.raw(if style.versions { b"<Version><Key>" } else { b"<Contents><Key>" });
    if !write_name(w, url, name)? {
        return Ok(false);
    }
    if style.versions {
        w.raw(b"</Key><VersionId>null</VersionId><IsLatest>true</IsLatest><LastModified>");
    } else {
        w.raw(b"</Key><LastModified>");
    }
    dates.write(w.buffer(), meta.last_modified_ms);
    w.raw(b"</LastModified><ETag>");
    meta.etag_xml_into(w.buffer());
    w.raw(b"</ETag><Size>");
    w.raw(itoa::Buffer::new().format(meta.size).as_bytes());
    w.raw(b"</Size>");
    if let Some(o) = style.owner {
        owner_elem(w, o);
    }
    if let Some(algo) = meta.checksum_algo {
        w.elem("ChecksumAlgorithm", algo.name());
    }
    match &meta.storage_class {
        None => w.raw(b"<StorageClass>STANDARD</StorageClass>"),
        Some(class) => w.elem("StorageClass", class),
    }
    w.raw(if style.versions { b"</Version>" } else { b"</Contents>" });
    Ok(true)
}

/// The response: the header `w` wrote, the page's entries, and the root's closing tag, sent
/// as they are (a 1,000-entry page is ~220 KB: joining would copy it once more).
fn page_response(w: XmlWriter, page: Rendered, root: &str) -> Response {
    let close = format!("</{root}>");
    xml_response_chunks(vec![w.finish(), page.contents, page.prefixes, close.into_bytes()])
}

/// ListObjectsV2: one page of keys and common prefixes, resumed by an opaque continuation
/// token bound to the request's bucket, prefix, delimiter and encoding.
pub async fn handle_list_objects_v2(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let owner = ctx.owned_bucket().await?.owner;
    if super::through::importing(ctx, bucket).await? {
        return super::through::list_from_upstream(ctx, bucket).await;
    }
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-keys", MAX_KEYS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let start_after = ctx.query.get("start-after").unwrap_or("");
    // An empty token starts at the beginning, and is echoed as sent.
    let token_echo = ctx.query.get("continuation-token");
    let token_in = token_echo.filter(|t| !t.is_empty());
    let scope = TokenScope {
        kind: TokenKind::ListObjectsV2,
        bucket,
        prefix: prefix.as_bytes(),
        delimiter: delimiter.as_bytes(),
        url_encoding: requested,
    };
    let resume = resume_position(ctx, &scope, token_in)?;
    // A continuation token overrides start-after (both are echoed).
    let from = resume.as_deref().unwrap_or(start_after);
    let fetch_owner = ctx.query.get("fetch-owner").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let style = Style { versions: false, owner: fetch_owner.then_some(ctx.shown_owner(&owner)) };
    let texts = [prefix, delimiter, start_after];
    let req = PageRequest { bucket, prefix, delimiter, start_after: from, max, style };
    let page = list_rendered(ctx, &req, requested, &texts)?;
    let next_token = match (page.truncated, page.count) {
        (true, 1..) => Some(ctx.store().tokens.encode(&scope, page.last.as_bytes())),
        _ => None,
    };
    let url = page.url;
    let mut w = XmlWriter::new();
    w.open_root("ListBucketResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc(url, prefix));
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc(url, delimiter));
    }
    w.elem_num("MaxKeys", max as u64);
    if url {
        w.elem("EncodingType", "url");
    }
    w.elem_num("KeyCount", page.count as u64);
    w.elem_bool("IsTruncated", page.truncated);
    if let Some(t) = token_echo {
        w.elem("ContinuationToken", t);
    }
    w.elem_opt("NextContinuationToken", next_token.as_deref());
    if !start_after.is_empty() {
        w.elem("StartAfter", &enc(url, start_after));
    }
    Ok(page_response(w, page, "ListBucketResult"))
}

/// ListObjects (V1): one page resumed from `marker`; `NextMarker` is sent only with a
/// delimiter.
pub async fn handle_list_objects(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.bucket()?;
    let owner = ctx.owned_bucket().await?.owner;
    if super::through::importing(ctx, bucket).await? {
        return super::through::list_from_upstream(ctx, bucket).await;
    }
    let prefix = ctx.query.get("prefix").unwrap_or("");
    let delimiter = ctx.query.get("delimiter").unwrap_or("");
    let max = parse_max(ctx, "max-keys", MAX_KEYS_LIMIT)?;
    let requested = parse_encoding(ctx)?;
    let marker = ctx.query.get("marker").unwrap_or("");
    let style = Style { versions: false, owner: Some(ctx.shown_owner(&owner)) };
    let texts = [prefix, delimiter, marker];
    let req = PageRequest { bucket, prefix, delimiter, start_after: marker, max, style };
    let page = list_rendered(ctx, &req, requested, &texts)?;
    let url = page.url;
    let mut w = XmlWriter::new();
    w.open_root("ListBucketResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc(url, prefix));
    w.elem("Marker", &enc(url, marker));
    // NextMarker only with a delimiter (without one, clients resume from the last key).
    if page.truncated && !delimiter.is_empty() && page.count > 0 {
        w.elem("NextMarker", &enc(url, &page.last));
    }
    w.elem_num("MaxKeys", max as u64);
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc(url, delimiter));
    }
    if url {
        w.elem("EncodingType", "url");
    }
    w.elem_bool("IsTruncated", page.truncated);
    Ok(page_response(w, page, "ListBucketResult"))
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
    let style = Style { versions: true, owner: Some(ctx.shown_owner(&owner)) };
    let texts = [prefix, delimiter, key_marker];
    let req = PageRequest { bucket, prefix, delimiter, start_after: key_marker, max, style };
    let page = list_rendered(ctx, &req, requested, &texts)?;
    let url = page.url;
    let mut w = XmlWriter::new();
    w.open_root("ListVersionsResult");
    w.elem("Name", bucket);
    w.elem("Prefix", &enc(url, prefix));
    w.elem("KeyMarker", &enc(url, key_marker));
    w.elem("VersionIdMarker", version_marker);
    if page.truncated && page.count > 0 {
        w.elem("NextKeyMarker", &enc(url, &page.last));
        w.elem("NextVersionIdMarker", "null");
    }
    w.elem_num("MaxKeys", max as u64);
    if !delimiter.is_empty() {
        w.elem("Delimiter", &enc(url, delimiter));
    }
    if url {
        w.elem("EncodingType", "url");
    }
    w.elem_bool("IsTruncated", page.truncated);
    Ok(page_response(w, page, "ListVersionsResult"))
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

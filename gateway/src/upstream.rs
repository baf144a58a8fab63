//! Upstream mode: the S3-compatible object store (AWS S3, MinIO, Ceph RGW) in front of which
//! the gateway runs. Bodies and writes go there; holt-core keeps the index that answers
//! listings and HEAD. This module is the client: it signs each call with rusty-s3 (presigned
//! URLs, `UNSIGNED-PAYLOAD`, so a body streams without being hashed first), sends it with
//! hyper, and maps the upstream's answers onto S3 errors of our own.
//!
//! Errors: an upstream that cannot be reached, answers 5xx, or refuses the gateway's own
//! credentials is 503 ServiceUnavailable to the client (the write was not acknowledged, and
//! retrying is right); the upstream's 4xx answers that describe the request (NoSuchKey,
//! PreconditionFailed, InvalidRange, EntityTooSmall, InvalidPart, BadDigest, NoSuchUpload)
//! are passed on as themselves.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rusty_s3::actions::{
    AbortMultipartUpload, CompleteMultipartUpload, CreateBucket, CreateMultipartUpload, DeleteBucket,
    DeleteObject, DeleteObjects, DeleteObjectsResponse, GetObject, HeadBucket, HeadObject, ListObjectsV2,
    ListObjectsV2Response, ObjectIdentifier, PutObject, UploadPart,
};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{ObjectHeaders, Tags, UpstreamBody};

/// How long each presigned request stays valid: it is sent at once, so this only bounds how
/// long a slow body upload may take to start.
const SIGNED_FOR: Duration = Duration::from_secs(15 * 60);
/// Connecting to the upstream gives up after this long (503).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// An error document from the upstream is read up to this many bytes.
const ERROR_BODY_MAX: usize = 64 << 10;
/// A response document (listing page, multipart result) is read up to this many bytes.
const DOCUMENT_MAX: usize = 16 << 20;
/// DeleteObject requests in flight for one DeleteObjects an upstream refused.
const DELETE_EACH_AT_ONCE: usize = 16;

/// A request body sent upstream: streamed object and part bodies, or small documents.
pub type UpBody = BoxBody<Bytes, std::io::Error>;

/// Where the upstream is and how to reach it.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Endpoint URL, `http://` or `https://`, e.g. `https://s3.eu-west-1.amazonaws.com`.
    pub endpoint: url::Url,
    /// The region requests to the upstream are signed for.
    pub region: String,
    /// The gateway's access key at the upstream.
    pub access_key: String,
    /// Its secret key.
    pub secret_key: String,
    /// Path-style addressing (`endpoint/bucket/key`, as MinIO and Ceph default to) rather
    /// than virtual-hosted style (`bucket.endpoint/key`).
    pub path_style: bool,
    /// Local bucket name → upstream bucket name; a bucket not named here has the same name
    /// upstream.
    pub buckets: HashMap<String, String>,
}

/// What an upstream HEAD reports of an object.
#[derive(Debug, Clone)]
pub struct HeadInfo {
    /// Body length.
    pub size: u64,
    /// The ETag, without quotes.
    pub etag: String,
    /// `Last-Modified`, in ms since the epoch (0 if the upstream sent none).
    pub last_modified_ms: u64,
    /// Content headers and user metadata.
    pub headers: ObjectHeaders,
    /// `x-amz-version-id`, when versioned.
    pub version_id: Option<String>,
    /// `x-amz-tagging-count`, when the upstream reports it on HEAD (MinIO and Ceph do, with
    /// a count above zero; AWS S3 reports it on GET only): `None` when absent.
    pub tag_count: Option<u32>,
}

/// The client of the upstream object store.
pub struct Upstream {
    config: UpstreamConfig,
    credentials: Credentials,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, UpBody>,
    /// Orders this gateway's writes of one key: see `KeyLocks`.
    pub locks: KeyLocks,
    /// Per bucket being imported (or imported since start-up): keys indexed, and whether the
    /// import has finished. For `/metrics` and the log.
    pub imports: parking_lot::Mutex<std::collections::BTreeMap<String, ImportStats>>,
    /// Keys repaired from event notifications.
    pub events_applied: std::sync::atomic::AtomicU64,
    /// Records the index changed to follow the upstream (repairs that found a difference).
    pub repairs: std::sync::atomic::AtomicU64,
    /// Imported records whose content headers the background fill fetched.
    pub headers_filled: std::sync::atomic::AtomicU64,
    /// Set once the upstream refused DeleteObjects (Google Cloud Storage's XML API has no
    /// multi-object delete): deletes of many keys go one key at a time from then on.
    one_by_one_deletes: std::sync::atomic::AtomicBool,
    /// Imports and the reconciler: stopped at shutdown, so the engine can close (an import
    /// resumes from its cursor at the next start).
    background: parking_lot::Mutex<Vec<tokio::task::AbortHandle>>,
}

/// The progress of one bucket's import since start-up, for `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ImportStats {
    /// Keys listed and indexed so far.
    pub objects: u64,
    /// Prefixes this run of the import lists (after a restart, those left), with those a
    /// split of one added.
    pub prefixes: u64,
    /// Of those, the prefixes listed to their end.
    pub prefixes_done: u64,
    /// The import has finished.
    pub done: bool,
}

/// One lock per object key being written through this gateway. A write holds its key's lock
/// from before its upstream request until its index record has committed, so two writes of
/// one key reach the index in the order the upstream applied them. (Writes through other
/// gateways, or straight to the upstream, are ordered by the repairs instead.)
#[derive(Default)]
pub struct KeyLocks(parking_lot::Mutex<HashMap<Vec<u8>, Weak<tokio::sync::Mutex<()>>>>);

/// Past this many entries, `KeyLocks` drops those nobody holds (when the count reaches a
/// power of two, so the sweep costs O(1) a lock on average).
const KEY_LOCKS_SWEEP_FROM: usize = 1024;

impl KeyLocks {
    /// Waits for `key`'s lock.
    pub async fn lock(&self, key: Vec<u8>) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.0.lock();
            match map.get(&key).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    if map.len() >= KEY_LOCKS_SWEEP_FROM && map.len().is_power_of_two() {
                        map.retain(|_, w| w.strong_count() > 0);
                    }
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key, Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("endpoint", &self.config.endpoint.as_str()).finish_non_exhaustive()
    }
}

/// Builds a body from bytes.
pub fn full_body(data: impl Into<Bytes>) -> UpBody {
    Full::new(data.into()).map_err(|never| match never {}).boxed()
}

fn empty_body() -> UpBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

fn unavailable(what: impl std::fmt::Display) -> S3Error {
    S3Error::with_message(S3ErrorCode::ServiceUnavailable, format!("The upstream object store {what}."))
}

/// The text of the first `<tag>…</tag>` in `doc` (error documents and small results).
fn xml_text(doc: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = doc.find(&open)? + open.len();
    let end = doc[start..].find("</")? + start;
    Some(xml_unescape(&doc[start..end]))
}

/// The text of an XML character-data run: the five named entities and numeric references.
pub(crate) fn xml_unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let Some(end) = tail.find(';') else { break };
        let entity = &tail[1..end];
        let ch = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) => out.push(c),
            None => out.push_str(&tail[..=end]),
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Unquotes an ETag header value.
fn bare_etag(v: &str) -> String {
    v.trim().trim_matches('"').to_owned()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// `x-amz-version-id`, unless absent or `null` (an unversioned bucket).
fn version_id(h: &HeaderMap) -> Option<String> {
    header(h, "x-amz-version-id").filter(|v| !v.is_empty() && *v != "null").map(str::to_owned)
}

/// `x-amz-tagging` for a write that gives its object `tags` (URL-encoded `k1=v1&k2=v2`);
/// `None` for no tags.
pub fn tagging_header(tags: &Tags) -> Option<(String, String)> {
    let encode = |text: &str| crate::auth::canonical::uri_encode(text.as_bytes(), false);
    let pairs: Vec<String> = tags.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect();
    (!tags.is_empty()).then(|| ("x-amz-tagging".to_owned(), pairs.join("&")))
}

/// The content headers and user metadata of an object, as request headers to send upstream.
pub fn object_header_pairs(h: &ObjectHeaders) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in [
        ("content-type", &h.content_type),
        ("content-encoding", &h.content_encoding),
        ("content-language", &h.content_language),
        ("content-disposition", &h.content_disposition),
        ("cache-control", &h.cache_control),
        ("expires", &h.expires),
    ] {
        if let Some(v) = value {
            out.push((name.to_owned(), v.clone()));
        }
    }
    for (k, v) in &h.user_meta {
        out.push((format!("x-amz-meta-{k}"), v.clone()));
    }
    out
}

/// The content headers and user metadata an upstream response carries.
fn object_headers_from(h: &HeaderMap) -> ObjectHeaders {
    let get = |n: &str| header(h, n).map(str::to_owned);
    let mut user_meta = Vec::new();
    for (name, value) in h {
        if let (Some(k), Ok(v)) = (name.as_str().strip_prefix("x-amz-meta-"), value.to_str()) {
            user_meta.push((k.to_owned(), v.to_owned()));
        }
    }
    ObjectHeaders {
        content_type: get("content-type"),
        content_encoding: get("content-encoding"),
        content_language: get("content-language"),
        content_disposition: get("content-disposition"),
        cache_control: get("cache-control"),
        expires: get("expires"),
        user_meta,
        storage_class: None,
    }
}

impl Upstream {
    /// Keeps `task` to be stopped by [`Upstream::stop_background`].
    pub fn track(&self, task: tokio::task::AbortHandle) {
        let mut tasks = self.background.lock();
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Stops every tracked background task (at shutdown).
    pub fn stop_background(&self) {
        for task in self.background.lock().drain(..) {
            task.abort();
        }
    }

    /// A client for `config`'s endpoint; nothing is sent until the first call.
    pub fn new(config: UpstreamConfig) -> std::io::Result<Upstream> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        let credentials = Credentials::new(config.access_key.clone(), config.secret_key.clone());
        Ok(Upstream {
            config,
            credentials,
            client,
            locks: KeyLocks::default(),
            imports: Default::default(),
            events_applied: Default::default(),
            repairs: Default::default(),
            headers_filled: Default::default(),
            one_by_one_deletes: Default::default(),
            background: Default::default(),
        })
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// The upstream bucket a local bucket maps to.
    pub fn bucket_name<'a>(&'a self, local: &'a str) -> &'a str {
        self.config.buckets.get(local).map_or(local, String::as_str)
    }

    fn bucket(&self, local: &str) -> S3Result<Bucket> {
        let style = if self.config.path_style { UrlStyle::Path } else { UrlStyle::VirtualHost };
        Bucket::new(
            self.config.endpoint.clone(),
            style,
            self.bucket_name(local).to_owned(),
            self.config.region.clone(),
        )
        .map_err(|e| unavailable(format_args!("cannot address bucket {local}: {e}")))
    }

    /// Sends one signed request; non-2xx answers become errors (`status_error`) unless
    /// `accept` lists them.
    async fn send(
        &self,
        method: Method,
        url: url::Url,
        headers: &[(String, String)],
        body: UpBody,
        accept: &[StatusCode],
    ) -> S3Result<http::Response<Incoming>> {
        let mut req = http::Request::builder().method(method).uri(url.as_str());
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(body).map_err(|e| unavailable(format_args!("request could not be built: {e}")))?;
        let resp = self.client.request(req).await.map_err(|e| {
            tracing::warn!(error = %e, "upstream request failed");
            unavailable("cannot be reached")
        })?;
        if resp.status().is_success() || accept.contains(&resp.status()) {
            return Ok(resp);
        }
        Err(status_error(resp).await)
    }

    /// Reads a whole response document (bounded).
    async fn document(resp: http::Response<Incoming>) -> S3Result<String> {
        let body = http_body_util::Limited::new(resp.into_body(), DOCUMENT_MAX);
        let bytes = body.collect().await.map_err(|_| unavailable("sent an unreadable response"))?.to_bytes();
        String::from_utf8(bytes.to_vec()).map_err(|_| unavailable("sent a response that is not UTF-8"))
    }

    /// GETs an unsigned URL (an SNS subscription confirmation); 2xx is success.
    pub async fn fetch(&self, url: &str) -> S3Result<()> {
        let url = url::Url::parse(url).map_err(|e| unavailable(format_args!("bad URL: {e}")))?;
        self.send(Method::GET, url, &[], empty_body(), &[]).await.map(drop)
    }

    /// Appends the upstream-mode series to a `/metrics` page.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        use std::sync::atomic::Ordering::Relaxed;
        let _ = write!(
            out,
            "# HELP holt_upstream_events_applied_total Keys repaired from upstream event notifications.\n\
             # TYPE holt_upstream_events_applied_total counter\nholt_upstream_events_applied_total {}\n\
             # HELP holt_upstream_repairs_total Index records changed to follow the upstream.\n\
             # TYPE holt_upstream_repairs_total counter\nholt_upstream_repairs_total {}\n\
             # HELP holt_upstream_headers_filled_total Imported records whose content headers were fetched in the background.\n\
             # TYPE holt_upstream_headers_filled_total counter\nholt_upstream_headers_filled_total {}\n",
            self.events_applied.load(Relaxed),
            self.repairs.load(Relaxed),
            self.headers_filled.load(Relaxed)
        );
        let imports = self.imports.lock();
        if imports.is_empty() {
            return;
        }
        type Series = (&'static str, &'static str, fn(&ImportStats) -> u64);
        let series: [Series; 4] = [
            ("holt_upstream_import_objects", "Keys an import has indexed so far.", |s| s.objects),
            (
                "holt_upstream_import_prefixes",
                "Prefixes this run of the import lists (after a restart, those left; splits add theirs).",
                |s| s.prefixes,
            ),
            ("holt_upstream_import_prefixes_done", "Of those, the prefixes listed to their end.", |s| {
                s.prefixes_done
            }),
            ("holt_upstream_import_done", "Whether the bucket's import has finished.", |s| u64::from(s.done)),
        ];
        for (name, help, value) in series {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n");
            for (bucket, stats) in imports.iter() {
                let _ = writeln!(out, "{name}{{bucket=\"{bucket}\"}} {}", value(stats));
            }
        }
    }

    /// Whether the upstream bucket exists (and the gateway may use it).
    pub async fn bucket_exists(&self, local: &str) -> S3Result<bool> {
        let bucket = self.bucket(local)?;
        let url = HeadBucket::new(&bucket, Some(&self.credentials)).sign(SIGNED_FOR);
        let resp = self.send(Method::HEAD, url, &[], empty_body(), &[StatusCode::NOT_FOUND]).await?;
        Ok(resp.status() != StatusCode::NOT_FOUND)
    }

    /// Creates the upstream bucket; one that already exists and is ours is fine.
    pub async fn create_bucket(&self, local: &str) -> S3Result<()> {
        let bucket = self.bucket(local)?;
        let action = CreateBucket::new(&bucket, &self.credentials);
        let url = action.sign(SIGNED_FOR);
        let body = if self.config.region == "us-east-1" {
            String::new()
        } else {
            format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.config.region
            )
        };
        match self.send(Method::PUT, url, &[], full_body(body), &[]).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == S3ErrorCode::BucketAlreadyOwnedByYou => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the upstream bucket; one already gone is fine, one holding objects is
    /// BucketNotEmpty.
    pub async fn delete_bucket(&self, local: &str) -> S3Result<()> {
        let bucket = self.bucket(local)?;
        let url = DeleteBucket::new(&bucket, &self.credentials).sign(SIGNED_FOR);
        self.send(Method::DELETE, url, &[], empty_body(), &[StatusCode::NOT_FOUND]).await.map(drop)
    }

    /// Stores `body` (`len` bytes) as `key`, with `headers` (content headers, user metadata,
    /// Content-MD5). The body is streamed: if it ends short or with an error, the upstream
    /// never completes the object.
    pub async fn put_object(
        &self,
        local: &str,
        key: &str,
        len: u64,
        headers: Vec<(String, String)>,
        body: UpBody,
    ) -> S3Result<UpstreamBody> {
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let mut action = PutObject::new(&bucket, Some(&self.credentials), key);
        for (k, v) in &headers {
            action.headers_mut().insert(k.clone(), v.clone());
        }
        let url = action.sign(SIGNED_FOR);
        let mut all = headers;
        all.push(("content-length".into(), len.to_string()));
        let resp = self.send(Method::PUT, url, &all, body, &[]).await?;
        Ok(stored(resp.headers()))
    }

    /// The `x-amz-copy-source` value naming `src_local/src_key` upstream, and the condition
    /// that it still is the version whose ETag is `src_etag`.
    fn copy_source(&self, src_local: &str, src_key: &str, src_etag: &str) -> Vec<(String, String)> {
        let source = format!(
            "/{}/{}",
            self.bucket_name(src_local),
            crate::auth::canonical::uri_encode(src_key.as_bytes(), true)
        );
        vec![
            ("x-amz-copy-source".to_owned(), source),
            ("x-amz-copy-source-if-match".to_owned(), format!("\"{src_etag}\"")),
        ]
    }

    /// Reads a copy's result document (CopyObjectResult, CopyPartResult): its ETag. A copy can
    /// fail after its 200 has been sent: the error is then the document.
    async fn copy_result(resp: http::Response<Incoming>) -> S3Result<(String, Option<String>)> {
        let version = version_id(resp.headers());
        let doc = Self::document(resp).await?;
        if doc.contains("<Error>") {
            return Err(error_from_document(StatusCode::INTERNAL_SERVER_ERROR, &doc));
        }
        let etag = xml_text(&doc, "ETag").map(|e| bare_etag(&e));
        Ok((etag.ok_or_else(|| unavailable("answered a copy without an ETag"))?, version))
    }

    /// Server-side copy of `src_local/src_key` (while its ETag is `src_etag`) to
    /// `local/key`, with `headers` as the new object's headers (metadata directive REPLACE:
    /// the index decides what the copy carries) and the client's conditions.
    pub async fn copy_object(
        &self,
        (src_local, src_key, src_etag): (&str, &str, &str),
        local: &str,
        key: &str,
        headers: Vec<(String, String)>,
    ) -> S3Result<UpstreamBody> {
        require_addressable(src_key)?;
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let mut all = self.copy_source(src_local, src_key, src_etag);
        all.push(("x-amz-metadata-directive".into(), "REPLACE".into()));
        all.extend(headers);
        let mut action = PutObject::new(&bucket, Some(&self.credentials), key);
        for (k, v) in &all {
            action.headers_mut().insert(k.clone(), v.clone());
        }
        let url = action.sign(SIGNED_FOR);
        let resp = self.send(Method::PUT, url, &all, empty_body(), &[]).await?;
        let (etag, version_id) = Self::copy_result(resp).await?;
        Ok(UpstreamBody { etag, version_id, headers_pending: false })
    }

    /// UploadPartCopy upstream: part `part_number` of `upload_id` becomes bytes
    /// `first..=last` of the source (while its ETag is `src_etag`); returns the part's ETag.
    pub async fn upload_part_copy(
        &self,
        (src_local, src_key, src_etag): (&str, &str, &str),
        (local, key, upload_id, part_number): (&str, &str, &str, u16),
        (first, last): (u64, u64),
    ) -> S3Result<String> {
        require_addressable(src_key)?;
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let mut headers = self.copy_source(src_local, src_key, src_etag);
        headers.push(("x-amz-copy-source-range".into(), format!("bytes={first}-{last}")));
        let mut action = UploadPart::new(&bucket, Some(&self.credentials), key, part_number, upload_id);
        for (k, v) in &headers {
            action.headers_mut().insert(k.clone(), v.clone());
        }
        let url = action.sign(SIGNED_FOR);
        let resp = self.send(Method::PUT, url, &headers, empty_body(), &[]).await?;
        Ok(Self::copy_result(resp).await?.0)
    }

    /// Streams `key`'s bytes `range` (inclusive end), only while its ETag is `etag`
    /// (`If-Match`): an object replaced upstream since the index recorded it answers 412.
    pub async fn get_object(
        &self,
        local: &str,
        key: &str,
        range: Option<(u64, u64)>,
        etag: &str,
    ) -> S3Result<Incoming> {
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let url = GetObject::new(&bucket, Some(&self.credentials), key).sign(SIGNED_FOR);
        let mut headers = vec![("if-match".to_owned(), format!("\"{etag}\""))];
        if let Some((first, last)) = range {
            headers.push(("range".into(), format!("bytes={first}-{last}")));
        }
        Ok(self.send(Method::GET, url, &headers, empty_body(), &[]).await?.into_body())
    }

    /// HEAD of `key`; `None` if the upstream has no such object.
    pub async fn head_object(&self, local: &str, key: &str) -> S3Result<Option<HeadInfo>> {
        if !addressable(key) {
            return Ok(None);
        }
        let bucket = self.bucket(local)?;
        let url = HeadObject::new(&bucket, Some(&self.credentials), key).sign(SIGNED_FOR);
        // 400: the upstream refuses the name itself (MinIO refuses `a//b`), so nothing is
        // stored under it; a write it refused leaves nothing to repair.
        let absent = [StatusCode::NOT_FOUND, StatusCode::BAD_REQUEST];
        let resp = self.send(Method::HEAD, url, &[], empty_body(), &absent).await?;
        if absent.contains(&resp.status()) {
            return Ok(None);
        }
        let h = resp.headers();
        let size = header(h, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let last_modified_ms = header(h, "last-modified")
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(Some(HeadInfo {
            size,
            etag: header(h, "etag").map(bare_etag).unwrap_or_default(),
            last_modified_ms,
            headers: object_headers_from(h),
            version_id: version_id(h),
            tag_count: header(h, "x-amz-tagging-count").and_then(|v| v.parse().ok()),
        }))
    }

    /// The tags of `key` upstream (GetObjectTagging); `None` if the upstream has no such
    /// object.
    pub async fn get_object_tagging(&self, local: &str, key: &str) -> S3Result<Option<Tags>> {
        if !addressable(key) {
            return Ok(None);
        }
        let bucket = self.bucket(local)?;
        let mut action = GetObject::new(&bucket, Some(&self.credentials), key);
        action.query_mut().insert("tagging", "");
        let url = action.sign(SIGNED_FOR);
        let resp = self.send(Method::GET, url, &[], empty_body(), &[StatusCode::NOT_FOUND]).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let doc = Self::document(resp).await?;
        crate::handlers::tagging::parse_tagging(doc.as_bytes())
            .map(Some)
            .map_err(|_| unavailable("answered GetObjectTagging with a document that is not a Tagging"))
    }

    /// Replaces the tags of `key` upstream (PutObjectTagging; DeleteObjectTagging when
    /// `tags` is empty). A missing key is NoSuchKey.
    pub async fn put_object_tagging(&self, local: &str, key: &str, tags: &Tags) -> S3Result<()> {
        use base64::Engine as _;
        use md5::Digest as _;
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        if tags.is_empty() {
            let mut action = DeleteObject::new(&bucket, Some(&self.credentials), key);
            action.query_mut().insert("tagging", "");
            let url = action.sign(SIGNED_FOR);
            return self.send(Method::DELETE, url, &[], empty_body(), &[]).await.map(drop);
        }
        let document = crate::handlers::tagging::document(tags);
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&document));
        let headers =
            vec![("content-md5".to_owned(), md5), ("content-length".to_owned(), document.len().to_string())];
        let mut action = PutObject::new(&bucket, Some(&self.credentials), key);
        action.query_mut().insert("tagging", "");
        let url = action.sign(SIGNED_FOR);
        self.send(Method::PUT, url, &headers, full_body(document), &[]).await.map(drop)
    }

    /// Deletes `key` upstream (a missing key is not an error, as in S3).
    pub async fn delete_object(&self, local: &str, key: &str) -> S3Result<()> {
        if !addressable(key) {
            return Ok(());
        }
        let bucket = self.bucket(local)?;
        let url = DeleteObject::new(&bucket, Some(&self.credentials), key).sign(SIGNED_FOR);
        let accept = [StatusCode::NOT_FOUND, StatusCode::BAD_REQUEST];
        let resp = self.send(Method::DELETE, url, &[], empty_body(), &accept).await?;
        if resp.status() != StatusCode::BAD_REQUEST {
            return Ok(());
        }
        // A name the upstream refuses holds no object: deleting it deletes nothing, as for
        // any absent key. Any other 400 is an error.
        let doc = Self::document(resp).await?;
        match xml_text(&doc, "Code").as_deref() {
            Some(NAME_REFUSED) => Ok(()),
            _ => Err(error_from_document(StatusCode::BAD_REQUEST, &doc)),
        }
    }

    /// Deletes `keys` (at most 1,000, distinct) upstream in one DeleteObjects request; returns
    /// the keys the upstream did not delete, with its reason. A key the upstream cannot name
    /// holds no object there, and counts as deleted, as in [`Upstream::delete_object`]. An
    /// upstream without DeleteObjects (it answers 501 or 405) gets a DeleteObject per key.
    pub async fn delete_objects(&self, local: &str, keys: &[&str]) -> S3Result<Vec<(String, S3Error)>> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.one_by_one_deletes.load(Relaxed) {
            return Ok(self.delete_each(local, keys).await);
        }
        let named: Vec<ObjectIdentifier> =
            keys.iter().filter(|k| addressable(k)).map(|&k| ObjectIdentifier::new(k.to_owned())).collect();
        if named.is_empty() {
            return Ok(Vec::new());
        }
        let bucket = self.bucket(local)?;
        let mut action = DeleteObjects::new(&bucket, Some(&self.credentials), named.iter());
        // Only failures are reported: the rest were deleted (an absent key is deleted too).
        action.set_quiet(true);
        let url = action.sign(SIGNED_FOR);
        let (body, content_md5) = action.body_with_md5();
        let headers =
            [("content-md5".to_owned(), content_md5), ("content-length".to_owned(), body.len().to_string())];
        let refused = [StatusCode::NOT_IMPLEMENTED, StatusCode::METHOD_NOT_ALLOWED];
        let resp = self.send(Method::POST, url, &headers, full_body(body), &refused).await?;
        if refused.contains(&resp.status()) {
            tracing::warn!(
                status = resp.status().as_u16(),
                "the upstream refuses DeleteObjects: deleting one key at a time from now on"
            );
            self.one_by_one_deletes.store(true, Relaxed);
            return Ok(self.delete_each(local, keys).await);
        }
        let doc = Self::document(resp).await?;
        if doc.contains("<Error>") && !doc.contains("<DeleteResult") {
            return Err(error_from_document(StatusCode::INTERNAL_SERVER_ERROR, &doc));
        }
        let result = DeleteObjectsResponse::parse(&doc)
            .map_err(|e| unavailable(format_args!("sent a DeleteObjects result that does not parse: {e}")))?;
        Ok(result
            .errors
            .into_iter()
            .filter(|e| e.code != NAME_REFUSED)
            .map(|e| {
                let reason = key_error(&e.code, &e.message);
                (e.key, reason)
            })
            .collect())
    }

    /// Deletes `keys` upstream with a DeleteObject each, `DELETE_EACH_AT_ONCE` at a time;
    /// returns the keys not deleted, with the reason.
    async fn delete_each(&self, local: &str, keys: &[&str]) -> Vec<(String, S3Error)> {
        let mut failed = Vec::new();
        for chunk in keys.chunks(DELETE_EACH_AT_ONCE) {
            let deletes: Vec<_> = chunk.iter().map(|&key| self.delete_object(local, key)).collect();
            for (&key, result) in chunk.iter().zip(futures_util::future::join_all(deletes).await) {
                if let Err(e) = result {
                    failed.push((key.to_owned(), e));
                }
            }
        }
        failed
    }

    /// Starts a multipart upload of `key` upstream; returns its upload id.
    pub async fn create_multipart(
        &self,
        local: &str,
        key: &str,
        headers: Vec<(String, String)>,
    ) -> S3Result<String> {
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let mut action = CreateMultipartUpload::new(&bucket, Some(&self.credentials), key);
        for (k, v) in &headers {
            action.headers_mut().insert(k.clone(), v.clone());
        }
        let url = action.sign(SIGNED_FOR);
        let resp = self.send(Method::POST, url, &headers, empty_body(), &[]).await?;
        let doc = Self::document(resp).await?;
        xml_text(&doc, "UploadId")
            .ok_or_else(|| unavailable("answered CreateMultipartUpload without an UploadId"))
    }

    /// Streams one part (`len` bytes) of the upstream upload `upload_id`; returns its ETag.
    pub async fn upload_part(
        &self,
        local: &str,
        key: &str,
        upload_id: &str,
        part_number: u16,
        len: u64,
        body: UpBody,
    ) -> S3Result<String> {
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let url =
            UploadPart::new(&bucket, Some(&self.credentials), key, part_number, upload_id).sign(SIGNED_FOR);
        let headers = [("content-length".to_owned(), len.to_string())];
        let resp = self.send(Method::PUT, url, &headers, body, &[]).await?;
        header(resp.headers(), "etag")
            .map(bare_etag)
            .ok_or_else(|| unavailable("answered a part without an ETag"))
    }

    /// Completes the upstream upload from `parts` (part number, upstream ETag), in order.
    pub async fn complete_multipart(
        &self,
        local: &str,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
        conditions: Vec<(String, String)>,
    ) -> S3Result<UpstreamBody> {
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let url = CompleteMultipartUpload::new(
            &bucket,
            Some(&self.credentials),
            key,
            upload_id,
            std::iter::empty::<&str>(),
        )
        .sign(SIGNED_FOR);
        let mut doc = String::from("<CompleteMultipartUpload>");
        for (n, etag) in parts {
            doc.push_str(&format!("<Part><PartNumber>{n}</PartNumber><ETag>\"{etag}\"</ETag></Part>"));
        }
        doc.push_str("</CompleteMultipartUpload>");
        let resp = self.send(Method::POST, url, &conditions, full_body(doc), &[]).await?;
        let version = version_id(resp.headers());
        let answer = Self::document(resp).await?;
        if answer.contains("<Error>") {
            return Err(error_from_document(StatusCode::INTERNAL_SERVER_ERROR, &answer));
        }
        let etag = xml_text(&answer, "ETag").map(|e| bare_etag(&e));
        let etag = etag.ok_or_else(|| unavailable("answered a completion without an ETag"))?;
        Ok(UpstreamBody { etag, version_id: version, headers_pending: false })
    }

    /// Aborts the upstream upload (one already gone is fine).
    pub async fn abort_multipart(&self, local: &str, key: &str, upload_id: &str) -> S3Result<()> {
        require_addressable(key)?;
        let bucket = self.bucket(local)?;
        let url =
            AbortMultipartUpload::new(&bucket, Some(&self.credentials), key, upload_id).sign(SIGNED_FOR);
        match self.send(Method::DELETE, url, &[], empty_body(), &[StatusCode::NOT_FOUND]).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == S3ErrorCode::NoSuchUpload => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A client's ListObjects or ListObjectsV2 (`query`: its parameters), answered by the
    /// upstream: the document as the upstream wrote it.
    pub async fn list_passthrough(&self, local: &str, query: &[(&str, &str)]) -> S3Result<Bytes> {
        let bucket = self.bucket(local)?;
        let mut action = ListObjectsV2::new(&bucket, Some(&self.credentials));
        // The action names list-type=2 and encoding-type=url itself: the client's parameters
        // decide (a V1 listing has no list-type).
        action.query_mut().remove("list-type");
        action.query_mut().remove("encoding-type");
        for (k, v) in query {
            action.query_mut().insert((*k).to_owned(), (*v).to_owned());
        }
        let url = action.sign(SIGNED_FOR);
        let resp = self.send(Method::GET, url, &[], empty_body(), &[]).await?;
        let body = http_body_util::Limited::new(resp.into_body(), DOCUMENT_MAX);
        Ok(body.collect().await.map_err(|_| unavailable("sent an unreadable listing"))?.to_bytes())
    }

    /// One page (up to 1,000 entries) of the upstream bucket's keys under `prefix` after
    /// `start_after`, rolled up at `delimiter` if given.
    pub async fn list_page(
        &self,
        local: &str,
        prefix: &str,
        start_after: &str,
        delimiter: Option<&str>,
    ) -> S3Result<ListObjectsV2Response> {
        let bucket = self.bucket(local)?;
        let mut action = ListObjectsV2::new(&bucket, Some(&self.credentials));
        if !prefix.is_empty() {
            action.with_prefix(prefix.to_owned());
        }
        if !start_after.is_empty() {
            action.with_start_after(start_after.to_owned());
        }
        if let Some(d) = delimiter {
            action.with_delimiter(d.to_owned());
        }
        action.with_max_keys(1000);
        let url = action.sign(SIGNED_FOR);
        let resp = self.send(Method::GET, url, &[], empty_body(), &[]).await?;
        let doc = Self::document(resp).await?;
        ListObjectsV2::parse_response(&doc)
            .map_err(|e| unavailable(format_args!("sent a listing that does not parse: {e}")))
    }
}

fn stored(h: &HeaderMap) -> UpstreamBody {
    UpstreamBody {
        etag: header(h, "etag").map(bare_etag).unwrap_or_default(),
        version_id: version_id(h),
        headers_pending: false,
    }
}

/// The S3 error an upstream's non-2xx answer means to our client.
async fn status_error(resp: http::Response<Incoming>) -> S3Error {
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), ERROR_BODY_MAX).collect().await;
    let doc = body.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned()).unwrap_or_default();
    error_from_document(status, &doc)
}

/// Whether `key` can be sent upstream in a request path. A `.` or `..` path segment cannot:
/// URL normalisation resolves it (`a/../../b/k` would address bucket `b`), so such keys are
/// refused (`require_addressable`) and, where they come from an upstream listing, treated
/// as absent. (S3 allows them; MinIO and Ceph refuse them anyway.)
pub fn addressable(key: &str) -> bool {
    !key.split('/').any(|segment| segment == "." || segment == "..")
}

/// [`addressable`], or the client's error.
fn require_addressable(key: &str) -> S3Result<()> {
    if addressable(key) {
        return Ok(());
    }
    Err(S3Error::with_message(
        S3ErrorCode::InvalidRequest,
        "In upstream mode a key cannot have `.` or `..` path segments: the upstream request could not name it.",
    ))
}

/// The code MinIO answers for an object name it cannot store (`a//b`, `.` or `..` segments).
const NAME_REFUSED: &str = "XMinioInvalidObjectName";

fn error_from_document(status: StatusCode, doc: &str) -> S3Error {
    error_from_code(status, &xml_text(doc, "Code").unwrap_or_default())
}

/// The error for one key of a DeleteObjects result the upstream did not delete: S3 codes a
/// client can act on pass through, anything else (AccessDenied, InternalError, SlowDown) is
/// the upstream being unavailable to the gateway.
fn key_error(code: &str, message: &str) -> S3Error {
    let err = error_from_code(StatusCode::INTERNAL_SERVER_ERROR, code);
    if err.code == S3ErrorCode::ServiceUnavailable {
        tracing::warn!(code, message, "upstream did not delete a key");
    }
    err
}

/// The error for an upstream error `code` answered with `status`.
fn error_from_code(status: StatusCode, code: &str) -> S3Error {
    use S3ErrorCode as C;
    let passed = match code {
        "NoSuchKey" => Some(C::NoSuchKey),
        "NoSuchUpload" => Some(C::NoSuchUpload),
        "PreconditionFailed" => Some(C::PreconditionFailed),
        "InvalidRange" => Some(C::InvalidRange),
        "EntityTooSmall" => Some(C::EntityTooSmall),
        "EntityTooLarge" => Some(C::EntityTooLarge),
        "InvalidPart" => Some(C::InvalidPart),
        "InvalidPartOrder" => Some(C::InvalidPartOrder),
        "BadDigest" => Some(C::BadDigest),
        "BucketAlreadyOwnedByYou" => Some(C::BucketAlreadyOwnedByYou),
        "BucketNotEmpty" => Some(C::BucketNotEmpty),
        "InvalidTag" => Some(C::InvalidTag),
        _ => None,
    };
    if let Some(c) = passed {
        return S3Error::new(c);
    }
    match status {
        StatusCode::NOT_FOUND if code.is_empty() => S3Error::new(C::NoSuchKey),
        StatusCode::PRECONDITION_FAILED => S3Error::new(C::PreconditionFailed),
        StatusCode::RANGE_NOT_SATISFIABLE => S3Error::new(C::InvalidRange),
        s if s == StatusCode::FORBIDDEN || s == StatusCode::UNAUTHORIZED => {
            tracing::warn!(code, "upstream refused the gateway's credentials");
            unavailable(format_args!("refused the gateway's request ({code})"))
        }
        s if s.is_server_error() => {
            tracing::warn!(%status, code, "upstream error");
            unavailable(format_args!("answered {status} {code}"))
        }
        _ => {
            tracing::warn!(%status, code, "upstream refused a request");
            S3Error::with_message(C::InvalidRequest, format!("The upstream object store refused: {code}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_errors_map_to_s3_errors() {
        let err = |s: u16, doc: &str| error_from_document(StatusCode::from_u16(s).unwrap(), doc).code;
        assert_eq!(err(404, "<Error><Code>NoSuchKey</Code></Error>"), S3ErrorCode::NoSuchKey);
        assert_eq!(err(412, ""), S3ErrorCode::PreconditionFailed);
        assert_eq!(err(503, "<Error><Code>SlowDownWrite</Code></Error>"), S3ErrorCode::ServiceUnavailable);
        assert_eq!(err(500, "<Error><Code>InternalError</Code></Error>"), S3ErrorCode::ServiceUnavailable);
        assert_eq!(
            err(403, "<Error><Code>SignatureDoesNotMatch</Code></Error>"),
            S3ErrorCode::ServiceUnavailable
        );
        assert_eq!(err(400, "<Error><Code>InvalidPart</Code></Error>"), S3ErrorCode::InvalidPart);
        assert_eq!(err(400, "<Error><Code>Weird</Code></Error>"), S3ErrorCode::InvalidRequest);
    }

    #[test]
    fn tagging_headers_encode_what_would_split_them() {
        let tags: Tags = vec![("team".into(), "a b+c".into()), ("path".into(), "x/y=z".into())];
        let (name, value) = tagging_header(&tags).unwrap();
        assert_eq!((name.as_str(), value.as_str()), ("x-amz-tagging", "team=a%20b%2Bc&path=x%2Fy%3Dz"));
        assert_eq!(tagging_header(&Vec::new()), None);
    }

    #[test]
    fn header_pairs_round_trip_through_a_response() {
        let h = ObjectHeaders {
            content_type: Some("text/plain".into()),
            cache_control: Some("no-cache".into()),
            user_meta: vec![("colour".into(), "blue".into())],
            ..Default::default()
        };
        let mut map = HeaderMap::new();
        for (k, v) in object_header_pairs(&h) {
            map.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        assert_eq!(object_headers_from(&map), h);
    }
}

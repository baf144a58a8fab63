//! Request bodies: decoded (plain or aws-chunked), bounded, hashed while they stream to the
//! body store, and verified (payload SHA-256, Content-MD5, `x-amz-checksum-*` from headers or
//! aws-chunked trailers) before anything is committed. A body that fails any check leaves
//! nothing behind: the writer's temporary file is removed when it is dropped.

use axum::body::{Body, BodyDataStream};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt;
use md5::{Digest as _, Md5};
use sha2::Sha256;

use super::ReqCtx;
use crate::auth::{self, ChunkedDecoder, Payload};
use crate::checksum::{ChecksumAlgo, Hasher, ALL_ALGOS};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BodyRef, UpstreamBody};
use crate::upstream::UpBody;
use futures_util::future::BoxFuture;
use http_body_util::BodyExt as _;

/// Largest single PutObject or part body: 5 GiB.
pub const OBJECT_BYTES_MAX: u64 = 5 << 30;
/// Largest XML request body (DeleteObjects allows 2 MiB; the others need far less).
pub const XML_BODY_BYTES_MAX: u64 = 2 << 20;
/// CompleteMultipartUpload lists up to 10000 parts; allow its larger body.
pub const COMPLETE_BODY_BYTES_MAX: u64 = 4 << 20;

enum Mode {
    Plain { sha256: Option<(Sha256, String)> },
    Chunked(Box<ChunkedDecoder>),
}

/// The decoded body of a request, chunk by chunk.
pub struct DecodedBody {
    stream: BodyDataStream,
    mode: Mode,
    /// Decoded bytes the client announced (Content-Length or x-amz-decoded-content-length).
    expected: Option<u64>,
    received: u64,
    max: u64,
    out: Vec<u8>,
    /// When the body started to be read, and its deadlines (`Settings::body_idle_timeout`,
    /// `body_min_rate`, `body_rate_grace`).
    started: tokio::time::Instant,
    idle_timeout: std::time::Duration,
    min_rate: u64,
    rate_grace: std::time::Duration,
}

fn request_timeout() -> S3Error {
    S3Error::new(S3ErrorCode::RequestTimeout)
}

fn too_large() -> S3Error {
    S3Error::new(S3ErrorCode::EntityTooLarge)
}

impl DecodedBody {
    /// Prepares to read `body`, refusing announced lengths above `max` before reading a byte.
    /// `require_length`: PutObject and UploadPart need a length (411 otherwise).
    pub fn new(ctx: &ReqCtx, body: Body, max: u64, require_length: bool) -> S3Result<Self> {
        let content_length = match ctx.header("content-length") {
            Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                S3Error::with_message(S3ErrorCode::InvalidArgument, "Content-Length is not a number")
            })?),
            None => None,
        };
        let chunked_te = ctx.headers.contains_key(http::header::TRANSFER_ENCODING);
        let (mode, expected) = match &ctx.payload {
            Payload::Chunked(spec) => {
                let decoded = spec.decoded_content_length();
                if decoded > max {
                    return Err(too_large());
                }
                (Mode::Chunked(Box::new(ChunkedDecoder::new(spec.clone(), max))), Some(decoded))
            }
            Payload::Sha256(hex) => {
                (Mode::Plain { sha256: Some((Sha256::new(), hex.clone())) }, content_length)
            }
            Payload::Unsigned => (Mode::Plain { sha256: None }, content_length),
        };
        if let Mode::Plain { .. } = mode {
            match content_length {
                Some(n) if n > max => return Err(too_large()),
                None if require_length && !chunked_te => {
                    return Err(S3Error::new(S3ErrorCode::MissingContentLength))
                }
                _ => {}
            }
        }
        let settings = &ctx.state.0.settings;
        Ok(DecodedBody {
            stream: body.into_data_stream(),
            mode,
            expected,
            received: 0,
            max,
            out: Vec::new(),
            started: tokio::time::Instant::now(),
            idle_timeout: settings.body_idle_timeout,
            min_rate: settings.body_min_rate,
            rate_grace: settings.body_rate_grace,
        })
    }

    /// The next frame of the raw body, within the body's deadlines: no frame for
    /// `idle_timeout`, or an average rate below `min_rate` once `rate_grace` has passed, is
    /// 400 RequestTimeout.
    async fn next_frame(&mut self) -> S3Result<Option<Result<Bytes, axum::Error>>> {
        let elapsed = self.started.elapsed();
        if elapsed > self.rate_grace && self.received < self.min_rate.saturating_mul(elapsed.as_secs()) {
            tracing::info!(received = self.received, secs = elapsed.as_secs(), "request body too slow");
            return Err(request_timeout());
        }
        match tokio::time::timeout(self.idle_timeout, self.stream.next()).await {
            Ok(frame) => Ok(frame),
            Err(_) => {
                tracing::info!(received = self.received, "request body stalled");
                Err(request_timeout())
            }
        }
    }

    /// The next piece of decoded body, or `None` at the end.
    pub async fn next_chunk(&mut self) -> S3Result<Option<Bytes>> {
        loop {
            let Some(frame) = self.next_frame().await? else { return Ok(None) };
            let raw = frame.map_err(|e| {
                tracing::info!(error = %e, "request body ended abnormally");
                S3Error::new(S3ErrorCode::IncompleteBody)
            })?;
            let data = match &mut self.mode {
                Mode::Plain { sha256 } => {
                    if let Some((h, _)) = sha256 {
                        h.update(&raw);
                    }
                    raw
                }
                Mode::Chunked(decoder) => {
                    self.out.clear();
                    decoder.feed(&raw, &mut self.out).map_err(S3Error::from)?;
                    if self.out.is_empty() {
                        continue;
                    }
                    Bytes::copy_from_slice(&self.out)
                }
            };
            self.received += data.len() as u64;
            if self.received > self.max {
                return Err(too_large());
            }
            if self.expected.is_some_and(|n| self.received > n) {
                return Err(S3Error::with_message(
                    S3ErrorCode::IncompleteBody,
                    "The body is longer than announced.",
                ));
            }
            if data.is_empty() {
                continue;
            }
            return Ok(Some(data));
        }
    }

    /// Verifies the end of the body; returns the aws-chunked trailers (name, value).
    pub fn finish(self) -> S3Result<Vec<(String, String)>> {
        if self.expected.is_some_and(|n| self.received != n) {
            return Err(S3Error::new(S3ErrorCode::IncompleteBody));
        }
        match self.mode {
            Mode::Plain { sha256: Some((h, expected)) } => {
                let actual: [u8; 32] = h.finalize().into();
                auth::verify_payload_sha256(&expected, &actual).map_err(S3Error::from)?;
                Ok(Vec::new())
            }
            Mode::Plain { sha256: None } => Ok(Vec::new()),
            Mode::Chunked(decoder) => {
                let trailers = decoder.finish().map_err(S3Error::from)?;
                Ok(trailers.headers.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect())
            }
        }
    }
}

/// Reads a small body (an XML document) into memory, bounded by `max`, and verifies its
/// Content-MD5 and `x-amz-checksum-*` values.
pub async fn read_small(ctx: &ReqCtx, body: Body, max: u64) -> S3Result<Vec<u8>> {
    let (out, trailers) = read_small_inner(ctx, body, max).await?;
    verify_md5_and_checksums(ctx, &out, &trailers)?;
    Ok(out)
}

/// `read_small` for requests whose `x-amz-checksum-*` headers describe something else than
/// the body (CompleteMultipartUpload: the whole object). Content-MD5 is still verified.
pub async fn read_small_unchecked(ctx: &ReqCtx, body: Body, max: u64) -> S3Result<Vec<u8>> {
    let (out, _) = read_small_inner(ctx, body, max).await?;
    verify_content_md5(ctx, &out)?;
    Ok(out)
}

/// Checks a small body against its Content-MD5 header, if it has one (the digest is computed
/// only then: a 1 MB CompleteMultipartUpload document costs 2 ms of MD5).
fn verify_content_md5(ctx: &ReqCtx, body: &[u8]) -> S3Result<()> {
    let Some(expected) = content_md5(ctx)? else { return Ok(()) };
    check_content_md5(Some(expected), Md5::digest(body).into())
}

async fn read_small_inner(ctx: &ReqCtx, body: Body, max: u64) -> S3Result<(Vec<u8>, Vec<(String, String)>)> {
    let mut reader = DecodedBody::new(ctx, body, max, false)?;
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk().await? {
        out.extend_from_slice(&chunk);
    }
    let trailers = reader.finish()?;
    Ok((out, trailers))
}

fn verify_md5_and_checksums(ctx: &ReqCtx, body: &[u8], trailers: &[(String, String)]) -> S3Result<()> {
    verify_content_md5(ctx, body)?;
    let mut hashers: Vec<Hasher> = requested_algos(ctx, None).into_iter().map(Hasher::new).collect();
    for h in &mut hashers {
        h.update(body);
    }
    verify_checksums(ctx, hashers, trailers).map(|_| ())
}

/// A body stored in the body store, with its digests.
pub struct Ingested {
    /// Where the bytes are, committed: the caller must name it in a record or discard it.
    pub body: BodyRef,
    /// Decoded body length in bytes (aws-chunked framing excluded).
    pub size: u64,
    /// MD5 of the body: the object's or part's ETag.
    pub md5: [u8; 16],
    /// Raw digests of every requested algorithm, each verified against the value the client
    /// sent, if any.
    pub checksums: Checksums,
}

/// The `Content-MD5` header, decoded. Malformed → 400 InvalidDigest.
pub fn content_md5(ctx: &ReqCtx) -> S3Result<Option<[u8; 16]>> {
    let Some(v) = ctx.headers.get("content-md5") else { return Ok(None) };
    let raw = v.to_str().ok().and_then(|s| B64.decode(s.trim()).ok());
    match raw.and_then(|r| <[u8; 16]>::try_from(r.as_slice()).ok()) {
        Some(md5) => Ok(Some(md5)),
        None => Err(S3Error::new(S3ErrorCode::InvalidDigest)),
    }
}

fn check_content_md5(expected: Option<[u8; 16]>, actual: [u8; 16]) -> S3Result<()> {
    match expected {
        Some(e) if e != actual => Err(S3Error::new(S3ErrorCode::BadDigest)),
        _ => Ok(()),
    }
}

/// The checksum algorithms to compute: named by a value header, by
/// `x-amz-checksum-algorithm` / `x-amz-sdk-checksum-algorithm`, by a declared trailer, or
/// required by the upload (`extra`).
pub fn requested_algos(ctx: &ReqCtx, extra: Option<ChecksumAlgo>) -> Vec<ChecksumAlgo> {
    let mut algos: Vec<ChecksumAlgo> =
        ALL_ALGOS.into_iter().filter(|a| ctx.headers.contains_key(a.header())).collect();
    for h in ["x-amz-checksum-algorithm", "x-amz-sdk-checksum-algorithm"] {
        if let Some(a) = ctx.header(h).and_then(ChecksumAlgo::from_name) {
            algos.push(a);
        }
    }
    if let Payload::Chunked(spec) = &ctx.payload {
        algos.extend(spec.declared_trailers().iter().filter_map(|t| ChecksumAlgo::from_header(t)));
    }
    algos.extend(extra);
    algos.sort();
    algos.dedup();
    algos
}

/// Finishes `hashers` and compares each with the value the client sent in a header or a
/// trailer; returns the computed values to store.
fn verify_checksums(
    ctx: &ReqCtx,
    hashers: Vec<Hasher>,
    trailers: &[(String, String)],
) -> S3Result<Checksums> {
    let mut out = Vec::with_capacity(hashers.len());
    for h in hashers {
        let algo = h.algo();
        let computed = h.finish();
        let sent = ctx
            .header(algo.header())
            .map(str::to_owned)
            .or_else(|| trailers.iter().find(|(k, _)| k == algo.header()).map(|(_, v)| v.clone()));
        if let Some(sent) = sent {
            let expected = algo.decode_value(&sent)?;
            if expected != computed {
                return Err(S3Error::with_message(
                    S3ErrorCode::BadDigest,
                    format!("The {} you specified did not match the calculated checksum.", algo.name()),
                ));
            }
        }
        out.push((algo, computed));
    }
    Ok(out)
}

/// Where `ingest_to` sends a body.
pub enum Sink<'g> {
    /// The local body store.
    Local,
    /// The upstream store (upstream mode).
    Upstream {
        /// Starts the upstream request with the body's length and a stream of its bytes, and
        /// resolves once the upstream has stored it.
        start: UpstreamStart,
        /// Awaited before the body's last byte goes out (and before an empty body's request
        /// starts). The upstream cannot store the object before it has every byte, so what
        /// this waits for (an intent record made durable) happens before the upstream write,
        /// while the request's connection, headers and first bytes overlap with it. An error
        /// aborts the upstream request.
        before_end: Option<BoxFuture<'g, S3Result<()>>>,
    },
}

/// How [`Sink::Upstream`] starts its request.
pub type UpstreamStart = Box<dyn FnOnce(u64, UpBody) -> BoxFuture<'static, S3Result<UpstreamBody>> + Send>;

/// Streams the request body into the body store (PutObject, UploadPart).
pub async fn ingest(ctx: &ReqCtx, body: Body, extra_algo: Option<ChecksumAlgo>) -> S3Result<Ingested> {
    ingest_to(ctx, body, extra_algo, Sink::Local).await
}

/// Streams the request body to `sink`, hashing and verifying it on the way.
pub async fn ingest_to(
    ctx: &ReqCtx,
    body: Body,
    extra_algo: Option<ChecksumAlgo>,
    sink: Sink<'_>,
) -> S3Result<Ingested> {
    let expected_md5 = content_md5(ctx)?;
    // Validate client-sent checksum values before reading the body.
    for algo in ALL_ALGOS {
        if let Some(v) = ctx.header(algo.header()) {
            algo.decode_value(v)?;
        }
    }
    let hashers: Vec<Hasher> = requested_algos(ctx, extra_algo).into_iter().map(Hasher::new).collect();
    let mut reader = DecodedBody::new(ctx, body, OBJECT_BYTES_MAX, true)?;
    let mut digests = Digests { md5: Md5::new(), hashers, expected_md5 };
    let (start, before_end) = match sink {
        Sink::Local => {
            let mut writer = ctx.store().bodies.writer();
            while let Some(chunk) = reader.next_chunk().await? {
                digests.update(&chunk);
                writer.write(&chunk).await?;
            }
            let size = writer.len();
            let trailers = reader.finish()?;
            let (md5, checksums) = digests.verify(ctx, &trailers)?;
            let body = writer.commit().await?;
            return Ok(Ingested { body, size, md5, checksums });
        }
        Sink::Upstream { start, before_end } => (start, before_end),
    };
    let len = reader.expected.ok_or_else(|| S3Error::new(S3ErrorCode::MissingContentLength))?;
    let (tx, rx) = tokio::sync::mpsc::channel(UPSTREAM_CHUNKS_IN_FLIGHT);
    // An empty body has no last chunk to hold back: its request starts once it is verified.
    let mut start = Some(start);
    let mut rx = Some(rx);
    let mut upload = None;
    if len > 0 {
        if let (Some(start), Some(rx)) = (start.take(), rx.take()) {
            upload = Some(tokio::spawn(start(len, ChannelBody(rx).boxed())));
        }
    }
    // The last chunk is held back until the whole body is verified: the upstream stores the
    // object only once it has every byte, so a body that fails a check never reaches it.
    let mut held: Option<Bytes> = None;
    let verified: S3Result<_> = async {
        while let Some(chunk) = reader.next_chunk().await? {
            digests.update(&chunk);
            if chunk.is_empty() {
                continue;
            }
            if let Some(previous) = held.replace(chunk) {
                if tx.send(Ok(previous)).await.is_err() {
                    // The upstream request ended early; its error is the answer.
                    return Ok(None);
                }
            }
        }
        let trailers = reader.finish()?;
        digests.verify(ctx, &trailers).map(Some)
    }
    .await;
    // The body is verified (or the upstream request ended early): wait for what must
    // precede the upstream write before letting the last byte go.
    let gated = match before_end {
        Some(gate) if matches!(verified, Ok(Some(_))) => gate.await,
        _ => Ok(()),
    };
    let digests = match verified.and_then(|d| gated.map(|()| d)) {
        Ok(d) => d,
        Err(e) => {
            // Ends the upstream request with an error: the upstream never completes it.
            let _ = tx.send(Err(std::io::Error::other("the write cannot proceed"))).await;
            drop(tx);
            if let Some(task) = upload {
                let _ = task.await;
            }
            return Err(e);
        }
    };
    if let Some(last) = held {
        let _ = tx.send(Ok(last)).await;
    }
    drop(tx);
    let task = match (upload, start.take(), rx.take()) {
        (Some(task), _, _) => task,
        (None, Some(start), Some(rx)) => tokio::spawn(start(len, ChannelBody(rx).boxed())),
        _ => return Err(S3Error::internal("upstream body", "no upload was started")),
    };
    let stored = task.await.map_err(|e| S3Error::internal("upstream upload task", e))??;
    let (md5, checksums) = digests.ok_or_else(|| S3Error::internal("upstream body", "ended early"))?;
    Ok(Ingested { body: BodyRef::Upstream(stored), size: len, md5, checksums })
}

/// Decoded chunks queued towards the upstream at most (each up to a network read).
const UPSTREAM_CHUNKS_IN_FLIGHT: usize = 4;

/// The request body sent upstream: the chunks `ingest_to` forwards, then the end (or an
/// error, which aborts the request).
struct ChannelBody(tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx).map(|item| item.map(|r| r.map(http_body::Frame::data)))
    }
}

/// Checksums of a body: each algorithm with its raw digest.
pub type Checksums = Vec<(ChecksumAlgo, Vec<u8>)>;

/// The digests of a body being received, and what the client said they should be.
struct Digests {
    md5: Md5,
    hashers: Vec<Hasher>,
    expected_md5: Option<[u8; 16]>,
}

impl Digests {
    fn update(&mut self, chunk: &[u8]) {
        self.md5.update(chunk);
        for h in &mut self.hashers {
            h.update(chunk);
        }
    }

    /// The MD5 and the requested checksums, each checked against the client's value.
    fn verify(self, ctx: &ReqCtx, trailers: &[(String, String)]) -> S3Result<([u8; 16], Checksums)> {
        let md5: [u8; 16] = self.md5.finalize().into();
        check_content_md5(self.expected_md5, md5)?;
        Ok((md5, verify_checksums(ctx, self.hashers, trailers)?))
    }
}

//! Client-side helpers for the authentication tests: requests signed by AWS's own `aws-sigv4`
//! crate (an implementation independent of the gateway's verifier), and an aws-chunked body
//! encoder written from the protocol description.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation,
    SigningSettings, UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use gateway::auth::{authenticate, AuthConfig, AuthError, Authenticated, ChunkedSpec, Credentials, Payload};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub const AK: &str = "AKIAIOSFODNN7EXAMPLE";
pub const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
pub const REGION: &str = "us-east-1";
pub const HOST: &str = "127.0.0.1:9000";
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// 2024-03-01T12:00:00Z: the clock of every test that does not set its own.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_709_294_400)
}

pub fn creds() -> Credentials {
    Credentials::new(vec![(AK.to_owned(), SK.to_owned()), ("OTHERKEY".to_owned(), "other-secret".to_owned())])
}

pub fn cfg() -> AuthConfig {
    AuthConfig::new(REGION)
}

/// A request head: method, URI (path and query, already encoded) and headers.
#[derive(Clone, Debug)]
pub struct Req {
    pub method: String,
    pub uri: String,
    pub headers: Vec<(String, String)>,
}

impl Req {
    pub fn new(method: &str, uri: &str) -> Req {
        Req {
            method: method.to_owned(),
            uri: uri.to_owned(),
            headers: vec![("host".to_owned(), HOST.to_owned())],
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Replaces every value of `name` (or adds it).
    pub fn set(mut self, name: &str, value: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn remove(mut self, name: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn parts(&self) -> http::request::Parts {
        let mut builder = http::Request::builder().method(self.method.as_str()).uri(self.uri.as_str());
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder.body(()).expect("test request is valid").into_parts().0
    }

    pub fn auth(&self, now: SystemTime) -> Result<Authenticated, AuthError> {
        authenticate(&self.parts(), &creds(), &cfg(), now)
    }
}

/// What to sign the body as.
#[derive(Clone, Copy)]
pub enum Body<'a> {
    /// Hex SHA-256 of these bytes.
    Bytes(&'a [u8]),
    Unsigned,
    /// A literal `x-amz-content-sha256` value (the STREAMING-* forms).
    Literal(&'a str),
}

/// Signing inputs that tests vary.
#[derive(Clone, Copy)]
pub struct Signer<'a> {
    pub access_key: &'a str,
    pub secret: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub time: SystemTime,
}

impl Default for Signer<'_> {
    fn default() -> Self {
        Signer { access_key: AK, secret: SK, region: REGION, service: "s3", time: t0() }
    }
}

fn settings(location: SignatureLocation, expires: Option<Duration>, checksum: bool) -> SigningSettings {
    let mut settings = SigningSettings::default();
    // S3: single encoding, no path normalization, x-amz-content-sha256 header.
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind =
        if checksum { PayloadChecksumKind::XAmzSha256 } else { PayloadChecksumKind::NoHeader };
    settings.signature_location = location;
    settings.expires_in = expires;
    settings
}

impl Signer<'_> {
    /// Signs `req` in the Authorization header with aws-sigv4 and returns the signed request.
    pub fn sign(&self, req: &Req, body: Body<'_>) -> Req {
        self.sign_with(req, body, true)
    }

    /// As `sign`, optionally without adding `x-amz-content-sha256`.
    pub fn sign_with(&self, req: &Req, body: Body<'_>, content_sha256: bool) -> Req {
        let identity =
            aws_credential_types::Credentials::new(self.access_key, self.secret, None, None, "test").into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(self.region)
            .name(self.service)
            .time(self.time)
            .settings(settings(SignatureLocation::Headers, None, content_sha256))
            .build()
            .expect("signing params")
            .into();
        let hash;
        let signable_body = match body {
            Body::Bytes(bytes) => {
                hash = hex::encode(Sha256::digest(bytes));
                SignableBody::Precomputed(hash.clone())
            }
            Body::Unsigned => SignableBody::UnsignedPayload,
            Body::Literal(value) => SignableBody::Precomputed(value.to_owned()),
        };
        let url = format!("http://{HOST}{}", req.uri);
        let signable = SignableRequest::new(
            &req.method,
            url,
            req.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            signable_body,
        )
        .expect("signable request");
        let (instructions, _) = sign(signable, &params).expect("aws-sigv4 signs").into_parts();
        let mut out = req.clone();
        for (name, value) in instructions.headers() {
            out = out.set(name, value);
        }
        out
    }

    /// Presigns `req` with aws-sigv4 and returns it with the X-Amz-* query parameters added.
    pub fn presign(&self, req: &Req, expires: Duration) -> Req {
        let identity =
            aws_credential_types::Credentials::new(self.access_key, self.secret, None, None, "test").into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(self.region)
            .name(self.service)
            .time(self.time)
            .settings(settings(SignatureLocation::QueryParams, Some(expires), false))
            .build()
            .expect("signing params")
            .into();
        let url = format!("http://{HOST}{}", req.uri);
        let signable = SignableRequest::new(
            &req.method,
            url,
            req.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            SignableBody::UnsignedPayload,
        )
        .expect("signable request");
        let (instructions, _) = sign(signable, &params).expect("aws-sigv4 presigns").into_parts();
        let mut uri = req.uri.clone();
        for (name, value) in instructions.params() {
            uri.push(if uri.contains('?') { '&' } else { '?' });
            uri.push_str(&percent(name));
            uri.push('=');
            uri.push_str(&percent(value));
        }
        Req { uri, ..req.clone() }
    }
}

/// Strict RFC 3986 encoding, as SDKs encode query parameters.
pub fn percent(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Signature (hex) of the Authorization header of `req`.
pub fn seed_signature(req: &Req) -> String {
    let auth = req.get("authorization").expect("signed request");
    auth.rsplit("Signature=").next().expect("has a signature").to_owned()
}

/// `AWS4-HMAC-SHA256` signing key, computed here independently of the gateway.
pub fn signing_key(secret: &str, date: &str, region: &str) -> [u8; 32] {
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region.as_bytes(), b"s3", b"aws4_request"] {
        key = hmac(&key, part);
    }
    key
}

pub fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// The chunk-signing context of a request signed at `time`.
pub struct ChunkSigner {
    pub key: [u8; 32],
    pub timestamp: String,
    pub scope: String,
}

impl ChunkSigner {
    pub fn new(secret: &str, timestamp: &str, region: &str) -> ChunkSigner {
        let date = &timestamp[..8];
        ChunkSigner {
            key: signing_key(secret, date, region),
            timestamp: timestamp.to_owned(),
            scope: format!("{date}/{region}/s3/aws4_request"),
        }
    }

    pub fn chunk_signature(&self, previous: &str, data: &[u8]) -> String {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{previous}\n{EMPTY_SHA256}\n{}",
            self.timestamp,
            self.scope,
            hex::encode(Sha256::digest(data))
        );
        hex::encode(hmac(&self.key, sts.as_bytes()))
    }

    pub fn trailer_signature(&self, previous: &str, trailers: &[(&str, &str)]) -> String {
        let canonical: String = trailers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{previous}\n{}",
            self.timestamp,
            self.scope,
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        hex::encode(hmac(&self.key, sts.as_bytes()))
    }

    /// A signed aws-chunked body: every chunk (and the final empty one) signed in a chain from
    /// `seed`, then the trailers and their signature when `trailers` is given.
    pub fn encode(&self, seed: &str, chunks: &[&[u8]], trailers: Option<&[(&str, &str)]>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut previous = seed.to_owned();
        for data in chunks.iter().copied().chain(std::iter::once(&b""[..])) {
            let sig = self.chunk_signature(&previous, data);
            out.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", data.len()).as_bytes());
            if !data.is_empty() || trailers.is_none() {
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            previous = sig;
        }
        if let Some(trailers) = trailers {
            for (name, value) in trailers {
                out.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
            }
            let sig = self.trailer_signature(&previous, trailers);
            out.extend_from_slice(format!("x-amz-trailer-signature:{sig}\r\n\r\n").as_bytes());
        }
        out
    }
}

/// An unsigned aws-chunked body with trailers (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
pub fn encode_unsigned(chunks: &[&[u8]], trailers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for data in chunks {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `YYYYMMDDTHHMMSSZ` of `t0()`.
pub const T0_STAMP: &str = "20240301T120000Z";

/// The aws-chunked spec of an authenticated request, or a panic naming what came back.
pub fn chunked_spec(auth: Result<Authenticated, AuthError>) -> ChunkedSpec {
    match auth {
        Ok(Authenticated { payload: Payload::Chunked(spec), .. }) => spec,
        other => panic!("expected an aws-chunked payload, got {other:?}"),
    }
}

/// A signed chunked PUT head with `decoded` bytes announced, signed by aws-sigv4.
pub fn chunked_put(content_sha256: &str, decoded: usize, trailer: Option<&str>) -> Req {
    let mut req = Req::new("PUT", "/bucket/object")
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", &decoded.to_string());
    if let Some(trailer) = trailer {
        req = req.header("x-amz-trailer", trailer);
    }
    Signer::default().sign(&req, Body::Literal(content_sha256))
}

/// Feeds `body` to a decoder in pieces of `step` bytes and finishes it.
pub fn decode(
    spec: ChunkedSpec,
    body: &[u8],
    step: usize,
) -> Result<(Vec<u8>, gateway::auth::Trailers), AuthError> {
    let mut decoder = gateway::auth::ChunkedDecoder::new(spec, 1 << 30);
    let mut out = Vec::new();
    for piece in body.chunks(step.max(1)) {
        decoder.feed(piece, &mut out)?;
    }
    let trailers = decoder.finish()?;
    Ok((out, trailers))
}

/// Asserts an error's code and status.
#[track_caller]
pub fn assert_err<T: std::fmt::Debug>(result: Result<T, AuthError>, code: &str, status: u16) {
    match result {
        Ok(value) => panic!("expected {code} ({status}), got Ok({value:?})"),
        Err(err) => {
            assert_eq!(err.code(), code, "{err:?}");
            assert_eq!(err.status(), status, "{err:?}");
        }
    }
}

//! Test harness: the gateway as a `Router` on an in-memory engine and a scratch body store,
//! driven with `oneshot` (no socket), with requests signed by the `aws-sigv4` crate (an
//! implementation independent of ours).

#![allow(dead_code)]

use std::time::SystemTime;

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use axum::body::Body;
use axum::Router;
use gateway::auth::Credentials;
use gateway::storage::Store;
use gateway::{app, AppState, Settings};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

pub const USER_A: (&str, &str) = ("AKIDUSERA", "secret-a");
pub const USER_B: (&str, &str) = ("AKIDUSERB", "secret-b");
pub const REGION: &str = "us-east-1";

pub struct Gw {
    pub state: AppState,
    pub dir: tempfile::TempDir,
}

/// A collected response.
pub struct Resp {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// The text of the first `<tag>` element of the body.
    pub fn xml(&self, tag: &str) -> Option<String> {
        xml_values(&self.text(), tag).into_iter().next()
    }
    pub fn xml_all(&self, tag: &str) -> Vec<String> {
        xml_values(&self.text(), tag)
    }
    /// The S3 error code of an error response.
    pub fn code(&self) -> Option<String> {
        self.xml("Code")
    }
    /// Asserts status and error code, and that the error document names the request id.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text());
        assert_eq!(self.code().as_deref(), Some(code), "body: {}", self.text());
        let rid = self.header("x-amz-request-id").expect("request id header");
        assert_eq!(self.xml("RequestId").as_deref(), Some(rid));
    }
}

/// Every `<tag>text</tag>` in document order (tests only; no nesting of the same tag).
pub fn xml_values(doc: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].to_owned());
        rest = &after[j + close.len()..];
    }
    out
}

impl Gw {
    pub fn new() -> Gw {
        Self::with_settings(Settings::default())
    }

    pub fn with_settings(settings: Settings) -> Gw {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = holt_core::Options {
            weigher: Some(gateway::storage::meta::RECORD_WEIGHER),
            ..Default::default()
        };
        let db = holt_core::Db::open_in_memory(options).expect("in-memory engine");
        let store = Store::open(db, dir.path(), gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
        let creds = Credentials::new(vec![
            (USER_A.0.to_owned(), USER_A.1.to_owned()),
            (USER_B.0.to_owned(), USER_B.1.to_owned()),
        ]);
        Gw { state: AppState::new(store, creds, settings), dir }
    }

    pub fn router(&self) -> Router {
        app(self.state.clone())
    }

    pub async fn send(&self, req: Request<Body>) -> Resp {
        let resp: Response<Body> = self.router().oneshot(req).await.expect("infallible");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes().to_vec();
        Resp { status: parts.status, headers: parts.headers, body }
    }

    /// Sends a request signed by `user` with a signed payload hash.
    pub async fn req(
        &self,
        user: (&str, &str),
        method: Method,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        self.send(signed(user, method, target, headers, body)).await
    }

    pub async fn a(&self, method: Method, target: &str, body: &[u8]) -> Resp {
        self.req(USER_A, method, target, &[], body).await
    }

    pub async fn create_bucket(&self, bucket: &str) {
        let r = self.a(Method::PUT, &format!("/{bucket}"), b"").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }

    pub async fn put(&self, bucket: &str, key: &str, body: &[u8]) -> Resp {
        let r = self.a(Method::PUT, &format!("/{bucket}/{}", encode_key(key)), body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        r
    }

    /// Body files currently in the body store.
    pub fn body_files(&self) -> usize {
        let mut n = 0;
        for d in std::fs::read_dir(self.dir.path().join("bodies")).unwrap() {
            n += std::fs::read_dir(d.unwrap().path()).unwrap().count();
        }
        n
    }

    pub fn tmp_files(&self) -> usize {
        std::fs::read_dir(self.dir.path().join("tmp")).unwrap().count()
    }
}

/// Percent-encodes a key for a request path (keeps `/`).
/// A CompleteMultipartUpload body listing `(part number, ETag)` pairs.
pub fn complete_body(parts: &[(u32, &str)]) -> Vec<u8> {
    let mut s = String::from("<CompleteMultipartUpload>");
    for (n, e) in parts {
        s.push_str(&format!("<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"));
    }
    s.push_str("</CompleteMultipartUpload>");
    s.into_bytes()
}

pub fn encode_key(key: &str) -> String {
    const SET: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    percent_encoding::utf8_percent_encode(key, SET).to_string()
}

/// Builds a request signed with SigV4 by `aws-sigv4`.
pub fn signed(
    user: (&str, &str),
    method: Method,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Request<Body> {
    signed_at(user, method, target, headers, body, SystemTime::now())
}

pub fn signed_at(
    user: (&str, &str),
    method: Method,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    time: SystemTime,
) -> Request<Body> {
    let mut all: Vec<(String, String)> = vec![("host".into(), "localhost".into())];
    all.extend(headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_owned())));
    if all.iter().filter(|(k, _)| k == "host").count() > 1 {
        all.remove(0);
    }
    // `content-length: omit` sends no Content-Length at all.
    let omit_length = all.iter().any(|(k, v)| k == "content-length" && v == "omit");
    all.retain(|(k, v)| !(k == "content-length" && v == "omit"));
    let sends_body = !body.is_empty() || method == Method::PUT || method == Method::POST;
    if !omit_length && !all.iter().any(|(k, _)| k == "content-length") && sends_body {
        all.push(("content-length".into(), body.len().to_string()));
    }
    // An explicit x-amz-content-sha256 (UNSIGNED-PAYLOAD, STREAMING-…) is what gets signed.
    let precomputed = all.iter().position(|(k, _)| k == "x-amz-content-sha256").map(|i| all.remove(i).1);
    let creds = aws_credential_types::Credentials::new(user.0, user.1, None, None, "test");
    let identity = creds.into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let host = all.iter().find(|(k, _)| k == "host").map(|(_, v)| v.clone()).unwrap_or_default();
    let url = format!("http://{host}{target}");
    let signable = SignableRequest::new(
        method.as_str(),
        url.clone(),
        all.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        match &precomputed {
            Some(v) => SignableBody::Precomputed(v.clone()),
            None => SignableBody::Bytes(body),
        },
    )
    .expect("signable");
    let (instructions, _) = sign(signable, &params).expect("sign").into_parts();
    let mut builder = Request::builder().method(method).uri(target);
    for (k, v) in &all {
        builder = builder.header(k.as_str(), v.as_str());
    }
    for (k, v) in instructions.headers() {
        builder = builder.header(k, v);
    }
    builder.body(Body::from(body.to_vec())).expect("request")
}

/// An unsigned request.
pub fn anonymous(method: Method, target: &str, body: &[u8]) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(target)
        .header("host", "localhost")
        .body(Body::from(body.to_vec()))
        .unwrap()
}

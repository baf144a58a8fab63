//! Invariant: through the whole request pipeline (`app()`), a PutObject, UploadPart or
//! CompleteMultipartUpload that fails authentication, at the head or anywhere in its
//! aws-chunked body, is answered with the S3 error AWS uses (exact status and code, the
//! document's RequestId equal to the `x-amz-request-id` header) and stores nothing: no object,
//! no part, no completed upload, no body file and no temporary file. Each failing case is
//! paired with its intact twin, which must succeed, so the checks are known to be able to see
//! a stored result.

mod auth_support;
mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use auth_support::{encode_unsigned, seed_signature, Body as Signed, ChunkSigner, Req, Signer};
use axum::body::Body;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::{Gw, Resp, REGION, USER_A};
use http::{Method, Request};

const SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
const SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
const CRC: &str = "x-amz-checksum-crc32";

/// The three operations whose bodies become stored state.
#[derive(Clone, Copy, Debug)]
enum Op {
    PutObject,
    UploadPart,
    CompleteMultipartUpload,
}

/// A gateway with bucket `bkt` and, for the multipart operations, an upload of `mp`
/// (holding part 1, stored as a body file, when the operation is CompleteMultipartUpload).
struct Fixture {
    gw: Gw,
    op: Op,
    method: &'static str,
    target: String,
    upload_id: Option<String>,
    /// The decoded body the operation sends.
    body: Vec<u8>,
    /// Body files present before the request under test.
    files_before: BTreeSet<PathBuf>,
}

fn body_files(gw: &Gw) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for dir in std::fs::read_dir(gw.dir.path().join("bodies")).expect("bodies dir") {
        for file in std::fs::read_dir(dir.expect("entry").path()).expect("bodies subdir") {
            out.insert(file.expect("entry").path());
        }
    }
    out
}

/// A body larger than the inline limit, so that a stored one would be a file.
fn object_bytes() -> Vec<u8> {
    (0..10_000u32).map(|i| (i % 251) as u8).collect()
}

async fn fixture(op: Op) -> Fixture {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let (method, target, upload_id, body) = match op {
        Op::PutObject => ("PUT", "/bkt/obj".to_owned(), None, object_bytes()),
        Op::UploadPart | Op::CompleteMultipartUpload => {
            let r = gw.a(Method::POST, "/bkt/mp?uploads", b"").await;
            assert_eq!(r.status, 200, "{}", r.text());
            let id = r.xml("UploadId").expect("upload id");
            if let Op::UploadPart = op {
                ("PUT", format!("/bkt/mp?partNumber=1&uploadId={id}"), Some(id), object_bytes())
            } else {
                let part =
                    gw.a(Method::PUT, &format!("/bkt/mp?partNumber=1&uploadId={id}"), &object_bytes()).await;
                assert_eq!(part.status, 200, "{}", part.text());
                let etag = part.header("etag").expect("etag").to_owned();
                let xml = format!(
                    "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part>\
                     </CompleteMultipartUpload>"
                );
                ("POST", format!("/bkt/mp?uploadId={id}"), Some(id), xml.into_bytes())
            }
        }
    };
    let files_before = body_files(&gw);
    Fixture { gw, op, method, target, upload_id, body, files_before }
}

impl Fixture {
    fn req(&self) -> Req {
        Req::new(self.method, &self.target)
    }

    async fn send(&self, req: &Req, body: Vec<u8>) -> Resp {
        let mut builder = Request::builder().method(req.method.as_str()).uri(req.uri.as_str());
        for (name, value) in &req.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        self.gw.send(builder.body(Body::from(body)).expect("request")).await
    }

    async fn list(&self, target: &str) -> Resp {
        let r = self.gw.a(Method::GET, target, b"").await;
        assert_eq!(r.status, 200, "{target}: {}", r.text());
        r
    }

    /// Nothing of the request under test was stored.
    async fn assert_nothing_stored(&self, case: &str) {
        let objects = self.list("/bkt?list-type=2").await;
        assert!(objects.xml_all("Key").is_empty(), "{case}: no object: {}", objects.text());
        if let Some(id) = &self.upload_id {
            let parts = self.list(&format!("/bkt/mp?uploadId={id}")).await;
            let uploads = self.list("/bkt?uploads").await;
            assert_eq!(
                uploads.xml_all("UploadId"),
                std::slice::from_ref(id),
                "{case}: the upload is still open"
            );
            match self.op {
                Op::UploadPart => {
                    assert!(parts.xml_all("PartNumber").is_empty(), "{case}: no part: {}", parts.text())
                }
                _ => assert_eq!(parts.xml_all("PartNumber"), ["1"], "{case}: part 1 is untouched"),
            }
            assert_eq!(self.gw.a(Method::HEAD, "/bkt/mp", b"").await.status, 404, "{case}: no object");
        }
        assert_eq!(body_files(&self.gw), self.files_before, "{case}: no new body file");
        assert_eq!(self.gw.tmp_files(), 0, "{case}: no temporary file");
    }

    /// The request under test was stored (the intact twin of a failing case).
    async fn assert_stored(&self, case: &str) {
        match self.op {
            Op::PutObject => {
                let r = self.gw.a(Method::GET, "/bkt/obj", b"").await;
                assert_eq!((r.status.as_u16(), &r.body), (200, &self.body), "{case}");
            }
            Op::UploadPart => {
                let id = self.upload_id.as_deref().expect("upload");
                let parts = self.list(&format!("/bkt/mp?uploadId={id}")).await;
                assert_eq!(parts.xml_all("PartNumber"), ["1"], "{case}");
            }
            Op::CompleteMultipartUpload => {
                let r = self.gw.a(Method::GET, "/bkt/mp", b"").await;
                assert_eq!((r.status.as_u16(), r.body.len()), (200, object_bytes().len()), "{case}");
            }
        }
    }
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn user() -> Signer<'static> {
    Signer { access_key: USER_A.0, secret: USER_A.1, region: REGION, service: "s3", time: now() }
}

/// The head of a plain request carrying `body`, signed by `signer`.
fn plain(fx: &Fixture, signer: Signer<'_>) -> Req {
    let req = fx.req().header("content-length", &fx.body.len().to_string());
    signer.sign(&req, Signed::Bytes(&fx.body))
}

/// The body split in two chunks (an XML body too).
fn pieces(body: &[u8]) -> (&[u8], &[u8]) {
    body.split_at(body.len() * 4 / 5)
}

#[expect(clippy::big_endian_bytes, reason = "AWS encodes CRC32 big-endian")]
fn crc32(body: &[u8]) -> String {
    B64.encode(crc32fast::hash(body).to_be_bytes())
}

/// A signed aws-chunked request: its head (signed by aws-sigv4 with the streaming
/// `content_sha256`) and its body, built by `encode` from the chunk signer and the seed.
fn chunked(
    fx: &Fixture,
    content_sha256: &str,
    trailer: Option<&str>,
    encode: impl Fn(&ChunkSigner, &str) -> Vec<u8>,
) -> (Req, Vec<u8>) {
    let mut req = fx
        .req()
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", &fx.body.len().to_string());
    if let Some(trailer) = trailer {
        req = req.header("x-amz-trailer", trailer);
    }
    // The encoded length does not depend on the seed's value, only on its size.
    let probe = ChunkSigner::new(USER_A.1, "20240301T120000Z", REGION);
    let length = encode(&probe, &"0".repeat(64)).len();
    let req =
        user().sign(&req.header("content-length", &length.to_string()), Signed::Literal(content_sha256));
    let timestamp = req.get("x-amz-date").expect("signed").to_owned();
    let body = encode(&ChunkSigner::new(USER_A.1, &timestamp, REGION), &seed_signature(&req));
    assert_eq!(body.len(), length);
    (req, body)
}

/// Offset of the final chunk's header in a signed body without trailers.
fn final_chunk_at(body: &[u8]) -> usize {
    body.len() - "0;chunk-signature=".len() - 64 - "\r\n\r\n".len()
}

type Build = fn(&Fixture, bool) -> (Req, Vec<u8>);

/// One way a request can fail authentication: its intact twin (`false`) must succeed, and the
/// broken request (`true`) must be answered with `status` and `code`.
struct Case {
    name: &'static str,
    status: u16,
    code: &'static str,
    build: Build,
}

const CASES: &[Case] = &[
    Case {
        name: "a: wrong secret",
        status: 403,
        code: "SignatureDoesNotMatch",
        build: |fx, broken| {
            let secret = if broken { "not-the-secret" } else { USER_A.1 };
            (plain(fx, Signer { secret, ..user() }), fx.body.clone())
        },
    },
    Case {
        name: "b: unknown access key",
        status: 403,
        code: "InvalidAccessKeyId",
        build: |fx, broken| {
            let access_key = if broken { "AKIDNOBODY" } else { USER_A.0 };
            (plain(fx, Signer { access_key, ..user() }), fx.body.clone())
        },
    },
    Case {
        name: "c: wrong region in the credential scope",
        status: 400,
        code: "AuthorizationHeaderMalformed",
        build: |fx, broken| {
            let region = if broken { "eu-west-1" } else { REGION };
            (plain(fx, Signer { region, ..user() }), fx.body.clone())
        },
    },
    Case {
        name: "d: X-Amz-Date 16 minutes behind",
        status: 403,
        code: "RequestTimeTooSkewed",
        build: |fx, broken| {
            let off = Duration::from_secs(if broken { 16 * 60 } else { 60 });
            (plain(fx, Signer { time: now() - off, ..user() }), fx.body.clone())
        },
    },
    Case {
        name: "d: X-Amz-Date 16 minutes ahead",
        status: 403,
        code: "RequestTimeTooSkewed",
        build: |fx, broken| {
            let off = Duration::from_secs(if broken { 16 * 60 } else { 60 });
            (plain(fx, Signer { time: now() + off, ..user() }), fx.body.clone())
        },
    },
    Case {
        name: "e: expired presigned URL",
        status: 403,
        code: "AccessDenied",
        build: |fx, broken| {
            // Presigned an hour and a minute ago, valid for an hour (or, intact, for two).
            let expires = Duration::from_secs(if broken { 3600 } else { 7200 });
            let signer = Signer { time: now() - Duration::from_secs(3660), ..user() };
            let req = signer.presign(&fx.req(), expires).header("content-length", &fx.body.len().to_string());
            (req, fx.body.clone())
        },
    },
    Case {
        name: "f: signed aws-chunked body with one tampered chunk",
        status: 403,
        code: "SignatureDoesNotMatch",
        build: |fx, broken| {
            let (a, b) = pieces(&fx.body);
            let (req, mut body) = chunked(fx, SIGNED, None, |s, seed| s.encode(seed, &[a, b], None));
            if broken {
                // A byte of the second chunk's data (just before its closing CRLF).
                let at = final_chunk_at(&body) - 3;
                body[at] ^= 0x01;
            }
            (req, body)
        },
    },
    Case {
        name: "g: signed aws-chunked body without its final empty chunk",
        status: 400,
        code: "IncompleteBody",
        build: |fx, broken| {
            let (a, b) = pieces(&fx.body);
            // The body ends after the last data chunk's CRLF.
            chunked(fx, SIGNED, None, |s, seed| {
                let body = s.encode(seed, &[a, b], None);
                if broken {
                    body[..final_chunk_at(&body)].to_vec()
                } else {
                    body
                }
            })
        },
    },
    Case {
        name: "h: STREAMING-UNSIGNED-PAYLOAD-TRAILER with a bad seed signature",
        status: 403,
        code: "SignatureDoesNotMatch",
        build: |fx, broken| {
            let (a, b) = pieces(&fx.body);
            let crc = crc32(&fx.body);
            let (mut req, body) =
                chunked(fx, UNSIGNED_TRAILER, Some(CRC), |_, _| encode_unsigned(&[a, b], &[(CRC, &crc)]));
            if broken {
                let seed = seed_signature(&req);
                let forged: String = seed.chars().rev().collect();
                let auth = req.get("authorization").expect("signed").replace(&seed, &forged);
                req = req.set("authorization", &auth);
            }
            (req, body)
        },
    },
    Case {
        name: "i: signed trailer with a tampered checksum",
        status: 403,
        code: "SignatureDoesNotMatch",
        build: |fx, broken| {
            let (a, b) = pieces(&fx.body);
            let crc = crc32(&fx.body);
            let (req, body) = chunked(fx, SIGNED_TRAILER, Some(CRC), |s, seed| {
                s.encode(seed, &[a, b], Some(&[(CRC, &crc)]))
            });
            if !broken {
                return (req, body);
            }
            // Another (well-formed) value under the signature of the right one.
            let line = format!("{CRC}:{crc}\r\n");
            let at = body.len() - line.len() - "x-amz-trailer-signature:\r\n\r\n".len() - 64;
            assert!(body[at..].starts_with(line.as_bytes()));
            let at = at + CRC.len() + 1;
            let mut body = body;
            body[at..at + crc.len()].copy_from_slice(crc32(b"something else").as_bytes());
            (req, body)
        },
    },
    Case {
        name: "i: signed trailer with a tampered trailer signature",
        status: 403,
        code: "SignatureDoesNotMatch",
        build: |fx, broken| {
            let (a, b) = pieces(&fx.body);
            let crc = crc32(&fx.body);
            let (req, mut body) = chunked(fx, SIGNED_TRAILER, Some(CRC), |s, seed| {
                s.encode(seed, &[a, b], Some(&[(CRC, &crc)]))
            });
            if broken {
                let at = body.len() - "\r\n\r\n".len() - 1; // last hex digit of the signature
                body[at] = if body[at] == b'0' { b'1' } else { b'0' };
            }
            (req, body)
        },
    },
];

async fn run(op: Op) {
    for case in CASES {
        let intact = fixture(op).await;
        let (req, body) = (case.build)(&intact, false);
        let r = intact.send(&req, body).await;
        assert_eq!(r.status, 200, "{op:?} {} (intact): {}", case.name, r.text());
        intact.assert_stored(case.name).await;

        let fx = fixture(op).await;
        let (req, body) = (case.build)(&fx, true);
        let r = fx.send(&req, body).await;
        let what = format!("{op:?} {}", case.name);
        assert_eq!(
            (r.status.as_u16(), r.code().as_deref()),
            (case.status, Some(case.code)),
            "{what}: {}",
            r.text()
        );
        r.assert_error(case.status, case.code);
        if case.code == "AccessDenied" {
            assert_eq!(r.xml("Message").as_deref(), Some("Request has expired"), "{what}");
        }
        fx.assert_nothing_stored(&what).await;
    }
}

#[tokio::test]
async fn put_object_refused_stores_nothing() {
    run(Op::PutObject).await;
}

#[tokio::test]
async fn upload_part_refused_stores_nothing() {
    run(Op::UploadPart).await;
}

#[tokio::test]
async fn complete_multipart_upload_refused_stores_nothing() {
    run(Op::CompleteMultipartUpload).await;
}

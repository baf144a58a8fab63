//! Invariant: the verifier accepts, byte for byte, the signed requests published in AWS's
//! Amazon S3 API reference (credentials AKIAIOSFODNN7EXAMPLE, 2013-05-24, us-east-1,
//! examplebucket), and rejects each of them once any signed part changes.

mod auth_support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use auth_support::{assert_err, chunked_spec, decode, AK, SK};
use base64::Engine as _;
use gateway::auth::{authenticate, verify_payload_sha256, AuthConfig, Credentials, Payload};
use sha2::{Digest, Sha256};

const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// 2013-05-24T00:00:00Z, the timestamp of every documented example.
fn doc_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_369_353_600)
}

fn doc_request(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).expect("valid request").into_parts().0
}

fn auth_header(signed_headers: &str, signature: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,\
         SignedHeaders={signed_headers},Signature={signature}"
    )
}

fn creds() -> Credentials {
    Credentials::new(vec![(AK.to_owned(), SK.to_owned())])
}

/// "Signature Calculations for the Authorization Header: Transferring Payload in a Single
/// Chunk", example "GET Object" (a Range request for the first 10 bytes of test.txt).
#[test]
fn doc_get_object_with_range() {
    let auth = auth_header(
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    );
    let headers = [
        ("host", "examplebucket.s3.amazonaws.com"),
        ("range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY),
        ("x-amz-date", "20130524T000000Z"),
        ("authorization", auth.as_str()),
    ];
    let parts = doc_request("GET", "/test.txt", &headers);
    let ok = authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()).expect("documented request");
    assert_eq!(ok.access_key, AK);
    assert!(matches!(&ok.payload, Payload::Sha256(h) if h == EMPTY));

    let mut tampered = headers;
    tampered[1] = ("range", "bytes=0-10");
    let parts = doc_request("GET", "/test.txt", &tampered);
    assert_err(
        authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()),
        "SignatureDoesNotMatch",
        403,
    );
}

/// Same document, example "PUT Object": a signed payload, a `Date` header next to
/// `x-amz-date`, and a '$' in the key that the canonical URI encodes as %24.
#[test]
fn doc_put_object() {
    let body = b"Welcome to Amazon S3.";
    let hash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
    let auth = auth_header(
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
    );
    let headers = [
        ("host", "examplebucket.s3.amazonaws.com"),
        ("date", "Fri, 24 May 2013 00:00:00 GMT"),
        ("authorization", auth.as_str()),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ("x-amz-content-sha256", hash),
    ];
    // The key `test$file.text`, sent raw and sent percent-encoded: both canonicalize the same.
    for uri in ["/test$file.text", "/test%24file.text"] {
        let parts = doc_request("PUT", uri, &headers);
        let ok = authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()).expect(uri);
        let Payload::Sha256(expected) = ok.payload else { panic!("signed payload expected") };
        assert_eq!(expected, hash);
        let actual: [u8; 32] = Sha256::digest(body).into();
        verify_payload_sha256(&expected, &actual).expect("body matches");
        let other: [u8; 32] = Sha256::digest(b"Welcome to Amazon S3!").into();
        assert_err(verify_payload_sha256(&expected, &other), "XAmzContentSHA256Mismatch", 400);
    }
    let mut tampered = headers;
    tampered[4] = ("x-amz-storage-class", "STANDARD");
    let parts = doc_request("PUT", "/test$file.text", &tampered);
    assert_err(
        authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()),
        "SignatureDoesNotMatch",
        403,
    );
}

/// Same document, example "GET Bucket Lifecycle": a sub-resource with no value (`?lifecycle`).
#[test]
fn doc_get_bucket_lifecycle() {
    let auth = auth_header(
        "host;x-amz-content-sha256;x-amz-date",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
    );
    let headers = [
        ("host", "examplebucket.s3.amazonaws.com"),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-content-sha256", EMPTY),
        ("authorization", auth.as_str()),
    ];
    for uri in ["/?lifecycle", "/?lifecycle="] {
        let parts = doc_request("GET", uri, &headers);
        authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()).expect(uri);
    }
    let parts = doc_request("GET", "/?policy", &headers);
    assert_err(
        authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()),
        "SignatureDoesNotMatch",
        403,
    );
}

/// Same document, example "Get Bucket (List Objects)": query parameters are sorted.
#[test]
fn doc_list_objects() {
    let auth = auth_header(
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    );
    let headers = [
        ("host", "examplebucket.s3.amazonaws.com"),
        ("x-amz-date", "20130524T000000Z"),
        ("x-amz-content-sha256", EMPTY),
        ("authorization", auth.as_str()),
    ];
    for uri in ["/?max-keys=2&prefix=J", "/?prefix=J&max-keys=2"] {
        let parts = doc_request("GET", uri, &headers);
        authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()).expect(uri);
    }
    let parts = doc_request("GET", "/?max-keys=3&prefix=J", &headers);
    assert_err(
        authenticate(&parts, &creds(), &AuthConfig::default(), doc_time()),
        "SignatureDoesNotMatch",
        403,
    );
}

const PRESIGNED_URI: &str = "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
    &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
    &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
    &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

/// "Authenticating Requests: Using Query Parameters (AWS Signature Version 4)": the presigned
/// GET of test.txt valid for 86400 seconds.
#[test]
fn doc_presigned_url() {
    let headers = [("host", "examplebucket.s3.amazonaws.com")];
    let parts = doc_request("GET", PRESIGNED_URI, &headers);
    let cfg = AuthConfig::default();
    for offset_secs in [0, 3600, 86_400] {
        let now = doc_time() + Duration::from_secs(offset_secs);
        let ok = authenticate(&parts, &creds(), &cfg, now).expect("within validity");
        assert!(matches!(ok.payload, Payload::Unsigned));
    }
    let late = doc_time() + Duration::from_secs(86_401);
    let err = authenticate(&parts, &creds(), &cfg, late).expect_err("expired");
    assert_eq!(
        (err.code(), err.status(), err.message().as_str()),
        ("AccessDenied", 403, "Request has expired")
    );

    let parts = doc_request("GET", &PRESIGNED_URI.replace("test.txt", "test.txu"), &headers);
    assert_err(authenticate(&parts, &creds(), &cfg, doc_time()), "SignatureDoesNotMatch", 403);
    let parts = doc_request("GET", &PRESIGNED_URI.replace("86400", "86401"), &headers);
    assert_err(authenticate(&parts, &creds(), &cfg, doc_time()), "SignatureDoesNotMatch", 403);
}

const SEED: &str = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
const CHUNK1: &str = "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648";
const CHUNK2: &str = "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497";
const FINAL: &str = "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9";

fn chunked_head() -> http::request::Parts {
    let auth = auth_header(
        "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
         x-amz-decoded-content-length;x-amz-storage-class",
        SEED,
    );
    doc_request(
        "PUT",
        "/examplebucket/chunkObject.txt",
        &[
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("authorization", auth.as_str()),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
        ],
    )
}

fn chunked_body(final_sig: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(format!("10000;chunk-signature={CHUNK1}\r\n").as_bytes());
    body.extend_from_slice(&[b'a'; 65_536]);
    body.extend_from_slice(format!("\r\n400;chunk-signature={CHUNK2}\r\n").as_bytes());
    body.extend_from_slice(&[b'a'; 1024]);
    body.extend_from_slice(format!("\r\n0;chunk-signature={final_sig}\r\n\r\n").as_bytes());
    body
}

/// "Signature Calculations for the Authorization Header: Transferring Payload in Multiple
/// Chunks (Chunked Upload)": the seed signature, the two data chunks (64 KiB and 1 KiB of 'a')
/// and the final empty chunk, each with its documented signature.
#[test]
fn doc_chunked_upload() {
    let body = chunked_body(FINAL);
    assert_eq!(body.len(), 66_824, "the documented Content-Length");
    for step in [1, 7, 4096, 65_536, body.len()] {
        let spec = chunked_spec(authenticate(&chunked_head(), &creds(), &AuthConfig::default(), doc_time()));
        assert_eq!(spec.decoded_content_length(), 66_560);
        let (decoded, trailers) = decode(spec, &body, step).expect("documented body");
        assert_eq!(decoded.len(), 66_560);
        assert!(decoded.iter().all(|&b| b == b'a'));
        assert!(trailers.headers.is_empty());
    }
    // The final empty chunk's signature is checked too.
    let spec = chunked_spec(authenticate(&chunked_head(), &creds(), &AuthConfig::default(), doc_time()));
    assert_err(decode(spec, &chunked_body(CHUNK2), 1000), "SignatureDoesNotMatch", 403);
    // One changed data byte breaks the chain.
    let mut body = chunked_body(FINAL);
    body[5000] = b'b';
    let spec = chunked_spec(authenticate(&chunked_head(), &creds(), &AuthConfig::default(), doc_time()));
    assert_err(decode(spec, &body, 1000), "SignatureDoesNotMatch", 403);
}

const TRAILER_SEED: &str = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";
const TRAILER_CHUNK1: &str = "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2";
const TRAILER_CHUNK2: &str = "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7";
const TRAILER_FINAL: &str = "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992";
const TRAILER_SIGNATURE: &str = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435";
const TRAILER_CRC32C: &str = "sOO8/Q==";

/// The documented seed request of the trailer example. Its SignedHeaders are those of the
/// documented canonical request (the page's "Authorization header" line repeats the list of
/// the example without trailers, but the seed signature is computed over this one).
/// Content-Length is not signed; the documented value (66824) is that of the body without
/// trailers, so it is not sent here.
fn trailer_head() -> http::request::Parts {
    let auth = auth_header(
        "content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;\
         x-amz-storage-class;x-amz-trailer",
        TRAILER_SEED,
    );
    doc_request(
        "PUT",
        "/examplebucket/chunkObject.txt",
        &[
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("authorization", auth.as_str()),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("x-amz-trailer", "x-amz-checksum-crc32c"),
        ],
    )
}

fn trailer_body(final_sig: &str, crc32c: &str, trailer_sig: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(format!("10000;chunk-signature={TRAILER_CHUNK1}\r\n").as_bytes());
    body.extend_from_slice(&[b'a'; 65_536]);
    body.extend_from_slice(format!("\r\n400;chunk-signature={TRAILER_CHUNK2}\r\n").as_bytes());
    body.extend_from_slice(&[b'a'; 1024]);
    body.extend_from_slice(format!("\r\n0;chunk-signature={final_sig}\r\n").as_bytes());
    body.extend_from_slice(format!("x-amz-checksum-crc32c:{crc32c}\r\n").as_bytes());
    body.extend_from_slice(format!("x-amz-trailer-signature:{trailer_sig}\r\n\r\n").as_bytes());
    body
}

fn trailer_spec() -> gateway::auth::ChunkedSpec {
    chunked_spec(authenticate(&trailer_head(), &creds(), &AuthConfig::default(), doc_time()))
}

/// "Signature calculations for trailing headers (chunked uploads)", example "PUT Object": the
/// seed signature, the two data chunks, the final empty chunk and the signed
/// `x-amz-checksum-crc32c` trailer, each with its documented signature.
#[test]
#[expect(clippy::big_endian_bytes, reason = "AWS encodes CRC32C big-endian")]
fn doc_chunked_upload_with_signed_trailer() {
    // The published intermediate values, recomputed here so the vector is self-consistent:
    // the canonical request's hash, the trailer's hash, and the CRC32C of the 66560 'a's.
    let canonical_request = "PUT\n/examplebucket/chunkObject.txt\n\n\
        content-encoding:aws-chunked\nhost:s3.amazonaws.com\n\
        x-amz-content-sha256:STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER\n\
        x-amz-date:20130524T000000Z\nx-amz-decoded-content-length:66560\n\
        x-amz-storage-class:REDUCED_REDUNDANCY\nx-amz-trailer:x-amz-checksum-crc32c\n\n\
        content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;\
        x-amz-storage-class;x-amz-trailer\nSTREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
    assert_eq!(
        hex::encode(Sha256::digest(canonical_request)),
        "44d48b8c2f70eae815a0198cc73d7a546a73a93359c070abbaa5e6c7de112559"
    );
    assert_eq!(
        hex::encode(Sha256::digest("x-amz-checksum-crc32c:sOO8/Q==\n")),
        "1e376db7e1a34a8ef1c4bcee131a2d60a1cb62503747488624e10995f448d774"
    );
    let crc = crc32c::crc32c(&[b'a'; 66_560]);
    assert_eq!(base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes()), TRAILER_CRC32C);

    let body = trailer_body(TRAILER_FINAL, TRAILER_CRC32C, TRAILER_SIGNATURE);
    for step in [1, 7, 4096, 65_536, body.len()] {
        let spec = trailer_spec();
        assert!(spec.is_signed());
        assert_eq!(spec.decoded_content_length(), 66_560);
        assert_eq!(spec.declared_trailers(), ["x-amz-checksum-crc32c".to_owned()]);
        let (decoded, trailers) = decode(spec, &body, step).expect("documented body");
        assert_eq!(decoded.len(), 66_560);
        assert!(decoded.iter().all(|&b| b == b'a'));
        assert_eq!(trailers.headers, [("x-amz-checksum-crc32c".to_owned(), TRAILER_CRC32C.to_owned())]);
    }
}

/// The same documented request with its trailer, the trailer's signature or the final chunk's
/// signature altered: each is refused.
#[test]
fn doc_chunked_upload_with_tampered_trailer() {
    // Another checksum under the documented trailer signature.
    let body = trailer_body(TRAILER_FINAL, "AAAAAA==", TRAILER_SIGNATURE);
    assert_err(decode(trailer_spec(), &body, 1000), "SignatureDoesNotMatch", 403);
    // The documented checksum under another trailer signature (the final chunk's, chained
    // from nothing).
    let body = trailer_body(TRAILER_FINAL, TRAILER_CRC32C, TRAILER_FINAL);
    assert_err(decode(trailer_spec(), &body, 1000), "SignatureDoesNotMatch", 403);
    // The trailer signature of the example without trailers' final chunk: the chain breaks at
    // the final chunk already.
    let body = trailer_body(FINAL, TRAILER_CRC32C, TRAILER_SIGNATURE);
    assert_err(decode(trailer_spec(), &body, 1000), "SignatureDoesNotMatch", 403);
    // No trailer signature at all.
    let mut body = trailer_body(TRAILER_FINAL, TRAILER_CRC32C, TRAILER_SIGNATURE);
    let cut = body.len() - "x-amz-trailer-signature:\r\n\r\n".len() - 64;
    body.truncate(cut);
    body.extend_from_slice(b"\r\n");
    assert_err(decode(trailer_spec(), &body, 1000), "SignatureDoesNotMatch", 403);
    // The seed is bound to the declared trailer: a different x-amz-trailer does not verify.
    let mut head = trailer_head();
    head.headers.insert("x-amz-trailer", http::HeaderValue::from_static("x-amz-checksum-crc32"));
    assert_err(
        authenticate(&head, &creds(), &AuthConfig::default(), doc_time()),
        "SignatureDoesNotMatch",
        403,
    );
}

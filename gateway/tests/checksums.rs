//! Invariant: `x-amz-checksum-*` values are computed over every upload, verified against what
//! the client sent (headers or aws-chunked trailers; mismatch → BadDigest, nothing stored),
//! and returned on GET/HEAD only with `x-amz-checksum-mode: ENABLED`.

mod common;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::*;
use http::Method;

#[expect(clippy::big_endian_bytes, reason = "AWS encodes CRC32 big-endian")]
fn crc32_b64(data: &[u8]) -> String {
    let mut h = crc32fast::Hasher::new();
    h.update(data);
    B64.encode(h.finalize().to_be_bytes())
}

fn sha256_b64(data: &[u8]) -> String {
    B64.encode(<sha2::Sha256 as sha2::Digest>::digest(data))
}

/// An aws-chunked body in the STREAMING-UNSIGNED-PAYLOAD-TRAILER form, as boto3 sends it.
fn unsigned_trailer_body(data: &[u8], chunk: usize, trailer: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for c in data.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("0\r\n{trailer}\r\n\r\n").as_bytes());
    out
}

async fn put_trailer(gw: &Gw, key: &str, data: &[u8], trailer_value: &str) -> Resp {
    let body = unsigned_trailer_body(data, 64 * 1024, &format!("x-amz-checksum-crc32:{trailer_value}"));
    let decoded = data.len().to_string();
    gw.req(
        USER_A,
        Method::PUT,
        &format!("/bkt/{key}"),
        &[
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", &decoded),
            ("x-amz-trailer", "x-amz-checksum-crc32"),
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ],
        &body,
    )
    .await
}

#[tokio::test]
async fn header_checksums_are_stored_and_returned_on_request() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let data = b"checksummed body";
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-sha256", &sha256_b64(data)), ("x-amz-checksum-crc32", &crc32_b64(data))],
            data,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-amz-checksum-crc32"), Some(crc32_b64(data).as_str()));
    let plain = gw.a(Method::HEAD, "/bkt/k", b"").await;
    assert_eq!(plain.header("x-amz-checksum-sha256"), None);
    let r = gw.req(USER_A, Method::HEAD, "/bkt/k", &[("x-amz-checksum-mode", "ENABLED")], b"").await;
    assert_eq!(r.header("x-amz-checksum-sha256"), Some(sha256_b64(data).as_str()));
    assert_eq!(r.header("x-amz-checksum-crc32"), Some(crc32_b64(data).as_str()));
    // Algorithm named without a value: computed and stored anyway.
    let r = gw.req(USER_A, Method::PUT, "/bkt/k2", &[("x-amz-sdk-checksum-algorithm", "CRC32C")], data).await;
    assert_eq!(r.status, 200);
    let r = gw.req(USER_A, Method::GET, "/bkt/k2", &[("x-amz-checksum-mode", "ENABLED")], b"").await;
    assert!(r.header("x-amz-checksum-crc32c").is_some());
}

#[tokio::test]
async fn aws_chunked_trailer_checksums_are_verified() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let r = put_trailer(&gw, "good", &data, &crc32_b64(&data)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let get = gw.req(USER_A, Method::GET, "/bkt/good", &[("x-amz-checksum-mode", "ENABLED")], b"").await;
    assert_eq!(get.body, data);
    assert_eq!(get.header("x-amz-checksum-crc32"), Some(crc32_b64(&data).as_str()));
    assert_eq!(get.header("content-encoding"), None, "aws-chunked is a transfer detail, not stored");
    let etag = format!("\"{}\"", hex::encode(<md5::Md5 as md5::Digest>::digest(&data)));
    assert_eq!(get.header("etag"), Some(etag.as_str()));

    let r = put_trailer(&gw, "bad", &data, "AAAAAA==").await;
    r.assert_error(400, "BadDigest");
    gw.a(Method::GET, "/bkt/bad", b"").await.assert_error(404, "NoSuchKey");
    assert_eq!(gw.body_files(), 1, "only the good object's body");
    assert_eq!(gw.tmp_files(), 0);
}

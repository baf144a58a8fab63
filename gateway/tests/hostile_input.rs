//! Hostile-input matrix: each case gets its exact status and S3 code, and leaves nothing
//! behind (no object record, no body file, no temporary file).

mod common;

use std::time::Duration;

use axum::body::Body;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::*;
use http::{Method, Request};
use tower::ServiceExt;

async fn gw() -> Gw {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw
}

#[track_caller]
fn assert_nothing_stored_sync(gw: &Gw) {
    assert_eq!(gw.body_files(), 0, "no body file");
    assert_eq!(gw.tmp_files(), 0, "no temporary file");
}

async fn assert_nothing_stored(gw: &Gw) {
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert!(r.xml_all("Key").is_empty(), "no object: {}", r.text());
    assert_nothing_stored_sync(gw);
}

#[tokio::test]
async fn over_long_key() {
    let gw = gw().await;
    let key = "k".repeat(1025);
    gw.a(Method::PUT, &format!("/bkt/{key}"), &vec![0u8; 10_000]).await.assert_error(400, "KeyTooLongError");
    gw.a(Method::POST, &format!("/bkt/{key}?uploads"), b"").await.assert_error(400, "KeyTooLongError");
    assert_nothing_stored(&gw).await;
    // 1024 bytes is fine.
    gw.put("bkt", &"k".repeat(1024), b"x").await;
}

#[tokio::test]
async fn metadata_too_large() {
    let gw = gw().await;
    let big = "v".repeat(2100);
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-meta-big", &big)], &vec![0u8; 10_000])
        .await
        .assert_error(400, "MetadataTooLarge");
    assert_nothing_stored(&gw).await;
    let ok = "v".repeat(2000);
    let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-meta-ok", &ok)], b"x").await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn headers_over_8_kib() {
    let gw = gw().await;
    let pad = "p".repeat(9000);
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-pad", &pad)], b"x")
        .await
        .assert_error(400, "RequestHeaderSectionTooLarge");
    assert_nothing_stored(&gw).await;
}

#[tokio::test]
async fn bad_max_keys_and_tokens() {
    let gw = gw().await;
    for k in ["a", "b", "c"] {
        gw.put("bkt", k, b"x").await;
    }
    for bad in ["-1", "abc"] {
        gw.a(Method::GET, &format!("/bkt?list-type=2&max-keys={bad}"), b"")
            .await
            .assert_error(400, "InvalidArgument");
    }
    for garbage in ["garbage", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "%00%01", "----"] {
        gw.a(Method::GET, &format!("/bkt?list-type=2&continuation-token={garbage}"), b"")
            .await
            .assert_error(400, "InvalidArgument");
    }
    let r = gw.a(Method::GET, "/bkt?list-type=2&max-keys=1", b"").await;
    let token = r.xml("NextContinuationToken").unwrap();
    // Tampered: flip one character.
    let mut chars: Vec<char> = token.chars().collect();
    chars[2] = if chars[2] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.into_iter().collect();
    gw.a(Method::GET, &format!("/bkt?list-type=2&continuation-token={tampered}"), b"")
        .await
        .assert_error(400, "InvalidArgument");
    // Bound to the listing: another prefix, delimiter or encoding refuses it.
    for other in ["&prefix=a", "&delimiter=%2F", "&encoding-type=url"] {
        gw.a(Method::GET, &format!("/bkt?list-type=2&continuation-token={token}{other}"), b"")
            .await
            .assert_error(400, "InvalidArgument");
    }
    let r = gw.a(Method::GET, &format!("/bkt?list-type=2&continuation-token={token}"), b"").await;
    assert_eq!(r.xml_all("Key"), ["b", "c"]);
}

#[tokio::test]
async fn malformed_xml_doctype_and_oversized_deletes() {
    let gw = gw().await;
    gw.put("bkt", "keep", b"x").await;
    gw.a(Method::POST, "/bkt?delete", b"<Delete><Object><Key>keep</Key></Delete>")
        .await
        .assert_error(400, "MalformedXML");
    let doctype = b"<?xml version=\"1.0\"?><!DOCTYPE d [<!ENTITY k \"keep\">]><Delete><Object><Key>&k;</Key></Object></Delete>";
    gw.a(Method::POST, "/bkt?delete", doctype).await.assert_error(400, "MalformedXML");
    let mut many = String::from("<Delete>");
    for i in 0..1000 {
        many.push_str(&format!("<Object><Key>k{i}</Key></Object>"));
    }
    many.push_str("<Object><Key>keep</Key></Object></Delete>");
    gw.a(Method::POST, "/bkt?delete", many.as_bytes()).await.assert_error(400, "MalformedXML");
    let huge = format!("<Delete><Object><Key>keep</Key></Object>{}</Delete>", " ".repeat(2 << 20));
    gw.a(Method::POST, "/bkt?delete", huge.as_bytes()).await.assert_error(400, "MalformedXML");
    let deep = format!("{}{}", "<a>".repeat(100), "</a>".repeat(100));
    gw.a(Method::POST, "/bkt?delete", deep.as_bytes()).await.assert_error(400, "MalformedXML");
    // Nothing was deleted.
    assert_eq!(gw.a(Method::GET, "/bkt/keep", b"").await.body, b"x");
}

/// A key with a control character can be stored (its name travels in the URL), but XML 1.0
/// cannot carry it: a DeleteObjects body naming it, raw or as a character reference, is
/// MalformedXML, as S3 answers, and deletes nothing; DeleteObject by URL deletes it.
#[tokio::test]
async fn delete_objects_refuses_control_characters() {
    let gw = gw().await;
    gw.put("bkt", "keep", b"x").await;
    gw.put("bkt", "ctl\u{1}x", b"y").await;
    for key in ["ctl\u{1}x", "ctl&#1;x", "ctl&#x1;x"] {
        let body =
            format!("<Delete><Object><Key>keep</Key></Object><Object><Key>{key}</Key></Object></Delete>");
        gw.a(Method::POST, "/bkt?delete", body.as_bytes()).await.assert_error(400, "MalformedXML");
    }
    assert_eq!(gw.a(Method::GET, "/bkt/keep", b"").await.body, b"x");
    assert_eq!(gw.a(Method::GET, "/bkt/ctl%01x", b"").await.body, b"y");
    assert_eq!(gw.a(Method::DELETE, "/bkt/ctl%01x", b"").await.status, 204);
    assert_eq!(gw.a(Method::GET, "/bkt/ctl%01x", b"").await.status, 404);
}

#[tokio::test]
async fn content_md5_and_checksum_mismatches() {
    let gw = gw().await;
    let body = vec![3u8; 10_000];
    let wrong_md5 = B64.encode([0u8; 16]);
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("content-md5", &wrong_md5)], &body)
        .await
        .assert_error(400, "BadDigest");
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("content-md5", "not-base64!")], &body)
        .await
        .assert_error(400, "InvalidDigest");
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-checksum-crc32", "AAAAAA==")], &body)
        .await
        .assert_error(400, "BadDigest");
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-checksum-sha256", "AAAA")], &body)
        .await
        .assert_error(400, "InvalidDigest");
    assert_nothing_stored(&gw).await;
    let good_md5 = B64.encode(<md5::Md5 as md5::Digest>::digest(&body));
    let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("content-md5", &good_md5)], &body).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn payload_hash_mismatch() {
    let gw = gw().await;
    // Signed for one body, sent with another of the same length.
    let mut req = signed(USER_A, Method::PUT, "/bkt/k", &[], &vec![1u8; 10_000]);
    *req.body_mut() = Body::from(vec![2u8; 10_000]);
    gw.send(req).await.assert_error(400, "XAmzContentSHA256Mismatch");
    assert_nothing_stored(&gw).await;
}

#[tokio::test]
async fn content_length_with_transfer_encoding() {
    let gw = gw().await;
    let mut req = signed(USER_A, Method::PUT, "/bkt/k", &[], b"abc");
    req.headers_mut().insert("transfer-encoding", "chunked".parse().unwrap());
    gw.send(req).await.assert_error(400, "InvalidRequest");
    assert_nothing_stored(&gw).await;
}

#[tokio::test]
async fn missing_content_length_and_bad_utf8_key() {
    let gw = gw().await;
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("content-length", "omit")], b"")
        .await
        .assert_error(411, "MissingContentLength");
    gw.a(Method::PUT, "/bkt/%FF%FE", b"x").await.assert_error(400, "InvalidArgument");
    gw.a(Method::PUT, "/bkt/k", b"x").await;
    gw.a(Method::GET, "/bkt/k?partNumber=abc", b"").await.assert_error(400, "InvalidArgument");
    gw.req(USER_A, Method::GET, "/bkt/k?partNumber=1", &[("range", "bytes=0-1")], b"")
        .await
        .assert_error(400, "InvalidRequest");
    gw.req(USER_A, Method::PUT, "/bkt/k2", &[("x-amz-storage-class", "BOGUS")], b"x")
        .await
        .assert_error(400, "InvalidStorageClass");
}

#[tokio::test]
async fn requests_past_the_inflight_cap_get_slow_down() {
    let gw = Gw::with_settings(gateway::Settings { max_inflight: 1, ..Default::default() });
    gw.create_bucket("bkt").await;
    // A PutObject whose body never arrives holds the only slot.
    let (parts, _) = signed(
        USER_A,
        Method::PUT,
        "/bkt/slow",
        &[("x-amz-content-sha256", "UNSIGNED-PAYLOAD")],
        b"0123456789",
    )
    .into_parts();
    let stalled = Request::from_parts(
        parts,
        Body::from_stream(futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>()),
    );
    let router = gw.router();
    let held = tokio::spawn(async move { router.oneshot(stalled).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.a(Method::GET, "/", b"").await.assert_error(503, "SlowDown");
    // Liveness stays answerable at saturation.
    assert_eq!(gw.send(anonymous(Method::GET, "/health", b"")).await.status, 200);
    held.abort();
    let _ = held.await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(gw.a(Method::GET, "/", b"").await.status, 200);
    assert_nothing_stored_sync(&gw);
}

/// A GetObject holds its in-flight slot while its body streams, until the body is finished or
/// dropped (a client going away); a HEAD, whose answer has no body, holds nothing once
/// answered.
#[tokio::test]
async fn a_streaming_get_holds_its_inflight_slot_until_the_body_is_done() {
    use http_body_util::BodyExt as _;
    let gw = Gw::with_settings(gateway::Settings { max_inflight: 1, ..Default::default() });
    gw.create_bucket("bkt").await;
    let data = vec![9u8; 1 << 20];
    gw.put("bkt", "big", &data).await;
    for consume in [true, false] {
        let resp = gw.router().oneshot(signed(USER_A, Method::GET, "/bkt/big", &[], b"")).await.unwrap();
        assert_eq!(resp.status(), 200);
        gw.a(Method::GET, "/", b"").await.assert_error(503, "SlowDown");
        assert_eq!(gw.send(anonymous(Method::GET, "/health", b"")).await.status, 200);
        if consume {
            assert_eq!(resp.into_body().collect().await.unwrap().to_bytes().len(), data.len());
        } else {
            drop(resp);
        }
        assert_eq!(gw.a(Method::GET, "/", b"").await.status, 200, "consume: {consume}");
    }
    let head = gw.router().oneshot(signed(USER_A, Method::HEAD, "/bkt/big", &[], b"")).await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(gw.a(Method::GET, "/", b"").await.status, 200, "a HEAD answer holds no slot");
    drop(head);
}

/// A response whose body is in memory once the handler returns (an inline object, an XML
/// document, an error) holds no in-flight slot while it is sent, even when nobody reads it.
#[tokio::test]
async fn responses_in_memory_hold_no_inflight_slot_while_sent() {
    let gw = Gw::with_settings(gateway::Settings { max_inflight: 1, ..Default::default() });
    gw.create_bucket("bkt").await;
    gw.put("bkt", "small", b"inline bytes").await;
    for target in ["/bkt/small", "/bkt?list-type=2", "/bkt/missing"] {
        let resp = gw.router().oneshot(signed(USER_A, Method::GET, target, &[], b"")).await.unwrap();
        assert_ne!(resp.status(), 503, "{target}");
        let next = gw.a(Method::GET, "/", b"").await;
        assert_eq!(next.status, 200, "{target} held its slot: {}", next.text());
        drop(resp);
    }
    let r = gw.a(Method::GET, "/bkt/small", b"").await;
    assert_eq!(r.body, b"inline bytes");
    let r = gw.req(USER_A, Method::GET, "/bkt/small", &[("range", "bytes=2-7")], b"").await;
    assert_eq!((r.status.as_u16(), r.body.as_slice()), (206, &b"line b"[..]));
}

/// One signature must stand for one request. A copy source signed as `bkt/a,bkt/b` and sent
/// as two header lines canonicalizes the same (the lines joined with ','), while the handler
/// would read only the first: refused with 400, whatever the signed header.
#[tokio::test]
async fn a_signed_header_sent_twice_is_refused() {
    let gw = gw().await;
    gw.put("bkt", "a", b"secret of a").await;
    let mut req = signed(USER_A, Method::PUT, "/bkt/copy", &[("x-amz-copy-source", "bkt/a,bkt/b")], b"");
    let headers = req.headers_mut();
    headers.remove("x-amz-copy-source");
    headers.append("x-amz-copy-source", http::HeaderValue::from_static("bkt/a"));
    headers.append("x-amz-copy-source", http::HeaderValue::from_static("bkt/b"));
    gw.send(req).await.assert_error(400, "InvalidArgument");
    assert_eq!(gw.a(Method::HEAD, "/bkt/copy", b"").await.status.as_u16(), 404, "nothing was copied");
}

/// The signature sorts repeated query parameters and routing would read the first: one
/// signature over `prefix=a&prefix=zzz` would stand for two listings. Refused with 400.
#[tokio::test]
async fn a_query_parameter_given_twice_is_refused() {
    let gw = gw().await;
    gw.put("bkt", "a1", b"x").await;
    for target in ["/bkt?list-type=2&prefix=a&prefix=zzz", "/bkt?list-type=2&prefix=zzz&prefix=a"] {
        gw.a(Method::GET, target, b"").await.assert_error(400, "InvalidArgument");
    }
    gw.a(Method::GET, "/bkt?list-type=2&list-type=2", b"").await.assert_error(400, "InvalidArgument");
}

/// An encoded '/' in the bucket segment is decoded by the signature's canonical URI but not
/// by routing, which splits the path first: the two would disagree on the bucket. Refused.
#[tokio::test]
async fn an_encoded_slash_in_the_bucket_is_refused() {
    let gw = gw().await;
    gw.put("bkt", "x/key", b"x").await;
    gw.a(Method::GET, "/bkt%2Fx/key", b"").await.assert_error(400, "InvalidBucketName");
    gw.a(Method::GET, "/bkt%2fx", b"").await.assert_error(400, "InvalidBucketName");
}

/// A 416 names the object's size (`Content-Range: bytes */SIZE`), as RFC 9110 and S3 do.
#[tokio::test]
async fn an_unsatisfiable_range_names_the_size() {
    let gw = gw().await;
    gw.put("bkt", "ten", b"0123456789").await;
    let r = gw.req(USER_A, Method::GET, "/bkt/ten", &[("range", "bytes=100-")], b"").await;
    r.assert_error(416, "InvalidRange");
    assert_eq!(r.header("content-range"), Some("bytes */10"));
}

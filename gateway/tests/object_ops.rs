//! Invariant: what PutObject stores, GetObject/HeadObject return byte for byte with the same
//! ETag (the MD5 of the body) and headers; DeleteObject removes it (and is 204 when absent).

mod common;

use common::*;
use http::Method;

#[tokio::test]
async fn put_get_head_delete_round_trip() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let body = b"hello world";
    let put = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/dir/a.txt",
            &[("content-type", "text/plain"), ("x-amz-meta-mtime", "123")],
            body,
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.text());
    assert_eq!(put.header("etag"), Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\""));
    assert!(put.header("x-amz-request-id").is_some());

    let get = gw.a(Method::GET, "/bkt/dir/a.txt", b"").await;
    assert_eq!(get.status, 200);
    assert_eq!(get.body, body);
    assert_eq!(get.header("etag"), Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\""));
    assert_eq!(get.header("content-type"), Some("text/plain"));
    assert_eq!(get.header("x-amz-meta-mtime"), Some("123"));
    assert_eq!(get.header("content-length"), Some("11"));

    let head = gw.a(Method::HEAD, "/bkt/dir/a.txt", b"").await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), Some("11"));
    assert!(head.header("last-modified").is_some());

    let del = gw.a(Method::DELETE, "/bkt/dir/a.txt", b"").await;
    assert_eq!(del.status, 204);
    gw.a(Method::GET, "/bkt/dir/a.txt", b"").await.assert_error(404, "NoSuchKey");
    let head = gw.a(Method::HEAD, "/bkt/dir/a.txt", b"").await;
    assert_eq!(head.status, 404);
    assert!(head.body.is_empty(), "HEAD errors carry no body");
    assert_eq!(gw.a(Method::DELETE, "/bkt/dir/a.txt", b"").await.status, 204);
}

#[tokio::test]
async fn large_bodies_go_to_files_and_are_reclaimed() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let big = vec![7u8; 100_000];
    gw.put("bkt", "big", &big).await;
    assert_eq!(gw.body_files(), 1);
    let get = gw.a(Method::GET, "/bkt/big", b"").await;
    assert_eq!(get.body, big);
    // Overwrite: the old body file is reclaimed after the new metadata commits.
    gw.put("bkt", "big", &vec![8u8; 50_000]).await;
    assert_eq!(gw.body_files(), 1);
    gw.a(Method::DELETE, "/bkt/big", b"").await;
    assert_eq!(gw.body_files(), 0);
    assert_eq!(gw.tmp_files(), 0);
}

#[tokio::test]
async fn ranges_and_conditionals() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "k", b"0123456789").await;
    let r = gw.req(USER_A, Method::GET, "/bkt/k", &[("range", "bytes=2-4")], b"").await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"234");
    assert_eq!(r.header("content-range"), Some("bytes 2-4/10"));
    let r = gw.req(USER_A, Method::GET, "/bkt/k", &[("range", "bytes=-3")], b"").await;
    assert_eq!(r.body, b"789");
    let r = gw.req(USER_A, Method::GET, "/bkt/k", &[("range", "bytes=7-")], b"").await;
    assert_eq!(r.body, b"789");
    gw.req(USER_A, Method::GET, "/bkt/k", &[("range", "bytes=10-")], b"")
        .await
        .assert_error(416, "InvalidRange");

    let etag = gw.a(Method::HEAD, "/bkt/k", b"").await.header("etag").unwrap().to_owned();
    let r = gw.req(USER_A, Method::GET, "/bkt/k", &[("if-none-match", &etag)], b"").await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    gw.req(USER_A, Method::GET, "/bkt/k", &[("if-match", "\"nope\"")], b"")
        .await
        .assert_error(412, "PreconditionFailed");
    let r = gw.req(USER_A, Method::GET, "/bkt/k", &[("if-match", &etag)], b"").await;
    assert_eq!(r.status, 200);
}

/// RFC 7232 §4.1: a 304 carries the ETag, Last-Modified and caching headers a 200 would
/// have, and no body.
#[tokio::test]
async fn not_modified_carries_the_validators() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let headers = [("cache-control", "max-age=60"), ("expires", "Thu, 01 Jan 2099 00:00:00 GMT")];
    let r = gw.req(USER_A, Method::PUT, "/bkt/k", &headers, b"0123456789").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let full = gw.a(Method::HEAD, "/bkt/k", b"").await;
    let etag = full.header("etag").unwrap().to_owned();
    let last_modified = full.header("last-modified").unwrap().to_owned();
    for method in [Method::GET, Method::HEAD] {
        for condition in [("if-none-match", etag.as_str()), ("if-modified-since", last_modified.as_str())] {
            let r = gw.req(USER_A, method.clone(), "/bkt/k", &[condition], b"").await;
            assert_eq!(r.status, 304, "{method} {condition:?}");
            assert!(r.body.is_empty());
            assert_eq!(r.header("etag"), Some(etag.as_str()), "{method} {condition:?}");
            assert_eq!(r.header("last-modified"), Some(last_modified.as_str()));
            assert_eq!(r.header("cache-control"), Some("max-age=60"));
            assert_eq!(r.header("expires"), Some("Thu, 01 Jan 2099 00:00:00 GMT"));
            assert!(r.header("x-amz-request-id").is_some());
            assert_eq!(r.header("content-type"), None, "no representation metadata on a 304");
        }
    }
}

#[tokio::test]
async fn conditional_puts_are_atomic_with_the_write() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("if-none-match", "*")], b"one").await;
    assert_eq!(r.status, 200);
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("if-none-match", "*")], b"two")
        .await
        .assert_error(412, "PreconditionFailed");
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("if-match", "\"abc\"")], b"two")
        .await
        .assert_error(412, "PreconditionFailed");
    let etag = gw.a(Method::HEAD, "/bkt/k", b"").await.header("etag").unwrap().to_owned();
    let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("if-match", &etag)], b"three").await;
    assert_eq!(r.status, 200);
    assert_eq!(gw.a(Method::GET, "/bkt/k", b"").await.body, b"three");
    gw.req(USER_A, Method::PUT, "/bkt/missing", &[("if-match", &etag)], b"x")
        .await
        .assert_error(404, "NoSuchKey");
    // If-None-Match with an ETag list (Ceph's and MinIO's reading): refused while the current
    // ETag is listed, written when it is not, and a missing key is written.
    let etag = gw.a(Method::HEAD, "/bkt/k", b"").await.header("etag").unwrap().to_owned();
    let listed = format!("\"other\", {etag}");
    gw.req(USER_A, Method::PUT, "/bkt/k", &[("if-none-match", &listed)], b"four")
        .await
        .assert_error(412, "PreconditionFailed");
    assert_eq!(gw.a(Method::GET, "/bkt/k", b"").await.body, b"three");
    let r = gw.req(USER_A, Method::PUT, "/bkt/k", &[("if-none-match", "\"other\"")], b"five").await;
    assert_eq!(r.status, 200);
    assert_eq!(gw.a(Method::GET, "/bkt/k", b"").await.body, b"five");
    let r = gw.req(USER_A, Method::PUT, "/bkt/new", &[("if-none-match", &etag)], b"six").await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn presigned_get_and_put() {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings};
    use std::time::{Duration, SystemTime};

    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let presign = |method: &str, target: &str| {
        let creds = aws_credential_types::Credentials::new(USER_A.0, USER_A.1, None, None, "test");
        let identity = creds.into();
        let mut settings = SigningSettings::default();
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(300));
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .unwrap()
            .into();
        let url = format!("http://localhost{target}");
        let signable = SignableRequest::new(
            method,
            url,
            [("host", "localhost")].into_iter(),
            SignableBody::UnsignedPayload,
        )
        .unwrap();
        let (instructions, _) = sign(signable, &params).unwrap().into_parts();
        let mut query: Vec<String> = Vec::new();
        for (k, v) in instructions.params() {
            query.push(format!("{k}={}", encode_key(v).replace('/', "%2F")));
        }
        format!("{target}?{}", query.join("&"))
    };
    let put = presign("PUT", "/bkt/p");
    let req = http::Request::builder()
        .method(Method::PUT)
        .uri(&put)
        .header("host", "localhost")
        .header("content-length", "9")
        .body(axum::body::Body::from("presigned"))
        .unwrap();
    let r = gw.send(req).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let get = presign("GET", "/bkt/p");
    let r = gw.send(anonymous(Method::GET, &get, b"")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"presigned");
}

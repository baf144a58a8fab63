//! Object tagging: tags set by `x-amz-tagging` on PutObject, CopyObject (directive COPY or
//! REPLACE) and CreateMultipartUpload, replaced by PutObjectTagging, removed by
//! DeleteObjectTagging, counted in `x-amz-tagging-count`; S3's limits refused with its codes
//! and nothing stored; the object itself never changes with its tags.

mod common;

use common::*;
use http::Method;

fn tagging(tags: &[(&str, &str)]) -> Vec<u8> {
    let mut out = String::from("<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet>");
    for (k, v) in tags {
        out.push_str(&format!("<Tag><Key>{k}</Key><Value>{v}</Value></Tag>"));
    }
    out.push_str("</TagSet></Tagging>");
    out.into_bytes()
}

async fn tags_of(gw: &Gw, target: &str) -> Vec<(String, String)> {
    let r = gw.a(Method::GET, &format!("{target}?tagging"), b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.xml_all("Key").into_iter().zip(r.xml_all("Value")).collect()
}

fn pairs(tags: &[(&str, &str)]) -> Vec<(String, String)> {
    tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test]
async fn tags_are_set_replaced_counted_and_removed() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let r = gw
        .req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-tagging", "project=holt&note=two%20words")], b"body")
        .await;
    assert_eq!(r.status, 200);
    let etag = r.header("etag").unwrap().to_owned();
    assert_eq!(tags_of(&gw, "/bkt/k").await, pairs(&[("project", "holt"), ("note", "two words")]));
    let head = gw.a(Method::HEAD, "/bkt/k", b"").await;
    assert_eq!(head.header("x-amz-tagging-count"), Some("2"));

    let r = gw.a(Method::PUT, "/bkt/k?tagging", &tagging(&[("stage", "final")])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tags_of(&gw, "/bkt/k").await, pairs(&[("stage", "final")]));
    let get = gw.a(Method::GET, "/bkt/k", b"").await;
    assert_eq!(
        (get.body.as_slice(), get.header("etag")),
        (&b"body"[..], Some(etag.as_str())),
        "object unchanged"
    );
    assert_eq!(get.header("x-amz-tagging-count"), Some("1"));

    assert_eq!(gw.a(Method::DELETE, "/bkt/k?tagging", b"").await.status, 204);
    assert_eq!(tags_of(&gw, "/bkt/k").await, pairs(&[]));
    assert_eq!(gw.a(Method::HEAD, "/bkt/k", b"").await.header("x-amz-tagging-count"), None);
    assert_eq!(gw.a(Method::GET, "/bkt/k", b"").await.body, b"body");

    gw.a(Method::GET, "/bkt/missing?tagging", b"").await.assert_error(404, "NoSuchKey");
    gw.a(Method::PUT, "/bkt/missing?tagging", &tagging(&[("a", "b")])).await.assert_error(404, "NoSuchKey");
    gw.req(USER_B, Method::GET, "/bkt/k?tagging", &[], b"").await.assert_error(403, "AccessDenied");
}

#[tokio::test]
async fn copies_and_multipart_uploads_carry_tags() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.req(USER_A, Method::PUT, "/bkt/src", &[("x-amz-tagging", "a=1")], b"source").await;
    let copy = |dst: &'static str, extra: Vec<(&'static str, &'static str)>| {
        let mut headers = vec![("x-amz-copy-source", "/bkt/src")];
        headers.extend(extra);
        let gw = &gw;
        async move { gw.req(USER_A, Method::PUT, dst, &headers, b"").await }
    };
    assert_eq!(copy("/bkt/copied", vec![]).await.status, 200);
    assert_eq!(tags_of(&gw, "/bkt/copied").await, pairs(&[("a", "1")]));
    let r =
        copy("/bkt/replaced", vec![("x-amz-tagging-directive", "REPLACE"), ("x-amz-tagging", "b=2")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(tags_of(&gw, "/bkt/replaced").await, pairs(&[("b", "2")]));
    copy("/bkt/bad", vec![("x-amz-tagging-directive", "MERGE")]).await.assert_error(400, "InvalidArgument");

    let r =
        gw.req(USER_A, Method::POST, "/bkt/mp?uploads", &[("x-amz-tagging", "kind=multipart")], b"").await;
    let id = r.xml("UploadId").unwrap();
    let part = gw.a(Method::PUT, &format!("/bkt/mp?partNumber=1&uploadId={id}"), b"one part").await;
    let etag = part.header("etag").unwrap().to_owned();
    let done = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    );
    assert_eq!(gw.a(Method::POST, &format!("/bkt/mp?uploadId={id}"), done.as_bytes()).await.status, 200);
    assert_eq!(tags_of(&gw, "/bkt/mp").await, pairs(&[("kind", "multipart")]));
}

#[tokio::test]
async fn s3_limits_are_enforced_and_nothing_is_stored() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
    let long_key = format!("{}=v", "k".repeat(129));
    let long_value = format!("k={}", "v".repeat(257));
    let cases = [
        (eleven.join("&"), "BadRequest"),
        (long_key, "InvalidTag"),
        (long_value, "InvalidTag"),
        ("a=1&a=2".to_owned(), "InvalidTag"),
        ("=v".to_owned(), "InvalidTag"),
        // Characters outside S3's set, in a key or a value, and the reserved prefix.
        ("a%21=v".to_owned(), "InvalidTag"),
        ("k=semi%3Bcolon".to_owned(), "InvalidTag"),
        ("k=tab%09".to_owned(), "InvalidTag"),
        ("aws%3Acreated=v".to_owned(), "InvalidTag"),
    ];
    for (header, code) in &cases {
        gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-tagging", header)], b"v")
            .await
            .assert_error(400, code);
        assert_eq!(gw.a(Method::HEAD, "/bkt/k", b"").await.status, 404, "{header}: nothing stored");
    }
    // Every character S3 allows, letters of any script included.
    let allowed = "Key%2B-%3D._:/@%20%C3%A9%E6%97%A5=Value+%2B-%3D._:/@9";
    assert_eq!(
        gw.req(USER_A, Method::PUT, "/bkt/chars", &[("x-amz-tagging", allowed)], b"v").await.status,
        200
    );
    assert_eq!(tags_of(&gw, "/bkt/chars").await, pairs(&[("Key+-=._:/@ é日", "Value +-=._:/@9")]));
    // At the limits exactly: accepted (lengths in characters, not bytes).
    let ten: Vec<String> = (0..10).map(|i| format!("k{i}=v")).collect();
    let at_limit = format!("{}&{}={}", ten[..9].join("&"), "é".repeat(128), "é".repeat(256));
    let encoded = at_limit.replace('é', "%C3%A9");
    assert_eq!(gw.req(USER_A, Method::PUT, "/bkt/k", &[("x-amz-tagging", &encoded)], b"v").await.status, 200);
    assert_eq!(tags_of(&gw, "/bkt/k").await.len(), 10);
    // The same limits on PutObjectTagging, which then leaves the tags as they were.
    let dup = tagging(&[("a", "1"), ("a", "2")]);
    gw.a(Method::PUT, "/bkt/k?tagging", &dup).await.assert_error(400, "InvalidTag");
    let many: Vec<(String, String)> = (0..11).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    gw.a(Method::PUT, "/bkt/k?tagging", &tagging(&many)).await.assert_error(400, "BadRequest");
    gw.a(Method::PUT, "/bkt/k?tagging", b"<Tagging><Nope/></Tagging>")
        .await
        .assert_error(400, "MalformedXML");
    assert_eq!(tags_of(&gw, "/bkt/k").await.len(), 10);
}

/// A PutObjectTagging whose body arrives after its bucket changed hands (emptied, deleted, and
/// created again by another user who put an object of the same name) is refused, and the new
/// owner's object keeps its tags.
#[tokio::test]
async fn a_slow_tagging_body_cannot_tag_the_next_owners_object() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "k", b"a's").await;

    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (polled_tx, polled) = tokio::sync::oneshot::channel::<()>();
    let document = bytes::Bytes::from(tagging(&[("owner", "a")]));
    let slow = futures_util::stream::once(async move {
        let _ = polled_tx.send(());
        let _ = released.await;
        Ok::<_, std::io::Error>(document)
    });
    let (parts, _) =
        signed(USER_A, Method::PUT, "/bkt/k?tagging", &[], &tagging(&[("owner", "a")])).into_parts();
    let req = http::Request::from_parts(parts, axum::body::Body::from_stream(slow));
    let router = gw.router();
    let pending = tokio::spawn(async move {
        use tower::ServiceExt;
        router.oneshot(req).await.expect("infallible").status()
    });
    polled.await.expect("the handler reads the body");

    assert_eq!(gw.a(Method::DELETE, "/bkt/k", b"").await.status, 204);
    assert_eq!(gw.a(Method::DELETE, "/bkt", b"").await.status, 204);
    assert_eq!(gw.req(USER_B, Method::PUT, "/bkt", &[], b"").await.status, 200);
    let r = gw.req(USER_B, Method::PUT, "/bkt/k", &[("x-amz-tagging", "owner=b")], b"b's").await;
    assert_eq!(r.status, 200, "{}", r.text());

    release.send(()).unwrap();
    assert_eq!(pending.await.unwrap(), 403, "the bucket is no longer the caller's");
    let r = gw.req(USER_B, Method::GET, "/bkt/k?tagging", &[], b"").await;
    assert_eq!(r.xml_all("Value"), ["b"], "the new owner's tags stay");
}

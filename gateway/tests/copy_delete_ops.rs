//! Invariant: CopyObject copies bytes and (COPY) metadata or (REPLACE) the request's headers,
//! takes the storage class from the request under either directive, refuses a same-key copy
//! that changes neither metadata nor storage class, honours copy-source preconditions; DeleteObjects
//! deletes what it names (Quiet hides successes), reclaiming bodies.

mod common;

use common::*;
use http::Method;

#[tokio::test]
async fn copy_object_directives() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.req(
        USER_A,
        Method::PUT,
        "/bkt/src",
        &[("content-type", "text/x-a"), ("x-amz-meta-a", "1")],
        b"payload",
    )
    .await;
    let r = gw.req(USER_A, Method::PUT, "/bkt/dst%20copy", &[("x-amz-copy-source", "/bkt/src")], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("<CopyObjectResult"));
    let get = gw.a(Method::GET, "/bkt/dst%20copy", b"").await;
    assert_eq!(get.body, b"payload");
    assert_eq!(get.header("content-type"), Some("text/x-a"));
    assert_eq!(get.header("x-amz-meta-a"), Some("1"));

    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/dst2",
            &[
                ("x-amz-copy-source", "bkt/src?versionId=null"),
                ("x-amz-metadata-directive", "REPLACE"),
                ("content-type", "text/x-b"),
                ("x-amz-meta-b", "2"),
            ],
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let head = gw.a(Method::HEAD, "/bkt/dst2", b"").await;
    assert_eq!(head.header("content-type"), Some("text/x-b"));
    assert_eq!(head.header("x-amz-meta-b"), Some("2"));
    assert_eq!(head.header("x-amz-meta-a"), None);

    // Onto itself: only with REPLACE (how rclone sets modification times).
    gw.req(USER_A, Method::PUT, "/bkt/src", &[("x-amz-copy-source", "/bkt/src")], b"")
        .await
        .assert_error(400, "InvalidRequest");
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/src",
            &[
                ("x-amz-copy-source", "/bkt/src"),
                ("x-amz-metadata-directive", "REPLACE"),
                ("x-amz-meta-mtime", "42"),
            ],
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let head = gw.a(Method::HEAD, "/bkt/src", b"").await;
    assert_eq!(head.header("x-amz-meta-mtime"), Some("42"));
    assert_eq!(gw.a(Method::GET, "/bkt/src", b"").await.body, b"payload");

    // Copy-source preconditions.
    let etag = head.header("etag").unwrap().to_owned();
    gw.req(
        USER_A,
        Method::PUT,
        "/bkt/c",
        &[("x-amz-copy-source", "/bkt/src"), ("x-amz-copy-source-if-match", "\"x\"")],
        b"",
    )
    .await
    .assert_error(412, "PreconditionFailed");
    gw.req(
        USER_A,
        Method::PUT,
        "/bkt/c",
        &[("x-amz-copy-source", "/bkt/src"), ("x-amz-copy-source-if-none-match", &etag)],
        b"",
    )
    .await
    .assert_error(412, "PreconditionFailed");
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/c",
            &[("x-amz-copy-source", "/bkt/src"), ("x-amz-copy-source-if-match", &etag)],
            b"",
        )
        .await;
    assert_eq!(r.status, 200);
    gw.req(USER_A, Method::PUT, "/bkt/c", &[("x-amz-copy-source", "/bkt/missing")], b"")
        .await
        .assert_error(404, "NoSuchKey");
    gw.req(USER_A, Method::PUT, "/bkt/c", &[("x-amz-copy-source", "/nobucket/x")], b"")
        .await
        .assert_error(404, "NoSuchBucket");
}

/// The storage class of a copy comes from the request under COPY too (absent: STANDARD), and
/// a copy onto itself that changes only the storage class is legal and takes effect.
#[tokio::test]
async fn copy_object_storage_class_comes_from_the_request() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.req(USER_A, Method::PUT, "/bkt/src", &[("content-type", "text/x-a"), ("x-amz-meta-a", "1")], b"data")
        .await;
    let class = |h: &Resp| h.header("x-amz-storage-class").map(str::to_owned);

    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/src",
            &[("x-amz-copy-source", "/bkt/src"), ("x-amz-storage-class", "STANDARD_IA")],
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let head = gw.a(Method::HEAD, "/bkt/src", b"").await;
    assert_eq!(class(&head).as_deref(), Some("STANDARD_IA"));
    assert_eq!(head.header("content-type"), Some("text/x-a"), "COPY keeps the metadata");
    assert_eq!(head.header("x-amz-meta-a"), Some("1"));
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert_eq!(r.xml_all("StorageClass"), ["STANDARD_IA"]);

    // Explicit COPY directive, to another key, with another class.
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            "/bkt/dst",
            &[
                ("x-amz-copy-source", "/bkt/src"),
                ("x-amz-metadata-directive", "COPY"),
                ("x-amz-storage-class", "GLACIER_IR"),
            ],
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let head = gw.a(Method::HEAD, "/bkt/dst", b"").await;
    assert_eq!(class(&head).as_deref(), Some("GLACIER_IR"));
    assert_eq!(head.header("x-amz-meta-a"), Some("1"));
    // No class on the request: the copy is STANDARD, whatever the source's class.
    let r = gw.req(USER_A, Method::PUT, "/bkt/dst2", &[("x-amz-copy-source", "/bkt/dst")], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(class(&gw.a(Method::HEAD, "/bkt/dst2", b"").await), None);

    // A self-copy changing nothing is still illegal; a bad class is refused either way.
    gw.req(
        USER_A,
        Method::PUT,
        "/bkt/src",
        &[("x-amz-copy-source", "/bkt/src"), ("x-amz-metadata-directive", "COPY")],
        b"",
    )
    .await
    .assert_error(400, "InvalidRequest");
    for target in ["/bkt/src", "/bkt/other"] {
        gw.req(
            USER_A,
            Method::PUT,
            target,
            &[("x-amz-copy-source", "/bkt/src"), ("x-amz-storage-class", "BOGUS")],
            b"",
        )
        .await
        .assert_error(400, "InvalidStorageClass");
    }
    assert_eq!(class(&gw.a(Method::HEAD, "/bkt/src", b"").await).as_deref(), Some("STANDARD_IA"));
}

#[tokio::test]
async fn copy_of_a_file_body_is_independent() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let big = vec![5u8; 50_000];
    gw.put("bkt", "src", &big).await;
    gw.req(USER_A, Method::PUT, "/bkt/dst", &[("x-amz-copy-source", "/bkt/src")], b"").await;
    assert_eq!(gw.body_files(), 2);
    gw.a(Method::DELETE, "/bkt/src", b"").await;
    assert_eq!(gw.a(Method::GET, "/bkt/dst", b"").await.body, big);
    assert_eq!(gw.body_files(), 1);
}

#[expect(clippy::big_endian_bytes, reason = "AWS encodes CRC32 big-endian")]
fn crc32_b64(data: &[u8]) -> String {
    let mut h = crc32fast::Hasher::new();
    h.update(data);
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, h.finalize().to_be_bytes())
}

fn delete_body(keys: &[&str], quiet: bool) -> Vec<u8> {
    let mut s = String::from("<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    if quiet {
        s.push_str("<Quiet>true</Quiet>");
    }
    for k in keys {
        s.push_str(&format!("<Object><Key>{k}</Key></Object>"));
    }
    s.push_str("</Delete>");
    s.into_bytes()
}

#[tokio::test]
async fn delete_objects() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for k in ["a", "b", "c"] {
        gw.put("bkt", k, &vec![1u8; 10_000]).await;
    }
    assert_eq!(gw.body_files(), 3);
    // boto3 >= 1.36 sends a CRC32 checksum and no Content-MD5.
    let body = delete_body(&["a", "missing"], false);
    let crc = crc32_b64(&body);
    let r = gw.req(USER_A, Method::POST, "/bkt?delete", &[("x-amz-checksum-crc32", &crc)], &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml_all("Key"), ["a", "missing"]);
    let r = gw.a(Method::POST, "/bkt?delete", &delete_body(&["b"], true)).await;
    assert_eq!(r.status, 200);
    assert!(r.xml_all("Key").is_empty(), "quiet hides successes");
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert_eq!(r.xml_all("Key"), ["c"]);
    assert_eq!(gw.body_files(), 1);
    // A bad key is an <Error> entry, not a failed request.
    let long = "k".repeat(1025);
    let r = gw.a(Method::POST, "/bkt?delete", &delete_body(&[&long, "c"], false)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.xml_all("Code"), ["KeyTooLongError"]);
    assert!(gw.a(Method::GET, "/bkt?list-type=2", b"").await.xml_all("Key").is_empty());
}

/// Objects are unversioned: their one version is `null`. A request naming any other version
/// finds nothing, and a delete of it deletes nothing (as in DeleteObjects); it never reaches the
/// current object.
#[tokio::test]
async fn version_ids_other_than_null_name_no_object() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "k", b"data").await;
    gw.a(Method::GET, "/bkt/k?versionId=3HL4kqtJlcpXroDTDmJ", b"").await.assert_error(404, "NoSuchVersion");
    let r = gw.a(Method::HEAD, "/bkt/k?versionId=3HL4kqtJlcpXroDTDmJ", b"").await;
    assert_eq!(r.status, 404);
    assert!(r.body.is_empty(), "a HEAD response carries no body");
    gw.a(Method::GET, "/bkt/k?versionId=", b"").await.assert_error(400, "InvalidArgument");
    let r = gw.a(Method::GET, "/bkt/k?versionId=null", b"").await;
    assert_eq!((r.status.as_u16(), r.body.as_slice()), (200, &b"data"[..]));

    let r = gw.a(Method::DELETE, "/bkt/k?versionId=3HL4kqtJlcpXroDTDmJ", b"").await;
    assert_eq!(r.status, 204);
    assert_eq!(
        gw.a(Method::HEAD, "/bkt/k", b"").await.status,
        200,
        "deleting another version kept the object"
    );
    gw.a(Method::DELETE, "/bkt/k?versionId=", b"").await.assert_error(400, "InvalidArgument");
    assert_eq!(gw.a(Method::HEAD, "/bkt/k", b"").await.status, 200);
    assert_eq!(gw.a(Method::DELETE, "/bkt/k?versionId=null", b"").await.status, 204);
    gw.a(Method::GET, "/bkt/k", b"").await.assert_error(404, "NoSuchKey");
    // A missing bucket is still NoSuchBucket, whatever the version.
    gw.a(Method::GET, "/nobkt/k?versionId=x", b"").await.assert_error(404, "NoSuchBucket");
}

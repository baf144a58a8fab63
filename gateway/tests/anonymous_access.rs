//! Anonymous access, both ways: requests without any signature get exactly what the bucket's
//! policy or the `public-read` ACLs grant, and nothing else; policies the gateway cannot
//! honour are refused by name; policies and ACLs are kept by the bucket's owner only and go
//! with the bucket.

mod common;

use common::*;
use http::Method;

/// What `mc anonymous set download` puts.
fn download_policy(bucket: &str) -> String {
    format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"AWS":["*"]}},"Action":["s3:GetBucketLocation","s3:ListBucket"],"Resource":["arn:aws:s3:::{bucket}"]}},{{"Effect":"Allow","Principal":{{"AWS":["*"]}},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::{bucket}/*"]}}]}}"#
    )
}

/// Anyone may upload under `drop/`, and nothing else.
fn upload_policy(bucket: &str) -> String {
    format!(
        r#"{{"Version":"2012-10-17","Statement":{{"Effect":"Allow","Principal":"*","Action":["s3:PutObject","s3:AbortMultipartUpload","s3:ListMultipartUploadParts"],"Resource":"arn:aws:s3:::{bucket}/drop/*"}}}}"#
    )
}

/// An unsigned request, with the Content-Length a client sends.
fn unsigned(method: Method, target: &str, body: &[u8]) -> http::Request<axum::body::Body> {
    let sends_body = !body.is_empty() || method == Method::PUT || method == Method::POST;
    let mut req = anonymous(method, target, body);
    if sends_body {
        req.headers_mut().insert("content-length", body.len().into());
    }
    req
}

async fn anon(gw: &Gw, method: Method, target: &str, body: &[u8]) -> Resp {
    gw.send(unsigned(method, target, body)).await
}

#[tokio::test]
async fn a_download_policy_lets_anyone_read_and_list_and_nothing_more() {
    let gw = Gw::new();
    gw.create_bucket("pics").await;
    gw.put("pics", "a/1.jpg", b"one").await;
    anon(&gw, Method::GET, "/pics/a/1.jpg", b"").await.assert_error(403, "AccessDenied");
    gw.a(Method::GET, "/pics?policy", b"").await.assert_error(404, "NoSuchBucketPolicy");

    let r = gw.a(Method::PUT, "/pics?policy", download_policy("pics").as_bytes()).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let r = gw.a(Method::GET, "/pics?policy", b"").await;
    assert_eq!(r.text(), download_policy("pics"), "the document as given");

    let r = anon(&gw, Method::GET, "/pics/a/1.jpg", b"").await;
    assert_eq!((r.status.as_u16(), r.body.as_slice()), (200, &b"one"[..]));
    assert_eq!(anon(&gw, Method::HEAD, "/pics/a/1.jpg", b"").await.status, 200);
    let r = anon(&gw, Method::GET, "/pics?list-type=2&prefix=a/", b"").await;
    assert_eq!(r.xml_all("Key"), ["a/1.jpg"]);
    // Listings never show anyone the owner's access key.
    for listing in ["/pics?list-type=2&fetch-owner=true", "/pics", "/pics?versions"] {
        let r = anon(&gw, Method::GET, listing, b"").await;
        assert!(!r.text().contains(USER_A.0), "{listing}: {}", r.text());
    }
    assert!(gw.a(Method::GET, "/pics", b"").await.text().contains(USER_A.0), "signed, the owner is shown");
    assert_eq!(anon(&gw, Method::GET, "/pics?location", b"").await.status, 200);
    anon(&gw, Method::GET, "/pics/a/missing", b"").await.assert_error(404, "NoSuchKey");
    // As in S3, response header overrides are for signed requests only.
    let r = anon(&gw, Method::GET, "/pics/a/1.jpg?response-content-type=text%2Fhtml", b"").await;
    r.assert_error(400, "InvalidRequest");

    // Everything the policy does not grant is still refused, and nothing is stored.
    anon(&gw, Method::PUT, "/pics/a/2.jpg", b"two").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::DELETE, "/pics/a/1.jpg", b"").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::GET, "/pics?policy", b"").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::GET, "/pics/a/1.jpg?tagging", b"").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::GET, "/pics?uploads", b"").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::GET, "/", b"").await.assert_error(403, "AccessDenied");
    assert_eq!(gw.a(Method::HEAD, "/pics/a/2.jpg", b"").await.status, 404);
    // A copy would read its source with the owner's rights: never anonymous.
    gw.create_bucket("secret").await;
    gw.put("secret", "s", b"secret").await;
    let mut copy = unsigned(Method::PUT, "/pics/a/copy", b"");
    copy.headers_mut().insert("x-amz-copy-source", "/secret/s".parse().unwrap());
    gw.send(copy).await.assert_error(403, "AccessDenied");
    // Other buckets of the same owner stay private.
    anon(&gw, Method::GET, "/secret/s", b"").await.assert_error(403, "AccessDenied");

    assert_eq!(gw.a(Method::DELETE, "/pics?policy", b"").await.status, 204);
    anon(&gw, Method::GET, "/pics/a/1.jpg", b"").await.assert_error(403, "AccessDenied");
}

#[tokio::test]
async fn an_upload_policy_on_a_prefix_lets_anyone_write_there_only() {
    let gw = Gw::new();
    gw.create_bucket("inbox").await;
    assert_eq!(gw.a(Method::PUT, "/inbox?policy", upload_policy("inbox").as_bytes()).await.status, 204);
    let r = anon(&gw, Method::PUT, "/inbox/drop/report.txt", b"from anyone").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::GET, "/inbox/drop/report.txt", b"").await.body, b"from anyone");
    anon(&gw, Method::PUT, "/inbox/other.txt", b"x").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::GET, "/inbox/drop/report.txt", b"").await.assert_error(403, "AccessDenied");
    // Setting an ACL or tags needs rights of their own.
    let mut tagged = unsigned(Method::PUT, "/inbox/drop/t.txt", b"x");
    tagged.headers_mut().insert("x-amz-tagging", "a=b".parse().unwrap());
    gw.send(tagged).await.assert_error(403, "AccessDenied");

    // A multipart upload, anonymously from start to end.
    let r = anon(&gw, Method::POST, "/inbox/drop/big.bin?uploads", b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.xml("UploadId").unwrap();
    let part = vec![7u8; 5 << 20];
    let r = anon(&gw, Method::PUT, &format!("/inbox/drop/big.bin?partNumber=1&uploadId={id}"), &part).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let etag = r.header("etag").unwrap().to_owned();
    let r =
        anon(&gw, Method::POST, &format!("/inbox/drop/big.bin?uploadId={id}"), &complete_body(&[(1, &etag)]))
            .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        gw.a(Method::HEAD, "/inbox/drop/big.bin", b"").await.header("content-length"),
        Some("5242880")
    );
}

/// As in S3: without a grant to list the bucket, a missing object is 403, not 404, so that a
/// grant to read objects does not reveal which keys exist.
#[tokio::test]
async fn without_a_grant_to_list_a_missing_object_is_access_denied() {
    let gw = Gw::new();
    gw.create_bucket("reads").await;
    gw.put("reads", "here.txt", b"here").await;
    let read_only = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::reads/*"}]}"#;
    assert_eq!(gw.a(Method::PUT, "/reads?policy", read_only.as_bytes()).await.status, 204);
    assert_eq!(anon(&gw, Method::GET, "/reads/here.txt", b"").await.body, b"here");
    anon(&gw, Method::GET, "/reads/missing.txt", b"").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::GET, "/reads?list-type=2", b"").await.assert_error(403, "AccessDenied");
    // The owner still gets 404.
    gw.a(Method::GET, "/reads/missing.txt", b"").await.assert_error(404, "NoSuchKey");
}

#[tokio::test]
async fn public_read_acls_open_a_bucket_listing_or_one_object() {
    let gw = Gw::new();
    let r = gw.req(USER_A, Method::PUT, "/open", &[("x-amz-acl", "public-read")], b"").await;
    assert_eq!(r.status, 200);
    gw.put("open", "private.txt", b"p").await;
    let r = gw.req(USER_A, Method::PUT, "/open/public.txt", &[("x-amz-acl", "public-read")], b"pub").await;
    assert_eq!(r.status, 200);

    // A public bucket may be listed; only a public object read.
    let r = anon(&gw, Method::GET, "/open?list-type=2", b"").await;
    assert_eq!(r.xml_all("Key"), ["private.txt", "public.txt"]);
    assert_eq!(anon(&gw, Method::GET, "/open/public.txt", b"").await.body, b"pub");
    anon(&gw, Method::GET, "/open/private.txt", b"").await.assert_error(403, "AccessDenied");
    anon(&gw, Method::PUT, "/open/new.txt", b"n").await.assert_error(403, "AccessDenied");

    // The ACL calls show and change it.
    let r = gw.a(Method::GET, "/open/public.txt?acl", b"").await;
    assert!(
        r.text().contains("AllUsers") && r.xml_all("Permission") == ["FULL_CONTROL", "READ"],
        "{}",
        r.text()
    );
    let r = gw.a(Method::GET, "/open/private.txt?acl", b"").await;
    assert_eq!(r.xml_all("Permission"), ["FULL_CONTROL"]);
    assert_eq!(
        gw.req(USER_A, Method::PUT, "/open/private.txt?acl", &[("x-amz-acl", "public-read")], b"")
            .await
            .status,
        200
    );
    assert_eq!(anon(&gw, Method::GET, "/open/private.txt", b"").await.body, b"p");
    assert_eq!(gw.req(USER_A, Method::PUT, "/open?acl", &[("x-amz-acl", "private")], b"").await.status, 200);
    anon(&gw, Method::GET, "/open?list-type=2", b"").await.assert_error(403, "AccessDenied");
    assert_eq!(gw.a(Method::GET, "/open?acl", b"").await.xml_all("Permission"), ["FULL_CONTROL"]);

    // An AccessControlPolicy granting AllUsers READ is public-read; the object is unchanged.
    let owner = USER_A.0;
    let document = format!(
        r#"<AccessControlPolicy><Owner><ID>{owner}</ID></Owner><AccessControlList>
        <Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser"><ID>{owner}</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>
        <Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>READ</Permission></Grant>
        </AccessControlList></AccessControlPolicy>"#
    );
    assert_eq!(gw.a(Method::PUT, "/open?acl", document.as_bytes()).await.status, 200);
    assert_eq!(anon(&gw, Method::GET, "/open?list-type=2", b"").await.status, 200);
    // Overwriting an object without x-amz-acl makes it private again, as in S3.
    gw.put("open", "public.txt", b"v2").await;
    anon(&gw, Method::GET, "/open/public.txt", b"").await.assert_error(403, "AccessDenied");
    // A multipart upload created public-read completes into a public object.
    let r = gw.req(USER_A, Method::POST, "/open/up?uploads", &[("x-amz-acl", "public-read")], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.xml("UploadId").unwrap();
    let r = gw.a(Method::PUT, &format!("/open/up?partNumber=1&uploadId={id}"), b"multipart").await;
    let etag = r.header("etag").unwrap().to_owned();
    let r = gw.a(Method::POST, &format!("/open/up?uploadId={id}"), &complete_body(&[(1, &etag)])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anon(&gw, Method::GET, "/open/up", b"").await.body, b"multipart");
}

#[tokio::test]
async fn policies_the_gateway_cannot_honour_are_refused_and_owners_alone_set_them() {
    let gw = Gw::new();
    gw.create_bucket("pics").await;
    let condition = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}]}"#;
    let r = gw.a(Method::PUT, "/pics?policy", condition.as_bytes()).await;
    r.assert_error(501, "NotImplemented");
    assert!(r.text().contains("Condition"), "{}", r.text());
    gw.a(Method::PUT, "/pics?policy", b"not json").await.assert_error(400, "MalformedPolicy");
    let elsewhere = download_policy("other");
    gw.a(Method::PUT, "/pics?policy", elsewhere.as_bytes()).await.assert_error(400, "MalformedPolicy");
    gw.a(Method::GET, "/pics?policy", b"").await.assert_error(404, "NoSuchBucketPolicy");
    let big = format!("{}{}", " ".repeat(21 * 1024), download_policy("pics"));
    assert!(gw.a(Method::PUT, "/pics?policy", big.as_bytes()).await.status.is_client_error());

    let policy = download_policy("pics");
    gw.req(USER_B, Method::PUT, "/pics?policy", &[], policy.as_bytes())
        .await
        .assert_error(403, "AccessDenied");
    assert_eq!(gw.a(Method::PUT, "/pics?policy", policy.as_bytes()).await.status, 204);
    gw.req(USER_B, Method::GET, "/pics?policy", &[], b"").await.assert_error(403, "AccessDenied");
    gw.req(USER_B, Method::DELETE, "/pics?policy", &[], b"").await.assert_error(403, "AccessDenied");

    // The policy goes with the bucket.
    assert_eq!(gw.a(Method::DELETE, "/pics", b"").await.status, 204);
    assert_eq!(gw.req(USER_B, Method::PUT, "/pics", &[], b"").await.status, 200);
    gw.req(USER_B, Method::GET, "/pics?policy", &[], b"").await.assert_error(404, "NoSuchBucketPolicy");
    assert_eq!(gw.req(USER_B, Method::PUT, "/pics/k", &[], b"b's").await.status, 200);
    anon(&gw, Method::GET, "/pics/k", b"").await.assert_error(403, "AccessDenied");
}

/// A read let in by the object's own `public-read` ACL serves only a record that still has
/// it. The grant is checked on the record before the handler reads it again: while the owner
/// overwrites the object, alternately public (`public`) and private (`secret`), anonymous
/// GETs must never be given the private body (before the handler checked the record it
/// serves, some were).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_object_overwritten_privately_is_not_served_under_its_old_acl() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let gw = Arc::new(Gw::new());
    gw.create_bucket("race").await;
    let public = |gw: Arc<Gw>| async move {
        let r = gw.req(USER_A, Method::PUT, "/race/doc", &[("x-amz-acl", "public-read")], b"public").await;
        assert_eq!(r.status, 200, "{}", r.text());
    };
    public(Arc::clone(&gw)).await;
    let done = Arc::new(AtomicBool::new(false));
    let (served, denied, leaked) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (gw, done) = (Arc::clone(&gw), Arc::clone(&done));
            let (served, denied, leaked) = (Arc::clone(&served), Arc::clone(&denied), Arc::clone(&leaked));
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    let r = anon(&gw, Method::GET, "/race/doc", b"").await;
                    match (r.status.as_u16(), r.body.as_slice()) {
                        (200, b"public") => served.fetch_add(1, Ordering::Relaxed),
                        (200, _) => leaked.fetch_add(1, Ordering::Relaxed),
                        (403, _) => denied.fetch_add(1, Ordering::Relaxed),
                        (status, _) => panic!("anonymous GET: {status} {}", r.text()),
                    };
                }
            })
        })
        .collect();
    for _ in 0..2_000 {
        let r = gw.put("race", "doc", b"secret").await;
        assert_eq!(r.status, 200, "{}", r.text());
        public(Arc::clone(&gw)).await;
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.expect("reader");
    }
    let (served, denied, leaked) =
        (served.load(Ordering::Relaxed), denied.load(Ordering::Relaxed), leaked.load(Ordering::Relaxed));
    println!(
        "anonymous GETs: {served} served the public body, {denied} denied, {leaked} given the private one"
    );
    assert!(served > 0 && denied > 0, "the reads overlapped both states");
    assert_eq!(leaked, 0, "anonymous GETs given the body of a private overwrite");
}

//! Invariant: buckets are owned. CreateBucket/HeadBucket/DeleteBucket/ListBuckets/
//! GetBucketLocation/GetBucketVersioning act only for the owner; other users get AccessDenied
//! (BucketAlreadyExists on create); anonymous requests get AccessDenied.

mod common;

use common::*;
use gateway::Settings;
use http::Method;

#[tokio::test]
async fn create_head_delete() {
    let gw = Gw::new();
    let r = gw.a(Method::PUT, "/bkt", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("location"), Some("/bkt"));
    let r = gw.a(Method::HEAD, "/bkt", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-amz-bucket-region"), Some("us-east-1"));
    // Re-creating a bucket you own: 200 in us-east-1 (AWS's legacy behaviour), its objects
    // kept; another user's bucket: 409 BucketAlreadyExists.
    gw.put("bkt", "kept", b"v").await;
    let r = gw.a(Method::PUT, "/bkt", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(gw.a(Method::GET, "/bkt/kept", b"").await.body, b"v");
    gw.a(Method::DELETE, "/bkt/kept", b"").await;
    gw.req(USER_B, Method::PUT, "/bkt", &[], b"").await.assert_error(409, "BucketAlreadyExists");
    let cfg = b"<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
        <LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>";
    assert_eq!(gw.a(Method::PUT, "/bkt2", cfg).await.status, 200);
    gw.a(Method::PUT, "/bkt3", b"<CreateBucketConfiguration>").await.assert_error(400, "MalformedXML");
    assert_eq!(gw.a(Method::HEAD, "/bkt3", b"").await.status, 404, "nothing stored");

    gw.put("bkt", "k", b"v").await;
    gw.a(Method::DELETE, "/bkt", b"").await.assert_error(409, "BucketNotEmpty");
    gw.a(Method::DELETE, "/bkt/k", b"").await;
    // An upload in progress also keeps the bucket.
    let r = gw.a(Method::POST, "/bkt/up?uploads", b"").await;
    let id = r.xml("UploadId").unwrap();
    gw.a(Method::DELETE, "/bkt", b"").await.assert_error(409, "BucketNotEmpty");
    assert_eq!(gw.a(Method::DELETE, &format!("/bkt/up?uploadId={id}"), b"").await.status, 204);
    assert_eq!(gw.a(Method::DELETE, "/bkt", b"").await.status, 204);
    let r = gw.a(Method::HEAD, "/bkt", b"").await;
    assert_eq!(r.status, 404);
    assert!(r.body.is_empty());
    gw.a(Method::DELETE, "/bkt", b"").await.assert_error(404, "NoSuchBucket");
    gw.a(Method::GET, "/bkt?list-type=2", b"").await.assert_error(404, "NoSuchBucket");
    gw.a(Method::PUT, "/bkt/k", b"x").await.assert_error(404, "NoSuchBucket");
}

#[tokio::test]
async fn ownership_is_enforced() {
    let gw = Gw::new();
    gw.create_bucket("alice").await;
    gw.put("alice", "secret", b"data").await;
    let b = |m: Method, t: &'static str| gw.req(USER_B, m, t, &[], b"");
    b(Method::PUT, "/alice").await.assert_error(409, "BucketAlreadyExists");
    b(Method::GET, "/alice/secret").await.assert_error(403, "AccessDenied");
    b(Method::GET, "/alice?list-type=2").await.assert_error(403, "AccessDenied");
    b(Method::GET, "/alice?location").await.assert_error(403, "AccessDenied");
    b(Method::DELETE, "/alice/secret").await.assert_error(403, "AccessDenied");
    b(Method::DELETE, "/alice").await.assert_error(403, "AccessDenied");
    assert_eq!(b(Method::HEAD, "/alice").await.status, 403);
    gw.req(USER_B, Method::PUT, "/alice/new", &[], b"x").await.assert_error(403, "AccessDenied");
    // Copying out of somebody else's bucket is refused too.
    gw.req(USER_B, Method::PUT, "/bob", &[], b"").await;
    gw.req(USER_B, Method::PUT, "/bob/copy", &[("x-amz-copy-source", "/alice/secret")], b"")
        .await
        .assert_error(403, "AccessDenied");
    // Nothing changed for the owner.
    assert_eq!(gw.a(Method::GET, "/alice/secret", b"").await.body, b"data");
    assert_eq!(gw.a(Method::GET, "/alice/new", b"").await.status, 404);
    // Each user lists only their own buckets.
    let r = gw.req(USER_B, Method::GET, "/", &[], b"").await;
    assert_eq!(r.xml_all("Name"), ["bob"]);
    assert_eq!(r.xml("ID").as_deref(), Some(USER_B.0));
}

#[tokio::test]
async fn anonymous_requests_are_denied() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.send(anonymous(Method::GET, "/", b"")).await.assert_error(403, "AccessDenied");
    gw.send(anonymous(Method::PUT, "/bkt/k", b"x")).await.assert_error(403, "AccessDenied");
    gw.send(anonymous(Method::GET, "/bkt?list-type=2", b"")).await.assert_error(403, "AccessDenied");
    assert_eq!(gw.a(Method::GET, "/bkt/k", b"").await.status, 404, "nothing stored");
}

#[tokio::test]
async fn list_buckets_paginates() {
    let gw = Gw::new();
    for i in 0..5 {
        gw.create_bucket(&format!("bucket-{i}")).await;
    }
    let r = gw.a(Method::GET, "/", b"").await;
    assert_eq!(r.xml_all("Name"), ["bucket-0", "bucket-1", "bucket-2", "bucket-3", "bucket-4"]);
    assert!(r.xml("CreationDate").unwrap().ends_with('Z'));
    let r = gw.a(Method::GET, "/?max-buckets=2", b"").await;
    assert_eq!(r.xml_all("Name"), ["bucket-0", "bucket-1"]);
    let t = r.xml("ContinuationToken").unwrap();
    let r = gw.a(Method::GET, &format!("/?max-buckets=2&continuation-token={t}"), b"").await;
    assert_eq!(r.xml_all("Name"), ["bucket-2", "bucket-3"]);
    let t = r.xml("ContinuationToken").unwrap();
    let r = gw.a(Method::GET, &format!("/?max-buckets=2&continuation-token={t}"), b"").await;
    assert_eq!(r.xml_all("Name"), ["bucket-4"]);
    assert_eq!(r.xml("ContinuationToken"), None);
    gw.a(Method::GET, "/?max-buckets=0", b"").await.assert_error(400, "InvalidArgument");
    gw.a(Method::GET, "/?continuation-token=garbage", b"").await.assert_error(400, "InvalidArgument");
    // A token of one user is useless to another.
    let r = gw.a(Method::GET, "/?max-buckets=1", b"").await;
    let t = r.xml("ContinuationToken").unwrap();
    gw.req(USER_B, Method::GET, &format!("/?continuation-token={t}"), &[], b"")
        .await
        .assert_error(400, "InvalidArgument");
}

fn location_cfg(region: &str) -> Vec<u8> {
    format!(
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
    )
    .into_bytes()
}

/// A LocationConstraint other than the configured region is refused and stores nothing;
/// none, an empty one, or the configured region itself are accepted.
#[tokio::test]
async fn create_bucket_location_constraint_must_name_this_region() {
    let gw = Gw::new();
    for other in ["eu-west-1", "us-west-2", "EU", "nowhere"] {
        gw.a(Method::PUT, "/bkt", &location_cfg(other))
            .await
            .assert_error(400, "IllegalLocationConstraintException");
    }
    assert_eq!(gw.a(Method::HEAD, "/bkt", b"").await.status, 404, "nothing stored");
    assert_eq!(gw.a(Method::PUT, "/bkt", &location_cfg("us-east-1")).await.status, 200);
    assert_eq!(gw.a(Method::PUT, "/bkt2", &location_cfg("")).await.status, 200);
    assert_eq!(gw.a(Method::PUT, "/bkt3", b"<CreateBucketConfiguration/>").await.status, 200);
}

/// Outside us-east-1, re-creating a bucket you own is 409 BucketAlreadyOwnedByYou. (Signed
/// with SigV2, which names no region, since this harness signs SigV4 for us-east-1.)
#[tokio::test]
async fn re_creating_an_owned_bucket_elsewhere_is_a_conflict() {
    use base64::Engine as _;
    use hmac::Mac as _;
    let gw = Gw::with_settings(Settings { region: "eu-west-1".into(), ..Settings::default() });
    let create = || {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(USER_A.1.as_bytes()).unwrap();
        mac.update(format!("PUT\n\n\n{date}\n/bkt").as_bytes());
        let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        http::Request::builder()
            .method(Method::PUT)
            .uri("/bkt")
            .header("host", "127.0.0.1:9000")
            .header("date", date)
            .header("authorization", format!("AWS {}:{signature}", USER_A.0))
            .body(axum::body::Body::empty())
            .unwrap()
    };
    assert_eq!(gw.send(create()).await.status, 200);
    gw.send(create()).await.assert_error(409, "BucketAlreadyOwnedByYou");
}

#[tokio::test]
async fn location_versioning_and_unimplemented() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let r = gw.a(Method::GET, "/bkt?location=", b"").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains(
        "<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></LocationConstraint>"
    ));
    let r = gw.a(Method::GET, "/bkt?versioning", b"").await;
    assert!(r.text().contains("<VersioningConfiguration"));
    gw.a(Method::GET, "/bkt?lifecycle", b"").await.assert_error(501, "NotImplemented");
    gw.a(Method::PUT, "/bkt?tagging", b"").await.assert_error(501, "NotImplemented");
    gw.a(Method::GET, "/bkt?tagging", b"").await.assert_error(501, "NotImplemented");
    // Unknown non-subresource parameters are ignored.
    let r = gw.a(Method::PUT, "/bkt/k?x-id=PutObject", b"v").await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn invalid_bucket_names() {
    let gw = Gw::new();
    for bad in ["ab", "UPPER", "a_b", "-ab", "a..b", "192.168.0.1", &"a".repeat(64)] {
        gw.a(Method::PUT, &format!("/{bad}"), b"").await.assert_error(400, "InvalidBucketName");
    }
    let r = gw.a(Method::GET, "/", b"").await;
    assert!(r.xml_all("Name").is_empty(), "nothing stored");
}

#[tokio::test]
async fn health_and_metrics() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let r = gw.send(anonymous(Method::GET, "/health", b"")).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "ok"));
    let r = gw.send(anonymous(Method::GET, "/metrics", b"")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("holt_requests_total{operation=\"CreateBucket\",status=\"200\"} 1"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("holt_request_duration_seconds_bucket{operation=\"CreateBucket\""));
    assert!(r.text().contains("holt_engine_keys"));
    assert!(r.text().contains("holt_inflight_requests 0"), "{}", r.text());
    // A signed request for /health is an S3 request to bucket "health".
    gw.a(Method::GET, "/health", b"").await.assert_error(404, "NoSuchBucket");
}

/// With a metrics token configured, `/metrics` answers only `Authorization: Bearer <token>`
/// (401 with `WWW-Authenticate: Bearer` otherwise); `/health` stays open.
#[tokio::test]
async fn metrics_with_a_bearer_token() {
    let gw =
        Gw::with_settings(Settings { metrics_token: Some("s3cr3t-scrape".into()), ..Settings::default() });
    let with = |auth: Option<&str>| {
        let mut req = anonymous(Method::GET, "/metrics", b"");
        if let Some(value) = auth {
            req.headers_mut().insert("authorization", http::HeaderValue::from_str(value).unwrap());
        }
        req
    };
    for refused in [None, Some("Bearer wrong"), Some("Bearer s3cr3t-scrap"), Some("Bearer ")] {
        let r = gw.send(with(refused)).await;
        assert_eq!(r.status.as_u16(), 401, "{refused:?}: {}", r.text());
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{refused:?}");
        assert!(!r.text().contains("holt_"), "{refused:?} saw metrics");
    }
    let r = gw.send(with(Some("Bearer s3cr3t-scrape"))).await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("holt_inflight_requests"), "{}", r.text());
    let r = gw.send(anonymous(Method::GET, "/health", b"")).await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "ok"));
}

//! Bucket CORS: configurations stored, shown and deleted by their owner only and checked as
//! S3 checks them; OPTIONS preflights answered without authentication from the first rule
//! that matches (403 when none does); actual responses, errors included, carry the
//! `Access-Control-*` headers of the rule matching their origin and method. The rules go
//! with the bucket.

mod common;

use axum::body::Body;
use common::*;
use http::{Method, Request};

const CONFIG: &str = "<CORSConfiguration>\
    <CORSRule><ID>app</ID><AllowedOrigin>https://app.example.com</AllowedOrigin>\
    <AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod>\
    <AllowedHeader>content-type</AllowedHeader><AllowedHeader>x-amz-*</AllowedHeader>\
    <ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>600</MaxAgeSeconds></CORSRule>\
    <CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>HEAD</AllowedMethod></CORSRule>\
    </CORSConfiguration>";

fn preflight(target: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder().method(Method::OPTIONS).uri(target).header("host", "localhost");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::empty()).unwrap()
}

async fn configured() -> Gw {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "k", b"body").await;
    let r = gw.a(Method::PUT, "/bkt?cors", CONFIG.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    gw
}

#[tokio::test]
async fn configurations_are_stored_shown_and_deleted_by_the_owner() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.a(Method::GET, "/bkt?cors", b"").await.assert_error(404, "NoSuchCORSConfiguration");
    assert_eq!(gw.a(Method::PUT, "/bkt?cors", CONFIG.as_bytes()).await.status, 200);
    let r = gw.a(Method::GET, "/bkt?cors", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.xml_all("AllowedOrigin"), ["https://app.example.com", "*"]);
    assert_eq!(r.xml_all("AllowedMethod"), ["GET", "PUT", "HEAD"]);
    assert_eq!(r.xml_all("AllowedHeader"), ["content-type", "x-amz-*"]);
    assert_eq!(
        (r.xml("ID"), r.xml("ExposeHeader"), r.xml("MaxAgeSeconds")),
        (Some("app".into()), Some("ETag".into()), Some("600".into()))
    );

    gw.req(USER_B, Method::GET, "/bkt?cors", &[], b"").await.assert_error(403, "AccessDenied");
    gw.req(USER_B, Method::PUT, "/bkt?cors", &[], CONFIG.as_bytes()).await.assert_error(403, "AccessDenied");
    gw.req(USER_B, Method::DELETE, "/bkt?cors", &[], b"").await.assert_error(403, "AccessDenied");
    gw.a(Method::PUT, "/missing?cors", CONFIG.as_bytes()).await.assert_error(404, "NoSuchBucket");

    // Refused documents change nothing.
    let bad_method = "<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin>\
                      <AllowedMethod>PATCH</AllowedMethod></CORSRule></CORSConfiguration>";
    gw.a(Method::PUT, "/bkt?cors", bad_method.as_bytes()).await.assert_error(400, "InvalidRequest");
    gw.a(Method::PUT, "/bkt?cors", b"<CORSConfiguration/>").await.assert_error(400, "MalformedXML");
    gw.a(Method::PUT, "/bkt?cors", b"<nope").await.assert_error(400, "MalformedXML");
    assert_eq!(gw.a(Method::GET, "/bkt?cors", b"").await.xml_all("AllowedMethod").len(), 3);

    assert_eq!(gw.a(Method::DELETE, "/bkt?cors", b"").await.status, 204);
    gw.a(Method::GET, "/bkt?cors", b"").await.assert_error(404, "NoSuchCORSConfiguration");
    assert_eq!(gw.a(Method::DELETE, "/bkt?cors", b"").await.status, 204, "deleting nothing is fine");
    // The bucket itself is untouched by its CORS changes.
    assert_eq!(gw.a(Method::HEAD, "/bkt", b"").await.status, 200);
}

#[tokio::test]
async fn preflights_are_answered_from_the_first_matching_rule_without_authentication() {
    let gw = configured().await;
    let r = gw
        .send(preflight(
            "/bkt/k",
            &[
                ("origin", "https://app.example.com"),
                ("access-control-request-method", "PUT"),
                ("access-control-request-headers", "Content-Type, X-Amz-Date"),
            ],
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example.com"));
    assert_eq!(r.header("access-control-allow-methods"), Some("GET, PUT"));
    assert_eq!(r.header("access-control-allow-headers"), Some("content-type, x-amz-date"));
    assert_eq!(r.header("access-control-expose-headers"), Some("ETag"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));

    // The wildcard rule answers with `*` and no credentials.
    let r = gw
        .send(preflight(
            "/bkt/k",
            &[("origin", "https://other.example"), ("access-control-request-method", "HEAD")],
        ))
        .await;
    assert_eq!((r.status.as_u16(), r.header("access-control-allow-origin")), (200, Some("*")));
    assert_eq!(r.header("access-control-allow-credentials"), None);

    let refused = [
        // An origin no rule names for this method.
        vec![("origin", "https://other.example"), ("access-control-request-method", "PUT")],
        // A header the rule does not allow.
        vec![
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "authorization"),
        ],
        // A method no rule allows.
        vec![("origin", "https://app.example.com"), ("access-control-request-method", "DELETE")],
    ];
    for headers in &refused {
        let r = gw.send(preflight("/bkt/k", headers)).await;
        r.assert_error(403, "AccessForbidden");
        assert_eq!(r.header("access-control-allow-origin"), None, "{headers:?}");
    }
    gw.send(preflight("/bkt/k", &[("access-control-request-method", "GET")]))
        .await
        .assert_error(400, "BadRequest");
    gw.send(preflight("/bkt/k", &[("origin", "https://app.example.com")]))
        .await
        .assert_error(400, "BadRequest");
    let get = [("origin", "https://app.example.com"), ("access-control-request-method", "GET")];
    gw.send(preflight("/missing/k", &get)).await.assert_error(403, "AccessForbidden");
    gw.send(preflight("/", &get)).await.assert_error(403, "AccessForbidden");
    gw.create_bucket("plain").await;
    let r = gw.send(preflight("/plain/k", &get)).await;
    r.assert_error(403, "AccessForbidden");
    assert!(r.text().contains("not enabled"), "{}", r.text());
}

#[tokio::test]
async fn responses_to_allowed_origins_carry_the_rule_headers_errors_included() {
    let gw = configured().await;
    let origin = [("origin", "https://app.example.com")];
    let r = gw.req(USER_A, Method::GET, "/bkt/k", &origin, b"").await;
    assert_eq!((r.status.as_u16(), r.body.as_slice()), (200, &b"body"[..]));
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example.com"));
    assert_eq!(r.header("access-control-expose-headers"), Some("ETag"));
    assert!(r.headers.get_all("vary").iter().any(|v| v == "Origin"));

    let r = gw.req(USER_A, Method::GET, "/bkt/missing", &origin, b"").await;
    r.assert_error(404, "NoSuchKey");
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example.com"));
    let mut anonymous_get = anonymous(Method::GET, "/bkt/k", b"");
    anonymous_get.headers_mut().insert("origin", "https://app.example.com".parse().unwrap());
    let r = gw.send(anonymous_get).await;
    r.assert_error(403, "AccessDenied");
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example.com"), "refusals too");

    // A method the rule does not allow, an origin no rule names: no CORS headers.
    let r = gw.req(USER_A, Method::DELETE, "/bkt/k", &origin, b"").await;
    assert_eq!((r.status.as_u16(), r.header("access-control-allow-origin")), (204, None));
    let r = gw.req(USER_A, Method::GET, "/bkt?list-type=2", &[("origin", "https://evil.example")], b"").await;
    assert_eq!((r.status.as_u16(), r.header("access-control-allow-origin")), (200, None));
    // Without an Origin header, a response is what it always was.
    let r = gw.a(Method::GET, "/bkt/k", b"").await;
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(r.header("vary"), None);
}

#[tokio::test]
async fn the_rules_go_with_the_bucket() {
    let gw = configured().await;
    assert_eq!(gw.a(Method::DELETE, "/bkt/k", b"").await.status, 204);
    assert_eq!(gw.a(Method::DELETE, "/bkt", b"").await.status, 204);
    assert_eq!(gw.req(USER_B, Method::PUT, "/bkt", &[], b"").await.status, 200);
    gw.req(USER_B, Method::GET, "/bkt?cors", &[], b"").await.assert_error(404, "NoSuchCORSConfiguration");
    let get = [("origin", "https://app.example.com"), ("access-control-request-method", "GET")];
    gw.send(preflight("/bkt/k", &get)).await.assert_error(403, "AccessForbidden");
}

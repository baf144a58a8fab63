//! Invariant: a URL presigned by aws-sigv4 is accepted from its X-Amz-Date (less the allowed
//! skew) until X-Amz-Date + X-Amz-Expires, and never once any of its parts changes; invalid
//! X-Amz-* parameters get 400 AuthorizationQueryParametersError.

mod auth_support;

use std::time::Duration;

use auth_support::{assert_err, t0, Req, Signer, AK};
use gateway::auth::Payload;

fn presigned(expires_secs: u64) -> Req {
    Signer::default()
        .presign(&Req::new("GET", "/bucket/photos/cat%20%2B%20dog.jpg"), Duration::from_secs(expires_secs))
}

/// Replaces the value of query parameter `name` (URI text, already encoded).
fn with_param(req: &Req, name: &str, value: &str) -> Req {
    let (path, query) = req.uri.split_once('?').expect("presigned URLs have a query");
    let query: Vec<String> = query
        .split('&')
        .map(|p| if p.split('=').next() == Some(name) { format!("{name}={value}") } else { p.to_owned() })
        .collect();
    Req { uri: format!("{path}?{}", query.join("&")), ..req.clone() }
}

fn without_param(req: &Req, name: &str) -> Req {
    let (path, query) = req.uri.split_once('?').expect("presigned URLs have a query");
    let query: Vec<&str> = query.split('&').filter(|p| p.split('=').next() != Some(name)).collect();
    Req { uri: format!("{path}?{}", query.join("&")), ..req.clone() }
}

#[test]
fn accepted_throughout_its_validity() {
    let req = presigned(3600);
    for secs in [0, 1, 1800, 3600] {
        let ok = req.auth(t0() + Duration::from_secs(secs)).expect("valid");
        assert_eq!(ok.access_key, AK);
        assert!(matches!(ok.payload, Payload::Unsigned));
    }
    // A client clock slightly ahead of ours is tolerated like for header signatures.
    req.auth(t0() - Duration::from_secs(14 * 60)).expect("within skew");
}

#[test]
fn expired() {
    let err = presigned(3600).auth(t0() + Duration::from_secs(3601)).expect_err("expired");
    assert_eq!(
        (err.code(), err.status(), err.message().as_str()),
        ("AccessDenied", 403, "Request has expired")
    );
    let week = presigned(604_800);
    week.auth(t0() + Duration::from_secs(604_800)).expect("last valid second");
    assert_err(week.auth(t0() + Duration::from_secs(604_801)), "AccessDenied", 403);
}

#[test]
fn not_yet_valid() {
    let err = presigned(3600).auth(t0() - Duration::from_secs(16 * 60)).expect_err("future");
    assert_eq!((err.code(), err.status()), ("AccessDenied", 403));
}

#[test]
fn expires_out_of_range() {
    // Out-of-range values are refused before the signature is looked at.
    for value in ["0", "604801", "-1", "abc", ""] {
        let req = with_param(&presigned(3600), "X-Amz-Expires", value);
        let err = req.auth(t0()).expect_err(value);
        assert_eq!((err.code(), err.status()), ("AuthorizationQueryParametersError", 400), "{value}");
    }
    // aws-sigv4 itself produces the boundary values, which verify.
    presigned(1).auth(t0()).expect("one second");
    presigned(604_800).auth(t0()).expect("one week");
}

#[test]
fn lengthened_expiry_does_not_verify() {
    let req = with_param(&presigned(3600), "X-Amz-Expires", "7200");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_signature_path_method_and_query() {
    let req = presigned(3600);
    let sig = req.uri.rsplit("X-Amz-Signature=").next().expect("signed").to_owned();
    let flipped: String = sig.chars().map(|c| if c == 'a' { 'b' } else { c }).collect();
    let flipped = if flipped == sig {
        sig.replacen(&sig[..1], if &sig[..1] == "0" { "1" } else { "0" }, 1)
    } else {
        flipped
    };
    assert_err(with_param(&req, "X-Amz-Signature", &flipped).auth(t0()), "SignatureDoesNotMatch", 403);

    let mut path = req.clone();
    path.uri = path.uri.replace("cat%20%2B%20dog", "cat%20%2B%20cow");
    assert_err(path.auth(t0()), "SignatureDoesNotMatch", 403);

    let mut method = req.clone();
    method.method = "PUT".to_owned();
    assert_err(method.auth(t0()), "SignatureDoesNotMatch", 403);

    let mut extra = req.clone();
    extra.uri.push_str("&response-content-type=text%2Fhtml");
    assert_err(extra.auth(t0()), "SignatureDoesNotMatch", 403);

    assert_err(req.clone().set("host", "evil.example").auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn missing_and_repeated_parameters() {
    let req = presigned(3600);
    for name in [
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    ] {
        let err = without_param(&req, name).auth(t0()).expect_err(name);
        assert_eq!((err.code(), err.status()), ("AuthorizationQueryParametersError", 400), "{name}");
    }
    let mut twice = req.clone();
    twice.uri.push_str("&X-Amz-Date=20240301T120000Z");
    assert_err(twice.auth(t0()), "AuthorizationQueryParametersError", 400);
}

#[test]
fn bad_parameter_values() {
    let req = presigned(3600);
    let cases = [
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA1"),
        ("X-Amz-Date", "2024-03-01T12:00:00Z"),
        ("X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE%2F20240301%2Feu-west-1%2Fs3%2Faws4_request"),
        ("X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE%2F20240301%2Fus-east-1%2Fsqs%2Faws4_request"),
        ("X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE%2F20240302%2Fus-east-1%2Fs3%2Faws4_request"),
        ("X-Amz-Credential", "garbage"),
        ("X-Amz-SignedHeaders", ""),
        ("X-Amz-Signature", "xyz"),
    ];
    for (name, value) in cases {
        let err = with_param(&req, name, value).auth(t0()).expect_err(value);
        assert_eq!((err.code(), err.status()), ("AuthorizationQueryParametersError", 400), "{name}={value}");
    }
}

#[test]
fn unknown_key() {
    let req = Signer { access_key: "AKIANOBODY", ..Signer::default() }
        .presign(&Req::new("GET", "/bucket/key"), Duration::from_secs(60));
    assert_err(req.auth(t0()), "InvalidAccessKeyId", 403);
}

#[test]
fn wrong_secret() {
    let req = Signer { secret: "nope", ..Signer::default() }
        .presign(&Req::new("GET", "/b/k"), Duration::from_secs(60));
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn unsigned_x_amz_header_on_presigned_request() {
    let req = presigned(3600).header("x-amz-meta-evil", "1");
    assert_err(req.auth(t0()), "AccessDenied", 403);
}

#[test]
fn signed_extra_headers_and_content_sha256() {
    // Headers included when presigning must come back unchanged.
    let base = Req::new("PUT", "/bucket/upload.bin").header("x-amz-meta-owner", "ops");
    let req = Signer::default().presign(&base, Duration::from_secs(600));
    req.auth(t0()).expect("signed header present");
    assert_err(req.clone().set("x-amz-meta-owner", "dev").auth(t0()), "SignatureDoesNotMatch", 403);
    // A presigned URL cannot carry an aws-chunked body.
    let streaming = Signer::default().presign(
        &Req::new("PUT", "/bucket/k").header("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
        Duration::from_secs(600),
    );
    assert_err(streaming.auth(t0()), "InvalidRequest", 400);
}

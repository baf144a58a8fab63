//! Invariant: every way a signed request head can be wrong is refused with the S3 error code
//! and HTTP status AWS uses, and no variation of a valid request other than the one signed is
//! accepted. Requests are signed by aws-sigv4 and then altered one component at a time.

mod auth_support;

use std::time::Duration;

use auth_support::{assert_err, cfg, creds, t0, Body, Req, Signer, AK, EMPTY_SHA256};
use gateway::auth::{authenticate, AuthConfig};

fn signed_get() -> Req {
    let req = Req::new("GET", "/bucket/key.txt?list-type=2&prefix=a%2Fb").header("x-amz-meta-color", "blue");
    Signer::default().sign(&req, Body::Bytes(b""))
}

fn auth_value(req: &Req) -> String {
    req.get("authorization").expect("signed").to_owned()
}

#[test]
fn the_unaltered_request_is_accepted() {
    let ok = signed_get().auth(t0()).expect("valid request");
    assert_eq!(ok.access_key, AK);
}

#[test]
fn wrong_secret() {
    let req =
        Signer { secret: "not-the-secret", ..Signer::default() }.sign(&Req::new("GET", "/b"), Body::Unsigned);
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn another_users_secret() {
    let req =
        Signer { secret: "other-secret", ..Signer::default() }.sign(&Req::new("GET", "/b"), Body::Unsigned);
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn unknown_access_key() {
    let req =
        Signer { access_key: "AKIANOBODY", ..Signer::default() }.sign(&Req::new("GET", "/b"), Body::Unsigned);
    assert_err(req.auth(t0()), "InvalidAccessKeyId", 403);
}

#[test]
fn wrong_region() {
    let req =
        Signer { region: "eu-west-1", ..Signer::default() }.sign(&Req::new("GET", "/b"), Body::Unsigned);
    let err = req.auth(t0()).expect_err("wrong region");
    assert_eq!((err.code(), err.status()), ("AuthorizationHeaderMalformed", 400));
    assert!(err.message().contains("eu-west-1"), "{}", err.message());
}

#[test]
fn wrong_service() {
    let req = Signer { service: "ec2", ..Signer::default() }.sign(&Req::new("GET", "/b"), Body::Unsigned);
    assert_err(req.auth(t0()), "AuthorizationHeaderMalformed", 400);
}

#[test]
fn scope_date_differs_from_x_amz_date() {
    // Signed on 2024-03-01 but the scope claims 2024-02-29 (same instant, so no skew involved).
    let req = signed_get();
    let auth = auth_value(&req).replace("/20240301/", "/20240229/");
    assert_err(req.set("authorization", &auth).auth(t0()), "AuthorizationHeaderMalformed", 400);
}

#[test]
fn clock_skew_beyond_fifteen_minutes() {
    let req = signed_get();
    let sixteen = Duration::from_secs(16 * 60);
    assert_err(req.auth(t0() + sixteen), "RequestTimeTooSkewed", 403);
    assert_err(req.auth(t0() - sixteen), "RequestTimeTooSkewed", 403);
    let fourteen = Duration::from_secs(14 * 60);
    req.auth(t0() + fourteen).expect("within skew");
    req.auth(t0() - fourteen).expect("within skew");
}

#[test]
fn missing_or_garbage_date() {
    let req = signed_get();
    assert_err(req.clone().remove("x-amz-date").auth(t0()), "AccessDenied", 403);
    assert_err(req.set("x-amz-date", "2024-03-01T12:00:00Z").auth(t0()), "AccessDenied", 403);
}

#[test]
fn host_not_signed() {
    let req = signed_get();
    let auth = auth_value(&req).replace("SignedHeaders=host;", "SignedHeaders=");
    assert_err(req.set("authorization", &auth).auth(t0()), "AccessDenied", 403);
}

#[test]
fn unsigned_x_amz_header_added() {
    let req = signed_get().header("x-amz-meta-extra", "sneaked in");
    assert_err(req.auth(t0()), "AccessDenied", 403);
    let req = signed_get().header("x-amz-copy-source", "/other/secret");
    assert_err(req.auth(t0()), "AccessDenied", 403);
}

#[test]
fn unsigned_ordinary_header_is_allowed() {
    signed_get()
        .header("user-agent", "anything")
        .header("accept", "*/*")
        .auth(t0())
        .expect("not signed, not needed");
}

#[test]
fn tampered_signed_header() {
    assert_err(signed_get().set("x-amz-meta-color", "red").auth(t0()), "SignatureDoesNotMatch", 403);
    assert_err(signed_get().set("host", "evil.example:9000").auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn signed_header_removed() {
    assert_err(signed_get().remove("x-amz-meta-color").auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_query() {
    let mut req = signed_get();
    req.uri = req.uri.replace("prefix=a%2Fb", "prefix=a%2Fc");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
    let mut req = signed_get();
    req.uri.push_str("&max-keys=1");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
    let mut req = signed_get();
    req.uri = req.uri.replace("list-type=2&", "");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_path() {
    let mut req = signed_get();
    req.uri = req.uri.replace("key.txt", "key.tx");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
    let mut req = signed_get();
    req.uri = req.uri.replace("/bucket/", "/other/");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_method() {
    let mut req = signed_get();
    req.method = "DELETE".to_owned();
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_payload_hash() {
    let req = signed_get().set("x-amz-content-sha256", &EMPTY_SHA256.replace('e', "f"));
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
    let req = signed_get().set("x-amz-content-sha256", "UNSIGNED-PAYLOAD");
    assert_err(req.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_signature() {
    let req = signed_get();
    let auth = auth_value(&req);
    let last = auth.chars().last().expect("non-empty");
    let flipped = format!("{}{}", &auth[..auth.len() - 1], if last == '0' { '1' } else { '0' });
    assert_err(req.set("authorization", &flipped).auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn missing_content_sha256() {
    let req = Signer::default().sign_with(&Req::new("GET", "/b"), Body::Unsigned, false);
    assert_err(req.auth(t0()), "InvalidRequest", 400);
}

#[test]
fn invalid_content_sha256() {
    let req = Signer::default().sign(&Req::new("PUT", "/b/k"), Body::Literal("not-a-hash"));
    assert_err(req.auth(t0()), "InvalidArgument", 400);
}

#[test]
fn malformed_authorization_headers() {
    let req = signed_get();
    let good = auth_value(&req);
    let (_, rest) = good.split_once(' ').expect("algorithm then components");
    let parts: Vec<&str> = rest.split(", ").collect();
    assert_eq!(parts.len(), 3, "{good}");
    let cases: Vec<(String, &str, u16)> = vec![
        (format!("AWS4-HMAC-SHA256 {}, {}", parts[1], parts[2]), "AuthorizationHeaderMalformed", 400),
        (format!("AWS4-HMAC-SHA256 {}, {}", parts[0], parts[2]), "AuthorizationHeaderMalformed", 400),
        (format!("AWS4-HMAC-SHA256 {}, {}", parts[0], parts[1]), "AuthorizationHeaderMalformed", 400),
        (format!("{good}, {}", parts[2]), "AuthorizationHeaderMalformed", 400),
        (format!("{good}, {}", parts[0]), "AuthorizationHeaderMalformed", 400),
        (format!("{good}, Foo=bar"), "AuthorizationHeaderMalformed", 400),
        (good.replace("Signature=", "Signature=zz"), "AuthorizationHeaderMalformed", 400),
        (good.replace("Credential=", "Credential").to_owned(), "AuthorizationHeaderMalformed", 400),
        (good.replace("/aws4_request", ""), "AuthorizationHeaderMalformed", 400),
        (good.replace("/aws4_request", "/aws5_request"), "AuthorizationHeaderMalformed", 400),
        (good.replace("SignedHeaders=host", "SignedHeaders=Host"), "AuthorizationHeaderMalformed", 400),
        ("AWS4-HMAC-SHA256".to_owned(), "AuthorizationHeaderMalformed", 400),
        ("AWS4-HMAC-SHA256 garbage".to_owned(), "AuthorizationHeaderMalformed", 400),
        (good.replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512"), "InvalidRequest", 400),
        // SigV2 (accepted by default; `--sigv2 off` is in auth_sigv2.rs): a wrong signature.
        (format!("AWS {AK}:c2lnbmF0dXJl"), "SignatureDoesNotMatch", 403),
        ("Bearer abc.def.ghi".to_owned(), "InvalidArgument", 400),
        (String::new(), "InvalidArgument", 400),
        ("x".repeat(5000), "AuthorizationHeaderMalformed", 400),
    ];
    for (value, code, status) in cases {
        let err = req.clone().set("authorization", &value).auth(t0()).expect_err(&value);
        assert_eq!((err.code(), err.status()), (code, status), "{value}: {err:?}");
    }
}

#[test]
fn two_authorization_headers() {
    let req = signed_get();
    let auth = auth_value(&req);
    assert_err(req.header("authorization", &auth).auth(t0()), "AuthorizationHeaderMalformed", 400);
}

#[test]
fn header_and_presigned_together() {
    let req = signed_get();
    let mut both = Signer::default().presign(&Req::new("GET", "/bucket/key.txt"), Duration::from_secs(60));
    both.headers = req.headers.clone();
    assert_err(both.auth(t0()), "InvalidArgument", 400);
}

#[test]
fn anonymous_and_sigv2_requests() {
    assert_err(Req::new("GET", "/bucket/key").auth(t0()), "AccessDenied", 403);
    let v2 = Req::new("GET", "/bucket/key?AWSAccessKeyId=AKIA&Expires=1709298000&Signature=abc%3D");
    assert_err(v2.auth(t0()), "InvalidAccessKeyId", 403);
    let off = AuthConfig { sigv2: false, ..cfg() };
    assert_err(authenticate(&v2.parts(), &creds(), &off, t0()), "InvalidRequest", 400);
}

#[test]
fn http2_requests_sign_the_authority() {
    // HTTP/2 carries the host in :authority, which http puts in the URI.
    let req = signed_get();
    let mut h2 = req.clone().remove("host");
    h2.uri = format!("http://{}{}", auth_support::HOST, req.uri);
    h2.auth(t0()).expect("authority stands in for host");
    let mut wrong = req.remove("host");
    wrong.uri = format!("http://evil.example{}", wrong.uri);
    assert_err(wrong.auth(t0()), "SignatureDoesNotMatch", 403);
}

/// A request dated by the RFC 1123 `Date` header alone (no `x-amz-date`), signed by hand from
/// the protocol description: the string to sign carries the same instant in ISO 8601 form.
fn date_only_request(date: &str, stamp: &str) -> Req {
    use sha2::{Digest, Sha256};
    let canonical = format!(
        "GET\n/bucket/k\n\ndate:{date}\nhost:{}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n\n\
         date;host;x-amz-content-sha256\nUNSIGNED-PAYLOAD",
        auth_support::HOST
    );
    let scope = format!("{}/us-east-1/s3/aws4_request", &stamp[..8]);
    let sts =
        format!("AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let key = auth_support::signing_key(auth_support::SK, &stamp[..8], "us-east-1");
    let sig = hex::encode(auth_support::hmac(&key, sts.as_bytes()));
    Req::new("GET", "/bucket/k").header("date", date).header("x-amz-content-sha256", "UNSIGNED-PAYLOAD").header(
        "authorization",
        &format!("AWS4-HMAC-SHA256 Credential={AK}/{scope}, SignedHeaders=date;host;x-amz-content-sha256, Signature={sig}"),
    )
}

#[test]
fn date_header_instead_of_x_amz_date() {
    let req = date_only_request("Fri, 01 Mar 2024 12:00:00 GMT", "20240301T120000Z");
    req.auth(t0()).expect("Date header dates the request");
    assert_err(req.auth(t0() + Duration::from_secs(16 * 60)), "RequestTimeTooSkewed", 403);
    // The signature covers the Date header's value.
    let moved = req.set("date", "Fri, 01 Mar 2024 12:00:01 GMT");
    assert_err(moved.auth(t0()), "SignatureDoesNotMatch", 403);
    let garbage = date_only_request("yesterday", "20240301T120000Z");
    assert_err(garbage.auth(t0()), "AccessDenied", 403);
}

//! Signature Version 2: the worked examples of AWS's SigV2 documentation ("Signing and
//! authenticating REST requests", access key AKIAIOSFODNN7EXAMPLE, bucket `johnsmith`), each
//! accepted with its documented signature, path-style and virtual-hosted; and the refusals:
//! a changed request, another secret, an unknown key, a stale or expired request, a repeated
//! signed header, two mechanisms at once, and `--sigv2 off`.
//!
//! The signatures are AWS's published values, not computed by the code under test; the
//! real-client side (botocore's signer, s3cmd) is in `s3-compat-tests/tests/sigv2.rs`.

mod auth_support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use auth_support::{creds, AK};
use gateway::auth::{authenticate, AuthConfig, AuthError, Payload};

/// A request head with the given headers (no default Host).
fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).expect("valid test request").into_parts().0
}

/// The server of the examples: virtual-hosted names under `s3.amazonaws.com`.
fn cfg() -> AuthConfig {
    AuthConfig { domain: Some("s3.amazonaws.com".into()), ..AuthConfig::new("us-east-1") }
}

/// An RFC 1123 date as a clock reading.
fn at(date: &str) -> SystemTime {
    httpdate::parse_http_date(&date.replace("+0000", "GMT")).expect("example date")
}

struct Example {
    what: &'static str,
    method: &'static str,
    uri: &'static str,
    headers: &'static [(&'static str, &'static str)],
    signature: &'static str,
}

const EXAMPLES: &[Example] = &[
    Example {
        what: "object GET",
        method: "GET",
        uri: "/photos/puppy.jpg",
        headers: &[("host", "johnsmith.s3.amazonaws.com"), ("date", "Tue, 27 Mar 2007 19:36:42 +0000")],
        signature: "bWq2s1WEIj+Ydj0vQ697zp+IXMU=",
    },
    Example {
        what: "object PUT",
        method: "PUT",
        uri: "/photos/puppy.jpg",
        headers: &[
            ("host", "johnsmith.s3.amazonaws.com"),
            ("content-type", "image/jpeg"),
            ("content-length", "94328"),
            ("date", "Tue, 27 Mar 2007 21:15:45 +0000"),
        ],
        signature: "MyyxeRY7whkBe+bq8fHCL/2kKUg=",
    },
    Example {
        what: "list (query parameters that are not sub-resources)",
        method: "GET",
        uri: "/?prefix=photos&max-keys=50&marker=puppy",
        headers: &[
            ("user-agent", "Mozilla/5.0"),
            ("host", "johnsmith.s3.amazonaws.com"),
            ("date", "Tue, 27 Mar 2007 19:42:41 +0000"),
        ],
        signature: "htDYFYduRNen8P9ZfE/s9SuKy0U=",
    },
    Example {
        what: "fetch ACL (a sub-resource)",
        method: "GET",
        uri: "/?acl",
        headers: &[("host", "johnsmith.s3.amazonaws.com"), ("date", "Tue, 27 Mar 2007 19:44:46 +0000")],
        signature: "c2WLPFtWHVgbEmeEG93a4cG37dM=",
    },
    Example {
        what: "path-style DELETE timed by x-amz-date",
        method: "DELETE",
        uri: "/johnsmith/photos/puppy.jpg",
        headers: &[
            ("user-agent", "dotnet"),
            ("host", "s3.amazonaws.com"),
            ("date", "Tue, 27 Mar 2007 21:20:27 +0000"),
            ("x-amz-date", "Tue, 27 Mar 2007 21:20:26 +0000"),
        ],
        signature: "lx3byBScXR6KzyMaifNkardMwNk=",
    },
];

fn with_authorization(example: &Example, signature: &str) -> http::request::Parts {
    let authorization = format!("AWS {AK}:{signature}");
    let mut headers: Vec<(&str, &str)> = example.headers.to_vec();
    headers.push(("authorization", &authorization));
    parts(example.method, example.uri, &headers)
}

fn date_of(example: &Example) -> SystemTime {
    let date = example.headers.iter().find(|(n, _)| *n == "x-amz-date" || *n == "date").map(|(_, v)| *v);
    at(date.expect("every example is dated"))
}

#[test]
fn the_documented_examples_are_accepted() {
    for example in EXAMPLES {
        let ok =
            authenticate(&with_authorization(example, example.signature), &creds(), &cfg(), date_of(example))
                .unwrap_or_else(|e| panic!("{}: {e:?}", example.what));
        assert_eq!(ok.access_key, AK);
        assert!(matches!(ok.payload, Payload::Unsigned), "{}: SigV2 does not sign the body", example.what);
    }
}

#[test]
fn the_documented_presigned_url_is_accepted_until_it_expires() {
    let uri = "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620";
    let head = parts("GET", uri, &[("host", "johnsmith.s3.amazonaws.com")]);
    let expires = UNIX_EPOCH + Duration::from_secs(1_175_139_620);
    let ok =
        authenticate(&head, &creds(), &cfg(), expires - Duration::from_secs(3600)).expect("before Expires");
    assert_eq!(ok.access_key, AK);
    assert!(authenticate(&head, &creds(), &cfg(), expires).is_ok(), "at Expires itself");
    match authenticate(&head, &creds(), &cfg(), expires + Duration::from_secs(1)) {
        Err(AuthError::AccessDenied(message)) => assert!(message.contains("expired"), "{message}"),
        other => panic!("after Expires: {other:?}"),
    }
    // The same URL for another object, or with Expires moved, no longer matches.
    for changed in [uri.replace("puppy", "kitten"), uri.replace("1175139620", "1175139999")] {
        let head = parts("GET", &changed, &[("host", "johnsmith.s3.amazonaws.com")]);
        assert!(
            matches!(
                authenticate(&head, &creds(), &cfg(), expires - Duration::from_secs(60)),
                Err(AuthError::SignatureDoesNotMatch)
            ),
            "{changed}"
        );
    }
}

/// Every part of the string to sign matters: the method, Content-Type, the date, an x-amz-*
/// header, the bucket (from the Host), the key and a sub-resource.
#[test]
fn a_changed_request_does_not_match() {
    let example = &EXAMPLES[1];
    let now = date_of(example);
    let variants: Vec<(&str, http::request::Parts)> = vec![
        ("method", {
            let mut p = with_authorization(example, example.signature);
            p.method = http::Method::POST;
            p
        }),
        ("content-type", {
            let mut p = with_authorization(example, example.signature);
            p.headers.insert("content-type", "image/png".parse().unwrap());
            p
        }),
        ("an added x-amz-meta header", {
            let mut p = with_authorization(example, example.signature);
            p.headers.insert("x-amz-meta-owner", "mallory".parse().unwrap());
            p
        }),
        ("bucket", {
            let mut p = with_authorization(example, example.signature);
            p.headers.insert("host", "janesmith.s3.amazonaws.com".parse().unwrap());
            p
        }),
        ("key", {
            let mut p = with_authorization(example, example.signature);
            p.uri = "/photos/kitten.jpg".parse().unwrap();
            p
        }),
        ("a sub-resource", {
            let mut p = with_authorization(example, example.signature);
            p.uri = "/photos/puppy.jpg?tagging".parse().unwrap();
            p
        }),
        // Routing decodes parameter names: an encoded sub-resource must be signed too.
        ("a percent-encoded sub-resource", {
            let mut p = with_authorization(example, example.signature);
            p.uri = "/photos/puppy.jpg?%74agging".parse().unwrap();
            p
        }),
        ("a percent-encoded uploadId", {
            let mut p = with_authorization(example, example.signature);
            p.uri = "/photos/puppy.jpg?%75ploadId=abc".parse().unwrap();
            p
        }),
    ];
    for (what, head) in variants {
        let result = authenticate(&head, &creds(), &cfg(), now);
        assert!(matches!(result, Err(AuthError::SignatureDoesNotMatch)), "{what}: {result:?}");
    }
    // A signature of the right length made with another secret.
    let forged = with_authorization(example, "AAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    assert!(matches!(authenticate(&forged, &creds(), &cfg(), now), Err(AuthError::SignatureDoesNotMatch)));
    let garbage = with_authorization(example, "not base64!");
    assert!(matches!(authenticate(&garbage, &creds(), &cfg(), now), Err(AuthError::SignatureDoesNotMatch)));
}

#[test]
fn refusals_before_the_signature() {
    let example = &EXAMPLES[0];
    let now = date_of(example);
    let unknown = {
        let mut headers: Vec<(&str, &str)> = example.headers.to_vec();
        headers.push(("authorization", "AWS NOSUCHKEY:bWq2s1WEIj+Ydj0vQ697zp+IXMU="));
        parts(example.method, example.uri, &headers)
    };
    assert!(matches!(authenticate(&unknown, &creds(), &cfg(), now), Err(AuthError::InvalidAccessKeyId)));
    let late = now + Duration::from_secs(16 * 60);
    let head = with_authorization(example, example.signature);
    assert!(matches!(authenticate(&head, &creds(), &cfg(), late), Err(AuthError::RequestTimeTooSkewed)));
    let undated = {
        let authorization = format!("AWS {AK}:{}", example.signature);
        parts(
            "GET",
            example.uri,
            &[("host", "johnsmith.s3.amazonaws.com"), ("authorization", &authorization)],
        )
    };
    assert!(matches!(authenticate(&undated, &creds(), &cfg(), now), Err(AuthError::AccessDenied(_))));
    for malformed in ["AWS", "AWS ", "AWS AKIAIOSFODNN7EXAMPLE", "AWS :sig", "AWS AK:", "AWS A K:sig"] {
        let mut head = with_authorization(example, example.signature);
        head.headers.insert("authorization", malformed.parse().unwrap());
        let result = authenticate(&head, &creds(), &cfg(), now);
        assert!(matches!(result, Err(AuthError::InvalidArgument(_))), "{malformed:?}: {result:?}");
    }
}

/// A signed x-amz-* header sent twice would be joined for the signature and read once by the
/// handlers: refused, as for SigV4.
#[test]
fn a_repeated_amz_header_is_refused() {
    let example = &EXAMPLES[4];
    let mut head = with_authorization(example, example.signature);
    head.headers.append("x-amz-date", "Tue, 27 Mar 2007 21:20:26 +0000".parse().unwrap());
    let result = authenticate(&head, &creds(), &cfg(), date_of(example));
    assert!(matches!(result, Err(AuthError::InvalidArgument(_))), "{result:?}");
}

#[test]
fn one_mechanism_at_a_time() {
    let example = &EXAMPLES[0];
    let mut head = with_authorization(example, example.signature);
    head.uri = "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=x&Expires=1".parse().unwrap();
    assert!(matches!(
        authenticate(&head, &creds(), &cfg(), date_of(example)),
        Err(AuthError::InvalidArgument(_))
    ));
    let both = parts(
        "GET",
        "/b/k?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=x&Expires=1&X-Amz-Algorithm=AWS4-HMAC-SHA256",
        &[("host", "127.0.0.1:9000")],
    );
    assert!(matches!(
        authenticate(&both, &creds(), &cfg(), date_of(example)),
        Err(AuthError::InvalidArgument(_))
    ));
}

#[test]
fn sigv2_off_refuses_both_forms() {
    let off = AuthConfig { sigv2: false, ..cfg() };
    let example = &EXAMPLES[0];
    let head = with_authorization(example, example.signature);
    assert!(matches!(
        authenticate(&head, &creds(), &off, date_of(example)),
        Err(AuthError::InvalidRequest(_))
    ));
    let uri = "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620";
    let head = parts("GET", uri, &[("host", "johnsmith.s3.amazonaws.com")]);
    let before = UNIX_EPOCH + Duration::from_secs(1_175_139_000);
    assert!(matches!(authenticate(&head, &creds(), &off, before), Err(AuthError::InvalidRequest(_))));
}

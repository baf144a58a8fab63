//! AWS Signature Version 2 (HMAC-SHA1) as S3 defines it, which boto3 without
//! `signature_version`, `s3cmd signurl` and aws-cli v1's `s3 presign` still produce:
//! - header form: `Authorization: AWS <access key>:<base64 signature>`, timed by `x-amz-date`
//!   or `Date` within the clock-skew window;
//! - presigned form: `AWSAccessKeyId`, `Signature` and `Expires` (Unix seconds) in the query,
//!   refused once `Expires` has passed.
//!
//! The string to sign is the method, `Content-MD5`, `Content-Type` and the date line (the
//! `Date` header, or `Expires` for a presigned URL), each followed by a newline, then every
//! `x-amz-*` header as `name:value\n` (lower-case names, sorted), then the resource:
//! `/bucket/key` as sent (the bucket taken from the Host for a virtual-hosted request; a
//! path-style `/bucket` also as `/bucket/`, as botocore signs it), and the query's S3
//! sub-resources, sorted, as `?name` or `?name=decoded value` joined by `&`.
//! When `x-amz-date` is sent, AWS's rules say the date line is empty (the header is signed
//! among the `x-amz-*` ones, as s3cmd signs), while AWS's own worked example puts its value on
//! the date line and leaves it out of the `x-amz-*` lines: both strings are accepted.
//!
//! The body is not covered (SigV2 never signs it; `Content-MD5`, when sent, is signed and
//! checked by the handlers). Every `x-amz-*` header is signed by construction, so a repeated
//! one is refused rather than joined (handlers read the first value). The HMAC is compared in
//! constant time. `--sigv2 off` refuses this mechanism as before.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::request::Parts;
use percent_encoding::percent_decode_str;
use sha1::Sha1;
use subtle::ConstantTimeEq;

use super::amz_date::AmzDate;
use super::error::AuthError;
use super::payload::{self, ContentSha256, Payload};
use super::verify::single_header;
use super::{skew_secs, AuthConfig, Authenticated, Credentials};

type HmacSha1 = Hmac<Sha1>;

/// The query parameters S3 counts as sub-resources in the SigV2 canonical resource (the list
/// botocore's signer and MinIO's verifier share).
const SUB_RESOURCES: &[&str] = &[
    "acl",
    "cors",
    "delete",
    "encryption",
    "legal-hold",
    "lifecycle",
    "location",
    "logging",
    "notification",
    "partNumber",
    "policy",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "retention",
    "select",
    "select-type",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

/// Longest `Authorization` value of this form: `AWS `, an access key and 28 base64 digits.
const AUTHORIZATION_LEN_MAX: usize = 512;

/// Query parameters whose presence means "this is a presigned SigV2 request".
pub(crate) fn is_presigned_param(name: &[u8]) -> bool {
    matches!(name, b"AWSAccessKeyId" | b"Signature")
}

/// Whether an `Authorization` value is of the SigV2 form (`AWS AK:sig`).
pub(crate) fn is_header_form(value: &[u8]) -> bool {
    value == b"AWS" || value.starts_with(b"AWS ")
}

fn disabled() -> AuthError {
    AuthError::InvalidRequest(
        "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
    )
}

/// `Authorization: AWS AK:signature`.
pub(crate) fn authenticate_header(
    parts: &Parts,
    creds: &Credentials,
    cfg: &AuthConfig,
    now: SystemTime,
    virtual_bucket: Option<&str>,
) -> Result<Authenticated, AuthError> {
    if !cfg.sigv2 {
        return Err(disabled());
    }
    let malformed = || {
        AuthError::InvalidArgument("Authorization header is invalid -- one and only one ' ' (space) required")
    };
    let value = single_header(parts, "authorization").map_err(|()| malformed())?.unwrap_or("");
    if value.len() > AUTHORIZATION_LEN_MAX {
        return Err(malformed());
    }
    let (access_key, signature) = value
        .strip_prefix("AWS ")
        .and_then(|rest| rest.rsplit_once(':'))
        .filter(|(ak, sig)| !ak.is_empty() && !sig.is_empty() && !ak.contains(' '))
        .ok_or_else(malformed)?;

    let timestamp = request_time(parts)?;
    if skew_secs(&timestamp, now) > cfg.clock_skew_max.as_secs() {
        return Err(AuthError::RequestTimeTooSkewed);
    }
    let candidates = match single_header(parts, "x-amz-date").ok().flatten() {
        Some(amz_date) => vec![DateLine::Empty, DateLine::AmzDate(amz_date)],
        None => vec![DateLine::Text(single_header(parts, "date").ok().flatten().unwrap_or(""))],
    };
    verify(parts, creds, access_key, signature, &candidates, virtual_bucket)
}

/// What the string to sign carries on its date line.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DateLine<'a> {
    /// The `Date` header, or a presigned URL's `Expires`.
    Text(&'a str),
    /// Nothing: `x-amz-date` is signed among the `x-amz-*` headers.
    Empty,
    /// `x-amz-date`'s value, which then is not among the `x-amz-*` lines.
    AmzDate(&'a str),
}

/// `?AWSAccessKeyId=AK&Expires=unix-seconds&Signature=base64`.
pub(crate) fn authenticate_presigned(
    parts: &Parts,
    query_pairs: &[(Vec<u8>, Vec<u8>)],
    creds: &Credentials,
    cfg: &AuthConfig,
    now: SystemTime,
    virtual_bucket: Option<&str>,
) -> Result<Authenticated, AuthError> {
    if !cfg.sigv2 {
        return Err(disabled());
    }
    let param = |name: &str| -> Result<&str, AuthError> {
        let missing = AuthError::AccessDenied(
            "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters",
        );
        let value = super::presigned::unique_param(query_pairs, name).map_err(|()| {
            AuthError::InvalidArgument("a query-string authentication parameter appears twice")
        })?;
        std::str::from_utf8(value.ok_or(missing)?)
            .map_err(|_| AuthError::InvalidArgument("a query parameter is not UTF-8"))
    };
    let access_key = param("AWSAccessKeyId")?;
    let signature = param("Signature")?;
    let expires = param("Expires")?;
    let expires_at: u64 = expires
        .parse()
        .map_err(|_| AuthError::InvalidArgument("Expires must be a number of seconds since 1970"))?;
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if now_secs > expires_at {
        return Err(AuthError::AccessDenied("Request has expired"));
    }
    verify(parts, creds, access_key, signature, &[DateLine::Text(expires)], virtual_bucket)
}

/// The request time of the header form: `x-amz-date` (RFC 1123, or ISO 8601 basic as SigV4
/// writes it), else `Date`.
fn request_time(parts: &Parts) -> Result<AmzDate, AuthError> {
    let invalid = AuthError::AccessDenied("AWS authentication requires a valid Date or x-amz-date header");
    let repeated = || AuthError::InvalidArgument("x-amz-date must appear once, in ASCII");
    let text = match single_header(parts, "x-amz-date").map_err(|()| repeated())? {
        Some(text) => text,
        None => single_header(parts, "date").map_err(|()| invalid.clone())?.ok_or(invalid.clone())?,
    };
    // RFC 1123 dates in UTC, written with `GMT` or, as AWS's own examples do, `+0000`.
    let gmt = text.strip_suffix("+0000").map(|t| format!("{t}GMT"));
    AmzDate::from_http_date(gmt.as_deref().unwrap_or(text)).or_else(|| AmzDate::parse(text)).ok_or(invalid)
}

fn verify(
    parts: &Parts,
    creds: &Credentials,
    access_key: &str,
    signature: &str,
    date_lines: &[DateLine<'_>],
    virtual_bucket: Option<&str>,
) -> Result<Authenticated, AuthError> {
    let secret = creds.secret(access_key).ok_or(AuthError::InvalidAccessKeyId)?;
    let payload = payload_of(parts)?;
    let given = BASE64.decode(signature).unwrap_or_default();
    // A path-style request for a bucket itself (`/bucket`) is signed by botocore as
    // `/bucket/`, the form AWS gives for buckets addressed by the Host: both name the bucket.
    let path = parts.uri.path();
    let bucket_only = virtual_bucket.is_none() && path.len() > 1 && !path[1..].contains('/');
    let with_slash = format!("{path}/");
    let paths: &[&str] = if bucket_only { &[path, &with_slash] } else { &[path] };
    let mut matched = false;
    for (&date_line, &path) in date_lines.iter().flat_map(|d| paths.iter().map(move |p| (d, p))) {
        let text = string_to_sign(parts, date_line, virtual_bucket, path)?;
        let mut mac = match HmacSha1::new_from_slice(secret.expose().as_bytes()) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC-SHA1 takes keys of every length"),
        };
        mac.update(text.as_bytes());
        let computed: [u8; 20] = mac.finalize().into_bytes().into();
        // Every candidate is computed and compared, whichever matched first.
        matched |= bool::from(given.ct_eq(&computed));
    }
    if matched {
        Ok(Authenticated { access_key: access_key.to_owned(), payload })
    } else {
        Err(AuthError::SignatureDoesNotMatch)
    }
}

/// SigV2 does not sign the body. A client may still send a SHA-256 of it, which is then
/// checked; the aws-chunked forms are SigV4's and refused here.
fn payload_of(parts: &Parts) -> Result<Payload, AuthError> {
    let Some(value) = single_header(parts, "x-amz-content-sha256")
        .map_err(|()| AuthError::InvalidArgument("x-amz-content-sha256 must appear once"))?
    else {
        return Ok(Payload::Unsigned);
    };
    match payload::classify_content_sha256(value)? {
        ContentSha256::Unsigned => Ok(Payload::Unsigned),
        ContentSha256::Hex => Ok(Payload::Sha256(value.to_ascii_lowercase())),
        ContentSha256::Streaming { .. } => {
            Err(AuthError::InvalidRequest("aws-chunked uploads need AWS4-HMAC-SHA256 signatures"))
        }
    }
}

/// The SigV2 string to sign (see the module docs).
pub(crate) fn string_to_sign(
    parts: &Parts,
    date_line: DateLine<'_>,
    virtual_bucket: Option<&str>,
    path: &str,
) -> Result<String, AuthError> {
    let repeated = |name: &str| {
        AuthError::InvalidArgument(if name.starts_with("x-amz-") {
            "a signed x-amz-* header appears more than once"
        } else {
            "a signed header appears more than once"
        })
    };
    let header = |name: &str| single_header(parts, name).map_err(|()| repeated(name));
    let mut out = String::with_capacity(256);
    out.push_str(parts.method.as_str());
    out.push('\n');
    out.push_str(header("content-md5")?.unwrap_or("").trim());
    out.push('\n');
    out.push_str(header("content-type")?.unwrap_or("").trim());
    out.push('\n');
    let (date, skip_amz_date) = match date_line {
        DateLine::Text(text) => (text, false),
        DateLine::Empty => ("", false),
        DateLine::AmzDate(text) => (text, true),
    };
    out.push_str(date.trim());
    out.push('\n');
    let mut amz: Vec<(&str, &str)> = Vec::new();
    for name in parts.headers.keys() {
        let name = name.as_str();
        if name.starts_with("x-amz-") && !(skip_amz_date && name == "x-amz-date") {
            amz.push((name, header(name)?.unwrap_or("").trim()));
        }
    }
    amz.sort_unstable();
    for (name, value) in amz {
        out.push_str(name);
        out.push(':');
        out.push_str(value);
        out.push('\n');
    }
    if let Some(bucket) = virtual_bucket {
        out.push('/');
        out.push_str(bucket);
    }
    out.push_str(path);
    let mut subs: Vec<(&str, Option<String>)> = parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|piece| !piece.is_empty())
        .filter_map(|piece| {
            // Names and values decoded exactly as routing decodes them ('+' a space), so a
            // sub-resource spelled `%74agging` is signed as the `tagging` it will select.
            let decode =
                |text: &str| percent_decode_str(&text.replace('+', " ")).decode_utf8_lossy().into_owned();
            let (name, value) = match piece.split_once('=') {
                Some((name, value)) => (decode(name), Some(decode(value))),
                None => (decode(piece), None),
            };
            let name = SUB_RESOURCES.iter().find(|s| **s == name)?;
            Some((*name, value))
        })
        .collect();
    subs.sort_by(|a, b| a.0.cmp(b.0));
    for (i, (name, value)) in subs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(name);
        if let Some(value) = value {
            out.push('=');
            out.push_str(value);
        }
    }
    Ok(out)
}

//! SigV4 presigned URLs: the `X-Amz-*` query parameters carry what the `Authorization` header
//! would, the canonical query leaves out `X-Amz-Signature`, and the payload is
//! `UNSIGNED-PAYLOAD` unless the client sent (and signed) `x-amz-content-sha256`.

use std::time::{SystemTime, UNIX_EPOCH};

use http::request::Parts;

use super::amz_date::AmzDate;
use super::canonical::{canonical_query, parse_signed_headers, CanonicalParts};
use super::error::{query_error, AuthError};
use super::payload::{self, ContentSha256, Payload, UNSIGNED_PAYLOAD};
use super::signature::{Signature, ALGORITHM};
use super::verify::{check_signed_header_policy, single_header, verify_request_signature, CredentialScope};
use super::{AuthConfig, Authenticated, Credentials};

/// Longest validity of a presigned URL: seven days.
pub const PRESIGNED_EXPIRES_MAX_SECS: u64 = 604_800;

const SIGNATURE_PARAM: &[u8] = b"X-Amz-Signature";

/// Query parameters whose presence means "this is a presigned SigV4 request".
pub(crate) fn is_presigned_param(name: &[u8]) -> bool {
    matches!(name, b"X-Amz-Algorithm" | b"X-Amz-Credential" | b"X-Amz-Signature")
}

/// The value of the presigned parameter `name`: present exactly once, UTF-8.
fn param<'a>(pairs: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Result<&'a str, AuthError> {
    let missing = || {
        query_error(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, \
             X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
        )
    };
    let value =
        unique_param(pairs, name).map_err(|()| query_error(format!("{name} appears more than once")))?;
    std::str::from_utf8(value.ok_or_else(missing)?)
        .map_err(|_| query_error(format!("{name} is not valid UTF-8")))
}

/// The one value of query parameter `name`: `Ok(None)` when it is absent, `Err(())` when it
/// appears more than once (a signature over one of two values must not authorise the other).
pub(crate) fn unique_param<'a>(pairs: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Result<Option<&'a [u8]>, ()> {
    let mut found = pairs.iter().filter(|(n, _)| n.as_slice() == name.as_bytes());
    let first = found.next().map(|(_, value)| value.as_slice());
    match found.next() {
        Some(_) => Err(()),
        None => Ok(first),
    }
}

pub(crate) fn authenticate_presigned(
    parts: &Parts,
    query_pairs: &[(Vec<u8>, Vec<u8>)],
    creds: &Credentials,
    cfg: &AuthConfig,
    now: SystemTime,
) -> Result<Authenticated, AuthError> {
    let algorithm = param(query_pairs, "X-Amz-Algorithm")?;
    let credential = param(query_pairs, "X-Amz-Credential")?;
    let date = param(query_pairs, "X-Amz-Date")?;
    let expires = param(query_pairs, "X-Amz-Expires")?;
    let signed_headers = param(query_pairs, "X-Amz-SignedHeaders")?;
    let signature = param(query_pairs, "X-Amz-Signature")?;

    if algorithm != ALGORITHM {
        return Err(query_error("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\""));
    }
    let scope = CredentialScope::parse(credential).ok_or_else(|| {
        query_error("Error parsing the X-Amz-Credential parameter; it must be AK/date/region/s3/aws4_request")
    })?;
    let timestamp = AmzDate::parse(date).ok_or_else(|| {
        query_error("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    })?;
    let expires_secs = parse_expires(expires)?;
    let signed_headers = parse_signed_headers(signed_headers).map_err(query_error)?;
    let signature =
        Signature::from_hex(signature).ok_or_else(|| query_error("X-Amz-Signature must be 64 hex digits"))?;
    scope
        .check(cfg, &timestamp)
        .map_err(|why| query_error(format!("Error parsing the X-Amz-Credential parameter; {why}")))?;

    // Valid from (X-Amz-Date - allowed skew) to (X-Amz-Date + X-Amz-Expires).
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if timestamp.unix_secs > now_secs.saturating_add(cfg.clock_skew_max.as_secs()) {
        return Err(AuthError::RequestNotYetValid);
    }
    if now_secs > timestamp.unix_secs.saturating_add(expires_secs) {
        return Err(AuthError::ExpiredToken);
    }
    if creds.secret(scope.access_key).is_none() {
        return Err(AuthError::InvalidAccessKeyId);
    }
    check_signed_header_policy(parts, &signed_headers)?;

    let content_sha256 = single_header(parts, "x-amz-content-sha256")
        .map_err(|()| AuthError::InvalidArgument("x-amz-content-sha256 must appear once"))?;
    let (payload_hash, payload) = match content_sha256 {
        None => (UNSIGNED_PAYLOAD, Payload::Unsigned),
        Some(value) => match payload::classify_content_sha256(value)? {
            ContentSha256::Unsigned => (value, Payload::Unsigned),
            ContentSha256::Hex => (value, Payload::Sha256(value.to_ascii_lowercase())),
            ContentSha256::Streaming { .. } => {
                return Err(AuthError::InvalidRequest("aws-chunked bodies cannot be sent to a presigned URL"))
            }
        },
    };

    let canonical_query = canonical_query(query_pairs, Some(SIGNATURE_PARAM));
    let canonical = CanonicalParts {
        method: parts.method.as_str(),
        raw_path: parts.uri.path(),
        query: &canonical_query,
        headers: &parts.headers,
        authority: parts.uri.authority().map(|a| a.as_str()),
        signed_headers: &signed_headers,
        payload_hash,
    };
    verify_request_signature(creds, &scope, &timestamp, &canonical, &signature)?;
    Ok(Authenticated { access_key: scope.access_key.to_owned(), payload })
}

/// `X-Amz-Expires`: decimal seconds in 1..=604800.
fn parse_expires(text: &str) -> Result<u64, AuthError> {
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(query_error("X-Amz-Expires should be a number"));
    }
    let secs: u64 = text.parse().map_err(|_| query_error("X-Amz-Expires should be a number"))?;
    if secs == 0 {
        return Err(query_error("X-Amz-Expires must be greater than 0"));
    }
    if secs > PRESIGNED_EXPIRES_MAX_SECS {
        return Err(query_error("X-Amz-Expires must be less than a week (in seconds) that is 604800"));
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_bounds() {
        assert_eq!(parse_expires("1"), Ok(1));
        assert_eq!(parse_expires("604800"), Ok(604_800));
        for bad in ["0", "604801", "-1", "", "1e3", " 5", "99999999999999999999"] {
            assert_eq!(parse_expires(bad).expect_err(bad).code(), "AuthorizationQueryParametersError");
        }
    }
}

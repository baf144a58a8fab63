//! SigV4 in the `Authorization` header:
//! `AWS4-HMAC-SHA256 Credential=AK/date/region/s3/aws4_request, SignedHeaders=a;b, Signature=hex`.

use std::time::SystemTime;

use http::request::Parts;

use super::amz_date::AmzDate;
use super::canonical::{canonical_query, parse_signed_headers, CanonicalParts};
use super::error::{malformed, AuthError};
use super::payload::{self, ChunkSigning, ChunkedSpec, ContentSha256, Payload};
use super::signature::{Signature, ALGORITHM};
use super::verify::{check_signed_header_policy, single_header, verify_request_signature, CredentialScope};
use super::{skew_secs, AuthConfig, Authenticated, Credentials};

/// Longest `Authorization` value parsed; real ones are about 200 bytes plus the header list.
const AUTHORIZATION_LEN_MAX: usize = 4096;

/// The three components of a SigV4 `Authorization` header, unvalidated beyond syntax.
#[derive(Debug)]
pub struct ParsedAuthorization<'a> {
    /// `AK/yyyymmdd/region/s3/aws4_request`, as sent.
    pub credential: &'a str,
    /// The `;`-separated lower-case names of the signed headers, as sent.
    pub signed_headers: &'a str,
    /// The hex signature, as sent.
    pub signature: &'a str,
}

/// Parses an `Authorization` value. Never panics, whatever the input.
pub fn parse_authorization(value: &str) -> Result<ParsedAuthorization<'_>, AuthError> {
    if value.len() > AUTHORIZATION_LEN_MAX {
        return Err(malformed("the header is too long"));
    }
    let value = value.trim();
    let (algorithm, rest) = value.split_once([' ', '\t']).unwrap_or((value, ""));
    if algorithm != ALGORITHM {
        return Err(if algorithm.starts_with("AWS") {
            AuthError::InvalidRequest(
                "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
            )
        } else {
            AuthError::InvalidArgument("Unsupported Authorization Type")
        });
    }
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for component in rest.split(',') {
        let component = component.trim();
        let Some((key, val)) = component.split_once('=') else {
            return Err(malformed(format!("the component '{}' has no '='", truncate(component))));
        };
        let slot = match key.trim() {
            "Credential" => &mut credential,
            "SignedHeaders" => &mut signed_headers,
            "Signature" => &mut signature,
            other => return Err(malformed(format!("unknown component '{}'", truncate(other)))),
        };
        if slot.replace(val.trim()).is_some() {
            return Err(malformed(format!("the component '{}' appears twice", key.trim())));
        }
    }
    match (credential, signed_headers, signature) {
        (Some(credential), Some(signed_headers), Some(signature)) => {
            Ok(ParsedAuthorization { credential, signed_headers, signature })
        }
        _ => Err(malformed("it must contain Credential, SignedHeaders and Signature")),
    }
}

fn truncate(text: &str) -> &str {
    let mut end = text.len().min(32);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The request timestamp: `x-amz-date`, else the RFC 1123 `Date` header.
fn request_timestamp(parts: &Parts) -> Result<AmzDate, AuthError> {
    let invalid = AuthError::AccessDenied("AWS authentication requires a valid Date or x-amz-date header");
    if let Some(text) = single_header(parts, "x-amz-date").map_err(|()| invalid.clone())? {
        return AmzDate::parse(text).ok_or(invalid);
    }
    match single_header(parts, "date").map_err(|()| invalid.clone())? {
        Some(text) => AmzDate::from_http_date(text).ok_or(invalid),
        None => Err(invalid),
    }
}

pub(crate) fn authenticate_header(
    parts: &Parts,
    query_pairs: &[(Vec<u8>, Vec<u8>)],
    creds: &Credentials,
    cfg: &AuthConfig,
    now: SystemTime,
) -> Result<Authenticated, AuthError> {
    let value = single_header(parts, "authorization")
        .map_err(|()| malformed("there must be exactly one Authorization header, in ASCII"))?
        .unwrap_or("");
    let parsed = parse_authorization(value)?;
    let scope = CredentialScope::parse(parsed.credential)
        .ok_or_else(|| malformed("the Credential must be AK/date/region/s3/aws4_request"))?;
    let signed_headers = parse_signed_headers(parsed.signed_headers).map_err(malformed)?;
    let signature = Signature::from_hex(parsed.signature)
        .ok_or_else(|| malformed("the Signature must be 64 hex digits"))?;

    let timestamp = request_timestamp(parts)?;
    scope.check(cfg, &timestamp).map_err(AuthError::AuthorizationHeaderMalformed)?;
    if skew_secs(&timestamp, now) > cfg.clock_skew_max.as_secs() {
        return Err(AuthError::RequestTimeTooSkewed);
    }
    if creds.secret(scope.access_key).is_none() {
        return Err(AuthError::InvalidAccessKeyId);
    }
    check_signed_header_policy(parts, &signed_headers)?;

    let content_sha256 = single_header(parts, "x-amz-content-sha256")
        .map_err(|()| AuthError::InvalidArgument("x-amz-content-sha256 must appear once"))?
        .ok_or(AuthError::InvalidRequest("Missing required header for this request: x-amz-content-sha256"))?;
    let kind = payload::classify_content_sha256(content_sha256)?;

    let canonical_query = canonical_query(query_pairs, None);
    let canonical = CanonicalParts {
        method: parts.method.as_str(),
        raw_path: parts.uri.path(),
        query: &canonical_query,
        headers: &parts.headers,
        authority: parts.uri.authority().map(|a| a.as_str()),
        signed_headers: &signed_headers,
        payload_hash: content_sha256,
    };
    let key = verify_request_signature(creds, &scope, &timestamp, &canonical, &signature)?;

    // The head is authentic from here on; what remains describes how to check the body.
    let payload = match kind {
        ContentSha256::Unsigned => Payload::Unsigned,
        ContentSha256::Hex => Payload::Sha256(content_sha256.to_ascii_lowercase()),
        ContentSha256::Streaming { signed, trailer } => {
            let declared_trailers = payload::declared_trailers(&parts.headers)?;
            if !trailer && !declared_trailers.is_empty() {
                return Err(AuthError::InvalidRequest(
                    "x-amz-trailer requires a STREAMING-*-TRAILER x-amz-content-sha256",
                ));
            }
            let signing = signed.then(|| ChunkSigning {
                key,
                seed: signature,
                timestamp: timestamp.text.clone(),
                scope: scope.scope_string(),
            });
            Payload::Chunked(ChunkedSpec {
                signing,
                has_trailer: trailer,
                declared_trailers,
                decoded_content_length: payload::decoded_content_length(&parts.headers)?,
            })
        }
    };
    Ok(Authenticated { access_key: scope.access_key.to_owned(), payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_layout_and_variants() {
        let doc = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
                   SignedHeaders=host;range;x-amz-date, Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
        let parsed = parse_authorization(doc).expect("documented form");
        assert_eq!(parsed.credential, "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request");
        assert_eq!(parsed.signed_headers, "host;range;x-amz-date");
        let compact = doc.replace(", ", ",");
        assert!(parse_authorization(&compact).is_ok());
        let reordered = "AWS4-HMAC-SHA256 Signature=ab, Credential=x/y, SignedHeaders=host";
        assert!(parse_authorization(reordered).is_ok());
    }

    #[test]
    fn rejects_missing_duplicated_and_unknown_components() {
        for bad in [
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256 ",
            "AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host",
            "AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host, Signature=1, Signature=2",
            "AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host, Signature=1, Extra=3",
            "AWS4-HMAC-SHA256 Credential=a/b SignedHeaders=host Signature=1",
        ] {
            let err = parse_authorization(bad).expect_err(bad);
            assert_eq!(err.code(), "AuthorizationHeaderMalformed", "{bad}");
        }
        assert_eq!(parse_authorization("AWS AKIA:c2ln").expect_err("v2").code(), "InvalidRequest");
        assert_eq!(parse_authorization("Bearer token").expect_err("bearer").code(), "InvalidArgument");
    }
}

//! Request authentication: AWS Signature Version 4 as S3 speaks it, and Version 2 for the
//! clients that still sign that way (`sigv2.rs`, switched off by `--sigv2 off`).
//!
//! Map, in the order a request meets it:
//! - [`authenticate`] (this file) picks the mechanism: `Authorization` header (`header.rs`) or
//!   presigned query (`presigned.rs`); both share the scope, header-policy and signature steps
//!   in `verify.rs`, built on the canonical request (`canonical.rs`), the HMAC primitives
//!   (`signature.rs`) and the timestamp parser (`amz_date.rs`). An `Authorization: AWS ..`
//!   header or an `AWSAccessKeyId`/`Signature` query goes to `sigv2.rs` instead.
//! - The result says how to check the body ([`Payload`], `payload.rs`): a SHA-256 to compare
//!   after reading ([`verify_payload_sha256`]), nothing (`UNSIGNED-PAYLOAD`), or an aws-chunked
//!   body to run through [`ChunkedDecoder`] (`chunked.rs`), which verifies every chunk
//!   signature, the final empty chunk and the trailers.
//! - Users come from [`Credentials`] (`credentials.rs`); errors are [`AuthError`] (`error.rs`),
//!   each with its S3 code and HTTP status.
//!
//! Security invariants: the seed signature is verified on every path (including
//! `STREAMING-UNSIGNED-PAYLOAD-TRAILER`); signatures are compared in constant time and their type
//! has no `PartialEq`; `host` and every `x-amz-*` header must be signed; nothing is allocated from
//! a length the client announced.

mod amz_date;
pub(crate) mod canonical;
mod chunked;
mod credentials;
mod error;
mod header;
mod payload;
mod presigned;
mod signature;
mod sigv2;
mod verify;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::request::Parts;

pub use chunked::{ChunkedDecoder, Trailers, CHUNK_LINE_MAX};
pub use credentials::{Credentials, CredentialsError, Secret, DEV_ACCESS_KEY, DEV_SECRET_KEY};
pub use error::AuthError;
pub use header::{parse_authorization, ParsedAuthorization};
pub use payload::{stored_content_encoding, verify_payload_sha256, ChunkedSpec, Payload};
pub use presigned::PRESIGNED_EXPIRES_MAX_SECS;

/// The only service name a credential scope may carry.
pub(crate) const SERVICE: &str = "s3";

/// Server-side authentication settings.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// The region every credential scope must name (`us-east-1` by default).
    pub region: String,
    /// Largest accepted difference between the request time and the server clock.
    pub clock_skew_max: Duration,
    /// Whether Signature Version 2 (header and presigned) is accepted.
    pub sigv2: bool,
    /// The domain of virtual-hosted-style requests (`--domain`): SigV2 signs the bucket that
    /// such a request names in its Host as part of the resource.
    pub domain: Option<String>,
}

impl AuthConfig {
    /// Settings for `region` with AWS's ±15 minute skew window, SigV2 accepted, no domain.
    pub fn new(region: impl Into<String>) -> Self {
        AuthConfig {
            region: region.into(),
            clock_skew_max: Duration::from_secs(15 * 60),
            sigv2: true,
            domain: None,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig::new("us-east-1")
    }
}

/// A request whose head passed authentication.
#[derive(Debug)]
pub struct Authenticated {
    /// The user the request acts as.
    pub access_key: String,
    /// How the body must still be checked.
    pub payload: Payload,
}

/// Whether the request carries any S3 authentication (an `Authorization` header or a presigned
/// signature). Requests that do not are anonymous: S3 operations refuse them, and only the
/// operational endpoints (`/health`, `/metrics`) answer them.
pub fn has_authentication(parts: &Parts) -> bool {
    if parts.headers.contains_key(http::header::AUTHORIZATION) {
        return true;
    }
    let query = parts.uri.query().unwrap_or("");
    canonical::parse_query(query).iter().any(|(name, _)| {
        presigned::is_presigned_param(name) || name == b"Signature" || name == b"AWSAccessKeyId"
    })
}

/// Verifies the request head. `now` is injected so tests control the clock.
///
/// On success the head is authentic; the body still has to be checked as
/// [`Authenticated::payload`] says before anything is committed.
pub fn authenticate(
    parts: &Parts,
    creds: &Credentials,
    cfg: &AuthConfig,
    now: SystemTime,
) -> Result<Authenticated, AuthError> {
    let query_pairs = canonical::parse_query(parts.uri.query().unwrap_or(""));
    let presigned_v4 = query_pairs.iter().any(|(name, _)| presigned::is_presigned_param(name));
    let presigned_v2 = query_pairs.iter().any(|(name, _)| sigv2::is_presigned_param(name));
    let header = parts.headers.get(http::header::AUTHORIZATION);
    let virtual_bucket = || crate::routing::virtual_host_bucket(&parts.headers, cfg.domain.as_deref());
    match (header, presigned_v4, presigned_v2) {
        (Some(_), true, _) | (Some(_), _, true) | (None, true, true) => Err(AuthError::InvalidArgument(
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
             Signature query string parameter or the Authorization header should be specified",
        )),
        (Some(value), false, false) if sigv2::is_header_form(value.as_bytes()) => {
            sigv2::authenticate_header(parts, creds, cfg, now, virtual_bucket().as_deref())
        }
        (Some(_), false, false) => header::authenticate_header(parts, &query_pairs, creds, cfg, now),
        (None, true, false) => presigned::authenticate_presigned(parts, &query_pairs, creds, cfg, now),
        (None, false, true) => {
            sigv2::authenticate_presigned(parts, &query_pairs, creds, cfg, now, virtual_bucket().as_deref())
        }
        (None, false, false) => Err(AuthError::AccessDenied("Access Denied")),
    }
}

/// How the body of an anonymous request (one without any authentication, let through by a
/// bucket policy or ACL) is checked: by the SHA-256 it names in `x-amz-content-sha256`, as
/// an aws-chunked body with unsigned chunks (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, its
/// trailing checksum verified), or not at all. The signed streaming forms need a signature
/// this request does not have.
pub fn anonymous_payload(parts: &Parts) -> Result<Payload, AuthError> {
    let value = verify::single_header(parts, "x-amz-content-sha256")
        .map_err(|()| AuthError::InvalidArgument("x-amz-content-sha256 must appear once"))?;
    let Some(value) = value else { return Ok(Payload::Unsigned) };
    Ok(match payload::classify_content_sha256(value)? {
        payload::ContentSha256::Unsigned => Payload::Unsigned,
        payload::ContentSha256::Hex => Payload::Sha256(value.to_ascii_lowercase()),
        payload::ContentSha256::Streaming { signed: false, trailer } => Payload::Chunked(ChunkedSpec {
            signing: None,
            has_trailer: trailer,
            declared_trailers: payload::declared_trailers(&parts.headers)?,
            decoded_content_length: payload::decoded_content_length(&parts.headers)?,
        }),
        payload::ContentSha256::Streaming { signed: true, .. } => {
            return Err(AuthError::AccessDenied("signed aws-chunked bodies need a signed request"))
        }
    })
}

/// |request time − now| in seconds.
fn skew_secs(timestamp: &amz_date::AmzDate, now: SystemTime) -> u64 {
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    now_secs.abs_diff(timestamp.unix_secs)
}

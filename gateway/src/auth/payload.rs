//! What the signature says about the body: `x-amz-content-sha256` and the aws-chunked headers.

use std::fmt;

use http::HeaderMap;
use subtle::ConstantTimeEq;

use super::error::AuthError;
use super::signature::{Signature, SigningKey};

/// How the request body must be checked once authentication of the head succeeded.
#[derive(Debug)]
pub enum Payload {
    /// The body's SHA-256 must equal this (lower-case hex from `x-amz-content-sha256`); check it
    /// with [`verify_payload_sha256`] after reading the body and before committing anything.
    Sha256(String),
    /// `UNSIGNED-PAYLOAD`, or a presigned URL without a payload hash: the body is not covered.
    Unsigned,
    /// An aws-chunked body (three forms): decode it with [`super::ChunkedDecoder`].
    Chunked(ChunkedSpec),
}

impl Payload {
    /// The decoded body length an aws-chunked body announced, if this is one.
    pub fn decoded_content_length(&self) -> Option<u64> {
        match self {
            Payload::Chunked(spec) => Some(spec.decoded_content_length),
            _ => None,
        }
    }
}

/// Per-chunk signing state of the signed aws-chunked forms: chained from the seed signature.
#[derive(Clone)]
pub(crate) struct ChunkSigning {
    pub key: SigningKey,
    pub seed: Signature,
    /// The request timestamp (`YYYYMMDDTHHMMSSZ`) as in the seed string to sign.
    pub timestamp: String,
    /// `date/region/s3/aws4_request`.
    pub scope: String,
}

/// Everything the aws-chunked decoder needs, taken from the authenticated request head.
#[derive(Clone)]
pub struct ChunkedSpec {
    /// `None` for `STREAMING-UNSIGNED-PAYLOAD-TRAILER` (chunks carry no signatures).
    pub(crate) signing: Option<ChunkSigning>,
    /// Whether trailing headers follow the final chunk.
    pub(crate) has_trailer: bool,
    /// Lower-case trailer names declared in `x-amz-trailer`; each must arrive exactly once.
    pub(crate) declared_trailers: Vec<String>,
    /// `x-amz-decoded-content-length`: the decoded body must be exactly this long.
    pub(crate) decoded_content_length: u64,
}

impl ChunkedSpec {
    /// `x-amz-decoded-content-length`.
    pub fn decoded_content_length(&self) -> u64 {
        self.decoded_content_length
    }

    /// Whether every chunk carries a signature chained from the seed signature.
    pub fn is_signed(&self) -> bool {
        self.signing.is_some()
    }

    /// The trailer names declared in `x-amz-trailer` (lower case).
    pub fn declared_trailers(&self) -> &[String] {
        &self.declared_trailers
    }
}

impl fmt::Debug for ChunkedSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkedSpec")
            .field("signed", &self.signing.is_some())
            .field("has_trailer", &self.has_trailer)
            .field("declared_trailers", &self.declared_trailers)
            .field("decoded_content_length", &self.decoded_content_length)
            .finish()
    }
}

/// The meaning of an `x-amz-content-sha256` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContentSha256 {
    Unsigned,
    Hex,
    /// aws-chunked: `signed` chunks or not, with `trailer` or not.
    Streaming {
        signed: bool,
        trailer: bool,
    },
}

pub(crate) const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// Classifies `x-amz-content-sha256`.
pub(crate) fn classify_content_sha256(value: &str) -> Result<ContentSha256, AuthError> {
    match value {
        UNSIGNED_PAYLOAD => Ok(ContentSha256::Unsigned),
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" => Ok(ContentSha256::Streaming { signed: true, trailer: false }),
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => {
            Ok(ContentSha256::Streaming { signed: true, trailer: true })
        }
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => Ok(ContentSha256::Streaming { signed: false, trailer: true }),
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD" | "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER" => {
            Err(AuthError::InvalidRequest("SigV4a (ECDSA) streaming signatures are not supported"))
        }
        v if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(ContentSha256::Hex),
        _ => Err(AuthError::InvalidArgument(
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, a STREAMING-* value or a hex SHA-256",
        )),
    }
}

/// Checksum trailers a client may declare in `x-amz-trailer`.
const ALLOWED_TRAILERS: [&str; 5] = [
    "x-amz-checksum-crc32",
    "x-amz-checksum-crc32c",
    "x-amz-checksum-crc64nvme",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
];

/// Parses `x-amz-trailer` (comma-separated names). Absent means no trailers.
pub(crate) fn declared_trailers(headers: &HeaderMap) -> Result<Vec<String>, AuthError> {
    let mut names = Vec::new();
    for value in headers.get_all("x-amz-trailer") {
        let text =
            value.to_str().map_err(|_| AuthError::InvalidRequest("x-amz-trailer is not valid ASCII"))?;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let name = name.to_ascii_lowercase();
            if !ALLOWED_TRAILERS.contains(&name.as_str()) {
                return Err(AuthError::InvalidRequest(
                    "The value specified in the x-amz-trailer header is not supported",
                ));
            }
            if names.contains(&name) {
                return Err(AuthError::InvalidRequest("x-amz-trailer names a trailer twice"));
            }
            names.push(name);
        }
    }
    Ok(names)
}

/// Parses `x-amz-decoded-content-length` (required for every aws-chunked form).
pub(crate) fn decoded_content_length(headers: &HeaderMap) -> Result<u64, AuthError> {
    let missing = AuthError::MissingSecurityHeader("x-amz-decoded-content-length");
    let mut values = headers.get_all("x-amz-decoded-content-length").iter();
    let value = values.next().ok_or(missing)?;
    if values.next().is_some() {
        return Err(AuthError::InvalidArgument("x-amz-decoded-content-length appears twice"));
    }
    let text = value.to_str().unwrap_or("");
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthError::InvalidArgument("x-amz-decoded-content-length is not a number"));
    }
    text.parse::<u64>().map_err(|_| AuthError::InvalidArgument("x-amz-decoded-content-length is too large"))
}

/// Checks a body's SHA-256 against the signed `x-amz-content-sha256` hex value.
pub fn verify_payload_sha256(expected_hex: &str, actual: &[u8; 32]) -> Result<(), AuthError> {
    let mut expected = [0u8; 32];
    if expected_hex.len() != 64 || hex::decode_to_slice(expected_hex, &mut expected).is_err() {
        return Err(AuthError::XAmzContentSHA256Mismatch);
    }
    if bool::from(expected.ct_eq(actual)) {
        Ok(())
    } else {
        Err(AuthError::XAmzContentSHA256Mismatch)
    }
}

/// The `Content-Encoding` to store for an aws-chunked upload: the value without the
/// `aws-chunked` coding (which describes the transfer, not the object), the rest exactly as
/// sent (`aws-chunked, deflate, gzip` stores `deflate, gzip`), or `None` if nothing else
/// remains.
pub fn stored_content_encoding(value: &str) -> Option<String> {
    let kept: Vec<&str> = value
        .split(',')
        .filter(|coding| !coding.trim().is_empty() && !coding.trim().eq_ignore_ascii_case("aws-chunked"))
        .collect();
    let kept = kept.join(",");
    let kept = kept.trim();
    (!kept.is_empty()).then(|| kept.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn content_sha256_values() {
        assert_eq!(classify_content_sha256("UNSIGNED-PAYLOAD"), Ok(ContentSha256::Unsigned));
        assert_eq!(
            classify_content_sha256("STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            Ok(ContentSha256::Streaming { signed: false, trailer: true })
        );
        assert_eq!(classify_content_sha256(&"A".repeat(64)), Ok(ContentSha256::Hex));
        assert!(classify_content_sha256(&"g".repeat(64)).is_err());
        assert!(classify_content_sha256("unsigned-payload").is_err());
        assert!(classify_content_sha256("").is_err());
    }

    #[test]
    fn payload_hash_check() {
        let digest: [u8; 32] = Sha256::digest(b"Welcome to Amazon S3.").into();
        let good = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
        assert_eq!(verify_payload_sha256(good, &digest), Ok(()));
        assert_eq!(verify_payload_sha256(&good.to_uppercase(), &digest), Ok(()));
        let bad = good.replace('4', "5");
        assert_eq!(verify_payload_sha256(&bad, &digest), Err(AuthError::XAmzContentSHA256Mismatch));
        assert_eq!(verify_payload_sha256("short", &digest), Err(AuthError::XAmzContentSHA256Mismatch));
    }

    #[test]
    fn trailer_declarations() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-amz-trailer",
            http::HeaderValue::from_static("x-amz-checksum-crc32, X-Amz-Checksum-Sha256"),
        );
        assert_eq!(
            declared_trailers(&headers),
            Ok(vec!["x-amz-checksum-crc32".to_owned(), "x-amz-checksum-sha256".to_owned()])
        );
        headers.insert("x-amz-trailer", http::HeaderValue::from_static("x-amz-meta-evil"));
        assert!(declared_trailers(&headers).is_err());
        headers.insert(
            "x-amz-trailer",
            http::HeaderValue::from_static("x-amz-checksum-crc32,x-amz-checksum-crc32"),
        );
        assert!(declared_trailers(&headers).is_err());
    }

    #[test]
    fn aws_chunked_is_not_stored_as_content_encoding() {
        assert_eq!(stored_content_encoding("aws-chunked"), None);
        assert_eq!(stored_content_encoding("aws-chunked,gzip"), Some("gzip".to_owned()));
        assert_eq!(stored_content_encoding("gzip"), Some("gzip".to_owned()));
        assert_eq!(stored_content_encoding("aws-chunked, deflate, gzip"), Some("deflate, gzip".to_owned()));
        assert_eq!(stored_content_encoding("gzip ,aws-chunked, br"), Some("gzip , br".to_owned()));
        assert_eq!(stored_content_encoding(" aws-chunked ,, "), None);
    }
}

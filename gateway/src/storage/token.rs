//! Continuation tokens: opaque to clients, authenticated with a server secret, bound to the
//! listing they continue (kind, bucket, prefix, delimiter, encoding), and carrying the resume
//! position (the last key or common prefix returned). A position, never an offset, so tokens
//! stay valid under concurrent writes. Garbage and tampered tokens are 400 InvalidArgument.
//!
//! Layout before base64url: `version (1) | kind (1) | resume | mac (16)`, where mac is the first
//! 16 bytes of HMAC-SHA256(secret, version | kind | len-prefixed bucket, prefix, delimiter |
//! encoding flag | resume).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{S3Error, S3ErrorCode, S3Result};

const TOKEN_VERSION: u8 = 1;
const MAC_LEN: usize = 16;
/// A token never needs to carry more than a key or a prefix of one (1024 bytes) plus framing.
const TOKEN_CHARS_MAX: usize = 4096;

/// Which listing a token continues; its byte is in the token and the MAC, so a token of one
/// kind is refused by the other. Never renumber: issued tokens carry the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// ListObjectsV2: resumes after a key or common prefix.
    ListObjectsV2 = 1,
    /// ListBuckets: resumes after a bucket name.
    ListBuckets = 2,
    /// The usage extension (`GET /bucket?usage`): resumes after a key or common prefix.
    Usage = 3,
}

/// What a token is bound to.
#[derive(Debug, Clone, Copy)]
pub struct TokenScope<'a> {
    /// The listing operation.
    pub kind: TokenKind,
    /// The bucket listed (empty for ListBuckets).
    pub bucket: &'a str,
    /// The request's `prefix`.
    pub prefix: &'a [u8],
    /// The request's `delimiter`; ListBuckets puts the caller's access key here, so that a
    /// token is good only for the user it was issued to.
    pub delimiter: &'a [u8],
    /// Whether the request asked `encoding-type=url`.
    pub url_encoding: bool,
}

/// The server secret that authenticates continuation tokens (stored in the engine, so tokens
/// survive restarts).
pub struct TokenKey {
    secret: [u8; 32],
}

impl TokenKey {
    /// A key from the 32-byte secret.
    pub fn new(secret: [u8; 32]) -> Self {
        TokenKey { secret }
    }

    fn mac(&self, scope: &TokenScope<'_>, resume: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(&[TOKEN_VERSION, scope.kind as u8]);
        for part in [scope.bucket.as_bytes(), scope.prefix, scope.delimiter] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac.update(&[u8::from(scope.url_encoding)]);
        mac.update(resume);
        mac
    }

    /// A token (base64url, no padding) carrying `resume` for `scope`. The resume position is
    /// authenticated, not encrypted: a client can read it.
    pub fn encode(&self, scope: &TokenScope<'_>, resume: &[u8]) -> String {
        let tag = self.mac(scope, resume).finalize().into_bytes();
        let mut raw = Vec::with_capacity(2 + resume.len() + MAC_LEN);
        raw.extend_from_slice(&[TOKEN_VERSION, scope.kind as u8]);
        raw.extend_from_slice(resume);
        raw.extend_from_slice(&tag[..MAC_LEN]);
        B64URL.encode(raw)
    }

    /// The resume position carried by `token`, if it is authentic and belongs to `scope`.
    pub fn decode(&self, scope: &TokenScope<'_>, token: &str) -> S3Result<Vec<u8>> {
        let bad = || {
            S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "The continuation token provided is incorrect",
            )
        };
        if token.len() > TOKEN_CHARS_MAX {
            return Err(bad());
        }
        let raw = B64URL.decode(token.trim_end_matches('=')).map_err(|_| bad())?;
        if raw.len() < 2 + MAC_LEN || raw[0] != TOKEN_VERSION || raw[1] != scope.kind as u8 {
            return Err(bad());
        }
        let (body, tag) = raw.split_at(raw.len() - MAC_LEN);
        let resume = &body[2..];
        // Constant-time comparison of the truncated tag.
        self.mac(scope, resume).verify_truncated_left(tag).map_err(|_| bad())?;
        Ok(resume.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope<'a>(prefix: &'a [u8]) -> TokenScope<'a> {
        TokenScope {
            kind: TokenKind::ListObjectsV2,
            bucket: "b",
            prefix,
            delimiter: b"/",
            url_encoding: true,
        }
    }

    #[test]
    fn round_trip_and_binding() {
        let k = TokenKey::new([3; 32]);
        let t = k.encode(&scope(b"p/"), b"p/last key");
        assert_eq!(k.decode(&scope(b"p/"), &t).unwrap(), b"p/last key");
        // Bound to the prefix, the key and the kind.
        assert!(k.decode(&scope(b"q/"), &t).is_err());
        assert!(TokenKey::new([4; 32]).decode(&scope(b"p/"), &t).is_err());
        let other = TokenScope { kind: TokenKind::ListBuckets, ..scope(b"p/") };
        assert!(k.decode(&other, &t).is_err());
    }

    #[test]
    fn garbage_and_tampered_tokens_are_invalid_argument() {
        let k = TokenKey::new([3; 32]);
        for bad in ["", "!!!!", "AAAA", &"A".repeat(5000)] {
            assert_eq!(k.decode(&scope(b""), bad).unwrap_err().code, S3ErrorCode::InvalidArgument, "{bad:?}");
        }
        let t = k.encode(&scope(b""), b"key");
        let mut raw = B64URL.decode(&t).unwrap();
        raw[3] ^= 1;
        let tampered = B64URL.encode(raw);
        assert_eq!(k.decode(&scope(b""), &tampered).unwrap_err().code, S3ErrorCode::InvalidArgument);
    }
}

//! HMAC-SHA256 primitives of SigV4: the signing-key derivation, the signature type, and the
//! constant-time comparison.
//!
//! `Signature` deliberately has no `PartialEq`: the only way to compare two is `verify`, which
//! uses `subtle` so the time taken does not reveal how many leading bytes matched.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::credentials::Secret;

type HmacSha256 = Hmac<Sha256>;

/// The algorithm name of every SigV4 string to sign for the seed signature.
pub(crate) const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Hex SHA-256 of the empty string, used in every chunk string to sign.
pub(crate) const EMPTY_SHA256_HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A 32-byte SigV4 signature. No `PartialEq`, and `Debug` prints only a prefix.
#[derive(Clone)]
pub struct Signature([u8; 32]);

impl Signature {
    /// Parses exactly 64 hex digits (either case); anything else is `None`.
    pub(crate) fn from_hex(text: &str) -> Option<Signature> {
        if text.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Signature(bytes))
    }

    /// Compares in constant time.
    pub(crate) fn verify(&self, expected: &Signature) -> bool {
        self.0.ct_eq(&expected.0).into()
    }

    /// Lowercase hex, as it appears in the next chunk's string to sign.
    pub(crate) fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({}..)", hex::encode(&self.0[..4]))
    }
}

/// The key derived from the secret for one date, region and service. Never printed.
#[derive(Clone)]
pub(crate) struct SigningKey([u8; 32]);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

impl SigningKey {
    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request").
    pub(crate) fn derive(secret: &Secret, date: &str, region: &str, service: &str) -> SigningKey {
        let mut seed = Vec::with_capacity(4 + secret.expose().len());
        seed.extend_from_slice(b"AWS4");
        seed.extend_from_slice(secret.expose().as_bytes());
        let k_date = hmac(&seed, date.as_bytes());
        let k_region = hmac(&k_date, region.as_bytes());
        let k_service = hmac(&k_region, service.as_bytes());
        SigningKey(hmac(&k_service, b"aws4_request"))
    }

    /// The signature of a string to sign.
    pub(crate) fn sign(&self, string_to_sign: &[u8]) -> Signature {
        Signature(hmac(&self.0, string_to_sign))
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC-SHA256 takes keys of every length"),
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// `AWS4-HMAC-SHA256\n<timestamp>\n<scope>\n<hex sha256(canonical request)>`.
pub(crate) fn string_to_sign(timestamp: &str, scope: &str, canonical_request: &[u8]) -> String {
    format!("{ALGORITHM}\n{timestamp}\n{scope}\n{}", sha256_hex(canonical_request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_parsing_and_comparison() {
        let a = Signature::from_hex(&"ab".repeat(32)).expect("64 hex digits");
        let b = Signature::from_hex(&"AB".repeat(32)).expect("upper case is accepted");
        assert!(a.verify(&b));
        let c = Signature::from_hex(&format!("{}ac", "ab".repeat(31))).expect("valid");
        assert!(!a.verify(&c));
        assert!(Signature::from_hex(&"ab".repeat(31)).is_none());
        assert!(Signature::from_hex(&"zz".repeat(32)).is_none());
        assert!(Signature::from_hex(&format!("{}é", "a".repeat(62))).is_none());
        assert_eq!(a.to_hex(), "ab".repeat(32));
    }

    #[test]
    fn empty_hash_constant_is_right() {
        assert_eq!(sha256_hex(b""), EMPTY_SHA256_HEX);
    }
}

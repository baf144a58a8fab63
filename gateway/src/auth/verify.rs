//! The steps shared by header and presigned authentication: the credential scope, the rules on
//! which headers must be signed, and the signature check itself.

use http::request::Parts;

use super::amz_date::AmzDate;
use super::canonical::CanonicalParts;
use super::error::AuthError;
use super::signature::{string_to_sign, Signature, SigningKey};
use super::Credentials;
use super::{AuthConfig, SERVICE};

/// `AK/date/region/service/aws4_request`, split. The access key is everything before the last
/// four '/'-separated parts.
pub(crate) struct CredentialScope<'a> {
    pub access_key: &'a str,
    pub date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub terminal: &'a str,
}

impl<'a> CredentialScope<'a> {
    pub(crate) fn parse(text: &'a str) -> Option<CredentialScope<'a>> {
        let mut parts = text.rsplitn(5, '/');
        let terminal = parts.next()?;
        let service = parts.next()?;
        let region = parts.next()?;
        let date = parts.next()?;
        let access_key = parts.next()?;
        if access_key.is_empty() {
            return None;
        }
        Some(CredentialScope { access_key, date, region, service, terminal })
    }

    /// `date/region/service/aws4_request`, as it appears in strings to sign.
    pub(crate) fn scope_string(&self) -> String {
        format!("{}/{}/{}/{}", self.date, self.region, self.service, self.terminal)
    }

    /// Checks region, service and terminal against this server, and the scope date against the
    /// request timestamp. Returns the reason for the first mismatch.
    pub(crate) fn check(&self, cfg: &AuthConfig, timestamp: &AmzDate) -> Result<(), String> {
        if self.date.len() != 8 || !self.date.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("invalid credential date '{}'", self.date));
        }
        if self.region != cfg.region {
            return Err(format!("the region '{}' is wrong; expecting '{}'", self.region, cfg.region));
        }
        if self.service != SERVICE {
            return Err(format!("incorrect service '{}'. This endpoint belongs to 's3'.", self.service));
        }
        if self.terminal != "aws4_request" {
            return Err(format!(
                "incorrect terminal '{}'. This endpoint uses 'aws4_request'.",
                self.terminal
            ));
        }
        if self.date != timestamp.date_part() {
            return Err("Invalid credential date. Date is not the same as X-Amz-Date.".to_owned());
        }
        Ok(())
    }
}

/// `host` must be signed, and so must every `x-amz-*` header the request carries: an unsigned
/// `x-amz-copy-source`, `x-amz-meta-*` or `x-amz-content-sha256` could be changed in flight.
pub(crate) fn check_signed_header_policy(parts: &Parts, signed: &[String]) -> Result<(), AuthError> {
    let not_signed =
        AuthError::AccessDenied("There were headers present in the request which were not signed");
    if !signed.iter().any(|n| n == "host") {
        return Err(not_signed);
    }
    for name in parts.headers.keys() {
        // `HeaderName`s are stored lower-case.
        let name = name.as_str();
        if name.starts_with("x-amz-") && !signed.iter().any(|n| n == name) {
            return Err(not_signed);
        }
    }
    Ok(())
}

/// Looks up the user and verifies `signature` over the canonical request. On success returns
/// the signing key, which signed aws-chunked bodies reuse for every chunk.
pub(crate) fn verify_request_signature(
    creds: &Credentials,
    scope: &CredentialScope<'_>,
    timestamp: &AmzDate,
    canonical: &CanonicalParts<'_>,
    signature: &Signature,
) -> Result<SigningKey, AuthError> {
    let key = creds
        .signing_key(scope.access_key, scope.date, scope.region, scope.service)
        .ok_or(AuthError::InvalidAccessKeyId)?;
    let scope_string = scope.scope_string();
    let mut matched = false;
    for uri in canonical.candidate_uris() {
        let request = canonical.build(&uri)?;
        let computed = key.sign(string_to_sign(&timestamp.text, &scope_string, &request).as_bytes());
        // Not short-circuited on purpose: both candidates cost the same whether or not the
        // first matched, so timing says nothing about which form the client used.
        matched |= computed.verify(signature);
    }
    if matched {
        Ok(key)
    } else {
        Err(AuthError::SignatureDoesNotMatch)
    }
}

/// The one value of a header, if it is present exactly once and is visible ASCII.
pub(crate) fn single_header<'a>(parts: &'a Parts, name: &str) -> Result<Option<&'a str>, ()> {
    let mut values = parts.headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(());
    }
    first.to_str().map(Some).map_err(|_| ())
}

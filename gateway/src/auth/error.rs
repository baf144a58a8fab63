//! Authentication failures, each mapped to the S3 error code and HTTP status AWS answers with.
//!
//! The status follows from the code (see `status`), so the gateway's error layer only needs
//! `code()`, `status()` and `message()`. Messages never contain secrets or computed signatures.

use std::fmt;

/// Why a request (or its aws-chunked body) failed authentication.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// 403: no credentials at all, or a rule of the signing protocol that AWS answers with
    /// `AccessDenied` (unsigned `x-amz-*` headers, missing date).
    AccessDenied(&'static str),
    /// 403: the access key is not one of ours.
    InvalidAccessKeyId,
    /// 403: the signature (seed, chunk or trailer) does not verify.
    SignatureDoesNotMatch,
    /// 403: the request time is more than the allowed skew away from the server clock.
    RequestTimeTooSkewed,
    /// 400: the `Authorization` header cannot be parsed or names the wrong scope.
    AuthorizationHeaderMalformed(String),
    /// 400: a presigned URL's `X-Amz-*` parameters are missing or invalid.
    AuthorizationQueryParametersError(String),
    /// 403 `AccessDenied` "Request has expired": a presigned URL past its `X-Amz-Expires`.
    ExpiredToken,
    /// 403 `AccessDenied` "Request is not valid yet": a presigned URL dated in the future.
    RequestNotYetValid,
    /// 400: the body's SHA-256 differs from the signed `x-amz-content-sha256`.
    XAmzContentSHA256Mismatch,
    /// 400: the body ended before its declared length or before the final aws-chunked chunk.
    IncompleteBody,
    /// 400: a request the protocol forbids (unsupported mechanism, malformed chunk, ...).
    InvalidRequest(&'static str),
    /// 400: a header the signing mode requires is absent.
    MissingSecurityHeader(&'static str),
    /// 400: a parameter or header has an invalid value.
    InvalidArgument(&'static str),
    /// 400: the decoded body is larger than the gateway accepts.
    EntityTooLarge,
}

impl AuthError {
    /// The S3 error code (`<Code>`).
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::AccessDenied(_) | AuthError::ExpiredToken | AuthError::RequestNotYetValid => {
                "AccessDenied"
            }
            AuthError::InvalidAccessKeyId => "InvalidAccessKeyId",
            AuthError::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            AuthError::RequestTimeTooSkewed => "RequestTimeTooSkewed",
            AuthError::AuthorizationHeaderMalformed(_) => "AuthorizationHeaderMalformed",
            AuthError::AuthorizationQueryParametersError(_) => "AuthorizationQueryParametersError",
            AuthError::XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
            AuthError::IncompleteBody => "IncompleteBody",
            AuthError::InvalidRequest(_) => "InvalidRequest",
            AuthError::MissingSecurityHeader(_) => "MissingSecurityHeader",
            AuthError::InvalidArgument(_) => "InvalidArgument",
            AuthError::EntityTooLarge => "EntityTooLarge",
        }
    }

    /// The HTTP status AWS sends with `code()`.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::AccessDenied(_)
            | AuthError::ExpiredToken
            | AuthError::RequestNotYetValid
            | AuthError::InvalidAccessKeyId
            | AuthError::SignatureDoesNotMatch
            | AuthError::RequestTimeTooSkewed => 403,
            AuthError::AuthorizationHeaderMalformed(_)
            | AuthError::AuthorizationQueryParametersError(_)
            | AuthError::XAmzContentSHA256Mismatch
            | AuthError::IncompleteBody
            | AuthError::InvalidRequest(_)
            | AuthError::MissingSecurityHeader(_)
            | AuthError::InvalidArgument(_)
            | AuthError::EntityTooLarge => 400,
        }
    }

    /// The human-readable `<Message>`.
    pub fn message(&self) -> String {
        match self {
            AuthError::AccessDenied(why) => (*why).to_owned(),
            AuthError::InvalidAccessKeyId => {
                "The AWS Access Key Id you provided does not exist in our records.".to_owned()
            }
            AuthError::SignatureDoesNotMatch => "The request signature we calculated does not match the \
                signature you provided. Check your key and signing method."
                .to_owned(),
            AuthError::RequestTimeTooSkewed => {
                "The difference between the request time and the server's time is too large.".to_owned()
            }
            AuthError::AuthorizationHeaderMalformed(why) => {
                format!("The authorization header is malformed; {why}")
            }
            AuthError::AuthorizationQueryParametersError(why) => why.clone(),
            AuthError::ExpiredToken => "Request has expired".to_owned(),
            AuthError::RequestNotYetValid => "Request is not valid yet".to_owned(),
            AuthError::XAmzContentSHA256Mismatch => {
                "The provided 'x-amz-content-sha256' header does not match what was computed.".to_owned()
            }
            AuthError::IncompleteBody => {
                "You did not provide the number of bytes specified by the Content-Length HTTP header."
                    .to_owned()
            }
            AuthError::InvalidRequest(why) | AuthError::InvalidArgument(why) => (*why).to_owned(),
            AuthError::MissingSecurityHeader(header) => {
                format!("Your request was missing a required header: {header}")
            }
            AuthError::EntityTooLarge => "Your proposed upload exceeds the maximum allowed size".to_owned(),
        }
    }
}

impl fmt::Debug for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code(), self.status(), self.message())
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for AuthError {}

/// Shorthand for the malformed-header variant with a fixed explanation.
pub(crate) fn malformed(why: impl Into<String>) -> AuthError {
    AuthError::AuthorizationHeaderMalformed(why.into())
}

/// Shorthand for the presigned-parameter variant with a fixed explanation.
pub(crate) fn query_error(why: impl Into<String>) -> AuthError {
    AuthError::AuthorizationQueryParametersError(why.into())
}

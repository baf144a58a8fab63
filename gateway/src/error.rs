//! `S3Error`: the one error type handlers return. Its HTTP status follows from its code, and its
//! `IntoResponse` writes the S3 `<Error>` document. `holt_core::Error` is mapped to S3 codes
//! here and nowhere else; internal failures reach the client as `InternalError` and are logged
//! in full.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};

use crate::xml::XmlWriter;

/// The S3 error codes this gateway answers with (AWS spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3ErrorCode {
    /// 403: the caller may not do this (no credentials, somebody else's bucket, an expired
    /// or not yet valid presigned URL, an unsigned `x-amz-*` header).
    AccessDenied,
    /// 403: a CORS preflight no rule of the bucket allows (or the bucket has no CORS rules).
    AccessForbidden,
    /// 404: GetBucketCors of a bucket without CORS rules.
    NoSuchCORSConfiguration,
    /// 404: GetBucketPolicy of a bucket without a policy.
    NoSuchBucketPolicy,
    /// 400: a bucket policy that is not valid JSON or names what cannot be (another bucket,
    /// an action that is not S3's).
    MalformedPolicy,
    /// 400: the body does not match its `Content-MD5` or `x-amz-checksum-*` value.
    BadDigest,
    /// 409: CreateBucket of a name another user owns.
    BucketAlreadyExists,
    /// 409: CreateBucket of a name the caller owns already.
    BucketAlreadyOwnedByYou,
    /// 409: DeleteBucket of a bucket holding objects or uploads in progress.
    BucketNotEmpty,
    /// 400: a body, a copied part range or a request document over its size limit.
    EntityTooLarge,
    /// 400: CompleteMultipartUpload with a part other than the last under 5 MiB.
    EntityTooSmall,
    /// 400: CreateBucket naming a region other than the configured one.
    IllegalLocationConstraintException,
    /// 400: the body ended before its declared length (or its final aws-chunked chunk).
    IncompleteBody,
    /// 400: the body stalled or arrived below the minimum rate (see `Settings`).
    RequestTimeout,
    /// 500: a bug or an unexpected engine or I/O failure; the details go to the log only.
    InternalError,
    /// 403: the access key is not configured.
    InvalidAccessKeyId,
    /// 400: a query parameter or header has a value out of range or malformed.
    InvalidArgument,
    /// 400: a name that breaks the S3 bucket naming rules.
    InvalidBucketName,
    /// 400: a `Content-MD5` or checksum header that is not base64 of the right length.
    InvalidDigest,
    /// 400: CompleteMultipartUpload names a part that was not uploaded or whose ETag differs.
    InvalidPart,
    /// 416: GetObject/HeadObject `partNumber` past the object's parts.
    InvalidPartNumber,
    /// 400: CompleteMultipartUpload parts not in ascending order.
    InvalidPartOrder,
    /// 416: a `Range` (or copy source range) the object's size cannot satisfy.
    InvalidRange,
    /// 400: a request the protocol or this gateway does not accept (bad combination of
    /// headers, unsupported signing mechanism, ...).
    InvalidRequest,
    /// 400: an `x-amz-storage-class` S3 does not define.
    InvalidStorageClass,
    /// 400: an object key longer than 1024 bytes (also used for an empty key).
    KeyTooLongError,
    /// 400: a request document that does not parse or misses required elements.
    MalformedXML,
    /// 400: a tag with an empty or too long key or value, or a key given twice.
    InvalidTag,
    /// 400: a request S3 refuses without a more specific code (more than 10 tags).
    BadRequest,
    /// 400: an ACL document that does not parse or grants nothing.
    MalformedACLError,
    /// 400: a request body where the request takes none (an ACL document sent with a canned
    /// ACL header).
    UnexpectedContent,
    /// 400: user metadata (`x-amz-meta-*`) over 2 KiB.
    MetadataTooLarge,
    /// 405: an HTTP method the addressed resource does not support.
    MethodNotAllowed,
    /// 411: an upload with neither `Content-Length` nor `Transfer-Encoding: chunked`.
    MissingContentLength,
    /// 400: a header the signing mode requires is absent.
    MissingSecurityHeader,
    /// 404: the bucket does not exist.
    NoSuchBucket,
    /// 404: the object does not exist.
    NoSuchKey,
    /// 404: the multipart upload does not exist (never created, completed or aborted).
    NoSuchUpload,
    /// 404: a `versionId` other than `null` (objects are unversioned).
    NoSuchVersion,
    /// 501: a known S3 feature this gateway does not offer.
    NotImplemented,
    /// 304: `If-None-Match` or `If-Modified-Since` says the client's copy is current.
    NotModified,
    /// 412: an `If-Match`/`If-Unmodified-Since` condition, or a conditional write, failed.
    PreconditionFailed,
    /// 400: the request headers exceed 8 KiB (`HEADER_BYTES_MAX`).
    RequestHeaderSectionTooLarge,
    /// 403: the signed request time is too far from the server clock.
    RequestTimeTooSkewed,
    /// 403: the signature (of the request, a chunk or a trailer) does not verify.
    SignatureDoesNotMatch,
    /// 503: the in-flight limit (global or per user) or a per-key write queue is full.
    SlowDown,
    /// 400: the body's SHA-256 differs from the signed `x-amz-content-sha256`.
    XAmzContentSHA256Mismatch,
    /// 403: a session token has expired. Never produced: no session tokens are issued,
    /// and an expired presigned URL is `AccessDenied`, as in AWS.
    ExpiredToken,
    /// 400: the `Authorization` header cannot be parsed or names the wrong scope.
    AuthorizationHeaderMalformed,
    /// 400: a presigned URL's `X-Amz-*` parameters are missing or invalid.
    AuthorizationQueryParametersError,
    /// 503: the server cannot serve now (disk full, shutting down, engine poisoned).
    ServiceUnavailable,
}

impl S3ErrorCode {
    /// The code as S3 spells it in `<Code>`.
    pub fn as_str(self) -> &'static str {
        use S3ErrorCode::*;
        match self {
            AccessDenied => "AccessDenied",
            AccessForbidden => "AccessForbidden",
            NoSuchCORSConfiguration => "NoSuchCORSConfiguration",
            NoSuchBucketPolicy => "NoSuchBucketPolicy",
            MalformedPolicy => "MalformedPolicy",
            BadDigest => "BadDigest",
            BucketAlreadyExists => "BucketAlreadyExists",
            BucketAlreadyOwnedByYou => "BucketAlreadyOwnedByYou",
            BucketNotEmpty => "BucketNotEmpty",
            EntityTooLarge => "EntityTooLarge",
            EntityTooSmall => "EntityTooSmall",
            IllegalLocationConstraintException => "IllegalLocationConstraintException",
            IncompleteBody => "IncompleteBody",
            RequestTimeout => "RequestTimeout",
            InternalError => "InternalError",
            InvalidAccessKeyId => "InvalidAccessKeyId",
            InvalidArgument => "InvalidArgument",
            InvalidBucketName => "InvalidBucketName",
            InvalidDigest => "InvalidDigest",
            InvalidPart => "InvalidPart",
            InvalidPartNumber => "InvalidPartNumber",
            InvalidPartOrder => "InvalidPartOrder",
            InvalidRange => "InvalidRange",
            InvalidRequest => "InvalidRequest",
            InvalidStorageClass => "InvalidStorageClass",
            KeyTooLongError => "KeyTooLongError",
            MalformedXML => "MalformedXML",
            InvalidTag => "InvalidTag",
            BadRequest => "BadRequest",
            MalformedACLError => "MalformedACLError",
            UnexpectedContent => "UnexpectedContent",
            MetadataTooLarge => "MetadataTooLarge",
            MethodNotAllowed => "MethodNotAllowed",
            MissingContentLength => "MissingContentLength",
            MissingSecurityHeader => "MissingSecurityHeader",
            NoSuchBucket => "NoSuchBucket",
            NoSuchKey => "NoSuchKey",
            NoSuchUpload => "NoSuchUpload",
            NoSuchVersion => "NoSuchVersion",
            NotImplemented => "NotImplemented",
            NotModified => "NotModified",
            PreconditionFailed => "PreconditionFailed",
            RequestHeaderSectionTooLarge => "RequestHeaderSectionTooLarge",
            RequestTimeTooSkewed => "RequestTimeTooSkewed",
            SignatureDoesNotMatch => "SignatureDoesNotMatch",
            SlowDown => "SlowDown",
            XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
            ExpiredToken => "ExpiredToken",
            AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            AuthorizationQueryParametersError => "AuthorizationQueryParametersError",
            ServiceUnavailable => "ServiceUnavailable",
        }
    }

    /// The HTTP status AWS answers this code with.
    pub fn status(self) -> StatusCode {
        use S3ErrorCode::*;
        match self {
            NotModified => StatusCode::NOT_MODIFIED,
            AccessDenied
            | AccessForbidden
            | InvalidAccessKeyId
            | RequestTimeTooSkewed
            | SignatureDoesNotMatch
            | ExpiredToken => StatusCode::FORBIDDEN,
            NoSuchBucket
            | NoSuchKey
            | NoSuchUpload
            | NoSuchVersion
            | NoSuchCORSConfiguration
            | NoSuchBucketPolicy => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            BucketAlreadyExists | BucketAlreadyOwnedByYou | BucketNotEmpty => StatusCode::CONFLICT,
            MissingContentLength => StatusCode::LENGTH_REQUIRED,
            PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            InvalidRange | InvalidPartNumber => StatusCode::RANGE_NOT_SATISFIABLE,
            InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            NotImplemented => StatusCode::NOT_IMPLEMENTED,
            SlowDown | ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            BadDigest
            | EntityTooLarge
            | EntityTooSmall
            | IllegalLocationConstraintException
            | IncompleteBody
            | RequestTimeout
            | InvalidArgument
            | InvalidBucketName
            | InvalidDigest
            | InvalidPart
            | InvalidPartOrder
            | InvalidRequest
            | InvalidStorageClass
            | KeyTooLongError
            | MalformedXML
            | InvalidTag
            | BadRequest
            | MalformedACLError
            | UnexpectedContent
            | MalformedPolicy
            | MetadataTooLarge
            | MissingSecurityHeader
            | RequestHeaderSectionTooLarge
            | XAmzContentSHA256Mismatch
            | AuthorizationHeaderMalformed
            | AuthorizationQueryParametersError => StatusCode::BAD_REQUEST,
        }
    }

    fn default_message(self) -> &'static str {
        use S3ErrorCode::*;
        match self {
            AccessDenied => "Access Denied",
            AccessForbidden => "CORSResponse: This CORS request is not allowed.",
            NoSuchCORSConfiguration => "The CORS configuration does not exist",
            NoSuchBucketPolicy => "The bucket policy does not exist",
            MalformedPolicy => "Policies must be valid JSON and the first byte must be '{'",
            BadDigest => "The Content-MD5 or checksum you specified did not match what we received.",
            BucketAlreadyExists => "The requested bucket name is not available.",
            BucketAlreadyOwnedByYou => {
                "Your previous request to create the named bucket succeeded and you already own it."
            }
            BucketNotEmpty => "The bucket you tried to delete is not empty",
            EntityTooLarge => "Your proposed upload exceeds the maximum allowed object size.",
            EntityTooSmall => "Your proposed upload is smaller than the minimum allowed object size.",
            IllegalLocationConstraintException => {
                "The unspecified location constraint is incompatible for the region specific endpoint this request \
                 was sent to."
            }
            IncompleteBody => {
                "You did not provide the number of bytes specified by the Content-Length HTTP header."
            }
            InternalError => "We encountered an internal error. Please try again.",
            RequestTimeout => {
                "Your socket connection to the server was not read from or written to within the timeout period."
            }
            InvalidAccessKeyId => "The AWS Access Key Id you provided does not exist in our records.",
            InvalidArgument => "Invalid Argument",
            InvalidBucketName => "The specified bucket is not valid.",
            InvalidDigest => "The Content-MD5 or checksum you specified is not valid.",
            InvalidPart => "One or more of the specified parts could not be found.",
            InvalidPartNumber => "The requested partnumber is not satisfiable",
            InvalidPartOrder => "The list of parts was not in ascending order.",
            InvalidRange => "The requested range is not satisfiable",
            InvalidRequest => "Invalid Request",
            InvalidStorageClass => "The storage class you specified is not valid",
            KeyTooLongError => "Your key is too long",
            MalformedXML => {
                "The XML you provided was not well-formed or did not validate against our published schema"
            }
            InvalidTag => "The tag you have provided is invalid.",
            BadRequest => "Bad Request",
            MalformedACLError => {
                "The XML you provided was not well-formed or did not validate against our published schema."
            }
            UnexpectedContent => "This request does not support content",
            MetadataTooLarge => "Your metadata headers exceed the maximum allowed metadata size",
            MethodNotAllowed => "The specified method is not allowed against this resource.",
            MissingContentLength => "You must provide the Content-Length HTTP header.",
            MissingSecurityHeader => "Your request is missing a required header.",
            NoSuchBucket => "The specified bucket does not exist",
            NoSuchKey => "The specified key does not exist.",
            NoSuchUpload => "The specified upload does not exist.",
            NoSuchVersion => "The specified version does not exist.",
            NotImplemented => "A header or query you provided implies functionality that is not implemented.",
            NotModified => "Not Modified",
            PreconditionFailed => "At least one of the pre-conditions you specified did not hold",
            RequestHeaderSectionTooLarge => "Your request header section exceeds the maximum allowed size.",
            RequestTimeTooSkewed => {
                "The difference between the request time and the server's time is too large."
            }
            SignatureDoesNotMatch => {
                "The request signature we calculated does not match the signature you provided."
            }
            SlowDown => "Please reduce your request rate.",
            XAmzContentSHA256Mismatch => {
                "The provided 'x-amz-content-sha256' header does not match what was computed."
            }
            ExpiredToken => "The provided token has expired.",
            AuthorizationHeaderMalformed => "The authorization header is malformed.",
            AuthorizationQueryParametersError => "The authorization query parameters are malformed.",
            ServiceUnavailable => "Service is unable to handle request.",
        }
    }
}

/// An S3 error response. `request_id` is filled in by the request pipeline.
#[derive(Debug, Clone)]
pub struct S3Error {
    /// Decides the HTTP status and the `<Code>`.
    pub code: S3ErrorCode,
    /// The `<Message>`: the code's default text unless a handler gave a more specific one;
    /// never internal details.
    pub message: String,
    /// The `<Resource>`: the bucket or object path, empty when not set.
    pub resource: String,
    /// The `<RequestId>`, the same as the `x-amz-request-id` header.
    pub request_id: String,
    /// Set when this is a failed engine write that may still be applied (see
    /// `may_have_applied`); never shown to the client.
    write_may_have_applied: bool,
    /// For a 416: the object's size, sent as `Content-Range: bytes */SIZE` (RFC 9110 15.5.17).
    unsatisfied_range_of: Option<u64>,
}

/// What handlers and the storage layer return.
pub type S3Result<T> = Result<T, S3Error>;

impl S3Error {
    /// An error with the code's default message and no resource.
    pub fn new(code: S3ErrorCode) -> Self {
        S3Error {
            code,
            message: code.default_message().to_owned(),
            resource: String::new(),
            request_id: String::new(),
            write_may_have_applied: false,
            unsatisfied_range_of: None,
        }
    }

    /// A 416 for a range of an object of `size` bytes: the response names the size.
    pub fn range_not_satisfiable(size: u64) -> Self {
        S3Error {
            unsatisfied_range_of: Some(size),
            ..S3Error::with_message(
                S3ErrorCode::InvalidRange,
                format!("The requested range is not satisfiable (size {size})"),
            )
        }
    }

    /// Whether this error is a failed engine write that may still be applied: a restart can
    /// replay it, so whatever it names (a new body) must be kept, not unlinked.
    pub fn write_may_have_applied(&self) -> bool {
        self.write_may_have_applied
    }

    /// An error with a specific message (shown to the client: keep internals out).
    pub fn with_message(code: S3ErrorCode, message: impl Into<String>) -> Self {
        S3Error { message: message.into(), ..S3Error::new(code) }
    }

    /// An internal failure: the details go to the log, the client gets a generic InternalError.
    pub fn internal(context: &str, detail: impl std::fmt::Display) -> Self {
        tracing::error!(context, %detail, "internal error");
        S3Error::new(S3ErrorCode::InternalError)
    }

    /// Sets the `<Resource>` (for example `/bucket/key`).
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = resource.into();
        self
    }

    /// The HTTP status, derived from the code.
    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// The `<Error>` document.
    pub fn to_xml(&self) -> Vec<u8> {
        let mut w = XmlWriter::new();
        w.open("Error");
        w.elem("Code", self.code.as_str());
        w.elem("Message", &self.message);
        w.elem("Resource", &self.resource);
        w.elem("RequestId", &self.request_id);
        w.close("Error");
        w.finish()
    }
}

impl std::fmt::Display for S3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl From<S3ErrorCode> for S3Error {
    fn from(code: S3ErrorCode) -> Self {
        S3Error::new(code)
    }
}

/// Whether a failed engine write may still be applied: it reached the log before failing (a
/// failed fdatasync under `Sync`, a failure applying a logged batch), so replay after a
/// restart can bring it back. Every other error refused the write before it was logged.
pub fn may_have_applied(err: &holt_core::Error) -> bool {
    use holt_core::Error as E;
    match err {
        E::Io { may_have_applied, .. } => *may_have_applied,
        E::KeyLength { .. }
        | E::ValueTooLarge { .. }
        | E::BatchTooLarge { .. }
        | E::ConditionFailed
        | E::Corruption { .. }
        | E::DiskFull
        | E::Poisoned
        | E::Locked { .. }
        | E::Closed
        | E::InvalidArgument(_) => false,
        // A kind this gateway does not know: keeping a body costs disk space until the next
        // start-up sweep, unlinking one a record names loses the object.
        _ => true,
    }
}

/// The one mapping from engine errors to S3 errors.
impl From<holt_core::Error> for S3Error {
    fn from(err: holt_core::Error) -> Self {
        let write_may_have_applied = may_have_applied(&err);
        S3Error { write_may_have_applied, ..Self::from_engine(err) }
    }
}

impl S3Error {
    fn from_engine(err: holt_core::Error) -> Self {
        use holt_core::Error as E;
        match err {
            // Keys are validated against the S3 limits before they reach the engine, so an
            // engine-side key-length error means a schema bug; still, it is the client's key.
            E::KeyLength { .. } => S3Error::new(S3ErrorCode::KeyTooLongError),
            E::ConditionFailed => S3Error::new(S3ErrorCode::PreconditionFailed),
            E::DiskFull => {
                tracing::error!("engine refused a write: disk full");
                S3Error::with_message(S3ErrorCode::ServiceUnavailable, "The server is out of disk space.")
            }
            E::Closed => {
                S3Error::with_message(S3ErrorCode::ServiceUnavailable, "The server is shutting down.")
            }
            // An fsync failed: the engine may have shown writes its log will not bring back,
            // so it serves nothing until it is reopened.
            E::Poisoned => {
                tracing::error!("engine poisoned by a failed fsync: restart the gateway");
                S3Error::with_message(
                    S3ErrorCode::ServiceUnavailable,
                    "A write could not be made durable; the server refuses requests until it is restarted.",
                )
            }
            other => S3Error::internal("engine", other),
        }
    }
}

impl From<std::io::Error> for S3Error {
    fn from(err: std::io::Error) -> Self {
        // A full disk is the server's condition, not a bug: answer it like the engine's
        // DiskFull, so clients back off and retry.
        if err.kind() == std::io::ErrorKind::StorageFull {
            tracing::error!(error = %err, "body store refused a write: disk full");
            return S3Error::with_message(
                S3ErrorCode::ServiceUnavailable,
                "The server is out of disk space.",
            );
        }
        S3Error::internal("io", err)
    }
}

impl IntoResponse for S3Error {
    fn into_response(self) -> Response {
        let status = self.status();
        // 304 carries no body by definition. GET/HEAD answer it themselves, with the
        // object's validators (`handlers::object`); this is the bare fallback.
        let body = if status == StatusCode::NOT_MODIFIED { Vec::new() } else { self.to_xml() };
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = status;
        if status != StatusCode::NOT_MODIFIED {
            resp.headers_mut()
                .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
        }
        if let Ok(v) = HeaderValue::from_str(&self.request_id) {
            resp.headers_mut().insert("x-amz-request-id", v);
        }
        if let Some(size) = self.unsatisfied_range_of.filter(|_| status == StatusCode::RANGE_NOT_SATISFIABLE)
        {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                resp.headers_mut().insert(http::header::CONTENT_RANGE, v);
            }
        }
        resp
    }
}

/// Authentication failures keep the code the auth module chose; the status follows from it.
impl From<crate::auth::AuthError> for S3Error {
    fn from(err: crate::auth::AuthError) -> Self {
        use S3ErrorCode::*;
        let code = [
            AccessDenied,
            InvalidAccessKeyId,
            SignatureDoesNotMatch,
            RequestTimeTooSkewed,
            AuthorizationHeaderMalformed,
            AuthorizationQueryParametersError,
            XAmzContentSHA256Mismatch,
            IncompleteBody,
            InvalidRequest,
            MissingSecurityHeader,
            InvalidArgument,
            EntityTooLarge,
            ExpiredToken,
            BadDigest,
            InvalidDigest,
        ]
        .into_iter()
        .find(|c| c.as_str() == err.code())
        .unwrap_or(if err.status() == 403 { AccessDenied } else { InvalidRequest });
        S3Error::with_message(code, err.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_code() {
        assert_eq!(S3Error::new(S3ErrorCode::NoSuchKey).status(), StatusCode::NOT_FOUND);
        assert_eq!(S3Error::new(S3ErrorCode::BucketNotEmpty).status(), StatusCode::CONFLICT);
        assert_eq!(S3Error::new(S3ErrorCode::InvalidRange).status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(S3Error::new(S3ErrorCode::SlowDown).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(S3Error::new(S3ErrorCode::AccessDenied).status(), StatusCode::FORBIDDEN);
        assert_eq!(
            S3Error::new(S3ErrorCode::IllegalLocationConstraintException).status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn full_disk_is_service_unavailable() {
        let e: S3Error = std::io::Error::from(std::io::ErrorKind::StorageFull).into();
        assert_eq!(e.code, S3ErrorCode::ServiceUnavailable);
        let e: S3Error = std::io::Error::from(std::io::ErrorKind::PermissionDenied).into();
        assert_eq!(e.code, S3ErrorCode::InternalError);
    }

    #[test]
    fn only_writes_that_reached_the_log_may_have_applied() {
        let io = |applied| holt_core::Error::Io {
            op: "wal fdatasync",
            source: std::io::Error::other("EIO"),
            may_have_applied: applied,
        };
        let e = S3Error::from(io(true));
        assert!(e.write_may_have_applied());
        assert_eq!(e.code, S3ErrorCode::InternalError, "still an internal error to the client");
        assert!(!S3Error::from(io(false)).write_may_have_applied());
        for refused in [
            holt_core::Error::ConditionFailed,
            holt_core::Error::DiskFull,
            holt_core::Error::Poisoned,
            holt_core::Error::Closed,
            holt_core::Error::KeyLength { len: 0 },
        ] {
            assert!(!may_have_applied(&refused), "{refused}");
            assert!(!S3Error::from(refused).write_may_have_applied());
        }
        assert!(!S3Error::new(S3ErrorCode::InternalError).write_may_have_applied());
    }

    #[test]
    fn engine_condition_failure_is_precondition_failed() {
        let e: S3Error = holt_core::Error::ConditionFailed.into();
        assert_eq!(e.code, S3ErrorCode::PreconditionFailed);
        // A poisoned engine (a failed fsync) is the server's condition: 503, with why.
        let e: S3Error = holt_core::Error::Poisoned.into();
        assert_eq!(e.code, S3ErrorCode::ServiceUnavailable);
        assert!(e.message.contains("could not be made durable"), "{}", e.message);
    }

    #[test]
    fn error_document_golden() {
        let mut e = S3Error::new(S3ErrorCode::NoSuchKey).resource("/b/k&1");
        e.request_id = "ABC123".into();
        assert_eq!(
            String::from_utf8(e.to_xml()).unwrap(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
             <Message>The specified key does not exist.</Message><Resource>/b/k&amp;1</Resource>\
             <RequestId>ABC123</RequestId></Error>"
        );
    }
}

//! Request → `Operation`: method, path (path-style always; virtual-hosted when a domain is
//! configured and the Host is `bucket.domain`) and subresource query parameters. Query
//! parameters that are not S3 subresources (`x-id=PutObject`, `metadata=true`, …) are ignored.

use http::{HeaderMap, Method};
use percent_encoding::percent_decode;

use crate::error::{S3Error, S3ErrorCode, S3Result};

/// One variant per S3 operation (AWS names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `GET /`: the caller's buckets.
    ListBuckets,
    /// `PUT /bucket`.
    CreateBucket,
    /// `HEAD /bucket`: whether it exists and the caller owns it.
    HeadBucket,
    /// `DELETE /bucket`; only an empty bucket with no uploads in progress.
    DeleteBucket,
    /// `GET /bucket?location`: always the configured region.
    GetBucketLocation,
    /// `GET /bucket?versioning`: always unversioned.
    GetBucketVersioning,
    /// `GET /bucket`: the V1 listing (marker paging).
    ListObjects,
    /// `GET /bucket?usage`: objects and bytes under a prefix, and per common prefix (an
    /// extension of ours: `handlers::usage`).
    GetBucketUsage,
    /// `GET /bucket?list-type=2`: the V2 listing (continuation tokens).
    ListObjectsV2,
    /// `GET /bucket?versions`: each object's one version, `null`.
    ListObjectVersions,
    /// `POST /bucket?delete`: up to 1000 keys named in an XML body.
    DeleteObjects,
    /// `PUT /bucket/key` without `x-amz-copy-source`.
    PutObject,
    /// `HEAD /bucket/key`: GetObject's headers without the body.
    HeadObject,
    /// `GET /bucket/key`, optionally a `Range` or one `partNumber`.
    GetObject,
    /// `PUT /bucket/key` with `x-amz-copy-source`.
    CopyObject,
    /// `DELETE /bucket/key`; succeeds whether or not the key exists.
    DeleteObject,
    /// `POST /bucket/key?uploads`: starts an upload, returns its id.
    CreateMultipartUpload,
    /// `PUT /bucket/key?partNumber=N&uploadId=ID`.
    UploadPart,
    /// UploadPart with `x-amz-copy-source`: the part's bytes come from an object.
    UploadPartCopy,
    /// `POST /bucket/key?uploadId=ID`: joins the listed parts into the object.
    CompleteMultipartUpload,
    /// `DELETE /bucket/key?uploadId=ID`: drops the upload and its parts.
    AbortMultipartUpload,
    /// `GET /bucket/key?uploadId=ID`.
    ListParts,
    /// `GET /bucket?uploads`: the uploads in progress.
    ListMultipartUploads,
    /// `GET /bucket?acl`: the owner's FULL_CONTROL (`handlers::acl`).
    GetBucketAcl,
    /// `PUT /bucket?acl`: accepted when it keeps the bucket private.
    PutBucketAcl,
    /// `GET /bucket/key?acl`.
    GetObjectAcl,
    /// `PUT /bucket/key?acl`.
    PutObjectAcl,
    /// `GET /bucket/key?tagging` (`handlers::tagging`).
    GetObjectTagging,
    /// `PUT /bucket/key?tagging`: replaces the object's tags.
    PutObjectTagging,
    /// `DELETE /bucket/key?tagging`.
    DeleteObjectTagging,
    /// `GET /bucket?cors` (`handlers::cors`).
    GetBucketCors,
    /// `PUT /bucket?cors`: replaces the bucket's CORS rules.
    PutBucketCors,
    /// `DELETE /bucket?cors`.
    DeleteBucketCors,
    /// `GET /bucket?policy` (`handlers::policy`).
    GetBucketPolicy,
    /// `PUT /bucket?policy`: replaces the bucket's policy.
    PutBucketPolicy,
    /// `DELETE /bucket?policy`.
    DeleteBucketPolicy,
    /// A known S3 subresource or form this gateway does not implement (501).
    NotImplemented,
}

impl Operation {
    /// The AWS operation name, as logs and metrics label requests.
    pub fn name(self) -> &'static str {
        use Operation::*;
        match self {
            ListBuckets => "ListBuckets",
            CreateBucket => "CreateBucket",
            HeadBucket => "HeadBucket",
            DeleteBucket => "DeleteBucket",
            GetBucketLocation => "GetBucketLocation",
            GetBucketVersioning => "GetBucketVersioning",
            ListObjects => "ListObjects",
            GetBucketUsage => "GetBucketUsage",
            ListObjectsV2 => "ListObjectsV2",
            ListObjectVersions => "ListObjectVersions",
            DeleteObjects => "DeleteObjects",
            PutObject => "PutObject",
            HeadObject => "HeadObject",
            GetObject => "GetObject",
            CopyObject => "CopyObject",
            DeleteObject => "DeleteObject",
            CreateMultipartUpload => "CreateMultipartUpload",
            UploadPart => "UploadPart",
            UploadPartCopy => "UploadPartCopy",
            CompleteMultipartUpload => "CompleteMultipartUpload",
            AbortMultipartUpload => "AbortMultipartUpload",
            ListParts => "ListParts",
            ListMultipartUploads => "ListMultipartUploads",
            GetBucketAcl => "GetBucketAcl",
            PutBucketAcl => "PutBucketAcl",
            GetObjectAcl => "GetObjectAcl",
            PutObjectAcl => "PutObjectAcl",
            GetObjectTagging => "GetObjectTagging",
            PutObjectTagging => "PutObjectTagging",
            DeleteObjectTagging => "DeleteObjectTagging",
            GetBucketCors => "GetBucketCors",
            PutBucketCors => "PutBucketCors",
            DeleteBucketCors => "DeleteBucketCors",
            GetBucketPolicy => "GetBucketPolicy",
            PutBucketPolicy => "PutBucketPolicy",
            DeleteBucketPolicy => "DeleteBucketPolicy",
            NotImplemented => "NotImplemented",
        }
    }
}

/// Decoded query parameters, in order. Values are percent-decoded (`+` is a space, as S3
/// decodes query strings).
#[derive(Debug, Clone, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parses a raw query string (`None`: no query). A parameter given twice, or one that
    /// is not UTF-8 once decoded, is `InvalidArgument`.
    pub fn parse(raw: Option<&str>) -> S3Result<Query> {
        let mut out = Vec::new();
        let Some(raw) = raw else { return Ok(Query(out)) };
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode_query_component(k)?;
            // The signature sorts repeated parameters and `get` reads the first: one
            // signature over `prefix=a&prefix=b` would stand for two different listings.
            if out.iter().any(|(seen, _)| *seen == name) {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    format!("query parameter {name:?} is given more than once"),
                ));
            }
            out.push((name, decode_query_component(v)?));
        }
        Ok(Query(out))
    }

    /// Every parameter, decoded, in request order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The decoded value of parameter `name` (`Some("")` for a bare `?name`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Whether parameter `name` is present, with or without a value.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }

    /// Whether any parameter's name starts with `prefix`.
    pub fn has_prefixed(&self, prefix: &str) -> bool {
        self.0.iter().any(|(k, _)| k.starts_with(prefix))
    }
}

fn decode_query_component(s: &str) -> S3Result<String> {
    let plus_as_space = s.replace('+', " ");
    percent_decode(plus_as_space.as_bytes()).decode_utf8().map(|c| c.into_owned()).map_err(|_| {
        S3Error::with_message(S3ErrorCode::InvalidArgument, "query parameter is not valid UTF-8")
    })
}

/// Subresources we recognise but do not implement: answered with 501 rather than being
/// mistaken for the plain object or bucket operation.
const UNIMPLEMENTED_SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "attributes",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "tagging",
    "torrent",
    "website",
];

/// The target of a request.
#[derive(Debug, Clone)]
pub struct Route {
    /// What the request asks for.
    pub op: Operation,
    /// The bucket, percent-decoded; `None` only for ListBuckets.
    pub bucket: Option<String>,
    /// The object key, percent-decoded; `None` for service and bucket operations.
    pub key: Option<String>,
}

fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // IPv6 literal: never a bucket host.
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// The bucket named by the Host header of a virtual-hosted-style request (`bucket.<domain>`),
/// if `domain` is configured and the request is one.
pub fn virtual_host_bucket(headers: &HeaderMap, domain: Option<&str>) -> Option<String> {
    let domain = domain?;
    let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok())?;
    let host = host_without_port(host).to_ascii_lowercase();
    let bucket = host.strip_suffix(domain)?.strip_suffix('.')?;
    (!bucket.is_empty()).then(|| bucket.to_owned())
}

/// Splits the request target into bucket and key.
pub fn bucket_and_key(
    path: &str,
    headers: &HeaderMap,
    domain: Option<&str>,
) -> S3Result<(Option<String>, Option<String>)> {
    let decode = |s: &str| -> S3Result<String> {
        percent_decode(s.as_bytes())
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| S3Error::with_message(S3ErrorCode::InvalidArgument, "object key is not valid UTF-8"))
    };
    let path = path.strip_prefix('/').unwrap_or(path);
    if let Some(bucket) = virtual_host_bucket(headers, domain) {
        let key = if path.is_empty() { None } else { Some(decode(path)?) };
        return Ok((Some(bucket), key));
    }
    if path.is_empty() {
        return Ok((None, None));
    }
    let (bucket, key) = match path.split_once('/') {
        None => (path, None),
        Some((bucket, "")) => (bucket, None),
        Some((bucket, key)) => (bucket, Some(decode(key)?)),
    };
    let bucket = decode(bucket)?;
    // An encoded '/' in the bucket segment: the signature reads the path decoded, routing
    // splits it before decoding, so the two would disagree on where the bucket ends.
    if bucket.contains('/') {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidBucketName,
            "the bucket name holds an encoded '/'",
        ));
    }
    Ok((Some(bucket), key))
}

/// Chooses the operation for a request whose bucket and key are already known.
pub fn operation(
    method: &Method,
    has_bucket: bool,
    has_key: bool,
    q: &Query,
    headers: &HeaderMap,
) -> S3Result<Operation> {
    use Operation::*;
    let not_allowed = || Err(S3Error::new(S3ErrorCode::MethodNotAllowed));
    let unimplemented_sub = UNIMPLEMENTED_SUBRESOURCES.iter().any(|s| q.has(s));
    let op = match (has_bucket, has_key) {
        (false, _) => match *method {
            Method::GET => ListBuckets,
            _ => return not_allowed(),
        },
        (true, false) => match *method {
            Method::GET if q.has("location") => GetBucketLocation,
            Method::GET if q.has("versioning") => GetBucketVersioning,
            Method::GET if q.has("versions") => ListObjectVersions,
            Method::GET if q.has("uploads") => ListMultipartUploads,
            Method::GET if q.has("acl") => GetBucketAcl,
            Method::GET if q.has("cors") => GetBucketCors,
            Method::GET if q.has("policy") => GetBucketPolicy,
            Method::GET if q.has("usage") => GetBucketUsage,
            Method::GET if unimplemented_sub => NotImplemented,
            Method::GET if q.get("list-type") == Some("2") => ListObjectsV2,
            Method::GET => ListObjects,
            Method::HEAD => HeadBucket,
            Method::PUT if q.has("acl") => PutBucketAcl,
            Method::PUT if q.has("cors") => PutBucketCors,
            Method::PUT if q.has("policy") => PutBucketPolicy,
            Method::PUT if unimplemented_sub || q.has("versioning") => NotImplemented,
            Method::PUT => CreateBucket,
            Method::DELETE if q.has("cors") => DeleteBucketCors,
            Method::DELETE if q.has("policy") => DeleteBucketPolicy,
            Method::DELETE if unimplemented_sub => NotImplemented,
            Method::DELETE => DeleteBucket,
            Method::POST if q.has("delete") => DeleteObjects,
            Method::POST => NotImplemented,
            _ => return not_allowed(),
        },
        (true, true) => match *method {
            Method::GET if q.has("uploadId") => ListParts,
            Method::GET if q.has("acl") => GetObjectAcl,
            Method::GET if q.has("tagging") => GetObjectTagging,
            Method::GET if unimplemented_sub => NotImplemented,
            Method::GET => GetObject,
            Method::HEAD => HeadObject,
            Method::PUT if q.has("uploadId") || q.has("partNumber") => {
                if headers.contains_key("x-amz-copy-source") {
                    UploadPartCopy
                } else {
                    UploadPart
                }
            }
            Method::PUT if q.has("acl") => PutObjectAcl,
            Method::PUT if q.has("tagging") => PutObjectTagging,
            Method::PUT if unimplemented_sub => NotImplemented,
            Method::PUT if headers.contains_key("x-amz-copy-source") => CopyObject,
            Method::PUT => PutObject,
            Method::POST if q.has("uploads") => CreateMultipartUpload,
            Method::POST if q.has("uploadId") => CompleteMultipartUpload,
            Method::POST => NotImplemented,
            Method::DELETE if q.has("uploadId") => AbortMultipartUpload,
            Method::DELETE if q.has("tagging") => DeleteObjectTagging,
            Method::DELETE if unimplemented_sub => NotImplemented,
            Method::DELETE => DeleteObject,
            _ => return not_allowed(),
        },
    };
    Ok(op)
}

/// Routes a request.
pub fn route(
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    domain: Option<&str>,
) -> S3Result<(Route, Query)> {
    let query = Query::parse(uri.query())?;
    let (bucket, key) = bucket_and_key(uri.path(), headers, domain)?;
    let op = operation(method, bucket.is_some(), key.is_some(), &query, headers)?;
    Ok((Route { op, bucket, key }, query))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn r(method: Method, target: &str) -> Route {
        r_with(method, target, HeaderMap::new(), None)
    }

    fn r_with(method: Method, target: &str, headers: HeaderMap, domain: Option<&str>) -> Route {
        let uri: http::Uri = target.parse().unwrap();
        route(&method, &uri, &headers, domain).unwrap().0
    }

    #[test]
    fn path_style() {
        assert_eq!(r(Method::GET, "/").op, Operation::ListBuckets);
        assert_eq!(r(Method::PUT, "/b").op, Operation::CreateBucket);
        assert_eq!(r(Method::PUT, "/b/").op, Operation::CreateBucket);
        assert_eq!(r(Method::GET, "/b?list-type=2&prefix=a").op, Operation::ListObjectsV2);
        assert_eq!(r(Method::GET, "/b?prefix=a").op, Operation::ListObjects);
        assert_eq!(r(Method::GET, "/b?location=").op, Operation::GetBucketLocation);
        assert_eq!(r(Method::GET, "/b?versions").op, Operation::ListObjectVersions);
        assert_eq!(r(Method::GET, "/b?acl").op, Operation::GetBucketAcl);
        assert_eq!(r(Method::PUT, "/b/k?acl").op, Operation::PutObjectAcl);
        assert_eq!(r(Method::DELETE, "/b?acl").op, Operation::NotImplemented);
        assert_eq!(r(Method::GET, "/b?cors").op, Operation::GetBucketCors);
        assert_eq!(r(Method::PUT, "/b?cors").op, Operation::PutBucketCors);
        assert_eq!(r(Method::DELETE, "/b?cors").op, Operation::DeleteBucketCors);
        assert_eq!(r(Method::GET, "/b/k?cors").op, Operation::NotImplemented);
        assert_eq!(r(Method::POST, "/b?delete").op, Operation::DeleteObjects);
        let put = r(Method::PUT, "/b/dir/a%20b+c?x-id=PutObject");
        assert_eq!(put.op, Operation::PutObject);
        assert_eq!(put.bucket.as_deref(), Some("b"));
        assert_eq!(put.key.as_deref(), Some("dir/a b+c"));
        assert_eq!(r(Method::GET, "/b/..%2F..%2Fetc%2Fpasswd").key.as_deref(), Some("../../etc/passwd"));
        assert_eq!(r(Method::GET, "/b//x").key.as_deref(), Some("/x"));
    }

    #[test]
    fn multipart_and_copy() {
        assert_eq!(r(Method::POST, "/b/k?uploads").op, Operation::CreateMultipartUpload);
        assert_eq!(r(Method::PUT, "/b/k?partNumber=1&uploadId=x").op, Operation::UploadPart);
        assert_eq!(r(Method::POST, "/b/k?uploadId=x").op, Operation::CompleteMultipartUpload);
        assert_eq!(r(Method::DELETE, "/b/k?uploadId=x").op, Operation::AbortMultipartUpload);
        assert_eq!(r(Method::GET, "/b/k?uploadId=x").op, Operation::ListParts);
        assert_eq!(r(Method::GET, "/b?uploads").op, Operation::ListMultipartUploads);
        let mut h = HeaderMap::new();
        h.insert("x-amz-copy-source", HeaderValue::from_static("/a/b"));
        assert_eq!(r_with(Method::PUT, "/b/k", h.clone(), None).op, Operation::CopyObject);
        assert_eq!(
            r_with(Method::PUT, "/b/k?partNumber=2&uploadId=x", h, None).op,
            Operation::UploadPartCopy
        );
    }

    #[test]
    fn virtual_hosted() {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, HeaderValue::from_static("photos.s3.example.com:9000"));
        let rt = r_with(Method::GET, "/a/b.jpg", h.clone(), Some("s3.example.com"));
        assert_eq!((rt.bucket.as_deref(), rt.key.as_deref()), (Some("photos"), Some("a/b.jpg")));
        let rt = r_with(Method::GET, "/?list-type=2", h.clone(), Some("s3.example.com"));
        assert_eq!((rt.op, rt.bucket.as_deref()), (Operation::ListObjectsV2, Some("photos")));
        // The bare domain is path-style.
        h.insert(http::header::HOST, HeaderValue::from_static("s3.example.com"));
        let rt = r_with(Method::GET, "/photos/x", h, Some("s3.example.com"));
        assert_eq!((rt.bucket.as_deref(), rt.key.as_deref()), (Some("photos"), Some("x")));
    }

    #[test]
    fn bad_method_and_bad_utf8() {
        let uri: http::Uri = "/".parse().unwrap();
        assert_eq!(
            route(&Method::DELETE, &uri, &HeaderMap::new(), None).unwrap_err().code,
            S3ErrorCode::MethodNotAllowed
        );
        let uri: http::Uri = "/b/%FF".parse().unwrap();
        assert_eq!(
            route(&Method::GET, &uri, &HeaderMap::new(), None).unwrap_err().code,
            S3ErrorCode::InvalidArgument
        );
    }
}

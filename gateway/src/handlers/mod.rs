//! S3 operations, one `handle_*` per `Operation` variant, grouped by file (AWS names).

pub mod acl;
pub mod body;
pub mod bucket;
pub mod completion;
pub mod conditional;
pub mod copy;
pub mod cors;
pub mod delete;
pub mod events;
pub mod headers;
pub mod list;
pub mod multipart;
pub mod object;
pub mod policy;
pub mod tagging;
pub mod through;
pub mod uploads;
pub mod usage;

use axum::body::Body;
use axum::response::Response;
use holt_core::{Batch, Condition};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};

use crate::auth::Payload;
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::routing::{Operation, Query, Route};
use crate::storage::meta::{BucketMeta, ObjectMeta};
use crate::storage::schema;
use crate::AppState;

/// Longest object key, in bytes of UTF-8.
pub const KEY_BYTES_MAX: usize = 1024;
/// Attempts at an object record update (`update_object`) that races other writes.
const OBJECT_UPDATE_ATTEMPTS_MAX: usize = 16;

/// Everything a handler knows about its request, after routing and authentication.
pub struct ReqCtx {
    /// The gateway's shared state: store, settings, metrics.
    pub state: AppState,
    /// The id sent back in `x-amz-request-id` and in error documents.
    pub request_id: String,
    /// The authenticated access key (for an anonymous request, the bucket owner's).
    pub user: String,
    /// Whether the request carried no signature and was let through by the bucket's policy
    /// or ACLs (`policy::anonymous_grant`): responses then never show the owner's access key.
    pub anonymous: bool,
    /// Whether that grant was only the object's own `public-read` ACL
    /// (`AnonymousGrant::by_object_acl`): a read then checks the record it serves.
    pub object_acl_grant: bool,
    /// How the body must be verified (signed SHA-256, unsigned, or aws-chunked).
    pub payload: Payload,
    /// The operation, bucket and key the request was routed to.
    pub route: Route,
    /// The decoded query parameters.
    pub query: Query,
    /// The HTTP method.
    pub method: Method,
    /// The request target as received (path still percent-encoded).
    pub uri: Uri,
    /// The request headers as received.
    pub headers: HeaderMap,
    /// Whether the request arrived over TLS (`server::Secure`).
    pub secure: bool,
}

impl ReqCtx {
    /// The engine and body store.
    pub fn store(&self) -> &crate::storage::Store {
        self.state.store()
    }

    /// The owner ID a response shows: the owner's access key, or a placeholder for an
    /// anonymous request.
    pub fn shown_owner<'a>(&self, owner: &'a str) -> &'a str {
        if self.anonymous {
            "anonymous"
        } else {
            owner
        }
    }

    /// The bucket named by the request (routing guarantees one for bucket and object
    /// operations).
    pub fn bucket(&self) -> S3Result<&str> {
        self.route.bucket.as_deref().ok_or_else(|| S3Error::new(S3ErrorCode::InvalidRequest))
    }

    /// The object key, checked against the S3 length limit.
    pub fn key(&self) -> S3Result<&str> {
        let key = self.route.key.as_deref().ok_or_else(|| S3Error::new(S3ErrorCode::InvalidRequest))?;
        check_key(key)?;
        Ok(key)
    }

    /// The first value of header `name`, if present and valid visible ASCII text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The request's header `name` for headers whose value must be visible ASCII: `None` when
    /// absent, `code` (400) when present with other bytes, which `header` would read as absent.
    pub fn ascii_header(&self, name: &str, code: S3ErrorCode) -> S3Result<Option<&str>> {
        let Some(value) = self.headers.get(name) else { return Ok(None) };
        value.to_str().map(Some).map_err(|_| {
            S3Error::with_message(code, format!("The {name} header holds bytes that are not ASCII."))
        })
    }

    /// Whether the request's `versionId` (if any) names the object's one version. Objects
    /// here are unversioned: their only version is `null`, so any other id names a version
    /// that does not exist (an empty id is malformed, as in S3).
    pub fn names_current_version(&self) -> S3Result<bool> {
        match self.query.get("versionId") {
            None | Some("null") => Ok(true),
            Some("") => Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "Version id cannot be the empty string",
            )),
            Some(_) => Ok(false),
        }
    }

    /// Loads the request's bucket and checks that the caller owns it.
    pub async fn owned_bucket(&self) -> S3Result<BucketMeta> {
        let name = self.bucket()?;
        load_owned_bucket(self, name).await
    }
}

/// The object's record and its engine version; NoSuchKey when there is none.
pub async fn load_object(ctx: &ReqCtx) -> S3Result<(ObjectMeta, holt_core::Version)> {
    let (bucket, key) = (ctx.bucket()?, ctx.key()?);
    let entry = ctx.store().get(schema::object(bucket, key)).await?;
    let entry = entry.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchKey))?;
    let meta = ObjectMeta::decode(&entry.value).ok_or_else(|| {
        S3Error::internal("object record", format!("undecodable record for {bucket}/{key}"))
    })?;
    Ok((meta, entry.version))
}

/// Rewrites the object's record with `change` applied, on the condition that nothing else
/// wrote it meanwhile (else reads it again): the body and everything else stay as they are.
///
/// The bucket's owner is checked again after the object is read. The handlers check it first
/// too, but a request body can take its time, and meanwhile the bucket can be emptied,
/// deleted and created again by another user. Checked in this order, a record read here belongs
/// to the caller's bucket as long as its version is current: the bucket cannot change hands
/// without the record going first (DeleteBucket needs an empty bucket).
pub async fn update_object(ctx: &ReqCtx, change: impl Fn(ObjectMeta) -> ObjectMeta) -> S3Result<()> {
    let okey = schema::object(ctx.bucket()?, ctx.key()?);
    for _ in 0..OBJECT_UPDATE_ATTEMPTS_MAX {
        let (meta, version) = load_object(ctx).await?;
        ctx.owned_bucket().await?;
        let mut batch = Batch::new();
        batch.put_if(okey.clone(), change(meta).encode(), Condition::Version(version));
        match ctx.store().write_batch(batch).await {
            Ok(_) => return Ok(()),
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => continue,
            Err(e) => return Err(e),
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent writes to this key."))
}

/// Checks an object key's length: 1 to `KEY_BYTES_MAX` bytes, else KeyTooLongError (an empty
/// key included).
pub fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(S3Error::with_message(
            S3ErrorCode::KeyTooLongError,
            format!("Your key is too long: {} bytes; keys are 1 to {KEY_BYTES_MAX} bytes.", key.len()),
        ));
    }
    Ok(())
}

/// Loads bucket `name` and checks that the caller owns it: a missing bucket is NoSuchBucket,
/// somebody else's is AccessDenied. Bucket names that cannot exist are NoSuchBucket too.
pub async fn load_owned_bucket(ctx: &ReqCtx, name: &str) -> S3Result<BucketMeta> {
    if !bucket::valid_bucket_name(name) {
        return Err(S3Error::new(S3ErrorCode::NoSuchBucket).resource(format!("/{name}")));
    }
    let entry = ctx.store().get(schema::bucket(name)).await?;
    let entry = entry.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchBucket).resource(format!("/{name}")))?;
    let meta = BucketMeta::decode(&entry.value)
        .ok_or_else(|| S3Error::internal("bucket record", format!("undecodable record for bucket {name}")))?;
    if meta.owner != ctx.user {
        return Err(S3Error::new(S3ErrorCode::AccessDenied).resource(format!("/{name}")));
    }
    Ok(meta)
}

/// A 200 response with an XML document.
pub fn xml_response(body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    resp
}

/// An XML response whose document is in several pieces already (a listing's header, entries
/// and prefixes), sent one after another without joining them, with its exact length.
pub fn xml_response_chunks(chunks: Vec<Vec<u8>>) -> Response {
    let chunks = chunks.into_iter().filter(|c| !c.is_empty()).map(bytes::Bytes::from).collect();
    let mut resp = Response::new(Body::new(Chunks(chunks)));
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    resp
}

/// A body of chunks in memory, with an exact size hint (so it goes out with Content-Length).
struct Chunks(std::collections::VecDeque<bytes::Bytes>);

impl http_body::Body for Chunks {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|chunk| Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.iter().map(|c| c.len() as u64).sum())
    }
}

/// A response with `status` and no body.
pub fn empty_response(status: StatusCode) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = status;
    resp
}

/// Sets a header from a string, skipping values that are not valid header text.
pub fn set_header(resp: &mut Response, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

/// Runs the operation's handler.
pub async fn dispatch(ctx: ReqCtx, body: Body) -> S3Result<Response> {
    use Operation::*;
    match ctx.route.op {
        ListBuckets => bucket::handle_list_buckets(&ctx).await,
        CreateBucket => bucket::handle_create_bucket(&ctx, body).await,
        HeadBucket => bucket::handle_head_bucket(&ctx).await,
        DeleteBucket => bucket::handle_delete_bucket(&ctx).await,
        GetBucketLocation => bucket::handle_get_bucket_location(&ctx).await,
        GetBucketVersioning => bucket::handle_get_bucket_versioning(&ctx).await,
        ListObjects => list::handle_list_objects(&ctx).await,
        GetBucketUsage => usage::handle_get_bucket_usage(&ctx).await,
        ListObjectsV2 => list::handle_list_objects_v2(&ctx).await,
        ListObjectVersions => list::handle_list_object_versions(&ctx).await,
        DeleteObjects => delete::handle_delete_objects(&ctx, body).await,
        PutObject => object::handle_put_object(&ctx, body).await,
        HeadObject => object::handle_get_object(&ctx, true).await,
        GetObject => object::handle_get_object(&ctx, false).await,
        CopyObject => copy::handle_copy_object(&ctx).await,
        DeleteObject => delete::handle_delete_object(&ctx).await,
        CreateMultipartUpload => multipart::handle_create_multipart_upload(&ctx).await,
        UploadPart => multipart::handle_upload_part(&ctx, body).await,
        UploadPartCopy => copy::handle_upload_part_copy(&ctx).await,
        CompleteMultipartUpload => multipart::handle_complete_multipart_upload(&ctx, body).await,
        AbortMultipartUpload => multipart::handle_abort_multipart_upload(&ctx).await,
        ListParts => uploads::handle_list_parts(&ctx).await,
        ListMultipartUploads => uploads::handle_list_multipart_uploads(&ctx).await,
        GetBucketAcl => acl::handle_get_acl(&ctx, false).await,
        PutBucketAcl => acl::handle_put_acl(&ctx, body, false).await,
        GetObjectAcl => acl::handle_get_acl(&ctx, true).await,
        PutObjectAcl => acl::handle_put_acl(&ctx, body, true).await,
        GetObjectTagging => tagging::handle_get_object_tagging(&ctx).await,
        PutObjectTagging => tagging::handle_put_object_tagging(&ctx, body).await,
        DeleteObjectTagging => tagging::handle_delete_object_tagging(&ctx).await,
        GetBucketCors => cors::handle_get_bucket_cors(&ctx).await,
        PutBucketCors => cors::handle_put_bucket_cors(&ctx, body).await,
        DeleteBucketCors => cors::handle_delete_bucket_cors(&ctx).await,
        GetBucketPolicy => policy::handle_get_bucket_policy(&ctx).await,
        PutBucketPolicy => policy::handle_put_bucket_policy(&ctx, body).await,
        DeleteBucketPolicy => policy::handle_delete_bucket_policy(&ctx).await,
        NotImplemented => Err(S3Error::new(S3ErrorCode::NotImplemented)),
    }
}

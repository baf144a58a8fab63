//! ACLs, the part clients use. Every bucket and object is private to the bucket's owner, who
//! writes every object in it and has FULL_CONTROL; nothing else is granted.
//!
//! - GetBucketAcl and GetObjectAcl show exactly that.
//! - PutBucketAcl and PutObjectAcl, and the `x-amz-acl` header of CreateBucket, PutObject,
//!   CopyObject and CreateMultipartUpload, accept what keeps it so: the canned ACLs `private`
//!   and `bucket-owner-full-control` (the same thing here, since the bucket's owner owns every
//!   object in it), or an `AccessControlPolicy` whose every grant is FULL_CONTROL to the owner.
//! - Any other canned ACL, any `x-amz-grant-*` header, and any other grant is 501
//!   NotImplemented with a message naming it: never accepted and silently ignored, which would
//!   leave a client believing an object is shared (or public) when it is not. A value that is
//!   no canned ACL at all is 400 InvalidArgument.

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;

use super::body::read_small;
use super::{empty_response, xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::schema;
use crate::xml::request;
use crate::xml::response::owner_elem;
use crate::xml::XmlWriter;

/// The canned ACLs S3 defines.
const CANNED_ACLS: &[&str] = &[
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "aws-exec-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
    "log-delivery-write",
];

/// Canned ACLs that grant nothing beyond the owner's FULL_CONTROL here.
const OWNER_ONLY_ACLS: &[&str] = &["private", "bucket-owner-full-control"];

/// The headers that grant permissions to others.
const GRANT_HEADERS: &[&str] = &[
    "x-amz-grant-read",
    "x-amz-grant-write",
    "x-amz-grant-read-acp",
    "x-amz-grant-write-acp",
    "x-amz-grant-full-control",
];

/// Largest AccessControlPolicy document read.
const ACL_BODY_BYTES_MAX: u64 = 64 * 1024;

/// Checks the ACL headers of a write: `Ok(true)` when a canned ACL was given, `Ok(false)` when
/// none; an ACL that would grant anyone but the owner is refused (see the module docs).
pub fn check_acl_headers(ctx: &ReqCtx) -> S3Result<bool> {
    for name in GRANT_HEADERS {
        if ctx.headers.contains_key(*name) {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!(
                    "The {name} header is not supported: buckets and objects are private to their owner."
                ),
            ));
        }
    }
    let Some(acl) = ctx.header("x-amz-acl") else { return Ok(false) };
    let acl = acl.trim();
    if OWNER_ONLY_ACLS.contains(&acl) {
        Ok(true)
    } else if CANNED_ACLS.contains(&acl) {
        Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            format!(
                "The canned ACL '{acl}' is not supported: buckets and objects are private to their owner."
            ),
        ))
    } else {
        Err(S3Error::with_message(S3ErrorCode::InvalidArgument, format!("'{acl}' is not a canned ACL.")))
    }
}

/// GetBucketAcl (`key` `None`) and GetObjectAcl: the owner with FULL_CONTROL.
pub async fn handle_get_acl(ctx: &ReqCtx, object: bool) -> S3Result<Response> {
    let owner = target_owner(ctx, object).await?;
    let mut w = XmlWriter::new();
    w.open_root("AccessControlPolicy");
    owner_elem(&mut w, &owner);
    w.open("AccessControlList");
    w.open("Grant");
    // `open` writes its argument as is: the attributes are a literal.
    w.open(r#"Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser""#);
    w.elem("ID", &owner);
    w.elem("DisplayName", &owner);
    w.close("Grantee");
    w.elem("Permission", "FULL_CONTROL");
    w.close("Grant");
    w.close("AccessControlList");
    w.close("AccessControlPolicy");
    Ok(xml_response(w.finish()))
}

/// PutBucketAcl and PutObjectAcl: a canned ACL header or an AccessControlPolicy document that
/// keeps the target private (see the module docs); nothing changes, since nothing else is
/// stored.
pub async fn handle_put_acl(ctx: &ReqCtx, body: Body, object: bool) -> S3Result<Response> {
    let owner = target_owner(ctx, object).await?;
    if check_acl_headers(ctx)? {
        return Ok(empty_response(StatusCode::OK));
    }
    let document = read_small(ctx, body, ACL_BODY_BYTES_MAX).await?;
    check_policy_document(&document, &owner)?;
    Ok(empty_response(StatusCode::OK))
}

/// The owner of the bucket (or object) the request names, after checking that it exists and
/// that the caller owns it.
async fn target_owner(ctx: &ReqCtx, object: bool) -> S3Result<String> {
    let bucket = ctx.owned_bucket().await?;
    if object {
        let (name, key) = (ctx.bucket()?, ctx.key()?);
        if ctx.store().get(schema::object(name, key)).await?.is_none() {
            return Err(S3Error::new(S3ErrorCode::NoSuchKey));
        }
    }
    Ok(bucket.owner)
}

/// Accepts an AccessControlPolicy whose every grant is FULL_CONTROL to `owner`.
fn check_policy_document(document: &[u8], owner: &str) -> S3Result<()> {
    let malformed = |why: &str| S3Error::with_message(S3ErrorCode::MalformedACLError, why.to_owned());
    if document.iter().all(u8::is_ascii_whitespace) {
        return Err(malformed("Give a canned ACL in x-amz-acl or an AccessControlPolicy document."));
    }
    let root = request::parse(document).map_err(|_| malformed("The ACL document does not parse."))?;
    if root.name != "AccessControlPolicy" {
        return Err(malformed("The document is not an AccessControlPolicy."));
    }
    let list = root.child("AccessControlList").ok_or_else(|| malformed("No AccessControlList."))?;
    let mut grants = 0;
    for grant in list.children_named("Grant") {
        grants += 1;
        let grantee = grant.child("Grantee").ok_or_else(|| malformed("A Grant without a Grantee."))?;
        let permission = grant.child_text("Permission").map(str::trim).unwrap_or("");
        let id = grantee.child_text("ID").map(str::trim);
        if id != Some(owner) || permission != "FULL_CONTROL" {
            let whom = id
                .map(|id| format!("ID {id}"))
                .or_else(|| grantee.child_text("URI").map(|u| format!("URI {}", u.trim())))
                .or_else(|| grantee.child_text("EmailAddress").map(|e| format!("EmailAddress {}", e.trim())))
                .unwrap_or_else(|| "an unnamed grantee".to_owned());
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!(
                    "The grant of {permission} to {whom} is not supported: only the owner's FULL_CONTROL \
                     can be granted."
                ),
            ));
        }
    }
    if grants == 0 {
        return Err(malformed("The AccessControlList grants nothing."));
    }
    Ok(())
}

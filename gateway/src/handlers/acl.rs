//! ACLs, the part clients use. The bucket's owner owns every object in it and has
//! FULL_CONTROL; the one other grant is `public-read`: READ for everyone (the AllUsers group).
//!
//! - GetBucketAcl and GetObjectAcl show the owner's FULL_CONTROL, and AllUsers READ when the
//!   bucket or object is public.
//! - PutBucketAcl and PutObjectAcl, and the `x-amz-acl` header of CreateBucket, PutObject,
//!   CopyObject and CreateMultipartUpload (for the object it completes into), accept the
//!   canned ACLs `private`, `bucket-owner-full-control` (the same thing here) and
//!   `public-read`, or an `AccessControlPolicy` granting the owner FULL_CONTROL and at most
//!   AllUsers READ. A public bucket may be listed by anyone; a public object read.
//! - Any other canned ACL, any `x-amz-grant-*` header, and any other grant is 501
//!   NotImplemented with a message naming it: never accepted and silently ignored, which would
//!   leave a client believing an object is shared when it is not. A value that is no canned
//!   ACL at all is 400 InvalidArgument.

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;

use super::body::read_small;
use super::{empty_response, xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BucketMeta, ObjectMeta};
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

/// The ACLs this gateway keeps: the owner's FULL_CONTROL, and READ for everyone or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acl {
    /// `private` or `bucket-owner-full-control`.
    Private,
    /// `public-read`.
    PublicRead,
}

impl Acl {
    /// Whether everyone may read.
    pub fn is_public_read(self) -> bool {
        self == Acl::PublicRead
    }
}

/// The AllUsers group's URI in grants.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

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

/// The ACL the headers of a write give: `None` without `x-amz-acl`; anything this gateway
/// cannot keep is refused (see the module docs).
pub fn check_acl_headers(ctx: &ReqCtx) -> S3Result<Option<Acl>> {
    for name in GRANT_HEADERS {
        if ctx.headers.contains_key(*name) {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!("The {name} header is not supported: use a canned ACL (private or public-read)."),
            ));
        }
    }
    let Some(acl) = ctx.ascii_header("x-amz-acl", S3ErrorCode::InvalidArgument)? else { return Ok(None) };
    match acl.trim() {
        "private" | "bucket-owner-full-control" => Ok(Some(Acl::Private)),
        "public-read" => Ok(Some(Acl::PublicRead)),
        acl if CANNED_ACLS.contains(&acl) => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            format!("The canned ACL '{acl}' is not supported: private and public-read are."),
        )),
        acl => {
            Err(S3Error::with_message(S3ErrorCode::InvalidArgument, format!("'{acl}' is not a canned ACL.")))
        }
    }
}

/// GetBucketAcl (`object` false) and GetObjectAcl: the owner with FULL_CONTROL, and AllUsers
/// with READ when public.
pub async fn handle_get_acl(ctx: &ReqCtx, object: bool) -> S3Result<Response> {
    let (owner, public) = match object {
        false => {
            let bucket = ctx.owned_bucket().await?;
            (bucket.owner, bucket.public_read)
        }
        true => {
            let bucket = ctx.owned_bucket().await?;
            let (meta, _) = super::load_object(ctx).await?;
            (bucket.owner, meta.public_read)
        }
    };
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
    if public {
        w.open("Grant");
        w.open(r#"Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group""#);
        w.elem("URI", ALL_USERS);
        w.close("Grantee");
        w.elem("Permission", "READ");
        w.close("Grant");
    }
    w.close("AccessControlList");
    w.close("AccessControlPolicy");
    Ok(xml_response(w.finish()))
}

/// PutBucketAcl and PutObjectAcl: a canned ACL header or an AccessControlPolicy document (see
/// the module docs), stored in the bucket's or object's record.
pub async fn handle_put_acl(ctx: &ReqCtx, body: Body, object: bool) -> S3Result<Response> {
    let owner = ctx.owned_bucket().await?.owner;
    let acl = match check_acl_headers(ctx)? {
        Some(acl) => {
            // S3 takes the ACL from the header or the body, never both.
            let length = ctx.header("content-length").and_then(|n| n.parse::<u64>().ok());
            if length.is_some_and(|n| n > 0) || ctx.headers.contains_key(http::header::TRANSFER_ENCODING) {
                return Err(S3Error::new(S3ErrorCode::UnexpectedContent));
            }
            acl
        }
        None => {
            let document = read_small(ctx, body, ACL_BODY_BYTES_MAX).await?;
            check_policy_document(&document, &owner)?
        }
    };
    let public_read = acl.is_public_read();
    if object {
        super::update_object(ctx, |meta| ObjectMeta { public_read, ..meta }).await?;
    } else {
        super::bucket::update_bucket(ctx, |meta| BucketMeta { public_read, ..meta }).await?;
    }
    Ok(empty_response(StatusCode::OK))
}

/// The ACL an AccessControlPolicy document grants: the owner's FULL_CONTROL, and AllUsers
/// READ or not.
pub fn check_policy_document(document: &[u8], owner: &str) -> S3Result<Acl> {
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
    let mut acl = Acl::Private;
    for grant in list.children_named("Grant") {
        grants += 1;
        let grantee = grant.child("Grantee").ok_or_else(|| malformed("A Grant without a Grantee."))?;
        let permission = grant.child_text("Permission").map(str::trim).unwrap_or("");
        let id = grantee.child_text("ID").map(str::trim);
        let uri = grantee.child_text("URI").map(str::trim);
        match (id, uri, permission) {
            (Some(id), None, "FULL_CONTROL") if id == owner => {}
            (None, Some(ALL_USERS), "READ") => acl = Acl::PublicRead,
            _ => {
                let whom = id
                    .map(|id| format!("ID {id}"))
                    .or_else(|| uri.map(|u| format!("URI {u}")))
                    .or_else(|| {
                        grantee.child_text("EmailAddress").map(|e| format!("EmailAddress {}", e.trim()))
                    })
                    .unwrap_or_else(|| "an unnamed grantee".to_owned());
                return Err(S3Error::with_message(
                    S3ErrorCode::NotImplemented,
                    format!(
                        "The grant of {permission} to {whom} is not supported: only the owner's FULL_CONTROL \
                         and READ to AllUsers can be granted."
                    ),
                ));
            }
        }
    }
    if grants == 0 {
        return Err(malformed("The AccessControlList grants nothing."));
    }
    Ok(acl)
}

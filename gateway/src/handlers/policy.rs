//! Bucket policies, the part that grants anonymous access (`mc anonymous set download|upload|
//! public`, AWS's "public read" examples), and the checks of anonymous requests.
//!
//! PutBucketPolicy, GetBucketPolicy (404 NoSuchBucketPolicy without one) and DeleteBucketPolicy.
//! A policy is a JSON document of at most 20 KiB, stored as given. The language understood:
//! `Version`, `Id`, and `Statement` (one or a list), each with `Sid`, `Effect` `Allow`,
//! `Principal` `*` (or `{"AWS": "*"}`, `{"AWS": ["*"]}`), `Action` (one or a list of the actions
//! in `ACTIONS`, or `s3:*`) and `Resource` (one or a list of `arn:aws:s3:::BUCKET` and
//! `arn:aws:s3:::BUCKET/PATTERN`, `*` matching any run of characters). Anything else
//! (`Deny`, `Condition`, `NotAction`, other principals, other actions) is 501 NotImplemented
//! naming it, never silently ignored; a document that is not such JSON is 400 MalformedPolicy.
//!
//! An anonymous request (no signature at all) is let through when the bucket's policy allows
//! its action on its resource, or the bucket's or object's `public-read` ACL allows reading
//! (`handlers::acl`); it then acts for the bucket's owner, with the operations in `action_of`
//! only (never a copy, whose source would be read with the owner's rights).

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use serde_json::Value;

use super::body::read_small;
use super::{empty_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::routing::{Operation, Route};
use crate::storage::meta::{BucketMeta, ObjectMeta};
use crate::storage::{schema, Store};

/// Largest policy document, as in S3.
pub const POLICY_BYTES_MAX: u64 = 20 * 1024;

/// The actions a policy may grant here: those of the operations anonymous requests may use.
const ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
    "s3:ListBucket",
    "s3:ListBucketMultipartUploads",
    "s3:GetBucketLocation",
];

/// PutBucketPolicy: replaces the bucket's policy with the document, once it checks out.
pub async fn handle_put_bucket_policy(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    let document = read_small(ctx, body, POLICY_BYTES_MAX).await?;
    let text = std::str::from_utf8(&document).map_err(|_| malformed("The policy is not UTF-8."))?;
    Policy::parse(text, ctx.bucket()?)?;
    let text = text.to_owned();
    super::bucket::update_bucket(ctx, |meta| BucketMeta { policy: Some(text.clone()), ..meta }).await?;
    Ok(empty_response(StatusCode::NO_CONTENT))
}

/// GetBucketPolicy: the document as given; 404 NoSuchBucketPolicy without one.
pub async fn handle_get_bucket_policy(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.owned_bucket().await?;
    let text = bucket.policy.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchBucketPolicy))?;
    let mut resp = Response::new(Body::from(text));
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

/// DeleteBucketPolicy: 204 whether there was one or not.
pub async fn handle_delete_bucket_policy(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    super::bucket::update_bucket(ctx, |meta| BucketMeta { policy: None, ..meta }).await?;
    Ok(empty_response(StatusCode::NO_CONTENT))
}

fn malformed(why: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::MalformedPolicy, why.to_owned())
}

fn unsupported(what: String) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::NotImplemented,
        format!("{what} is not supported in bucket policies here."),
    )
}

/// A checked policy: what it allows anyone.
#[derive(Debug, Default)]
pub struct Policy {
    /// Each Allow statement's actions and resource patterns.
    grants: Vec<(Vec<String>, Vec<String>)>,
}

impl Policy {
    /// Parses and checks a policy of `bucket` (see the module docs for the language).
    pub fn parse(text: &str, bucket: &str) -> S3Result<Policy> {
        let doc: Value = serde_json::from_str(text)
            .map_err(|e| malformed(&format!("The policy is not valid JSON: {e}")))?;
        let doc = doc.as_object().ok_or_else(|| malformed("The policy is not a JSON object."))?;
        for key in doc.keys() {
            if !matches!(key.as_str(), "Version" | "Id" | "Statement") {
                return Err(unsupported(format!("The policy element {key}")));
            }
        }
        if let Some(v) = doc.get("Version") {
            if !matches!(v.as_str(), Some("2012-10-17" | "2008-10-17")) {
                return Err(malformed("The policy Version must be 2012-10-17 or 2008-10-17."));
            }
        }
        let statements = match doc.get("Statement") {
            Some(Value::Array(list)) if !list.is_empty() => list.iter().collect::<Vec<_>>(),
            Some(one @ Value::Object(_)) => vec![one],
            _ => return Err(malformed("The policy has no Statement.")),
        };
        let mut policy = Policy::default();
        for statement in statements {
            let st = statement.as_object().ok_or_else(|| malformed("A Statement is not a JSON object."))?;
            for key in st.keys() {
                if !matches!(key.as_str(), "Sid" | "Effect" | "Principal" | "Action" | "Resource") {
                    return Err(unsupported(format!("The statement element {key}")));
                }
            }
            match st.get("Effect").and_then(Value::as_str) {
                Some("Allow") => {}
                Some(effect @ "Deny") => return Err(unsupported(format!("Effect {effect}"))),
                _ => return Err(malformed("A Statement's Effect must be Allow or Deny.")),
            }
            let everyone = match st.get("Principal") {
                Some(Value::String(p)) => p == "*",
                Some(Value::Object(p)) if p.len() == 1 => match p.get("AWS") {
                    Some(Value::String(a)) => a == "*",
                    Some(Value::Array(list)) => list.len() == 1 && list[0] == "*",
                    _ => false,
                },
                None => return Err(malformed("A Statement has no Principal.")),
                _ => false,
            };
            if !everyone {
                return Err(unsupported(format!("The principal {}", st["Principal"])));
            }
            let actions = strings(st.get("Action"), "Action")?;
            for action in &actions {
                if !(action == "s3:*" || ACTIONS.contains(&action.as_str())) {
                    return match action.starts_with("s3:") {
                        true => Err(unsupported(format!("The action {action}"))),
                        false => Err(malformed(&format!("Policy has invalid action: {action}"))),
                    };
                }
            }
            let resources = strings(st.get("Resource"), "Resource")?;
            for resource in &resources {
                let rest = resource.strip_prefix("arn:aws:s3:::").unwrap_or_default();
                let named = rest.split_once('/').map_or(rest, |(b, _)| b);
                if named != bucket {
                    return Err(malformed(&format!(
                        "Policy has invalid resource: {resource} (resources name this bucket, {bucket})"
                    )));
                }
            }
            policy.grants.push((actions, resources));
        }
        Ok(policy)
    }

    /// Whether the policy lets anyone do `action` on `resource` (an ARN).
    pub fn allows(&self, action: &str, resource: &str) -> bool {
        self.grants.iter().any(|(actions, resources)| {
            actions.iter().any(|a| a == action || a == "s3:*")
                && resources.iter().any(|pattern| glob(pattern, resource))
        })
    }
}

/// A JSON string or a non-empty list of them.
fn strings(value: Option<&Value>, what: &str) -> S3Result<Vec<String>> {
    let list = match value {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if !items.is_empty() => {
            items.iter().map(|v| v.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>().ok_or_else(
                || malformed(&format!("A Statement's {what} holds something other than strings.")),
            )?
        }
        _ => return Err(malformed(&format!("A Statement needs a {what}."))),
    };
    Ok(list)
}

/// Whether `text` matches `pattern`, where each `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The policy action an anonymous request for `op` needs, and whether it names the object
/// (else the bucket); `None` for operations never open to anonymous requests.
fn action_of(op: Operation) -> Option<(&'static str, bool)> {
    use Operation::*;
    Some(match op {
        GetObject | HeadObject => ("s3:GetObject", true),
        PutObject | CreateMultipartUpload | UploadPart | CompleteMultipartUpload => ("s3:PutObject", true),
        DeleteObject => ("s3:DeleteObject", true),
        AbortMultipartUpload => ("s3:AbortMultipartUpload", true),
        ListParts => ("s3:ListMultipartUploadParts", true),
        ListObjects | ListObjectsV2 | HeadBucket => ("s3:ListBucket", false),
        ListMultipartUploads => ("s3:ListBucketMultipartUploads", false),
        GetBucketLocation => ("s3:GetBucketLocation", false),
        _ => return None,
    })
}

/// What an anonymous request was granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnonymousGrant {
    /// The bucket's owner, for whom the request acts.
    pub owner: String,
    /// Whether anyone may list the bucket. Without it, a missing object is 403 AccessDenied
    /// rather than 404 NoSuchKey, as in S3: a grant to read objects does not reveal which
    /// keys exist.
    pub may_list: bool,
    /// Whether only the object's own `public-read` ACL grants the read: the handler then
    /// serves the record it reads only if that record still has it (the object may have been
    /// overwritten privately since the grant was checked).
    pub by_object_acl: bool,
}

/// Whether `route`, sent without any signature, is allowed by its bucket's policy or ACLs;
/// if so, what it was granted.
pub async fn anonymous_grant(
    store: &Store,
    route: &Route,
    headers: &http::HeaderMap,
) -> S3Result<Option<AnonymousGrant>> {
    let (Some((action, on_object)), Some(bucket)) = (action_of(route.op), route.bucket.as_deref()) else {
        return Ok(None);
    };
    // What anonymous writes would set needs rights of its own (PutObjectAcl, PutObjectTagging).
    if ["x-amz-acl", "x-amz-tagging"].iter().any(|h| headers.contains_key(*h)) && action == "s3:PutObject" {
        return Ok(None);
    }
    if !super::bucket::valid_bucket_name(bucket) {
        return Ok(None);
    }
    let Some(entry) = store.get(schema::bucket(bucket)).await? else { return Ok(None) };
    let Some(meta) = BucketMeta::decode(&entry.value) else { return Ok(None) };
    let key = route.key.as_deref();
    let resource = match (on_object, key) {
        (true, Some(key)) => format!("arn:aws:s3:::{bucket}/{key}"),
        (true, None) => return Ok(None),
        (false, _) => format!("arn:aws:s3:::{bucket}"),
    };
    // A stored policy was checked when it was put; one that no longer parses grants nothing.
    let policy = meta.policy.as_deref().and_then(|text| Policy::parse(text, bucket).ok());
    let may_list = meta.public_read
        || policy.as_ref().is_some_and(|p| p.allows("s3:ListBucket", &format!("arn:aws:s3:::{bucket}")));
    let grant = |owner: String, by_object_acl| Some(AnonymousGrant { owner, may_list, by_object_acl });
    if policy.as_ref().is_some_and(|p| p.allows(action, &resource)) {
        return Ok(grant(meta.owner, false));
    }
    let (public, by_object_acl) = match (action, key) {
        ("s3:ListBucket", _) => (meta.public_read, false),
        ("s3:GetObject", Some(key)) => {
            let record = store.get(schema::object(bucket, key)).await?;
            (record.and_then(|e| ObjectMeta::decode(&e.value)).is_some_and(|m| m.public_read), true)
        }
        _ => (false, false),
    };
    Ok(if public { grant(meta.owner, by_object_acl) } else { None })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `mc anonymous set download` sends.
    const DOWNLOAD: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},
        "Action":["s3:GetBucketLocation","s3:ListBucket"],"Resource":["arn:aws:s3:::pics"]},
        {"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::pics/*"]}]}"#;

    #[test]
    fn a_download_policy_allows_reading_and_listing_only() {
        let p = Policy::parse(DOWNLOAD, "pics").unwrap();
        assert!(p.allows("s3:GetObject", "arn:aws:s3:::pics/a/b.jpg"));
        assert!(p.allows("s3:ListBucket", "arn:aws:s3:::pics"));
        assert!(!p.allows("s3:PutObject", "arn:aws:s3:::pics/a/b.jpg"));
        assert!(!p.allows("s3:GetObject", "arn:aws:s3:::pics"));
        assert!(!p.allows("s3:ListBucket", "arn:aws:s3:::pics/x"));
    }

    #[test]
    fn resource_patterns_match_runs_of_characters() {
        assert!(glob("arn:aws:s3:::b/public/*", "arn:aws:s3:::b/public/x/y"));
        assert!(!glob("arn:aws:s3:::b/public/*", "arn:aws:s3:::b/private/x"));
        assert!(glob("arn:aws:s3:::b/*.jpg", "arn:aws:s3:::b/a/b.jpg"));
        assert!(!glob("arn:aws:s3:::b/*.jpg", "arn:aws:s3:::b/a.jpg.txt"));
        assert!(glob("arn:aws:s3:::b/*/thumbs/*", "arn:aws:s3:::b/2026/thumbs/1.png"));
        assert!(!glob("arn:aws:s3:::b/a*a", "arn:aws:s3:::b/a"));
        assert!(glob("arn:aws:s3:::b", "arn:aws:s3:::b"));
        assert!(!glob("arn:aws:s3:::b", "arn:aws:s3:::bb"));
    }

    #[test]
    fn what_the_policy_language_does_not_cover_is_refused_by_name() {
        let code = |doc: &str| Policy::parse(doc, "pics").unwrap_err();
        let statement = |inner: &str| format!(r#"{{"Version":"2012-10-17","Statement":[{{{inner}}}]}}"#);
        let allow_get =
            r#""Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pics/*""#;
        assert!(Policy::parse(&statement(allow_get), "pics").is_ok());
        let deny = statement(&allow_get.replace("Allow", "Deny"));
        assert_eq!(code(&deny).code, S3ErrorCode::NotImplemented);
        let condition =
            statement(&format!(r#"{allow_get},"Condition":{{"IpAddress":{{"aws:SourceIp":"10.0.0.0/8"}}}}"#));
        let e = code(&condition);
        assert_eq!(e.code, S3ErrorCode::NotImplemented);
        assert!(e.message.contains("Condition"), "{}", e.message);
        let user = statement(&allow_get.replace(r#""*""#, r#"{"AWS":"arn:aws:iam::1:root"}"#));
        assert_eq!(code(&user).code, S3ErrorCode::NotImplemented);
        let acl = statement(&allow_get.replace("s3:GetObject", "s3:PutObjectAcl"));
        assert_eq!(code(&acl).code, S3ErrorCode::NotImplemented);
        let other_bucket = statement(&allow_get.replace(":::pics/", ":::other/"));
        assert_eq!(code(&other_bucket).code, S3ErrorCode::MalformedPolicy);
        assert_eq!(code("{").code, S3ErrorCode::MalformedPolicy);
        assert_eq!(code(r#"{"Version":"2012-10-17"}"#).code, S3ErrorCode::MalformedPolicy);
        assert_eq!(
            code(&statement(&allow_get.replace("s3:GetObject", "iam:PassRole"))).code,
            S3ErrorCode::MalformedPolicy
        );
    }

    #[test]
    fn operations_open_to_anonymous_requests_are_a_closed_list() {
        assert_eq!(action_of(Operation::GetObject), Some(("s3:GetObject", true)));
        for op in [
            Operation::CopyObject,
            Operation::UploadPartCopy,
            Operation::DeleteObjects,
            Operation::PutBucketAcl,
        ] {
            assert_eq!(action_of(op), None, "{op:?}");
        }
    }
}

//! ListBuckets, CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation,
//! GetBucketVersioning.

use axum::body::Body;
use axum::response::Response;
use holt_core::{Batch, Condition};
use http::StatusCode;

use super::body::read_small;
use super::{empty_response, set_header, xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::BucketMeta;
use crate::storage::schema;
use crate::storage::token::{TokenKind, TokenScope};
use crate::time;
use crate::xml::{request, response};

/// The region where re-creating a bucket you own answers 200, as AWS does there.
const LEGACY_REGION: &str = "us-east-1";

/// Largest CreateBucketConfiguration body.
const CREATE_BUCKET_BODY_BYTES_MAX: u64 = 64 * 1024;
/// Most buckets in one ListBuckets page (and the default).
const MAX_BUCKETS_LIMIT: usize = 10_000;
/// Attempts at a bucket record update (`update_bucket`) that races other writes.
const BUCKET_UPDATE_ATTEMPTS_MAX: usize = 16;

/// The S3 bucket naming rules (general-purpose buckets).
pub fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    if !(3..=63).contains(&b.len()) {
        return false;
    }
    if !b.iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-') {
        return false;
    }
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return false;
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return false;
    }
    const RESERVED_PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];
    const RESERVED_SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];
    !RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
        && !RESERVED_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// A CreateBucket `LocationConstraint` must name the configured region (`EU` is AWS's old
/// name for eu-west-1).
fn check_location_constraint(requested: &str, region: &str) -> S3Result<()> {
    let requested_region = if requested == "EU" { "eu-west-1" } else { requested };
    if requested_region == region {
        return Ok(());
    }
    Err(S3Error::with_message(
        S3ErrorCode::IllegalLocationConstraintException,
        format!(
            "The {requested} location constraint is incompatible for the region specific endpoint this request \
             was sent to."
        ),
    ))
}

/// CreateBucket: records the bucket and the caller's ownership in one batch, only if the name
/// is free; an optional `CreateBucketConfiguration` must name the configured region.
pub async fn handle_create_bucket(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    let name = ctx.bucket()?;
    if !valid_bucket_name(name) {
        return Err(S3Error::new(S3ErrorCode::InvalidBucketName).resource(format!("/{name}")));
    }
    let acl = super::acl::check_acl_headers(ctx)?;
    let body = read_small(ctx, body, CREATE_BUCKET_BODY_BYTES_MAX).await?;
    // Every bucket lives in this server's region (clients sign later requests with the region
    // GetBucketLocation reports), so a constraint naming another region is refused, as a
    // regional AWS endpoint does. Naming this region explicitly is accepted, us-east-1
    // included (AWS refuses that one, but mc and others send it).
    if let Some(requested) = request::parse_create_bucket(&body)? {
        check_location_constraint(&requested, &ctx.state.0.settings.region)?;
    }
    let meta = BucketMeta {
        owner: ctx.user.clone(),
        created_ms: time::now_ms(),
        location: None,
        cors: Vec::new(),
        policy: None,
        public_read: acl.is_some_and(super::acl::Acl::is_public_read),
    };
    let mut batch = Batch::new();
    batch.put_if(schema::bucket(name), meta.encode(), Condition::Absent);
    batch.put(schema::owned_bucket(&ctx.user, name), Vec::new());
    // Upstream mode: a bucket the upstream already has is attached, and its keys imported
    // (the import cursor starts empty, in the same batch); any other is created there first.
    let upstream = super::through::upstream(ctx);
    let mut attach = false;
    if let Some(up) = &upstream {
        if ctx.store().get(schema::bucket(name)).await?.is_none() {
            attach = up.bucket_exists(name).await?;
            if attach {
                batch.put(schema::import_cursor(name), Vec::new());
            } else {
                up.create_bucket(name).await?;
            }
        }
    }
    match ctx.store().write_batch(batch).await {
        Ok(_) if attach => super::through::spawn_import(ctx.store().clone(), name.to_owned()),
        Ok(_) => {}
        Err(e) if e.code == S3ErrorCode::PreconditionFailed => {
            let existing = ctx.store().get(schema::bucket(name)).await?;
            let owner = existing.and_then(|e| BucketMeta::decode(&e.value)).map(|m| m.owner);
            let code = match owner.as_deref() == Some(ctx.user.as_str()) {
                // AWS's legacy behaviour in us-east-1: creating a bucket you own succeeds and
                // changes nothing (its objects stay); elsewhere it is an error.
                true if ctx.state.0.settings.region == LEGACY_REGION => {
                    let mut resp = empty_response(StatusCode::OK);
                    set_header(&mut resp, "location", &format!("/{name}"));
                    return Ok(resp);
                }
                true => S3ErrorCode::BucketAlreadyOwnedByYou,
                false => S3ErrorCode::BucketAlreadyExists,
            };
            return Err(S3Error::new(code).resource(format!("/{name}")));
        }
        Err(e) => return Err(e),
    }
    let mut resp = empty_response(StatusCode::OK);
    set_header(&mut resp, "location", &format!("/{name}"));
    Ok(resp)
}

/// Rewrites the bucket's record with `change` applied (its CORS rules, policy or ACL), on the
/// condition that nothing else wrote it meanwhile (else reads it again); the owner is checked
/// on the record that is rewritten.
pub async fn update_bucket(ctx: &ReqCtx, change: impl Fn(BucketMeta) -> BucketMeta) -> S3Result<()> {
    let name = ctx.bucket()?;
    for _ in 0..BUCKET_UPDATE_ATTEMPTS_MAX {
        let entry = ctx.store().get(schema::bucket(name)).await?;
        let entry = entry.ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchBucket))?;
        let meta = BucketMeta::decode(&entry.value)
            .ok_or_else(|| S3Error::internal("bucket record", format!("undecodable record for {name}")))?;
        if meta.owner != ctx.user {
            return Err(S3Error::new(S3ErrorCode::AccessDenied));
        }
        let mut batch = Batch::new();
        batch.put_if(schema::bucket(name), change(meta).encode(), Condition::Version(entry.version));
        match ctx.store().write_batch(batch).await {
            Ok(_) => return Ok(()),
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => continue,
            Err(e) => return Err(e),
        }
    }
    Err(S3Error::with_message(S3ErrorCode::SlowDown, "Too many concurrent writes to this bucket."))
}

/// HeadBucket: 200 with `x-amz-bucket-region` if the caller owns the bucket.
pub async fn handle_head_bucket(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    let mut resp = empty_response(StatusCode::OK);
    set_header(&mut resp, "x-amz-bucket-region", &ctx.state.0.settings.region);
    Ok(resp)
}

/// DeleteBucket: removes an empty bucket (no objects, no uploads in progress); one that
/// gains an object while it is being deleted is put back and answers BucketNotEmpty.
pub async fn handle_delete_bucket(ctx: &ReqCtx) -> S3Result<Response> {
    let name = ctx.bucket()?;
    ctx.owned_bucket().await?;
    if !ctx.store().scan(schema::objects_prefix(name), Vec::new(), 1).await?.is_empty() {
        return Err(S3Error::new(S3ErrorCode::BucketNotEmpty).resource(format!("/{name}")));
    }
    if !ctx.store().scan(schema::uploads_prefix(name), Vec::new(), 1).await?.is_empty() {
        return Err(S3Error::with_message(
            S3ErrorCode::BucketNotEmpty,
            "The bucket you tried to delete has multipart uploads in progress",
        )
        .resource(format!("/{name}")));
    }
    let record = ctx
        .store()
        .get(schema::bucket(name))
        .await?
        .ok_or_else(|| S3Error::new(S3ErrorCode::NoSuchBucket))?;
    if let Some(up) = super::through::upstream(ctx) {
        // The upstream's objects are the truth: one the index does not know of yet (a write
        // that bypassed the gateway) keeps the bucket (BucketNotEmpty).
        up.delete_bucket(name).await?;
    }
    let mut batch = Batch::new();
    batch.delete_if(schema::bucket(name), Condition::Version(record.version));
    batch.delete(schema::owned_bucket(&ctx.user, name));
    batch.delete(schema::import_cursor(name));
    // An import still running stops at its next page once its record is gone.
    for (k, _) in ctx.store().scan(schema::import_prefix_cursors(name), Vec::new(), 100_000).await? {
        batch.delete(k);
    }
    match ctx.store().write_batch(batch).await {
        Ok(_) => {}
        Err(e) if e.code == S3ErrorCode::PreconditionFailed => {
            return Err(S3Error::new(S3ErrorCode::NoSuchBucket))
        }
        Err(e) => return Err(e),
    }
    // An object or upload that committed between the emptiness check and the delete: put the
    // bucket back (writers that look after this see it gone and withdraw their record).
    let objects = ctx.store().scan(schema::objects_prefix(name), Vec::new(), 1).await?;
    let uploads = ctx.store().scan(schema::uploads_prefix(name), Vec::new(), 1).await?;
    if !objects.is_empty() || !uploads.is_empty() {
        let mut restore = Batch::new();
        restore.put_if(schema::bucket(name), record.value, Condition::Absent);
        restore.put(schema::owned_bucket(&ctx.user, name), Vec::new());
        return match ctx.store().write_batch(restore).await {
            Ok(_) => Err(S3Error::new(S3ErrorCode::BucketNotEmpty).resource(format!("/{name}"))),
            // Somebody created the name again meanwhile: our bucket is gone all the same, and
            // the late writers, seeing a bucket that is not ours, withdraw their records (see
            // `settle_commit`).
            Err(e) if e.code == S3ErrorCode::PreconditionFailed => Ok(empty_response(StatusCode::NO_CONTENT)),
            Err(e) => Err(e),
        };
    }
    Ok(empty_response(StatusCode::NO_CONTENT))
}

/// GetBucketLocation: the configured region, the same for every bucket.
pub async fn handle_get_bucket_location(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    Ok(xml_response(response::location_constraint(Some(&ctx.state.0.settings.region))))
}

/// GetBucketVersioning: an empty configuration (versioning was never enabled).
pub async fn handle_get_bucket_versioning(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    Ok(xml_response(response::versioning_configuration()))
}

/// ListBuckets: the caller's buckets in name order, with `prefix`, `max-buckets` (1 to
/// 10000) and continuation tokens.
pub async fn handle_list_buckets(ctx: &ReqCtx) -> S3Result<Response> {
    let limit = match ctx.query.get("max-buckets") {
        None => MAX_BUCKETS_LIMIT,
        Some(v) => {
            v.parse::<usize>().ok().filter(|n| (1..=MAX_BUCKETS_LIMIT).contains(n)).ok_or_else(|| {
                S3Error::with_message(S3ErrorCode::InvalidArgument, "max-buckets must be 1 to 10000")
            })?
        }
    };
    let name_prefix = ctx.query.get("prefix").unwrap_or("");
    let index_prefix = schema::owned_buckets_prefix(&ctx.user);
    let scope = TokenScope {
        kind: TokenKind::ListBuckets,
        bucket: "",
        prefix: name_prefix.as_bytes(),
        delimiter: ctx.user.as_bytes(),
        url_encoding: false,
    };
    let resume = match ctx.query.get("continuation-token").filter(|t| !t.is_empty()) {
        Some(t) => ctx.store().tokens.decode(&scope, t)?,
        None => Vec::new(),
    };
    let mut scan_prefix = index_prefix.clone();
    scan_prefix.extend_from_slice(name_prefix.as_bytes());
    let start_after = if resume.is_empty() {
        Vec::new()
    } else {
        let mut s = index_prefix.clone();
        s.extend_from_slice(&resume);
        s
    };
    let mut rows = ctx.store().scan(scan_prefix, start_after, limit + 1).await?;
    let truncated = rows.len() > limit;
    rows.truncate(limit);
    let mut names = Vec::with_capacity(rows.len());
    for (k, _) in &rows {
        if let Ok(name) = std::str::from_utf8(&k[index_prefix.len()..]) {
            names.push(name.to_owned());
        }
    }
    let mut metas = Vec::with_capacity(names.len());
    for name in &names {
        // The index and the bucket record are written in one batch; a missing record means the
        // bucket was deleted after the scan.
        if let Some(e) = ctx.store().get(schema::bucket(name)).await? {
            if let Some(m) = BucketMeta::decode(&e.value) {
                metas.push((name.as_str(), m));
            }
        }
    }
    let region = ctx.state.0.settings.region.as_str();
    let entries: Vec<response::BucketEntry<'_>> = metas
        .iter()
        .map(|(name, m)| response::BucketEntry { name, creation_date: time::iso8601(m.created_ms), region })
        .collect();
    let token = match (truncated, names.last()) {
        (true, Some(last)) => Some(ctx.store().tokens.encode(&scope, last.as_bytes())),
        _ => None,
    };
    Ok(xml_response(response::list_all_my_buckets(&ctx.user, &entries, token.as_deref())))
}

#[cfg(test)]
mod tests {
    use super::{check_location_constraint, valid_bucket_name};
    use crate::error::S3ErrorCode;

    #[test]
    fn location_constraint_names_the_configured_region() {
        let code = |requested, region| check_location_constraint(requested, region).map_err(|e| e.code);
        assert_eq!(code("eu-west-1", "eu-west-1"), Ok(()));
        assert_eq!(code("EU", "eu-west-1"), Ok(()));
        assert_eq!(code("us-east-1", "us-east-1"), Ok(()));
        for (requested, region) in
            [("us-east-1", "eu-west-1"), ("EU", "us-east-1"), ("eu-west-2", "eu-west-1")]
        {
            assert_eq!(code(requested, region), Err(S3ErrorCode::IllegalLocationConstraintException));
        }
    }

    #[test]
    fn bucket_names() {
        for ok in ["abc", "my-bucket.1", "a".repeat(63).as_str(), "1-2-3"] {
            assert!(valid_bucket_name(ok), "{ok}");
        }
        for bad in [
            "ab",
            "Abc",
            "a_b",
            "-ab",
            "ab-",
            "a..b",
            "a.-b",
            "a-.b",
            "192.168.1.1",
            "xn--abc",
            "ab-s3alias",
            &"a".repeat(64),
            "a b",
        ] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }
}

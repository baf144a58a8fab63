//! Object tagging: GetObjectTagging, PutObjectTagging, DeleteObjectTagging, and the
//! `x-amz-tagging` header of PutObject, CopyObject (with `x-amz-tagging-directive`) and
//! CreateMultipartUpload. Tags live in the object's record (`ObjectMeta::tags`); GET and HEAD
//! report their number in `x-amz-tagging-count`. In upstream mode the upstream's object gets
//! them first (`set_tags`, and the writes' own requests).
//!
//! S3's limits: at most 10 tags (400 BadRequest past it), keys of 1 to 128 characters, values
//! of at most 256, letters, digits, spaces and `+ - = . _ : / @` only, no key starting with
//! `aws:`, no key twice (400 InvalidTag for the others).

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use percent_encoding::percent_decode_str;

use super::body::read_small;
use super::{empty_response, xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{ObjectMeta, Tags};
use crate::xml::request;
use crate::xml::XmlWriter;

/// Most tags on one object.
pub const TAGS_MAX: usize = 10;
/// Longest tag key, in characters.
pub const KEY_CHARS_MAX: usize = 128;
/// Longest tag value, in characters.
pub const VALUE_CHARS_MAX: usize = 256;
/// Largest Tagging document read.
const TAGGING_BODY_BYTES_MAX: u64 = 64 * 1024;

/// Checks tags against S3's limits.
pub fn validate(tags: &Tags) -> S3Result<()> {
    if tags.len() > TAGS_MAX {
        return Err(S3Error::with_message(
            S3ErrorCode::BadRequest,
            format!("Object tags cannot be greater than {TAGS_MAX}"),
        ));
    }
    for (i, (key, value)) in tags.iter().enumerate() {
        if key.is_empty() || key.chars().count() > KEY_CHARS_MAX {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidTag,
                format!(
                    "The TagKey you have provided is invalid: keys have 1 to {KEY_CHARS_MAX} characters."
                ),
            ));
        }
        if value.chars().count() > VALUE_CHARS_MAX {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidTag,
                format!("The TagValue you have provided is too long: at most {VALUE_CHARS_MAX} characters."),
            ));
        }
        for (what, text) in [("TagKey", key), ("TagValue", value)] {
            if let Some(c) = text.chars().find(|&c| !tag_char(c)) {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidTag,
                    format!(
                        "The {what} you have provided is invalid: {c:?} is not allowed (letters, digits, \
                         spaces and + - = . _ : / @ are)."
                    ),
                ));
            }
        }
        if key.starts_with("aws:") {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidTag,
                "Your TagKey cannot be prefixed with aws:",
            ));
        }
        if tags[..i].iter().any(|(k, _)| k == key) {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidTag,
                "Cannot provide multiple Tags with the same key",
            ));
        }
    }
    Ok(())
}

/// The characters S3 allows in tag keys and values: letters and digits (any script), spaces,
/// and `+ - = . _ : / @`.
fn tag_char(c: char) -> bool {
    c.is_alphanumeric() || c == ' ' || "+-=._:/@".contains(c)
}

/// The tags of a write's `x-amz-tagging` header (URL-encoded `k1=v1&k2=v2`), validated; none
/// when the header is absent.
pub fn from_header(ctx: &ReqCtx) -> S3Result<Tags> {
    let Some(value) = ctx.ascii_header("x-amz-tagging", S3ErrorCode::InvalidTag)? else {
        return Ok(Vec::new());
    };
    let decode = |text: &str| -> S3Result<String> {
        percent_decode_str(&text.replace('+', " ")).decode_utf8().map(|c| c.into_owned()).map_err(|_| {
            S3Error::with_message(S3ErrorCode::InvalidTag, "x-amz-tagging is not valid UTF-8 once decoded")
        })
    };
    let tags = value
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect::<S3Result<Tags>>()?;
    validate(&tags)?;
    Ok(tags)
}

/// GetObjectTagging.
pub async fn handle_get_object_tagging(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    let (meta, _) = super::load_object(ctx).await?;
    Ok(xml_response(document(&meta.tags)))
}

/// The Tagging document of `tags` (GetObjectTagging's answer, PutObjectTagging's body).
pub fn document(tags: &Tags) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("Tagging");
    w.open("TagSet");
    for (key, value) in tags {
        w.open("Tag");
        w.elem("Key", key);
        w.elem("Value", value);
        w.close("Tag");
    }
    w.close("TagSet");
    w.close("Tagging");
    w.finish()
}

/// PutObjectTagging: replaces the object's tags with the document's.
pub async fn handle_put_object_tagging(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    let document = read_small(ctx, body, TAGGING_BODY_BYTES_MAX).await?;
    let tags = parse_tagging(&document)?;
    validate(&tags)?;
    set_tags(ctx, tags).await?;
    Ok(empty_response(StatusCode::OK))
}

/// DeleteObjectTagging: the object keeps everything but its tags.
pub async fn handle_delete_object_tagging(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    set_tags(ctx, Vec::new()).await?;
    Ok(empty_response(StatusCode::NO_CONTENT))
}

/// Gives the request's object `tags`. In upstream mode the upstream's object gets them
/// first, as for every write (`through`): under the key's lock, with an intent that makes
/// the next start repair the record (tags read back from the upstream) if the process
/// stops between the two steps.
async fn set_tags(ctx: &ReqCtx, tags: Tags) -> S3Result<()> {
    let Some(up) = super::through::upstream(ctx) else {
        return super::update_object(ctx, |meta| ObjectMeta { tags: tags.clone(), ..meta }).await;
    };
    let (bucket, key) = (ctx.bucket()?, ctx.key()?);
    let _order = up.locks.lock(crate::storage::schema::object(bucket, key)).await;
    // NoSuchKey before anything is sent: the index answers for the keys it holds.
    super::load_object(ctx).await?;
    super::through::write_intent(ctx, bucket, key).await?;
    let result = async {
        up.put_object_tagging(bucket, key, &tags).await?;
        super::update_object(ctx, |meta| ObjectMeta { tags: tags.clone(), ..meta }).await
    }
    .await;
    super::through::settle(ctx, bucket, key, result).await
}

/// `<Tagging><TagSet><Tag><Key/><Value/></Tag>…</TagSet></Tagging>`.
pub fn parse_tagging(document: &[u8]) -> S3Result<Tags> {
    let malformed = |why: &str| S3Error::with_message(S3ErrorCode::MalformedXML, why.to_owned());
    let root = request::parse(document)?;
    if root.name != "Tagging" {
        return Err(malformed("expected Tagging"));
    }
    let set = root.child("TagSet").ok_or_else(|| malformed("expected TagSet"))?;
    set.children_named("Tag")
        .map(|tag| {
            let key = tag.child_text("Key").ok_or_else(|| malformed("a Tag without a Key"))?;
            let value = tag.child_text("Value").ok_or_else(|| malformed("a Tag without a Value"))?;
            Ok((key.to_owned(), value.to_owned()))
        })
        .collect()
}

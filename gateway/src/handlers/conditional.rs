//! Conditional requests. GET/HEAD follow RFC 7232 precedence as S3 does: If-Match (412), else
//! If-Unmodified-Since (412); then If-None-Match (304), else If-Modified-Since (304). The
//! copy-source variants answer every failure with 412.

use http::HeaderMap;

use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::ObjectMeta;
use crate::time;

fn strip_quotes(s: &str) -> &str {
    let s = s.trim();
    let s = s.strip_prefix("W/").unwrap_or(s);
    s.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(s)
}

/// Whether `etag` (quoted) matches any entry of an If-Match / If-None-Match list.
pub fn etag_matches(list: &str, etag: &str) -> bool {
    let etag = strip_quotes(etag);
    list.split(',').map(strip_quotes).any(|candidate| candidate == "*" || candidate == etag)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Evaluates the four conditional headers (with names `prefix` + `if-match`, …) against an
/// object. `not_modified_code` is NotModified for GET/HEAD and PreconditionFailed for copies.
fn evaluate(
    headers: &HeaderMap,
    prefix: &str,
    meta: &ObjectMeta,
    not_modified_code: S3ErrorCode,
) -> S3Result<()> {
    let etag = meta.etag();
    // HTTP dates have second precision.
    let modified_s = meta.last_modified_ms / 1000;
    let name = |n: &str| format!("{prefix}{n}");
    let if_match = header(headers, &name("if-match"));
    if let Some(list) = if_match {
        if !etag_matches(list, &etag) {
            return Err(S3Error::new(S3ErrorCode::PreconditionFailed));
        }
    } else if let Some(since) = header(headers, &name("if-unmodified-since")).and_then(time::parse_http_date)
    {
        if modified_s > since / 1000 {
            return Err(S3Error::new(S3ErrorCode::PreconditionFailed));
        }
    }
    if let Some(list) = header(headers, &name("if-none-match")) {
        if etag_matches(list, &etag) {
            return Err(S3Error::new(not_modified_code));
        }
    } else if let Some(since) = header(headers, &name("if-modified-since")).and_then(time::parse_http_date) {
        if modified_s <= since / 1000 {
            return Err(S3Error::new(not_modified_code));
        }
    }
    Ok(())
}

/// GET/HEAD preconditions: 412 PreconditionFailed or 304 Not Modified.
pub fn check_get(headers: &HeaderMap, meta: &ObjectMeta) -> S3Result<()> {
    evaluate(headers, "", meta, S3ErrorCode::NotModified)
}

/// `x-amz-copy-source-if-*` preconditions of CopyObject / UploadPartCopy: 412 on failure.
pub fn check_copy_source(headers: &HeaderMap, meta: &ObjectMeta) -> S3Result<()> {
    evaluate(headers, "x-amz-copy-source-", meta, S3ErrorCode::PreconditionFailed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::meta::{BodyRef, ObjectHeaders};
    use http::HeaderValue;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            size: 0,
            md5: [0xab; 16],
            parts: 0,
            last_modified_ms: 1_000_000_500,
            headers: ObjectHeaders::default(),
            checksums: vec![],
            body: BodyRef::Inline(vec![]),
            part_sizes: vec![],
            checksum_type: crate::checksum::ChecksumType::FullObject,
            tags: vec![],
            public_read: false,
        }
    }

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        m
    }

    fn code(r: S3Result<()>) -> Option<S3ErrorCode> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn precedence_follows_rfc7232() {
        let m = meta();
        let etag = m.etag();
        let before = time::http_date(1_000_000_500 - 10_000);
        let after = time::http_date(1_000_000_500 + 10_000);
        assert_eq!(code(check_get(&h(&[("if-match", &etag)]), &m)), None);
        assert_eq!(
            code(check_get(&h(&[("if-match", "\"other\"")]), &m)),
            Some(S3ErrorCode::PreconditionFailed)
        );
        // If-Match true wins over a failing If-Unmodified-Since.
        assert_eq!(code(check_get(&h(&[("if-match", "*"), ("if-unmodified-since", &before)]), &m)), None);
        assert_eq!(
            code(check_get(&h(&[("if-unmodified-since", &before)]), &m)),
            Some(S3ErrorCode::PreconditionFailed)
        );
        assert_eq!(code(check_get(&h(&[("if-none-match", &etag)]), &m)), Some(S3ErrorCode::NotModified));
        // If-None-Match false with If-Modified-Since "not modified": If-None-Match decides.
        assert_eq!(
            code(check_get(&h(&[("if-none-match", "\"x\""), ("if-modified-since", &after)]), &m)),
            None
        );
        assert_eq!(code(check_get(&h(&[("if-modified-since", &after)]), &m)), Some(S3ErrorCode::NotModified));
        assert_eq!(code(check_get(&h(&[("if-modified-since", &before)]), &m)), None);
        assert_eq!(
            code(check_copy_source(&h(&[("x-amz-copy-source-if-none-match", &etag)]), &m)),
            Some(S3ErrorCode::PreconditionFailed)
        );
    }
}

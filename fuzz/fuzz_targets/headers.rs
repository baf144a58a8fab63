//! The header and query values handlers parse: Range and x-amz-copy-source-range against an
//! object size, x-amz-copy-source, the conditional headers (plain and copy-source), HTTP dates,
//! query strings, keys and bucket names. No panic; every refusal is a 4xx (or 304); a range
//! that is accepted lies inside the object.
#![no_main]

use gateway::checksum::ChecksumType;
use gateway::handlers::{conditional, copy, object};
use gateway::storage::meta::{BodyRef, ObjectHeaders, ObjectMeta};
use holt_fuzz::Cursor;
use libfuzzer_sys::fuzz_target;

const CONDITIONAL: [&str; 8] = [
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "x-amz-copy-source-if-match",
    "x-amz-copy-source-if-none-match",
    "x-amz-copy-source-if-modified-since",
    "x-amz-copy-source-if-unmodified-since",
];

fn refused_well(e: &gateway::error::S3Error) {
    let status = e.status();
    assert!(status.is_client_error() || status == http::StatusCode::NOT_MODIFIED, "{:?} ({status})", e.code);
}

fuzz_target!(|data: &[u8]| {
    let mut input = Cursor(data);
    let size = u64::from_le_bytes(
        input.take(8).iter().copied().chain([0; 8]).take(8).collect::<Vec<_>>().try_into().unwrap_or([0; 8]),
    ) >> (input.byte() % 64);
    let last_modified_ms = u64::from(input.u16()) * 1_000_000_000;
    let text = String::from_utf8_lossy(input.rest());
    let mut fields = text.split('\n');
    let mut next = || fields.next().unwrap_or("");

    let range = next();
    match object::parse_range(Some(range), size) {
        Ok(Some(r)) => assert!(
            r.len >= 1 && r.start.checked_add(r.len).is_some_and(|end| end <= size),
            "{r:?} of {size}"
        ),
        Ok(None) => {}
        Err(e) => refused_well(&e),
    }
    match copy::parse_copy_range(Some(range), size) {
        Ok(r) => assert!(
            r.len >= 1 && r.start.checked_add(r.len).is_some_and(|end| end <= size),
            "{r:?} of {size}"
        ),
        Err(e) => refused_well(&e),
    }
    match copy::parse_copy_source(next()) {
        Ok((bucket, key)) => assert!(!bucket.is_empty() && !key.is_empty()),
        Err(e) => refused_well(&e),
    }
    let query = next();
    match gateway::routing::Query::parse(Some(query)) {
        Ok(q) => {
            let _ = q.get("prefix");
        }
        Err(e) => refused_well(&e),
    }
    let name = next();
    let _ = gateway::handlers::bucket::valid_bucket_name(name);
    if let Err(e) = gateway::handlers::check_key(name) {
        refused_well(&e);
    }
    let _ = gateway::handlers::list::url_encode(name);
    let _ = gateway::time::parse_http_date(name);

    let meta = ObjectMeta {
        size,
        md5: [0xab; 16],
        parts: 0,
        last_modified_ms,
        headers: ObjectHeaders::default(),
        checksums: vec![],
        body: BodyRef::Inline(vec![]),
        part_sizes: vec![],
        checksum_type: ChecksumType::FullObject,
        tags: vec![],
        public_read: false,
    };
    let mut headers = http::HeaderMap::new();
    for name in CONDITIONAL {
        let value = next();
        if value.is_empty() {
            continue;
        }
        if let Ok(value) = http::HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
        let _ = conditional::etag_matches(next(), &meta.etag());
    }
    if let Err(e) = conditional::check_get(&headers, &meta) {
        refused_well(&e);
    }
    if let Err(e) = conditional::check_copy_source(&headers, &meta) {
        refused_well(&e);
    }
});

//! The steps of CompleteMultipartUpload between reading the upload and committing the object:
//! checking the listed parts against the stored ones, concatenating them into the object's
//! body, and forming and verifying the object's checksums.
//!
//! Checksums of a multipart object, as AWS forms them (`x-amz-checksum-type`):
//! - COMPOSITE (CRC32, CRC32C, SHA1, SHA256; the default for them): the algorithm over the
//!   concatenated raw part checksums, shown as `base64-N`.
//! - FULL_OBJECT (CRC32, CRC32C, CRC64NVME; the only type for CRC64NVME): the algorithm over
//!   the object's bytes, computed here while the parts are concatenated.

use futures_util::StreamExt;
use md5::{Digest as _, Md5};

use super::multipart::PART_BYTES_MIN;
use super::ReqCtx;
use crate::checksum::{composite_digest, ChecksumAlgo, ChecksumType, Hasher};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BodyRef, ObjectMeta, PartMeta, UploadMeta};
use crate::storage::schema;
use crate::xml::request::CompletedPart;

fn strip_quotes(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(s)
}

fn invalid_part(number: u32, why: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::InvalidPart,
        format!(
            "One or more of the specified parts could not be found or did not match: part {number}: {why}."
        ),
    )
}

/// The stored parts the request lists, in its (ascending) order, as indexes into `stored`.
/// Each must exist with the listed ETag and, where the request gives part checksums, with
/// those checksums; parts of an upload with a checksum algorithm must carry that checksum;
/// every part but the last must be at least 5 MiB.
pub fn choose_parts(
    listed: &[CompletedPart],
    stored: &[(u32, PartMeta)],
    upload_algo: Option<ChecksumAlgo>,
) -> S3Result<Vec<usize>> {
    let mut chosen: Vec<usize> = Vec::with_capacity(listed.len());
    for p in listed {
        let at = stored
            .binary_search_by_key(&p.part_number, |(n, _)| *n)
            .map_err(|_| invalid_part(p.part_number, "no such part"))?;
        let part = &stored[at].1;
        // Decoded and compared as bytes: two allocations a part otherwise, 20,000 for a
        // 10,000-part list.
        let mut listed_md5 = [0u8; 16];
        if hex::decode_to_slice(strip_quotes(&p.etag), &mut listed_md5).is_err() || listed_md5 != part.md5 {
            return Err(invalid_part(p.part_number, "the ETag does not match"));
        }
        for (algo, sent) in &p.checksums {
            let sent = algo.decode_value(sent)?;
            if !part.checksums.iter().any(|(a, v)| a == algo && *v == sent) {
                return Err(invalid_part(
                    p.part_number,
                    &format!("the {} checksum does not match", algo.name()),
                ));
            }
        }
        if let Some(algo) = upload_algo {
            if !part.checksums.iter().any(|(a, _)| *a == algo) {
                return Err(invalid_part(
                    p.part_number,
                    &format!("the part has no {} checksum", algo.name()),
                ));
            }
        }
        chosen.push(at);
    }
    let all_but_last = chosen.len().saturating_sub(1);
    if let Some((i, small)) = chosen
        .iter()
        .map(|&at| &stored[at].1)
        .enumerate()
        .take(all_but_last)
        .find(|(_, m)| m.size < PART_BYTES_MIN)
    {
        return Err(S3Error::with_message(
            S3ErrorCode::EntityTooSmall,
            format!(
                "Part {} is {} bytes; every part but the last must be at least 5 MiB.",
                listed[i].part_number, small.size
            ),
        ));
    }
    Ok(chosen)
}

/// The object's new body and digests.
pub struct Assembled {
    /// Committed to the body store: the caller must name it in a record or remove it.
    pub body: BodyRef,
    /// Total bytes, the sum of the chosen parts' sizes.
    pub size: u64,
    /// MD5 of the concatenated raw part MD5s: the multipart ETag without its `-N`.
    pub md5_of_md5s: [u8; 16],
    /// What the object record stores: the upload's algorithm, full-object or composite.
    pub checksums: Vec<(ChecksumAlgo, Vec<u8>)>,
    /// Full-object checksums computed over the bytes (the stored one when FULL_OBJECT, and any
    /// the client sent for the whole object).
    pub full: Vec<(ChecksumAlgo, Vec<u8>)>,
}

/// Concatenates `chosen` into one new body. `Ok(None)`: a part body has vanished (a concurrent
/// upload replaced the part, or the upload was completed or aborted); nothing is left behind.
/// `chosen` may be summaries (`PartMeta::decode_summary`): an inline body left out is read
/// from its part record (of upload `id`, numbered as in `listed`) when its turn comes.
pub async fn assemble(
    ctx: &ReqCtx,
    upload: &UploadMeta,
    id: &str,
    listed: &[CompletedPart],
    chosen: &[&PartMeta],
    expected: &[(ChecksumAlgo, Vec<u8>)],
) -> S3Result<Option<Assembled>> {
    let mut hashers: Vec<Hasher> = full_algos(upload, expected).into_iter().map(Hasher::new).collect();

    // Dropping the writer on an early return removes its temporary file.
    let mut writer = ctx.store().bodies.writer();
    let mut md5_of_md5s = Md5::new();
    for (listed, part) in listed.iter().zip(chosen) {
        md5_of_md5s.update(part.md5);
        let whole;
        let body = if part.body_omitted() {
            let record = ctx.store().get(schema::part(id, listed.part_number)).await?;
            // Replaced since the summary was read (another body, another ETag): start over.
            let Some(full) = record.and_then(|e| PartMeta::decode(&e.value)).filter(|m| m.md5 == part.md5)
            else {
                return Ok(None);
            };
            whole = full;
            &whole.body
        } else {
            &part.body
        };
        let mut stream = match ctx.store().bodies.read_range(body, 0, part.size).await {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            for h in &mut hashers {
                h.update(&chunk);
            }
            writer.write(&chunk).await?;
        }
    }
    let size = writer.len();
    let body = writer.commit().await?;
    let full: Vec<(ChecksumAlgo, Vec<u8>)> = hashers.into_iter().map(|h| (h.algo(), h.finish())).collect();
    let checksums = object_checksums(upload, chosen, &full);
    Ok(Some(Assembled { body, size, md5_of_md5s: md5_of_md5s.finalize().into(), checksums, full }))
}

/// The algorithms whose full-object values must be computed over the bytes: the upload's
/// when FULL_OBJECT, and any the client sent for the whole object (but the composite one).
fn full_algos(upload: &UploadMeta, expected: &[(ChecksumAlgo, Vec<u8>)]) -> Vec<ChecksumAlgo> {
    let composite_algo = match (upload.checksum_algo, upload.checksum_type) {
        (Some(a), Some(ChecksumType::Composite)) => Some(a),
        _ => None,
    };
    let mut algos: Vec<ChecksumAlgo> = Vec::new();
    if let (Some(a), Some(ChecksumType::FullObject)) = (upload.checksum_algo, upload.checksum_type) {
        algos.push(a);
    }
    algos.extend(expected.iter().map(|(a, _)| *a).filter(|a| Some(*a) != composite_algo));
    algos.sort();
    algos.dedup();
    algos
}

/// What the object record stores: the composite checksum of the parts' checksums, or the
/// upload's full-object one from `full`.
fn object_checksums(
    upload: &UploadMeta,
    chosen: &[&PartMeta],
    full: &[(ChecksumAlgo, Vec<u8>)],
) -> Vec<(ChecksumAlgo, Vec<u8>)> {
    match (upload.checksum_algo, upload.checksum_type) {
        (Some(a), Some(ChecksumType::Composite)) => {
            // `choose_parts` checked that every chosen part carries this checksum.
            let digests = chosen.iter().filter_map(|p| p.checksums.iter().find(|(x, _)| *x == a));
            vec![(a, composite_digest(a, digests.map(|(_, v)| v.as_slice())))]
        }
        (Some(a), Some(ChecksumType::FullObject)) => full.iter().filter(|(x, _)| *x == a).cloned().collect(),
        _ => Vec::new(),
    }
}

/// `assemble` for an upload completed upstream (`stored`: what the upstream reported). The
/// size, ETag and composite checksums come from the part records; full-object checksums, if
/// any are wanted, are computed by reading the completed object back.
pub async fn describe_upstream(
    up: &crate::upstream::Upstream,
    bucket: &str,
    key: &str,
    stored: crate::storage::meta::UpstreamBody,
    upload: &UploadMeta,
    chosen: &[&PartMeta],
    expected: &[(ChecksumAlgo, Vec<u8>)],
) -> S3Result<Assembled> {
    let mut md5_of_md5s = Md5::new();
    for part in chosen {
        md5_of_md5s.update(part.md5);
    }
    let size = chosen.iter().map(|p| p.size).sum();
    let mut hashers: Vec<Hasher> = full_algos(upload, expected).into_iter().map(Hasher::new).collect();
    if !hashers.is_empty() {
        let mut body = up.get_object(bucket, key, None, &stored.etag).await?;
        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
            let frame = frame.map_err(|e| {
                S3Error::with_message(
                    S3ErrorCode::ServiceUnavailable,
                    format!("Reading the completed object back failed: {e}"),
                )
            })?;
            if let Some(data) = frame.data_ref() {
                for h in &mut hashers {
                    h.update(data);
                }
            }
        }
    }
    let full: Vec<(ChecksumAlgo, Vec<u8>)> = hashers.into_iter().map(|h| (h.algo(), h.finish())).collect();
    let checksums = object_checksums(upload, chosen, &full);
    Ok(Assembled {
        body: BodyRef::Upstream(stored),
        size,
        md5_of_md5s: md5_of_md5s.finalize().into(),
        checksums,
        full,
    })
}

/// Compares the checksums the client sent for the whole object with ours: a composite value
/// with the stored composite checksum, anything else with the full-object value. Mismatch →
/// BadDigest.
pub fn verify_object_checksums(
    meta: &ObjectMeta,
    expected: &[(ChecksumAlgo, Vec<u8>)],
    full: &[(ChecksumAlgo, Vec<u8>)],
) -> S3Result<()> {
    for (algo, want) in expected {
        let composite = (meta.checksum_type == ChecksumType::Composite)
            .then(|| meta.checksums.iter().find(|(a, _)| a == algo))
            .flatten();
        let actual = composite.or_else(|| full.iter().find(|(a, _)| a == algo)).map(|(_, v)| v);
        if actual != Some(want) {
            return Err(S3Error::with_message(
                S3ErrorCode::BadDigest,
                format!("The {} you specified did not match the calculated checksum.", algo.name()),
            ));
        }
    }
    Ok(())
}

//! The key schema: every record the gateway keeps in holt-core, in one place.
//!
//! | key                                         | value                       |
//! |---------------------------------------------|-----------------------------|
//! | `S` `token-secret`                          | 32 random bytes (token MAC) |
//! | `S` `header-fill-cursors`                   | empty: `H` records are kept |
//! | `B` bucket                                  | `BucketMeta`                |
//! | `A` owner `\0` bucket                       | empty (buckets by owner)    |
//! | `O` bucket `\0` key                         | `ObjectMeta`                |
//! | `U` bucket `\0` key `\0` upload-id          | `UploadMeta`                |
//! | `P` upload-id `\0` part-number (u32, BE)    | `PartMeta`                  |
//! | `I` bucket `\0` key                         | empty: an upstream write in progress |
//! | `X` bucket                                  | import cursor: the last key imported |
//! | `H` bucket                                  | header fill cursor: the last key filled |
//!
//! Invariants: bucket names never contain `\0` (they are `[a-z0-9.-]`), access keys never
//! contain `\0` (refused when configured), and upload ids are exactly `UPLOAD_ID_LEN` hex
//! characters, so every key parses back unambiguously even though object keys may contain any
//! byte. Objects of a bucket are contiguous, in the byte order of their keys, so an S3 listing
//! is one `Db::list` under `objects_prefix(bucket) + client prefix`. Part numbers are
//! big-endian so that byte order is numeric order.

/// Length of an upload id (hex of 16 random bytes).
pub const UPLOAD_ID_LEN: usize = 32;

/// Upstream mode: the intent record written before an object's upstream write and removed
/// after its index record commits. One left behind by a crash names a key whose index record
/// may disagree with the upstream: start-up repairs it.
pub fn intent(bucket: &str, key: &str) -> Vec<u8> {
    join(b'I', &[bucket.as_bytes(), key.as_bytes()])
}

/// Prefix of every intent record.
pub const INTENTS_PREFIX: &[u8] = b"I";

/// Splits an intent record key into bucket and object key.
pub fn split_intent(k: &[u8]) -> Option<(&str, &str)> {
    let rest = k.strip_prefix(INTENTS_PREFIX)?;
    let at = rest.iter().position(|&b| b == 0)?;
    Some((std::str::from_utf8(&rest[..at]).ok()?, std::str::from_utf8(&rest[at + 1..]).ok()?))
}

/// Upstream mode: the import record of a bucket being imported; removed when the import
/// finishes. Its value is `D` and the last entry of the top-level listing recorded while the
/// import discovers the bucket's top-level keys and prefixes, `P` once it has (see
/// `handlers::through::import`).
pub fn import_cursor(bucket: &str) -> Vec<u8> {
    join(b'X', &[bucket.as_bytes()])
}

/// Upstream mode: the cursor of one prefix of a bucket being imported (top-level, or split off
/// one; the last key under it indexed, empty before the first page); removed when the prefix
/// is done or split.
pub fn import_prefix_cursor(bucket: &str, prefix: &str) -> Vec<u8> {
    join(b'X', &[bucket.as_bytes(), prefix.as_bytes()])
}

/// Prefix of every [`import_prefix_cursor`] of `bucket`.
pub fn import_prefix_cursors(bucket: &str) -> Vec<u8> {
    join(b'X', &[bucket.as_bytes(), b""])
}

/// Prefix of every import record and prefix cursor.
pub const IMPORTS_PREFIX: &[u8] = b"X";

/// Upstream mode: the header fill record of a bucket whose import finished (written in the
/// batch that removes the import record) while records it made from the listing may still
/// wait for their content headers. Its value is the last object key the fill went past
/// (empty before its first page); removed when the fill reaches the bucket's end, so a
/// restart resumes only the fills left, each from where it was.
pub fn header_fill_cursor(bucket: &str) -> Vec<u8> {
    join(b'H', &[bucket.as_bytes()])
}

/// Prefix of every [`header_fill_cursor`].
pub const HEADER_FILLS_PREFIX: &[u8] = b"H";

/// Present once the header fills are tracked by [`header_fill_cursor`] records: a database
/// from before them gets a record for every bucket at its first start (one pass each).
pub const HEADER_FILL_CURSORS_KEPT: &[u8] = b"Sheader-fill-cursors";

/// Key of the record holding the continuation-token secret, created on first start.
pub const TOKEN_SECRET: &[u8] = b"Stoken-secret";

fn join(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let len = 1 + parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut k = Vec::with_capacity(len);
    k.push(tag);
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.push(0);
        }
        k.extend_from_slice(p);
    }
    k
}

/// Key of the `BucketMeta` record of `bucket`: `B` bucket.
pub fn bucket(bucket: &str) -> Vec<u8> {
    join(b'B', &[bucket.as_bytes()])
}

/// Prefix of every bucket record.
pub const BUCKETS_PREFIX: &[u8] = b"B";

/// The bucket a bucket record's key names; `None` unless it starts with `B` and is UTF-8.
pub fn bucket_name_from_key(key: &[u8]) -> Option<&str> {
    key.strip_prefix(BUCKETS_PREFIX).and_then(|b| std::str::from_utf8(b).ok())
}

/// Key of the index entry saying `owner` owns `bucket`: `A` owner `\0` bucket.
pub fn owned_bucket(owner: &str, bucket: &str) -> Vec<u8> {
    join(b'A', &[owner.as_bytes(), bucket.as_bytes()])
}

/// Prefix of the bucket-by-owner index entries of `owner`.
pub fn owned_buckets_prefix(owner: &str) -> Vec<u8> {
    join(b'A', &[owner.as_bytes(), b""])
}

/// Key of the `ObjectMeta` record of `bucket/key`: `O` bucket `\0` key.
pub fn object(bucket: &str, key: &str) -> Vec<u8> {
    join(b'O', &[bucket.as_bytes(), key.as_bytes()])
}

/// Prefix of every object record of `bucket`; strip it to get the S3 key back.
pub fn objects_prefix(bucket: &str) -> Vec<u8> {
    join(b'O', &[bucket.as_bytes(), b""])
}

/// Key of the `UploadMeta` record of an upload: `U` bucket `\0` key `\0` upload-id.
pub fn upload(bucket: &str, key: &str, upload_id: &str) -> Vec<u8> {
    join(b'U', &[bucket.as_bytes(), key.as_bytes(), upload_id.as_bytes()])
}

/// The greatest record key an upload of `key` can have (upload ids are lowercase hex, so
/// `f…f` is the largest): resuming after it skips every upload of `key` and nothing else
/// whose key does not start with `key \0`.
pub fn last_upload_of_key(bucket: &str, key: &str) -> Vec<u8> {
    upload(bucket, key, &"f".repeat(UPLOAD_ID_LEN))
}

/// Prefix of every upload record of `bucket`, in object-key order.
pub fn uploads_prefix(bucket: &str) -> Vec<u8> {
    join(b'U', &[bucket.as_bytes(), b""])
}

/// Splits a full upload record key (with `uploads_prefix(bucket)` already stripped) into the
/// object key and the upload id.
pub fn split_upload_suffix(rest: &[u8]) -> Option<(&[u8], &str)> {
    if rest.len() < UPLOAD_ID_LEN + 1 {
        return None;
    }
    let (key, tail) = rest.split_at(rest.len() - UPLOAD_ID_LEN - 1);
    if tail[0] != 0 {
        return None;
    }
    Some((key, std::str::from_utf8(&tail[1..]).ok()?))
}

/// Key of the `PartMeta` record of part `part_number`: `P` upload-id `\0` number (u32 BE).
#[expect(clippy::big_endian_bytes, reason = "part numbers sort numerically only in big-endian")]
pub fn part(upload_id: &str, part_number: u32) -> Vec<u8> {
    let mut k = join(b'P', &[upload_id.as_bytes(), b""]);
    k.extend_from_slice(&part_number.to_be_bytes());
    k
}

/// Prefix of every part record of an upload, in part-number order.
pub fn parts_prefix(upload_id: &str) -> Vec<u8> {
    join(b'P', &[upload_id.as_bytes(), b""])
}

/// The part number of a part record key (its last four bytes); `None` only for a key
/// shorter than that.
#[expect(clippy::big_endian_bytes, reason = "part numbers sort numerically only in big-endian")]
pub fn part_number_from_key(key: &[u8]) -> Option<u32> {
    let tail: [u8; 4] = key.get(key.len().checked_sub(4)?..)?.try_into().ok()?;
    Some(u32::from_be_bytes(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_sort_like_s3_keys_within_a_bucket() {
        let a = object("b", "foo+1/x");
        let b = object("b", "foo/x");
        assert!(a < b, "byte order of the whole key");
        assert!(object("b", "zzz") < object("b0", ""), "buckets do not interleave");
        assert!(object("b", "k").starts_with(&objects_prefix("b")));
    }

    #[test]
    fn upload_keys_split_back() {
        let id = "0123456789abcdef0123456789abcdef";
        let k = upload("b", "a\0b", id);
        let rest = &k[uploads_prefix("b").len()..];
        assert_eq!(split_upload_suffix(rest), Some((&b"a\0b"[..], id)));
    }

    #[test]
    fn last_upload_of_key_bounds_exactly_that_keys_uploads() {
        let last = last_upload_of_key("b", "a");
        assert!(upload("b", "a", "ffffffffffffffffffffffffffffffff") <= last);
        assert!(upload("b", "a", "0123456789abcdef0123456789abcdef") < last);
        assert!(upload("b", "ab", "00000000000000000000000000000000") > last);
        assert!(upload("b", "a ", "00000000000000000000000000000000") > last);
    }

    #[test]
    fn part_numbers_sort_numerically() {
        assert!(part("u", 9) < part("u", 10));
        assert!(part("u", 255) < part("u", 256));
        assert_eq!(part_number_from_key(&part("u", 10000)), Some(10000));
    }
}

//! Test data: deterministic payloads, MD5s, and keys that break naive servers.

use md5::{Digest, Md5};
use std::path::Path;

/// Bytes of a payload derived from `seed`: the same seed always gives the same bytes, so a
/// failure replays exactly. (xorshift64*: fast, and not compressible by accident.)
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A seed for this run: `HOLT_COMPAT_SEED` if set (to replay), else derived from the clock.
/// Callers print it.
pub fn run_seed() -> u64 {
    if let Some(seed) = std::env::var("HOLT_COMPAT_SEED").ok().and_then(|s| s.parse().ok()) {
        return seed;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

/// The MD5 of `bytes` as 32 lowercase hex digits: a single-part upload's ETag (unquoted).
pub fn md5_hex(bytes: &[u8]) -> String {
    let digest = Md5::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The multipart ETag S3 computes: md5 of the concatenated binary part MD5s, then `-N`.
pub fn multipart_etag(bytes: &[u8], part_size: usize) -> String {
    let mut concat = Vec::new();
    let mut parts = 0;
    for chunk in bytes.chunks(part_size) {
        concat.extend_from_slice(&Md5::digest(chunk));
        parts += 1;
    }
    format!("{}-{parts}", md5_hex(&concat))
}

/// Write a file and panic with its path if that fails.
pub fn write_file(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
    }
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Read a whole file and panic with its path if that fails.
pub fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Compare downloaded bytes without dumping megabytes into the failure message.
pub fn same_bytes(actual: &[u8], expected: &[u8]) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!("length {} != expected {}", actual.len(), expected.len()));
    }
    match actual.iter().zip(expected).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(at) => Err(format!(
            "first differing byte at offset {at} (md5 {} != {})",
            md5_hex(actual),
            md5_hex(expected)
        )),
    }
}

/// Keys that break servers that build paths, parse query strings or XML by hand.
/// Each is uploaded with a body equal to its own UTF-8 bytes, except the `dir/` marker which is
/// zero bytes long.
pub const TRICKY_KEYS: &[&str] = &[
    "with space/file name.txt",
    "plus+sign/a+b=c.txt",
    "percent%2F/100%.txt",
    "amp&ersand/a&b=c&d",
    "angle<bracket>/x<y>z",
    "quotes\"and'apostrophes/it's \"here\"",
    "utf8/h\u{e9}llo/\u{65e5}\u{672c}\u{8a9e}/\u{1f600}.txt",
    "double//slash/x",
    "dots/../up/./here",
    "question?mark#hash",
];

/// The zero-byte directory marker.
pub const DIR_MARKER_KEY: &str = "marker-dir/";

/// A key of exactly `len` bytes under `prefix`, padded with `k`.
pub fn key_of_len(prefix: &str, len: usize) -> String {
    assert!(prefix.len() <= len, "prefix longer than the key");
    let mut key = prefix.to_string();
    key.extend(std::iter::repeat_n('k', len - prefix.len()));
    key
}

/// The longest legal key: 1024 bytes, `long/` then segments of 200 `k`s (file-backed stores
/// such as MinIO refuse a path segment over 255 bytes; S3 has no such rule).
pub fn longest_key() -> String {
    segmented_key(1024)
}

/// A key of 1025 bytes, one past S3's limit, which the gateway must refuse.
pub fn too_long_key() -> String {
    segmented_key(1025)
}

fn segmented_key(len: usize) -> String {
    let mut key = String::from("long/");
    while key.len() < len {
        // A `/` after every 200 `k`s, never as the last byte (that would be a folder marker).
        let boundary = (key.len() - 5) % 201 == 200 && key.len() + 1 < len;
        key.push(if boundary { '/' } else { 'k' });
    }
    key
}

/// Whether MinIO refuses `key` as an object name (it keeps objects as files): a leading `/`,
/// an empty, `.` or `..` path segment, a segment over 255 bytes, or a NUL.
pub fn minio_refuses(key: &str) -> bool {
    key.starts_with('/')
        || key.contains("//")
        || key.contains('\0')
        || key.split(['/', '\\']).any(|seg| matches!(seg.trim(), "." | "..") || seg.len() > 255)
}

/// [`TRICKY_KEYS`] the gateway's deployment can store: all of them standalone; in front of
/// MinIO, those MinIO accepts (`tests/upstream_minio.rs` checks the others are refused with
/// 400 and leave nothing behind).
pub fn tricky_keys(gw: &crate::gateway::Gateway) -> Vec<&'static str> {
    TRICKY_KEYS.iter().copied().filter(|k| gw.upstream().is_none() || !minio_refuses(k)).collect()
}

/// Keys for the pagination tests: `count` keys spread over a few prefixes so both recursive and
/// delimited listings have something to page through.
pub fn pagination_keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("page/{:02}/obj-{i:05}", i % 7)).collect()
}

/// A small tree for root / prefix / recursive listings. Bodies are the keys' bytes.
pub const TREE_KEYS: &[&str] = &["top.txt", "tree/a.txt", "tree/sub/b.txt", "tree/sub/deeper/c.txt"];

/// Sort keys the way S3 lists them: by UTF-8 bytes (Rust's `str` order is exactly that).
pub fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys
}

/// Write each key's body (its own bytes) under `dir`, using the key as the relative path.
/// Only for keys that are valid relative file paths.
pub fn write_tree(dir: &Path, keys: &[String]) {
    for key in keys {
        write_file(&dir.join(key), key.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_rfc1321_vectors() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn multipart_etag_is_md5_of_part_digests() {
        let body = payload(7, 10);
        let mut concat = Vec::new();
        concat.extend_from_slice(&Md5::digest(&body[..4]));
        concat.extend_from_slice(&Md5::digest(&body[4..8]));
        concat.extend_from_slice(&Md5::digest(&body[8..]));
        assert_eq!(multipart_etag(&body, 4), format!("{}-3", md5_hex(&concat)));
    }

    #[test]
    fn payload_is_deterministic_per_seed() {
        assert_eq!(payload(42, 1000), payload(42, 1000));
        assert_ne!(payload(42, 1000), payload(43, 1000));
        assert_eq!(payload(1, 13).len(), 13);
    }

    #[test]
    fn key_lengths_straddle_the_limit() {
        assert_eq!(longest_key().len(), 1024);
        assert_eq!(too_long_key().len(), 1025);
        for key in [longest_key(), too_long_key()] {
            assert!(!key.ends_with('/') && key.split('/').all(|seg| !seg.is_empty() && seg.len() <= 255));
        }
        assert!(!minio_refuses(&longest_key()));
        // Multi-byte keys are measured in UTF-8 bytes.
        assert!(TRICKY_KEYS.iter().any(|k| k.len() > k.chars().count()));
    }

    #[test]
    fn minio_refuses_what_a_file_system_cannot_name() {
        for bad in ["double//slash/x", "dots/../up/./here", "/lead", "a/./b", &"k".repeat(256)] {
            assert!(minio_refuses(bad), "{bad}");
        }
        for good in ["with space/file name.txt", "a.b/..c/d..", "marker-dir/", &"k".repeat(255)] {
            assert!(!minio_refuses(good), "{good}");
        }
    }

    #[test]
    fn same_bytes_reports_the_first_difference() {
        assert!(same_bytes(b"abc", b"abc").is_ok());
        let err = same_bytes(b"abd", b"abc").err().unwrap_or_default();
        assert!(err.contains("offset 2"), "{err}");
        assert!(same_bytes(b"ab", b"abc").is_err());
    }
}

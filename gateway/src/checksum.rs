//! The `x-amz-checksum-*` algorithms: computed over every uploaded body, verified against the
//! values the client sent (in headers or aws-chunked trailers), stored, and returned with
//! `x-amz-checksum-mode: ENABLED`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use sha1::Digest as _;

use crate::error::{S3Error, S3ErrorCode, S3Result};

/// An `x-amz-checksum-*` algorithm. The variant order gives `code`, which is stored in object,
/// part and upload records: append new variants, never reorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChecksumAlgo {
    /// CRC-32 (ISO-HDLC polynomial, as zlib), 4 bytes.
    Crc32,
    /// CRC-32C (Castagnoli), 4 bytes.
    Crc32c,
    /// CRC-64/NVME, 8 bytes; a multipart upload can only have it as a full-object checksum.
    Crc64Nvme,
    /// SHA-1, 20 bytes.
    Sha1,
    /// SHA-256, 32 bytes.
    Sha256,
}

/// Every algorithm, in `code` order (the order responses list checksums in).
pub const ALL_ALGOS: [ChecksumAlgo; 5] = [
    ChecksumAlgo::Crc32,
    ChecksumAlgo::Crc32c,
    ChecksumAlgo::Crc64Nvme,
    ChecksumAlgo::Sha1,
    ChecksumAlgo::Sha256,
];

impl ChecksumAlgo {
    /// The lower-case header name, `x-amz-checksum-<algo>`.
    pub fn header(self) -> &'static str {
        match self {
            ChecksumAlgo::Crc32 => "x-amz-checksum-crc32",
            ChecksumAlgo::Crc32c => "x-amz-checksum-crc32c",
            ChecksumAlgo::Crc64Nvme => "x-amz-checksum-crc64nvme",
            ChecksumAlgo::Sha1 => "x-amz-checksum-sha1",
            ChecksumAlgo::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// The name used by `x-amz-checksum-algorithm` and the XML `Checksum*` elements.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgo::Crc32 => "CRC32",
            ChecksumAlgo::Crc32c => "CRC32C",
            ChecksumAlgo::Crc64Nvme => "CRC64NVME",
            ChecksumAlgo::Sha1 => "SHA1",
            ChecksumAlgo::Sha256 => "SHA256",
        }
    }

    /// The algorithm `name` names (`CRC32`, `sha256`, ...; any case), as in
    /// `x-amz-checksum-algorithm` or `x-amz-sdk-checksum-algorithm`.
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_ALGOS.into_iter().find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// The algorithm whose `x-amz-checksum-<algo>` header (or trailer) is `name`, any case.
    pub fn from_header(name: &str) -> Option<Self> {
        ALL_ALGOS.into_iter().find(|a| a.header().eq_ignore_ascii_case(name))
    }

    /// The byte stored for this algorithm in metadata records (0 for CRC32 up to 4 for SHA256).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The algorithm of a stored `code`; `None` for an unknown byte (a corrupt record).
    pub fn from_code(code: u8) -> Option<Self> {
        ALL_ALGOS.into_iter().find(|a| a.code() == code)
    }

    fn digest_len(self) -> usize {
        match self {
            ChecksumAlgo::Crc32 | ChecksumAlgo::Crc32c => 4,
            ChecksumAlgo::Crc64Nvme => 8,
            ChecksumAlgo::Sha1 => 20,
            ChecksumAlgo::Sha256 => 32,
        }
    }

    /// Decodes a client-sent base64 value; a value that is not base64 of the right length is
    /// `InvalidDigest` (AWS: "Value for x-amz-checksum-… header is invalid").
    pub fn decode_value(self, value: &str) -> S3Result<Vec<u8>> {
        match B64.decode(value.trim()) {
            Ok(raw) if raw.len() == self.digest_len() => Ok(raw),
            _ => Err(S3Error::with_message(
                S3ErrorCode::InvalidDigest,
                format!("Value for {} header is invalid.", self.header()),
            )),
        }
    }
}

/// How the checksum of a multipart object is formed (`x-amz-checksum-type`).
///
/// - `FullObject`: the algorithm over the object's bytes, as for a single-part upload.
/// - `Composite`: the algorithm over the concatenated raw part checksums (in part order),
///   shown as `base64(digest)-N` with N the part count, as AWS does.
///
/// AWS allows COMPOSITE for CRC32, CRC32C, SHA1 and SHA256 (the default for them) and
/// FULL_OBJECT for CRC32, CRC32C and CRC64NVME (the only type CRC64NVME supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChecksumType {
    /// The algorithm over the whole object's bytes (`FULL_OBJECT`).
    FullObject,
    /// The algorithm over the part checksums (`COMPOSITE`), shown with `-N`.
    Composite,
}

impl ChecksumType {
    /// The name in `x-amz-checksum-type` and the XML `ChecksumType` element.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumType::FullObject => "FULL_OBJECT",
            ChecksumType::Composite => "COMPOSITE",
        }
    }

    /// The type `name` names (`FULL_OBJECT` or `COMPOSITE`, any case, whitespace trimmed).
    pub fn from_name(name: &str) -> Option<Self> {
        [ChecksumType::FullObject, ChecksumType::Composite]
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The byte stored for this type in object and upload records: 0 full object, 1 composite
    /// (never reorder the variants).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The type of a stored `code`; `None` for an unknown byte (a corrupt record).
    pub fn from_code(code: u8) -> Option<Self> {
        [ChecksumType::FullObject, ChecksumType::Composite].into_iter().find(|t| t.code() == code)
    }
}

impl ChecksumAlgo {
    /// The type a multipart upload gets when the client names none.
    pub fn default_multipart_type(self) -> ChecksumType {
        match self {
            ChecksumAlgo::Crc64Nvme => ChecksumType::FullObject,
            _ => ChecksumType::Composite,
        }
    }

    /// Whether AWS accepts this algorithm with this multipart checksum type.
    pub fn supports(self, t: ChecksumType) -> bool {
        matches!(
            (self, t),
            (ChecksumAlgo::Crc32 | ChecksumAlgo::Crc32c, _)
                | (ChecksumAlgo::Crc64Nvme, ChecksumType::FullObject)
                | (ChecksumAlgo::Sha1 | ChecksumAlgo::Sha256, ChecksumType::Composite)
        )
    }
}

/// The raw composite checksum: `algo` over the concatenation of the raw part digests.
pub fn composite_digest<'a>(algo: ChecksumAlgo, part_digests: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut h = Hasher::new(algo);
    for d in part_digests {
        h.update(d);
    }
    h.finish()
}

/// The text form of a stored checksum: plain base64, or `base64-N` for a composite checksum
/// of an N-part object.
pub fn display_value(raw: &[u8], composite_parts: Option<u32>) -> String {
    match composite_parts {
        Some(n) => format!("{}-{n}", B64.encode(raw)),
        None => B64.encode(raw),
    }
}

/// A raw digest in base64, as the `x-amz-checksum-*` headers and XML elements carry it.
pub fn encode_value(raw: &[u8]) -> String {
    B64.encode(raw)
}

/// A running checksum.
pub enum Hasher {
    /// Running CRC-32.
    Crc32(crc32fast::Hasher),
    /// The CRC-32C of the bytes so far.
    Crc32c(u32),
    /// Running CRC-64/NVME.
    Crc64Nvme(crc64fast_nvme::Digest),
    /// Running SHA-1.
    Sha1(sha1::Sha1),
    /// Running SHA-256.
    Sha256(sha2::Sha256),
}

impl Hasher {
    /// A checksum of no bytes yet.
    pub fn new(algo: ChecksumAlgo) -> Self {
        match algo {
            ChecksumAlgo::Crc32 => Hasher::Crc32(crc32fast::Hasher::new()),
            ChecksumAlgo::Crc32c => Hasher::Crc32c(0),
            ChecksumAlgo::Crc64Nvme => Hasher::Crc64Nvme(crc64fast_nvme::Digest::new()),
            ChecksumAlgo::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            ChecksumAlgo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }

    /// The algorithm this hasher computes.
    pub fn algo(&self) -> ChecksumAlgo {
        match self {
            Hasher::Crc32(_) => ChecksumAlgo::Crc32,
            Hasher::Crc32c(_) => ChecksumAlgo::Crc32c,
            Hasher::Crc64Nvme(_) => ChecksumAlgo::Crc64Nvme,
            Hasher::Sha1(_) => ChecksumAlgo::Sha1,
            Hasher::Sha256(_) => ChecksumAlgo::Sha256,
        }
    }

    /// Feeds the next bytes of the body.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(data),
            Hasher::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            Hasher::Crc64Nvme(h) => h.write(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    /// The raw digest bytes (CRCs big-endian, as AWS encodes them).
    #[expect(clippy::big_endian_bytes, reason = "AWS transmits CRC checksums in big-endian byte order")]
    pub fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Crc32(h) => h.finalize().to_be_bytes().to_vec(),
            Hasher::Crc32c(c) => c.to_be_bytes().to_vec(),
            Hasher::Crc64Nvme(h) => h.sum64().to_be_bytes().to_vec(),
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(algo: ChecksumAlgo, data: &[u8]) -> String {
        let mut h = Hasher::new(algo);
        h.update(data);
        encode_value(&h.finish())
    }

    #[test]
    fn known_answers() {
        // Reference values: CRC32("123456789") = 0xCBF43926, CRC32C = 0xE3069283,
        // CRC64/NVME = 0xAE8B14860A799888.
        assert_eq!(b64(ChecksumAlgo::Crc32, b"123456789"), encode_value(&[0xCB, 0xF4, 0x39, 0x26]));
        assert_eq!(b64(ChecksumAlgo::Crc32c, b"123456789"), encode_value(&[0xE3, 0x06, 0x92, 0x83]));
        assert_eq!(
            b64(ChecksumAlgo::Crc64Nvme, b"123456789"),
            encode_value(&[0xAE, 0x8B, 0x14, 0x86, 0x0A, 0x79, 0x98, 0x88])
        );
        assert_eq!(b64(ChecksumAlgo::Sha256, b""), "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
        assert_eq!(b64(ChecksumAlgo::Sha1, b""), "2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
    }

    #[test]
    fn incremental_equals_one_shot() {
        for algo in ALL_ALGOS {
            let mut h = Hasher::new(algo);
            h.update(b"hello ");
            h.update(b"world");
            assert_eq!(encode_value(&h.finish()), b64(algo, b"hello world"), "{algo:?}");
        }
    }

    #[test]
    fn composite_is_the_checksum_of_the_part_checksums() {
        let p1 = {
            let mut h = Hasher::new(ChecksumAlgo::Crc32);
            h.update(b"part one");
            h.finish()
        };
        let p2 = {
            let mut h = Hasher::new(ChecksumAlgo::Crc32);
            h.update(b"part two");
            h.finish()
        };
        let mut cat = p1.clone();
        cat.extend_from_slice(&p2);
        let expected = b64(ChecksumAlgo::Crc32, &cat);
        let got = composite_digest(ChecksumAlgo::Crc32, [p1.as_slice(), p2.as_slice()]);
        assert_eq!(display_value(&got, Some(2)), format!("{expected}-2"));
        assert_eq!(display_value(&got, None), expected);
    }

    #[test]
    fn checksum_types_per_algorithm() {
        assert!(!ChecksumAlgo::Sha256.supports(ChecksumType::FullObject));
        assert!(!ChecksumAlgo::Crc64Nvme.supports(ChecksumType::Composite));
        assert!(ChecksumAlgo::Crc32c.supports(ChecksumType::FullObject));
        assert_eq!(ChecksumAlgo::Crc64Nvme.default_multipart_type(), ChecksumType::FullObject);
        assert_eq!(ChecksumAlgo::Sha1.default_multipart_type(), ChecksumType::Composite);
        assert_eq!(ChecksumType::from_name("full_object"), Some(ChecksumType::FullObject));
        assert_eq!(ChecksumType::from_code(ChecksumType::Composite.code()), Some(ChecksumType::Composite));
    }

    #[test]
    fn decode_rejects_wrong_length() {
        assert_eq!(ChecksumAlgo::Crc32.decode_value("AAAA").unwrap_err().code, S3ErrorCode::InvalidDigest);
        assert_eq!(ChecksumAlgo::Crc32.decode_value("!!!").unwrap_err().code, S3ErrorCode::InvalidDigest);
        assert_eq!(ChecksumAlgo::Crc32.decode_value("y/Q5Jg==").unwrap(), vec![0xCB, 0xF4, 0x39, 0x26]);
    }
}

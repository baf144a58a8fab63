//! Value codecs for the records of `schema.rs`. Compact, versioned binary: a leading format
//! byte, then fields in a fixed order, integers as LEB128 varints, strings and byte strings
//! length-prefixed. Every decoder checks bounds and returns `None` on malformed bytes (the
//! caller reports corruption), never panics.

use crate::checksum::ChecksumAlgo;

const FORMAT_V1: u8 = 1;

/// 16 random bytes naming a body file. Never derived from a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BodyId(pub [u8; 16]);

impl BodyId {
    pub fn random() -> Self {
        BodyId(rand::random())
    }
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 16];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(BodyId(out))
    }
}

/// Where a body lives: small bodies are kept inside the metadata value (no file, no extra
/// fsyncs); larger ones in the body store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyRef {
    Inline(Vec<u8>),
    File(BodyId),
}

impl BodyRef {
    pub fn file_id(&self) -> Option<BodyId> {
        match self {
            BodyRef::File(id) => Some(*id),
            BodyRef::Inline(_) => None,
        }
    }
}

/// The standard headers S3 stores with an object and returns on GET/HEAD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectHeaders {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub content_disposition: Option<String>,
    pub cache_control: Option<String>,
    pub expires: Option<String>,
    /// `x-amz-meta-*`, names lower-cased without the prefix, in request order.
    pub user_meta: Vec<(String, String)>,
    pub storage_class: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub size: u64,
    /// MD5 of the body (single part) or of the concatenated part MD5s (multipart).
    pub md5: [u8; 16],
    /// 0 for a single-part object; otherwise the number of parts, and `part_sizes` has them.
    pub parts: u32,
    pub last_modified_ms: u64,
    pub headers: ObjectHeaders,
    pub checksums: Vec<(ChecksumAlgo, Vec<u8>)>,
    pub body: BodyRef,
    pub part_sizes: Vec<u64>,
}

impl ObjectMeta {
    /// The quoted ETag.
    pub fn etag(&self) -> String {
        if self.parts == 0 {
            format!("\"{}\"", hex::encode(self.md5))
        } else {
            format!("\"{}-{}\"", hex::encode(self.md5), self.parts)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketMeta {
    pub owner: String,
    pub created_ms: u64,
    pub location: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadMeta {
    pub initiated_ms: u64,
    pub headers: ObjectHeaders,
    pub checksum_algo: Option<ChecksumAlgo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartMeta {
    pub size: u64,
    pub md5: [u8; 16],
    pub last_modified_ms: u64,
    pub checksums: Vec<(ChecksumAlgo, Vec<u8>)>,
    pub body: BodyRef,
}

impl PartMeta {
    pub fn etag(&self) -> String {
        format!("\"{}\"", hex::encode(self.md5))
    }
}

struct Enc(Vec<u8>);

impl Enc {
    fn new() -> Self {
        Enc(vec![FORMAT_V1])
    }
    fn u64(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn opt_str(&mut self, s: &Option<String>) {
        match s {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.bytes(s.as_bytes());
            }
        }
    }
    fn headers(&mut self, h: &ObjectHeaders) {
        for s in [
            &h.content_type,
            &h.content_encoding,
            &h.content_language,
            &h.content_disposition,
            &h.cache_control,
            &h.expires,
            &h.storage_class,
        ] {
            self.opt_str(s);
        }
        self.u64(h.user_meta.len() as u64);
        for (k, v) in &h.user_meta {
            self.bytes(k.as_bytes());
            self.bytes(v.as_bytes());
        }
    }
    fn checksums(&mut self, c: &[(ChecksumAlgo, Vec<u8>)]) {
        self.u64(c.len() as u64);
        for (algo, v) in c {
            self.0.push(algo.code());
            self.bytes(v);
        }
    }
    fn body(&mut self, b: &BodyRef) {
        match b {
            BodyRef::Inline(data) => {
                self.0.push(0);
                self.bytes(data);
            }
            BodyRef::File(id) => {
                self.0.push(1);
                self.0.extend_from_slice(&id.0);
            }
        }
    }
}

struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn start(b: &'a [u8]) -> Option<Self> {
        let (&v, rest) = b.split_first()?;
        (v == FORMAT_V1).then_some(Dec(rest))
    }
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        // A u64 needs at most 10 varint bytes: a bound on this loop.
        for i in 0..10 {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).checked_shl(7 * i)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(a)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
    fn opt_str(&mut self) -> Option<Option<String>> {
        match self.byte()? {
            0 => Some(None),
            1 => Some(Some(self.string()?)),
            _ => None,
        }
    }
    fn headers(&mut self) -> Option<ObjectHeaders> {
        let content_type = self.opt_str()?;
        let content_encoding = self.opt_str()?;
        let content_language = self.opt_str()?;
        let content_disposition = self.opt_str()?;
        let cache_control = self.opt_str()?;
        let expires = self.opt_str()?;
        let storage_class = self.opt_str()?;
        let n = self.u64()?;
        // Each pair takes at least two bytes: a length bound that rejects absurd counts.
        if n > self.0.len() as u64 {
            return None;
        }
        let mut user_meta = Vec::with_capacity(n as usize);
        for _ in 0..n {
            user_meta.push((self.string()?, self.string()?));
        }
        Some(ObjectHeaders {
            content_type,
            content_encoding,
            content_language,
            content_disposition,
            cache_control,
            expires,
            user_meta,
            storage_class,
        })
    }
    fn checksums(&mut self) -> Option<Vec<(ChecksumAlgo, Vec<u8>)>> {
        let n = self.u64()?;
        if n > 5 {
            return None;
        }
        let mut out = Vec::new();
        for _ in 0..n {
            let algo = ChecksumAlgo::from_code(self.byte()?)?;
            out.push((algo, self.bytes()?.to_vec()));
        }
        Some(out)
    }
    fn body(&mut self) -> Option<BodyRef> {
        match self.byte()? {
            0 => Some(BodyRef::Inline(self.bytes()?.to_vec())),
            1 => Some(BodyRef::File(BodyId(self.take(16)?.try_into().ok()?))),
            _ => None,
        }
    }
    fn md5(&mut self) -> Option<[u8; 16]> {
        self.take(16)?.try_into().ok()
    }
    fn end<T>(self, v: T) -> Option<T> {
        self.0.is_empty().then_some(v)
    }
}

impl ObjectMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.size);
        e.0.extend_from_slice(&self.md5);
        e.u64(u64::from(self.parts));
        e.u64(self.last_modified_ms);
        e.headers(&self.headers);
        e.checksums(&self.checksums);
        e.body(&self.body);
        e.u64(self.part_sizes.len() as u64);
        for s in &self.part_sizes {
            e.u64(*s);
        }
        e.0
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut d = Dec::start(b)?;
        let size = d.u64()?;
        let md5 = d.md5()?;
        let parts = u32::try_from(d.u64()?).ok()?;
        let last_modified_ms = d.u64()?;
        let headers = d.headers()?;
        let checksums = d.checksums()?;
        let body = d.body()?;
        let n = d.u64()?;
        if n > 10_000 {
            return None;
        }
        let mut part_sizes = Vec::with_capacity(n as usize);
        for _ in 0..n {
            part_sizes.push(d.u64()?);
        }
        d.end(ObjectMeta { size, md5, parts, last_modified_ms, headers, checksums, body, part_sizes })
    }
}

impl BucketMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.bytes(self.owner.as_bytes());
        e.u64(self.created_ms);
        e.opt_str(&self.location);
        e.0
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut d = Dec::start(b)?;
        let owner = d.string()?;
        let created_ms = d.u64()?;
        let location = d.opt_str()?;
        d.end(BucketMeta { owner, created_ms, location })
    }
}

impl UploadMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.initiated_ms);
        e.headers(&self.headers);
        e.0.push(self.checksum_algo.map_or(0xff, ChecksumAlgo::code));
        e.0
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut d = Dec::start(b)?;
        let initiated_ms = d.u64()?;
        let headers = d.headers()?;
        let algo = match d.byte()? {
            0xff => None,
            c => Some(ChecksumAlgo::from_code(c)?),
        };
        d.end(UploadMeta { initiated_ms, headers, checksum_algo: algo })
    }
}

impl PartMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.size);
        e.0.extend_from_slice(&self.md5);
        e.u64(self.last_modified_ms);
        e.checksums(&self.checksums);
        e.body(&self.body);
        e.0
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut d = Dec::start(b)?;
        let size = d.u64()?;
        let md5 = d.md5()?;
        let last_modified_ms = d.u64()?;
        let checksums = d.checksums()?;
        let body = d.body()?;
        d.end(PartMeta { size, md5, last_modified_ms, checksums, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ObjectMeta {
        ObjectMeta {
            size: 5 << 30,
            md5: [7; 16],
            parts: 3,
            last_modified_ms: 1_700_000_000_123,
            headers: ObjectHeaders {
                content_type: Some("text/plain".into()),
                expires: Some("Thu, 01 Dec 1994 16:00:00 GMT".into()),
                user_meta: vec![("mtime".into(), "1700000000.5".into()), ("a".into(), "".into())],
                storage_class: Some("STANDARD".into()),
                ..Default::default()
            },
            checksums: vec![(ChecksumAlgo::Crc32, vec![1, 2, 3, 4])],
            body: BodyRef::File(BodyId([9; 16])),
            part_sizes: vec![5 << 20, 5 << 20, 1],
        }
    }

    #[test]
    fn object_meta_round_trips() {
        let m = sample();
        assert_eq!(ObjectMeta::decode(&m.encode()), Some(m.clone()));
        let inline = ObjectMeta { body: BodyRef::Inline(b"hi".to_vec()), parts: 0, part_sizes: vec![], ..m };
        assert_eq!(ObjectMeta::decode(&inline.encode()), Some(inline));
    }

    #[test]
    fn truncated_or_extended_values_are_rejected_not_panicking() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert_eq!(ObjectMeta::decode(&bytes[..n]), None, "prefix of {n} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(ObjectMeta::decode(&longer), None);
    }

    #[test]
    fn other_records_round_trip() {
        let b = BucketMeta { owner: "AKIA1".into(), created_ms: 42, location: Some("eu-west-1".into()) };
        assert_eq!(BucketMeta::decode(&b.encode()), Some(b));
        let u = UploadMeta {
            initiated_ms: 5,
            headers: ObjectHeaders::default(),
            checksum_algo: Some(ChecksumAlgo::Sha256),
        };
        assert_eq!(UploadMeta::decode(&u.encode()), Some(u));
        let p = PartMeta {
            size: 1,
            md5: [1; 16],
            last_modified_ms: 2,
            checksums: vec![],
            body: BodyRef::Inline(vec![0]),
        };
        assert_eq!(PartMeta::decode(&p.encode()), Some(p));
    }

    #[test]
    fn etags() {
        let mut m = sample();
        assert_eq!(m.etag(), format!("\"{}-3\"", "07".repeat(16)));
        m.parts = 0;
        assert_eq!(m.etag(), format!("\"{}\"", "07".repeat(16)));
    }
}

//! Value codecs for the records of `schema.rs`. Compact, versioned binary: a leading format
//! byte, then fields in a fixed order, integers as LEB128 varints, strings and byte strings
//! length-prefixed. Every decoder checks bounds and returns `None` on malformed bytes (the
//! caller reports corruption), never panics.
//!
//! Format history: V1 is the original layout of every record. V2 (object and upload records
//! only) appends one byte, the multipart checksum type (`ChecksumType::code`; for uploads
//! 0xFF when the upload has no checksum algorithm). V3 (object and upload records) appends the
//! object's tags: a count, then each key and value; untagged records are written as V2, which
//! a binary without tags reads. V4 (object and upload records) appends an ACL flag byte (1:
//! public-read) to V3 and is written only for public objects and uploads of them. A bucket
//! record is V1, or V2 when it has more: V1 followed by its CORS rules, its policy document
//! and the ACL flag byte. V1 records still decode: an object as a full-object checksum, an
//! upload as the algorithm's default type; V1 and V2 as untagged.

use crate::checksum::{ChecksumAlgo, ChecksumType};

const FORMAT_V1: u8 = 1;
const FORMAT_V2: u8 = 2;
const FORMAT_V3: u8 = 3;
const FORMAT_V4: u8 = 4;
/// Upload records in upstream mode: V4's layout with the ACL byte always present, then the
/// upstream's upload id.
const FORMAT_V5: u8 = 5;
/// The ACL flag byte of V2 bucket and V4 object records: `public-read`.
const ACL_PUBLIC_READ: u8 = 1;

/// The `public-read` flag of an ACL flag byte; `None` for bits no version defines.
fn acl_flags(byte: u8) -> Option<bool> {
    (byte & !ACL_PUBLIC_READ == 0).then_some(byte & ACL_PUBLIC_READ != 0)
}

/// An object's tags (`x-amz-tagging`, PutObjectTagging): key and value pairs, in the order
/// they were given, at most `handlers::tagging::TAGS_MAX`.
pub type Tags = Vec<(String, String)>;
/// Upload records without a checksum algorithm store this in place of a code.
const NO_CODE: u8 = 0xff;

/// 16 random bytes naming a body file. Never derived from a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BodyId(pub [u8; 16]);

impl BodyId {
    /// A new id from the thread-local CSPRNG (collisions are not checked: 128 bits).
    pub fn random() -> Self {
        BodyId(rand::random())
    }
    /// The 32 lower-case hex digits that name the body's file.
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
    /// The id a file name spells; `None` unless it is exactly 32 hex digits.
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
    /// The whole body, stored in the record itself (at most the store's `inline_max` bytes).
    Inline(Vec<u8>),
    /// A file in the body store.
    File(BodyId),
    /// In upstream mode: the upstream object store holds the body, under the same key in the
    /// bucket's upstream bucket.
    Upstream(UpstreamBody),
}

/// What the index knows of a body held upstream: enough to read exactly that body back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamBody {
    /// The upstream's ETag (unquoted); GETs send it as `If-Match`, so a body replaced
    /// upstream behind the index is detected rather than served under the old metadata.
    pub etag: String,
    /// The upstream version id, when its bucket is versioned.
    pub version_id: Option<String>,
    /// The record was made from an upstream listing (an import or a reconciliation), which
    /// carries no content headers or user metadata: the first GET or HEAD fetches them.
    pub headers_pending: bool,
}

impl BodyRef {
    /// The id of the body's file; `None` for an inline body.
    pub fn file_id(&self) -> Option<BodyId> {
        match self {
            BodyRef::File(id) => Some(*id),
            BodyRef::Inline(_) | BodyRef::Upstream(_) => None,
        }
    }
}

/// The standard headers S3 stores with an object and returns on GET/HEAD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectHeaders {
    /// `Content-Type`, as sent.
    pub content_type: Option<String>,
    /// `Content-Encoding` without the `aws-chunked` coding (`None` if nothing else was sent).
    pub content_encoding: Option<String>,
    /// `Content-Language`, as sent.
    pub content_language: Option<String>,
    /// `Content-Disposition`, as sent.
    pub content_disposition: Option<String>,
    /// `Cache-Control`, as sent.
    pub cache_control: Option<String>,
    /// `Expires`, as sent (not parsed).
    pub expires: Option<String>,
    /// `x-amz-meta-*`, names lower-cased without the prefix, in request order.
    pub user_meta: Vec<(String, String)>,
    /// `x-amz-storage-class`, one of the classes S3 defines; `None` means STANDARD. Only
    /// recorded and echoed: every object is stored the same way.
    pub storage_class: Option<String>,
}

/// The record of an object (`schema::object`): everything GET, HEAD and listings need, and
/// where its body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Body length in bytes.
    pub size: u64,
    /// MD5 of the body (single part) or of the concatenated part MD5s (multipart).
    pub md5: [u8; 16],
    /// 0 for a single-part object; otherwise the number of parts, and `part_sizes` has them.
    pub parts: u32,
    /// When the object was written (PutObject, copy, or completion), in ms since the epoch.
    pub last_modified_ms: u64,
    /// The headers returned on GET and HEAD.
    pub headers: ObjectHeaders,
    /// Raw digests, at most one per algorithm (of the part checksums when `checksum_type` is
    /// `Composite`).
    pub checksums: Vec<(ChecksumAlgo, Vec<u8>)>,
    /// Where the bytes are.
    pub body: BodyRef,
    /// Each part's size, in part order, for `partNumber` reads; empty for a single-part object.
    pub part_sizes: Vec<u64>,
    /// `Composite` only for a multipart object whose upload chose composite checksums: then
    /// `checksums` hold the checksum of the part checksums, shown as `value-N`.
    pub checksum_type: ChecksumType,
    /// The object's tags.
    pub tags: Tags,
    /// The `public-read` ACL: anyone may read the object.
    pub public_read: bool,
}

/// The engine's weigher (`holt_core::Options::weigher`): object and part records weigh the
/// size of their object or part (the field after the format byte), so `Db::usage` of an
/// object prefix is its objects' bytes. Other records weigh what their first varint says;
/// they live under prefixes no usage question names.
pub const RECORD_WEIGHER: holt_core::Weigher =
    holt_core::Weigher { name: "holt-gateway/record-size", weigh: record_size };

/// See `RECORD_WEIGHER`: the size an object or part record starts with, 0 for bytes that do
/// not start as one.
fn record_size(value: &[u8]) -> u64 {
    match value.split_first() {
        Some((&(FORMAT_V1..=FORMAT_V5), rest)) => Dec(rest).u64().unwrap_or(0),
        _ => 0,
    }
}

/// What a listing shows of an object (`ObjectMeta::decode_listed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// Body length in bytes.
    pub size: u64,
    /// As `ObjectMeta::md5`: with `parts`, the ETag.
    pub md5: [u8; 16],
    /// 0 for a single-part object, else the part count.
    pub parts: u32,
    /// Milliseconds since the epoch.
    pub last_modified_ms: u64,
    /// `None` means STANDARD.
    pub storage_class: Option<String>,
    /// The algorithm of the first stored checksum (`ChecksumAlgorithm` in listings).
    pub checksum_algo: Option<ChecksumAlgo>,
    /// The upstream's ETag when it is not of S3's MD5 shapes (`md5_etag`): shown instead.
    pub opaque_etag: Option<String>,
}

impl ListedObject {
    /// The quoted ETag.
    pub fn etag(&self) -> String {
        match &self.opaque_etag {
            Some(etag) => format!("\"{etag}\""),
            None => etag_text(&self.md5, self.parts),
        }
    }

    /// Appends the quoted ETag escaped as XML text (`&quot;…&quot;`), as `etag` would read
    /// once escaped, without allocating.
    pub fn etag_xml_into(&self, out: &mut Vec<u8>) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        if let Some(etag) = &self.opaque_etag {
            crate::xml::escape_into(out, &format!("\"{etag}\""));
            return;
        }
        let mut text = [0u8; 6 + 32];
        text[..6].copy_from_slice(b"&quot;");
        for (i, b) in self.md5.iter().enumerate() {
            text[6 + 2 * i] = HEX[usize::from(b >> 4)];
            text[7 + 2 * i] = HEX[usize::from(b & 0xF)];
        }
        out.extend_from_slice(&text);
        if self.parts != 0 {
            out.push(b'-');
            out.extend_from_slice(itoa::Buffer::new().format(self.parts).as_bytes());
        }
        out.extend_from_slice(b"&quot;");
    }
}

/// The MD5 and part count an ETag of S3's shapes stands for: 32 hex digits, then `-N` for a
/// multipart object. `None` for other ETags (some upstreams' encrypted or composite objects).
pub fn md5_etag(etag: &str) -> Option<([u8; 16], u32)> {
    let (hex_part, parts) = match etag.split_once('-') {
        Some((h, n)) => (h, n.parse::<u32>().ok()?),
        None => (etag, 0),
    };
    let mut md5 = [0u8; 16];
    hex::decode_to_slice(hex_part, &mut md5).ok()?;
    Some((md5, parts))
}

fn etag_text(md5: &[u8; 16], parts: u32) -> String {
    if parts == 0 {
        format!("\"{}\"", hex::encode(md5))
    } else {
        format!("\"{}-{}\"", hex::encode(md5), parts)
    }
}

impl ObjectMeta {
    /// The text of each stored checksum as S3 shows it (with `-N` when composite).
    pub fn checksum_values(&self) -> impl Iterator<Item = (ChecksumAlgo, String)> + '_ {
        let composite = (self.checksum_type == ChecksumType::Composite).then_some(self.parts);
        self.checksums.iter().map(move |(a, v)| (*a, crate::checksum::display_value(v, composite)))
    }

    /// The quoted ETag: the upstream's own when it is not of S3's MD5 shapes, else the one
    /// `md5` and `parts` spell.
    pub fn etag(&self) -> String {
        match &self.body {
            BodyRef::Upstream(ub) if md5_etag(&ub.etag).is_none() => format!("\"{}\"", ub.etag),
            _ => etag_text(&self.md5, self.parts),
        }
    }
}

/// The record of a bucket (`schema::bucket`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketMeta {
    /// The access key that created the bucket: the only one that may use it.
    pub owner: String,
    /// Creation time, in ms since the epoch.
    pub created_ms: u64,
    /// Reserved: always written `None` and never read (GetBucketLocation answers the
    /// configured region).
    pub location: Option<String>,
    /// The bucket's CORS rules (PutBucketCors), in the order given; none when CORS is off.
    pub cors: Vec<CorsRule>,
    /// The bucket policy document as given (PutBucketPolicy; `handlers::policy`).
    pub policy: Option<String>,
    /// The `public-read` ACL: anyone may list the bucket.
    pub public_read: bool,
}

/// One rule of a bucket's CORS configuration (`handlers::cors` checks and applies them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorsRule {
    /// The rule's `ID`, if it has one.
    pub id: Option<String>,
    /// Origins it allows; each may hold one `*`.
    pub origins: Vec<String>,
    /// Methods it allows: GET, PUT, HEAD, POST, DELETE.
    pub methods: Vec<String>,
    /// Headers a preflight may ask for, as given; each may hold one `*`.
    pub headers: Vec<String>,
    /// Response headers the browser may show the page.
    pub expose: Vec<String>,
    /// How long a browser may keep the preflight's answer, in seconds.
    pub max_age: Option<u32>,
}

/// The record of a multipart upload in progress (`schema::upload`). Its engine version is
/// bumped by every part write, which lets completion and abort detect a concurrent part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadMeta {
    /// When CreateMultipartUpload ran, in ms since the epoch.
    pub initiated_ms: u64,
    /// The headers the completed object will have, taken from CreateMultipartUpload.
    pub headers: ObjectHeaders,
    /// `x-amz-checksum-algorithm` of CreateMultipartUpload: computed over every part, and a
    /// part may not name another algorithm.
    pub checksum_algo: Option<ChecksumAlgo>,
    /// Set exactly when `checksum_algo` is.
    pub checksum_type: Option<ChecksumType>,
    /// The tags the completed object will have (`x-amz-tagging` of CreateMultipartUpload).
    pub tags: Tags,
    /// Whether the completed object will be public (`x-amz-acl: public-read`).
    pub public_read: bool,
    /// Upstream mode: the upstream's id of the multipart upload this one stands for.
    pub upstream_id: Option<String>,
}

/// The record of one uploaded part (`schema::part`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartMeta {
    /// Body length in bytes.
    pub size: u64,
    /// MD5 of the part's body: its ETag.
    pub md5: [u8; 16],
    /// When the part was uploaded, in ms since the epoch.
    pub last_modified_ms: u64,
    /// Raw digests of the part's body, one per algorithm computed.
    pub checksums: Vec<(ChecksumAlgo, Vec<u8>)>,
    /// Where the part's bytes are.
    pub body: BodyRef,
}

impl PartMeta {
    /// The quoted ETag: the hex MD5 of the part.
    pub fn etag(&self) -> String {
        format!("\"{}\"", hex::encode(self.md5))
    }
}

struct Enc(Vec<u8>);

impl Enc {
    fn new() -> Self {
        Enc(vec![FORMAT_V1])
    }
    /// A V2 record when `tags` is empty, else V3: an untagged record stays readable by a
    /// binary that knows only V2 (a downgrade), and costs no byte for its empty tag set.
    fn new_v2_or_v3(tags: &Tags) -> Self {
        Enc(vec![if tags.is_empty() { FORMAT_V2 } else { FORMAT_V3 }])
    }
    /// The tags of a V3 record (nothing for V2: see `new_v2_or_v3`).
    fn tags(&mut self, tags: &Tags) {
        if self.0[0] < FORMAT_V3 {
            return;
        }
        self.u64(tags.len() as u64);
        for (k, v) in tags {
            self.bytes(k.as_bytes());
            self.bytes(v.as_bytes());
        }
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
            BodyRef::Upstream(up) => {
                self.0.push(2);
                self.bytes(up.etag.as_bytes());
                self.opt_str(&up.version_id);
                self.0.push(u8::from(up.headers_pending));
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
    /// For object and upload records (V1 to V4): the decoder and the version found.
    fn start_object(b: &'a [u8]) -> Option<(Self, u8)> {
        let (&v, rest) = b.split_first()?;
        (FORMAT_V1..=FORMAT_V5).contains(&v).then_some((Dec(rest), v))
    }
    /// The tags of a V3 record (none before V3).
    fn tags(&mut self, version: u8) -> Option<Tags> {
        if version < FORMAT_V3 {
            return Some(Vec::new());
        }
        let n = self.u64()?;
        // Each pair takes at least two bytes.
        if n > self.0.len() as u64 {
            return None;
        }
        (0..n).map(|_| Some((self.string()?, self.string()?))).collect()
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
            // The tenth byte holds bit 63 alone: more would not fit.
            if i == 9 && b > 1 {
                return None;
            }
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
    /// `opt_str` without building the string (checked as UTF-8 all the same).
    fn skip_opt_str(&mut self) -> Option<()> {
        match self.byte()? {
            0 => Some(()),
            1 => std::str::from_utf8(self.bytes()?).ok().map(drop),
            _ => None,
        }
    }
    /// `headers`, keeping only the storage class: a listing allocates nothing for the rest.
    fn storage_class(&mut self) -> Option<Option<String>> {
        for _ in 0..6 {
            self.skip_opt_str()?;
        }
        let storage_class = self.opt_str()?;
        let n = self.u64()?;
        if n > self.0.len() as u64 {
            return None;
        }
        for _ in 0..2 * n {
            std::str::from_utf8(self.bytes()?).ok()?;
        }
        Some(storage_class)
    }
    /// `checksums`, keeping only the first algorithm.
    fn first_checksum_algo(&mut self) -> Option<Option<ChecksumAlgo>> {
        let n = self.u64()?;
        if n > 5 {
            return None;
        }
        let mut first = None;
        for _ in 0..n {
            let algo = ChecksumAlgo::from_code(self.byte()?)?;
            self.bytes()?;
            first.get_or_insert(algo);
        }
        Some(first)
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
            2 => self.upstream_body(),
            _ => None,
        }
    }
    fn upstream_body(&mut self) -> Option<BodyRef> {
        let etag = self.string()?;
        let version_id = self.opt_str()?;
        let headers_pending = match self.byte()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(BodyRef::Upstream(UpstreamBody { etag, version_id, headers_pending }))
    }
    /// `body`, with an inline body read past but not copied (left empty).
    fn body_summary(&mut self) -> Option<BodyRef> {
        match self.byte()? {
            0 => self.bytes().map(|_| BodyRef::Inline(Vec::new())),
            1 => Some(BodyRef::File(BodyId(self.take(16)?.try_into().ok()?))),
            2 => self.upstream_body(),
            _ => None,
        }
    }
    /// From the body on: the upstream's ETag when it is not of S3's MD5 shapes (read without
    /// a copy otherwise).
    fn opaque_etag(&mut self) -> Option<Option<String>> {
        match self.byte()? {
            2 => {
                let etag = std::str::from_utf8(self.bytes()?).ok()?;
                Some(md5_etag(etag).is_none().then(|| etag.to_owned()))
            }
            _ => Some(None),
        }
    }
    fn md5(&mut self) -> Option<[u8; 16]> {
        self.take(16)?.try_into().ok()
    }
    /// The fields every object record starts with: size, MD5, part count, last-modified.
    fn object_head(&mut self) -> Option<(u64, [u8; 16], u32, u64)> {
        let size = self.u64()?;
        let md5 = self.md5()?;
        let parts = u32::try_from(self.u64()?).ok()?;
        Some((size, md5, parts, self.u64()?))
    }
    fn end<T>(self, v: T) -> Option<T> {
        self.0.is_empty().then_some(v)
    }
}

impl ObjectMeta {
    /// The record's bytes: V4 when public, else V3 when tagged, else V2.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new_v2_or_v3(&self.tags);
        if self.public_read {
            e.0[0] = FORMAT_V4;
        }
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
        e.0.push(self.checksum_type.code());
        e.tags(&self.tags);
        if self.public_read {
            e.0.push(ACL_PUBLIC_READ);
        }
        e.0
    }

    /// The fields a listing shows, decoded from the front of a record without the rest (the
    /// body of a small object is stored inline, after them, and is never copied here).
    pub fn decode_listed(b: &[u8]) -> Option<ListedObject> {
        let (mut d, _) = Dec::start_object(b)?;
        let (size, md5, parts, last_modified_ms) = d.object_head()?;
        let storage_class = d.storage_class()?;
        let checksum_algo = d.first_checksum_algo()?;
        let opaque_etag = d.opaque_etag()?;
        Some(ListedObject { size, md5, parts, last_modified_ms, storage_class, checksum_algo, opaque_etag })
    }

    /// Decodes a V1 to V4 record; `None` if the bytes are malformed or have bytes left over.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let (mut d, version) = Dec::start_object(b)?;
        // V5 is an upload layout only.
        if version == FORMAT_V5 {
            return None;
        }
        let (size, md5, parts, last_modified_ms) = d.object_head()?;
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
        let checksum_type = match version {
            FORMAT_V1 => ChecksumType::FullObject,
            _ => ChecksumType::from_code(d.byte()?)?,
        };
        let tags = d.tags(version)?;
        // V4 is written only for public objects.
        let public_read = version == FORMAT_V4 && acl_flags(d.byte()?)?.then_some(true)?;
        d.end(ObjectMeta {
            size,
            md5,
            parts,
            last_modified_ms,
            headers,
            checksums,
            body,
            part_sizes,
            checksum_type,
            tags,
            public_read,
        })
    }
}

impl BucketMeta {
    /// Whether the record has nothing beyond the V1 fields.
    fn is_v1(&self) -> bool {
        self.cors.is_empty() && self.policy.is_none() && !self.public_read
    }

    /// The record's bytes: V1 when it has only the V1 fields; else V2, which adds the CORS
    /// rules, the policy and the ACL flags.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        if !self.is_v1() {
            e.0[0] = FORMAT_V2;
        }
        e.bytes(self.owner.as_bytes());
        e.u64(self.created_ms);
        e.opt_str(&self.location);
        if !self.is_v1() {
            e.u64(self.cors.len() as u64);
            for rule in &self.cors {
                e.opt_str(&rule.id);
                for list in [&rule.origins, &rule.methods, &rule.headers, &rule.expose] {
                    e.u64(list.len() as u64);
                    for item in list {
                        e.bytes(item.as_bytes());
                    }
                }
                e.u64(rule.max_age.map_or(0, |s| u64::from(s) + 1));
            }
            e.opt_str(&self.policy);
            e.0.push(u8::from(self.public_read) * ACL_PUBLIC_READ);
        }
        e.0
    }

    /// Decodes a V1 or V2 record; `None` if the bytes are malformed or have bytes left over.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let (&version, rest) = b.split_first()?;
        if !matches!(version, FORMAT_V1 | FORMAT_V2) {
            return None;
        }
        let mut d = Dec(rest);
        let owner = d.string()?;
        let created_ms = d.u64()?;
        let location = d.opt_str()?;
        let mut meta =
            BucketMeta { owner, created_ms, location, cors: Vec::new(), policy: None, public_read: false };
        if version == FORMAT_V2 {
            let n = d.u64()?;
            // Each rule takes at least six bytes.
            if n > d.0.len() as u64 {
                return None;
            }
            for _ in 0..n {
                let id = d.opt_str()?;
                let mut lists: [Vec<String>; 4] = Default::default();
                for list in &mut lists {
                    let len = d.u64()?;
                    if len > d.0.len() as u64 {
                        return None;
                    }
                    *list = (0..len).map(|_| d.string()).collect::<Option<_>>()?;
                }
                let max_age = match d.u64()? {
                    0 => None,
                    s => Some(u32::try_from(s - 1).ok()?),
                };
                let [origins, methods, headers, expose] = lists;
                meta.cors.push(CorsRule { id, origins, methods, headers, expose, max_age });
            }
            meta.policy = d.opt_str()?;
            meta.public_read = acl_flags(d.byte()?)?;
            // V2 is written only for what V1 cannot hold.
            if meta.is_v1() {
                return None;
            }
        }
        d.end(meta)
    }
}

impl UploadMeta {
    /// The record's bytes: V5 in upstream mode, else V4 when the object will be public, else
    /// V3 when tagged, else V2.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new_v2_or_v3(&self.tags);
        if self.upstream_id.is_some() {
            e.0[0] = FORMAT_V5;
        } else if self.public_read {
            e.0[0] = FORMAT_V4;
        }
        e.u64(self.initiated_ms);
        e.headers(&self.headers);
        e.0.push(self.checksum_algo.map_or(NO_CODE, ChecksumAlgo::code));
        e.0.push(self.checksum_type.map_or(NO_CODE, ChecksumType::code));
        e.tags(&self.tags);
        if self.upstream_id.is_some() {
            e.0.push(if self.public_read { ACL_PUBLIC_READ } else { 0 });
            e.opt_str(&self.upstream_id);
        } else if self.public_read {
            e.0.push(ACL_PUBLIC_READ);
        }
        e.0
    }

    /// Decodes a V1 to V4 record; `None` if the bytes are malformed, have bytes left over, or
    /// set only one of the checksum algorithm and type.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let (mut d, version) = Dec::start_object(b)?;
        let initiated_ms = d.u64()?;
        let headers = d.headers()?;
        let algo = match d.byte()? {
            NO_CODE => None,
            c => Some(ChecksumAlgo::from_code(c)?),
        };
        let checksum_type = match version {
            FORMAT_V1 => algo.map(ChecksumAlgo::default_multipart_type),
            _ => match d.byte()? {
                NO_CODE => None,
                c => Some(ChecksumType::from_code(c)?),
            },
        };
        // The two are set together.
        if algo.is_some() != checksum_type.is_some() {
            return None;
        }
        let tags = d.tags(version)?;
        let (public_read, upstream_id) = match version {
            // V4 is written only for uploads of public objects.
            FORMAT_V4 => (acl_flags(d.byte()?)?.then_some(true)?, None),
            FORMAT_V5 => (acl_flags(d.byte()?)?, Some(d.opt_str()??)),
            _ => (false, None),
        };
        d.end(UploadMeta {
            initiated_ms,
            headers,
            checksum_algo: algo,
            checksum_type,
            tags,
            public_read,
            upstream_id,
        })
    }
}

impl PartMeta {
    /// The record's bytes (V1, the only part layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.size);
        e.0.extend_from_slice(&self.md5);
        e.u64(self.last_modified_ms);
        e.checksums(&self.checksums);
        e.body(&self.body);
        e.0
    }

    /// Decodes a record, inline body included; `None` if the bytes are malformed or have bytes
    /// left over.
    pub fn decode(b: &[u8]) -> Option<Self> {
        Self::decode_with(b, true)
    }

    /// `decode` without copying an inline body: its `BodyRef::Inline` is left empty (check
    /// `body_omitted`). What a Complete or Abort of an upload with thousands of small parts
    /// reads, so that it holds ~100 bytes a part instead of up to 4 KiB.
    pub fn decode_summary(b: &[u8]) -> Option<Self> {
        Self::decode_with(b, false)
    }

    /// Whether this part's inline body was left out by `decode_summary` (an inline body
    /// always holds exactly `size` bytes).
    pub fn body_omitted(&self) -> bool {
        matches!(&self.body, BodyRef::Inline(data) if data.len() as u64 != self.size)
    }

    fn decode_with(b: &[u8], inline_body: bool) -> Option<Self> {
        let mut d = Dec::start(b)?;
        let size = d.u64()?;
        let md5 = d.md5()?;
        let last_modified_ms = d.u64()?;
        let checksums = d.checksums()?;
        let body = if inline_body { d.body()? } else { d.body_summary()? };
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
            checksum_type: ChecksumType::Composite,
            tags: vec![("project".into(), "holt".into()), ("empty".into(), "".into())],
            public_read: false,
        }
    }

    #[test]
    fn object_meta_round_trips() {
        let m = sample();
        assert_eq!(ObjectMeta::decode(&m.encode()), Some(m.clone()));
        let public = ObjectMeta { public_read: true, ..m.clone() };
        assert_eq!(public.encode()[0], FORMAT_V4);
        assert_eq!(ObjectMeta::decode(&public.encode()), Some(public.clone()));
        let untagged_public = ObjectMeta { tags: vec![], ..public };
        assert_eq!(ObjectMeta::decode(&untagged_public.encode()), Some(untagged_public.clone()));
        // A V4 record is written only for a public object: a private one in V4 is malformed.
        let mut private_v4 = untagged_public.encode();
        *private_v4.last_mut().unwrap() = 0;
        assert_eq!(ObjectMeta::decode(&private_v4), None);
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
        let b = BucketMeta {
            owner: "AKIA1".into(),
            created_ms: 42,
            location: Some("eu-west-1".into()),
            cors: vec![],
            policy: None,
            public_read: false,
        };
        assert_eq!(b.encode()[0], FORMAT_V1, "a bucket with nothing more stays V1");
        for more in [
            BucketMeta { policy: Some("{}".into()), ..b.clone() },
            BucketMeta { public_read: true, ..b.clone() },
        ] {
            assert_eq!(more.encode()[0], FORMAT_V2);
            assert_eq!(BucketMeta::decode(&more.encode()), Some(more));
        }
        // V2 with nothing V1 lacks is never written, and not accepted.
        let mut empty_v2 = b.encode();
        empty_v2[0] = FORMAT_V2;
        empty_v2.extend_from_slice(&[0, 0, 0]);
        assert_eq!(BucketMeta::decode(&empty_v2), None);
        let rule = CorsRule {
            id: Some("uploads".into()),
            origins: vec!["https://*.example.com".into()],
            methods: vec!["GET".into(), "PUT".into()],
            headers: vec!["*".into()],
            expose: vec!["ETag".into()],
            max_age: Some(0),
        };
        let with_cors =
            BucketMeta { cors: vec![rule.clone(), CorsRule { max_age: None, ..rule }], ..b.clone() };
        assert_eq!(with_cors.encode()[0], FORMAT_V2);
        assert_eq!(BucketMeta::decode(&with_cors.encode()), Some(with_cors));
        assert_eq!(BucketMeta::decode(&b.encode()), Some(b));
        let u = UploadMeta {
            initiated_ms: 5,
            headers: ObjectHeaders::default(),
            checksum_algo: Some(ChecksumAlgo::Sha256),
            checksum_type: Some(ChecksumType::Composite),
            tags: vec![("k".into(), "v".into())],
            public_read: false,
            upstream_id: None,
        };
        assert_eq!(UploadMeta::decode(&u.encode()), Some(u.clone()));
        let public = UploadMeta { public_read: true, ..u.clone() };
        assert_eq!(public.encode()[0], FORMAT_V4);
        assert_eq!(UploadMeta::decode(&public.encode()), Some(public.clone()));
        for upload in [u.clone(), public] {
            let through = UploadMeta { upstream_id: Some("up-1".into()), ..upload };
            assert_eq!(through.encode()[0], FORMAT_V5);
            assert_eq!(UploadMeta::decode(&through.encode()), Some(through.clone()));
            assert_eq!(ObjectMeta::decode(&through.encode()), None, "V5 is an upload layout");
        }
        let upstream_part = PartMeta {
            size: 7,
            md5: [3; 16],
            last_modified_ms: 2,
            checksums: vec![],
            body: BodyRef::Upstream(UpstreamBody {
                etag: "abc".into(),
                version_id: Some("v9".into()),
                headers_pending: true,
            }),
        };
        assert_eq!(PartMeta::decode(&upstream_part.encode()), Some(upstream_part));
        let plain = UploadMeta { checksum_algo: None, checksum_type: None, ..u };
        assert_eq!(UploadMeta::decode(&plain.encode()), Some(plain));
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
    fn v1_and_v2_records_still_decode() {
        // Untagged records are written as V2 (a V3 record with the tag count 0 says the same);
        // V1 is V2 without the checksum-type byte at its end.
        let m = ObjectMeta { checksum_type: ChecksumType::FullObject, tags: vec![], ..sample() };
        let mut older = m.encode();
        assert_eq!(older[0], FORMAT_V2, "untagged objects are written as V2");
        let mut v3 = older.clone();
        v3[0] = FORMAT_V3;
        v3.push(0);
        assert_eq!(ObjectMeta::decode(&v3), Some(m.clone()));
        assert_eq!(ObjectMeta::decode(&older), Some(m.clone()));
        let tagged = ObjectMeta { tags: vec![("k".into(), "v".into())], ..m.clone() };
        assert_eq!(tagged.encode()[0], FORMAT_V3);
        older[0] = FORMAT_V1;
        older.pop();
        assert_eq!(ObjectMeta::decode(&older), Some(m));
        let u = UploadMeta {
            initiated_ms: 9,
            headers: ObjectHeaders::default(),
            checksum_algo: Some(ChecksumAlgo::Crc64Nvme),
            checksum_type: Some(ChecksumType::FullObject),
            tags: vec![],
            public_read: false,
            upstream_id: None,
        };
        let mut older = u.encode();
        assert_eq!(older[0], FORMAT_V2, "untagged uploads are written as V2");
        let mut v3 = older.clone();
        v3[0] = FORMAT_V3;
        v3.push(0);
        assert_eq!(UploadMeta::decode(&v3), Some(u.clone()));
        assert_eq!(UploadMeta::decode(&older), Some(u.clone()));
        older[0] = FORMAT_V1;
        older.pop();
        assert_eq!(UploadMeta::decode(&older), Some(u));
    }

    #[test]
    fn composite_checksums_show_the_part_count() {
        let m = sample();
        let shown: Vec<_> = m.checksum_values().collect();
        assert_eq!(shown, vec![(ChecksumAlgo::Crc32, "AQIDBA==-3".to_owned())]);
        let full = ObjectMeta { checksum_type: ChecksumType::FullObject, ..m };
        assert_eq!(full.checksum_values().next().map(|(_, v)| v).as_deref(), Some("AQIDBA=="));
    }

    #[test]
    fn varints_round_trip_at_every_length_and_refuse_what_does_not_fit() {
        for v in [0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 1_700_000_000_000, u64::MAX] {
            let mut e = Enc(Vec::new());
            e.u64(v);
            e.0.push(0xee);
            let mut d = Dec(&e.0);
            assert_eq!(d.u64(), Some(v));
            assert_eq!(d.0, [0xee], "{v} left the byte after it");
        }
        assert_eq!(Dec(&[0x80]).u64(), None, "cut short");
        assert_eq!(Dec(&[]).u64(), None, "empty");
        let mut at_most = [0xff; 10];
        at_most[9] = 0x01;
        assert_eq!(Dec(&at_most).u64(), Some(u64::MAX));
        at_most[9] = 0x02;
        assert_eq!(Dec(&at_most).u64(), None, "past 64 bits");
        assert_eq!(Dec(&[0xff; 10]).u64(), None, "a tenth byte that goes on");
        assert_eq!(Dec(&[0xff; 11]).u64(), None, "longer than any u64");
    }

    #[test]
    fn listed_etags_escape_as_the_etag_does() {
        for parts in [0, 3, 10_000] {
            let listed = ListedObject {
                size: 1,
                // Every nibble value, in both halves of a byte.
                md5: std::array::from_fn(|i| (i as u8).wrapping_mul(0x1f) ^ 0xa5),
                parts,
                last_modified_ms: 0,
                storage_class: None,
                checksum_algo: None,
                opaque_etag: None,
            };
            for opaque in [None, Some("CKih16GjycICEAE=&<x>".to_owned())] {
                let listed = ListedObject { opaque_etag: opaque, ..listed.clone() };
                let (mut fast, mut escaped) = (Vec::new(), Vec::new());
                listed.etag_xml_into(&mut fast);
                crate::xml::escape_into(&mut escaped, &listed.etag());
                assert_eq!(fast, escaped);
            }
        }
    }

    /// The listing's decoder skips what a listing does not show without building it: it
    /// must agree with the full decoder on every field it keeps, and refuse what it refuses.
    #[test]
    fn listed_fields_agree_with_the_full_record() {
        let mut m = sample();
        m.headers.content_type = Some("text/plain".into());
        m.headers.cache_control = Some("no-cache".into());
        m.headers.storage_class = Some("REDUCED_REDUNDANCY".into());
        m.headers.user_meta = vec![("a".into(), "1".into()), ("b".into(), "2".into())];
        let upstream = |etag: &str| ObjectMeta {
            body: BodyRef::Upstream(UpstreamBody {
                etag: etag.into(),
                version_id: None,
                headers_pending: false,
            }),
            ..m.clone()
        };
        let (opaque, shaped) = (upstream("CKih16GjycICEAE="), upstream(&format!("{}-3", "07".repeat(16))));
        assert_eq!(opaque.etag(), "\"CKih16GjycICEAE=\"", "an upstream ETag of another shape is shown");
        assert_eq!(shaped.etag(), format!("\"{}-3\"", "07".repeat(16)));
        for record in [m.encode(), sample().encode(), opaque.encode(), shaped.encode()] {
            let full = ObjectMeta::decode(&record).unwrap();
            let listed = ObjectMeta::decode_listed(&record).unwrap();
            assert_eq!(listed.storage_class, full.headers.storage_class);
            assert_eq!(listed.checksum_algo, full.checksums.first().map(|(a, _)| *a));
            assert_eq!((listed.size, listed.md5, listed.parts), (full.size, full.md5, full.parts));
            assert_eq!(listed.etag(), full.etag());
        }
        // A header that is not UTF-8 is refused by both.
        let mut bad = m.clone();
        bad.headers.content_type = Some("QQQQQQQQ".into());
        let mut record = bad.encode();
        let at = record.windows(8).position(|w| w == b"QQQQQQQQ").unwrap();
        record[at] = 0xFF;
        assert!(ObjectMeta::decode(&record).is_none());
        assert!(ObjectMeta::decode_listed(&record).is_none());
    }

    #[test]
    fn etags() {
        let mut m = sample();
        assert_eq!(m.etag(), format!("\"{}-3\"", "07".repeat(16)));
        m.parts = 0;
        assert_eq!(m.etag(), format!("\"{}\"", "07".repeat(16)));
    }
}

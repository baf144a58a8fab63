//! Request-body XML: CreateBucketConfiguration, Delete (DeleteObjects) and
//! CompleteMultipartUpload. The parser builds a tiny bounded tree and refuses DOCTYPEs
//! (entity expansion, external entities), deep nesting and oversized documents, so a hostile
//! body costs at most its own (already bounded) size.

use quick_xml::events::Event;
use quick_xml::Reader;

use super::is_xml_safe;
use crate::error::{S3Error, S3ErrorCode, S3Result};

/// Deepest element nesting any S3 request document needs is 3; allow some slack.
const DEPTH_MAX: usize = 8;
/// Most elements in one document: 10000 parts × a handful of children, with slack.
const NODES_MAX: usize = 120_000;

/// One parsed element: local name (namespace prefix dropped), concatenated text, children.
#[derive(Debug, Default)]
pub struct Element {
    /// The local name (`Delete` for `s3:Delete`).
    pub name: String,
    /// The element's own text and CDATA, unescaped and untrimmed (whitespace between children
    /// included); the children's text is not in it.
    pub text: String,
    /// Child elements, in document order.
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }
    /// The text of the first child named `name`, untrimmed.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }
    /// Every child named `name`, in document order.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
}

fn malformed(msg: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::MalformedXML, msg)
}

/// XML 1.0 carries no control characters other than tab, LF and CR, raw or as character
/// references: a document holding one is not well formed. S3 refuses such a DeleteObjects body
/// with MalformedXML (such keys are deleted one at a time, their names in the URL), so no
/// response document ever has to echo a key it cannot carry.
fn refuse_non_xml_chars(text: &str) -> S3Result<()> {
    if is_xml_safe(text) {
        Ok(())
    } else {
        Err(malformed("a character XML 1.0 does not allow"))
    }
}

/// An element's name without its namespace prefix. quick-xml takes everything up to the first
/// space, `/` or `>` as the name; XML allows far less (no control characters, no markup, at
/// most the one colon of a prefix), and S3 refuses such a document as MalformedXML.
fn local_name(raw: &[u8]) -> S3Result<String> {
    let local = match raw.iter().position(|&b| b == b':') {
        Some(i) => &raw[i + 1..],
        None => raw,
    };
    let name = std::str::from_utf8(local).map_err(|_| malformed("element name is not UTF-8"))?;
    // ASCII: letters, digits, `_`, `-` and `.` (not first); beyond ASCII, anything but
    // control characters and spaces.
    let name_char = |c: char| {
        if c.is_ascii() {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
        } else {
            !(c.is_control() || c.is_whitespace())
        }
    };
    let starts_well = name.chars().next().is_some_and(|c| !(c.is_ascii_digit() || c == '-' || c == '.'));
    if !starts_well || !name.chars().all(name_char) {
        return Err(malformed("not a valid element name"));
    }
    Ok(name.to_owned())
}

/// Parses `body` into its root element.
pub fn parse(body: &[u8]) -> S3Result<Element> {
    let mut reader = Reader::from_reader(body);
    reader.config_mut().trim_text(false);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut nodes = 0usize;
    let mut buf = Vec::new();
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|_| malformed("XML is not well formed"))?;
        match event {
            Event::DocType(_) => return Err(malformed("DOCTYPE is not allowed")),
            Event::Start(e) | Event::Empty(e) if root.is_some() => {
                let _ = e;
                return Err(malformed("content after the root element"));
            }
            Event::Start(e) => {
                nodes += 1;
                if stack.len() >= DEPTH_MAX || nodes > NODES_MAX {
                    return Err(malformed("XML document too deep or too large"));
                }
                stack.push(Element { name: local_name(e.name().as_ref())?, ..Default::default() });
            }
            Event::Empty(e) => {
                nodes += 1;
                if stack.len() >= DEPTH_MAX || nodes > NODES_MAX {
                    return Err(malformed("XML document too deep or too large"));
                }
                let el = Element { name: local_name(e.name().as_ref())?, ..Default::default() };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            }
            Event::End(_) => {
                let el = stack.pop().ok_or_else(|| malformed("unbalanced end tag"))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            }
            Event::Text(t) => {
                let text = t.unescape().map_err(|_| malformed("bad character reference"))?;
                refuse_non_xml_chars(&text)?;
                match stack.last_mut() {
                    Some(el) => el.text.push_str(&text),
                    None if text.trim().is_empty() => {}
                    None => return Err(malformed("text outside the root element")),
                }
            }
            Event::CData(t) => {
                let text = std::str::from_utf8(&t).map_err(|_| malformed("CDATA is not UTF-8"))?;
                refuse_non_xml_chars(text)?;
                match stack.last_mut() {
                    Some(el) => el.text.push_str(text),
                    None => return Err(malformed("text outside the root element")),
                }
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
        buf.clear();
    }
    if !stack.is_empty() {
        return Err(malformed("unclosed element"));
    }
    root.ok_or_else(|| malformed("empty XML document"))
}

/// CreateBucketConfiguration: the optional LocationConstraint.
pub fn parse_create_bucket(body: &[u8]) -> S3Result<Option<String>> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    let root = parse(body)?;
    if root.name != "CreateBucketConfiguration" {
        return Err(malformed("expected CreateBucketConfiguration"));
    }
    Ok(root.child_text("LocationConstraint").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()))
}

/// One object named in a DeleteObjects request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteEntry {
    /// The object key, as sent (not trimmed).
    pub key: String,
    /// `<VersionId>`, if given: only `null` names an existing version here.
    pub version_id: Option<String>,
}

/// A DeleteObjects request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    /// `<Quiet>true</Quiet>`: report only the keys that failed.
    pub quiet: bool,
    /// The keys to delete, 1 to `DELETE_KEYS_MAX` of them, in request order.
    pub objects: Vec<DeleteEntry>,
}

/// Most keys in one DeleteObjects request.
pub const DELETE_KEYS_MAX: usize = 1000;

/// Parses a DeleteObjects `<Delete>` document; MalformedXML if it names no key, more than
/// `DELETE_KEYS_MAX`, or a `Quiet` other than true/false.
pub fn parse_delete(body: &[u8]) -> S3Result<DeleteRequest> {
    let root = parse(body)?;
    if root.name != "Delete" {
        return Err(malformed("expected Delete"));
    }
    let quiet = match root.child_text("Quiet").map(str::trim) {
        None => false,
        Some(q) if q.eq_ignore_ascii_case("true") => true,
        Some(q) if q.eq_ignore_ascii_case("false") => false,
        Some(_) => return Err(malformed("Quiet must be true or false")),
    };
    let mut objects = Vec::new();
    for obj in root.children_named("Object") {
        if objects.len() == DELETE_KEYS_MAX {
            return Err(malformed("at most 1000 keys may be deleted in one request"));
        }
        let key = obj.child_text("Key").ok_or_else(|| malformed("Object without Key"))?.to_owned();
        let version_id = obj.child_text("VersionId").map(str::to_owned);
        objects.push(DeleteEntry { key, version_id });
    }
    if objects.is_empty() {
        return Err(malformed("Delete names no objects"));
    }
    Ok(DeleteRequest { quiet, objects })
}

/// One part named in a CompleteMultipartUpload request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    /// `<PartNumber>`, not yet checked against the range or the uploaded parts.
    pub part_number: u32,
    /// As sent: quotes are stripped by the caller when comparing.
    pub etag: String,
    /// `<ChecksumCRC32>` and friends, as sent (base64), for the caller to compare with the
    /// checksums stored with the part.
    pub checksums: Vec<(crate::checksum::ChecksumAlgo, String)>,
}

/// `Checksum<Algorithm>`: the element naming each algorithm's value in a `Part`.
const CHECKSUM_ELEMENTS: [(crate::checksum::ChecksumAlgo, &str); 5] = {
    use crate::checksum::ChecksumAlgo::*;
    [
        (Crc32, "ChecksumCRC32"),
        (Crc32c, "ChecksumCRC32C"),
        (Crc64Nvme, "ChecksumCRC64NVME"),
        (Sha1, "ChecksumSHA1"),
        (Sha256, "ChecksumSHA256"),
    ]
};

/// Parses a `<CompleteMultipartUpload>` document into its parts, in document order (the
/// caller checks the order); MalformedXML if it names none or a part lacks its number or ETag.
pub fn parse_complete_multipart(body: &[u8]) -> S3Result<Vec<CompletedPart>> {
    let root = parse(body)?;
    if root.name != "CompleteMultipartUpload" {
        return Err(malformed("expected CompleteMultipartUpload"));
    }
    let mut parts = Vec::new();
    for p in root.children_named("Part") {
        let number = p
            .child_text("PartNumber")
            .and_then(|n| n.trim().parse::<u32>().ok())
            .ok_or_else(|| malformed("Part without a valid PartNumber"))?;
        let etag = p.child_text("ETag").ok_or_else(|| malformed("Part without ETag"))?.trim().to_owned();
        let checksums = CHECKSUM_ELEMENTS
            .into_iter()
            .filter_map(|(a, element)| p.child_text(element).map(|v| (a, v.trim().to_owned())))
            .collect();
        parts.push(CompletedPart { part_number: number, etag, checksums });
    }
    if parts.is_empty() {
        return Err(malformed("CompleteMultipartUpload names no parts"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_delete_with_namespace_and_quiet() {
        let body = br#"<?xml version="1.0"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
            <Quiet>true</Quiet><Object><Key>a&amp;b</Key></Object><Object><Key>c</Key><VersionId>null</VersionId></Object></Delete>"#;
        let d = parse_delete(body).unwrap();
        assert!(d.quiet);
        assert_eq!(d.objects.len(), 2);
        assert_eq!(d.objects[0].key, "a&b");
        assert_eq!(d.objects[1].version_id.as_deref(), Some("null"));
    }

    #[test]
    fn refuses_doctype_and_garbage() {
        let e = parse(b"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"b\">]><Delete/>").unwrap_err();
        assert_eq!(e.code, S3ErrorCode::MalformedXML);
        assert_eq!(parse(b"<Delete><Object></Delete>").unwrap_err().code, S3ErrorCode::MalformedXML);
        assert_eq!(parse(b"not xml at all").unwrap_err().code, S3ErrorCode::MalformedXML);
        assert_eq!(parse(b"").unwrap_err().code, S3ErrorCode::MalformedXML);
        assert_eq!(parse(b"<a/><b/>").unwrap_err().code, S3ErrorCode::MalformedXML);
    }

    #[test]
    fn refuses_element_names_xml_does_not_allow() {
        for body in [
            &b"<Del\0ete/>"[..],
            b"<a:b:c/>",
            b"<Delete><1Object/></Delete>",
            b"<Delete><Ob<ject/></Delete>",
            b"<x:/>",
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::MalformedXML, "{}", String::from_utf8_lossy(body));
        }
        let d = parse_delete(br#"<s3:Delete xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/"><s3:Object><s3:Key>k</s3:Key></s3:Object></s3:Delete>"#).unwrap();
        assert_eq!(d.objects[0].key, "k");
    }

    #[test]
    fn checksum_elements_name_every_algorithm() {
        let named: Vec<_> = CHECKSUM_ELEMENTS.iter().map(|(a, _)| *a).collect();
        assert_eq!(named, crate::checksum::ALL_ALGOS.to_vec());
        for (algo, element) in CHECKSUM_ELEMENTS {
            assert_eq!(element, format!("Checksum{}", algo.name()));
        }
    }

    #[test]
    fn refuses_deep_nesting() {
        let body = "<a>".repeat(20) + &"</a>".repeat(20);
        assert_eq!(parse(body.as_bytes()).unwrap_err().code, S3ErrorCode::MalformedXML);
    }

    /// As S3 does: control characters other than tab, LF and CR are refused, raw, as decimal
    /// or hex references, or in CDATA, and the three XML allows are kept.
    #[test]
    fn refuses_characters_xml_1_0_does_not_allow() {
        for key in ["a\u{1}b", "a&#1;b", "a&#x10;b", "<![CDATA[a\u{1f}b]]>", "a\u{FFFE}b"] {
            let body = format!("<Delete><Object><Key>{key}</Key></Object></Delete>");
            let err = parse_delete(body.as_bytes()).expect_err(key);
            assert_eq!(err.code, S3ErrorCode::MalformedXML, "{key}");
        }
        let body = b"<Delete><Object><Key>t&#9;l&#10;c&#13;</Key></Object></Delete>";
        let parsed = parse_delete(body).expect("tab, LF and CR are XML characters");
        assert_eq!(parsed.objects[0].key, "t\tl\nc\r");
    }

    #[test]
    fn refuses_more_than_1000_keys() {
        let mut body = String::from("<Delete>");
        for i in 0..1001 {
            body.push_str(&format!("<Object><Key>k{i}</Key></Object>"));
        }
        body.push_str("</Delete>");
        assert_eq!(parse_delete(body.as_bytes()).unwrap_err().code, S3ErrorCode::MalformedXML);
    }

    #[test]
    fn parses_complete_multipart() {
        let body = b"<CompleteMultipartUpload><Part><ETag>\"abc\"</ETag><PartNumber>1</PartNumber></Part>\
            <Part><PartNumber>2</PartNumber><ETag>def</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>\
            </CompleteMultipartUpload>";
        let parts = parse_complete_multipart(body).unwrap();
        assert_eq!(
            parts,
            vec![
                CompletedPart { part_number: 1, etag: "\"abc\"".into(), checksums: vec![] },
                CompletedPart {
                    part_number: 2,
                    etag: "def".into(),
                    checksums: vec![(crate::checksum::ChecksumAlgo::Crc32, "AAAAAA==".into())]
                },
            ]
        );
        assert!(parse_complete_multipart(b"<CompleteMultipartUpload/>").is_err());
    }

    #[test]
    fn parses_create_bucket_configuration() {
        assert_eq!(parse_create_bucket(b"").unwrap(), None);
        let body = b"<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
            <LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>";
        assert_eq!(parse_create_bucket(body).unwrap().as_deref(), Some("eu-west-1"));
    }
}

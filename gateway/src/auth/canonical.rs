//! The SigV4 canonical request, built the way S3 builds it.
//!
//! ```text
//! METHOD \n CanonicalURI \n CanonicalQuery \n CanonicalHeaders \n SignedHeaders \n HashedPayload
//! ```
//!
//! S3 differs from other services in two ways that matter here: the path is encoded once (it is
//! not double-encoded) and it is not normalized (`.`/`..`/`//` are parts of keys). Everything is
//! built from bytes, so non-UTF-8 percent escapes and header values canonicalize exactly.

use http::HeaderMap;
use percent_encoding::{percent_decode, AsciiSet, NON_ALPHANUMERIC};

use super::error::AuthError;

/// RFC 3986 unreserved characters stay raw; everything else is `%XX` (upper-case hex).
const ENCODE_ALL: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
/// The same, but '/' stays raw: used for the path.
const ENCODE_PATH: &AsciiSet = &ENCODE_ALL.remove(b'/');

/// Longest header list we canonicalize; requests are bounded earlier, this bounds our own work.
/// As many as a request may carry (`server::HEADERS_COUNT_MAX`): every `x-amz-*` header must
/// be signed, and user metadata alone can be ~170 of them.
const SIGNED_HEADERS_MAX: usize = 256;

/// Percent-encodes bytes with the RFC 3986 unreserved set (and '/' when `keep_slash`).
pub(crate) fn uri_encode(bytes: &[u8], keep_slash: bool) -> String {
    let set = if keep_slash { ENCODE_PATH } else { ENCODE_ALL };
    percent_encoding::percent_encode(bytes, set).to_string()
}

/// The canonical URI: the path decoded once and re-encoded with the unreserved set, '/' kept.
/// An empty path is "/".
pub(crate) fn canonical_uri(raw_path: &str) -> String {
    if raw_path.is_empty() {
        return "/".to_owned();
    }
    let decoded: Vec<u8> = percent_decode(raw_path.as_bytes()).collect();
    uri_encode(&decoded, true)
}

/// Parses a raw query string into decoded `(name, value)` byte pairs, the way
/// `application/x-www-form-urlencoded` does ('+' is a space, empty pieces are skipped), which is
/// also how AWS's signers read it back.
pub(crate) fn parse_query(raw_query: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    raw_query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
            (form_decode(name), form_decode(value))
        })
        .collect()
}

fn form_decode(text: &str) -> Vec<u8> {
    let spaced: Vec<u8> = text.bytes().map(|b| if b == b'+' { b' ' } else { b }).collect();
    percent_decode(&spaced).collect()
}

/// The canonical query: every pair encoded, sorted by name then value, joined with '&'.
/// `skip` names a parameter to leave out (the presigned `X-Amz-Signature`).
pub(crate) fn canonical_query(pairs: &[(Vec<u8>, Vec<u8>)], skip: Option<&[u8]>) -> String {
    let mut encoded: Vec<(String, String)> = pairs
        .iter()
        .filter(|(name, _)| Some(name.as_slice()) != skip)
        .map(|(name, value)| (uri_encode(name, false), uri_encode(value, false)))
        .collect();
    encoded.sort_unstable();
    let mut out = String::new();
    for (i, (name, value)) in encoded.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// Parses `SignedHeaders` (`host;range;x-amz-date`): non-empty, lower-case, no repeats.
pub(crate) fn parse_signed_headers(list: &str) -> Result<Vec<String>, &'static str> {
    let mut names: Vec<String> = Vec::new();
    for name in list.split(';') {
        if name.is_empty() {
            return Err("SignedHeaders has an empty header name");
        }
        if !name.bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()) {
            return Err("SignedHeaders must list lower-case header names");
        }
        if names.iter().any(|n| n == name) {
            return Err("SignedHeaders lists a header twice");
        }
        if names.len() == SIGNED_HEADERS_MAX {
            return Err("SignedHeaders lists too many headers");
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// Appends the canonical value of header `name`: trimmed and with every inner run of
/// whitespace (spaces and tabs alike, as botocore's signer collapses them) written as one
/// space. `host` falls back to the URI authority (HTTP/2 requests carry it there). A signed
/// header that is absent fails the signature; one sent more than once is refused: the
/// signature would cover its occurrences joined with ',', while the handlers read one of
/// them, so one signature would stand for requests that differ (a copy source split in two
/// lines named another object).
fn push_header_value(
    out: &mut Vec<u8>,
    headers: &HeaderMap,
    name: &str,
    authority: Option<&str>,
) -> Result<(), AuthError> {
    let mut values = headers.get_all(name).iter().peekable();
    if values.peek().is_none() {
        return match (name, authority) {
            ("host", Some(authority)) => {
                out.extend_from_slice(authority.as_bytes());
                Ok(())
            }
            _ => Err(AuthError::SignatureDoesNotMatch),
        };
    }
    if headers.get_all(name).iter().nth(1).is_some() {
        return Err(AuthError::InvalidArgument("a signed header is sent more than once"));
    }
    for value in values {
        let mut pending_space = false;
        let mut wrote = false;
        for &b in value.as_bytes() {
            if b.is_ascii_whitespace() {
                pending_space = wrote;
                continue;
            }
            if pending_space {
                out.push(b' ');
                pending_space = false;
            }
            out.push(b);
            wrote = true;
        }
    }
    Ok(())
}

/// Everything that goes into one canonical request.
pub(crate) struct CanonicalParts<'a> {
    pub method: &'a str,
    pub raw_path: &'a str,
    pub query: &'a str,
    pub headers: &'a HeaderMap,
    pub authority: Option<&'a str>,
    pub signed_headers: &'a [String],
    pub payload_hash: &'a str,
}

impl CanonicalParts<'_> {
    /// The canonical request with `uri` as the canonical URI.
    pub(crate) fn build(&self, uri: &str) -> Result<Vec<u8>, AuthError> {
        let mut out = Vec::with_capacity(256 + self.query.len() + uri.len());
        out.extend_from_slice(self.method.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(uri.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(self.query.as_bytes());
        out.push(b'\n');
        for name in self.signed_headers {
            out.extend_from_slice(name.as_bytes());
            out.push(b':');
            push_header_value(&mut out, self.headers, name, self.authority)?;
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(self.signed_headers.join(";").as_bytes());
        out.push(b'\n');
        out.extend_from_slice(self.payload_hash.as_bytes());
        Ok(out)
    }

    /// The canonical URIs to try, best first: the S3 form (decode once, encode once), then the
    /// path exactly as sent when that differs. The second form accepts clients that leave
    /// reserved characters such as '$' or '!' raw in the path and sign it as sent; both forms
    /// name the same decoded key, so accepting either does not widen what a signature covers.
    pub(crate) fn candidate_uris(&self) -> Vec<String> {
        let strict = canonical_uri(self.raw_path);
        if self.raw_path.is_empty() || strict == self.raw_path {
            vec![strict]
        } else {
            vec![strict, self.raw_path.to_owned()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_is_encoded_once_and_not_normalized() {
        assert_eq!(canonical_uri("/test$file.text"), "/test%24file.text");
        assert_eq!(canonical_uri("/test%24file.text"), "/test%24file.text");
        assert_eq!(canonical_uri("/a//b/../c/./d"), "/a//b/../c/./d");
        assert_eq!(canonical_uri("/sp%20ace+plus"), "/sp%20ace%2Bplus");
        assert_eq!(canonical_uri("/%E2%82%AC"), "/%E2%82%AC");
        assert_eq!(canonical_uri("/%e2%82%ac"), "/%E2%82%AC");
        assert_eq!(canonical_uri("/~user_-."), "/~user_-.");
        assert_eq!(canonical_uri(""), "/");
        // An invalid escape is kept literally, so its '%' is encoded.
        assert_eq!(canonical_uri("/100%zz"), "/100%25zz");
    }

    #[test]
    fn query_is_decoded_encoded_and_sorted() {
        let pairs = parse_query("prefix=J&max-keys=2&lifecycle&b=%2F+x&a=1&a=0");
        assert_eq!(canonical_query(&pairs, None), "a=0&a=1&b=%2F%20x&lifecycle=&max-keys=2&prefix=J");
        let pairs = parse_query("X-Amz-Signature=abc&x=1&&");
        assert_eq!(canonical_query(&pairs, Some(b"X-Amz-Signature")), "x=1");
    }

    #[test]
    fn header_values_are_trimmed_and_collapsed() {
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-meta-a", http::HeaderValue::from_static("  a   b  c "));
        // Tabs count as whitespace, as botocore's signer collapses them.
        headers.insert("x-amz-meta-b", http::HeaderValue::from_static("one\t\t two\t"));
        let signed = vec!["x-amz-meta-a".to_owned(), "x-amz-meta-b".to_owned()];
        let parts = CanonicalParts {
            method: "GET",
            raw_path: "/",
            query: "",
            headers: &headers,
            authority: None,
            signed_headers: &signed,
            payload_hash: "UNSIGNED-PAYLOAD",
        };
        let built = String::from_utf8(parts.build("/").expect("headers present")).expect("ascii");
        assert_eq!(
            built,
            "GET\n/\n\nx-amz-meta-a:a b c\nx-amz-meta-b:one two\n\nx-amz-meta-a;x-amz-meta-b\nUNSIGNED-PAYLOAD"
        );
    }

    /// A signed header sent twice would be signed as its values joined with ',' while the
    /// handlers read one of them: refused, whichever header it is.
    #[test]
    fn a_repeated_signed_header_is_refused() {
        let mut headers = HeaderMap::new();
        headers.append("x-amz-copy-source", http::HeaderValue::from_static("b/a"));
        headers.append("x-amz-copy-source", http::HeaderValue::from_static("b"));
        let signed = vec!["x-amz-copy-source".to_owned()];
        let parts = CanonicalParts {
            method: "PUT",
            raw_path: "/b/dst",
            query: "",
            headers: &headers,
            authority: None,
            signed_headers: &signed,
            payload_hash: "UNSIGNED-PAYLOAD",
        };
        assert!(matches!(parts.build("/b/dst"), Err(AuthError::InvalidArgument(_))));
    }

    /// "Signature Calculations for the Authorization Header: Transferring Payload in a Single
    /// Chunk", example "GET Object": the documented canonical request, its hash in the string
    /// to sign, and the final signature.
    #[test]
    fn documented_get_object_intermediate_values() {
        use crate::auth::credentials::Secret;
        use crate::auth::signature::{sha256_hex, string_to_sign, Signature, SigningKey};
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let mut headers = HeaderMap::new();
        headers.insert("host", http::HeaderValue::from_static("examplebucket.s3.amazonaws.com"));
        headers.insert("range", http::HeaderValue::from_static("bytes=0-9"));
        headers.insert("x-amz-content-sha256", http::HeaderValue::from_static(empty));
        headers.insert("x-amz-date", http::HeaderValue::from_static("20130524T000000Z"));
        let signed: Vec<String> =
            ["host", "range", "x-amz-content-sha256", "x-amz-date"].iter().map(|s| (*s).to_owned()).collect();
        let parts = CanonicalParts {
            method: "GET",
            raw_path: "/test.txt",
            query: "",
            headers: &headers,
            authority: None,
            signed_headers: &signed,
            payload_hash: empty,
        };
        let canonical = parts.build(&canonical_uri("/test.txt")).expect("headers present");
        let expected = format!(
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n\
             x-amz-content-sha256:{empty}\nx-amz-date:20130524T000000Z\n\n\
             host;range;x-amz-content-sha256;x-amz-date\n{empty}"
        );
        assert_eq!(String::from_utf8(canonical.clone()).expect("ascii"), expected);
        assert_eq!(
            sha256_hex(&canonical),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
        );
        let sts = string_to_sign("20130524T000000Z", "20130524/us-east-1/s3/aws4_request", &canonical);
        let key = SigningKey::derive(
            &Secret::new("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            "20130524",
            "us-east-1",
            "s3",
        );
        let documented =
            Signature::from_hex("f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
                .expect("hex");
        assert!(key.sign(sts.as_bytes()).verify(&documented));
    }

    #[test]
    fn signed_header_list_rules() {
        assert!(parse_signed_headers("host;x-amz-date").is_ok());
        assert!(parse_signed_headers("").is_err());
        assert!(parse_signed_headers("host;;x").is_err());
        assert!(parse_signed_headers("Host").is_err());
        assert!(parse_signed_headers("host;host").is_err());
        assert!(parse_signed_headers("ho st").is_err());
    }
}

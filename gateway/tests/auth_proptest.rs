//! Invariant: whatever the object key, query parameters and header values, a request signed by
//! aws-sigv4 (encoded the way SDKs encode S3 URIs) verifies, and changing the key by one
//! character does not. This checks our canonical URI, query and header rules against AWS's
//! own implementation rather than against our reading of the documentation.
//!
//! proptest prints the failing input and records its seed in `proptest-regressions/`.

mod auth_support;

use auth_support::{
    chunked_put, chunked_spec, decode, encode_unsigned, percent, seed_signature, t0, Body, ChunkSigner, Req,
    Signer, REGION, SK, T0_STAMP,
};
use proptest::prelude::*;

/// Encodes a key for the path: every byte outside the unreserved set as %XX, '/' kept.
fn encode_key(key: &str) -> String {
    key.split('/').map(percent).collect::<Vec<_>>().join("/")
}

/// Keys mixing reserved characters, spaces, '%', '+', '/', dots and non-ASCII letters.
fn key() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9]{1,4}",
            Just("/".to_owned()),
            Just("//".to_owned()),
            Just("..".to_owned()),
            "[ !$&'()*+,;=:@%?#\\[\\]~._-]",
            "[éü€日本]",
        ],
        1..12,
    )
    .prop_map(|parts| parts.concat())
}

fn query() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec(("[a-zA-Z0-9_.~ +=&%/-]{1,8}", "[a-zA-Z0-9_.~ +=&%/é-]{0,8}"), 0..5)
}

fn header_value() -> impl Strategy<Value = String> {
    // Visible ASCII with runs of spaces in the middle (leading/trailing ones are trimmed by
    // HTTP itself, and both signers trim them too).
    "[a-zA-Z0-9]{1,3}( {1,3}[a-zA-Z0-9;,=/:]{1,5}){0,4}"
}

fn build(key: &str, query: &[(String, String)], meta: &str) -> Req {
    let mut uri = format!("/bucket/{}", encode_key(key));
    for (i, (name, value)) in query.iter().enumerate() {
        uri.push(if i == 0 { '?' } else { '&' });
        uri.push_str(&percent(name));
        uri.push('=');
        uri.push_str(&percent(value));
    }
    Req::new("PUT", &uri).header("x-amz-meta-note", meta).header("content-type", "text/plain")
}

/// Encodes only what a URI cannot carry raw, leaving sub-delimiters such as '$', '!', '+' and
/// '=' as they are: some clients sign such paths exactly as sent.
fn encode_key_lightly(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn aws_sigv4_header_signatures_verify(key in key(), query in query(), meta in header_value()) {
        let req = Signer::default().sign(&build(&key, &query, &meta), Body::Bytes(key.as_bytes()));
        let ok = req.auth(t0());
        prop_assert!(ok.is_ok(), "{:?}: {:?}", req, ok);
    }

    #[test]
    fn aws_sigv4_presigned_urls_verify(key in key(), query in query()) {
        let req = Signer::default().presign(&build(&key, &query, "x"), std::time::Duration::from_secs(900));
        let ok = req.auth(t0());
        prop_assert!(ok.is_ok(), "{:?}: {:?}", req, ok);
    }

    #[test]
    fn lightly_encoded_paths_verify(key in key()) {
        let req = Req::new("GET", &format!("/bucket/{}", encode_key_lightly(&key)));
        let req = Signer::default().sign(&req, Body::Unsigned);
        let ok = req.auth(t0());
        prop_assert!(ok.is_ok(), "{:?}: {:?}", req, ok);
    }

    #[test]
    fn a_different_key_does_not_verify(key in key(), extra in "[a-zA-Z0-9 %+]") {
        let signed = Signer::default().sign(&build(&key, &[], "x"), Body::Unsigned);
        let mut other = signed.clone();
        other.uri = format!("/bucket/{}", encode_key(&format!("{key}{extra}")));
        let err = other.auth(t0()).expect_err("a different key");
        prop_assert_eq!(err.code(), "SignatureDoesNotMatch");
    }
}

/// Splits `data` at the given cut points (taken modulo its length) into chunks.
fn partition(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.push(0);
    points.push(data.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| data[w[0]..w[1]].to_vec()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Any data, cut into any chunks, in any of the three forms, fed in any piece size,
    /// decodes to itself.
    #[test]
    fn chunked_bodies_round_trip(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
        form in 0..3usize,
        step in 1..400usize,
    ) {
        let crc = "x-amz-checksum-crc32";
        let chunks = partition(&data, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let signer = ChunkSigner::new(SK, T0_STAMP, REGION);
        let (req, body) = match form {
            0 => {
                let req = chunked_put("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", data.len(), None);
                let body = signer.encode(&seed_signature(&req), &refs, None);
                (req, body)
            }
            1 => {
                let req = chunked_put("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", data.len(), Some(crc));
                let body = signer.encode(&seed_signature(&req), &refs, Some(&[(crc, "AAAAAA==")]));
                (req, body)
            }
            _ => {
                let req = chunked_put("STREAMING-UNSIGNED-PAYLOAD-TRAILER", data.len(), Some(crc));
                (req, encode_unsigned(&refs, &[(crc, "AAAAAA==")]))
            }
        };
        let (decoded, trailers) = decode(chunked_spec(req.auth(t0())), &body, step).expect("valid body");
        prop_assert_eq!(decoded, data);
        prop_assert_eq!(trailers.get(crc), if form == 0 { None } else { Some("AAAAAA==") });
    }
}

//! Invariant: an aws-chunked body is accepted only if it is complete and every signature in it
//! verifies (each chunk, the final empty chunk, the trailer), the decoded length matches
//! `x-amz-decoded-content-length`, and the trailers are exactly those declared; and the seed
//! signature is verified on every form, `STREAMING-UNSIGNED-PAYLOAD-TRAILER` included.

mod auth_support;

use auth_support::{
    assert_err, chunked_put, chunked_spec, decode, encode_unsigned, seed_signature, t0, Body, ChunkSigner,
    Req, Signer, REGION, SK, T0_STAMP,
};
use gateway::auth::{ChunkedDecoder, Payload};

const SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
const SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
const CRC: &str = "x-amz-checksum-crc32";

fn signer() -> ChunkSigner {
    ChunkSigner::new(SK, T0_STAMP, REGION)
}

fn data() -> (Vec<u8>, Vec<u8>) {
    ((0..10_000u32).map(|i| (i % 251) as u8).collect(), b"tail bytes".to_vec())
}

/// A signed chunked request head and its valid body.
fn signed_case() -> (Req, Vec<u8>) {
    let (a, b) = data();
    let req = chunked_put(SIGNED, a.len() + b.len(), None);
    let body = signer().encode(&seed_signature(&req), &[&a, &b], None);
    (req, body)
}

fn signed_trailer_case(value: &str) -> (Req, Vec<u8>) {
    let (a, b) = data();
    let req = chunked_put(SIGNED_TRAILER, a.len() + b.len(), Some(CRC));
    let body = signer().encode(&seed_signature(&req), &[&a, &b], Some(&[(CRC, value)]));
    (req, body)
}

fn run(req: &Req, body: &[u8]) -> Result<(Vec<u8>, gateway::auth::Trailers), gateway::auth::AuthError> {
    decode(chunked_spec(req.auth(t0())), body, 333)
}

#[test]
fn signed_chunks_round_trip_in_any_split() {
    let (req, body) = signed_case();
    let (a, b) = data();
    for step in [1, 2, 3, 64, 4096, body.len()] {
        let (decoded, trailers) = decode(chunked_spec(req.auth(t0())), &body, step).expect("valid body");
        assert_eq!(decoded, [a.as_slice(), b.as_slice()].concat(), "step {step}");
        assert!(trailers.headers.is_empty());
    }
}

#[test]
fn signed_trailer_round_trip() {
    let (req, body) = signed_trailer_case("AAAAAA==");
    let (decoded, trailers) = run(&req, &body).expect("valid body");
    assert_eq!(decoded.len(), 10_010);
    assert_eq!(trailers.get(CRC), Some("AAAAAA=="));
}

#[test]
fn unsigned_trailer_round_trip() {
    let (a, b) = data();
    let req = chunked_put(UNSIGNED_TRAILER, a.len() + b.len(), Some(CRC));
    let body = encode_unsigned(&[&a, &b], &[(CRC, "sOO8/Q==")]);
    let spec = chunked_spec(req.auth(t0()));
    assert!(!spec.is_signed());
    assert_eq!(spec.declared_trailers(), [CRC.to_owned()]);
    let (decoded, trailers) = decode(spec, &body, 100).expect("valid body");
    assert_eq!(decoded, [a, b].concat());
    assert_eq!(trailers.get(CRC), Some("sOO8/Q=="));
}

#[test]
fn unsigned_trailer_with_bad_seed_signature_is_refused_at_the_head() {
    // The bypass fixed in other servers: the body carries no signatures, so the seed is the
    // only thing binding the request to a user.
    let req = chunked_put(UNSIGNED_TRAILER, 10, Some(CRC));
    let auth = req.get("authorization").expect("signed").to_owned();
    let seed = seed_signature(&req);
    let forged: String = seed.chars().rev().collect();
    assert_err(
        req.clone().set("authorization", &auth.replace(&seed, &forged)).auth(t0()),
        "SignatureDoesNotMatch",
        403,
    );
    let wrong_secret = Signer { secret: "guess", ..Signer::default() }.sign(
        &Req::new("PUT", "/bucket/object")
            .header("x-amz-decoded-content-length", "10")
            .header("x-amz-trailer", CRC),
        Body::Literal(UNSIGNED_TRAILER),
    );
    assert_err(wrong_secret.auth(t0()), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_chunk_data() {
    let (req, mut body) = signed_case();
    body[200] ^= 0x01;
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_chunk_signature() {
    let (req, body) = signed_case();
    let text = String::from_utf8_lossy(&body[..100]).into_owned();
    let at = text.find("chunk-signature=").expect("first header") + "chunk-signature=".len();
    let mut body = body;
    body[at] = if body[at] == b'0' { b'1' } else { b'0' };
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn tampered_final_chunk_signature() {
    let (req, mut body) = signed_case();
    let at = body.len() - 5; // inside the final chunk's signature, before "\r\n\r\n"
    body[at] = if body[at] == b'0' { b'1' } else { b'0' };
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn chunk_without_signature_in_signed_form() {
    let (a, _) = data();
    let req = chunked_put(SIGNED, a.len(), None);
    let mut body = format!("{:x}\r\n", a.len()).into_bytes();
    body.extend_from_slice(&a);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn chunks_signed_for_another_request() {
    // Same data, chained from a different seed: the chain binds chunks to their request.
    let (req, _) = signed_case();
    let (a, b) = data();
    let other_seed = "0".repeat(64);
    let body = signer().encode(&other_seed, &[&a, &b], None);
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn chunks_reordered() {
    let (a, b) = data();
    let req = chunked_put(SIGNED, a.len() + b.len(), None);
    let seed = seed_signature(&req);
    let s = signer();
    let sig_a = s.chunk_signature(&seed, &a);
    let sig_b = s.chunk_signature(&sig_a, &b);
    let mut body = format!("{:x};chunk-signature={sig_b}\r\n", b.len()).into_bytes();
    body.extend_from_slice(&b);
    body.extend_from_slice(format!("\r\n{:x};chunk-signature={sig_a}\r\n", a.len()).as_bytes());
    body.extend_from_slice(&a);
    body.extend_from_slice(b"\r\n");
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn missing_final_chunk() {
    let (req, body) = signed_case();
    let final_start = body.len() - (2 + 16 + 64 + 2 + 2) - 1; // "0;chunk-signature=<64>\r\n\r\n"
    assert_eq!(body[final_start + 1], b'0', "cut lands on the final chunk header");
    assert_err(run(&req, &body[..final_start + 1]), "IncompleteBody", 400);
}

#[test]
fn truncated_body() {
    let (req, body) = signed_case();
    for cut in [0, 10, 100, 5000, body.len() - 1] {
        assert_err(run(&req, &body[..cut]), "IncompleteBody", 400);
    }
}

#[test]
fn oversized_chunk_header() {
    let (req, _) = signed_case();
    let mut body = b"10;chunk-signature=".to_vec();
    body.extend(std::iter::repeat_n(b'a', 5000));
    let spec = chunked_spec(req.auth(t0()));
    let mut decoder = ChunkedDecoder::new(spec, 1 << 20);
    let mut out = Vec::new();
    assert_err(decoder.feed(&body, &mut out), "InvalidRequest", 400);
    assert!(out.is_empty());
    // The decoder stays failed.
    assert_err(decoder.feed(b"\r\n", &mut out), "InvalidRequest", 400);
}

#[test]
fn huge_announced_chunk_is_refused_before_its_data() {
    let (req, _) = signed_case();
    let body = format!("ffffffffffffffff;chunk-signature={}\r\n", "0".repeat(64));
    let spec = chunked_spec(req.auth(t0()));
    let mut decoder = ChunkedDecoder::new(spec, 1 << 20);
    let mut out = Vec::new();
    assert_err(decoder.feed(body.as_bytes(), &mut out), "InvalidRequest", 400);
    assert!(out.capacity() < 1 << 20, "nothing was allocated from the announced size");
}

#[test]
fn decoded_length_mismatch() {
    let (a, b) = data();
    let total = a.len() + b.len();
    // Announced more than sent: the final chunk arrives too early.
    let req = chunked_put(SIGNED, total + 1, None);
    let body = signer().encode(&seed_signature(&req), &[&a, &b], None);
    assert_err(run(&req, &body), "IncompleteBody", 400);
    // Announced less than sent: refused as soon as a chunk header overshoots.
    let req = chunked_put(SIGNED, total - 1, None);
    let body = signer().encode(&seed_signature(&req), &[&a, &b], None);
    assert_err(run(&req, &body), "InvalidRequest", 400);
}

#[test]
fn decoded_length_over_the_limit() {
    let (req, body) = signed_case();
    let mut decoder = ChunkedDecoder::new(chunked_spec(req.auth(t0())), 100);
    assert_err(decoder.feed(&body, &mut Vec::new()), "EntityTooLarge", 400);
}

#[test]
fn missing_decoded_content_length() {
    let req = Req::new("PUT", "/bucket/object");
    let req = Signer::default().sign(&req, Body::Literal(SIGNED));
    assert_err(req.auth(t0()), "MissingSecurityHeader", 400);
}

#[test]
fn trailer_checksum_tampered() {
    let (req, body) = signed_trailer_case("AAAAAA==");
    let text = String::from_utf8(body[body.len() - 200..].to_vec()).expect("ascii tail");
    let tampered = text.replace("AAAAAA==", "AAAAAB==");
    let body = [&body[..body.len() - 200], tampered.as_bytes()].concat();
    assert_err(run(&req, &body), "SignatureDoesNotMatch", 403);
}

#[test]
fn trailer_signature_missing_or_wrong() {
    let (req, body) = signed_trailer_case("AAAAAA==");
    let text = String::from_utf8(body[body.len() - 200..].to_vec()).expect("ascii tail");
    let sig_line_start = text.find("x-amz-trailer-signature:").expect("signed trailer");
    let without = [&body[..body.len() - 200], &text.as_bytes()[..sig_line_start], b"\r\n"].concat();
    assert_err(run(&req, &without), "SignatureDoesNotMatch", 403);
    let at = body.len() - 5;
    let mut wrong = body.clone();
    wrong[at] = if wrong[at] == b'0' { b'1' } else { b'0' };
    assert_err(run(&req, &wrong), "SignatureDoesNotMatch", 403);
}

#[test]
fn undeclared_and_missing_trailers() {
    let (a, _) = data();
    let req = chunked_put(UNSIGNED_TRAILER, a.len(), Some(CRC));
    let extra = encode_unsigned(&[&a], &[(CRC, "AAAAAA=="), ("x-amz-checksum-sha1", "AAAA")]);
    assert_err(run(&req, &extra), "InvalidRequest", 400);
    let missing = encode_unsigned(&[&a], &[]);
    assert_err(run(&req, &missing), "IncompleteBody", 400);
    let twice = encode_unsigned(&[&a], &[(CRC, "AAAAAA=="), (CRC, "AAAAAA==")]);
    assert_err(run(&req, &twice), "InvalidRequest", 400);
}

#[test]
fn unsupported_trailer_declaration() {
    let req = chunked_put(UNSIGNED_TRAILER, 1, Some("x-amz-meta-owner"));
    assert_err(req.auth(t0()), "InvalidRequest", 400);
    let req = chunked_put(SIGNED, 1, Some(CRC));
    assert_err(req.auth(t0()), "InvalidRequest", 400);
}

#[test]
fn data_after_the_end() {
    let (req, mut body) = signed_case();
    body.extend_from_slice(b"more");
    assert_err(run(&req, &body), "InvalidRequest", 400);
}

#[test]
fn signature_on_unsigned_form() {
    let req = chunked_put(UNSIGNED_TRAILER, 3, Some(CRC));
    let body = format!("3;chunk-signature={}\r\nabc\r\n0\r\n{CRC}:AAAAAA==\r\n\r\n", "0".repeat(64));
    assert_err(run(&req, body.as_bytes()), "InvalidRequest", 400);
}

#[test]
fn bare_lf_and_missing_crlf_are_refused() {
    let req = chunked_put(UNSIGNED_TRAILER, 3, Some(CRC));
    assert_err(run(&req, format!("3\nabc\r\n0\r\n{CRC}:A\r\n\r\n").as_bytes()), "InvalidRequest", 400);
    assert_err(run(&req, format!("3\r\nabcXY0\r\n{CRC}:A\r\n\r\n").as_bytes()), "InvalidRequest", 400);
}

#[test]
fn payload_variants_are_reported() {
    let req = Signer::default().sign(&Req::new("PUT", "/b/k"), Body::Unsigned);
    assert!(matches!(req.auth(t0()).expect("valid").payload, Payload::Unsigned));
    let req = Signer::default().sign(&Req::new("PUT", "/b/k"), Body::Bytes(b"hello"));
    let Payload::Sha256(hash) = req.auth(t0()).expect("valid").payload else { panic!("signed payload") };
    assert_eq!(hash, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
}

#[test]
fn debug_output_never_shows_keys() {
    let (req, _) = signed_trailer_case("AAAAAA==");
    let authenticated = req.auth(t0()).expect("valid");
    let printed = format!("{authenticated:?}");
    let key = hex::encode(auth_support::signing_key(SK, &T0_STAMP[..8], REGION));
    assert!(!printed.contains(&key), "signing key printed: {printed}");
    assert!(!printed.contains(SK), "secret printed: {printed}");
    let Payload::Chunked(spec) = authenticated.payload else { panic!("chunked") };
    let printed = format!("{:?}", ChunkedDecoder::new(spec, 1 << 20));
    assert!(!printed.contains(&key) && !printed.contains(SK), "{printed}");
}

#[test]
fn tolerated_trailer_layouts() {
    let (a, _) = data();
    let req = chunked_put(UNSIGNED_TRAILER, a.len(), Some(CRC));
    let mut framed = format!("{:X}\r\n", a.len()).into_bytes();
    framed.extend_from_slice(&a);
    framed.extend_from_slice(b"\r\n0\r\n");
    // The documented layout, a blank line before the trailers, and no closing blank line.
    for tail in [
        format!("{CRC}:AAAAAA==\r\n\r\n"),
        format!("\r\n{CRC}:AAAAAA==\r\n\r\n"),
        format!("{CRC}:AAAAAA==\r\n"),
    ] {
        let body = [framed.as_slice(), tail.as_bytes()].concat();
        let (decoded, trailers) = run(&req, &body).unwrap_or_else(|e| panic!("{tail:?}: {e:?}"));
        assert_eq!(decoded, a);
        assert_eq!(trailers.get(CRC), Some("AAAAAA=="));
    }
    // A trailer line cut short is not a trailer.
    let cut = [framed.as_slice(), format!("{CRC}:AAAA").as_bytes()].concat();
    assert_err(run(&req, &cut), "IncompleteBody", 400);
}

#[test]
fn trailer_form_without_declared_trailers() {
    let req = chunked_put(UNSIGNED_TRAILER, 3, None);
    let (decoded, trailers) = run(&req, b"3\r\nabc\r\n0\r\n\r\n").expect("no trailers declared, none sent");
    assert_eq!(decoded, b"abc");
    assert!(trailers.headers.is_empty());
    assert_err(
        run(&req, format!("3\r\nabc\r\n0\r\n{CRC}:AAAAAA==\r\n\r\n").as_bytes()),
        "InvalidRequest",
        400,
    );
}

#[test]
fn empty_signed_body() {
    let req = chunked_put(SIGNED, 0, None);
    let body = signer().encode(&seed_signature(&req), &[], None);
    let (decoded, _) = run(&req, &body).expect("an empty object");
    assert!(decoded.is_empty());
}

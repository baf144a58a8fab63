//! Invariant: no input makes the authentication code panic, and no alteration of a valid
//! aws-chunked body is accepted with different content: every mutated body is either refused
//! or decodes to exactly the original bytes and trailers.
//!
//! Seeded: set AUTH_FUZZ_SEED to replay a run; the seed is printed at the start of each test.

mod auth_support;

use std::time::{SystemTime, UNIX_EPOCH};

use auth_support::{
    chunked_put, chunked_spec, encode_unsigned, seed_signature, t0, ChunkSigner, Req, REGION, SK, T0_STAMP,
};
use gateway::auth::{parse_authorization, ChunkedDecoder, ChunkedSpec};

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn seeded(test: &str) -> Rng {
        let seed = std::env::var("AUTH_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        });
        println!("{test}: AUTH_FUZZ_SEED={seed}");
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

const CRC: &str = "x-amz-checksum-crc32";

type TrailerList = Vec<(String, String)>;
/// One aws-chunked form: its spec, a valid body, the decoded bytes and the trailers.
type Case = (ChunkedSpec, Vec<u8>, Vec<u8>, TrailerList);

/// The three forms: (spec, valid body, decoded bytes, trailers).
fn cases() -> Vec<Case> {
    let a: Vec<u8> = (0..700u32).map(|i| (i * 7) as u8).collect();
    let b = b"0123456789".to_vec();
    let data = [a.clone(), b.clone()].concat();
    let signer = ChunkSigner::new(SK, T0_STAMP, REGION);
    let mut out = Vec::new();

    let req = chunked_put("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", data.len(), None);
    let body = signer.encode(&seed_signature(&req), &[&a, &b], None);
    out.push((chunked_spec(req.auth(t0())), body, data.clone(), vec![]));

    let req = chunked_put("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", data.len(), Some(CRC));
    let body = signer.encode(&seed_signature(&req), &[&a, &b], Some(&[(CRC, "AAAAAA==")]));
    out.push((
        chunked_spec(req.auth(t0())),
        body,
        data.clone(),
        vec![(CRC.to_owned(), "AAAAAA==".to_owned())],
    ));

    let req = chunked_put("STREAMING-UNSIGNED-PAYLOAD-TRAILER", data.len(), Some(CRC));
    let body = encode_unsigned(&[&a, &b], &[(CRC, "AAAAAA==")]);
    out.push((chunked_spec(req.auth(t0())), body, data, vec![(CRC.to_owned(), "AAAAAA==".to_owned())]));
    out
}

/// Decodes `body` fed in random pieces. Panics propagate (and fail the test).
fn decode_randomly(
    rng: &mut Rng,
    spec: ChunkedSpec,
    body: &[u8],
) -> Result<(Vec<u8>, TrailerList), gateway::auth::AuthError> {
    let declared = spec.decoded_content_length();
    let mut decoder = ChunkedDecoder::new(spec, 1 << 20);
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (piece, tail) = rest.split_at(1 + rng.below(rest.len().min(300)));
        let fed = decoder.feed(piece, &mut out);
        assert!(out.len() as u64 <= declared, "decoded past the declared length");
        fed?;
        rest = tail;
    }
    let trailers = decoder.finish()?;
    Ok((out, trailers.headers))
}

#[test]
fn random_bytes_never_panic_the_decoder() {
    let mut rng = Rng::seeded("random_bytes_never_panic_the_decoder");
    let cases = cases();
    for round in 0..3000 {
        let (spec, valid, data, trailers) = &cases[round % cases.len()];
        // Half pure noise, half noise behind a plausible prefix of a valid body.
        let mut body = if round % 2 == 0 { Vec::new() } else { valid[..rng.below(valid.len())].to_vec() };
        let len = rng.below(600);
        body.extend(rng.bytes(len));
        // Accepted only with the valid body's content: a prefix that stops after the last
        // trailer line's CRLF (no closing blank line) is tolerated, as the decoder documents.
        if let Ok(decoded) = decode_randomly(&mut rng, spec.clone(), &body) {
            assert_eq!(
                decoded,
                (data.clone(), trailers.clone()),
                "round {round}: accepted different content"
            );
        }
    }
}

#[test]
fn mutated_bodies_are_refused_or_unchanged() {
    let mut rng = Rng::seeded("mutated_bodies_are_refused_or_unchanged");
    for (spec, valid, data, trailers) in cases() {
        // The valid body decodes whatever the split.
        let decoded = decode_randomly(&mut rng, spec.clone(), &valid).expect("valid body");
        assert_eq!(decoded, (data.clone(), trailers.clone()));
        let signed = spec.is_signed();
        for _ in 0..1500 {
            let mut body = valid.clone();
            match rng.below(4) {
                0 => {
                    for _ in 0..1 + rng.below(3) {
                        let at = rng.below(body.len());
                        body[at] ^= 1 + rng.below(255) as u8;
                    }
                }
                1 => body.truncate(rng.below(body.len())),
                2 => {
                    let at = rng.below(body.len());
                    let len = 1 + rng.below(8);
                    let noise = rng.bytes(len);
                    body.splice(at..at, noise);
                }
                _ => {
                    let at = rng.below(body.len());
                    let len = 1 + rng.below(8).min(body.len() - at - 1);
                    body.drain(at..at + len);
                }
            }
            if let Ok(got) = decode_randomly(&mut rng, spec.clone(), &body) {
                // Unsigned bodies have no integrity of their own (the trailer checksum,
                // checked by the caller, is what covers them), so only the framing must hold.
                if signed {
                    assert_eq!(
                        got,
                        (data.clone(), trailers.clone()),
                        "a signed body changed and was accepted"
                    );
                } else {
                    assert_eq!(got.0.len(), data.len());
                }
            }
        }
    }
}

#[test]
fn random_authorization_headers_never_panic() {
    let mut rng = Rng::seeded("random_authorization_headers_never_panic");
    let tokens = [
        "AWS4-HMAC-SHA256",
        " ",
        ", ",
        ",",
        "=",
        "Credential",
        "SignedHeaders",
        "Signature",
        "/",
        ";",
        "host",
        "x-amz-date",
        "AKIAIOSFODNN7EXAMPLE",
        "20240301",
        "us-east-1",
        "s3",
        "aws4_request",
        "é",
        "\t",
        "==",
    ];
    for _ in 0..5000 {
        let mut value = String::new();
        for _ in 0..rng.below(24) {
            if rng.below(8) == 0 {
                let len = rng.below(70);
                value.push_str(&String::from_utf8_lossy(&rng.bytes(len)));
            } else {
                value.push_str(tokens[rng.below(tokens.len())]);
            }
        }
        let _ = parse_authorization(&value);
        if http::HeaderValue::from_str(&value).is_ok() {
            let req = Req::new("GET", "/b/k")
                .header("x-amz-date", T0_STAMP)
                .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
                .header("authorization", &value);
            assert!(req.auth(t0()).is_err(), "a random header verified: {value}");
        }
    }
}

#[test]
fn random_presigned_queries_never_panic() {
    let mut rng = Rng::seeded("random_presigned_queries_never_panic");
    let names = [
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    ];
    let values = [
        "AWS4-HMAC-SHA256",
        "AKIAIOSFODNN7EXAMPLE%2F20240301%2Fus-east-1%2Fs3%2Faws4_request",
        T0_STAMP,
        "3600",
        "host",
        "%ZZ",
        "%",
        "+",
        "0",
        "604801",
        "",
    ];
    for _ in 0..3000 {
        let mut query = String::new();
        for i in 0..rng.below(9) {
            if i > 0 {
                query.push('&');
            }
            query.push_str(names[rng.below(names.len())]);
            query.push('=');
            if rng.below(6) == 0 {
                query.push_str(&format!("{:x}", rng.next()));
            } else {
                query.push_str(values[rng.below(values.len())]);
            }
        }
        let uri = format!("/b/k?{query}");
        if uri.parse::<http::Uri>().is_ok() {
            assert!(Req::new("GET", &uri).auth(t0()).is_err(), "a random query verified: {uri}");
        }
    }
}

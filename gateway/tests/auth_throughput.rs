//! Throughput of header verification and aws-chunked decoding, for capacity planning. Ignored
//! by default; run with `cargo test -p gateway --release --test auth_throughput -- --ignored
//! --nocapture`. It asserts only that the work was done, and prints the rates.

mod auth_support;

use std::time::Instant;

use auth_support::{
    chunked_put, chunked_spec, seed_signature, t0, Body, ChunkSigner, Req, Signer, REGION, SK, T0_STAMP,
};
use gateway::auth::ChunkedDecoder;

#[test]
#[ignore = "measurement, not a check"]
fn header_verification_rate() {
    let req =
        Signer::default().sign(&Req::new("GET", "/bucket/some/key.txt?list-type=2&prefix=a"), Body::Unsigned);
    let parts = req.parts();
    let (creds, cfg) = (auth_support::creds(), auth_support::cfg());
    let rounds = 20_000;
    let started = Instant::now();
    for _ in 0..rounds {
        assert!(gateway::auth::authenticate(&parts, &creds, &cfg, t0()).is_ok());
    }
    let per_request_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    println!("authenticate (header, GET): {per_request_us:.2} µs per request");
}

#[test]
#[ignore = "measurement, not a check"]
fn signed_chunk_decoding_rate() {
    let chunk = vec![7u8; 64 * 1024];
    let chunks: Vec<&[u8]> = (0..256).map(|_| chunk.as_slice()).collect();
    let total = chunk.len() * chunks.len();
    let req = chunked_put("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", total, None);
    let body = ChunkSigner::new(SK, T0_STAMP, REGION).encode(&seed_signature(&req), &chunks, None);
    let spec = chunked_spec(req.auth(t0()));
    let started = Instant::now();
    let mut decoder = ChunkedDecoder::new(spec, 1 << 30);
    let mut out = Vec::with_capacity(128 * 1024);
    let mut decoded = 0usize;
    for piece in body.chunks(16 * 1024) {
        out.clear();
        decoder.feed(piece, &mut out).expect("valid");
        decoded += out.len();
    }
    decoder.finish().expect("complete");
    assert_eq!(decoded, total);
    let secs = started.elapsed().as_secs_f64();
    println!("aws-chunked signed decode: {:.0} MiB/s", total as f64 / secs / (1 << 20) as f64);
}

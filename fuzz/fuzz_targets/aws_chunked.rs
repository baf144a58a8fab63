//! aws-chunked bodies, in two modes picked by the first byte.
//!
//! - Raw: the rest of the input is the body of one of the three forms (signed, signed with
//!   trailer, unsigned with trailer), fed in pieces the input chooses. No panic, and the decoder
//!   never produces more than the declared length.
//! - Mutated: the input chooses chunk data and trailers; the body is encoded and signed
//!   correctly, then bytes the input names are overwritten. A signed body is either refused or
//!   decodes to exactly the data and trailers that were signed: no mutation may change what is
//!   stored without breaking the signature.
#![no_main]

use gateway::auth::{ChunkedDecoder, ChunkedSpec};
use holt_fuzz::auth_support::{
    chunked_put, chunked_spec, encode_unsigned, seed_signature, t0, ChunkSigner, REGION, SK, T0_STAMP,
};
use holt_fuzz::Cursor;
use libfuzzer_sys::fuzz_target;

const CRC: &str = "x-amz-checksum-crc32";
const FORMS: [&str; 3] = [
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
];

fn spec(form: usize, decoded: usize) -> ChunkedSpec {
    let trailer = (form > 0).then_some(CRC);
    chunked_spec(chunked_put(FORMS[form], decoded, trailer).auth(t0()))
}

/// Feeds `body` in pieces whose sizes `splits` chooses; the decoded bytes and trailers.
fn decode(
    spec: ChunkedSpec,
    body: &[u8],
    splits: &mut Cursor<'_>,
) -> Option<(Vec<u8>, Vec<(String, String)>)> {
    let declared = spec.decoded_content_length();
    let mut decoder = ChunkedDecoder::new(spec, 1 << 20);
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let step = 1 + usize::from(splits.byte()) * 4;
        let (piece, tail) = rest.split_at(step.min(rest.len()));
        let fed = decoder.feed(piece, &mut out);
        assert!(out.len() as u64 <= declared, "decoded {} bytes past the declared {declared}", out.len());
        assert_eq!(decoder.decoded_bytes(), out.len() as u64);
        fed.ok()?;
        rest = tail;
    }
    let trailers = decoder.finish().ok()?;
    assert_eq!(out.len() as u64, declared, "a finished body is exactly the declared length");
    Some((out, trailers.headers))
}

fuzz_target!(|data: &[u8]| {
    let mut input = Cursor(data);
    let mode = input.byte();
    let form = usize::from(mode >> 1) % FORMS.len();
    if mode & 1 == 0 {
        let declared = usize::from(input.u16());
        let splits_len = usize::from(input.byte());
        let mut splits = Cursor(input.take(splits_len));
        let _ = decode(spec(form, declared), input.rest(), &mut splits);
        return;
    }
    // Chunk data: up to three chunks of the input's bytes, then mutations (offset, byte).
    let chunk_count = 1 + usize::from(input.byte() % 3);
    let chunks: Vec<Vec<u8>> = (0..chunk_count)
        .map(|_| {
            let len = usize::from(input.byte()) * 3;
            input.take(len).to_vec()
        })
        .collect();
    let checksum = if input.byte() & 1 == 0 { "AAAAAA==" } else { "sOO8/Q==" };
    let trailers = [(CRC, checksum)];
    let mutations: Vec<(u16, u8)> =
        (0..usize::from(input.byte() % 4)).map(|_| (input.u16(), input.byte())).collect();
    let splits_len = usize::from(input.byte());
    let mut splits = Cursor(input.take(splits_len));

    let data: Vec<u8> = chunks.concat();
    let refs: Vec<&[u8]> = chunks.iter().filter(|c| !c.is_empty()).map(Vec::as_slice).collect();
    let spec = spec(form, data.len());
    let mut body = match form {
        0 | 1 => {
            let seed = seed_signature(&chunked_put(FORMS[form], data.len(), (form == 1).then_some(CRC)));
            ChunkSigner::new(SK, T0_STAMP, REGION).encode(&seed, &refs, (form == 1).then_some(&trailers[..]))
        }
        _ => encode_unsigned(&refs, &trailers),
    };
    let mut changed = false;
    for (at, byte) in mutations {
        if body.is_empty() {
            break;
        }
        let at = usize::from(at) % body.len();
        changed |= body[at] != byte;
        body[at] = byte;
    }
    let expected_trailers: Vec<(String, String)> =
        if form == 0 { vec![] } else { vec![(CRC.to_owned(), checksum.to_owned())] };
    match decode(spec, &body, &mut splits) {
        Some((out, got_trailers)) if form < 2 => {
            assert_eq!(out, data, "a signed body decoded to other bytes (mutated: {changed})");
            assert_eq!(got_trailers, expected_trailers, "signed trailers changed");
        }
        Some((out, _)) if !changed => assert_eq!(out, data, "an unmutated unsigned body decoded wrong"),
        None if !changed => panic!("a valid {} body was refused", FORMS[form]),
        _ => {}
    }
});

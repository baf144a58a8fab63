//! Incremental decoder and verifier for aws-chunked bodies, in all three forms:
//!
//! ```text
//! STREAMING-AWS4-HMAC-SHA256-PAYLOAD:          hex;chunk-signature=S\r\n DATA \r\n ... 0;chunk-signature=S\r\n \r\n
//! STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER:  ... 0;chunk-signature=S\r\n name:value\r\n x-amz-trailer-signature:S\r\n \r\n
//! STREAMING-UNSIGNED-PAYLOAD-TRAILER:          hex\r\n DATA \r\n ... 0\r\n name:value\r\n \r\n
//! ```
//!
//! Chunk n's signature signs `AWS4-HMAC-SHA256-PAYLOAD\n<time>\n<scope>\n<signature n-1>\n
//! <sha256("")>\n<sha256(data n)>`, starting from the seed (header) signature; the trailer
//! signature signs `AWS4-HMAC-SHA256-TRAILER\n<time>\n<scope>\n<final chunk signature>\n
//! <sha256("name:value\n"...)>`.
//!
//! Invariants: memory use is bounded by `CHUNK_LINE_MAX` plus the trailer limits, whatever the
//! input: chunk data is passed through as it arrives and no buffer is sized from a length the
//! client announced. Decoded bytes are written to `out` before their chunk's signature has been
//! checked (a chunk can be megabytes), so they are authentic only once `finish` returns `Ok`:
//! callers must not commit anything before that. After the first error the decoder is poisoned
//! and repeats that error.

use std::fmt;

use sha2::{Digest, Sha256};

use super::error::AuthError;
use super::payload::ChunkedSpec;
use super::signature::{sha256_hex, Signature, EMPTY_SHA256_HEX};

/// Longest chunk-size or trailer line accepted (a signed chunk header is 83 bytes).
pub const CHUNK_LINE_MAX: usize = 4096;
/// Most trailer lines accepted, the signature line included.
const TRAILER_LINES_MAX: usize = 8;

const TRAILER_SIGNATURE: &str = "x-amz-trailer-signature";

/// Trailing headers of an aws-chunked body, in arrival order, names lower-case. Values are as
/// sent (a checksum is still base64); the caller checks them against the decoded body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trailers {
    /// `(name, value)` pairs, the trailer signature line excluded.
    pub headers: Vec<(String, String)>,
}

impl Trailers {
    /// The value of trailer `name` (lower case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

enum State {
    /// Reading a chunk header line into `line`.
    ChunkHeader,
    /// Passing through the data of the current chunk.
    Data {
        remaining: u64,
    },
    /// Expecting the CRLF that ends a chunk's data; `seen` of its two bytes consumed so far.
    DataEnd {
        seen: u8,
    },
    /// After the final chunk of a form without trailers: expecting its (empty) data's CRLF.
    FinalEnd {
        seen: u8,
    },
    /// Reading trailer lines into `line` until a blank line.
    Trailer,
    Done,
    Failed(AuthError),
}

/// Decodes an aws-chunked body fed in arbitrary pieces, checking every chunk signature (the
/// final empty chunk's included), the trailer signature, the declared trailers and the decoded
/// length.
pub struct ChunkedDecoder {
    spec: ChunkedSpec,
    state: State,
    /// The partial header or trailer line (bytes before its CRLF), at most `CHUNK_LINE_MAX`.
    line: Vec<u8>,
    /// Signature claimed in the current chunk's header (signed forms only).
    claimed: Option<Signature>,
    /// Running hash of the current chunk's data.
    hasher: Sha256,
    /// The signature the next chunk chains from: the seed, then each verified chunk's.
    previous: Option<Signature>,
    decoded_bytes: u64,
    trailers: Vec<(String, String)>,
    trailer_signature: Option<Signature>,
    /// A blank line directly after the final chunk is tolerated once before trailers.
    skipped_blank: bool,
}

impl fmt::Debug for ChunkedDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkedDecoder")
            .field("spec", &self.spec)
            .field("decoded_bytes", &self.decoded_bytes)
            .finish_non_exhaustive()
    }
}

impl ChunkedDecoder {
    /// A decoder for a body announced by `spec`, refusing more than `max_decoded_bytes`.
    pub fn new(spec: ChunkedSpec, max_decoded_bytes: u64) -> Self {
        let state = if spec.decoded_content_length > max_decoded_bytes {
            State::Failed(AuthError::EntityTooLarge)
        } else {
            State::ChunkHeader
        };
        let previous = spec.signing.as_ref().map(|s| s.seed.clone());
        ChunkedDecoder {
            spec,
            state,
            line: Vec::new(),
            claimed: None,
            hasher: Sha256::new(),
            previous,
            decoded_bytes: 0,
            trailers: Vec::new(),
            trailer_signature: None,
            skipped_blank: false,
        }
    }

    /// Decoded bytes produced so far.
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded_bytes
    }

    /// Consumes `input`, appending decoded body bytes to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), AuthError> {
        if let State::Failed(err) = &self.state {
            return Err(err.clone());
        }
        let result = self.feed_inner(input, out);
        if let Err(err) = &result {
            self.state = State::Failed(err.clone());
        }
        result
    }

    /// Ends the body. Fails unless the final chunk (and, for trailer forms, the trailers and
    /// their signature) arrived and verified, and the decoded length matched exactly.
    pub fn finish(mut self) -> Result<Trailers, AuthError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Done => Ok(Trailers { headers: self.trailers }),
            State::Failed(err) => Err(err),
            // Tolerate a body that ends right after the last trailer line's CRLF without the
            // closing blank line: everything signed has arrived and is checked here.
            State::Trailer if self.line.is_empty() && !self.trailers.is_empty() => {
                self.end_trailers()?;
                Ok(Trailers { headers: self.trailers })
            }
            _ => Err(AuthError::IncompleteBody),
        }
    }

    fn feed_inner(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), AuthError> {
        while !input.is_empty() {
            match self.state {
                State::ChunkHeader => {
                    if let Some(rest) = self.take_line(input)? {
                        input = rest;
                        self.start_chunk()?;
                    } else {
                        input = &[];
                    }
                }
                State::Data { remaining } => {
                    // `take` fits in usize: it is at most input.len().
                    let take = usize::try_from(remaining).map_or(input.len(), |r| r.min(input.len()));
                    let (data, rest) = input.split_at(take);
                    out.extend_from_slice(data);
                    self.hasher.update(data);
                    self.decoded_bytes += take as u64;
                    input = rest;
                    let remaining = remaining - take as u64;
                    self.state =
                        if remaining == 0 { State::DataEnd { seen: 0 } } else { State::Data { remaining } };
                }
                State::DataEnd { seen } | State::FinalEnd { seen } => {
                    let expected = if seen == 0 { b'\r' } else { b'\n' };
                    if input[0] != expected {
                        return Err(AuthError::InvalidRequest(
                            "aws-chunked chunk data is not followed by CRLF",
                        ));
                    }
                    input = &input[1..];
                    let is_final = matches!(self.state, State::FinalEnd { .. });
                    self.state = match (seen, is_final) {
                        (0, false) => State::DataEnd { seen: 1 },
                        (0, true) => State::FinalEnd { seen: 1 },
                        (_, false) => {
                            self.verify_chunk()?;
                            State::ChunkHeader
                        }
                        (_, true) => State::Done,
                    };
                }
                State::Trailer => {
                    if let Some(rest) = self.take_line(input)? {
                        input = rest;
                        self.trailer_line()?;
                    } else {
                        input = &[];
                    }
                }
                State::Done => {
                    return Err(AuthError::InvalidRequest("data after the end of the aws-chunked body"));
                }
                State::Failed(ref err) => return Err(err.clone()),
            }
        }
        Ok(())
    }

    /// Moves bytes up to and including the next LF into `line` (without the CRLF). Returns the
    /// input after the LF, or `None` if the line is not complete yet.
    fn take_line<'a>(&mut self, input: &'a [u8]) -> Result<Option<&'a [u8]>, AuthError> {
        let too_long = AuthError::InvalidRequest("aws-chunked header or trailer line is too long");
        match input.iter().position(|&b| b == b'\n') {
            None => {
                if self.line.len() + input.len() > CHUNK_LINE_MAX {
                    return Err(too_long);
                }
                self.line.extend_from_slice(input);
                Ok(None)
            }
            Some(lf) => {
                if self.line.len() + lf > CHUNK_LINE_MAX {
                    return Err(too_long);
                }
                self.line.extend_from_slice(&input[..lf]);
                if self.line.pop() != Some(b'\r') {
                    return Err(AuthError::InvalidRequest("aws-chunked lines must end with CRLF"));
                }
                Ok(Some(&input[lf + 1..]))
            }
        }
    }

    /// Parses the chunk header in `line` and enters the chunk's data.
    fn start_chunk(&mut self) -> Result<(), AuthError> {
        let bad = AuthError::InvalidRequest("malformed aws-chunked chunk header");
        let line = std::mem::take(&mut self.line);
        let text = std::str::from_utf8(&line).map_err(|_| bad.clone())?;
        let (size_hex, extension) = match text.split_once(';') {
            Some((size, ext)) => (size, Some(ext)),
            None => (text, None),
        };
        if size_hex.is_empty() || size_hex.len() > 16 || !size_hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad);
        }
        let size = u64::from_str_radix(size_hex, 16).map_err(|_| bad.clone())?;
        self.claimed = match (self.spec.signing.is_some(), extension) {
            (true, Some(ext)) => {
                let sig = ext.strip_prefix("chunk-signature=").ok_or_else(|| bad.clone())?;
                Some(Signature::from_hex(sig).ok_or(bad)?)
            }
            (false, None) => None,
            // A signed form needs a signature on every chunk; the unsigned form has none.
            (true, None) => return Err(AuthError::SignatureDoesNotMatch),
            (false, Some(_)) => return Err(bad),
        };
        let declared = self.spec.decoded_content_length;
        if size > declared - self.decoded_bytes {
            return Err(AuthError::InvalidRequest(
                "the aws-chunked body is longer than x-amz-decoded-content-length",
            ));
        }
        self.hasher = Sha256::new();
        if size > 0 {
            self.state = State::Data { remaining: size };
            return Ok(());
        }
        // The final, empty chunk: it is signed like any other and must close the exact length.
        self.verify_chunk()?;
        if self.decoded_bytes != declared {
            return Err(AuthError::IncompleteBody);
        }
        self.state = if self.spec.has_trailer { State::Trailer } else { State::FinalEnd { seen: 0 } };
        Ok(())
    }

    /// Checks the current chunk's claimed signature and advances the chain.
    fn verify_chunk(&mut self) -> Result<(), AuthError> {
        let Some(signing) = &self.spec.signing else {
            return Ok(());
        };
        let (Some(claimed), Some(previous)) = (self.claimed.take(), self.previous.as_ref()) else {
            return Err(AuthError::SignatureDoesNotMatch);
        };
        let data_hash = hex::encode(std::mem::take(&mut self.hasher).finalize());
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256_HEX}\n{data_hash}",
            signing.timestamp,
            signing.scope,
            previous.to_hex()
        );
        let computed = signing.key.sign(string_to_sign.as_bytes());
        if !computed.verify(&claimed) {
            return Err(AuthError::SignatureDoesNotMatch);
        }
        self.previous = Some(computed);
        Ok(())
    }

    /// Handles one complete trailer line from `line`.
    fn trailer_line(&mut self) -> Result<(), AuthError> {
        let bad = AuthError::InvalidRequest("malformed aws-chunked trailer");
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            let nothing_yet = self.trailers.is_empty() && self.trailer_signature.is_none();
            if nothing_yet && !self.skipped_blank && !self.spec.declared_trailers.is_empty() {
                self.skipped_blank = true;
                return Ok(());
            }
            self.end_trailers()?;
            self.state = State::Done;
            return Ok(());
        }
        if self.trailer_signature.is_some() {
            return Err(AuthError::InvalidRequest("x-amz-trailer-signature must be the last trailer"));
        }
        if self.trailers.len() >= TRAILER_LINES_MAX {
            return Err(bad);
        }
        let text = std::str::from_utf8(&line).map_err(|_| bad.clone())?;
        let (name, value) = text.split_once(':').ok_or_else(|| bad.clone())?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        if name == TRAILER_SIGNATURE {
            if self.spec.signing.is_none() {
                return Err(bad);
            }
            self.trailer_signature = Some(Signature::from_hex(value).ok_or(bad)?);
            return Ok(());
        }
        if !self.spec.declared_trailers.contains(&name) {
            return Err(AuthError::InvalidRequest("a trailer was sent that x-amz-trailer did not declare"));
        }
        if self.trailers.iter().any(|(n, _)| *n == name) {
            return Err(AuthError::InvalidRequest("a trailer was sent twice"));
        }
        self.trailers.push((name, value.to_owned()));
        Ok(())
    }

    /// All trailers are in: check that each declared one arrived and the trailer signature.
    fn end_trailers(&mut self) -> Result<(), AuthError> {
        if self.trailers.len() != self.spec.declared_trailers.len() {
            return Err(AuthError::IncompleteBody);
        }
        let Some(signing) = &self.spec.signing else {
            return Ok(());
        };
        let (Some(claimed), Some(previous)) = (self.trailer_signature.as_ref(), self.previous.as_ref())
        else {
            return Err(AuthError::SignatureDoesNotMatch);
        };
        let mut canonical = String::new();
        for (name, value) in &self.trailers {
            canonical.push_str(name);
            canonical.push(':');
            canonical.push_str(value);
            canonical.push('\n');
        }
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
            signing.timestamp,
            signing.scope,
            previous.to_hex(),
            sha256_hex(canonical.as_bytes())
        );
        if signing.key.sign(string_to_sign.as_bytes()).verify(claimed) {
            Ok(())
        } else {
            Err(AuthError::SignatureDoesNotMatch)
        }
    }
}

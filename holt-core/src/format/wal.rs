//! Write-ahead log bytes: the segment header and the redo record (byte tables in
//! `docs/format.md`, section "Write-ahead log"). No I/O here.
//!
//! A record is the logical redo of one whole batch: the puts and deletes that were applied,
//! never the conditions that were checked. Replaying records in log order over a checkpoint
//! image taken at a consistent cut reproduces the state.

use crate::api::{BatchOp, Op};

/// First 4 bytes of every record: "HWAL".
pub(crate) const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"HWAL");
/// Record format version written. Version 1 records (no `durable` field, a 24-byte header)
/// are still read.
pub(crate) const RECORD_VERSION: u8 = 2;
/// Record kind: a batch of puts and deletes.
pub(crate) const KIND_BATCH: u8 = 1;
/// Bytes before the body: magic, len, lsn, kind, version, reserved, op count, durable.
pub(crate) const RECORD_HEADER_BYTES: usize = 32;
/// The header of a version 1 record: no `durable` field.
const RECORD_V1_HEADER_BYTES: usize = 24;
/// Bytes after the body: the CRC32C.
pub(crate) const RECORD_TRAILER_BYTES: usize = 4;
/// Records start and end on this alignment, so the ring and the files are sequences of
/// whole 8-byte words and the first word of a record (magic | len) can be published atomically.
pub(crate) const RECORD_ALIGN: usize = 8;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// Segment header: magic "HOLTWALS", version, segment number, base lsn, CRC32C.
pub(crate) const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"HOLTWALS");
/// Version 2 segments carry version 2 records: a reader that predates them refuses the
/// segment (unknown version) instead of reading the records as a torn tail. Version 1
/// segments are still read.
pub(crate) const SEGMENT_VERSION: u32 = 2;
pub(crate) const SEGMENT_HEADER_BYTES: usize = 32;

const _: () = assert!(RECORD_HEADER_BYTES & (RECORD_ALIGN - 1) == 0);
const _: () = assert!(SEGMENT_HEADER_BYTES & (RECORD_ALIGN - 1) == 0);
const _: () = assert!(RECORD_ALIGN == 8, "the ring publishes records through their first 8-byte word");

/// Rounds a record length up to the alignment: the bytes it occupies in the ring and the file.
pub(crate) const fn padded_len(len: usize) -> usize {
    (len + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// Unpadded length of the record that would encode `ops`.
pub(crate) fn record_len(ops: &[Op<'_>]) -> usize {
    let body: usize = ops
        .iter()
        .map(|op| match op {
            Op::Put { key, value, .. } => 7 + key.len() + value.len(),
            Op::Delete { key, .. } => 3 + key.len(),
        })
        .sum();
    RECORD_HEADER_BYTES + body + RECORD_TRAILER_BYTES
}

/// Encodes the redo record of `ops` with sequence `lsn` into `out` (cleared first), padded
/// with zeros to [`RECORD_ALIGN`]. Keys must be at most 65535 bytes (the API allows 4096).
/// `durable`: a position below which the log was durable when the record was made, so that
/// replay can tell a synced record lost later from an unsynced torn tail (see `Record`).
pub(crate) fn encode_record(ops: &[Op<'_>], lsn: u64, durable: u64, out: &mut Vec<u8>) {
    let len = record_len(ops);
    out.clear();
    out.reserve(padded_len(len));
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.push(KIND_BATCH);
    out.push(RECORD_VERSION);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&u32::try_from(ops.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&durable.to_le_bytes());
    for op in ops {
        match *op {
            Op::Put { key, value, .. } => {
                debug_assert!(key.len() <= usize::from(u16::MAX));
                out.push(OP_PUT);
                out.extend_from_slice(&(key.len() as u16).to_le_bytes());
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
                out.extend_from_slice(value);
            }
            Op::Delete { key, .. } => {
                debug_assert!(key.len() <= usize::from(u16::MAX));
                out.push(OP_DELETE);
                out.extend_from_slice(&(key.len() as u16).to_le_bytes());
                out.extend_from_slice(key);
            }
        }
    }
    let crc = crc32c::crc32c(out);
    out.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len(), len);
    out.resize(padded_len(len), 0);
}

/// Why bytes at some offset are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordError {
    /// The first word is zero: preallocated space that was never written (the end of the log).
    Empty,
    /// Fewer bytes remain than the header or the length field asks for.
    Truncated,
    /// Wrong magic, impossible length, unknown kind or version.
    BadHeader,
    /// The checksum does not match.
    BadChecksum,
    /// The checksum matches but the body does not parse.
    BadBody,
}

impl RecordError {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            RecordError::Empty => "empty",
            RecordError::Truncated => "record runs past the end of the file",
            RecordError::BadHeader => "bad record header",
            RecordError::BadChecksum => "record checksum mismatch",
            RecordError::BadBody => "record body does not parse",
        }
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub lsn: u64,
    /// The log was durable below this position before this record was written (0 when the
    /// record does not say: version 1). Whenever the record exists at all, the claim is true,
    /// so a bad record below it was synced and then lost: corruption, not a torn tail.
    pub durable: u64,
    pub ops: Vec<BatchOp>,
    /// Bytes the record occupies, padding included.
    pub padded_len: usize,
}

/// Reads the length field of the record starting at `bytes`, validating the header only.
pub(crate) fn peek_len(bytes: &[u8], max_len: usize) -> Result<usize, RecordError> {
    if bytes.len() < 8 {
        return Err(RecordError::Truncated);
    }
    let word = u64::from_le_bytes(bytes[..8].try_into().map_err(|_| RecordError::Truncated)?);
    if word == 0 {
        return Err(RecordError::Empty);
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().map_err(|_| RecordError::Truncated)?);
    let len = u32::from_le_bytes(bytes[4..8].try_into().map_err(|_| RecordError::Truncated)?) as usize;
    if magic != RECORD_MAGIC || len < RECORD_V1_HEADER_BYTES + RECORD_TRAILER_BYTES || len > max_len {
        return Err(RecordError::BadHeader);
    }
    Ok(len)
}

/// Decodes the record at the start of `bytes`. `max_len` bounds the length field (a record
/// can never be larger than the ring that carried it).
pub(crate) fn decode_record(bytes: &[u8], max_len: usize) -> Result<Record, RecordError> {
    let len = peek_len(bytes, max_len)?;
    if bytes.len() < len {
        return Err(RecordError::Truncated);
    }
    let rec = &bytes[..len];
    let stored = u32::from_le_bytes(rec[len - 4..].try_into().map_err(|_| RecordError::Truncated)?);
    if crc32c::crc32c(&rec[..len - 4]) != stored {
        return Err(RecordError::BadChecksum);
    }
    let header = match rec[17] {
        1 => RECORD_V1_HEADER_BYTES,
        RECORD_VERSION => RECORD_HEADER_BYTES,
        _ => return Err(RecordError::BadHeader),
    };
    if rec[16] != KIND_BATCH || len < header + RECORD_TRAILER_BYTES {
        return Err(RecordError::BadHeader);
    }
    let word = |at: usize| u64::from_le_bytes(rec[at..at + 8].try_into().unwrap_or([0; 8]));
    let lsn = word(8);
    let count = u32::from_le_bytes(rec[20..24].try_into().map_err(|_| RecordError::BadHeader)?) as usize;
    let durable = if header == RECORD_HEADER_BYTES { word(24) } else { 0 };
    let body = &rec[header..len - RECORD_TRAILER_BYTES];
    let ops = decode_body(body, count).ok_or(RecordError::BadBody)?;
    Ok(Record { lsn, durable, ops, padded_len: padded_len(len) })
}

fn decode_body(mut body: &[u8], count: usize) -> Option<Vec<BatchOp>> {
    // Each op takes at least 3 bytes: bound the allocation by what the body can hold.
    let mut ops = Vec::with_capacity(count.min(body.len() / 3));
    for _ in 0..count {
        let (&tag, rest) = body.split_first()?;
        let key_len = usize::from(u16::from_le_bytes(rest.get(..2)?.try_into().ok()?));
        body = &rest[2..];
        match tag {
            OP_PUT => {
                let value_len = u32::from_le_bytes(body.get(..4)?.try_into().ok()?) as usize;
                body = &body[4..];
                let key = body.get(..key_len)?.to_vec();
                let value = body.get(key_len..key_len.checked_add(value_len)?)?.to_vec();
                body = &body[key_len + value_len..];
                ops.push(BatchOp::Put { key, value, condition: crate::api::Condition::None });
            }
            OP_DELETE => {
                let key = body.get(..key_len)?.to_vec();
                body = &body[key_len..];
                ops.push(BatchOp::Delete { key, condition: crate::api::Condition::None });
            }
            _ => return None,
        }
    }
    body.is_empty().then_some(ops)
}

/// The header at the start of every segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// The segment's number (also in its file name).
    pub segment: u64,
    /// Log position (lsn) of the first record in the segment.
    pub base_lsn: u64,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES];
        out[0..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
        out[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        out[12..20].copy_from_slice(&self.segment.to_le_bytes());
        out[20..28].copy_from_slice(&self.base_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&out[..28]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// `Ok(None)` for an all-zero header: a preallocated segment nothing was written to.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Option<SegmentHeader>, &'static str> {
        let Some(bytes) = bytes.get(..SEGMENT_HEADER_BYTES) else {
            return Ok(None);
        };
        if bytes.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let word = |r| le_word(bytes, r);
        if word(0..8) != SEGMENT_MAGIC {
            return Err("bad segment magic");
        }
        if !(1..=u64::from(SEGMENT_VERSION)).contains(&word(8..12)) {
            return Err("unknown segment version");
        }
        if crc32c::crc32c(&bytes[..28]) != word(28..32) as u32 {
            return Err("segment header checksum mismatch");
        }
        Ok(Some(SegmentHeader { segment: word(12..20), base_lsn: word(20..28) }))
    }

    /// The format version of a header `decode` accepted.
    pub(crate) fn version_of(bytes: &[u8]) -> u32 {
        le_word(bytes, 8..12) as u32
    }
}

/// The sync mark file: the log position up to which the log was last known durable. The
/// flusher overwrites it after a successful fdatasync (at most every `MARK_INTERVAL`) and
/// never syncs it, so after a crash it may be older than the truth (or gone), never newer: a
/// lower bound that lets replay tell a damaged synced record near the end of the log from a
/// torn unsynced tail.
pub(crate) const SYNC_MARK_NAME: &str = "WAL-SYNCED";
/// Sync mark: magic "HOLTSYNC", synced lsn, CRC32C of the first 16 bytes.
pub(crate) const SYNC_MARK_MAGIC: u64 = u64::from_le_bytes(*b"HOLTSYNC");
pub(crate) const SYNC_MARK_BYTES: usize = 20;

/// Encodes a sync mark saying the log is durable below `synced_lsn`.
pub(crate) fn encode_sync_mark(synced_lsn: u64) -> [u8; SYNC_MARK_BYTES] {
    let mut out = [0u8; SYNC_MARK_BYTES];
    out[..8].copy_from_slice(&SYNC_MARK_MAGIC.to_le_bytes());
    out[8..16].copy_from_slice(&synced_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The synced lsn of a sync mark, or `None` when the bytes are not a whole, intact mark (a
/// mark is a hint: a damaged one is ignored, never an error).
pub(crate) fn decode_sync_mark(bytes: &[u8]) -> Option<u64> {
    let b = bytes.get(..SYNC_MARK_BYTES)?;
    let word = |r| le_word(b, r);
    if word(0..8) != SYNC_MARK_MAGIC || crc32c::crc32c(&b[..16]) != word(16..20) as u32 {
        return None;
    }
    Some(word(8..16))
}

/// The cut mark file: the byte range of a log segment that an open is zeroing (a torn tail
/// being cut, see `wal::replay`). Written and synced, with the directory, before the zeros
/// are written; removed once they are durable. A cut whose fdatasync fails leaves its zeros
/// in the page cache only (marked clean, never written again) and the torn bytes on disk:
/// the mark tells the next open to write those zeros again before new records follow.
pub(crate) const CUT_MARK_NAME: &str = "WAL-CUT";
/// Cut mark: magic "HOLTCUT\0", segment number, first and end file offsets of the range,
/// CRC32C of the first 32 bytes.
pub(crate) const CUT_MARK_MAGIC: u64 = u64::from_le_bytes(*b"HOLTCUT\0");
pub(crate) const CUT_MARK_BYTES: usize = 36;

/// A range of a segment file being zeroed (see [`CUT_MARK_NAME`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CutMark {
    pub segment: u64,
    pub from: u64,
    pub to: u64,
}

impl CutMark {
    pub(crate) fn encode(&self) -> [u8; CUT_MARK_BYTES] {
        let mut out = [0u8; CUT_MARK_BYTES];
        out[0..8].copy_from_slice(&CUT_MARK_MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&self.segment.to_le_bytes());
        out[16..24].copy_from_slice(&self.from.to_le_bytes());
        out[24..32].copy_from_slice(&self.to.to_le_bytes());
        let crc = crc32c::crc32c(&out[..32]);
        out[32..36].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// `None` unless the bytes are a whole, intact mark.
    pub(crate) fn decode(bytes: &[u8]) -> Option<CutMark> {
        let b = bytes.get(..CUT_MARK_BYTES)?;
        let word = |r| le_word(b, r);
        if word(0..8) != CUT_MARK_MAGIC || crc32c::crc32c(&b[..32]) != word(32..36) as u32 {
            return None;
        }
        Some(CutMark { segment: word(8..16), from: word(16..24), to: word(24..32) })
    }
}

/// The little-endian integer in `bytes[r]` (at most 8 bytes).
fn le_word(bytes: &[u8], r: std::ops::Range<usize>) -> u64 {
    bytes[r].iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// File name of segment `n`: fixed width so names sort in log order.
pub(crate) fn segment_name(n: u64) -> String {
    format!("wal-{n:016}.log")
}

/// The segment number in a file name made by [`segment_name`].
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 16 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ops_of, Condition};

    #[test]
    fn sync_mark_round_trip_and_damage() {
        let mark = encode_sync_mark(0x0123_4567_89ab_cdef);
        assert_eq!(decode_sync_mark(&mark), Some(0x0123_4567_89ab_cdef));
        for i in 0..SYNC_MARK_BYTES {
            let mut bad = mark;
            bad[i] ^= 0x40;
            assert_eq!(decode_sync_mark(&bad), None, "flipped byte {i}");
        }
        assert_eq!(decode_sync_mark(&mark[..SYNC_MARK_BYTES - 1]), None);
        assert_eq!(decode_sync_mark(&[0; SYNC_MARK_BYTES]), None);
    }

    fn sample() -> Vec<BatchOp> {
        vec![
            BatchOp::Put { key: b"a/b".to_vec(), value: b"{\"x\":1}".to_vec(), condition: Condition::Absent },
            BatchOp::Delete { key: vec![0, 1, 2], condition: Condition::None },
            BatchOp::Put { key: vec![0xff; 4096], value: vec![], condition: Condition::None },
        ]
    }

    #[test]
    fn round_trip_drops_conditions() {
        let mut buf = Vec::new();
        encode_record(&ops_of(&sample()), 4242, 1000, &mut buf);
        assert_eq!(buf.len() % RECORD_ALIGN, 0);
        let rec = decode_record(&buf, 1 << 20).expect("decodes");
        assert_eq!(rec.lsn, 4242);
        assert_eq!(rec.durable, 1000);
        assert_eq!(rec.padded_len, buf.len());
        let expect: Vec<BatchOp> = sample()
            .into_iter()
            .map(|op| match op {
                BatchOp::Put { key, value, .. } => BatchOp::Put { key, value, condition: Condition::None },
                BatchOp::Delete { key, .. } => BatchOp::Delete { key, condition: Condition::None },
            })
            .collect();
        assert_eq!(rec.ops, expect);
    }

    /// A version 1 record (24-byte header, no `durable` field) reads as one that claims
    /// nothing about durability.
    #[test]
    fn version_1_records_are_read() {
        let mut v2 = Vec::new();
        let sample = sample();
        let ops = ops_of(&sample[..2]);
        encode_record(&ops, 64, 40, &mut v2);
        let len = record_len(&ops) - 8;
        let mut v1: Vec<u8> = [&v2[..24], &v2[32..len + 4]].concat();
        v1[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        v1[17] = 1;
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        v1.resize(padded_len(len), 0);
        let rec = decode_record(&v1, 1 << 20).expect("a version 1 record decodes");
        let new = decode_record(&v2, 1 << 20).expect("decodes");
        assert_eq!((rec.lsn, rec.durable, &rec.ops), (64, 0, &new.ops));
        assert_eq!(rec.padded_len, padded_len(len));
        v1[17] = 3;
        assert!(decode_record(&v1, 1 << 20).is_err(), "version 3 is refused");
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let mut buf = Vec::new();
        encode_record(&ops_of(&sample()[..2]), 8, 8, &mut buf);
        let len = record_len(&ops_of(&sample()[..2]));
        for i in 0..len {
            for bit in [0x01u8, 0x80] {
                let mut bad = buf.clone();
                bad[i] ^= bit;
                assert!(decode_record(&bad, 1 << 20).is_err(), "flip at byte {i} went unnoticed");
            }
        }
    }

    #[test]
    fn zero_word_is_end_and_short_is_truncated() {
        assert_eq!(decode_record(&[0u8; 64], 1 << 20), Err(RecordError::Empty));
        let mut buf = Vec::new();
        encode_record(&ops_of(&sample()), 8, 8, &mut buf);
        assert_eq!(decode_record(&buf[..40], 1 << 20), Err(RecordError::Truncated));
        assert_eq!(decode_record(&buf, 64), Err(RecordError::BadHeader));
    }

    #[test]
    fn segment_header_and_names() {
        let h = SegmentHeader { segment: 7, base_lsn: 1 << 40 };
        let bytes = h.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(Some(h)));
        assert_eq!(SegmentHeader::decode(&[0u8; 32]), Ok(None));
        let mut bad = bytes;
        bad[21] ^= 1;
        assert!(SegmentHeader::decode(&bad).is_err());
        assert_eq!(parse_segment_name(&segment_name(12)), Some(12));
        assert_eq!(parse_segment_name("wal-12.log"), None);
        assert!(segment_name(9) < segment_name(10));
    }
}

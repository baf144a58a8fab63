//! Node records: how one node of the tree is spelled inside a frame body.
//!
//! A frame body is a post-order sequence of records: every node's children come before it,
//! so a decoder keeps a stack of finished nodes and an inner record pops its children off it.
//! An inner record also says how far back each of its children's records starts, so a point
//! lookup can walk the encoded frame from its root (the header names the root's offset) to one
//! leaf without decoding the rest.
//!
//! | record | bytes |
//! |---|---|
//! | leaf  | `0x01`, varint suffix_len, suffix, varint value_len, value, varint version |
//! | link  | `0x02`, varint frame_id |
//! | inner | `0x10 \| kind \| 0x04 if terminal`, varint prefix_len, prefix, varint child_count, child keys, back distances |
//!
//! Child keys are `child_count` strictly ascending bytes, except for kind N256 where they are a
//! 32-byte bitmap (bit `b % 8` of byte `b / 8` set for each child byte `b`). An inner record with
//! a terminal pops one more record (a leaf with an empty suffix) below its children.
//! Back distances: one 3-byte little-endian integer per record the inner record pops, the
//! terminal's first (if any), then each child's in key order: the inner record's offset minus
//! that record's offset (always positive: a lookup only ever moves backwards, so it ends).
//! Varints are LEB128: 7 bits per byte, least significant group first, at most 10 bytes.

use crate::api::{KEY_LEN_MAX, VALUE_LEN_MAX};

pub(crate) const TAG_LEAF: u8 = 0x01;
pub(crate) const TAG_LINK: u8 = 0x02;
/// Inner records use tags `0x10..=0x17`: the low two bits are the kind, bit 2 the terminal flag.
pub(crate) const TAG_INNER: u8 = 0x10;
const TAG_INNER_TERMINAL: u8 = 0x04;
const BITMAP_LEN: usize = 32;
/// Bytes of one back distance in an inner record.
pub(crate) const DISTANCE_LEN: usize = 3;
/// Back distances are below this (frames are far smaller).
pub(crate) const DISTANCE_LIMIT: usize = 1 << (8 * DISTANCE_LEN);
const _: () = assert!(super::FRAME_SIZE < DISTANCE_LIMIT, "a back distance spans a frame");

/// The fan-out class of an inner node (the in-memory layout is kept across encode/decode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum InnerKind {
    N4 = 0,
    N16 = 1,
    N48 = 2,
    N256 = 3,
}

impl InnerKind {
    /// Most children a node of this kind holds.
    pub(crate) const fn capacity(self) -> usize {
        match self {
            InnerKind::N4 => 4,
            InnerKind::N16 => 16,
            InnerKind::N48 => 48,
            InnerKind::N256 => 256,
        }
    }
    fn from_bits(bits: u8) -> InnerKind {
        match bits & 3 {
            0 => InnerKind::N4,
            1 => InnerKind::N16,
            2 => InnerKind::N48,
            _ => InnerKind::N256,
        }
    }
}

/// Bytes a varint of `v` takes.
pub(crate) const fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded length of a leaf record.
pub(crate) const fn leaf_len(suffix_len: usize, value_len: usize, version: u64) -> usize {
    1 + varint_len(suffix_len as u64)
        + suffix_len
        + varint_len(value_len as u64)
        + value_len
        + varint_len(version)
}

/// Encoded length of an inner record (its terminal leaf and children are records of their own).
pub(crate) const fn inner_len(
    kind: InnerKind,
    prefix_len: usize,
    child_count: usize,
    has_terminal: bool,
) -> usize {
    let keys = match kind {
        InnerKind::N256 => BITMAP_LEN,
        _ => child_count,
    };
    let popped = child_count + has_terminal as usize;
    1 + varint_len(prefix_len as u64)
        + prefix_len
        + varint_len(child_count as u64)
        + keys
        + DISTANCE_LEN * popped
}

/// Encoded length of a link record.
pub(crate) const fn link_len(frame: u64) -> usize {
    1 + varint_len(frame)
}

pub(crate) fn write_leaf(out: &mut Vec<u8>, suffix: &[u8], value: &[u8], version: u64) {
    out.push(TAG_LEAF);
    put_varint(out, suffix.len() as u64);
    out.extend_from_slice(suffix);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
    put_varint(out, version);
}

pub(crate) fn write_link(out: &mut Vec<u8>, frame: u64) {
    out.push(TAG_LINK);
    put_varint(out, frame);
}

/// Writes an inner record; `keys` must be `count` strictly ascending bytes, at most
/// `kind.capacity()` of them, and `distances` the back distances of the records it pops
/// (terminal first, if any, then the children in key order), each below `DISTANCE_LIMIT`.
pub(crate) fn write_inner(
    out: &mut Vec<u8>,
    kind: InnerKind,
    prefix: &[u8],
    has_terminal: bool,
    count: usize,
    keys: impl Iterator<Item = u8>,
    distances: &[usize],
) {
    debug_assert_eq!(distances.len(), count + usize::from(has_terminal));
    debug_assert!(count <= kind.capacity());
    out.push(TAG_INNER | kind as u8 | if has_terminal { TAG_INNER_TERMINAL } else { 0 });
    put_varint(out, prefix.len() as u64);
    out.extend_from_slice(prefix);
    put_varint(out, count as u64);
    if kind == InnerKind::N256 {
        let mut bitmap = [0u8; BITMAP_LEN];
        for b in keys {
            bitmap[usize::from(b / 8)] |= 1 << (b % 8);
        }
        out.extend_from_slice(&bitmap);
    } else {
        out.extend(keys);
    }
    for &d in distances {
        debug_assert!(d > 0 && d < DISTANCE_LIMIT);
        out.extend_from_slice(&(d as u32).to_le_bytes()[..DISTANCE_LEN]);
    }
}

/// The child bytes of a decoded inner record, ascending.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChildKeys<'a> {
    List(&'a [u8]),
    Bitmap(&'a [u8]),
}

impl<'a> ChildKeys<'a> {
    /// The child bytes in ascending order.
    pub(crate) fn iter(&self) -> ChildKeyIter<'a> {
        ChildKeyIter { keys: *self, next: 0 }
    }

    /// The position of child byte `b` among the children, if there is one.
    pub(crate) fn index_of(&self, b: u8) -> Option<usize> {
        match *self {
            ChildKeys::List(list) => list.iter().position(|&k| k == b),
            ChildKeys::Bitmap(bitmap) => {
                let (byte, bit) = (usize::from(b / 8), b % 8);
                let word = *bitmap.get(byte)?;
                if word & (1 << bit) == 0 {
                    return None;
                }
                let below: u32 = bitmap[..byte].iter().map(|w| w.count_ones()).sum();
                Some(below as usize + (word & ((1u8 << bit) - 1)).count_ones() as usize)
            }
        }
    }
}

/// The back distances of an inner record: `DISTANCE_LEN` bytes each, terminal first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Distances<'a>(&'a [u8]);

impl Distances<'_> {
    /// The `i`-th distance (0 is the terminal's when the record has one).
    pub(crate) fn get(&self, i: usize) -> Option<usize> {
        let at = i.checked_mul(DISTANCE_LEN)?;
        let b = self.0.get(at..at + DISTANCE_LEN)?;
        Some(usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16)
    }
}

pub(crate) struct ChildKeyIter<'a> {
    keys: ChildKeys<'a>,
    next: usize,
}

impl Iterator for ChildKeyIter<'_> {
    type Item = u8;
    fn next(&mut self) -> Option<u8> {
        match self.keys {
            ChildKeys::List(list) => {
                let b = list.get(self.next).copied();
                self.next += 1;
                b
            }
            ChildKeys::Bitmap(bitmap) => {
                while self.next < 256 {
                    let b = self.next;
                    self.next += 1;
                    if bitmap.get(b / 8).is_some_and(|byte| byte & (1 << (b % 8)) != 0) {
                        return Some(b as u8);
                    }
                }
                None
            }
        }
    }
}

/// One decoded record, borrowing from the frame bytes.
#[derive(Debug)]
pub(crate) enum Record<'a> {
    Leaf {
        suffix: &'a [u8],
        value: &'a [u8],
        version: u64,
    },
    Link {
        frame: u64,
    },
    Inner {
        kind: InnerKind,
        prefix: &'a [u8],
        has_terminal: bool,
        child_count: usize,
        keys: ChildKeys<'a>,
        distances: Distances<'a>,
    },
}

/// A decoding failure: the offset (within the bytes given to the reader) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordError {
    pub offset: usize,
    pub reason: String,
}

/// Reads records one after another, validating every length and field.
pub(crate) struct RecordReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The body offset of `bytes[0]`: a reader over a window of the body (a point read's
    /// pages) checks back distances and names offsets as a reader over the whole body would.
    base: usize,
}

impl<'a> RecordReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        RecordReader { bytes, pos: 0, base: 0 }
    }

    /// A reader over `window`, the body's bytes from body offset `base` on, whose next record
    /// starts at `base`. Positions in errors and distance checks are body offsets.
    pub(crate) fn window(window: &'a [u8], base: usize) -> Self {
        RecordReader { bytes: window, pos: 0, base }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// The body offset of the next record (`position` plus the window's base).
    pub(crate) fn body_position(&self) -> usize {
        self.base + self.pos
    }

    pub(crate) fn is_at_end(&self) -> bool {
        self.pos == self.bytes.len()
    }

    /// The next byte, not consumed.
    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn error(&self, offset: usize, reason: impl Into<String>) -> RecordError {
        RecordError { offset: self.base + offset, reason: reason.into() }
    }

    pub(crate) fn byte(&mut self) -> Result<u8, RecordError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.error(self.pos, "record truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn varint(&mut self) -> Result<u64, RecordError> {
        let start = self.pos;
        let mut v: u64 = 0;
        // Bound: a u64 needs at most 10 groups of 7 bits.
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            let group = u64::from(b & 0x7f);
            if shift == 63 && group > 1 {
                return Err(self.error(start, "varint overflows u64"));
            }
            v |= group << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.error(start, "varint longer than 10 bytes"))
    }

    pub(crate) fn length(&mut self, max: usize, what: &str) -> Result<usize, RecordError> {
        let start = self.pos;
        let v = self.varint()?;
        if v > max as u64 {
            return Err(self.error(start, format!("{what} {v} exceeds {max}")));
        }
        Ok(v as usize)
    }

    pub(crate) fn slice(&mut self, len: usize) -> Result<&'a [u8], RecordError> {
        let end = self.pos.checked_add(len).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| self.error(self.pos, "record truncated"))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next record, or an error naming the offset of the bad field.
    pub(crate) fn next_record(&mut self) -> Result<Record<'a>, RecordError> {
        let start = self.pos;
        let tag = self.byte()?;
        match tag {
            TAG_LEAF => {
                let suffix_len = self.length(KEY_LEN_MAX, "leaf suffix length")?;
                let suffix = self.slice(suffix_len)?;
                let value_len = self.length(VALUE_LEN_MAX, "value length")?;
                let value = self.slice(value_len)?;
                let version = self.varint()?;
                Ok(Record::Leaf { suffix, value, version })
            }
            TAG_LINK => Ok(Record::Link { frame: self.varint()? }),
            t if t & 0xf8 == TAG_INNER => {
                let kind = InnerKind::from_bits(t);
                let has_terminal = t & TAG_INNER_TERMINAL != 0;
                let prefix_len = self.length(KEY_LEN_MAX, "inner prefix length")?;
                let prefix = self.slice(prefix_len)?;
                let child_count = self.length(kind.capacity(), "child count")?;
                let keys = if kind == InnerKind::N256 {
                    let bitmap = self.slice(BITMAP_LEN)?;
                    let ones: u32 = bitmap.iter().map(|b| b.count_ones()).sum();
                    if ones as usize != child_count {
                        return Err(self.error(start, "N256 bitmap disagrees with child count"));
                    }
                    ChildKeys::Bitmap(bitmap)
                } else {
                    let list = self.slice(child_count)?;
                    if list.windows(2).any(|w| w[0] >= w[1]) {
                        return Err(self.error(start, "child keys not strictly ascending"));
                    }
                    ChildKeys::List(list)
                };
                let popped = child_count + usize::from(has_terminal);
                let distances = Distances(self.slice(DISTANCE_LEN * popped)?);
                if (0..popped).any(|i| distances.get(i).is_none_or(|d| d == 0 || d > self.base + start)) {
                    return Err(self.error(start, "a back distance does not point before the record"));
                }
                Ok(Record::Inner { kind, prefix, has_terminal, child_count, keys, distances })
            }
            other => Err(self.error(start, format!("unknown record tag {other:#04x}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_lengths() {
        for v in [0u64, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut r = RecordReader::new(&out);
            assert_eq!(r.varint().unwrap(), v);
            assert!(r.is_at_end());
        }
    }

    #[test]
    fn records_round_trip_with_predicted_lengths() {
        let mut out = Vec::new();
        write_leaf(&mut out, b"abc", b"value", 77_000);
        assert_eq!(out.len(), leaf_len(3, 5, 77_000));
        let at = out.len();
        write_inner(&mut out, InnerKind::N256, b"pre", true, 3, [1u8, 9, 200].into_iter(), &[at, 3, 2, 1]);
        assert_eq!(out.len() - at, inner_len(InnerKind::N256, 3, 3, true));
        let at = out.len();
        write_inner(&mut out, InnerKind::N16, b"", false, 2, [0u8, 5].into_iter(), &[at, 5]);
        assert_eq!(out.len() - at, inner_len(InnerKind::N16, 0, 2, false));
        let at = out.len();
        write_link(&mut out, 1234);
        assert_eq!(out.len() - at, link_len(1234));

        let mut r = RecordReader::new(&out);
        match r.next_record().unwrap() {
            Record::Leaf { suffix, value, version } => {
                assert_eq!((suffix, value, version), (&b"abc"[..], &b"value"[..], 77_000));
            }
            other => panic!("unexpected {other:?}"),
        }
        match r.next_record().unwrap() {
            Record::Inner { kind, prefix, has_terminal, child_count, keys, distances } => {
                assert_eq!(
                    (kind, prefix, has_terminal, child_count),
                    (InnerKind::N256, &b"pre"[..], true, 3)
                );
                assert_eq!(keys.iter().collect::<Vec<_>>(), [1, 9, 200]);
                assert_eq!(
                    (keys.index_of(9), keys.index_of(200), keys.index_of(10)),
                    (Some(1), Some(2), None)
                );
                let all: Vec<_> = (0..5).map(|i| distances.get(i)).collect();
                assert_eq!(all, [Some(leaf_len(3, 5, 77_000)), Some(3), Some(2), Some(1), None]);
            }
            other => panic!("unexpected {other:?}"),
        }
        match r.next_record().unwrap() {
            Record::Inner { keys, .. } => assert_eq!(keys.iter().collect::<Vec<_>>(), [0, 5]),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(r.next_record().unwrap(), Record::Link { frame: 1234 }));
        assert!(r.is_at_end());
    }

    #[test]
    fn malformed_records_are_errors() {
        // Unsorted child keys, an oversized count, a truncated leaf, an unknown tag, and a back
        // distance that points at or after the record itself.
        let cases: [&[u8]; 7] = [
            &[0x10, 0, 1, 7, 1, 0, 0],
            &[0x10, 0, 1, 7, 0, 0, 0],
            &[0x10, 0, 2, 5, 5],
            &[0x10, 0, 5, 1, 2, 3, 4, 5],
            &[0x01, 3, b'a'],
            &[0x7f],
            &[0x01, 0xff, 0xff, 0xff],
        ];
        for case in cases {
            assert!(RecordReader::new(case).next_record().is_err(), "{case:?}");
        }
    }
}

//! Frame deltas: the keys of one frame a checkpoint changed since the frame's last whole
//! image, with their values (or their deletion) as of the checkpoint. A frame on disk is a
//! whole image followed by a chain of deltas, applied in order when the frame is loaded.
//!
//! A delta uses the frame header's first 32 bytes (`frame::seal_as`, without the page table), with magic `b"HDLT"`, version
//! 1, the entry count at offset 20 and the delta's position in its frame's chain (1 for the
//! first delta after the image) at offset 28. Its body is `entry_count` entries in strictly
//! ascending key order, each key relative to the frame (the bytes after the parent's child
//! byte, where the frame's root begins):
//!
//! | entry | bytes |
//! |---|---|
//! | put    | a leaf record (`0x01`, varint key_len, key, varint value_len, value, varint version) |
//! | delete | `0x03`, varint key_len, key |

use super::frame::{self, ImageKind, HEADER_LEN};
use super::node::{put_varint, write_leaf, Record, RecordError, RecordReader, TAG_LEAF};
use super::FrameId;
use crate::api::KEY_LEN_MAX;

pub(crate) const DELTA_IMAGE: ImageKind =
    ImageKind { magic: *b"HDLT", version: 1, what: "frame delta", paged: false };

/// Tag of a delete entry (a put entry is a leaf record).
pub(crate) const TAG_DELETE: u8 = 0x03;

/// One change a delta records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeltaEntry<'a> {
    Put { key: &'a [u8], value: &'a [u8], version: u64 },
    Delete { key: &'a [u8] },
}

impl DeltaEntry<'_> {
    pub(crate) fn key(&self) -> &[u8] {
        match self {
            DeltaEntry::Put { key, .. } | DeltaEntry::Delete { key } => key,
        }
    }
}

/// Builds one delta: entries are added in strictly ascending key order, then `finish` seals it.
pub(crate) struct DeltaWriter {
    buf: Vec<u8>,
    entries: u32,
}

impl DeltaWriter {
    pub(crate) fn new(capacity_hint: usize) -> DeltaWriter {
        DeltaWriter { buf: frame::start_image(DELTA_IMAGE, capacity_hint), entries: 0 }
    }

    pub(crate) fn push(&mut self, entry: &DeltaEntry<'_>) {
        write_entry(&mut self.buf, entry);
        self.entries += 1;
    }

    /// Header and entries so far.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The sealed image (padded to 4 KiB), or the byte count when it exceeds a frame.
    pub(crate) fn finish(mut self, id: FrameId, chain_index: u32) -> Result<Vec<u8>, usize> {
        frame::seal_as(DELTA_IMAGE, &mut self.buf, id, self.entries, chain_index)?;
        Ok(self.buf)
    }
}

/// A validated delta: its chain position and entries.
pub(crate) struct DeltaView<'a> {
    pub chain_index: u32,
    count: u32,
    body: &'a [u8],
}

/// Validates a delta read for frame `expected` (header, checksum, chain position).
pub(crate) fn open(image: &[u8], expected: FrameId) -> Result<DeltaView<'_>, RecordError> {
    let view = frame::open_as(DELTA_IMAGE, image, expected)?;
    Ok(DeltaView { chain_index: view.word, count: view.count, body: view.body })
}

impl<'a> DeltaView<'a> {
    /// Every entry in order; fails (with the offset in the image) on a malformed entry, a key
    /// out of order, or a count that disagrees with the body.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Result<Vec<DeltaEntry<'a>>, RecordError> {
        let mut out: Vec<DeltaEntry<'a>> = Vec::with_capacity(self.count.min(1 << 16) as usize);
        self.each_entry(|_, entry| out.push(entry))?;
        Ok(out)
    }

    /// Where each entry starts in the body, in key order, checked as `entries` checks them:
    /// the index a point read searches (`find_indexed`) once the delta is verified.
    pub(crate) fn entry_offsets(&self) -> Result<Vec<u32>, RecordError> {
        let mut out = Vec::with_capacity(self.count.min(1 << 16) as usize);
        // A body is at most a frame long: its offsets fit in u32.
        self.each_entry(|at, _| out.push(at as u32))?;
        Ok(out)
    }

    /// Hands `visit` each entry and its body offset, in order, checking order and count.
    fn each_entry(&self, mut visit: impl FnMut(usize, DeltaEntry<'a>)) -> Result<(), RecordError> {
        let mut reader = RecordReader::new(self.body);
        let at = |offset: usize| HEADER_LEN + offset;
        // Reader offsets are within the body; errors name offsets within the image.
        let shift = |e: RecordError| RecordError { offset: at(e.offset), ..e };
        let (mut previous, mut count): (Option<&'a [u8]>, usize) = (None, 0);
        // Bound: every entry consumes at least one byte of the body.
        while !reader.is_at_end() {
            let start = reader.position();
            let entry = read_entry(&mut reader).map_err(shift)?;
            let (DeltaEntry::Put { key, .. } | DeltaEntry::Delete { key }) = entry;
            if previous.is_some_and(|p| p >= key) {
                return Err(RecordError {
                    offset: at(start),
                    reason: "delta keys not strictly ascending".into(),
                });
            }
            previous = Some(key);
            count += 1;
            visit(start, entry);
        }
        if count != self.count as usize {
            return Err(RecordError {
                offset: 20,
                reason: format!("delta counts {} entries, its body holds {count}", self.count),
            });
        }
        Ok(())
    }
}

/// The body of a delta verified before (`open`, then `entry_offsets`), read again without
/// checking: its bytes after the header, up to its used length.
pub(crate) fn verified_body(image: &[u8]) -> &[u8] {
    image.get(HEADER_LEN..frame::claimed_used(image).min(image.len())).unwrap_or_default()
}

/// The entry at offset `at` of a verified delta's `body` (an offset `entry_offsets` gave).
/// Errors, which only a wrong offset can cause, name offsets within the image.
pub(crate) fn entry_at(body: &[u8], at: u32) -> Result<DeltaEntry<'_>, RecordError> {
    let at = at as usize;
    let rest = body.get(at..).ok_or_else(|| RecordError {
        offset: HEADER_LEN + at,
        reason: "a delta entry offset lies outside the body".into(),
    })?;
    read_entry(&mut RecordReader::new(rest))
        .map_err(|e| RecordError { offset: HEADER_LEN + at + e.offset, ..e })
}

/// The entry for `key` in a verified delta's `body`, by binary search over its entry
/// offsets (`entry_offsets`, in key order).
pub(crate) fn find_indexed<'a>(
    body: &'a [u8],
    offsets: &[u32],
    key: &[u8],
) -> Result<Option<DeltaEntry<'a>>, RecordError> {
    match offsets.get(first_indexed(body, offsets, key)?) {
        Some(&at) if key_at(body, at)? == key => entry_at(body, at).map(Some),
        _ => Ok(None),
    }
}

/// Where, in a verified delta's entry offsets (`entry_offsets`, in key order), the first
/// entry whose key is not below `key` is (`offsets.len()` if none), by binary search.
pub(crate) fn first_indexed(body: &[u8], offsets: &[u32], key: &[u8]) -> Result<usize, RecordError> {
    let (mut low, mut high) = (0, offsets.len());
    // Bound: the range shrinks every step.
    while low < high {
        let mid = low + (high - low) / 2;
        match key_at(body, offsets[mid])? < key {
            true => low = mid + 1,
            false => high = mid,
        }
    }
    Ok(low)
}

/// The key of the entry at offset `at` of a verified delta's `body`, without reading the rest
/// of the entry: a put (a leaf record) and a delete both begin with their tag, the key's
/// length and the key.
pub(crate) fn key_at(body: &[u8], at: u32) -> Result<&[u8], RecordError> {
    let at = at as usize;
    let shift = |e: RecordError| RecordError { offset: HEADER_LEN + at + e.offset, ..e };
    let rest = body.get(at..).ok_or_else(|| RecordError {
        offset: HEADER_LEN + at,
        reason: "a delta entry offset lies outside the body".into(),
    })?;
    let mut reader = RecordReader::new(rest);
    reader.byte().map_err(shift)?;
    let len = reader.length(KEY_LEN_MAX, "delta key length").map_err(shift)?;
    reader.slice(len).map_err(shift)
}

/// Appends `entry` in a delta's entry encoding.
fn write_entry(out: &mut Vec<u8>, entry: &DeltaEntry<'_>) {
    match *entry {
        DeltaEntry::Put { key, value, version } => write_leaf(out, key, value, version),
        DeltaEntry::Delete { key } => {
            out.push(TAG_DELETE);
            put_varint(out, key.len() as u64);
            out.extend_from_slice(key);
        }
    }
}

/// Reads the entry at `reader`'s position (error offsets are the reader's).
fn read_entry<'a>(reader: &mut RecordReader<'a>) -> Result<DeltaEntry<'a>, RecordError> {
    let start = reader.position();
    let tag = reader.peek();
    if tag == Some(TAG_DELETE) {
        reader.byte()?;
        let len = reader.length(KEY_LEN_MAX, "delete key length")?;
        return Ok(DeltaEntry::Delete { key: reader.slice(len)? });
    }
    match reader.next_record()? {
        Record::Leaf { suffix, value, version } => Ok(DeltaEntry::Put { key: suffix, value, version }),
        _ => Err(RecordError {
            offset: start,
            reason: format!("delta entry tag {:#04x} is neither put nor delete", tag.unwrap_or_default()),
        }),
    }
}

const _: () = assert!(TAG_DELETE != TAG_LEAF);

#[cfg(test)]
mod tests {
    use super::*;

    /// `find_indexed` agrees with the whole list of entries, for every key in it, keys
    /// between them, and keys before and after all of them.
    #[test]
    fn find_indexed_agrees_with_the_entries() {
        let image = sample();
        let view = open(&image, FrameId(4)).unwrap();
        let (entries, offsets) = (view.entries().unwrap(), view.entry_offsets().unwrap());
        let body = verified_body(&image);
        assert_eq!(offsets.len(), entries.len());
        for entry in &entries {
            assert_eq!(find_indexed(body, &offsets, entry.key()).unwrap().as_ref(), Some(entry));
            let mut after = entry.key().to_vec();
            after.push(0);
            let between = entries.iter().any(|e| e.key() == after.as_slice());
            assert_eq!(find_indexed(body, &offsets, &after).unwrap().is_some(), between);
        }
        assert_eq!(find_indexed(body, &offsets, b"\xff\xff").unwrap(), None);
        assert_eq!(find_indexed(body, &offsets[..0], b"").unwrap(), None);
        let bad = entry_at(body, body.len() as u32 + 1).unwrap_err();
        assert!(bad.reason.contains("outside"), "{bad:?}");
    }

    /// `first_indexed` finds the first entry not below any probe: the entries' keys, keys
    /// between and around them, and prefixes of them.
    #[test]
    fn first_indexed_agrees_with_the_entries() {
        let image = sample();
        let view = open(&image, FrameId(4)).unwrap();
        let (entries, offsets) = (view.entries().unwrap(), view.entry_offsets().unwrap());
        let body = verified_body(&image);
        for probe in [&b""[..], b"\0", b"a", b"a/", b"a/1", b"a/10", b"a/2", b"a/3", b"b"] {
            let want = entries.iter().position(|e| e.key() >= probe).unwrap_or(entries.len());
            let probe_text = String::from_utf8_lossy(probe);
            assert_eq!(first_indexed(body, &offsets, probe).unwrap(), want, "{probe_text}");
        }
    }

    fn sample() -> Vec<u8> {
        let mut w = DeltaWriter::new(64);
        w.push(&DeltaEntry::Put { key: b"", value: b"root value", version: 7 });
        w.push(&DeltaEntry::Delete { key: b"a/1" });
        w.push(&DeltaEntry::Put { key: b"a/2", value: b"v", version: 9 });
        w.finish(FrameId(4), 2).unwrap()
    }

    #[test]
    fn round_trip_and_every_flip_detected() {
        let bytes = sample();
        let view = open(&bytes, FrameId(4)).unwrap();
        assert_eq!(view.chain_index, 2);
        assert_eq!(
            view.entries().unwrap(),
            vec![
                DeltaEntry::Put { key: b"", value: b"root value", version: 7 },
                DeltaEntry::Delete { key: b"a/1" },
                DeltaEntry::Put { key: b"a/2", value: b"v", version: 9 },
            ]
        );
        assert!(open(&bytes, FrameId(5)).is_err(), "read for another frame");
        let used = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]) as usize;
        for i in 0..used {
            let mut bad = bytes.clone();
            bad[i] ^= 0x08;
            assert!(open(&bad, FrameId(4)).is_err(), "flip at {i} went unnoticed");
        }
        // A whole frame image is not a delta, nor the other way round.
        assert!(frame::open(&bytes, FrameId(4)).is_err());
    }

    /// Entries that pass the checksum but break the rules are refused too.
    #[test]
    fn unordered_or_miscounted_entries_are_refused() {
        let mut w = DeltaWriter::new(64);
        w.push(&DeltaEntry::Put { key: b"b", value: b"", version: 1 });
        w.push(&DeltaEntry::Delete { key: b"a" });
        let bytes = w.finish(FrameId(1), 1).unwrap();
        let err = open(&bytes, FrameId(1)).unwrap().entries().unwrap_err();
        assert!(err.reason.contains("ascending"), "{err:?}");

        let mut w = DeltaWriter::new(64);
        w.push(&DeltaEntry::Delete { key: b"a" });
        w.entries = 2;
        let bytes = w.finish(FrameId(1), 1).unwrap();
        assert!(open(&bytes, FrameId(1)).unwrap().entries().is_err());

        let mut w = DeltaWriter::new(64);
        w.buf.extend_from_slice(&[0x02, 0x05]); // a link record
        w.entries = 1;
        let bytes = w.finish(FrameId(1), 1).unwrap();
        assert!(open(&bytes, FrameId(1)).unwrap().entries().is_err());
    }
}

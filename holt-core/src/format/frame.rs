//! The frame header: every frame is exactly `FRAME_SIZE` bytes and describes itself.
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0  | 4 | magic        | `b"HFRM"` |
//! | 4  | 2 | version      | frame format version (2) |
//! | 6  | 2 | flags        | 0 (reserved) |
//! | 8  | 8 | frame_id     | the frame's id |
//! | 16 | 4 | used_bytes   | header + records; bytes after it are zero padding |
//! | 20 | 4 | node_count   | number of records in the body |
//! | 24 | 4 | checksum     | CRC32C of bytes `[0, 24)` then `[28, used_bytes)` |
//! | 28 | 4 | root_offset  | offset of the root record within the body |
//!
//! The body (records, see `node.rs`) starts at offset 32; its last record is the frame's root.
//! Version 1 had no back distances in inner records and 0 in place of `root_offset`.

use super::node::RecordError;
use super::{FrameId, FRAME_SIZE};

pub(crate) const FRAME_MAGIC: [u8; 4] = *b"HFRM";
pub(crate) const FRAME_FORMAT_VERSION: u16 = 2;
pub(crate) const HEADER_LEN: usize = 32;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 4;
const OFF_FLAGS: usize = 6;
const OFF_FRAME_ID: usize = 8;
const OFF_USED: usize = 16;
const OFF_NODE_COUNT: usize = 20;
const OFF_CHECKSUM: usize = 24;
const OFF_ROOT: usize = 28;

// The header layout is part of the on-disk format: pin it.
const _: () = assert!(OFF_VERSION == OFF_MAGIC + 4 && OFF_FLAGS == OFF_VERSION + 2);
const _: () = assert!(OFF_FRAME_ID == OFF_FLAGS + 2 && OFF_USED == OFF_FRAME_ID + 8);
const _: () = assert!(OFF_NODE_COUNT == OFF_USED + 4 && OFF_CHECKSUM == OFF_NODE_COUNT + 4);
const _: () = assert!(OFF_ROOT == OFF_CHECKSUM + 4 && HEADER_LEN == OFF_ROOT + 4);
const _: () = assert!(FRAME_SIZE & 4095 == 0, "frames must stay aligned for O_DIRECT");
const _: () = assert!(FRAME_SIZE <= u32::MAX as usize, "used_bytes is a u32");

/// A buffer ready for records: `HEADER_LEN` zero bytes that `seal` fills in.
pub(crate) fn start_frame(capacity_hint: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(capacity_hint.clamp(HEADER_LEN, FRAME_SIZE));
    buf.resize(HEADER_LEN, 0);
    buf
}

fn checksum(frame: &[u8], used: usize) -> u32 {
    let head = crc32c::crc32c(&frame[..OFF_CHECKSUM]);
    crc32c::crc32c_append(head, &frame[OFF_CHECKSUM + 4..used])
}

/// What kind of image a header starts: frames and frame deltas share the header layout
/// (and so `stored_len`, the checksum and the padding rules) but not magic or version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImageKind {
    pub magic: [u8; 4],
    pub version: u16,
    /// Names the image in errors.
    pub what: &'static str,
}

pub(crate) const FRAME_IMAGE: ImageKind =
    ImageKind { magic: FRAME_MAGIC, version: FRAME_FORMAT_VERSION, what: "frame" };

/// Fills the header of a buffer made by `start_frame` and pads it with zeros to `stored_len`
/// (a multiple of 4 KiB): the image a checkpoint writes. The rest of the frame's
/// `FRAME_SIZE` bytes is padding that is never stored or read. The spare capacity is given
/// back, so a checkpoint holding hundreds of images holds about their encoded bytes.
/// Fails (leaving the buffer unusable) when the records do not fit.
pub(crate) fn seal(buf: &mut Vec<u8>, id: FrameId, node_count: u32, root_offset: usize) -> Result<(), usize> {
    debug_assert!(root_offset < buf.len().saturating_sub(HEADER_LEN) || buf.len() == HEADER_LEN);
    seal_as(FRAME_IMAGE, buf, id, node_count, root_offset as u32)
}

/// `seal` for any image kind: `count` goes to offset 20, `word` to offset 28.
pub(crate) fn seal_as(
    kind: ImageKind,
    buf: &mut Vec<u8>,
    id: FrameId,
    count: u32,
    word: u32,
) -> Result<(), usize> {
    let used = buf.len();
    if !(HEADER_LEN..=FRAME_SIZE).contains(&used) {
        return Err(used);
    }
    buf[OFF_MAGIC..OFF_MAGIC + 4].copy_from_slice(&kind.magic);
    buf[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&kind.version.to_le_bytes());
    buf[OFF_FLAGS..OFF_FLAGS + 2].copy_from_slice(&0u16.to_le_bytes());
    buf[OFF_FRAME_ID..OFF_FRAME_ID + 8].copy_from_slice(&id.0.to_le_bytes());
    buf[OFF_USED..OFF_USED + 4].copy_from_slice(&(used as u32).to_le_bytes());
    buf[OFF_NODE_COUNT..OFF_NODE_COUNT + 4].copy_from_slice(&count.to_le_bytes());
    buf[OFF_ROOT..OFF_ROOT + 4].copy_from_slice(&word.to_le_bytes());
    let crc = checksum(buf, used);
    buf[OFF_CHECKSUM..OFF_CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
    buf.resize(used.next_multiple_of(STORE_ALIGN_BYTES).min(FRAME_SIZE), 0);
    buf.shrink_to_fit();
    Ok(())
}

/// The bytes of a sealed frame that must reach the disk: header and records, rounded up to
/// 4 KiB (the rest of the frame is zero padding nobody reads, left as a hole on disk).
pub(crate) fn stored_len(frame: &[u8]) -> usize {
    claimed_used(frame).next_multiple_of(STORE_ALIGN_BYTES).min(frame.len())
}

/// The `used_bytes` an image's header claims, clamped to `HEADER_LEN..=FRAME_SIZE` (a corrupt
/// claim is reported by `open`, which checks it against the bytes); `HEADER_LEN` for bytes
/// shorter than a header.
pub(crate) fn claimed_used(image: &[u8]) -> usize {
    let used = if image.len() >= HEADER_LEN { le_u32(image, OFF_USED) as usize } else { 0 };
    used.clamp(HEADER_LEN, FRAME_SIZE)
}

/// Frames are stored and released in units of this many bytes (the file system block and the
/// O_DIRECT alignment).
pub(crate) const STORE_ALIGN_BYTES: usize = 4096;
const _: () = assert!(FRAME_SIZE.is_multiple_of(STORE_ALIGN_BYTES));

/// A validated frame: its record count, body (the records) and the root record's offset in
/// the body (inside it, unless the body is empty).
#[derive(Debug)]
pub(crate) struct FrameView<'a> {
    pub node_count: u32,
    pub body: &'a [u8],
    pub root_offset: usize,
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A validated image of any kind: the count at offset 20, the body and the word at offset 28.
#[derive(Debug)]
pub(crate) struct ImageView<'a> {
    pub count: u32,
    pub body: &'a [u8],
    pub word: u32,
}

/// Validates the header and checksum of an image of `kind` read for frame `expected`: the
/// bytes read from a slot (up to `FRAME_SIZE`), holding at least its header and records.
/// Offsets in errors are relative to the start of the image.
pub(crate) fn open_as(
    kind: ImageKind,
    image: &[u8],
    expected: FrameId,
) -> Result<ImageView<'_>, RecordError> {
    let err = |offset: usize, reason: String| RecordError { offset, reason };
    let what = kind.what;
    if !(HEADER_LEN..=FRAME_SIZE).contains(&image.len()) {
        return Err(err(0, format!("{what} is {} bytes, expected {HEADER_LEN}..={FRAME_SIZE}", image.len())));
    }
    if image[OFF_MAGIC..OFF_MAGIC + 4] != kind.magic {
        return Err(err(OFF_MAGIC, format!("bad {what} magic")));
    }
    let version = le_u16(image, OFF_VERSION);
    if version != kind.version {
        return Err(err(OFF_VERSION, format!("unsupported {what} format version {version}")));
    }
    let used = le_u32(image, OFF_USED) as usize;
    if !(HEADER_LEN..=image.len()).contains(&used) {
        return Err(err(OFF_USED, format!("used byte count {used} out of range")));
    }
    let stored = le_u32(image, OFF_CHECKSUM);
    let computed = checksum(image, used);
    if stored != computed {
        return Err(err(
            OFF_CHECKSUM,
            format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    if le_u16(image, OFF_FLAGS) != 0 {
        return Err(err(OFF_FLAGS, "reserved header fields are not zero".into()));
    }
    let id = FrameId(le_u64(image, OFF_FRAME_ID));
    if id != expected {
        return Err(err(OFF_FRAME_ID, format!("{what} holds id {id}, expected {expected}")));
    }
    Ok(ImageView {
        count: le_u32(image, OFF_NODE_COUNT),
        body: &image[HEADER_LEN..used],
        word: le_u32(image, OFF_ROOT),
    })
}

/// Validates the header and checksum of a frame read for `expected` (see `open_as`), and
/// that its root offset lies inside the body.
pub(crate) fn open(frame: &[u8], expected: FrameId) -> Result<FrameView<'_>, RecordError> {
    let view = open_as(FRAME_IMAGE, frame, expected)?;
    let root_offset = view.word as usize;
    if root_offset >= view.body.len().max(1) {
        return Err(RecordError {
            offset: OFF_ROOT,
            reason: format!("root offset {root_offset} is outside the body"),
        });
    }
    Ok(FrameView { node_count: view.count, body: view.body, root_offset })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open_round_trips_and_detects_flips() {
        let mut buf = start_frame(64);
        buf.extend_from_slice(b"records");
        seal(&mut buf, FrameId(9), 1, 0).unwrap();
        assert_eq!((buf.len(), stored_len(&buf)), (STORE_ALIGN_BYTES, STORE_ALIGN_BYTES));
        // A slot read back is FRAME_SIZE bytes: the same frame with its padding.
        let mut slot = buf.clone();
        slot.resize(FRAME_SIZE, 0);
        assert_eq!(open(&slot, FrameId(9)).unwrap().body, b"records");
        assert!(open(&buf[..HEADER_LEN + 3], FrameId(9)).is_err(), "an image cut inside its records");
        let view = open(&buf, FrameId(9)).unwrap();
        assert_eq!((view.node_count, view.body), (1, &b"records"[..]));
        assert!(open(&buf, FrameId(8)).is_err());
        for at in [0, 5, 9, 17, 21, 25, HEADER_LEN + 3] {
            let mut bad = buf.clone();
            bad[at] ^= 0x40;
            assert!(open(&bad, FrameId(9)).is_err(), "flip at {at} went unnoticed");
        }
    }
}

//! The frame header: every frame is exactly `FRAME_SIZE` bytes and describes itself.
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0  | 4 | magic        | `b"HFRM"` |
//! | 4  | 2 | version      | frame format version (3) |
//! | 6  | 2 | flags        | 0 (reserved) |
//! | 8  | 8 | frame_id     | the frame's id |
//! | 16 | 4 | used_bytes   | header + records; bytes after it are zero padding |
//! | 20 | 4 | node_count   | number of records in the body |
//! | 24 | 4 | checksum     | CRC32C of bytes `[0, 24)` then `[28, 544)`: header and page table |
//! | 28 | 4 | root_offset  | offset of the root record within the body |
//! | 32 | 512 | page table | CRC32C of each 4 KiB page of the image (below) |
//!
//! The body (records, see `node.rs`) starts at offset 544; its last record is the frame's
//! root. Page `p` of the image is bytes `[p × 4096, (p + 1) × 4096)`; its entry in the page
//! table is the CRC32C of the part of it that lies inside `[544, used_bytes)` (for pages past
//! `used_bytes`, 0). So a point read can fetch and verify only the pages its path crosses,
//! and a torn or corrupt page is named by number.
//!
//! Frame deltas (`delta.rs`) share the first 32 bytes of this layout but have no page
//! table: their checksum covers `[0, 24)` then `[28, used_bytes)`, and their body starts at
//! offset 32. Version 2 frames had that whole-image checksum too; they are refused.

use super::node::RecordError;
use super::{FrameId, FRAME_SIZE};

pub(crate) const FRAME_MAGIC: [u8; 4] = *b"HFRM";
pub(crate) const FRAME_FORMAT_VERSION: u16 = 3;
/// The fixed header every image (frame or delta) starts with.
pub(crate) const HEADER_LEN: usize = 32;
/// Pages are this many bytes: the unit a point read fetches and verifies (and the O_DIRECT
/// alignment and file system block).
pub(crate) const PAGE_BYTES: usize = STORE_ALIGN_BYTES;
/// Pages in a frame, and so entries in the page table.
pub(crate) const PAGES_PER_FRAME: usize = FRAME_SIZE / PAGE_BYTES;
const OFF_PAGE_TABLE: usize = HEADER_LEN;
/// Where a frame's body starts: after the header and the page table.
pub(crate) const FRAME_HEADER_LEN: usize = OFF_PAGE_TABLE + 4 * PAGES_PER_FRAME;

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
const _: () = assert!(FRAME_HEADER_LEN == 544 && PAGES_PER_FRAME == 128);
const _: () = assert!(FRAME_HEADER_LEN <= PAGE_BYTES, "the header and page table sit in page 0");
const _: () = assert!(FRAME_SIZE & 4095 == 0, "frames must stay aligned for O_DIRECT");
const _: () = assert!(FRAME_SIZE <= u32::MAX as usize, "used_bytes is a u32");

/// Frames are stored and released in units of this many bytes (the file system block and the
/// O_DIRECT alignment).
pub(crate) const STORE_ALIGN_BYTES: usize = 4096;
const _: () = assert!(FRAME_SIZE.is_multiple_of(STORE_ALIGN_BYTES));

/// What kind of image a header starts: frames and frame deltas share the fixed header
/// layout (and so `stored_len` and the padding rules) but not magic, version or checksum.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImageKind {
    pub magic: [u8; 4],
    pub version: u16,
    /// Names the image in errors.
    pub what: &'static str,
    /// Whether the image carries a page table (frames) or one checksum over the whole image
    /// (deltas, which are always read whole).
    pub paged: bool,
}

impl ImageKind {
    /// Where the body starts.
    pub(crate) const fn header_len(&self) -> usize {
        if self.paged {
            FRAME_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
}

pub(crate) const FRAME_IMAGE: ImageKind =
    ImageKind { magic: FRAME_MAGIC, version: FRAME_FORMAT_VERSION, what: "frame", paged: true };

/// A buffer ready for a frame's records: `FRAME_HEADER_LEN` zero bytes that `seal` fills in.
pub(crate) fn start_frame(capacity_hint: usize) -> Vec<u8> {
    start_image(FRAME_IMAGE, capacity_hint)
}

/// A buffer ready for the body of an image of `kind`.
pub(crate) fn start_image(kind: ImageKind, capacity_hint: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(capacity_hint.clamp(kind.header_len(), FRAME_SIZE));
    buf.resize(kind.header_len(), 0);
    buf
}

/// The checksum at offset 24: of the header and page table (paged images), or of the header
/// and body (deltas).
fn checksum(kind: ImageKind, image: &[u8], used: usize) -> u32 {
    let end = if kind.paged { FRAME_HEADER_LEN } else { used };
    let head = crc32c::crc32c(&image[..OFF_CHECKSUM]);
    crc32c::crc32c_append(head, &image[OFF_CHECKSUM + 4..end])
}

/// The image bytes page `page` covers for the page table: its part of `[FRAME_HEADER_LEN,
/// used)` (empty for a page past `used`).
fn page_range(page: usize, used: usize) -> std::ops::Range<usize> {
    let start = (page * PAGE_BYTES).max(FRAME_HEADER_LEN);
    let end = ((page + 1) * PAGE_BYTES).min(used);
    start..end.max(start)
}

/// Pages an image of `used` bytes occupies.
pub(crate) fn page_count(used: usize) -> usize {
    used.div_ceil(PAGE_BYTES)
}

/// Fills the header of a buffer made by `start_frame` and pads it with zeros to `stored_len`
/// (a multiple of 4 KiB): the image a checkpoint writes. The rest of the frame's
/// `FRAME_SIZE` bytes is padding that is never stored or read. The spare capacity is given
/// back, so a checkpoint holding hundreds of images holds about their encoded bytes.
/// Fails (leaving the buffer unusable) when the records do not fit.
pub(crate) fn seal(buf: &mut Vec<u8>, id: FrameId, node_count: u32, root_offset: usize) -> Result<(), usize> {
    debug_assert!(root_offset < buf.len().saturating_sub(FRAME_HEADER_LEN) || buf.len() == FRAME_HEADER_LEN);
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
    if !(kind.header_len()..=FRAME_SIZE).contains(&used) {
        return Err(used);
    }
    buf[OFF_MAGIC..OFF_MAGIC + 4].copy_from_slice(&kind.magic);
    buf[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&kind.version.to_le_bytes());
    buf[OFF_FLAGS..OFF_FLAGS + 2].copy_from_slice(&0u16.to_le_bytes());
    buf[OFF_FRAME_ID..OFF_FRAME_ID + 8].copy_from_slice(&id.0.to_le_bytes());
    buf[OFF_USED..OFF_USED + 4].copy_from_slice(&(used as u32).to_le_bytes());
    buf[OFF_NODE_COUNT..OFF_NODE_COUNT + 4].copy_from_slice(&count.to_le_bytes());
    buf[OFF_ROOT..OFF_ROOT + 4].copy_from_slice(&word.to_le_bytes());
    if kind.paged {
        for page in 0..PAGES_PER_FRAME {
            let crc = if page < page_count(used) { crc32c::crc32c(&buf[page_range(page, used)]) } else { 0 };
            let at = OFF_PAGE_TABLE + 4 * page;
            buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let crc = checksum(kind, buf, used);
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

/// A validated header of any kind: the count at offset 20, `used_bytes`, and the word at
/// offset 28.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImageHead {
    pub count: u32,
    pub used: usize,
    pub word: u32,
}

/// Validates the header of an image of `kind` read for frame `expected`: `head` holds at
/// least the image's first `kind.header_len()` bytes (for a paged image, the header and page
/// table, whose checksum this verifies; for a delta, the whole image up to `used_bytes`).
/// `len` is the number of image bytes that can be read (`used_bytes` must not exceed it).
fn open_head(kind: ImageKind, head: &[u8], len: usize, expected: FrameId) -> Result<ImageHead, RecordError> {
    let err = |offset: usize, reason: String| RecordError { offset, reason };
    let what = kind.what;
    if !(HEADER_LEN..=FRAME_SIZE).contains(&len) || head.len() < HEADER_LEN {
        return Err(err(0, format!("{what} is {len} bytes, expected {HEADER_LEN}..={FRAME_SIZE}")));
    }
    if head[OFF_MAGIC..OFF_MAGIC + 4] != kind.magic {
        return Err(err(OFF_MAGIC, format!("bad {what} magic")));
    }
    let version = le_u16(head, OFF_VERSION);
    if version != kind.version {
        return Err(err(OFF_VERSION, format!("unsupported {what} format version {version}")));
    }
    let used = le_u32(head, OFF_USED) as usize;
    if !(kind.header_len()..=len).contains(&used) {
        return Err(err(OFF_USED, format!("used byte count {used} out of range")));
    }
    let covered = if kind.paged { kind.header_len() } else { used };
    if head.len() < covered {
        return Err(err(0, format!("{what} header read short: {} of {covered} bytes", head.len())));
    }
    let stored = le_u32(head, OFF_CHECKSUM);
    let computed = checksum(kind, head, used);
    if stored != computed {
        return Err(err(
            OFF_CHECKSUM,
            format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    if le_u16(head, OFF_FLAGS) != 0 {
        return Err(err(OFF_FLAGS, "reserved header fields are not zero".into()));
    }
    let id = FrameId(le_u64(head, OFF_FRAME_ID));
    if id != expected {
        return Err(err(OFF_FRAME_ID, format!("{what} holds id {id}, expected {expected}")));
    }
    if kind.paged {
        if let Some(page) = (page_count(used)..PAGES_PER_FRAME).find(|&p| page_crc(head, p) != 0) {
            return Err(err(
                OFF_PAGE_TABLE + 4 * page,
                format!("page table names page {page}, past the records"),
            ));
        }
    }
    Ok(ImageHead { count: le_u32(head, OFF_NODE_COUNT), used, word: le_u32(head, OFF_ROOT) })
}

fn page_crc(head: &[u8], page: usize) -> u32 {
    le_u32(head, OFF_PAGE_TABLE + 4 * page)
}

/// A validated image of any kind: the count at offset 20, the body and the word at offset 28.
#[derive(Debug)]
pub(crate) struct ImageView<'a> {
    pub count: u32,
    pub body: &'a [u8],
    pub word: u32,
}

/// Validates the header and checksums of an image of `kind` read for frame `expected`: the
/// bytes read from a slot (up to `FRAME_SIZE`), holding at least its header and records.
/// A paged image has every page verified. Offsets in errors are relative to the start of the
/// image.
pub(crate) fn open_as(
    kind: ImageKind,
    image: &[u8],
    expected: FrameId,
) -> Result<ImageView<'_>, RecordError> {
    let head = open_head(kind, image, image.len(), expected)?;
    if kind.paged {
        let pages = PageTable::of(image, head.used);
        for page in 0..page_count(head.used) {
            pages.check(page, &image[page * PAGE_BYTES..])?;
        }
    }
    Ok(ImageView { count: head.count, body: &image[kind.header_len()..head.used], word: head.word })
}

/// Validates the header, page table and every page of a frame read for `expected` (see
/// `open_as`), and that its root offset lies inside the body.
pub(crate) fn open(frame: &[u8], expected: FrameId) -> Result<FrameView<'_>, RecordError> {
    let view = open_as(FRAME_IMAGE, frame, expected)?;
    let root_offset = root_in(view.word, view.body.len())?;
    Ok(FrameView { node_count: view.count, body: view.body, root_offset })
}

fn root_in(word: u32, body_len: usize) -> Result<usize, RecordError> {
    let root_offset = word as usize;
    if root_offset >= body_len.max(1) {
        return Err(RecordError {
            offset: OFF_ROOT,
            reason: format!("root offset {root_offset} is outside the body"),
        });
    }
    Ok(root_offset)
}

/// A frame's page table, read from its verified header: what each page is checked against.
#[derive(Debug, Clone)]
pub(crate) struct PageTable {
    used: usize,
    crcs: [u32; PAGES_PER_FRAME],
}

impl PageTable {
    /// The table in `head` (the image's first `FRAME_HEADER_LEN` bytes or more), for an image
    /// of `used` bytes.
    fn of(head: &[u8], used: usize) -> PageTable {
        PageTable { used, crcs: std::array::from_fn(|page| page_crc(head, page)) }
    }

    /// Verifies page `page` of the image: `bytes` starts at the page's first byte and holds
    /// at least its part below `used_bytes`.
    pub(crate) fn check(&self, page: usize, bytes: &[u8]) -> Result<(), RecordError> {
        let range = page_range(page, self.used);
        let start = page * PAGE_BYTES;
        let Some(bytes) = bytes.get(range.start - start..range.end - start) else {
            return Err(RecordError { offset: range.start, reason: format!("page {page} read short") });
        };
        let stored = self.crcs.get(page).copied().unwrap_or(0);
        let computed = crc32c::crc32c(bytes);
        if stored != computed {
            return Err(RecordError {
                offset: start,
                reason: format!(
                    "page {page} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                ),
            });
        }
        Ok(())
    }
}

/// The checksum field of the image or delta whose header `bytes` starts with (the same
/// offset in both), as the manifest records it and `FrameHead::sum` keeps it.
pub(crate) fn image_sum(bytes: &[u8]) -> Option<u32> {
    (bytes.len() >= OFF_CHECKSUM + 4).then(|| le_u32(bytes, OFF_CHECKSUM))
}

/// What a point read needs from a frame's page 0 before it fetches any other page.
#[derive(Debug)]
pub(crate) struct FrameHead {
    /// The image's checksum field (header offset 24): tells this image from another image
    /// of the same frame in the same slot.
    pub sum: u32,
    /// Header and records: the image bytes that can hold records.
    pub used: usize,
    /// The root record's offset in the body.
    pub root_offset: usize,
    /// Records in the body (`node_count`): with `used`, what a record takes on average.
    pub records: usize,
    pub pages: PageTable,
    /// Pages of this image verified in place (a bit each), which later walks of the
    /// mapped image trust (`buffer::PagedImage`).
    pub trusted: [std::sync::atomic::AtomicU64; 2],
}

/// Validates a frame's header and page table, given its page 0 (`page0`, `PAGE_BYTES` long,
/// or the whole image if shorter) and the number of image bytes that can be read (`len`);
/// verifies page 0's records too. The other pages are checked with `FrameHead::pages` as
/// they are read.
pub(crate) fn open_frame_head(page0: &[u8], len: usize, expected: FrameId) -> Result<FrameHead, RecordError> {
    let head = open_head(FRAME_IMAGE, page0, len, expected)?;
    let pages = PageTable::of(page0, head.used);
    pages.check(0, page0)?;
    let root_offset = root_in(head.word, head.used - FRAME_HEADER_LEN)?;
    let sum = le_u32(page0, OFF_CHECKSUM);
    let records = head.count as usize;
    Ok(FrameHead { sum, used: head.used, root_offset, records, pages, trusted: Default::default() })
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
        assert!(open(&buf[..FRAME_HEADER_LEN + 3], FrameId(9)).is_err(), "an image cut inside its records");
        let view = open(&buf, FrameId(9)).unwrap();
        assert_eq!((view.node_count, view.body), (1, &b"records"[..]));
        assert!(open(&buf, FrameId(8)).is_err());
        for at in [0, 5, 9, 17, 21, 25, 40, 300, FRAME_HEADER_LEN + 3] {
            let mut bad = buf.clone();
            bad[at] ^= 0x40;
            assert!(open(&bad, FrameId(9)).is_err(), "flip at {at} went unnoticed");
        }
    }

    /// Each page is verified on its own: a flip in page 2 fails that page's check and the
    /// whole-image open (naming page 2), not the header's or another page's.
    #[test]
    fn a_corrupt_page_is_named_by_its_own_check() {
        let mut buf = start_frame(3 * PAGE_BYTES);
        buf.extend((0..2 * PAGE_BYTES + 100).map(|i| (i % 251) as u8));
        let used = buf.len();
        seal(&mut buf, FrameId(4), 1, 5).unwrap();
        assert_eq!(page_count(used), 3);
        let head = open_frame_head(&buf[..PAGE_BYTES], buf.len(), FrameId(4)).unwrap();
        assert_eq!((head.used, head.root_offset), (used, 5));
        let mut bad = buf.clone();
        bad[2 * PAGE_BYTES + 10] ^= 1;
        assert!(open_frame_head(&bad[..PAGE_BYTES], bad.len(), FrameId(4)).is_ok(), "page 0 is intact");
        assert!(head.pages.check(1, &bad[PAGE_BYTES..]).is_ok());
        let err = head.pages.check(2, &bad[2 * PAGE_BYTES..]).unwrap_err();
        assert!(err.reason.contains("page 2 checksum mismatch"), "{}", err.reason);
        let err = open(&bad, FrameId(4)).unwrap_err();
        assert!(err.reason.contains("page 2"), "{}", err.reason);
        // A page table entry past the records is corruption of the header's page table.
        let mut bad = buf.clone();
        bad[OFF_PAGE_TABLE + 4 * 5] = 1;
        assert!(open_frame_head(&bad[..PAGE_BYTES], bad.len(), FrameId(4)).is_err());
    }

    /// A version 2 frame (the whole-image checksum, no page table) is refused by name.
    #[test]
    fn version_2_frames_are_refused() {
        let mut buf = start_frame(64);
        buf.extend_from_slice(b"records");
        seal(&mut buf, FrameId(9), 1, 0).unwrap();
        buf[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&2u16.to_le_bytes());
        let err = open(&buf, FrameId(9)).unwrap_err();
        assert_eq!(err.reason, "unsupported frame format version 2");
    }
}

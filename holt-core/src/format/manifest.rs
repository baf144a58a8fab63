//! The manifest: which frame slots hold the last checkpoint, and where log replay starts
//! (byte table in `docs/format.md`, section "Manifest"). No I/O here.
//!
//! The manifest is replaced atomically (temp file, fsync, rename, fsync of the directory),
//! so at any moment exactly one durable manifest exists and every slot it names is intact.

pub(crate) const MANIFEST_MAGIC: u64 = u64::from_le_bytes(*b"HOLTMANI");
/// Version written. Version 5 (no size table), version 4 (no usage table), version 3 (no
/// checksums in the tables), version 2 (no delta table) and version 1 (no `frames_lsn`, a
/// 64-byte header) are still read.
pub(crate) const MANIFEST_VERSION: u32 = 6;
/// Fixed bytes before the frame table (versions 2 to 4; version 1 had 64).
pub(crate) const MANIFEST_HEADER_BYTES: usize = 72;
const MANIFEST_V1_HEADER_BYTES: usize = 64;
/// Bytes per table entry: frame id, slot or offset, checksum, whether the checksum is known.
pub(crate) const MANIFEST_ENTRY_BYTES: usize = 24;
/// Bytes per table entry in versions 1 to 3: frame id, slot or offset.
const MANIFEST_V3_ENTRY_BYTES: usize = 16;
/// Bytes per usage table entry: frame id, keys, weight.
const USAGE_ENTRY_BYTES: usize = 24;
/// Bytes per size table entry: frame id, encoded size bound.
const SIZE_ENTRY_BYTES: usize = 16;
/// Longest weigher name a manifest stores.
pub(crate) const WEIGHER_NAME_MAX: usize = 255;
/// Slots a manifest may name: 2^40 slots of 512 KiB (2^59 bytes), far past any file system's
/// largest file.
pub(crate) const SLOT_LIMIT: u64 = 1 << 40;
/// Name of the manifest file and of the temp file it is written to first.
pub(crate) const MANIFEST_NAME: &str = "MANIFEST";
pub(crate) const MANIFEST_TMP_NAME: &str = "MANIFEST.tmp";

const _: () = assert!(MANIFEST_HEADER_BYTES & 7 == 0 && MANIFEST_ENTRY_BYTES & 7 == 0);

/// One entry of the frame or delta table: frame id; slot of its image, or byte offset of a
/// delta; and the checksum field (header offset 24) the image or delta there must carry, so
/// that an older valid image of the same frame left by a lost or misdirected write is refused
/// instead of read. `None`: named by a manifest older than version 4, checked by its own
/// checksum only.
pub(crate) type Entry = (u64, u64, Option<u32>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The base of `wal_segment`: replay reads the log from here. Every record below it is in
    /// the frames; so are those below `frames_lsn`, which may be later.
    pub checkpoint_lsn: u64,
    /// Replay starts with this log segment (its first record, if any, has lsn `checkpoint_lsn`).
    pub wal_segment: u64,
    /// The frame holding the root of the tree.
    pub root_frame: u64,
    /// Keys stored in the tree at the checkpoint (the tree's counter starts from it).
    pub key_count: u64,
    /// Most bytes the log may have written without an fdatasync: the torn-tail window.
    pub wal_window_bytes: u64,
    /// The log position the checkpoint captured: the frames hold exactly the records below
    /// it, so replay skips those (applying them again would dirty every frame they touch).
    /// At least `checkpoint_lsn`; equal to it in version 1 manifests.
    pub frames_lsn: u64,
    /// (frame id, slot of its whole image, its checksum) for every live frame, sorted by
    /// frame id.
    pub frames: Vec<Entry>,
    /// (frame id, byte offset of a delta in the frames file, its checksum) for every delta
    /// applied on top of an image, sorted by frame id, each frame's deltas in the order they
    /// apply (their chain positions 1, 2, …). Offsets are multiples of 4096.
    pub deltas: Vec<Entry>,
    /// Every live frame's subtree totals and the weigher that counted them; `None` in
    /// manifests older than version 5 (the totals are then counted at open).
    pub usage: Option<StoredUsage>,
    /// (frame id, encoded size bound) of the live frames whose size the checkpoint knew,
    /// sorted by frame id: an upper bound of the bytes the frame's image would take with its
    /// deltas applied. Empty in manifests older than version 6.
    pub sizes: Vec<(u64, u64)>,
}

/// The frames' subtree totals as a checkpoint captured them (`Tree::usage_table`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StoredUsage {
    /// `Weigher::name` of the weigher that counted them; empty for none.
    pub weigher: String,
    /// (frame id, keys, weight), sorted by frame id.
    pub frames: Vec<(u64, u64, u64)>,
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let entries = self.frames.len() + self.deltas.len();
        let mut out = Vec::with_capacity(MANIFEST_HEADER_BYTES + entries * MANIFEST_ENTRY_BYTES + 16);
        out.extend_from_slice(&MANIFEST_MAGIC.to_le_bytes());
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [
            self.checkpoint_lsn,
            self.wal_segment,
            self.root_frame,
            self.key_count,
            self.wal_window_bytes,
            self.frames.len() as u64,
            self.frames_lsn,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        debug_assert_eq!(out.len(), MANIFEST_HEADER_BYTES);
        let entry = |out: &mut Vec<u8>, &(id, at, sum): &Entry| {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
            out.extend_from_slice(&sum.unwrap_or(0).to_le_bytes());
            out.extend_from_slice(&u32::from(sum.is_some()).to_le_bytes());
        };
        for e in &self.frames {
            entry(&mut out, e);
        }
        out.extend_from_slice(&(self.deltas.len() as u64).to_le_bytes());
        for e in &self.deltas {
            entry(&mut out, e);
        }
        let usage = self.usage.clone().unwrap_or_default();
        out.extend_from_slice(&(usage.frames.len() as u64).to_le_bytes());
        for (id, keys, weight) in &usage.frames {
            for v in [id, keys, weight] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        let name = &usage.weigher.as_bytes()[..usage.weigher.len().min(WEIGHER_NAME_MAX)];
        out.extend_from_slice(&(name.len() as u64).to_le_bytes());
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(8), 0);
        out.extend_from_slice(&(self.sizes.len() as u64).to_le_bytes());
        for (id, size) in &self.sizes {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        out
    }

    /// Decodes and validates a manifest; the error says what is wrong and at which offset.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Manifest, (u64, &'static str)> {
        let u64_at = |off: usize| -> Result<u64, (u64, &'static str)> {
            let b = bytes.get(off..off + 8).ok_or((off as u64, "manifest is truncated"))?;
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            Ok(u64::from_le_bytes(w))
        };
        if u64_at(0)? != MANIFEST_MAGIC {
            return Err((0, "bad manifest magic"));
        }
        let version = u64_at(8)? & 0xFFFF_FFFF;
        let header = match version {
            1 => MANIFEST_V1_HEADER_BYTES,
            2..=6 => MANIFEST_HEADER_BYTES,
            _ => return Err((8, "unknown manifest version")),
        };
        let entry_bytes = if version >= 4 { MANIFEST_ENTRY_BYTES } else { MANIFEST_V3_ENTRY_BYTES };
        // A table of `count` entries at `at`, checked against the manifest's length.
        let table = |at: usize, count: u64, count_at: u64| -> Result<Vec<Entry>, (u64, &'static str)> {
            let room = (bytes.len().saturating_sub(at) / entry_bytes) as u64;
            if count > room {
                return Err((count_at, "manifest table count exceeds its length"));
            }
            (0..count as usize)
                .map(|i| {
                    let e = at + i * entry_bytes;
                    let sum = if version >= 4 {
                        let word = u64_at(e + 16)?;
                        let (sum, known) = (word as u32, (word >> 32) as u32);
                        match known {
                            0 if sum == 0 => None,
                            1 => Some(sum),
                            _ => return Err(((e + 16) as u64, "manifest entry has a malformed checksum")),
                        }
                    } else {
                        None
                    };
                    Ok((u64_at(e)?, u64_at(e + 8)?, sum))
                })
                .collect()
        };
        let frames = table(header, u64_at(56)?, 56)?;
        let mut end = header + frames.len() * entry_bytes;
        let deltas = if version >= 3 {
            let count_at = end;
            let deltas = table(count_at + 8, u64_at(count_at)?, count_at as u64)?;
            end = count_at + 8 + deltas.len() * entry_bytes;
            deltas
        } else {
            Vec::new()
        };
        let usage = if version >= 5 {
            let count_at = end;
            let count = u64_at(count_at)?;
            if count > (bytes.len().saturating_sub(count_at + 8) / USAGE_ENTRY_BYTES) as u64 {
                return Err((count_at as u64, "manifest usage table count exceeds its length"));
            }
            let first = count_at + 8;
            let frames = (0..count as usize)
                .map(|i| {
                    let e = first + i * USAGE_ENTRY_BYTES;
                    Ok((u64_at(e)?, u64_at(e + 8)?, u64_at(e + 16)?))
                })
                .collect::<Result<Vec<_>, (u64, &'static str)>>()?;
            let name_at = first + frames.len() * USAGE_ENTRY_BYTES;
            let name_len = u64_at(name_at)?;
            if name_len > WEIGHER_NAME_MAX as u64 {
                return Err((name_at as u64, "manifest weigher name is too long"));
            }
            let name = bytes
                .get(name_at + 8..name_at + 8 + name_len as usize)
                .ok_or((name_at as u64, "manifest is truncated"))?;
            let weigher = String::from_utf8(name.to_vec())
                .map_err(|_| (name_at as u64, "manifest weigher name is not UTF-8"))?;
            end = (name_at + 8 + name_len as usize).next_multiple_of(8);
            if frames.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err((first as u64, "manifest usage table is not sorted"));
            }
            Some(StoredUsage { weigher, frames })
        } else {
            None
        };
        let sizes = if version >= 6 {
            let count_at = end;
            let count = u64_at(count_at)?;
            if count > (bytes.len().saturating_sub(count_at + 8) / SIZE_ENTRY_BYTES) as u64 {
                return Err((count_at as u64, "manifest size table count exceeds its length"));
            }
            let first = count_at + 8;
            let sizes = (0..count as usize)
                .map(|i| {
                    Ok((u64_at(first + i * SIZE_ENTRY_BYTES)?, u64_at(first + i * SIZE_ENTRY_BYTES + 8)?))
                })
                .collect::<Result<Vec<_>, (u64, &'static str)>>()?;
            end = first + sizes.len() * SIZE_ENTRY_BYTES;
            if sizes.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err((first as u64, "manifest size table is not sorted"));
            }
            if sizes.iter().any(|&(_, size)| size == 0 || size > super::FRAME_SIZE as u64) {
                return Err((first as u64, "manifest size table holds a size no frame has"));
            }
            sizes
        } else {
            Vec::new()
        };
        let stored = bytes.get(end..end + 4).ok_or((end as u64, "manifest is truncated"))?;
        if crc32c::crc32c(&bytes[..end]).to_le_bytes() != stored {
            return Err((end as u64, "manifest checksum mismatch"));
        }
        if frames.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err((header as u64, "manifest frame table is not sorted"));
        }
        if deltas.windows(2).any(|w| w[0].0 > w[1].0) {
            return Err((end as u64, "manifest delta table is not sorted"));
        }
        // Slots and offsets far past any real file: offset arithmetic on them cannot overflow.
        if frames.iter().any(|f| f.1 >= SLOT_LIMIT) {
            return Err((header as u64, "manifest names a frame slot past the largest frames file"));
        }
        if deltas.iter().any(|d| d.1 >= SLOT_LIMIT * super::FRAME_SIZE as u64) {
            return Err((end as u64, "manifest names a delta past the largest frames file"));
        }
        if deltas.iter().any(|d| d.1 % 4096 != 0) {
            return Err((end as u64, "manifest names a delta at an offset that is not 4 KiB aligned"));
        }
        if deltas.iter().any(|d| frames.binary_search_by_key(&d.0, |f| f.0).is_err()) {
            return Err((end as u64, "manifest names a delta of a frame it does not list"));
        }
        let checkpoint_lsn = u64_at(16)?;
        let frames_lsn = if header == MANIFEST_V1_HEADER_BYTES { checkpoint_lsn } else { u64_at(64)? };
        if frames_lsn < checkpoint_lsn {
            return Err((64, "manifest frames_lsn lies before the log it replays"));
        }
        Ok(Manifest {
            checkpoint_lsn,
            wal_segment: u64_at(24)?,
            root_frame: u64_at(32)?,
            key_count: u64_at(40)?,
            wal_window_bytes: u64_at(48)?,
            frames_lsn,
            frames,
            deltas,
            usage,
            sizes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest replaying from lsn 4096 in segment 3.
    fn sample(frames_lsn: u64, frames: Vec<Entry>) -> Manifest {
        Manifest {
            checkpoint_lsn: 4096,
            wal_segment: 3,
            root_frame: 0,
            key_count: 9,
            wal_window_bytes: 8 << 20,
            frames_lsn,
            frames,
            deltas: Vec::new(),
            usage: None,
            sizes: Vec::new(),
        }
    }

    #[test]
    fn round_trip_and_every_flip_detected() {
        let mut m = sample(6000, vec![(0, 5, Some(0xDEAD_BEEF)), (3, 1, Some(0)), (8, 0, None)]);
        m.deltas = vec![(3, 7 << 12, Some(7)), (3, 2 << 12, None), (8, 9 << 19, Some(u32::MAX))];
        m.usage = Some(StoredUsage {
            weigher: "object-size".into(),
            frames: vec![(0, 9, 1 << 40), (3, 4, 99), (8, 1, 0)],
        });
        m.sizes = vec![(0, 4096), (8, super::super::FRAME_SIZE as u64)];
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Ok(m));
        for i in 0..bytes.len() - 4 {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(Manifest::decode(&bad).is_err(), "flip at {i} went unnoticed");
        }
        assert!(Manifest::decode(&bytes[..bytes.len() - 10]).is_err());
        assert!(Manifest::decode(&[]).is_err());
    }

    /// A version 1 manifest (64-byte header, no frames_lsn) written by the previous format,
    /// byte for byte: it still opens, with the frames taken to stop at checkpoint_lsn.
    #[test]
    fn version_1_manifests_are_read() {
        let mut v1 = Vec::new();
        v1.extend_from_slice(b"HOLTMANI");
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&0u32.to_le_bytes());
        for v in [4096u64, 3, 0, 9, 8 << 20, 2] {
            v1.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0u64, 5, 3, 1] {
            v1.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        v1.extend_from_slice(&[0u8; 4]);
        let m = Manifest::decode(&v1).expect("a version 1 manifest");
        assert_eq!(m, sample(4096, vec![(0, 5, None), (3, 1, None)]));
    }

    /// Writes `m` as a version 3 manifest (16-byte entries, no checksums), or as version 2
    /// (no delta table either).
    fn encode_old(m: &Manifest, version: u32) -> Vec<u8> {
        let mut out = m.encode()[..MANIFEST_HEADER_BYTES].to_vec();
        out[8..12].copy_from_slice(&version.to_le_bytes());
        for &(id, at, _) in &m.frames {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
        }
        if version == 3 {
            out.extend_from_slice(&(m.deltas.len() as u64).to_le_bytes());
            for &(id, at, _) in &m.deltas {
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&at.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        out
    }

    /// A version 2 manifest (no delta table) still opens, with no deltas.
    #[test]
    fn version_2_manifests_are_read() {
        let m = sample(6000, vec![(0, 5, None), (3, 1, None)]);
        assert_eq!(Manifest::decode(&encode_old(&m, 2)), Ok(m));
    }

    /// A version 3 manifest (no checksums) still opens, its entries' checksums unknown.
    #[test]
    fn version_3_manifests_are_read() {
        let mut m = sample(6000, vec![(0, 5, None), (3, 1, None)]);
        m.deltas = vec![(3, 7 << 12, None)];
        assert_eq!(Manifest::decode(&encode_old(&m, 3)), Ok(m));
    }

    /// The word after an entry's slot is (checksum, known): known is 0 or 1, and an unknown
    /// checksum is 0.
    #[test]
    fn malformed_entry_checksums_are_refused() {
        let m = sample(6000, vec![(0, 5, None)]);
        for (sum, known) in [(1u32, 0u32), (0, 2)] {
            let mut bytes = m.encode();
            let at = MANIFEST_HEADER_BYTES + 16;
            bytes[at..at + 4].copy_from_slice(&sum.to_le_bytes());
            bytes[at + 4..at + 8].copy_from_slice(&known.to_le_bytes());
            let end = bytes.len() - 8;
            let crc = crc32c::crc32c(&bytes[..end]);
            bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(
                Manifest::decode(&bytes),
                Err((at as u64, "manifest entry has a malformed checksum")),
                "sum {sum} known {known}"
            );
        }
    }

    /// A version 5 manifest (no size table: the crc32c follows the weigher's name) still
    /// opens, every frame's size unknown.
    #[test]
    fn version_5_manifests_are_read() {
        let mut m = sample(6000, vec![(0, 5, Some(1)), (3, 1, Some(2))]);
        m.usage = Some(StoredUsage { weigher: "w".into(), frames: vec![(0, 9, 9), (3, 4, 4)] });
        let mut v5 = m.encode();
        // Without the crc32c and its padding, and the size table's count.
        v5.truncate(v5.len() - 16);
        v5[8..12].copy_from_slice(&5u32.to_le_bytes());
        let crc = crc32c::crc32c(&v5);
        v5.extend_from_slice(&crc.to_le_bytes());
        v5.extend_from_slice(&[0u8; 4]);
        assert_eq!(Manifest::decode(&v5), Ok(m));
    }

    /// A size table entry bounds a frame's bytes: 0 and more than a frame are refused, as is
    /// a table out of order.
    #[test]
    fn sizes_no_frame_has_are_refused() {
        let mut m = sample(6000, vec![(0, 5, None), (3, 1, None)]);
        for sizes in [vec![(0, 0)], vec![(3, super::super::FRAME_SIZE as u64 + 1)], vec![(3, 9), (0, 9)]] {
            m.sizes = sizes;
            assert!(Manifest::decode(&m.encode()).is_err(), "{:?}", m.sizes);
        }
    }

    #[test]
    fn a_delta_of_an_unlisted_frame_is_refused() {
        let mut m = sample(6000, vec![(0, 5, None)]);
        m.deltas = vec![(4, 2 << 12, None)];
        assert!(Manifest::decode(&m.encode()).is_err());
        m.deltas = vec![(0, 4095, None)];
        assert!(Manifest::decode(&m.encode()).is_err(), "a delta off the 4 KiB grid");
        m.deltas = vec![(0, u64::MAX - 4095, None)];
        assert!(Manifest::decode(&m.encode()).is_err(), "a delta past any file");
        m.deltas = Vec::new();
        m.frames = vec![(0, SLOT_LIMIT, None)];
        assert!(Manifest::decode(&m.encode()).is_err(), "a slot past any file");
    }

    #[test]
    fn frames_lsn_before_the_replay_start_is_refused() {
        let m = sample(4000, vec![]);
        assert_eq!(
            Manifest::decode(&m.encode()),
            Err((64, "manifest frames_lsn lies before the log it replays"))
        );
    }
}

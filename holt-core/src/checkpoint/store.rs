//! The frames file: fixed 512 KiB slots, each holding one self-checksummed image: a frame's
//! whole image, or one delta of a frame's chain (see `format::delta`).
//!
//! Invariant: a slot named by the durable manifest is never written. A checkpoint writes every
//! dirty frame (whole or as a delta) to a FRESH slot (one the durable manifest does not name),
//! syncs, and only the manifest switch makes the new slots current; a torn 512 KiB write can
//! therefore only hit a slot nobody depends on.

use std::collections::{HashMap, HashSet};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::buffer::FrameSource;
use crate::error::{Error, Location, Result};
use crate::format::frame::{stored_len, HEADER_LEN, STORE_ALIGN_BYTES};
use crate::format::{FrameId, FRAME_SIZE};
use crate::io::{failpoint, Vfs, VfsFile};

/// File name of the frames file.
pub(crate) const FRAMES_NAME: &str = "frames.dat";

/// Where a frame's durable state lies: its whole image and the deltas applied on top of it,
/// in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FrameLoc {
    pub image: u64,
    pub deltas: Vec<u64>,
}

/// Frame id → where it lies.
pub(crate) type SlotTable = HashMap<u64, FrameLoc>;

/// The slot table a manifest names.
pub(crate) fn table_of(manifest: &crate::format::manifest::Manifest) -> SlotTable {
    let mut table: SlotTable =
        manifest.frames.iter().map(|&(id, image)| (id, FrameLoc { image, deltas: Vec::new() })).collect();
    for &(id, slot) in &manifest.deltas {
        if let Some(loc) = table.get_mut(&id) {
            loc.deltas.push(slot);
        }
    }
    table
}

/// (frame id, slot) pairs, as the manifest lists them.
pub(crate) type SlotList = Vec<(u64, u64)>;

/// A slot table as the manifest's two sorted lists: (id, image slot) and (id, delta slot).
pub(crate) fn manifest_lists(table: &SlotTable) -> (SlotList, SlotList) {
    let mut ids: Vec<u64> = table.keys().copied().collect();
    ids.sort_unstable();
    let frames = ids.iter().map(|id| (*id, table[id].image)).collect();
    let deltas = ids.iter().flat_map(|id| table[id].deltas.iter().map(move |&slot| (*id, slot))).collect();
    (frames, deltas)
}

fn slots_of(table: &SlotTable) -> impl Iterator<Item = u64> + '_ {
    table.values().flat_map(|loc| std::iter::once(loc.image).chain(loc.deltas.iter().copied()))
}

pub(crate) struct FrameStore {
    file: Arc<dyn VfsFile>,
    /// Frame id → slots, as named by the durable manifest. Readers hold the read lock across
    /// their pread, so a slot freed by a manifest switch is never read while it is rewritten.
    slots: RwLock<SlotTable>,
    /// Slot → stored bytes and used bytes of the image last written there (or read from it),
    /// so a read fetches the image's header and records, not the slot's whole 512 KiB. Slots
    /// not in it are read by their first 4 KiB, then the rest their header names.
    lengths: parking_lot::Mutex<HashMap<u64, (usize, usize)>>,
}

fn slot_offset(slot: u64) -> u64 {
    slot * FRAME_SIZE as u64
}

impl FrameStore {
    pub(crate) fn open(vfs: &dyn Vfs, slots: SlotTable) -> Result<FrameStore> {
        let file = vfs.open_batched(Path::new(FRAMES_NAME)).map_err(|source| Error::Io {
            op: "open frames file",
            source,
            may_have_applied: false,
        })?;
        Ok(FrameStore { file, slots: RwLock::new(slots), lengths: Default::default() })
    }

    /// The durable slot table.
    pub(crate) fn slots(&self) -> SlotTable {
        self.slots.read().clone()
    }

    /// The header and record bytes of the image in `slot` (its `used_bytes`), when this
    /// process wrote or read it.
    pub(crate) fn used_bytes(&self, slot: u64) -> Option<usize> {
        self.lengths.lock().get(&slot).map(|&(_, used)| used)
    }

    /// `count` slots the durable manifest does not name, lowest first: where a checkpoint
    /// writes its frames.
    pub(crate) fn fresh_slots(&self, count: usize) -> Vec<u64> {
        let used: HashSet<u64> = slots_of(&self.slots.read()).collect();
        (0u64..).filter(|slot| !used.contains(slot)).take(count).collect()
    }

    /// Writes sealed images (whole frames or deltas) to `slots` (from `fresh_slots`, one
    /// each, in order), without syncing: a checkpoint writes its frames in batches and calls
    /// `sync` once after the last.
    pub(crate) fn write_at(&self, images: &[&[u8]], slots: &[u64]) -> io::Result<()> {
        debug_assert_eq!(images.len(), slots.len());
        // Only an image's header and records (rounded to 4 KiB) are written; the rest of its
        // slot is a hole, so the file holds about the encoded bytes, not slots × 512 KiB.
        let requests: Vec<(&[u8], u64)> = images
            .iter()
            .zip(slots)
            .map(|(bytes, &slot)| (&bytes[..stored_len(bytes)], slot_offset(slot)))
            .collect();
        failpoint("frame-write")?;
        for (bytes, offset) in &requests {
            // The slot may hold an older, longer image: its tail is padding from now on.
            self.file.release(offset + bytes.len() as u64, (FRAME_SIZE - bytes.len()) as u64)?;
        }
        self.file.write_many_at(&requests)?;
        let mut lengths = self.lengths.lock();
        for ((bytes, _), &slot) in requests.iter().zip(slots) {
            lengths.insert(slot, (bytes.len(), claimed_used(bytes)));
        }
        drop(lengths);
        // Every slot reads as FRAME_SIZE bytes: extend the file over the last slot's padding
        // (a hole, made durable by `sync` together with the writes).
        if let Some(&last) = slots.iter().max() {
            let end = slot_offset(last + 1);
            if self.file.len()? < end {
                self.file.set_len(end)?;
            }
        }
        Ok(())
    }

    /// Makes every `write_at` so far durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        failpoint("frame-sync")?;
        self.file.sync_data()
    }

    /// Switches the table to the one a newly durable manifest names, then gives the slots
    /// only the old table named back to the file system and cuts the file after the last
    /// named slot. Both are best effort: a failure (or a crash before the next sync) only
    /// costs space, since no durable manifest names those bytes any more.
    pub(crate) fn install(&self, slots: SlotTable) {
        let live: HashSet<u64> = slots_of(&slots).collect();
        let end = live.iter().max().map_or(0, |&s| slot_offset(s + 1));
        let old = std::mem::replace(&mut *self.slots.write(), slots);
        let freed: HashSet<u64> = slots_of(&old).filter(|s| !live.contains(s)).collect();
        for slot in freed {
            if let Err(e) = self.file.release(slot_offset(slot), FRAME_SIZE as u64) {
                tracing::debug!(error = %e, slot, "releasing a free frame slot failed");
            }
        }
        self.truncate_after(end);
    }

    fn truncate_after(&self, end: u64) {
        if self.file.len().is_ok_and(|len| len > end) {
            if let Err(e) = self.file.set_len(end) {
                tracing::debug!(error = %e, "cutting the frames file after its last slot failed");
            }
        }
    }
}

impl FrameStore {
    /// Reads the image in `slot` into the start of `buf` (`FRAME_SIZE` long) and returns its
    /// stored length: the length last written or read there when known, else the first 4 KiB
    /// and then the rest its header names (a corrupt header is reported by the decoder).
    fn read_slot(&self, frame: u64, slot: u64, buf: &mut [u8]) -> Result<usize> {
        if buf.len() != FRAME_SIZE {
            return Err(Error::InvalidArgument(format!("frame buffer of {} bytes", buf.len())));
        }
        let corrupt = |reason: &str| Error::Corruption {
            location: Location {
                file: PathBuf::from(FRAMES_NAME),
                frame: Some(frame),
                offset: slot_offset(slot),
            },
            reason: reason.into(),
        };
        let read = |buf: &mut [u8], at: usize| {
            self.file.read_exact_at(buf, slot_offset(slot) + at as u64).map_err(|source| {
                match source.kind() {
                    io::ErrorKind::UnexpectedEof => corrupt("frames file ends inside the slot"),
                    _ => Error::Io { op: "read frame", source, may_have_applied: false },
                }
            })
        };
        let known = self.lengths.lock().get(&slot).map(|&(stored, _)| stored);
        let len = match known {
            Some(len) => {
                let len = len.min(FRAME_SIZE);
                read(&mut buf[..len], 0)?;
                len
            }
            None => {
                read(&mut buf[..STORE_ALIGN_BYTES], 0)?;
                let len = stored_len_claimed(&buf[..HEADER_LEN]);
                if len > STORE_ALIGN_BYTES {
                    read(&mut buf[STORE_ALIGN_BYTES..len], STORE_ALIGN_BYTES)?;
                }
                self.lengths.lock().insert(slot, (len, claimed_used(buf)));
                len
            }
        };
        Ok(len)
    }
}

/// The stored length a header claims (`used_bytes` rounded up to 4 KiB, clamped to a slot);
/// a corrupt claim is reported by the decoder, which checks `used_bytes` against the bytes.
fn stored_len_claimed(header: &[u8]) -> usize {
    claimed_used(header).next_multiple_of(STORE_ALIGN_BYTES)
}

/// The `used_bytes` a header claims, clamped to `HEADER_LEN..=FRAME_SIZE`.
fn claimed_used(header: &[u8]) -> usize {
    let used = u32::from_le_bytes([header[16], header[17], header[18], header[19]]) as usize;
    used.clamp(HEADER_LEN, FRAME_SIZE)
}

impl FrameSource for FrameStore {
    fn read_frame(&self, id: FrameId, buf: &mut [u8]) -> Result<usize> {
        let slots = self.slots.read();
        let Some(loc) = slots.get(&id.0) else {
            return Err(Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: 0 },
                reason: "frame is not in the manifest".into(),
            });
        };
        self.read_slot(id.0, loc.image, buf)
    }

    fn delta_count(&self, id: FrameId) -> usize {
        self.slots.read().get(&id.0).map_or(0, |loc| loc.deltas.len())
    }

    fn read_delta(&self, id: FrameId, index: usize, buf: &mut [u8]) -> Result<(usize, (PathBuf, u64))> {
        let slots = self.slots.read();
        let Some(&slot) = slots.get(&id.0).and_then(|loc| loc.deltas.get(index)) else {
            return Err(Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: 0 },
                reason: format!("frame has no delta {index} in the manifest"),
            });
        };
        let len = self.read_slot(id.0, slot, buf)?;
        Ok((len, (PathBuf::from(FRAMES_NAME), slot_offset(slot))))
    }

    fn locate(&self, id: FrameId) -> (PathBuf, u64) {
        let offset = self.slots.read().get(&id.0).map(|loc| slot_offset(loc.image)).unwrap_or(0);
        (PathBuf::from(FRAMES_NAME), offset)
    }
}

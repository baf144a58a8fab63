//! The frames file: fixed 512 KiB slots, each holding one self-checksummed frame image.
//!
//! Invariant: a slot named by the durable manifest is never written. A checkpoint writes every
//! dirty frame to a FRESH slot (one the durable manifest does not name), syncs, and only the
//! manifest switch makes the new slots current; a torn 512 KiB write can therefore only hit
//! a slot nobody depends on.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::buffer::FrameSource;
use crate::error::{Error, Location, Result};
use crate::format::frame::stored_len;
use crate::format::{FrameId, FRAME_SIZE};
use crate::io::{failpoint, Vfs, VfsFile};

/// File name of the frames file.
pub(crate) const FRAMES_NAME: &str = "frames.dat";

pub(crate) struct FrameStore {
    file: Arc<dyn VfsFile>,
    /// Frame id → slot, as named by the durable manifest. Readers hold the read lock across
    /// their pread, so a slot freed by a manifest switch is never read while it is rewritten.
    slots: RwLock<HashMap<u64, u64>>,
    /// Slot → bytes of the image last written there (or read from it), so a read fetches the
    /// image's header and records, not the slot's whole 512 KiB. Slots not in it are read whole.
    lengths: parking_lot::Mutex<HashMap<u64, usize>>,
}

fn slot_offset(slot: u64) -> u64 {
    slot * FRAME_SIZE as u64
}

impl FrameStore {
    pub(crate) fn open(vfs: &dyn Vfs, slots: HashMap<u64, u64>) -> Result<FrameStore> {
        let file = vfs.open_batched(Path::new(FRAMES_NAME)).map_err(|source| Error::Io {
            op: "open frames file",
            source,
            may_have_applied: false,
        })?;
        Ok(FrameStore { file, slots: RwLock::new(slots), lengths: Default::default() })
    }

    /// The durable id → slot table.
    pub(crate) fn slots(&self) -> HashMap<u64, u64> {
        self.slots.read().clone()
    }

    /// `count` slots the durable manifest does not name, lowest first: where a checkpoint
    /// writes its frames.
    pub(crate) fn fresh_slots(&self, count: usize) -> Vec<u64> {
        let used: HashSet<u64> = self.slots.read().values().copied().collect();
        (0u64..).filter(|slot| !used.contains(slot)).take(count).collect()
    }

    /// Writes encoded frame images (id, image) to `slots` (from `fresh_slots`, one each, in
    /// order), without syncing: a checkpoint writes its frames in batches and calls `sync`
    /// once after the last.
    pub(crate) fn write_at(&self, frames: &[(u64, Vec<u8>)], slots: &[u64]) -> io::Result<()> {
        debug_assert_eq!(frames.len(), slots.len());
        // Only a frame's header and records (rounded to 4 KiB) are written; the rest of its
        // slot is a hole, so the file holds about the encoded bytes, not slots × 512 KiB.
        let requests: Vec<(&[u8], u64)> = frames
            .iter()
            .zip(slots)
            .map(|((_, bytes), &slot)| (&bytes[..stored_len(bytes)], slot_offset(slot)))
            .collect();
        failpoint("frame-write")?;
        for (bytes, offset) in &requests {
            // The slot may hold an older, longer image: its tail is padding from now on.
            self.file.release(offset + bytes.len() as u64, (FRAME_SIZE - bytes.len()) as u64)?;
        }
        self.file.write_many_at(&requests)?;
        let mut lengths = self.lengths.lock();
        for ((bytes, _), &slot) in requests.iter().zip(slots) {
            lengths.insert(slot, bytes.len());
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
    pub(crate) fn install(&self, slots: HashMap<u64, u64>) {
        let live: HashSet<u64> = slots.values().copied().collect();
        let end = live.iter().max().map_or(0, |&s| slot_offset(s + 1));
        let old = std::mem::replace(&mut *self.slots.write(), slots);
        for slot in old.into_values().filter(|s| !live.contains(s)) {
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

impl FrameSource for FrameStore {
    fn read_frame(&self, id: FrameId, buf: &mut [u8]) -> Result<usize> {
        let slots = self.slots.read();
        let Some(&slot) = slots.get(&id.0) else {
            return Err(Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: 0 },
                reason: "frame is not in the manifest".into(),
            });
        };
        if buf.len() != FRAME_SIZE {
            return Err(Error::InvalidArgument(format!("frame buffer of {} bytes", buf.len())));
        }
        let known = self.lengths.lock().get(&slot).copied();
        let len = known.unwrap_or(FRAME_SIZE).min(FRAME_SIZE);
        self.file.read_exact_at(&mut buf[..len], slot_offset(slot)).map_err(|source| {
            match source.kind() {
                io::ErrorKind::UnexpectedEof => Error::Corruption {
                    location: Location {
                        file: PathBuf::from(FRAMES_NAME),
                        frame: Some(id.0),
                        offset: slot_offset(slot),
                    },
                    reason: "frames file ends inside the frame's slot".into(),
                },
                _ => Error::Io { op: "read frame", source, may_have_applied: false },
            }
        })?;
        if known.is_none() {
            // Read whole once: remember the image's length for the next read of this slot (a
            // corrupt header is reported by the decoder either way).
            self.lengths.lock().insert(slot, stored_len(buf));
        }
        Ok(len)
    }

    fn locate(&self, id: FrameId) -> (PathBuf, u64) {
        let offset = self.slots.read().get(&id.0).map(|&s| slot_offset(s)).unwrap_or(0);
        (PathBuf::from(FRAMES_NAME), offset)
    }
}

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
use crate::format::{FrameId, FRAME_SIZE};
use crate::io::{failpoint, Vfs, VfsFile};

/// File name of the frames file.
pub(crate) const FRAMES_NAME: &str = "frames.dat";

pub(crate) struct FrameStore {
    file: Arc<dyn VfsFile>,
    /// Frame id → slot, as named by the durable manifest. Readers hold the read lock across
    /// their pread, so a slot freed by a manifest switch is never read while it is rewritten.
    slots: RwLock<HashMap<u64, u64>>,
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
        Ok(FrameStore { file, slots: RwLock::new(slots) })
    }

    /// The durable id → slot table.
    pub(crate) fn slots(&self) -> HashMap<u64, u64> {
        self.slots.read().clone()
    }

    /// Writes `frames` (id, encoded image) to slots the durable manifest does not name and
    /// syncs them. Returns the slot chosen for each frame, in order.
    pub(crate) fn write_fresh(&self, frames: &[(u64, Vec<u8>)]) -> io::Result<Vec<u64>> {
        let used: HashSet<u64> = self.slots.read().values().copied().collect();
        let mut chosen = Vec::with_capacity(frames.len());
        let mut slot = 0u64;
        while chosen.len() < frames.len() {
            if !used.contains(&slot) {
                chosen.push(slot);
            }
            slot += 1;
        }
        let requests: Vec<(&[u8], u64)> =
            frames.iter().zip(&chosen).map(|((_, bytes), &slot)| (&bytes[..], slot_offset(slot))).collect();
        failpoint("frame-write")?;
        self.file.write_many_at(&requests)?;
        failpoint("frame-sync")?;
        self.file.sync_data()?;
        Ok(chosen)
    }

    /// Switches the table to the one a newly durable manifest names.
    pub(crate) fn install(&self, slots: HashMap<u64, u64>) {
        *self.slots.write() = slots;
    }
}

impl FrameSource for FrameStore {
    fn read_frame(&self, id: FrameId) -> Result<Vec<u8>> {
        let slots = self.slots.read();
        let Some(&slot) = slots.get(&id.0) else {
            return Err(Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: 0 },
                reason: "frame is not in the manifest".into(),
            });
        };
        let mut buf = vec![0u8; FRAME_SIZE];
        self.file.read_exact_at(&mut buf, slot_offset(slot)).map_err(|source| match source.kind() {
            io::ErrorKind::UnexpectedEof => Error::Corruption {
                location: Location {
                    file: PathBuf::from(FRAMES_NAME),
                    frame: Some(id.0),
                    offset: slot_offset(slot),
                },
                reason: "frames file ends inside the frame's slot".into(),
            },
            _ => Error::Io { op: "read frame", source, may_have_applied: false },
        })?;
        Ok(buf)
    }

    fn locate(&self, id: FrameId) -> (PathBuf, u64) {
        let offset = self.slots.read().get(&id.0).map(|&s| slot_offset(s)).unwrap_or(0);
        (PathBuf::from(FRAMES_NAME), offset)
    }
}

//! The frames file: fixed 512 KiB slots, each holding one self-checksummed frame image, or
//! deltas of frames' chains (see `format::delta`) packed back to back, each at a 4 KiB
//! boundary.
//!
//! Invariant: a slot the durable manifest names (for an image, or for any delta in it) is
//! never written. A checkpoint writes every dirty frame (whole, or as a delta) to FRESH slots
//! (ones the durable manifest does not name), syncs, and only the manifest switch makes the
//! new slots current; a torn write can therefore only hit a slot nobody depends on.
//!
//! Bytes no manifest names any more are given back to the file system (punched), but not at
//! once: a punch costs a journal commit, and a discard where the file system is mounted with
//! `discard` (~0.15 ms each here: 0.9 s of a checkpoint that made ~6,000). A slot a manifest
//! switch freed waits one checkpoint, which usually reuses it (punching only its old bytes
//! past the new ones); a dead delta in a slot still named waits until dead bytes are half
//! the slot's (`Garbage`).

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use smallvec::{smallvec, SmallVec};

use crate::buffer::{FrameSource, Lent};
use crate::error::{Error, Location, Result};
use crate::format::frame::{claimed_used, image_sum, stored_len, STORE_ALIGN_BYTES};
use crate::format::manifest::Entry;
use crate::format::{FrameId, FRAME_SIZE};
use crate::io::{failpoint, Vfs, VfsFile};

/// File name of the frames file.
pub(crate) const FRAMES_NAME: &str = "frames.dat";

/// Where a frame's durable state lies: the slot of its whole image, and the byte offsets in
/// the file of the deltas applied on top of it, in order; each with the checksum field the
/// manifest expects it to carry (`None`: named by a manifest older than version 4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FrameLoc {
    pub image: u64,
    pub image_sum: Option<u32>,
    pub deltas: Vec<(u64, Option<u32>)>,
}

/// Frame id → where it lies.
pub(crate) type SlotTable = HashMap<u64, FrameLoc>;

/// The slot table a manifest names.
pub(crate) fn table_of(manifest: &crate::format::manifest::Manifest) -> SlotTable {
    let mut table: SlotTable = manifest
        .frames
        .iter()
        .map(|&(id, image, image_sum)| (id, FrameLoc { image, image_sum, deltas: Vec::new() }))
        .collect();
    for &(id, offset, sum) in &manifest.deltas {
        if let Some(loc) = table.get_mut(&id) {
            loc.deltas.push((offset, sum));
        }
    }
    table
}

/// Table entries (frame id, slot or offset, checksum), as the manifest lists them.
pub(crate) type SlotList = Vec<Entry>;

/// A slot table as the manifest's two sorted lists: (id, image slot, checksum) and (id,
/// delta offset, checksum).
pub(crate) fn manifest_lists(table: &SlotTable) -> (SlotList, SlotList) {
    let mut ids: Vec<u64> = table.keys().copied().collect();
    ids.sort_unstable();
    let frames = ids.iter().map(|id| (*id, table[id].image, table[id].image_sum)).collect();
    let deltas =
        ids.iter().flat_map(|id| table[id].deltas.iter().map(move |&(at, sum)| (*id, at, sum))).collect();
    (frames, deltas)
}

/// The error of a failed read of the image or delta of frame `frame` at byte `offset`: a
/// file that ends inside the slot is corruption, anything else an I/O error.
fn read_failed(frame: u64, offset: u64, source: io::Error) -> Error {
    match source.kind() {
        io::ErrorKind::UnexpectedEof => Error::Corruption {
            location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(frame), offset },
            reason: "frames file ends inside the slot".into(),
        },
        _ => Error::Io { op: "read frame", source, may_have_applied: false },
    }
}

/// Refuses an image or delta whose checksum field is not the one the manifest recorded for
/// it: an older valid image of the same frame, left where a write was lost or misdirected.
fn check_sum(id: u64, at: u64, expected: Option<u32>, image: &[u8]) -> Result<()> {
    let (Some(expected), Some(found)) = (expected, image_sum(image)) else { return Ok(()) };
    if expected == found {
        return Ok(());
    }
    Err(Error::Corruption {
        location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id), offset: at },
        reason: format!(
            "not the image the manifest names (checksum {found:08x}, expected {expected:08x}): \
             an older one left by a lost or misdirected write"
        ),
    })
}

/// Every slot a table names: image slots, and the slots holding its deltas.
fn slots_of(table: &SlotTable) -> impl Iterator<Item = u64> + '_ {
    table.values().flat_map(|loc| {
        std::iter::once(loc.image).chain(loc.deltas.iter().map(|&(at, _)| at / FRAME_SIZE as u64))
    })
}

/// Every delta offset a table names.
fn deltas_of(table: &SlotTable) -> impl Iterator<Item = u64> + '_ {
    table.values().flat_map(|loc| loc.deltas.iter().map(|&(at, _)| at))
}

/// One slot's write: images placed back to back from the slot's start (one whole frame, or
/// deltas), each already padded to 4 KiB by `seal`.
pub(crate) struct SlotWrite<'a> {
    pub slot: u64,
    pub images: Vec<&'a [u8]>,
}

/// What the frames file may hold that no manifest needs, so that a checkpoint punches each
/// freed byte about once (see the module docs). Only checkpoints and the close change it,
/// one at a time (under the manifest lock). It knows only what this process freed: bytes a
/// process that stopped without closing left behind stay until a checkpoint reuses them.
#[derive(Debug, Default)]
struct Garbage {
    /// Slot → how many bytes from its start may be allocated, for slots written or punched
    /// since open and the slots free at open. Other slots below `holes_from` may be
    /// allocated whole; from it on, holes.
    extents: HashMap<u64, usize>,
    holes_from: u64,
    /// Slots the last manifest switch freed, left for the next checkpoint to reuse.
    waiting: Vec<u64>,
    /// Slots freed a checkpoint ago: punched by the next collection unless named again.
    due: Vec<u64>,
    /// Deltas no manifest names, in slots a manifest still names: slot → (offset, bytes).
    dead: HashMap<u64, Vec<(u64, usize)>>,
}

impl Garbage {
    /// How many bytes from the start of `slot` may be allocated.
    fn extent(&self, slot: u64) -> usize {
        match self.extents.get(&slot) {
            Some(&extent) => extent,
            None if slot >= self.holes_from => 0,
            None => FRAME_SIZE,
        }
    }
}

pub(crate) struct FrameStore {
    file: Arc<dyn VfsFile>,
    /// Frame id → slots, as named by the durable manifest. Readers hold the read lock across
    /// their pread, so a slot freed by a manifest switch is never read while it is rewritten.
    slots: RwLock<SlotTable>,
    /// Byte offset of an image or delta → its stored bytes and used bytes, as last written
    /// there (or read from it), so a read fetches the image's header and records, not a whole
    /// slot. Offsets not in it are read by their first 4 KiB, then the rest the header names.
    lengths: parking_lot::Mutex<HashMap<u64, (usize, usize)>>,
    garbage: parking_lot::Mutex<Garbage>,
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
        let len = file.len().map_err(|source| Error::Io {
            op: "stat frames file",
            source,
            may_have_applied: false,
        })?;
        let holes_from = len.div_ceil(FRAME_SIZE as u64);
        // What each free slot below the end holds, asked of the file system: a checkpoint
        // reusing a slot punches what lies past its new images, and a slot not known would
        // be taken as allocated whole (after every restart, one punch per reuse, which
        // took a quarter of a checkpoint rewriting thousands of frames).
        let named: HashSet<u64> = slots_of(&slots).collect();
        let mut extents = HashMap::new();
        for slot in (0..holes_from).filter(|slot| !named.contains(slot)) {
            match file.allocated_len(slot_offset(slot), FRAME_SIZE as u64) {
                Ok(bytes) => {
                    extents.insert(slot, usize::try_from(bytes).unwrap_or(FRAME_SIZE).min(FRAME_SIZE))
                }
                Err(_) => break, // the others stay taken as allocated whole
            };
        }
        let garbage = Garbage { extents, holes_from, ..Garbage::default() };
        Ok(FrameStore {
            file,
            slots: RwLock::new(slots),
            lengths: Default::default(),
            garbage: parking_lot::Mutex::new(garbage),
        })
    }

    /// The durable slot table.
    pub(crate) fn slots(&self) -> SlotTable {
        self.slots.read().clone()
    }

    /// The header and record bytes of the image or delta at byte `offset` (its
    /// `used_bytes`), when this process wrote or read it.
    pub(crate) fn used_bytes(&self, offset: u64) -> Option<usize> {
        self.lengths.lock().get(&offset).map(|&(_, used)| used)
    }

    /// `count` slots the durable manifest does not name, lowest first: where a checkpoint
    /// writes its frames.
    pub(crate) fn fresh_slots(&self, count: usize) -> Vec<u64> {
        let used: HashSet<u64> = slots_of(&self.slots.read()).collect();
        (0u64..).filter(|slot| !used.contains(slot)).take(count).collect()
    }

    /// Writes each slot's images back to back from the slot's start (slots from
    /// `fresh_slots`), one write per slot, without syncing: a checkpoint writes its frames in
    /// batches and calls `sync` once after the last. An image's offset is its slot's start
    /// plus the stored bytes of the images before it.
    pub(crate) fn write_slots(&self, writes: &[SlotWrite<'_>]) -> io::Result<()> {
        // Only the images' headers and records (rounded to 4 KiB) are written; the rest of a
        // slot is a hole, so the file holds about the encoded bytes, not slots × 512 KiB.
        let packed: Vec<std::borrow::Cow<'_, [u8]>> = writes
            .iter()
            .map(|w| match &w.images[..] {
                [one] => std::borrow::Cow::Borrowed(&one[..stored_len(one)]),
                many => {
                    let mut packed = Vec::with_capacity(many.iter().map(|i| stored_len(i)).sum());
                    for image in many {
                        packed.extend_from_slice(&image[..stored_len(image)]);
                    }
                    std::borrow::Cow::Owned(packed)
                }
            })
            .collect();
        if packed.iter().any(|bytes| bytes.len() > FRAME_SIZE) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "images packed past the end of a slot"));
        }
        let requests: Vec<(&[u8], u64)> =
            packed.iter().zip(writes).map(|(bytes, w)| (&bytes[..], slot_offset(w.slot))).collect();
        failpoint("frame-write")?;
        let mut garbage = self.garbage.lock();
        for (w, (bytes, offset)) in writes.iter().zip(&requests) {
            // The slot may hold older, longer images: what lies past the new ones is padding
            // from now on. Usually it is a hole already, or holds a shorter image.
            let old = garbage.extent(w.slot);
            if old > bytes.len() {
                self.file.release(offset + bytes.len() as u64, (old - bytes.len()) as u64)?;
            }
            garbage.extents.insert(w.slot, bytes.len());
        }
        drop(garbage);
        self.file.write_many_at(&requests)?;
        let mut lengths = self.lengths.lock();
        for w in writes {
            let mut at = slot_offset(w.slot);
            for image in &w.images {
                let stored = stored_len(image);
                lengths.insert(at, (stored, claimed_used(image)));
                at += stored as u64;
            }
        }
        drop(lengths);
        // Every slot reads as FRAME_SIZE bytes: extend the file over the last slot's padding
        // (a hole, made durable by `sync` together with the writes).
        if let Some(last) = writes.iter().map(|w| w.slot).max() {
            let end = slot_offset(last + 1);
            if self.file.len()? < end {
                self.file.set_len(end)?;
            }
        }
        Ok(())
    }

    /// Makes every `write_slots` so far durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        failpoint("frame-sync")?;
        self.file.sync_data()
    }

    /// Switches the table to the one a newly durable manifest names and cuts the file after
    /// the last named slot. What only the old table named becomes garbage (`Garbage`), given
    /// back to the file system by `collect_garbage`.
    pub(crate) fn install(&self, slots: SlotTable) {
        let live: HashSet<u64> = slots_of(&slots).collect();
        let live_deltas: HashSet<u64> = deltas_of(&slots).collect();
        let end = live.iter().max().map_or(0, |&s| slot_offset(s + 1));
        let old = std::mem::replace(&mut *self.slots.write(), slots);
        let freed: HashSet<u64> = slots_of(&old).filter(|s| !live.contains(s)).collect();
        let mut lengths = self.lengths.lock();
        let mut garbage = self.garbage.lock();
        for at in deltas_of(&old).filter(|at| !live_deltas.contains(at)) {
            let Some((stored, _)) = lengths.remove(&at) else { continue };
            let slot = at / FRAME_SIZE as u64;
            if !freed.contains(&slot) {
                garbage.dead.entry(slot).or_default().push((at, stored));
            }
        }
        lengths.retain(|at, _| !freed.contains(&(at / FRAME_SIZE as u64)));
        drop(lengths);
        garbage.dead.retain(|slot, _| !freed.contains(slot));
        let waited = std::mem::replace(&mut garbage.waiting, freed.into_iter().collect());
        garbage.due.extend(waited);
        drop(garbage);
        self.truncate_after(end);
    }

    /// Punches what `install` left as garbage: slots freed a checkpoint ago and not named
    /// again, and the dead deltas of slots whose dead bytes reached half the slot's extent;
    /// with `all`, everything (at close). Best effort: a failure only costs space. Called
    /// by the checkpoint that installed, before another may write (under the manifest lock),
    /// with no lock a reader takes held.
    pub(crate) fn collect_garbage(&self, all: bool) {
        let named: HashSet<u64> = slots_of(&self.slots.read()).collect();
        let mut garbage = self.garbage.lock();
        let mut due = std::mem::take(&mut garbage.due);
        if all {
            due.append(&mut garbage.waiting);
        }
        for slot in due {
            let extent = garbage.extent(slot);
            if named.contains(&slot) || extent == 0 {
                continue;
            }
            match self.file.release(slot_offset(slot), extent as u64) {
                Ok(()) => {
                    garbage.extents.insert(slot, 0);
                }
                Err(e) => tracing::debug!(error = %e, slot, "releasing a free frame slot failed"),
            }
        }
        let full: Vec<u64> = garbage
            .dead
            .iter()
            .filter(|&(&slot, dead)| {
                all || 2 * dead.iter().map(|d| d.1).sum::<usize>() >= garbage.extent(slot)
            })
            .map(|(&slot, _)| slot)
            .collect();
        for slot in full {
            let Some(mut dead) = garbage.dead.remove(&slot) else { continue };
            if !named.contains(&slot) {
                continue;
            }
            // Deltas are packed back to back: neighbours that died are punched as one run.
            dead.sort_unstable();
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for (at, len) in dead {
                match runs.last_mut() {
                    Some((start, run)) if *start + *run == at => *run += len as u64,
                    _ => runs.push((at, len as u64)),
                }
            }
            for (at, len) in runs {
                if let Err(e) = self.file.release(at, len) {
                    tracing::debug!(error = %e, at, "releasing dead frame deltas failed");
                }
            }
        }
    }

    fn truncate_after(&self, end: u64) {
        if self.file.len().is_ok_and(|len| len > end) {
            match self.file.set_len(end) {
                Ok(()) => {
                    // Every slot from `end` on is a hole now.
                    let mut garbage = self.garbage.lock();
                    let first = end / FRAME_SIZE as u64;
                    garbage.holes_from = garbage.holes_from.min(first);
                    garbage.extents.retain(|&slot, _| slot < first);
                }
                Err(e) => tracing::debug!(error = %e, "cutting the frames file after its last slot failed"),
            }
        }
    }

    /// Reads the image or delta at byte `offset` into the start of `buf` (`FRAME_SIZE` long;
    /// through the page cache when `cached`) and returns its stored length: the length last written or read there when known, else
    /// the first 4 KiB and then the rest its header names (a corrupt header is reported by the
    /// decoder). An image never runs past its slot's end.
    fn read_image_at(&self, frame: u64, offset: u64, buf: &mut [u8], cached: bool) -> Result<usize> {
        if buf.len() != FRAME_SIZE {
            return Err(Error::InvalidArgument(format!("frame buffer of {} bytes", buf.len())));
        }
        let corrupt = |reason: &str| Error::Corruption {
            location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(frame), offset },
            reason: reason.into(),
        };
        let read = |buf: &mut [u8], at: usize| {
            let done = if cached {
                self.file.read_cached_at(buf, offset + at as u64)
            } else {
                self.file.read_exact_at(buf, offset + at as u64)
            };
            done.map_err(|source| read_failed(frame, offset, source))
        };
        // The bytes from `offset` to its slot's end: no image is longer.
        let room = FRAME_SIZE - (offset % FRAME_SIZE as u64) as usize;
        if room < STORE_ALIGN_BYTES {
            return Err(corrupt("an image starts in the last 4 KiB of a slot"));
        }
        let known = self.lengths.lock().get(&offset).map(|&(stored, _)| stored);
        let len = match known {
            Some(len) => {
                let len = len.min(room);
                read(&mut buf[..len], 0)?;
                len
            }
            None => {
                read(&mut buf[..STORE_ALIGN_BYTES], 0)?;
                let len = self.learn_len(offset, &buf[..STORE_ALIGN_BYTES]);
                if len > STORE_ALIGN_BYTES {
                    read(&mut buf[STORE_ALIGN_BYTES..len], STORE_ALIGN_BYTES)?;
                }
                len
            }
        };
        Ok(len)
    }

    /// Records the stored and used bytes of the image or delta at `offset` from `head`, its
    /// first 4 KiB, and returns the stored bytes (what lies between `offset` and its slot's
    /// end at most).
    fn learn_len(&self, offset: u64, head: &[u8]) -> usize {
        let room = FRAME_SIZE - (offset % FRAME_SIZE as u64) as usize;
        let used = claimed_used(head);
        let len = used.next_multiple_of(STORE_ALIGN_BYTES).min(room);
        self.lengths.lock().insert(offset, (len, used));
        len
    }

    /// The stored bytes of the delta at `offset` of frame `frame`: known, or learnt from its
    /// first 4 KiB, read through the page cache.
    fn delta_len(&self, frame: u64, offset: u64) -> Result<usize> {
        if let Some(&(stored, _)) = self.lengths.lock().get(&offset) {
            return Ok(stored);
        }
        let mut head = [0u8; STORE_ALIGN_BYTES];
        self.file.read_cached_at(&mut head, offset).map_err(|source| read_failed(frame, offset, source))?;
        Ok(self.learn_len(offset, &head))
    }
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
        let at = slot_offset(loc.image);
        let len = self.read_image_at(id.0, at, buf, false)?;
        check_sum(id.0, at, loc.image_sum, buf)?;
        Ok(len)
    }

    fn read_pages(&self, id: FrameId, offset: usize, buf: &mut [u8]) -> Result<()> {
        // Held across the read, as for a whole image: the slot cannot be freed meanwhile.
        let slots = self.slots.read();
        let Some(loc) = slots.get(&id.0) else {
            return Err(Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: 0 },
                reason: "frame is not in the manifest".into(),
            });
        };
        let at = slot_offset(loc.image) + offset as u64;
        if offset.saturating_add(buf.len()) > FRAME_SIZE {
            return Err(Error::InvalidArgument(format!("pages past the end of frame {id}'s slot")));
        }
        self.file.read_cached_at(buf, at).map_err(|source| match source.kind() {
            io::ErrorKind::UnexpectedEof => Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: at },
                reason: "frames file ends inside the slot".into(),
            },
            _ => Error::Io { op: "read frame pages", source, may_have_applied: false },
        })?;
        // The header (page 0) carries the checksum of the page table, which vouches for
        // every other page: checking it here covers every page of the image.
        if offset == 0 {
            check_sum(id.0, at, loc.image_sum, buf)?;
        }
        Ok(())
    }

    fn lend_image(
        &self,
        id: FrameId,
        resident: Option<usize>,
        f: &mut dyn FnMut(Option<Lent<'_>>) -> Result<()>,
    ) -> Result<()> {
        let slots = self.slots.read();
        if let Some(loc) = slots.get(&id.0) {
            let at = slot_offset(loc.image);
            let mut ranges: SmallVec<[(u64, usize); 8]> = smallvec![(at, FRAME_SIZE)];
            let mut unknown = false;
            for &(delta_at, _) in &loc.deltas {
                let len = match resident {
                    // Learning a length reads the delta's header.
                    Some(_) => match self.lengths.lock().get(&delta_at) {
                        Some(&(stored, _)) => stored,
                        None => {
                            unknown = true;
                            break;
                        }
                    },
                    None => self.delta_len(id.0, delta_at)?,
                };
                ranges.push((delta_at, len));
            }
            if unknown {
                drop(slots);
                return f(None);
            }
            let mut outcome = Ok(());
            let mut held = true;
            let lent = self
                .file
                .lend_mapped(&ranges, &mut |lent| {
                    if let Some(len) = resident {
                        // Before anything reads them (the checksums below do).
                        held = crate::io::is_resident(&lent[0][..len.min(FRAME_SIZE)])
                            && lent[1..].iter().all(|delta| crate::io::is_resident(delta));
                        if !held {
                            return;
                        }
                    }
                    outcome = (|| {
                        check_sum(id.0, at, loc.image_sum, lent[0])?;
                        let mut deltas: SmallVec<[(u64, &[u8]); 8]> = SmallVec::new();
                        for (&(delta_at, sum), &bytes) in loc.deltas.iter().zip(&lent[1..]) {
                            check_sum(id.0, delta_at, sum, bytes)?;
                            deltas.push((delta_at, bytes));
                        }
                        f(Some(Lent { slot: lent[0], deltas: &deltas }))
                    })();
                })
                .map_err(|source| Error::Io { op: "map frame pages", source, may_have_applied: false })?;
            if lent && held {
                return outcome;
            }
        }
        // Unlocked first: `f` reads pages through `read_pages`, which takes the lock again.
        drop(slots);
        f(None)
    }

    fn delta_count(&self, id: FrameId) -> usize {
        self.slots.read().get(&id.0).map_or(0, |loc| loc.deltas.len())
    }

    fn read_delta(&self, id: FrameId, index: usize, buf: &mut [u8]) -> Result<(usize, (PathBuf, u64))> {
        let slots = self.slots.read();
        let Some(&(at, sum)) = slots.get(&id.0).and_then(|loc| loc.deltas.get(index)) else {
            return Err(Error::Corruption {
                location: Location { file: PathBuf::from(FRAMES_NAME), frame: Some(id.0), offset: 0 },
                reason: format!("frame has no delta {index} in the manifest"),
            });
        };
        // Deltas are small and read by every point read of their frame: through the page cache.
        let len = self.read_image_at(id.0, at, buf, true)?;
        check_sum(id.0, at, sum, buf)?;
        Ok((len, (PathBuf::from(FRAMES_NAME), at)))
    }

    fn locate(&self, id: FrameId) -> (PathBuf, u64) {
        let offset = self.slots.read().get(&id.0).map(|loc| slot_offset(loc.image)).unwrap_or(0);
        (PathBuf::from(FRAMES_NAME), offset)
    }
}

//! Reading the log back on open: segments in order, records in order, the torn tail cut off.
//!
//! Torn tail versus corruption: the flusher never has more than `window` bytes written but
//! not synced, so after a crash the damage from unsynced writes lies within `window` bytes
//! after the first bad record. A bad record with no valid record `window` or more bytes past
//! it is a torn tail: its bytes (and the unsynced fragments after it) are zeroed and synced,
//! so later appends never land behind garbage. A valid record further on means synced data
//! went bad: that is `Error::Corruption` naming the file and offset, never a silent drop. So
//! does a bad record below the position the log is known durable to (the checkpoint's
//! `frames_lsn`, or the sync mark the flusher leaves after each fdatasync), wherever it is.

use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Result};
use crate::format::wal::{
    decode_record, parse_segment_name, Record, RecordError, SegmentHeader, SEGMENT_HEADER_BYTES,
};
use crate::io::Vfs;

use super::Resume;

/// What replay found.
#[derive(Debug)]
pub(crate) struct Replayed {
    pub resume: Resume,
    /// Segments to delete: older than the checkpoint's, or empty ones after the last used.
    pub stale_segments: Vec<String>,
    pub records: u64,
    /// Where a torn tail was cut, if one was.
    pub truncated_at: Option<(String, u64)>,
}

fn corruption(file: &str, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corruption {
        location: Location { file: PathBuf::from(file), frame: None, offset },
        reason: reason.into(),
    }
}

fn io(op: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io { op, source, may_have_applied: false }
}

/// Where replay starts, and what the manifest and the sync mark say about the log.
pub(crate) struct ReplayFrom {
    /// The manifest's segment: replay starts with it, and its first record has lsn
    /// `checkpoint_lsn`.
    pub first_segment: u64,
    pub checkpoint_lsn: u64,
    /// The frames hold the records below it (the checkpoint's position, see `Manifest`):
    /// those are read and checked but not applied.
    pub frames_lsn: u64,
    /// The log is known durable below it: at least `frames_lsn` (the log was synced up to
    /// it before the manifest named it), more when the sync mark says so.
    pub synced_floor: u64,
}

/// Replays the log from `from.first_segment`, calling `apply` with every record at or after
/// `from.frames_lsn`, in log order. A bad record or the end of the log below
/// `from.synced_floor` means synced records were lost: corruption, never a torn tail.
pub(crate) fn replay(
    vfs: &dyn Vfs,
    from: ReplayFrom,
    window: u64,
    max_record: usize,
    mut apply: impl FnMut(Record) -> Result<()>,
) -> Result<Replayed> {
    let ReplayFrom { first_segment, checkpoint_lsn, frames_lsn, synced_floor } = from;
    let mut segments: Vec<(u64, String)> = Vec::new();
    let mut stale = Vec::new();
    for name in vfs.list().map_err(io("wal list"))? {
        if let Some(no) = parse_segment_name(&name) {
            if no < first_segment {
                stale.push(name);
            } else {
                segments.push((no, name));
            }
        }
    }
    segments.sort();
    let mut resume = Resume {
        segment: first_segment,
        base_lsn: checkpoint_lsn,
        header_written: false,
        next_lsn: checkpoint_lsn,
    };
    let mut ended = false;
    let mut records = 0u64;
    let mut truncated_at = None;
    let mut expect_no = first_segment;
    // The last segment with records, where the log continues, and its bytes.
    let mut continued = None;
    for (idx, (no, name)) in segments.iter().enumerate() {
        let file = vfs.open(Path::new(name), false).map_err(io("wal open"))?;
        let len = file.len().map_err(io("wal read"))?;
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0).map_err(io("wal read"))?;
        let header = SegmentHeader::decode(&bytes).map_err(|reason| corruption(name, 0, reason))?;
        let Some(header) = header else {
            // Preallocated, never written: the end of the log. Only the checkpoint's own
            // segment may be empty and still be where the log continues.
            if *no != first_segment {
                stale.push(name.clone());
            } else if synced_floor > checkpoint_lsn {
                return Err(corruption(
                    name,
                    0,
                    format!("segment has no header, but the log was synced up to lsn {synced_floor} in it"),
                ));
            } else if has_nonzero(&bytes) {
                clear_headerless(&*file, &bytes, name, checkpoint_lsn, max_record)?;
            }
            ended = true;
            continue;
        };
        if ended {
            return Err(corruption(name, 0, "log segment with records after the end of the log"));
        }
        if header.segment != *no || *no != expect_no || header.base_lsn != resume.next_lsn {
            return Err(corruption(
                name,
                0,
                format!(
                    "segment {} starts at lsn {}, expected segment {expect_no} at lsn {}",
                    header.segment, header.base_lsn, resume.next_lsn
                ),
            ));
        }
        expect_no = no + 1;
        let mut off = SEGMENT_HEADER_BYTES;
        let mut pos = header.base_lsn;
        loop {
            match decode_record(bytes.get(off..).unwrap_or(&[]), max_record) {
                Ok(rec) if rec.lsn == pos => {
                    off += rec.padded_len;
                    pos += rec.padded_len as u64;
                    records += 1;
                    if rec.lsn >= frames_lsn {
                        apply(rec)?;
                    }
                }
                other => {
                    let reason = match other {
                        Ok(_) => "record carries the wrong lsn",
                        Err(e) => e.describe(),
                    };
                    // The first position without a valid record: the end of this segment's
                    // records. Anything valid after it decides torn tail versus corruption.
                    let later_segment = segments[idx + 1..].iter().any(|(_, n)| has_header(vfs, n));
                    // Zeros to the end, and the log goes on in the next segment: a roll.
                    let rolled_here = later_segment
                        && matches!(other, Err(RecordError::Empty))
                        && !has_nonzero(&bytes[off.min(bytes.len())..]);
                    if pos < synced_floor && !rolled_here {
                        return Err(corruption(
                            name,
                            off as u64,
                            format!("{reason} at lsn {pos}, before lsn {synced_floor}, up to which the log was synced"),
                        ));
                    }
                    // Unsynced damage stays within `window` bytes: a valid record beyond it
                    // was synced after the bad one, so the bad one was synced too.
                    let beyond = off.saturating_add(usize::try_from(window).unwrap_or(usize::MAX));
                    if let Some(at) = valid_record_from(&bytes, beyond, max_record) {
                        return Err(corruption(
                            name,
                            off as u64,
                            format!("{reason}, but a valid record follows at offset {at}"),
                        ));
                    }
                    if !matches!(other, Err(RecordError::Empty))
                        || has_nonzero(&bytes[off.min(bytes.len())..])
                    {
                        if later_segment {
                            return Err(corruption(
                                name,
                                off as u64,
                                format!("{reason} in a segment that was rolled"),
                            ));
                        }
                        cut_torn_tail(&*file, &bytes, off).map_err(io("wal truncate"))?;
                        tracing::warn!(file = %name, offset = off, reason, "cut torn log tail");
                        truncated_at = Some((name.clone(), off as u64));
                        ended = true;
                    }
                    break;
                }
            }
        }
        resume = Resume { segment: *no, base_lsn: header.base_lsn, header_written: true, next_lsn: pos };
        continued = Some((file, bytes));
    }
    if resume.next_lsn < synced_floor {
        let name = crate::format::wal::segment_name(resume.segment);
        return Err(corruption(
            &name,
            0,
            format!(
                "the log ends at lsn {}, before lsn {synced_floor}, up to which it was synced",
                resume.next_lsn
            ),
        ));
    }
    if let Some((file, bytes)) = continued {
        let end =
            SEGMENT_HEADER_BYTES + usize::try_from(resume.next_lsn - resume.base_lsn).unwrap_or(usize::MAX);
        resync(&*file, &bytes[..end.min(bytes.len())]).map_err(io("wal resync"))?;
    }
    Ok(Replayed { resume, stale_segments: stale, records, truncated_at })
}

/// Writes the records of the segment the log continues in again, and syncs them. What replay
/// read may be in the page cache only: written by a process that died before syncing it, or
/// left there, marked clean, by a failed fdatasync (Linux does not write those pages again).
/// New records are acknowledged after these, so these must be durable first; otherwise a
/// power cut could leave a gap before acknowledged records, or a rolled segment whose end
/// never reached the disk. Earlier segments need nothing: a roll syncs the segment it leaves.
fn resync(file: &dyn crate::io::VfsFile, bytes: &[u8]) -> std::io::Result<()> {
    crate::io::failpoint("wal-resync")?;
    file.write_all_at(bytes, 0)?;
    file.sync_data()
}

/// The segment the log continues in has no header but holds bytes: writes that followed its
/// header write reached the disk while the header did not (the header goes out with the first
/// records, and a sync would have made it durable: nothing here was synced). Left in place,
/// they would sit behind the records appended from the segment's start and could be read as
/// records again, so they are zeroed first. A valid first record right after the empty header
/// shares its sector and so cannot be a torn write's leftover: the header went bad after it
/// was written, which is corruption.
fn clear_headerless(
    file: &dyn crate::io::VfsFile,
    bytes: &[u8],
    name: &str,
    base_lsn: u64,
    max_record: usize,
) -> Result<()> {
    let first = decode_record(bytes.get(SEGMENT_HEADER_BYTES..).unwrap_or(&[]), max_record);
    if first.is_ok_and(|rec| rec.lsn == base_lsn) {
        return Err(corruption(name, 0, "segment header is zeroed but its first record is intact"));
    }
    cut_torn_tail(file, bytes, 0).map_err(io("wal truncate"))?;
    tracing::warn!(file = %name, "cleared unsynced bytes from a log segment without a header");
    Ok(())
}

fn has_header(vfs: &dyn Vfs, name: &str) -> bool {
    let mut head = [0u8; SEGMENT_HEADER_BYTES];
    vfs.open(Path::new(name), false)
        .and_then(|f| f.read_exact_at(&mut head, 0))
        .map(|()| matches!(SegmentHeader::decode(&head), Ok(Some(_))))
        .unwrap_or(false)
}

fn has_nonzero(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b != 0)
}

/// The file offset of the first valid record at or after `from`, if any.
fn valid_record_from(bytes: &[u8], from: usize, max_record: usize) -> Option<u64> {
    let mut at = (from.saturating_add(7)) & !7;
    while at + 8 <= bytes.len() {
        if bytes[at..at + 4] == crate::format::wal::RECORD_MAGIC.to_le_bytes()
            && decode_record(&bytes[at..], max_record).is_ok()
        {
            return Some(at as u64);
        }
        at += 8;
    }
    None
}

/// Zeroes everything from `off` to the last non-zero byte and syncs: the torn tail is gone
/// from the file before any new record is appended at `off`.
fn cut_torn_tail(file: &dyn crate::io::VfsFile, bytes: &[u8], off: usize) -> std::io::Result<()> {
    crate::io::failpoint("wal-truncate")?;
    let Some(last) = bytes.iter().rposition(|&b| b != 0) else { return Ok(()) };
    if last < off {
        return Ok(());
    }
    let zeros = vec![0u8; last + 1 - off];
    file.write_all_at(&zeros, off as u64)?;
    file.sync_data()
}

//! Reading the log back on open: segments in order, records in order, the torn tail cut off.
//!
//! Torn tail versus corruption: the flusher never has more than `window` bytes written but
//! not synced, so after a crash the damage from unsynced writes lies within `window` bytes
//! after the first bad record. A bad record with no valid record `window` or more bytes past
//! it is a torn tail: its bytes (and the unsynced fragments after it) are zeroed and synced,
//! so later appends never land behind garbage. A valid record further on means synced data
//! went bad: that is `Error::Corruption` naming the file and offset, never a silent drop. So
//! does a bad record below the position the log is known durable to (the checkpoint's
//! `frames_lsn`, or the sync mark the flusher leaves after fdatasyncs), wherever it is. And
//! so does a record that claims the log was durable past the bad one, or a record lying away
//! from its own position (see `lost_write_evidence`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Result};
use crate::format::wal::{
    decode_record, parse_segment_name, CutMark, Record, RecordError, SegmentHeader, CUT_MARK_BYTES,
    CUT_MARK_NAME, SEGMENT_HEADER_BYTES,
};
use crate::io::{read_head, Vfs};

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
    /// The largest segment file recovery reads into memory: past it the file is not one any
    /// ring of this database wrote, and is refused as corrupt rather than allocated.
    pub segment_bytes_max: u64,
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
    let ReplayFrom { first_segment, checkpoint_lsn, frames_lsn, synced_floor, segment_bytes_max } = from;
    // A cut an earlier open began: its zeros may not be durable.
    let earlier_cut = read_cut_mark(vfs);
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
    // The segment the log continues in, its bytes, and the end of its records in them.
    let mut continued = None;
    for (idx, (no, name)) in segments.iter().enumerate() {
        let file = vfs.open(Path::new(name), false).map_err(io("wal open"))?;
        let len = file.len().map_err(io("wal read"))?;
        if len > segment_bytes_max {
            return Err(corruption(
                name,
                0,
                format!("the segment is {len} bytes, more than the {segment_bytes_max} any log ring of this database writes"),
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0).map_err(io("wal read"))?;
        let header = SegmentHeader::decode(&bytes).map_err(|reason| corruption(name, 0, reason))?;
        let Some(header) = header else {
            // Records the log made durable past the segment's start, or put elsewhere in it,
            // mean the header was written with them and lost: its write went astray.
            let base = resume.next_lsn;
            if let Some(why) = lost_write_evidence(&bytes, 0, base, base, max_record) {
                return Err(corruption(name, 0, format!("segment has no header, but {why}")));
            }
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
            } else {
                if has_nonzero(&bytes) {
                    clear_headerless(vfs, &*file, &bytes, (*no, name), checkpoint_lsn, max_record)?;
                }
                // The log continues here, from the segment's start.
                continued = Some((*no, file, bytes, 0));
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
                    if let Some(why) = lost_write_evidence(&bytes, off, pos, header.base_lsn, max_record) {
                        return Err(corruption(
                            name,
                            off as u64,
                            format!("{reason} at lsn {pos}, but {why}"),
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
                        cut_torn_tail(vfs, &*file, *no, &bytes, off)?;
                        tracing::warn!(file = %name, offset = off, reason, "cut torn log tail");
                        truncated_at = Some((name.clone(), off as u64));
                        ended = true;
                    }
                    break;
                }
            }
        }
        resume = Resume { segment: *no, base_lsn: header.base_lsn, header_written: true, next_lsn: pos };
        continued = Some((*no, file, bytes, off));
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
    if let Some((no, file, bytes, end)) = continued {
        // An earlier open's cut is always in the segment the log continues in: that open
        // failed, and the first open that succeeds after it gets here before any record is
        // appended. A mark naming another segment names one a checkpoint has since deleted.
        let zeros = earlier_cut
            .filter(|cut| cut.segment == no)
            .map(|cut| cut.from.max(end as u64)..cut.to.min(bytes.len() as u64))
            .filter(|range| !range.is_empty());
        resync(&*file, &bytes[..end.min(bytes.len())], zeros).map_err(io("wal resync"))?;
        // A segment of an older version is not continued: the records this binary writes
        // go to a new segment whose header names their version, so that a binary that knows
        // only the older one refuses the log by its header instead of reading the new records
        // as a torn tail and cutting them.
        // (A segment without a header is written from its start, header first.)
        if resume.header_written && SegmentHeader::version_of(&bytes) < crate::format::wal::SEGMENT_VERSION {
            let pos = resume.next_lsn;
            resume = Resume { segment: no + 1, base_lsn: pos, header_written: false, next_lsn: pos };
        }
    }
    // Any mark, this open's, an earlier one's, or a damaged one, is done with. The removal
    // is made durable by the directory sync that follows every replay (`recovery::open`); a
    // mark that outlives a crash only zeros bytes past the log's end once more.
    let mark = Path::new(CUT_MARK_NAME);
    if vfs.exists(mark).map_err(io("wal cut mark"))? {
        vfs.remove(mark).map_err(io("wal cut mark remove"))?;
    }
    Ok(Replayed { resume, stale_segments: stale, records, truncated_at })
}

/// Writes the records of the segment the log continues in again (`records`: its bytes up to
/// the end of the log) and the zeros of an earlier open's cut (`zeros`, file offsets), and
/// syncs. What replay read may be in the page cache only: written by a process that died
/// before syncing it, or left there, marked clean, by a failed fdatasync (Linux does not
/// write those pages again).
/// - New records are acknowledged after these, so these must be durable first; otherwise a
///   power cut could leave a gap before acknowledged records, or a rolled segment whose end
///   never reached the disk. Earlier segments need nothing: a roll syncs the segment it
///   leaves.
/// - The zeros of a cut whose fdatasync failed read back as zeros while the disk may still
///   hold the torn tail. New records land at its positions with its lsns: once one ended
///   where one of the tail's later records starts, a power cut would bring that record back,
///   a write never acknowledged.
fn resync(
    file: &dyn crate::io::VfsFile,
    records: &[u8],
    zeros: Option<std::ops::Range<u64>>,
) -> std::io::Result<()> {
    crate::io::failpoint("wal-resync")?;
    if !records.is_empty() {
        file.write_all_at(records, 0)?;
    }
    if let Some(range) = zeros {
        write_zeros(file, range)?;
    }
    file.sync_data()
}

/// Writes zeros over `range` of the file, a bounded buffer at a time.
fn write_zeros(file: &dyn crate::io::VfsFile, range: std::ops::Range<u64>) -> std::io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(range.end.saturating_sub(range.start)) as usize];
    let mut at = range.start;
    while at < range.end {
        let n = CHUNK.min(range.end - at);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// The segment the log continues in has no header but holds bytes: writes that followed its
/// header write reached the disk while the header did not (the header goes out with the first
/// records, and a sync would have made it durable: nothing here was synced). Left in place,
/// they would sit behind the records appended from the segment's start and could be read as
/// records again, so they are zeroed first. A valid first record right after the empty header
/// shares its sector and so cannot be a torn write's leftover: the header went bad after it
/// was written, which is corruption.
fn clear_headerless(
    vfs: &dyn Vfs,
    file: &dyn crate::io::VfsFile,
    bytes: &[u8],
    (segment, name): (u64, &str),
    base_lsn: u64,
    max_record: usize,
) -> Result<()> {
    let first = decode_record(bytes.get(SEGMENT_HEADER_BYTES..).unwrap_or(&[]), max_record);
    if first.is_ok_and(|rec| rec.lsn == base_lsn) {
        return Err(corruption(name, 0, "segment header is zeroed but its first record is intact"));
    }
    cut_torn_tail(vfs, file, segment, bytes, 0)?;
    tracing::warn!(file = %name, "cleared unsynced bytes from a log segment without a header");
    Ok(())
}

fn has_header(vfs: &dyn Vfs, name: &str) -> bool {
    read_head::<SEGMENT_HEADER_BYTES>(vfs, name)
        .is_some_and(|head| matches!(SegmentHeader::decode(&head), Ok(Some(_))))
}

fn has_nonzero(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b != 0)
}

/// The unit a misdirected write moves by: a sector.
const MISDIRECT_GRANULE: u64 = 512;

/// Why the bad record at file offset `off` (lsn `pos`) of a segment whose first record has
/// lsn `base` must have been synced and then lost, if the bytes from `off` on say so:
/// - a valid record at its own position was written when the log was already durable past
///   `pos` (every record carries the durable position at its making, true whenever the record
///   exists);
/// - or a valid record whose own position lies in this torn range sits elsewhere: a write the
///   device put astray, whose own range then kept what it held.
///
/// Unsynced records of a torn tail do neither: they sit at their positions and claim
/// nothing past the first record that was not synced.
///
/// Values reach the log verbatim, so a client can store bytes that decode as a record. Such
/// a forgery is not taken as evidence: a record at its own position is skipped whole (what
/// it holds is data), and so is the bad record when its header is readable; a durable claim
/// counts only from a record at its own position (a forgery would have to know where in the
/// log it lands); a record away from its position counts only when its lsn falls in the torn
/// range and it sits whole sectors away from it. What is left is a forgery in the part of a
/// torn record past its lost header that guesses both: one in 64 alignments, within the
/// torn range's lsns.
fn lost_write_evidence(bytes: &[u8], off: usize, pos: u64, base: u64, max_record: usize) -> Option<String> {
    let torn = off as u64..bytes.len() as u64;
    // The bad record itself, when its header reached the disk: what follows the header inside
    // it is whatever part of its value did, a client's bytes.
    let own_span = crate::format::wal::peek_len(bytes.get(off..).unwrap_or_default(), max_record)
        .map_or(0, crate::format::wal::padded_len);
    let mut at = (off.saturating_add(own_span).saturating_add(7)) & !7;
    while at + 8 <= bytes.len() {
        let rec = match bytes[at..at + 4] == crate::format::wal::RECORD_MAGIC.to_le_bytes() {
            true => decode_record(&bytes[at..], max_record).ok(),
            false => None,
        };
        let Some(rec) = rec else {
            at += 8;
            continue;
        };
        let own = rec.lsn.checked_sub(base).and_then(|o| o.checked_add(SEGMENT_HEADER_BYTES as u64));
        if own == Some(at as u64) {
            if rec.durable > pos {
                return Some(format!(
                    "the record at offset {at} (lsn {}) was written once the log was durable up to lsn {}",
                    rec.lsn, rec.durable
                ));
            }
            at += rec.padded_len.max(8);
            continue;
        }
        // A device puts a write astray by whole sectors; a client's bytes land at any 8-byte
        // boundary.
        if own.is_some_and(|own| torn.contains(&own) && own.abs_diff(at as u64) % MISDIRECT_GRANULE == 0) {
            return Some(format!(
                "the record of lsn {} sits at offset {at}, not at its own position: a misdirected write",
                rec.lsn
            ));
        }
        at += 8;
    }
    None
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

/// Zeroes everything from `off` to the last non-zero byte of `segment` and syncs: the torn
/// tail is gone from the file before any new record is appended at `off`. The range is
/// recorded in the cut mark first (synced, with the directory), so that if this fdatasync
/// fails, the next open writes the zeros again (see `CUT_MARK_NAME`).
fn cut_torn_tail(
    vfs: &dyn Vfs,
    file: &dyn crate::io::VfsFile,
    segment: u64,
    bytes: &[u8],
    off: usize,
) -> Result<()> {
    crate::io::failpoint("wal-truncate").map_err(io("wal truncate"))?;
    let Some(last) = bytes.iter().rposition(|&b| b != 0) else { return Ok(()) };
    if last < off {
        return Ok(());
    }
    let range = off as u64..last as u64 + 1;
    write_cut_mark(vfs, CutMark { segment, from: range.start, to: range.end }).map_err(io("wal cut mark"))?;
    write_zeros(file, range).map_err(io("wal truncate"))?;
    file.sync_data().map_err(io("wal truncate"))
}

fn write_cut_mark(vfs: &dyn Vfs, mark: CutMark) -> std::io::Result<()> {
    crate::io::failpoint("wal-cut-mark")?;
    let file = vfs.open(Path::new(CUT_MARK_NAME), true)?;
    file.write_all_at(&mark.encode(), 0)?;
    file.sync_data()?;
    vfs.sync_dir()
}

/// The cut an earlier open recorded and may not have finished, if its mark is intact.
fn read_cut_mark(vfs: &dyn Vfs) -> Option<CutMark> {
    read_head::<CUT_MARK_BYTES>(vfs, CUT_MARK_NAME).and_then(|bytes| CutMark::decode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Condition, Op};
    use crate::format::wal::{encode_record, segment_name};
    use crate::io::{Fault, FaultError, OpKind, SimFs};
    use std::sync::Arc;

    const WINDOW: u64 = 4096;
    const MAX_RECORD: usize = 4096;
    const BASE: u64 = crate::wal::FIRST_LSN;

    fn record(i: u32, lsn: u64) -> Vec<u8> {
        record_claiming(i, lsn, 0)
    }

    /// A record made when the log was durable below `durable`.
    fn record_claiming(i: u32, lsn: u64, durable: u64) -> Vec<u8> {
        let key = format!("key-{i:04}");
        let mut out = Vec::new();
        encode_record(
            &[Op::Put { key: key.as_bytes(), value: b"value", condition: Condition::None }],
            lsn,
            durable,
            &mut out,
        );
        out
    }

    /// A segment of four records, each made once the log was durable up to `claims[i]`
    /// (an index of a record: durable below its start), written and synced; returns it
    /// with the records' file offsets.
    fn four_records(claims: [usize; 4]) -> (Arc<SimFs>, Vec<u8>, Vec<usize>) {
        let sim = SimFs::new(1);
        let mut bytes = SegmentHeader { segment: 1, base_lsn: BASE }.encode().to_vec();
        let mut starts = Vec::new();
        for i in 0..4u32 {
            starts.push(bytes.len());
            let lsn = |at: usize| BASE + (at - SEGMENT_HEADER_BYTES) as u64;
            let claim = starts.get(claims[i as usize]).map_or(BASE, |&at| lsn(at));
            bytes.extend_from_slice(&record_claiming(i, lsn(bytes.len()), claim));
        }
        (sim, bytes, starts)
    }

    fn write_segment(sim: &SimFs, bytes: &[u8]) {
        let file = sim.open(Path::new(&segment_name(1)), true).expect("create segment");
        file.set_len(1 << 16).expect("size segment");
        file.write_all_at(bytes, 0).expect("write segment");
        file.sync_data().expect("sync segment");
        sim.sync_dir().expect("sync directory");
    }

    /// A record lost after it was synced (its bytes read as zeros) reads as corruption when a
    /// later record was made once the log was durable past it; without that claim, the same
    /// bytes are a torn tail from unsynced writes, cut after the records before it.
    #[test]
    fn a_later_record_tells_a_lost_synced_record_from_a_torn_tail() {
        for (claim, lost) in [(3, true), (2, false)] {
            let (sim, mut bytes, starts) = four_records([0, 0, 0, claim]);
            bytes[starts[2]..starts[3]].fill(0);
            write_segment(&sim, &bytes);
            match replayed(&*sim, BASE) {
                Err(Error::Corruption { reason, .. }) => {
                    assert!(lost, "claim {claim}: a torn tail read as corruption: {reason}");
                    assert!(reason.contains("durable up to"), "{reason}");
                }
                Ok((keys, _)) => {
                    assert!(!lost, "claim {claim}: a lost synced record was cut as a torn tail");
                    assert_eq!(keys, ["key-0000", "key-0001"]);
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    }

    /// A record that sits away from its own position (a misdirected write; its own range
    /// kept zeros) is corruption, even within the window that torn tails may span, and even
    /// when the write that went astray carried the segment's header.
    #[test]
    fn a_record_away_from_its_position_is_corruption() {
        for astray in [3, 0] {
            let (sim, mut bytes, starts) = four_records([0; 4]);
            let from = if astray == 0 { 0 } else { starts[astray] };
            let end = if astray == 0 { starts[1] } else { bytes.len() };
            let moved = bytes[from..end].to_vec();
            bytes[from..end].fill(0);
            bytes.resize(from + 4096 + moved.len(), 0);
            bytes[from + 4096..].copy_from_slice(&moved);
            write_segment(&sim, &bytes);
            match replayed(&*sim, BASE) {
                Err(Error::Corruption { reason, .. }) => assert!(reason.contains("misdirected"), "{reason}"),
                other => panic!("record {astray} written 4 KiB away: {:?}", other.map(|(k, _)| k)),
            }
        }
    }

    /// A segment written by a binary of the previous log version is not continued: the log
    /// goes on in a new segment (with this version's header) at the end of its records, and
    /// the next replay reads both.
    #[test]
    fn a_segment_of_the_previous_version_is_not_continued() {
        let (sim, mut bytes, starts) = four_records([0; 4]);
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..28]);
        bytes[28..32].copy_from_slice(&crc.to_le_bytes());
        write_segment(&sim, &bytes);
        let end = BASE + (bytes.len() - SEGMENT_HEADER_BYTES) as u64;
        let (keys, resume) = replayed(&*sim, BASE).expect("a version 1 segment replays");
        assert_eq!(keys.len(), starts.len());
        assert_eq!(
            (resume.segment, resume.base_lsn, resume.header_written, resume.next_lsn),
            (2, end, false, end),
            "the log rolls to a new segment"
        );

        // The new segment's first record, as the flusher writes it; both segments replay.
        let mut next = SegmentHeader { segment: 2, base_lsn: end }.encode().to_vec();
        next.extend_from_slice(&record(4, end));
        let file = sim.open(Path::new(&segment_name(2)), true).expect("create segment 2");
        file.set_len(1 << 16).expect("size segment");
        file.write_all_at(&next, 0).expect("write segment 2");
        file.sync_data().expect("sync");
        sim.sync_dir().expect("sync directory");
        let (keys, resume) = replayed(&*sim, BASE).expect("both segments replay");
        assert_eq!(keys.last().map(String::as_str), Some("key-0004"));
        assert_eq!((keys.len(), resume.segment, resume.header_written), (5, 2, true));
    }

    /// A record of `i` at `lsn` whose value holds `forged` at an 8-aligned file offset when
    /// the record starts at file offset `at`.
    fn record_holding(i: u32, lsn: u64, at: usize, forged: &[u8]) -> Vec<u8> {
        let key = format!("key-{i:04}");
        for pad in 0..8 {
            let mut value = vec![0xAA; pad];
            value.extend_from_slice(forged);
            let mut out = Vec::new();
            let op = Op::Put { key: key.as_bytes(), value: &value, condition: Condition::None };
            encode_record(&[op], lsn, BASE, &mut out);
            let inside =
                out.windows(forged.len()).position(|w| w == forged).expect("the value is in the record");
            if (at + inside).is_multiple_of(8) {
                return out;
            }
        }
        unreachable!("one of eight paddings aligns the value")
    }

    /// Bytes a client stored that decode as a record claiming everything (a durable position
    /// past the torn tail; a position inside it, away from where the bytes sit, or one whose
    /// arithmetic overflows) are data, not evidence: in a record that arrived whole, or in
    /// the torn record itself, the tail is cut as any torn tail is.
    #[test]
    fn records_forged_inside_values_are_not_evidence() {
        let forgeries = [
            record_claiming(90, u64::MAX - 8, u64::MAX),
            record_claiming(91, BASE + 100_000, u64::MAX),
            record_claiming(92, 1, u64::MAX),
        ];
        for forged in &forgeries {
            for torn_holds_it in [false, true] {
                let sim = SimFs::new(1);
                let mut bytes = SegmentHeader { segment: 1, base_lsn: BASE }.encode().to_vec();
                let lsn = |at: usize| BASE + (at - SEGMENT_HEADER_BYTES) as u64;
                for i in 0..4u32 {
                    let at = bytes.len();
                    let rec = match i {
                        2 | 3 => record_holding(i, lsn(at), at, forged),
                        _ => record(i, lsn(at)),
                    };
                    bytes.extend_from_slice(&rec);
                }
                let starts = starts_of(&bytes);
                assert_eq!(starts.len(), 4);
                // Record 2 torn: its first bytes never reached the device, and with them the
                // rest of it too unless `torn_holds_it`. Record 3 arrived whole.
                let torn_end = if torn_holds_it { starts[2] + 8 } else { starts[3] };
                bytes[starts[2]..torn_end].fill(0);
                write_segment(&sim, &bytes);
                match replayed(&*sim, BASE) {
                    Ok((keys, _)) => assert_eq!(keys, ["key-0000", "key-0001"]),
                    Err(e) => {
                        panic!("forgery {:?}, torn record holds it {torn_holds_it}: {e}", &forged[..16])
                    }
                }
            }
        }
    }

    /// A forgery whose lsn falls in the torn range is no misdirected write either: not when
    /// it sits a few bytes away from its own position (a device moves writes by sectors), and
    /// not, however aligned, inside the torn record whose header reached the disk.
    #[test]
    fn forgeries_in_a_torn_record_do_not_pass_for_misdirected_writes() {
        let lsn = |at: usize| BASE + (at - SEGMENT_HEADER_BYTES) as u64;
        // (bytes away from the forgery's own position, whether the torn record keeps its header)
        for (away, header_kept) in [(8i64, false), (-16, false), (512, true), (0, true)] {
            // Where the forgery lands inside record 2 does not depend on its lsn.
            let build = |forged_lsn: u64| {
                let forged = record_claiming(90, forged_lsn, 0);
                let mut bytes = SegmentHeader { segment: 1, base_lsn: BASE }.encode().to_vec();
                for i in 0..4u32 {
                    let at = bytes.len();
                    let rec =
                        if i == 2 { record_holding(i, lsn(at), at, &forged) } else { record(i, lsn(at)) };
                    bytes.extend_from_slice(&rec);
                }
                let found =
                    bytes.windows(forged.len()).position(|w| w == forged.as_slice()).expect("forgery");
                (bytes, found)
            };
            let (_, at) = build(BASE);
            let own = (at as i64 + away) as usize;
            let (mut bytes, found) = build(lsn(own));
            assert_eq!(found, at);
            let starts = starts_of(&bytes);
            // Record 2 torn: a sector of it after its header (or its header too) never arrived;
            // the forgery, later in the record, did.
            let lost = if header_kept { starts[2] + 8..starts[2] + 16 } else { starts[2]..starts[2] + 8 };
            // Its own position is in the torn range (from record 2 to the end of the file).
            assert!(lost.end <= at && own >= starts[2], "{away}: the forgery's position");
            bytes[lost].fill(0);
            let sim = SimFs::new(1);
            write_segment(&sim, &bytes);
            match replayed(&*sim, BASE) {
                Ok((keys, _)) => assert_eq!(keys, ["key-0000", "key-0001"], "{away}"),
                Err(e) => panic!("a forgery {away} bytes from its position (header kept {header_kept}): {e}"),
            }
        }
    }

    /// File offsets of the records of a segment image written by these tests.
    fn starts_of(bytes: &[u8]) -> Vec<usize> {
        let mut at = SEGMENT_HEADER_BYTES;
        let mut out = Vec::new();
        while let Ok(rec) = decode_record(&bytes[at..], MAX_RECORD) {
            out.push(at);
            at += rec.padded_len;
        }
        out
    }

    fn from(synced_floor: u64) -> ReplayFrom {
        ReplayFrom {
            first_segment: 1,
            checkpoint_lsn: BASE,
            frames_lsn: BASE,
            synced_floor,
            segment_bytes_max: u64::MAX,
        }
    }

    /// The keys replay applies, in order.
    fn replayed(vfs: &dyn Vfs, synced_floor: u64) -> Result<(Vec<String>, Resume)> {
        let mut keys = Vec::new();
        let done = replay(vfs, from(synced_floor), WINDOW, MAX_RECORD, |rec| {
            for op in &rec.ops {
                keys.push(String::from_utf8_lossy(op.as_op().key()).into_owned());
            }
            Ok(())
        })?;
        Ok((keys, done.resume))
    }

    /// A torn tail whose cut is zeroed but whose fdatasync fails leaves the zeros in the page
    /// cache only (marked clean, never written again), while the disk may still hold the torn
    /// tail's later records. A reopen in the same boot reads zeros, and new records then land
    /// at the positions of the old ones, with the same lsns. The reopen must make the zeros
    /// durable before appending: otherwise, after a power cut, the old records that follow the
    /// new ones read as valid, and replay applies writes that were never acknowledged.
    ///
    /// `torn` is the record that went bad (its header zeroed as well when it is the first:
    /// then the segment's header never reached the disk and the whole segment is cleared).
    fn cut_whose_sync_failed(torn: usize) {
        for seed in 0..16 {
            let sim = SimFs::new(seed);
            let name = segment_name(1);
            let file = sim.open(Path::new(&name), true).expect("create segment");
            file.set_len(1 << 16).expect("size segment");
            sim.sync_dir().expect("sync directory");
            // Eight records, all on disk; one of them was torn (its bytes went bad).
            let mut bytes = SegmentHeader { segment: 1, base_lsn: BASE }.encode().to_vec();
            let mut starts = Vec::new();
            for i in 0..8u32 {
                let lsn = BASE + (bytes.len() - SEGMENT_HEADER_BYTES) as u64;
                starts.push(bytes.len());
                bytes.extend_from_slice(&record(i, lsn));
            }
            bytes[starts[torn] + 30] ^= 0xFF;
            if torn == 0 {
                bytes[..SEGMENT_HEADER_BYTES].fill(0);
            }
            file.write_all_at(&bytes, 0).expect("write segment");
            file.sync_data().expect("sync segment");
            let floor = BASE + (starts[torn] - SEGMENT_HEADER_BYTES) as u64;
            let kept: Vec<String> = (0..torn).map(|i| format!("key-{i:04}")).collect();

            // The cut's fdatasync fails: open fails, the zeros stay in the page cache only.
            sim.inject(Fault {
                op: Some(OpKind::Sync),
                path_contains: Some("wal-".into()),
                nth: 1,
                error: FaultError::Eio,
                forever: false,
            });
            assert!(replayed(&*sim, floor).is_err(), "seed {seed}: the cut's failed sync must fail the open");
            sim.kill();

            // Reopened in the same boot: the page cache reads zeros after the kept records.
            let (keys, resume) = replayed(&*sim, floor).expect("reopen");
            assert_eq!(keys, kept, "seed {seed}");
            assert_eq!(resume.next_lsn, floor, "seed {seed}");
            // One new record, acknowledged (synced), exactly where the torn one was.
            let file = sim.open(Path::new(&name), false).expect("open segment");
            if torn == 0 {
                file.write_all_at(&SegmentHeader { segment: 1, base_lsn: BASE }.encode(), 0).expect("header");
            }
            file.write_all_at(&record(100, floor), starts[torn] as u64).expect("append");
            file.sync_data().expect("sync append");

            sim.crash();
            let (keys, _) = replayed(&*sim, floor).expect("open after the power cut");
            let mut expected = kept.clone();
            expected.push("key-0100".into());
            assert_eq!(keys, expected, "seed {seed}: records never acknowledged came back");
        }
    }

    #[test]
    fn a_cut_whose_sync_failed_is_made_durable_before_new_records() {
        cut_whose_sync_failed(2);
    }

    #[test]
    fn a_cleared_segment_whose_sync_failed_is_made_durable_before_new_records() {
        cut_whose_sync_failed(0);
    }
}

//! Opening a directory: lock, manifest, frames (lazily), log replay, then the log resumes.
//!
//! Invariants on return:
//! - the directory lock is held (a second handle or process gets `Error::Locked`);
//! - the tree holds the checkpoint named by the durable manifest plus every valid log record
//!   after it, in log order: the state after the writes with lsn below `next_lsn`;
//! - a torn log tail has been zeroed and synced, so new records never land behind garbage;
//! - segments the checkpoint covers, and empty ones past the end, are deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api::Options;
use crate::checkpoint::store::{table_of, FrameStore, FRAMES_NAME};
use crate::checkpoint::{write_manifest, Durable, ManifestError};
use crate::error::{Error, Location, Result};
use crate::format::manifest::{Manifest, StoredUsage, MANIFEST_NAME, MANIFEST_TMP_NAME};
use crate::format::wal::{
    decode_sync_mark, parse_segment_name, CUT_MARK_NAME, SEGMENT_HEADER_BYTES, SYNC_MARK_BYTES,
    SYNC_MARK_NAME,
};
use crate::format::FrameId;
use crate::io::{read_head, Vfs};
use crate::tree::{Tree, FRAME_BUDGET_BYTES};
use crate::wal::{replay, Wal, WalConfig, FIRST_LSN};

/// Name of the lock file.
pub(crate) const LOCK_NAME: &str = "LOCK";
/// Smallest log segment file. Segments are the smallest size the log allows (a bit over
/// 4 × the ring, see `WalConfig::new`), at least this: big enough that rolls are rare, small
/// enough that zero-filling a spare (and scanning a segment on open) stays cheap.
pub(crate) const SEGMENT_BYTES_MIN: u64 = 1 << 20;

fn io(op: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io { op, source, may_have_applied: false }
}

pub(crate) fn wal_config(options: &Options) -> WalConfig {
    WalConfig::new(
        options.wal_ring_bytes,
        SEGMENT_BYTES_MIN,
        options.wal_flush_interval,
        options.checkpoint_wal_bytes,
    )
}

/// What `open` recovered.
pub(crate) struct Opened {
    pub tree: Arc<Tree>,
    pub durable: Arc<Durable>,
}

fn read_manifest(vfs: &dyn Vfs) -> Result<Option<Manifest>> {
    if !vfs.exists(Path::new(MANIFEST_NAME)).map_err(io("manifest read"))? {
        return Ok(None);
    }
    let file = vfs.open(Path::new(MANIFEST_NAME), false).map_err(io("manifest read"))?;
    let len = file.len().map_err(io("manifest read"))?;
    if len > 1 << 30 {
        return Err(corrupt_manifest(0, "manifest is implausibly large"));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0).map_err(io("manifest read"))?;
    Manifest::decode(&bytes).map(Some).map_err(|(offset, reason)| corrupt_manifest(offset, reason))
}

fn corrupt_manifest(offset: u64, reason: &str) -> Error {
    Error::Corruption {
        location: Location { file: PathBuf::from(MANIFEST_NAME), frame: None, offset },
        reason: reason.into(),
    }
}

/// The log position below which the last process found the log durable, from the sync mark
/// file; 0 when there is none or it is damaged (it is a hint, see `SYNC_MARK_NAME`).
fn read_sync_mark(vfs: &dyn Vfs) -> u64 {
    read_head::<SYNC_MARK_BYTES>(vfs, SYNC_MARK_NAME).and_then(|bytes| decode_sync_mark(&bytes)).unwrap_or(0)
}

/// Creates the first manifest of a new database. A `MANIFEST.tmp` or cut mark left by an
/// attempt that crashed before its first manifest was durable is removed first (the log's
/// segments, the frames file and the sync mark are only made once the manifest is durable).
/// Any of those data files without a manifest means the manifest of a database was lost
/// (deleted, or not restored from a backup): the open is refused, and nothing is removed.
fn create(vfs: &dyn Vfs, cfg: &WalConfig, weigher: &str) -> Result<Manifest> {
    let names = vfs.list().map_err(io("list directory"))?;
    let data: Vec<&String> = names
        .iter()
        .filter(|name| parse_segment_name(name).is_some() || *name == FRAMES_NAME || *name == SYNC_MARK_NAME)
        .collect();
    if !data.is_empty() {
        let listed: Vec<&str> = data.iter().take(4).map(|n| n.as_str()).collect();
        return Err(Error::Corruption {
            location: Location { file: PathBuf::from(MANIFEST_NAME), frame: None, offset: 0 },
            reason: format!(
                "the manifest is missing but the directory holds a database's files ({}{}): refusing \
                 to create a new database over them",
                listed.join(", "),
                if data.len() > listed.len() { ", ..." } else { "" }
            ),
        });
    }
    for name in names {
        if name == MANIFEST_TMP_NAME || name == CUT_MARK_NAME {
            vfs.remove(Path::new(&name)).map_err(io("remove leftover file"))?;
        }
    }
    let manifest = Manifest {
        checkpoint_lsn: FIRST_LSN,
        wal_segment: 1,
        root_frame: FrameId::ROOT.0,
        key_count: 0,
        wal_window_bytes: cfg.window_bytes(),
        frames_lsn: FIRST_LSN,
        frames: Vec::new(),
        deltas: Vec::new(),
        usage: Some(StoredUsage { weigher: weigher.into(), frames: Vec::new() }),
        sizes: Vec::new(),
    };
    write_manifest(vfs, &manifest).map_err(|e| match e {
        ManifestError::BeforeRename(op, source) | ManifestError::AfterRename(op, source) => {
            Error::Io { op, source, may_have_applied: false }
        }
    })?;
    Ok(manifest)
}

/// The name the manifest stores for `options`' weigher (empty for none).
fn weigher_name(options: &Options) -> &'static str {
    options.weigher.map_or("", |w| w.name)
}

/// Opens (or creates) the database stored in `vfs`.
pub(crate) fn open(vfs: Arc<dyn Vfs>, options: &Options, display_dir: &Path) -> Result<Opened> {
    let lock = vfs.try_lock(Path::new(LOCK_NAME)).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked { path: display_dir.to_path_buf() },
        _ => Error::Io { op: "lock directory", source: e, may_have_applied: false },
    })?;
    let cfg = wal_config(options);
    let manifest = match read_manifest(&*vfs)? {
        Some(m) => m,
        None => create(&*vfs, &cfg, weigher_name(options))?,
    };
    let store = Arc::new(FrameStore::open(&*vfs, table_of(&manifest))?);
    let weigh = options.weigher.map_or(crate::tree::no_weight as fn(&[u8]) -> u64, |w| w.weigh);
    // The frames' subtree totals, if the manifest holds them as this weigher counts them.
    let mut stored_usage = false;
    let tree = if manifest.frames.is_empty() {
        Tree::new(FRAME_BUDGET_BYTES, options.memory_budget_bytes, Some(store.clone())).with_weigh(weigh)
    } else {
        let ids: Vec<FrameId> = manifest.frames.iter().map(|&(id, _, _)| FrameId(id)).collect();
        let tree = Tree::from_frames(
            FrameId(manifest.root_frame),
            &ids,
            store.clone(),
            FRAME_BUDGET_BYTES,
            options.memory_budget_bytes,
            manifest.key_count,
            weigh,
        )?;
        match &manifest.usage {
            Some(usage) if usage.weigher == weigher_name(options) => {
                let table: Vec<_> = usage.frames.iter().map(|&(id, k, w)| (FrameId(id), k, w)).collect();
                tree.set_usage_table(&table);
                stored_usage = true;
            }
            _ => {}
        }
        tree.set_size_table(&manifest.sizes);
        tree
    };
    let recount = !manifest.frames.is_empty() && !stored_usage;

    // Records written under a larger ring may be larger, and their torn tails longer.
    let window = manifest.wal_window_bytes.max(cfg.window_bytes());
    let from = replay::ReplayFrom {
        first_segment: manifest.wal_segment,
        checkpoint_lsn: manifest.checkpoint_lsn,
        frames_lsn: manifest.frames_lsn,
        synced_floor: manifest.frames_lsn.max(read_sync_mark(&*vfs)),
        // A segment holds four rings and its header (`WalConfig::new`); the window is two
        // rings of the largest ring used. Twice that, for room.
        segment_bytes_max: 2 * SEGMENT_BYTES_MIN
            .max((2 * window + SEGMENT_HEADER_BYTES as u64 + 4095) & !4095),
    };
    let replayed =
        replay::replay(&*vfs, from, window, (window as usize).max(cfg.max_record_bytes()), |record| {
            tree.replay(&crate::api::ops_of(&record.ops), record.lsn)
        })?;
    for name in &replayed.stale_segments {
        let _ = vfs.remove(Path::new(name));
    }
    if recount {
        // Written before usage totals, or counted by another weigher: count them once, from
        // the keys (the replayed writes included); the next checkpoint stores them.
        let started = std::time::Instant::now();
        tree.recount_usage()?;
        tracing::info!(
            frames = manifest.frames.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "usage totals counted from the keys"
        );
    }
    // Always, not only after removals: the manifest just read may have been renamed into
    // place by a process that died before its directory fsync. Until the rename is durable,
    // a power cut brings the older manifest back, whose frame slots this process would take
    // for free ones and overwrite.
    vfs.sync_dir().map_err(io("directory fsync"))?;
    tracing::info!(
        records = replayed.records,
        next_lsn = replayed.resume.next_lsn,
        truncated = ?replayed.truncated_at,
        "recovered"
    );
    // The manifest bounds the records the next recovery accepts (`wal_window_bytes`): a ring
    // larger than the one it names writes records the next open, under a smaller ring, would
    // take for a torn tail and cut. Recorded before the log takes a record.
    let manifest = if cfg.window_bytes() > manifest.wal_window_bytes {
        let grown = Manifest { wal_window_bytes: cfg.window_bytes(), ..manifest };
        write_manifest(&*vfs, &grown).map_err(|e| match e {
            ManifestError::BeforeRename(op, source) | ManifestError::AfterRename(op, source) => {
                Error::Io { op, source, may_have_applied: false }
            }
        })?;
        grown
    } else {
        manifest
    };
    let wal = Wal::open(vfs.clone(), cfg, replayed.resume)?;
    let tree = Arc::new(tree);
    let durable = Arc::new(Durable::new(vfs, wal, store, manifest, options.clone(), lock));
    Ok(Opened { tree, durable })
}

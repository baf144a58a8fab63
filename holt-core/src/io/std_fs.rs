//! Real files through std (pread/pwrite) and libc (fdatasync, fallocate).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Vfs, VfsFile};

/// The database directory on a real file system.
pub struct StdFs {
    dir: PathBuf,
    /// Use io_uring for batched I/O where the kernel allows it.
    io_uring: bool,
    /// Open the frames file with O_DIRECT where the file system allows it.
    direct_io: bool,
    /// Serve the frames file's page reads from a read-only mapping (`io/mapped.rs`).
    mapped_reads: bool,
}

impl StdFs {
    /// Uses `dir` (which must exist) as the database directory.
    pub fn new(dir: impl Into<PathBuf>) -> StdFs {
        StdFs { dir: dir.into(), io_uring: false, direct_io: false, mapped_reads: false }
    }

    /// Like `new`, with batched frame I/O through io_uring when `enabled` (feature
    /// `io-uring`, Linux) and the kernel allows it; pread/pwrite otherwise.
    pub fn with_io_uring(dir: impl Into<PathBuf>, enabled: bool) -> StdFs {
        StdFs { dir: dir.into(), io_uring: enabled, direct_io: false, mapped_reads: false }
    }

    /// Frame reads and writes through O_DIRECT (Linux) when `enabled` and the file system
    /// accepts it; buffered otherwise. See `io/direct.rs`.
    pub fn with_direct_io(mut self, enabled: bool) -> StdFs {
        self.direct_io = enabled;
        self
    }

    /// The frames file's page reads (`VfsFile::read_cached_at`) through a read-only mapping
    /// when `enabled` and the file can be mapped; `pread` otherwise. See `io/mapped.rs` for
    /// what it costs: a media error while a page is read becomes SIGBUS.
    pub fn with_mapped_reads(mut self, enabled: bool) -> StdFs {
        self.mapped_reads = enabled;
        self
    }

    /// The directory this file system is rooted at.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

pub(super) struct StdFile {
    file: File,
}

impl From<File> for StdFile {
    fn from(file: File) -> StdFile {
        StdFile { file }
    }
}

impl VfsFile for StdFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        allocate(&self.file, len)
    }

    fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        punch_hole(&self.file, offset, len)
    }
    fn allocated_len(&self, offset: u64, len: u64) -> io::Result<u64> {
        allocated_len(&self.file, offset, len)
    }
}

/// Reserves blocks for the first `len` bytes without changing the file's size or contents.
/// File systems without fallocate (tmpfs on old kernels, some FUSE) reserve nothing.
#[cfg(target_os = "linux")]
pub(super) fn allocate(file: &File, len: u64) -> io::Result<()> {
    fallocate(file, libc::FALLOC_FL_KEEP_SIZE, 0, len)
}

/// Deallocates `[offset, offset + len)` (FALLOC_FL_PUNCH_HOLE), keeping the file's size. File
/// systems that cannot punch holes keep the bytes: only space is lost.
#[cfg(target_os = "linux")]
pub(super) fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    fallocate(file, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len)
}

/// `fallocate(2)` with a KEEP_SIZE `mode`; EOPNOTSUPP counts as done (the call only ever
/// manages space, so a file system without it loses nothing but that).
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "fallocate has no safe wrapper in std")]
fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    debug_assert!(mode & libc::FALLOC_FL_KEEP_SIZE != 0, "only size-preserving modes");
    let invalid = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let (offset, len) =
        (libc::off_t::try_from(offset).map_err(invalid)?, libc::off_t::try_from(len).map_err(invalid)?);
    // SAFETY: the descriptor is owned by `file`, which outlives the call; the call takes no
    // pointers, and with FALLOC_FL_KEEP_SIZE it either reserves blocks (contents unchanged) or
    // punches a hole (the range reads as zeros, which is what the caller asked for).
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(()),
        _ => Err(err),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn punch_hole(_file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

/// How many bytes from `offset` may hold blocks in `[offset, offset + len)`: up to the end
/// of the range's last data, found with SEEK_DATA and SEEK_HOLE (0 for a hole).
#[cfg(target_os = "linux")]
pub(super) fn allocated_len(file: &File, offset: u64, len: u64) -> io::Result<u64> {
    let end = offset.saturating_add(len);
    let (mut at, mut last) = (offset, offset);
    // Bound: `at` grows every step.
    while at < end {
        let Some(data) = seek(file, at, libc::SEEK_DATA)? else { break };
        if data >= end {
            break;
        }
        let hole = seek(file, data, libc::SEEK_HOLE)?.unwrap_or(end);
        last = hole.min(end);
        at = hole.max(data + 1);
    }
    Ok(last - offset)
}

/// `lseek(2)` to `offset` with `whence` (SEEK_DATA, SEEK_HOLE); `None` when no data lies at
/// or past `offset` (ENXIO). Positioned reads and writes do not use the file offset it moves.
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "lseek with SEEK_DATA and SEEK_HOLE has no safe wrapper in std")]
fn seek(file: &File, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the descriptor is owned by `file`, which outlives the call; the call takes no
    // pointers and changes only the descriptor's offset.
    let rc = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if rc >= 0 {
        return Ok(Some(rc as u64));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        _ => Err(err),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn allocated_len(_file: &File, _offset: u64, len: u64) -> io::Result<u64> {
    Ok(len)
}

#[expect(unsafe_code, reason = "flock has no safe wrapper at the crate's minimum Rust version")]
fn flock_exclusive(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is owned by `file`, which outlives the call; flock only changes
    // the lock state of the open file description.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Err(io::Error::new(io::ErrorKind::WouldBlock, "locked by another handle or process"));
    }
    Err(err)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn allocate(_file: &File, _len: u64) -> io::Result<()> {
    Ok(())
}

impl StdFs {
    /// `file` with batched I/O through io_uring when enabled and available.
    fn batched(&self, file: File) -> Arc<dyn VfsFile> {
        #[cfg(all(target_os = "linux", feature = "io-uring"))]
        if self.io_uring {
            match file.try_clone().and_then(super::uring::UringFile::new) {
                Ok(uring) => return Arc::new(uring),
                Err(e) => tracing::info!(error = %e, "io_uring unavailable; using pread/pwrite"),
            }
        }
        Arc::new(StdFile { file })
    }
}

impl Vfs for StdFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new().read(true).write(true).create(create).open(self.dir.join(path))?;
        Ok(Arc::new(StdFile { file }))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.dir.join(path).try_exists()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(path))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn open_batched(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = self.open_unmapped(path)?;
        #[cfg(target_os = "linux")]
        if self.mapped_reads {
            match File::open(self.dir.join(path))
                .and_then(|reader| super::mapped::MappedFile::new(Arc::clone(&file), reader))
            {
                Ok(mapped) => return Ok(Arc::new(mapped)),
                Err(e) => {
                    tracing::info!(error = %e, "the frames file cannot be mapped; page reads use pread")
                }
            }
        }
        Ok(file)
    }

    fn try_lock(&self, path: &Path) -> io::Result<super::DirLock> {
        let file = self.open_or_create(path)?;
        // flock locks belong to the open file description: a second open of the same file,
        // in this process or another, is refused, and the lock dies with the descriptor.
        flock_exclusive(&file)?;
        Ok(Box::new(file))
    }
}

impl StdFs {
    /// `path` opened for reading and writing, created empty if missing, never truncated.
    fn open_or_create(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(self.dir.join(path))
    }

    /// The frames file as `open_batched` opens it before any mapping: O_DIRECT beside a
    /// buffered descriptor where allowed, batched through io_uring where enabled.
    fn open_unmapped(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = self.open_or_create(path)?;
        #[cfg(target_os = "linux")]
        if self.direct_io {
            use std::os::unix::fs::OpenOptionsExt;
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(self.dir.join(path))
            {
                Ok(direct) => {
                    let buffered: Arc<dyn VfsFile> = Arc::new(StdFile { file });
                    let direct = self.batched(direct);
                    return Ok(Arc::new(super::direct::DirectFile::new(direct, buffered)));
                }
                // tmpfs and some FUSE file systems refuse O_DIRECT at open.
                Err(e) => tracing::info!(error = %e, "O_DIRECT unavailable; frame I/O is buffered"),
            }
        }
        Ok(self.batched(file))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// `allocated_len` ends at the last data of the range: data written at two places of a
    /// sparse file, one of them punched afterwards. A file system that cannot tell holes
    /// (SEEK_HOLE finds none in a file made sparse by `set_len`) reports whole ranges.
    #[test]
    fn allocated_len_ends_at_the_last_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        const K: u64 = 64 * 1024;
        file.set_len(32 * K).unwrap();
        file.write_all_at(&[1; 8192], 0).unwrap();
        file.write_all_at(&[2; 4096], 5 * K).unwrap();
        file.write_all_at(&[3; 4096], 9 * K).unwrap();
        // A whole 64 KiB: file systems with blocks up to that size free it.
        punch_hole(&file, 9 * K, K).unwrap();
        file.sync_all().unwrap();
        if seek(&file, 0, libc::SEEK_HOLE).unwrap() == Some(32 * K) {
            // No holes known here: every range counts as allocated.
            assert_eq!(allocated_len(&file, 8 * K, 8 * K).unwrap(), 8 * K);
            return;
        }
        // Blocks are allocated in whole file-system blocks (4 KiB here, up to 64 KiB).
        let data_end = allocated_len(&file, 0, 8 * K).unwrap();
        assert!((5 * K + 4096..8 * K).contains(&data_end), "{data_end}");
        assert_eq!(allocated_len(&file, 0, 4096).unwrap(), 4096);
        assert_eq!(allocated_len(&file, 8 * K, 8 * K).unwrap(), 0, "a punched range is a hole");
        assert_eq!(allocated_len(&file, 16 * K, 16 * K).unwrap(), 0, "past the last data");
        assert_eq!(allocated_len(&file, 32 * K, 8 * K).unwrap(), 0, "past the end");
    }
}

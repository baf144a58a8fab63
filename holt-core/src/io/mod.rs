//! The storage trait every byte of holt-core goes through, and its implementations.
//!
//! - `StdFs`: real files with pread/pwrite/fdatasync (always built).
//! - `Uring` (feature `io-uring`, Linux): batched frame reads and writes through io_uring.
//! - `DirectFile` (Linux): frame I/O through O_DIRECT with aligned bounce buffers, buffered
//!   where the file system refuses it (`StdFs::with_direct_io`).
//! - `MappedFile` (Linux): the frames file's page reads through a read-only mapping
//!   (`StdFs::with_mapped_reads`).
//! - `SimFs`: a simulated, fault-injecting file system that keeps each file's durable bytes
//!   apart from its not-yet-synced bytes, for crash tests.
//!
//! Paths handed to a `Vfs` are relative to the database directory.

use std::io;
use std::path::Path;
use std::sync::Arc;

#[cfg(target_os = "linux")]
mod direct;
#[cfg(target_os = "linux")]
mod mapped;
mod sim;
mod std_fs;
#[cfg(all(target_os = "linux", feature = "io-uring"))]
mod uring;

pub use sim::{Fault, FaultError, OpKind, SimFs};
pub use std_fs::StdFs;

#[cfg(target_os = "linux")]
pub(crate) use mapped::{is_resident, will_need};
/// Nothing is mapped elsewhere, so there is nothing to read ahead.
#[cfg(not(target_os = "linux"))]
pub(crate) fn will_need(_bytes: &[u8]) {}
/// Nothing is mapped elsewhere: no lent bytes are known to be in memory.
#[cfg(not(target_os = "linux"))]
pub(crate) fn is_resident(_bytes: &[u8]) -> bool {
    false
}

/// Held while a database directory is open; dropping it releases the lock.
pub type DirLock = Box<dyn std::any::Any + Send + Sync>;

/// Hook for a named failpoint (feature `failpoints`): returns the injected error, if any.
/// Without the feature it compiles to `Ok(())`.
pub(crate) fn failpoint(name: &str) -> io::Result<()> {
    let _ = name;
    fail::fail_point!(name, |_| Err(io::Error::other(format!("failpoint {name}"))));
    Ok(())
}

/// The first `N` bytes of the file `name`: `None` when it is missing, shorter, or unreadable
/// (for the small files read as hints: the sync and cut marks, a segment's header).
pub(crate) fn read_head<const N: usize>(vfs: &dyn Vfs, name: &str) -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    vfs.open(std::path::Path::new(name), false).and_then(|f| f.read_exact_at(&mut bytes, 0)).ok()?;
    Some(bytes)
}

/// One open file.
#[expect(clippy::len_without_is_empty, reason = "a file's size is asked, never its emptiness")]
pub trait VfsFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset` (short reads past the end are an error).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// `read_exact_at` through the operating system's page cache, where the file does direct
    /// I/O otherwise (small reads that are likely read again: a point read's frame pages).
    fn read_cached_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }
    /// Hands `f` the bytes `[offset, offset + len)` of each range in `ranges`, in place, from
    /// a mapping of the page cache, and returns `true`; `false` (and `f` not called) where the
    /// file has no mapping or some bytes lie past the end it knows. Only for bytes nothing
    /// writes while `f` runs.
    fn lend_mapped(&self, ranges: &[(u64, usize)], f: &mut dyn FnMut(&[&[u8]])) -> io::Result<bool> {
        let _ = (ranges, f);
        Ok(false)
    }
    /// Writes all of `buf` at `offset`, growing the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write to this file durable (fdatasync). A failure means the
    /// unsynced data may be lost: callers must not retry as if it were safe.
    fn sync_data(&self) -> io::Result<()>;
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Sets the length (truncate or extend with zeros).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves space up to `len` bytes without changing what reads return (fallocate where
    /// available), so later writes cannot fail with ENOSPC.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Gives the blocks of `[offset, offset + len)` back to the file system (punches a hole)
    /// without changing the file's length. Afterwards reads of the range return zeros or, where
    /// the file system cannot release space, the bytes that were there, so callers release
    /// only bytes nothing will read again. Like a write, it is durable only after `sync_data`,
    /// and losing it in a crash only costs space. The default releases nothing.
    fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// How many bytes from `offset` may hold blocks in `[offset, offset + len)` (up to the
    /// end of its last data; 0 for a hole), where the file system tells; the default, `len`,
    /// takes all of it as allocated.
    fn allocated_len(&self, offset: u64, len: u64) -> io::Result<u64> {
        let _ = offset;
        Ok(len)
    }
    /// Reads several frames at once: `(buffer, offset)` pairs. The default reads one by one;
    /// io_uring submits them together.
    fn read_many_at(&self, requests: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        for (buf, offset) in requests.iter_mut() {
            self.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }
    /// Writes several buffers at once: `(buffer, offset)` pairs.
    fn write_many_at(&self, requests: &[(&[u8], u64)]) -> io::Result<()> {
        for (buf, offset) in requests {
            self.write_all_at(buf, *offset)?;
        }
        Ok(())
    }
}

/// A directory of files: the database directory.
pub trait Vfs: Send + Sync {
    /// Opens `path`, creating it (empty) when `create` is true and it does not exist.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn VfsFile>>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Atomically replaces `to` with `from`. Durable only after `sync_dir`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file. Durable only after `sync_dir`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// File names in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Makes creations, renames and removals in the directory durable (fsync of the directory).
    fn sync_dir(&self) -> io::Result<()>;
    /// Opens (creating) a file used for batched I/O (the frames file): implementations may
    /// return a file whose `read_many_at`/`write_many_at` submit a batch at once.
    fn open_batched(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        self.open(path, true)
    }
    /// Takes an exclusive lock named by `path` (an flock on that file for real files) that
    /// lasts until the returned guard is dropped. Fails with `WouldBlock` if another handle or
    /// process holds it.
    fn try_lock(&self, path: &Path) -> io::Result<DirLock>;
}

//! Page reads through a read-only mapping of the file (`StdFs::with_mapped_reads`).
//!
//! A point read of an evicted frame fetches a few 4 KiB pages. Through `pread` each costs a
//! system call, a page-cache lookup and a copy (about 1 µs); through a shared mapping of the
//! same page cache it costs none of them. `MappedFile` wraps the frames file: it lends
//! mapped bytes in place (`lend_mapped`) and serves `read_cached_at` by a copy out of the
//! mapping; everything else goes to the wrapped file.
//!
//! Safety of the mapping rests on one rule: a mapped byte is read only below `safe_len`, a
//! length the file is known to have (set at open, raised after writes and extensions, and
//! lowered, under the mapping's write lock, before the file is cut). Reading a mapped page
//! past the end of the file would raise SIGBUS; so would a media error while the kernel
//! fills a page from the disk, which through `pread` is an I/O error. That is the cost of the
//! mapping (LMDB pays it too), and why `Options::mapped_reads` can turn it off.
//!
//! Readers use the mapped bytes in place (`lend_mapped`): a point read verifies each page it
//! touches against its checksum and reads its records where they lie, with no copy and no
//! buffer. Bytes a reader is lent belong to a slot the durable manifest names, which nothing
//! writes while it is named (`checkpoint/store.rs`), so they cannot change under it.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};
use parking_lot::RwLock;

use super::VfsFile;

/// The smallest mapping made; a file that grows past the mapping is mapped again at twice
/// its length.
const MIN_MAP_BYTES: u64 = 64 << 20;

pub(crate) struct MappedFile {
    inner: Arc<dyn VfsFile>,
    /// The same file, opened again for mapping.
    file: File,
    /// The mapping (possibly longer than the file: bytes past `safe_len` are never read).
    /// Readers hold the read lock while they use the bytes, so the file is never cut under one.
    map: RwLock<Option<Mmap>>,
    /// Bytes of the file known to exist (see the module comment).
    safe_len: AtomicU64,
}

impl MappedFile {
    /// Wraps `inner`; `file` is the same file opened for reading. Fails where the file
    /// cannot be mapped (some FUSE file systems); the caller then uses `inner` alone.
    pub(crate) fn new(inner: Arc<dyn VfsFile>, file: File) -> io::Result<MappedFile> {
        let len = inner.len()?;
        let mapped = MappedFile { inner, file, map: RwLock::new(None), safe_len: AtomicU64::new(len) };
        *mapped.map.write() = Some(mapped.map_at_least(len)?);
        Ok(mapped)
    }

    fn map_at_least(&self, len: u64) -> io::Result<Mmap> {
        let bytes = len.saturating_mul(2).max(MIN_MAP_BYTES);
        let bytes = usize::try_from(bytes).map_err(|_| io::Error::other("file too long to map"))?;
        // The kernel's default read-around stays: a fault on a cold page reads the pages
        // around it too, which are the same frame's (a frame is 128 pages). Cold point reads
        // at 1M keys took 13.4 µs with it and 69.6 with `MADV_RANDOM` (one page a fault).
        //
        // SAFETY: the mapping is read-only and read only below `safe_len` (see the module
        // comment); nothing in this process writes the file through another mapping, and
        // writes through the descriptor only reach slots no reader reads (the frames file's
        // invariant), so no slice a reader is lent sees its bytes change.
        #[expect(unsafe_code, reason = "a mapping of a file is unsafe to make: see SAFETY")]
        unsafe {
            MmapOptions::new().len(bytes).map(&self.file)
        }
    }

    /// Raises `safe_len` to `end` (after a write or extension that made the file reach it).
    fn grown_to(&self, end: u64) {
        self.safe_len.fetch_max(end, Ordering::AcqRel);
    }

    /// Hands the mapped bytes of each range `(offset, len)` to `f`, under the mapping's read
    /// lock; `None` (and `f` not called) when any lies past `safe_len`.
    fn lend<R>(&self, ranges: &[(u64, usize)], f: impl FnOnce(&[&[u8]]) -> R) -> io::Result<Option<R>> {
        let mut end = 0;
        for &(offset, len) in ranges {
            let Some(range_end) = offset.checked_add(len as u64) else { return Ok(None) };
            end = end.max(range_end);
        }
        loop {
            {
                let map = self.map.read();
                if end > self.safe_len.load(Ordering::Acquire) {
                    return Ok(None);
                }
                if let Some(map) = map.as_ref().filter(|m| end <= m.len() as u64) {
                    // Every range ends in bounds of the mapping, so its offsets fit in usize.
                    let lent: smallvec::SmallVec<[&[u8]; 8]> = ranges
                        .iter()
                        .map(|&(offset, len)| &map[offset as usize..offset as usize + len])
                        .collect();
                    return Ok(Some(f(&lent)));
                }
            }
            let mut map = self.map.write();
            if map.as_ref().is_none_or(|m| end > m.len() as u64) {
                *map = Some(self.map_at_least(self.safe_len.load(Ordering::Acquire).max(end))?);
            }
        }
    }
}

impl VfsFile for MappedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }

    fn read_cached_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self.lend(&[(offset, buf.len())], |lent| buf.copy_from_slice(lent[0]))? {
            Some(()) => Ok(()),
            None => self.inner.read_cached_at(buf, offset),
        }
    }

    fn lend_mapped(&self, ranges: &[(u64, usize)], f: &mut dyn FnMut(&[&[u8]])) -> io::Result<bool> {
        Ok(self.lend(ranges, f)?.is_some())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)?;
        self.grown_to(offset + buf.len() as u64);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if len < self.safe_len.load(Ordering::Acquire) {
            // No reader may be inside the bytes about to go: wait out those under way.
            let _readers_out = self.map.write();
            self.safe_len.store(len, Ordering::Release);
            return self.inner.set_len(len);
        }
        self.inner.set_len(len)?;
        self.grown_to(len);
        Ok(())
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }

    fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        // A punched hole reads as zeros through the mapping too; the length is unchanged.
        self.inner.release(offset, len)
    }

    fn read_many_at(&self, requests: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        self.inner.read_many_at(requests)
    }

    fn write_many_at(&self, requests: &[(&[u8], u64)]) -> io::Result<()> {
        self.inner.write_many_at(requests)?;
        if let Some(end) = requests.iter().map(|(buf, offset)| offset + buf.len() as u64).max() {
            self.grown_to(end);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{StdFs, Vfs};
    use std::path::Path;

    fn lent(file: &dyn VfsFile, offset: u64, len: usize) -> Option<Vec<u8>> {
        let mut copy = None;
        let done = file.lend_mapped(&[(offset, len)], &mut |lent| copy = Some(lent[0].to_vec())).unwrap();
        assert_eq!(done, copy.is_some(), "lend_mapped says it lent exactly when it called back");
        copy
    }

    /// Bytes are served from the mapping while the file holds them, past the first mapping's
    /// end once the file grows, and never past the file's end after it is cut: those reads
    /// go to `pread` and fail as a short read does, where a mapped read would raise SIGBUS.
    #[test]
    fn reads_follow_the_file_through_growth_and_cuts() {
        let dir = tempfile::tempdir().unwrap();
        let file = StdFs::new(dir.path()).with_mapped_reads(true).open_batched(Path::new("f")).unwrap();
        file.write_all_at(&[7u8; 8192], 0).unwrap();
        let mut page = [0u8; 4096];
        file.read_cached_at(&mut page, 4096).unwrap();
        assert_eq!(page, [7u8; 4096]);
        assert_eq!(lent(&*file, 0, 8192), Some(vec![7u8; 8192]));
        // Several ranges at once, each where it lies.
        let mut both = None;
        let two = [(0, 16), (4096, 8)];
        assert!(file
            .lend_mapped(&two, &mut |lent| both = Some((lent[0].to_vec(), lent[1].to_vec())))
            .unwrap());
        assert_eq!(both, Some((vec![7u8; 16], vec![7u8; 8])));

        // Past the first mapping (64 MiB): the file is mapped again.
        let far = 3 * MIN_MAP_BYTES;
        file.write_all_at(&[9u8; 4096], far).unwrap();
        assert_eq!(lent(&*file, far, 4096), Some(vec![9u8; 4096]));
        file.read_cached_at(&mut page, far).unwrap();
        assert_eq!(page, [9u8; 4096]);
        // A hole in between reads as zeros.
        assert_eq!(lent(&*file, MIN_MAP_BYTES, 16), Some(vec![0u8; 16]));

        // Cut after the first page: nothing past it is lent or read from the mapping.
        file.set_len(4096).unwrap();
        assert_eq!(lent(&*file, 4096, 4096), None);
        assert_eq!(lent(&*file, far, 4096), None);
        // None of several is lent when one lies past the end.
        assert!(!file.lend_mapped(&[(0, 16), (4096, 8)], &mut |_| panic!("lent past the end")).unwrap());
        let short = file.read_cached_at(&mut page, 4096).unwrap_err();
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(lent(&*file, 0, 4096), Some(vec![7u8; 4096]));

        // Grown again by `set_len`: the new bytes (zeros) are lent.
        file.set_len(3 * 4096).unwrap();
        assert_eq!(lent(&*file, 8192, 4096), Some(vec![0u8; 4096]));
        // An offset whose end overflows is not lent.
        assert_eq!(lent(&*file, u64::MAX - 10, 4096), None);
    }
}

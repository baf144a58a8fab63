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
        // SAFETY: the mapping is read-only and read only below `safe_len` (see the module
        // comment); nothing in this process writes the file through another mapping, and
        // writes through the descriptor only reach slots no reader reads (the frames file's
        // invariant), so no slice a reader is lent sees its bytes change.
        #[expect(unsafe_code, reason = "a mapping of a file is unsafe to make: see SAFETY")]
        let map = unsafe { MmapOptions::new().len(bytes).map(&self.file)? };
        // No read-around: a fault reads its own page. The kernel's read-around is the
        // device's read-ahead size (8 MiB on some virtual disks: 16 slots, with their punched
        // tails read as zeros into the page cache); callers ask for what they will read
        // (`will_need`). Advice is a hint: a kernel that refuses it only reads more.
        if let Err(e) = map.advise(memmap2::Advice::Random) {
            tracing::debug!(error = %e, "madvise(MADV_RANDOM) refused on the frames file's mapping");
        }
        Ok(map)
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

/// Asks the kernel to start reading the pages under `bytes`, lent from the mapping, into the
/// page cache, and returns at once: one request for a range a reader is about to read
/// through, where page faults would read it a page at a time (the mapping reads no pages
/// around a fault). Costs a page-cache lookup per page already there. A hint: errors are
/// ignored, and slices outside a mapping are left alone by the kernel.
pub(crate) fn will_need(bytes: &[u8]) {
    // One page is read by its own fault: no system call for it.
    let Some((start, len)) = page_span(bytes).filter(|&(_, len)| len > page_size()) else { return };
    // SAFETY: MADV_WILLNEED only schedules reads into the page cache; it changes no byte
    // of any mapping. The range starts at most a page below a lent slice, inside the same
    // page-aligned mapping.
    #[expect(unsafe_code, reason = "libc call: see SAFETY")]
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_WILLNEED);
    }
}

/// Whether the page cache holds every page under `bytes`, lent from the mapping (`mincore`):
/// reading them then waits for no disk. `false` where the kernel cannot tell.
pub(crate) fn is_resident(bytes: &[u8]) -> bool {
    let Some((start, len)) = page_span(bytes) else { return true };
    let mut held: smallvec::SmallVec<[u8; 128]> = smallvec::smallvec![0; len.div_ceil(page_size())];
    // SAFETY: mincore reads the page tables of the range and writes a byte per page into
    // `held`, which has one for each; the range lies in the live mapping a slice is lent from.
    #[expect(unsafe_code, reason = "libc call: see SAFETY")]
    let done = unsafe { libc::mincore(start as *mut libc::c_void, len, held.as_mut_ptr()) };
    done == 0 && held.iter().all(|&b| b & 1 != 0)
}

/// The address and length of the whole pages under `bytes`; `None` for no bytes.
fn page_span(bytes: &[u8]) -> Option<(usize, usize)> {
    if bytes.is_empty() {
        return None;
    }
    let start = bytes.as_ptr() as usize & !(page_size() - 1);
    Some((start, bytes.as_ptr() as usize + bytes.len() - start))
}

/// The system's page size.
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system.
        #[expect(unsafe_code, reason = "libc call: see SAFETY")]
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).ok().filter(|&s| s.is_power_of_two()).unwrap_or(4096)
    })
}

impl VfsFile for MappedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }

    fn read_cached_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let ranges = [(offset, buf.len())];
        let copy = |lent: &[&[u8]]| {
            will_need(lent[0]);
            buf.copy_from_slice(lent[0])
        };
        match self.lend(&ranges, copy)? {
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
    fn allocated_len(&self, offset: u64, len: u64) -> io::Result<u64> {
        self.inner.allocated_len(offset, len)
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

    /// Which of the first `pages` 4 KiB pages of `file` the page cache holds.
    #[expect(unsafe_code, reason = "mapping a file and asking mincore of it: see SAFETY")]
    fn resident(file: &File, pages: usize) -> Vec<bool> {
        // SAFETY: the mapping is only passed to mincore, never read.
        let map = unsafe { MmapOptions::new().len(pages * 4096).map(file).unwrap() };
        let mut vec = vec![0u8; pages];
        // SAFETY: `map` is a live mapping of `pages` pages and `vec` holds a byte for each.
        let done = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, map.len(), vec.as_mut_ptr()) };
        assert_eq!(done, 0, "mincore: {}", io::Error::last_os_error());
        vec.iter().map(|&b| b & 1 != 0).collect()
    }

    /// A fault on the mapping reads its own page, not the pages around it (the kernel's
    /// read-around reads the device's read-ahead size: 8 MiB, 16 slots, on some virtual disks),
    /// and `will_need` reads a range in. Skipped where the page cache cannot be emptied (tmpfs).
    #[test]
    #[expect(unsafe_code, reason = "posix_fadvise: see SAFETY")]
    fn a_fault_reads_its_own_page_and_will_need_a_range() {
        use std::os::fd::AsRawFd;
        const PAGES: usize = 512;
        let dir = tempfile::tempdir().unwrap();
        let file = StdFs::new(dir.path()).with_mapped_reads(true).open_batched(Path::new("f")).unwrap();
        file.write_all_at(&vec![5u8; PAGES * 4096], 0).unwrap();
        file.sync_data().unwrap();
        let probe = File::open(dir.path().join("f")).unwrap();
        // SAFETY: a hint on a descriptor this test owns.
        unsafe { libc::posix_fadvise(probe.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if resident(&probe, PAGES).contains(&true) {
            eprintln!("skipped: the file system keeps the file's pages in memory");
            return;
        }

        assert_eq!(lent(&*file, 300 * 4096 + 8, 16), Some(vec![5u8; 16]));
        let now = resident(&probe, PAGES);
        let held: Vec<usize> = (0..PAGES).filter(|&p| now[p]).collect();
        assert_eq!(held, [300], "one fault, one page");
        let mut checked = None;
        file.lend_mapped(&[(299 * 4096, 3 * 4096)], &mut |lent| {
            checked = Some((
                is_resident(&lent[0][4096..8192]),
                is_resident(lent[0]),
                is_resident(&lent[0][4100..4200]),
            ))
        })
        .unwrap();
        assert_eq!(checked, Some((true, false, true)), "is_resident of page 300, pages 299-301, part of 300");

        let range = [(100 * 4096, 64 * 4096)];
        assert!(file.lend_mapped(&range, &mut |lent| will_need(lent[0])).unwrap());
        let wanted = 100..164;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = resident(&probe, PAGES);
            if wanted.clone().all(|p| now[p]) {
                let outside = (0..PAGES).filter(|&p| now[p] && !wanted.contains(&p) && p != 300).count();
                assert_eq!(outside, 0, "will_need read only the range");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the range was not read in");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

//! O_DIRECT frame I/O: the frames file opened a second time with O_DIRECT, so frame reads and
//! writes bypass the page cache (the engine's own cache holds the frames it needs; the page
//! cache would hold a second copy of them).
//!
//! O_DIRECT needs the buffer address, the file offset and the length aligned to the device's
//! logical block size. Frames are 512 KiB at 512 KiB offsets and stored in multiples of 4 KiB,
//! so offsets and lengths are aligned; caller buffers are not, so every transfer goes through
//! an aligned bounce buffer (a copy costs ~60 µs per 512 KiB here, far less than decoding the
//! frame). Anything unaligned, and everything after the kernel refuses O_DIRECT with EINVAL,
//! uses the buffered descriptor instead. Both descriptors name the same inode, so one
//! fdatasync covers the writes of both.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::VfsFile;

/// Alignment of O_DIRECT transfers (the largest logical block size in common use).
pub(crate) const DIRECT_ALIGN_BYTES: usize = 4096;

/// Bounce buffers kept for reuse (allocating 512 KiB per frame read made glibc consolidate
/// its free lists on every read).
const SPARE_BUFFERS_MAX: usize = 8;

/// A zeroed buffer whose usable part starts at a `DIRECT_ALIGN_BYTES` boundary.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
}

impl AlignedBuf {
    /// `None` if the allocator's address cannot be aligned (then the caller goes buffered).
    fn new(capacity: usize) -> Option<AlignedBuf> {
        let storage = vec![0u8; capacity + DIRECT_ALIGN_BYTES];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN_BYTES);
        (start < DIRECT_ALIGN_BYTES).then_some(AlignedBuf { storage, start })
    }
    fn capacity(&self) -> usize {
        self.storage.len() - DIRECT_ALIGN_BYTES
    }
    fn slice(&self, len: usize) -> &[u8] {
        &self.storage[self.start..self.start + len]
    }
    fn slice_mut(&mut self, len: usize) -> &mut [u8] {
        &mut self.storage[self.start..self.start + len]
    }
}

pub(crate) struct DirectFile {
    direct: Arc<dyn VfsFile>,
    buffered: Arc<dyn VfsFile>,
    /// Set once the kernel refused an O_DIRECT transfer: everything goes buffered from then on.
    refused: AtomicBool,
    spare: Mutex<Vec<AlignedBuf>>,
}

fn aligned(offset: u64, len: usize) -> bool {
    offset.is_multiple_of(DIRECT_ALIGN_BYTES as u64) && len.is_multiple_of(DIRECT_ALIGN_BYTES) && len > 0
}

fn is_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

impl DirectFile {
    /// `direct` is the file opened with O_DIRECT, `buffered` the same file without it.
    pub(crate) fn new(direct: Arc<dyn VfsFile>, buffered: Arc<dyn VfsFile>) -> DirectFile {
        DirectFile { direct, buffered, refused: AtomicBool::new(false), spare: Mutex::new(Vec::new()) }
    }

    fn usable(&self, requests: impl IntoIterator<Item = (u64, usize)>) -> bool {
        !self.refused.load(Ordering::Relaxed) && requests.into_iter().all(|(o, l)| aligned(o, l))
    }

    fn take(&self, len: usize) -> Option<AlignedBuf> {
        let reused = {
            let mut spare = self.spare.lock();
            spare.iter().position(|b| b.capacity() >= len).map(|i| spare.swap_remove(i))
        };
        reused.or_else(|| AlignedBuf::new(len))
    }

    fn give_back(&self, bufs: Vec<AlignedBuf>) {
        let mut spare = self.spare.lock();
        for b in bufs {
            if spare.len() < SPARE_BUFFERS_MAX {
                spare.push(b);
            }
        }
    }

    fn refuse(&self, e: &io::Error) {
        tracing::info!(error = %e, "O_DIRECT refused by the file system; frame I/O is buffered");
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Is this transfer going through O_DIRECT? (For tests.)
    #[cfg(test)]
    fn is_direct(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }
}

impl VfsFile for DirectFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut one = [(buf, offset)];
        self.read_many_at(&mut one)
    }

    fn read_cached_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.buffered.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_many_at(&[(buf, offset)])
    }

    fn sync_data(&self) -> io::Result<()> {
        // fdatasync is per inode: it covers writes made through either descriptor.
        self.buffered.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.buffered.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.buffered.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.buffered.allocate(len)
    }

    fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        self.buffered.release(offset, len)
    }
    fn allocated_len(&self, offset: u64, len: u64) -> io::Result<u64> {
        self.buffered.allocated_len(offset, len)
    }

    fn read_many_at(&self, requests: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        if self.usable(requests.iter().map(|(b, o)| (*o, b.len()))) {
            let mut bounces = Vec::with_capacity(requests.len());
            for (b, _) in requests.iter() {
                match self.take(b.len()) {
                    Some(bounce) => bounces.push(bounce),
                    None => break,
                }
            }
            if bounces.len() == requests.len() {
                let result = {
                    let mut direct: Vec<(&mut [u8], u64)> = bounces
                        .iter_mut()
                        .zip(requests.iter())
                        .map(|(bounce, (b, o))| (bounce.slice_mut(b.len()), *o))
                        .collect();
                    self.direct.read_many_at(&mut direct)
                };
                match result {
                    Ok(()) => {
                        for ((b, _), bounce) in requests.iter_mut().zip(&bounces) {
                            b.copy_from_slice(bounce.slice(b.len()));
                        }
                        self.give_back(bounces);
                        return Ok(());
                    }
                    Err(e) if is_refusal(&e) => self.refuse(&e),
                    Err(e) => {
                        self.give_back(bounces);
                        return Err(e);
                    }
                }
            }
            self.give_back(bounces);
        }
        self.buffered.read_many_at(requests)
    }

    fn write_many_at(&self, requests: &[(&[u8], u64)]) -> io::Result<()> {
        if !self.usable(requests.iter().map(|(b, o)| (*o, b.len()))) {
            return self.buffered.write_many_at(requests);
        }
        // A checkpoint writes hundreds of frames: go through a few bounce buffers at a time,
        // so the copies never hold more than `WRITE_BATCH` frames of memory.
        for (done, chunk) in requests.chunks(WRITE_BATCH).enumerate() {
            if let Err(e) = self.write_direct(chunk) {
                if !is_refusal(&e) {
                    return Err(e);
                }
                // Redo, buffered, everything from the refused chunk on.
                self.refuse(&e);
                return self.buffered.write_many_at(&requests[done * WRITE_BATCH..]);
            }
        }
        Ok(())
    }
}

/// Frames written through O_DIRECT per submission (each needs its own bounce buffer).
const WRITE_BATCH: usize = 8;

impl DirectFile {
    /// Writes `requests` (aligned) through O_DIRECT; falls back to buffered for this chunk
    /// only if no aligned buffer could be had.
    fn write_direct(&self, requests: &[(&[u8], u64)]) -> io::Result<()> {
        let mut bounces = Vec::with_capacity(requests.len());
        for (b, _) in requests {
            match self.take(b.len()) {
                Some(mut bounce) => {
                    bounce.slice_mut(b.len()).copy_from_slice(b);
                    bounces.push(bounce);
                }
                None => {
                    self.give_back(bounces);
                    return self.buffered.write_many_at(requests);
                }
            }
        }
        let direct: Vec<(&[u8], u64)> =
            bounces.iter().zip(requests).map(|(bounce, (b, o))| (bounce.slice(b.len()), *o)).collect();
        let result = self.direct.write_many_at(&direct);
        drop(direct);
        self.give_back(bounces);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{StdFs, Vfs};
    use std::path::Path;

    /// Aligned and unaligned transfers both round-trip, and the file really is opened with
    /// O_DIRECT where the file system allows it.
    #[test]
    fn direct_and_fallback_transfers_round_trip() {
        for base in [std::env::temp_dir(), std::path::PathBuf::from("/dev/shm")] {
            let Ok(dir) = tempfile::tempdir_in(&base) else { continue };
            let fs = StdFs::new(dir.path()).with_direct_io(true);
            let file = fs.open_batched(Path::new("frames.dat")).expect("open");
            let block: Vec<u8> = (0..2 * DIRECT_ALIGN_BYTES).map(|i| (i % 251) as u8).collect();
            file.write_all_at(&block, 3 * DIRECT_ALIGN_BYTES as u64).expect("aligned write");
            file.write_all_at(b"unaligned", 7).expect("unaligned write");
            file.sync_data().expect("sync");
            let mut back = vec![0u8; block.len()];
            file.read_exact_at(&mut back, 3 * DIRECT_ALIGN_BYTES as u64).expect("aligned read");
            assert_eq!(back, block, "{}", base.display());
            let mut small = [0u8; 9];
            file.read_exact_at(&mut small, 7).expect("unaligned read");
            assert_eq!(&small, b"unaligned");
            let mut many_a = vec![0u8; DIRECT_ALIGN_BYTES];
            let mut many_b = vec![0u8; DIRECT_ALIGN_BYTES];
            let mut reqs = [
                (&mut many_a[..], 3 * DIRECT_ALIGN_BYTES as u64),
                (&mut many_b[..], 4 * DIRECT_ALIGN_BYTES as u64),
            ];
            file.read_many_at(&mut reqs).expect("batched read");
            assert_eq!([&many_a[..], &many_b[..]].concat(), block);
            // More frames than one O_DIRECT submission takes, at scattered offsets.
            let frames: Vec<Vec<u8>> =
                (0..3 * WRITE_BATCH + 1).map(|i| vec![i as u8 + 1; DIRECT_ALIGN_BYTES]).collect();
            let offset = |i: usize| ((10 + 2 * i) * DIRECT_ALIGN_BYTES) as u64;
            let writes: Vec<(&[u8], u64)> =
                frames.iter().enumerate().map(|(i, f)| (&f[..], offset(i))).collect();
            file.write_many_at(&writes).expect("batched write");
            for (i, f) in frames.iter().enumerate() {
                let mut back = vec![0u8; DIRECT_ALIGN_BYTES];
                file.read_exact_at(&mut back, offset(i)).expect("read");
                assert_eq!(&back, f, "frame {i}");
            }
            let mut past_end = vec![0u8; DIRECT_ALIGN_BYTES];
            assert!(file.read_exact_at(&mut past_end, 256 * DIRECT_ALIGN_BYTES as u64).is_err());
            println!("{}: round trip ok", base.display());
        }
    }

    #[test]
    fn direct_file_on_ext4_uses_o_direct() {
        let dir = tempfile::tempdir().expect("tempdir");
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags_direct()
            .open(dir.path().join("f"));
        let Ok(direct) = direct else {
            println!("skipped: this file system refuses O_DIRECT");
            return;
        };
        let buffered =
            std::fs::OpenOptions::new().read(true).write(true).open(dir.path().join("f")).expect("open");
        let file = DirectFile::new(
            Arc::new(crate::io::std_fs::StdFile::from(direct)),
            Arc::new(crate::io::std_fs::StdFile::from(buffered)),
        );
        let block = vec![7u8; DIRECT_ALIGN_BYTES];
        file.write_all_at(&block, 0).expect("write");
        let mut back = vec![0u8; DIRECT_ALIGN_BYTES];
        file.read_exact_at(&mut back, 0).expect("read");
        assert_eq!(back, block);
        assert!(file.is_direct(), "an aligned transfer on this file system fell back to buffered I/O");
    }

    trait DirectFlag {
        fn custom_flags_direct(&mut self) -> &mut Self;
    }
    impl DirectFlag for std::fs::OpenOptions {
        fn custom_flags_direct(&mut self) -> &mut Self {
            use std::os::unix::fs::OpenOptionsExt;
            self.custom_flags(libc::O_DIRECT)
        }
    }
}

//! Helpers for the tests that read a database larger than its budget from disk.
#![allow(dead_code)]

use std::path::Path;

/// Asks the kernel to drop the directory's files from the page cache, so reads go to disk.
#[expect(unsafe_code, reason = "posix_fadvise has no safe wrapper in the dependencies")]
pub fn drop_page_cache(dir: &Path) {
    use std::os::unix::io::AsRawFd;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let file = std::fs::File::open(entry.path()).unwrap();
        file.sync_all().unwrap();
        // SAFETY: a plain system call on a descriptor `file` owns for the whole call.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise failed");
    }
}

/// A scratch directory on the target's disk, not a tmpfs: dropping pages from the cache must
/// mean something.
pub fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

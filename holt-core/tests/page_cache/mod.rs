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

/// Options of a database whose frames are evicted: async writes, the given memory budget, no
/// checkpoint by time (tests checkpoint when they mean to).
pub fn options(budget_bytes: usize) -> holt_core::Options {
    holt_core::Options {
        durability: holt_core::Durability::Async,
        memory_budget_bytes: budget_bytes,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        ..holt_core::Options::default()
    }
}

/// Writes `record(i)` (key, value) for each of `ids` in batches of 500 with an unbounded budget,
/// then closes (the close checkpoints every frame to disk); returns what was written.
pub fn load(
    dir: &Path,
    ids: impl Iterator<Item = u32>,
    record: impl Fn(u32) -> (Vec<u8>, Vec<u8>),
) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let db = holt_core::Db::open(dir, options(usize::MAX)).unwrap();
    let mut written = std::collections::BTreeMap::new();
    let ids: Vec<u32> = ids.collect();
    for chunk in ids.chunks(500) {
        let mut batch = holt_core::Batch::new();
        for &i in chunk {
            let (key, value) = record(i);
            batch.put(key.clone(), value.clone());
            written.insert(key, value);
        }
        db.write_batch(&batch, holt_core::WriteOptions::default()).unwrap();
    }
    db.close().unwrap();
    written
}

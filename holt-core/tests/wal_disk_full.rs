//! Invariant: when the disk fills, writes fail with `Error::DiskFull` BEFORE anything is
//! applied, nothing acknowledged is lost, and once space is freed writes succeed again
//! (the log retries preallocating its next segment).
//!
//! Two versions: on the simulated file system (always), and on a real 8 MiB tmpfs (needs
//! root to mount; prints "skipped: <reason>" otherwise).

mod oracle;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holt_core::io::{SimFs, Vfs};
use holt_core::{Db, Error, Options};

fn opts() -> Options {
    Options {
        wal_ring_bytes: 64 << 10,
        // No checkpoints: the log must fill the disk.
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

/// Writes 4 KiB values until the disk is full; returns the acknowledged keys.
fn fill(db: &Db, tag: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut acked = Vec::new();
    for i in 0..100_000u32 {
        let key = format!("{tag}/k{i:06}").into_bytes();
        let value = vec![b'a' + (i % 26) as u8; 4096];
        match db.put(&key, &value) {
            Ok(_) => acked.push((key, value)),
            Err(Error::DiskFull) => {
                // Refused before applying: the key must not be visible.
                assert!(db.get(&key).unwrap().is_none(), "a refused write was applied");
                return acked;
            }
            Err(e) => panic!("expected DiskFull, got {e}"),
        }
    }
    panic!("the disk never filled");
}

/// Retries a write until the log has preallocated space again.
fn write_after_freeing(db: &Db) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match db.put(b"after/freed", b"ok") {
            Ok(_) => return,
            Err(Error::DiskFull) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("write after freeing space: {e}"),
        }
    }
}

fn check_all(db: &Db, acked: &[(Vec<u8>, Vec<u8>)]) {
    for (k, v) in acked {
        let e = db.get(k).unwrap().unwrap_or_else(|| panic!("acked {:?} lost", String::from_utf8_lossy(k)));
        assert_eq!(&e.value, v);
    }
}

#[test]
fn simulated_disk_full_refuses_then_recovers() {
    let fs = SimFs::new(oracle::seed("simulated_disk_full_refuses_then_recovers"));
    let vfs: Arc<dyn Vfs> = fs.clone();
    fs.set_capacity(Some(5 << 20));
    let db = Db::open_with_vfs(vfs.clone(), opts()).unwrap();
    let acked = fill(&db, "sim");
    assert!(!acked.is_empty());
    // Still full for a write of the same size (smaller ones may fit in what is left).
    assert!(matches!(db.put(b"sim/again", &[7u8; 4096]), Err(Error::DiskFull)));
    fs.set_capacity(Some(64 << 20));
    write_after_freeing(&db);
    check_all(&db, &acked);
    fs.crash();
    drop(db);
    let db = Db::open_with_vfs(vfs, opts()).unwrap();
    check_all(&db, &acked);
    assert_eq!(db.get(b"after/freed").unwrap().unwrap().value, b"ok");
}

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn mount_tmpfs(dir: &Path) -> Result<Mount, String> {
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(dir)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if !out.status.success() {
        return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(Mount(dir.to_path_buf()))
}

#[test]
fn real_tmpfs_disk_full_refuses_then_recovers() {
    let base = tempfile::tempdir().unwrap();
    let _mount = match mount_tmpfs(base.path()) {
        Ok(m) => m,
        Err(reason) => {
            println!("skipped: {reason} (needs root)");
            return;
        }
    };
    // Ballast to free later.
    let ballast = base.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 3 << 20]).unwrap();
    let dir = base.path().join("db");
    let db = Db::open(&dir, opts()).unwrap();
    let acked = fill(&db, "tmpfs");
    assert!(!acked.is_empty());
    std::fs::remove_file(&ballast).unwrap();
    write_after_freeing(&db);
    check_all(&db, &acked);
    drop(db);
    let db = Db::open(&dir, opts()).unwrap();
    check_all(&db, &acked);
    assert_eq!(db.get(b"after/freed").unwrap().unwrap().value, b"ok");
    drop(db);
}

//! Invariant: `Db::sync` is a durability barrier for `Async` writes: once it returns, every
//! write acknowledged before it survives a power cut, and it does not wait for the flush
//! interval to get there.
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs) right after `sync` returns: synced bytes
//! survive, unsynced writes are dropped, kept or torn. The flush interval is an hour, so
//! nothing but `sync` can have made the async writes durable. Seeds are printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use holt_core::io::{SimFs, Vfs};
use holt_core::{Db, Durability, Options};

fn opts() -> Options {
    Options {
        durability: Durability::Async,
        wal_flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

#[test]
fn async_writes_before_sync_survive_a_power_cut() {
    for seed in 0..32u64 {
        println!("seed {seed}");
        let fs = SimFs::new(seed);
        let vfs: Arc<dyn Vfs> = fs.clone();
        let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open");
        let mut written = Vec::new();
        for i in 0..50u32 {
            let key = format!("k/{i:04}").into_bytes();
            let version = db.put(&key, &i.to_le_bytes()).expect("put");
            written.push((key, i, version));
        }
        let started = Instant::now();
        db.sync().expect("sync");
        assert!(started.elapsed() < Duration::from_secs(60), "sync waited for the flush interval");
        assert!(db.stats().durable_lsn > written.last().expect("writes").2 .0);
        fs.crash();
        drop(db);
        let db = Db::open_with_vfs(vfs, opts()).expect("reopen after crash");
        for (key, i, version) in &written {
            let entry = db.get(key).expect("get").unwrap_or_else(|| panic!("seed {seed}: {key:?} lost"));
            assert_eq!(entry.value, i.to_le_bytes(), "seed {seed}");
            assert_eq!(entry.version, *version, "seed {seed}");
        }
    }
}

#[test]
fn sync_on_an_in_memory_database_is_a_no_op() {
    let db = Db::open_in_memory(Options::default()).expect("open");
    db.put(b"k", b"v").expect("put");
    db.sync().expect("sync");
}

//! Measurement, not a pass/fail check (ignored by default): single-writer `Sync` latency and
//! `Sync` throughput with 1, 4, 16 and 64 writer threads on a real file, plus the longest
//! checkpoint stall seen. Run in release mode:
//! `cargo test --release -p holt-core --test wal_sync_throughput -- --ignored --nocapture`
//! (`HOLT_BENCH_DIR` picks the directory; default: the system temp dir).

use std::sync::Arc;
use std::time::{Duration, Instant};

use holt_core::{Db, Options};

fn opts() -> Options {
    Options {
        checkpoint_wal_bytes: 32 << 20,
        checkpoint_interval: Duration::from_secs(1),
        ..Options::default()
    }
}

#[test]
#[ignore]
fn sync_latency_and_group_commit_throughput() {
    let base = std::env::var("HOLT_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = tempfile::tempdir_in(base).unwrap();
    let db = Arc::new(Db::open(dir.path(), opts()).unwrap());
    let value = [b'v'; 60];
    // Single writer latency.
    let mut lat: Vec<Duration> = (0..500)
        .map(|i| {
            let t = Instant::now();
            db.put(format!("lat/{i:06}").as_bytes(), &value).unwrap();
            t.elapsed()
        })
        .collect();
    lat.sort();
    println!(
        "sync put latency, 1 writer: p50 {:?} p99 {:?} (n=500)",
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100]
    );
    for threads in [1usize, 4, 16, 64] {
        let per_thread = (4000 / threads).max(100);
        let syncs_before = db.stats().wal_syncs;
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        db.put(format!("tp{threads}/t{t:02}/k{i:06}").as_bytes(), &value).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        let n = threads * per_thread;
        let syncs = db.stats().wal_syncs - syncs_before;
        println!(
            "sync throughput, {threads:2} writers: {:8.0} writes/s ({n} writes, {syncs} fdatasyncs, {:.1} writes per fdatasync)",
            n as f64 / secs,
            n as f64 / syncs.max(1) as f64
        );
    }
    db.checkpoint().unwrap();
    println!(
        "longest checkpoint stall: {} us; checkpoints: {}",
        db.stats().checkpoint_stall_max_us,
        db.stats().checkpoints
    );
}

//! Async overwrites with the deferred work counted: load N path-shaped keys, checkpoint, then
//! 100,000 random overwrites (each its own commit, `Durability::Async`) and one `checkpoint()`
//! that makes them durable in frames. Prints the put-only time, the checkpoint's time and
//! the amortized figure, the time to reopen it after a close, and the same puts against an
//! in-memory database (no log) as the A/B that separates the log's cost from the tree's.
//!
//! `cargo run --release -p holt-core --example overwrite_checkpoint -- [--keys N]
//! [--overwrites M] [--dir DIR] [--seed S] [--cache-mb MB] [--ring-kb KB] [--memory-rounds R]
//! [--memory-only | --durable-only]`. `--cache-mb` is
//! the frame cache's memory budget (the default is `Options::default()`'s; a tree larger than
//! it is read back from disk, and the cache's pressure then starts checkpoints during the
//! puts as well); `--ring-kb` the log ring's size (log segments are 4× it, at least 1 MiB).
//! `--memory-rounds` repeats the in-memory puts and prints each round and their median, and
//! `--memory-only` skips the durable part (`--durable-only` the in-memory one): A/Bs of the
//! tree alone load once and take the median of many rounds. `--reuse DIR` keeps the database
//! in `DIR` (not a temporary directory) and loads it only if it is empty, so a profile of the
//! overwrites at 10M keys pays for the load once; it implies `--durable-only`. `--rounds R`
//! (with `--reuse`) runs the overwrites and their checkpoint R times in one process, the
//! first with the cache as the open left it. `--direct-io yes|no` sets `Options::direct_io`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use holt_core::{Batch, Db, Durability, Options, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(i: usize) -> Vec<u8> {
    let (b, t) = (i % 5, (i / 5) % 20);
    let n = i / 100;
    if n % 5 != 4 {
        format!("bucket-{b:03}/tenant-{t:02}/dir-{:03}/sub-{}/file-{i:08}.bin", n % 50, (n / 50) % 4)
    } else {
        format!("bucket-{b:03}/tenant-{t:02}/object-{i:08}.json")
    }
    .into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!(
        "{{\"etag\":\"{:016x}\",\"size\":{:8},\"mtime\":1700000000}}",
        i.wrapping_mul(7919),
        i % 99_999_999
    )
    .into_bytes()
}

fn load(db: &Db, keys: usize) {
    let mut order: Vec<usize> = (0..keys).collect();
    // A fixed shuffle: the tree is built in random key order, as in the benchmarks.
    let mut rng = StdRng::seed_from_u64(0x5EED_2026);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    for chunk in order.chunks(1000) {
        let mut batch = Batch::new();
        for &i in chunk {
            batch.put(key(i), value(i as u64));
        }
        db.write_batch(&batch, WriteOptions { durability: Some(Durability::Async) }).expect("load");
    }
}

/// `overwrites` random single-key async overwrites; returns the mean time per put.
fn overwrite(db: &Db, keys: usize, overwrites: usize, seed: u64) -> Duration {
    let mut rng = StdRng::seed_from_u64(seed);
    let options = WriteOptions { durability: Some(Durability::Async) };
    let start = Instant::now();
    for _ in 0..overwrites {
        let i = rng.gen_range(0..keys);
        db.put_with(&key(i), &value(rng.gen()), holt_core::Condition::None, options).expect("put");
    }
    start.elapsed() / overwrites as u32
}

fn main() {
    let mut keys = 1_000_000usize;
    let mut overwrites = 100_000usize;
    let mut dir: Option<PathBuf> = None;
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut cache_mb: Option<usize> = None;
    let mut ring_kb: Option<usize> = None;
    let mut memory_rounds = 1usize;
    let mut memory_only = false;
    let mut durable_only = false;
    let mut reuse: Option<PathBuf> = None;
    let mut rounds = 1usize;
    let mut direct_io = Options::default().direct_io;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // The two switches take no value; every other flag does.
        if flag == "--memory-only" {
            memory_only = true;
            continue;
        }
        if flag == "--durable-only" {
            durable_only = true;
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--keys" => keys = value.parse().expect("--keys N"),
            "--overwrites" => overwrites = value.parse().expect("--overwrites M"),
            "--dir" => dir = Some(PathBuf::from(value)),
            "--seed" => seed = value.parse().expect("--seed S"),
            "--cache-mb" => cache_mb = Some(value.parse().expect("--cache-mb MB")),
            "--ring-kb" => ring_kb = Some(value.parse().expect("--ring-kb KB")),
            "--reuse" => reuse = Some(PathBuf::from(value)),
            "--direct-io" => {
                direct_io = match value.as_str() {
                    "yes" => true,
                    "no" => false,
                    other => panic!("--direct-io yes|no, not {other}"),
                }
            }
            "--rounds" => rounds = value.parse::<usize>().expect("--rounds R").max(1),
            "--memory-rounds" => memory_rounds = value.parse::<usize>().expect("--memory-rounds R").max(1),
            other => panic!("unknown flag {other}"),
        }
    }
    println!(
        "overwrite_checkpoint: seed {seed} (rerun with --seed {seed}), {keys} keys, {overwrites} overwrites"
    );

    let options = Options {
        durability: Durability::Async,
        // Only the explicit checkpoint below runs: its cost is the deferred work measured.
        checkpoint_wal_bytes: 1 << 40,
        checkpoint_interval: Duration::from_secs(3600),
        memory_budget_bytes: cache_mb.map_or(Options::default().memory_budget_bytes, |mb| mb << 20),
        direct_io,
        wal_ring_bytes: ring_kb.map_or(Options::default().wal_ring_bytes, |kb| kb << 10),
        ..Options::default()
    };
    if let Some(dir) = reuse {
        std::fs::create_dir_all(&dir).expect("create --reuse DIR");
        durable(&dir, &options, keys, overwrites, seed, rounds);
        return;
    }
    let base = dir.unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(&base).expect("temp dir");
    let durable_put = (!memory_only).then(|| durable(tmp.path(), &options, keys, overwrites, seed, 1));

    if durable_only {
        return;
    }
    let mem = Db::open_in_memory(options).expect("open in memory");
    load(&mem, keys);
    let mut rounds: Vec<Duration> = (0..memory_rounds)
        .map(|round| {
            let put = overwrite(&mem, keys, overwrites, seed.wrapping_add(round as u64));
            if memory_rounds > 1 {
                println!("memory round {round}: put {:.3} µs", put.as_secs_f64() * 1e6);
            }
            put
        })
        .collect();
    rounds.sort();
    let put_mem = rounds[rounds.len() / 2];
    match durable_put {
        Some(put) => println!(
            "memory (no log, same tree): put {:.2} µs; the log adds {:.2} µs per put",
            put_mem.as_secs_f64() * 1e6,
            (put.as_secs_f64() - put_mem.as_secs_f64()) * 1e6
        ),
        None => {
            println!("memory (no log): put {:.3} µs (median of {memory_rounds})", put_mem.as_secs_f64() * 1e6)
        }
    }
}

/// The durable part: load, checkpoint, the puts, the checkpoint that makes them durable in
/// frames, a close and a reopen. Returns the mean time per put. A database already in `dir`
/// (`--reuse`) is not loaded again.
fn durable(
    dir: &std::path::Path,
    options: &Options,
    keys: usize,
    overwrites: usize,
    seed: u64,
    rounds: usize,
) -> Duration {
    let db = Db::open(dir, options.clone()).expect("open");
    let start = Instant::now();
    if db.stats().keys == 0 {
        load(&db, keys);
        db.checkpoint().expect("checkpoint after load");
    }
    let stats = db.stats();
    assert_eq!(stats.keys, keys as u64, "the database in the directory holds another key count");
    println!("durable: loaded in {:.1} s ({} frames)", start.elapsed().as_secs_f64(), stats.frames);

    let mut put = Duration::ZERO;
    for round in 0..rounds {
        let stats = db.stats();
        put = overwrite(&db, keys, overwrites, seed.wrapping_add(round as u64));
        let during = db.stats();
        let syncs = during.wal_syncs - stats.wal_syncs;
        println!(
            "durable, during the puts: {} frame reads ({} loads, {} unloaded writes), {} checkpoints \
             (cache {:.0} MB of a {:.0} MB budget)",
            during.frame_reads - stats.frame_reads,
            during.frame_loads - stats.frame_loads,
            during.frame_unloaded_writes - stats.frame_unloaded_writes,
            during.checkpoints - stats.checkpoints,
            during.cache_bytes as f64 / 1e6,
            options.memory_budget_bytes as f64 / 1e6
        );
        let start = Instant::now();
        db.checkpoint().expect("checkpoint");
        let finish = start.elapsed();
        let amortized = put.as_secs_f64() * 1e6 + finish.as_secs_f64() * 1e6 / overwrites as f64;
        let after = db.stats();
        println!(
            "durable: put {:.2} µs, checkpoint {:.3} s, amortized {:.2} µs (log syncs during the puts: {syncs}; \
             frames written since the round began: {} whole, {} deltas of which {} merged chains)",
            put.as_secs_f64() * 1e6,
            finish.as_secs_f64(),
            amortized,
            after.checkpoint_frames_whole - stats.checkpoint_frames_whole,
            after.checkpoint_frames_delta - stats.checkpoint_frames_delta,
            after.checkpoint_chains_merged - stats.checkpoint_chains_merged,
        );
    }
    db.close().expect("close");
    // Recovery after a clean close: the log the close's checkpoint left is read and checked
    // again, and the segment it continues in is written back and synced.
    let start = Instant::now();
    let db = Db::open(dir, options.clone()).expect("reopen");
    println!("durable: reopened in {:.0} ms", start.elapsed().as_secs_f64() * 1e3);
    db.close().expect("close");

    put
}

//! Group-commit scaling and checkpoint stalls on the real file system.
//!
//! `cargo run --release -p holt-core --example fsync_scaling -- [--keys N] [--seconds S]
//! [--runs R] [--writers 1,2,4,16,64] [--dir DIR] [--stall no] [--tasks yes]`
//!
//! 1. Loads N path-shaped keys (~50 B, 62 B JSON values; default 200,000) and checkpoints.
//! 2. For each writer count, R times (default 3): that many threads overwrite random keys with
//!    `Durability::Sync` for S seconds (default 2), every write its own commit. Prints the
//!    median rate over the runs, writes per fdatasync, CPU time per write and latencies.
//!    With `--tasks yes` the writers are tasks on a tokio runtime with one worker thread per
//!    core, each awaiting its writes (`Db::put_pending`) instead of blocking a thread.
//! 3. Checkpoint stall: 4 writers overwrite with `Async`, then with `Sync` durability while
//!    another thread runs checkpoints back to back; prints the longest gate hold
//!    (`Stats::checkpoint_stall_max_us`) and the longest write latency the writers saw,
//!    against the same workload without checkpoints. `--stall no` skips this phase.
//!
//! Every run prints its seed; `--seed` replays it. Numbers on a shared 2-core VM are noisy:
//! compare ratios measured in the same run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holt_core::{Batch, Db, Durability, Options, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Args {
    keys: usize,
    seconds: f64,
    runs: usize,
    writers: Vec<usize>,
    dir: Option<PathBuf>,
    seed: u64,
    stall: bool,
    tasks: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        keys: 200_000,
        seconds: 2.0,
        runs: 3,
        writers: vec![1, 2, 4, 16, 64],
        dir: None,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        stall: true,
        tasks: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--keys" => args.keys = value.parse().expect("--keys N"),
            "--seconds" => args.seconds = value.parse().expect("--seconds S"),
            "--runs" => args.runs = value.parse().expect("--runs R"),
            "--writers" => {
                args.writers = value.split(',').map(|w| w.parse().expect("--writers 1,2,4")).collect()
            }
            "--dir" => args.dir = Some(PathBuf::from(value)),
            "--seed" => args.seed = value.parse().expect("--seed N"),
            "--stall" => args.stall = value != "no",
            "--tasks" => args.tasks = value == "yes",
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// Key `i` of the data set: 5 buckets × 20 tenants, nested directories and flat objects.
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

/// CPU time (user + system) this process has used, from /proc (clock ticks of 10 ms).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok())).sum();
    Duration::from_millis(ticks * 10)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

struct Round {
    writes: u64,
    rate: f64,
    syncs: u64,
    cpu_us_per_write: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// `threads` writers overwrite random keys for `seconds` with `durability`.
fn round(db: &Arc<Db>, args: &Args, threads: usize, durability: Durability, seed: u64) -> Round {
    let stop = Arc::new(AtomicBool::new(false));
    let before = Before::now(db);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (db, stop) = (db.clone(), stop.clone());
            let keys = args.keys;
            std::thread::spawn(move || {
                let mut rng = writer_rng(seed, t);
                let options = WriteOptions { durability: Some(durability) };
                let mut latencies = Vec::with_capacity(1 << 14);
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.gen_range(0..keys);
                    let (k, v) = (key(i), value(rng.gen()));
                    let t0 = Instant::now();
                    db.put_with(&k, &v, holt_core::Condition::None, options).expect("put");
                    latencies.push(t0.elapsed());
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    stop.store(true, Ordering::Relaxed);
    let latencies = handles.into_iter().flat_map(|h| h.join().expect("writer")).collect();
    before.round(db, latencies)
}

/// `round` with `tasks` writers on `runtime`, each awaiting its `Sync` writes.
fn round_tasks(
    db: &Arc<Db>,
    args: &Args,
    runtime: &tokio::runtime::Runtime,
    tasks: usize,
    seed: u64,
) -> Round {
    let stop = Arc::new(AtomicBool::new(false));
    let before = Before::now(db);
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (db, stop) = (db.clone(), stop.clone());
            let keys = args.keys;
            runtime.spawn(async move {
                let mut rng = writer_rng(seed, t);
                let options = WriteOptions { durability: Some(Durability::Sync) };
                let mut latencies = Vec::with_capacity(1 << 14);
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.gen_range(0..keys);
                    let (k, v) = (key(i), value(rng.gen()));
                    let t0 = Instant::now();
                    db.put_pending(&k, &v, holt_core::Condition::None, options)
                        .expect("put")
                        .await
                        .expect("sync");
                    latencies.push(t0.elapsed());
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    stop.store(true, Ordering::Relaxed);
    let latencies = runtime.block_on(async {
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("writer task"));
        }
        all
    });
    before.round(db, latencies)
}

fn writer_rng(seed: u64, t: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// What a round measures from: its start, the process's CPU time and the log's sync count.
struct Before {
    start: Instant,
    cpu: Duration,
    syncs: u64,
}

impl Before {
    fn now(db: &Db) -> Before {
        Before { syncs: db.stats().wal_syncs, cpu: cpu_time(), start: Instant::now() }
    }

    fn round(self, db: &Db, mut latencies: Vec<Duration>) -> Round {
        let elapsed = self.start.elapsed().as_secs_f64();
        let cpu = cpu_time().saturating_sub(self.cpu);
        latencies.sort_unstable();
        let writes = latencies.len() as u64;
        Round {
            writes,
            rate: writes as f64 / elapsed,
            syncs: db.stats().wal_syncs - self.syncs,
            cpu_us_per_write: cpu.as_secs_f64() * 1e6 / writes.max(1) as f64,
            p50: percentile(&latencies, 0.5),
            p99: percentile(&latencies, 0.99),
            max: latencies.last().copied().unwrap_or_default(),
        }
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let args = parse_args();
    println!("fsync_scaling: seed {} (rerun with --seed {})", args.seed, args.seed);
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(&base).expect("temp dir");
    let options = Options {
        durability: Durability::Sync,
        // Keep background checkpoints out of the scaling rounds; phase 3 runs its own.
        checkpoint_wal_bytes: 1 << 40,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let db = Arc::new(Db::open(tmp.path(), options).expect("open"));

    let start = Instant::now();
    for chunk in (0..args.keys).collect::<Vec<_>>().chunks(1000) {
        let mut batch = Batch::new();
        for &i in chunk {
            batch.put(key(i), value(i as u64));
        }
        db.write_batch(&batch, WriteOptions { durability: Some(Durability::Async) }).expect("load");
    }
    db.checkpoint().expect("checkpoint after load");
    println!(
        "loaded {} keys in {:.1} s in {} (frames {})",
        args.keys,
        start.elapsed().as_secs_f64(),
        tmp.path().display(),
        db.stats().frames
    );

    let runtime = args.tasks.then(|| tokio::runtime::Builder::new_multi_thread().build().expect("runtime"));
    let kind = if args.tasks { "tasks awaiting" } else { "threads blocking in" };
    println!("sync overwrites by {kind} their writes, medians of {} runs of {} s:", args.runs, args.seconds);
    println!("writers | writes/s (runs)              | × 1 writer | writes/fdatasync | CPU µs/write | p50 µs | p99 µs");
    let mut single = None;
    for &threads in &args.writers {
        let rounds: Vec<Round> = (0..args.runs)
            .map(|r| {
                let seed = args.seed.wrapping_add((threads * 100 + r) as u64);
                match &runtime {
                    Some(runtime) => round_tasks(&db, &args, runtime, threads, seed),
                    None => round(&db, &args, threads, Durability::Sync, seed),
                }
            })
            .collect();
        let rate = median(rounds.iter().map(|r| r.rate).collect());
        let single_rate = *single.get_or_insert(rate);
        let per_sync = median(rounds.iter().map(|r| r.writes as f64 / r.syncs.max(1) as f64).collect());
        let cpu = median(rounds.iter().map(|r| r.cpu_us_per_write).collect());
        let p50 = median(rounds.iter().map(|r| r.p50.as_secs_f64() * 1e6).collect());
        let p99 = median(rounds.iter().map(|r| r.p99.as_secs_f64() * 1e6).collect());
        let runs: Vec<String> = rounds.iter().map(|r| format!("{:.0}", r.rate)).collect();
        println!(
            "{threads:7} | {rate:8.0} ({:<18}) | {:9.2}× | {per_sync:16.1} | {cpu:12.1} | {p50:6.0} | {p99:6.0}",
            runs.join(" "),
            rate / single_rate.max(1.0),
        );
    }

    // Phase 3: the longest writer stall while checkpoints run back to back, for async
    // writers (the gate hold) and for sync writers (who also wait for the log's fdatasync,
    // which a checkpoint's segment roll may delay).
    for durability in [Durability::Async, Durability::Sync].into_iter().filter(|_| args.stall) {
        let quiet = round(&db, &args, 4, durability, args.seed ^ 0xA5);
        let stall_before = db.stats().checkpoint_stall_max_us;
        let busy = Arc::new(AtomicBool::new(true));
        let checkpoints = Arc::new(AtomicU64::new(0));
        let checkpointer = {
            let (db, busy, checkpoints) = (db.clone(), busy.clone(), checkpoints.clone());
            std::thread::spawn(move || {
                while busy.load(Ordering::Relaxed) {
                    db.checkpoint().expect("checkpoint");
                    checkpoints.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let during = round(&db, &args, 4, durability, args.seed ^ 0x5A);
        busy.store(false, Ordering::Relaxed);
        checkpointer.join().expect("checkpointer");
        println!(
            "checkpoint stall, 4 {durability:?} writers: {} checkpoints in {} s; longest gate hold \
             {} µs (before this round: {} µs; a running maximum); writer latency max {} µs / \
             p99 {} µs (without checkpoints: max {} µs / p99 {} µs)",
            checkpoints.load(Ordering::Relaxed),
            args.seconds,
            db.stats().checkpoint_stall_max_us,
            stall_before,
            during.max.as_micros(),
            during.p99.as_micros(),
            quiet.max.as_micros(),
            quiet.p99.as_micros(),
        );
    }
    drop(runtime);
    // Every writer thread has been joined, so this is the last handle.
    if let Ok(db) = Arc::try_unwrap(db) {
        db.close().expect("close");
    }
}

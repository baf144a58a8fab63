//! Point gets beyond the memory budget, two engines side by side in one process, in pairs of
//! rounds (the order flipping every pair; the figure is the median over the pairs, and the
//! ratio the median of the per-pair ratios):
//!
//! - `cold_get`: the engine's files dropped from the page cache (`posix_fadvise`), the engine
//!   opened with a `--cold-cache-mb` budget (16 MiB), then `--gets` random gets timed from the
//!   first one (the engine's own start-up reads are not timed: it is opened first);
//! - `warm_beyond_get`: the engine's files read once into the page cache, the engine opened
//!   with a budget of 1/8 of its bytes on disk, one untimed pass over the same keys, then the
//!   gets timed: data eight times the budget, served from memory the process does not own.
//!
//! Both engines read the same keys in the same order. Per get latencies give p50 and p99.
//! With `HOLT_BENCH_STATS` set, the engine's own counters (`Engine::stats_line`) are printed
//! to stderr before and after each timed pass.
//!
//! `--op scan100` times prefix scans instead of gets, in the same two regimes: the first 100
//! keys (with values) under a random `bucket/tenant/dir-NNN/` prefix, as `engine_bench`'s
//! `scan100` does (a listing without a delimiter).
//!
//! `--op overwrite` times async overwrites of random keys in the warm regime only (after the
//! untimed pass of gets over the same keys), then the engine's deferred work (`finish`: a
//! checkpoint, a memtable flush): the mean is amortized over both, as `engine_bench`'s
//! overwrite phase reports it, and the put mean and the finish time are given beside it. The
//! rounds change the databases (new values of existing keys, other keys every pair), so later
//! pairs overwrite a database earlier pairs overwrote. A checkpoint writes most frames as small deltas and, one round in
//! several, rewrites those whose chain is full: `mean_over_rounds_us` amortizes over the
//! rounds run (a dozen cover such a cycle at 10M keys), where the median round does not.
//!
//! usage: paired_get [--engines A,B] [--keys N] [--pairs P] [--gets G] [--seed S]
//!                   [--dir PATH] [--cold-cache-mb MB] [--reuse] [--op get|scan100|overwrite]
//!                   [--only cold|warm]

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use holt_benches::data::{self, DataSet, Rng};
use holt_benches::engines::{self, BenchResult, Engine, OpenOptions, WriteMode};
use holt_benches::measure::{disk_bytes, evict_page_cache, median_f64, proc_status_bytes, quantile};
use holt_benches::workloads;

/// The same allocator as `engine_bench`, so the figures are comparable.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    engines: [String; 2],
    keys: u64,
    pairs: usize,
    gets: usize,
    seed: u64,
    dir: PathBuf,
    cold_cache_mb: usize,
    /// Use the databases a previous run left in `dir` instead of loading them again.
    reuse: bool,
    op: Op,
    /// Only the regime whose name starts with this (`cold`, `warm`), if given.
    only: Option<String>,
}

/// What a round times.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    /// The first `SCAN_LIMIT` keys under a directory prefix.
    Scan,
    /// An async put of a new value, then `finish` once after the round.
    Overwrite,
}

const SCAN_LIMIT: usize = 100;

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        engines: ["holt-core".into(), "lmdb".into()],
        keys: 1_000_000,
        pairs: 5,
        gets: 20_000,
        seed: 0x5EED_2026,
        dir: std::env::temp_dir().join("holt-paired-get"),
        cold_cache_mb: 16,
        reuse: false,
        op: Op::Get,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--engines" => {
                let v = value()?;
                let (x, y) = v.split_once(',').ok_or("--engines takes two names, A,B")?;
                a.engines = [x.to_string(), y.to_string()];
            }
            "--keys" => a.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            "--pairs" => a.pairs = value()?.parse().map_err(|e| format!("--pairs: {e}"))?,
            "--gets" => a.gets = value()?.parse().map_err(|e| format!("--gets: {e}"))?,
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--dir" => a.dir = PathBuf::from(value()?),
            "--cold-cache-mb" => {
                a.cold_cache_mb = value()?.parse().map_err(|e| format!("--cold-cache-mb: {e}"))?
            }
            "--reuse" => a.reuse = true,
            "--only" => a.only = Some(value()?),
            "--op" => {
                a.op = match value()?.as_str() {
                    "get" => Op::Get,
                    "scan100" => Op::Scan,
                    "overwrite" => Op::Overwrite,
                    other => {
                        return Err(format!("--op: unknown operation {other} (get, scan100, overwrite)"))
                    }
                }
            }
            "--help" | "-h" => {
                println!(
                    "paired_get [--engines A,B] [--keys N] [--pairs P] [--gets G] [--seed S] [--dir PATH] \
                     [--cold-cache-mb MB] [--reuse] [--op get|scan100|overwrite] [--only cold|warm]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.pairs == 0 || a.gets == 0 {
        return Err("--pairs and --gets must be at least 1".into());
    }
    Ok(a)
}

/// Loads the main data set into `name` in random order and closes it (its deferred work
/// done), unless `--reuse` finds it loaded.
fn prepare(name: &str, args: &Args, set: &DataSet) -> BenchResult<PathBuf> {
    let dir = args.dir.join(name);
    let done = dir.join(".loaded");
    if args.reuse && done.exists() {
        return Ok(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = Rng::new(args.seed);
    let order = data::permutation(set.len(), &mut rng);
    let engine =
        engines::open(name, &dir, OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: 1 << 30 })?;
    let t = workloads::load(&*engine, set, &order)?;
    engine.finish()?;
    drop(engine);
    std::fs::write(&done, b"")?;
    eprintln!(
        "{name}: loaded {} keys in {:.1} s, {} B on disk",
        set.len(),
        t.as_secs_f64(),
        disk_bytes(&dir)
    );
    Ok(dir)
}

/// Reads every file under `dir` once, so the page cache holds them.
fn warm_page_cache(dir: &Path) -> BenchResult<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            warm_page_cache(&path)?;
        } else {
            std::io::copy(&mut std::fs::File::open(&path)?, &mut std::io::sink())?;
        }
    }
    Ok(())
}

/// Times each operation on `keys` (keys to get or overwrite, or prefixes to scan); returns
/// the latencies in ns and, for overwrites, the time `finish` took after them (else 0).
/// `generation` makes an overwrite's values new.
fn timed_ops(engine: &dyn Engine, op: Op, keys: &[Vec<u8>], generation: u64) -> BenchResult<(Vec<u64>, u64)> {
    let mut out = Vec::with_capacity(128);
    let mut listed = Vec::with_capacity(SCAN_LIMIT);
    let mut samples = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        if op == Op::Overwrite {
            data::value(i as u64, generation, &mut out);
        }
        let start = Instant::now();
        let found = match op {
            Op::Get => engine.get(k, &mut out)?,
            Op::Scan => {
                engine.scan(k, SCAN_LIMIT, &mut listed)?;
                !listed.is_empty() && listed.iter().all(|(key, _)| key.starts_with(k))
            }
            Op::Overwrite => {
                engine.put(k, &out)?;
                true
            }
        };
        samples.push(start.elapsed().as_nanos() as u64);
        if !found {
            return Err(format!("nothing found at {}", String::from_utf8_lossy(k)).into());
        }
    }
    let mut finish_ns = 0;
    if op == Op::Overwrite {
        let start = Instant::now();
        engine.finish()?;
        finish_ns = start.elapsed().as_nanos() as u64;
    }
    Ok((samples, finish_ns))
}

#[derive(Default)]
struct Figures {
    /// Per operation, `finish` included (amortized over the round's operations).
    mean_us: Vec<f64>,
    p50_us: Vec<f64>,
    p99_us: Vec<f64>,
    finish_s: Vec<f64>,
}

impl Figures {
    fn push(&mut self, (mut samples, finish_ns): (Vec<u64>, u64)) -> f64 {
        let total_ns = samples.iter().sum::<u64>() + finish_ns;
        let mean = total_ns as f64 / samples.len() as f64 / 1e3;
        self.mean_us.push(mean);
        self.p50_us.push(quantile(&mut samples, 0.5) as f64 / 1e3);
        self.p99_us.push(quantile(&mut samples, 0.99) as f64 / 1e3);
        self.finish_s.push(finish_ns as f64 / 1e9);
        mean
    }
    /// The mean over every round's operations: for overwrites, the cost amortized over the
    /// rounds' deferred work, which a chain of deltas makes uneven (most rounds write small
    /// deltas, one in several rewrites frames whole), so the median round understates it.
    fn mean_over_rounds(&self) -> f64 {
        self.mean_us.iter().sum::<f64>() / self.mean_us.len().max(1) as f64
    }
    fn medians(&mut self) -> serde_json::Value {
        json!({
            "mean_us": median_f64(&mut self.mean_us),
            "p50_us": median_f64(&mut self.p50_us),
            "p99_us": median_f64(&mut self.p99_us),
            "finish_s": median_f64(&mut self.finish_s),
        })
    }
}

/// One round of `regime` for the engine at `dir`; returns what `timed_ops` returns.
fn round(
    name: &str,
    dir: &Path,
    regime: &str,
    args: &Args,
    keys: &[Vec<u8>],
    generation: u64,
) -> BenchResult<(Vec<u64>, u64)> {
    let cold = regime.starts_with("cold");
    let cache_bytes = if cold {
        evict_page_cache(dir);
        args.cold_cache_mb << 20
    } else {
        warm_page_cache(dir)?;
        (disk_bytes(dir) / 8) as usize
    };
    let engine = engines::open(name, dir, OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes })?;
    if !cold {
        // Untimed pass: the budget's share of frames admitted.
        let warm_op = if args.op == Op::Overwrite { Op::Get } else { args.op };
        timed_ops(&*engine, warm_op, keys, 0)?;
    }
    let show_stats = |when: &str| {
        if let Some(line) = std::env::var_os("HOLT_BENCH_STATS").and_then(|_| engine.stats_line()) {
            eprintln!("{name} {regime} {when}: {line}");
        }
    };
    show_stats("before");
    let timed = timed_ops(&*engine, args.op, keys, generation)?;
    show_stats("after");
    drop(engine);
    Ok(timed)
}

fn run(args: &Args) -> BenchResult<()> {
    let set = DataSet::new(args.keys);
    let dirs = [prepare(&args.engines[0], args, &set)?, prepare(&args.engines[1], args, &set)?];
    let (op_name, regimes): (_, &[&str]) = match args.op {
        Op::Get => ("get", &["cold_get", "warm_beyond_get"]),
        Op::Scan => ("scan100", &["cold_scan100", "warm_beyond_scan100"]),
        Op::Overwrite => ("overwrite", &["warm_beyond_overwrite"]),
    };
    for &regime in regimes.iter().filter(|r| args.only.as_ref().is_none_or(|o| r.starts_with(o.as_str()))) {
        let mut figures = [Figures::default(), Figures::default()];
        let mut ratios = Vec::with_capacity(args.pairs);
        for pair in 0..args.pairs {
            // New keys every pair, the same for both engines.
            let mut rng = Rng::new(args.seed ^ (pair as u64 + 1) << 20);
            let keys: Vec<Vec<u8>> = match args.op {
                Op::Get | Op::Overwrite => {
                    (0..args.gets).map(|_| set.key_vec(rng.below(set.len()))).collect()
                }
                Op::Scan => (0..args.gets).map(|_| set.random_dir_prefix(&mut rng)).collect(),
            };
            let first = pair % 2;
            let mut means = [0.0; 2];
            for i in [first, 1 - first] {
                let timed = round(&args.engines[i], &dirs[i], regime, args, &keys, pair as u64 + 2)?;
                means[i] = figures[i].push(timed);
            }
            eprintln!("{regime} pair {pair}: {:.2} / {:.2} µs", means[0], means[1]);
            ratios.push(means[0] / means[1]);
        }
        println!(
            "{}",
            json!({
                "regime": regime,
                "op": op_name,
                "keys": args.keys,
                "gets_per_round": args.gets,
                "pairs": args.pairs,
                "cold_cache_mb": args.cold_cache_mb,
                "engines": args.engines,
                "disk_bytes": [disk_bytes(&dirs[0]), disk_bytes(&dirs[1])],
                "mean_over_rounds_us": [figures[0].mean_over_rounds(), figures[1].mean_over_rounds()],
                "ratio_of_means_over_rounds": figures[0].mean_over_rounds() / figures[1].mean_over_rounds(),
                "medians": [figures[0].medians(), figures[1].medians()],
                "ratio_mean_first_over_second": median_f64(&mut ratios),
                "peak_rss_bytes": proc_status_bytes("VmHWM"),
            })
        );
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("paired_get: {e}");
        std::process::exit(1);
    }
}

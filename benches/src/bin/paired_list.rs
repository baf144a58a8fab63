//! Listing ratios measured side by side in one process: two engines hold the same data, and
//! each listing page is timed in pairs of short rounds, one round per engine, back to back,
//! the order flipping every pair. The ratio of the two rounds' medians is taken per pair, and
//! the figure is the median of those ratios.
//!
//! Why: this machine has slow spells lasting from a fraction of a second to several seconds,
//! in which the same page takes ~1.5x longer (docs/benchmarks.md). `engine_bench` runs
//! each engine in its own process, a minute apart, so a ratio of two medians there can
//! compare one engine inside a spell with the other outside it. Two rounds of a pair lie
//! within a few hundred milliseconds of each other, so they mostly see the same machine.
//!
//! usage: paired_list [--engines A,B] [--keys N] [--pairs P] [--seed S] [--dir PATH]
//!                    [--cache-mb MB] [--quick]
//! Hot point gets are paired the same way (each round: at least 20 ms and 10,000 gets over
//! the same 100,000 random keys; the figure per round is the mean time per get), once where
//! `engine_bench` takes them (the main data set just loaded) and once more at the end.
//!
//! Every timed round follows an untimed warm-up of the same engine (`WARMUP`): without it the
//! engine that ran second in a pair started on caches the other engine had just filled, and
//! per-pair get ratios alternated by about 13% with the order. The rows also give the median
//! ratio of the pairs each engine began, so a remaining order effect shows.
//! Prints one JSON object per listing, and one for the gets, on stdout. With `HOLT_BENCH_STATS`
//! set, the engines' own counters (`Engine::stats_line`) are printed to stderr around the
//! last gets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use holt_benches::data::{self, DataSet, Rng, WideSet};
use holt_benches::engines::{self, BenchResult, Engine, OpenOptions, Page, WriteMode};
use holt_benches::measure::{median_f64, quantile};
use holt_benches::workloads::{self, PageShape};

/// The same allocator as `engine_bench`, so the figures are comparable.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A round lasts at least this long and takes at least `ROUND_MIN_SAMPLES` samples.
const ROUND_MIN: Duration = Duration::from_millis(20);
const ROUND_MIN_SAMPLES: usize = 30;
/// The untimed warm-up before each timed round: at least this long, and at least
/// `WARMUP_SAMPLES` pages or `WARMUP_GETS` gets.
const WARMUP: Duration = Duration::from_millis(20);
const WARMUP_SAMPLES: usize = 5;
const WARMUP_GETS: usize = 10_000;
/// Random overwrites between loading the main data set and closing it, as in `engine_bench`.
const OVERWRITES: usize = 100_000;
/// Random keys the point gets cycle through, and the fewest gets in a round.
const GET_KEYS: usize = 100_000;
const GET_ROUND_MIN: usize = 10_000;

struct Args {
    engines: [String; 2],
    keys: u64,
    pairs: usize,
    seed: u64,
    dir: PathBuf,
    cache_mb: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        engines: ["holt-core".into(), "lmdb".into()],
        keys: 1_000_000,
        pairs: 41,
        seed: 0x5EED_2026,
        dir: std::env::temp_dir().join("holt-paired-list"),
        cache_mb: 256,
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
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--dir" => a.dir = PathBuf::from(value()?),
            "--cache-mb" => a.cache_mb = value()?.parse().map_err(|e| format!("--cache-mb: {e}"))?,
            "--quick" => a.pairs = 5,
            "--help" | "-h" => {
                println!(
                    "paired_list [--engines A,B] [--keys N] [--pairs P] [--seed S] [--dir PATH] \
                     [--cache-mb MB] [--quick]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.pairs == 0 {
        return Err("--pairs must be at least 1".into());
    }
    Ok(a)
}

/// Opens `name` and loads the main data set in its random order (the state `engine_bench`
/// takes hot gets in); returns the engine, its directory and the generator to go on with.
fn load_main(name: &str, args: &Args, set: &DataSet) -> BenchResult<(Box<dyn Engine>, PathBuf, Rng)> {
    let dir = args.dir.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = Rng::new(args.seed);
    let order = data::permutation(set.len(), &mut rng);
    let engine = engines::open(name, &dir, options(args))?;
    let t = workloads::load(&*engine, set, &order)?;
    eprintln!("{name}: loaded in {:.1} s", t.as_secs_f64());
    Ok((engine, dir, rng))
}

/// Brings a loaded engine to the state `engine_bench` lists the wide root in: 100k random
/// overwrites with their deferred work, a close and a reopen, then the wide data set added.
fn add_wide(
    name: &str,
    args: &Args,
    (engine, dir, mut rng): (Box<dyn Engine>, PathBuf, Rng),
    set: &DataSet,
    wide: &WideSet,
) -> BenchResult<Box<dyn Engine>> {
    workloads::overwrite(&*engine, set, &mut rng, OVERWRITES.min(set.len() as usize))?;
    drop(engine);
    let engine = engines::open(name, &dir, options(args))?;
    let w = workloads::load_wide(&*engine, wide, &mut rng)?;
    eprintln!("{name}: wide set added in {:.1} s", w.as_secs_f64());
    Ok(engine)
}

fn options(args: &Args) -> OpenOptions {
    OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: args.cache_mb << 20 }
}

/// One round: the page listed until both minimums are met; returns the median in µs and the
/// page's shape (checked equal on every sample).
fn round(engine: &dyn Engine, prefix: &[u8], out: &mut Page) -> BenchResult<(f64, PageShape)> {
    let begun = Instant::now();
    let mut warm = 0;
    while warm < WARMUP_SAMPLES || begun.elapsed() < WARMUP {
        engine.list(prefix, b'/', 1000, out)?;
        warm += 1;
    }
    let mut samples = Vec::with_capacity(256);
    let mut shape = None;
    let begun = Instant::now();
    while samples.len() < ROUND_MIN_SAMPLES || begun.elapsed() < ROUND_MIN {
        samples.push(workloads::sample_listing(engine, prefix, 1000, out, &mut shape)?);
    }
    Ok((quantile(&mut samples, 0.5) as f64 / 1e3, shape.unwrap_or_default()))
}

fn run(args: &Args) -> BenchResult<()> {
    let set = DataSet::new(args.keys);
    let wide = WideSet::beside(set.len());
    let [x, y] = &args.engines;
    let (a, b) = (load_main(x, args, &set)?, load_main(y, args, &set)?);
    // Hot gets where `engine_bench` takes them (the main set just loaded), and again on the
    // state the listings run in (the wide set's keys added).
    println!(
        "{}",
        row("hot_get", args, &set, &wide, PageShape::default(), paired_gets(args, &set, [&*a.0, &*b.0])?)
    );
    let (a, b) = (add_wide(x, args, a, &set, &wide)?, add_wide(y, args, b, &set, &wide)?);
    let engines: [&dyn Engine; 2] = [&*a, &*b];
    let mut out = Page::default();
    for (name, prefix) in [
        ("list_wide_root", workloads::WIDE_ROOT_PREFIX),
        ("list_key_heavy", workloads::KEY_HEAVY_PREFIX),
        ("list_bucket_root", workloads::BUCKET_ROOT_PREFIX),
    ] {
        let mut medians: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut ratios = Vec::with_capacity(args.pairs);
        let mut shapes: [Option<PageShape>; 2] = [None, None];
        for pair in 0..args.pairs {
            let first = pair % 2;
            let mut this = [0.0; 2];
            for i in [first, 1 - first] {
                let (p50, shape) = round(engines[i], prefix, &mut out)?;
                this[i] = p50;
                medians[i].push(p50);
                shapes[i] = Some(shape);
            }
            ratios.push(this[1] / this[0]);
        }
        // Both engines must have listed the same page, or the ratio compares different work.
        if shapes[0] != shapes[1] {
            return Err(format!("{name}: the engines listed different pages: {shapes:?}").into());
        }
        let shape = shapes[0].unwrap_or_default();
        println!("{}", row(name, args, &set, &wide, shape, (medians, ratios)));
    }
    let show_stats = |when: &str| {
        for (name, engine) in args.engines.iter().zip(engines) {
            if let Some(line) = std::env::var_os("HOLT_BENCH_STATS").and_then(|_| engine.stats_line()) {
                eprintln!("{name} {when} the gets after the wide set: {line}");
            }
        }
    };
    show_stats("before");
    let gets = paired_gets(args, &set, engines)?;
    show_stats("after");
    println!("{}", row("hot_get_wide_added", args, &set, &wide, PageShape::default(), gets));
    Ok(())
}

/// Hot point gets, the same random keys for both engines, in pairs of rounds: each round
/// reads on from where the engine's last round stopped, after one warm-up pass over all of
/// them. Returns each engine's per-round means (µs per get) and the per-pair ratios.
fn paired_gets(
    args: &Args,
    set: &DataSet,
    engines: [&dyn Engine; 2],
) -> BenchResult<([Vec<f64>; 2], Vec<f64>)> {
    let mut rng = Rng::new(args.seed ^ 0x6E7);
    let keys: Vec<Vec<u8>> = (0..GET_KEYS).map(|_| set.key_vec(rng.below(set.len()))).collect();
    let mut value = Vec::with_capacity(128);
    let mut next = [0usize; 2];
    for engine in engines {
        for k in &keys {
            if !engine.get(k, &mut value)? {
                return Err(format!("key {} missing", String::from_utf8_lossy(k)).into());
            }
        }
    }
    let mut per_get: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut ratios = Vec::with_capacity(args.pairs);
    for pair in 0..args.pairs {
        let first = pair % 2;
        let mut this = [0.0; 2];
        for i in [first, 1 - first] {
            let mut get_next = || -> BenchResult<()> {
                let k = &keys[next[i] % keys.len()];
                next[i] += 1;
                match engines[i].get(k, &mut value) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(format!("key {} missing", String::from_utf8_lossy(k)).into()),
                    Err(e) => Err(e),
                }
            };
            let (mut warm, begun) = (0usize, Instant::now());
            while warm < WARMUP_GETS || begun.elapsed() < WARMUP {
                get_next()?;
                warm += 1;
            }
            let (mut n, begun) = (0usize, Instant::now());
            while n < GET_ROUND_MIN || begun.elapsed() < ROUND_MIN {
                get_next()?;
                n += 1;
            }
            this[i] = begun.elapsed().as_nanos() as f64 / n as f64 / 1e3;
            per_get[i].push(this[i]);
        }
        ratios.push(this[1] / this[0]);
    }
    Ok((per_get, ratios))
}

/// One result line: the two engines' medians over the pairs and the pairs' ratios.
fn row(
    name: &str,
    args: &Args,
    set: &DataSet,
    wide: &WideSet,
    shape: PageShape,
    (mut medians, ratios): ([Vec<f64>; 2], Vec<f64>),
) -> serde_json::Value {
    let mut sorted = ratios.clone();
    // Pair `p` began with engine `p % 2`.
    let mut by_first: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for (p, &r) in ratios.iter().enumerate() {
        by_first[p % 2].push(r);
    }
    json!({
        "listing": name,
        "keys": set.len(),
        "wide_keys_per_prefix": wide.per_prefix,
        "engines": args.engines,
        "pairs": args.pairs,
        "prefixes": shape.prefixes,
        "entry_keys": shape.keys,
        "p50_us": [median_f64(&mut medians[0]), median_f64(&mut medians[1])],
        "ratio_median": median_f64(&mut sorted),
        "ratio_min": ratios.iter().copied().fold(f64::INFINITY, f64::min),
        "ratio_max": ratios.iter().copied().fold(0.0, f64::max),
        "ratio_median_by_first": [median_f64(&mut by_first[0]), median_f64(&mut by_first[1])],
        "ratios": ratios,
    })
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("paired_list: {e}");
            std::process::exit(2);
        }
    };
    let result = run(&args);
    let _ = std::fs::remove_dir_all(&args.dir);
    if let Err(e) = result {
        eprintln!("paired_list: {e}");
        std::process::exit(1);
    }
}

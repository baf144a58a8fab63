//! One engine, one process: loads the data set and runs every phase, printing one JSON object
//! on stdout. Running each engine in its own process makes its peak resident memory its own.
//!
//! usage: engine_bench --engine NAME [--keys N] [--seed S] [--dir PATH] [--quick]
//!                     [--cache-mb MB] [--cold-cache-mb MB]
//!
//! With `HOLT_BENCH_STATS=S` the engine's own counters are printed to stderr every `S`
//! seconds. With `HOLT_BENCH_COUNT_HEAP=1` the allocator counts live heap bytes, and each phase
//! reports its peak (`{phase}_peak_live_heap_bytes`) beside its peak RssAnon.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use holt_benches::data::{self, DataSet, Rng, WideSet};
use holt_benches::engines::{self, BenchResult, Engine, OpenOptions, WriteMode};
use holt_benches::measure::{disk_bytes, evict_page_cache, proc_status_bytes, RssPeaks};
use holt_benches::workloads::{self, Latency, ListTiming, PageShape};

/// Every engine runs in this binary, so every engine gets the same allocator. glibc's malloc
/// made a listing page (thousands of small vectors freed by the caller) consolidate its free
/// lists on a heap fragmented by a million live nodes; services pick a modern allocator, and
/// the gateway uses this one too.
#[global_allocator]
static ALLOCATOR: holt_benches::measure::CountingMiMalloc = holt_benches::measure::CountingMiMalloc;

struct Args {
    engine: String,
    keys: u64,
    seed: u64,
    dir: PathBuf,
    quick: bool,
    cache_mb: usize,
    cold_cache_mb: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        engine: String::new(),
        keys: 1_000_000,
        seed: 0x5EED_2026,
        dir: std::env::temp_dir().join("holt-engine-bench"),
        quick: false,
        cache_mb: 256,
        cold_cache_mb: 16,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--engine" => args.engine = value()?,
            "--keys" => args.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--dir" => args.dir = PathBuf::from(value()?),
            "--cache-mb" => args.cache_mb = value()?.parse().map_err(|e| format!("--cache-mb: {e}"))?,
            "--cold-cache-mb" => {
                args.cold_cache_mb = value()?.parse().map_err(|e| format!("--cold-cache-mb: {e}"))?
            }
            "--quick" => args.quick = true,
            "--help" | "-h" => {
                println!(
                    "engine_bench --engine NAME [--keys N] [--seed S] [--dir PATH] [--quick] \
                     [--cache-mb MB] [--cold-cache-mb MB]\nengines: {:?}",
                    engines::ENGINE_NAMES
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.engine.is_empty() {
        return Err("--engine is required".into());
    }
    Ok(args)
}

/// Collects metrics and per-phase failures; a failed phase never hides the others' numbers.
struct Report {
    metrics: Map<String, Value>,
    errors: Map<String, Value>,
    skipped: Map<String, Value>,
    /// Resident memory by kind, phase by phase (`{phase}_peak_anon_bytes`,
    /// `{phase}_peak_file_bytes`); `peak_anon_bytes` is the largest heap of any phase.
    rss: RssPeaks,
}

impl Report {
    fn set(&mut self, name: &str, value: impl Into<Value>) {
        self.metrics.insert(name.to_string(), value.into());
    }
    fn latency(&mut self, name: &str, l: Latency) {
        self.set(&format!("{name}_p50_us"), l.p50_us);
        self.set(&format!("{name}_p99_us"), l.p99_us);
        self.set(&format!("{name}_mean_us"), l.mean_us);
    }
    fn list_timing(&mut self, name: &str, t: ListTiming) {
        self.latency(name, t.latency);
        self.set(&format!("{name}_round_p50_min_us"), t.round_p50_min_us);
        self.set(&format!("{name}_round_p50_max_us"), t.round_p50_max_us);
    }
    fn shape(&mut self, name: &str, s: PageShape) {
        self.set(&format!("{name}_prefixes"), s.prefixes as u64);
        self.set(&format!("{name}_keys"), s.keys as u64);
        self.set(&format!("{name}_digest"), format!("{:016x}", s.digest));
    }
    /// Runs one phase, turning an error or a panic into a recorded failure.
    fn phase<T>(&mut self, name: &str, body: impl FnOnce(&mut Report) -> BenchResult<T>) -> Option<T> {
        eprintln!("[{}] phase {name}", chrono_now());
        self.rss.take();
        let outcome = catch_unwind(AssertUnwindSafe(|| body(self)));
        let peaks = self.rss.take();
        self.set(&format!("{name}_peak_anon_bytes"), peaks.anon);
        self.set(&format!("{name}_peak_file_bytes"), peaks.file);
        if let Some(live) = peaks.live {
            self.set(&format!("{name}_peak_live_heap_bytes"), live);
        }
        let before = self.metrics.get("peak_anon_bytes").and_then(Value::as_u64).unwrap_or(0);
        self.set("peak_anon_bytes", peaks.anon.max(before));
        match outcome {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                eprintln!("phase {name} failed: {e}");
                self.errors.insert(name.to_string(), Value::String(e.to_string()));
                None
            }
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_string());
                eprintln!("phase {name} panicked: {msg}");
                self.errors.insert(name.to_string(), Value::String(format!("panicked: {msg}")));
                None
            }
        }
    }
}

fn chrono_now() -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format!("{:02}:{:02}:{:02}Z", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("engine_bench: {e}");
            std::process::exit(2);
        }
    };
    if std::env::var("HOLT_BENCH_COUNT_HEAP").as_deref() == Ok("1") {
        holt_benches::measure::count_live_heap();
    }
    let mut report =
        Report { metrics: Map::new(), errors: Map::new(), skipped: Map::new(), rss: RssPeaks::start() };
    run(&args, &mut report);
    let out = json!({
        "engine": args.engine,
        "keys": DataSet::new(args.keys).len(),
        "seed": args.seed,
        "quick": args.quick,
        "cache_mb": args.cache_mb,
        "cold_cache_mb": args.cold_cache_mb,
        "metrics": report.metrics,
        "errors": report.errors,
        "skipped": report.skipped,
    });
    println!("{out}");
}

/// With `HOLT_BENCH_STATS=S`, prints the engine's counters (`Engine::stats_line`) to stderr
/// every `S` seconds until the engine is dropped.
fn watch_stats(engine: &Arc<dyn Engine>) {
    let Some(every) = std::env::var("HOLT_BENCH_STATS").ok().and_then(|s| s.parse::<f64>().ok()) else {
        return;
    };
    let engine = Arc::downgrade(engine);
    std::thread::spawn(move || loop {
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
        let Some(engine) = engine.upgrade() else { return };
        if let Some(line) = engine.stats_line() {
            eprintln!("[{}] stats {line}", chrono_now());
        }
    });
}

fn run(args: &Args, report: &mut Report) {
    let set = DataSet::new(args.keys);
    eprintln!("engine {} keys {} seed {:#x}", args.engine, set.len(), args.seed);
    let mut rng = Rng::new(args.seed);
    let order = data::permutation(set.len(), &mut rng);
    let dir = args.dir.join(&args.engine);
    let _ = std::fs::remove_dir_all(&dir);
    let persistent = engines::is_persistent(&args.engine);
    let scale = if args.quick { 5 } else { 1 };
    let rounds = workloads::list_rounds(args.quick);
    let main_options = OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: args.cache_mb << 20 };
    let wide = WideSet::beside(set.len());

    let Some(engine) = report.phase("open", |_| engines::open(&args.engine, &dir, main_options)) else {
        return;
    };
    let engine: Arc<dyn Engine> = Arc::from(engine);
    report.set("logical_bytes", set.logical_bytes());
    watch_stats(&engine);

    let loaded = report.phase("load", |r| {
        let t = workloads::load(&*engine, &set, &order)?;
        r.set("load_s", t.as_secs_f64());
        Ok(())
    });
    if loaded.is_none() {
        return;
    }
    report.phase("hot_get", |r| {
        // Warm-up pass, then the measured pass over different random keys.
        workloads::point_get(&*engine, &set, &mut rng, 20_000 / scale)?;
        let ns = workloads::point_get(&*engine, &set, &mut rng, 200_000 / scale)?;
        r.set("hot_get_ns", ns);
        Ok(())
    });
    report.phase("scan100", |r| {
        let l = workloads::prefix_scan(&*engine, &set, &mut rng, 100, 2000 / scale)?;
        r.latency("scan100", l);
        Ok(())
    });
    report.phase("list_key_heavy", |r| {
        let (t, s) = workloads::list_page(&*engine, workloads::KEY_HEAVY_PREFIX, 1000, 300 / scale, rounds)?;
        r.list_timing("list_key_heavy", t);
        r.shape("list_key_heavy", s);
        Ok(())
    });
    report.phase("list_bucket_root", |r| {
        let (t, s) =
            workloads::list_page(&*engine, workloads::BUCKET_ROOT_PREFIX, 1000, 300 / scale, rounds)?;
        r.list_timing("list_bucket_root", t);
        r.shape("list_bucket_root", s);
        Ok(())
    });
    report.phase("overwrite_async", |r| {
        let o = workloads::overwrite(&*engine, &set, &mut rng, 100_000 / scale)?;
        r.set("overwrite_async_put_us", o.put_us);
        r.set("overwrite_async_finish_s", o.finish_s);
        r.set("overwrite_async_amortized_us", o.amortized_us);
        Ok(())
    });
    report.phase("mix", |r| {
        let us = workloads::metadata_mix(&*engine, &set, &mut rng, 50_000 / scale)?;
        r.set("mix_us", us);
        Ok(())
    });
    if let Some(b) = proc_status_bytes("VmHWM") {
        report.set("peak_rss_bytes", b);
    }
    if let Some(b) = proc_status_bytes("VmRSS") {
        report.set("rss_after_reads_bytes", b);
    }

    if !persistent {
        for phase in ["disk", "fsync", "cold_get"] {
            report.skipped.insert(phase.into(), "in-memory engine: no files, no log".into());
        }
        wide_phase(report, &engine, &wide, &mut rng, scale);
        return;
    }
    // Close (the engine's own shutdown work runs here), then measure the files.
    drop(engine);
    report.set("disk_bytes", disk_bytes(&dir));

    report.phase("fsync", |r| {
        let engine: Arc<dyn Engine> = Arc::from(engines::open(
            &args.engine,
            &dir,
            OpenOptions { mode: WriteMode::Fsync, cache_bytes: args.cache_mb << 20 },
        )?);
        let seconds = if args.quick { 1 } else { 3 };
        // Untimed warm-up, as before `hot_get`: the database was just reopened, and the
        // single writer, measured first, would otherwise pay every cold read of the reopen
        // (for holt-core, loading each of its ~380 frames once: a 5 ms p99 that made the
        // 64 ÷ 1 writer ratio look better than the fsync path earns).
        workloads::point_get(&*engine, &set, &mut rng, 20_000 / scale)?;
        for threads in [1usize, 2, 4, 16, 64] {
            let (rate, l) = workloads::fsync_writers(
                Arc::clone(&engine),
                &set,
                args.seed ^ threads as u64,
                threads,
                Duration::from_secs(seconds),
                200_000,
            )?;
            r.set(&format!("fsync_w{threads}_ops_s"), rate);
            r.set(&format!("fsync_w{threads}_p50_us"), l.p50_us);
            r.set(&format!("fsync_w{threads}_p99_us"), l.p99_us);
        }
        // The same writes from tasks that await their durability, where the engine offers it.
        for tasks in [1usize, 16, 64] {
            let measured = workloads::fsync_tasks(
                Arc::clone(&engine),
                &set,
                args.seed ^ (tasks as u64) << 8,
                tasks,
                Duration::from_secs(seconds),
                200_000,
            )?;
            let Some((rate, l)) = measured else { break };
            r.set(&format!("fsync_t{tasks}_ops_s"), rate);
            r.set(&format!("fsync_t{tasks}_p50_us"), l.p50_us);
            r.set(&format!("fsync_t{tasks}_p99_us"), l.p99_us);
        }
        engine.finish()?;
        Ok(())
    });

    report.phase("cold_get", |r| {
        evict_page_cache(&dir);
        let engine = engines::open(
            &args.engine,
            &dir,
            OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: args.cold_cache_mb << 20 },
        )?;
        let ns = workloads::point_get(&*engine, &set, &mut rng, 20_000 / scale)?;
        r.set("cold_get_ns", ns);
        Ok(())
    });

    let Some(engine) = report.phase("reopen", |_| engines::open(&args.engine, &dir, main_options)) else {
        return;
    };
    wide_phase(report, &Arc::from(engine), &wide, &mut rng, scale);
}

/// Adds the wide data set (1000 prefixes under `bucket-wide/`) and lists its root.
fn wide_phase(report: &mut Report, engine: &Arc<dyn Engine>, wide: &WideSet, rng: &mut Rng, scale: usize) {
    report.phase("list_wide_root", |r| {
        let t = workloads::load_wide(&**engine, wide, rng)?;
        r.set("wide_load_s", t.as_secs_f64());
        r.set("wide_keys_per_prefix", wide.per_prefix);
        let rounds = workloads::list_rounds(scale > 1);
        let (t, s) = workloads::list_page(&**engine, workloads::WIDE_ROOT_PREFIX, 1000, 300 / scale, rounds)?;
        r.list_timing("list_wide_root", t);
        r.shape("list_wide_root", s);
        Ok(())
    });
}

//! Micro benchmarks under criterion at a smaller size (default 100k keys; override with
//! HOLT_BENCH_MICRO_KEYS) so it stays quick: point get, prefix scan of 100, and the three
//! delimiter listings (key-heavy, bucket root, wide root). Every engine is loaded once, in its
//! own temporary directory, with the same keys in the same seeded order.
//!
//! Every engine gets the same cache (its block cache, or holt-core's memory budget): 256 MiB,
//! or HOLT_BENCH_MICRO_CACHE_MB. At 1M keys the wide set adds 2M more, and holt-core's frames
//! no longer fit 256 MiB: its point gets then read evicted frames back from disk.
//!
//! Run: `cargo bench --bench micro` (from benches/). HOLT_BENCH_ENGINES=a,b limits the engines.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

use holt_benches::data::{self, DataSet, Rng, WideSet};
use holt_benches::engines::{self, Engine, OpenOptions, WriteMode};
use holt_benches::workloads;

const SEED: u64 = 0x5EED_2026;

/// The allocator of every engine process (`src/bin/engine_bench.rs`): the same for all.
/// Under glibc's malloc, each scan's hundred small vectors went through its consolidation of
/// a heap fragmented by millions of live nodes, which was most of a scan's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Loaded {
    name: String,
    engine: Box<dyn Engine>,
}

fn load_engines(set: &DataSet, wide: &WideSet) -> Vec<Loaded> {
    let wanted: Vec<String> = std::env::var("HOLT_BENCH_ENGINES")
        .map(|s| s.split(',').map(str::to_string).collect())
        .unwrap_or_else(|_| engines::ENGINE_NAMES.iter().map(|s| s.to_string()).collect());
    let root = std::env::temp_dir().join(format!("holt-micro-{}", std::process::id()));
    eprintln!("micro: {} keys, seed {SEED:#x}, data under {}", set.len(), root.display());
    let cache_mb: usize =
        std::env::var("HOLT_BENCH_MICRO_CACHE_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(256);
    eprintln!("micro: cache {cache_mb} MiB per engine");
    let mut rng = Rng::new(SEED);
    let order = data::permutation(set.len(), &mut rng);
    let mut loaded = Vec::new();
    for name in wanted {
        let dir = root.join(&name);
        let options = OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: cache_mb << 20 };
        // An engine that is not ready (an error or a panic while opening or loading) is
        // reported and left out; the others still run.
        let attempt = catch_unwind(AssertUnwindSafe(|| -> Result<Box<dyn Engine>, String> {
            let engine = engines::open(&name, &dir, options).map_err(|e| e.to_string())?;
            workloads::load(&*engine, set, &order).map_err(|e| e.to_string())?;
            workloads::load_wide(&*engine, wide, &mut Rng::new(SEED)).map_err(|e| e.to_string())?;
            Ok(engine)
        }));
        match attempt {
            Ok(Ok(engine)) => loaded.push(Loaded { name, engine }),
            Ok(Err(e)) => eprintln!("micro: skipping {name}: {e}"),
            Err(_) => eprintln!("micro: skipping {name}: panicked while opening or loading"),
        }
    }
    loaded
}

fn micro(c: &mut Criterion) {
    let keys = std::env::var("HOLT_BENCH_MICRO_KEYS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let set = DataSet::new(keys);
    let wide = WideSet::beside(set.len());
    let loaded = load_engines(&set, &wide);

    let mut group = c.benchmark_group("get");
    for l in &loaded {
        let mut rng = Rng::new(SEED ^ 1);
        let mut key = Vec::new();
        let mut out = Vec::new();
        group.bench_function(BenchmarkId::from_parameter(&l.name), |b| {
            b.iter(|| {
                set.key(rng.below(set.len()), &mut key);
                l.engine.get(&key, &mut out).expect("get")
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("scan100");
    for l in &loaded {
        let mut rng = Rng::new(SEED ^ 2);
        let mut out = Vec::new();
        group.bench_function(BenchmarkId::from_parameter(&l.name), |b| {
            b.iter(|| {
                let prefix = set.random_dir_prefix(&mut rng);
                l.engine.scan(&prefix, 100, &mut out).expect("scan");
                out.len()
            })
        });
    }
    group.finish();

    for (group_name, prefix) in [
        ("list_key_heavy", workloads::KEY_HEAVY_PREFIX),
        ("list_bucket_root", workloads::BUCKET_ROOT_PREFIX),
        ("list_wide_root", workloads::WIDE_ROOT_PREFIX),
    ] {
        let mut group = c.benchmark_group(group_name);
        for l in &loaded {
            let mut out = engines::Page::default();
            group.bench_function(BenchmarkId::from_parameter(&l.name), |b| {
                b.iter(|| {
                    l.engine.list(prefix, b'/', 1000, &mut out).expect("list");
                    out.len()
                })
            });
        }
        group.finish();
    }
    drop(loaded);
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("holt-micro-{}", std::process::id())));
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = micro
}
criterion_main!(benches);

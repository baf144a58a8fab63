//! The measured phases. Each takes an open engine and returns plain numbers; the per-engine
//! process (`engine_bench`) strings them together and criterion reuses the read phases.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::data::{self, DataSet, Rng, WideSet};
use crate::engines::{BenchResult, Engine, Page};
use crate::measure::{micros, quantile};

/// Keys per load transaction (the usual bulk-load batching for every engine).
pub const LOAD_BATCH: usize = 1000;

/// The key-heavy page: 50 common prefixes then flat keys.
pub const KEY_HEAVY_PREFIX: &[u8] = b"bucket-042/tenant-07/";
/// A bucket root: 20 tenant prefixes, each hiding `keys / 100` keys.
pub const BUCKET_ROOT_PREFIX: &[u8] = b"bucket-042/";
/// The wide root: 1000 prefixes, each hiding `WideSet::per_prefix` keys.
pub const WIDE_ROOT_PREFIX: &[u8] = b"bucket-wide/";

/// Loads `count` items produced by `item(i, key, value)` in `LOAD_BATCH` transactions.
fn load_items(
    engine: &dyn Engine,
    count: usize,
    mut item: impl FnMut(usize, &mut Vec<u8>, &mut Vec<u8>),
) -> BenchResult<Duration> {
    let start = Instant::now();
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(LOAD_BATCH);
    for i in 0..count {
        let mut k = Vec::with_capacity(64);
        let mut v = Vec::with_capacity(data::VALUE_LEN);
        item(i, &mut k, &mut v);
        batch.push((k, v));
        if batch.len() == LOAD_BATCH {
            engine.load_batch(&batch)?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        engine.load_batch(&batch)?;
    }
    Ok(start.elapsed())
}

/// Bulk load of the main data set in `order` (a permutation of key indices), deferred work
/// (`finish`) included.
pub fn load(engine: &dyn Engine, set: &DataSet, order: &[u32]) -> BenchResult<Duration> {
    let start = Instant::now();
    load_items(engine, order.len(), |i, k, v| {
        let index = order[i] as u64;
        set.key(index, k);
        data::value(index, 0, v);
    })?;
    engine.finish()?;
    Ok(start.elapsed())
}

/// Bulk load of the wide data set (in a scrambled but fixed order), deferred work included.
pub fn load_wide(engine: &dyn Engine, wide: &WideSet, rng: &mut Rng) -> BenchResult<Duration> {
    let order = data::permutation(wide.len(), rng);
    let start = Instant::now();
    load_items(engine, order.len(), |i, k, v| {
        let index = order[i] as u64;
        wide.key(index, k);
        data::value(index, 0, v);
    })?;
    engine.finish()?;
    Ok(start.elapsed())
}

/// Mean nanoseconds per point get of `count` random existing keys; fails on a missing key.
pub fn point_get(engine: &dyn Engine, set: &DataSet, rng: &mut Rng, count: usize) -> BenchResult<f64> {
    let keys: Vec<Vec<u8>> = (0..count).map(|_| set.key_vec(rng.below(set.len()))).collect();
    let mut out = Vec::with_capacity(128);
    let start = Instant::now();
    for k in &keys {
        if !engine.get(k, &mut out)? {
            return Err(format!("key {} missing", String::from_utf8_lossy(k)).into());
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / count.max(1) as f64)
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

fn latency(samples_ns: &mut [u64]) -> Latency {
    let mean = samples_ns.iter().sum::<u64>() as f64 / samples_ns.len().max(1) as f64;
    Latency {
        p50_us: quantile(samples_ns, 0.5) as f64 / 1e3,
        p99_us: quantile(samples_ns, 0.99) as f64 / 1e3,
        mean_us: mean / 1e3,
    }
}

/// Prefix scans of `limit` entries starting at random directory prefixes.
pub fn prefix_scan(
    engine: &dyn Engine,
    set: &DataSet,
    rng: &mut Rng,
    limit: usize,
    count: usize,
) -> BenchResult<Latency> {
    // Each directory holds at least floor(nested keys per tenant / DIRS) keys.
    let at_least = limit.min((set.len() / 100 * 8 / 10 / data::DIRS) as usize).max(1);
    let mut out = Vec::with_capacity(limit);
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let prefix = set.random_dir_prefix(rng);
        let start = Instant::now();
        engine.scan(&prefix, limit, &mut out)?;
        samples.push(start.elapsed().as_nanos() as u64);
        if out.len() < at_least || out.len() > limit || !out.iter().all(|(k, _)| k.starts_with(&prefix)) {
            return Err(format!(
                "scan returned {} entries, expected {at_least}..={limit} under the prefix",
                out.len()
            )
            .into());
        }
    }
    Ok(latency(&mut samples))
}

/// The shape of one listing page, for RESULTS.md and the cross-engine agreement check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageShape {
    pub prefixes: usize,
    pub keys: usize,
    /// FNV-1a over the names in order: equal across engines when they list the same page.
    pub digest: u64,
}

pub fn page_shape(page: &Page) -> PageShape {
    let mut shape = PageShape { digest: 0xcbf2_9ce4_8422_2325, ..PageShape::default() };
    for (name, _, prefix) in page.iter() {
        if prefix {
            shape.prefixes += 1;
        } else {
            shape.keys += 1;
        }
        for &b in name.iter().chain(std::iter::once(&0u8)) {
            shape.digest = (shape.digest ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    shape
}

/// Rounds a listing's samples are taken in, and the pause between two rounds.
///
/// This machine has slow spells lasting from a fraction of a second to several seconds, in
/// which the same listing takes ~1.5x longer; they come and go within one process, with the
/// thread pinned to either CPU and with an engine that runs no thread of its own
/// (docs/benchmarks.md). A page taken 300 times back to back lasts 3 ms
/// for a fast engine and 100 ms for a slow one, so one engine's figure could fall wholly
/// inside a spell and the next engine's wholly outside. Spreading the samples over rounds a
/// pause apart gives every engine the same exposure to spells, whatever its speed.
pub const LIST_ROUNDS: usize = 10;
pub const LIST_ROUND_PAUSE: Duration = Duration::from_millis(100);

/// A listing's latency over all its samples, and the spread of its rounds' medians.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListTiming {
    pub latency: Latency,
    pub round_p50_min_us: f64,
    pub round_p50_max_us: f64,
}

/// How many rounds `list_page` takes for a full run or a `--quick` one.
pub fn list_rounds(quick: bool) -> usize {
    if quick {
        2
    } else {
        LIST_ROUNDS
    }
}

/// Lists `prefix` once (delimiter `/`) into `out` and returns the time it took in ns; the
/// page's shape must equal `shape`, which the first sample sets.
pub fn sample_listing(
    engine: &dyn Engine,
    prefix: &[u8],
    limit: usize,
    out: &mut Page,
    shape: &mut Option<PageShape>,
) -> BenchResult<u64> {
    let start = Instant::now();
    engine.list(prefix, b'/', limit, out)?;
    let took = start.elapsed().as_nanos() as u64;
    let this = page_shape(out);
    if *shape.get_or_insert(this) != this {
        return Err("the same listing returned different pages".into());
    }
    Ok(took)
}

/// Repeats one delimiter listing `count` times in each of `rounds` rounds
/// (`LIST_ROUND_PAUSE` apart); returns its latency over all samples and the page's shape.
pub fn list_page(
    engine: &dyn Engine,
    prefix: &[u8],
    limit: usize,
    count: usize,
    rounds: usize,
) -> BenchResult<(ListTiming, PageShape)> {
    let mut out = Page::default();
    let mut samples = Vec::with_capacity(count * rounds);
    let mut round_p50s = Vec::with_capacity(rounds);
    let mut shape = None;
    for round in 0..rounds {
        if round > 0 {
            std::thread::sleep(LIST_ROUND_PAUSE);
        }
        let first = samples.len();
        for _ in 0..count {
            samples.push(sample_listing(engine, prefix, limit, &mut out, &mut shape)?);
        }
        // Sorting the round's samples in place is harmless: `latency` sorts them all anyway.
        round_p50s.push(quantile(&mut samples[first..], 0.5) as f64 / 1e3);
    }
    let timing = ListTiming {
        latency: latency(&mut samples),
        round_p50_min_us: round_p50s.iter().copied().fold(f64::INFINITY, f64::min),
        round_p50_max_us: round_p50s.iter().copied().fold(0.0, f64::max),
    };
    Ok((timing, shape.unwrap_or_default()))
}

/// Random overwrites in the engine's current write mode, then `finish`.
#[derive(Debug, Clone, Copy)]
pub struct Overwrite {
    /// Mean time per put, deferred work excluded.
    pub put_us: f64,
    /// The deferred work done by `finish` at the end.
    pub finish_s: f64,
    /// (puts + finish) / count: the honest per-write cost.
    pub amortized_us: f64,
}

pub fn overwrite(engine: &dyn Engine, set: &DataSet, rng: &mut Rng, count: usize) -> BenchResult<Overwrite> {
    let mut k = Vec::with_capacity(64);
    let mut v = Vec::with_capacity(data::VALUE_LEN);
    let start = Instant::now();
    for n in 0..count {
        let i = rng.below(set.len());
        set.key(i, &mut k);
        data::value(i, 1 + n as u64, &mut v);
        engine.put(&k, &v)?;
    }
    let puts = start.elapsed();
    engine.finish()?;
    let total = start.elapsed();
    Ok(Overwrite {
        put_us: micros(puts) / count.max(1) as f64,
        finish_s: (total - puts).as_secs_f64(),
        amortized_us: micros(total) / count.max(1) as f64,
    })
}

/// The metadata mix: 45% head, 20% overwrite, 10% list (100 entries of a directory), 10%
/// rollup (100 entries at a tenant root), 10% create+delete, 5% rename. Returns the mean
/// microseconds per operation with `finish` included.
pub fn metadata_mix(engine: &dyn Engine, set: &DataSet, rng: &mut Rng, count: usize) -> BenchResult<f64> {
    let mut k = Vec::with_capacity(64);
    let mut v = Vec::with_capacity(data::VALUE_LEN);
    let mut out = Vec::with_capacity(128);
    let mut page = Page::default();
    // Renamed keys move to a `.renamed-N` name; remember where each one went so that later
    // operations on it use its current name.
    let mut renamed: std::collections::HashMap<u64, Vec<u8>> = std::collections::HashMap::new();
    let start = Instant::now();
    for n in 0..count as u64 {
        let i = rng.below(set.len());
        match renamed.get(&i) {
            Some(name) => k.clone_from(name),
            None => set.key(i, &mut k),
        }
        let dice = rng.below(100);
        if dice < 45 {
            if !engine.get(&k, &mut out)? {
                return Err(format!("mix: head of {} found nothing", String::from_utf8_lossy(&k)).into());
            }
        } else if dice < 65 {
            data::value(i, 1_000_000 + n, &mut v);
            engine.put(&k, &v)?;
        } else if dice < 75 {
            let mut prefix = set.random_dir_prefix(rng);
            prefix.extend_from_slice(format!("sub-{}/", rng.below(data::SUBS)).as_bytes());
            engine.list(&prefix, b'/', 100, &mut page)?;
        } else if dice < 85 {
            let prefix = set.random_tenant_prefix(rng);
            engine.list(&prefix, b'/', 100, &mut page)?;
        } else if dice < 95 {
            let mut fresh = k.clone();
            fresh.extend_from_slice(format!(".tmp-{n}").as_bytes());
            data::value(i, n, &mut v);
            engine.put(&fresh, &v)?;
            engine.delete(&fresh)?;
        } else {
            let mut dst = set.key_vec(i);
            dst.extend_from_slice(format!(".renamed-{n}").as_bytes());
            if !engine.rename(&k, &dst)? {
                return Err(format!("mix: rename source {} missing", String::from_utf8_lossy(&k)).into());
            }
            renamed.insert(i, dst);
        }
    }
    engine.finish()?;
    let mean_us = micros(start.elapsed()) / count.max(1) as f64;
    // Untimed: move renamed keys back so later phases find the whole data set again.
    for (i, name) in renamed {
        if !engine.rename(&name, &set.key_vec(i))? {
            return Err(format!("mix: renamed key {} vanished", String::from_utf8_lossy(&name)).into());
        }
    }
    engine.finish()?;
    Ok(mean_us)
}

/// One fsync writer: its own key and value buffers and latency samples, the phase's shared
/// stop flag and write count. The same for writer threads and writer tasks.
struct FsyncWriter {
    set: DataSet,
    rng: Rng,
    key: Vec<u8>,
    value: Vec<u8>,
    samples: Vec<u64>,
    n: u64,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    max_ops: u64,
}

impl FsyncWriter {
    fn new(
        set: DataSet,
        seed: u64,
        w: usize,
        stop: &Arc<AtomicBool>,
        done: &Arc<AtomicU64>,
        max_ops: u64,
    ) -> Self {
        FsyncWriter {
            set,
            rng: Rng::new(seed ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9)),
            key: Vec::with_capacity(64),
            value: Vec::with_capacity(data::VALUE_LEN),
            samples: Vec::new(),
            n: 0,
            stop: Arc::clone(stop),
            done: Arc::clone(done),
            max_ops,
        }
    }

    /// Fills `key` and `value` with the next overwrite; false once the phase is over.
    fn next(&mut self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        let i = self.rng.below(self.set.len());
        self.set.key(i, &mut self.key);
        data::value(i, 10_000_000 + self.n, &mut self.value);
        true
    }

    /// Records a write that started at `t0` and has returned.
    fn wrote(&mut self, t0: Instant) {
        self.samples.push(t0.elapsed().as_nanos() as u64);
        self.n += 1;
        if self.done.fetch_add(1, Ordering::Relaxed) + 1 >= self.max_ops {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Bounded in time: lets the writers run until the deadline (or until they reached max_ops,
/// whichever is first), then stops them.
fn run_writers(stop: &AtomicBool, start: Instant, duration: Duration) {
    while !stop.load(Ordering::Relaxed) && start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
}

/// Writes per second since `start` and the latency of every write, from each writer's
/// samples; the first error if any writer failed.
fn fsync_result(start: Instant, writers: Vec<BenchResult<Vec<u64>>>) -> BenchResult<(f64, Latency)> {
    let elapsed = start.elapsed();
    let mut all = Vec::new();
    for samples in writers {
        all.extend(samples?);
    }
    let rate = all.len() as f64 / elapsed.as_secs_f64();
    Ok((rate, latency(&mut all)))
}

/// `fsync_writers` with `tasks` writers that are tasks on a multi-thread tokio runtime (one
/// worker per core), each awaiting its write's durability (`Engine::put_awaiting`) instead of
/// blocking a thread. `None` for engines that can only block.
pub fn fsync_tasks(
    engine: Arc<dyn Engine>,
    set: &DataSet,
    seed: u64,
    tasks: usize,
    duration: Duration,
    max_ops: u64,
) -> BenchResult<Option<(f64, Latency)>> {
    if engine.put_awaiting(b"", b"").is_none() {
        return Ok(None);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let engine = Arc::clone(&engine);
            let mut w = FsyncWriter::new(*set, seed, t, &stop, &done, max_ops);
            runtime.spawn(async move {
                while w.next() {
                    let t0 = Instant::now();
                    let write = engine
                        .put_awaiting(&w.key, &w.value)
                        .ok_or("the engine stopped offering awaited writes")?;
                    write.await?;
                    w.wrote(t0);
                }
                BenchResult::Ok(w.samples)
            })
        })
        .collect();
    run_writers(&stop, start, duration);
    let writers = runtime.block_on(async {
        let mut writers = Vec::new();
        for h in handles {
            writers.push(h.await.unwrap_or_else(|_| Err("a writer task panicked".into())));
        }
        writers
    });
    fsync_result(start, writers).map(Some)
}

/// Concurrent fsync-durable overwrites: `threads` writers for `duration` (each write its own
/// commit). Returns writes per second and the latency of every write.
pub fn fsync_writers(
    engine: Arc<dyn Engine>,
    set: &DataSet,
    seed: u64,
    threads: usize,
    duration: Duration,
    max_ops: u64,
) -> BenchResult<(f64, Latency)> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let engine = Arc::clone(&engine);
            let mut w = FsyncWriter::new(*set, seed, t, &stop, &done, max_ops);
            std::thread::spawn(move || -> BenchResult<Vec<u64>> {
                while w.next() {
                    let t0 = Instant::now();
                    engine.put(&w.key, &w.value)?;
                    w.wrote(t0);
                }
                Ok(w.samples)
            })
        })
        .collect();
    run_writers(&stop, start, duration);
    let writers = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("a writer thread panicked".into())))
        .collect();
    fsync_result(start, writers)
}

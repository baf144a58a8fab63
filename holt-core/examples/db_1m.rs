//! End-to-end measurement of a directory-backed database at 1M path-shaped keys, with the
//! data set and phases of `benches/` (engine_bench), but holt-core only, so the engine can be
//! profiled without building the peers. Run with
//! `cargo run --release -p holt-core --example db_1m [keys] [dir]`.
//!
//! Modes (third argument): none = every phase; `keep` = keep the directory; `cold` = only the
//! cold reads on a kept directory; `wide` = only the rollup-heavy page on a kept directory;
//! `wide-mem` = rollup-heavy and key-heavy pages on an in-memory tree built in random order,
//! through `Db::list` and through `Db::list_with` with a visitor that copies nothing (the walk
//! alone), then hot gets; environment: `ONLY=wide|key|get` one page or the gets only,
//! `LIMIT` page size (1000), `WIDE_PER_PREFIX` keys under each wide prefix (2000), `WALK_REPS`
//! repetitions of the walk alone (3000, more for profiling), `SORTED=1` insert in key order.
//!
//! Phases: load in random order (batches of 1,000, async log, checkpoint included) → hot get
//! → key-heavy list → 100k random overwrites + checkpoint → clean close and bytes on disk
//! (st_blocks) → reopen with a 16 MiB cache, cold gets → add the
//! wide data set and list its root. Keys: `bucket-0NN/tenant-NN/dir-NNN/sub-N/file-NNNNNNNN.bin`
//! (80%) and `…/object-NNNNNNNN.json` (20%), 62 B JSON values, as in benches/src/data.rs.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use holt_core::{Batch, Db, Durability, ListRequest, Options};

/// SplitMix64, the same generator as the benchmark's, so the order is reproducible.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

fn key(total: u64, i: u64) -> Vec<u8> {
    let per_tenant = total / 100;
    let (tenant_index, j) = (i / per_tenant, i % per_tenant);
    let (bucket, tenant) = (40 + tenant_index / 20, tenant_index % 20);
    if j < per_tenant * 8 / 10 {
        let (dir, sub) = (j % 50, (j / 50) % 4);
        format!("bucket-{bucket:03}/tenant-{tenant:02}/dir-{dir:03}/sub-{sub}/file-{i:08}.bin").into_bytes()
    } else {
        format!("bucket-{bucket:03}/tenant-{tenant:02}/object-{i:08}.json").into_bytes()
    }
}

fn value(i: u64, generation: u64) -> Vec<u8> {
    let v = format!(
        "{{\"etag\":\"{:016x}\",\"size\":{:10},\"gen\":{:2}}}",
        i.wrapping_mul(0x9E37),
        i,
        generation % 100
    );
    v.into_bytes()
}

/// A `usize` from the environment, or `default`.
fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A delimited page under `prefix`, values included, of `LIMIT` entries (1,000 by default).
fn page_request(prefix: &[u8]) -> ListRequest<'_> {
    ListRequest {
        prefix,
        delimiter: b"/",
        limit: env_usize("LIMIT", 1000),
        with_values: true,
        ..Default::default()
    }
}

/// Median time of `reps` runs of `run`, in µs.
fn p50_us(reps: usize, mut run: impl FnMut()) -> f64 {
    let samples = (0..reps)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(samples)
}

/// Times a page under `prefix` through `Db::list` (owned entries), through `Db::list_with`
/// with a visitor that copies nothing (the walk alone), and with a visitor that copies each
/// entry into one flat page (what the engine bench's harness does). `ONLY` skips the other
/// page; `WALK_REPS` sets the repetitions of the last two.
fn time_pages(db: &Db, name: &str, prefix: &[u8], what: &str) {
    if std::env::var("ONLY").is_ok_and(|o| !name.starts_with(&o)) {
        return;
    }
    let request = page_request(prefix);
    let reps = env_usize("WALK_REPS", 3000);
    let owned = p50_us(3000, || drop(db.list(&request).expect("list")));
    println!("list {name} p50 ({what}): {owned:.1} us");
    let mut bytes = 0usize;
    let walk = p50_us(reps, || {
        db.list_with(&request, &mut |e| bytes += e.name().len()).expect("list");
    });
    println!("list {name} p50 ({what}), walk only: {walk:.1} us ({bytes})");
    let (mut page, mut ends) = (Vec::<u8>::new(), Vec::<(usize, usize)>::new());
    let copied = p50_us(reps, || {
        page.clear();
        ends.clear();
        db.list_with(&request, &mut |e| {
            page.extend_from_slice(e.name());
            let name_end = page.len();
            if let holt_core::ListEntry::Key { value, .. } = e {
                page.extend_from_slice(value);
            }
            ends.push((name_end, page.len()));
        })
        .expect("list");
    });
    println!("list {name} p50 ({what}), copied into a flat page: {copied:.1} us ({})", ends.len());
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let meta = entry.metadata().expect("metadata");
        println!(
            "  {:<28} len {:>12} allocated {:>12}",
            entry.file_name().to_string_lossy(),
            meta.len(),
            meta.blocks() * 512
        );
        total += meta.blocks() * 512;
    }
    total
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let total: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let dir = std::env::args().nth(2).unwrap_or_else(|| "/tmp/holt-db-1m".into());
    let dir = Path::new(&dir);
    // Third argument `cold`: only the cold-read phase, on a database a previous run left with
    // `keep` (for profiling a cache miss).
    let mode = std::env::args().nth(3).unwrap_or_default();
    if mode == "cold" {
        cold_gets(dir, total, &mut Rng(7));
        return;
    }
    if mode == "wide-mem" {
        // The rollup-heavy listing on nodes inserted in random order (in memory, no log).
        let db = Db::open_in_memory(Options::default()).expect("open");
        let mut rng = Rng(0x5EED_2026);
        let per_prefix: u64 =
            std::env::var("WIDE_PER_PREFIX").map_or(2000, |v| v.parse().expect("WIDE_PER_PREFIX"));
        let mut ids: Vec<u64> = (0..total + 1000 * per_prefix).collect();
        if std::env::var("SORTED").is_err() {
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        for chunk in ids.chunks(1000) {
            let mut b = Batch::new();
            for &i in chunk {
                if i < total {
                    b.put(key(total, i), value(i, 0));
                } else {
                    let w = i - total;
                    b.put(format!("bucket-wide/user-{:04}/file-{:06}.bin", w % 1000, w / 1000), value(w, 0));
                }
            }
            db.write_batch(&b, Default::default()).expect("batch");
        }
        for (name, prefix) in [("wide root", &b"bucket-wide/"[..]), ("key-heavy", b"bucket-042/tenant-07/")] {
            time_pages(&db, name, prefix, "in memory, random insertion");
        }
        if std::env::var("ONLY").is_err() || std::env::var("ONLY").is_ok_and(|o| o == "get") {
            // Hot point reads: medians of 9 rounds of 100,000 random keys.
            let keys: Vec<Vec<u8>> = (0..100_000).map(|_| key(total, rng.below(total))).collect();
            let per_get = p50_us(9, || {
                for k in &keys {
                    assert!(db.get(k).expect("get").is_some());
                }
            }) / keys.len() as f64;
            println!("hot get p50 (in memory, random insertion): {per_get:.3} us");
        }
        return;
    }
    if mode == "wide" {
        // Only the listings, repeated, on a kept directory (frames decoded from disk).
        let db =
            Db::open(dir, Options { memory_budget_bytes: 256 << 20, ..Options::default() }).expect("open");
        let _ = db.list(&ListRequest { limit: usize::MAX, ..Default::default() }).expect("warm");
        for (name, prefix) in [("wide root", &b"bucket-wide/"[..]), ("key-heavy", b"bucket-042/tenant-07/")] {
            time_pages(&db, name, prefix, "reopened");
        }
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    let seed = 0x5EED_2026u64;
    println!("keys {total}, dir {}, seed {seed}", dir.display());
    let mut rng = Rng(seed);
    let mut order: Vec<u32> = (0..total as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let logical: u64 = (0..total).map(|i| key(total, i).len() as u64 + value(i, 0).len() as u64).sum();
    let options = |budget: usize| Options {
        durability: Durability::Async,
        memory_budget_bytes: budget,
        ..Options::default()
    };
    let db = Db::open(dir, options(256 << 20)).expect("open");
    let start = Instant::now();
    for chunk in order.chunks(1000) {
        let mut b = Batch::new();
        for &i in chunk {
            b.put(key(total, u64::from(i)), value(u64::from(i), 0));
        }
        db.write_batch(&b, Default::default()).expect("batch");
    }
    db.checkpoint().expect("checkpoint");
    println!("load: {:.2} s", start.elapsed().as_secs_f64());

    let probes: Vec<u64> = (0..200_000).map(|_| rng.below(total)).collect();
    let probe_keys: Vec<Vec<u8>> = probes.iter().map(|&i| key(total, i)).collect();
    for k in probe_keys.iter().take(20_000) {
        db.get(k).expect("get");
    }
    let start = Instant::now();
    for k in &probe_keys {
        assert!(db.get(k).expect("get").is_some());
    }
    println!("hot get: {:.2} us", start.elapsed().as_secs_f64() * 1e6 / probe_keys.len() as f64);

    let time_list = |db: &Db, prefix: &[u8]| {
        let request = page_request(prefix);
        let mut n = 0;
        let us = p50_us(300, || n = db.list(&request).expect("list").items.len());
        (us, n)
    };
    let (us, n) = time_list(&db, b"bucket-042/tenant-07/");
    println!("list key-heavy p50: {us:.0} us ({n} entries)");
    let (us, n) = time_list(&db, b"bucket-042/");
    println!("list bucket root p50: {us:.1} us ({n} entries)");

    let start = Instant::now();
    for _ in 0..100_000 {
        let i = rng.below(total);
        db.put(&key(total, i), &value(i, 1)).expect("put");
    }
    db.checkpoint().expect("checkpoint");
    println!("overwrite amortized: {:.2} us", start.elapsed().as_secs_f64() * 1e6 / 100_000.0);
    println!("peak RSS (after load, reads, lists, overwrites): {} MB", status_kib("VmHWM:") / 1024);
    db.close().expect("close");
    let disk = disk_bytes(dir);
    println!(
        "disk: {:.1} MB = {:.2}x logical ({:.1} MB)",
        disk as f64 / 1e6,
        disk as f64 / logical as f64,
        logical as f64 / 1e6
    );

    cold_gets(dir, total, &mut rng);

    let db = Db::open(dir, options(256 << 20)).expect("reopen");
    // As in the engine benchmark (benches/src/data.rs, `WideSet::beside`).
    let wide = 1000 * (total / 500).clamp(1, 2000);
    let mut wide_order: Vec<u64> = (0..wide).collect();
    for i in (1..wide_order.len()).rev() {
        wide_order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for chunk in wide_order.chunks(1000) {
        let mut b = Batch::new();
        for &i in chunk {
            b.put(format!("bucket-wide/user-{:04}/file-{:06}.bin", i % 1000, i / 1000), value(i, 0));
        }
        db.write_batch(&b, Default::default()).expect("batch");
    }
    db.checkpoint().expect("checkpoint");
    // Touch every frame first: the reopened database loads frames on first use.
    for k in probe_keys.iter().take(20_000) {
        db.get(k).expect("get");
    }
    let (us, n) = time_list(&db, b"bucket-wide/");
    println!("list wide root p50: {us:.0} us ({n} entries)");
    time_pages(&db, "wide root", b"bucket-wide/", "durable, added after a reopen");
    let (us, n) = time_list(&db, b"bucket-042/tenant-07/");
    println!("list key-heavy after reopen p50: {us:.0} us ({n} entries)");
    let start = Instant::now();
    for k in &probe_keys {
        assert!(db.get(k).expect("get").is_some());
    }
    println!("hot get after reopen: {:.2} us", start.elapsed().as_secs_f64() * 1e6 / probe_keys.len() as f64);
    db.close().expect("close");
    if mode != "keep" {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn cold_gets(dir: &Path, total: u64, rng: &mut Rng) {
    let options =
        Options { durability: Durability::Async, memory_budget_bytes: 16 << 20, ..Options::default() };
    // The page cache is not dropped here (that takes unsafe code or root): this measures
    // the engine's own cost of a cache miss (read from the page cache + decode).
    let db = Db::open(dir, options).expect("reopen");
    let cold: Vec<u64> = (0..2_000).map(|_| rng.below(total)).collect();
    let start = Instant::now();
    for &i in &cold {
        assert!(db.get(&key(total, i)).expect("cold get").is_some());
    }
    let stats = db.stats();
    println!(
        "cold get (16 MiB cache): {:.1} us, frame reads {}, evictions {}",
        start.elapsed().as_secs_f64() * 1e6 / cold.len() as f64,
        stats.frame_reads,
        stats.frame_evictions
    );
    db.close().expect("close");
}

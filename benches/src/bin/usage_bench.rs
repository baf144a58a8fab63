//! How big is this prefix? `Db::usage` against counting the keys under it with a scan, in
//! holt-core itself and in LMDB, side by side in one process, medians of interleaved runs.
//! Prints one JSON object.
//!
//! usage: usage_bench [--keys N] [--dir PATH] [--reps R]
//!
//! The data: N keys under `big/` (1,000 directories) and N/10 under `other/`, values of 60 to
//! 200 bytes; holt-core weighs a value by its length, so usage answers keys and bytes, and
//! each scan adds up the same two figures.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;

use holt_benches::engines::{self, OpenOptions, Step, WriteMode};
use holt_core::{Batch, Db, ListEntry, ListRequest, Options, Weigher, WriteOptions};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BY_LENGTH: Weigher = Weigher { name: "bench-length", weigh: |v| v.len() as u64 };

fn key(prefix: &str, i: u64) -> Vec<u8> {
    format!("{prefix}/d{:04}/file-{i:09}.bin", i % 1000).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    vec![b'v'; 60 + (i * 7919 % 141) as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Keys and value bytes under `prefix` in holt-core, by a scan without delimiter.
fn holt_scan(db: &Db, prefix: &[u8]) -> (u64, u64) {
    let (mut keys, mut bytes) = (0u64, 0u64);
    let mut after = Vec::new();
    loop {
        let request =
            ListRequest { prefix, delimiter: b"", start_after: &after, limit: 10_000, with_values: true };
        let mut last = None;
        let more = db
            .list_with(&request, &mut |entry| {
                if let ListEntry::Key { key, value, .. } = entry {
                    keys += 1;
                    bytes += value.len() as u64;
                    last = Some(key.to_vec());
                }
            })
            .expect("list");
        match last {
            Some(k) if more => after = k,
            _ => return (keys, bytes),
        }
    }
}

fn main() {
    let mut keys = 1_000_000u64;
    let mut dir = std::env::temp_dir().join("holt-usage-bench");
    let mut reps = 5usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--keys" => keys = value.parse().expect("--keys"),
            "--dir" => dir = PathBuf::from(value),
            "--reps" => reps = value.parse().expect("--reps"),
            other => panic!("unknown argument {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let cache = 1usize << 30;
    let holt = Db::open(
        dir.join("holt-core"),
        Options {
            durability: holt_core::Durability::Async,
            memory_budget_bytes: cache,
            weigher: Some(BY_LENGTH),
            ..Options::default()
        },
    )
    .expect("holt-core");
    let lmdb = engines::open("lmdb", &dir.join("lmdb"), OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: cache })
        .expect("lmdb");
    let started = Instant::now();
    for (prefix, count) in [("big", keys), ("other", keys / 10)] {
        let all: Vec<u64> = (0..count).collect();
        for chunk in all.chunks(10_000) {
            let mut batch = Batch::new();
            let mut pairs = Vec::with_capacity(chunk.len());
            for &i in chunk {
                batch.put(key(prefix, i), value(i));
                pairs.push((key(prefix, i), value(i)));
            }
            holt.write_batch(&batch, WriteOptions::default()).expect("holt load");
            pairs.sort();
            lmdb.load_batch(&pairs).expect("lmdb load");
        }
    }
    holt.checkpoint().expect("checkpoint");
    lmdb.finish().expect("lmdb finish");
    eprintln!("loaded {} keys into both in {:.1} s", keys + keys / 10, started.elapsed().as_secs_f64());

    let deep = b"big/d0421/".to_vec();
    let mut usage_top_ns = Vec::new();
    let mut usage_deep_ns = Vec::new();
    let mut holt_scan_ms = Vec::new();
    let mut lmdb_scan_ms = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..reps {
        // Usage: 1,000 calls per repetition, the median call's time kept per repetition.
        for (prefix, out) in [(&b"big/"[..], &mut usage_top_ns), (&deep[..], &mut usage_deep_ns)] {
            let mut times = Vec::with_capacity(1000);
            for _ in 0..1000 {
                let t = Instant::now();
                let u = holt.usage(prefix).expect("usage");
                times.push(t.elapsed().as_nanos() as f64);
                std::hint::black_box(u);
            }
            out.push(median(times));
        }
        let t = Instant::now();
        let counted = holt_scan(&holt, b"big/");
        holt_scan_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let (mut n, mut bytes) = (0u64, 0u64);
        lmdb.walk(b"big/", &mut |k, v| {
            if !k.starts_with(b"big/") {
                return Step::Stop;
            }
            n += 1;
            bytes += v.len() as u64;
            Step::Continue
        })
        .expect("lmdb walk");
        lmdb_scan_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let usage = holt.usage(b"big/").expect("usage");
        answers.push(json!({"usage": [usage.keys, usage.weight], "holt_scan": [counted.0, counted.1], "lmdb_scan": [n, bytes]}));
        assert_eq!((usage.keys, usage.weight), counted, "usage disagrees with holt-core's own scan");
        assert_eq!(counted, (n, bytes), "the engines hold different data");
    }
    let top = median(usage_top_ns.clone());
    let out = json!({
        "keys_under_prefix": keys,
        "reps": reps,
        "usage_big_ns_p50": top,
        "usage_deep_ns_p50": median(usage_deep_ns.clone()),
        "holt_scan_ms_p50": median(holt_scan_ms.clone()),
        "lmdb_scan_ms_p50": median(lmdb_scan_ms.clone()),
        "usage_vs_holt_scan": median(holt_scan_ms.clone()) * 1e6 / top,
        "usage_vs_lmdb_scan": median(lmdb_scan_ms.clone()) * 1e6 / top,
        "runs": {"usage_big_ns": usage_top_ns, "usage_deep_ns": usage_deep_ns,
                 "holt_scan_ms": holt_scan_ms, "lmdb_scan_ms": lmdb_scan_ms},
        "answers": answers[0],
    });
    println!("{out}");
    holt.close().expect("close");
    drop(lmdb);
    let _ = std::fs::remove_dir_all(&dir);
}

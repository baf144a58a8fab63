//! Micro-measurement of the in-memory tree at 1M path-shaped keys (no log, no files):
//! random-order insertion, point gets, a key-heavy and a rollup-heavy listing, encoded size
//! against logical bytes, and resident memory. Run with
//! `cargo run --release -p holt-core --example tree_1m [keys]`.
//!
//! Data, as in shared/PERFORMANCE.md: 5 buckets × 20 tenants × 10,000 keys (8,000 nested
//! `…/tenant-07/dir-013/sub-2/file-….bin` over 50 dirs × 4 subs, 2,000 flat `…/object-….json`),
//! ~62 B JSON values, inserted in random order.

use std::time::Instant;

use holt_core::testing::{TreeHarness, DEFAULT_FRAME_BUDGET_BYTES, FRAME_SIZE};
use holt_core::{BatchOp, Condition, ListItem, ListRequest};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let total: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let seed = 42u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let per_tenant = total / 100;
    let nested = per_tenant * 8 / 10;
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(total);
    for b in 0..5 {
        for t in 0..20 {
            for i in 0..per_tenant {
                let n: u32 = rng.gen_range(0..100_000_000);
                let k = if i < nested {
                    let (d, s) = (i % 50, (i / 50) % 4);
                    format!("bucket-{b:03}/tenant-{t:02}/dir-{d:03}/sub-{s}/file-{n:08}.bin")
                } else {
                    format!("bucket-{b:03}/tenant-{t:02}/object-{n:08}.json")
                };
                keys.push(k.into_bytes());
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys.shuffle(&mut rng);
    let value = |i: usize| {
        format!("{{\"etag\":\"{:016x}\",\"size\":{:8},\"mtime\":1700000000}}", i * 7919, i % 99_999_999)
            .into_bytes()
    };
    let logical: usize = keys.iter().enumerate().map(|(i, k)| k.len() + value(i).len()).sum();
    let rss_before = status_kib("VmRSS:");

    let tree = TreeHarness::new(DEFAULT_FRAME_BUDGET_BYTES);
    let start = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        let op = BatchOp::Put { key: k.clone(), value: value(i), condition: Condition::None };
        tree.apply(std::slice::from_ref(&op)).expect("put");
    }
    let load = start.elapsed();

    let probes: Vec<usize> = (0..200_000).map(|_| rng.gen_range(0..keys.len())).collect();
    report("after random inserts", &tree, &keys, &probes, logical, per_tenant);
    println!(
        "random insert: {:.2} s ({:.2} us/put)",
        load.as_secs_f64(),
        load.as_secs_f64() * 1e6 / keys.len() as f64
    );
    println!(
        "RSS {} MB (before load {} MB), peak {} MB",
        status_kib("VmRSS:") / 1024,
        rss_before / 1024,
        status_kib("VmHWM:") / 1024
    );
    // Re-opened from encoded frames, each frame's nodes are decoded into consecutive
    // allocations: the same tree with the locality a freshly loaded database has.
    let start = Instant::now();
    let tree = tree.reopen(usize::MAX).expect("reopen");
    let _ = tree.list(&ListRequest { limit: usize::MAX, ..Default::default() }).expect("warm");
    println!("checkpoint + reopen + full scan: {:.2} s", start.elapsed().as_secs_f64());
    report("re-opened from frames", &tree, &keys, &probes, logical, per_tenant);
    println!("RSS {} MB, peak {} MB", status_kib("VmRSS:") / 1024, status_kib("VmHWM:") / 1024);
}

fn report(
    label: &str,
    tree: &TreeHarness,
    keys: &[Vec<u8>],
    probes: &[usize],
    logical: usize,
    per_tenant: usize,
) {
    println!("--- {label}");
    let start = Instant::now();
    let mut found = 0;
    for &p in probes {
        found += usize::from(tree.get(&keys[p]).expect("get").is_some());
    }
    let get_us = start.elapsed().as_secs_f64() * 1e6 / probes.len() as f64;
    assert_eq!(found, probes.len());

    let time_list = |prefix: &[u8], limit: usize| {
        let request = ListRequest { prefix, delimiter: b"/", limit, with_values: true, ..Default::default() };
        let mut samples = Vec::new();
        let mut shape = (0, 0, 0);
        for _ in 0..200 {
            let start = Instant::now();
            let (page, visited) = tree.list(&request).expect("list");
            samples.push(start.elapsed().as_secs_f64() * 1e6);
            let cps = page.items.iter().filter(|i| matches!(i, ListItem::CommonPrefix(_))).count();
            shape = (page.items.len() - cps, cps, visited);
        }
        samples.sort_by(f64::total_cmp);
        (samples[samples.len() / 2], shape)
    };
    let (key_heavy_us, key_heavy) = time_list(b"bucket-002/tenant-07/", 1000);
    let (rollup_tenants_us, rollup_tenants) = time_list(b"bucket-002/", 1000);
    let (rollup_root_us, rollup_root) = time_list(b"", 1000);

    let encoded = tree.encoded_bytes();
    let frames = tree.frame_count();
    // Whole slots; on disk only each frame's used bytes (rounded to 4 KiB) are allocated.
    let slots = frames * FRAME_SIZE;
    println!(
        "keys {} (logical {:.1} MB, mean key {:.1} B)",
        keys.len(),
        logical as f64 / 1e6,
        keys.iter().map(|k| k.len()).sum::<usize>() as f64 / keys.len() as f64
    );
    println!("point get: {get_us:.2} us");
    println!(
        "key-heavy list p50: {key_heavy_us:.0} us (keys {}, prefixes {}, nodes visited {})",
        key_heavy.0, key_heavy.1, key_heavy.2
    );
    println!("rollup list at bucket root p50: {rollup_tenants_us:.1} us (prefixes {}, each over ~{} keys, nodes visited {})",
        rollup_tenants.1, per_tenant, rollup_tenants.2);
    println!(
        "rollup list at tree root p50: {rollup_root_us:.1} us (prefixes {}, nodes visited {})",
        rollup_root.1, rollup_root.2
    );
    println!("frames {frames}, encoded {:.1} MB ({:.2}x logical), slots {:.1} MB ({:.2}x logical), mean fill {:.0}%",
        encoded as f64 / 1e6, encoded as f64 / logical as f64, slots as f64 / 1e6,
        slots as f64 / logical as f64, encoded as f64 * 100.0 / slots as f64);
}

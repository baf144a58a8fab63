//! The memory budget counts what frames really take: loading frames grows the bytes the
//! allocator holds by what the cache says it holds, measured with a counting allocator.

use holt_core::testing::TreeHarness;
use holt_core::BatchOp;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Bytes currently allocated by the whole test process.
fn live_bytes() -> isize {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn key(i: u32) -> Vec<u8> {
    // Path-shaped, with a few long names (prefixes and suffixes too long to be inline).
    let long = if i.is_multiple_of(7) { "-with-a-name-longer-than-any-inline-prefix" } else { "" };
    format!(
        "bucket-{:02}/dir-{:03}{long}/file-{:08}.bin",
        i % 3,
        (i / 3) % 200,
        i.wrapping_mul(2_654_435_761)
    )
    .into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    // Mostly inline-sized values, some that go to the heap.
    vec![i as u8; if i.is_multiple_of(5) { 300 } else { 40 }]
}

#[test]
fn loading_frames_grows_memory_by_what_the_cache_counts() {
    let tree = TreeHarness::new(64 * 1024);
    let ids: Vec<u32> = (0..60_000).collect();
    for chunk in ids.chunks(100) {
        let ops: Vec<BatchOp> = chunk
            .iter()
            .map(|&i| BatchOp::Put { key: key(i), value: value(i), condition: Default::default() })
            .collect();
        tree.apply(&ops).unwrap();
    }
    // Every frame but the root is evicted after the reopen; the budget holds them all.
    let tree = tree.reopen(usize::MAX).unwrap();
    // One read first: it allocates the read buffer the cache keeps for later loads.
    assert!(tree.get(&key(0)).unwrap().is_some());
    let (live_before, cache_before) = (live_bytes(), tree.cache_bytes() as isize);
    for &i in &ids {
        assert_eq!(tree.get(&key(i)).unwrap().expect("key lost").value, value(i));
    }
    let (live_after, cache_after) = (live_bytes(), tree.cache_bytes() as isize);
    let (grown, counted) = (live_after - live_before, cache_after - cache_before);
    println!("{} frames: memory grew {grown} B, the cache counted {counted} B", tree.frame_count());
    assert!(counted > 4 << 20, "too little was loaded to compare ({counted} B)");
    // The cache's own bookkeeping (its clock ring) is the only other growth.
    let slack = counted / 100 + 64 * 1024;
    assert!((grown - counted).abs() <= slack, "memory grew {grown} B, the cache counted {counted} B");
    tree.check().unwrap();
}

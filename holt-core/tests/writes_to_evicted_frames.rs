//! Puts and deletes to frames that are evicted while the cache is full are recorded without
//! loading the frames (their change logs take the writes; reads, loads, listings and
//! checkpoints apply them on top of the disk state): every key reads back its latest state
//! before and after checkpoints, after a reopen, and through a listing; the frames written to
//! are not loaded one per write; and the heap stays within the budget plus the documented
//! bound.

mod page_cache;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holt_core::testing::{TreeHarness, DEFAULT_FRAME_BUDGET_BYTES};
use holt_core::{
    Batch, BatchOp, Condition, Db, Durability, Error, ListItem, ListRequest, Options, WriteOptions,
};
use page_cache::options;
use rand::{Rng, SeedableRng};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const FRAME_SIZE: isize = 512 * 1024;

/// Taken by every test here: the heap is measured process-wide, so tests run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
const BUDGET_BYTES: usize = 4 << 20;

fn live_bytes() -> isize {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn key(i: u32) -> Vec<u8> {
    format!("bucket-{:02}/tenant-{:02}/dir-{:03}/file-{:08}.bin", i % 3, (i / 3) % 20, (i / 60) % 50, i)
        .into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("{{\"size\":{i},\"etag\":\"{:016x}\"}}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .into_bytes()
}

/// Loads keys `0..count` (even numbers only, so odd ones can be added later) and closes.
fn load(dir: &Path, count: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    page_cache::load(dir, (0..count).filter(|i| i % 2 == 0), |i| (key(i), value(i)))
}

fn scratch_dir() -> tempfile::TempDir {
    page_cache::scratch_dir("evicted-writes-")
}

fn check_all(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, count: u32, when: &str) {
    for i in 0..count {
        let k = key(i);
        let got = db.get(&k).unwrap_or_else(|e| panic!("{when}: key {i}: {e}")).map(|e| e.value);
        assert_eq!(got.as_ref(), model.get(&k), "{when}: key {i}");
    }
}

/// Random single puts (overwrites of present keys and new keys) and deletes (of present and
/// absent keys) over a database about ten times its budget, with a checkpoint in the middle
/// and a reopen at the end; the key count and weight the tree keeps agree with the model.
#[test]
fn writes_to_evicted_frames_read_back_without_loading_a_frame_per_write() {
    let _serial = serial();
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);

    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let before = live_bytes();
    let mut peak = 0isize;
    let puts = 20_000u32;
    let (mut loads, mut image_reads, mut recorded) = (0, 0, 0);
    let start = db.stats();
    for round in 0..2u32 {
        let before_puts = db.stats();
        for n in 0..puts / 2 {
            let i = rng.gen_range(0..count);
            if rng.gen_bool(0.25) {
                let existed = db.delete(&key(i)).unwrap();
                assert_eq!(existed, model.remove(&key(i)).is_some(), "delete of key {i}");
            } else {
                let v = format!("round {round} put {n} of {i}").into_bytes();
                db.put(&key(i), &v).unwrap();
                model.insert(key(i), v);
            }
            if n % 500 == 0 {
                // What the cache counts (the budget's business) is what the heap holds, the
                // states the change logs hold alone included, give or take the read buffers.
                let heap = live_bytes() - before;
                let cached = db.stats().cache_bytes as isize;
                peak = peak.max(heap - cached);
            }
        }
        let after_puts = db.stats();
        loads += after_puts.frame_loads - before_puts.frame_loads;
        image_reads += after_puts.frame_image_reads - before_puts.frame_image_reads;
        recorded += after_puts.frame_unloaded_writes - before_puts.frame_unloaded_writes;
        // Half of the puts are read back while their frames' logs hold them, half after a
        // checkpoint wrote them out.
        check_all(&db, &model, count, &format!("round {round}"));
        db.checkpoint().unwrap();
        check_all(&db, &model, count, &format!("after checkpoint {round}"));
    }
    let end = db.stats();
    println!(
        "{puts} writes over {} frames: {recorded} recorded unloaded, {loads} frames loaded, {image_reads} image reads; \
         checkpoints wrote {} deltas, \
         {} whole; cache {} B of {BUDGET_BYTES}; heap above the cache's count at most {peak} B",
        end.frames,
        end.checkpoint_frames_delta - start.checkpoint_frames_delta,
        end.checkpoint_frames_whole - start.checkpoint_frames_whole,
        end.cache_bytes,
    );
    assert!(end.frames >= 20, "only {} frames: the data does not exceed the budget", end.frames);
    // Loading a frame per put is what this spares: at most a few percent of the puts load.
    assert!(loads < u64::from(puts) / 20, "{loads} frame loads for {puts} writes");
    assert!(end.checkpoint_frames_delta > start.checkpoint_frames_delta, "no deltas written");
    // Most puts land in evicted frames (a few frames fit the budget).
    assert!(recorded > u64::from(puts) / 3, "only {recorded} of {puts} writes recorded unloaded");
    let usage = db.usage(b"").unwrap();
    assert_eq!(usage.keys, model.len() as u64, "the key count after the writes");
    // Not counted: the read buffers (one per concurrent load, one thread here); the images a
    // background checkpoint (started by the cache's pressure) is encoding, a batch of up to
    // 16 frames, here mostly deltas (8 frames' worth allowed); and what a resident frame's
    // change log holds until the next checkpoint (each key written, and the leaf an
    // overwrite replaced: about 160 bytes a put here). The states recorded unloaded, the
    // logs' buffers and the kept deltas are counted (the tree checker verifies the count
    // exactly in the property tests); this bounds what the count misses.
    let bound = 3 * FRAME_SIZE + 8 * FRAME_SIZE + 160 * (puts as isize - recorded as isize);
    assert!(peak <= bound, "the heap held {peak} B more than the cache counts, bound {bound} B");

    // The listing of a directory whose frames hold recorded puts sees them.
    let prefix = b"bucket-01/tenant-07/".to_vec();
    let request = ListRequest { prefix: &prefix, limit: 100_000, with_values: true, ..Default::default() };
    let page = db.list(&request).unwrap();
    let listed: Vec<(Vec<u8>, Vec<u8>)> = page
        .items
        .into_iter()
        .map(|item| match item {
            ListItem::Key { key, entry } => (key, entry.value),
            ListItem::CommonPrefix(p) => panic!("a common prefix without a delimiter: {p:?}"),
        })
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(!page.truncated && want.len() > 1_000, "{} keys under the prefix", want.len());
    assert!(listed == want, "a listing missed, misordered or misread recorded puts");
    db.close().unwrap();

    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    check_all(&db, &model, count, "after reopen");
    db.close().unwrap();
}

/// Recorded puts and deletes that no checkpoint wrote are recovered from the log after a
/// crash.
#[test]
fn recorded_writes_survive_a_crash_through_the_log() {
    let _serial = serial();
    let dir = scratch_dir();
    let count = 120_000;
    let mut model = load(dir.path(), count);
    let db = Db::open(dir.path(), Options { durability: Durability::Sync, ..options(BUDGET_BYTES) }).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for n in 0..3_000u32 {
        let i = rng.gen_range(0..count);
        if n % 3 == 0 {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
            continue;
        }
        let v = format!("crash put {n} of {i}").into_bytes();
        db.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let image_reads = db.stats().frame_image_reads;
    assert!(image_reads > 1_000, "the puts did not walk evicted frames ({image_reads} image reads)");
    // No close, so no checkpoint: the next open replays the log, which holds every put.
    drop(db);
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    check_all(&db, &model, count, "after the crash");
    db.close().unwrap();
}

/// Every key of `model` reads back its value, and every key of `0..count` it lacks reads
/// nothing.
fn check_model(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, count: u32, when: &str) {
    check_all(db, model, count, when);
    for (k, v) in model {
        let got = db.get(k).unwrap_or_else(|e| panic!("{when}: {e}")).map(|e| e.value);
        assert_eq!(got.as_ref(), Some(v), "{when}: {}", String::from_utf8_lossy(k));
    }
}

/// Checks every key of `model` (and the key count) after a sequence of batches, after a
/// crash (no close, so no checkpoint: the next open replays the batches from the log), after
/// a checkpoint, and after a reopen.
fn check_after_batches(db: Db, dir: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>, count: u32) {
    check_model(&db, model, count, "after the batches");
    assert_eq!(db.usage(b"").unwrap().keys, model.len() as u64, "the key count");
    drop(db);
    let db = Db::open(dir, options(BUDGET_BYTES)).unwrap();
    check_model(&db, model, count, "after the crash");
    db.checkpoint().unwrap();
    check_model(&db, model, count, "after a checkpoint");
    db.close().unwrap();
    let db = Db::open(dir, options(BUDGET_BYTES)).unwrap();
    check_model(&db, model, count, "after a reopen");
    assert_eq!(db.usage(b"").unwrap().keys, model.len() as u64, "the key count after a reopen");
    db.close().unwrap();
}

/// Batches whose keys all end in one evicted frame (renames, a key put and deleted in one
/// batch, deletes of a directory's keys, conditional batches refused) are recorded in its
/// change log without loading it: every key reads back its latest state before and after a
/// checkpoint, after a crash (replayed from the log) and after a reopen, and the key count
/// agrees with the model. A random sequence of batches (`HOLT_SEED` replays one).
#[test]
fn batches_to_evicted_frames_are_recorded_without_loading_them() {
    let seed =
        std::env::var("HOLT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    batches_to_evicted_frames(seed);
}

/// The sequence that found batches loading every evicted frame above their owners once per
/// op: a batch whose first key ends in a resident frame takes the general path, and with the
/// cache full of dirty frames each frame it loaded on one key's path evicted another, so 25
/// deletes in one directory loaded 100 frames.
#[test]
fn batches_to_resident_frames_below_evicted_ones_load_only_their_owners() {
    batches_to_evicted_frames(10_683_182_532_430_422_917);
}

fn batches_to_evicted_frames(seed: u64) {
    let _serial = serial();
    println!("seed {seed} (replay with HOLT_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);
    let db = Db::open(dir.path(), Options { durability: Durability::Sync, ..options(BUDGET_BYTES) }).unwrap();
    let before = db.stats();
    let (mut batches, mut ops, mut refused) = (0u64, 0u64, 0u64);
    for n in 0..4_000u32 {
        let i = rng.gen_range(0..count / 2) * 2;
        let src = key(i);
        let mut batch = Batch::new();
        match n % 4 {
            // A rename, conditional on the source's version.
            0 => {
                let Some(entry) = db.get(&src).unwrap() else { continue };
                let dst = [&src[..], format!(".renamed-{n}").as_bytes()].concat();
                batch.put_if(dst.clone(), entry.value.clone(), Condition::Absent);
                batch.delete_if(src.clone(), Condition::Version(entry.version));
                model.remove(&src);
                model.insert(dst, entry.value);
            }
            // A key put and deleted, and another deleted and put, in one batch.
            1 => {
                let tmp = [&src[..], b".tmp"].concat();
                let v = format!("batch {n}").into_bytes();
                batch
                    .put(tmp.clone(), b"tmp".to_vec())
                    .delete(tmp)
                    .delete(src.clone())
                    .put(src.clone(), v.clone());
                model.insert(src, v);
            }
            // Deletes of keys of one directory (present or not, one of them twice), as a
            // multi-object delete sends: a few, or more than are searched without hashing.
            2 => {
                let keys = if n % 8 == 2 { 6 } else { 24 };
                for k in (0..keys).chain([0]).map(|d| key((i + 3_000 * d) % count)) {
                    model.remove(&k);
                    batch.delete(k);
                }
            }
            // A condition that fails: nothing of the batch is applied.
            _ => {
                let absent = [&src[..], b".absent"].concat();
                batch.put(absent.clone(), b"never".to_vec()).put_if(
                    src.clone(),
                    b"never".to_vec(),
                    Condition::Absent,
                );
                let present = model.contains_key(&src);
                match db.write_batch(&batch, WriteOptions::default()) {
                    Err(Error::ConditionFailed) if present => refused += 1,
                    Ok(_) if !present => {
                        model.insert(absent, b"never".to_vec());
                        model.insert(src, b"never".to_vec());
                    }
                    other => panic!("batch {n} (source present {present}): {other:?}"),
                }
                continue;
            }
        }
        db.write_batch(&batch, WriteOptions::default()).unwrap_or_else(|e| panic!("batch {n}: {e}"));
        batches += 1;
        ops += batch.len() as u64;
    }
    let after = db.stats();
    let loads = after.frame_loads - before.frame_loads;
    let recorded = after.frame_unloaded_writes - before.frame_unloaded_writes;
    println!("{batches} batches of {ops} ops ({refused} more refused): {recorded} writes recorded unloaded, {loads} frames loaded");
    assert!(refused > 500, "only {refused} batches refused");
    // Loading a frame per batch is what this spares (frames load only until the cache is full).
    assert!(loads < batches / 20, "{loads} frame loads for {batches} batches");
    assert!(recorded > ops / 2, "only {recorded} of {ops} writes recorded unloaded");
    check_after_batches(db, dir.path(), &model, count);
}

/// Batches whose keys are spread over the whole tree (a bulk load's random keys: new keys,
/// overwrites and deletes, each batch's keys ending in dozens of evicted frames) are recorded
/// in those frames' change logs, not loaded a frame per key; a batch whose condition fails
/// applies nothing. Every key reads back its latest state before and after a crash, a
/// checkpoint and a reopen, the key count agrees with the model, and the heap stays within
/// what the cache counts plus the documented bound. `HOLT_SEED` replays a sequence.
#[test]
fn batches_spread_over_evicted_frames_are_recorded_without_loading_them() {
    let _serial = serial();
    let seed =
        std::env::var("HOLT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    println!("seed {seed} (replay with HOLT_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let frames = db.stats().frames;
    let before = db.stats();
    let heap_before = live_bytes();
    let (mut batches, mut ops, mut refused, mut peak, mut peak_cached) = (0u64, 0u64, 0u64, 0isize, 0u64);
    // About 11,000 ops over about 24 frames: most frames' change logs (a quarter of the
    // frame, about 850 such writes) do not fill, so a frame loads only to split.
    for n in 0..120u32 {
        let mut batch = Batch::new();
        let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for _ in 0..rng.gen_range(20..200) {
            // Odd keys are new, even ones overwritten or deleted (or deleted twice).
            let i = rng.gen_range(0..count);
            if i % 2 == 0 && rng.gen_bool(0.2) {
                changes.push((key(i), None));
                batch.delete(key(i));
            } else {
                let v = format!("batch {n} put {i}").into_bytes();
                changes.push((key(i), Some(v.clone())));
                batch.put(key(i), v);
            }
        }
        if n % 10 == 9 {
            // A key present before the batch, required absent (conditions see the state
            // before the batch): the whole batch is refused.
            let present = model.keys().nth(rng.gen_range(0..model.len())).unwrap().clone();
            batch.put_if(present, b"never".to_vec(), Condition::Absent);
            match db.write_batch(&batch, WriteOptions::default()) {
                Err(Error::ConditionFailed) => refused += 1,
                other => panic!("batch {n}: {other:?}"),
            }
            continue;
        }
        db.write_batch(&batch, WriteOptions::default()).unwrap_or_else(|e| panic!("batch {n}: {e}"));
        for (k, v) in changes {
            match v {
                Some(v) => model.insert(k, v),
                None => model.remove(&k),
            };
        }
        batches += 1;
        ops += batch.len() as u64;
        let heap = live_bytes() - heap_before;
        let cached = db.stats().cache_bytes;
        peak = peak.max(heap - cached as isize);
        peak_cached = peak_cached.max(cached);
    }
    let after = db.stats();
    // Loads for the batches and the reads after them, not the checkpoints' rebuilds.
    let loads = after.frame_loads - before.frame_loads;
    let recorded = after.frame_unloaded_writes - before.frame_unloaded_writes;
    let dirty_evictions = after.frame_dirty_evictions - before.frame_dirty_evictions;
    println!(
        "{batches} batches of {ops} ops over {frames} frames ({refused} refused): {recorded} writes \
         recorded unloaded, {loads} frames loaded, {dirty_evictions} evicted dirty; cache at most \
         {peak_cached} B of {BUDGET_BYTES}; heap above the cache's count at most {peak} B"
    );
    // Frames the batches loaded (to split, or while the cache had room) and left dirty go
    // with their change logs standing for them; the checks below read through those logs.
    assert!(dirty_evictions > 0, "no dirty frame was evicted");
    assert!(frames >= 20, "only {frames} frames: the data does not exceed the budget");
    // Loading each frame a batch's keys end in loaded 72–135 frames here (each batch reaches
    // most of them); frames still load to split, and until the cache is full: 6–12 of the
    // 24 over several runs, so the bound is the frame count, not half of it.
    assert!(loads < frames, "{loads} frame loads for {ops} ops over {frames} frames");
    // The rest land in the frames resident (a few fit the budget, and they take a share of
    // every batch): about half here. Loading every owner recorded none.
    assert!(recorded > ops / 3, "only {recorded} of {ops} writes recorded unloaded");
    // As in the single-write test: read buffers, a checkpoint's batch of images, and what
    // resident frames' logs hold (about 160 bytes a write).
    let bound = 3 * FRAME_SIZE + 8 * FRAME_SIZE + 160 * (ops as isize - recorded as isize);
    assert!(peak <= bound, "the heap held {peak} B more than the cache counts, bound {bound} B");
    check_after_batches(db, dir.path(), &model, count);
}

/// A conditional put to an evicted frame checks its condition against the latest state:
/// the image, its deltas, and the puts recorded before it.
#[test]
fn conditions_on_evicted_frames_see_recorded_puts() {
    let _serial = serial();
    let dir = scratch_dir();
    let count = 120_000;
    load(dir.path(), count);
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let mut checked = 0;
    for i in (1..count).step_by(397) {
        let k = key(i);
        // Odd keys were never written: the first conditional put succeeds, the second fails.
        let first = db.put_with(&k, b"first", Condition::Absent, WriteOptions::default());
        let present = i % 2 == 0;
        match (present, first) {
            (true, Err(Error::ConditionFailed)) => {}
            (false, Ok(_)) => {
                let second = db.put_with(&k, b"second", Condition::Absent, WriteOptions::default());
                assert!(matches!(second, Err(Error::ConditionFailed)), "key {i}");
                assert_eq!(db.get(&k).unwrap().unwrap().value, b"first", "key {i}");
            }
            (_, other) => panic!("key {i} (present {present}): {other:?}"),
        }
        checked += 1;
    }
    assert!(checked > 200);
    assert!(db.stats().frame_image_reads > 200, "the puts did not walk evicted frames");
}

/// A conditional delete of a key in an evicted frame checks its condition against the latest
/// state, and a delete recorded without loading the frame is seen by the next condition.
#[test]
fn conditional_deletes_on_evicted_frames_see_the_latest_state() {
    let _serial = serial();
    let dir = scratch_dir();
    let count = 240_000;
    load(dir.path(), count);
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let before = db.stats();
    let mut deleted = 0u64;
    for i in (0..count).step_by(2 * 397) {
        let k = key(i);
        let version = db.get(&k).unwrap().unwrap_or_else(|| panic!("key {i} missing")).version;
        let stale = holt_core::Version(version.0 + 1);
        let refused = db.delete_with(&k, Condition::Version(stale), WriteOptions::default());
        assert!(matches!(refused, Err(Error::ConditionFailed)), "key {i}: {refused:?}");
        assert!(db.delete_with(&k, Condition::Version(version), WriteOptions::default()).unwrap(), "key {i}");
        assert_eq!(db.get(&k).unwrap(), None, "key {i} still reads after its delete");
        let again = db.delete_with(&k, Condition::Version(version), WriteOptions::default());
        assert!(matches!(again, Err(Error::ConditionFailed)), "key {i}: a deleted key met its old version");
        assert!(!db.delete(&k).unwrap(), "key {i} deleted twice");
        // Never written (odd): absent for the condition too.
        assert!(!db.delete(&key(i + 1)).unwrap(), "key {} was never written", i + 1);
        deleted += 1;
    }
    let after = db.stats();
    let loads = after.frame_loads - before.frame_loads;
    let recorded = after.frame_unloaded_writes - before.frame_unloaded_writes;
    println!("{deleted} keys deleted: {recorded} recorded unloaded, {loads} frames loaded");
    assert!(deleted > 200);
    // Loading a frame per delete is what this spares (frames load only until the cache is full).
    assert!(loads < deleted / 20, "{loads} frame loads for {deleted} deletes");
    // The rest land in the few frames resident (those loaded while the cache had room).
    assert!(recorded > deleted / 2, "only {recorded} of {deleted} deletes recorded unloaded");
    assert_eq!(db.usage(b"").unwrap().keys, u64::from(count / 2) - deleted, "the key count");
    db.close().unwrap();
}

/// Point reads, puts and checkpoints at once, with frames evicted: no read fails, loses a
/// key, or returns a value never written for it.
#[test]
fn recorded_puts_race_reads_and_checkpoints() {
    let _serial = serial();
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let dir = scratch_dir();
    let count = 120_000;
    load(dir.path(), count);
    let db = Arc::new(Db::open(dir.path(), options(BUDGET_BYTES)).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // Present keys only (even), so a reader knows each key exists.
                let i = rng.gen_range(0..count / 2) * 2;
                db.put(&key(i), format!("put {n} of {i}").as_bytes()).unwrap();
                if n.is_multiple_of(2_000) {
                    db.checkpoint().unwrap();
                }
            }
            n
        })
    };
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (r + 1));
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.gen_range(0..count / 2) * 2;
                    let got = db.get(&key(i)).unwrap_or_else(|e| panic!("key {i}: {e}"));
                    let read = got.unwrap_or_else(|| panic!("key {i} lost")).value;
                    assert!(
                        read == value(i)
                            || (read.starts_with(b"put ") && read.ends_with(format!(" of {i}").as_bytes())),
                        "key {i}: a value never written for it"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let puts = writer.join().unwrap();
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let stats = db.stats();
    println!(
        "{puts} puts, {reads} reads, {} image reads, {} deltas written, {} frames loaded",
        stats.frame_image_reads, stats.checkpoint_frames_delta, stats.frame_loads
    );
    assert!(puts > 2_000 && stats.checkpoint_frames_delta > 0, "the race was not exercised");
}

/// An overwrite recorded in an evicted frame's change log counts what it can add to the
/// frame's encoding over the leaf it replaces (the value's length and the version's varint),
/// not a whole new entry (which made frames near their size limit load to split on an
/// overwrite); the overwrites load no frame, and every value reads back after checkpoints
/// and a reopen.
#[test]
fn overwrites_of_evicted_frames_count_only_what_they_grow() {
    let _serial = serial();
    let count = 400_000u32;
    let tree = TreeHarness::new(DEFAULT_FRAME_BUDGET_BYTES);
    for chunk in (0..count).collect::<Vec<_>>().chunks(2_000) {
        let ops: Vec<BatchOp> = chunk
            .iter()
            .map(|&i| BatchOp::Put { key: key(i), value: value(i), condition: Condition::None })
            .collect();
        tree.apply(&ops).unwrap();
    }
    let tree = tree.reopen(BUDGET_BYTES).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..count).map(|i| (key(i), value(i))).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    // As long as `value(i)`: the etag's 16 hex digits change, the size's digits stay.
    let mut overwrite = |tree: &TreeHarness, n: u64| {
        let i = rng.gen_range(0..count);
        let v = format!("{{\"size\":{i},\"etag\":\"{n:016x}\"}}").into_bytes();
        assert_eq!(v.len(), value(i).len());
        tree.apply(&[BatchOp::Put { key: key(i), value: v.clone(), condition: Condition::None }]).unwrap();
        model.insert(key(i), v);
    };
    // Reads load frames until the cache is full, and the first write to each evicted frame
    // learns its size from its image: measured from the second round of writes on.
    for i in (0..count).step_by(97) {
        tree.get(&key(i)).unwrap().unwrap();
    }
    for n in 0..4_000 {
        overwrite(&tree, n);
    }
    tree.checkpoint().unwrap();
    let frames_loaded = tree.cache_counters().0;
    let (mut overwrites, mut grown) = (0u64, 0i64);
    for round in 1..=6u64 {
        let before = tree.encoded_bytes();
        for n in 0..1_000 {
            overwrite(&tree, round << 32 | n);
            overwrites += 1;
        }
        grown += tree.encoded_bytes() as i64 - before as i64;
        tree.checkpoint().unwrap();
    }
    let loads = tree.cache_counters().0 - frames_loaded;
    println!(
        "{overwrites} overwrites over {} frames: sizes grew {grown} B, {loads} frames loaded",
        tree.frame_count()
    );
    // A leaf record's version varint takes 1 to 10 bytes.
    assert!(
        grown <= overwrites as i64 * 9,
        "frame sizes grew {grown} B for {overwrites} same-length overwrites"
    );
    assert!(loads < overwrites / 100, "{loads} frames loaded for {overwrites} overwrites");
    let tree = tree.reopen(BUDGET_BYTES).unwrap();
    tree.check().unwrap();
    for (k, v) in &model {
        assert_eq!(tree.get(k).unwrap().map(|e| e.value).as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
    }
}

/// After a reopen, the first write to an evicted frame that has deltas on disk is recorded
/// without loading it (its lead and a bound of its size are read from its image and deltas);
/// a frame was loaded for most such writes before. Overwrites alone.
#[test]
fn first_writes_after_a_reopen_load_few_frames() {
    first_writes_after_a_reopen(false);
}

/// `first_writes_after_a_reopen_load_few_frames` with deletes and new keys among the writes,
/// in the deltas and after the reopen: every read agrees with the model (a lead told wrong
/// from deltas with deletes would let a write change a frame's lead under its parent).
#[test]
fn first_writes_after_a_reopen_with_deletes_load_few_frames() {
    first_writes_after_a_reopen(true);
}

fn first_writes_after_a_reopen(deletes: bool) {
    let _serial = serial();
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    // Mostly overwrites; with `deletes`, one write in eight deletes a key and one in eight
    // adds a new one (odd numbers), as an S3 workload's writes go.
    let mut write = |db: &Db, n: u32| {
        let i = rng.gen_range(0..count);
        if deletes && n.is_multiple_of(8) {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
            return;
        }
        let i = if deletes && n % 8 == 1 { i | 1 } else { i & !1 };
        let v = format!("write {n} of {i}").into_bytes();
        db.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    };
    // Every frame gets deltas.
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    for n in 0..3_000 {
        write(&db, n);
    }
    db.checkpoint().unwrap();
    let deltas = db.stats().checkpoint_frames_delta;
    db.close().unwrap();

    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    // Reads fill the cache; nothing else is known of the evicted frames.
    for i in (0..count).step_by(194) {
        db.get(&key(i)).unwrap();
    }
    let before = db.stats();
    let puts = 3_000u32;
    for n in 0..puts {
        write(&db, 10_000 + n);
    }
    let after = db.stats();
    let loads = after.frame_loads - before.frame_loads;
    let recorded = after.frame_unloaded_writes - before.frame_unloaded_writes;
    println!(
        "{puts} first writes after a reopen over {} frames ({deltas} written as deltas before): {loads} frames \
         loaded, {recorded} writes recorded unloaded",
        after.frames,
    );
    assert!(after.frames >= 20, "only {} frames: the data does not exceed the budget", after.frames);
    assert!(deltas * 2 > after.frames, "only {deltas} of {} frames have deltas", after.frames);
    assert!(
        loads * 10 < after.frames,
        "{loads} frames loaded for {puts} writes over {} frames",
        after.frames
    );
    check_all(&db, &model, count, "after the writes");
    db.close().unwrap();
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    check_all(&db, &model, count, "after a reopen");
    db.close().unwrap();
}

/// Rounds of overwrites, each after a reopen and ended by a checkpoint, grow the frames'
/// delta chains. The first write after a reopen to an evicted frame takes the frame's size
/// bound from the manifest (its size table), not from its image and deltas, which count every
/// put a delta holds as a new key: with that bound, full frames whose chains grew passed the
/// split size and were loaded by their first write (5 loads in four of five later rounds,
/// against 2 in the first).
#[test]
fn overwrite_rounds_after_reopens_load_few_frames() {
    let _serial = serial();
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let (rounds, puts) = (6, 10_000u32);
    let mut loads_per_round = Vec::new();
    let mut frames = 0;
    for round in 0..rounds {
        let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
        // Reads fill the cache.
        for i in (0..count).step_by(194) {
            db.get(&key(i)).unwrap();
        }
        let before = db.stats();
        for _ in 0..puts {
            // A present key, a new value of the same length (a metadata update).
            let i = rng.gen_range(0..count) & !1;
            let v = value(i)
                .into_iter()
                .map(|b| if b == b'0' { b'1' + round as u8 } else { b })
                .collect::<Vec<_>>();
            db.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        let after = db.stats();
        loads_per_round.push(after.frame_loads - before.frame_loads);
        frames = after.frames;
        db.checkpoint().unwrap();
        db.close().unwrap();
    }
    println!("{puts} overwrites a round over {frames} frames: frames loaded per round {loads_per_round:?}");
    assert!(frames >= 20, "only {frames} frames: the data does not exceed the budget");
    // The first round's frames have no deltas: their images bound them exactly. The loads it
    // makes fill the room the reads left; a later round makes no more.
    let first = loads_per_round[0];
    for (round, &loads) in loads_per_round.iter().enumerate().skip(1) {
        assert!(
            loads <= first + 1,
            "round {round}: {loads} frames loaded for {puts} overwrites over {frames} frames, {first} in the first"
        );
    }
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    check_all(&db, &model, count, "after the rounds");
    db.close().unwrap();
}

/// Writes recorded in change logs take the cache past its budget while clean frames sit in
/// it: the background checkpointer evicts those rather than call a checkpoint. It used to
/// call one at every `PRESSURE_SPACING` (a second) while the writes went on, each giving
/// every frame written to a delta, so delta chains filled three times as fast.
#[test]
fn change_logs_past_the_budget_evict_clean_frames_instead_of_checkpointing() {
    let _serial = serial();
    let dir = scratch_dir();
    let count = 240_000;
    load(dir.path(), count);
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    // Reads fill the cache with clean frames.
    for i in (0..count).step_by(97) {
        db.get(&key(i)).unwrap();
    }
    let before = db.stats();
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    // Overwrites, most recorded in change logs, until the cache is past its budget (the
    // checkpointer looks every 50 ms; a write takes microseconds).
    let mut puts = 0;
    while db.stats().cache_bytes <= BUDGET_BYTES as u64 {
        let i = rng.gen_range(0..count) & !1;
        db.put(&key(i), &value(i)).unwrap();
        puts += 1;
        assert!(puts < 1_000_000, "a million writes did not take the cache past its budget");
    }
    let over = db.stats();
    // Long enough for a checkpoint called for the pressure (more than a second since open).
    std::thread::sleep(Duration::from_millis(2_500));
    let after = db.stats();
    println!(
        "{puts} writes ({} recorded unloaded) took the cache to {} bytes (budget {BUDGET_BYTES}); 2.5 s later \
         {} bytes, {} frames evicted, {} checkpoints",
        over.frame_unloaded_writes - before.frame_unloaded_writes,
        over.cache_bytes,
        after.cache_bytes,
        after.frame_evictions - before.frame_evictions,
        after.checkpoints - before.checkpoints,
    );
    assert!(
        over.frame_unloaded_writes - before.frame_unloaded_writes > puts / 2,
        "the writes were not recorded unloaded"
    );
    assert_eq!(
        after.checkpoints, before.checkpoints,
        "a checkpoint ran where evicting clean frames made room"
    );
    assert!(
        after.cache_bytes <= BUDGET_BYTES as u64,
        "the cache stayed past its budget: {} bytes",
        after.cache_bytes
    );
    assert!(after.frame_evictions > over.frame_evictions, "no frame was evicted");
    db.close().unwrap();
}

//! Point reads of a database ten times larger than its memory budget, with the frames file
//! dropped from the page cache first: every key reads back its value, a read of an evicted
//! frame fetches a few 4 KiB pages (not the frame's image), and the heap stays within the
//! budget plus the documented bound. A corrupt or torn page is detected by its own checksum
//! and named; it is never served.

mod page_cache;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use page_cache::{drop_page_cache, options};

use holt_core::{Batch, Db, Error, WriteOptions};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const FRAME_SIZE: u64 = 512 * 1024;
const PAGE: u64 = 4096;
const BUDGET_BYTES: usize = 4 << 20;

/// The heap bound is measured on the process's live bytes: the heap test holds this
/// exclusively, so no other test of this file allocates while it measures.
static HEAP_MEASURED: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Taken by every test but the heap test: they run beside each other, not beside it.
fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    HEAP_MEASURED.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn live_bytes() -> isize {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn key(i: u32) -> Vec<u8> {
    format!("bucket-{:02}/tenant-{:02}/dir-{:03}/file-{:08}.bin", i % 3, (i / 3) % 20, (i / 60) % 50, i)
        .into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut v =
        format!("{{\"size\":{i},\"etag\":\"{:016x}\"}}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .into_bytes();
    // A few values span several pages, so a record that crosses pages is read too.
    v.resize(if i.is_multiple_of(997) { 9_000 } else { 80 }, b'.');
    v
}

/// Loads `count` keys and closes.
fn load(dir: &Path, count: u32) {
    page_cache::load(dir, 0..count, |i| (key(i), value(i)));
}

/// A random generator from a printed seed, and a scratch directory holding `count` keys.
fn seeded_load(count: u32) -> (rand::rngs::StdRng, tempfile::TempDir) {
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let dir = scratch_dir();
    load(dir.path(), count);
    (rand::rngs::StdRng::seed_from_u64(seed), dir)
}

fn scratch_dir() -> tempfile::TempDir {
    page_cache::scratch_dir("beyond-memory-")
}

#[test]
fn every_key_of_a_database_ten_times_its_budget_reads_back_in_a_few_pages() {
    let _alone = HEAP_MEASURED.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let dir = scratch_dir();
    let count = 220_000;
    load(dir.path(), count);
    let frames_bytes = std::fs::metadata(dir.path().join("frames.dat")).unwrap().len();
    drop_page_cache(dir.path());

    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let mut ids: Vec<u32> = (0..count).collect();
    ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    let before = live_bytes();
    let mut peak = 0isize;
    for (n, &i) in ids.iter().enumerate() {
        let got = db.get(&key(i)).unwrap().unwrap_or_else(|| panic!("key {i} lost"));
        assert_eq!(got.value, value(i), "key {i}");
        if n % 500 == 0 {
            peak = peak.max(live_bytes() - before);
        }
    }
    let stats = db.stats();
    println!(
        "{count} keys, frames file {frames_bytes} B, {} frames; cache {} B of a {BUDGET_BYTES} B budget; \
         {} frames loaded, {} image reads fetching {} pages; heap grew at most {peak} B",
        stats.frames, stats.cache_bytes, stats.frame_loads, stats.frame_image_reads, stats.frame_page_reads
    );
    // The data really is larger than the budget: decoded frames take more than the encoded bytes.
    assert!(frames_bytes > 6 * BUDGET_BYTES as u64, "only {frames_bytes} B of frames");
    assert!(stats.frame_image_reads > u64::from(count) / 2, "most reads should walk evicted frames");
    // A whole image is ~70 pages; a walk reads page 0 and about one page per level.
    let pages_per_read = stats.frame_page_reads as f64 / stats.frame_image_reads as f64;
    assert!(pages_per_read < 6.0, "{pages_per_read:.2} pages per image read");
    // The documented bound: one frame decoded past the budget while the clock evicts, and
    // the read buffer a load uses (one reader, so one buffer).
    let bound = BUDGET_BYTES as isize + 3 * FRAME_SIZE as isize;
    assert!(peak <= bound, "heap grew {peak} B, bound {bound} B");
    db.close().unwrap();
}

/// A budget with room for the pinned root frame and the estimate a read makes of a frame
/// not loaded yet (1 MiB), but not for the frames here (short keys and values decode to
/// more): the first read of each frame loads it and the clock evicts it at once to stay
/// within the budget; from then on its known size says it does not fit, and reads walk its
/// pages. When the estimate alone decided, every read found the room again and decoded a
/// whole frame (seen as a crash-soak verification taking minutes: two loads a get).
#[test]
fn a_frame_that_does_not_fit_is_loaded_once_then_walked() {
    let _others = beside_others();
    let dir = scratch_dir();
    let count = 240_000u32;
    let short_key = |i: u32| format!("t{}/d{}/k{i:08}", i % 4, i % 8).into_bytes();
    let short_value = |i: u32| format!("v{i}").into_bytes();
    page_cache::load(dir.path(), 0..count, |i| (short_key(i), short_value(i)));
    // What the root frame (always resident) takes.
    let root = {
        let db = Db::open(dir.path(), options(1)).unwrap();
        let stats = db.stats();
        assert_eq!(stats.frames_cached, 1, "more than the root frame resident at open");
        stats.cache_bytes as usize
    };
    let budget = root + (1 << 20) + (16 << 10);
    let db = Db::open(dir.path(), options(budget)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let gets = 3_000;
    for _ in 0..gets {
        let i = rng.gen_range(0..count);
        assert_eq!(db.get(&short_key(i)).unwrap().map(|e| e.value), Some(short_value(i)), "key {i}");
    }
    let stats = db.stats();
    println!(
        "{} frames, root {root} B, budget {budget} B, cache {} B; {gets} gets: {} frames loaded, {} image reads",
        stats.frames, stats.cache_bytes, stats.frame_loads, stats.frame_image_reads
    );
    assert!(stats.frames >= 8, "only {} frames", stats.frames);
    assert!(
        stats.frame_loads <= stats.frames,
        "{} frames loaded by {gets} gets over {} frames",
        stats.frame_loads,
        stats.frames
    );
    db.close().unwrap();
}

/// A lookup that may not wait (`Db::get_resident`, which the gateway runs on its async
/// workers) reads an evicted frame only once a walk has opened its image and the page cache
/// holds the image's pages. With the cache filled by loading gets of one bucket, keys of
/// another bucket answer "not resident"; after loading gets of them, they are served from the
/// page cache, each with its value.
#[test]
fn resident_lookups_read_evicted_frames_only_from_the_page_cache() {
    let _shared = beside_others();
    let dir = scratch_dir();
    let count = 150_000;
    load(dir.path(), count);
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    // Bucket 0 fills the cache; bucket 1 is read after.
    for i in (0..count).filter(|i| i % 3 == 0) {
        assert_eq!(db.get(&key(i)).unwrap().unwrap_or_else(|| panic!("key {i} lost")).value, value(i));
    }
    assert!(db.stats().frame_image_reads > 0, "the cache never filled");
    let other: Vec<u32> = (0..count).filter(|i| i % 3 == 1).step_by(5).collect();
    let evicted: Vec<u32> = other.iter().copied().filter(|&i| !db.is_resident(&key(i)).unwrap()).collect();
    assert!(
        evicted.len() > other.len() / 2,
        "only {} of {} keys cross an evicted frame",
        evicted.len(),
        other.len()
    );

    let early = evicted.iter().filter(|&&i| db.get_resident(&key(i)).unwrap().is_some()).count();
    assert_eq!(early, 0, "keys of frames no walk opened were read by a lookup that may not wait");

    for &i in &evicted {
        assert_eq!(db.get(&key(i)).unwrap().unwrap_or_else(|| panic!("key {i} lost")).value, value(i));
    }
    let mut served = 0;
    for &i in &evicted {
        if let Some(found) = db.get_resident(&key(i)).unwrap() {
            assert_eq!(found.unwrap_or_else(|| panic!("key {i} lost")).value, value(i), "key {i}");
            served += 1;
        }
    }
    println!("{served} of {} keys in evicted frames served from the page cache", evicted.len());
    // Not all: a frame admitted meanwhile may have been evicted again, unopened.
    assert!(served > evicted.len() / 2, "only {served} of {} served from the page cache", evicted.len());
    db.close().unwrap();
}

/// Flips a byte in page 2 of one frame and zeroes page 3 of another (a write that lost one
/// sector): reads through those pages fail with a corruption error naming the page, every
/// other read returns its value (but for a read now and then that tries to load a damaged
/// frame whole), on the first pass over the keys and the second. Pages read
/// in place from the mapping of the frames file (the default) and pages copied by `pread`
/// are checked alike.
#[test]
fn a_corrupt_or_torn_page_is_named_never_served() {
    let _shared = beside_others();
    for mapped_reads in [true, false] {
        println!("mapped reads: {mapped_reads}");
        corrupt_or_torn_page_is_named(holt_core::Options { mapped_reads, ..options(BUDGET_BYTES) });
    }
}

fn corrupt_or_torn_page_is_named(options: holt_core::Options) {
    let dir = scratch_dir();
    let count = 60_000;
    load(dir.path(), count);
    let path = dir.path().join("frames.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    // Slots holding a frame image other than the root's, with at least 5 pages of records.
    let slots: Vec<u64> = (0..bytes.len() as u64 / FRAME_SIZE)
        .filter(|&s| {
            let at = (s * FRAME_SIZE) as usize;
            let head = &bytes[at..at + 32];
            let used = u32::from_le_bytes(head[16..20].try_into().unwrap()) as u64;
            &head[..4] == b"HFRM" && head[8..16] != [0u8; 8] && used > 5 * PAGE
        })
        .collect();
    assert!(slots.len() >= 2, "too few frames to damage");
    let flipped = (slots[0] * FRAME_SIZE + 2 * PAGE + 700) as usize;
    bytes[flipped] ^= 0x20;
    let torn = (slots[1] * FRAME_SIZE + 3 * PAGE) as usize;
    bytes[torn..torn + PAGE as usize].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    drop_page_cache(dir.path());

    let db = Db::open(dir.path(), options).unwrap();
    let mut named: HashMap<String, u32> = HashMap::new();
    // Twice: a page that failed its check is checked again on every read, never trusted.
    let mut failed = [Vec::new(), Vec::new()];
    // Keys whose failed read walked pages and loaded no frame: the pages on their path hold
    // the damage. (A read that tried to load a damaged frame whole fails whatever its key;
    // a later read of that key walks its pages, the frame's admission count having started
    // again, and serves it.)
    let mut failed_on_pages = std::collections::HashSet::new();
    for (pass, i) in (0..count).map(|i| (0, i)).chain((0..count).map(|i| (1, i))) {
        let before = db.stats();
        let got = db.get(&key(i));
        let after = db.stats();
        let loads_tried =
            (after.frame_reads - before.frame_reads) - (after.frame_image_reads - before.frame_image_reads);
        match got {
            Ok(Some(entry)) => assert_eq!(entry.value, value(i), "key {i} served a wrong value"),
            Ok(None) => panic!("key {i} read as missing instead of failing"),
            Err(Error::Corruption { location, reason }) => {
                assert!(
                    reason.contains("page 2 checksum mismatch")
                        || reason.contains("page 3 checksum mismatch"),
                    "key {i}: {reason}"
                );
                assert!(location.frame.is_some(), "key {i}: corruption without its frame");
                *named.entry(reason.split(':').next().unwrap().to_string()).or_default() += 1;
                failed[pass].push(i);
                if pass == 0 && loads_tried == 0 {
                    failed_on_pages.insert(i);
                }
            }
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    println!("corruption errors by page: {named:?}");
    assert!(named.contains_key("page 2 checksum mismatch"), "the flipped byte was never detected");
    assert!(named.contains_key("page 3 checksum mismatch"), "the torn page was never detected");
    println!(
        "keys failing on each pass: {:?}, on their pages: {}",
        failed.each_ref().map(Vec::len),
        failed_on_pages.len()
    );
    assert!(!failed_on_pages.is_empty(), "no read failed on its pages alone");
    // A damaged page fails the reads that cross it, and a try at loading its frame whole now
    // and then fails one read: not every read of the frame (each try starts its count again).
    for (pass, keys) in failed.iter().enumerate() {
        assert!(keys.len() < 1_000, "pass {pass}: {} of {count} reads failed", keys.len());
    }
    let again: std::collections::HashSet<u32> = failed[1].iter().copied().collect();
    let served = failed_on_pages.iter().filter(|i| !again.contains(i)).count();
    assert_eq!(served, 0, "{served} keys whose pages failed on the first pass were served on the second");
}

/// Point reads of evicted frames that have deltas (keys overwritten or deleted since the
/// frames' images were written) look the key up in the deltas before the image: every key
/// reads back its latest state with the frames evicted and read page by page.
#[test]
fn point_reads_of_frames_with_deltas_see_the_latest_state() {
    let _shared = beside_others();
    let count = 120_000;
    let (mut rng, dir) = seeded_load(count);
    // A few percent of the keys overwritten or deleted, in two checkpoints: chains of deltas.
    let mut model: HashMap<u32, Option<Vec<u8>>> = HashMap::new();
    let db = Db::open(dir.path(), options(usize::MAX)).unwrap();
    for round in 0..2u8 {
        let mut batch = Batch::new();
        for _ in 0..1_500 {
            let i = rng.gen_range(0..count);
            if rng.gen_bool(0.3) {
                batch.delete(key(i));
                model.insert(i, None);
            } else {
                let v = format!("round {round} of {i}").into_bytes();
                batch.put(key(i), v.clone());
                model.insert(i, Some(v));
            }
        }
        db.write_batch(&batch, WriteOptions::default()).unwrap();
        db.checkpoint().unwrap();
    }
    let deltas = db.stats().checkpoint_frames_delta;
    db.close().unwrap();
    assert!(deltas > 0, "the checkpoints wrote no deltas");
    drop_page_cache(dir.path());

    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    for i in 0..count {
        let want = model.get(&i).cloned().unwrap_or_else(|| Some(value(i)));
        assert_eq!(db.get(&key(i)).unwrap().map(|e| e.value), want, "key {i}");
    }
    let stats = db.stats();
    println!(
        "{deltas} frame deltas; {} image reads fetching {} pages, {} frames loaded",
        stats.frame_image_reads, stats.frame_page_reads, stats.frame_loads
    );
    assert!(stats.frame_image_reads > u64::from(count) / 2, "most reads should walk evicted frames");
    db.close().unwrap();
}

/// Walks of evicted frames between checkpoints that append deltas to their chains see each
/// new delta (what a walk kept of a frame must not stand for its chain after a checkpoint).
/// Rounds of: reads that walk the frames, overwrites and deletes recorded unloaded, a
/// checkpoint, then every key written so far read back (the frames' change logs are gone
/// after the checkpoint: the deltas alone hold those writes).
#[test]
fn walks_after_a_checkpoint_appended_deltas_see_them() {
    let _shared = beside_others();
    let count = 120_000;
    let (mut rng, dir) = seeded_load(count);
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let mut model: HashMap<u32, Option<Vec<u8>>> = HashMap::new();
    let want = |model: &HashMap<u32, Option<Vec<u8>>>, i: u32| {
        model.get(&i).cloned().unwrap_or_else(|| Some(value(i)))
    };
    let before = db.stats();
    for round in 0..5u32 {
        for _ in 0..3_000 {
            let i = rng.gen_range(0..count);
            assert_eq!(db.get(&key(i)).unwrap().map(|e| e.value), want(&model, i), "round {round}, key {i}");
        }
        for _ in 0..1_500 {
            let i = rng.gen_range(0..count);
            if rng.gen_bool(0.2) {
                db.delete(&key(i)).unwrap();
                model.insert(i, None);
            } else {
                let v = format!("round {round} of {i}").into_bytes();
                db.put(&key(i), &v).unwrap();
                model.insert(i, Some(v));
            }
        }
        db.checkpoint().unwrap();
        for (&i, v) in &model {
            assert_eq!(db.get(&key(i)).unwrap().map(|e| e.value), v.clone(), "round {round}, key {i}");
        }
    }
    let stats = db.stats();
    let (recorded, deltas) = (
        stats.frame_unloaded_writes - before.frame_unloaded_writes,
        stats.checkpoint_frames_delta - before.checkpoint_frames_delta,
    );
    let walks = stats.frame_image_reads - before.frame_image_reads;
    println!("{recorded} writes recorded unloaded, {deltas} deltas written, {walks} image reads");
    assert!(recorded > 1_000 && deltas > 20, "the evicted frames' chains did not grow");
    assert!(walks > 10_000, "only {walks} reads walked evicted frames' images");
    db.close().unwrap();
}

/// Flips a byte in the body of one frame delta on disk: reads of that frame's keys fail with
/// a corruption error naming the delta's checksum, every other key reads back its latest
/// value, on the first pass and the second (a delta is verified once, when first met, and
/// one that failed is never kept). Deltas lent in place from the mapping of the frames file
/// (the default) and deltas copied by `pread` are checked alike.
#[test]
fn a_corrupt_delta_is_named_never_served() {
    let _shared = beside_others();
    for mapped_reads in [true, false] {
        println!("mapped reads: {mapped_reads}");
        corrupt_delta_is_named(holt_core::Options { mapped_reads, ..options(BUDGET_BYTES) });
    }
}

fn corrupt_delta_is_named(options: holt_core::Options) {
    let dir = scratch_dir();
    let count = 60_000;
    load(dir.path(), count);
    let overwritten = |i: u32| format!("overwritten {i}").into_bytes();
    let db = Db::open(dir.path(), page_cache::options(usize::MAX)).unwrap();
    let mut batch = Batch::new();
    for i in (0..count).step_by(7) {
        batch.put(key(i), overwritten(i));
    }
    db.write_batch(&batch, WriteOptions::default()).unwrap();
    db.checkpoint().unwrap();
    assert!(db.stats().checkpoint_frames_delta > 0, "the checkpoint wrote no deltas");
    db.close().unwrap();
    let want = |i: u32| if i.is_multiple_of(7) { overwritten(i) } else { value(i) };

    let path = dir.path().join("frames.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    // The first delta (magic `HDLT`, at a 4 KiB boundary) with a body, of a frame other than
    // the root's (loaded at open, so its damage fails the open): flip a byte in it.
    let at = (0..bytes.len() / PAGE as usize)
        .map(|p| p * PAGE as usize)
        .find(|&at| {
            let used = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap());
            &bytes[at..at + 4] == b"HDLT" && bytes[at + 8..at + 16] != [0u8; 8] && used > 64
        })
        .expect("no delta in the frames file");
    bytes[at + 40] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    drop_page_cache(dir.path());

    let db = Db::open(dir.path(), options).unwrap();
    let mut failed = [0usize; 2];
    for failed_in_pass in &mut failed {
        for i in 0..count {
            match db.get(&key(i)) {
                Ok(Some(entry)) => assert_eq!(entry.value, want(i), "key {i} served a wrong value"),
                Ok(None) => panic!("key {i} read as missing instead of failing"),
                Err(Error::Corruption { location, reason }) => {
                    assert!(reason.contains("checksum mismatch"), "key {i}: {reason}");
                    let named = location.offset.checked_sub(at as u64);
                    assert!(
                        named.is_some_and(|o| o < PAGE),
                        "key {i}: {reason} at {location:?} is not the delta's"
                    );
                    *failed_in_pass += 1;
                }
                Err(e) => panic!("key {i}: {e}"),
            }
        }
    }
    println!("keys failing on each pass: {failed:?}");
    assert!(failed[0] > 0, "the flipped delta was never detected");
    assert_eq!(
        failed[0], failed[1],
        "a key that failed on the first pass was served on the second, or the reverse"
    );
    db.close().unwrap();
}

/// Point reads of evicted frames (page walks, deltas included) while a writer overwrites
/// keys and checkpoints write deltas and whole frames: no read fails or returns a value
/// that was never written for its key.
#[test]
fn page_walks_race_writes_and_checkpoints() {
    let _shared = beside_others();
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let dir = scratch_dir();
    let count = 100_000;
    load(dir.path(), count);
    let db = std::sync::Arc::new(Db::open(dir.path(), options(BUDGET_BYTES)).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let overwritten = |i: u32, round: u32| format!("overwrite {round} of {i}").into_bytes();
    let writer = {
        let (db, stop) = (std::sync::Arc::clone(&db), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut round = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let mut batch = Batch::new();
                for _ in 0..200 {
                    let i = rng.gen_range(0..count);
                    batch.put(key(i), overwritten(i, round));
                }
                db.write_batch(&batch, WriteOptions::default()).unwrap();
                if round.is_multiple_of(5) {
                    db.checkpoint().unwrap();
                }
            }
            round
        })
    };
    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let (db, stop) = (std::sync::Arc::clone(&db), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (r + 1));
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let i = rng.gen_range(0..count);
                    let got = db.get(&key(i)).unwrap_or_else(|e| panic!("key {i}: {e}"));
                    let read = got.unwrap_or_else(|| panic!("key {i} lost")).value;
                    let prefix = "overwrite ";
                    assert!(
                        read == value(i)
                            || (read.starts_with(prefix.as_bytes())
                                && read.ends_with(format!(" of {i}").as_bytes())),
                        "key {i}: a value never written for it"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let stats = db.stats();
    println!(
        "{rounds} write rounds, {reads} reads, {} image reads, {} deltas written",
        stats.frame_image_reads, stats.checkpoint_frames_delta
    );
    assert!(
        stats.frame_image_reads > 1_000 && stats.checkpoint_frames_delta > 0,
        "the race was not exercised"
    );
}

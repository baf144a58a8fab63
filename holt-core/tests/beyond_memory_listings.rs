//! Listings of a database several times larger than its memory budget, frames evicted and
//! the frames file dropped from the page cache: a listing whose prefix narrows an evicted
//! frame reads only the part of it the prefix leads to (with the frame's deltas and the
//! writes recorded while it was evicted applied), and answers exactly as a model does, with
//! and without a delimiter, from any start and at any page size. A corrupt page on the way
//! is named, never served.

mod page_cache;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use page_cache::{drop_page_cache, options};

use holt_core::{Batch, Db, Error, ListItem, ListRequest, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const FRAME_SIZE: u64 = 512 * 1024;
const PAGE: u64 = 4096;
const BUDGET_BYTES: usize = 4 << 20;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    format!("bucket-{:02}/tenant-{:02}/dir-{:03}/file-{:08}.bin", i % 3, (i / 3) % 20, (i / 60) % 50, i)
        .into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut v = format!("{{\"size\":{i}}}").into_bytes();
    // A few values span pages, so a listed subtree's records cross page boundaries.
    v.resize(if i.is_multiple_of(997) { 9_000 } else { 60 }, b'.');
    v
}

/// Loads the even keys of `0..count` and closes.
fn load(dir: &Path, count: u32) -> Model {
    page_cache::load(dir, (0..count).filter(|i| i % 2 == 0), |i| (key(i), value(i)))
}

fn scratch_dir() -> tempfile::TempDir {
    page_cache::scratch_dir("beyond-listings-")
}

/// Directories of the `wide/` data set, and files in each.
const WIDE_DIRS: u32 = 3_000;
const WIDE_FILES: u32 = 50;

/// File `f` of directory `d` of the `wide/` data set.
fn wide_file(d: u32, f: u32) -> Vec<u8> {
    format!("wide/dir-{d:04}/file-{f:04}.bin").into_bytes()
}

/// Loads the `wide/` data set (every file of every directory) and closes.
fn load_wide(dir: &Path) -> Model {
    let mut model = Model::new();
    let db = Db::open(dir, options(usize::MAX)).unwrap();
    for chunk in (0..WIDE_DIRS).collect::<Vec<_>>().chunks(100) {
        let mut batch = Batch::new();
        for &d in chunk {
            for f in 0..WIDE_FILES {
                let v = format!("{d}/{f}").into_bytes();
                batch.put(wide_file(d, f), v.clone());
                model.insert(wide_file(d, f), v);
            }
        }
        db.write_batch(&batch, WriteOptions::default()).unwrap();
    }
    db.close().unwrap();
    model
}

/// A listed entry: a key with its value, or a common prefix.
#[derive(Debug, PartialEq, Eq)]
enum Item {
    Key(Vec<u8>, Vec<u8>),
    Prefix(Vec<u8>),
}

/// The S3 listing of `model`: names after `start_after`, keys and common prefixes merged in
/// order, at most `limit` of them, and whether more follow.
fn model_list(
    model: &Model,
    prefix: &[u8],
    delimiter: &[u8],
    start_after: &[u8],
    limit: usize,
) -> (Vec<Item>, bool) {
    let mut out: Vec<Item> = Vec::new();
    for (k, v) in model.range(prefix.to_vec()..).take_while(|(k, _)| k.starts_with(prefix)) {
        let rest = &k[prefix.len()..];
        let cut = (!delimiter.is_empty()).then(|| rest.windows(delimiter.len()).position(|w| w == delimiter));
        let item = match cut.flatten() {
            Some(i) => Item::Prefix(k[..prefix.len() + i + delimiter.len()].to_vec()),
            None => Item::Key(k.clone(), v.clone()),
        };
        let name = match &item {
            Item::Key(k, _) | Item::Prefix(k) => k,
        };
        if name.as_slice() <= start_after || out.last() == Some(&item) {
            continue;
        }
        if out.len() == limit {
            return (out, true);
        }
        out.push(item);
    }
    (out, false)
}

fn db_list(
    db: &Db,
    prefix: &[u8],
    delimiter: &[u8],
    start_after: &[u8],
    limit: usize,
) -> Result<(Vec<Item>, bool), Error> {
    let request = ListRequest { prefix, delimiter, start_after, limit, with_values: true };
    let page = db.list(&request)?;
    let items = page
        .items
        .into_iter()
        .map(|item| match item {
            ListItem::Key { key, entry } => Item::Key(key, entry.value),
            ListItem::CommonPrefix(p) => Item::Prefix(p),
        })
        .collect();
    Ok((items, page.truncated))
}

/// A listing prefix of one of the shapes clients send: a directory, part of a file name,
/// part of a directory name, a tenant, a directory that does not exist.
fn random_prefix(rng: &mut StdRng, count: u32) -> Vec<u8> {
    let k = key(rng.gen_range(0..count));
    let dir_end = k.len() - "file-00000000.bin".len();
    let cut = match rng.gen_range(0..6) {
        0 | 1 => dir_end,                                       // bucket-01/tenant-07/dir-012/
        2 => dir_end + "file-0000".len() + rng.gen_range(0..4), // part of a file name
        3 => dir_end - 3,                                       // bucket-01/tenant-07/dir-0
        4 => dir_end - "dir-012/".len(),                        // a tenant
        _ => return format!("bucket-01/tenant-07/dir-9{:02}/", rng.gen_range(0..100)).into_bytes(),
    };
    k[..cut].to_vec()
}

/// Lists `rounds` random requests and checks each page against the model's.
fn check_listings(db: &Db, model: &Model, count: u32, rng: &mut StdRng, rounds: usize, when: &str) {
    for round in 0..rounds {
        let prefix = random_prefix(rng, count);
        let delimiter: &[u8] = if rng.gen_bool(0.5) { b"/" } else { b"" };
        let start_after = match rng.gen_range(0..4) {
            0 => Vec::new(),
            // A key near the prefix, listed or not.
            1 => [&prefix[..], &key(rng.gen_range(0..count))[prefix.len().min(30)..]].concat(),
            // A common prefix, as a delimiter listing's next page starts after one.
            2 => {
                let k = model
                    .range(prefix.clone()..)
                    .nth(rng.gen_range(0..2_000))
                    .map_or(key(0), |(k, _)| k.clone());
                let from = prefix.len().min(k.len());
                k.iter()
                    .skip(from)
                    .position(|&b| b == b'/')
                    .map_or(k.clone(), |at| k[..from + at + 1].to_vec())
            }
            _ => model
                .range(prefix.clone()..)
                .nth(rng.gen_range(0..200))
                .map(|(k, _)| k.clone())
                .unwrap_or_default(),
        };
        let limit = [1, 7, 100, 1_000][rng.gen_range(0..4)];
        let want = model_list(model, &prefix, delimiter, &start_after, limit);
        let got = db_list(db, &prefix, delimiter, &start_after, limit)
            .unwrap_or_else(|e| panic!("{when}, round {round}: {e}"));
        assert!(
            got == want,
            "{when}, round {round}: prefix {:?} delimiter {:?} after {:?} limit {limit}: got {} items \
             (truncated {}), want {} (truncated {})",
            String::from_utf8_lossy(&prefix),
            String::from_utf8_lossy(delimiter),
            String::from_utf8_lossy(&start_after),
            got.0.len(),
            got.1,
            want.0.len(),
            want.1
        );
    }
}

/// Pages through a whole listing `limit` entries at a time, each page starting after the
/// last name of the one before (a key, or a common prefix, as a client's next page does),
/// and checks every page against the model's. Returns the number of pages.
fn page_through(db: &Db, model: &Model, prefix: &[u8], delimiter: &[u8], limit: usize) -> usize {
    let mut start_after = Vec::new();
    let mut pages = 0;
    loop {
        let want = model_list(model, prefix, delimiter, &start_after, limit);
        let got = db_list(db, prefix, delimiter, &start_after, limit).unwrap();
        pages += 1;
        assert!(
            got == want,
            "prefix {:?} delimiter {:?} limit {limit}, page {pages} after {:?}: got {:?} (truncated {}), \
             want {:?} (truncated {})",
            String::from_utf8_lossy(prefix),
            String::from_utf8_lossy(delimiter),
            String::from_utf8_lossy(&start_after),
            got.0,
            got.1,
            want.0,
            want.1
        );
        if !want.1 {
            return pages;
        }
        start_after = match want.0.last().expect("a truncated page has entries") {
            Item::Key(k, _) | Item::Prefix(k) => k.clone(),
        };
    }
}

#[test]
fn listings_of_evicted_frames_with_deltas_and_recorded_writes_match_the_model() {
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);

    // Deltas: keys overwritten, deleted and added (odd keys), in two checkpoints.
    let db = Db::open(dir.path(), options(usize::MAX)).unwrap();
    for round in 0..2u8 {
        let mut batch = Batch::new();
        for _ in 0..2_000 {
            let i = rng.gen_range(0..count);
            if rng.gen_bool(0.3) {
                batch.delete(key(i));
                model.remove(&key(i));
            } else {
                let v = format!("round {round} of {i}").into_bytes();
                batch.put(key(i), v.clone());
                model.insert(key(i), v);
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
    check_listings(&db, &model, count, &mut rng, 300, "with deltas");
    // Delimiter listings paged a few entries at a time, each page after a common prefix.
    for prefix in [&b""[..], b"bucket-01/", b"bucket-02/tenant-07/"] {
        for limit in [1, 2, 3] {
            page_through(&db, &model, prefix, b"/", limit);
        }
    }
    let before = db.stats();

    // Deletes, checkpointed (into deltas); then writes recorded in the change logs of evicted
    // frames (single puts to frames not loaded, overwrites and new keys, and deletes), not
    // checkpointed. A listing lists around deleted keys without decoding what it reads; where
    // it would roll one up, it looks for a key left under the prefix.
    for _ in 0..300 {
        let i = rng.gen_range(0..count);
        db.delete(&key(i)).unwrap();
        model.remove(&key(i));
    }
    db.checkpoint().unwrap();
    for n in 0..3_000 {
        let i = rng.gen_range(0..count);
        if n % 4 == 0 {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
            continue;
        }
        let v = format!("evicted write of {i}").into_bytes();
        db.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let after_writes = db.stats();
    assert!(
        after_writes.frame_unloaded_writes > before.frame_unloaded_writes + 1_000,
        "only {} puts recorded without loading their frames",
        after_writes.frame_unloaded_writes - before.frame_unloaded_writes
    );
    check_listings(&db, &model, count, &mut rng, 1_500, "with recorded writes");
    for prefix in [&b""[..], b"bucket-01/", b"bucket-02/tenant-07/"] {
        for limit in [1, 2, 3] {
            page_through(&db, &model, prefix, b"/", limit);
        }
    }
    // Without a delimiter every deleted key is listed as itself: pages of a few keys each.
    for prefix in [&b"bucket-02/tenant-07/dir-010/"[..], b"bucket-01/tenant-03/"] {
        for limit in [1, 3, 50] {
            page_through(&db, &model, prefix, b"", limit);
        }
    }
    let stats = db.stats();
    let walks = stats.frame_image_reads - after_writes.frame_image_reads;
    let loads = stats.frame_loads - after_writes.frame_loads;
    let pages = stats.frame_page_reads - after_writes.frame_page_reads;
    println!(
        "{} frames, {deltas} deltas; 1,500 listings: {walks} partial reads fetching {pages} pages, \
         {loads} frames loaded",
        stats.frames
    );
    // Most listings narrow an evicted frame to a directory or less and read a part of it;
    // a tenant's listing (one prefix shape in six) loads what it spans.
    assert!(walks > 800, "only {walks} listings read part of an evicted frame");
    assert!(loads < walks, "{loads} frames loaded for {walks} partial reads");
    db.close().unwrap();

    // The same after a reopen, with the logs replayed from the write-ahead log.
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    check_listings(&db, &model, count, &mut rng, 300, "after reopen");
    db.close().unwrap();
}

/// Flips a byte in a page of one frame: listings that reach the page fail with a corruption
/// error naming it; every other listing answers as the model does.
#[test]
fn a_corrupt_page_under_a_listing_is_named_never_served() {
    let dir = scratch_dir();
    let count = 120_000;
    let model = load(dir.path(), count);
    let path = dir.path().join("frames.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    // A slot holding a frame image other than the root's, with at least 8 pages of records.
    let slot = (0..bytes.len() as u64 / FRAME_SIZE)
        .find(|&s| {
            let at = (s * FRAME_SIZE) as usize;
            let head = &bytes[at..at + 32];
            let used = u32::from_le_bytes(head[16..20].try_into().unwrap()) as u64;
            &head[..4] == b"HFRM" && head[8..16] != [0u8; 8] && used > 8 * PAGE
        })
        .expect("a frame to damage");
    let flipped = (slot * FRAME_SIZE + 5 * PAGE + 900) as usize;
    bytes[flipped] ^= 0x08;
    std::fs::write(&path, &bytes).unwrap();
    drop_page_cache(dir.path());

    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let mut detected = 0;
    // Every directory, with and without a delimiter.
    let dirs: std::collections::BTreeSet<Vec<u8>> = (0..count).map(|i| key(i)[..28].to_vec()).collect();
    for (n, prefix) in dirs.iter().enumerate() {
        let delimiter: &[u8] = if n % 2 == 0 { b"/" } else { b"" };
        match db_list(&db, prefix, delimiter, b"", 10_000) {
            Ok(got) => assert!(
                got == model_list(&model, prefix, delimiter, b"", 10_000),
                "{} listed wrongly",
                String::from_utf8_lossy(prefix)
            ),
            Err(Error::Corruption { location, reason }) => {
                assert!(reason.contains("page 5 checksum mismatch"), "{reason}");
                assert!(location.frame.is_some(), "corruption without its frame");
                detected += 1;
            }
            Err(e) => panic!("{}: {e}", String::from_utf8_lossy(prefix)),
        }
    }
    println!("{detected} of {} directory listings met the damaged page", dirs.len());
    assert!(detected > 0, "the flipped byte was never detected");
}

/// A rollup over large directories spread over many frames (the bucket root of a bucket of
/// large directories), reopened with the frames evicted: the walk reads each frame's upper
/// records (rolling a directory up at its first delimiter, without reading its keys) and
/// tells linked frames' first bytes from their images' root records, loading no frame, and
/// the page matches the model's.
#[test]
fn rollups_over_evicted_frames_do_not_load_them() {
    let dir = scratch_dir();
    let dirs = 150u32;
    let per_dir = 1_500u32;
    let wide_key = |d: u32, f: u32| format!("wide/dir-{d:04}/file-{f:06}.bin").into_bytes();
    let mut model = Model::new();
    {
        let db = Db::open(dir.path(), options(usize::MAX)).unwrap();
        for d in 0..dirs {
            let mut batch = Batch::new();
            for f in 0..per_dir {
                let v = format!("{d}/{f}").into_bytes();
                batch.put(wide_key(d, f), v.clone());
                model.insert(wide_key(d, f), v);
            }
            db.write_batch(&batch, WriteOptions::default()).unwrap();
        }
        db.close().unwrap();
    }
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let frames = db.stats().frames;
    let mut loads = Vec::new();
    for pass in 0..2 {
        let before = db.stats();
        let got = db_list(&db, b"wide/", b"/", b"", 1_000).unwrap();
        assert!(got == model_list(&model, b"wide/", b"/", b"", 1_000), "pass {pass}: the rollup differs");
        assert_eq!(got.0.len(), dirs as usize);
        let after = db.stats();
        loads.push(after.frame_loads - before.frame_loads);
    }
    // The same rollup paged one, two and three entries at a time: each page starts after a
    // common prefix, whose own keys lie past the start bound but are not listed.
    for limit in [1, 2, 3] {
        let pages = page_through(&db, &model, b"wide/", b"/", limit);
        assert_eq!(pages, (dirs as usize).div_ceil(limit));
    }
    println!("{frames} frames for {dirs} directories; frames loaded by the two rollups: {loads:?}");
    assert!(frames >= 10, "only {frames} frames");
    // A frame holding the bucket's upper levels may be loaded; the directories' are not.
    assert!(loads[0] <= 2 && loads[1] <= 2, "frames loaded: {loads:?} of {frames}");
    db.close().unwrap();
}

/// Every second key under a directory deleted while its frame is evicted (recorded in the
/// frame's change log, not checkpointed), then the directory paged a key or two at a time,
/// with and without a delimiter: every page matches the model, with no deleted key listed and
/// none of the others missed or cut short, and the pages read the evicted frame in part.
#[test]
fn pages_of_an_evicted_frame_list_around_its_recorded_deletes() {
    let dir = scratch_dir();
    let count = 240_000;
    let mut model = load(dir.path(), count);
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    // The cache filled with other buckets' frames, so the directory's frames stay evicted.
    for i in (0..count).step_by(3 * 7) {
        db.get(&key(i)).unwrap();
    }
    let prefix = b"bucket-01/tenant-07/dir-010/".to_vec();
    let under: Vec<Vec<u8>> = model
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(k, _)| k.clone())
        .collect();
    assert!(under.len() > 40, "{} keys under the directory", under.len());
    let before = db.stats();
    for k in under.iter().step_by(2) {
        assert!(db.delete(k).unwrap());
        model.remove(k);
    }
    let after_deletes = db.stats();
    let recorded = after_deletes.frame_unloaded_writes - before.frame_unloaded_writes;
    assert!(
        recorded * 2 > under.len() as u64 / 2,
        "only {recorded} deletes recorded without loading their frame"
    );
    for limit in [1, 2, 5] {
        page_through(&db, &model, &prefix, b"", limit);
        page_through(&db, &model, &prefix, b"/", limit);
        page_through(&db, &model, b"bucket-01/tenant-07/", b"/", limit);
    }
    let stats = db.stats();
    println!(
        "{} keys under the directory, {recorded} deletes recorded unloaded; {} partial reads, {} loads",
        under.len(),
        stats.frame_image_reads - after_deletes.frame_image_reads,
        stats.frame_loads - after_deletes.frame_loads
    );
    assert!(
        stats.frame_image_reads > after_deletes.frame_image_reads,
        "no page read the evicted frame in part"
    );
    db.close().unwrap();
}

/// A rollup over evicted frames whose changes since their images (deltas, then writes
/// recorded in their change logs) delete keys the page rolls up: directories emptied, left
/// with one key, emptied and given a new key, and names put and deleted again. The page
/// drops exactly the prefixes left with no key (the walk looks for a key not deleted under
/// each prefix, a few records, rather than decoding the frame), loads no frame once the cache
/// is full, and matches the model's.
#[test]
fn rollups_over_evicted_frames_drop_the_prefixes_their_deletes_emptied() {
    let dir = scratch_dir();
    let (dirs, per_dir, file) = (WIDE_DIRS, WIDE_FILES, wide_file);
    let mut model = load_wide(dir.path());
    // Each variant on directories spread over the frames: `first` and then every 97th.
    let change = |db: &Db, model: &mut Model, first: u32| {
        for d in (first..dirs).step_by(97) {
            match first % 5 {
                // Emptied.
                0 => (0..per_dir).for_each(|f| {
                    db.delete(&file(d, f)).unwrap();
                    model.remove(&file(d, f));
                }),
                // Left with one key.
                1 => (0..per_dir).filter(|&f| f != per_dir / 2).for_each(|f| {
                    db.delete(&file(d, f)).unwrap();
                    model.remove(&file(d, f));
                }),
                // Emptied, then given a key it did not hold.
                2 => {
                    (0..per_dir).for_each(|f| {
                        db.delete(&file(d, f)).unwrap();
                        model.remove(&file(d, f));
                    });
                    db.put(&file(d, 9_999), b"new").unwrap();
                    model.insert(file(d, 9_999), b"new".to_vec());
                }
                // A name put and deleted again beside the directory's keys (a temporary
                // file), and in a directory of its own.
                3 => {
                    let tmp = [&file(d, 0)[..], b".tmp"].concat();
                    let alone = format!("wide/dir-{d:04}-tmp/part").into_bytes();
                    for k in [&tmp, &alone] {
                        db.put(k, b"tmp").unwrap();
                        db.delete(k).unwrap();
                    }
                }
                // Emptied but for a key put and deleted again.
                _ => {
                    let tmp = [&file(d, 0)[..], b".tmp"].concat();
                    db.put(&tmp, b"tmp").unwrap();
                    (0..per_dir).for_each(|f| {
                        db.delete(&file(d, f)).unwrap();
                        model.remove(&file(d, f));
                    });
                    db.delete(&tmp).unwrap();
                }
            }
        }
    };
    // Checkpointed into deltas.
    {
        let db = Db::open(dir.path(), options(usize::MAX)).unwrap();
        for first in 0..5 {
            change(&db, &mut model, first);
        }
        db.checkpoint().unwrap();
        assert!(db.stats().checkpoint_frames_delta > 10, "the checkpoint wrote few deltas");
        db.close().unwrap();
    }
    // The page is measured in a full cache, settled: writes recorded in change logs make no
    // eviction pass of their own, so the background checkpointer evicts clean frames once
    // the logs push the cache past its budget (or starts a checkpoint, which takes the logs
    // from its start and is counted at its end). A page running meanwhile finds the room
    // just made and loads frames into it, as it should while the cache has room. So: wait
    // until the cache is within its budget and no checkpoint runs, then fill it with reads
    // of every directory, and measure again if a checkpoint ran all the same.
    let settle = |db: &Db| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let stats = db.stats();
            if stats.cache_bytes <= BUDGET_BYTES as u64 && !stats.checkpoint_running {
                break;
            }
            assert!(Instant::now() < deadline, "the cache did not settle within its budget: {stats:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        (0..dirs).for_each(|d| drop(db.get(&file(d, 0)).unwrap()));
        db.stats().checkpoints
    };
    let check = |db: &Db, model: &Model, when: &str| {
        for attempt in 1.. {
            let checkpoints = settle(db);
            let before = db.stats();
            let got = db_list(db, b"wide/", b"/", b"", 1_000).unwrap();
            assert!(got == model_list(model, b"wide/", b"/", b"", 1_000), "{when}: the rollup differs");
            let after = db.stats();
            let walks = after.frame_image_reads - before.frame_image_reads;
            let loads = after.frame_loads - before.frame_loads;
            if (after.checkpoints != checkpoints || after.checkpoint_running) && attempt < 5 {
                println!("{when}: a checkpoint ran; {loads} frames loaded into the room it freed");
                continue;
            }
            for limit in [7, 1_000] {
                page_through(db, model, b"wide/", b"/", limit);
            }
            println!(
                "{when}: {} frames, first page: {walks} partial reads, {loads} frames loaded",
                after.frames
            );
            // At most one, into the room the last fill read's eviction may have left.
            assert!(loads <= 1, "{when}: {loads} frames loaded by the rollup");
            break;
        }
    };
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    check(&db, &model, "deltas");
    // Recorded in the change logs of the evicted frames, on other directories.
    for first in 5..10 {
        change(&db, &mut model, first);
    }
    check(&db, &model, "deltas and recorded writes");
    db.close().unwrap();
}

/// A key put at a directory's own name (`wide/dir-0042` beside `wide/dir-0042/...`, a file
/// and a folder of the same name) in an evicted frame, recorded without loading it: the
/// rollup of the frame's pages keeps the directory as a common prefix beside the new key.
/// Each such key splits the node the page rolls up without reading inside (its stub), just
/// above the delimiter; the stub once took the new key's place and the prefix was lost.
#[test]
fn rollups_over_evicted_frames_keep_a_directory_beside_a_key_of_its_name() {
    let dir = scratch_dir();
    let dirs = WIDE_DIRS;
    let mut model = load_wide(dir.path());
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    // The first rollup fills the cache; the frames after it stay evicted.
    page_through(&db, &model, b"wide/", b"/", 1_000);
    let before = db.stats();
    for d in (13..dirs).step_by(97) {
        let name = format!("wide/dir-{d:04}").into_bytes();
        db.put(&name, b"a file").unwrap();
        model.insert(name, b"a file".to_vec());
    }
    let recorded = db.stats().frame_unloaded_writes - before.frame_unloaded_writes;
    assert!(recorded > 10, "only {recorded} of the puts recorded without loading their frame");
    for limit in [1, 2, 7, 1_000] {
        page_through(&db, &model, b"wide/", b"/", limit);
    }
    db.close().unwrap();
}

/// File `f` of directory `d` in the scan tests' data set (1,500 files a directory).
fn scan_file(d: u32, f: u32) -> Vec<u8> {
    format!("wide/dir-{d:04}/file-{f:06}.bin").into_bytes()
}

/// The scan tests' value of record `i`: 100 bytes.
fn scan_value(i: u32) -> Vec<u8> {
    let mut value = format!("{i}").into_bytes();
    value.resize(100, b'.');
    value
}

/// Short listings without a delimiter (the first keys of a directory, or the keys after a
/// start in the middle of one) of evicted frames whose directories hold 1,500 keys of 100-byte
/// values each: a listing reads a few pages of the frame, not every record of the subtree
/// after its start (a directory's first 1,000 keys, about 28 pages, decoded whole for a page
/// of five), and matches the model.
#[test]
fn short_scans_of_evicted_frames_read_a_few_pages_not_the_subtrees_they_start_in() {
    let dir = scratch_dir();
    let dirs = 150u32;
    let per_dir = 1_500u32;
    let wide_key = scan_file;
    let model = page_cache::load(dir.path(), 0..dirs * per_dir, |i| {
        (wide_key(i / per_dir, i % per_dir), scan_value(i))
    });
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let frames = db.stats().frames;
    let before = db.stats();
    let mut listings = 0u64;
    for d in 0..dirs {
        let prefix = format!("wide/dir-{d:04}/").into_bytes();
        let starts = [Vec::new(), wide_key(d, 999), wide_key(d, 99)];
        for start in &starts {
            let got = db_list(&db, &prefix, b"", start, 5).unwrap();
            assert!(got == model_list(&model, &prefix, b"", start, 5), "{:?} after {start:?}", prefix);
            listings += 1;
        }
    }
    let after = db.stats();
    let walks = after.frame_image_reads - before.frame_image_reads;
    let loads = after.frame_loads - before.frame_loads;
    let pages = after.frame_page_reads - before.frame_page_reads;
    println!(
        "{frames} frames; {listings} listings of 5 keys: {walks} partial reads, {pages} pages, {loads} loads"
    );
    assert!(walks >= listings / 2, "only {walks} of {listings} listings read part of an evicted frame");
    // A listing's path crosses a frame's header page and a page or two on each level;
    // decoding the subtree after the start fetched every page of it.
    assert!(pages <= 4 * walks, "{pages} pages for {walks} partial reads");
    db.close().unwrap();
}

/// A scan through an evicted frame that links to another evicted frame, both with writes
/// recorded since their images: the parent's new keys that sort before the linked frame's
/// keys (`dir-0005.new` before `dir-0005/…`) are listed before them, and its later ones after
/// them, as the model lists them.
#[test]
fn scans_list_a_frames_changes_around_the_frames_it_links_to() {
    let dir = scratch_dir();
    let dirs = 60u32;
    let per_dir = 1_500u32;
    let (wide_key, value) = (scan_file, scan_value);
    let meta_key = |d: u32, name: &str| format!("wide/dir-{d:04}.{name}").into_bytes();
    // Each directory's files, and beside each a key of the directory's name (`.meta`), which
    // the frame above the directories' frames holds.
    let mut model = page_cache::load(dir.path(), 0..dirs * (per_dir + 1), |i| {
        let (d, f) = (i / (per_dir + 1), i % (per_dir + 1));
        match f {
            0 => (meta_key(d, "meta"), value(i)),
            f => (wide_key(d, f - 1), value(i)),
        }
    });
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), options(BUDGET_BYTES)).unwrap();
    let before = db.stats();
    // Writes recorded in the evicted frames' change logs: a new key beside each directory's
    // `.meta` (after it, before the directory's keys: '.' sorts before '/'), a new key after
    // the directory (`dir-NNNN0`), and an overwrite of a file in it.
    for d in 0..dirs {
        for (key, v) in [
            (meta_key(d, "new"), b"new".to_vec()),
            (format!("wide/dir-{d:04}0").into_bytes(), b"after".to_vec()),
            (wide_key(d, 3), b"overwritten".to_vec()),
        ] {
            db.put(&key, &v).unwrap();
            model.insert(key, v);
        }
    }
    let after = db.stats();
    assert!(
        after.frame_unloaded_writes - before.frame_unloaded_writes >= u64::from(dirs),
        "only {} writes recorded without loading their frames",
        after.frame_unloaded_writes - before.frame_unloaded_writes
    );
    for d in 0..dirs {
        let prefix = format!("wide/dir-{d:04}").into_bytes();
        for start in [Vec::new(), meta_key(d, "meta"), meta_key(d, "new")] {
            for limit in [2, 5, 1_000] {
                let got = db_list(&db, &prefix, b"", &start, limit).unwrap();
                let want = model_list(&model, &prefix, b"", &start, limit);
                assert!(got == want, "prefix {prefix:?} after {start:?} limit {limit}");
            }
        }
    }
    page_through(&db, &model, b"wide/", b"", 700);
    let stats = db.stats();
    println!(
        "{} frames; partial reads {}, loads {}",
        stats.frames,
        stats.frame_image_reads - after.frame_image_reads,
        stats.frame_loads - after.frame_loads
    );
    db.close().unwrap();
}

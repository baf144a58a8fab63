//! Invariant: a frame whose checkpoint wrote only the keys that changed (a delta on top of its
//! whole image, see "Frame deltas" in ARCHITECTURE.md) reads back exactly as it was when
//! captured: every value and version, no deleted key back, none missing. It holds however
//! the frame is read afterwards: loaded (image, then every delta in order), or, while the
//! cache is full, by a point read that would otherwise walk the image alone (stale once a
//! delta exists). Chains end: past `DELTA_CHAIN_MAX` deltas the chain is merged into one
//! delta while that is small, else (and past the chain's size budget) the frame is written
//! whole again.
//!
//! A frame whose deltas reads keep verifying again (their share of the cache holds other
//! frames') is written whole by the next checkpoint, though clean, and reads the same.
//!
//! And whichever I/O operation of a checkpoint that writes deltas, merges a chain, or
//! rewrites frames for their reads fails (the n-th, once or forever), after a crash the
//! oracle holds (crash model: `SimFs::crash`).

mod oracle;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use holt_core::io::{Fault, FaultError, SimFs, Vfs};
use holt_core::{Batch, Condition, Db, Durability, Options, WriteOptions};

type Model = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

fn key(i: u64) -> Vec<u8> {
    format!("tenant-{:02}/dir-{:03}/object-{i:07}", i % 7, (i / 7) % 40).into_bytes()
}

fn options(memory_budget_bytes: usize) -> Options {
    Options {
        durability: Durability::Async,
        memory_budget_bytes,
        // Only the test's checkpoints run.
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn load(db: &Db, model: &mut Model, keys: u64) {
    for chunk in (0..keys).collect::<Vec<_>>().chunks(500) {
        let mut batch = Batch::new();
        for &i in chunk {
            batch.put(key(i), format!("first value of {i}").into_bytes());
        }
        let version = db.write_batch(&batch, WriteOptions::default()).expect("load");
        for &i in chunk {
            model.insert(key(i), (format!("first value of {i}").into_bytes(), version.0));
        }
    }
}

/// Every key of the model through point reads (value and version), then the whole
/// database through a scan.
fn check(db: &Db, model: &Model, context: &str) {
    for (k, (v, version)) in model {
        let got = db.get(k).expect("get");
        let got = got.map(|e| (e.value, e.version.0));
        assert_eq!(got.as_ref(), Some(&(v.clone(), *version)), "{context}: {}", String::from_utf8_lossy(k));
    }
    let got = oracle::dump(db);
    let want: Vec<(Vec<u8>, Vec<u8>, u64)> =
        model.iter().map(|(k, (v, ver))| (k.clone(), v.clone(), *ver)).collect();
    assert_eq!(got.len(), want.len(), "{context}: key count");
    assert!(got == want, "{context}: scan differs from the model");
}

/// Closes `db`, opens the database in `dir` again with a cache that holds it all, and checks
/// it against `model`; returns the reopened handle.
fn reopen_and_check(db: Db, dir: &std::path::Path, model: &Model, context: &str) -> Db {
    db.close().expect("close");
    let db = Db::open(dir, options(1 << 30)).expect("reopen");
    check(&db, model, context);
    db
}

/// A database of `keys` keys over several frames, checkpointed: its directory, handle, model
/// and the stats after that first checkpoint.
fn loaded(keys: u64) -> (tempfile::TempDir, Db, Model, holt_core::Stats) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = Db::open(dir.path(), options(1 << 30)).expect("open");
    let mut model = Model::new();
    load(&db, &mut model, keys);
    db.checkpoint().expect("first checkpoint");
    let first = db.stats();
    assert!(first.frames > 4, "the test needs several frames, got {}", first.frames);
    (dir, db, model, first)
}

#[test]
fn deltas_read_back_exactly_through_reopen_and_a_full_cache() {
    let seed = oracle::seed("deltas_read_back_exactly_through_reopen_and_a_full_cache");
    let keys = 30_000u64;
    let (dir, db, mut model, first) = loaded(keys);
    assert_eq!(first.checkpoint_frames_delta, 0, "nothing on disk to be a delta of");

    let mut rng = seed;
    let mut next_new = keys;
    let mut deltas_seen = Vec::new();
    for round in 0..7 {
        for _ in 0..600 {
            let r = oracle::next(&mut rng);
            match r % 20 {
                0..=13 => {
                    let k = key(oracle::next(&mut rng) % next_new);
                    let v = format!("round {round} value {}", r % 1000).into_bytes();
                    let version = db.put(&k, &v).expect("overwrite");
                    model.insert(k, (v, version.0));
                }
                14..=16 => {
                    let k = key(oracle::next(&mut rng) % next_new);
                    db.delete_with(&k, Condition::None, WriteOptions::default()).expect("delete");
                    model.remove(&k);
                }
                _ => {
                    let k = key(next_new);
                    next_new += 1;
                    let version = db.put(&k, b"new").expect("insert");
                    model.insert(k, (b"new".to_vec(), version.0));
                }
            }
        }
        db.checkpoint().expect("checkpoint");
        deltas_seen.push(db.stats().checkpoint_frames_delta);
        check(&db, &model, &format!("round {round}, before reopening"));
    }
    let last = db.stats();
    assert!(deltas_seen[0] > 0, "the first round's checkpoint wrote no delta: {deltas_seen:?}");
    assert!(
        last.checkpoint_frames_whole > first.checkpoint_frames_whole,
        "seven rounds never ended a chain (deltas after each round: {deltas_seen:?})"
    );
    db.close().expect("close");

    // A tiny cache: every frame but the root is read from disk, and point reads walk images
    // where they may (never for a frame with deltas: its image alone is stale).
    let db = Db::open(dir.path(), options(64 << 10)).expect("reopen with a tiny cache");
    check(&db, &model, "reopened with a tiny cache");
    assert!(db.stats().frame_reads > 0);
    reopen_and_check(db, dir.path(), &model, "reopened");
}

/// `count` overwrites of random keys below `keys`, each value naming `label`, recorded in
/// `model`.
fn overwrite_random(db: &Db, model: &mut Model, rng: &mut u64, keys: u64, count: u64, label: &str) {
    for _ in 0..count {
        let k = key(oracle::next(rng) % keys);
        let v = format!("{label} value {}", oracle::next(rng) % 1000).into_bytes();
        let version = db.put(&k, &v).expect("overwrite");
        model.insert(k, (v, version.0));
    }
}

#[test]
fn full_chains_of_small_deltas_are_merged_and_read_back_exactly() {
    let seed = oracle::seed("full_chains_of_small_deltas_are_merged_and_read_back_exactly");
    let keys = 30_000u64;
    let (dir, db, mut model, first) = loaded(keys);
    let mut rng = seed;
    // Two overwrites a frame between checkpoints (the shape of sparse random writes over a
    // large tree): every chain fills with tiny deltas, three times over.
    let mut merged_seen = Vec::new();
    for round in 0..12 {
        overwrite_random(&db, &mut model, &mut rng, keys, 2 * first.frames, &format!("round {round}"));
        db.checkpoint().expect("checkpoint");
        merged_seen.push(db.stats().checkpoint_chains_merged);
        check(&db, &model, &format!("round {round}, before reopening"));
    }
    let last = db.stats();
    assert!(last.checkpoint_chains_merged > 0, "no full chain was merged: {merged_seen:?}");
    assert_eq!(
        last.checkpoint_frames_whole, first.checkpoint_frames_whole,
        "a full chain of tiny deltas was rebuilt whole (merges after each round: {merged_seen:?})"
    );
    db.close().expect("close");
    // Loads apply the merged chains; point reads through a full cache search them.
    let db = Db::open(dir.path(), options(64 << 10)).expect("reopen with a tiny cache");
    check(&db, &model, "reopened with a tiny cache");
    // Evicted frames: the writes are recorded in their change logs (no root to capture), and
    // the checkpoints merge their full chains from disk.
    let before = db.stats();
    for round in 0..4 {
        overwrite_random(
            &db,
            &mut model,
            &mut rng,
            keys,
            2 * first.frames,
            &format!("evicted round {round}"),
        );
        db.checkpoint().expect("checkpoint");
    }
    let after = db.stats();
    assert!(after.frame_unloaded_writes > before.frame_unloaded_writes, "no write was recorded unloaded");
    assert!(
        after.checkpoint_chains_merged > before.checkpoint_chains_merged,
        "no evicted frame's chain was merged: {after:?}"
    );
    check(&db, &model, "after merging evicted frames' chains");
    reopen_and_check(db, dir.path(), &model, "reopened");
}

/// A closed database of several frames, each with a delta (a tenth of its keys overwritten
/// after its first checkpoint): the key count, directory, model and generator to go on with.
fn with_deltas(seed: u64) -> (u64, tempfile::TempDir, Model, u64) {
    let keys = 30_000u64;
    let (dir, db, mut model, _) = loaded(keys);
    let mut rng = seed;
    overwrite_random(&db, &mut model, &mut rng, keys, keys / 10, "delta");
    db.checkpoint().expect("checkpoint of the overwrites");
    let written = db.stats();
    assert!(
        written.frames > 4 && written.checkpoint_frames_delta >= written.frames - 1,
        "too few frames or deltas to test with: {written:?}"
    );
    db.close().expect("close");
    (keys, dir, model, rng)
}

#[test]
fn frames_whose_deltas_reads_keep_verifying_are_written_whole() {
    let (keys, dir, mut model, mut rng) =
        with_deltas(oracle::seed("frames_whose_deltas_reads_keep_verifying_are_written_whole"));

    // A tiny cache: the deltas' share of it (an eighth) holds no frame's, so every read of
    // an evicted frame verifies its chain again.
    let db = Db::open(dir.path(), options(64 << 10)).expect("reopen with a tiny cache");
    random_reads(&db, &model, &mut rng, 2 * keys);
    let read = db.stats();
    assert!(read.frame_delta_verifies > 1000, "the reads verified few deltas: {read:?}");
    assert_eq!(read.checkpoint_frames_rewritten, 0, "rewritten before a checkpoint: {read:?}");

    // The next checkpoint writes the frames whole, though none changed.
    db.checkpoint().expect("checkpoint of the frames the reads want rewritten");
    let rewritten = db.stats();
    // Every frame but the root, which stays resident (its reads walk no deltas).
    assert_eq!(
        rewritten.checkpoint_frames_rewritten,
        rewritten.frames - 1,
        "the checkpoint did not rewrite every evicted frame: {rewritten:?}"
    );
    assert_eq!(
        rewritten.checkpoint_frames_whole - read.checkpoint_frames_whole,
        rewritten.checkpoint_frames_rewritten,
        "frames written whole for another reason, or rewrites counted without a write"
    );
    assert_eq!(rewritten.checkpoint_frames_delta, read.checkpoint_frames_delta, "a delta was written");
    check(&db, &model, "after the rewrite");
    random_reads(&db, &model, &mut rng, 2 * keys);
    let again = db.stats();
    assert_eq!(
        again.frame_delta_verifies, rewritten.frame_delta_verifies,
        "reads after the rewrite still verified deltas"
    );
    // The chains are gone: nothing asks for another rewrite.
    db.checkpoint().expect("checkpoint after the rewrite");
    assert_eq!(db.stats().checkpoint_frames_rewritten, rewritten.checkpoint_frames_rewritten);

    // Writes after the rewrite make deltas of the new images.
    overwrite_random(&db, &mut model, &mut rng, keys, 500, "after the rewrite");
    db.checkpoint().expect("checkpoint of writes after the rewrite");
    check(&db, &model, "writes after the rewrite");
    reopen_and_check(db, dir.path(), &model, "reopened after the rewrite");
}

#[test]
fn the_background_checkpointer_rewrites_frames_whose_deltas_reads_keep_verifying() {
    let (keys, dir, model, mut rng) = with_deltas(oracle::seed(
        "the_background_checkpointer_rewrites_frames_whose_deltas_reads_keep_verifying",
    ));

    // The interval is an hour: only the bytes the reads verify again can start a checkpoint.
    let opts = Options { checkpoint_wal_bytes: 4 << 20, ..options(64 << 10) };
    let db = Db::open(dir.path(), opts).expect("reopen with a tiny cache");
    let frames = db.stats().frames;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while db.stats().checkpoint_frames_rewritten < frames - 1 {
        assert!(std::time::Instant::now() < deadline, "no rewrite after a minute of reads: {:?}", db.stats());
        random_reads(&db, &model, &mut rng, 1000);
    }
    let rewritten = db.stats();
    assert_eq!(rewritten.checkpoint_frames_rewritten, frames - 1, "{rewritten:?}");
    assert_eq!(rewritten.checkpoint_frames_delta, 0, "{rewritten:?}");
    random_reads(&db, &model, &mut rng, keys);
    assert_eq!(
        db.stats().frame_delta_verifies,
        rewritten.frame_delta_verifies,
        "reads verified deltas after"
    );
    check(&db, &model, "after the background rewrite");
    reopen_and_check(db, dir.path(), &model, "reopened after the background rewrite");
}

#[test]
fn frames_that_listings_keep_merging_chains_of_are_written_whole() {
    let (_, dir, model, _) =
        with_deltas(oracle::seed("frames_that_listings_keep_merging_chains_of_are_written_whole"));

    // Rolled-up listings of each tenant's directories through a cache that holds the root
    // frame and the chains' indexes (an eighth of it) but no other frame: each listing enters
    // the evicted frames holding the directories and merges their kept chains on the way.
    let db = Db::open(dir.path(), options(512 << 10)).expect("reopen with a small cache");
    let pages = |db: &Db| -> Vec<holt_core::ListPage> {
        (0..7)
            .map(|t| {
                let prefix = format!("tenant-{t:02}/");
                let request = holt_core::ListRequest {
                    prefix: prefix.as_bytes(),
                    delimiter: b"/",
                    start_after: b"",
                    limit: 1000,
                    with_values: false,
                };
                db.list(&request).expect("list")
            })
            .collect()
    };
    let first = pages(&db);
    for page in &first {
        assert_eq!(page.items.len(), 40, "every tenant has forty directories");
    }
    let before = db.stats();
    for _ in 0..300 {
        assert!(pages(&db) == first, "a listing changed while nothing was written");
    }
    let listed = db.stats();
    assert_eq!(listed.checkpoint_frames_rewritten, 0);
    assert!(listed.frame_image_reads > before.frame_image_reads + 1000, "frames were loaded: {listed:?}");
    // A few re-verified (a frame loaded drops its kept chain), far from enough to ask for a
    // rewrite: the listings' merges of the kept chains do.
    assert!(
        listed.frame_delta_verifies - before.frame_delta_verifies < 50,
        "the chains were not kept: {before:?} {listed:?}"
    );
    db.checkpoint().expect("checkpoint of the frames the listings want rewritten");
    let rewritten = db.stats();
    assert!(rewritten.checkpoint_frames_rewritten > 0, "no frame was rewritten: {rewritten:?}");
    assert_eq!(rewritten.checkpoint_frames_delta, 0, "{rewritten:?}");
    assert!(pages(&db) == first, "the listings changed when their frames were rewritten");
    check(&db, &model, "after the listings' rewrite");
    let db = reopen_and_check(db, dir.path(), &model, "reopened after the listings' rewrite");
    assert!(pages(&db) == first, "the listings changed across a reopen");
}

/// `count` point reads of keys of `model` in random order (a read in key order passes each
/// frame once), each checked against it.
fn random_reads(db: &Db, model: &Model, rng: &mut u64, count: u64) {
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    for _ in 0..count {
        let k = keys[(oracle::next(rng) % keys.len() as u64) as usize];
        let got = db.get(k).expect("get").map(|e| (e.value, e.version.0));
        assert_eq!(got.as_ref(), model.get(k), "{}", String::from_utf8_lossy(k));
    }
}

/// One count-up case for a checkpoint that writes whole the clean, evicted frames whose
/// deltas reads kept verifying (`checkpoint_frames_rewritten`), its n-th I/O operation
/// failing (once or forever); then more writes, a checkpoint, a crash, and the oracle.
fn rewrite_countup_case(seed: u64, n: u64, forever: bool) {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    let opts = Options { checkpoint_wal_bytes: u64::MAX, memory_budget_bytes: 64 << 10, ..oracle::opts() };
    let db = Db::open_with_vfs(vfs.clone(), opts.clone()).expect("open fresh");
    let mut history = oracle::History::default();
    let name = |i: u64| format!("t{}/d{:02}/f{:05}", i % 3, (i / 3) % 20, i).into_bytes();
    let write = |history: &mut oracle::History, keys: &[u64], value: &[u8]| {
        let mut batch = Batch::new();
        let mut ops = Vec::new();
        for &i in keys {
            batch.put(name(i), value.to_vec());
            ops.push((name(i), Some(value.to_vec())));
        }
        let result = db.write_batch(&batch, WriteOptions::default()).map(|v| v.0);
        assert!(result.is_ok(), "write: {result:?}");
        history.record(ops, &result);
    };
    // Batches small enough for the 4 KiB log ring of `oracle::opts`.
    let keys = 8_000u64;
    for chunk in (0..keys).collect::<Vec<_>>().chunks(20) {
        write(&mut history, chunk, b"preloaded value, long enough to fill several frames");
    }
    db.checkpoint().expect("checkpoint of the preload");
    assert!(db.stats().frames >= 2, "the preload needs a frame besides the root: {:?}", db.stats());
    for chunk in (0..keys).step_by(7).collect::<Vec<_>>().chunks(20) {
        write(&mut history, chunk, b"overwritten");
    }
    db.checkpoint().expect("checkpoint of the deltas");
    for _ in 0..2 * keys {
        db.get(&name(oracle::next(&mut rng) % keys)).expect("read");
    }
    let before = db.stats();
    assert!(before.frame_delta_verifies > 100, "the reads verified few deltas (seed {seed}): {before:?}");
    fs.inject(Fault { op: None, path_contains: None, nth: n, error: FaultError::Eio, forever });
    let failed = db.checkpoint().is_err();
    let after = db.stats();
    assert!(
        failed || after.checkpoint_frames_rewritten > before.checkpoint_frames_rewritten,
        "the checkpoint under test rewrote nothing (n={n}, seed {seed}): {after:?}"
    );
    let context = format!("rewrite count-up n={n} forever={forever} seed {seed}");
    more_writes_then_crash(db, &fs, &opts, history, &mut rng, &context);
}

#[test]
fn fail_each_io_operation_of_a_checkpoint_that_rewrites_frames_for_their_reads() {
    let base = oracle::seed("fail_each_io_operation_of_a_checkpoint_that_rewrites_frames_for_their_reads");
    for n in 1..=24 {
        rewrite_countup_case(base.wrapping_add(n), n, false);
        rewrite_countup_case(base.wrapping_add(n + 100_000), n, true);
    }
}

/// One count-up case: a frame large enough for deltas, a checkpoint that writes them with the
/// n-th I/O operation failing, more writes, another checkpoint, a crash, then the oracle.
/// With `merge`, four checkpoints of a few writes each fill the frame's chain first, so the
/// checkpoint under test replaces the chain with one merged delta (or, when the fault hits
/// its reads of the chain, writes the resident frame whole). Returns whether it merged.
fn countup_case(seed: u64, n: u64, forever: bool, merge: bool) -> bool {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    // Only the test's checkpoints run, so the one under test has the changes to write.
    let opts = Options { checkpoint_wal_bytes: u64::MAX, ..oracle::opts() };
    let db = Db::open_with_vfs(vfs.clone(), opts.clone()).expect("open fresh");
    let mut history = oracle::History::default();
    // About 60 KB of keys in one frame: 40 writes then change far less than a quarter of it.
    // Batches small enough for the 4 KiB log ring of `oracle::opts`.
    for chunk in (0..1500u64).collect::<Vec<_>>().chunks(40) {
        let mut batch = Batch::new();
        let mut ops = Vec::new();
        for &i in chunk {
            let k = format!("t{}/d{}/f{:04}", i % 3, (i / 3) % 4, i + 1000).into_bytes();
            batch.put(k.clone(), b"preloaded".to_vec());
            ops.push((k, Some(b"preloaded".to_vec())));
        }
        let result = db.write_batch(&batch, WriteOptions::default()).map(|v| v.0);
        assert!(result.is_ok(), "preload: {result:?}");
        history.record(ops, &result);
    }
    db.checkpoint().expect("checkpoint of the preload");
    // A few writes at a time until one changed the frame (a delete of an absent key does not).
    let mut few_writes = |history: &mut oracle::History| {
        for _ in 0..50 {
            history.writes.extend(oracle::workload(&db, &fs, &mut rng, 3, usize::MAX, None).writes);
            if db.stats().frames_dirty > 0 {
                return;
            }
        }
        panic!("fifty workloads changed nothing (seed {seed})");
    };
    if merge {
        for _ in 0..4 {
            few_writes(&mut history);
            db.checkpoint().expect("checkpoint of a few writes");
        }
        assert_eq!(db.stats().checkpoint_frames_delta, 4, "the chain is not full (seed {seed})");
        few_writes(&mut history);
    } else {
        history.writes.extend(oracle::workload(&db, &fs, &mut rng, 40, usize::MAX, None).writes);
    }
    let before = db.stats();
    fs.inject(Fault { op: None, path_contains: None, nth: n, error: FaultError::Eio, forever });
    let failed = db.checkpoint().is_err();
    let after = db.stats();
    let merged = after.checkpoint_chains_merged > before.checkpoint_chains_merged;
    let wrote = match merge {
        true => merged || after.checkpoint_frames_whole > before.checkpoint_frames_whole,
        false => after.checkpoint_frames_delta > before.checkpoint_frames_delta,
    };
    assert!(
        failed || wrote,
        "the checkpoint under test wrote nothing (merge {merge}, n={n}, seed {seed}): {after:?}"
    );
    let context = format!("delta count-up n={n} forever={forever} merge={merge} seed {seed}");
    more_writes_then_crash(db, &fs, &opts, history, &mut rng, &context);
    merged
}

/// The end of a count-up case, after the checkpoint under test: more writes, a checkpoint, a
/// crash, then the oracle over `history` and its stability across reopens.
fn more_writes_then_crash(
    db: Db,
    fs: &Arc<SimFs>,
    opts: &Options,
    mut history: oracle::History,
    rng: &mut u64,
    context: &str,
) {
    let more = oracle::workload(&db, fs, rng, 15, usize::MAX, None);
    history.writes.extend(more.writes);
    let _ = db.checkpoint();
    fs.crash();
    drop(db);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let db =
        Db::open_with_vfs(vfs.clone(), opts.clone()).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
    let state = oracle::check(&db, &history, context);
    drop(db);
    oracle::check_stable(|| Db::open_with_vfs(vfs.clone(), opts.clone()).expect("reopen"), &state, context);
}

#[test]
fn fail_each_io_operation_of_a_delta_checkpoint() {
    let base = oracle::seed("fail_each_io_operation_of_a_delta_checkpoint");
    for n in 1..=40 {
        countup_case(base.wrapping_add(n), n, false, false);
        countup_case(base.wrapping_add(n + 100_000), n, true, false);
    }
}

#[test]
fn fail_each_io_operation_of_a_checkpoint_that_merges_a_chain() {
    let base = oracle::seed("fail_each_io_operation_of_a_checkpoint_that_merges_a_chain");
    let mut merged = 0;
    for n in 1..=40 {
        merged += usize::from(countup_case(base.wrapping_add(n), n, false, true));
        merged += usize::from(countup_case(base.wrapping_add(n + 100_000), n, true, true));
    }
    // Faults past the chain's reads leave the merge itself to fail in its writes or later.
    assert!(merged >= 20, "only {merged} of 80 checkpoints under test merged their chain");
}

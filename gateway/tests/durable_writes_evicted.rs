//! Invariant: with the engine's frame cache far smaller than the metadata, so that many keys'
//! frames are evicted, concurrent durable PUTs and DELETEs all succeed (a write whose key's
//! path is cached runs inline on the worker, the others on the blocking pool, and both await
//! their fsync on the request's task), and after a restart every acknowledged write is there:
//! overwritten objects read back with their new bodies, deleted ones are gone, untouched ones
//! are unchanged.

mod common;

use std::sync::Arc;

use common::*;
use gateway::auth::Credentials;
use gateway::storage::Store;
use gateway::{AppState, Settings};
use http::Method;

const OBJECTS: usize = 12_000;
const TASKS: usize = 16;
const WRITES_PER_TASK: usize = 40;

fn open(dir: &std::path::Path, options: holt_core::Options) -> AppState {
    let db = holt_core::Db::open(dir.join("meta"), options).expect("durable engine");
    let store = Store::open(db, dir, gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
    let creds = Credentials::new(vec![(USER_A.0.to_owned(), USER_A.1.to_owned())]);
    AppState::new(store, creds, Settings::default())
}

fn close(state: AppState) {
    let inner = Arc::try_unwrap(state.0).ok().expect("sole owner");
    inner.store.into_db().expect("sole owner").close().expect("close");
}

/// Long keys that share little beyond their directory, so the metadata spans many frames.
fn key(i: usize) -> String {
    let spread = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16;
    format!("tenant-{:02}/{spread:012x}-{}-{i:06}.json", i % 7, "d".repeat(200))
}

fn body(i: usize, generation: u32) -> Vec<u8> {
    format!("object {i} generation {generation}").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_writes_on_evicted_frames_survive_restart() {
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    // Load with async durability (fast), then close: the close checkpoints every frame.
    let load = holt_core::Options { durability: holt_core::Durability::Async, ..Default::default() };
    let gw = Gw { state: open(&dir, load), dir: tempdir };
    gw.create_bucket("bkt").await;
    for i in 0..OBJECTS {
        gw.put("bkt", &key(i), &body(i, 0)).await;
    }
    let Gw { state, dir: tempdir } = gw;
    close(state);

    // Reopen with sync durability and a cache of 64 KiB: nearly every frame is evicted.
    let small = holt_core::Options { memory_budget_bytes: 64 << 10, ..Default::default() };
    let gw = Arc::new(Gw { state: open(&dir, small), dir: tempdir });
    let before = gw.state.0.store.stats();
    assert!(before.frames >= 4 && before.frames_cached < before.frames / 2, "frames not evicted: {before:?}");
    let reads_before = before.frame_reads;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let gw = Arc::clone(&gw);
            tokio::spawn(async move {
                for n in 0..WRITES_PER_TASK {
                    // Disjoint keys per task; every fourth write is a delete.
                    let i = (t + n * TASKS) * 7 % OBJECTS;
                    let path = format!("/bkt/{}", encode_key(&key(i)));
                    let r = if n % 4 == 3 {
                        gw.a(Method::DELETE, &path, b"").await
                    } else {
                        gw.a(Method::PUT, &path, &body(i, 1)).await
                    };
                    assert!(r.status.is_success(), "write {n} of task {t}: {} {}", r.status, r.text());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    let reads = gw.state.0.store.stats().frame_reads - reads_before;
    assert!(reads > 0, "the writes read no frame: the cache held everything, nothing was evicted");
    let (inline, pool) = gw.state.0.store.worker_times.counts();
    eprintln!("writes applied inline: {inline}, on the blocking pool: {pool}");
    assert!(inline > 0 && pool > 0, "one path never ran: {inline} inline, {pool} on the pool");
    let gw = Arc::try_unwrap(gw).ok().expect("sole owner");
    let Gw { state, dir: tempdir } = gw;
    close(state);

    let gw = Gw { state: open(&dir, holt_core::Options::default()), dir: tempdir };
    let mut written = vec![None; OBJECTS];
    for t in 0..TASKS {
        for n in 0..WRITES_PER_TASK {
            written[(t + n * TASKS) * 7 % OBJECTS] = Some(n % 4 != 3);
        }
    }
    for (i, write) in written.iter().enumerate() {
        let r = gw.a(Method::GET, &format!("/bkt/{}", encode_key(&key(i))), b"").await;
        match write {
            Some(true) => assert_eq!(r.body, body(i, 1), "object {i} lost its overwrite"),
            Some(false) => assert_eq!(r.status, 404, "object {i} survived its delete"),
            None => assert_eq!(r.body, body(i, 0), "untouched object {i} changed"),
        }
    }
}

//! Invariant (async durability): reclaiming a body does not wait for the log on the request
//! path; the background reclaimer syncs the log once for every body queued together and only
//! then unlinks them; and closing the gateway finishes the queue (sync, then unlink) before
//! the engine closes, so nothing queued is left behind.
//!
//! These tests run on tokio's current-thread runtime: the reclaimer runs only when the test
//! yields, so "queued together" is exact. The engine's flusher is made too lazy to sync on
//! its own.

use std::path::Path;
use std::time::{Duration, Instant};

use gateway::auth::Credentials;
use gateway::storage::meta::BodyRef;
use gateway::storage::Store;
use gateway::{AppState, Settings};
use holt_core::Condition;

const BODIES: usize = 8;

fn open_async(dir: &Path) -> AppState {
    let hour = Duration::from_secs(3600);
    let options = holt_core::Options {
        durability: holt_core::Durability::Async,
        wal_flush_interval: hour,
        checkpoint_interval: hour,
        checkpoint_wal_bytes: u64::MAX,
        ..holt_core::Options::default()
    };
    let db = holt_core::Db::open(dir.join("meta"), options).expect("durable engine");
    let store = Store::open(db, dir, gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
    AppState::new(store, Credentials::new(Vec::new()), Settings::default())
}

fn body_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("bodies"))
        .expect("bodies")
        .map(|d| std::fs::read_dir(d.expect("entry").path()).expect("fan-out dir").count())
        .sum()
}

/// An acknowledged but unsynced write, then `BODIES` body files.
async fn unsynced_write_and_bodies(store: &Store) -> Vec<BodyRef> {
    store.put(b"test/unsynced".to_vec(), b"v".to_vec(), Condition::None).await.expect("write");
    let mut bodies = Vec::new();
    for i in 0..BODIES {
        let mut w = store.bodies.writer();
        w.write(&vec![i as u8; 10_000]).await.expect("write body");
        bodies.push(w.commit().await.expect("commit body"));
    }
    bodies
}

#[tokio::test]
async fn bodies_reclaimed_together_share_one_log_sync_off_the_request_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = open_async(dir.path());
    let store = state.store();
    let bodies = unsynced_write_and_bodies(store).await;
    let before = store.stats();
    assert!(before.durable_lsn < before.last_lsn, "nothing syncs the log by itself here: {before:?}");

    for body in &bodies {
        store.reclaim(body).await;
    }
    // Reclaiming returned without syncing or unlinking anything.
    let queued = store.stats();
    assert_eq!(body_files(dir.path()), BODIES, "reclaim unlinked on the request path");
    assert_eq!(queued.wal_syncs, before.wal_syncs, "reclaim synced the log on the request path");

    let deadline = Instant::now() + Duration::from_secs(5);
    while body_files(dir.path()) > 0 {
        assert!(Instant::now() < deadline, "{} bodies still there", body_files(dir.path()));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = store.stats();
    assert!(after.durable_lsn >= before.last_lsn, "unlinked before the log was durable: {after:?}");
    assert_eq!(after.wal_syncs, before.wal_syncs + 1, "one log sync for the whole batch");
}

#[tokio::test]
async fn close_finishes_the_reclaim_queue_before_closing_the_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = open_async(dir.path());
    let bodies = unsynced_write_and_bodies(state.store()).await;
    for body in &bodies {
        state.store().reclaim(body).await;
    }
    assert_eq!(body_files(dir.path()), BODIES);
    tokio::time::timeout(Duration::from_secs(20), state.close()).await.expect("in time").expect("closed");
    assert_eq!(body_files(dir.path()), 0, "queued bodies left behind at close");
}

//! Invariant (crash model: the process stops between any two steps of an upload): after a
//! restart on the durable engine, every committed object still reads back, and body files no
//! committed record names (orphans of uploads whose metadata never committed) and everything
//! in tmp/ are removed.

mod common;

use common::*;
use gateway::auth::Credentials;
use gateway::storage::Store;
use gateway::{AppState, Settings};
use http::Method;

fn open(dir: &std::path::Path) -> AppState {
    open_with(dir, holt_core::Options::default())
}

fn open_with(dir: &std::path::Path, options: holt_core::Options) -> AppState {
    let db = holt_core::Db::open(dir.join("meta"), options).expect("durable engine");
    let store = Store::open(db, dir, gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
    let creds = Credentials::new(vec![(USER_A.0.to_owned(), USER_A.1.to_owned())]);
    AppState::new(store, creds, Settings::default())
}

fn close(state: AppState) {
    let inner = std::sync::Arc::try_unwrap(state.0).ok().expect("sole owner");
    inner.store.into_db().expect("sole owner").close().expect("close");
}

#[tokio::test]
async fn restart_keeps_committed_objects_and_sweeps_orphans() {
    let gw = Gw::new();
    let dir = gw.dir.path().to_owned();
    drop(gw.state);
    let state = open(&dir);
    let gw = Gw { state, dir: gw.dir };
    gw.create_bucket("bkt").await;
    let big = vec![4u8; 100_000];
    gw.put("bkt", "big", &big).await;
    gw.put("bkt", "small", b"inline").await;
    // An upload that crashed after its body was renamed but before its metadata committed,
    // and one that crashed while still in tmp/.
    std::fs::write(dir.join("bodies/ab/abababababababababababababababab"), b"orphan").unwrap();
    std::fs::write(dir.join("tmp/0123456789abcdef0123456789abcdef"), b"partial").unwrap();
    assert_eq!(gw.body_files(), 2);
    let Gw { state, dir: tempdir } = gw;
    close(state);

    let gw = Gw { state: open(&dir), dir: tempdir };
    assert_eq!(gw.body_files(), 1, "the orphan is swept, the committed body stays");
    assert_eq!(gw.tmp_files(), 0);
    assert_eq!(gw.a(Method::GET, "/bkt/big", b"").await.body, big);
    assert_eq!(gw.a(Method::GET, "/bkt/small", b"").await.body, b"inline");
    // The token secret survives restarts: a token from before still works after.
    let r = gw.a(Method::GET, "/bkt?list-type=2&max-keys=1", b"").await;
    let token = r.xml("NextContinuationToken").unwrap();
    let Gw { state, dir: tempdir } = gw;
    close(state);
    let gw = Gw { state: open(&dir), dir: tempdir };
    let r = gw.a(Method::GET, &format!("/bkt?list-type=2&continuation-token={token}"), b"").await;
    assert_eq!(r.xml_all("Key"), ["small"]);
}

/// Waits (a few seconds at most) until `n` body files remain, and returns the engine's
/// counters as of that moment.
async fn body_files_reach(gw: &Gw, n: usize) -> holt_core::Stats {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if gw.body_files() == n {
            return gw.state.store().stats();
        }
        assert!(std::time::Instant::now() < deadline, "{} body files, not {n}", gw.body_files());
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Invariant (async durability; crash model: the process stops at any point, losing whatever
/// the log had not synced): a body file is unlinked only once the record that stopped naming
/// it is durable, so a crash can never bring back a record whose file is gone; that happens
/// off the request path, within moments. A body no committed record ever named is unlinked at
/// once, without syncing the log. The flusher is made too lazy to sync on its own, so only
/// the reclaimer can have synced the log.
#[tokio::test]
async fn async_durability_unlinks_replaced_bodies_only_after_the_log_is_durable() {
    let gw = Gw::new();
    let dir = gw.dir.path().to_owned();
    drop(gw.state);
    let hour = std::time::Duration::from_secs(3600);
    let options = holt_core::Options {
        durability: holt_core::Durability::Async,
        wal_flush_interval: hour,
        checkpoint_interval: hour,
        checkpoint_wal_bytes: u64::MAX,
        ..holt_core::Options::default()
    };
    let gw = Gw { state: open_with(&dir, options), dir: gw.dir };
    let stats = |gw: &Gw| gw.state.store().stats();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "big", &vec![1u8; 100_000]).await;
    let s = stats(&gw);
    assert!(s.durable_lsn < s.last_lsn, "nothing syncs the log by itself here: {s:?}");

    // Overwrite: the old body goes, and by then the record replacing it is durable.
    gw.put("bkt", "big", &vec![2u8; 100_000]).await;
    let committed = stats(&gw).last_lsn;
    let s = body_files_reach(&gw, 1).await;
    assert!(s.durable_lsn >= committed, "old body unlinked before its replacement was durable: {s:?}");

    // Inline bodies have no file, so replacing one does not sync.
    gw.put("bkt", "small", b"one").await;
    gw.put("bkt", "small", b"two").await;
    let s = stats(&gw);
    assert!(s.durable_lsn < s.last_lsn, "an inline overwrite synced the log: {s:?}");

    // Bodies no committed record ever named (a PUT refused by its precondition, a PUT whose
    // Content-MD5 does not match) leave no file behind and cost no log sync.
    let syncs = stats(&gw).wal_syncs;
    let big = vec![5u8; 100_000];
    let r = gw.req(USER_A, Method::PUT, "/bkt/big", &[("if-none-match", "*")], &big).await;
    r.assert_error(412, "PreconditionFailed");
    let wrong_md5 = "AAAAAAAAAAAAAAAAAAAAAA==";
    let r = gw.req(USER_A, Method::PUT, "/bkt/other", &[("content-md5", wrong_md5)], &big).await;
    r.assert_error(400, "BadDigest");
    assert_eq!((gw.body_files(), gw.tmp_files()), (1, 0), "a refused body was left behind");
    let s = stats(&gw);
    assert_eq!(s.wal_syncs, syncs, "unlinking a body no record named synced the log: {s:?}");

    // Delete, DeleteObjects and an aborted upload reclaim the same way.
    assert_eq!(gw.a(Method::DELETE, "/bkt/big", b"").await.status, 204);
    let committed = stats(&gw).last_lsn;
    let s = body_files_reach(&gw, 0).await;
    assert!(s.durable_lsn >= committed, "deleted body unlinked before the delete was durable: {s:?}");
    for key in ["d1", "d2"] {
        gw.put("bkt", key, &vec![3u8; 10_000]).await;
    }
    let body = b"<Delete><Object><Key>d1</Key></Object><Object><Key>d2</Key></Object></Delete>";
    assert_eq!(gw.a(Method::POST, "/bkt?delete", body).await.status, 200);
    let committed = stats(&gw).last_lsn;
    let s = body_files_reach(&gw, 0).await;
    assert!(s.durable_lsn >= committed, "DeleteObjects unlinked before the batch was durable: {s:?}");
    let r = gw.a(Method::POST, "/bkt/mp?uploads", b"").await;
    let id = r.xml("UploadId").unwrap();
    let r = gw.a(Method::PUT, &format!("/bkt/mp?partNumber=1&uploadId={id}"), &vec![4u8; 10_000]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::DELETE, &format!("/bkt/mp?uploadId={id}"), b"").await.status, 204);
    let committed = stats(&gw).last_lsn;
    let s = body_files_reach(&gw, 0).await;
    assert!(s.durable_lsn >= committed, "part body unlinked before the abort was durable: {s:?}");

    let Gw { state, dir: _tempdir } = gw;
    close(state);
}

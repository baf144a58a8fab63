//! Invariant: a write whose engine commit failed after reaching the log (a failed fdatasync
//! under `Sync` durability: `may_have_applied`) keeps its new body file, because replay
//! brings the record naming it back; a write the engine refused before logging (`Poisoned`)
//! leaves no file behind. Checked for PutObject and UploadPart.
//!
//! Failure model: the engine's files live on the simulated file system (`holt_core::io::SimFs`),
//! whose next fdatasync of the log fails with EIO; the process then "restarts" (the engine is
//! reopened on the same files, which still hold the logged record), and the start-up sweep
//! runs. Body files are on the real disk.

mod common;

use std::sync::Arc;

use common::*;
use gateway::auth::Credentials;
use gateway::storage::Store;
use gateway::{AppState, Settings};
use holt_core::io::{Fault, FaultError, OpKind, SimFs, Vfs};
use http::Method;

/// No crash is simulated, so the seed decides nothing.
const SIM_SEED: u64 = 7;

fn open(vfs: &Arc<dyn Vfs>, dir: &std::path::Path) -> AppState {
    let options = holt_core::Options {
        durability: holt_core::Durability::Sync,
        wal_flush_interval: std::time::Duration::from_millis(1),
        ..holt_core::Options::default()
    };
    let db = holt_core::Db::open_with_vfs(Arc::clone(vfs), options).expect("engine on the simulated fs");
    let store = Store::open(db, dir, gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
    let creds = Credentials::new(vec![(USER_A.0.to_owned(), USER_A.1.to_owned())]);
    AppState::new(store, creds, Settings::default())
}

/// Restarts the gateway on the same files: drops the engine (poisoned, so it cannot be closed
/// cleanly) and opens it again, which replays the log and sweeps unnamed bodies.
fn restart(gw: Gw, vfs: &Arc<dyn Vfs>) -> Gw {
    let Gw { state, dir } = gw;
    drop(state);
    Gw { state: open(vfs, dir.path()), dir }
}

/// Fails the next fdatasync of the log segment being written: the lowest-numbered one (no
/// segment is retired in these short runs; higher ones are spares the engine prepares in the
/// background, whose failures it tolerates, so they must not take the fault).
fn fail_next_log_sync(fs: &SimFs) {
    let segment = fs
        .list()
        .expect("list")
        .into_iter()
        .filter(|name| name.starts_with("wal-"))
        .min()
        .expect("a log segment");
    fs.inject(Fault {
        op: Some(OpKind::Sync),
        path_contains: Some(segment),
        nth: 1,
        error: FaultError::Eio,
        forever: false,
    });
}

#[tokio::test]
async fn a_write_that_may_have_applied_keeps_its_body() {
    let fs = SimFs::new(SIM_SEED);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Gw { state: open(&vfs, dir.path()), dir };
    gw.create_bucket("bkt").await;

    // PutObject: the record is logged, its fdatasync fails.
    let object = vec![1u8; 100_000];
    fail_next_log_sync(&fs);
    gw.a(Method::PUT, "/bkt/obj", &object).await.assert_error(500, "InternalError");
    assert_eq!(gw.body_files(), 1, "the body of a write that may have applied was unlinked");
    // The engine now refuses reads and writes (poisoned until reopened): 503, and such a
    // body goes at once.
    gw.a(Method::PUT, "/bkt/refused", &vec![2u8; 100_000]).await.assert_error(503, "ServiceUnavailable");
    gw.a(Method::GET, "/bkt/obj", b"").await.assert_error(503, "ServiceUnavailable");
    assert_eq!((gw.body_files(), gw.tmp_files()), (1, 0), "a refused write left its body");

    // After the restart the replayed record names the kept body, which reads back whole.
    let gw = restart(gw, &vfs);
    let r = gw.a(Method::GET, "/bkt/obj", b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == object, "the replayed object does not read back");
    assert_eq!(gw.a(Method::HEAD, "/bkt/refused", b"").await.status, 404);
    assert_eq!(gw.body_files(), 1);

    // UploadPart, the same way.
    let r = gw.a(Method::POST, "/bkt/mp?uploads", b"").await;
    let id = r.xml("UploadId").expect("upload id");
    let part = vec![3u8; 50_000];
    fail_next_log_sync(&fs);
    let target = format!("/bkt/mp?partNumber=1&uploadId={id}");
    gw.a(Method::PUT, &target, &part).await.assert_error(500, "InternalError");
    assert_eq!(gw.body_files(), 2, "the body of a part that may have applied was unlinked");
    let target2 = format!("/bkt/mp?partNumber=2&uploadId={id}");
    gw.a(Method::PUT, &target2, &vec![4u8; 50_000]).await.assert_error(503, "ServiceUnavailable");
    assert_eq!((gw.body_files(), gw.tmp_files()), (2, 0), "a refused part left its body");

    let gw = restart(gw, &vfs);
    let r = gw.a(Method::GET, &format!("/bkt/mp?uploadId={id}"), b"").await;
    assert_eq!(r.xml_all("PartNumber"), ["1"], "{}", r.text());
    let etag = r.xml("ETag").expect("part etag");
    let complete = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part>\
         </CompleteMultipartUpload>"
    );
    let r = gw.a(Method::POST, &format!("/bkt/mp?uploadId={id}"), complete.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = gw.a(Method::GET, "/bkt/mp", b"").await;
    assert!(r.status == 200 && r.body == part, "the replayed part does not read back: {}", r.status);
}

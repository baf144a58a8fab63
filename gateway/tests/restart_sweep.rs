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
    let db = holt_core::Db::open(dir.join("meta"), holt_core::Options::default()).expect("durable engine");
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

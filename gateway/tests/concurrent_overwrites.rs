//! Invariant: under concurrent overwrites of one key, every GET returns one complete written
//! body (never a mix, never a missing file), and once the writers stop exactly one body file
//! remains: each replaced body is reclaimed exactly once, the live one never.

mod common;

use std::sync::Arc;

use common::*;
use http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overwrites_reclaim_every_replaced_body() {
    let gw = Arc::new(Gw::new());
    gw.create_bucket("bkt").await;
    let writers: Vec<_> = (0..8u8)
        .map(|w| {
            let gw = Arc::clone(&gw);
            tokio::spawn(async move {
                for i in 0..8u8 {
                    let body = vec![w * 16 + i; 20_000];
                    gw.put("bkt", "hot", &body).await;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let gw = Arc::clone(&gw);
            tokio::spawn(async move {
                for _ in 0..30 {
                    let r = gw.a(Method::GET, "/bkt/hot", b"").await;
                    if r.status == 404 {
                        continue;
                    }
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert_eq!(r.body.len(), 20_000);
                    assert!(r.body.iter().all(|b| *b == r.body[0]), "a GET mixed two bodies");
                }
            })
        })
        .collect();
    for t in writers.into_iter().chain(readers) {
        t.await.expect("task");
    }
    assert_eq!(gw.body_files(), 1, "exactly the live body remains");
    assert_eq!(gw.tmp_files(), 0);
    let r = gw.a(Method::GET, "/bkt/hot", b"").await;
    assert_eq!(r.body.len(), 20_000);
}

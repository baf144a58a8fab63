//! Invariant: read-modify-write operations racing on the same upload, object or bucket never
//! answer 500 and never strand data:
//! - concurrent CompleteMultipartUpload of one upload: exactly one 200, the rest 404
//!   NoSuchUpload; one object, no part records, no part bodies left;
//! - Complete racing Abort: exactly one of them succeeds;
//! - UploadPart racing Complete or Abort: each part upload either lands before the upload ends
//!   (and is reclaimed with it) or gets NoSuchUpload; no part record or body survives it;
//! - CopyObject racing the deletion of its source: 200 or 404 NoSuchKey;
//! - PutObject racing DeleteBucket: afterwards the bucket either exists with exactly the
//!   objects whose PUT succeeded, or is gone with no object records and no bodies.
//!
//! Each race runs several rounds on a multi-threaded runtime; bodies are larger than the
//! inline limit so every body is a file that can leak.

mod common;

use std::sync::Arc;

use common::*;
use http::Method;

const MIB: usize = 1 << 20;
const ROUNDS: usize = 6;

/// Creates an upload of `key` with a 5 MiB part 1 and a small part 2; returns the upload id and
/// the completion body.
async fn prepared_upload(gw: &Gw, key: &str) -> (String, Vec<u8>) {
    let r = gw.a(Method::POST, &format!("/bkt/{key}?uploads"), b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.xml("UploadId").unwrap();
    let p1 = vec![7u8; 5 * MIB];
    let p2 = vec![8u8; 10_000];
    let mut etags = Vec::new();
    for (n, body) in [(1, &p1), (2, &p2)] {
        let r = gw.a(Method::PUT, &format!("/bkt/{key}?partNumber={n}&uploadId={id}"), body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        etags.push(r.header("etag").unwrap().to_owned());
    }
    let body = complete_body(&[(1, &etags[0]), (2, &etags[1])]);
    (id, body)
}

/// Part records left in the engine for `id`.
async fn part_records(gw: &Gw, id: &str) -> usize {
    let mut prefix = b"P".to_vec();
    prefix.extend_from_slice(id.as_bytes());
    prefix.push(0);
    gw.state.store().scan(prefix, Vec::new(), 100).await.expect("scan").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_completes_have_exactly_one_winner() {
    let gw = Arc::new(Gw::new());
    gw.create_bucket("bkt").await;
    for round in 0..ROUNDS {
        let key = format!("obj{round}");
        let (id, body) = prepared_upload(&gw, &key).await;
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (gw, key, id, body) = (Arc::clone(&gw), key.clone(), id.clone(), body.clone());
                tokio::spawn(
                    async move { gw.a(Method::POST, &format!("/bkt/{key}?uploadId={id}"), &body).await },
                )
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            let r = t.await.expect("task");
            match r.status.as_u16() {
                200 => winners += 1,
                _ => r.assert_error(404, "NoSuchUpload"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
        let get = gw.a(Method::GET, &format!("/bkt/{key}"), b"").await;
        assert_eq!(get.body.len(), 5 * MIB + 10_000);
        assert_eq!(part_records(&gw, &id).await, 0);
        assert_eq!(gw.body_files(), round + 1, "round {round}: one body per completed object, no parts");
        assert_eq!(gw.tmp_files(), 0);
    }
    assert!(gw.a(Method::GET, "/bkt?uploads", b"").await.xml_all("UploadId").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_racing_abort_has_one_winner() {
    let gw = Arc::new(Gw::new());
    gw.create_bucket("bkt").await;
    let mut objects = 0;
    for round in 0..ROUNDS {
        let key = format!("obj{round}");
        let (id, body) = prepared_upload(&gw, &key).await;
        let complete = {
            let (gw, key, id) = (Arc::clone(&gw), key.clone(), id.clone());
            tokio::spawn(async move { gw.a(Method::POST, &format!("/bkt/{key}?uploadId={id}"), &body).await })
        };
        let abort = {
            let (gw, key, id) = (Arc::clone(&gw), key.clone(), id.clone());
            tokio::spawn(async move { gw.a(Method::DELETE, &format!("/bkt/{key}?uploadId={id}"), b"").await })
        };
        let (c, a) = (complete.await.expect("task"), abort.await.expect("task"));
        match (c.status.as_u16(), a.status.as_u16()) {
            (200, 404) => {
                a.assert_error(404, "NoSuchUpload");
                objects += 1;
                assert_eq!(gw.a(Method::HEAD, &format!("/bkt/{key}"), b"").await.status, 200);
            }
            (404, 204) => {
                c.assert_error(404, "NoSuchUpload");
                assert_eq!(gw.a(Method::HEAD, &format!("/bkt/{key}"), b"").await.status, 404);
            }
            other => panic!("round {round}: complete/abort answered {other:?}: {} / {}", c.text(), a.text()),
        }
        assert_eq!(part_records(&gw, &id).await, 0);
        assert_eq!(gw.body_files(), objects, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upload_part_racing_complete_strands_nothing() {
    let gw = Arc::new(Gw::new());
    gw.create_bucket("bkt").await;
    for round in 0..ROUNDS {
        let key = format!("obj{round}");
        let (id, body) = prepared_upload(&gw, &key).await;
        let uploaders: Vec<_> = (0..4u32)
            .map(|i| {
                let (gw, key, id) = (Arc::clone(&gw), key.clone(), id.clone());
                tokio::spawn(async move {
                    let part = vec![i as u8; 50_000];
                    gw.a(Method::PUT, &format!("/bkt/{key}?partNumber={}&uploadId={id}", 3 + i), &part).await
                })
            })
            .collect();
        let complete = {
            let (gw, key, id) = (Arc::clone(&gw), key.clone(), id.clone());
            tokio::spawn(async move { gw.a(Method::POST, &format!("/bkt/{key}?uploadId={id}"), &body).await })
        };
        let c = complete.await.expect("task");
        assert_eq!(c.status, 200, "round {round}: {}", c.text());
        for u in uploaders {
            let r = u.await.expect("task");
            if r.status != 200 {
                r.assert_error(404, "NoSuchUpload");
            }
        }
        assert_eq!(part_records(&gw, &id).await, 0, "round {round}: part records outlived the upload");
        assert_eq!(gw.body_files(), round + 1, "round {round}: part bodies outlived the upload");
        assert_eq!(gw.tmp_files(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upload_part_racing_abort_strands_nothing() {
    let gw = Arc::new(Gw::new());
    gw.create_bucket("bkt").await;
    for round in 0..ROUNDS {
        let key = format!("obj{round}");
        let (id, _) = prepared_upload(&gw, &key).await;
        let uploaders: Vec<_> = (0..4u32)
            .map(|i| {
                let (gw, key, id) = (Arc::clone(&gw), key.clone(), id.clone());
                tokio::spawn(async move {
                    let part = vec![i as u8; 50_000];
                    gw.a(Method::PUT, &format!("/bkt/{key}?partNumber={}&uploadId={id}", 1 + i), &part).await
                })
            })
            .collect();
        let abort = gw.a(Method::DELETE, &format!("/bkt/{key}?uploadId={id}"), b"").await;
        assert_eq!(abort.status, 204, "round {round}: {}", abort.text());
        for u in uploaders {
            let r = u.await.expect("task");
            if r.status != 200 {
                r.assert_error(404, "NoSuchUpload");
            }
        }
        assert_eq!(part_records(&gw, &id).await, 0, "round {round}: part records outlived the upload");
        assert_eq!(gw.body_files(), 0, "round {round}: part bodies outlived the upload");
        assert_eq!(gw.tmp_files(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_racing_source_delete_is_200_or_404() {
    let gw = Arc::new(Gw::new());
    gw.create_bucket("bkt").await;
    for round in 0..ROUNDS * 4 {
        gw.put("bkt", "src", &vec![round as u8; 30_000]).await;
        let copy = {
            let gw = Arc::clone(&gw);
            tokio::spawn(async move {
                gw.req(
                    USER_A,
                    Method::PUT,
                    &format!("/bkt/dst{round}"),
                    &[("x-amz-copy-source", "/bkt/src")],
                    b"",
                )
                .await
            })
        };
        let delete = {
            let gw = Arc::clone(&gw);
            tokio::spawn(async move { gw.a(Method::DELETE, "/bkt/src", b"").await })
        };
        let c = copy.await.expect("task");
        assert_eq!(delete.await.expect("task").status, 204);
        match c.status.as_u16() {
            200 => {
                let r = gw.a(Method::GET, &format!("/bkt/dst{round}"), b"").await;
                assert_eq!(r.body, vec![round as u8; 30_000]);
            }
            _ => c.assert_error(404, "NoSuchKey"),
        }
    }
    let listed = gw.a(Method::GET, "/bkt?list-type=2", b"").await.xml_all("Key").len();
    assert_eq!(gw.body_files(), listed, "one body per existing object");
    assert_eq!(gw.tmp_files(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn put_racing_delete_bucket_leaves_a_consistent_store() {
    let gw = Arc::new(Gw::new());
    for round in 0..ROUNDS * 2 {
        let bucket = format!("race{round}");
        gw.create_bucket(&bucket).await;
        let puts: Vec<_> = (0..4)
            .map(|i| {
                let (gw, bucket) = (Arc::clone(&gw), bucket.clone());
                tokio::spawn(async move {
                    gw.a(Method::PUT, &format!("/{bucket}/k{i}"), &vec![i as u8; 20_000]).await
                })
            })
            .collect();
        let delete = {
            let (gw, bucket) = (Arc::clone(&gw), bucket.clone());
            tokio::spawn(async move { gw.a(Method::DELETE, &format!("/{bucket}"), b"").await })
        };
        let mut stored = 0;
        for p in puts {
            let r = p.await.expect("task");
            match r.status.as_u16() {
                200 => stored += 1,
                _ => r.assert_error(404, "NoSuchBucket"),
            }
        }
        let d = delete.await.expect("task");
        if d.status != 204 {
            d.assert_error(409, "BucketNotEmpty");
        }
        let exists = gw.a(Method::HEAD, &format!("/{bucket}"), b"").await.status == 200;
        let mut prefix = b"O".to_vec();
        prefix.extend_from_slice(bucket.as_bytes());
        prefix.push(0);
        let records = gw.state.store().scan(prefix, Vec::new(), 100).await.expect("scan").len();
        if exists {
            assert_eq!(records, stored, "round {round}: the objects whose PUT succeeded");
        } else {
            assert_eq!(records, 0, "round {round}: objects left in a deleted bucket");
            assert_eq!(stored, 0, "round {round}: a PUT succeeded into a bucket that is gone");
        }
        // Clean up for the body count below.
        if exists {
            for i in 0..4 {
                gw.a(Method::DELETE, &format!("/{bucket}/k{i}"), b"").await;
            }
        }
        assert_eq!(gw.body_files(), 0, "round {round}: bodies outlived their objects");
        assert_eq!(gw.tmp_files(), 0);
    }
}

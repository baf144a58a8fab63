//! Upstream mode against a real S3 server over a socket: the upstream here is a standalone
//! gateway (the compat suite runs the same scenarios against MinIO). The front gateway is
//! driven in process; every object body must live upstream, the index must answer HEAD and
//! listings, and every repair path (notifications, intents, reconciliation, reads that find
//! the upstream changed) must bring the index back to what the upstream holds.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use common::*;
use gateway::handlers::through;
use gateway::storage::Store;
use gateway::upstream::{Upstream, UpstreamConfig};
use gateway::{AppState, Settings};
use http::{Method, Request, StatusCode};

const EVENTS_TOKEN: &str = "events-secret";

struct Pair {
    upstream: Gw,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    front: Gw,
}

impl Drop for Pair {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves `gw` on a loopback socket until the sender is used or dropped.
async fn serve(gw: &Gw) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = gw.router();
    tokio::spawn(async move {
        gateway::server::serve(listener, router, async {
            let _ = stopped.await;
        })
        .await;
    });
    (addr, stop)
}

/// A gateway in upstream mode in front of the gateway at `addr` (as USER_A there).
fn front_of(addr: SocketAddr) -> Gw {
    let dir = tempfile::tempdir().expect("tempdir");
    let options =
        holt_core::Options { weigher: Some(gateway::storage::meta::RECORD_WEIGHER), ..Default::default() };
    let db = holt_core::Db::open_in_memory(options).expect("engine");
    let store = Store::open(db, dir.path(), gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
    let config = UpstreamConfig {
        endpoint: format!("http://{addr}").parse().unwrap(),
        region: REGION.into(),
        access_key: USER_A.0.into(),
        secret_key: USER_A.1.into(),
        path_style: true,
        buckets: Default::default(),
    };
    let store = store.with_upstream(Upstream::new(config).expect("client"));
    let creds = gateway::auth::Credentials::new(vec![(USER_A.0.to_owned(), USER_A.1.to_owned())]);
    let settings = Settings { events_token: Some(EVENTS_TOKEN.into()), ..Settings::default() };
    Gw { state: AppState::new(store, creds, settings), dir }
}

async fn pair() -> Pair {
    let upstream = Gw::new();
    let (addr, stop) = serve(&upstream).await;
    let front = front_of(addr);
    Pair { upstream, addr, stop: Some(stop), front }
}

/// Records of `bucket` whose content headers an import left to fetch.
async fn headers_pending(s: &Store, bucket: &str) -> usize {
    let prefix = gateway::storage::schema::objects_prefix(bucket);
    let records = s.scan(prefix, Vec::new(), 100_000).await.unwrap();
    records
        .iter()
        .filter(|(_, e)| {
            gateway::storage::meta::ObjectMeta::decode(&e.value).is_some_and(
                |m| matches!(m.body, gateway::storage::meta::BodyRef::Upstream(ub) if ub.headers_pending),
            )
        })
        .count()
}

fn store(gw: &Gw) -> &Store {
    &gw.state.0.store
}

/// The keys a ListObjectsV2 of the whole bucket shows (all pages).
async fn keys(gw: &Gw, bucket: &str) -> Vec<String> {
    keys_from(gw, bucket, None).await
}

/// The keys of the pages from the one `token` resumes at (the first page for `None`).
async fn keys_from(gw: &Gw, bucket: &str, mut token: Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let target = match &token {
            Some(t) => format!("/{bucket}?list-type=2&continuation-token={}", encode_key(t)),
            None => format!("/{bucket}?list-type=2"),
        };
        let r = gw.a(Method::GET, &target, b"").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        out.extend(r.xml_all("Key"));
        token = r.xml("NextContinuationToken");
        if token.is_none() {
            return out;
        }
    }
}

async fn post_event(gw: &Gw, token: &str, doc: &serde_json::Value) -> (StatusCode, String) {
    let req = Request::builder()
        .method(Method::POST)
        .uri(through_events_path())
        .header("host", "localhost")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(doc.to_string()))
        .unwrap();
    let r = gw.send(req).await;
    (r.status, r.text())
}

fn through_events_path() -> &'static str {
    gateway::handlers::events::EVENTS_PATH
}

fn event(bucket: &str, key: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "EventName": name,
        "Records": [{"eventName": name, "s3": {"bucket": {"name": bucket}, "object": {"key": encode_key(key)}}}]
    })
}

#[tokio::test]
async fn objects_are_written_through_and_served_from_the_index() {
    let p = pair().await;
    p.front.create_bucket("photos").await;
    // The bucket was created upstream too.
    assert_eq!(p.upstream.a(Method::HEAD, "/photos", b"").await.status, StatusCode::OK);
    let body = vec![7u8; 300_000];
    let put = p
        .front
        .req(
            USER_A,
            Method::PUT,
            "/photos/2026/a%20b.jpg",
            &[("content-type", "image/jpeg"), ("x-amz-meta-who", "me")],
            &body,
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text());
    // The bytes are upstream, with the headers; nothing is stored locally.
    let there = p.upstream.a(Method::GET, "/photos/2026/a%20b.jpg", b"").await;
    assert_eq!(there.body, body);
    assert_eq!(there.header("content-type"), Some("image/jpeg"));
    assert_eq!(there.header("x-amz-meta-who"), Some("me"));
    assert_eq!(there.header("etag"), put.header("etag"));
    assert_eq!(p.front.body_files(), 0);
    // HEAD and listings from the index; GET and ranges from the upstream.
    let head = p.front.a(Method::HEAD, "/photos/2026/a%20b.jpg", b"").await;
    assert_eq!(head.header("content-length"), Some("300000"));
    assert_eq!(head.header("x-amz-meta-who"), Some("me"));
    let got = p.front.a(Method::GET, "/photos/2026/a%20b.jpg", b"").await;
    assert_eq!(got.body, body);
    let ranged =
        p.front.req(USER_A, Method::GET, "/photos/2026/a%20b.jpg", &[("range", "bytes=10-19")], b"").await;
    assert_eq!(ranged.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.body, vec![7u8; 10]);
    assert_eq!(ranged.header("content-range"), Some("bytes 10-19/300000"));
    let listed = p.front.a(Method::GET, "/photos?list-type=2&delimiter=/", b"").await;
    assert_eq!(listed.xml_all("Prefix"), vec!["".to_owned(), "2026/".to_owned()]);
    // Copy: server-side upstream.
    let copy = p
        .front
        .req(USER_A, Method::PUT, "/photos/copy.jpg", &[("x-amz-copy-source", "/photos/2026/a%20b.jpg")], b"")
        .await;
    assert_eq!(copy.status, StatusCode::OK, "{}", copy.text());
    assert_eq!(p.upstream.a(Method::GET, "/photos/copy.jpg", b"").await.body, body);
    assert_eq!(
        p.front.a(Method::HEAD, "/photos/copy.jpg", b"").await.header("content-type"),
        Some("image/jpeg")
    );
    // Delete: gone upstream and from the index.
    assert_eq!(p.front.a(Method::DELETE, "/photos/copy.jpg", b"").await.status, StatusCode::NO_CONTENT);
    assert_eq!(p.upstream.a(Method::HEAD, "/photos/copy.jpg", b"").await.status, StatusCode::NOT_FOUND);
    assert_eq!(keys(&p.front, "photos").await, vec!["2026/a b.jpg".to_owned()]);
    // DeleteObjects: every key deleted upstream too, in one upstream DeleteObjects request;
    // a missing one reported deleted, one named twice reported twice.
    for i in 0..3 {
        assert_eq!(p.front.put("photos", &format!("batch/{i}"), b"x").await.status, StatusCode::OK);
    }
    let upstream_deletes = |metrics: &str| -> Vec<String> {
        metrics
            .lines()
            .filter(|l| l.starts_with("holt_requests_total{operation=\"DeleteObject"))
            .map(str::to_owned)
            .collect()
    };
    let before = upstream_deletes(&p.upstream.send(anonymous(Method::GET, "/metrics", b"")).await.text());
    let doc = "<Delete><Object><Key>batch/0</Key></Object><Object><Key>batch/1</Key></Object>\
               <Object><Key>batch/2</Key></Object><Object><Key>batch/none</Key></Object>\
               <Object><Key>batch/1</Key></Object></Delete>";
    let deleted = p.front.a(Method::POST, "/photos?delete", doc.as_bytes()).await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text());
    assert_eq!(
        deleted.xml_all("Key"),
        ["batch/0", "batch/1", "batch/2", "batch/none", "batch/1"].map(str::to_owned).to_vec()
    );
    let after = upstream_deletes(&p.upstream.send(anonymous(Method::GET, "/metrics", b"")).await.text());
    let count = |lines: &[String], op: &str| -> u64 {
        let prefix = format!("holt_requests_total{{operation=\"{op}\",status=\"200\"}} ");
        lines.iter().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse().unwrap())
    };
    assert_eq!(count(&after, "DeleteObjects") - count(&before, "DeleteObjects"), 1, "{after:?}");
    assert_eq!(count(&after, "DeleteObject"), count(&before, "DeleteObject"), "{after:?}");
    for i in 0..3 {
        let there = p.upstream.a(Method::HEAD, &format!("/photos/batch/{i}"), b"").await;
        assert_eq!(there.status, StatusCode::NOT_FOUND, "batch/{i} is still upstream");
    }
    assert_eq!(keys(&p.front, "photos").await, vec!["2026/a b.jpg".to_owned()]);
    // No intent is left behind.
    assert!(store(&p.front).scan(b"I".to_vec(), Vec::new(), 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_key_with_dot_segments_cannot_reach_another_upstream_bucket() {
    let p = pair().await;
    p.front.create_bucket("mine").await;
    // Another upstream bucket the gateway's upstream identity can write.
    assert_eq!(p.upstream.a(Method::PUT, "/theirs", b"").await.status, StatusCode::OK);
    for key in ["a/../../theirs/planted", "dots/../up/./here", "./x", "x/.."] {
        let path = format!("/mine/{key}");
        p.front.a(Method::PUT, &path, b"payload").await.assert_error(400, "InvalidRequest");
        assert_eq!(p.front.a(Method::HEAD, &path, b"").await.status, StatusCode::NOT_FOUND);
        assert_eq!(p.front.a(Method::DELETE, &path, b"").await.status, StatusCode::NO_CONTENT);
    }
    // Nothing landed upstream, under either bucket, nor in the index; no intent is left.
    assert_eq!(keys(&p.upstream, "theirs").await, Vec::<String>::new());
    assert_eq!(keys(&p.upstream, "mine").await, Vec::<String>::new());
    assert_eq!(keys(&p.front, "mine").await, Vec::<String>::new());
    assert!(store(&p.front).scan(b"I".to_vec(), Vec::new(), 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_body_that_fails_its_checks_never_reaches_the_upstream() {
    let p = pair().await;
    p.front.create_bucket("checked").await;
    p.front.put("checked", "k", b"first").await;
    // A Content-MD5 that does not match: refused, and the upstream keeps the first body.
    let wrong_md5 = "1B2M2Y8AsgTpgAmY7PhCfg=="; // MD5 of the empty string
    let r =
        p.front.req(USER_A, Method::PUT, "/checked/k", &[("content-md5", wrong_md5)], b"second body").await;
    r.assert_error(400, "BadDigest");
    assert_eq!(p.upstream.a(Method::GET, "/checked/k", b"").await.body, b"first");
    assert_eq!(p.front.a(Method::GET, "/checked/k", b"").await.body, b"first");
    // The same for a body that is not what its signed SHA-256 says.
    let mut req = signed(USER_A, Method::PUT, "/checked/k", &[], b"third body");
    *req.body_mut() = Body::from(&b"THIRD body"[..]);
    let r = p.front.send(req).await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text());
    assert_eq!(p.upstream.a(Method::GET, "/checked/k", b"").await.body, b"first");
    // If-None-Match: * is the upstream's to judge.
    let r = p.front.req(USER_A, Method::PUT, "/checked/k", &[("if-none-match", "*")], b"x").await;
    r.assert_error(412, "PreconditionFailed");
}

#[tokio::test]
async fn multipart_uploads_are_upstream_uploads() {
    let p = pair().await;
    p.front.create_bucket("parts").await;
    let r = p.front.a(Method::POST, "/parts/big?uploads", b"").await;
    let id = r.xml("UploadId").expect("upload id");
    let one = vec![1u8; 5 << 20];
    let two = vec![2u8; 1000];
    let mut etags = Vec::new();
    for (n, part) in [(1u32, &one), (2, &two)] {
        let r = p.front.a(Method::PUT, &format!("/parts/big?partNumber={n}&uploadId={id}"), part).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        etags.push(r.header("etag").unwrap().to_owned());
    }
    // The parts are upstream already, in an upload of the upstream's.
    let uploads = p.upstream.a(Method::GET, "/parts?uploads", b"").await;
    assert_eq!(uploads.xml_all("Key"), vec!["big".to_owned()]);
    assert_eq!(p.front.body_files(), 0);
    let done = complete_body(&[(1, &etags[0]), (2, &etags[1])]);
    let r = p.front.a(Method::POST, &format!("/parts/big?uploadId={id}"), &done).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let etag = r.xml("ETag").unwrap();
    assert!(etag.ends_with("-2&quot;") || etag.ends_with("-2\""), "{etag}");
    let there = p.upstream.a(Method::GET, "/parts/big", b"").await;
    assert_eq!(there.body.len(), (5 << 20) + 1000);
    assert_eq!(&there.body[(5 << 20)..], &two[..]);
    let head = p.front.a(Method::HEAD, "/parts/big", b"").await;
    assert_eq!(head.header("content-length"), Some(&*((5u64 << 20) + 1000).to_string()));
    assert_eq!(head.header("etag"), there.header("etag"));
    // partNumber reads use the part sizes the index kept.
    let part2 = p.front.a(Method::GET, "/parts/big?partNumber=2", b"").await;
    assert_eq!(part2.body, two);
    // An aborted upload is aborted upstream too.
    let r = p.front.a(Method::POST, "/parts/gone?uploads", b"").await;
    let id = r.xml("UploadId").unwrap();
    assert_eq!(
        p.front.a(Method::DELETE, &format!("/parts/gone?uploadId={id}"), b"").await.status,
        StatusCode::NO_CONTENT
    );
    let uploads = p.upstream.a(Method::GET, "/parts?uploads", b"").await;
    assert!(uploads.xml_all("Key").is_empty(), "{}", uploads.text());
}

#[tokio::test]
async fn notifications_bring_writes_that_bypassed_the_gateway() {
    let p = pair().await;
    p.front.create_bucket("shared").await;
    // Written straight to the upstream: the index does not know yet.
    p.upstream
        .req(USER_A, Method::PUT, "/shared/direct.txt", &[("content-type", "text/plain")], b"from elsewhere")
        .await;
    assert!(keys(&p.front, "shared").await.is_empty());
    // A wrong token changes nothing.
    let (status, _) =
        post_event(&p.front, "nope", &event("shared", "direct.txt", "s3:ObjectCreated:Put")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, text) =
        post_event(&p.front, EVENTS_TOKEN, &event("shared", "direct.txt", "s3:ObjectCreated:Put")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(keys(&p.front, "shared").await, vec!["direct.txt".to_owned()]);
    let head = p.front.a(Method::HEAD, "/shared/direct.txt", b"").await;
    assert_eq!(head.header("content-type"), Some("text/plain"));
    // Delivered twice, or out of order: each record repairs from what the upstream holds.
    p.upstream.a(Method::DELETE, "/shared/direct.txt", b"").await;
    let created_late = event("shared", "direct.txt", "s3:ObjectCreated:Put");
    assert_eq!(post_event(&p.front, EVENTS_TOKEN, &created_late).await.0, StatusCode::OK);
    assert!(keys(&p.front, "shared").await.is_empty(), "the upstream no longer has it");
    // An SNS envelope around the same document.
    p.upstream.a(Method::PUT, "/shared/via-sns", b"x").await;
    let sns = serde_json::json!({"Type": "Notification", "Message": event("shared", "via-sns", "ObjectCreated:Put").to_string()});
    assert_eq!(post_event(&p.front, EVENTS_TOKEN, &sns).await.0, StatusCode::OK);
    assert_eq!(keys(&p.front, "shared").await, vec!["via-sns".to_owned()]);
    let (status, _) = post_event(&p.front, EVENTS_TOKEN, &serde_json::json!({"what": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_body_replaced_upstream_is_detected_on_read_and_repaired() {
    let p = pair().await;
    p.front.create_bucket("drift").await;
    p.front.put("drift", "k", b"old body").await;
    p.upstream.a(Method::PUT, "/drift/k", b"a newer body written elsewhere").await;
    // The index still says "old body"; the GET's If-Match finds the difference, repairs the
    // record and serves the new body with its own metadata.
    let got = p.front.a(Method::GET, "/drift/k", b"").await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    assert_eq!(got.body, b"a newer body written elsewhere");
    assert_eq!(got.header("content-length"), Some("30"));
    let head = p.front.a(Method::HEAD, "/drift/k", b"").await;
    assert_eq!(head.header("etag"), p.upstream.a(Method::HEAD, "/drift/k", b"").await.header("etag"));
    // Deleted upstream: the GET finds it gone, and so does the index afterwards.
    p.upstream.a(Method::DELETE, "/drift/k", b"").await;
    p.front.a(Method::GET, "/drift/k", b"").await.assert_error(404, "NoSuchKey");
    assert!(keys(&p.front, "drift").await.is_empty());
}

#[tokio::test]
async fn reconciliation_repairs_every_kind_of_drift() {
    let p = pair().await;
    p.front.create_bucket("recon").await;
    for i in 0..1500 {
        p.front.put("recon", &format!("k{i:04}"), format!("body {i}").as_bytes()).await;
    }
    // Behind the gateway's back: one added, one deleted, one replaced.
    p.upstream.a(Method::PUT, "/recon/k0500x", b"added").await;
    p.upstream.a(Method::DELETE, "/recon/k1200", b"").await;
    p.upstream.a(Method::PUT, "/recon/k1499", b"replaced").await;
    let up = store(&p.front).upstream.clone().unwrap();
    let repaired = through::reconcile_bucket(store(&p.front), &up, "recon").await.unwrap();
    assert_eq!(repaired, 3);
    let ours = keys(&p.front, "recon").await;
    let theirs = keys(&p.upstream, "recon").await;
    assert_eq!(ours.len(), 1500);
    assert_eq!(ours, theirs);
    assert_eq!(p.front.a(Method::HEAD, "/recon/k1499", b"").await.header("content-length"), Some("8"));
    // Nothing left to repair.
    assert_eq!(through::reconcile_bucket(store(&p.front), &up, "recon").await.unwrap(), 0);
}

#[tokio::test]
async fn an_existing_bucket_is_imported_and_an_interrupted_import_resumes() {
    let p = pair().await;
    p.upstream.create_bucket("legacy").await;
    for i in 0..2500 {
        p.upstream
            .req(
                USER_A,
                Method::PUT,
                &format!("/legacy/d{}/o{i:05}", i % 7),
                &[("content-type", "text/x-test")],
                b"x",
            )
            .await;
    }
    // Top-level keys beside the prefixes.
    for key in ["top-a", "top-b"] {
        p.upstream.put("legacy", key, b"t").await;
    }
    let theirs = keys(&p.upstream, "legacy").await;
    p.front.create_bucket("legacy").await;
    // Listings are correct from the first moment: the upstream answers until the import is
    // done, then the index does.
    assert_eq!(keys(&p.front, "legacy").await, theirs);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store(&p.front).get(gateway::storage::schema::import_cursor("legacy")).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "import did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys(&p.front, "legacy").await, theirs);
    // Then every record's content headers are fetched in the background, before any read
    // asks for them: HEAD answers from the index alone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pending = headers_pending(store(&p.front), "legacy").await;
        if pending == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{pending} records still wait for their headers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let up = store(&p.front).upstream.clone().unwrap();
    assert_eq!(up.headers_filled.load(std::sync::atomic::Ordering::Relaxed), theirs.len() as u64);
    let fill_record = gateway::storage::schema::header_fill_cursor("legacy");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store(&p.front).get(fill_record.clone()).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the header fill record outlived the fill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = p.front.send(anonymous(Method::GET, "/metrics", b"")).await.text();
    assert!(metrics.contains(&format!("holt_upstream_headers_filled_total {}", theirs.len())), "{metrics}");
    let head = p.front.a(Method::HEAD, "/legacy/d3/o00003", b"").await;
    assert_eq!(head.header("content-type"), Some("text/x-test"));
    // A crash halfway: discovery done, the index holds the top-level keys and the first
    // 1,000 keys under prefixes, and each unfinished prefix's cursor says where it was.
    let front = front_of(p.addr);
    let s = store(&front);
    let mut batch = holt_core::Batch::new();
    batch.put(
        gateway::storage::schema::bucket("legacy"),
        store(&p.front).get(gateway::storage::schema::bucket("legacy")).await.unwrap().unwrap().value,
    );
    let written: Vec<&String> = theirs
        .iter()
        .filter(|k| k.contains('/'))
        .take(1000)
        .chain(theirs.iter().filter(|k| !k.contains('/')))
        .collect();
    for key in &written {
        let record = gateway::storage::schema::object("legacy", key);
        batch.put(record.clone(), store(&p.front).get(record).await.unwrap().unwrap().value);
    }
    batch.put(gateway::storage::schema::import_cursor("legacy"), b"P".to_vec());
    let mut unfinished = 0;
    for d in 0..7 {
        let prefix = format!("d{d}/");
        let under = theirs.iter().filter(|k| k.starts_with(&prefix)).count();
        let done: Vec<&&String> = written.iter().filter(|k| k.starts_with(&prefix)).collect();
        if done.len() < under {
            let cursor = done.last().map(|k| k.as_bytes().to_vec()).unwrap_or_default();
            batch.put(gateway::storage::schema::import_prefix_cursor("legacy", &prefix), cursor);
            unfinished += 1;
        }
    }
    assert!(unfinished >= 2, "the simulated crash leaves prefixes to import");
    s.write_batch(batch).await.unwrap();
    // While the cursor stands, listings come from the upstream, whole and in pages.
    assert_eq!(keys(&front, "legacy").await, theirs);
    let first = front.a(Method::GET, "/legacy?list-type=2", b"").await;
    let mut across = first.xml_all("Key");
    let token = first.xml("NextContinuationToken").expect("a truncated page");
    through::resume_imports(s).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while s.get(gateway::storage::schema::import_cursor("legacy")).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "resumed import did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys(&front, "legacy").await, theirs);
    let cursors =
        s.scan(gateway::storage::schema::import_prefix_cursors("legacy"), Vec::new(), 10).await.unwrap();
    assert!(cursors.is_empty(), "prefix cursors left after the import: {}", cursors.len());
    // The token of a page the upstream answered resumes in the index after the import.
    across.extend(keys_from(&front, "legacy", Some(token)).await);
    assert!(across == theirs, "{} keys across the import's end, {} upstream", across.len(), theirs.len());
}

/// A restart resumes an interrupted header fill from the key its record names, reads nothing
/// of a bucket whose fill is done, and gives a database from before the records one pass per
/// bucket. Each case on a fresh front whose index holds the bucket's records as an import
/// left them (headers pending).
#[tokio::test]
async fn a_restart_resumes_the_header_fill_where_it_was_and_only_where_one_was() {
    use gateway::storage::meta::{BodyRef, ObjectMeta};
    use gateway::storage::schema;
    let p = pair().await;
    p.upstream.create_bucket("fills").await;
    for i in 0..300 {
        p.upstream.put("fills", &format!("d{}/o{i:04}", i % 3), b"x").await;
    }
    let theirs = keys(&p.upstream, "fills").await;
    // The records an import makes: content headers pending.
    p.front.create_bucket("fills").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store(&p.front).get(schema::import_cursor("fills")).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "import did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut imported = holt_core::Batch::new();
    imported.put(
        schema::bucket("fills"),
        store(&p.front).get(schema::bucket("fills")).await.unwrap().unwrap().value,
    );
    for key in &theirs {
        let record = schema::object("fills", key);
        let mut meta =
            ObjectMeta::decode(&store(&p.front).get(record.clone()).await.unwrap().unwrap().value).unwrap();
        if let BodyRef::Upstream(ub) = &mut meta.body {
            ub.headers_pending = true;
        }
        imported.put(record, meta.encode());
    }
    let filled = |gw: &Gw| {
        store(gw).upstream.clone().unwrap().headers_filled.load(std::sync::atomic::Ordering::Relaxed)
    };
    let fill_done = |gw: &Gw| {
        let s = store(gw).clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while s.get(schema::header_fill_cursor("fills")).await.unwrap().is_some() {
                assert!(tokio::time::Instant::now() < deadline, "the header fill did not finish");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // Done before the restart: no record, nothing read or fetched.
    let done = front_of(p.addr);
    let mut batch = imported.clone();
    batch.put(schema::HEADER_FILL_CURSORS_KEPT.to_vec(), Vec::new());
    store(&done).write_batch(batch).await.unwrap();
    through::resume_header_fills(store(&done)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(filled(&done), 0);
    assert_eq!(headers_pending(store(&done), "fills").await, theirs.len());

    // Interrupted after the first 120 keys: the rest is fetched, those are not read again.
    let halfway = front_of(p.addr);
    let mut batch = imported.clone();
    batch.put(schema::HEADER_FILL_CURSORS_KEPT.to_vec(), Vec::new());
    batch.put(schema::header_fill_cursor("fills"), theirs[119].as_bytes().to_vec());
    store(&halfway).write_batch(batch).await.unwrap();
    through::resume_header_fills(store(&halfway)).await.unwrap();
    fill_done(&halfway).await;
    assert_eq!(filled(&halfway), theirs.len() as u64 - 120);
    assert_eq!(headers_pending(store(&halfway), "fills").await, 120);

    // A database from before the records: every bucket gets one, filled from its start.
    let before = front_of(p.addr);
    store(&before).write_batch(imported).await.unwrap();
    through::resume_header_fills(store(&before)).await.unwrap();
    assert!(store(&before).get(schema::HEADER_FILL_CURSORS_KEPT.to_vec()).await.unwrap().is_some());
    fill_done(&before).await;
    assert_eq!(filled(&before), theirs.len() as u64);
    assert_eq!(headers_pending(store(&before), "fills").await, 0);
}

/// The value of the import series `name` of `bucket` in the front's `/metrics`.
async fn import_metric(front: &Gw, name: &str, bucket: &str) -> u64 {
    let metrics = front.send(anonymous(Method::GET, "/metrics", b"")).await.text();
    let series = format!("{name}{{bucket=\"{bucket}\"}} ");
    let line = metrics.lines().find_map(|l| l.strip_prefix(&series));
    line.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {series}in {metrics}"))
}

#[tokio::test]
async fn a_bucket_under_one_top_level_prefix_is_imported_in_parallel_below_it() {
    let p = pair().await;
    p.upstream.create_bucket("onetop").await;
    // Everything under `all/`: six prefixes below it, one with a level of its own, keys
    // directly under `all/`, and one key at the top.
    let mut written = 0;
    for i in 0..1200 {
        p.upstream.put("onetop", &format!("all/s{}/o{i:05}", i % 6), b"x").await;
        written += 1;
    }
    for key in ["all/s5/deeper/a", "all/s5/deeper/b", "all/direct-1", "all/direct-2", "top"] {
        p.upstream.put("onetop", key, b"y").await;
        written += 1;
    }
    let theirs = keys(&p.upstream, "onetop").await;
    assert_eq!(theirs.len(), written);
    p.front.create_bucket("onetop").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store(&p.front).get(gateway::storage::schema::import_cursor("onetop")).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "import did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys(&p.front, "onetop").await, theirs);
    assert_eq!(import_metric(&p.front, "holt_upstream_import_done", "onetop").await, 1);
    // `all/` alone was left after discovery; with every other task idle it was split into
    // its six prefixes, each listed by a task of its own (a later split may add `deeper/`).
    let prefixes = import_metric(&p.front, "holt_upstream_import_prefixes", "onetop").await;
    assert!((7..=8).contains(&prefixes), "{prefixes} prefixes listed: `all/` was not split");
    assert_eq!(import_metric(&p.front, "holt_upstream_import_prefixes_done", "onetop").await, prefixes);
    // Each key listed once: a split's keys are not listed again by a flat pass.
    assert_eq!(import_metric(&p.front, "holt_upstream_import_objects", "onetop").await, written as u64);
    let s = store(&p.front);
    let cursors =
        s.scan(gateway::storage::schema::import_prefix_cursors("onetop"), Vec::new(), 10).await.unwrap();
    assert!(cursors.is_empty(), "prefix cursors left after the import: {}", cursors.len());
}

#[tokio::test]
async fn intents_left_by_a_crash_are_repaired_at_start() {
    let p = pair().await;
    p.front.create_bucket("crash").await;
    p.front.put("crash", "kept", b"k").await;
    // A crash after the upstream write, before the index commit: the upstream has it, the
    // index does not, the intent remains.
    p.upstream.a(Method::PUT, "/crash/acknowledged-upstream", b"new").await;
    // A crash after an upstream delete, before the index removal.
    p.upstream.a(Method::DELETE, "/crash/kept", b"").await;
    let s = store(&p.front);
    for key in ["acknowledged-upstream", "kept"] {
        s.put(gateway::storage::schema::intent("crash", key), Vec::new(), holt_core::Condition::None)
            .await
            .unwrap();
    }
    let recovered = through::recover_intents(s).await.unwrap();
    assert_eq!((recovered.repaired, recovered.left), (2, 0));
    assert_eq!(keys(&p.front, "crash").await, vec!["acknowledged-upstream".to_owned()]);
    assert!(s.scan(b"I".to_vec(), Vec::new(), 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unreachable_upstream_fails_writes_with_503_and_reads_keep_answering() {
    let mut p = pair().await;
    p.front.create_bucket("down").await;
    p.front.put("down", "k", b"stored").await;
    // Stop the upstream.
    let _ = p.stop.take().unwrap().send(());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = p.front.a(Method::PUT, "/down/new", b"body").await;
    r.assert_error(503, "ServiceUnavailable");
    // Listings and HEAD come from the index; nothing unacknowledged is listed.
    assert_eq!(keys(&p.front, "down").await, vec!["k".to_owned()]);
    assert_eq!(p.front.a(Method::HEAD, "/down/k", b"").await.status, StatusCode::OK);
    p.front.a(Method::GET, "/down/k", b"").await.assert_error(503, "ServiceUnavailable");
    p.front.a(Method::DELETE, "/down/k", b"").await.assert_error(503, "ServiceUnavailable");
    assert_eq!(keys(&p.front, "down").await, vec!["k".to_owned()]);
    // DeleteObjects answers 200 with every key failed, and deletes nothing from the index.
    let doc = "<Delete><Object><Key>k</Key></Object><Object><Key>other</Key></Object></Delete>";
    let r = p.front.a(Method::POST, "/down?delete", doc.as_bytes()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.xml_all("Code"), ["ServiceUnavailable", "ServiceUnavailable"].map(str::to_owned).to_vec());
    assert!(r.xml_all("Deleted").is_empty(), "{}", r.text());
    assert_eq!(keys(&p.front, "down").await, vec!["k".to_owned()]);
    // The failed writes left intents for the next start (they could not be repaired).
    assert_eq!(store(&p.front).scan(b"I".to_vec(), Vec::new(), 10).await.unwrap().len(), 3);
    // A start with the upstream still down keeps them for later instead of refusing to start.
    let recovered = through::recover_intents(store(&p.front)).await.unwrap();
    assert_eq!((recovered.repaired, recovered.left), (0, 3));
    assert_eq!(store(&p.front).scan(b"I".to_vec(), Vec::new(), 10).await.unwrap().len(), 3);
}

/// A PutObject whose record commits without waiting for its fsync (`through::restorable`)
/// must be one a repair from the upstream gives back: the record a crash could lose, rebuilt
/// from the upstream's HEAD as start-up does for the intent left behind, says the same
/// (size, ETag, content headers, user metadata). A record holding what only the index keeps
/// (tags, a canned ACL, a storage class) is not such a write.
#[tokio::test]
async fn puts_committed_without_their_fsync_are_restored_whole_by_a_repair() {
    let p = pair().await;
    p.front.create_bucket("covered").await;
    let s = store(&p.front);
    let record = |key: &'static str| async move {
        let e = s.get(gateway::storage::schema::object("covered", key)).await.unwrap().expect("record");
        gateway::storage::meta::ObjectMeta::decode(&e.value).expect("decodable")
    };
    let plain: &[(&str, &str)] = &[
        ("content-type", "text/plain"),
        ("content-disposition", "attachment"),
        ("cache-control", "no-cache"),
        ("x-amz-meta-color", "blue"),
    ];
    let r = p.front.req(USER_A, Method::PUT, "/covered/plain", plain, b"plain body").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let kept = [
        ("tagged", ("x-amz-tagging", "a=b")),
        ("public", ("x-amz-acl", "public-read")),
        ("cold", ("x-amz-storage-class", "STANDARD_IA")),
    ];
    for (key, header) in kept {
        let r = p.front.req(USER_A, Method::PUT, &format!("/covered/{key}"), &[header], b"body").await;
        assert_eq!(r.status, StatusCode::OK, "{key}: {}", r.text());
        assert!(!through::restorable(&record(key).await), "{key}: the upstream lacks part of its record");
    }
    let before = record("plain").await;
    assert!(through::restorable(&before), "a plain PutObject's record is restorable");
    // The record lost, as a crash before its fsync loses it; the intent's repair.
    s.delete(gateway::storage::schema::object("covered", "plain"), holt_core::Condition::None).await.unwrap();
    let up = s.upstream.clone().expect("upstream mode");
    through::repair_key(s, &up, "covered", "plain").await.unwrap();
    let after = record("plain").await;
    assert_eq!((after.size, after.md5, after.etag()), (before.size, before.md5, before.etag()));
    assert_eq!(after.headers, before.headers);
    assert!(through::restorable(&after));
    let r = p.front.a(Method::GET, "/covered/plain", b"").await;
    assert_eq!((r.status, r.body.as_slice()), (StatusCode::OK, &b"plain body"[..]));
}

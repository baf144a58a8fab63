//! The gateway in front of a real MinIO (`--upstream`): what only upstream mode has.
//!
//! Invariants:
//! - Writes made directly to MinIO, around the gateway, reach the gateway's listings and HEAD
//!   through MinIO's notification webhook (reconciliation off, so nothing else could explain
//!   them) within [`NOTIFICATION_BOUND`], and through periodic reconciliation alone within one
//!   period plus one pass ([`RECONCILE_BOUND`]).
//! - Attaching an existing bucket of 100,000 objects under 50 top-level prefixes imports it
//!   (prefixes listed in parallel); a SIGKILL halfway through
//!   loses nothing: the restarted gateway resumes from its cursor (it lists less than the
//!   whole bucket again) and ends with exactly MinIO's listing; `scripts/import-progress.sh`
//!   follows it to its end.
//! - With MinIO distributed over two nodes of two drives each and one node stopped, listings
//!   and HEAD keep answering from the index and GETs from the surviving drives (read quorum
//!   2 of 4), while a PUT that cannot reach MinIO's write quorum gets 503 and is neither
//!   listed by the gateway nor present in MinIO.
//!
//! - Tags written through the gateway (PutObject's and CreateMultipartUpload's header,
//!   PutObjectTagging, DeleteObjectTagging, CopyObject with either directive) are MinIO's, and
//!   tags changed directly in MinIO reach the gateway through its notifications.
//! - An upstream without DeleteObjects (Google Cloud Storage's XML API has none; played by
//!   a proxy in front of MinIO that answers it 501) gets a DeleteObject per key: the
//!   client's DeleteObjects succeeds, the gateway and MinIO agree on what is left, and the
//!   gateway asks the upstream for DeleteObjects only once.
//! - A key MinIO cannot store (`a//b`) is refused with 400 `InvalidRequest` naming MinIO's
//!   code, one with `.` or `..` segments by the gateway itself before any upstream request;
//!   either is absent to HEAD, deletes as absent keys do, writes nothing to MinIO under any
//!   name, and leaves no intent for the next start.
//!
//! The other scenarios run in upstream mode too with `HOLT_COMPAT_UPSTREAM=minio`
//! (`scripts/test.sh`, phase compat-upstream).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use s3_compat_tests::clients::{boto3_error_code, Boto3, User};
use s3_compat_tests::data::{md5_hex, minio_refuses, TRICKY_KEYS};
use s3_compat_tests::exec::Cmd;
use s3_compat_tests::gateway::Gateway;
use s3_compat_tests::minio::{http_get, Layout, Minio, MINIO_ACCESS_KEY, MINIO_SECRET_KEY, WEBHOOK_ARN};
use s3_compat_tests::tools::workspace_root;
use serde_json::{json, Value};

/// The documented bound for a write made directly to MinIO to reach the gateway through a
/// notification (docs/operations.md): delivery is immediate, this leaves room for a loaded
/// CI machine.
const NOTIFICATION_BOUND: Duration = Duration::from_secs(15);
/// `--upstream-reconcile-secs` in the reconciliation scenario.
const RECONCILE_SECS: u64 = 2;
/// One period, one pass over a small bucket, and room for a loaded machine.
const RECONCILE_BOUND: Duration = Duration::from_secs(RECONCILE_SECS + 15);
const EVENTS_TOKEN: &str = "compat-events-token";
const IMPORT_OBJECTS: u64 = 100_000;

fn direct(minio: &Minio) -> Boto3 {
    Boto3::at(&minio.endpoint(), User::Keys(MINIO_ACCESS_KEY, MINIO_SECRET_KEY))
}

fn gateway_in_front(label: &str, minio: &Minio, more: &[&str]) -> Gateway {
    let mut args = minio.upstream_args();
    args.extend(more.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_args(label, &args)
}

/// Every object of `bucket` as `key etag size` lines, as `client` lists it.
fn inventory(client: &Boto3, bucket: &str, what: &str) -> Vec<String> {
    let out = client.op("inventory", &json!({ "bucket": bucket })).run(what).ok();
    out.json()["objects"]
        .as_array()
        .map(|objects| {
            objects
                .iter()
                .map(|o| format!("{} {} {}", o[0].as_str().unwrap_or(""), o[1].as_str().unwrap_or(""), o[2]))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until the gateway lists `bucket` exactly as MinIO does; returns how long it took.
fn converge(gw: &Gateway, minio: &Minio, bucket: &str, bound: Duration, how: &str) -> Duration {
    let started = Instant::now();
    let (through, behind) = (Boto3::new(gw), direct(minio));
    loop {
        let want = inventory(&behind, bucket, "list MinIO directly");
        let have = inventory(&through, bucket, "list through the gateway");
        if have == want {
            return started.elapsed();
        }
        if started.elapsed() > bound {
            let missing: Vec<&String> = want.iter().filter(|w| !have.contains(w)).take(5).collect();
            let extra: Vec<&String> = have.iter().filter(|h| !want.contains(h)).take(5).collect();
            panic!(
                "[{}] the gateway's listing did not converge on MinIO's through {how} within {bound:?}: \
                 missing {missing:?}, extra {extra:?}\n--- gateway log ---\n{}",
                gw.label(),
                gw.log_tail(3000)
            );
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Writes around the gateway: new keys, an overwrite with another size, a deletion of a key
/// the gateway wrote. Returns the overwritten key and its new body.
fn write_around(gw: &Gateway, minio: &Minio, bucket: &str) -> (&'static str, String) {
    let through = Boto3::new(gw);
    through
        .call("put_object", json!({ "Bucket": bucket, "Key": "via-gateway/doomed", "Body": "bye" }))
        .run("put through the gateway")
        .ok();
    through
        .call("put_object", json!({ "Bucket": bucket, "Key": "direct/k00", "Body": "old" }))
        .run("put the key MinIO will overwrite")
        .ok();
    let behind = direct(minio);
    let keys: Vec<String> = (1..=30).map(|i| format!("direct/k{i:02}")).collect();
    behind
        .op("seed", &json!({ "bucket": bucket, "keys": keys, "threads": 4 }))
        .run("put directly to MinIO")
        .ok();
    let body = "x".repeat(5000);
    behind
        .call("put_object", json!({ "Bucket": bucket, "Key": "direct/k00", "Body": body }))
        .run("overwrite directly in MinIO")
        .ok();
    behind
        .call("delete_object", json!({ "Bucket": bucket, "Key": "via-gateway/doomed" }))
        .run("delete directly in MinIO")
        .ok();
    ("direct/k00", body)
}

/// MinIO with its notification webhook pointed at a gateway in front of it (reconciliation
/// off: only a notification can bring MinIO's changes to the index), and `bucket`, created
/// through the gateway, notifying it of every object created or removed.
fn notifying_minio(label: &str, bucket: &str) -> (Minio, Gateway) {
    let mut minio = Minio::new(label, Layout::Single);
    let gw = gateway_in_front(
        label,
        &minio,
        &["--upstream-events-token", EVENTS_TOKEN, "--upstream-reconcile-secs", "0"],
    );
    minio.notify_webhook(&format!("{}/_holt/events", gw.endpoint()), EVENTS_TOKEN);
    minio.run();
    Boto3::new(&gw)
        .call("create_bucket", json!({ "Bucket": bucket }))
        .run("create bucket through the gateway")
        .ok();
    let notification = json!({ "QueueConfigurations": [
        { "QueueArn": WEBHOOK_ARN, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"] }
    ] });
    direct(&minio)
        .call(
            "put_bucket_notification_configuration",
            json!({ "Bucket": bucket, "NotificationConfiguration": notification }),
        )
        .run("point MinIO's notifications at the gateway")
        .ok();
    (minio, gw)
}

#[test]
fn direct_writes_arrive_through_minio_notifications() {
    let bucket = "notified";
    let (minio, gw) = notifying_minio("upstream-notify", bucket);
    let (key, body) = write_around(&gw, &minio, bucket);
    let took = converge(&gw, &minio, bucket, NOTIFICATION_BOUND, "notifications");
    println!("notifications: the gateway matched MinIO {:.2}s after the direct writes", took.as_secs_f64());
    let head = Boto3::new(&gw).call("head_object", json!({ "Bucket": bucket, "Key": key })).run("head").ok();
    head.check_eq(head.json()["ContentLength"].as_u64(), Some(body.len() as u64), "size after the overwrite");
    head.check_eq(
        head.json()["ETag"].as_str().map(str::to_owned),
        Some(format!("\"{}\"", md5_hex(body.as_bytes()))),
        "ETag after the overwrite",
    );
}

/// The tags `client` reads of `bucket/key`, sorted, as `k=v`.
fn tags_of(client: &Boto3, bucket: &str, key: &str, what: &str) -> Vec<String> {
    let out = client.call("get_object_tagging", json!({ "Bucket": bucket, "Key": key })).run(what).ok();
    let mut tags: Vec<String> = out.json()["TagSet"]
        .as_array()
        .map(|set| {
            set.iter()
                .map(|t| format!("{}={}", t["Key"].as_str().unwrap_or(""), t["Value"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    tags.sort();
    tags
}

fn tag_set(pairs: &[(&str, &str)]) -> Value {
    json!({ "TagSet": pairs.iter().map(|(k, v)| json!({ "Key": k, "Value": v })).collect::<Vec<_>>() })
}

/// Tags written through the gateway (PutObject's header, PutObjectTagging,
/// DeleteObjectTagging, CopyObject with either directive, CreateMultipartUpload's header)
/// are MinIO's: read back directly from MinIO they are what the gateway answers. Tags
/// changed directly in MinIO reach the gateway through its notifications (MinIO notifies
/// `s3:ObjectCreated:PutTagging` and `DeleteTagging`) within the bound.
#[test]
fn tags_live_upstream() {
    let bucket = "tagged";
    let (minio, gw) = notifying_minio("upstream-tags", bucket);
    let (through, behind) = (Boto3::new(&gw), direct(&minio));
    let agree = |key: &str, want: &[&str], step: &str| {
        let want: Vec<String> = want.iter().map(|t| (*t).to_owned()).collect();
        let minio_has = tags_of(&behind, bucket, key, &format!("{step}: MinIO's tags"));
        let gateway_has = tags_of(&through, bucket, key, &format!("{step}: the gateway's tags"));
        assert_eq!(minio_has, want, "{step}: MinIO's tags of {key}");
        assert_eq!(gateway_has, want, "{step}: the gateway's tags of {key}");
    };

    // A value with a space, `+`, `/` and `=`: the header's encoding reaches MinIO intact.
    let put =
        json!({ "Bucket": bucket, "Key": "put", "Body": "p", "Tagging": "team=a%20b%2Bc&path=x%2Fy%3Dz" });
    through.call("put_object", put).run("put with tags").ok();
    agree("put", &["path=x/y=z", "team=a b+c"], "PutObject with x-amz-tagging");

    let set = tag_set(&[("stage", "two"), ("owner", "ops")]);
    through
        .call("put_object_tagging", json!({ "Bucket": bucket, "Key": "put", "Tagging": set }))
        .run("put tagging")
        .ok();
    agree("put", &["owner=ops", "stage=two"], "PutObjectTagging");

    let copy = json!({ "Bucket": bucket, "Key": "copied", "CopySource": { "Bucket": bucket, "Key": "put" } });
    through.call("copy_object", copy).run("copy, tags copied").ok();
    agree("copied", &["owner=ops", "stage=two"], "CopyObject, directive COPY");
    let copy = json!({
        "Bucket": bucket, "Key": "replaced", "CopySource": { "Bucket": bucket, "Key": "put" },
        "TaggingDirective": "REPLACE", "Tagging": "kind=copy",
    });
    through.call("copy_object", copy).run("copy, tags replaced").ok();
    agree("replaced", &["kind=copy"], "CopyObject, directive REPLACE");

    through
        .call("delete_object_tagging", json!({ "Bucket": bucket, "Key": "put" }))
        .run("delete tagging")
        .ok();
    agree("put", &[], "DeleteObjectTagging");

    let created = through
        .call("create_multipart_upload", json!({ "Bucket": bucket, "Key": "multi", "Tagging": "parts=1" }))
        .run("create multipart upload with tags")
        .ok();
    let upload_id = created.json()["UploadId"].as_str().unwrap_or_default().to_owned();
    let part = through
        .call(
            "upload_part",
            json!({ "Bucket": bucket, "Key": "multi", "UploadId": upload_id, "PartNumber": 1, "Body": "m" }),
        )
        .run("upload part")
        .ok();
    let etag = part.json()["ETag"].clone();
    through
        .call(
            "complete_multipart_upload",
            json!({
                "Bucket": bucket, "Key": "multi", "UploadId": upload_id,
                "MultipartUpload": { "Parts": [{ "PartNumber": 1, "ETag": etag }] },
            }),
        )
        .run("complete multipart upload")
        .ok();
    agree("multi", &["parts=1"], "CreateMultipartUpload with x-amz-tagging");

    // Around the gateway: MinIO's notifications bring the change.
    let set = tag_set(&[("set", "directly")]);
    behind
        .call("put_object_tagging", json!({ "Bucket": bucket, "Key": "copied", "Tagging": set }))
        .run("put tagging directly in MinIO")
        .ok();
    behind
        .call("delete_object_tagging", json!({ "Bucket": bucket, "Key": "replaced" }))
        .run("delete tagging directly in MinIO")
        .ok();
    let started = Instant::now();
    loop {
        let copied = tags_of(&through, bucket, "copied", "the gateway's tags of copied");
        let replaced = tags_of(&through, bucket, "replaced", "the gateway's tags of replaced");
        if copied == ["set=directly"] && replaced.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < NOTIFICATION_BOUND,
            "tags changed in MinIO did not reach the gateway within {NOTIFICATION_BOUND:?}: \
             copied {copied:?}, replaced {replaced:?}\n--- gateway log ---\n{}",
            gw.log_tail(3000)
        );
        thread::sleep(Duration::from_millis(200));
    }
    println!("tags changed in MinIO reached the gateway after {:.2}s", started.elapsed().as_secs_f64());
}

#[test]
fn direct_writes_arrive_through_reconciliation() {
    let label = "upstream-reconcile";
    let bucket = "reconciled";
    let minio = Minio::start(label);
    let gw = gateway_in_front(label, &minio, &["--upstream-reconcile-secs", &RECONCILE_SECS.to_string()]);
    Boto3::new(&gw)
        .call("create_bucket", json!({ "Bucket": bucket }))
        .run("create bucket through the gateway")
        .ok();
    write_around(&gw, &minio, bucket);
    let took = converge(&gw, &minio, bucket, RECONCILE_BOUND, "reconciliation");
    println!(
        "reconciliation every {RECONCILE_SECS}s: the gateway matched MinIO after {:.2}s",
        took.as_secs_f64()
    );
}

/// `name{labels}` from the gateway's `/metrics`, or `None` when the series is absent.
fn metric(gw: &Gateway, series: &str) -> Option<f64> {
    let (_, text) = http_get(gw.addr(), "/metrics")?;
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn import_of_100k_objects_resumes_after_sigkill() {
    let label = "upstream-import";
    let bucket = "imported";
    let minio = Minio::start(label);
    let behind = direct(&minio);
    behind.call("create_bucket", json!({ "Bucket": bucket })).run("create the bucket in MinIO").ok();
    let seeded = Instant::now();
    behind
        .op("snowball", &json!({ "bucket": bucket, "prefix": "", "count": IMPORT_OBJECTS }))
        .timeout(Duration::from_secs(600))
        .run("write 100,000 objects to MinIO (one extracted tar)")
        .ok();
    behind.call("delete_object", json!({ "Bucket": bucket, "Key": "snowball.tar" })).run("drop the tar").ok();
    let want = inventory(&behind, bucket, "list MinIO");
    assert_eq!(
        want.len() as u64,
        IMPORT_OBJECTS,
        "[{label}] MinIO holds {} objects after the seeding",
        want.len()
    );
    println!("seeded {IMPORT_OBJECTS} objects in MinIO in {:.1}s", seeded.elapsed().as_secs_f64());

    let mut gw = gateway_in_front(label, &minio, &["--upstream-reconcile-secs", "0"]);
    let started = Instant::now();
    Boto3::new(&gw).call("create_bucket", json!({ "Bucket": bucket })).run("attach the bucket").ok();
    let objects = format!("holt_upstream_import_objects{{bucket=\"{bucket}\"}}");
    let done = format!("holt_upstream_import_done{{bucket=\"{bucket}\"}}");
    let mut at_kill = 0.0;
    while at_kill < IMPORT_OBJECTS as f64 / 2.0 {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "[{label}] the import reached {at_kill} objects in 300s\n--- gateway log ---\n{}",
            gw.log_tail(3000)
        );
        // A listing while the import runs comes from MinIO, and is complete.
        at_kill = metric(&gw, &objects).unwrap_or(0.0);
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(&gw, &done), Some(0.0), "[{label}] the import must still be running at the kill");
    gw.kill9();
    println!(
        "SIGKILL with {at_kill} of {IMPORT_OBJECTS} imported after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    gw.start_again();
    let resumed = Instant::now();
    // The terminal progress bar follows the resumed import to its end.
    Cmd::new("import-progress.sh", workspace_root().join("scripts/import-progress.sh"))
        .arg(gw.endpoint())
        .arg(bucket)
        .timeout(Duration::from_secs(300))
        .run("follow the resumed import")
        .ok()
        .stdout_has(&format!("import of {bucket} finished"));
    assert_eq!(metric(&gw, &done), Some(1.0), "[{label}] the progress bar ended before the import");
    let second = metric(&gw, &objects).unwrap_or(f64::NAN);
    println!("resumed import: {second} more objects in {:.1}s", resumed.elapsed().as_secs_f64());
    // The cursor moves after each page of 1,000 is written: at most that page is listed again.
    assert!(
        second <= IMPORT_OBJECTS as f64 - at_kill + 1000.0,
        "[{label}] the restarted import listed {second} objects: it started over instead of resuming \
         after {at_kill}"
    );
    let have = inventory(&Boto3::new(&gw), bucket, "list through the gateway");
    if let Some(why) = s3_compat_tests::exec::describe_key_difference(&have, &want) {
        panic!("[{label}] the imported listing differs from MinIO's: {why}");
    }
    // Headers of an imported object are fetched on first read.
    let key = "07/0/obj-000007";
    let get =
        Boto3::new(&gw).call("get_object", json!({ "Bucket": bucket, "Key": key })).run("get imported").ok();
    get.check_eq(
        get.json()["Body_md5"].as_str().map(str::to_owned),
        Some(md5_hex(key.as_bytes())),
        "imported body",
    );
    let top = Boto3::new(&gw)
        .call("list_objects_v2", json!({ "Bucket": bucket, "Delimiter": "/" }))
        .run("delimiter listing of the imported bucket")
        .ok();
    top.check_eq(
        top.json()["CommonPrefixes"].as_array().map(Vec::len),
        Some(50),
        "common prefixes at the root",
    );
}

#[test]
fn distributed_minio_with_a_node_down() {
    let label = "upstream-distributed";
    let bucket = "erasure";
    let mut minio = Minio::new(label, Layout::TwoNodes);
    minio.run();
    let gw = gateway_in_front(label, &minio, &["--upstream-reconcile-secs", "0"]);
    let through = Boto3::new(&gw);
    through.call("create_bucket", json!({ "Bucket": bucket })).run("create bucket").ok();
    let keys: Vec<String> = (0..40).map(|i| format!("d{}/k{i:02}", i % 4)).collect();
    through
        .op("seed", &json!({ "bucket": bucket, "keys": keys, "threads": 4 }))
        .run("seed through the gateway")
        .ok();
    let before = inventory(&through, bucket, "list before the node stops");

    minio.stop_node(1);
    let after = inventory(&through, bucket, "list with a node down");
    if let Some(why) = s3_compat_tests::exec::describe_key_difference(&after, &before) {
        panic!("[{label}] the listing changed when a MinIO node stopped: {why}");
    }
    let rollup = through
        .call("list_objects_v2", json!({ "Bucket": bucket, "Delimiter": "/" }))
        .run("delimiter listing with a node down")
        .ok();
    rollup.check_eq(rollup.json()["CommonPrefixes"].as_array().map(Vec::len), Some(4), "common prefixes");
    let head =
        through.call("head_object", json!({ "Bucket": bucket, "Key": "d1/k01" })).run("head, node down").ok();
    head.check_eq(
        head.json()["ContentLength"].as_u64(),
        Some("d1/k01".len() as u64),
        "HEAD size with a node down",
    );
    let expected: serde_json::Map<String, Value> =
        keys.iter().map(|k| (k.clone(), Value::from(md5_hex(k.as_bytes())))).collect();
    let verify = through
        .op("verify", &json!({ "bucket": bucket, "expected": expected, "threads": 4 }))
        .run("GET every object with a node down")
        .ok();
    verify.check_eq(
        verify.json()["missing"].as_array().map(Vec::len),
        Some(0),
        "GETs refused with 2 of 4 drives",
    );
    verify.check_eq(verify.json()["mismatched"].as_array().map(Vec::len), Some(0), "GETs with wrong bodies");

    // Below write quorum: refused with 503, never acknowledged, never listed.
    let put = through
        .call("put_object", json!({ "Bucket": bucket, "Key": "below-quorum", "Body": "lost?" }))
        .timeout(Duration::from_secs(180))
        .run("put with a node down");
    put.check_eq(boto3_error_code(&put).as_str(), "ServiceUnavailable", "PUT below MinIO's write quorum");
    put.check_eq(put.json()["error"]["HTTPStatusCode"].as_u64(), Some(503), "status of that PUT");
    let listed = inventory(&through, bucket, "list after the refused PUT");
    listed.iter().for_each(|l| assert!(!l.starts_with("below-quorum "), "[{label}] a refused PUT is listed"));

    minio.run();
    let behind = inventory(&direct(&minio), bucket, "list MinIO with both nodes up");
    if let Some(why) = s3_compat_tests::exec::describe_key_difference(&behind, &before) {
        panic!("[{label}] MinIO's listing after the node came back differs from before: {why}");
    }
    through
        .call("put_object", json!({ "Bucket": bucket, "Key": "back", "Body": "quorum again" }))
        .run("put with both nodes up")
        .ok();
}

#[test]
fn keys_minio_cannot_store_are_refused_and_leave_nothing_behind() {
    let label = "upstream-refused-keys";
    let bucket = "refused";
    let minio = Minio::start(label);
    let gw = gateway_in_front(label, &minio, &[]);
    let through = Boto3::new(&gw);
    through.call("create_bucket", json!({ "Bucket": bucket })).run("create bucket").ok();
    let refused: Vec<&str> = TRICKY_KEYS.iter().copied().filter(|k| minio_refuses(k)).collect();
    assert!(!refused.is_empty(), "[{label}] the tricky keys include names MinIO refuses");
    for key in &refused {
        let put = through
            .call("put_object", json!({ "Bucket": bucket, "Key": key, "Body": "x" }))
            .run(&format!("put {key:?}"));
        put.check_eq(boto3_error_code(&put).as_str(), "InvalidRequest", "code for a name MinIO refuses");
        put.check_eq(put.json()["error"]["HTTPStatusCode"].as_u64(), Some(400), "status for that name");
        // `.` and `..` segments are refused by the gateway itself (URL normalisation would
        // resolve them upstream: `dots/../up/./here` would write `up/here`); the rest by MinIO.
        let dots = key.split('/').any(|s| s == "." || s == "..");
        let why = if dots { "path segments" } else { "XMinioInvalidObjectName" };
        put.check(
            put.json()["error"]["Message"].as_str().unwrap_or("").contains(why),
            &format!("the message says why ({why})"),
        );
        let head = through
            .call("head_object", json!({ "Bucket": bucket, "Key": key }))
            .run(&format!("head {key:?}"));
        head.check_eq(boto3_error_code(&head).as_str(), "404", "HEAD of a refused name");
        through
            .call("delete_object", json!({ "Bucket": bucket, "Key": key }))
            .run(&format!("delete {key:?} (absent, so 204)"))
            .ok();
    }
    let listed = inventory(&through, bucket, "list after the refusals");
    assert!(listed.is_empty(), "[{label}] refused names are listed: {listed:?}");
    let behind = inventory(&direct(&minio), bucket, "list MinIO after the refusals");
    assert!(behind.is_empty(), "[{label}] a refused write reached MinIO under another name: {behind:?}");
    // The refusals left no intent behind: a restart has nothing to repair and logs nothing.
    let mut gw = gw;
    gw.restart();
    assert!(
        !gw.log_tail(20_000).contains("repaired keys whose upstream writes were interrupted"),
        "[{label}] a refused write left an intent\n{}",
        gw.log_tail(3000)
    );
}

/// A proxy in front of MinIO that answers DeleteObjects (`POST /BUCKET?delete`) with 501
/// NotImplemented, as an upstream without it does, and relays every other request unchanged
/// but for `Connection: close` (one request per connection). Returns its endpoint and how
/// many DeleteObjects it refused.
fn without_delete_objects(upstream: &str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let endpoint = format!("http://{}", listener.local_addr().expect("proxy address"));
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let refused = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&refused);
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let (upstream, counted) = (upstream.clone(), Arc::clone(&counted));
            thread::spawn(move || relay(client, &upstream, &counted));
        }
    });
    (endpoint, refused)
}

/// One request of `without_delete_objects`: refused, or relayed to `upstream`.
fn relay(mut client: TcpStream, upstream: &str, refused: &AtomicUsize) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<&str> = lines.collect();
    let mut words = request_line.split(' ');
    let (method, target) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let query = target.split_once('?').map_or("", |(_, q)| q);
    if method == "POST" && query.split('&').any(|p| p == "delete" || p.starts_with("delete=")) {
        refused.fetch_add(1, Ordering::SeqCst);
        // The body is read first: closing with it unread would reset the connection.
        let length = headers
            .iter()
            .find_map(|h| h.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case("content-length")))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        client.read_exact(&mut vec![0; length])?;
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NotImplemented</Code>\
                    <Message>A header or query you provided requested a function that is not implemented.</Message></Error>";
        write!(
            client,
            "HTTP/1.1 501 Not Implemented\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )?;
        return Ok(());
    }
    let mut forwarded = format!("{request_line}\r\n");
    for header in headers.iter().filter(|h| !h.to_ascii_lowercase().starts_with("connection:")) {
        forwarded.push_str(header);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    let mut server = TcpStream::connect(upstream)?;
    server.write_all(forwarded.as_bytes())?;
    let (mut from_client, mut to_server) = (client.try_clone()?, server.try_clone()?);
    let upload = thread::spawn(move || std::io::copy(&mut from_client, &mut to_server));
    let _ = std::io::copy(&mut server, &mut client);
    let _ = client.shutdown(Shutdown::Both);
    let _ = upload.join();
    Ok(())
}

#[test]
fn deletes_of_many_keys_go_one_by_one_to_an_upstream_without_delete_objects() {
    let label = "upstream-no-multi-delete";
    let bucket = "one-by-one";
    let minio = Minio::start(label);
    let (proxy, refused) = without_delete_objects(&minio.endpoint());
    let mut args = minio.upstream_args();
    args[1] = proxy;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_args(label, &args);
    let through = Boto3::new(&gw);
    through.call("create_bucket", json!({ "Bucket": bucket })).run("create bucket").ok();
    let keys: Vec<String> = (0..30).map(|i| format!("dir/key-{i:02}")).collect();
    for key in &keys {
        through
            .call("put_object", json!({ "Bucket": bucket, "Key": key, "Body": key }))
            .run(&format!("put {key}"))
            .ok();
    }
    let delete = |batch: &[String], what: &str| {
        let objects: Vec<Value> = batch.iter().map(|k| json!({ "Key": k })).collect();
        let out = through
            .call("delete_objects", json!({ "Bucket": bucket, "Delete": { "Objects": objects } }))
            .run(what)
            .ok();
        let deleted = out.json()["Deleted"].as_array().map_or(0, Vec::len);
        out.check_eq(deleted, batch.len(), "keys reported deleted");
        out.check(out.json()["Errors"].as_array().is_none_or(Vec::is_empty), "no key reported failed");
    };
    delete(&keys[..20], "delete 20 keys in one DeleteObjects");
    assert_eq!(refused.load(Ordering::SeqCst), 1, "[{label}] the gateway did not try DeleteObjects once");
    delete(&keys[20..25], "delete 5 more");
    assert_eq!(
        refused.load(Ordering::SeqCst),
        1,
        "[{label}] the gateway asked again for DeleteObjects after the upstream refused it"
    );
    let left: Vec<String> =
        keys[25..].iter().map(|k| format!("{k} \"{}\" {}", md5_hex(k.as_bytes()), k.len())).collect();
    let listed = inventory(&through, bucket, "list through the gateway");
    assert_eq!(listed, left, "[{label}] the gateway lists what the deletes left");
    let behind = inventory(&direct(&minio), bucket, "list MinIO");
    assert_eq!(behind, left, "[{label}] MinIO holds what the deletes left");
}

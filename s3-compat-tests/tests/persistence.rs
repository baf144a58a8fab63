//! Data outlives the gateway process, seen through real clients.
//!
//! Invariants:
//! - After a clean restart (SIGTERM, exit 0, start again on the same data dir), and after a
//!   second one, every listing (v2 recursive, v2 with delimiter at the root and under a prefix,
//!   v1 with markers, aws-cli `s3 ls`) is identical to the listing before, and every body reads
//!   back with its MD5.
//! - Crash model: SIGKILL of the gateway in the middle of a concurrent write load (8 boto3
//!   threads, PutObject of 1 KiB bodies, retries off, half of the threads sending no checksum:
//!   in upstream mode their records commit without waiting for an fsync, covered by their
//!   intents). Every PUT that got a 200 before the kill
//!   is listed and readable with its exact body after restart; nothing appears that was never
//!   written; at most the in-flight PUTs (one per thread) may additionally exist, and then only
//!   with their exact body; the gateway accepts writes afterwards. In upstream mode
//!   (`HOLT_COMPAT_UPSTREAM=minio`) the restarted index lists exactly the keys MinIO holds.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use s3_compat_tests::clients::{Aws, Boto3, User};
use s3_compat_tests::data::{md5_hex, pagination_keys, sorted, tricky_keys, DIR_MARKER_KEY, TREE_KEYS};
use s3_compat_tests::exec::describe_key_difference;
use s3_compat_tests::gateway::Gateway;
use s3_compat_tests::minio::{MINIO_ACCESS_KEY, MINIO_SECRET_KEY};
use serde_json::{json, Value};

const BUCKET: &str = "persist-bucket";
const LOAD_THREADS: usize = 8;
const LOAD_BODY_BYTES: usize = 1024;
/// Kill once this many PUTs were acknowledged (or after LOAD_KILL_AFTER, whichever is first).
const LOAD_ACKS_BEFORE_KILL: usize = 300;
const LOAD_KILL_AFTER: Duration = Duration::from_secs(20);

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Everything the clients can see of the bucket, as comparable text.
fn snapshot(gw: &Gateway, when: &str) -> BTreeMap<&'static str, Vec<String>> {
    let b = Boto3::new(gw);
    let mut snap = BTreeMap::new();
    let page = |kwargs: Value, page_size: u64, what: &str| {
        let out = b
            .op(
                "paginate",
                &json!({ "method": kwargs["method"], "kwargs": kwargs["kwargs"], "page_size": page_size }),
            )
            .run(&format!("{what} ({when})"))
            .ok();
        let v = out.json();
        let mut entries = strings(&v["keys"]);
        entries.extend(strings(&v["prefixes"]).into_iter().map(|p| format!("PREFIX {p}")));
        entries
    };
    snap.insert(
        "v2 recursive",
        page(json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET } }), 300, "v2 recursive"),
    );
    snap.insert(
        "v2 root delimiter",
        page(
            json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Delimiter": "/" } }),
            2,
            "v2 root /",
        ),
    );
    snap.insert(
        "v2 prefix delimiter",
        page(
            json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Prefix": "tree/", "Delimiter": "/" } }),
            1000,
            "v2 tree/ /",
        ),
    );
    snap.insert(
        "v1 markers",
        page(
            json!({ "method": "list_objects", "kwargs": { "Bucket": BUCKET, "Prefix": "page/" } }),
            250,
            "v1 page/",
        ),
    );
    let aws = Aws::new(gw);
    let ls = aws.s3(&["ls", &format!("s3://{BUCKET}/")]).run(&format!("aws s3 ls root ({when})")).ok();
    // Drop the timestamps (ls prints local times) and keep "PRE x/" or "size key".
    let lines: Vec<String> = ls
        .stdout
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("PRE ") {
                t.to_string()
            } else {
                t.splitn(3, ' ').nth(2).unwrap_or(t).trim_start().to_string()
            }
        })
        .collect();
    snap.insert("aws s3 ls root", lines);
    snap
}

fn verify_bodies(gw: &Gateway, expected: &BTreeMap<String, String>, when: &str) {
    let b = Boto3::new(gw);
    let out = b
        .op("verify", &json!({ "bucket": BUCKET, "expected": expected }))
        .run(&format!("read back bodies ({when})"))
        .ok();
    let v = out.json();
    out.check_eq(v["missing"].clone(), json!([]), "missing keys");
    out.check_eq(v["mismatched"].clone(), json!([]), "keys with wrong bodies");
    out.check_eq(v["checked"].as_u64(), Some(expected.len() as u64), "keys checked");
}

fn compare_snapshots(
    before: &BTreeMap<&'static str, Vec<String>>,
    after: &BTreeMap<&'static str, Vec<String>>,
    when: &str,
) {
    for (name, entries) in before {
        let other = after.get(name).cloned().unwrap_or_default();
        if let Some(diff) = describe_key_difference(&other, entries) {
            panic!("[persistence] listing '{name}' changed {when}: {diff}");
        }
    }
}

#[test]
fn listings_survive_clean_restarts() {
    let mut gw = Gateway::start("persist-restart");
    let b = Boto3::new(&gw);
    b.call("create_bucket", json!({ "Bucket": BUCKET })).run("create bucket").ok();
    let mut keys: Vec<String> = pagination_keys(1050);
    keys.extend(TREE_KEYS.iter().map(|k| k.to_string()));
    keys.extend(tricky_keys(&gw).iter().map(|k| k.to_string()));
    b.op("seed", &json!({ "bucket": BUCKET, "keys": keys, "threads": 16 })).run("seed 1065 keys").ok();
    b.call("put_object", json!({ "Bucket": BUCKET, "Key": DIR_MARKER_KEY, "Body": "" }))
        .run("put dir marker")
        .ok();
    let expected: BTreeMap<String, String> =
        keys.iter().map(|k| (k.clone(), md5_hex(k.as_bytes()))).collect();

    let before = snapshot(&gw, "before restart");
    let mut all = sorted(keys.clone());
    all.push(DIR_MARKER_KEY.to_string());
    if let Some(diff) = describe_key_difference(&before["v2 recursive"], &sorted(all)) {
        panic!("[persistence] listing before any restart is already wrong: {diff}");
    }
    gw.restart();
    compare_snapshots(&before, &snapshot(&gw, "after restart"), "after a clean restart");
    verify_bodies(&gw, &expected, "after restart");
    gw.restart();
    compare_snapshots(&before, &snapshot(&gw, "after second restart"), "after a second clean restart");
}

/// The body the load generator writes for `key` (see `op_load` in py/s3ops.py).
fn load_body(key: &str) -> Vec<u8> {
    key.as_bytes().iter().copied().cycle().take(LOAD_BODY_BYTES).collect()
}

#[test]
fn acknowledged_uploads_survive_sigkill_under_load() {
    let mut gw = Gateway::start("persist-sigkill");
    let b = Boto3::new(&gw);
    b.call("create_bucket", json!({ "Bucket": BUCKET })).run("create bucket").ok();
    let baseline: Vec<String> = TREE_KEYS.iter().map(|k| k.to_string()).collect();
    b.op("seed", &json!({ "bucket": BUCKET, "keys": baseline, "threads": 4 })).run("seed baseline").ok();

    let load = b.op(
        "load",
        &json!({ "bucket": BUCKET, "prefix": "load/", "count": 100_000, "threads": LOAD_THREADS, "size": LOAD_BODY_BYTES }),
    );
    let mut child =
        load.command().spawn().unwrap_or_else(|e| panic!("[boto3] cannot start the load generator: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("[boto3] load generator stdout not piped"));
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    let mut other_lines = Vec::new();
    let started = Instant::now();
    while acked.len() < LOAD_ACKS_BEFORE_KILL && started.elapsed() < LOAD_KILL_AFTER {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => record_line(&line, &mut acked, &mut other_lines),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let acked_at_kill = acked.len();
    gw.kill9();
    println!("SIGKILL after {acked_at_kill} acknowledged PUTs ({:.1}s)", started.elapsed().as_secs_f64());

    // The generator notices the dead server and exits; acks printed after the kill were still
    // acknowledged before it (the response had arrived).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
        }
    }
    let _ = reader.join();
    while let Ok(line) = rx.try_recv() {
        record_line(&line, &mut acked, &mut other_lines);
    }
    assert!(
        acked_at_kill >= 20,
        "[boto3] step 'write load': only {acked_at_kill} PUTs acknowledged in {LOAD_KILL_AFTER:?} before the kill; \
         other output: {other_lines:?}\n--- gateway log ---\n{}",
        gw.log_tail(3000)
    );

    gw.start_again();
    let b = Boto3::new(&gw);
    let listed = b
        .op("paginate", &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Prefix": "load/" }, "page_size": 500 }))
        .run("list load/ after SIGKILL")
        .ok();
    let listed_keys: BTreeSet<String> = strings(&listed.json()["keys"]).into_iter().collect();
    let missing: Vec<&String> = acked.keys().filter(|k| !listed_keys.contains(*k)).take(10).collect();
    listed.check(
        missing.is_empty(),
        &format!(
            "{} acknowledged keys are not listed after SIGKILL, e.g. {missing:?}",
            acked.keys().filter(|k| !listed_keys.contains(*k)).count()
        ),
    );
    let extra: Vec<&String> = listed_keys.iter().filter(|k| !acked.contains_key(*k)).collect();
    listed.check(
        extra.len() <= LOAD_THREADS,
        &format!(
            "{} keys listed that were never acknowledged (at most {LOAD_THREADS} in flight): {extra:?}",
            extra.len()
        ),
    );
    // Every listed key, acknowledged or in flight, must carry exactly the body written for it.
    let mut expected: BTreeMap<String, String> = acked.clone();
    for key in &extra {
        expected.insert((*key).clone(), md5_hex(&load_body(key)));
    }
    for key in TREE_KEYS {
        expected.insert(key.to_string(), md5_hex(key.as_bytes()));
    }
    verify_bodies(&gw, &expected, "after SIGKILL");
    // In front of an upstream, the restarted index must hold exactly what the upstream holds:
    // a PUT the upstream took before the kill is listed, and nothing else is.
    if let Some(minio) = gw.upstream() {
        let behind = Boto3::at(&minio.endpoint(), User::Keys(MINIO_ACCESS_KEY, MINIO_SECRET_KEY));
        let upstream = behind
            .op("paginate", &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Prefix": "load/" }, "page_size": 1000 }))
            .run("list load/ in MinIO after SIGKILL")
            .ok();
        let upstream_keys: BTreeSet<String> = strings(&upstream.json()["keys"]).into_iter().collect();
        let differ: Vec<&String> = upstream_keys.symmetric_difference(&listed_keys).take(10).collect();
        upstream.check(
            differ.is_empty(),
            &format!("the gateway's index and MinIO differ after SIGKILL: {differ:?}"),
        );
    }
    println!("{} acknowledged, {} listed, {} in-flight extras", acked.len(), listed_keys.len(), extra.len());

    // The restarted gateway takes writes.
    b.call("put_object", json!({ "Bucket": BUCKET, "Key": "after-crash", "Body": "alive" }))
        .run("put after restart")
        .ok();
    let get =
        b.call("get_object", json!({ "Bucket": BUCKET, "Key": "after-crash" })).run("get after restart").ok();
    get.check_eq(
        get.json()["Body_md5"].as_str().map(str::to_string),
        Some(md5_hex(b"alive")),
        "body written after restart",
    );
}

fn record_line(line: &str, acked: &mut BTreeMap<String, String>, other: &mut Vec<String>) {
    let mut parts = line.splitn(3, ' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("ACK"), Some(key), Some(md5)) => {
            acked.insert(key.to_string(), md5.to_string());
        }
        _ => {
            if other.len() < 20 {
                other.push(line.to_string());
            }
        }
    }
}

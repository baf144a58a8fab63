//! mc (minio-go, `go install`ed, pinned) against a fresh holt-gateway.
//!
//! Invariant: mc works with an alias set `--api s3v4 --path on` in its default config dir. mc
//! probes GetBucketLocation before its first request to a bucket, HEADs with
//! `x-amz-checksum-mode: ENABLED`, streams uploads as `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`
//! (signed chunks), lists with ListObjectsV2 + `fetch-owner`, batch-deletes with DeleteObjects,
//! and presigns with SigV4 (`mc share download`).

use s3_compat_tests::clients::{check_presigned_get, Mc};
use s3_compat_tests::data::{
    longest_key, md5_hex, multipart_etag, pagination_keys, payload, read_file, run_seed, same_bytes, sorted,
    too_long_key, tricky_keys, write_file, write_tree, TREE_KEYS,
};
use s3_compat_tests::exec::Outcome;
use s3_compat_tests::gateway::Gateway;
use serde_json::Value;

const BUCKET: &str = "mc-bucket";
const MIB: usize = 1024 * 1024;

fn t(path: &str) -> String {
    Mc::target(&format!("{BUCKET}/{path}"))
}

/// `mc ls --json` lines: (key, type) for every "success" line, sorted by key (mc prints a
/// page's objects before its prefixes; the order on the wire is checked by the other clients).
fn ls_entries(out: &Outcome) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = out
        .json_lines()
        .iter()
        .filter(|v| v["status"] == "success")
        .map(|v| (v["key"].as_str().unwrap_or("").to_string(), v["type"].as_str().unwrap_or("").to_string()))
        .collect();
    entries.sort();
    entries
}

fn ls_keys(out: &Outcome) -> Vec<String> {
    ls_entries(out).into_iter().map(|(k, _)| k).collect()
}

fn stat(mc: &Mc, path: &str, step: &str) -> (Outcome, Value) {
    let out = mc.cmd(&["stat", &t(path)]).run(step).ok();
    let v = out.json_lines().into_iter().next().unwrap_or(Value::Null);
    (out, v)
}

fn create_bucket(mc: &Mc) {
    mc.cmd(&["mb", &Mc::target(BUCKET)]).run("create bucket").ok().stdout_has("success");
}

#[test]
fn mc_object_lifecycle() {
    let gw = Gateway::start("mc-lifecycle");
    let mc = Mc::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&mc);
    let body = payload(seed, 4000);
    let local = gw.work_dir().join("small.txt");
    write_file(&local, &body);
    mc.cmd(&[
        "cp",
        "--attr",
        "Content-Type=text/plain;X-Amz-Meta-Color=blue",
        local.to_str().unwrap_or_default(),
        &t("docs/small.txt"),
    ])
    .run("upload small object with metadata")
    .ok();
    let (out, v) = stat(&mc, "docs/small.txt", "stat object");
    out.check_eq(v["size"].as_u64(), Some(body.len() as u64), "size");
    out.check_eq(v["etag"].as_str().map(str::to_string), Some(md5_hex(&body)), "etag");
    out.check_eq(v["metadata"]["Content-Type"].as_str(), Some("text/plain"), "Content-Type");
    out.check_eq(v["metadata"]["X-Amz-Meta-Color"].as_str(), Some("blue"), "X-Amz-Meta-Color");

    let down = gw.work_dir().join("small.down");
    let get = mc.cmd(&["cp", &t("docs/small.txt"), down.to_str().unwrap_or_default()]).run("download").ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }

    // Server-side copy with new metadata: mc sends x-amz-metadata-directive REPLACE with the
    // source's user metadata merged with --attr. (When --attr names a key the source already
    // has, this mc release picks either value at random, so the new key is a different one.)
    mc.cmd(&["cp", "--attr", "X-Amz-Meta-Shape=round", &t("docs/small.txt"), &t("docs/copy.txt")])
        .run("server-side copy with new metadata")
        .ok();
    let (out, v) = stat(&mc, "docs/copy.txt", "stat copy");
    out.check_eq(v["metadata"]["X-Amz-Meta-Shape"].as_str(), Some("round"), "copied X-Amz-Meta-Shape");
    out.check_eq(v["etag"].as_str().map(str::to_string), Some(md5_hex(&body)), "copied etag");

    mc.cmd(&["rm", &t("docs/small.txt")]).run("delete one object").ok();
    mc.cmd(&["stat", &t("docs/small.txt")]).run("stat deleted object").fails();

    let batch_dir = gw.work_dir().join("batch");
    let batch: Vec<String> = (0..30).map(|i| format!("batch/obj-{i:02}")).collect();
    write_tree(&gw.work_dir(), &batch);
    mc.cmd(&["cp", "--recursive", batch_dir.to_str().unwrap_or_default(), &t("")])
        .run("upload 30 objects")
        .ok();
    let listed = mc.cmd(&["ls", "--recursive", &t("batch/")]).run("list batch").ok();
    listed.check_keys(
        &ls_keys(&listed),
        &batch.iter().map(|k| k["batch/".len()..].to_string()).collect::<Vec<_>>(),
        "batch keys",
    );
    // `rm --recursive` removes through DeleteObjects (up to 1000 keys per request).
    mc.cmd(&["rm", "--recursive", "--force", &t("batch/")]).run("batch delete").ok();
    let after = mc.cmd(&["ls", "--recursive", &t("batch/")]).run("list after batch delete").ok();
    after.check_eq(ls_keys(&after).len(), 0, "keys left under batch/");

    mc.cmd(&["rb", &Mc::target(BUCKET)]).run("remove non-empty bucket").fails();
    mc.cmd(&["rm", &t("docs/copy.txt")]).run("delete last object").ok();
    mc.cmd(&["rb", &Mc::target(BUCKET)]).run("remove bucket").ok();
    let buckets = mc.cmd(&["ls", &Mc::target("")]).run("list buckets").ok();
    buckets.check(!ls_keys(&buckets).contains(&format!("{BUCKET}/")), "removed bucket still listed");
}

#[test]
fn mc_multipart_20mib() {
    let gw = Gateway::start("mc-multipart");
    let mc = Mc::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&mc);
    let body = payload(seed, 20 * MIB);
    let local = gw.work_dir().join("big.bin");
    write_file(&local, &body);
    // minio-go uploads files of 16 MiB and more as multipart with 16 MiB parts: 2 parts here.
    mc.cmd(&["cp", local.to_str().unwrap_or_default(), &t("big/twenty.bin")])
        .run("multipart upload 20 MiB")
        .ok();
    let (out, v) = stat(&mc, "big/twenty.bin", "stat multipart object");
    out.check_eq(v["size"].as_u64(), Some(body.len() as u64), "size");
    let etag = v["etag"].as_str().unwrap_or_default().to_string();
    out.check(etag.ends_with("-2"), "expected a 2-part multipart ETag");
    out.check_eq(etag, multipart_etag(&body, 16 * MIB), "multipart ETag");
    let down = gw.work_dir().join("big.down");
    let get =
        mc.cmd(&["cp", &t("big/twenty.bin"), down.to_str().unwrap_or_default()]).run("download 20 MiB").ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }
}

#[test]
fn mc_listing_and_pagination() {
    let gw = Gateway::start("mc-listing");
    let mc = Mc::new(&gw);
    create_bucket(&mc);
    let keys = sorted(pagination_keys(1050));
    let tree: Vec<String> = TREE_KEYS.iter().map(|k| k.to_string()).collect();
    let src = gw.work_dir().join("upload");
    write_tree(&src, &keys);
    write_tree(&src, &tree);
    mc.cmd(&["cp", "--recursive", &format!("{}/", src.display()), &t("")])
        .run("recursive upload of 1054 files")
        .ok();

    let root = mc.cmd(&["ls", &t("")]).run("list root").ok();
    root.check_eq(
        ls_entries(&root),
        vec![
            ("page/".to_string(), "folder".to_string()),
            ("top.txt".to_string(), "file".to_string()),
            ("tree/".to_string(), "folder".to_string()),
        ],
        "root entries",
    );
    let prefix = mc.cmd(&["ls", &t("tree/")]).run("list prefix").ok();
    prefix.check_eq(
        ls_entries(&prefix),
        vec![("a.txt".to_string(), "file".to_string()), ("sub/".to_string(), "folder".to_string())],
        "tree/ entries",
    );
    let rec = mc.cmd(&["ls", "--recursive", &t("tree/")]).run("list recursive").ok();
    rec.check_keys(
        &ls_keys(&rec),
        &["a.txt".to_string(), "sub/b.txt".to_string(), "sub/deeper/c.txt".to_string()],
        "recursive",
    );
    // 1050 keys: mc pages with continuation tokens (1000 per page).
    let all = mc.cmd(&["ls", "--recursive", &t("page/")]).run("list 1050 keys recursively").ok();
    let expected: Vec<String> = keys.iter().map(|k| k["page/".len()..].to_string()).collect();
    all.check_keys(&ls_keys(&all), &expected, "recursive listing over 1000 keys");
    let folders = mc.cmd(&["ls", &t("page/")]).run("list page/ folders").ok();
    folders.check_keys(
        &ls_keys(&folders),
        &(0..7).map(|i| format!("{i:02}/")).collect::<Vec<_>>(),
        "page/ folders",
    );
    // mc find walks the same listing and filters client-side.
    let found = mc.cmd(&["find", &t("page/03/"), "--name", "obj-0100*"]).run("find").ok();
    // Of obj-01000..obj-01009 only obj-01004 lives under page/03/ (1004 % 7 == 3).
    let hits: Vec<String> =
        found.json_lines().iter().filter_map(|v| v["key"].as_str().map(str::to_string)).collect();
    found.check(
        hits.len() == 1 && hits[0].ends_with("page/03/obj-01004"),
        "expected exactly page/03/obj-01004",
    );
}

#[test]
fn mc_presigned_get() {
    let gw = Gateway::start("mc-presign");
    let mc = Mc::new(&gw);
    create_bucket(&mc);
    let body = b"shared by mc\n".to_vec();
    let local = gw.work_dir().join("s.txt");
    write_file(&local, &body);
    mc.cmd(&["cp", local.to_str().unwrap_or_default(), &t("shared/s.txt")]).run("upload").ok();
    let share =
        mc.cmd(&["share", "download", "--expire", "5m", &t("shared/s.txt")]).run("share download").ok();
    let v = share.json_lines().into_iter().next().unwrap_or(Value::Null);
    let url = v["share"].as_str().unwrap_or_default().to_string();
    share.check(url.contains("X-Amz-Signature="), "expected a SigV4 presigned URL");
    let out = gw.work_dir().join("fetched");
    check_presigned_get(&url, &out, &body);
}

#[test]
fn mc_tricky_keys_and_key_length() {
    let gw = Gateway::start("mc-keys");
    let mc = Mc::new(&gw);
    create_bucket(&mc);
    let mut expected = Vec::new();
    for (i, key) in tricky_keys(&gw).iter().enumerate() {
        let local = gw.work_dir().join(format!("tricky-{i}"));
        write_file(&local, key.as_bytes());
        mc.cmd(&["cp", local.to_str().unwrap_or_default(), &t(key)])
            .run(&format!("upload tricky key {key:?}"))
            .ok();
        expected.push(key.to_string());
    }
    let long = longest_key();
    let local = gw.work_dir().join("long");
    write_file(&local, b"long");
    mc.cmd(&["cp", local.to_str().unwrap_or_default(), &t(&long)]).run("upload 1024-byte key").ok();
    expected.push(long.clone());
    let listed = mc.cmd(&["ls", "--recursive", &t("")]).run("list tricky keys").ok();
    listed.check_keys(&ls_keys(&listed), &sorted(expected), "tricky keys");
    for (i, key) in tricky_keys(&gw).iter().enumerate() {
        let down = gw.work_dir().join(format!("tricky-{i}.down"));
        let out = mc
            .cmd(&["cp", &t(key), down.to_str().unwrap_or_default()])
            .run(&format!("download tricky key {key:?}"))
            .ok();
        out.check_eq(read_file(&down), key.as_bytes().to_vec(), "tricky key body");
    }
    // minio-go refuses keys over 1024 bytes before sending anything; the server-side
    // KeyTooLongError is covered by aws-cli, boto3, s3cmd, rclone and k6.
    mc.cmd(&["cp", local.to_str().unwrap_or_default(), &t(&too_long_key())])
        .run("upload 1025-byte key")
        .fails()
        .mentions("cannot be longer than 1024");
}

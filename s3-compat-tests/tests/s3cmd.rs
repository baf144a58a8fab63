//! s3cmd (PyPI, 2.4) against a fresh holt-gateway.
//!
//! Invariant: s3cmd works with a generated config (path-style `host_bucket` without
//! `%(bucket)s`, plain HTTP, SigV4). s3cmd always lists with ListObjects v1 (markers), compares
//! the ETag of every PUT with its local MD5, uploads above the chunk size as multipart, edits
//! metadata with a copy onto itself (`modify`, REPLACE) and deletes recursively with
//! DeleteObjects.
//!
//! s3cmd signing with SigV2, and `s3cmd signurl` (SigV2 only), are in `sigv2.rs`.

use s3_compat_tests::clients::S3cmd;
use s3_compat_tests::data::{
    longest_key, md5_hex, pagination_keys, payload, read_file, run_seed, same_bytes, sorted, too_long_key,
    tricky_keys, write_file, write_tree, TREE_KEYS,
};
use s3_compat_tests::exec::Outcome;
use s3_compat_tests::gateway::Gateway;

const BUCKET: &str = "s3cmd-bucket";
const MIB: usize = 1024 * 1024;

fn uri(key: &str) -> String {
    format!("s3://{BUCKET}/{key}")
}

/// `s3cmd ls` lines: "DIR s3://b/p/" or "DATE TIME SIZE s3://b/key"; returns (key, is_dir).
fn ls_entries(out: &Outcome) -> Vec<(String, bool)> {
    let prefix = format!("s3://{BUCKET}/");
    out.stdout
        .lines()
        .filter_map(|line| {
            let at = line.find(&prefix)?;
            let key = line[at + prefix.len()..].to_string();
            Some((key, line[..at].trim() == "DIR"))
        })
        .collect()
}

fn ls_keys(out: &Outcome) -> Vec<String> {
    ls_entries(out).into_iter().map(|(k, _)| k).collect()
}

/// The value of an `s3cmd info` field such as "MD5 sum" or "x-amz-meta-color".
fn info_field(out: &Outcome, name: &str) -> Option<String> {
    out.stdout.lines().find_map(|line| {
        let (field, value) = line.trim().split_once(':')?;
        (field.trim() == name).then(|| value.trim().to_string())
    })
}

fn create_bucket(s3cmd: &S3cmd) {
    s3cmd.cmd(&["mb", &format!("s3://{BUCKET}")]).run("create bucket").ok().stdout_has("created");
}

#[test]
fn s3cmd_object_lifecycle() {
    let gw = Gateway::start("s3cmd-lifecycle");
    let s3cmd = S3cmd::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&s3cmd);
    let body = payload(seed, 5000);
    let local = gw.work_dir().join("small.bin");
    write_file(&local, &body);
    s3cmd
        .cmd(&[
            "put",
            "--mime-type=text/plain",
            "--add-header=x-amz-meta-color:blue",
            local.to_str().unwrap_or_default(),
            &uri("docs/small.bin"),
        ])
        .run("upload small object with metadata")
        .ok();
    let info = s3cmd.cmd(&["info", &uri("docs/small.bin")]).run("info").ok();
    info.check_eq(info_field(&info, "File size"), Some(body.len().to_string()), "File size");
    info.check_eq(info_field(&info, "MIME type"), Some("text/plain".to_string()), "MIME type");
    info.check_eq(info_field(&info, "MD5 sum"), Some(md5_hex(&body)), "MD5 sum");
    info.check_eq(info_field(&info, "x-amz-meta-color"), Some("blue".to_string()), "x-amz-meta-color");

    let down = gw.work_dir().join("small.down");
    let get = s3cmd
        .cmd(&["get", "--force", &uri("docs/small.bin"), down.to_str().unwrap_or_default()])
        .run("download")
        .ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }

    // Copy, then replace the copy's metadata with a copy onto itself (s3cmd modify).
    s3cmd.cmd(&["cp", &uri("docs/small.bin"), &uri("docs/copy.bin")]).run("server-side copy").ok();
    s3cmd
        .cmd(&[
            "modify",
            "--add-header=x-amz-meta-color:red",
            "--mime-type=application/json",
            &uri("docs/copy.bin"),
        ])
        .run("modify metadata (copy onto itself with REPLACE)")
        .ok();
    let info = s3cmd.cmd(&["info", &uri("docs/copy.bin")]).run("info copy").ok();
    info.check_eq(
        info_field(&info, "x-amz-meta-color"),
        Some("red".to_string()),
        "replaced x-amz-meta-color",
    );
    info.check_eq(info_field(&info, "MIME type"), Some("application/json".to_string()), "replaced MIME type");
    info.check_eq(info_field(&info, "MD5 sum"), Some(md5_hex(&body)), "MD5 sum after modify");

    s3cmd.cmd(&["del", &uri("docs/small.bin")]).run("delete one object").ok().stdout_has("delete:");
    s3cmd.cmd(&["info", &uri("docs/small.bin")]).run("info deleted object").fails().mentions("404");

    let batch: Vec<String> = (0..25).map(|i| format!("batch/obj-{i:02}")).collect();
    write_tree(&gw.work_dir(), &batch);
    s3cmd
        .cmd(&["put", "--recursive", gw.work_dir().join("batch").to_str().unwrap_or_default(), &uri("")])
        .run("upload 25 objects")
        .ok();
    let listed = s3cmd.cmd(&["ls", "--recursive", &uri("batch/")]).run("list batch").ok();
    listed.check_keys(&ls_keys(&listed), &batch, "batch keys");
    // `del --recursive` deletes through DeleteObjects.
    s3cmd.cmd(&["del", "--recursive", "--force", &uri("batch/")]).run("batch delete").ok();
    let after = s3cmd.cmd(&["ls", "--recursive", &uri("batch/")]).run("list after batch delete").ok();
    after.check_eq(ls_keys(&after).len(), 0, "keys left under batch/");

    s3cmd
        .cmd(&["rb", &format!("s3://{BUCKET}")])
        .run("remove non-empty bucket")
        .fails()
        .mentions("BucketNotEmpty");
    s3cmd.cmd(&["del", &uri("docs/copy.bin")]).run("delete last object").ok();
    s3cmd.cmd(&["rb", &format!("s3://{BUCKET}")]).run("remove bucket").ok().stdout_has("removed");
    let buckets = s3cmd.cmd(&["ls"]).run("list buckets").ok();
    buckets.check(!buckets.stdout.contains(&format!("s3://{BUCKET}")), "removed bucket still listed");
}

#[test]
fn s3cmd_multipart_20mib() {
    let gw = Gateway::start("s3cmd-multipart");
    let s3cmd = S3cmd::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&s3cmd);
    let body = payload(seed, 20 * MIB);
    let local = gw.work_dir().join("big.bin");
    write_file(&local, &body);
    s3cmd
        .cmd(&[
            "put",
            "--multipart-chunk-size-mb=5",
            local.to_str().unwrap_or_default(),
            &uri("big/twenty.bin"),
        ])
        .run("multipart upload 20 MiB in 5 MiB parts")
        .ok();
    let info = s3cmd.cmd(&["info", &uri("big/twenty.bin")]).run("info multipart").ok();
    info.check_eq(info_field(&info, "File size"), Some(body.len().to_string()), "File size");
    // For multipart objects s3cmd reports the whole-file MD5 it stored in its own metadata
    // (x-amz-meta-s3cmd-attrs); the multipart ETag itself is checked by the other clients.
    info.check_eq(info_field(&info, "MD5 sum"), Some(md5_hex(&body)), "MD5 sum");
    let down = gw.work_dir().join("big.down");
    let get = s3cmd
        .cmd(&["get", "--force", &uri("big/twenty.bin"), down.to_str().unwrap_or_default()])
        .run("download")
        .ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }
}

#[test]
fn s3cmd_listing_and_pagination() {
    let gw = Gateway::start("s3cmd-listing");
    let s3cmd = S3cmd::new(&gw);
    create_bucket(&s3cmd);
    let keys = sorted(pagination_keys(1050));
    let tree: Vec<String> = TREE_KEYS.iter().map(|k| k.to_string()).collect();
    let src = gw.work_dir().join("upload");
    write_tree(&src, &keys);
    write_tree(&src, &tree);
    s3cmd
        .cmd(&["put", "--recursive", "--quiet", &format!("{}/", src.display()), &uri("")])
        .run("recursive upload of 1054 files")
        .ok();
    let root = s3cmd.cmd(&["ls", &uri("")]).run("list root").ok();
    root.check_eq(
        ls_entries(&root),
        vec![("page/".to_string(), true), ("tree/".to_string(), true), ("top.txt".to_string(), false)],
        "root entries (DIRs first, as s3cmd prints them)",
    );
    let prefix = s3cmd.cmd(&["ls", &uri("tree/")]).run("list prefix").ok();
    prefix.check_eq(
        ls_entries(&prefix),
        vec![("tree/sub/".to_string(), true), ("tree/a.txt".to_string(), false)],
        "tree/ entries",
    );
    let rec = s3cmd.cmd(&["ls", "--recursive", &uri("tree/")]).run("list recursive").ok();
    rec.check_keys(&ls_keys(&rec), &tree[1..], "recursive listing");
    // ListObjects v1 over 1050 keys: two pages joined on the marker.
    let all = s3cmd.cmd(&["ls", "--recursive", &uri("page/")]).run("list 1050 keys (v1 markers)").ok();
    all.check_keys(&ls_keys(&all), &keys, "recursive listing over 1000 keys");
    let du = s3cmd.cmd(&["du", &uri("page/")]).run("du").ok();
    let total: usize = keys.iter().map(String::len).sum();
    du.check(du.stdout.split_whitespace().next() == Some(total.to_string().as_str()), "du total bytes");
    du.check(du.stdout.contains("1050 objects"), "du object count");
}

#[test]
fn s3cmd_tricky_keys_and_key_length() {
    let gw = Gateway::start("s3cmd-keys");
    let s3cmd = S3cmd::new(&gw);
    create_bucket(&s3cmd);
    let mut expected = Vec::new();
    for (i, key) in tricky_keys(&gw).iter().enumerate() {
        let local = gw.work_dir().join(format!("tricky-{i}"));
        write_file(&local, key.as_bytes());
        s3cmd
            .cmd(&["put", local.to_str().unwrap_or_default(), &uri(key)])
            .run(&format!("upload tricky key {key:?}"))
            .ok();
        expected.push(key.to_string());
    }
    let long = longest_key();
    let local = gw.work_dir().join("long");
    write_file(&local, b"long");
    s3cmd.cmd(&["put", local.to_str().unwrap_or_default(), &uri(&long)]).run("upload 1024-byte key").ok();
    expected.push(long);
    let listed = s3cmd.cmd(&["ls", "--recursive", &uri("")]).run("list tricky keys").ok();
    listed.check_keys(&ls_keys(&listed), &sorted(expected), "tricky keys");
    for (i, key) in tricky_keys(&gw).iter().enumerate() {
        let down = gw.work_dir().join(format!("tricky-{i}.down"));
        let out = s3cmd
            .cmd(&["get", "--force", &uri(key), down.to_str().unwrap_or_default()])
            .run(&format!("download tricky key {key:?}"))
            .ok();
        out.check_eq(read_file(&down), key.as_bytes().to_vec(), "tricky key body");
    }
    s3cmd
        .cmd(&["put", local.to_str().unwrap_or_default(), &uri(&too_long_key())])
        .run("upload 1025-byte key")
        .fails()
        .mentions("KeyTooLongError");
}

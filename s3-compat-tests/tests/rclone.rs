//! rclone (Debian package) against a fresh holt-gateway.
//!
//! Invariant: rclone's S3 backend with `provider = Other` and path-style works: it creates the
//! bucket first, uploads with `Content-MD5` and `X-Amz-Meta-Mtime`, HEADs after upload to
//! compare, sets modification times by CopyObject onto itself with REPLACE, lists with v1 or v2
//! in chunks, uploads large files as multipart, and presigns with SigV4 (`rclone link`).
//!
//! rclone maps keys to paths: a key with `//` or a `..` segment cannot be named through rclone
//! at all, so those two tricky keys are covered by the other clients only.

use s3_compat_tests::clients::{check_presigned_get, Rclone};
use s3_compat_tests::data::{
    longest_key, md5_hex, pagination_keys, payload, read_file, run_seed, same_bytes, sorted, too_long_key,
    tricky_keys, write_file, write_tree, TREE_KEYS,
};
use s3_compat_tests::exec::Outcome;
use s3_compat_tests::gateway::Gateway;
use serde_json::Value;

const BUCKET: &str = "rclone-bucket";
const MIB: usize = 1024 * 1024;

fn r(path: &str) -> String {
    Rclone::target(&format!("{BUCKET}/{path}"))
}

fn lines_sorted(out: &Outcome) -> Vec<String> {
    sorted(out.stdout.lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
}

fn stat(rclone: &Rclone, path: &str, step: &str) -> (Outcome, Value) {
    let out = rclone.cmd(&["lsjson", "--stat", "--metadata", "--hash", &r(path)]).run(step).ok();
    let v = out.json();
    (out, v)
}

fn create_bucket(rclone: &Rclone) {
    rclone.cmd(&["mkdir", &Rclone::target(BUCKET)]).run("create bucket").ok();
    let buckets = rclone.cmd(&["lsf", &Rclone::target("")]).run("list buckets").ok();
    buckets.check(buckets.stdout.lines().any(|l| l == format!("{BUCKET}/")), "new bucket not listed");
}

#[test]
fn rclone_object_lifecycle() {
    let gw = Gateway::start("rclone-lifecycle");
    let rclone = Rclone::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&rclone);
    let body = payload(seed, 6000);
    let local = gw.work_dir().join("small.bin");
    write_file(&local, &body);
    rclone
        .cmd(&[
            "copyto",
            "--header-upload",
            "Content-Type: text/plain",
            "--header-upload",
            "X-Amz-Meta-Color: blue",
            local.to_str().unwrap_or_default(),
            &r("docs/small.bin"),
        ])
        .run("upload small object with metadata")
        .ok();
    let (out, v) = stat(&rclone, "docs/small.bin", "stat object");
    out.check_eq(v["Size"].as_u64(), Some(body.len() as u64), "Size");
    out.check_eq(v["MimeType"].as_str(), Some("text/plain"), "MimeType");
    out.check_eq(v["Metadata"]["color"].as_str(), Some("blue"), "Metadata.color");
    out.check_eq(
        v["Hashes"]["md5"].as_str().map(str::to_string),
        Some(md5_hex(&body)),
        "md5 (from the ETag)",
    );

    let down = gw.work_dir().join("small.down");
    let get =
        rclone.cmd(&["copyto", &r("docs/small.bin"), down.to_str().unwrap_or_default()]).run("download").ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }

    // Server-side copy: rclone 1.60 always sends x-amz-metadata-directive COPY (even with
    // --metadata-set), so the copy must carry the source's metadata. Replacement is rclone's
    // way of setting a modification time: CopyObject onto itself with REPLACE (`touch`).
    rclone.cmd(&["copyto", &r("docs/small.bin"), &r("docs/copy.bin")]).run("server-side copy").ok();
    let (out, v) = stat(&rclone, "docs/copy.bin", "stat copy");
    out.check_eq(v["Metadata"]["color"].as_str(), Some("blue"), "copied Metadata.color (COPY directive)");
    out.check_eq(v["Size"].as_u64(), Some(body.len() as u64), "copied Size");
    out.check_eq(v["MimeType"].as_str(), Some("text/plain"), "copied MimeType");
    rclone
        .cmd(&["touch", "--timestamp", "2020-01-02T03:04:05", &r("docs/copy.bin")])
        .run("touch (self-copy REPLACE)")
        .ok();
    let (out, v) = stat(&rclone, "docs/copy.bin", "stat after touch");
    out.check(
        v["ModTime"].as_str().is_some_and(|t| t.starts_with("2020-01-02T03:04:05")),
        "ModTime not updated by the self-copy",
    );
    out.check_eq(v["Metadata"]["color"].as_str(), Some("blue"), "Metadata.color kept by rclone's REPLACE");
    out.check_eq(v["Hashes"]["md5"].as_str().map(str::to_string), Some(md5_hex(&body)), "md5 after touch");

    rclone.cmd(&["deletefile", &r("docs/small.bin")]).run("delete one object").ok();
    let docs = rclone.cmd(&["lsf", &r("docs")]).run("list docs/ after delete").ok();
    docs.check_eq(lines_sorted(&docs), vec!["copy.bin".to_string()], "docs/ after deleting small.bin");

    let batch: Vec<String> = (0..20).map(|i| format!("batch/obj-{i:02}")).collect();
    write_tree(&gw.work_dir(), &batch);
    rclone
        .cmd(&["copy", gw.work_dir().join("batch").to_str().unwrap_or_default(), &r("batch")])
        .run("upload 20 objects")
        .ok();
    rclone.cmd(&["delete", &r("batch")]).run("delete a batch").ok();
    let after = rclone.cmd(&["lsf", "-R", &r("batch")]).run("list after batch delete");
    // An emptied prefix no longer exists: rclone reports "directory not found" or nothing.
    after.check(after.stdout.trim().is_empty(), "keys left under batch/");

    rclone.cmd(&["rmdir", &Rclone::target(BUCKET)]).run("remove non-empty bucket").fails();
    rclone.cmd(&["deletefile", &r("docs/copy.bin")]).run("delete last object").ok();
    rclone.cmd(&["rmdir", &Rclone::target(BUCKET)]).run("remove bucket").ok();
    let buckets = rclone.cmd(&["lsf", &Rclone::target("")]).run("list buckets after remove").ok();
    buckets.check(!buckets.stdout.lines().any(|l| l == format!("{BUCKET}/")), "removed bucket still listed");
}

#[test]
fn rclone_multipart_20mib() {
    let gw = Gateway::start("rclone-multipart");
    let rclone = Rclone::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&rclone);
    let body = payload(seed, 20 * MIB);
    let local = gw.work_dir().join("big").join("twenty.bin");
    write_file(&local, &body);
    rclone
        .cmd(&[
            "copyto",
            "--s3-upload-cutoff",
            "5M",
            "--s3-chunk-size",
            "5M",
            local.to_str().unwrap_or_default(),
            &r("big/twenty.bin"),
        ])
        .run("multipart upload 20 MiB in 5 MiB parts")
        .ok();
    let (out, v) = stat(&rclone, "big/twenty.bin", "stat multipart object");
    out.check_eq(v["Size"].as_u64(), Some(body.len() as u64), "Size");
    // For multipart uploads rclone keeps the whole-file MD5 in X-Amz-Meta-Md5chksum.
    out.check_eq(v["Hashes"]["md5"].as_str().map(str::to_string), Some(md5_hex(&body)), "md5");
    let down = gw.work_dir().join("big.down");
    let get =
        rclone.cmd(&["copyto", &r("big/twenty.bin"), down.to_str().unwrap_or_default()]).run("download").ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }
    // rclone check compares sizes and MD5s of the local dir with the bucket prefix.
    let local_dir = gw.work_dir().join("big");
    rclone
        .cmd(&["check", local_dir.to_str().unwrap_or_default(), &r("big")])
        .run("rclone check against local")
        .ok();
}

#[test]
fn rclone_listing_and_pagination() {
    let gw = Gateway::start("rclone-listing");
    let rclone = Rclone::new(&gw);
    create_bucket(&rclone);
    let keys = sorted(pagination_keys(1050));
    let tree: Vec<String> = TREE_KEYS.iter().map(|k| k.to_string()).collect();
    let src = gw.work_dir().join("upload");
    write_tree(&src, &keys);
    write_tree(&src, &tree);
    rclone
        .cmd(&["copy", "--transfers", "16", src.to_str().unwrap_or_default(), &Rclone::target(BUCKET)])
        .run("upload 1054 files")
        .ok();
    let root = rclone.cmd(&["lsf", &Rclone::target(BUCKET)]).run("list root").ok();
    root.check_eq(
        lines_sorted(&root),
        vec!["page/".to_string(), "top.txt".to_string(), "tree/".to_string()],
        "root",
    );
    let prefix = rclone.cmd(&["lsf", &r("tree")]).run("list prefix").ok();
    prefix.check_eq(lines_sorted(&prefix), vec!["a.txt".to_string(), "sub/".to_string()], "tree/");
    let rec = rclone.cmd(&["lsf", "-R", "--files-only", &r("tree")]).run("list recursive").ok();
    rec.check_keys(
        &lines_sorted(&rec),
        &["a.txt".to_string(), "sub/b.txt".to_string(), "sub/deeper/c.txt".to_string()],
        "recursive",
    );
    let expected: Vec<String> = keys.iter().map(|k| k["page/".len()..].to_string()).collect();
    for (version, chunk) in [("1", "250"), ("2", "100")] {
        let all = rclone
            .cmd(&[
                "lsf",
                "-R",
                "--files-only",
                "--s3-list-version",
                version,
                "--s3-list-chunk",
                chunk,
                &r("page"),
            ])
            .run(&format!("list 1050 keys with ListObjects v{version}, chunks of {chunk}"))
            .ok();
        all.check_keys(&lines_sorted(&all), &expected, "recursive listing over 1000 keys");
    }
    let size = rclone.cmd(&["size", "--json", &r("page")]).run("size").ok();
    let total: usize = keys.iter().map(String::len).sum();
    size.check_eq(size.json()["count"].as_u64(), Some(1050), "object count");
    size.check_eq(size.json()["bytes"].as_u64(), Some(total as u64), "total bytes");
}

#[test]
fn rclone_presigned_get() {
    let gw = Gateway::start("rclone-presign");
    let rclone = Rclone::new(&gw);
    create_bucket(&rclone);
    let body = b"shared by rclone\n".to_vec();
    let local = gw.work_dir().join("s.txt");
    write_file(&local, &body);
    rclone.cmd(&["copyto", local.to_str().unwrap_or_default(), &r("shared/s.txt")]).run("upload").ok();
    let link = rclone.cmd(&["link", "--expire", "5m", &r("shared/s.txt")]).run("link (presign)").ok();
    let url = link.stdout.trim().to_string();
    link.check(url.contains("X-Amz-Signature="), "expected a SigV4 presigned URL");
    let out = gw.work_dir().join("fetched");
    check_presigned_get(&url, &out, &body);
}

#[test]
fn rclone_tricky_keys_and_key_length() {
    let gw = Gateway::start("rclone-keys");
    let rclone = Rclone::new(&gw);
    create_bucket(&rclone);
    // See the file comment: rclone cannot name `//` or `..` keys.
    let keys: Vec<&str> =
        tricky_keys(&gw).into_iter().filter(|k| !k.contains("//") && !k.contains("/../")).collect();
    let mut expected = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let local = gw.work_dir().join(format!("tricky-{i}"));
        write_file(&local, key.as_bytes());
        rclone
            .cmd(&[
                "copyto",
                "--s3-encoding",
                "Slash,InvalidUtf8",
                local.to_str().unwrap_or_default(),
                &r(key),
            ])
            .run(&format!("upload tricky key {key:?}"))
            .ok();
        expected.push(key.to_string());
    }
    let long = longest_key();
    let local = gw.work_dir().join("long");
    write_file(&local, b"long");
    rclone.cmd(&["copyto", local.to_str().unwrap_or_default(), &r(&long)]).run("upload 1024-byte key").ok();
    expected.push(long);
    let listed = rclone
        .cmd(&["lsf", "-R", "--files-only", "--s3-encoding", "Slash,InvalidUtf8", &Rclone::target(BUCKET)])
        .run("list tricky keys")
        .ok();
    listed.check_keys(&lines_sorted(&listed), &sorted(expected), "tricky keys");
    for (i, key) in keys.iter().enumerate() {
        let out = rclone
            .cmd(&["cat", "--s3-encoding", "Slash,InvalidUtf8", &r(key)])
            .run(&format!("read tricky key {key:?}"))
            .ok();
        out.check_eq(out.stdout.as_str(), *key, &format!("body of tricky key #{i}"));
    }
    // rclone HEADs the target before uploading; a HEAD answer has no body, so all rclone can
    // show of the KeyTooLongError is the 400 status.
    rclone
        .cmd(&["copyto", local.to_str().unwrap_or_default(), &r(&too_long_key())])
        .run("upload 1025-byte key")
        .fails()
        .mentions("status code: 400");
    let after = rclone.cmd(&["lsf", &r("long")]).run("list long/ after the rejected key").ok();
    after.check_eq(after.stdout.lines().count(), 1, "keys under long/ (only the 1024-byte one)");
}

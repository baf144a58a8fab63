//! aws-cli v1 (PyPI awscli >= 1.37) against a fresh holt-gateway.
//!
//! Invariant: everything aws-cli users do day to day works unmodified against the gateway with
//! `--endpoint-url`, path-style addressing and SigV4: bucket lifecycle, uploads with metadata,
//! multipart, listings (root, prefix, recursive, paginated with continuation tokens and v1
//! markers), HEAD, download, copy with metadata replacement, single and batch delete,
//! presigned GET, keys that break naive servers, and the 1024-byte key limit.

use s3_compat_tests::clients::{check_presigned_get, curl_get, Aws, User};
use s3_compat_tests::data::{
    longest_key, md5_hex, multipart_etag, pagination_keys, payload, read_file, run_seed, same_bytes, sorted,
    too_long_key, tricky_keys, write_file, write_tree, DIR_MARKER_KEY, TREE_KEYS,
};
use s3_compat_tests::exec::{describe_key_difference, Outcome};
use s3_compat_tests::gateway::Gateway;
use serde_json::Value;

const BUCKET: &str = "aws-cli-bucket";
const MIB: usize = 1024 * 1024;

fn keys_of(listing: &Value) -> Vec<String> {
    listing["Contents"]
        .as_array()
        .map(|items| items.iter().filter_map(|o| o["Key"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn prefixes_of(listing: &Value) -> Vec<String> {
    listing["CommonPrefixes"]
        .as_array()
        .map(|items| items.iter().filter_map(|o| o["Prefix"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// `aws s3 ls` lines: "PRE name/" for prefixes; "DATE TIME SIZE key" for objects.
fn ls_names(out: &Outcome) -> Vec<String> {
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let t = l.trim_start();
            match t.strip_prefix("PRE ") {
                Some(p) => p.to_string(),
                None => after_tokens(t, 3).to_string(),
            }
        })
        .collect()
}

/// What is left of `line` after `n` whitespace-separated tokens (keys may contain spaces).
fn after_tokens(line: &str, n: usize) -> &str {
    let mut rest = line.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = rest[end..].trim_start();
    }
    rest
}

fn create_bucket(aws: &Aws) {
    aws.s3(&["mb", &format!("s3://{BUCKET}")])
        .run("create bucket")
        .ok()
        .stdout_has(&format!("make_bucket: {BUCKET}"));
}

#[test]
fn aws_cli_object_lifecycle() {
    let gw = Gateway::start("aws-lifecycle");
    let aws = Aws::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&aws);
    // AWS answers a repeated CreateBucket by the owner with 409 BucketAlreadyOwnedByYou (200 in
    // us-east-1 for legacy reasons); both are accepted, anything else fails.
    let again = aws.s3(&["mb", &format!("s3://{BUCKET}")]).run("create bucket twice");
    if again.code != Some(0) {
        again.mentions("BucketAlreadyOwnedByYou");
    }

    // Small object with user metadata and a content type.
    let body = payload(seed, 3000);
    let local = gw.work_dir().join("small.bin");
    write_file(&local, &body);
    let target = format!("s3://{BUCKET}/docs/small.bin");
    aws.s3(&[
        "cp",
        local.to_str().unwrap_or_default(),
        &target,
        "--metadata",
        "color=blue",
        "--content-type",
        "text/plain",
    ])
    .run("upload small object with metadata")
    .ok();
    let head =
        aws.s3api(&["head-object", "--bucket", BUCKET, "--key", "docs/small.bin"]).run("head object").ok();
    let h = head.json();
    head.check_eq(h["ContentLength"].as_u64(), Some(body.len() as u64), "ContentLength");
    head.check_eq(h["ContentType"].as_str(), Some("text/plain"), "ContentType");
    head.check_eq(h["Metadata"]["color"].as_str(), Some("blue"), "Metadata.color");
    head.check_eq(h["ETag"].as_str().map(str::to_string), Some(format!("\"{}\"", md5_hex(&body))), "ETag");

    // Download and compare bytes.
    let down = gw.work_dir().join("small.down");
    let get = aws.s3(&["cp", &target, down.to_str().unwrap_or_default()]).run("download small object").ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }

    // Copy with metadata replacement.
    let copy = aws
        .s3api(&[
            "copy-object",
            "--bucket",
            BUCKET,
            "--key",
            "docs/copy.json",
            "--copy-source",
            &format!("{BUCKET}/docs/small.bin"),
            "--metadata-directive",
            "REPLACE",
            "--metadata",
            "color=red,shape=round",
            "--content-type",
            "application/json",
        ])
        .run("copy object with REPLACE")
        .ok();
    copy.check_eq(
        copy.json()["CopyObjectResult"]["ETag"].as_str().map(str::to_string),
        Some(format!("\"{}\"", md5_hex(&body))),
        "CopyObjectResult.ETag",
    );
    let head =
        aws.s3api(&["head-object", "--bucket", BUCKET, "--key", "docs/copy.json"]).run("head copy").ok();
    let h = head.json();
    head.check_eq(h["Metadata"]["color"].as_str(), Some("red"), "copied Metadata.color");
    head.check_eq(h["Metadata"]["shape"].as_str(), Some("round"), "copied Metadata.shape");
    head.check_eq(h["ContentType"].as_str(), Some("application/json"), "copied ContentType");

    // Buckets are private to their owner.
    let other = Aws::as_user(&gw, User::Two);
    other
        .s3(&["ls", &format!("s3://{BUCKET}/")])
        .run("list as another user")
        .fails()
        .mentions("AccessDenied");
    other
        .s3api(&["head-object", "--bucket", BUCKET, "--key", "docs/small.bin"])
        .run("head as another user")
        .fails()
        .mentions("403");
    other
        .s3(&["mb", &format!("s3://{BUCKET}")])
        .run("create another user's bucket")
        .fails()
        .mentions("BucketAlreadyExists");

    // Delete one object.
    aws.s3(&["rm", &target]).run("delete one object").ok().stdout_has("delete: s3://");
    aws.s3api(&["head-object", "--bucket", BUCKET, "--key", "docs/small.bin"])
        .run("head deleted object")
        .fails()
        .mentions("404");

    // Batch delete.
    let batch: Vec<String> = (0..5).map(|i| format!("batch/obj-{i}")).collect();
    for key in &batch {
        aws.s3api(&[
            "put-object",
            "--bucket",
            BUCKET,
            "--key",
            key,
            "--body",
            local.to_str().unwrap_or_default(),
        ])
        .run("put batch object")
        .ok();
    }
    let objects: Vec<Value> = batch.iter().map(|k| serde_json::json!({ "Key": k })).collect();
    let spec = serde_json::json!({ "Objects": objects, "Quiet": false }).to_string();
    let del = aws.s3api(&["delete-objects", "--bucket", BUCKET, "--delete", &spec]).run("batch delete").ok();
    let deleted: Vec<String> = del.json()["Deleted"]
        .as_array()
        .map(|d| d.iter().filter_map(|o| o["Key"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    del.check_eq(sorted(deleted), batch.clone(), "Deleted keys");
    let list = aws
        .s3api(&["list-objects-v2", "--bucket", BUCKET, "--prefix", "batch/"])
        .run("list after batch delete")
        .ok();
    list.check_eq(keys_of(&list.json()), Vec::<String>::new(), "keys left under batch/");

    // A bucket with objects cannot be deleted; an empty one can.
    aws.s3(&["rb", &format!("s3://{BUCKET}")])
        .run("delete non-empty bucket")
        .fails()
        .mentions("BucketNotEmpty");
    aws.s3(&["rm", &format!("s3://{BUCKET}/docs/copy.json")]).run("delete last object").ok();
    aws.s3(&["rb", &format!("s3://{BUCKET}")])
        .run("delete bucket")
        .ok()
        .stdout_has(&format!("remove_bucket: {BUCKET}"));
    let buckets = aws.s3api(&["list-buckets"]).run("list buckets after delete").ok();
    let names: Vec<String> = buckets.json()["Buckets"]
        .as_array()
        .map(|b| b.iter().filter_map(|x| x["Name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    buckets.check(!names.contains(&BUCKET.to_string()), "deleted bucket still listed");
}

#[test]
fn aws_cli_multipart_20mib() {
    let gw = Gateway::start("aws-multipart");
    let aws = Aws::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&aws);
    let body = payload(seed, 20 * MIB);
    let local = gw.work_dir().join("big.bin");
    write_file(&local, &body);
    let target = format!("s3://{BUCKET}/big/twenty.bin");
    // aws s3 cp switches to multipart above 8 MiB with 8 MiB parts: 3 parts here.
    aws.s3(&["cp", local.to_str().unwrap_or_default(), &target, "--metadata", "kind=multipart"])
        .run("multipart upload 20 MiB")
        .ok();
    let head =
        aws.s3api(&["head-object", "--bucket", BUCKET, "--key", "big/twenty.bin"]).run("head multipart").ok();
    let h = head.json();
    head.check_eq(h["ContentLength"].as_u64(), Some(body.len() as u64), "ContentLength");
    head.check_eq(
        h["ETag"].as_str().map(str::to_string),
        Some(format!("\"{}\"", multipart_etag(&body, 8 * MIB))),
        "multipart ETag (md5 of part md5s, -3)",
    );
    head.check_eq(h["Metadata"]["kind"].as_str(), Some("multipart"), "Metadata.kind");
    let down = gw.work_dir().join("big.down");
    let get = aws.s3(&["cp", &target, down.to_str().unwrap_or_default()]).run("download 20 MiB").ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }
    // A ranged GET through s3api.
    let range_out = gw.work_dir().join("range.bin");
    aws.s3api(&[
        "get-object",
        "--bucket",
        BUCKET,
        "--key",
        "big/twenty.bin",
        "--range",
        "bytes=8388600-8388615",
        range_out.to_str().unwrap_or_default(),
    ])
    .run("ranged get across a part boundary")
    .ok();
    let ranged = read_file(&range_out);
    if ranged != body[8388600..8388616] {
        panic!("[aws-cli] step 'ranged get': got {} bytes that differ from the source range", ranged.len());
    }
}

#[test]
fn aws_cli_listing_and_pagination() {
    let gw = Gateway::start("aws-listing");
    let aws = Aws::new(&gw);
    create_bucket(&aws);
    let keys = sorted(pagination_keys(1050));
    let tree: Vec<String> = TREE_KEYS.iter().map(|k| k.to_string()).collect();
    let src = gw.work_dir().join("upload");
    write_tree(&src, &keys);
    write_tree(&src, &tree);
    // Bulk upload the way aws-cli users do it: one process, concurrent PutObjects.
    aws.s3(&[
        "cp",
        "--recursive",
        "--only-show-errors",
        src.to_str().unwrap_or_default(),
        &format!("s3://{BUCKET}/"),
    ])
    .run("recursive upload of 1054 files")
    .ok();

    let root = aws.s3(&["ls", &format!("s3://{BUCKET}/")]).run("list root").ok();
    root.check_eq(
        ls_names(&root),
        vec!["page/".to_string(), "tree/".to_string(), "top.txt".to_string()],
        "root listing",
    );
    let prefix = aws.s3(&["ls", &format!("s3://{BUCKET}/tree/")]).run("list prefix").ok();
    prefix.check_eq(ls_names(&prefix), vec!["sub/".to_string(), "a.txt".to_string()], "prefix listing");
    let rec = aws.s3(&["ls", "--recursive", &format!("s3://{BUCKET}/tree/")]).run("list recursive").ok();
    rec.check_keys(&ls_names(&rec), &tree[1..], "recursive listing");
    let all = aws
        .s3(&["ls", "--recursive", &format!("s3://{BUCKET}/page/")])
        .run("list 1050 keys recursively")
        .ok();
    all.check_keys(&ls_names(&all), &keys, "recursive listing over 1000 keys");

    // s3api pagination: the CLI follows NextContinuationToken itself with --page-size.
    let v2 = aws
        .s3api(&["list-objects-v2", "--bucket", BUCKET, "--prefix", "page/", "--page-size", "100"])
        .run("list-objects-v2 --page-size 100")
        .ok();
    v2.check_keys(&keys_of(&v2.json()), &keys, "ListObjectsV2 pages of 100");

    // Explicit pagination: --max-items hands back a NextToken, --starting-token resumes.
    let mut collected = Vec::new();
    let mut token: Option<String> = None;
    for page in 0..20 {
        let mut args = vec![
            "list-objects-v2",
            "--bucket",
            BUCKET,
            "--prefix",
            "page/",
            "--max-items",
            "250",
            "--page-size",
            "250",
        ];
        if let Some(t) = &token {
            args.extend(["--starting-token", t.as_str()]);
        }
        let out = aws.s3api(&args).run(&format!("list-objects-v2 --max-items 250 page {page}")).ok();
        let v = out.json();
        collected.extend(keys_of(&v));
        token = v["NextToken"].as_str().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    if let Some(diff) = describe_key_difference(&collected, &keys) {
        panic!("[aws-cli] step 'explicit pagination with --starting-token': {diff}");
    }

    // ListObjects v1 pages on markers.
    let v1 = aws
        .s3api(&["list-objects", "--bucket", BUCKET, "--prefix", "page/", "--page-size", "250"])
        .run("list-objects (v1) --page-size 250")
        .ok();
    v1.check_keys(&keys_of(&v1.json()), &keys, "ListObjects v1 pages of 250");

    // Delimiter rollups paged 3 at a time: 7 prefixes, no keys.
    let rolled = aws
        .s3api(&[
            "list-objects-v2",
            "--bucket",
            BUCKET,
            "--prefix",
            "page/",
            "--delimiter",
            "/",
            "--page-size",
            "3",
        ])
        .run("list-objects-v2 delimiter, pages of 3")
        .ok();
    let expected: Vec<String> = (0..7).map(|i| format!("page/{i:02}/")).collect();
    rolled.check_eq(prefixes_of(&rolled.json()), expected, "CommonPrefixes");
    rolled.check_eq(keys_of(&rolled.json()), Vec::<String>::new(), "Contents beside the rollups");
}

#[test]
fn aws_cli_presigned_get() {
    let gw = Gateway::start("aws-presign");
    let aws = Aws::new(&gw);
    create_bucket(&aws);
    let body = b"presigned by aws-cli\n".to_vec();
    let local = gw.work_dir().join("p.txt");
    write_file(&local, &body);
    let target = format!("s3://{BUCKET}/shared/p q+r.txt");
    aws.s3(&["cp", local.to_str().unwrap_or_default(), &target]).run("upload object to share").ok();
    let presign = aws.s3(&["presign", &target, "--expires-in", "300"]).run("presign").ok();
    let url = presign.stdout.trim().to_string();
    presign.check(
        url.contains("X-Amz-Signature=") && url.contains("X-Amz-Expires=300"),
        "expected a SigV4 presigned URL",
    );
    let out = gw.work_dir().join("fetched.txt");
    check_presigned_get(&url, &out, &body);
    // A tampered signature must be refused.
    let tampered = tamper_signature(&url);
    let refused = curl_get(&tampered, &gw.work_dir().join("refused.xml")).ok();
    refused.check_eq(refused.stdout.trim(), "403", "HTTP status of a tampered presigned GET");
}

/// Flip the last hex digit of X-Amz-Signature.
pub fn tamper_signature(url: &str) -> String {
    let mut chars: Vec<char> = url.chars().collect();
    if let Some(last) = chars.last_mut() {
        *last = if *last == '0' { '1' } else { '0' };
    }
    chars.into_iter().collect()
}

#[test]
fn aws_cli_tricky_keys_and_key_length() {
    let gw = Gateway::start("aws-keys");
    let aws = Aws::new(&gw);
    create_bucket(&aws);
    let mut expected = Vec::new();
    for (i, key) in tricky_keys(&gw).iter().enumerate() {
        let local = gw.work_dir().join(format!("tricky-{i}"));
        write_file(&local, key.as_bytes());
        aws.s3api(&[
            "put-object",
            "--bucket",
            BUCKET,
            "--key",
            key,
            "--body",
            local.to_str().unwrap_or_default(),
        ])
        .run(&format!("put tricky key {key:?}"))
        .ok();
        expected.push(key.to_string());
    }
    aws.s3api(&["put-object", "--bucket", BUCKET, "--key", DIR_MARKER_KEY])
        .run("put zero-byte dir marker")
        .ok();
    expected.push(DIR_MARKER_KEY.to_string());
    let long = longest_key();
    aws.s3api(&["put-object", "--bucket", BUCKET, "--key", &long]).run("put 1024-byte key").ok();
    expected.push(long.clone());

    let list = aws.s3api(&["list-objects-v2", "--bucket", BUCKET]).run("list tricky keys").ok();
    list.check_keys(&keys_of(&list.json()), &sorted(expected.clone()), "listed keys (UTF-8 byte order)");
    let rolled = aws
        .s3api(&["list-objects-v2", "--bucket", BUCKET, "--delimiter", "/"])
        .run("list tricky keys with /")
        .ok();
    let expected_prefixes = sorted(
        expected
            .iter()
            .filter_map(|k| k.find('/').map(|i| k[..=i].to_string()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect(),
    );
    rolled.check_eq(prefixes_of(&rolled.json()), expected_prefixes, "CommonPrefixes of tricky keys");

    for (i, key) in tricky_keys(&gw).iter().enumerate() {
        let down = gw.work_dir().join(format!("tricky-{i}.down"));
        let out = aws
            .s3api(&["get-object", "--bucket", BUCKET, "--key", key, down.to_str().unwrap_or_default()])
            .run(&format!("get tricky key {key:?}"))
            .ok();
        out.check_eq(read_file(&down), key.as_bytes().to_vec(), "tricky key body");
    }
    let marker =
        aws.s3api(&["head-object", "--bucket", BUCKET, "--key", DIR_MARKER_KEY]).run("head dir marker").ok();
    marker.check_eq(marker.json()["ContentLength"].as_u64(), Some(0), "dir marker ContentLength");
    // `aws s3 ls` of the marker's prefix shows the zero-byte marker as an object named "".
    let ls = aws.s3(&["ls", &format!("s3://{BUCKET}/{DIR_MARKER_KEY}")]).run("ls dir marker prefix").ok();
    ls.check(ls.stdout.lines().count() == 1, "expected exactly the marker object");

    // One byte over the limit is refused with the S3 error code, and nothing is stored.
    aws.s3api(&["put-object", "--bucket", BUCKET, "--key", &too_long_key()])
        .run("put 1025-byte key")
        .fails()
        .mentions("KeyTooLongError");
    let after = aws
        .s3api(&["list-objects-v2", "--bucket", BUCKET, "--prefix", "long/"])
        .run("list after rejected key")
        .ok();
    after.check_keys(&keys_of(&after.json()), &[long], "keys under long/ after the rejected PUT");
}

//! boto3 (>= 1.36, CRC32 checksums by default) against a fresh holt-gateway, through
//! `py/s3ops.py`.
//!
//! Invariant: the SDK most S3 tooling is built on works unmodified: bucket lifecycle, objects
//! with metadata, managed multipart transfers, paginators over ListObjectsV2 and ListObjects v1
//! (continuation tokens and markers), delimiter rollups, copy with REPLACE, single and batch
//! delete, presigned URLs (valid, expired), tricky keys and the key length limit.

use s3_compat_tests::clients::{boto3_error_code, check_presigned_get, curl_get, Boto3};
use s3_compat_tests::data::{
    longest_key, md5_hex, multipart_etag, pagination_keys, payload, read_file, run_seed, same_bytes, sorted,
    too_long_key, tricky_keys, write_file, DIR_MARKER_KEY, TREE_KEYS,
};
use s3_compat_tests::gateway::Gateway;
use serde_json::{json, Value};

const BUCKET: &str = "boto3-bucket";
const MIB: usize = 1024 * 1024;

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn create_bucket(b: &Boto3) {
    let out = b.call("create_bucket", json!({ "Bucket": BUCKET })).run("create bucket").ok();
    out.check_eq(out.json()["HTTPStatusCode"].as_u64(), Some(200), "HTTP status");
}

#[test]
fn boto3_object_lifecycle() {
    let gw = Gateway::start("boto3-lifecycle");
    let b = Boto3::new(&gw);
    create_bucket(&b);
    let body = "small body with metadata \u{2713}\n";
    b.call(
        "put_object",
        json!({ "Bucket": BUCKET, "Key": "docs/small.txt", "Body": body, "ContentType": "text/plain",
                "Metadata": { "color": "blue", "owner": "compat" } }),
    )
    .run("put small object with metadata")
    .ok();
    let head =
        b.call("head_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt" })).run("head object").ok();
    let h = head.json();
    head.check_eq(h["ContentLength"].as_u64(), Some(body.len() as u64), "ContentLength");
    head.check_eq(h["ContentType"].as_str(), Some("text/plain"), "ContentType");
    head.check_eq(h["Metadata"].clone(), json!({ "color": "blue", "owner": "compat" }), "Metadata");
    let etag = format!("\"{}\"", md5_hex(body.as_bytes()));
    head.check_eq(h["ETag"].as_str(), Some(etag.as_str()), "ETag");

    let get =
        b.call("get_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt" })).run("get object").ok();
    get.check_eq(
        get.json()["Body_md5"].as_str().map(str::to_string),
        Some(md5_hex(body.as_bytes())),
        "body md5",
    );

    // Conditional GET: a matching If-None-Match is 304, a wrong If-Match is 412.
    let not_modified = b
        .call("get_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt", "IfNoneMatch": etag }))
        .run("get with matching If-None-Match");
    not_modified.check_eq(boto3_error_code(&not_modified), "304".to_string(), "error code");
    let precondition = b
        .call("get_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt", "IfMatch": "\"0000\"" }))
        .run("get with wrong If-Match");
    precondition.check_eq(boto3_error_code(&precondition), "PreconditionFailed".to_string(), "error code");

    let copy = b
        .call(
            "copy_object",
            json!({ "Bucket": BUCKET, "Key": "docs/copy.txt",
                    "CopySource": { "Bucket": BUCKET, "Key": "docs/small.txt" },
                    "MetadataDirective": "REPLACE", "Metadata": { "color": "red" },
                    "ContentType": "application/octet-stream" }),
        )
        .run("copy object with REPLACE")
        .ok();
    copy.check_eq(copy.json()["CopyObjectResult"]["ETag"].as_str(), Some(etag.as_str()), "copy ETag");
    let head =
        b.call("head_object", json!({ "Bucket": BUCKET, "Key": "docs/copy.txt" })).run("head copy").ok();
    head.check_eq(head.json()["Metadata"].clone(), json!({ "color": "red" }), "replaced Metadata");
    head.check_eq(
        head.json()["ContentType"].as_str(),
        Some("application/octet-stream"),
        "replaced ContentType",
    );

    b.call("delete_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt" }))
        .run("delete one object")
        .ok();
    let gone =
        b.call("head_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt" })).run("head deleted");
    gone.check_eq(boto3_error_code(&gone), "404".to_string(), "HEAD of a deleted key");
    let missing =
        b.call("get_object", json!({ "Bucket": BUCKET, "Key": "docs/small.txt" })).run("get deleted");
    missing.check_eq(boto3_error_code(&missing), "NoSuchKey".to_string(), "GET of a deleted key");

    let batch: Vec<String> = (0..20).map(|i| format!("batch/{i:02}")).collect();
    b.op("seed", &json!({ "bucket": BUCKET, "keys": batch, "threads": 8 })).run("put 20 objects").ok();
    let objects: Vec<Value> = batch.iter().map(|k| json!({ "Key": k })).collect();
    let del = b
        .call("delete_objects", json!({ "Bucket": BUCKET, "Delete": { "Objects": objects, "Quiet": false } }))
        .run("batch delete 20 objects")
        .ok();
    let deleted: Vec<String> = del.json()["Deleted"]
        .as_array()
        .map(|d| d.iter().filter_map(|o| o["Key"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    del.check_keys(&sorted(deleted), &batch, "Deleted");
    let list = b
        .op("paginate", &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET } }))
        .run("list after deletes")
        .ok();
    list.check_keys(&strings(&list.json()["keys"]), &["docs/copy.txt".to_string()], "remaining keys");

    let busy = b.call("delete_bucket", json!({ "Bucket": BUCKET })).run("delete non-empty bucket");
    busy.check_eq(boto3_error_code(&busy), "BucketNotEmpty".to_string(), "error code");
    b.call("delete_object", json!({ "Bucket": BUCKET, "Key": "docs/copy.txt" }))
        .run("delete last object")
        .ok();
    b.call("delete_bucket", json!({ "Bucket": BUCKET })).run("delete bucket").ok();
    let head = b.call("head_bucket", json!({ "Bucket": BUCKET })).run("head deleted bucket");
    head.check_eq(boto3_error_code(&head), "404".to_string(), "HEAD of a deleted bucket");
}

#[test]
fn boto3_multipart_20mib() {
    let gw = Gateway::start("boto3-multipart");
    let b = Boto3::new(&gw);
    let seed = run_seed();
    println!("seed {seed}");
    create_bucket(&b);
    let body = payload(seed, 20 * MIB);
    let local = gw.work_dir().join("big.bin");
    write_file(&local, &body);
    b.op(
        "upload",
        &json!({ "bucket": BUCKET, "key": "big/twenty.bin", "file": local, "multipart_mib": 5,
                 "extra": { "Metadata": { "kind": "multipart" }, "ContentType": "application/x-test" } }),
    )
    .run("managed multipart upload, 5 MiB parts")
    .ok();
    let head = b
        .call("head_object", json!({ "Bucket": BUCKET, "Key": "big/twenty.bin" }))
        .run("head multipart")
        .ok();
    let h = head.json();
    head.check_eq(h["ContentLength"].as_u64(), Some(body.len() as u64), "ContentLength");
    head.check_eq(
        h["ETag"].as_str().map(str::to_string),
        Some(format!("\"{}\"", multipart_etag(&body, 5 * MIB))),
        "multipart ETag (-4)",
    );
    head.check_eq(h["Metadata"]["kind"].as_str(), Some("multipart"), "Metadata.kind");
    head.check_eq(h["ContentType"].as_str(), Some("application/x-test"), "ContentType");
    let down = gw.work_dir().join("big.down");
    let get = b
        .op("download", &json!({ "bucket": BUCKET, "key": "big/twenty.bin", "file": down }))
        .run("download")
        .ok();
    if let Err(e) = same_bytes(&read_file(&down), &body) {
        get.fail(&format!("downloaded bytes differ: {e}"));
    }
    let part = b
        .call("get_object", json!({ "Bucket": BUCKET, "Key": "big/twenty.bin", "PartNumber": 2 }))
        .run("get part 2")
        .ok();
    part.check_eq(
        part.json()["Body_md5"].as_str().map(str::to_string),
        Some(md5_hex(&body[5 * MIB..10 * MIB])),
        "part 2 md5",
    );

    // An aborted upload leaves nothing behind.
    let created = b
        .call("create_multipart_upload", json!({ "Bucket": BUCKET, "Key": "big/aborted.bin" }))
        .run("create multipart upload")
        .ok();
    let upload_id = created.json()["UploadId"].as_str().unwrap_or_default().to_string();
    created.check(!upload_id.is_empty(), "UploadId missing");
    b.call("upload_part", json!({ "Bucket": BUCKET, "Key": "big/aborted.bin", "UploadId": upload_id, "PartNumber": 1, "Body": "tiny" }))
        .run("upload part")
        .ok();
    let listed =
        b.call("list_multipart_uploads", json!({ "Bucket": BUCKET })).run("list multipart uploads").ok();
    let ids: Vec<String> = listed.json()["Uploads"]
        .as_array()
        .map(|u| u.iter().filter_map(|x| x["UploadId"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    listed.check_eq(ids, vec![upload_id.clone()], "in-progress uploads");
    let parts = b
        .call("list_parts", json!({ "Bucket": BUCKET, "Key": "big/aborted.bin", "UploadId": upload_id }))
        .run("list parts")
        .ok();
    parts.check_eq(parts.json()["Parts"].as_array().map(Vec::len), Some(1), "parts listed");
    b.call(
        "abort_multipart_upload",
        json!({ "Bucket": BUCKET, "Key": "big/aborted.bin", "UploadId": upload_id }),
    )
    .run("abort multipart upload")
    .ok();
    let listed =
        b.call("list_multipart_uploads", json!({ "Bucket": BUCKET })).run("list uploads after abort").ok();
    listed.check_eq(listed.json()["Uploads"].as_array().map(Vec::len).unwrap_or(0), 0, "uploads after abort");
    let head =
        b.call("head_object", json!({ "Bucket": BUCKET, "Key": "big/aborted.bin" })).run("head aborted key");
    head.check_eq(boto3_error_code(&head), "404".to_string(), "aborted upload must not create the object");
}

#[test]
fn boto3_listing_and_pagination() {
    let gw = Gateway::start("boto3-listing");
    let b = Boto3::new(&gw);
    create_bucket(&b);
    let keys = sorted(pagination_keys(1050));
    let mut all: Vec<String> = keys.clone();
    all.extend(TREE_KEYS.iter().map(|k| k.to_string()));
    b.op("seed", &json!({ "bucket": BUCKET, "keys": all, "threads": 16 })).run("seed 1054 keys").ok();

    let v2 = b
        .op("paginate", &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Prefix": "page/" }, "page_size": 250 }))
        .run("ListObjectsV2 paginator, pages of 250")
        .ok();
    let v = v2.json();
    v2.check_keys(&strings(&v["keys"]), &keys, "ListObjectsV2 keys");
    v2.check_eq(v["pages"].as_u64(), Some(5), "pages");
    let tokens = strings(&v["tokens"]);
    v2.check_eq(tokens.len(), 4, "continuation tokens");
    let distinct: std::collections::BTreeSet<&String> = tokens.iter().collect();
    v2.check_eq(distinct.len(), 4, "distinct continuation tokens");

    let v1 = b
        .op("paginate", &json!({ "method": "list_objects", "kwargs": { "Bucket": BUCKET, "Prefix": "page/" }, "page_size": 100 }))
        .run("ListObjects v1 paginator, pages of 100")
        .ok();
    v1.check_keys(&strings(&v1.json()["keys"]), &keys, "ListObjects v1 keys");
    v1.check_eq(v1.json()["pages"].as_u64(), Some(11), "v1 pages");

    let root = b
        .op(
            "paginate",
            &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Delimiter": "/" } }),
        )
        .run("list root with delimiter")
        .ok();
    root.check_eq(
        strings(&root.json()["prefixes"]),
        vec!["page/".to_string(), "tree/".to_string()],
        "root prefixes",
    );
    root.check_eq(strings(&root.json()["keys"]), vec!["top.txt".to_string()], "root keys");
    let sub = b
        .op("paginate", &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET, "Prefix": "tree/", "Delimiter": "/" } }))
        .run("list prefix with delimiter")
        .ok();
    sub.check_eq(strings(&sub.json()["prefixes"]), vec!["tree/sub/".to_string()], "tree/ prefixes");
    sub.check_eq(strings(&sub.json()["keys"]), vec!["tree/a.txt".to_string()], "tree/ keys");
    let v1_rolled = b
        .op("paginate", &json!({ "method": "list_objects", "kwargs": { "Bucket": BUCKET, "Prefix": "page/", "Delimiter": "/" }, "page_size": 2 }))
        .run("ListObjects v1 delimiter, pages of 2 (NextMarker)")
        .ok();
    let expected: Vec<String> = (0..7).map(|i| format!("page/{i:02}/")).collect();
    v1_rolled.check_eq(strings(&v1_rolled.json()["prefixes"]), expected.clone(), "v1 CommonPrefixes");
    v1_rolled.check_eq(v1_rolled.json()["pages"].as_u64(), Some(4), "v1 rollup pages");

    let after = b
        .call(
            "list_objects_v2",
            json!({ "Bucket": BUCKET, "Prefix": "page/", "StartAfter": "page/06/obj-01042", "MaxKeys": 10 }),
        )
        .run("StartAfter near the end")
        .ok();
    let keys_after: Vec<String> = after.json()["Contents"]
        .as_array()
        .map(|c| c.iter().filter_map(|o| o["Key"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    after.check_eq(keys_after, vec!["page/06/obj-01049".to_string()], "keys after StartAfter");
    let zero = b.call("list_objects_v2", json!({ "Bucket": BUCKET, "MaxKeys": 0 })).run("MaxKeys=0").ok();
    zero.check_eq(zero.json()["IsTruncated"].as_bool(), Some(false), "IsTruncated with MaxKeys=0");
    zero.check_eq(zero.json()["KeyCount"].as_u64(), Some(0), "KeyCount with MaxKeys=0");
    let garbage = b
        .call("list_objects_v2", json!({ "Bucket": BUCKET, "ContinuationToken": "bm90LWEtdG9rZW4=" }))
        .run("garbage continuation token");
    garbage.check_eq(boto3_error_code(&garbage), "InvalidArgument".to_string(), "error code");
    let versions = b
        .call("list_object_versions", json!({ "Bucket": BUCKET, "Prefix": "tree/" }))
        .run("ListObjectVersions on an unversioned bucket")
        .ok();
    let vs = versions.json();
    let ids: Vec<String> = vs["Versions"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|x| {
                    format!("{}={}", x["Key"].as_str().unwrap_or("?"), x["VersionId"].as_str().unwrap_or("?"))
                })
                .collect()
        })
        .unwrap_or_default();
    versions.check_eq(
        ids,
        TREE_KEYS[1..].iter().map(|k| format!("{k}=null")).collect::<Vec<_>>(),
        "versions (VersionId null)",
    );
}

/// An engine gauge from the gateway's `/metrics` (`holt_engine_<name>`).
fn engine_gauge(gw: &Gateway, name: &str) -> u64 {
    let out = gw.work_dir().join("metrics.txt");
    let fetched = curl_get(&format!("{}/metrics", gw.endpoint()), &out).ok();
    fetched.check_eq(fetched.stdout.trim(), "200", "HTTP status of /metrics");
    let text = String::from_utf8_lossy(&read_file(&out)).into_owned();
    let line = format!("holt_engine_{name} ");
    match text.lines().find_map(|l| l.strip_prefix(line.as_str())).and_then(|v| v.trim().parse().ok()) {
        Some(v) => v,
        None => fetched.fail(&format!("no gauge {line:?} in /metrics")),
    }
}

/// Deleting every object under a prefix large enough to fill engine frames of its own, with
/// DeleteObjects as clients bulk-delete, leaves no trace of it in delimiter listings (an
/// emptied frame left linked would roll up as a common prefix with nothing under it). The
/// engine test `holt-core/tests/emptied_frames_full_size.rs` checks the same below S3.
#[test]
fn boto3_bulk_delete_of_a_large_prefix_leaves_no_empty_common_prefix() {
    let gw = Gateway::start("boto3-bulk-delete");
    let b = Boto3::new(&gw);
    create_bucket(&b);
    // 2 KiB bodies are stored inline in the metadata record: 1,500 of them fill several frames.
    let gone: Vec<String> = (0..1500).map(|i| format!("gone/d{}/obj-{i:05}", i % 3)).collect();
    let kept = vec!["kept/a.txt".to_string(), "kept/b.txt".to_string(), "top.txt".to_string()];
    b.op("seed", &json!({ "bucket": BUCKET, "keys": gone, "threads": 16, "size": 2048 }))
        .run("seed 1,500 objects of 2 KiB under gone/")
        .ok();
    b.op("seed", &json!({ "bucket": BUCKET, "keys": kept, "threads": 4 })).run("seed kept objects").ok();
    let frames_before = engine_gauge(&gw, "frames");

    for chunk in gone.chunks(1000) {
        let objects: Vec<Value> = chunk.iter().map(|k| json!({ "Key": k })).collect();
        let del = b
            .call(
                "delete_objects",
                json!({ "Bucket": BUCKET, "Delete": { "Objects": objects, "Quiet": true } }),
            )
            .run("bulk delete under gone/")
            .ok();
        del.check_eq(del.json()["Errors"].clone(), Value::Null, "DeleteObjects errors");
    }
    let frames_after = engine_gauge(&gw, "frames");

    for method in ["list_objects_v2", "list_objects"] {
        let root = b
            .op("paginate", &json!({ "method": method, "kwargs": { "Bucket": BUCKET, "Delimiter": "/" } }))
            .run(&format!("{method} at the root with delimiter after the bulk delete"))
            .ok();
        root.check_eq(strings(&root.json()["prefixes"]), vec!["kept/".to_string()], "root prefixes");
        root.check_eq(strings(&root.json()["keys"]), vec!["top.txt".to_string()], "root keys");
        let under = b
            .op(
                "paginate",
                &json!({ "method": method, "kwargs": { "Bucket": BUCKET, "Prefix": "gone/", "Delimiter": "/" } }),
            )
            .run(&format!("{method} under gone/ after the bulk delete"))
            .ok();
        under.check_eq(strings(&under.json()["prefixes"]), Vec::<String>::new(), "prefixes under gone/");
        under.check_eq(strings(&under.json()["keys"]), Vec::<String>::new(), "keys under gone/");
    }
    // The test is about frames the deletes emptied: there must have been some, and they went.
    // In upstream mode the bodies are upstream and 1,500 small records share a frame or two,
    // so only the listings above apply.
    let metrics = format!("frames before {frames_before}, after {frames_after}");
    if gw.upstream().is_none() {
        assert!(frames_before >= 4, "the objects under gone/ should fill frames of their own: {metrics}");
        assert!(frames_after < frames_before, "the emptied frames should be gone: {metrics}");
    }
    println!("engine {metrics}");
}

#[test]
fn boto3_presigned_get() {
    let gw = Gateway::start("boto3-presign");
    let b = Boto3::new(&gw);
    create_bucket(&b);
    let body = "presigned by boto3 \u{263a}\n";
    let key = "shared/\u{e9}t\u{e9} & more.txt";
    b.call("put_object", json!({ "Bucket": BUCKET, "Key": key, "Body": body }))
        .run("put object to share")
        .ok();
    let presign = b
        .op(
            "presign",
            &json!({ "method": "get_object", "params": { "Bucket": BUCKET, "Key": key }, "expires": 300 }),
        )
        .run("presign GET")
        .ok();
    let url = presign.json()["url"].as_str().unwrap_or_default().to_string();
    presign.check(url.contains("X-Amz-Signature="), "expected a SigV4 presigned URL");
    let out = gw.work_dir().join("fetched.txt");
    check_presigned_get(&url, &out, body.as_bytes());

    let short = b
        .op(
            "presign",
            &json!({ "method": "get_object", "params": { "Bucket": BUCKET, "Key": key }, "expires": 1 }),
        )
        .run("presign GET expiring in 1 s")
        .ok();
    let short_url = short.json()["url"].as_str().unwrap_or_default().to_string();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let expired = curl_get(&short_url, &gw.work_dir().join("expired.xml")).ok();
    expired.check_eq(expired.stdout.trim(), "403", "HTTP status of an expired presigned URL");
}

#[test]
fn boto3_tricky_keys_and_key_length() {
    let gw = Gateway::start("boto3-keys");
    let b = Boto3::new(&gw);
    create_bucket(&b);
    let mut keys: Vec<String> = tricky_keys(&gw).iter().map(|k| k.to_string()).collect();
    let long = longest_key();
    keys.push(long.clone());
    b.op("seed", &json!({ "bucket": BUCKET, "keys": keys, "threads": 4 })).run("put tricky keys").ok();
    b.call("put_object", json!({ "Bucket": BUCKET, "Key": DIR_MARKER_KEY, "Body": "" }))
        .run("put dir marker")
        .ok();
    let mut expected = keys.clone();
    expected.push(DIR_MARKER_KEY.to_string());
    let list = b
        .op(
            "paginate",
            &json!({ "method": "list_objects_v2", "kwargs": { "Bucket": BUCKET }, "page_size": 3 }),
        )
        .run("list tricky keys, pages of 3")
        .ok();
    list.check_keys(
        &strings(&list.json()["keys"]),
        &sorted(expected.clone()),
        "tricky keys (EncodingType=url round trip)",
    );
    let v1 = b
        .op("paginate", &json!({ "method": "list_objects", "kwargs": { "Bucket": BUCKET }, "page_size": 3 }))
        .run("list tricky keys with v1, pages of 3")
        .ok();
    v1.check_keys(&strings(&v1.json()["keys"]), &sorted(expected.clone()), "tricky keys via v1 markers");
    let md5s: serde_json::Map<String, Value> =
        keys.iter().map(|k| (k.clone(), json!(md5_hex(k.as_bytes())))).collect();
    let verify =
        b.op("verify", &json!({ "bucket": BUCKET, "expected": md5s })).run("read back tricky keys").ok();
    verify.check_eq(verify.json()["missing"].clone(), json!([]), "missing keys");
    verify.check_eq(verify.json()["mismatched"].clone(), json!([]), "keys with wrong bodies");
    let marker =
        b.call("head_object", json!({ "Bucket": BUCKET, "Key": DIR_MARKER_KEY })).run("head dir marker").ok();
    marker.check_eq(marker.json()["ContentLength"].as_u64(), Some(0), "dir marker length");
    let rejected = b
        .call("put_object", json!({ "Bucket": BUCKET, "Key": too_long_key(), "Body": "x" }))
        .run("put 1025-byte key");
    rejected.check_eq(boto3_error_code(&rejected), "KeyTooLongError".to_string(), "error code");
    let head = b.call("head_object", json!({ "Bucket": BUCKET, "Key": long })).run("head 1024-byte key").ok();
    head.check_eq(
        head.json()["ContentLength"].as_u64(),
        Some(long.len() as u64),
        "1024-byte key body length",
    );
}

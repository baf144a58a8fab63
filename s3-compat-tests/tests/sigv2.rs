//! Signature Version 2 through the clients that still produce it, signed by their own code
//! (botocore's `HmacV1Auth` and `HmacV1QueryAuth`, s3cmd's signer), not by ours.
//!
//! Invariants:
//! - boto3 built with its defaults (no `signature_version`) presigns with SigV2: such a GET
//!   and PUT work with curl, and the URL changed to name another object is refused;
//! - boto3 with `signature_version="s3"` signs every call in the `Authorization: AWS` form:
//!   metadata and content types, a response override (a sub-resource), copy, delimiter
//!   listings, keys with a space and a `+`, multipart (sub-resources `uploads`, `uploadId`,
//!   `partNumber`), DeleteObjects (`delete`);
//! - s3cmd with `signature_v2 = True` works, and `s3cmd signurl` URLs fetch with curl;
//! - with `--sigv2 off`, the same URL is refused with 400 InvalidRequest.

use serde_json::{json, Value};

use s3_compat_tests::clients::{check_presigned_get, curl_get, Boto3, S3cmd};
use s3_compat_tests::data::{md5_hex, read_file, write_file};
use s3_compat_tests::exec::{Cmd, Outcome};
use s3_compat_tests::gateway::Gateway;
use s3_compat_tests::tools::Tool;

const BUCKET: &str = "sigv2-bucket";

fn presign(boto3: &Boto3, method: &str, key: &str) -> String {
    let out = boto3
        .script(
            "py/sigv2.py",
            "presign",
            &json!({"method": method, "params": {"Bucket": BUCKET, "Key": key}}),
        )
        .run("presign with boto3's default configuration")
        .ok();
    let url = out.json()["url"].as_str().unwrap_or_default().to_owned();
    out.check(
        url.contains("AWSAccessKeyId=") && url.contains("Signature=") && url.contains("Expires="),
        &format!("boto3's default presigned URL is SigV2: {url}"),
    );
    out.check(!url.contains("X-Amz-Algorithm"), "not SigV4");
    url
}

fn curl_put(url: &str, file: &std::path::Path) -> Outcome {
    Cmd::new("curl", Tool::Curl.path())
        .args(["--silent", "--show-error", "--globoff", "--max-time", "60", "--output", "/dev/null"])
        .args(["--write-out", "%{http_code}", "--upload-file"])
        .arg(file)
        .arg(url)
        .run("presigned PUT with curl")
}

#[test]
fn boto3_presigns_and_signs_with_version_2() {
    let gw = Gateway::start("sigv2-boto3");
    let boto3 = Boto3::new(&gw);
    let session =
        boto3.script("py/sigv2.py", "session", &json!({"bucket": BUCKET})).run("SigV2 session").ok();
    let result = session.json();
    let steps: Vec<(String, Value)> = result["steps"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| (s["step"].as_str().unwrap_or("").to_owned(), s.clone()))
        .collect();
    for (name, step) in &steps {
        session.check(step.get("error").is_none(), &format!("{name} failed: {step}"));
    }
    let step = |name: &str| {
        steps.iter().find(|(n, _)| n == name).map(|(_, s)| s["result"].clone()).unwrap_or_default()
    };
    session.check_eq(steps.len(), 11, "steps run");
    session.check_eq(step("head_object"), json!({"owner": "sigv2"}), "metadata");
    session.check_eq(step("get_object"), result["body_md5"].clone(), "body");
    session.check_eq(step("get_content_type"), json!("application/x-test"), "response-content-type override");
    session.check_eq(step("list"), json!(["dir/"]), "delimiter listing");
    session.check_eq(step("list_dir"), json!(["dir/a b+c.txt", "dir/copy.txt"]), "listing under dir/");
    session.check(step("multipart").as_str().is_some_and(|e| e.ends_with("-1\"")), "multipart ETag");
    session.check_eq(step("delete_objects"), json!(2), "DeleteObjects");

    // Presigned with boto3's defaults: a PUT, then a GET of what it stored.
    let work = gw.work_dir();
    let body = b"uploaded through a SigV2 presigned PUT\n".repeat(100);
    let upload = work.join("upload.txt");
    write_file(&upload, &body);
    let put = curl_put(&presign(&boto3, "put_object", "presigned.txt"), &upload);
    put.check_eq(put.stdout.trim(), "200", "presigned PUT status");
    let get_url = presign(&boto3, "get_object", "presigned.txt");
    check_presigned_get(&get_url, &work.join("got.txt"), &body);
    // The same signature for another object is refused.
    let other = get_url.replace("presigned.txt", "dir/copy.txt");
    let refused = curl_get(&other, &work.join("refused.xml"));
    refused.check_eq(refused.stdout.trim(), "403", "a presigned URL moved to another key");
    let error = String::from_utf8_lossy(&read_file(&work.join("refused.xml"))).into_owned();
    refused.check(error.contains("SignatureDoesNotMatch"), &format!("error document: {error}"));
}

#[test]
fn s3cmd_with_signature_v2_and_signurl() {
    let gw = Gateway::start("sigv2-s3cmd");
    let s3cmd = S3cmd::new(&gw).signature_v2();
    let work = gw.work_dir();
    let body = b"s3cmd signs this with version 2\n".repeat(300);
    let file = work.join("file.txt");
    write_file(&file, &body);
    s3cmd.cmd(&["mb", &format!("s3://{BUCKET}")]).run("create bucket").ok();
    s3cmd.cmd(&["put", &file.to_string_lossy(), &format!("s3://{BUCKET}/docs/file.txt")]).run("put").ok();
    let listed = s3cmd.cmd(&["ls", &format!("s3://{BUCKET}/")]).run("ls").ok();
    let dirs: Vec<&str> = listed.stdout.split_whitespace().collect();
    listed.check_eq(dirs, vec!["DIR", "s3://sigv2-bucket/docs/"], "s3cmd ls with a delimiter");
    let back = work.join("back.txt");
    s3cmd
        .cmd(&["get", "--force", &format!("s3://{BUCKET}/docs/file.txt"), &back.to_string_lossy()])
        .run("get")
        .ok();
    let got = read_file(&back);
    assert_eq!(md5_hex(&got), md5_hex(&body), "s3cmd get returned other bytes");
    let signed = s3cmd.cmd(&["signurl", &format!("s3://{BUCKET}/docs/file.txt"), "+600"]).run("signurl").ok();
    let url = signed.stdout.trim().to_owned();
    signed.check(url.contains("Signature="), &format!("a SigV2 URL: {url}"));
    check_presigned_get(&url, &work.join("signed.txt"), &body);
    s3cmd.cmd(&["del", &format!("s3://{BUCKET}/docs/file.txt")]).run("del").ok();
}

#[test]
fn sigv2_off_refuses_what_version_2_signs() {
    let gw = Gateway::start_with_args("sigv2-off", &["--sigv2", "off"]);
    let boto3 = Boto3::new(&gw);
    boto3.call("create_bucket", json!({"Bucket": BUCKET})).run("create bucket (SigV4)").ok();
    boto3.call("put_object", json!({"Bucket": BUCKET, "Key": "k", "Body": "x"})).run("put (SigV4)").ok();
    let url = presign(&boto3, "get_object", "k");
    let out = gw.work_dir().join("refused.xml");
    let refused = curl_get(&url, &out);
    refused.check_eq(refused.stdout.trim(), "400", "SigV2 with --sigv2 off");
    let error = String::from_utf8_lossy(&read_file(&out)).into_owned();
    refused.check(error.contains("InvalidRequest"), &format!("error document: {error}"));
}

//! The web console in a real browser: headless Chromium (Debian's, driven by selenium through
//! its chromedriver) opens `/console` on the gateway (`py/console_browser.py`).
//!
//! Invariants:
//! - a wrong secret is refused at sign-in with the gateway's error; the right one signs in
//!   (every request is signed by the page itself);
//! - the bucket boto3 made is listed, and browsing it shows its common prefixes and objects
//!   with the sizes boto3 stored;
//! - files chosen in the upload input land under the prefix being browsed: a small one in
//!   one PUT, one past 64 MiB as a multipart upload (its ETag says how many parts), each the
//!   size boto3 then reads;
//! - an object's details show its headers, and its download link (a presigned URL the page
//!   made) returns the bytes that were uploaded.
//!
//! Screenshots of each step go to `target/screenshots/`.

use serde_json::{json, Value};

use s3_compat_tests::clients::Boto3;
use s3_compat_tests::gateway::Gateway;

const BIG_BYTES: u64 = 70 << 20;

#[test]
fn the_console_signs_in_browses_uploads_and_downloads() {
    let gw = Gateway::start("browser-console");
    let out = Boto3::new(&gw)
        .browser_script("py/console_browser.py", &json!({"bucket": "console-test", "big_bytes": BIG_BYTES}))
        .run("console_browser.py")
        .ok();
    let r = out.json();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    out.check(text(&r["bad_sign_in"]).contains("SignatureDoesNotMatch"), "a wrong secret is refused");
    out.check_eq(r["buckets"].clone(), json!(["console-test"]), "the bucket list");
    out.check_eq(
        r["root_rows"].clone(),
        json!([["prefix", "docs/"], ["object", "top.txt", 4]]),
        "the bucket's root",
    );
    out.check_eq(
        r["docs_rows"].clone(),
        json!([["prefix", "docs/sub/"], ["object", "docs/a.txt", 1000]]),
        "browsing docs/",
    );
    out.check_eq(text(&r["upload_status"]), String::new(), "no error while uploading");
    let uploaded = r["uploaded_rows"].as_array().cloned().unwrap_or_default();
    out.check(uploaded.contains(&json!(["object", "docs/hello.txt", 28])), "the small upload is listed");
    out.check(uploaded.contains(&json!(["object", "docs/big.bin", BIG_BYTES])), "the big upload is listed");
    out.check_eq(r["heads"]["docs/hello.txt"]["size"].as_u64(), Some(28), "the small upload's size");
    out.check_eq(r["heads"]["docs/big.bin"]["size"].as_u64(), Some(BIG_BYTES), "the big upload's size");
    out.check(text(&r["heads"]["docs/big.bin"]["etag"]).ends_with("-5\""), "70 MiB in 16 MiB parts: 5");
    out.check_eq(text(&r["details"]["content-length"]), "28".to_owned(), "details show the length");
    out.check_eq(text(&r["details"]["Key"]), "docs/hello.txt".to_owned(), "details name the key");
    out.check_eq(r["downloaded_md5"].clone(), r["small_md5"].clone(), "the download link's bytes");
}

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
//!   made) returns the bytes that were uploaded;
//! - each page shows the objects and bytes under the prefix browsed and under each directory
//!   row, as the usage extension (`GET /bucket?usage`, asked by the test itself) counts them,
//!   and bars of the largest entries, largest first.
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

    // Usage: the bucket's root before the uploads, then docs/ after them.
    out.check_eq(
        r["shown_usage"]["root"].clone(),
        json!({"total": [3, 1005], "prefixes": {"docs/": [2, 1001]}, "bars": [["docs/", 1001, 1.0], ["top.txt", 4, 0.0]]}),
        "the root's usage, rows and bars",
    );
    let docs_total = json!([4, 1000 + 1 + 28 + BIG_BYTES]);
    out.check_eq(r["api_usage"]["docs"]["total"].clone(), docs_total.clone(), "the usage API's docs/ total");
    out.check_eq(
        r["api_usage"]["docs"]["prefixes"].clone(),
        json!({"docs/sub/": [1, 1]}),
        "the API's docs/sub/",
    );
    out.check_eq(r["shown_usage"]["docs"]["total"].clone(), docs_total, "the docs/ total shown");
    out.check_eq(
        r["shown_usage"]["docs"]["prefixes"].clone(),
        r["api_usage"]["docs"]["prefixes"].clone(),
        "the directory rows show what the usage API says",
    );
    out.check_eq(
        r["shown_usage"]["docs"]["bars"]
            .as_array()
            .map(|bars| bars.iter().map(|b| b[2].clone()).collect::<Vec<_>>()),
        Some(vec![json!(1.0), json!(0.0), json!(0.0), json!(0.0)]),
        "the bars' lengths follow the bytes",
    );
    out.check_eq(
        r["shown_usage"]["docs"]["bars"][0][0].clone(),
        json!("docs/big.bin"),
        "the largest bar is the big upload",
    );
    out.check_eq(
        r["api_usage"]["root"]["total"].clone(),
        json!([5, 1005 + 28 + BIG_BYTES]),
        "the usage API's bucket total after the uploads",
    );
}

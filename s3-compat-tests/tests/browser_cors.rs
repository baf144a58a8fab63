//! CORS in a real browser: headless Chromium (Debian's, driven by selenium through its
//! chromedriver) loads a page from another origin than the gateway's (`py/cors_browser.py`).
//!
//! Invariants, with the bucket's rules allowing the page's origin (set with boto3):
//! - a presigned PUT from the page (a preflight: its Content-Type is not a simple one)
//!   stores the body, and the page reads the ETag the rules expose;
//! - a presigned GET from the page reads it back;
//! - a ListObjectsV2 fetch signed in its Authorization header (a preflight for those headers)
//!   lists it;
//! - the same GET from an origin the rules do not name fails in the browser, and so does the
//!   GET from the allowed origin once the rules are deleted.
//!
//! Screenshots of the page go to `target/screenshots/`.

use serde_json::json;

use s3_compat_tests::clients::Boto3;
use s3_compat_tests::gateway::Gateway;

#[test]
fn a_page_from_another_origin_uploads_downloads_and_lists() {
    let gw = Gateway::start("browser-cors");
    let boto3 = Boto3::new(&gw);
    let out = boto3
        .browser_script("py/cors_browser.py", &json!({"bucket": "browser-cors"}))
        .run("cors_browser.py")
        .ok();
    let r = out.json();
    let allowed = &r["allowed"];
    out.check_eq(allowed["put"]["status"].as_u64(), Some(200), "presigned PUT from the page");
    let etag = allowed["put"]["etag"].as_str().unwrap_or_default();
    out.check_eq(etag.len(), 34, "the page reads the exposed ETag (a quoted MD5)");
    out.check_eq(allowed["get"]["status"].as_u64(), Some(200), "presigned GET from the page");
    out.check_eq(allowed["get"]["text"].as_str(), r["body"].as_str(), "the body read back by the page");
    out.check_eq(r["stored"].as_str(), r["body"].as_str(), "the body boto3 reads back");
    let listing = allowed["list"]["text"].as_str().unwrap_or_default();
    out.check_eq(
        allowed["list"]["status"].as_u64(),
        Some(200),
        &format!("signed ListObjectsV2 fetch: {listing}"),
    );
    out.check_eq(
        listing.contains("<Key>from-browser/hello.txt</Key>"),
        true,
        "the listing names the uploaded object",
    );
    for (case, what) in
        [("other_origin", "an origin the rules do not name"), ("after_delete", "after DeleteBucketCors")]
    {
        let get = &r[case]["get"];
        out.check_eq(get["status"].as_u64(), None, what);
        out.check_eq(get["error"].as_str().is_some_and(|e| e.contains("Failed to fetch")), true, what);
    }
}

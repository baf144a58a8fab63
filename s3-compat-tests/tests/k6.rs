//! k6 (`go install`ed, pinned) running `k6/compat.js`: raw S3 requests signed by our own SigV4
//! implementation in `k6/lib/sigv4.js` (k6/crypto only), against a fresh holt-gateway.
//!
//! Invariant: a client that builds every request by hand (no SDK smoothing over quirks) gets
//! exactly the statuses, headers, ETags, listing pages and error codes S3 defines. The script
//! fails its run on any failed check (threshold `checks rate==1.0`); this test additionally
//! reads the per-check summary so a failure names the checks that failed.

use s3_compat_tests::clients::{curl_get, K6};
use s3_compat_tests::data::{read_file, tricky_keys};
use s3_compat_tests::exec::Outcome;
use s3_compat_tests::gateway::Gateway;
use serde_json::Value;

const BUCKET: &str = "k6-compat";

/// Read the summary written by `handleSummary` and fail with the names of failed checks.
fn summary(k6: &K6, out: &Outcome) -> Value {
    let text = std::fs::read_to_string(k6.summary_path())
        .unwrap_or_else(|e| out.fail(&format!("no summary at {}: {e}", k6.summary_path().display())));
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| out.fail(&format!("summary is not JSON: {e}")));
    let checks = value["checks"].as_array().cloned().unwrap_or_default();
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c["fails"].as_u64().unwrap_or(0) > 0)
        .map(|c| format!("{} ({} failed)", c["name"].as_str().unwrap_or("?"), c["fails"]))
        .collect();
    if !failed.is_empty() {
        out.fail(&format!("{} of {} checks failed:\n  {}", failed.len(), checks.len(), failed.join("\n  ")));
    }
    value
}

#[test]
fn k6_raw_sigv4_scenario() {
    let gw = Gateway::start("k6");
    let k6 = K6::new(&gw);
    let tricky = serde_json::to_string(&tricky_keys(&gw)).unwrap_or_default();
    let main = k6
        .run_script("compat.js", &[("BUCKET", BUCKET), ("PHASE", "main"), ("TRICKY_KEYS_JSON", &tricky)])
        .run("compat scenario (main phase)");
    let value = summary(&k6, &main);
    let main = main.ok();
    let checks = value["checks"].as_array().map(Vec::len).unwrap_or(0);
    // A run that executed no checks (e.g. a script error before the first request) is a failure.
    main.check(checks >= 40, &format!("expected at least 40 checks, the summary has {checks}"));

    // The presigned URL made in setup(), fetched by curl while the object still exists.
    let url = value["setup"]["presignedUrl"].as_str().unwrap_or_default().to_string();
    main.check(url.contains("X-Amz-Signature="), "setup() returned no presigned URL");
    let fetched_path = gw.work_dir().join("presigned.txt");
    let fetched = curl_get(&url, &fetched_path).ok();
    fetched.check_eq(fetched.stdout.trim(), "200", "HTTP status of the k6-presigned GET");
    fetched.check_eq(
        s3_compat_tests::data::md5_hex(&read_file(&fetched_path)),
        value["setup"]["presignedMd5"].as_str().unwrap_or_default().to_string(),
        "presigned body md5",
    );

    let cleanup = k6
        .run_script("compat.js", &[("BUCKET", BUCKET), ("PHASE", "cleanup")])
        .run("compat scenario (cleanup)");
    summary(&k6, &cleanup);
    cleanup.ok();
}

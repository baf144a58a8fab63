//! A request head (method, URI, headers) through routing and SigV4 authentication, header and
//! presigned forms. No head panics either, and every refusal is a 4xx S3 error: never a 5xx.
#![no_main]

use holt_fuzz::{auth_support, head_from_text};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parts = head_from_text(data);
    for domain in [None, Some("s3.example.com")] {
        if let Err(e) = gateway::routing::route(&parts.method, &parts.uri, &parts.headers, domain) {
            assert!(e.status().is_client_error(), "routing answered {:?} ({})", e.code, e.status());
        }
    }
    if let Some(value) = parts.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let _ = gateway::auth::parse_authorization(value);
    }
    let creds = auth_support::creds();
    let cfg = auth_support::cfg();
    if let Err(e) = gateway::auth::authenticate(&parts, &creds, &cfg, auth_support::t0()) {
        assert!((400..500).contains(&e.status()), "authentication answered {} ({})", e.code(), e.status());
    }
});

//! The listing rules of S3-SEMANTICS.md ("Listing semantics" 1–9), one test each: byte order,
//! common prefixes counting once, exclusive resume points, token/start-after precedence,
//! string delimiters, url encoding, echoed fields, the flat keyspace, and ListObjectVersions.

mod common;

use common::*;
use http::Method;

async fn setup(keys: &[&str]) -> Gw {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for k in keys {
        gw.put("bkt", k, b"x").await;
    }
    gw
}

fn q(s: &str) -> String {
    encode_key(s).replace('/', "%2F")
}

/// Rule 1: UTF-8 byte order of the whole key (`foo+1/` before `foo/`).
#[tokio::test]
async fn rule1_byte_order() {
    let gw = setup(&["foo/a", "foo+1/b", "foo0", "Foo", "foo/\u{e9}", "foo/z"]).await;
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert_eq!(r.xml_all("Key"), ["Foo", "foo+1/b", "foo/a", "foo/z", "foo/\u{e9}", "foo0"]);
    let r = gw.a(Method::GET, "/bkt?list-type=2&delimiter=%2F", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["foo+1/", "foo/"]);
    assert_eq!(r.xml_all("Key"), ["Foo", "foo0"]);
}

/// An empty continuation-token lists from the start and is echoed as sent (an empty
/// `ContinuationToken`), as S3 does; without one, no `ContinuationToken` appears.
#[tokio::test]
async fn an_empty_continuation_token_is_echoed() {
    let gw = setup(&["a", "b"]).await;
    let r = gw.a(Method::GET, "/bkt?list-type=2&continuation-token=", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.xml("ContinuationToken").as_deref(), Some(""));
    assert_eq!(r.xml_all("Key"), ["a", "b"]);
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert_eq!(r.xml("ContinuationToken"), None);
}

/// Rule 2: a common prefix counts once toward max-keys and KeyCount, and its keys are skipped.
#[tokio::test]
async fn rule2_prefix_counts_once() {
    let mut keys: Vec<String> = (0..50).map(|i| format!("a/{i:02}")).collect();
    keys.push("b".into());
    keys.push("c/1".into());
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let gw = setup(&refs).await;
    let r = gw.a(Method::GET, "/bkt?list-type=2&delimiter=%2F&max-keys=2", b"").await;
    assert_eq!(r.xml("KeyCount").as_deref(), Some("2"));
    assert_eq!(r.xml_all("Prefix"), ["", "a/"]);
    assert_eq!(r.xml_all("Key"), ["b"]);
    assert_eq!(r.xml("IsTruncated").as_deref(), Some("true"));
    let token = r.xml("NextContinuationToken").unwrap();
    let r = gw
        .a(
            Method::GET,
            &format!("/bkt?list-type=2&delimiter=%2F&max-keys=2&continuation-token={}", q(&token)),
            b"",
        )
        .await;
    assert_eq!(r.xml_all("Prefix")[1..], ["c/"]);
    assert!(r.xml_all("Key").is_empty());
    assert_eq!(r.xml("KeyCount").as_deref(), Some("1"));
    assert_eq!(r.xml("IsTruncated").as_deref(), Some("false"));
}

/// Rule 3: resume points are exclusive; a page ending on prefix P resumes after all of P;
/// v1 NextMarker is P (only with a delimiter); max-keys=0 is an empty, untruncated page.
#[tokio::test]
async fn rule3_exclusive_resume_and_next_marker() {
    let gw = setup(&["a/1", "a/2", "b", "c"]).await;
    let r = gw.a(Method::GET, "/bkt?delimiter=%2F&max-keys=1", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["a/"]);
    assert_eq!(r.xml("NextMarker").as_deref(), Some("a/"));
    let r = gw.a(Method::GET, "/bkt?delimiter=%2F&max-keys=1&marker=a%2F", b"").await;
    assert_eq!(r.xml_all("Key"), ["b"]);
    assert_eq!(r.xml("NextMarker").as_deref(), Some("b"));
    // Without a delimiter there is no NextMarker.
    let r = gw.a(Method::GET, "/bkt?max-keys=1", b"").await;
    assert_eq!(r.xml("IsTruncated").as_deref(), Some("true"));
    assert_eq!(r.xml("NextMarker"), None);
    // max-keys=0.
    let r = gw.a(Method::GET, "/bkt?list-type=2&max-keys=0", b"").await;
    assert_eq!(r.xml("IsTruncated").as_deref(), Some("false"));
    assert_eq!(r.xml("KeyCount").as_deref(), Some("0"));
    assert_eq!(r.xml("NextContinuationToken"), None);
    assert!(r.xml_all("Key").is_empty());
}

/// Rule 4: a token overrides start-after (both echoed); start-after may be absent or past the
/// end; prefixes not greater than start-after are not returned; `continuation-token=` is fine.
#[tokio::test]
async fn rule4_start_after_and_tokens() {
    let gw = setup(&["a/1", "a/2", "b/1", "c", "d"]).await;
    // start-after inside a rolled-up prefix: that prefix is not returned again.
    let r = gw.a(Method::GET, "/bkt?list-type=2&delimiter=%2F&start-after=a%2F1", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["b/"]);
    assert_eq!(r.xml_all("Key"), ["c", "d"]);
    assert_eq!(r.xml("StartAfter").as_deref(), Some("a/1"));
    // A start-after that does not exist, and one past the end.
    let r = gw.a(Method::GET, "/bkt?list-type=2&start-after=bz", b"").await;
    assert_eq!(r.xml_all("Key"), ["c", "d"]);
    let r = gw.a(Method::GET, "/bkt?list-type=2&start-after=zzz", b"").await;
    assert!(r.xml_all("Key").is_empty());
    assert_eq!(r.status, 200);
    // The token wins over start-after.
    let r = gw.a(Method::GET, "/bkt?list-type=2&max-keys=2", b"").await;
    let token = r.xml("NextContinuationToken").unwrap();
    let r = gw
        .a(Method::GET, &format!("/bkt?list-type=2&start-after=c&continuation-token={}", q(&token)), b"")
        .await;
    assert_eq!(r.xml_all("Key"), ["b/1", "c", "d"]);
    assert_eq!(r.xml("ContinuationToken").as_deref(), Some(token.as_str()));
    assert_eq!(r.xml("StartAfter").as_deref(), Some("c"));
    // Empty token accepted.
    let r = gw.a(Method::GET, "/bkt?list-type=2&continuation-token=", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.xml_all("Key").len(), 5);
    // Tokens are positions: a key inserted behind the position does not shift the next page.
    let r = gw.a(Method::GET, "/bkt?list-type=2&max-keys=2", b"").await;
    let token = r.xml("NextContinuationToken").unwrap();
    gw.put("bkt", "a/0", b"x").await;
    let r = gw.a(Method::GET, &format!("/bkt?list-type=2&continuation-token={}", q(&token)), b"").await;
    assert_eq!(r.xml_all("Key"), ["b/1", "c", "d"]);
}

/// Rule 5: the delimiter is a string, searched at or after the end of the prefix.
#[tokio::test]
async fn rule5_string_delimiters() {
    let gw = setup(&["bar", "baza/1", "bazb", "x--y--z", "x--q", "p.q.r", "s t", "nl\nx"]).await;
    // Prefix ending mid-segment with a one-letter delimiter.
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=ba&delimiter=a", b"").await;
    assert_eq!(r.xml_all("Key"), ["bar", "bazb"]);
    assert_eq!(r.xml_all("Prefix")[1..], ["baza"]);
    // The search starts at the end of the prefix: the "a" inside "ba" does not count.
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=b&delimiter=a", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["ba"]);
    assert!(r.xml_all("Key").is_empty());
    // Multi-character delimiter.
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=x&delimiter=--", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["x--"]);
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=x--&delimiter=--", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["x--y--"]);
    assert_eq!(r.xml_all("Key"), ["x--q"]);
    assert_eq!(r.xml("Delimiter").as_deref(), Some("--"));
    // Dot, space and newline delimiters.
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=p&delimiter=.", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["p."]);
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=s&delimiter=%20", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["s "]);
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=nl&delimiter=%0A&encoding-type=url", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["nl%0A"]);
    // An empty delimiter means none and is not echoed.
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=baz&delimiter=", b"").await;
    assert_eq!(r.xml_all("Key"), ["baza/1", "bazb"]);
    assert_eq!(r.xml("Delimiter"), None);
}

/// Rule 6: encoding-type=url encodes Key, Prefix, Delimiter, StartAfter, CommonPrefixes (v1:
/// Marker, NextMarker), never tokens; echoed iff applied; `+` → %2B, space → %20, `/` raw.
/// Without it, text is XML-escaped, and keys XML 1.0 cannot carry force url encoding.
#[tokio::test]
async fn rule6_url_encoding() {
    let gw = setup(&["a b/c+d", "a b/e&f", "ctl\u{1}x"]).await;
    let r = gw
        .a(
            Method::GET,
            "/bkt?list-type=2&prefix=a%20b%2F&delimiter=%2B&start-after=a%20b%2F&encoding-type=url",
            b"",
        )
        .await;
    assert_eq!(r.xml("EncodingType").as_deref(), Some("url"));
    assert_eq!(r.xml_all("Prefix"), ["a%20b/", "a%20b/c%2B"]);
    assert_eq!(r.xml_all("Key"), ["a%20b/e%26f"]);
    assert_eq!(r.xml("Delimiter").as_deref(), Some("%2B"));
    assert_eq!(r.xml("StartAfter").as_deref(), Some("a%20b/"));
    // v1 Marker/NextMarker are encoded too.
    let r = gw.a(Method::GET, "/bkt?marker=a%20a&delimiter=%2F&max-keys=1&encoding-type=url", b"").await;
    assert_eq!(r.xml("Marker").as_deref(), Some("a%20a"));
    assert_eq!(r.xml("NextMarker").as_deref(), Some("a%20b/"));
    // Without encoding: XML escaping, no EncodingType...
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=a", b"").await;
    assert_eq!(r.xml("EncodingType"), None);
    assert!(r.text().contains("<Key>a b/e&amp;f</Key>"));
    // ...unless a key cannot be carried by XML 1.0: then encoding is applied and echoed.
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=ctl", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.xml("EncodingType").as_deref(), Some("url"));
    assert_eq!(r.xml_all("Key"), ["ctl%01x"]);
    // Unknown encodings are refused.
    gw.a(Method::GET, "/bkt?list-type=2&encoding-type=base64", b"")
        .await
        .assert_error(400, "InvalidArgument");
}

/// Rule 7: Prefix (and v1 Marker) always echoed, MaxKeys default 1000 and clamped, bad
/// values refused.
#[tokio::test]
async fn rule7_echoed_fields_and_max_keys() {
    let gw = setup(&["k"]).await;
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert!(r.text().contains("<Prefix></Prefix>"));
    assert_eq!(r.xml("MaxKeys").as_deref(), Some("1000"));
    let r = gw.a(Method::GET, "/bkt", b"").await;
    assert!(r.text().contains("<Marker></Marker>"));
    assert!(r.text().contains("<Prefix></Prefix>"));
    let r = gw.a(Method::GET, "/bkt?list-type=2&max-keys=5000", b"").await;
    assert_eq!(r.xml("MaxKeys").as_deref(), Some("1000"));
    for bad in ["-1", "abc", "1.5", "99999999999999999999999"] {
        gw.a(Method::GET, &format!("/bkt?list-type=2&max-keys={bad}"), b"")
            .await
            .assert_error(400, "InvalidArgument");
        gw.a(Method::GET, &format!("/bkt?max-keys={bad}"), b"").await.assert_error(400, "InvalidArgument");
    }
}

/// Rule 8: the keyspace is flat: `dir/` objects are ordinary, prefixes vanish with their last
/// key, and `//`, `.`, `..` are legal segments that never touch the file system.
#[tokio::test]
async fn rule8_flat_keyspace() {
    let gw = setup(&["dir/", "dir/x", "a//b", "./c", "../../etc/passwd"]).await;
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=dir%2F&delimiter=%2F", b"").await;
    assert_eq!(r.xml_all("Key"), ["dir/", "dir/x"]);
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=a%2F&delimiter=%2F", b"").await;
    assert_eq!(r.xml_all("Prefix")[1..], ["a//"]);
    assert_eq!(gw.a(Method::GET, "/bkt/..%2F..%2Fetc%2Fpasswd", b"").await.body, b"x");
    for k in ["dir/", "dir/x"] {
        gw.a(Method::DELETE, &format!("/bkt/{k}"), b"").await;
    }
    let r = gw.a(Method::GET, "/bkt?list-type=2&delimiter=%2F", b"").await;
    assert!(!r.xml_all("Prefix").contains(&"dir/".to_owned()));
}

/// Rule 9: ListObjectVersions of an unversioned bucket: VersionId null, IsLatest true.
#[tokio::test]
async fn rule9_list_object_versions() {
    let gw = setup(&["a", "b/c", "d"]).await;
    let r = gw.a(Method::GET, "/bkt?versions&delimiter=%2F", b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml_all("Key"), ["a", "d"]);
    assert_eq!(r.xml_all("VersionId"), ["null", "null"]);
    assert_eq!(r.xml_all("IsLatest"), ["true", "true"]);
    assert_eq!(r.xml_all("Prefix")[1..], ["b/"]);
    let r = gw.a(Method::GET, "/bkt?versions&max-keys=1", b"").await;
    assert_eq!(r.xml("NextKeyMarker").as_deref(), Some("a"));
    let r = gw.a(Method::GET, "/bkt?versions&key-marker=a", b"").await;
    assert_eq!(r.xml_all("Key"), ["b/c", "d"]);
}

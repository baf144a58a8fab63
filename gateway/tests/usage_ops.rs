//! The usage extension, `GET /bucket?usage&prefix=P&delimiter=D`: objects and bytes under a
//! prefix and under each common prefix below it, from the engine's counts, kept true by puts,
//! overwrites, copies, deletes and multipart uploads (counted apart while in progress); paged
//! like ListObjectsV2; owner-only; and `/metrics` exporting the same counts per bucket.

mod common;

use common::*;
use http::Method;

/// A common prefix with its objects and bytes.
type Rolled = (String, u64, u64);

/// (objects, bytes) of the document's top level, and of each common prefix.
fn figures(r: &Resp) -> ((u64, u64), Vec<Rolled>) {
    assert_eq!(r.status, 200, "{}", r.text());
    let doc = r.text();
    assert!(
        doc.starts_with("<?xml") && doc.trim_end().ends_with("</UsageResult>"),
        "not one document: {doc}"
    );
    let head = doc.split("<CommonPrefixes>").next().unwrap_or_default().to_owned();
    let num = |s: &str, tag: &str| xml_values(s, tag).first().map_or(0, |v| v.parse::<u64>().unwrap());
    // The top level's <Bytes> comes before <UploadsInProgress>, whose own <Bytes> follows.
    let top = head.split("<UploadsInProgress>").next().unwrap_or_default();
    let prefixes = doc
        .split("<CommonPrefixes>")
        .skip(1)
        .map(|cp| (xml_values(cp, "Prefix")[0].clone(), num(cp, "Objects"), num(cp, "Bytes")))
        .collect();
    ((num(top, "Objects"), num(top, "Bytes")), prefixes)
}

fn uploads(r: &Resp) -> (u64, u64) {
    let doc = r.text();
    let part = doc.split("<UploadsInProgress>").nth(1).unwrap_or_default().to_owned();
    let num = |tag: &str| xml_values(&part, tag).first().map_or(0, |v| v.parse::<u64>().unwrap());
    (num("Uploads"), num("Bytes"))
}

#[tokio::test]
async fn usage_counts_objects_and_bytes_under_any_prefix() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.create_bucket("other").await;
    for (key, len) in [("a/1", 10), ("a/2", 20), ("a/b/3", 30), ("c/4", 40), ("top", 5), ("a-x", 7)] {
        assert_eq!(gw.put("bkt", key, &vec![b'x'; len]).await.status, 200);
    }
    gw.put("other", "a/elsewhere", &[b'y'; 1000]).await;

    let r = gw.a(Method::GET, "/bkt?usage", b"").await;
    assert_eq!(figures(&r).0, (6, 112), "the whole bucket, and only it");
    let r = gw.a(Method::GET, "/bkt?usage&prefix=a%2F", b"").await;
    assert_eq!(figures(&r), ((3, 60), vec![]), "no delimiter: the total only");
    let r = gw.a(Method::GET, "/bkt?usage&prefix=a&delimiter=%2F", b"").await;
    assert_eq!(figures(&r), ((4, 67), vec![("a/".into(), 3, 60)]), "a prefix ending inside a name");
    let r = gw.a(Method::GET, "/bkt?usage&delimiter=%2F", b"").await;
    assert_eq!(figures(&r).1, vec![("a/".into(), 3, 60), ("c/".into(), 1, 40)]);
    let r = gw.a(Method::GET, "/bkt?usage&prefix=zzz", b"").await;
    assert_eq!(figures(&r).0, (0, 0));

    // Overwrites, copies and deletes move the counts.
    gw.put("bkt", "a/1", &[b'z'; 1_000]).await;
    let r = gw.req(USER_A, Method::PUT, "/bkt/a/b/copy", &[("x-amz-copy-source", "/bkt/c/4")], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::DELETE, "/bkt/a/2", b"").await.status, 204);
    let r = gw.a(Method::GET, "/bkt?usage&prefix=a%2F&delimiter=%2F", b"").await;
    assert_eq!(figures(&r), ((3, 1_070), vec![("a/b/".into(), 2, 70)]));
    let r = gw.a(Method::GET, "/bkt?usage", b"").await;
    assert_eq!(figures(&r).0, (6, 1_000 + 30 + 40 + 5 + 7 + 40));
}

#[tokio::test]
async fn uploads_in_progress_are_counted_apart() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "logs/done", &[b'd'; 100]).await;
    let r = gw.a(Method::POST, "/bkt/logs/big?uploads", b"").await;
    let upload_id = r.xml("UploadId").expect("an upload id");
    for (n, len) in [(1, 5 << 20), (2, 1234)] {
        let r = gw
            .a(Method::PUT, &format!("/bkt/logs/big?partNumber={n}&uploadId={upload_id}"), &vec![b'p'; len])
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = gw.a(Method::GET, "/bkt?usage&prefix=logs%2F", b"").await;
    assert_eq!(figures(&r).0, (1, 100), "an upload is no object yet");
    assert_eq!(uploads(&r), (1, (5 << 20) + 1234));
    let r = gw.a(Method::GET, "/bkt?usage&prefix=other%2F", b"").await;
    assert_eq!(uploads(&r), (0, 0));
    let r = gw.a(Method::DELETE, &format!("/bkt/logs/big?uploadId={upload_id}"), b"").await;
    assert_eq!(r.status, 204);
    let r = gw.a(Method::GET, "/bkt?usage&prefix=logs%2F", b"").await;
    assert_eq!(uploads(&r), (0, 0));
}

#[tokio::test]
async fn usage_pages_like_a_listing_and_refuses_what_a_listing_refuses() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for d in 0..5 {
        for f in 0..=d {
            gw.put("bkt", &format!("d{d}/f{f}"), &[b'x'; 3]).await;
        }
    }
    gw.put("bkt", "loose", b"1").await;
    // Two entries a page (a page counts the keys it passes, so it may show fewer prefixes).
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    for page in 0.. {
        assert!(page < 10, "paging does not end");
        let target = match &token {
            Some(t) => format!("/bkt?usage&delimiter=%2F&max-keys=2&continuation-token={t}"),
            None => "/bkt?usage&delimiter=%2F&max-keys=2".to_owned(),
        };
        let r = gw.a(Method::GET, &target, b"").await;
        let (total, prefixes) = figures(&r);
        assert_eq!(total, (16, 46), "every page carries the prefix's total");
        seen.extend(prefixes);
        if r.xml("IsTruncated").as_deref() != Some("true") {
            break;
        }
        token = Some(encode_key(&r.xml("NextContinuationToken").expect("a token on a truncated page")));
    }
    let want: Vec<Rolled> = (0..5).map(|d| (format!("d{d}/"), d + 1, 3 * (d + 1))).collect();
    assert_eq!(seen, want);

    // A token is bound to its request; max-keys as a listing parses it; owners only.
    let r = gw.a(Method::GET, "/bkt?usage&delimiter=%2F&max-keys=1", b"").await;
    let t = encode_key(&r.xml("NextContinuationToken").unwrap());
    let r = gw.a(Method::GET, &format!("/bkt?usage&delimiter=-&continuation-token={t}"), b"").await;
    r.assert_error(400, "InvalidArgument");
    gw.a(Method::GET, "/bkt?usage&max-keys=-1", b"").await.assert_error(400, "InvalidArgument");
    gw.req(USER_B, Method::GET, "/bkt?usage", &[], b"").await.assert_error(403, "AccessDenied");
    gw.send(anonymous(Method::GET, "/bkt?usage", b"")).await.assert_error(403, "AccessDenied");
    gw.a(Method::GET, "/missing?usage", b"").await.assert_error(404, "NoSuchBucket");
}

#[tokio::test]
async fn names_xml_cannot_carry_are_url_encoded() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    gw.put("bkt", "bell\u{7}/x", b"abc").await;
    let r = gw.a(Method::GET, "/bkt?usage&delimiter=%2F", b"").await;
    assert_eq!(r.xml("EncodingType").as_deref(), Some("url"));
    assert_eq!(figures(&r).1, vec![("bell%07/".into(), 1, 3)]);
}

#[tokio::test]
async fn metrics_export_objects_and_bytes_per_bucket() {
    let gw = Gw::new();
    gw.create_bucket("alpha").await;
    gw.create_bucket("beta").await;
    gw.put("alpha", "x", &[0; 100]).await;
    gw.put("alpha", "y/z", &[0; 23]).await;
    let r = gw.send(anonymous(Method::GET, "/metrics", b"")).await;
    assert_eq!(r.status, 200);
    let text = r.text();
    for line in [
        "holt_bucket_objects{bucket=\"alpha\"} 2",
        "holt_bucket_bytes{bucket=\"alpha\"} 123",
        "holt_bucket_objects{bucket=\"beta\"} 0",
        "holt_bucket_bytes{bucket=\"beta\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
    }
}

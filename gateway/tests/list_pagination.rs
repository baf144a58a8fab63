//! Invariant: paging through more than 1000 keys with v2 continuation tokens, v1 markers
//! (NextMarker with a delimiter, last key without), and ListObjectVersions key markers visits
//! every entry exactly once, in order, with no duplicates and no holes.

mod common;

use common::*;
use http::Method;

fn q(s: &str) -> String {
    encode_key(s).replace('/', "%2F")
}

async fn setup() -> (Gw, Vec<String>) {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let mut keys: Vec<String> = (0..1203).map(|i| format!("k/{i:05}")).collect();
    for d in 0..30 {
        keys.push(format!("dirs/{d:02}/x"));
        keys.push(format!("dirs/{d:02}/y"));
    }
    for k in &keys {
        gw.put("bkt", k, b"").await;
    }
    keys.sort();
    (gw, keys)
}

#[tokio::test]
async fn pagination_has_no_duplicates_or_holes() {
    let (gw, keys) = setup().await;

    // v2 without delimiter, default page size.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let target = match &token {
            Some(t) => format!("/bkt?list-type=2&continuation-token={}", q(t)),
            None => "/bkt?list-type=2".to_owned(),
        };
        let r = gw.a(Method::GET, &target, b"").await;
        assert_eq!(r.status, 200);
        let page = r.xml_all("Key");
        assert!(page.len() <= 1000);
        assert_eq!(r.xml("KeyCount").unwrap().parse::<usize>().unwrap(), page.len());
        seen.extend(page);
        pages += 1;
        match r.xml("NextContinuationToken") {
            Some(t) => {
                assert_eq!(r.xml("IsTruncated").as_deref(), Some("true"));
                assert_ne!(Some(&t), token.as_ref(), "same token twice");
                token = Some(t);
            }
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, keys);

    // v2 with a delimiter and small pages: the dirs/ prefix, then the k/ prefix.
    let mut entries = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut target = "/bkt?list-type=2&prefix=dirs%2F&delimiter=%2F&max-keys=7".to_owned();
        if let Some(t) = &token {
            target.push_str(&format!("&continuation-token={}", q(t)));
        }
        let r = gw.a(Method::GET, &target, b"").await;
        entries.extend(r.xml_all("Prefix").into_iter().skip(1));
        match r.xml("NextContinuationToken") {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    let expected: Vec<String> = (0..30).map(|d| format!("dirs/{d:02}/")).collect();
    assert_eq!(entries, expected);

    // v1 with markers: NextMarker without a delimiter is absent, so resume from the last key.
    let mut seen = Vec::new();
    let mut marker = String::new();
    loop {
        let r = gw.a(Method::GET, &format!("/bkt?max-keys=500&marker={}", q(&marker)), b"").await;
        let page = r.xml_all("Key");
        assert_eq!(r.xml("NextMarker"), None);
        seen.extend(page.iter().cloned());
        if r.xml("IsTruncated").as_deref() != Some("true") {
            break;
        }
        marker = page.last().unwrap().clone();
    }
    assert_eq!(seen, keys);

    // v1 with a delimiter: NextMarker drives the paging, prefixes count once.
    let mut names = Vec::new();
    let mut marker = String::new();
    loop {
        let r = gw.a(Method::GET, &format!("/bkt?delimiter=%2F&max-keys=1&marker={}", q(&marker)), b"").await;
        names.extend(r.xml_all("Prefix").into_iter().skip(1));
        names.extend(r.xml_all("Key"));
        match r.xml("NextMarker") {
            Some(m) => marker = m,
            None => break,
        }
    }
    assert_eq!(names, ["dirs/", "k/"]);

    // ListObjectVersions with key markers.
    let mut seen = Vec::new();
    let mut marker = String::new();
    loop {
        let r =
            gw.a(Method::GET, &format!("/bkt?versions&max-keys=600&key-marker={}", q(&marker)), b"").await;
        seen.extend(r.xml_all("Key"));
        match r.xml("NextKeyMarker") {
            Some(m) => marker = m,
            None => break,
        }
    }
    assert_eq!(seen, keys);
}

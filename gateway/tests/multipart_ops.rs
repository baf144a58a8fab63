//! Invariant: a multipart object is the concatenation of the listed parts, its ETag is
//! md5(concat(part md5s))-N, each part readable by partNumber; invalid part lists are refused
//! without creating the object; completion and abort leave no part records or part bodies.

mod common;

use common::*;
use http::Method;
use md5::{Digest, Md5};

const MIB: usize = 1 << 20;

async fn create(gw: &Gw, key: &str) -> String {
    let r = gw.a(Method::POST, &format!("/bkt/{key}?uploads"), b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("Key").as_deref(), Some(key));
    r.xml("UploadId").unwrap()
}

async fn upload(gw: &Gw, key: &str, id: &str, n: u32, body: &[u8]) -> String {
    let r = gw.a(Method::PUT, &format!("/bkt/{key}?partNumber={n}&uploadId={id}"), body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.header("etag").unwrap().to_owned()
}

#[tokio::test]
async fn upload_list_complete_and_read_parts() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let id = create(&gw, "obj").await;
    let p1 = vec![1u8; 5 * MIB];
    let p2 = vec![2u8; 5 * MIB];
    let p3 = b"tail".to_vec();
    let e1 = upload(&gw, "obj", &id, 1, &p1).await;
    let e3 = upload(&gw, "obj", &id, 3, &p3).await;
    let e2 = upload(&gw, "obj", &id, 2, &p2).await;

    let r = gw.a(Method::GET, &format!("/bkt/obj?uploadId={id}"), b"").await;
    assert_eq!(r.xml_all("PartNumber"), ["1", "2", "3"]);
    assert_eq!(r.xml_all("Size"), [(5 * MIB).to_string(), (5 * MIB).to_string(), "4".to_owned()]);
    let r = gw.a(Method::GET, &format!("/bkt/obj?uploadId={id}&max-parts=2"), b"").await;
    assert_eq!(r.xml_all("PartNumber"), ["1", "2"]);
    assert_eq!(r.xml("IsTruncated").as_deref(), Some("true"));
    assert_eq!(r.xml("NextPartNumberMarker").as_deref(), Some("2"));
    let r = gw.a(Method::GET, &format!("/bkt/obj?uploadId={id}&part-number-marker=2"), b"").await;
    assert_eq!(r.xml_all("PartNumber"), ["3"]);

    let r = gw.a(Method::GET, "/bkt?uploads", b"").await;
    assert_eq!(r.xml_all("UploadId"), std::slice::from_ref(&id));

    let r = gw
        .a(Method::POST, &format!("/bkt/obj?uploadId={id}"), &complete_body(&[(1, &e1), (2, &e2), (3, &e3)]))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut md5s = Vec::new();
    for p in [&p1, &p2, &p3] {
        md5s.extend_from_slice(&Md5::digest(p));
    }
    let expected = format!("\"{}-3\"", hex::encode(Md5::digest(&md5s)));
    assert_eq!(r.xml("ETag").map(|e| e.replace("&quot;", "\"")), Some(expected.clone()));

    let get = gw.a(Method::GET, "/bkt/obj", b"").await;
    assert_eq!(get.header("etag"), Some(expected.as_str()));
    assert_eq!(get.body.len(), 10 * MIB + 4);
    assert_eq!(&get.body[5 * MIB - 1..5 * MIB + 1], &[1, 2]);
    let part2 = gw.a(Method::GET, "/bkt/obj?partNumber=2", b"").await;
    assert_eq!(part2.status, 206);
    assert_eq!(part2.body, p2);
    assert_eq!(part2.header("x-amz-mp-parts-count"), Some("3"));
    assert_eq!(
        part2.header("content-range"),
        Some(format!("bytes {}-{}/{}", 5 * MIB, 10 * MIB - 1, 10 * MIB + 4).as_str())
    );
    let part3 = gw.a(Method::HEAD, "/bkt/obj?partNumber=3", b"").await;
    assert_eq!(part3.header("content-length"), Some("4"));
    gw.a(Method::GET, "/bkt/obj?partNumber=4", b"").await.assert_error(416, "InvalidPartNumber");

    // The upload is gone; only the object's body remains.
    gw.a(Method::GET, &format!("/bkt/obj?uploadId={id}"), b"").await.assert_error(404, "NoSuchUpload");
    assert!(gw.a(Method::GET, "/bkt?uploads", b"").await.xml_all("UploadId").is_empty());
    assert_eq!(gw.body_files(), 1);
}

#[tokio::test]
async fn invalid_part_lists_store_nothing() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let id = create(&gw, "obj").await;
    let e1 = upload(&gw, "obj", &id, 1, b"small one").await;
    let e2 = upload(&gw, "obj", &id, 2, b"small two").await;
    let url = format!("/bkt/obj?uploadId={id}");
    gw.a(Method::POST, &url, &complete_body(&[(1, &e1), (2, &e2)])).await.assert_error(400, "EntityTooSmall");
    gw.a(Method::POST, &url, &complete_body(&[(2, &e2), (1, &e1)]))
        .await
        .assert_error(400, "InvalidPartOrder");
    gw.a(Method::POST, &url, &complete_body(&[(1, "\"0000\"")])).await.assert_error(400, "InvalidPart");
    gw.a(Method::POST, &url, &complete_body(&[(7, &e1)])).await.assert_error(400, "InvalidPart");
    gw.a(Method::POST, &url, b"<CompleteMultipartUpload>").await.assert_error(400, "MalformedXML");
    gw.a(Method::GET, "/bkt/obj", b"").await.assert_error(404, "NoSuchKey");
    // A single small part is fine (the last part has no minimum).
    let r = gw.a(Method::POST, &url, &complete_body(&[(2, &e2)])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::GET, "/bkt/obj", b"").await.body, b"small two");
}

#[tokio::test]
async fn abort_and_bad_ids() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let id = create(&gw, "obj").await;
    upload(&gw, "obj", &id, 1, &vec![9u8; 10_000]).await;
    assert_eq!(gw.body_files(), 1);
    assert_eq!(gw.a(Method::DELETE, &format!("/bkt/obj?uploadId={id}"), b"").await.status, 204);
    assert_eq!(gw.body_files(), 0);
    gw.a(Method::PUT, &format!("/bkt/obj?partNumber=1&uploadId={id}"), b"x")
        .await
        .assert_error(404, "NoSuchUpload");
    gw.a(Method::DELETE, &format!("/bkt/obj?uploadId={id}"), b"").await.assert_error(404, "NoSuchUpload");
    gw.a(Method::PUT, "/bkt/obj?partNumber=1&uploadId=../../x", b"x").await.assert_error(404, "NoSuchUpload");
    let id = create(&gw, "obj").await;
    for bad in ["0", "10001", "-1", "x"] {
        gw.a(Method::PUT, &format!("/bkt/obj?partNumber={bad}&uploadId={id}"), b"x")
            .await
            .assert_error(400, "InvalidArgument");
    }
}

#[tokio::test]
async fn list_multipart_uploads_with_prefix_and_delimiter() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let a = create(&gw, "a/1").await;
    create(&gw, "a/2").await;
    let c = create(&gw, "c").await;
    let c2 = create(&gw, "c").await;
    let r = gw.a(Method::GET, "/bkt?uploads&delimiter=%2F", b"").await;
    assert_eq!(r.xml_all("Key"), ["c", "c"]);
    let mut ids = vec![c.clone(), c2.clone()];
    ids.sort();
    assert_eq!(r.xml_all("UploadId"), ids);
    assert_eq!(r.xml_all("Prefix")[1..], ["a/"]);
    let r = gw.a(Method::GET, "/bkt?uploads&prefix=a%2F", b"").await;
    assert_eq!(r.xml_all("Key"), ["a/1", "a/2"]);
    let r = gw.a(Method::GET, "/bkt?uploads&max-uploads=1", b"").await;
    assert_eq!(r.xml_all("UploadId"), std::slice::from_ref(&a));
    assert_eq!(r.xml("IsTruncated").as_deref(), Some("true"));
    assert_eq!(r.xml("NextKeyMarker").as_deref(), Some("a/1"));
    let r = gw.a(Method::GET, &format!("/bkt?uploads&key-marker=a%2F1&upload-id-marker={a}"), b"").await;
    assert_eq!(r.xml_all("Key"), ["a/2", "c", "c"]);
    let r = gw.a(Method::GET, "/bkt?uploads&key-marker=a%2F2", b"").await;
    assert_eq!(r.xml_all("Key"), ["c", "c"]);
}

/// Upload records are `key \0 upload-id`, so a prefix running past a key (`a\0` against key
/// `a`) matches that key's records byte for byte. They are not under the prefix: they are not
/// listed, and a delimiter does not cut a key shorter than the prefix (this once panicked).
/// More than a scan page of them are stepped over.
#[tokio::test]
async fn list_multipart_uploads_prefix_longer_than_a_key() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for _ in 0..1005 {
        create(&gw, "a").await;
    }
    let under = gw.a(Method::POST, "/bkt/a%00z?uploads", b"").await;
    assert_eq!(under.status, 200, "{}", under.text());
    for query in ["prefix=a%00", "prefix=a%00&delimiter=%2F", "prefix=a%00&delimiter=z"] {
        let r = gw.a(Method::GET, &format!("/bkt?uploads&{query}"), b"").await;
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        let listed = [r.xml_all("Key"), r.xml_all("Prefix")].concat();
        // Keys with a control character come back URL-encoded.
        assert!(listed.iter().all(|k| k.starts_with("a%00")), "{query}: {listed:?}");
        assert!(listed.iter().any(|k| k.starts_with("a%00z")), "{query}: {listed:?}");
    }
    let r = gw.a(Method::GET, "/bkt?uploads&prefix=a%00&delimiter=%2F", b"").await;
    assert_eq!(r.xml_all("Key"), ["a%00z"]);
}

#[tokio::test]
async fn upload_part_copy_with_range() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let src: Vec<u8> = (0..6 * MIB).map(|i| (i % 251) as u8).collect();
    gw.put("bkt", "src", &src).await;
    let id = create(&gw, "dst").await;
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            &format!("/bkt/dst?partNumber=1&uploadId={id}"),
            &[
                ("x-amz-copy-source", "/bkt/src"),
                ("x-amz-copy-source-range", &format!("bytes=0-{}", 5 * MIB - 1)),
            ],
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("<CopyPartResult"));
    let e1 = r.xml("ETag").unwrap().replace("&quot;", "\"");
    let r = gw
        .req(
            USER_A,
            Method::PUT,
            &format!("/bkt/dst?partNumber=2&uploadId={id}"),
            &[
                ("x-amz-copy-source", "bkt/src"),
                ("x-amz-copy-source-range", &format!("bytes={}-{}", 5 * MIB, 6 * MIB - 1)),
            ],
            b"",
        )
        .await;
    let e2 = r.xml("ETag").unwrap().replace("&quot;", "\"");
    gw.req(
        USER_A,
        Method::PUT,
        &format!("/bkt/dst?partNumber=3&uploadId={id}"),
        &[("x-amz-copy-source", "/bkt/src"), ("x-amz-copy-source-range", "bytes=0-99999999")],
        b"",
    )
    .await
    .assert_error(416, "InvalidRange");
    let r =
        gw.a(Method::POST, &format!("/bkt/dst?uploadId={id}"), &complete_body(&[(1, &e1), (2, &e2)])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::GET, "/bkt/dst", b"").await.body, src);
}

/// key-marker alone resumes after the marker key's uploads, not after every key it prefixes;
/// with upload-id-marker, the marker key's later uploads come first.
#[tokio::test]
async fn list_multipart_uploads_key_marker_is_exclusive_of_that_key_only() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let mut a_ids = [create(&gw, "a").await, create(&gw, "a").await];
    a_ids.sort();
    let ab = create(&gw, "ab").await;
    let a_space = create(&gw, "a-b").await;
    create(&gw, "b").await;
    let r = gw.a(Method::GET, "/bkt?uploads&key-marker=a", b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml_all("Key"), ["a-b", "ab", "b"]);
    assert_eq!(r.xml_all("UploadId")[..2], [a_space, ab]);
    let r = gw.a(Method::GET, &format!("/bkt?uploads&key-marker=a&upload-id-marker={}", a_ids[0]), b"").await;
    assert_eq!(r.xml_all("Key"), ["a", "a-b", "ab", "b"]);
    assert_eq!(r.xml_all("UploadId")[0], a_ids[1]);
    // Paging one upload at a time visits every upload once.
    let mut seen = Vec::new();
    let (mut key_marker, mut id_marker) = (String::new(), String::new());
    for _ in 0..10 {
        let r = gw
            .a(
                Method::GET,
                &format!(
                    "/bkt?uploads&max-uploads=1&key-marker={}&upload-id-marker={id_marker}",
                    encode_key(&key_marker)
                ),
                b"",
            )
            .await;
        seen.extend(r.xml_all("Key"));
        if r.xml("IsTruncated").as_deref() != Some("true") {
            break;
        }
        key_marker = r.xml("NextKeyMarker").unwrap();
        id_marker = r.xml("NextUploadIdMarker").unwrap();
    }
    assert_eq!(seen, ["a", "a", "a-b", "ab", "b"]);
}

/// A key-marker that rolls up under the delimiter resumes past the whole common prefix, which
/// is not listed again.
#[tokio::test]
async fn list_multipart_uploads_key_marker_inside_a_common_prefix() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    create(&gw, "p/1").await;
    create(&gw, "p/2").await;
    create(&gw, "p0").await;
    for marker in ["p%2F", "p%2F1"] {
        let r = gw.a(Method::GET, &format!("/bkt?uploads&delimiter=%2F&key-marker={marker}"), b"").await;
        assert_eq!(r.xml_all("Key"), ["p0"], "marker {marker}");
        assert!(!r.text().contains("<CommonPrefixes>"), "marker {marker}: {}", r.text());
    }
    let r = gw.a(Method::GET, "/bkt?uploads&key-marker=p%2F1", b"").await;
    assert_eq!(r.xml_all("Key"), ["p/2", "p0"]);
}

/// CompleteMultipartUpload's Location is the object's absolute URL, from the request's
/// scheme, Host and addressing style, with the key percent-encoded as a path.
#[tokio::test]
async fn complete_location_is_an_absolute_encoded_url() {
    let gw = Gw::with_settings(gateway::Settings { domain: Some("s3.test".into()), ..Default::default() });
    gw.create_bucket("bkt").await;
    let key = "dir/a b+c";
    let path = format!("/bkt/{}", encode_key(key));
    let r = gw.a(Method::POST, &format!("{path}?uploads"), b"").await;
    let id = r.xml("UploadId").unwrap();
    let e1 = upload(&gw, &encode_key(key), &id, 1, b"part").await;
    let r = gw.a(Method::POST, &format!("{path}?uploadId={id}"), &complete_body(&[(1, &e1)])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("Location").as_deref(), Some("http://localhost/bkt/dir/a%20b%2Bc"));
    assert_eq!(r.xml("Key").as_deref(), Some(key));

    // Virtual-hosted style: the bucket is in the host.
    let host = [("host", "bkt.s3.test:9000")];
    let vpath = format!("/{}", encode_key(key));
    let r = gw.req(USER_A, Method::POST, &format!("{vpath}?uploads"), &host, b"").await;
    let id = r.xml("UploadId").unwrap();
    let r = gw.req(USER_A, Method::PUT, &format!("{vpath}?partNumber=1&uploadId={id}"), &host, b"part").await;
    let e1 = r.header("etag").unwrap().to_owned();
    let r = gw
        .req(USER_A, Method::POST, &format!("{vpath}?uploadId={id}"), &host, &complete_body(&[(1, &e1)]))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("Location").as_deref(), Some("http://bkt.s3.test:9000/dir/a%20b%2Bc"));

    // Over TLS (the server marks such requests `Secure`): an https URL.
    let r = gw.a(Method::POST, &format!("{path}?uploads"), b"").await;
    let id = r.xml("UploadId").unwrap();
    let e1 = upload(&gw, &encode_key(key), &id, 1, b"part").await;
    let mut req =
        signed(USER_A, Method::POST, &format!("{path}?uploadId={id}"), &[], &complete_body(&[(1, &e1)]));
    req.extensions_mut().insert(gateway::server::Secure);
    let r = gw.send(req).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("Location").as_deref(), Some("https://localhost/bkt/dir/a%20b%2Bc"));
}

/// ListParts encodes the key as the listings do: when `encoding-type=url` asks for it, or when
/// XML 1.0 cannot carry the key, and it says so in `EncodingType` whenever it does, so a
/// client decodes exactly what was encoded (a key that merely looks encoded stays as it is).
#[tokio::test]
async fn list_parts_encodes_the_key_only_with_the_marker() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let cases = [
        ("ctl%01x", "", Some("ctl%01x")),
        ("a%2520b", "", None),
        ("a%2520b", "&encoding-type=url", Some("a%2520b")),
        ("a%20b", "&encoding-type=url", Some("a%20b")),
    ];
    for (path_key, query, encoded) in cases {
        let r = gw.a(Method::POST, &format!("/bkt/{path_key}?uploads"), b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let id = r.xml("UploadId").unwrap();
        let r = gw.a(Method::GET, &format!("/bkt/{path_key}?uploadId={id}{query}"), b"").await;
        assert_eq!(r.status, 200, "{path_key}{query}: {}", r.text());
        match encoded {
            Some(key) => {
                assert_eq!(r.xml("Key").as_deref(), Some(key), "{path_key}{query}");
                assert_eq!(r.xml("EncodingType").as_deref(), Some("url"), "{path_key}{query}");
            }
            None => {
                let key = percent_encoding::percent_decode_str(path_key).decode_utf8().unwrap();
                assert_eq!(r.xml("Key").as_deref(), Some(&*key), "{path_key}{query}");
                assert_eq!(r.xml("EncodingType"), None, "{path_key}{query}");
            }
        }
    }
    let id = create(&gw, "k").await;
    let r = gw.a(Method::GET, &format!("/bkt/k?uploadId={id}&encoding-type=base64"), b"").await;
    assert_eq!((r.status.as_u16(), r.xml("Code").as_deref()), (400, Some("InvalidArgument")), "{}", r.text());
}

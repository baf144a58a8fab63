//! Invariant: a multipart upload created with `x-amz-checksum-algorithm` verifies each part's
//! checksum on UploadPart (mismatch → BadDigest, part not stored), and its object carries the
//! checksum AWS defines: COMPOSITE (`base64(algo(concat of raw part checksums))-N`, the default
//! for CRC32, CRC32C, SHA1, SHA256) or FULL_OBJECT (the algorithm over the whole object; the
//! only type for CRC64NVME). The value and `x-amz-checksum-type` come back in the
//! CompleteMultipartUpload result and on HEAD/GET with `x-amz-checksum-mode: ENABLED`.
//! Checksums sent in the completion (per part in the XML, or for the whole object in a
//! header) are verified; a mismatch stores nothing and leaves the upload in place.

mod common;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::*;
use http::Method;
use sha1::Digest as _;

const MIB: usize = 1 << 20;

/// Raw digest of `data` computed with the reference crates (independently of the gateway's
/// `checksum` module).
#[expect(clippy::big_endian_bytes, reason = "AWS encodes CRCs big-endian")]
fn digest(algo: &str, data: &[u8]) -> Vec<u8> {
    match algo {
        "CRC32" => crc32fast::hash(data).to_be_bytes().to_vec(),
        "CRC32C" => crc32c::crc32c(data).to_be_bytes().to_vec(),
        "CRC64NVME" => {
            let mut d = crc64fast_nvme::Digest::new();
            d.write(data);
            d.sum64().to_be_bytes().to_vec()
        }
        "SHA1" => sha1::Sha1::digest(data).to_vec(),
        "SHA256" => sha2::Sha256::digest(data).to_vec(),
        other => panic!("unknown algorithm {other}"),
    }
}

fn header_name(algo: &str) -> String {
    format!("x-amz-checksum-{}", algo.to_ascii_lowercase())
}

async fn create(gw: &Gw, key: &str, headers: &[(&str, &str)]) -> Resp {
    gw.req(USER_A, Method::POST, &format!("/bkt/{key}?uploads"), headers, b"").await
}

async fn upload_part(gw: &Gw, key: &str, id: &str, n: u32, body: &[u8], headers: &[(&str, &str)]) -> Resp {
    gw.req(USER_A, Method::PUT, &format!("/bkt/{key}?partNumber={n}&uploadId={id}"), headers, body).await
}

/// `(part number, etag, [(Checksum element name, value)])`
type Listed<'a> = (u32, String, Vec<(String, String)>);

fn complete_body(parts: &[Listed<'_>]) -> Vec<u8> {
    let mut s = String::from("<CompleteMultipartUpload>");
    for (n, etag, sums) in parts {
        s.push_str(&format!("<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag>"));
        for (name, v) in sums {
            s.push_str(&format!("<{name}>{v}</{name}>"));
        }
        s.push_str("</Part>");
    }
    s.push_str("</CompleteMultipartUpload>");
    s.into_bytes()
}

fn two_parts() -> (Vec<u8>, Vec<u8>) {
    let p1: Vec<u8> = (0..5 * MIB).map(|i| (i % 251) as u8).collect();
    let p2 = b"the last part may be small".to_vec();
    (p1, p2)
}

#[tokio::test]
async fn every_algorithm_gets_its_aws_checksum() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let (p1, p2) = two_parts();
    let mut whole = p1.clone();
    whole.extend_from_slice(&p2);
    for algo in ["CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"] {
        let key = format!("obj-{algo}");
        let r = create(&gw, &key, &[("x-amz-checksum-algorithm", algo)]).await;
        assert_eq!(r.status, 200, "{algo}: {}", r.text());
        let full = algo == "CRC64NVME";
        let expected_type = if full { "FULL_OBJECT" } else { "COMPOSITE" };
        assert_eq!(r.header("x-amz-checksum-algorithm"), Some(algo));
        assert_eq!(r.header("x-amz-checksum-type"), Some(expected_type));
        let id = r.xml("UploadId").expect("upload id");

        let d1 = B64.encode(digest(algo, &p1));
        let d2 = B64.encode(digest(algo, &p2));
        let hn = header_name(algo);
        let r1 = upload_part(&gw, &key, &id, 1, &p1, &[(&hn, &d1)]).await;
        assert_eq!(r1.status, 200, "{algo}: {}", r1.text());
        assert_eq!(r1.header(&hn), Some(d1.as_str()));
        // A part sent without a value still gets the upload's checksum computed and returned.
        let r2 = upload_part(&gw, &key, &id, 2, &p2, &[]).await;
        assert_eq!(r2.status, 200, "{algo}: {}", r2.text());
        assert_eq!(r2.header(&hn), Some(d2.as_str()));
        let parts = gw.a(Method::GET, &format!("/bkt/{key}?uploadId={id}"), b"").await;
        assert_eq!(parts.xml_all(&format!("Checksum{algo}")), [d1.clone(), d2.clone()]);
        assert_eq!(parts.xml("ChecksumType").as_deref(), Some(expected_type));

        let elem = format!("Checksum{algo}");
        let listed = vec![
            (1, r1.header("etag").unwrap().to_owned(), vec![(elem.clone(), d1.clone())]),
            (2, r2.header("etag").unwrap().to_owned(), vec![(elem.clone(), d2.clone())]),
        ];
        let expected = if full {
            B64.encode(digest(algo, &whole))
        } else {
            let mut cat = digest(algo, &p1);
            cat.extend_from_slice(&digest(algo, &p2));
            format!("{}-2", B64.encode(digest(algo, &cat)))
        };
        let done = gw.a(Method::POST, &format!("/bkt/{key}?uploadId={id}"), &complete_body(&listed)).await;
        assert_eq!(done.status, 200, "{algo}: {}", done.text());
        assert_eq!(done.xml(&elem).as_deref(), Some(expected.as_str()), "{algo}: {}", done.text());
        assert_eq!(done.xml("ChecksumType").as_deref(), Some(expected_type));

        let head = gw
            .req(USER_A, Method::HEAD, &format!("/bkt/{key}"), &[("x-amz-checksum-mode", "ENABLED")], b"")
            .await;
        assert_eq!(head.header(&hn), Some(expected.as_str()), "{algo}");
        assert_eq!(head.header("x-amz-checksum-type"), Some(expected_type));
        let get = gw
            .req(USER_A, Method::GET, &format!("/bkt/{key}"), &[("x-amz-checksum-mode", "ENABLED")], b"")
            .await;
        assert_eq!(get.header(&hn), Some(expected.as_str()));
        assert_eq!(get.body, whole);
        let plain = gw.a(Method::HEAD, &format!("/bkt/{key}"), b"").await;
        assert_eq!(plain.header(&hn), None, "checksums only with x-amz-checksum-mode");
        // A slice of the object does not carry the whole object's checksum.
        let enabled = [("x-amz-checksum-mode", "ENABLED"), ("range", "bytes=0-99")];
        let ranged = gw.req(USER_A, Method::GET, &format!("/bkt/{key}"), &enabled, b"").await;
        assert_eq!(ranged.status, 206);
        assert_eq!(ranged.header(&hn), None, "{algo}: checksum on a range");
        let part = gw
            .req(
                USER_A,
                Method::GET,
                &format!("/bkt/{key}?partNumber=2"),
                &[("x-amz-checksum-mode", "ENABLED")],
                b"",
            )
            .await;
        assert_eq!(part.body, p2);
        assert_eq!(part.header(&hn), None, "{algo}: object checksum on a part");
        assert_eq!(part.header("x-amz-checksum-type"), None);
    }
}

#[tokio::test]
async fn full_object_crc32c_is_verified_against_the_client_value() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let (p1, p2) = two_parts();
    let mut whole = p1.clone();
    whole.extend_from_slice(&p2);
    let r =
        create(&gw, "f", &[("x-amz-checksum-algorithm", "CRC32C"), ("x-amz-checksum-type", "FULL_OBJECT")])
            .await;
    assert_eq!(r.header("x-amz-checksum-type"), Some("FULL_OBJECT"));
    let id = r.xml("UploadId").unwrap();
    let e1 = upload_part(&gw, "f", &id, 1, &p1, &[]).await.header("etag").unwrap().to_owned();
    let e2 = upload_part(&gw, "f", &id, 2, &p2, &[]).await.header("etag").unwrap().to_owned();
    let body = complete_body(&[(1, e1, vec![]), (2, e2, vec![])]);
    let url = format!("/bkt/f?uploadId={id}");
    let full = B64.encode(digest("CRC32C", &whole));

    // A wrong whole-object value: BadDigest, nothing stored, the upload still completes later.
    let wrong = B64.encode(digest("CRC32C", b"something else"));
    gw.req(USER_A, Method::POST, &url, &[("x-amz-checksum-crc32c", &wrong)], &body)
        .await
        .assert_error(400, "BadDigest");
    assert_eq!(gw.a(Method::HEAD, "/bkt/f", b"").await.status, 404);
    assert_eq!(gw.tmp_files(), 0);

    let r = gw.req(USER_A, Method::POST, &url, &[("x-amz-checksum-crc32c", &full)], &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("ChecksumCRC32C").as_deref(), Some(full.as_str()));
    let head = gw.req(USER_A, Method::HEAD, "/bkt/f", &[("x-amz-checksum-mode", "ENABLED")], b"").await;
    assert_eq!(head.header("x-amz-checksum-crc32c"), Some(full.as_str()));
    assert_eq!(head.header("x-amz-checksum-type"), Some("FULL_OBJECT"));
    assert_eq!(gw.body_files(), 1, "only the object's body; the part bodies are reclaimed");
}

#[tokio::test]
async fn bad_checksums_and_combinations_are_refused() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for (algo, t) in [("SHA256", "FULL_OBJECT"), ("SHA1", "FULL_OBJECT"), ("CRC64NVME", "COMPOSITE")] {
        create(&gw, "x", &[("x-amz-checksum-algorithm", algo), ("x-amz-checksum-type", t)])
            .await
            .assert_error(400, "InvalidRequest");
    }
    create(&gw, "x", &[("x-amz-checksum-type", "COMPOSITE")]).await.assert_error(400, "InvalidRequest");
    create(&gw, "x", &[("x-amz-checksum-algorithm", "MD4")]).await.assert_error(400, "InvalidArgument");
    assert!(gw.a(Method::GET, "/bkt?uploads", b"").await.xml_all("UploadId").is_empty());

    let id = create(&gw, "k", &[("x-amz-checksum-algorithm", "SHA256")]).await.xml("UploadId").unwrap();
    let data = b"part data";
    // Wrong value for the upload's algorithm: BadDigest, and the part is not stored.
    let wrong = B64.encode(digest("SHA256", b"other"));
    upload_part(&gw, "k", &id, 1, data, &[("x-amz-checksum-sha256", &wrong)])
        .await
        .assert_error(400, "BadDigest");
    // A different algorithm than the upload's.
    let crc = B64.encode(digest("CRC32", data));
    upload_part(&gw, "k", &id, 1, data, &[("x-amz-checksum-crc32", &crc)])
        .await
        .assert_error(400, "InvalidRequest");
    let parts = gw.a(Method::GET, &format!("/bkt/k?uploadId={id}"), b"").await;
    assert!(parts.xml_all("PartNumber").is_empty(), "{}", parts.text());
    assert_eq!(gw.tmp_files(), 0);

    let good = B64.encode(digest("SHA256", data));
    let r = upload_part(&gw, "k", &id, 1, data, &[("x-amz-checksum-sha256", &good)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let etag = r.header("etag").unwrap().to_owned();
    // The completion names a part checksum that is not the stored one: InvalidPart.
    let body = complete_body(&[(1, etag.clone(), vec![("ChecksumSHA256".into(), wrong.clone())])]);
    gw.a(Method::POST, &format!("/bkt/k?uploadId={id}"), &body).await.assert_error(400, "InvalidPart");
    assert_eq!(gw.a(Method::HEAD, "/bkt/k", b"").await.status, 404);
    // With the right one it completes, as a composite of one part.
    let body = complete_body(&[(1, etag, vec![("ChecksumSHA256".into(), good.clone())])]);
    let r = gw.a(Method::POST, &format!("/bkt/k?uploadId={id}"), &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let expected = format!("{}-1", B64.encode(digest("SHA256", &digest("SHA256", data))));
    assert_eq!(r.xml("ChecksumSHA256").as_deref(), Some(expected.as_str()));
}

#[tokio::test]
async fn uploads_without_an_algorithm_have_no_object_checksum() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let r = create(&gw, "p", &[]).await;
    assert_eq!(r.header("x-amz-checksum-type"), None);
    let id = r.xml("UploadId").unwrap();
    let data = b"plain";
    let crc = B64.encode(digest("CRC32", data));
    // Any algorithm is verified on the part, but the object gets no composite of it.
    let r = upload_part(&gw, "p", &id, 1, data, &[("x-amz-checksum-crc32", &crc)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let done = gw
        .a(
            Method::POST,
            &format!("/bkt/p?uploadId={id}"),
            &complete_body(&[(1, r.header("etag").unwrap().to_owned(), vec![])]),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.xml("ChecksumType"), None);
    let head = gw.req(USER_A, Method::HEAD, "/bkt/p", &[("x-amz-checksum-mode", "ENABLED")], b"").await;
    assert_eq!(head.header("x-amz-checksum-crc32"), None);
    assert_eq!(head.header("x-amz-checksum-type"), None);
}

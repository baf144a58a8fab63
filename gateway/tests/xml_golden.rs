//! Golden documents: the exact XML of every listing response (ListObjectsV2, ListObjects,
//! ListObjectVersions, ListParts, ListMultipartUploads) and of the multipart, copy, delete and
//! error documents as served over HTTP. Times, tokens and upload ids vary per run and are
//! replaced by placeholders before comparing.

mod common;

use common::*;
use http::Method;

const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
const NS: &str = " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";
const ETAG_X: &str = "&quot;9dd4e461268c8034f5c8564e155c67a6&quot;";

/// Replaces the text of each named element with `*`.
fn normalize(doc: &str, tags: &[&str]) -> String {
    let mut out = doc.to_owned();
    for tag in tags {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let mut result = String::new();
        let mut rest = out.as_str();
        while let Some(i) = rest.find(&open) {
            result.push_str(&rest[..i + open.len()]);
            let after = &rest[i + open.len()..];
            let j = after.find(&close).expect("closed");
            result.push('*');
            rest = &after[j..];
        }
        result.push_str(rest);
        out = result;
    }
    out
}

async fn setup() -> Gw {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for k in ["a b", "d/1", "d/2", "z"] {
        gw.put("bkt", k, b"x").await;
    }
    gw
}

fn contents(key: &str, owner: bool) -> String {
    let owner = if owner {
        format!("<Owner><ID>{0}</ID><DisplayName>{0}</DisplayName></Owner>", USER_A.0)
    } else {
        String::new()
    };
    format!(
        "<Contents><Key>{key}</Key><LastModified>*</LastModified><ETag>{ETAG_X}</ETag><Size>1</Size>{owner}<StorageClass>STANDARD</StorageClass></Contents>"
    )
}

#[tokio::test]
async fn golden_list_objects_v2() {
    let gw = setup().await;
    let r = gw.a(Method::GET, "/bkt?list-type=2&delimiter=%2F&max-keys=2&encoding-type=url", b"").await;
    let doc = normalize(&r.text(), &["LastModified", "NextContinuationToken"]);
    let expected = format!(
        "{HEAD}<ListBucketResult{NS}><Name>bkt</Name><Prefix></Prefix><Delimiter>/</Delimiter><MaxKeys>2</MaxKeys>\
         <EncodingType>url</EncodingType><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>\
         <NextContinuationToken>*</NextContinuationToken>{}<CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes>\
         </ListBucketResult>",
        contents("a%20b", false)
    );
    assert_eq!(doc, expected);
    let r = gw.a(Method::GET, "/bkt?list-type=2&prefix=d%2F&start-after=d%2F1&fetch-owner=true", b"").await;
    let doc = normalize(&r.text(), &["LastModified"]);
    let expected = format!(
        "{HEAD}<ListBucketResult{NS}><Name>bkt</Name><Prefix>d/</Prefix><MaxKeys>1000</MaxKeys><KeyCount>1</KeyCount>\
         <IsTruncated>false</IsTruncated><StartAfter>d/1</StartAfter>{}</ListBucketResult>",
        contents("d/2", true)
    );
    assert_eq!(doc, expected);
}

#[tokio::test]
async fn golden_listing_of_names_that_need_escaping() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    for k in ["caf\u{e9}", "p<1>", "q&a/x", "say \"hi\"/y", "tab\t'k"] {
        gw.put("bkt", k, b"x").await;
    }
    let r = gw.a(Method::GET, "/bkt?list-type=2&delimiter=%2F", b"").await;
    let doc = normalize(&r.text(), &["LastModified"]);
    let expected = format!(
        "{HEAD}<ListBucketResult{NS}><Name>bkt</Name><Prefix></Prefix><Delimiter>/</Delimiter><MaxKeys>1000</MaxKeys>\
         <KeyCount>5</KeyCount><IsTruncated>false</IsTruncated>{}{}{}\
         <CommonPrefixes><Prefix>q&amp;a/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>say &quot;hi&quot;/</Prefix></CommonPrefixes>\
         </ListBucketResult>",
        contents("caf\u{e9}", false),
        contents("p&lt;1&gt;", false),
        contents("tab\t&apos;k", false),
    );
    assert_eq!(doc, expected);
}

#[tokio::test]
async fn golden_list_objects_v1() {
    let gw = setup().await;
    let r = gw.a(Method::GET, "/bkt?delimiter=%2F&max-keys=2&marker=a", b"").await;
    let doc = normalize(&r.text(), &["LastModified"]);
    let expected = format!(
        "{HEAD}<ListBucketResult{NS}><Name>bkt</Name><Prefix></Prefix><Marker>a</Marker><NextMarker>d/</NextMarker>\
         <MaxKeys>2</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>{}\
         <CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes></ListBucketResult>",
        contents("a b", true)
    );
    assert_eq!(doc, expected);
}

#[tokio::test]
async fn golden_list_object_versions() {
    let gw = setup().await;
    let r = gw.a(Method::GET, "/bkt?versions&prefix=z", b"").await;
    let doc = normalize(&r.text(), &["LastModified"]);
    let expected = format!(
        "{HEAD}<ListVersionsResult{NS}><Name>bkt</Name><Prefix>z</Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker>\
         <MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Version><Key>z</Key><VersionId>null</VersionId>\
         <IsLatest>true</IsLatest><LastModified>*</LastModified><ETag>{ETAG_X}</ETag><Size>1</Size>\
         <Owner><ID>{0}</ID><DisplayName>{0}</DisplayName></Owner><StorageClass>STANDARD</StorageClass></Version>\
         </ListVersionsResult>",
        USER_A.0
    );
    assert_eq!(doc, expected);
}

#[tokio::test]
async fn golden_multipart_documents() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let r = gw.a(Method::POST, "/bkt/m%26k?uploads", b"").await;
    let id = r.xml("UploadId").unwrap();
    assert_eq!(
        r.text(),
        format!("{HEAD}<InitiateMultipartUploadResult{NS}><Bucket>bkt</Bucket><Key>m&amp;k</Key><UploadId>{id}</UploadId></InitiateMultipartUploadResult>")
    );
    gw.a(Method::PUT, &format!("/bkt/m%26k?partNumber=1&uploadId={id}"), b"x").await;
    let own = format!("<ID>{0}</ID><DisplayName>{0}</DisplayName>", USER_A.0);

    let r = gw.a(Method::GET, &format!("/bkt/m%26k?uploadId={id}"), b"").await;
    let doc = normalize(&r.text(), &["LastModified"]);
    assert_eq!(
        doc,
        format!(
            "{HEAD}<ListPartsResult{NS}><Bucket>bkt</Bucket><Key>m&amp;k</Key><UploadId>{id}</UploadId>\
             <PartNumberMarker>0</PartNumberMarker><NextPartNumberMarker>1</NextPartNumberMarker><MaxParts>1000</MaxParts>\
             <IsTruncated>false</IsTruncated><Part><PartNumber>1</PartNumber><LastModified>*</LastModified>\
             <ETag>{ETAG_X}</ETag><Size>1</Size></Part><Initiator>{own}</Initiator><Owner>{own}</Owner>\
             <StorageClass>STANDARD</StorageClass></ListPartsResult>"
        )
    );

    let r = gw.a(Method::GET, "/bkt?uploads", b"").await;
    let doc = normalize(&r.text(), &["Initiated"]);
    assert_eq!(
        doc,
        format!(
            "{HEAD}<ListMultipartUploadsResult{NS}><Bucket>bkt</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>\
             <Prefix></Prefix><MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated><Upload><Key>m&amp;k</Key>\
             <UploadId>{id}</UploadId><Initiator>{own}</Initiator><Owner>{own}</Owner><StorageClass>STANDARD</StorageClass>\
             <Initiated>*</Initiated></Upload></ListMultipartUploadsResult>"
        )
    );

    let body = format!("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{ETAG_X}</ETag></Part></CompleteMultipartUpload>");
    let r = gw.a(Method::POST, &format!("/bkt/m%26k?uploadId={id}"), body.as_bytes()).await;
    // md5 of the single part's binary md5, "-1".
    let etag = format!(
        "&quot;{}-1&quot;",
        hex::encode(<md5::Md5 as md5::Digest>::digest(
            hex::decode("9dd4e461268c8034f5c8564e155c67a6").unwrap()
        ))
    );
    assert_eq!(
        r.text(),
        format!("{HEAD}<CompleteMultipartUploadResult{NS}><Location>http://localhost/bkt/m%26k</Location><Bucket>bkt</Bucket><Key>m&amp;k</Key><ETag>{etag}</ETag></CompleteMultipartUploadResult>")
    );
}

#[tokio::test]
async fn golden_copy_delete_and_error_documents() {
    let gw = setup().await;
    let r = gw.req(USER_A, Method::PUT, "/bkt/copy", &[("x-amz-copy-source", "/bkt/z")], b"").await;
    assert_eq!(
        normalize(&r.text(), &["LastModified"]),
        format!("{HEAD}<CopyObjectResult{NS}><LastModified>*</LastModified><ETag>{ETAG_X}</ETag></CopyObjectResult>")
    );
    let r = gw.a(Method::POST, "/bkt?delete", b"<Delete><Object><Key>z</Key></Object></Delete>").await;
    assert_eq!(r.text(), format!("{HEAD}<DeleteResult{NS}><Deleted><Key>z</Key></Deleted></DeleteResult>"));
    let r = gw.a(Method::GET, "/bkt/nope", b"").await;
    let rid = r.header("x-amz-request-id").unwrap().to_owned();
    assert_eq!(
        r.text(),
        format!(
            "{HEAD}<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>\
             <Resource>/bkt/nope</Resource><RequestId>{rid}</RequestId></Error>"
        )
    );
}

#[tokio::test]
async fn virtual_hosted_style() {
    let gw = Gw::with_settings(gateway::Settings { domain: Some("s3.test".into()), ..Default::default() });
    gw.create_bucket("vbkt").await;
    let r = gw.req(USER_A, Method::PUT, "/obj", &[("host", "vbkt.s3.test")], b"vh").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::GET, "/vbkt/obj", b"").await.body, b"vh");
}

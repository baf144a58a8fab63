//! Response documents other than the object listings (those are written in
//! `handlers/list.rs` and `handlers/uploads.rs`, beside the logic that decides their fields).
//! Each function returns the bytes of one S3 document.

use super::XmlWriter;
use crate::checksum::{ChecksumAlgo, ChecksumType, ALL_ALGOS};

/// One bucket of ListAllMyBucketsResult.
pub struct BucketEntry<'a> {
    /// The bucket name.
    pub name: &'a str,
    /// Creation time, ISO 8601 (`2009-10-12T17:50:30.000Z`).
    pub creation_date: String,
    /// `BucketRegion`: the configured region.
    pub region: &'a str,
}

/// ListAllMyBucketsResult: the owner, the buckets in the given order, and the token for the
/// next page if there is one.
pub fn list_all_my_buckets(
    owner: &str,
    buckets: &[BucketEntry<'_>],
    continuation_token: Option<&str>,
) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("ListAllMyBucketsResult");
    owner_elem(&mut w, owner);
    w.open("Buckets");
    for b in buckets {
        w.open("Bucket");
        w.elem("Name", b.name);
        w.elem("CreationDate", &b.creation_date);
        w.elem("BucketRegion", b.region);
        w.close("Bucket");
    }
    w.close("Buckets");
    w.elem_opt("ContinuationToken", continuation_token);
    w.close("ListAllMyBucketsResult");
    w.finish()
}

/// `<Owner><ID/><DisplayName/></Owner>`: our owners are access keys.
pub fn owner_elem(w: &mut XmlWriter, owner: &str) {
    w.open("Owner");
    w.elem("ID", owner);
    w.elem("DisplayName", owner);
    w.close("Owner");
}

/// GetBucketLocation: empty for us-east-1.
pub fn location_constraint(location: Option<&str>) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("LocationConstraint");
    if let Some(l) = location.filter(|l| *l != "us-east-1") {
        w.text(l);
    }
    w.close("LocationConstraint");
    w.finish()
}

/// GetBucketVersioning of a bucket that never had versioning: an empty configuration.
pub fn versioning_configuration() -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("VersioningConfiguration");
    w.close("VersioningConfiguration");
    w.finish()
}

/// InitiateMultipartUploadResult: the new upload's bucket, key and id.
pub fn initiate_multipart_upload(bucket: &str, key: &str, upload_id: &str) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("InitiateMultipartUploadResult");
    w.elem("Bucket", bucket);
    w.elem("Key", key);
    w.elem("UploadId", upload_id);
    w.close("InitiateMultipartUploadResult");
    w.finish()
}

/// CompleteMultipartUploadResult. `checksums` are the object's checksums in their display
/// form (`value-N` when composite), written in AWS's element order with their `ChecksumType`.
pub fn complete_multipart_upload(
    location: &str,
    bucket: &str,
    key: &str,
    etag: &str,
    checksums: &[(ChecksumAlgo, String)],
    checksum_type: ChecksumType,
) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("CompleteMultipartUploadResult");
    w.elem("Location", location);
    w.elem("Bucket", bucket);
    w.elem("Key", key);
    w.elem("ETag", etag);
    for algo in ALL_ALGOS {
        for (_, v) in checksums.iter().filter(|(a, _)| *a == algo) {
            w.elem(&format!("Checksum{}", algo.name()), v);
        }
    }
    if !checksums.is_empty() {
        w.elem("ChecksumType", checksum_type.name());
    }
    w.close("CompleteMultipartUploadResult");
    w.finish()
}

/// CopyObjectResult (`root` = "CopyObjectResult") or CopyPartResult.
pub fn copy_result(root: &str, etag: &str, last_modified: &str) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root(root);
    w.elem("LastModified", last_modified);
    w.elem("ETag", etag);
    w.close(root);
    w.finish()
}

/// One failed key of a DeleteObjects request.
pub struct DeleteError<'a> {
    /// The key that could not be deleted.
    pub key: &'a str,
    /// The S3 error code (`AccessDenied`, `InternalError`, ...).
    pub code: &'a str,
    /// The error message for that key.
    pub message: &'a str,
}

/// DeleteResult: a `Deleted` element per deleted key (pass none in quiet mode), then an
/// `Error` element per failed key.
pub fn delete_result(deleted: &[&str], errors: &[DeleteError<'_>]) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("DeleteResult");
    for k in deleted {
        w.open("Deleted");
        w.elem("Key", k);
        w.close("Deleted");
    }
    for e in errors {
        w.open("Error");
        w.elem("Key", e.key);
        w.elem("Code", e.code);
        w.elem("Message", e.message);
        w.close("Error");
    }
    w.close("DeleteResult");
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    const NS: &str = " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

    fn s(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn golden_list_all_my_buckets() {
        let b = [BucketEntry {
            name: "a",
            creation_date: "2024-01-01T00:00:00.000Z".into(),
            region: "us-east-1",
        }];
        assert_eq!(
            s(list_all_my_buckets("AK", &b, Some("tok"))),
            format!(
                "{HEAD}<ListAllMyBucketsResult{NS}><Owner><ID>AK</ID><DisplayName>AK</DisplayName></Owner>\
                 <Buckets><Bucket><Name>a</Name><CreationDate>2024-01-01T00:00:00.000Z</CreationDate>\
                 <BucketRegion>us-east-1</BucketRegion></Bucket></Buckets><ContinuationToken>tok</ContinuationToken>\
                 </ListAllMyBucketsResult>"
            )
        );
    }

    #[test]
    fn golden_location_and_versioning() {
        assert_eq!(
            s(location_constraint(None)),
            format!("{HEAD}<LocationConstraint{NS}></LocationConstraint>")
        );
        assert_eq!(
            s(location_constraint(Some("us-east-1"))),
            format!("{HEAD}<LocationConstraint{NS}></LocationConstraint>")
        );
        assert_eq!(
            s(location_constraint(Some("eu-west-1"))),
            format!("{HEAD}<LocationConstraint{NS}>eu-west-1</LocationConstraint>")
        );
        assert_eq!(
            s(versioning_configuration()),
            format!("{HEAD}<VersioningConfiguration{NS}></VersioningConfiguration>")
        );
    }

    #[test]
    fn golden_multipart_and_copy() {
        assert_eq!(
            s(initiate_multipart_upload("b", "k&", "U1")),
            format!("{HEAD}<InitiateMultipartUploadResult{NS}><Bucket>b</Bucket><Key>k&amp;</Key><UploadId>U1</UploadId></InitiateMultipartUploadResult>")
        );
        assert_eq!(
            s(complete_multipart_upload("/b/k", "b", "k", "\"e-2\"", &[], ChecksumType::FullObject)),
            format!("{HEAD}<CompleteMultipartUploadResult{NS}><Location>/b/k</Location><Bucket>b</Bucket><Key>k</Key><ETag>&quot;e-2&quot;</ETag></CompleteMultipartUploadResult>")
        );
        assert_eq!(
            s(complete_multipart_upload(
                "/b/k",
                "b",
                "k",
                "\"e-2\"",
                &[(ChecksumAlgo::Sha256, "c2hh-2".into()), (ChecksumAlgo::Crc32, "Y3Jj-2".into())],
                ChecksumType::Composite
            )),
            format!("{HEAD}<CompleteMultipartUploadResult{NS}><Location>/b/k</Location><Bucket>b</Bucket><Key>k</Key><ETag>&quot;e-2&quot;</ETag><ChecksumCRC32>Y3Jj-2</ChecksumCRC32><ChecksumSHA256>c2hh-2</ChecksumSHA256><ChecksumType>COMPOSITE</ChecksumType></CompleteMultipartUploadResult>")
        );
        assert_eq!(
            s(copy_result("CopyObjectResult", "\"e\"", "2024-01-01T00:00:00.000Z")),
            format!("{HEAD}<CopyObjectResult{NS}><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag></CopyObjectResult>")
        );
        assert_eq!(
            s(copy_result("CopyPartResult", "\"e\"", "2024-01-01T00:00:00.000Z")),
            format!("{HEAD}<CopyPartResult{NS}><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag></CopyPartResult>")
        );
    }

    #[test]
    fn golden_delete_result() {
        let errs = [DeleteError { key: "x", code: "AccessDenied", message: "Access Denied" }];
        assert_eq!(
            s(delete_result(&["a", "b"], &errs)),
            format!("{HEAD}<DeleteResult{NS}><Deleted><Key>a</Key></Deleted><Deleted><Key>b</Key></Deleted><Error><Key>x</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error></DeleteResult>")
        );
    }
}

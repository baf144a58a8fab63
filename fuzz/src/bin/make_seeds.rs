//! Writes the seed corpus: valid, signed requests and bodies for each target, so the fuzzers
//! start from inputs that get past the first checks. Run from `fuzz/`:
//! `cargo run --bin make-seeds`; the files land in `corpus/<target>/seed-*`.

use std::path::Path;
use std::time::Duration;

use gateway::checksum::{ChecksumAlgo, ChecksumType};
use gateway::storage::meta::{
    BodyRef, BucketMeta, CorsRule, ObjectHeaders, ObjectMeta, PartMeta, UploadMeta, UpstreamBody,
};
use holt_fuzz::auth_support::{
    chunked_put, encode_unsigned, seed_signature, Body, ChunkSigner, Req, Signer, REGION, SK, T0_STAMP,
};
use holt_fuzz::head_to_text;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed written");
}

fn main() {
    let signer = Signer::default();
    let heads = [
        (
            "list",
            signer.sign(&Req::new("GET", "/bucket?list-type=2&delimiter=%2F&prefix=a%2Fb"), Body::Unsigned),
        ),
        (
            "put",
            signer.sign(
                &Req::new("PUT", "/bucket/some/key.txt").header("content-type", "text/plain"),
                Body::Bytes(b"hello"),
            ),
        ),
        (
            "presigned",
            signer.presign(&Req::new("GET", "/bucket/key%20with%20spaces"), Duration::from_secs(3600)),
        ),
        (
            "chunked",
            chunked_put("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", 11, Some("x-amz-checksum-crc32")),
        ),
        (
            "copy",
            signer.sign(
                &Req::new("PUT", "/bucket/dst").header("x-amz-copy-source", "/bucket/src%3F?versionId=null"),
                Body::Unsigned,
            ),
        ),
        (
            "vhost",
            signer.sign(
                &Req::new("GET", "/?uploads&prefix=p").set("host", "bucket.s3.example.com"),
                Body::Unsigned,
            ),
        ),
    ];
    for (name, req) in &heads {
        write("request_head", name, &head_to_text(req));
    }

    let crc = "x-amz-checksum-crc32";
    let data = b"hello world";
    for (form, content) in [
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    ]
    .iter()
    .enumerate()
    {
        let trailer = (form > 0).then_some(crc);
        let trailers = [(crc, "DUoRhQ==")];
        let body = match form {
            2 => encode_unsigned(&[&data[..6], &data[6..]], &trailers),
            _ => {
                let seed = seed_signature(&chunked_put(content, data.len(), trailer));
                ChunkSigner::new(SK, T0_STAMP, REGION).encode(
                    &seed,
                    &[&data[..6], &data[6..]],
                    trailer.map(|_| &trailers[..]),
                )
            }
        };
        // Raw mode: form, declared length, no split bytes (one piece per byte... of 1), body.
        let mut raw = vec![(form as u8) << 1, data.len() as u8, 0, 3, 7, 60, 0];
        raw.extend_from_slice(&body);
        write("aws_chunked", &format!("raw-{form}"), &raw);
        // Mutated mode: two chunks of 3 and 6 bytes, no mutation, splits.
        let mut mutated = vec![(form as u8) << 1 | 1, 1, 1];
        mutated.extend_from_slice(b"abc");
        mutated.push(2);
        mutated.extend_from_slice(b"defghi");
        mutated.extend_from_slice(&[0, 0, 2, 5, 9]);
        write("aws_chunked", &format!("mutated-{form}"), &mutated);
    }

    let docs: [(&str, &[u8]); 8] = [
        ("delete", br#"<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet><Object><Key>a&amp;b</Key></Object><Object><Key>c/d</Key><VersionId>null</VersionId></Object></Delete>"#),
        ("complete", br#"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"9b2cf535f27731c974343645a3985328"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part><Part><PartNumber>2</PartNumber><ETag>"x"</ETag></Part></CompleteMultipartUpload>"#),
        ("create", br#"<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>"#),
        ("cdata", b"<Delete><Object><Key><![CDATA[k<>]]></Key></Object><!-- c --><?pi x?></Delete>"),
        ("cors", br#"<CORSConfiguration><CORSRule><ID>a</ID><AllowedOrigin>https://*.example.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedHeader>x-amz-*</AllowedHeader><ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>60</MaxAgeSeconds></CORSRule></CORSConfiguration>"#),
        ("tagging", br#"<Tagging><TagSet><Tag><Key>project</Key><Value>holt</Value></Tag><Tag><Key>a:b</Key><Value></Value></Tag></TagSet></Tagging>"#),
        ("acl", br#"<AccessControlPolicy><Owner><ID>owner</ID></Owner><AccessControlList><Grant><Grantee><ID>owner</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant><Grant><Grantee><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>READ</Permission></Grant></AccessControlList></AccessControlPolicy>"#),
        ("policy", br#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetBucketLocation","s3:ListBucket"],"Resource":["arn:aws:s3:::bucket"]},{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bucket/public/*"}]}"#),
    ];
    for (name, doc) in docs {
        write("xml_bodies", name, doc);
    }

    let mut headers = vec![0x10, 0x27, 0, 0, 0, 0, 0, 0, 0, 2, 0];
    headers.extend_from_slice(
        b"bytes=100-199\n/bucket/key%2Fx?versionId=null\nlist-type=2&prefix=a%20b&max-keys=10\nsome/key\n\"abababababababababababababababab\"\n*\nWed, 21 Oct 2015 07:28:00 GMT\n\"x\", W/\"y\"\nSun, 06 Nov 1994 08:49:37 GMT",
    );
    write("headers", "typical", &headers);

    let object_headers = ObjectHeaders {
        content_type: Some("text/plain".into()),
        cache_control: Some("max-age=60".into()),
        user_meta: vec![("owner".into(), "me".into())],
        storage_class: Some("STANDARD_IA".into()),
        ..Default::default()
    };
    let object = ObjectMeta {
        size: 11,
        md5: [7; 16],
        parts: 2,
        last_modified_ms: 1_700_000_000_000,
        headers: object_headers.clone(),
        checksums: vec![(ChecksumAlgo::Crc32, vec![1, 2, 3, 4])],
        body: BodyRef::Inline(b"hello world".to_vec()),
        part_sizes: vec![6, 5],
        checksum_type: ChecksumType::Composite,
        tags: vec![("project".into(), "holt".into())],
        public_read: true,
    };
    write("records", "object", &object.encode());
    let upstream = ObjectMeta {
        body: BodyRef::Upstream(UpstreamBody {
            etag: "0a1b2c3d4e5f60718293a4b5c6d7e8f9-2".into(),
            version_id: Some("v1".into()),
            headers_pending: true,
        }),
        ..object.clone()
    };
    write("records", "object-upstream", &upstream.encode());
    write(
        "records",
        "bucket",
        &BucketMeta {
            owner: "me".into(),
            created_ms: 5,
            location: Some("eu".into()),
            cors: vec![],
            policy: None,
            public_read: false,
        }
        .encode(),
    );
    let rule = CorsRule {
        id: Some("r".into()),
        origins: vec!["*".into()],
        methods: vec!["GET".into()],
        headers: vec!["x-amz-*".into()],
        expose: vec!["ETag".into()],
        max_age: Some(60),
    };
    write(
        "records",
        "bucket-v2",
        &BucketMeta {
            owner: "me".into(),
            created_ms: 5,
            location: None,
            cors: vec![rule],
            policy: Some(r#"{"Statement":[]}"#.into()),
            public_read: true,
        }
        .encode(),
    );
    let upload = UploadMeta {
        initiated_ms: 9,
        headers: object_headers,
        checksum_algo: Some(ChecksumAlgo::Sha256),
        checksum_type: Some(ChecksumType::FullObject),
        tags: vec![("k".into(), "v".into())],
        public_read: true,
        upstream_id: None,
    };
    write("records", "upload", &upload.encode());
    let through = UploadMeta { upstream_id: Some("2~upstream-upload-id".into()), ..upload };
    write("records", "upload-upstream", &through.encode());
    let part = PartMeta {
        size: 5,
        md5: [1; 16],
        last_modified_ms: 3,
        checksums: vec![(ChecksumAlgo::Crc32c, vec![0; 4])],
        body: BodyRef::Inline(b"world".to_vec()),
    };
    write("records", "part", &part.encode());
}

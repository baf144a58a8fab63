//! ACLs through the clients that send or read them.
//!
//! Invariants: aws-cli reads bucket and object ACLs (the owner with FULL_CONTROL), uploads with
//! `--acl private` and `--acl bucket-owner-full-control`, sets `private` on an object; with
//! `public-read` (put-object-acl, cp --acl) the object reads without credentials and its ACL
//! shows AllUsers READ, and other canned ACLs are NotImplemented (not a silent success);
//! `mc anonymous set download|none` opens and closes a bucket to curl; s3cmd's `setacl --acl-private`
//! (which reads the ACL document and writes it back) and `info` work; rclone uploads with
//! `--s3-acl private`.

use s3_compat_tests::clients::{curl_get, Aws, Mc, Rclone, S3cmd};
use s3_compat_tests::data::write_file;
use s3_compat_tests::gateway::{Gateway, USER1_ACCESS_KEY};

const BUCKET: &str = "acl-bucket";

#[test]
fn aws_cli_reads_and_sets_private_acls() {
    let gw = Gateway::start("acl-aws");
    let aws = Aws::new(&gw);
    let file = gw.work_dir().join("f.txt");
    write_file(&file, b"private by default\n");
    aws.s3(&["mb", &format!("s3://{BUCKET}")]).run("mb").ok();
    let acl = aws.s3api(&["get-bucket-acl", "--bucket", BUCKET]).run("get-bucket-acl").ok();
    let v = acl.json();
    acl.check_eq(v["Owner"]["ID"].as_str(), Some(USER1_ACCESS_KEY), "bucket owner");
    acl.check_eq(v["Grants"][0]["Permission"].as_str(), Some("FULL_CONTROL"), "the owner's grant");
    acl.check_eq(v["Grants"].as_array().map(Vec::len), Some(1), "one grant");
    for (key, canned) in [("a.txt", "private"), ("b.txt", "bucket-owner-full-control")] {
        aws.s3(&["cp", &file.to_string_lossy(), &format!("s3://{BUCKET}/{key}"), "--acl", canned])
            .run(&format!("cp --acl {canned}"))
            .ok();
    }
    aws.s3api(&["put-object-acl", "--bucket", BUCKET, "--key", "a.txt", "--acl", "private"])
        .run("put-object-acl private")
        .ok();
    let acl = aws.s3api(&["get-object-acl", "--bucket", BUCKET, "--key", "a.txt"]).run("get-object-acl").ok();
    acl.check_eq(acl.json()["Grants"][0]["Grantee"]["ID"].as_str(), Some(USER1_ACCESS_KEY), "grantee");
    // public-read: anyone may read the object (curl without credentials), and the ACL says so.
    let anonymous_get = |key: &str| {
        let out = gw.work_dir().join("anonymous-get");
        curl_get(&format!("{}/{BUCKET}/{key}", gw.endpoint()), &out).stdout.trim().to_owned()
    };
    assert_eq!(anonymous_get("a.txt"), "403", "private objects refuse anonymous reads");
    aws.s3api(&["put-object-acl", "--bucket", BUCKET, "--key", "a.txt", "--acl", "public-read"])
        .run("put-object-acl public-read")
        .ok();
    assert_eq!(anonymous_get("a.txt"), "200", "a public-read object reads anonymously");
    let acl = aws.s3api(&["get-object-acl", "--bucket", BUCKET, "--key", "a.txt"]).run("get public acl").ok();
    let grants = acl.json()["Grants"].clone();
    acl.check_eq(
        grants[1]["Grantee"]["URI"].as_str(),
        Some("http://acs.amazonaws.com/groups/global/AllUsers"),
        "AllUsers",
    );
    acl.check_eq(grants[1]["Permission"].as_str(), Some("READ"), "READ to AllUsers");
    aws.s3(&["cp", &file.to_string_lossy(), &format!("s3://{BUCKET}/c.txt"), "--acl", "public-read"])
        .run("cp --acl public-read")
        .ok();
    assert_eq!(anonymous_get("c.txt"), "200", "uploaded with --acl public-read");
    // Past aws-cli's 8 MiB threshold the ACL goes with CreateMultipartUpload.
    let big = gw.work_dir().join("big.bin");
    write_file(&big, &vec![b'x'; 9 << 20]);
    aws.s3(&["cp", &big.to_string_lossy(), &format!("s3://{BUCKET}/big.bin"), "--acl", "public-read"])
        .run("multipart cp --acl public-read")
        .ok();
    assert_eq!(anonymous_get("big.bin"), "200", "a multipart upload with --acl public-read");
    assert_eq!(anonymous_get("b.txt"), "403", "the others stay private");
    aws.s3api(&["put-object-acl", "--bucket", BUCKET, "--key", "a.txt", "--acl", "public-read-write"])
        .run("put-object-acl public-read-write")
        .fails()
        .mentions("NotImplemented");
}

/// `mc anonymous set download` puts a bucket policy: objects read and the bucket lists without
/// credentials; `mc anonymous get` reads it back; `set none` takes it away.
#[test]
fn mc_anonymous_download_opens_a_bucket_to_curl() {
    let gw = Gateway::start("acl-mc-anonymous");
    let mc = Mc::new(&gw);
    let file = gw.work_dir().join("f.txt");
    write_file(&file, b"for everyone\n");
    let bucket = Mc::target("mc-public");
    mc.cmd(&["mb", &bucket]).run("mc mb").ok();
    mc.cmd(&["cp", &file.to_string_lossy(), &format!("{bucket}/dir/f.txt")]).run("mc cp").ok();
    let out = gw.work_dir().join("anonymous-get");
    let get = || curl_get(&format!("{}/mc-public/dir/f.txt", gw.endpoint()), &out).stdout.trim().to_owned();
    assert_eq!(get(), "403", "private before the policy");
    mc.cmd(&["anonymous", "set", "download", &bucket]).run("mc anonymous set download").ok();
    assert_eq!(get(), "200", "anonymous GET after mc anonymous set download");
    assert_eq!(std::fs::read(&out).unwrap(), b"for everyone\n");
    let list = curl_get(&format!("{}/mc-public?list-type=2", gw.endpoint()), &out);
    list.check_eq(list.stdout.trim(), "200", "anonymous listing");
    let listing = String::from_utf8_lossy(&std::fs::read(&out).unwrap()).into_owned();
    list.check(listing.contains("<Key>dir/f.txt</Key>"), "the anonymous listing names the object");
    let policy = mc.cmd(&["anonymous", "get", &bucket]).run("mc anonymous get").ok();
    policy.check(policy.stdout.contains("download"), "mc reads the policy back as download");
    mc.cmd(&["anonymous", "set", "none", &bucket]).run("mc anonymous set none").ok();
    assert_eq!(get(), "403", "private again after mc anonymous set none");
}

#[test]
fn s3cmd_and_rclone_private_acls() {
    let gw = Gateway::start("acl-s3cmd-rclone");
    let s3cmd = S3cmd::new(&gw);
    let file = gw.work_dir().join("f.txt");
    write_file(&file, b"s3cmd and rclone\n");
    s3cmd.cmd(&["mb", &format!("s3://{BUCKET}")]).run("mb").ok();
    s3cmd.cmd(&["put", &file.to_string_lossy(), &format!("s3://{BUCKET}/k.txt")]).run("put").ok();
    s3cmd.cmd(&["setacl", "--acl-private", &format!("s3://{BUCKET}/k.txt")]).run("setacl --acl-private").ok();
    let info = s3cmd.cmd(&["info", &format!("s3://{BUCKET}/k.txt")]).run("info").ok();
    info.check(info.stdout.contains("FULL_CONTROL"), "s3cmd info shows the owner's FULL_CONTROL");
    let rclone = Rclone::new(&gw);
    rclone
        .cmd(&[
            "copyto",
            "--s3-acl",
            "private",
            &file.to_string_lossy(),
            &Rclone::target(&format!("{BUCKET}/r.txt")),
        ])
        .run("rclone copyto --s3-acl private")
        .ok();
    s3cmd.cmd(&["info", &format!("s3://{BUCKET}/r.txt")]).run("info r.txt").ok();
}

//! ACLs through the clients that send or read them.
//!
//! Invariants: aws-cli reads bucket and object ACLs (the owner with FULL_CONTROL), uploads with
//! `--acl private` and `--acl bucket-owner-full-control`, sets `private` on an object, and gets
//! NotImplemented (not a silent success) for `public-read`; s3cmd's `setacl --acl-private`
//! (which reads the ACL document and writes it back) and `info` work; rclone uploads with
//! `--s3-acl private`.

use s3_compat_tests::clients::{Aws, Rclone, S3cmd};
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
    aws.s3api(&["put-object-acl", "--bucket", BUCKET, "--key", "a.txt", "--acl", "public-read"])
        .run("put-object-acl public-read")
        .fails()
        .mentions("NotImplemented");
    aws.s3(&["cp", &file.to_string_lossy(), &format!("s3://{BUCKET}/c.txt"), "--acl", "public-read"])
        .run("cp --acl public-read")
        .fails();
    aws.s3api(&["head-object", "--bucket", BUCKET, "--key", "c.txt"]).run("head c.txt").fails();
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

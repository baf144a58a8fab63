//! Object tagging through aws-cli and mc.
//!
//! Invariants: aws-cli uploads with `--tagging`, reads, replaces and deletes tags with the
//! s3api calls and sees S3's limit as an error; `mc tag set`, `mc tag list` and
//! `mc tag remove` work on the same objects.

use s3_compat_tests::clients::{Aws, Mc};
use s3_compat_tests::data::write_file;
use s3_compat_tests::gateway::Gateway;

const BUCKET: &str = "tagging-bucket";

#[test]
fn aws_cli_and_mc_tag_objects() {
    let gw = Gateway::start("tagging");
    let aws = Aws::new(&gw);
    let file = gw.work_dir().join("f.txt");
    write_file(&file, b"tagged\n");
    aws.s3(&["mb", &format!("s3://{BUCKET}")]).run("mb").ok();
    aws.s3api(&[
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        "a.txt",
        "--body",
        &file.to_string_lossy(),
        "--tagging",
        "project=holt&tier=gold",
    ])
    .run("put-object --tagging")
    .ok();
    let got = aws
        .s3api(&["get-object-tagging", "--bucket", BUCKET, "--key", "a.txt"])
        .run("get-object-tagging")
        .ok();
    let set = got.json()["TagSet"].clone();
    got.check_eq(set.as_array().map(Vec::len), Some(2), "two tags");
    got.check_eq(set[0]["Key"].as_str(), Some("project"), "first key");
    got.check_eq(set[1]["Value"].as_str(), Some("gold"), "second value");
    let head = aws.s3api(&["head-object", "--bucket", BUCKET, "--key", "a.txt"]).run("head-object").ok();
    head.check_eq(head.json()["TagCount"].as_u64(), Some(2), "x-amz-tagging-count");
    aws.s3api(&[
        "put-object-tagging",
        "--bucket",
        BUCKET,
        "--key",
        "a.txt",
        "--tagging",
        "TagSet=[{Key=stage,Value=final}]",
    ])
    .run("put-object-tagging")
    .ok();
    let got =
        aws.s3api(&["get-object-tagging", "--bucket", BUCKET, "--key", "a.txt"]).run("get after put").ok();
    got.check_eq(got.json()["TagSet"][0]["Key"].as_str(), Some("stage"), "replaced");
    let eleven: Vec<String> = (0..11).map(|i| format!("{{Key=k{i},Value=v}}")).collect();
    aws.s3api(&[
        "put-object-tagging",
        "--bucket",
        BUCKET,
        "--key",
        "a.txt",
        "--tagging",
        &format!("TagSet=[{}]", eleven.join(",")),
    ])
    .run("eleven tags")
    .fails()
    .mentions("BadRequest");
    aws.s3api(&["delete-object-tagging", "--bucket", BUCKET, "--key", "a.txt"])
        .run("delete-object-tagging")
        .ok();
    let got =
        aws.s3api(&["get-object-tagging", "--bucket", BUCKET, "--key", "a.txt"]).run("get after delete").ok();
    got.check_eq(got.json()["TagSet"].as_array().map(Vec::len), Some(0), "no tags left");

    let mc = Mc::new(&gw);
    let target = Mc::target(&format!("{BUCKET}/a.txt"));
    mc.cmd(&["tag", "set", &target, "owner=mc&color=blue"]).run("mc tag set").ok();
    let listed = mc.cmd(&["tag", "list", "--json", &target]).run("mc tag list").ok();
    let tags = listed.json()["tagset"].clone();
    listed.check_eq(tags["owner"].as_str(), Some("mc"), "mc sees its tag");
    listed.check_eq(tags["color"].as_str(), Some("blue"), "and the other");
    mc.cmd(&["tag", "remove", &target]).run("mc tag remove").ok();
    let got = aws
        .s3api(&["get-object-tagging", "--bucket", BUCKET, "--key", "a.txt"])
        .run("get after mc remove")
        .ok();
    got.check_eq(got.json()["TagSet"].as_array().map(Vec::len), Some(0), "mc removed them");
}

//! `scripts/du.py` (Python's standard library only, its own SigV4) against a real gateway,
//! over a tree aws-cli uploaded: the usage extension's figures, printed `du`-style.
//!
//! Invariants:
//! - each directory below the prefix is printed with its objects and bytes, then the
//!   prefix's total, as a recursive listing by aws-cli adds them up;
//! - `--summarize` prints the total alone; a multipart upload in progress is reported apart;
//! - paging: a prefix with more directories than one page (the script follows the
//!   continuation tokens) prints every one of them;
//! - wrong credentials fail with the gateway's error code and a non-zero exit.

use s3_compat_tests::clients::{Aws, User};
use s3_compat_tests::data::write_file;
use s3_compat_tests::exec::Cmd;
use s3_compat_tests::gateway::Gateway;

const BUCKET: &str = "du-test";

fn du(gw: &Gateway, user: User, args: &[&str]) -> Cmd {
    let (access, secret) = user.keys();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/du.py");
    Cmd::new("du.py", "python3")
        .arg(script)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", access)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_ENDPOINT_URL", gw.endpoint())
}

#[test]
fn du_prints_each_directory_and_the_total() {
    let gw = Gateway::start("usage-du");
    let aws = Aws::new(&gw);
    aws.s3(&["mb", &format!("s3://{BUCKET}")]).run("make bucket").ok();
    // A tree: logs/2026/{01..03} with growing files, logs/readme, and 1,100 small directories
    // under many/ (more than one 1,000-entry page).
    let tree = gw.work_dir().join("tree");
    for month in 1..=3u32 {
        for day in 0..month * 2 {
            let body = vec![b'l'; (month * 1000 + day) as usize];
            write_file(&tree.join(format!("logs/2026/{month:02}/day-{day}.log")), &body);
        }
    }
    write_file(&tree.join("logs/readme"), b"twelve bytes");
    aws.s3(&["cp", "--recursive", &tree.display().to_string(), &format!("s3://{BUCKET}/")])
        .run("upload the tree")
        .ok();
    let many = gw.work_dir().join("many");
    for d in 0..1100 {
        write_file(&many.join(format!("d{d:04}/f")), b"x");
    }
    aws.s3(&["cp", "--recursive", "--quiet", &many.display().to_string(), &format!("s3://{BUCKET}/many/")])
        .run("upload 1,100 directories")
        .ok();

    // What aws-cli's recursive listing adds up to, per month.
    let month_bytes = |m: u32| (0..m * 2).map(|d| u64::from(m * 1000 + d)).sum::<u64>();
    let out =
        du(&gw, User::One, &["--bytes", &format!("s3://{BUCKET}/logs/2026/")]).run("du logs/2026/").ok();
    let lines: Vec<Vec<String>> =
        out.stdout.lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect();
    let want: Vec<Vec<String>> = (1..=3u32)
        .map(|m| {
            vec![
                month_bytes(m).to_string(),
                (m * 2).to_string(),
                "objects".into(),
                format!("s3://{BUCKET}/logs/2026/{m:02}/"),
            ]
        })
        .chain(std::iter::once(vec![
            (1..=3).map(month_bytes).sum::<u64>().to_string(),
            "12".into(),
            "objects".into(),
            format!("s3://{BUCKET}/logs/2026/"),
        ]))
        .collect();
    out.check_eq(lines, want, "du's lines");

    let out = du(&gw, User::One, &["-s", "-b", &format!("s3://{BUCKET}/logs/")]).run("du -s logs/").ok();
    let total = (1..=3).map(month_bytes).sum::<u64>() + 12;
    out.check_eq(
        out.stdout.split_whitespace().take(2).collect::<Vec<_>>(),
        vec![total.to_string().as_str(), "13"],
        "du -s: bytes and objects",
    );

    // An upload in progress, counted apart.
    let created = aws
        .s3api(&["create-multipart-upload", "--bucket", BUCKET, "--key", "logs/partial.bin"])
        .run("start an upload")
        .ok();
    let upload_id = created.json()["UploadId"].as_str().unwrap_or_default().to_owned();
    let part = gw.work_dir().join("part.bin");
    write_file(&part, &vec![b'p'; 5 << 20]);
    aws.s3api(&[
        "upload-part",
        "--bucket",
        BUCKET,
        "--key",
        "logs/partial.bin",
        "--part-number",
        "1",
        "--upload-id",
        &upload_id,
        "--body",
        &part.display().to_string(),
    ])
    .run("upload a part")
    .ok();
    let out =
        du(&gw, User::One, &["-s", "-b", &format!("s3://{BUCKET}/logs/")]).run("du with an upload").ok();
    out.check(
        out.stdout
            .lines()
            .any(|l| l.split_whitespace().take(3).eq([&*(5u64 << 20).to_string(), "1", "uploads"])),
        "the upload in progress is reported with its part's bytes",
    );

    // Paging: 1,100 directories, each printed once, in order.
    let out = du(&gw, User::One, &["-b", &format!("s3://{BUCKET}/many/")]).run("du many/").ok();
    let dirs: Vec<String> =
        out.stdout.lines().filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned)).collect();
    out.check_eq(dirs.len(), 1101, "1,100 directories and the total");
    out.check_eq(dirs[1099].clone(), format!("s3://{BUCKET}/many/d1099/"), "the last directory");

    // Another user's credentials: refused by the gateway, reported, exit non-zero.
    let out = du(&gw, User::Two, &[&format!("s3://{BUCKET}/")]).run("du as another user").fails();
    out.check(out.stderr.contains("AccessDenied"), "the gateway's error code is reported");
}

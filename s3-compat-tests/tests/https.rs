//! The gateway serving HTTPS only (`--listen off --listen-tls`), with a certificate from a test
//! CA each client is pointed at (none has verification turned off), and reloads on SIGHUP.
//!
//! Invariants:
//! - aws-cli, boto3, mc, rclone and s3cmd work over HTTPS as over HTTP, and a presigned URL
//!   works over HTTPS (TLS 1.3 and 1.2, path-style and virtual-hosted names under a wildcard
//!   certificate); a client that does not trust the CA is refused the connection.
//! - Under load (k6, 64 connections), a certificate rotation and a user's secret rotation
//!   fail no request: handshakes after the reload get the new certificate, requests signed
//!   with the removed secret are refused, and the new secret is accepted.

use std::time::Duration;

use s3_compat_tests::clients::{boto3_error_code, Aws, Boto3, Mc, Rclone, S3cmd, User, K6};
use s3_compat_tests::data::{md5_hex, read_file, write_file};
use s3_compat_tests::exec::Cmd;
use s3_compat_tests::gateway::{Gateway, USER1_ACCESS_KEY, USER1_SECRET_KEY, USER2_ACCESS_KEY};
use s3_compat_tests::tools::Tool;
use serde_json::{json, Value};

const BUCKET: &str = "tls-bucket";

#[test]
fn every_client_over_https() {
    let gw = Gateway::start_tls("https-clients", &["--domain", "s3.localhost"]);
    assert!(gw.endpoint().starts_with("https://"), "{}", gw.endpoint());
    let ca = gw.ca_file().expect("a CA");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let src = gw.work_dir().join("src.bin");
    write_file(&src, &body);
    let want = md5_hex(&body);
    let src = src.to_string_lossy().into_owned();

    let aws = Aws::new(&gw);
    aws.s3(&["mb", &format!("s3://{BUCKET}")]).run("aws mb").ok();
    aws.s3(&["cp", &src, &format!("s3://{BUCKET}/aws.bin")]).run("aws cp up").ok();

    let boto3 = Boto3::new(&gw);
    let put = boto3.call("put_object", json!({"Bucket": BUCKET, "Key": "boto3.txt", "Body": "over https"}));
    put.run("boto3 put_object").ok();

    let mc = Mc::new(&gw);
    mc.cmd(&["cp", &src, &Mc::target(&format!("{BUCKET}/mc.bin"))]).run("mc cp up").ok();

    let rclone = Rclone::new(&gw);
    rclone.cmd(&["copyto", &src, &Rclone::target(&format!("{BUCKET}/rclone.bin"))]).run("rclone copyto").ok();

    let s3cmd = S3cmd::new(&gw);
    s3cmd.cmd(&["put", &src, &format!("s3://{BUCKET}/s3cmd.bin")]).run("s3cmd put").ok();

    // Every upload reads back, through a different client than the one that wrote it.
    let listed = boto3.call("list_objects_v2", json!({"Bucket": BUCKET})).run("boto3 list").ok().json();
    let keys: Vec<&str> =
        listed["Contents"].as_array().into_iter().flatten().filter_map(|o| o["Key"].as_str()).collect();
    assert_eq!(keys, ["aws.bin", "boto3.txt", "mc.bin", "rclone.bin", "s3cmd.bin"], "{listed}");
    for (i, key) in ["aws.bin", "mc.bin", "rclone.bin", "s3cmd.bin"].iter().enumerate() {
        let out = gw.work_dir().join(format!("down-{i}.bin"));
        let out_s = out.to_string_lossy().into_owned();
        match i {
            0 => mc.raw(&["cp", &Mc::target(&format!("{BUCKET}/{key}")), &out_s]).run("mc cp down").ok(),
            1 => rclone
                .cmd(&["copyto", &Rclone::target(&format!("{BUCKET}/{key}")), &out_s])
                .run("rclone down")
                .ok(),
            2 => s3cmd.cmd(&["get", &format!("s3://{BUCKET}/{key}"), &out_s]).run("s3cmd get").ok(),
            _ => aws.s3(&["cp", &format!("s3://{BUCKET}/{key}"), &out_s]).run("aws cp down").ok(),
        };
        assert_eq!(md5_hex(&read_file(&out)), want, "{key} read back over https");
    }

    // A virtual-hosted presigned URL (`BUCKET.s3.localhost`, which curl resolves to loopback)
    // is served under the certificate's wildcard name.
    let port = gw.addr().rsplit(':').next().unwrap_or_default().to_owned();
    let vhost = Aws::new(&gw).virtual_hosted(&format!("https://s3.localhost:{port}"));
    let vurl = vhost.s3(&["presign", &format!("s3://{BUCKET}/aws.bin")]).run("aws presign (virtual)").ok();
    let vurl = vurl.stdout.trim().to_owned();
    assert!(vurl.starts_with(&format!("https://{BUCKET}.s3.localhost:{port}/aws.bin?")), "{vurl}");
    let vfetched = gw.work_dir().join("vhost.bin");
    let got = Cmd::new("curl", Tool::Curl.path())
        .args(["--silent", "--show-error", "--max-time", "30", "--cacert"])
        .arg(&ca)
        .arg("--output")
        .arg(&vfetched)
        .args(["--write-out", "%{http_code}"])
        .arg(&vurl)
        .run("curl virtual-hosted presigned GET")
        .ok();
    got.check_eq(got.stdout.trim(), "200", "virtual-hosted presigned GET status");
    assert_eq!(md5_hex(&read_file(&vfetched)), want, "virtual-hosted presigned GET body");

    // A presigned URL works over HTTPS for a client that trusts the CA...
    let url = aws
        .s3(&["presign", &format!("s3://{BUCKET}/aws.bin")])
        .run("aws presign")
        .ok()
        .stdout
        .trim()
        .to_owned();
    assert!(url.starts_with("https://"), "{url}");
    let fetched = gw.work_dir().join("presigned.bin");
    let curl = |trust: bool| {
        let cmd = Cmd::new("curl", Tool::Curl.path()).args(["--silent", "--show-error", "--max-time", "30"]);
        let cmd = if trust { cmd.arg("--cacert").arg(&ca) } else { cmd };
        cmd.arg("--output").arg(&fetched).args(["--write-out", "%{http_code}"]).arg(&url)
    };
    let ok = curl(true).run("curl presigned GET").ok();
    ok.check_eq(ok.stdout.trim(), "200", "presigned GET status");
    // TLS 1.2 is served as well as 1.3.
    let tls12 = curl(true).args(["--tlsv1.2", "--tls-max", "1.2"]).run("curl over TLS 1.2").ok();
    tls12.check_eq(tls12.stdout.trim(), "200", "presigned GET over TLS 1.2");
    assert_eq!(md5_hex(&read_file(&fetched)), want, "presigned GET body");
    // ... and a client that does not trust it is refused (curl: 60, peer certificate).
    let refused = curl(false).run("curl without the CA").fails();
    refused.check(refused.code == Some(60), "curl without the CA should fail verification (exit 60)");

    // A multipart upload's Location names the object by the scheme it came by.
    let key = json!({"Bucket": BUCKET, "Key": "parts.bin"});
    let created =
        boto3.call("create_multipart_upload", key.clone()).run("boto3 create_multipart_upload").ok();
    let id = created.json()["UploadId"].as_str().expect("an upload id").to_owned();
    let part =
        json!({"Bucket": BUCKET, "Key": "parts.bin", "UploadId": id, "PartNumber": 1, "Body": "one part"});
    let etag = boto3.call("upload_part", part).run("boto3 upload_part").ok().json()["ETag"].clone();
    let parts = json!({"Parts": [{"ETag": etag, "PartNumber": 1}]});
    let done = json!({"Bucket": BUCKET, "Key": "parts.bin", "UploadId": id, "MultipartUpload": parts});
    let done = boto3.call("complete_multipart_upload", done).run("boto3 complete_multipart_upload").ok();
    let location = done.json()["Location"].as_str().unwrap_or_default().to_owned();
    done.check(location.starts_with("https://"), &format!("Location over https: {location:?}"));
}

/// The serial number of the certificate the gateway presents to a new connection, read by
/// Python's `ssl` with the test CA (verification on).
fn served_serial(gw: &Gateway) -> u64 {
    let ca = gw.ca_file().expect("a CA");
    let port = gw.addr().rsplit(':').next().unwrap_or_default().to_owned();
    let script = "import socket, ssl, sys\n\
                  ctx = ssl.create_default_context(cafile=sys.argv[1])\n\
                  with socket.create_connection(('127.0.0.1', int(sys.argv[2]))) as raw:\n\
                  \x20   with ctx.wrap_socket(raw, server_hostname='localhost') as tls:\n\
                  \x20       print(tls.getpeercert()['serialNumber'])\n";
    let out = Cmd::new("python", Tool::Python.path())
        .arg("-c")
        .arg(script)
        .arg(&ca)
        .arg(&port)
        .run("read the served certificate")
        .ok();
    u64::from_str_radix(out.stdout.trim(), 16).unwrap_or_else(|e| out.fail(&format!("serial: {e}")))
}

#[test]
fn certificate_and_secret_rotate_under_load_without_failed_requests() {
    let mut gw = Gateway::start_tls("https-rotate", &[]);
    assert_eq!(served_serial(&gw), 1);
    let user2 = Boto3::as_user(&gw, User::Two);
    user2.call("list_buckets", json!({})).run("user 2 before the rotation").ok();

    // k6 (user 1) at 64 connections for 12 s; the rotations happen 4 s in.
    let k6 = K6::new(&gw);
    let export = gw.work_dir().join("k6.json");
    let export_arg = format!("--summary-export={}", export.display());
    let load = {
        let cmd = k6
            .run_script_with(
                "load.js",
                &[
                    ("SCENARIO", "mixed"),
                    ("VUS", "64"),
                    ("DURATION", "12s"),
                    ("BUCKET", "rotate"),
                    ("SEED_PREFIXES", "50"),
                ],
                &[&export_arg],
            )
            .timeout(Duration::from_secs(300));
        std::thread::spawn(move || cmd.run("k6 over https during the rotations"))
    };
    std::thread::sleep(Duration::from_secs(4));
    let serial = gw.rotate_certificate();
    // Apart, so that the two signals are not taken as one.
    std::thread::sleep(Duration::from_millis(500));
    let new_secret = "compat-secret-two-rotated-00000000";
    gw.set_users(&[(USER1_ACCESS_KEY, USER1_SECRET_KEY), (USER2_ACCESS_KEY, new_secret)]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(served_serial(&gw), serial, "a new connection after the reload gets the new certificate");

    let out = load.join().expect("the k6 thread");
    let text = std::fs::read_to_string(&export)
        .unwrap_or_else(|e| out.fail(&format!("no k6 summary at {}: {e}", export.display())));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| out.fail(&format!("k6 summary: {e}")));
    let requests = v["metrics"]["http_reqs"]["count"].as_f64().unwrap_or(0.0);
    let failed = v["metrics"]["http_req_failed"]["value"].as_f64().unwrap_or(1.0);
    println!("k6 over https: {requests} requests, failed rate {failed}");
    out.check(requests > 1000.0, &format!("only {requests} requests"));
    out.check(failed == 0.0, &format!("failed-request rate {failed} across the rotations"));

    // The removed secret is refused; the new one is accepted.
    let refused = user2.call("list_buckets", json!({})).run("user 2 with the removed secret").fails();
    let code = boto3_error_code(&refused);
    refused.check(code == "SignatureDoesNotMatch", &format!("expected SignatureDoesNotMatch, got {code}"));
    let rotated = Boto3::as_user(&gw, User::Keys(USER2_ACCESS_KEY, new_secret));
    rotated.call("list_buckets", json!({})).run("user 2 with the new secret").ok();

    // A credentials file that does not parse keeps the users as they were.
    gw.write_credentials("[[users]]\naccess_key = 1\n");
    gw.hangup();
    std::thread::sleep(Duration::from_millis(500));
    rotated.call("list_buckets", json!({})).run("after a failed reload").ok();
    let log = gw.log_tail(20_000);
    assert!(log.contains("credentials reload failed"), "the failed reload is not logged:\n{log}");

    // `/metrics` counts the reloads: two SIGHUPs took (certificate, then both files again
    // with the users), the last one failed for the credentials.
    let metrics = Cmd::new("curl", Tool::Curl.path())
        .args(["--silent", "--show-error", "--max-time", "30", "--cacert"])
        .arg(gw.ca_file().expect("a CA"))
        .arg(format!("{}/metrics", gw.endpoint()))
        .run("GET /metrics")
        .ok();
    for line in [
        "holt_reloads_total{what=\"tls\",outcome=\"ok\"} 3",
        "holt_reloads_total{what=\"credentials\",outcome=\"ok\"} 2",
        "holt_reloads_total{what=\"credentials\",outcome=\"failed\"} 1",
    ] {
        metrics.check(metrics.stdout.contains(line), &format!("/metrics lacks {line}"));
    }
}

/// A certificate and key that do not belong together, or a certificate file that holds no
/// certificate, stop the gateway at start-up with a message naming the flag and the fault.
#[test]
fn bad_certificate_files_stop_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pair = |name: &str| {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("parameters")
            .self_signed(&key)
            .expect("certificate");
        let (c, k) = (dir.path().join(format!("{name}.crt")), dir.path().join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).expect("write");
        std::fs::write(&k, key.serialize_pem()).expect("write");
        (c, k)
    };
    let (cert_a, _) = pair("a");
    let (_, key_b) = pair("b");
    let empty = dir.path().join("empty.crt");
    std::fs::write(&empty, "").expect("write");
    for (cert, key, why) in
        [(&cert_a, &key_b, "does not belong to the certificate"), (&empty, &key_b, "no CERTIFICATE")]
    {
        let out = Cmd::new("holt-gateway", s3_compat_tests::gateway::gateway_binary())
            .args(["--listen-tls", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env_remove("HOLT_CREDENTIALS_FILE")
            .env("HOLT_ACCESS_KEY", USER1_ACCESS_KEY)
            .env("HOLT_SECRET_KEY", USER1_SECRET_KEY)
            .timeout(Duration::from_secs(60))
            .run("start with bad TLS files")
            .fails();
        out.check(out.code == Some(1), &format!("exit code {:?}, expected 1", out.code));
        out.check(
            out.stderr.contains("--tls-") && out.stderr.contains(why),
            &format!("stderr should say '{why}'"),
        );
    }
}

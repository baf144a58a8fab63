//! How each client is pointed at a gateway: path-style addressing, SigV4, region us-east-1,
//! and a private HOME/config so nothing from the user's own setup leaks in.
//!
//! The configurations here are the ones the README documents; if one changes, change both.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::data::write_file;
use crate::exec::{Cmd, Outcome};
use crate::gateway::{
    Gateway, REGION, USER1_ACCESS_KEY, USER1_SECRET_KEY, USER2_ACCESS_KEY, USER2_SECRET_KEY,
};
use crate::tools::{crate_file, Tool};

/// Which of the two configured users a client signs as.
#[derive(Clone, Copy, Debug)]
pub enum User {
    /// `USER1_ACCESS_KEY`, the owner of the buckets the scenarios create.
    One,
    /// `USER2_ACCESS_KEY`, who owns none of user one's buckets.
    Two,
    /// Any access key and secret (a user added or rotated by a test).
    Keys(&'static str, &'static str),
}

impl User {
    /// The access key and secret.
    pub fn keys(self) -> (&'static str, &'static str) {
        match self {
            User::One => (USER1_ACCESS_KEY, USER1_SECRET_KEY),
            User::Two => (USER2_ACCESS_KEY, USER2_SECRET_KEY),
            User::Keys(access, secret) => (access, secret),
        }
    }
}

/// A per-client private HOME under the gateway's work dir.
fn client_home(gw: &Gateway, name: &str) -> PathBuf {
    let home = gw.work_dir().join(format!("home-{name}"));
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("mkdir {}: {e}", home.display()));
    home
}

/// aws-cli v1: `--endpoint-url`, keys in the environment, path-style and s3v4 in a config file
/// (presigned URLs are SigV4 only with `signature_version = s3v4`).
pub struct Aws {
    bin: PathBuf,
    home: PathBuf,
    endpoint: String,
    user: User,
    /// The CA to trust, for a gateway serving HTTPS.
    ca: Option<PathBuf>,
}

impl Aws {
    /// aws-cli pointed at `gw`, signing as user one.
    pub fn new(gw: &Gateway) -> Aws {
        Aws::as_user(gw, User::One)
    }

    /// aws-cli pointed at `gw`, signing as `user`; writes its config under a private HOME.
    pub fn as_user(gw: &Gateway, user: User) -> Aws {
        let home = client_home(gw, "aws");
        write_file(
            &home.join("config"),
            format!(
                "[default]\nregion = {REGION}\noutput = json\ns3 =\n    addressing_style = path\n    \
                 signature_version = s3v4\n"
            )
            .as_bytes(),
        );
        Aws { bin: Tool::Aws.path(), home, endpoint: gw.endpoint(), user, ca: gw.ca_file() }
    }

    fn base(&self) -> Cmd {
        let (access, secret) = self.user.keys();
        Cmd::new("aws-cli", &self.bin)
            .env("HOME", &self.home)
            .env("AWS_CONFIG_FILE", self.home.join("config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", self.home.join("no-credentials"))
            .env("AWS_ACCESS_KEY_ID", access)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("AWS_DEFAULT_REGION", REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_CA_BUNDLE")
            .args(self.ca.iter().flat_map(|ca| [std::ffi::OsStr::new("--ca-bundle"), ca.as_os_str()]))
            .arg("--endpoint-url")
            .arg(&self.endpoint)
    }

    /// This client with virtual-hosted addressing (`bucket.HOST`) against `endpoint`, which
    /// must name the gateway's `--domain` (an IP address makes the SDK fall back to paths).
    pub fn virtual_hosted(mut self, endpoint: &str) -> Aws {
        write_file(
            &self.home.join("config"),
            format!(
                "[default]\nregion = {REGION}\noutput = json\ns3 =\n    addressing_style = virtual\n    \
                 signature_version = s3v4\n"
            )
            .as_bytes(),
        );
        self.endpoint = endpoint.to_owned();
        self
    }

    /// `aws s3 ...` (high-level commands).
    pub fn s3(&self, args: &[&str]) -> Cmd {
        self.base().arg("s3").args(args)
    }

    /// `aws s3api ...` (one API call per command, JSON output).
    pub fn s3api(&self, args: &[&str]) -> Cmd {
        self.base().arg("s3api").args(args)
    }
}

/// boto3 through `py/s3ops.py` in the client venv.
pub struct Boto3 {
    python: PathBuf,
    endpoint: String,
    user: User,
    /// The CA to trust (botocore reads `AWS_CA_BUNDLE`), for a gateway serving HTTPS.
    ca: Option<PathBuf>,
}

impl Boto3 {
    /// boto3 pointed at `gw`, signing as user one.
    pub fn new(gw: &Gateway) -> Boto3 {
        Boto3::as_user(gw, User::One)
    }

    /// boto3 pointed at `gw`, signing as `user` (keys passed in the environment).
    pub fn as_user(gw: &Gateway, user: User) -> Boto3 {
        Boto3 { python: Tool::Python.path(), endpoint: gw.endpoint(), user, ca: gw.ca_file() }
    }

    /// boto3 pointed at any S3 endpoint (a MinIO the gateway fronts, to look behind it).
    pub fn at(endpoint: &str, user: User) -> Boto3 {
        Boto3 { python: Tool::Python.path(), endpoint: endpoint.to_owned(), user, ca: None }
    }

    /// `s3ops.py OP ARGS`; see the script's docstring for the operations.
    pub fn op(&self, op: &str, args: &Value) -> Cmd {
        self.script("py/s3ops.py", op, args)
    }

    /// Another boto3 driver of `py/` taking the same `--endpoint URL OP 'JSON-ARGS'` and the
    /// same environment (e.g. `py/sigv2.py`).
    pub fn script(&self, script: &str, op: &str, args: &Value) -> Cmd {
        let (access, secret) = self.user.keys();
        let cmd = match &self.ca {
            Some(ca) => Cmd::new("boto3", &self.python).env("AWS_CA_BUNDLE", ca),
            None => Cmd::new("boto3", &self.python).env_remove("AWS_CA_BUNDLE"),
        };
        cmd.env("AWS_ACCESS_KEY_ID", access)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .arg(crate_file(script))
            .arg("--endpoint")
            .arg(&self.endpoint)
            .arg(op)
            .arg(args.to_string())
    }

    /// A browser scenario of `py/` (`op` `run`): the script drives headless Chromium through
    /// selenium (`py/headless.py`) and saves screenshots under `target/screenshots/`.
    pub fn browser_script(&self, script: &str, args: &Value) -> Cmd {
        self.script(script, "run", args)
            .env("HOLT_CHROMIUM", Tool::Chromium.path())
            .env("HOLT_CHROMEDRIVER", Tool::Chromedriver.path())
            .env("HOLT_SCREENSHOT_DIR", crate::tools::workspace_root().join("target/screenshots"))
    }

    /// Call one S3 client method, e.g. `call("head_object", json!({"Bucket": b, "Key": k}))`.
    pub fn call(&self, method: &str, kwargs: Value) -> Cmd {
        self.op("call", &serde_json::json!({ "method": method, "kwargs": kwargs }))
    }
}

/// The S3 error code boto3 reported (exit code 3 and `{"error": {"Code": ...}}`).
#[track_caller]
pub fn boto3_error_code(outcome: &Outcome) -> String {
    outcome.check_eq(outcome.code, Some(3), "boto3 exit code for an S3 error");
    let value = outcome.json();
    value["error"]["Code"].as_str().unwrap_or("").to_string()
}

/// s3cmd with a generated config: path-style (`host_bucket` without `%(bucket)s`), plain HTTP,
/// SigV4.
pub struct S3cmd {
    bin: PathBuf,
    home: PathBuf,
    config: PathBuf,
}

impl S3cmd {
    /// s3cmd pointed at `gw`, signing as user one (its config holds the keys; there is no
    /// other user).
    pub fn new(gw: &Gateway) -> S3cmd {
        let home = client_home(gw, "s3cmd");
        let config = home.join("s3cfg");
        // Over HTTPS the certificate is checked against the test CA (`ca_certs_file`).
        let tls = match gw.ca_file() {
            Some(ca) => {
                format!("use_https = True\ncheck_ssl_certificate = True\nca_certs_file = {}\n", ca.display())
            }
            None => "use_https = False\ncheck_ssl_certificate = False\n".to_owned(),
        };
        write_file(
            &config,
            format!(
                "[default]\naccess_key = {USER1_ACCESS_KEY}\nsecret_key = {USER1_SECRET_KEY}\n\
                 host_base = {addr}\nhost_bucket = {addr}\nbucket_location = {REGION}\n\
                 {tls}signature_v2 = False\n\
                 progress_meter = False\nsocket_timeout = 60\nmax_retries = 2\n",
                addr = gw.addr()
            )
            .as_bytes(),
        );
        S3cmd { bin: Tool::S3cmd.path(), home, config }
    }

    /// The same client signing with Signature Version 2 (`signature_v2 = True`).
    pub fn signature_v2(self) -> S3cmd {
        let config = crate::data::read_file(&self.config);
        let config = String::from_utf8_lossy(&config).replace("signature_v2 = False", "signature_v2 = True");
        write_file(&self.config, config.as_bytes());
        self
    }

    /// `s3cmd --config CONFIG --no-progress ARGS`.
    pub fn cmd(&self, args: &[&str]) -> Cmd {
        Cmd::new("s3cmd", &self.bin)
            .env("HOME", &self.home)
            .arg("--config")
            .arg(&self.config)
            .arg("--no-progress")
            .args(args)
    }
}

/// mc with the default config dir (`~/.mc`) under a private HOME and an alias `holt` set with
/// `--api s3v4 --path on`.
pub struct Mc {
    bin: PathBuf,
    home: PathBuf,
}

impl Mc {
    /// The alias naming the gateway in mc paths (`holt/bucket/key`).
    pub const ALIAS: &'static str = "holt";

    /// mc with the alias set for `gw` and user one; runs `mc alias set` at once and fails the
    /// test if it fails.
    pub fn new(gw: &Gateway) -> Mc {
        let mc = Mc { bin: Tool::Mc.path(), home: client_home(gw, "mc") };
        // mc trusts the CAs in its config directory's certs/CAs.
        if let Some(ca) = gw.ca_file() {
            let cas = mc.home.join(".mc/certs/CAs");
            std::fs::create_dir_all(&cas).unwrap_or_else(|e| panic!("mkdir {}: {e}", cas.display()));
            std::fs::copy(&ca, cas.join("holt-test-ca.pem")).unwrap_or_else(|e| panic!("copy the CA: {e}"));
        }
        mc.raw(&[
            "alias",
            "set",
            Mc::ALIAS,
            &gw.endpoint(),
            USER1_ACCESS_KEY,
            USER1_SECRET_KEY,
            "--api",
            "s3v4",
            "--path",
            "on",
        ])
        .run("alias set")
        .ok();
        mc
    }

    /// `mc ARGS` without `--json`.
    pub fn raw(&self, args: &[&str]) -> Cmd {
        Cmd::new("mc", &self.bin).env("HOME", &self.home).env("MC_DISABLE_PAGER", "1").args(args)
    }

    /// `mc --json --no-color ARGS`.
    pub fn cmd(&self, args: &[&str]) -> Cmd {
        self.raw(&["--json", "--no-color"]).args(args)
    }

    /// `holt/<path>`.
    pub fn target(path: &str) -> String {
        format!("{}/{path}", Mc::ALIAS)
    }
}

/// rclone with a generated config: `provider = Other`, path-style (`force_path_style = true`),
/// region us-east-1.
pub struct Rclone {
    bin: PathBuf,
    config: PathBuf,
    /// The CA to trust (`--ca-cert`), for a gateway serving HTTPS.
    ca: Option<PathBuf>,
}

impl Rclone {
    /// The remote naming the gateway in rclone paths (`holt:bucket/key`).
    pub const REMOTE: &'static str = "holt";

    /// rclone with a config file for `gw`, signing as user one.
    pub fn new(gw: &Gateway) -> Rclone {
        let config = client_home(gw, "rclone").join("rclone.conf");
        write_file(
            &config,
            format!(
                "[{remote}]\ntype = s3\nprovider = Other\naccess_key_id = {USER1_ACCESS_KEY}\n\
                 secret_access_key = {USER1_SECRET_KEY}\nendpoint = {endpoint}\nregion = {REGION}\n\
                 force_path_style = true\n",
                remote = Rclone::REMOTE,
                endpoint = gw.endpoint()
            )
            .as_bytes(),
        );
        Rclone { bin: Tool::Rclone.path(), config, ca: gw.ca_file() }
    }

    /// `rclone --config CONFIG ARGS`, with retries and timeouts cut short so a failure shows at once.
    pub fn cmd(&self, args: &[&str]) -> Cmd {
        Cmd::new("rclone", &self.bin)
            // rclone's AWS SDK refuses to start when AWS_CA_BUNDLE is set together with its own
            // HTTP transport; a CA to trust goes in `--ca-cert`.
            .env_remove("AWS_CA_BUNDLE")
            .args(self.ca.iter().flat_map(|ca| [std::ffi::OsStr::new("--ca-cert"), ca.as_os_str()]))
            .arg("--config")
            .arg(&self.config)
            // Fail fast instead of retrying for minutes: a failed step is what we want to see.
            .args(["--retries", "1", "--low-level-retries", "2", "--contimeout", "10s", "--timeout", "60s"])
            .args(args)
    }

    /// `holt:<path>`.
    pub fn target(path: &str) -> String {
        format!("{}:{path}", Rclone::REMOTE)
    }
}

/// k6 running a script from `k6/` with the endpoint and user 1's keys in `-e` variables.
pub struct K6 {
    bin: PathBuf,
    endpoint: String,
    /// The CA to trust (Go reads `SSL_CERT_FILE`), for a gateway serving HTTPS.
    ca: Option<PathBuf>,
    work: PathBuf,
    /// A `nice` increment to run k6 at (negative: ahead of the gateway, for latency tests).
    nice: Option<i32>,
}

impl K6 {
    /// k6 pointed at `gw` as user one, working in a private directory.
    pub fn new(gw: &Gateway) -> K6 {
        K6 {
            bin: Tool::K6.path(),
            endpoint: gw.endpoint(),
            ca: gw.ca_file(),
            work: client_home(gw, "k6"),
            nice: None,
        }
    }

    /// k6 at CPU priority `increment` (see `nice(1)`; negative values need root).
    pub fn niced(mut self, increment: i32) -> K6 {
        self.nice = Some(increment);
        self
    }

    /// `k6 run` of `k6/<script>`; the summary is written to `summary_path()` as JSON.
    pub fn run_script(&self, script: &str, extra_env: &[(&str, &str)]) -> Cmd {
        self.run_script_with(script, extra_env, &[])
    }

    /// As `run_script`, with more `k6 run` flags (`--summary-export PATH` for a script without
    /// a `handleSummary`).
    pub fn run_script_with(&self, script: &str, extra_env: &[(&str, &str)], flags: &[&str]) -> Cmd {
        let mut cmd = match self.nice {
            Some(n) => Cmd::new("k6", "nice").arg("-n").arg(n.to_string()).arg(&self.bin),
            None => Cmd::new("k6", &self.bin),
        };
        if let Some(ca) = &self.ca {
            cmd = cmd.env("SSL_CERT_FILE", ca);
        }
        cmd = cmd
            .env("HOME", &self.work)
            .env("K6_NO_USAGE_REPORT", "true")
            .cwd(&self.work)
            .args(["run", "--quiet", "--no-color", "--no-usage-report"])
            .arg("-e")
            .arg(format!("S3_ENDPOINT={}", self.endpoint))
            .arg("-e")
            .arg(format!("S3_ACCESS_KEY={USER1_ACCESS_KEY}"))
            .arg("-e")
            .arg(format!("S3_SECRET_KEY={USER1_SECRET_KEY}"))
            .arg("-e")
            .arg(format!("S3_REGION={REGION}"))
            .arg("-e")
            .arg(format!("SUMMARY_PATH={}", self.summary_path().display()));
        for (key, value) in extra_env {
            cmd = cmd.arg("-e").arg(format!("{key}={value}"));
        }
        cmd.args(flags.iter().copied()).arg(crate_file(&format!("k6/{script}")))
    }

    /// Where a script's `handleSummary` writes its JSON summary (passed as `SUMMARY_PATH`).
    pub fn summary_path(&self) -> PathBuf {
        self.work.join("summary.json")
    }
}

/// `curl` GET of a URL into `out`; returns the outcome with the HTTP status on stdout.
pub fn curl_get(url: &str, out: &Path) -> Outcome {
    Cmd::new("curl", Tool::Curl.path())
        .args(["--silent", "--show-error", "--globoff", "--max-time", "60", "--output"])
        .arg(out)
        .args(["--write-out", "%{http_code}"])
        .arg(url)
        .run("presigned GET with curl")
}

/// Fetch a presigned GET URL with curl into `out` and check it answered 200 with `body`.
pub fn check_presigned_get(url: &str, out: &Path, body: &[u8]) {
    let fetched = curl_get(url, out).ok();
    fetched.check_eq(fetched.stdout.trim(), "200", "HTTP status of the presigned GET");
    fetched.check_eq(crate::data::read_file(out), body.to_vec(), "presigned GET body");
}

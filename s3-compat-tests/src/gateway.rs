//! One `holt-gateway` process per test: a fresh data directory, a credentials file with two
//! users, a free loopback port read back from the start-up line.
//!
//! Invariants:
//! - The gateway only ever listens on 127.0.0.1 (tests never send traffic anywhere else).
//! - The data directory outlives restarts and kills: only dropping the [`Gateway`] removes it.
//! - Dropping a [`Gateway`] kills the process (SIGKILL) and reaps it, so no test leaks a server.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::minio::Minio;
use crate::tools::workspace_root;

/// The first user: owns every bucket the scenarios create.
pub const USER1_ACCESS_KEY: &str = "AKIAHOLTCOMPAT1";
/// The first user's secret key.
pub const USER1_SECRET_KEY: &str = "compat-secret-one-0123456789abcdef";
/// The second user: used to check that buckets are private to their owner.
pub const USER2_ACCESS_KEY: &str = "AKIAHOLTCOMPAT2";
/// The second user's secret key.
pub const USER2_SECRET_KEY: &str = "compat-secret-two-fedcba9876543210";
/// The region every gateway is started with (`--region`) and every client signs for.
pub const REGION: &str = "us-east-1";
/// Set to `minio` to run every scenario with the gateway in front of its own single-node MinIO
/// (`--upstream`): the same clients and assertions, with bodies and writes upstream.
pub const UPSTREAM_ENV: &str = "HOLT_COMPAT_UPSTREAM";

/// How long a gateway may take to print its start-up line (it replays its WAL first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM'd gateway may take to drain and close the engine.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// The start-up line, `holt-gateway listening on http://ADDR` (or `https://` when the gateway
/// serves HTTPS only).
const STARTUP_LINE_PREFIX: &str = "holt-gateway listening on ";

/// A running (or stopped, between restarts) `holt-gateway` child process and its scratch
/// directory; dropping it kills the process and removes the directory.
pub struct Gateway {
    /// Scratch root: `data/`, `credentials.toml`, `gateway.log`, and whatever the test puts in
    /// `work_dir()` (client configs, files to upload, downloads).
    root: tempfile::TempDir,
    child: Option<Child>,
    addr: String,
    label: String,
    /// Command-line options added to every start (limits a test sets).
    extra_args: Vec<String>,
    /// Serving HTTPS only, with a certificate from a test CA (`Gateway::start_tls`).
    tls: Option<TestCa>,
    /// The MinIO this gateway fronts when the suite runs in upstream mode (dropped after the
    /// gateway: fields drop after `Drop::drop` has killed the process).
    upstream: Option<Minio>,
}

/// A certificate authority made for one gateway, and the files the gateway and the clients
/// read: `ca.pem` (what clients trust), `cert.pem` and `key.pem` (what the gateway serves).
pub struct TestCa {
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
    dir: PathBuf,
    /// Certificates issued so far (each a new serial number).
    issued: u64,
}

impl TestCa {
    fn new(dir: &Path) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "holt compat test CA");
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let ca = params.self_signed(&ca_key).expect("CA certificate");
        fs::write(dir.join("ca.pem"), ca.pem()).expect("write ca.pem");
        let mut test_ca = TestCa { ca, ca_key, dir: dir.to_path_buf(), issued: 0 };
        test_ca.issue();
        test_ca
    }

    /// Signs a new server certificate for `localhost`, `127.0.0.1` and `s3.localhost` with
    /// `*.s3.localhost` (virtual-hosted names under `--domain s3.localhost`; TLS clients take a
    /// wildcard only with two labels after it) with a new key, and writes `cert.pem` and
    /// `key.pem`; returns its serial number.
    fn issue(&mut self) -> u64 {
        self.issued += 1;
        let names = ["localhost", "127.0.0.1", "s3.localhost", "*.s3.localhost"].map(str::to_owned).to_vec();
        let mut params = rcgen::CertificateParams::new(names).expect("server parameters");
        params.distinguished_name.push(rcgen::DnType::CommonName, "holt compat gateway");
        params.serial_number = Some(rcgen::SerialNumber::from(self.issued));
        let key = rcgen::KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).expect("server certificate");
        // Written beside and renamed over, so a reload never reads half a file.
        for (name, text) in [("key.pem", key.serialize_pem()), ("cert.pem", cert.pem())] {
            let tmp = self.dir.join(format!("{name}.tmp"));
            fs::write(&tmp, text).expect("write a PEM file");
            fs::rename(&tmp, self.dir.join(name)).expect("rename a PEM file");
        }
        self.issued
    }

    /// The CA certificate (PEM) that clients must trust to verify the gateway.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

impl Gateway {
    /// Start a gateway for the test named `label` (used in messages and the log file name).
    pub fn start(label: &str) -> Gateway {
        Gateway::start_with_args(label, &[])
    }

    /// As [`Gateway::start`], with more command-line options (kept across restarts).
    pub fn start_with_args(label: &str, extra_args: &[&str]) -> Gateway {
        Gateway::start_inner(label, extra_args, false)
    }

    /// A gateway serving HTTPS only (`--listen off --listen-tls`), with a certificate its own
    /// test CA signed; clients trust the CA through `ca_file()`.
    pub fn start_tls(label: &str, extra_args: &[&str]) -> Gateway {
        Gateway::start_inner(label, extra_args, true)
    }

    fn start_inner(label: &str, extra_args: &[&str], tls: bool) -> Gateway {
        let root = tempfile::Builder::new()
            .prefix(&format!("holt-compat-{label}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("[{label}] cannot create a temp dir: {e}"));
        let credentials = format!(
            "[[users]]\naccess_key = \"{USER1_ACCESS_KEY}\"\nsecret_key = \"{USER1_SECRET_KEY}\"\n\n\
             [[users]]\naccess_key = \"{USER2_ACCESS_KEY}\"\nsecret_key = \"{USER2_SECRET_KEY}\"\n"
        );
        let credentials_path = root.path().join("credentials.toml");
        fs::write(&credentials_path, credentials)
            .unwrap_or_else(|e| panic!("[{label}] cannot write {}: {e}", credentials_path.display()));
        fs::create_dir_all(root.path().join("work"))
            .unwrap_or_else(|e| panic!("[{label}] cannot create the work dir: {e}"));
        let mut extra_args: Vec<String> = extra_args.iter().map(|a| (*a).to_owned()).collect();
        let upstream = upstream_mode(label, &extra_args);
        if let Some(minio) = &upstream {
            extra_args.extend(minio.upstream_args());
        }
        let mut gateway = Gateway {
            root,
            child: None,
            addr: String::new(),
            label: label.to_string(),
            extra_args,
            tls: None,
            upstream,
        };
        if tls {
            gateway.tls = Some(TestCa::new(gateway.root.path()));
        }
        gateway.spawn();
        gateway
    }

    /// `http://127.0.0.1:PORT` (`https://` for `start_tls`), the endpoint every client is
    /// pointed at.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The MinIO this gateway fronts, when the suite runs in upstream mode ([`UPSTREAM_ENV`]).
    pub fn upstream(&self) -> Option<&Minio> {
        self.upstream.as_ref()
    }

    /// The CA certificate clients must trust, for a gateway serving HTTPS.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls.as_ref().map(TestCa::ca_path)
    }

    /// Issues a new server certificate (new key, new serial) into the files the gateway
    /// serves, and sends SIGHUP; returns the new serial. Handshakes after the reload get it.
    pub fn rotate_certificate(&mut self) -> u64 {
        let tls = self.tls.as_mut().unwrap_or_else(|| panic!("[{}] not serving HTTPS", self.label));
        let serial = tls.issue();
        self.hangup();
        serial
    }

    /// Rewrites the credentials file with `users` (access key, secret key) and sends SIGHUP.
    pub fn set_users(&self, users: &[(&str, &str)]) {
        let text: String = users
            .iter()
            .map(|(access, secret)| {
                format!("[[users]]\naccess_key = \"{access}\"\nsecret_key = \"{secret}\"\n\n")
            })
            .collect();
        self.write_credentials(&text);
        self.hangup();
    }

    /// Replaces the credentials file with `text` (read at the next start or SIGHUP).
    pub fn write_credentials(&self, text: &str) {
        let path = self.root.path().join("credentials.toml");
        let tmp = self.root.path().join("credentials.toml.tmp");
        fs::write(&tmp, text).unwrap_or_else(|e| panic!("[{}] cannot write credentials: {e}", self.label));
        fs::rename(&tmp, &path)
            .unwrap_or_else(|e| panic!("[{}] cannot replace credentials: {e}", self.label));
    }

    /// Sends SIGHUP (reload the credentials file and the certificate).
    pub fn hangup(&self) {
        let pid =
            self.child.as_ref().map(Child::id).unwrap_or_else(|| panic!("[{}] not running", self.label));
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("a child's pid is positive");
        rustix::process::kill_process(pid, rustix::process::Signal::HUP)
            .unwrap_or_else(|e| panic!("[{}] cannot send SIGHUP: {e}", self.label));
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The test's name given to `start`, which prefixes every failure message.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The running gateway's peak resident set (`VmHWM` in `/proc/PID/status`), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        let pid =
            self.child.as_ref().map(Child::id).unwrap_or_else(|| panic!("[{}] not running", self.label));
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("[{}] cannot read /proc/{pid}/status: {e}", self.label));
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("[{}] no VmHWM in /proc/{pid}/status", self.label))
    }

    /// The gateway's `--data-dir`: it survives restarts and kills, not the `Gateway`'s drop.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// A directory for the test's own files; it lives as long as the gateway.
    pub fn work_dir(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// The file collecting the gateway's stdout and stderr, appended to across restarts.
    pub fn log_path(&self) -> PathBuf {
        self.root.path().join("gateway.log")
    }

    /// The last `max_bytes` of the gateway's log, for failure messages.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let mut bytes = Vec::new();
            if file.read_to_end(&mut bytes).is_ok() {
                let start = bytes.len().saturating_sub(max_bytes);
                text = String::from_utf8_lossy(&bytes[start..]).into_owned();
            }
        }
        text
    }

    /// Stop the gateway with SIGTERM (a clean shutdown must exit 0) and start it again on the
    /// same data directory. The port changes; clients are configured per command from
    /// [`Gateway::endpoint`].
    pub fn restart(&mut self) {
        let status = self.terminate();
        assert!(
            status.success(),
            "[{}] holt-gateway did not exit 0 after SIGTERM: {status}\n--- gateway log ---\n{}",
            self.label,
            self.log_tail(4000)
        );
        self.spawn();
    }

    /// SIGKILL the gateway (no chance to flush anything) and wait for it to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // std's kill() is SIGKILL on Unix: exactly the crash model we want.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start a gateway again after [`Gateway::kill9`].
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "[{}] start_again() while the gateway is running", self.label);
        self.spawn();
    }

    /// SIGTERM and wait; returns the exit status.
    fn terminate(&mut self) -> ExitStatus {
        let mut child =
            self.child.take().unwrap_or_else(|| panic!("[{}] gateway is not running", self.label));
        let pid = child.id();
        // std has no SIGTERM.
        let sent = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .map(|p| rustix::process::kill_process(p, rustix::process::Signal::TERM));
        assert!(
            matches!(sent, Some(Ok(()))),
            "[{}] could not send SIGTERM to pid {pid}: {sent:?}",
            self.label
        );
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "[{}] holt-gateway still running {SHUTDOWN_TIMEOUT:?} after SIGTERM\n--- gateway log ---\n{}",
                        self.label,
                        self.log_tail(4000)
                    );
                }
                Err(e) => panic!("[{}] waiting for holt-gateway failed: {e}", self.label),
            }
        }
    }

    fn spawn(&mut self) {
        let bin = gateway_binary();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("[{}] cannot open the gateway log: {e}", self.label));
        let log_for_stderr =
            log.try_clone().unwrap_or_else(|e| panic!("[{}] cannot clone the log handle: {e}", self.label));
        let mut command = Command::new(&bin);
        match &self.tls {
            None => command.args(["--listen", "127.0.0.1:0"]),
            Some(tls) => command
                .args(["--listen", "off", "--listen-tls", "127.0.0.1:0", "--tls-cert"])
                .arg(tls.dir.join("cert.pem"))
                .arg("--tls-key")
                .arg(tls.dir.join("key.pem")),
        };
        let mut child = command
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--credentials-file")
            .arg(self.root.path().join("credentials.toml"))
            .arg("--region")
            .arg(REGION)
            .args(&self.extra_args)
            .env_remove("HOLT_CONFIG")
            .env_remove("HOLT_ACCESS_KEY")
            .env_remove("HOLT_SECRET_KEY")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_for_stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("[{}] cannot start {}: {e}", self.label, bin.display()));
        let stdout =
            child.stdout.take().unwrap_or_else(|| panic!("[{}] gateway stdout not piped", self.label));
        let (tx, rx) = mpsc::channel::<String>();
        // The reader keeps draining stdout into the log after the start-up line so the gateway
        // never blocks on a full pipe.
        thread::spawn(move || copy_stdout(stdout, log, tx));
        let found = wait_for_startup(&rx, &mut child);
        match found {
            Ok(addr) => {
                assert!(
                    addr.starts_with("127.0.0.1:"),
                    "[{}] gateway bound to {addr}, expected loopback",
                    self.label
                );
                self.addr = addr;
                self.child = Some(child);
            }
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "[{}] holt-gateway ({}) did not start: {why}\n--- gateway log ---\n{}",
                    self.label,
                    bin.display(),
                    self.log_tail(4000)
                );
            }
        }
    }
}

/// A single-node MinIO for this gateway to front when [`UPSTREAM_ENV`] asks for it, unless the
/// test configures an upstream of its own.
fn upstream_mode(label: &str, extra_args: &[String]) -> Option<Minio> {
    match std::env::var(UPSTREAM_ENV).as_deref() {
        Ok("minio") if !extra_args.iter().any(|a| a == "--upstream") => Some(Minio::start(label)),
        Ok("minio") | Ok("") | Err(_) => None,
        Ok(other) => panic!("{UPSTREAM_ENV}={other}: the only upstream the suite runs is `minio`"),
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn copy_stdout(stdout: impl Read, mut log: File, tx: mpsc::Sender<String>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let mut announced = false;
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let _ = log.write_all(line.as_bytes());
                if !announced {
                    let announced_at = line.trim_end().strip_prefix(STARTUP_LINE_PREFIX);
                    let addr = announced_at
                        .and_then(|r| r.strip_prefix("http://").or_else(|| r.strip_prefix("https://")));
                    if let Some(addr) = addr {
                        announced = true;
                        let _ = tx.send(addr.trim_end_matches('/').to_string());
                    }
                }
            }
        }
    }
}

fn wait_for_startup(rx: &mpsc::Receiver<String>, child: &mut Child) -> Result<String, String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(addr) => return Ok(addr),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                return Err(format!("exited ({status}) before printing '{STARTUP_LINE_PREFIX}ADDR'"));
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Give the reader a moment to deliver a line printed just before exiting.
            if let Ok(addr) = rx.recv_timeout(Duration::from_millis(200)) {
                return Ok(addr);
            }
            return Err(format!("exited ({status}) before printing '{STARTUP_LINE_PREFIX}ADDR'"));
        }
    }
    Err(format!("no '{STARTUP_LINE_PREFIX}ADDR' line within {STARTUP_TIMEOUT:?}"))
}

/// `HOLT_GATEWAY_BIN`, else `$CARGO_TARGET_DIR/debug/holt-gateway`, else
/// `<workspace>/target/debug/holt-gateway`. Cargo cannot hand another package's binary to these
/// tests, so `scripts/test.sh` builds it first.
pub fn gateway_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("HOLT_GATEWAY_BIN") {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "HOLT_GATEWAY_BIN={} does not exist", path.display());
        return path;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let path = target.join("debug").join("holt-gateway");
    assert!(
        path.is_file(),
        "{} not found: build it with `cargo build -p gateway --bin holt-gateway` \
         (scripts/test.sh does this) or set HOLT_GATEWAY_BIN",
        path.display()
    );
    warn_if_stale(&path);
    path
}

/// A binary older than the gateway's sources means the suite would test yesterday's code: say so.
fn warn_if_stale(bin: &Path) {
    let Ok(bin_time) = fs::metadata(bin).and_then(|m| m.modified()) else { return };
    let newest = newest_mtime(&workspace_root().join("gateway").join("src"), 0);
    if let Some(src_time) = newest {
        if src_time > bin_time {
            eprintln!(
                "warning: {} is older than gateway/src; run `cargo build -p gateway --bin holt-gateway`",
                bin.display()
            );
        }
    }
}

fn newest_mtime(dir: &Path, depth: u32) -> Option<std::time::SystemTime> {
    // Bounded recursion: the source tree is a few levels deep.
    if depth > 8 {
        return None;
    }
    let mut newest = None;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest_mtime(&path, depth + 1)
        } else {
            entry.metadata().ok().and_then(|m| m.modified().ok())
        };
        newest = newest.max(time);
    }
    newest
}

//! MinIO server processes for the upstream-mode scenarios: the store a gateway started with
//! `--upstream` fronts.
//!
//! Two layouts: one node with one drive, and two nodes with two drives each (one erasure set of
//! four drives, EC:2, on loopback ports), where stopping a node leaves reads their quorum of
//! two drives and takes writes below their quorum of three.
//!
//! Invariants:
//! - MinIO only ever listens on 127.0.0.1, on ports picked free when the [`Minio`] is made.
//! - Dropping a [`Minio`] kills every node (SIGKILL) and removes its drives.
//! - A node is "up" only once MinIO's own health endpoint says so (`/minio/health/ready` for
//!   one node, `/minio/health/cluster` for two), never after a fixed sleep.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::tools::Tool;

/// MinIO's root user, which the gateway signs its upstream requests as.
pub const MINIO_ACCESS_KEY: &str = "holtminioadmin";
/// MinIO's root password.
pub const MINIO_SECRET_KEY: &str = "holt-minio-secret-key";
/// The id of the webhook target [`Minio::notify_webhook`] configures; bucket notification
/// configurations name it as [`WEBHOOK_ARN`].
pub const WEBHOOK_ID: &str = "HOLT";
/// The ARN of that target in a `QueueConfiguration`.
pub const WEBHOOK_ARN: &str = "arn:minio:sqs::HOLT:webhook";

/// How long MinIO may take to report itself ready (first start formats the drives).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);

/// How the drives are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One server process, one drive.
    Single,
    /// Two server processes with two drives each: one erasure set of four drives.
    TwoNodes,
}

struct Node {
    port: u16,
    child: Option<Child>,
}

/// One MinIO deployment: its nodes, their drives (under a scratch directory) and logs.
pub struct Minio {
    root: tempfile::TempDir,
    label: String,
    layout: Layout,
    nodes: Vec<Node>,
    /// Extra environment for every node (the webhook target).
    env: Vec<(String, String)>,
}

impl Minio {
    /// A deployment with its ports reserved but not yet running: a gateway can be configured
    /// with [`Minio::upstream_args`] first, and MinIO pointed at the gateway's webhook after.
    pub fn new(label: &str, layout: Layout) -> Minio {
        let root = tempfile::Builder::new()
            .prefix(&format!("holt-minio-{label}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("[{label}] cannot create MinIO's temp dir: {e}"));
        let count = match layout {
            Layout::Single => 1,
            Layout::TwoNodes => 2,
        };
        // All listeners held at once, so the nodes get distinct ports.
        let listeners: Vec<TcpListener> = (0..count)
            .map(|_| {
                TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("[{label}] no free port: {e}"))
            })
            .collect();
        let nodes = listeners
            .iter()
            .map(|l| Node {
                port: l.local_addr().expect("a bound listener has an address").port(),
                child: None,
            })
            .collect();
        Minio { root, label: label.to_owned(), layout, nodes, env: Vec::new() }
    }

    /// Starts a single-node deployment and waits until it is ready.
    pub fn start(label: &str) -> Minio {
        let mut minio = Minio::new(label, Layout::Single);
        minio.run();
        minio
    }

    /// Configures (before [`Minio::run`]) a notification webhook target with id
    /// [`WEBHOOK_ID`], delivering to `endpoint` with `Authorization: Bearer TOKEN`.
    pub fn notify_webhook(&mut self, endpoint: &str, token: &str) {
        let id = WEBHOOK_ID;
        self.env.push((format!("MINIO_NOTIFY_WEBHOOK_ENABLE_{id}"), "on".into()));
        self.env.push((format!("MINIO_NOTIFY_WEBHOOK_ENDPOINT_{id}"), endpoint.into()));
        self.env.push((format!("MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_{id}"), token.into()));
    }

    /// Starts every node that is not running and waits until the deployment is ready.
    pub fn run(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.spawn(i);
            }
        }
        self.wait_ready();
    }

    /// `http://127.0.0.1:PORT` of the first node: where the gateway and direct clients go.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.nodes[0].port)
    }

    /// The gateway options that put it in front of this deployment.
    pub fn upstream_args(&self) -> Vec<String> {
        [
            "--upstream",
            &self.endpoint(),
            "--upstream-region",
            crate::gateway::REGION,
            "--upstream-access-key",
            MINIO_ACCESS_KEY,
            "--upstream-secret-key",
            MINIO_SECRET_KEY,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// SIGKILLs node `index` (its drives stay) and waits for it to be gone.
    pub fn stop_node(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `max_bytes` of every node's log, for failure messages.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        let mut text = String::new();
        for i in 0..self.nodes.len() {
            let mut bytes = Vec::new();
            if let Ok(mut file) = File::open(self.log_path(i)) {
                let _ = file.read_to_end(&mut bytes);
            }
            let start = bytes.len().saturating_sub(max_bytes);
            text.push_str(&format!("--- minio node {i} ---\n{}\n", String::from_utf8_lossy(&bytes[start..])));
        }
        text
    }

    fn log_path(&self, index: usize) -> PathBuf {
        self.root.path().join(format!("minio-{index}.log"))
    }

    /// The drive arguments every node is started with (the same list on each node).
    fn drives(&self) -> Vec<String> {
        match self.layout {
            Layout::Single => vec![self.root.path().join("drive").display().to_string()],
            Layout::TwoNodes => self
                .nodes
                .iter()
                .enumerate()
                .flat_map(|(n, node)| {
                    (0..2).map(move |d| format!("http://127.0.0.1:{}{}", node.port, self.drive_dir(n, d)))
                })
                .collect(),
        }
    }

    fn drive_dir(&self, node: usize, drive: usize) -> String {
        self.root.path().join(format!("node{node}-drive{drive}")).display().to_string()
    }

    fn spawn(&mut self, index: usize) {
        let bin = Tool::Minio.path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(index))
            .unwrap_or_else(|e| panic!("[{}] cannot open MinIO's log: {e}", self.label));
        let log_err =
            log.try_clone().unwrap_or_else(|e| panic!("[{}] cannot clone a log handle: {e}", self.label));
        let port = self.nodes[index].port;
        let mut command = Command::new(&bin);
        command
            .arg("server")
            .arg("--quiet")
            .args(["--address", &format!("127.0.0.1:{port}")])
            .args(self.drives())
            .env("MINIO_ROOT_USER", MINIO_ACCESS_KEY)
            .env("MINIO_ROOT_PASSWORD", MINIO_SECRET_KEY)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            // The drives are directories on the root filesystem, which MinIO otherwise refuses
            // in a multi-drive deployment.
            .env("MINIO_CI_CD", "on")
            // Inside a container MinIO waits for loopback hosts to resolve to another address;
            // this names the node's own endpoint as local instead.
            .env("_MINIO_SERVER_LOCAL", format!("127.0.0.1:{port}"))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("HOME", self.root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("[{}] cannot start {}: {e}", self.label, bin.display()));
        self.nodes[index].child = Some(child);
    }

    fn wait_ready(&mut self) {
        let path = match self.layout {
            Layout::Single => "/minio/health/ready",
            Layout::TwoNodes => "/minio/health/cluster",
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            for (i, node) in self.nodes.iter_mut().enumerate() {
                if let Some(child) = node.child.as_mut() {
                    if let Ok(Some(status)) = child.try_wait() {
                        node.child = None;
                        panic!("[{}] MinIO node {i} exited ({status})\n{}", self.label, self.log_tail(4000));
                    }
                }
            }
            if self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .all(|n| http_get(&format!("127.0.0.1:{}", n.port), path).map(|r| r.0) == Some(200))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] MinIO not ready within {STARTUP_TIMEOUT:?}\n{}",
                self.label,
                self.log_tail(4000)
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop_node(i);
        }
    }
}

/// `GET path` on `addr` (HTTP/1.0, no client needed): the status code and the body, or `None`
/// when nothing answers.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.get(9..12)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Some((status, body))
}

//! Where the client binaries are.
//!
//! `scripts/test.sh` exports `HOLT_AWS`, `HOLT_PYTHON`, `HOLT_S3CMD`, `HOLT_MC`, `HOLT_RCLONE`,
//! `HOLT_K6`, `HOLT_CURL`, `HOLT_CHROMIUM`, `HOLT_CHROMEDRIVER` and `HOLT_MINIO`. Without them, the cache written by `scripts/install-clients.sh`
//! (`$HOLT_CACHE_DIR`, default `<workspace>/.cache`) is used, then `PATH` for system packages.
//! A client that cannot be found FAILS the test with the command that installs it: a missing
//! client must never look like a passing scenario.

use std::path::{Path, PathBuf};

/// The clients the suite drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// The AWS CLI (`aws`), from the suite's Python venv.
    Aws,
    /// The venv's Python, which has boto3 installed; runs the scripts in `py/`.
    Python,
    /// s3cmd, from the suite's Python venv.
    S3cmd,
    /// MinIO's client `mc`.
    Mc,
    /// rclone.
    Rclone,
    /// The k6 load generator; runs the scripts in `k6/`.
    K6,
    /// curl, for raw HTTP requests no SDK would send; never installed by the suite.
    Curl,
    /// Debian's Chromium, run headless by the browser scenarios.
    Chromium,
    /// The chromedriver that matches it (Debian's `chromium-driver`), which selenium drives.
    Chromedriver,
    /// The MinIO server the upstream-mode scenarios put the gateway in front of.
    Minio,
}

impl Tool {
    /// The client's name as failure messages show it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Aws => "aws-cli",
            Tool::Python => "python (boto3 venv)",
            Tool::S3cmd => "s3cmd",
            Tool::Mc => "mc",
            Tool::Rclone => "rclone",
            Tool::K6 => "k6",
            Tool::Curl => "curl",
            Tool::Chromium => "chromium",
            Tool::Chromedriver => "chromedriver",
            Tool::Minio => "minio",
        }
    }

    fn env_var(self) -> &'static str {
        match self {
            Tool::Aws => "HOLT_AWS",
            Tool::Python => "HOLT_PYTHON",
            Tool::S3cmd => "HOLT_S3CMD",
            Tool::Mc => "HOLT_MC",
            Tool::Rclone => "HOLT_RCLONE",
            Tool::K6 => "HOLT_K6",
            Tool::Curl => "HOLT_CURL",
            Tool::Chromium => "HOLT_CHROMIUM",
            Tool::Chromedriver => "HOLT_CHROMEDRIVER",
            Tool::Minio => "HOLT_MINIO",
        }
    }

    /// Path inside the cache dir, and the name to look for on PATH.
    fn cache_path_and_path_name(self) -> (Option<&'static str>, &'static str) {
        match self {
            Tool::Aws => (Some("venv/bin/aws"), "aws"),
            Tool::Python => (Some("venv/bin/python"), "python3"),
            Tool::S3cmd => (Some("venv/bin/s3cmd"), "s3cmd"),
            Tool::Mc => (Some("bin/mc"), "mc"),
            Tool::Rclone => (Some("bin/rclone"), "rclone"),
            Tool::K6 => (Some("bin/k6"), "k6"),
            Tool::Curl => (None, "curl"),
            Tool::Chromium => (None, "chromium"),
            Tool::Chromedriver => (None, "chromedriver"),
            Tool::Minio => (Some("bin/minio"), "minio"),
        }
    }

    fn install_hint(self) -> &'static str {
        match self {
            Tool::Aws | Tool::Python | Tool::S3cmd => {
                "run scripts/install-clients.sh (Python venv with awscli, boto3, s3cmd from PyPI)"
            }
            Tool::Mc | Tool::K6 | Tool::Minio => {
                "run scripts/install-clients.sh (go install of mc, k6 and minio, needs Go)"
            }
            Tool::Rclone => "run scripts/install-clients.sh or `apt-get install -y rclone`",
            Tool::Curl => "`apt-get install -y curl`",
            Tool::Chromium | Tool::Chromedriver => {
                "run scripts/install-clients.sh or `apt-get install -y chromium chromium-driver`"
            }
        }
    }

    /// The client's executable, or a panic that fails the test and says what to install.
    ///
    /// Only the venv's python is accepted for [`Tool::Python`]: a system python without boto3
    /// would fail later with a less helpful message.
    pub fn path(self) -> PathBuf {
        if let Some(value) = std::env::var_os(self.env_var()) {
            let path = PathBuf::from(&value);
            if is_executable(&path) {
                return path;
            }
            panic!(
                "{} not found: {}={} is not an executable file; {}",
                self.name(),
                self.env_var(),
                path.display(),
                self.install_hint()
            );
        }
        let (cache_rel, path_name) = self.cache_path_and_path_name();
        if let Some(rel) = cache_rel {
            let cached = cache_dir().join(rel);
            if is_executable(&cached) {
                return cached;
            }
        }
        if self != Tool::Python {
            if let Some(found) = find_on_path(path_name) {
                return found;
            }
        }
        panic!(
            "{} not found (looked at ${}, {} and PATH): {}",
            self.name(),
            self.env_var(),
            cache_dir().display(),
            self.install_hint()
        );
    }
}

/// The repository root: this crate's parent directory.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().map(Path::to_path_buf).unwrap_or_else(|| manifest_dir.to_path_buf())
}

/// `$HOLT_CACHE_DIR`, default `<workspace>/.cache`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("HOLT_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join(".cache"))
}

/// Files shipped with this crate (`py/`, `k6/`).
pub fn crate_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate))
}

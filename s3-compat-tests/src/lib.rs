//! Harness for the real-client compatibility suite.
//!
//! The scenarios live in `tests/` (one file per client or behaviour). Each test starts its own
//! `holt-gateway` process on a free loopback port with a fresh data directory and a credentials
//! file holding two users, then drives an unmodified S3 client as a subprocess and asserts on the
//! client's exit code and on what it printed.
//!
//! Map:
//! - [`gateway`]: start, restart (SIGTERM) and SIGKILL a gateway process; parse its start-up line.
//! - [`tools`]: find the client binaries (env vars set by `scripts/test.sh`, else the cache dir
//!   written by `scripts/install-clients.sh`); a missing client fails the test with an install hint.
//! - [`exec`]: run one client step with a timeout and turn a failure into a message naming the
//!   client, the step and the output.
//! - [`data`]: deterministic payloads, MD5s, and the keys that break naive servers.
//! - [`clients`]: per-client configuration (aws-cli, boto3, s3cmd, mc, rclone, k6).
//! - [`minio`]: MinIO servers (one node, or two nodes with two drives each) for the gateway's
//!   upstream mode; `HOLT_COMPAT_UPSTREAM=minio` runs every scenario in front of one.
//!
//! ```no_run
//! use s3_compat_tests::{clients::Aws, gateway::Gateway};
//! let gw = Gateway::start("example");
//! let aws = Aws::new(&gw);
//! aws.s3(&["mb", "s3://example-bucket"]).run("create bucket").ok().stdout_has("make_bucket");
//! ```

#![warn(missing_docs)]

pub mod clients;
pub mod data;
pub mod exec;
pub mod gateway;
pub mod minio;
pub mod tools;

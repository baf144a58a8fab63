//! Configuration: flags, environment variables and an optional TOML file, with the precedence
//! flag > environment > file > default (the reference: docs/configuration.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

/// Command line (each flag also reads its environment variable; clap lets the flag win).
#[derive(Debug, Parser, Default)]
#[command(name = "holt-gateway", version, about = "S3-compatible gateway on the holt-core engine")]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "HOLT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory (meta/, bodies/, tmp/).
    #[arg(long, env = "HOLT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Listen address, e.g. 127.0.0.1:9000 (port 0 picks a free port).
    #[arg(long, env = "HOLT_LISTEN")]
    pub listen: Option<String>,
    /// HTTPS listen address, e.g. 0.0.0.0:9443; needs --tls-cert and --tls-key. `--listen
    /// off` then serves HTTPS only.
    #[arg(long, env = "HOLT_LISTEN_TLS")]
    pub listen_tls: Option<String>,
    /// PEM certificate chain (leaf first) for --listen-tls; reread on SIGHUP.
    #[arg(long, env = "HOLT_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the certificate for --listen-tls; reread on SIGHUP.
    #[arg(long, env = "HOLT_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Region name clients sign for.
    #[arg(long, env = "HOLT_REGION")]
    pub region: Option<String>,
    /// Domain for virtual-hosted-style requests (bucket.DOMAIN); off when unset.
    #[arg(long, env = "HOLT_DOMAIN")]
    pub domain: Option<String>,
    /// TOML file with `[[users]]` tables of `access_key` and `secret_key`.
    #[arg(long, env = "HOLT_CREDENTIALS_FILE")]
    pub credentials_file: Option<PathBuf>,
    /// When writes are acknowledged: sync (after fsync) or async.
    #[arg(long, env = "HOLT_DURABILITY")]
    pub durability: Option<String>,
    /// Requests handled at once, including responses whose bodies are still streaming; more
    /// get 503 SlowDown.
    #[arg(long, env = "HOLT_MAX_INFLIGHT")]
    pub max_inflight: Option<usize>,
    /// The most requests one user may have in flight; default three quarters of
    /// --max-inflight when more than one user is configured.
    #[arg(long, env = "HOLT_MAX_INFLIGHT_PER_USER")]
    pub max_inflight_per_user: Option<usize>,
    /// Engine frame-cache budget in MiB.
    #[arg(long, env = "HOLT_MEMORY_BUDGET_MIB")]
    pub memory_budget_mib: Option<u64>,
    /// Read metadata pages outside the memory budget through a mapping of the engine's frames
    /// file: on (default; a disk read error there stops the process) or off (pread).
    #[arg(long, env = "HOLT_MAPPED_READS")]
    pub mapped_reads: Option<String>,
    /// Threads for work that may block on disk (engine reads that miss the frame cache, body
    /// files); default 4 per core, at least 8.
    #[arg(long, env = "HOLT_BLOCKING_THREADS")]
    pub blocking_threads: Option<usize>,
    /// Log output: text or json.
    #[arg(long, env = "HOLT_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Bearer token `/metrics` requires (`Authorization: Bearer TOKEN`); open when unset.
    #[arg(long, env = "HOLT_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Accept AWS Signature Version 2 (header and presigned URLs): on (default) or off.
    #[arg(long, env = "HOLT_SIGV2")]
    pub sigv2: Option<String>,
    /// Upstream mode: the endpoint of the S3-compatible store that holds the bodies, e.g.
    /// `http://minio:9000` or `https://s3.eu-west-1.amazonaws.com`. Unset: standalone.
    #[arg(long, env = "HOLT_UPSTREAM")]
    pub upstream: Option<String>,
    /// The region requests to the upstream are signed for (default us-east-1).
    #[arg(long, env = "HOLT_UPSTREAM_REGION")]
    pub upstream_region: Option<String>,
    /// The gateway's access key at the upstream.
    #[arg(long, env = "HOLT_UPSTREAM_ACCESS_KEY")]
    pub upstream_access_key: Option<String>,
    /// The gateway's secret key at the upstream.
    #[arg(long, env = "HOLT_UPSTREAM_SECRET_KEY", hide_env_values = true)]
    pub upstream_secret_key: Option<String>,
    /// Upstream addressing: path (endpoint/bucket/key, the default) or virtual
    /// (bucket.endpoint/key).
    #[arg(long, env = "HOLT_UPSTREAM_STYLE")]
    pub upstream_style: Option<String>,
    /// LOCAL=UPSTREAM: serve the upstream bucket UPSTREAM as LOCAL (repeatable, or
    /// comma-separated in the environment); other buckets keep their names upstream.
    #[arg(long, env = "HOLT_UPSTREAM_BUCKETS", value_delimiter = ',')]
    pub upstream_bucket: Vec<String>,
    /// The token the upstream's event notifications carry (`Authorization: Bearer TOKEN`,
    /// or `?token=` for SNS) when posted to /_holt/events; the endpoint is off when unset.
    #[arg(long, env = "HOLT_UPSTREAM_EVENTS_TOKEN", hide_env_values = true)]
    pub upstream_events_token: Option<String>,
    /// Seconds between reconciliations, which re-list each upstream bucket and repair what
    /// the index has wrong (default 3600; 0: never).
    #[arg(long, env = "HOLT_UPSTREAM_RECONCILE_SECS")]
    pub upstream_reconcile_secs: Option<u64>,
}

/// The optional TOML file: the same keys, snake_case.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `--data-dir`: where the engine and the bodies live.
    pub data_dir: Option<PathBuf>,
    /// `--listen`: the HTTP address, or `off`.
    pub listen: Option<String>,
    /// `--listen-tls`: the HTTPS address.
    pub listen_tls: Option<String>,
    /// `--tls-cert`: PEM certificate chain, leaf first.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`: PEM private key of the certificate.
    pub tls_key: Option<PathBuf>,
    /// `--region`: the region clients sign for.
    pub region: Option<String>,
    /// `--domain`: the domain of virtual-hosted-style requests.
    pub domain: Option<String>,
    /// `--credentials-file`: TOML file of `[[users]]`.
    pub credentials_file: Option<PathBuf>,
    /// `--durability`: `sync` or `async`.
    pub durability: Option<String>,
    /// `--max-inflight`: requests handled at once.
    pub max_inflight: Option<usize>,
    /// `--max-inflight-per-user`: the most requests one user may have in flight.
    pub max_inflight_per_user: Option<usize>,
    /// `--memory-budget-mib`: the engine's frame-cache budget in MiB.
    pub memory_budget_mib: Option<u64>,
    /// `--mapped-reads`: `on` or `off`.
    pub mapped_reads: Option<String>,
    /// `--blocking-threads`: threads for work that may block on disk.
    pub blocking_threads: Option<usize>,
    /// `--log-format`: `text` or `json`.
    pub log_format: Option<String>,
    /// `--metrics-token`: the bearer token `/metrics` requires.
    pub metrics_token: Option<String>,
    /// `--sigv2`: `on` or `off`.
    pub sigv2: Option<String>,
    /// `--upstream`: the upstream endpoint URL.
    pub upstream: Option<String>,
    /// `--upstream-region`.
    pub upstream_region: Option<String>,
    /// `--upstream-access-key`.
    pub upstream_access_key: Option<String>,
    /// `--upstream-secret-key`.
    pub upstream_secret_key: Option<String>,
    /// `--upstream-style`: `path` or `virtual`.
    pub upstream_style: Option<String>,
    /// `--upstream-bucket`, as a table: local name = upstream name.
    pub upstream_buckets: Option<std::collections::HashMap<String, String>>,
    /// `--upstream-events-token`.
    pub upstream_events_token: Option<String>,
    /// `--upstream-reconcile-secs`.
    pub upstream_reconcile_secs: Option<u64>,
}

/// How log lines are written to stderr (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

/// The smallest frame-cache budget the gateway accepts, in MiB.
pub const MEMORY_BUDGET_MIB_MIN: u64 = 16;

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the engine (`meta/`) and the bodies (`bodies/`, `tmp/`) live; default
    /// `./holt-data`.
    pub data_dir: PathBuf,
    /// The HTTP listener; `None` with `--listen off` (HTTPS only).
    pub listen: Option<SocketAddr>,
    /// The HTTPS listener and the files it serves.
    pub listen_tls: Option<(SocketAddr, crate::tls::TlsFiles)>,
    /// The region clients sign for and GetBucketLocation reports; default `us-east-1`.
    pub region: String,
    /// Virtual-hosted-style domain, lower-cased without leading or trailing dots; `None`: path
    /// style only.
    pub domain: Option<String>,
    /// The users file; `None`: the one user of `HOLT_ACCESS_KEY`/`HOLT_SECRET_KEY`, else the
    /// development user (loopback only).
    pub credentials_file: Option<PathBuf>,
    /// `Sync` (the default) or `Async`, for every write.
    pub durability: holt_core::Durability,
    /// Requests handled at once (at least 1; default 1024).
    pub max_inflight: usize,
    /// 0: the default share (see `Settings::max_inflight_per_user`).
    pub max_inflight_per_user: usize,
    /// The engine's frame-cache budget in MiB (at least `MEMORY_BUDGET_MIB_MIN`; default 1024).
    pub memory_budget_mib: u64,
    /// `holt_core::Options::mapped_reads`.
    pub mapped_reads: bool,
    /// Size of tokio's blocking pool (at least 1; default 4 per core, at least 8).
    pub blocking_threads: usize,
    /// How logs are written.
    pub log_format: LogFormat,
    /// See `Cli::metrics_token`.
    pub metrics_token: Option<String>,
    /// Whether Signature Version 2 is accepted.
    pub sigv2: bool,
    /// Upstream mode's store; `None`: standalone.
    pub upstream: Option<crate::upstream::UpstreamConfig>,
    /// See `Cli::upstream_events_token`.
    pub upstream_events_token: Option<String>,
    /// Time between reconciliations; `None`: never.
    pub upstream_reconcile: Option<Duration>,
}

/// An `on`/`off` setting named `flag`; unset is on.
fn on_off(flag: &str, value: Option<String>) -> Result<bool, String> {
    match value.as_deref() {
        None | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(format!("{flag} must be on or off, not {other}")),
    }
}

/// The default size of the blocking pool: 4 threads per core, at least 8. Each thread holds
/// a stack and an allocator heap of its own; with tokio's default of 512, a gateway whose
/// metadata was 12 times its 16 MiB budget grew to ~200 threads under 64 connections of
/// GETs and peaked at 198-248 MB resident, against 92-100 MB with 8 threads, which also
/// served more (41-44k against 33-36k GETs/s; benches/RESULTS.md).
fn default_blocking_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).saturating_mul(4).max(8)
}

impl Config {
    /// Refuses to serve the development user (whose secret is published) on an address other
    /// machines can reach: only loopback addresses may run without configured credentials.
    pub fn check_development_user(&self) -> Result<(), String> {
        let exposed =
            self.listen.iter().chain(self.listen_tls.iter().map(|(a, _)| a)).find(|a| !a.ip().is_loopback());
        match exposed {
            None => Ok(()),
            Some(addr) => Err(format!(
                "no credentials configured and {addr} is not a loopback address: the development user's secret \
                 is published, so it only serves loopback. Set HOLT_ACCESS_KEY and HOLT_SECRET_KEY, or \
                 --credentials-file"
            )),
        }
    }

    /// Every address the gateway listens on, for messages.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.listen.iter().copied().chain(self.listen_tls.iter().map(|(a, _)| *a)).collect()
    }

    /// Resolves flags/env (`cli`) over the TOML file over the defaults.
    pub fn resolve(cli: Cli) -> Result<Config, String> {
        let file = match &cli.config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
                toml::from_str::<FileConfig>(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?
            }
            None => FileConfig::default(),
        };
        Self::merge(cli, file)
    }

    /// Resolves `cli` over `file` over the defaults and checks the values; the error names the
    /// flag at fault.
    pub fn merge(cli: Cli, file: FileConfig) -> Result<Config, String> {
        let upstream = Self::upstream(&cli, &file)?;
        let listen_text = cli.listen.or(file.listen).unwrap_or_else(|| "127.0.0.1:9000".into());
        let listen = match listen_text.as_str() {
            "off" => None,
            text => Some(text.parse::<SocketAddr>().map_err(|e| format!("--listen {text}: {e}"))?),
        };
        let tls_files = match (cli.tls_cert.or(file.tls_cert), cli.tls_key.or(file.tls_key)) {
            (Some(cert), Some(key)) => Some(crate::tls::TlsFiles { cert, key }),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together".into()),
        };
        let listen_tls = match (cli.listen_tls.or(file.listen_tls), tls_files) {
            (Some(text), Some(files)) => {
                let addr = text.parse::<SocketAddr>().map_err(|e| format!("--listen-tls {text}: {e}"))?;
                Some((addr, files))
            }
            (None, None) => None,
            (Some(_), None) => return Err("--listen-tls needs --tls-cert and --tls-key".into()),
            (None, Some(_)) => {
                return Err("--tls-cert and --tls-key need --listen-tls (the HTTPS address)".into())
            }
        };
        if listen.is_none() && listen_tls.is_none() {
            return Err("--listen off leaves nothing to listen on: give --listen-tls".into());
        }
        let durability = match cli.durability.or(file.durability).as_deref() {
            None | Some("sync") => holt_core::Durability::Sync,
            Some("async") => holt_core::Durability::Async,
            Some(other) => return Err(format!("--durability must be sync or async, not {other}")),
        };
        let log_format = match cli.log_format.or(file.log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => return Err(format!("--log-format must be text or json, not {other}")),
        };
        let max_inflight = cli.max_inflight.or(file.max_inflight).unwrap_or(1024);
        if max_inflight == 0 {
            return Err("--max-inflight must be at least 1".into());
        }
        let memory_budget_mib = cli.memory_budget_mib.or(file.memory_budget_mib).unwrap_or(1024);
        // A decoded 512 KiB frame takes about 1 MiB; below a few frames' worth, every request
        // that misses the cache would evict and re-read the frame another request needs.
        if memory_budget_mib < MEMORY_BUDGET_MIB_MIN {
            return Err(format!(
                "--memory-budget-mib must be at least {MEMORY_BUDGET_MIB_MIN} (the frame cache needs room for \
                 several decoded 512 KiB frames), not {memory_budget_mib}"
            ));
        }
        let blocking_threads =
            cli.blocking_threads.or(file.blocking_threads).unwrap_or_else(default_blocking_threads);
        if blocking_threads == 0 {
            return Err("--blocking-threads must be at least 1".into());
        }
        let sigv2 = on_off("--sigv2", cli.sigv2.or(file.sigv2))?;
        let mapped_reads = on_off("--mapped-reads", cli.mapped_reads.or(file.mapped_reads))?;
        let domain = cli
            .domain
            .or(file.domain)
            .map(|d| d.trim_matches('.').to_ascii_lowercase())
            .filter(|d| !d.is_empty());
        let upstream_events_token = cli
            .upstream_events_token
            .clone()
            .or(file.upstream_events_token.clone())
            .filter(|t| !t.is_empty());
        let reconcile_secs = cli.upstream_reconcile_secs.or(file.upstream_reconcile_secs).unwrap_or(3600);
        let upstream_reconcile = (reconcile_secs > 0).then(|| Duration::from_secs(reconcile_secs));
        Ok(Config {
            upstream_events_token,
            upstream_reconcile,
            data_dir: cli.data_dir.or(file.data_dir).unwrap_or_else(|| PathBuf::from("./holt-data")),
            listen,
            listen_tls,
            region: cli.region.or(file.region).unwrap_or_else(|| "us-east-1".into()),
            domain,
            credentials_file: cli.credentials_file.or(file.credentials_file),
            durability,
            max_inflight,
            max_inflight_per_user: cli.max_inflight_per_user.or(file.max_inflight_per_user).unwrap_or(0),
            memory_budget_mib,
            mapped_reads,
            blocking_threads,
            log_format,
            metrics_token: cli.metrics_token.or(file.metrics_token).filter(|t| !t.is_empty()),
            sigv2,
            upstream,
        })
    }

    /// The upstream settings of `cli` over `file`; an error names what is missing or wrong.
    fn upstream(cli: &Cli, file: &FileConfig) -> Result<Option<crate::upstream::UpstreamConfig>, String> {
        let pick = |c: &Option<String>, f: &Option<String>| c.clone().or_else(|| f.clone());
        let Some(endpoint) = pick(&cli.upstream, &file.upstream) else {
            let stray = cli.upstream_access_key.is_some() || !cli.upstream_bucket.is_empty();
            return if stray {
                Err("the --upstream-* settings need --upstream (the endpoint)".into())
            } else {
                Ok(None)
            };
        };
        let endpoint = url::Url::parse(&endpoint).map_err(|e| format!("--upstream {endpoint}: {e}"))?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none() {
            return Err(format!("--upstream must be an http:// or https:// URL with a host, not {endpoint}"));
        }
        let access_key = pick(&cli.upstream_access_key, &file.upstream_access_key)
            .ok_or("--upstream needs --upstream-access-key (HOLT_UPSTREAM_ACCESS_KEY)")?;
        let secret_key = pick(&cli.upstream_secret_key, &file.upstream_secret_key)
            .ok_or("--upstream needs --upstream-secret-key (HOLT_UPSTREAM_SECRET_KEY)")?;
        let path_style = match pick(&cli.upstream_style, &file.upstream_style).as_deref() {
            None | Some("path") => true,
            Some("virtual") => false,
            Some(other) => return Err(format!("--upstream-style must be path or virtual, not {other}")),
        };
        let mut buckets = file.upstream_buckets.clone().unwrap_or_default();
        for pair in &cli.upstream_bucket {
            let (local, remote) = pair
                .split_once('=')
                .filter(|(l, r)| !l.is_empty() && !r.is_empty())
                .ok_or_else(|| format!("--upstream-bucket takes LOCAL=UPSTREAM, not {pair}"))?;
            buckets.insert(local.to_owned(), remote.to_owned());
        }
        Ok(Some(crate::upstream::UpstreamConfig {
            endpoint,
            region: pick(&cli.upstream_region, &file.upstream_region).unwrap_or_else(|| "us-east-1".into()),
            access_key,
            secret_key,
            path_style,
            buckets,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_development_user_serves_loopback_only() {
        let with = |listen: &str| {
            Config::merge(Cli { listen: Some(listen.into()), ..Cli::default() }, FileConfig::default())
                .unwrap()
        };
        assert!(with("127.0.0.1:9000").check_development_user().is_ok());
        assert!(with("[::1]:9000").check_development_user().is_ok());
        for exposed in ["0.0.0.0:9000", "[::]:9000", "192.168.1.5:9000"] {
            let err = with(exposed).check_development_user().unwrap_err();
            assert!(err.contains("not a loopback address"), "{exposed}: {err}");
        }
    }

    #[test]
    fn defaults() {
        let c = Config::merge(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.listen.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:9000"));
        assert!(c.listen_tls.is_none());
        assert_eq!(c.region, "us-east-1");
        assert_eq!(c.data_dir, PathBuf::from("./holt-data"));
        assert_eq!(c.durability, holt_core::Durability::Sync);
        assert_eq!(c.max_inflight, 1024);
        assert_eq!(c.memory_budget_mib, 1024);
        assert!(c.mapped_reads && c.sigv2);
        assert_eq!(c.log_format, LogFormat::Text);
        assert!(c.domain.is_none());
    }

    #[test]
    fn flags_beat_file() {
        let file: FileConfig = toml::from_str(
            "listen = \"0.0.0.0:1\"\nregion = \"eu-west-1\"\nmax_inflight = 5\ndurability = \"async\"",
        )
        .unwrap();
        let cli = Cli { region: Some("us-west-2".into()), ..Default::default() };
        let c = Config::merge(cli, file).unwrap();
        assert_eq!(c.region, "us-west-2");
        assert_eq!(c.listen.map(|a| a.to_string()).as_deref(), Some("0.0.0.0:1"));
        assert_eq!(c.max_inflight, 5);
        assert_eq!(c.durability, holt_core::Durability::Async);
    }

    #[test]
    fn tls_flags_go_together() {
        let tls = |listen_tls: Option<&str>, cert: Option<&str>, key: Option<&str>, listen: Option<&str>| {
            let cli = Cli {
                listen_tls: listen_tls.map(Into::into),
                tls_cert: cert.map(Into::into),
                tls_key: key.map(Into::into),
                listen: listen.map(Into::into),
                ..Cli::default()
            };
            Config::merge(cli, FileConfig::default())
        };
        let c = tls(Some("127.0.0.1:9443"), Some("c.pem"), Some("k.pem"), None).unwrap();
        assert_eq!(c.addresses().len(), 2);
        let c = tls(Some("127.0.0.1:9443"), Some("c.pem"), Some("k.pem"), Some("off")).unwrap();
        assert_eq!(c.addresses().len(), 1);
        for (listen_tls, cert, key, listen) in [
            (Some("127.0.0.1:9443"), None, None, None),
            (None, Some("c.pem"), Some("k.pem"), None),
            (Some("127.0.0.1:9443"), Some("c.pem"), None, None),
            (None, None, None, Some("off")),
        ] {
            assert!(
                tls(listen_tls, cert, key, listen).is_err(),
                "{listen_tls:?} {cert:?} {key:?} {listen:?}"
            );
        }
        let exposed = tls(Some("0.0.0.0:9443"), Some("c.pem"), Some("k.pem"), None).unwrap();
        assert!(exposed.check_development_user().is_err());
    }

    #[test]
    fn memory_budget_has_a_floor() {
        for (mib, ok) in [(0, false), (MEMORY_BUDGET_MIB_MIN - 1, false), (MEMORY_BUDGET_MIB_MIN, true)] {
            let cli = Cli { memory_budget_mib: Some(mib), ..Default::default() };
            assert_eq!(Config::merge(cli, FileConfig::default()).is_ok(), ok, "{mib} MiB");
        }
    }

    #[test]
    fn rejects_bad_values_and_unknown_keys() {
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
        let cli = Cli { durability: Some("maybe".into()), ..Default::default() };
        assert!(Config::merge(cli, FileConfig::default()).is_err());
        let cli = Cli { listen: Some("nowhere".into()), ..Default::default() };
        assert!(Config::merge(cli, FileConfig::default()).is_err());
        let cli = Cli { mapped_reads: Some("maybe".into()), ..Default::default() };
        assert!(Config::merge(cli, FileConfig::default()).unwrap_err().contains("--mapped-reads"));
        let file: FileConfig = toml::from_str("mapped_reads = \"off\"").unwrap();
        assert!(!Config::merge(Cli::default(), file).unwrap().mapped_reads);
    }

    #[test]
    fn env_is_read_and_flag_wins() {
        // clap resolves flag over environment; exercise it through try_parse_from.
        let cli = Cli::try_parse_from(["holt-gateway", "--region", "flag-region"]).unwrap();
        assert_eq!(cli.region.as_deref(), Some("flag-region"));
    }
}

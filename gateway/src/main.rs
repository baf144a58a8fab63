//! holt-gateway: configuration and serving, nothing else.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use gateway::auth::{Credentials, DEV_ACCESS_KEY, DEV_SECRET_KEY};
use gateway::config::{Cli, Config, LogFormat};
use gateway::storage::bodies::INLINE_MAX_DEFAULT;
use gateway::storage::Store;
use gateway::{app, server, AppState, Settings};

/// The process's allocator. The engine allocates a node per tree level and listings allocate
/// thousands of small vectors per page: glibc's malloc consolidating its free lists on a heap
/// fragmented by millions of live nodes made listings several times slower.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let config = match Config::resolve(Cli::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("holt-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(config.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(config.blocking_threads)
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("holt-gateway: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("holt-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load_credentials(config: &Config) -> Result<Credentials, String> {
    if let Some(path) = &config.credentials_file {
        return Credentials::from_file(path).map_err(|e| format!("credentials file {}: {e}", path.display()));
    }
    if let Some(c) = Credentials::from_env().map_err(|e| format!("HOLT_ACCESS_KEY/HOLT_SECRET_KEY: {e}"))? {
        return Ok(c);
    }
    config.check_development_user()?;
    // The log names the user, never a secret; the terminal gets the published development
    // secret once, so a first run can be used at once (loopback only, checked above).
    tracing::warn!(
        access_key = DEV_ACCESS_KEY,
        "no credentials configured: using the DEVELOPMENT user on a loopback address"
    );
    eprintln!(
        "WARNING: no credentials configured; development user access key '{DEV_ACCESS_KEY}', secret key \
         '{DEV_SECRET_KEY}' (loopback only)"
    );
    Ok(Credentials::development())
}

/// On each SIGHUP: rereads the credentials file (if one is configured) and the TLS
/// certificate and key (if served). What fails to load is logged and counted, and the old
/// state kept; what loads is served from the next request (or handshake) on, while requests
/// in flight finish with what they started with.
async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    config: Config,
    state: std::sync::Weak<gateway::Inner>,
    certificates: Option<std::sync::Arc<gateway::tls::Certificates>>,
) {
    while hangups.recv().await.is_some() {
        let Some(state) = state.upgrade().map(AppState) else { return };
        tracing::info!("SIGHUP: reloading");
        if let Some(path) = &config.credentials_file {
            let path = path.clone();
            let loaded = tokio::task::spawn_blocking(move || Credentials::from_file(&path))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            match loaded {
                Ok(credentials) => {
                    let users = credentials.len();
                    state.replace_credentials(credentials);
                    state.0.metrics.record_reload("credentials", true);
                    tracing::info!(users, "credentials reloaded");
                }
                Err(e) => {
                    state.0.metrics.record_reload("credentials", false);
                    tracing::error!(error = %e, "credentials reload failed; the previous users stay");
                }
            }
        }
        if let Some(certificates) = &certificates {
            let certificates = std::sync::Arc::clone(certificates);
            let reloaded = tokio::task::spawn_blocking(move || certificates.reload())
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r);
            match reloaded {
                Ok(()) => {
                    state.0.metrics.record_reload("tls", true);
                    tracing::info!("TLS certificate reloaded");
                }
                Err(e) => {
                    state.0.metrics.record_reload("tls", false);
                    tracing::error!(error = %e, "TLS reload failed; the previous certificate stays");
                }
            }
        }
    }
}

async fn run(config: Config) -> Result<(), String> {
    let credentials = load_credentials(&config)?;
    let meta_dir = config.data_dir.join("meta");
    std::fs::create_dir_all(&meta_dir).map_err(|e| format!("creating {}: {e}", meta_dir.display()))?;
    let options = holt_core::Options {
        durability: config.durability,
        memory_budget_bytes: usize::try_from(config.memory_budget_mib.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX),
        weigher: Some(gateway::storage::meta::RECORD_WEIGHER),
        mapped_reads: config.mapped_reads,
        ..holt_core::Options::default()
    };
    let db = tokio::task::spawn_blocking(move || holt_core::Db::open(&meta_dir, options))
        .await
        .map_err(|e| format!("opening the engine: {e}"))?
        .map_err(|e| format!("opening the engine: {e}"))?;
    let data_dir = config.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(db, &data_dir, INLINE_MAX_DEFAULT))
        .await
        .map_err(|e| format!("opening the body store: {e}"))?
        .map_err(|e| format!("opening the body store: {e}"))?;
    let store = match &config.upstream {
        Some(up) => {
            tracing::info!(endpoint = %up.endpoint, "upstream mode: bodies and writes go to the upstream store");
            let client = gateway::upstream::Upstream::new(up.clone())
                .map_err(|e| format!("the upstream client (root certificates): {e}"))?;
            let store = store.with_upstream(client);
            // Keys whose writes a crash interrupted first, then the imports it interrupted.
            let recovered = gateway::handlers::through::recover_intents(&store)
                .await
                .map_err(|e| format!("repairing interrupted upstream writes: {:?} {}", e.code, e.message))?;
            if recovered.repaired > 0 {
                tracing::info!(recovered.repaired, "repaired keys whose upstream writes were interrupted");
            }
            if recovered.left > 0 {
                // Serving anyway: listings and HEAD answer from the index while the upstream
                // is away; these keys are repaired as soon as it answers.
                tracing::warn!(
                    recovered.left,
                    "keys whose upstream writes were interrupted wait for the upstream"
                );
                gateway::handlers::through::spawn_intent_retries(store.clone());
            }
            gateway::handlers::through::resume_imports(&store)
                .await
                .map_err(|e| format!("resuming imports: {:?} {}", e.code, e.message))?;
            gateway::handlers::through::resume_header_fills(&store)
                .await
                .map_err(|e| format!("resuming header fills: {:?} {}", e.code, e.message))?;
            if let Some(every) = config.upstream_reconcile {
                gateway::handlers::through::spawn_reconciler(store.clone(), every);
            }
            store
        }
        None => store,
    };
    let settings = Settings {
        region: config.region.clone(),
        domain: config.domain.clone(),
        max_inflight: config.max_inflight,
        max_inflight_per_user: config.max_inflight_per_user,
        metrics_token: config.metrics_token.clone(),
        sigv2: config.sigv2,
        events_token: config.upstream_events_token.clone(),
        ..Settings::default()
    };
    let state = AppState::new(store, credentials, settings);
    // Taken over before the start-up line, so no SIGHUP ever meets its default action
    // (ending the process).
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("listening for SIGHUP: {e}"))?;
    let certificates = match &config.listen_tls {
        Some((_, files)) => Some(gateway::tls::Certificates::load(files.clone())?),
        None => None,
    };
    let mut listeners = Vec::new();
    if let Some(addr) = config.listen {
        let tcp = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("binding {addr}: {e}"))?;
        let local = tcp.local_addr().map_err(|e| format!("local address: {e}"))?;
        println!("holt-gateway listening on http://{local}");
        tracing::info!(addr = %local, data_dir = %config.data_dir.display(), "accepting connections");
        listeners.push(server::Listener::plain(tcp));
    }
    if let (Some((addr, _)), Some(certificates)) = (&config.listen_tls, &certificates) {
        let tcp = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("binding {addr}: {e}"))?;
        let local = tcp.local_addr().map_err(|e| format!("local address: {e}"))?;
        println!("holt-gateway listening on https://{local}");
        tracing::info!(addr = %local, data_dir = %config.data_dir.display(), "accepting TLS connections");
        listeners.push(server::Listener { tcp, tls: Some(certificates.acceptor()?) });
    }
    // Holds the state weakly: the engine closes when the last request lets go of it.
    tokio::spawn(reload_on_hangup(
        hangups,
        config.clone(),
        std::sync::Arc::downgrade(&state.0),
        certificates,
    ));
    let outcome = server::serve_with(
        listeners,
        app(state.clone()),
        server::shutdown_signal(),
        server::ServerLimits::default(),
    )
    .await;

    // No connection holds the state any more (those left after the grace period were cut
    // off): close the engine whichever way serving ended, then report a forced shutdown.
    state.close().await?;
    tracing::info!("engine closed");
    match outcome {
        server::Shutdown::Drained => {
            tracing::info!("bye");
            Ok(())
        }
        server::Shutdown::GraceElapsed => {
            Err("the shutdown grace period ran out: connections still open were cut off".to_owned())
        }
    }
}

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

async fn run(config: Config) -> Result<(), String> {
    let credentials = load_credentials(&config)?;
    let meta_dir = config.data_dir.join("meta");
    std::fs::create_dir_all(&meta_dir).map_err(|e| format!("creating {}: {e}", meta_dir.display()))?;
    let options = holt_core::Options {
        durability: config.durability,
        memory_budget_bytes: usize::try_from(config.memory_budget_mib.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX),
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
    let settings = Settings {
        region: config.region.clone(),
        domain: config.domain.clone(),
        max_inflight: config.max_inflight,
        max_inflight_per_user: config.max_inflight_per_user,
        metrics_token: config.metrics_token.clone(),
        ..Settings::default()
    };
    let state = AppState::new(store, credentials, settings);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("binding {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| format!("local address: {e}"))?;
    println!("holt-gateway listening on http://{addr}");
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "accepting connections");
    let outcome = server::serve(listener, app(state.clone()), server::shutdown_signal()).await;

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

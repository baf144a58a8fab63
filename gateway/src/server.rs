//! The HTTP/1.1 accept loop: hyper with bounded header buffers, a header-read timeout
//! (slowloris) and a write-stall timeout (clients that stop reading), a wire-level watch for requests carrying both `Content-Length` and
//! `Transfer-Encoding` (`framing`), and graceful shutdown that lets in-flight requests finish
//! within a grace period and then cuts the rest off, so the engine can be closed either way.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use crate::framing;

/// Time a client has to send the whole request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// hyper's read buffer for a request head. Heads between `HEADER_BYTES_MAX` and this get the
/// S3 400 from the pipeline; larger ones are refused by hyper (431) before parsing finishes.
pub const HEAD_BUFFER_BYTES_MAX: usize = 64 * 1024;
/// How long a response write may make no progress (the client stopped reading) before the
/// connection is closed, releasing the request's in-flight slot.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long shutdown waits for in-flight requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Most header fields in one request: more than a request within S3's limits can carry
/// (2 KiB of user metadata is at most ~170 `x-amz-meta-*` fields, every one of them signed),
/// so the 8 KiB header limit, which answers with an S3 error, is the one clients meet.
const HEADERS_COUNT_MAX: usize = 256;

/// Connection limits of `serve_with`.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Time a client has to send a whole request head (slowloris).
    pub header_read_timeout: Duration,
    /// How long a write to the client may make no progress before the connection is closed.
    pub write_stall_timeout: Duration,
    /// How long shutdown waits for open connections before cutting them off.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
            shutdown_grace: SHUTDOWN_GRACE,
        }
    }
}

/// How `serve` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Every connection finished its requests within the grace period.
    Drained,
    /// The grace period ran out; the connections still open were cut off.
    GraceElapsed,
}

/// A socket to accept connections on: plain HTTP, or HTTPS through `tls`.
pub struct Listener {
    /// The bound socket.
    pub tcp: TcpListener,
    /// Performs the TLS handshake on each accepted connection; `None` for plain HTTP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Listener {
    /// A listener serving plain HTTP on `tcp`.
    pub fn plain(tcp: TcpListener) -> Listener {
        Listener { tcp, tls: None }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then waits (up to
/// `SHUTDOWN_GRACE`) for open connections to finish their requests and cuts off the rest.
/// When this returns, no connection holds the router (nor the state inside it) any more.
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) -> Shutdown {
    serve_with(vec![Listener::plain(listener)], router, shutdown, ServerLimits::default()).await
}

/// `serve` on several listeners (the HTTP one and the HTTPS one), with explicit limits.
pub async fn serve_with(
    listeners: Vec<Listener>,
    router: Router,
    shutdown: impl Future<Output = ()>,
    limits: ServerLimits,
) -> Shutdown {
    let graceful = GracefulShutdown::new();
    // Every connection task, so those left at the end of the grace period can be aborted.
    let mut connections = tokio::task::JoinSet::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(HEAD_BUFFER_BYTES_MAX)
        // `max_buf_size` alone is checked only between reads, so a head that arrives in large
        // reads can exceed it; this limit is checked on the parsed head itself.
        .max_header_size(HEAD_BUFFER_BYTES_MAX)
        .max_headers(HEADERS_COUNT_MAX)
        .keep_alive(true);
    // Accepted connections from every listener arrive here, each with its listener's TLS.
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::channel(64);
    let mut acceptors = tokio::task::JoinSet::new();
    for listener in listeners {
        acceptors.spawn(accept_loop(listener, accepted_tx.clone()));
    }
    drop(accepted_tx);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            Some((stream, peer, tls)) = accepted.recv() => {
                let _ = stream.set_nodelay(true);
                let connection = Connection {
                    builder: builder.clone(),
                    router: router.clone(),
                    watcher: graceful.watcher(),
                    write_stall_timeout: limits.write_stall_timeout,
                    peer,
                    secure: tls.is_some(),
                };
                match tls {
                    None => connections.spawn(connection.serve(stream)),
                    Some(acceptor) => {
                        let handshake_timeout = limits.header_read_timeout;
                        connections.spawn(async move {
                            // The handshake has the time a request head has (slowloris).
                            match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                                Ok(Ok(stream)) => connection.serve(stream).await,
                                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                            }
                        })
                    }
                };
            }
            // Reap finished connections, so the set stays as large as the open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    acceptors.shutdown().await;
    drop(accepted);
    let outcome = tokio::select! {
        () = graceful.shutdown() => {
            tracing::info!("all connections closed");
            Shutdown::Drained
        }
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(open = connections.len(), "shutdown grace period elapsed; cutting off the connections still open");
            Shutdown::GraceElapsed
        }
    };
    // Abort whatever is left and wait for it: a connection task owns a clone of the router,
    // and through it the engine, which can be closed only once nothing else holds it.
    connections.shutdown().await;
    outcome
}

type Accepted = (tokio::net::TcpStream, std::net::SocketAddr, Option<tokio_rustls::TlsAcceptor>);

/// Accepts connections on `listener` and hands them on, until the receiver is gone.
async fn accept_loop(listener: Listener, to: tokio::sync::mpsc::Sender<Accepted>) {
    loop {
        match listener.tcp.accept().await {
            Ok((stream, peer)) => {
                if to.send((stream, peer, listener.tls.clone())).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What serving one accepted connection needs.
struct Connection {
    builder: hyper::server::conn::http1::Builder,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
    write_stall_timeout: Duration,
    peer: std::net::SocketAddr,
    /// Whether the connection is TLS: its requests carry `Secure`.
    secure: bool,
}

/// Marks a request that arrived over TLS (an extension), for the URLs a response names.
#[derive(Debug, Clone, Copy)]
pub struct Secure;

impl Connection {
    /// Serves the connection's requests until it closes (or shutdown cuts it off).
    async fn serve<IO>(self, stream: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        // hyper hides a request's conflicting length headers from the service; the watcher
        // sees them on the wire and the request is marked (see `framing`). It also closes the
        // connection when a response stops draining.
        let heads = framing::Heads::new();
        let io = TokioIo::new(framing::Watched::new(stream, heads.clone(), self.write_stall_timeout));
        let secure = self.secure;
        let service = TowerToHyperService::new(self.router.map_request(
            move |mut req: http::Request<hyper::body::Incoming>| {
                if heads.next_is_conflicting() {
                    req.extensions_mut().insert(framing::ConflictingLengthHeaders);
                }
                if secure {
                    req.extensions_mut().insert(Secure);
                }
                req
            },
        ));
        let conn = self.watcher.watch(self.builder.serve_connection(io, service));
        if let Err(e) = conn.await {
            tracing::debug!(peer = %self.peer, error = %e, "connection ended with an error");
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutdown signal received");
}

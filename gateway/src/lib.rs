//! holt-gateway: an S3-compatible HTTP front end whose metadata lives in holt-core.
//!
//! One request pipeline, top to bottom (`serve`): request id → in-flight cap → operational
//! endpoints (`/health`, `/metrics`) → header limits → the console's files (`console`) →
//! CORS preflight (`handlers::cors`) → route (`routing`) → authenticate (`auth`, or an
//! anonymous grant: `handlers::policy`) → `handlers::dispatch` → response (errors become S3
//! `<Error>` documents carrying the request id; CORS headers added for an `Origin`). `app(state)` returns the axum `Router`, so tests drive it with
//! `app(state).oneshot(request)` and no socket; `server` adds the hyper connection limits.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod checksum;
pub mod config;
pub mod console;
pub mod error;
pub mod framing;
pub mod handlers;
pub mod metrics;
pub mod routing;
pub mod server;
pub mod storage;
pub mod time;
pub mod tls;
pub mod upstream;
pub mod xml;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::FutureExt as _;
use http::{HeaderValue, Method, StatusCode};
use hyper::body::{Frame, SizeHint};
use tracing::Instrument as _;

use error::{S3Error, S3ErrorCode, S3Result};
use storage::Store;

/// Largest total size of the request headers (names + values), as S3 enforces.
pub const HEADER_BYTES_MAX: usize = 8 * 1024;
/// How long `AppState::close` waits for engine calls still running to let go of the engine.
const ENGINE_RELEASE_WAIT: Duration = Duration::from_secs(10);
const ENGINE_RELEASE_POLL: Duration = Duration::from_millis(10);

/// Settings the request pipeline needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The region credential scopes must name and GetBucketLocation reports.
    pub region: String,
    /// Virtual-hosted style is on when set: `bucket.<domain>`.
    pub domain: Option<String>,
    /// Requests handled at once, including responses whose bodies are still streaming; past
    /// it, 503 SlowDown.
    pub max_inflight: usize,
    /// Of those, the most one user may hold (503 SlowDown past it), so that one user's slow
    /// or stalled requests cannot lock the others out. 0: three quarters of `max_inflight`
    /// when more than one user is configured, no share of its own for a single user.
    pub max_inflight_per_user: usize,
    /// Largest accepted clock skew of signed requests.
    pub clock_skew_max: Duration,
    /// Longest a request body may send nothing (400 RequestTimeout past it): a body that
    /// stalls holds an in-flight slot.
    pub body_idle_timeout: Duration,
    /// Slowest a request body may arrive on average, in bytes a second, once
    /// `body_rate_grace` has passed (400 RequestTimeout below it): a trickle of one byte now
    /// and then would otherwise hold a slot for as long as it likes.
    pub body_min_rate: u64,
    /// How long after the body starts `body_min_rate` begins to apply; before then only
    /// `body_idle_timeout` bounds it.
    pub body_rate_grace: Duration,
    /// When set, `/metrics` answers only requests carrying `Authorization: Bearer <token>`
    /// (as Prometheus's `authorization` scrape setting sends it); open to anyone otherwise.
    pub metrics_token: Option<String>,
    /// Whether AWS Signature Version 2 is accepted (`--sigv2`): boto3 and s3cmd presign with
    /// it by default.
    pub sigv2: bool,
    /// Upstream mode: the token event notifications must carry (`handlers::events`); the
    /// endpoint is off when unset.
    pub events_token: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            region: "us-east-1".into(),
            domain: None,
            max_inflight: 1024,
            max_inflight_per_user: 0,
            clock_skew_max: Duration::from_secs(15 * 60),
            body_idle_timeout: Duration::from_secs(20),
            body_min_rate: 1024,
            body_rate_grace: Duration::from_secs(30),
            metrics_token: None,
            sigv2: true,
            events_token: None,
        }
    }
}

/// What `AppState` shares: the store, the users, the settings and the admission state.
/// Public so handlers, `main` and integration tests can reach its fields through `AppState.0`.
pub struct Inner {
    /// The engine and the body store.
    pub store: Store,
    /// The users, swapped whole when the credentials file is reloaded (`reload_credentials`):
    /// a request authenticates against the table it loaded.
    pub credentials: arc_swap::ArcSwap<auth::Credentials>,
    /// What authentication checks: region, clock skew, SigV2, domain (derived from `settings`).
    pub auth_config: auth::AuthConfig,
    /// The settings the state was built with.
    pub settings: Settings,
    /// Request counters and latencies for `/metrics`.
    pub metrics: metrics::Metrics,
    inflight: Arc<tokio::sync::Semaphore>,
    /// `/metrics` renders taken at once: it is outside the in-flight limit, so this bounds
    /// what a flood of scrapes can cost (more get 503).
    metrics_renders: tokio::sync::Semaphore,
    /// Requests each user has in flight (authenticated ones), and the most one may have.
    user_inflight: parking_lot::Mutex<std::collections::HashMap<String, usize>>,
    /// `--max-inflight-per-user`; 0 for the default share, which depends on how many users
    /// there are (see `user_inflight_max`).
    user_inflight_setting: usize,
    /// Admission of requests whose CPU cost grows with what the request lists (see
    /// `Inner::heavy_work`).
    heavy: HeavyWork,
}

/// Work whose cost grows with a count the client chooses (parsing a CompleteMultipartUpload
/// document of thousands of parts and checking it against the part records, parsing a
/// DeleteObjects document of 1,000 keys), when it is large (`HEAVY_DOCUMENT_BYTES`,
/// `HEAVY_PARTS`): it runs one step per user at a time, at most one fewer than the cores at
/// once, on threads of its own at the lowest CPU priority (`HEAVY_NICE`). One user sending
/// many such requests then costs the others at most the CPU they leave idle, instead of every
/// core. Waiters queue in arrival order; they hold in-flight slots meanwhile, so a user's
/// queue is bounded by its in-flight share. The rest of those requests (assembling an
/// object's parts, the deletes themselves) is I/O and runs as any request does.
struct HeavyWork {
    running: Arc<tokio::sync::Semaphore>,
    users: parking_lot::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    jobs: std::sync::mpsc::Sender<HeavyJob>,
}

type HeavyJob = Box<dyn FnOnce() + Send>;

/// The `nice` value of the heavy-work threads: under contention they get about 1/70 of the
/// CPU that a request thread at 0 gets (scheduler weights 15 and 1024); with the machine
/// idle, all of it.
const HEAVY_NICE: i32 = 19;

/// Request documents from this size on are parsed as heavy work (about 700 parts of a
/// CompleteMultipartUpload, or 1,000 short keys of a DeleteObjects).
pub const HEAVY_DOCUMENT_BYTES: usize = 64 << 10;
/// A CompleteMultipartUpload listing this many parts is checked against them as heavy work.
pub const HEAVY_PARTS: usize = 1000;

/// A turn at heavy work, held until dropped.
struct HeavyTurn {
    _running: tokio::sync::OwnedSemaphorePermit,
    _user: tokio::sync::OwnedSemaphorePermit,
}

/// A value dropped on a heavy-work thread, or where it is when it was not heavy work
/// (`Inner::drop_on_heavy`).
pub struct HeavyDrop<T: Send + 'static> {
    value: Option<T>,
    jobs: Option<std::sync::mpsc::Sender<HeavyJob>>,
}

impl<T: Send + 'static> std::ops::Deref for HeavyDrop<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.value.as_ref().expect("taken only by drop")
    }
}

impl<T: Send + 'static> Drop for HeavyDrop<T> {
    fn drop(&mut self) {
        if let (Some(value), Some(jobs)) = (self.value.take(), &self.jobs) {
            // With no heavy-work thread left, the job (and the value) drops here.
            let _ = jobs.send(Box::new(move || drop(value)));
        }
    }
}

impl HeavyWork {
    fn new() -> HeavyWork {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let turns = cores.saturating_sub(1).max(1);
        let (jobs, queue) = std::sync::mpsc::channel::<HeavyJob>();
        let queue = Arc::new(parking_lot::Mutex::new(queue));
        for i in 0..turns {
            let queue = Arc::clone(&queue);
            let spawned = std::thread::Builder::new().name(format!("holt-heavy-{i}")).spawn(move || {
                if let Err(e) =
                    rustix::process::setpriority_process(Some(rustix::thread::gettid()), HEAVY_NICE)
                {
                    tracing::warn!(error = %e, "could not lower the priority of a heavy-work thread");
                }
                // Ends when the state (and with it the sender) is dropped.
                loop {
                    let job = queue.lock().recv();
                    match job {
                        // A job catches its own panics; a drop job may not, and one must not
                        // take the thread with it.
                        Ok(job) => {
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                        Err(_) => return,
                    }
                }
            });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "could not start a heavy-work thread");
            }
        }
        HeavyWork { running: Arc::new(tokio::sync::Semaphore::new(turns)), users: Default::default(), jobs }
    }
}

/// One in-flight slot of a user's share (`Settings::max_inflight_per_user`), given back when
/// dropped (with the response body, when it streams).
struct UserSlot {
    state: Arc<Inner>,
    user: String,
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut held = self.state.user_inflight.lock();
        if let Some(n) = held.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}

impl Inner {
    /// Runs `work` for `user`: inline when it is not `heavy`; otherwise, at the user's turn,
    /// on a heavy-work thread (see `HeavyWork`).
    pub async fn run_heavy<T: Send + 'static>(
        &self,
        user: &str,
        heavy: bool,
        work: impl FnOnce() -> S3Result<T> + Send + 'static,
    ) -> S3Result<T> {
        if !heavy {
            return work();
        }
        let turn = self.heavy_turn(user).await;
        let outcome = self.run_on_heavy_thread(work).await;
        drop(turn);
        outcome
    }

    /// Waits for `user`'s turn at heavy work (`HeavyWork`). The user's own turn comes first,
    /// so a user queues at most one request for the shared turns.
    async fn heavy_turn(&self, user: &str) -> HeavyTurn {
        let mine = {
            let mut users = self.heavy.users.lock();
            // Users with nothing running or waiting are forgotten, so the map stays as small as
            // the set of users doing heavy work.
            users.retain(|_, s| Arc::strong_count(s) > 1);
            Arc::clone(
                users.entry(user.to_owned()).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1))),
            )
        };
        let user_turn = mine.acquire_owned().await.expect("never closed");
        let running = Arc::clone(&self.heavy.running).acquire_owned().await.expect("never closed");
        HeavyTurn { _running: running, _user: user_turn }
    }

    /// Runs CPU-bound heavy work on a heavy-work thread, off the async workers (where it
    /// would hold up every connection queued on the same worker) and at lower priority.
    async fn run_on_heavy_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> S3Result<T> + Send + 'static,
    ) -> S3Result<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: HeavyJob = Box::new(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = done.send(outcome);
        });
        if self.heavy.jobs.send(job).is_err() {
            return Err(S3Error::internal("heavy work", "no heavy-work thread is running"));
        }
        match result.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_panic)) => Err(S3Error::internal("heavy work", "a heavy-work job panicked")),
            Err(_) => Err(S3Error::internal("heavy work", "a heavy-work thread went away")),
        }
    }

    /// `value`, to be dropped on a heavy-work thread when it came from `heavy` work: the
    /// allocations of a 10,000-part request are made there, and freeing them on an async
    /// worker costs it a cross-thread free each.
    pub fn drop_on_heavy<T: Send + 'static>(&self, heavy: bool, value: T) -> HeavyDrop<T> {
        HeavyDrop { value: Some(value), jobs: heavy.then(|| self.heavy.jobs.clone()) }
    }

    /// The most requests one user may have in flight: `--max-inflight-per-user`, or by
    /// default three quarters of the in-flight limit when more than one user is configured
    /// (none with one user). Read per request: a reload may add or remove users.
    fn user_inflight_max(&self) -> Option<usize> {
        match self.user_inflight_setting {
            0 if self.credentials.load().len() > 1 => {
                Some((self.settings.max_inflight.max(1) * 3 / 4).max(1))
            }
            0 => None,
            n => Some(n),
        }
    }

    /// A slot of `user`'s share, or `None` when the user holds all of it already (always a
    /// slot when users have no share of their own).
    fn user_slot(self: &Arc<Self>, user: &str) -> Option<Option<UserSlot>> {
        let Some(max) = self.user_inflight_max() else { return Some(None) };
        let mut held = self.user_inflight.lock();
        let n = held.entry(user.to_owned()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Some(UserSlot { state: Arc::clone(self), user: user.to_owned() }))
    }
}

/// Marks a SlowDown answered because its user holds all of its in-flight share.
#[derive(Clone, Copy)]
struct OverShare;

/// How long the SlowDown of a user over its in-flight share waits before it is sent, holding
/// no slot. A client that retries at once (as one flooding the gateway does) then sends at
/// most one request a second on each of its connections, instead of thousands of refused
/// requests (each with its body) a second; SDKs back off longer than this anyway.
const OVER_SHARE_DELAY: Duration = Duration::from_secs(1);

/// `/metrics` renders in progress at once, at most.
const METRICS_RENDERS_MAX: usize = 2;

/// Shared state of every request. Cheap to clone.
#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl AppState {
    /// The state of a gateway serving `store` to `credentials`' users under `settings`.
    pub fn new(store: Store, credentials: auth::Credentials, settings: Settings) -> Self {
        let auth_config = auth::AuthConfig {
            region: settings.region.clone(),
            clock_skew_max: settings.clock_skew_max,
            sigv2: settings.sigv2,
            domain: settings.domain.clone(),
        };
        let inflight = Arc::new(tokio::sync::Semaphore::new(settings.max_inflight.max(1)));
        let user_inflight_setting = settings.max_inflight_per_user;
        AppState(Arc::new(Inner {
            store,
            credentials: arc_swap::ArcSwap::from_pointee(credentials),
            auth_config,
            settings,
            metrics: metrics::Metrics::new(),
            inflight,
            metrics_renders: tokio::sync::Semaphore::new(METRICS_RENDERS_MAX),
            user_inflight: Default::default(),
            user_inflight_setting,
            heavy: HeavyWork::new(),
        }))
    }

    /// Serves `credentials` from the next request on; requests already authenticated finish
    /// as they are.
    pub fn replace_credentials(&self, credentials: auth::Credentials) {
        self.0.credentials.store(Arc::new(credentials));
    }

    /// The engine and body store.
    pub fn store(&self) -> &Store {
        &self.0.store
    }

    /// Closes the engine (`Db::close`: flush the log, checkpoint, release the directory lock)
    /// once this is the last handle on it. First the body reclaimer finishes its queue (one
    /// log sync, then the unlinks). The server has let go of the state when `serve` returns,
    /// but an engine call that a cut-off request started on the blocking pool holds the
    /// engine until it returns: wait for that, up to `ENGINE_RELEASE_WAIT`. If it is still
    /// held then, the log is synced (everything acknowledged is durable; the next open
    /// replays it) and an error returned.
    pub async fn close(self) -> Result<(), String> {
        let deadline = Instant::now() + ENGINE_RELEASE_WAIT;
        self.0.store.stop_reclaimer().await;
        if let Some(up) = &self.0.store.upstream {
            up.stop_background();
        }
        let still_held = |store: Store| async move {
            store.sync().await.map_err(|e| format!("syncing the log at shutdown: {e}"))?;
            Err("requests still hold the engine at shutdown: log synced, engine not closed".to_owned())
        };
        let mut shared = self.0;
        let mut store = loop {
            match Arc::try_unwrap(shared) {
                Ok(inner) => break inner.store,
                Err(s) if Instant::now() >= deadline => return still_held(s.store.clone()).await,
                Err(s) => shared = s,
            }
            tokio::time::sleep(ENGINE_RELEASE_POLL).await;
        };
        let db = loop {
            match store.try_into_db() {
                Ok(db) => break db,
                Err(s) if Instant::now() >= deadline => return still_held(s).await,
                Err(s) => store = s,
            }
            tokio::time::sleep(ENGINE_RELEASE_POLL).await;
        };
        match tokio::task::spawn_blocking(move || db.close()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("closing the engine: {e}")),
            Err(e) => Err(format!("closing the engine: {e}")),
        }
    }
}

/// The whole S3 service as an axum router.
pub fn app(state: AppState) -> Router {
    Router::new().fallback(entry).with_state(state)
}

fn new_request_id() -> String {
    let raw: [u8; 8] = rand::random();
    hex::encode_upper(raw)
}

async fn entry(State(state): State<AppState>, req: Request) -> Response {
    let request_id = new_request_id();
    let started = Instant::now();
    let is_head = req.method() == Method::HEAD;
    let span =
        tracing::info_span!("request", id = %request_id, method = %req.method(), path = %req.uri().path());
    // Liveness and metrics stay answerable when the server is saturated: they take no slot.
    let (parts, body) = req.into_parts();
    let operational = (parts.method == Method::GET || parts.method == Method::HEAD)
        && matches!(parts.uri.path(), "/health" | "/metrics")
        && (!auth::has_authentication(&parts) || bearer(&parts).is_some());
    let req = Request::from_parts(parts, body);
    let permit = if operational { None } else { Arc::clone(&state.0.inflight).try_acquire_owned().ok() };
    let (op_name, mut resp) = if operational || permit.is_some() {
        // A panic is a bug, but it must cost one request, not the connection: answer it with
        // InternalError (logged in full by `S3Error::internal`).
        let served = std::panic::AssertUnwindSafe(serve(&state, req, &request_id).instrument(span.clone()))
            .catch_unwind()
            .await;
        served.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            ("Panic", error_response(S3Error::internal("handler panicked", what), &request_id))
        })
    } else {
        ("SlowDown", error_response(S3Error::new(S3ErrorCode::SlowDown), &request_id))
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-amz-request-id", v);
    }
    resp.headers_mut().insert(http::header::SERVER, HeaderValue::from_static("holt-gateway"));
    if is_head {
        // HEAD responses never carry a body; the headers (Content-Length included) stay.
        let (parts, _) = resp.into_parts();
        resp = Response::from_parts(parts, Body::empty());
    }
    if resp.extensions().get::<OverShare>().is_some() {
        // The in-flight slot goes back at once; the answer waits (see `OVER_SHARE_DELAY`).
        drop(permit);
        tokio::time::sleep(OVER_SHARE_DELAY).await;
    } else if let Some(permit) = permit {
        resp = hold_until_sent(resp, permit);
    }
    let elapsed = started.elapsed();
    state.0.metrics.record(op_name, resp.status().as_u16(), elapsed);
    tracing::debug!(parent: &span, op = op_name, status = resp.status().as_u16(), latency_us = elapsed.as_micros() as u64, "done");
    resp
}

/// Keeps the in-flight permit until a streamed response body is finished (or dropped, when
/// the client goes away or stops reading: see the write-stall timeout in `framing`): a
/// GetObject is in flight while its body streams from disk, not only while the handler runs.
/// A body of exact size is in memory already (XML documents, errors, inline objects, HEAD and
/// empty answers): its work is done, so the permit is released at once and the response goes
/// out unwrapped.
fn hold_until_sent(resp: Response, permit: impl Send + 'static) -> Response {
    if resp.body().is_end_stream() || resp.body().size_hint().exact().is_some() {
        return resp;
    }
    resp.map(|inner| Body::new(PermitBody { inner, permit: Some(Box::new(permit)) }))
}

/// A response body holding an in-flight permit until its last frame (or an error) has been
/// polled, or it is dropped. Size and end-of-stream are the inner body's, so Content-Length
/// framing is unchanged.
struct PermitBody {
    inner: Body,
    /// The in-flight permit, or a user's slot (`UserSlot`).
    permit: Option<Box<dyn Send>>,
}

impl HttpBody for PermitBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The token of an `Authorization: Bearer <token>` header, if the request has one.
fn bearer(parts: &http::request::Parts) -> Option<&str> {
    let value = parts.headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Why `/metrics` refuses this request, if it does: with a token configured, a request
/// without the right bearer token gets 401 (compared in constant time).
fn metrics_refusal(state: &AppState, parts: &http::request::Parts) -> Option<Response> {
    use subtle::ConstantTimeEq;
    let expected = state.0.settings.metrics_token.as_deref()?;
    let sent = bearer(parts).unwrap_or_default();
    if bool::from(sent.as_bytes().ct_eq(expected.as_bytes())) {
        return None;
    }
    let mut resp = (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
    resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(resp)
}

fn error_response(mut err: S3Error, request_id: &str) -> Response {
    err.request_id = request_id.to_owned();
    err.into_response()
}

async fn serve(state: &AppState, req: Request, request_id: &str) -> (&'static str, Response) {
    let (parts, body) = req.into_parts();
    let operational_auth = !auth::has_authentication(&parts) || bearer(&parts).is_some();
    if operational_auth && (parts.method == Method::GET || parts.method == Method::HEAD) {
        match parts.uri.path() {
            "/health" => return ("Health", (StatusCode::OK, "ok").into_response()),
            "/metrics" => {
                if let Some(refused) = metrics_refusal(state, &parts) {
                    return ("Metrics", refused);
                }
                let Ok(_rendering) = state.0.metrics_renders.try_acquire() else {
                    return ("Metrics", (StatusCode::SERVICE_UNAVAILABLE, "busy\n").into_response());
                };
                let mut text = state.0.metrics.render(&state.0.store.stats());
                state.0.store.worker_times.render(&mut text);
                if let Err(e) = state.0.store.render_bucket_usage(&mut text) {
                    tracing::warn!(error = %e, "metrics: bucket usage not rendered");
                }
                if let Some(up) = &state.0.store.upstream {
                    up.render_metrics(&mut text);
                }
                let inflight = state.0.settings.max_inflight.max(1) - state.0.inflight.available_permits();
                text.push_str(&format!(
                    "# HELP holt_inflight_requests S3 requests being handled.\n\
                     # TYPE holt_inflight_requests gauge\nholt_inflight_requests {inflight}\n"
                ));
                let mut resp = (StatusCode::OK, text).into_response();
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                return ("Metrics", resp);
            }
            _ => {}
        }
    }
    if let Err(e) = check_request_head(&parts) {
        return ("Invalid", error_response(e, request_id));
    }
    if parts.method == Method::POST && parts.uri.path() == handlers::events::EVENTS_PATH {
        let token = state.0.settings.events_token.as_deref();
        return ("UpstreamEvents", handlers::events::handle(&state.0.store, token, &parts, body).await);
    }
    let domain = state.0.settings.domain.as_deref();
    if !auth::has_authentication(&parts) && routing::virtual_host_bucket(&parts.headers, domain).is_none() {
        if let Some(page) = console::serve(&parts.method, parts.uri.path(), &state.0.settings.region) {
            return ("Console", page);
        }
    }
    if parts.method == Method::OPTIONS {
        // A CORS preflight: answered from the bucket's rules, without authentication.
        let bucket = routing::bucket_and_key(parts.uri.path(), &parts.headers, domain).map(|(b, _)| b);
        let answer = match bucket {
            Ok(bucket) => handlers::cors::preflight(&state.0.store, bucket.as_deref(), &parts.headers).await,
            Err(e) => Err(e),
        };
        return ("PreflightCORS", answer.unwrap_or_else(|e| error_response(e, request_id)));
    }
    let (route, query) = match routing::route(&parts.method, &parts.uri, &parts.headers, domain) {
        Ok(r) => r,
        Err(e) => return ("Invalid", error_response(e, request_id)),
    };
    // A browser's request (it names its origin): the response gets the bucket's CORS headers,
    // whatever it is.
    let cors = match (parts.headers.get(http::header::ORIGIN), &route.bucket) {
        (Some(origin), Some(bucket)) => origin.to_str().ok().map(|o| (o.to_owned(), bucket.clone())),
        _ => None,
    };
    let method = parts.method.clone();
    let (op_name, mut resp) = serve_routed(state, parts, body, route, query, request_id).await;
    if let Some((origin, bucket)) = cors {
        handlers::cors::decorate(&state.0.store, &bucket, &origin, &method, &mut resp).await;
    }
    (op_name, resp)
}

/// Authenticates and dispatches a routed request.
async fn serve_routed(
    state: &AppState,
    parts: http::request::Parts,
    body: Body,
    route: routing::Route,
    query: routing::Query,
    request_id: &str,
) -> (&'static str, Response) {
    let op_name = route.op.name();
    let resource = parts.uri.path().to_owned();
    // A request without any signature acts for the bucket's owner where the bucket's policy
    // or ACLs let anyone do what it asks; otherwise authentication refuses it.
    let anonymous = if auth::has_authentication(&parts) {
        None
    } else {
        match handlers::policy::anonymous_grant(&state.0.store, &route, &parts.headers).await {
            Ok(grant) => grant,
            Err(e) => return (op_name, error_response(e.resource(resource), request_id)),
        }
    };
    if anonymous.is_some() && query.has_prefixed("response-") {
        let e = S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "Request specific response headers cannot be used for anonymous GET requests.",
        );
        return (op_name, error_response(e.resource(resource), request_id));
    }
    let authenticated = match &anonymous {
        Some(grant) => auth::anonymous_payload(&parts)
            .map(|payload| auth::Authenticated { access_key: grant.owner.clone(), payload }),
        None => {
            auth::authenticate(&parts, &state.0.credentials.load(), &state.0.auth_config, SystemTime::now())
        }
    };
    let authenticated = match authenticated {
        Ok(a) => a,
        Err(e) => {
            tracing::info!(code = e.code(), message = %e.message(), "authentication failed");
            return (op_name, error_response(S3Error::from(e).resource(resource), request_id));
        }
    };
    // Anonymous requests share one slot count, whichever bucket they use.
    let slot_user = if anonymous.is_some() { ANONYMOUS_SLOT_USER } else { authenticated.access_key.as_str() };
    let Some(user_slot) = state.0.user_slot(slot_user) else {
        let e = S3Error::with_message(S3ErrorCode::SlowDown, "Too many requests in flight for this user.");
        let mut resp = error_response(e.resource(resource), request_id);
        resp.extensions_mut().insert(OverShare);
        return (op_name, resp);
    };
    let ctx = handlers::ReqCtx {
        state: state.clone(),
        request_id: request_id.to_owned(),
        user: authenticated.access_key,
        anonymous: anonymous.is_some(),
        object_acl_grant: anonymous.as_ref().is_some_and(|g| g.by_object_acl),
        payload: authenticated.payload,
        route,
        query,
        method: parts.method,
        uri: parts.uri,
        headers: parts.headers,
        secure: parts.extensions.get::<server::Secure>().is_some(),
    };
    match handlers::dispatch(ctx, body).await {
        Ok(resp) => (op_name, hold_until_sent(resp, user_slot)),
        Err(e) => {
            let e = match &anonymous {
                Some(grant) if !grant.may_list && e.code == S3ErrorCode::NoSuchKey => {
                    S3Error::new(S3ErrorCode::AccessDenied)
                }
                _ => e,
            };
            let e = if e.resource.is_empty() { e.resource(resource) } else { e };
            (op_name, error_response(e, request_id))
        }
    }
}

/// The name anonymous requests count their in-flight share under (access keys never contain
/// a space).
const ANONYMOUS_SLOT_USER: &str = "(anonymous)";

/// Limits checked on the request head before authentication.
fn check_request_head(parts: &http::request::Parts) -> Result<(), S3Error> {
    let header_bytes: usize = parts.headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    if header_bytes > HEADER_BYTES_MAX {
        return Err(S3Error::new(S3ErrorCode::RequestHeaderSectionTooLarge));
    }
    // Over a socket hyper drops Content-Length when Transfer-Encoding is present; the
    // connection watcher marks such requests (see `framing`).
    let both_in_map = parts.headers.contains_key(http::header::CONTENT_LENGTH)
        && parts.headers.contains_key(http::header::TRANSFER_ENCODING);
    if both_in_map || parts.extensions.get::<framing::ConflictingLengthHeaders>().is_some() {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "A request may not carry both Content-Length and Transfer-Encoding.",
        ));
    }
    Ok(())
}

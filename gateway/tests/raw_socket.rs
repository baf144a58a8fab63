//! Invariant: the limits that hyper, not the handler, sees first hold on a real socket:
//! - a request carrying both `Content-Length` and `Transfer-Encoding` is refused with an S3
//!   `InvalidRequest` document (RequestId equal to `x-amz-request-id`) in either header order,
//!   and nothing is stored, although the same signed request with `Transfer-Encoding` alone is
//!   stored (so the refusal is what keeps the object out);
//! - a head that does not arrive within the header-read timeout gets the connection closed;
//! - a client that stops reading a response gets its connection closed once writing to it has
//!   made no progress for the write-stall timeout, which frees the request's in-flight slot;
//! - heads above 8 KiB get the S3 400 `RequestHeaderSectionTooLarge`, and heads beyond hyper's
//!   buffer get 431 and a closed connection;
//! - shutdown ends with no connection holding the state, also when the grace period runs out
//!   with a request in flight (it is cut off), so the engine can always be closed.
//!
//! The server is `gateway::server::serve_with` on 127.0.0.1:0, spoken to in raw bytes.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use gateway::auth::Credentials;
use gateway::server::{serve_with, Listener, ServerLimits, Shutdown};
use gateway::storage::{schema, Store};
use gateway::{AppState, Settings};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Upper bound on any wait for the server in these tests.
const IO_TIMEOUT: Duration = Duration::from_secs(20);

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(gw: &Gw, limits: ServerLimits) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = gw.router();
    tokio::spawn(async move {
        serve_with(
            vec![Listener::plain(listener)],
            router,
            async {
                let _ = stopped.await;
            },
            limits,
        )
        .await;
    });
    Server { addr, stop: Some(stop) }
}

/// A raw HTTP/1.1 response.
struct RawResp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The S3 error document's code, checking its RequestId against the header.
    fn s3_code(&self) -> String {
        let text = self.text();
        let rid = self.header("x-amz-request-id").expect("x-amz-request-id");
        assert_eq!(xml_values(&text, "RequestId"), [rid.to_owned()], "{text}");
        xml_values(&text, "Code").into_iter().next().unwrap_or_default()
    }
}

/// Reads one response (head, then a Content-Length body) or fails on timeout.
async fn read_response(s: &mut TcpStream) -> RawResp {
    match try_read_response(s).await {
        Ok(r) => r,
        Err(e) => panic!("no response: {e}"),
    }
}

/// Reads one response; `Err` if the connection ends (EOF or reset) before a whole head.
async fn try_read_response(s: &mut TcpStream) -> Result<RawResp, String> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(IO_TIMEOUT, s.read(&mut chunk))
            .await
            .expect("response in time")
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("closed after {:?}", String::from_utf8_lossy(&buf)));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut chunk = [0u8; 4096];
        let n =
            tokio::time::timeout(IO_TIMEOUT, s.read(&mut chunk)).await.expect("body in time").expect("read");
        assert!(n > 0, "connection closed mid-body");
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Ok(RawResp { status, headers, body })
}

/// Whether the server closes the connection (EOF or reset) within `within`.
async fn closes_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut sink = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut sink)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// The head of a PUT of `body` to `/bkt/{key}` signed by USER_A (payload hash signed), with
/// `extra` header lines appended unsigned, in order; no Content-Length unless in `extra`.
fn signed_put_head(key: &str, body: &[u8], extra: &[&str]) -> Vec<u8> {
    let req = signed(USER_A, Method::PUT, &format!("/bkt/{key}"), &[("content-length", "omit")], body);
    let mut head = format!("PUT /bkt/{key} HTTP/1.1\r\n");
    for (k, v) in req.headers() {
        head.push_str(&format!("{}: {}\r\n", k, v.to_str().expect("ascii header")));
    }
    for line in extra {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// The head of a body-less request to `target` signed by USER_A.
fn signed_head(method: Method, target: &str) -> Vec<u8> {
    let req = signed(USER_A, method.clone(), target, &[], b"");
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for (k, v) in req.headers() {
        head.push_str(&format!("{}: {}\r\n", k, v.to_str().expect("ascii header")));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// Waits (up to `IO_TIMEOUT`) until `/metrics` shows `n` requests in flight.
async fn inflight_reaches(gw: &Gw, n: usize) -> bool {
    let line = format!("holt_inflight_requests {n}\n");
    let deadline = Instant::now() + IO_TIMEOUT;
    while Instant::now() < deadline {
        if gw.send(anonymous(Method::GET, "/metrics", b"")).await.text().contains(&line) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n0\r\n\r\n");
    out
}

async fn head_status(gw: &Gw, key: &str) -> u16 {
    gw.a(Method::HEAD, &format!("/bkt/{key}"), b"").await.status.as_u16()
}

#[tokio::test]
async fn content_length_with_transfer_encoding_is_refused_on_the_wire() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let server = start(&gw, ServerLimits::default()).await;
    let body = b"smuggled bytes";

    // Control: the same signed request with Transfer-Encoding alone is accepted and stored.
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let mut req = signed_put_head("control", body, &["Transfer-Encoding: chunked"]);
    req.extend_from_slice(&chunked(body));
    s.write_all(&req).await.expect("write");
    let r = read_response(&mut s).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.a(Method::GET, "/bkt/control", b"").await.body, body);

    // Both orders of the two headers, each on a fresh connection.
    let orders: [(&str, [&str; 2]); 2] = [
        ("cl-first", ["Content-Length: 19", "Transfer-Encoding: chunked"]),
        ("te-first", ["transfer-encoding: chunked", "content-length: 19"]),
    ];
    for (key, lines) in orders {
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        let mut req = signed_put_head(key, body, &lines);
        req.extend_from_slice(&chunked(body));
        s.write_all(&req).await.expect("write");
        let r = read_response(&mut s).await;
        assert_eq!(r.status, 400, "{key}: {}", r.text());
        assert_eq!(r.s3_code(), "InvalidRequest", "{key}");
        assert_eq!(head_status(&gw, key).await, 404, "{key}: the object must not be stored");
        // hyper does not keep such a connection open.
        assert!(closes_within(&mut s, IO_TIMEOUT).await, "{key}: connection left open");
    }

    // A keep-alive connection: an ordinary request, then the conflicting one, is still caught
    // (the watcher follows request boundaries, not just the first head).
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let mut first = signed_put_head("first", body, &[&format!("Content-Length: {}", body.len())]);
    first.extend_from_slice(body);
    s.write_all(&first).await.expect("write");
    assert_eq!(read_response(&mut s).await.status, 200);
    let mut second = signed_put_head("second", body, &["Content-Length: 19", "Transfer-Encoding: chunked"]);
    second.extend_from_slice(&chunked(body));
    s.write_all(&second).await.expect("write");
    let r = read_response(&mut s).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.s3_code(), "InvalidRequest");
    assert_eq!(head_status(&gw, "first").await, 200);
    assert_eq!(head_status(&gw, "second").await, 404);
    assert_eq!(gw.tmp_files(), 0);
}

#[tokio::test]
async fn bodies_that_look_like_conflicting_heads_are_not_refused() {
    // One keep-alive connection: a Content-Length body and a chunked body whose bytes spell a
    // request head with both headers, then a GET. The watcher must frame them as hyper does,
    // so none of them is refused. (Requests are sent one after another: clients do not
    // pipeline.)
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let server = start(&gw, ServerLimits::default()).await;
    let decoy =
        b"\r\n\r\nPUT /bkt/x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let mut fixed = signed_put_head("fixed", decoy, &[&format!("Content-Length: {}", decoy.len())]);
    fixed.extend_from_slice(decoy);
    let mut chunked_put = signed_put_head("chunked", decoy, &["Transfer-Encoding: chunked"]);
    chunked_put.extend_from_slice(&chunked(decoy));
    let get = signed(USER_A, Method::GET, "/bkt/fixed", &[], b"");
    let mut get_wire = b"GET /bkt/fixed HTTP/1.1\r\n".to_vec();
    for (k, v) in get.headers() {
        get_wire.extend_from_slice(format!("{}: {}\r\n", k, v.to_str().expect("ascii")).as_bytes());
    }
    get_wire.extend_from_slice(b"\r\n");
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    for (what, wire) in [("fixed PUT", &fixed), ("chunked PUT", &chunked_put), ("GET", &get_wire)] {
        s.write_all(wire).await.expect("write");
        let r = read_response(&mut s).await;
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        if what == "GET" {
            assert_eq!(r.body, decoy);
        }
    }
    assert_eq!(gw.a(Method::GET, "/bkt/chunked", b"").await.body, decoy);
}

#[tokio::test]
async fn slow_heads_are_cut_off_after_the_header_read_timeout() {
    let gw = Gw::new();
    let limits = ServerLimits { header_read_timeout: Duration::from_millis(400), ..ServerLimits::default() };
    let server = start(&gw, limits).await;

    // A head sent in time is answered.
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
    let r = read_response(&mut s).await;
    assert_eq!(r.status, 200);

    // A head that never finishes: the connection is closed after about the timeout.
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let started = Instant::now();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.expect("write");
    assert!(closes_within(&mut s, Duration::from_secs(10)).await, "slow head kept open");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "closed too early: {waited:?}");
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_after_the_write_stall_timeout() {
    let gw = Gw::with_settings(Settings { max_inflight: 1, ..Settings::default() });
    gw.create_bucket("bkt").await;
    // Far more than the socket buffers of both ends of a loopback connection hold unread.
    let data = vec![5u8; 32 << 20];
    gw.put("bkt", "big", &data).await;
    let stall = Duration::from_millis(500);
    let server = start(&gw, ServerLimits { write_stall_timeout: stall, ..ServerLimits::default() }).await;

    // A GET whose response is never read: it holds the only slot while the server writes.
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let sent = Instant::now();
    s.write_all(&signed_head(Method::GET, "/bkt/big")).await.expect("write");
    assert!(inflight_reaches(&gw, 1).await, "the GET never started");
    gw.a(Method::GET, "/", b"").await.assert_error(503, "SlowDown");

    // Once the buffers are full, writing makes no progress: the connection is closed and the
    // slot freed.
    assert!(inflight_reaches(&gw, 0).await, "a client that stopped reading still holds its slot");
    let waited = sent.elapsed();
    assert!(waited >= stall, "closed before the write-stall timeout: {waited:?}");
    let mut other = TcpStream::connect(server.addr).await.expect("connect");
    other.write_all(&signed_head(Method::GET, "/bkt?list-type=2")).await.expect("write");
    let r = read_response(&mut other).await;
    assert_eq!(r.status, 200, "{}", r.text());

    // The stalled client finds its connection ended before the whole body.
    let mut received = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        match tokio::time::timeout(IO_TIMEOUT, s.read(&mut chunk)).await.expect("connection closed in time") {
            Ok(0) | Err(_) => break,
            Ok(n) => received += n,
        }
    }
    assert!(received < data.len(), "the whole body arrived ({received} bytes): nothing stalled");
}

#[tokio::test]
async fn oversized_heads_are_refused() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let server = start(&gw, ServerLimits::default()).await;

    // 10 KiB of headers: over S3's 8 KiB, within hyper's buffer → the S3 error document.
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let pad = "a".repeat(10 * 1024);
    let req = format!("PUT /bkt/k HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\nContent-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let r = read_response(&mut s).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.s3_code(), "RequestHeaderSectionTooLarge");

    // 100 KiB: beyond hyper's head buffer → 431 and the connection closes.
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let pad = "b".repeat(100 * 1024);
    let req = format!("PUT /bkt/k HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\nContent-Length: 0\r\n\r\n");
    // The server may close before reading everything: a failed write is fine, and the close
    // may reset the connection before the 431 can be read. Either way the head is refused
    // and the connection ends; a 400 from the pipeline would mean hyper buffered it all.
    let _ = s.write_all(req.as_bytes()).await;
    if let Ok(r) = try_read_response(&mut s).await {
        assert_eq!(r.status, 431, "{}", r.text());
        assert!(closes_within(&mut s, IO_TIMEOUT).await);
    }
    assert_eq!(head_status(&gw, "k").await, 404);
}

/// Many small headers within S3's size limits (150 user metadata fields, all signed: ~6 KiB of
/// head, 750 bytes of metadata) are served, not refused for their number.
#[tokio::test]
async fn many_small_headers_within_the_size_limits_are_served() {
    let gw = Gw::new();
    gw.create_bucket("bkt").await;
    let server = start(&gw, ServerLimits::default()).await;
    let names: Vec<String> = (0..150).map(|i| format!("x-amz-meta-m{i:03}")).collect();
    let fields: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    let req = signed(USER_A, Method::PUT, "/bkt/many", &fields, b"hi");
    let mut head = String::from("PUT /bkt/many HTTP/1.1\r\n");
    for (k, v) in req.headers() {
        head.push_str(&format!("{}: {}\r\n", k, v.to_str().expect("ascii header")));
    }
    head.push_str("\r\n");
    assert!(head.len() < 8 * 1024, "the head is {} bytes: over S3's limit", head.len());
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    s.write_all(head.as_bytes()).await.expect("write head");
    s.write_all(b"hi").await.expect("write body");
    let r = read_response(&mut s).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = gw.a(Method::HEAD, "/bkt/many", b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-amz-meta-m149"), Some("v"));
}

/// Serves `gw` until `stop` fires; the task's output is how serving ended.
fn serve_until_stopped(
    gw: &Gw,
    listener: TcpListener,
    limits: ServerLimits,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Shutdown>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = serve_with(
        vec![Listener::plain(listener)],
        gw.router(),
        async {
            let _ = stopped.await;
        },
        limits,
    );
    (stop, tokio::spawn(serving))
}

#[tokio::test]
async fn grace_period_expiry_cuts_connections_off_and_the_engine_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = dir.path().join("meta");
    let db = holt_core::Db::open(&meta, holt_core::Options::default()).expect("durable engine");
    let store = Store::open(db, dir.path(), gateway::storage::bodies::INLINE_MAX_DEFAULT).expect("store");
    let creds = Credentials::new(vec![(USER_A.0.to_owned(), USER_A.1.to_owned())]);
    let gw = Gw { state: AppState::new(store, creds, Settings::default()), dir };
    gw.create_bucket("bkt").await;
    let limits = ServerLimits { shutdown_grace: Duration::from_millis(300), ..ServerLimits::default() };

    // Nothing open: the server drains at once.
    let (stop, server) =
        serve_until_stopped(&gw, TcpListener::bind("127.0.0.1:0").await.expect("bind"), limits);
    let _ = stop.send(());
    assert_eq!(
        tokio::time::timeout(IO_TIMEOUT, server).await.expect("stops").expect("task"),
        Shutdown::Drained
    );

    // A PUT whose body never finishes arriving keeps its request in flight past the grace.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, server) = serve_until_stopped(&gw, listener, limits);
    let body = vec![7u8; 100];
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = signed_put_head("slow", &body, &["Content-Length: 100"]);
    req.extend_from_slice(&body[..10]);
    s.write_all(&req).await.expect("write");
    let deadline = Instant::now() + IO_TIMEOUT;
    while !gw.send(anonymous(Method::GET, "/metrics", b"")).await.text().contains("holt_inflight_requests 1")
    {
        assert!(Instant::now() < deadline, "the slow PUT never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    let started = Instant::now();
    let outcome = tokio::time::timeout(IO_TIMEOUT, server).await.expect("stops").expect("task");
    assert_eq!(outcome, Shutdown::GraceElapsed);
    assert!(started.elapsed() >= Duration::from_millis(250), "cut off before the grace period");
    assert!(closes_within(&mut s, IO_TIMEOUT).await, "the cut-off connection is closed");

    // Nothing but the test holds the state now: the engine closes, releasing its directory.
    let Gw { state, dir } = gw;
    tokio::time::timeout(IO_TIMEOUT, state.close()).await.expect("closes in time").expect("engine closed");
    let db = holt_core::Db::open(&meta, holt_core::Options::default()).expect("reopens once closed");
    assert!(db.get(&schema::bucket("bkt")).expect("read").is_some());
    assert!(db.get(&schema::object("bkt", "slow")).expect("read").is_none());
    drop(dir);
}

/// A PUT whose body stops arriving holds an in-flight slot: after the body idle timeout it
/// is answered 400 RequestTimeout, the slot is free again, and nothing is stored.
#[tokio::test]
async fn a_stalled_body_is_answered_request_timeout_and_frees_its_slot() {
    let settings = Settings { body_idle_timeout: Duration::from_millis(400), ..Settings::default() };
    let gw = Gw::with_settings(settings);
    gw.create_bucket("bkt").await;
    let server = start(&gw, ServerLimits::default()).await;
    let body = vec![b'x'; 100];
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    s.write_all(&signed_put_head("stalled", &body, &["Content-Length: 100"])).await.expect("write head");
    s.write_all(&body[..10]).await.expect("write part of the body");
    let started = Instant::now();
    assert!(inflight_reaches(&gw, 1).await, "the PUT never took its slot");
    let r = read_response(&mut s).await;
    let waited = started.elapsed();
    assert_eq!((r.status, r.s3_code().as_str()), (400, "RequestTimeout"), "{}", r.text());
    assert!(waited >= Duration::from_millis(300), "answered too early: {waited:?}");
    assert!(inflight_reaches(&gw, 0).await, "the slot was not freed");
    assert_eq!(head_status(&gw, "stalled").await, 404, "a stalled body was stored");
}

/// A body that trickles in (a byte now and then, never idle for the idle timeout) is
/// answered 400 RequestTimeout once its average rate stays below the minimum past the grace.
#[tokio::test]
async fn a_trickling_body_is_answered_request_timeout() {
    let settings = Settings {
        body_idle_timeout: Duration::from_secs(5),
        body_min_rate: 1000,
        body_rate_grace: Duration::from_millis(500),
        ..Settings::default()
    };
    let gw = Gw::with_settings(settings);
    gw.create_bucket("bkt").await;
    let server = start(&gw, ServerLimits::default()).await;
    let body = vec![b'x'; 1000];
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    s.write_all(&signed_put_head("trickle", &body, &["Content-Length: 1000"])).await.expect("write head");
    let started = Instant::now();
    let answer = async {
        for b in &body {
            if s.write_all(std::slice::from_ref(b)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if started.elapsed() > Duration::from_secs(10) {
                break;
            }
        }
    };
    // The server answers while the client is still trickling.
    tokio::time::timeout(Duration::from_secs(3), answer).await.ok();
    let r = read_response(&mut s).await;
    assert_eq!((r.status, r.s3_code().as_str()), (400, "RequestTimeout"), "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(10), "the trickle was served to its end");
    assert_eq!(head_status(&gw, "trickle").await, 404, "a trickled body was stored");
}

/// One user's stalled uploads cannot take every in-flight slot: past its share (3 of 4
/// here) its next request gets 503 SlowDown, a second later and holding no slot meanwhile,
/// while another user is still served; the share comes back when a request ends.
#[tokio::test]
async fn one_user_cannot_take_every_slot() {
    let settings = Settings { max_inflight: 4, max_inflight_per_user: 3, ..Settings::default() };
    let gw = Gw::with_settings(settings);
    gw.create_bucket("bkt").await;
    gw.req(USER_B, Method::PUT, "/bktb", &[], b"").await;
    let server = start(&gw, ServerLimits::default()).await;
    let body = vec![b'x'; 100];
    let mut stalled = Vec::new();
    for i in 0..3 {
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        let head = signed_put_head(&format!("stalled-{i}"), &body, &["Content-Length: 100"]);
        s.write_all(&head).await.expect("write head");
        s.write_all(&body[..10]).await.expect("part of the body");
        stalled.push(s);
    }
    assert!(inflight_reaches(&gw, 3).await, "the stalled uploads never took their slots");
    // User A's share is used up; user B still gets the slot left, even while A's refusal
    // waits its second before it is sent (it gives its slot back first).
    let asked = std::time::Instant::now();
    let (refused, r) = tokio::join!(gw.a(Method::GET, "/bkt?list-type=2", b""), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        gw.req(USER_B, Method::GET, "/bktb?list-type=2", &[], b"").await
    });
    refused.assert_error(503, "SlowDown");
    assert!(asked.elapsed() >= Duration::from_secs(1), "an over-share SlowDown was sent at once");
    assert_eq!(r.status, 200, "{}", r.text());
    // One stalled upload finishes: user A is served again.
    let mut s = stalled.pop().expect("one");
    s.write_all(&body[10..]).await.expect("rest of the body");
    assert_eq!(read_response(&mut s).await.status, 200);
    assert!(inflight_reaches(&gw, 2).await, "the finished upload kept its slot");
    let r = gw.a(Method::GET, "/bkt?list-type=2", b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
}

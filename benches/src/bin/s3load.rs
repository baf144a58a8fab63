//! A small S3 load generator for loopback benchmarks: HeadObject, GetObject 1 KiB, PutObject
//! 1 KiB, ListObjectsV2 with delimiter (1000-entry pages: the first of a tenant, or with
//! `list-random` one after a random object) and a mix, over N keep-alive HTTP/1.1
//! connections, bounded in time and in request count. Requests are signed with AWS SigV4 (the
//! SDKs' own signer) ahead of time into a pool that is replayed, so the generator spends its
//! CPU on HTTP, not on HMACs (signatures stay valid for 15 minutes; runs are far shorter).
//!
//! usage: s3load --endpoint http://127.0.0.1:9000 --bucket B
//!               --op prepare|head|get|put|list|list-random|mixed
//!               [--connections 16] [--duration-s 10] [--max-requests 1000000] [--objects 100000]
//!               [--access-key K] [--secret-key S] [--region us-east-1] [--server-pid PID]
//!               [--threads 1] [--pool 2000] [--ca CA.pem]
//! An `https://` endpoint is reached over TLS (rustls), trusting only the `--ca` certificate;
//! each connection makes one handshake and is kept alive, as an SDK's pool does.
//! Prints one JSON object: requests, errors, req/s, p50/p99 (µs), mean response bytes, and the
//! server's peak resident memory when --server-pid is given.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

type Error = Box<dyn std::error::Error + Send + Sync>;

const OBJECT_BYTES: usize = 1024;
const TENANTS: u64 = 20;
const DIRS: u64 = 50;

#[derive(Clone)]
struct Args {
    endpoint: String,
    addr: SocketAddr,
    bucket: String,
    op: String,
    connections: usize,
    duration: Duration,
    max_requests: u64,
    objects: u64,
    access_key: String,
    secret_key: String,
    region: String,
    server_pid: Option<u32>,
    threads: usize,
    pool: usize,
    /// For an `https://` endpoint: the client side of TLS, trusting `--ca`.
    tls: Option<tokio_rustls::TlsConnector>,
}

fn parse_args() -> Result<Args, Error> {
    let mut a = Args {
        endpoint: "http://127.0.0.1:9000".into(),
        addr: "127.0.0.1:9000".parse()?,
        bucket: "bench".into(),
        op: "head".into(),
        connections: 16,
        duration: Duration::from_secs(10),
        max_requests: 1_000_000,
        objects: 100_000,
        access_key: "holtadmin".into(),
        secret_key: "holtadmin-secret-key".into(),
        region: "us-east-1".into(),
        server_pid: None,
        threads: 1,
        pool: 2000,
        tls: None,
    };
    let mut ca: Option<String> = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--endpoint" => a.endpoint = v,
            "--bucket" => a.bucket = v,
            "--op" => a.op = v,
            "--connections" => a.connections = v.parse()?,
            "--duration-s" => a.duration = Duration::from_secs_f64(v.parse()?),
            "--max-requests" => a.max_requests = v.parse()?,
            "--objects" => a.objects = v.parse()?,
            "--access-key" => a.access_key = v,
            "--secret-key" => a.secret_key = v,
            "--region" => a.region = v,
            "--server-pid" => a.server_pid = Some(v.parse()?),
            "--threads" => a.threads = v.parse()?,
            "--pool" => a.pool = v.parse()?,
            "--ca" => ca = Some(v),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let host = match (a.endpoint.strip_prefix("http://"), a.endpoint.strip_prefix("https://")) {
        (Some(host), _) => host,
        (_, Some(host)) => {
            let ca = ca.as_deref().ok_or("an https:// endpoint needs --ca CA.pem")?;
            a.tls = Some(tls_connector(ca)?);
            host
        }
        _ => return Err("only http:// and https:// endpoints (loopback)".into()),
    };
    a.addr = host.trim_end_matches('/').parse()?;
    // Loopback only: this tool generates load, and load goes nowhere but this machine.
    if !a.addr.ip().is_loopback() {
        return Err(format!("refusing non-loopback endpoint {}", a.addr).into());
    }
    if a.connections == 0 || a.pool == 0 {
        return Err("--connections and --pool must be positive".into());
    }
    // Bounded: a run never exceeds 10 minutes.
    a.duration = a.duration.min(Duration::from_secs(600));
    Ok(a)
}

/// The client side of TLS: TLS 1.2 or 1.3, trusting only the certificates in `ca` (PEM).
fn tls_connector(ca: &str) -> Result<tokio_rustls::TlsConnector, Error> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A keep-alive HTTP/1.1 connection to the endpoint (over TLS for `https://`).
async fn open(args: &Args) -> Result<Sender, Error> {
    let stream = tokio::net::TcpStream::connect(args.addr).await?;
    stream.set_nodelay(true)?;
    let Some(tls) = &args.tls else {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        return Ok(sender);
    };
    let name = tokio_rustls::rustls::pki_types::ServerName::from(args.addr.ip());
    let stream = tls.connect(name, stream).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Object `i` of the data set: 80% nested over 20 tenants × 50 directories, 20% flat per
/// tenant, so `tenant-NN/` with delimiter `/` lists 50 prefixes then flat keys.
fn object_key(i: u64, objects: u64) -> String {
    let per_tenant = (objects / TENANTS).max(1);
    let tenant = (i / per_tenant) % TENANTS;
    let j = i % per_tenant;
    if j < per_tenant * 8 / 10 {
        format!("tenant-{tenant:02}/dir-{:03}/file-{i:08}.bin", j % DIRS)
    } else {
        format!("tenant-{tenant:02}/object-{i:08}.json")
    }
}

fn object_body(i: u64) -> Bytes {
    let mut body = format!("object {i} ").into_bytes();
    body.resize(OBJECT_BYTES, b'.');
    Bytes::from(body)
}

/// One signed request, kept as parts so it can be rebuilt cheaply for every send.
#[derive(Clone)]
struct Prepared {
    method: Method,
    path_and_query: String,
    headers: HeaderMap,
    body: Bytes,
    /// The status a successful answer has.
    ok: u16,
}

/// S3 object keys in a path: each segment percent-encoded, slashes kept.
fn encode_key(key: &str) -> String {
    const SAFE: &[u8] = b"-_.~/";
    let mut out = String::with_capacity(key.len());
    for &b in key.as_bytes() {
        if b.is_ascii_alphanumeric() || SAFE.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn signer_settings() -> SigningSettings {
    let mut s = SigningSettings::default();
    // S3 signs paths as sent (no double encoding, no normalization) and wants the payload hash.
    s.percent_encoding_mode = PercentEncodingMode::Single;
    s.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    s.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    s
}

fn prepare(
    args: &Args,
    method: Method,
    path_and_query: String,
    body: Bytes,
    ok: u16,
) -> Result<Prepared, Error> {
    let host = args.addr.to_string();
    let scheme = if args.tls.is_some() { "https" } else { "http" };
    let uri = format!("{scheme}://{host}{path_and_query}");
    let identity = Credentials::new(&args.access_key, &args.secret_key, None, None, "s3load").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&args.region)
        .name("s3")
        .time(SystemTime::now())
        .settings(signer_settings())
        .build()?
        .into();
    let signable = SignableRequest::new(
        method.as_str(),
        uri.as_str(),
        [("host", host.as_str())].into_iter(),
        SignableBody::Bytes(&body),
    )?;
    let (instructions, _signature) = sign(signable, &params)?.into_parts();
    let mut req = http::Request::builder().method(method.clone()).uri(&uri).body(())?;
    req.headers_mut().insert(http::header::HOST, HeaderValue::from_str(&host)?);
    instructions.apply_to_request_http1x(&mut req);
    Ok(Prepared { method, path_and_query, headers: req.headers().clone(), body, ok })
}

fn head_or_get(args: &Args, method: Method, i: u64) -> Result<Prepared, Error> {
    let key = object_key(i % args.objects.max(1), args.objects);
    prepare(args, method, format!("/{}/{}", args.bucket, encode_key(&key)), Bytes::new(), 200)
}

fn put(args: &Args, i: u64) -> Result<Prepared, Error> {
    let key = format!("bench-put/file-{i:08}.bin");
    prepare(args, Method::PUT, format!("/{}/{}", args.bucket, encode_key(&key)), object_body(i), 200)
}

fn list(args: &Args, i: u64) -> Result<Prepared, Error> {
    let tenant = i % TENANTS;
    let q = format!("delimiter=%2F&list-type=2&max-keys=1000&prefix=tenant-{tenant:02}%2F");
    prepare(args, Method::GET, format!("/{}?{q}", args.bucket), Bytes::new(), 200)
}

/// A 1,000-entry delimiter page at a random place of the data set: under a random tenant,
/// after a random one of its flat objects (`random` picks both).
fn list_random(args: &Args, random: u64) -> Result<Prepared, Error> {
    let per_tenant = (args.objects / TENANTS).max(1);
    let tenant = random % TENANTS;
    let flat_from = per_tenant * 8 / 10;
    let j = flat_from + (random / TENANTS) % (per_tenant - flat_from).max(1);
    let after = encode_key(&object_key(tenant * per_tenant + j, args.objects)).replace('/', "%2F");
    let q =
        format!("delimiter=%2F&list-type=2&max-keys=1000&prefix=tenant-{tenant:02}%2F&start-after={after}");
    prepare(args, Method::GET, format!("/{}?{q}", args.bucket), Bytes::new(), 200)
}

/// The request pool for an operation. The mix: 60% head, 15% get, 15% put, 10% list.
fn pool(args: &Args) -> Result<Vec<Prepared>, Error> {
    let mut rng = 0x5EED_u64;
    let mut next = || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        rng >> 17
    };
    (0..args.pool as u64)
        .map(|n| match args.op.as_str() {
            "head" => head_or_get(args, Method::HEAD, next()),
            "get" => head_or_get(args, Method::GET, next()),
            "put" => put(args, n),
            "list" => list(args, n),
            "list-random" => list_random(args, next()),
            "mixed" => match next() % 100 {
                0..=59 => head_or_get(args, Method::HEAD, next()),
                60..=74 => head_or_get(args, Method::GET, next()),
                75..=89 => put(args, n),
                _ => list(args, n),
            },
            other => Err(format!("unknown --op {other:?}").into()),
        })
        .collect()
}

struct Totals {
    requests: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    stop: AtomicBool,
}

async fn connection(
    args: Arc<Args>,
    pool: Arc<Vec<Prepared>>,
    start_index: usize,
    totals: Arc<Totals>,
) -> Result<Vec<u32>, Error> {
    let mut sender = open(&args).await?;
    let mut latencies = Vec::with_capacity(1 << 16);
    let mut index = start_index;
    while !totals.stop.load(Ordering::Relaxed) {
        if totals.requests.fetch_add(1, Ordering::Relaxed) >= args.max_requests {
            totals.stop.store(true, Ordering::Relaxed);
            break;
        }
        let p = &pool[index % pool.len()];
        index += 1;
        let mut req = http::Request::builder()
            .method(p.method.clone())
            .uri(p.path_and_query.as_str())
            .body(Full::new(p.body.clone()))?;
        *req.headers_mut() = p.headers.clone();
        let t0 = Instant::now();
        sender.ready().await?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        latencies.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
        totals.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
        // Count every failure; print only the first few.
        if status != p.ok && totals.errors.fetch_add(1, Ordering::Relaxed) < 3 {
            eprintln!(
                "s3load: {} {} -> {status}: {}",
                p.method,
                p.path_and_query,
                String::from_utf8_lossy(&body[..body.len().min(300)])
            );
        }
    }
    Ok(latencies)
}

fn vm_field(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// PUT bucket, then the data set through `--connections` connections (each object one PUT).
async fn prepare_data(args: Arc<Args>) -> Result<serde_json::Value, Error> {
    let t0 = Instant::now();
    let create = prepare(&args, Method::PUT, format!("/{}", args.bucket), Bytes::new(), 200)?;
    // Each PUT is signed just before it is sent: signatures are only valid for 15 minutes,
    // and loading a slow server can take longer than that.
    let sign_put = |args: &Args, i: u64| {
        let key = object_key(i, args.objects);
        prepare(args, Method::PUT, format!("/{}/{}", args.bucket, encode_key(&key)), object_body(i), 200)
    };
    let mut sender = open(&args).await?;
    let mut req = http::Request::builder()
        .method(Method::PUT)
        .uri(create.path_and_query.as_str())
        .body(Full::new(Bytes::new()))?;
    *req.headers_mut() = create.headers;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    if status != 200 && !String::from_utf8_lossy(&body).contains("BucketAlreadyOwnedByYou") {
        return Err(format!("create bucket: {status} {}", String::from_utf8_lossy(&body)).into());
    }
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (args, next, errors) = (Arc::clone(&args), Arc::clone(&next), Arc::clone(&errors));
        tasks.push(tokio::spawn(async move {
            let mut sender = open(&args).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= args.objects {
                    break;
                }
                let p = sign_put(&args, i)?;
                let mut req = http::Request::builder()
                    .method(Method::PUT)
                    .uri(p.path_and_query.as_str())
                    .body(Full::new(p.body.clone()))?;
                *req.headers_mut() = p.headers.clone();
                sender.ready().await?;
                let resp = sender.send_request(req).await?;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await?.to_bytes();
                if status != 200 && errors.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!(
                        "s3load prepare: {status} {}",
                        String::from_utf8_lossy(&body[..body.len().min(300)])
                    );
                }
            }
            Ok::<(), Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(serde_json::json!({
        "op": "prepare", "objects": args.objects, "connections": args.connections,
        "seconds": t0.elapsed().as_secs_f64(),
        "errors": errors.load(Ordering::Relaxed),
    }))
}

async fn run(args: Arc<Args>) -> Result<serde_json::Value, Error> {
    if args.op == "prepare" {
        return prepare_data(args).await;
    }
    let pool = Arc::new(pool(&args)?);
    let totals = Arc::new(Totals {
        requests: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(args.connections);
    for c in 0..args.connections {
        let start_index = c * pool.len() / args.connections;
        tasks.push(tokio::spawn(connection(
            Arc::clone(&args),
            Arc::clone(&pool),
            start_index,
            Arc::clone(&totals),
        )));
    }
    // The deadline, and the server's resident memory sampled while the load runs.
    let mut rss_max = 0u64;
    while start.elapsed() < args.duration && !totals.stop.load(Ordering::Relaxed) {
        if let Some(pid) = args.server_pid {
            rss_max = rss_max.max(vm_field(pid, "VmRSS").unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    totals.stop.store(true, Ordering::Relaxed);
    let mut all: Vec<u32> = Vec::new();
    let mut failures = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(l)) => all.extend(l),
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let q = |p: f64| all.get(((all.len().saturating_sub(1)) as f64 * p) as usize).copied().unwrap_or(0);
    let done = all.len() as u64;
    Ok(serde_json::json!({
        "op": args.op,
        "connections": args.connections,
        "requests": done,
        "errors": totals.errors.load(Ordering::Relaxed),
        "connection_failures": failures,
        "seconds": elapsed,
        "req_per_s": done as f64 / elapsed,
        "p50_us": q(0.50),
        "p99_us": q(0.99),
        "mean_response_bytes": totals.bytes.load(Ordering::Relaxed) as f64 / done.max(1) as f64,
        "server_rss_max_bytes": args.server_pid.map(|_| rss_max),
        "server_peak_rss_bytes": args.server_pid.and_then(|pid| vm_field(pid, "VmHWM")),
    }))
}

fn main() {
    let args = match parse_args() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("s3load: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("s3load: runtime: {e}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("s3load: {e}");
            std::process::exit(1);
        }
    }
}

//! The HTTP ceiling on this machine: an axum server that answers every request with a fixed
//! body of `--body-bytes` bytes (HEAD gets the headers only), doing no other work. Gateway
//! figures are held against it at the same response size.
//!
//! usage: bare_axum [--listen 127.0.0.1:0] [--body-bytes 2048] [--threads N]
//! Prints `bare_axum listening on http://ADDR` once it accepts connections.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::Router;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut listen: SocketAddr = "127.0.0.1:0".parse()?;
    let mut body_bytes = 2048usize;
    let mut threads = 2usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = value.parse()?,
            "--body-bytes" => body_bytes = value.parse()?,
            "--threads" => threads = value.parse()?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    // An XML-looking body of exactly body_bytes bytes, built once and shared by every response.
    let mut body = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Bench>".to_vec();
    body.resize(body_bytes.saturating_sub(8).max(body.len()), b'x');
    body.extend_from_slice(b"</Bench>");
    body.truncate(body_bytes);
    let body = Bytes::from(body);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).enable_all().build()?;
    runtime.block_on(async move {
        let app = Router::new().fallback(move || {
            let body = body.clone();
            async move {
                (
                    StatusCode::OK,
                    [
                        (header::CONTENT_TYPE, HeaderValue::from_static("application/xml")),
                        (header::ETAG, HeaderValue::from_static("\"0123456789abcdef0123456789abcdef\"")),
                    ],
                    body,
                )
                    .into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind(listen).await?;
        println!("bare_axum listening on http://{}", listener.local_addr()?);
        axum::serve(listener, app).await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

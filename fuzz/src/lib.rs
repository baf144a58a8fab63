//! What the fuzz targets share: the tests' client-side signer (`auth_support`, AWS's own
//! `aws-sigv4` plus an aws-chunked encoder), a request head read from fuzz bytes, and a cursor
//! that takes small numbers off the front of an input.

#[path = "../../gateway/tests/auth_support/mod.rs"]
pub mod auth_support;

/// A request head from text: the first line is `METHOD URI`, each further line `name: value`.
/// Lines the `http` crate would refuse (bad method, URI, header name or value) are dropped, so
/// every input yields a head, as a server would after hyper parsed it.
pub fn head_from_text(data: &[u8]) -> http::request::Parts {
    let mut lines = data.split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    let (method, uri) = match first.iter().position(|&b| b == b' ') {
        Some(i) => (&first[..i], &first[i + 1..]),
        None => (first, &b"/"[..]),
    };
    let method = http::Method::from_bytes(method).unwrap_or(http::Method::GET);
    let uri = http::Uri::try_from(uri).unwrap_or_else(|_| http::Uri::from_static("/"));
    let mut builder = http::Request::builder().method(method).uri(uri);
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let name = http::HeaderName::from_bytes(&line[..colon]);
        let value = http::HeaderValue::from_bytes(trim(&line[colon + 1..]));
        if let (Ok(name), Ok(value)) = (name, value) {
            builder = builder.header(name, value);
        }
    }
    builder.body(()).map(|r| r.into_parts().0).unwrap_or_else(|_| {
        let (parts, ()) = http::Request::new(()).into_parts();
        parts
    })
}

/// A request head as text (the inverse of [`head_from_text`]), for seeds.
pub fn head_to_text(req: &auth_support::Req) -> Vec<u8> {
    let mut text = format!("{} {}", req.method, req.uri);
    for (name, value) in &req.headers {
        text.push_str(&format!("\n{name}: {value}"));
    }
    text.into_bytes()
}

fn trim(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r'] = bytes {
        bytes = rest;
    }
    bytes
}

/// Takes bytes off the front of a fuzz input; runs out into zeros.
pub struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    pub fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        first
    }

    pub fn u16(&mut self) -> u16 {
        u16::from(self.byte()) | (u16::from(self.byte()) << 8)
    }

    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

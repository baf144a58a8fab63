//! The web console (`/console`): static files built into the binary, served to path-style
//! requests that carry no S3 authentication. The page signs its S3 requests itself (SigV4 with
//! WebCrypto; the secret stays in the page's memory), so the server side is only these files.
//! A signed request for a bucket named `console`, and any request to a virtual-hosted bucket,
//! is routed to S3 as ever.

use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, Method, StatusCode};

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const STYLE: &str = include_str!("../console/console.css");

/// Everything the page loads comes from this server; nothing runs inline.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The console's answer to `method path`, if the path is one of its files; `region` is the
/// region the page signs for.
pub fn serve(method: &Method, path: &str, region: &str) -> Option<Response> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let (body, content_type) = match path {
        "/console" | "/console/" | "/console/index.html" => (index(region), "text/html; charset=utf-8"),
        "/console/console.js" => (SCRIPT.to_owned(), "text/javascript; charset=utf-8"),
        "/console/console.css" => (STYLE.to_owned(), "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::OK;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Some(resp)
}

/// The page, naming the region it signs for (only the characters a region name has).
fn index(region: &str) -> String {
    let region: String = region.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    INDEX.replace("{{REGION}}", &region)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_are_served_with_a_strict_policy_and_nothing_else_is() {
        let page = serve(&Method::GET, "/console", "eu-west-1").unwrap();
        assert_eq!(page.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(page.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("script-src 'self'"));
        assert!(index("eu-west-1").contains(r#"content="eu-west-1""#));
        assert!(index(r#"x"><script>"#).contains(r#"content="xscript""#), "the region cannot break out");
        assert!(serve(&Method::GET, "/console/console.js", "r").is_some());
        assert!(serve(&Method::GET, "/console/other", "r").is_none());
        assert!(serve(&Method::PUT, "/console", "r").is_none());
    }
}

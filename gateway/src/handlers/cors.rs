//! Bucket CORS: PutBucketCors, GetBucketCors and DeleteBucketCors; the OPTIONS preflight,
//! answered without authentication; and the `Access-Control-*` headers of the actual
//! requests a browser sends, errors included.
//!
//! The rules live in the bucket's record (`BucketMeta::cors`), so they go with the bucket:
//! deleted with it, never inherited by a bucket of the same name created later.
//!
//! S3's semantics: the first rule whose origin and method match decides (for a preflight,
//! every header the browser asks for must match the rule's `AllowedHeader`s too). An origin
//! or header pattern holds at most one `*`; origins compare case-sensitively, header names
//! case-insensitively. A rule whose origin is `*` answers `Access-Control-Allow-Origin: *`;
//! any other answers with the request's origin, `Access-Control-Allow-Credentials: true` and
//! `Vary: Origin`. At most 100 rules, in a document of at most 64 KiB.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::body::read_small;
use super::{empty_response, xml_response, ReqCtx};
use crate::error::{S3Error, S3ErrorCode, S3Result};
use crate::storage::meta::{BucketMeta, CorsRule};
use crate::storage::{schema, Store};
use crate::xml::{request, XmlWriter};

/// Most rules in one configuration.
pub const RULES_MAX: usize = 100;
/// Largest CORSConfiguration document read.
const CORS_BODY_BYTES_MAX: u64 = 64 * 1024;
/// Methods a rule may allow.
const METHODS: &[&str] = &["GET", "PUT", "HEAD", "POST", "DELETE"];

/// PutBucketCors: replaces the bucket's rules with the document's.
pub async fn handle_put_bucket_cors(ctx: &ReqCtx, body: Body) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    let document = read_small(ctx, body, CORS_BODY_BYTES_MAX).await?;
    let rules = parse_configuration(&document)?;
    super::bucket::update_bucket(ctx, |meta| BucketMeta { cors: rules.clone(), ..meta }).await?;
    Ok(empty_response(StatusCode::OK))
}

/// GetBucketCors: the rules as given; 404 NoSuchCORSConfiguration without any.
pub async fn handle_get_bucket_cors(ctx: &ReqCtx) -> S3Result<Response> {
    let bucket = ctx.owned_bucket().await?;
    if bucket.cors.is_empty() {
        return Err(S3Error::new(S3ErrorCode::NoSuchCORSConfiguration));
    }
    let mut w = XmlWriter::new();
    w.open_root("CORSConfiguration");
    for rule in &bucket.cors {
        w.open("CORSRule");
        w.elem_opt("ID", rule.id.as_deref());
        let lists = [
            ("AllowedHeader", &rule.headers),
            ("AllowedMethod", &rule.methods),
            ("AllowedOrigin", &rule.origins),
            ("ExposeHeader", &rule.expose),
        ];
        for (name, items) in lists {
            for item in items {
                w.elem(name, item);
            }
        }
        if let Some(age) = rule.max_age {
            w.elem_num("MaxAgeSeconds", u64::from(age));
        }
        w.close("CORSRule");
    }
    w.close("CORSConfiguration");
    Ok(xml_response(w.finish()))
}

/// DeleteBucketCors: the bucket keeps no rules (204 whether it had any or not).
pub async fn handle_delete_bucket_cors(ctx: &ReqCtx) -> S3Result<Response> {
    ctx.owned_bucket().await?;
    super::bucket::update_bucket(ctx, |meta| BucketMeta { cors: Vec::new(), ..meta }).await?;
    Ok(empty_response(StatusCode::NO_CONTENT))
}

/// `<CORSConfiguration><CORSRule>…</CORSRule>…</CORSConfiguration>`, checked against S3's
/// rules: 1 to 100 rules, each with an origin and a method; methods S3 knows; one `*` at
/// most in an origin or allowed header, none in an expose header, which must be a valid
/// header value.
pub fn parse_configuration(document: &[u8]) -> S3Result<Vec<CorsRule>> {
    let malformed = |why: &str| S3Error::with_message(S3ErrorCode::MalformedXML, why.to_owned());
    let invalid = |why: String| S3Error::with_message(S3ErrorCode::InvalidRequest, why);
    let root = request::parse(document)?;
    if root.name != "CORSConfiguration" {
        return Err(malformed("expected CORSConfiguration"));
    }
    let mut rules = Vec::new();
    for rule in root.children_named("CORSRule") {
        let texts = |name: &str| -> Vec<String> {
            rule.children_named(name).map(|e| e.text.trim().to_owned()).collect()
        };
        let parsed = CorsRule {
            id: rule.child_text("ID").map(str::to_owned),
            origins: texts("AllowedOrigin"),
            methods: texts("AllowedMethod"),
            headers: texts("AllowedHeader"),
            expose: texts("ExposeHeader"),
            max_age: match rule.child_text("MaxAgeSeconds") {
                None => None,
                Some(t) => Some(
                    t.trim().parse().map_err(|_| malformed("MaxAgeSeconds is not a number of seconds"))?,
                ),
            },
        };
        if parsed.origins.is_empty() || parsed.methods.is_empty() {
            return Err(malformed("a CORSRule needs an AllowedOrigin and an AllowedMethod"));
        }
        if let Some(m) = parsed.methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(invalid(format!(
                "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
            )));
        }
        for (what, items) in [("AllowedOrigin", &parsed.origins), ("AllowedHeader", &parsed.headers)] {
            if let Some(p) = items.iter().find(|p| p.matches('*').count() > 1) {
                return Err(invalid(format!("{what} \"{p}\" can not have more than one wildcard.")));
            }
        }
        if let Some(h) = parsed.expose.iter().find(|h| h.contains('*')) {
            return Err(invalid(format!(
                "ExposeHeader \"{h}\" contains wildcard. We currently do not support wildcard for ExposeHeader."
            )));
        }
        // Sent back in a response header: a name a header cannot carry (a control character)
        // would be dropped from every answer without a word.
        if let Some(h) = parsed.expose.iter().find(|h| HeaderValue::from_str(h).is_err()) {
            return Err(invalid(format!(
                "ExposeHeader {h:?} holds a character an HTTP header cannot carry."
            )));
        }
        rules.push(parsed);
    }
    if rules.is_empty() {
        return Err(malformed("a CORSConfiguration needs a CORSRule"));
    }
    if rules.len() > RULES_MAX {
        return Err(malformed("a CORSConfiguration holds at most 100 rules"));
    }
    Ok(rules)
}

/// Whether `text` matches `pattern`, which holds at most one `*` (any run of characters).
fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let eq = |a: &str, b: &str| if ignore_case { a.eq_ignore_ascii_case(b) } else { a == b };
    match pattern.split_once('*') {
        None => eq(pattern, text),
        Some((head, tail)) => {
            text.len() >= head.len() + tail.len()
                && text.is_char_boundary(head.len())
                && text.is_char_boundary(text.len() - tail.len())
                && eq(head, &text[..head.len()])
                && eq(tail, &text[text.len() - tail.len()..])
        }
    }
}

/// The first rule allowing `origin` to use `method` with `headers` (lowercase names).
fn matching_rule<'a>(
    rules: &'a [CorsRule],
    origin: &str,
    method: &str,
    headers: &[&str],
) -> Option<&'a CorsRule> {
    rules.iter().find(|rule| {
        rule.origins.iter().any(|o| wildcard_match(o, origin, false))
            && rule.methods.iter().any(|m| m == method)
            && headers.iter().all(|h| rule.headers.iter().any(|p| wildcard_match(p, h, true)))
    })
}

/// The headers that tell the browser what `rule` allows `origin`.
fn allow_headers(out: &mut HeaderMap, rule: &CorsRule, origin: &str) {
    let any_origin = rule.origins.iter().any(|o| o == "*");
    let mut set = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            out.insert(name, v);
        }
    };
    use http::header::*;
    if any_origin {
        set(ACCESS_CONTROL_ALLOW_ORIGIN, "*");
    } else {
        set(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        set(ACCESS_CONTROL_ALLOW_CREDENTIALS, "true");
    }
    set(ACCESS_CONTROL_ALLOW_METHODS, &rule.methods.join(", "));
    if !rule.expose.is_empty() {
        set(ACCESS_CONTROL_EXPOSE_HEADERS, &rule.expose.join(", "));
    }
    if let Some(age) = rule.max_age {
        set(ACCESS_CONTROL_MAX_AGE, &age.to_string());
    }
}

/// The CORS rules of `bucket`, if it exists (the owner is not checked: a browser's requests
/// are answered by the bucket's rules whoever sends them).
async fn bucket_rules(store: &Store, bucket: &str) -> S3Result<Vec<CorsRule>> {
    if !super::bucket::valid_bucket_name(bucket) {
        return Ok(Vec::new());
    }
    let entry = store.get(schema::bucket(bucket)).await?;
    Ok(entry.and_then(|e| BucketMeta::decode(&e.value)).map(|m| m.cors).unwrap_or_default())
}

/// The answer to an OPTIONS preflight for `bucket` (`None` when the path names none), sent
/// without authentication: 200 with the matching rule's headers, 400 without `Origin` or a
/// valid `Access-Control-Request-Method`, 403 AccessForbidden when no rule allows it.
pub async fn preflight(store: &Store, bucket: Option<&str>, headers: &HeaderMap) -> S3Result<Response> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(origin) = text("origin") else {
        return Err(S3Error::with_message(
            S3ErrorCode::BadRequest,
            "Insufficient information. Origin request header needed.",
        ));
    };
    let method = text("access-control-request-method").unwrap_or_default();
    if !METHODS.contains(&method) {
        return Err(S3Error::with_message(
            S3ErrorCode::BadRequest,
            format!("Invalid Access-Control-Request-Method: {method}"),
        ));
    }
    let Some(bucket) = bucket else {
        return Err(S3Error::with_message(S3ErrorCode::AccessForbidden, "CORSResponse: Bucket not found"));
    };
    let rules = bucket_rules(store, bucket).await?;
    if rules.is_empty() {
        return Err(S3Error::with_message(
            S3ErrorCode::AccessForbidden,
            "CORSResponse: CORS is not enabled for this bucket.",
        ));
    }
    let asked = text("access-control-request-headers").unwrap_or_default().to_ascii_lowercase();
    let asked: Vec<&str> = asked.split(',').map(str::trim).filter(|h| !h.is_empty()).collect();
    let Some(rule) = matching_rule(&rules, origin, method, &asked) else {
        return Err(S3Error::with_message(
            S3ErrorCode::AccessForbidden,
            "CORSResponse: This CORS request is not allowed. This is usually because the evaluation of Origin, \
             request method / Access-Control-Request-Method or Access-Control-Request-Headers are not \
             whitelisted by the resource's CORS spec.",
        ));
    };
    let mut resp = StatusCode::OK.into_response();
    allow_headers(resp.headers_mut(), rule, origin);
    if !asked.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&asked.join(", ")) {
            resp.headers_mut().insert(http::header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
    }
    resp.headers_mut().insert(
        http::header::VARY,
        HeaderValue::from_static("Origin, Access-Control-Request-Headers, Access-Control-Request-Method"),
    );
    Ok(resp)
}

/// Adds the `Access-Control-*` headers to the response of an actual request from `origin`
/// when a rule of `bucket` allows its method; errors get them too, so that the page can
/// read them. Buckets with CORS rules always answer `Vary: Origin`.
pub async fn decorate(store: &Store, bucket: &str, origin: &str, method: &Method, resp: &mut Response) {
    let Ok(rules) = bucket_rules(store, bucket).await else { return };
    if rules.is_empty() {
        return;
    }
    if let Some(rule) = matching_rule(&rules, origin, method.as_str(), &[]) {
        allow_headers(resp.headers_mut(), rule, origin);
    }
    resp.headers_mut().append(http::header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        CorsRule {
            origins: own(origins),
            methods: own(methods),
            headers: own(headers),
            ..CorsRule::default()
        }
    }

    #[test]
    fn wildcards_match_one_run_of_characters() {
        assert!(wildcard_match("*", "https://a.example", false));
        assert!(wildcard_match("https://*.example.com", "https://app.example.com", false));
        assert!(!wildcard_match("https://*.example.com", "https://example.com", false));
        assert!(!wildcard_match("https://*.example.com", "http://app.example.com", false));
        assert!(!wildcard_match("https://App.example.com", "https://app.example.com", false));
        assert!(wildcard_match("x-amz-*", "X-Amz-Date", true));
        assert!(!wildcard_match("ab*ba", "aba", false), "head and tail may not overlap");
        assert!(wildcard_match("*\u{e9}", "x\u{e9}", false));
        assert!(!wildcard_match("\u{e9}*", "e", false));
    }

    #[test]
    fn the_first_rule_matching_origin_method_and_every_header_decides() {
        let rules = [
            rule(&["https://a.example"], &["GET"], &[]),
            rule(&["https://a.example"], &["GET", "PUT"], &["content-type", "x-amz-*"]),
            rule(&["*"], &["GET"], &["*"]),
        ];
        let found =
            |o, m, h: &[&str]| matching_rule(&rules, o, m, h).map(|r| rules.iter().position(|x| x == r));
        assert_eq!(found("https://a.example", "GET", &[]), Some(Some(0)));
        assert_eq!(found("https://a.example", "GET", &["x-amz-date"]), Some(Some(1)));
        assert_eq!(found("https://a.example", "PUT", &["content-type", "x-amz-date"]), Some(Some(1)));
        assert_eq!(found("https://a.example", "PUT", &["authorization"]), None);
        assert_eq!(found("https://b.example", "GET", &["authorization"]), Some(Some(2)));
        assert_eq!(found("https://b.example", "DELETE", &[]), None);
    }

    #[test]
    fn configurations_are_checked_as_s3_checks_them() {
        let doc = |rules: &str| format!("<CORSConfiguration>{rules}</CORSConfiguration>");
        let ok = parse_configuration(
            doc("<CORSRule><ID>r</ID><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>\
                 <AllowedHeader>*</AllowedHeader><ExposeHeader>ETag</ExposeHeader>\
                 <MaxAgeSeconds>300</MaxAgeSeconds></CORSRule>")
            .as_bytes(),
        )
        .unwrap();
        assert_eq!((ok[0].id.as_deref(), ok[0].max_age, ok[0].expose.len()), (Some("r"), Some(300), 1));
        let code = |rules: &str| parse_configuration(doc(rules).as_bytes()).unwrap_err().code;
        assert_eq!(code(""), S3ErrorCode::MalformedXML);
        assert_eq!(
            code("<CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule>"),
            S3ErrorCode::MalformedXML
        );
        let bad_method =
            "<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod></CORSRule>";
        assert_eq!(code(bad_method), S3ErrorCode::InvalidRequest);
        let two_stars =
            "<CORSRule><AllowedOrigin>*.*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>";
        assert_eq!(code(two_stars), S3ErrorCode::InvalidRequest);
        let expose_star = "<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>\
                           <ExposeHeader>*</ExposeHeader></CORSRule>";
        assert_eq!(code(expose_star), S3ErrorCode::InvalidRequest);
        for expose in ["x-a&#13;b", "x-a&#10;set-cookie: b", "x-a&#127;b"] {
            let rule = format!(
                "<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>\
                 <ExposeHeader>{expose}</ExposeHeader></CORSRule>"
            );
            assert_eq!(code(&rule), S3ErrorCode::InvalidRequest, "{expose}");
        }
        let bad_age = "<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>\
                       <MaxAgeSeconds>-1</MaxAgeSeconds></CORSRule>";
        assert_eq!(code(bad_age), S3ErrorCode::MalformedXML);
        let one = "<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>";
        assert_eq!(parse_configuration(doc(&one.repeat(RULES_MAX)).as_bytes()).unwrap().len(), RULES_MAX);
        assert_eq!(code(&one.repeat(RULES_MAX + 1)), S3ErrorCode::MalformedXML);
    }
}

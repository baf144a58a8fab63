//! Request bodies: XML (CreateBucketConfiguration, Delete, CompleteMultipartUpload,
//! CORSConfiguration, Tagging, AccessControlPolicy) and bucket policies (JSON). No document
//! panics or gets anything but a 4xx error (or 501 for a grant or policy the gateway cannot
//! honour); an accepted document written back out parses to the same tree; the typed parsers
//! keep their limits (1..=1000 keys, only characters XML 1.0 allows, at least one part, 1..=100
//! CORS rules).
#![no_main]

use gateway::error::{S3Error, S3ErrorCode};
use gateway::handlers;
use gateway::xml::request::{self, Element};
use libfuzzer_sys::fuzz_target;

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}

fn write(el: &Element, out: &mut String) {
    out.push('<');
    out.push_str(&el.name);
    out.push('>');
    escape(&el.text, out);
    for child in &el.children {
        write(child, out);
    }
    out.push_str("</");
    out.push_str(&el.name);
    out.push('>');
}

/// Name, text and children, recursively; the text of an element with children is compared
/// as a whole because writing moves it before the children.
fn same(a: &Element, b: &Element) -> bool {
    a.name == b.name
        && a.text == b.text
        && a.children.len() == b.children.len()
        && a.children.iter().zip(&b.children).all(|(x, y)| same(x, y))
}

fuzz_target!(|data: &[u8]| {
    match request::parse(data) {
        Ok(root) => {
            let mut text = String::new();
            write(&root, &mut text);
            if let Ok(again) = request::parse(text.as_bytes()) {
                assert!(
                    same(&root, &again),
                    "written back, the document parsed differently:\n{root:?}\n{again:?}"
                );
            }
        }
        Err(e) => assert!(e.status().is_client_error(), "{:?}", e.code),
    }
    match request::parse_delete(data) {
        Ok(d) => {
            assert!((1..=request::DELETE_KEYS_MAX).contains(&d.objects.len()));
            assert!(d.objects.iter().all(|o| gateway::xml::is_xml_safe(&o.key)));
        }
        Err(e) => assert!(e.status().is_client_error(), "{:?}", e.code),
    }
    match request::parse_complete_multipart(data) {
        Ok(parts) => assert!(!parts.is_empty()),
        Err(e) => assert!(e.status().is_client_error(), "{:?}", e.code),
    }
    if let Err(e) = request::parse_create_bucket(data) {
        assert!(e.status().is_client_error(), "{:?}", e.code);
    }
    match handlers::cors::parse_configuration(data) {
        Ok(rules) => assert!((1..=handlers::cors::RULES_MAX).contains(&rules.len())),
        Err(e) => assert!(e.status().is_client_error(), "{:?}", e.code),
    }
    match handlers::tagging::parse_tagging(data) {
        Ok(tags) => {
            // What validation accepts, the record codec keeps.
            if handlers::tagging::validate(&tags).is_ok() {
                assert!(tags.len() <= handlers::tagging::TAGS_MAX);
            }
        }
        Err(e) => assert!(e.status().is_client_error(), "{:?}", e.code),
    }
    // An ACL document or a bucket policy the gateway cannot honour is 501 by name; anything
    // else wrong with it is a 4xx.
    let refused = |e: &S3Error| e.status().is_client_error() || e.code == S3ErrorCode::NotImplemented;
    if let Err(e) = handlers::acl::check_policy_document(data, "owner") {
        assert!(refused(&e), "{:?}", e.code);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = handlers::policy::Policy::parse(text, "bucket") {
            assert!(refused(&e), "{:?}", e.code);
        }
    }
});

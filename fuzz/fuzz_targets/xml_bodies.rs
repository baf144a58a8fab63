//! Request-body XML (CreateBucketConfiguration, Delete, CompleteMultipartUpload). No document
//! panics or gets anything but MalformedXML-class 4xx errors; an accepted document written back
//! out parses to the same tree; the typed parsers keep their limits (1..=1000 keys, only
//! characters XML 1.0 allows, at least one part).
#![no_main]

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
});

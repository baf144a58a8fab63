//! XML: a small writer for response documents (`response.rs`, one type per S3 document) and a
//! bounded parser for request bodies (`request.rs`).

pub mod request;
pub mod response;

/// Whether XML 1.0 can carry `c` in character data (the `Char` production of the spec).
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Whether every character of `s` can be written as XML 1.0 character data.
pub fn is_xml_safe(s: &str) -> bool {
    s.chars().all(is_xml_char)
}

/// Appends `s` escaped as XML character data. Characters XML 1.0 cannot carry never reach the
/// output: callers that must round-trip such text switch to `encoding-type=url` first; anything
/// left is percent-encoded so the document stays well formed. `\r` is written as a character
/// reference because parsers normalize a raw CR away.
pub fn escape_into(out: &mut String, s: &str) {
    // Most text (keys, ETags, dates, numbers) is printable ASCII without markup: copy it whole.
    let plain = |b: u8| matches!(b, 0x20..=0x7E) && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'');
    if s.bytes().all(plain) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            c if !is_xml_char(c) => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            c => out.push(c),
        }
    }
}

/// Builds one response document. Elements are written in call order; the writer does not
/// check nesting (each document type in `response.rs` is a straight-line function, tested by a
/// golden test).
pub struct XmlWriter {
    out: String,
}

impl Default for XmlWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl XmlWriter {
    pub fn new() -> Self {
        Self::with_capacity(512)
    }

    /// A writer whose buffer starts with room for `bytes` (a listing knows its entry count:
    /// growing a 200 KB document by doubling copies it about twice).
    pub fn with_capacity(bytes: usize) -> Self {
        let mut out = String::with_capacity(bytes);
        out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        XmlWriter { out }
    }

    /// Opens the root element with the S3 namespace.
    pub fn open_root(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push_str(" xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    }

    pub fn open(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
    }

    pub fn close(&mut self, name: &str) {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
    }

    /// `<name>escaped text</name>`.
    pub fn elem(&mut self, name: &str, text: &str) {
        self.open(name);
        escape_into(&mut self.out, text);
        self.close(name);
    }

    pub fn elem_opt(&mut self, name: &str, text: Option<&str>) {
        if let Some(t) = text {
            self.elem(name, t);
        }
    }

    pub fn elem_bool(&mut self, name: &str, v: bool) {
        self.elem(name, if v { "true" } else { "false" });
    }

    pub fn elem_num(&mut self, name: &str, v: u64) {
        self.elem(name, &v.to_string());
    }

    /// Raw access for text that is escaped by the caller.
    pub fn out_mut(&mut self) -> &mut String {
        &mut self.out
    }

    pub fn finish(self) -> Vec<u8> {
        self.out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_illegal_chars() {
        let mut s = String::new();
        escape_into(&mut s, "a<b>&\"'\r\u{1}\u{FFFE}z");
        assert_eq!(s, "a&lt;b&gt;&amp;&quot;&apos;&#13;%01%EF%BF%BEz");
    }

    #[test]
    fn plain_ascii_is_copied_and_everything_else_takes_the_careful_path() {
        for (text, want) in [
            ("photos/2024/a b+c=d.jpg", "photos/2024/a b+c=d.jpg"),
            ("\"0123abcd-2\"", "&quot;0123abcd-2&quot;"),
            ("tab\tnew\nline", "tab\tnew\nline"),
            ("caf\u{e9} <&>", "caf\u{e9} &lt;&amp;&gt;"),
            ("del\u{7f}", "del\u{7f}"),
        ] {
            let mut s = String::from("x");
            escape_into(&mut s, text);
            assert_eq!(s, format!("x{want}"), "{text:?}");
        }
    }

    #[test]
    fn xml_char_classes() {
        assert!(is_xml_safe("tab\there\nnew"));
        assert!(!is_xml_safe("bell\u{7}"));
        assert!(!is_xml_safe("\u{FFFF}"));
        assert!(is_xml_safe("emoji \u{1F600}"));
    }
}

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
    // Bytes below 0x20 other than tab, LF and CR are never XML characters; in UTF-8 the only
    // others (U+FFFE and U+FFFF; surrogates cannot be in a `str`) start with 0xEF. A fold
    // without an early exit compiles to vector compares.
    let suspect = s
        .as_bytes()
        .iter()
        .fold(false, |acc, &x| acc | ((x < 0x20) & (x != b'\t') & (x != b'\n') & (x != b'\r')) | (x == 0xEF));
    !suspect || s.chars().all(is_xml_char)
}

/// Whether `bytes` is plain text: printable ASCII (0x20 to 0x7F) without `&`, `<`, `>`, `"`
/// or `'`. Such bytes are UTF-8, XML 1.0 can carry them, and they escape to themselves, so
/// one pass answers all three questions for the common name. A fold without an early exit
/// compiles to vector compares.
pub fn is_plain_text(bytes: &[u8]) -> bool {
    !bytes.iter().fold(false, |acc, &b| {
        // As a signed byte, everything below 0x20 or from 0x80 up is below 0x20.
        acc | ((b as i8) < 0x20) | (b == b'&') | (b == b'<') | (b == b'>') | (b == b'"') | (b == b'\'')
    })
}

/// How `escape_into` treats a byte: 0 copies it as is, anything else sends the text between
/// the previous special byte and this one to the output whole, then handles this byte alone.
const ESCAPE_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = 1; // control characters: tab and LF are kept, CR and the rest are not
        b += 1;
    }
    t[b'&' as usize] = 1;
    t[b'<' as usize] = 1;
    t[b'>' as usize] = 1;
    t[b'"' as usize] = 1;
    t[b'\'' as usize] = 1;
    t[0xEF] = 1; // may start U+FFFE or U+FFFF
    t
};

/// Appends `s` escaped as XML character data. Characters XML 1.0 cannot carry never reach the
/// output: callers that must round-trip such text switch to `encoding-type=url` first; anything
/// left is percent-encoded so the document stays well formed. `\r` is written as a character
/// reference because parsers normalize a raw CR away.
pub fn escape_into(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    // The common case, text with nothing to escape, is one vectorized pass and one copy.
    let special = bytes.iter().fold(false, |acc, &b| {
        acc | (b < 0x20) | (b == b'&') | (b == b'<') | (b == b'>') | (b == b'"') | (b == b'\'') | (b == 0xEF)
    });
    if !special {
        out.extend_from_slice(bytes);
        return;
    }
    // Runs of ordinary bytes (most keys, dates and numbers are one run) are copied whole.
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        if ESCAPE_CLASS[bytes[i] as usize] == 0 {
            i += 1;
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        // A special byte is ASCII or starts a 3-byte character (0xEF): `i` is a char boundary.
        let c = s[i..].chars().next().unwrap_or('\u{FFFD}');
        match c {
            '&' => out.extend_from_slice(b"&amp;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '"' => out.extend_from_slice(b"&quot;"),
            '\'' => out.extend_from_slice(b"&apos;"),
            '\r' => out.extend_from_slice(b"&#13;"),
            c if !is_xml_char(c) => {
                let mut buf = [0u8; 4];
                for &b in c.encode_utf8(&mut buf).as_bytes() {
                    out.extend_from_slice(&[
                        b'%',
                        HEX_UPPER[usize::from(b >> 4)],
                        HEX_UPPER[usize::from(b & 0xF)],
                    ]);
                }
            }
            c => out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
        }
        i += c.len_utf8();
        run = i;
    }
    out.extend_from_slice(&bytes[run..]);
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Builds one response document. Elements are written in call order; the writer does not
/// check nesting (each document type in `response.rs` is a straight-line function, tested by a
/// golden test). The buffer holds UTF-8: every write appends a `str` or ASCII bytes.
pub struct XmlWriter {
    out: Vec<u8>,
}

impl Default for XmlWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl XmlWriter {
    /// A document starting with the XML declaration, with room for 512 bytes.
    pub fn new() -> Self {
        Self::with_capacity(512)
    }

    /// A writer whose buffer starts with room for `bytes` (a listing knows its entry count:
    /// growing a 200 KB document by doubling copies it about twice).
    pub fn with_capacity(bytes: usize) -> Self {
        let mut out = Vec::with_capacity(bytes);
        out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        XmlWriter { out }
    }

    /// A writer for part of a document (no XML declaration), with room for `bytes`.
    pub fn fragment(bytes: usize) -> Self {
        XmlWriter { out: Vec::with_capacity(bytes) }
    }

    /// Opens the root element with the S3 namespace.
    pub fn open_root(&mut self, name: &str) {
        self.open(name);
        self.out.pop();
        self.out.extend_from_slice(b" xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    }

    /// `<name>`; `name` is written as is (callers pass literal element names).
    pub fn open(&mut self, name: &str) {
        self.out.reserve(name.len() + 2);
        self.out.push(b'<');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'>');
    }

    /// `</name>`; nesting is the caller's to get right.
    pub fn close(&mut self, name: &str) {
        self.out.reserve(name.len() + 3);
        self.out.extend_from_slice(b"</");
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'>');
    }

    /// `<name>escaped text</name>`.
    pub fn elem(&mut self, name: &str, text: &str) {
        self.open(name);
        escape_into(&mut self.out, text);
        self.close(name);
    }

    /// `elem` if `text` is `Some`; nothing otherwise (S3 omits absent optional elements).
    pub fn elem_opt(&mut self, name: &str, text: Option<&str>) {
        if let Some(t) = text {
            self.elem(name, t);
        }
    }

    /// `<name>true</name>` or `<name>false</name>`.
    pub fn elem_bool(&mut self, name: &str, v: bool) {
        self.elem(name, if v { "true" } else { "false" });
    }

    /// `<name>v</name>`, `v` in decimal.
    pub fn elem_num(&mut self, name: &str, v: u64) {
        self.open(name);
        self.out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        self.close(name);
    }

    /// `<name>…</name>` with the text written by `text`, which must write XML-safe,
    /// escaped UTF-8 (numbers, dates, hex): no copy of the text on the way.
    pub fn elem_with(&mut self, name: &str, text: impl FnOnce(&mut Vec<u8>)) {
        self.open(name);
        text(&mut self.out);
        self.close(name);
    }

    /// Appends `bytes`, which the caller guarantees are UTF-8 markup or escaped text (literal
    /// tags joined into one write, or a name `is_plain_text` accepted).
    #[inline]
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// The buffer, for writers that append escaped UTF-8 text themselves (dates, numbers,
    /// ETags); the same contract as `elem_with`.
    #[inline]
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Escaped text at the current position.
    pub fn text(&mut self, text: &str) {
        escape_into(&mut self.out, text);
    }

    /// The document's bytes (UTF-8).
    pub fn finish(self) -> Vec<u8> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_illegal_chars() {
        let mut s = Vec::new();
        escape_into(&mut s, "a<b>&\"'\r\u{1}\u{FFFE}z");
        assert_eq!(s, b"a&lt;b&gt;&amp;&quot;&apos;&#13;%01%EF%BF%BEz");
    }

    #[test]
    fn plain_ascii_is_copied_and_everything_else_takes_the_careful_path() {
        for (text, want) in [
            ("photos/2024/a b+c=d.jpg", "photos/2024/a b+c=d.jpg"),
            ("\"0123abcd-2\"", "&quot;0123abcd-2&quot;"),
            ("tab\tnew\nline", "tab\tnew\nline"),
            ("caf\u{e9} <&>", "caf\u{e9} &lt;&amp;&gt;"),
            ("del\u{7f}", "del\u{7f}"),
            // 0xEF starts U+FFFE and U+FFFF but also ordinary characters such as U+F000.
            ("a\u{f000}b&c\u{ffff}", "a\u{f000}b&amp;c%EF%BF%BF"),
            ("\u{1}tail", "%01tail"),
        ] {
            let mut s = b"x".to_vec();
            escape_into(&mut s, text);
            assert_eq!(String::from_utf8(s).unwrap(), format!("x{want}"), "{text:?}");
        }
    }

    #[test]
    fn plain_text_is_printable_ascii_without_markup() {
        for plain in ["", "photos/2024/a b+c=d.jpg", "del\u{7f}", "~!#$%()*,;=?@[]^`{|}"] {
            assert!(is_plain_text(plain.as_bytes()), "{plain:?}");
            let mut s = Vec::new();
            escape_into(&mut s, plain);
            assert_eq!(s, plain.as_bytes(), "plain text escapes to itself");
        }
        for not in
            ["a&b", "<", ">", "\"", "'", "tab\t", "new\nline", "cr\r", "\u{1}", "caf\u{e9}", "\u{ffff}"]
        {
            assert!(!is_plain_text(not.as_bytes()), "{not:?}");
        }
        assert!(!is_plain_text(&[b'a', 0xff]), "not UTF-8");
        // Long enough for the vector loop and its tail.
        let mut long = vec![b'k'; 100];
        assert!(is_plain_text(&long));
        long[97] = b'<';
        assert!(!is_plain_text(&long));
    }

    #[test]
    fn xml_char_classes() {
        assert!(is_xml_safe("tab\there\nnew"));
        assert!(!is_xml_safe("bell\u{7}"));
        assert!(!is_xml_safe("\u{FFFF}"));
        assert!(is_xml_safe("emoji \u{1F600}"));
    }
}

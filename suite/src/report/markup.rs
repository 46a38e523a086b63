//! The one escaper of the markup the suite writes (the HTML report, its inline SVG, JUnit's XML): text in an
//! element or a quoted attribute, never markup. Characters XML 1.0 does not allow (controls other than tab, newline
//! and carriage return) are dropped, so a message holding them still gives a well-formed file.

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn markup_and_controls_never_pass_through() {
        assert_eq!(super::escape("a<b>&\"c\"'d'\u{1}\te\n"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;\te\n");
    }
}

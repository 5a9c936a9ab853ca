//! What a plugin may put in front of a merchant or a customer: text without control or
//! bidirectional-override characters, and links that stay on the dashboard.
//!
//! A NUL cuts a text short in some renderers; other control characters hide or rewrite what
//! follows; the bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069)
//! make a text read differently from what it contains ("Trojan Source"). They are refused in
//! every text field. The left-to-right and right-to-left marks (U+200E, U+200F, U+061C) stay
//! allowed: they cannot open a reordered span, and mixed Arabic or Hebrew text needs them.
//!
//! A link (`href`) must be a path on the dashboard: one `/` then a path, never `//host` or
//! `/\host` (which browsers read as another site), no scheme, no backslash, no space or control
//! character (browsers drop tabs and line breaks from URLs, so `/\t/evil.example` would become
//! `//evil.example`).

use crate::model::error::{Error, Result};
use crate::service::validate;

/// The longest link.
pub const MAX_HREF: usize = 2048;

/// Whether a text may span lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// A title or a label: one line, no control character at all.
    One,
    /// A body: line feeds, carriage returns and tabs allowed.
    Many,
}

/// What is wrong with `c` in a text, if anything.
fn refused(c: char, lines: Lines) -> Option<&'static str> {
    match c {
        '\n' | '\r' | '\t' if lines == Lines::Many => None,
        '\0' => Some("a NUL character"),
        '\n' | '\r' | '\u{2028}' | '\u{2029}' => Some("a line break"),
        c if c.is_control() => Some("a control character"),
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => {
            Some("a bidirectional embedding, override or isolate character")
        }
        _ => None,
    }
}

/// Refuses a text with a NUL, a control character (line breaks and tabs only where `lines`
/// allows them) or a bidirectional embedding, override or isolate.
pub fn check_chars(field: &str, value: &str, lines: Lines) -> Result<()> {
    match value
        .chars()
        .find_map(|c| refused(c, lines).map(|what| (c, what)))
    {
        Some((c, what)) => Err(Error::invalid(
            field,
            format!("must not contain {what} (U+{:04X})", u32::from(c)),
        )),
        None => Ok(()),
    }
}

/// Checks a text's length (`min` to `max` characters) and its characters.
pub fn check_text(field: &str, value: &str, min: usize, max: usize, lines: Lines) -> Result<()> {
    validate::text(field, value, min, max)?;
    check_chars(field, value, lines)
}

/// Checks a dashboard link: `/` then a path; not `//`, no backslash, no scheme, no space or
/// control character, at most [`MAX_HREF`] bytes.
pub fn check_path(field: &str, href: &str) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::invalid(
            field,
            format!("must be a dashboard path starting with one `/` ({why})"),
        ))
    };
    if !href.starts_with('/') {
        return refuse("it does not start with `/`");
    }
    if href.len() > MAX_HREF {
        return refuse("it is longer than 2048 bytes");
    }
    if href.starts_with("//") {
        return refuse("`//` starts another site's address");
    }
    if href.contains('\\') {
        return refuse("browsers read `\\` as `/`");
    }
    if let Some(c) = href
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || refused(*c, Lines::One).is_some())
    {
        return refuse(&format!(
            "it contains a space or control character, U+{:04X}",
            u32::from(c)
        ));
    }
    Ok(())
}

/// Checks every string (and object key) in a template variable's value; the field names the
/// string's place (`data.items[2].name`).
pub fn check_value(field: &str, value: &serde_json::Value) -> Result<()> {
    match value {
        serde_json::Value::String(s) => check_chars(field, s, Lines::Many),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| check_value(&format!("{field}[{i}]"), item)),
        serde_json::Value::Object(map) => map.iter().try_for_each(|(key, item)| {
            let field = format!("{field}.{key}");
            check_chars(&field, key, Lines::One)?;
            check_value(&field, item)
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_on_the_dashboard() {
        for ok in [
            "/",
            "/settings/shipping",
            "/orders?status=open#top",
            "/a/%2F/b",
        ] {
            check_path("href", ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "settings",
            "//evil.example",
            "/\\evil.example",
            "/a\\b",
            "https://evil.example",
            "javascript:alert(1)",
            "/\t/evil.example",
            "/a b",
            "/\u{202E}lmth.exe",
            "/a\0",
        ] {
            assert!(check_path("href", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn texts_refuse_controls_and_bidi_overrides() {
        assert!(check_chars("t", "Café \u{200F}שלום", Lines::One).is_ok());
        assert!(check_chars("t", "line\nline\ttab", Lines::Many).is_ok());
        for bad in [
            "a\0b",
            "a\nb",
            "a\u{1b}[31m",
            "a\u{7f}",
            "a\u{85}",
            "\u{202E}abc",
            "\u{2066}x",
            "a\u{2028}b",
        ] {
            assert!(check_chars("t", bad, Lines::One).is_err(), "{bad:?}");
        }
        let err = check_chars("banner.title", "Sale\u{202E}", Lines::Many).expect_err("bidi");
        assert_eq!(err.field(), Some("banner.title"));
    }

    #[test]
    fn data_strings_are_checked_where_they_sit() {
        let value = serde_json::json!({"items": [{"name": "ok"}, {"name": "bad\u{0}"}]});
        let err = check_value("data.order", &value).expect_err("nul");
        assert_eq!(err.field(), Some("data.order.items[1].name"));
    }
}

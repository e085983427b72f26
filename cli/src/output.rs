//! Writing results to stdout: text or JSON, and a closed pipe is not a crash.

use std::io::{self, Write};

use serde::Serialize;

use crate::failure::Failure;

/// Version of the JSON shape of the cross-session views and bulk repairs
/// (`"version"` in their output); bumped when a field changes meaning or
/// goes away (new fields may appear without a bump).
pub const JSON_VERSION: u32 = 1;

/// Writes `text` to stdout. A reader that went away (`| head`) is not an
/// error; any other write failure is.
pub fn print(text: &str) -> Result<(), Failure> {
    // Every output passes here or `eprint_line`: no URL's password shows.
    let text = a2_store::StoreUrl::redact(text);
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(Failure::new(format!("writing to stdout: {error}"))),
    }
}

/// Writes one line to stderr; a closed stderr is ignored (there is nowhere
/// left to report it).
pub fn eprint_line(line: &str) {
    let mut stderr = io::stderr().lock();
    let _ = writeln!(stderr, "{}", a2_store::StoreUrl::redact(line));
}

/// `text` with control characters (newlines, tabs, escapes...) written as
/// Rust-style escapes (`\n`, `\u{1b}`), and backslashes doubled only when
/// something was escaped, so an id shown in a table or message stays on its
/// line and in its cell. Text without control characters is unchanged.
pub fn escape(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() || c == '\\' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Writes `value` to stdout as pretty JSON followed by a newline.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<(), Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|error| Failure::new(format!("encoding JSON output: {error}")))?;
    text.push('\n');
    print(&text)
}

/// A timestamp in ms since the epoch as RFC 3339 UTC with milliseconds, or
/// the raw number when it is out of the representable range.
pub fn timestamp(ms: i64) -> String {
    let Ok(ms_u) = u64::try_from(ms) else {
        return ms.to_string();
    };
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms_u);
    if ms_u > 253_402_300_799_999 {
        // Past the year 9999: humantime cannot format it.
        return ms.to_string();
    }
    humantime::format_rfc3339_millis(time).to_string()
}

/// A duration in ms as whole seconds, minutes, hours and days (`1h 2m 5s`);
/// `0s` below a second or when negative.
pub fn age(ms: i64) -> String {
    let secs = u64::try_from(ms / 1_000).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// A payload as a table cell: `encrypted (key k2)` for one left encrypted
/// (no key given for it), `offloaded (N bytes, sha256 …)` for one whose
/// object was not fetched, else its compact JSON cut to `max` characters.
pub fn payload_cell(value: &serde_json::Value, max: usize) -> String {
    a2_store::stored_payload_placeholder(value).unwrap_or_else(|| compact_json(value, max))
}

/// A JSON value on one line, cut to `max` characters with `…`.
pub fn compact_json(value: &serde_json::Value, max: usize) -> String {
    let text = value.to_string();
    if text.chars().count() <= max {
        return text;
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(timestamp(-5), "-5");
        assert_eq!(timestamp(i64::MAX), i64::MAX.to_string());
    }

    #[test]
    fn ages_are_whole_seconds() {
        assert_eq!(age(999), "0s");
        assert_eq!(age(-5_000), "0s");
        assert_eq!(age(3_723_456), "1h 2m 3s");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("plain id/ü"), "plain id/ü");
        assert_eq!(escape("a\nb"), "a\\nb");
        assert_eq!(escape("t\tx\\y\u{1b}"), "t\\tx\\\\y\\u{1b}");
    }

    #[test]
    fn long_json_is_cut() {
        assert_eq!(compact_json(&json!({"a": 1}), 20), "{\"a\":1}");
        assert_eq!(compact_json(&json!("abcdefghij"), 5), "\"abc…");
    }
}

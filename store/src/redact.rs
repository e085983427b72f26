//! Hiding secrets in text: the password of every URL and the secret values
//! of `key=value` connection strings, for each message and output that may
//! quote one. When in doubt more is hidden, never less.
//!
//! What counts as a secret:
//!
//! - the password of a URL's user part (`scheme://user:PASSWORD@host`): of
//!   `postgres:` and `postgresql:` URLs (with or without `//`, any case) and
//!   of any other `scheme://` URL but `sqlite://` and `memory://`. The user
//!   part runs to the last `@` before the host, across spaces, tabs, quotes,
//!   `?` and `/` a password may hold, so a password that is not
//!   percent-encoded is hidden whole;
//! - the value of every key that ends in `password` (any case: `password`,
//!   `sslpassword`, `PGPASSWORD`, ...) or is `scram_client_key` or
//!   `scram_server_key` (libpq's secret keys): in a URL's query (keys
//!   percent-decoded first, the value runs to the next `&`, across spaces),
//!   and anywhere else as libpq reads `key = value` (a bare value runs to
//!   the next unescaped space, a quoted one `'...'` to the next unescaped
//!   `'`; an unterminated one to the end of the text). In a query, what
//!   follows the value up to the next known key (libpq's or the store's)
//!   is hidden with it: it may be the rest of a password whose `&` was not
//!   percent-encoded.
//!
//! - the value of a `keys=` key (any case; in free text when `keys` starts
//!   a word or follows `_` or `-`) unless it says where keys are read from,
//!   `env:VAR` or `file:PATH`: the store URLs take only those, so anything
//!   else may be a key pasted in by mistake. The value runs to the next
//!   `&`, space or quote.
//!
//! Other parameters (`options=-c ...`, `sslkey=PATH`, `keys=env:VAR`,
//! `offload=DIR`, host names, user names) are not secrets and stay visible.
//!
//! Free text is read line by line: a URL ends with its line (a password
//! holding a line break is not supported), at the next URL, and, when the
//! URL is quoted (`'...'`, `"..."` or `` `...` ``), at its closing quote if
//! the user part ends before it.

/// What a hidden secret is shown as.
pub(crate) const HIDDEN: &str = "***";

/// Whether a connection parameter named `key` holds a secret: a key ending
/// in `password`, or `scram_client_key` or `scram_server_key`; any case.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.ends_with("password") || key == "scram_client_key" || key == "scram_server_key"
}

/// Query keys a URL may carry: libpq's connection keywords and the store
/// URLs' own. What follows a secret value up to the next of them counts as
/// part of the secret.
const KNOWN_KEYS: &str = "host hostaddr port dbname user password passfile require_auth \
    channel_binding connect_timeout client_encoding options application_name \
    fallback_application_name keepalives keepalives_idle keepalives_interval keepalives_count \
    keepalives_retries tcp_user_timeout replication gssencmode sslmode sslnegotiation \
    sslcompression sslcert sslkey sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni \
    requirepeer ssl_min_protocol_version ssl_max_protocol_version min_protocol_version \
    max_protocol_version krbsrvname gsslib gssdelegation service target_session_attrs \
    load_balance_hosts scram_client_key scram_server_key schema pool_size min_idle \
    statement_timeout_ms pool_timeout_ms idle_timeout_ms max_lifetime_ms network_timeout_ms \
    rotate_interval_ms rotate_min_growth rotate_max_live rotate_lock_timeout_ms durability \
    busy_timeout_ms poll_interval_ms keys offload offload_threshold";

fn is_known_key(key: &str) -> bool {
    KNOWN_KEYS
        .split_whitespace()
        .any(|known| known.eq_ignore_ascii_case(key))
}

/// The secret keys the free-text scan looks for (lowercase); a key ending
/// in `password` is found by its `password` tail.
const SECRET_KEY_TAILS: [&str; 3] = ["password", "scram_client_key", "scram_server_key"];

/// `text` with every secret hidden (see the module docs).
pub(crate) fn redact_text(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Only ASCII bytes start a match, so `i` is a char boundary whenever
        // it is used to slice.
        if let Some(scheme_len) = url_at(text, i) {
            let end = region_end(text, i, scheme_len);
            let quote = i
                .checked_sub(1)
                .map(|q| bytes[q])
                .filter(|b| matches!(b, b'\'' | b'"' | b'`'));
            let (shown, used) = redact_url_at(&text[i..end], scheme_len, quote, false);
            out.push_str(&text[copied..i]);
            out.push_str(&shown);
            i += used.max(1);
            copied = i;
            continue;
        }
        if let Some((start, end)) = key_value_at(bytes, i).or_else(|| secret_value_at(bytes, i)) {
            out.push_str(&text[copied..start]);
            out.push_str(HIDDEN);
            i = end;
            copied = end;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// `url` taken whole as one URL (line breaks and all), with its secrets
/// hidden; text that does not start with a URL scheme is redacted as free
/// text.
pub(crate) fn redact_whole(url: &str) -> String {
    match url_at(url, 0) {
        Some(scheme_len) => {
            let (mut shown, used) = redact_url_at(url, scheme_len, None, true);
            shown.push_str(&redact_text(&url[used..]));
            shown
        }
        None => redact_text(url),
    }
}

fn is_scheme_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// When a URL whose user part may hold a password starts at `i`: the
/// length of its `scheme:` (with the `//` if present). `postgres:` and
/// `postgresql:` in any case, with or without `//`; any other scheme but
/// `sqlite` and `memory` only with `//`.
fn url_at(text: &str, i: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let starts_word = bytes.get(i).is_some_and(u8::is_ascii_alphabetic)
        && (i == 0 || !is_scheme_byte(bytes[i - 1]));
    if !starts_word {
        return None;
    }
    let mut j = i;
    while j < bytes.len() && is_scheme_byte(bytes[j]) {
        j += 1;
    }
    if bytes.get(j) != Some(&b':') {
        return None;
    }
    let scheme = &text[i..j];
    let slashes = bytes[j + 1..].starts_with(b"//");
    let after = j + 1 - i + if slashes { 2 } else { 0 };
    let postgres =
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql");
    let local = scheme.eq_ignore_ascii_case("sqlite") || scheme.eq_ignore_ascii_case("memory");
    (postgres || (slashes && !local)).then_some(after)
}

/// Where the text a URL starting at `start` may span ends: the end of its
/// line or the start of the next URL, whichever comes first.
fn region_end(text: &str, start: usize, scheme_len: usize) -> usize {
    let bytes = text.as_bytes();
    let line_end = bytes[start..]
        .iter()
        .position(|b| matches!(b, b'\n' | b'\r'))
        .map_or(bytes.len(), |p| start + p);
    (start + scheme_len..line_end)
        .find(|&j| url_at(text, j).is_some())
        .unwrap_or(line_end)
}

/// The closing `quote` in `bytes` at or after `from`: for `"` the next one
/// not escaped by a backslash (as in JSON); for `'` and `` ` `` the next
/// one followed by the end, a space or one of `:,;.)]}`.
fn closing_quote(bytes: &[u8], from: usize, quote: u8) -> Option<usize> {
    let mut i = from;
    while i < bytes.len() {
        let b = bytes[i];
        if quote == b'"' && b == b'\\' {
            i += 2;
            continue;
        }
        if b == quote {
            let next = bytes.get(i + 1);
            if quote == b'"'
                || next.is_none_or(|n| n.is_ascii_whitespace() || b":,;.)]}".contains(n))
            {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}

/// The `@` ending a user part that starts `slice` (after its `:`): the last
/// `@` before the query if one is, else the last `@` at all. The query
/// starts at the first `?` followed by `key=`, so a `?` in a password does
/// not count.
fn user_part_end(slice: &str) -> Option<usize> {
    let bytes = slice.as_bytes();
    let query = (0..bytes.len()).find(|&q| {
        bytes[q] == b'?' && {
            let key_len = bytes[q + 1..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'%' | b'-' | b'.'))
                .count();
            key_len > 0 && bytes.get(q + 1 + key_len) == Some(&b'=')
        }
    });
    query
        .and_then(|q| slice[..q].rfind('@'))
        .or_else(|| slice.rfind('@'))
}

/// The URL at the start of `region` (its scheme taking `scheme_len` bytes)
/// with its secrets hidden, and how many bytes of `region` it covers.
/// `quote` is the quote the URL follows, if any; `whole`: `region` is one
/// URL, spaces and all.
fn redact_url_at(
    region: &str,
    scheme_len: usize,
    quote: Option<u8>,
    whole: bool,
) -> (String, usize) {
    let rest = &region[scheme_len..];
    let bytes = rest.as_bytes();
    let mut out = String::with_capacity(region.len());
    out.push_str(&region[..scheme_len]);
    // Where a quoted URL ends; the whole region otherwise.
    let bounded = quote
        .and_then(|q| closing_quote(bytes, 0, q))
        .unwrap_or(bytes.len());
    // Where the visible part that follows `from` ends: the region's end for
    // a whole URL, else the first space or the closing quote.
    let token_end = |from: usize| -> usize {
        if whole {
            return bytes.len();
        }
        let space = bytes[from..]
            .iter()
            .position(u8::is_ascii_whitespace)
            .map_or(bytes.len(), |p| from + p);
        if from <= bounded {
            space.min(bounded)
        } else {
            space
        }
    };
    let user_stop = bytes.iter().position(|&b| {
        matches!(
            b,
            b':' | b'@' | b'/' | b'?' | b'#' | b'[' | b'\'' | b'"' | b'`'
        ) || b.is_ascii_whitespace()
    });
    // `postgres::name` (no `//`, no user) is a name, not a URL with a password.
    let authority = region[..scheme_len].ends_with("//");
    let mut pos = 0;
    match user_stop.map(|u| (u, bytes[u])) {
        Some((colon, b':')) if authority || colon > 0 => {
            let at = user_part_end(&rest[colon..bounded.max(colon)])
                .or_else(|| user_part_end(&rest[colon..]))
                .map(|at| colon + at);
            if let Some(at) = at {
                out.push_str(&rest[..colon]);
                out.push(':');
                out.push_str(HIDDEN);
                out.push('@');
                pos = at + 1;
            } else {
                // No `@`: the `:` starts a port, unless what follows is no
                // port; then it may be a password with the host missing.
                let run_end = bytes[colon + 1..]
                    .iter()
                    .position(|&b| {
                        matches!(b, b',' | b'/' | b'?' | b'#' | b'\'' | b'"' | b'`')
                            || b.is_ascii_whitespace()
                    })
                    .map_or(bytes.len(), |p| colon + 1 + p);
                if colon > 0 && !bytes[colon + 1..run_end].iter().all(u8::is_ascii_digit) {
                    out.push_str(&rest[..colon]);
                    out.push(':');
                    out.push_str(HIDDEN);
                    let hidden_to = if whole {
                        bytes.len()
                    } else if bounded > colon && bounded < bytes.len() {
                        bounded
                    } else {
                        token_end(colon + 1)
                    };
                    return (out, scheme_len + hidden_to);
                }
            }
        }
        Some((at, b'@')) => {
            out.push_str(&rest[..=at]);
            pos = at + 1;
        }
        _ => {}
    }
    // Host(s), path and query.
    let end = token_end(pos);
    let Some(q) = rest[pos..end].find('?').map(|q| pos + q) else {
        out.push_str(&rest[pos..end]);
        return (out, scheme_len + end);
    };
    out.push_str(&rest[pos..=q]);
    pos = q + 1;
    let mut end = token_end(pos);
    // A secret value runs to the next `&`, across spaces, within the quotes.
    let value_limit = bounded;
    while pos < end {
        let pair_end = rest[pos..end].find('&').map_or(end, |p| pos + p);
        let pair = &rest[pos..pair_end];
        match pair.split_once('=') {
            Some((key, value))
                if percent_decode(key).eq_ignore_ascii_case("keys") && !is_key_source(value) =>
            {
                out.push_str(key);
                out.push('=');
                out.push_str(HIDDEN);
                pos = pair_end;
            }
            Some((key, _)) if is_secret_key(&percent_decode(key)) => {
                out.push_str(key);
                out.push('=');
                out.push_str(HIDDEN);
                let value_start = pos + key.len() + 1;
                let limit = value_limit.max(value_start);
                let mut value_end = rest[value_start..limit]
                    .find('&')
                    .map_or(limit, |p| value_start + p);
                // `&...` that is no known parameter may be part of the
                // password (an `&` not percent-encoded).
                while value_end < limit {
                    let next = rest[value_end + 1..limit]
                        .find('&')
                        .map_or(limit, |p| value_end + 1 + p);
                    let known = rest[value_end + 1..next]
                        .split_once('=')
                        .is_some_and(|(key, _)| is_known_key(&percent_decode(key)));
                    if known {
                        break;
                    }
                    value_end = next;
                }
                pos = value_end;
                end = token_end(pos);
            }
            _ => {
                out.push_str(pair);
                pos = pair_end;
            }
        }
        if pos < end && bytes[pos] == b'&' {
            out.push('&');
            pos += 1;
        }
    }
    (out, scheme_len + pos.max(end))
}

/// Whether a `keys=` value says where keys are read from (`env:VAR`,
/// `file:PATH`) rather than being one.
fn is_key_source(value: &str) -> bool {
    value
        .strip_prefix("env:")
        .is_some_and(crate::url::is_env_name)
        || value
            .strip_prefix("file:")
            .is_some_and(|path| !path.is_empty())
}

/// The byte range of a `keys=` value at `i` in free text that is not a key
/// source (`env:VAR`, `file:PATH`): it may be a key. The value runs to the
/// next `&`, whitespace or quote (a quoted value to its closing quote).
fn key_value_at(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    const KEY: &[u8] = b"keys";
    let starts_word = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
    if !starts_word || !bytes.get(i..i + KEY.len())?.eq_ignore_ascii_case(KEY) {
        return None;
    }
    let mut eq = i + KEY.len();
    while eq < bytes.len() && matches!(bytes[eq], b' ' | b'\t') {
        eq += 1;
    }
    if bytes.get(eq) != Some(&b'=') {
        return None;
    }
    let mut start = eq + 1;
    let quote = bytes
        .get(start)
        .copied()
        .filter(|b| matches!(b, b'\'' | b'"'));
    if quote.is_some() {
        start += 1;
    }
    let end = bytes[start..]
        .iter()
        .position(|&b| match quote {
            Some(q) => b == q,
            None => b == b'&' || b == b'\'' || b == b'"' || b.is_ascii_whitespace(),
        })
        .map_or(bytes.len(), |p| start + p);
    let value = std::str::from_utf8(&bytes[start..end]).ok()?;
    (end > start && !is_key_source(value)).then_some((start, end))
}

/// The byte range of a secret `key=value`'s value at `i` in free text, read
/// as libpq reads connection strings.
fn secret_value_at(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    let tail = SECRET_KEY_TAILS.iter().find(|tail| {
        bytes
            .get(i..i + tail.len())
            .is_some_and(|b| b.eq_ignore_ascii_case(tail.as_bytes()))
    })?;
    let skip_blank = |mut j: usize| {
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\t') {
            j += 1;
        }
        j
    };
    let eq = skip_blank(i + tail.len());
    if bytes.get(eq) != Some(&b'=') {
        return None;
    }
    let start = skip_blank(eq + 1);
    if start >= bytes.len() || matches!(bytes[start], b'\n' | b'\r') {
        return None;
    }
    if bytes[start] == b'\'' {
        let mut k = start + 1;
        while k < bytes.len() {
            match bytes[k] {
                b'\\' => k += 2,
                b'\'' => return Some((start + 1, k)),
                _ => k += 1,
            }
        }
        // Unterminated: the rest of the text may all be the value.
        return Some((start + 1, bytes.len()));
    }
    let mut k = start;
    while k < bytes.len() {
        match bytes[k] {
            b'\\' => k += 2,
            b if b.is_ascii_whitespace() => break,
            // The end of a JSON string holding the pair.
            b'"' if bytes
                .get(k + 1)
                .is_none_or(|n| n.is_ascii_whitespace() || b",}]:".contains(n)) =>
            {
                break
            }
            _ => k += 1,
        }
    }
    Some((start, k.min(bytes.len())))
}

/// `%XX` escapes decoded (invalid ones kept), for comparing query keys.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "S3cret";

    fn hidden(text: &str) -> String {
        let shown = redact_text(text);
        assert!(!shown.contains(SECRET), "{text:?} shows as {shown:?}");
        let whole = redact_whole(text);
        assert!(!whole.contains(SECRET), "{text:?} whole shows as {whole:?}");
        shown
    }

    #[test]
    fn passwords_with_spaces_and_tabs_hide_to_the_last_at() {
        assert_eq!(
            hidden("in 'postgres://app:S3cret word@127.0.0.1:1/x': refused"),
            "in 'postgres://app:***@127.0.0.1:1/x': refused"
        );
        assert_eq!(
            hidden("postgres://app:S3cret\tw@rd@h/x sessions"),
            "postgres://app:***@h/x sessions"
        );
        assert_eq!(
            hidden("`a2-store inspect postgres://app:a S3cret b@h/x sessions`"),
            "`a2-store inspect postgres://app:***@h/x sessions`"
        );
        assert_eq!(
            hidden("'postgres://app:it's S3cret@h/db?schema=a': failed for 'b@c'"),
            "'postgres://app:***@h/db?schema=a': failed for 'b@c'"
        );
        assert_eq!(
            redact_whole("postgres://app:S3cret\nword@h/x"),
            "postgres://app:***@h/x"
        );
    }

    #[test]
    fn multi_host_and_encoded_passwords_hide() {
        assert_eq!(
            hidden("postgres://app:S3cret@h1:5432,h2:5433/db?target_session_attrs=read-write"),
            "postgres://app:***@h1:5432,h2:5433/db?target_session_attrs=read-write"
        );
        assert_eq!(
            hidden("postgres://app:S3cret%20%40x@[::1]:5432/db"),
            "postgres://app:***@[::1]:5432/db"
        );
        assert_eq!(
            redact_text("postgres://h1:5432,h2:5433/db"),
            "postgres://h1:5432,h2:5433/db"
        );
        assert_eq!(
            redact_text("postgres://[::1]:5432/db"),
            "postgres://[::1]:5432/db"
        );
        // Names that are no URLs: check's case names, a backend prefix.
        for name in [
            "postgres::append ... ok",
            "postgres::claim a@b",
            "postgres: 3 sessions",
        ] {
            assert_eq!(redact_text(name), name);
        }
        assert_eq!(
            hidden("postgres://app:S3cret?x@db/prod?application_name=a@b"),
            "postgres://app:***@db/prod?application_name=a@b"
        );
        // A user part with no host: the password is hidden all the same.
        assert_eq!(
            hidden("'postgres://app:S3cret': bad"),
            "'postgres://app:***': bad"
        );
    }

    #[test]
    fn query_secrets_hide_whatever_their_spelling() {
        for text in [
            "postgres://h/db?password=S3cret&sslmode=require",
            "postgres://h/db?PassWord=S3cret&sslmode=require",
            "postgres://h/db?pass%77ord=S3cret&sslmode=require",
            "postgres://h/db?sslpassword=S3cret&sslmode=require",
            "postgres://h/db?password=S3&cret&sslmode=require",
            "postgres://h/db?password=a&S3cret=b&sslmode=require",
            "postgres://h/db?password=a&b=S3cret&sslmode=require",
        ] {
            let shown = hidden(text);
            assert!(shown.ends_with("=***&sslmode=require"), "{shown}");
        }
        assert_eq!(
            hidden("'postgres://h/db?password=a S3cret': failed"),
            "'postgres://h/db?password=***': failed"
        );
        assert_eq!(
            hidden("\"postgresql://h/db?password=S3cret\", \"next\": 1"),
            "\"postgresql://h/db?password=***\", \"next\": 1"
        );
        assert_eq!(
            hidden("POSTGRES://app:S3cret@h/db and mysql://root:S3cret@h/db"),
            "POSTGRES://app:***@h/db and mysql://root:***@h/db"
        );
    }

    #[test]
    fn key_value_strings_hide_their_secrets() {
        assert_eq!(
            hidden("host=127.0.0.1 user=app password=S3cret dbname=x"),
            "host=127.0.0.1 user=app password=*** dbname=x"
        );
        assert_eq!(
            hidden("host=h password = 'a S3cret \\' b' port=5"),
            "host=h password = '***' port=5"
        );
        assert_eq!(hidden("password=S3cret\\ word x"), "password=*** x");
        assert_eq!(hidden("password='S3cret unterminated"), "password='***");
        assert_eq!(
            hidden("PGPASSWORD=S3cret a2-store"),
            "PGPASSWORD=*** a2-store"
        );
        assert_eq!(
            hidden("{\"note\":\"sslpassword=S3cret\",\"n\":1}"),
            "{\"note\":\"sslpassword=***\",\"n\":1}"
        );
        assert_eq!(hidden("scram_client_key=S3cret"), "scram_client_key=***");
        // Not secrets: the keys and other values.
        assert_eq!(
            redact_text("options=-c\\ search_path=a sslkey=/k user=app"),
            "options=-c\\ search_path=a sslkey=/k user=app"
        );
        assert_eq!(
            redact_text("option 'password' given twice"),
            "option 'password' given twice"
        );
    }

    #[test]
    fn other_text_is_left_alone() {
        for text in [
            "sqlite:a.db",
            "sqlite://dir/a:b@c.db",
            "memory:",
            "postgres://u@h/d",
            "no url here: a@b c:d",
            "ünïcödé postgres://u@h/d ✓",
            "",
        ] {
            assert_eq!(redact_text(text), text);
        }
        assert_eq!(
            redact_text("a postgres://u:p@h/d and 'postgresql://v:q@i/e?password=r' end"),
            "a postgres://u:***@h/d and 'postgresql://v:***@i/e?password=***' end"
        );
        assert!(is_secret_key("PGPASSWORD") && is_secret_key("sslpassword"));
        assert!(!is_secret_key("options") && !is_secret_key("passfile"));
    }

    #[test]
    fn keys_pasted_into_urls_hide_and_key_sources_show() {
        assert_eq!(
            hidden("open 'sqlite:a.db?keys=k1:S3cret&pool_size=2' failed"),
            "open 'sqlite:a.db?keys=***&pool_size=2' failed"
        );
        assert_eq!(hidden("memory:?KEYS=S3cret"), "memory:?KEYS=***");
        assert_eq!(
            hidden("postgres://h/db?keys=k1:S3cret&schema=a"),
            "postgres://h/db?keys=***&schema=a"
        );
        assert_eq!(
            hidden("--keys 'x' api_keys='k1:S3cret b'"),
            "--keys 'x' api_keys='***'"
        );
        for shown in [
            "sqlite:a.db?keys=env:A2_STORE_KEYS&offload=/srv/p&offload_threshold=9",
            "postgres://h/db?keys=file:/etc/a2/keys&schema=a",
            "memory:?keys=env:K",
            "monkeys=S3cret",
            "keys",
        ] {
            assert_eq!(redact_text(shown), shown);
        }
    }
}

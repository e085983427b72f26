//! Query strings and form bodies, parsed by hand so every bad parameter
//! answers an HTML page naming it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Decoded `name=value` pairs, in order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_urlencoded::from_str::<Vec<(String, String)>>(text)
            .map(Self)
            .map_err(|e| format!("the parameters could not be read: {e}"))
    }

    pub fn parse_body(body: &[u8]) -> Result<Self, String> {
        serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
            .map(Self)
            .map_err(|e| format!("the form could not be read: {e}"))
    }

    /// The first value of `name`, `None` when absent or empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// Every non-empty value of `name`; comma-separated lists are split.
    pub fn all(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, value) in self.0.iter().filter(|(k, _)| k == name) {
            for part in value.split(',') {
                let part = part.trim();
                if !part.is_empty() && !out.iter().any(|o| o == part) {
                    out.push(part.to_owned());
                }
            }
        }
        out
    }

    pub fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name)
            .ok_or_else(|| format!("the field '{name}' is required"))
    }

    pub fn u64(&self, name: &str) -> Result<Option<u64>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(text) => {
                text.trim().parse::<u64>().map(Some).map_err(|_| {
                    format!("'{name}' must be a whole number, not '{}'", shorten(text))
                })
            }
        }
    }

    pub fn flag(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| matches!(v, "1" | "true" | "on" | "yes"))
    }

    /// A page size: `default` when absent, 1 to `max`.
    pub fn limit(&self, default: usize, max: usize) -> Result<usize, String> {
        match self.u64("limit")? {
            None => Ok(default),
            Some(0) => Err("'limit' must be at least 1".to_owned()),
            Some(n) if n > max as u64 => Err(format!("'limit' must be at most {max}")),
            Some(n) => Ok(n as usize),
        }
    }
}

/// At most 80 characters of `text`, for messages that quote input.
pub(crate) fn shorten(text: &str) -> String {
    if text.chars().count() <= 80 {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(80).collect();
        format!("{cut}…")
    }
}

/// Now on the wall clock, ms since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A duration like `90s`, `15m`, `2h`, `1d`, `500ms` (a bare number is ms).
pub(crate) fn parse_duration_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits.parse().ok()?;
    let factor = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// A time: ms since the epoch (`1700000000000`), `now`, `+15m` (from now)
/// or `-2h` (ago); `YYYY-MM-DDTHH:MM[:SS]` (UTC) also works.
pub(crate) fn parse_time(text: &str, now: i64) -> Result<i64, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "'{}' is not a time: use ms since the epoch, 'now', '+15m', '-2h' or 'YYYY-MM-DDTHH:MM' (UTC)",
            shorten(text)
        )
    };
    if text == "now" {
        return Ok(now);
    }
    if let Some(rest) = text.strip_prefix('+') {
        return parse_duration_ms(rest)
            .and_then(|d| now.checked_add(d))
            .ok_or_else(bad);
    }
    if let Some(rest) = text.strip_prefix('-') {
        return parse_duration_ms(rest)
            .and_then(|d| now.checked_sub(d))
            .ok_or_else(bad);
    }
    if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        return text.parse::<i64>().map_err(|_| bad());
    }
    parse_datetime(text).ok_or_else(bad)
}

/// `YYYY-MM-DDTHH:MM[:SS][Z]` or with a space, UTC.
fn parse_datetime(text: &str) -> Option<i64> {
    let text = text.trim_end_matches('Z');
    let (date, time) = text.split_once(['T', ' '])?;
    let mut d = date.split('-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: u32 = d.next()?.parse().ok()?;
    let day: u32 = d.next()?.parse().ok()?;
    if d.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut t = time.split(':');
    let hour: i64 = t.next()?.parse().ok()?;
    let minute: i64 = t.next()?.parse().ok()?;
    let second: i64 = match t.next() {
        Some(s) => s.parse().ok()?,
        None => 0,
    };
    if t.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number since 1970-01-01: (year, month, day).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        for days in [-1000, 0, 1, 19_000, 20_000, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
    }

    #[test]
    fn times_parse() {
        let now = 1_000_000;
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("+1m", now), Ok(now + 60_000));
        assert_eq!(parse_time("-1s", now), Ok(now - 1_000));
        assert_eq!(parse_time("42", now), Ok(42));
        assert_eq!(parse_time("1970-01-01T00:01", now), Ok(60_000));
        assert!(parse_time("soon", now).is_err());
        assert!(parse_time("+99999999999999999999d", now).is_err());
    }

    #[test]
    fn limits_are_checked() {
        let p = Params::parse("limit=0").unwrap();
        assert!(p.limit(50, 200).is_err());
        let p = Params::parse("limit=201").unwrap();
        assert!(p.limit(50, 200).is_err());
        let p = Params::parse("limit=x").unwrap();
        assert!(p.limit(50, 200).is_err());
        let p = Params::parse("").unwrap();
        assert_eq!(p.limit(50, 200), Ok(50));
    }
}

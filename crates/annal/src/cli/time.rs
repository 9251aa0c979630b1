//! Times as people write them on a command line: milliseconds since the epoch, RFC 3339 / ISO 8601, or relative
//! to now (`-1h`, `-30m`, `-2d`, `+10s`), as rpk and kcat take them.

use std::time::{SystemTime, UNIX_EPOCH};

/// Units of a relative time, longest suffix first so `ms` is not read as `m`.
const UNITS_MS: &[(&str, i64)] = &[
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
    ("w", 7 * 86_400_000),
];

/// A time as milliseconds since the Unix epoch, relative times counted from now. For clap's `value_parser`.
pub fn parse_time(s: &str) -> Result<i64, String> {
    parse_time_at(s, now_ms())
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `parse_time` with an explicit "now", for tests.
pub fn parse_time_at(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(rest) = s.strip_prefix(['-', '+']) {
        let sign = if s.starts_with('-') { -1 } else { 1 };
        let delta = parse_duration_ms(rest).ok_or_else(|| {
            format!("'{s}' is not a relative time; write e.g. -1h, -30m, -45s, -2d or +10m")
        })?;
        return Ok(now_ms.saturating_add(sign * delta).max(0));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map_err(|_| format!("'{s}' is too large for milliseconds since the epoch"));
    }
    super::group::parse_datetime(s).map_err(|e| {
        format!("{e}, a relative time such as -1h or -30m, or milliseconds since the epoch")
    })
}

/// `90s`, `1h30m`, `500ms`: a sum of whole numbers with units. None when it does not parse or overflows.
fn parse_duration_ms(s: &str) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, factor) = UNITS_MS.iter().find(|(u, _)| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        total = total.checked_add(n.checked_mul(*factor)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_420_800_000; // 2026-11-23T08:00:00Z

    #[test]
    fn relative_times_count_from_now() {
        assert_eq!(parse_time_at("-1h", NOW), Ok(NOW - 3_600_000));
        assert_eq!(parse_time_at("-30m", NOW), Ok(NOW - 1_800_000));
        assert_eq!(parse_time_at("-1h30m", NOW), Ok(NOW - 5_400_000));
        assert_eq!(parse_time_at("-500ms", NOW), Ok(NOW - 500));
        assert_eq!(parse_time_at("+10s", NOW), Ok(NOW + 10_000));
        assert_eq!(parse_time_at("-2d", NOW), Ok(NOW - 2 * 86_400_000));
        assert_eq!(parse_time_at("now", NOW), Ok(NOW));
        // Far in the past is the epoch, not a negative time (which ListOffsets reads as latest/earliest).
        assert_eq!(parse_time_at("-100000w", NOW), Ok(0));
        for bad in ["-", "-1", "-h", "-1y", "-1h-", "-99999999999999999999h"] {
            let e = parse_time_at(bad, NOW).unwrap_err();
            assert!(e.contains("-30m"), "{bad}: {e}");
        }
    }

    #[test]
    fn absolute_times() {
        assert_eq!(parse_time_at("1700000000000", NOW), Ok(1_700_000_000_000));
        assert_eq!(parse_time_at("2026-11-23T08:00:00Z", NOW), Ok(NOW));
        assert_eq!(parse_time_at("2026-11-23T10:00:00+02:00", NOW), Ok(NOW));
        let e = parse_time_at("yesterday", NOW).unwrap_err();
        assert!(e.contains("relative time"), "{e}");
        assert!(parse_time_at("99999999999999999999", NOW).is_err());
    }
}

//! RFC 3339 dates without a date library: guests stay small.

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]` with an optional `Z` or
/// `±HH:MM` offset, into Unix seconds.
pub fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let bad = || {
        format!("`{text}` is not a date; use RFC 3339 such as 2026-11-01 or 2026-11-01T09:30:00Z")
    };
    let text = text.trim();
    let (date, time) = match text.find(['T', 't', ' ']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let y: i64 = y.parse().map_err(|_| bad())?;
    let m: u32 = m.parse().map_err(|_| bad())?;
    let d: u32 = d.parse().map_err(|_| bad())?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    if let Some(time) = time {
        let (clock, offset) = split_offset(time).ok_or_else(bad)?;
        let mut hms = clock.split(':');
        let h: i64 = hms.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let min: i64 = hms.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let s: f64 = hms.next().unwrap_or("0").parse().map_err(|_| bad())?;
        if h > 23 || min > 59 || !(0.0..61.0).contains(&s) {
            return Err(bad());
        }
        secs += h * 3600 + min * 60 + s as i64 - offset;
    }
    Ok(secs)
}

/// Splits `HH:MM:SS±HH:MM` / `…Z` into the clock and the offset in seconds.
fn split_offset(time: &str) -> Option<(&str, i64)> {
    if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        return Some((clock, 0));
    }
    match time.rfind(['+', '-']) {
        Some(i) => {
            let sign = if time.as_bytes()[i] == b'-' { -1 } else { 1 };
            let (oh, om) = time[i + 1..].split_once(':')?;
            let offset = oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60;
            Some((&time[..i], sign * offset))
        }
        None => Some((time, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_dates() {
        assert_eq!(parse_rfc3339("1970-01-01").unwrap(), 0);
        assert_eq!(
            parse_rfc3339("2026-11-30T03:19:30Z").unwrap(),
            1_796_008_770
        );
        assert_eq!(format_rfc3339(1_796_008_770), "2026-11-30T03:19:30Z");
        assert_eq!(
            parse_rfc3339("2026-11-30T04:19:30+01:00").unwrap(),
            1_796_008_770
        );
        assert!(parse_rfc3339("yesterday").is_err());
    }
}

//! The ISO 8601 basic timestamps of SigV4 (`20130524T000000Z`) and their conversion to
//! `SystemTime`. Parsed by hand: the format is fixed-width and the civil-date arithmetic is a
//! dozen lines, so no date crate is needed for it (RFC 1123 `Date:` headers use `httpdate`).

use std::time::UNIX_EPOCH;

/// A validated SigV4 timestamp: the exact text the client signed plus the instant it names.
#[derive(Clone, Debug)]
pub(crate) struct AmzDate {
    /// `YYYYMMDDTHHMMSSZ`, as it appears in the string to sign.
    pub text: String,
    /// Seconds since the Unix epoch (timestamps before 1970 are rejected).
    pub unix_secs: u64,
}

impl AmzDate {
    /// Parses `YYYYMMDDTHHMMSSZ`; any other shape or an impossible date is `None`.
    pub fn parse(text: &str) -> Option<AmzDate> {
        let b = text.as_bytes();
        if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<u64> {
            let part = &b[range];
            if !part.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(part.iter().fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')))
        };
        let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
        let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
        if year < 1970 || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some(AmzDate { text: text.to_owned(), unix_secs: days * 86_400 + hour * 3600 + minute * 60 + second })
    }

    /// The timestamp of an RFC 1123 `Date:` header, re-expressed in the SigV4 format.
    pub fn from_http_date(value: &str) -> Option<AmzDate> {
        let time = httpdate::parse_http_date(value).ok()?;
        let unix_secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
        Some(AmzDate { text: format_unix(unix_secs), unix_secs })
    }

    /// `YYYYMMDD`, the date that must appear in the credential scope.
    pub fn date_part(&self) -> &str {
        // `text` is 16 ASCII bytes by construction (parse or format_unix).
        &self.text[..8]
    }
}

/// Formats seconds since the epoch as `YYYYMMDDTHHMMSSZ`.
pub(crate) fn format_unix(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn is_leap(year: u64) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(year) => 29,
        _ => 28,
    }
}

/// Days from 1970-01-01 to the given date (year ≥ 1970), Howard Hinnant's algorithm.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of `days_from_civil`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documentation_timestamp() {
        let d = AmzDate::parse("20130524T000000Z").expect("valid");
        assert_eq!(d.unix_secs, 1_369_353_600);
        assert_eq!(d.date_part(), "20130524");
        assert_eq!(format_unix(d.unix_secs), "20130524T000000Z");
    }

    #[test]
    fn rejects_malformed_and_impossible_dates() {
        for bad in [
            "",
            "20130524",
            "20130524T000000",
            "20130524T000000z",
            "2013-05-24T00:00:00Z",
            "20130229T000000Z",
            "20131301T000000Z",
            "20130500T000000Z",
            "20130524T240000Z",
            "20130524T006000Z",
            "19691231T235959Z",
            "2013052AT000000Z",
            "+0130524T000000Z",
        ] {
            assert!(AmzDate::parse(bad).is_none(), "{bad} must be rejected");
        }
        assert!(AmzDate::parse("20240229T235959Z").is_some());
    }

    #[test]
    fn format_and_parse_round_trip_over_centuries() {
        // Every 9999th day plus a changing time of day from 1970 to beyond 2400.
        let mut secs = 0u64;
        while secs < 14_000_000_000 {
            let text = format_unix(secs);
            let back = AmzDate::parse(&text).expect("formatted dates parse");
            assert_eq!(back.unix_secs, secs, "{text}");
            secs += 9999 * 86_400 + 3_661;
        }
    }

    #[test]
    fn http_date_is_converted() {
        let d = AmzDate::from_http_date("Fri, 24 May 2013 00:00:00 GMT").expect("valid");
        assert_eq!(d.text, "20130524T000000Z");
    }
}

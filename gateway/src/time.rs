//! Time formats S3 uses: milliseconds since the epoch internally, RFC 7231 dates in headers,
//! ISO 8601 (`2009-10-12T17:50:30.000Z`) in XML.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The current wall-clock time in milliseconds since the Unix epoch (0 if the clock reads
/// earlier): what records store as `*_ms`.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The instant `ms` milliseconds after the Unix epoch.
pub fn to_system_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// `Last-Modified` header form (second precision).
pub fn http_date(ms: u64) -> String {
    httpdate::fmt_http_date(to_system_time(ms))
}

/// Parses an HTTP date header into milliseconds since the epoch.
pub fn parse_http_date(s: &str) -> Option<u64> {
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_millis() as u64)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses an XML timestamp (`2009-10-12T17:50:30.000Z`, fraction optional) into milliseconds
/// since the epoch; `None` for anything else or a time before the epoch.
pub fn parse_iso8601(s: &str) -> Option<u64> {
    let b = s.trim().as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        part.iter().all(u8::is_ascii_digit).then(|| std::str::from_utf8(part).ok()?.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut ms = 0u64;
    let mut rest = &b[19..];
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        let mut scale = 100;
        for &c in &frac[..n.min(3)] {
            ms += u64::from(c - b'0') * scale;
            scale /= 10;
        }
        rest = &frac[n..];
    }
    if rest != b"Z" {
        return None;
    }
    let days = days_from_civil(i64::from(y), mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + sec);
    u64::try_from(secs).ok().map(|s| s * 1000 + ms)
}

/// XML timestamp form with milliseconds.
pub fn iso8601(ms: u64) -> String {
    let mut out = Vec::with_capacity(24);
    Iso8601Writer::default().write(&mut out, ms);
    String::from_utf8(out).unwrap_or_default()
}

/// Writes many timestamps in a row (a listing writes a thousand per page): no formatter and
/// no allocation, and the date and time of day are computed once per distinct second.
#[derive(Default)]
pub struct Iso8601Writer {
    /// The second `prefix` was made for.
    secs: Option<u64>,
    /// `YYYY-MM-DDTHH:MM:SS.` of that second.
    prefix: [u8; 20],
}

impl Iso8601Writer {
    /// Appends the timestamp `ms` (ASCII).
    pub fn write(&mut self, out: &mut Vec<u8>, ms: u64) {
        let secs = ms / 1000;
        if self.secs != Some(secs) {
            let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
            let sod = secs % 86_400;
            let mut text = *b"0000-00-00T00:00:00.";
            digits(&mut text[0..4], y.clamp(0, 9999) as u64);
            digits(&mut text[5..7], u64::from(mo));
            digits(&mut text[8..10], u64::from(d));
            digits(&mut text[11..13], sod / 3600);
            digits(&mut text[14..16], (sod / 60) % 60);
            digits(&mut text[17..19], sod % 60);
            self.prefix = text;
            self.secs = Some(secs);
        }
        let ms = (ms % 1000) as u16;
        let mut text = [0u8; 24];
        text[..20].copy_from_slice(&self.prefix);
        text[20..].copy_from_slice(&[
            b'0' + (ms / 100) as u8,
            b'0' + (ms / 10 % 10) as u8,
            b'0' + (ms % 10) as u8,
            b'Z',
        ]);
        out.extend_from_slice(&text);
    }
}

/// Writes `v` in decimal into all of `out`, zero-padded (the most significant digits are cut
/// if it does not fit).
fn digits(out: &mut [u8], mut v: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_round_trips() {
        for ms in [0, 1, 999, 1_255_369_830_123, 1_764_384_000_000, 4_102_444_800_000, 951_782_400_500] {
            assert_eq!(parse_iso8601(&iso8601(ms)), Some(ms), "{}", iso8601(ms));
        }
        assert_eq!(parse_iso8601("2009-10-12T17:50:30Z"), Some(1_255_369_830_000));
        assert_eq!(parse_iso8601("2009-10-12T17:50:30.5Z"), Some(1_255_369_830_500));
        for bad in [
            "",
            "2009-10-12 17:50:30Z",
            "2009-13-12T17:50:30Z",
            "2009-10-12T17:50:30",
            "1969-12-31T23:59:59Z",
            "2009-10-12T17:50:30.Z",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_255_369_830_123), "2009-10-12T17:50:30.123Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        // The writer reuses the second's text: milliseconds change, and a new second is made anew.
        let mut w = Iso8601Writer::default();
        let mut s = Vec::new();
        for ms in [1_255_369_830_123, 1_255_369_830_999, 1_255_369_831_004, 951_782_400_000] {
            w.write(&mut s, ms);
            s.push(b' ');
        }
        assert_eq!(String::from_utf8(s).unwrap(), "2009-10-12T17:50:30.123Z 2009-10-12T17:50:30.999Z 2009-10-12T17:50:31.004Z 2000-02-29T00:00:00.000Z ");
        assert_eq!(http_date(1_255_369_830_123), "Mon, 12 Oct 2009 17:50:30 GMT");
        assert_eq!(parse_http_date("Mon, 12 Oct 2009 17:50:30 GMT"), Some(1_255_369_830_000));
        assert_eq!(parse_http_date("yesterday"), None);
    }
}

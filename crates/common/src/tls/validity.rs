//! The validity period (notBefore, notAfter) of a DER X.509 certificate.
//!
//! webpki checks validity only on the path it builds, and it refuses to build one whose end
//! entity is a CA certificate; the identity checks here need the dates of certificates it
//! will not look at (a configured anchor presented as the server's certificate, our own
//! certificate on disk). Only the few DER elements in front of `validity` are walked
//! (RFC 5280 §4.1): version, serialNumber, signature, issuer, validity. The input is always
//! a certificate we were configured with or wrote ourselves, but malformed bytes still give
//! `None`, never a panic.

use std::time::Duration;

use rustls::pki_types::UnixTime;

/// When a certificate starts and stops being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: UnixTime,
    pub not_after: UnixTime,
}

impl Validity {
    /// Whether `now` lies within the period (both ends inclusive, as RFC 5280 says).
    pub fn contains(&self, now: UnixTime) -> bool {
        self.not_before.as_secs() <= now.as_secs() && now.as_secs() <= self.not_after.as_secs()
    }
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The validity of the DER certificate `der`, or `None` if it is not one.
pub fn validity(der: &[u8]) -> Option<Validity> {
    let (tag, cert, _) = element(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.2;
    }
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (tag, validity, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (not_before, rest) = time(validity)?;
    let (not_after, _) = time(rest)?;
    Some(Validity {
        not_before: UnixTime::since_unix_epoch(Duration::from_secs(not_before)),
        not_after: UnixTime::since_unix_epoch(Duration::from_secs(not_after)),
    })
}

/// One DER element: tag, contents, what follows.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// A UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as Unix seconds.
fn time(input: &[u8]) -> Option<(u64, &[u8])> {
    let (tag, value, rest) = element(input)?;
    let (year, digits) = match (tag, value.len()) {
        (UTC_TIME, 13) => {
            let yy = number(&value[..2])?;
            // RFC 5280 §4.1.2.5.1: 50-99 are 19xx, 00-49 are 20xx.
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &value[2..])
        }
        (GENERALIZED_TIME, 15) => (number(&value[..4])?, &value[4..]),
        _ => return None,
    };
    if digits.last() != Some(&b'Z') {
        return None;
    }
    let field = |i: usize| number(&digits[i..i + 2]);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second, rest))
}

fn number(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

/// Days from 1970-01-01 to a date on or after it (proleptic Gregorian calendar), after
/// Howard Hinnant's `days_from_civil`.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(t: UnixTime) -> u64 {
        t.as_secs()
    }

    #[test]
    fn dates_convert_to_unix_seconds() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    }

    #[test]
    fn reads_the_dates_rcgen_writes() {
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2001, 2, 3);
        // After 2049, so written as GeneralizedTime.
        params.not_after = rcgen::date_time_ymd(2051, 6, 7);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        let v = validity(cert.der()).expect("validity");
        assert_eq!(secs(v.not_before), days_from_civil(2001, 2, 3) * 86_400);
        assert_eq!(secs(v.not_after), days_from_civil(2051, 6, 7) * 86_400);
        let inside = UnixTime::since_unix_epoch(Duration::from_secs(secs(v.not_before) + 1));
        assert!(v.contains(inside));
        let after = UnixTime::since_unix_epoch(Duration::from_secs(secs(v.not_after) + 1));
        assert!(!v.contains(after));
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert_eq!(validity(b""), None);
        assert_eq!(validity(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(validity(b"\x30\x03\x30\x01\x02"), None);
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2001, 2, 3);
        let key = rcgen::KeyPair::generate().expect("key");
        let der = params.self_signed(&key).expect("cert").der().to_vec();
        for cut in 0..der.len() {
            // Truncations either still reach the validity or are refused; none panics.
            let _ = validity(&der[..cut]);
        }
    }
}

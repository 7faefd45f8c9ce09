//! Durations as users type them (`5s`, `250ms`, `1m`, `1.5s`, `100us`), the companion of
//! [`crate::size`]: one grammar for every duration flag and scenario field.
//!
//! Units: `ns`, `us` (or `µs`), `ms`, `s`, `m` (or `min`), `h`. A bare number is seconds, so
//! flags that used to take bare seconds keep their meaning. Only ASCII digits with at most one
//! decimal point are read: no signs, exponents, `NaN` or `inf`.

use std::time::Duration;

/// A duration string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct DurationParseError {
    pub input: String,
    pub reason: &'static str,
}

/// Parse a human duration; bare numbers are seconds.
pub fn parse_duration(input: &str) -> Result<Duration, DurationParseError> {
    let err = |reason| DurationParseError {
        input: input.to_string(),
        reason,
    };
    let (num, unit) = crate::size::split_quantity(input).ok_or_else(|| err("expected a number"))?;
    let unit_nanos: u128 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(err("unknown unit (use ns, us, ms, s, m, h)")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.contains('.') {
        return Err(err("more than one decimal point"));
    }
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| err("too large"))?
    };
    // Digits beyond 18 are below a nanosecond for every unit; dropping them keeps the
    // arithmetic inside u128.
    let frac = &frac[..frac.len().min(18)];
    let frac_nanos = if frac.is_empty() {
        0
    } else {
        let val: u128 = frac.parse().map_err(|_| err("bad fraction"))?;
        let digits = u32::try_from(frac.len()).map_err(|_| err("bad fraction"))?;
        val * unit_nanos / 10u128.pow(digits)
    };
    let total = int
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(frac_nanos))
        .ok_or_else(|| err("too large"))?;
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| err("too large"))?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| err("too large"))?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("100µs"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration(" 0.25 s "), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(".5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn hostile() {
        for bad in [
            "",
            " ",
            ".",
            "s",
            "-1",
            "-1s",
            "+1s",
            "1e999",
            "1e3",
            "NaN",
            "inf",
            "1.2.3",
            "5 parsecs",
            "5S",
            "١٢s",
            "99999999999999999999999999999999999999999999",
            "18446744073709551616",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        // The largest whole-second count still fits.
        assert_eq!(
            parse_duration("18446744073709551615"),
            Ok(Duration::from_secs(u64::MAX))
        );
    }
}

//! Byte counts with unit suffixes, as users type them (`64MiB`, `10G`, `1.5GB`, `4096`).
//!
//! Binary suffixes (`KiB`, `MiB`, `GiB`, `TiB`, and the shorthand `K`, `M`, `G`, `T`) are powers
//! of 1024; decimal ones (`kB`, `MB`, `GB`, `TB`) powers of 1000. Bare numbers are bytes.

use std::fmt;

/// A size string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}")]
pub struct SizeParseError {
    pub input: String,
    pub reason: &'static str,
}

/// Split `" 1.5GiB "` into `("1.5", "GiB")`: ASCII digits with dots, then the rest. `None`
/// when there is no number. Shared by the size and duration grammars.
pub(crate) fn split_quantity(input: &str) -> Option<(&str, &str)> {
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    (!num.is_empty() && num != ".").then_some((num, unit))
}

/// Parse a human size into bytes.
pub fn parse_size(input: &str) -> Result<u64, SizeParseError> {
    let err = |reason| SizeParseError {
        input: input.to_string(),
        reason,
    };
    let (num, unit) = split_quantity(input).ok_or_else(|| err("expected a number"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(err(
                "unknown unit (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)",
            ))
        }
    };
    if let Some((int, frac)) = num.split_once('.') {
        if frac.contains('.') {
            return Err(err("more than one decimal point"));
        }
        let int: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| err("number too large"))?
        };
        let frac_digits = frac.len().min(9);
        let frac_val: u64 = if frac_digits == 0 {
            0
        } else {
            frac[..frac_digits]
                .parse()
                .map_err(|_| err("bad fraction"))?
        };
        let scale = 10u64.pow(u32::try_from(frac_digits).unwrap_or(9));
        let whole = int.checked_mul(mult).ok_or_else(|| err("too large"))?;
        let part = u128::from(frac_val) * u128::from(mult) / u128::from(scale);
        whole
            .checked_add(u64::try_from(part).map_err(|_| err("too large"))?)
            .ok_or_else(|| err("too large"))
    } else {
        num.parse::<u64>()
            .map_err(|_| err("number too large"))?
            .checked_mul(mult)
            .ok_or_else(|| err("too large"))
    }
}

/// Formats a byte count with a binary unit, e.g. `1.50 GiB`.
pub struct HumanBytes(pub u64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut i = 0;
        while v >= 1024.0 && i + 1 < UNITS.len() {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{v:.2} {}", UNITS[i])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("0.5 KiB"), Ok(512));
        assert_eq!(parse_size("2kb"), Ok(2000));
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000TiB").is_err());
        assert!(parse_size("1.2.3").is_err());
        for bad in ["-1", "+1", "1e999", "NaN", "inf", "١٢", "1.5.", " ", "."] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn human() {
        assert_eq!(HumanBytes(512).to_string(), "512 B");
        assert_eq!(HumanBytes(3 << 29).to_string(), "1.50 GiB");
    }
}

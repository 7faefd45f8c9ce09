//! Human-friendly quantities in scenario files: sizes (`1GiB`, `512MiB`, `1.5GB`) and durations
//! (`100ms`, `1.5s`, `2m`) in the same grammar as the command line (from `xfer-core`), rates
//! (`1G`, `100Mbit`: decimal bits per second, as links are quoted), and their short printed forms.

use std::time::Duration;

/// Splits `"1.5GiB"` into `(1.5, "GiB")`.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let value: f64 = s[..end].parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| (value, s[end..].trim()))
}

/// A byte count in the grammar every `xfer` flag uses (`xfer_core::size`): `K/M/G/T` and
/// `KiB/MiB/GiB/TiB` are powers of 1024, `kB/MB/GB/TB` powers of 1000, bare numbers bytes.
/// Link *rates* below keep the decimal convention links are quoted in.
pub fn parse_size(s: &str) -> Option<u64> {
    xfer_core::size::parse_size(s).ok()
}

/// A rate in bits per second: plain number, or `k/M/G` with optional `bit`/`bps` (powers of
/// 1000, as link rates are quoted).
pub fn parse_rate(s: &str) -> Option<u64> {
    let (v, unit) = split_number(s)?;
    let unit = unit.to_ascii_lowercase();
    let unit = unit
        .strip_suffix("bit/s")
        .or_else(|| unit.strip_suffix("bps"))
        .or_else(|| unit.strip_suffix("bit"))
        .unwrap_or(&unit);
    let mult = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return None,
    };
    let bps = v * mult;
    (bps <= u64::MAX as f64).then_some(bps.round() as u64)
}

/// A duration in the grammar every `xfer` flag uses (`xfer_core::duration`): `ns`, `us`, `ms`,
/// `s` (also a bare number), `m`/`min`, `h`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    xfer_core::duration::parse_duration(s).ok()
}

/// `1GiB`, `24MiB`, `1500B`: the largest binary unit that divides exactly, else bytes.
pub fn format_size(bytes: u64) -> String {
    for (unit, mult) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= mult && bytes % mult == 0 {
            return format!("{}{unit}", bytes / mult);
        }
    }
    format!("{bytes}B")
}

/// `1Gbit/s`, `100Mbit/s`, `1.5Gbit/s`.
pub fn format_rate(bps: u64) -> String {
    let (v, unit) = if bps >= 1_000_000_000 {
        (bps as f64 / 1e9, "Gbit/s")
    } else if bps >= 1_000_000 {
        (bps as f64 / 1e6, "Mbit/s")
    } else {
        (bps as f64 / 1e3, "kbit/s")
    };
    format!("{}{unit}", trim_float(v))
}

/// A loss probability as a percentage: `0%`, `0.01%`, `0.1%`.
pub fn format_loss(loss: f64) -> String {
    format!("{}%", trim_float(loss * 100.0))
}

/// Up to four decimals, trailing zeros removed.
pub fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".into()
    } else {
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_rates_durations() {
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("16 MiB"), Some(16 << 20));
        assert_eq!(parse_size("1.5GB"), Some(1_500_000_000));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("1 parsec"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_rate("1G"), Some(1_000_000_000));
        assert_eq!(parse_rate("100Mbit"), Some(100_000_000));
        assert_eq!(parse_rate("2.5Gbit/s"), Some(2_500_000_000));
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_duration("100ms"), Some(Duration::from_millis(100)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(24 << 20), "24MiB");
        assert_eq!(format_size(1500), "1500B");
        assert_eq!(format_rate(1_000_000_000), "1Gbit/s");
        assert_eq!(format_rate(100_000_000), "100Mbit/s");
        assert_eq!(format_loss(0.0001), "0.01%");
        assert_eq!(format_loss(0.0), "0%");
    }
}

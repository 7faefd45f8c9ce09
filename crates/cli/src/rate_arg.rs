//! `--limit-rate`: one definition for `xfer get` and `xfer put`, files and trees alike.

use clap::Args;
use xfer::crates::core::rate::{parse_rate_limit, RateLimit, RateLimiter};

#[derive(Debug, Clone, Args)]
pub struct RateArgs {
    /// Cap the payload rate of the whole command, all lanes and files together. A bare number
    /// is bytes per second (as curl's --limit-rate); units: B, kB, MB, GB (powers of 1000),
    /// KiB, MiB, GiB (powers of 1024), or bits per second with an explicit bit unit: kbit,
    /// Mbit, Gbit (also Mbit/s, Mbps). `200M` is refused as ambiguous: write 200MiB, 200MB
    /// or 200Mbit.
    #[arg(long, value_parser = rate_arg, value_name = "RATE")]
    pub limit_rate: Option<RateLimit>,
}

impl RateArgs {
    /// A limiter to share among everything the command sends or receives.
    pub fn limiter(&self) -> Option<RateLimiter> {
        self.limit_rate.map(RateLimiter::new)
    }

    /// Add the cap to a `--json` report: `limit_rate_bytes_per_second`, `null` without one.
    pub fn report(&self, doc: &mut serde_json::Value) {
        if let Some(map) = doc.as_object_mut() {
            map.insert(
                "limit_rate_bytes_per_second".into(),
                self.limit_rate.map(RateLimit::bytes_per_second).into(),
            );
        }
    }
}

fn rate_arg(s: &str) -> Result<RateLimit, String> {
    parse_rate_limit(s).map_err(|e| e.to_string())
}

//! `--limit-rate`: one definition for `xfer get` and `xfer put`, files and trees alike.

use clap::Args;
use xfer::crates::core::rate::{parse_rate_limit, RateLimit, RateLimiter};

use crate::client_args::ClientArgs;

/// Under a cap, each connection's and stream's receive window holds this long at the capped
/// rate: enough for one lane to carry the whole cap up to a 125 ms round trip (two lanes to
/// 250 ms), small enough that bytes the client has not read yet (the kernel's buffer, HTTP/2
/// and QUIC windows) do not let the link run far above the cap while the lanes wait.
const WINDOW_SECONDS: f64 = 0.125;
/// The smallest window under a cap.
const MIN_WINDOW: u64 = 256 << 10;

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

    /// Size the receive windows the user left to their defaults from the cap (see
    /// [`WINDOW_SECONDS`]): the default 16 MiB TCP start buffer and HTTP/2 and QUIC windows
    /// over eight connections would take in seconds of the capped rate before the client's
    /// pause reached the sender.
    pub fn shape_windows(&self, c: &mut ClientArgs) {
        let Some(limit) = self.limit_rate else {
            return;
        };
        let window = ((limit.bytes_per_second() as f64 * WINDOW_SECONDS) as u64).max(MIN_WINDOW);
        for (field, size) in [
            (&mut c.tcp_initial_recv_buffer, window),
            (&mut c.tcp_window_clamp, window),
            (&mut c.h2_stream_window, window),
            (&mut c.h2_connection_window, 2 * window),
            (&mut c.quic_stream_window, window),
            (&mut c.quic_connection_window, 2 * window),
        ] {
            field.get_or_insert(size);
        }
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

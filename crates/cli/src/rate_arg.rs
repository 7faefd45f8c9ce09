//! `--limit-rate`: one definition for `xfer get` and `xfer put`, files and trees alike.

use clap::Args;
use xfer::crates::core::rate::{parse_rate_limit, RateLimit, RateLimiter};

use crate::client_args::ClientArgs;

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

    /// Size the receive windows the user left to their defaults from the cap
    /// ([`RateLimit::window`]): the default 16 MiB TCP start buffer and HTTP/2 and QUIC windows
    /// over eight connections would take in seconds of the capped rate before the client's
    /// pause reached the sender.
    ///
    /// The TCP receive buffer is fixed where the kernel grants the whole window, not a head
    /// start: a buffer left to autotuning grows as the paced reader falls behind, and the
    /// kernel moves the window clamp with it, so the bytes queued unread (and the link's swings
    /// around the cap when a lane pauses or resumes) would grow with it. Where it grants less
    /// (`net.core.rmem_max` without `CAP_NET_ADMIN`), a fixed buffer would hold the transfer
    /// below the cap, so the window is a head start there, as without a cap.
    pub fn shape_windows(&self, c: &mut ClientArgs) {
        let Some(limit) = self.limit_rate else {
            return;
        };
        let window = limit.window();
        if c.tcp_recv_buffer.is_none() && c.tcp_initial_recv_buffer.is_none() {
            let force = xfer::TcpConfig::default().force_buffers;
            if xfer::crates::http::tcp::fixed_recv_grant(window, force).is_some_and(|g| g >= window)
            {
                c.tcp_recv_buffer = Some(window);
            } else {
                c.tcp_initial_recv_buffer = Some(window);
            }
        }
        for (field, size) in [
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

//! `--limit-rate`: one definition for `xfer get` and `xfer put`, files and trees alike.

use clap::Args;
use xfer::crates::core::rate::{parse_rate_limit, RateLimit, RateLimiter};

use crate::client_args::{ClientArgs, Protocol};

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
    /// `tcp_connections` is how many TCP connections the command will run
    /// ([`tcp_connections`]): each gets its share of the window ([`RateLimit::connection_window`]),
    /// so `--lanes 8` under a cap does not hold eight windows unread.
    ///
    /// The TCP receive buffer is fixed where the kernel grants the whole window, not a head
    /// start: a buffer left to autotuning grows as the paced reader falls behind, and the
    /// kernel moves the window clamp with it, so the bytes queued unread (and the link's swings
    /// around the cap when a lane pauses or resumes) would grow with it. Where it grants less
    /// (`net.core.rmem_max` without `CAP_NET_ADMIN`), a fixed buffer would hold the transfer
    /// below the cap, so the window is a head start there, as without a cap.
    pub fn shape_windows(&self, c: &mut ClientArgs, tcp_connections: usize) {
        let Some(limit) = self.limit_rate else {
            return;
        };
        let window = limit.window();
        let tcp_window = limit.connection_window(tcp_connections);
        if c.tcp_recv_buffer.is_none() && c.tcp_initial_recv_buffer.is_none() {
            let force = xfer::TcpConfig::default().force_buffers;
            if xfer::crates::http::tcp::fixed_recv_grant(tcp_window, force)
                .is_some_and(|g| g >= tcp_window)
            {
                c.tcp_recv_buffer = Some(tcp_window);
            } else {
                c.tcp_initial_recv_buffer = Some(tcp_window);
            }
        }
        for (field, size) in [
            (&mut c.tcp_window_clamp, tcp_window),
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

/// The TCP connections a command runs: its HTTP/1.1 lanes (`http1_lanes`, one connection
/// each) when it speaks HTTP/1.1 (`protocol`, or `default` when the user left it), else
/// `--connections` (HTTP/2's default of one; QUIC opens none).
pub fn tcp_connections(c: &ClientArgs, default: Protocol, http1_lanes: usize) -> usize {
    match c.protocol.unwrap_or(default) {
        Protocol::Http1 => http1_lanes,
        Protocol::Http2 | Protocol::Auto => c.connections.unwrap_or(1),
    }
}

fn rate_arg(s: &str) -> Result<RateLimit, String> {
    parse_rate_limit(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        rate: RateArgs,
        #[command(flatten)]
        client: ClientArgs,
    }

    /// The client's settings after `shape_windows`, for a command line and the HTTP/1.1 lanes
    /// it would run.
    fn shaped(args: &[&str], http1_lanes: usize) -> ClientArgs {
        let mut line = Line::try_parse_from(std::iter::once("xfer").chain(args.iter().copied()))
            .expect("command line");
        let n = tcp_connections(&line.client, Protocol::Http1, http1_lanes);
        line.rate.shape_windows(&mut line.client, n);
        line.client
    }

    #[test]
    fn lanes_share_the_window_of_their_connections() {
        // 200 Mbit/s: a window of 3,125,000 bytes.
        let two = shaped(&["--limit-rate", "200Mbit"], 2);
        assert_eq!(two.tcp_window_clamp, Some(3_125_000));
        let four = shaped(&["--limit-rate", "200Mbit"], 4);
        assert_eq!(four.tcp_window_clamp, Some(1_562_500));
        assert_eq!(
            four.tcp_recv_buffer.or(four.tcp_initial_recv_buffer),
            Some(1_562_500)
        );
        // Streams share their connection's window, which HTTP/2 and QUIC size themselves.
        assert_eq!(four.h2_stream_window, Some(3_125_000));
        // HTTP/2's lanes ride one connection: it keeps the whole window.
        let h2 = shaped(&["--limit-rate", "200Mbit", "--protocol", "http2"], 4);
        assert_eq!(h2.tcp_window_clamp, Some(3_125_000));
        let h2_four = shaped(
            &["--limit-rate", "200Mbit", "--protocol", "http2", "-c", "4"],
            4,
        );
        assert_eq!(h2_four.tcp_window_clamp, Some(1_562_500));
    }

    #[test]
    fn what_the_user_set_stays() {
        let c = shaped(
            &["--limit-rate", "200Mbit", "--tcp-window-clamp", "1MiB"],
            8,
        );
        assert_eq!(c.tcp_window_clamp, Some(1 << 20));
        let none = shaped(&[], 8);
        assert_eq!(none.tcp_window_clamp, None);
    }
}

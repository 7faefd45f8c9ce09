//! The progress display of a tree transfer on stderr: files done of listed (the total grows
//! while the listing streams in, shown by a `+`), bytes, goodput now and on average, ETA.
//! Silent when stderr is not a terminal or with `--quiet`.

use std::time::{Duration, Instant};

use xfer::tree::TreeProgress;
use xfer::{format_bps, HumanBytes, RateMeter};

use crate::progress_bar::Display;

pub fn start(progress: TreeProgress, quiet: bool) -> Display {
    let started = Instant::now();
    let mut now = RateMeter::new(Duration::from_secs(3));
    Display::with_renderer(quiet, "{spinner} [{bar:30}] {msg}", move |bar| {
        let s = progress.snapshot();
        let elapsed = started.elapsed();
        bar.set_length(s.bytes_total.max(1));
        bar.set_position(s.bytes_done);
        let rate_now = now.sample(elapsed, s.received) * 8.0;
        let avg = s.received as f64 * 8.0 / elapsed.as_secs_f64().max(1e-3);
        let left = s.bytes_total.saturating_sub(s.bytes_done);
        // Until the listing ends the total is a lower bound, and so would be an ETA.
        let eta = if rate_now > 0.0 && s.listing_done {
            format!("{:.0}s", left as f64 * 8.0 / rate_now)
        } else {
            "?".into()
        };
        bar.set_message(format!(
            "{}/{}{} files  {}/{}  now {}  avg {}  ETA {eta}{}",
            s.files_done,
            s.files_total,
            if s.listing_done { "" } else { "+" },
            HumanBytes(s.bytes_done),
            HumanBytes(s.bytes_total),
            format_bps(rate_now),
            format_bps(avg),
            if s.files_failed > 0 {
                format!("  {} failed", s.files_failed)
            } else {
                String::new()
            },
        ));
    })
}

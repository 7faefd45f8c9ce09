//! The progress display of a tree transfer on stderr: files done of listed (the total grows
//! while the listing streams in), bytes, goodput now and on average, ETA. Silent when stderr
//! is not a terminal or with `--quiet`.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use xfer::tree::TreeProgress;
use xfer::{format_bps, HumanBytes, RateMeter};

/// Draws `progress` until dropped or [`TreeDisplay::finish`].
pub struct TreeDisplay {
    task: Option<JoinHandle<()>>,
    bar: ProgressBar,
}

impl TreeDisplay {
    pub fn start(progress: TreeProgress, quiet: bool) -> Self {
        let visible = !quiet && std::io::stderr().is_terminal();
        let bar = if visible {
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(4))
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{bar:30}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let task = visible.then(|| {
            let bar = bar.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let mut now = RateMeter::new(Duration::from_secs(3));
                loop {
                    let s = progress.snapshot();
                    let elapsed = started.elapsed();
                    bar.set_length(s.bytes_total.max(1));
                    bar.set_position(s.bytes_done);
                    let rate_now = now.sample(elapsed, s.received) * 8.0;
                    let avg = s.received as f64 * 8.0 / elapsed.as_secs_f64().max(1e-3);
                    let left = s.bytes_total.saturating_sub(s.bytes_done);
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
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        });
        Self { task, bar }
    }

    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}

impl Drop for TreeDisplay {
    fn drop(&mut self) {
        self.stop();
    }
}

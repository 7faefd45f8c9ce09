//! The progress display on stderr: percent, bytes, goodput now and on average, ETA. Silent when
//! stderr is not a terminal or with `--quiet`.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use xfer::{format_bps, HumanBytes, Progress, RateMeter};

/// Draws `progress` until dropped or [`Display::finish`].
pub struct Display {
    task: Option<JoinHandle<()>>,
    bar: ProgressBar,
}

impl Display {
    /// Redraw with `render` four times a second, on a `{template}` with the bar and message.
    pub fn with_renderer(
        quiet: bool,
        template: &str,
        mut render: impl FnMut(&ProgressBar) + Send + 'static,
    ) -> Self {
        let visible = !quiet && std::io::stderr().is_terminal();
        let bar = if visible {
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(4))
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let task = visible.then(|| {
            let bar = bar.clone();
            tokio::spawn(async move {
                loop {
                    render(&bar);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        });
        Self { task, bar }
    }

    pub fn start(progress: Progress, quiet: bool) -> Self {
        let mut now = RateMeter::new(Duration::from_secs(3));
        Self::with_renderer(
            quiet,
            "{spinner} [{bar:30}] {percent:>3}% {msg}",
            move |bar| {
                let s = progress.snapshot();
                if s.total > 0 {
                    bar.set_length(s.total);
                    bar.set_position(s.verified);
                }
                let new = s.received;
                let rate_now = now.sample(s.elapsed, new) * 8.0;
                let avg = if s.elapsed.is_zero() {
                    0.0
                } else {
                    new as f64 * 8.0 / s.elapsed.as_secs_f64()
                };
                let left = s.total.saturating_sub(s.verified);
                let eta = if rate_now > 0.0 {
                    format!("{:.0}s", left as f64 * 8.0 / rate_now)
                } else {
                    "?".into()
                };
                let active = s.lanes.iter().filter(|l| l.bytes > 0).count();
                bar.set_message(format!(
                    "{}/{}  now {}  avg {}  ETA {eta}  {active}/{} lanes{}",
                    HumanBytes(s.verified),
                    HumanBytes(s.total),
                    format_bps(rate_now),
                    format_bps(avg),
                    s.lanes.len(),
                    if s.retries > 0 {
                        format!("  {} retries", s.retries)
                    } else {
                        String::new()
                    },
                ));
            },
        )
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

impl Drop for Display {
    fn drop(&mut self) {
        self.stop();
    }
}

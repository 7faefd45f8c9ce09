//! The status page: `GET /.well-known/xfer/status` (HTML) and `/.well-known/xfer/status.json`,
//! answered by the core so that every codec serves the same page.
//!
//! Only loopback callers get it: the page names paths and client addresses, which the access
//! model (docs/access.md) has no scope for. An operator elsewhere reaches it through an SSH
//! tunnel. The HTML is one self-contained document (inline SVG and script, no external
//! assets) that shows the state when it was served and then polls the JSON every 2 s.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::json;
use xfer_common::metrics;

use crate::access_log::format_rfc3339;
use crate::listing_body::ListingStream;
use crate::plan::{Body, ResponsePlan, CONTENT_TYPE_HTML};
use crate::record::activity;
use crate::request::{Method, Request};
use crate::status;

pub const STATUS_PATH: &str = "/.well-known/xfer/status";
pub const STATUS_JSON_PATH: &str = "/.well-known/xfer/status.json";
/// Throughput is sampled this often...
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// ...and this many samples kept: five minutes.
const SAMPLES: usize = 300;

pub(crate) fn is_request(req: &Request) -> bool {
    req.path == STATUS_PATH || req.path == STATUS_JSON_PATH
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

pub(crate) fn answer(req: &Request) -> ResponsePlan {
    if !is_loopback(req.peer.ip()) {
        return ResponsePlan::refusal(
            status::FORBIDDEN,
            "the status page is served to loopback callers only\n",
            Some(format!("status page asked for from {}", req.peer)),
        );
    }
    if !matches!(req.method, Method::Get | Method::Head) {
        let mut plan = ResponsePlan::refusal(
            status::METHOD_NOT_ALLOWED,
            "the status page is read with GET\n",
            None,
        );
        plan.allow = Some("GET, HEAD");
        return plan;
    }
    let snap = snapshot();
    let (content_type, text) = if req.path == STATUS_JSON_PATH {
        ("application/json", snap.to_string())
    } else {
        (CONTENT_TYPE_HTML, render_html(&snap))
    };
    let mut plan = ResponsePlan::empty(status::OK);
    plan.content_type = content_type;
    plan.content_length = Some(text.len() as u64);
    plan.headers.push(("cache-control", "no-store".to_string()));
    plan.body = Body::Listing(ListingStream::ready(Bytes::from(text)));
    plan
}

/// Bytes per second received and sent, oldest first.
#[derive(Default)]
struct History {
    last: Option<(u64, u64)>,
    rates: VecDeque<(u64, u64)>,
}

fn history() -> &'static Mutex<History> {
    static HISTORY: OnceLock<Mutex<History>> = OnceLock::new();
    HISTORY.get_or_init(Mutex::default)
}

/// Sample the process's throughput every second for the page's chart; once per process.
pub fn spawn_sampler() {
    static STARTED: OnceLock<()> = OnceLock::new();
    if STARTED.set(()).is_err() {
        return;
    }
    tokio::spawn(async {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tick.tick().await;
            let now = metrics::global().bytes_totals();
            let mut h = history().lock().unwrap_or_else(|p| p.into_inner());
            if let Some(last) = h.last {
                let rate = (now.0.saturating_sub(last.0), now.1.saturating_sub(last.1));
                if h.rates.len() == SAMPLES {
                    h.rates.pop_front();
                }
                h.rates.push_back(rate);
            }
            h.last = Some(now);
        }
    });
}

/// What the page shows, as JSON.
fn snapshot() -> serde_json::Value {
    let a = activity();
    let mut transfers: Vec<serde_json::Value> = a
        .live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|l| !l.path.starts_with("/.well-known/xfer/"))
        .map(|l| {
            let secs = l.started.elapsed().as_secs_f64();
            let bytes_in = l.bytes_in.load(Ordering::Relaxed);
            let bytes_out = l.bytes_out.load(Ordering::Relaxed);
            let rate = if secs > 0.0 {
                ((bytes_in + bytes_out) as f64 / secs) as u64
            } else {
                0
            };
            json!({
                "method": l.method,
                "path": l.path,
                "protocol": l.protocol,
                "client": l.peer.to_string(),
                "seconds": (secs * 10.0).round() / 10.0,
                "bytes_in": bytes_in,
                "bytes_out": bytes_out,
                "size": l.size.load(Ordering::Relaxed),
                "bytes_per_second": rate,
            })
        })
        .collect();
    transfers.sort_by(|x, y| {
        y["seconds"]
            .as_f64()
            .partial_cmp(&x["seconds"].as_f64())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let errors: Vec<serde_json::Value> = a
        .errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .rev()
        .map(|e| {
            json!({
                "time": format_rfc3339(e.time),
                "method": e.method,
                "path": e.path,
                "status": e.status,
                "detail": e.detail,
            })
        })
        .collect();
    let h = history().lock().unwrap_or_else(|p| p.into_inner());
    let (totals_in, totals_out) = metrics::global().bytes_totals();
    json!({
        "time": format_rfc3339(SystemTime::now()),
        "transfers": transfers,
        "errors": errors,
        "throughput": {
            "interval_seconds": SAMPLE_EVERY.as_secs(),
            "in": h.rates.iter().map(|r| r.0).collect::<Vec<_>>(),
            "out": h.rates.iter().map(|r| r.1).collect::<Vec<_>>(),
        },
        "totals": { "bytes_in": totals_in, "bytes_out": totals_out },
    })
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The page, with the state of `snap` already in it (so it reads right without script, and
/// a headless browser's first paint is the truth), and the script that keeps it current.
fn render_html(snap: &serde_json::Value) -> String {
    let mut rows = String::new();
    for t in snap["transfers"].as_array().into_iter().flatten() {
        let moved = t["bytes_in"].as_u64().unwrap_or(0) + t["bytes_out"].as_u64().unwrap_or(0);
        let size = t["size"].as_u64().unwrap_or(0);
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/s</td><td>{} s</td></tr>",
            esc(t["method"].as_str().unwrap_or("")),
            esc(t["path"].as_str().unwrap_or("")),
            esc(t["protocol"].as_str().unwrap_or("")),
            esc(t["client"].as_str().unwrap_or("")),
            human_bytes(moved),
            if size > 0 { human_bytes(size) } else { "?".into() },
            human_bytes(t["bytes_per_second"].as_u64().unwrap_or(0)),
            t["seconds"],
        );
    }
    let mut errors = String::new();
    for e in snap["errors"].as_array().into_iter().flatten() {
        let _ = write!(
            errors,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(e["time"].as_str().unwrap_or("")),
            esc(e["method"].as_str().unwrap_or("")),
            esc(e["path"].as_str().unwrap_or("")),
            e["status"],
            esc(e["detail"].as_str().unwrap_or("")),
        );
    }
    // No `<` inside the script, so a path cannot end it or open another: `\u003c` is the
    // same character to JSON.
    let initial = snap.to_string().replace('<', "\\u003c");
    PAGE.replace("{{TRANSFERS}}", &rows)
        .replace(
            "{{TRANSFER_COUNT}}",
            &snap["transfers"].as_array().map_or(0, Vec::len).to_string(),
        )
        .replace("{{ERRORS}}", &errors)
        .replace("{{TIME}}", &esc(snap["time"].as_str().unwrap_or("")))
        .replace("{{INITIAL}}", &initial)
}

const PAGE: &str = include_str!("status_page.html");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_paths_are_escaped() {
        let snap = json!({
            "time": "t",
            "transfers": [{"method": "GET", "path": "/<script>x</script>", "protocol": "h2",
                           "client": "127.0.0.1:1", "seconds": 1.0, "bytes_in": 0,
                           "bytes_out": 2048, "size": 4096, "bytes_per_second": 2048}],
            "errors": [],
            "throughput": {"interval_seconds": 1, "in": [], "out": []},
            "totals": {"bytes_in": 0, "bytes_out": 0},
        });
        let html = render_html(&snap);
        assert!(!html.contains("<script>x"), "unescaped path in the page");
        assert!(html.contains("/&lt;script&gt;x&lt;/script&gt;"));
        assert!(html.contains("2.0 KiB"));
    }

    #[test]
    fn loopback_only() {
        assert!(is_loopback("127.0.0.1".parse().expect("ip")));
        assert!(is_loopback("::1".parse().expect("ip")));
        assert!(is_loopback("::ffff:127.0.0.1".parse().expect("ip")));
        assert!(!is_loopback("10.0.0.1".parse().expect("ip")));
    }
}

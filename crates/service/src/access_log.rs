//! The access log: one JSON line per finished request or third-party copy
//! (`xfer serve --access-log FILE|-`, docs/monitoring.md).
//!
//! A request never waits for the log: lines go through a bounded channel to a writer thread,
//! and a line that finds the channel full is dropped and counted
//! (`xfer_access_log_dropped_total`). The file is opened for appending, so logrotate's
//! `copytruncate` works without telling the server.

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use xfer_common::metrics;

use crate::access::Identity;

/// Lines queued for the writer before new ones are dropped.
const QUEUED_LINES: usize = 8192;

/// Where the lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    Stdout,
    File(PathBuf),
}

impl std::str::FromStr for AccessLogTarget {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s == "-" {
            Self::Stdout
        } else {
            Self::File(PathBuf::from(s))
        })
    }
}

static SINK: OnceLock<SyncSender<String>> = OnceLock::new();

/// Start writing the access log to `target`, for the rest of the process. A second call
/// keeps the first target.
pub fn start(target: &AccessLogTarget) -> io::Result<()> {
    let mut out: Box<dyn Write + Send> = match target {
        AccessLogTarget::Stdout => Box::new(io::stdout()),
        AccessLogTarget::File(path) => Box::new(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot open the access log {}: {e}", path.display()),
                    )
                })?,
        ),
    };
    let (tx, rx) = sync_channel::<String>(QUEUED_LINES);
    if SINK.set(tx).is_err() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("access-log".into())
        .spawn(move || {
            let mut w = BufWriter::new(&mut out);
            while let Ok(line) = rx.recv() {
                let mut result = w.write_all(line.as_bytes());
                // Flush when nothing else waits, so a line is on disk soon after its
                // request ends without a write per line under load.
                for more in rx.try_iter() {
                    if result.is_ok() {
                        result = w.write_all(more.as_bytes());
                    }
                }
                if let Err(e) = result.and_then(|()| w.flush()) {
                    tracing::warn!(error = %e, "access log write failed");
                }
            }
        })?;
    Ok(())
}

pub(crate) fn is_on() -> bool {
    SINK.get().is_some()
}

/// One finished request, as logged.
#[derive(Debug, Serialize)]
pub(crate) struct Line<'a> {
    #[serde(serialize_with = "rfc3339")]
    pub time: SystemTime,
    #[serde(serialize_with = "identity")]
    pub identity: &'a Identity,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub seconds: f64,
    pub protocol: &'a str,
    pub client: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<&'a str>,
    /// A copy's verdict: `true` once the copy was stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_result: Option<bool>,
    /// The body went out to its end (false: the client left, or the stream stalled).
    pub complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<&'a Checksum>,
}

/// A checksum sent with the answer or computed over what was sent.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Checksum {
    /// `adler32`, `md5` or `sha-256`.
    pub algorithm: String,
    /// Lower-case hex.
    pub value: String,
    /// `resource`: the whole file's; `body`: the bytes of this answer (a range's).
    pub of: &'static str,
}

pub(crate) fn write(line: &Line<'_>) {
    let Some(tx) = SINK.get() else { return };
    let Ok(mut text) = serde_json::to_string(line) else {
        return;
    };
    text.push('\n');
    if let Err(TrySendError::Full(_)) = tx.try_send(text) {
        metrics::global().count_access_log_drop();
    }
}

/// Who: the JWT's issuer and subject, the static token's or certificate's name; never a secret.
fn identity<S: serde::Serializer>(who: &&Identity, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Who<'a> {
        kind: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        issuer: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        subject: Option<&'a str>,
    }
    let who = match who {
        Identity::Anonymous => Who {
            kind: "anonymous",
            name: None,
            issuer: None,
            subject: None,
        },
        Identity::Token { name } => Who {
            kind: "token",
            name: Some(name),
            issuer: None,
            subject: None,
        },
        Identity::Certificate { name } => Who {
            kind: "certificate",
            name: Some(name),
            issuer: None,
            subject: None,
        },
        Identity::Jwt {
            issuer, subject, ..
        } => Who {
            kind: "jwt",
            name: None,
            issuer: Some(issuer),
            subject: Some(subject),
        },
    };
    who.serialize(s)
}

fn rfc3339<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*t))
}

/// `2026-11-28T16:21:56.123Z`.
pub(crate) fn format_rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_882_916_123);
        assert_eq!(format_rfc3339(t), "2026-11-28T16:21:56.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(format_rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_line_names_the_caller_not_the_secret() {
        let who = Identity::Jwt {
            issuer: "https://iss".into(),
            subject: "alice".into(),
            jti: Some("j1".into()),
        };
        let sum = Checksum {
            algorithm: "adler32".into(),
            value: "0a0b0c0d".into(),
            of: "resource",
        };
        let line = Line {
            time: UNIX_EPOCH,
            identity: &who,
            method: "GET",
            path: "/a",
            status: 200,
            bytes_in: 0,
            bytes_out: 5,
            seconds: 0.5,
            protocol: "h2",
            client: "127.0.0.1:9".parse().expect("address"),
            remote: None,
            copy_result: None,
            complete: true,
            checksum: Some(&sum),
        };
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&line).expect("json")).expect("parse");
        assert_eq!(v["identity"]["kind"], "jwt");
        assert_eq!(v["identity"]["subject"], "alice");
        assert_eq!(v["checksum"]["algorithm"], "adler32");
        assert_eq!(v["client"], "127.0.0.1:9");
        assert!(v.get("remote").is_none());
    }
}

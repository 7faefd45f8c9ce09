//! What the client remembers of a path between transfers: whether the last transfer to a
//! peer lost packets.
//!
//! HTTP/2 spreads its lanes over more connections once loss is seen (`loss_spread.rs`), but
//! seeing it takes the first seconds, on one connection, where every loss stops every stream.
//! At 1 Gbit/s, 100 ms, 0.01 % loss, HTTP/2 that spread when it saw loss trailed HTTP/2 over
//! eight connections from the start by 25 MB at 1 s and 40 MB at 2 s, and finished 1.5-4.5 %
//! behind it, while the eight connections came level with HTTP/1.1 × 8 (`docs/results.md`).
//! Random loss belongs to the path (a dirty link, a shallow buffer), as the kernel keeps a
//! destination's RTT and slow-start threshold between connections (`tcp_metrics`), so the next
//! transfer to the same peer starts spread, and its own readings decide what the one after it
//! does.
//!
//! The file is one line per peer, `host:port unix-seconds lossy|clean`, newest last, at most
//! [`MAX_PEERS`] of them. It is read as untrusted: a line that does not parse is skipped,
//! and a file larger than [`MAX_FILE`] is ignored. It is replaced whole (a temporary file
//! renamed over it), so a reader sees the old or the new one; two clients finishing at once
//! may lose one verdict, which the next transfer gives again.

use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A verdict older than this is forgotten: the path may have been repaired, or rerouted.
pub(crate) const MEMORY_TTL: Duration = Duration::from_secs(24 * 3600);
/// Peers kept; the oldest verdicts go first.
pub(crate) const MAX_PEERS: usize = 1024;
/// A larger file is not read.
const MAX_FILE: u64 = 256 << 10;
/// A peer name longer than this is not stored (a host name is at most 253 bytes).
const MAX_PEER: usize = 300;
/// A transfer found its path lossy when it saw a loss episode at least this often after its
/// start-up: at 1 Gbit/s, 100 ms, 0.01 % loss, transfers saw one every 0.5 s; without loss,
/// none or one in 16 s (a queue overflow).
pub(crate) const LOSSY_EVERY: Duration = Duration::from_secs(5);
/// A transfer that found no such loss, over at least [`LOSSY_EVERY`] after its start-up and
/// this many bytes from its first, found the path clean (at 0.01 % loss, 256 MiB is about
/// 185,000 packets and 18 losses); a shorter one says nothing.
pub(crate) const CLEAN_AFTER: u64 = 256 << 20;

/// What a transfer found on its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Lossy,
    Clean,
}

impl Verdict {
    /// The verdict of a transfer that saw `episodes` loss episodes and received `bytes` over
    /// `counted`, the time after its start-up, if it can give one. `lossy_after`, the count
    /// that makes HTTP/2 spread within a transfer, is also the least that makes it lossy.
    pub fn of(episodes: u32, lossy_after: u32, counted: Duration, bytes: u64) -> Option<Self> {
        let often = f64::from(episodes) * LOSSY_EVERY.as_secs_f64() >= counted.as_secs_f64();
        if episodes >= lossy_after && often {
            Some(Self::Lossy)
        } else if bytes >= CLEAN_AFTER && counted >= LOSSY_EVERY {
            Some(Self::Clean)
        } else {
            None
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::Lossy => "lossy",
            Self::Clean => "clean",
        }
    }
}

/// One remembered verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    peer: String,
    at: u64,
    verdict: Verdict,
}

/// The file where verdicts are kept.
#[derive(Debug, Clone)]
pub(crate) struct PathMemory {
    file: PathBuf,
}

impl PathMemory {
    pub fn new(file: PathBuf) -> Self {
        Self { file }
    }

    /// What the last transfer to `peer` found, and how long ago, unless that is older than
    /// [`MEMORY_TTL`] (or the clock went back).
    pub fn recall(&self, peer: &str, now: SystemTime) -> Option<(Verdict, Duration)> {
        let now = unix_secs(now);
        let e = read_entries(&self.file)
            .into_iter()
            .rev()
            .find(|e| e.peer == peer)?;
        let age = Duration::from_secs(now.checked_sub(e.at)?);
        (age <= MEMORY_TTL).then_some((e.verdict, age))
    }

    /// Keep `verdict` as the latest for `peer`.
    pub fn remember(&self, peer: &str, verdict: Verdict, now: SystemTime) -> io::Result<()> {
        if !valid_peer(peer) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{peer:?} is not a peer name the path memory keeps"),
            ));
        }
        let mut entries = read_entries(&self.file);
        entries.retain(|e| e.peer != peer);
        entries.push(Entry {
            peer: peer.to_string(),
            at: unix_secs(now),
            verdict,
        });
        // Newest last; the oldest go when there are too many.
        entries.sort_by_key(|e| e.at);
        let excess = entries.len().saturating_sub(MAX_PEERS);
        entries.drain(..excess);
        let text: String = entries
            .iter()
            .map(|e| format!("{} {} {}\n", e.peer, e.at, e.verdict.word()))
            .collect();
        write_whole(&self.file, text.as_bytes())
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn valid_peer(peer: &str) -> bool {
    !peer.is_empty() && peer.len() <= MAX_PEER && peer.chars().all(|c| c.is_ascii_graphic())
}

/// The entries of `file`; nothing when it is missing, too large or unreadable.
fn read_entries(file: &Path) -> Vec<Entry> {
    let Ok(f) = std::fs::File::open(file) else {
        return Vec::new();
    };
    let mut text = String::new();
    // One byte more than allowed tells a file that is too large.
    if f.take(MAX_FILE + 1).read_to_string(&mut text).is_err() || text.len() as u64 > MAX_FILE {
        tracing::debug!(file = %file.display(), "path memory unreadable or too large; ignored");
        return Vec::new();
    }
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Entry> {
    let mut words = line.split(' ');
    let peer = words.next().filter(|p| valid_peer(p))?;
    let at = words.next()?.parse().ok()?;
    let verdict = match words.next()? {
        "lossy" => Verdict::Lossy,
        "clean" => Verdict::Clean,
        _ => return None,
    };
    words.next().is_none().then(|| Entry {
        peer: peer.to_string(),
        at,
        verdict,
    })
}

/// Replace `file` with `bytes`: written beside it, then renamed over it.
fn write_whole(file: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let name = file
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = file.with_file_name(tmp_name);
    let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(bytes));
    match written.and_then(|()| std::fs::rename(&tmp, file)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn remembers_the_latest_verdict_per_peer_for_a_day() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let m = PathMemory::new(dir.path().join("sub/paths"));
        assert_eq!(m.recall("a:443", at(1_000)), None, "nothing yet");
        m.remember("a:443", Verdict::Lossy, at(1_000))?;
        m.remember("b:443", Verdict::Clean, at(1_010))?;
        assert_eq!(
            m.recall("a:443", at(1_060)),
            Some((Verdict::Lossy, Duration::from_secs(60)))
        );
        m.remember("a:443", Verdict::Clean, at(2_000))?;
        assert_eq!(
            m.recall("a:443", at(2_000)).map(|r| r.0),
            Some(Verdict::Clean)
        );
        assert_eq!(
            m.recall("b:443", at(1_010)).map(|r| r.0),
            Some(Verdict::Clean)
        );
        let ttl = MEMORY_TTL.as_secs();
        assert!(m.recall("a:443", at(2_000 + ttl)).is_some());
        assert_eq!(m.recall("a:443", at(2_001 + ttl)), None, "too old");
        assert_eq!(m.recall("a:443", at(1_999)), None, "the clock went back");
        Ok(())
    }

    #[test]
    fn a_hostile_file_is_read_line_by_line_or_not_at_all() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("paths");
        std::fs::write(
            &file,
            "garbage\n\
             a:443 12 lossy extra\n\
             a:443 -5 lossy\n\
             a:443 12 maybe\n\
             b:443 100 lossy\n\
             \u{e9}:1 100 lossy\n",
        )?;
        let m = PathMemory::new(file.clone());
        assert_eq!(m.recall("a:443", at(100)), None);
        assert_eq!(
            m.recall("b:443", at(100)).map(|r| r.0),
            Some(Verdict::Lossy)
        );
        // Too large: ignored, and replaced by the next verdict.
        std::fs::write(&file, "b:443 100 lossy\n".repeat(20_000))?;
        assert_eq!(m.recall("b:443", at(100)), None);
        m.remember("c:1", Verdict::Clean, at(100))?;
        assert_eq!(std::fs::read_to_string(&file)?, "c:1 100 clean\n");
        assert!(m.remember("bad peer", Verdict::Clean, at(100)).is_err());
        Ok(())
    }

    #[test]
    fn keeps_the_newest_peers() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let m = PathMemory::new(dir.path().join("paths"));
        let text: String = (0..MAX_PEERS)
            .map(|i| format!("p{i}:1 {} clean\n", 1_000 + i))
            .collect();
        std::fs::write(dir.path().join("paths"), text)?;
        m.remember("new:1", Verdict::Lossy, at(5_000))?;
        assert_eq!(m.recall("p0:1", at(5_000)), None, "the oldest went");
        assert!(m.recall("p1:1", at(5_000)).is_some());
        assert!(m.recall("new:1", at(5_000)).is_some());
        Ok(())
    }

    #[test]
    fn a_verdict_needs_enough_evidence() {
        let secs = Duration::from_secs;
        assert_eq!(Verdict::of(32, 2, secs(16), 2 << 30), Some(Verdict::Lossy));
        assert_eq!(Verdict::of(2, 2, secs(10), 1 << 20), Some(Verdict::Lossy));
        assert_eq!(
            Verdict::of(1, 2, secs(16), 2 << 30),
            Some(Verdict::Clean),
            "one episode is not a lossy path"
        );
        assert_eq!(
            Verdict::of(3, 2, secs(800), 100 << 30),
            Some(Verdict::Clean),
            "a rare overflow on a long transfer is not a lossy path"
        );
        assert_eq!(
            Verdict::of(0, 2, secs(5), CLEAN_AFTER),
            Some(Verdict::Clean)
        );
        assert_eq!(
            Verdict::of(0, 2, secs(5), CLEAN_AFTER - 1),
            None,
            "too few bytes to tell"
        );
        assert_eq!(
            Verdict::of(0, 2, secs(4), 4 << 30),
            None,
            "too short after the start-up to tell"
        );
    }
}

//! Third-party copy against hostile remotes: `RequireChecksumVerification: true` with a source
//! that lies about its checksum or gives none, the remote policy (loopback by address, by a
//! name that resolves to it, and through a redirect; pull and push), and failure lines that
//! carry no remote body, no server path and no class of network error.

use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use xfer::crates::core::checksum::{ChecksumAlgorithm, Checksummer};
use xfer::crates::core::digest::Sha256Digest;
use xfer::crates::service::{RemotePolicy, TpcConfig};

use crate::support::{write_random_file, BoxError, TestResult, MIB};
use crate::tiny_server::{Misbehaviour, TinyServer};
use crate::tpc::{check_markers, copy, fields, pair, quick, staging_names, Pair};

const MISMATCH: &str =
    "failure: checksum verification failed: the data does not match the remote's checksum";
const NO_CHECKSUM: &str =
    "failure: checksum verification failed: the remote offers no checksum to compare with";
const NOT_ALLOWED: &str = "the remote is not allowed by the server's copy policy";
const CANNOT_CONNECT: &str = "failure: could not connect to the remote";

/// A plain-HTTP server on `ip` that answers every request with `answer(head)`, whole.
struct Scripted {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Scripted {
    async fn start(
        ip: &str,
        answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<Self, BoxError> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let answer = std::sync::Arc::new(answer);
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(head) = read_head(&mut sock, &mut buf).await {
                        if sock.write_all(&answer(&head)).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(Self { addr, task })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// The next request head on `sock` (bytes after it stay in `buf`); `None` once the peer
/// closes.
pub(crate) async fn read_head(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            buf.drain(..end + 4);
            return Some(head);
        }
        let mut more = [0u8; 4096];
        match sock.read(&mut more).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&more[..n]),
        }
    }
}

/// `data` for GET (ranges honoured) and HEAD, with `claimed` as its `Repr-Digest`.
fn repr_digest_answer(head: &str, data: &[u8], claimed: &Sha256Digest) -> Vec<u8> {
    let size = data.len();
    let common = format!(
        "Accept-Ranges: bytes\r\nETag: \"v1\"\r\nRepr-Digest: {}\r\n",
        claimed.to_header_value()
    );
    let range = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        let spec = k
            .eq_ignore_ascii_case("range")
            .then(|| v.trim().strip_prefix("bytes="))??;
        let (a, b) = spec.split_once('-')?;
        let start: usize = a.parse().ok()?;
        let end = b.parse::<usize>().map_or(size, |e| (e + 1).min(size));
        (start < end).then_some((start, end))
    });
    if head.starts_with("HEAD ") {
        return format!("HTTP/1.1 200 OK\r\n{common}Content-Length: {size}\r\n\r\n").into_bytes();
    }
    let (start, end) = range.unwrap_or((0, size));
    let mut out = format!(
        "HTTP/1.1 206 Partial Content\r\n{common}Content-Range: bytes {start}-{}/{size}\r\nContent-Length: {}\r\n\r\n",
        end - 1,
        end - start
    )
    .into_bytes();
    out.extend_from_slice(&data[start..end]);
    out
}

/// Pull `remote` into `b` at `path` with `extra` fields; the last line.
async fn pull(
    p: &Pair,
    path: &str,
    remote: &str,
    extra: &[(&str, &str)],
) -> Result<String, BoxError> {
    let c = copy(
        &p.b,
        &p.cert,
        path,
        &fields("source", remote, false, extra),
        false,
    )
    .await?;
    assert_eq!(c.status, 202, "{remote}");
    let text = c.text().await?;
    Ok(check_markers(&text))
}

/// Nothing under `name` in `b`'s `/in`, and nothing staged there.
fn nothing_left(p: &Pair, name: &str) -> TestResult {
    let dir = p.b.root().join("in");
    assert!(!dir.join(name).exists(), "{name} exists");
    assert_eq!(staging_names(&dir)?, Vec::<String>::new());
    Ok(())
}

/// The path of a server's tree must never reach a caller.
fn no_server_path(line: &str, root: &Path) {
    assert!(!line.contains(&*root.to_string_lossy()), "{line}");
    assert!(!line.contains("/tmp"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn require_checksum_verification_refuses_a_lying_source() -> TestResult {
    let p = pair(quick()).await?;
    std::fs::create_dir_all(p.b.root().join("in"))?;
    let data: Vec<u8> = (0..3 * MIB as usize + 17)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let adler = Checksummer::of(ChecksumAlgorithm::Adler32, &data);
    let wrong = if adler.to_hex() == "00000001" {
        "00000002"
    } else {
        "00000001"
    };
    let require = [("RequireChecksumVerification", "true")];

    // The adler32 gfal2 asks for, wrong: the bytes arrive, do not match, and are removed.
    let liar = TinyServer::start(
        data.clone(),
        Misbehaviour {
            digest: Some(format!("adler32={wrong}")),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let last = pull(&p, "/in/adler.bin", &liar.url("/f.bin"), &require).await?;
    assert_eq!(last, MISMATCH);
    no_server_path(&last, &p.b.root());
    nothing_left(&p, "adler.bin")?;
    // Without the field the engine has nothing to compare and stores what came.
    let last = pull(&p, "/in/adler.bin", &liar.url("/f.bin"), &[]).await?;
    assert_eq!(last, "success: Created");
    std::fs::remove_file(p.b.root().join("in/adler.bin"))?;

    // RFC 9530's Repr-Digest, wrong.
    let claimed = Sha256Digest::from_hex(&"5a".repeat(32))?;
    let served = data.clone();
    let repr = Scripted::start("127.0.0.1", move |head| {
        repr_digest_answer(head, &served, &claimed)
    })
    .await?;
    let last = pull(&p, "/in/repr.bin", &repr.url("/f.bin"), &require).await?;
    assert_eq!(last, MISMATCH);
    nothing_left(&p, "repr.bin")?;

    // No checksum at all: refused before anything is stored.
    let silent = TinyServer::start(data.clone(), Misbehaviour::default()).await?;
    let last = pull(&p, "/in/silent.bin", &silent.url("/f.bin"), &require).await?;
    assert_eq!(last, NO_CHECKSUM);
    nothing_left(&p, "silent.bin")?;

    // An honest source: its adler32 matches, the file lands.
    let honest = TinyServer::start(
        data.clone(),
        Misbehaviour {
            digest: Some(adler.to_rfc3230_member()),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let last = pull(&p, "/in/honest.bin", &honest.url("/f.bin"), &require).await?;
    assert_eq!(last, "success: Created");
    assert_eq!(std::fs::read(p.b.root().join("in/honest.bin"))?, data);
    // And an xfer server, which answers both.
    let src = p.a.root().join("src.bin");
    write_random_file(&src, 5 * MIB + 1, 9)?;
    let c = copy(
        &p.b,
        &p.cert,
        "/in/from-xfer.bin",
        &fields("source", &p.a.url("/src.bin"), true, &require),
        false,
    )
    .await?;
    assert_eq!(check_markers(&c.text().await?), "success: Created");
    assert_eq!(
        std::fs::read(p.b.root().join("in/from-xfer.bin"))?,
        std::fs::read(&src)?
    );
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loopback_remotes_are_refused_unless_allowed() -> TestResult {
    // 127.0.0.2 only: the redirector below is allowed, the servers on 127.0.0.1 are not.
    let p = pair(TpcConfig {
        remote_policy: RemotePolicy::allowing(["127.0.0.2/32".parse()?]),
        ..quick()
    })
    .await?;
    std::fs::create_dir_all(p.b.root().join("in"))?;
    std::fs::create_dir_all(p.b.root().join("data"))?;
    std::fs::write(p.b.root().join("data/f.bin"), b"served by b")?;
    std::fs::write(p.a.root().join("f.bin"), b"served by a")?;
    let b_port = p.b.servers.http_addr.port();

    // An address: refused before anything starts, both ways.
    for (which, path, remote) in [
        ("source", "/in/x.bin", p.a.url("/f.bin")),
        ("destination", "/data/f.bin", p.a.url("/in/pushed.bin")),
        (
            "source",
            "/in/x.bin",
            format!("https://[::1]:{b_port}/data/f.bin"),
        ),
    ] {
        let c = copy(
            &p.b,
            &p.cert,
            path,
            &fields(which, &remote, true, &[]),
            false,
        )
        .await?;
        let status = c.status;
        let text = c.text().await?;
        assert_eq!(
            (status, text.trim()),
            (403, NOT_ALLOWED),
            "{which} {remote}"
        );
    }

    // A name that resolves to loopback: refused on the address it resolves to (the file is
    // one anybody may read, so only the policy stands in the way).
    let by_name = format!("https://localhost:{b_port}/data/f.bin");
    let last = pull(&p, "/in/x.bin", &by_name, &[]).await?;
    assert_eq!(last, format!("failure: {NOT_ALLOWED}"));
    let c = copy(
        &p.b,
        &p.cert,
        "/data/f.bin",
        &fields(
            "destination",
            &format!(
                "https://localhost:{}/in/p.bin",
                p.a.servers.http_addr.port()
            ),
            true,
            &[],
        ),
        false,
    )
    .await?;
    assert_eq!(
        check_markers(&c.text().await?),
        format!("failure: {NOT_ALLOWED}")
    );
    assert!(!p.a.root().join("in/p.bin").exists());

    // An allowed remote that redirects to loopback: refused at the redirect.
    let target = format!("https://127.0.0.1:{b_port}/data/f.bin");
    let hop = Scripted::start("127.0.0.2", move |_| {
        format!("HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n")
            .into_bytes()
    })
    .await?;
    let last = pull(&p, "/in/hop.bin", &hop.url("/f.bin"), &[]).await?;
    assert_eq!(last, format!("failure: {NOT_ALLOWED}"));
    nothing_left(&p, "hop.bin")?;
    nothing_left(&p, "x.bin")?;
    p.a.shutdown().await;
    p.b.shutdown().await;

    // Allowed by network, the same redirect is followed, and the name too.
    let p = pair(quick()).await?;
    std::fs::create_dir_all(p.b.root().join("data"))?;
    std::fs::write(p.b.root().join("data/f.bin"), b"served by b")?;
    let target = format!(
        "https://127.0.0.1:{}/data/f.bin",
        p.b.servers.http_addr.port()
    );
    let hop = Scripted::start("127.0.0.2", move |_| {
        format!("HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n")
            .into_bytes()
    })
    .await?;
    let last = pull(&p, "/in/hop.bin", &hop.url("/f.bin"), &[]).await?;
    assert_eq!(last, "success: Created");
    assert_eq!(
        std::fs::read(p.b.root().join("in/hop.bin"))?,
        b"served by b"
    );
    let by_name = format!(
        "https://localhost:{}/data/f.bin",
        p.b.servers.http_addr.port()
    );
    let last = pull(&p, "/in/name.bin", &by_name, &[]).await?;
    assert_eq!(last, "success: Created");
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failure_lines_hold_no_body_no_path_and_no_network_detail() -> TestResult {
    let p = pair(quick()).await?;
    std::fs::create_dir_all(p.b.root().join("in"))?;
    let secret = Scripted::start("127.0.0.1", |_| {
        let body = "SECRET-BODY internal.example:8080 /etc/shadow";
        format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
    .await?;
    let last = pull(&p, "/in/secret.bin", &secret.url("/f.bin"), &[]).await?;
    assert_eq!(last, "failure: the remote answered 403");
    nothing_left(&p, "secret.bin")?;

    // Refused, reset and no such name read the same.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
    let closed_port = closed.local_addr()?.port();
    drop(closed);
    let reset = TcpListener::bind("127.0.0.1:0").await?;
    let reset_addr = reset.local_addr()?;
    let resetter = tokio::spawn(async move {
        while let Ok((sock, _)) = reset.accept().await {
            let _ = sock.set_zero_linger();
            drop(sock);
        }
    });
    for remote in [
        format!("http://127.0.0.1:{closed_port}/f.bin"),
        format!("http://{reset_addr}/f.bin"),
        "http://no-such-host.invalid/f.bin".to_string(),
    ] {
        let last = pull(&p, "/in/gone.bin", &remote, &[]).await?;
        assert_eq!(last, CANNOT_CONNECT, "{remote}");
        no_server_path(&last, &p.b.root());
    }
    resetter.abort();
    nothing_left(&p, "gone.bin")?;

    // A push of a file the remote refuses: no local path either.
    std::fs::write(p.b.root().join("in/local.bin"), b"local")?;
    let c = copy(
        &p.b,
        &p.cert,
        "/in/local.bin",
        &fields("destination", &secret.url("/f.bin"), false, &[]),
        false,
    )
    .await?;
    let last = check_markers(&c.text().await?);
    assert!(last.starts_with("failure: the remote answered"), "{last}");
    assert!(
        !last.contains("SECRET") && !last.contains("local.bin"),
        "{last}"
    );
    no_server_path(&last, &p.b.root());
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

//! Third-party copy in the token world, against loopback remotes that record what they were
//! sent: `TransferHeader` fields reach only the origin they were given for, never the origin
//! a redirect names; a token that stops working part-way through a pull ends with its own
//! failure line, distinct from a token refused at the start; the markers name the copy's
//! open connections (`RemoteConnections`) as XRootD's do.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::support::{BoxError, TestResult, MIB};
use crate::tiny_server::{Misbehaviour, TinyServer};
use crate::tpc::{check_markers, copy, fields, pair, quick, staging_names, Pair};

const REMOTE_TOKEN: &str = "Bearer remote-only-token";

/// Pull `remote` into `b`'s `path` with the remote's token and `extra` fields; the last
/// line.
async fn pull(
    p: &Pair,
    path: &str,
    remote: &str,
    extra: &[(&str, &str)],
) -> Result<String, BoxError> {
    let mut headers = fields("source", remote, false, extra);
    headers.push(("TransferHeaderAuthorization", REMOTE_TOKEN));
    let c = copy(&p.b, &p.cert, path, &headers, false).await?;
    assert_eq!(c.status, 202, "{remote}");
    Ok(check_markers(&c.text().await?))
}

fn data(n: u64) -> Vec<u8> {
    xfer_test_support::random_bytes(usize::try_from(n).expect("a test size fits memory"), 31)
}

/// The value of `name` in a request head, if present.
fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfer_headers_stay_with_their_origin() -> TestResult {
    let p = pair(quick()).await?;
    let body = data(3 * MIB + 17);
    let target = TinyServer::start(body.clone(), Misbehaviour::default()).await?;
    let base = target.url("");
    let redirector = TinyServer::start(
        Vec::new(),
        Misbehaviour {
            redirect_to: Some(base),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let last = pull(
        &p,
        "/in/redirected.bin",
        &redirector.url("/f.bin"),
        &[("TransferHeaderX-Remote-Note", "for-the-redirector")],
    )
    .await?;
    assert_eq!(last, "success: Created");
    assert_eq!(std::fs::read(p.b.root().join("in/redirected.bin"))?, body);

    let asked = redirector.heads();
    assert!(!asked.is_empty());
    for head in &asked {
        assert_eq!(field(head, "authorization"), Some(REMOTE_TOKEN), "{head}");
        assert_eq!(field(head, "x-remote-note"), Some("for-the-redirector"));
    }
    let followed = target.heads();
    assert!(!followed.is_empty(), "the redirect was followed");
    for head in &followed {
        assert_eq!(
            field(head, "authorization"),
            None,
            "token sent across origins:\n{head}"
        );
        assert_eq!(field(head, "x-remote-note"), None, "{head}");
    }
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_refused_mid_copy_has_its_own_failure_line() -> TestResult {
    let p = pair(quick()).await?;
    // Three 16 MiB chunks on one lane: the first is served, then the token "expires".
    let body = data(40 * MIB + 5);
    let expiring = TinyServer::start(
        body.clone(),
        Misbehaviour {
            refuse_after: Some((16 * MIB, 401)),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let one_lane = [("X-Number-Of-Streams", "1")];
    let last = pull(&p, "/in/expiring.bin", &expiring.url("/f.bin"), &one_lane).await?;
    assert!(
        last.starts_with("failure: remote refused the token mid-copy (401)"),
        "{last}"
    );
    assert!(expiring.served() >= 16 * MIB);
    let dir = p.b.root().join("in");
    assert!(!dir.join("expiring.bin").exists());
    assert_eq!(staging_names(&dir)?, Vec::<String>::new());

    // Refused from the first request: the plain status line, as before.
    let refused = TinyServer::start(
        body,
        Misbehaviour {
            refuse_after: Some((0, 403)),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let last = pull(&p, "/in/refused.bin", &refused.url("/f.bin"), &one_lane).await?;
    assert_eq!(last, "failure: the remote answered 403");
    assert!(!dir.join("refused.bin").exists());
    assert_eq!(staging_names(&dir)?, Vec::<String>::new());
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn markers_name_the_open_remote_connections() -> TestResult {
    let p = pair(quick()).await?;
    let body = data(2 * MIB);
    let gate = Arc::new(Semaphore::new(0));
    let slow = TinyServer::start(
        body.clone(),
        Misbehaviour {
            hold_bodies: Some(Arc::clone(&gate)),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let url = slow.url("/f.bin");
    let expected = format!(
        "\tRemoteConnections: tcp:{}\n",
        url.trim_start_matches("http://").trim_end_matches("/f.bin")
    );
    let mut headers = fields("source", &url, false, &[("X-Number-Of-Streams", "1")]);
    headers.push(("TransferHeaderAuthorization", REMOTE_TOKEN));
    let mut c = copy(&p.b, &p.cert, "/in/slow.bin", &headers, false).await?;
    assert_eq!(c.status, 202);
    // While the remote holds its answer, the copy's connection is open: the markers name it.
    let mut text = String::new();
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(piece) = c.next_text().await? {
            text.push_str(&piece);
            if text.contains(&expected) {
                return Ok::<bool, BoxError>(true);
            }
        }
        Ok(false)
    })
    .await??;
    assert!(seen, "no marker named {expected:?}:\n{text}");
    gate.add_permits(Semaphore::MAX_PERMITS / 2);
    while let Some(piece) = c.next_text().await? {
        text.push_str(&piece);
    }
    assert_eq!(check_markers(&text), "success: Created", "{text}");
    assert_eq!(std::fs::read(p.b.root().join("in/slow.bin"))?, body);
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

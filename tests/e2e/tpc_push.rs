//! Third-party copy pushes to servers that are not xfer: the remote is asked (`OPTIONS`)
//! whether it speaks xfer's parallel upload protocol, and one that does not gets the whole
//! file as one plain `PUT` streamed from disk with its `Content-Length`, never a ranged
//! chunk; a checksum the remote declares of what it stored is compared. Against nginx's
//! WebDAV `PUT` (nginx-light), a scripted server that lies about the digest, and the
//! announcement an xfer server makes.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::interop::{nginx, start_nginx};
use crate::support::{sha256_file, write_random_file, BoxError, TestResult, MIB};
use crate::tpc::{check_markers, copy, fields, pair, quick, request};
use crate::tpc_policy::read_head;
use xfer::crates::core::checksum::{ChecksumAlgorithm, Checksummer};

const SIZE: u64 = 40 * MIB + 12345;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_of_40_mib_to_nginx_webdav_is_one_streamed_put() -> TestResult {
    let Some(bin) = nginx() else {
        return Ok(());
    };
    let p = pair(quick()).await?;
    let src = p.a.root().join("data/big.bin");
    std::fs::create_dir_all(src.parent().ok_or("no parent")?)?;
    let sha = write_random_file(&src, SIZE, 17)?;
    let dir = tempfile::tempdir()?;
    let server = start_nginx(
        &bin,
        dir.path(),
        "dav_methods PUT;\n    create_full_put_path on;\n    client_max_body_size 0;",
    )?;
    let dest = format!("http://{}/in/pushed.bin", server.addr);
    let c = copy(
        &p.a,
        &p.cert,
        "/data/big.bin",
        &fields("destination", &dest, false, &[("X-Number-Of-Streams", "4")]),
        false,
    )
    .await?;
    assert_eq!(c.status, 202);
    let text = c.text().await?;
    assert_eq!(check_markers(&text), "success: Created", "{text}");
    assert!(text.contains(&format!("Stripe Bytes Transferred: {SIZE}\n")));
    assert_eq!(sha256_file(&dir.path().join("www/in/pushed.bin"))?, sha);
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

/// What the scripted server saw of each request: the head, and how many body bytes.
type Seen = Arc<Mutex<Vec<(String, u64)>>>;

/// A plain-HTTP server that refuses `OPTIONS` (405, as many do), stores nothing, and answers
/// every `PUT` (after reading its declared body) with 201 and `digest`.
async fn lying_server(digest: String) -> Result<(std::net::SocketAddr, Seen), BoxError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (log, digest) = (Arc::clone(&log), digest.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(head) = read_head(&mut sock, &mut buf).await {
                    let length: u64 = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    let mut left = length;
                    let take = (buf.len() as u64).min(left);
                    buf.drain(..take as usize);
                    left -= take;
                    let mut chunk = vec![0u8; 1 << 16];
                    while left > 0 {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => left = left.saturating_sub(n as u64),
                        }
                    }
                    let answer = if head.starts_with("PUT ") {
                        format!("HTTP/1.1 201 Created\r\n{digest}\r\ncontent-length: 0\r\n\r\n")
                    } else {
                        "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n".to_string()
                    };
                    if let Ok(mut l) = log.lock() {
                        l.push((head, length));
                    }
                    if sock.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((addr, seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remote_without_the_upload_protocol_gets_whole_puts_and_its_digest_is_checked(
) -> TestResult {
    let p = pair(quick()).await?;
    let src = p.a.root().join("data/big.bin");
    std::fs::create_dir_all(src.parent().ok_or("no parent")?)?;
    write_random_file(&src, SIZE, 5)?;
    let adler = Checksummer::of(ChecksumAlgorithm::Adler32, &std::fs::read(&src)?);
    let wrong = if adler.to_hex() == "00000001" {
        "00000002"
    } else {
        "00000001"
    };
    let (addr, seen) = lying_server(format!("Digest: adler32={wrong}")).await?;
    let dest = format!("http://{addr}/x/big.bin");
    let c = copy(
        &p.a,
        &p.cert,
        "/data/big.bin",
        &fields("destination", &dest, false, &[]),
        false,
    )
    .await?;
    assert_eq!(c.status, 202);
    let text = c.text().await?;
    let last = check_markers(&text);
    assert_eq!(
        last,
        "failure: checksum verification failed: the data does not match the remote's checksum",
        "{text}"
    );
    let seen = seen.lock().map_err(|_| "poisoned")?.clone();
    let puts: Vec<_> = seen.iter().filter(|(h, _)| h.starts_with("PUT ")).collect();
    assert_eq!(puts.len(), 1, "{seen:?}");
    let (head, length) = puts[0];
    assert_eq!(*length, SIZE);
    assert!(
        !head.to_ascii_lowercase().contains("content-range")
            && !head.to_ascii_lowercase().contains("xfer-upload"),
        "{head}"
    );
    assert!(seen.iter().any(|(h, _)| h.starts_with("OPTIONS ")));

    // The same remote declaring the right adler32 (and an algorithm nobody knows): success.
    let (addr, _) =
        lying_server(format!("Digest: nonsense=1,{}", adler.to_rfc3230_member())).await?;
    let c = copy(
        &p.a,
        &p.cert,
        "/data/big.bin",
        &fields(
            "destination",
            &format!("http://{addr}/x/big.bin"),
            false,
            &[],
        ),
        false,
    )
    .await?;
    let text = c.text().await?;
    assert_eq!(check_markers(&text), "success: Created", "{text}");

    // A remote that declares nothing is trusted, unless the caller requires verification.
    for (require, want) in [
        ("false", "success: Created"),
        (
            "true",
            "failure: checksum verification failed: the remote offers no checksum to compare with",
        ),
    ] {
        let (addr, _) = lying_server("X-Stored: yes".to_string()).await?;
        let c = copy(
            &p.a,
            &p.cert,
            "/data/big.bin",
            &fields(
                "destination",
                &format!("http://{addr}/x/big.bin"),
                false,
                &[("RequireChecksumVerification", require)],
            ),
            false,
        )
        .await?;
        let text = c.text().await?;
        assert_eq!(check_markers(&text), want, "{text}");
    }
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_xfer_server_announces_its_upload_protocol_and_copy() -> TestResult {
    let p = pair(quick()).await?;
    let answer = request(&p.b, &p.cert, "OPTIONS", "/any", &[], false).await?;
    assert_eq!(answer.status, 200);
    let field = |n: &str| {
        answer
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(field("xfer-upload-protocol"), "1");
    assert_eq!(
        field("allow"),
        "COPY, GET, HEAD, OPTIONS, PROPFIND, PUT, POST, DELETE, MKCOL, MOVE"
    );
    // A method the server does not serve is refused with the same list.
    let refused = request(&p.b, &p.cert, "LOCK", "/any", &[], false).await?;
    assert_eq!(refused.status, 405);
    assert_eq!(
        refused.headers.get("allow").and_then(|v| v.to_str().ok()),
        Some("COPY, GET, HEAD, OPTIONS, PROPFIND, PUT, POST, DELETE, MKCOL, MOVE")
    );
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

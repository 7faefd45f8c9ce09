//! One table of requests — good, bad and hostile, files and listings — sent through every
//! server codec (HTTP/1.1 over TLS, HTTP/2 over TLS, h2c, QUIC), asserting the same answer:
//! status, validators, Content-Range and length, digests, redirect location, body bytes. The servers share one request
//! core (`xfer-service`), so any difference is a codec bug.
//!
//! The clients are deliberately raw (hyper's `client::conn`, the `xfer/1` wire codec over
//! quinn) so that no client-side logic hides a server difference.
//!
//! `Repr-Digest` is switched off: the TLS and the plain server each have their own digest
//! cache, filled in the background, so whether it is known yet would depend on timing.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer_common::ranges::{content_range, unsatisfied_content_range};
use xfer_common::tls::{client_config, ClientTlsOptions};
use xfer_core::checksum::ChecksumAlgorithm;
use xfer_quic::wire::{self, ResponseHead, TRAILER_LEN};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const FILE_LEN: usize = 1000;
const SYNTHETIC: &str = "/.xfer/synthetic?size=4096&seed=7";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Http1Tls,
    Http2Tls,
    H2c,
    Quic,
}

/// What `If-Range` carries.
#[derive(Debug, Clone, Copy)]
enum IfRange {
    None,
    CurrentEtag,
    OtherEtag,
    WeakEtag,
    Date,
}

/// How a case is said in `xfer/1`, which has no `Range` header, no `If-Range`, and only
/// GET, STAT and LIST.
#[derive(Debug, Clone)]
enum QuicForm {
    /// GET (or STAT when the HTTP method is HEAD) with this exact range.
    Same(Option<Range<u64>>),
    /// LIST of the case's path: the manifest HTTP asks for with `?manifest` or `Accept`.
    List,
    /// Not expressible; the case runs over the HTTP codecs only.
    None,
}

#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    range: Option<&'static str>,
    if_range: IfRange,
    want_digest: bool,
    /// A whole-resource checksum asked for: HTTP `Want-Digest`, `xfer/1` CHECKSUMS.
    checksum: Option<ChecksumAlgorithm>,
    /// Send `TE: trailers` (HTTP/1.1 delivers a trailer only then).
    te_trailers: bool,
    /// WebDAV `Depth`.
    depth: Option<&'static str>,
    accept: Option<&'static str>,
    quic: QuicForm,
    /// The status every codec must answer with; `None` only asserts they agree.
    status: Option<u16>,
}

fn case(name: &'static str, path: &str) -> Case {
    Case {
        name,
        method: "GET",
        path: path.to_string(),
        range: None,
        if_range: IfRange::None,
        want_digest: false,
        checksum: None,
        te_trailers: false,
        depth: None,
        accept: None,
        quic: QuicForm::Same(None),
        status: Some(200),
    }
}

fn table() -> Vec<Case> {
    let ranged = |name, range, quic: Range<u64>| Case {
        range: Some(range),
        quic: QuicForm::Same(Some(quic)),
        status: Some(206),
        ..case(name, "/f.bin")
    };
    let if_range = |name, which, status| Case {
        range: Some("bytes=0-99"),
        if_range: which,
        // xfer/1's validator answers 412 on a mismatch instead of serving the whole.
        quic: QuicForm::None,
        status: Some(status),
        ..case(name, "/f.bin")
    };
    let refused = |name, path: &str, status| Case {
        status,
        ..case(name, path)
    };
    // xfer/1 has no WebDAV: its listing is LIST.
    let propfind = |name, path: &str, depth, status| Case {
        method: "PROPFIND",
        depth,
        quic: QuicForm::None,
        status: Some(status),
        ..case(name, path)
    };
    vec![
        case("whole", "/f.bin"),
        Case {
            method: "HEAD",
            ..case("head", "/f.bin")
        },
        Case {
            method: "HEAD",
            range: Some("bytes=0-9"),
            ..case("head ignores range", "/f.bin")
        },
        Case {
            method: "HEAD",
            checksum: Some(ChecksumAlgorithm::Adler32),
            ..case("head with a checksum", "/f.bin")
        },
        Case {
            checksum: Some(ChecksumAlgorithm::Md5),
            ..case("get with a checksum", "/f.bin")
        },
        Case {
            checksum: Some(ChecksumAlgorithm::Sha256),
            status: Some(404),
            ..case("checksum of a missing file", "/missing.bin")
        },
        ranged("range at start", "bytes=0-99", 0..100),
        ranged("range in the middle", "bytes=400-499", 400..500),
        ranged("range at end", "bytes=900-999", 900..1000),
        ranged("suffix range", "bytes=-100", 900..1000),
        ranged("open range", "bytes=500-", 500..1_000_000),
        Case {
            range: Some("bytes=0-1,5-6"),
            ..case("multiple ranges serve the whole", "/f.bin")
        },
        Case {
            range: Some("bytes=abc"),
            ..case("malformed range serves the whole", "/f.bin")
        },
        Case {
            range: Some("bytes=1000-"),
            quic: QuicForm::Same(Some(1000..2000)),
            status: Some(416),
            ..case("unsatisfiable range", "/f.bin")
        },
        Case {
            if_range: IfRange::CurrentEtag,
            quic: QuicForm::Same(Some(0..100)),
            ..if_range("if-range match", IfRange::CurrentEtag, 206)
        },
        if_range("if-range mismatch", IfRange::OtherEtag, 200),
        if_range("if-range weak", IfRange::WeakEtag, 200),
        if_range("if-range date", IfRange::Date, 200),
        Case {
            want_digest: true,
            te_trailers: true,
            ..case("content digest with trailers", "/f.bin")
        },
        Case {
            want_digest: true,
            te_trailers: true,
            ..ranged("content digest of a range", "bytes=100-299", 100..300)
        },
        Case {
            want_digest: true,
            ..case("content digest without TE", "/f.bin")
        },
        refused("missing file", "/missing.bin", Some(404)),
        refused("traversal", "/../secret.txt", Some(403)),
        refused("encoded traversal", "/%2e%2e/secret.txt", Some(403)),
        refused("encoded slash", "/sub%2Finner.bin", None),
        refused("symlink out of the root", "/link.bin", Some(403)),
        Case {
            status: Some(301),
            ..case("directory without its slash redirects", "/sub")
        },
        case("directory index", "/sub/"),
        case("root index", "/"),
        Case {
            quic: QuicForm::List,
            ..case("manifest", "/?manifest")
        },
        Case {
            quic: QuicForm::List,
            ..case("manifest of a subdirectory", "/sub?manifest")
        },
        Case {
            accept: Some("application/x-xfer-manifest+jsonl"),
            quic: QuicForm::List,
            ..case("manifest by media type", "/")
        },
        Case {
            quic: QuicForm::List,
            status: Some(404),
            ..case("manifest of a file", "/f.bin?manifest")
        },
        Case {
            quic: QuicForm::List,
            status: Some(403),
            ..case("manifest outside the root", "/../?manifest")
        },
        propfind("propfind depth 0 of a file", "/f.bin", Some("0"), 207),
        propfind("propfind depth 0 of a directory", "/sub/", Some("0"), 207),
        propfind("propfind depth 1", "/", Some("1"), 207),
        propfind("propfind depth infinity", "/", Some("infinity"), 403),
        propfind("propfind without depth", "/", None, 403),
        propfind("propfind of a missing file", "/missing.bin", Some("0"), 404),
        Case {
            method: "OPTIONS",
            quic: QuicForm::None,
            ..case("options", "/")
        },
        refused(
            "over-long segment",
            &format!("/{}", "a".repeat(300)),
            Some(414),
        ),
        Case {
            method: "DELETE",
            // xfer/1 has no such method: the codec cannot even encode it.
            quic: QuicForm::None,
            status: Some(405),
            ..case("other method", "/f.bin")
        },
        // The tree changes are WebDAV's, HTTP-only, and refused alike while uploads are off.
        Case {
            method: "MKCOL",
            quic: QuicForm::None,
            status: Some(405),
            ..case("mkcol with uploads off", "/new/")
        },
        Case {
            method: "MOVE",
            quic: QuicForm::None,
            status: Some(405),
            ..case("move with uploads off", "/f.bin")
        },
        Case {
            want_digest: true,
            te_trailers: true,
            ..case("synthetic", SYNTHETIC)
        },
        Case {
            range: Some("bytes=1000-1999"),
            quic: QuicForm::Same(Some(1000..2000)),
            status: Some(206),
            ..case("synthetic range", SYNTHETIC)
        },
    ]
}

/// What the answers are compared on, normalised across codecs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    status: u16,
    etag: Option<String>,
    last_modified: Option<String>,
    content_range: Option<String>,
    /// Declared length for HEAD, body length for 2xx and 416, nothing for refusals (whose
    /// text HTTP puts in the body and `xfer/1` in the head's message).
    length: Option<u64>,
    repr_digest: Option<String>,
    content_digest: Option<String>,
    /// The whole resource's checksum, as an RFC 3230 `Digest` member.
    digest: Option<String>,
    /// Where a 3xx points (HTTP `Location`, `xfer/1`'s message).
    location: Option<String>,
    body: Option<Bytes>,
}

struct Rig {
    _dir: tempfile::TempDir,
    tls: Servers,
    plain: Servers,
    client_tls: rustls::ClientConfig,
}

async fn rig() -> Result<Rig, BoxError> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("sub"))?;
    let content: Vec<u8> = (0..FILE_LEN).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("f.bin"), &content)?;
    std::fs::write(root.join("sub/inner.bin"), b"inner")?;
    std::fs::write(dir.path().join("secret.txt"), b"secret")?;
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.bin"))?;

    let start = |tls: ServerTls, quic: bool| {
        let mut cfg = ServeConfig::new(root.clone(), tls);
        cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.http.repr_digest = false;
        cfg.quic = quic;
        cfg.quic_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        Servers::start(cfg)
    };
    let tls = start(
        ServerTls::SelfSigned {
            dir: dir.path().join("cert"),
            names: vec!["127.0.0.1".into()],
        },
        true,
    )
    .await?;
    let plain = start(ServerTls::Plain, false).await?;
    let ca = tls
        .self_signed
        .as_ref()
        .ok_or("no self-signed certificate")?
        .cert_path
        .clone();
    let client_tls = client_config(
        &ClientTlsOptions {
            client_identity: None,
            ca_certs: vec![ca],
            dangerous_insecure: false,
        },
        &[],
    )?;
    Ok(Rig {
        _dir: dir,
        tls,
        plain,
        client_tls,
    })
}

fn if_range_value(which: IfRange, etag: &str) -> Option<String> {
    match which {
        IfRange::None => None,
        IfRange::CurrentEtag => Some(etag.to_string()),
        IfRange::OtherEtag => Some("\"not-the-etag\"".into()),
        IfRange::WeakEtag => Some(format!("W/{etag}")),
        IfRange::Date => Some("Sat, 01 Jan 2000 00:00:00 GMT".into()),
    }
}

async fn via_http(rig: &Rig, codec: Codec, case: &Case, etag: &str) -> Result<Outcome, BoxError> {
    let addr = match codec {
        Codec::H2c => rig.plain.http_addr,
        _ => rig.tls.http_addr,
    };
    let tcp = TcpStream::connect(addr).await?;
    let scheme = if codec == Codec::H2c { "http" } else { "https" };
    let uri = format!("{scheme}://{addr}{}", case.path);
    let mut req = http::Request::builder()
        .method(case.method)
        .uri(uri)
        .header(http::header::HOST, addr.to_string());
    if let Some(r) = case.range {
        req = req.header(http::header::RANGE, r);
    }
    if let Some(v) = if_range_value(case.if_range, etag) {
        req = req.header(http::header::IF_RANGE, v);
    }
    if case.want_digest {
        req = req.header("want-content-digest", "sha-256=1");
    }
    if let Some(a) = case.checksum {
        req = req.header("want-digest", a.rfc3230_name());
    }
    if case.te_trailers {
        req = req.header(http::header::TE, "trailers");
    }
    if let Some(d) = case.depth {
        req = req.header("depth", d);
    }
    if let Some(a) = case.accept {
        req = req.header(http::header::ACCEPT, a);
    }
    let req = req.body(Empty::<Bytes>::new())?;
    let response = match codec {
        Codec::H2c => {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await?;
            tokio::spawn(conn);
            send.send_request(req).await?
        }
        Codec::Http1Tls | Codec::Http2Tls => {
            let mut cfg = rig.client_tls.clone();
            let h2 = codec == Codec::Http2Tls;
            cfg.alpn_protocols = vec![if h2 {
                b"h2".to_vec()
            } else {
                b"http/1.1".to_vec()
            }];
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, tcp)
                .await?;
            if h2 {
                let (mut send, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                        .await?;
                tokio::spawn(conn);
                send.send_request(req).await?
            } else {
                let (mut send, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
                tokio::spawn(conn);
                // HTTP/1.1 requests carry the origin form.
                let (mut parts, body) = req.into_parts();
                parts.uri = case.path.parse()?;
                send.send_request(http::Request::from_parts(parts, body))
                    .await?
            }
        }
        Codec::Quic => return Err("not an http codec".into()),
    };
    let (parts, body) = response.into_parts();
    let collected = body.collect().await?;
    let trailer_digest = collected
        .trailers()
        .and_then(|t| t.get("content-digest"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = collected.to_bytes();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let status = parts.status.as_u16();
    let length = if case.method == "HEAD" {
        header("content-length").and_then(|v| v.parse().ok())
    } else if (200..300).contains(&status) || status == 416 {
        Some(body.len() as u64)
    } else {
        None
    };
    if status == 405 {
        // xfer/1 has no Allow; HTTP must name the methods it serves (third-party copy is
        // on by default, uploads are not).
        assert_eq!(
            header("allow").as_deref(),
            Some("COPY, GET, HEAD, OPTIONS, PROPFIND"),
            "{}",
            case.name
        );
    }
    if case.method == "OPTIONS" {
        assert_eq!(header("dav").as_deref(), Some("1"), "{}", case.name);
    }
    Ok(Outcome {
        status,
        etag: header("etag"),
        last_modified: header("last-modified"),
        content_range: header("content-range"),
        length,
        repr_digest: header("repr-digest"),
        content_digest: header("content-digest").or(trailer_digest),
        digest: header("digest"),
        location: header("location"),
        body: (200..300).contains(&status).then_some(body),
    })
}

async fn via_quic(
    conn: &quinn::Connection,
    case: &Case,
    range: Option<Range<u64>>,
    list: bool,
) -> Result<Outcome, BoxError> {
    let head_only = case.method == "HEAD";
    let req = wire::Request {
        upload: None,
        token: None,
        method: if list {
            wire::Method::List
        } else if head_only {
            wire::Method::Stat
        } else {
            wire::Method::Get
        },
        path: case.path.clone(),
        range,
        want_digest: case.want_digest,
        checksums: case.checksum.into_iter().collect(),
        validator: match case.if_range {
            IfRange::CurrentEtag => Some(etag_of(conn).await?),
            _ => None,
        },
    };
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&req.encode()?).await?;
    send.finish()?;
    let all = recv.read_to_end(16 << 20).await?;
    let (head, rest) = split_head(&all)?;
    let (body, trailer) = if head.trailer {
        let at = rest.len().checked_sub(TRAILER_LEN).ok_or("no trailer")?;
        (
            &rest[..at],
            Some(wire::decode_trailer(&rest[at..])?.to_header_value()),
        )
    } else {
        (rest, None)
    };
    let status = head.status;
    let content_range = match (status, &head.range) {
        (206, Some(r)) => Some(content_range(r, head.size)),
        (416, _) => Some(unsatisfied_content_range(head.size)),
        _ => None,
    };
    let length = if head_only {
        Some(head.size)
    } else if (200..300).contains(&status) || status == 416 {
        Some(body.len() as u64)
    } else {
        None
    };
    Ok(Outcome {
        status,
        etag: head.etag.clone(),
        last_modified: head.last_modified.clone(),
        content_range,
        length,
        repr_digest: head.repr_sha256.map(|d| d.to_header_value()),
        content_digest: trailer,
        digest: head.checksums.first().map(|c| c.to_rfc3230_member()),
        location: (300..400)
            .contains(&status)
            .then(|| head.message.clone())
            .flatten(),
        body: (200..300)
            .contains(&status)
            .then(|| Bytes::copy_from_slice(body)),
    })
}

pub(crate) fn split_head(all: &[u8]) -> Result<(ResponseHead, &[u8]), BoxError> {
    let prefix: [u8; 2] = all.get(..2).ok_or("short head")?.try_into()?;
    let len = ResponseHead::decode_len(prefix)?;
    let head = all.get(2..2 + len).ok_or("short head")?;
    Ok((ResponseHead::decode(head)?, &all[2 + len..]))
}

/// The current ETag of `/f.bin`, asked over QUIC with STAT.
async fn etag_of(conn: &quinn::Connection) -> Result<String, BoxError> {
    let all = quic_plain(conn, wire::Method::Stat, "/f.bin").await?;
    Ok(split_head(&all)?.0.etag.ok_or("no etag")?)
}

/// A plain `xfer/1` request (no range, digest or validator) and the whole answer, head and
/// body, up to 1 MiB.
pub(crate) async fn quic_plain(
    conn: &quinn::Connection,
    method: wire::Method,
    path: &str,
) -> Result<Vec<u8>, BoxError> {
    let req = wire::Request {
        upload: None,
        token: None,
        method,
        path: path.into(),
        range: None,
        want_digest: false,
        checksums: Vec::new(),
        validator: None,
    };
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&req.encode()?).await?;
    send.finish()?;
    Ok(recv.read_to_end(1 << 20).await?)
}

async fn quic_connection(rig: &Rig) -> Result<(quinn::Endpoint, quinn::Connection), BoxError> {
    let addr = rig.tls.quic_addr.ok_or("no quic server")?;
    quic_connect(addr, rig.client_tls.clone()).await
}

/// An `xfer/1` connection to `addr` with `tls`.
pub(crate) async fn quic_connect(
    addr: SocketAddr,
    mut tls: rustls::ClientConfig,
) -> Result<(quinn::Endpoint, quinn::Connection), BoxError> {
    tls.alpn_protocols = vec![wire::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls))?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let conn = endpoint.connect(addr, "127.0.0.1")?.await?;
    Ok((endpoint, conn))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_answers_the_same() -> Result<(), BoxError> {
    let rig = rig().await?;
    let (_endpoint, quic) = quic_connection(&rig).await?;
    let etag = etag_of(&quic).await?;
    let mut failures = Vec::new();
    for case in table() {
        let mut outcomes = Vec::new();
        for codec in [Codec::Http1Tls, Codec::Http2Tls, Codec::H2c] {
            outcomes.push((codec, via_http(&rig, codec, &case, &etag).await?));
        }
        match &case.quic {
            QuicForm::Same(range) => {
                outcomes.push((
                    Codec::Quic,
                    via_quic(&quic, &case, range.clone(), false).await?,
                ));
            }
            QuicForm::List => {
                outcomes.push((Codec::Quic, via_quic(&quic, &case, None, true).await?));
            }
            QuicForm::None => {}
        }
        if case.want_digest && !case.te_trailers {
            // Without `TE: trailers` HTTP/1.1 cannot carry the trailer the others send:
            // compare the rest, and check each codec did what it can.
            for (codec, o) in &mut outcomes {
                let can = *codec != Codec::Http1Tls;
                if o.content_digest.is_some() != can {
                    failures.push(format!(
                        "{}: {codec:?} content digest {:?}",
                        case.name, o.content_digest
                    ));
                }
                o.content_digest = None;
            }
        }
        let (first_codec, first) = &outcomes[0];
        if let Some(want) = case.status {
            if first.status != want {
                failures.push(format!(
                    "{}: status {} instead of {want}",
                    case.name, first.status
                ));
            }
        }
        if case.want_digest && case.te_trailers && first.content_digest.is_none() {
            failures.push(format!("{}: no content digest", case.name));
        }
        let checksum_due = case.checksum.is_some() && first.status == 200;
        if checksum_due != first.digest.is_some() {
            failures.push(format!("{}: digest {:?}", case.name, first.digest));
        }
        for (codec, o) in &outcomes[1..] {
            if o != first {
                failures.push(format!(
                    "{}: {codec:?} differs from {first_codec:?}:\n  {o:?}\n  {first:?}",
                    case.name
                ));
            }
        }
    }
    rig.tls.shutdown().await;
    rig.plain.shutdown().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

//! One table of requests — good, bad and hostile, files and listings — sent through every
//! server codec (HTTP/1.1 over TLS, HTTP/2 over TLS, h2c, QUIC), asserting the same answer:
//! status, validators, Content-Range and length, digests, redirect location, body bytes. The servers share one request
//! core (`xfer-service`), so any difference is a codec bug.
//!
//! The clients are deliberately raw (hyper's `client::conn`, the `xfer/1` wire codec over
//! quinn) so that no client-side logic hides a server difference.
//!
//! In that table `Repr-Digest` is switched off: the TLS and the plain server each have their
//! own digest cache, filled in the background, so whether it is known yet would depend on
//! timing. A second case runs one server composed as `xfer serve` composes it (one request
//! core behind HTTP/1.1, HTTP/2 and QUIC) with uploads, tokens, third-party copy and
//! `Repr-Digest` on: PUTs that create and replace, 401 and 403, the digest once known, and what
//! a `COPY` pulled, all answered alike.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use xfer::crates::service::{RemotePolicy, TpcConfig};
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer_common::ranges::{content_range, unsatisfied_content_range};
use xfer_common::tls::{client_config, reuse_or_generate_self_signed, ClientTlsOptions};
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
    let req = req.body(Full::new(Bytes::new()))?;
    let (parts, collected) = http_exchange(addr, &rig.client_tls, codec, req).await?;
    let trailer_digest = collected
        .trailers()
        .and_then(|t| t.get("content-digest"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = collected.to_bytes();
    let header = |name: &str| header_of(&parts, name);
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

/// A response field's value, as text.
fn header_of(parts: &http::response::Parts, name: &str) -> Option<String> {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Send `req` to `addr` over `codec` (h2c in the clear, the others over TLS with
/// `client_tls`), and read the whole answer.
async fn http_exchange(
    addr: SocketAddr,
    client_tls: &rustls::ClientConfig,
    codec: Codec,
    req: http::Request<Full<Bytes>>,
) -> Result<(http::response::Parts, http_body_util::Collected<Bytes>), BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let response = match codec {
        Codec::H2c => {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await?;
            tokio::spawn(conn);
            send.send_request(req).await?
        }
        Codec::Http1Tls | Codec::Http2Tls => {
            let mut cfg = client_tls.clone();
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
                parts.uri = parts
                    .uri
                    .path_and_query()
                    .ok_or("a request without a path")?
                    .as_str()
                    .parse()?;
                send.send_request(http::Request::from_parts(parts, body))
                    .await?
            }
        }
        Codec::Quic => return Err("not an http codec".into()),
    };
    let (parts, body) = response.into_parts();
    Ok((parts, body.collect().await?))
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
/// body, up to 16 MiB.
pub(crate) async fn quic_plain(
    conn: &quinn::Connection,
    method: wire::Method,
    path: &str,
) -> Result<Vec<u8>, BoxError> {
    quic_send(conn, &plain_request(method, path), &[]).await
}

fn plain_request(method: wire::Method, path: &str) -> wire::Request {
    wire::Request {
        upload: None,
        token: None,
        method,
        path: path.into(),
        range: None,
        want_digest: false,
        checksums: Vec::new(),
        validator: None,
    }
}

/// Send `req` and then `body` on a new stream; the whole answer, head and body, up to 16 MiB.
async fn quic_send(
    conn: &quinn::Connection,
    req: &wire::Request,
    body: &[u8],
) -> Result<Vec<u8>, BoxError> {
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&req.encode()?).await?;
    send.write_all(body).await?;
    send.finish()?;
    Ok(recv.read_to_end(16 << 20).await?)
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

/// The tokens of the composed server: one may write under `/in`, one may only read.
const ACCESS: &str = r#"
[[token]]
name = "writer"
token = "parity-writer"
access = "write"
prefix = "/in"

[[token]]
name = "reader"
token = "parity-reader"
access = "read"
prefix = "/"
"#;
const WRITER: &str = "parity-writer";
const READER: &str = "parity-reader";

/// `xfer serve` as composed for production: one request core behind HTTP/1.1, HTTP/2 and QUIC,
/// with uploads, tokens, third-party copy and `Repr-Digest` on.
struct Composed {
    _dir: tempfile::TempDir,
    servers: Servers,
    client_tls: rustls::ClientConfig,
    root: std::path::PathBuf,
    content: Vec<u8>,
}

async fn composed() -> Result<Composed, BoxError> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("in"))?;
    let content: Vec<u8> = (0..FILE_LEN).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(root.join("f.bin"), &content)?;
    let access = dir.path().join("access.toml");
    std::fs::write(&access, ACCESS)?;
    // Made before the start, so that the copies' client can trust it.
    let (made, _) =
        reuse_or_generate_self_signed(&["127.0.0.1".to_string()], &dir.path().join("cert"), false)?;
    let mut cfg = ServeConfig::new(
        root.clone(),
        ServerTls::Files {
            cert: made.cert_path.clone(),
            key: made.key_path.clone(),
        },
    );
    cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.quic_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.access_file = Some(access);
    cfg.uploads = Some(Default::default());
    // Its remotes are itself, on loopback, which the default policy refuses.
    cfg.tpc = Some(TpcConfig {
        remote_policy: RemotePolicy::allowing(["127.0.0.0/8".parse()?]),
        ..TpcConfig::default()
    });
    let trust = ClientTlsOptions {
        client_identity: None,
        ca_certs: vec![made.cert_path.clone()],
        dangerous_insecure: false,
    };
    cfg.tpc_client = xfer::ClientConfig::default().with_tls(trust.clone());
    let servers = Servers::start(cfg).await?;
    let client_tls = client_config(&trust, &[])?;
    Ok(Composed {
        _dir: dir,
        servers,
        client_tls,
        root,
        content,
    })
}

/// A request of the write cases, said once and sent over each codec.
#[derive(Debug, Clone)]
struct Exchange {
    method: &'static str,
    path: String,
    token: Option<&'static str>,
    body: Vec<u8>,
    /// HTTP-only fields (`Source` of a `COPY`).
    headers: Vec<(&'static str, String)>,
}

fn get(path: &str) -> Exchange {
    Exchange {
        method: "GET",
        path: path.into(),
        token: None,
        body: Vec::new(),
        headers: Vec::new(),
    }
}

fn put(path: &str, token: Option<&'static str>, body: &[u8]) -> Exchange {
    Exchange {
        method: "PUT",
        token,
        body: body.to_vec(),
        ..get(path)
    }
}

/// What a write case is compared on: the status, the validators and digest, and the body of
/// a success. A refusal's text is left out: HTTP puts it in the body, `xfer/1` in the head.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    etag: Option<String>,
    repr_digest: Option<String>,
    body: Option<Bytes>,
    /// HTTP's challenge on a 401; `xfer/1` has none, so it is checked apart.
    challenge: bool,
}

async fn http_answer(c: &Composed, codec: Codec, x: &Exchange) -> Result<Answer, BoxError> {
    let addr = c.servers.http_addr;
    let mut req = http::Request::builder()
        .method(x.method)
        .uri(format!("https://{addr}{}", x.path))
        .header(http::header::HOST, addr.to_string());
    if let Some(t) = x.token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    for (name, value) in &x.headers {
        req = req.header(*name, value);
    }
    let req = req.body(Full::new(Bytes::from(x.body.clone())))?;
    let (parts, collected) = http_exchange(addr, &c.client_tls, codec, req).await?;
    let body = collected.to_bytes();
    let header = |name: &str| header_of(&parts, name);
    let status = parts.status.as_u16();
    Ok(Answer {
        status,
        etag: header("etag"),
        repr_digest: header("repr-digest"),
        body: (200..300).contains(&status).then_some(body),
        challenge: header("www-authenticate").is_some(),
    })
}

async fn quic_answer(conn: &quinn::Connection, x: &Exchange) -> Result<Answer, BoxError> {
    let upload = x.method == "PUT";
    let method = if upload {
        wire::Method::Put
    } else {
        wire::Method::Get
    };
    let req = wire::Request {
        upload: upload.then(wire::UploadFields::default),
        token: x.token.map(str::to_string),
        ..plain_request(method, &x.path)
    };
    let all = quic_send(conn, &req, &x.body).await?;
    let (head, body) = split_head(&all)?;
    Ok(Answer {
        status: head.status,
        etag: head.etag.clone(),
        repr_digest: head.repr_sha256.map(|d| d.to_header_value()),
        body: (200..300)
            .contains(&head.status)
            .then(|| Bytes::copy_from_slice(body)),
        challenge: false,
    })
}

/// The answers of HTTP/1.1, HTTP/2 and, when `xfer/1` can say it, QUIC, to the same request.
async fn answers(
    c: &Composed,
    quic: &quinn::Connection,
    x: &Exchange,
) -> Result<Vec<(Codec, Answer)>, BoxError> {
    let mut out = Vec::new();
    for codec in [Codec::Http1Tls, Codec::Http2Tls] {
        out.push((codec, http_answer(c, codec, x).await?));
    }
    if x.method == "GET" || x.method == "PUT" {
        out.push((Codec::Quic, quic_answer(quic, x).await?));
    }
    Ok(out)
}

/// Every codec's answer equals HTTP/1.1's but for the challenge, which only HTTP carries;
/// returns HTTP/1.1's.
fn same(what: &str, answers: &[(Codec, Answer)]) -> Answer {
    let (_, first) = &answers[0];
    for (codec, a) in &answers[1..] {
        let challenge = if *codec == Codec::Quic {
            first.challenge
        } else {
            a.challenge
        };
        assert_eq!(
            &Answer {
                challenge,
                ..a.clone()
            },
            first,
            "{what}: {codec:?} differs from HTTP/1.1"
        );
    }
    first.clone()
}

/// A GET of `path` once its `Repr-Digest` is known (the digest is computed in the background),
/// within 20 s.
async fn get_with_digest(c: &Composed, path: &str) -> Result<Answer, BoxError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let a = http_answer(c, Codec::Http1Tls, &get(path)).await?;
        if a.repr_digest.is_some() {
            return Ok(a);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("no Repr-Digest for {path} within 20 s").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn sha256_field(bytes: &[u8]) -> String {
    xfer_core::Sha256Digest::of(bytes).to_header_value()
}

/// Over the one composed server, uploads, refusals, `Repr-Digest` and what a `COPY` stored are
/// answered alike by HTTP/1.1, HTTP/2 and QUIC: they share one request core, so its digests,
/// uploads and access rules are the same object for every codec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_refusals_and_digests_answer_the_same_over_http_and_quic() -> Result<(), BoxError> {
    let c = composed().await?;
    let addr = c.servers.quic_addr.ok_or("no quic server")?;
    let (_endpoint, quic) = quic_connect(addr, c.client_tls.clone()).await?;
    let sha = sha256_field(&c.content);

    // Repr-Digest on a GET: once known, every codec sends the same one.
    get_with_digest(&c, "/f.bin").await?;
    let got = same("get", &answers(&c, &quic, &get("/f.bin")).await?);
    assert_eq!(got.status, 200);
    assert_eq!(got.repr_digest.as_deref(), Some(sha.as_str()));
    assert_eq!(got.body.as_deref(), Some(c.content.as_slice()));

    // 401 without a token or with an unknown one, 403 out of the token's scope; nothing stored.
    for (what, token, path, status) in [
        ("anonymous put", None, "/in/refused.bin", 401),
        (
            "unknown token",
            Some("no-such-token"),
            "/in/refused.bin",
            401,
        ),
        ("read-only token", Some(READER), "/in/refused.bin", 403),
        ("outside the prefix", Some(WRITER), "/refused.bin", 403),
    ] {
        let got = same(what, &answers(&c, &quic, &put(path, token, b"x")).await?);
        assert_eq!(got.status, status, "{what}");
        assert_eq!(got.challenge, status == 401, "{what}: WWW-Authenticate");
        assert!(
            !c.root.join(path.trim_start_matches('/')).exists(),
            "{what}"
        );
    }

    // A PUT creates (201) and then replaces (204) over every codec, answering the digest of
    // what was stored; each codec reads what the others wrote.
    let mut created = Vec::new();
    for codec in [Codec::Http1Tls, Codec::Http2Tls, Codec::Quic] {
        let path = format!("/in/{codec:?}.bin");
        let x = put(&path, Some(WRITER), &c.content);
        let answer = match codec {
            Codec::Quic => quic_answer(&quic, &x).await?,
            _ => http_answer(&c, codec, &x).await?,
        };
        created.push((codec, answer));
        assert_eq!(std::fs::read(c.root.join(&path[1..]))?, c.content, "{path}");
    }
    let got = same("put that creates", &created);
    assert_eq!(got.status, 201);
    assert_eq!(got.repr_digest.as_deref(), Some(sha.as_str()));
    let replaced = answers(&c, &quic, &put("/in/Quic.bin", Some(WRITER), &c.content)).await?;
    let got = same("put that replaces", &replaced);
    assert_eq!(got.status, 204);
    assert_eq!(got.repr_digest.as_deref(), Some(sha.as_str()));
    for codec in [Codec::Http1Tls, Codec::Http2Tls, Codec::Quic] {
        let path = format!("/in/{codec:?}.bin");
        get_with_digest(&c, &path).await?;
        let got = same(&path, &answers(&c, &quic, &get(&path)).await?);
        assert_eq!(got.body.as_deref(), Some(c.content.as_slice()), "{path}");
        assert_eq!(got.repr_digest.as_deref(), Some(sha.as_str()), "{path}");
    }

    // COPY is HTTP's alone (xfer/1 has no such request): its refusals agree across the HTTP
    // codecs, and what a pull stored is served alike by all three.
    let source = format!("https://{}/f.bin", c.servers.http_addr);
    let copy = |token| Exchange {
        method: "COPY",
        token,
        headers: vec![("source", source.clone())],
        ..get("/in/copied.bin")
    };
    for (what, token, status) in [
        ("anonymous copy", None, 401),
        ("read-only copy", Some(READER), 403),
    ] {
        let got = same(what, &answers(&c, &quic, &copy(token)).await?);
        assert_eq!(got.status, status, "{what}");
        assert!(!c.root.join("in/copied.bin").exists(), "{what}");
    }
    let pulled = http_answer(&c, Codec::Http2Tls, &copy(Some(WRITER))).await?;
    assert_eq!(pulled.status, 202);
    let markers = String::from_utf8(pulled.body.unwrap_or_default().to_vec())?;
    assert_eq!(
        markers.lines().last(),
        Some("success: Created"),
        "{markers}"
    );
    get_with_digest(&c, "/in/copied.bin").await?;
    let got = same("copied", &answers(&c, &quic, &get("/in/copied.bin")).await?);
    assert_eq!(got.body.as_deref(), Some(c.content.as_slice()));
    assert_eq!(got.repr_digest.as_deref(), Some(sha.as_str()));

    c.servers.shutdown().await;
    Ok(())
}

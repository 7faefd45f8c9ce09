//! Third-party copy decided by the core, without sockets: a scripted runner stands in for the
//! engine. The marker stream, the atomic finish of a pull, a failure's last line, the slot
//! limit, a client that drops the body stopping the copy and removing its files, the remote
//! policy's answer to an IP literal, and failure lines that carry none of the runner's detail.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use xfer_core::progress::Progress;
use xfer_service::tpc::{
    CopyCredentials, CopyDirection, CopyFailed, CopyFailure, CopyJob, CopyOutcome, RemotePolicy,
    RunningCopy,
};
use xfer_service::{
    status, AccessControl, Body, CopyRunner, Credentials, ListingStream, Method, Request, Secret,
    Service, ServiceConfig, Tpc, TpcConfig, UploadConfig,
};

const ACCESS: &str = r#"
[[token]]
name = "fts"
token = "t"
access = "write"
prefix = "/"
"#;

/// What the scripted runner does with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Write a few bytes into a pull's staging file and succeed.
    Succeed,
    /// Fail with a detail that holds a remote's body and a local path.
    Fail,
    /// Write a little, then wait to be stopped.
    Hang,
}

type Seen = (CopyDirection, Vec<(String, String)>, Option<usize>, bool);

#[derive(Debug)]
struct Scripted {
    script: Script,
    /// Jobs seen: direction, headers passed on, lanes, checksum required.
    seen: Mutex<Vec<Seen>>,
    /// Copies told to stop.
    stopped: Arc<Mutex<u32>>,
    started: Mutex<Option<oneshot::Sender<PathBuf>>>,
    /// The credentials each job was given.
    credentials: Mutex<Vec<CopyCredentials>>,
}

impl CopyRunner for Scripted {
    fn schemes(&self) -> &[&str] {
        &["https"]
    }

    fn start(&self, job: CopyJob) -> RunningCopy {
        let CopyJob {
            direction,
            headers,
            lanes,
            verify_checksum,
            credentials,
            stop,
        } = job;
        self.credentials.lock().expect("lock").push(credentials);
        self.seen
            .lock()
            .expect("lock")
            .push((direction.clone(), headers, lanes, verify_checksum));
        let script = self.script;
        let stopped = Arc::clone(&self.stopped);
        let started = self.started.lock().expect("lock").take();
        RunningCopy {
            progress: Progress::new(),
            connections: Default::default(),
            done: Box::pin(async move {
                let into = match &direction {
                    CopyDirection::Pull { into, .. } => Some(into.clone()),
                    CopyDirection::Push { .. } => None,
                };
                match script {
                    Script::Succeed => {
                        if let Some(p) = &into {
                            std::fs::write(p, b"copied bytes").map_err(local)?;
                        }
                        Ok(CopyOutcome {
                            sha256: None,
                            bytes: 12,
                        })
                    }
                    Script::Fail => {
                        Err(CopyFailure::new(
                            CopyFailed::Status(500),
                            format!(
                            "https://remote/x answered 500: <html>secret page</html>; staging {}",
                            into.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
                        ),
                        ))
                    }
                    Script::Hang => {
                        if let Some(p) = &into {
                            std::fs::write(p, b"part").map_err(local)?;
                            if let Some(tx) = started {
                                let _ = tx.send(p.clone());
                            }
                        }
                        stop.await;
                        *stopped.lock().expect("lock") += 1;
                        Err(CopyFailure::new(CopyFailed::Stopped, "interrupted"))
                    }
                }
            }),
        }
    }
}

fn local(e: std::io::Error) -> CopyFailure {
    CopyFailure::new(CopyFailed::Local, e.to_string())
}

fn service(dir: &Path, script: Script, max_active: usize) -> (Service, Arc<Scripted>) {
    std::fs::create_dir_all(dir.join("root")).expect("mkdir");
    let access_file = xfer_test_support::write_access_file(dir, ACCESS);
    let mut cfg = ServiceConfig::new(dir.join("root").canonicalize().expect("root"));
    cfg.repr_digest = false;
    cfg.access = Arc::new(AccessControl::from_file(&access_file, true).expect("access"));
    cfg.uploads = Some(UploadConfig::default());
    let runner = Arc::new(Scripted {
        script,
        seen: Mutex::new(Vec::new()),
        stopped: Arc::new(Mutex::new(0)),
        started: Mutex::new(None),
        credentials: Mutex::new(Vec::new()),
    });
    cfg.tpc = Some(Tpc::new(
        runner.clone(),
        TpcConfig {
            max_active,
            marker_interval: Duration::from_millis(20),
            ..TpcConfig::default()
        },
    ));
    (Service::new(cfg), runner)
}

fn copy(path: &str, fields: &[(&str, &str)]) -> Request {
    let peer: SocketAddr = "127.0.0.1:9".parse().expect("addr");
    let mut r = Request::new(Method::Copy, path, peer, "http/1.1");
    r.credentials = Credentials {
        bearer: Some(Secret::new("t")),
        client_certificate: None,
    };
    r.copy = xfer_service::tpc::CopyHead::from_fields(fields.iter().copied());
    r
}

pub(crate) async fn body_text(body: Body) -> String {
    let Body::Listing(mut stream) = body else {
        panic!("a copy's body is a stream");
    };
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.expect("marker stream"));
    }
    String::from_utf8(out).expect("utf-8")
}

#[tokio::test]
async fn a_pull_lands_under_its_name_only_when_done() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, runner) = service(dir.path(), Script::Succeed, 4);
    let plan = svc
        .respond(&copy(
            "/in/new.bin",
            &[
                ("Source", "davs://remote/x"),
                ("TransferHeaderAuthorization", "Bearer r"),
                ("X-Number-Of-Streams", "500"),
                ("RequireChecksumVerification", "TRUE"),
            ],
        ))
        .await;
    assert_eq!(plan.status, status::ACCEPTED);
    assert_eq!(plan.content_type, "text/perf-marker-stream");
    let text = body_text(plan.body).await;
    assert!(text.starts_with("Perf Marker\n"), "{text}");
    assert!(text.ends_with("End\nsuccess: Created\n"), "{text}");
    assert!(text.contains("Stripe Bytes Transferred: 12\n"), "{text}");
    let root = dir.path().join("root").canonicalize().expect("root");
    assert_eq!(
        std::fs::read(root.join("in/new.bin")).expect("final file"),
        b"copied bytes"
    );
    let seen = runner.seen.lock().expect("lock").clone();
    let (direction, headers, lanes, verify_checksum) = &seen[0];
    assert!(
        *verify_checksum,
        "RequireChecksumVerification reaches the runner"
    );
    match direction {
        CopyDirection::Pull { url, into } => {
            assert_eq!(url, "https://remote/x");
            assert_eq!(into.parent(), Some(root.join("in").as_path()));
            let name = into.file_name().and_then(|n| n.to_str()).unwrap_or("");
            assert!(name.starts_with(".xfer-upload."), "{name}");
        }
        other => panic!("not a pull: {other:?}"),
    }
    assert_eq!(
        headers,
        &vec![("Authorization".to_string(), "Bearer r".to_string())]
    );
    assert_eq!(*lanes, Some(64), "capped at max_streams");
}

#[tokio::test]
async fn a_failure_is_one_last_line_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, _) = service(dir.path(), Script::Fail, 4);
    std::fs::write(dir.path().join("root/f.bin"), b"x").expect("write");
    for (path, field) in [("/in/x.bin", "Source"), ("/f.bin", "Destination")] {
        let plan = svc
            .respond(&copy(path, &[(field, "https://remote/x")]))
            .await;
        assert_eq!(plan.status, status::ACCEPTED);
        let text = body_text(plan.body).await;
        assert!(
            text.ends_with("failure: the remote answered 500\n"),
            "{text}"
        );
        assert!(!text.contains("secret"), "a remote's body: {text}");
        assert!(!text.contains(".xfer-upload"), "a local path: {text}");
        assert!(!text.contains(&*dir.path().to_string_lossy()), "{text}");
    }
    assert!(std::fs::read_dir(dir.path().join("root/in"))
        .expect("dir")
        .next()
        .is_none());
}

#[tokio::test]
async fn dropping_the_body_stops_the_copy_and_frees_its_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, runner) = service(dir.path(), Script::Hang, 1);
    let (tx, rx) = oneshot::channel();
    *runner.started.lock().expect("lock") = Some(tx);
    let plan = svc
        .respond(&copy("/in/slow.bin", &[("Source", "https://remote/x")]))
        .await;
    assert_eq!(plan.status, status::ACCEPTED);
    let staging = rx.await.expect("the copy started");
    assert!(staging.exists());

    let busy = svc
        .respond(&copy("/in/other.bin", &[("Source", "https://remote/x")]))
        .await;
    assert_eq!(busy.status, status::TOO_MANY_REQUESTS);
    assert!(busy.headers.iter().any(|(n, _)| *n == "retry-after"));

    let Body::Listing(mut stream) = plan.body else {
        panic!("a copy's body is a stream");
    };
    let first = stream.next().await.expect("a marker").expect("bytes");
    assert!(first.starts_with(b"Perf Marker\n"));
    drop::<ListingStream>(stream);
    xfer_test_support::wait_until_async(
        Duration::from_secs(10),
        "the dropped copy to stop its runner and remove its staging file",
        || *runner.stopped.lock().expect("lock") == 1 && !staging.exists(),
    )
    .await;
    assert_eq!(*runner.stopped.lock().expect("lock"), 1);
    assert!(!staging.exists(), "staging file left behind");
    assert!(!dir.path().join("root/in/slow.bin").exists());
    // The slot comes back once the copy has cleaned up.
    let mut status_seen = 0;
    for _ in 0..200 {
        let again = svc
            .respond(&copy("/in/third.bin", &[("Source", "https://remote/x")]))
            .await;
        status_seen = again.status;
        if status_seen == status::ACCEPTED {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status_seen, status::ACCEPTED);
}

#[tokio::test]
async fn without_tpc_or_uploads_copy_is_not_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("root")).expect("mkdir");
    let access_file = xfer_test_support::write_access_file(dir.path(), ACCESS);
    let mut cfg = ServiceConfig::new(dir.path().join("root").canonicalize().expect("root"));
    cfg.access = Arc::new(AccessControl::from_file(&access_file, true).expect("access"));
    let off = Service::new(cfg.clone());
    let plan = off
        .respond(&copy("/x.bin", &[("Source", "https://remote/x")]))
        .await;
    assert_eq!(plan.status, status::METHOD_NOT_ALLOWED);
    // Copy on, uploads off: a push may run, a pull may not.
    let (with_tpc, _) = service(&dir.path().join("b"), Script::Succeed, 1);
    cfg.tpc = with_tpc.config().tpc.clone();
    let no_uploads = Service::new(cfg);
    let plan = no_uploads
        .respond(&copy("/x.bin", &[("Source", "https://remote/x")]))
        .await;
    assert_eq!(plan.status, status::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_literal_internal_remote_is_refused_before_the_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, runner) = service(dir.path(), Script::Succeed, 4);
    std::fs::write(dir.path().join("root/f.bin"), b"x").expect("write");
    for (path, field, remote) in [
        ("/in/a.bin", "Source", "https://127.0.0.1:8443/x"),
        (
            "/in/b.bin",
            "Source",
            "davs://[::ffff:169.254.169.254]/latest",
        ),
        ("/f.bin", "Destination", "https://10.1.2.3/x"),
        ("/f.bin", "Destination", "https://[::1]:1094/x"),
    ] {
        let plan = svc.respond(&copy(path, &[(field, remote)])).await;
        assert_eq!(plan.status, status::FORBIDDEN, "{field}: {remote}");
        let Body::Message(text) = plan.body else {
            panic!("a refusal has a message");
        };
        assert_eq!(
            &text[..],
            b"the remote is not allowed by the server's copy policy\n"
        );
    }
    assert!(runner.seen.lock().expect("lock").is_empty(), "nothing ran");
    assert!(!dir.path().join("root/in/a.bin").exists());

    // Allowed by network, the same remote starts.
    let mut cfg = svc.config().clone();
    let tpc = cfg.tpc.as_mut().expect("tpc on");
    let mut tpc_cfg = tpc.config.clone();
    tpc_cfg.remote_policy = RemotePolicy::allowing(["127.0.0.0/8".parse().expect("net")]);
    *tpc = Tpc::new(runner.clone(), tpc_cfg);
    let allowed = Service::new(cfg);
    let plan = allowed
        .respond(&copy(
            "/in/a.bin",
            &[("Source", "https://127.0.0.1:8443/x")],
        ))
        .await;
    assert_eq!(plan.status, status::ACCEPTED);
    assert!(body_text(plan.body).await.ends_with("success: Created\n"));
}

#[tokio::test]
async fn credential_none_is_understood_and_delegation_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, runner) = service(dir.path(), Script::Succeed, 4);
    let src = ("Source", "https://remote/x");
    for (i, fields, expected) in [
        (0, vec![src], CopyCredentials::Server),
        (1, vec![src, ("Credential", "none")], CopyCredentials::None),
        (
            2,
            vec![src, ("X-No-Delegate", "true")],
            CopyCredentials::None,
        ),
        (
            3,
            vec![
                src,
                ("ClientInfo", "job-id=1;file-id=2;retry=0\nforged"),
                ("SciTag", "206"),
            ],
            CopyCredentials::Server,
        ),
        (4, vec![src, ("SciTag", "64")], CopyCredentials::Server),
    ] {
        let plan = svc.respond(&copy(&format!("/in/{i}.bin"), &fields)).await;
        assert_eq!(plan.status, status::ACCEPTED, "{fields:?}");
        assert!(body_text(plan.body).await.ends_with("success: Created\n"));
        let seen = runner.credentials.lock().expect("lock").clone();
        assert_eq!(seen.last(), Some(&expected), "{fields:?}");
    }
    for (value, text) in [
        ("gridsite", "this server delegates no credentials"),
        ("oidc", "this server delegates no credentials"),
        ("x509-magic", "unknown Credential value"),
    ] {
        let plan = svc
            .respond(&copy("/in/refused.bin", &[src, ("Credential", value)]))
            .await;
        assert_eq!(plan.status, status::BAD_REQUEST, "{value}");
        let Body::Message(body) = plan.body else {
            panic!("a refusal has a message");
        };
        assert!(String::from_utf8_lossy(&body).starts_with(text), "{value}");
    }
    assert_eq!(
        runner.credentials.lock().expect("lock").len(),
        5,
        "refused copies never ran"
    );
}

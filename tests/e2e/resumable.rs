//! Resumable uploads (draft-ietf-httpbis-resumable-upload-12, interop version 9) driven by
//! curl exactly as the draft's examples do, over HTTP/1.1 and HTTP/2 with TLS: creation with
//! part of the file, an append cut off by killing the client mid-body, offset retrieval,
//! a wrong offset answered 409 with the right one, the resumed append completing the upload
//! byte-identical, cancellation, and the access rules (no token 401, read-only token 403).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    require_program, sha256_file, write_random_file, BoxError, Fixture, Proto, TestResult, MIB,
};
use crate::upload::configure;

/// One curl exchange: status, response header fields (lower-case names, last of each) and
/// body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Curl {
    bin: PathBuf,
    ca: PathBuf,
    base: String,
    http2: bool,
}

impl Curl {
    fn command(&self, method: &str, path: &str, token: Option<&str>, headers: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(["-sS", "-D", "-", "--cacert"]).arg(&self.ca);
        c.arg(if self.http2 { "--http2" } else { "--http1.1" });
        if method == "HEAD" {
            c.arg("-I");
        } else {
            c.args(["-X", method]);
        }
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        for h in headers {
            c.args(["-H", h]);
        }
        c.arg(format!("{}{path}", self.base));
        c
    }

    fn run(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[&str],
        body: Option<&Path>,
    ) -> Result<Answer, BoxError> {
        let mut c = self.command(method, path, token, headers);
        if let Some(b) = body {
            c.arg("--data-binary").arg(format!("@{}", b.display()));
        }
        parse(&c.output()?).map_err(|e| format!("{method} {path}: {e}").into())
    }
}

/// `-D -` writes every response head (interim ones too) before the body.
fn parse(out: &Output) -> Result<Answer, BoxError> {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("curl failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let mut status = 0;
    let mut headers = Vec::new();
    let mut rest = text.as_str();
    // The last head is the final response.
    while let Some(line_end) = rest.find("\r\n") {
        let line = &rest[..line_end];
        if !line.starts_with("HTTP/") {
            break;
        }
        status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("no status")?;
        headers.clear();
        let head_end = rest.find("\r\n\r\n").ok_or("no end of head")?;
        for h in rest[..head_end].split("\r\n").skip(1) {
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        rest = &rest[head_end + 4..];
    }
    Ok(Answer {
        status,
        headers,
        body: rest.to_string(),
    })
}

fn slice(src: &Path, dest: &Path, range: std::ops::Range<usize>) -> Result<PathBuf, BoxError> {
    let all = std::fs::read(src)?;
    std::fs::write(dest, &all[range])?;
    Ok(dest.to_path_buf())
}

fn sha_header(file: &Path) -> Result<String, BoxError> {
    let digest = xfer_core::digest::Sha256Digest::of(&std::fs::read(file)?);
    Ok(format!("Repr-Digest: {}", digest.to_header_value()))
}

/// The staging file of the one upload in `dir`, when there is one.
fn staging_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".xfer-upload."))
        })
}

const VERSION: &str = "Upload-Draft-Interop-Version: 9";

async fn interrupted_then_resumed(proto: Proto) -> TestResult {
    let Some(bin) = require_program("curl", &["/usr/bin/curl"], "curl") else {
        return Ok(());
    };
    let fx = Fixture::start_with(proto, configure).await?;
    let curl = Curl {
        bin,
        ca: fx.ca_cert().ok_or("no CA")?,
        base: fx.servers.http_base(),
        http2: proto == Proto::Http2Tls,
    };
    let size = 24 * MIB as usize + 4321;
    let src = fx.out().join("src.bin");
    let sha = write_random_file(&src, size as u64, 61)?;
    let first = slice(&src, &fx.out().join("first"), 0..MIB as usize)?;
    let dest = fx.root().join("in/r/file.bin");
    let length = format!("Upload-Length: {size}");

    // OPTIONS tells the limits.
    let opts = curl.run("OPTIONS", "/in/r/file.bin", None, &[], None)?;
    assert!(
        opts.header("upload-limit")
            .is_some_and(|l| l.contains("max-size=")),
        "{:?}",
        opts.headers
    );

    // No token, a read-only token: refused, nothing written.
    let creation = ["Upload-Complete: ?0", VERSION, &length];
    let anon = curl.run("POST", "/in/r/file.bin", None, &creation, Some(&first))?;
    assert_eq!(anon.status, 401);
    assert!(anon.header("www-authenticate").is_some());
    let reader = curl.run(
        "POST",
        "/in/r/file.bin",
        Some("read-token"),
        &creation,
        Some(&first),
    )?;
    assert_eq!(reader.status, 403);
    assert!(!fx.root().join("in").exists(), "a refusal wrote something");

    // Creation with the first MiB (the draft's example 2): 201 with the upload resource.
    let created = curl.run(
        "POST",
        "/in/r/file.bin",
        Some("upload-token"),
        &creation,
        Some(&first),
    )?;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.header("upload-complete"), Some("?0"));
    assert_eq!(created.header("upload-offset"), Some(&*MIB.to_string()));
    let location = created.header("location").ok_or("no Location")?.to_string();
    assert!(location.starts_with("/.xfer/uploads/"), "{location}");
    assert!(!dest.exists());

    // The upload resource answers only to who may write the target.
    assert_eq!(curl.run("HEAD", &location, None, &[], None)?.status, 401);
    assert_eq!(
        curl.run("HEAD", &location, Some("read-token"), &[], None)?
            .status,
        403
    );

    // An append whose client dies mid-body.
    let mut child = curl
        .command(
            "PATCH",
            &location,
            Some("upload-token"),
            &[
                "Upload-Complete: ?1",
                "Upload-Offset: 1048576",
                "Content-Type: application/partial-upload",
                VERSION,
            ],
        )
        .args(["-T", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let all = std::fs::read(&src)?;
    {
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        stdin.write_all(&all[MIB as usize..9 * MIB as usize])?;
        stdin.flush()?;
        let staging = staging_file(&fx.root().join("in/r")).ok_or("no staging file")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::metadata(&staging)?.len() < 3 * MIB {
            assert!(Instant::now() < deadline, "the append made no progress");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill()?;
        child.wait()?;
    }
    assert!(
        !dest.exists(),
        "an interrupted upload reached the final name"
    );

    // Offset retrieval.
    let deadline = Instant::now() + Duration::from_secs(30);
    let offset: u64 = loop {
        let head = curl.run("HEAD", &location, Some("upload-token"), &[VERSION], None)?;
        assert_eq!(head.status, 204);
        assert_eq!(head.header("upload-complete"), Some("?0"));
        assert_eq!(head.header("upload-length"), Some(&*size.to_string()));
        assert_eq!(head.header("cache-control"), Some("no-store"));
        assert!(head.header("upload-limit").is_some());
        let o: u64 = head.header("upload-offset").ok_or("no offset")?.parse()?;
        // The server may still be writing what reached it before the cut; a second look
        // waits for that.
        let again = curl.run("HEAD", &location, Some("upload-token"), &[VERSION], None)?;
        if again.header("upload-offset") == Some(&*o.to_string()) {
            break o;
        }
        assert!(Instant::now() < deadline, "the offset never settled");
    };
    assert!(
        (3 * MIB..=9 * MIB).contains(&offset),
        "offset {offset} after the cut"
    );

    // A wrong offset: 409 with the right one. (Refusals come before the content is read; a
    // small one keeps the client from racing the answer.)
    let rest = slice(&src, &fx.out().join("rest"), offset as usize..size)?;
    let small = slice(&src, &fx.out().join("small"), 0..4096)?;
    let patch = |off: u64, extra: &[&str], content: &Path| -> Result<Answer, BoxError> {
        let o = format!("Upload-Offset: {off}");
        let mut h = vec![
            "Upload-Complete: ?1",
            "Content-Type: application/partial-upload",
            VERSION,
            &o,
        ];
        h.extend_from_slice(extra);
        curl.run("PATCH", &location, Some("upload-token"), &h, Some(content))
    };
    let wrong = patch(offset + 1, &[], &small)?;
    assert_eq!(wrong.status, 409, "{}", wrong.body);
    assert_eq!(wrong.header("upload-offset"), Some(&*offset.to_string()));
    assert_eq!(wrong.header("upload-complete"), Some("?0"));
    assert_eq!(
        wrong.header("content-type"),
        Some("application/problem+json")
    );
    let problem: serde_json::Value = serde_json::from_str(&wrong.body)?;
    assert_eq!(problem["expected-offset"], offset);
    assert_eq!(problem["provided-offset"], offset + 1);

    // The wrong media type is refused before anything is read.
    let o = format!("Upload-Offset: {offset}");
    let plain = curl.run(
        "PATCH",
        &location,
        Some("upload-token"),
        &["Upload-Complete: ?1", VERSION, &o],
        Some(&small),
    )?;
    assert_eq!(plain.status, 415);

    // Resume from the offset and complete, declaring the whole file's digest.
    let repr = sha_header(&src)?;
    let done = patch(offset, &[&repr], &rest)?;
    assert_eq!(done.status, 201, "{}", done.body);
    assert_eq!(done.header("upload-complete"), Some("?1"));
    assert!(done.header("repr-digest").is_some());
    assert_eq!(sha256_file(&dest)?, sha, "the stored file differs");
    assert!(staging_file(&fx.root().join("in/r")).is_none());
    let after = curl.run("HEAD", &location, Some("upload-token"), &[VERSION], None)?;
    assert_eq!(after.header("upload-complete"), Some("?1"));
    assert_eq!(after.header("upload-offset"), Some(&*size.to_string()));

    // Cancellation: the upload resource and its bytes go away.
    let other = curl.run(
        "PUT",
        "/in/r/other.bin",
        Some("upload-token"),
        &creation,
        Some(&first),
    )?;
    assert_eq!(other.status, 201);
    let other_loc = other.header("location").ok_or("no Location")?.to_string();
    assert!(staging_file(&fx.root().join("in/r")).is_some());
    let cancel = curl.run("DELETE", &other_loc, Some("upload-token"), &[VERSION], None)?;
    assert_eq!(cancel.status, 204);
    assert_eq!(
        curl.run("HEAD", &other_loc, Some("upload-token"), &[VERSION], None)?
            .status,
        404
    );
    assert!(staging_file(&fx.root().join("in/r")).is_none());
    assert!(!fx.root().join("in/r/other.bin").exists());

    // A whole file in one creation request (the draft's upgrade of a plain upload), with a
    // wrong Repr-Digest: rejected as complete, nothing stored.
    let bad = curl.run(
        "PUT",
        "/in/r/bad.bin",
        Some("upload-token"),
        &["Upload-Complete: ?1", VERSION, &sha_header(&first)?],
        Some(&src),
    )?;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.header("upload-complete"), Some("?1"));
    assert!(!fx.root().join("in/r/bad.bin").exists());
    assert!(staging_file(&fx.root().join("in/r")).is_none());
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curl_resumes_an_interrupted_upload_http1() -> TestResult {
    interrupted_then_resumed(Proto::Http1Tls).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curl_resumes_an_interrupted_upload_http2() -> TestResult {
    interrupted_then_resumed(Proto::Http2Tls).await
}

/// The disk fills up during a resumable upload: 507 with the offset reached, nothing under
/// the final name, the server goes on serving, and cancelling frees the space.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_disk_answers_507_with_the_offset() -> TestResult {
    let Some(bin) = require_program("curl", &["/usr/bin/curl"], "curl") else {
        return Ok(());
    };
    let fx = Fixture::start_with(Proto::Http2Tls, configure).await?;
    let Some(disk) = crate::disk_full::SmallDisk::mount(&fx.root().join("in"), 8)? else {
        return Ok(());
    };
    let curl = Curl {
        bin,
        ca: fx.ca_cert().ok_or("no CA")?,
        base: fx.servers.http_base(),
        http2: true,
    };
    let src = fx.out().join("big.bin");
    write_random_file(&src, 16 * MIB, 62)?;
    let readable = write_random_file(&fx.root().join("other.bin"), MIB, 63)?;
    let full = curl.run(
        "PUT",
        "/in/big.bin",
        Some("upload-token"),
        &["Upload-Complete: ?1", VERSION],
        Some(&src),
    )?;
    assert_eq!(full.status, 507, "{}", full.body);
    assert_eq!(full.header("upload-complete"), Some("?0"));
    let offset: u64 = full.header("upload-offset").ok_or("no offset")?.parse()?;
    assert!(offset <= 8 * MIB, "offset {offset} on an 8 MiB disk");
    assert!(!disk.dir.join("big.bin").exists());
    let location = full.header("location").ok_or("no Location")?.to_string();
    // Still serving.
    let dest = fx.out().join("other.bin");
    let got = Command::new(&curl.bin)
        .args(["-sS", "--cacert"])
        .arg(&curl.ca)
        .arg("-o")
        .arg(&dest)
        .arg(format!("{}/other.bin", curl.base))
        .status()?;
    assert!(got.success());
    assert_eq!(sha256_file(&dest)?, readable);
    // Cancelling removes the partial bytes.
    let cancel = curl.run("DELETE", &location, Some("upload-token"), &[VERSION], None)?;
    assert_eq!(cancel.status, 204);
    assert!(staging_file(&disk.dir).is_none());
    drop(disk);
    fx.shutdown().await;
    Ok(())
}

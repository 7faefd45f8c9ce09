//! Interop with stock tools: `xfer get` from nginx (with ranges, and with ranges turned off),
//! curl fetching a range from `xfer serve` run as its own process, and the field's WebDAV
//! clients — `davix-ls` and rclone's webdav backend — listing an xfer server over https.
//!
//! nginx, curl, davix and rclone come from Debian (`nginx-light`, `curl`, `davix`, `rclone`).
//! When missing, the tests print why and skip, except under `CI=true`, where they fail.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use std::collections::BTreeSet;

use crate::support::{
    free_port, json_report, require_program, run_xfer, sha256_file, u64_field, wait_listening,
    write_random_file, BoxError, ChildGuard, Fixture, Proto, TestResult, MIB,
};

/// nginx serving `dir/www` on a loopback port, as a child process.
pub(crate) struct Nginx {
    _child: ChildGuard,
    pub(crate) addr: SocketAddr,
}

/// `directives` go into the `server` block (`max_ranges 0;`, `autoindex on;`).
pub(crate) fn start_nginx(bin: &Path, dir: &Path, directives: &str) -> Result<Nginx, BoxError> {
    for sub in ["www", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let mut last = String::new();
    // A port free when asked can be taken before nginx binds it: try a few.
    for _ in 0..5 {
        let port = free_port()?;
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 128; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/client_body;\n\
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  default_type application/octet-stream;\n\
             server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n    {directives}\n  }}\n}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let mut child = Command::new(bin)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match wait_listening(addr, &mut child, Duration::from_secs(10)) {
            Ok(()) => {
                return Ok(Nginx {
                    _child: ChildGuard(child),
                    addr,
                })
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                last = format!(
                    "{e}; error.log: {}",
                    std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
                );
            }
        }
    }
    Err(format!("nginx did not start: {last}").into())
}

pub(crate) fn nginx() -> Option<std::path::PathBuf> {
    require_program(
        "nginx",
        &["/usr/sbin/nginx", "/usr/local/sbin/nginx"],
        "nginx-light",
    )
}

/// nginx serving `crate::tree::build_tree` at `/run/` under `dir/www` with `directives`: the
/// server, the tree's URL and its file count; `None` (skip) without nginx.
pub(crate) fn nginx_with_tree(
    dir: &Path,
    directives: &str,
) -> Result<Option<(Nginx, String, u64)>, BoxError> {
    let Some(bin) = nginx() else {
        return Ok(None);
    };
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("run"))?;
    let files = crate::tree::build_tree(&www.join("run"))?;
    let server = start_nginx(&bin, dir, directives)?;
    let url = format!("http://{}/run/", server.addr);
    Ok(Some((server, url, files)))
}

/// `xfer get` from nginx; returns the JSON report after checking the file.
async fn get_from_nginx(ranges: bool) -> Result<Option<serde_json::Value>, BoxError> {
    let Some(bin) = nginx() else {
        return Ok(None);
    };
    let dir = tempfile::tempdir()?;
    let size = 20 * MIB + 999;
    std::fs::create_dir_all(dir.path().join("www"))?;
    let expected = write_random_file(&dir.path().join("www/data.bin"), size, 9)?;
    let server = start_nginx(&bin, dir.path(), if ranges { "" } else { "max_ranges 0;" })?;
    let dest = dir.path().join("got.bin");
    let out = run_xfer(vec![
        "get".into(),
        format!("http://{}/data.bin", server.addr),
        "-o".into(),
        dest.display().to_string(),
        "--protocol".into(),
        "http1".into(),
        "-c".into(),
        "8".into(),
        "--chunk-size".into(),
        "1MiB".into(),
        "--json".into(),
    ])
    .await?;
    assert!(
        out.status.success(),
        "xfer get from nginx failed: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report(&out)?;
    assert_eq!(u64_field(&report, "size")?, size);
    assert_eq!(report["sha256"].as_str(), Some(expected.as_str()));
    assert_eq!(sha256_file(&dest)?, expected, "file from nginx differs");
    Ok(Some(report))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfer_get_from_nginx_with_ranges() -> TestResult {
    let Some(report) = get_from_nginx(true).await? else {
        return Ok(());
    };
    // Ranges were used: one range request per chunk (1 MiB, the tail smaller), over 8 lanes.
    let size = u64_field(&report, "size")?;
    let chunks = u64::from(xfer::ChunkPlan::tapered(size, MIB)?.chunk_count());
    assert_eq!(u64_field(&report, "chunks")?, chunks);
    let lanes = report["lanes"].as_array().ok_or("no lanes")?;
    assert_eq!(lanes.len(), 8);
    let fetched: u64 = lanes.iter().filter_map(|l| l["chunks"].as_u64()).sum();
    assert_eq!(fetched, chunks, "{report}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfer_get_from_nginx_without_ranges_falls_back_to_one_stream() -> TestResult {
    let Some(report) = get_from_nginx(false).await? else {
        return Ok(());
    };
    assert_eq!(u64_field(&report, "chunks")?, 1, "{report}");
    assert_eq!(
        report["lanes"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_a_range_from_xfer_serve() -> TestResult {
    let Some(curl) = require_program("curl", &["/usr/bin/curl"], "curl") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    write_random_file(&root.join("r.bin"), 100_000, 11)?;
    let source = std::fs::read(root.join("r.bin"))?;
    let certs = dir.path().join("certs");

    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut child = ChildGuard(
            Command::new(crate::support::xfer_bin())
                .arg("serve")
                .arg(&root)
                .args(["--self-signed", "--no-quic", "--listen", &addr.to_string()])
                .arg("--cert-dir")
                .arg(&certs)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        if let Err(e) = wait_listening(addr, &mut child.0, Duration::from_secs(20)) {
            last = e.to_string();
            continue;
        }
        let out = tokio::task::spawn_blocking({
            let curl = curl.clone();
            let ca = certs.join("cert.pem");
            move || {
                Command::new(curl)
                    .args(["-sS", "--cacert"])
                    .arg(ca)
                    .args(["-r", "1000-1999", "-w", "%{http_code}", "-o", "-"])
                    .arg(format!("https://127.0.0.1:{port}/r.bin"))
                    .output()
            }
        })
        .await??;
        assert!(
            out.status.success(),
            "curl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (body, code) = out.stdout.split_at(out.stdout.len().saturating_sub(3));
        assert_eq!(code, b"206", "curl's status");
        assert_eq!(
            body,
            &source[1000..2000],
            "curl's range differs from the file"
        );

        // An unsatisfiable range is refused with 416 and no file bytes.
        let out = Command::new(&curl)
            .args(["-sS", "--cacert"])
            .arg(certs.join("cert.pem"))
            .args([
                "-r",
                "200000-200010",
                "-w",
                "%{http_code}",
                "-o",
                "/dev/null",
            ])
            .arg(format!("https://127.0.0.1:{port}/r.bin"))
            .output()?;
        assert_eq!(
            out.stdout,
            b"416",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Ok(());
    }
    Err(format!("xfer serve did not start: {last}").into())
}

/// A tree with the names listings get wrong: spaces, `%`, XML metacharacters, unicode, an
/// empty file and an empty directory. `None` is a directory.
const LISTED_TREE: &[(&str, Option<&str>)] = &[
    ("f.bin", Some("0123456789")),
    ("empty file", Some("")),
    ("100% done.txt", Some("pct")),
    ("a&b <c>.txt", Some("xml")),
    ("ünïcødé ☃.txt", Some("snow")),
    ("empty dir", None),
    ("sub", None),
    ("sub/deeper", None),
    ("sub/deeper/x y.bin", Some("xy")),
];

/// An xfer server over HTTP/1.1 with TLS, serving [`LISTED_TREE`].
async fn listed_server() -> Result<Fixture, BoxError> {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    for (name, content) in LISTED_TREE {
        let path = fx.root().join(name);
        match content {
            Some(c) => std::fs::write(path, c)?,
            None => std::fs::create_dir_all(path)?,
        }
    }
    Ok(fx)
}

/// `(name, is_dir, size)` of the members of `dir` in [`LISTED_TREE`] (`""` is the root), or of
/// everything below it when `recursive`.
fn expected_members(dir: &str, recursive: bool) -> BTreeSet<(String, bool, u64)> {
    LISTED_TREE
        .iter()
        .filter_map(|(name, content)| {
            let rel = if dir.is_empty() {
                *name
            } else {
                name.strip_prefix(dir)?.strip_prefix('/')?
            };
            (recursive || !rel.contains('/')).then(|| {
                (
                    rel.to_string(),
                    content.is_none(),
                    content.map_or(0, |c| c.len() as u64),
                )
            })
        })
        .collect()
}

async fn run_tool(
    program: std::path::PathBuf,
    args: Vec<String>,
) -> Result<std::process::Output, BoxError> {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(program)
            .args(args)
            // rclone reads no user configuration: the remote is all in the connection string.
            .env("RCLONE_CONFIG", "/dev/null")
            .stdin(Stdio::null())
            .output()
    })
    .await??;
    Ok(out)
}

/// `davix-ls -l` lines: `drwxrwxrwx 0 SIZE DATE TIME NAME`, the name percent-encoded as in the
/// href.
fn parse_davix(stdout: &[u8]) -> Result<BTreeSet<(String, bool, u64)>, BoxError> {
    let text = std::str::from_utf8(stdout)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [perms, _, size, _, _, name] = fields.as_slice() else {
                return Err(format!("unexpected davix-ls line {line:?}").into());
            };
            let name = percent_encoding::percent_decode_str(name).decode_utf8()?;
            let is_dir = perms.starts_with('d');
            Ok((
                name.trim_end_matches('/').to_string(),
                is_dir,
                if is_dir { 0 } else { size.parse()? },
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn davix_ls_lists_an_xfer_server() -> TestResult {
    let Some(davix) = require_program("davix-ls", &["/usr/bin/davix-ls"], "davix") else {
        return Ok(());
    };
    let fx = listed_server().await?;
    // davix takes CAs only as a hashed directory (--capath); the certificate is a fresh
    // self-signed one, so trust is left to the rclone case and this one checks the listing.
    for (dir, path) in [("", "/"), ("sub/deeper", "/sub/deeper/"), ("sub", "/sub")] {
        let out = run_tool(davix.clone(), vec!["-l".into(), "-k".into(), fx.url(path)]).await?;
        assert!(
            out.status.success(),
            "davix-ls {path} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            parse_davix(&out.stdout)?,
            expected_members(dir, false),
            "{path}"
        );
    }
    let out = run_tool(davix, vec!["-k".into(), fx.url("/missing/")]).await?;
    assert!(
        !out.status.success(),
        "davix-ls of a missing directory succeeded"
    );
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rclone_lists_and_reads_an_xfer_server_over_webdav() -> TestResult {
    let Some(rclone) = require_program("rclone", &["/usr/bin/rclone"], "rclone") else {
        return Ok(());
    };
    let fx = listed_server().await?;
    let ca = fx.ca_cert().ok_or("no certificate")?;
    let remote = |path: &str| format!(":webdav,url='{}':{path}", fx.url("/"));
    let with_trust = |mut args: Vec<String>| {
        args.push("--ca-cert".into());
        args.push(ca.display().to_string());
        args
    };
    // Recursive: rclone walks with one PROPFIND Depth: 1 per directory.
    let out = run_tool(
        rclone.clone(),
        with_trust(vec![
            "lsf".into(),
            "-R".into(),
            "--format".into(),
            "ps".into(),
            "--separator".into(),
            "|".into(),
            remote(""),
        ]),
    )
    .await?;
    assert!(
        out.status.success(),
        "rclone lsf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: BTreeSet<(String, bool, u64)> = std::str::from_utf8(&out.stdout)?
        .lines()
        .map(|line| {
            let (path, size) = line.rsplit_once('|').ok_or("no separator")?;
            let is_dir = path.ends_with('/');
            let size = if is_dir { 0 } else { size.parse()? };
            Ok::<_, BoxError>((path.trim_end_matches('/').to_string(), is_dir, size))
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(listed, expected_members("", true));

    // The file a listing names reads back through the same remote.
    let out = run_tool(
        rclone,
        with_trust(vec!["cat".into(), remote("sub/deeper/x y.bin")]),
    )
    .await?;
    assert!(
        out.status.success(),
        "rclone cat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"xy");
    fx.shutdown().await;
    Ok(())
}

/// `xfer get URL/ DEST/` from nginx's `autoindex_format json`: the whole tree (nested, empty
/// files and directories, spaces, `%`, unicode) arrives with its mtimes, one directory listed
/// per request; a re-run fetches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfer_get_a_tree_from_nginx_autoindex_json() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((_server, url, files)) =
        nginx_with_tree(dir.path(), "autoindex on; autoindex_format json;")?
    else {
        return Ok(());
    };
    let www = dir.path().join("www");
    get_tree_and_check(
        &url,
        &dir.path().join("got"),
        &www.join("run"),
        "nginx_json",
        files,
        true,
    )
    .await
}

/// `xfer get URL/ DEST/` of a tree of `files` files served from `served`: listed in `listing`,
/// every file fetched, contents equal and, with `exact_times`, file and directory mtimes equal
/// to the second (HTTP dates carry whole seconds; an HTML index shows minutes, or nothing);
/// then a re-run fetches nothing.
pub(crate) async fn get_tree_and_check(
    url: &str,
    dest: &Path,
    served: &Path,
    listing: &str,
    files: u64,
    exact_times: bool,
) -> TestResult {
    crate::tree::age_dirs(served)?;
    let args = vec![
        "get".to_string(),
        url.to_string(),
        dest.display().to_string(),
        "--chunk-size".into(),
        "256KiB".into(),
        "--json".into(),
    ];
    let out = run_xfer(args.clone()).await?;
    assert!(
        out.status.success(),
        "xfer get {url} failed: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report(&out)?;
    assert_eq!(report["listing"].as_str(), Some(listing), "{report}");
    assert_eq!(u64_field(&report, "fetched")?, files, "{report}");
    let (got, want) = (crate::tree::snapshot(dest)?, crate::tree::snapshot(served)?);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, entry) in &want {
        if let (Some((data, mtime)), Some(Some((got_data, got_mtime)))) = (entry, got.get(name)) {
            assert_eq!(data, got_data, "{name} differs");
            if !exact_times {
                continue;
            }
            assert_eq!(
                whole_seconds(mtime),
                whole_seconds(got_mtime),
                "{name}: mtime"
            );
        }
    }
    let seconds = |m: std::collections::BTreeMap<String, std::time::SystemTime>| {
        m.into_iter()
            .map(|(k, t)| (k, whole_seconds(&t)))
            .collect::<Vec<_>>()
    };
    if exact_times {
        assert_eq!(
            seconds(crate::tree::dir_mtimes(dest)?),
            seconds(crate::tree::dir_mtimes(served)?),
            "directory mtimes"
        );
    }
    let again = json_report(&run_xfer(args).await?)?;
    assert_eq!(u64_field(&again, "fetched")?, 0, "{again}");
    assert_eq!(u64_field(&again, "skipped")?, files, "{again}");
    Ok(())
}

/// Whole seconds since the epoch, as HTTP dates carry times.
fn whole_seconds(t: &std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `xfer get URL/ DEST/` from a WebDAV server nobody here wrote (`rclone serve webdav`): its
/// `GET ?manifest` answer is not a manifest, so the tree is listed with `PROPFIND Depth: 1`,
/// directory by directory, and arrives whole with its mtimes to the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfer_get_a_tree_from_a_webdav_server() -> TestResult {
    get_tree_from_rclone("webdav", "propfind", true).await
}

/// `xfer get URL/ DEST/` of `crate::tree::build_tree` from `rclone serve <kind>`, listed in
/// `listing` (see `get_tree_and_check`).
pub(crate) async fn get_tree_from_rclone(
    kind: &str,
    listing: &str,
    exact_times: bool,
) -> TestResult {
    let Some(rclone) = require_program("rclone", &["/usr/bin/rclone"], "rclone") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let served = dir.path().join("served");
    std::fs::create_dir_all(&served)?;
    let files = crate::tree::build_tree(&served)?;
    let (_server, addr) = rclone_serve(&rclone, kind, &served)?;
    let url = format!("http://{addr}/");
    let dest = dir.path().join("got");
    get_tree_and_check(&url, &dest, &served, listing, files, exact_times).await
}

/// `rclone serve <kind>` of `served` on a free loopback port, with no user configuration.
fn rclone_serve(
    rclone: &Path,
    kind: &str,
    served: &Path,
) -> Result<(ChildGuard, SocketAddr), BoxError> {
    start_child(&format!("rclone serve {kind}"), |addr| {
        let mut c = Command::new(rclone);
        c.args(["serve", kind, "--addr", &addr.to_string()])
            .arg(served)
            .env("RCLONE_CONFIG", "/dev/null");
        c
    })
}

/// Start a server child on a free loopback port (`cmd(addr)`), retrying a port taken between
/// the asking and the binding.
pub(crate) fn start_child(
    what: &str,
    mut cmd: impl FnMut(SocketAddr) -> Command,
) -> Result<(ChildGuard, SocketAddr), BoxError> {
    let mut last = String::new();
    for _ in 0..5 {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let mut child = cmd(addr)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        match wait_listening(addr, &mut child, Duration::from_secs(20)) {
            Ok(()) => return Ok((ChildGuard(child), addr)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                last = e.to_string();
            }
        }
    }
    Err(format!("{what} did not start: {last}").into())
}

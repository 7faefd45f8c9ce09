//! Interop with stock tools: `xfer get` from nginx (with ranges, and with ranges turned off),
//! and curl fetching a range from `xfer serve` run as its own process.
//!
//! nginx and curl come from Debian (`nginx-light`, `curl`). When missing, the tests print why
//! and skip, except under `CI=true`, where they fail.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{
    free_port, json_report, require_program, run_xfer, sha256_file, u64_field, wait_listening,
    write_random_file, BoxError, ChildGuard, TestResult, MIB,
};

/// nginx serving `dir/www` on a loopback port, as a child process.
struct Nginx {
    _child: ChildGuard,
    addr: SocketAddr,
}

fn start_nginx(bin: &Path, dir: &Path, ranges: bool) -> Result<Nginx, BoxError> {
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
             server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n    {}\n  }}\n}}\n",
            if ranges { "" } else { "max_ranges 0;" }
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

fn nginx() -> Option<std::path::PathBuf> {
    require_program(
        "nginx",
        &["/usr/sbin/nginx", "/usr/local/sbin/nginx"],
        "nginx-light",
    )
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
    let server = start_nginx(&bin, dir.path(), ranges)?;
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
    // Ranges were used: one range request per 1 MiB chunk, over 8 lanes.
    assert_eq!(u64_field(&report, "chunks")?, 21);
    let lanes = report["lanes"].as_array().ok_or("no lanes")?;
    assert_eq!(lanes.len(), 8);
    let fetched: u64 = lanes.iter().filter_map(|l| l["chunks"].as_u64()).sum();
    assert_eq!(fetched, 21, "{report}");
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
